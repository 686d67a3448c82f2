//! ElectLeaders (key 43, v0–2): forwarded to the active controller, which elects (preferred,
//! unclean — KIP-966's unclean recovery when no clean candidate exists — or, with Keel's
//! `DesiredLeaders` tagged field, exactly the named replica) and commits the change. The broker
//! answers the controller's result once the elected leaders are in its own metadata (at most
//! [`METADATA_WAIT_MS`]), so a client's next Metadata request sees them.

use std::sync::Arc;

use keel_controller::types::TopicPartition;
use keel_wire::kafka_protocol::messages::elect_leaders_response::{
    PartitionResult, ReplicaElectionResult,
};
use keel_wire::kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse};
use keel_wire::keel_ext::RECOVERY_STARTED;

use crate::broker::Broker;

/// How long the broker waits for elected leaders to reach its metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: ElectLeadersRequest,
    version: i16,
) -> ElectLeadersResponse {
    // Kafka: ALTER on the cluster (also Keel's election of a named broker, `keel elect --leader`).
    let authz = super::authz::Authz::new(broker, session, ApiKey::ElectLeaders);
    if !authz.cluster(keel_controller::acl::AclOperation::Alter) {
        let code = keel_wire::ResponseError::ClusterAuthorizationFailed.code();
        return failed(&request, version, code, None);
    }
    // Leader epochs before the election: the answer waits until elected partitions moved on.
    let before = broker.image();
    // Forwarded at v1 or later, whose top-level error code says NOT_CONTROLLER even for a
    // request of every partition (v0 has no such field; its body is v1's with ElectionType 0).
    let response: ElectLeadersResponse = match broker
        .controller()
        .forward::<_, ElectLeadersResponse>(ApiKey::ElectLeaders, version.max(1), &request)
        .await
    {
        Ok(response) if version == 0 => response.with_error_code(0),
        Ok(response) => response,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return failed(&request, version, e.code(), e.message_str());
        }
    };
    // Elected (no error, not a recovery that has only started): wait until this broker sees the
    // new leader (a leader epoch past the one before the election).
    let image = broker.image();
    let elected: Vec<(TopicPartition, i32)> = response
        .replica_election_results
        .iter()
        .flat_map(|t| {
            let id = image.topic_id(t.topic.as_str());
            let before = &before;
            t.partition_result
                .iter()
                .filter(|p| p.error_code == 0)
                .filter(|p| p.error_message.as_deref() != Some(RECOVERY_STARTED))
                .filter_map(move |p| {
                    let tp = TopicPartition::new(id?, u32::try_from(p.partition_id).ok()?);
                    let epoch = before.partition(tp).map_or(-1, |s| s.leader_epoch.0);
                    Some((tp, epoch))
                })
        })
        .collect();
    if !elected.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                elected.iter().all(|(tp, epoch)| {
                    image
                        .partition(*tp)
                        .is_none_or(|p| p.leader.is_some() && p.leader_epoch.0 > *epoch)
                })
            })
            .await;
    }
    response
}

/// Every partition of `request` answered with `code` (and the top-level code from v1 on; v0 has
/// none: the per-partition codes carry it).
fn failed(
    request: &ElectLeadersRequest,
    version: i16,
    code: i16,
    message: Option<keel_wire::kafka_protocol::protocol::StrBytes>,
) -> ElectLeadersResponse {
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition_id(*p)
                                .with_error_code(code)
                                .with_error_message(message.clone())
                        })
                        .collect(),
                )
        })
        .collect();
    ElectLeadersResponse::default()
        .with_error_code(if version >= 1 { code } else { 0 })
        .with_replica_election_results(results)
}
