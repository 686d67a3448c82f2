//! DescribeConfigs (32) for topics, for this broker and for the cluster-wide dynamic default (a
//! BROKER resource with an empty name), as Kafka's `ConfigHelper.describeConfigs` answers:
//!
//! - a topic: every topic config Kafka defines ([`crate::topic_config::TOPIC_CONFIGS`]), with
//!   its value, source (the topic's override, the cluster-wide default, the broker's file,
//!   Kafka's default), Kafka's type, `read_only` false, and with `include_synonyms` the override
//!   and every broker synonym that sets it (`createTopicConfigEntry`);
//! - this broker: every key it reads ([`crate::broker_configs`]) and every topic default it can
//!   set, with the source of its value and `read_only` true unless it can change at runtime;
//!   keys of the config file Keel does not know are listed as the file gave them (type
//!   UNKNOWN), as Kafka lists a config's originals;
//! - the empty name: the cluster-wide dynamic defaults in the metadata log.
//!
//! `include_documentation` (v3+) fills each entry's documentation. One difference from Kafka,
//! which issue 20 asks for: a key named in `configuration_keys` that this broker does not have
//! makes the BROKER resource fail with `INVALID_CONFIG` naming it (Kafka leaves it out of the
//! answer without a word). Topic keys are left out as in Kafka.

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use keel_wire::kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::super::str_bytes;
use super::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::broker::Broker;
use crate::broker_configs::{self, Unset, TYPE_UNKNOWN};
use crate::error::ApiError;
use crate::topic_config::{self, Source};

/// What one entry says, before it becomes wire fields.
struct Entry {
    name: String,
    value: Option<String>,
    source: Source,
    read_only: bool,
    sensitive: bool,
    config_type: i8,
    synonyms: Vec<(String, Option<String>, Source)>,
    documentation: String,
}

/// What the request asks of every entry.
struct Asked {
    keys: Option<Vec<String>>,
    synonyms: bool,
    documentation: bool,
    version: i16,
}

impl Asked {
    fn wants(&self, name: &str) -> bool {
        self.keys
            .as_ref()
            .is_none_or(|k| k.iter().any(|w| w == name))
    }
}

pub fn describe(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let authz = super::super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeConfigs,
    );
    let results = request
        .resources
        .iter()
        .map(|resource| {
            let asked = Asked {
                // Kafka treats an empty list as "every key" too (ConfigHelper).
                keys: resource
                    .configuration_keys
                    .as_ref()
                    .filter(|k| !k.is_empty())
                    .map(|k| k.iter().map(|s| s.to_string()).collect()),
                synonyms: request.include_synonyms,
                documentation: request.include_documentation && version >= 3,
                version,
            };
            let denied = super::refused(
                &authz,
                keel_controller::acl::AclOperation::DescribeConfigs,
                resource.resource_type,
                resource.resource_name.as_str(),
            );
            let entries = match resource.resource_type {
                _ if denied.is_some() => Err(denied.expect("checked")),
                RESOURCE_TOPIC => describe_topic(broker, &resource.resource_name, &asked),
                RESOURCE_BROKER if resource.resource_name.is_empty() => {
                    Ok(describe_cluster_defaults(broker, &asked))
                }
                RESOURCE_BROKER => describe_broker(broker, &resource.resource_name, &asked),
                other => Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("Unsupported resource type: {other}"),
                )),
            };
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            match entries {
                Ok(entries) => result
                    .with_error_code(0)
                    .with_configs(entries.into_iter().map(|e| wire(e, &asked)).collect()),
                Err(e) => result
                    .with_error_code(e.code())
                    .with_error_message(e.message_str()),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn wire(entry: Entry, asked: &Asked) -> DescribeConfigsResourceResult {
    let synonyms = if asked.synonyms {
        entry
            .synonyms
            .into_iter()
            .map(|(name, value, source)| {
                DescribeConfigsSynonym::default()
                    .with_name(str_bytes(name))
                    .with_value(value.filter(|_| !entry.sensitive).map(str_bytes))
                    .with_source(source.code())
            })
            .collect()
    } else {
        Vec::new()
    };
    let result = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(entry.name))
        .with_value(entry.value.filter(|_| !entry.sensitive).map(str_bytes))
        .with_read_only(entry.read_only)
        .with_config_source(entry.source.code())
        .with_is_sensitive(entry.sensitive)
        .with_synonyms(synonyms);
    if asked.version >= 3 {
        result
            .with_config_type(entry.config_type)
            .with_documentation(asked.documentation.then(|| str_bytes(entry.documentation)))
    } else {
        result
    }
}

