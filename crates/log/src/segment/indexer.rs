//! The indexing half of a segment: its two indexes plus the state derived from its batches
//! (next offset, max timestamp, bytes since the last index entry), updated batch by batch with
//! Kafka's rule. Kept apart from the log file so a scan can read the file while indexing.

use std::io;

use crate::batch::BatchHeader;
use crate::index::{OffsetIndex, TimeIndex};
use crate::types::{Offset, TimestampOffset};

/// The indexes and the state derived from the batches, updated batch by batch. Kept apart from
/// the log file so a scan can read the file while indexing.
#[derive(Debug)]
pub(super) struct Indexer {
    pub(super) base_offset: Offset,
    pub(super) offset_index: OffsetIndex,
    pub(super) time_index: TimeIndex,
    pub(super) next_offset: Offset,
    /// Largest batch max timestamp and the base offset of the first batch carrying it.
    pub(super) max_timestamp: Option<TimestampOffset>,
    pub(super) bytes_since_last_index_entry: u64,
    pub(super) index_interval_bytes: u64,
    pub(super) unsynced: bool,
}

impl Indexer {
    pub(super) fn reset(&mut self) -> io::Result<()> {
        self.offset_index.reset()?;
        self.time_index.reset()?;
        self.max_timestamp = None;
        self.next_offset = self.base_offset;
        self.bytes_since_last_index_entry = 0;
        self.unsynced = true;
        Ok(())
    }

    /// Whether Kafka's indexing rule wants an entry for the next batch: more than
    /// `index.interval.bytes` since the last entry, and room in the index.
    pub(super) fn wants_entry(&self) -> bool {
        self.bytes_since_last_index_entry > self.index_interval_bytes
            && !self.offset_index.is_full()
    }

    /// Updates the derived state for a batch that is already indexed (or needs no entry).
    pub(super) fn follow(&mut self, header: &BatchHeader) {
        self.max_timestamp = merge_max(self.max_timestamp, header);
        let size = header.size_bytes().expect("validated batch has a size") as u64;
        self.bytes_since_last_index_entry += size;
        self.next_offset = header.next_offset();
    }

    /// Kafka's per-batch indexing: track the max timestamp, and once more than
    /// `index.interval.bytes` were appended since the last entry, index this batch.
    pub(super) fn index_batch(&mut self, position: u64, header: &BatchHeader) -> io::Result<()> {
        let relative = header.last_offset().0 - self.base_offset.0;
        if self.wants_entry() && relative <= i64::from(u32::MAX) {
            // The entry's time index part uses the max timestamp including this batch.
            self.max_timestamp = merge_max(self.max_timestamp, header);
            let position = u32::try_from(position).expect("segment positions fit u32");
            self.offset_index.append(header.last_offset(), position)?;
            if let Some(max) = self.max_timestamp {
                self.time_index
                    .maybe_append(max.timestamp, max.offset, false)?;
            }
            self.bytes_since_last_index_entry = 0;
            self.unsynced = true;
        }
        self.follow(header);
        Ok(())
    }
}

/// The larger of `max` and the batch's max timestamp (ignoring negative "no timestamp" values);
/// ties keep the earlier batch.
fn merge_max(max: Option<TimestampOffset>, header: &BatchHeader) -> Option<TimestampOffset> {
    if header.max_timestamp < 0 || max.is_some_and(|m| m.timestamp >= header.max_timestamp) {
        return max;
    }
    Some(TimestampOffset {
        timestamp: header.max_timestamp,
        offset: header.base_offset,
    })
}
