use super::*;

fn tps(names: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    names.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

fn no_alloc() -> Result<i64, ResponseError> {
    panic!("no producer id should be allocated")
}

/// Prepares and completes an InitProducerId; returns (producer id, epoch).
fn init(m: &mut TxnMetadata, expected: Option<(i64, i16)>) -> (i64, i16) {
    let mut next = 9_000;
    let mut alloc = || {
        next += 1;
        Ok(next)
    };
    match m.init_producer_id(60_000, expected, 1, &mut alloc).unwrap() {
        InitStep::Write(t) => {
            m.complete(&t);
            (t.value.producer_id, t.value.producer_epoch)
        }
        other => panic!("expected a write, got {other:?}"),
    }
}

fn add(m: &mut TxnMetadata, parts: &[(&str, i32)]) {
    let (pid, epoch) = (m.producer_id, m.producer_epoch);
    if let Some(t) = m.add_partitions(pid, epoch, &tps(parts), 10).unwrap() {
        m.complete(&t);
    }
}

/// EndTxn and, if it wrote, the markers' completion; returns the answer's producer id/epoch.
fn end(
    m: &mut TxnMetadata,
    epoch: i16,
    commit: bool,
    tv: i16,
) -> Result<(i64, i16), ResponseError> {
    let pid = m.producer_id;
    match m.end_txn(pid, epoch, commit, tv, 20, &mut || Ok(7_777))? {
        EndStep::Done {
            producer_id,
            producer_epoch,
        } => Ok((producer_id, producer_epoch)),
        EndStep::Write(t) => {
            m.complete(&t);
            let answer = (m.producer_id, m.producer_epoch);
            let done = m.prepare_complete(30);
            m.complete(&done);
            Ok(answer)
        }
    }
}

#[test]
fn a_v1_transaction_commits_and_retries_are_answered() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    assert_eq!(init(&mut m, None), (100, 0));
    assert_eq!(init(&mut m, None), (100, 1), "each init bumps the epoch");
    add(&mut m, &[("t", 0), ("t", 1)]);
    assert_eq!(m.state, TxnState::Ongoing);
    assert_eq!(m.start_ms, 10);
    // Adding a partition already in it writes nothing.
    assert_eq!(m.add_partitions(100, 1, &tps(&[("t", 0)]), 11), Ok(None));
    assert_eq!(
        m.add_partitions(100, 0, &tps(&[("t", 2)]), 11),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        m.add_partitions(101, 1, &tps(&[("t", 2)]), 11),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        m.verify(100, 1, &[("t".into(), 0), ("u".into(), 0)]),
        Ok(vec![None, Some(ResponseError::TransactionAbortable)])
    );
    assert_eq!(end(&mut m, 1, true, 1), Ok((100, 1)));
    assert_eq!(m.state, TxnState::CompleteCommit);
    assert!(m.partitions.is_empty());
    // A retried commit is answered; an abort now is a state error.
    assert_eq!(end(&mut m, 1, true, 1), Ok((100, 1)));
    assert_eq!(
        end(&mut m, 1, false, 1),
        Err(ResponseError::InvalidTxnState)
    );
    // An EndTxn with nothing added is a state error too.
    assert_eq!(init(&mut m, None), (100, 2));
    assert_eq!(end(&mut m, 2, true, 1), Err(ResponseError::InvalidTxnState));
}

#[test]
fn v2_bumps_the_epoch_at_every_end() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    add(&mut m, &[("t", 0)]);
    assert_eq!(end(&mut m, 0, false, 2), Ok((100, 1)));
    assert_eq!(m.state, TxnState::CompleteAbort);
    // The retry with the old epoch is answered with the bumped one.
    assert_eq!(end(&mut m, 0, false, 2), Ok((100, 1)));
    add(&mut m, &[("t", 0)]);
    assert_eq!(end(&mut m, 1, true, 2), Ok((100, 2)));
    // A stale producer (epoch 0) is fenced.
    add(&mut m, &[("t", 0)]);
    assert_eq!(end(&mut m, 0, true, 2), Err(ResponseError::ProducerFenced));
}

