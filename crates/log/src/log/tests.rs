//! Unit tests of [`Log`]: appends, reads, rolls, indexes, timestamp and epoch lookups,
//! truncation, retention, flushing and recovery. The property tests against a model live in
//! `tests/crash_recovery.rs`.

use super::*;
use crate::batch::{parse_batches, BatchHeader};
use crate::config::TimestampType;
use crate::plain_batch::{build_batch, build_batch_with_timestamps};
use crate::storage::{MemStorage, OpenMode, Storage};

pub(super) const DIR: &str = "/logs/t-0";

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        retention_ms: None,
        ..LogConfig::default()
    }
}

pub(super) fn open_log(storage: &MemStorage, config: LogConfig, clean: bool, now_ms: i64) -> Log {
    Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        config,
        Offset(0),
        Offset(0),
        clean,
        now_ms,
    )
    .unwrap()
}

fn new_log(config: LogConfig) -> (MemStorage, Log) {
    let storage = MemStorage::new();
    let log = open_log(&storage, config, true, 0);
    (storage, log)
}

/// A batch of `count` records of `value_len` bytes each, all at `timestamp`.
fn records(count: usize, value_len: usize, timestamp: i64) -> Vec<u8> {
    let value = vec![b'v'; value_len];
    let recs: Vec<(Option<&[u8]>, &[u8])> = (0..count).map(|_| (None, &value[..])).collect();
    build_batch(&recs, timestamp)
}

fn headers(bytes: &[u8]) -> Vec<BatchHeader> {
    parse_batches(bytes)
        .unwrap()
        .iter()
        .map(|v| v.header)
        .collect()
}

fn read_all(log: &Log) -> Vec<BatchHeader> {
    let data = log
        .read(log.log_start_offset(), usize::MAX, None, true)
        .unwrap();
    headers(&data.records)
}

// Leader appends get consecutive offsets from the log end offset and the leader's epoch.
#[test]
fn leader_append_assigns_offsets_and_epoch() {
    let (_, mut log) = new_log(small_config());
    let a = log
        .append_as_leader(&records(3, 10, 100), LeaderEpoch(4), 1)
        .unwrap();
    let two = [records(1, 10, 300), records(2, 10, 200)].concat();
    let b = log.append_as_leader(&two, LeaderEpoch(4), 2).unwrap();
    assert_eq!(
        (a.first_offset, a.last_offset, a.record_count),
        (Offset(0), Offset(2), 3)
    );
    assert_eq!(
        (b.first_offset, b.last_offset, b.batch_count),
        (Offset(3), Offset(5), 2)
    );
    assert_eq!(
        b.max_timestamp,
        Some(TimestampOffset {
            timestamp: 300,
            offset: Offset(3)
        })
    );
    assert_eq!(b.log_append_time_ms, None);
    assert_eq!(log.log_end_offset(), Offset(6));
    let stored = read_all(&log);
    let bases: Vec<i64> = stored.iter().map(|h| h.base_offset.0).collect();
    assert_eq!(bases, vec![0, 3, 4]);
    assert!(stored
        .iter()
        .all(|h| h.leader_epoch() == Some(LeaderEpoch(4))));
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(4)));
    log.check_invariants();
}

// LogAppendTime topics get maxTimestamp = broker time and the timestamp-type bit.
#[test]
fn log_append_time_is_stamped() {
    let config = LogConfig {
        timestamp_type: TimestampType::LogAppendTime,
        ..small_config()
    };
    let (_, mut log) = new_log(config);
    let info = log
        .append_as_leader(&records(2, 5, 7), LeaderEpoch(0), 5_000)
        .unwrap();
    assert_eq!(info.log_append_time_ms, Some(5_000));
    let stored = read_all(&log);
    assert_eq!(stored[0].max_timestamp, 5_000);
    assert_eq!(stored[0].timestamp_type(), TimestampType::LogAppendTime);
}

// Invalid input is rejected whole: nothing of a multi-batch append lands if one batch is bad.
#[test]
fn invalid_appends_are_all_or_nothing() {
    let config = LogConfig {
        max_message_bytes: 200,
        ..small_config()
    };
    let (_, mut log) = new_log(config);
    let good = records(1, 10, 0);
    let mut bad_crc = records(1, 10, 0);
    *bad_crc.last_mut().unwrap() ^= 1;
    let err = log
        .append_as_leader(&[good.clone(), bad_crc].concat(), LeaderEpoch(0), 0)
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptRecord(_)));
    assert_eq!(err.kafka_error_code(), Some(2));
    let err = log
        .append_as_leader(
            &[good.clone(), records(1, 300, 0)].concat(),
            LeaderEpoch(0),
            0,
        )
        .unwrap_err();
    assert!(matches!(err, LogError::RecordTooLarge { .. }));
    assert_eq!(err.kafka_error_code(), Some(10));
    let err = log.append_as_leader(&[], LeaderEpoch(0), 0).unwrap_err();
    assert!(matches!(err, LogError::InvalidRecord { .. }));
    let err = log
        .append_as_leader(&build_batch(&[], 0), LeaderEpoch(0), 0)
        .unwrap_err();
    assert_eq!(err.kafka_error_code(), Some(87));
    let mut old_magic = good.clone();
    old_magic[16] = 1;
    let err = log
        .append_as_leader(&old_magic, LeaderEpoch(0), 0)
        .unwrap_err();
    assert_eq!(err.kafka_error_code(), Some(43));
    assert!(log.append_as_leader(&good, LeaderEpoch(-1), 0).is_err());
    assert_eq!(log.log_end_offset(), Offset(0));
    assert_eq!(log.size_bytes(), 0);
    assert_eq!(log.latest_epoch(), None);
}

