//! Transactions in the simulator (issue 23): a transactional producer and a read_committed
//! consumer that speak the Kafka protocol as librdkafka or the Java client do (FindCoordinator
//! for the transactional id, InitProducerId, AddPartitionsToTxn, transactional Produce with
//! sequences, EndTxn; Fetch with `isolation_level=1`, dropping the records of the aborted
//! transactions the broker lists), and the properties a read_committed reader relies on.
//!
//! What the clients were told lands in the [`TxnOracle`]: every transaction, the values it
//! wrote and how far its end got (never sent, commit or abort sent, acknowledged). Checked
//! while reading:
//! - *no uncommitted read*: a read_committed consumer never returns a record of a transaction
//!   whose commit was never requested (open, aborted by its producer, or aborted by the
//!   coordinator on timeout or fencing);
//! - the last stable offset a leader reports never moves backward, and a record read at an
//!   offset never changes.
//!
//! Checked at the end of a run, once every transaction was decided ([`final_violations`]):
//! - *no torn or lost transaction*: every record of a transaction whose commit was
//!   acknowledged is read; one whose commit was sent but not answered is read whole or not
//!   at all;
//! - *no duplicate*: no record is read twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use keel_log::batch::{BatchHeader, BatchIter, TRANSACTIONAL_ATTRIBUTE};
use keel_log::plain_batch::{
    build_batch, decode_records, set_producer, set_transactional_producer,
};
use keel_log::txn::{ControlType, EndTxnMarker};
use keel_wire::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use keel_wire::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId, TopicName,
    TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use crate::client::{fetch_request, lock, note_read, Acked, Client, ClientViolation, Oracle, Tp};

/// A transaction: its producer's transactional id and its number among that id's.
pub type TxnKey = (String, u64);

/// The transaction timeout the simulated producers ask for (`transaction.timeout.ms`).
pub const TXN_TIMEOUT_MS: i32 = 10_000;

/// How long one transactional produce may wait for `acks=all` at the broker.
const PRODUCE_TIMEOUT_MS: i32 = 5_000;
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

// Kafka error codes the producer tells apart.
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const CONCURRENT_TRANSACTIONS: i16 = 51;
const PRODUCER_FENCED: i16 = 90;
const REQUEST_TIMED_OUT: i16 = 7;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const FENCED_LEADER_EPOCH: i16 = 74;

/// How far a transaction's end got, as its producer knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    /// No EndTxn sent (yet, or ever: the producer died or was fenced).
    Open,
    /// EndTxn(commit) sent, not acknowledged.
    CommitSent,
    /// EndTxn(commit) acknowledged.
    Committed,
    /// EndTxn(abort) sent, not acknowledged.
    AbortSent,
    /// EndTxn(abort) acknowledged.
    Aborted,
    /// EndTxn(commit) refused because the producer was fenced: the coordinator never
    /// commits it.
    Refused,
}

impl TxnEnd {
    /// Whether the producer asked for a commit (only then may a reader see the records).
    pub fn commit_requested(self) -> bool {
        matches!(self, TxnEnd::CommitSent | TxnEnd::Committed)
    }
}

/// One transaction, as its producer knows it.
#[derive(Debug, Clone)]
pub struct Txn {
    /// Values whose produce was acknowledged, by partition, in order.
    pub acked: BTreeMap<Tp, Vec<Bytes>>,
    /// Consumer offsets sent in the transaction (TxnOffsetCommit): group, partition, offset.
    pub offsets: Vec<(String, Tp, i64)>,
    pub end: TxnEnd,
}

/// What transactional producers and read_committed consumers were told.
#[derive(Debug, Default)]
pub struct TxnOracle {
    pub txns: BTreeMap<TxnKey, Txn>,
    /// The transaction of every value a transactional producer ever sent.
    pub owner: BTreeMap<Bytes, TxnKey>,
    /// Records a read_committed consumer returned, by partition and offset.
    pub read: BTreeMap<Tp, BTreeMap<i64, Bytes>>,
    /// The highest last stable offset each partition reported to each read_committed client
    /// (by name: answers on different connections may arrive out of order).
    pub lso_seen: BTreeMap<(String, Tp), i64>,
    /// Transactions started per transactional id.
    started: BTreeMap<String, u64>,
    /// Consume-transform-produce runs ([`crate::etl`]): (group, input, output).
    pub etl_runs: BTreeSet<(String, Tp, Tp)>,
    /// What each output record of a consume-transform-produce run was made from: its input
    /// partition, offset and value.
    pub etl_outputs: BTreeMap<Bytes, (Tp, i64, Bytes)>,
}

