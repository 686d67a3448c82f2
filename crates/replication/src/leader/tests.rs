//! Unit tests: each calls one method and asserts the new state and the exact commands.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::epochs::EpochCache;
use crate::types::EpochEndOffset;

pub(super) const EPOCH: LeaderEpoch = LeaderEpoch(5);
const PARTITION_EPOCH: PartitionEpoch = PartitionEpoch(10);
const LAG_MS: u64 = crate::config::DEFAULT_REPLICA_LAG_TIME_MAX_MS;

pub(super) fn b(id: i32) -> BrokerId {
    BrokerId(id)
}

pub(super) fn broker_epoch(id: i32) -> BrokerEpoch {
    BrokerEpoch(100 + i64::from(id))
}

pub(super) fn set(ids: &[i32]) -> BTreeSet<BrokerId> {
    ids.iter().map(|i| b(*i)).collect()
}

/// Leader 0 of replicas [0, 1, 2] in leader epoch 5 / partition epoch 10, every broker live.
pub(super) fn init(isr: &[i32], min_isr: usize, leo: i64, hwm: i64) -> LeaderInit {
    LeaderInit {
        local: b(0),
        local_broker_epoch: broker_epoch(0),
        metadata: PartitionMetadata {
            leader: Some(b(0)),
            leader_epoch: EPOCH,
            partition_epoch: PARTITION_EPOCH,
            replicas: vec![b(0), b(1), b(2)],
            isr: set(isr),
        },
        log_start_offset: Offset(0),
        log_end_offset: Offset(leo),
        leader_epoch_start_offset: Offset(hwm),
        high_watermark: Offset(hwm),
        brokers: (0..3)
            .map(|i| (b(i), BrokerRegistration::live(broker_epoch(i))))
            .collect::<BTreeMap<_, _>>(),
        config: ReplicationConfig {
            min_insync_replicas: min_isr,
            ..ReplicationConfig::default()
        },
    }
}

pub(super) fn leader(isr: &[i32], min_isr: usize, leo: i64, hwm: i64) -> LeaderPartition {
    LeaderPartition::new(init(isr, min_isr, leo, hwm), 0).unwrap()
}

pub(super) fn epochs() -> EpochCache {
    EpochCache::from_entries([(LeaderEpoch(3), Offset(0)), (EPOCH, Offset(0))])
}

pub(super) fn fetch(broker: i32, offset: i64) -> FollowerFetch {
    FollowerFetch {
        broker: b(broker),
        broker_epoch: broker_epoch(broker),
        current_leader_epoch: Some(EPOCH),
        fetch_offset: Offset(offset),
        last_fetched_epoch: Some(EPOCH),
        log_start_offset: Some(Offset(0)),
    }
}

pub(super) fn hwm(offset: i64) -> Command {
    Command::HighWatermarkAdvanced {
        high_watermark: Offset(offset),
    }
}

pub(super) fn records(offset: i64) -> FetchAnswer {
    FetchAnswer::Records {
        high_watermark: Offset(offset),
        log_start_offset: Some(Offset(0)),
    }
}

fn proposal(id: u64, members: &[(i32, Option<i32>)]) -> AlterPartitionProposal {
    AlterPartitionProposal {
        id: AlterPartitionId(id),
        leader_epoch: EPOCH,
        partition_epoch: PARTITION_EPOCH,
        new_isr: members
            .iter()
            .map(|(m, e)| IsrMember {
                broker: b(*m),
                broker_epoch: e.map(broker_epoch),
            })
            .collect(),
    }
}

fn committed(isr: &[i32], partition_epoch: i32) -> AlterPartitionResponse {
    AlterPartitionResponse::Committed {
        leader_epoch: EPOCH,
        partition_epoch: PartitionEpoch(partition_epoch),
        isr: set(isr),
    }
}

fn done(request: u64, result: Result<(), ErrorCode>) -> Command {
    Command::CompleteProduce {
        request: RequestId(request),
        result,
    }
}

#[test]
fn new_rejects_inconsistent_metadata() {
    // Caller bugs are errors, never panics (STYLE 6).
    let mut bad = init(&[1, 2], 1, 0, 0);
    assert_eq!(
        LeaderPartition::new(bad.clone(), 0),
        Err(ReplicationError::LeaderNotInIsr(b(0)))
    );
    bad.metadata.leader = Some(b(1));
    assert!(LeaderPartition::new(bad, 0).is_err());
    assert!(LeaderPartition::new(init(&[0], 1, 5, 6), 0).is_err());
}

