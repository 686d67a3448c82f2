//! Rule tables for [`partition_change`] and [`classify`], ELR mode and classic mode. Every row
//! cites the KIP-966 sentence (or issue 3 bullet) it checks.

use std::collections::BTreeSet;

use super::*;
use crate::types::{LeaderEpoch, PartitionEpoch};

use UncleanRecoveryStrategy::{Balanced, Manual, Proactive};

fn set(ids: &[i32]) -> BTreeSet<BrokerId> {
    ids.iter().map(|b| BrokerId(*b)).collect()
}

fn part(replicas: &[i32], isr: &[i32], elr: &[i32], lkelr: &[i32], leader: i32) -> PartitionState {
    let mut p = PartitionState::new(
        replicas.iter().map(|b| BrokerId(*b)).collect(),
        vec![None; replicas.len()],
        set(isr),
        (leader >= 0).then_some(BrokerId(leader)),
    );
    p.elr = set(elr);
    p.last_known_elr = set(lkelr);
    p.leader_epoch = LeaderEpoch(10);
    p.partition_epoch = PartitionEpoch(20);
    p
}

struct Row {
    cite: &'static str,
    elr: bool,
    strategy: UncleanRecoveryStrategy,
    min_isr: usize,
    live: &'static [i32],
    before: PartitionState,
    change: ProposedChange,
    /// (isr, elr, last_known_elr, leader)
    after: (&'static [i32], &'static [i32], &'static [i32], i32),
    /// None = no record expected.
    leader_epoch: Option<i32>,
    status: &'static str,
}

fn status_name(s: &PartitionStatus) -> &'static str {
    match s {
        PartitionStatus::Led(_) => "led",
        PartitionStatus::WaitingForIsrMember(_) => "isr",
        PartitionStatus::WaitingForElrMember(_) => "elr",
        PartitionStatus::NeedsUncleanRecovery => "recovery",
        PartitionStatus::PausedForOperator => "paused",
    }
}

fn check(rows: Vec<Row>) {
    for row in rows {
        let live = set(row.live);
        let ctx = ChangeContext {
            live: &live,
            min_isr: row.min_isr,
            configured_min_isr: row.min_isr,
            strategy: row.strategy,
            elr_enabled: row.elr,
        };
        let d = partition_change(&row.before, &row.change, &ctx);
        let (isr, elr, lkelr, leader) = row.after;
        let a = &d.after;
        assert_eq!(a.isr, set(isr), "ISR: {}", row.cite);
        assert_eq!(a.elr, set(elr), "ELR: {}", row.cite);
        assert_eq!(a.last_known_elr, set(lkelr), "LastKnownELR: {}", row.cite);
        assert_eq!(a.leader.map_or(-1, |b| b.0), leader, "leader: {}", row.cite);
        match row.leader_epoch {
            None => {
                assert!(d.delta.is_none(), "no record expected: {}", row.cite);
                assert_eq!(a, &row.before, "{}", row.cite);
            }
            Some(le) => {
                assert!(d.delta.is_some(), "record expected: {}", row.cite);
                assert_eq!(
                    a.leader_epoch,
                    LeaderEpoch(le),
                    "leader epoch: {}",
                    row.cite
                );
                assert_eq!(
                    a.partition_epoch,
                    PartitionEpoch(21),
                    "partition epoch: {}",
                    row.cite
                );
            }
        }
        let min = if row.elr { row.min_isr } else { usize::MAX };
        a.check_invariants(min)
            .unwrap_or_else(|e| panic!("{e}: {}", row.cite));
        assert_eq!(
            status_name(&classify(a, &ctx)),
            row.status,
            "status: {}",
            row.cite
        );
    }
}

