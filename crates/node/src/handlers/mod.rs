//! One module per Kafka API. Each handler takes the broker and the decoded request and
//! returns the response body; [`dispatch`] encodes it with the right header.

pub(crate) mod acls;
mod api_versions;
pub(crate) mod authz;
pub(crate) mod client_quotas;
pub(crate) mod configs;
pub(crate) mod create_partitions;
pub(crate) mod create_topics;
pub mod delete_records;
pub(crate) mod delete_topics;
mod describe_cluster;
mod describe_log_dirs;
mod describe_producers;
pub mod describe_topic_partitions;
mod elect_leaders;
mod fetch;
mod find_coordinator;
mod groups;
mod init_producer_id;
mod list_config_resources;
mod list_offsets;
mod metadata;
mod offset_for_leader_epoch;
mod offsets;
mod produce;
mod reassignments;
pub mod refusals;
pub(crate) mod replica_log_info;
pub(crate) mod scram_credentials;
pub(crate) mod txn;

use std::sync::Arc;

use bytes::Bytes;
use keel_wire::kafka_protocol::protocol::{Encodable, StrBytes};
use keel_wire::request::{DecodedRequest, Request};
use keel_wire::response;

use crate::broker::Broker;
pub use crate::connection::Reply;

/// Handles one request of `request_bytes` bytes; a client over its quota gets the throttle time
/// in the response and its connection is muted for it ([`crate::quotas`]).
///
/// `time` is the handler time the request has taken (its decoding included; the caller polls
/// this future through [`crate::quotas::HandlerTime::poll`]): `request_percentage` counts it.
pub async fn dispatch(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    session: &mut crate::connection::Session,
    request_bytes: usize,
    time: &crate::quotas::HandlerTime,
) -> anyhow::Result<Reply> {
    let client_id = request.header.client_id.clone();
    let exempt = exempt_from_request_quota(&request);
    let (reply, throttle_ms) = answer(broker, request, session, request_bytes, time).await?;
    // The encoding after the throttle was decided counts too, without throttling this answer
    // (Kafka's `recordNoThrottle` of network thread time).
    if !exempt {
        broker.record_quota(
            &session.principal,
            client_id.as_deref().unwrap_or_default(),
            crate::quotas::QuotaKind::Request,
            crate::quotas::percentage_seconds(time.take_ns()),
        );
    }
    if throttle_ms > 0 {
        session.muted_until =
            Some(tokio::time::Instant::now() + std::time::Duration::from_millis(throttle_ms));
    }
    Ok(reply)
}

/// Requests `request_percentage` does not count, as Kafka exempts them: ApiVersions (the
/// handshake) and followers' fetches (replication).
fn exempt_from_request_quota(request: &DecodedRequest) -> bool {
    match &request.body {
        Request::ApiVersions(_) => true,
        Request::Fetch(r) => !fetch::is_consumer(r, request.api_version()),
        _ => false,
    }
}