// Reads honour max_bytes, KIP-74's first-batch rule, the high watermark and the log range.
#[test]
fn read_limits() {
    let (_, mut log) = new_log(LogConfig::default());
    let batch = records(2, 20, 0);
    let size = batch.len();
    for _ in 0..4 {
        log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    }
    // offsets: [0,1] [2,3] [4,5] [6,7]
    let r = log.read(Offset(0), 2 * size + 1, None, false).unwrap();
    assert_eq!((r.batch_count, r.last_offset), (2, Some(Offset(3))));
    assert_eq!(r.records.len(), 2 * size);
    let r = log.read(Offset(0), 1, None, false).unwrap();
    assert_eq!(r.batch_count, 0);
    let r = log.read(Offset(0), 1, None, true).unwrap();
    assert_eq!(r.batch_count, 1);
    let r = log.read(Offset(3), usize::MAX, None, true).unwrap();
    assert_eq!(
        headers(&r.records)[0].base_offset,
        Offset(2),
        "batch containing offset 3"
    );
    let r = log
        .read(Offset(0), usize::MAX, Some(Offset(4)), true)
        .unwrap();
    assert_eq!(
        r.last_offset,
        Some(Offset(3)),
        "high watermark excludes batch at 4"
    );
    let r = log
        .read(Offset(0), usize::MAX, Some(Offset(5)), true)
        .unwrap();
    assert_eq!(
        r.last_offset,
        Some(Offset(5)),
        "batch starting below the limit is whole"
    );
    let r = log.read(Offset(8), usize::MAX, None, true).unwrap();
    assert!(r.records.is_empty());
    assert_eq!(r.log_end_offset, Offset(8));
    let err = log.read(Offset(9), 100, None, true).unwrap_err();
    assert!(matches!(
        err,
        LogError::OffsetOutOfRange {
            requested: Offset(9),
            ..
        }
    ));
    assert_eq!(err.kafka_error_code(), Some(1));
    log.increment_log_start_offset(Offset(4)).unwrap();
    assert!(log.read(Offset(3), 100, None, true).is_err());
}

// Segments roll when the next append would exceed segment.bytes; reads span segments.
#[test]
fn rolls_by_size_and_reads_across_segments() {
    let (storage, mut log) = new_log(small_config());
    let batch = records(1, 300, 0); // ~ 370 bytes: two per 1024-byte segment
    for _ in 0..5 {
        log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    }
    assert_eq!(
        log.segment_base_offsets(),
        vec![Offset(0), Offset(2), Offset(4)]
    );
    let names: Vec<String> = storage
        .list_dir(Path::new(DIR))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&"00000000000000000002.log".to_string()));
    assert!(names.contains(&"00000000000000000004.timeindex".to_string()));
    assert!(names.contains(&"00000000000000000004.index".to_string()));
    let r = log.read(Offset(1), usize::MAX, None, true).unwrap();
    assert_eq!(r.batch_count, 4);
    assert_eq!(r.last_offset, Some(Offset(4)));
    // A batch bigger than a segment still goes in, alone in a fresh segment.
    log.append_as_leader(&records(1, 2_000, 0), LeaderEpoch(0), 0)
        .unwrap();
    assert_eq!(log.segment_count(), 4);
    log.check_invariants();
}

// Segments roll once segment.ms passed since their first append; idle ones via maybe_roll.
#[test]
fn rolls_by_time() {
    let config = LogConfig {
        segment_ms: 100,
        ..small_config()
    };
    let (_, mut log) = new_log(config);
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 1_000)
        .unwrap();
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 1_099)
        .unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 1_100)
        .unwrap();
    assert_eq!(log.segment_base_offsets(), vec![Offset(0), Offset(2)]);
    assert!(!log.maybe_roll(1_150).unwrap());
    assert!(log.maybe_roll(1_200).unwrap());
    assert_eq!(log.segment_count(), 3);
    assert!(
        !log.maybe_roll(5_000).unwrap(),
        "an empty active segment never rolls"
    );
}

// segment.jitter.ms (Kafka's LogConfig.randomSegmentJitter): each segment rolls once
// segment.ms minus its own jitter has passed, the jitter in [0, min(jitter, segment.ms)) and
// picked per segment (from its path here, not at random: the same segment, the same jitter), so
// segments do not all roll at the same age.
#[test]
fn rolls_by_time_with_jitter() {
    let config = LogConfig {
        segment_ms: 1_000,
        segment_jitter_ms: 600,
        ..small_config()
    };
    let (_, mut log) = new_log(config.clone());
    let mut ages = Vec::new();
    let mut now = 10_000;
    for _ in 0..8 {
        log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), now)
            .unwrap();
        let jitter = log.active().roll_jitter_ms(&config);
        assert!((0..600).contains(&jitter), "{jitter}");
        let started = now;
        while !log.maybe_roll(now).unwrap() {
            now += 1;
            assert!(now - started <= 1_000, "rolled by segment.ms at the latest");
        }
        assert_eq!(now - started, 1_000 - jitter);
        ages.push(now - started);
    }
    ages.sort_unstable();
    ages.dedup();
    assert!(ages.len() > 1, "segments roll at different ages: {ages:?}");
    let without = LogConfig {
        segment_jitter_ms: 0,
        ..config.clone()
    };
    assert_eq!(log.active().roll_jitter_ms(&without), 0);
    let beyond = LogConfig {
        segment_jitter_ms: i64::MAX,
        ..config
    };
    assert!(
        log.active().roll_jitter_ms(&beyond) < 1_000,
        "bounded by segment.ms"
    );
}

