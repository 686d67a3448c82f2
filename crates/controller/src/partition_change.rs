//! The partition-change function: one pure function from (partition, proposed change, live
//! brokers, effective min ISR, strategy, ELR on/off) to an optional change record — Keel's
//! `PartitionChangeBuilder` — plus [`classify`], which says what a partition is waiting for.
//!
//! # Rules (ELR mode), in the order they are applied
//!
//! 1. **Target ISR.** AlterPartition proposes one; a broker that is fenced, in controlled
//!    shutdown, unregistered, or shut down uncleanly leaves it and is not electable for this
//!    change. An unfenced broker counts as live even before its unfence record is replayed.
//! 2. **ELR update** (KIP-966 "ELR update will take a proposed ISR"): proposed ISR ≥ min ISR →
//!    ELR and LastKnownELR become empty; below min ISR → ELR = (ELR ∪ current ISR) − proposed
//!    ISR − unclean-shutdown brokers, i.e. "retain the current members of the ELR, add (the
//!    current ISR − the proposed ISR) to ELR, remove the duplicate member in both ISR and ELR".
//! 3. **Unclean shutdown** (KIP-966 "when an ELR member has an unclean shutdown, it will be
//!    removed from ELR and added to the LastKnownELR"; issue 3 extends it to ISR members): a
//!    broker that shut down uncleanly leaves ISR and ELR and, if it was in either, joins
//!    LastKnownELR — unless the proposed ISR still meets min ISR, which clears LastKnownELR.
//! 4. **Election** (KIP-966 "the leader election decision will be made in the following order"):
//!    keep the current leader if it is still in the ISR and live; else the first live ISR member
//!    in replica order; else, if the ISR is empty, the first live ELR member in replica order —
//!    a *clean* election: ISR becomes \[it\], it leaves ELR. Otherwise no leader, and
//!    [`classify`] tells whether the partition waits for a fenced ELR member, needs unclean
//!    recovery (Balanced/Proactive), or is paused for an operator (Manual).
//! 5. **Normalise**: if the resulting ISR meets min ISR, ELR and LastKnownELR are emptied (the
//!    invariant "if ELR is not empty, the ISR is under min ISR", e.g. min ISR 1); LastKnownELR
//!    never overlaps ISR or ELR.
//! 6. **Reassignment** (Kafka's `PartitionReassignmentReplicas`): a reassignment puts the
//!    target replicas first and the replicas it removes after them in `replicas`, and
//!    completes in whichever change first finds every target replica in the ISR (minus the
//!    removed ones): `replicas` becomes the target, the removed replicas leave ISR, ELR and
//!    LastKnownELR (ELR and LastKnownELR never name a replica that is not assigned, which
//!    Kafka's builder does not ensure), and the leader, if removed, is replaced from the ISR in
//!    the target's order. A change that drops replicas sets the leader field (the same leader)
//!    so the leader epoch moves and the removed replicas are fenced. Min ISR is that of the
//!    target replication factor.
//! 7. **Epochs** are not computed here: the record sets `leader` only when the leader changes,
//!    and replay bumps the leader epoch iff `leader` is set and the partition epoch always
//!    ([`PartitionState::apply`]). No change → no record.
//!
//! # Classic mode (ELR off)
//!
//! Kafka before KIP-966: the ISR never becomes empty (the last member stays while leaderless),
//! only live ISR members are elected, ELR and LastKnownELR are cleared, and with the Proactive
//! strategy (= `unclean.leader.election.enable=true`) a leaderless partition elects the first
//! live replica in replica order uncleanly (ISR = \[it\], RECOVERING). Unclean shutdowns are
//! treated like fencing. This is the behaviour that loses data in the seeds' scenarios.

use std::collections::BTreeSet;

use crate::config::effective_min_isr;
use crate::partition::PartitionState;
use crate::records::{LeaderChange, PartitionDelta};
use crate::types::{
    BrokerId, DirectoryId, LeaderRecoveryState, RecoveryMode, UncleanRecoveryStrategy,
};

