//! One decoded controller-listener request to its handler, and the encoded answer.

use bytes::Bytes;
use keel_wire::kafka_protocol::messages::ApiKey;
use keel_wire::kafka_protocol::protocol::Encodable;
use keel_wire::request::{ControllerRequest, DecodedRequest};
use keel_wire::response;
use keel_wire::versions::{self, ListenerKind};

use super::state::{ControllerHandle, ControllerStopped};
use super::{
    alter_partition, configs, describe_cluster, elect_leaders, membership, metadata_fetch, topics,
    Settings,
};

/// Why a request got no answer; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DispatchError {
    #[error(transparent)]
    Stopped(#[from] ControllerStopped),
    #[error("cannot encode the response: {0:#}")]
    Encode(anyhow::Error),
}

fn encode<T: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, DispatchError> {
    response::encode(key, version, correlation_id, body).map_err(DispatchError::Encode)
}

/// Handles one request.
pub(super) async fn dispatch(
    handle: &ControllerHandle,
    settings: &Settings,
    request: DecodedRequest<ControllerRequest>,
) -> Result<Bytes, DispatchError> {
    let key = request.api_key;
    let v = request.api_version();
    let id = request.correlation_id();
    use ControllerRequest as R;
    match request.body {
        R::ApiVersions(_) => encode(
            key,
            v,
            id,
            &versions::api_versions_response_on(ListenerKind::Controller, None),
        ),
        R::BrokerRegistration(r) => encode(key, v, id, &membership::register(handle, r, v).await?),
        R::BrokerHeartbeat(r) => encode(key, v, id, &membership::heartbeat(handle, r).await?),
        R::AlterPartition(r) => encode(key, v, id, &alter_partition::handle(handle, r, v).await?),
        R::CreateTopics(r) => encode(key, v, id, &topics::create(handle, settings, r, v).await?),
        R::DeleteTopics(r) => encode(key, v, id, &topics::delete(handle, r, v).await?),
        R::CreatePartitions(r) => encode(key, v, id, &topics::create_partitions(handle, r).await?),
        R::IncrementalAlterConfigs(r) => {
            encode(key, v, id, &configs::incremental_alter(handle, r).await?)
        }
        R::ElectLeaders(r) => encode(key, v, id, &elect_leaders::handle(handle, r, v).await?),
        R::DescribeCluster(r) => encode(
            key,
            v,
            id,
            &describe_cluster::handle(handle, settings, r).await?,
        ),
        R::Fetch(r) => encode(
            key,
            v,
            id,
            &metadata_fetch::handle(handle, settings, r, v).await?,
        ),
    }
}
