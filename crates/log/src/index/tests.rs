//! Tests of the offset and time indexes.

use super::*;
use crate::storage::{MemStorage, Storage};
use crate::types::{Offset, TimestampOffset};
use std::path::Path;

fn offset_index(storage: &MemStorage, max_entries: usize) -> OffsetIndex {
    storage.create_dir_all(Path::new("/p")).unwrap();
    OffsetIndex::open(
        storage,
        Path::new("/p/00000000000000000100.index"),
        Offset(100),
        max_entries,
    )
    .unwrap()
}

// Lookup returns the entry with the largest offset <= target, or none below the first entry.
#[test]
fn offset_index_lookup_is_floor() {
    let storage = MemStorage::new();
    let mut index = offset_index(&storage, 10);
    index.append(Offset(110), 500).unwrap();
    index.append(Offset(120), 900).unwrap();
    assert_eq!(index.lookup(Offset(105)), None);
    assert_eq!(index.lookup(Offset(110)).unwrap().position, 500);
    assert_eq!(index.lookup(Offset(119)).unwrap().position, 500);
    assert_eq!(index.lookup(Offset(1_000)).unwrap().position, 900);
    assert!(index.sanity_check(1_000).is_ok());
    assert!(
        index.sanity_check(900).is_err(),
        "entry points past the segment end"
    );
}

// Entries persist in the file in Kafka's 8-byte layout and reload identically.
#[test]
fn offset_index_reloads_from_file() {
    let storage = MemStorage::new();
    let mut index = offset_index(&storage, 10);
    index.append(Offset(101), 64).unwrap();
    drop(index);
    let bytes =
        crate::storage::read_file_if_exists(&storage, Path::new("/p/00000000000000000100.index"))
            .unwrap()
            .unwrap();
    assert_eq!(bytes, [0, 0, 0, 1, 0, 0, 0, 64]);
    let index = offset_index(&storage, 10);
    assert_eq!(
        index.last(),
        Some(OffsetIndexEntry {
            offset: Offset(101),
            position: 64
        })
    );
}

// A partial trailing entry or decreasing entries make the index fail its sanity check.
#[test]
fn offset_index_sanity_check_catches_damage() {
    let storage = MemStorage::new();
    storage.create_dir_all(Path::new("/p")).unwrap();
    let path = Path::new("/p/x.index");
    crate::storage::write_file_atomically(&storage, path, &[0, 0, 0, 5, 0, 0, 0, 9, 1]).unwrap();
    let index = OffsetIndex::open(&storage, path, Offset(0), 10).unwrap();
    assert!(index.sanity_check(100).is_err());
    crate::storage::write_file_atomically(
        &storage,
        path,
        &[0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 4, 0, 0, 0, 10],
    )
    .unwrap();
    let index = OffsetIndex::open(&storage, path, Offset(0), 10).unwrap();
    assert!(index.sanity_check(100).is_err());
}

// Truncating by position drops entries at or past the new segment end.
#[test]
fn offset_index_truncates_by_position() {
    let storage = MemStorage::new();
    let mut index = offset_index(&storage, 10);
    index.append(Offset(110), 500).unwrap();
    index.append(Offset(120), 900).unwrap();
    index.truncate_to_position(900).unwrap();
    assert_eq!(index.len(), 1);
    assert!(!index.is_full());
}

// The time index keeps only increasing timestamps and looks up the floor entry.
#[test]
fn time_index_appends_increasing_and_looks_up_floor() {
    let storage = MemStorage::new();
    storage.create_dir_all(Path::new("/p")).unwrap();
    let mut index =
        TimeIndex::open(&storage, Path::new("/p/t.timeindex"), Offset(100), 10).unwrap();
    index.maybe_append(1_000, Offset(100), false).unwrap();
    index.maybe_append(1_000, Offset(105), false).unwrap();
    index.maybe_append(900, Offset(106), false).unwrap();
    index.maybe_append(2_000, Offset(110), false).unwrap();
    assert_eq!(index.lookup(999), None);
    assert_eq!(
        index.lookup(1_500),
        Some(TimestampOffset {
            timestamp: 1_000,
            offset: Offset(100)
        })
    );
    assert_eq!(index.lookup(5_000).unwrap().offset, Offset(110));
    assert!(index.sanity_check(Offset(111)).is_ok());
    assert!(index.sanity_check(Offset(110)).is_err());
    index.truncate_to_offset(Offset(110)).unwrap();
    assert_eq!(index.last().unwrap().timestamp, 1_000);
}

// A full time index skips entries unless the final entry of an inactive segment is written.
#[test]
fn time_index_full_skips_except_final_entry() {
    let storage = MemStorage::new();
    storage.create_dir_all(Path::new("/p")).unwrap();
    let mut index = TimeIndex::open(&storage, Path::new("/p/t.timeindex"), Offset(0), 1).unwrap();
    index.maybe_append(1, Offset(0), false).unwrap();
    assert!(index.is_full());
    index.maybe_append(2, Offset(1), false).unwrap();
    assert_eq!(index.last().unwrap().timestamp, 1);
    index.maybe_append(3, Offset(2), true).unwrap();
    assert_eq!(index.last().unwrap().timestamp, 3);
}
