//! Tests of the storage implementations and the atomic-write helper.

use super::*;
use std::path::Path;

fn write(storage: &dyn Storage, path: &str, bytes: &[u8], sync: bool) {
    let mut file = storage
        .open_file(Path::new(path), OpenMode::CreateOrOpen)
        .unwrap();
    file.append(bytes).unwrap();
    if sync {
        file.sync().unwrap();
    }
}

fn read(storage: &dyn Storage, path: &str) -> Option<Vec<u8>> {
    read_file_if_exists(storage, Path::new(path)).unwrap()
}

// Synced bytes of a file whose directory entry is durable survive a crash; unsynced ones do not.
#[test]
fn mem_crash_keeps_synced_prefix_only() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"durable", true);
    storage.sync_dir(Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"-lost", false);
    assert_eq!(read(&storage, "/d/f").unwrap(), b"durable-lost");
    storage.crash();
    assert_eq!(read(&storage, "/d/f").unwrap(), b"durable");
}

// An overwrite replaces bytes in place, durable ones included (a crash keeps them changed), and
// refuses a range that runs past the end of the file.
#[test]
fn mem_overwrite_changes_bytes_in_place() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"durable", true);
    storage.sync_dir(Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"-tail", false);
    storage.overwrite(Path::new("/d/f"), 5, b"XXXY").unwrap();
    assert_eq!(read(&storage, "/d/f").unwrap(), b"durabXXXYail");
    assert!(storage.overwrite(Path::new("/d/f"), 11, b"ZZ").is_err());
    assert!(storage
        .overwrite(Path::new("/d/f"), u64::MAX, b"Z")
        .is_err());
    assert!(storage.overwrite(Path::new("/d/nothing"), 0, b"Z").is_err());
    storage.crash();
    assert_eq!(read(&storage, "/d/f").unwrap(), b"durabXX");
}

// A fsynced file whose directory entry was never fsynced disappears in a crash.
#[test]
fn mem_crash_drops_entries_without_dir_fsync() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"data", true);
    storage.crash();
    assert_eq!(read(&storage, "/d/f"), None);
}

// A removal that was not made durable by a directory fsync is undone by a crash.
#[test]
fn mem_crash_resurrects_undurable_removal() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write(&storage, "/d/f", b"data", true);
    storage.sync_dir(Path::new("/d")).unwrap();
    storage.remove_file(Path::new("/d/f")).unwrap();
    assert!(!storage.exists(Path::new("/d/f")).unwrap());
    storage.crash();
    assert_eq!(read(&storage, "/d/f").unwrap(), b"data");
}

// Torn tails keep a seed-determined prefix of the unsynced bytes, never more than was written.
#[test]
fn mem_torn_tail_keeps_a_prefix_of_unsynced_bytes() {
    let mut lengths = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let storage = MemStorage::new();
        create_dir_all_durable(&storage, Path::new("/d")).unwrap();
        write(&storage, "/d/f", b"abc", true);
        storage.sync_dir(Path::new("/d")).unwrap();
        write(&storage, "/d/f", b"defghij", false);
        storage.crash_with_torn_tails(seed);
        let data = read(&storage, "/d/f").unwrap();
        assert!(data.len() >= 3 && data.len() <= 10);
        assert_eq!(&data[..], &b"abcdefghij"[..data.len()]);
        lengths.insert(data.len());
    }
    assert!(lengths.len() > 3, "seeds should tear at different points");
}

// Handles opened before a crash are dead afterwards.
#[test]
fn mem_handles_die_in_a_crash() {
    let storage = MemStorage::new();
    let mut file = storage
        .open_file(Path::new("/f"), OpenMode::CreateOrOpen)
        .unwrap();
    storage.crash();
    assert!(file.append(b"x").is_err());
}

// write_file_atomically survives a crash with the new contents and leaves no temp file.
#[test]
fn atomic_write_is_durable_and_replaces() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write_file_atomically(&storage, Path::new("/d/c"), b"one").unwrap();
    write_file_atomically(&storage, Path::new("/d/c"), b"two").unwrap();
    storage.crash();
    assert_eq!(read(&storage, "/d/c").unwrap(), b"two");
    let names: Vec<_> = storage
        .list_dir(Path::new("/d"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["c".to_string()]);
}

// A crash between writing the temp file and the rename leaves the old contents in place.
#[test]
fn atomic_write_interrupted_keeps_old_contents() {
    let storage = MemStorage::new();
    create_dir_all_durable(&storage, Path::new("/d")).unwrap();
    write_file_atomically(&storage, Path::new("/d/c"), b"old").unwrap();
    write(&storage, "/d/c.tmp", b"new", true);
    storage.crash();
    assert_eq!(read(&storage, "/d/c").unwrap(), b"old");
}

// OsStorage and MemStorage agree on listing, rename, truncate and positional reads.
#[test]
fn os_and_mem_storage_agree() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().to_str().unwrap().to_string();
    let os = OsStorage::new();
    let mem = MemStorage::new();
    for storage in [&os as &dyn Storage, &mem as &dyn Storage] {
        let dir = format!("{root}/a/b");
        storage.create_dir_all(Path::new(&dir)).unwrap();
        write(storage, &format!("{dir}/x"), b"0123456789", true);
        storage
            .rename(
                Path::new(&format!("{dir}/x")),
                Path::new(&format!("{dir}/y")),
            )
            .unwrap();
        storage
            .create_dir_all(Path::new(&format!("{dir}/sub")))
            .unwrap();
        let listing = storage.list_dir(Path::new(&dir)).unwrap();
        assert_eq!(
            listing,
            vec![
                DirEntry {
                    name: "sub".into(),
                    is_dir: true
                },
                DirEntry {
                    name: "y".into(),
                    is_dir: false
                },
            ]
        );
        let mut file = storage
            .open_file(Path::new(&format!("{dir}/y")), OpenMode::Existing)
            .unwrap();
        file.truncate(6).unwrap();
        file.append(b"ab").unwrap();
        let mut buf = [0u8; 4];
        file.read_exact_at(4, &mut buf).unwrap();
        assert_eq!(&buf, b"45ab");
        assert_eq!(file.size().unwrap(), 8);
        assert!(file.read_exact_at(6, &mut buf).is_err());
        drop(file);
        storage
            .remove_dir_all(Path::new(&format!("{root}/a")))
            .unwrap();
        assert!(!storage.exists(Path::new(&dir)).unwrap());
        assert!(storage
            .open_file(Path::new(&format!("{dir}/y")), OpenMode::Existing)
            .is_err());
    }
}

// Shows: a log directory's `.lock` excludes a second holder (Kafka refuses to run two brokers on
// one directory) and is released when the guard drops.
#[test]
fn os_directory_lock_is_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let storage = OsStorage::new();
    let held = storage.lock_dir(dir.path()).unwrap();
    let err = storage.lock_dir(dir.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    drop(held);
    storage.lock_dir(dir.path()).unwrap();
}
