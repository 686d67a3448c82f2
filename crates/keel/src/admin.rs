//! `keel topics | configs | elect | status`: the operator's commands against any running
//! cluster, over the Kafka protocol to one bootstrap broker (like Kafka's `kafka-topics.sh`,
//! `kafka-configs.sh` and `kafka-leader-election.sh`). Partitions are described with
//! DescribeTopicPartitions (API 75), so the ELR, the LastKnownELR and Keel's status tag (what a
//! leaderless partition waits for, `keel_wire::keel_ext`) are shown; elections go through
//! ElectLeaders (API 43) with Keel's tagged fields for a named leader and a Balanced recovery.
//! Every listing has `--json` for scripts.
//!
//! Like Kafka's admin client, a command sends again, with back-off, after an answer a controller
//! failover or a moving coordinator gives ([`RETRIABLE`], e.g. `NOT_CONTROLLER` while the quorum
//! elects a new active controller), until `--api-timeout-ms` (Kafka's `default.api.timeout.ms`,
//! 60 s) has passed ([`Retry`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use keel_node::client::Connection;
use keel_node::net::{BoxStream, Network, TcpNetwork};
use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use keel_wire::kafka_protocol::messages::describe_topic_partitions_request::{
    Cursor, TopicRequest,
};
use keel_wire::kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use keel_wire::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeLogDirsRequest,
    DescribeLogDirsResponse, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
    ElectLeadersRequest, ElectLeadersResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use keel_wire::keel_ext::{self, PartitionStatusCode, RecoveryModeField, RECOVERY_STARTED};
use keel_wire::ResponseError;
use serde::Serialize;

/// Where the commands connect (a broker's client listener).
#[derive(Args, Debug, Clone)]
pub struct Bootstrap {
    /// A broker of the cluster, `host:port` (`keel dev` listens on 127.0.0.1:9092).
    #[arg(
        long = "bootstrap-server",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    bootstrap: String,
    /// How long a command keeps retrying errors that a controller failover or a moving group
    /// coordinator causes (Kafka's `default.api.timeout.ms`).
    #[arg(
        long = "api-timeout-ms",
        value_name = "MS",
        default_value_t = DEFAULT_API_TIMEOUT_MS,
        global = true
    )]
    api_timeout_ms: u64,
    /// Client settings for the connections, as Kafka's tools take them: `security.protocol`,
    /// `ssl.truststore.location`, `ssl.keystore.location`, `sasl.mechanism`,
    /// `sasl.jaas.config`, ... (a `.properties` file).
    #[arg(long = "command-config", value_name = "FILE", global = true)]
    command_config: Option<std::path::PathBuf>,
}

impl Bootstrap {
    /// Makes every connection of this command use `--command-config`'s security settings.
    pub fn install_network(&self) -> anyhow::Result<()> {
        install_client_network(self.command_config.as_deref())
    }
}

/// The network the admin commands and `keel bench` connect over: TCP, with the TLS and SASL
/// settings of `--command-config` (set once per process, before the command runs).
static CLIENT_NETWORK: std::sync::OnceLock<std::sync::Arc<dyn Network>> =
    std::sync::OnceLock::new();

/// Sets the client network from the properties file at `path` (plain TCP without one).
pub fn install_client_network(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    let network: std::sync::Arc<dyn Network> = match path {
        None => std::sync::Arc::new(TcpNetwork),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --command-config {}", path.display()))?;
            let props = keel_node::config::parse_properties(&text)
                .with_context(|| format!("--command-config {}", path.display()))?;
            std::sync::Arc::new(
                keel_node::security::SecureNetwork::for_client(
                    std::sync::Arc::new(TcpNetwork),
                    &props,
                )
                .with_context(|| format!("--command-config {}", path.display()))?,
            )
        }
    };
    let _ = CLIENT_NETWORK.set(network);
    Ok(())
}

/// The network of this command's connections ([`install_client_network`]; TCP if not set).
pub(crate) fn network() -> &'static dyn Network {
    CLIENT_NETWORK
        .get_or_init(|| std::sync::Arc::new(TcpNetwork))
        .as_ref()
}

/// Kafka's admin client `default.api.timeout.ms`.
pub const DEFAULT_API_TIMEOUT_MS: u64 = 60_000;
/// Kafka's `retry.backoff.ms`: the first pause before sending again.
const RETRY_BACKOFF_MS: u64 = 100;
/// Kafka's `retry.backoff.max.ms`: the pause doubles up to this (KIP-580).
const RETRY_BACKOFF_MAX_MS: u64 = 1_000;

/// Answers the cluster stops giving on its own, so a command sends again: no active controller
/// (an election or a failover; also what a broker answers when it cannot forward to one), a
/// group coordinator that moved or is still loading, a partition leader that moved.
pub(crate) const RETRIABLE: [ResponseError; 6] = [
    ResponseError::NotController,
    ResponseError::CoordinatorNotAvailable,
    ResponseError::NotCoordinator,
    ResponseError::CoordinatorLoadInProgress,
    ResponseError::LeaderNotAvailable,
    ResponseError::NotLeaderOrFollower,
];