#[test]
fn hwm_is_min_leo_over_isr_once_every_member_fetched() {
    // Reference §7: HWM = min LEO over the (maximal) ISR; a member not yet fetched holds it.
    let mut l = leader(&[0, 1, 2], 2, 10, 0);
    let out = l.on_follower_fetch(&fetch(1, 10), &epochs(), 1);
    assert_eq!(out.answer, records(0));
    assert_eq!(out.commands, vec![]);
    let out = l.on_follower_fetch(&fetch(2, 6), &epochs(), 2);
    assert_eq!(out.answer, records(6));
    assert_eq!(out.commands, vec![hwm(6)]);
    assert_eq!(l.high_watermark(), Offset(6));
    let p = l.follower(b(2)).unwrap();
    assert_eq!(p.log_end_offset, Some(Offset(6)));
    assert_eq!(p.last_fetch_ms, Some(2));
    assert_eq!(p.broker_epoch, Some(broker_epoch(2)));
    l.check_invariants();
}

#[test]
fn hwm_frozen_below_min_isr_even_for_acks1_data() {
    // KIP-966 "Additional High Watermark advance requirement": applies to acks=1 data too.
    let mut l = leader(&[0], 2, 0, 0);
    assert_eq!(l.on_leader_append(Offset(10), 1).unwrap(), vec![]);
    assert_eq!(l.high_watermark(), Offset(0));
    assert!(l.is_under_min_isr());
    // With min ISR 1 the same append commits at once.
    let mut single = leader(&[0], 1, 0, 0);
    assert_eq!(
        single.on_leader_append(Offset(10), 1).unwrap(),
        vec![hwm(10)]
    );
}

#[test]
fn kip966_maximal_isr_example_hwm_waits_for_committed_isr() {
    // KIP-966 ELR/maximal ISR example: ISR=[0], ELR=[1], broker 2 catching up; the HWM must
    // not advance until the controller committed ISR=[0,2].
    let mut l = leader(&[0], 2, 10, 4);
    // Broker 2 reaches the HWM and the epoch start (4): the leader proposes [0, 2].
    let out = l.on_follower_fetch(&fetch(2, 4), &epochs(), 1);
    assert_eq!(out.answer, records(4));
    assert_eq!(
        out.commands,
        vec![Command::SendAlterPartition(proposal(
            1,
            &[(0, Some(0)), (2, Some(2))]
        ))]
    );
    assert_eq!(l.maximal_isr(), set(&[0, 2]));
    assert_eq!(l.isr(), &set(&[0]));
    // Broker 2 is fully caught up, but the committed ISR is still [0]: no advance.
    let out = l.on_follower_fetch(&fetch(2, 10), &epochs(), 2);
    assert_eq!(out.commands, vec![]);
    assert_eq!(l.high_watermark(), Offset(4));
    // The controller commits [0, 2]: now the HWM moves to min LEO over the ISR.
    let cmds = l.on_alter_partition_response(AlterPartitionId(1), &committed(&[0, 2], 11), 3);
    assert_eq!(cmds, vec![hwm(10)]);
    assert_eq!(l.isr(), &set(&[0, 2]));
    assert_eq!(l.partition_epoch(), PartitionEpoch(11));
    assert_eq!(l.pending_alter_partition(), None);
}

#[test]
fn maximal_isr_member_holds_back_hwm_while_pending() {
    // Reference §6: while an AlterPartition is pending, the maximal ISR is used for the HWM.
    let mut l = leader(&[0, 1], 2, 10, 4);
    l.on_follower_fetch(&fetch(1, 10), &epochs(), 1);
    assert_eq!(l.high_watermark(), Offset(10));
    l.on_leader_append(Offset(20), 2).unwrap();
    let out = l.on_follower_fetch(&fetch(2, 12), &epochs(), 3); // joins the maximal ISR at 12
    assert_eq!(l.maximal_isr(), set(&[0, 1, 2]));
    assert_eq!(out.commands.len(), 1);
    let out = l.on_follower_fetch(&fetch(1, 20), &epochs(), 4);
    assert_eq!(out.commands, vec![hwm(12)]);
}

