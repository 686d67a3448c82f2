//! DeleteTopics (key 20): by name (all versions) or by id (v6+).

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use keel_wire::kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use keel_wire::ResponseError;
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::ApiError;

pub fn handle(
    broker: &Arc<Broker>,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let targets: Vec<(Option<String>, Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.to_string()), t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n.to_string()), Uuid::nil()))
            .collect()
    };
    let responses = targets
        .into_iter()
        .map(|(name, id)| {
            let resolved = match (&name, id.is_nil()) {
                (Some(name), _) => Ok(name.clone()),
                (None, false) => broker
                    .topic_by_id(id)
                    .map(|t| t.name)
                    .ok_or_else(|| ApiError::bare(ResponseError::UnknownTopicId)),
                (None, true) => Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    "neither a topic name nor an id",
                )),
            };
            let outcome = resolved.and_then(|n| broker.delete_topic(&n));
            let result = DeletableTopicResult::default();
            match outcome {
                Ok(deleted) => result
                    .with_name(Some(TopicName(str_bytes(deleted.name))))
                    .with_topic_id(deleted.id)
                    .with_error_code(0),
                Err(e) => result
                    .with_name(name.map(|n| TopicName(str_bytes(n))))
                    .with_topic_id(id)
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}
