//! Tests of log compaction ([`Log::compact`] and its three steps) against a model: the latest
//! record of every key survives with its offset, nothing else changes order or content,
//! tombstones leave after `delete.retention.ms`, crashes at any step lose nothing, and followers
//! copy a compacted log with its gaps.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::{open_log as open, DIR};
use super::*;
use crate::batch::parse_batches;
use crate::config::CleanupPolicy;
use crate::plain_batch::{build_keyed_batch, decode_records, set_producer};
use crate::storage::{MemStorage, Storage};

const BUDGET: usize = 1 << 20;

fn compacted_config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 64,
        retention_ms: Some(1),
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 1_000,
        min_cleanable_dirty_ratio: 0.0,
        ..LogConfig::default()
    }
}

/// (offset, key, value; `None` = tombstone) of every record readable from the log start.
type Entry = (i64, Vec<u8>, Option<Vec<u8>>);

fn read_entries(log: &Log) -> Vec<Entry> {
    let data = log
        .read(log.log_start_offset(), usize::MAX, None, true)
        .unwrap();
    let mut out = Vec::new();
    for view in parse_batches(&data.records).unwrap() {
        for r in decode_records(view.bytes).expect("uncompressed batch") {
            let value = (!r.value_is_null).then_some(r.value);
            out.push((r.offset, r.key.unwrap_or_default(), value));
        }
    }
    out
}

fn put(log: &mut Log, records: &[(&str, Option<&str>)], now_ms: i64) {
    let recs: Vec<_> = records
        .iter()
        .map(|(k, v)| (Some(k.as_bytes()), v.map(str::as_bytes), now_ms))
        .collect();
    log.append_as_leader(&build_keyed_batch(&recs), LeaderEpoch(0), now_ms)
        .unwrap();
}

fn compact(log: &mut Log, now_ms: i64) -> Option<CompactionStats> {
    let end = log.log_end_offset();
    log.compact(now_ms, end, BUDGET, &NoCodecs).unwrap()
}

/// What a compacted log may hold: for each key, the latest record at or above `clean_below`
/// survives untouched; below it only each key's latest record, or nothing for an expired
/// tombstone.
fn check_against_model(log: &Log, written: &[Entry], expired_tombstones: bool) {
    let entries = read_entries(log);
    let by_offset: BTreeMap<i64, &Entry> = written.iter().map(|e| (e.0, e)).collect();
    let mut latest: BTreeMap<&[u8], i64> = BTreeMap::new();
    for (offset, key, _) in written {
        latest.insert(key, *offset);
    }
    let mut previous = -1;
    for entry in &entries {
        assert!(entry.0 > previous, "offsets increase");
        previous = entry.0;
        assert_eq!(
            Some(&entry),
            by_offset.get(&entry.0),
            "a record the log was given"
        );
    }
    let present: BTreeMap<i64, &Entry> = entries.iter().map(|e| (e.0, e)).collect();
    for (key, offset) in &latest {
        let tombstone = by_offset[offset].2.is_none();
        if !(tombstone && expired_tombstones) {
            assert!(
                present.contains_key(offset),
                "latest record of {key:?} at {offset} survives"
            );
        }
    }
    let cleaner_offset = log.cleaner_offset().0;
    for (offset, entry) in by_offset.range(cleaner_offset..) {
        assert!(present.contains_key(offset), "dirty record {entry:?} kept");
    }
    let mut latest_clean: BTreeMap<&[u8], i64> = BTreeMap::new();
    for (offset, key, _) in written.iter().filter(|e| e.0 < cleaner_offset) {
        latest_clean.insert(key, *offset);
    }
    for entry in entries.iter().filter(|e| e.0 < cleaner_offset) {
        assert_eq!(
            latest_clean[&entry.1[..]],
            entry.0,
            "superseded {entry:?} removed"
        );
    }
    log.check_invariants();
}

