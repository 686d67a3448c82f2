//! Opening a log: discovering segment files, trusting them after a clean shutdown, and crash
//! recovery after an unclean one (validate every batch from the recovery point on, truncate at
//! the first torn or corrupt batch, rebuild indexes, fix the epoch cache).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::compact::{CLEANED_FILE_SUFFIX, CLEANER_OFFSET_CHECKPOINT_FILE};
use super::{Log, LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE};
use crate::checkpoint::read_epoch_checkpoint;
use crate::config::LogConfig;
use crate::epoch_cache::LeaderEpochCache;
use crate::error::LogError;
use crate::producer_state::{ProducerStates, PRODUCER_SNAPSHOT_SUFFIX};
use crate::segment::{
    parse_segment_file_name, Check, Segment, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
use crate::storage::{create_dir_all_durable, Storage, TEMP_FILE_SUFFIX};
use crate::types::Offset;

/// What [`Log::open`] did, for the broker to log ("recovery skipped" vs "recovered N batches,
/// truncated M bytes").
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
    /// Bytes removed: the torn or corrupt tail plus every later segment.
    pub bytes_truncated: u64,
    /// Later segments deleted because an earlier one was truncated.
    pub segments_deleted: usize,
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
            write!(
                f,
                " (log end offset now {offset}, {} later segments deleted)",
                self.segments_deleted
            )?;
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
        for base in &bases {
            if recover_from.is_some_and(|from| *base >= from) {
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
        }
        if let Some(from) = recover_from {
            self.recover_segments(from, now_ms)?;
        }
        Ok(())
    }

    /// Recovers every segment from base `from` on, stopping (and deleting the rest) at the first
    /// truncation or offset gap.
    fn recover_segments(&mut self, from: Offset, now_ms: i64) -> Result<(), LogError> {
        let bases: Vec<Offset> = self.segments.range(from..).map(|(b, _)| *b).collect();
        let mut expected_base = self
            .segments
            .range(..from)
            .next_back()
            .map(|(_, s)| s.next_offset());
        let mut cut = None;
        for base in bases {
            if expected_base.is_some_and(|expected| expected != base) {
                let problem = format!(
                    "segment {base} does not start at the previous segment's end {}",
                    expected_base.expect("checked")
                );
                self.recovery_report.problems.push(problem);
                cut = Some(base);
                break;
            }
            let allow_gaps = self.gaps_allowed();
            let segment = self.segments.get_mut(&base).expect("listed segment");
            let found = segment
                .recover(now_ms, allow_gaps, Check::Full)
                .map_err(LogError::io("recover segment", self.dir.clone()))?;
            let report = &mut self.recovery_report;
            report.segments_recovered += 1;
            report.batches_validated += found.batches;
            report.bytes_scanned += found.bytes_valid;
            report.bytes_truncated += found.bytes_truncated;
            expected_base = Some(segment.next_offset());
            if found.bytes_truncated > 0 || found.error.is_some() {
                if let Some(error) = found.error {
                    report.problems.push(format!("segment {base}: {error}"));
                }
                report.truncated_to = Some(segment.next_offset());
                cut = self.segments.range(base.next()..).next().map(|(b, _)| *b);
                break;
            }
        }
        if let Some(cut) = cut {
            self.delete_segments_from(cut)?;
        }
        if self.recovery_report.truncated_to.is_some() {
            tracing::warn!(dir = %self.dir.display(), report = %self.recovery_report, "log truncated by recovery");
        }
        Ok(())
    }

    /// Deletes every segment with base `>= from` during recovery, counting them as truncated.
    fn delete_segments_from(&mut self, from: Offset) -> Result<(), LogError> {
        let doomed: Vec<Offset> = self.segments.range(from..).map(|(b, _)| *b).collect();
        for base in doomed {
            let segment = self.segments.remove(&base).expect("listed segment");
            self.recovery_report.bytes_truncated += segment.size_bytes();
            self.recovery_report.segments_deleted += 1;
            segment
                .delete(self.storage.as_ref(), &self.dir)
                .map_err(LogError::io("delete segment", self.dir.clone()))?;
            self.dir_unsynced = true;
        }
        if self.recovery_report.truncated_to.is_none() {
            self.recovery_report.truncated_to = Some(self.log_end_offset());
        }
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
/// writes and index files without a log file.
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
