//! Tests of batch parsing, validation and rewriting.

use super::*;
use crate::plain_batch::{build_batch, build_batch_with_timestamps, decode_records};

fn sample() -> Vec<u8> {
    build_batch(&[(Some(b"k1"), b"v1"), (None, b"value-two")], 1_000)
}

/// Recomputes the CRC after a test edits a CRC-covered field.
fn fix_crc(batch: &mut [u8]) {
    let crc = compute_crc(batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

// A producer-built batch parses with the header fields it was built with.
#[test]
fn parses_a_built_batch() {
    let batch = sample();
    let views = parse_batches(&batch).unwrap();
    assert_eq!(views.len(), 1);
    let h = views[0].header;
    assert_eq!(h.base_offset, Offset(0));
    assert_eq!(h.magic, MAGIC_V2);
    assert_eq!(h.last_offset_delta, 1);
    assert_eq!(h.records_count, 2);
    assert_eq!(h.base_timestamp, 1_000);
    assert_eq!(h.max_timestamp, 1_000);
    assert_eq!(h.leader_epoch(), None);
    assert_eq!(h.size_bytes(), Some(batch.len()));
    assert_eq!(h.timestamp_type(), crate::config::TimestampType::CreateTime);
    let records = decode_records(&batch).unwrap();
    assert_eq!(records[0].key.as_deref(), Some(&b"k1"[..]));
    assert_eq!(records[1].value, b"value-two");
    assert_eq!(records[1].offset, 1);
}

// Several batches back to back parse in order with their positions; an empty buffer has none.
#[test]
fn parses_consecutive_batches() {
    let a = sample();
    let b = build_batch(&[(None, b"x")], 5);
    let buf = [a.clone(), b.clone()].concat();
    let views = parse_batches(&buf).unwrap();
    assert_eq!(views.len(), 2);
    assert_eq!(views[1].position, a.len());
    assert_eq!(views[1].bytes, &b[..]);
    assert!(parse_batches(&[]).unwrap().is_empty());
}

// Every kind of damage is a typed error naming the batch position, never a panic.
#[test]
fn rejects_each_kind_of_damage() {
    let good = sample();
    let at = good.len();
    let two = |second: Vec<u8>| [good.clone(), second].concat();

    let cut = two(good[..good.len() - 1].to_vec());
    assert!(matches!(
        parse_batches(&cut),
        Err(BatchError::Truncated { position, .. }) if position == at
    ));
    assert!(matches!(
        parse_batches(&two(good[..5].to_vec())),
        Err(BatchError::Truncated { .. })
    ));

    let mut short = good.clone();
    short[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&10i32.to_be_bytes());
    assert!(matches!(
        parse_batches(&short),
        Err(BatchError::LengthTooSmall {
            batch_length: 10,
            ..
        })
    ));
    let mut negative = good.clone();
    negative[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(matches!(
        parse_batches(&negative),
        Err(BatchError::LengthTooSmall { .. })
    ));

    let mut magic = good.clone();
    magic[MAGIC_POS] = 1;
    assert!(matches!(
        parse_batches(&magic),
        Err(BatchError::UnsupportedMagic { magic: 1, .. })
    ));

    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x01;
    assert!(matches!(
        parse_batches(&flipped),
        Err(BatchError::CrcMismatch { .. })
    ));

    let mut count = good.clone();
    count[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&(-1i32).to_be_bytes());
    fix_crc(&mut count);
    assert!(matches!(
        parse_batches(&count),
        Err(BatchError::NegativeRecordsCount { count: -1, .. })
    ));

    let mut delta = good.clone();
    delta[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&(-2i32).to_be_bytes());
    fix_crc(&mut delta);
    assert!(matches!(
        parse_batches(&delta),
        Err(BatchError::NegativeLastOffsetDelta { delta: -2, .. })
    ));
}

// The CRC does not cover baseOffset or partitionLeaderEpoch, so stamping them keeps it valid.
#[test]
fn offset_and_epoch_rewrites_keep_crc_valid() {
    let mut batch = sample();
    set_base_offset(&mut batch, Offset(1234));
    set_partition_leader_epoch(&mut batch, LeaderEpoch(7));
    let view = parse_batch_at(&batch, 0).unwrap();
    assert_eq!(view.header.base_offset, Offset(1234));
    assert_eq!(view.header.last_offset(), Offset(1235));
    assert_eq!(view.header.leader_epoch(), Some(LeaderEpoch(7)));
}

// LogAppendTime sets attribute bit 3 and maxTimestamp and recomputes the CRC (checked on read).
#[test]
fn log_append_time_rewrite_recomputes_crc() {
    let mut batch = build_batch_with_timestamps(&[(None, b"a", 10), (None, b"b", 30)]);
    assert_eq!(parse_batch_at(&batch, 0).unwrap().header.max_timestamp, 30);
    set_log_append_time(&mut batch, 99_999);
    let header = parse_batch_at(&batch, 0).unwrap().header;
    assert_eq!(header.max_timestamp, 99_999);
    assert_eq!(
        header.timestamp_type(),
        crate::config::TimestampType::LogAppendTime
    );
    assert_eq!(
        header.attributes & TIMESTAMP_TYPE_ATTRIBUTE,
        TIMESTAMP_TYPE_ATTRIBUTE
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    // Arbitrary bytes, or a valid batch with one byte changed, never panic the parser.
    #[test]
    fn parser_never_panics(
        garbage in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        flip in 0usize..200,
        value in proptest::num::u8::ANY,
    ) {
        let _ = parse_batches(&garbage);
        let mut batch = sample();
        let i = flip % batch.len();
        batch[i] = value;
        let _ = parse_batches(&batch);
        let _ = decode_records(&batch);
        let _ = BatchIter::new(&garbage).count();
    }
}
