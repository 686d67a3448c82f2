//! The controller process's configuration, with Kafka's property names and defaults.
//!
//! [`ControllerServerConfig::from_properties`] reads the same `.properties` map the broker reads
//! (a combined `process.roles=broker,controller` file works for both); keys it does not know are
//! ignored here. Every error names the key.

use std::collections::BTreeMap;
use std::path::PathBuf;

use keel_wire::frame::SOCKET_REQUEST_MAX_BYTES_DEFAULT;

use crate::config::{ConfigError, Listener};

/// `node.id`.
pub const NODE_ID: &str = "node.id";
/// `process.roles`: `broker`, `controller`, or both.
pub const PROCESS_ROLES: &str = "process.roles";
/// `listeners`: `NAME://HOST:PORT,...`.
pub const LISTENERS: &str = "listeners";
/// `controller.listener.names`: the listener(s) the controller serves on; the first is used.
pub const CONTROLLER_LISTENER_NAMES: &str = "controller.listener.names";
/// The listener name when `controller.listener.names` is not set.
pub const DEFAULT_CONTROLLER_LISTENER_NAME: &str = "CONTROLLER";
/// `metadata.log.dir`: where `__cluster_metadata-0` lives (default: the first of `log.dirs`).
pub const METADATA_LOG_DIR: &str = "metadata.log.dir";
/// `log.dirs`.
pub const LOG_DIRS: &str = "log.dirs";
/// `log.dir` (Kafka's fallback when `log.dirs` is not set).
pub const LOG_DIR: &str = "log.dir";
/// `broker.session.timeout.ms`: a broker silent this long is fenced.
pub const BROKER_SESSION_TIMEOUT_MS: &str = "broker.session.timeout.ms";
/// Kafka's default for `broker.session.timeout.ms`.
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: u64 = 9_000;
/// `broker.heartbeat.interval.ms` (what brokers are expected to use; informative here).
pub const BROKER_HEARTBEAT_INTERVAL_MS: &str = "broker.heartbeat.interval.ms";
/// Kafka's default for `broker.heartbeat.interval.ms`.
pub const DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS: u64 = 2_000;
/// `num.partitions`: partitions of a topic created with `num_partitions = -1`.
pub const NUM_PARTITIONS: &str = "num.partitions";
/// `default.replication.factor`: replication factor of a topic created with -1.
pub const DEFAULT_REPLICATION_FACTOR: &str = "default.replication.factor";
/// `min.insync.replicas`: when set, stamped on new topics that do not set it themselves.
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// `socket.request.max.bytes`.
pub const SOCKET_REQUEST_MAX_BYTES: &str = "socket.request.max.bytes";
/// `eligible.leader.replicas.enable`: KIP-966's ELR (default on); `false` runs Kafka's classic
/// ISR rules. Applied when the cluster's metadata has never set it.
pub const ELIGIBLE_LEADER_REPLICAS_ENABLE: &str = "eligible.leader.replicas.enable";

/// `controller.quorum.voters`: `id@host:port,...` of every controller (Raft voter). Absent =
/// this controller alone (at the one `controller.quorum.bootstrap.servers` entry, if set: see
/// [`crate::config::standalone_voter`]).
pub const CONTROLLER_QUORUM_VOTERS: &str = "controller.quorum.voters";
/// `controller.quorum.election.timeout.ms`: how long a voter waits without hearing from a
/// leader before it campaigns.
pub const CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS: &str = "controller.quorum.election.timeout.ms";
/// Kafka's default for `controller.quorum.election.timeout.ms`.
pub const DEFAULT_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS: u64 = 1_000;

/// `keel.metadata.snapshot.interval.entries`: Raft entries between two snapshots of the
/// metadata state (Keel's; Kafka counts bytes, `metadata.log.max.record.bytes.between.snapshots`).
pub const SNAPSHOT_INTERVAL_ENTRIES: &str = "keel.metadata.snapshot.interval.entries";