impl TxnOracle {
    /// Transactions by how far their end got: (committed, aborted, undecided by their producer).
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut out = (0, 0, 0);
        for t in self.txns.values() {
            match t.end {
                TxnEnd::Committed => out.0 += 1,
                TxnEnd::Aborted => out.1 += 1,
                _ => out.2 += 1,
            }
        }
        out
    }

    /// Committed records read by read_committed consumers from `tp`.
    pub fn read_count(&self, tp: &Tp) -> usize {
        self.read.get(tp).map_or(0, |m| m.len())
    }
}

/// The end-of-run properties: call once every transaction was decided and every partition
/// was read up to a last stable offset equal to its high watermark.
pub fn final_violations(oracle: &TxnOracle) -> Vec<ClientViolation> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<&Bytes, (&Tp, i64)> = BTreeMap::new();
    for (tp, records) in &oracle.read {
        for (offset, value) in records {
            // Records of the plain (not idempotent) producer may be written twice by a retry.
            let transactional = oracle.owner.contains_key(value);
            if let Some((tp0, o0)) = seen.insert(value, (tp, *offset)).filter(|_| transactional) {
                out.push(ClientViolation {
                    property: "read_committed returns each record once",
                    detail: format!(
                        "{:?} read at {}-{} offset {o0} and at {}-{} offset {offset}",
                        String::from_utf8_lossy(value),
                        tp0.0,
                        tp0.1,
                        tp.0,
                        tp.1
                    ),
                });
            }
        }
    }
    for ((id, n), txn) in &oracle.txns {
        let total: usize = txn.acked.values().map(Vec::len).sum();
        let visible: usize = txn
            .acked
            .values()
            .flatten()
            .filter(|v| seen.contains_key(v))
            .count();
        let whole = visible == total;
        let ok = match txn.end {
            TxnEnd::Committed => whole,
            TxnEnd::CommitSent => whole || visible == 0,
            // Visibility of these was checked as they were read.
            _ => true,
        };
        if !ok {
            let missing: Vec<String> = txn
                .acked
                .values()
                .flatten()
                .filter(|v| !seen.contains_key(v))
                .take(5)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            out.push(ClientViolation {
                property: "a committed transaction is read whole",
                detail: format!(
                    "transaction {id}#{n} ({:?}): {visible} of its {total} records read; missing {missing:?}",
                    txn.end
                ),
            });
        }
    }
    out
}

/// Why a transactional call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnError {
    /// The producer was fenced (`INVALID_PRODUCER_EPOCH`, `PRODUCER_FENCED`): a newer instance
    /// or the coordinator's timeout abort bumped its epoch.
    Fenced(i16),
    /// Any other error or no answer before the deadline; the transaction must be aborted.
    Failed(String),
}

impl std::fmt::Display for TxnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TxnError::Fenced(code) => write!(f, "fenced (error {code})"),
            TxnError::Failed(why) => write!(f, "{why}"),
        }
    }
}

pub(crate) fn retriable_coordinator_error(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS
            | COORDINATOR_NOT_AVAILABLE
            | NOT_COORDINATOR
            | CONCURRENT_TRANSACTIONS
            | REQUEST_TIMED_OUT
    )
}

fn retriable_partition_error(code: i16) -> bool {
    matches!(
        code,
        NOT_LEADER_OR_FOLLOWER
            | REQUEST_TIMED_OUT
            | NOT_ENOUGH_REPLICAS
            | NOT_ENOUGH_REPLICAS_AFTER_APPEND
            | UNKNOWN_TOPIC_OR_PARTITION
            | LEADER_NOT_AVAILABLE
            | FENCED_LEADER_EPOCH
    )
}

fn fencing(code: i16) -> bool {
    matches!(code, INVALID_PRODUCER_EPOCH | PRODUCER_FENCED)
}

/// A transactional producer. With Kafka's transactions v1 client protocol it adds each
/// partition with AddPartitionsToTxn before its first transactional Produce, which the
/// partition leader verifies with the coordinator; with v2 (KIP-890 part 2, `v2`) it sends
/// Produce v12, whose leader adds the partition itself, and EndTxn v5, whose answer carries the
/// epoch bumped by every transaction end.
pub struct TxnProducer {
    client: Client,
    pub transactional_id: String,
    /// Transactions v2.
    pub v2: bool,
    coordinator: Option<i32>,
    producer: Option<(i64, i16)>,
    sequences: BTreeMap<Tp, i32>,
    /// The open transaction and the partitions added to it.
    current: Option<(TxnKey, BTreeSet<Tp>)>,
    /// Group coordinators found, by group id.
    group_coordinators: BTreeMap<String, i32>,
}

impl TxnProducer {
    pub fn new(client: Client, transactional_id: &str) -> TxnProducer {
        TxnProducer {
            client,
            transactional_id: transactional_id.to_string(),
            v2: false,
            coordinator: None,
            producer: None,
            sequences: BTreeMap::new(),
            current: None,
            group_coordinators: BTreeMap::new(),
        }
    }

