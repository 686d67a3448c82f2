//! Replica fetchers (Kafka's ReplicaFetcherThread): one task per leader this broker follows,
//! sending Fetch v15+ with `ReplicaState` (this broker's id and epoch, KIP-903) for every
//! partition that follows that leader, and handing each partition's answer to the follower
//! core (append, truncate on a diverging epoch — never halt, KAFKA-3861 — start over at the
//! leader's log start offset when the whole log is below it, or back off). Each fetch carries
//! the partition's log start offset (the leader's DeleteRecords low watermark); a log start
//! offset moved by an answer is made durable before the next fetch reports it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use keel_replication::{self as repl, EpochEndOffset, ErrorCode, FetchAnswer};
use keel_wire::kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ReplicaState,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::broker::{Broker, FollowerFetchPlan};
use crate::client::Connection;
use crate::net::BoxStream;

/// How often an idle fetcher looks for work when no metadata change wakes it.
const IDLE_POLL_MS: u64 = 100;
/// Extra time a fetch may take beyond its `max_wait_ms` before the connection is dropped.
const FETCH_TIMEOUT_SLACK_MS: u64 = 10_000;

/// Runs fetchers for every leader some hosted partition follows, until `stop`.
pub async fn run(broker: Arc<Broker>, stop: CancellationToken) {
    let mut tasks: BTreeMap<i32, tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut changes = broker.subscribe_image_changes();
    loop {
        tasks.retain(|_, task| !task.is_finished());
        for leader in broker.leaders_followed() {
            if leader == broker.node_id() || tasks.contains_key(&leader) {
                continue;
            }
            let (broker, stop) = (broker.clone(), stop.clone());
            tasks.insert(
                leader,
                tokio::spawn(async move { fetch_from(broker, leader, stop).await }),
            );
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            _ = changes.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS * 10)) => {}
        }
    }
    for (_, task) in tasks {
        task.abort();
        let _ = task.await;
    }
}

/// Fetches from one leader until no hosted partition follows it (or `stop`).
async fn fetch_from(broker: Arc<Broker>, leader: i32, stop: CancellationToken) {
    let mut connection: Option<Connection<BoxStream>> = None;
    let mut changes = broker.subscribe_image_changes();
    let mut credentials_refused_logged: Option<tokio::time::Instant> = None;
    info!(leader, "replica fetcher started");
    loop {
        if stop.is_cancelled() {
            break;
        }
        let fetches = broker.follower_fetches(leader);
        if fetches.is_empty() {
            if !broker.leaders_followed().contains(&leader) {
                break;
            }
            // Partitions are backing off or waiting for metadata.
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = changes.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)) => {}
            }
            continue;
        }
        if connection.is_none() {
            match connect(&broker, leader).await {
                Ok(c) => connection = Some(c),
                Err(e) => {
                    // A leader refusing this broker's credentials lasts until the configuration
                    // is fixed: say so (once a minute), other connection failures are routine.
                    match e.downcast_ref::<crate::client::ClientError>() {
                        Some(crate::client::ClientError::Authentication(reason))
                            if credentials_refused_logged.is_none_or(
                                |at: tokio::time::Instant| {
                                    at.elapsed() >= std::time::Duration::from_secs(60)
                                },
                            ) =>
                        {
                            credentials_refused_logged = Some(tokio::time::Instant::now());
                            tracing::error!(leader, %reason, "the leader refused this broker's credentials (check sasl.mechanism.inter.broker.protocol and the username/password of the inter-broker listener's JAAS configuration)");
                        }
                        _ => debug!(leader, error = %e, "cannot connect to the leader"),
                    }
                    fail(&broker, &fetches);
                    continue;
                }
            }
        }
        let conn = connection.as_mut().expect("connected above");
        let outcome = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            outcome = fetch_once(&broker, conn, &fetches) => outcome,
        };
        if let Err(e) = outcome {
            debug!(leader, error = %e, "fetch from the leader failed");
            connection = None;
            fail(&broker, &fetches);
        }
    }
    info!(leader, "replica fetcher stopped");
}

fn fail(broker: &Broker, fetches: &[FollowerFetchPlan]) {
    let partitions: Vec<_> = fetches.iter().map(|f| f.partition.clone()).collect();
    broker.on_follower_fetch_failed(&partitions);
}

async fn connect(broker: &Broker, leader: i32) -> anyhow::Result<Connection<BoxStream>> {
    let listener = &broker.config.inter_broker_listener_name;
    let (host, port) = broker
        .broker_endpoint_on(leader, listener)
        .ok_or_else(|| anyhow::anyhow!("leader {leader} has no registered {listener} endpoint"))?;
    let addr = format!("{host}:{port}");
    let client_id = format!("keel-replica-fetcher-{}", broker.node_id());
    Ok(Connection::connect(broker.inter_broker_network().as_ref(), &addr, &client_id).await?)
}

