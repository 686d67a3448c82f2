//! The pure part of KIP-966's Unclean Recovery Manager (URM): per-partition recovery tasks,
//! answer validation, and the decision of when and whom to elect. Events in, commands out: the
//! network layer executes [`Command`]s and feeds answers, failures and timeouts back.
//!
//! Rules (KIP-966 "Unclean Recovery Manager"):
//! - a task asks every replica, fenced ones included ("The URM will query all the replicas
//!   including the fenced replicas"), for its log end offset, last leader epoch in its log,
//!   broker epoch and the partition leader epoch it knows;
//! - an answer is rejected — and the replica asked again — when its broker epoch is not the
//!   registered one ("avoid electing a broker that has rebooted") or its partition leader epoch
//!   is not the controller's ("fences stale GetReplicaLogInfo responses");
//! - only live (unfenced) replicas count ("Only the unfenced replicas can be counted into the
//!   quorum"), so a fenced replica's answer waits until it is unfenced, and an answer whose
//!   broker re-registered since is dropped and asked again;
//! - Balanced elects once every member of the quorum has a counting answer; the quorum is
//!   LastKnownELR ∪ ELR, or every replica when both are empty;
//! - Proactive elects at the 5 s deadline if any answer counts, else on the first counting answer
//!   after it; either mode elects at once when every replica has answered;
//! - the winner has the highest last leader epoch, then the longest log (then replica order).
//!
//! The URM keeps its tasks out of the metadata log: after a controller failover recovery starts
//! again ([`crate::Controller::tick`] and heartbeats restart missing tasks). Only an operator's
//! request for a recovery the strategy would not run is logged
//! ([`crate::PartitionState::recovery_requested`]), so it starts again too.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{PROACTIVE_RECOVERY_WAIT_MS, RECOVERY_RETRY_MS};
use crate::errors::ErrorCode;
use crate::partition::PartitionState;
use crate::types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, RecoveryMode, TopicPartition};

/// What the controller's IO shell must do for the URM.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Command {
    /// Send one `GetReplicaLogInfo` request to `broker` for these partitions.
    SendGetReplicaLogInfo {
        /// The broker to ask.
        broker: BrokerId,
        /// The partitions to ask about.
        partitions: Vec<TopicPartition>,
    },
    /// Call [`crate::Controller::recovery_timeout`] for `partition` at `at_ms`.
    ScheduleRecoveryTimeout {
        /// The partition.
        partition: TopicPartition,
        /// When.
        at_ms: u64,
    },
}

/// One replica's `GetReplicaLogInfo` answer for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaLogInfo {
    /// Its log end offset.
    pub log_end_offset: Offset,
    /// The last leader epoch in its log.
    pub last_leader_epoch: LeaderEpoch,
    /// Its broker epoch when it answered.
    pub broker_epoch: BrokerEpoch,
    /// The partition leader epoch in its metadata cache.
    pub partition_leader_epoch: LeaderEpoch,
}

/// One partition's recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryTask {
    /// Balanced or Proactive.
    pub mode: RecoveryMode,
    /// When it started.
    pub started_ms: u64,
    /// Whether the Proactive deadline has passed.
    pub deadline_passed: bool,
    /// The replicas asked (and not yet answered since).
    pub asked: BTreeSet<BrokerId>,
    /// Accepted answers.
    pub answers: BTreeMap<BrokerId, ReplicaLogInfo>,
}

/// What the URM decided after an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryStep {
    /// Elect this replica (the caller turns it into a change record and ends the task).
    pub elect: Option<BrokerId>,
    /// Commands to execute.
    pub commands: Vec<Command>,
    /// Why an answer was rejected, as a Kafka error code.
    pub rejected: Option<ErrorCode>,
}

/// What the URM needs to know about brokers.
#[derive(Clone, Copy, Debug)]
pub struct RecoveryView<'a> {
    /// Registered broker epochs.
    pub epochs: &'a BTreeMap<BrokerId, BrokerEpoch>,
    /// Live (unfenced, not shutting down) brokers.
    pub live: &'a BTreeSet<BrokerId>,
}

/// The Unclean Recovery Manager's state: one task per partition under recovery.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UncleanRecoveryManager {
    tasks: BTreeMap<TopicPartition, RecoveryTask>,
}

impl UncleanRecoveryManager {
    /// No tasks.
    pub fn new() -> Self {
        UncleanRecoveryManager::default()
    }