#[test]
fn v2_rotates_the_producer_id_when_the_epoch_runs_out() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    m.producer_epoch = i16::MAX - 1;
    add(&mut m, &[("t", 0)]);
    let pid = m.producer_id;
    let step = m
        .end_txn(pid, i16::MAX - 1, true, 2, 20, &mut || Ok(555))
        .unwrap();
    let EndStep::Write(t) = step else {
        panic!("expected a write")
    };
    assert_eq!(t.value.next_producer_id, 555);
    m.complete(&t);
    let done = m.prepare_complete(30);
    m.complete(&done);
    assert_eq!((m.producer_id, m.producer_epoch), (555, 0));
    assert_eq!(m.previous_producer_id, 100);
    // The retry from the exhausted epoch of the old id is still answered.
    let retry = m
        .end_txn(100, i16::MAX - 1, true, 2, 40, &mut no_alloc)
        .unwrap();
    assert_eq!(
        retry,
        EndStep::Done {
            producer_id: 555,
            producer_epoch: 0
        }
    );
}

#[test]
fn init_while_ongoing_aborts_first_and_fences_the_old_producer() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    add(&mut m, &[("t", 0)]);
    let step = m.init_producer_id(60_000, None, 5, &mut no_alloc).unwrap();
    let InitStep::AbortFirst(fence) = step else {
        panic!("expected an abort first")
    };
    assert_eq!(fence.value.state, TxnState::PrepareAbort);
    assert_eq!(fence.value.producer_epoch, 1);
    assert_eq!(fence.value.partitions, vec![("t".to_string(), vec![0])]);
    // The write fails: the bump stays, and the next fence does not bump again.
    m.cancel(&fence);
    assert_eq!(m.producer_epoch, 1);
    assert_eq!(m.state, TxnState::Ongoing);
    assert_eq!(
        m.add_partitions(100, 0, &tps(&[("t", 1)]), 6),
        Err(ResponseError::ProducerFenced),
        "the old producer is fenced even though the write failed"
    );
    let again = m.prepare_fence_abort(7);
    assert_eq!(again.value.producer_epoch, 1);
    m.complete(&again);
    assert_eq!(m.state, TxnState::PrepareAbort);
    assert_eq!(
        m.init_producer_id(60_000, None, 8, &mut no_alloc),
        Err(ResponseError::ConcurrentTransactions)
    );
    let done = m.prepare_complete(9);
    m.complete(&done);
    assert_eq!(m.state, TxnState::CompleteAbort);
    assert_eq!(init(&mut m, None), (100, 2));
}

#[test]
fn exhausted_epochs_rotate_at_init_and_lost_answers_are_retried() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    m.producer_epoch = i16::MAX - 1;
    let (pid, epoch) = init(&mut m, Some((100, i16::MAX - 1)));
    assert_eq!((pid, epoch), (9_001, 0));
    // KIP-360: the producer did not get that answer and asks again with its old id/epoch.
    assert_eq!(init(&mut m, Some((100, i16::MAX - 1))), (9_001, 0));
    // A producer from an unrelated id is fenced.
    assert_eq!(
        m.init_producer_id(60_000, Some((42, 3)), 1, &mut no_alloc),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn a_transition_in_flight_blocks_others() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    let t = m
        .add_partitions(100, 0, &tps(&[("t", 0)]), 1)
        .unwrap()
        .unwrap();
    assert_eq!(
        m.add_partitions(100, 0, &tps(&[("t", 1)]), 1),
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(
        m.end_txn(100, 0, true, 1, 1, &mut no_alloc),
        Err(ResponseError::ConcurrentTransactions)
    );
    m.cancel(&t);
    assert_eq!(m.state, TxnState::Empty);
    assert!(!m.timed_out(i64::MAX));
    add(&mut m, &[("t", 0)]);
    assert!(!m.timed_out(60_010));
    assert!(m.timed_out(60_011));
}

#[test]
fn values_round_trip_through_metadata() {
    let mut m = TxnMetadata::new("tx", 100, 60_000, 0);
    init(&mut m, None);
    add(&mut m, &[("b", 1), ("a", 2), ("a", 0)]);
    let value = m.to_value();
    assert_eq!(
        value.partitions,
        vec![("a".to_string(), vec![0, 2]), ("b".to_string(), vec![1])]
    );
    let back = TxnMetadata::from_value("tx", &value);
    assert_eq!(back.to_value(), value);
}
