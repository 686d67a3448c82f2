//! Produce (key 0): validate, append as leader, answer with base offsets.
//!
//! - A partition this broker does not lead: `NOT_LEADER_OR_FOLLOWER` with the current leader
//!   (v10+) and its endpoint, so the producer moves on at once.
//! - acks=all while the ISR is below the effective `min.insync.replicas`:
//!   `NOT_ENOUGH_REPLICAS`, nothing appended. Otherwise the request waits (Kafka's
//!   `DelayedProduce`) until the high watermark covers every partition's records, up to the
//!   request's `timeout_ms` (`REQUEST_TIMED_OUT`); `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the
//!   ISR shrank below min ISR meanwhile.
//! - acks=1 and acks=0 are answered once appended; the data stays invisible to consumers until
//!   the high watermark covers it (KIP-966).
//! - v13 names topics by id (KIP-516): an id this broker does not know is `UNKNOWN_TOPIC_ID`
//!   for each of its partitions (Kafka's `KafkaApis.handleProduceRequest`: only when the
//!   request named the topic by id); the answer names the topic by the same id.
//! - Idempotent producers: the log checks each batch's producer id, epoch and sequence
//!   (`keel_log::producer_state`). A retried batch the log already holds is answered with the
//!   offsets it got the first time (for acks=all once the high watermark passes it);
//!   `OUT_OF_ORDER_SEQUENCE_NUMBER` and `INVALID_PRODUCER_EPOCH` refuse the others.
//! - Transactional producers (KIP-98): the request must name a transactional id the session may
//!   WRITE (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED` for the whole request otherwise). A
//!   producer's first transactional batch in a partition is checked with the id's transaction
//!   coordinator first (KIP-890 part 1): a partition not added to the ongoing transaction is
//!   `TRANSACTION_ABORTABLE` (`INVALID_TXN_STATE` before v11), a coordinator that cannot answer
//!   yet `NOT_ENOUGH_REPLICAS` (retried) — so a zombie or confused producer can never open a
//!   transaction no coordinator knows of, which would hold back every read_committed reader.
//! - Before the append, the batch is checked as Kafka's `LogValidator` checks a client's
//!   ([`keel_log::validate`]): a batch over `max.message.bytes` is `MESSAGE_TOO_LARGE` whole;
//!   keyless records on a compacted topic (`INVALID_RECORD`) and timestamps outside
//!   `message.timestamp.before.max.ms` / `message.timestamp.after.max.ms` (`INVALID_TIMESTAMP`)
//!   refuse the batch with KIP-467's `record_errors` naming each bad record and an
//!   `error_message` (v8+), and the log start offset, as Kafka's `ReplicaManager` answers a
//!   `RecordValidationException`; clients then fail only those records. A batch in another codec
//!   than the topic's `compression.type` is rebuilt in it. Checks that decompress records run
//!   off the async tasks ([`crate::blocking::run_blocking`]).

use std::sync::Arc;

use bytes::Bytes;
use keel_log::validate::{self, RecordErrors, Refused};
use keel_log::LogError;
use keel_replication::{Acks, ErrorCode};
use keel_wire::kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
    TopicProduceResponse,
};
use keel_wire::kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};
use keel_wire::ResponseError;
use tokio::sync::oneshot;
use tracing::warn;

use super::str_bytes;
use crate::broker::{AppendError, Broker, KafkaCodecs};
use crate::error::{from_log_error, ApiError};
use crate::partition::{AppendResult, Partition, PartitionError};

/// The first Produce version that names topics by id.
const TOPIC_ID_MIN_VERSION: i16 = 13;

/// The acks values Kafka accepts.
const ACKS_VALID: [i16; 3] = [-1, 0, 1];

/// The longest an acks=all request waits, whatever it asks.
const PRODUCE_TIMEOUT_MS_MAX: u64 = 300_000;

/// What the connection does after a Produce.
#[derive(Debug)]
pub enum ProduceOutcome {
    Respond(ProduceResponse),
    /// `acks=0` and every partition appended: the client expects no response.
    Silent,
    /// `acks=0` and some partition failed: like Kafka, close the connection so the producer
    /// notices (it refreshes metadata and reconnects) instead of losing records silently.
    Close(String),
}

/// One partition's outcome so far.
enum Pending {
    Done(Result<AppendResult, Failure>),
    Waiting(AppendResult, oneshot::Receiver<Result<(), ErrorCode>>),
}

/// A partition's refusal: the error, and for a batch refused because of some of its records
/// (KIP-467) those records and the log start offset (Kafka answers it with them).
struct Failure {
    error: ApiError,
    records: Option<(RecordErrors, i64)>,
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Failure {
        Failure {
            error,
            records: None,
        }
    }
}

