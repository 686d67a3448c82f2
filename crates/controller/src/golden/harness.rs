//! A one-partition cluster driven through the [`Controller`] facade exactly as the IO shell
//! will drive it: each event becomes requests, the returned records are replayed at consecutive
//! offsets, and the outcome is reported. Used by the golden runner and the property tests.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::alter_partition::{AlterPartitionItem, AlterPartitionRequest, IsrMember};
use crate::config::{
    ELR_FEATURE, MIN_INSYNC_REPLICAS, PROACTIVE_RECOVERY_WAIT_MS, UNCLEAN_LEADER_ELECTION_ENABLE,
    UNCLEAN_RECOVERY_STRATEGY,
};
use crate::controller::{
    Controller, ControllerConfig, ElectionOutcome, ElectionType, HeartbeatRequest, LostReplica,
    LostReplicaReason, Output, RegisterBrokerRequest,
};
use crate::errors::ErrorCode;
use crate::image::BrokerState;
use crate::partition::PartitionState;
use crate::records::{
    BrokerRegistrationChangeRecord, BrokerStateChange, ConfigRecord, ConfigResource,
    FeatureLevelRecord, PartitionRecord, Record, RegisterBrokerRecord, TopicRecord,
};
use crate::recovery::{Command, ReplicaLogInfo};
use crate::types::{
    BrokerEpoch, BrokerId, DirectoryId, IncarnationId, LeaderEpoch, LeaderRecoveryState,
    MetadataOffset, Offset, PartitionEpoch, RecoveryMode, TopicId, TopicPartition,
    UncleanRecoveryStrategy,
};

/// The cluster id the harness uses.
pub const CLUSTER_ID: &str = "keel-golden";
/// The topic name the harness uses.
pub const TOPIC: &str = "golden";

/// How the cluster looks before the first event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The effective min ISR (must not exceed the replication factor).
    pub min_isr: usize,
    /// `eligible.leader.replicas.enable`.
    pub elr: bool,
    /// `unclean.recovery.strategy`, if set.
    pub strategy: Option<UncleanRecoveryStrategy>,
    /// `unclean.leader.election.enable`, if set.
    pub unclean_leader_election: Option<bool>,
    /// Registered, fenced brokers.
    pub fenced: BTreeSet<BrokerId>,
    /// Registered brokers in controlled shutdown.
    pub shutting_down: BTreeSet<BrokerId>,
    /// Brokers without a registration.
    pub unregistered: BTreeSet<BrokerId>,
    /// Registration epochs (default `1000 + id`).
    pub broker_epochs: BTreeMap<BrokerId, BrokerEpoch>,
    /// The partition.
    pub partition: PartitionState,
}

/// What one event produced, besides the state change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// The Kafka error answered, if any.
    pub error: Option<ErrorCode>,
    /// The election warning flag, when the event was an election that elected.
    pub warning: Option<bool>,
    /// The records appended.
    pub records: Vec<Record>,
    /// The commands emitted.
    pub commands: Vec<Command>,
}

/// One topic with one partition, its brokers, and a clock.
#[derive(Clone, Debug)]
pub struct Harness {
    controller: Controller,
    tp: TopicPartition,
    now_ms: u64,
    incarnations: u128,
    directory_generation: BTreeMap<BrokerId, u128>,
}

/// The directory id of `broker`'s `generation`-th disk.
pub fn directory_id(broker: BrokerId, generation: u128) -> DirectoryId {
    DirectoryId(Uuid::from_u128(
        (0xd1 << 96) | ((broker.0 as u32 as u128) << 32) | generation,
    ))
}