/// The controller role's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerServerConfig {
    /// `node.id`.
    pub node_id: i32,
    /// Whether `process.roles` also names `broker` (combined mode).
    pub also_broker: bool,
    /// The controller listener (bind address and the endpoint advertised in DescribeCluster).
    pub listener: Listener,
    /// Its security protocol (`listener.security.protocol.map`; PLAINTEXT when the map is not
    /// set, as Kafka's effective map); controllers reach each other and brokers reach them with
    /// it.
    pub listener_protocol: crate::security::SecurityProtocol,
    /// The brokers' listener the Unclean Recovery Manager connects to (`inter.broker.listener.name`,
    /// or named by `security.inter.broker.protocol`; default `PLAINTEXT`), and its protocol.
    pub broker_listener: (String, crate::security::SecurityProtocol),
    /// Every property as given: TLS settings are read from them when the controller starts.
    pub raw: BTreeMap<String, String>,
    /// The directory holding `meta.properties` and `__cluster_metadata-0`.
    pub metadata_log_dir: PathBuf,
    /// `controller.quorum.voters` as (node id, `host:port`), sorted by id; always names this
    /// controller.
    pub quorum_voters: Vec<(i32, String)>,
    /// `controller.quorum.election.timeout.ms`.
    pub election_timeout_ms: u64,
    /// `keel.metadata.snapshot.interval.entries`.
    pub snapshot_interval_entries: u64,
    /// `broker.session.timeout.ms`.
    pub broker_session_timeout_ms: u64,
    /// `broker.heartbeat.interval.ms`.
    pub broker_heartbeat_interval_ms: u64,
    /// `num.partitions`.
    pub num_partitions: u32,
    /// `controller.quota.window.num`: the controller mutation quota's burst is this many
    /// windows of its rate.
    pub controller_quota_window_num: u32,
    /// `controller.quota.window.size.seconds`.
    pub controller_quota_window_size_seconds: u32,
    /// `default.replication.factor`.
    pub default_replication_factor: u16,
    /// `min.insync.replicas`, if set.
    pub min_insync_replicas: Option<usize>,
    /// `socket.request.max.bytes`.
    pub socket_request_max_bytes: usize,
    /// `eligible.leader.replicas.enable`.
    pub eligible_leader_replicas_enable: bool,
    /// The authorizer's settings (`authorizer.class.name`, ...): without them the ACL APIs
    /// answer `SECURITY_DISABLED`, as Kafka's controller.
    pub authorizer: Option<keel_controller::acl::AuthorizerConfig>,
    /// The listener is the in-memory channel of a single-node process (its broker the only
    /// peer that can reach it): its requests are not authorized again — the broker authorized
    /// each client before forwarding, and its own RPCs come from itself.
    pub in_process: bool,
    /// `unclean.leader.election.enable` and `unclean.recovery.strategy` when set in the
    /// controller's properties: the defaults stamped on new topics that do not set them
    /// (as `min.insync.replicas` is).
    pub topic_defaults: BTreeMap<String, String>,
    /// `metrics.port` / `metrics.host`: where a controller process serves `/metrics` (`None` =
    /// off, the default). Host default: the controller listener's. Served by [`super::run`];
    /// in combined mode the broker's endpoint serves both roles.
    pub metrics_endpoint: Option<crate::metrics::MetricsEndpoint>,
    /// The registry this controller reports into (not a property; see `BrokerConfig::metrics`).
    pub metrics: crate::metrics::Metrics,
    /// Fired to reload every TLS keystore and truststore (SIGHUP in `keel server`). Not a
    /// property; each parsed config gets its own.
    pub tls_reload: crate::security::TlsReload,
    /// Not a property: campaign for leadership as soon as a pristine quorum is initialized,
    /// instead of after the election timeout. `keel dev` sets it on the last controller it
    /// starts (every voter is listening by then), so a fresh dev cluster does not sit out a
    /// second with no leader; a cluster of processes never sets it (its voters start in any
    /// order, and the first election waits the timeout as in Kafka).
    pub campaign_when_pristine: bool,
}

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

fn parse<T: std::str::FromStr>(
    props: &BTreeMap<String, String>,
    key: &str,
    default: T,
    valid: impl Fn(&T) -> bool,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match props.get(key) {
        None => Ok(default),
        Some(text) => {
            let value = text
                .trim()
                .parse::<T>()
                .map_err(|e| invalid(key, text, e.to_string()))?;
            if valid(&value) {
                Ok(value)
            } else {
                Err(invalid(key, text, "out of range"))
            }
        }
    }
}

fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// The brokers' listener a controller connects to (for the Unclean Recovery Manager's
/// GetReplicaLogInfo): `inter.broker.listener.name`, else the listener named after
/// `security.inter.broker.protocol`, else `PLAINTEXT`; with its protocol from the map.
fn controller_broker_listener(
    props: &BTreeMap<String, String>,
    protocols: &crate::security::ProtocolMap,
) -> Result<(String, crate::security::SecurityProtocol), ConfigError> {
    use crate::security::{
        SecurityProtocol, INTER_BROKER_LISTENER_NAME, SECURITY_INTER_BROKER_PROTOCOL,
    };
    let named = props
        .get(INTER_BROKER_LISTENER_NAME)
        .map(|s| s.trim().to_ascii_uppercase())
        .filter(|s| !s.is_empty());
    let by_protocol = match props.get(SECURITY_INTER_BROKER_PROTOCOL) {
        Some(text) => Some(SecurityProtocol::parse(text).ok_or_else(|| {
            invalid(
                SECURITY_INTER_BROKER_PROTOCOL,
                text,
                "not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
            )
        })?),
        None => None,
    };
    let name = named
        .or_else(|| by_protocol.map(|p| p.name().to_string()))
        .unwrap_or_else(|| "PLAINTEXT".to_string());
    let protocol = protocols
        .protocol(&name)
        .or(by_protocol)
        .unwrap_or(SecurityProtocol::Plaintext);
    Ok((name, protocol))
}

