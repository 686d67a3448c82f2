//! Transactions in the log: markers, the first unstable offset, the aborted-transaction index
//! and its files through close, crash, damage, truncation, retention and replication.

use super::tests::{open_log, DIR};
use super::*;
use crate::batch::TRANSACTIONAL_ATTRIBUTE;
use crate::plain_batch::{build_batch, set_producer};
use crate::storage::{MemStorage, Storage};
use crate::txn::{ControlType, EndTxnMarker, TXN_INDEX_FILE_SUFFIX};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 64,
        retention_ms: None,
        ..LogConfig::default()
    }
}

/// A transactional batch of `count` records of producer `pid` (epoch 0) from sequence `seq`.
fn txn_batch(pid: i64, seq: i32, count: usize) -> Vec<u8> {
    let value = [b'v'; 20];
    let recs: Vec<(Option<&[u8]>, &[u8])> = (0..count).map(|_| (None, &value[..])).collect();
    let mut batch = build_batch(&recs, 1_000);
    let attributes = TRANSACTIONAL_ATTRIBUTE.to_be_bytes();
    batch[21..23].copy_from_slice(&attributes);
    set_producer(&mut batch, pid, 0, seq);
    batch
}

fn idempotent_batch(pid: i64, seq: i32) -> Vec<u8> {
    let mut batch = build_batch(&[(None, b"plain")], 1_000);
    set_producer(&mut batch, pid, 0, seq);
    batch
}

fn marker(kind: ControlType, coordinator_epoch: i32) -> EndTxnMarker {
    EndTxnMarker {
        kind,
        coordinator_epoch,
    }
}

fn end(log: &mut Log, pid: i64, kind: ControlType) -> Offset {
    log.append_marker_as_leader(pid, 0, marker(kind, 0), LeaderEpoch(0), 2_000)
        .unwrap()
        .first_offset
}

fn append(log: &mut Log, batch: &[u8]) -> AppendInfo {
    log.append_as_leader(batch, LeaderEpoch(0), 1_000).unwrap()
}

fn txn_index_files(storage: &MemStorage) -> Vec<String> {
    let mut names: Vec<String> = storage
        .list_dir(Path::new(DIR))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.ends_with(TXN_INDEX_FILE_SUFFIX))
        .collect();
    names.sort();
    names
}

// An open transaction holds the last stable offset at its first record; the commit marker
// releases it only once the high watermark passes the marker; a producer with an open
// transaction may not write outside it.
#[test]
fn open_transactions_bound_the_last_stable_offset() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &build_batch(&[(None, b"a")], 1_000)); // 0
    append(&mut log, &txn_batch(7, 0, 2)); // 1..=2
    append(&mut log, &txn_batch(7, 2, 1)); // 3
    assert_eq!(log.first_unstable_offset(Offset(4)), Some(Offset(1)));
    assert_eq!(log.last_stable_offset(Offset(4)), Offset(1));
    assert_eq!(log.last_stable_offset(Offset(0)), Offset(0));
    assert!(matches!(
        log.append_as_leader(&idempotent_batch(7, 3), LeaderEpoch(0), 1_000),
        Err(LogError::InvalidTxnState {
            producer_id: 7,
            first_offset: Offset(1)
        })
    ));
    let commit = end(&mut log, 7, ControlType::Commit);
    assert_eq!(commit, Offset(4));
    // Decided, but the marker is not replicated yet.
    assert_eq!(log.first_unstable_offset(Offset(4)), Some(Offset(1)));
    log.on_high_watermark(Offset(4));
    assert_eq!(log.first_unstable_offset(Offset(4)), Some(Offset(1)));
    assert_eq!(log.first_unstable_offset(Offset(5)), None);
    log.on_high_watermark(Offset(5));
    assert_eq!(
        log.first_unstable_offset(Offset(4)),
        None,
        "forgotten once stable"
    );
    assert_eq!(log.last_stable_offset(Offset(5)), Offset(5));
    assert!(log.aborted_transactions(Offset(0), Offset(5)).is_empty());
    // The next idempotent write is fine again.
    append(&mut log, &idempotent_batch(7, 3));
}

