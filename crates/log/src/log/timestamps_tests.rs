//! Issue 20: ListOffsets by time answers at record granularity, as Kafka's
//! `UnifiedLog.fetchOffsetByTimestamp` / `FileRecords.searchForTimestamp` /
//! `RecordBatch.offsetOfMaxTimestamp` do — checked against a brute-force model over every
//! record, with compressed batches, LogAppendTime, a moved log start, the high watermark bound
//! and damaged data.

use std::path::Path;

use proptest::prelude::*;

use super::tests::{open_log, DIR};
use super::*;
use crate::batch::{compute_crc, ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, LENGTH_POS};
use crate::config::TimestampType;
use crate::plain_batch::build_batch_with_timestamps;
use crate::storage::MemStorage;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        retention_ms: None,
        ..LogConfig::default()
    }
}

/// A batch whose records carry `timestamps`, each value 20 bytes.
fn batch(timestamps: &[i64]) -> Vec<u8> {
    let value = [b'v'; 20];
    let records: Vec<_> = timestamps
        .iter()
        .map(|&ts| (None, &value[..], ts))
        .collect();
    build_batch_with_timestamps(&records)
}

/// Test codec 1: the records section reversed (what `compact_tests` also uses).
struct Reversing;

impl RecordCodecs for Reversing {
    fn decompress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        match codec {
            1 => Ok(data.iter().rev().copied().collect()),
            _ => Err(format!("codec {codec} is unknown here")),
        }
    }

    fn compress(&self, _: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        Ok(data.iter().rev().copied().collect())
    }
}

/// `plain` with its records section "compressed" by [`Reversing`] and the codec bits set.
fn compressed(plain: &[u8]) -> Vec<u8> {
    let mut batch = plain[..HEADER_SIZE].to_vec();
    batch.extend(plain[HEADER_SIZE..].iter().rev());
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&1i16.to_be_bytes());
    let length = (batch.len() - 12) as i32;
    batch[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn at(log: &Log, target: i64, max: Option<Offset>) -> Option<(i64, i64, Option<i32>)> {
    log.offset_for_timestamp(target, max, &Reversing)
        .unwrap()
        .map(|r| (r.offset.0, r.timestamp, r.leader_epoch.map(|e| e.0)))
}

// Shows the case: two records (1234 and 999999999999) in one batch — a lookup of the
// second's timestamp answers offset 1 with that timestamp and the batch's leader epoch, not
// the batch's base offset (what Keel answered before).
#[test]
fn the_record_not_the_batch() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    log.append_as_leader(&batch(&[1234, 999_999_999_999]), LeaderEpoch(3), 0)
        .unwrap();
    assert_eq!(
        at(&log, 999_999_999_999, None),
        Some((1, 999_999_999_999, Some(3)))
    );
    assert_eq!(at(&log, 1235, None), Some((1, 999_999_999_999, Some(3))));
    assert_eq!(at(&log, 0, None), Some((0, 1234, Some(3))));
    assert_eq!(at(&log, 1234, None), Some((0, 1234, Some(3))));
    assert_eq!(at(&log, 1_000_000_000_000, None), None);
    // The high watermark bounds the record, not the batch: record 1 is not yet committed.
    assert_eq!(at(&log, 999_999_999_999, Some(Offset(1))), None);
    assert_eq!(at(&log, 1000, Some(Offset(1))), Some((0, 1234, Some(3))));
}

// Shows: timestamps out of order inside a batch — the answer is the first record in offset
// order whose timestamp reaches the target (Kafka's `searchForTimestamp`), and MAX_TIMESTAMP
// is the first record carrying the largest one.
#[test]
fn first_record_in_offset_order() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    log.append_as_leader(&batch(&[10, 90, 20, 90, 5]), LeaderEpoch(0), 0)
        .unwrap();
    assert_eq!(at(&log, 15, None), Some((1, 90, Some(0))));
    assert_eq!(at(&log, 10, None), Some((0, 10, Some(0))));
    let max = log.offset_of_max_timestamp(&Reversing).unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (Offset(1), 90));
}

