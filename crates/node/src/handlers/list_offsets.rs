//! ListOffsets (key 2): earliest, latest (the high watermark), max timestamp, or the first
//! offset at or after a timestamp — never beyond the high watermark.

use std::sync::Arc;

use keel_log::Offset;
use keel_wire::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use keel_wire::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use keel_wire::ResponseError;

use super::fetch::check_leader_epoch;
use crate::broker::Broker;

/// Kafka's special timestamps.
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// The first ListOffsets version whose response carries the leader epoch.
const LEADER_EPOCH_MIN_VERSION: i16 = 4;

pub fn handle(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let response = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    match lookup(
                        broker,
                        &topic.name,
                        p.partition_index,
                        p.current_leader_epoch,
                        p.timestamp,
                    ) {
                        Ok(found) => {
                            let (offset, timestamp) = found.unwrap_or((-1, -1));
                            let response = response
                                .with_error_code(0)
                                .with_offset(offset)
                                .with_timestamp(timestamp);
                            if version >= LEADER_EPOCH_MIN_VERSION {
                                response.with_leader_epoch(found.map_or(-1, |_| {
                                    broker
                                        .partition(&topic.name, p.partition_index)
                                        .map_or(-1, |part| part.leader_epoch().0)
                                }))
                            } else {
                                response
                            }
                        }
                        Err(error) => response
                            .with_error_code(error.code())
                            .with_offset(-1)
                            .with_timestamp(-1),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(offset, timestamp)` or `None` when no record matches the timestamp.
fn lookup(
    broker: &Broker,
    topic: &str,
    index: i32,
    current_leader_epoch: i32,
    timestamp: i64,
) -> Result<Option<(i64, i64)>, ResponseError> {
    let partition = broker
        .partition(topic, index)
        .ok_or_else(|| super::missing_partition_error(broker, topic, index))?;
    check_leader_epoch(&partition, current_leader_epoch)?;
    if partition.high_watermark_lags_leader_epoch() {
        return Err(ResponseError::OffsetNotAvailable);
    }
    let high_watermark = partition.high_watermark();
    let log = partition
        .lock_log()
        .map_err(|_| ResponseError::UnknownTopicOrPartition)?;
    Ok(match timestamp {
        LATEST_TIMESTAMP => Some((high_watermark.0, -1)),
        // No tiered storage: Kafka answers -1 when remote storage is off.
        LATEST_TIERED_TIMESTAMP => Some((-1, -1)),
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => Some((log.log_start_offset().0, -1)),
        MAX_TIMESTAMP => log
            .offset_of_max_timestamp()
            .filter(|found| found.offset < high_watermark)
            .map(|found| (found.offset.0, found.timestamp)),
        ts if ts >= 0 => log
            .offset_for_timestamp(ts, Some(high_watermark))
            .map_err(|_| ResponseError::KafkaStorageError)?
            .map(|found| (found.offset.0, found.timestamp)),
        _ => return Err(ResponseError::InvalidRequest),
    }
    .filter(|(offset, _)| Offset(*offset) <= high_watermark))
}