    /// The partitions under recovery.
    pub fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        self.tasks.keys().copied()
    }

    /// One task.
    pub fn task(&self, tp: TopicPartition) -> Option<&RecoveryTask> {
        self.tasks.get(&tp)
    }

    /// Ends a task (the partition got a leader, or no longer needs recovery).
    pub fn cancel(&mut self, tp: TopicPartition) -> Option<RecoveryTask> {
        self.tasks.remove(&tp)
    }

    /// Starts recovering `tp` (no-op if a task runs): asks every registered replica.
    pub fn start(
        &mut self,
        tp: TopicPartition,
        p: &PartitionState,
        mode: RecoveryMode,
        view: &RecoveryView<'_>,
        now_ms: u64,
    ) -> Vec<Command> {
        if self.tasks.contains_key(&tp) {
            return Vec::new();
        }
        let asked: BTreeSet<BrokerId> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| view.epochs.contains_key(r))
            .collect();
        let mut commands = ask(tp, &asked);
        let wait = match mode {
            RecoveryMode::Proactive => PROACTIVE_RECOVERY_WAIT_MS,
            RecoveryMode::Balanced => RECOVERY_RETRY_MS,
        };
        commands.push(Command::ScheduleRecoveryTimeout {
            partition: tp,
            at_ms: now_ms + wait,
        });
        self.tasks.insert(
            tp,
            RecoveryTask {
                mode,
                started_ms: now_ms,
                deadline_passed: false,
                asked,
                answers: BTreeMap::new(),
            },
        );
        commands
    }

    /// A replica answered. Validates it, stores it, and decides.
    pub fn on_answer(
        &mut self,
        tp: TopicPartition,
        broker: BrokerId,
        info: ReplicaLogInfo,
        p: &PartitionState,
        view: &RecoveryView<'_>,
    ) -> RecoveryStep {
        let Some(task) = self.tasks.get_mut(&tp) else {
            return RecoveryStep::default();
        };
        if !p.is_replica(broker) {
            return RecoveryStep {
                rejected: Some(ErrorCode::InvalidRequest),
                ..RecoveryStep::default()
            };
        }
        let rejected = if view.epochs.get(&broker) != Some(&info.broker_epoch) {
            Some(ErrorCode::StaleBrokerEpoch)
        } else if info.partition_leader_epoch != p.leader_epoch {
            Some(ErrorCode::FencedLeaderEpoch)
        } else {
            None
        };
        if let Some(error) = rejected {
            // KIP-966: "if the response is rejected and the leader has not been elected, URM
            // will initiate the log query again."
            task.answers.remove(&broker);
            let mut commands = Vec::new();
            if view.epochs.contains_key(&broker) {
                task.asked.insert(broker);
                commands = ask(tp, &BTreeSet::from([broker]));
            }
            return RecoveryStep {
                elect: None,
                commands,
                rejected: Some(error),
            };
        }
        task.asked.remove(&broker);
        task.answers.insert(broker, info);
        self.evaluate(tp, p, view)
    }

    /// The request to `broker` failed (network error, retry timeout): ask it again.
    pub fn on_request_failed(
        &mut self,
        tp: TopicPartition,
        broker: BrokerId,
        view: &RecoveryView<'_>,
    ) -> Vec<Command> {
        match self.tasks.get_mut(&tp) {
            Some(task) if view.epochs.contains_key(&broker) => {
                task.asked.insert(broker);
                ask(tp, &BTreeSet::from([broker]))
            }
            _ => Vec::new(),
        }
    }

    /// The task's timer fired: marks the Proactive deadline, asks silent replicas again,
    /// re-arms the timer, and decides.
    pub fn on_timeout(
        &mut self,
        tp: TopicPartition,
        p: &PartitionState,
        view: &RecoveryView<'_>,
        now_ms: u64,
    ) -> RecoveryStep {
        let Some(task) = self.tasks.get_mut(&tp) else {
            return RecoveryStep::default();
        };
        let deadline = task.started_ms + PROACTIVE_RECOVERY_WAIT_MS;
        if now_ms < deadline {
            return RecoveryStep {
                commands: vec![Command::ScheduleRecoveryTimeout {
                    partition: tp,
                    at_ms: deadline,
                }],
                ..RecoveryStep::default()
            };
        }
        task.deadline_passed = true;
        let mut step = self.evaluate(tp, p, view);
        if step.elect.is_none() {
            if let Some(task) = self.tasks.get_mut(&tp) {
                let silent: BTreeSet<BrokerId> = p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| view.epochs.contains_key(r) && !task.answers.contains_key(r))
                    .collect();
                task.asked.extend(silent.iter().copied());
                step.commands.extend(ask(tp, &silent));
            }
            step.commands.push(Command::ScheduleRecoveryTimeout {
                partition: tp,
                at_ms: now_ms + RECOVERY_RETRY_MS,
            });
        }
        step
    }

    /// Re-checks a task (after an unfence or re-registration): drops answers of brokers that
    /// re-registered since (asking them again) and elects if the task is ready.
    pub fn evaluate(
        &mut self,
        tp: TopicPartition,
        p: &PartitionState,
        view: &RecoveryView<'_>,
    ) -> RecoveryStep {
        let Some(task) = self.tasks.get_mut(&tp) else {
            return RecoveryStep::default();
        };
        let stale: BTreeSet<BrokerId> = task
            .answers
            .iter()
            .filter(|(b, info)| {
                view.epochs.get(b) != Some(&info.broker_epoch)
                    || info.partition_leader_epoch != p.leader_epoch
            })
            .map(|(b, _)| *b)
            .collect();
        let mut commands = Vec::new();
        for b in &stale {
            task.answers.remove(b);
        }
        let reask: BTreeSet<BrokerId> = stale
            .into_iter()
            .filter(|b| view.epochs.contains_key(b))
            .collect();
        task.asked.extend(reask.iter().copied());
        commands.extend(ask(tp, &reask));
        let elect = decide(task, p, view);
        RecoveryStep {
            elect,
            commands,
            rejected: None,
        }
    }
}

