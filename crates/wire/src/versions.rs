//! The API versions Keel serves, and the `ApiVersions` answers built from them — one table per
//! listener kind ([`ListenerKind`]): the broker listener ([`BROKER_APIS`]) and the controller
//! listener ([`CONTROLLER_APIS`]), as Kafka advertises different sets on each.
//!
//! Each range is Apache Kafka 4.4's for the API (its `validVersions`), cut where the
//! `kafka-protocol` crate cannot encode or decode a version ([`CODEC_GAPS`]); the tests check
//! both: [`tests::tables_are_kafka_4_4_s_but_for_the_codec_gaps`] against Kafka 4.4's numbers,
//! [`tests::ranges_are_within_the_codec`] against the codec's own message types.
//!
//! One advertised range differs from the served one, as in Kafka: Produce on the broker
//! listener is advertised from version 0 although versions 0–2 are refused (Kafka 4.0 removed
//! them, and `ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION` keeps 0 in the answer because
//! librdkafka's produce path checks for it, KAFKA-18659); a request at those versions closes
//! the connection, as for any version not served.

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
    range(ApiKey::Produce, 3, 13),
    range(ApiKey::Fetch, 4, 18),
    range(ApiKey::ListOffsets, 1, 10),
    range(ApiKey::Metadata, 0, 13),
    range(ApiKey::OffsetCommit, 2, 9),
    range(ApiKey::OffsetFetch, 1, 9),
    range(ApiKey::FindCoordinator, 0, 6),
    range(ApiKey::JoinGroup, 0, 9),
    range(ApiKey::Heartbeat, 0, 4),
    range(ApiKey::LeaveGroup, 0, 5),
    range(ApiKey::SyncGroup, 0, 5),
    range(ApiKey::DescribeGroups, 0, 6),
    range(ApiKey::ListGroups, 0, 5),
    range(ApiKey::SaslHandshake, 0, 1),
    range(ApiKey::ApiVersions, 0, 4),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::DeleteRecords, 0, 2),
    range(ApiKey::InitProducerId, 0, 5),
    range(ApiKey::OffsetForLeaderEpoch, 2, 4),
    range(ApiKey::AddPartitionsToTxn, 0, 5),
    range(ApiKey::AddOffsetsToTxn, 0, 4),
    range(ApiKey::EndTxn, 0, 5),
    range(ApiKey::WriteTxnMarkers, 1, 1),
    range(ApiKey::TxnOffsetCommit, 0, 5),
    range(ApiKey::DescribeAcls, 1, 3),
    range(ApiKey::CreateAcls, 1, 3),
    range(ApiKey::DeleteAcls, 1, 3),
    range(ApiKey::DescribeConfigs, 1, 4),
    range(ApiKey::AlterConfigs, 0, 2),
    range(ApiKey::DescribeLogDirs, 1, 4),
    range(ApiKey::SaslAuthenticate, 0, 2),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::DeleteGroups, 0, 2),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::AlterPartitionReassignments, 0, 1),
    range(ApiKey::ListPartitionReassignments, 0, 0),
    range(ApiKey::OffsetDelete, 0, 0),
    range(ApiKey::DescribeClientQuotas, 0, 1),
    range(ApiKey::AlterClientQuotas, 0, 1),
    range(ApiKey::DescribeUserScramCredentials, 0, 0),
    range(ApiKey::AlterUserScramCredentials, 0, 0),
    range(ApiKey::DescribeCluster, 0, 2),
    range(ApiKey::DescribeProducers, 0, 0),
    range(ApiKey::DescribeTransactions, 0, 0),
    range(ApiKey::ListTransactions, 0, 2),
    range(ApiKey::ListConfigResources, 0, 1),
    range(ApiKey::DescribeTopicPartitions, 0, 0),
];

/// Every API the controller listener answers, in api-key order: what brokers send a KRaft
/// controller (registration, heartbeats, AlterPartition, the metadata-log Fetch) and the admin
/// requests brokers forward to it.
pub const CONTROLLER_APIS: &[ApiRange] = &[
    range(ApiKey::Fetch, 4, 18),
    range(ApiKey::SaslHandshake, 0, 1),
    range(ApiKey::ApiVersions, 0, 4),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::DescribeAcls, 1, 3),
    range(ApiKey::CreateAcls, 1, 3),
    range(ApiKey::DeleteAcls, 1, 3),
    range(ApiKey::SaslAuthenticate, 0, 2),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::AlterPartitionReassignments, 0, 1),
    range(ApiKey::ListPartitionReassignments, 0, 0),
    range(ApiKey::AlterClientQuotas, 0, 1),
    range(ApiKey::DescribeUserScramCredentials, 0, 0),
    range(ApiKey::AlterUserScramCredentials, 0, 0),
    range(ApiKey::AlterPartition, 2, 3),
    range(ApiKey::Envelope, 0, 0),
    range(ApiKey::FetchSnapshot, 0, 1),
    range(ApiKey::DescribeCluster, 0, 2),
    range(ApiKey::BrokerRegistration, 0, 4),
    range(ApiKey::BrokerHeartbeat, 0, 1),
    range(ApiKey::AllocateProducerIds, 0, 0),
];

