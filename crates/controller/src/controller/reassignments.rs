//! Partition reassignment (AlterPartitionReassignments, ListPartitionReassignments): Kafka's
//! `ReplicationControlManager.alterPartitionReassignments`. Starting, replacing or cancelling a
//! reassignment is one partition change ([`ProposedChange::Reassign`],
//! [`ProposedChange::CancelReassignment`]); it completes in the partition change (usually an
//! AlterPartition adding the last new replica to the ISR) that finds every target replica in
//! sync — see [`crate::partition_change`].

use std::collections::BTreeSet;

use super::{Batch, Controller, Output, MAX_RECORDS_PER_USER_OP};
use crate::errors::{ApiError, ErrorCode};
use crate::partition::PartitionState;
use crate::partition_change::{cancel_keeps_committed_data, ProposedChange};
use crate::types::{BrokerId, TopicPartition};

/// One partition of an AlterPartitionReassignments request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReassignmentRequest {
    /// The topic's name.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The target replicas in preference order, or `None` to cancel the reassignment in
    /// progress.
    pub target: Option<Vec<BrokerId>>,
    /// KIP-860 (AlterPartitionReassignments v1): whether the target may change the replication
    /// factor (v0 requests: always).
    pub allow_replication_factor_change: bool,
}

/// One partition in ListPartitionReassignments' answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OngoingReassignment {
    /// The partition.
    pub partition: TopicPartition,
    /// All its replicas (the target's first).
    pub replicas: Vec<BrokerId>,
    /// The replicas being added.
    pub adding: Vec<BrokerId>,
    /// The replicas being removed.
    pub removing: Vec<BrokerId>,
}

impl OngoingReassignment {
    fn of(partition: TopicPartition, p: &PartitionState) -> Option<Self> {
        p.is_reassigning().then(|| OngoingReassignment {
            partition,
            replicas: p.replicas.clone(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
        })
    }
}

impl Controller {
    /// Starts, replaces or cancels the reassignment of each partition, each answered on its
    /// own (a refused one changes nothing). At most [`MAX_RECORDS_PER_USER_OP`] partitions in
    /// one request (Kafka's bound on one operation's records): more are all refused.
    pub fn alter_partition_reassignments(
        &mut self,
        requests: &[ReassignmentRequest],
        now_ms: u64,
    ) -> Output<Vec<Result<(), ApiError>>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        if requests.len() > MAX_RECORDS_PER_USER_OP {
            let refused = ApiError::new(ErrorCode::PolicyViolation, super::EXCESSIVE_BATCH);
            return batch.finish(vec![Err(refused); requests.len()]);
        }
        let mut results = Vec::with_capacity(requests.len());
        for request in requests {
            let result = self
                .reassignment_change(&batch, request)
                .map(|(tp, change)| {
                    self.change(&mut batch, tp, &change, now_ms);
                });
            results.push(result);
        }
        batch.finish(results)
    }

    /// The partitions with a reassignment in progress: all of them (`None`), or those of the
    /// given (topic, partitions) that have one (unknown ones are left out, as Kafka does).
    pub fn list_partition_reassignments(
        &self,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Vec<(String, OngoingReassignment)> {
        list_reassignments(&self.image, topics)
    }

    /// Checks one request against the partition (Kafka's order) and the change it makes.
    fn reassignment_change(
        &self,
        batch: &Batch,
        request: &ReassignmentRequest,
    ) -> Result<(TopicPartition, ProposedChange), ApiError> {
        let image = &batch.scratch;
        let topic = image.topic_id(&request.topic).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("Unable to find a topic named {}.", request.topic),
            )
        })?;
        let partition = u32::try_from(request.partition)
            .ok()
            .map(|p| TopicPartition::new(topic, p))
            .filter(|tp| image.partition(*tp).is_some())
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!(
                        "Unable to find partition {}:{}.",
                        request.topic, request.partition
                    ),
                )
            })?;
        let current = image.partition(partition).expect("checked above");
        let Some(target) = &request.target else {
            if !current.is_reassigning() {
                return Err(ApiError::new(
                    ErrorCode::NoReassignmentInProgress,
                    "No partition reassignment is in progress.",
                ));
            }
            if !cancel_keeps_committed_data(current, image.configured_min_isr(topic)) {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "Unable to revert partition assignment for {}:{} because the replicas being added hold committed data and too few of the original replicas are in sync (ISR {:?}, adding {:?}): let the reassignment complete, or cancel once more original replicas are back in the ISR.",
                        request.topic, request.partition, current.isr, current.adding_replicas
                    ),
                ));
            }
            return Ok((partition, ProposedChange::CancelReassignment));
        };
        validate_target(image, target)?;
        if !request.allow_replication_factor_change && target.len() != current.replication_factor()
        {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "The replication factor is changed from {} to {} but allowReplicationFactorChange is false.",
                    current.replication_factor(),
                    target.len()
                ),
            ));
        }
        let directories = target
            .iter()
            .map(|r| image.broker(*r).and_then(|b| b.log_dirs.first().copied()))
            .collect();
        Ok((
            partition,
            ProposedChange::Reassign {
                target: target.clone(),
                directories,
            },
        ))
    }
}

/// Kafka's `validateManualPartitionAssignment`: not empty, no broker twice, every broker
/// registered (not necessarily live: the reassignment waits for it).
fn validate_target(
    image: &crate::image::ClusterImage,
    target: &[BrokerId],
) -> Result<(), ApiError> {
    let invalid =
        |message: String| Err(ApiError::new(ErrorCode::InvalidReplicaAssignment, message));
    if target.is_empty() {
        return invalid("The manual partition assignment includes an empty replica list.".into());
    }
    let mut seen = BTreeSet::new();
    for broker in target {
        if broker.0 < 0 {
            return invalid(format!(
                "The manual partition assignment includes an invalid broker id {broker}."
            ));
        }
        if !seen.insert(*broker) {
            return invalid(format!(
                "The manual partition assignment includes the broker {broker} more than once."
            ));
        }
        if image.broker(*broker).is_none() {
            return invalid(format!(
                "The manual partition assignment includes broker {broker}, but no such broker is registered."
            ));
        }
    }
    Ok(())
}

/// [`Controller::list_partition_reassignments`] over any image (brokers answer from theirs).
pub fn list_reassignments(
    image: &crate::image::ClusterImage,
    topics: Option<&[(String, Vec<i32>)]>,
) -> Vec<(String, OngoingReassignment)> {
    let mut out = Vec::new();
    match topics {
        None => {
            for (tp, p) in image.partitions() {
                if let Some(ongoing) = OngoingReassignment::of(tp, p) {
                    let name = image.topic(tp.topic).map(|t| t.name.clone());
                    out.extend(name.map(|n| (n, ongoing)));
                }
            }
        }
        Some(topics) => {
            for (name, partitions) in topics {
                let Some(id) = image.topic_id(name) else {
                    continue;
                };
                for index in partitions {
                    let Ok(index) = u32::try_from(*index) else {
                        continue;
                    };
                    let tp = TopicPartition::new(id, index);
                    if let Some(ongoing) = image
                        .partition(tp)
                        .and_then(|p| OngoingReassignment::of(tp, p))
                    {
                        out.push((name.clone(), ongoing));
                    }
                }
            }
        }
    }
    out
}
