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
use crate::partition::PartitionState;
use crate::partition_change::{Election, ProposedChange};
use crate::records::{
    ClearElrRecord, ConfigRecord, ConfigResource, FeatureLevelRecord, PartitionRecord, Record,
    TopicRecord,
};
use crate::types::{BrokerId, TopicId, TopicPartition};

use super::{Batch, Controller, Output};

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
        Ok((0..partitions as usize)
            .map(|p| {
                (0..replication_factor)
                    .map(|r| live[(p + r) % live.len()])
                    .collect()
            })
            .collect())
    }

    /// Creates a topic.
    pub fn create_topic(
        &mut self,
        req: &CreateTopicRequest,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let result = self.create_topic_into(&mut batch, req, now_ms);
        if result.is_err() {
            batch = Batch::new(&self.image);
        }
        batch.finish(result)
    }

    fn create_topic_into(
        &mut self,
        batch: &mut Batch,
        req: &CreateTopicRequest,
        now_ms: u64,
    ) -> Result<(), ApiError> {
        if self.image.topic_id(&req.name).is_some() || self.image.topic(req.id).is_some() {
            return Err(ApiError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic {:?} already exists", req.name),
            ));
        }
        if req.assignment.is_empty() {
            return Err(ApiError::new(ErrorCode::InvalidPartitions, "no partitions"));
        }
        for (name, value) in &req.configs {
            config::validate(name, Some(value))?;
        }
        let live = self.image.live_brokers();
        let mut partitions = Vec::new();
        for (index, replicas) in req.assignment.iter().enumerate() {
            let distinct: BTreeSet<BrokerId> = replicas.iter().copied().collect();
            let known = replicas.iter().all(|r| self.image.broker(*r).is_some());
            if replicas.is_empty() || distinct.len() != replicas.len() || !known {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("partition {index}: bad replicas {replicas:?}"),
                ));
            }
            let isr: BTreeSet<BrokerId> = distinct.intersection(&live).copied().collect();
            let Some(leader) = replicas.iter().copied().find(|r| isr.contains(r)) else {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicationFactor,
                    format!("partition {index}: no live replica among {replicas:?}"),
                ));
            };
            let directories = replicas
                .iter()
                .map(|r| {
                    self.image
                        .broker(*r)
                        .and_then(|b| b.log_dirs.first().copied())
                })
                .collect();
            partitions.push(PartitionState::new(
                replicas.clone(),
                directories,
                isr,
                Some(leader),
            ));
        }
        batch.push(Record::Topic(TopicRecord {
            name: req.name.clone(),
            id: req.id,
        }));
        for (name, value) in &req.configs {
            batch.push(Record::Config(ConfigRecord {
                resource: ConfigResource::Topic(req.name.clone()),
                name: name.clone(),
                value: Some(value.clone()),
            }));
        }
        for (index, state) in partitions.into_iter().enumerate() {
            batch.push(Record::Partition(PartitionRecord {
                partition: TopicPartition::new(req.id, index as u32),
                state,
            }));
        }
        let _ = now_ms;
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
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if let Err(error) = config::validate(name, value) {
            return batch.finish(Err(error));
        }
        let topic = match resource {
            ConfigResource::Cluster => None,
            ConfigResource::Topic(topic_name) => match self.image.topic_id(topic_name) {
                Some(id) => Some(id),
                None => {
                    return batch.finish(Err(ApiError::new(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("unknown topic {topic_name:?}"),
                    )))
                }
            },
        };
        batch.push(Record::Config(ConfigRecord {
            resource: resource.clone(),
            name: name.to_string(),
            value: value.map(str::to_string),
        }));
        match name {
            MIN_INSYNC_REPLICAS if batch.scratch.elr_enabled() => {
                batch.push(Record::ClearElr(ClearElrRecord { topic }));
            }
            UNCLEAN_RECOVERY_STRATEGY | UNCLEAN_LEADER_ELECTION_ENABLE => {
                self.reelect_leaderless(&mut batch, now_ms);
                self.reconcile_recovery(&mut batch, now_ms);
            }
            _ => {}
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