#[test]
fn isr_expansion_eligibility_table() {
    // Reference §6 "ISR expansion eligibility" + KIP-903: each row breaks one condition.
    type Setup = fn(&mut LeaderPartition);
    let rows: &[(&str, Setup, Result<(), Ineligible>)] = &[
        ("eligible", |_| {}, Ok(())),
        (
            "below HWM",
            |l| {
                l.high_watermark = Offset(9);
            },
            Err(Ineligible::BelowHighWatermark),
        ),
        (
            "below leader epoch start",
            |l| {
                l.leader_epoch_start_offset = Offset(9);
            },
            Err(Ineligible::BelowLeaderEpochStart),
        ),
        (
            "reported a log start offset below the leader's (issue 20, Keel's rule)",
            |l| {
                l.log_start_offset = Offset(4);
                l.followers.get_mut(&b(2)).unwrap().log_start_offset = Some(Offset(3));
            },
            Err(Ineligible::BelowLogStartOffset),
        ),
        (
            "reported the leader's log start offset",
            |l| {
                l.log_start_offset = Offset(4);
                l.followers.get_mut(&b(2)).unwrap().log_start_offset = Some(Offset(4));
            },
            Ok(()),
        ),
        (
            "reported none (-1)",
            |l| {
                l.log_start_offset = Offset(4);
                l.followers.get_mut(&b(2)).unwrap().log_start_offset = None;
            },
            Ok(()),
        ),
        (
            "fenced",
            |l| {
                l.brokers.get_mut(&b(2)).unwrap().fenced = true;
            },
            Err(Ineligible::Fenced),
        ),
        (
            "controlled shutdown",
            |l| {
                l.brokers.get_mut(&b(2)).unwrap().in_controlled_shutdown = true;
            },
            Err(Ineligible::InControlledShutdown),
        ),
        (
            "unregistered",
            |l| {
                l.brokers.remove(&b(2));
            },
            Err(Ineligible::Unregistered),
        ),
        (
            "fetched with another broker epoch",
            |l| {
                l.brokers.get_mut(&b(2)).unwrap().epoch = BrokerEpoch(500);
            },
            Err(Ineligible::BrokerEpochMismatch),
        ),
        (
            "never fetched",
            |l| {
                l.followers.get_mut(&b(2)).unwrap().log_end_offset = None;
            },
            Err(Ineligible::NoFetch),
        ),
        (
            "already in ISR",
            |l| {
                l.isr.insert(b(2));
            },
            Err(Ineligible::AlreadyInIsr),
        ),
        (
            "AlterPartition pending",
            |l| {
                let mut fx = Effects::default();
                l.propose(set(&[0, 1]), &mut fx);
            },
            Err(Ineligible::AlterPartitionPending),
        ),
    ];
    for (name, setup, expected) in rows {
        let mut l = leader(&[0, 1], 1, 10, 5);
        l.on_follower_fetch(&fetch(1, 5), &epochs(), 1);
        // Put broker 2 at LEO 8 without triggering an expansion yet.
        let p = l.followers.get_mut(&b(2)).unwrap();
        p.log_end_offset = Some(Offset(8));
        p.broker_epoch = Some(broker_epoch(2));
        setup(&mut l);
        assert_eq!(l.isr_expansion_check(b(2)), *expected, "{name}");
    }
    let l = leader(&[0, 1], 1, 10, 5);
    assert_eq!(l.isr_expansion_check(b(0)), Err(Ineligible::NotAFollower));
    assert_eq!(l.isr_expansion_check(b(7)), Err(Ineligible::NotAFollower));
}

#[test]
fn expansion_sends_each_members_last_fetch_epoch() {
    // KIP-903 / AlterPartition v3 NewIsrWithEpochs: leader's own epoch, followers' last-fetch
    // epochs, -1 (None) for a member not yet seen fetching.
    let mut l = leader(&[0, 1], 1, 10, 10);
    let out = l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
    assert_eq!(
        out.commands,
        vec![Command::SendAlterPartition(proposal(
            1,
            &[(0, Some(0)), (1, None), (2, Some(2))]
        ))]
    );
    assert_eq!(
        l.pending_alter_partition().unwrap().state,
        PendingState::InFlight
    );
}

#[test]
fn tick_shrinks_isr_after_replica_lag_time_max() {
    // replica.lag.time.max.ms: a follower not caught up for longer leaves the ISR.
    let mut l = leader(&[0, 1, 2], 2, 0, 0);
    l.on_follower_fetch(&fetch(1, 0), &epochs(), 0); // caught up at 0 (LEO 0 = leader LEO)
    l.on_follower_fetch(&fetch(2, 0), &epochs(), 0);
    l.on_leader_append(Offset(10), 1).unwrap();
    l.on_follower_fetch(&fetch(2, 10), &epochs(), 5_000); // 2 caught up at 5000
    assert_eq!(l.tick(LAG_MS), vec![]);
    assert_eq!(l.out_of_sync_replicas(LAG_MS + 1), set(&[1]));
    let cmds = l.tick(LAG_MS + 1);
    assert_eq!(
        cmds,
        vec![Command::SendAlterPartition(proposal(
            1,
            &[(0, Some(0)), (2, Some(2))]
        ))]
    );
    // Pending shrink: the maximal ISR is still the committed ISR, and nothing else is proposed.
    assert_eq!(l.maximal_isr(), set(&[0, 1, 2]));
    assert_eq!(l.tick(LAG_MS + 100_000), vec![]);
}