// Shows: a compressed batch is decompressed through the caller's codecs and answers the same
// records; without a codec for it the lookup is an error naming the batch, not a guess.
#[test]
fn compressed_batches_are_decoded() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    log.append_as_leader(&batch(&[100, 200]), LeaderEpoch(1), 0)
        .unwrap();
    log.append_as_leader(&compressed(&batch(&[300, 700, 500])), LeaderEpoch(2), 0)
        .unwrap();
    assert_eq!(at(&log, 301, None), Some((3, 700, Some(2))));
    assert_eq!(at(&log, 201, None), Some((2, 300, Some(2))));
    let max = log.offset_of_max_timestamp(&Reversing).unwrap().unwrap();
    assert_eq!(
        (max.offset, max.timestamp, max.leader_epoch),
        (Offset(3), 700, Some(LeaderEpoch(2)))
    );
    let err = log.offset_for_timestamp(301, None, &NoCodecs).unwrap_err();
    assert!(
        matches!(&err, LogError::InvalidRecord { reason } if reason.contains("offset 2")),
        "{err}"
    );
    // Lookups that end before the compressed batch need no codec.
    let found = log.offset_for_timestamp(150, None, &NoCodecs).unwrap();
    assert_eq!(found.map(|r| r.offset), Some(Offset(1)));
}

// Shows: in a LogAppendTime log every record carries the time the broker stamped (Kafka's
// `DefaultRecord.timestamp` for such batches), whatever the producer set.
#[test]
fn log_append_time_records_carry_the_batch_time() {
    let storage = MemStorage::new();
    let config = LogConfig {
        timestamp_type: TimestampType::LogAppendTime,
        ..config()
    };
    let mut log = open_log(&storage, config, true, 0);
    log.append_as_leader(&batch(&[1, 2]), LeaderEpoch(0), 5_000)
        .unwrap();
    log.append_as_leader(&batch(&[9_999_999, 3]), LeaderEpoch(0), 6_000)
        .unwrap();
    assert_eq!(at(&log, 5_001, None), Some((2, 6_000, Some(0))));
    assert_eq!(at(&log, 2, None), Some((0, 5_000, Some(0))));
    let max = log.offset_of_max_timestamp(&Reversing).unwrap().unwrap();
    assert_eq!((max.offset, max.timestamp), (Offset(2), 6_000));
}

// Shows: records below the log start offset are never answered, even inside a batch that
// straddles it; the earliest offset's epoch is the first epoch that starts at or below it.
#[test]
fn log_start_offset_inside_a_batch() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    log.append_as_leader(&batch(&[100, 500, 200, 600]), LeaderEpoch(4), 0)
        .unwrap();
    log.append_as_leader(&batch(&[700]), LeaderEpoch(6), 0)
        .unwrap();
    assert_eq!(log.epoch_at_log_start(), Some(LeaderEpoch(4)));
    log.increment_log_start_offset(Offset(2)).unwrap();
    assert_eq!(at(&log, 400, None), Some((3, 600, Some(4))));
    assert_eq!(at(&log, 0, None), Some((2, 200, Some(4))));
    assert_eq!(log.epoch_at_log_start(), Some(LeaderEpoch(4)));
}

// Shows: a batch that fails its CRC when a lookup reads it is reported as damage with its
// segment and position, not decoded into a wrong answer.
#[test]
fn damaged_batch_is_reported() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    log.append_as_leader(&batch(&[100, 200]), LeaderEpoch(0), 0)
        .unwrap();
    let path = Path::new(DIR).join(format!("{:020}.log", 0));
    storage.corrupt_byte(&path, HEADER_SIZE as u64 + 5).unwrap();
    match log.offset_for_timestamp(150, None, &Reversing) {
        Err(LogError::Damaged(damage)) => {
            assert_eq!((damage.segment, damage.position), (Offset(0), 0));
        }
        other => panic!("expected damage, got {other:?}"),
    }
}

