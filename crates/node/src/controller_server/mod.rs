//! The controller role as a network server: the pure `keel_controller::Controller` over its
//! durable metadata log ([`crate::active_controller`], [`crate::metadata_log`]), answering
//! brokers and forwarded admin requests on the controller listener with Kafka's own RPCs.
//!
//! Layout:
//!
//! | module | what lives there |
//! |---|---|
//! | [`config`] | [`ControllerServerConfig`]: `node.id`, `process.roles`, `controller.listener.names`, `metadata.log.dir`, session timeout, topic defaults |
//! | [`state`] | the single controller task (events in over a channel, oneshot answers, the 500 ms tick) and [`state::ControllerHandle`] |
//! | `connection` | accept loop and per-connection request loop (frames, decoding, answers in order) |
//! | `dispatch` | one request to its handler, encoded with the right header |
//! | `membership` | BrokerRegistration, BrokerHeartbeat |
//! | `alter_partition` | AlterPartition v2–3 |
//! | `topics` | CreateTopics, DeleteTopics, CreatePartitions |
//! | `configs` | IncrementalAlterConfigs |
//! | `elect_leaders` | ElectLeaders |
//! | `reassignments` | AlterPartitionReassignments, ListPartitionReassignments |
//! | `describe_cluster` | DescribeCluster (brokers and controller endpoints) |
//! | `metadata_fetch` | Fetch of `__cluster_metadata-0` with Kafka's long poll |
//! | `fetch_snapshot` | FetchSnapshot of the newest metadata snapshot (brokers behind the compacted log) |
//! | `producer_ids` | AllocateProducerIds (blocks of producer ids for InitProducerId) |
//! | `acls` | CreateAcls, DeleteAcls, DescribeAcls (Kafka's `AclControlManager` behind them) |
//! | `scram_credentials` | AlterUserScramCredentials, DescribeUserScramCredentials (KIP-554) |
//! | `bootstrap` | the records `keel format --add-scram` leaves for a fresh cluster |
//!
//! Start it with [`run`]. Wire sentinels (-1 epochs and offsets, -1 "cluster default") are
//! converted to and from `Option`s in the handlers; the controller crate never sees them. The
//! controller epoch is [`CONTROLLER_EPOCH`] until the Raft quorum (issue 6) supplies its term.
//! Listener and RPC details: `docs/controller.md`.

mod acls;
mod alter_partition;
mod authorize;
pub mod bootstrap;
pub mod config;
mod configs;
mod connection;
mod describe_cluster;
mod dispatch;
mod elect_leaders;
mod fetch_snapshot;
mod membership;
mod metadata_fetch;
pub mod mutation_quota;
mod producer_ids;
mod quotas;
mod reassignments;
pub use reassignments::list_response as list_reassignments_response;
mod recovery;
mod scram_credentials;
pub mod state;
mod topics;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use keel_controller::ControllerConfig;
use keel_log::storage::Storage;
use keel_log::{LogDir, LogError};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use config::ControllerServerConfig;

use crate::clock::Clock;
use crate::config::Listener;
use crate::metadata_log::MetadataLogError;
use crate::raft::log_store::LogStore;
use crate::raft::network::NetworkFactory;
use crate::raft::state_machine::StateMachine;
use crate::raft::{self, QuorumTiming, Raft};
use state::ControllerStateError;