// Every offset reads back the batch containing it, through the sparse index, before and after a
// clean reopen (indexes trusted) and after an unclean one (indexes rebuilt).
#[test]
fn index_lookups_find_every_offset() {
    let (storage, mut log) = new_log(small_config());
    let mut expected = Vec::new();
    for i in 0..40 {
        let info = log
            .append_as_leader(&records(1 + i % 3, 7 * i, i as i64), LeaderEpoch(0), 0)
            .unwrap();
        expected.push((info.first_offset, info.last_offset));
    }
    assert!(log.segment_count() > 3);
    let check = |log: &Log| {
        for &(first, last) in &expected {
            for offset in first.0..=last.0 {
                let r = log.read(Offset(offset), 1, None, true).unwrap();
                assert_eq!(headers(&r.records)[0].base_offset, first, "offset {offset}");
            }
        }
    };
    check(&log);
    log.close(0).unwrap();
    let reopened = open_log(&storage, small_config(), true, 0);
    assert!(!reopened.recovery_report().recovered());
    check(&reopened);
    drop(reopened);
    let recovered = open_log(&storage, small_config(), false, 0);
    assert_eq!(
        recovered.recovery_report().segments_recovered,
        recovered.segment_count()
    );
    check(&recovered);
}

// offset_for_timestamp returns the first record whose timestamp reaches the target, using the
// time index across segments, bounded by the high watermark; MAX_TIMESTAMP finds the largest.
#[test]
fn timestamp_lookups() {
    let (_, mut log) = new_log(small_config());
    let timestamps = [100, 200, 150, 300, 250, 400, 50, 500];
    for ts in timestamps {
        log.append_as_leader(&records(1, 150, ts), LeaderEpoch(0), 0)
            .unwrap();
    }
    assert!(log.segment_count() > 1);
    let at = |ts, max| {
        log.offset_for_timestamp(ts, max, &NoCodecs)
            .unwrap()
            .map(|t| (t.offset.0, t.timestamp))
    };
    assert_eq!(at(0, None), Some((0, 100)));
    assert_eq!(at(100, None), Some((0, 100)));
    assert_eq!(at(101, None), Some((1, 200)));
    assert_eq!(at(260, None), Some((3, 300)));
    assert_eq!(at(450, None), Some((7, 500)));
    assert_eq!(at(501, None), None);
    assert_eq!(at(450, Some(Offset(7))), None, "beyond the high watermark");
    let max = log.offset_of_max_timestamp(&NoCodecs).unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (Offset(7), 500));
}

// OffsetForLeaderEpoch follows the epoch cache, and the cache survives a reopen.
#[test]
fn end_offset_for_epoch_and_checkpoint() {
    let (storage, mut log) = new_log(small_config());
    log.append_as_leader(&records(2, 1, 0), LeaderEpoch(1), 0)
        .unwrap();
    log.append_as_leader(&records(2, 1, 0), LeaderEpoch(1), 0)
        .unwrap();
    log.append_as_leader(&records(3, 1, 0), LeaderEpoch(3), 0)
        .unwrap();
    let e = |epoch| {
        log.end_offset_for_epoch(LeaderEpoch(epoch))
            .map(|(e, o)| (e.0, o.0))
    };
    assert_eq!(e(1), Some((1, 4)));
    assert_eq!(e(2), Some((1, 4)));
    assert_eq!(e(3), Some((3, 7)));
    assert_eq!(e(4), None);
    assert_eq!(e(0), Some((0, 0)));
    log.assign_epoch_start_offset(LeaderEpoch(5)).unwrap();
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(3)),
        Some((LeaderEpoch(3), Offset(7)))
    );
    drop(log);
    let text = crate::storage::read_file_if_exists(
        &storage,
        &Path::new(DIR).join(LEADER_EPOCH_CHECKPOINT_FILE),
    )
    .unwrap()
    .unwrap();
    assert_eq!(String::from_utf8(text).unwrap(), "0\n3\n1 0\n3 4\n5 7\n");
}

// Follower truncation drops whole batches at or above the offset (and later segments), fixes
// the epoch cache, and the log keeps working.
#[test]
fn truncate_to_drops_whole_batches() {
    let (_, mut log) = new_log(small_config());
    log.append_as_leader(&records(2, 300, 0), LeaderEpoch(1), 0)
        .unwrap(); // 0-1
    log.append_as_leader(&records(2, 300, 0), LeaderEpoch(1), 0)
        .unwrap(); // 2-3
    log.append_as_leader(&records(2, 300, 0), LeaderEpoch(2), 0)
        .unwrap(); // 4-5
    log.append_as_leader(&records(2, 300, 0), LeaderEpoch(3), 0)
        .unwrap(); // 6-7
    log.flush(0).unwrap();
    assert!(log.segment_count() >= 2);
    assert!(!log.truncate_to(Offset(8), 0).unwrap());
    assert!(log.truncate_to(Offset(3), 0).unwrap());
    assert_eq!(
        log.log_end_offset(),
        Offset(2),
        "batch 2-3 straddles offset 3"
    );
    assert_eq!(log.recovery_point(), Offset(2));
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(1)));
    assert_eq!(read_all(&log).len(), 1);
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(4), 0)
        .unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(1)),
        Some((LeaderEpoch(1), Offset(2)))
    );
    log.check_invariants();
}

