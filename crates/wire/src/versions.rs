//! The API versions Keel serves, and the `ApiVersions` answers built from them — one table per
//! listener kind ([`ListenerKind`]): the broker listener ([`BROKER_APIS`]) and the controller
//! listener ([`CONTROLLER_APIS`]), as Kafka advertises different sets on each.
//!
//! Each range is the intersection of what Keel implements and what the `kafka-protocol` crate
//! can decode; [`tests::ranges_are_within_the_codec`] checks the second half.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// One served API: its key and the inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
}

const fn range(key: ApiKey, min_version: i16, max_version: i16) -> ApiRange {
    ApiRange {
        key,
        min_version,
        max_version,
    }
}

/// Every API the broker listener answers, in api-key order.
pub const BROKER_APIS: &[ApiRange] = &[
    range(ApiKey::Produce, 3, 11),
    range(ApiKey::Fetch, 4, 16),
    range(ApiKey::ListOffsets, 1, 9),
    range(ApiKey::Metadata, 0, 12),
    range(ApiKey::OffsetCommit, 2, 9),
    range(ApiKey::OffsetFetch, 1, 9),
    range(ApiKey::FindCoordinator, 0, 5),
    range(ApiKey::JoinGroup, 0, 9),
    range(ApiKey::Heartbeat, 0, 4),
    range(ApiKey::LeaveGroup, 0, 5),
    range(ApiKey::SyncGroup, 0, 5),
    range(ApiKey::DescribeGroups, 0, 5),
    range(ApiKey::ListGroups, 0, 5),
    range(ApiKey::ApiVersions, 0, 4),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::DeleteRecords, 0, 2),
    range(ApiKey::InitProducerId, 0, 5),
    range(ApiKey::OffsetForLeaderEpoch, 2, 4),
    range(ApiKey::DescribeAcls, 1, 3),
    range(ApiKey::CreateAcls, 1, 3),
    range(ApiKey::DeleteAcls, 1, 3),
    range(ApiKey::DescribeConfigs, 1, 4),
    range(ApiKey::AlterConfigs, 0, 2),
    range(ApiKey::DescribeLogDirs, 1, 4),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::DeleteGroups, 0, 2),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::OffsetDelete, 0, 0),
    range(ApiKey::DescribeCluster, 0, 1),
    range(ApiKey::DescribeTopicPartitions, 0, 0),
];

/// Every API the controller listener answers, in api-key order: what brokers send a KRaft
/// controller (registration, heartbeats, AlterPartition, the metadata-log Fetch) and the admin
/// requests brokers forward to it.
pub const CONTROLLER_APIS: &[ApiRange] = &[
    range(ApiKey::Fetch, 4, 16),
    range(ApiKey::ApiVersions, 0, 4),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::AlterPartition, 2, 3),
    range(ApiKey::FetchSnapshot, 0, 1),
    range(ApiKey::DescribeCluster, 0, 1),
    range(ApiKey::BrokerRegistration, 0, 4),
    range(ApiKey::BrokerHeartbeat, 0, 1),
    range(ApiKey::AllocateProducerIds, 0, 0),
];

/// Which listener a connection arrived on; each serves its own API set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// A broker listener (clients and replicas).
    Broker,
    /// The controller listener (`controller.listener.names`).
    Controller,
}

impl ListenerKind {
    /// The served-versions table of this listener.
    pub fn apis(self) -> &'static [ApiRange] {
        match self {
            ListenerKind::Broker => BROKER_APIS,
            ListenerKind::Controller => CONTROLLER_APIS,
        }
    }
}

/// The served range of `key` on the broker listener, if Keel serves it at all.
pub fn served_range(key: ApiKey) -> Option<ApiRange> {
    served_range_on(ListenerKind::Broker, key)
}

/// The served range of `key` on a listener of `kind`.
pub fn served_range_on(kind: ListenerKind, key: ApiKey) -> Option<ApiRange> {
    kind.apis().iter().copied().find(|r| r.key == key)
}

/// Whether `version` of `key` is served on the broker listener.
pub fn is_served(key: ApiKey, version: i16) -> bool {
    is_served_on(ListenerKind::Broker, key, version)
}

/// Whether `version` of `key` is served on a listener of `kind`.
pub fn is_served_on(kind: ListenerKind, key: ApiKey, version: i16) -> bool {
    served_range_on(kind, key).is_some_and(|r| (r.min_version..=r.max_version).contains(&version))
}

/// The broker listener's `ApiVersions` answer listing every served API, with `error`.
pub fn api_versions_response(error: Option<ResponseError>) -> ApiVersionsResponse {
    api_versions_response_on(ListenerKind::Broker, error)
}

/// The `ApiVersions` answer of a listener of `kind`, with `error`.
pub fn api_versions_response_on(
    kind: ListenerKind,
    error: Option<ResponseError>,
) -> ApiVersionsResponse {
    let api_keys = kind
        .apis()
        .iter()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.key as i16)
                .with_min_version(r.min_version)
                .with_max_version(r.max_version)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: every advertised range can actually be decoded and encoded by the codec crate.
    #[test]
    fn ranges_are_within_the_codec() {
        for r in BROKER_APIS.iter().chain(CONTROLLER_APIS) {
            let codec = r.key.valid_versions();
            assert!(r.min_version <= r.max_version, "{:?}", r.key);
            assert!(r.min_version >= codec.min, "{:?} min below codec", r.key);
            assert!(r.max_version <= codec.max, "{:?} max above codec", r.key);
        }
    }

    // Shows: the table is sorted by key with no duplicates (clients expect a stable answer).
    #[test]
    fn table_is_sorted_and_unique() {
        for table in [BROKER_APIS, CONTROLLER_APIS] {
            for pair in table.windows(2) {
                assert!((pair[0].key as i16) < (pair[1].key as i16));
            }
        }
    }

    // Shows: each listener advertises its own set (KIP-919: controllers answer ApiVersions with
    // the controller APIs): brokers do not take BrokerRegistration, controllers do not take
    // Produce, and both answer ApiVersions.
    #[test]
    fn listeners_serve_their_own_apis() {
        assert!(!is_served(ApiKey::BrokerRegistration, 0));
        assert!(is_served_on(
            ListenerKind::Controller,
            ApiKey::BrokerRegistration,
            4
        ));
        assert!(is_served_on(
            ListenerKind::Controller,
            ApiKey::AlterPartition,
            3
        ));
        assert!(!is_served_on(
            ListenerKind::Controller,
            ApiKey::AlterPartition,
            1
        ));
        assert!(!is_served_on(ListenerKind::Controller, ApiKey::Produce, 9));
        // DeleteRecords v0-2 (Kafka 4.4's DeleteRecordsRequest.json), brokers only (issue 20).
        assert!((0..=2).all(|v| is_served(ApiKey::DeleteRecords, v)));
        assert!(!is_served(ApiKey::DeleteRecords, 3));
        assert!(!is_served_on(
            ListenerKind::Controller,
            ApiKey::DeleteRecords,
            2
        ));
        for kind in [ListenerKind::Broker, ListenerKind::Controller] {
            let answer = api_versions_response_on(kind, None);
            assert_eq!(answer.api_keys.len(), kind.apis().len());
            assert!(is_served_on(kind, ApiKey::ApiVersions, 3));
        }
    }
}
