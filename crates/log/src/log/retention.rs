//! Rolling segments and deleting old ones: `retention.ms`, `retention.bytes`, and segments wholly
//! below the log start offset (Kafka's `deleteOldSegments`).

use super::Log;
use crate::error::LogError;
use crate::segment::Segment;
use crate::types::Offset;

/// Why a segment was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionReason {
    /// Its newest timestamp is older than `retention.ms`.
    Time,
    /// The log was larger than `retention.bytes`.
    Size,
    /// It lies wholly below the log start offset.
    LogStartOffset,
}

/// One deleted segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedSegment {
    /// Its base offset.
    pub base_offset: Offset,
    /// Its size.
    pub size_bytes: u64,
    /// Why it went.
    pub reason: RetentionReason,
}

/// What [`Log::apply_retention`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionResult {
    /// Deleted segments, oldest first.
    pub deleted: Vec<DeletedSegment>,
    /// The log start offset afterwards.
    pub log_start_offset: Offset,
}

impl Log {
    /// Rolls a new active segment at the log end offset (unless the active one is empty).
    /// The old active segment gets its final time index entry.
    pub fn roll(&mut self) -> Result<bool, LogError> {
        if self.active().is_empty() {
            return Ok(false);
        }
        let io_error = self.io_error("finish segment");
        self.active_mut().finish_time_index().map_err(io_error)?;
        self.create_segment(self.log_end_offset())?;
        self.write_producer_snapshot()?;
        Ok(true)
    }

    /// Rolls an idle active segment older than `segment.ms` (Kafka rolls only on append; this
    /// lets a periodic task do it too). Returns whether it rolled.
    pub fn maybe_roll(&mut self, now_ms: i64) -> Result<bool, LogError> {
        if self.active().is_empty() || !self.active().is_expired(now_ms, &self.config) {
            return Ok(false);
        }
        self.roll()
    }

    /// Deletes whole oldest segments, never one holding offsets at or above `high_watermark`:
    /// first those whose newest batch timestamp is older than `retention.ms` (`now_ms - max
    /// timestamp > retention.ms`; segments without timestamps never expire), then while the log
    /// is larger than `retention.bytes`, then those wholly below the log start offset. If every
    /// segment including the non-empty active one qualifies, a new active segment is rolled
    /// first (as Kafka does). The log start offset advances to the first remaining segment.
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        high_watermark: Offset,
    ) -> Result<RetentionResult, LogError> {
        let mut deleted = Vec::new();
        let delete_policy = self.config.cleanup_policy.delete;
        if let Some(retention_ms) = self.config.retention_ms.filter(|_| delete_policy) {
            let expired = |s: &Segment, _: Option<Offset>| {
                s.max_timestamp()
                    .is_some_and(|m| now_ms.saturating_sub(m.timestamp) > retention_ms)
            };
            self.delete_oldest(high_watermark, RetentionReason::Time, expired, &mut deleted)?;
        }
        if let Some(retention_bytes) = self.config.retention_bytes.filter(|_| delete_policy) {
            let mut excess = self.size_bytes().saturating_sub(retention_bytes);
            let too_big = |s: &Segment, _: Option<Offset>| {
                let fits = s.size_bytes() <= excess;
                if fits {
                    excess -= s.size_bytes();
                }
                fits
            };
            self.delete_oldest(high_watermark, RetentionReason::Size, too_big, &mut deleted)?;
        }
        let log_start_offset = self.log_start_offset;
        let below_start = |_: &Segment, next_base: Option<Offset>| {
            next_base.is_some_and(|n| n <= log_start_offset)
        };
        self.delete_oldest(
            high_watermark,
            RetentionReason::LogStartOffset,
            below_start,
            &mut deleted,
        )?;
        if !deleted.is_empty() {
            self.sync_dir_if_needed()?;
            tracing::info!(dir = %self.dir.display(), segments = deleted.len(),
                log_start_offset = %self.log_start_offset, "deleted segments by retention");
        }
        self.check_invariants();
        Ok(RetentionResult {
            deleted,
            log_start_offset: self.log_start_offset,
        })
    }

    /// Deletes the segments wholly below the log start offset — what [`Log::apply_retention`]
    /// does last — without the time and size rules: right after a DeleteRecords moved the log
    /// start offset (on the leader, or on a follower following the leader's), so the disk space
    /// is freed at once instead of at the next retention check. Never a segment holding offsets
    /// at or above `high_watermark`; never the active segment.
    pub fn delete_segments_below_log_start(
        &mut self,
        high_watermark: Offset,
    ) -> Result<RetentionResult, LogError> {
        let mut deleted = Vec::new();
        let log_start_offset = self.log_start_offset;
        let below_start = |_: &Segment, next_base: Option<Offset>| {
            next_base.is_some_and(|n| n <= log_start_offset)
        };
        self.delete_oldest(
            high_watermark,
            RetentionReason::LogStartOffset,
            below_start,
            &mut deleted,
        )?;
        if !deleted.is_empty() {
            self.sync_dir_if_needed()?;
            tracing::info!(dir = %self.dir.display(), segments = deleted.len(),
                log_start_offset = %self.log_start_offset, "deleted segments below the log start offset");
        }
        self.check_invariants();
        Ok(RetentionResult {
            deleted,
            log_start_offset: self.log_start_offset,
        })
    }

    /// Deletes the longest run of oldest segments for which `doomed(segment, next base)` holds,
    /// whose end is at or below `high_watermark`, skipping an empty active segment.
    fn delete_oldest(
        &mut self,
        high_watermark: Offset,
        reason: RetentionReason,
        mut doomed: impl FnMut(&Segment, Option<Offset>) -> bool,
        deleted: &mut Vec<DeletedSegment>,
    ) -> Result<(), LogError> {
        let mut count = 0;
        let mut iter = self.segments.values().peekable();
        while let Some(segment) = iter.next() {
            let next_base = iter.peek().map(|s| s.base_offset());
            let upper_bound = next_base.unwrap_or_else(|| segment.next_offset());
            let last_and_empty = next_base.is_none() && segment.is_empty();
            if !doomed(segment, next_base) || last_and_empty || upper_bound > high_watermark {
                break;
            }
            count += 1;
        }
        if count == 0 {
            return Ok(());
        }
        if count == self.segments.len() {
            self.roll()?;
        }
        self.generation += 1;
        let bases: Vec<Offset> = self.segments.keys().take(count).copied().collect();
        for base in bases {
            let segment = self.segments.remove(&base).expect("listed segment");
            deleted.push(DeletedSegment {
                base_offset: base,
                size_bytes: segment.size_bytes(),
                reason,
            });
            segment
                .delete(self.storage.as_ref(), &self.dir)
                .map_err(self.io_error("delete segment"))?;
            self.dir_unsynced = true;
        }
        let first_base = *self
            .segments
            .keys()
            .next()
            .expect("the active segment remains");
        self.delete_producer_snapshots(|offset| offset < first_base)?;
        self.trim_aborted();
        if first_base > self.log_start_offset {
            self.log_start_offset = first_base;
            let changed = self.epochs.truncate_from_start(first_base);
            self.save_epochs_if(changed)?;
        }
        self.recovery_point = self.recovery_point.max(self.log_start_offset);
        Ok(())
    }
}