// Truncating fully empties the log and starts it over at the given offset.
#[test]
fn truncate_fully_starts_over() {
    let (_, mut log) = new_log(small_config());
    for _ in 0..4 {
        log.append_as_leader(&records(2, 300, 0), LeaderEpoch(1), 0)
            .unwrap();
    }
    log.truncate_fully_and_start_at(Offset(100)).unwrap();
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_count()
        ),
        (Offset(100), Offset(100), 1)
    );
    assert_eq!(log.latest_epoch(), None);
    let info = log
        .append_as_leader(&records(1, 1, 0), LeaderEpoch(2), 0)
        .unwrap();
    assert_eq!(info.first_offset, Offset(100));
}

// Follower appends keep the leader's offsets and epochs and must continue the log exactly.
#[test]
fn follower_append_keeps_offsets_and_learns_epochs() {
    let (_, mut leader) = new_log(small_config());
    leader
        .append_as_leader(&records(2, 5, 0), LeaderEpoch(1), 0)
        .unwrap();
    leader
        .append_as_leader(&records(2, 5, 0), LeaderEpoch(2), 0)
        .unwrap();
    let data = leader
        .read(Offset(0), usize::MAX, None, true)
        .unwrap()
        .records;
    let storage = MemStorage::new();
    let mut follower = Log::open(
        Arc::new(storage),
        PathBuf::from("/f/t-0"),
        small_config(),
        Offset(0),
        Offset(0),
        true,
        0,
    )
    .unwrap();
    follower.append_as_follower(&data, 0).unwrap();
    // Batches going backwards are refused (gaps are fine: a compacted leader has them).
    let err = follower.append_as_follower(&data[parse_batches(&data).unwrap()[1].position..], 0);
    assert!(matches!(
        err,
        Err(LogError::UnexpectedAppendOffset {
            expected: Offset(4),
            found: Offset(2)
        })
    ));
    assert_eq!(follower.log_end_offset(), Offset(4));
    assert_eq!(follower.epoch_entries(), leader.epoch_entries());
    let copy = follower
        .read(Offset(0), usize::MAX, None, true)
        .unwrap()
        .records;
    assert_eq!(copy, data);
}

// Time retention deletes old segments up to the high watermark, never the active one, and
// moves the log start offset.
#[test]
fn retention_by_time() {
    let config = LogConfig {
        retention_ms: Some(1_000),
        ..small_config()
    };
    let (_, mut log) = new_log(config);
    for ts in [0, 0, 100, 100, 5_000, 5_000] {
        log.append_as_leader(&records(1, 300, ts), LeaderEpoch(0), 0)
            .unwrap();
    }
    assert_eq!(
        log.segment_base_offsets(),
        vec![Offset(0), Offset(2), Offset(4)]
    );
    let none = log.apply_retention(2_000, Offset(1)).unwrap();
    assert!(
        none.deleted.is_empty(),
        "segment 0 ends above the high watermark"
    );
    let result = log.apply_retention(2_000, Offset(6)).unwrap();
    assert_eq!(result.deleted.len(), 2);
    assert!(result
        .deleted
        .iter()
        .all(|d| d.reason == RetentionReason::Time));
    assert_eq!(result.log_start_offset, Offset(4));
    assert_eq!(log.log_start_offset(), Offset(4));
    // Everything expired: the active segment rolls first and goes too, leaving an empty one.
    let result = log.apply_retention(10_000, Offset(6)).unwrap();
    assert_eq!(result.deleted.len(), 1);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (Offset(6), Offset(6))
    );
    log.check_invariants();
}

// Size retention deletes oldest segments while the log stays at or above retention.bytes
// without them (Kafka's `diff - segment.size >= 0` rule).
#[test]
fn retention_by_bytes() {
    let (_, mut log) = new_log(small_config());
    for _ in 0..6 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    let segment_size = log.size_bytes() / 3;
    log.set_config(LogConfig {
        retention_bytes: Some(segment_size + 10),
        ..small_config()
    })
    .unwrap();
    let result = log.apply_retention(0, Offset(6)).unwrap();
    assert_eq!(
        result.deleted.len(),
        1,
        "a second deletion would go below retention.bytes"
    );
    log.set_config(LogConfig {
        retention_bytes: Some(segment_size),
        ..small_config()
    })
    .unwrap();
    let result = log.apply_retention(0, Offset(6)).unwrap();
    assert_eq!(result.deleted.len(), 1);
    assert!(result
        .deleted
        .iter()
        .all(|d| d.reason == RetentionReason::Size));
    assert_eq!(log.log_start_offset(), Offset(4));
    assert_eq!(log.segment_count(), 1);
}

// DeleteRecords moves the log start offset; retention then deletes segments wholly below it.
#[test]
fn log_start_offset_breach_deletes_segments() {
    let (_, mut log) = new_log(small_config());
    for _ in 0..6 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    assert!(log.increment_log_start_offset(Offset(3)).unwrap());
    assert!(!log.increment_log_start_offset(Offset(2)).unwrap());
    assert!(log.increment_log_start_offset(Offset(7)).is_err());
    let result = log.apply_retention(0, Offset(6)).unwrap();
    assert_eq!(result.deleted.len(), 1);
    assert_eq!(result.deleted[0].reason, RetentionReason::LogStartOffset);
    assert_eq!(log.log_start_offset(), Offset(3));
    assert_eq!(log.segment_base_offsets(), vec![Offset(2), Offset(4)]);
}

