//! DescribeTopicPartitions (key 75, v0; KIP-966): topics with their partitions, including the
//! Eligible Leader Replicas and the LastKnownELR, which the Metadata API does not carry. Served
//! from this broker's replayed metadata image, like Metadata.
//!
//! Kafka's rules: an empty topic list means every topic; topics are described in name order;
//! at most `ResponsePartitionLimit` partitions (capped at [`PARTITION_LIMIT_MAX`], Kafka's
//! `max.request.partition.size.limit` default) per answer, with `NextCursor` naming where the
//! next request starts (a topic and partition index; a topic that ends exactly at the limit
//! puts the cursor at the start of the next topic). A `Cursor` starts the answer there; with an
//! explicit topic list the cursor's topic must be in it (`INVALID_REQUEST`), and a negative
//! cursor index is `INVALID_REQUEST`. Requested topics that do not exist are answered with
//! `UNKNOWN_TOPIC_OR_PARTITION` (`INVALID_TOPIC_EXCEPTION` for an illegal name); a partition
//! without a leader with leader -1 and no error, as Kafka does.
//!
//! Each partition also carries Keel's status (a tagged field, `keel_wire::keel_ext`): what a
//! leaderless partition waits for, which the `keel` CLI shows and Kafka clients skip.

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_controller::partition_change::recovery_mode;
use keel_controller::partition_change::PartitionStatus;
use keel_controller::types::{RecoveryMode, TopicPartition};
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use keel_wire::kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use keel_wire::keel_ext::{PartitionStatusCode, PARTITION_STATUS_TAG};
use keel_wire::ResponseError;
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;

/// Most partitions one answer holds (Kafka's `max.request.partition.size.limit` default).
pub const PARTITION_LIMIT_MAX: usize = 2000;

/// `TopicAuthorizedOperations` when not computed (Kafka's "not requested" sentinel).
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    use keel_controller::acl::{AclOperation, ResourceType};
    // Kafka: DESCRIBE on each topic; a listing of all topics leaves the others out quietly.
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeTopicPartitions,
    );
    let may_describe = |name: &str, named: bool| {
        if named {
            authz.topic(AclOperation::Describe, name)
        } else {
            authz.allows_quietly(AclOperation::Describe, ResourceType::Topic, name)
        }
    };
    describe_authorized(&broker.image(), &request, &may_describe)
}

/// The answer for `request` from `image` (a pure function of the two), every topic visible.
pub fn describe(
    image: &ClusterImage,
    request: &DescribeTopicPartitionsRequest,
) -> DescribeTopicPartitionsResponse {
    describe_authorized(image, request, &|_, _| true)
}

/// The answer for `request` from `image` where `may_describe(topic, named)` says which topics
/// the asker may see (`named`: the request named it, so a refusal is answered and logged).
pub fn describe_authorized(
    image: &ClusterImage,
    request: &DescribeTopicPartitionsRequest,
    may_describe: &dyn Fn(&str, bool) -> bool,
) -> DescribeTopicPartitionsResponse {
    let requested: Vec<String> = request.topics.iter().map(|t| t.name.to_string()).collect();
    let all = requested.is_empty();
    if let Some(cursor) = &request.cursor {
        let name = cursor.topic_name.as_str();
        if cursor.partition_index < 0 || (!all && !requested.iter().any(|t| t == name)) {
            return refused(&requested, ResponseError::InvalidRequest);
        }
    }
    let cursor = request
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.to_string(), c.partition_index));
    let mut names: Vec<String> = if all {
        image
            .topics()
            .values()
            .map(|t| t.name.clone())
            .filter(|n| may_describe(n, false))
            .collect()
    } else {
        requested
    };
    names.sort();
    names.dedup();
    if let Some((first, _)) = &cursor {
        names.retain(|n| n >= first);
    }
    let limit = usize::try_from(request.response_partition_limit)
        .unwrap_or(0)
        .clamp(1, PARTITION_LIMIT_MAX);
    let live = image.live_brokers();
    let mut remaining = limit;
    let mut response = DescribeTopicPartitionsResponse::default();
    for name in names {
        if remaining == 0 {
            response.next_cursor = Some(Cursor::default().with_topic_name(topic_name(&name)));
            break;
        }
        if !all && !may_describe(&name, true) {
            response
                .topics
                .push(topic_error(&name, ResponseError::TopicAuthorizationFailed));
            continue;
        }
        let Some(id) = image.topic_id(&name) else {
            if !all {
                let error = match crate::broker::validate_topic_name(&name) {
                    Ok(()) => ResponseError::UnknownTopicOrPartition,
                    Err(_) => ResponseError::InvalidTopicException,
                };
                response.topics.push(topic_error(&name, error));
            }
            continue;
        };
        let start = match &cursor {
            Some((topic, index)) if *topic == name => *index,
            _ => 0,
        };
        let indexes: Vec<u32> = image
            .topic(id)
            .map(|t| t.partitions.keys().copied().collect())
            .unwrap_or_default();
        let from: Vec<u32> = indexes
            .into_iter()
            .filter(|i| i64::from(*i) >= i64::from(start))
            .collect();
        let taken: Vec<u32> = from.iter().copied().take(remaining).collect();
        let next = from.get(taken.len()).copied();
        remaining -= taken.len();
        let partitions = taken
            .iter()
            .filter_map(|i| partition_entry(image, &live, TopicPartition::new(id, *i)))
            .collect();
        response.topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_error_code(0)
                .with_name(Some(topic_name(&name)))
                .with_topic_id(id.0)
                .with_is_internal(name.as_str() == crate::coordinator::OFFSETS_TOPIC)
                .with_partitions(partitions)
                .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED),
        );
        if let Some(next) = next {
            response.next_cursor = Some(
                Cursor::default()
                    .with_topic_name(topic_name(&name))
                    .with_partition_index(i32::try_from(next).unwrap_or(i32::MAX)),
            );
            break;
        }
    }
    response
}

