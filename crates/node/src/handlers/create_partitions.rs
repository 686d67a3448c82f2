//! CreatePartitions (key 37).

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use keel_wire::kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use keel_wire::ResponseError;

use crate::broker::Broker;
use crate::error::ApiError;

pub fn handle(broker: &Arc<Broker>, request: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let node = broker.config.node_id;
    let results = request
        .topics
        .into_iter()
        .map(|topic| {
            let assignments_ok = topic.assignments.as_ref().is_none_or(|list| {
                list.iter()
                    .all(|a| a.broker_ids.len() == 1 && a.broker_ids[0].0 == node)
            });
            let outcome = if assignments_ok {
                broker.create_partitions(&topic.name, topic.count, request.validate_only)
            } else {
                Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!("new partitions can only be assigned to the only broker {node}"),
                ))
            };
            let result = CreatePartitionsTopicResult::default().with_name(topic.name);
            match outcome {
                Ok(()) => result.with_error_code(0),
                Err(e) => result
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