// Aborted transactions are indexed with the last stable offset at their marker, and a fetch
// range learns exactly those overlapping it.
#[test]
fn aborted_transactions_are_found_by_range() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(1, 0, 1)); // 0: producer 1
    append(&mut log, &txn_batch(2, 0, 1)); // 1: producer 2
    let abort1 = end(&mut log, 1, ControlType::Abort); // 2
    append(&mut log, &txn_batch(2, 1, 1)); // 3
    let abort2 = end(&mut log, 2, ControlType::Abort); // 4
    append(&mut log, &txn_batch(1, 1, 1)); // 5: producer 1 again
    let commit1 = end(&mut log, 1, ControlType::Commit); // 6
    assert_eq!((abort1, abort2, commit1), (Offset(2), Offset(4), Offset(6)));
    let all = log.aborted_transactions(Offset(0), Offset(7));
    let summary: Vec<_> = all
        .iter()
        .map(|a| {
            (
                a.producer_id,
                a.first_offset.0,
                a.last_offset.0,
                a.last_stable_offset.0,
            )
        })
        .collect();
    // Producer 2's transaction was still open at offset 1 when producer 1 aborted.
    assert_eq!(summary, vec![(1, 0, 2, 1), (2, 1, 4, 5)]);
    // A fetch from offset 3 still needs producer 2's (its marker is at 4), not producer 1's.
    let from3: Vec<_> = log
        .aborted_transactions(Offset(3), Offset(7))
        .iter()
        .map(|a| a.producer_id)
        .collect();
    assert_eq!(from3, vec![2]);
    // A fetch ending before producer 2's first record does not.
    let upto1: Vec<_> = log
        .aborted_transactions(Offset(0), Offset(1))
        .iter()
        .map(|a| a.producer_id)
        .collect();
    assert_eq!(upto1, vec![1]);
}

// Markers from an older producer epoch or an older coordinator are fenced.
#[test]
fn stale_markers_are_fenced() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(9, 0, 1));
    log.append_marker_as_leader(9, 1, marker(ControlType::Abort, 5), LeaderEpoch(0), 0)
        .unwrap();
    assert!(matches!(
        log.append_marker_as_leader(9, 0, marker(ControlType::Commit, 5), LeaderEpoch(0), 0),
        Err(LogError::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        log.append_marker_as_leader(9, 1, marker(ControlType::Commit, 4), LeaderEpoch(0), 0),
        Err(LogError::TransactionCoordinatorFenced {
            coordinator_epoch: 4,
            current: 5,
            ..
        })
    ));
    // The marker bumped the producer to epoch 1: its next transaction starts there at 0.
    let mut next = txn_batch(9, 0, 1);
    set_producer(&mut next, 9, 1, 0);
    append(&mut log, &next);
    assert_eq!(log.producer_states().get(9).unwrap().epoch, 1);
    // Clients cannot write markers themselves.
    let forged = marker(ControlType::Commit, 9).to_batch(9, 1, 0);
    assert!(matches!(
        log.append_as_leader(&forged, LeaderEpoch(0), 0),
        Err(LogError::InvalidRecord { .. })
    ));
}

/// A log with aborted transactions spread over several segments and one left open.
fn busy_log(storage: &MemStorage) -> Log {
    let mut log = open_log(storage, config(), true, 0);
    let mut seqs = [0i32; 4];
    for round in 0..6 {
        for pid in 1..=3i64 {
            append(&mut log, &txn_batch(pid, seqs[pid as usize], 2));
            seqs[pid as usize] += 2;
        }
        for pid in 1..=3i64 {
            let kind = if (round + pid) % 2 == 0 {
                ControlType::Abort
            } else {
                ControlType::Commit
            };
            end(&mut log, pid, kind);
        }
    }
    append(&mut log, &txn_batch(3, seqs[3], 1));
    assert!(log.segment_count() >= 3, "spread over segments");
    log
}