/// A request's reply and how long its client is throttled (ms): by its `request_percentage`
/// (the handler's `time` until the answer is encoded, as Kafka records it when it sends the
/// response), by a byte rate for Produce and Fetch, or by the controller's mutation quota.
async fn answer(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    session: &crate::connection::Session,
    request_bytes: usize,
    time: &crate::quotas::HandlerTime,
) -> anyhow::Result<(Reply, u64)> {
    use crate::quotas::QuotaKind;
    let peer = session.peer.as_str();
    let listener = &*session.listener;
    let key = request.api_key;
    let version = request.api_version();
    let correlation_id = request.correlation_id();
    let client_id = request.header.client_id.clone();
    let client = client_id.as_deref().unwrap_or_default();
    // The request quota's throttle, recorded once, when the answer is made. ApiVersions (the
    // handshake) and followers' fetches (replication) are exempt, as in Kafka.
    let request_throttle = || {
        broker.record_quota(
            &session.principal,
            client,
            QuotaKind::Request,
            crate::quotas::percentage_seconds(time.take_ns()),
        )
    };
    let throttled = std::sync::atomic::AtomicU64::new(0);
    let encode = |body: &mut dyn Answer| {
        let throttle = request_throttle().max(u64::try_from(body.throttle_time_ms()).unwrap_or(0));
        body.set_throttle_time_ms(i32::try_from(throttle).unwrap_or(i32::MAX));
        throttled.store(throttle, std::sync::atomic::Ordering::Relaxed);
        broker.refusals.note(key, client, peer, body);
        body.encode_response(key, version, correlation_id)
    };
    let bytes = match request.body {
        Request::ApiVersions(_) => {
            let body = api_versions::handle(broker);
            broker.refusals.note(key, client, peer, &body);
            body.encode_response(key, version, correlation_id)?
        }
        Request::Metadata(r) => {
            encode(&mut metadata::handle(broker, session, r, version, listener, client).await)?
        }
        Request::Produce(r) => {
            let outcome = produce::handle(broker, session, r, version, listener).await;
            // Kafka counts the whole request against producer_byte_rate.
            let throttle = broker.record_quota(
                &session.principal,
                client,
                QuotaKind::Produce,
                request_bytes as f64,
            );
            match outcome {
                produce::ProduceOutcome::Respond(mut body) => {
                    body.throttle_time_ms = i32::try_from(throttle).unwrap_or(i32::MAX);
                    let bytes = encode(&mut body)?;
                    return Ok((Reply::Send(bytes), throttled.into_inner()));
                }
                produce::ProduceOutcome::Silent => {
                    return Ok((Reply::Nothing, throttle.max(request_throttle())))
                }
                produce::ProduceOutcome::Close(reason) => return Ok((Reply::Close(reason), 0)),
            }
        }
        Request::Fetch(r) => {
            let consumer = fetch::is_consumer(&r, version);
            let mut body = fetch::handle(broker, session, r, version, listener).await;
            let mut throttle = 0;
            if consumer {
                let bytes = fetch::record_bytes(&body) as f64;
                throttle = broker
                    .record_quota(&session.principal, client, QuotaKind::Fetch, bytes)
                    .max(request_throttle());
                if throttle > 0 {
                    // Throttled by either quota, the records are not sent and do not count
                    // (Kafka's unrecord).
                    broker.unrecord_quota(&session.principal, client, QuotaKind::Fetch, bytes);
                    body = fetch::throttled(body, i32::try_from(throttle).unwrap_or(i32::MAX));
                }
            }
            broker.refusals.note(key, client, peer, &body);
            // Record sets leave as their own parts, uncopied (vectored write).
            return Ok((
                Reply::SendParts(response::encode_fetch(version, correlation_id, body)?),
                throttle,
            ));
        }
        Request::ListOffsets(r) => encode(&mut list_offsets::handle(broker, session, r, version))?,
        Request::OffsetForLeaderEpoch(r) => {
            encode(&mut offset_for_leader_epoch::handle(broker, session, r))?
        }
        // The controller's answer carries the client's controller_mutation_rate throttle.
        Request::CreateTopics(r) => {
            encode(&mut create_topics::handle(broker, session, r, version, client).await)?
        }
        Request::DeleteTopics(r) => {
            encode(&mut delete_topics::handle(broker, session, r, version, client).await)?
        }
        Request::DeleteRecords(r) => encode(&mut delete_records::handle(broker, session, r).await)?,
        Request::CreatePartitions(r) => {
            encode(&mut create_partitions::handle(broker, session, r, version, client).await)?
        }
        Request::DescribeConfigs(r) => encode(&mut configs::describe(broker, session, r, version))?,
        Request::AlterConfigs(r) => encode(&mut configs::alter(broker, session, r).await)?,
        Request::IncrementalAlterConfigs(r) => {
            encode(&mut configs::incremental_alter(broker, session, r).await)?
        }
        Request::ElectLeaders(r) => {
            encode(&mut elect_leaders::handle(broker, session, r, version).await)?
        }
        Request::AlterPartitionReassignments(r) => {
            encode(&mut reassignments::alter(broker, session, r, version).await)?
        }
        Request::ListPartitionReassignments(r) => {
            encode(&mut reassignments::list(broker, session, r))?
        }
        Request::DescribeCluster(r) => encode(&mut describe_cluster::handle(
            broker, session, r, version, listener,
        ))?,
        Request::DescribeTopicPartitions(r) => {
            encode(&mut describe_topic_partitions::handle(broker, session, r))?
        }
        Request::DescribeLogDirs(r) => encode(&mut describe_log_dirs::handle(broker, session, r))?,
        Request::DescribeAcls(r) => encode(&mut acls::describe(broker, session, r))?,
        Request::CreateAcls(r) => encode(&mut acls::create(broker, session, r, version).await)?,
        Request::DeleteAcls(r) => encode(&mut acls::delete(broker, session, r, version).await)?,
        Request::InitProducerId(r) => {
            encode(&mut init_producer_id::handle(broker, session, r, version).await)?
        }
        Request::FindCoordinator(r) => {
            encode(&mut find_coordinator::handle(broker, session, r, version, listener).await)?
        }
        Request::JoinGroup(r) => {
            let caller = groups::Caller {
                client_id: client,
                peer,
                session,
            };
            encode(&mut groups::join(broker, r, version, caller).await)?
        }
        Request::SyncGroup(r) => encode(&mut groups::sync(broker, session, r, version).await)?,
        Request::Heartbeat(r) => encode(&mut groups::heartbeat(broker, session, r))?,
        Request::LeaveGroup(r) => encode(&mut groups::leave(broker, session, r, version).await)?,
        Request::ListGroups(r) => encode(&mut groups::list(broker, session, r))?,
        Request::DescribeGroups(r) => encode(&mut groups::describe(broker, session, r, version))?,
        Request::DeleteGroups(r) => encode(&mut groups::delete(broker, session, r).await)?,
        Request::OffsetCommit(r) => {
            encode(&mut offsets::commit(broker, session, r, version).await)?
        }
        Request::OffsetFetch(r) => encode(&mut offsets::fetch(broker, session, r, version))?,
        Request::OffsetDelete(r) => encode(&mut offsets::delete(broker, session, r).await)?,
        Request::DescribeProducers(r) => {
            encode(&mut describe_producers::handle(broker, session, r))?
        }
        Request::ListConfigResources(r) => encode(&mut list_config_resources::handle(
            broker, session, r, version,
        ))?,
        Request::DescribeClientQuotas(r) => {
            encode(&mut client_quotas::describe(broker, session, r))?
        }
        Request::AlterClientQuotas(r) => {
            encode(&mut client_quotas::alter(broker, session, r, version).await)?
        }
        Request::DescribeUserScramCredentials(r) => {
            encode(&mut scram_credentials::describe(broker, session, r))?
        }
        Request::AlterUserScramCredentials(r) => {
            encode(&mut scram_credentials::alter(broker, session, r, version).await)?
        }
        Request::AddPartitionsToTxn(r) => {
            encode(&mut txn::add_partitions(broker, session, r, version).await)?
        }
        Request::AddOffsetsToTxn(r) => {
            encode(&mut txn::add_offsets(broker, session, r, version).await)?
        }
        Request::EndTxn(r) => encode(&mut txn::end(broker, session, r, version).await)?,
        Request::WriteTxnMarkers(r) => encode(&mut txn::write_markers(broker, session, r).await)?,
        Request::TxnOffsetCommit(r) => {
            encode(&mut txn::txn_offset_commit(broker, session, r, version).await)?
        }
        Request::DescribeTransactions(r) => encode(&mut txn::describe(broker, session, r))?,
        Request::ListTransactions(r) => encode(&mut txn::list(broker, session, r, version))?,
    };
    Ok((Reply::Send(bytes), throttled.into_inner()))
}