/// What is proposed for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposedChange {
    /// An AlterPartition from the leader, already validated.
    AlterIsr {
        /// The proposed ISR.
        isr: BTreeSet<BrokerId>,
        /// The leader recovery state the leader asks for.
        leader_recovery_state: LeaderRecoveryState,
    },
    /// The broker was fenced, entered controlled shutdown, re-registered after a clean
    /// shutdown, or was unregistered: it leaves the ISR (possibly into ELR) and is not
    /// electable.
    RemoveFromIsr(BrokerId),
    /// The broker re-registered after an unclean shutdown, or one of its log directories
    /// disappeared (KAFKA-14139): it leaves ISR and ELR and joins LastKnownELR. With
    /// `lost_directory` the replica's directory becomes unassigned.
    UncleanShutdown {
        /// The broker.
        broker: BrokerId,
        /// Whether the replica's directory is gone (a replaced disk).
        lost_directory: bool,
    },
    /// The broker was unfenced: elect it if the partition is leaderless and it is eligible.
    BrokerUnfenced(BrokerId),
    /// Re-run the online election (periodic check, strategy change).
    Reelect,
    /// A preferred-leader election: replicas\[0\] if it is eligible.
    ElectPreferred,
    /// An operator names the leader. An ISR member is elected cleanly; an ELR member becomes the
    /// single ISR member cleanly; anyone else is elected uncleanly (ISR = \[it\], RECOVERING, ELR
    /// and LastKnownELR cleared). The caller checks that it is a live replica.
    ElectChosen(BrokerId),
    /// The unclean recovery (or classic unclean election) chose this replica: ISR = \[it\],
    /// RECOVERING, ELR and LastKnownELR cleared.
    ElectRecovered(BrokerId),
    /// `min.insync.replicas` changed: clear ELR and LastKnownELR if the ISR meets min ISR.
    ClearElr,
    /// An operator's reassignment to `target` (distinct registered brokers, in preference
    /// order; checked by the caller). It replaces one in progress: the replicas are then those
    /// of both. `directories` is aligned with `target`: the log directory of a replica this
    /// adds (an existing replica keeps its own).
    Reassign {
        /// The target replicas.
        target: Vec<BrokerId>,
        /// The directory of each target replica, if it is new.
        directories: Vec<Option<DirectoryId>>,
    },
    /// Cancels the reassignment in progress: the replicas it was adding leave (ISR, ELR and
    /// LastKnownELR too), those it was removing stay. The caller checks that one is in progress
    /// and that [`cancel_keeps_committed_data`] holds.
    CancelReassignment,
}

/// Everything besides the partition the function looks at.
#[derive(Clone, Copy, Debug)]
pub struct ChangeContext<'a> {
    /// Registered, unfenced brokers not in controlled shutdown.
    pub live: &'a BTreeSet<BrokerId>,
    /// Effective min ISR: min(`min.insync.replicas`, replication factor).
    pub min_isr: usize,
    /// `min.insync.replicas` as configured (the effective min ISR of a change that moves the
    /// replication factor is computed from it).
    pub configured_min_isr: usize,
    /// The topic's unclean-recovery strategy.
    pub strategy: UncleanRecoveryStrategy,
    /// `eligible.leader.replicas.enable`.
    pub elr_enabled: bool,
}

/// How the leader after the change came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// The leader did not change.
    Unchanged,
    /// A new leader from the ISR.
    FromIsr(BrokerId),
    /// A new leader from the ELR (the ISR was empty): clean.
    FromElr(BrokerId),
    /// An unclean election: the new leader may lack committed data.
    Unclean(BrokerId),
    /// The partition lost its leader.
    Leaderless,
}

impl Election {
    /// The newly elected leader, if this change elected one.
    pub fn elected(self) -> Option<BrokerId> {
        match self {
            Election::FromIsr(b) | Election::FromElr(b) | Election::Unclean(b) => Some(b),
            Election::Unchanged | Election::Leaderless => None,
        }
    }
}