    /// The same producer speaking transactions v2.
    pub fn transactions_v2(mut self) -> TxnProducer {
        self.v2 = true;
        self
    }

    /// The producer id and epoch, once initialized.
    pub fn producer(&self) -> Option<(i64, i16)> {
        self.producer
    }

    /// The open transaction, if any.
    pub fn current(&self) -> Option<&TxnKey> {
        self.current.as_ref().map(|(k, _)| k)
    }

    async fn coordinator(&mut self, deadline_us: u64) -> Result<i32, TxnError> {
        loop {
            if let Some(c) = self.coordinator {
                return Ok(c);
            }
            if self.client.now() >= deadline_us {
                return Err(TxnError::Failed("no transaction coordinator found".into()));
            }
            let request = FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(vec![StrBytes::from_string(self.transactional_id.clone())]);
            for broker in self.client.broker_ids() {
                let response: Option<FindCoordinatorResponse> = self
                    .client
                    .call(broker, ApiKey::FindCoordinator, 4, &request)
                    .await;
                if let Some(c) = response.as_ref().and_then(|r| r.coordinators.first()) {
                    if c.error_code == 0 && c.node_id.0 >= 0 {
                        self.coordinator = Some(c.node_id.0);
                        break;
                    }
                }
            }
            if self.coordinator.is_none() {
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
        }
    }

    /// Sends `request` to the coordinator until it answers with an error that is not
    /// retriable (or none), or `deadline_us`; `code` reads the answer's error code.
    async fn coordinator_call<Req, Resp>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        code: impl Fn(&Resp) -> i16,
        deadline_us: u64,
    ) -> Result<Resp, TxnError>
    where
        Req: keel_wire::kafka_protocol::protocol::Encodable,
        Resp: keel_wire::kafka_protocol::protocol::Decodable,
    {
        let mut last = String::from("no answer");
        loop {
            if self.client.now() >= deadline_us {
                return Err(TxnError::Failed(format!("{api_key:?}: {last}")));
            }
            let coordinator = self.coordinator(deadline_us).await?;
            let response: Option<Resp> = self
                .client
                .call(coordinator, api_key, version, request)
                .await;
            match response {
                Some(r) if retriable_coordinator_error(code(&r)) => {
                    let c = code(&r);
                    last = format!("error {c}");
                    if matches!(c, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE) {
                        self.coordinator = None;
                    }
                }
                Some(r) => return Ok(r),
                None => {
                    last = format!("coordinator {coordinator} did not answer");
                    self.coordinator = None;
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// InitProducerId for the transactional id: a new epoch (fencing any earlier instance and
    /// aborting its open transaction), sequences from zero.
    pub async fn init(&mut self, deadline_us: u64) -> Result<(), TxnError> {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                self.transactional_id.clone(),
            ))))
            .with_transaction_timeout_ms(TXN_TIMEOUT_MS)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let response: InitProducerIdResponse = self
            .coordinator_call(
                ApiKey::InitProducerId,
                4,
                &request,
                |r: &InitProducerIdResponse| r.error_code,
                deadline_us,
            )
            .await?;
        if response.error_code != 0 {
            return Err(TxnError::Failed(format!(
                "InitProducerId: error {}",
                response.error_code
            )));
        }
        self.producer = Some((response.producer_id.0, response.producer_epoch));
        self.sequences.clear();
        self.current = None;
        Ok(())
    }

    /// Starts a transaction (initializing the producer first if needed).
    pub async fn begin(&mut self, deadline_us: u64) -> Result<TxnKey, TxnError> {
        if self.producer.is_none() {
            self.init(deadline_us).await?;
        }
        if let Some((key, _)) = &self.current {
            return Ok(key.clone());
        }
        let key = {
            let mut oracle = lock(self.client.oracle());
            let n = oracle
                .txns
                .started
                .entry(self.transactional_id.clone())
                .or_default();
            *n += 1;
            let key = (self.transactional_id.clone(), *n);
            oracle.txns.txns.insert(
                key.clone(),
                Txn {
                    acked: BTreeMap::new(),
                    offsets: Vec::new(),
                    end: TxnEnd::Open,
                },
            );
            key
        };
        self.current = Some((key.clone(), BTreeSet::new()));
        Ok(key)
    }

