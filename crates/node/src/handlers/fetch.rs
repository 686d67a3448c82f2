//! Fetch (key 1), from consumers and from follower replicas.
//!
//! Consumers read from the leader, below the high watermark. Followers (Fetch v15+
//! `ReplicaState`, or `ReplicaId` before) are validated by the leader's replication core once
//! per request — leader epoch fencing, their broker epoch (KIP-903), divergence (answered with
//! `DivergingEpoch`), the offset range — and then read up to the log end offset; the log start
//! offset each sends is what the low watermark of DeleteRecords is made of. A fetch below the
//! log start offset is `OFFSET_OUT_OF_RANGE` with the log start offset in the answer (consumers
//! reset by `auto.offset.reset`, followers start over there).
//!
//! Both wait up to `max_wait_ms` until `min_bytes` are available (Kafka's long poll), within
//! `max_bytes` for the whole response and `partition_max_bytes` per partition, always returning
//! at least one batch from the first partition that has data (KIP-74). A partition this broker
//! does not lead is answered `NOT_LEADER_OR_FOLLOWER` with the current leader (v12+) and its
//! endpoint (v16+), so clients move on at once.
//!
//! A consumer fetching with `isolation_level = 1` (read_committed, v4+) reads only below the
//! last stable offset — the high watermark, or the first offset of the oldest transaction not
//! yet decided and replicated if that is lower — and gets the aborted transactions overlapping
//! what it read (`aborted_transactions`: producer id and first offset, from the log's
//! aborted-transaction index), so it can drop their records. Every answer carries the last
//! stable offset.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_log::{LogError, Offset};
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData,
};
use keel_wire::kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use keel_wire::ResponseError;
use tokio::time::Instant;
use tracing::warn;

use super::str_bytes;
use crate::broker::{Broker, FollowerFetchAnswer, FollowerFetchInput};
use crate::error::from_log_error;
use crate::partition::{Partition, PartitionError};

/// The longest a fetch may wait, whatever the client asks (Kafka bounds it by the request
/// timeout on the client side; the broker guards its own resources).
const FETCH_MAX_WAIT_MS_MAX: u64 = 30_000;

/// Who is fetching.
#[derive(Debug, Clone, Copy)]
enum Fetcher {
    Consumer,
    Follower { broker: i32, broker_epoch: i64 },
}

/// What one partition of the request gets, decided once per request.
#[derive(Debug, Clone)]
enum Plan {
    /// Read records from the fetch offset.
    Read,
    /// Answer this without records.
    Fixed(Box<PartitionData>),
}

/// Answers Fetch; leaders named in NOT_LEADER answers (v16+) are at their endpoints of
/// `listener`, the one the request came in on.
pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: FetchRequest,
    version: i16,
    listener: &str,
) -> FetchResponse {
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::Fetch,
    );
    let fetcher = if version >= 15 && request.replica_state.replica_id.0 >= 0 {
        Fetcher::Follower {
            broker: request.replica_state.replica_id.0,
            broker_epoch: request.replica_state.replica_epoch,
        }
    } else if version < 15 && request.replica_id.0 >= 0 {
        Fetcher::Follower {
            broker: request.replica_id.0,
            broker_epoch: -1,
        }
    } else {
        Fetcher::Consumer
    };
    let max_wait_ms = u64::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_MAX_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(max_wait_ms);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let mut changes = broker.subscribe_data_changes();
    changes.borrow_and_update();
    let plans = plan(broker, &request, version, fetcher, &authz);
    let mut leaders = BTreeSet::new();
    loop {
        let round = read_round(broker, &request, &plans, fetcher, &mut leaders);
        // Kafka answers at once when min_bytes is met (min_bytes = 0 always meets it), on an
        // error, or when the request names no partitions.
        let done = round.bytes >= min_bytes
            || round.has_error
            || request.topics.is_empty()
            || Instant::now() >= deadline;
        if done {
            count_sent(broker, fetcher, &round.response);
            return finish(broker, round.response, &leaders, version, listener);
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {
                changes.borrow_and_update();
                continue;
            }
            // Deadline reached (or the broker is shutting down): answer with what is there.
            _ => {
                let round = read_round(broker, &request, &plans, fetcher, &mut leaders);
                count_sent(broker, fetcher, &round.response);
                return finish(broker, round.response, &leaders, version, listener);
            }
        }
    }
}

