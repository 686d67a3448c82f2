//! The ISR as the leader changes it: expansion when a follower catches up, shrink when one
//! lags, and the one AlterPartition that may be outstanding (Kafka's `Partition.scala`,
//! reference §6).
//!
//! Expansion eligibility ([`LeaderPartition::isr_expansion_check`], first failing check wins):
//!
//! | # | condition | refusal |
//! |---|---|---|
//! | 1 | an AlterPartition is outstanding | [`Ineligible::AlterPartitionPending`] |
//! | 2 | a follower replica of this partition | [`Ineligible::NotAFollower`] |
//! | 3 | not already in the maximal ISR | [`Ineligible::AlreadyInIsr`] |
//! | 4 | it has fetched in this leadership | [`Ineligible::NoFetch`] |
//! | 5 | log end offset ≥ high watermark | [`Ineligible::BelowHighWatermark`] |
//! | 6 | log end offset ≥ start offset of the current leader epoch | [`Ineligible::BelowLeaderEpochStart`] |
//! | 7 | the log start offset it reported ≥ the leader's (when it reports one) | [`Ineligible::BelowLogStartOffset`] |
//! | 8 | registered in the leader's metadata | [`Ineligible::Unregistered`] |
//! | 9 | not fenced | [`Ineligible::Fenced`] |
//! | 10 | not in controlled shutdown | [`Ineligible::InControlledShutdown`] |
//! | 11 | the broker epoch of its last fetch is its registered epoch (KIP-903) | [`Ineligible::BrokerEpochMismatch`] |
//!
//! Check 7 is Keel's, not Kafka's (issue 20): a replica that was down while a DeleteRecords
//! moved the log start offset joins the ISR — and may be elected cleanly — only once it has
//! applied that start, so the records a DeleteRecords removed never come back with a new leader.
//! It costs one fetch round trip after such a deletion. A follower that reports no log start
//! offset (-1) is not held back by it.
//!
//! AlterPartition errors ([`alter_partition_error_action`]):
//!
//! | error | action |
//! |---|---|
//! | `INELIGIBLE_REPLICA`, `OPERATION_NOT_ATTEMPTED` | revert to the committed ISR, no retry |
//! | `UNKNOWN_TOPIC_OR_PARTITION`, `UNKNOWN_TOPIC_ID`, `FENCED_LEADER_EPOCH`, `INVALID_UPDATE_VERSION`, `INVALID_REQUEST`, `NEW_LEADER_ELECTED` | stay pending until new metadata |
//! | anything else (`NOT_CONTROLLER`, `STALE_BROKER_EPOCH`, timeouts, …) | resend after the retry backoff |
//!
//! A success is ignored (the proposal stays pending until metadata) when its leader epoch is
//! not ours, its partition epoch is older than ours, or its ISR lacks this leader; otherwise
//! its ISR and partition epoch become the committed ones.

use std::collections::BTreeSet;

use super::{
    AlterPartitionProposal, AlterPartitionResponse, Command, Effects, FollowerProgress,
    LeaderPartition, PendingAlterPartition, PendingState,
};
use crate::errors::ErrorCode;
use crate::types::{AlterPartitionId, BrokerId, IsrMember};

/// Why a follower may not join the ISR now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// An AlterPartition is outstanding; only one at a time.
    AlterPartitionPending,
    /// Not a follower replica of this partition.
    NotAFollower,
    /// Already in the (maximal) ISR.
    AlreadyInIsr,
    /// It has not fetched in this leadership (or since its broker restarted).
    NoFetch,
    /// Its log end offset is below the high watermark.
    BelowHighWatermark,
    /// Its log end offset is below the start of the current leader epoch.
    BelowLeaderEpochStart,
    /// The log start offset it reported is below the leader's (it has not applied a deletion).
    BelowLogStartOffset,
    /// The leader's metadata has no registration for it.
    Unregistered,
    /// Fenced.
    Fenced,
    /// In controlled shutdown.
    InControlledShutdown,
    /// Its last fetch carried a broker epoch other than the registered one.
    BrokerEpochMismatch,
}

/// What the leader does after an AlterPartition error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlterPartitionErrorAction {
    /// Drop the proposal: the maximal ISR is the committed ISR again.
    RevertToCommitted,
    /// Keep the proposal (and the maximal ISR) until metadata with a newer partition epoch.
    AwaitMetadata,
    /// Resend the same proposal after the retry backoff.
    Retry,
}