// DeleteRecords (issue 20): the segments wholly below the new log start offset go at once
// (Kafka's deleteLogStartOffsetBreachedSegments, without waiting for the retention check), the
// segment holding the start stays and reads below the start are out of range; a log start
// offset inside a segment survives a crash only through the checkpoint (the broker writes it
// before answering).
#[test]
fn segments_below_a_new_log_start_offset_are_deleted_at_once() {
    let (storage, mut log) = new_log(small_config());
    for _ in 0..6 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    assert_eq!(
        log.segment_base_offsets(),
        vec![Offset(0), Offset(2), Offset(4)]
    );
    assert!(log.increment_log_start_offset(Offset(3)).unwrap());
    // Never past the high watermark the caller names: nothing at or above 2 goes.
    let held = log.delete_segments_below_log_start(Offset(1)).unwrap();
    assert!(held.deleted.is_empty());
    let result = log.delete_segments_below_log_start(Offset(6)).unwrap();
    assert_eq!(
        result
            .deleted
            .iter()
            .map(|d| (d.base_offset, d.reason))
            .collect::<Vec<_>>(),
        vec![(Offset(0), RetentionReason::LogStartOffset)]
    );
    assert_eq!(log.segment_base_offsets(), vec![Offset(2), Offset(4)]);
    assert_eq!(log.log_start_offset(), Offset(3));
    assert!(matches!(
        log.read(Offset(2), usize::MAX, None, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    let data = log.read(Offset(3), usize::MAX, None, true).unwrap();
    assert_eq!(headers(&data.records)[0].base_offset, Offset(3));
    // The active segment never goes, even wholly below the start (Kafka's rule: a segment
    // goes when the next one starts at or below the log start offset).
    assert!(log.increment_log_start_offset(Offset(6)).unwrap());
    let result = log.delete_segments_below_log_start(Offset(6)).unwrap();
    assert_eq!(result.deleted.len(), 1);
    assert_eq!(log.segment_base_offsets(), vec![Offset(4)]);
    log.flush(0).unwrap();
    // A reopen with the checkpointed start keeps it; without it, the first segment's base.
    drop(log);
    storage.crash();
    let reopened = Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        small_config(),
        Offset(6),
        Offset(6),
        false,
        0,
    )
    .unwrap();
    assert_eq!(reopened.log_start_offset(), Offset(6));
}

// A follower that started over at the leader's log start offset (issue 20) gets the batch that
// holds it, which DeleteRecords may have put mid-batch: its empty log restarts at the batch's base
// offset and keeps the log start offset (Kafka's Partition.doAppendRecordsToFollowerOrFutureReplica
// on UnexpectedAppendOffsetException). Anything else going backwards is still refused.
#[test]
fn an_empty_follower_log_takes_a_first_batch_straddling_its_start() {
    let (_, mut leader) = new_log(small_config());
    for _ in 0..3 {
        leader
            .append_as_leader(&records(3, 10, 0), LeaderEpoch(2), 0)
            .unwrap();
    }
    let batches = |from: i64| {
        leader
            .read(Offset(from), usize::MAX, None, true)
            .unwrap()
            .records
    };
    let (_, mut follower) = new_log(small_config());
    follower.truncate_fully_and_start_at(Offset(4)).unwrap();
    let info = follower.append_as_follower(&batches(4), 0).unwrap();
    assert_eq!(info.first_offset, Offset(3));
    assert_eq!(
        (follower.log_start_offset(), follower.log_end_offset()),
        (Offset(4), Offset(9))
    );
    assert_eq!(follower.segment_base_offsets(), vec![Offset(3)]);
    assert!(matches!(
        follower.read(Offset(3), usize::MAX, None, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(follower.latest_epoch(), Some(LeaderEpoch(2)));
    // Not empty any more: a batch from below is refused.
    assert!(matches!(
        follower.append_as_follower(&batches(6), 0),
        Err(LogError::UnexpectedAppendOffset { .. })
    ));
    // A batch wholly below the start is refused too, and leaves the empty log as it was.
    let (_, mut other) = new_log(small_config());
    other.truncate_fully_and_start_at(Offset(6)).unwrap();
    let below = &batches(0)[..parse_batches(&batches(0)).unwrap()[1].position];
    assert!(matches!(
        other.append_as_follower(below, 0),
        Err(LogError::UnexpectedAppendOffset { .. })
    ));
    assert_eq!(
        (other.log_start_offset(), other.log_end_offset()),
        (Offset(6), Offset(6))
    );
}

// flush.messages and flush.ms trigger fsyncs; the recovery point and durable positions follow.
#[test]
fn flush_policy() {
    let config = LogConfig {
        flush_messages: Some(3),
        flush_ms: Some(1_000),
        ..small_config()
    };
    let (storage, mut log) = new_log(config);
    let seg = Path::new(DIR).join("00000000000000000000.log");
    log.append_as_leader(&records(2, 1, 0), LeaderEpoch(0), 10)
        .unwrap();
    assert_eq!(log.recovery_point(), Offset(0));
    assert!(storage.unsynced_bytes(&seg).unwrap() > 0);
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 20)
        .unwrap();
    assert_eq!(log.recovery_point(), Offset(3));
    assert_eq!(storage.unsynced_bytes(&seg).unwrap(), 0);
    assert_eq!(log.durable_positions(), vec![(Offset(0), log.size_bytes())]);
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 30)
        .unwrap();
    assert!(!log.flush_if_due(500).unwrap());
    assert!(log.flush_if_due(1_020).unwrap());
    assert_eq!(log.recovery_point(), Offset(4));
    assert!(!log.flush_if_due(5_000).unwrap(), "nothing unflushed");
}

// A crash loses what was not flushed; unclean recovery ends the log at the flushed offset.
#[test]
fn crash_loses_unflushed_batches() {
    let (storage, mut log) = new_log(small_config());
    for _ in 0..3 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    log.flush(0).unwrap();
    for _ in 0..3 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(1), 0)
            .unwrap();
    }
    drop(log);
    storage.crash();
    let log = Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        small_config(),
        Offset(3),
        Offset(0),
        false,
        0,
    )
    .unwrap();
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(
        log.latest_epoch(),
        Some(LeaderEpoch(0)),
        "epoch 1 started past the end"
    );
    assert!(log.recovery_report().recovered());
    assert_eq!(read_all(&log).len(), 3);
    log.check_invariants();
}

