//! [`Log`]: the log of one partition — a directory of segments, the leader-epoch cache, the
//! log start offset, the log end offset and the recovery point (the offset below which
//! everything is fsynced).
//!
//! The operations live in one file each: `load` (open and crash recovery), `append`, `read`
//! (fetches), `timestamps` (ListOffsets lookups by time), `truncate`, `retention` (and rolling), `flush` (flush
//! policy, close, delete). The broker's partition code is the only caller; it serializes
//! mutations (`&mut self`) and may read concurrently (`&self`).
//!
//! Invariants (checked by [`Log::check_invariants`]): at least one segment; segment base offsets
//! increase and each segment starts where the previous ends; `log_start_offset <=
//! recovery_point <= log_end_offset`... except that the recovery point may lag the log start
//! offset after `increment_log_start_offset`; the epoch cache has no entry at or past the log end
//! offset.

mod append;
mod compact;
mod flush;
mod load;
mod producers;
mod quarantine;
mod read;
mod retention;
mod scrub;
mod timestamps;
mod truncate;
mod txns;

#[cfg(test)]
mod compact_tests;
#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timestamps_tests;
#[cfg(test)]
mod txn_tests;

pub use append::APPEND_BYTES_MAX;
pub use compact::{
    CompactionOutput, CompactionPlan, CompactionStats, NoCodecs, RecordCodecs, CLEANED_FILE_SUFFIX,
    CLEANER_OFFSET_CHECKPOINT_FILE,
};
pub use flush::RolledFlush;
pub use load::RecoveryReport;
pub use quarantine::{Quarantine, QUARANTINE_INFO_FILE, QUARANTINE_SUFFIX};
pub use read::FetchData;
pub use retention::{DeletedSegment, RetentionReason, RetentionResult};
pub use scrub::{ScrubStep, ScrubTask};
pub use timestamps::RecordTimestamp;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoint::{write_epoch_checkpoint, EpochEntry};
use crate::config::LogConfig;
use crate::epoch_cache::LeaderEpochCache;
use crate::error::LogError;
use crate::producer_state::ProducerStates;
use crate::segment::Segment;
use crate::storage::Storage;
use crate::txn::AbortedTxn;
use crate::types::{LeaderEpoch, Offset, TimestampOffset};

/// File name of the test-only record of the last flushed offset
/// ([`LogConfig::test_record_flushed_offset`]).
pub const FLUSHED_OFFSET_FILE: &str = "flushed-offset.keel-test";

/// File name of the per-partition leader epoch checkpoint.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Kafka's per-partition file naming the partition's topic id (written by the broker).
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub first_offset: Offset,
    /// Offset of the last record appended.
    pub last_offset: Offset,
    /// Largest batch max timestamp and the base offset of the first batch carrying it; `None`
    /// if no batch carried a timestamp.
    pub max_timestamp: Option<TimestampOffset>,
    /// The broker time stamped into the batches, for LogAppendTime topics.
    pub log_append_time_ms: Option<i64>,
    /// Offsets assigned (the records appended).
    pub record_count: u64,
    /// Batches appended.
    pub batch_count: usize,
    /// Bytes appended.
    pub size_bytes: u64,
    /// Whether nothing was appended because the log already held the batch (an idempotent
    /// producer's retry): the offsets are those it got the first time.
    pub duplicate: bool,
}

impl AppendInfo {
    /// Nothing appended (`duplicate`): the caller answers once the high watermark passes
    /// `last_offset`, with these offsets.
    pub fn nothing_appended(first_offset: Offset, last_offset: Offset) -> AppendInfo {
        AppendInfo {
            first_offset,
            last_offset,
            max_timestamp: None,
            log_append_time_ms: None,
            record_count: 0,
            batch_count: 0,
            size_bytes: 0,
            duplicate: true,
        }
    }
}

/// The log of one partition. See the module docs.
#[derive(Debug)]
pub struct Log {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    config: LogConfig,
    /// By base offset; never empty; the last one is the active segment.
    segments: BTreeMap<Offset, Segment>,
    log_start_offset: Offset,
    recovery_point: Offset,
    epochs: LeaderEpochCache,
    last_flush_ms: i64,
    /// Whether directory entries (segment files created or deleted) await a directory fsync.
    dir_unsynced: bool,
    recovery_report: RecoveryReport,
    /// Idempotent producers' state up to the log end offset.
    producers: ProducerStates,
    /// Aborted transactions, by the offset of their ABORT marker ([`crate::txn`]).
    aborted: BTreeMap<Offset, AbortedTxn>,
    /// Everything below this offset was compacted (`cleanup.policy=compact`).
    cleaner_offset: Offset,
    /// The earliest delete horizon of a tombstone the cleaner kept: once passed, the log is
    /// worth cleaning even with nothing dirty.
    delete_horizon_ms: Option<i64>,
    /// Bumped by every truncation and segment deletion: a compaction planned before one is
    /// dropped instead of swapping in segments of data the log no longer holds.
    generation: u64,
}

