//! Truncation: a follower dropping its divergent suffix (`truncate_to`), starting over at an
//! offset (`truncate_fully_and_start_at`), and moving the log start offset forward
//! (`increment_log_start_offset`, DeleteRecords). Truncations are fsynced before returning.

use super::quarantine::Quarantine;
use super::Log;
use crate::error::{Damage, LogError};
use crate::producer_state::ProducerStates;
use crate::types::Offset;

impl Log {
    /// Drops every batch at or above `offset`, at whole-batch granularity: a batch straddling
    /// `offset` is dropped too, so the new log end offset is the base offset of the batch
    /// containing `offset`. No-op if `offset >= log_end_offset`; below the log start offset the
    /// log starts over at `offset`. The epoch cache drops epochs starting at or after the new
    /// log end. The whole log is then flushed (recovery point = new log end offset). Returns
    /// whether anything was dropped.
    pub fn truncate_to(&mut self, offset: Offset, now_ms: i64) -> Result<bool, LogError> {
        if offset >= self.log_end_offset() {
            // Nothing to drop — but an epoch this replica assigned as a leader that never
            // appended starts at the log end, and left there it would diverge from the leader's
            // history at every fetch (Kafka's UnifiedLog.truncateTo does the same).
            let changed = self.epochs.truncate_from_end(self.log_end_offset());
            self.save_epochs_if(changed)?;
            return Ok(false);
        }
        if offset < self.log_start_offset {
            self.truncate_fully_and_start_at(offset)?;
            return Ok(true);
        }
        let base = *self
            .segments
            .range(..=offset)
            .next_back()
            .expect("offset >= log start >= first segment base")
            .0;
        let io_error = self.io_error("truncate");
        let segment = self.segments.get_mut(&base).expect("listed segment");
        let Some((position, header)) = segment.find_batch(offset).map_err(io_error)? else {
            // Every offset between the base and the log end is in the segment unless a batch
            // header on the way was damaged since it was written.
            let end = segment
                .visit_batches(0, |_, _| Ok(crate::segment::Visit::Continue))
                .map_err(self.io_error("truncate"))?;
            return Err(LogError::Damaged(Damage {
                segment: base,
                position: end.position,
                reason: end.error.map_or_else(
                    || format!("offset {offset} is not in its segment"),
                    |e| e.to_string(),
                ),
            }));
        };
        let doomed: Vec<Offset> = self
            .segments
            .range(base.next()..)
            .map(|(b, _)| *b)
            .collect();
        self.generation += 1;
        for later in doomed {
            let segment = self.segments.remove(&later).expect("listed segment");
            segment
                .delete(self.storage.as_ref(), &self.dir)
                .map_err(self.io_error("delete segment"))?;
            self.dir_unsynced = true;
        }
        self.truncate_segment_at(base, position, header.base_offset, now_ms)?;
        tracing::info!(dir = %self.dir.display(), requested = %offset,
            log_end_offset = %self.log_end_offset(), "truncated log");
        Ok(true)
    }

    /// Sets aside the damage a verified read or the scrubber found ([`crate::Log::read_verified`],
    /// [`crate::ScrubTask`]): the log then ends before the damaged batch, the damaged segment is
    /// copied and every later segment moved into a quarantine directory (never deleted), and
    /// the truncation is durable. `None` if the damage is no longer in the log (the segment was
    /// deleted, truncated or compacted since it was found): nothing changes then.
    pub fn set_aside_damage(
        &mut self,
        damage: &Damage,
        now_ms: i64,
    ) -> Result<Option<Quarantine>, LogError> {
        let Some(segment) = self.segments.get(&damage.segment) else {
            return Ok(None);
        };
        if damage.position >= segment.size_bytes() {
            return Ok(None);
        }
        let io_error = self.io_error("find damaged batch");
        // A valid batch in the wrong place before it (a misdirected write) is damage too: the
        // log ends before that one, never after a batch that is not where its offsets say.
        let Some((position, cut)) = segment
            .damage_start(damage.position, self.gaps_allowed())
            .map_err(io_error)?
        else {
            // Not a batch boundary of this segment as it is now: it changed since.
            return Ok(None);
        };
        self.generation += 1;
        let quarantine =
            self.quarantine_from(damage.segment, position, cut, &damage.reason, now_ms)?;
        if self.segments.contains_key(&damage.segment) {
            self.truncate_segment_at(damage.segment, position, cut, now_ms)?;
        } else {
            // Moved whole: the log ends where the previous segment ends.
            self.flush(now_ms)?;
            let log_end_offset = self.log_end_offset();
            let changed = self.epochs.truncate_from_end(log_end_offset);
            self.save_epochs_if(changed)?;
            self.load_producer_state()?;
            self.check_invariants();
        }
        if self.log_start_offset > self.log_end_offset() {
            // Everything from the log start on was damaged.
            let start = self.log_start_offset;
            self.truncate_fully_and_start_at(start)?;
        }
        Ok(Some(quarantine))
    }