/// What a leaderless partition is waiting for (KIP-966 "Unclean recovery" and its metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionStatus {
    /// It has a leader.
    Led(BrokerId),
    /// The ISR is not empty but no member is live (classic mode: the last ISR member is down).
    WaitingForIsrMember(BTreeSet<BrokerId>),
    /// ISR empty, ELR members exist but none is live; Balanced/Manual wait for one.
    WaitingForElrMember(BTreeSet<BrokerId>),
    /// No clean candidate: the Unclean Recovery Manager must run (Balanced, or Proactive), or an
    /// operator started it ([`PartitionState::recovery_requested`]).
    NeedsUncleanRecovery,
    /// No clean candidate and the strategy is Manual: waiting for an operator.
    PausedForOperator,
}

/// The result of [`partition_change`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeDecision {
    /// The change record's fields, or `None` when nothing changes.
    pub delta: Option<PartitionDelta>,
    /// The partition state once `delta` is replayed.
    pub after: PartitionState,
    /// How the leader after the change came to be.
    pub election: Election,
}

/// The partition-change function (see the module docs for the rules).
pub fn partition_change(
    current: &PartitionState,
    change: &ProposedChange,
    ctx: &ChangeContext<'_>,
) -> ChangeDecision {
    let mut live = ctx.live.clone();
    let mut target = Target {
        isr: current.isr.clone(),
        unclean: BTreeSet::new(),
        leader_recovery_state: current.leader_recovery_state,
        directories: None,
        preferred: false,
        replicas: current.replicas.clone(),
        adding: current.adding_replicas.clone(),
        removing: current.removing_replicas.clone(),
    };
    match change {
        ProposedChange::AlterIsr {
            isr,
            leader_recovery_state,
        } => {
            target.isr = isr.clone();
            target.leader_recovery_state = *leader_recovery_state;
        }
        ProposedChange::RemoveFromIsr(broker) => {
            target.isr.remove(broker);
            live.remove(broker);
        }
        ProposedChange::UncleanShutdown {
            broker,
            lost_directory,
        } => {
            target.isr.remove(broker);
            live.remove(broker);
            if ctx.elr_enabled {
                target.unclean.insert(*broker);
            }
            if *lost_directory {
                target.directories = Some(unassign_directory(current, *broker));
            }
        }
        ProposedChange::BrokerUnfenced(broker) => {
            live.insert(*broker);
        }
        ProposedChange::Reelect => {}
        ProposedChange::ElectPreferred => target.preferred = true,
        ProposedChange::ElectChosen(leader) => {
            return elect_chosen(current, *leader, ctx);
        }
        ProposedChange::ElectRecovered(leader) => {
            return elect_unclean(current, *leader);
        }
        ProposedChange::ClearElr => {
            if ctx.elr_enabled && current.isr.len() >= ctx.min_isr {
                let mut next = Outcome::from(current);
                next.elr.clear();
                next.last_known_elr.clear();
                return finish(current, next, None);
            }
            return finish(current, Outcome::from(current), None);
        }
        ProposedChange::Reassign {
            target: replicas,
            directories,
        } => reassign(current, &mut target, replicas, directories),
        ProposedChange::CancelReassignment => cancel_reassignment(current, &mut target),
    }
    complete_reassignment(current, &mut target);
    if ctx.elr_enabled {
        elr_mode(current, target, &live, ctx)
    } else {
        classic_mode(current, target, &live, ctx)
    }
}

/// What the change aims at before the election.
struct Target {
    isr: BTreeSet<BrokerId>,
    unclean: BTreeSet<BrokerId>,
    leader_recovery_state: LeaderRecoveryState,
    /// Set when the directories change (always with `replicas`).
    directories: Option<Vec<Option<DirectoryId>>>,
    preferred: bool,
    replicas: Vec<BrokerId>,
    adding: Vec<BrokerId>,
    removing: Vec<BrokerId>,
}

impl Target {
    /// The replication factor the change aims at.
    fn replication_factor(&self) -> usize {
        self.replicas.len() - self.removing.len()
    }
}

