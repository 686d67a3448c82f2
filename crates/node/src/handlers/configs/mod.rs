//! DescribeConfigs (32, [`describe`]), AlterConfigs (33) and IncrementalAlterConfigs (44) for
//! topics and the cluster-wide dynamic default (a BROKER resource with an empty name).

mod describe;

pub use describe::describe;

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use keel_wire::ResponseError;

use super::str_bytes;
use keel_wire::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use keel_wire::kafka_protocol::messages::ApiKey;

use crate::broker::{Broker, TopicView};
use crate::error::ApiError;
use crate::topic_config;

/// Kafka's `ConfigResource.Type` codes.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Kafka's authorization of a config resource: `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS)
/// on the topic, or on the cluster for a broker (`ConfigHelper` / `ConfigAdminManager`).
pub(crate) fn refused(
    authz: &super::authz::Authz<'_>,
    operation: keel_controller::acl::AclOperation,
    resource_type: i8,
    name: &str,
) -> Option<ApiError> {
    match resource_type {
        RESOURCE_TOPIC if !authz.topic(operation, name) => Some(ApiError::new(
            ResponseError::TopicAuthorizationFailed,
            "Topic authorization failed.",
        )),
        RESOURCE_BROKER if !authz.cluster(operation) => Some(ApiError::new(
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.",
        )),
        _ => None,
    }
}

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// How long a forwarded change waits to appear in this broker's metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

/// Config names whose values are comma-separated lists (APPEND / SUBTRACT apply).
const LIST_CONFIGS: &[&str] = &[
    "cleanup.policy",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
];

fn dynamic_broker_refused() -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        "dynamic broker configs are not supported yet: set them in the broker's config file",
    )
}

fn unsupported_resource(resource_type: i8) -> ApiError {
    ApiError::new(
        ResponseError::InvalidRequest,
        format!("unsupported config resource type {resource_type}"),
    )
}

pub async fn incremental_alter(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::IncrementalAlterConfigs);
    // Kafka caps the records of one user operation (QuorumController.MAX_RECORDS_PER_USER_OP):
    // counted before any resource is looked at or forwarded, as the controller does.
    let changes: usize = request.resources.iter().map(|r| r.configs.len()).sum();
    let too_large = (changes > keel_controller::MAX_RECORDS_PER_USER_OP).then(|| {
        ApiError::new(
            ResponseError::PolicyViolation,
            format!(
                "{} {changes} config changes; at most {} in one request.",
                keel_controller::EXCESSIVE_BATCH,
                keel_controller::MAX_RECORDS_PER_USER_OP
            ),
        )
    });
    let mut responses = Vec::new();
    for resource in request.resources {
        let denied = refused(
            &authz,
            keel_controller::acl::AclOperation::AlterConfigs,
            resource.resource_type,
            resource.resource_name.as_str(),
        );
        let outcome = match resource.resource_type {
            _ if too_large.is_some() => Err(too_large.clone().expect("checked")),
            _ if denied.is_some() => Err(denied.clone().expect("checked")),
            RESOURCE_TOPIC => {
                let ops: Vec<(String, i8, Option<String>)> = resource
                    .configs
                    .iter()
                    .map(|c| {
                        (
                            c.name.to_string(),
                            c.config_operation,
                            c.value.as_ref().map(|v| v.to_string()),
                        )
                    })
                    .collect();
                match broker.topic(&resource.resource_name) {
                    None => Err(unknown_topic(&resource.resource_name)),
                    Some(topic) => {
                        let effective = broker.topic_config(&topic);
                        match apply_ops(&topic.configs, &effective, &ops) {
                            Ok(new) => {
                                set_topic_configs(broker, &topic, new, request.validate_only).await
                            }
                            Err(e) => Err(e),
                        }
                    }
                }
            }
            // The cluster-wide dynamic default (Kafka: the BROKER resource with an empty
            // name) lives in the controller's metadata.
            RESOURCE_BROKER if resource.resource_name.is_empty() => {
                forward_cluster_configs(broker, resource.clone(), request.validate_only).await
            }
            RESOURCE_BROKER => Err(dynamic_broker_refused()),
            other => Err(unsupported_resource(other)),
        };
        let response = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name);
        responses.push(match outcome {
            Ok(()) => response.with_error_code(0),
            Err(e) => response
                .with_error_code(e.code())
                .with_error_message(e.message_str()),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

fn unknown_topic(name: &str) -> ApiError {
    ApiError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("Topic '{name}' does not exist."),
    )
}

/// Makes `new` the topic's overrides: validated here (Keel's topic configs), then sent to the
/// controller as SET and DELETE operations, which commits them to the metadata log.
async fn set_topic_configs(
    broker: &Broker,
    topic: &TopicView,
    new: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), ApiError> {
    let new = crate::broker::validate_topic_configs(&new, &broker.image(), &broker.config)?;
    let mut ops: Vec<AlterableConfig> = new
        .iter()
        .filter(|(k, v)| topic.configs.get(*k) != Some(*v))
        .map(|(k, v)| {
            AlterableConfig::default()
                .with_name(str_bytes(k.clone()))
                .with_config_operation(OP_SET)
                .with_value(Some(str_bytes(v.clone())))
        })
        .collect();
    ops.extend(
        topic
            .configs
            .keys()
            .filter(|k| !new.contains_key(*k))
            .map(|k| {
                AlterableConfig::default()
                    .with_name(str_bytes(k.clone()))
                    .with_config_operation(OP_DELETE)
                    .with_value(None)
            }),
    );
    if ops.is_empty() {
        return Ok(());
    }
    let resource = AlterConfigsResource::default()
        .with_resource_type(RESOURCE_TOPIC)
        .with_resource_name(str_bytes(topic.name.clone()))
        .with_configs(ops);
    forward_resource(broker, resource, validate_only).await?;
    if !validate_only {
        let id = keel_controller::types::TopicId(topic.id);
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                image.topic(id).is_none_or(|t| t.configs == new)
            })
            .await;
    }
    Ok(())
}

