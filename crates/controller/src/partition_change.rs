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
//! 6. **Epochs** are not computed here: the record sets `leader` only when the leader changes,
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

use crate::partition::PartitionState;
use crate::records::{LeaderChange, PartitionDelta};
use crate::types::{BrokerId, LeaderRecoveryState, RecoveryMode, UncleanRecoveryStrategy};

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
}

/// Everything besides the partition the function looks at.
#[derive(Clone, Copy, Debug)]
pub struct ChangeContext<'a> {
    /// Registered, unfenced brokers not in controlled shutdown.
    pub live: &'a BTreeSet<BrokerId>,
    /// Effective min ISR: min(`min.insync.replicas`, replication factor).
    pub min_isr: usize,
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
    }
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
    directories: Option<Vec<Option<crate::types::DirectoryId>>>,
    preferred: bool,
}

/// The fields of the partition after the change.
struct Outcome {
    isr: BTreeSet<BrokerId>,
    elr: BTreeSet<BrokerId>,
    last_known_elr: BTreeSet<BrokerId>,
    leader: Option<BrokerId>,
    leader_recovery_state: LeaderRecoveryState,
    directories: Option<Vec<Option<crate::types::DirectoryId>>>,
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
        }
    }
}

fn elr_mode(
    current: &PartitionState,
    target: Target,
    live: &BTreeSet<BrokerId>,
    ctx: &ChangeContext<'_>,
) -> ChangeDecision {
    let mut isr = target.isr;
    let (mut elr, mut last_known_elr) = if isr.len() >= ctx.min_isr {
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
    let valid =
        |r: &BrokerId| live.contains(r) && (isr.contains(r) || (isr.is_empty() && elr.contains(r)));
    let leader = choose_leader(current, target.preferred, valid);
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
    if isr.len() >= ctx.min_isr {
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
    let leader = choose_leader(current, target.preferred, valid);
    if leader.is_none() && !target.preferred && ctx.strategy == UncleanRecoveryStrategy::Proactive {
        // unclean.leader.election.enable=true: any live replica, in replica order.
        if let Some(&r) = current.replicas.iter().find(|r| live.contains(r)) {
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
    };
    finish(current, outcome, Some(election))
}

/// Election order: (preferred: replicas\[0\]), the current leader, then replica order.
fn choose_leader(
    current: &PartitionState,
    preferred: bool,
    valid: impl Fn(&BrokerId) -> bool,
) -> Option<BrokerId> {
    if preferred {
        if let Some(first) = current.replicas.first().filter(|r| valid(r)) {
            return Some(*first);
        }
    }
    if let Some(leader) = current.leader.filter(|l| valid(l)) {
        return Some(leader);
    }
    current.replicas.iter().copied().find(|r| valid(r))
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
