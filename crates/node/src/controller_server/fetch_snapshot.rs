//! FetchSnapshot (59, v0–1) of `__cluster_metadata` partition 0: a broker whose metadata fetch
//! started below the applied log (compacted after a snapshot) was answered a `SnapshotId`; it
//! reads that snapshot here, `Position` by `Position`, up to `MaxBytes` at a time, then fetches
//! the log from the snapshot's end. Any controller answers, from its newest snapshot: the
//! snapshot's records as metadata batches (JSON values, offsets `0..n`; see
//! `raft::state_machine::BrokerSnapshot`), `Size` their total length. A snapshot id that is not
//! this controller's newest is `SNAPSHOT_NOT_FOUND` (the broker fetches again and gets the new
//! id); a position past the end `POSITION_OUT_OF_RANGE`; other partitions
//! `UNKNOWN_TOPIC_OR_PARTITION`.

use keel_wire::kafka_protocol::messages::fetch_snapshot_response::{
    LeaderIdAndEpoch, PartitionSnapshot, SnapshotId, TopicSnapshot,
};
use keel_wire::kafka_protocol::messages::{
    BrokerId as WireBrokerId, FetchSnapshotRequest, FetchSnapshotResponse,
};
use keel_wire::ResponseError;

use super::state::ControllerHandle;
use crate::metadata_log::METADATA_TOPIC;

/// Most bytes one answer carries when the request's `MaxBytes` is not positive.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// FetchSnapshot.
pub(super) fn handle(
    handle: &ControllerHandle,
    req: FetchSnapshotRequest,
) -> FetchSnapshotResponse {
    let view = handle.view();
    let max_bytes = usize::try_from(req.max_bytes)
        .ok()
        .filter(|b| *b > 0)
        .unwrap_or(DEFAULT_MAX_BYTES);
    let snapshot = handle.machine().broker_snapshot();
    let topics = req
        .topics
        .iter()
        .map(|topic| {
            let metadata = topic.name.as_str() == METADATA_TOPIC;
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let base = PartitionSnapshot::default()
                        .with_index(p.partition)
                        .with_snapshot_id(
                            SnapshotId::default()
                                .with_end_offset(p.snapshot_id.end_offset)
                                .with_epoch(p.snapshot_id.epoch),
                        )
                        .with_current_leader(
                            LeaderIdAndEpoch::default()
                                .with_leader_id(WireBrokerId(view.leader.unwrap_or(-1)))
                                .with_leader_epoch(view.epoch),
                        );
                    if !metadata || p.partition != 0 {
                        return base.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    }
                    let Some(snapshot) = snapshot
                        .as_ref()
                        .filter(|s| s.end_offset == p.snapshot_id.end_offset)
                    else {
                        return base.with_error_code(ResponseError::SnapshotNotFound.code());
                    };
                    let size = snapshot.bytes.len();
                    let Some(position) = usize::try_from(p.position).ok().filter(|at| *at <= size)
                    else {
                        return base.with_error_code(ResponseError::PositionOutOfRange.code());
                    };
                    let until = size.min(position.saturating_add(max_bytes));
                    base.with_error_code(0)
                        .with_size(size as i64)
                        .with_position(p.position)
                        .with_unaligned_records(snapshot.bytes.slice(position..until))
                })
                .collect();
            TopicSnapshot::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    FetchSnapshotResponse::default()
        .with_error_code(0)
        .with_topics(topics)
}