#[test]
#[rustfmt::skip]
fn elr_update_rules() {
    // KIP-966 "ELR update will take a proposed ISR and the controller does the following".
    let alter = |isr: &[i32]| ProposedChange::AlterIsr {
        isr: set(isr),
        leader_recovery_state: LeaderRecoveryState::Recovered,
    };
    let all = &[1, 2, 3, 4];
    check(vec![
        Row {
            cite: "proposed ISR >= min ISR: update the ISR and empty the ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: all,
            before: part(all, &[1, 2], &[3, 4], &[], 1),
            change: alter(&[1, 2, 3]),
            after: (&[1, 2, 3], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "proposed ISR >= min ISR also empties LastKnownELR",
            elr: true, strategy: Balanced, min_isr: 2, live: all,
            before: part(all, &[1], &[], &[3, 4], 1),
            change: alter(&[1, 2]),
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "below min ISR: add (the current ISR - the proposed ISR) to ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: all,
            before: part(all, all, &[], &[], 1),
            change: alter(&[1, 2]),
            after: (&[1, 2], &[3, 4], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "below min ISR: retain the current members of the ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: all,
            before: part(all, &[1, 2], &[4], &[], 1),
            change: alter(&[1]),
            after: (&[1], &[2, 4], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "below min ISR: remove the duplicate member in both ISR and ELR from ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: all,
            before: part(all, &[1], &[2, 3], &[], 1),
            change: alter(&[1, 2]),
            after: (&[1, 2], &[3], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "a shrink that keeps ISR >= min ISR puts nobody in ELR",
            elr: true, strategy: Balanced, min_isr: 2, live: all,
            before: part(all, all, &[], &[], 1),
            change: alter(&[1, 2]),
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "the replica gets fenced: ELR update with the new ISR, no leader epoch bump",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 3],
            before: part(&[1, 2, 3], &[1, 2], &[], &[], 1),
            change: ProposedChange::RemoveFromIsr(BrokerId(2)),
            after: (&[1], &[2], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "the ISR can be empty now; fenced ELR members stay in ELR",
            elr: true, strategy: Balanced, min_isr: 2, live: &[3],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: ProposedChange::RemoveFromIsr(BrokerId(1)),
            after: (&[], &[1, 2], &[], -1), leader_epoch: Some(11), status: "elr",
        },
        Row {
            cite: "no change, no record",
            elr: true, strategy: Balanced, min_isr: 2, live: all,
            before: part(all, &[1, 2], &[], &[], 1),
            change: alter(&[1, 2]),
            after: (&[1, 2], &[], &[], 1), leader_epoch: None, status: "led",
        },
    ]);
}

#[test]
#[rustfmt::skip]
fn unclean_shutdown_rules() {
    // KIP-966 "The controller will remove the ELR member if it registers with an unclean
    // shutdown"; "it will be removed from ELR and added to the LastKnownELR"; issue 3.
    let unclean = |b: i32| ProposedChange::UncleanShutdown {
        broker: BrokerId(b),
        lost_directory: false,
    };
    check(vec![
        Row {
            cite: "an ELR member with an unclean shutdown moves to LastKnownELR; no leader epoch bump",
            elr: true, strategy: Balanced, min_isr: 3, live: &[1],
            before: part(&[1, 2, 3], &[1], &[2, 3], &[], 1),
            change: unclean(3),
            after: (&[1], &[2], &[3], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "an ISR member with an unclean shutdown leaves ISR and ELR, into LastKnownELR",
            elr: true, strategy: Balanced, min_isr: 3, live: &[1],
            before: part(&[1, 2, 3], &[1, 2], &[3], &[], 1),
            change: unclean(2),
            after: (&[1], &[3], &[2], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "an unclean leader: no clean candidate left, Balanced -> unclean recovery",
            elr: true, strategy: Balanced, min_isr: 2, live: &[],
            before: part(&[1, 2, 3], &[1], &[], &[2, 3], 1),
            change: unclean(1),
            after: (&[], &[], &[1, 2, 3], -1), leader_epoch: Some(11), status: "recovery",
        },
        Row {
            cite: "unclean shutdown while the ISR still meets min ISR: LastKnownELR stays empty",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 2],
            before: part(&[1, 2, 3], &[1, 2, 3], &[], &[], 1),
            change: unclean(3),
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "an unclean shutdown of a replica outside ISR and ELR changes nothing",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: unclean(3),
            after: (&[1], &[2], &[], 1), leader_epoch: None, status: "led",
        },
        Row {
            cite: "classic mode: an unclean shutdown is handled like fencing",
            elr: false, strategy: Balanced, min_isr: 2, live: &[1, 2],
            before: part(&[1, 2, 3], &[1, 2, 3], &[], &[], 1),
            change: unclean(3),
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
    ]);
}

#[test]
#[rustfmt::skip]
fn election_order() {
    // KIP-966 "the leader election decision will be made in the following order when the
    // current leader is fenced".
    let fence = |b: i32| ProposedChange::RemoveFromIsr(BrokerId(b));
    check(vec![
        Row {
            cite: "If there are other ISR members, choose an ISR member",
            elr: true, strategy: Balanced, min_isr: 2, live: &[2, 3],
            before: part(&[1, 2, 3], &[1, 2, 3], &[], &[], 1),
            change: fence(1),
            after: (&[2, 3], &[], &[], 2), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "If there are unfenced ELR members, choose an ELR member (ISR becomes [it])",
            elr: true, strategy: Balanced, min_isr: 3, live: &[3],
            before: part(&[1, 2, 3], &[1], &[2, 3], &[], 1),
            change: fence(1),
            after: (&[3], &[1, 2], &[], 3), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "fenced ELR members, Proactive: an unclean recovery will happen",
            elr: true, strategy: Proactive, min_isr: 2, live: &[],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: fence(1),
            after: (&[], &[1, 2], &[], -1), leader_epoch: Some(11), status: "recovery",
        },
        Row {
            cite: "fenced ELR members, Balanced: wait for the fenced ELR members to be unfenced",
            elr: true, strategy: Balanced, min_isr: 2, live: &[],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: fence(1),
            after: (&[], &[1, 2], &[], -1), leader_epoch: Some(11), status: "elr",
        },
        Row {
            cite: "fenced ELR members, Manual: wait for the fenced ELR members to be unfenced",
            elr: true, strategy: Manual, min_isr: 2, live: &[],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: fence(1),
            after: (&[], &[1, 2], &[], -1), leader_epoch: Some(11), status: "elr",
        },
        Row {
            cite: "no ELR members, Manual: the controller will not attempt to elect a leader",
            elr: true, strategy: Manual, min_isr: 2, live: &[2, 3],
            before: part(&[1, 2, 3], &[], &[], &[1], -1),
            change: ProposedChange::Reelect,
            after: (&[], &[], &[1], -1), leader_epoch: None, status: "paused",
        },
        Row {
            cite: "no ELR members, Proactive: unclean recovery",
            elr: true, strategy: Proactive, min_isr: 2, live: &[2, 3],
            before: part(&[1, 2, 3], &[], &[], &[1], -1),
            change: ProposedChange::Reelect,
            after: (&[], &[], &[1], -1), leader_epoch: None, status: "recovery",
        },
        Row {
            cite: "The replica gets unfenced: an ELR member with an empty ISR is elected, added to ISR, removed from ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: &[],
            before: part(&[1, 2, 3], &[], &[1, 2, 3], &[], -1),
            change: ProposedChange::BrokerUnfenced(BrokerId(2)),
            after: (&[2], &[1, 3], &[], 2), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "unfencing a non-ELR replica elects nobody",
            elr: true, strategy: Balanced, min_isr: 2, live: &[],
            before: part(&[1, 2, 3], &[], &[2], &[], -1),
            change: ProposedChange::BrokerUnfenced(BrokerId(3)),
            after: (&[], &[2], &[], -1), leader_epoch: None, status: "elr",
        },
        Row {
            cite: "min ISR 1: electing an ELR member brings the ISR to min ISR, so ELR empties",
            elr: true, strategy: Balanced, min_isr: 1, live: &[],
            before: part(&[1, 2], &[], &[1], &[2], -1),
            change: ProposedChange::BrokerUnfenced(BrokerId(1)),
            after: (&[1], &[], &[], 1), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "preferred election: replicas[0] if it is an ISR member",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 2, 3],
            before: part(&[1, 2, 3], &[1, 2, 3], &[], &[], 2),
            change: ProposedChange::ElectPreferred,
            after: (&[1, 2, 3], &[], &[], 1), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "preferred election: replicas[0] outside the ISR keeps the current leader",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 2, 3],
            before: part(&[1, 2, 3], &[2, 3], &[], &[], 2),
            change: ProposedChange::ElectPreferred,
            after: (&[2, 3], &[], &[], 2), leader_epoch: None, status: "led",
        },
    ]);
}

#[test]
#[rustfmt::skip]
fn unclean_and_manual_elections() {
    // KIP-966 "The one with the highest leader epoch and the longest log end offset will be the
    // new leader"; issue 3: "it becomes leader with ISR = [it] and recovery state RECOVERING;
    // ELR and LastKnownELR are cleared"; manual election.
    check(vec![
        Row {
            cite: "recovery winner: ISR = [it], RECOVERING, ELR and LastKnownELR cleared",
            elr: true, strategy: Proactive, min_isr: 2, live: &[3],
            before: part(&[1, 2, 3], &[], &[2], &[1], -1),
            change: ProposedChange::ElectRecovered(BrokerId(3)),
            after: (&[3], &[], &[], 3), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "manual election of an ISR member: only the leader changes",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 2, 3],
            before: part(&[1, 2, 3], &[1, 2, 3], &[], &[], 1),
            change: ProposedChange::ElectChosen(BrokerId(3)),
            after: (&[1, 2, 3], &[], &[], 3), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "manual election of an ELR member: clean, the old ISR moves to ELR",
            elr: true, strategy: Balanced, min_isr: 3, live: &[1, 2, 3],
            before: part(&[1, 2, 3], &[1], &[2], &[], 1),
            change: ProposedChange::ElectChosen(BrokerId(2)),
            after: (&[2], &[1], &[], 2), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "manual election outside ISR and ELR: unclean",
            elr: true, strategy: Manual, min_isr: 2, live: &[3],
            before: part(&[1, 2, 3], &[], &[], &[1, 2], -1),
            change: ProposedChange::ElectChosen(BrokerId(3)),
            after: (&[3], &[], &[], 3), leader_epoch: Some(11), status: "led",
        },
    ]);
    let live = set(&[3]);
    let ctx = ChangeContext { live: &live, min_isr: 2, configured_min_isr: 2, strategy: Manual, elr_enabled: true };
    let before = part(&[1, 2, 3], &[], &[], &[1, 2], -1);
    let d = partition_change(&before, &ProposedChange::ElectChosen(BrokerId(3)), &ctx);
    assert_eq!(d.after.leader_recovery_state, LeaderRecoveryState::Recovering);
    assert_eq!(d.election, Election::Unclean(BrokerId(3)));
}

#[test]
#[rustfmt::skip]
fn classic_mode_rules() {
    // issue 3: "Classic mode (ELR off): the ISR never empties (the last member stays while
    // leaderless), only ISR members are elected, and unclean.leader.election.enable=true elects
    // any live replica".
    let fence = |b: i32| ProposedChange::RemoveFromIsr(BrokerId(b));
    check(vec![
        Row {
            cite: "classic: the last ISR member stays in the ISR while leaderless",
            elr: false, strategy: Balanced, min_isr: 2, live: &[2, 3],
            before: part(&[1, 2, 3], &[1], &[], &[], 1),
            change: fence(1),
            after: (&[1], &[], &[], -1), leader_epoch: Some(11), status: "isr",
        },
        Row {
            cite: "classic: a shrink below min ISR creates no ELR",
            elr: false, strategy: Balanced, min_isr: 3, live: &[1, 2, 3, 4],
            before: part(&[1, 2, 3, 4], &[1, 2, 3, 4], &[], &[], 1),
            change: ProposedChange::AlterIsr { isr: set(&[1, 2]), leader_recovery_state: LeaderRecoveryState::Recovered },
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "classic: unclean.leader.election.enable=true (Proactive) elects any live replica",
            elr: false, strategy: Proactive, min_isr: 2, live: &[3],
            before: part(&[1, 2, 3], &[1], &[], &[], 1),
            change: fence(1),
            after: (&[3], &[], &[], 3), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "classic: the last ISR member is re-elected when it comes back (data loss in the seeds)",
            elr: false, strategy: Balanced, min_isr: 2, live: &[2, 3],
            before: part(&[1, 2, 3], &[1], &[], &[], -1),
            change: ProposedChange::BrokerUnfenced(BrokerId(1)),
            after: (&[1], &[], &[], 1), leader_epoch: Some(11), status: "led",
        },
        Row {
            cite: "classic: leftover ELR is cleared by the next change",
            elr: false, strategy: Balanced, min_isr: 2, live: &[1, 2, 3],
            before: part(&[1, 2, 3], &[1], &[2], &[3], 1),
            change: ProposedChange::AlterIsr { isr: set(&[1, 2]), leader_recovery_state: LeaderRecoveryState::Recovered },
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
    ]);
}

#[test]
#[rustfmt::skip]
fn min_isr_change_rules() {
    // KIP-966 "When updating the config min.insync.replicas, if the new min ISR <= current ISR,
    // the ELR will be removed."
    check(vec![
        Row {
            cite: "new min ISR <= ISR size: ELR and LastKnownELR removed",
            elr: true, strategy: Balanced, min_isr: 2, live: &[1, 2],
            before: part(&[1, 2, 3, 4], &[1, 2], &[3], &[4], 1),
            change: ProposedChange::ClearElr,
            after: (&[1, 2], &[], &[], 1), leader_epoch: Some(10), status: "led",
        },
        Row {
            cite: "new min ISR > ISR size: ELR kept",
            elr: true, strategy: Balanced, min_isr: 3, live: &[1, 2],
            before: part(&[1, 2, 3, 4], &[1, 2], &[3], &[], 1),
            change: ProposedChange::ClearElr,
            after: (&[1, 2], &[3], &[], 1), leader_epoch: None, status: "led",
        },
    ]);
}

#[test]
#[rustfmt::skip]
fn leader_epoch_bumps_only_when_the_leader_field_changes() {
    // issue 3: "Leader epoch bumps only when the leader field changes; partition epoch on every change."
    let before = part(&[1, 2, 3], &[1, 2, 3], &[], &[], 1);
    let live = set(&[1, 2, 3]);
    let ctx = ChangeContext { live: &live, min_isr: 2, configured_min_isr: 2, strategy: Balanced, elr_enabled: true };
    let shrink = ProposedChange::AlterIsr { isr: set(&[1, 2]), leader_recovery_state: LeaderRecoveryState::Recovered };
    let d = partition_change(&before, &shrink, &ctx);
    let delta = d.delta.expect("a change");
    assert_eq!(delta.leader, None);
    assert_eq!(d.after.leader_epoch, before.leader_epoch);
    assert_eq!(d.after.partition_epoch, before.partition_epoch.next());
    let d = partition_change(&before, &ProposedChange::RemoveFromIsr(BrokerId(1)), &ctx);
    assert_eq!(d.delta.expect("a change").leader, Some(crate::records::LeaderChange::To(BrokerId(2))));
    assert_eq!(d.after.leader_epoch, before.leader_epoch.next());
    assert_eq!(d.election, Election::FromIsr(BrokerId(2)));
}