// Shows: only the latest value of each key survives below the cleaner offset; offsets and
// values are the ones written; segments stay contiguous (the last batch of a segment stays);
// every offset stays readable; a second pass with nothing dirty does nothing.
#[test]
fn keeps_the_latest_record_of_each_key() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let mut written = Vec::new();
    for round in 0..40 {
        let key = format!("k{}", round % 5);
        let value = format!("v{round}");
        put(&mut log, &[(&key, Some(&value))], 0);
        written.push((round, key.into_bytes(), Some(value.into_bytes())));
    }
    log.roll().unwrap();
    let before = log.size_bytes();
    let stats = compact(&mut log, 10).expect("dirty log is compacted");
    assert_eq!(stats.cleaner_offset, Offset(40));
    assert!(stats.records_removed >= 30, "{stats:?}");
    assert!(log.size_bytes() < before, "{} < {before}", log.size_bytes());
    check_against_model(&log, &written, false);
    for key in 0..5 {
        let survivors: Vec<_> = read_entries(&log)
            .into_iter()
            .filter(|e| e.1 == format!("k{key}").into_bytes())
            .collect();
        assert_eq!(survivors.len(), 1, "{survivors:?}");
        assert_eq!(survivors[0].0, 35 + key);
    }
    for offset in 0..40 {
        let data = log.read(Offset(offset), 1, None, true).unwrap();
        assert!(data.last_offset.unwrap() >= Offset(offset));
    }
    assert_eq!(compact(&mut log, 20), None, "nothing dirty");
}

// Shows: a tombstone stays for delete.retention.ms after the cleaner first keeps it, then a
// pass with nothing dirty removes it (and the value it deleted is gone from the start).
#[test]
fn tombstones_expire_after_delete_retention() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    put(&mut log, &[("a", Some("1")), ("b", Some("2"))], 0);
    put(&mut log, &[("a", None)], 0);
    log.roll().unwrap();
    let stats = compact(&mut log, 100).unwrap();
    assert_eq!(stats.delete_horizon_ms, Some(1_100));
    let entries = read_entries(&log);
    assert_eq!(
        entries,
        vec![
            (1, b"b".to_vec(), Some(b"2".to_vec())),
            (2, b"a".to_vec(), None)
        ]
    );
    assert_eq!(compact(&mut log, 1_099), None, "horizon not reached");
    let stats = compact(&mut log, 1_100).expect("the passed horizon makes the log cleanable");
    assert_eq!(stats.tombstones_removed, 1);
    let entries = read_entries(&log);
    assert_eq!(entries, vec![(1, b"b".to_vec(), Some(b"2".to_vec()))]);
    // The emptied batch stays (the segment's last), so the offsets remain contiguous.
    assert_eq!(log.log_end_offset(), Offset(3));
    log.check_invariants();
}

// Shows: the record timestamps of a batch that gets a delete horizon are unchanged for readers.
#[test]
fn delete_horizon_keeps_record_timestamps() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let batch = build_keyed_batch(&[(Some(b"x"), Some(b"1"), 500), (Some(b"y"), None, 700)]);
    log.append_as_leader(&batch, LeaderEpoch(0), 800).unwrap();
    log.roll().unwrap();
    compact(&mut log, 900).unwrap();
    let data = log.read(Offset(0), usize::MAX, None, true).unwrap();
    let view = &parse_batches(&data.records).unwrap()[0];
    assert_ne!(
        view.header.attributes & crate::batch::DELETE_HORIZON_ATTRIBUTE,
        0
    );
    assert_eq!(view.header.base_timestamp, 1_900);
    let timestamps: Vec<_> = decode_records(view.bytes)
        .unwrap()
        .iter()
        .map(|r| r.timestamp)
        .collect();
    assert_eq!(timestamps, [500, 700]);
}

// Shows: nothing at or above the high watermark, in the active segment, or younger than
// min.compaction.lag.ms is cleaned; the dirty ratio gates cleaning.
#[test]
fn cleans_only_what_is_eligible() {
    let storage = MemStorage::new();
    let config = LogConfig {
        min_compaction_lag_ms: 1_000,
        ..compacted_config()
    };
    let mut log = open(&storage, config, true, 0);
    for round in 0..20 {
        put(&mut log, &[("k", Some(&format!("v{round}")))], 0);
    }
    log.roll().unwrap();
    assert!(log
        .compact(500, log.log_end_offset(), BUDGET, &NoCodecs)
        .unwrap()
        .is_none());
    assert!(
        log.compact(2_000, Offset(0), BUDGET, &NoCodecs)
            .unwrap()
            .is_none(),
        "HW 0"
    );
    let stats = log
        .compact(2_000, Offset(20), BUDGET, &NoCodecs)
        .unwrap()
        .unwrap();
    assert_eq!(stats.cleaner_offset, Offset(20));

    let mut config = compacted_config();
    config.min_cleanable_dirty_ratio = 0.9;
    log.set_config(config).unwrap();
    put(&mut log, &[("k", Some("new"))], 2_000);
    log.roll().unwrap();
    assert!(compact(&mut log, 3_000).is_none(), "dirty share below 0.9");
}

