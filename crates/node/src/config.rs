//! Broker configuration: Kafka's property names and defaults.
//!
//! A config file is a Java `.properties` file; `--override key=value` pairs are applied on top.
//! Unknown keys are kept (and logged once at startup) so a Kafka `server.properties` can be
//! reused as it is; a known key with a value of the wrong type is an error that names it.
//! The security settings (the listener protocol map, the authorizer) are checked before
//! anything else ([`check_security`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// A parse or validation failure, naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid value {value:?} for {key}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("missing required config {0}")]
    Missing(&'static str),
    #[error("malformed line {line}: {text:?} (expected key=value)")]
    MalformedLine { line: usize, text: String },
}

/// Parses the text of a `.properties` file: `key=value` or `key: value` lines, `#`/`!`
/// comments, blank lines, and `\` line continuations.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    let mut pending = String::new();
    let mut pending_start = 0;
    for (number, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        if pending.is_empty() {
            pending_start = number + 1;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry
            .find(['=', ':'])
            .ok_or_else(|| ConfigError::MalformedLine {
                line: pending_start,
                text: entry.clone(),
            })?;
        let key = entry[..split].trim().to_string();
        let value = entry[split + 1..].trim().to_string();
        if key.is_empty() {
            return Err(ConfigError::MalformedLine {
                line: pending_start,
                text: entry,
            });
        }
        map.insert(key, value);
    }
    Ok(map)
}

/// Parses one `key=value` override.
pub fn parse_override(text: &str) -> Result<(String, String), ConfigError> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| ConfigError::MalformedLine {
            line: 0,
            text: text.to_string(),
        })?;
    Ok((key.trim().to_string(), value.trim().to_string()))
}

/// A `listeners` entry such as `PLAINTEXT://127.0.0.1:9092`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    pub fn parse(text: &str) -> Result<Listener, String> {
        let (name, rest) = text
            .split_once("://")
            .ok_or_else(|| format!("{text:?} is not NAME://HOST:PORT"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} has no port"))?;
        let port = port
            .parse::<u16>()
            .map_err(|e| format!("bad port in {text:?}: {e}"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Listener {
            name: name.to_string(),
            host: host.to_string(),
            port,
        })
    }
}

/// How `unclean.recovery.strategy` resolves (KIP-966); `None` in config means "derive from
/// `unclean.leader.election.enable`".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UncleanRecoveryStrategy {
    Proactive,
    Balanced,
    Manual,
}

impl UncleanRecoveryStrategy {
    pub fn parse(text: &str) -> Option<UncleanRecoveryStrategy> {
        match text.to_ascii_lowercase().as_str() {
            "proactive" => Some(UncleanRecoveryStrategy::Proactive),
            "balanced" => Some(UncleanRecoveryStrategy::Balanced),
            "manual" => Some(UncleanRecoveryStrategy::Manual),
            _ => None,
        }
    }
}

/// Kafka's default `fetch.max.bytes` (55 MiB).
pub const FETCH_MAX_BYTES_DEFAULT: usize = 57_671_680;