    /// Adds `tp` to the open transaction (once per partition).
    async fn add_partition(&mut self, tp: &Tp, deadline_us: u64) -> Result<(), TxnError> {
        let Some((_, added)) = &self.current else {
            return Err(TxnError::Failed("no open transaction".into()));
        };
        if added.contains(tp) {
            return Ok(());
        }
        if self.v2 {
            // The partition leader adds it when the first Produce arrives.
            if let Some((_, added)) = &mut self.current {
                added.insert(tp.clone());
            }
            return Ok(());
        }
        let (pid, epoch) = self.producer.expect("begin initialized the producer");
        let request = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
                self.transactional_id.clone(),
            )))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_string(tp.0.clone())))
                .with_partitions(vec![tp.1])]);
        let partition_code = |r: &AddPartitionsToTxnResponse| {
            r.results_by_topic_v3_and_below
                .first()
                .and_then(|t| t.results_by_partition.first())
                .map_or(-1, |p| p.partition_error_code)
        };
        let response = self
            .coordinator_call(
                ApiKey::AddPartitionsToTxn,
                3,
                &request,
                partition_code,
                deadline_us,
            )
            .await?;
        match partition_code(&response) {
            0 => {
                if let Some((_, added)) = &mut self.current {
                    added.insert(tp.clone());
                }
                Ok(())
            }
            code if fencing(code) => Err(TxnError::Fenced(code)),
            code => Err(TxnError::Failed(format!(
                "AddPartitionsToTxn: error {code}"
            ))),
        }
    }

    /// Writes `count` records to `tp` in the open transaction with `acks=all` (one batch,
    /// retried with the same sequence until answered).
    pub async fn send(&mut self, tp: &Tp, count: u32, deadline_us: u64) -> Result<(), TxnError> {
        let Some((key, _)) = self.current.clone() else {
            return Err(TxnError::Failed("no open transaction".into()));
        };
        let sequence = *self.sequences.get(tp).unwrap_or(&0);
        let base = lock(self.client.oracle())
            .txns
            .txns
            .get(&key)
            .map_or(0, |t| t.acked.values().map(Vec::len).sum::<usize>());
        let values: Vec<Bytes> = (0..count as usize)
            .map(|i| {
                Bytes::from(format!(
                    "txn {}#{} {}-{} seq {} #{}",
                    key.0,
                    key.1,
                    tp.0,
                    tp.1,
                    sequence,
                    base + i
                ))
            })
            .collect();
        self.send_values(tp, values, deadline_us).await
    }

    /// Writes `values` (each unique in the run) to `tp` in the open transaction, as
    /// [`send`](Self::send).
    pub async fn send_values(
        &mut self,
        tp: &Tp,
        values: Vec<Bytes>,
        deadline_us: u64,
    ) -> Result<(), TxnError> {
        self.add_partition(tp, deadline_us).await?;
        let (key, _) = self
            .current
            .clone()
            .expect("add_partition needs a transaction");
        let (pid, epoch) = self.producer.expect("initialized");
        let sequence = *self.sequences.get(tp).unwrap_or(&0);
        let count = values.len();
        {
            let mut oracle = lock(self.client.oracle());
            for v in &values {
                oracle.txns.owner.insert(v.clone(), key.clone());
            }
        }
        let records: Vec<(Option<&[u8]>, &[u8])> =
            values.iter().map(|v| (None, v.as_ref())).collect();
        let mut batch = build_batch(&records, self.client.now() as i64 / 1_000);
        set_transactional_producer(&mut batch, pid, epoch);
        set_producer(&mut batch, pid, epoch, sequence);
        let batch = Bytes::from(batch);
        let request = ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
                self.transactional_id.clone(),
            ))))
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(tp.0.clone())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(tp.1)
                    .with_records(Some(batch))])]);
        let mut last = String::from("no answer");
        loop {
            if self.client.now() >= deadline_us {
                return Err(TxnError::Failed(format!(
                    "produce to {}-{}: {last}",
                    tp.0, tp.1
                )));
            }
            let Some(leader) = self.client.leader(tp).await else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            let version = if self.v2 { 12 } else { 9 };
            let response: Option<ProduceResponse> = self
                .client
                .call(leader, ApiKey::Produce, version, &request)
                .await;
            let outcome = response.and_then(|r| {
                let p = r.responses.first()?.partition_responses.first()?;
                Some((p.error_code, p.base_offset))
            });
            match outcome {
                Some((0, base)) => {
                    let at_us = self.client.now();
                    let mut oracle = lock(self.client.oracle());
                    for (i, v) in values.iter().enumerate() {
                        oracle.acked.entry(tp.clone()).or_default().insert(
                            base + i as i64,
                            Acked {
                                value: v.clone(),
                                acks_all: true,
                                at_us,
                            },
                        );
                    }
                    if let Some(t) = oracle.txns.txns.get_mut(&key) {
                        t.acked
                            .entry(tp.clone())
                            .or_default()
                            .extend(values.iter().cloned());
                    }
                    drop(oracle);
                    self.sequences.insert(tp.clone(), sequence + count as i32);
                    return Ok(());
                }
                Some((code, _)) if fencing(code) => return Err(TxnError::Fenced(code)),
                Some((code, _)) if retriable_partition_error(code) => {
                    last = format!("error {code}");
                    self.client.forget_leader(tp);
                }
                Some((code, _)) => {
                    return Err(TxnError::Failed(format!(
                        "produce to {}-{}: error {code}",
                        tp.0, tp.1
                    )))
                }
                None => {
                    last = format!("leader {leader} did not answer");
                    self.client.forget_leader(tp);
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Commits consumer offsets of `group` inside the open transaction, as
    /// `sendOffsetsToTransaction` does: AddOffsetsToTxn to the transaction coordinator (v1
    /// only: with v2, TxnOffsetCommit v5 adds the group's partition itself), then TxnOffsetCommit
    /// to the group's coordinator without a generation (a standalone consumer). The offsets
    /// are noted in the oracle before they are sent.
    pub async fn send_offsets(
        &mut self,
        group: &str,
        offsets: &[(Tp, i64)],
        deadline_us: u64,
    ) -> Result<(), TxnError> {
        let Some((key, _)) = self.current.clone() else {
            return Err(TxnError::Failed("no open transaction".into()));
        };
        let (pid, epoch) = self.producer.expect("begin initialized the producer");
        let transactional_id =
            TransactionalId(StrBytes::from_string(self.transactional_id.clone()));
        let group_id = GroupId(StrBytes::from_string(group.to_string()));
        if !self.v2 {
            let request = AddOffsetsToTxnRequest::default()
                .with_transactional_id(transactional_id.clone())
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_group_id(group_id.clone());
            let response = self
                .coordinator_call(
                    ApiKey::AddOffsetsToTxn,
                    3,
                    &request,
                    |r: &AddOffsetsToTxnResponse| r.error_code,
                    deadline_us,
                )
                .await?;
            match response.error_code {
                0 => {}
                code if fencing(code) => return Err(TxnError::Fenced(code)),
                code => return Err(TxnError::Failed(format!("AddOffsetsToTxn: error {code}"))),
            }
        }
        if let Some(t) = lock(self.client.oracle()).txns.txns.get_mut(&key) {
            t.offsets.extend(
                offsets
                    .iter()
                    .map(|(tp, offset)| (group.to_string(), tp.clone(), *offset)),
            );
        }
        let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            by_topic.entry(topic).or_default().push(
                TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1),
            );
        }
        let request = TxnOffsetCommitRequest::default()
            .with_transactional_id(transactional_id)
            .with_group_id(group_id)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        TxnOffsetCommitRequestTopic::default()
                            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let mut last = String::from("no answer");
        loop {
            if self.client.now() >= deadline_us {
                return Err(TxnError::Failed(format!("TxnOffsetCommit: {last}")));
            }
            let coordinator = match self.group_coordinators.get(group) {
                Some(c) => *c,
                None => match self.client.group_coordinator(group).await {
                    Some(c) => {
                        self.group_coordinators.insert(group.to_string(), c);
                        c
                    }
                    None => {
                        last = "no group coordinator found".into();
                        tokio::time::sleep(RETRY_BACKOFF).await;
                        continue;
                    }
                },
            };
            let version = if self.v2 { 5 } else { 3 };
            let response: Option<TxnOffsetCommitResponse> = self
                .client
                .call(coordinator, ApiKey::TxnOffsetCommit, version, &request)
                .await;
            let code = response.map(|r| {
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|c| *c != 0)
                    .unwrap_or(0)
            });
            match code {
                Some(0) => return Ok(()),
                Some(code) if fencing(code) => return Err(TxnError::Fenced(code)),
                Some(code) if retriable_coordinator_error(code) => {
                    last = format!("error {code}");
                    if matches!(code, NOT_COORDINATOR | COORDINATOR_NOT_AVAILABLE) {
                        self.group_coordinators.remove(group);
                    }
                }
                Some(code) => {
                    return Err(TxnError::Failed(format!("TxnOffsetCommit: error {code}")))
                }
                None => {
                    last = format!("group coordinator {coordinator} did not answer");
                    self.group_coordinators.remove(group);
                }
            }
            tokio::time::sleep(RETRY_BACKOFF).await;
        }
    }

    /// Ends the open transaction (EndTxn v3; v5 with transactions v2, taking the bumped epoch
    /// it answers); the producer notes in the oracle that the end was sent before sending it,
    /// and that it was acknowledged after.
    pub async fn end(&mut self, commit: bool, deadline_us: u64) -> Result<(), TxnError> {
        let Some((key, _)) = self.current.clone() else {
            return Err(TxnError::Failed("no open transaction".into()));
        };
        let (pid, epoch) = self.producer.expect("initialized");
        self.set_end(
            &key,
            if commit {
                TxnEnd::CommitSent
            } else {
                TxnEnd::AbortSent
            },
        );
        let request = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(
                self.transactional_id.clone(),
            )))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit);
        let result = self
            .coordinator_call(
                ApiKey::EndTxn,
                if self.v2 { 5 } else { 3 },
                &request,
                |r: &EndTxnResponse| r.error_code,
                deadline_us,
            )
            .await;
        match result {
            Ok(r) if r.error_code == 0 => {
                if self.v2 && (r.producer_id.0, r.producer_epoch) != (pid, epoch) {
                    // Every end bumps the epoch (or moves to a new producer id): sequences
                    // start over.
                    self.producer = Some((r.producer_id.0, r.producer_epoch));
                    self.sequences.clear();
                }
                self.set_end(
                    &key,
                    if commit {
                        TxnEnd::Committed
                    } else {
                        TxnEnd::Aborted
                    },
                );
                self.current = None;
                Ok(())
            }
            Ok(r) if fencing(r.error_code) => {
                self.set_end(&key, TxnEnd::Refused);
                Err(TxnError::Fenced(r.error_code))
            }
            Ok(r) => Err(TxnError::Failed(format!("EndTxn: error {}", r.error_code))),
            Err(e) => Err(e),
        }
    }

    /// Forgets the producer after a failure: the next [`begin`](Self::begin) initializes it
    /// again (a new epoch, which aborts whatever it left open).
    pub fn reset(&mut self) {
        self.producer = None;
        self.current = None;
        self.sequences.clear();
        self.coordinator = None;
        self.group_coordinators.clear();
    }

    fn set_end(&self, key: &TxnKey, end: TxnEnd) {
        if let Some(t) = lock(self.client.oracle()).txns.txns.get_mut(key) {
            t.end = end;
        }
    }

    /// One whole transaction: `count` records to each of `tps`, then commit or abort; on any
    /// failure the producer aborts if it can and starts over with a new epoch next time.
    /// Whether it ended as asked.
    pub async fn run_one(
        &mut self,
        tps: &[Tp],
        count: u32,
        commit: bool,
        deadline_us: u64,
    ) -> Result<(), TxnError> {
        let written = async {
            self.begin(deadline_us).await?;
            for tp in tps {
                self.send(tp, count, deadline_us).await?;
            }
            Ok(())
        }
        .await;
        let outcome = match written {
            Ok(()) => self.end(commit, deadline_us).await,
            Err(e) => {
                // An abortable error: abort (unless fenced, when the coordinator already did).
                if self.current.is_some() && !matches!(e, TxnError::Fenced(_)) {
                    let abort_deadline = self.client.now() + 5_000_000;
                    let _ = self.end(false, abort_deadline).await;
                }
                Err(e)
            }
        };
        // After a failure — an EndTxn whose answer was lost included: its outcome is the
        // coordinator's — start over with a new epoch, which fences this one.
        if outcome.is_err() {
            self.reset();
        }
        outcome
    }
}

