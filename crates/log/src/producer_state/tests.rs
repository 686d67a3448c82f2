use super::*;
use crate::batch::BatchHeader;
use crate::plain_batch::{build_batch, set_producer};

/// The header of a `records`-record batch of producer `id` at `epoch`, first sequence `seq`,
/// placed at `base` in the log.
fn header(id: i64, epoch: i16, seq: i32, records: usize, base: i64) -> BatchHeader {
    let values: Vec<Vec<u8>> = (0..records).map(|i| vec![i as u8]).collect();
    let refs: Vec<(Option<&[u8]>, &[u8])> = values.iter().map(|v| (None, v.as_slice())).collect();
    let mut batch = build_batch(&refs, 1_000 + base);
    set_producer(&mut batch, id, epoch, seq);
    crate::batch::set_base_offset(&mut batch, Offset(base));
    BatchHeader::parse(&batch).unwrap()
}

fn append(states: &mut ProducerStates, h: &BatchHeader) -> Result<SequenceCheck, LogError> {
    let check = states.check(h)?;
    if check == SequenceCheck::Append {
        states.record(h);
    }
    Ok(check)
}

#[test]
fn sequences_follow_on_and_duplicates_answer_with_their_first_offsets() {
    let mut s = ProducerStates::new();
    assert_eq!(
        append(&mut s, &header(7, 0, 0, 3, 0)).unwrap(),
        SequenceCheck::Append
    );
    assert_eq!(
        append(&mut s, &header(7, 0, 3, 2, 3)).unwrap(),
        SequenceCheck::Append
    );
    // the retry of the first batch, whatever offset the retry would have got
    match s.check(&header(7, 0, 0, 3, 99)).unwrap() {
        SequenceCheck::Duplicate(b) => {
            assert_eq!((b.first_offset(), b.last_offset), (Offset(0), Offset(2)));
        }
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // a gap, and a batch that overlaps without matching exactly
    assert!(matches!(
        s.check(&header(7, 0, 6, 1, 5)),
        Err(LogError::OutOfOrderSequence {
            expected: 5,
            found: 6,
            ..
        })
    ));
    assert!(matches!(
        s.check(&header(7, 0, 1, 1, 5)),
        Err(LogError::OutOfOrderSequence { .. })
    ));
    assert_eq!(s.get(7).unwrap().last_sequence(), Some(4));
}

#[test]
fn epochs_fence_older_ones_and_a_new_epoch_starts_at_zero() {
    let mut s = ProducerStates::new();
    append(&mut s, &header(7, 3, 0, 1, 0)).unwrap();
    assert!(matches!(
        s.check(&header(7, 2, 1, 1, 1)),
        Err(LogError::InvalidProducerEpoch {
            epoch: 2,
            current: 3,
            ..
        })
    ));
    assert!(matches!(
        s.check(&header(7, 4, 5, 1, 1)),
        Err(LogError::OutOfOrderSequence { expected: 0, .. })
    ));
    append(&mut s, &header(7, 4, 0, 1, 1)).unwrap();
    assert_eq!(s.get(7).unwrap().epoch, 4);
    assert_eq!(s.get(7).unwrap().batches.len(), 1);
}

#[test]
fn an_unknown_producer_may_start_anywhere_and_plain_batches_are_not_tracked() {
    let mut s = ProducerStates::new();
    assert_eq!(
        append(&mut s, &header(9, 0, 1234, 1, 0)).unwrap(),
        SequenceCheck::Append
    );
    let plain = header(-1, -1, -1, 4, 1);
    assert_eq!(append(&mut s, &plain).unwrap(), SequenceCheck::Append);
    assert_eq!(s.producers().len(), 1);
}

#[test]
fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
    let mut s = ProducerStates::new();
    for i in 0..7 {
        append(&mut s, &header(1, 0, i, 1, i64::from(i))).unwrap();
    }
    let entry = s.get(1).unwrap();
    assert_eq!(entry.batches.len(), BATCHES_KEPT);
    assert_eq!(entry.batches.front().unwrap().first_sequence, 2);
    // the oldest batch is forgotten: its retry is out of order, not a duplicate
    assert!(s.check(&header(1, 0, 0, 1, 9)).is_err());

    assert_eq!(last_sequence_of(i32::MAX - 1, 3), 1);
    let mut w = ProducerStates::new();
    append(&mut w, &header(2, 0, i32::MAX - 1, 2, 0)).unwrap();
    assert_eq!(
        append(&mut w, &header(2, 0, 0, 1, 2)).unwrap(),
        SequenceCheck::Append
    );
}