/// The leader's reaction to an AlterPartition error code (reference §6, `Partition.scala`).
pub fn alter_partition_error_action(error: ErrorCode) -> AlterPartitionErrorAction {
    use AlterPartitionErrorAction::*;
    match error {
        ErrorCode::IneligibleReplica | ErrorCode::OperationNotAttempted => RevertToCommitted,
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::UnknownTopicId
        | ErrorCode::FencedLeaderEpoch
        | ErrorCode::InvalidUpdateVersion
        | ErrorCode::InvalidRequest
        | ErrorCode::NewLeaderElected => AwaitMetadata,
        _ => Retry,
    }
}

impl LeaderPartition {
    /// Kafka's `isCaughtUp`: at the leader's log end offset, or caught up within
    /// `replica.lag.time.max.ms`.
    pub(super) fn is_caught_up(&self, progress: &FollowerProgress, now_ms: u64) -> bool {
        progress.log_end_offset == Some(self.log_end_offset)
            || progress
                .last_caught_up_ms
                .is_some_and(|at| now_ms.saturating_sub(at) <= self.config.replica_lag_time_max_ms)
    }

    /// Kafka's `isReplicaIsrEligible`: registered, unfenced, not shutting down, and fetching
    /// with its registered broker epoch.
    fn registration_check(&self, broker: BrokerId) -> Result<(), Ineligible> {
        let registration = self.brokers.get(&broker).ok_or(Ineligible::Unregistered)?;
        if registration.fenced {
            return Err(Ineligible::Fenced);
        }
        if registration.in_controlled_shutdown {
            return Err(Ineligible::InControlledShutdown);
        }
        let fetched_with = self.followers.get(&broker).and_then(|p| p.broker_epoch);
        if fetched_with != Some(registration.epoch) {
            return Err(Ineligible::BrokerEpochMismatch);
        }
        Ok(())
    }

    pub(super) fn registration_eligible(&self, broker: BrokerId) -> bool {
        self.registration_check(broker).is_ok()
    }

    /// Whether `broker` may join the ISR now, and if not, the first reason why (table above).
    pub fn isr_expansion_check(&self, broker: BrokerId) -> Result<(), Ineligible> {
        if self.pending.is_some() {
            return Err(Ineligible::AlterPartitionPending);
        }
        let progress = self
            .followers
            .get(&broker)
            .ok_or(Ineligible::NotAFollower)?;
        if self.isr.contains(&broker) {
            return Err(Ineligible::AlreadyInIsr);
        }
        let leo = progress.log_end_offset.ok_or(Ineligible::NoFetch)?;
        if leo < self.high_watermark {
            return Err(Ineligible::BelowHighWatermark);
        }
        if leo < self.leader_epoch_start_offset {
            return Err(Ineligible::BelowLeaderEpochStart);
        }
        if progress
            .log_start_offset
            .is_some_and(|start| start < self.log_start_offset)
        {
            return Err(Ineligible::BelowLogStartOffset);
        }
        self.registration_check(broker)
    }

    /// Proposes adding `broker` when it is eligible and nothing is outstanding.
    pub(super) fn maybe_expand_isr(&mut self, broker: BrokerId, fx: &mut Effects) {
        if self.isr_expansion_check(broker).is_ok() {
            let mut isr = self.isr.clone();
            isr.insert(broker);
            self.propose(isr, fx);
        }
    }

    /// The committed ISR members (other than the leader) that are not caught up.
    pub fn out_of_sync_replicas(&self, now_ms: u64) -> BTreeSet<BrokerId> {
        self.isr
            .iter()
            .filter(|b| **b != self.local)
            .filter(|b| {
                self.followers
                    .get(b)
                    .is_none_or(|progress| !self.is_caught_up(progress, now_ms))
            })
            .copied()
            .collect()
    }

    /// Proposes removing every lagging ISR member when nothing is outstanding.
    pub(super) fn maybe_shrink_isr(&mut self, now_ms: u64, fx: &mut Effects) {
        if self.pending.is_some() || self.ended {
            return;
        }
        let out_of_sync = self.out_of_sync_replicas(now_ms);
        if !out_of_sync.is_empty() {
            let isr = self.isr.difference(&out_of_sync).copied().collect();
            self.propose(isr, fx);
        }
    }