/// A response body `dispatch` can log the refusal of, throttle and encode.
trait Answer: ErasedEncode + refusals::Refusal + ThrottleTime {}

impl<T: ErasedEncode + refusals::Refusal + ThrottleTime> Answer for T {}

/// A response's `throttle_time_ms` (KIP-219).
trait ThrottleTime {
    fn throttle_time_ms(&self) -> i32;
    fn set_throttle_time_ms(&mut self, ms: i32);
}

/// Every broker response carries `throttle_time_ms` (in the versions that have it).
macro_rules! throttle_time {
    ($($t:ident),* $(,)?) => {$(
        impl ThrottleTime for keel_wire::kafka_protocol::messages::$t {
            fn throttle_time_ms(&self) -> i32 {
                self.throttle_time_ms
            }
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = ms;
            }
        }
    )*};
}

throttle_time!(
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
    ApiVersionsResponse,
    MetadataResponse,
    ProduceResponse,
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DeleteRecordsResponse,
    CreatePartitionsResponse,
    DescribeConfigsResponse,
    AlterConfigsResponse,
    IncrementalAlterConfigsResponse,
    ElectLeadersResponse,
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
    DescribeLogDirsResponse,
    DescribeAclsResponse,
    CreateAclsResponse,
    DeleteAclsResponse,
    InitProducerIdResponse,
    FindCoordinatorResponse,
    JoinGroupResponse,
    SyncGroupResponse,
    HeartbeatResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    DescribeGroupsResponse,
    DeleteGroupsResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    OffsetDeleteResponse,
    DescribeProducersResponse,
    ListConfigResourcesResponse,
    DescribeClientQuotasResponse,
    AlterClientQuotasResponse,
    DescribeUserScramCredentialsResponse,
    AlterUserScramCredentialsResponse,
    AddPartitionsToTxnResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
);