// Shows: a batch larger than a lookup may read (its length comes from disk) is refused with the
// reason, not read into memory; lookups that end before it are unaffected.
#[test]
fn oversized_batches_are_not_read() {
    use super::timestamps::LOOKUP_BATCH_BYTES_MAX;
    let storage = MemStorage::new();
    let config = LogConfig {
        max_message_bytes: 1024,
        ..config()
    };
    let mut log = open_log(&storage, config, true, 0);
    log.append_as_leader(&batch(&[100]), LeaderEpoch(0), 0)
        .unwrap();
    let value = vec![b'x'; LOOKUP_BATCH_BYTES_MAX as usize];
    let big = build_batch_with_timestamps(&[(None, &value[..], 200)]);
    let mut big = big;
    big[..8].copy_from_slice(&1i64.to_be_bytes());
    log.append_as_follower(&big, 0).unwrap();
    assert_eq!(at(&log, 50, None), Some((0, 100, Some(0))));
    let err = log.offset_for_timestamp(150, None, &Reversing).unwrap_err();
    assert!(
        matches!(&err, LogError::InvalidRecord { reason } if reason.contains("more than a lookup reads")),
        "{err}"
    );
}

/// Every record of the log as (offset, timestamp), in offset order.
fn model(batches: &[Vec<i64>]) -> Vec<(i64, i64)> {
    batches
        .iter()
        .flatten()
        .enumerate()
        .map(|(offset, &ts)| (offset as i64, ts))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    // Shows: over many segments with a sparse time index, compressed and plain batches mixed,
    // every lookup equals a scan of every record (the first with offset >= log start, below
    // the high watermark, timestamp >= target), also after a reopen that rebuilds nothing and
    // an unclean one that rebuilds the indexes; MAX_TIMESTAMP is the first record with the
    // largest timestamp.
    #[test]
    fn lookups_match_a_scan_of_every_record(
        batches in prop::collection::vec(prop::collection::vec(0i64..1_000, 1..6), 1..40),
        compress in prop::collection::vec(any::<bool>(), 40),
        start in 0usize..20,
        hw_back in 0i64..5,
        targets in prop::collection::vec(-1i64..1_100, 1..30),
    ) {
        let storage = MemStorage::new();
        let mut log = open_log(&storage, config(), true, 0);
        for (i, timestamps) in batches.iter().enumerate() {
            let plain = batch(timestamps);
            let bytes = if compress[i] { compressed(&plain) } else { plain };
            log.append_as_leader(&bytes, LeaderEpoch(i as i32), 0).unwrap();
        }
        let records = model(&batches);
        let start = Offset((start as i64).min(records.len() as i64));
        log.increment_log_start_offset(start).unwrap();
        let hw = Offset((records.len() as i64 - hw_back).max(0));
        let check = |log: &Log| {
            for &target in &targets {
                let expected = records
                    .iter()
                    .find(|&&(o, ts)| o >= start.0 && ts >= target)
                    .filter(|&&(o, _)| o < hw.0)
                    .map(|&(o, ts)| (o, ts));
                let got = at(log, target, Some(hw)).map(|(o, ts, _)| (o, ts));
                prop_assert_eq!(got, expected, "target {}", target);
            }
            // MAX_TIMESTAMP: the first record carrying the largest timestamp among the
            // segments not wholly below the log start offset (Kafka's rule over its segments).
            let bases = log.segment_base_offsets();
            let leo = log.log_end_offset();
            let live = |offset: i64| {
                bases.iter().enumerate().any(|(i, base)| {
                    let end = bases.get(i + 1).copied().unwrap_or(leo);
                    end > start && base.0 <= offset && offset < end.0
                })
            };
            let candidates: Vec<_> = records.iter().filter(|r| live(r.0)).collect();
            let expected_max = candidates
                .iter()
                .map(|r| r.1)
                .max()
                .and_then(|m| candidates.iter().find(|r| r.1 == m).map(|r| (r.0, r.1)));
            let got_max = log
                .offset_of_max_timestamp(&Reversing)
                .unwrap()
                .map(|r| (r.offset.0, r.timestamp));
            prop_assert_eq!(got_max, expected_max);
            Ok(())
        };
        check(&log)?;
        log.close(0).unwrap();
        let mut reopened = open_log(&storage, config(), true, 0);
        reopened.increment_log_start_offset(start).unwrap();
        check(&reopened)?;
        drop(reopened);
        let mut recovered = open_log(&storage, config(), false, 0);
        recovered.increment_log_start_offset(start).unwrap();
        check(&recovered)?;
    }
}