// Shows: a crash after the cleaned files are written but before the swap loses nothing and the
// leftovers go; a crash after the swap keeps the compacted log; missing index files are rebuilt.
#[test]
fn crashes_around_the_swap_lose_nothing() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let mut written = Vec::new();
    for round in 0..30 {
        let key = format!("k{}", round % 3);
        put(&mut log, &[(&key, Some("v"))], 0);
        written.push((round, key.into_bytes(), Some(b"v".to_vec())));
    }
    log.roll().unwrap();
    log.flush(0).unwrap();
    let before = read_entries(&log);
    let plan = log.plan_compaction(10, Offset(30), BUDGET).unwrap();
    let _output = plan.run(&NoCodecs).unwrap();
    drop(log);
    storage.crash();
    let log = open(&storage, compacted_config(), false, 20);
    assert_eq!(read_entries(&log), before);
    let names: Vec<String> = storage
        .list_dir(Path::new(DIR))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        !names.iter().any(|n| n.ends_with(CLEANED_FILE_SUFFIX)),
        "{names:?}"
    );
    drop(log);

    let mut log = open(&storage, compacted_config(), true, 30);
    compact(&mut log, 40).unwrap();
    let after = read_entries(&log);
    drop(log);
    storage.crash();
    let log = open(&storage, compacted_config(), false, 50);
    assert_eq!(read_entries(&log), after);
    check_against_model(&log, &written, false);
    drop(log);

    // The swap deletes the indexes first: a segment without them is rebuilt on a clean open.
    let first = crate::segment::segment_file_name(Offset(0), crate::segment::INDEX_FILE_SUFFIX);
    storage.remove_file(&Path::new(DIR).join(first)).unwrap();
    let log = open(&storage, compacted_config(), true, 60);
    assert_eq!(read_entries(&log), after);
    assert_eq!(
        log.recovery_report().segments_recovered,
        log.segment_count()
    );
}

// Shows: a follower fetching a compacted leader log accepts its gaps and ends up with the same
// records; truncating into a gap keeps everything below the cut.
#[test]
fn followers_copy_gaps_and_truncation_handles_them() {
    let storage = MemStorage::new();
    let mut leader = open(&storage, compacted_config(), true, 0);
    for round in 0..30 {
        let key = match round {
            5 => "a",
            17 => "b",
            _ => "k",
        };
        put(&mut leader, &[(key, Some("v"))], 0);
    }
    leader.roll().unwrap();
    compact(&mut leader, 10).unwrap();
    let follower_storage = MemStorage::new();
    let mut follower = open(&follower_storage, compacted_config(), true, 0);
    while follower.log_end_offset() < leader.log_end_offset() {
        let data = leader
            .read(follower.log_end_offset(), 200, None, true)
            .unwrap();
        follower.append_as_follower(&data.records, 0).unwrap();
    }
    assert_eq!(read_entries(&follower), read_entries(&leader));
    follower.check_invariants();

    let entries = read_entries(&leader);
    let gap = entries
        .windows(2)
        .find(|w| w[1].0 > w[0].0 + 1)
        .map(|w| w[0].0 + 1)
        .expect("compaction left a gap");
    leader.truncate_to(Offset(gap), 20).unwrap();
    assert!(leader.log_end_offset() <= Offset(gap));
    let kept: Vec<_> = entries.into_iter().filter(|e| e.0 < gap).collect();
    assert_eq!(read_entries(&leader), kept);
    leader.check_invariants();
}

// Shows: an idempotent producer's last batch survives as an empty batch, so its sequence state
// is rebuilt on reload; keyless records are dropped.
#[test]
fn keeps_a_producers_last_batch() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let mut batch = build_keyed_batch(&[(Some(b"k"), Some(b"1"), 0), (None, Some(b"x"), 0)]);
    set_producer(&mut batch, 7, 0, 0);
    log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    put(&mut log, &[("k", Some("2"))], 0);
    log.roll().unwrap();
    compact(&mut log, 10).unwrap();
    let data = log.read(Offset(0), usize::MAX, None, true).unwrap();
    let views = parse_batches(&data.records).unwrap();
    assert_eq!(views[0].header.producer_id, 7);
    assert_eq!(views[0].header.records_count, 0);
    assert_eq!(views[0].header.last_offset_delta, 1);
    assert_eq!(
        read_entries(&log),
        vec![(2, b"k".to_vec(), Some(b"2".to_vec()))]
    );
    drop(log);
    // Remove the snapshots so the state is rebuilt from the batches.
    for entry in storage.list_dir(Path::new(DIR)).unwrap() {
        if entry
            .name
            .ends_with(crate::producer_state::PRODUCER_SNAPSHOT_SUFFIX)
        {
            storage
                .remove_file(&Path::new(DIR).join(&entry.name))
                .unwrap();
        }
    }
    let log = open(&storage, compacted_config(), false, 20);
    let entry = log
        .producer_states()
        .get(7)
        .expect("producer 7 survives compaction");
    assert_eq!(entry.last_sequence(), Some(1));
}

