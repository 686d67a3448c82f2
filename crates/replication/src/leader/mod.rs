//! The leader side of one partition: follower fetch handling, the ISR (committed and maximal),
//! AlterPartition proposals, the high watermark and the acks=all produce purgatory.
//!
//! Events in ([`LeaderPartition::on_follower_fetch`], [`LeaderPartition::on_leader_append`],
//! [`LeaderPartition::await_acks_all`], [`LeaderPartition::tick`],
//! [`LeaderPartition::on_alter_partition_response`], [`LeaderPartition::on_partition_metadata`],
//! [`LeaderPartition::on_broker_registration`], [`LeaderPartition::await_delete_records`],
//! [`LeaderPartition::on_log_start_offset`]), [`Command`]s out. Every method returns its
//! commands in one canonical order: `HighWatermarkAdvanced`, then `CompleteProduce` by request
//! id, then `CompleteDeleteRecords` by request id, then `SendAlterPartition`, then
//! `ScheduleTick`, then `LeadershipEnded`.
//!
//! | file | what lives there |
//! |---|---|
//! | `fetch.rs` | follower fetches: epoch fencing (KIP-320, KIP-903), divergence, progress |
//! | `isr.rs` | ISR expansion eligibility, shrink, AlterPartition proposals and responses |
//! | `hwm.rs` | the high watermark (KIP-966 strict min ISR rule) |
//! | `purgatory.rs` | acks=all: `NOT_ENOUGH_REPLICAS`, waiting, `_AFTER_APPEND`, timeouts |
//! | `delete_records.rs` | DeleteRecords: the offset checks, the low watermark, waiting for it |
//! | `metadata.rs` | partition and broker metadata, `min.insync.replicas` changes |

mod delete_records;
#[cfg(test)]
mod delete_records_tests;
mod fetch;
mod hwm;
mod isr;
mod metadata;
mod purgatory;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{effective_min_isr, ReplicationConfig};
use crate::errors::{ErrorCode, ReplicationError};
use crate::types::{
    AlterPartitionId, BrokerEpoch, BrokerId, BrokerRegistration, EpochEndOffset, IsrMember,
    LeaderEpoch, Offset, PartitionEpoch, RequestId,
};

pub use delete_records::DeleteRecordsOffset;
pub use isr::{alter_partition_error_action, AlterPartitionErrorAction, Ineligible};
pub use purgatory::Acks;

/// What the leader's IO shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// The high watermark moved forward to this offset: expose it to consumers, checkpoint it,
    /// wake delayed fetches.
    HighWatermarkAdvanced {
        /// The new high watermark.
        high_watermark: Offset,
    },
    /// Answer one waiting acks=all produce request for this partition.
    CompleteProduce {
        /// The request.
        request: RequestId,
        /// `Ok` = acknowledged; otherwise the partition's error code.
        result: Result<(), ErrorCode>,
    },
    /// Answer one waiting DeleteRecords request for this partition (Kafka's
    /// `DelayedDeleteRecords`).
    CompleteDeleteRecords {
        /// The request.
        request: RequestId,
        /// `Ok(low watermark)` once the low watermark reached the requested offset; otherwise
        /// the partition's error code (`REQUEST_TIMED_OUT`, `NOT_LEADER_OR_FOLLOWER`).
        result: Result<Offset, ErrorCode>,
    },
    /// Send this AlterPartition (v3, `NewIsrWithEpochs`) to the controller and feed the answer
    /// to [`LeaderPartition::on_alter_partition_response`] with the proposal's id.
    SendAlterPartition(AlterPartitionProposal),
    /// Call [`LeaderPartition::tick`] at (or after) this time.
    ScheduleTick {
        /// When.
        at_ms: u64,
    },
    /// This leadership is over: metadata names another leader or a newer leader epoch. Every
    /// waiting request has been answered; build the new state (leader or follower) from
    /// metadata.
    LeadershipEnded {
        /// The leader metadata names now.
        leader: Option<BrokerId>,
        /// Its leader epoch.
        leader_epoch: LeaderEpoch,
    },
}

/// One AlterPartition proposal: the ISR the leader wants, with each member's broker epoch
/// (KIP-903; `None` when the leader has not seen that member fetch, sent as -1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionProposal {
    /// Matches the response to this proposal.
    pub id: AlterPartitionId,
    /// The leader epoch the proposal is made in.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the proposal is based on.
    pub partition_epoch: PartitionEpoch,
    /// The proposed ISR, by broker id.
    pub new_isr: Vec<IsrMember>,
}