// Kafka's flush after a roll: the rolled segments are fsynced without the lock and the
// recovery point moves to the active segment's base — they survive a power loss, and an unclean
// open scans only the active segment. A truncation between plan and finish refuses the move.
#[test]
fn rolled_segments_are_flushed_and_move_the_recovery_point() {
    let (storage, mut log) = new_log(small_config());
    assert!(log.plan_rolled_flush().is_none(), "nothing rolled yet");
    for _ in 0..7 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    let active_base = log.segment_base_offsets().last().copied().unwrap();
    assert!(active_base > Offset(0), "{:?}", log.segment_base_offsets());
    assert_eq!(log.recovery_point(), Offset(0));

    // Planned, then the log is truncated below the plan's target: refused.
    let stale = log.plan_rolled_flush().expect("segments rolled");
    stale.run(&storage).unwrap();
    log.truncate_to(Offset(1), 0).unwrap();
    assert!(!log.finish_rolled_flush(stale));
    assert!(
        log.recovery_point() <= Offset(1),
        "{}",
        log.recovery_point()
    );
    for _ in 0..6 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }

    let end = log.log_end_offset();
    let active_base = log.segment_base_offsets().last().copied().unwrap();
    let rolled = log.plan_rolled_flush().expect("segments rolled");
    rolled.run(&storage).unwrap();
    assert!(log.finish_rolled_flush(rolled));
    assert_eq!(log.recovery_point(), active_base);
    assert!(log.plan_rolled_flush().is_none(), "nothing more to flush");
    drop(log);

    storage.crash();
    let log = Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        small_config(),
        active_base,
        Offset(0),
        false,
        0,
    )
    .unwrap();
    assert_eq!(
        log.log_end_offset(),
        active_base,
        "the rolled segments survived"
    );
    assert!(
        active_base < end,
        "the active segment's unflushed batches are gone"
    );
    assert_eq!(
        log.recovery_report().segments_recovered,
        1,
        "only the active segment"
    );
    log.check_invariants();
}

