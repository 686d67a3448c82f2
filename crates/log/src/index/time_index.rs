//! The sparse time index of one segment, `{base_offset:020}.timeindex`: 12-byte entries
//! `(timestamp i64 BE, relative offset u32 BE)`. An entry `(t, o)` says the largest batch
//! `maxTimestamp` seen up to the batch starting at offset `base + o` is `t`, and that batch is the
//! first to reach it: every earlier batch has a smaller `maxTimestamp`. Timestamps are strictly
//! increasing, offsets non-decreasing (Kafka's layout). Only the owning segment calls this.

use std::io;
use std::path::{Path, PathBuf};

use crate::storage::{OpenMode, Storage, StorageFile};
use crate::types::{Offset, TimestampOffset};

/// Bytes per time-index entry.
pub const TIME_INDEX_ENTRY_BYTES: usize = 12;

/// The time index of one segment.
#[derive(Debug)]
pub(crate) struct TimeIndex {
    path: PathBuf,
    file: Box<dyn StorageFile>,
    base_offset: Offset,
    entries: Vec<(i64, u32)>,
    max_entries: usize,
    whole_entries_on_load: bool,
}

impl TimeIndex {
    /// Opens (or creates) the index file and loads its entries without judging them.
    pub fn open(
        storage: &dyn Storage,
        path: &Path,
        base_offset: Offset,
        max_entries: usize,
    ) -> io::Result<TimeIndex> {
        let file = storage.open_file(path, OpenMode::CreateOrOpen)?;
        let bytes = file.read_all()?;
        let entries = bytes
            .chunks_exact(TIME_INDEX_ENTRY_BYTES)
            .map(|c| {
                let mut ts = [0u8; 8];
                ts.copy_from_slice(&c[..8]);
                (
                    i64::from_be_bytes(ts),
                    u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
                )
            })
            .collect();
        Ok(TimeIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            max_entries,
            whole_entries_on_load: bytes.len() % TIME_INDEX_ENTRY_BYTES == 0,
        })
    }

    /// Checks the loaded entries: whole entries, increasing timestamps, non-decreasing offsets
    /// below `next_offset` (the segment's end). `Err` explains what is wrong.
    pub fn sanity_check(&self, next_offset: Offset) -> Result<(), String> {
        if !self.whole_entries_on_load {
            return Err(format!("{} has a partial entry", self.path.display()));
        }
        for pair in self.entries.windows(2) {
            if pair[1].0 <= pair[0].0 || pair[1].1 < pair[0].1 {
                return Err(format!(
                    "{} entries are not increasing",
                    self.path.display()
                ));
            }
        }
        if let Some(last) = self.last() {
            if last.offset >= next_offset {
                return Err(format!(
                    "{} names offset {}, past the segment end {next_offset}",
                    self.path.display(),
                    last.offset
                ));
            }
        }
        Ok(())
    }

    /// Whether another entry would exceed `segment.index.bytes`.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    /// The last entry.
    pub fn last(&self) -> Option<TimestampOffset> {
        self.entries.last().map(|&e| self.absolute(e))
    }

    /// Appends `(timestamp, offset)` if `timestamp` is larger than the last entry's and the index
    /// is not full. The final entry written when a segment becomes inactive may exceed the size
    /// limit by one (`allow_full`), as in Kafka.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: Offset,
        allow_full: bool,
    ) -> io::Result<()> {
        if let Some(&(last_ts, last_rel)) = self.entries.last() {
            if timestamp <= last_ts {
                return Ok(());
            }
            assert!(
                offset.0 - self.base_offset.0 >= i64::from(last_rel),
                "time index offsets must not decrease"
            );
        }
        if self.is_full() && !allow_full {
            return Ok(());
        }
        let relative = u32::try_from(offset.0 - self.base_offset.0)
            .expect("offset within the segment's relative range (checked before append)");
        let mut entry = [0u8; TIME_INDEX_ENTRY_BYTES];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&relative.to_be_bytes());
        self.file.append(&entry)?;
        self.entries.push((timestamp, relative));
        Ok(())
    }

    /// The entry with the largest timestamp `<= target`, if any.
    pub fn lookup(&self, target: i64) -> Option<TimestampOffset> {
        let count = self.entries.partition_point(|&(ts, _)| ts <= target);
        count.checked_sub(1).map(|i| self.absolute(self.entries[i]))
    }

    /// Drops entries naming offsets at or past `next_offset` (after the segment was truncated).
    pub fn truncate_to_offset(&mut self, next_offset: Offset) -> io::Result<()> {
        let limit = next_offset.0 - self.base_offset.0;
        let keep = self
            .entries
            .partition_point(|&(_, rel)| i64::from(rel) < limit);
        self.truncate_entries(keep)
    }

    /// Drops every entry (before a rebuild).
    pub fn reset(&mut self) -> io::Result<()> {
        self.truncate_entries(0)?;
        self.whole_entries_on_load = true;
        Ok(())
    }

    /// Fsyncs the index file.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync()
    }

    fn truncate_entries(&mut self, keep: usize) -> io::Result<()> {
        self.entries.truncate(keep);
        // Entries were loaded from whole 12-byte chunks, so the file is at least this long.
        self.file.truncate((keep * TIME_INDEX_ENTRY_BYTES) as u64)
    }

    fn absolute(&self, (timestamp, relative): (i64, u32)) -> TimestampOffset {
        TimestampOffset {
            timestamp,
            offset: self.base_offset.plus(i64::from(relative)),
        }
    }
}