/// The Balanced quorum: LastKnownELR ∪ ELR, or every replica when both are empty.
pub fn balanced_quorum(p: &PartitionState) -> BTreeSet<BrokerId> {
    let quorum: BTreeSet<BrokerId> = p.last_known_elr.union(&p.elr).copied().collect();
    if quorum.is_empty() {
        p.replicas.iter().copied().collect()
    } else {
        quorum
    }
}

fn decide(task: &RecoveryTask, p: &PartitionState, view: &RecoveryView<'_>) -> Option<BrokerId> {
    let counted: BTreeMap<BrokerId, &ReplicaLogInfo> = task
        .answers
        .iter()
        .filter(|(b, _)| view.live.contains(b))
        .map(|(b, info)| (*b, info))
        .collect();
    if counted.is_empty() {
        return None;
    }
    let everyone = p.replicas.iter().all(|r| counted.contains_key(r));
    let ready = everyone
        || match task.mode {
            RecoveryMode::Balanced => balanced_quorum(p).iter().all(|r| counted.contains_key(r)),
            RecoveryMode::Proactive => task.deadline_passed,
        };
    if !ready {
        return None;
    }
    // "URM first filters the replicas with the highest partition leader epoch, then it elects
    // the one with the longest log end offset as the new leader." Ties: replica order.
    p.replicas
        .iter()
        .enumerate()
        .filter_map(|(index, r)| counted.get(r).map(|info| (index, *r, *info)))
        .max_by(|(ia, _, a), (ib, _, b)| {
            (
                a.last_leader_epoch,
                a.log_end_offset,
                std::cmp::Reverse(*ia),
            )
                .cmp(&(
                    b.last_leader_epoch,
                    b.log_end_offset,
                    std::cmp::Reverse(*ib),
                ))
        })
        .map(|(_, r, _)| r)
}

fn ask(tp: TopicPartition, brokers: &BTreeSet<BrokerId>) -> Vec<Command> {
    brokers
        .iter()
        .map(|b| Command::SendGetReplicaLogInfo {
            broker: *b,
            partitions: vec![tp],
        })
        .collect()
}

/// Merges `SendGetReplicaLogInfo` commands per broker (the KIP's Broker Request Sender batches
/// per broker) and keeps every other command, in a deterministic order.
pub fn batch_commands(commands: Vec<Command>) -> Vec<Command> {
    let mut per_broker: BTreeMap<BrokerId, BTreeSet<TopicPartition>> = BTreeMap::new();
    let mut others = BTreeSet::new();
    for command in commands {
        match command {
            Command::SendGetReplicaLogInfo { broker, partitions } => {
                per_broker.entry(broker).or_default().extend(partitions);
            }
            other => {
                others.insert(other);
            }
        }
    }
    let mut out: Vec<Command> = per_broker
        .into_iter()
        .map(|(broker, partitions)| Command::SendGetReplicaLogInfo {
            broker,
            partitions: partitions.into_iter().collect(),
        })
        .collect();
    out.extend(others);
    out
}
