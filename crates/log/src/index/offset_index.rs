//! The sparse offset index of one segment, `{base_offset:020}.index`: 8-byte entries
//! `(relative offset u32 BE, file position u32 BE)`. An entry `(o, p)` says the batch starting at
//! byte `p` of the segment ends at offset `base + o` (Kafka's layout: the entry names the batch's
//! last offset). Entries are strictly increasing in both fields.
//!
//! The entries live in memory; the file is append-only and rewritten only by truncation. Only the
//! owning segment calls this.

use std::io;
use std::path::{Path, PathBuf};

use crate::storage::{OpenMode, Storage, StorageFile};
use crate::types::Offset;

/// Bytes per offset-index entry.
pub const OFFSET_INDEX_ENTRY_BYTES: usize = 8;

/// One entry, with the offset made absolute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetIndexEntry {
    /// Last offset of the indexed batch.
    pub offset: Offset,
    /// Byte position of the indexed batch in the segment.
    pub position: u32,
}

/// The offset index of one segment.
#[derive(Debug)]
pub(crate) struct OffsetIndex {
    path: PathBuf,
    file: Box<dyn StorageFile>,
    base_offset: Offset,
    entries: Vec<(u32, u32)>,
    max_entries: usize,
    /// Whether the file's size was a whole number of entries when loaded.
    whole_entries_on_load: bool,
}

impl OffsetIndex {
    /// Opens (or creates) the index file and loads its entries without judging them.
    pub fn open(
        storage: &dyn Storage,
        path: &Path,
        base_offset: Offset,
        max_entries: usize,
    ) -> io::Result<OffsetIndex> {
        let file = storage.open_file(path, OpenMode::CreateOrOpen)?;
        let bytes = file.read_all()?;
        let entries = bytes
            .chunks_exact(OFFSET_INDEX_ENTRY_BYTES)
            .map(|c| {
                (
                    u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        Ok(OffsetIndex {
            path: path.to_path_buf(),
            file,
            base_offset,
            entries,
            max_entries,
            whole_entries_on_load: bytes.len() % OFFSET_INDEX_ENTRY_BYTES == 0,
        })
    }

    /// Checks the loaded entries against the segment: whole entries, strictly increasing
    /// offsets and positions, positions inside the segment. `Err` explains what is wrong.
    pub fn sanity_check(&self, segment_bytes: u64) -> Result<(), String> {
        if !self.whole_entries_on_load {
            return Err(format!("{} has a partial entry", self.path.display()));
        }
        for pair in self.entries.windows(2) {
            if pair[1].0 <= pair[0].0 || pair[1].1 <= pair[0].1 {
                return Err(format!(
                    "{} entries are not increasing",
                    self.path.display()
                ));
            }
        }
        if let Some(&(_, position)) = self.entries.last() {
            if u64::from(position) >= segment_bytes {
                return Err(format!(
                    "{} points at byte {position}, past the segment end {segment_bytes}",
                    self.path.display()
                ));
            }
        }
        Ok(())
    }

    /// Whether another entry would exceed `segment.index.bytes`.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The last entry.
    pub fn last(&self) -> Option<OffsetIndexEntry> {
        self.entries.last().map(|&e| self.absolute(e))
    }

    /// Appends an entry for the batch at `position` whose last offset is `offset`.
    pub fn append(&mut self, offset: Offset, position: u32) -> io::Result<()> {
        let relative = u32::try_from(offset.0 - self.base_offset.0)
            .expect("offset within the segment's relative range (checked before append)");
        if let Some(&(last_relative, last_position)) = self.entries.last() {
            assert!(
                relative > last_relative,
                "offset index offsets must increase"
            );
            assert!(
                position > last_position,
                "offset index positions must increase"
            );
        }
        assert!(!self.is_full(), "append to a full offset index");
        let mut entry = [0u8; OFFSET_INDEX_ENTRY_BYTES];
        entry[..4].copy_from_slice(&relative.to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        self.file.append(&entry)?;
        self.entries.push((relative, position));
        Ok(())
    }

    /// The entry with the largest offset `<= target`, if any.
    pub fn lookup(&self, target: Offset) -> Option<OffsetIndexEntry> {
        let relative = target.0 - self.base_offset.0;
        let count = self
            .entries
            .partition_point(|&(rel, _)| i64::from(rel) <= relative);
        count.checked_sub(1).map(|i| self.absolute(self.entries[i]))
    }

    /// Drops entries pointing at or past `segment_bytes` (after the segment was truncated).
    pub fn truncate_to_position(&mut self, segment_bytes: u64) -> io::Result<()> {
        let keep = self
            .entries
            .partition_point(|&(_, pos)| u64::from(pos) < segment_bytes);
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
        // Entries were loaded from whole 8-byte chunks, so the file is at least this long.
        self.file.truncate((keep * OFFSET_INDEX_ENTRY_BYTES) as u64)
    }

    fn absolute(&self, (relative, position): (u32, u32)) -> OffsetIndexEntry {
        OffsetIndexEntry {
            offset: self.base_offset.plus(i64::from(relative)),
            position,
        }
    }
}
