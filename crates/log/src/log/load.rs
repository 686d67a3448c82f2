//! Opening a log: discovering segment files, trusting them after a clean shutdown, and crash
//! recovery after an unclean one (validate every batch from the recovery point on, truncate at
//! the first torn or corrupt batch, rebuild indexes, fix the epoch cache).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::compact::{CLEANED_FILE_SUFFIX, CLEANER_OFFSET_CHECKPOINT_FILE};
use super::quarantine::Quarantine;
use super::{Log, LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE};
use crate::batch::BatchError;
use crate::checkpoint::read_epoch_checkpoint;
use crate::config::LogConfig;
use crate::epoch_cache::LeaderEpochCache;
use crate::error::LogError;
use crate::producer_state::{ProducerStates, PRODUCER_SNAPSHOT_SUFFIX};
use crate::segment::{
    parse_segment_file_name, Check, ScanError, Segment, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
use crate::storage::{create_dir_all_durable, Storage, TEMP_FILE_SUFFIX};
use crate::txn::TXN_INDEX_FILE_SUFFIX;
use crate::types::Offset;

/// What [`Log::open`] did, for the broker to log ("recovery skipped" vs "recovered N batches,
/// truncated M bytes") and to decide whether its replica is still clean.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The `clean_shutdown` flag `open` was given.
    pub clean_shutdown: bool,
    /// Segments whose every batch was validated and whose indexes were rebuilt.
    pub segments_recovered: usize,
    /// Batches validated by recovery.
    pub batches_validated: u64,
    /// Bytes of valid batches read by recovery.
    pub bytes_scanned: u64,
    /// Bytes the log no longer holds: a torn tail dropped, or damaged data set aside.
    pub bytes_truncated: u64,
    /// The torn tail dropped (the end of the last segment: a batch cut short, or zeros — what
    /// a crash leaves behind), in bytes. Not kept: nothing follows it.
    pub torn_tail_bytes: u64,
    /// Where damaged data went: a batch that failed validation with data after it (or in an
    /// earlier segment than the last) — the damaged segment copied and the later segments
    /// moved, never deleted.
    pub quarantine: Option<Quarantine>,
    /// The log end offset after a truncation, if recovery truncated.
    pub truncated_to: Option<Offset>,
    /// Human-readable reasons: corrupt batches found, indexes rebuilt.
    pub problems: Vec<String>,
}

impl RecoveryReport {
    /// Whether any segment was scanned.
    pub fn recovered(&self) -> bool {
        self.segments_recovered > 0
    }