#[test]
fn caught_up_as_of_previous_fetch() {
    // Kafka Replica.updateFetchStateOrThrow: reaching the leader LEO of the previous fetch
    // means caught up at the previous fetch time.
    let mut l = leader(&[0, 1], 1, 10, 0);
    l.on_follower_fetch(&fetch(1, 5), &epochs(), 100); // leader LEO 10 at t=100
    l.on_leader_append(Offset(20), 150).unwrap();
    l.on_follower_fetch(&fetch(1, 10), &epochs(), 200); // reached 10: caught up as of t=100
    assert_eq!(l.follower(b(1)).unwrap().last_caught_up_ms, Some(100));
}

#[test]
fn alter_partition_error_table() {
    // Reference §6 broker-side AlterPartition response handling (Partition.scala).
    use AlterPartitionErrorAction::*;
    let rows: &[(ErrorCode, AlterPartitionErrorAction)] = &[
        (ErrorCode::IneligibleReplica, RevertToCommitted),
        (ErrorCode::OperationNotAttempted, RevertToCommitted),
        (ErrorCode::UnknownTopicOrPartition, AwaitMetadata),
        (ErrorCode::UnknownTopicId, AwaitMetadata),
        (ErrorCode::FencedLeaderEpoch, AwaitMetadata),
        (ErrorCode::InvalidUpdateVersion, AwaitMetadata),
        (ErrorCode::InvalidRequest, AwaitMetadata),
        (ErrorCode::NewLeaderElected, AwaitMetadata),
        (ErrorCode::NotController, Retry),
        (ErrorCode::StaleBrokerEpoch, Retry),
        (ErrorCode::RequestTimedOut, Retry),
        (ErrorCode::Other(89), Retry),
    ];
    for (error, action) in rows {
        assert_eq!(alter_partition_error_action(*error), *action, "{error}");
        let mut l = leader(&[0], 1, 10, 10);
        l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
        let cmds = l.on_alter_partition_response(
            AlterPartitionId(1),
            &AlterPartitionResponse::Error(*error),
            1_000,
        );
        match action {
            RevertToCommitted => {
                assert_eq!(cmds, vec![], "{error}");
                assert_eq!(l.pending_alter_partition(), None);
                assert_eq!(l.maximal_isr(), set(&[0]));
            }
            AwaitMetadata => {
                assert_eq!(cmds, vec![], "{error}");
                let pending = l.pending_alter_partition().unwrap();
                assert_eq!(pending.state, PendingState::AwaitingMetadata);
                assert_eq!(l.maximal_isr(), set(&[0, 2]));
                assert_eq!(l.tick(10_000), vec![], "{error}: no resend");
            }
            Retry => {
                let at_ms = 1_000 + crate::config::DEFAULT_ALTER_PARTITION_RETRY_BACKOFF_MS;
                assert_eq!(cmds, vec![Command::ScheduleTick { at_ms }], "{error}");
                assert_eq!(l.tick(at_ms - 1), vec![Command::ScheduleTick { at_ms }]);
                assert_eq!(
                    l.tick(at_ms),
                    vec![Command::SendAlterPartition(proposal(
                        1,
                        &[(0, Some(0)), (2, Some(2))]
                    ))]
                );
            }
        }
    }
}

#[test]
fn alter_partition_success_ignored_when_stale() {
    // Reference §6: success ignored if leader epoch ≠ local or partition epoch < local; the
    // proposal then waits for metadata. Equal partition epoch is committed.
    let stale: &[AlterPartitionResponse] = &[
        AlterPartitionResponse::Committed {
            leader_epoch: LeaderEpoch(6),
            partition_epoch: PartitionEpoch(11),
            isr: set(&[0, 2]),
        },
        committed(&[0, 2], 9),
        committed(&[2], 11),
    ];
    for response in stale {
        let mut l = leader(&[0], 1, 10, 10);
        l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
        assert_eq!(
            l.on_alter_partition_response(AlterPartitionId(1), response, 2),
            vec![]
        );
        assert_eq!(l.isr(), &set(&[0]));
        assert_eq!(
            l.pending_alter_partition().unwrap().state,
            PendingState::AwaitingMetadata
        );
    }
    let mut l = leader(&[0], 1, 10, 10);
    l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
    assert_eq!(
        l.on_alter_partition_response(AlterPartitionId(1), &committed(&[0, 2], 10), 2),
        vec![]
    );
    assert_eq!(l.isr(), &set(&[0, 2]));
    assert_eq!(l.pending_alter_partition(), None);
}

#[test]
fn response_for_another_proposal_is_ignored() {
    // One AlterPartition in flight: answers are matched by proposal id.
    let mut l = leader(&[0], 1, 10, 10);
    l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
    let before = l.clone();
    assert_eq!(
        l.on_alter_partition_response(AlterPartitionId(9), &committed(&[0, 2], 11), 2),
        vec![]
    );
    assert_eq!(l, before);
}