/// Answers Produce; leaders named in NOT_LEADER answers are at their endpoints of `listener`,
/// the one the request came in on.
pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: ProduceRequest,
    version: i16,
    listener: &str,
) -> ProduceOutcome {
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::Produce,
    );
    let acks = match request.acks {
        -1 => Some(Acks::All),
        0 => Some(Acks::None),
        1 => Some(Acks::Leader),
        _ => None,
    };
    debug_assert_eq!(acks.is_some(), ACKS_VALID.contains(&request.acks));
    let timeout_ms = u64::try_from(request.timeout_ms)
        .unwrap_or(0)
        .min(PRODUCE_TIMEOUT_MS_MAX);
    let mut any_appended = false;
    let mut first_error: Option<String> = None;
    let mut topics = Vec::new();
    let transactional = request.topic_data.iter().any(|t| {
        t.partition_data
            .iter()
            .any(|p| p.records.as_deref().is_some_and(has_transactional_batch))
    });
    let txn_id = request.transactional_id.as_ref().map(|id| id.0.to_string());
    let txn_refused = transactional
        && !txn_id.as_deref().is_some_and(|id| {
            authz.allows(
                keel_controller::acl::AclOperation::Write,
                keel_controller::acl::ResourceType::TransactionalId,
                id,
            )
        });
    let txn = Txn {
        id: txn_id.as_deref(),
        knows_abortable: version >= TRANSACTION_ABORTABLE_MIN_VERSION,
        adds_partitions: version >= TRANSACTION_V2_MIN_VERSION,
    };
    for topic in request.topic_data {
        // v13+ names topics by id.
        let name = if version >= TOPIC_ID_MIN_VERSION {
            broker.topic_name(topic.topic_id)
        } else {
            Some(topic.name.to_string())
        };
        // Kafka's `filterByAuthorized(WRITE, TOPIC)`: once per topic.
        let writable = name
            .as_deref()
            .is_none_or(|n| authz.topic(keel_controller::acl::AclOperation::Write, n));
        let mut partitions = Vec::new();
        for data in topic.partition_data {
            let pending = match acks {
                None => Pending::Done(Err(ApiError::new(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, got {}", request.acks),
                )
                .into())),
                Some(_) if name.is_none() && version >= TOPIC_ID_MIN_VERSION => {
                    Pending::Done(Err(ApiError::new(
                        ResponseError::UnknownTopicId,
                        format!(
                            "no topic has id {}",
                            keel_log::encode_kafka_uuid(topic.topic_id)
                        ),
                    )
                    .into()))
                }
                Some(_) if txn_refused => Pending::Done(Err(ApiError::new(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "Transactional Id authorization failed.",
                )
                .into())),
                Some(_) if !writable => Pending::Done(Err(ApiError::new(
                    ResponseError::TopicAuthorizationFailed,
                    "Topic authorization failed.",
                )
                .into())),
                Some(acks) => {
                    append(
                        broker,
                        name.as_deref(),
                        data.index,
                        data.records.clone(),
                        (acks, timeout_ms),
                        txn,
                    )
                    .await
                }
            };
            any_appended |= !matches!(pending, Pending::Done(Err(_)));
            if let (Pending::Done(Err(e)), None) = (&pending, &first_error) {
                first_error = Some(format!("partition {}: {}", data.index, e.error));
            }
            partitions.push((data.index, pending));
        }
        topics.push((topic.name, topic.topic_id, name, partitions));
    }
    if any_appended {
        broker.notify_data_changed();
    }
    if request.acks == 0 {
        return match first_error {
            Some(reason) => ProduceOutcome::Close(format!("acks=0 produce failed: {reason}")),
            None => ProduceOutcome::Silent,
        };
    }
    let mut leaders = std::collections::BTreeSet::new();
    let mut responses = Vec::new();
    for (wire_name, topic_id, name, partitions) in topics {
        let mut partition_responses = Vec::new();
        for (index, pending) in partitions {
            let result = match pending {
                Pending::Done(result) => result,
                Pending::Waiting(appended, waiter) => match waiter.await {
                    Ok(Ok(())) => Ok(appended),
                    Ok(Err(code)) => Err(ApiError::bare(response_error(code)).into()),
                    // The partition went away while waiting.
                    Err(_) => Err(ApiError::bare(ResponseError::NotLeaderOrFollower).into()),
                },
            };
            let mut response = partition_response(index, result);
            if response.error_code == ResponseError::NotLeaderOrFollower.code() {
                if let Some(leader) = name
                    .as_deref()
                    .and_then(|n| current_leader(broker, n, index))
                {
                    leaders.insert(leader.leader_id.0);
                    response = response.with_current_leader(leader);
                }
            }
            partition_responses.push(response);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(wire_name)
                .with_topic_id(topic_id)
                .with_partition_responses(partition_responses),
        );
    }
    let endpoints = leaders
        .into_iter()
        .filter(|id| *id >= 0)
        .filter_map(|id| {
            broker.broker_endpoint_on(id, listener).map(|(host, port)| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(None)
            })
        })
        .collect();
    ProduceOutcome::Respond(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(endpoints),
    )
}