/// The broker's static configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `node.id` (or `broker.id`).
    pub node_id: i32,
    /// `log.dirs` (or `log.dir`); default `/tmp/kraft-combined-logs`.
    pub log_dirs: Vec<PathBuf>,
    /// `listeners`; default `PLAINTEXT://:9092`.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners`; default: `listeners`, with an empty host advertised as
    /// `localhost`.
    pub advertised_listeners: Vec<Listener>,
    /// Every listener's security protocol (`listener.security.protocol.map`, or Kafka's default
    /// map with the controller listeners as PLAINTEXT).
    pub listener_protocols: crate::security::ProtocolMap,
    /// The listener other brokers' replica fetchers connect to (`inter.broker.listener.name`,
    /// or the one `security.inter.broker.protocol` names; upper-cased).
    pub inter_broker_listener_name: String,
    /// `num.partitions`; default 1.
    pub num_partitions: i32,
    /// `default.replication.factor`; default 1.
    pub default_replication_factor: i16,
    /// `auto.create.topics.enable`; default true.
    pub auto_create_topics_enable: bool,
    /// `delete.topic.enable`; default true.
    pub delete_topic_enable: bool,
    /// `message.max.bytes`; default 1048588.
    pub message_max_bytes: i32,
    /// `socket.request.max.bytes`; default 104857600.
    pub socket_request_max_bytes: usize,
    /// `fetch.max.bytes`: the most a Fetch response carries, whatever the client asks;
    /// default 57671680 (55 MiB).
    pub fetch_max_bytes: usize,
    /// `log.retention.check.interval.ms`; default 300000.
    pub log_retention_check_interval_ms: u64,
    /// `log.cleaner.enable`: run the log cleaner for compacted topics; default true.
    pub log_cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`: pause between cleaner passes over the partitions; default 15000.
    pub log_cleaner_backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: memory budget of one pass's key → offset map; default
    /// 134217728 (128 MiB).
    pub log_cleaner_dedupe_buffer_size: u64,
    /// `log.scrub.enable` (Keel): validate every batch of every segment in the background;
    /// default true.
    pub log_scrub_enable: bool,
    /// `log.scrub.interval.ms` (Keel): a scrub pass over every hosted partition starts at most
    /// this often; default 86400000 (1 day).
    pub log_scrub_interval_ms: u64,
    /// `log.scrub.bytes.per.second` (Keel): the scrubber's read rate; default 52428800
    /// (50 MiB/s).
    pub log_scrub_bytes_per_second: u64,
    /// `quota.window.num` and `quota.window.size.seconds`: the windows client quota usage is
    /// measured over (Kafka's defaults 11 and 1).
    pub quota_windows: crate::quotas::QuotaWindows,
    /// `producer.id.expiration.ms`: an idempotent producer idle this long is forgotten by the
    /// partitions it wrote to; default 86400000 (1 day).
    pub producer_id_expiration_ms: u64,
    /// `producer.id.expiration.check.interval.ms`; default 600000.
    pub producer_id_expiration_check_interval_ms: u64,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets`; default 50.
    pub offsets_topic_num_partitions: i32,
    /// `offsets.topic.replication.factor`: default 3, or 1 for a single-node broker (no
    /// `controller.quorum.voters`), as Kafka's own single-node `server.properties` sets it.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`; default 104857600.
    pub offsets_topic_segment_bytes: u64,
    /// `offsets.commit.timeout.ms`: how long a group write waits for acks=all; default 5000.
    pub offsets_commit_timeout_ms: u64,
    /// `offset.metadata.max.bytes`: the longest commit metadata string; default 4096.
    pub offset_metadata_max_bytes: usize,
    /// The transaction coordinator's settings (`transaction.*`, `transactional.id.*`).
    pub transactions: crate::txn_coordinator::TxnConfig,
    /// `group.initial.rebalance.delay.ms`; default 3000.
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`; default 6000.
    pub group_min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`; default 1800000.
    pub group_max_session_timeout_ms: i32,
    /// `group.max.size`; default 2147483647.
    pub group_max_size: i32,
    /// `offsets.retention.minutes`: committed offsets of a group that has been empty this long
    /// (of a group that never had members: this long after each commit) are deleted; default
    /// 10080 (7 days).
    pub offsets_retention_minutes: u64,
    /// `offsets.retention.check.interval.ms`; default 600000.
    pub offsets_retention_check_interval_ms: u64,
    /// `log.flush.scheduler.interval.ms`; default: effectively never (Kafka: Long.MAX).
    pub log_flush_scheduler_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`; default 60000.
    pub log_flush_offset_checkpoint_interval_ms: u64,
    /// `replica.high.watermark.checkpoint.interval.ms`; default 5000.
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    /// `eligible.leader.replicas.enable` (Keel's switch between KIP-966 and classic Kafka
    /// behaviour); default true.
    pub eligible_leader_replicas_enable: bool,
    /// `process.roles` as given (empty = a single-node cluster: this process runs the
    /// controller for itself).
    pub process_roles: Vec<String>,
    /// `controller.quorum.voters`: `(id, host:port)` of each controller.
    pub controller_quorum_voters: Vec<(i32, String)>,
    /// `controller.quorum.bootstrap.servers` (KIP-853): `host:port` of controllers to contact,
    /// without their ids. A broker uses them as it uses the voters' addresses; a controller
    /// resolves them to its voter set ([`standalone_voter`]).
    pub controller_quorum_bootstrap_servers: Vec<String>,
    /// `controller.listener.names` (listeners with these names are the controller's, not the
    /// broker's).
    pub controller_listener_names: Vec<String>,
    /// `broker.heartbeat.interval.ms`; default 2000.
    pub broker_heartbeat_interval_ms: u64,
    /// `broker.session.timeout.ms` (used by an in-process controller); default 9000.
    pub broker_session_timeout_ms: u64,
    /// `replica.lag.time.max.ms`; default 30000.
    pub replica_lag_time_max_ms: u64,
    /// `replica.fetch.backoff.ms`; default 1000.
    pub replica_fetch_backoff_ms: u64,
    /// `replica.fetch.max.bytes` (per partition); default 1048576.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`; default 10485760.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.wait.max.ms`; default 500.
    pub replica_fetch_wait_max_ms: i32,
    /// `controlled.shutdown.enable`; default true.
    pub controlled_shutdown_enable: bool,
    /// Topic-config defaults set at broker level (`log.retention.ms`, `min.insync.replicas`,
    /// ...), keyed by *topic* config name.
    pub topic_defaults: BTreeMap<String, String>,
    /// Every property as given, for DescribeConfigs on the broker resource.
    pub raw: BTreeMap<String, String>,
    /// Keys that Keel does not know (logged at startup).
    pub unknown_keys: Vec<String>,
    /// `metrics.port` / `metrics.host`: where this process serves `/metrics` (`None` = off,
    /// the default). Host default: the first broker listener's.
    pub metrics_endpoint: Option<crate::metrics::MetricsEndpoint>,
    /// The registry this broker (and its in-process or combined controller) reports into: a
    /// new one per parsed config; `keel dev` and tests share one between nodes. Not a property.
    pub metrics: crate::metrics::Metrics,
    /// Fired to reload every TLS keystore and truststore (SIGHUP in `keel server`). Not a
    /// property; each parsed config gets its own.
    pub tls_reload: crate::security::TlsReload,
    /// The authorizer's settings (`authorizer.class.name`, `super.users`,
    /// `allow.everyone.if.no.acl.found`): `None` without an authorizer.
    pub authorizer: Option<keel_controller::acl::AuthorizerConfig>,
}

/// Keys the broker reads directly; anything else that is not a topic-default synonym is
/// "unknown".
pub(crate) const BROKER_KEYS: &[&str] = &[
    "node.id",
    "broker.id",
    "log.dirs",
    "log.dir",
    "listeners",
    "advertised.listeners",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "delete.topic.enable",
    "message.max.bytes",
    "socket.request.max.bytes",
    "fetch.max.bytes",
    "log.retention.check.interval.ms",
    "log.cleaner.enable",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "log.scrub.enable",
    "log.scrub.interval.ms",
    "log.scrub.bytes.per.second",
    crate::quotas::QUOTA_WINDOW_NUM,
    crate::quotas::QUOTA_WINDOW_SIZE_SECONDS,
    "producer.id.expiration.ms",
    "producer.id.expiration.check.interval.ms",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes",
    "offsets.commit.timeout.ms",
    "offset.metadata.max.bytes",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "eligible.leader.replicas.enable",
    "process.roles",
    "controller.quorum.voters",
    CONTROLLER_QUORUM_BOOTSTRAP_SERVERS,
    "controller.listener.names",
    crate::controller_server::mutation_quota::CONTROLLER_QUOTA_WINDOW_NUM,
    crate::controller_server::mutation_quota::CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS,
    "metadata.log.dir",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "replica.lag.time.max.ms",
    "replica.fetch.backoff.ms",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "controlled.shutdown.enable",
    LISTENER_SECURITY_PROTOCOL_MAP,
    "inter.broker.listener.name",
    SECURITY_INTER_BROKER_PROTOCOL,
    AUTHORIZER_CLASS_NAME,
    crate::security::authorizer::SUPER_USERS,
    crate::security::authorizer::ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    crate::metrics::http::METRICS_PORT,
    crate::metrics::http::METRICS_HOST,
    "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.segment.bytes",
    "transaction.max.timeout.ms",
    "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
];

fn parse_value<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    value.parse::<T>().map_err(|e| ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: e.to_string(),
    })
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason: "expected true or false".to_string(),
        }),
    }
}

fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            Listener::parse(s).map_err(|reason| ConfigError::InvalidValue {
                key: key.to_string(),
                value: value.to_string(),
                reason,
            })
        })
        .collect()
}

impl BrokerConfig {
    /// Builds the config from properties (file contents with overrides already applied).
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<BrokerConfig, ConfigError> {
        check_security(props)?;
        let get = |key: &str| props.get(key).map(String::as_str);
        let node_id = match get("node.id").or(get("broker.id")) {
            Some(v) => parse_value::<i32>("node.id", v)?,
            None => return Err(ConfigError::Missing("node.id")),
        };
        if node_id < 0 {
            return Err(ConfigError::InvalidValue {
                key: "node.id".into(),
                value: node_id.to_string(),
                reason: "must be >= 0".into(),
            });
        }
        let log_dirs: Vec<PathBuf> = get("log.dirs")
            .or(get("log.dir"))
            .unwrap_or("/tmp/kraft-combined-logs")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        if log_dirs.is_empty() {
            return Err(ConfigError::Missing("log.dirs"));
        }
        let controller_listener_names: Vec<String> = get("controller.listener.names")
            .unwrap_or("CONTROLLER")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        // The broker serves clients on the listeners that are not the controller's.
        let listeners: Vec<Listener> =
            parse_listeners("listeners", get("listeners").unwrap_or("PLAINTEXT://:9092"))?
                .into_iter()
                .filter(|l| !controller_listener_names.contains(&l.name))
                .collect();
        if listeners.is_empty() {
            return Err(ConfigError::InvalidValue {
                key: "listeners".into(),
                value: get("listeners").unwrap_or_default().to_string(),
                reason: "names no broker listener (every listener is a controller listener)".into(),
            });
        }
        let listener_protocols =
            crate::security::ProtocolMap::from_properties(props, &controller_listener_names)?;
        for listener in &listeners {
            listener_protocols.protocol_of("listeners", listener)?;
        }
        let inter_broker_listener_name =
            crate::security::inter_broker_listener_name(props, &listener_protocols, &listeners)?;
        let process_roles: Vec<String> = get("process.roles")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let controller_quorum_voters = match get("controller.quorum.voters") {
            Some(text) => crate::cluster::parse_quorum_voters(text).map_err(|reason| {
                ConfigError::InvalidValue {
                    key: "controller.quorum.voters".into(),
                    value: text.to_string(),
                    reason,
                }
            })?,
            None => Vec::new(),
        };
        let controller_quorum_bootstrap_servers = match get(CONTROLLER_QUORUM_BOOTSTRAP_SERVERS) {
            Some(text) => {
                parse_bootstrap_servers(text).map_err(|reason| ConfigError::InvalidValue {
                    key: CONTROLLER_QUORUM_BOOTSTRAP_SERVERS.into(),
                    value: text.to_string(),
                    reason,
                })?
            }
            None => Vec::new(),
        };
        // A single-node cluster (its controller in-process) names no controllers at all.
        let names_controllers =
            !controller_quorum_voters.is_empty() || !controller_quorum_bootstrap_servers.is_empty();
        // Kafka's advertised.listeners may name the controller listener too (KIP-919); clients
        // are given the broker's.
        let advertised_broker = match get("advertised.listeners") {
            Some(v) => parse_listeners("advertised.listeners", v)?
                .into_iter()
                .filter(|l| !controller_listener_names.contains(&l.name))
                .collect(),
            None => Vec::new(),
        };
        let advertised_listeners = match advertised_broker.is_empty() {
            false => advertised_broker,
            true => listeners
                .iter()
                .map(|l| Listener {
                    host: if l.host.is_empty() || l.host == "0.0.0.0" {
                        "localhost".to_string()
                    } else {
                        l.host.clone()
                    },
                    ..l.clone()
                })
                .collect(),
        };
        let num = |key: &str, default: u64| -> Result<u64, ConfigError> {
            get(key).map_or(Ok(default), |v| parse_value::<u64>(key, v))
        };
        let metrics_endpoint =
            crate::metrics::MetricsEndpoint::from_properties(props, &listeners[0].host)?;
        if !advertised_listeners
            .iter()
            .any(|l| l.name.eq_ignore_ascii_case(&inter_broker_listener_name))
        {
            return Err(ConfigError::InvalidValue {
                key: crate::security::INTER_BROKER_LISTENER_NAME.into(),
                value: inter_broker_listener_name,
                reason: "must be a listener name defined in advertised.listeners".into(),
            });
        }
        let config = BrokerConfig {
            node_id,
            log_dirs,
            listeners,
            advertised_listeners,
            listener_protocols,
            inter_broker_listener_name,
            num_partitions: get("num.partitions")
                .map_or(Ok(1), |v| parse_value("num.partitions", v))?,
            default_replication_factor: get("default.replication.factor")
                .map_or(Ok(1), |v| parse_value("default.replication.factor", v))?,
            auto_create_topics_enable: get("auto.create.topics.enable")
                .map_or(Ok(true), |v| parse_bool("auto.create.topics.enable", v))?,
            delete_topic_enable: get("delete.topic.enable")
                .map_or(Ok(true), |v| parse_bool("delete.topic.enable", v))?,
            message_max_bytes: get("message.max.bytes")
                .map_or(Ok(1_048_588), |v| parse_value("message.max.bytes", v))?,
            socket_request_max_bytes: get("socket.request.max.bytes").map_or(
                Ok(keel_wire::frame::SOCKET_REQUEST_MAX_BYTES_DEFAULT),
                |v| parse_value("socket.request.max.bytes", v),
            )?,
            fetch_max_bytes: get("fetch.max.bytes").map_or(Ok(FETCH_MAX_BYTES_DEFAULT), |v| {
                parse_value("fetch.max.bytes", v)
            })?,
            log_retention_check_interval_ms: num("log.retention.check.interval.ms", 300_000)?,
            log_cleaner_enable: get("log.cleaner.enable")
                .map_or(Ok(true), |v| parse_bool("log.cleaner.enable", v))?,
            log_cleaner_backoff_ms: num("log.cleaner.backoff.ms", 15_000)?,
            log_cleaner_dedupe_buffer_size: num("log.cleaner.dedupe.buffer.size", 134_217_728)?,
            log_scrub_enable: get("log.scrub.enable")
                .map_or(Ok(true), |v| parse_bool("log.scrub.enable", v))?,
            log_scrub_interval_ms: num("log.scrub.interval.ms", 86_400_000)?,
            log_scrub_bytes_per_second: match num("log.scrub.bytes.per.second", 52_428_800)? {
                0 => {
                    return Err(ConfigError::InvalidValue {
                        key: "log.scrub.bytes.per.second".into(),
                        value: "0".into(),
                        reason: "must be at least 1".into(),
                    })
                }
                rate => rate,
            },
            quota_windows: {
                let at_least_one = |key: &str, default: u64| match num(key, default)? {
                    0 => Err(ConfigError::InvalidValue {
                        key: key.into(),
                        value: "0".into(),
                        reason: "must be at least 1".into(),
                    }),
                    // Bounded: a window over a day measures nothing useful.
                    v if v > 86_400 => Err(ConfigError::InvalidValue {
                        key: key.into(),
                        value: v.to_string(),
                        reason: "must be at most 86400".into(),
                    }),
                    v => Ok(v),
                };
                crate::quotas::QuotaWindows {
                    num: at_least_one(
                        crate::quotas::QUOTA_WINDOW_NUM,
                        crate::quotas::DEFAULT_QUOTA_WINDOW_NUM.into(),
                    )? as u32,
                    size_ms: at_least_one(
                        crate::quotas::QUOTA_WINDOW_SIZE_SECONDS,
                        crate::quotas::DEFAULT_QUOTA_WINDOW_SIZE_SECONDS.into(),
                    )? * 1000,
                }
            },
            producer_id_expiration_ms: num("producer.id.expiration.ms", 86_400_000)?,
            producer_id_expiration_check_interval_ms: num(
                "producer.id.expiration.check.interval.ms",
                600_000,
            )?,
            offsets_topic_num_partitions: get("offsets.topic.num.partitions")
                .map_or(Ok(50), |v| parse_value("offsets.topic.num.partitions", v))?,
            offsets_topic_replication_factor: get("offsets.topic.replication.factor")
                .map_or(Ok(if names_controllers { 3 } else { 1 }), |v| {
                    parse_value("offsets.topic.replication.factor", v)
                })?,
            offsets_topic_segment_bytes: num("offsets.topic.segment.bytes", 104_857_600)?,
            offsets_commit_timeout_ms: num("offsets.commit.timeout.ms", 5_000)?.max(1),
            offset_metadata_max_bytes: get("offset.metadata.max.bytes")
                .map_or(Ok(4096), |v| parse_value("offset.metadata.max.bytes", v))?,
            transactions: crate::txn_coordinator::TxnConfig {
                num_partitions: get("transaction.state.log.num.partitions")
                    .map_or(Ok(50), |v| {
                        parse_value("transaction.state.log.num.partitions", v)
                    })?,
                replication_factor: get("transaction.state.log.replication.factor")
                    .map_or(Ok(if names_controllers { 3 } else { 1 }), |v| {
                        parse_value("transaction.state.log.replication.factor", v)
                    })?,
                min_isr: get("transaction.state.log.min.isr")
                    .map_or(Ok(2), |v| parse_value("transaction.state.log.min.isr", v))?,
                segment_bytes: num("transaction.state.log.segment.bytes", 104_857_600)?,
                max_timeout_ms: get("transaction.max.timeout.ms").map_or(Ok(900_000), |v| {
                    parse_value("transaction.max.timeout.ms", v)
                })?,
                id_expiration_ms: num("transactional.id.expiration.ms", 604_800_000)?.max(1),
                abort_timed_out_interval_ms: num(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    10_000,
                )?
                .max(1),
                remove_expired_interval_ms: num(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                    3_600_000,
                )?
                .max(1),
            },
            group_initial_rebalance_delay_ms: num("group.initial.rebalance.delay.ms", 3_000)?,
            group_min_session_timeout_ms: get("group.min.session.timeout.ms")
                .map_or(Ok(6_000), |v| {
                    parse_value("group.min.session.timeout.ms", v)
                })?,
            group_max_session_timeout_ms: get("group.max.session.timeout.ms")
                .map_or(Ok(1_800_000), |v| {
                    parse_value("group.max.session.timeout.ms", v)
                })?,
            group_max_size: get("group.max.size")
                .map_or(Ok(i32::MAX), |v| parse_value("group.max.size", v))?,
            offsets_retention_minutes: num("offsets.retention.minutes", 10_080)?.max(1),
            offsets_retention_check_interval_ms: num(
                "offsets.retention.check.interval.ms",
                600_000,
            )?
            .max(1),
            log_flush_scheduler_interval_ms: num("log.flush.scheduler.interval.ms", u64::MAX)?,
            log_flush_offset_checkpoint_interval_ms: num(
                "log.flush.offset.checkpoint.interval.ms",
                60_000,
            )?,
            replica_high_watermark_checkpoint_interval_ms: num(
                "replica.high.watermark.checkpoint.interval.ms",
                5_000,
            )?,
            eligible_leader_replicas_enable: get("eligible.leader.replicas.enable")
                .map_or(Ok(true), |v| {
                    parse_bool("eligible.leader.replicas.enable", v)
                })?,
            process_roles,
            controller_quorum_voters,
            controller_quorum_bootstrap_servers,
            controller_listener_names,
            broker_heartbeat_interval_ms: num("broker.heartbeat.interval.ms", 2_000)?.max(1),
            broker_session_timeout_ms: num("broker.session.timeout.ms", 9_000)?.max(1),
            replica_lag_time_max_ms: num("replica.lag.time.max.ms", 30_000)?.max(1),
            replica_fetch_backoff_ms: num("replica.fetch.backoff.ms", 1_000)?,
            replica_fetch_max_bytes: get("replica.fetch.max.bytes")
                .map_or(Ok(1_048_576), |v| parse_value("replica.fetch.max.bytes", v))?,
            replica_fetch_response_max_bytes: get("replica.fetch.response.max.bytes")
                .map_or(Ok(10_485_760), |v| {
                    parse_value("replica.fetch.response.max.bytes", v)
                })?,
            replica_fetch_wait_max_ms: get("replica.fetch.wait.max.ms")
                .map_or(Ok(500), |v| parse_value("replica.fetch.wait.max.ms", v))?,
            controlled_shutdown_enable: get("controlled.shutdown.enable")
                .map_or(Ok(true), |v| parse_bool("controlled.shutdown.enable", v))?,
            topic_defaults: crate::topic_config::defaults_from_broker_props(props)?,
            raw: props.clone(),
            unknown_keys: props
                .keys()
                .filter(|k| {
                    !BROKER_KEYS.contains(&k.as_str())
                        && !crate::topic_config::is_broker_synonym(k)
                        && !crate::security::is_security_key(k)
                })
                .cloned()
                .collect(),
            metrics_endpoint,
            metrics: crate::metrics::Metrics::new(),
            tls_reload: crate::security::TlsReload::default(),
            authorizer: crate::security::authorizer::config_from_properties(props)?,
        };
        if config.offsets_topic_num_partitions < 1 || config.offsets_topic_replication_factor < 1 {
            return Err(ConfigError::InvalidValue {
                key: "offsets.topic.num.partitions / offsets.topic.replication.factor".into(),
                value: format!(
                    "{} / {}",
                    config.offsets_topic_num_partitions, config.offsets_topic_replication_factor
                ),
                reason: "must be at least 1".into(),
            });
        }
        let txn = &config.transactions;
        if txn.num_partitions < 1
            || txn.replication_factor < 1
            || txn.min_isr < 1
            || txn.max_timeout_ms < 1
        {
            return Err(ConfigError::InvalidValue {
                key: "transaction.state.log.num.partitions / .replication.factor / .min.isr / transaction.max.timeout.ms".into(),
                value: format!(
                    "{} / {} / {} / {}",
                    txn.num_partitions, txn.replication_factor, txn.min_isr, txn.max_timeout_ms
                ),
                reason: "must be at least 1".into(),
            });
        }
        if config.num_partitions < 1 {
            return Err(ConfigError::InvalidValue {
                key: "num.partitions".into(),
                value: config.num_partitions.to_string(),
                reason: "must be >= 1".into(),
            });
        }
        if config.default_replication_factor < 1 {
            return Err(ConfigError::InvalidValue {
                key: "default.replication.factor".into(),
                value: config.default_replication_factor.to_string(),
                reason: "must be >= 1".into(),
            });
        }
        Ok(config)
    }

    /// The listener clients are told to use when nothing says which: the first advertised.
    pub fn advertised(&self) -> &Listener {
        &self.advertised_listeners[0]
    }

    /// The advertised form of broker listener `name`.
    pub fn advertised_listener(&self, name: &str) -> Option<&Listener> {
        self.advertised_listeners
            .iter()
            .find(|l| l.name.eq_ignore_ascii_case(name))
    }

    /// The security protocol of listener `name` (PLAINTEXT if the map does not name it, which
    /// config validation rules out for every configured listener).
    pub fn protocol_of(&self, name: &str) -> crate::security::SecurityProtocol {
        self.listener_protocols
            .protocol(name)
            .unwrap_or(crate::security::SecurityProtocol::Plaintext)
    }

    /// The controller listener's name (the first of `controller.listener.names`).
    pub fn controller_listener_name(&self) -> &str {
        self.controller_listener_names.first().map_or(
            crate::controller_server::config::DEFAULT_CONTROLLER_LISTENER_NAME,
            String::as_str,
        )
    }

    /// Where this broker finds its controllers: the addresses of `controller.quorum.voters`,
    /// else `controller.quorum.bootstrap.servers` (empty: a single-node cluster, or combined
    /// mode with neither set).
    pub fn controller_addresses(&self) -> Vec<String> {
        if self.controller_quorum_voters.is_empty() {
            return self.controller_quorum_bootstrap_servers.clone();
        }
        self.controller_quorum_voters
            .iter()
            .map(|(_, address)| address.clone())
            .collect()
    }
}

/// `controller.quorum.bootstrap.servers` (KIP-853).
pub const CONTROLLER_QUORUM_BOOTSTRAP_SERVERS: &str = "controller.quorum.bootstrap.servers";

/// Parses `controller.quorum.bootstrap.servers`: `host:port,...` (Kafka's form; IPv6 hosts in
/// brackets).
pub fn parse_bootstrap_servers(text: &str) -> Result<Vec<String>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let (host, port) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("{entry:?} is not host:port"))?;
            if host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .is_empty()
            {
                return Err(format!("{entry:?} has no host"));
            }
            port.parse::<u16>()
                .map_err(|e| format!("bad port in {entry:?}: {e}"))?;
            Ok(entry.to_string())
        })
        .collect()
}

/// Loopback names that reach this machine's wildcard or loopback listener.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The voter set `controller.quorum.bootstrap.servers` names for a controller when
/// `controller.quorum.voters` is not set, as far as Keel can resolve it without KIP-853's
/// dynamic quorum: exactly one server that is this controller's own listener (Kafka's
/// `kafka-storage format --standalone`: a quorum of this controller alone) gives `[(node_id,
/// that server)]`. Several servers, or one that is another controller (joining an existing
/// quorum), need the voters' ids, which only `controller.quorum.voters` can give here.
/// `advertised_host` is the host `advertised.listeners` gives the controller listener, if any.
/// `None` when the list is empty (as if it were not set).
pub fn standalone_voter(
    node_id: i32,
    listener: &Listener,
    advertised_host: Option<&str>,
    text: &str,
) -> Result<Option<(i32, String)>, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidValue {
        key: CONTROLLER_QUORUM_BOOTSTRAP_SERVERS.into(),
        value: text.to_string(),
        reason,
    };
    let servers = parse_bootstrap_servers(text).map_err(invalid)?;
    if servers.is_empty() {
        return Ok(None);
    }
    let [server] = servers.as_slice() else {
        return Err(invalid(format!(
            "{} servers: a quorum of several controllers needs their ids, and Keel has no \
             dynamic quorum (KIP-853) yet; list them in controller.quorum.voters \
             (id@host:port,...)",
            servers.len()
        )));
    };
    let (host, port) = server.rsplit_once(':').expect("parsed as host:port");
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = |h: &str| LOOPBACK_HOSTS.contains(&h);
    let listener_host = listener.host.as_str();
    let wildcard = matches!(listener_host, "" | "0.0.0.0" | "::");
    let same_host = host == listener_host
        || advertised_host == Some(host)
        || (loopback(host) && (wildcard || loopback(listener_host)));
    if port.parse::<u16>().ok() != Some(listener.port) || !same_host {
        return Err(invalid(format!(
            "{server} is not this controller's listener {}://{}:{} (node.id={node_id}): \
             joining another controller's quorum (KIP-853) is not supported yet; set \
             controller.quorum.voters (id@host:port,...)",
            listener.name, listener.host, listener.port
        )));
    }
    Ok(Some((node_id, server.clone())))
}

// ---- Security settings -------------------------------------------------------------------

pub use crate::security::authorizer::AUTHORIZER_CLASS_NAME;
pub use crate::security::{
    INTER_BROKER_LISTENER_NAME, LISTENER_SECURITY_PROTOCOL_MAP, SECURITY_INTER_BROKER_PROTOCOL,
};

/// Checks the security settings every role reads — `listener.security.protocol.map` and the
/// authorizer's (`authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`) —
/// so a bad value stops a start (or `keel dev`, before it formats anything) naming its key.
pub fn check_security(props: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    crate::security::ProtocolMap::from_properties(props, &[])?;
    crate::security::authorizer::config_from_properties(props)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: Java properties syntax (comments, colons, continuations) parses like Kafka's.
    #[test]
    fn parses_properties() {
        let text = "# comment\n! other\nnode.id=3\nlog.dirs = /a,\\\n  /b\nlisteners: PLAINTEXT://127.0.0.1:9093\n\n";
        let props = parse_properties(text).unwrap();
        assert_eq!(props["node.id"], "3");
        assert_eq!(props["log.dirs"], "/a,/b");
        let config = BrokerConfig::from_properties(&props).unwrap();
        assert_eq!(config.node_id, 3);
        assert_eq!(
            config.log_dirs,
            vec![PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(config.listeners[0].port, 9093);
        assert_eq!(config.advertised().host, "127.0.0.1");
        assert!(config.auto_create_topics_enable);
    }

    // Shows: a bad value is refused with the key named; node.id is required.
    #[test]
    fn refuses_bad_values() {
        let mut props = BTreeMap::new();
        assert!(matches!(
            BrokerConfig::from_properties(&props),
            Err(ConfigError::Missing("node.id"))
        ));
        props.insert("node.id".to_string(), "1".to_string());
        props.insert("num.partitions".to_string(), "many".to_string());
        let err = BrokerConfig::from_properties(&props)
            .unwrap_err()
            .to_string();
        assert!(err.contains("num.partitions"), "{err}");
        props.insert("num.partitions".to_string(), "2".to_string());
        props.insert("listeners".to_string(), "nonsense".to_string());
        assert!(BrokerConfig::from_properties(&props).is_err());
    }

    // Shows: metrics.port is off unless set (-1 = off); set, the endpoint binds the first broker
    // listener's host; a bad port names the key (issue 7, "Metrics").
    #[test]
    fn reads_the_metrics_endpoint() {
        let mut props = BTreeMap::new();
        props.insert("node.id".to_string(), "1".to_string());
        props.insert(
            "listeners".to_string(),
            "PLAINTEXT://10.1.2.3:9092".to_string(),
        );
        assert_eq!(
            BrokerConfig::from_properties(&props)
                .unwrap()
                .metrics_endpoint,
            None
        );
        props.insert("metrics.port".to_string(), "9464".to_string());
        let config = BrokerConfig::from_properties(&props).unwrap();
        assert!(config.unknown_keys.is_empty(), "{:?}", config.unknown_keys);
        let endpoint = config.metrics_endpoint.unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), ("10.1.2.3", 9464));
        props.insert("metrics.port".to_string(), "nine".to_string());
        let err = BrokerConfig::from_properties(&props)
            .unwrap_err()
            .to_string();
        assert!(err.contains("metrics.port"), "{err}");
    }

    use crate::test_support::props;

    // Shows (issue 22): Kafka's StandardAuthorizer name turns the authorizer on in both
    // roles, with `super.users` and `allow.everyone.if.no.acl.found`; another class, ZooKeeper's
    // AclAuthorizer or a bad value stops the start naming its key.
    #[test]
    fn authorizer_settings_are_checked() {
        let broker = |pairs: &[(&str, &str)]| {
            let mut all = props(&[("node.id", "1")]);
            all.extend(props(pairs));
            BrokerConfig::from_properties(&all)
        };
        let config = broker(&[
            (
                "authorizer.class.name",
                " org.apache.kafka.metadata.authorizer.StandardAuthorizer ",
            ),
            ("super.users", "User:admin;User:broker"),
            ("allow.everyone.if.no.acl.found", "true"),
        ])
        .unwrap();
        let authorizer = config.authorizer.expect("an authorizer");
        assert!(authorizer.super_users.contains("User:admin"));
        assert!(authorizer.super_users.contains("User:broker"));
        assert!(authorizer.allow_everyone_if_no_acl_found);
        assert!(broker(&[]).unwrap().authorizer.is_none());
        assert!(broker(&[("authorizer.class.name", "")])
            .unwrap()
            .authorizer
            .is_none());
        for (key, value) in [
            ("authorizer.class.name", "x"),
            (
                "authorizer.class.name",
                "kafka.security.authorizer.AclAuthorizer",
            ),
            ("super.users", "admin"),
            ("allow.everyone.if.no.acl.found", "yes"),
        ] {
            let err = broker(&[
                (
                    "authorizer.class.name",
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                ),
                (key, value),
            ])
            .unwrap_err()
            .to_string();
            assert!(err.contains(key), "{key}={value}: {err}");
        }
        let controller =
            crate::controller_server::ControllerServerConfig::from_properties(&props(&[
                ("node.id", "1"),
                ("process.roles", "controller"),
                ("listeners", "CONTROLLER://:9093"),
                ("authorizer.class.name", "x"),
                ("log.dirs", "/a"),
            ]));
        assert!(
            matches!(&controller, Err(e) if e.to_string().contains("authorizer.class.name")),
            "{controller:?}"
        );
        for listeners in ["SSL://127.0.0.1:9093", "SASL_SSL://127.0.0.1:9093"] {
            let config = BrokerConfig::from_properties(&props(&[
                ("node.id", "1"),
                ("listeners", listeners),
                ("ssl.keystore.location", "/k.pem"),
                ("sasl.enabled.mechanisms", "PLAIN"),
            ]))
            .unwrap();
            assert!(config.unknown_keys.is_empty(), "{:?}", config.unknown_keys);
        }
    }

    // Shows: what is not a request for security starts — Kafka's stock map (SSL and SASL entries
    // for listeners that are not configured), an empty authorizer.class.name, a PLAINTEXT
    // security.inter.broker.protocol, keys that merely contain "ssl"; a malformed map is a bad
    // value, not silently plaintext.
    #[test]
    fn plaintext_configs_are_not_refused() {
        let config = BrokerConfig::from_properties(&props(&[
            ("node.id", "1"),
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            (
                "listener.security.protocol.map",
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,\
                 SASL_SSL:SASL_SSL",
            ),
            ("authorizer.class.name", ""),
            ("security.inter.broker.protocol", "PLAINTEXT"),
            ("listener.name.plaintext.max.connections", "10"),
        ]))
        .unwrap();
        assert!(
            config.unknown_keys == ["listener.name.plaintext.max.connections"],
            "{:?}",
            config.unknown_keys
        );
        let err = BrokerConfig::from_properties(&props(&[
            ("node.id", "1"),
            ("listener.security.protocol.map", "PLAINTEXT:TLS"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(err.contains("listener.security.protocol.map"), "{err}");
    }

    /// The settings of Kafka 4.x's `config/server.properties` that Keel reads (combined mode,
    /// KIP-853 bootstrap servers), on ports 19092/19093.
    fn kafka_4_server_properties() -> BTreeMap<String, String> {
        props(&[
            ("process.roles", "broker,controller"),
            ("node.id", "1"),
            ("controller.quorum.bootstrap.servers", "localhost:19093"),
            ("listeners", "PLAINTEXT://:19092,CONTROLLER://:19093"),
            ("inter.broker.listener.name", "PLAINTEXT"),
            (
                "advertised.listeners",
                "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093",
            ),
            ("controller.listener.names", "CONTROLLER"),
            (
                "listener.security.protocol.map",
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,\
                 SASL_SSL:SASL_SSL",
            ),
            ("log.dirs", "/tmp/kraft-combined-logs"),
            ("offsets.topic.replication.factor", "1"),
        ])
    }

    // Shows: Kafka 4.x's stock combined-mode settings resolve — the broker advertises its own
    // listener (not the controller's), finds the controller at the bootstrap server, and the
    // controller's quorum is itself alone at that address (KIP-853 --standalone).
    #[test]
    fn kafka_4_stock_settings_resolve() {
        let props = kafka_4_server_properties();
        let broker = BrokerConfig::from_properties(&props).unwrap();
        assert_eq!(broker.listeners.len(), 1);
        assert_eq!(broker.listeners[0].host, "");
        assert_eq!(broker.advertised().name, "PLAINTEXT");
        assert_eq!(broker.advertised().port, 19092);
        assert_eq!(broker.controller_addresses(), vec!["localhost:19093"]);
        let controller =
            crate::controller_server::ControllerServerConfig::from_properties(&props).unwrap();
        assert_eq!(controller.listener.port, 19093);
        assert_eq!(
            controller.quorum_voters,
            vec![(1, "localhost:19093".to_string())]
        );
    }

    // Shows: controller.quorum.bootstrap.servers is resolved only where it is unambiguous — one
    // server that is this controller's own listener; several servers (their ids unknown without
    // KIP-853's dynamic quorum) or another controller's address are refused with a message
    // pointing at controller.quorum.voters; the voters win when both are set; a broker takes the
    // servers as its controllers' addresses.
    #[test]
    fn bootstrap_servers_resolve_only_when_unambiguous() {
        let controller = |changes: &[(&str, &str)]| {
            let mut p = kafka_4_server_properties();
            p.extend(props(changes));
            crate::controller_server::ControllerServerConfig::from_properties(&p)
        };
        for (host, listener) in [
            ("127.0.0.1", "CONTROLLER://:19093"),
            ("10.0.0.5", "CONTROLLER://10.0.0.5:19093"),
            ("localhost", "CONTROLLER://127.0.0.1:19093"),
        ] {
            let c = controller(&[
                (
                    "controller.quorum.bootstrap.servers",
                    &format!("{host}:19093"),
                ),
                ("listeners", &format!("PLAINTEXT://:19092,{listener}")),
                ("advertised.listeners", "PLAINTEXT://localhost:19092"),
            ])
            .unwrap();
            assert_eq!(c.quorum_voters, vec![(1, format!("{host}:19093"))]);
        }
        let several = controller(&[(
            "controller.quorum.bootstrap.servers",
            "h1:19093,h2:19093,h3:19093",
        )])
        .unwrap_err()
        .to_string();
        assert!(
            several.contains("controller.quorum.voters") && several.contains("KIP-853"),
            "{several}"
        );
        for other in ["otherhost:19093", "localhost:29093"] {
            let err = controller(&[("controller.quorum.bootstrap.servers", other)])
                .unwrap_err()
                .to_string();
            assert!(err.contains("is not this controller's listener"), "{err}");
        }
        let malformed = controller(&[("controller.quorum.bootstrap.servers", "nohost")])
            .unwrap_err()
            .to_string();
        assert!(malformed.contains("host:port"), "{malformed}");
        let voters = controller(&[
            ("controller.quorum.bootstrap.servers", "h1:1,h2:2"),
            ("controller.quorum.voters", "1@localhost:19093,2@h2:19093"),
        ])
        .unwrap();
        assert_eq!(voters.quorum_voters.len(), 2);

        let broker = BrokerConfig::from_properties(&props(&[
            ("node.id", "4"),
            ("process.roles", "broker"),
            ("controller.quorum.bootstrap.servers", "c1:9093, c2:9093"),
        ]))
        .unwrap();
        assert_eq!(broker.controller_addresses(), vec!["c1:9093", "c2:9093"]);
        assert_eq!(broker.offsets_topic_replication_factor, 3);
    }
}