/// Why the controller could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ControllerServerError {
    #[error("metadata log directory {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: LogError,
    },
    #[error(transparent)]
    MetadataLog(#[from] MetadataLogError),
    #[error(transparent)]
    State(#[from] ControllerStateError),
    #[error("the controller task failed: {0}")]
    Task(String),
    #[error("cannot bind the controller listener {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Metrics(#[from] crate::metrics::http::MetricsBindError),
    #[error(transparent)]
    Security(#[from] crate::security::SecurityConfigError),
    #[error("bootstrap metadata: {0}")]
    Bootstrap(#[from] bootstrap::BootstrapError),
}

/// What handlers need besides the controller task.
#[derive(Debug)]
pub(crate) struct Settings {
    pub node_id: i32,
    pub cluster_id: String,
    /// The advertised controller endpoint (the bound port when the config says 0).
    pub endpoint: Listener,
    pub num_partitions: u32,
    pub default_replication_factor: u16,
    pub min_insync_replicas: Option<usize>,
    /// Static topic-config defaults stamped on new topics (see `ControllerServerConfig`).
    pub topic_defaults: BTreeMap<String, String>,
    pub socket_request_max_bytes: usize,
    /// `controller.quorum.voters` (node id, `host:port`), for DescribeCluster and leader hints.
    pub voters: Vec<(i32, String)>,
    /// The controller listener's request latency.
    pub request_metrics: crate::metrics::RequestMetrics,
    /// The authorizer (`authorizer.class.name`), deciding from the committed image; without
    /// one every request is allowed and the ACL APIs answer `SECURITY_DISABLED`.
    pub authorizer: Option<crate::security::authorizer::Authorizer>,
    /// Requests are not authorized: the listener is a single-node process's in-memory channel
    /// (`ControllerServerConfig::in_process`).
    pub in_process: bool,
    /// The clients' `controller_mutation_rate` buckets (KIP-599).
    pub mutation_quotas: mutation_quota::MutationQuotas,
}

/// Where the controller's metadata log directory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataDir {
    /// The controller opens (and locks) `metadata.log.dir` itself.
    Own,
    /// Combined mode: the broker of this process already opened and locked this directory
    /// (its first log directory); the controller uses it with the broker's cluster id.
    SharedWithBroker { cluster_id: String },
}

/// Binds the controller listener named by the config on TCP; returns it with the advertised
/// endpoint (the bound port when the config says 0).
pub async fn bind_tcp(
    config: &ControllerServerConfig,
) -> Result<(TcpListener, Listener), ControllerServerError> {
    // An empty host binds every interface, as the broker listener does (`CONTROLLER://:9093`).
    let bind_host = match config.listener.host.as_str() {
        "" => "0.0.0.0",
        host => host,
    };
    let bind_addr = format!("{bind_host}:{}", config.listener.port);
    let listener =
        TcpListener::bind(&bind_addr)
            .await
            .map_err(|source| ControllerServerError::Bind {
                addr: bind_addr.clone(),
                source,
            })?;
    let local = listener
        .local_addr()
        .map_err(|source| ControllerServerError::Bind {
            addr: bind_addr,
            source,
        })?;
    let mut endpoint = config.listener.clone();
    endpoint.port = local.port();
    if endpoint.host.is_empty() {
        // Every interface: advertised as localhost, as the broker's default advertised listener.
        endpoint.host = "localhost".to_string();
    }
    Ok((listener, endpoint))
}

/// Runs the controller role on its TCP listener until `shutdown` is cancelled (see
/// [`serve`]); `on_ready` gets the bound address. With `metrics.port` set, this process's
/// `/metrics` endpoint runs alongside.
pub async fn run(
    config: ControllerServerConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<(), ControllerServerError> {
    let (listener, endpoint) = bind_tcp(&config).await?;
    let local = listener
        .local_addr()
        .map_err(|source| ControllerServerError::Bind {
            addr: format!("{}:{}", endpoint.host, endpoint.port),
            source,
        })?;
    let metrics_stop = shutdown.child_token();
    let metrics_task = match &config.metrics_endpoint {
        Some(metrics_endpoint) => Some(
            crate::metrics::http::start(
                metrics_endpoint,
                &crate::net::TcpNetwork,
                config.metrics.clone(),
                metrics_stop.clone(),
            )
            .await?
            .0,
        ),
        None => None,
    };
    let result = serve(
        config,
        MetadataDir::Own,
        storage,
        clock,
        Arc::new(crate::net::TcpNetwork),
        listener,
        endpoint,
        shutdown,
        || on_ready(local),
    )
    .await;
    metrics_stop.cancel();
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    result
}

/// Runs the controller role on `listener` until `shutdown` is cancelled: opens the formatted
/// metadata log directory (`meta.properties` gives the cluster id; the directory's `.lock` is
/// held) unless the broker of this process shares it, replays `__cluster_metadata-0`, writes the
/// bootstrap records of `keel format --add-scram` and applies `eligible.leader.replicas.enable`
/// on a cluster that never had records / never set it, calls `on_ready`, and
/// serves. Returns when every connection has stopped, or with the error that stopped the
/// controller (a metadata log failure stops it: it cannot decide without its log).
#[allow(clippy::too_many_arguments)]
pub async fn serve<L: crate::net::Listener>(
    config: ControllerServerConfig,
    dir: MetadataDir,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn crate::net::Network>,
    listener: L,
    endpoint: Listener,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(),
) -> Result<(), ControllerServerError> {
    serve_observed(
        config,
        dir,
        storage,
        clock,
        network,
        listener,
        endpoint,
        shutdown,
        |_| {},
        on_ready,
    )
    .await
}

/// [`serve`], with `on_view` given a receiver of this controller's view of the quorum (leader,
/// epoch, whether it is the active controller) before it serves — for an observer such as the
/// simulator's checkers.
#[allow(clippy::too_many_arguments)]
pub async fn serve_observed<L: crate::net::Listener>(
    config: ControllerServerConfig,
    dir: MetadataDir,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn crate::net::Network>,
    listener: L,
    endpoint: Listener,
    shutdown: CancellationToken,
    on_view: impl FnOnce(tokio::sync::watch::Receiver<state::QuorumView>),
    on_ready: impl FnOnce(),
) -> Result<(), ControllerServerError> {
    let dir_error = |source| ControllerServerError::Dir {
        path: config.metadata_log_dir.display().to_string(),
        source,
    };
    let (owned_dir, cluster_id) = match dir {
        MetadataDir::Own => {
            let dir = LogDir::open(
                storage.clone(),
                &config.metadata_log_dir,
                None,
                config.node_id,
            )
            .map_err(dir_error)?;
            let cluster_id = dir.meta().cluster_id.clone();
            (Some(dir), cluster_id)
        }
        MetadataDir::SharedWithBroker { cluster_id } => (None, cluster_id),
    };
    // What `keel format --add-scram` left for a new cluster.
    let bootstrap = bootstrap::read(storage.as_ref(), &config.metadata_log_dir)?;
    let credentials = Arc::new(scram_credentials::ControllerCredentials::new(
        bootstrap::scram_users(&bootstrap),
    ));
    // Controllers reach each other on the controller listener's protocol, and brokers' on the
    // inter-broker listener's (the Unclean Recovery Manager's GetReplicaLogInfo).
    let listener_security = Arc::new(crate::security::ListenerSecurity::new(
        &config.raw,
        &config.listener.name,
        config.listener_protocol,
        crate::security::sasl::ExchangeContext {
            credentials: credentials.clone(),
            clock: clock.clone(),
        },
    )?);
    let raft_network = Arc::new(crate::security::SecureNetwork::new(
        network.clone(),
        &config.raw,
        &config.listener.name,
        config.listener_protocol,
        crate::security::Peer::Controller,
    )?);
    let broker_network = Arc::new(crate::security::SecureNetwork::new(
        network.clone(),
        &config.raw,
        &config.broker_listener.0,
        config.broker_listener.1,
        crate::security::Peer::Broker,
    )?);
    let reload_stop = shutdown.child_token();
    let _stop_reloads = reload_stop.clone().drop_guard();
    tokio::spawn({
        let servers = listener_security.tls.iter().cloned().collect();
        let clients = [&raft_network, &broker_network]
            .into_iter()
            .filter_map(|n| n.tls().cloned())
            .collect();
        let reload = config.tls_reload.clone();
        async move { reload.serve(servers, clients, reload_stop).await }
    });
    let raft_network: Arc<dyn crate::net::Network> = raft_network;
    let broker_network: Arc<dyn crate::net::Network> = broker_network;
    let (raft, machine) = start_raft(&config, storage, clock.clone(), raft_network).await?;
    credentials.attach(machine.clone());
    let settings = Arc::new(Settings {
        node_id: config.node_id,
        cluster_id: cluster_id.clone(),
        endpoint,
        num_partitions: config.num_partitions,
        default_replication_factor: config.default_replication_factor,
        min_insync_replicas: config.min_insync_replicas,
        topic_defaults: config.topic_defaults.clone(),
        socket_request_max_bytes: config.socket_request_max_bytes,
        mutation_quotas: mutation_quota::MutationQuotas::new(
            config.controller_quota_window_num,
            config.controller_quota_window_size_seconds,
        ),
        voters: config.quorum_voters.clone(),
        request_metrics: config.metrics.requests(config.node_id, "controller"),
        authorizer: config.authorizer.clone().map(|c| {
            crate::security::authorizer::Authorizer::new(
                c,
                Some(config.metrics.requests(config.node_id, "controller")),
            )
        }),
        in_process: config.in_process,
    });
    let controller_metrics = config.metrics.controller(config.node_id);
    info!(
        node_id = config.node_id,
        %cluster_id,
        voters = ?config.quorum_voters,
        applied_end_offset = machine.end_offset().0,
        "controller opened its Raft log and applied metadata"
    );

    let timing = QuorumTiming {
        election_timeout_ms: config.election_timeout_ms,
        snapshot_interval_entries: config.snapshot_interval_entries,
    };
    let commit_timeout = COMMIT_TIMEOUT.max(2 * timing.rpc_timeout());
    let (handle, events, view) = state::channels(machine.clone(), commit_timeout);
    on_view(view.subscribe());
    let (commands_tx, commands_rx) = tokio::sync::mpsc::unbounded_channel();
    let controller_state = state::ControllerState::new(
        raft.clone(),
        machine,
        clock.clone(),
        state::StateSettings {
            node_id: config.node_id,
            config: ControllerConfig {
                cluster_id: cluster_id.clone(),
                session_timeout_ms: config.broker_session_timeout_ms,
            },
            // This process's broker starts with its controller: its old session is over.
            expire_on_first_activation: config
                .also_broker
                .then_some(keel_controller::types::BrokerId(config.node_id)),
            elr_default: config.eligible_leader_replicas_enable,
            bootstrap,
            lease: timing.rpc_timeout(),
            metrics: controller_metrics.clone(),
        },
        commands_tx,
        view,
    );
    // The controller task stops on shutdown or on a fatal error; either way the listener stops.
    let stop = shutdown.child_token();
    let recovery_task = tokio::spawn(recovery::run(
        handle.clone(),
        commands_rx,
        broker_network,
        clock,
        config.node_id,
        config.broker_listener.0.clone(),
        stop.clone(),
    ));
    let controller_task = tokio::spawn({
        let stop = stop.clone();
        async move {
            let result = state::run_controller(controller_state, events, stop.clone()).await;
            stop.cancel();
            result
        }
    });
    info!(host = %settings.endpoint.host, port = settings.endpoint.port, "controller listening");
    on_ready();
    connection::serve(
        listener,
        handle,
        raft.clone(),
        settings,
        listener_security,
        stop.clone(),
    )
    .await;
    stop.cancel();
    let _ = recovery_task.await;
    let result = match controller_task.await {
        Ok(result) => result.map_err(ControllerServerError::from),
        Err(join) => Err(ControllerServerError::Task(join.to_string())),
    };
    // A stopped controller is not the active one.
    controller_metrics.publish(crate::metrics::ControllerSnapshot::default());
    if let Err(e) = raft.shutdown().await {
        warn!(error = %e, "the Raft core did not stop cleanly");
    }
    if let Err(e) = &result {
        error!(error = %e, "controller stopped");
    }
    drop(owned_dir);
    result
}

/// How long an answer waits for its records to commit at least (brokers' own RPC timeouts are
/// shorter; they retry against whichever controller is active then).
const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the Raft log and the applied state under `metadata.log.dir`, starts the Raft core
/// and, on a freshly formatted directory, initializes the quorum with `controller.quorum.voters`
/// (every voter does the same; the first to campaign wins). A directory whose
/// `__cluster_metadata-0` holds records but that has no Raft log was written by a Keel from
/// before the quorum: refused (it would otherwise be rebuilt empty).
async fn start_raft(
    config: &ControllerServerConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn crate::net::Network>,
) -> Result<(Raft, StateMachine), ControllerServerError> {
    let dir = &config.metadata_log_dir;
    let log_store = LogStore::open(storage.clone(), dir, clock.clone()).map_err(|source| {
        ControllerServerError::Dir {
            path: dir.display().to_string(),
            source,
        }
    })?;
    let pristine = log_store.is_pristine();
    if pristine {
        let applied =
            crate::metadata_log::LocalMetadataLog::open(storage.clone(), dir, clock.now_ms())?;
        if applied.end_offset().0 > 0 {
            return Err(ControllerServerError::Task(format!(
                "{} holds metadata records but no Raft log (written by a Keel from before the \
                 controller quorum): format a new metadata directory",
                dir.display()
            )));
        }
    }
    let machine = StateMachine::open(storage, dir, clock)?;
    let voters: BTreeMap<u64, String> = config
        .quorum_voters
        .iter()
        .map(|(id, addr)| (raft::raft_id(*id), addr.clone()))
        .collect();
    let me = raft::raft_id(config.node_id);
    let rank = voters.keys().position(|id| *id == me).unwrap_or(0);
    let timing = QuorumTiming {
        election_timeout_ms: config.election_timeout_ms,
        snapshot_interval_entries: config.snapshot_interval_entries,
    };
    let raft_config = timing
        .openraft_config(rank)
        .map_err(|e| ControllerServerError::Task(format!("Raft configuration: {e}")))?;
    let factory = NetworkFactory::new(
        network,
        voters.clone(),
        config.node_id,
        std::time::Duration::from_millis(timing.heartbeat_ms()),
    );
    let raft = Raft::new(me, raft_config, factory, log_store, machine.clone())
        .await
        .map_err(|e| ControllerServerError::Task(format!("cannot start the Raft core: {e}")))?;
    if pristine {
        let members: BTreeMap<u64, openraft::BasicNode> = voters
            .iter()
            .map(|(id, addr)| (*id, openraft::BasicNode { addr: addr.clone() }))
            .collect();
        match raft.initialize(members).await {
            Ok(()) => info!(voters = voters.len(), "initialized the controller quorum"),
            Err(e) => info!(error = %e, "the controller quorum was initialized already"),
        }
        if config.campaign_when_pristine {
            // A vote that fails (a voter not up yet) only means the election timeout decides,
            // as without this.
            if let Err(e) = raft.trigger().elect().await {
                info!(error = %e, "could not campaign at once; the election timeout decides");
            }
        }
    }
    Ok((raft, machine))
}
