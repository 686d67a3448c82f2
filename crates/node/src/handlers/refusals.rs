//! Refused requests, visible to the operator (issue 20): every request the broker answers with
//! an error — other than the routine ones a client handles by itself (a leader or coordinator
//! moved, a group rebalancing, a fetch session to restart) — is logged at INFO with the API,
//! the client id, the peer, the error, its message and the resource it concerns, so why a client
//! fails can be read in the broker's log without the client's debug log. One line per API and
//! error per [`REFUSAL_LOG_INTERVAL`]; the next line says how many were left out.
//!
//! Each response type says where its errors are ([`Refusal`]); the first error that is not
//! routine is the one logged. Kafka has no such log line (its request log at DEBUG logs every
//! request); the routine set below is Kafka's retriable routing errors (`Errors` whose exception
//! is `InvalidMetadataException`, or a coordinator/rebalance retry) plus the group join
//! handshake's MEMBER_ID_REQUIRED.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use keel_wire::kafka_protocol::messages::ApiKey;
use keel_wire::kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, DescribeTransactionsResponse,
    EndTxnResponse, ListTransactionsResponse, TxnOffsetCommitResponse, WriteTxnMarkersResponse,
};
use keel_wire::kafka_protocol::messages::{
    AlterClientQuotasResponse, AlterConfigsResponse, AlterUserScramCredentialsResponse,
    CreateAclsResponse, CreatePartitionsResponse, CreateTopicsResponse, DeleteAclsResponse,
    DeleteGroupsResponse, DeleteRecordsResponse, DeleteTopicsResponse, DescribeAclsResponse,
    DescribeClientQuotasResponse, DescribeClusterResponse, DescribeConfigsResponse,
    DescribeGroupsResponse, DescribeLogDirsResponse, DescribeProducersResponse,
    DescribeTopicPartitionsResponse, DescribeUserScramCredentialsResponse, ElectLeadersResponse,
    FetchResponse, FindCoordinatorResponse, HeartbeatResponse, IncrementalAlterConfigsResponse,
    InitProducerIdResponse, JoinGroupResponse, LeaveGroupResponse, ListConfigResourcesResponse,
    ListGroupsResponse, ListOffsetsResponse, MetadataResponse, OffsetCommitResponse,
    OffsetDeleteResponse, OffsetFetchResponse, OffsetForLeaderEpochResponse, ProduceResponse,
    SyncGroupResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;
use tracing::info;

/// At most one line per API and error code in this interval.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The longest client id or message logged (both are the client's choice).
const MAX_LOGGED_CHARS: usize = 200;

/// Error codes a client handles by itself, not logged: leadership and coordinators that moved
/// or are loading (NOT_LEADER_OR_FOLLOWER 6, LEADER_NOT_AVAILABLE 5, REPLICA_NOT_AVAILABLE 9,
/// COORDINATOR_LOAD_IN_PROGRESS 14, COORDINATOR_NOT_AVAILABLE 15, NOT_COORDINATOR 16,
/// NOT_CONTROLLER 41, FENCED_LEADER_EPOCH 74, UNKNOWN_LEADER_EPOCH 75, OFFSET_NOT_AVAILABLE 78),
/// a group's rebalance and join handshake (REBALANCE_IN_PROGRESS 27, MEMBER_ID_REQUIRED 79) and
/// fetch sessions restarting (FETCH_SESSION_ID_NOT_FOUND 70, INVALID_FETCH_SESSION_EPOCH 71).
const ROUTINE: [i16; 15] = [5, 6, 9, 14, 15, 16, 27, 41, 70, 71, 74, 75, 78, 79, 0];

/// The first error of a response worth the operator's eyes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: i16,
    pub message: Option<String>,
    /// The topic, partition, group or config resource it concerns, if the error is per item.
    pub resource: Option<String>,
}

/// Where a response's errors are.
pub trait Refusal {
    /// The first error that is not routine, if any.
    fn refusal(&self) -> Option<Refused>;
}

/// Walks a response's errors, keeping the first that is not routine.
#[derive(Default)]
struct First(Option<Refused>);

