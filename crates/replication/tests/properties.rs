//! Property tests: random sequences of follower fetches (current and stale broker epochs),
//! appends, acks=all produces, ticks, AlterPartition answers (from a controller model that
//! applies KIP-903's broker-epoch check) and metadata updates keep the leader's promises:
//! - the high watermark never moves backward (DESIGN invariants);
//! - it never advances while the committed ISR is below the effective min ISR (KIP-966);
//! - it never exceeds the log end offset of a committed ISR member that still holds its data;
//! - every acks=all request is answered exactly once, and acknowledged only when covered;
//! - every DeleteRecords is answered exactly once, and completed only when every follower the
//!   leader counts as live (unfenced) reported a log start offset at or above the deleted
//!   offset in its last accepted fetch (Kafka's `lowWatermarkIfLeader`); followers that fetch
//!   below the leader's log start offset start over there.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use keel_replication::*;
use proptest::prelude::*;

const EPOCH: LeaderEpoch = LeaderEpoch(5);
const FOLLOWERS: [i32; 2] = [1, 2];

/// How many steps advanced the HWM / acknowledged a request / completed a deletion, so the
/// checks are not vacuous.
static ADVANCES: AtomicUsize = AtomicUsize::new(0);
static ACKS: AtomicUsize = AtomicUsize::new(0);
static DELETES: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Debug)]
enum Op {
    Append(i64),
    Produce(i64, u64),
    Fetch(usize, i64),
    StaleFetch(usize),
    Restart(usize),
    Register(usize),
    Tick(u64),
    Answer(Option<u8>),
    ShrinkMetadata(usize, bool),
    CommitPendingByMetadata,
    /// DeleteRecords at the high watermark plus this (1 is beyond it: refused), or at the
    /// high watermark itself (`None`: wire -1), with a timeout.
    Delete(Option<i64>, u64),
    /// The follower's broker is fenced (true) or unfenced again, same registration epoch.
    Fence(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1..5i64).prop_map(Op::Append),
        (1..5i64, 100..20_000u64).prop_map(|(n, t)| Op::Produce(n, t)),
        (0..2usize, 0..6i64).prop_map(|(b, k)| Op::Fetch(b, k)),
        (0..2usize, 0..6i64).prop_map(|(b, k)| Op::Fetch(b, k)),
        (0..2usize).prop_map(Op::StaleFetch),
        (0..2usize).prop_map(Op::Restart),
        (0..2usize).prop_map(Op::Register),
        (0..20_000u64).prop_map(Op::Tick),
        proptest::option::of(0..6u8).prop_map(Op::Answer),
        (0..2usize, any::<bool>()).prop_map(|(b, stale)| Op::ShrinkMetadata(b, stale)),
        Just(Op::CommitPendingByMetadata),
        (proptest::option::of(-3..=1i64), 100..20_000u64).prop_map(|(d, t)| Op::Delete(d, t)),
        (0..2usize, any::<bool>()).prop_map(|(b, f)| Op::Fence(b, f)),
    ]
}

const ERRORS: [ErrorCode; 6] = [
    ErrorCode::IneligibleReplica,
    ErrorCode::OperationNotAttempted,
    ErrorCode::FencedLeaderEpoch,
    ErrorCode::InvalidUpdateVersion,
    ErrorCode::NotController,
    ErrorCode::Other(89),
];

struct World {
    leader: LeaderPartition,
    cache: EpochCache,
    now_ms: u64,
    /// Each follower's real log end offset, its current broker epoch, and whether it lost data
    /// since it last caught up (a restart on an empty disk).
    real_leo: [i64; 2],
    epoch: [i64; 2],
    lost: [bool; 2],
    /// Each follower's real log start offset, the one its last accepted fetch reported (the
    /// leader forgets it when the broker registers anew), the broker epoch of that fetch,
    /// whether the leader was last told the broker is fenced, and the registration epoch the
    /// leader knows.
    real_start: [i64; 2],
    reported_start: [Option<i64>; 2],
    fetched_epoch: [Option<i64>; 2],
    fenced: [bool; 2],
    registered_epoch: [i64; 2],
    controller_partition_epoch: i32,
    last_sent: Option<AlterPartitionProposal>,
    next_request: u64,
    waiting: BTreeMap<RequestId, Offset>,
    waiting_deletes: BTreeMap<RequestId, Offset>,
    answered: BTreeSet<RequestId>,
}