// Issue 19: bit rot in the middle of the log truncates there, but sets the damaged segment
// (copied whole) and every later segment (moved, bytes unchanged) aside instead of deleting
// them; the quarantine directory says what happened.
#[test]
fn corrupt_batch_truncates_log_and_sets_the_rest_aside() {
    let (storage, mut log) = new_log(small_config());
    for _ in 0..6 {
        log.append_as_leader(&records(1, 300, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    log.close(0).unwrap();
    assert_eq!(log.segment_count(), 3);
    let second_batch = read_all(&log)[1].size_bytes().unwrap() as u64;
    drop(log);
    let seg0 = Path::new(DIR).join("00000000000000000000.log");
    let before: Vec<(String, Vec<u8>)> = [
        "00000000000000000000.log",
        "00000000000000000002.log",
        "00000000000000000004.log",
    ]
    .iter()
    .map(|name| {
        (
            name.to_string(),
            file_bytes(&storage, &Path::new(DIR).join(name)),
        )
    })
    .collect();
    storage.corrupt_byte(&seg0, second_batch + 100).unwrap();
    let log = open_log(&storage, small_config(), false, 77);
    assert_eq!(log.log_end_offset(), Offset(1));
    assert_eq!(log.segment_count(), 1);
    let report = log.recovery_report();
    assert_eq!(report.truncated_to, Some(Offset(1)));
    assert!(report.lost_data());
    assert_eq!(report.torn_tail_bytes, 0, "damage is not a torn tail");
    let quarantine = report.quarantine.clone().expect("set aside");
    assert_eq!(
        quarantine.path,
        Path::new("/logs/t-0.00000000000000000001-77-quarantine")
    );
    assert_eq!(quarantine.from_offset, Offset(1));
    assert_eq!(quarantine.segments, 3);
    let later: u64 = before[1..].iter().map(|(_, b)| b.len() as u64).sum();
    assert_eq!(
        quarantine.bytes,
        before[0].1.len() as u64 - second_batch + later
    );
    assert_eq!(report.bytes_truncated, quarantine.bytes);
    assert!(report.to_string().contains("set aside"));
    // Later segments moved unchanged; the damaged one copied whole, damage included.
    for (name, bytes) in &before[1..] {
        assert_eq!(&file_bytes(&storage, &quarantine.path.join(name)), bytes);
        assert!(!storage.exists(&Path::new(DIR).join(name)).unwrap());
    }
    let copy = file_bytes(&storage, &quarantine.path.join(&before[0].0));
    assert_eq!(copy.len(), before[0].1.len());
    assert_ne!(copy, before[0].1, "the copy keeps the damaged byte");
    assert_eq!(
        Quarantine::read(&storage, &quarantine.path).as_ref(),
        Some(&quarantine)
    );
    // The set-aside data survives a power loss (everything was made durable), and reopening
    // does not set anything aside again.
    drop(log);
    storage.crash();
    let log = open_log(&storage, small_config(), false, 78);
    assert_eq!(log.log_end_offset(), Offset(1));
    assert!(log.recovery_report().quarantine.is_none());
    assert_eq!(
        Quarantine::read(&storage, &quarantine.path),
        Some(quarantine)
    );
}

// A crash's torn tail (the last segment ends inside a batch, or in zeros) is dropped as Kafka
// does: nothing follows it, so nothing is set aside; the replica still lost data.
#[test]
fn torn_tail_is_dropped_without_quarantine() {
    let (storage, mut log) = new_log(LogConfig::default());
    for _ in 0..3 {
        log.append_as_leader(&records(1, 100, 0), LeaderEpoch(0), 0)
            .unwrap();
    }
    log.flush(0).unwrap();
    log.append_as_leader(&records(1, 100, 0), LeaderEpoch(0), 0)
        .unwrap();
    drop(log);
    // Cut the last batch short (a torn write).
    let seg0 = Path::new(DIR).join("00000000000000000000.log");
    let bytes = file_bytes(&storage, &seg0);
    let third_end = bytes.len() as u64 - read_size_of_last(&bytes);
    let mut file = storage.open_file(&seg0, OpenMode::Existing).unwrap();
    file.truncate(third_end + 20).unwrap();
    drop(file);
    let log = open_log(&storage, LogConfig::default(), false, 0);
    assert_eq!(log.log_end_offset(), Offset(3));
    let report = log.recovery_report();
    assert_eq!(report.torn_tail_bytes, 20);
    assert!(report.quarantine.is_none());
    assert!(report.lost_data());
    drop(log);
    // Zeros after the last batch (the file grew, its data never reached the disk).
    let mut file = storage.open_file(&seg0, OpenMode::Existing).unwrap();
    file.append(&[0u8; 300]).unwrap();
    drop(file);
    let log = open_log(&storage, LogConfig::default(), false, 0);
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(log.recovery_report().torn_tail_bytes, 300);
    assert!(log.recovery_report().quarantine.is_none());
    let parent = storage.list_dir(Path::new("/logs")).unwrap();
    assert_eq!(parent.len(), 1, "no quarantine directory: {parent:?}");
}

fn file_bytes(storage: &MemStorage, path: &Path) -> Vec<u8> {
    storage
        .open_file(path, OpenMode::Existing)
        .unwrap()
        .read_all()
        .unwrap()
}

/// The size of the last batch of a segment file's bytes.
fn read_size_of_last(bytes: &[u8]) -> u64 {
    let views = parse_batches(bytes).unwrap();
    views.last().unwrap().bytes.len() as u64
}

// A clean reopen rebuilds a missing or garbage index instead of trusting it.
#[test]
fn clean_open_rebuilds_damaged_indexes() {
    let (storage, mut log) = new_log(small_config());
    for i in 0..12 {
        log.append_as_leader(&records(1, 40, i), LeaderEpoch(0), 0)
            .unwrap();
    }
    log.close(0).unwrap();
    let expected = read_all(&log);
    drop(log);
    let index = Path::new(DIR).join("00000000000000000000.index");
    storage.remove_file(&index).unwrap();
    let log = open_log(&storage, small_config(), true, 0);
    assert!(
        log.recovery_report().recovered(),
        "missing index entries detected"
    );
    assert_eq!(read_all(&log), expected);
    drop(log);
    let log = open_log(&storage, small_config(), true, 0);
    assert!(
        !log.recovery_report().recovered(),
        "the rebuilt index is trusted next time"
    );
    drop(log);
    crate::storage::write_file_atomically(&storage, &index, &[0xFF; 20]).unwrap();
    let log = open_log(&storage, small_config(), true, 0);
    assert!(log.recovery_report().recovered());
    assert_eq!(read_all(&log), expected);
    for h in &expected {
        let r = log.read(h.base_offset, 1, None, true).unwrap();
        assert_eq!(headers(&r.records)[0].base_offset, h.base_offset);
    }
}

// A checkpointed log start offset beyond what survived a crash starts the log over there.
#[test]
fn log_start_beyond_recovered_end_starts_over() {
    let (storage, mut log) = new_log(small_config());
    log.append_as_leader(&records(5, 1, 0), LeaderEpoch(0), 0)
        .unwrap();
    drop(log);
    storage.crash();
    let log = Log::open(
        Arc::new(storage.clone()),
        PathBuf::from(DIR),
        small_config(),
        Offset(0),
        Offset(3),
        false,
        0,
    )
    .unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (Offset(3), Offset(3))
    );
}

// Timestamps carried per record: the lookup answers the record, not its batch (issue 20).
#[test]
fn timestamp_lookup_answers_the_record() {
    let (_, mut log) = new_log(small_config());
    let batch =
        build_batch_with_timestamps(&[(None, b"a", 10), (None, b"b", 90), (None, b"c", 20)]);
    log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    let found = log
        .offset_for_timestamp(50, None, &NoCodecs)
        .unwrap()
        .unwrap();
    assert_eq!((found.offset, found.timestamp), (Offset(1), 90));
}

// delete() removes the partition directory.
#[test]
fn delete_removes_directory() {
    let (storage, mut log) = new_log(small_config());
    log.append_as_leader(&records(1, 1, 0), LeaderEpoch(0), 0)
        .unwrap();
    log.delete().unwrap();
    storage.crash();
    assert!(!storage.exists(Path::new(DIR)).unwrap());
}

// The same log code runs on the real file system: append, close, reopen clean and unclean.
#[test]
fn works_on_os_storage() {
    let temp = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(crate::storage::OsStorage::new());
    let dir = temp.path().join("t-0");
    let open = |clean| {
        Log::open(
            storage.clone(),
            dir.clone(),
            small_config(),
            Offset(0),
            Offset(0),
            clean,
            0,
        )
        .unwrap()
    };
    let mut log = open(true);
    for i in 0..10 {
        log.append_as_leader(&records(2, 100, i), LeaderEpoch(1), 0)
            .unwrap();
    }
    log.close(0).unwrap();
    let expected = read_all(&log);
    drop(log);
    let log = open(true);
    assert!(!log.recovery_report().recovered());
    assert_eq!(read_all(&log), expected);
    drop(log);
    let log = open(false);
    assert!(log.recovery_report().recovered());
    assert_eq!(log.recovery_report().batches_validated, 10);
    assert_eq!(read_all(&log), expected);
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(1)));
}

