//! Setting damaged data aside instead of deleting it.
//!
//! When a batch fails validation (at recovery, when a read served to a follower checks it, or
//! when the scrubber walks a closed segment) the log must end before that batch: Kafka's log
//! has no holes. Everything from the damaged batch on leaves the log — but none of it is
//! deleted. The damaged segment is copied whole, and every later segment is moved, into a
//! sibling directory of the partition's, `<topic>-<partition>.<cut offset>-<time ms>-quarantine`
//! (a name the broker never loads as a partition), with a `quarantine.json` saying what
//! happened. It stays there until an operator removes it: it may hold the only copy of records
//! that are intact, and the damaged bytes are evidence.
//!
//! Crash safety: the copy and the moves are durable (fsync of the files and both directories)
//! before the caller truncates the segment. A crash in between leaves the damaged segment in
//! place; the next recovery finds the damage again and sets it aside again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Log;
use crate::error::LogError;
use crate::segment::{
    segment_file_name, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use crate::storage::{create_dir_all_durable, parent_of, write_file_atomically, OpenMode, Storage};
use crate::types::Offset;

/// Suffix of a quarantine directory's name.
pub const QUARANTINE_SUFFIX: &str = "-quarantine";
/// The file in a quarantine directory that describes it.
pub const QUARANTINE_INFO_FILE: &str = "quarantine.json";
/// Bytes copied per read while copying a damaged segment.
const COPY_CHUNK_BYTES: usize = 1024 * 1024;
/// Largest `quarantine.json` read back (it is a few hundred bytes; anything larger is not ours).
pub const QUARANTINE_INFO_BYTES_MAX: u64 = 64 * 1024;

/// What was set aside, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// The quarantine directory.
    pub path: PathBuf,
    /// The partition directory the data came from.
    pub partition_dir: PathBuf,
    /// The log end offset after the cut: the first offset the log no longer holds.
    pub from_offset: Offset,
    /// Base offset of the segment holding the damaged batch.
    pub damaged_segment: Offset,
    /// Byte position of the damaged batch in that segment.
    pub position: u64,
    /// Segment files set aside: the damaged one (copied) and every later one (moved).
    pub segments: usize,
    /// Bytes the log no longer holds: the damaged segment's from `position` on, plus the later
    /// segments.
    pub bytes: u64,
    /// What was wrong.
    pub reason: String,
    /// When (the broker's clock).
    pub time_ms: i64,
}

impl Quarantine {
    /// Reads the description of the quarantine directory at `path` (`None` if it has none or
    /// it cannot be parsed: an operator's own directory of that name).
    pub fn read(storage: &dyn Storage, path: &Path) -> Option<Quarantine> {
        let file = storage
            .open_file(&path.join(QUARANTINE_INFO_FILE), OpenMode::Existing)
            .ok()?;
        if file.size().ok()? > QUARANTINE_INFO_BYTES_MAX {
            return None;
        }
        serde_json::from_slice(&file.read_all().ok()?).ok()
    }
}