impl Client {
    /// Reads `tp` with `isolation_level=read_committed` from `from` up to the last stable
    /// offset its leader reports, dropping aborted transactions' records as Kafka's clients
    /// do, and records what it returned and the LSO in the [`TxnOracle`]. Returns the
    /// (last stable offset, high watermark) of the final answer, or `None` if the leader could
    /// not be read before `deadline_us`.
    pub async fn consume_committed(&mut self, tp: &Tp, deadline_us: u64) -> Option<(i64, i64)> {
        let mut next = 0i64;
        let mut target: Option<i64> = None;
        loop {
            let read = self.fetch_committed(tp, next, deadline_us).await?;
            next = read.next;
            let target_now = *target.get_or_insert(read.lso);
            if next >= target_now.min(read.lso) {
                return Some((read.lso, read.hwm));
            }
        }
    }

    /// One read_committed Fetch of `tp` from `from` (retried until its leader answers, or
    /// `deadline_us`), checked and recorded in the [`TxnOracle`] as
    /// [`consume_committed`](Self::consume_committed) describes.
    pub async fn fetch_committed(
        &mut self,
        tp: &Tp,
        from: i64,
        deadline_us: u64,
    ) -> Option<CommittedRead> {
        let next = from;
        loop {
            if self.now() >= deadline_us {
                return None;
            }
            let Some(leader) = self.leader(tp).await else {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            let request = fetch_request(tp, next, 1);
            let response: Option<FetchResponse> =
                self.call(leader, ApiKey::Fetch, 12, &request).await;
            let Some(p) = response.as_ref().and_then(|r| {
                (r.error_code == 0)
                    .then(|| r.responses.first().and_then(|t| t.partitions.first()))
                    .flatten()
            }) else {
                self.forget_leader(tp);
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            };
            if p.error_code != 0 {
                self.forget_leader(tp);
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
            let (lso, hwm) = (p.last_stable_offset, p.high_watermark);
            let aborted: Vec<(i64, i64)> = p
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.first_offset, a.producer_id.0))
                .collect();
            let (records, end) = match &p.records {
                Some(bytes) => committed_records(bytes, aborted),
                None => (Vec::new(), next),
            };
            let end = end.max(next);
            let mut oracle = lock(self.oracle());
            let returned = records.clone();
            let seen_key = (self.name().to_string(), tp.clone());
            let seen = oracle.txns.lso_seen.get(&seen_key).copied().unwrap_or(0);
            if lso < seen {
                oracle.violations.push(ClientViolation {
                    property: "the last stable offset never moves backward",
                    detail: format!(
                        "{}-{}: broker {leader} reported last stable offset {lso} to {} after {seen}",
                        tp.0, tp.1, self.name()
                    ),
                });
            }
            oracle.txns.lso_seen.insert(seen_key, lso.max(seen));
            for (offset, value) in records {
                if let Some(key) = oracle.txns.owner.get(&value).cloned() {
                    let end = oracle.txns.txns.get(&key).map(|t| t.end);
                    if !end.is_some_and(TxnEnd::commit_requested) {
                        oracle.violations.push(ClientViolation {
                            property: "read_committed never returns an uncommitted record",
                            detail: format!(
                                "{}-{} offset {offset} (last stable offset {lso}): {:?} of transaction {}#{}, whose producer never asked to commit it ({end:?})",
                                tp.0,
                                tp.1,
                                String::from_utf8_lossy(&value),
                                key.0,
                                key.1
                            ),
                        });
                    }
                }
                let Oracle {
                    txns, violations, ..
                } = &mut *oracle;
                note_read(
                    txns.read.entry(tp.clone()).or_default(),
                    violations,
                    tp,
                    offset,
                    value,
                    " (read_committed)",
                );
            }
            drop(oracle);
            // The fetch stops at the LSO; batches cut short by it end the read.
            return Some(CommittedRead {
                records: returned,
                next: end.min(lso).max(next),
                lso,
                hwm,
            });
        }
    }
}

