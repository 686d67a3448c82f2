//! Durability: the flush policy (`flush.messages`, `flush.ms`), explicit flushes, orderly close
//! and deleting the partition directory.

use std::path::PathBuf;

use super::Log;
use crate::error::LogError;
use crate::segment::{
    segment_file_name, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use crate::storage::{parent_of, read_file_if_exists, write_file_atomically, OpenMode, Storage};
use crate::types::Offset;

/// A flush of the segments rolled since the recovery point, planned under the log's lock and
/// run without it ([`Log::plan_rolled_flush`]): Kafka flushes a segment in the background when
/// it rolls and moves the recovery point to the new segment's base, so that recovery after an
/// unclean shutdown scans only the segments written since — not the whole log, as it would
/// when no flush policy is set.
#[derive(Debug)]
pub struct RolledFlush {
    dir: PathBuf,
    /// The log, offset-index and time-index files of the rolled segments not yet synced.
    files: Vec<PathBuf>,
    /// The recovery point once they are durable: the active segment's base offset.
    target: Offset,
    /// The log's generation when planned (truncation and retention bump it).
    generation: u64,
}

impl RolledFlush {
    /// Fsyncs the planned files and the partition directory (blocking IO, no lock held). A
    /// file gone meanwhile (retention, a truncation) is skipped: the log then refuses the
    /// result in [`Log::finish_rolled_flush`].
    pub fn run(&self, storage: &dyn Storage) -> std::io::Result<()> {
        for path in &self.files {
            match storage.open_file(path, OpenMode::Existing) {
                Ok(mut file) => file.sync()?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        storage.sync_dir(&self.dir)
    }
}

impl Log {
    /// Fsyncs every segment with unsynced bytes (log files and indexes), then the partition
    /// directory if segment files were created or deleted, and advances the recovery point to
    /// the log end offset.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        for segment in self.segments.values_mut().filter(|s| s.needs_sync()) {
            segment
                .sync()
                .map_err(LogError::io("fsync segment", self.dir.clone()))?;
        }
        self.sync_dir_if_needed()?;
        self.recovery_point = self.log_end_offset();
        self.last_flush_ms = now_ms;
        if self.config.test_record_flushed_offset {
            let path = self.dir.join(super::FLUSHED_OFFSET_FILE);
            write_file_atomically(
                self.storage.as_ref(),
                &path,
                self.recovery_point.0.to_string().as_bytes(),
            )
            .map_err(LogError::io("write", &path))?;
        }
        Ok(())
    }

    /// Plans the flush of the segments rolled since the recovery point (every segment below
    /// the active one), or `None` if the recovery point is already at the active segment.
    pub fn plan_rolled_flush(&self) -> Option<RolledFlush> {
        let target = self.active().base_offset();
        if target <= self.recovery_point {
            return None;
        }
        let from = self
            .segments
            .range(..=self.recovery_point)
            .next_back()
            .map_or(Offset(0), |(base, _)| *base);
        let files = self
            .segments
            .range(from..target)
            .filter(|(_, segment)| segment.needs_sync())
            .flat_map(|(base, _)| {
                [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX]
                    .map(|suffix| self.dir.join(segment_file_name(*base, suffix)))
            })
            .collect();
        Some(RolledFlush {
            dir: self.dir.clone(),
            files,
            target,
            generation: self.generation,
        })
    }

    /// Moves the recovery point to the flushed segments' end, unless the log was truncated or
    /// lost segments to retention since the plan (then a later plan flushes what is there).
    /// Returns whether it moved.
    pub fn finish_rolled_flush(&mut self, flushed: RolledFlush) -> bool {
        if flushed.generation != self.generation
            || flushed.target <= self.recovery_point
            || flushed.target > self.log_end_offset()
        {
            return false;
        }
        self.recovery_point = flushed.target;
        true
    }

    /// Test-only fault injection: truncates the log to the offset recorded at the last flush
    /// (see [`crate::LogConfig::test_record_flushed_offset`]), as if the machine had lost its
    /// page cache. Everything appended after the last flush is gone; on real hardware a crash
    /// loses at most that much. Returns the offset truncated to, if a record existed.
    pub fn truncate_to_recorded_flush(&mut self, now_ms: i64) -> Result<Option<Offset>, LogError> {
        let path = self.dir.join(super::FLUSHED_OFFSET_FILE);
        let Some(bytes) = read_file_if_exists(self.storage.as_ref(), &path)
            .map_err(LogError::io("read", &path))?
        else {
            return Ok(None);
        };
        let offset = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .ok_or_else(|| LogError::CorruptFile {
                path: path.clone(),
                reason: "not an offset".to_string(),
            })?;
        let target = Offset(offset)
            .max(self.log_start_offset)
            .min(self.log_end_offset());
        self.truncate_to(target, now_ms)?;
        Ok(Some(target))
    }

    /// Messages appended since the last flush (`log end offset - recovery point`).
    pub fn unflushed_messages(&self) -> u64 {
        (self.log_end_offset().0 - self.recovery_point.0).max(0) as u64
    }

    /// Flushes if `flush.ms` has passed since the last flush and something is unflushed; for a
    /// periodic flusher. Returns whether it flushed.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<bool, LogError> {
        let due = self
            .config
            .flush_ms
            .is_some_and(|ms| now_ms.saturating_sub(self.last_flush_ms) >= ms);
        if due && self.unflushed_messages() > 0 {
            self.flush(now_ms)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The flush policy after an append: flush once `flush.messages` messages are unflushed or
    /// `flush.ms` has passed since the last flush.
    pub(super) fn maybe_flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        let by_count = self
            .config
            .flush_messages
            .is_some_and(|n| self.unflushed_messages() >= n);
        let by_time = self
            .config
            .flush_ms
            .is_some_and(|ms| now_ms.saturating_sub(self.last_flush_ms) >= ms);
        if by_count || by_time {
            self.flush(now_ms)?;
        }
        Ok(())
    }

    /// Orderly close: writes the active segment's final time index entry, flushes everything and
    /// writes the epoch checkpoint. The per-directory checkpoints and the clean-shutdown file are
    /// the [`crate::LogDir`]'s job, after every log is closed.
    pub fn close(&mut self, now_ms: i64) -> Result<(), LogError> {
        let io_error = self.io_error("finish segment");
        self.active_mut().finish_time_index().map_err(io_error)?;
        self.flush(now_ms)?;
        self.write_producer_snapshot()?;
        self.save_epochs_if(true)
    }

    /// Removes the partition directory and everything in it, durably.
    pub fn delete(self) -> Result<(), LogError> {
        let Log {
            storage,
            dir,
            segments,
            ..
        } = self;
        drop(segments);
        storage
            .remove_dir_all(&dir)
            .map_err(LogError::io("remove directory", &dir))?;
        let parent = parent_of(&dir).map_err(LogError::io("remove directory", &dir))?;
        storage
            .sync_dir(&parent)
            .map_err(LogError::io("fsync directory", &parent))
    }
}
