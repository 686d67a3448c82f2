//! ListConfigResources (key 74, v0–1; KIP-1142, v0 was ListClientMetricsResources): the
//! resources configs can be described for, by type — what `Admin.listConfigResources` and
//! `kafka-client-metrics.sh --list` use. As Kafka (`ListConfigResourcesRequest.
//! supportedResourceTypes`, the broker's handler): v0 lists client-metrics resources only; v1
//! lists the requested types, every supported one when the list is empty; a type the version
//! does not support makes the whole answer `UNSUPPORTED_VERSION` with no resources.
//!
//! What each type holds in Keel (Kafka's `ConfigResource.Type` codes):
//! - TOPIC (2): every topic of the metadata image, internal ones included;
//! - BROKER (4) and BROKER_LOGGER (8): every registered broker, by id (Kafka lists broker
//!   loggers per broker too; Keel's DescribeConfigs does not serve them yet);
//! - CLIENT_METRICS (16): none — Keel keeps no client-metrics subscriptions (KIP-714);
//! - GROUP (32): none — Keel stores no dynamic group configs, and Kafka lists only groups
//!   that have them.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::list_config_resources_response::ConfigResource;
use keel_wire::kafka_protocol::messages::{
    ListConfigResourcesRequest, ListConfigResourcesResponse,
};
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;

/// Kafka's `ConfigResource.Type` codes.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

/// The types each version may ask for (Kafka's `ListConfigResourcesRequest.
/// supportedResourceTypes`).
fn supported_types(version: i16) -> &'static [i8] {
    if version == 0 {
        &[CLIENT_METRICS]
    } else {
        &[TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP]
    }
}

pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: ListConfigResourcesRequest,
    version: i16,
) -> ListConfigResourcesResponse {
    // Kafka: DESCRIBE_CONFIGS on the cluster.
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::ListConfigResources,
    );
    if !authz.cluster(keel_controller::acl::AclOperation::DescribeConfigs) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let supported = supported_types(version);
    // v0 has no ResourceTypes field: it lists client metrics.
    let requested: Vec<i8> = if version == 0 || request.resource_types.is_empty() {
        supported.to_vec()
    } else {
        request.resource_types
    };
    if requested.iter().any(|t| !supported.contains(t)) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code());
    }
    let mut types = requested;
    types.sort_unstable();
    types.dedup();
    let mut resources = Vec::new();
    for resource_type in types {
        let names: Vec<String> = match resource_type {
            TOPIC => broker.topics().into_iter().map(|t| t.name).collect(),
            BROKER | BROKER_LOGGER => broker
                .registered_broker_ids()
                .into_iter()
                .map(|id| id.to_string())
                .collect(),
            // Keel has neither client-metrics subscriptions nor dynamic group configs.
            _ => Vec::new(),
        };
        resources.extend(names.into_iter().map(|name| {
            ConfigResource::default()
                .with_resource_name(str_bytes(name))
                .with_resource_type(resource_type)
        }));
    }
    ListConfigResourcesResponse::default()
        .with_error_code(0)
        .with_config_resources(resources)
}
