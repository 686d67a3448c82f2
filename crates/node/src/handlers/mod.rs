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
pub mod refusals;
pub(crate) mod replica_log_info;
pub(crate) mod scram_credentials;

use std::sync::Arc;

use bytes::Bytes;
use keel_wire::kafka_protocol::protocol::{Encodable, StrBytes};
use keel_wire::request::{DecodedRequest, Request};
use keel_wire::response;

use crate::broker::Broker;
pub use crate::connection::Reply;

/// Handles one request of `request_bytes` bytes; a client over its quota gets the throttle time
/// in the response and its connection is muted for it ([`crate::quotas`]).
pub async fn dispatch(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    session: &mut crate::connection::Session,
    request_bytes: usize,
) -> anyhow::Result<Reply> {
    let (reply, throttle_ms) = answer(broker, request, session, request_bytes).await?;
    if throttle_ms > 0 {
        session.muted_until =
            Some(tokio::time::Instant::now() + std::time::Duration::from_millis(throttle_ms));
    }
    Ok(reply)
}

/// A request's reply and how long its client is throttled (ms).
async fn answer(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    session: &crate::connection::Session,
    request_bytes: usize,
) -> anyhow::Result<(Reply, u64)> {
    use crate::quotas::QuotaKind;
    let peer = session.peer.as_str();
    let listener = &*session.listener;
    let key = request.api_key;
    let version = request.api_version();
    let correlation_id = request.correlation_id();
    let client_id = request.header.client_id.clone();
    let client = client_id.as_deref().unwrap_or_default();
    let encode = |body: &dyn Answer| {
        broker.refusals.note(key, client, peer, body);
        body.encode_response(key, version, correlation_id)
    };
    let bytes = match request.body {
        Request::ApiVersions(_) => encode(&api_versions::handle())?,
        Request::Metadata(r) => {
            encode(&metadata::handle(broker, session, r, version, listener).await)?
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
                    return Ok((Reply::Send(encode(&body)?), throttle));
                }
                produce::ProduceOutcome::Silent => return Ok((Reply::Nothing, throttle)),
                produce::ProduceOutcome::Close(reason) => return Ok((Reply::Close(reason), 0)),
            }
        }
        Request::Fetch(r) => {
            let consumer = fetch::is_consumer(&r, version);
            let mut body = fetch::handle(broker, session, r, version, listener).await;
            let mut throttle = 0;
            if consumer {
                let bytes = fetch::record_bytes(&body) as f64;
                throttle = broker.record_quota(&session.principal, client, QuotaKind::Fetch, bytes);
                if throttle > 0 {
                    // The records are not sent: they do not count (Kafka's unrecord).
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
        Request::ListOffsets(r) => encode(&list_offsets::handle(broker, session, r, version))?,
        Request::OffsetForLeaderEpoch(r) => {
            encode(&offset_for_leader_epoch::handle(broker, session, r))?
        }
        // The controller's answer carries the client's controller_mutation_rate throttle.
        Request::CreateTopics(r) => {
            let body = create_topics::handle(broker, session, r, version, client).await;
            let throttle = u64::try_from(body.throttle_time_ms).unwrap_or(0);
            return Ok((Reply::Send(encode(&body)?), throttle));
        }
        Request::DeleteTopics(r) => {
            let body = delete_topics::handle(broker, session, r, version, client).await;
            let throttle = u64::try_from(body.throttle_time_ms).unwrap_or(0);
            return Ok((Reply::Send(encode(&body)?), throttle));
        }
        Request::DeleteRecords(r) => encode(&delete_records::handle(broker, session, r).await)?,
        Request::CreatePartitions(r) => {
            let body = create_partitions::handle(broker, session, r, version, client).await;
            let throttle = u64::try_from(body.throttle_time_ms).unwrap_or(0);
            return Ok((Reply::Send(encode(&body)?), throttle));
        }
        Request::DescribeConfigs(r) => encode(&configs::describe(broker, session, r, version))?,
        Request::AlterConfigs(r) => encode(&configs::alter(broker, session, r).await)?,
        Request::IncrementalAlterConfigs(r) => {
            encode(&configs::incremental_alter(broker, session, r).await)?
        }
        Request::ElectLeaders(r) => {
            encode(&elect_leaders::handle(broker, session, r, version).await)?
        }
        Request::DescribeCluster(r) => encode(&describe_cluster::handle(
            broker, session, r, version, listener,
        ))?,
        Request::DescribeTopicPartitions(r) => {
            encode(&describe_topic_partitions::handle(broker, session, r))?
        }
        Request::DescribeLogDirs(r) => encode(&describe_log_dirs::handle(broker, session, r))?,
        Request::DescribeAcls(r) => encode(&acls::describe(broker, session, r))?,
        Request::CreateAcls(r) => encode(&acls::create(broker, session, r, version).await)?,
        Request::DeleteAcls(r) => encode(&acls::delete(broker, session, r, version).await)?,
        Request::InitProducerId(r) => encode(&init_producer_id::handle(broker, session, r).await)?,
        Request::FindCoordinator(r) => {
            encode(&find_coordinator::handle(broker, session, r, version, listener).await)?
        }
        Request::JoinGroup(r) => {
            let caller = groups::Caller {
                client_id: client,
                peer,
                session,
            };
            encode(&groups::join(broker, r, version, caller).await)?
        }
        Request::SyncGroup(r) => encode(&groups::sync(broker, session, r, version).await)?,
        Request::Heartbeat(r) => encode(&groups::heartbeat(broker, session, r))?,
        Request::LeaveGroup(r) => encode(&groups::leave(broker, session, r, version).await)?,
        Request::ListGroups(r) => encode(&groups::list(broker, session, r))?,
        Request::DescribeGroups(r) => encode(&groups::describe(broker, session, r, version))?,
        Request::DeleteGroups(r) => encode(&groups::delete(broker, session, r).await)?,
        Request::OffsetCommit(r) => encode(&offsets::commit(broker, session, r, version).await)?,
        Request::OffsetFetch(r) => encode(&offsets::fetch(broker, session, r, version))?,
        Request::OffsetDelete(r) => encode(&offsets::delete(broker, session, r).await)?,
        Request::DescribeProducers(r) => encode(&describe_producers::handle(broker, session, r))?,
        Request::ListConfigResources(r) => {
            encode(&list_config_resources::handle(broker, session, r, version))?
        }
        Request::DescribeClientQuotas(r) => encode(&client_quotas::describe(broker, session, r))?,
        Request::AlterClientQuotas(r) => {
            encode(&client_quotas::alter(broker, session, r, version).await)?
        }
        Request::DescribeUserScramCredentials(r) => {
            encode(&scram_credentials::describe(broker, session, r))?
        }
        Request::AlterUserScramCredentials(r) => {
            encode(&scram_credentials::alter(broker, session, r, version).await)?
        }
    };
    Ok((Reply::Send(bytes), 0))
}

/// A response body `dispatch` can log the refusal of and encode.
trait Answer: ErasedEncode + refusals::Refusal {}

impl<T: ErasedEncode + refusals::Refusal> Answer for T {}

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
fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