/// The fields of the partition after the change.
struct Outcome {
    isr: BTreeSet<BrokerId>,
    elr: BTreeSet<BrokerId>,
    last_known_elr: BTreeSet<BrokerId>,
    leader: Option<BrokerId>,
    leader_recovery_state: LeaderRecoveryState,
    directories: Option<Vec<Option<DirectoryId>>>,
    replicas: Vec<BrokerId>,
    adding: Vec<BrokerId>,
    removing: Vec<BrokerId>,
}

impl From<&PartitionState> for Outcome {
    fn from(p: &PartitionState) -> Self {
        Outcome {
            isr: p.isr.clone(),
            elr: p.elr.clone(),
            last_known_elr: p.last_known_elr.clone(),
            leader: p.leader,
            leader_recovery_state: p.leader_recovery_state,
            directories: None,
            replicas: p.replicas.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
        }
    }
}

/// Starts (or replaces) a reassignment to `replicas` (Kafka's `PartitionReassignmentReplicas`
/// from the current replicas to the target): the target first, then the replicas it removes.
fn reassign(
    current: &PartitionState,
    target: &mut Target,
    replicas: &[BrokerId],
    directories: &[Option<DirectoryId>],
) {
    let removing: Vec<BrokerId> = sorted_difference(&current.replicas, replicas);
    let adding: Vec<BrokerId> = sorted_difference(replicas, &current.replicas);
    let mut next: Vec<BrokerId> = replicas.to_vec();
    next.extend(&removing);
    let dirs = next
        .iter()
        .map(|r| match current.replicas.iter().position(|c| c == r) {
            Some(_) => current.directory_of(*r),
            None => replicas
                .iter()
                .position(|t| t == r)
                .and_then(|i| directories.get(i).copied().flatten()),
        })
        .collect();
    target.directories = Some(dirs);
    target.replicas = next;
    target.adding = adding;
    target.removing = removing;
}

/// Cancels the reassignment in progress (Kafka's `PartitionReassignmentRevert`): the replicas
/// it was adding leave.
fn cancel_reassignment(current: &PartitionState, target: &mut Target) {
    let adding: BTreeSet<BrokerId> = current.adding_replicas.iter().copied().collect();
    target.replicas = current
        .replicas
        .iter()
        .copied()
        .filter(|r| !adding.contains(r))
        .collect();
    target.directories = Some(
        target
            .replicas
            .iter()
            .map(|r| current.directory_of(*r))
            .collect(),
    );
    target.isr = &target.isr - &adding;
    target.adding.clear();
    target.removing.clear();
}

/// Whether cancelling `p`'s reassignment keeps every committed record as safe as it is: when an
/// added replica is in the ISR or the ELR it holds committed data, so the replicas that stay in
/// the ISR must still meet the min ISR of the original replicas (`configured_min_isr` is
/// `min.insync.replicas`). Otherwise the cancel would leave fewer copies than the min ISR
/// promises — at worst none in sync, which Kafka resolves by an unclean election when that is
/// enabled — and KIP-966's "min ISR - 1 unclean shutdowns lose nothing" would no longer hold.
pub fn cancel_keeps_committed_data(p: &PartitionState, configured_min_isr: usize) -> bool {
    let holds_data = p
        .adding_replicas
        .iter()
        .any(|r| p.isr.contains(r) || p.elr.contains(r));
    if !holds_data {
        return true;
    }
    let kept = p
        .isr
        .iter()
        .filter(|r| !p.adding_replicas.contains(r))
        .count();
    let original_rf = p.replicas.len() - p.adding_replicas.len();
    kept >= effective_min_isr(configured_min_isr, original_rf)
}

/// Completes a reassignment in progress when every target replica is in the target ISR minus
/// the removed replicas (Kafka's `maybeCompleteReassignment`).
fn complete_reassignment(current: &PartitionState, target: &mut Target) {
    if target.adding.is_empty() && target.removing.is_empty() {
        return;
    }
    let removing: BTreeSet<BrokerId> = target.removing.iter().copied().collect();
    let isr = &target.isr - &removing;
    let directories = target
        .directories
        .clone()
        .unwrap_or_else(|| current.directories.clone());
    let (replicas, directories): (Vec<BrokerId>, Vec<Option<DirectoryId>>) = target
        .replicas
        .iter()
        .copied()
        .zip(directories)
        .filter(|(r, _)| !removing.contains(r))
        .unzip();
    if isr.is_empty() || replicas.is_empty() || !replicas.iter().all(|r| isr.contains(r)) {
        return;
    }
    target.isr = isr;
    target.replicas = replicas;
    target.directories = Some(directories);
    target.adding.clear();
    target.removing.clear();
}

