//! DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics, and
//! DescribeConfigs for this broker's static configuration.

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use keel_wire::kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::ApiError;
use crate::topic_config::{self, Kind, Source};

/// Kafka's `ConfigResource.Type` codes.
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;

/// Kafka's `ConfigEntry.ConfigType` codes.
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;

/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// Config names whose values are comma-separated lists (APPEND / SUBTRACT apply).
const LIST_CONFIGS: &[&str] = &["cleanup.policy"];

pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .iter()
        .cloned()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let keys: Option<Vec<String>> = resource
                .configuration_keys
                .map(|k| k.iter().map(|s| s.to_string()).collect());
            let wanted = |name: &str| keys.as_ref().is_none_or(|k| k.iter().any(|w| w == name));
            let configs = match resource.resource_type {
                RESOURCE_TOPIC => {
                    describe_topic(broker, &resource.resource_name, &wanted, &request, version)
                }
                RESOURCE_BROKER => describe_broker(broker, &resource.resource_name, &wanted),
                other => Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("unsupported config resource type {other}"),
                )),
            };
            match configs {
                Ok(configs) => result.with_error_code(0).with_configs(configs),
                Err(e) => result
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn config_type(kind: Kind) -> i8 {
    match kind {
        Kind::Long { .. } => TYPE_LONG,
        Kind::Int { .. } => TYPE_INT,
        Kind::Boolean => TYPE_BOOLEAN,
        Kind::OneOf(_) => TYPE_STRING,
    }
}

fn describe_topic(
    broker: &Broker,
    name: &StrBytes,
    wanted: &dyn Fn(&str) -> bool,
    request: &DescribeConfigsRequest,
    version: i16,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    let topic = broker.topic(name).ok_or_else(|| {
        ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("Topic '{}' does not exist.", name.as_str()),
        )
    })?;
    let effective = broker.topic_config(&topic);
    Ok(effective
        .entries()
        .filter(|(config_name, _, _)| wanted(config_name))
        .map(|(config_name, value, source)| {
            let def = topic_config::definition(config_name).expect("entries come from definitions");
            let mut synonyms = Vec::new();
            if request.include_synonyms {
                if let Some(v) = topic.configs.get(config_name) {
                    synonyms.push(synonym(config_name, v, Source::Topic));
                }
                for (broker_key, _) in def.broker_synonyms {
                    if let Some(v) = broker.config.raw.get(*broker_key) {
                        synonyms.push(synonym(broker_key, v, Source::StaticBroker));
                    }
                }
                if let Some(default) = def.default {
                    let key = def.broker_synonyms.first().map_or(config_name, |(k, _)| *k);
                    synonyms.push(synonym(key, default, Source::Default));
                }
            }
            let entry = DescribeConfigsResourceResult::default()
                .with_name(str_bytes(config_name))
                .with_value(Some(str_bytes(value)))
                .with_read_only(false)
                .with_config_source(source.code())
                .with_is_sensitive(false)
                .with_synonyms(synonyms);
            if version >= 3 {
                entry
                    .with_config_type(config_type(def.kind))
                    .with_documentation(request.include_documentation.then(|| str_bytes(def.doc)))
            } else {
                entry
            }
        })
        .collect())
}

fn synonym(name: &str, value: &str, source: Source) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source.code())
}

fn describe_broker(
    broker: &Broker,
    name: &StrBytes,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<DescribeConfigsResourceResult>, ApiError> {
    let node = broker.config.node_id.to_string();
    if !name.is_empty() && name.as_str() != node {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("this is broker {node}, not {}", name.as_str()),
        ));
    }
    let mut entries: BTreeMap<String, String> = broker.config.raw.clone();
    entries.insert("node.id".into(), node);
    entries.insert("broker.id".into(), broker.config.node_id.to_string());
    for (topic_key, value) in &broker.config.topic_defaults {
        if let Some(def) = topic_config::definition(topic_key) {
            if let Some((broker_key, _)) = def.broker_synonyms.first() {
                entries
                    .entry(broker_key.to_string())
                    .or_insert_with(|| value.clone());
            }
        }
    }
    Ok(entries
        .into_iter()
        .filter(|(k, _)| wanted(k))
        .map(|(k, v)| {
            let sensitive = is_sensitive(&k);
            DescribeConfigsResourceResult::default()
                .with_value((!sensitive).then(|| str_bytes(v)))
                .with_name(str_bytes(k))
                .with_read_only(true)
                .with_config_source(Source::StaticBroker.code())
                .with_is_sensitive(sensitive)
                .with_config_type(TYPE_STRING)
        })
        .collect())
}

/// Whether a broker property holds a secret (passwords, keys, JAAS configs): its value is
/// never sent to clients, as Kafka does for PASSWORD-type configs.
fn is_sensitive(key: &str) -> bool {
    ["password", "secret", "jaas", ".key", "credentials"]
        .iter()
        .any(|marker| key.contains(marker))
}

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

pub fn incremental_alter(
    broker: &Arc<Broker>,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let outcome = match resource.resource_type {
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
                    apply_incremental(broker, &resource.resource_name, &ops, request.validate_only)
                }
                RESOURCE_BROKER => Err(dynamic_broker_refused()),
                other => Err(unsupported_resource(other)),
            };
            let response =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name);
            match outcome {
                Ok(()) => response.with_error_code(0),
                Err(e) => response
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

fn apply_incremental(
    broker: &Broker,
    topic: &str,
    ops: &[(String, i8, Option<String>)],
    validate_only: bool,
) -> Result<(), ApiError> {
    broker.update_topic_configs(topic, validate_only, |current| {
        let effective = broker.topic_config(current);
        apply_ops(&current.configs, &effective, ops)
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
        if topic_config::definition(name).is_none() {
            return Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!("Unknown topic config name: {name}"),
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

pub fn alter(broker: &Arc<Broker>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|resource| {
            let outcome = match resource.resource_type {
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
                    match null {
                        Some(name) => Err(ApiError::new(
                            ResponseError::InvalidConfig,
                            format!("Null value not supported for {name}"),
                        )),
                        None => broker.set_topic_configs(
                            &resource.resource_name,
                            configs,
                            request.validate_only,
                        ),
                    }
                }
                RESOURCE_BROKER => Err(dynamic_broker_refused()),
                other => Err(unsupported_resource(other)),
            };
            let response = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name);
            match outcome {
                Ok(()) => response.with_error_code(0),
                Err(e) => response
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