fn index_state(log: &Log) -> (Vec<AbortedTxn>, Option<Offset>) {
    (
        log.aborted_transactions(Offset(0), log.log_end_offset()),
        log.producer_states().first_undecided_offset(),
    )
}

// The index and the open transaction survive a clean close, a crash, a damaged index file and
// a deleted one, each rebuilt or loaded to the same state.
#[test]
fn the_index_survives_close_crash_and_damage() {
    let storage = MemStorage::new();
    let mut log = busy_log(&storage);
    let expected = index_state(&log);
    assert_eq!(expected.0.len(), 9);
    assert!(expected.1.is_some());
    log.close(3_000).unwrap();
    assert!(!txn_index_files(&storage).is_empty());
    let log = open_log(&storage, config(), true, 4_000);
    assert_eq!(index_state(&log), expected);
    drop(log);

    // Unflushed data lost: whatever survives is consistent with itself.
    let storage2 = MemStorage::new();
    let mut log = busy_log(&storage2);
    log.flush(3_000).unwrap();
    let expected2 = index_state(&log);
    drop(log);
    storage2.crash();
    let log = open_log(&storage2, config(), false, 4_000);
    assert_eq!(index_state(&log), expected2);
    drop(log);

    // A damaged file is rebuilt from the log, and rewritten.
    let first = txn_index_files(&storage)[0].clone();
    let path = Path::new(DIR).join(&first);
    crate::storage::write_file_atomically(&storage, &path, b"not an index").unwrap();
    let log = open_log(&storage, config(), true, 5_000);
    assert_eq!(index_state(&log), expected);
    assert!(log
        .recovery_report()
        .problems
        .iter()
        .any(|p| p.contains("txnindex")));
    drop(log);
    let bytes = crate::storage::read_file_if_exists(&storage, &path)
        .unwrap()
        .unwrap();
    assert!(AbortedTxn::decode_all(&bytes).is_ok());
}

// Truncating below a marker reopens its transaction and drops its index entry; retention
// drops the entries and files of deleted segments.
#[test]
fn truncation_and_retention_keep_the_index_in_step() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(4, 0, 1)); // 0
    let abort = end(&mut log, 4, ControlType::Abort); // 1
    assert_eq!(log.aborted_transactions(Offset(0), Offset(2)).len(), 1);
    log.truncate_to(abort, 3_000).unwrap();
    assert!(log.aborted_transactions(Offset(0), Offset(2)).is_empty());
    assert_eq!(log.first_unstable_offset(Offset(1)), Some(Offset(0)));
    end(&mut log, 4, ControlType::Abort);
    log.close(3_000).unwrap();
    let mut log = open_log(&storage, config(), true, 4_000);
    assert_eq!(log.aborted_transactions(Offset(0), Offset(2)).len(), 1);
    // Fill and roll past the first segment, then delete it.
    let mut seq = 1;
    while log.segment_count() < 3 {
        append(&mut log, &idempotent_batch(4, seq));
        seq += 1;
    }
    log.roll().unwrap();
    log.increment_log_start_offset(log.log_end_offset())
        .unwrap();
    log.apply_retention(5_000, log.log_end_offset()).unwrap();
    assert!(log
        .aborted_transactions(Offset(0), log.log_end_offset())
        .is_empty());
    assert!(txn_index_files(&storage).is_empty());
}

// A follower fed the leader's batches (markers included) builds the same state.
#[test]
fn followers_build_the_same_index() {
    let leader_storage = MemStorage::new();
    let leader = busy_log(&leader_storage);
    let storage = MemStorage::new();
    let mut follower = open_log(&storage, config(), true, 0);
    while follower.log_end_offset() < leader.log_end_offset() {
        let data = leader
            .read(follower.log_end_offset(), usize::MAX, None, true)
            .unwrap()
            .records;
        follower.append_as_follower(&data, 1_000).unwrap();
    }
    assert_eq!(index_state(&follower), index_state(&leader));
    assert_eq!(follower.producer_states(), leader.producer_states());
}