fn describe_topic(broker: &Broker, name: &StrBytes, asked: &Asked) -> Result<Vec<Entry>, ApiError> {
    let topic = broker.topic(name).ok_or_else(|| {
        ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("Topic '{}' does not exist.", name.as_str()),
        )
    })?;
    let effective = broker.topic_config(&topic);
    let image = broker.image();
    let cluster = image.cluster_configs();
    let file = &broker.config.raw;
    Ok(effective
        .entries()
        .filter(|(config_name, _, _)| asked.wants(config_name))
        .map(|(config_name, value, source)| {
            let def = topic_config::definition(config_name).expect("entries come from definitions");
            let mut synonyms = Vec::new();
            if let Some(v) = topic.configs.get(config_name) {
                synonyms.push((config_name.to_string(), Some(v.clone()), Source::Topic));
            }
            // Kafka's order (ConfigHelper.configSynonyms): by source, then by synonym.
            for (map, source) in [
                (cluster, Source::DynamicDefaultBroker),
                (file, Source::StaticBroker),
            ] {
                for (broker_key, _) in def.broker_synonyms {
                    if let Some(v) = map.get(*broker_key) {
                        synonyms.push((broker_key.to_string(), Some(v.clone()), source));
                    }
                }
            }
            if let (Some(default), Some((broker_key, _))) =
                (def.default, def.broker_synonyms.first())
            {
                synonyms.push((
                    broker_key.to_string(),
                    Some(default.to_string()),
                    Source::Default,
                ));
            }
            Entry {
                name: config_name.to_string(),
                value: Some(value.to_string()),
                source,
                read_only: false,
                sensitive: false,
                config_type: def.kind.config_type(),
                synonyms,
                documentation: def.documentation(),
            }
        })
        .collect())
}

fn describe_broker(
    broker: &Broker,
    name: &StrBytes,
    asked: &Asked,
) -> Result<Vec<Entry>, ApiError> {
    let node = broker.config.node_id;
    let id = name.as_str().parse::<i32>().map_err(|_| {
        ApiError::new(
            ResponseError::InvalidRequest,
            format!("Broker id must be an integer, but it is: {}", name.as_str()),
        )
    })?;
    if id != node {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Unexpected broker id, expected {node} or empty string, but received {id}"),
        ));
    }
    let image = broker.image();
    let entries = broker_entries(broker, image.cluster_configs());
    if let Some(keys) = &asked.keys {
        if let Some(unknown) = keys.iter().find(|k| !entries.contains_key(k.as_str())) {
            return Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!("Unknown broker config name: {unknown} (broker {node} has no such config)"),
            ));
        }
    }
    Ok(entries
        .into_values()
        .filter(|e| asked.wants(&e.name))
        .collect())
}

/// Every config of this broker, by name.
fn broker_entries(broker: &Broker, cluster: &BTreeMap<String, String>) -> BTreeMap<String, Entry> {
    let config = &broker.config;
    let file = &config.raw;
    let mut entries = BTreeMap::new();
    // The keys the broker reads.
    for def in broker_configs::BROKER_CONFIGS {
        let alias = match def.name {
            "broker.id" => Some("node.id"),
            "node.id" => Some("broker.id"),
            _ => None,
        };
        let in_file = file
            .get(def.name)
            .or_else(|| alias.and_then(|a| file.get(a)));
        let unset = match def.unset {
            Unset::Fixed(v) => Some(v.to_string()),
            Unset::Null => None,
            Unset::Derived(f) => f(config),
        };
        entries.insert(
            def.name.to_string(),
            broker_entry(
                def.name,
                def.config_type,
                in_file,
                unset,
                def.doc.to_string(),
                cluster,
                file,
            ),
        );
    }
    // The topic defaults, from their topic configs.
    for topic in topic_config::TOPIC_CONFIGS {
        for (key, _) in topic.broker_synonyms {
            if entries.contains_key(*key) {
                continue;
            }
            let synonym = broker_configs::synonym(key).expect("a broker synonym");
            entries.insert(
                key.to_string(),
                broker_entry(
                    key,
                    synonym.config_type(),
                    file.get(*key),
                    synonym.unset_value(),
                    synonym.documentation(),
                    cluster,
                    file,
                ),
            );
        }
    }
    // What else the file holds: Keel ignores it (logged at start), Kafka would list it.
    for (key, value) in file {
        entries.entry(key.clone()).or_insert_with(|| Entry {
            name: key.clone(),
            value: Some(value.clone()),
            source: Source::StaticBroker,
            read_only: true,
            sensitive: is_sensitive(key),
            config_type: TYPE_UNKNOWN,
            synonyms: vec![(key.clone(), Some(value.clone()), Source::StaticBroker)],
            documentation: "Not a config Keel reads: kept as the config file gives it, \
                            without effect."
                .to_string(),
        });
    }
    entries
}

