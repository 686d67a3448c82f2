//! Topics, AlterPartition, configs and the ELR feature.
//!
//! - CreateTopics: ISR = the live assigned replicas, leader = the first of them in replica order,
//!   no ELR (Kafka's `ReplicationControlManager.createTopic`).
//! - AlterPartition: validated by [`crate::alter_partition`], then the proposed ISR goes through
//!   the partition-change function (ELR update included).
//! - `min.insync.replicas` changes emit a [`ClearElrRecord`]: partitions whose ISR meets the new
//!   effective min ISR lose ELR and LastKnownELR (KIP-966: "When updating the config
//!   min.insync.replicas, if the new min ISR <= current ISR, the ELR will be removed").
//! - Strategy changes re-run elections and recovery starts of leaderless partitions.

use std::collections::{BTreeMap, BTreeSet};

use crate::alter_partition::{
    validate_item, validate_sender, AlterPartitionItemResponse, AlterPartitionRequest,
    PartitionView,
};
use crate::config::{
    self, ELR_FEATURE, MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION_ENABLE,
    UNCLEAN_RECOVERY_STRATEGY,
};
use crate::errors::{ApiError, ErrorCode};
use crate::image::ClusterImage;
use crate::partition::PartitionState;
use crate::partition_change::{Election, ProposedChange};
use crate::records::{
    ClearElrRecord, ConfigRecord, ConfigResource, FeatureLevelRecord, PartitionRecord,
    PendingTopicRecord, Record, RemoveTopicRecord, TopicRecord,
};
use crate::types::{BrokerId, TopicId, TopicPartition};

use super::{Batch, Controller, Output};

/// Records one operation writes in one Raft entry at most (Keel's bound: Kafka's
/// `QuorumController.MAX_RECORDS_PER_BATCH` is 10,000 binary records of ~50 bytes; Keel's JSON
/// records are ~350 bytes, so 1,000 of them, ~350 KB, replicate well within the AppendEntries
/// timeout of a tenth of the election timeout). A topic that needs more is written in several
/// batches and stays invisible until complete ([`Record::PendingTopic`]).
pub const MAX_RECORDS_PER_BATCH: usize = 1_000;

/// New partitions one CreateTopics request may create, all topics together, and so the most
/// partitions one topic may have (Keel's). Kafka 4.x refuses more than 10,000 partitions per
/// request (`ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`) because it writes a request as
/// one atomic batch; Keel writes a large topic in batches of [`MAX_RECORDS_PER_BATCH`] records.
pub const MAX_PARTITIONS_PER_REQUEST: u32 = 1_000_000;

/// Replicas (partitions × replication factor) one CreateTopics or CreatePartitions request may
/// create, all topics together (Keel's).
pub const MAX_REPLICAS_PER_REQUEST: u64 = 3_000_000;

/// New partitions one CreatePartitions request may add to a topic, as in Kafka (KAFKA-19673:
/// 10,000, its batch limit). They are written as one entry (an increase is atomic), ~3.5 MB.
pub const MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS: u32 = 10_000;

/// Records one user operation that is not written in batches may generate (Kafka's
/// `QuorumController.MAX_RECORDS_PER_USER_OP`): the config changes of one
/// IncrementalAlterConfigs request, all resources together.
pub const MAX_RECORDS_PER_USER_OP: usize = 10_000;

/// Kafka's message for an operation over [`MAX_RECORDS_PER_USER_OP`] (`PolicyViolationException`).
pub const EXCESSIVE_BATCH: &str = "Unable to perform excessively large batch operation.";

/// Kafka's message for a request over its partition limit (`PolicyViolationException`).
pub const EXCESSIVE_PARTITIONS: &str = "Excessively large number of partitions per request.";

/// `INVALID_PARTITIONS` for a partition count no topic may have.
pub fn too_many_partitions(topic: &str, count: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidPartitions,
        format!(
            "The topic {topic} cannot have {count} partitions: a topic has at most {MAX_PARTITIONS_PER_REQUEST}."
        ),
    )
}

