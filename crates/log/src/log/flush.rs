//! Durability: the flush policy (`flush.messages`, `flush.ms`), explicit flushes, orderly close
//! and deleting the partition directory.

use super::Log;
use crate::error::LogError;
use crate::storage::{parent_of, read_file_if_exists, write_file_atomically};
use crate::types::Offset;

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