/// The records a read_committed consumer returns from a fetch's `bytes`, given the aborted
/// transactions (first offset, producer id) the broker listed with it, and the offset after
/// the last whole batch. As Kafka's consumer does: for every transactional batch (control
/// batches included — an abort marker must find its producer listed even when the fetch began
/// inside the transaction) the aborted transactions starting at or before it are taken first;
/// an abort marker ends its producer's; data of a producer in an aborted transaction is dropped.
fn committed_records(bytes: &[u8], mut aborted: Vec<(i64, i64)>) -> (Vec<(i64, Bytes)>, i64) {
    aborted.sort_unstable();
    let mut aborted = aborted.into_iter().peekable();
    let mut aborting: BTreeSet<i64> = BTreeSet::new();
    let mut records: Vec<(i64, Bytes)> = Vec::new();
    let mut end = i64::MIN;
    for batch in BatchIter::new(bytes) {
        let Ok(batch) = batch else { break };
        let h: &BatchHeader = &batch.header;
        end = end.max(h.next_offset().0);
        let transactional = h.attributes & TRANSACTIONAL_ATTRIBUTE != 0;
        if transactional {
            while let Some((_, pid)) = aborted.next_if(|(first, _)| *first <= h.last_offset().0) {
                aborting.insert(pid);
            }
        }
        if h.is_control() {
            if let Ok(Some(marker)) = EndTxnMarker::parse(batch.bytes, h) {
                if marker.kind == ControlType::Abort {
                    aborting.remove(&h.producer_id);
                }
            }
            continue;
        }
        if transactional && aborting.contains(&h.producer_id) {
            continue;
        }
        if let Some(decoded) = decode_records(batch.bytes) {
            records.extend(
                decoded
                    .into_iter()
                    .map(|r| (r.offset, Bytes::from(r.value))),
            );
        }
    }
    (records, end)
}