impl World {
    fn new(min_isr: usize) -> Self {
        let brokers = (0..3)
            .map(|i| (BrokerId(i), BrokerRegistration::live(BrokerEpoch(100))))
            .collect();
        let leader = LeaderPartition::new(
            LeaderInit {
                local: BrokerId(0),
                local_broker_epoch: BrokerEpoch(100),
                metadata: PartitionMetadata {
                    leader: Some(BrokerId(0)),
                    leader_epoch: EPOCH,
                    partition_epoch: PartitionEpoch(1),
                    replicas: vec![BrokerId(0), BrokerId(1), BrokerId(2)],
                    isr: (0..3).map(BrokerId).collect(),
                },
                log_start_offset: Offset(0),
                log_end_offset: Offset(0),
                leader_epoch_start_offset: Offset(0),
                high_watermark: Offset(0),
                brokers,
                config: ReplicationConfig {
                    min_insync_replicas: min_isr,
                    ..ReplicationConfig::default()
                },
            },
            0,
        )
        .unwrap();
        World {
            leader,
            cache: EpochCache::from_entries([(EPOCH, Offset(0))]),
            now_ms: 0,
            real_leo: [0, 0],
            epoch: [100, 100],
            lost: [false, false],
            real_start: [0, 0],
            reported_start: [None, None],
            fetched_epoch: [None, None],
            fenced: [false, false],
            registered_epoch: [100, 100],
            controller_partition_epoch: 1,
            last_sent: None,
            next_request: 1,
            waiting: BTreeMap::new(),
            waiting_deletes: BTreeMap::new(),
            answered: BTreeSet::new(),
        }
    }

