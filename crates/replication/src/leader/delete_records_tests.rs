//! DeleteRecords on the leader (`delete_records.rs`): each test calls one method and asserts the
//! new state and the exact commands. Kafka's sources: `Partition.deleteRecordsOnLeader`,
//! `Partition.lowWatermarkIfLeader`, `DelayedDeleteRecords`, and `PartitionTest
//! .testLowWatermark` / `ReplicaManagerTest` for the rules.

use super::tests::{b, broker_epoch, epochs, fetch, leader, EPOCH};
use super::*;

fn deleted(request: u64, result: Result<i64, ErrorCode>) -> Command {
    Command::CompleteDeleteRecords {
        request: RequestId(request),
        result: result.map(Offset),
    }
}

/// A follower fetch at `offset` reporting log start offset `start`.
fn fetch_with_start(broker: i32, offset: i64, start: Option<i64>) -> FollowerFetch {
    FollowerFetch {
        log_start_offset: start.map(Offset),
        ..fetch(broker, offset)
    }
}

/// Leader 0 of [0, 1, 2], ISR all, log [0, 10) with the high watermark at 10 and both followers
/// caught up, having reported log start offset 0.
fn caught_up() -> LeaderPartition {
    let mut l = leader(&[0, 1, 2], 2, 10, 10);
    for follower in [1, 2] {
        let out = l.on_follower_fetch(&fetch_with_start(follower, 10, Some(0)), &epochs(), 1);
        assert!(matches!(out.answer, FetchAnswer::Records { .. }));
    }
    l
}

#[test]
fn offset_checks_in_kafkas_order() {
    // Partition.deleteRecordsOnLeader: -1 is the high watermark; UnifiedLog
    // .maybeIncrementLogStartOffset refuses a negative offset or one past the high watermark.
    let l = caught_up();
    let rows: &[(&str, DeleteRecordsOffset, Result<i64, ErrorCode>)] = &[
        (
            "-1 is the high watermark",
            DeleteRecordsOffset::from_wire(-1),
            Ok(10),
        ),
        (
            "an offset below the high watermark",
            DeleteRecordsOffset::from_wire(4),
            Ok(4),
        ),
        (
            "the high watermark itself",
            DeleteRecordsOffset::from_wire(10),
            Ok(10),
        ),
        ("zero", DeleteRecordsOffset::from_wire(0), Ok(0)),
        (
            "past the high watermark",
            DeleteRecordsOffset::from_wire(11),
            Err(ErrorCode::OffsetOutOfRange),
        ),
        (
            "negative but not -1",
            DeleteRecordsOffset::from_wire(-2),
            Err(ErrorCode::OffsetOutOfRange),
        ),
        (
            "i64::MIN",
            DeleteRecordsOffset::from_wire(i64::MIN),
            Err(ErrorCode::OffsetOutOfRange),
        ),
    ];
    for (name, requested, expected) in rows {
        assert_eq!(
            l.delete_records_offset(*requested),
            expected.map(Offset),
            "{name}"
        );
    }
    // A leader whose high watermark lags its log end offset: the records above it stay.
    let l = leader(&[0, 1], 1, 10, 6);
    assert_eq!(
        l.delete_records_offset(DeleteRecordsOffset::HighWatermark),
        Ok(Offset(6))
    );
    assert_eq!(
        l.delete_records_offset(DeleteRecordsOffset::Offset(7)),
        Err(ErrorCode::OffsetOutOfRange)
    );
}

#[test]
fn low_watermark_is_the_smallest_log_start_of_the_leader_and_every_live_follower() {
    // Partition.lowWatermarkIfLeader: the leader's log start offset and every remote replica's
    // on a live (unfenced) broker, in the ISR or not; a replica that has not fetched in this
    // leadership (UnknownOffset, -1) keeps it unknown.
    let mut l = leader(&[0], 1, 10, 10);
    assert_eq!(l.low_watermark(), None, "neither follower reported");
    l.on_follower_fetch(&fetch_with_start(1, 4, Some(3)), &epochs(), 1);
    assert_eq!(l.low_watermark(), None, "follower 2 has not reported");
    l.on_follower_fetch(&fetch_with_start(2, 10, Some(5)), &epochs(), 2);
    assert_eq!(l.low_watermark(), Some(Offset(0)), "the leader's own start");
    assert_eq!(l.on_log_start_offset(Offset(6)), Ok(vec![]));
    assert_eq!(
        l.low_watermark(),
        Some(Offset(3)),
        "followers outside the ISR count"
    );
    let fenced = BrokerRegistration {
        fenced: true,
        ..BrokerRegistration::live(broker_epoch(1))
    };
    l.on_broker_registration(b(1), Some(fenced), 3);
    assert_eq!(
        l.low_watermark(),
        Some(Offset(5)),
        "a fenced broker does not count"
    );
    l.on_broker_registration(b(2), None, 4);
    assert_eq!(
        l.low_watermark(),
        Some(Offset(6)),
        "an unregistered broker does not count"
    );
    // A follower that does not report its log start offset (-1) holds it unknown.
    l.on_broker_registration(b(2), Some(BrokerRegistration::live(broker_epoch(2))), 5);
    l.on_follower_fetch(&fetch_with_start(2, 10, None), &epochs(), 6);
    assert_eq!(l.low_watermark(), None);
}

