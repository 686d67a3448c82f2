//! The pure controller facade: operations and events in (each with `now_ms`), records to append
//! plus responses and commands out. Only [`Controller::replay`] changes the image.
//!
//! Contract with the caller (the IO shell, the golden runner, the tests): append the returned
//! records at consecutive offsets starting at [`Controller::next_offset`], and replay them once
//! committed, before the next operation. Operations generate from the replayed image only (no
//! pipelining); a broker's new epoch is the offset its `RegisterBroker` record will have.
//!
//! Files: [`membership`] (registration, heartbeats, fencing, controlled shutdown),
//! [`partitions`] (topics, AlterPartition, configs, features), [`elections`] (ElectLeaders and the
//! unclean recovery events), [`producer_ids`] (AllocateProducerIds), [`scram`]
//! (AlterUserScramCredentials, bootstrap records).

mod acls;
mod elections;
mod features;
mod membership;
mod partitions;
mod producer_ids;
mod quotas;
mod reassignments;
mod scram;

use std::collections::{BTreeMap, BTreeSet};

pub use elections::{ElectionOutcome, ElectionResult, ElectionType};
pub use features::{TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX};
pub use membership::{
    HeartbeatRequest, HeartbeatResponse, LostReplica, LostReplicaReason, RegisterBrokerRequest,
    RegisterBrokerResponse, LOST_REPLICAS_PER_HEARTBEAT_MAX,
};
pub use partitions::{
    too_many_partitions, topic_batch_partitions, ConfigChange, CreatePartitionsRequest,
    CreateTopicRequest, EXCESSIVE_BATCH, EXCESSIVE_PARTITIONS,
    MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS, MAX_PARTITIONS_PER_REQUEST, MAX_RECORDS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP, MAX_REPLICAS_PER_REQUEST,
};
pub use producer_ids::{ProducerIdBlock, PRODUCER_ID_BLOCK_SIZE};
pub use quotas::QuotaAlteration;
pub use reassignments::{list_reassignments, OngoingReassignment, ReassignmentRequest};
pub use scram::{ScramAlterResult, ScramDeletion, ScramUpsertion};

use crate::config::DEFAULT_BROKER_SESSION_TIMEOUT_MS;
use crate::errors::ReplayError;
use crate::image::ClusterImage;
use crate::partition::PartitionState;
use crate::partition_change::{
    classify, partition_change, recovery_mode, ChangeContext, ChangeDecision, PartitionStatus,
    ProposedChange,
};
use crate::records::{PartitionChangeRecord, Record};
use crate::recovery::{
    batch_commands, Command, RecoveryTask, RecoveryView, UncleanRecoveryManager,
};
use crate::types::{BrokerEpoch, BrokerId, MetadataOffset, RecoveryMode, TopicPartition};

/// Static controller settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// The cluster id brokers must present (`INCONSISTENT_CLUSTER_ID` otherwise).
    pub cluster_id: String,
    /// `broker.session.timeout.ms`: a broker silent this long is fenced.
    pub session_timeout_ms: u64,
}

impl ControllerConfig {
    /// Kafka's defaults for a cluster id.
    pub fn new(cluster_id: impl Into<String>) -> Self {
        ControllerConfig {
            cluster_id: cluster_id.into(),
            session_timeout_ms: DEFAULT_BROKER_SESSION_TIMEOUT_MS,
        }
    }
}

/// What an operation produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output<R> {
    /// Records to append, in order.
    pub records: Vec<Record>,
    /// Commands for the IO shell (unclean recovery requests and timers), batched per broker.
    pub commands: Vec<Command>,
    /// The answer to the caller.
    pub response: R,
}

/// The controller: the replayed image plus soft state that is not in the log (heartbeat
/// sessions, unclean recovery tasks), rebuilt after a failover.
#[derive(Clone, Debug)]
pub struct Controller {
    image: ClusterImage,
    config: ControllerConfig,
    sessions: BTreeMap<BrokerId, u64>,
    recovery: UncleanRecoveryManager,
    clock_ms: u64,
}