/// What one read_committed Fetch returned.
#[derive(Debug, Clone)]
pub struct CommittedRead {
    /// The records returned (aborted transactions' dropped), by offset.
    pub records: Vec<(i64, Bytes)>,
    /// Where the next fetch starts (past control batches and aborted data, never past the
    /// last stable offset).
    pub next: i64,
    pub lso: i64,
    pub hwm: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> Tp {
        ("t".to_string(), p)
    }

    /// An oracle with one transaction of `end` that wrote `a0`, `a1` to t/0 and `b0` to t/1,
    /// and a read_committed consumer that read `read` (partition, offset, value).
    fn oracle(end: TxnEnd, read: &[(i32, i64, &str)]) -> TxnOracle {
        let mut o = TxnOracle::default();
        let key = ("p".to_string(), 1);
        let mut acked = BTreeMap::new();
        acked.insert(tp(0), vec![Bytes::from("a0"), Bytes::from("a1")]);
        acked.insert(tp(1), vec![Bytes::from("b0")]);
        for v in acked.values().flatten() {
            o.owner.insert(v.clone(), key.clone());
        }
        o.txns.insert(
            key,
            Txn {
                acked,
                offsets: Vec::new(),
                end,
            },
        );
        for (p, offset, v) in read {
            o.read
                .entry(tp(*p))
                .or_default()
                .insert(*offset, Bytes::from(v.to_string()));
        }
        o
    }

