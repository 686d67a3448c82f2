//! Kafka's text checkpoint files, read whole and replaced atomically:
//!
//! ```text
//! 0                 <- version
//! 2                 <- number of entries
//! orders 0 1234     <- one entry per line, fields separated by a space
//! orders 1 98
//! ```
//!
//! Offset checkpoints (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
//! `log-start-offset-checkpoint`) hold `<topic> <partition> <offset>` entries; the
//! `leader-epoch-checkpoint` of a partition holds `<epoch> <start offset>` entries. A missing
//! file reads as empty; a malformed one is a fatal [`LogError::CorruptFile`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::LogError;
use crate::storage::{read_file_if_exists, write_file_atomically, Storage};
use crate::types::{LeaderEpoch, Offset, TopicPartition};

/// The only checkpoint format version.
pub const CHECKPOINT_VERSION: u32 = 0;

/// One entry of a `leader-epoch-checkpoint`: `epoch` started at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: LeaderEpoch,
    /// The first offset appended in that epoch.
    pub start_offset: Offset,
}

/// Reads an offset checkpoint; a missing file is empty.
pub fn read_offset_checkpoint(
    storage: &dyn Storage,
    path: &Path,
) -> Result<BTreeMap<TopicPartition, Offset>, LogError> {
    let lines = read_entries(storage, path, 3)?;
    let mut map = BTreeMap::new();
    for (line_no, fields) in lines {
        let corrupt = |what: &str| corrupt(path, format!("line {line_no}: {what}"));
        let partition: i32 = fields[1]
            .parse()
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| corrupt("bad partition"))?;
        let offset: i64 = fields[2].parse().map_err(|_| corrupt("bad offset"))?;
        let tp = TopicPartition::new(fields[0].as_str(), partition);
        if map.insert(tp, Offset(offset)).is_some() {
            return Err(corrupt("duplicate partition"));
        }
    }
    Ok(map)
}

/// Atomically replaces an offset checkpoint.
pub fn write_offset_checkpoint(
    storage: &dyn Storage,
    path: &Path,
    offsets: &BTreeMap<TopicPartition, Offset>,
) -> Result<(), LogError> {
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", offsets.len());
    for (tp, offset) in offsets {
        assert!(
            !tp.topic.is_empty() && !tp.topic.contains(char::is_whitespace),
            "topic names never contain whitespace"
        );
        text.push_str(&format!("{} {} {}\n", tp.topic, tp.partition, offset.0));
    }
    write_file_atomically(storage, path, text.as_bytes())
        .map_err(LogError::io("write checkpoint", path))
}