/// The controller's answer to an AlterPartition, for this partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlterPartitionResponse {
    /// Error code `NONE`: the partition state the controller answered.
    Committed {
        /// The leader epoch in the answer.
        leader_epoch: LeaderEpoch,
        /// The partition epoch in the answer.
        partition_epoch: PartitionEpoch,
        /// The ISR in the answer.
        isr: BTreeSet<BrokerId>,
    },
    /// Any other error code (partition level, or request level applied to every partition).
    Error(ErrorCode),
}

/// Where the in-flight AlterPartition stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingState {
    /// Sent; waiting for the answer.
    InFlight,
    /// Failed with a retriable error; resent by the first tick at or after `at_ms`.
    RetryAt {
        /// When to resend.
        at_ms: u64,
    },
    /// Failed in a way only new metadata resolves (or a success that was stale): the leader
    /// keeps the maximal ISR and proposes nothing until metadata with a newer partition epoch.
    AwaitingMetadata,
}

/// The one AlterPartition a leader may have outstanding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingAlterPartition {
    /// What was sent.
    pub proposal: AlterPartitionProposal,
    /// The proposed ISR as a set.
    pub isr: BTreeSet<BrokerId>,
    /// Where it stands.
    pub state: PendingState,
}

/// What the leader knows about one follower's replication (Kafka's `Replica` state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerProgress {
    /// Its log end offset = the fetch offset of its last accepted fetch; `None` until it
    /// fetched in this leadership (or since it restarted).
    pub log_end_offset: Option<Offset>,
    /// When its last accepted fetch arrived.
    pub last_fetch_ms: Option<u64>,
    /// The last time it was caught up: its fetch offset reached the leader's log end offset as
    /// of that fetch (or as of its previous fetch). ISR members start caught up at the time the
    /// leadership began, like Kafka.
    pub last_caught_up_ms: Option<u64>,
    /// The leader's log end offset when its last fetch arrived.
    pub last_fetch_leader_log_end_offset: Option<Offset>,
    /// The broker epoch its last accepted fetch carried.
    pub broker_epoch: Option<BrokerEpoch>,
    /// Its log start offset as its last accepted fetch said (`None` until it fetched in this
    /// leadership, or when it sent -1): what the low watermark is computed from.
    pub log_start_offset: Option<Offset>,
}

/// A follower fetch for this partition (Fetch v15+, from a replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerFetch {
    /// `ReplicaState.ReplicaId`.
    pub broker: BrokerId,
    /// `ReplicaState.ReplicaEpoch`: the follower's broker epoch.
    pub broker_epoch: BrokerEpoch,
    /// `CurrentLeaderEpoch` (`None` = -1, unchecked).
    pub current_leader_epoch: Option<LeaderEpoch>,
    /// `FetchOffset`: the follower's log end offset.
    pub fetch_offset: Offset,
    /// `LastFetchedEpoch`: the latest epoch in the follower's log (`None` = empty log).
    pub last_fetched_epoch: Option<LeaderEpoch>,
    /// `LogStartOffset`: the follower's log start offset (`None` = -1, not reported).
    pub log_start_offset: Option<Offset>,
}

/// The leader's answer to a follower fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchAnswer {
    /// Serve records from the fetch offset; the follower learns this high watermark and log
    /// start offset.
    Records {
        /// The leader's high watermark after this fetch.
        high_watermark: Offset,
        /// The leader's log start offset (`None`: the leader did not say, wire -1). A follower
        /// moves its own log start offset up to it (Kafka's `ReplicaFetcherThread
        /// .processPartitionData`: `maybeIncrementLogStartOffset(leaderLogStartOffset)`).
        log_start_offset: Option<Offset>,
    },
    /// The follower's log diverges: it must truncate (KIP-595's `DivergingEpoch`; never halt,
    /// KAFKA-3861). `None` = the leader knows no epoch ≤ the follower's (wire -1/-1).
    DivergingEpoch {
        /// The leader's end offset for the largest epoch ≤ the follower's last fetched epoch.
        end: Option<EpochEndOffset>,
        /// The leader's high watermark.
        high_watermark: Offset,
    },
    /// `OFFSET_OUT_OF_RANGE`: the fetch offset is below the leader's log start offset or
    /// beyond its log end offset; the follower's state on the leader was not updated. A
    /// follower whose whole log is below the leader's log start offset starts over there.
    OffsetOutOfRange {
        /// The leader's log start offset (`None`: the leader did not say, wire -1).
        log_start_offset: Option<Offset>,
    },
    /// A partition-level error; the follower's state on the leader was not updated.
    Error(ErrorCode),
}

/// A follower fetch's answer and the commands it caused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchOutcome {
    /// What to answer the follower.
    pub answer: FetchAnswer,
    /// What the shell must do.
    pub commands: Vec<Command>,
}

/// Partition state from committed metadata (a `PartitionRecord` or change, replayed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionMetadata {
    /// The leader.
    pub leader: Option<BrokerId>,
    /// The leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch.
    pub partition_epoch: PartitionEpoch,
    /// The replicas, in assignment order.
    pub replicas: Vec<BrokerId>,
    /// The ISR.
    pub isr: BTreeSet<BrokerId>,
}

