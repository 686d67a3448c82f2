//! IncrementalAlterConfigs (44, v0–1) for topics (resource type 2) and the cluster default
//! (resource type 4, BROKER, with an empty name — Kafka's cluster-wide dynamic default).
//!
//! Operations: SET (0) and DELETE (1); APPEND (2) and SUBTRACT (3) apply only to list configs,
//! none of which the controller interprets yet (`INVALID_CONFIG`). A resource's changes are
//! validated together and committed as one batch (`keel_controller::Controller::alter_configs`):
//! `min.insync.replicas` (ClearElr), `unclean.recovery.strategy` and
//! `unclean.leader.election.enable` (re-elections), and `eligible.leader.replicas.enable` on the
//! cluster (a feature-level record; KIP-966 ELR on/off). Per-broker dynamic configs (a BROKER
//! resource with a broker id) and other resource types are `INVALID_REQUEST`.

use std::collections::BTreeSet;

use keel_controller::records::ConfigResource;
use keel_controller::ConfigChange;
use keel_wire::kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use keel_wire::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use keel_wire::kafka_protocol::messages::{
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::state::{CallError, ControllerHandle};
use super::topics::TopicError;

/// Kafka's `ConfigResource.Type` TOPIC.
const RESOURCE_TOPIC: i8 = 2;
/// Kafka's `ConfigResource.Type` BROKER.
const RESOURCE_BROKER: i8 = 4;

/// Kafka's `AlterConfigOp.OpType`.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

/// The resource and its changes, or the wire-level error.
fn parse(
    resource: &AlterConfigsResource,
) -> Result<(ConfigResource, Vec<ConfigChange>), TopicError> {
    let invalid_request = |m: String| TopicError {
        code: ResponseError::InvalidRequest.code(),
        message: m,
    };
    let target = match resource.resource_type {
        RESOURCE_TOPIC => ConfigResource::Topic(resource.resource_name.to_string()),
        RESOURCE_BROKER if resource.resource_name.is_empty() => ConfigResource::Cluster,
        RESOURCE_BROKER => {
            return Err(invalid_request(format!(
                "per-broker dynamic configs (broker {}) are not supported; use the cluster default (empty name)",
                resource.resource_name.as_str()
            )))
        }
        other => return Err(invalid_request(format!("unsupported resource type {other}"))),
    };
    let mut names = BTreeSet::new();
    let mut changes = Vec::new();
    for config in &resource.configs {
        let name = config.name.to_string();
        if !names.insert(name.clone()) {
            return Err(invalid_request(format!(
                "Error due to duplicate config keys: {name}"
            )));
        }
        let value = match config.config_operation {
            OP_SET => match &config.value {
                Some(v) => Some(v.to_string()),
                None => {
                    return Err(TopicError {
                        code: ResponseError::InvalidConfig.code(),
                        message: format!("Null value not supported for : {name}"),
                    })
                }
            },
            OP_DELETE => None,
            OP_APPEND | OP_SUBTRACT => {
                return Err(TopicError {
                    code: ResponseError::InvalidConfig.code(),
                    message: format!(
                        "Config value append/subtract is not allowed for config key {name}"
                    ),
                })
            }
            other => return Err(invalid_request(format!("unknown config operation {other}"))),
        };
        changes.push(ConfigChange { name, value });
    }
    Ok((target, changes))
}

/// IncrementalAlterConfigs.
pub(super) async fn incremental_alter(
    handle: &ControllerHandle,
    req: IncrementalAlterConfigsRequest,
) -> Result<IncrementalAlterConfigsResponse, CallError> {
    let mut seen = BTreeSet::new();
    let parsed: Vec<Result<(ConfigResource, Vec<ConfigChange>), TopicError>> = req
        .resources
        .iter()
        .map(|r| {
            if !seen.insert((r.resource_type, r.resource_name.to_string())) {
                return Err(TopicError {
                    code: ResponseError::InvalidRequest.code(),
                    message: "Duplicate resource in request".to_string(),
                });
            }
            parse(r)
        })
        .collect();
    // Kafka caps the records of one user operation; count the changes before anything runs.
    let changes: usize = req.resources.iter().map(|r| r.configs.len()).sum();
    let parsed = if changes > keel_controller::MAX_RECORDS_PER_USER_OP {
        let error = TopicError {
            code: ResponseError::PolicyViolation.code(),
            message: format!(
                "{} {changes} config changes; at most {} in one request.",
                keel_controller::EXCESSIVE_BATCH,
                keel_controller::MAX_RECORDS_PER_USER_OP
            ),
        };
        parsed.into_iter().map(|_| Err(error.clone())).collect()
    } else {
        parsed
    };
    let validate_only = req.validate_only;
    let outcomes = handle
        .call(move |s| {
            let mut outcomes = Vec::new();
            for item in parsed {
                let outcome = match item {
                    Err(e) => Err(e),
                    Ok((resource, changes)) if validate_only => s
                        .controller()
                        .validate_configs(&resource, &changes)
                        .map(|_| ())
                        .map_err(TopicError::from),
                    Ok((resource, changes)) => s
                        .commit(|c, now_ms| c.alter_configs(&resource, &changes, now_ms))?
                        .map_err(TopicError::from),
                };
                outcomes.push(outcome);
            }
            Ok(outcomes)
        })
        .await?;
    let responses = req
        .resources
        .iter()
        .zip(outcomes)
        .map(|(r, outcome)| {
            let base = AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            match outcome {
                Ok(()) => base.with_error_code(0).with_error_message(None),
                Err(e) => base
                    .with_error_code(e.code)
                    .with_error_message(Some(StrBytes::from_string(e.message))),
            }
        })
        .collect();
    Ok(IncrementalAlterConfigsResponse::default().with_responses(responses))
}