#[test]
fn metadata_with_older_or_equal_partition_epoch_is_ignored() {
    // testIgnoreLeaderPartitionStateChangeWithOlderPartitionEpoch.
    let mut l = leader(&[0, 1, 2], 2, 10, 0);
    let before = l.clone();
    let mut meta = init(&[0], 2, 0, 0).metadata;
    meta.partition_epoch = PartitionEpoch(9);
    assert_eq!(l.on_partition_metadata(&meta, 1), vec![]);
    meta.partition_epoch = PARTITION_EPOCH;
    assert_eq!(l.on_partition_metadata(&meta, 1), vec![]);
    meta.leader_epoch = LeaderEpoch(4);
    meta.partition_epoch = PartitionEpoch(50);
    assert_eq!(l.on_partition_metadata(&meta, 1), vec![]);
    assert_eq!(l, before);
}

#[test]
fn newer_metadata_replaces_isr_and_drops_pending_proposal() {
    // Reference §6: FENCED_LEADER_EPOCH & co. stay pending "until new metadata".
    let mut l = leader(&[0], 1, 10, 10);
    l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
    l.on_alter_partition_response(
        AlterPartitionId(1),
        &AlterPartitionResponse::Error(ErrorCode::InvalidUpdateVersion),
        2,
    );
    let mut meta = init(&[0, 1], 1, 0, 0).metadata;
    meta.partition_epoch = PartitionEpoch(12);
    assert_eq!(l.on_partition_metadata(&meta, 3), vec![]);
    assert_eq!(l.isr(), &set(&[0, 1]));
    assert_eq!(l.partition_epoch(), PartitionEpoch(12));
    assert_eq!(l.pending_alter_partition(), None);
    // Proposals start again from the new committed ISR.
    let out = l.on_follower_fetch(&fetch(2, 10), &epochs(), 4);
    assert_eq!(
        out.commands,
        vec![Command::SendAlterPartition(AlterPartitionProposal {
            partition_epoch: PartitionEpoch(12),
            ..proposal(2, &[(0, Some(0)), (1, None), (2, Some(2))])
        })]
    );
}

#[test]
fn a_member_the_controller_removes_stops_holding_back_the_hwm() {
    // Issue 19: the controller takes a replica that reported its storage lost out of the ISR;
    // it stays registered and unfenced but no longer fetches. It must not hold the high
    // watermark (and acks=all) back for replica.lag.time.max.ms as a caught-up replica would.
    let mut l = leader(&[0, 1, 2], 2, 10, 10);
    l.on_follower_fetch(&fetch(1, 10), &epochs(), 1);
    l.on_follower_fetch(&fetch(2, 10), &epochs(), 1);
    l.on_leader_append(Offset(13), 2).unwrap();
    l.on_follower_fetch(&fetch(1, 13), &epochs(), 3);
    assert_eq!(
        l.high_watermark(),
        Offset(10),
        "broker 2 is in the ISR at 10"
    );
    let mut meta = init(&[0, 1], 2, 0, 0).metadata;
    meta.partition_epoch = PartitionEpoch(11);
    assert_eq!(l.on_partition_metadata(&meta, 4), vec![hwm(13)]);
    assert_eq!(l.follower(b(2)).unwrap().last_caught_up_ms, None);
    // Once it fetches up to the log end offset it counts as caught up again.
    l.on_leader_append(Offset(15), 5).unwrap();
    l.on_follower_fetch(&fetch(2, 15), &epochs(), 6);
    l.on_leader_append(Offset(20), 7).unwrap();
    l.on_follower_fetch(&fetch(1, 20), &epochs(), 8);
    assert_eq!(l.high_watermark(), Offset(15));
}

