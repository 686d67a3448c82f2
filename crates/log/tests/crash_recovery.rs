//! Property tests of the log against a model (a `Vec` of the batches appended, with the bytes
//! as stored): random appends across small segments, random flushes, then a fault on
//! `MemStorage` — a crash losing unsynced data, a crash with torn tails, a cut tail, or a
//! flipped byte — and an unclean reopen. The recovered log must hold exactly a prefix of the
//! model that includes everything the fault could not have touched, and keep working.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_log::batch::parse_batches;
use keel_log::plain_batch::build_batch;
use keel_log::storage::OpenMode;
use keel_log::{
    segment_file_name, LeaderEpoch, Log, LogConfig, LogError, MemStorage, Offset, Storage,
    LOG_FILE_SUFFIX,
};
use proptest::prelude::*;

const DIR: &str = "/data/logs/topic-with-dash-3";

#[derive(Debug, Clone)]
enum Op {
    /// Append one batch of `records` records of `value_len` bytes, bumping the epoch first if
    /// `new_epoch`.
    Append {
        records: usize,
        value_len: usize,
        new_epoch: bool,
    },
    Flush,
    /// Follower truncation at a seed-chosen offset in `[0, log end offset]`.
    Truncate(u64),
}

#[derive(Debug, Clone)]
enum Fault {
    /// Power loss: unsynced bytes and directory entries vanish.
    Crash,
    /// Power loss keeping a seed-chosen prefix of each file's unsynced tail.
    CrashTorn(u64),
    /// After a full flush, the last segment file is cut at a seed-chosen byte.
    CutTail(u64),
    /// After a full flush, a seed-chosen byte of the last segment is flipped (bit rot).
    CorruptByte(u64),
}

#[derive(Debug, Clone)]
struct ModelBatch {
    base: Offset,
    next: Offset,
    epoch: LeaderEpoch,
    bytes: Vec<u8>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..5, 0usize..300, proptest::bool::weighted(0.15)).prop_map(
            |(records, value_len, new_epoch)| Op::Append { records, value_len, new_epoch }
        ),
        1 => Just(Op::Flush),
        1 => any::<u64>().prop_map(Op::Truncate),
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::Crash),
        any::<u64>().prop_map(Fault::CrashTorn),
        any::<u64>().prop_map(Fault::CutTail),
        any::<u64>().prop_map(Fault::CorruptByte),
    ]
}

fn config() -> impl Strategy<Value = LogConfig> {
    (
        200u64..2_000,
        1u64..300,
        proptest::option::weighted(0.3, 1u64..8),
    )
        .prop_map(
            |(segment_bytes, index_interval_bytes, flush_messages)| LogConfig {
                segment_bytes,
                index_interval_bytes,
                flush_messages,
                retention_ms: None,
                ..LogConfig::default()
            },
        )
}

fn open(storage: &MemStorage, config: &LogConfig, recovery_point: Offset, clean: bool) -> Log {
    Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        config.clone(),
        recovery_point,
        Offset(0),
        clean,
        0,
    )
    .unwrap()
}

/// Runs `ops`, returning the log, the model, and how many model batches the last flush covered.
fn run(storage: &MemStorage, config: &LogConfig, ops: &[Op]) -> (Log, Vec<ModelBatch>, usize) {
    let mut log = open(storage, config, Offset(0), true);
    let mut model: Vec<ModelBatch> = Vec::new();
    let mut flushed = 0;
    let mut epoch = LeaderEpoch(0);
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Append {
                records,
                value_len,
                new_epoch,
            } => {
                if *new_epoch {
                    epoch = LeaderEpoch(epoch.0 + 1);
                }
                let value = vec![i as u8; *value_len];
                let recs: Vec<(Option<&[u8]>, &[u8])> =
                    (0..*records).map(|_| (None, &value[..])).collect();
                let info = log
                    .append_as_leader(&build_batch(&recs, i as i64), epoch, i as i64)
                    .unwrap();
                let stored = log.read(info.first_offset, 1, None, true).unwrap().records;
                assert_eq!(stored.len(), info.size_bytes as usize);
                model.push(ModelBatch {
                    base: info.first_offset,
                    next: info.last_offset.next(),
                    epoch,
                    bytes: stored.to_vec(),
                });
            }
            Op::Flush => log.flush(i as i64).unwrap(),
            Op::Truncate(seed) => {
                let offset = Offset((*seed % (log.log_end_offset().0 as u64 + 1)) as i64);
                let truncated = log.truncate_to(offset, i as i64).unwrap();
                // Whole batches: one straddling the offset goes too.
                model.retain(|b| b.next <= offset);
                if truncated {
                    // truncate_to flushes the whole log.
                    flushed = model.len();
                }
                assert_eq!(
                    log.log_end_offset(),
                    model.last().map_or(Offset(0), |b| b.next)
                );
            }
        }
        if log.recovery_point() == log.log_end_offset() {
            flushed = model.len();
        }
    }
    (log, model, flushed)
}

/// The model prefix length whose end is `log_end_offset`.
fn prefix_len(model: &[ModelBatch], log_end_offset: Offset) -> usize {
    if log_end_offset == Offset(0) {
        return 0;
    }
    model
        .iter()
        .position(|b| b.next == log_end_offset)
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("log end offset {log_end_offset} is not a batch boundary"))
}

/// The last segment's path and the model batches stored in it, with their byte positions.
fn last_segment(log: &Log, model: &[ModelBatch]) -> (PathBuf, Vec<(usize, u64, u64)>) {
    let base = *log.segment_base_offsets().last().unwrap();
    let path = Path::new(DIR).join(segment_file_name(base, LOG_FILE_SUFFIX));
    let mut position = 0;
    let mut batches = Vec::new();
    for (i, b) in model.iter().enumerate().filter(|(_, b)| b.base >= base) {
        batches.push((i, position, b.bytes.len() as u64));
        position += b.bytes.len() as u64;
    }
    (path, batches)
}