// Shows: delete retention applies only with the delete policy.
#[test]
fn compact_only_topics_are_not_deleted_by_age() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    put(&mut log, &[("a", Some("1"))], 0);
    log.roll().unwrap();
    let result = log
        .apply_retention(1_000_000, log.log_end_offset())
        .unwrap();
    assert!(result.deleted.is_empty());
    let mut config = compacted_config();
    config.cleanup_policy.delete = true;
    log.set_config(config).unwrap();
    let result = log
        .apply_retention(1_000_000, log.log_end_offset())
        .unwrap();
    assert_eq!(result.deleted.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    // Shows: any interleaving of keyed writes (tombstones included), rolls, compactions at
    // varying high watermarks and times, crashes and reopens keeps the model's promise.
    #[test]
    fn compaction_matches_the_model(
        ops in proptest::collection::vec((0u8..6, 0u8..6, any::<bool>(), 1usize..4), 1..60)
    ) {
        let storage = MemStorage::new();
        let mut log = open(&storage, compacted_config(), true, 0);
        let mut written: Vec<Entry> = Vec::new();
        let mut now = 0i64;
        let mut expired = false;
        for (op, key, tombstone, count) in ops {
            now += 100;
            match op {
                0..=2 => {
                    let mut recs = Vec::new();
                    for i in 0..count {
                        let key = format!("k{}", (usize::from(key) + i) % 6);
                        let value = (!tombstone || i > 0).then(|| format!("v{}", written.len()));
                        recs.push((key, value));
                    }
                    let borrowed: Vec<(&str, Option<&str>)> =
                        recs.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
                    let base = log.log_end_offset().0;
                    put(&mut log, &borrowed, now);
                    for (i, (k, v)) in recs.into_iter().enumerate() {
                        written.push((base + i as i64, k.into_bytes(), v.map(String::into_bytes)));
                    }
                }
                3 => { log.roll().unwrap(); }
                4 => {
                    let hw = Offset(log.log_end_offset().0 * i64::from(key) / 5);
                    log.flush(now).unwrap();
                    if let Some(stats) = log.compact(now, hw, BUDGET, &NoCodecs).unwrap() {
                        expired |= stats.tombstones_removed > 0;
                    }
                }
                _ => {
                    log.flush(now).unwrap();
                    drop(log);
                    storage.crash();
                    log = open(&storage, compacted_config(), tombstone, now);
                }
            }
            check_against_model(&log, &written, expired);
        }
    }
}

// Shows: a pass whose log was truncated between planning and the swap changes nothing (its
// cleaned files are removed), even if the log grows back to the same segment sizes.
#[test]
fn a_pass_planned_before_a_truncation_is_dropped() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    for round in 0..30 {
        put(&mut log, &[(&format!("k{}", round % 3), Some("v"))], 0);
    }
    log.roll().unwrap();
    let before = read_entries(&log);
    let output = log
        .plan_compaction(10, Offset(30), BUDGET)
        .unwrap()
        .run(&NoCodecs)
        .unwrap();
    log.truncate_to(Offset(29), 20).unwrap();
    put(&mut log, &[("k2", Some("v"))], 0);
    log.roll().unwrap();
    let stats = log.finish_compaction(output, 30).unwrap();
    assert!(stats.aborted);
    assert_eq!(read_entries(&log), before);
    let leftovers: Vec<String> = storage
        .list_dir(Path::new(DIR))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.ends_with(CLEANED_FILE_SUFFIX))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A stand-in codec for tests: codec 1 stores the records section reversed; codec 2 cannot
/// compress.
struct Reversing;

impl RecordCodecs for Reversing {
    fn decompress(&self, _: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        Ok(data.iter().rev().copied().collect())
    }

    fn compress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String> {
        match codec {
            1 => Ok(data.iter().rev().copied().collect()),
            _ => Err("this codec cannot compress".to_string()),
        }
    }
}

