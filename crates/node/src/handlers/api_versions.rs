//! ApiVersions (key 18): the served API table, and (v3+) the features this broker supports
//! and those the cluster finalized (KIP-584), as Kafka 4.x clients read them:
//! `transaction.version` (KIP-890) — finalized at 2, Kafka 4.x producers use transactions v2.
//! The finalized features' epoch is the offset of the metadata this broker applied, so a client
//! that asked several brokers trusts the newest answer.

use keel_controller::{TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX};
use keel_wire::kafka_protocol::messages::api_versions_response::{
    FinalizedFeatureKey, SupportedFeatureKey,
};
use keel_wire::kafka_protocol::messages::ApiVersionsResponse;

use super::str_bytes;
use crate::broker::Broker;

pub fn handle(broker: &Broker) -> ApiVersionsResponse {
    let image = broker.image();
    let supported = vec![SupportedFeatureKey::default()
        .with_name(str_bytes(TRANSACTION_VERSION_FEATURE))
        .with_min_version(0)
        .with_max_version(TRANSACTION_VERSION_MAX as i16)];
    let finalized: Vec<FinalizedFeatureKey> = image
        .feature_level(TRANSACTION_VERSION_FEATURE)
        .filter(|level| *level > 0)
        .map(|level| {
            let level = i16::try_from(level).unwrap_or(i16::MAX);
            FinalizedFeatureKey::default()
                .with_name(str_bytes(TRANSACTION_VERSION_FEATURE))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .into_iter()
        .collect();
    keel_wire::versions::api_versions_response(None)
        .with_supported_features(supported)
        .with_finalized_features_epoch(image.last_applied().map_or(-1, |o| o.0))
        .with_finalized_features(finalized)
}
