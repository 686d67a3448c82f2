//! Fetch (key 1): reads below the high watermark, with Kafka's long poll — wait up to
//! `max_wait_ms` until `min_bytes` are available — and size limits: `max_bytes` for the
//! whole response, `partition_max_bytes` per partition, and at least one batch from the first
//! partition that has data so a batch larger than the limits still makes progress (KIP-74).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_log::{LogError, Offset};
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use keel_wire::kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse};
use keel_wire::ResponseError;
use tokio::time::Instant;
use tracing::warn;

use crate::broker::Broker;
use crate::error::from_log_error;
use crate::partition::Partition;

/// The longest a fetch may wait, whatever the client asks (Kafka bounds it by the request
/// timeout on the client side; the broker guards its own resources).
const FETCH_MAX_WAIT_MS_MAX: u64 = 30_000;

pub async fn handle(broker: &Arc<Broker>, request: FetchRequest, version: i16) -> FetchResponse {
    let max_wait_ms = u64::try_from(request.max_wait_ms)
        .unwrap_or(0)
        .min(FETCH_MAX_WAIT_MS_MAX);
    let deadline = Instant::now() + Duration::from_millis(max_wait_ms);
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let mut changes = broker.subscribe_data_changes();
    loop {
        changes.borrow_and_update();
        let round = read_round(broker, &request, version);
        // Kafka answers at once when min_bytes is met (min_bytes = 0 always meets it), on an
        // error, or when the request names no partitions.
        if round.bytes >= min_bytes
            || round.has_error
            || request.topics.is_empty()
            || Instant::now() >= deadline
        {
            return round.response;
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            // Deadline reached (or the broker is shutting down): answer with what is there.
            _ => return read_round(broker, &request, version).response,
        }
    }
}

struct Round {
    response: FetchResponse,
    bytes: usize,
    has_error: bool,
}

fn read_round(broker: &Broker, request: &FetchRequest, version: i16) -> Round {
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
    let responses = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic_name(broker, topic, version);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let data = match &name {
                        Some(name) => read_partition(broker, name, p, &mut budget),
                        None => error_data(p.partition, ResponseError::UnknownTopicId),
                    };
                    has_error |= data.error_code != 0;
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
        broker.topic_by_id(topic.topic_id).map(|t| t.name)
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

/// Kafka's leader-epoch fencing of client requests (KIP-320): an older epoch is fenced, a
/// newer one is not known yet. `-1` skips the check.
pub(super) fn check_leader_epoch(
    partition: &Partition,
    requested: i32,
) -> Result<(), ResponseError> {
    let current = partition.leader_epoch().0;
    if requested < 0 || requested == current {
        Ok(())
    } else if requested < current {
        Err(ResponseError::FencedLeaderEpoch)
    } else {
        Err(ResponseError::UnknownLeaderEpoch)
    }
}

fn read_partition(
    broker: &Broker,
    topic: &str,
    p: &FetchPartition,
    budget: &mut Budget,
) -> PartitionData {
    let Some(partition) = broker.partition(topic, p.partition) else {
        return error_data(p.partition, ResponseError::UnknownTopicOrPartition);
    };
    if let Err(error) = check_leader_epoch(&partition, p.current_leader_epoch) {
        return error_data(p.partition, error);
    }
    let high_watermark = partition.high_watermark();
    let Ok(log) = partition.lock_log() else {
        return error_data(p.partition, ResponseError::UnknownTopicOrPartition);
    };
    let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
    let fetch_offset = Offset(p.fetch_offset);
    let base = PartitionData::default()
        .with_partition_index(p.partition)
        .with_high_watermark(high_watermark.0)
        .with_last_stable_offset(high_watermark.0)
        .with_log_start_offset(log_start.0)
        .with_preferred_read_replica(BrokerId(-1))
        .with_aborted_transactions(None);
    if fetch_offset < log_start || fetch_offset > log_end {
        return base
            .with_error_code(ResponseError::OffsetOutOfRange.code())
            .with_records(Some(Bytes::new()));
    }
    if fetch_offset >= high_watermark {
        return base.with_error_code(0).with_records(Some(Bytes::new()));
    }
    let limit = usize::try_from(p.partition_max_bytes)
        .unwrap_or(0)
        .min(budget.remaining);
    match log.read(
        fetch_offset,
        limit,
        Some(high_watermark),
        budget.min_one_batch,
    ) {
        Ok(data) => {
            let records = data.records;
            if !records.is_empty() {
                budget.min_one_batch = false;
                budget.remaining = budget.remaining.saturating_sub(records.len());
            }
            base.with_error_code(0).with_records(Some(records))
        }
        Err(LogError::OffsetOutOfRange { .. }) => base
            .with_error_code(ResponseError::OffsetOutOfRange.code())
            .with_records(Some(Bytes::new())),
        Err(e) => {
            warn!(partition = %partition.tp, error = %e, "read failed");
            base.with_error_code(from_log_error(&e).code())
                .with_records(Some(Bytes::new()))
        }
    }
}