/// Whether `request` is a consumer's (not a follower's, which client quotas never throttle).
pub(crate) fn is_consumer(request: &FetchRequest, version: i16) -> bool {
    if version >= 15 {
        request.replica_state.replica_id.0 < 0
    } else {
        request.replica_id.0 < 0
    }
}

/// The record bytes an answer carries (what `consumer_byte_rate` counts).
pub(crate) fn record_bytes(response: &FetchResponse) -> usize {
    response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_ref().map(|r| r.len()))
        .sum()
}

/// The answer to a consumer over its quota: nothing, and how long to wait (Kafka's
/// `FetchContext.getThrottledResponse`); it fetches the same offsets again after the throttle.
pub(crate) fn throttled(response: FetchResponse, throttle_ms: i32) -> FetchResponse {
    FetchResponse::default()
        .with_error_code(0)
        .with_session_id(response.session_id)
        .with_throttle_time_ms(throttle_ms)
}

/// Counts what an answer sends: bytes and records to a consumer, bytes to a follower.
fn count_sent(broker: &Broker, fetcher: Fetcher, response: &FetchResponse) {
    let metrics = &broker.metrics;
    let sent = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.records.as_deref());
    for records in sent {
        match fetcher {
            Fetcher::Consumer => {
                let (count, bytes) = crate::metrics::batch_totals(records);
                metrics.records_out.inc_by(count);
                metrics.bytes_out.inc_by(bytes);
            }
            Fetcher::Follower { .. } => {
                metrics.replication_bytes_out.inc_by(records.len() as u64);
            }
        }
    }
}

/// v16+: the endpoints of the leaders named in `current_leader` fields.
fn finish(
    broker: &Broker,
    response: FetchResponse,
    leaders: &BTreeSet<i32>,
    version: i16,
    listener: &str,
) -> FetchResponse {
    if version < 16 || leaders.is_empty() {
        return response;
    }
    let endpoints = leaders
        .iter()
        .filter_map(|id| {
            broker
                .broker_endpoint_on(*id, listener)
                .map(|(host, port)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(*id))
                        .with_host(str_bytes(host))
                        .with_port(i32::from(port))
                        .with_rack(None)
                })
        })
        .collect();
    response.with_node_endpoints(endpoints)
}

/// One topic of the request: its name (resolved once, by id from v13; `None` if unknown) and
/// each partition's plan.
struct TopicPlan {
    name: Option<String>,
    partitions: Vec<Plan>,
}

