//! DeleteRecords (key 21, v0–2; issue 20): delete every record below an offset of a partition,
//! as Kafka's `KafkaApis.handleDeleteRecordsRequest` and `ReplicaManager.deleteRecords` do.
//!
//! Each partition goes to its leader's checks (`broker::delete_records`: unknown, internal
//! topic, offline, not the leader, `cleanup.policy` without `delete`, an offset that is neither
//! -1 — the high watermark — nor within [0, high watermark]), the log start offset moves and the
//! segments wholly below it go. Before the answer:
//!
//! 1. the new log start offset is written to `log-start-offset-checkpoint` and fsynced (writes
//!    of concurrent requests coalesced), so a `kill -9` right after the answer keeps it — Kafka
//!    only checkpoints it every minute;
//! 2. the answer waits, as Kafka's `DelayedDeleteRecords`, until the partition's low watermark
//!    (the smallest log start offset over the leader and every follower on an unfenced broker)
//!    reaches the offset — answered with it — or `timeout_ms` passes (`REQUEST_TIMED_OUT`, with
//!    the low watermark of the request's arrival, as Kafka answers). The wait is bounded by
//!    [`DELETE_RECORDS_TIMEOUT_MS_MAX`] whatever the client asks.
//!
//! A partition named twice is answered once, with the last offset asked for (Kafka's request
//! handling keys partitions in a map).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_replication::ErrorCode;
use keel_wire::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use keel_wire::kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse, TopicName};
use keel_wire::ResponseError;
use tracing::warn;

use crate::broker::{Broker, PendingDelete};

/// The longest a DeleteRecords waits for the followers, whatever it asks (Kafka bounds the
/// client's wait by its request timeout; the broker guards its own resources).
pub const DELETE_RECORDS_TIMEOUT_MS_MAX: u64 = 300_000;

/// Extra time past the request's timeout before a waiter the leader core never answered (it
/// cannot happen: every path answers) is given up as `REQUEST_TIMED_OUT`.
const WAITER_SLACK_MS: u64 = 5_000;

/// Kafka's `DeleteRecordsResponse.INVALID_LOW_WATERMARK`.
const INVALID_LOW_WATERMARK: i64 = -1;

/// One partition's outcome so far.
enum Pending {
    Refused(ResponseError),
    Waiting(PendingDelete),
}

pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DeleteRecords,
    );
    let timeout_ms = u64::try_from(request.timeout_ms)
        .unwrap_or(0)
        .min(DELETE_RECORDS_TIMEOUT_MS_MAX);
    // Topics in the order first named; each partition once, the last offset asked for.
    let mut order: Vec<TopicName> = Vec::new();
    let mut asked: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut partitions_of: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for topic in &request.topics {
        let name = topic.name.to_string();
        if !partitions_of.contains_key(&name) {
            order.push(topic.name.clone());
        }
        let listed = partitions_of.entry(name.clone()).or_default();
        for p in &topic.partitions {
            if asked
                .insert((name.clone(), p.partition_index), p.offset)
                .is_none()
            {
                listed.push(p.partition_index);
            }
        }
    }
    // Kafka: DELETE on the topic, before anything else is looked at.
    let deletable: BTreeMap<&String, bool> = partitions_of
        .keys()
        .map(|t| {
            (
                t,
                authz.topic(keel_controller::acl::AclOperation::Delete, t),
            )
        })
        .collect();
    let mut refused: BTreeMap<(String, i32), (i16, i64)> = BTreeMap::new();
    let mut pending: BTreeMap<(String, i32), Pending> = BTreeMap::new();
    for ((topic, index), offset) in &asked {
        if !deletable[topic] {
            let code = ResponseError::TopicAuthorizationFailed.code();
            refused.insert((topic.clone(), *index), (code, INVALID_LOW_WATERMARK));
            continue;
        }
        let started = broker
            .start_delete_records(topic, *index, *offset, timeout_ms)
            .map_or_else(Pending::Refused, Pending::Waiting);
        pending.insert((topic.clone(), *index), started);
    }
    // (error code, low watermark) per partition.
    let mut results: BTreeMap<(String, i32), (i16, i64)> = refused;
    for (key, outcome) in pending {
        let result = match outcome {
            Pending::Refused(e) => (e.code(), INVALID_LOW_WATERMARK),
            Pending::Waiting(waiting) => answer(broker, waiting, timeout_ms).await,
        };
        results.insert(key, result);
    }
    let topics = order
        .into_iter()
        .map(|name| {
            let key = name.to_string();
            let partitions = partitions_of[&key]
                .iter()
                .map(|index| {
                    let (code, low_watermark) = results[&(key.clone(), *index)];
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(*index)
                        .with_low_watermark(low_watermark)
                        .with_error_code(code)
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default()
        .with_throttle_time_ms(0)
        .with_topics(topics)
}

/// Makes the new log start offset durable, then waits for the low watermark: (error code, low
/// watermark) — the low watermark reached, or for `REQUEST_TIMED_OUT` the one the request found
/// when it arrived (Kafka's DelayedDeleteRecords answers its initial status), -1 otherwise.
async fn answer(broker: &Arc<Broker>, waiting: PendingDelete, timeout_ms: u64) -> (i16, i64) {
    if let Some(change) = waiting.durable {
        let b = broker.clone();
        let persisted = crate::blocking::run_blocking(move || b.persist_log_start(change)).await;
        let failed = match persisted {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(reason) = failed {
            warn!(error = %reason, "cannot checkpoint the log start offset: DeleteRecords fails");
            return (
                ResponseError::KafkaStorageError.code(),
                INVALID_LOW_WATERMARK,
            );
        }
    }
    let limit = Duration::from_millis(timeout_ms.saturating_add(WAITER_SLACK_MS));
    let result = match tokio::time::timeout(limit, waiting.waiter).await {
        Ok(Ok(result)) => result,
        // The partition went away without answering: as Kafka does for a partition no longer
        // led here.
        Ok(Err(_)) => Err(ErrorCode::NotLeaderOrFollower),
        Err(_) => Err(ErrorCode::RequestTimedOut),
    };
    match result {
        Ok(low_watermark) => (0, low_watermark.0),
        Err(ErrorCode::RequestTimedOut) => (
            ErrorCode::RequestTimedOut.code(),
            waiting
                .initial_low_watermark
                .map_or(INVALID_LOW_WATERMARK, |lw| lw.0),
        ),
        Err(code) => (code.code(), INVALID_LOW_WATERMARK),
    }
}