#[test]
fn a_deletion_waits_until_every_live_follower_reports_the_new_start() {
    // DelayedDeleteRecords: answered once the low watermark reaches the requested offset, with
    // the low watermark; each follower fetch re-checks it.
    let mut l = caught_up();
    let offset = l
        .delete_records_offset(DeleteRecordsOffset::Offset(7))
        .unwrap();
    assert_eq!(l.on_log_start_offset(offset), Ok(vec![]));
    assert_eq!(l.log_start_offset(), Offset(7));
    assert_eq!(
        l.await_delete_records(RequestId(1), offset, 30_000, 5),
        Ok(vec![Command::ScheduleTick { at_ms: 30_005 }])
    );
    assert_eq!(l.waiting_deletes().collect::<Vec<_>>(), vec![RequestId(1)]);
    // The leader tells follower 1 its log start offset; it moves and reports it.
    let out = l.on_follower_fetch(&fetch_with_start(1, 10, Some(0)), &epochs(), 6);
    assert_eq!(
        out.answer,
        FetchAnswer::Records {
            high_watermark: Offset(10),
            log_start_offset: Some(Offset(7)),
        }
    );
    assert_eq!(out.commands, vec![]);
    let out = l.on_follower_fetch(&fetch_with_start(1, 10, Some(7)), &epochs(), 7);
    assert_eq!(out.commands, vec![], "follower 2 still reports 0");
    let out = l.on_follower_fetch(&fetch_with_start(2, 10, Some(8)), &epochs(), 8);
    assert_eq!(out.commands, vec![deleted(1, Ok(7))]);
    assert_eq!(l.waiting_deletes().count(), 0);
    l.check_invariants();
}

#[test]
fn a_deletion_the_low_watermark_covers_is_answered_at_once() {
    // ReplicaManager.delayedDeleteRecordsRequired: no delay when the low watermark is there.
    let mut l = caught_up();
    l.on_follower_fetch(&fetch_with_start(1, 10, Some(9)), &epochs(), 2);
    l.on_follower_fetch(&fetch_with_start(2, 10, Some(8)), &epochs(), 2);
    l.on_log_start_offset(Offset(9)).unwrap();
    assert_eq!(
        l.await_delete_records(RequestId(4), Offset(8), 30_000, 3),
        Ok(vec![deleted(4, Ok(8))])
    );
    // A single replica (RF 1): the leader's own log start is the low watermark.
    let mut alone = LeaderPartition::new(
        LeaderInit {
            metadata: PartitionMetadata {
                replicas: vec![b(0)],
                isr: [b(0)].into(),
                ..super::tests::init(&[0], 1, 10, 10).metadata
            },
            ..super::tests::init(&[0], 1, 10, 10)
        },
        0,
    )
    .unwrap();
    alone.on_log_start_offset(Offset(10)).unwrap();
    assert_eq!(
        alone.await_delete_records(RequestId(5), Offset(10), 30_000, 3),
        Ok(vec![deleted(5, Ok(10))])
    );
}

#[test]
fn fencing_or_removing_the_lagging_follower_completes_the_deletion() {
    // Only live replicas count (hasAliveBroker): once the stopped follower's broker is fenced
    // the deletion completes without it — at once, not at the next fetch (Keel re-checks on
    // every event that can raise the low watermark). A replica reassigned away counts no more.
    for removal in ["fenced", "unregistered", "reassigned"] {
        let mut l = caught_up();
        l.on_log_start_offset(Offset(5)).unwrap();
        l.await_delete_records(RequestId(2), Offset(5), 30_000, 5)
            .unwrap();
        l.on_follower_fetch(&fetch_with_start(1, 10, Some(5)), &epochs(), 6);
        let commands = match removal {
            "fenced" => {
                let fenced = BrokerRegistration {
                    fenced: true,
                    ..BrokerRegistration::live(broker_epoch(2))
                };
                l.on_broker_registration(b(2), Some(fenced), 7)
            }
            "unregistered" => l.on_broker_registration(b(2), None, 7),
            _ => l.on_partition_metadata(
                &PartitionMetadata {
                    leader: Some(b(0)),
                    leader_epoch: EPOCH,
                    partition_epoch: PartitionEpoch(11),
                    replicas: vec![b(0), b(1)],
                    isr: [b(0), b(1)].into(),
                },
                7,
            ),
        };
        assert_eq!(commands, vec![deleted(2, Ok(5))], "{removal}");
    }
}

