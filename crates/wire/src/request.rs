//! Decoding a frame into a typed request.
//!
//! A frame starts with `api_key: i16`, `api_version: i16`, `correlation_id: i32`; the rest of
//! the header and the body depend on the key and version. [`decode`] reads those fixed fields
//! first so that every failure can say which request it was, and whether the connection can be
//! answered (only an unsupported `ApiVersions` version is answered; Kafka closes the connection
//! for every other undecodable request).
//!
//! Each listener kind has its own body enum: [`Request`] for the broker listener ([`decode`]),
//! [`ControllerRequest`] for the controller listener ([`decode_controller`]); the served-versions
//! check uses that listener's table ([`versions::ListenerKind`]).

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest,
    ListTransactionsRequest, TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AlterClientQuotasRequest, AlterConfigsRequest,
    AlterPartitionReassignmentsRequest, AlterPartitionRequest, AlterUserScramCredentialsRequest,
    ApiKey, ApiVersionsRequest, BrokerHeartbeatRequest, BrokerRegistrationRequest,
    CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest, DescribeClientQuotasRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeLogDirsRequest,
    DescribeProducersRequest, DescribeTopicPartitionsRequest, DescribeUserScramCredentialsRequest,
    ElectLeadersRequest, EnvelopeRequest, FetchRequest, FetchSnapshotRequest,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, ListConfigResourcesRequest,
    ListOffsetsRequest, ListPartitionReassignmentsRequest, MetadataRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::Decodable;

use crate::versions::{self, ListenerKind};