#[test]
fn control_batches_and_transactions_without_producer_are_refused() {
    let s = ProducerStates::new();
    let mut h = header(1, 0, 0, 1, 0);
    h.attributes |= TRANSACTIONAL_ATTRIBUTE;
    assert_eq!(s.check(&h).unwrap(), SequenceCheck::Append);
    h.attributes = CONTROL_ATTRIBUTE;
    assert!(matches!(s.check(&h), Err(LogError::InvalidRecord { .. })));
    let mut anonymous = header(-1, -1, -1, 1, 0);
    anonymous.attributes |= TRANSACTIONAL_ATTRIBUTE;
    assert!(matches!(
        s.check(&anonymous),
        Err(LogError::InvalidRecord { .. })
    ));
}

/// Version 1 snapshots (before transactions): one producer, id 3, epoch 2, timestamp 9,
/// one batch of sequences 0..=4 ending at offset 4.
#[test]
fn version_1_snapshots_still_load() {
    let mut body = Vec::new();
    body.extend_from_slice(&1u32.to_be_bytes());
    body.extend_from_slice(&3i64.to_be_bytes());
    body.extend_from_slice(&2i16.to_be_bytes());
    body.extend_from_slice(&9i64.to_be_bytes());
    body.push(1);
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&4i32.to_be_bytes());
    body.extend_from_slice(&4i64.to_be_bytes());
    body.extend_from_slice(&4i32.to_be_bytes());
    let mut bytes = 1u16.to_be_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    bytes.extend_from_slice(&body);
    let s = ProducerStates::decode(&bytes).unwrap();
    let entry = s.get(3).unwrap();
    assert_eq!((entry.epoch, entry.last_sequence()), (2, Some(4)));
    assert_eq!(entry.coordinator_epoch, NO_COORDINATOR_EPOCH);
    assert_eq!(entry.current_txn_first_offset, None);
    assert_eq!(s.first_unstable_offset(Offset(0)), None);
}

#[test]
fn open_transactions_round_trip_through_snapshots() {
    let mut s = ProducerStates::new();
    let mut h = header(8, 0, 0, 2, 10);
    h.attributes |= TRANSACTIONAL_ATTRIBUTE;
    append(&mut s, &h).unwrap();
    append(&mut s, &header(9, 0, 0, 1, 12)).unwrap();
    assert_eq!(s.first_unstable_offset(Offset(0)), Some(Offset(10)));
    let decoded = ProducerStates::decode(&s.encode()).unwrap();
    assert_eq!(decoded, s);
    assert_eq!(decoded.first_unstable_offset(Offset(0)), Some(Offset(10)));
}

#[test]
fn expiration_forgets_idle_producers() {
    let mut s = ProducerStates::new();
    append(&mut s, &header(1, 0, 0, 1, 0)).unwrap(); // timestamp 1_000
    append(&mut s, &header(2, 0, 0, 1, 50_000)).unwrap(); // timestamp 51_000
    assert_eq!(s.remove_expired(60_000, 30_000), 1);
    assert!(s.get(1).is_none() && s.get(2).is_some());
}

#[test]
fn snapshots_round_trip_and_reject_damage() {
    let mut s = ProducerStates::new();
    for i in 0..3 {
        append(&mut s, &header(5, 1, i * 2, 2, i64::from(i) * 2)).unwrap();
    }
    append(&mut s, &header(6, 0, 0, 1, 6)).unwrap();
    let bytes = s.encode();
    assert_eq!(ProducerStates::decode(&bytes).unwrap(), s);
    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    assert!(ProducerStates::decode(&damaged)
        .unwrap_err()
        .contains("crc"));
    assert!(ProducerStates::decode(&bytes[..bytes.len() - 3]).is_err());
    assert_eq!(
        ProducerStates::decode(&ProducerStates::new().encode()).unwrap(),
        ProducerStates::new()
    );
}
