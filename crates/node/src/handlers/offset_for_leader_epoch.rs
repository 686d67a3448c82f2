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
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result = EpochEndOffset::default().with_partition(p.partition);
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