#[test]
fn a_restarted_follower_must_report_its_log_start_again() {
    // A registration newer than the one the follower fetched with: the leader forgets what it
    // knew of that replica's log (KAFKA-14139's rule, applied to the log start offset too).
    let mut l = caught_up();
    l.on_follower_fetch(&fetch_with_start(1, 10, Some(6)), &epochs(), 2);
    l.on_follower_fetch(&fetch_with_start(2, 10, Some(6)), &epochs(), 2);
    assert_eq!(l.low_watermark(), Some(Offset(0)), "the leader's own start");
    l.on_log_start_offset(Offset(6)).unwrap();
    assert_eq!(l.low_watermark(), Some(Offset(6)));
    l.on_broker_registration(b(1), Some(BrokerRegistration::live(BrokerEpoch(500))), 3);
    assert_eq!(l.low_watermark(), None);
    assert_eq!(
        l.await_delete_records(RequestId(3), Offset(6), 30_000, 4),
        Ok(vec![Command::ScheduleTick { at_ms: 30_004 }])
    );
    let restarted = FollowerFetch {
        broker_epoch: BrokerEpoch(500),
        ..fetch_with_start(1, 10, Some(6))
    };
    let out = l.on_follower_fetch(&restarted, &epochs(), 5);
    assert_eq!(out.commands, vec![deleted(3, Ok(6))]);
}

#[test]
fn a_deletion_times_out_or_ends_with_the_leadership() {
    // DelayedDeleteRecords: a partition still pending at expiry is REQUEST_TIMED_OUT; a
    // leadership that ends answers NOT_LEADER_OR_FOLLOWER (the partition is no longer led here).
    let mut l = caught_up();
    l.on_log_start_offset(Offset(3)).unwrap();
    l.await_delete_records(RequestId(1), Offset(3), 1_000, 10)
        .unwrap();
    l.await_delete_records(RequestId(2), Offset(3), 5_000, 10)
        .unwrap();
    assert_eq!(l.tick(1_009), vec![]);
    assert_eq!(
        l.tick(1_010),
        vec![deleted(1, Err(ErrorCode::RequestTimedOut))]
    );
    let commands = l.on_partition_metadata(
        &PartitionMetadata {
            leader: Some(b(1)),
            leader_epoch: LeaderEpoch(6),
            partition_epoch: PartitionEpoch(11),
            replicas: vec![b(0), b(1), b(2)],
            isr: [b(1), b(2)].into(),
        },
        1_100,
    );
    assert_eq!(
        commands,
        vec![
            deleted(2, Err(ErrorCode::NotLeaderOrFollower)),
            Command::LeadershipEnded {
                leader: Some(b(1)),
                leader_epoch: LeaderEpoch(6)
            }
        ]
    );
    assert_eq!(
        l.delete_records_offset(DeleteRecordsOffset::Offset(1)),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        l.await_delete_records(RequestId(3), Offset(3), 1_000, 1_200),
        Ok(vec![deleted(3, Err(ErrorCode::NotLeaderOrFollower))])
    );
}

#[test]
fn the_leaders_log_start_never_moves_back_or_past_the_high_watermark() {
    // Kafka's invariant logStartOffset <= highWatermark; retention reporting an older start
    // after a deletion moved it further changes nothing.
    let mut l = caught_up();
    l.on_log_start_offset(Offset(8)).unwrap();
    l.on_log_start_offset(Offset(3)).unwrap();
    assert_eq!(l.log_start_offset(), Offset(8));
    assert!(l.on_log_start_offset(Offset(11)).is_err());
    assert_eq!(l.log_start_offset(), Offset(8));
    // The shell must report the new start before waiting on it.
    assert!(l
        .await_delete_records(RequestId(9), Offset(9), 1_000, 0)
        .is_err());
    let mut bad = super::tests::init(&[0, 1, 2], 2, 10, 4);
    bad.log_start_offset = Offset(5);
    assert!(LeaderPartition::new(bad, 0).is_err());
}
