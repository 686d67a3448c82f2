//! In-place rewrites of a validated batch: the leader assigns `baseOffset`, stamps
//! `partitionLeaderEpoch` (neither covered by the CRC) and, for LogAppendTime topics, sets
//! `maxTimestamp` and the timestamp-type bit and recomputes the CRC. The records themselves
//! (possibly compressed) are never touched.

use super::{
    compute_crc, ATTRIBUTES_POS, BASE_OFFSET_POS, CRC_POS, HEADER_SIZE, MAX_TIMESTAMP_POS,
    PARTITION_LEADER_EPOCH_POS, TIMESTAMP_TYPE_ATTRIBUTE,
};
use crate::types::{LeaderEpoch, Offset};

fn check_is_batch(batch: &[u8]) {
    assert!(
        batch.len() >= HEADER_SIZE,
        "rewrite of a {}-byte buffer that is not a validated batch",
        batch.len()
    );
}

/// Overwrites `baseOffset`. The CRC stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: Offset) {
    check_is_batch(batch);
    batch[BASE_OFFSET_POS..BASE_OFFSET_POS + 8].copy_from_slice(&base_offset.0.to_be_bytes());
}

/// Overwrites `partitionLeaderEpoch`. The CRC stays valid.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: LeaderEpoch) {
    check_is_batch(batch);
    batch[PARTITION_LEADER_EPOCH_POS..PARTITION_LEADER_EPOCH_POS + 4]
        .copy_from_slice(&epoch.0.to_be_bytes());
}

/// Marks the batch as LogAppendTime with `maxTimestamp = log_append_time_ms`, then recomputes
/// the CRC (both fields are covered by it).
pub fn set_log_append_time(batch: &mut [u8], log_append_time_ms: i64) {
    check_is_batch(batch);
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_POS], batch[ATTRIBUTES_POS + 1]]);
    let attributes = attributes | TIMESTAMP_TYPE_ATTRIBUTE;
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_POS..MAX_TIMESTAMP_POS + 8]
        .copy_from_slice(&log_append_time_ms.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}
