//! Ending a transaction in its partitions: the coordinator sends `WriteTxnMarkers` to each
//! partition's leader (itself included, without a connection), the leaders append the COMMIT
//! or ABORT control batch with `acks=all` and answer once the high watermark covers it, and the
//! coordinator writes CompleteCommit/CompleteAbort once every partition answered.
//!
//! Retriable answers (`NOT_LEADER_OR_FOLLOWER`, `NOT_ENOUGH_REPLICAS*`, `REQUEST_TIMED_OUT`,
//! `KAFKA_STORAGE_ERROR`, a leader unknown or unreachable) are retried with backoff, after the
//! metadata moved the partition to its new leader; a partition whose topic was deleted is
//! done; `TRANSACTION_COORDINATOR_FENCED` means a newer coordinator took over, and this one
//! stops. The driver also stops when this broker stops leading the `__transaction_state`
//! partition at the epoch it started with: the next coordinator finds the transaction in its
//! Prepare state when it loads, and finishes it.
//!
//! [`Broker::write_markers_locally`] is the leader's side, shared by the `WriteTxnMarkers`
//! handler and the coordinator's own partitions: a marker on a `__consumer_offsets` partition
//! also settles the transaction's pending offset commits in the group coordinator.

use std::collections::BTreeMap;
use std::time::Duration;

use keel_log::{ControlType, EndTxnMarker};
use keel_replication::{Acks, ErrorCode};
use keel_wire::kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, ProducerId, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use keel_wire::ResponseError;
use tracing::{debug, info, warn};

use super::state::{TopicPartition, TxnState};
use super::TxnScope;
use crate::broker::{AppendError, Broker, LeaderWrite};
use crate::partition::PartitionError;

/// How long a leader waits for acks=all on a marker.
const MARKER_TIMEOUT_MS: u64 = 30_000;
/// Backoff between rounds of markers that could not be written yet.
const RETRY_BACKOFF_MS: [u64; 5] = [50, 100, 200, 500, 1_000];

/// One marker to write: whose, which outcome, from which coordinator epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerSpec {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
    /// See `LeaderWrite::Marker::only_in_doubt_at` (None for a coordinator's markers).
    pub only_in_doubt_at: Option<i16>,
}

impl MarkerSpec {
    fn marker(&self) -> EndTxnMarker {
        EndTxnMarker {
            kind: if self.commit {
                ControlType::Commit
            } else {
                ControlType::Abort
            },
            coordinator_epoch: self.coordinator_epoch,
        }
    }
}

/// What became of one partition's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Written,
    Retry,
    /// A newer coordinator wrote for this producer: stop.
    Fenced,
}

fn outcome(code: i16) -> Outcome {
    let Some(error) = ResponseError::try_from_code(code) else {
        return Outcome::Written;
    };
    match error {
        ResponseError::TransactionCoordinatorFenced => Outcome::Fenced,
        // Nothing more to write there (a newer producer epoch already did, or the format
        // cannot hold a marker): Kafka moves on too.
        ResponseError::InvalidProducerEpoch | ResponseError::UnsupportedForMessageFormat => {
            Outcome::Written
        }
        _ => Outcome::Retry,
    }
}

impl Broker {
    /// Drives `id`'s prepared transaction to its end: markers to every partition, then the
    /// Complete state. One driver per transactional id; returns at once if another runs.
    pub async fn complete_transaction(&self, scope: &TxnScope, id: &str) {
        if !self.txn_coordinator.claim_completion(id) {
            return;
        }
        self.drive_completion(scope, id).await;
        self.txn_coordinator.release_completion(id);
    }

    /// [`complete_transaction`](Self::complete_transaction) in a task, claimed before this
    /// returns: a request that arrives right after the answer that prepared the end (the next
    /// transaction's AddPartitionsToTxn, or a leader's add for a v2 producer) finds the markers
    /// being written and waits for them instead of being refused.
    pub fn spawn_completion(self: &std::sync::Arc<Self>, scope: TxnScope, id: &str) {
        if !self.txn_coordinator.claim_completion(id) {
            return;
        }
        let (broker, id) = (self.clone(), id.to_string());
        tokio::spawn(async move {
            broker.drive_completion(&scope, &id).await;
            broker.txn_coordinator.release_completion(&id);
        });
    }