/// The members of `a` not in `b`, ascending (Kafka computes them into a `TreeSet`).
fn sorted_difference(a: &[BrokerId], b: &[BrokerId]) -> Vec<BrokerId> {
    let set: BTreeSet<BrokerId> = a.iter().copied().filter(|r| !b.contains(r)).collect();
    set.into_iter().collect()
}

fn elr_mode(
    current: &PartitionState,
    target: Target,
    live: &BTreeSet<BrokerId>,
    ctx: &ChangeContext<'_>,
) -> ChangeDecision {
    let min_isr = effective_min_isr(ctx.configured_min_isr, target.replication_factor());
    let mut isr = target.isr;
    let (mut elr, mut last_known_elr) = if isr.len() >= min_isr {
        (BTreeSet::new(), BTreeSet::new())
    } else {
        let was_eligible: BTreeSet<BrokerId> = current.elr.union(&current.isr).copied().collect();
        let elr = &(&was_eligible - &isr) - &target.unclean;
        let lost: BTreeSet<BrokerId> = target
            .unclean
            .intersection(&was_eligible)
            .copied()
            .collect();
        (elr, &current.last_known_elr | &lost)
    };
    // A replica a reassignment (or its cancellation) takes out is in neither.
    elr.retain(|r| target.replicas.contains(r));
    last_known_elr.retain(|r| target.replicas.contains(r));
    let valid =
        |r: &BrokerId| live.contains(r) && (isr.contains(r) || (isr.is_empty() && elr.contains(r)));
    let leader = choose_leader(current, &target.replicas, target.preferred, valid);
    let mut election = election_kind(current.leader, leader, Election::FromIsr);
    if let Some(l) = leader {
        if !isr.contains(&l) {
            // KIP-966: "If the replica is an ELR member and ISR is empty, this replica will be
            // elected as leader, added to ISR, and removed from ELR."
            isr = BTreeSet::from([l]);
            elr.remove(&l);
            election = Election::FromElr(l);
        }
    }
    if isr.len() >= min_isr {
        elr.clear();
        last_known_elr.clear();
    }
    last_known_elr = &(&last_known_elr - &isr) - &elr;
    let outcome = Outcome {
        isr,
        elr,
        last_known_elr,
        leader,
        leader_recovery_state: target.leader_recovery_state,
        directories: target.directories,
        replicas: target.replicas,
        adding: target.adding,
        removing: target.removing,
    };
    finish(current, outcome, Some(election))
}

fn classic_mode(
    current: &PartitionState,
    target: Target,
    live: &BTreeSet<BrokerId>,
    ctx: &ChangeContext<'_>,
) -> ChangeDecision {
    // Kafka with ELR off: "the ISR can never become empty (the last member stays in ISR while
    // leaderless)".
    let isr = if target.isr.is_empty() {
        current.isr.clone()
    } else {
        target.isr
    };
    let valid = |r: &BrokerId| live.contains(r) && isr.contains(r);
    let leader = choose_leader(current, &target.replicas, target.preferred, valid);
    if leader.is_none() && !target.preferred && ctx.strategy == UncleanRecoveryStrategy::Proactive {
        // unclean.leader.election.enable=true: any live replica, in replica order.
        if let Some(&r) = target.replicas.iter().find(|r| live.contains(r)) {
            let mut decision = elect_unclean(current, r);
            if let Some(delta) = decision.delta.as_mut() {
                if target.directories.is_some() {
                    delta.directories = target.directories;
                    decision.after = current.apply(delta);
                }
            }
            return decision;
        }
    }
    let election = election_kind(current.leader, leader, Election::FromIsr);
    let outcome = Outcome {
        isr,
        elr: BTreeSet::new(),
        last_known_elr: BTreeSet::new(),
        leader,
        leader_recovery_state: target.leader_recovery_state,
        directories: target.directories,
        replicas: target.replicas,
        adding: target.adding,
        removing: target.removing,
    };
    finish(current, outcome, Some(election))
}