/// A decoded request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Produce(ProduceRequest),
    Fetch(FetchRequest),
    ListOffsets(ListOffsetsRequest),
    Metadata(MetadataRequest),
    ApiVersions(ApiVersionsRequest),
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    DeleteRecords(DeleteRecordsRequest),
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest),
    DescribeConfigs(DescribeConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    CreatePartitions(CreatePartitionsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    ElectLeaders(ElectLeadersRequest),
    DescribeCluster(DescribeClusterRequest),
    DescribeTopicPartitions(DescribeTopicPartitionsRequest),
    DescribeLogDirs(DescribeLogDirsRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    InitProducerId(InitProducerIdRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    FindCoordinator(FindCoordinatorRequest),
    JoinGroup(JoinGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    SyncGroup(SyncGroupRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    DescribeProducers(DescribeProducersRequest),
    ListConfigResources(ListConfigResourcesRequest),
    DescribeClientQuotas(DescribeClientQuotasRequest),
    AlterClientQuotas(AlterClientQuotasRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    AddPartitionsToTxn(AddPartitionsToTxnRequest),
    AddOffsetsToTxn(AddOffsetsToTxnRequest),
    EndTxn(EndTxnRequest),
    WriteTxnMarkers(WriteTxnMarkersRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    DescribeTransactions(DescribeTransactionsRequest),
    ListTransactions(ListTransactionsRequest),
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
}

/// A decoded request body on the controller listener
/// ([`versions::CONTROLLER_APIS`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ControllerRequest {
    Fetch(FetchRequest),
    ApiVersions(ApiVersionsRequest),
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    CreatePartitions(CreatePartitionsRequest),
    ElectLeaders(ElectLeadersRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    AlterPartition(AlterPartitionRequest),
    DescribeCluster(DescribeClusterRequest),
    BrokerRegistration(BrokerRegistrationRequest),
    BrokerHeartbeat(BrokerHeartbeatRequest),
    FetchSnapshot(FetchSnapshotRequest),
    AllocateProducerIds(AllocateProducerIdsRequest),
    DescribeUserScramCredentials(DescribeUserScramCredentialsRequest),
    AlterUserScramCredentials(AlterUserScramCredentialsRequest),
    DescribeAcls(DescribeAclsRequest),
    CreateAcls(CreateAclsRequest),
    DeleteAcls(DeleteAclsRequest),
    AlterClientQuotas(AlterClientQuotasRequest),
    AlterPartitionReassignments(AlterPartitionReassignmentsRequest),
    ListPartitionReassignments(ListPartitionReassignmentsRequest),
    /// A client's request forwarded by a broker with the client's principal and address
    /// (Kafka's forwarding, KIP-590).
    Envelope(EnvelopeRequest),
}

/// A SASL request, answered by the connection's authenticator on every listener before (and
/// between) the listener's own requests.
#[derive(Debug, Clone, PartialEq)]
pub enum SaslRequest {
    Handshake(SaslHandshakeRequest),
    Authenticate(SaslAuthenticateRequest),
}

/// Whether `frame` is a SASL request (SaslHandshake or SaslAuthenticate), by its api key.
pub fn is_sasl(frame: &[u8]) -> bool {
    frame.len() >= 2
        && matches!(
            ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])),
            Ok(ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
        )
}

/// Decodes a SASL request (every listener serves the same SASL versions).
pub fn decode_sasl(frame: Bytes) -> Result<DecodedRequest<SaslRequest>, DecodeError> {
    decode_on(frame, ListenerKind::Broker, |api_key, version, buf| {
        Ok(match api_key {
            ApiKey::SaslHandshake => {
                SaslRequest::Handshake(SaslHandshakeRequest::decode(buf, version)?)
            }
            ApiKey::SaslAuthenticate => {
                SaslRequest::Authenticate(SaslAuthenticateRequest::decode(buf, version)?)
            }
            other => anyhow::bail!("{other:?} is not a SASL request"),
        })
    })
}

/// A request with its header; the body type depends on the listener (broker by default).
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedRequest<B = Request> {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: B,
}

impl<B> DecodedRequest<B> {
    pub fn api_version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Why a frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {len} bytes is shorter than a request header")]
    TooShort { len: usize },
    #[error("unknown api key {api_key}")]
    UnknownApiKey { api_key: i16, correlation_id: i32 },
    #[error("{api_key:?} version {api_version} is not supported")]
    UnsupportedVersion {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api_key:?} v{api_version} request: {source:#}")]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        correlation_id: i32,
        source: anyhow::Error,
    },
}

impl DecodeError {
    /// Whether the broker should still answer (only `ApiVersions` with an unsupported
    /// version, which gets the v0 fallback answer listing the supported versions).
    pub fn answerable_correlation_id(&self) -> Option<i32> {
        match self {
            DecodeError::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                correlation_id,
                ..
            } => Some(*correlation_id),
            _ => None,
        }
    }
}

const FIXED_HEADER_BYTES: usize = 8;

/// Decodes one frame (without its size prefix) received on the broker listener.
pub fn decode(frame: Bytes) -> Result<DecodedRequest, DecodeError> {
    decode_on(frame, ListenerKind::Broker, decode_body)
}

/// Decodes one frame (without its size prefix) received on the controller listener.
pub fn decode_controller(frame: Bytes) -> Result<DecodedRequest<ControllerRequest>, DecodeError> {
    decode_on(frame, ListenerKind::Controller, decode_controller_body)
}

fn decode_on<B>(
    frame: Bytes,
    kind: ListenerKind,
    decode_body: fn(ApiKey, i16, &mut Bytes) -> anyhow::Result<B>,
) -> Result<DecodedRequest<B>, DecodeError> {
    if frame.len() < FIXED_HEADER_BYTES {
        return Err(DecodeError::TooShort { len: frame.len() });
    }
    let mut fixed = &frame[..FIXED_HEADER_BYTES];
    let raw_key = fixed.get_i16();
    let api_version = fixed.get_i16();
    let correlation_id = fixed.get_i32();
    let api_key = ApiKey::try_from(raw_key).map_err(|()| DecodeError::UnknownApiKey {
        api_key: raw_key,
        correlation_id,
    })?;
    if !versions::is_served_on(kind, api_key, api_version) {
        return Err(DecodeError::UnsupportedVersion {
            api_key,
            api_version,
            correlation_id,
        });
    }
    let malformed = |source: anyhow::Error| DecodeError::Malformed {
        api_key,
        api_version,
        correlation_id,
        source,
    };
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, api_key.request_header_version(api_version))
        .map_err(malformed)?;
    let body = decode_body(api_key, api_version, &mut buf).map_err(malformed)?;
    // Trailing bytes are ignored, as Kafka does: clients send fields a newer schema version
    // defines, and librdkafka pads some requests.
    Ok(DecodedRequest {
        api_key,
        header,
        body,
    })
}

fn decode_body(api_key: ApiKey, version: i16, buf: &mut Bytes) -> anyhow::Result<Request> {
    Ok(match api_key {
        ApiKey::Produce => Request::Produce(ProduceRequest::decode(buf, version)?),
        ApiKey::Fetch => Request::Fetch(FetchRequest::decode(buf, version)?),
        ApiKey::ListOffsets => Request::ListOffsets(ListOffsetsRequest::decode(buf, version)?),
        ApiKey::Metadata => Request::Metadata(MetadataRequest::decode(buf, version)?),
        ApiKey::ApiVersions => Request::ApiVersions(ApiVersionsRequest::decode(buf, version)?),
        ApiKey::CreateTopics => Request::CreateTopics(CreateTopicsRequest::decode(buf, version)?),
        ApiKey::DeleteTopics => Request::DeleteTopics(DeleteTopicsRequest::decode(buf, version)?),
        ApiKey::DeleteRecords => {
            Request::DeleteRecords(DeleteRecordsRequest::decode(buf, version)?)
        }
        ApiKey::OffsetForLeaderEpoch => {
            Request::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::decode(buf, version)?)
        }
        ApiKey::DescribeConfigs => {
            Request::DescribeConfigs(DescribeConfigsRequest::decode(buf, version)?)
        }
        ApiKey::AlterConfigs => Request::AlterConfigs(AlterConfigsRequest::decode(buf, version)?),
        ApiKey::CreatePartitions => {
            Request::CreatePartitions(CreatePartitionsRequest::decode(buf, version)?)
        }
        ApiKey::IncrementalAlterConfigs => {
            Request::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::decode(buf, version)?)
        }
        ApiKey::ElectLeaders => Request::ElectLeaders(ElectLeadersRequest::decode(buf, version)?),
        ApiKey::AlterPartitionReassignments => Request::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::decode(buf, version)?,
        ),
        ApiKey::ListPartitionReassignments => Request::ListPartitionReassignments(
            ListPartitionReassignmentsRequest::decode(buf, version)?,
        ),
        ApiKey::DescribeCluster => {
            Request::DescribeCluster(DescribeClusterRequest::decode(buf, version)?)
        }
        ApiKey::DescribeTopicPartitions => {
            Request::DescribeTopicPartitions(DescribeTopicPartitionsRequest::decode(buf, version)?)
        }
        ApiKey::DescribeLogDirs => {
            Request::DescribeLogDirs(DescribeLogDirsRequest::decode(buf, version)?)
        }
        ApiKey::DescribeAcls => Request::DescribeAcls(DescribeAclsRequest::decode(buf, version)?),
        ApiKey::CreateAcls => Request::CreateAcls(CreateAclsRequest::decode(buf, version)?),
        ApiKey::DeleteAcls => Request::DeleteAcls(DeleteAclsRequest::decode(buf, version)?),
        ApiKey::InitProducerId => {
            Request::InitProducerId(InitProducerIdRequest::decode(buf, version)?)
        }
        ApiKey::OffsetCommit => Request::OffsetCommit(OffsetCommitRequest::decode(buf, version)?),
        ApiKey::OffsetFetch => Request::OffsetFetch(OffsetFetchRequest::decode(buf, version)?),
        ApiKey::FindCoordinator => {
            Request::FindCoordinator(FindCoordinatorRequest::decode(buf, version)?)
        }
        ApiKey::JoinGroup => Request::JoinGroup(JoinGroupRequest::decode(buf, version)?),
        ApiKey::Heartbeat => Request::Heartbeat(HeartbeatRequest::decode(buf, version)?),
        ApiKey::LeaveGroup => Request::LeaveGroup(LeaveGroupRequest::decode(buf, version)?),
        ApiKey::SyncGroup => Request::SyncGroup(SyncGroupRequest::decode(buf, version)?),
        ApiKey::DescribeGroups => {
            Request::DescribeGroups(DescribeGroupsRequest::decode(buf, version)?)
        }
        ApiKey::ListGroups => Request::ListGroups(ListGroupsRequest::decode(buf, version)?),
        ApiKey::DeleteGroups => Request::DeleteGroups(DeleteGroupsRequest::decode(buf, version)?),
        ApiKey::OffsetDelete => Request::OffsetDelete(OffsetDeleteRequest::decode(buf, version)?),
        ApiKey::DescribeProducers => {
            Request::DescribeProducers(DescribeProducersRequest::decode(buf, version)?)
        }
        ApiKey::ListConfigResources => {
            Request::ListConfigResources(ListConfigResourcesRequest::decode(buf, version)?)
        }
        ApiKey::DescribeClientQuotas => {
            Request::DescribeClientQuotas(DescribeClientQuotasRequest::decode(buf, version)?)
        }
        ApiKey::AlterClientQuotas => {
            Request::AlterClientQuotas(AlterClientQuotasRequest::decode(buf, version)?)
        }
        ApiKey::DescribeUserScramCredentials => Request::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::decode(buf, version)?,
        ),
        ApiKey::AddPartitionsToTxn => {
            Request::AddPartitionsToTxn(AddPartitionsToTxnRequest::decode(buf, version)?)
        }
        ApiKey::AddOffsetsToTxn => {
            Request::AddOffsetsToTxn(AddOffsetsToTxnRequest::decode(buf, version)?)
        }
        ApiKey::EndTxn => Request::EndTxn(EndTxnRequest::decode(buf, version)?),
        ApiKey::WriteTxnMarkers => {
            Request::WriteTxnMarkers(WriteTxnMarkersRequest::decode(buf, version)?)
        }
        ApiKey::TxnOffsetCommit => {
            Request::TxnOffsetCommit(TxnOffsetCommitRequest::decode(buf, version)?)
        }
        ApiKey::DescribeTransactions => {
            Request::DescribeTransactions(DescribeTransactionsRequest::decode(buf, version)?)
        }
        ApiKey::ListTransactions => {
            Request::ListTransactions(ListTransactionsRequest::decode(buf, version)?)
        }
        ApiKey::AlterUserScramCredentials => Request::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::decode(buf, version)?,
        ),
        other => anyhow::bail!("{other:?} is not served"),
    })
}