// An open transaction blocks expiration of its producer; the snapshot keeps it open.
#[test]
fn open_transactions_survive_snapshots_and_expiry() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(5, 0, 1));
    assert_eq!(log.remove_expired_producers(i64::MAX / 2, 1), 0);
    log.close(1_000).unwrap();
    let log = open_log(&storage, config(), true, 2_000);
    assert_eq!(log.first_unstable_offset(Offset(1)), Some(Offset(0)));
    let entry = log.producer_states().get(5).unwrap();
    assert_eq!(entry.current_txn_first_offset, Some(Offset(0)));
}

// A transaction held in doubt (a leader an unclean recovery elected) keeps its producer's
// batches out, transactional or not, so nothing joins it; a later transaction's marker (two
// epochs up) appends nothing and is answered at once; its own marker (one epoch up, as a v2
// coordinator bumps it) ends it and lets the producer write again. Marks are per producer.
#[test]
fn an_in_doubt_transaction_admits_only_its_own_marker() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(7, 0, 2)); // 0..=1, epoch 0
    append(&mut log, &txn_batch(8, 0, 1)); // 2
    assert!(log.transactions_in_doubt().is_empty());
    let marked = log.mark_transactions_in_doubt();
    assert_eq!(marked, vec![(7, 0, Offset(0)), (8, 0, Offset(2))]);
    assert_eq!(log.transactions_in_doubt(), marked);

    let mut later = txn_batch(7, 0, 1);
    set_producer(&mut later, 7, 2, 0);
    for batch in [txn_batch(7, 2, 1), later, idempotent_batch(7, 2)] {
        assert!(matches!(
            log.append_as_leader(&batch, LeaderEpoch(0), 1_000),
            Err(LogError::InvalidTxnState {
                producer_id: 7,
                first_offset: Offset(0)
            })
        ));
    }
    assert_eq!(log.log_end_offset(), Offset(3), "nothing appended");

    let skipped = log
        .append_marker_as_leader(7, 2, marker(ControlType::Abort, 1), LeaderEpoch(0), 0)
        .unwrap();
    assert!(skipped.duplicate);
    assert_eq!(
        skipped.last_offset,
        Offset(2),
        "answered once the current end is committed"
    );
    assert_eq!(log.log_end_offset(), Offset(3));
    assert_eq!(log.last_stable_offset(Offset(3)), Offset(0), "still open");

    let commit = log
        .append_marker_as_leader(7, 1, marker(ControlType::Commit, 1), LeaderEpoch(0), 0)
        .unwrap();
    assert_eq!(commit.first_offset, Offset(3));
    assert_eq!(log.transactions_in_doubt(), vec![(8, 0, Offset(2))]);
    assert!(log.aborted_transactions(Offset(0), Offset(4)).is_empty());
    let mut next = txn_batch(7, 0, 1);
    set_producer(&mut next, 7, 1, 0);
    append(&mut log, &next);

    // Settled as live: the producer's batches are taken again.
    log.clear_transaction_in_doubt(8);
    append(&mut log, &txn_batch(8, 1, 1));
    assert!(log.transactions_in_doubt().is_empty());
}

// The in-doubt mark is per producer and epoch, and goes with the transaction's end.
#[test]
fn in_doubt_is_asked_by_producer_and_epoch() {
    let storage = MemStorage::new();
    let mut log = open_log(&storage, config(), true, 0);
    append(&mut log, &txn_batch(7, 0, 1));
    assert!(!log.transaction_in_doubt_at(7, 0));
    log.mark_transactions_in_doubt();
    assert!(log.transaction_in_doubt_at(7, 0));
    assert!(!log.transaction_in_doubt_at(7, 1) && !log.transaction_in_doubt_at(8, 0));
    assert_eq!(log.transactions_in_doubt_count(), 1);
    log.append_marker_as_leader(7, 1, marker(ControlType::Abort, 0), LeaderEpoch(0), 0)
        .unwrap();
    assert!(!log.transaction_in_doubt_at(7, 0));
    assert_eq!(log.transactions_in_doubt_count(), 0);
}
