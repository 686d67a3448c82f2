//! Fetch (1, v4–18) of `__cluster_metadata` partition 0: how brokers follow the metadata log.
//! v17's `ReplicaDirectoryId` and v18's `HighWatermark` are KRaft voters' fields (KIP-853,
//! KIP-1166): accepted and not used.
//!
//! The partition is named `__cluster_metadata` (v4–12) or has KRaft's fixed topic id
//! `AAAAAAAAAAAAAAAAAAAAAQ` (v13+). The answer holds the raw metadata batches from
//! `FetchOffset` on (each batch's partition leader epoch is the controller epoch that wrote it),
//! `HighWatermark` = `LastStableOffset` = this controller's applied (committed) end offset,
//! `LogStartOffset` = its applied log's start, and (v12+) `CurrentLeader` = the Raft leader and
//! the controller epoch. With fewer than `MinBytes` bytes available the request waits — Kafka's
//! long poll — until a commit or `MaxWaitMs` (capped by [`FETCH_MAX_WAIT_MS_MAX`]); a
//! `FetchOffset` beyond the end waits the same way. Below the log start (compacted after a
//! snapshot): v12+ answers KRaft's `SnapshotId` (end offset and epoch of the newest snapshot,
//! which the broker then reads with FetchSnapshot), older versions `OFFSET_OUT_OF_RANGE`. Any
//! other topic or partition is `UNKNOWN_TOPIC_OR_PARTITION` (`UNKNOWN_TOPIC_ID` by id). Fetch
//! sessions are not kept: every answer has session id 0, so clients send full requests.

use std::time::Duration;

use bytes::Bytes;
use keel_controller::types::MetadataOffset;
use keel_wire::kafka_protocol::messages::fetch_response::{
    FetchableTopicResponse, LeaderIdAndEpoch, PartitionData, SnapshotId,
};
use keel_wire::kafka_protocol::messages::{BrokerId as WireBrokerId, FetchRequest, FetchResponse};
use keel_wire::ResponseError;
use uuid::Uuid;

use super::state::{CallError, ControllerHandle};
use crate::metadata_log::METADATA_TOPIC;

/// KRaft's fixed id of the metadata topic (`Uuid.METADATA_TOPIC_ID`, `AAAAAAAAAAAAAAAAAAAAAQ`).
pub const METADATA_TOPIC_ID: Uuid = Uuid::from_u64_pair(0, 1);

/// Longest long poll, whatever `MaxWaitMs` asks.
pub const FETCH_MAX_WAIT_MS_MAX: u64 = 60_000;

/// Read size when a request's byte limits are not positive.
const FETCH_READ_BYTES_DEFAULT: usize = 1024 * 1024;

/// The metadata partition's fetch position in a request.
struct MetadataPartition {
    fetch_offset: i64,
    max_bytes: usize,
}