    fn absorb(&mut self, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::CompleteProduce { request, result } => {
                    let required = self.waiting.remove(&request);
                    assert!(self.answered.insert(request), "{request} answered twice");
                    if result.is_ok() {
                        ACKS.fetch_add(1, Ordering::Relaxed);
                        let required = required.expect("acknowledged a request never parked");
                        assert!(required <= self.leader.high_watermark(), "acked uncovered");
                    }
                }
                Command::CompleteDeleteRecords { request, result } => {
                    let required = self
                        .waiting_deletes
                        .remove(&request)
                        .expect("answered a deletion never parked");
                    assert!(self.answered.insert(request), "{request} answered twice");
                    if let Ok(low_watermark) = result {
                        DELETES.fetch_add(1, Ordering::Relaxed);
                        assert!(low_watermark >= required, "completed below its offset");
                        assert!(low_watermark <= self.leader.log_start_offset());
                        for (i, follower) in FOLLOWERS.iter().enumerate() {
                            if !self.fenced[i] {
                                assert!(
                                    self.reported_start[i].is_some_and(|s| s >= required.0),
                                    "deletion to {required} completed while live follower \
                                     {follower} reported {:?}",
                                    self.reported_start[i]
                                );
                            }
                        }
                    }
                }
                Command::SendAlterPartition(proposal) => self.last_sent = Some(proposal),
                Command::HighWatermarkAdvanced { high_watermark } => {
                    assert_eq!(high_watermark, self.leader.high_watermark())
                }
                Command::ScheduleTick { .. } | Command::LeadershipEnded { .. } => {}
            }
        }
    }

    fn fetch(&mut self, i: usize, broker_epoch: i64) -> FetchAnswer {
        let offset = self.real_leo[i];
        let fetch = FollowerFetch {
            broker: BrokerId(FOLLOWERS[i]),
            broker_epoch: BrokerEpoch(broker_epoch),
            current_leader_epoch: Some(EPOCH),
            fetch_offset: Offset(offset),
            last_fetched_epoch: (offset > 0).then_some(EPOCH),
            log_start_offset: Some(Offset(self.real_start[i])),
        };
        let out = self
            .leader
            .on_follower_fetch(&fetch, &self.cache, self.now_ms);
        match out.answer {
            FetchAnswer::Records { .. } => {
                self.reported_start[i] = Some(self.real_start[i]);
                self.fetched_epoch[i] = Some(broker_epoch);
            }
            FetchAnswer::OffsetOutOfRange {
                log_start_offset: Some(start),
            } if start.0 > self.real_leo[i] => {
                // The follower starts over at the leader's log start offset.
                self.real_leo[i] = start.0;
                self.real_start[i] = start.0;
            }
            _ => {}
        }
        self.absorb(out.commands);
        out.answer
    }

    /// The controller's AlterPartition answer: KIP-903 checks each member's broker epoch.
    fn answer(&mut self, error: Option<u8>) {
        let Some(proposal) = self.last_sent.take() else {
            return;
        };
        let epochs_ok = proposal.new_isr.iter().all(|m| {
            m.broker.0 == 0
                || m.broker_epoch == Some(BrokerEpoch(self.epoch[m.broker.0 as usize - 1]))
        });
        let response = match error {
            Some(e) => AlterPartitionResponse::Error(ERRORS[usize::from(e)]),
            None if !epochs_ok => AlterPartitionResponse::Error(ErrorCode::IneligibleReplica),
            None if proposal.partition_epoch.0 != self.controller_partition_epoch => {
                AlterPartitionResponse::Error(ErrorCode::InvalidUpdateVersion)
            }
            None => {
                self.controller_partition_epoch += 1;
                AlterPartitionResponse::Committed {
                    leader_epoch: EPOCH,
                    partition_epoch: PartitionEpoch(self.controller_partition_epoch),
                    isr: proposal.new_isr.iter().map(|m| m.broker).collect(),
                }
            }
        };
        let commands = self
            .leader
            .on_alter_partition_response(proposal.id, &response, self.now_ms);
        self.absorb(commands);
    }

    fn metadata(&mut self, isr: BTreeSet<BrokerId>, partition_epoch: i32) {
        let meta = PartitionMetadata {
            leader: Some(BrokerId(0)),
            leader_epoch: EPOCH,
            partition_epoch: PartitionEpoch(partition_epoch),
            replicas: vec![BrokerId(0), BrokerId(1), BrokerId(2)],
            isr,
        };
        let commands = self.leader.on_partition_metadata(&meta, self.now_ms);
        self.absorb(commands);
    }

    fn step(&mut self, op: &Op) {
        self.now_ms += 1;
        match *op {
            Op::Append(n) => {
                let leo = Offset(self.leader.log_end_offset().0 + n);
                let commands = self.leader.on_leader_append(leo, self.now_ms).unwrap();
                self.absorb(commands);
            }
            Op::Produce(n, timeout_ms) => {
                if self.leader.check_produce(Acks::All).is_err() {
                    assert!(self.leader.is_under_min_isr());
                    return;
                }
                let leo = Offset(self.leader.log_end_offset().0 + n);
                let commands = self.leader.on_leader_append(leo, self.now_ms).unwrap();
                self.absorb(commands);
                let request = RequestId(self.next_request);
                self.next_request += 1;
                self.waiting.insert(request, leo);
                let commands = self
                    .leader
                    .await_acks_all(request, leo, timeout_ms, self.now_ms)
                    .unwrap();
                self.absorb(commands);
            }
            Op::Fetch(i, k) => {
                let answer = self.fetch(i, self.epoch[i]);
                if let FetchAnswer::Records {
                    high_watermark,
                    log_start_offset,
                } = answer
                {
                    let leo = self.leader.log_end_offset().0;
                    self.real_leo[i] = (self.real_leo[i] + k).min(leo);
                    if self.real_leo[i] >= self.leader.high_watermark().0 {
                        self.lost[i] = false;
                    }
                    // The follower moves its log start offset up to the leader's, within its
                    // own high watermark.
                    let follower_hwm = high_watermark.0.min(self.real_leo[i]);
                    let start = log_start_offset.expect("the leader names its log start").0;
                    if start <= follower_hwm {
                        self.real_start[i] = self.real_start[i].max(start);
                    }
                }
            }
            Op::StaleFetch(i) => {
                let registered_newer =
                    self.leader.follower(BrokerId(FOLLOWERS[i])).is_some() && self.epoch[i] > 100;
                let before = self.leader.follower(BrokerId(FOLLOWERS[i])).copied();
                let answer = self.fetch(i, self.epoch[i] - 1);
                if registered_newer && answer == FetchAnswer::Error(ErrorCode::NotLeaderOrFollower)
                {
                    assert_eq!(
                        self.leader.follower(BrokerId(FOLLOWERS[i])).copied(),
                        before
                    );
                }
            }
            Op::Restart(i) => {
                // An empty disk: anything the leader counted of the old log is gone. Until the
                // controller removes it (unclean shutdown), only the leader's registration
                // check can notice; the invariant below excludes it.
                self.epoch[i] += 1;
                self.lost[i] |= self.real_leo[i] > 0;
                self.real_leo[i] = 0;
                self.real_start[i] = 0;
            }
            Op::Register(i) => {
                let registration = BrokerRegistration::live(BrokerEpoch(self.epoch[i]));
                if self.fetched_epoch[i].is_some_and(|e| e < self.epoch[i]) {
                    // What the leader knew of the old incarnation's log is forgotten.
                    self.reported_start[i] = None;
                }
                self.fenced[i] = false;
                self.registered_epoch[i] = self.epoch[i];
                let commands = self.leader.on_broker_registration(
                    BrokerId(FOLLOWERS[i]),
                    Some(registration),
                    self.now_ms,
                );
                self.absorb(commands);
            }
            Op::Fence(i, fenced) => {
                // The registration the leader knows (no restart), fenced or not.
                let registration = BrokerRegistration {
                    fenced,
                    ..BrokerRegistration::live(BrokerEpoch(self.registered_epoch[i]))
                };
                self.fenced[i] = fenced;
                let commands = self.leader.on_broker_registration(
                    BrokerId(FOLLOWERS[i]),
                    Some(registration),
                    self.now_ms,
                );
                self.absorb(commands);
            }
            Op::Delete(delta, timeout_ms) => {
                let hwm = self.leader.high_watermark();
                let requested = match delta {
                    None => DeleteRecordsOffset::HighWatermark,
                    Some(d) => DeleteRecordsOffset::Offset(hwm.0 + d),
                };
                let offset = match self.leader.delete_records_offset(requested) {
                    Ok(offset) => offset,
                    Err(error) => {
                        assert_eq!(error, ErrorCode::OffsetOutOfRange);
                        assert!(matches!(delta, Some(d) if d > 0 || hwm.0 + d < 0));
                        return;
                    }
                };
                assert!(offset <= hwm && offset.0 >= 0);
                // The shell moves the log start offset, then reports it.
                let start = self.leader.log_start_offset().max(offset);
                let commands = self.leader.on_log_start_offset(start).unwrap();
                self.absorb(commands);
                let request = RequestId(self.next_request);
                self.next_request += 1;
                self.waiting_deletes.insert(request, offset);
                let commands = self
                    .leader
                    .await_delete_records(request, offset, timeout_ms, self.now_ms)
                    .unwrap();
                self.absorb(commands);
            }
            Op::Tick(dt) => {
                self.now_ms += dt;
                let commands = self.leader.tick(self.now_ms);
                self.absorb(commands);
            }
            Op::Answer(error) => self.answer(error),
            Op::ShrinkMetadata(i, stale) => {
                let mut isr = self.leader.isr().clone();
                isr.remove(&BrokerId(FOLLOWERS[i]));
                if stale {
                    self.metadata(isr, self.controller_partition_epoch - 1);
                } else {
                    self.controller_partition_epoch += 1;
                    self.metadata(isr, self.controller_partition_epoch);
                }
            }
            Op::CommitPendingByMetadata => {
                let Some(proposal) = self.last_sent.clone() else {
                    return;
                };
                let isr: BTreeSet<_> = proposal.new_isr.iter().map(|m| m.broker).collect();
                // Only a controller-valid proposal can be committed (KIP-903 epochs, version).
                let valid = proposal.partition_epoch.0 == self.controller_partition_epoch
                    && proposal.new_isr.iter().all(|m| {
                        m.broker.0 == 0
                            || m.broker_epoch
                                == Some(BrokerEpoch(self.epoch[m.broker.0 as usize - 1]))
                    });
                if valid {
                    self.controller_partition_epoch += 1;
                    self.metadata(isr, self.controller_partition_epoch);
                    self.last_sent = None;
                }
            }
        }
    }

    fn check(&self, hwm_before: Offset) {
        let l = &self.leader;
        l.check_invariants();
        let hwm = l.high_watermark();
        assert!(
            hwm >= hwm_before,
            "HWM moved backward: {hwm_before} -> {hwm}"
        );
        if hwm > hwm_before {
            ADVANCES.fetch_add(1, Ordering::Relaxed);
            assert!(!l.is_under_min_isr(), "HWM advanced with ISR {:?}", l.isr());
        }
        for (i, broker) in FOLLOWERS.iter().enumerate() {
            if l.isr().contains(&BrokerId(*broker)) && !self.lost[i] {
                assert!(
                    hwm.0 <= self.real_leo[i],
                    "HWM {hwm} beyond ISR member {broker}'s log end offset {}",
                    self.real_leo[i]
                );
            }
        }
        let parked: BTreeSet<_> = l.waiting_requests().collect();
        let expected: BTreeSet<_> = self.waiting.keys().copied().collect();
        assert_eq!(parked, expected);
        let parked: BTreeSet<_> = l.waiting_deletes().collect();
        let expected: BTreeSet<_> = self.waiting_deletes.keys().copied().collect();
        assert_eq!(parked, expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn leader_keeps_its_promises(min_isr in 1..4usize, ops in proptest::collection::vec(op(), 1..120)) {
        // KIP-966 HWM rule, HWM monotonic, purgatory accounting (module docs).
        let mut world = World::new(min_isr);
        for op in &ops {
            let before = world.leader.high_watermark();
            world.step(op);
            world.check(before);
        }
        // Ending the leadership answers every waiting request exactly once.
        let meta = PartitionMetadata {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(6),
            partition_epoch: PartitionEpoch(world.controller_partition_epoch + 1),
            replicas: vec![BrokerId(0), BrokerId(1), BrokerId(2)],
            isr: [BrokerId(1)].into(),
        };
        let commands = world.leader.on_partition_metadata(&meta, world.now_ms);
        world.absorb(commands);
        prop_assert!(world.waiting.is_empty());
        prop_assert!(world.waiting_deletes.is_empty());
        prop_assert!(world.leader.has_ended());
    }
}

#[test]
fn properties_are_not_vacuous() {
    // The random walks above do advance the HWM and acknowledge requests.
    let mut world = World::new(2);
    for op in [
        Op::Produce(3, 1_000),
        Op::Fetch(0, 3),
        Op::Fetch(1, 3),
        Op::Fetch(0, 0),
        Op::Fetch(1, 0),
        Op::Delete(Some(-1), 1_000),
        Op::Fetch(0, 0),
        Op::Fetch(1, 0),
        Op::Fetch(0, 0),
        Op::Fetch(1, 0),
    ] {
        let before = world.leader.high_watermark();
        world.step(&op);
        world.check(before);
    }
    assert_eq!(world.leader.high_watermark(), Offset(3));
    assert!(world.waiting.is_empty());
    assert!(world.waiting_deletes.is_empty());
    assert_eq!(
        world.real_start,
        [2, 2],
        "both followers followed the leader's start"
    );
    assert!(ADVANCES.load(Ordering::Relaxed) > 0 && ACKS.load(Ordering::Relaxed) > 0);
    assert!(DELETES.load(Ordering::Relaxed) > 0);
}