/// How many partitions the batch of a topic's creation that starts at partition `first` holds:
/// the first batch also carries the topic record and its `configs` config records.
pub fn topic_batch_partitions(first: u32, total: u32, configs: usize) -> u32 {
    let budget = if first == 0 {
        MAX_RECORDS_PER_BATCH.saturating_sub(1 + configs)
    } else {
        MAX_RECORDS_PER_BATCH
    };
    let budget = u32::try_from(budget).unwrap_or(u32::MAX).max(1);
    total.saturating_sub(first).min(budget)
}

/// One change of an IncrementalAlterConfigs resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    /// The config name.
    pub name: String,
    /// The new value; `None` deletes it.
    pub value: Option<String>,
}

/// A CreatePartitions request for one topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatePartitionsRequest {
    /// The topic.
    pub topic: TopicId,
    /// The new total number of partitions.
    pub count: u32,
    /// The replicas of each new partition, or `None` for the controller's assignment.
    pub assignment: Option<Vec<Vec<BrokerId>>>,
}

/// A CreateTopics request for one topic, with an explicit assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateTopicRequest {
    /// The name.
    pub name: String,
    /// The id (chosen by the caller; this crate draws no randomness).
    pub id: TopicId,
    /// The replicas of each partition, in preference order.
    pub assignment: Vec<Vec<BrokerId>>,
    /// Topic configs.
    pub configs: BTreeMap<String, String>,
}

impl Controller {
    /// A round-robin assignment over the live brokers (deterministic, by broker id).
    pub fn assign_replicas(
        &self,
        partitions: u32,
        replication_factor: usize,
    ) -> Result<Vec<Vec<BrokerId>>, ApiError> {
        self.assign_replicas_from(0, partitions, replication_factor)
    }