    /// Whether the log lost data it held before the restart (a torn tail or damage): a replica
    /// that did is not clean, whatever its clean-shutdown file says (KIP-966).
    pub fn lost_data(&self) -> bool {
        self.truncated_to.is_some()
    }
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.recovered() {
            return write!(f, "recovery skipped (clean shutdown)");
        }
        write!(
            f,
            "recovered {} batches ({} bytes) in {} segments, truncated {} bytes",
            self.batches_validated,
            self.bytes_scanned,
            self.segments_recovered,
            self.bytes_truncated
        )?;
        if let Some(offset) = self.truncated_to {
            write!(f, " (log end offset now {offset}")?;
            if let Some(q) = &self.quarantine {
                write!(
                    f,
                    "; {} segment files set aside in {}",
                    q.segments,
                    q.path.display()
                )?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl Log {
    /// Opens the log of one partition in `dir` (created if missing).
    ///
    /// - `recovery_point`: the flushed offset from `recovery-point-offset-checkpoint`
    ///   (`Offset(0)` if unknown: everything is scanned);
    /// - `log_start_offset`: from `log-start-offset-checkpoint` (`Offset(0)` if unknown; the
    ///   first segment's base offset wins if larger);
    /// - `clean_shutdown`: whether the clean-shutdown file was present. If not, every segment
    ///   from the one containing `recovery_point` on is scanned and validated (length, magic,
    ///   CRC-32C, contiguous offsets), the log is truncated at the first torn or corrupt batch
    ///   (later segments deleted), indexes are rebuilt, the result is fsynced, and the epoch cache
    ///   is truncated to the new log end offset. If clean, files are trusted, except that damaged
    ///   or missing indexes, or a damaged tail, make that segment recover as above.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        config: LogConfig,
        recovery_point: Offset,
        log_start_offset: Offset,
        clean_shutdown: bool,
        now_ms: i64,
    ) -> Result<Log, LogError> {
        config.validate()?;
        if !storage.exists(&dir).map_err(LogError::io("stat", &dir))? {
            create_dir_all_durable(storage.as_ref(), &dir)
                .map_err(LogError::io("create directory", &dir))?;
        }
        let bases = discover_segments(storage.as_ref(), &dir)?;
        let epochs =
            read_epoch_checkpoint(storage.as_ref(), &dir.join(LEADER_EPOCH_CHECKPOINT_FILE))?;
        let mut log = Log {
            storage,
            dir,
            config,
            segments: BTreeMap::new(),
            log_start_offset,
            recovery_point,
            epochs: LeaderEpochCache::from_entries(epochs),
            last_flush_ms: now_ms,
            dir_unsynced: false,
            recovery_report: RecoveryReport {
                clean_shutdown,
                ..RecoveryReport::default()
            },
            producers: ProducerStates::new(),
            aborted: BTreeMap::new(),
            cleaner_offset: Offset(0),
            delete_horizon_ms: None,
            generation: 0,
        };
        (log.cleaner_offset, log.delete_horizon_ms) = log.read_cleaner_offset()?;
        for base in bases {
            let segment = Segment::open(log.storage.as_ref(), &log.dir, base, &log.config)
                .map_err(log.io_error("open segment"))?;
            log.segments.insert(base, segment);
        }
        if log.segments.is_empty() {
            log.create_segment(log_start_offset.max(Offset(0)))?;
        } else {
            log.load_segments(clean_shutdown, recovery_point, now_ms)?;
        }
        log.finish_open(log_start_offset)?;
        // A checkpoint can outlive the data behind it (a crash losing unflushed segments).
        log.cleaner_offset = log.cleaner_offset.min(log.log_end_offset());
        log.load_producer_state()?;
        log.sync_dir_if_needed()?;
        log.check_invariants();
        Ok(log)
    }

    /// Loads every segment, trusting those before the recovery start and recovering the rest.
    /// A trusted segment that does not start where the one before it ends (data lost below the
    /// recovery point, or a lying disk) makes the recovery start there: the rest is set aside,
    /// never loaded as a log with a hole.
    fn load_segments(
        &mut self,
        clean_shutdown: bool,
        recovery_point: Offset,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let bases: Vec<Offset> = self.segments.keys().copied().collect();
        let first_base = bases[0];
        let mut recover_from = if clean_shutdown {
            None
        } else {
            let floor = self.segments.range(..=recovery_point).next_back();
            Some(floor.map_or(first_base, |(base, _)| *base))
        };
        let mut expected_base: Option<Offset> = None;
        for base in &bases {
            if recover_from.is_some_and(|from| *base >= from) {
                break;
            }
            if let Some(expected) = expected_base.filter(|expected| expected != base) {
                let problem = format!(
                    "segment {base} does not start at the previous segment's end {expected}"
                );
                tracing::warn!(dir = %self.dir.display(), %problem, "segment needs recovery");
                self.recovery_report.problems.push(problem);
                recover_from = Some(*base);
                break;
            }
            let segment = self.segments.get_mut(base).expect("listed segment");
            if let Some(problem) = segment
                .load_clean(now_ms)
                .map_err(LogError::io("load segment", self.dir.clone()))?
            {
                tracing::warn!(dir = %self.dir.display(), %problem, "segment needs recovery");
                self.recovery_report.problems.push(problem);
                recover_from = Some(*base);
            }
            expected_base = Some(segment.next_offset());
        }
        if let Some(from) = recover_from {
            self.recover_segments(from, now_ms)?;
        }
        Ok(())
    }

    /// Recovers every segment from base `from` on, stopping at the first bad batch or offset
    /// gap. A torn tail (the last segment ends inside a batch, or in zeros) is dropped; any
    /// other damage sets the rest of the log aside ([`Log::quarantine_from`]).
    fn recover_segments(&mut self, from: Offset, now_ms: i64) -> Result<(), LogError> {
        let bases: Vec<Offset> = self.segments.range(from..).map(|(b, _)| *b).collect();
        let last = *bases.last().expect("recovering at least one segment");
        let mut expected_base = self
            .segments
            .range(..from)
            .next_back()
            .map(|(_, s)| s.next_offset());
        for base in bases {
            if let Some(expected) = expected_base.filter(|expected| *expected != base) {
                let problem = format!(
                    "segment {base} does not start at the previous segment's end {expected}"
                );
                self.recovery_report.problems.push(problem.clone());
                self.recovery_report.truncated_to = Some(expected);
                self.set_aside_in_recovery(base, 0, expected, &problem, now_ms)?;
                break;
            }
            let allow_gaps = self.gaps_allowed();
            let segment = self.segments.get_mut(&base).expect("listed segment");
            let found = segment
                .recover_scan(now_ms, allow_gaps, Check::Full)
                .map_err(LogError::io("recover segment", self.dir.clone()))?;
            // What it validated may be in the page cache only: `finish_open` fsyncs it.
            segment.forget_durability();
            let report = &mut self.recovery_report;
            report.segments_recovered += 1;
            report.batches_validated += found.batches;
            report.bytes_scanned += found.bytes_valid;
            expected_base = Some(segment.next_offset());
            if found.bytes_truncated == 0 && found.error.is_none() {
                continue;
            }
            let cut = segment.next_offset();
            let problem = match &found.error {
                Some(error) => format!("segment {base}: {error}"),
                None => format!(
                    "segment {base}: {} bytes after the last batch",
                    found.bytes_truncated
                ),
            };
            report.problems.push(problem.clone());
            report.truncated_to = Some(cut);
            let cut_short = matches!(
                found.error,
                Some(ScanError::Batch(BatchError::Truncated { .. }))
            );
            let torn = base == last
                && (cut_short
                    || segment
                        .is_zero_from(found.bytes_valid)
                        .map_err(LogError::io("recover segment", self.dir.clone()))?);
            if torn {
                report.torn_tail_bytes += found.bytes_truncated;
                report.bytes_truncated += found.bytes_truncated;
            } else {
                self.set_aside_in_recovery(base, found.bytes_valid, cut, &problem, now_ms)?;
            }
            // Still listed unless it was moved whole (damage at its first byte).
            if let Some(segment) = self.segments.get_mut(&base) {
                segment
                    .truncate_after_recovery(found.bytes_valid)
                    .map_err(LogError::io("truncate segment", self.dir.clone()))?;
            }
            break;
        }
        if self.recovery_report.truncated_to.is_some() {
            tracing::warn!(dir = %self.dir.display(), report = %self.recovery_report, "log truncated by recovery");
        }
        Ok(())
    }

    /// Quarantines from byte `position` of segment `base` during recovery, counting it.
    fn set_aside_in_recovery(
        &mut self,
        base: Offset,
        position: u64,
        cut: Offset,
        problem: &str,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let quarantine = self.quarantine_from(base, position, cut, problem, now_ms)?;
        self.recovery_report.bytes_truncated += quarantine.bytes;
        self.recovery_report.quarantine = Some(quarantine);
        Ok(())
    }

    /// Settles the offsets after loading: log start offset, recovery point, epoch cache; makes
    /// recovery's changes durable.
    fn finish_open(&mut self, checkpointed_start: Offset) -> Result<(), LogError> {
        let first_base = *self.segments.keys().next().expect("a segment");
        let log_end_offset = self.log_end_offset();
        if checkpointed_start > log_end_offset {
            // Kafka's LogLoader: the log lost data below the checkpointed start; start over there.
            tracing::warn!(dir = %self.dir.display(), %checkpointed_start, %log_end_offset,
                "log end offset below the log start offset; deleting all segments");
            self.truncate_fully_and_start_at(checkpointed_start)?;
            return Ok(());
        }
        self.log_start_offset = checkpointed_start.max(first_base);
        if self.recovery_report.recovered() {
            for segment in self.segments.values_mut() {
                segment
                    .sync()
                    .map_err(LogError::io("fsync segment", self.dir.clone()))?;
            }
        }
        self.sync_dir_if_needed()?;
        self.recovery_point = log_end_offset;
        let mut changed = self.epochs.truncate_from_end(log_end_offset);
        changed |= self.epochs.truncate_from_start(self.log_start_offset);
        self.save_epochs_if(changed)
    }

    /// Creates an empty segment at `base` (the directory fsync is left to the next flush).
    pub(super) fn create_segment(&mut self, base: Offset) -> Result<(), LogError> {
        assert!(
            !self.segments.contains_key(&base),
            "segment {base} already exists"
        );
        let segment = Segment::open(self.storage.as_ref(), &self.dir, base, &self.config)
            .map_err(self.io_error("create segment"))?;
        assert!(segment.is_empty(), "new segment {base} has stale data");
        self.segments.insert(base, segment);
        self.dir_unsynced = true;
        Ok(())
    }
}

/// Lists the segment base offsets in `dir`, removing leftovers: temp files of interrupted atomic
/// writes and index files (offset, time, transaction) without a log file.
fn discover_segments(
    storage: &dyn Storage,
    dir: &std::path::Path,
) -> Result<Vec<Offset>, LogError> {
    let entries = storage.list_dir(dir).map_err(LogError::io("list", dir))?;
    let mut bases = Vec::new();
    let mut indexes = Vec::new();
    for entry in entries.iter().filter(|e| !e.is_dir) {
        let name = entry.name.as_str();
        if name.ends_with(TEMP_FILE_SUFFIX) || name.ends_with(CLEANED_FILE_SUFFIX) {
            storage
                .remove_file(&dir.join(name))
                .map_err(LogError::io("remove", dir.join(name)))?;
        } else if let Some(base) = parse_segment_file_name(name, LOG_FILE_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = parse_segment_file_name(name, INDEX_FILE_SUFFIX)
            .or_else(|| parse_segment_file_name(name, TIME_INDEX_FILE_SUFFIX))
            .or_else(|| parse_segment_file_name(name, TXN_INDEX_FILE_SUFFIX))
        {
            indexes.push((base, name));
        } else if name != LEADER_EPOCH_CHECKPOINT_FILE
            && name != PARTITION_METADATA_FILE
            && name != CLEANER_OFFSET_CHECKPOINT_FILE
            && parse_segment_file_name(name, PRODUCER_SNAPSHOT_SUFFIX).is_none()
            // Files the controller keeps beside its logs' segments: metadata snapshots
            // (`<offset>.checkpoint`, Kafka's name) and the Raft state (`*.json`).
            && !name.ends_with(".checkpoint")
            && !name.ends_with(".json")
        {
            tracing::warn!(dir = %dir.display(), file = name, "ignoring unknown file in log directory");
        }
    }
    for (base, name) in indexes {
        if !bases.contains(&base) {
            storage
                .remove_file(&dir.join(name))
                .map_err(LogError::io("remove", dir.join(name)))?;
        }
    }
    bases.sort();
    Ok(bases)
}