    async fn drive_completion(&self, scope: &TxnScope, id: &str) {
        let plan = self.with_txns(scope, |txns, _| {
            let m = txns.get(id)?;
            let commit = match m.state {
                TxnState::PrepareCommit => true,
                TxnState::PrepareAbort => false,
                _ => return None,
            };
            Some((
                MarkerSpec {
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    commit,
                    coordinator_epoch: scope.coordinator_epoch,
                    only_in_doubt_at: None,
                },
                m.partitions.iter().cloned().collect::<Vec<_>>(),
            ))
        });
        let Ok(Some((spec, mut remaining))) = plan else {
            return;
        };
        let mut attempt = 0usize;
        while !remaining.is_empty() {
            if !self.still_coordinating(scope) {
                debug!(
                    transactional_id = id,
                    "stopped leading its partition: the next coordinator finishes it"
                );
                return;
            }
            match self.send_markers(spec, &remaining).await {
                Ok(left) => remaining = left,
                Err(()) => {
                    warn!(
                        transactional_id = id,
                        "a newer coordinator wrote markers: stopping"
                    );
                    return;
                }
            }
            if !remaining.is_empty() {
                let backoff = RETRY_BACKOFF_MS[attempt.min(RETRY_BACKOFF_MS.len() - 1)];
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
        }
        let done = self.with_txns(scope, |txns, now_ms| {
            let m = txns.get_mut(id)?;
            let prepared = matches!(m.state, TxnState::PrepareCommit | TxnState::PrepareAbort);
            (prepared && m.pending.is_none()).then(|| m.prepare_complete(now_ms))
        });
        let Ok(Some(transit)) = done else {
            return;
        };
        match self.apply_transit(scope, id, &transit).await {
            Ok(()) => info!(
                transactional_id = id,
                producer_id = spec.producer_id,
                epoch = spec.producer_epoch,
                committed = spec.commit,
                "transaction completed"
            ),
            // The next coordinator (or the next tick) completes it from the Prepare state.
            Err(e) => {
                warn!(transactional_id = id, error = ?e, "cannot write the transaction's completion")
            }
        }
    }

    fn still_coordinating(&self, scope: &TxnScope) -> bool {
        scope.partition.is_leader()
            && !scope.partition.is_deleted()
            && scope.partition.leader_epoch().0 == scope.coordinator_epoch
    }

    /// One round: the marker to every partition in `partitions`, grouped by leader. Returns the
    /// partitions still to do; `Err` if a newer coordinator fenced this one.
    async fn send_markers(
        &self,
        spec: MarkerSpec,
        partitions: &[TopicPartition],
    ) -> Result<Vec<TopicPartition>, ()> {
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        let mut left = Vec::new();
        for tp in partitions {
            let Some(topic) = self.topic(&tp.0) else {
                info!(topic = %tp.0, partition = tp.1, "the topic is gone: no marker to write");
                continue;
            };
            match topic.partitions.iter().find(|p| p.index == tp.1) {
                None => continue,
                Some(p) => match p.leader {
                    Some(leader) => by_leader.entry(leader).or_default().push(tp.clone()),
                    None => left.push(tp.clone()),
                },
            }
        }
        let mut fenced = false;
        for (leader, tps) in by_leader {
            let results = if leader == self.node_id() {
                self.write_markers_locally(spec, &tps).await
            } else {
                match self.send_markers_to(leader, spec, &tps).await {
                    Ok(results) => results,
                    Err(e) => {
                        debug!(leader, error = %e, "cannot send transaction markers");
                        tps.iter()
                            .map(|tp| (tp.clone(), ResponseError::NotLeaderOrFollower.code()))
                            .collect()
                    }
                }
            };
            for (tp, code) in results {
                match outcome(code) {
                    Outcome::Written => {}
                    Outcome::Retry => left.push(tp),
                    Outcome::Fenced => fenced = true,
                }
            }
        }
        if fenced {
            return Err(());
        }
        Ok(left)
    }

    async fn send_markers_to(
        &self,
        leader: i32,
        spec: MarkerSpec,
        tps: &[TopicPartition],
    ) -> anyhow::Result<Vec<(TopicPartition, i16)>> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (topic, p) in tps {
            topics.entry(topic).or_default().push(*p);
        }
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(spec.producer_id))
                .with_producer_epoch(spec.producer_epoch)
                .with_transaction_result(spec.commit)
                .with_coordinator_epoch(spec.coordinator_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(crate::handlers::str_bytes(t)))
                                .with_partition_indexes(ps)
                        })
                        .collect(),
                )]);
        let response: WriteTxnMarkersResponse = self
            .call_peer(leader, ApiKey::WriteTxnMarkers, (1, 1), &request)
            .await?;
        let mut results = Vec::new();
        for marker in response.markers {
            for topic in marker.topics {
                for p in topic.partitions {
                    results.push(((topic.name.to_string(), p.partition_index), p.error_code));
                }
            }
        }
        Ok(results)
    }

    /// The leader's side of `WriteTxnMarkers` for one marker: appends it to each partition
    /// (acks=all) and answers per partition once the high watermark covers it. A marker on a
    /// `__consumer_offsets` partition then settles the producer's pending offset commits there.
    pub async fn write_markers_locally(
        &self,
        spec: MarkerSpec,
        tps: &[TopicPartition],
    ) -> Vec<(TopicPartition, i16)> {
        let mut waiting = Vec::new();
        let mut results = Vec::new();
        for tp in tps {
            let Some(partition) = self.partition(&tp.0, tp.1) else {
                let exists = self
                    .topic(&tp.0)
                    .is_some_and(|t| t.partitions.iter().any(|p| p.index == tp.1));
                let error = if exists {
                    ResponseError::NotLeaderOrFollower
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                results.push((tp.clone(), error.code()));
                continue;
            };
            let write = LeaderWrite::Marker {
                producer_id: spec.producer_id,
                producer_epoch: spec.producer_epoch,
                marker: spec.marker(),
                only_in_doubt_at: spec.only_in_doubt_at,
            };
            match self.write_as_leader(&partition, write, Acks::All, MARKER_TIMEOUT_MS) {
                Ok((_, Some(waiter))) => waiting.push((tp.clone(), waiter)),
                Ok((_, None)) => results.push((tp.clone(), 0)),
                Err(e) => results.push((tp.clone(), append_error_code(&e))),
            }
        }
        for (tp, waiter) in waiting {
            let code = match waiter.await {
                Ok(Ok(())) => 0,
                Ok(Err(code)) => replication_code(code),
                Err(_) => ResponseError::NotLeaderOrFollower.code(),
            };
            if code == 0 && tp.0 == crate::coordinator::OFFSETS_TOPIC {
                self.complete_txn_offsets(tp.1, spec.producer_id, spec.commit);
            }
            results.push((tp, code));
        }
        results
    }
}

fn replication_code(code: ErrorCode) -> i16 {
    code.code()
}

fn append_error_code(e: &AppendError) -> i16 {
    match e {
        AppendError::Replication(code) => replication_code(*code),
        AppendError::Partition(PartitionError::Deleted) => {
            ResponseError::UnknownTopicOrPartition.code()
        }
        AppendError::Partition(PartitionError::Offline) => ResponseError::KafkaStorageError.code(),
        AppendError::Partition(PartitionError::Log(e)) | AppendError::Log(e) => {
            crate::error::from_log_error(e).error.code()
        }
        AppendError::Internal(_) => ResponseError::UnknownServerError.code(),
    }
}