/// WriteTxnMarkers (broker to broker) has no `throttle_time_ms`, and is never throttled.
impl ThrottleTime for keel_wire::kafka_protocol::messages::WriteTxnMarkersResponse {
    fn throttle_time_ms(&self) -> i32 {
        0
    }
    fn set_throttle_time_ms(&mut self, _ms: i32) {}
}

/// Lets `dispatch` encode any response body through one closure.
trait ErasedEncode {
    fn encode_response(
        &self,
        key: keel_wire::kafka_protocol::messages::ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> anyhow::Result<Bytes>;
}

impl<T: Encodable> ErasedEncode for T {
    fn encode_response(
        &self,
        key: keel_wire::kafka_protocol::messages::ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> anyhow::Result<Bytes> {
        response::encode(key, version, correlation_id, self)
    }
}

/// The newest CreateTopics version a broker uses for the cluster's own topics
/// (`__consumer_offsets`): versions up to 5 cannot be refused by a controller mutation quota,
/// only throttled.
pub(crate) const INTERNAL_CREATE_TOPICS_VERSION_MAX: i16 = 5;

/// A forwarded request that could not reach the controller: `NOT_CONTROLLER` (clients retry
/// it after refreshing metadata), with the reason.
pub(crate) fn controller_unavailable(e: crate::client::ClientError) -> crate::error::ApiError {
    use keel_wire::ResponseError;
    match e {
        // The controller refused the envelope itself (this broker may not forward, say): the
        // client gets that error. NOT_CONTROLLER from every voter stays NOT_CONTROLLER.
        crate::client::ClientError::Envelope(code) => crate::error::ApiError::new(
            ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError),
            format!("the controller refused the request this broker forwarded: {e}"),
        ),
        e => crate::error::ApiError::new(
            ResponseError::NotController,
            format!("the controller is not reachable: {e}"),
        ),
    }
}

/// The client a request is forwarded to the controller for (in an Envelope).
pub(crate) fn forwarded_for<'a>(
    session: &'a crate::connection::Session,
    client_id: &'a str,
) -> crate::cluster::controller_channel::ForwardedFor<'a> {
    crate::cluster::controller_channel::ForwardedFor {
        principal: &session.principal,
        client_id,
        peer: &session.peer,
    }
}

/// The error for a partition this broker does not host: `NOT_LEADER_OR_FOLLOWER` when it
/// exists (another broker has it), `UNKNOWN_TOPIC_OR_PARTITION` otherwise.
pub(crate) fn missing_partition_error(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> keel_wire::ResponseError {
    let exists = broker
        .topic(topic)
        .is_some_and(|t| t.partitions.iter().any(|p| p.index == index));
    if exists {
        keel_wire::ResponseError::NotLeaderOrFollower
    } else {
        keel_wire::ResponseError::UnknownTopicOrPartition
    }
}

/// A `StrBytes` from an owned string.
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