// A Log and a LogDir can be shared across threads (readers take &self).
#[test]
fn log_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Log>();
    assert_send_sync::<crate::LogDir>();
    assert_send_sync::<Arc<dyn Storage>>();
}

/// A `count`-record batch of idempotent producer `id` at `epoch`, first sequence `seq`.
fn produced(id: i64, epoch: i16, seq: i32, count: usize) -> Vec<u8> {
    let mut batch = records(count, 100, 1_000);
    crate::plain_batch::set_producer(&mut batch, id, epoch, seq);
    batch
}

// A retried batch is answered with the offsets it got, and the log does not grow.
#[test]
fn leader_append_answers_a_duplicate_without_appending_it() {
    let (_, mut log) = new_log(small_config());
    let first = log
        .append_as_leader(&produced(7, 0, 0, 3), LeaderEpoch(0), 1)
        .unwrap();
    log.append_as_leader(&produced(7, 0, 3, 1), LeaderEpoch(0), 1)
        .unwrap();
    let again = log
        .append_as_leader(&produced(7, 0, 0, 3), LeaderEpoch(0), 2)
        .unwrap();
    assert!(again.duplicate && !first.duplicate);
    assert_eq!(
        (again.first_offset, again.last_offset, again.record_count),
        (Offset(0), Offset(2), 0)
    );
    assert_eq!(log.log_end_offset(), Offset(4));
    let gap = log.append_as_leader(&produced(7, 0, 9, 1), LeaderEpoch(0), 3);
    assert_eq!(gap.unwrap_err().kafka_error_code(), Some(45));
    // two batches of one producer in one append: the second follows the first
    let two = [produced(8, 0, 0, 2), produced(8, 0, 2, 2)].concat();
    let info = log.append_as_leader(&two, LeaderEpoch(0), 4).unwrap();
    assert_eq!((info.first_offset, info.batch_count), (Offset(4), 2));
    assert_eq!(
        log.producer_states().get(8).unwrap().last_sequence(),
        Some(3)
    );
}

// The producer state comes back after a clean close, after a crash (snapshot at the last roll
// plus the batches after it), and follows a truncation.
#[test]
fn producer_state_survives_reopen_and_follows_truncation() {
    let (storage, mut log) = new_log(small_config());
    for seq in 0..20 {
        log.append_as_leader(&produced(1, 0, seq, 1), LeaderEpoch(0), 1)
            .unwrap();
    }
    assert!(log.segment_count() > 2, "the test wants rolls");
    let expected = log.producer_states().clone();
    log.close(2).unwrap();
    let reopened = open_log(&storage, small_config(), true, 3);
    assert_eq!(reopened.producer_states(), &expected);

    // unclean: the close's snapshot is removed, so the state is replayed from a roll's snapshot
    let end = reopened.log_end_offset();
    drop(reopened);
    let snapshot = PathBuf::from(DIR).join(crate::segment_file_name(
        end,
        crate::producer_state::PRODUCER_SNAPSHOT_SUFFIX,
    ));
    storage.remove_file(&snapshot).unwrap();
    let mut log = open_log(&storage, small_config(), false, 4);
    assert_eq!(log.producer_states(), &expected);
    let retry = log
        .append_as_leader(&produced(1, 0, 19, 1), LeaderEpoch(0), 5)
        .unwrap();
    assert!(retry.duplicate);

    // truncating the last two batches: their sequences may be written again, once
    log.truncate_to(Offset(18), 6).unwrap();
    assert_eq!(
        log.producer_states().get(1).unwrap().last_sequence(),
        Some(17)
    );
    let again = log
        .append_as_leader(&produced(1, 0, 18, 1), LeaderEpoch(1), 7)
        .unwrap();
    assert!(!again.duplicate && again.first_offset == Offset(18));

    // a follower records what it appends
    let (_, mut follower) = new_log(small_config());
    let data = log.read(Offset(0), usize::MAX, None, true).unwrap();
    follower.append_as_follower(&data.records, 8).unwrap();
    assert_eq!(follower.producer_states(), log.producer_states());
    follower.truncate_fully_and_start_at(Offset(20)).unwrap();
    assert!(follower.producer_states().producers().is_empty());
}

// A replica that became leader in an epoch and appended nothing has that epoch starting at its
// log end; truncating to the log end (a follower told it diverges there) drops it, durably
// (Kafka's UnifiedLog.truncateTo), though no record is cut.
#[test]
fn truncate_at_the_log_end_drops_an_empty_epoch() {
    let (storage, mut log) = new_log(small_config());
    log.append_as_leader(&records(1, 10, 0), LeaderEpoch(0), 0)
        .unwrap();
    log.assign_epoch_start_offset(LeaderEpoch(1)).unwrap();
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(1)));
    assert!(!log.truncate_to(log.log_end_offset(), 0).unwrap());
    assert_eq!(log.latest_epoch(), Some(LeaderEpoch(0)));
    drop(log);
    let log = open_log(&storage, small_config(), true, 0);
    assert_eq!(
        log.latest_epoch(),
        Some(LeaderEpoch(0)),
        "the checkpoint was rewritten"
    );
}