    /// The round-robin assignment of partitions `first..first + partitions` (so new partitions
    /// of a grown topic continue the rotation of the existing ones).
    pub fn assign_replicas_from(
        &self,
        first: u32,
        partitions: u32,
        replication_factor: usize,
    ) -> Result<Vec<Vec<BrokerId>>, ApiError> {
        let live: Vec<BrokerId> = self.image.live_brokers().into_iter().collect();
        if replication_factor == 0 || replication_factor > live.len() {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} with {} live brokers",
                    live.len()
                ),
            ));
        }
        Ok((first as usize..first as usize + partitions as usize)
            .map(|p| {
                (0..replication_factor)
                    .map(|r| live[(p + r) % live.len()])
                    .collect()
            })
            .collect())
    }

    /// Creates a topic whose records fit in one batch (see [`Controller::create_topic_batch`]
    /// for larger ones).
    pub fn create_topic(
        &mut self,
        req: &CreateTopicRequest,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        let total = u32::try_from(req.assignment.len()).unwrap_or(u32::MAX);
        self.create_topic_batch(req, 0, total, now_ms)
    }

    /// Checks a topic creation as [`Controller::create_topic`] would, without generating
    /// anything (CreateTopics with `validate_only`, and the check before the first batch of a
    /// large topic): name and id free, partitions, configs, every partition's replicas. Its
    /// cost is one pass over the assignment; it builds no record.
    pub fn validate_create_topic(&self, req: &CreateTopicRequest) -> Result<(), ApiError> {
        if self.image.topic_taken(&req.name, req.id) {
            return Err(ApiError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", req.name),
            ));
        }
        if req.assignment.is_empty() {
            return Err(ApiError::new(ErrorCode::InvalidPartitions, "no partitions"));
        }
        if req.assignment.len() > MAX_PARTITIONS_PER_REQUEST as usize {
            return Err(too_many_partitions(&req.name, req.assignment.len()));
        }
        if req.configs.len() + 2 > MAX_RECORDS_PER_BATCH {
            return Err(ApiError::new(
                ErrorCode::PolicyViolation,
                format!(
                    "{} configs for topic {:?}: at most {}",
                    req.configs.len(),
                    req.name,
                    MAX_RECORDS_PER_BATCH - 2
                ),
            ));
        }
        for (name, value) in &req.configs {
            config::validate(name, Some(value))?;
        }
        let live = self.image.live_brokers();
        for (index, replicas) in req.assignment.iter().enumerate() {
            check_replicas(&self.image, &live, index, replicas)?;
        }
        Ok(())
    }

    /// One batch of a topic's creation: the partitions `first..first + req.assignment.len()`
    /// of a topic of `total` partitions (`req.assignment` holds just their replicas). A topic
    /// whose records fit in one batch (`first == 0`, all partitions) is a `Topic` record, its
    /// configs and its partitions, as in Kafka. A larger one starts with a `PendingTopic`
    /// record and its configs, and is invisible until its last partition's batch; each later
    /// batch checks that the topic is still pending with exactly `first` partitions (a batch
    /// after a failover or a deletion fails instead of adding to another topic). The caller
    /// commits each batch before generating the next, and removes the pending topic
    /// ([`Controller::abandon_pending_topics`]) if it gives up.
    pub fn create_topic_batch(
        &mut self,
        req: &CreateTopicRequest,
        first: u32,
        total: u32,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let result = self.create_topic_batch_into(&mut batch, req, first, total);
        if result.is_err() {
            batch = Batch::new(&self.image);
        }
        batch.finish(result)
    }

    fn create_topic_batch_into(
        &self,
        batch: &mut Batch,
        req: &CreateTopicRequest,
        first: u32,
        total: u32,
    ) -> Result<(), ApiError> {
        let count = u32::try_from(req.assignment.len()).unwrap_or(u32::MAX);
        if count == 0 || u64::from(first) + u64::from(count) > u64::from(total) {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                format!("partitions {first}..{first}+{count} of a topic of {total}"),
            ));
        }
        if first == 0 {
            // The name and the configs; every partition's replicas are checked below.
            self.validate_create_topic(&CreateTopicRequest {
                name: req.name.clone(),
                id: req.id,
                assignment: vec![req.assignment[0].clone()],
                configs: req.configs.clone(),
            })?;
            if total > MAX_PARTITIONS_PER_REQUEST {
                return Err(too_many_partitions(&req.name, total));
            }
            if count == total {
                batch.push(Record::Topic(TopicRecord {
                    name: req.name.clone(),
                    id: req.id,
                }));
            } else {
                batch.push(Record::PendingTopic(PendingTopicRecord {
                    name: req.name.clone(),
                    id: req.id,
                    partitions: total,
                }));
            }
            for (name, value) in &req.configs {
                batch.push(Record::Config(ConfigRecord {
                    resource: ConfigResource::Topic(req.name.clone()),
                    name: name.clone(),
                    value: Some(value.clone()),
                }));
            }
        } else {
            let pending = batch.scratch.pending_topics().get(&req.id);
            let in_step = pending.is_some_and(|p| {
                p.topic.name == req.name
                    && p.partitions == total
                    && p.topic.partitions.len() == first as usize
            });
            if !in_step {
                return Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!(
                        "topic {:?} is no longer being created (deleted, or the controller changed)",
                        req.name
                    ),
                ));
            }
        }
        let live = batch.scratch.live_brokers();
        let mut states = Vec::with_capacity(req.assignment.len());
        for (offset, replicas) in req.assignment.iter().enumerate() {
            let index = first as usize + offset;
            states.push(new_partition(&batch.scratch, &live, index, replicas)?);
        }
        for (offset, state) in states.into_iter().enumerate() {
            batch.push(Record::Partition(PartitionRecord {
                partition: TopicPartition::new(req.id, first + offset as u32),
                state,
            }));
        }
        Ok(())
    }

    /// Removes every pending topic (a creation in several batches that did not finish) except
    /// those in `creating`: what a new active controller does first (the creations of the
    /// previous one are over), and what the shell does when it gives one up.
    pub fn abandon_pending_topics(
        &mut self,
        creating: &BTreeSet<TopicId>,
        now_ms: u64,
    ) -> Output<Vec<String>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let abandoned: Vec<(TopicId, String)> = self
            .image
            .pending_topics()
            .iter()
            .filter(|(id, _)| !creating.contains(id))
            .map(|(id, p)| (*id, p.topic.name.clone()))
            .collect();
        for (id, _) in &abandoned {
            batch.push(Record::RemoveTopic(RemoveTopicRecord { id: *id }));
        }
        batch.finish(abandoned.into_iter().map(|(_, name)| name).collect())
    }

    /// Deletes a topic: one `RemoveTopic` record (Kafka's `ReplicationControlManager.deleteTopic`).
    /// Answers the deleted topic's name.
    pub fn delete_topic(&mut self, id: TopicId, now_ms: u64) -> Output<Result<String, ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let Some(topic) = self.image.topic(id) else {
            return batch.finish(Err(ApiError::new(
                ErrorCode::UnknownTopicId,
                format!("unknown topic id {id}"),
            )));
        };
        let name = topic.name.clone();
        batch.push(Record::RemoveTopic(RemoveTopicRecord { id }));
        batch.finish(Ok(name))
    }

    /// Grows a topic to `req.count` partitions (CreatePartitions), with the given assignment of
    /// the new partitions or a round-robin one over the live brokers at the topic's replication
    /// factor. Checks in Kafka's order (`ReplicationControlManager.createPartitions`).
    pub fn create_partitions(
        &mut self,
        req: &CreatePartitionsRequest,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let result = self.create_partitions_into(&mut batch, req);
        if result.is_err() {
            batch = Batch::new(&self.image);
        }
        batch.finish(result)
    }

    /// Checks a partition increase as [`Controller::create_partitions`] would, without
    /// generating anything (CreatePartitions with `validate_only`).
    pub fn validate_create_partitions(
        &self,
        req: &CreatePartitionsRequest,
    ) -> Result<(), ApiError> {
        self.create_partitions_into(&mut Batch::new(&self.image), req)
    }

    fn create_partitions_into(
        &self,
        batch: &mut Batch,
        req: &CreatePartitionsRequest,
    ) -> Result<(), ApiError> {
        let topic = self.image.topic(req.topic).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic id {}", req.topic),
            )
        })?;
        let current = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
        if req.count < current {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "The topic {} currently has {current} partition(s); {} would not be an increase.",
                    topic.name, req.count
                ),
            ));
        }
        if req.count == current {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                format!("Topic already has {current} partition(s)."),
            ));
        }
        if req.count > MAX_PARTITIONS_PER_REQUEST {
            return Err(too_many_partitions(&topic.name, req.count));
        }
        let added = req.count - current;
        if added > MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS {
            return Err(ApiError::new(
                ErrorCode::PolicyViolation,
                format!(
                    "{EXCESSIVE_PARTITIONS} Adding {added} partitions to {}; at most {MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS} in one request.",
                    topic.name
                ),
            ));
        }
        let rf = topic.replication_factor();
        let assignment = match &req.assignment {
            Some(assignment) => {
                if assignment.len() != added as usize {
                    return Err(ApiError::new(
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
                            assignment.len()
                        ),
                    ));
                }
                if let Some(bad) = assignment.iter().find(|replicas| replicas.len() != rf) {
                    return Err(ApiError::new(
                        ErrorCode::InvalidReplicaAssignment,
                        format!(
                            "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).",
                            bad.len()
                        ),
                    ));
                }
                assignment.clone()
            }
            None => self.assign_replicas_from(current, added, rf)?,
        };
        let live = self.image.live_brokers();
        let partitions = assignment
            .iter()
            .enumerate()
            .map(|(offset, replicas)| {
                new_partition(&self.image, &live, current as usize + offset, replicas)
            })
            .collect::<Result<Vec<_>, _>>()?;
        for (offset, state) in partitions.into_iter().enumerate() {
            batch.push(Record::Partition(PartitionRecord {
                partition: TopicPartition::new(req.topic, current + offset as u32),
                state,
            }));
        }
        Ok(())
    }

    /// Handles an AlterPartition request (see [`crate::alter_partition`] for the checks).
    pub fn alter_partition(
        &mut self,
        req: &AlterPartitionRequest,
        now_ms: u64,
    ) -> Output<Result<Vec<AlterPartitionItemResponse>, ErrorCode>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if let Err(code) = validate_sender(self.image.brokers(), req.broker, req.broker_epoch) {
            return batch.finish(Err(code));
        }
        let mut responses = Vec::new();
        for item in &req.partitions {
            let tp = TopicPartition::new(item.topic, item.partition);
            let result = if batch.scratch.topic(item.topic).is_none() {
                Err(ErrorCode::UnknownTopicId)
            } else {
                validate_item(
                    batch.scratch.brokers(),
                    req.broker,
                    item,
                    batch.partition(tp),
                )
            };
            let result = result.and_then(|isr| {
                let change = ProposedChange::AlterIsr {
                    isr,
                    leader_recovery_state: item.leader_recovery_state,
                };
                let decision = self
                    .change(&mut batch, tp, &change, now_ms)
                    .expect("validated partition exists");
                match decision.election {
                    Election::Unchanged => Ok(PartitionView::from(&decision.after)),
                    _ => Err(ErrorCode::NewLeaderElected),
                }
            });
            responses.push(AlterPartitionItemResponse {
                partition: tp,
                result,
            });
        }
        batch.finish(Ok(responses))
    }

    /// Sets (`Some`) or deletes (`None`) a topic or cluster config.
    pub fn alter_config(
        &mut self,
        resource: &ConfigResource,
        name: &str,
        value: Option<&str>,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        let change = ConfigChange {
            name: name.to_string(),
            value: value.map(str::to_string),
        };
        self.alter_configs(resource, std::slice::from_ref(&change), now_ms)
    }

    /// Checks config changes as [`Controller::alter_configs`] would, without generating anything
    /// (IncrementalAlterConfigs with `validate_only`): every value (`INVALID_CONFIG`), then the
    /// topic (`UNKNOWN_TOPIC_OR_PARTITION`). [`ELR_FEATURE`] is cluster-level only.
    pub fn validate_configs(
        &self,
        resource: &ConfigResource,
        changes: &[ConfigChange],
    ) -> Result<Option<TopicId>, ApiError> {
        for change in changes {
            if change.name == ELR_FEATURE {
                let valid = match resource {
                    ConfigResource::Topic(_) => false,
                    ConfigResource::Cluster => change
                        .value
                        .as_deref()
                        .is_none_or(|v| config::parse_bool(v).is_some()),
                };
                if !valid {
                    return Err(ApiError::new(
                        ErrorCode::InvalidConfig,
                        format!(
                            "{ELR_FEATURE} is a cluster-level true/false setting, not {:?} for {resource:?}",
                            change.value
                        ),
                    ));
                }
            } else {
                config::validate(&change.name, change.value.as_deref())?;
            }
        }
        match resource {
            ConfigResource::Cluster => Ok(None),
            ConfigResource::Topic(topic_name) => match self.image.topic_id(topic_name) {
                Some(id) => Ok(Some(id)),
                None => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic {topic_name:?}"),
                )),
            },
        }
    }

    /// Applies several config changes of one resource atomically (one batch of records).
    /// `eligible.leader.replicas.enable` on the cluster becomes a feature-level record (deleting
    /// it restores the default, on); a `min.insync.replicas` change emits a [`ClearElrRecord`];
    /// strategy changes re-run elections and recovery starts of leaderless partitions.
    pub fn alter_configs(
        &mut self,
        resource: &ConfigResource,
        changes: &[ConfigChange],
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let topic = match self.validate_configs(resource, changes) {
            Ok(topic) => topic,
            Err(error) => return batch.finish(Err(error)),
        };
        for change in changes {
            if change.name == ELR_FEATURE {
                let enabled = change
                    .value
                    .as_deref()
                    .and_then(config::parse_bool)
                    .unwrap_or(true);
                batch.push(Record::FeatureLevel(FeatureLevelRecord {
                    name: ELR_FEATURE.to_string(),
                    level: u16::from(enabled),
                }));
                continue;
            }
            batch.push(Record::Config(ConfigRecord {
                resource: resource.clone(),
                name: change.name.clone(),
                value: change.value.clone(),
            }));
        }
        let changed = |name: &str| changes.iter().any(|c| c.name == name);
        if changed(MIN_INSYNC_REPLICAS) && batch.scratch.elr_enabled() {
            batch.push(Record::ClearElr(ClearElrRecord { topic }));
        }
        if changed(UNCLEAN_RECOVERY_STRATEGY) || changed(UNCLEAN_LEADER_ELECTION_ENABLE) {
            self.reelect_leaderless(&mut batch, now_ms);
            self.reconcile_recovery(&mut batch, now_ms);
        }
        batch.finish(Ok(()))
    }

    /// Turns `eligible.leader.replicas.enable` on or off. Turning it off leaves existing ELRs in
    /// place until each partition's next change clears them (Kafka's lazy behaviour).
    pub fn set_elr_enabled(&mut self, enabled: bool, now_ms: u64) -> Output<()> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        batch.push(Record::FeatureLevel(FeatureLevelRecord {
            name: ELR_FEATURE.to_string(),
            level: u16::from(enabled),
        }));
        batch.finish(())
    }
}