/// Everything a broker needs to start leading a partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInit {
    /// This broker.
    pub local: BrokerId,
    /// This broker's epoch (sent for itself in AlterPartition).
    pub local_broker_epoch: BrokerEpoch,
    /// The partition metadata that made this broker leader.
    pub metadata: PartitionMetadata,
    /// The local log start offset.
    pub log_start_offset: Offset,
    /// The local log end offset.
    pub log_end_offset: Offset,
    /// Where the current leader epoch starts in the local log (the log end offset when the
    /// leadership began, assigned in the epoch cache by the shell).
    pub leader_epoch_start_offset: Offset,
    /// The local high watermark (from the log's checkpoint or the last follower fetch).
    pub high_watermark: Offset,
    /// Broker registrations from the metadata image.
    pub brokers: BTreeMap<BrokerId, BrokerRegistration>,
    /// Settings.
    pub config: ReplicationConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WaitingProduce {
    required_offset: Offset,
    deadline_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WaitingDelete {
    required_offset: Offset,
    deadline_ms: u64,
}

/// The leader's replication state for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderPartition {
    local: BrokerId,
    local_broker_epoch: BrokerEpoch,
    config: ReplicationConfig,
    replicas: Vec<BrokerId>,
    /// The committed ISR: the last one the controller's metadata or AlterPartition answer gave.
    isr: BTreeSet<BrokerId>,
    leader_epoch: LeaderEpoch,
    partition_epoch: PartitionEpoch,
    log_start_offset: Offset,
    log_end_offset: Offset,
    leader_epoch_start_offset: Offset,
    high_watermark: Offset,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    brokers: BTreeMap<BrokerId, BrokerRegistration>,
    pending: Option<PendingAlterPartition>,
    next_alter_partition_id: u64,
    waiting: BTreeMap<RequestId, WaitingProduce>,
    waiting_deletes: BTreeMap<RequestId, WaitingDelete>,
    ended: bool,
}

/// Effects collected during one call, turned into commands in the canonical order.
#[derive(Debug, Default)]
struct Effects {
    high_watermark: Option<Offset>,
    completed: BTreeMap<RequestId, Result<(), ErrorCode>>,
    completed_deletes: BTreeMap<RequestId, Result<Offset, ErrorCode>>,
    alter_partition: Option<AlterPartitionProposal>,
    tick_at_ms: Option<u64>,
    ended: Option<(Option<BrokerId>, LeaderEpoch)>,
}

impl Effects {
    fn schedule_tick(&mut self, at_ms: u64) {
        self.tick_at_ms = Some(self.tick_at_ms.map_or(at_ms, |t| t.min(at_ms)));
    }

    fn into_commands(self) -> Vec<Command> {
        let mut commands = Vec::new();
        if let Some(high_watermark) = self.high_watermark {
            commands.push(Command::HighWatermarkAdvanced { high_watermark });
        }
        for (request, result) in self.completed {
            commands.push(Command::CompleteProduce { request, result });
        }
        for (request, result) in self.completed_deletes {
            commands.push(Command::CompleteDeleteRecords { request, result });
        }
        if let Some(proposal) = self.alter_partition {
            commands.push(Command::SendAlterPartition(proposal));
        }
        if let Some(at_ms) = self.tick_at_ms {
            commands.push(Command::ScheduleTick { at_ms });
        }
        if let Some((leader, leader_epoch)) = self.ended {
            commands.push(Command::LeadershipEnded {
                leader,
                leader_epoch,
            });
        }
        commands
    }
}