/// Whether error `code` is one of [`RETRIABLE`].
fn is_retriable(code: i16) -> bool {
    RETRIABLE.iter().any(|e| e.code() == code)
}

/// An error answer from the cluster (what [`check`] returns), kept typed so [`Retry`] can tell
/// a retriable one.
#[derive(Debug)]
pub(crate) struct Refused {
    what: String,
    code: i16,
    text: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.text)
    }
}

impl std::error::Error for Refused {}

/// One command's retry budget: exponential back-off from [`RETRY_BACKOFF_MS`] to
/// [`RETRY_BACKOFF_MAX_MS`] until `--api-timeout-ms` after the command started.
#[derive(Debug)]
pub(crate) struct Retry {
    started: std::time::Instant,
    timeout: std::time::Duration,
    backoff_ms: u64,
    retries: u32,
}

impl Retry {
    pub(crate) fn new(bootstrap: &Bootstrap) -> Retry {
        Retry {
            started: std::time::Instant::now(),
            timeout: std::time::Duration::from_millis(bootstrap.api_timeout_ms),
            backoff_ms: RETRY_BACKOFF_MS,
            retries: 0,
        }
    }

    /// After an answer with error `code`: `true` (once the back-off has passed) when it is
    /// retriable and the budget allows another attempt.
    pub(crate) async fn again(&mut self, code: i16) -> bool {
        if !is_retriable(code) {
            return false;
        }
        let pause = std::time::Duration::from_millis(self.backoff_ms);
        if self.started.elapsed() + pause > self.timeout {
            return false;
        }
        tokio::time::sleep(pause).await;
        self.backoff_ms = (self.backoff_ms * 2).min(RETRY_BACKOFF_MAX_MS);
        self.retries += 1;
        true
    }

    /// [`Retry::again`] for an error of a step: retried when it is a retriable [`Refused`].
    pub(crate) async fn again_after(&mut self, error: &anyhow::Error) -> bool {
        match error.chain().find_map(|e| e.downcast_ref::<Refused>()) {
            Some(refused) => self.again(refused.code).await,
            None => false,
        }
    }

    /// Whether an earlier attempt was answered with a retriable error (it may have taken effect
    /// before the answer was lost, e.g. a topic created just before the controller failed).
    pub(crate) fn retried(&self) -> bool {
        self.retries > 0
    }

    /// The last attempt's result, its error saying how long it was retried when it was.
    pub(crate) fn finish<T>(&self, result: anyhow::Result<T>) -> anyhow::Result<T> {
        match result {
            Err(e) if self.retries > 0 => Err(e.context(format!(
                "gave up after {} retries over {:.1} s",
                self.retries,
                self.started.elapsed().as_secs_f64()
            ))),
            other => other,
        }
    }

    /// `what`, with how long it was retried when it was.
    pub(crate) fn what(&self, what: &str) -> String {
        if self.retries == 0 {
            return what.to_string();
        }
        format!(
            "{what} (after {} retries over {:.1} s)",
            self.retries,
            self.started.elapsed().as_secs_f64()
        )
    }
}