/// Applies the fault; returns the bounds on the surviving prefix length and the recovery point a
/// checkpoint could hold.
fn apply_fault(
    storage: &MemStorage,
    mut log: Log,
    model: &[ModelBatch],
    flushed: usize,
    fault: &Fault,
) -> (usize, usize, Offset) {
    let flushed_end = flushed.checked_sub(1).map_or(Offset(0), |i| model[i].next);
    match fault {
        Fault::Crash => {
            drop(log);
            storage.crash();
            (flushed, flushed, flushed_end)
        }
        Fault::CrashTorn(seed) => {
            drop(log);
            storage.crash_with_torn_tails(*seed);
            (flushed, model.len(), flushed_end)
        }
        Fault::CutTail(seed) | Fault::CorruptByte(seed) => {
            log.flush(0).unwrap();
            let end = log.log_end_offset();
            let (path, batches) = last_segment(&log, model);
            drop(log);
            let size: u64 = batches.iter().map(|b| b.2).sum();
            if size == 0 {
                return (model.len(), model.len(), end);
            }
            let at = seed % size;
            let hit = batches
                .iter()
                .find(|(_, pos, len)| at >= *pos && at < pos + len)
                .unwrap();
            if matches!(fault, Fault::CutTail(_)) {
                let mut file = storage.open_file(&path, OpenMode::Existing).unwrap();
                file.truncate(at).unwrap();
                file.sync().unwrap();
                // A cut at a batch boundary loses exactly the batches from there on.
                (hit.0, hit.0, end)
            } else {
                let in_batch = at - hit.1;
                // partitionLeaderEpoch (bytes 12..16) is not covered by the CRC: skip it.
                let at = if (12..16).contains(&in_batch) {
                    hit.1 + 20
                } else {
                    at
                };
                storage.corrupt_byte(&path, at).unwrap();
                (hit.0, hit.0, end)
            }
        }
    }
}

fn check_batches(log: &Log, model: &[ModelBatch]) {
    for b in model {
        let r = log.read(b.base, 1, None, true).unwrap();
        assert_eq!(&r.records[..], &b.bytes[..], "batch at {}", b.base);
    }
}

fn check_prefix(log: &Log, model: &[ModelBatch], kept: usize) {
    check_batches(log, &model[..kept]);
    let end = log.log_end_offset();
    assert!(log
        .read(end, usize::MAX, None, true)
        .unwrap()
        .records
        .is_empty());
    assert!(matches!(
        log.read(end.next(), 1, None, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let all = log.read(Offset(0), usize::MAX, None, true).unwrap();
    let expected: Vec<u8> = model[..kept].iter().flat_map(|b| b.bytes.clone()).collect();
    assert_eq!(&all.records[..], &expected[..]);
    assert_eq!(parse_batches(&all.records).unwrap().len(), kept);
    let latest = kept.checked_sub(1).map(|i| model[i].epoch);
    assert_eq!(
        log.latest_epoch(),
        latest,
        "epoch cache truncated to the log end"
    );
    log.check_invariants();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    // After any fault and an unclean reopen, the log is exactly a model prefix that keeps every
    // batch the fault could not touch, and appends continue right after it.
    #[test]
    fn recovery_keeps_exactly_a_valid_prefix(
        config in config(),
        ops in proptest::collection::vec(op(), 1..40),
        fault in fault(),
        use_checkpointed_recovery_point in any::<bool>(),
    ) {
        let storage = MemStorage::new();
        let (log, model, flushed) = run(&storage, &config, &ops);
        let (min_kept, max_kept, checkpointed) = apply_fault(&storage, log, &model, flushed, &fault);
        let recovery_point = if use_checkpointed_recovery_point { checkpointed } else { Offset(0) };
        let mut log = open(&storage, &config, recovery_point, false);
        let kept = prefix_len(&model, log.log_end_offset());
        prop_assert!(kept >= min_kept && kept <= max_kept,
            "kept {kept} batches, expected between {min_kept} and {max_kept}");
        check_prefix(&log, &model, kept);
        prop_assert_eq!(log.recovery_point(), log.log_end_offset());

        let end = log.log_end_offset();
        let info = log.append_as_leader(&build_batch(&[(None, b"after")], 9), LeaderEpoch(100), 9).unwrap();
        prop_assert_eq!(info.first_offset, end);
        prop_assert_eq!(log.log_end_offset(), end.next());
        log.close(10).unwrap();
        drop(log);
        let reopened = open(&storage, &config, Offset(0), true);
        prop_assert_eq!(reopened.log_end_offset(), end.next());
        check_batches(&reopened, &model[..kept]);
        prop_assert_eq!(reopened.latest_epoch(), Some(LeaderEpoch(100)));
        reopened.check_invariants();
    }

    // A clean close and reopen returns exactly the model, without scanning.
    #[test]
    fn clean_reopen_returns_the_model(
        config in config(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let storage = MemStorage::new();
        let (mut log, model, _) = run(&storage, &config, &ops);
        log.close(1_000).unwrap();
        let segments = log.segment_count();
        drop(log);
        storage.crash();
        let log = open(&storage, &config, Offset(0), true);
        prop_assert!(!log.recovery_report().recovered(), "{}", log.recovery_report());
        prop_assert_eq!(log.segment_count(), segments);
        prop_assert_eq!(log.log_end_offset(), model.last().map_or(Offset(0), |b| b.next));
        check_prefix(&log, &model, model.len());
    }
}