impl LeaderPartition {
    /// Starts a leadership. ISR members start caught up at `now_ms` with an unknown log end
    /// offset (so the high watermark waits for their first fetch); other replicas start not
    /// caught up (Kafka's `Replica.resetReplicaState`).
    pub fn new(init: LeaderInit, now_ms: u64) -> Result<Self, ReplicationError> {
        let meta = init.metadata;
        if !meta.replicas.contains(&init.local) || meta.leader != Some(init.local) {
            return Err(ReplicationError::NotAReplica(init.local));
        }
        if !meta.isr.contains(&init.local) {
            return Err(ReplicationError::LeaderNotInIsr(init.local));
        }
        if init.high_watermark > init.log_end_offset || init.high_watermark.0 < 0 {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "0 ≤ high watermark ≤ log end offset",
            });
        }
        if init.log_start_offset > init.high_watermark || init.log_start_offset.0 < 0 {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "0 ≤ log start offset ≤ high watermark",
            });
        }
        if init.leader_epoch_start_offset > init.log_end_offset {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "leader epoch start offset ≤ log end offset",
            });
        }
        let mut partition = LeaderPartition {
            local: init.local,
            local_broker_epoch: init.local_broker_epoch,
            config: init.config,
            replicas: Vec::new(),
            isr: meta.isr,
            leader_epoch: meta.leader_epoch,
            partition_epoch: meta.partition_epoch,
            log_start_offset: init.log_start_offset,
            log_end_offset: init.log_end_offset,
            leader_epoch_start_offset: init.leader_epoch_start_offset,
            high_watermark: init.high_watermark,
            followers: BTreeMap::new(),
            brokers: init.brokers,
            pending: None,
            next_alter_partition_id: 1,
            waiting: BTreeMap::new(),
            waiting_deletes: BTreeMap::new(),
            ended: false,
        };
        partition.set_replicas(meta.replicas, now_ms);
        Ok(partition)
    }

    /// Replaces the replica set: followers not seen before start fresh (caught up now when in
    /// the committed ISR), followers no longer replicas are forgotten.
    fn set_replicas(&mut self, replicas: Vec<BrokerId>, now_ms: u64) {
        let local = self.local;
        self.followers.retain(|b, _| replicas.contains(b));
        for &broker in replicas.iter().filter(|b| **b != local) {
            let in_isr = self.isr.contains(&broker);
            self.followers
                .entry(broker)
                .or_insert_with(|| FollowerProgress {
                    last_caught_up_ms: in_isr.then_some(now_ms),
                    ..FollowerProgress::default()
                });
        }
        self.replicas = replicas;
    }

    /// This broker.
    pub fn local(&self) -> BrokerId {
        self.local
    }

    /// The replicas, in assignment order.
    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    /// The committed ISR.
    pub fn isr(&self) -> &BTreeSet<BrokerId> {
        &self.isr
    }

    /// The maximal ISR: the committed ISR plus the members a pending AlterPartition adds.
    pub fn maximal_isr(&self) -> BTreeSet<BrokerId> {
        let mut maximal = self.isr.clone();
        if let Some(pending) = &self.pending {
            maximal.extend(pending.isr.iter().copied());
        }
        maximal
    }

    /// The leader epoch.
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// The partition epoch the committed ISR belongs to.
    pub fn partition_epoch(&self) -> PartitionEpoch {
        self.partition_epoch
    }

    /// The leader's log start offset as the shell last reported it.
    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// The leader's log end offset.
    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// Where the current leader epoch starts.
    pub fn leader_epoch_start_offset(&self) -> Offset {
        self.leader_epoch_start_offset
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// min(`min.insync.replicas`, replication factor).
    pub fn effective_min_isr(&self) -> usize {
        effective_min_isr(self.config.min_insync_replicas, self.replicas.len())
    }

    /// The committed ISR is smaller than the effective min ISR: the high watermark is frozen
    /// and acks=all produce is refused (KIP-966).
    pub fn is_under_min_isr(&self) -> bool {
        self.isr.len() < self.effective_min_isr()
    }

    /// A follower's progress.
    pub fn follower(&self, broker: BrokerId) -> Option<&FollowerProgress> {
        self.followers.get(&broker)
    }

    /// The outstanding AlterPartition, if any.
    pub fn pending_alter_partition(&self) -> Option<&PendingAlterPartition> {
        self.pending.as_ref()
    }

    /// The acks=all requests waiting in the purgatory.
    pub fn waiting_requests(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.waiting.keys().copied()
    }

    /// The DeleteRecords requests waiting for the low watermark.
    pub fn waiting_deletes(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.waiting_deletes.keys().copied()
    }

    /// This leadership ended; every method is now a no-op or answers
    /// `NOT_LEADER_OR_FOLLOWER`.
    pub fn has_ended(&self) -> bool {
        self.ended
    }

    /// Checks the state's invariants; a failure means this crate is wrong.
    pub fn check_invariants(&self) {
        assert!(self.high_watermark <= self.log_end_offset, "HWM beyond LEO");
        assert!(
            self.log_start_offset <= self.high_watermark,
            "log start beyond HWM"
        );
        assert!(
            self.isr.contains(&self.local) || self.ended,
            "leader not in ISR"
        );
        assert!(
            !self.followers.contains_key(&self.local),
            "leader tracked as follower"
        );
        if let Some(pending) = &self.pending {
            assert!(
                pending.isr.contains(&self.local),
                "proposal without the leader"
            );
        }
        for waiting in self.waiting.values() {
            assert!(
                waiting.required_offset > self.high_watermark,
                "covered but waiting"
            );
        }
        let low_watermark = self.low_watermark();
        for waiting in self.waiting_deletes.values() {
            assert!(
                low_watermark.is_none_or(|lw| waiting.required_offset > lw),
                "delete reached but waiting"
            );
        }
    }
}
