//! BrokerRegistration (62, v0–4) and BrokerHeartbeat (63, v0–1).
//!
//! Registration: wire-level checks first (Kafka's `ClusterControlManager.registerBroker`): a ZK
//! migration registration is refused (`BROKER_ID_NOT_REGISTERED`), log directory ids must not be
//! reserved or repeated (`INVALID_REGISTRATION`); then the controller crate decides
//! (`INCONSISTENT_CLUSTER_ID`, `DUPLICATE_BROKER_REGISTRATION`, clean-shutdown detection from
//! `PreviousBrokerEpoch`, v3+, -1 = none). The answered `BrokerEpoch` is the offset of the
//! `RegisterBroker` record.
//!
//! Heartbeat: `CurrentMetadataOffset` is the offset of the last metadata record the broker
//! applied (-1 = none); `IsCaughtUp` is Kafka's `currentMetadataOffset >= offset of the
//! broker's RegisterBroker record`, which is also the unfencing condition. Replicas the broker
//! lost while running (damage set aside, a failed log directory — issue 19) arrive in Keel's
//! `LostReplicas` tag ([`keel_wire::keel_ext`]) and leave the ISR and ELR like an unclean
//! shutdown of that replica; `OfflineLogDirs` (v1, KIP-858) names the failed directories and
//! is only logged (the lost replicas carry what the controller acts on: it does not know
//! which directory a broker put each replica in).

use keel_controller::records::Listener;
use keel_controller::types::{
    BrokerEpoch, BrokerId, DirectoryId, IncarnationId, MetadataOffset, PartitionEpoch, TopicId,
    TopicPartition,
};
use keel_controller::{
    HeartbeatRequest, LostReplica, LostReplicaReason, RegisterBrokerRequest,
    LOST_REPLICAS_PER_HEARTBEAT_MAX,
};
use keel_wire::kafka_protocol::messages::{
    BrokerHeartbeatRequest, BrokerHeartbeatResponse, BrokerRegistrationRequest,
    BrokerRegistrationResponse,
};
use keel_wire::keel_ext;
use keel_wire::ResponseError;
use tracing::{info, warn};
use uuid::Uuid;

use super::state::{CallError, ControllerHandle};

/// Kafka's `DirectoryId.reserved`: ids with all-zero high bits and low bits below 100
/// (UNASSIGNED, LOST, MIGRATING and room for more).
fn is_reserved_directory_id(id: Uuid) -> bool {
    let (high, low) = id.as_u64_pair();
    high == 0 && low < 100
}