/// Reads a `leader-epoch-checkpoint`; a missing file is empty. Entries must increase in both
/// epoch and start offset.
pub fn read_epoch_checkpoint(
    storage: &dyn Storage,
    path: &Path,
) -> Result<Vec<EpochEntry>, LogError> {
    let lines = read_entries(storage, path, 2)?;
    let mut entries: Vec<EpochEntry> = Vec::with_capacity(lines.len());
    for (line_no, fields) in lines {
        let corrupt = |what: &str| corrupt(path, format!("line {line_no}: {what}"));
        let epoch: i32 = fields[0]
            .parse()
            .ok()
            .filter(|e| *e >= 0)
            .ok_or_else(|| corrupt("bad epoch"))?;
        let start: i64 = fields[1]
            .parse()
            .ok()
            .filter(|o| *o >= 0)
            .ok_or_else(|| corrupt("bad start offset"))?;
        let entry = EpochEntry {
            epoch: LeaderEpoch(epoch),
            start_offset: Offset(start),
        };
        if let Some(last) = entries.last() {
            if entry.epoch <= last.epoch || entry.start_offset < last.start_offset {
                return Err(corrupt("entries out of order"));
            }
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Atomically replaces a `leader-epoch-checkpoint`.
pub fn write_epoch_checkpoint(
    storage: &dyn Storage,
    path: &Path,
    entries: &[EpochEntry],
) -> Result<(), LogError> {
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for entry in entries {
        text.push_str(&format!("{} {}\n", entry.epoch.0, entry.start_offset.0));
    }
    write_file_atomically(storage, path, text.as_bytes())
        .map_err(LogError::io("write checkpoint", path))
}

fn corrupt(path: &Path, reason: String) -> LogError {
    LogError::CorruptFile {
        path: path.to_path_buf(),
        reason,
    }
}

/// The entry lines of a checkpoint, each split into exactly `fields` fields, with their
/// 1-based line numbers.
fn read_entries(
    storage: &dyn Storage,
    path: &Path,
    fields: usize,
) -> Result<Vec<(usize, Vec<String>)>, LogError> {
    let Some(bytes) = read_file_if_exists(storage, path).map_err(LogError::io("read", path))?
    else {
        return Ok(Vec::new());
    };
    let text = String::from_utf8(bytes).map_err(|_| corrupt(path, "not UTF-8".to_string()))?;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    let mut header = |what: &str| {
        lines
            .next()
            .and_then(|(_, l)| l.parse::<u64>().ok())
            .ok_or_else(|| corrupt(path, format!("missing or bad {what} line")))
    };
    let version = header("version")?;
    if version != u64::from(CHECKPOINT_VERSION) {
        return Err(corrupt(path, format!("unsupported version {version}")));
    }
    let count = header("entry count")?;
    let mut entries = Vec::new();
    for (line_no, line) in lines {
        if line.is_empty() {
            continue;
        }
        let parts: Vec<String> = line.split(' ').map(str::to_string).collect();
        if parts.len() != fields || parts.iter().any(String::is_empty) {
            return Err(corrupt(
                path,
                format!("line {line_no}: expected {fields} fields in {line:?}"),
            ));
        }
        entries.push((line_no, parts));
    }
    if entries.len() as u64 != count {
        return Err(corrupt(
            path,
            format!("header says {count} entries, found {}", entries.len()),
        ));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{create_dir_all_durable, MemStorage};
    use std::path::PathBuf;

    fn setup() -> (MemStorage, PathBuf) {
        let storage = MemStorage::new();
        create_dir_all_durable(&storage, Path::new("/d")).unwrap();
        (
            storage,
            PathBuf::from("/d/recovery-point-offset-checkpoint"),
        )
    }

    fn write_raw(storage: &MemStorage, path: &Path, text: &str) {
        write_file_atomically(storage, path, text.as_bytes()).unwrap();
    }

    // An offset checkpoint round-trips, including topics with '-' and a missing file reads empty.
    #[test]
    fn offset_checkpoint_round_trip() {
        let (storage, path) = setup();
        assert!(read_offset_checkpoint(&storage, &path).unwrap().is_empty());
        let mut map = BTreeMap::new();
        map.insert(TopicPartition::new("a-b", 0), Offset(17));
        map.insert(TopicPartition::new("c", 3), Offset(0));
        write_offset_checkpoint(&storage, &path, &map).unwrap();
        let text = read_file_if_exists(&storage, &path).unwrap().unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "0\n2\na-b 0 17\nc 3 0\n");
        assert_eq!(read_offset_checkpoint(&storage, &path).unwrap(), map);
    }

    // Rewriting a checkpoint replaces it atomically: a crash right after leaves the new version.
    #[test]
    fn offset_checkpoint_replace_is_atomic_and_durable() {
        let (storage, path) = setup();
        let mut map = BTreeMap::new();
        map.insert(TopicPartition::new("t", 0), Offset(1));
        write_offset_checkpoint(&storage, &path, &map).unwrap();
        map.insert(TopicPartition::new("t", 0), Offset(2));
        write_offset_checkpoint(&storage, &path, &map).unwrap();
        storage.crash();
        assert_eq!(read_offset_checkpoint(&storage, &path).unwrap(), map);
    }

    // Malformed checkpoints are fatal errors naming the file, never silently empty.
    #[test]
    fn corrupt_offset_checkpoints_are_errors() {
        let (storage, path) = setup();
        for text in [
            "",
            "1\n0\n",
            "0\n2\nt 0 5\n",
            "0\n1\nt 0\n",
            "0\n1\nt x 5\n",
            "0\n1\nt 0 five\n",
            "0\n2\nt 0 1\nt 0 2\n",
            "zero\n0\n",
        ] {
            write_raw(&storage, &path, text);
            let err = read_offset_checkpoint(&storage, &path).unwrap_err();
            assert!(
                matches!(err, LogError::CorruptFile { .. }),
                "{text:?}: {err}"
            );
            assert!(err.is_fatal());
        }
    }

    // The leader-epoch checkpoint round-trips and rejects out-of-order entries.
    #[test]
    fn epoch_checkpoint_round_trip_and_order() {
        let (storage, _) = setup();
        let path = PathBuf::from("/d/leader-epoch-checkpoint");
        let entries = vec![
            EpochEntry {
                epoch: LeaderEpoch(0),
                start_offset: Offset(0),
            },
            EpochEntry {
                epoch: LeaderEpoch(3),
                start_offset: Offset(40),
            },
        ];
        write_epoch_checkpoint(&storage, &path, &entries).unwrap();
        let text = read_file_if_exists(&storage, &path).unwrap().unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "0\n2\n0 0\n3 40\n");
        assert_eq!(read_epoch_checkpoint(&storage, &path).unwrap(), entries);
        write_raw(&storage, &path, "0\n2\n3 40\n1 50\n");
        assert!(read_epoch_checkpoint(&storage, &path).is_err());
        write_raw(&storage, &path, "0\n1\n-1 0\n");
        assert!(read_epoch_checkpoint(&storage, &path).is_err());
    }
}
