//! AlterPartitionReassignments (key 45, v0–1) and ListPartitionReassignments (key 46, v0).
//!
//! Alter needs ALTER on the cluster and is forwarded to the active controller, which starts,
//! replaces or cancels each partition's reassignment (`keel_controller::partition_change`: the
//! new replicas follow the leader and the reassignment completes once every target replica is
//! in the ISR). The broker answers once its own metadata shows each accepted change (at most
//! [`METADATA_WAIT_MS`]), so the client's next Metadata or List request sees it. List needs
//! DESCRIBE on the cluster and is answered from this broker's metadata, as the controller
//! answers it from its own.

use std::sync::Arc;

use keel_controller::types::{BrokerId, TopicPartition};
use keel_wire::kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use crate::broker::Broker;

/// How long the broker waits for accepted changes to reach its metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

pub async fn alter(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::AlterPartitionReassignments);
    if !authz.cluster(keel_controller::acl::AclOperation::Alter) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(keel_wire::ResponseError::ClusterAuthorizationFailed.code());
    }
    let response: AlterPartitionReassignmentsResponse = match broker
        .controller()
        .forward(ApiKey::AlterPartitionReassignments, version, &request)
        .await
    {
        Ok(response) => response,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return AlterPartitionReassignmentsResponse::default()
                .with_error_code(e.code())
                .with_error_message(e.message_str());
        }
    };
    // What each accepted partition must show: its replicas starting with the target (in
    // progress: the target, then the replicas it removes; complete: the target), or no
    // reassignment (cancelled).
    let image = broker.image();
    let accepted: Vec<(TopicPartition, Option<Vec<BrokerId>>)> = request
        .topics
        .iter()
        .flat_map(|t| {
            let id = image.topic_id(t.name.as_str());
            let answered = response.responses.iter().find(|r| r.name == t.name);
            t.partitions.iter().filter_map(move |p| {
                let ok = answered?
                    .partitions
                    .iter()
                    .any(|r| r.partition_index == p.partition_index && r.error_code == 0);
                let tp = TopicPartition::new(id?, u32::try_from(p.partition_index).ok()?);
                let target = p
                    .replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| BrokerId(b.0)).collect());
                ok.then_some((tp, target))
            })
        })
        .collect();
    if !accepted.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                accepted.iter().all(|(tp, target)| {
                    image.partition(*tp).is_none_or(|p| match target {
                        Some(target) => p.replicas.starts_with(target),
                        None => !p.is_reassigning(),
                    })
                })
            })
            .await;
    }
    response
}

pub fn list(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::ListPartitionReassignments);
    if !authz.cluster(keel_controller::acl::AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(keel_wire::ResponseError::ClusterAuthorizationFailed.code());
    }
    crate::controller_server::list_reassignments_response(&broker.image(), &request)
}