/// Checks the replicas of new partition `index` without building anything: not empty,
/// distinct, registered brokers, at least one of them `live`.
fn check_replicas(
    image: &ClusterImage,
    live: &BTreeSet<BrokerId>,
    index: usize,
    replicas: &[BrokerId],
) -> Result<(), ApiError> {
    // More replicas than registered brokers cannot be distinct brokers: refused before any
    // work in proportion to the list.
    let bad = replicas.is_empty()
        || replicas.len() > image.brokers().len()
        || !replicas.iter().all(|r| image.broker(*r).is_some())
        || replicas.iter().collect::<BTreeSet<_>>().len() != replicas.len();
    if bad {
        return Err(ApiError::new(
            ErrorCode::InvalidReplicaAssignment,
            format!(
                "partition {index}: bad replicas {:?}",
                &replicas[..replicas.len().min(MAX_REPLICAS_SHOWN)]
            ),
        ));
    }
    if !replicas.iter().any(|r| live.contains(r)) {
        return Err(ApiError::new(
            ErrorCode::InvalidReplicationFactor,
            format!("partition {index}: no live replica among {replicas:?}"),
        ));
    }
    Ok(())
}

/// Replica ids an error message lists at most.
const MAX_REPLICAS_SHOWN: usize = 16;

/// A new partition of `replicas`: ISR = its live replicas, leader = the first live one (Kafka's
/// `ReplicationControlManager.createTopic`); each replica on its broker's first log directory.
fn new_partition(
    image: &ClusterImage,
    live: &BTreeSet<BrokerId>,
    index: usize,
    replicas: &[BrokerId],
) -> Result<PartitionState, ApiError> {
    check_replicas(image, live, index, replicas)?;
    let isr: BTreeSet<BrokerId> = replicas
        .iter()
        .copied()
        .filter(|r| live.contains(r))
        .collect();
    let leader = replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r))
        .expect("check_replicas found a live replica");
    let directories = replicas
        .iter()
        .map(|r| image.broker(*r).and_then(|b| b.log_dirs.first().copied()))
        .collect();
    Ok(PartitionState::new(
        replicas.to_vec(),
        directories,
        isr,
        Some(leader),
    ))
}