/// One broker key's entry: its value from the cluster-wide dynamic default, the file or its
/// default, in that order, with the synonyms of the same topic default (Kafka's
/// `createBrokerConfigEntry`).
fn broker_entry(
    name: &str,
    config_type: i8,
    in_file: Option<&String>,
    unset: Option<String>,
    documentation: String,
    cluster: &BTreeMap<String, String>,
    file: &BTreeMap<String, String>,
) -> Entry {
    let dynamic = broker_configs::is_dynamic(name);
    let group = match broker_configs::synonym_group(name) {
        group if group.is_empty() => vec![name],
        group => group,
    };
    let mut synonyms = Vec::new();
    if dynamic {
        for key in &group {
            if let Some(v) = cluster.get(*key) {
                synonyms.push((
                    key.to_string(),
                    Some(v.clone()),
                    Source::DynamicDefaultBroker,
                ));
            }
        }
    }
    for key in &group {
        let value = if *key == name {
            in_file
        } else {
            file.get(*key)
        };
        if let Some(v) = value {
            synonyms.push((key.to_string(), Some(v.clone()), Source::StaticBroker));
        }
    }
    if let Some(v) = &unset {
        synonyms.push((name.to_string(), Some(v.clone()), Source::Default));
    }
    // Kafka drops what comes before the key's own first entry (ConfigHelper.configSynonyms):
    // log.retention.hours set in the file is not log.retention.ms's value.
    let own = synonyms
        .iter()
        .position(|(key, _, _)| key == name)
        .unwrap_or(synonyms.len());
    synonyms.drain(..own);
    let (value, source) = synonyms
        .first()
        .map_or((None, Source::Default), |(_, value, source)| {
            (value.clone(), *source)
        });
    Entry {
        name: name.to_string(),
        value,
        source,
        read_only: !dynamic,
        sensitive: is_sensitive(name),
        config_type,
        synonyms,
        documentation,
    }
}

/// The cluster-wide dynamic defaults (Kafka: `currentDynamicDefaultConfigs`).
fn describe_cluster_defaults(broker: &Broker, asked: &Asked) -> Vec<Entry> {
    let image = broker.image();
    image
        .cluster_configs()
        .iter()
        .filter(|(name, _)| asked.wants(name))
        .map(|(name, value)| {
            let (config_type, documentation) = match (
                broker_configs::definition(name),
                broker_configs::synonym(name),
                topic_config::definition(name),
            ) {
                (Some(def), _, _) => (def.config_type, def.doc.to_string()),
                (None, Some(synonym), _) => (synonym.config_type(), synonym.documentation()),
                (None, None, Some(topic)) => (topic.kind.config_type(), topic.documentation()),
                (None, None, None) => (TYPE_UNKNOWN, String::new()),
            };
            Entry {
                name: name.clone(),
                value: Some(value.clone()),
                source: Source::DynamicDefaultBroker,
                read_only: false,
                sensitive: false,
                config_type,
                synonyms: vec![(
                    name.clone(),
                    Some(value.clone()),
                    Source::DynamicDefaultBroker,
                )],
                documentation,
            }
        })
        .collect()
}

/// Whether a broker property holds a secret (passwords, keys, JAAS configs): its value is
/// never sent to clients, as Kafka does for PASSWORD-type configs.
fn is_sensitive(key: &str) -> bool {
    ["password", "secret", "jaas", ".key", "credentials"]
        .iter()
        .any(|marker| key.contains(marker))
}