#[test]
fn newer_leader_epoch_ends_leadership_and_answers_waiting_requests() {
    // Leadership lost → NOT_LEADER_OR_FOLLOWER for the purgatory, then LeadershipEnded.
    let mut l = leader(&[0, 1], 2, 0, 0);
    l.on_leader_append(Offset(5), 1).unwrap();
    l.await_acks_all(RequestId(1), Offset(5), 1_000, 1).unwrap();
    let mut meta = init(&[1], 2, 0, 0).metadata;
    meta.leader = Some(b(1));
    meta.leader_epoch = LeaderEpoch(6);
    meta.partition_epoch = PartitionEpoch(11);
    assert_eq!(
        l.on_partition_metadata(&meta, 2),
        vec![
            done(1, Err(ErrorCode::NotLeaderOrFollower)),
            Command::LeadershipEnded {
                leader: Some(b(1)),
                leader_epoch: LeaderEpoch(6)
            }
        ]
    );
    assert!(l.has_ended());
    assert_eq!(
        l.check_produce(Acks::Leader),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        l.on_follower_fetch(&fetch(1, 0), &epochs(), 3).answer,
        FetchAnswer::Error(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(l.tick(100_000), vec![]);
}

#[test]
fn not_enough_replicas_before_append() {
    // KIP-966 / Kafka appendRecordsToLeader: acks=all refused below min ISR; acks=1 allowed.
    let l = leader(&[0], 2, 0, 0);
    assert_eq!(
        l.check_produce(Acks::All),
        Err(ErrorCode::NotEnoughReplicas)
    );
    assert_eq!(l.check_produce(Acks::Leader), Ok(()));
    assert_eq!(l.check_produce(Acks::None), Ok(()));
    assert_eq!(leader(&[0, 1], 2, 0, 0).check_produce(Acks::All), Ok(()));
    // Effective min ISR = min(min.insync.replicas, RF): min ISR 5 with RF 3 needs 3.
    assert_eq!(leader(&[0, 1, 2], 5, 0, 0).check_produce(Acks::All), Ok(()));
}

#[test]
fn acks_all_waits_until_hwm_covers_it() {
    // Issue 4: acks=all waits in the purgatory until HWM ≥ last offset + 1.
    let mut l = leader(&[0, 1], 2, 0, 0);
    l.on_leader_append(Offset(3), 1).unwrap();
    assert_eq!(
        l.await_acks_all(RequestId(1), Offset(3), 500, 1).unwrap(),
        vec![Command::ScheduleTick { at_ms: 501 }]
    );
    l.on_leader_append(Offset(7), 2).unwrap();
    l.await_acks_all(RequestId(2), Offset(7), 500, 2).unwrap();
    let out = l.on_follower_fetch(&fetch(1, 3), &epochs(), 3);
    assert_eq!(out.commands, vec![hwm(3), done(1, Ok(()))]);
    assert_eq!(l.waiting_requests().collect::<Vec<_>>(), vec![RequestId(2)]);
    // Already covered: answered at once.
    assert_eq!(
        l.await_acks_all(RequestId(3), Offset(2), 500, 4).unwrap(),
        vec![done(3, Ok(()))]
    );
    assert_eq!(
        l.await_acks_all(RequestId(2), Offset(7), 500, 4),
        Err(ReplicationError::DuplicateRequest(RequestId(2)))
    );
    assert!(l.await_acks_all(RequestId(4), Offset(8), 500, 4).is_err());
    l.check_invariants();
}

#[test]
fn isr_shrink_below_min_fails_waiting_with_after_append() {
    // Issue 4: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below min ISR while waiting.
    let mut l = leader(&[0, 1], 2, 0, 0);
    l.on_leader_append(Offset(4), 1).unwrap();
    l.await_acks_all(RequestId(1), Offset(4), 60_000, 1)
        .unwrap();
    let cmds = l.tick(LAG_MS + 1);
    assert_eq!(
        cmds,
        vec![Command::SendAlterPartition(proposal(1, &[(0, Some(0))]))]
    );
    let cmds = l.on_alter_partition_response(AlterPartitionId(1), &committed(&[0], 11), LAG_MS + 2);
    assert_eq!(
        cmds,
        vec![done(1, Err(ErrorCode::NotEnoughReplicasAfterAppend))]
    );
    assert_eq!(l.waiting_requests().count(), 0);
    // Appended while below min ISR (a racing shell): answered at once.
    l.on_leader_append(Offset(5), LAG_MS + 3).unwrap();
    assert_eq!(
        l.await_acks_all(RequestId(2), Offset(5), 100, LAG_MS + 3)
            .unwrap(),
        vec![done(2, Err(ErrorCode::NotEnoughReplicasAfterAppend))]
    );
}

#[test]
fn min_isr_raised_fails_waiting() {
    // A min.insync.replicas change is an ISR-below-min event for waiting requests.
    let mut l = leader(&[0, 1], 2, 0, 0);
    l.on_leader_append(Offset(4), 1).unwrap();
    l.await_acks_all(RequestId(1), Offset(4), 60_000, 1)
        .unwrap();
    assert_eq!(
        l.on_min_insync_replicas(3, 2),
        vec![done(1, Err(ErrorCode::NotEnoughReplicasAfterAppend))]
    );
}

#[test]
fn acks_all_times_out() {
    // Issue 4: timeout → REQUEST_TIMED_OUT.
    let mut l = leader(&[0, 1], 2, 0, 0);
    l.on_leader_append(Offset(4), 1).unwrap();
    l.await_acks_all(RequestId(1), Offset(4), 100, 1).unwrap();
    l.on_follower_fetch(&fetch(1, 0), &epochs(), 50);
    assert_eq!(l.tick(100), vec![]);
    assert_eq!(l.tick(101), vec![done(1, Err(ErrorCode::RequestTimedOut))]);
    assert_eq!(l.waiting_requests().count(), 0);
}

#[test]
fn stale_broker_epoch_fetch_is_rejected_without_state_change() {
    // KIP-903: a fetch with a broker epoch older than the registered one gets
    // NOT_LEADER_OR_FOLLOWER and does not update the follower's state.
    let mut l = leader(&[0, 1], 1, 10, 0);
    l.on_broker_registration(b(1), Some(BrokerRegistration::live(BrokerEpoch(200))), 1);
    let before = l.clone();
    let out = l.on_follower_fetch(&fetch(1, 10), &epochs(), 2);
    assert_eq!(
        out.answer,
        FetchAnswer::Error(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(out.commands, vec![]);
    assert_eq!(l, before);
}

#[test]
fn kafka_14139_replaced_disk_is_not_added_with_old_epoch() {
    // KAFKA-14139: B catches up, the leader proposes adding it with its epoch; B restarts on an
    // empty disk with a new broker epoch. The controller rejects the old epoch
    // (INELIGIBLE_REPLICA), the leader reverts, and the empty B is neither counted nor added.
    let mut l = leader(&[0], 1, 10, 10);
    let out = l.on_follower_fetch(&fetch(1, 10), &epochs(), 1);
    assert_eq!(
        out.commands,
        vec![Command::SendAlterPartition(proposal(
            1,
            &[(0, Some(0)), (1, Some(1))]
        ))]
    );
    // B's new incarnation fetches from offset 0 before the leader's metadata has its new epoch:
    // accepted (epoch newer than registered) but it cannot be eligible with that epoch.
    let mut restarted = fetch(1, 0);
    restarted.broker_epoch = BrokerEpoch(200);
    restarted.last_fetched_epoch = None;
    let out = l.on_follower_fetch(&restarted, &epochs(), 2);
    assert_eq!(out.answer, records(10));
    assert_eq!(out.commands, vec![]);
    // The controller rejects the proposal made with B's old epoch.
    let cmds = l.on_alter_partition_response(
        AlterPartitionId(1),
        &AlterPartitionResponse::Error(ErrorCode::IneligibleReplica),
        3,
    );
    assert_eq!(cmds, vec![]);
    assert_eq!(l.maximal_isr(), set(&[0]));
    assert_eq!(
        l.isr_expansion_check(b(1)),
        Err(Ineligible::BelowHighWatermark)
    );
    // Metadata now shows the new registration; B is still below the HWM: not added.
    l.on_broker_registration(b(1), Some(BrokerRegistration::live(BrokerEpoch(200))), 4);
    let out = l.on_follower_fetch(&restarted, &epochs(), 5);
    assert_eq!(out.commands, vec![]);
    // The old incarnation is fenced off entirely.
    let out = l.on_follower_fetch(&fetch(1, 10), &epochs(), 6);
    assert_eq!(
        out.answer,
        FetchAnswer::Error(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(l.follower(b(1)).unwrap().log_end_offset, Some(Offset(0)));
}

#[test]
fn newer_registration_forgets_the_old_incarnations_progress() {
    // KAFKA-14139 (stricter than Kafka): an ISR member whose broker re-registered is not
    // counted with its old log end offset; the HWM waits for its new incarnation.
    let mut l = leader(&[0, 1], 2, 10, 0);
    l.on_follower_fetch(&fetch(1, 5), &epochs(), 1);
    assert_eq!(l.high_watermark(), Offset(5));
    l.on_broker_registration(b(1), Some(BrokerRegistration::live(BrokerEpoch(200))), 2);
    assert_eq!(l.follower(b(1)).unwrap().log_end_offset, None);
    assert_eq!(l.allowed_high_watermark(3), None);
    assert_eq!(l.out_of_sync_replicas(3), set(&[1]));
}

#[test]
fn fetch_with_diverging_epoch_answers_end_offset_and_keeps_state() {
    // KIP-595 DivergingEpoch / KAFKA-3861: the leader tells the follower where to truncate.
    let mut l = leader(&[0, 1], 1, 20, 0);
    let cache = EpochCache::from_entries([(LeaderEpoch(3), Offset(0)), (EPOCH, Offset(10))]);
    let before = l.clone();
    let diverged = FollowerFetch {
        fetch_offset: Offset(12),
        last_fetched_epoch: Some(LeaderEpoch(3)),
        ..fetch(1, 0)
    };
    let out = l.on_follower_fetch(&diverged, &cache, 1);
    assert_eq!(
        out.answer,
        FetchAnswer::DivergingEpoch {
            end: Some(EpochEndOffset {
                epoch: LeaderEpoch(3),
                end_offset: Offset(10)
            }),
            high_watermark: Offset(0)
        }
    );
    assert_eq!(out.commands, vec![]);
    assert_eq!(l, before);
    // An epoch the leader never had (4) answers with the floor epoch (3).
    let out = l.on_follower_fetch(
        &FollowerFetch {
            fetch_offset: Offset(10),
            last_fetched_epoch: Some(LeaderEpoch(4)),
            ..fetch(1, 0)
        },
        &cache,
        1,
    );
    assert!(matches!(
        out.answer,
        FetchAnswer::DivergingEpoch {
            end: Some(EpochEndOffset {
                epoch: LeaderEpoch(3),
                ..
            }),
            ..
        }
    ));
}

#[test]
fn fetch_validation_table() {
    // KIP-320 leader epoch fencing, replica membership, offset range (leader/fetch.rs table);
    // the range is Kafka's LocalLog.read: [log start offset, log end offset].
    let out_of_range = |start: i64| FetchAnswer::OffsetOutOfRange {
        log_start_offset: Some(Offset(start)),
    };
    let rows: &[(&str, i64, FollowerFetch, FetchAnswer)] = &[
        (
            "older current leader epoch",
            0,
            FollowerFetch {
                current_leader_epoch: Some(LeaderEpoch(4)),
                ..fetch(1, 0)
            },
            FetchAnswer::Error(ErrorCode::FencedLeaderEpoch),
        ),
        (
            "newer current leader epoch",
            0,
            FollowerFetch {
                current_leader_epoch: Some(LeaderEpoch(6)),
                ..fetch(1, 0)
            },
            FetchAnswer::Error(ErrorCode::UnknownLeaderEpoch),
        ),
        (
            "not a replica",
            0,
            fetch(7, 0),
            FetchAnswer::Error(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "the leader itself",
            0,
            fetch(0, 0),
            FetchAnswer::Error(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "beyond LEO",
            0,
            FollowerFetch {
                last_fetched_epoch: None,
                ..fetch(1, 11)
            },
            out_of_range(0),
        ),
        (
            "negative offset",
            0,
            FollowerFetch {
                last_fetched_epoch: None,
                ..fetch(1, -3)
            },
            out_of_range(0),
        ),
        (
            "below the log start offset (DeleteRecords moved it)",
            4,
            FollowerFetch {
                last_fetched_epoch: None,
                ..fetch(1, 3)
            },
            out_of_range(4),
        ),
    ];
    for (name, log_start, f, answer) in rows {
        let mut l = leader(&[0, 1], 1, 10, 10);
        assert_eq!(l.on_log_start_offset(Offset(*log_start)), Ok(vec![]));
        let before = l.clone();
        let out = l.on_follower_fetch(f, &epochs(), 1);
        assert_eq!(out.answer, *answer, "{name}");
        assert_eq!(l, before, "{name}");
    }
}

#[test]
fn hwm_never_moves_backward() {
    // DESIGN invariant: the HWM never goes backward, even when an ISR member's LEO drops.
    let mut l = leader(&[0, 1], 2, 10, 0);
    l.on_follower_fetch(&fetch(1, 10), &epochs(), 1);
    assert_eq!(l.high_watermark(), Offset(10));
    l.on_leader_append(Offset(20), 2).unwrap();
    let out = l.on_follower_fetch(
        &FollowerFetch {
            last_fetched_epoch: None,
            ..fetch(1, 0)
        },
        &epochs(),
        3,
    );
    assert_eq!(out.answer, records(10));
    assert_eq!(out.commands, vec![]);
    assert_eq!(l.high_watermark(), Offset(10));
    assert_eq!(l.tick(4), vec![]);
    assert_eq!(l.high_watermark(), Offset(10));
}

#[test]
fn caught_up_eligible_non_isr_replica_holds_back_hwm() {
    // Reference §7: a caught-up, ISR-eligible replica outside the ISR also bounds the HWM, so
    // it is not overtaken just before it joins.
    let mut l = leader(&[0, 1], 1, 10, 0);
    l.on_follower_fetch(&fetch(2, 0), &epochs(), 0); // LEO 0 ≥ HWM 0: proposed
    assert_eq!(l.maximal_isr(), set(&[0, 1, 2]));
    l.on_alter_partition_response(
        AlterPartitionId(1),
        &AlterPartitionResponse::Error(ErrorCode::IneligibleReplica),
        1,
    );
    // Broker 2 is outside the ISR again but caught up within the lag (as of its previous fetch).
    l.followers.get_mut(&b(2)).unwrap().last_caught_up_ms = Some(0);
    l.on_follower_fetch(&fetch(1, 10), &epochs(), 2);
    assert_eq!(l.high_watermark(), Offset(0));
    // Once it stops counting as caught up, the HWM moves to the ISR's minimum.
    assert_eq!(l.tick(LAG_MS + 1), vec![hwm(10)]);
}