/// `keel topics ...`
#[derive(Subcommand, Debug)]
pub enum TopicsCommand {
    /// Create a topic.
    Create {
        /// Topic name.
        name: String,
        /// Partitions (the cluster's `num.partitions` when omitted).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replication factor (the cluster's `default.replication.factor` when omitted).
        #[arg(long)]
        replication_factor: Option<i16>,
        /// A topic config, `key=value` (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List topic names.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Describe partitions: leader, leader epoch, replicas, ISR, ELR, LastKnownELR, offline
    /// replicas and what a leaderless partition waits for.
    Describe {
        /// Topics (every topic when none is named).
        names: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Delete a topic.
    Delete {
        /// Topic name.
        name: String,
    },
}

/// `keel configs ...`
#[derive(Subcommand, Debug)]
pub enum ConfigsCommand {
    /// Show a topic's configs (explicitly set ones; `--all` for every effective value).
    Get {
        #[command(flatten)]
        target: ConfigTarget,
        /// Every config, with its source, not only the ones set on the topic.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Set (`key=value`) or delete (`--delete key`) configs of a topic or the cluster default.
    Set {
        #[command(flatten)]
        target: ConfigTarget,
        /// `key=value` pairs to set.
        #[arg(value_name = "KEY=VALUE")]
        pairs: Vec<String>,
        /// Keys to delete (back to the default).
        #[arg(long = "delete", value_name = "KEY")]
        deletes: Vec<String>,
    },
}

/// Whose configs.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct ConfigTarget {
    /// A topic.
    #[arg(long)]
    topic: Option<String>,
    /// The cluster-wide default (set/delete only; e.g. `min.insync.replicas`,
    /// `unclean.recovery.strategy`, `eligible.leader.replicas.enable`).
    #[arg(long)]
    cluster: bool,
    /// A broker's configuration with each value's source (get only).
    #[arg(long)]
    broker: Option<i32>,
}

/// `keel elect ...`
#[derive(Args, Debug)]
pub struct ElectArgs {
    /// The topic (with `--partition`), or every partition of the cluster with `--all`.
    #[arg(long, required_unless_present = "all")]
    topic: Option<String>,
    /// Partition indexes (repeatable; every partition of the topic when omitted).
    #[arg(long = "partition")]
    partitions: Vec<i32>,
    /// Every partition of every topic (preferred or unclean only).
    #[arg(long, conflicts_with_all = ["topic", "leader"])]
    all: bool,
    /// Elect the preferred (first) replica.
    #[arg(long, group = "kind")]
    preferred: bool,
    /// Elect a clean candidate, else start KIP-966's unclean recovery (the replica with the
    /// longest log of the highest epoch).
    #[arg(long, group = "kind")]
    unclean: bool,
    /// With `--unclean`: a Balanced recovery (wait for every LastKnownELR member) instead of
    /// Proactive (elect after 5 s with whoever answered).
    #[arg(long, requires = "unclean")]
    balanced: bool,
    /// Elect exactly this broker (it must be a live replica; outside the ISR and ELR this is an
    /// unclean election and the answer says so).
    #[arg(long, group = "kind", value_name = "BROKER")]
    leader: Option<i32>,
}

/// `keel status`
#[derive(Args, Debug)]
pub struct StatusArgs {
    #[arg(long)]
    json: bool,
}

pub(crate) type Conn = Connection<BoxStream>;

/// Sends `request` at the highest version in `min..=max` the broker serves.
pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
    conn: &mut Conn,
    key: ApiKey,
    min: i16,
    max: i16,
    request: &Req,
) -> anyhow::Result<Resp> {
    let version = conn
        .version(key, min, max)
        .with_context(|| format!("the broker does not serve {key:?} v{min}-{max}"))?;
    Ok(conn.call_version(key, version, request).await?)
}

/// `Err` ([`Refused`]) naming `what` and Kafka's error when `code` is not 0.
pub(crate) fn check(code: i16, message: Option<&StrBytes>, what: &str) -> anyhow::Result<()> {
    if code != 0 {
        return Err(Refused {
            what: what.to_string(),
            code,
            text: error_text(code, message),
        }
        .into());
    }
    Ok(())
}

pub(crate) async fn connect(bootstrap: &Bootstrap) -> anyhow::Result<Conn> {
    Connection::connect(network(), &bootstrap.bootstrap, "keel-admin")
        .await
        .with_context(|| format!("cannot reach a broker at {}", bootstrap.bootstrap))
}

pub(crate) fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub(crate) fn error_text(code: i16, message: Option<&StrBytes>) -> String {
    let name = ResponseError::try_from_code(code)
        .map(|e| format!("{e:?}"))
        .unwrap_or_else(|| format!("error {code}"));
    match message {
        Some(m) if !m.is_empty() => format!("{name}: {}", m.as_str()),
        _ => name,
    }
}

fn split_pair(pair: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = pair
        .split_once('=')
        .with_context(|| format!("`{pair}` is not key=value"))?;
    if k.trim().is_empty() {
        bail!("`{pair}` has an empty key");
    }
    Ok((k.trim().to_string(), v.trim().to_string()))
}

pub async fn topics(bootstrap: Bootstrap, command: TopicsCommand) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    match command {
        TopicsCommand::Create {
            name: topic,
            partitions,
            replication_factor,
            configs,
        } => {
            let configs = configs
                .iter()
                .map(|p| split_pair(p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let request = CreateTopicsRequest::default()
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name(&topic))
                    .with_num_partitions(partitions.unwrap_or(-1))
                    .with_replication_factor(replication_factor.unwrap_or(-1))
                    .with_configs(
                        configs
                            .into_iter()
                            .map(|(k, v)| {
                                CreatableTopicConfig::default()
                                    .with_name(StrBytes::from_string(k))
                                    .with_value(Some(StrBytes::from_string(v)))
                            })
                            .collect(),
                    )])
                .with_timeout_ms(30_000);
            let mut retry = Retry::new(&bootstrap);
            loop {
                let response: CreateTopicsResponse =
                    call(&mut conn, ApiKey::CreateTopics, 2, 7, &request).await?;
                let result = response
                    .topics
                    .first()
                    .context("empty CreateTopics answer")?;
                if retry.again(result.error_code).await {
                    continue;
                }
                let mut what = format!("cannot create {topic}");
                if retry.retried() && result.error_code == ResponseError::TopicAlreadyExists.code()
                {
                    what.push_str(" (an earlier attempt may have created it)");
                }
                check(
                    result.error_code,
                    result.error_message.as_ref(),
                    &retry.what(&what),
                )?;
                break;
            }
            println!("Created topic {topic}.");
        }
        TopicsCommand::List { json } => {
            let response: MetadataResponse = call(
                &mut conn,
                ApiKey::Metadata,
                1,
                12,
                &MetadataRequest::default().with_topics(None),
            )
            .await?;
            let mut names: Vec<String> = response
                .topics
                .iter()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .collect();
            names.sort();
            if json {
                println!("{}", serde_json::to_string_pretty(&names)?);
            } else {
                for n in names {
                    println!("{n}");
                }
            }
        }
        TopicsCommand::Describe { names, json } => {
            let partitions = describe_partitions(&mut conn, &names).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&partitions)?);
            } else {
                print!("{}", partition_table(&partitions));
            }
        }
        TopicsCommand::Delete { name: topic } => {
            let request = DeleteTopicsRequest::default()
                .with_topic_names(vec![name(&topic)])
                .with_timeout_ms(30_000);
            let mut retry = Retry::new(&bootstrap);
            loop {
                let response: DeleteTopicsResponse =
                    call(&mut conn, ApiKey::DeleteTopics, 1, 5, &request).await?;
                let result = response
                    .responses
                    .first()
                    .context("empty DeleteTopics answer")?;
                if retry.again(result.error_code).await {
                    continue;
                }
                let mut what = format!("cannot delete {topic}");
                if retry.retried()
                    && result.error_code == ResponseError::UnknownTopicOrPartition.code()
                {
                    what.push_str(" (an earlier attempt may have deleted it)");
                }
                check(
                    result.error_code,
                    result.error_message.as_ref(),
                    &retry.what(&what),
                )?;
                break;
            }
            println!("Deleted topic {topic}.");
        }
    }
    Ok(())
}

