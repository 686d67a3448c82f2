//! ApiVersions (key 18): the served API table, and (v3+) the features this broker supports
//! and those the cluster finalized (KIP-584), as Kafka 4.x clients and `kafka-features.sh
//! describe` read them: `transaction.version` (KIP-890) — finalized at 2, Kafka 4.x producers
//! use transactions v2 — and `eligible.leader.replicas.version` (KIP-966) — 1 while ELR is on,
//! which Keel's metadata keeps under the name of its switch, `eligible.leader.replicas.enable`,
//! and which is on when the metadata never set it. A feature at level 0 is not finalized (as in
//! Kafka). The finalized features' epoch is the offset of the metadata this broker applied, so
//! a client that asked several brokers trusts the newest answer.

use keel_controller::config::ELR_FEATURE;
use keel_controller::{ClusterImage, TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX};
use keel_wire::kafka_protocol::messages::api_versions_response::{
    FinalizedFeatureKey, SupportedFeatureKey,
};
use keel_wire::kafka_protocol::messages::ApiVersionsResponse;

use super::str_bytes;
use crate::broker::Broker;

/// KIP-966's feature, as Kafka names it.
const ELR_VERSION_FEATURE: &str = "eligible.leader.replicas.version";

/// One feature Keel supports: Kafka's name, the highest level, and its finalized level in
/// `image` (`None`: not finalized).
struct Feature {
    name: &'static str,
    max: u16,
    finalized: fn(&ClusterImage) -> Option<u16>,
}

const FEATURES: &[Feature] = &[
    Feature {
        name: ELR_VERSION_FEATURE,
        max: 1,
        finalized: |image| Some(image.feature_level(ELR_FEATURE).unwrap_or(1).min(1)),
    },
    Feature {
        name: TRANSACTION_VERSION_FEATURE,
        max: TRANSACTION_VERSION_MAX,
        finalized: |image| image.feature_level(TRANSACTION_VERSION_FEATURE),
    },
];

pub fn handle(broker: &Broker) -> ApiVersionsResponse {
    let image = broker.image();
    let level = |v: u16| i16::try_from(v).unwrap_or(i16::MAX);
    let supported = FEATURES
        .iter()
        .map(|f| {
            SupportedFeatureKey::default()
                .with_name(str_bytes(f.name))
                .with_min_version(0)
                .with_max_version(level(f.max))
        })
        .collect();
    let finalized: Vec<FinalizedFeatureKey> = FEATURES
        .iter()
        .filter_map(|f| {
            let at = (f.finalized)(&image).filter(|l| *l > 0)?;
            Some(
                FinalizedFeatureKey::default()
                    .with_name(str_bytes(f.name))
                    .with_min_version_level(level(at))
                    .with_max_version_level(level(at)),
            )
        })
        .collect();
    keel_wire::versions::api_versions_response(None)
        .with_supported_features(supported)
        .with_finalized_features_epoch(image.last_applied().map_or(-1, |o| o.0))
        .with_finalized_features(finalized)
}