impl First {
    fn see(&mut self, code: i16, message: Option<&StrBytes>, resource: impl FnOnce() -> String) {
        if self.0.is_none() && !ROUTINE.contains(&code) {
            let resource = resource();
            self.0 = Some(Refused {
                code,
                message: message.map(|m| m.to_string()),
                resource: (!resource.is_empty()).then_some(resource),
            });
        }
    }

    fn top(&mut self, code: i16, message: Option<&StrBytes>) {
        self.see(code, message, String::new);
    }
}

fn tp(topic: impl std::fmt::Display, partition: i32) -> String {
    format!("{topic}-{partition}")
}

/// Responses whose only error is one top-level code (and maybe a message).
macro_rules! top_level {
    ($($t:ty => |$r:ident| $message:expr;)*) => {$(
        impl Refusal for $t {
            fn refusal(&self) -> Option<Refused> {
                let $r = self;
                let mut first = First::default();
                first.top($r.error_code, $message);
                first.0
            }
        }
    )*};
}

/// ApiVersions' UNSUPPORTED_VERSION is the version handshake (the client retries with v0): never
/// a refusal.
impl Refusal for keel_wire::kafka_protocol::messages::ApiVersionsResponse {
    fn refusal(&self) -> Option<Refused> {
        None
    }
}

top_level! {
    AddOffsetsToTxnResponse => |_r| None;
    EndTxnResponse => |_r| None;
    ListTransactionsResponse => |_r| None;
    InitProducerIdResponse => |_r| None;
    JoinGroupResponse => |_r| None;
    SyncGroupResponse => |_r| None;
    HeartbeatResponse => |_r| None;
    ListGroupsResponse => |_r| None;
    DescribeClusterResponse => |r| r.error_message.as_ref();
    DescribeClientQuotasResponse => |r| r.error_message.as_ref();
    DescribeAclsResponse => |r| r.error_message.as_ref();
    ListConfigResourcesResponse => |_r| None;
}

impl Refusal for AddPartitionsToTxnResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        let topics = self.results_by_topic_v3_and_below.iter().chain(
            self.results_by_transaction
                .iter()
                .flat_map(|t| &t.topic_results),
        );
        for t in topics {
            for p in &t.results_by_partition {
                first.see(p.partition_error_code, None, || {
                    tp(&t.name.0, p.partition_index)
                });
            }
        }
        first.0
    }
}

impl Refusal for WriteTxnMarkersResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in self.markers.iter().flat_map(|m| &m.topics) {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for TxnOffsetCommitResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for DescribeTransactionsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for s in &self.transaction_states {
            first.see(s.error_code, None, || s.transactional_id.to_string());
        }
        first.0
    }
}

impl Refusal for MetadataResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            let name = t.name.as_ref().map_or(String::new(), |n| n.0.to_string());
            first.see(t.error_code, None, || name.clone());
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&name, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for ProduceResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.responses {
            for p in &t.partition_responses {
                first.see(p.error_code, p.error_message.as_ref(), || {
                    // v13+ names the topic by id only.
                    if t.name.0.is_empty() {
                        tp(keel_log::encode_kafka_uuid(t.topic_id), p.index)
                    } else {
                        tp(&t.name.0, p.index)
                    }
                });
            }
        }
        first.0
    }
}

impl Refusal for FetchResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for t in &self.responses {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.topic.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for ListOffsetsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for DescribeProducersResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, p.error_message.as_ref(), || {
                    tp(&t.name.0, p.partition_index)
                });
            }
        }
        first.0
    }
}

impl Refusal for OffsetForLeaderEpochResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.topic.0, p.partition));
            }
        }
        first.0
    }
}

impl Refusal for CreateTopicsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            first.see(t.error_code, t.error_message.as_ref(), || {
                t.name.0.to_string()
            });
        }
        first.0
    }
}

impl Refusal for DeleteTopicsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.responses {
            first.see(t.error_code, t.error_message.as_ref(), || {
                t.name.as_ref().map_or(String::new(), |n| n.0.to_string())
            });
        }
        first.0
    }
}