/// One partition as `keel topics describe` and `keel status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionInfo {
    pub topic: String,
    pub partition: i32,
    /// -1: none.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub elr: Vec<i32>,
    pub last_known_elr: Vec<i32>,
    pub offline: Vec<i32>,
    /// `led`, `waiting-for-isr`, `waiting-for-elr`, `unclean-recovery`, `paused`.
    pub state: String,
    /// What it waits for, in words (empty when led).
    pub waiting_for: String,
}

/// Every partition of `topics` (all topics when empty), following DescribeTopicPartitions'
/// cursor until the last page.
async fn describe_partitions(
    conn: &mut Conn,
    topics: &[String],
) -> anyhow::Result<Vec<PartitionInfo>> {
    let mut out = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let request = DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(name(t)))
                    .collect(),
            )
            .with_response_partition_limit(2000)
            .with_cursor(cursor.take());
        let response: DescribeTopicPartitionsResponse =
            call(conn, ApiKey::DescribeTopicPartitions, 0, 0, &request).await?;
        for t in &response.topics {
            let topic = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            if t.error_code != 0 {
                bail!("{topic}: {}", error_text(t.error_code, None));
            }
            for p in &t.partitions {
                let list = |v: &[keel_wire::kafka_protocol::messages::BrokerId]| {
                    v.iter().map(|b| b.0).collect::<Vec<i32>>()
                };
                let status = p
                    .unknown_tagged_fields
                    .get(&keel_ext::PARTITION_STATUS_TAG)
                    .and_then(|b| PartitionStatusCode::decode(b).ok());
                let (state, waiting_for) = describe_status(p.leader_id.0, status.as_ref());
                out.push(PartitionInfo {
                    topic: topic.clone(),
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: list(&p.replica_nodes),
                    isr: list(&p.isr_nodes),
                    elr: list(p.eligible_leader_replicas.as_deref().unwrap_or(&[])),
                    last_known_elr: list(p.last_known_elr.as_deref().unwrap_or(&[])),
                    offline: list(&p.offline_replicas),
                    state,
                    waiting_for,
                });
            }
        }
        match response.next_cursor {
            Some(next) => {
                cursor = Some(
                    Cursor::default()
                        .with_topic_name(next.topic_name)
                        .with_partition_index(next.partition_index),
                )
            }
            None => break,
        }
    }
    Ok(out)
}

