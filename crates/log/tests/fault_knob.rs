//! The test-only fault knob (issue 4): with `test_record_flushed_offset`, a log can be cut back
//! to its last flush, modelling a machine that lost its page cache even though `kill -9` kept it.

use std::path::PathBuf;
use std::sync::Arc;

use keel_log::plain_batch::build_batch;
use keel_log::{LeaderEpoch, Log, LogConfig, MemStorage, Offset, Storage};

fn append(log: &mut Log, value: &[u8]) {
    let batch = build_batch(&[(None, value)], 0);
    log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
}

// Shows: records appended after the last flush are dropped by truncate_to_recorded_flush, those
// before it stay, and without the knob there is nothing to truncate to.
#[test]
fn truncates_to_the_last_flush() {
    let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
    let dir = PathBuf::from("/logs/t-0");
    storage.create_dir_all(&dir).unwrap();
    let config = LogConfig {
        test_record_flushed_offset: true,
        ..LogConfig::default()
    };
    let mut log = Log::open(
        storage.clone(),
        dir.clone(),
        config.clone(),
        Offset(0),
        Offset(0),
        true,
        0,
    )
    .unwrap();
    append(&mut log, b"a");
    append(&mut log, b"b");
    log.flush(1).unwrap();
    append(&mut log, b"c");
    drop(log);

    // kill -9 keeps the page cache: the reopened log still has all three records...
    let mut log = Log::open(
        storage.clone(),
        dir.clone(),
        config,
        Offset(0),
        Offset(0),
        false,
        2,
    )
    .unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    // ...and the knob drops what a power loss would have dropped.
    assert_eq!(log.truncate_to_recorded_flush(3).unwrap(), Some(Offset(2)));
    assert_eq!(log.log_end_offset(), Offset(2));

    let other = PathBuf::from("/logs/u-0");
    storage.create_dir_all(&other).unwrap();
    let mut plain = Log::open(
        storage,
        other,
        LogConfig::default(),
        Offset(0),
        Offset(0),
        true,
        0,
    )
    .unwrap();
    append(&mut plain, b"x");
    plain.flush(1).unwrap();
    assert_eq!(plain.truncate_to_recorded_flush(2).unwrap(), None);
    assert_eq!(plain.log_end_offset(), Offset(1));
}