/// Wire-level registration checks, before the controller sees the request.
fn check_registration(req: &BrokerRegistrationRequest) -> Result<(), (ResponseError, String)> {
    if req.broker_id.0 < 0 {
        return Err((
            ResponseError::InvalidRequest,
            format!("broker id {} is negative", req.broker_id.0),
        ));
    }
    if req.is_migrating_zk_broker {
        return Err((
            ResponseError::BrokerIdNotRegistered,
            "the controller does not register ZooKeeper brokers".to_string(),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for dir in &req.log_dirs {
        if is_reserved_directory_id(*dir) {
            return Err((
                ResponseError::InvalidRegistration,
                format!("reserved log directory id {dir}"),
            ));
        }
        if !seen.insert(*dir) {
            return Err((
                ResponseError::InvalidRegistration,
                format!("duplicate log directory id {dir}"),
            ));
        }
    }
    Ok(())
}

/// BrokerRegistration.
pub(super) async fn register(
    handle: &ControllerHandle,
    req: BrokerRegistrationRequest,
    version: i16,
) -> Result<BrokerRegistrationResponse, CallError> {
    let refused = |code: i16| {
        BrokerRegistrationResponse::default()
            .with_error_code(code)
            .with_broker_epoch(-1)
    };
    if let Err((error, reason)) = check_registration(&req) {
        warn!(broker = req.broker_id.0, %reason, "registration refused");
        return Ok(refused(error.code()));
    }
    let request = RegisterBrokerRequest {
        broker: BrokerId(req.broker_id.0),
        cluster_id: req.cluster_id.to_string(),
        incarnation: IncarnationId(req.incarnation_id),
        listeners: req
            .listeners
            .iter()
            .map(|l| Listener {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        rack: req.rack.as_ref().map(ToString::to_string),
        log_dirs: req.log_dirs.iter().copied().map(DirectoryId).collect(),
        previous_broker_epoch: (version >= 3 && req.previous_broker_epoch >= 0)
            .then_some(BrokerEpoch(req.previous_broker_epoch)),
    };
    let broker = request.broker;
    let result = handle
        .call(move |s| s.commit(|c, now_ms| c.register_broker(&request, now_ms)))
        .await?;
    Ok(match result {
        Ok(registered) => {
            info!(
                %broker,
                broker_epoch = registered.broker_epoch.0,
                clean_shutdown = registered.clean_shutdown,
                "broker registered"
            );
            BrokerRegistrationResponse::default()
                .with_error_code(0)
                .with_broker_epoch(registered.broker_epoch.0)
        }
        Err(error) => {
            warn!(%broker, %error, "registration refused");
            refused(error.code.code())
        }
    })
}

/// BrokerHeartbeat.
pub(super) async fn heartbeat(
    handle: &ControllerHandle,
    req: BrokerHeartbeatRequest,
) -> Result<BrokerHeartbeatResponse, CallError> {
    if !req.offline_log_dirs.is_empty() {
        tracing::debug!(
            broker = req.broker_id.0,
            offline = ?req.offline_log_dirs,
            "offline log directories reported"
        );
    }
    let lost_replicas = lost_replicas(&req);
    let request = HeartbeatRequest {
        broker: BrokerId(req.broker_id.0),
        broker_epoch: BrokerEpoch(req.broker_epoch),
        current_metadata_offset: (req.current_metadata_offset >= 0)
            .then_some(MetadataOffset(req.current_metadata_offset)),
        want_fence: req.want_fence,
        want_shutdown: req.want_shut_down,
        lost_replicas,
    };
    let (result, caught_up) = handle
        .call(move |s| {
            let caught_up = s
                .controller()
                .image()
                .broker(request.broker)
                .is_some_and(|b| {
                    request
                        .current_metadata_offset
                        .is_some_and(|o| o >= b.registered_at)
                });
            let result = s.commit(|c, now_ms| c.heartbeat(&request, now_ms))?;
            Ok((result, caught_up))
        })
        .await?;
    Ok(match result {
        Ok(answer) => BrokerHeartbeatResponse::default()
            .with_error_code(0)
            .with_is_caught_up(caught_up)
            .with_is_fenced(answer.is_fenced)
            .with_should_shut_down(answer.should_shut_down),
        Err(error) => BrokerHeartbeatResponse::default()
            .with_error_code(error.code.code())
            .with_is_caught_up(false)
            .with_is_fenced(true)
            .with_should_shut_down(false),
    })
}

/// The `LostReplicas` a heartbeat carries (none if the tag is absent; a malformed field is
/// logged and ignored, entries with an unknown reason or a negative partition are skipped).
fn lost_replicas(req: &BrokerHeartbeatRequest) -> Vec<LostReplica> {
    let Some(bytes) = req.unknown_tagged_fields.get(&keel_ext::LOST_REPLICAS_TAG) else {
        return Vec::new();
    };
    let entries = match keel_ext::decode_lost_replicas(bytes, LOST_REPLICAS_PER_HEARTBEAT_MAX) {
        Ok(entries) => entries,
        Err(e) => {
            warn!(broker = req.broker_id.0, error = %e, "ignoring a malformed LostReplicas field");
            return Vec::new();
        }
    };
    entries
        .into_iter()
        .filter_map(|e| {
            let reason = match e.reason {
                0 => LostReplicaReason::Damaged,
                1 => LostReplicaReason::DirectoryOffline,
                _ => return None,
            };
            Some(LostReplica {
                partition: TopicPartition::new(
                    TopicId(e.topic_id),
                    u32::try_from(e.partition).ok()?,
                ),
                partition_epoch: PartitionEpoch(e.partition_epoch),
                reason,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_wire::kafka_protocol::messages::BrokerId as WireBrokerId;

    // Shows: Kafka's registration checks before the controller — reserved and duplicate log
    // directory ids are INVALID_REGISTRATION (KIP-858), ZK migration is refused.
    #[test]
    fn registration_wire_checks() {
        let dir = Uuid::from_u128(0xabcdef);
        let ok = BrokerRegistrationRequest::default()
            .with_broker_id(WireBrokerId(1))
            .with_log_dirs(vec![dir]);
        assert!(check_registration(&ok).is_ok());
        let reserved = ok.clone().with_log_dirs(vec![Uuid::from_u64_pair(0, 2)]);
        assert_eq!(
            check_registration(&reserved).unwrap_err().0,
            ResponseError::InvalidRegistration
        );
        let duplicate = ok.clone().with_log_dirs(vec![dir, dir]);
        assert_eq!(
            check_registration(&duplicate).unwrap_err().0,
            ResponseError::InvalidRegistration
        );
        let zk = ok.clone().with_is_migrating_zk_broker(true);
        assert_eq!(
            check_registration(&zk).unwrap_err().0,
            ResponseError::BrokerIdNotRegistered
        );
        let negative = ok.with_broker_id(WireBrokerId(-1));
        assert_eq!(
            check_registration(&negative).unwrap_err().0,
            ResponseError::InvalidRequest
        );
    }
}