/// Election order: (preferred: replicas\[0\]), the current leader, then replica order (the
/// replicas after the change).
fn choose_leader(
    current: &PartitionState,
    replicas: &[BrokerId],
    preferred: bool,
    valid: impl Fn(&BrokerId) -> bool,
) -> Option<BrokerId> {
    if preferred {
        if let Some(first) = replicas.first().filter(|r| valid(r)) {
            return Some(*first);
        }
    }
    if let Some(leader) = current.leader.filter(|l| valid(l)) {
        return Some(leader);
    }
    replicas.iter().copied().find(|r| valid(r))
}

fn election_kind(
    before: Option<BrokerId>,
    after: Option<BrokerId>,
    kind: fn(BrokerId) -> Election,
) -> Election {
    match (before, after) {
        (b, a) if b == a => Election::Unchanged,
        (_, None) => Election::Leaderless,
        (_, Some(l)) => kind(l),
    }
}

/// The unclean election shape: ISR = \[leader\], RECOVERING, ELR and LastKnownELR cleared.
fn elect_unclean(current: &PartitionState, leader: BrokerId) -> ChangeDecision {
    if !current.is_replica(leader) {
        return finish(current, Outcome::from(current), None);
    }
    let outcome = Outcome {
        isr: BTreeSet::from([leader]),
        elr: BTreeSet::new(),
        last_known_elr: BTreeSet::new(),
        leader: Some(leader),
        leader_recovery_state: LeaderRecoveryState::Recovering,
        directories: None,
        replicas: current.replicas.clone(),
        adding: current.adding_replicas.clone(),
        removing: current.removing_replicas.clone(),
    };
    let mut decision = finish(current, outcome, None);
    decision.election = if current.leader == Some(leader) {
        Election::Unchanged
    } else {
        Election::Unclean(leader)
    };
    decision
}

/// An operator's choice: clean when the broker is in the ISR, or in the ELR; unclean otherwise.
fn elect_chosen(
    current: &PartitionState,
    leader: BrokerId,
    ctx: &ChangeContext<'_>,
) -> ChangeDecision {
    if !current.is_replica(leader) || current.leader == Some(leader) {
        return finish(current, Outcome::from(current), None);
    }
    if current.isr.contains(&leader) {
        let mut outcome = Outcome::from(current);
        outcome.leader = Some(leader);
        let mut decision = finish(current, outcome, None);
        decision.election = Election::FromIsr(leader);
        return decision;
    }
    if ctx.elr_enabled && current.elr.contains(&leader) {
        // The ELR member has every committed record; the ISR members it replaces also hold data
        // up to the HWM, so they move to ELR by the ordinary ELR update.
        let isr = BTreeSet::from([leader]);
        let mut outcome = Outcome::from(current);
        if isr.len() >= ctx.min_isr {
            outcome.elr.clear();
            outcome.last_known_elr.clear();
        } else {
            let was: BTreeSet<BrokerId> = current.elr.union(&current.isr).copied().collect();
            outcome.elr = &was - &isr;
            outcome.last_known_elr = &(&current.last_known_elr - &isr) - &outcome.elr;
        }
        outcome.isr = isr;
        outcome.leader = Some(leader);
        let mut decision = finish(current, outcome, None);
        decision.election = Election::FromElr(leader);
        return decision;
    }
    elect_unclean(current, leader)
}

fn unassign_directory(
    current: &PartitionState,
    broker: BrokerId,
) -> Vec<Option<crate::types::DirectoryId>> {
    current
        .replicas
        .iter()
        .zip(current.directories.iter())
        .map(|(r, d)| if *r == broker { None } else { *d })
        .collect()
}