/// Fetch.
pub(super) async fn handle(
    handle: &ControllerHandle,
    req: FetchRequest,
    version: i16,
) -> Result<FetchResponse, CallError> {
    let by_id = version >= 13;
    let is_metadata_topic = |name: &str, id: Uuid| {
        if by_id {
            id == METADATA_TOPIC_ID
        } else {
            name == METADATA_TOPIC
        }
    };
    let request_max_bytes = usize::try_from(req.max_bytes)
        .ok()
        .filter(|b| *b > 0)
        .unwrap_or(FETCH_READ_BYTES_DEFAULT);
    let mut wanted: Option<MetadataPartition> = None;
    for topic in &req.topics {
        if !is_metadata_topic(topic.topic.as_str(), topic.topic_id) {
            continue;
        }
        for p in &topic.partitions {
            if p.partition == 0 {
                let partition_max = usize::try_from(p.partition_max_bytes)
                    .ok()
                    .filter(|b| *b > 0)
                    .unwrap_or(FETCH_READ_BYTES_DEFAULT);
                wanted = Some(MetadataPartition {
                    fetch_offset: p.fetch_offset,
                    max_bytes: partition_max.min(request_max_bytes),
                });
            }
        }
    }

    // Read, and while fewer than MinBytes are there, wait for a commit or the deadline.
    let mut committed = handle.committed();
    let wait_ms = u64::try_from(req.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_MAX_WAIT_MS_MAX);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let min_bytes = usize::try_from(req.min_bytes).unwrap_or(0);
    // Set when the fetch starts below the applied log: where the snapshot to load ends, and its
    // epoch (KRaft's answer; the broker then sends FetchSnapshot).
    let mut snapshot_id: Option<(i64, i32)> = None;
    let read: Option<(MetadataOffset, Result<Bytes, i16>)> = match &wanted {
        None => None,
        Some(wanted) => loop {
            committed.borrow_and_update();
            let from = wanted.fetch_offset;
            let max_bytes = wanted.max_bytes;
            let machine = handle.machine();
            let end = machine.end_offset();
            let bytes = if from < 0 {
                Err(ResponseError::OffsetOutOfRange.code())
            } else if from < machine.start_offset().0 && from < end.0 {
                // Below the applied log's start (compacted, or this controller installed a
                // snapshot): only a snapshot has those records.
                match machine.latest_snapshot_id().filter(|_| version >= 12) {
                    Some(id) => {
                        snapshot_id = Some(id);
                        break Some((end, Ok(Bytes::new())));
                    }
                    None => Err(ResponseError::OffsetOutOfRange.code()),
                }
            } else if from >= end.0 {
                // At or past this controller's applied end: nothing yet. A broker may be ahead
                // of a lagging controller (it fetched from another one); it waits here.
                Ok(Bytes::new())
            } else {
                machine
                    .read_batches(MetadataOffset(from), max_bytes)
                    .map_err(|_| ResponseError::KafkaStorageError.code())
            };
            let enough = bytes.as_ref().map_or(true, |b| b.len() >= min_bytes.max(1));
            if enough || min_bytes == 0 || tokio::time::Instant::now() >= deadline {
                break Some((end, bytes));
            }
            match tokio::time::timeout_at(deadline, committed.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return Err(CallError::Stopped),
                Err(_elapsed) => continue,
            }
        },
    };

    let view = handle.view();
    let log_start = handle.machine().start_offset();
    let responses = req
        .topics
        .iter()
        .map(|topic| {
            let metadata = is_metadata_topic(topic.topic.as_str(), topic.topic_id);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let base = PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_high_watermark(-1)
                        .with_last_stable_offset(-1)
                        .with_log_start_offset(-1)
                        .with_preferred_read_replica(WireBrokerId(-1));
                    match (&read, metadata && p.partition == 0) {
                        (Some((end, result)), true) => {
                            let base = base
                                .with_high_watermark(end.0)
                                .with_last_stable_offset(end.0)
                                .with_log_start_offset(log_start.0);
                            let base = if version >= 12 {
                                let base = base.with_current_leader(
                                    LeaderIdAndEpoch::default()
                                        .with_leader_id(WireBrokerId(view.leader.unwrap_or(-1)))
                                        .with_leader_epoch(view.epoch),
                                );
                                match snapshot_id {
                                    Some((end_offset, epoch)) => base.with_snapshot_id(
                                        SnapshotId::default()
                                            .with_end_offset(end_offset)
                                            .with_epoch(epoch),
                                    ),
                                    None => base,
                                }
                            } else {
                                base
                            };
                            match result {
                                Ok(bytes) => {
                                    base.with_error_code(0).with_records(Some(bytes.clone()))
                                }
                                Err(code) => base.with_error_code(*code),
                            }
                        }
                        _ => {
                            let code = if by_id && !metadata {
                                ResponseError::UnknownTopicId.code()
                            } else {
                                ResponseError::UnknownTopicOrPartition.code()
                            };
                            base.with_error_code(code)
                        }
                    }
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    Ok(FetchResponse::default()
        .with_error_code(0)
        .with_session_id(0)
        .with_responses(responses))
}
