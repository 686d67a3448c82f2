//! [`LogConfig`]: the per-topic log settings, with Kafka's names and defaults. Plain values;
//! `Option` stands for Kafka's `-1` / "never".

use crate::error::LogError;

/// Which clock a topic's record timestamps come from (`message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's timestamp is kept (`CreateTime`, Kafka's default).
    #[default]
    CreateTime,
    /// The broker overwrites `maxTimestamp` with its append time (`LogAppendTime`).
    LogAppendTime,
}

/// One day in milliseconds.
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// `cleanup.policy`: what happens to old segments. Kafka's list of `delete` and/or `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    /// `delete`: `retention.ms` and `retention.bytes` delete whole old segments.
    pub delete: bool,
    /// `compact`: the cleaner keeps only the latest record of each key ([`crate::Log::compact`]).
    pub compact: bool,
}

impl CleanupPolicy {
    /// Kafka's default, `delete`.
    pub const DELETE: CleanupPolicy = CleanupPolicy {
        delete: true,
        compact: false,
    };
    /// `compact` alone: nothing is deleted by age or size.
    pub const COMPACT: CleanupPolicy = CleanupPolicy {
        delete: false,
        compact: true,
    };
}

/// Settings of one partition log. `Default` gives Kafka's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll a new segment before one would exceed this size (1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms`: roll a new segment once the active one is this old (7 days).
    pub segment_ms: i64,
    /// `segment.jitter.ms`: each segment rolls up to this much before `segment.ms` (0: exactly at
    /// `segment.ms`), so partitions created together do not roll together.
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes`: maximum size of an offset or time index; a full index forces a
    /// roll (10 MiB).
    pub segment_index_bytes: u64,
    /// `retention.ms`: delete segments whose newest timestamp is older than this; `None` is
    /// Kafka's `-1`, keep forever (7 days).
    pub retention_ms: Option<i64>,
    /// `retention.bytes`: delete oldest segments while the log is larger than this; `None` is
    /// Kafka's `-1`, no size limit (the default).
    pub retention_bytes: Option<u64>,
    /// `flush.messages`: fsync once this many messages are unflushed; `None` never flushes by
    /// count (Kafka's default of `Long.MAX_VALUE`).
    pub flush_messages: Option<u64>,
    /// `flush.ms`: fsync once the last flush is this old; `None` never flushes by time
    /// (Kafka's default of `Long.MAX_VALUE`).
    pub flush_ms: Option<i64>,
    /// `index.interval.bytes`: bytes between offset-index entries (4096).
    pub index_interval_bytes: u64,
    /// `max.message.bytes`: largest record batch a producer may append (1048588).
    pub max_message_bytes: u64,
    /// `message.timestamp.type` (CreateTime).
    pub timestamp_type: TimestampType,
    /// `cleanup.policy` (`delete`).
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms`: how long a tombstone (a record with a null value) stays readable
    /// after the cleaner first saw it (1 day; Kafka's KIP-534 delete horizon).
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a record stays uncompacted for at least this long (0).
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment older than this is cleaned whatever the dirty
    /// ratio (`i64::MAX`: never forced).
    pub max_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean once dirty bytes are at least this share of the
    /// cleanable bytes (0.5).
    pub min_cleanable_dirty_ratio: f64,
    /// Test-only fault injection (`keel.test.lose.unflushed.data.on.unclean.start`): record the
    /// recovery point durably in [`crate::log::FLUSHED_OFFSET_FILE`] at every flush, so that
    /// [`crate::Log::truncate_to_recorded_flush`] can drop everything a power loss would have
    /// dropped. Off by default.
    pub test_record_flushed_offset: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * DAY_MS,
            segment_jitter_ms: 0,
            segment_index_bytes: 10 * 1024 * 1024,
            retention_ms: Some(7 * DAY_MS),
            retention_bytes: None,
            flush_messages: None,
            flush_ms: None,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
            cleanup_policy: CleanupPolicy::DELETE,
            delete_retention_ms: DAY_MS,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            min_cleanable_dirty_ratio: 0.5,
            test_record_flushed_offset: false,
        }
    }
}

/// Smallest accepted `segment.bytes` (Kafka's minimum is 14 bytes; batches need more).
pub const SEGMENT_BYTES_MIN: u64 = 14;

impl LogConfig {
    /// Checks the ranges the log relies on: segment positions fit the index's `u32` (Kafka caps
    /// `segment.bytes` at `i32::MAX`), an index holds at least one entry, durations are positive.
    pub fn validate(&self) -> Result<(), LogError> {
        let invalid = |reason: String| Err(LogError::InvalidConfig { reason });
        if self.segment_bytes < SEGMENT_BYTES_MIN || self.segment_bytes > i32::MAX as u64 {
            return invalid(format!(
                "segment.bytes {} is outside [{SEGMENT_BYTES_MIN}, {}]",
                self.segment_bytes,
                i32::MAX
            ));
        }
        if self.segment_ms < 1 {
            return invalid(format!("segment.ms {} must be positive", self.segment_ms));
        }
        if self.segment_jitter_ms < 0 {
            return invalid(format!(
                "segment.jitter.ms {} must not be negative",
                self.segment_jitter_ms
            ));
        }
        if self.segment_index_bytes < 12 {
            return invalid(format!(
                "segment.index.bytes {} cannot hold one index entry",
                self.segment_index_bytes
            ));
        }
        if self.flush_ms.is_some_and(|ms| ms < 0) {
            return invalid("flush.ms must not be negative".to_string());
        }
        if !(0.0..=1.0).contains(&self.min_cleanable_dirty_ratio) {
            return invalid(format!(
                "min.cleanable.dirty.ratio {} is outside [0, 1]",
                self.min_cleanable_dirty_ratio
            ));
        }
        if self.delete_retention_ms < 0
            || self.min_compaction_lag_ms < 0
            || self.max_compaction_lag_ms < 1
        {
            return invalid(
                "delete.retention.ms and min.compaction.lag.ms must not be negative, \
                 max.compaction.lag.ms must be positive"
                    .to_string(),
            );
        }
        if self.retention_ms.is_some_and(|ms| ms < 0) {
            return invalid("retention.ms must not be negative; use None for -1".to_string());
        }
        Ok(())
    }
}
