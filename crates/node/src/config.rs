//! Broker configuration: Kafka's property names and defaults.
//!
//! A config file is a Java `.properties` file; `--override key=value` pairs are applied on top.
//! Unknown keys are kept (and logged once at startup) so a Kafka `server.properties` can be
//! reused as it is; a known key with a value of the wrong type is an error that names it.

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
}

/// Keys the broker reads directly; anything else that is not a topic-default synonym is
/// "unknown".
const BROKER_KEYS: &[&str] = &[
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
    "controller.listener.names",
    "metadata.log.dir",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "replica.lag.time.max.ms",
    "replica.fetch.backoff.ms",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "controlled.shutdown.enable",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    crate::metrics::http::METRICS_PORT,
    crate::metrics::http::METRICS_HOST,
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
        let advertised_listeners = match get("advertised.listeners") {
            Some(v) => parse_listeners("advertised.listeners", v)?,
            None => listeners
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
        let config = BrokerConfig {
            node_id,
            log_dirs,
            listeners,
            advertised_listeners,
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
            producer_id_expiration_ms: num("producer.id.expiration.ms", 86_400_000)?,
            producer_id_expiration_check_interval_ms: num(
                "producer.id.expiration.check.interval.ms",
                600_000,
            )?,
            offsets_topic_num_partitions: get("offsets.topic.num.partitions")
                .map_or(Ok(50), |v| parse_value("offsets.topic.num.partitions", v))?,
            offsets_topic_replication_factor: get("offsets.topic.replication.factor").map_or(
                Ok(if controller_quorum_voters.is_empty() {
                    1
                } else {
                    3
                }),
                |v| parse_value("offsets.topic.replication.factor", v),
            )?,
            offsets_topic_segment_bytes: num("offsets.topic.segment.bytes", 104_857_600)?,
            offsets_commit_timeout_ms: num("offsets.commit.timeout.ms", 5_000)?.max(1),
            offset_metadata_max_bytes: get("offset.metadata.max.bytes")
                .map_or(Ok(4096), |v| parse_value("offset.metadata.max.bytes", v))?,
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
                    !BROKER_KEYS.contains(&k.as_str()) && !crate::topic_config::is_broker_synonym(k)
                })
                .cloned()
                .collect(),
            metrics_endpoint,
            metrics: crate::metrics::Metrics::new(),
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

    /// The listener clients are told to use.
    pub fn advertised(&self) -> &Listener {
        &self.advertised_listeners[0]
    }
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
}
