//! What the transaction coordinator does for each request: prepare the transition
//! ([`super::state`]), write it with acks=all, apply it, answer — and for an ended transaction,
//! drive its markers in the background. Also the partition leaders' check that a transactional
//! write belongs to an ongoing transaction (KIP-890 part 1), asked of the coordinator wherever
//! it is.

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use keel_wire::kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    TransactionalId,
};
use keel_wire::ResponseError;
use tracing::debug;

use super::state::{EndStep, InitStep, TopicPartition, TxnMetadata};
use super::{partition_for, TxnScope, TRANSACTION_STATE_TOPIC};
use crate::broker::Broker;
use crate::handlers::str_bytes;

/// The longest AddPartitionsToTxn waits for the previous transaction's markers.
const MARKERS_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl Broker {
    /// Prepares with `prepare`. If it asks for a producer id this broker does not hold yet,
    /// one is allocated (a call to the controller, outside the lock) and `prepare` runs again.
    async fn prepare_with_spare_id<T>(
        &self,
        scope: &TxnScope,
        mut prepare: impl FnMut(
            &mut std::collections::BTreeMap<String, TxnMetadata>,
            i64,
            &mut dyn FnMut() -> Result<i64, ResponseError>,
        ) -> Result<T, ResponseError>,
    ) -> Result<T, ResponseError> {
        let mut spare: Option<i64> = None;
        loop {
            let mut needed = false;
            let result = self.with_txns(scope, |txns, now_ms| {
                let mut allocate = || {
                    spare.take().ok_or_else(|| {
                        needed = true;
                        ResponseError::CoordinatorLoadInProgress
                    })
                };
                prepare(txns, now_ms, &mut allocate)
            })?;
            if !needed {
                return result;
            }
            spare = Some(self.new_producer_id().await.map_err(|e| e.error)?);
        }
    }

    /// InitProducerId with a transactional id: the producer id and epoch to use.
    pub async fn txn_init_producer_id(
        self: &Arc<Self>,
        id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
    ) -> Result<(i64, i16), ResponseError> {
        let scope = self.txn_scope(id)?;
        let step = self
            .prepare_with_spare_id(&scope, |txns, now_ms, allocate| {
                if !txns.contains_key(id) {
                    let producer_id = allocate()?;
                    txns.insert(
                        id.to_string(),
                        TxnMetadata::new(id, producer_id, timeout_ms, now_ms),
                    );
                }
                let m = txns.get_mut(id).expect("inserted above");
                m.init_producer_id(timeout_ms, expected, now_ms, allocate)
            })
            .await?;
        match step {
            InitStep::Write(transit) => {
                self.apply_transit(&scope, id, &transit).await?;
                Ok((transit.value.producer_id, transit.value.producer_epoch))
            }
            InitStep::AbortFirst(fence) => {
                debug!(
                    transactional_id = id,
                    "a transaction is open: aborting it first"
                );
                self.apply_transit(&scope, id, &fence).await?;
                self.spawn_completion(scope, id);
                Err(ResponseError::ConcurrentTransactions)
            }
        }
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn) for a client, or a partition leader's add for a
    /// transactions v2 producer. A request that finds the previous transaction's markers still
    /// being written, or another add of the same transaction being written (a v2 producer's
    /// first batches reach several leaders at once, each adding its partition), waits for it
    /// up to [`MARKERS_WAIT`] instead of answering `CONCURRENT_TRANSACTIONS` at once: clients
    /// retry that error only after a backoff (librdkafka about 20 ms; the Java client's produce
    /// sees it as `NOT_ENOUGH_REPLICAS` and waits `retry.backoff.ms`, 100 ms) much longer than
    /// either write takes.
    pub async fn txn_add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<(), ResponseError> {
        let scope = self.txn_scope(id)?;
        let deadline = tokio::time::Instant::now() + MARKERS_WAIT;
        loop {
            let completed = self.txn_coordinator.completed.notified();
            tokio::pin!(completed);
            // Registered before the state is read, so a completion in between is not missed.
            completed.as_mut().enable();
            let (transit, pending) = self.with_txns(&scope, |txns, now_ms| {
                let m = txns
                    .get_mut(id)
                    .ok_or(ResponseError::InvalidProducerIdMapping)?;
                let pending = m.pending.is_some();
                Ok((
                    m.add_partitions(producer_id, epoch, partitions, now_ms),
                    pending,
                ))
            })??;
            match transit {
                Err(ResponseError::ConcurrentTransactions)
                    if (pending || self.txn_coordinator.is_completing(id))
                        && tokio::time::Instant::now() < deadline =>
                {
                    let _ = tokio::time::timeout_at(deadline, completed).await;
                }
                Err(e) => return Err(e),
                Ok(Some(transit)) => return self.apply_transit(&scope, id, &transit).await,
                Ok(None) => return Ok(()),
            }
        }
    }

    /// AddPartitionsToTxn's verification on this coordinator: per partition, `None` if it is in
    /// the ongoing transaction.
    pub fn txn_verify_here(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        let scope = self.txn_scope(id)?;
        self.with_txns(&scope, |txns, _| {
            txns.get(id)
                .ok_or(ResponseError::InvalidProducerIdMapping)?
                .verify(producer_id, epoch, partitions)
        })?
    }

    /// EndTxn: the producer id and epoch the client goes on with.
    pub async fn txn_end(
        self: &Arc<Self>,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        client_transaction_version: i16,
    ) -> Result<(i64, i16), ResponseError> {
        let scope = self.txn_scope(id)?;
        let step = self
            .prepare_with_spare_id(&scope, |txns, now_ms, allocate| {
                let m = txns
                    .get_mut(id)
                    .ok_or(ResponseError::InvalidProducerIdMapping)?;
                m.end_txn(
                    producer_id,
                    epoch,
                    commit,
                    client_transaction_version,
                    now_ms,
                    allocate,
                )
            })
            .await?;
        match step {
            EndStep::Done {
                producer_id,
                producer_epoch,
            } => Ok((producer_id, producer_epoch)),
            EndStep::Write(transit) => {
                self.apply_transit(&scope, id, &transit).await?;
                let answer = if transit.value.next_producer_id >= 0 {
                    (transit.value.next_producer_id, 0)
                } else {
                    (transit.value.producer_id, transit.value.producer_epoch)
                };
                self.spawn_completion(scope, id);
                Ok(answer)
            }
        }
    }

    /// On a partition leader, before a producer's first transactional write there: KIP-890
    /// part 1 (`add` false) asks whether `tp` is part of `id`'s ongoing transaction at
    /// `producer_id` / `epoch`; part 2 (`add` true, transactions v2 clients, which send no
    /// AddPartitionsToTxn themselves) adds it. Asked of the coordinator: this broker, or
    /// another over AddPartitionsToTxn v4+ (`VerifyOnly` = !add).
    pub async fn verify_txn_partition(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        tp: &TopicPartition,
        add: bool,
    ) -> Result<(), ResponseError> {
        let topic = self
            .topic(TRANSACTION_STATE_TOPIC)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let index = partition_for(id, topic.partitions.len());
        let leader = topic
            .partitions
            .iter()
            .find(|p| p.index == index)
            .and_then(|p| p.leader)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let answer = if leader == self.node_id() && add {
            let set = BTreeSet::from([tp.clone()]);
            self.txn_add_partitions(id, producer_id, epoch, &set)
                .await
                .err()
        } else if leader == self.node_id() {
            self.txn_verify_here(id, producer_id, epoch, std::slice::from_ref(tp))?
                .pop()
                .flatten()
        } else {
            self.verify_remotely(leader, id, producer_id, epoch, tp, add)
                .await?
        };
        match answer {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    async fn verify_remotely(
        &self,
        leader: i32,
        id: &str,
        producer_id: i64,
        epoch: i16,
        tp: &TopicPartition,
        add: bool,
    ) -> Result<Option<ResponseError>, ResponseError> {
        let unavailable = |e: anyhow::Error| {
            debug!(leader, error = %e, "cannot verify a transactional write");
            ResponseError::CoordinatorNotAvailable
        };
        let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
            AddPartitionsToTxnTransaction::default()
                .with_transactional_id(TransactionalId(str_bytes(id)))
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch)
                .with_verify_only(!add)
                .with_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes(tp.0.clone())))
                    .with_partitions(vec![tp.1])]),
        ]);
        let response: AddPartitionsToTxnResponse = self
            .call_peer(
                leader,
                ApiKey::AddPartitionsToTxn,
                (if add { 5 } else { 4 }, 5),
                &request,
            )
            .await
            .map_err(unavailable)?;
        if let Some(error) = ResponseError::try_from_code(response.error_code) {
            return Err(error);
        }
        let code = response
            .results_by_transaction
            .iter()
            .flat_map(|t| &t.topic_results)
            .flat_map(|t| &t.results_by_partition)
            .map(|p| p.partition_error_code)
            .next()
            .unwrap_or(ResponseError::UnknownServerError.code());
        Ok(ResponseError::try_from_code(code))
    }
}