/// `records` as one batch "compressed" with `codec` of [`Reversing`].
fn compressed_batch(records: &[(&str, Option<&str>)], codec: i16) -> Vec<u8> {
    use crate::batch::{compute_crc, ATTRIBUTES_POS, CRC_POS, HEADER_SIZE, LENGTH_POS};
    let recs: Vec<_> = records
        .iter()
        .map(|(k, v)| (Some(k.as_bytes()), v.map(str::as_bytes), 0))
        .collect();
    let plain = build_keyed_batch(&recs);
    let mut batch = plain[..HEADER_SIZE].to_vec();
    batch.extend(plain[HEADER_SIZE..].iter().rev());
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&codec.to_be_bytes());
    let length = (batch.len() - 12) as i32;
    batch[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

// Shows: compressed batches are decompressed, filtered and recompressed with their codec (an
// emptied one loses its codec bits); a batch whose codec cannot compress is kept whole.
#[test]
fn compressed_batches_are_recompressed_or_kept_whole() {
    use crate::batch::COMPRESSION_CODEC_MASK;
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let append = |log: &mut Log, batch: Vec<u8>| {
        log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    };
    append(
        &mut log,
        compressed_batch(&[("a", Some("1")), ("b", Some("1"))], 1),
    );
    append(
        &mut log,
        compressed_batch(&[("c", Some("1")), ("d", Some("1"))], 2),
    );
    append(&mut log, compressed_batch(&[("a", Some("2"))], 1));
    append(
        &mut log,
        compressed_batch(&[("c", Some("2")), ("e", Some("1"))], 1),
    );
    append(
        &mut log,
        compressed_batch(&[("b", Some("2")), ("z", Some("1"))], 1),
    );
    log.roll().unwrap();
    log.compact(10, log.log_end_offset(), BUDGET, &Reversing)
        .unwrap()
        .unwrap();
    let data = log.read(Offset(0), usize::MAX, None, true).unwrap();
    let mut seen = Vec::new();
    for view in parse_batches(&data.records).unwrap() {
        let codec = view.header.attributes & COMPRESSION_CODEC_MASK;
        let mut plain = view.bytes[..crate::batch::HEADER_SIZE].to_vec();
        plain.extend(view.bytes[crate::batch::HEADER_SIZE..].iter().rev());
        plain[21..23].copy_from_slice(&0i16.to_be_bytes());
        let crc = crate::batch::compute_crc(&plain);
        plain[17..21].copy_from_slice(&crc.to_be_bytes());
        let records = decode_records(&plain).expect("a valid batch once reversed");
        let keys: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
            .collect();
        seen.push((view.header.base_offset.0, codec, keys));
    }
    assert_eq!(
        seen,
        vec![
            // a@0 and b@1 are superseded: their emptied batch is dropped (not the segment's
            // last); the codec-2 batch cannot be recompressed, so it stays whole.
            (2, 2, vec!["c".to_string(), "d".to_string()]),
            (4, 1, vec!["a".to_string()]),
            (5, 1, vec!["c".to_string(), "e".to_string()]),
            (7, 1, vec!["b".to_string(), "z".to_string()]),
        ]
    );
}

// Shows: a key map over its memory budget stops the pass at a segment boundary; later passes
// go on from there until the whole log is clean.
#[test]
fn a_full_key_map_splits_the_work_into_passes() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    let mut written = Vec::new();
    for round in 0..60 {
        let key = format!("k{}", round % 7);
        put(&mut log, &[(&key, Some("v"))], 0);
        written.push((round, key.into_bytes(), Some(b"v".to_vec())));
    }
    log.roll().unwrap();
    let end = log.log_end_offset();
    let mut passes = 0;
    while let Some(stats) = log.compact(10, end, 1, &NoCodecs).unwrap() {
        passes += 1;
        assert!(stats.cleaner_offset <= end);
        check_against_model(&log, &written, false);
        assert!(passes < 20, "no progress");
    }
    assert!(passes > 1, "one pass did everything");
    assert_eq!(log.cleaner_offset(), end);
}