impl Log {
    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration in force.
    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Replaces the configuration (topic config change). Takes effect on the next append,
    /// roll, flush or retention pass.
    pub fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// The first offset still readable.
    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> Offset {
        self.active().next_offset()
    }

    /// Everything below this offset is fsynced (the flushed offset).
    pub fn recovery_point(&self) -> Offset {
        self.recovery_point
    }

    /// The newest leader epoch in the epoch cache.
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest().map(|e| e.epoch)
    }

    /// The epoch cache entries, oldest first.
    pub fn epoch_entries(&self) -> &[EpochEntry] {
        self.epochs.entries()
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size_bytes).sum()
    }

    /// Number of segments (at least one).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<Offset> {
        self.segments.keys().copied().collect()
    }

    /// For each segment, its base offset and how many of its bytes are known fsynced.
    pub fn durable_positions(&self) -> Vec<(Offset, u64)> {
        self.segments
            .values()
            .map(|s| (s.base_offset(), s.durable_bytes()))
            .collect()
    }

    /// What [`Log::open`] found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery_report
    }

    /// Kafka's OffsetForLeaderEpoch answer for `epoch`; see
    /// [`LeaderEpochCache::end_offset_for`].
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Records that `epoch` starts at the log end offset, as a new leader does before its first
    /// append (Kafka's `maybeAssignEpochStartOffset`), so OffsetForLeaderEpoch answers right
    /// away. Persists the epoch cache if it changed.
    pub fn assign_epoch_start_offset(&mut self, epoch: LeaderEpoch) -> Result<(), LogError> {
        if epoch.0 < 0 {
            return Err(LogError::InvalidRecord {
                reason: format!("leader epoch {epoch} is negative"),
            });
        }
        let changed = self.epochs.assign(epoch, self.log_end_offset());
        self.save_epochs_if(changed)
    }

    /// Asserts the invariants listed in the module docs; a failure is a bug in this crate.
    pub fn check_invariants(&self) {
        assert!(!self.segments.is_empty(), "a log has at least one segment");
        let mut expected_base = None;
        for (base, segment) in &self.segments {
            assert_eq!(*base, segment.base_offset(), "segment keyed by its base");
            if let Some(expected) = expected_base {
                assert_eq!(*base, expected, "segments are contiguous");
            }
            expected_base = Some(segment.next_offset());
        }
        let log_end_offset = self.log_end_offset();
        assert!(
            self.log_start_offset <= log_end_offset,
            "log start <= log end"
        );
        assert!(
            self.recovery_point <= log_end_offset,
            "recovery point <= log end"
        );
        let first_base = *self.segments.keys().next().expect("non-empty");
        assert!(
            first_base <= self.log_start_offset,
            "log start inside the log"
        );
        if let Some(latest) = self.epochs.latest() {
            assert!(
                latest.start_offset <= log_end_offset,
                "no epoch starts past the log end offset"
            );
        }
    }

    fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log has a segment")
    }

    fn epoch_checkpoint_path(&self) -> PathBuf {
        self.dir.join(LEADER_EPOCH_CHECKPOINT_FILE)
    }

    /// Persists the epoch cache if `changed`.
    fn save_epochs_if(&self, changed: bool) -> Result<(), LogError> {
        if changed {
            write_epoch_checkpoint(
                self.storage.as_ref(),
                &self.epoch_checkpoint_path(),
                self.epochs.entries(),
            )?;
        }
        Ok(())
    }

    fn io_error(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> LogError {
        LogError::io(op, self.dir.clone())
    }

    /// Fsyncs the partition directory if entries changed since the last time.
    fn sync_dir_if_needed(&mut self) -> Result<(), LogError> {
        if self.dir_unsynced {
            self.storage
                .sync_dir(&self.dir)
                .map_err(LogError::io("fsync directory", self.dir.clone()))?;
            self.dir_unsynced = false;
        }
        Ok(())
    }
}