/// Records generated so far in one operation, replayed onto a scratch copy of the image so that
/// later decisions of the same operation see earlier ones.
pub(crate) struct Batch {
    scratch: ClusterImage,
    records: Vec<Record>,
    commands: Vec<Command>,
}

impl Batch {
    fn new(image: &ClusterImage) -> Self {
        Batch {
            scratch: image.clone(),
            records: Vec::new(),
            commands: Vec::new(),
        }
    }

    fn next_offset(&self) -> MetadataOffset {
        self.scratch.next_offset()
    }

    fn push(&mut self, record: Record) {
        let offset = self.next_offset();
        if let Err(error) = self.scratch.replay(offset, &record) {
            panic!("generated record does not replay ({error}): {record:?}");
        }
        self.records.push(record);
    }

    fn partition(&self, tp: TopicPartition) -> Option<&PartitionState> {
        self.scratch.partition(tp)
    }

    fn epochs(&self) -> BTreeMap<BrokerId, BrokerEpoch> {
        self.scratch
            .brokers()
            .iter()
            .map(|(id, b)| (*id, b.epoch))
            .collect()
    }

    fn finish<R>(self, response: R) -> Output<R> {
        Output {
            records: self.records,
            commands: batch_commands(self.commands),
            response,
        }
    }
}

impl Controller {
    /// A controller over an empty image.
    pub fn new(config: ControllerConfig) -> Self {
        Controller::from_image(ClusterImage::new(), config, 0)
    }

    /// A controller taking over `image` (e.g. after a failover) at `now_ms`: every registered
    /// broker gets a fresh session and no unclean recovery runs until [`Controller::tick`].
    pub fn from_image(image: ClusterImage, config: ControllerConfig, now_ms: u64) -> Self {
        let sessions = image.brokers().keys().map(|b| (*b, now_ms)).collect();
        Controller {
            image,
            config,
            sessions,
            recovery: UncleanRecoveryManager::new(),
            clock_ms: now_ms,
        }
    }

    /// Ends a broker's heartbeat session as if it had expired: the next tick fences the broker
    /// unless it heartbeats first, and a new incarnation may register at once. For a shell
    /// that knows the broker's process is gone (it shares the controller's process, which just
    /// started).
    pub fn expire_session(&mut self, broker: BrokerId) {
        self.sessions.remove(&broker);
    }

    /// The replayed image.
    pub fn image(&self) -> &ClusterImage {
        &self.image
    }

    /// The settings.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// The offset the next generated record will have.
    pub fn next_offset(&self) -> MetadataOffset {
        self.image.next_offset()
    }

    /// Replays one committed record. Registrations open a heartbeat session; a partition that
    /// got a leader ends its unclean recovery.
    pub fn replay(&mut self, offset: MetadataOffset, record: &Record) -> Result<(), ReplayError> {
        self.image.replay(offset, record)?;
        match record {
            Record::RegisterBroker(r) => {
                self.sessions.entry(r.broker).or_insert(self.clock_ms);
            }
            Record::UnregisterBroker(r) => {
                self.sessions.remove(&r.broker);
            }
            Record::RemoveTopic(r) => {
                let gone: Vec<TopicPartition> = self
                    .recovery
                    .partitions()
                    .filter(|tp| tp.topic == r.id)
                    .collect();
                for tp in gone {
                    self.recovery.cancel(tp);
                }
            }
            Record::PartitionChange(r)
                if self
                    .image
                    .partition(r.partition)
                    .is_some_and(|p| p.leader.is_some()) =>
            {
                self.recovery.cancel(r.partition);
            }
            _ => {}
        }
        Ok(())
    }

    /// Replays records at consecutive offsets from [`Controller::next_offset`].
    pub fn replay_all(&mut self, records: &[Record]) -> Result<(), ReplayError> {
        for record in records {
            self.replay(self.next_offset(), record)?;
        }
        Ok(())
    }