// Shows: the emptied batches of a producer the log no longer tracks (expired) are dropped;
// only a tracked producer's newest batch stays empty.
#[test]
fn only_a_tracked_producers_newest_batch_stays_empty() {
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    for (producer, seq) in [(7, 0), (7, 1), (8, 0)] {
        let mut batch = build_keyed_batch(&[(Some(b"k"), Some(b"v"), 0)]);
        set_producer(&mut batch, producer, 0, seq);
        log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
    }
    put(&mut log, &[("k", Some("last")), ("x", Some("1"))], 0);
    log.roll().unwrap();
    assert_eq!(log.remove_expired_producers(1_000_000, 1_000), 2);
    let mut batch = build_keyed_batch(&[(Some(b"y"), Some(b"v"), 2_000_000)]);
    set_producer(&mut batch, 8, 0, 1);
    log.append_as_leader(&batch, LeaderEpoch(0), 2_000_000)
        .unwrap();
    log.compact(2_000_000, Offset(5), BUDGET, &NoCodecs)
        .unwrap();
    let data = log.read(Offset(0), usize::MAX, None, true).unwrap();
    let producers: Vec<i64> = parse_batches(&data.records)
        .unwrap()
        .iter()
        .map(|v| v.header.producer_id)
        .collect();
    // Producers 7 and 8 expired before producer 8 wrote again: none of their old batches stay.
    assert_eq!(producers, vec![-1, 8]);
}

// Shows (issue 20): on a `compact,delete` topic the cleaner never rewrites a segment wholly
// below the log start offset DeleteRecords moved (Kafka's LogCleanerManager.cleanableOffsets
// starts the dirty part at the log start offset), and what it keeps from the start on is the
// latest record of each key among the records still readable.
#[test]
fn the_cleaner_leaves_segments_below_the_log_start_offset_alone() {
    let storage = MemStorage::new();
    let config = LogConfig {
        cleanup_policy: CleanupPolicy {
            delete: true,
            compact: true,
        },
        retention_ms: None,
        ..compacted_config()
    };
    let mut log = open(&storage, config, true, 0);
    let mut written = Vec::new();
    for round in 0..40 {
        let key = format!("k{}", round % 5);
        let value = format!("v{round}");
        put(&mut log, &[(&key, Some(&value))], 0);
        written.push((round, key.into_bytes(), Some(value.into_bytes())));
    }
    log.roll().unwrap();
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 4, "{bases:?}");
    // The start inside the third segment: the first two lie wholly below it.
    let start = Offset(bases[2].0 + 1);
    assert!(log.increment_log_start_offset(start).unwrap());
    let below: Vec<(Offset, Vec<u8>)> = bases[..2]
        .iter()
        .map(|base| {
            let path =
                std::path::Path::new(DIR).join(crate::segment::segment_file_name(*base, ".log"));
            (
                *base,
                crate::storage::read_file_if_exists(&storage, &path)
                    .unwrap()
                    .unwrap(),
            )
        })
        .collect();
    let stats = compact(&mut log, 10).expect("the readable part is dirty");
    assert!(stats.records_removed > 0, "{stats:?}");
    for (base, bytes) in &below {
        let path = std::path::Path::new(DIR).join(crate::segment::segment_file_name(*base, ".log"));
        let now = crate::storage::read_file_if_exists(&storage, &path)
            .unwrap()
            .unwrap();
        assert!(
            &now == bytes,
            "segment {base} below the log start offset was rewritten"
        );
    }
    assert_eq!(log.log_start_offset(), start);
    let readable: Vec<Entry> = written.into_iter().filter(|e| e.0 >= start.0).collect();
    check_against_model(&log, &readable, false);
    // Retention then removes them.
    let end = log.log_end_offset();
    let result = log.delete_segments_below_log_start(end).unwrap();
    assert_eq!(result.deleted.len(), 2);
    assert_eq!(log.segment_base_offsets()[0], bases[2]);
}

/// A transactional batch of producer `pid` (epoch 0, sequence `seq`) with keyed records.
fn txn_put(log: &mut Log, pid: i64, seq: i32, records: &[(&str, Option<&str>)], now_ms: i64) {
    let recs: Vec<_> = records
        .iter()
        .map(|(k, v)| (Some(k.as_bytes()), v.map(str::as_bytes), now_ms))
        .collect();
    let mut batch = build_keyed_batch(&recs);
    crate::plain_batch::set_transactional_producer(&mut batch, pid, 0);
    set_producer(&mut batch, pid, 0, seq);
    log.append_as_leader(&batch, LeaderEpoch(0), now_ms)
        .unwrap();
}

fn end_txn(log: &mut Log, pid: i64, kind: crate::txn::ControlType, now_ms: i64) {
    let marker = crate::txn::EndTxnMarker {
        kind,
        coordinator_epoch: 0,
    };
    log.append_marker_as_leader(pid, 0, marker, LeaderEpoch(0), now_ms)
        .unwrap();
}

