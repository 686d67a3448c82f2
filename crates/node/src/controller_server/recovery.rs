//! Executing the Unclean Recovery Manager's commands (KIP-966): `SendGetReplicaLogInfo` asks a
//! replica over its broker listener (Keel's RPC, `keel_wire::keel_rpc`) and feeds each
//! partition's answer back to the controller task; `ScheduleRecoveryTimeout` calls
//! `recovery_timeout` when due. A request that fails (connection refused, timeout, an error
//! answer) is reported after a back-off, and the URM decides whether to ask again.
//!
//! The URM's decisions stay in the pure `keel_controller::recovery`; this is only transport.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_controller::recovery::{Command, ReplicaLogInfo};
use keel_controller::types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, TopicPartition};
use keel_wire::keel_rpc::{GetReplicaLogInfoRequest, GetReplicaLogInfoResponse};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::state::ControllerHandle;
use crate::client::Connection;
use crate::clock::Clock;
use crate::net::Network;

/// Wait before a failed GetReplicaLogInfo is reported (and so asked again).
const RETRY_BACKOFF_MS: u64 = 500;
/// Least time between two GetReplicaLogInfo requests to one broker (a stale answer is asked
/// again: this keeps a broker whose metadata lags from being asked in a tight loop).
const MIN_ASK_INTERVAL_MS: u64 = 100;
/// How long one GetReplicaLogInfo may take.
const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// Runs until `stop`: executes every command the controller task hands over.
pub(super) async fn run(
    handle: ControllerHandle,
    mut commands: mpsc::UnboundedReceiver<Command>,
    network: Arc<dyn Network>,
    clock: Arc<dyn Clock>,
    node_id: i32,
    stop: CancellationToken,
) {
    let mut last_ask: BTreeMap<BrokerId, tokio::time::Instant> = BTreeMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let command = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
        };
        while tasks.try_join_next().is_some() {}
        match command {
            Command::SendGetReplicaLogInfo { broker, partitions } => {
                let now = tokio::time::Instant::now();
                let earliest = last_ask
                    .get(&broker)
                    .map_or(now, |t| *t + Duration::from_millis(MIN_ASK_INTERVAL_MS));
                let at = earliest.max(now);
                last_ask.insert(broker, at);
                let (handle, network) = (handle.clone(), network.clone());
                tasks.spawn(async move {
                    tokio::time::sleep_until(at).await;
                    ask(&handle, network.as_ref(), node_id, broker, partitions).await;
                });
            }
            Command::ScheduleRecoveryTimeout { partition, at_ms } => {
                let now_ms = u64::try_from(clock.now_ms()).unwrap_or(0);
                let delay = Duration::from_millis(at_ms.saturating_sub(now_ms));
                let handle = handle.clone();
                tasks.spawn(async move {
                    tokio::time::sleep(delay).await;
                    let outcome = handle
                        .call(move |state| {
                            state.commit(|c, now_ms| c.recovery_timeout(partition, now_ms))
                        })
                        .await;
                    if let Ok(Some(leader)) = outcome {
                        info!(?partition, %leader, "unclean recovery elected a leader (deadline)");
                    }
                });
            }
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

/// Asks `broker` about `partitions` and reports every answer (or the failure).
async fn ask(
    handle: &ControllerHandle,
    network: &dyn Network,
    node_id: i32,
    broker: BrokerId,
    partitions: Vec<TopicPartition>,
) {
    let endpoint = handle
        .call(move |state| {
            Ok(state.controller().image().broker(broker).and_then(|r| {
                r.listeners
                    .first()
                    .map(|l| format!("{}:{}", l.host, l.port))
            }))
        })
        .await
        .ok()
        .flatten();
    let result = match endpoint {
        Some(addr) => request(network, &addr, node_id, &partitions).await,
        None => Err(anyhow::anyhow!(
            "broker {broker} has no registered endpoint"
        )),
    };
    let response = match result {
        Ok(response) if response.error_code == 0 => response,
        Ok(response) => {
            debug!(%broker, error_code = response.error_code, "GetReplicaLogInfo refused");
            return report_failure(handle, broker, partitions).await;
        }
        Err(e) => {
            debug!(%broker, error = %e, "GetReplicaLogInfo failed");
            return report_failure(handle, broker, partitions).await;
        }
    };
    let mut failed = Vec::new();
    for tp in partitions {
        let answer = response
            .topics
            .iter()
            .filter(|(topic, _)| *topic == tp.topic.0)
            .flat_map(|(_, answers)| answers.iter())
            .find(|a| u32::try_from(a.partition).ok() == Some(tp.partition));
        let Some(answer) = answer.filter(|a| a.error_code == 0) else {
            failed.push(tp);
            continue;
        };
        let info = ReplicaLogInfo {
            log_end_offset: Offset(answer.log_end_offset),
            last_leader_epoch: LeaderEpoch(answer.last_written_leader_epoch),
            broker_epoch: BrokerEpoch(response.broker_epoch),
            partition_leader_epoch: LeaderEpoch(answer.current_leader_epoch),
        };
        let outcome = handle
            .call(move |state| {
                state.commit(|c, now_ms| c.recovery_answer(tp, broker, info, now_ms))
            })
            .await;
        match outcome {
            Ok(Ok(Some(leader))) => {
                info!(partition = ?tp, %leader, "unclean recovery elected a leader")
            }
            Ok(Ok(None)) => debug!(partition = ?tp, %broker, "unclean recovery answer recorded"),
            Ok(Err(code)) => {
                debug!(partition = ?tp, %broker, ?code, "unclean recovery answer rejected; asking again")
            }
            Err(_) => return,
        }
    }
    if !failed.is_empty() {
        report_failure(handle, broker, failed).await;
    }
}

async fn report_failure(
    handle: &ControllerHandle,
    broker: BrokerId,
    partitions: Vec<TopicPartition>,
) {
    tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
    let outcome = handle
        .call(move |state| {
            state.commit(|c, now_ms| c.recovery_request_failed(broker, &partitions, now_ms))
        })
        .await;
    if outcome.is_err() {
        warn!(%broker, "controller stopped while reporting a failed GetReplicaLogInfo");
    }
}

async fn request(
    network: &dyn Network,
    addr: &str,
    node_id: i32,
    partitions: &[TopicPartition],
) -> anyhow::Result<GetReplicaLogInfoResponse> {
    let mut topics: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics
            .entry(tp.topic.0)
            .or_default()
            .push(i32::try_from(tp.partition).unwrap_or(i32::MAX));
    }
    let request = GetReplicaLogInfoRequest {
        broker_id: node_id,
        topics: topics.into_iter().collect(),
    };
    let call = async {
        let client_id = format!("keel-controller-{node_id}-recovery");
        let mut connection = Connection::connect(network, addr, &client_id).await?;
        let (correlation_id, frame) = connection
            .call_raw(|correlation_id| request.encode(correlation_id, &client_id))
            .await?;
        anyhow::Ok(GetReplicaLogInfoResponse::decode(frame, correlation_id)?)
    };
    tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), call)
        .await
        .map_err(|_| anyhow::anyhow!("GetReplicaLogInfo to {addr} timed out"))?
}