fn topic_name(name: &str) -> TopicName {
    TopicName(str_bytes(name))
}

fn topic_error(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(error.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

/// Kafka's answer to a request it refuses as a whole: each requested topic with the error.
fn refused(requested: &[String], error: ResponseError) -> DescribeTopicPartitionsResponse {
    DescribeTopicPartitionsResponse::default()
        .with_topics(requested.iter().map(|n| topic_error(n, error)).collect())
}

fn ids<'a>(
    brokers: impl IntoIterator<Item = &'a keel_controller::types::BrokerId>,
) -> Vec<BrokerId> {
    brokers.into_iter().map(|b| BrokerId(b.0)).collect()
}

fn partition_entry(
    image: &ClusterImage,
    live: &BTreeSet<keel_controller::types::BrokerId>,
    tp: TopicPartition,
) -> Option<DescribeTopicPartitionsResponsePartition> {
    let p = image.partition(tp)?;
    let offline: Vec<_> = p.replicas.iter().filter(|r| !live.contains(r)).collect();
    let status = keel_status(image, live, tp);
    Some(
        DescribeTopicPartitionsResponsePartition::default()
            // Kafka answers a leaderless partition with no error and leader -1.
            .with_error_code(0)
            .with_partition_index(i32::try_from(tp.partition).unwrap_or(i32::MAX))
            .with_leader_id(BrokerId(p.leader.map_or(-1, |l| l.0)))
            .with_leader_epoch(p.leader_epoch.0)
            .with_replica_nodes(ids(&p.replicas))
            .with_isr_nodes(ids(&p.isr))
            .with_eligible_leader_replicas(Some(ids(&p.elr)))
            .with_last_known_elr(Some(ids(&p.last_known_elr)))
            .with_offline_replicas(ids(offline))
            .with_unknown_tagged_field(PARTITION_STATUS_TAG, status.encode()),
    )
}

/// What the partition waits for, as Keel's tagged field says it.
fn keel_status(
    image: &ClusterImage,
    live: &BTreeSet<keel_controller::types::BrokerId>,
    tp: TopicPartition,
) -> PartitionStatusCode {
    let brokers = |set: &BTreeSet<keel_controller::types::BrokerId>| {
        set.iter().map(|b| b.0).collect::<Vec<i32>>()
    };
    let Some(p) = image.partition(tp) else {
        return PartitionStatusCode::Led;
    };
    match image.partition_status(tp, live) {
        None | Some(PartitionStatus::Led(_)) => PartitionStatusCode::Led,
        Some(PartitionStatus::WaitingForIsrMember(isr)) => {
            PartitionStatusCode::WaitingForIsr(brokers(&isr))
        }
        Some(PartitionStatus::WaitingForElrMember(elr)) => {
            PartitionStatusCode::WaitingForElr(brokers(&elr))
        }
        Some(PartitionStatus::NeedsUncleanRecovery) => {
            let balanced = recovery_mode(p, image.strategy(tp.topic)) == RecoveryMode::Balanced;
            let quorum = if balanced {
                brokers(&keel_controller::recovery::balanced_quorum(p))
            } else {
                p.replicas.iter().map(|b| b.0).collect()
            };
            PartitionStatusCode::UncleanRecovery { balanced, quorum }
        }
        Some(PartitionStatus::PausedForOperator) => PartitionStatusCode::Paused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_controller::records::{PartitionRecord, Record, TopicRecord};
    use keel_controller::types::{BrokerId as B, MetadataOffset, TopicId};
    use keel_controller::PartitionState;
    use keel_wire::kafka_protocol::messages::describe_topic_partitions_request::{
        Cursor as RequestCursor, TopicRequest,
    };

    /// Topics `a` (3 partitions), `b` (2), `c` (1); every partition led by broker 1.
    fn image() -> ClusterImage {
        image_with(|_, _| {})
    }

    /// [`image`], with each partition's state changed by `edit` first.
    fn image_with(edit: impl Fn(TopicPartition, &mut PartitionState)) -> ClusterImage {
        let mut image = ClusterImage::default();
        let mut offset = 0;
        let mut replay = |image: &mut ClusterImage, record: Record| {
            image.replay(MetadataOffset(offset), &record).unwrap();
            offset += 1;
        };
        for (n, (name, count)) in [("b", 2u32), ("a", 3), ("c", 1)].into_iter().enumerate() {
            let id = TopicId(Uuid::from_u128(n as u128 + 1));
            replay(
                &mut image,
                Record::Topic(TopicRecord {
                    name: name.to_string(),
                    id,
                }),
            );
            for i in 0..count {
                let replicas = vec![B(1), B(2)];
                let mut state = PartitionState::new(
                    replicas,
                    vec![None, None],
                    [B(1), B(2)].into_iter().collect(),
                    Some(B(1)),
                );
                edit(TopicPartition::new(id, i), &mut state);
                replay(
                    &mut image,
                    Record::Partition(PartitionRecord {
                        partition: TopicPartition::new(id, i),
                        state,
                    }),
                );
            }
        }
        image
    }

    fn request(
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(topic_name(t)))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, i)| {
                RequestCursor::default()
                    .with_topic_name(topic_name(t))
                    .with_partition_index(i)
            }))
    }

    /// (topic, error code, [partition indexes]) per answered topic, and the next cursor.
    type Summary = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

    fn summary(r: &DescribeTopicPartitionsResponse) -> Summary {
        let topics = r
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                    t.error_code,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            })
            .collect();
        let cursor = r
            .next_cursor
            .as_ref()
            .map(|c| (c.topic_name.to_string(), c.partition_index));
        (topics, cursor)
    }

    // Shows: every topic in name order; a page ends mid-topic with a cursor at the next
    // partition, and at a topic boundary with a cursor at the next topic's start; following
    // the cursors visits every partition exactly once.
    #[test]
    fn pages_follow_the_cursor() {
        let image = image();
        let first = describe(&image, &request(&[], 2, None));
        assert_eq!(
            summary(&first),
            (vec![("a".into(), 0, vec![0, 1])], Some(("a".into(), 2)))
        );
        let second = describe(&image, &request(&[], 3, Some(("a", 2))));
        assert_eq!(
            summary(&second),
            (
                vec![("a".into(), 0, vec![2]), ("b".into(), 0, vec![0, 1])],
                Some(("c".into(), 0))
            )
        );
        let third = describe(&image, &request(&[], 3, Some(("c", 0))));
        assert_eq!(summary(&third), (vec![("c".into(), 0, vec![0])], None));
        let whole = describe(&image, &request(&[], 2000, None));
        assert_eq!(
            summary(&whole).0.iter().map(|t| t.2.len()).sum::<usize>(),
            6
        );
    }

    // Shows: named topics are answered in name order, an unknown one with
    // UNKNOWN_TOPIC_OR_PARTITION and an illegal name with INVALID_TOPIC_EXCEPTION; a cursor
    // naming a topic outside the list, or a negative index, refuses the request.
    #[test]
    fn named_topics_unknown_topics_and_bad_cursors() {
        let image = image();
        let r = describe(
            &image,
            &request(&["c", "nope", "a", "bad/name"], 2000, None),
        );
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let invalid = ResponseError::InvalidTopicException.code();
        assert_eq!(
            summary(&r).0,
            vec![
                ("a".into(), 0, vec![0, 1, 2]),
                ("bad/name".into(), invalid, vec![]),
                ("c".into(), 0, vec![0]),
                ("nope".into(), unknown, vec![]),
            ]
        );
        let bad = ResponseError::InvalidRequest.code();
        for cursor in [("b", 0), ("a", -1)] {
            let r = describe(&image, &request(&["a"], 10, Some(cursor)));
            assert_eq!(summary(&r), (vec![("a".into(), bad, vec![])], None));
        }
    }

    // Shows: ELR and LastKnownELR are always present (empty lists, not null), a leaderless
    // partition has leader -1 and no error (Kafka), and Keel's status tag is attached.
    #[test]
    fn partition_fields() {
        let leaderless = TopicPartition::new(TopicId(Uuid::from_u128(2)), 0);
        let image = image_with(|tp, state| {
            if tp == leaderless {
                state.leader = None;
                state.isr.clear();
                state.elr = [B(2)].into_iter().collect();
            }
        });
        let r = describe(&image, &request(&["a"], 1, None));
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.error_code, 0);
        assert_eq!(p.leader_id.0, -1);
        assert_eq!(p.eligible_leader_replicas, Some(vec![BrokerId(2)]));
        assert_eq!(p.last_known_elr, Some(vec![]));
        let status = PartitionStatusCode::decode(&p.unknown_tagged_fields[&PARTITION_STATUS_TAG]);
        // Broker 2 is not registered, so not live: Balanced waits for it.
        assert_eq!(status, Ok(PartitionStatusCode::WaitingForElr(vec![2])));
    }
}
