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
//! | `describe_cluster` | DescribeCluster (brokers and controller endpoints) |
//! | `metadata_fetch` | Fetch of `__cluster_metadata-0` with Kafka's long poll |
//!
//! Start it with [`run`]. Wire sentinels (-1 epochs and offsets, -1 "cluster default") are
//! converted to and from `Option`s in the handlers; the controller crate never sees them. The
//! controller epoch is [`CONTROLLER_EPOCH`] until the Raft quorum (issue 6) supplies its term.
//! Listener and RPC details: `docs/controller.md`.

mod alter_partition;
pub mod config;
mod configs;
mod connection;
mod describe_cluster;
mod dispatch;
mod elect_leaders;
mod membership;
mod metadata_fetch;
mod recovery;
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
use tracing::{error, info};

pub use config::ControllerServerConfig;

use crate::active_controller::{ActiveController, ControllerStateError};
use crate::clock::Clock;
use crate::config::Listener;
use crate::metadata_log::{LocalMetadataLog, MetadataLogError};

/// The controller epoch written into metadata batches and answered where a response carries
/// one (the metadata Fetch's current leader). Issue 6 replaces it with the Raft term.
pub const CONTROLLER_EPOCH: i32 = 1;

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
    let bind_addr = format!("{}:{}", config.listener.host, config.listener.port);
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
        endpoint.host = local.ip().to_string();
    }
    Ok((listener, endpoint))
}

/// Runs the controller role on its TCP listener until `shutdown` is cancelled (see
/// [`serve`]); `on_ready` gets the bound address.
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
    serve(
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
    .await
}

/// Runs the controller role on `listener` until `shutdown` is cancelled: opens the formatted
/// metadata log directory (`meta.properties` gives the cluster id; the directory's `.lock` is
/// held) unless the broker of this process shares it, replays `__cluster_metadata-0`, applies
/// `eligible.leader.replicas.enable` on a cluster that never set it, calls `on_ready`, and
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
    let now_ms = u64::try_from(clock.now_ms()).unwrap_or(0);
    let log = LocalMetadataLog::open(storage, &config.metadata_log_dir, clock.now_ms())?;
    let controller_config = ControllerConfig {
        cluster_id: cluster_id.clone(),
        session_timeout_ms: config.broker_session_timeout_ms,
    };
    let (active, commands) =
        ActiveController::open_at(log, controller_config, CONTROLLER_EPOCH, now_ms)?;
    let end = active.controller().next_offset();
    info!(
        node_id = config.node_id,
        %cluster_id,
        end_offset = end.0,
        brokers = active.controller().image().brokers().len(),
        topics = active.controller().image().topics().len(),
        "controller replayed the metadata log"
    );

    let settings = Arc::new(Settings {
        node_id: config.node_id,
        cluster_id,
        endpoint,
        num_partitions: config.num_partitions,
        default_replication_factor: config.default_replication_factor,
        min_insync_replicas: config.min_insync_replicas,
        topic_defaults: config.topic_defaults.clone(),
        socket_request_max_bytes: config.socket_request_max_bytes,
    });

    let (handle, events, committed) = state::channels(end);
    let (commands_tx, commands_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut controller_state =
        state::ControllerState::new(active, clock.clone(), committed, commands_tx);
    if config.also_broker {
        // This process's broker starts with its controller: its old session is over.
        controller_state.expire_session(keel_controller::types::BrokerId(config.node_id));
    }
    controller_state.execute(commands);
    apply_elr_setting(
        &mut controller_state,
        config.eligible_leader_replicas_enable,
    )?;
    // The controller task stops on shutdown or on a fatal error; either way the listener stops.
    let stop = shutdown.child_token();
    let recovery_task = tokio::spawn(recovery::run(
        handle.clone(),
        commands_rx,
        network,
        clock,
        config.node_id,
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
    connection::serve(listener, handle, settings, stop.clone()).await;
    stop.cancel();
    let _ = recovery_task.await;
    let result = match controller_task.await {
        Ok(result) => result.map_err(ControllerServerError::from),
        Err(join) => Err(ControllerServerError::Task(join.to_string())),
    };
    if let Err(e) = &result {
        error!(error = %e, "controller stopped");
    }
    drop(owned_dir);
    result
}

/// `eligible.leader.replicas.enable` in the controller's config is the cluster's starting
/// point (Kafka sets the feature when formatting): it is written once, on a cluster whose
/// metadata has never set the feature. Later changes go through IncrementalAlterConfigs on the
/// cluster resource and win over the file.
fn apply_elr_setting(
    state: &mut state::ControllerState,
    enable: bool,
) -> Result<(), ControllerServerError> {
    let image = state.controller().image();
    if image
        .feature_level(keel_controller::config::ELR_FEATURE)
        .is_some()
        || enable
    {
        return Ok(());
    }
    let change = keel_controller::ConfigChange {
        name: keel_controller::config::ELR_FEATURE.to_string(),
        value: Some(enable.to_string()),
    };
    let result = state.commit(|c, now_ms| {
        c.alter_configs(
            &keel_controller::records::ConfigResource::Cluster,
            std::slice::from_ref(&change),
            now_ms,
        )
    })?;
    match result {
        Ok(()) => {
            info!("eligible.leader.replicas.enable=false: the cluster runs Kafka's classic ISR rules (no ELR)");
            Ok(())
        }
        Err(e) => Err(ControllerServerError::Task(format!(
            "cannot apply eligible.leader.replicas.enable=false: {}",
            e.message
        ))),
    }
}
