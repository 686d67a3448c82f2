//! Elections on demand (ElectLeaders: preferred, unclean, manual) and the unclean-recovery
//! events (answers, failed requests, timeouts).
//!
//! - Preferred: `ELECTION_NOT_NEEDED` if replicas\[0\] leads; elects replicas\[0\] if it is an
//!   eligible (ISR, or ELR with an empty ISR) live replica; `PREFERRED_LEADER_NOT_AVAILABLE` when
//!   nothing changes (Kafka).
//! - Unclean: `ELECTION_NOT_NEEDED` if the partition has a leader. ELR mode: a clean candidate is
//!   elected if one exists, else an unclean recovery starts (KIP-966: "It can trigger an unclean
//!   recovery for the replica with the longest log in either Proactive or Balance mode";
//!   Proactive unless the request says Balanced). Classic mode: Kafka's unclean election of the
//!   first live replica; `ELIGIBLE_LEADERS_NOT_AVAILABLE` if none.
//! - Manual (KIP-966: "It can directly select a leader"): the named broker must be a replica
//!   (`INVALID_REPLICA_ASSIGNMENT`) and live (`ELIGIBLE_LEADERS_NOT_AVAILABLE`); the result
//!   carries `warning = true` when it is in neither ISR nor ELR (an unclean election).

use crate::errors::ErrorCode;
use crate::partition_change::{classify, ChangeContext, Election, PartitionStatus, ProposedChange};
use crate::records::{PartitionChangeRecord, PartitionDelta, Record};
use crate::recovery::{RecoveryView, ReplicaLogInfo};
use crate::types::{BrokerId, RecoveryMode, TopicPartition, UncleanRecoveryStrategy};

use super::{context, Batch, Controller, Output};

/// Which election an operator asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionType {
    /// The preferred (first) replica.
    Preferred,
    /// Unclean: start (or, in classic mode, perform) an unclean election.
    Unclean {
        /// The recovery mode; `None` = Proactive.
        mode: Option<RecoveryMode>,
    },
    /// This broker.
    Manual(BrokerId),
}

/// What an election did for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// A leader was elected.
    Elected {
        /// The new leader.
        leader: BrokerId,
        /// The leader was neither in the ISR nor the ELR: committed data may be lost.
        warning: bool,
    },
    /// An unclean recovery runs for the partition.
    RecoveryStarted,
}

/// The result for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionResult {
    /// The partition.
    pub partition: TopicPartition,
    /// What happened, or Kafka's error.
    pub result: Result<ElectionOutcome, ErrorCode>,
}

impl Controller {
    /// Handles an ElectLeaders request.
    pub fn elect_leaders(
        &mut self,
        election: ElectionType,
        partitions: &[TopicPartition],
        now_ms: u64,
    ) -> Output<Vec<ElectionResult>> {
        let each: Vec<(TopicPartition, ElectionType)> =
            partitions.iter().map(|tp| (*tp, election)).collect();
        self.elect_each(&each, now_ms)
    }