    fn properties(o: &TxnOracle) -> Vec<&'static str> {
        final_violations(o)
            .into_iter()
            .map(|v| v.property)
            .collect()
    }

    /// A batch of producer `pid` at `base` (transactional data with `values`, or a marker).
    fn batch(base: i64, pid: i64, values: &[&str], marker: Option<ControlType>) -> Vec<u8> {
        let mut b = match marker {
            Some(kind) => EndTxnMarker {
                kind,
                coordinator_epoch: 0,
            }
            .to_batch(pid, 0, 0),
            None => {
                let records: Vec<(Option<&[u8]>, &[u8])> =
                    values.iter().map(|v| (None, v.as_bytes())).collect();
                let mut b = build_batch(&records, 0);
                set_transactional_producer(&mut b, pid, 0);
                set_producer(&mut b, pid, 0, 0);
                b
            }
        };
        b[..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    fn values(records: &[(i64, Bytes)]) -> Vec<(i64, String)> {
        records
            .iter()
            .map(|(o, v)| (*o, String::from_utf8_lossy(v).into_owned()))
            .collect()
    }

    #[test]
    fn a_fetch_beginning_inside_an_aborted_transaction_keeps_the_next_committed_one() {
        // Producer 7: an aborted transaction from offset 5 (its marker at 9), then a committed
        // one at 10 (marker at 11). A fetch from 9 starts at the abort marker; the broker lists
        // the aborted transaction (first offset 5). The committed record at 10 must be kept.
        let bytes = [
            batch(9, 7, &[], Some(ControlType::Abort)),
            batch(10, 7, &["kept"], None),
            batch(11, 7, &[], Some(ControlType::Commit)),
        ]
        .concat();
        let (records, end) = committed_records(&bytes, vec![(5, 7)]);
        assert_eq!(values(&records), [(10, "kept".to_string())]);
        assert_eq!(end, 12);
        // From 5: the aborted data is dropped, the committed kept.
        let bytes = [
            batch(5, 7, &["dropped"], None),
            batch(9, 7, &[], Some(ControlType::Abort)),
            batch(10, 7, &["kept"], None),
        ]
        .concat();
        let (records, _) = committed_records(&bytes, vec![(5, 7)]);
        assert_eq!(values(&records), [(10, "kept".to_string())]);
    }

    #[test]
    fn a_committed_transaction_must_be_read_whole() {
        let whole = [(0, 0, "a0"), (0, 1, "a1"), (1, 0, "b0")];
        assert!(properties(&oracle(TxnEnd::Committed, &whole)).is_empty());
        let torn = [(0, 0, "a0"), (0, 1, "a1")];
        assert_eq!(
            properties(&oracle(TxnEnd::Committed, &torn)),
            ["a committed transaction is read whole"]
        );
        assert_eq!(
            properties(&oracle(TxnEnd::Committed, &[])),
            ["a committed transaction is read whole"]
        );
    }

    #[test]
    fn an_unanswered_commit_is_read_whole_or_not_at_all() {
        let whole = [(0, 0, "a0"), (0, 1, "a1"), (1, 0, "b0")];
        assert!(properties(&oracle(TxnEnd::CommitSent, &whole)).is_empty());
        assert!(properties(&oracle(TxnEnd::CommitSent, &[])).is_empty());
        assert_eq!(
            properties(&oracle(TxnEnd::CommitSent, &[(1, 0, "b0")])),
            ["a committed transaction is read whole"]
        );
    }

    #[test]
    fn a_transactional_record_read_twice_is_a_duplicate_a_plain_one_is_not() {
        let twice = [(0, 0, "a0"), (0, 1, "a1"), (0, 2, "a1"), (1, 0, "b0")];
        assert_eq!(
            properties(&oracle(TxnEnd::Committed, &twice)),
            ["read_committed returns each record once"]
        );
        let plain = [
            (0, 0, "a0"),
            (0, 1, "a1"),
            (1, 0, "b0"),
            (1, 1, "x"),
            (1, 2, "x"),
        ];
        assert!(properties(&oracle(TxnEnd::Committed, &plain)).is_empty());
    }
}
