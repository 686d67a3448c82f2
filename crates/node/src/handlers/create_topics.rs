//! CreateTopics (key 19): forwarded to the controller, which validates, assigns replicas and
//! commits the topic to the metadata log (as a KRaft broker forwards it). Topic configs are
//! checked here first with Keel's own definitions (`INVALID_CONFIG` names the value and why).
//! The broker answers once the created topics are in its own metadata, so a client that
//! creates a topic and then asks this broker for it finds it. v5+ answers carry the topic's
//! effective configs.

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_controller::types::TopicId;
use keel_wire::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName,
};

use super::str_bytes;
use crate::broker::{effective_config, validate_topic_configs, Broker};
use crate::error::ApiError;

/// How long the broker waits for created topics to reach its metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    mut request: CreateTopicsRequest,
    version: i16,
    client_id: &str,
) -> CreateTopicsResponse {
    use keel_controller::acl::{AclOperation, ResourceType};
    let authz = super::authz::Authz::new(broker, session, ApiKey::CreateTopics);
    // Authorization, then Keel's config checks; a topic that fails them is answered here, not
    // forwarded.
    let mut refused = unauthorized(&authz, &request);
    let image = broker.image();
    for topic in &request.topics {
        if refused.contains_key(topic.name.as_str()) {
            continue;
        }
        let mut configs = BTreeMap::new();
        for config in &topic.configs {
            if let Some(value) = &config.value {
                configs.insert(config.name.to_string(), value.to_string());
            }
        }
        if let Err(e) = validate_topic_configs(&configs, &image, &broker.config) {
            refused.insert(topic.name.to_string(), e);
        }
    }
    let requested = std::mem::take(&mut request.topics);
    request.topics = requested
        .iter()
        .filter(|t| !refused.contains_key(t.name.as_str()))
        .cloned()
        .collect();
    let forwarded: CreateTopicsResponse = if request.topics.is_empty() {
        CreateTopicsResponse::default()
    } else {
        match broker
            .controller()
            .forward_enveloped(
                ApiKey::CreateTopics,
                version,
                &request,
                super::forwarded_for(session, client_id),
            )
            .await
        {
            Ok(response) => response,
            Err(e) => {
                let e = super::controller_unavailable(e);
                let topics = request
                    .topics
                    .iter()
                    .map(|t| failed(t.name.clone(), &e))
                    .collect();
                return CreateTopicsResponse::default().with_topics(topics);
            }
        }
    };
    // By name: responses before v7 carry no topic id.
    let created: Vec<String> = forwarded
        .topics
        .iter()
        .filter(|t| t.error_code == 0 && !request.validate_only)
        .map(|t| t.name.to_string())
        .collect();
    if !created.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                created.iter().all(|name| image.topic_id(name).is_some())
            })
            .await;
    }
    let image = broker.image();
    // By name, so a request of many topics costs no quadratic search.
    let requested_by_name: BTreeMap<&str, &_> =
        requested.iter().map(|r| (r.name.as_str(), r)).collect();
    let mut results: Vec<CreatableTopicResult> = forwarded
        .topics
        .into_iter()
        .map(|mut t| {
            // The configs of the answer need DESCRIBE_CONFIGS on the topic (asked quietly).
            let described = authz.allows_quietly(
                AclOperation::DescribeConfigs,
                ResourceType::Topic,
                t.name.as_str(),
            );
            if t.error_code == 0 && version >= 5 && !described {
                t.topic_config_error_code =
                    keel_wire::ResponseError::TopicAuthorizationFailed.code();
                t.configs = None;
            } else if t.error_code == 0 && version >= 5 {
                let configs = image
                    .topic(TopicId(t.topic_id))
                    .map(|topic| topic.configs.clone())
                    .unwrap_or_else(|| {
                        requested_by_name
                            .get(t.name.as_str())
                            .map(|r| {
                                r.configs
                                    .iter()
                                    .filter_map(|c| {
                                        c.value
                                            .as_ref()
                                            .map(|v| (c.name.to_string(), v.to_string()))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default()
                    });
                let effective = effective_config(&image, &configs, &broker.config);
                t.configs = Some(
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
                        .collect(),
                );
            }
            t
        })
        .collect();
    // Answer in the request's order, refused topics included (names are unique by now or
    // refused as duplicates, which the controller answers once per copy).
    let mut by_name: BTreeMap<String, Vec<CreatableTopicResult>> = BTreeMap::new();
    for r in results.drain(..).rev() {
        by_name.entry(r.name.to_string()).or_default().push(r);
    }
    let mut topics: Vec<CreatableTopicResult> = requested
        .iter()
        .filter_map(|t| match refused.get(t.name.as_str()) {
            Some(e) => Some(failed(t.name.clone(), e)),
            None => by_name.get_mut(t.name.as_str()).and_then(Vec::pop),
        })
        .collect();
    topics.extend(by_name.into_values().flatten());
    CreateTopicsResponse::default()
        .with_topics(topics)
        .with_throttle_time_ms(forwarded.throttle_time_ms)
}

/// Kafka's authorization of CreateTopics: CREATE on the cluster (asked quietly) or on each
/// topic. The refused topics, by name, with TOPIC_AUTHORIZATION_FAILED.
pub(crate) fn unauthorized(
    authz: &super::authz::Authz<'_>,
    request: &CreateTopicsRequest,
) -> BTreeMap<String, ApiError> {
    use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};
    if authz.allows_quietly(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME) {
        return BTreeMap::new();
    }
    request
        .topics
        .iter()
        .filter(|t| !authz.topic(AclOperation::Create, t.name.as_str()))
        .map(|t| {
            let e = ApiError::new(
                keel_wire::ResponseError::TopicAuthorizationFailed,
                "Authorization failed.",
            );
            (t.name.to_string(), e)
        })
        .collect()
}

/// A topic's result when it was not created.
pub(crate) fn failed(name: TopicName, e: &ApiError) -> CreatableTopicResult {
    CreatableTopicResult::default()
        .with_name(name)
        .with_error_code(e.code())
        .with_error_message(e.message_str())
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_configs(None)
}