    /// Handles an ElectLeaders request whose partitions ask for different elections (a manual
    /// election names a leader per partition); one batch of records for all of them.
    pub fn elect_each(
        &mut self,
        elections: &[(TopicPartition, ElectionType)],
        now_ms: u64,
    ) -> Output<Vec<ElectionResult>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let results = elections
            .iter()
            .map(|(tp, election)| ElectionResult {
                partition: *tp,
                result: self.elect_one(&mut batch, *election, *tp, now_ms),
            })
            .collect();
        batch.finish(results)
    }

    fn elect_one(
        &mut self,
        batch: &mut Batch,
        election: ElectionType,
        tp: TopicPartition,
        now_ms: u64,
    ) -> Result<ElectionOutcome, ErrorCode> {
        let p = batch
            .partition(tp)
            .cloned()
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        let elected =
            |leader: BrokerId, warning: bool| ElectionOutcome::Elected { leader, warning };
        match election {
            ElectionType::Preferred => {
                if p.leader.is_some() && p.leader == p.replicas.first().copied() {
                    return Err(ErrorCode::ElectionNotNeeded);
                }
                let decision = self
                    .change(batch, tp, &ProposedChange::ElectPreferred, now_ms)
                    .expect("partition exists");
                match (decision.delta, decision.after.leader) {
                    (Some(_), Some(leader)) => Ok(elected(leader, false)),
                    _ => Err(ErrorCode::PreferredLeaderNotAvailable),
                }
            }
            ElectionType::Unclean { mode } => {
                if p.leader.is_some() {
                    return Err(ErrorCode::ElectionNotNeeded);
                }
                if !batch.scratch.elr_enabled() {
                    return self.classic_unclean(batch, tp, now_ms);
                }
                let decision = self
                    .change(batch, tp, &ProposedChange::Reelect, now_ms)
                    .expect("partition exists");
                if let Some(leader) = decision.after.leader {
                    return Ok(elected(leader, false));
                }
                let mode = mode.unwrap_or(RecoveryMode::Proactive);
                self.request_recovery(batch, tp, mode);
                self.start_recovery(batch, tp, mode, now_ms);
                Ok(ElectionOutcome::RecoveryStarted)
            }
            ElectionType::Manual(leader) => {
                if !p.is_replica(leader) {
                    return Err(ErrorCode::InvalidReplicaAssignment);
                }
                if !batch.scratch.broker(leader).is_some_and(|b| b.is_live()) {
                    return Err(ErrorCode::EligibleLeadersNotAvailable);
                }
                if p.leader == Some(leader) {
                    return Err(ErrorCode::ElectionNotNeeded);
                }
                let eligible = p.isr.contains(&leader)
                    || (batch.scratch.elr_enabled() && p.elr.contains(&leader));
                let warning = !eligible;
                self.change(batch, tp, &ProposedChange::ElectChosen(leader), now_ms);
                self.recovery.cancel(tp);
                Ok(elected(leader, warning))
            }
        }
    }

    /// Records the operator's recovery of `tp` in `mode` when the strategy would not run one (the
    /// Manual strategy's pause, a wait for a fenced ELR member): every broker then reports the
    /// partition as recovering, and a new active controller carries the recovery on. A recovery
    /// the strategy runs anyway goes on in its own mode (as the running task does).
    fn request_recovery(&mut self, batch: &mut Batch, tp: TopicPartition, mode: RecoveryMode) {
        let Some(p) = batch.partition(tp).cloned() else {
            return;
        };
        let live = batch.scratch.live_brokers();
        let ctx = context(&batch.scratch, tp, &live);
        if classify(&p, &ctx) != PartitionStatus::NeedsUncleanRecovery {
            batch.push(Record::PartitionChange(PartitionChangeRecord {
                partition: tp,
                change: PartitionDelta {
                    recovery_requested: Some(mode),
                    ..PartitionDelta::default()
                },
            }));
        }
    }

    /// Kafka's UNCLEAN election with ELR off: the ISR if possible, else the first live replica.
    fn classic_unclean(
        &mut self,
        batch: &mut Batch,
        tp: TopicPartition,
        now_ms: u64,
    ) -> Result<ElectionOutcome, ErrorCode> {
        let p = batch
            .partition(tp)
            .cloned()
            .ok_or(ErrorCode::UnknownTopicOrPartition)?;
        let live = batch.scratch.live_brokers();
        let ctx = ChangeContext {
            strategy: UncleanRecoveryStrategy::Proactive,
            ..context(&batch.scratch, tp, &live)
        };
        let decision =
            crate::partition_change::partition_change(&p, &ProposedChange::Reelect, &ctx);
        let Some(delta) = decision.delta else {
            return Err(ErrorCode::EligibleLeadersNotAvailable);
        };
        batch.push(Record::PartitionChange(PartitionChangeRecord {
            partition: tp,
            change: delta,
        }));
        self.follow_up(batch, tp, now_ms);
        match (decision.election, decision.after.leader) {
            (Election::Unclean(leader), _) => Ok(ElectionOutcome::Elected {
                leader,
                warning: true,
            }),
            (_, Some(leader)) => Ok(ElectionOutcome::Elected {
                leader,
                warning: false,
            }),
            (_, None) => Err(ErrorCode::EligibleLeadersNotAvailable),
        }
    }

    /// A `GetReplicaLogInfo` answer from `broker` for `tp`. `Ok(Some(leader))` when it completed
    /// the recovery, `Ok(None)` while waiting, `Err` when rejected as stale
    /// (`STALE_BROKER_EPOCH`, `FENCED_LEADER_EPOCH`; the replica is asked again).
    pub fn recovery_answer(
        &mut self,
        tp: TopicPartition,
        broker: BrokerId,
        info: ReplicaLogInfo,
        now_ms: u64,
    ) -> Output<Result<Option<BrokerId>, ErrorCode>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let Some(p) = batch.partition(tp).cloned() else {
            return batch.finish(Err(ErrorCode::UnknownTopicOrPartition));
        };
        let epochs = batch.epochs();
        let live = batch.scratch.live_brokers();
        let view = RecoveryView {
            epochs: &epochs,
            live: &live,
        };
        let step = self.recovery.on_answer(tp, broker, info, &p, &view);
        batch.commands.extend(step.commands);
        if let Some(error) = step.rejected {
            return batch.finish(Err(error));
        }
        let result = match step.elect {
            Some(winner) => {
                self.change(
                    &mut batch,
                    tp,
                    &ProposedChange::ElectRecovered(winner),
                    now_ms,
                );
                self.recovery.cancel(tp);
                Ok(Some(winner))
            }
            None => Ok(None),
        };
        batch.finish(result)
    }

    /// The request to `broker` failed: ask it again.
    pub fn recovery_request_failed(
        &mut self,
        broker: BrokerId,
        partitions: &[TopicPartition],
        now_ms: u64,
    ) -> Output<()> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let epochs = batch.epochs();
        let live = batch.scratch.live_brokers();
        let view = RecoveryView {
            epochs: &epochs,
            live: &live,
        };
        for tp in partitions {
            let commands = self.recovery.on_request_failed(*tp, broker, &view);
            batch.commands.extend(commands);
        }
        batch.finish(())
    }

    /// A recovery timer fired. Returns the elected leader, if the timeout completed the recovery.
    pub fn recovery_timeout(
        &mut self,
        tp: TopicPartition,
        now_ms: u64,
    ) -> Output<Option<BrokerId>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let Some(p) = batch.partition(tp).cloned() else {
            return batch.finish(None);
        };
        let epochs = batch.epochs();
        let live = batch.scratch.live_brokers();
        let view = RecoveryView {
            epochs: &epochs,
            live: &live,
        };
        let step = self.recovery.on_timeout(tp, &p, &view, now_ms);
        batch.commands.extend(step.commands);
        let elected = step.elect;
        if let Some(winner) = elected {
            self.change(
                &mut batch,
                tp,
                &ProposedChange::ElectRecovered(winner),
                now_ms,
            );
            self.recovery.cancel(tp);
        }
        batch.finish(elected)
    }
}