/// (offset, key, value) of every data record (markers left out) readable from the log start.
fn data_entries(log: &Log) -> Vec<(i64, String, Option<String>)> {
    let data = log
        .read(log.log_start_offset(), usize::MAX, None, true)
        .unwrap();
    let mut out = Vec::new();
    for view in parse_batches(&data.records).unwrap() {
        if view.header.is_control() {
            continue;
        }
        for r in decode_records(view.bytes).expect("uncompressed batch") {
            let key = String::from_utf8(r.key.unwrap_or_default()).unwrap();
            let value = (!r.value_is_null).then(|| String::from_utf8(r.value).unwrap());
            out.push((r.offset, key, value));
        }
    }
    out
}

// Transactions (issue 23), as Kafka's cleaner treats them: a committed transaction's records
// are compacted like any (they supersede earlier records of their keys); an aborted one's are
// removed and supersede nothing; markers stay; nothing at or past the last stable offset (an
// open transaction's first record) is cleaned. The log reopens to the same state.
#[test]
fn transactions_are_compacted_by_their_outcome() {
    use crate::txn::ControlType;
    let storage = MemStorage::new();
    let mut log = open(&storage, compacted_config(), true, 0);
    put(&mut log, &[("a", Some("a1")), ("b", Some("b1"))], 1_000); // 0, 1
    txn_put(&mut log, 7, 0, &[("a", Some("a-committed"))], 1_000); // 2
    end_txn(&mut log, 7, ControlType::Commit, 1_000); // 3
    txn_put(&mut log, 8, 0, &[("b", Some("b-aborted"))], 1_000); // 4
    txn_put(&mut log, 8, 1, &[("z", Some("z-aborted"))], 1_000); // 5
    end_txn(&mut log, 8, ControlType::Abort, 1_000); // 6
    for i in 0..30 {
        put(&mut log, &[("c", Some(&format!("c{i}")))], 1_000); // 7..=36
    }
    txn_put(&mut log, 9, 0, &[("c", Some("c-open"))], 1_000); // 37
    for i in 0..30 {
        put(&mut log, &[("d", Some(&format!("d{i}")))], 1_000); // 38..=67
    }
    assert!(log.segments.len() > 4, "the test needs closed segments");
    let hw = log.log_end_offset();
    assert_eq!(log.last_stable_offset(hw), Offset(37));
    let stats = compact(&mut log, 2_000).expect("a pass ran");
    assert_eq!(stats.aborted_records_removed, 2);

    let entries = data_entries(&log);
    let find = |value: &str| entries.iter().find(|e| e.2.as_deref() == Some(value));
    assert!(
        find("a1").is_none(),
        "superseded by the committed record: {entries:?}"
    );
    assert_eq!(find("a-committed").map(|e| e.0), Some(2));
    assert_eq!(
        find("b1").map(|e| e.0),
        Some(1),
        "an aborted record supersedes nothing"
    );
    assert!(find("b-aborted").is_none() && find("z-aborted").is_none());
    // Below the last stable offset, only the latest "c" of the cleaned segments survives; the
    // open transaction and everything after it are untouched.
    let c_below: Vec<_> = entries.iter().filter(|e| e.1 == "c" && e.0 < 37).collect();
    assert!(
        c_below.len() < 30,
        "the c records below the LSO were compacted: {c_below:?}"
    );
    assert_eq!(find("c-open").map(|e| e.0), Some(37));
    assert_eq!(entries.iter().filter(|e| e.1 == "d").count(), 30);
    // The markers are still there, and the aborted transaction is still indexed.
    let markers = parse_batches(&log.read(Offset(0), usize::MAX, None, true).unwrap().records)
        .unwrap()
        .iter()
        .filter(|v| v.header.is_control())
        .count();
    assert_eq!(markers, 2);
    let aborted: Vec<(i64, i64)> = log
        .aborted_transactions(Offset(0), hw)
        .iter()
        .map(|t| (t.producer_id, t.first_offset.0))
        .collect();
    assert_eq!(aborted, [(8, 4)]);

    let before = data_entries(&log);
    log.close(3_000).unwrap();
    let log = open(&storage, compacted_config(), true, 3_000);
    assert_eq!(data_entries(&log), before);
    assert_eq!(log.last_stable_offset(log.log_end_offset()), Offset(37));
}

/// The offsets of the markers readable from the log start.
fn marker_offsets(log: &Log) -> Vec<i64> {
    let data = log
        .read(log.log_start_offset(), usize::MAX, None, true)
        .unwrap();
    parse_batches(&data.records)
        .unwrap()
        .iter()
        .filter(|v| v.header.is_control())
        .map(|v| v.header.base_offset.0)
        .collect()
}

