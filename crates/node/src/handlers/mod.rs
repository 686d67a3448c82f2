//! One module per Kafka API. Each handler takes the broker and the decoded request and
//! returns the response body; [`dispatch`] encodes it with the right header.

mod api_versions;
mod configs;
mod create_partitions;
mod create_topics;
mod delete_topics;
mod describe_cluster;
mod fetch;
mod list_offsets;
mod metadata;
mod offset_for_leader_epoch;
mod produce;

use std::sync::Arc;

use bytes::Bytes;
use keel_wire::kafka_protocol::protocol::{Encodable, StrBytes};
use keel_wire::request::{DecodedRequest, Request};
use keel_wire::response;

use crate::broker::Broker;
pub use crate::connection::Reply;

/// Handles one request.
pub async fn dispatch(broker: &Arc<Broker>, request: DecodedRequest) -> anyhow::Result<Reply> {
    let key = request.api_key;
    let version = request.api_version();
    let correlation_id = request.correlation_id();
    let encode = |body: &dyn ErasedEncode| body.encode_response(key, version, correlation_id);
    let bytes = match request.body {
        Request::ApiVersions(_) => encode(&api_versions::handle())?,
        Request::Metadata(r) => encode(&metadata::handle(broker, r, version))?,
        Request::Produce(r) => match produce::handle(broker, r, version) {
            produce::ProduceOutcome::Respond(body) => encode(&body)?,
            produce::ProduceOutcome::Silent => return Ok(Reply::Nothing),
            produce::ProduceOutcome::Close(reason) => return Ok(Reply::Close(reason)),
        },
        Request::Fetch(r) => encode(&fetch::handle(broker, r, version).await)?,
        Request::ListOffsets(r) => encode(&list_offsets::handle(broker, r, version))?,
        Request::OffsetForLeaderEpoch(r) => encode(&offset_for_leader_epoch::handle(broker, r))?,
        Request::CreateTopics(r) => encode(&create_topics::handle(broker, r, version))?,
        Request::DeleteTopics(r) => encode(&delete_topics::handle(broker, r, version))?,
        Request::CreatePartitions(r) => encode(&create_partitions::handle(broker, r))?,
        Request::DescribeConfigs(r) => encode(&configs::describe(broker, r, version))?,
        Request::AlterConfigs(r) => encode(&configs::alter(broker, r))?,
        Request::IncrementalAlterConfigs(r) => encode(&configs::incremental_alter(broker, r))?,
        Request::DescribeCluster(r) => encode(&describe_cluster::handle(broker, r))?,
    };
    Ok(Reply::Send(bytes))
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

/// A `StrBytes` from an owned string.
fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