impl ControllerServerConfig {
    /// Reads the controller's settings from a properties map.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        crate::config::check_security(props)?;
        let node_id_text = props.get(NODE_ID).ok_or(ConfigError::Missing(NODE_ID))?;
        let node_id = node_id_text
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid(NODE_ID, node_id_text, "must be a non-negative integer"))?;

        let roles_text = props
            .get(PROCESS_ROLES)
            .ok_or(ConfigError::Missing(PROCESS_ROLES))?;
        let mut controller = false;
        let mut also_broker = false;
        for role in split_list(roles_text) {
            match role {
                "controller" => controller = true,
                "broker" => also_broker = true,
                other => {
                    return Err(invalid(
                        PROCESS_ROLES,
                        roles_text,
                        format!("unknown role {other:?} (expected broker and/or controller)"),
                    ))
                }
            }
        }
        if !controller {
            return Err(invalid(
                PROCESS_ROLES,
                roles_text,
                "must contain controller to run the controller role",
            ));
        }

        let listener_name = match props.get(CONTROLLER_LISTENER_NAMES) {
            Some(names) => split_list(names)
                .next()
                .map(str::to_string)
                .ok_or_else(|| invalid(CONTROLLER_LISTENER_NAMES, names, "names no listener"))?,
            None => DEFAULT_CONTROLLER_LISTENER_NAME.to_string(),
        };
        let listeners_text = props
            .get(LISTENERS)
            .ok_or(ConfigError::Missing(LISTENERS))?;
        let mut listener = None;
        for entry in split_list(listeners_text) {
            let parsed = Listener::parse(entry).map_err(|e| invalid(LISTENERS, entry, e))?;
            if parsed.name == listener_name {
                listener = Some(parsed);
            }
        }
        let listener = listener.ok_or_else(|| {
            invalid(
                LISTENERS,
                listeners_text,
                format!("no listener named {listener_name:?} (from {CONTROLLER_LISTENER_NAMES})"),
            )
        })?;

        let metadata_log_dir = match props.get(METADATA_LOG_DIR) {
            Some(dir) if !dir.trim().is_empty() => PathBuf::from(dir.trim()),
            Some(dir) => return Err(invalid(METADATA_LOG_DIR, dir, "must not be empty")),
            None => props
                .get(LOG_DIRS)
                .or_else(|| props.get(LOG_DIR))
                .and_then(|dirs| split_list(dirs).next().map(PathBuf::from))
                .ok_or(ConfigError::Missing(METADATA_LOG_DIR))?,
        };

        let quorum_voters = match props.get(CONTROLLER_QUORUM_VOTERS) {
            None => {
                // The controller's own listener, as `advertised.listeners` names it (an empty
                // host binds every interface and is reached at localhost, as for the broker).
                let advertised_host = props
                    .get("advertised.listeners")
                    .into_iter()
                    .flat_map(|text| split_list(text).filter_map(|e| Listener::parse(e).ok()))
                    .find(|l| l.name == listener.name)
                    .map(|l| l.host);
                let bootstrap = match props.get(crate::config::CONTROLLER_QUORUM_BOOTSTRAP_SERVERS)
                {
                    Some(text) => crate::config::standalone_voter(
                        node_id,
                        &listener,
                        advertised_host.as_deref(),
                        text,
                    )?,
                    None => None,
                };
                let host = match (advertised_host, listener.host.as_str()) {
                    (Some(host), _) => host,
                    (None, "") => "localhost".to_string(),
                    (None, host) => host.to_string(),
                };
                vec![bootstrap.unwrap_or((node_id, format!("{host}:{}", listener.port)))]
            }
            Some(text) => {
                let mut voters = crate::cluster::parse_quorum_voters(text)
                    .map_err(|reason| invalid(CONTROLLER_QUORUM_VOTERS, text, reason))?;
                voters.sort();
                if voters.windows(2).any(|w| w[0].0 == w[1].0) {
                    return Err(invalid(
                        CONTROLLER_QUORUM_VOTERS,
                        text,
                        "names a voter twice",
                    ));
                }
                if voters.iter().any(|(id, _)| *id < 0) {
                    return Err(invalid(
                        CONTROLLER_QUORUM_VOTERS,
                        text,
                        "voter ids are not negative",
                    ));
                }
                if !voters.iter().any(|(id, _)| *id == node_id) {
                    return Err(invalid(
                        CONTROLLER_QUORUM_VOTERS,
                        text,
                        format!("does not name this controller (node.id={node_id})"),
                    ));
                }
                voters
            }
        };

        let protocols = crate::security::ProtocolMap::from_properties(
            props,
            std::slice::from_ref(&listener_name),
        )?;
        let listener_protocol = protocols.protocol_of(LISTENERS, &listener)?;
        let broker_listener = controller_broker_listener(props, &protocols)?;
        let metrics_endpoint =
            crate::metrics::MetricsEndpoint::from_properties(props, &listener.host)?;
        Ok(ControllerServerConfig {
            listener_protocol,
            broker_listener,
            raw: props.clone(),
            metrics_endpoint,
            metrics: crate::metrics::Metrics::new(),
            tls_reload: crate::security::TlsReload::default(),
            in_process: false,
            authorizer: crate::security::authorizer::config_from_properties(props)?,
            campaign_when_pristine: false,
            node_id,
            also_broker,
            listener,
            metadata_log_dir,
            quorum_voters,
            election_timeout_ms: parse(
                props,
                CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS,
                DEFAULT_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS,
                |v| *v >= 50,
            )?,
            snapshot_interval_entries: parse(
                props,
                SNAPSHOT_INTERVAL_ENTRIES,
                crate::raft::SNAPSHOT_INTERVAL_ENTRIES,
                |v| *v >= 1,
            )?,
            broker_session_timeout_ms: parse(
                props,
                BROKER_SESSION_TIMEOUT_MS,
                DEFAULT_BROKER_SESSION_TIMEOUT_MS,
                |v| *v > 0,
            )?,
            broker_heartbeat_interval_ms: parse(
                props,
                BROKER_HEARTBEAT_INTERVAL_MS,
                DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS,
                |v| *v > 0,
            )?,
            num_partitions: parse(props, NUM_PARTITIONS, 1, |v| *v > 0)?,
            // Bounded: a window over a day measures nothing useful.
            controller_quota_window_num: parse(
                props,
                super::mutation_quota::CONTROLLER_QUOTA_WINDOW_NUM,
                super::mutation_quota::DEFAULT_CONTROLLER_QUOTA_WINDOW_NUM,
                |v| (1..=86_400).contains(v),
            )?,
            controller_quota_window_size_seconds: parse(
                props,
                super::mutation_quota::CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS,
                super::mutation_quota::DEFAULT_CONTROLLER_QUOTA_WINDOW_SIZE_SECONDS,
                |v| (1..=86_400).contains(v),
            )?,
            default_replication_factor: parse(props, DEFAULT_REPLICATION_FACTOR, 1, |v| *v > 0)?,
            min_insync_replicas: match props.get(MIN_INSYNC_REPLICAS) {
                None => None,
                Some(_) => Some(parse(props, MIN_INSYNC_REPLICAS, 1, |v| *v > 0)?),
            },
            socket_request_max_bytes: parse(
                props,
                SOCKET_REQUEST_MAX_BYTES,
                SOCKET_REQUEST_MAX_BYTES_DEFAULT,
                |v| *v > 0,
            )?,
            topic_defaults: {
                let mut defaults = BTreeMap::new();
                for key in [
                    keel_controller::config::UNCLEAN_LEADER_ELECTION_ENABLE,
                    keel_controller::config::UNCLEAN_RECOVERY_STRATEGY,
                ] {
                    if let Some(value) = props.get(key) {
                        let value = value.trim();
                        keel_controller::config::validate(key, Some(value))
                            .map_err(|e| invalid(key, value, e.message))?;
                        defaults.insert(key.to_string(), value.to_string());
                    }
                }
                defaults
            },
            eligible_leader_replicas_enable: match props.get(ELIGIBLE_LEADER_REPLICAS_ENABLE) {
                None => true,
                Some(text) => {
                    keel_controller::config::parse_bool(text.trim()).ok_or_else(|| {
                        invalid(
                            ELIGIBLE_LEADER_REPLICAS_ENABLE,
                            text,
                            "must be true or false",
                        )
                    })?
                }
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::props;

    // Shows: Kafka's KRaft keys and defaults — the listener named by controller.listener.names
    // (default CONTROLLER), metadata.log.dir falling back to the first of log.dirs, and the
    // session timeout default of 9000 ms.
    #[test]
    fn reads_kraft_keys_with_defaults() {
        let config = ControllerServerConfig::from_properties(&props(&[
            ("node.id", "3000"),
            ("process.roles", "controller"),
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            ("log.dirs", "/a, /b"),
        ]))
        .unwrap();
        assert_eq!(config.node_id, 3000);
        assert!(!config.also_broker);
        assert_eq!(config.listener.name, "CONTROLLER");
        assert_eq!(config.listener.port, 9093);
        assert_eq!(config.metadata_log_dir, PathBuf::from("/a"));
        assert_eq!(config.broker_session_timeout_ms, 9_000);
        assert_eq!(config.broker_heartbeat_interval_ms, 2_000);
        assert_eq!(config.num_partitions, 1);
        assert_eq!(config.default_replication_factor, 1);
        assert_eq!(config.min_insync_replicas, None);

        let config = ControllerServerConfig::from_properties(&props(&[
            ("node.id", "1"),
            ("process.roles", "broker,controller"),
            ("listeners", "PLAINTEXT://:9092,CTL://localhost:19093"),
            ("controller.listener.names", "CTL"),
            ("metadata.log.dir", "/meta"),
            ("log.dirs", "/data"),
            ("broker.session.timeout.ms", "1500"),
            ("default.replication.factor", "3"),
            ("min.insync.replicas", "2"),
        ]))
        .unwrap();
        assert!(config.also_broker);
        assert_eq!(config.listener.host, "localhost");
        assert_eq!(config.metadata_log_dir, PathBuf::from("/meta"));
        assert_eq!(config.broker_session_timeout_ms, 1_500);
        assert_eq!(config.default_replication_factor, 3);
        assert_eq!(config.min_insync_replicas, Some(2));
    }

    // Shows: every bad or missing setting is an error naming its key.
    #[test]
    fn errors_name_the_key() {
        let base = [
            ("node.id", "1"),
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://127.0.0.1:9093"),
            ("log.dirs", "/a"),
        ];
        let with = |key: &str, value: Option<&str>| {
            let mut p = props(&base);
            match value {
                Some(v) => p.insert(key.to_string(), v.to_string()),
                None => p.remove(key),
            };
            ControllerServerConfig::from_properties(&p)
                .unwrap_err()
                .to_string()
        };
        assert!(with("node.id", None).contains("node.id"));
        assert!(with("node.id", Some("-4")).contains("node.id"));
        assert!(with("process.roles", Some("broker")).contains("process.roles"));
        assert!(with("process.roles", Some("controller,voter")).contains("process.roles"));
        assert!(with("listeners", Some("PLAINTEXT://h:1")).contains("listeners"));
        assert!(
            with("controller.listener.names", Some("OTHER")).contains("controller.listener.names")
        );
        assert!(with("log.dirs", None).contains("metadata.log.dir"));
        assert!(with("broker.session.timeout.ms", Some("0")).contains("broker.session.timeout.ms"));
        assert!(with("num.partitions", Some("x")).contains("num.partitions"));
        assert!(with("metrics.port", Some("70000")).contains("metrics.port"));
    }

    // Shows: metrics.port is off by default; set, the endpoint binds the controller listener's
    // host unless metrics.host says otherwise (issue 7, "Metrics").
    #[test]
    fn metrics_endpoint_defaults_to_the_listener_host() {
        let base = [
            ("node.id", "1"),
            ("process.roles", "controller"),
            ("listeners", "CONTROLLER://10.0.0.5:9093"),
            ("log.dirs", "/a"),
        ];
        let config = ControllerServerConfig::from_properties(&props(&base)).unwrap();
        assert_eq!(config.metrics_endpoint, None);
        let mut with_port = props(&base);
        with_port.insert("metrics.port".into(), "9465".into());
        let config = ControllerServerConfig::from_properties(&with_port).unwrap();
        let endpoint = config.metrics_endpoint.unwrap();
        assert_eq!((endpoint.host.as_str(), endpoint.port), ("10.0.0.5", 9465));
    }
}