fn ids(list: &[i32]) -> String {
    list.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn describe_status(leader: i32, status: Option<&PartitionStatusCode>) -> (String, String) {
    let (state, waiting) = match status {
        None if leader >= 0 => ("led", String::new()),
        None => (
            "leaderless",
            "a leader (the broker did not say why)".to_string(),
        ),
        Some(PartitionStatusCode::Led) => ("led", String::new()),
        Some(PartitionStatusCode::WaitingForIsr(b)) => (
            "waiting-for-isr",
            format!("an ISR member to come back: {}", ids(b)),
        ),
        Some(PartitionStatusCode::WaitingForElr(b)) => (
            "waiting-for-elr",
            format!("an ELR member to come back: {}", ids(b)),
        ),
        Some(PartitionStatusCode::UncleanRecovery {
            balanced: true,
            quorum,
        }) => (
            "unclean-recovery",
            format!(
                "Balanced unclean recovery: every one of {} to report its log",
                ids(quorum)
            ),
        ),
        Some(PartitionStatusCode::UncleanRecovery {
            balanced: false, ..
        }) => (
            "unclean-recovery",
            "Proactive unclean recovery: replicas' log reports (elects within 5 s)".to_string(),
        ),
        Some(PartitionStatusCode::Paused) => (
            "paused",
            "an operator (Manual strategy): `keel elect --unclean` or `keel elect --leader N`"
                .to_string(),
        ),
    };
    (state.to_string(), waiting)
}

fn dash(list: &[i32]) -> String {
    if list.is_empty() {
        "-".to_string()
    } else {
        ids(list)
    }
}

/// A fixed-width table of `rows` (the first is the header).
pub(crate) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == row.len() {
                    cell.clone()
                } else {
                    format!("{cell:<width$}", width = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn partition_table(partitions: &[PartitionInfo]) -> String {
    let mut rows = vec![[
        "TOPIC",
        "PARTITION",
        "LEADER",
        "EPOCH",
        "REPLICAS",
        "ISR",
        "ELR",
        "LAST-KNOWN-ELR",
        "OFFLINE",
        "STATE",
    ]
    .map(String::from)
    .to_vec()];
    for p in partitions {
        rows.push(vec![
            p.topic.clone(),
            p.partition.to_string(),
            if p.leader < 0 {
                "none".to_string()
            } else {
                p.leader.to_string()
            },
            p.leader_epoch.to_string(),
            dash(&p.replicas),
            dash(&p.isr),
            dash(&p.elr),
            dash(&p.last_known_elr),
            dash(&p.offline),
            p.state.clone(),
        ]);
    }
    table(&rows)
}

pub async fn configs(bootstrap: Bootstrap, command: ConfigsCommand) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    match command {
        ConfigsCommand::Get { target, all, json } => {
            let (resource_type, resource) = match (&target.topic, target.broker) {
                (Some(topic), _) => (2i8, topic.clone()),
                (None, Some(broker)) => (4i8, broker.to_string()),
                _ => bail!("`configs get` needs --topic T or --broker N"),
            };
            let request = DescribeConfigsRequest::default()
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_string(resource.clone()))
                    .with_configuration_keys(None)])
                .with_include_synonyms(false);
            let response: DescribeConfigsResponse =
                call(&mut conn, ApiKey::DescribeConfigs, 1, 4, &request).await?;
            let result = response
                .results
                .first()
                .context("empty DescribeConfigs answer")?;
            check(result.error_code, result.error_message.as_ref(), &resource)?;
            // Source 1 = DYNAMIC_TOPIC_CONFIG (set on the topic).
            let mut entries: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
            for c in &result.configs {
                if !all && resource_type == 2 && c.config_source != 1 {
                    continue;
                }
                let value = match (&c.value, c.is_sensitive) {
                    (Some(v), _) => v.to_string(),
                    (None, true) => "(hidden)".to_string(),
                    (None, false) => "(none)".to_string(),
                };
                entries.insert(c.name.to_string(), (value, source_name(c.config_source)));
            }
            if json {
                let map: BTreeMap<&String, &String> =
                    entries.iter().map(|(k, (v, _))| (k, v)).collect();
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else {
                let mut rows = vec![vec!["NAME".into(), "VALUE".into(), "SOURCE".into()]];
                for (k, (v, s)) in entries {
                    rows.push(vec![k, v, s.to_string()]);
                }
                print!("{}", table(&rows));
            }
        }
        ConfigsCommand::Set {
            target,
            pairs,
            deletes,
        } => {
            if pairs.is_empty() && deletes.is_empty() {
                bail!("nothing to change: give key=value pairs and/or --delete key");
            }
            let (resource_type, resource) = match (&target.topic, target.cluster) {
                (Some(topic), _) => (2i8, topic.clone()),
                (None, true) => (4i8, String::new()),
                _ => bail!("`configs set` needs --topic T or --cluster"),
            };
            let mut changes = Vec::new();
            for pair in &pairs {
                let (k, v) = split_pair(pair)?;
                changes.push(
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string(k))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(v))),
                );
            }
            for key in &deletes {
                changes.push(
                    AlterableConfig::default()
                        .with_name(StrBytes::from_string(key.clone()))
                        .with_config_operation(1)
                        .with_value(None),
                );
            }
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                AlterConfigsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(StrBytes::from_string(resource.clone()))
                    .with_configs(changes),
            ]);
            let mut retry = Retry::new(&bootstrap);
            loop {
                let response: IncrementalAlterConfigsResponse =
                    call(&mut conn, ApiKey::IncrementalAlterConfigs, 0, 1, &request).await?;
                let result = response
                    .responses
                    .first()
                    .context("empty IncrementalAlterConfigs answer")?;
                if retry.again(result.error_code).await {
                    continue;
                }
                check(
                    result.error_code,
                    result.error_message.as_ref(),
                    &retry.what(if resource.is_empty() {
                        "cluster"
                    } else {
                        &resource
                    }),
                )?;
                break;
            }
            let what = if resource.is_empty() {
                "the cluster default".to_string()
            } else {
                format!("topic {resource}")
            };
            println!("Updated {what}.");
        }
    }
    Ok(())
}