/// Where Keel serves less than Kafka 4.4 because `kafka-protocol` 0.18 cannot encode or decode
/// the newer version (its message types stop below it): (API, listener, Kafka 4.4's newest
/// version, what the version adds).
pub const CODEC_GAPS: &[(ApiKey, ListenerKind, i16, &str)] = &[
    (
        ApiKey::ListOffsets,
        ListenerKind::Broker,
        11,
        "EARLIEST_PENDING_UPLOAD (-6, KIP-1023)",
    ),
    (
        ApiKey::OffsetCommit,
        ListenerKind::Broker,
        10,
        "topics named by id (KIP-848)",
    ),
    (
        ApiKey::OffsetFetch,
        ListenerKind::Broker,
        10,
        "topics named by id (KIP-848)",
    ),
    (
        ApiKey::ApiVersions,
        ListenerKind::Broker,
        5,
        "cluster and node id checks, REBOOTSTRAP_REQUIRED (KIP-1242)",
    ),
    (
        ApiKey::InitProducerId,
        ListenerKind::Broker,
        6,
        "two-phase commit fields (KIP-939)",
    ),
    (
        ApiKey::WriteTxnMarkers,
        ListenerKind::Broker,
        2,
        "the marker's transaction version (KIP-1228)",
    ),
    (
        ApiKey::TxnOffsetCommit,
        ListenerKind::Broker,
        6,
        "topics named by id (KIP-1319)",
    ),
    (
        ApiKey::DescribeLogDirs,
        ListenerKind::Broker,
        5,
        "IsCordoned per log directory (KIP-1066)",
    ),
    (
        ApiKey::DeleteGroups,
        ListenerKind::Broker,
        3,
        "an error message per group",
    ),
    (
        ApiKey::ApiVersions,
        ListenerKind::Controller,
        5,
        "cluster and node id checks, REBOOTSTRAP_REQUIRED (KIP-1242)",
    ),
    (
        ApiKey::BrokerHeartbeat,
        ListenerKind::Controller,
        2,
        "CordonedLogDirs (KIP-1066)",
    ),
];

/// The lowest Produce version the broker listener advertises (Kafka's
/// `ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION`, KAFKA-18659); it serves from 3.
pub const PRODUCE_ADVERTISED_MIN_VERSION: i16 = 0;

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
                .with_min_version(advertised_min_version(kind, r))
                .with_max_version(r.max_version)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_api_keys(api_keys)
}