/// Diffs `outcome` against `current` into a delta (no record when nothing differs).
fn finish(
    current: &PartitionState,
    outcome: Outcome,
    election: Option<Election>,
) -> ChangeDecision {
    let mut delta = PartitionDelta::default();
    if outcome.isr != current.isr {
        delta.isr = Some(outcome.isr);
    }
    if outcome.elr != current.elr {
        delta.elr = Some(outcome.elr);
    }
    if outcome.last_known_elr != current.last_known_elr {
        delta.last_known_elr = Some(outcome.last_known_elr);
    }
    if outcome.leader != current.leader {
        delta.leader = Some(LeaderChange::from_leader(outcome.leader));
    }
    if outcome.leader_recovery_state != current.leader_recovery_state {
        delta.leader_recovery_state = Some(outcome.leader_recovery_state);
    }
    if let Some(directories) = outcome.directories {
        if directories != current.directories {
            delta.directories = Some(directories);
        }
    }
    if outcome.replicas != current.replicas {
        // A replica taken out is fenced by a new leader epoch (Kafka's
        // `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`).
        // A leaderless partition is fenced by its next election anyway.
        let dropped = !current
            .replicas
            .iter()
            .all(|r| outcome.replicas.contains(r));
        if delta.leader.is_none() && dropped && outcome.leader.is_some() {
            delta.leader = Some(LeaderChange::from_leader(outcome.leader));
        }
        delta.replicas = Some(outcome.replicas);
    }
    if outcome.adding != current.adding_replicas {
        delta.adding_replicas = Some(outcome.adding);
    }
    if outcome.removing != current.removing_replicas {
        delta.removing_replicas = Some(outcome.removing);
    }
    let election = election.unwrap_or(Election::Unchanged);
    if delta.is_empty() {
        return ChangeDecision {
            delta: None,
            after: current.clone(),
            election: Election::Unchanged,
        };
    }
    let after = current.apply(&delta);
    ChangeDecision {
        delta: Some(delta),
        after,
        election,
    }
}

/// What a partition is waiting for, given who is live and its strategy.
pub fn classify(p: &PartitionState, ctx: &ChangeContext<'_>) -> PartitionStatus {
    if let Some(leader) = p.leader {
        return PartitionStatus::Led(leader);
    }
    // An operator started a recovery (ElectLeaders UNCLEAN, e.g. of a paused partition): it runs
    // whatever the strategy would have waited for.
    if ctx.elr_enabled && p.recovery_requested.is_some() {
        return PartitionStatus::NeedsUncleanRecovery;
    }
    if !ctx.elr_enabled || !p.isr.is_empty() {
        return PartitionStatus::WaitingForIsrMember(p.isr.clone());
    }
    if !p.elr.is_empty() {
        // KIP-966: "If there are fenced ELR members: if the unclean.recovery.strategy=Proactive,
        // then an unclean recovery will happen. Otherwise, we will wait for the fenced ELR
        // members to be unfenced."
        return match ctx.strategy {
            UncleanRecoveryStrategy::Proactive => PartitionStatus::NeedsUncleanRecovery,
            UncleanRecoveryStrategy::Balanced | UncleanRecoveryStrategy::Manual => {
                PartitionStatus::WaitingForElrMember(p.elr.clone())
            }
        };
    }
    // KIP-966: "If there are no ELR members: balanced → unclean recovery; Manual → the
    // controller will not attempt to elect a leader."
    match ctx.strategy {
        UncleanRecoveryStrategy::Manual => PartitionStatus::PausedForOperator,
        UncleanRecoveryStrategy::Proactive | UncleanRecoveryStrategy::Balanced => {
            PartitionStatus::NeedsUncleanRecovery
        }
    }
}

/// The mode of the unclean recovery a partition needs: the one an operator asked for, else its
/// strategy's.
pub fn recovery_mode(p: &PartitionState, strategy: UncleanRecoveryStrategy) -> RecoveryMode {
    p.recovery_requested
        .unwrap_or_else(|| RecoveryMode::for_strategy(strategy))
}

#[cfg(test)]
#[path = "partition_change_tests.rs"]
mod tests;
