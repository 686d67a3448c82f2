//! Tests of [`LogDir`]: formatting, identity checks, the clean-shutdown marker, checkpoints and
//! loading partition logs.

use super::*;
use crate::plain_batch::build_batch;
use crate::storage::MemStorage;
use crate::types::LeaderEpoch;

const PATH: &str = "/data/logs";

fn formatted() -> (MemStorage, LogDir) {
    let storage = MemStorage::new();
    let shared: Arc<dyn Storage> = Arc::new(storage.clone());
    LogDir::format(
        shared.clone(),
        Path::new(PATH),
        "cluster-a",
        1,
        Uuid::from_bytes([9; 16]),
    )
    .unwrap();
    let dir = LogDir::open(shared, Path::new(PATH), Some("cluster-a"), 1).unwrap();
    (storage, dir)
}

// Formatting writes meta.properties durably; formatting again with the same ids keeps the
// original directory id; other ids are refused naming both.
#[test]
fn format_is_durable_idempotent_and_guarded() {
    let (storage, dir) = formatted();
    storage.crash();
    let shared: Arc<dyn Storage> = Arc::new(storage.clone());
    let again = LogDir::format(
        shared.clone(),
        Path::new(PATH),
        "cluster-a",
        1,
        Uuid::from_bytes([5; 16]),
    )
    .unwrap();
    assert_eq!(again.directory_id, Uuid::from_bytes([9; 16]));
    assert_eq!(dir.meta(), &again);
    let err = LogDir::format(
        shared,
        Path::new(PATH),
        "cluster-b",
        1,
        Uuid::from_bytes([5; 16]),
    )
    .unwrap_err();
    assert!(matches!(err, LogError::AlreadyFormatted { .. }));
    let text = err.to_string();
    assert!(
        text.contains("cluster-a") && text.contains("cluster-b"),
        "{text}"
    );
}

// Opening refuses unformatted directories and directories of another cluster or node, naming
// both values.
#[test]
fn open_refuses_foreign_or_unformatted_dirs() {
    let (storage, _) = formatted();
    let shared: Arc<dyn Storage> = Arc::new(storage);
    let err = LogDir::open(shared.clone(), Path::new("/elsewhere"), None, 1).unwrap_err();
    assert!(matches!(err, LogError::NotFormatted { .. }));
    let err = LogDir::open(shared.clone(), Path::new(PATH), Some("cluster-z"), 1).unwrap_err();
    assert!(matches!(err, LogError::ClusterIdMismatch { .. }));
    assert!(err.to_string().contains("cluster-z") && err.to_string().contains("cluster-a"));
    let err = LogDir::open(shared.clone(), Path::new(PATH), None, 2).unwrap_err();
    assert!(matches!(
        err,
        LogError::NodeIdMismatch {
            expected: 2,
            found: 1,
            ..
        }
    ));
    assert!(err.is_fatal());
    assert!(LogDir::open(shared, Path::new(PATH), None, 1).is_ok());
}

// The clean-shutdown marker round-trips, is removed durably on read, and garbage reads as unclean.
#[test]
fn clean_shutdown_marker_round_trip() {
    let (storage, dir) = formatted();
    assert_eq!(dir.read_and_remove_clean_shutdown().unwrap(), None);
    dir.write_clean_shutdown(42).unwrap();
    let text =
        crate::storage::read_file_if_exists(&storage, &Path::new(PATH).join(CLEAN_SHUTDOWN_FILE))
            .unwrap()
            .unwrap();
    assert_eq!(
        String::from_utf8(text).unwrap(),
        r#"{"version":0,"brokerEpoch":42}"#
    );
    storage.crash();
    assert_eq!(dir.read_and_remove_clean_shutdown().unwrap(), Some(42));
    storage.crash();
    assert_eq!(
        dir.read_and_remove_clean_shutdown().unwrap(),
        None,
        "removal was durable"
    );
    write_file_atomically(
        &storage,
        &Path::new(PATH).join(CLEAN_SHUTDOWN_FILE),
        b"{oops",
    )
    .unwrap();
    assert_eq!(dir.read_and_remove_clean_shutdown().unwrap(), None);
    assert!(!storage
        .exists(&Path::new(PATH).join(CLEAN_SHUTDOWN_FILE))
        .unwrap());
}