/// The lowest version `ApiVersions` lists for `range` on a listener of `kind`: its served
/// minimum, except Produce on the broker listener (see the module docs).
pub fn advertised_min_version(kind: ListenerKind, range: &ApiRange) -> i16 {
    if kind == ListenerKind::Broker && range.key == ApiKey::Produce {
        PRODUCE_ADVERTISED_MIN_VERSION
    } else {
        range.min_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The versions the codec's request and response message types can both encode and decode,
    /// for every API Keel serves (not `ApiKey::valid_versions`, which claims OffsetCommit 10
    /// and InitProducerId 6 while their request types stop at 9 and 5).
    fn codec_versions(key: ApiKey) -> (i16, i16) {
        use kafka_protocol::messages::*;
        use kafka_protocol::protocol::Message;
        macro_rules! both {
            ($req:ty, $resp:ty) => {{
                let (q, r) = (<$req as Message>::VERSIONS, <$resp as Message>::VERSIONS);
                (q.min.max(r.min), q.max.min(r.max))
            }};
        }
        match key {
            ApiKey::Produce => both!(ProduceRequest, ProduceResponse),
            ApiKey::Fetch => both!(FetchRequest, FetchResponse),
            ApiKey::ListOffsets => both!(ListOffsetsRequest, ListOffsetsResponse),
            ApiKey::Metadata => both!(MetadataRequest, MetadataResponse),
            ApiKey::OffsetCommit => both!(OffsetCommitRequest, OffsetCommitResponse),
            ApiKey::OffsetFetch => both!(OffsetFetchRequest, OffsetFetchResponse),
            ApiKey::FindCoordinator => both!(FindCoordinatorRequest, FindCoordinatorResponse),
            ApiKey::JoinGroup => both!(JoinGroupRequest, JoinGroupResponse),
            ApiKey::Heartbeat => both!(HeartbeatRequest, HeartbeatResponse),
            ApiKey::LeaveGroup => both!(LeaveGroupRequest, LeaveGroupResponse),
            ApiKey::SyncGroup => both!(SyncGroupRequest, SyncGroupResponse),
            ApiKey::DescribeGroups => both!(DescribeGroupsRequest, DescribeGroupsResponse),
            ApiKey::ListGroups => both!(ListGroupsRequest, ListGroupsResponse),
            ApiKey::ApiVersions => both!(ApiVersionsRequest, ApiVersionsResponse),
            ApiKey::CreateTopics => both!(CreateTopicsRequest, CreateTopicsResponse),
            ApiKey::DeleteTopics => both!(DeleteTopicsRequest, DeleteTopicsResponse),
            ApiKey::InitProducerId => both!(InitProducerIdRequest, InitProducerIdResponse),
            ApiKey::OffsetForLeaderEpoch => {
                both!(OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse)
            }
            ApiKey::DescribeAcls => both!(DescribeAclsRequest, DescribeAclsResponse),
            ApiKey::CreateAcls => both!(CreateAclsRequest, CreateAclsResponse),
            ApiKey::DeleteAcls => both!(DeleteAclsRequest, DeleteAclsResponse),
            ApiKey::DescribeConfigs => both!(DescribeConfigsRequest, DescribeConfigsResponse),
            ApiKey::AlterConfigs => both!(AlterConfigsRequest, AlterConfigsResponse),
            ApiKey::DescribeLogDirs => both!(DescribeLogDirsRequest, DescribeLogDirsResponse),
            ApiKey::CreatePartitions => both!(CreatePartitionsRequest, CreatePartitionsResponse),
            ApiKey::DeleteGroups => both!(DeleteGroupsRequest, DeleteGroupsResponse),
            ApiKey::ElectLeaders => both!(ElectLeadersRequest, ElectLeadersResponse),
            ApiKey::AlterPartitionReassignments => both!(
                AlterPartitionReassignmentsRequest,
                AlterPartitionReassignmentsResponse
            ),
            ApiKey::ListPartitionReassignments => both!(
                ListPartitionReassignmentsRequest,
                ListPartitionReassignmentsResponse
            ),
            ApiKey::IncrementalAlterConfigs => {
                both!(
                    IncrementalAlterConfigsRequest,
                    IncrementalAlterConfigsResponse
                )
            }
            ApiKey::OffsetDelete => both!(OffsetDeleteRequest, OffsetDeleteResponse),
            ApiKey::DescribeClientQuotas => {
                both!(DescribeClientQuotasRequest, DescribeClientQuotasResponse)
            }
            ApiKey::AlterClientQuotas => {
                both!(AlterClientQuotasRequest, AlterClientQuotasResponse)
            }
            ApiKey::DescribeUserScramCredentials => both!(
                DescribeUserScramCredentialsRequest,
                DescribeUserScramCredentialsResponse
            ),
            ApiKey::AlterUserScramCredentials => both!(
                AlterUserScramCredentialsRequest,
                AlterUserScramCredentialsResponse
            ),
            ApiKey::DeleteRecords => both!(DeleteRecordsRequest, DeleteRecordsResponse),
            ApiKey::SaslHandshake => both!(SaslHandshakeRequest, SaslHandshakeResponse),
            ApiKey::SaslAuthenticate => {
                both!(SaslAuthenticateRequest, SaslAuthenticateResponse)
            }
            ApiKey::DescribeCluster => both!(DescribeClusterRequest, DescribeClusterResponse),
            ApiKey::DescribeProducers => {
                both!(DescribeProducersRequest, DescribeProducersResponse)
            }
            ApiKey::AddPartitionsToTxn => {
                both!(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse)
            }
            ApiKey::AddOffsetsToTxn => both!(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
            ApiKey::EndTxn => both!(EndTxnRequest, EndTxnResponse),
            ApiKey::WriteTxnMarkers => both!(WriteTxnMarkersRequest, WriteTxnMarkersResponse),
            ApiKey::TxnOffsetCommit => both!(TxnOffsetCommitRequest, TxnOffsetCommitResponse),
            ApiKey::DescribeTransactions => {
                both!(DescribeTransactionsRequest, DescribeTransactionsResponse)
            }
            ApiKey::ListTransactions => {
                both!(ListTransactionsRequest, ListTransactionsResponse)
            }
            ApiKey::ListConfigResources => {
                both!(ListConfigResourcesRequest, ListConfigResourcesResponse)
            }
            ApiKey::DescribeTopicPartitions => {
                both!(
                    DescribeTopicPartitionsRequest,
                    DescribeTopicPartitionsResponse
                )
            }
            ApiKey::AlterPartition => both!(AlterPartitionRequest, AlterPartitionResponse),
            ApiKey::FetchSnapshot => both!(FetchSnapshotRequest, FetchSnapshotResponse),
            ApiKey::Envelope => both!(EnvelopeRequest, EnvelopeResponse),
            ApiKey::BrokerRegistration => {
                both!(BrokerRegistrationRequest, BrokerRegistrationResponse)
            }
            ApiKey::BrokerHeartbeat => both!(BrokerHeartbeatRequest, BrokerHeartbeatResponse),
            ApiKey::AllocateProducerIds => {
                both!(AllocateProducerIdsRequest, AllocateProducerIdsResponse)
            }
            other => panic!("{other:?} is not served: add its message types here"),
        }
    }

    // Shows: every served range can be decoded and encoded by the codec crate's message types.
    #[test]
    fn ranges_are_within_the_codec() {
        for r in BROKER_APIS.iter().chain(CONTROLLER_APIS) {
            let (min, max) = codec_versions(r.key);
            assert!(r.min_version <= r.max_version, "{:?}", r.key);
            assert!(r.min_version >= min, "{:?} min below codec", r.key);
            assert!(r.max_version <= max, "{:?} max above codec", r.key);
        }
    }

    /// Apache Kafka 4.4's `validVersions` of every API Keel serves, per listener, copied from
    /// `clients/src/main/resources/common/message/*Request.json` of Kafka 4.4 (the request's
    /// `listeners` say which listener serves it; the responses' ranges are the same). Produce
    /// on the broker listener is advertised from 0 (`ApiKeys.toApiVersion`, KAFKA-18659).
    const KAFKA_4_4_BROKER: &[(ApiKey, i16, i16)] = &[
        (ApiKey::Produce, 0, 13),
        (ApiKey::Fetch, 4, 18),
        (ApiKey::ListOffsets, 1, 11),
        (ApiKey::Metadata, 0, 13),
        (ApiKey::OffsetCommit, 2, 10),
        (ApiKey::OffsetFetch, 1, 10),
        (ApiKey::FindCoordinator, 0, 6),
        (ApiKey::JoinGroup, 0, 9),
        (ApiKey::Heartbeat, 0, 4),
        (ApiKey::LeaveGroup, 0, 5),
        (ApiKey::SyncGroup, 0, 5),
        (ApiKey::DescribeGroups, 0, 6),
        (ApiKey::ListGroups, 0, 5),
        (ApiKey::SaslHandshake, 0, 1),
        (ApiKey::ApiVersions, 0, 5),
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DeleteRecords, 0, 2),
        (ApiKey::InitProducerId, 0, 6),
        (ApiKey::OffsetForLeaderEpoch, 2, 4),
        (ApiKey::AddPartitionsToTxn, 0, 5),
        (ApiKey::AddOffsetsToTxn, 0, 4),
        (ApiKey::EndTxn, 0, 5),
        (ApiKey::WriteTxnMarkers, 1, 2),
        (ApiKey::TxnOffsetCommit, 0, 6),
        (ApiKey::DescribeAcls, 1, 3),
        (ApiKey::CreateAcls, 1, 3),
        (ApiKey::DeleteAcls, 1, 3),
        (ApiKey::DescribeConfigs, 1, 4),
        (ApiKey::AlterConfigs, 0, 2),
        (ApiKey::DescribeLogDirs, 1, 5),
        (ApiKey::SaslAuthenticate, 0, 2),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::DeleteGroups, 0, 3),
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::IncrementalAlterConfigs, 0, 1),
        (ApiKey::AlterPartitionReassignments, 0, 1),
        (ApiKey::ListPartitionReassignments, 0, 0),
        (ApiKey::OffsetDelete, 0, 0),
        (ApiKey::DescribeClientQuotas, 0, 1),
        (ApiKey::AlterClientQuotas, 0, 1),
        (ApiKey::DescribeUserScramCredentials, 0, 0),
        (ApiKey::AlterUserScramCredentials, 0, 0),
        (ApiKey::DescribeCluster, 0, 2),
        (ApiKey::DescribeProducers, 0, 0),
        (ApiKey::DescribeTransactions, 0, 0),
        (ApiKey::ListTransactions, 0, 2),
        (ApiKey::ListConfigResources, 0, 1),
        (ApiKey::DescribeTopicPartitions, 0, 0),
    ];

    /// The same for the controller listener (requests whose `listeners` name "controller").
    const KAFKA_4_4_CONTROLLER: &[(ApiKey, i16, i16)] = &[
        (ApiKey::Fetch, 4, 18),
        (ApiKey::SaslHandshake, 0, 1),
        (ApiKey::ApiVersions, 0, 5),
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DescribeAcls, 1, 3),
        (ApiKey::CreateAcls, 1, 3),
        (ApiKey::DeleteAcls, 1, 3),
        (ApiKey::SaslAuthenticate, 0, 2),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::IncrementalAlterConfigs, 0, 1),
        (ApiKey::AlterPartitionReassignments, 0, 1),
        (ApiKey::ListPartitionReassignments, 0, 0),
        (ApiKey::AlterClientQuotas, 0, 1),
        (ApiKey::DescribeUserScramCredentials, 0, 0),
        (ApiKey::AlterUserScramCredentials, 0, 0),
        (ApiKey::AlterPartition, 2, 3),
        (ApiKey::Envelope, 0, 0),
        (ApiKey::FetchSnapshot, 0, 1),
        (ApiKey::DescribeCluster, 0, 2),
        (ApiKey::BrokerRegistration, 0, 4),
        (ApiKey::BrokerHeartbeat, 0, 2),
        (ApiKey::AllocateProducerIds, 0, 0),
    ];

    // Shows (issue 20, "newest API versions"): what each listener advertises in ApiVersions is
    // exactly Kafka 4.4's range for every API Keel serves, except where the codec stops below
    // it — and each of those gaps is documented in CODEC_GAPS with Kafka's version, is really
    // the codec's limit (its message types end exactly where Keel's range does) and nothing
    // else.
    #[test]
    fn tables_are_kafka_4_4_s_but_for_the_codec_gaps() {
        for (kind, kafka) in [
            (ListenerKind::Broker, KAFKA_4_4_BROKER),
            (ListenerKind::Controller, KAFKA_4_4_CONTROLLER),
        ] {
            let advertised = api_versions_response_on(kind, None).api_keys;
            for r in kind.apis() {
                let &(_, kafka_min, kafka_max) = kafka
                    .iter()
                    .find(|(key, _, _)| *key == r.key)
                    .unwrap_or_else(|| panic!("{:?} is not a {kind:?} API in Kafka 4.4", r.key));
                let listed = advertised
                    .iter()
                    .find(|v| v.api_key == r.key as i16)
                    .expect("every served API is advertised");
                assert_eq!(listed.min_version, kafka_min, "{kind:?} {:?} min", r.key);
                let gap = CODEC_GAPS
                    .iter()
                    .find(|(key, k, _, _)| *key == r.key && *k == kind);
                match gap {
                    None => assert_eq!(r.max_version, kafka_max, "{kind:?} {:?} max", r.key),
                    Some(&(_, _, gap_max, _)) => {
                        assert_eq!(
                            gap_max, kafka_max,
                            "{kind:?} {:?}: gap names Kafka's",
                            r.key
                        );
                        assert!(r.max_version < kafka_max, "{kind:?} {:?}: no gap", r.key);
                        assert_eq!(
                            r.max_version,
                            codec_versions(r.key).1,
                            "{kind:?} {:?}: a gap must be the codec's limit",
                            r.key
                        );
                    }
                }
                assert_eq!(listed.max_version, r.max_version);
            }
            for (key, k, _, _) in CODEC_GAPS {
                assert!(
                    *k != kind || kind.apis().iter().any(|r| r.key == *key),
                    "gap for an API not served: {key:?}"
                );
            }
        }
    }

    // Shows (KAFKA-18659): Produce is advertised from version 0 on the broker listener but
    // served from 3 only — v0-2 requests are refused like any unserved version.
    #[test]
    fn produce_is_advertised_from_zero_and_served_from_three() {
        let produce = api_versions_response(None)
            .api_keys
            .into_iter()
            .find(|v| v.api_key == ApiKey::Produce as i16)
            .unwrap();
        assert_eq!((produce.min_version, produce.max_version), (0, 13));
        assert!(!is_served(ApiKey::Produce, 2));
        assert!(is_served(ApiKey::Produce, 3) && is_served(ApiKey::Produce, 13));
        let controller = api_versions_response_on(ListenerKind::Controller, None);
        assert!(controller
            .api_keys
            .iter()
            .all(|v| v.api_key != ApiKey::Produce as i16));
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