/// Decides each partition once: unknown, not led here, fenced — or, for a follower, the
/// replication core's answer (which must not be asked twice for one request).
fn plan(
    broker: &Broker,
    request: &FetchRequest,
    version: i16,
    fetcher: Fetcher,
    authz: &super::authz::Authz<'_>,
) -> Vec<TopicPlan> {
    use keel_controller::acl::AclOperation;
    // Kafka: a follower's fetch needs CLUSTER_ACTION on the cluster (else every partition is
    // TOPIC_AUTHORIZATION_FAILED); a consumer's needs READ on each topic.
    let follower_allowed =
        matches!(fetcher, Fetcher::Consumer) || authz.cluster(AclOperation::ClusterAction);
    request
        .topics
        .iter()
        .map(|topic| {
            let name = topic_name(broker, topic, version);
            let readable = follower_allowed
                && name.as_deref().is_none_or(|n| {
                    !matches!(fetcher, Fetcher::Consumer) || authz.topic(AclOperation::Read, n)
                });
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let Some(name) = &name else {
                        return fixed(error_data(p.partition, ResponseError::UnknownTopicId));
                    };
                    if !readable {
                        return fixed(error_data(
                            p.partition,
                            ResponseError::TopicAuthorizationFailed,
                        ));
                    }
                    let Some(partition) = broker.partition(name, p.partition) else {
                        return fixed(not_hosted(broker, name, p.partition));
                    };
                    match fetcher {
                        Fetcher::Consumer => {
                            match check_leader_epoch(&partition, p.current_leader_epoch) {
                                Ok(()) => Plan::Read,
                                Err(ResponseError::NotLeaderOrFollower) => {
                                    fixed(not_hosted(broker, name, p.partition))
                                }
                                Err(error) => fixed(error_data(p.partition, error)),
                            }
                        }
                        Fetcher::Follower {
                            broker: follower,
                            broker_epoch,
                        } => {
                            let input = FollowerFetchInput {
                                broker: follower,
                                broker_epoch,
                                current_leader_epoch: p.current_leader_epoch,
                                fetch_offset: p.fetch_offset,
                                last_fetched_epoch: p.last_fetched_epoch,
                                log_start_offset: p.log_start_offset,
                            };
                            match broker.serve_follower_fetch(&partition, input) {
                                FollowerFetchAnswer::Records => Plan::Read,
                                FollowerFetchAnswer::Diverging { epoch, end_offset } => {
                                    let (log_start, high_watermark, _) =
                                        partition.offsets().unwrap_or_default();
                                    fixed(
                                        base(p.partition, high_watermark, log_start)
                                            .with_error_code(0)
                                            .with_diverging_epoch(
                                                EpochEndOffset::default()
                                                    .with_epoch(epoch)
                                                    .with_end_offset(end_offset),
                                            )
                                            .with_records(Some(Bytes::new())),
                                    )
                                }
                                FollowerFetchAnswer::OutOfRange => {
                                    let (log_start, high_watermark, _) =
                                        partition.offsets().unwrap_or_default();
                                    fixed(
                                        base(p.partition, high_watermark, log_start)
                                            .with_error_code(ResponseError::OffsetOutOfRange.code())
                                            .with_records(Some(Bytes::new())),
                                    )
                                }
                                FollowerFetchAnswer::Error(code) => {
                                    let error = ResponseError::try_from_code(code.code())
                                        .unwrap_or(ResponseError::UnknownServerError);
                                    if error == ResponseError::NotLeaderOrFollower {
                                        fixed(not_hosted(broker, name, p.partition))
                                    } else {
                                        fixed(error_data(p.partition, error))
                                    }
                                }
                            }
                        }
                    }
                })
                .collect();
            TopicPlan { name, partitions }
        })
        .collect()
}

fn fixed(data: PartitionData) -> Plan {
    Plan::Fixed(Box::new(data))
}

struct Round {
    response: FetchResponse,
    bytes: usize,
    has_error: bool,
}