async fn forward_cluster_configs(
    broker: &Broker,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> Result<(), ApiError> {
    // A topic default, by broker synonym or by topic config name, is checked as its topic
    // config (Kafka's DynamicLogConfig validates it as the LogConfig it sets).
    for config in &resource.configs {
        if let Some(value) = &config.value {
            topic_config::validate_cluster_default(&config.name, value)
                .map_err(|message| ApiError::new(ResponseError::InvalidConfig, message))?;
        }
    }
    forward_resource(broker, resource.clone(), validate_only).await?;
    if !validate_only {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                resource.configs.iter().all(|c| {
                    let value = c.value.as_ref().map(|v| v.to_string());
                    if c.name.as_str() == keel_controller::config::ELR_FEATURE {
                        let want = value
                            .as_deref()
                            .is_none_or(|v| v.eq_ignore_ascii_case("true"));
                        image.elr_enabled() == want
                    } else {
                        image.cluster_configs().get(c.name.as_str()) == value.as_ref()
                    }
                })
            })
            .await;
    }
    Ok(())
}

/// One resource's IncrementalAlterConfigs, sent to the controller.
async fn forward_resource(
    broker: &Broker,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> Result<(), ApiError> {
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![resource])
        .with_validate_only(validate_only);
    let response: IncrementalAlterConfigsResponse = broker
        .controller()
        .call(ApiKey::IncrementalAlterConfigs, 0, 1, &request)
        .await
        .map_err(super::controller_unavailable)?;
    let Some(answer) = response.responses.first() else {
        return Err(ApiError::new(
            ResponseError::UnknownServerError,
            "the controller answered no resource",
        ));
    };
    if answer.error_code == 0 {
        return Ok(());
    }
    Err(ApiError {
        error: ResponseError::try_from_code(answer.error_code)
            .unwrap_or(ResponseError::UnknownServerError),
        message: answer.error_message.as_ref().map(|m| m.to_string()),
    })
}