    /// One partition.
    pub fn partition(&self, tp: TopicPartition) -> Option<&PartitionState> {
        self.image.partition(tp)
    }

    /// What a partition is waiting for.
    pub fn partition_status(&self, tp: TopicPartition) -> Option<PartitionStatus> {
        let p = self.image.partition(tp)?;
        let live = self.image.live_brokers();
        Some(classify(p, &context(&self.image, tp, &live)))
    }

    /// Partitions under unclean recovery (KIP-966 `unclean_recovery_partitions_count`).
    pub fn partitions_under_recovery(&self) -> Vec<TopicPartition> {
        self.recovery.partitions().collect()
    }

    /// One partition's recovery task.
    pub fn recovery_task(&self, tp: TopicPartition) -> Option<&RecoveryTask> {
        self.recovery.task(tp)
    }

    /// Leaderless partitions waiting for an operator (KIP-966 `paused_partitions_count`).
    pub fn paused_partitions(&self) -> Vec<TopicPartition> {
        let live = self.image.live_brokers();
        self.image
            .partitions()
            .filter(|(tp, p)| {
                classify(p, &context(&self.image, *tp, &live)) == PartitionStatus::PausedForOperator
            })
            .map(|(tp, _)| tp)
            .collect()
    }

    /// |ISR| + |ELR| (KIP-966 `electable_replicas_count`).
    pub fn electable_replicas(&self, tp: TopicPartition) -> Option<usize> {
        self.image
            .partition(tp)
            .map(PartitionState::electable_replicas)
    }

    /// When a broker last heartbeated (soft state, not in the log).
    pub fn last_heartbeat_ms(&self, broker: BrokerId) -> Option<u64> {
        self.sessions.get(&broker).copied()
    }

    fn advance(&mut self, now_ms: u64) {
        self.clock_ms = self.clock_ms.max(now_ms);
    }

    /// Runs the partition-change function for `tp` on the batch's state, appends the record,
    /// and keeps the recovery manager in step.
    fn change(
        &mut self,
        batch: &mut Batch,
        tp: TopicPartition,
        change: &ProposedChange,
        now_ms: u64,
    ) -> Option<ChangeDecision> {
        let p = batch.partition(tp)?.clone();
        let live = batch.scratch.live_brokers();
        let decision = partition_change(&p, change, &context(&batch.scratch, tp, &live));
        if let Some(delta) = &decision.delta {
            batch.push(Record::PartitionChange(PartitionChangeRecord {
                partition: tp,
                change: delta.clone(),
            }));
        }
        self.follow_up(batch, tp, now_ms);
        Some(decision)
    }

    /// After a change of `tp`: a leader ends recovery; a partition that needs recovery and has no
    /// task gets one.
    fn follow_up(&mut self, batch: &mut Batch, tp: TopicPartition, now_ms: u64) {
        let Some(p) = batch.partition(tp).cloned() else {
            return;
        };
        let live = batch.scratch.live_brokers();
        let ctx = context(&batch.scratch, tp, &live);
        match classify(&p, &ctx) {
            PartitionStatus::Led(_) => {
                self.recovery.cancel(tp);
            }
            PartitionStatus::NeedsUncleanRecovery => {
                let mode = recovery_mode(&p, ctx.strategy);
                self.start_recovery(batch, tp, mode, now_ms);
            }
            _ => {}
        }
    }

    fn start_recovery(
        &mut self,
        batch: &mut Batch,
        tp: TopicPartition,
        mode: RecoveryMode,
        now_ms: u64,
    ) {
        let Some(p) = batch.partition(tp).cloned() else {
            return;
        };
        let epochs = batch.epochs();
        let live = batch.scratch.live_brokers();
        let view = RecoveryView {
            epochs: &epochs,
            live: &live,
        };
        let commands = self.recovery.start(tp, &p, mode, &view, now_ms);
        batch.commands.extend(commands);
    }