fn read_round(
    broker: &Arc<Broker>,
    request: &FetchRequest,
    plans: &[TopicPlan],
    fetcher: Fetcher,
    leaders: &mut BTreeSet<i32>,
) -> Round {
    // The broker's fetch.max.bytes bounds every response, whatever the client asks.
    let max_bytes = usize::try_from(request.max_bytes)
        .unwrap_or(0)
        .min(broker.config.fetch_max_bytes);
    let mut budget = Budget {
        remaining: max_bytes,
        min_one_batch: true,
    };
    let mut total = 0;
    let mut has_error = false;
    // Only consumers choose an isolation level (Fetch v4+; older requests decode it as 0).
    let read_committed = matches!(fetcher, Fetcher::Consumer) && request.isolation_level == 1;
    let responses = request
        .topics
        .iter()
        .zip(plans)
        .map(|(topic, plan)| {
            let name = &plan.name;
            let partitions = topic
                .partitions
                .iter()
                .zip(&plan.partitions)
                .map(|(p, plan)| {
                    let data = match plan {
                        Plan::Fixed(data) => (**data).clone(),
                        Plan::Read => {
                            let isolation = Isolation {
                                fetcher,
                                read_committed,
                            };
                            read_partition(broker, name.as_deref(), p, isolation, &mut budget)
                        }
                    };
                    // A diverging answer must reach the follower at once, like an error.
                    has_error |= data.error_code != 0 || data.diverging_epoch.epoch >= 0;
                    if data.current_leader.leader_id.0 >= 0 {
                        leaders.insert(data.current_leader.leader_id.0);
                    }
                    total += data.records.as_ref().map_or(0, Bytes::len);
                    data
                })
                .collect();
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    Round {
        response: FetchResponse::default()
            .with_error_code(0)
            .with_session_id(0)
            .with_responses(responses),
        bytes: total,
        has_error,
    }
}

/// What is left of the response's size limit.
struct Budget {
    remaining: usize,
    /// True until some partition returned data (KIP-74: the first one may exceed limits).
    min_one_batch: bool,
}

fn topic_name(broker: &Broker, topic: &FetchTopic, version: i16) -> Option<String> {
    if version >= 13 {
        broker.topic_name(topic.topic_id)
    } else {
        Some(topic.topic.to_string())
    }
}

fn error_data(index: i32, error: ResponseError) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_error_code(error.code())
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1))
        .with_records(Some(Bytes::new()))
}

/// `NOT_LEADER_OR_FOLLOWER` with the leader metadata names (or `UNKNOWN_TOPIC_OR_PARTITION`
/// when the partition does not exist).
///
/// One lookup in the image per partition (a request may name any number of them).
fn not_hosted(broker: &Broker, topic: &str, index: i32) -> PartitionData {
    let image = broker.image();
    let p = image.topic_id(topic).and_then(|id| {
        let index = u32::try_from(index).ok()?;
        image.partition(keel_controller::types::TopicPartition::new(id, index))
    });
    let Some(p) = p else {
        return error_data(index, ResponseError::UnknownTopicOrPartition);
    };
    error_data(index, ResponseError::NotLeaderOrFollower).with_current_leader(
        LeaderIdAndEpoch::default()
            .with_leader_id(BrokerId(p.leader.map_or(-1, |b| b.0)))
            .with_leader_epoch(p.leader_epoch.0),
    )
}