/// The overrides after applying IncrementalAlterConfigs operations to `configs`.
fn apply_ops(
    configs: &BTreeMap<String, String>,
    effective: &crate::topic_config::EffectiveTopicConfig,
    ops: &[(String, i8, Option<String>)],
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut configs = configs.clone();
    for (name, op, value) in ops {
        if topic_config::definition(name).is_none() && name != topic_config::TEST_LOSE_UNFLUSHED_KEY
        {
            return Err(ApiError::new(
                ResponseError::InvalidConfig,
                topic_config::unknown_name(name),
            ));
        }
        let is_list = LIST_CONFIGS.contains(&name.as_str());
        match (*op, value) {
            (OP_SET, Some(v)) => {
                configs.insert(name.clone(), v.clone());
            }
            (OP_DELETE, _) => {
                configs.remove(name);
            }
            (OP_APPEND | OP_SUBTRACT, Some(v)) if is_list => {
                let base = configs
                    .get(name)
                    .cloned()
                    .or_else(|| effective.get(name).map(str::to_string))
                    .unwrap_or_default();
                let mut items: Vec<String> =
                    base.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
                for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if *op == OP_APPEND {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                configs.insert(name.clone(), items.join(","));
            }
            (OP_APPEND | OP_SUBTRACT, Some(_)) => {
                return Err(ApiError::new(
                    ResponseError::InvalidConfig,
                    format!("Config value append/subtract is not allowed for config key {name} which is not a list"),
                ))
            }
            (OP_SET | OP_APPEND | OP_SUBTRACT, None) => {
                return Err(ApiError::new(ResponseError::InvalidConfig, format!("Null value not supported for {name}")))
            }
            (other, _) => {
                return Err(ApiError::new(ResponseError::InvalidRequest, format!("unknown config operation {other}")))
            }
        }
    }
    Ok(configs)
}

pub async fn alter(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::AlterConfigs);
    // Kafka caps the records of one user operation (QuorumController.MAX_RECORDS_PER_USER_OP):
    // counted before any resource is looked at or forwarded, as the controller does.
    let changes: usize = request.resources.iter().map(|r| r.configs.len()).sum();
    let too_large = (changes > keel_controller::MAX_RECORDS_PER_USER_OP).then(|| {
        ApiError::new(
            ResponseError::PolicyViolation,
            format!(
                "{} {changes} config changes; at most {} in one request.",
                keel_controller::EXCESSIVE_BATCH,
                keel_controller::MAX_RECORDS_PER_USER_OP
            ),
        )
    });
    let mut responses = Vec::new();
    for resource in request.resources {
        let denied = refused(
            &authz,
            keel_controller::acl::AclOperation::AlterConfigs,
            resource.resource_type,
            resource.resource_name.as_str(),
        );
        let outcome = match resource.resource_type {
            _ if too_large.is_some() => Err(too_large.clone().expect("checked")),
            _ if denied.is_some() => Err(denied.clone().expect("checked")),
            RESOURCE_TOPIC => {
                let mut configs = BTreeMap::new();
                let mut null = None;
                for c in &resource.configs {
                    match &c.value {
                        Some(v) => {
                            configs.insert(c.name.to_string(), v.to_string());
                        }
                        None => null = Some(c.name.to_string()),
                    }
                }
                match (null, broker.topic(&resource.resource_name)) {
                    (Some(name), _) => Err(ApiError::new(
                        ResponseError::InvalidConfig,
                        format!("Null value not supported for {name}"),
                    )),
                    (None, None) => Err(unknown_topic(&resource.resource_name)),
                    // AlterConfigs replaces every override of the topic.
                    (None, Some(topic)) => {
                        set_topic_configs(broker, &topic, configs, request.validate_only).await
                    }
                }
            }
            RESOURCE_BROKER => Err(dynamic_broker_refused()),
            other => Err(unsupported_resource(other)),
        };
        let response = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name);
        responses.push(match outcome {
            Ok(()) => response.with_error_code(0),
            Err(e) => response
                .with_error_code(e.code())
                .with_error_message(e.message_str()),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}
