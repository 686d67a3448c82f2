//! Executing the Unclean Recovery Manager's commands (KIP-966). `ScheduleRecoveryTimeout` calls
//! `recovery_timeout` when due. `SendGetReplicaLogInfo` goes to the **Broker Request Sender**
//! (the KIP's BRS): one task per broker, on its own (away from the controller's event loop),
//! with a queue of pending requests. A request waiting in the queue while another is in flight
//! is merged with everything else queued for that broker into one GetReplicaLogInfo (Keel's RPC,
//! `keel_wire::keel_rpc`) over a connection the task keeps open. A request that cannot be sent
//! (connection refused, reset, timed out, an error answer) is retried until
//! [`RETRY_TIMEOUT_MS`] passes, then its failure is handed to the controller as one event
//! (`recovery_request_failed`), and the URM decides whether to ask again. Every answer is
//! handed to the controller as one event for the whole response (`recovery_answer` per
//! partition, in that one event), never applied from the sender's task.
//!
//! The URM's decisions stay in the pure `keel_controller::recovery`; this is only transport.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use keel_controller::recovery::{Command, ReplicaLogInfo};
use keel_controller::types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, TopicPartition};
use keel_controller::ErrorCode;
use keel_wire::keel_rpc::{GetReplicaLogInfoRequest, GetReplicaLogInfoResponse};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::state::ControllerHandle;
use crate::client::Connection;
use crate::clock::Clock;
use crate::net::{BoxStream, Network};

/// Wait between two attempts to send one GetReplicaLogInfo.
const RETRY_BACKOFF_MS: u64 = 500;
/// How long one request is retried before its failure goes to the controller.
const RETRY_TIMEOUT_MS: u64 = 3_000;
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
    broker_listener: String,
    stop: CancellationToken,
) {
    let mut queues: BTreeMap<BrokerId, mpsc::UnboundedSender<Vec<TopicPartition>>> =
        BTreeMap::new();
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
                let queue = queues.entry(broker).or_insert_with(|| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let sender = BrokerSender {
                        handle: handle.clone(),
                        network: network.clone(),
                        node_id,
                        broker,
                        listener: broker_listener.clone(),
                        connection: None,
                    };
                    tasks.spawn(sender.run(rx));
                    tx
                });
                // The task ends only with the controller; a closed queue means it is stopping.
                let _ = queue.send(partitions);
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
    drop(queues);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
}

/// `first` and every request queued behind it, merged into one (each partition once, in order).
fn merge_queued(
    first: Vec<TopicPartition>,
    queue: &mut mpsc::UnboundedReceiver<Vec<TopicPartition>>,
) -> Vec<TopicPartition> {
    let mut partitions: BTreeSet<TopicPartition> = first.into_iter().collect();
    while let Ok(more) = queue.try_recv() {
        partitions.extend(more);
    }
    partitions.into_iter().collect()
}

/// One broker's queue of GetReplicaLogInfo requests.
struct BrokerSender {
    handle: ControllerHandle,
    network: Arc<dyn Network>,
    node_id: i32,
    broker: BrokerId,
    /// The brokers' listener to connect to (`inter.broker.listener.name`).
    listener: String,
    connection: Option<(String, Connection<BoxStream>)>,
}

