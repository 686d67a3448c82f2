//! Produce (key 0): validate, append as leader, answer with base offsets.
//!
//! A single broker is its partitions' whole ISR, so every acks mode is satisfied once the
//! append returns (the high watermark moves with it; see [`crate::partition`]).

use std::sync::Arc;

use keel_log::LogError;
use keel_wire::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use keel_wire::kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use keel_wire::ResponseError;
use tracing::warn;

use crate::broker::Broker;
use crate::error::{from_log_error, ApiError};
use crate::partition::PartitionError;

/// The acks values Kafka accepts.
const ACKS_VALID: [i16; 3] = [-1, 0, 1];

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

pub fn handle(broker: &Arc<Broker>, request: ProduceRequest, version: i16) -> ProduceOutcome {
    let now_ms = broker.clock.now_ms();
    let acks_valid = ACKS_VALID.contains(&request.acks);
    let mut any_appended = false;
    let mut first_error: Option<String> = None;
    let responses = request
        .topic_data
        .into_iter()
        .map(|topic| {
            // v13+ names topics by id.
            let name = if version >= 13 {
                broker.topic_by_id(topic.topic_id).map(|t| t.name)
            } else {
                Some(topic.name.to_string())
            };
            let partition_responses = topic
                .partition_data
                .into_iter()
                .map(|data| {
                    let result = if !acks_valid {
                        Err(ApiError::new(
                            ResponseError::InvalidRequiredAcks,
                            format!("acks must be -1, 0 or 1, got {}", request.acks),
                        ))
                    } else {
                        append(
                            broker,
                            name.as_deref(),
                            data.index,
                            data.records.as_deref(),
                            now_ms,
                        )
                    };
                    any_appended |= result.is_ok();
                    if let (Err(e), None) = (&result, &first_error) {
                        first_error = Some(format!("partition {}: {e}", data.index));
                    }
                    partition_response(data.index, result)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_topic_id(topic.topic_id)
                .with_partition_responses(partition_responses)
        })
        .collect();
    if any_appended {
        broker.notify_data_changed();
    }
    if request.acks == 0 {
        return match first_error {
            Some(reason) => ProduceOutcome::Close(format!("acks=0 produce failed: {reason}")),
            None => ProduceOutcome::Silent,
        };
    }
    ProduceOutcome::Respond(ProduceResponse::default().with_responses(responses))
}

fn append(
    broker: &Broker,
    topic: Option<&str>,
    index: i32,
    records: Option<&[u8]>,
    now_ms: i64,
) -> Result<crate::partition::AppendResult, ApiError> {
    let partition = topic
        .and_then(|t| broker.partition(t, index))
        .ok_or_else(|| ApiError::bare(ResponseError::UnknownTopicOrPartition))?;
    let records = records.filter(|r| !r.is_empty()).ok_or_else(|| {
        ApiError::new(
            ResponseError::InvalidRecord,
            "produce request has no record batches",
        )
    })?;
    refuse_producer_state(records)?;
    partition.append_as_leader(records, now_ms).map_err(|e| {
        let e = match e {
            PartitionError::Deleted => {
                return ApiError::bare(ResponseError::UnknownTopicOrPartition)
            }
            PartitionError::Log(e) => e,
        };
        // Produce v3+ carries only magic-2 batches; Kafka rejects older formats as invalid.
        if let LogError::UnsupportedMagic { .. } = e {
            return ApiError::new(ResponseError::InvalidRecord, e.to_string());
        }
        let error = from_log_error(&e);
        if error.error == ResponseError::KafkaStorageError {
            warn!(partition = %partition.tp, error = %e, "append failed");
        }
        error
    })
}

/// Idempotent and transactional batches carry producer ids and sequences whose checks Keel
/// does not implement yet; appending them as plain batches would silently drop the
/// guarantees the producer asked for.
fn refuse_producer_state(records: &[u8]) -> Result<(), ApiError> {
    for batch in keel_log::batch::BatchIter::new(records) {
        let Ok(batch) = batch else {
            // Malformed batches are reported by the log's own validation.
            return Ok(());
        };
        if batch.header.producer_id >= 0 {
            return Err(ApiError::new(
                ResponseError::InvalidRecord,
                "idempotent and transactional producers are not supported by this broker yet; set enable.idempotence=false",
            ));
        }
    }
    Ok(())
}

fn partition_response(
    index: i32,
    result: Result<crate::partition::AppendResult, ApiError>,
) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index);
    match result {
        Ok(appended) => response
            .with_error_code(0)
            .with_base_offset(appended.base_offset.0)
            .with_log_append_time_ms(appended.log_append_time_ms.unwrap_or(-1))
            .with_log_start_offset(appended.log_start_offset.0),
        Err(e) => response
            .with_error_code(e.code())
            .with_error_message(e.message_str())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1),
    }
}