fn decode_controller_body(
    api_key: ApiKey,
    version: i16,
    buf: &mut Bytes,
) -> anyhow::Result<ControllerRequest> {
    use ControllerRequest as R;
    Ok(match api_key {
        ApiKey::Fetch => R::Fetch(FetchRequest::decode(buf, version)?),
        ApiKey::ApiVersions => R::ApiVersions(ApiVersionsRequest::decode(buf, version)?),
        ApiKey::CreateTopics => R::CreateTopics(CreateTopicsRequest::decode(buf, version)?),
        ApiKey::DeleteTopics => R::DeleteTopics(DeleteTopicsRequest::decode(buf, version)?),
        ApiKey::CreatePartitions => {
            R::CreatePartitions(CreatePartitionsRequest::decode(buf, version)?)
        }
        ApiKey::ElectLeaders => R::ElectLeaders(ElectLeadersRequest::decode(buf, version)?),
        ApiKey::AlterPartitionReassignments => R::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::decode(buf, version)?,
        ),
        ApiKey::ListPartitionReassignments => {
            R::ListPartitionReassignments(ListPartitionReassignmentsRequest::decode(buf, version)?)
        }
        ApiKey::IncrementalAlterConfigs => {
            R::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::decode(buf, version)?)
        }
        ApiKey::AlterPartition => R::AlterPartition(AlterPartitionRequest::decode(buf, version)?),
        ApiKey::DescribeCluster => {
            R::DescribeCluster(DescribeClusterRequest::decode(buf, version)?)
        }
        ApiKey::BrokerRegistration => {
            R::BrokerRegistration(BrokerRegistrationRequest::decode(buf, version)?)
        }
        ApiKey::BrokerHeartbeat => {
            R::BrokerHeartbeat(BrokerHeartbeatRequest::decode(buf, version)?)
        }
        ApiKey::FetchSnapshot => R::FetchSnapshot(FetchSnapshotRequest::decode(buf, version)?),
        ApiKey::AllocateProducerIds => {
            R::AllocateProducerIds(AllocateProducerIdsRequest::decode(buf, version)?)
        }
        ApiKey::DescribeUserScramCredentials => R::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::decode(buf, version)?,
        ),
        ApiKey::AlterUserScramCredentials => {
            R::AlterUserScramCredentials(AlterUserScramCredentialsRequest::decode(buf, version)?)
        }
        ApiKey::DescribeAcls => R::DescribeAcls(DescribeAclsRequest::decode(buf, version)?),
        ApiKey::CreateAcls => R::CreateAcls(CreateAclsRequest::decode(buf, version)?),
        ApiKey::DeleteAcls => R::DeleteAcls(DeleteAclsRequest::decode(buf, version)?),
        ApiKey::AlterClientQuotas => {
            R::AlterClientQuotas(AlterClientQuotasRequest::decode(buf, version)?)
        }
        ApiKey::Envelope => R::Envelope(EnvelopeRequest::decode(buf, version)?),
        other => anyhow::bail!("{other:?} is not served on the controller listener"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encode_request<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    // Shows: a well-formed request decodes with its header (round trip through the codec).
    #[test]
    fn decodes_metadata() {
        let frame = encode_request(ApiKey::Metadata, 12, &MetadataRequest::default());
        let decoded = decode(frame).unwrap();
        assert_eq!(decoded.api_key, ApiKey::Metadata);
        assert_eq!(decoded.correlation_id(), 42);
        assert!(matches!(decoded.body, Request::Metadata(_)));
    }

    // Shows (issue 20): the versions Kafka 4.4 added decode with their new fields — Fetch v18's
    // tagged HighWatermark, Produce v13's topic ids, ListConfigResources v1's resource types,
    // DescribeProducers v0 — and Produce v2, advertised but removed in Kafka 4.0, is refused.
    #[test]
    fn decodes_kafka_4_4_versions() {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::produce_request::TopicProduceData;
        let id = uuid::Uuid::from_u128(7);
        let fetch = FetchRequest::default().with_topics(vec![FetchTopic::default()
            .with_topic_id(id)
            .with_partitions(vec![FetchPartition::default()
                .with_partition(3)
                .with_high_watermark(41)])]);
        match decode(encode_request(ApiKey::Fetch, 18, &fetch))
            .unwrap()
            .body
        {
            Request::Fetch(r) => {
                assert_eq!(r.topics[0].topic_id, id);
                assert_eq!(r.topics[0].partitions[0].high_watermark, 41);
            }
            other => panic!("{other:?}"),
        }
        let produce = ProduceRequest::default()
            .with_acks(-1)
            .with_topic_data(vec![TopicProduceData::default().with_topic_id(id)]);
        match decode(encode_request(ApiKey::Produce, 13, &produce))
            .unwrap()
            .body
        {
            Request::Produce(r) => assert_eq!(r.topic_data[0].topic_id, id),
            other => panic!("{other:?}"),
        }
        let list = ListConfigResourcesRequest::default().with_resource_types(vec![2, 4]);
        match decode(encode_request(ApiKey::ListConfigResources, 1, &list))
            .unwrap()
            .body
        {
            Request::ListConfigResources(r) => assert_eq!(r.resource_types, vec![2, 4]),
            other => panic!("{other:?}"),
        }
        let describe = DescribeProducersRequest::default();
        assert!(matches!(
            decode(encode_request(ApiKey::DescribeProducers, 0, &describe))
                .unwrap()
                .body,
            Request::DescribeProducers(_)
        ));
        let mut v2 = BytesMut::from(&encode_request(ApiKey::Produce, 3, &produce)[..]);
        v2[2..4].copy_from_slice(&2i16.to_be_bytes());
        assert!(matches!(
            decode(v2.freeze()),
            Err(DecodeError::UnsupportedVersion { api_version: 2, .. })
        ));
    }

    // Shows: an unsupported ApiVersions version is answerable (KIP-511 v0 fallback), an
    // unsupported version of anything else is not.
    #[test]
    fn unsupported_versions() {
        let mut frame = BytesMut::new();
        frame.put_i16(ApiKey::ApiVersions as i16);
        frame.put_i16(99);
        frame.put_i32(7);
        let err = decode(frame.freeze()).unwrap_err();
        assert_eq!(err.answerable_correlation_id(), Some(7));

        let mut frame = BytesMut::new();
        frame.put_i16(ApiKey::Produce as i16);
        frame.put_i16(1);
        frame.put_i32(8);
        let err = decode(frame.freeze()).unwrap_err();
        assert!(matches!(err, DecodeError::UnsupportedVersion { .. }));
        assert_eq!(err.answerable_correlation_id(), None);
    }

    // Shows: the controller listener decodes broker-to-controller RPCs the broker listener
    // refuses, and refuses client APIs it does not serve (KIP-919: per-listener API sets).
    #[test]
    fn controller_listener_has_its_own_api_set() {
        let body = BrokerHeartbeatRequest::default().with_broker_epoch(5);
        let frame = encode_request(ApiKey::BrokerHeartbeat, 1, &body);
        let decoded = decode_controller(frame.clone()).unwrap();
        assert_eq!(decoded.correlation_id(), 42);
        assert!(matches!(
            decoded.body,
            ControllerRequest::BrokerHeartbeat(ref r) if r.broker_epoch == 5
        ));
        assert!(matches!(
            decode(frame),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        let frame = encode_request(ApiKey::Metadata, 12, &MetadataRequest::default());
        assert!(matches!(
            decode_controller(frame),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
    }

    // Shows (KIP-554): DescribeUserScramCredentials and AlterUserScramCredentials v0 decode on
    // both listeners, as Kafka 4.4 serves them on both; the salted password comes through as
    // sent (the controller derives the keys from it).
    #[test]
    fn decodes_scram_credential_requests_on_both_listeners() {
        use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
        use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
        let alter = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_static_str("alice"))
                .with_mechanism(2)
                .with_iterations(8192)
                .with_salt(Bytes::from_static(b"salt"))
                .with_salted_password(Bytes::from_static(&[7; 64])),
        ]);
        let frame = encode_request(ApiKey::AlterUserScramCredentials, 0, &alter);
        match decode(frame.clone()).unwrap().body {
            Request::AlterUserScramCredentials(r) => assert_eq!(r, alter),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_controller(frame).unwrap().body,
            ControllerRequest::AlterUserScramCredentials(ref r) if r.upsertions[0].iterations == 8192
        ));
        let describe = DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
            UserName::default().with_name(StrBytes::from_static_str("alice")),
        ]));
        let frame = encode_request(ApiKey::DescribeUserScramCredentials, 0, &describe);
        assert!(matches!(
            decode(frame.clone()).unwrap().body,
            Request::DescribeUserScramCredentials(_)
        ));
        assert!(matches!(
            decode_controller(frame).unwrap().body,
            ControllerRequest::DescribeUserScramCredentials(_)
        ));
    }

    // Shows: DeleteRecords v0-2 decode on the broker listener (v2 is flexible), with the -1
    // offset (the high watermark) kept as the client sent it (issue 20).
    #[test]
    fn decodes_delete_records() {
        use kafka_protocol::messages::delete_records_request::{
            DeleteRecordsPartition, DeleteRecordsTopic,
        };
        use kafka_protocol::messages::TopicName;
        let body = DeleteRecordsRequest::default()
            .with_timeout_ms(1500)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(-1),
                    DeleteRecordsPartition::default()
                        .with_partition_index(3)
                        .with_offset(42),
                ])]);
        for version in 0..=2 {
            let decoded = decode(encode_request(ApiKey::DeleteRecords, version, &body)).unwrap();
            assert_eq!(
                decoded.body,
                Request::DeleteRecords(body.clone()),
                "v{version}"
            );
        }
        let mut frame = BytesMut::new();
        frame.put_i16(ApiKey::DeleteRecords as i16);
        frame.put_i16(3);
        frame.put_i32(9);
        assert!(matches!(
            decode(frame.freeze()),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
    }

    // Shows: garbage and truncated bodies are errors, never panics.
    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(
            decode(Bytes::from_static(b"abc")),
            Err(DecodeError::TooShort { .. })
        ));
        let mut frame = BytesMut::new();
        frame.put_i16(ApiKey::Metadata as i16);
        frame.put_i16(12);
        frame.put_i32(1);
        frame.put_slice(&[0xff; 3]);
        assert!(matches!(
            decode(frame.freeze()),
            Err(DecodeError::Malformed { .. })
        ));
        let mut frame = BytesMut::new();
        frame.put_i16(1000);
        frame.put_i16(0);
        frame.put_i32(1);
        assert!(matches!(
            decode(frame.freeze()),
            Err(DecodeError::UnknownApiKey { api_key: 1000, .. })
        ));
    }
}