impl BrokerSender {
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Vec<TopicPartition>>) {
        while let Some(first) = queue.recv().await {
            let partitions = merge_queued(first, &mut queue);
            match self.send_with_retries(&partitions).await {
                Ok(response) => self.report_answers(response, partitions).await,
                Err(e) => {
                    debug!(broker = %self.broker, error = %e, "GetReplicaLogInfo failed");
                    self.report_failure(partitions).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(MIN_ASK_INTERVAL_MS)).await;
        }
    }

    async fn send_with_retries(
        &mut self,
        partitions: &[TopicPartition],
    ) -> anyhow::Result<GetReplicaLogInfoResponse> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(RETRY_TIMEOUT_MS);
        loop {
            let result = self.send(partitions).await;
            match result {
                Ok(response) => return Ok(response),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    debug!(broker = %self.broker, error = %e, "GetReplicaLogInfo failed; retrying");
                    self.connection = None;
                    tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                }
            }
        }
    }

    async fn send(
        &mut self,
        partitions: &[TopicPartition],
    ) -> anyhow::Result<GetReplicaLogInfoResponse> {
        let broker = self.broker;
        let listener = self.listener.clone();
        let endpoint = self
            .handle
            .call(move |state| {
                Ok(state.controller().image().broker(broker).and_then(|r| {
                    // The inter-broker listener; a broker registered with one listener only is
                    // reached there whatever its name.
                    r.listeners
                        .iter()
                        .find(|l| l.name.eq_ignore_ascii_case(&listener))
                        .or(match r.listeners.as_slice() {
                            [only] => Some(only),
                            _ => None,
                        })
                        .map(|l| format!("{}:{}", l.host, l.port))
                }))
            })
            .await
            .map_err(|_| anyhow::anyhow!("the controller is not active"))?
            .ok_or_else(|| anyhow::anyhow!("broker {broker} has no registered endpoint"))?;
        // A re-registered broker may listen elsewhere.
        if self
            .connection
            .as_ref()
            .is_some_and(|(addr, _)| *addr != endpoint)
        {
            self.connection = None;
        }
        let client_id = format!("keel-controller-{}-recovery", self.node_id);
        let call = async {
            if self.connection.is_none() {
                let connection =
                    Connection::connect(self.network.as_ref(), &endpoint, &client_id).await?;
                self.connection = Some((endpoint.clone(), connection));
            }
            let (_, connection) = self.connection.as_mut().expect("connected above");
            request(connection, &client_id, self.node_id, partitions).await
        };
        let outcome = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), call).await;
        let response = match outcome {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => {
                self.connection = None;
                return Err(e);
            }
            Err(_) => {
                // A late answer must not be read as the next request's.
                self.connection = None;
                anyhow::bail!("GetReplicaLogInfo to {endpoint} timed out");
            }
        };
        if response.error_code != 0 {
            anyhow::bail!("broker {broker} refused: error {}", response.error_code);
        }
        Ok(response)
    }

    /// Hands the answers to the controller as one event.
    async fn report_answers(
        &mut self,
        response: GetReplicaLogInfoResponse,
        partitions: Vec<TopicPartition>,
    ) {
        let broker = self.broker;
        let mut answers: Vec<(TopicPartition, ReplicaLogInfo)> = Vec::new();
        let mut failed = Vec::new();
        for tp in partitions {
            let answer = response
                .topics
                .iter()
                .filter(|(topic, _)| *topic == tp.topic.0)
                .flat_map(|(_, answers)| answers.iter())
                .find(|a| u32::try_from(a.partition).ok() == Some(tp.partition));
            match answer.filter(|a| a.error_code == 0) {
                Some(a) => answers.push((
                    tp,
                    ReplicaLogInfo {
                        log_end_offset: Offset(a.log_end_offset),
                        last_leader_epoch: LeaderEpoch(a.last_written_leader_epoch),
                        broker_epoch: BrokerEpoch(response.broker_epoch),
                        partition_leader_epoch: LeaderEpoch(a.current_leader_epoch),
                    },
                )),
                None => failed.push(tp),
            }
        }
        let outcomes = self
            .handle
            .call(move |state| {
                let mut outcomes: Vec<(TopicPartition, Result<Option<BrokerId>, ErrorCode>)> =
                    Vec::new();
                for (tp, info) in answers {
                    let outcome =
                        state.commit(|c, now_ms| c.recovery_answer(tp, broker, info, now_ms))?;
                    outcomes.push((tp, outcome));
                }
                Ok(outcomes)
            })
            .await;
        let Ok(outcomes) = outcomes else {
            return;
        };
        for (tp, outcome) in outcomes {
            match outcome {
                Ok(Some(leader)) => {
                    info!(partition = ?tp, %leader, "unclean recovery elected a leader")
                }
                Ok(None) => debug!(partition = ?tp, %broker, "unclean recovery answer recorded"),
                Err(code) => {
                    debug!(partition = ?tp, %broker, ?code, "unclean recovery answer rejected; asking again")
                }
            }
        }
        if !failed.is_empty() {
            // The URM asks again at once: keep a broker that refuses a partition from being
            // polled in a tight loop.
            tokio::time::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
            self.report_failure(failed).await;
        }
    }

    /// Hands a failed request to the controller as one event (the URM asks again).
    async fn report_failure(&mut self, partitions: Vec<TopicPartition>) {
        let broker = self.broker;
        let outcome = self
            .handle
            .call(move |state| {
                state.commit(|c, now_ms| c.recovery_request_failed(broker, &partitions, now_ms))
            })
            .await;
        if outcome.is_err() {
            debug!(%broker, "controller not active while reporting a failed GetReplicaLogInfo");
        }
    }
}

async fn request(
    connection: &mut Connection<BoxStream>,
    client_id: &str,
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
    let (correlation_id, frame) = connection
        .call_raw(|correlation_id| request.encode(correlation_id, client_id))
        .await?;
    Ok(GetReplicaLogInfoResponse::decode(frame, correlation_id)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_controller::types::TopicId;

    // Shows: requests queued for a broker while one is in flight become one request with every
    // partition once; a request queued later is not taken into it.
    #[test]
    fn queued_requests_merge_into_one() {
        let t = |topic: u128, partition: u32| {
            TopicPartition::new(TopicId(uuid::Uuid::from_u128(topic)), partition)
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(vec![t(2, 0), t(1, 1)]).unwrap();
        tx.send(vec![t(1, 1), t(1, 0)]).unwrap();
        let merged = merge_queued(vec![t(2, 1)], &mut rx);
        assert_eq!(merged, vec![t(1, 0), t(1, 1), t(2, 0), t(2, 1)]);
        tx.send(vec![t(3, 0)]).unwrap();
        assert_eq!(merge_queued(vec![], &mut rx), vec![t(3, 0)]);
        assert_eq!(merge_queued(vec![t(4, 4)], &mut rx), vec![t(4, 4)]);
    }
}