// Markers (issue 23), as Kafka's cleaner removes them: a marker stays while a batch of its
// transaction is left before it; the first pass that finds none stamps it with a delete horizon
// (delete.retention.ms, as for a tombstone) and a pass after the horizon removes it. A
// producer's last entry stays (it holds the producer's epoch). Reads and reloads agree.
#[test]
fn markers_go_once_their_transaction_is_gone_and_delete_retention_passed() {
    use crate::txn::ControlType;
    let storage = MemStorage::new();
    let config = LogConfig {
        delete_retention_ms: 10_000,
        ..compacted_config()
    };
    let mut log = open(&storage, config.clone(), true, 0);
    let fill = |log: &mut Log, key: &str, now_ms: i64| {
        for i in 0..30 {
            put(log, &[(key, Some(&format!("{key}{i}")))], now_ms);
        }
    };
    txn_put(&mut log, 7, 0, &[("a", Some("a-old"))], 1_000); // 0
    end_txn(&mut log, 7, ControlType::Commit, 1_000); // 1
    txn_put(&mut log, 8, 0, &[("b", Some("b-aborted"))], 1_000); // 2
    end_txn(&mut log, 8, ControlType::Abort, 1_000); // 3
    txn_put(&mut log, 7, 1, &[("a", Some("a-new"))], 1_000); // 4: supersedes a-old
    end_txn(&mut log, 7, ControlType::Commit, 1_000); // 5: producer 7's last entry
    put(&mut log, &[("z", Some("z"))], 1_000); // 6: the last batch of the first segment
    txn_put(&mut log, 8, 1, &[("c", Some("c8"))], 1_000); // 7
                                                          // 8: producer 8's last entry, at the bumped epoch a transactions-v2 coordinator writes
                                                          // (the producer state then has no data batch of it to keep).
    let marker = crate::txn::EndTxnMarker {
        kind: ControlType::Commit,
        coordinator_epoch: 0,
    };
    log.append_marker_as_leader(8, 1, marker, LeaderEpoch(0), 1_000)
        .unwrap();
    put(&mut log, &[("c", Some("c-plain"))], 1_000); // 9: supersedes c8
    fill(&mut log, "d", 1_000); // 10..=39
    let segments: Vec<i64> = log.segments.keys().map(|o| o.0).collect();
    assert_eq!(
        segments[..2],
        [0, 7],
        "c8 is not the last batch of its segment"
    );
    assert_eq!(marker_offsets(&log), [1, 3, 5, 8]);

    // Pass 1 removes a-old and the aborted record; their markers saw them go: they stay.
    let stats = compact(&mut log, 2_000).expect("a pass ran");
    assert_eq!(stats.markers_removed, 0);
    assert_eq!(marker_offsets(&log), [1, 3, 5, 8]);
    // Pass 2 finds nothing of those two transactions before their markers: horizon stamped.
    fill(&mut log, "e", 3_000);
    let stats = compact(&mut log, 3_000).expect("a pass ran");
    assert_eq!(stats.markers_removed, 0);
    assert_eq!(stats.delete_horizon_ms, Some(13_000));
    assert_eq!(marker_offsets(&log), [1, 3, 5, 8]);
    // Before the horizon they stay; after it they go. The marker of the committed transaction
    // whose record is still the latest of its key stays, and so does producer 8's last entry
    // although its transaction's record is gone.
    fill(&mut log, "f", 5_000);
    assert_eq!(compact(&mut log, 5_000).map(|s| s.markers_removed), Some(0));
    assert_eq!(marker_offsets(&log), [1, 3, 5, 8]);
    let stats = compact(&mut log, 13_000).expect("the passed horizon runs a pass");
    assert_eq!(stats.markers_removed, 2);
    assert_eq!(marker_offsets(&log), [5, 8]);

    // Still read_committed-consistent: nothing is open, and the data survived a reload.
    let end = log.log_end_offset();
    assert_eq!(log.last_stable_offset(end), end);
    let before = data_entries(&log);
    assert!(before.iter().any(|e| e.2.as_deref() == Some("a-new")));
    assert!(before.iter().any(|e| e.2.as_deref() == Some("c-plain")));
    assert!(!before.iter().any(|e| e.2.as_deref() == Some("c8")));
    log.close(14_000).unwrap();
    let log = open(&storage, config, true, 14_000);
    assert_eq!(data_entries(&log), before);
    assert_eq!(marker_offsets(&log), [5, 8]);
    assert_eq!(
        log.last_stable_offset(log.log_end_offset()),
        log.log_end_offset()
    );
}
