//! CreateTopics (key 19).

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use keel_wire::kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use keel_wire::ResponseError;
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::ApiError;

pub fn handle(
    broker: &Arc<Broker>,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    // A name listed twice is an error for every copy (Kafka's rule).
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for topic in &request.topics {
        *counts.entry(topic.name.to_string()).or_default() += 1;
    }
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.clone();
            let outcome = if counts[name.as_str()] > 1 {
                Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!(
                        "Create topics request from client contains duplicate topic '{}'",
                        name.as_str()
                    ),
                ))
            } else {
                create(broker, &topic, request.validate_only)
            };
            let result = CreatableTopicResult::default().with_name(name);
            match outcome {
                Ok(created) => {
                    let effective = broker.topic_config(&created);
                    let configs = (version >= 5).then(|| {
                        effective
                            .entries()
                            .map(|(name, value, source)| {
                                CreatableTopicConfigs::default()
                                    .with_name(str_bytes(name))
                                    .with_value(Some(str_bytes(value)))
                                    .with_read_only(false)
                                    .with_config_source(source.code())
                                    .with_is_sensitive(false)
                            })
                            .collect()
                    });
                    result
                        .with_error_code(0)
                        .with_topic_id(created.id)
                        .with_num_partitions(
                            i32::try_from(created.partitions.len()).unwrap_or(i32::MAX),
                        )
                        .with_replication_factor(
                            created
                                .partitions
                                .first()
                                .map_or(1, |p| i16::try_from(p.replicas.len()).unwrap_or(1)),
                        )
                        .with_configs(configs)
                }
                Err(e) => result
                    .with_error_code(e.code())
                    .with_error_message(e.message_str())
                    .with_topic_id(Uuid::nil())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_configs(None),
            }
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

fn create(
    broker: &Broker,
    topic: &CreatableTopic,
    validate_only: bool,
) -> Result<crate::metadata::TopicMeta, ApiError> {
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        let Some(value) = &config.value else {
            return Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!(
                    "Null value not supported for topic config {}",
                    config.name.as_str()
                ),
            ));
        };
        configs.insert(config.name.to_string(), value.to_string());
    }
    if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            ));
        }
        let node = broker.config.node_id;
        for (expected, assignment) in topic.assignments.iter().enumerate() {
            let ids: Vec<i32> = assignment.broker_ids.iter().map(|b| b.0).collect();
            if usize::try_from(assignment.partition_index).ok() != Some(expected) || ids != [node] {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!(
                        "partitions must be numbered from 0 and assigned to the only broker {node}"
                    ),
                ));
            }
        }
        let count = i32::try_from(topic.assignments.len()).unwrap_or(i32::MAX);
        return broker.create_topic(&topic.name, Some(count), Some(1), &configs, validate_only);
    }
    let partitions = (topic.num_partitions != -1).then_some(topic.num_partitions);
    let replication = (topic.replication_factor != -1).then_some(topic.replication_factor);
    broker.create_topic(
        &topic.name,
        partitions,
        replication,
        &configs,
        validate_only,
    )
}