    /// Cuts segment `base` at byte `position` (a batch boundary; `next_offset` the offset after
    /// the batches before it), the last segment now, and settles everything that depends on
    /// the log end: flush, epoch cache, producer state, cleaner offset.
    fn truncate_segment_at(
        &mut self,
        base: Offset,
        position: u64,
        next_offset: Offset,
        now_ms: i64,
    ) -> Result<(), LogError> {
        assert!(
            self.segments.range(base.next()..).next().is_none(),
            "the segment cut is the last one"
        );
        let io_error = self.io_error("truncate");
        let segment = self.segments.get_mut(&base).expect("listed segment");
        segment
            .truncate_to(position, next_offset, now_ms)
            .map_err(io_error)?;
        // Flush everything: the truncation and the surviving prefix become durable, and the
        // recovery point is exact (the log end offset), never stale above it.
        self.flush(now_ms)?;
        let log_end_offset = self.log_end_offset();
        let changed = self.epochs.truncate_from_end(log_end_offset);
        self.save_epochs_if(changed)?;
        self.load_producer_state()?;
        if self.cleaner_offset > log_end_offset {
            self.set_cleaner_offset(log_end_offset, self.delete_horizon_ms)?;
        }
        self.sync_dir_if_needed()?;
        self.check_invariants();
        Ok(())
    }

    /// Deletes every segment and starts an empty log at `offset`: log start offset, log end
    /// offset and recovery point all become `offset`; the epoch cache is cleared.
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<(), LogError> {
        if offset.0 < 0 {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset(),
            });
        }
        self.generation += 1;
        let all = std::mem::take(&mut self.segments);
        for (_, segment) in all {
            segment
                .delete(self.storage.as_ref(), &self.dir)
                .map_err(self.io_error("delete segment"))?;
        }
        self.dir_unsynced = true;
        self.producers = ProducerStates::new();
        self.aborted.clear();
        self.delete_producer_snapshots(|_| true)?;
        if self.cleaner_offset > Offset(0) {
            // Only a log that was compacted keeps a cleaner offset (it also allows offset gaps
            // in recovery, see `gaps_allowed`).
            self.set_cleaner_offset(offset, None)?;
        }
        self.create_segment(offset)?;
        self.sync_dir_if_needed()?;
        self.log_start_offset = offset;
        self.recovery_point = offset;
        let changed = self.epochs.clear();
        self.save_epochs_if(changed)?;
        self.check_invariants();
        Ok(())
    }

    /// Moves the log start offset forward to `offset` (DeleteRecords, or a follower following
    /// the leader's start). Segments wholly below it are deleted by the next
    /// [`Log::apply_retention`]. Returns whether it moved. `offset` past the log end offset is
    /// `OffsetOutOfRange`.
    pub fn increment_log_start_offset(&mut self, offset: Offset) -> Result<bool, LogError> {
        let log_end_offset = self.log_end_offset();
        if offset > log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                log_start_offset: self.log_start_offset,
                log_end_offset,
            });
        }
        if offset <= self.log_start_offset {
            return Ok(false);
        }
        self.log_start_offset = offset;
        let changed = self.epochs.truncate_from_start(offset);
        self.save_epochs_if(changed)?;
        Ok(true)
    }
}
