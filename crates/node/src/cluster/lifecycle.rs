//! Registration and heartbeats (Kafka's BrokerLifecycleManager).
//!
//! At start the broker registers with a fresh incarnation id, its listeners, its log directory
//! ids and — KIP-966 "Detection of an unclean shutdown" — the broker epoch read from its
//! clean-shutdown files, if every log directory had one. The controller answers with the new
//! broker epoch (the offset of the registration record). The broker then heartbeats every
//! `broker.heartbeat.interval.ms` with the metadata offset it has applied; it stays fenced until
//! that offset reaches its registration, and a silent broker is fenced by the controller.

use std::time::Duration;

use keel_wire::kafka_protocol::messages::broker_registration_request::{
    Feature, Listener as WireListener,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerId, BrokerRegistrationRequest,
    BrokerRegistrationResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;
use tokio::io::{AsyncRead, AsyncWrite};
use uuid::Uuid;

use crate::client::{ClientError, Connection};
use crate::config::Listener;
use crate::security::SecurityProtocol;

/// Kafka's `broker.heartbeat.interval.ms` default.
pub const BROKER_HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 2_000;

/// The `metadata.version` feature range a broker advertises (Kafka 4.0-IV3 .. 4.1-IV1 levels
/// are what 4.x controllers check; Keel's own controller ignores the level).
const METADATA_VERSION_RANGE: (i16, i16) = (7, 27);

/// What a broker tells the controller about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub broker_id: i32,
    pub cluster_id: String,
    /// Random per process start (a new incarnation means a restart to the controller).
    pub incarnation_id: Uuid,
    /// Its advertised listeners and the security protocol of each.
    pub listeners: Vec<(Listener, SecurityProtocol)>,
    pub rack: Option<String>,
    /// The `directory.id` of every online log directory.
    pub log_dir_ids: Vec<Uuid>,
    /// The broker epoch from the clean-shutdown files; `None` after an unclean shutdown.
    pub previous_broker_epoch: Option<i64>,
}

/// Why a lifecycle call failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("the controller refused: {error:?}")]
    Refused { error: ResponseError },
    #[error("the controller did not answer within {0:?}")]
    TimedOut(Duration),
}

/// How long a registration or heartbeat waits for its answer before the connection is given up (a controller
/// behind a network partition never answers; the broker reconnects and tries again — and a
/// controlled shutdown stops waiting at its own deadline).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a heartbeat says about the broker's storage (issue 19): its offline log directories
/// (Kafka's `OfflineLogDirs`, KIP-858) and the replicas it lost while running (Keel's
/// `LostReplicas` tag).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageReport {
    pub offline_log_dirs: Vec<Uuid>,
    pub lost_replicas: Vec<keel_wire::keel_ext::LostReplicaEntry>,
}

/// The controller's answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatState {
    pub is_caught_up: bool,
    pub is_fenced: bool,
    pub should_shut_down: bool,
}

fn check(code: i16) -> Result<(), LifecycleError> {
    match ResponseError::try_from_code(code) {
        None if code == 0 => Ok(()),
        Some(error) => Err(LifecycleError::Refused { error }),
        None => Err(LifecycleError::Refused {
            error: ResponseError::UnknownServerError,
        }),
    }
}

/// Sends BrokerRegistration; returns the new broker epoch.
pub async fn register<S: AsyncRead + AsyncWrite + Unpin>(
    connection: &mut Connection<S>,
    registration: &Registration,
) -> Result<i64, LifecycleError> {
    let version = connection.version(ApiKey::BrokerRegistration, 3, 4)?;
    let listeners = registration
        .listeners
        .iter()
        .map(|(l, protocol)| {
            WireListener::default()
                .with_name(StrBytes::from_string(l.name.clone()))
                .with_host(StrBytes::from_string(l.host.clone()))
                .with_port(l.port)
                .with_security_protocol(protocol.id())
        })
        .collect();
    let request = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(registration.broker_id))
        .with_cluster_id(StrBytes::from_string(registration.cluster_id.clone()))
        .with_incarnation_id(registration.incarnation_id)
        .with_listeners(listeners)
        .with_features(vec![Feature::default()
            .with_name(StrBytes::from_static_str("metadata.version"))
            .with_min_supported_version(METADATA_VERSION_RANGE.0)
            .with_max_supported_version(METADATA_VERSION_RANGE.1)])
        .with_rack(registration.rack.clone().map(StrBytes::from_string))
        .with_log_dirs(registration.log_dir_ids.clone())
        .with_previous_broker_epoch(registration.previous_broker_epoch.unwrap_or(-1));
    let response: BrokerRegistrationResponse = tokio::time::timeout(
        HEARTBEAT_TIMEOUT,
        connection.call_version(ApiKey::BrokerRegistration, version, &request),
    )
    .await
    .map_err(|_| LifecycleError::TimedOut(HEARTBEAT_TIMEOUT))??;
    check(response.error_code)?;
    Ok(response.broker_epoch)
}

/// Sends one BrokerHeartbeat.
pub async fn heartbeat<S: AsyncRead + AsyncWrite + Unpin>(
    connection: &mut Connection<S>,
    broker_id: i32,
    broker_epoch: i64,
    applied_metadata_offset: Option<i64>,
    want_shut_down: bool,
    storage: &StorageReport,
) -> Result<HeartbeatState, LifecycleError> {
    let version = connection.version(ApiKey::BrokerHeartbeat, 0, 1)?;
    let mut request = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(broker_id))
        .with_broker_epoch(broker_epoch)
        .with_current_metadata_offset(applied_metadata_offset.unwrap_or(-1))
        .with_want_fence(false)
        .with_want_shut_down(want_shut_down);
    if version >= 1 {
        request = request.with_offline_log_dirs(storage.offline_log_dirs.clone());
    }
    if !storage.lost_replicas.is_empty() {
        request.unknown_tagged_fields.insert(
            keel_wire::keel_ext::LOST_REPLICAS_TAG,
            keel_wire::keel_ext::encode_lost_replicas(&storage.lost_replicas),
        );
    }
    let response: BrokerHeartbeatResponse = tokio::time::timeout(
        HEARTBEAT_TIMEOUT,
        connection.call_version(ApiKey::BrokerHeartbeat, version, &request),
    )
    .await
    .map_err(|_| LifecycleError::TimedOut(HEARTBEAT_TIMEOUT))??;
    check(response.error_code)?;
    Ok(HeartbeatState {
        is_caught_up: response.is_caught_up,
        is_fenced: response.is_fenced,
        should_shut_down: response.should_shut_down,
    })
}

/// Backoff between reconnection attempts, doubling from the first to the last value.
pub fn reconnect_backoff(attempt: u32) -> Duration {
    const FIRST_MS: u64 = 100;
    const MAX_MS: u64 = 2_000;
    Duration::from_millis(FIRST_MS.saturating_mul(1u64 << attempt.min(5)).min(MAX_MS))
}