    /// Re-checks running recovery tasks of partitions `broker` replicates (after it was
    /// unfenced or re-registered) and elects where ready.
    fn recheck_recovery(&mut self, batch: &mut Batch, broker: Option<BrokerId>, now_ms: u64) {
        let tasks: Vec<TopicPartition> = self.recovery.partitions().collect();
        for tp in tasks {
            let Some(p) = batch.partition(tp).cloned() else {
                self.recovery.cancel(tp);
                continue;
            };
            if broker.is_some_and(|b| !p.is_replica(b)) {
                continue;
            }
            if p.leader.is_some() {
                self.recovery.cancel(tp);
                continue;
            }
            let epochs = batch.epochs();
            let live = batch.scratch.live_brokers();
            let view = RecoveryView {
                epochs: &epochs,
                live: &live,
            };
            let step = self.recovery.evaluate(tp, &p, &view);
            batch.commands.extend(step.commands);
            if let Some(winner) = step.elect {
                self.change(batch, tp, &ProposedChange::ElectRecovered(winner), now_ms);
            }
        }
    }

    /// Starts unclean recovery for every partition that needs it and has no task — KIP-966:
    /// "the controller will trigger the recovery again when handling heartbeats".
    fn reconcile_recovery(&mut self, batch: &mut Batch, now_ms: u64) {
        let needing: Vec<(TopicPartition, RecoveryMode)> = {
            let live = batch.scratch.live_brokers();
            batch
                .scratch
                .partitions()
                .filter(|(tp, _)| self.recovery.task(*tp).is_none())
                .filter_map(|(tp, p)| {
                    let ctx = context(&batch.scratch, tp, &live);
                    (classify(p, &ctx) == PartitionStatus::NeedsUncleanRecovery)
                        .then(|| (tp, recovery_mode(p, ctx.strategy)))
                })
                .collect()
        };
        for (tp, mode) in needing {
            self.start_recovery(batch, tp, mode, now_ms);
        }
    }

    /// Starts the unclean recoveries the current image needs (no records): what a new
    /// controller does first, and what the golden runner does after setting a case up.
    pub fn start_needed_recoveries(&mut self, now_ms: u64) -> Output<()> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        self.reconcile_recovery(&mut batch, now_ms);
        batch.finish(())
    }

    /// Re-runs the online election of every leaderless partition (Kafka's periodic unclean
    /// election task; also picks up strategy changes).
    fn reelect_leaderless(&mut self, batch: &mut Batch, now_ms: u64) {
        let leaderless: Vec<TopicPartition> = batch
            .scratch
            .partitions()
            .filter(|(_, p)| p.leader.is_none())
            .map(|(tp, _)| tp)
            .collect();
        for tp in leaderless {
            self.change(batch, tp, &ProposedChange::Reelect, now_ms);
        }
    }

    /// Partitions for which `pick` proposes a change, in order.
    fn partitions_where(
        batch: &Batch,
        pick: impl Fn(&PartitionState) -> Option<ProposedChange>,
    ) -> Vec<(TopicPartition, ProposedChange)> {
        batch
            .scratch
            .partitions()
            .filter_map(|(tp, p)| pick(p).map(|c| (tp, c)))
            .collect()
    }

    /// The effective context of one partition for the partition-change function.
    pub fn context<'a>(
        &self,
        tp: TopicPartition,
        live: &'a BTreeSet<BrokerId>,
    ) -> ChangeContext<'a> {
        context(&self.image, tp, live)
    }
}

fn context<'a>(
    image: &ClusterImage,
    tp: TopicPartition,
    live: &'a BTreeSet<BrokerId>,
) -> ChangeContext<'a> {
    ChangeContext {
        live,
        min_isr: image.partition_min_isr(tp),
        configured_min_isr: image.configured_min_isr(tp.topic),
        strategy: image.strategy(tp.topic),
        elr_enabled: image.elr_enabled(),
    }
}