impl Harness {
    /// Builds the cluster by replaying setup records, then starts the unclean recoveries the
    /// partition needs. Errors describe a setup that is not a valid state.
    pub fn new(setup: &Setup) -> Result<Harness, String> {
        let p = &setup.partition;
        if setup.min_isr == 0 || setup.min_isr > p.replicas.len() {
            return Err(format!(
                "min_isr {} must be between 1 and the replication factor {}",
                setup.min_isr,
                p.replicas.len()
            ));
        }
        let mut brokers: BTreeSet<BrokerId> = p.replicas.iter().copied().collect();
        brokers.extend(setup.broker_epochs.keys().copied());
        brokers.extend(setup.fenced.iter().copied());
        brokers.extend(setup.shutting_down.iter().copied());
        for b in &setup.unregistered {
            brokers.remove(b);
        }
        let epoch_of = |b: BrokerId| {
            setup
                .broker_epochs
                .get(&b)
                .copied()
                .unwrap_or(BrokerEpoch(1000 + i64::from(b.0)))
        };
        let base = brokers.iter().map(|b| epoch_of(*b).0).max().unwrap_or(0) + 1;
        let tp = TopicPartition::new(TopicId(Uuid::from_u128(0x6b65_656c)), 0);
        let mut records = vec![
            Record::FeatureLevel(FeatureLevelRecord {
                name: ELR_FEATURE.to_string(),
                level: u16::from(setup.elr),
            }),
            cluster_config(MIN_INSYNC_REPLICAS, &setup.min_isr.to_string()),
        ];
        if let Some(strategy) = setup.strategy {
            records.push(cluster_config(UNCLEAN_RECOVERY_STRATEGY, strategy.name()));
        }
        if let Some(enable) = setup.unclean_leader_election {
            records.push(cluster_config(
                UNCLEAN_LEADER_ELECTION_ENABLE,
                &enable.to_string(),
            ));
        }
        for b in &brokers {
            records.push(Record::RegisterBroker(RegisterBrokerRecord {
                broker: *b,
                epoch: epoch_of(*b),
                incarnation: IncarnationId(Uuid::from_u128(b.0 as u32 as u128)),
                listeners: Vec::new(),
                rack: None,
                log_dirs: vec![directory_id(*b, 0)],
                fenced: setup.fenced.contains(b),
            }));
            if setup.shutting_down.contains(b) {
                records.push(Record::BrokerRegistrationChange(
                    BrokerRegistrationChangeRecord {
                        broker: *b,
                        epoch: epoch_of(*b),
                        change: BrokerStateChange::ControlledShutdown,
                    },
                ));
            }
        }
        records.push(Record::Topic(TopicRecord {
            name: TOPIC.to_string(),
            id: tp.topic,
        }));
        let mut state = p.clone();
        state.directories = p
            .replicas
            .iter()
            .map(|r| Some(directory_id(*r, 0)))
            .collect();
        records.push(Record::Partition(PartitionRecord {
            partition: tp,
            state,
        }));
        let mut controller = Controller::new(ControllerConfig::new(CLUSTER_ID));
        for (i, record) in records.iter().enumerate() {
            controller
                .replay(MetadataOffset(base + i as i64), record)
                .map_err(|e| format!("invalid setup: {e}"))?;
        }
        let mut harness = Harness {
            controller,
            tp,
            now_ms: 0,
            incarnations: 0,
            directory_generation: BTreeMap::new(),
        };
        let start = harness.controller.start_needed_recoveries(0);
        harness.commit(start)?;
        Ok(harness)
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The partition.
    pub fn tp(&self) -> TopicPartition {
        self.tp
    }

    /// The partition's state.
    pub fn partition(&self) -> &PartitionState {
        self.controller
            .partition(self.tp)
            .expect("the harness partition exists")
    }

    /// The current time.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn commit<R>(&mut self, output: Output<R>) -> Result<(R, Vec<Record>, Vec<Command>), String> {
        self.controller
            .replay_all(&output.records)
            .map_err(|e| format!("replay failed: {e}"))?;
        Ok((output.response, output.records, output.commands))
    }

    fn epoch(&self, b: BrokerId) -> Option<BrokerEpoch> {
        self.controller.image().broker(b).map(|r| r.epoch)
    }

    fn state(&self, b: BrokerId) -> Option<BrokerState> {
        self.controller.image().broker(b).map(|r| r.state)
    }

