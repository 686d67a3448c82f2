//! OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, so a consumer (or a
//! follower) can detect and cut a diverged log suffix.

use std::sync::Arc;

use keel_log::LeaderEpoch;
use keel_wire::kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use keel_wire::kafka_protocol::messages::{
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use keel_wire::ResponseError;

use super::fetch::check_leader_epoch;
use crate::broker::Broker;

pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    use keel_controller::acl::AclOperation;
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::OffsetForLeaderEpoch,
    );
    // Kafka: a replica (replica_id other than -1) needs CLUSTER_ACTION on the cluster, refused for the
    // whole request; a consumer needs DESCRIBE on each topic.
    let replica = request.replica_id.0 != -1;
    let cluster_refused = replica && !authz.cluster(AclOperation::ClusterAction);
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let refused = if cluster_refused {
                Some(ResponseError::ClusterAuthorizationFailed)
            } else if !replica && !authz.topic(AclOperation::Describe, &topic.topic) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else {
                None
            };
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result = EpochEndOffset::default().with_partition(p.partition);
                    if let Some(error) = refused {
                        return undefined(result.with_error_code(error.code()));
                    }
                    let Some(partition) = broker.partition(&topic.topic, p.partition) else {
                        let error =
                            super::missing_partition_error(broker, &topic.topic, p.partition);
                        return undefined(result.with_error_code(error.code()));
                    };
                    if let Err(error) = check_leader_epoch(&partition, p.current_leader_epoch) {
                        return undefined(result.with_error_code(error.code()));
                    }
                    let Ok(log) = partition.lock_log() else {
                        return undefined(
                            result.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                        );
                    };
                    // Kafka answers UNDEFINED for an undefined requested epoch.
                    let found = (p.leader_epoch >= 0)
                        .then(|| log.end_offset_for_epoch(LeaderEpoch(p.leader_epoch)))
                        .flatten();
                    drop(log);
                    match found {
                        Some((epoch, end_offset)) => result
                            .with_error_code(0)
                            .with_leader_epoch(epoch.0)
                            .with_end_offset(end_offset.0),
                        None => undefined(result.with_error_code(0)),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET answer.
fn undefined(result: EpochEndOffset) -> EpochEndOffset {
    result.with_leader_epoch(-1).with_end_offset(-1)
}