/// One lookup in the image per partition (a request may name any number of them).
fn current_leader(broker: &Broker, topic: &str, index: i32) -> Option<LeaderIdAndEpoch> {
    let image = broker.image();
    let id = image.topic_id(topic)?;
    let tp = keel_controller::types::TopicPartition::new(id, u32::try_from(index).ok()?);
    let p = image.partition(tp)?;
    Some(
        LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(p.leader.map_or(-1, |b| b.0)))
            .with_leader_epoch(p.leader_epoch.0),
    )
}

fn response_error(code: ErrorCode) -> ResponseError {
    ResponseError::try_from_code(code.code()).unwrap_or(ResponseError::UnknownServerError)
}

/// The request's transactional id; whether its version knows `TRANSACTION_ABORTABLE`; whether
/// its client uses transactions v2 (the leader adds partitions to the transaction).
#[derive(Clone, Copy)]
struct Txn<'a> {
    id: Option<&'a str>,
    knows_abortable: bool,
    adds_partitions: bool,
}

/// The first Produce version whose clients know `TRANSACTION_ABORTABLE` (KIP-890).
const TRANSACTION_ABORTABLE_MIN_VERSION: i16 = 11;
/// The first Produce version of transactions v2 (KIP-890 part 2): its client sends no
/// AddPartitionsToTxn, the leader adds the partition (Kafka's
/// `ProduceRequest.LAST_BEFORE_TRANSACTION_V2_VERSION` is 11).
const TRANSACTION_V2_MIN_VERSION: i16 = 12;

async fn append(
    broker: &Arc<Broker>,
    topic: Option<&str>,
    index: i32,
    records: Option<Bytes>,
    (acks, timeout_ms): (Acks, u64),
    txn: Txn<'_>,
) -> Pending {
    let Some(partition) = topic.and_then(|t| broker.partition(t, index)) else {
        let exists = topic
            .and_then(|t| broker.topic(t))
            .is_some_and(|t| t.partitions.iter().any(|p| p.index == index));
        // A partition that exists elsewhere is someone else's to lead.
        let error = if exists {
            ResponseError::NotLeaderOrFollower
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        return Pending::Done(Err(ApiError::bare(error).into()));
    };
    if topic == Some(crate::coordinator::OFFSETS_TOPIC) {
        // Kafka: clients may not write the internal topic; only the coordinator does.
        return Pending::Done(Err(ApiError::new(
            ResponseError::InvalidTopicException,
            "__consumer_offsets is internal: only the group coordinator writes it",
        )
        .into()));
    }
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Pending::Done(Err(ApiError::new(
            ResponseError::InvalidRecord,
            "produce request has no record batches",
        )
        .into()));
    };
    if partition.is_leader() {
        if let Err(failure) = verify_transaction(broker, &partition, &records, txn).await {
            return Pending::Done(Err(failure));
        }
    }
    // A replica that does not lead answers NOT_LEADER_OR_FOLLOWER (from the append) before any
    // record is looked at, as Kafka's ReplicaManager finds the leader log first.
    let records = if partition.is_leader() {
        match check_batch(broker, &partition, records).await {
            Ok(records) => records,
            Err(failure) => return Pending::Done(Err(failure)),
        }
    } else {
        records
    };
    match broker.append_as_leader(&partition, &records, acks, timeout_ms) {
        Ok((appended, Some(waiter))) => Pending::Waiting(appended, waiter),
        Ok((appended, None)) => Pending::Done(Ok(appended)),
        Err(e) => Pending::Done(Err(match e {
            AppendError::Replication(code) => ApiError::bare(response_error(code)),
            AppendError::Partition(PartitionError::Deleted) => {
                ApiError::bare(ResponseError::UnknownTopicOrPartition)
            }
            AppendError::Partition(PartitionError::Offline) => ApiError::new(
                ResponseError::KafkaStorageError,
                "the partition's log directory on this broker is offline",
            ),
            AppendError::Partition(PartitionError::Log(e)) | AppendError::Log(e) => {
                log_error(&partition.tp, e)
            }
            AppendError::Internal(reason) => {
                warn!(partition = %partition.tp, %reason, "append failed");
                ApiError::new(ResponseError::UnknownServerError, reason)
            }
        }
        .into())),
    }
}

