//! AlterPartitionReassignments (45, v0–1) and ListPartitionReassignments (46, v0) on the
//! controller: `Controller::alter_partition_reassignments` decides each partition (Kafka's
//! checks and codes), one batch for the request; the list is read from the committed image.

use std::collections::BTreeMap;

use keel_controller::types::BrokerId;
use keel_controller::{ApiError, ReassignmentRequest};
use keel_wire::kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use keel_wire::kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use keel_wire::kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use super::state::{CallError, ControllerHandle};

/// AlterPartitionReassignments.
pub(super) async fn alter(
    handle: &ControllerHandle,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
) -> Result<AlterPartitionReassignmentsResponse, CallError> {
    let allow_rf_change = version < 1 || req.allow_replication_factor_change;
    let requests: Vec<ReassignmentRequest> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignmentRequest {
                topic: t.name.to_string(),
                partition: p.partition_index,
                target: p
                    .replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| BrokerId(b.0)).collect()),
                allow_replication_factor_change: allow_rf_change,
            })
        })
        .collect();
    let results = handle
        .call(move |s| {
            let results =
                s.commit(|c, now_ms| c.alter_partition_reassignments(&requests, now_ms))?;
            Ok(requests.into_iter().zip(results).collect::<Vec<_>>())
        })
        .await?;
    Ok(AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change)
        .with_responses(alter_responses(results)))
}

/// The per-topic answers, in the request's topic order.
fn alter_responses(
    results: Vec<(ReassignmentRequest, Result<(), ApiError>)>,
) -> Vec<ReassignableTopicResponse> {
    let answers = results.into_iter().map(|(request, result)| {
        let (code, message) = match result {
            Ok(()) => (0, None),
            Err(e) => (e.code.code(), Some(StrBytes::from_string(e.message))),
        };
        let answer = ReassignablePartitionResponse::default()
            .with_partition_index(request.partition)
            .with_error_code(code)
            .with_error_message(message);
        (request.topic, answer)
    });
    by_topic(answers)
        .into_iter()
        .map(|(name, partitions)| {
            ReassignableTopicResponse::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect()
}

/// Items grouped by topic name, topics in the order they first appear.
fn by_topic<T>(items: impl IntoIterator<Item = (String, T)>) -> Vec<(String, Vec<T>)> {
    let mut groups: Vec<(String, Vec<T>)> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (name, item) in items {
        let at = *index.entry(name.clone()).or_insert_with(|| {
            groups.push((name, Vec::new()));
            groups.len() - 1
        });
        groups[at].1.push(item);
    }
    groups
}

/// ListPartitionReassignments, from the committed image.
pub(super) async fn list(
    handle: &ControllerHandle,
    req: ListPartitionReassignmentsRequest,
) -> Result<ListPartitionReassignmentsResponse, CallError> {
    handle
        .call(move |s| Ok(list_response(s.controller().image(), &req)))
        .await
}

/// ListPartitionReassignments answered from `image` (brokers answer from theirs).
pub fn list_response(
    image: &keel_controller::ClusterImage,
    req: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let topics: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let ongoing = keel_controller::list_reassignments(image, topics.as_deref());
    let ids = |v: &[BrokerId]| {
        v.iter()
            .map(|b| keel_wire::kafka_protocol::messages::BrokerId(b.0))
            .collect::<Vec<_>>()
    };
    let answers = ongoing.into_iter().map(|(name, o)| {
        let answer = OngoingPartitionReassignment::default()
            .with_partition_index(i32::try_from(o.partition.partition).unwrap_or(i32::MAX))
            .with_replicas(ids(&o.replicas))
            .with_adding_replicas(ids(&o.adding))
            .with_removing_replicas(ids(&o.removing));
        (name, answer)
    });
    let topics = by_topic(answers)
        .into_iter()
        .map(|(name, partitions)| {
            OngoingTopicReassignment::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