    fn outcome(records: Vec<Record>, commands: Vec<Command>) -> StepOutcome {
        StepOutcome {
            records,
            commands,
            ..StepOutcome::default()
        }
    }

    /// An AlterPartition; `None` fields default to the partition's and sender's current values.
    #[allow(clippy::too_many_arguments)]
    pub fn alter_partition(
        &mut self,
        isr: &[BrokerId],
        sender: Option<BrokerId>,
        sender_epoch: Option<BrokerEpoch>,
        leader_epoch: Option<LeaderEpoch>,
        partition_epoch: Option<PartitionEpoch>,
        isr_epochs: &BTreeMap<BrokerId, BrokerEpoch>,
        leader_recovery_state: Option<LeaderRecoveryState>,
    ) -> Result<StepOutcome, String> {
        let p = self.partition().clone();
        let sender = sender
            .or(p.leader)
            .or(p.replicas.first().copied())
            .unwrap_or(BrokerId(-1));
        let req = AlterPartitionRequest {
            broker: sender,
            broker_epoch: sender_epoch
                .or(self.epoch(sender))
                .unwrap_or(BrokerEpoch(-1)),
            partitions: vec![AlterPartitionItem {
                topic: self.tp.topic,
                partition: self.tp.partition,
                leader_epoch: leader_epoch.unwrap_or(p.leader_epoch),
                partition_epoch: partition_epoch.unwrap_or(p.partition_epoch),
                new_isr: isr
                    .iter()
                    .map(|b| IsrMember {
                        broker: *b,
                        broker_epoch: isr_epochs.get(b).copied(),
                    })
                    .collect(),
                leader_recovery_state: leader_recovery_state
                    .unwrap_or(LeaderRecoveryState::Recovered),
            }],
        };
        let output = self.controller.alter_partition(&req, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = match response {
            Err(code) => Some(code),
            Ok(items) => items.into_iter().find_map(|i| i.result.err()),
        };
        Ok(outcome)
    }

    /// The controller fences `broker`.
    pub fn fence(&mut self, broker: BrokerId) -> Result<StepOutcome, String> {
        let output = self.controller.fence_broker(broker, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }

    /// `broker` heartbeats (caught up, not asking to be fenced): unfences it.
    pub fn unfence(&mut self, broker: BrokerId) -> Result<StepOutcome, String> {
        self.heartbeat(broker, false)
    }

    fn heartbeat(&mut self, broker: BrokerId, want_shutdown: bool) -> Result<StepOutcome, String> {
        let req = HeartbeatRequest {
            broker,
            broker_epoch: self.epoch(broker).unwrap_or(BrokerEpoch(-1)),
            current_metadata_offset: self.controller.image().last_applied(),
            want_fence: false,
            want_shutdown,
            lost_replicas: Vec::new(),
        };
        let output = self.controller.heartbeat(&req, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }

    /// `broker` heartbeats reporting that its replica lost data while running (issue 19): its
    /// log held damage it set aside (`offline` false) or its log directory failed. The report
    /// names `partition_epoch` (default: the partition's current one).
    pub fn lose_replica(
        &mut self,
        broker: BrokerId,
        offline: bool,
        partition_epoch: Option<i32>,
    ) -> Result<StepOutcome, String> {
        let current = self
            .controller
            .image()
            .partition(self.tp)
            .map_or(0, |p| p.partition_epoch.0);
        let req = HeartbeatRequest {
            broker,
            broker_epoch: self.epoch(broker).unwrap_or(BrokerEpoch(-1)),
            current_metadata_offset: self.controller.image().last_applied(),
            want_fence: false,
            want_shutdown: false,
            lost_replicas: vec![LostReplica {
                partition: self.tp,
                partition_epoch: PartitionEpoch(partition_epoch.unwrap_or(current)),
                reason: if offline {
                    LostReplicaReason::DirectoryOffline
                } else {
                    LostReplicaReason::Damaged
                },
            }],
        };
        let output = self.controller.heartbeat(&req, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }

    /// Every registered, not fenced broker except `except` heartbeats at the current time.
    fn keep_alive(&mut self, except: Option<BrokerId>) -> Result<Vec<Record>, String> {
        let alive: Vec<BrokerId> = self
            .controller
            .image()
            .brokers()
            .values()
            .filter(|b| b.state != BrokerState::Fenced && Some(b.id) != except)
            .map(|b| b.id)
            .collect();
        let mut records = Vec::new();
        for b in alive {
            let req = HeartbeatRequest {
                broker: b,
                broker_epoch: self.epoch(b).unwrap_or(BrokerEpoch(-1)),
                current_metadata_offset: self.controller.image().last_applied(),
                want_fence: false,
                want_shutdown: false,
                lost_replicas: Vec::new(),
            };
            let output = self.controller.heartbeat(&req, self.now_ms);
            let (_, more, _) = self.commit(output)?;
            records.extend(more);
        }
        Ok(records)
    }

    /// `broker`'s session expires while every other broker keeps heartbeating.
    pub fn heartbeat_timeout(&mut self, broker: BrokerId) -> Result<StepOutcome, String> {
        self.now_ms += self.controller.config().session_timeout_ms;
        let mut records = self.keep_alive(Some(broker))?;
        let output = self.controller.tick(self.now_ms);
        let (_, more, commands) = self.commit(output)?;
        records.extend(more);
        Ok(Harness::outcome(records, commands))
    }

    /// Every live broker heartbeats, then the controller ticks.
    pub fn tick(&mut self) -> Result<StepOutcome, String> {
        let mut records = self.keep_alive(None)?;
        let output = self.controller.tick(self.now_ms);
        let (_, more, commands) = self.commit(output)?;
        records.extend(more);
        Ok(Harness::outcome(records, commands))
    }

    /// `broker` asks to shut down, then heartbeats again to complete the shutdown.
    pub fn controlled_shutdown(&mut self, broker: BrokerId) -> Result<StepOutcome, String> {
        let mut first = self.heartbeat(broker, true)?;
        if first.error.is_some() {
            return Ok(first);
        }
        let second = self.heartbeat(broker, true)?;
        first.records.extend(second.records);
        first.commands.extend(second.commands);
        first.error = second.error;
        Ok(first)
    }

    /// `broker` restarts and registers: `clean` = it has its clean-shutdown file;
    /// `replace_disk` = its log directory got a new id. A broker that is not fenced first loses
    /// its session (a restart takes longer than the session timeout).
    pub fn register(
        &mut self,
        broker: BrokerId,
        clean: bool,
        replace_disk: bool,
    ) -> Result<StepOutcome, String> {
        let mut records = Vec::new();
        if matches!(
            self.state(broker),
            Some(BrokerState::Unfenced | BrokerState::ControlledShutdown)
        ) {
            records.extend(self.heartbeat_timeout(broker)?.records);
        }
        let generation = self.directory_generation.entry(broker).or_insert(0);
        if replace_disk {
            *generation += 1;
        }
        let log_dirs = vec![directory_id(broker, *generation)];
        self.incarnations += 1;
        let req = RegisterBrokerRequest {
            broker,
            cluster_id: CLUSTER_ID.to_string(),
            incarnation: IncarnationId(Uuid::from_u128((1 << 64) | self.incarnations)),
            listeners: Vec::new(),
            rack: None,
            log_dirs,
            previous_broker_epoch: if clean { self.epoch(broker) } else { None },
        };
        let output = self.controller.register_broker(&req, self.now_ms);
        let (response, more, commands) = self.commit(output)?;
        records.extend(more);
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }

    /// The cluster's `min.insync.replicas` changes.
    pub fn set_min_isr(&mut self, min_isr: usize) -> Result<StepOutcome, String> {
        self.set_cluster_config(MIN_INSYNC_REPLICAS, &min_isr.to_string())
    }

    /// The cluster's `unclean.recovery.strategy` changes.
    pub fn set_strategy(&mut self, strategy: &str) -> Result<StepOutcome, String> {
        self.set_cluster_config(UNCLEAN_RECOVERY_STRATEGY, strategy)
    }

    fn set_cluster_config(&mut self, name: &str, value: &str) -> Result<StepOutcome, String> {
        let output =
            self.controller
                .alter_config(&ConfigResource::Cluster, name, Some(value), self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }

    /// An AlterPartitionReassignments request for the partition: to `target`, or (`None`)
    /// cancelling the one in progress.
    pub fn reassign(&mut self, target: Option<Vec<BrokerId>>) -> Result<StepOutcome, String> {
        let request = crate::ReassignmentRequest {
            topic: TOPIC.to_string(),
            partition: i32::try_from(self.tp.partition).unwrap_or(i32::MAX),
            target,
            allow_replication_factor_change: true,
        };
        let output = self
            .controller
            .alter_partition_reassignments(&[request], self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response
            .into_iter()
            .next()
            .and_then(|r| r.err())
            .map(|e| e.code);
        Ok(outcome)
    }

    /// An ElectLeaders request for the partition.
    pub fn elect(&mut self, election: ElectionType) -> Result<StepOutcome, String> {
        let output = self
            .controller
            .elect_leaders(election, &[self.tp], self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        match response.first().map(|r| r.result) {
            Some(Err(code)) => outcome.error = Some(code),
            Some(Ok(ElectionOutcome::Elected { warning, .. })) => outcome.warning = Some(warning),
            Some(Ok(ElectionOutcome::RecoveryStarted)) | None => {}
        }
        Ok(outcome)
    }

    /// An unclean election with an optional recovery mode.
    pub fn elect_unclean(&mut self, mode: Option<RecoveryMode>) -> Result<StepOutcome, String> {
        self.elect(ElectionType::Unclean { mode })
    }

    /// A `GetReplicaLogInfo` answer; `None` epochs default to the current ones.
    pub fn recovery_answer(
        &mut self,
        broker: BrokerId,
        log_end_offset: Offset,
        last_leader_epoch: LeaderEpoch,
        broker_epoch: Option<BrokerEpoch>,
        partition_leader_epoch: Option<LeaderEpoch>,
    ) -> Result<StepOutcome, String> {
        let info = ReplicaLogInfo {
            log_end_offset,
            last_leader_epoch,
            broker_epoch: broker_epoch
                .or(self.epoch(broker))
                .unwrap_or(BrokerEpoch(-1)),
            partition_leader_epoch: partition_leader_epoch.unwrap_or(self.partition().leader_epoch),
        };
        let output = self
            .controller
            .recovery_answer(self.tp, broker, info, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err();
        Ok(outcome)
    }

    /// The recovery timer fires (time moves to the Proactive deadline if needed).
    pub fn recovery_timeout(&mut self) -> Result<StepOutcome, String> {
        let deadline = self
            .controller
            .recovery_task(self.tp)
            .map_or(self.now_ms, |t| t.started_ms + PROACTIVE_RECOVERY_WAIT_MS);
        self.now_ms = self.now_ms.max(deadline);
        let output = self.controller.recovery_timeout(self.tp, self.now_ms);
        let (_, records, commands) = self.commit(output)?;
        Ok(Harness::outcome(records, commands))
    }

    /// The broker is unregistered.
    pub fn unregister(&mut self, broker: BrokerId) -> Result<StepOutcome, String> {
        let output = self.controller.unregister_broker(broker, self.now_ms);
        let (response, records, commands) = self.commit(output)?;
        let mut outcome = Harness::outcome(records, commands);
        outcome.error = response.err().map(|e| e.code);
        Ok(outcome)
    }
}

fn cluster_config(name: &str, value: &str) -> Record {
    Record::Config(ConfigRecord {
        resource: ConfigResource::Cluster,
        name: name.to_string(),
        value: Some(value.to_string()),
    })
}