/// Client requests go to the leader (`NOT_LEADER_OR_FOLLOWER` otherwise), with Kafka's
/// leader-epoch fencing (KIP-320): an older epoch is fenced, a newer one is not known yet.
/// `-1` skips the epoch check.
pub(super) fn check_leader_epoch(
    partition: &Partition,
    requested: i32,
) -> Result<(), ResponseError> {
    if !partition.is_leader() {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    let current = partition.leader_epoch().0;
    if requested < 0 || requested == current {
        Ok(())
    } else if requested < current {
        Err(ResponseError::FencedLeaderEpoch)
    } else {
        Err(ResponseError::UnknownLeaderEpoch)
    }
}

fn base(index: i32, high_watermark: Offset, log_start: Offset) -> PartitionData {
    PartitionData::default()
        .with_partition_index(index)
        .with_high_watermark(high_watermark.0)
        .with_last_stable_offset(high_watermark.0)
        .with_log_start_offset(log_start.0)
        .with_preferred_read_replica(BrokerId(-1))
        .with_aborted_transactions(None)
}

/// Who reads, and whether only committed transactions.
#[derive(Clone, Copy)]
struct Isolation {
    fetcher: Fetcher,
    read_committed: bool,
}

fn read_partition(
    broker: &Arc<Broker>,
    name: Option<&str>,
    p: &FetchPartition,
    isolation: Isolation,
    budget: &mut Budget,
) -> PartitionData {
    let Isolation {
        fetcher,
        read_committed,
    } = isolation;
    let Some(partition) = name.and_then(|n| broker.partition(n, p.partition)) else {
        return error_data(p.partition, ResponseError::UnknownTopicOrPartition);
    };
    // A new leader whose high watermark has not reached the start of its epoch would report
    // a high watermark below one its predecessor already exposed: consumers retry instead
    // (as ListOffsets answers then), so the high watermark they see never moves backward.
    if matches!(fetcher, Fetcher::Consumer) && partition.high_watermark_lags_leader_epoch() {
        return error_data(p.partition, ResponseError::OffsetNotAvailable);
    }
    let high_watermark = partition.high_watermark();
    let log = match partition.lock_log() {
        Ok(log) => log,
        Err(PartitionError::Offline) => {
            return error_data(p.partition, ResponseError::KafkaStorageError)
        }
        Err(_) => return error_data(p.partition, ResponseError::UnknownTopicOrPartition),
    };
    let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
    let fetch_offset = Offset(p.fetch_offset);
    let last_stable = log.last_stable_offset(high_watermark);
    let base = base(p.partition, high_watermark, log_start)
        .with_last_stable_offset(last_stable.0)
        .with_aborted_transactions(read_committed.then(Vec::new));
    if fetch_offset < log_start || fetch_offset > log_end {
        return base
            .with_error_code(ResponseError::OffsetOutOfRange.code())
            .with_records(Some(Bytes::new()));
    }
    // Consumers see only what the high watermark covers (read_committed ones: the last stable
    // offset); followers read to the log end.
    let max_offset = match fetcher {
        Fetcher::Consumer if read_committed => Some(last_stable),
        Fetcher::Consumer => Some(high_watermark),
        Fetcher::Follower { .. } => None,
    };
    if fetch_offset >= max_offset.unwrap_or(log_end) {
        return base.with_error_code(0).with_records(Some(Bytes::new()));
    }
    let limit = usize::try_from(p.partition_max_bytes)
        .unwrap_or(0)
        .min(budget.remaining);
    // What a follower reads is validated (it would copy damage to another replica); a
    // consumer checks CRCs itself, and the scrubber covers what consumers read.
    let read = match fetcher {
        Fetcher::Consumer => log.read(fetch_offset, limit, max_offset, budget.min_one_batch),
        Fetcher::Follower { .. } => {
            log.read_verified(fetch_offset, limit, max_offset, budget.min_one_batch)
        }
    };
    let aborted = match (&read, read_committed) {
        (Ok(data), true) => data.last_offset.map(|last| {
            log.aborted_transactions(fetch_offset, last.next())
                .into_iter()
                .map(|a| {
                    AbortedTransaction::default()
                        .with_producer_id(a.producer_id.into())
                        .with_first_offset(a.first_offset.0)
                })
                .collect::<Vec<_>>()
        }),
        _ => None,
    };
    drop(log);
    match read {
        Ok(data) => {
            let records = data.records;
            if !records.is_empty() {
                budget.min_one_batch = false;
                budget.remaining = budget.remaining.saturating_sub(records.len());
            }
            let base = match aborted {
                Some(aborted) => base.with_aborted_transactions(Some(aborted)),
                None => base,
            };
            base.with_error_code(0).with_records(Some(records))
        }
        Err(LogError::OffsetOutOfRange { .. }) => base
            .with_error_code(ResponseError::OffsetOutOfRange.code())
            .with_records(Some(Bytes::new())),
        Err(LogError::Damaged(damage)) => {
            // Setting it aside copies the damaged segment: file IO, off this request's task.
            // A second finding meanwhile is a no-op (the log changed under it).
            let (broker, partition) = (broker.clone(), partition.clone());
            tokio::spawn(async move {
                let _ = crate::blocking::run_blocking(move || {
                    broker.on_damage(&partition, &damage, "follower_read")
                })
                .await;
            });
            base.with_error_code(ResponseError::KafkaStorageError.code())
                .with_records(Some(Bytes::new()))
        }
        Err(e) => {
            if !broker.check_storage_error(&partition, &e) {
                warn!(partition = %partition.tp, error = %e, "read failed");
            }
            base.with_error_code(from_log_error(&e).code())
                .with_records(Some(Bytes::new()))
        }
    }
}