    /// Makes `isr` the one outstanding proposal and asks the shell to send it. Each member is
    /// sent with the broker epoch of its last fetch (the leader's own epoch for itself).
    pub(super) fn propose(&mut self, isr: BTreeSet<BrokerId>, fx: &mut Effects) {
        assert!(self.pending.is_none(), "one AlterPartition at a time");
        assert!(isr.contains(&self.local), "the leader stays in its ISR");
        let new_isr = isr
            .iter()
            .map(|&broker| IsrMember {
                broker,
                broker_epoch: if broker == self.local {
                    Some(self.local_broker_epoch)
                } else {
                    self.followers.get(&broker).and_then(|p| p.broker_epoch)
                },
            })
            .collect();
        let proposal = AlterPartitionProposal {
            id: AlterPartitionId(self.next_alter_partition_id),
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr,
        };
        self.next_alter_partition_id += 1;
        fx.alter_partition = Some(proposal.clone());
        self.pending = Some(PendingAlterPartition {
            proposal,
            isr,
            state: PendingState::InFlight,
        });
    }

    /// Handles the controller's answer to proposal `id`. Answers to anything but the
    /// in-flight proposal are ignored.
    pub fn on_alter_partition_response(
        &mut self,
        id: AlterPartitionId,
        response: &AlterPartitionResponse,
        now_ms: u64,
    ) -> Vec<Command> {
        let mut fx = Effects::default();
        let in_flight = self
            .pending
            .as_ref()
            .is_some_and(|p| p.proposal.id == id && p.state == PendingState::InFlight);
        if self.ended || !in_flight {
            return Vec::new();
        }
        match response {
            AlterPartitionResponse::Error(error) => match alter_partition_error_action(*error) {
                AlterPartitionErrorAction::RevertToCommitted => {
                    self.pending = None;
                    self.maybe_advance_high_watermark(now_ms, &mut fx);
                    self.complete_covered(&mut fx);
                }
                AlterPartitionErrorAction::AwaitMetadata => {
                    self.set_pending_state(PendingState::AwaitingMetadata);
                }
                AlterPartitionErrorAction::Retry => {
                    let at_ms = now_ms.saturating_add(self.config.alter_partition_retry_backoff_ms);
                    self.set_pending_state(PendingState::RetryAt { at_ms });
                    fx.schedule_tick(at_ms);
                }
            },
            AlterPartitionResponse::Committed {
                leader_epoch,
                partition_epoch,
                isr,
            } => {
                if *leader_epoch != self.leader_epoch
                    || *partition_epoch < self.partition_epoch
                    || !isr.contains(&self.local)
                {
                    self.set_pending_state(PendingState::AwaitingMetadata);
                } else {
                    self.pending = None;
                    self.partition_epoch = *partition_epoch;
                    self.commit_isr(isr.clone(), now_ms, &mut fx);
                }
            }
        }
        fx.into_commands()
    }

    fn set_pending_state(&mut self, state: PendingState) {
        if let Some(pending) = &mut self.pending {
            pending.state = state;
        }
    }

    /// Makes `isr` the committed ISR, then re-evaluates the high watermark and the purgatory.
    pub(super) fn commit_isr(&mut self, isr: BTreeSet<BrokerId>, now_ms: u64, fx: &mut Effects) {
        self.isr = isr;
        self.maybe_advance_high_watermark(now_ms, fx);
        self.complete_covered(fx);
        self.fail_if_under_min_isr(fx);
    }

    /// Timers: the high watermark (a caught-up non-ISR replica may have stopped counting),
    /// produce and DeleteRecords timeouts, the AlterPartition retry, and the ISR shrink. Call it at every
    /// `ScheduleTick` and at least every `replica.lag.time.max.ms / 2`.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Command> {
        let mut fx = Effects::default();
        if self.ended {
            return Vec::new();
        }
        self.maybe_advance_high_watermark(now_ms, &mut fx);
        self.complete_covered(&mut fx);
        self.expire_waiting(now_ms, &mut fx);
        self.complete_deletes(&mut fx);
        self.expire_deletes(now_ms, &mut fx);
        if let Some(pending) = &mut self.pending {
            if let PendingState::RetryAt { at_ms } = pending.state {
                if now_ms >= at_ms {
                    pending.state = PendingState::InFlight;
                    fx.alter_partition = Some(pending.proposal.clone());
                } else {
                    fx.schedule_tick(at_ms);
                }
            }
        }
        self.maybe_shrink_isr(now_ms, &mut fx);
        fx.into_commands()
    }
}