impl Refusal for DeleteRecordsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for CreatePartitionsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.results {
            first.see(t.error_code, t.error_message.as_ref(), || {
                t.name.0.to_string()
            });
        }
        first.0
    }
}

impl Refusal for DescribeConfigsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.results {
            first.see(r.error_code, r.error_message.as_ref(), || {
                r.resource_name.to_string()
            });
        }
        first.0
    }
}

impl Refusal for AlterConfigsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.responses {
            first.see(r.error_code, r.error_message.as_ref(), || {
                r.resource_name.to_string()
            });
        }
        first.0
    }
}

impl Refusal for IncrementalAlterConfigsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.responses {
            first.see(r.error_code, r.error_message.as_ref(), || {
                r.resource_name.to_string()
            });
        }
        first.0
    }
}

impl Refusal for keel_wire::kafka_protocol::messages::AlterPartitionReassignmentsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, self.error_message.as_ref());
        for t in &self.responses {
            for p in &t.partitions {
                first.see(p.error_code, p.error_message.as_ref(), || {
                    tp(&t.name.0, p.partition_index)
                });
            }
        }
        first.0
    }
}

impl Refusal for keel_wire::kafka_protocol::messages::ListPartitionReassignmentsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, self.error_message.as_ref());
        first.0
    }
}

impl Refusal for ElectLeadersResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for t in &self.replica_election_results {
            for p in &t.partition_result {
                first.see(p.error_code, p.error_message.as_ref(), || {
                    tp(&t.topic.0, p.partition_id)
                });
            }
        }
        first.0
    }
}

impl Refusal for DescribeTopicPartitionsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            let name = t.name.as_ref().map_or(String::new(), |n| n.0.to_string());
            first.see(t.error_code, None, || name.clone());
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&name, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for DescribeLogDirsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for r in &self.results {
            first.see(r.error_code, None, || r.log_dir.to_string());
        }
        first.0
    }
}

impl Refusal for FindCoordinatorResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, self.error_message.as_ref());
        for c in &self.coordinators {
            first.see(c.error_code, c.error_message.as_ref(), || c.key.to_string());
        }
        first.0
    }
}

impl Refusal for LeaveGroupResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for m in &self.members {
            first.see(m.error_code, None, || m.member_id.to_string());
        }
        first.0
    }
}

impl Refusal for DescribeGroupsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for g in &self.groups {
            first.see(g.error_code, g.error_message.as_ref(), || {
                g.group_id.0.to_string()
            });
        }
        first.0
    }
}

impl Refusal for DeleteGroupsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for g in &self.results {
            first.see(g.error_code, None, || g.group_id.0.to_string());
        }
        first.0
    }
}

impl Refusal for OffsetCommitResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for OffsetFetchResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        for g in &self.groups {
            first.see(g.error_code, None, || g.group_id.0.to_string());
            for t in &g.topics {
                for p in &t.partitions {
                    first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
                }
            }
        }
        first.0
    }
}

impl Refusal for OffsetDeleteResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, None);
        for t in &self.topics {
            for p in &t.partitions {
                first.see(p.error_code, None, || tp(&t.name.0, p.partition_index));
            }
        }
        first.0
    }
}

impl Refusal for CreateAclsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.results {
            first.top(r.error_code, r.error_message.as_ref());
        }
        first.0
    }
}

impl Refusal for DeleteAclsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.filter_results {
            first.top(r.error_code, r.error_message.as_ref());
        }
        first.0
    }
}

impl Refusal for DescribeUserScramCredentialsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        first.top(self.error_code, self.error_message.as_ref());
        for r in &self.results {
            first.see(r.error_code, r.error_message.as_ref(), || {
                r.user.to_string()
            });
        }
        first.0
    }
}