fn source_name(source: i8) -> &'static str {
    match source {
        1 => "topic",
        2 => "dynamic-broker",
        3 => "dynamic-default-broker",
        4 => "static-broker",
        5 => "default",
        6 => "dynamic-broker-logger",
        7 => "controller-default",
        _ => "unknown",
    }
}

pub async fn elect(bootstrap: Bootstrap, args: ElectArgs) -> anyhow::Result<()> {
    if !(args.preferred || args.unclean || args.leader.is_some()) {
        bail!("say which election: --preferred, --unclean or --leader N");
    }
    let mut conn = connect(&bootstrap).await?;
    let mut topic_partitions = None;
    if let Some(topic) = &args.topic {
        let partitions = if args.partitions.is_empty() {
            describe_partitions(&mut conn, std::slice::from_ref(topic))
                .await?
                .iter()
                .map(|p| p.partition)
                .collect()
        } else {
            args.partitions.clone()
        };
        let mut entry = TopicPartitions::default()
            .with_topic(name(topic))
            .with_partitions(partitions.clone());
        if let Some(leader) = args.leader {
            entry = entry.with_unknown_tagged_field(
                keel_ext::DESIRED_LEADERS_TAG,
                keel_ext::encode_desired_leaders(&vec![leader; partitions.len()]),
            );
        }
        topic_partitions = Some(vec![entry]);
    }
    let mut request = ElectLeadersRequest::default()
        .with_election_type(if args.preferred { 0 } else { 1 })
        .with_topic_partitions(topic_partitions)
        .with_timeout_ms(30_000);
    if args.balanced {
        request = request.with_unknown_tagged_field(
            keel_ext::RECOVERY_MODE_TAG,
            keel_ext::encode_recovery_mode(RecoveryModeField::Balanced),
        );
    }
    // Keel's tagged fields need the flexible version. NOT_CONTROLLER at the top or for any
    // partition sends the whole request again, as Kafka's admin client does.
    let mut retry = Retry::new(&bootstrap);
    let response: ElectLeadersResponse = loop {
        let response: ElectLeadersResponse =
            call(&mut conn, ApiKey::ElectLeaders, 2, 2, &request).await?;
        let not_controller = ResponseError::NotController.code();
        let code = if response
            .replica_election_results
            .iter()
            .flat_map(|t| t.partition_result.iter())
            .any(|p| p.error_code == not_controller)
        {
            not_controller
        } else {
            response.error_code
        };
        if retry.again(code).await {
            continue;
        }
        break response;
    };
    check(response.error_code, None, &retry.what("election refused"))?;
    let mut failed = 0;
    let mut any = false;
    for t in &response.replica_election_results {
        for p in &t.partition_result {
            any = true;
            let tp = format!("{}-{}", t.topic.as_str(), p.partition_id);
            let message = p.error_message.as_ref().map(|m| m.as_str());
            match (p.error_code, message) {
                (0, Some(RECOVERY_STARTED)) => println!("{tp}: unclean recovery started"),
                (0, Some(m)) => println!("{tp}: elected; warning: {m}"),
                (0, None) => println!("{tp}: elected"),
                (code, _) if code == ResponseError::ElectionNotNeeded.code() => {
                    println!("{tp}: no election needed")
                }
                (code, m) => {
                    failed += 1;
                    println!(
                        "{tp}: failed: {}",
                        error_text(code, p.error_message.as_ref().filter(|_| m.is_some()))
                    );
                }
            }
        }
    }
    if !any {
        println!("No partition needed an election.");
    }
    if failed > 0 {
        bail!("{failed} partition(s) failed");
    }
    Ok(())
}

/// The cluster view: partitions that need attention and why.
#[derive(Debug, Serialize)]
struct StatusReport {
    brokers: Vec<i32>,
    topics: usize,
    partitions: usize,
    offline: Vec<PartitionInfo>,
    under_min_isr: Vec<PartitionInfo>,
    under_replicated: Vec<PartitionInfo>,
    /// Partitions being reassigned (issue 24), from ListPartitionReassignments.
    reassigning: Vec<Reassigning>,
    /// Log directories taken offline (issue 19), from each broker's DescribeLogDirs.
    offline_log_dirs: Vec<LogDirProblem>,
    /// Log directories holding damaged data set aside (quarantine directories).
    quarantined: Vec<LogDirProblem>,
    /// Brokers whose log directories could not be described, and why.
    unreachable: Vec<(i32, String)>,
}

/// One partition being reassigned: all its replicas (the target's first) and what is being
/// added and removed.
#[derive(Debug, Serialize)]
struct Reassigning {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
    adding: Vec<i32>,
    removing: Vec<i32>,
}