impl Log {
    /// Sets aside everything from byte `position` of segment `base` on: copies that segment
    /// whole (or, when `position` is 0 and it is not the first segment, moves it) and moves
    /// every later segment into a new quarantine directory, durably. The later segments leave
    /// `self.segments`; the caller then truncates segment `base` at `position` (unless it was
    /// moved) so that the log ends at `from_offset`.
    pub(super) fn quarantine_from(
        &mut self,
        base: Offset,
        position: u64,
        from_offset: Offset,
        reason: &str,
        now_ms: i64,
    ) -> Result<Quarantine, LogError> {
        let target = self.quarantine_path(from_offset, now_ms)?;
        create_dir_all_durable(self.storage.as_ref(), &target)
            .map_err(LogError::io("create directory", &target))?;
        let first = *self.segments.keys().next().expect("a segment");
        let move_damaged = position == 0 && base != first;
        let later: Vec<Offset> = self
            .segments
            .range(base.next()..)
            .map(|(b, _)| *b)
            .collect();
        let mut bytes = 0;
        let mut segments = 0;
        let damaged = self.segments.get(&base).expect("damaged segment is listed");
        bytes += damaged.size_bytes() - position;
        if !move_damaged {
            self.copy_segment_file(base, &target)?;
            segments += 1;
        }
        let moved = if move_damaged {
            std::iter::once(base).chain(later).collect()
        } else {
            later
        };
        for b in moved {
            let segment = self.segments.remove(&b).expect("listed segment");
            if b != base {
                bytes += segment.size_bytes();
            }
            drop(segment);
            for suffix in [
                LOG_FILE_SUFFIX,
                INDEX_FILE_SUFFIX,
                TIME_INDEX_FILE_SUFFIX,
                crate::txn::TXN_INDEX_FILE_SUFFIX,
            ] {
                let name = segment_file_name(b, suffix);
                let from = self.dir.join(&name);
                match self.storage.rename(&from, &target.join(&name)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(LogError::io("move segment file", from)(e)),
                }
            }
            segments += 1;
            self.dir_unsynced = true;
        }
        self.storage
            .sync_dir(&target)
            .map_err(LogError::io("fsync directory", &target))?;
        self.sync_dir_if_needed()?;
        let quarantine = Quarantine {
            path: target.clone(),
            partition_dir: self.dir.clone(),
            from_offset,
            damaged_segment: base,
            position,
            segments,
            bytes,
            reason: reason.to_string(),
            time_ms: now_ms,
        };
        let info = target.join(QUARANTINE_INFO_FILE);
        let text = serde_json::to_vec_pretty(&quarantine).expect("quarantine info serializes");
        write_file_atomically(self.storage.as_ref(), &info, &text)
            .map_err(LogError::io("write", &info))?;
        if move_damaged && self.segments.is_empty() {
            self.create_segment(base)?;
        }
        tracing::error!(
            partition_dir = %self.dir.display(),
            quarantine = %target.display(),
            from_offset = %from_offset,
            bytes,
            segments,
            reason,
            "damaged log data set aside: the log now ends before the damaged batch"
        );
        Ok(quarantine)
    }

    /// A quarantine directory name that does not exist yet.
    fn quarantine_path(&self, from_offset: Offset, now_ms: i64) -> Result<PathBuf, LogError> {
        let parent = parent_of(&self.dir).map_err(LogError::io("quarantine", &self.dir))?;
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for attempt in 0u32.. {
            let unique = if attempt == 0 {
                String::new()
            } else {
                format!("-{attempt}")
            };
            let path = parent.join(format!(
                "{name}.{:020}-{now_ms}{unique}{QUARANTINE_SUFFIX}",
                from_offset.0
            ));
            if !self
                .storage
                .exists(&path)
                .map_err(LogError::io("stat", &path))?
            {
                return Ok(path);
            }
        }
        unreachable!("u32 attempts exhausted")
    }

    /// Copies segment `base`'s log file whole into `target` and fsyncs the copy.
    fn copy_segment_file(&self, base: Offset, target: &Path) -> Result<(), LogError> {
        let segment = &self.segments[&base];
        let to = target.join(segment_file_name(base, LOG_FILE_SUFFIX));
        let mut file = self
            .storage
            .open_file(&to, OpenMode::CreateOrOpen)
            .map_err(LogError::io("create", &to))?;
        file.truncate(0).map_err(LogError::io("truncate", &to))?;
        let mut buf = Vec::with_capacity(COPY_CHUNK_BYTES);
        let mut at = 0;
        while at < segment.size_bytes() {
            let len = usize::try_from((segment.size_bytes() - at).min(COPY_CHUNK_BYTES as u64))
                .expect("bounded by the chunk size");
            buf.clear();
            segment
                .read_to_vec(at, len, &mut buf)
                .map_err(LogError::io("read", segment.log_path()))?;
            file.append(&buf).map_err(LogError::io("write", &to))?;
            at += len as u64;
        }
        file.sync().map_err(LogError::io("fsync", &to))
    }
}