/// The batch checked against the topic's rules and converted to its codec
/// ([`keel_log::validate`]); work that decompresses runs on the blocking pool.
async fn check_batch(
    broker: &Broker,
    partition: &Partition,
    records: Bytes,
) -> Result<Bytes, Failure> {
    let rules = partition.config().producer_batch_rules();
    let tp = partition.tp.clone();
    let now_ms = broker.clock.now_ms();
    let heavy = validate::reads_records(&records, &rules);
    let check = move || match validate::validate_producer_batches(
        &records,
        &rules,
        &tp,
        now_ms,
        &KafkaCodecs,
    ) {
        Ok(checked) if checked.recompressed => Ok(Bytes::from(checked.bytes.into_owned())),
        Ok(_) => Ok(records.clone()),
        Err(refused) => Err(refused),
    };
    let outcome = if heavy {
        crate::blocking::run_blocking(check).await.map_err(|e| {
            Failure::from(ApiError::new(
                ResponseError::UnknownServerError,
                format!("checking the batch failed: {e}"),
            ))
        })?
    } else {
        check()
    };
    outcome.map_err(|refused| match refused {
        Refused::Batch(e) => log_error(&partition.tp, e).into(),
        Refused::Records(errors) => {
            let error = ResponseError::try_from_code(errors.kind.code())
                .unwrap_or(ResponseError::InvalidRecord);
            let log_start_offset = partition
                .lock_log()
                .map_or(-1, |log| log.log_start_offset().0);
            Failure {
                error: ApiError::new(error, errors.summary()),
                records: Some((errors, log_start_offset)),
            }
        }
    })
}

/// KIP-890 part 1: a transactional batch of a producer with no open transaction in this
/// partition is checked with the transaction coordinator before it is appended.
async fn verify_transaction(
    broker: &Broker,
    partition: &Partition,
    records: &[u8],
    txn: Txn<'_>,
) -> Result<(), Failure> {
    let Some(header) = keel_log::batch::BatchHeader::parse(records) else {
        return Ok(());
    };
    if header.attributes & keel_log::batch::TRANSACTIONAL_ATTRIBUTE == 0 {
        return Ok(());
    }
    let Some(id) = txn.id else {
        return Err(ApiError::new(
            ResponseError::TransactionalIdAuthorizationFailed,
            "a transactional batch needs the request's transactional id",
        )
        .into());
    };
    let open = partition.lock_log().is_ok_and(|log| {
        log.producer_states()
            .get(header.producer_id)
            .is_some_and(|e| {
                e.epoch == header.producer_epoch && e.current_txn_first_offset.is_some()
            })
    });
    if open {
        return Ok(());
    }
    let tp = (partition.tp.topic.clone(), partition.tp.partition);
    broker
        .verify_txn_partition(
            id,
            header.producer_id,
            header.producer_epoch,
            &tp,
            txn.adds_partitions,
        )
        .await
        .map_err(|e| {
            let error = super::txn::verification_error(e, txn.knows_abortable);
            ApiError::new(
                error,
                format!("{tp:?} is not part of transaction {id:?} at this producer epoch ({e:?})"),
            )
            .into()
        })
}

/// Whether a batch header in `records` has the transactional bit (malformed input is left to
/// the checks that follow).
fn has_transactional_batch(records: &[u8]) -> bool {
    let mut position = 0;
    while let Some(header) = records
        .get(position..)
        .and_then(keel_log::batch::BatchHeader::parse)
    {
        if header.attributes & keel_log::batch::TRANSACTIONAL_ATTRIBUTE != 0 {
            return true;
        }
        match header.size_bytes() {
            Some(size) if size > 0 => position += size,
            _ => break,
        }
    }
    false
}

fn log_error(tp: &keel_log::TopicPartition, e: LogError) -> ApiError {
    // Produce v3+ carries only magic-2 batches; Kafka rejects older formats as invalid.
    if let LogError::UnsupportedMagic { .. } = e {
        return ApiError::new(ResponseError::InvalidRecord, e.to_string());
    }
    let error = from_log_error(&e);
    if error.error == ResponseError::KafkaStorageError {
        warn!(partition = %tp, error = %e, "append failed");
    }
    error
}

fn partition_response(
    index: i32,
    result: Result<AppendResult, Failure>,
) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index);
    match result {
        Ok(appended) => response
            .with_error_code(0)
            .with_base_offset(appended.base_offset.0)
            .with_log_append_time_ms(appended.log_append_time_ms.unwrap_or(-1))
            .with_log_start_offset(appended.log_start_offset.0),
        Err(Failure { error, records }) => {
            let (record_errors, log_start_offset) = match records {
                Some((errors, log_start_offset)) => (
                    errors
                        .errors
                        .into_iter()
                        .map(|e| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(e.batch_index)
                                .with_batch_index_error_message(Some(str_bytes(e.message)))
                        })
                        .collect(),
                    log_start_offset,
                ),
                None => (Vec::new(), -1),
            };
            response
                .with_error_code(error.code())
                .with_error_message(error.message_str())
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(log_start_offset)
                .with_record_errors(record_errors)
        }
    }
}