/// The partitions being reassigned (ListPartitionReassignments, every topic).
async fn reassignments(conn: &mut Conn) -> anyhow::Result<Vec<Reassigning>> {
    use keel_wire::kafka_protocol::messages::{
        ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    };
    let response: ListPartitionReassignmentsResponse = call(
        conn,
        ApiKey::ListPartitionReassignments,
        0,
        0,
        &ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(None),
    )
    .await?;
    if response.error_code != 0 {
        anyhow::bail!(
            "ListPartitionReassignments: error {} {}",
            response.error_code,
            response.error_message.as_deref().unwrap_or_default()
        );
    }
    let ids = |v: &[keel_wire::kafka_protocol::messages::BrokerId]| v.iter().map(|b| b.0).collect();
    let mut out: Vec<Reassigning> = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| Reassigning {
                topic: t.name.to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(out)
}

/// One broker's log directory that needs an operator.
#[derive(Debug, Serialize)]
struct LogDirProblem {
    broker: i32,
    dir: String,
    /// Why it is offline (offline directories).
    reason: Option<String>,
    quarantines: i32,
    quarantined_bytes: i64,
}

/// Every broker's log directories (DescribeLogDirs with no partitions), sorted into offline
/// ones, ones holding quarantined data, and brokers that could not answer.
async fn log_dir_problems(
    brokers: &[(i32, String)],
) -> (Vec<LogDirProblem>, Vec<LogDirProblem>, Vec<(i32, String)>) {
    let (mut offline, mut quarantined, mut unreachable) = (Vec::new(), Vec::new(), Vec::new());
    for (id, address) in brokers {
        let described = async {
            let mut conn = Connection::connect(network(), address, "keel-admin").await?;
            let response: DescribeLogDirsResponse = call(
                &mut conn,
                ApiKey::DescribeLogDirs,
                2,
                4,
                &DescribeLogDirsRequest::default().with_topics(Some(Vec::new())),
            )
            .await?;
            anyhow::Ok(response)
        };
        let response = match described.await {
            Ok(r) => r,
            Err(e) => {
                unreachable.push((*id, format!("{e:#}")));
                continue;
            }
        };
        for result in response.results {
            let status = result
                .unknown_tagged_fields
                .get(&keel_ext::LOG_DIR_STATUS_TAG)
                .and_then(|b| keel_ext::LogDirStatus::decode(b).ok())
                .unwrap_or_default();
            let problem = LogDirProblem {
                broker: *id,
                dir: result.log_dir.to_string(),
                reason: (result.error_code != 0).then(|| {
                    status
                        .offline_reason
                        .clone()
                        .unwrap_or_else(|| error_text(result.error_code, None))
                }),
                quarantines: status.quarantine_count,
                quarantined_bytes: status.quarantined_bytes,
            };
            if problem.reason.is_some() {
                offline.push(problem);
            } else if problem.quarantines > 0 {
                quarantined.push(problem);
            }
        }
    }
    (offline, quarantined, unreachable)
}

pub async fn status(bootstrap: Bootstrap, args: StatusArgs) -> anyhow::Result<()> {
    let mut conn = connect(&bootstrap).await?;
    let metadata: MetadataResponse = call(
        &mut conn,
        ApiKey::Metadata,
        1,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await?;
    let mut brokers: Vec<i32> = metadata.brokers.iter().map(|b| b.node_id.0).collect();
    brokers.sort();
    let mut addresses: Vec<(i32, String)> = metadata
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
        .collect();
    addresses.sort();
    let (offline_log_dirs, quarantined, unreachable) = log_dir_problems(&addresses).await;
    let partitions = describe_partitions(&mut conn, &[]).await?;
    let mut topics: Vec<String> = partitions.iter().map(|p| p.topic.clone()).collect();
    topics.dedup();
    let min_isr = min_isr_of(&mut conn, &topics).await?;
    let reassigning = reassignments(&mut conn).await?;
    let mut report = StatusReport {
        brokers,
        topics: topics.len(),
        partitions: partitions.len(),
        offline: Vec::new(),
        under_min_isr: Vec::new(),
        under_replicated: Vec::new(),
        reassigning: Vec::new(),
        offline_log_dirs,
        quarantined,
        unreachable,
    };
    for p in partitions {
        let min = min_isr.get(&p.topic).copied().unwrap_or(1);
        let moving = reassigning
            .iter()
            .find(|r| r.topic == p.topic && r.partition == p.partition);
        // A partition being reassigned counts its replicas without those being added (Kafka's
        // replication factor during a reassignment), and its min ISR is that of its target.
        let replication_factor = p.replicas.len() - moving.map_or(0, |r| r.adding.len());
        let target = p.replicas.len() - moving.map_or(0, |r| r.removing.len());
        if p.leader < 0 {
            report.offline.push(p);
        } else if p.isr.len() < min.min(target) {
            report.under_min_isr.push(p);
        } else if p.isr.len() < replication_factor {
            report.under_replicated.push(p);
        }
    }
    report.reassigning = reassigning;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "brokers serving: {}   topics: {}   partitions: {}",
        dash(&report.brokers),
        report.topics,
        report.partitions
    );
    let section = |title: &str, list: &[PartitionInfo], with_wait: bool| {
        if list.is_empty() {
            println!("{title}: none");
            return;
        }
        println!("{title}: {}", list.len());
        let mut rows = vec![[
            "TOPIC",
            "PARTITION",
            "LEADER",
            "ISR",
            "ELR",
            "LAST-KNOWN-ELR",
            "OFFLINE",
            "STATE",
        ]
        .map(String::from)
        .to_vec()];
        if with_wait {
            rows[0].push("WAITING FOR".to_string());
        }
        for p in list {
            let mut row = vec![
                p.topic.clone(),
                p.partition.to_string(),
                if p.leader < 0 {
                    "none".to_string()
                } else {
                    p.leader.to_string()
                },
                dash(&p.isr),
                dash(&p.elr),
                dash(&p.last_known_elr),
                dash(&p.offline),
                p.state.clone(),
            ];
            if with_wait {
                row.push(p.waiting_for.clone());
            }
            rows.push(row);
        }
        print!("{}", table(&rows));
    };
    section("offline partitions (no leader)", &report.offline, true);
    section(
        "under min ISR (acks=all produce fails)",
        &report.under_min_isr,
        false,
    );
    section("under-replicated", &report.under_replicated, false);
    if report.reassigning.is_empty() {
        println!("reassignments in progress: none");
    } else {
        println!(
            "reassignments in progress: {} (kafka-reassign-partitions.sh --list)",
            report.reassigning.len()
        );
        let mut rows = vec![["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"]
            .map(String::from)
            .to_vec()];
        for r in &report.reassigning {
            rows.push(vec![
                r.topic.clone(),
                r.partition.to_string(),
                dash(&r.replicas),
                dash(&r.adding),
                dash(&r.removing),
            ]);
        }
        print!("{}", table(&rows));
    }
    if report.offline_log_dirs.is_empty() {
        println!("offline log directories: none");
    } else {
        println!(
            "offline log directories: {} (restart the broker once the disk is fixed)",
            report.offline_log_dirs.len()
        );
        let mut rows = vec![["BROKER", "DIRECTORY", "REASON"].map(String::from).to_vec()];
        for d in &report.offline_log_dirs {
            rows.push(vec![
                d.broker.to_string(),
                d.dir.clone(),
                d.reason.clone().unwrap_or_default(),
            ]);
        }
        print!("{}", table(&rows));
    }
    if report.quarantined.is_empty() {
        println!("damaged data set aside: none");
    } else {
        println!(
            "damaged data set aside: {} log directories hold *-quarantine directories (kept \
             for an operator; see docs/operations.md)",
            report.quarantined.len()
        );
        let mut rows = vec![["BROKER", "DIRECTORY", "QUARANTINES", "BYTES"]
            .map(String::from)
            .to_vec()];
        for d in &report.quarantined {
            rows.push(vec![
                d.broker.to_string(),
                d.dir.clone(),
                d.quarantines.to_string(),
                d.quarantined_bytes.to_string(),
            ]);
        }
        print!("{}", table(&rows));
    }
    for (broker, error) in &report.unreachable {
        println!("broker {broker}: log directories not described: {error}");
    }
    Ok(())
}

/// Each topic's effective `min.insync.replicas` (DescribeConfigs).
async fn min_isr_of(conn: &mut Conn, topics: &[String]) -> anyhow::Result<BTreeMap<String, usize>> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let key = StrBytes::from_static_str("min.insync.replicas");
    let request = DescribeConfigsRequest::default().with_resources(
        topics
            .iter()
            .map(|t| {
                DescribeConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string(t.clone()))
                    .with_configuration_keys(Some(vec![key.clone()]))
            })
            .collect(),
    );
    let response: DescribeConfigsResponse =
        call(conn, ApiKey::DescribeConfigs, 1, 4, &request).await?;
    Ok(response
        .results
        .iter()
        .filter(|r| r.error_code == 0)
        .filter_map(|r| {
            let value = r.configs.iter().find(|c| c.name == key)?.value.as_ref()?;
            Some((r.resource_name.to_string(), value.parse().ok()?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: the table pads every column but the last to its widest cell.
    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["A".to_string(), "BB".to_string(), "C".to_string()],
            vec!["long".to_string(), "x".to_string(), "y".to_string()],
        ];
        assert_eq!(table(&rows), "A     BB  C\nlong  x   y\n");
    }

    // Shows: each status becomes a state and a sentence naming the brokers waited for.
    #[test]
    fn statuses_in_words() {
        let (state, why) = describe_status(-1, Some(&PartitionStatusCode::WaitingForElr(vec![2])));
        assert_eq!(
            (state.as_str(), why.as_str()),
            ("waiting-for-elr", "an ELR member to come back: 2")
        );
        let (state, why) = describe_status(
            -1,
            Some(&PartitionStatusCode::UncleanRecovery {
                balanced: true,
                quorum: vec![1, 3],
            }),
        );
        assert_eq!(state, "unclean-recovery");
        assert!(why.contains("1,3"), "{why}");
        assert_eq!(
            describe_status(-1, Some(&PartitionStatusCode::Paused)).0,
            "paused"
        );
        assert_eq!(describe_status(4, None).0, "led");
        assert_eq!(split_pair("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(split_pair("novalue").is_err());
        assert!(split_pair("=x").is_err());
    }
}