// load_logs opens every partition with its checkpointed offsets, parses names by the last '-',
// and skips (reports) directories that are not partitions.
#[test]
fn load_logs_uses_checkpoints_and_skips_strays() {
    let (storage, dir) = formatted();
    let config = LogConfig::default();
    let a = TopicPartition::new("my-topic", 0);
    let b = TopicPartition::new("other", 7);
    let mut entries = Vec::new();
    for tp in [&a, &b] {
        let mut log = dir.create_log(tp, config.clone(), 0).unwrap();
        log.append_as_leader(
            &build_batch(&[(None, b"x"), (None, b"y")], 0),
            LeaderEpoch(0),
            0,
        )
        .unwrap();
        log.increment_log_start_offset(Offset(1)).unwrap();
        log.close(0).unwrap();
        entries.push(PartitionCheckpoint::of(tp.clone(), &log, Some(Offset(2))));
    }
    dir.checkpoint(&entries).unwrap();
    storage
        .create_dir_all(&Path::new(PATH).join("not_a_partition"))
        .unwrap();
    storage
        .create_dir_all(&Path::new(PATH).join("t-3.abc-delete"))
        .unwrap();
    let loaded = dir.load_logs(true, 0, &|_| LogConfig::default()).unwrap();
    assert_eq!(
        loaded.logs.keys().cloned().collect::<Vec<_>>(),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(loaded.logs[&a].log_start_offset(), Offset(1));
    assert_eq!(loaded.logs[&a].log_end_offset(), Offset(2));
    assert_eq!(loaded.high_watermarks[&b], Offset(2));
    let skipped: Vec<&str> = loaded.skipped.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(skipped, vec!["not_a_partition", "t-3.abc-delete"]);
    assert_eq!(dir.read_recovery_points().unwrap()[&a], Offset(2));
    assert_eq!(dir.read_log_start_offsets().unwrap()[&b], Offset(1));
    let mut logs = loaded.logs;
    dir.delete_log(logs.remove(&a).unwrap()).unwrap();
    storage.crash();
    let loaded = dir.load_logs(true, 0, &|_| LogConfig::default()).unwrap();
    assert_eq!(loaded.logs.keys().cloned().collect::<Vec<_>>(), vec![b]);
}

// DeleteRecords (issue 20): the log start offset checkpoint written alone is durable at once —
// a crash right after it loses nothing — and leaves the other two checkpoints as they were.
#[test]
fn log_start_offsets_checkpoint_alone_durably() {
    let (storage, dir) = formatted();
    let tp = TopicPartition::new("trimmed", 0);
    let mut log = dir.create_log(&tp, LogConfig::default(), 0).unwrap();
    let batch = build_batch(&[(None, b"a"), (None, b"b"), (None, b"c")], 0);
    log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    log.flush(0).unwrap();
    dir.checkpoint(&[PartitionCheckpoint::of(tp.clone(), &log, Some(Offset(3)))])
        .unwrap();
    log.increment_log_start_offset(Offset(2)).unwrap();
    dir.checkpoint_log_start_offsets(&BTreeMap::from([(tp.clone(), Offset(2))]))
        .unwrap();
    drop(log);
    storage.crash();
    assert_eq!(dir.read_log_start_offsets().unwrap()[&tp], Offset(2));
    assert_eq!(dir.read_high_watermarks().unwrap()[&tp], Offset(3));
    let loaded = dir.load_logs(false, 0, &|_| LogConfig::default()).unwrap();
    assert_eq!(loaded.logs[&tp].log_start_offset(), Offset(2));
    assert_eq!(loaded.logs[&tp].log_end_offset(), Offset(3));
}

// A corrupt checkpoint makes loading fail loudly instead of guessing offsets.
#[test]
fn corrupt_checkpoint_fails_load() {
    let (storage, dir) = formatted();
    write_file_atomically(
        &storage,
        &Path::new(PATH).join(RECOVERY_POINT_CHECKPOINT_FILE),
        b"0\n1\n",
    )
    .unwrap();
    let err = dir
        .load_logs(false, 0, &|_| LogConfig::default())
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptFile { .. }));
}