async fn fetch_once(
    broker: &Arc<Broker>,
    connection: &mut Connection<BoxStream>,
    fetches: &[FollowerFetchPlan],
) -> anyhow::Result<()> {
    let version = connection.version(ApiKey::Fetch, 12, 16)?;
    let config = &broker.config;
    let mut topics: BTreeMap<(uuid::Uuid, String), Vec<FetchPartition>> = BTreeMap::new();
    for fetch in fetches {
        let (partition, request) = (&fetch.partition, &fetch.request);
        topics
            .entry((partition.topic_id, partition.tp.topic.clone()))
            .or_default()
            .push(
                FetchPartition::default()
                    .with_partition(partition.tp.partition)
                    .with_current_leader_epoch(request.current_leader_epoch.0)
                    .with_fetch_offset(request.fetch_offset.0)
                    .with_last_fetched_epoch(request.last_fetched_epoch.map_or(-1, |e| e.0))
                    .with_log_start_offset(fetch.log_start_offset.0)
                    .with_partition_max_bytes(config.replica_fetch_max_bytes),
            );
    }
    let broker_epoch = fetches
        .first()
        .map_or(broker.broker_epoch(), |f| f.request.broker_epoch.0);
    let mut request = FetchRequest::default()
        .with_max_wait_ms(config.replica_fetch_wait_max_ms)
        .with_min_bytes(1)
        .with_max_bytes(config.replica_fetch_response_max_bytes)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(
            topics
                .into_iter()
                .map(|((id, name), partitions)| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(name)))
                        .with_topic_id(id)
                        .with_partitions(partitions)
                })
                .collect(),
        );
    if version >= 15 {
        request = request.with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(broker.node_id()))
                .with_replica_epoch(broker_epoch),
        );
    } else {
        request = request.with_replica_id(BrokerId(broker.node_id()));
    }
    let timeout = Duration::from_millis(
        u64::try_from(config.replica_fetch_wait_max_ms).unwrap_or(0) + FETCH_TIMEOUT_SLACK_MS,
    );
    let response: FetchResponse = tokio::time::timeout(
        timeout,
        connection.call_version(ApiKey::Fetch, version, &request),
    )
    .await
    .map_err(|_| anyhow::anyhow!("fetch timed out"))??;
    if response.error_code != 0 {
        anyhow::bail!("fetch failed with error code {}", response.error_code);
    }
    let mut answered = vec![false; fetches.len()];
    let mut durable = Vec::new();
    for topic in response.responses {
        for data in topic.partitions {
            let Some(index) = fetches.iter().position(|f| {
                let p = &f.partition;
                p.tp.partition == data.partition_index
                    && (p.topic_id == topic.topic_id || p.tp.topic == topic.topic.as_str())
            }) else {
                continue;
            };
            answered[index] = true;
            let (partition, fetch) = (&fetches[index].partition, &fetches[index].request);
            let high_watermark = repl::Offset(data.high_watermark.max(0));
            // -1: the leader did not say (an error answer).
            let log_start_offset =
                (data.log_start_offset >= 0).then_some(repl::Offset(data.log_start_offset));
            let answer = if data.error_code == ResponseError::OffsetOutOfRange.code() {
                FetchAnswer::OffsetOutOfRange { log_start_offset }
            } else if data.error_code != 0 {
                FetchAnswer::Error(ErrorCode::from_code(data.error_code))
            } else if data.diverging_epoch.epoch >= 0 || data.diverging_epoch.end_offset >= 0 {
                FetchAnswer::DivergingEpoch {
                    end: Some(EpochEndOffset {
                        epoch: repl::LeaderEpoch(data.diverging_epoch.epoch),
                        end_offset: repl::Offset(data.diverging_epoch.end_offset),
                    }),
                    high_watermark,
                }
            } else {
                FetchAnswer::Records {
                    high_watermark,
                    log_start_offset,
                }
            };
            durable.extend(broker.on_follower_fetch_answer(
                partition,
                fetch,
                &answer,
                data.records,
            ));
        }
    }
    // A partition the leader left out of its answer is retried after a back-off.
    let missing: Vec<_> = fetches
        .iter()
        .zip(answered)
        .filter(|(_, answered)| !answered)
        .map(|(f, _)| f.partition.clone())
        .collect();
    if !missing.is_empty() {
        broker.on_follower_fetch_failed(&missing);
    }
    // The leader learns a follower's log start offset from its next fetch, and answers a
    // DeleteRecords once every live replica has it: written before that fetch is sent, it
    // survives a crash of this broker.
    for change in durable {
        let broker = broker.clone();
        let persisted =
            crate::blocking::run_blocking(move || broker.persist_log_start(change)).await;
        match persisted {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "cannot checkpoint the log start offset"),
            Err(e) => warn!(error = %e, "log start offset checkpoint task failed"),
        }
    }
    Ok(())
}