impl Refusal for AlterClientQuotasResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for e in &self.entries {
            first.see(e.error_code, e.error_message.as_ref(), || {
                e.entity
                    .iter()
                    .map(|d| {
                        format!(
                            "{}={}",
                            d.entity_type.as_str(),
                            d.entity_name.as_deref().unwrap_or("<default>")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            });
        }
        first.0
    }
}

impl Refusal for AlterUserScramCredentialsResponse {
    fn refusal(&self) -> Option<Refused> {
        let mut first = First::default();
        for r in &self.results {
            first.see(r.error_code, r.error_message.as_ref(), || {
                r.user.to_string()
            });
        }
        first.0
    }
}

/// The broker's rate limit for refusal lines: per API and error code.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// (api key, error code) → when last logged, lines left out since.
    state: Mutex<BTreeMap<(i16, i16), (tokio::time::Instant, u64)>>,
}

impl RefusalLog {
    /// Whether a refusal of `api` with `code` seen at `now` is logged: `Some(n)` with the `n`
    /// lines left out before it, or `None` (counted).
    fn admit(&self, api: i16, code: i16, now: tokio::time::Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.get_mut(&(api, code)) {
            Some((last, suppressed)) if now.duration_since(*last) < REFUSAL_LOG_INTERVAL => {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                *last = now;
                Some(std::mem::take(suppressed))
            }
            None => {
                // Bounded: API keys and error codes are both small fixed sets.
                state.insert((api, code), (now, 0));
                Some(0)
            }
        }
    }

    /// Logs `body`'s refusal, if it has one and the rate limit lets it through.
    pub fn note(&self, api: ApiKey, client_id: &str, peer: &str, body: &dyn Refusal) {
        let Some(refused) = body.refusal() else {
            return;
        };
        let Some(left_out) = self.admit(api as i16, refused.code, tokio::time::Instant::now())
        else {
            return;
        };
        let error = ResponseError::try_from_code(refused.code).map_or_else(
            || format!("error code {}", refused.code),
            |e| format!("{e:?}"),
        );
        info!(
            api = ?api,
            client_id = %bounded(client_id),
            peer,
            error = %error,
            code = refused.code,
            resource = %refused.resource.as_deref().map_or_else(|| "-".to_string(), bounded),
            detail = %refused.message.as_deref().map_or_else(String::new, bounded),
            left_out,
            "request refused"
        );
    }
}

pub(crate) fn bounded(s: &str) -> String {
    s.chars().take(MAX_LOGGED_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use keel_wire::kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use keel_wire::kafka_protocol::messages::TopicName;

    use super::*;

    fn produce(codes: &[i16]) -> ProduceResponse {
        let partitions = codes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                PartitionProduceResponse::default()
                    .with_index(i as i32)
                    .with_error_code(*c)
                    .with_error_message((*c != 0).then(|| StrBytes::from_static_str("why")))
            })
            .collect();
        ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_responses(partitions)])
    }

    // Shows: routine routing errors are not refusals; the first other error is, with its
    // partition and message.
    #[test]
    fn the_first_error_that_is_not_routine_is_the_refusal() {
        assert_eq!(produce(&[0, 0]).refusal(), None);
        assert_eq!(
            produce(&[6, 0, 74]).refusal(),
            None,
            "NOT_LEADER, FENCED_LEADER_EPOCH"
        );
        assert_eq!(
            produce(&[6, 87, 10]).refusal(),
            Some(Refused {
                code: 87,
                message: Some("why".into()),
                resource: Some("t-1".into())
            })
        );
    }

    // Shows: one line per API and error per REFUSAL_LOG_INTERVAL, the next one counting those
    // left out; another API or error has its own budget.
    #[test]
    fn refusal_lines_are_rate_limited_per_api_and_error() {
        let log = RefusalLog::default();
        let t0 = tokio::time::Instant::now();
        assert_eq!(log.admit(0, 87, t0), Some(0));
        assert_eq!(log.admit(0, 87, t0 + Duration::from_secs(1)), None);
        assert_eq!(log.admit(0, 87, t0 + Duration::from_secs(2)), None);
        assert_eq!(log.admit(0, 10, t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.admit(1, 87, t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.admit(0, 87, t0 + REFUSAL_LOG_INTERVAL), Some(2));
    }
}
