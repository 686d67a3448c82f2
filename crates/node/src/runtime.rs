//! Running a broker in its cluster: open the log directories, register with the controller,
//! follow the metadata log, load the logs and take up the roles the image names, serve
//! clients once unfenced, replicate, and — when the cancellation token fires — shut down in
//! order: controlled shutdown (the controller moves leadership away and takes this broker out
//! of every ISR), then flush and the clean-shutdown file.
//!
//! A broker whose config names no `controller.quorum.voters` is a single-node cluster: it runs
//! the controller itself, in-process, over an in-memory connection ([`crate::net::MemNetwork`])
//! with its metadata log in the first log directory. The same code path serves one broker or
//! many.

use std::sync::Arc;
use std::time::Duration;

use keel_controller::types::{BrokerEpoch, MetadataOffset};
use keel_log::storage::Storage;
use keel_replication::{AlterPartitionResponse, ErrorCode};
use keel_wire::kafka_protocol::messages::alter_partition_request::{
    BrokerState as WireIsrMember, PartitionData as WirePartition, TopicData as WireTopic,
};
use keel_wire::kafka_protocol::messages::{
    AlterPartitionRequest, AlterPartitionResponse as WireAlterPartitionResponse, ApiKey, BrokerId,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::blocking::run_blocking;
use crate::broker::{AlterPartitionJob, Broker, PreviousShutdown};
use crate::client::Connection;
use crate::clock::Clock;
use crate::cluster::follower::MetadataFollower;
use crate::cluster::lifecycle::{self, Registration};
use crate::config::{BrokerConfig, Listener};
use crate::controller_server::{self, ControllerServerConfig, MetadataDir};
use crate::net::{BoxStream, MemNetwork, Network};
use crate::server;
use keel_wire::ResponseError;

/// Shortest period of the flush checker (flush.ms is checked at this granularity at most).
const FLUSH_CHECK_INTERVAL_MS_MIN: u64 = 100;
/// Longest period of the flush checker, so `flush.ms` topic overrides are honoured even when
/// `log.flush.scheduler.interval.ms` is left at Kafka's "never".
const FLUSH_CHECK_INTERVAL_MS_MAX: u64 = 1_000;
/// How often leaders tick (produce timeouts, ISR shrink, AlterPartition retries).
const REPLICA_TICK_MS: u64 = 50;
/// How often a broker in controlled shutdown asks whether it may stop.
const CONTROLLED_SHUTDOWN_POLL_MS: u64 = 200;
/// The longest controlled shutdown waits for the controller before stopping anyway.
const CONTROLLED_SHUTDOWN_MAX_MS: u64 = 30_000;
/// How long a starting broker waits for leaders of its partitions before saying it is ready.
const STARTUP_SETTLE_MAX_MS: u64 = 3_000;

/// How often a registration refused as a duplicate is retried (see `register`).
const DUPLICATE_REGISTRATION_RETRY: Duration = Duration::from_millis(250);
/// The address of a single-node cluster's in-process controller.
pub(crate) const IN_PROCESS_CONTROLLER: &str = "in-process-controller:0";

/// Where the broker listens, known once it is bound (the port may have been 0).
#[derive(Debug, Clone)]
pub struct Ready {
    /// The port the broker listener is bound to.
    pub port: u16,
    /// `host:port` clients should use.
    pub bootstrap: String,
    /// `host:port` of this process's `/metrics` endpoint, when `metrics.port` is set.
    pub metrics: Option<String>,
}

/// The controller this process runs besides the broker, if any.
#[derive(Debug, Clone)]
pub enum LocalController {
    /// The broker joins the controllers named by `controller.quorum.voters`.
    None,
    /// A single-node cluster: the controller runs in-process on an in-memory listener.
    InProcess(ControllerServerConfig),
    /// KRaft's combined mode: this process also serves the controller listener over TCP.
    Combined(ControllerServerConfig),
}

impl LocalController {
    /// What a broker config asks for: combined mode when `process.roles` names both roles, a
    /// single-node cluster when no controllers are configured (neither
    /// `controller.quorum.voters` nor `controller.quorum.bootstrap.servers`).
    pub fn for_broker(config: &BrokerConfig) -> anyhow::Result<LocalController> {
        let roles = &config.process_roles;
        if roles.iter().any(|r| r == "controller") {
            let controller = ControllerServerConfig::from_properties(&config.raw)?;
            return Ok(LocalController::Combined(Self::reporting_with(
                controller, config,
            )));
        }
        if !config.controller_addresses().is_empty() {
            return Ok(LocalController::None);
        }
        let mut props = config.raw.clone();
        props.insert("process.roles".into(), "broker,controller".into());
        props.insert(
            "listeners".into(),
            format!("CONTROLLER://{IN_PROCESS_CONTROLLER}"),
        );
        props.insert("controller.listener.names".into(), "CONTROLLER".into());
        props.insert(
            "metadata.log.dir".into(),
            config.log_dirs[0].display().to_string(),
        );
        // The in-memory controller listener is never on a network: PLAINTEXT whatever the
        // broker's listeners speak; its URM reaches this broker on the inter-broker listener.
        props.remove(crate::security::LISTENER_SECURITY_PROTOCOL_MAP);
        props.remove(crate::security::SECURITY_INTER_BROKER_PROTOCOL);
        props.remove(crate::security::INTER_BROKER_LISTENER_NAME);
        let mut controller = ControllerServerConfig::from_properties(&props)?;
        controller.raw = config.raw.clone();
        controller.in_process = true;
        controller.broker_listener = (
            config.inter_broker_listener_name.clone(),
            config.protocol_of(&config.inter_broker_listener_name),
        );
        Ok(LocalController::InProcess(Self::reporting_with(
            controller, config,
        )))
    }

    /// The controller of a broker's process reports into the broker's registry, served by the
    /// broker's endpoint (one per process).
    fn reporting_with(
        mut controller: ControllerServerConfig,
        broker: &BrokerConfig,
    ) -> ControllerServerConfig {
        controller.metrics = broker.metrics.clone();
        controller.tls_reload = broker.tls_reload.clone();
        controller.authorizer = broker.authorizer.clone();
        controller.metrics_endpoint = None;
        controller
    }
}

/// Runs a broker until `shutdown` is cancelled, then shuts it down cleanly. `on_ready` is
/// called once the broker is registered, caught up with metadata, unfenced and serving.
pub async fn run(
    config: BrokerConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn Network>,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Ready),
) -> anyhow::Result<()> {
    run_observed(config, storage, clock, network, shutdown, |_| {}, on_ready).await
}

/// [`run`], with `on_open` called with the broker right after it is opened (its logs
/// recovered and loaded), before the local controller starts and before the broker registers —
/// so an observer (the simulator) can keep the broker and inspect its partitions, logs and
/// metadata image while it runs.
pub async fn run_observed(
    config: BrokerConfig,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn Network>,
    shutdown: CancellationToken,
    on_open: impl FnOnce(&Arc<Broker>),
    on_ready: impl FnOnce(&Ready),
) -> anyhow::Result<()> {
    for key in &config.unknown_keys {
        warn!(key = %key, "unknown config key ignored");
    }
    // The process's /metrics endpoint, first: a port in use stops the start at once.
    let metrics_stop = CancellationToken::new();
    let _stop_metrics = metrics_stop.clone().drop_guard();
    let mut metrics_task = None;
    let metrics_address = match &config.metrics_endpoint {
        Some(endpoint) => {
            let (task, port) = crate::metrics::http::start(
                endpoint,
                network.as_ref(),
                config.metrics.clone(),
                metrics_stop.clone(),
            )
            .await?;
            metrics_task = Some(task);
            Some(endpoint.describe(port))
        }
        None => None,
    };
    let on_ready = move |ready: &Ready| {
        on_ready(&Ready {
            metrics: metrics_address,
            ..ready.clone()
        })
    };
    let local_controller = LocalController::for_broker(&config)?;
    let mut in_process_listener = None;
    let (network, voters): (Arc<dyn Network>, Vec<String>) = match &local_controller {
        LocalController::InProcess(_) => {
            let mem = MemNetwork::with_fallback(network.clone());
            in_process_listener = Some(mem.bind(IN_PROCESS_CONTROLLER));
            (Arc::new(mem), vec![IN_PROCESS_CONTROLLER.to_string()])
        }
        LocalController::Combined(c) if config.controller_addresses().is_empty() => (
            network,
            c.quorum_voters.iter().map(|(_, a)| a.clone()).collect(),
        ),
        _ => (network, config.controller_addresses()),
    };

    let (broker, jobs) = {
        let (config, storage, clock, network, voters) = (
            config.clone(),
            storage.clone(),
            clock.clone(),
            network.clone(),
            voters.clone(),
        );
        run_blocking(move || Broker::open(config, storage, clock, network, voters)).await??
    };
    let broker = Arc::new(broker);
    on_open(&broker);

    // The controller of a single-node cluster (or of combined mode) starts with the broker.
    let controller_stop = CancellationToken::new();
    let controller_task = start_local_controller(
        &local_controller,
        &broker,
        in_process_listener,
        storage.clone(),
        clock.clone(),
        controller_stop.clone(),
    )
    .await?;

    let result = run_broker(broker.clone(), jobs, shutdown, on_ready).await;
    let closing = broker.clone();
    let closed = run_blocking(move || closing.shutdown()).await;
    controller_stop.cancel();
    if let Some(task) = controller_task {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "the in-process controller stopped with an error"),
            Err(e) => warn!(error = %e, "the in-process controller task failed"),
        }
    }
    // The endpoint stops with the node: its listener is closed when this returns.
    metrics_stop.cancel();
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    result?;
    closed??;
    Ok(())
}

async fn start_local_controller(
    local: &LocalController,
    broker: &Arc<Broker>,
    in_process_listener: Option<crate::net::MemListener>,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
) -> anyhow::Result<
    Option<tokio::task::JoinHandle<Result<(), controller_server::ControllerServerError>>>,
> {
    let dir_for = |config: &ControllerServerConfig| {
        if config.metadata_log_dir == broker.first_log_dir()
            || broker.config.log_dirs.contains(&config.metadata_log_dir)
        {
            MetadataDir::SharedWithBroker {
                cluster_id: broker.cluster_id.clone(),
            }
        } else {
            MetadataDir::Own
        }
    };
    let network = broker.network().clone();
    let task = match local {
        LocalController::None => return Ok(None),
        LocalController::InProcess(config) => {
            let listener = in_process_listener
                .ok_or_else(|| anyhow::anyhow!("the in-process controller has no listener"))?;
            let endpoint = config.listener.clone();
            let dir = dir_for(config);
            spawn_controller(
                config.clone(),
                dir,
                storage,
                clock,
                network,
                async move { Ok((listener, endpoint)) },
                stop,
            )
            .await?
        }
        LocalController::Combined(config) => {
            let dir = dir_for(config);
            let bind_config = config.clone();
            spawn_controller(
                config.clone(),
                dir,
                storage,
                clock,
                network,
                // Bound on the controller's own runtime, whose reactor serves the socket.
                async move { controller_server::bind_tcp(&bind_config).await },
                stop,
            )
            .await?
        }
    };
    Ok(Some(task))
}

/// Worker threads of a controller's own runtime: two, so the Raft core and the controller task
/// never wait for each other's longest step.
pub const CONTROLLER_WORKER_THREADS: usize = 2;

/// Runs a controller's task on a runtime of its own ([`CONTROLLER_WORKER_THREADS`] worker
/// threads named `name`, its own timers, sockets and blocking pool) when the caller's runtime
/// is multi-threaded, so the quorum's heartbeats and the controller's lease never wait behind a
/// co-located broker's work — a worker blocked in a synchronous append or on a lock held while
/// logs are created. The handle finishes with the task. On a current-thread runtime (the
/// simulator's, which must stay deterministic) the task is spawned on the caller's runtime.
///
/// The task must create its sockets itself (they belong to the runtime that first polls them).
pub fn spawn_controller_runtime<F, T>(
    name: &str,
    task: F,
) -> tokio::task::JoinHandle<Result<T, controller_server::ControllerServerError>>
where
    F: std::future::Future<Output = Result<T, controller_server::ControllerServerError>>
        + Send
        + 'static,
    T: Send + 'static,
{
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::CurrentThread
    {
        return tokio::spawn(task);
    }
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let thread_name = name.to_string();
    let spawned = std::thread::Builder::new()
        .name(thread_name.clone())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(CONTROLLER_WORKER_THREADS)
                .thread_name(thread_name)
                .enable_all()
                .build();
            let result = match runtime {
                Ok(runtime) => runtime.block_on(task),
                Err(e) => Err(controller_server::ControllerServerError::Task(format!(
                    "cannot build the controller's runtime: {e}"
                ))),
            };
            let _ = done_tx.send(result);
        });
    tokio::spawn(async move {
        if let Err(e) = spawned {
            return Err(controller_server::ControllerServerError::Task(format!(
                "cannot start the controller's thread: {e}"
            )));
        }
        done_rx.await.unwrap_or_else(|_| {
            Err(controller_server::ControllerServerError::Task(
                "the controller's runtime stopped without an answer".to_string(),
            ))
        })
    })
}

/// Starts the controller role as a task (on its own runtime, [`spawn_controller_runtime`]),
/// listening on what `bind` returns; returns once it is serving, or with the error that
/// kept it from starting (a broker waiting for a controller that never started would retry its
/// registration forever).
#[allow(clippy::too_many_arguments)]
async fn spawn_controller<L, B>(
    config: ControllerServerConfig,
    dir: MetadataDir,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    network: Arc<dyn Network>,
    bind: B,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), controller_server::ControllerServerError>>>
where
    L: crate::net::Listener,
    B: std::future::Future<
            Output = Result<(L, Listener), controller_server::ControllerServerError>,
        > + Send
        + 'static,
{
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = spawn_controller_runtime("keel-controller", async move {
        let (listener, endpoint) = bind.await?;
        controller_server::serve(
            config,
            dir,
            storage,
            clock,
            network,
            listener,
            endpoint,
            stop,
            move || {
                let _ = ready_tx.send(());
            },
        )
        .await
    });
    if ready_rx.await.is_ok() {
        return Ok(task);
    }
    // The ready signal was dropped: the controller stopped before serving.
    match task.await {
        Ok(Err(e)) => Err(anyhow::Error::new(e).context("the controller could not start")),
        Ok(Ok(())) => anyhow::bail!("the controller stopped before serving"),
        Err(e) => Err(anyhow::anyhow!("the controller task failed: {e}")),
    }
}

/// The broker's own run: bind, register, follow metadata, serve, replicate, stop.
async fn run_broker(
    broker: Arc<Broker>,
    jobs: tokio::sync::mpsc::UnboundedReceiver<AlterPartitionJob>,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Ready),
) -> anyhow::Result<()> {
    let config = broker.config.clone();
    // Every broker listener is bound now (the registration carries the ports) and served once
    // the broker is unfenced; clients connecting before then wait in the accept queue. Each
    // speaks its security protocol (TLS settings read now: a bad keystore stops the start).
    let mut bound = Vec::new();
    for listener_config in &config.listeners {
        let protocol = config.protocol_of(&listener_config.name);
        let security = crate::security::ListenerSecurity::new(
            &config.raw,
            &listener_config.name,
            protocol,
            broker.sasl_context(),
        )
        .map_err(|e| anyhow::anyhow!("listener {}: {e}", listener_config.name))?;
        let (listener, port) = broker
            .network()
            .listen(&listener_config.host, listener_config.port)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot listen on {}:{}: {e}",
                    listener_config.host,
                    listener_config.port
                )
            })?;
        bound.push((listener, port, Arc::new(security)));
    }
    // What clients are told: each advertised listener, with the bound port where it said 0.
    let advertised: Vec<(Listener, crate::security::SecurityProtocol)> = config
        .advertised_listeners
        .iter()
        .map(|a| {
            let mut a = a.clone();
            if a.port == 0 {
                if let Some(index) = config.listeners.iter().position(|l| l.name == a.name) {
                    a.port = bound[index].1;
                }
            }
            let protocol = config.protocol_of(&a.name);
            (a, protocol)
        })
        .collect();
    // SIGHUP (or whoever holds the trigger) reloads every listener's and outgoing TLS.
    let reload_stop = CancellationToken::new();
    let _stop_reloads = reload_stop.clone().drop_guard();
    tokio::spawn({
        let servers = bound.iter().filter_map(|(_, _, s)| s.tls.clone()).collect();
        let clients = [broker.inter_broker_network(), broker.controller_network()]
            .into_iter()
            .filter_map(|n| n.tls().cloned())
            .collect();
        let reload = config.tls_reload.clone();
        async move { reload.serve(servers, clients, reload_stop).await }
    });
    let port = bound[0].1;
    let first = &advertised[0].0;
    let ready = Ready {
        port,
        bootstrap: format!("{}:{}", first.host, first.port),
        metrics: None,
    };

    // Register (retrying until the controller answers or we are told to stop).
    let registration = Registration {
        broker_id: config.node_id,
        cluster_id: broker.cluster_id.clone(),
        incarnation_id: broker.clock.new_uuid(),
        listeners: advertised,
        rack: None,
        log_dir_ids: broker.log_dir_ids(),
        previous_broker_epoch: match broker.previous_shutdown {
            PreviousShutdown::Clean { broker_epoch } => Some(broker_epoch),
            PreviousShutdown::Unclean => None,
        },
    };
    // After an unclean shutdown the logs need recovery, and the controller refuses the
    // registration until the previous incarnation's session expires: recover meanwhile.
    // After a clean one the logs load (quickly: nothing is scanned) before the registration,
    // because a log that lost data on the way — damage found, a torn tail, a directory that
    // fails — makes this broker's shutdown unclean whatever its files say (KIP-966, issue 19).
    let registered = CancellationToken::new();
    let mut registration = registration;
    let mut preload = tokio::spawn(preload_logs(broker.clone(), registered.clone()));
    let preload = if matches!(broker.previous_shutdown, PreviousShutdown::Clean { .. }) {
        let follower = tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                registered.cancel();
                let _ = (&mut preload).await;
                return Ok(());
            }
            loaded = &mut preload => loaded.ok().flatten(),
        };
        let offline = broker.offline_log_dirs();
        if broker.logs_lost_data() || !offline.is_empty() {
            warn!(
                logs_lost_data = broker.logs_lost_data(),
                offline_log_dirs = offline.len(),
                "a log lost data or a log directory failed since the clean shutdown: registering as an unclean shutdown"
            );
            registration.previous_broker_epoch = None;
        }
        registration.log_dir_ids = broker.log_dir_ids();
        tokio::spawn(async move { follower })
    } else {
        preload
    };
    let Some(((mut control_index, mut control), broker_epoch)) =
        register(&broker, &registration, &shutdown).await
    else {
        registered.cancel();
        let _ = preload.await;
        return Ok(());
    };
    registered.cancel();
    broker.set_broker_epoch(broker_epoch);
    info!(
        node_id = config.node_id,
        cluster_id = %broker.cluster_id,
        broker_epoch,
        "registered with the controller"
    );

    // Follow the metadata log; apply images once they include our registration.
    let tasks = CancellationToken::new();
    let (applied_tx, mut applied_rx) = tokio::sync::watch::channel::<Option<i64>>(None);
    let follow_task = tokio::spawn(follow_metadata(
        broker.clone(),
        MetadataOffset(broker_epoch),
        preload,
        applied_tx,
        tasks.clone(),
    ));

    // Heartbeat until unfenced.
    let mut attempt = 0u32;
    let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
    loop {
        let applied = *applied_rx.borrow_and_update();
        let report = broker.storage_report();
        match lifecycle::heartbeat(
            &mut control,
            config.node_id,
            broker_epoch,
            applied,
            false,
            &report,
        )
        .await
        {
            Ok(state) if !state.is_fenced && applied.is_some() => {
                broker.controller().prefer(control_index);
                break;
            }
            Ok(_) => broker.controller().prefer(control_index),
            Err(e) => {
                log_heartbeat_failure(&e);
                broker.controller().demote(control_index);
                match reconnect(&broker, &shutdown, &mut attempt).await {
                    Ok(c) => (control_index, control) = c,
                    Err(_) => {
                        // Stopped while reconnecting: stop the metadata follower too.
                        tasks.cancel();
                        let _ = follow_task.await;
                        return Ok(());
                    }
                }
            }
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => {
                tasks.cancel();
                let _ = follow_task.await;
                return Ok(());
            }
            _ = applied_rx.changed() => {}
            () = tokio::time::sleep(interval.min(Duration::from_millis(200))) => {}
        }
    }

    let serve_stop = CancellationToken::new();
    let server_tasks: Vec<_> = bound
        .into_iter()
        .map(|(listener, _, security)| {
            tokio::spawn(server::serve(
                listener,
                broker.clone(),
                security,
                serve_stop.clone(),
            ))
        })
        .collect();
    let mut background = spawn_background(broker.clone(), tasks.clone());
    background.push(tokio::spawn(crate::cluster::fetcher::run(
        broker.clone(),
        tasks.clone(),
    )));
    background.push(tokio::spawn(send_alter_partitions(
        broker.clone(),
        jobs,
        tasks.clone(),
    )));
    background.push(tokio::spawn(tick_leaders(broker.clone(), tasks.clone())));

    // Serving (and replicating) from here on, as a Kafka broker once unfenced: the controller
    // may need this broker's answers to elect its partitions' leaders (the Unclean Recovery
    // Manager asks every replica for its log by GetReplicaLogInfo). Before announcing that it
    // is ready, give the controller a moment to elect leaders for what this broker hosts (a
    // restarted single-node cluster has no leader until its controller sees the broker back),
    // so clients starting then find them; bounded, since a partition may rightly stay
    // leaderless.
    let settle = tokio::time::Instant::now() + Duration::from_millis(STARTUP_SETTLE_MAX_MS);
    let mut images = broker.subscribe_image_changes();
    while !broker.all_hosted_partitions_led() && tokio::time::Instant::now() < settle {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            _ = images.changed() => {}
            () = tokio::time::sleep_until(settle) => break,
        }
    }
    info!(
        node_id = config.node_id,
        port, broker_epoch, "broker started"
    );
    on_ready(&ready);

    // Heartbeat while serving; on shutdown, controlled shutdown first.
    let mut fenced_logged = false;
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
            // A storage fault: report it now, so leadership moves without waiting.
            () = broker.storage_report_wanted() => {}
        }
        let applied = *applied_rx.borrow();
        let report = broker.storage_report();
        match lifecycle::heartbeat(
            &mut control,
            config.node_id,
            broker_epoch,
            applied,
            false,
            &report,
        )
        .await
        {
            Ok(state) => {
                broker.controller().prefer(control_index);
                if state.is_fenced && !fenced_logged {
                    warn!("the controller fenced this broker (missed heartbeats?); heartbeating to be unfenced");
                }
                fenced_logged = state.is_fenced;
            }
            Err(e) => {
                log_heartbeat_failure(&e);
                broker.controller().demote(control_index);
                match reconnect(&broker, &shutdown, &mut attempt).await {
                    Ok(c) => (control_index, control) = c,
                    Err(_) => break,
                }
            }
        }
    }
    info!("shutting down");
    if config.controlled_shutdown_enable {
        controlled_shutdown(&broker, (control_index, control), broker_epoch, &applied_rx).await;
    }
    serve_stop.cancel();
    tasks.cancel();
    for task in server_tasks {
        let _ = task.await;
    }
    tracing::debug!("server stopped");
    let _ = follow_task.await;
    tracing::debug!("metadata follower stopped");
    for (i, task) in background.into_iter().enumerate() {
        let _ = task.await;
        tracing::debug!(task = i, "background task stopped");
    }
    Ok(())
}

/// A heartbeat refused with `NOT_CONTROLLER` only says that the active controller moved (an
/// election, e.g. while a fresh quorum settles; Kafka's broker re-resolves the controller
/// without a warning), and the controllers log the change: INFO. Any other failure: WARN.
fn log_heartbeat_failure(e: &lifecycle::LifecycleError) {
    if matches!(
        e,
        lifecycle::LifecycleError::Refused {
            error: ResponseError::NotController
        }
    ) {
        info!(error = %e, "the active controller moved; reconnecting");
    } else {
        warn!(error = %e, "heartbeat failed; reconnecting");
    }
}

/// Registers, retrying with back-off; `None` if shutdown came first. A refusal with
/// `DUPLICATE_BROKER_REGISTRATION` (this node's previous incarnation, gone without a controlled
/// shutdown, still holds its session) is retried every [`DUPLICATE_REGISTRATION_RETRY`] from the
/// same controller, so the broker registers as soon as that session expires, not up to a full
/// back-off later.
async fn register(
    broker: &Broker,
    registration: &Registration,
    shutdown: &CancellationToken,
) -> Option<((usize, Connection<BoxStream>), i64)> {
    let mut attempt = 0;
    // Voters that answered NOT_CONTROLLER since the last pause: each is tried once before the
    // broker backs off, so it finds a newly active controller without waiting a back-off per
    // voter (on a fresh cluster that was four seconds after the first leader was elected).
    let voters = broker.controller().candidates().len().max(1);
    let mut refused_in_turn = 0;
    loop {
        // Err: the error, whether it is a duplicate registration, and whether it only says that
        // no controller is active yet (a quorum still electing its first leader at start).
        let outcome = async {
            let (index, mut connection) = connect_controller(broker)
                .await
                .map_err(|e| (e, false, true))?;
            match lifecycle::register(&mut connection, registration).await {
                Ok(epoch) => {
                    broker.controller().prefer(index);
                    Ok(((index, connection), epoch))
                }
                Err(e) => {
                    let duplicate = matches!(
                        &e,
                        lifecycle::LifecycleError::Refused {
                            error: ResponseError::DuplicateBrokerRegistration
                        }
                    );
                    let electing = matches!(
                        &e,
                        lifecycle::LifecycleError::Refused {
                            error: ResponseError::NotController
                        }
                    );
                    if !duplicate {
                        broker.controller().demote(index);
                    }
                    Err((anyhow::Error::from(e), duplicate, electing))
                }
            }
        }
        .await;
        let pause = match outcome {
            Ok(done) => return Some(done),
            Err((e, duplicate, electing)) => {
                refused_in_turn = if electing { refused_in_turn + 1 } else { 0 };
                if electing && refused_in_turn < voters {
                    // The next voter (the refusing one was demoted), at once.
                    continue;
                }
                refused_in_turn = 0;
                // A fresh cluster's brokers usually start before its quorum has elected a
                // leader: that is news only when it lasts (ten back-offs, about 15 s).
                if attempt == 0 && electing {
                    info!(error = %e, "no active controller yet; retrying the registration");
                } else if attempt % 10 == 0 {
                    warn!(error = %e, attempt, "cannot register with the controller yet; retrying");
                }
                if duplicate {
                    DUPLICATE_REGISTRATION_RETRY
                } else {
                    lifecycle::reconnect_backoff(attempt)
                }
            }
        };
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(pause) => {}
        }
        attempt = attempt.saturating_add(1);
    }
}

/// Connects the lifecycle channel to the controller most likely active (see
/// `ControllerChannel::candidates`); a call that then fails — `NOT_CONTROLLER` included —
/// demotes it, one that succeeds makes every channel try it first.
async fn connect_controller(broker: &Broker) -> anyhow::Result<(usize, Connection<BoxStream>)> {
    let client_id = format!("keel-broker-{}-lifecycle", broker.node_id());
    Ok(broker.controller().connect_as(&client_id).await?)
}

async fn reconnect(
    broker: &Broker,
    shutdown: &CancellationToken,
    attempt: &mut u32,
) -> anyhow::Result<(usize, Connection<BoxStream>)> {
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => anyhow::bail!("shutting down"),
            () = tokio::time::sleep(lifecycle::reconnect_backoff(*attempt)) => {}
        }
        *attempt = attempt.saturating_add(1);
        if let Ok(c) = connect_controller(broker).await {
            *attempt = 0;
            return Ok(c);
        }
    }
}

/// How long one metadata fetch (a long poll of at most `METADATA_FETCH_MAX_WAIT_MS`) may take.
const METADATA_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Fetches the metadata log as it is now (no registration needed) and loads every log with
/// its topic's configs ([`Broker::preload_logs`]): after an unclean shutdown while the
/// registration is still being refused (the recovery overlaps the wait), after a clean one
/// before registering (what loading finds decides whether the shutdown counts as clean). The
/// first applied image claims the loaded logs.
/// Returns the follower it caught up, for [`follow_metadata`] to go on from. Gives up
/// fetching (returning `None`: the logs load with the first image, as after a clean shutdown)
/// once `registered` is cancelled; a recovery already started runs to its end.
async fn preload_logs(
    broker: Arc<Broker>,
    registered: CancellationToken,
) -> Option<MetadataFollower> {
    let client_id = format!("keel-broker-{}-preload", broker.node_id());
    let mut follower = MetadataFollower::new();
    let mut attempt = 0u32;
    let mut connection = None;
    while !follower.caught_up() {
        if connection.is_none() {
            tokio::select! {
                biased;
                () = registered.cancelled() => return None,
                connected = broker.controller().connect_as(&client_id) => match connected {
                    Ok((_, c)) => connection = Some(c),
                    Err(_) => {
                        tokio::select! {
                            biased;
                            () = registered.cancelled() => return None,
                            () = tokio::time::sleep(lifecycle::reconnect_backoff(attempt)) => {}
                        }
                        attempt = attempt.saturating_add(1);
                        continue;
                    }
                },
            }
        }
        let conn = connection.as_mut().expect("connected above");
        tokio::select! {
            biased;
            () = registered.cancelled() => return None,
            fetched = tokio::time::timeout(METADATA_FETCH_TIMEOUT, follower.fetch_once(conn, broker.node_id())) => {
                if !matches!(fetched, Ok(Ok(_))) {
                    connection = None;
                    tokio::select! {
                        biased;
                        () = registered.cancelled() => return None,
                        () = tokio::time::sleep(lifecycle::reconnect_backoff(attempt)) => {}
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
        }
    }
    let image = follower.snapshot();
    let loading = broker.clone();
    let started = broker.clock.now_ms();
    match run_blocking(move || loading.preload_logs(&image)).await {
        Ok(Ok(logs)) => info!(
            logs,
            metadata_offset = follower.next_offset().0,
            elapsed_ms = broker.clock.now_ms().saturating_sub(started),
            "recovered the logs while registering"
        ),
        // The first image loads the logs again, and reports (and retries) the error there.
        Ok(Err(e)) => {
            warn!(error = %e, "log recovery before the registration failed; retrying with the first image")
        }
        Err(e) => warn!(error = %e, "log recovery task failed"),
    }
    Some(follower)
}

/// Fetches the metadata log and applies each new image (from the one that includes this
/// broker's registration on); publishes the applied offset for heartbeats. Starts from the
/// follower `preload` caught up, once the logs it recovers are ready.
async fn follow_metadata(
    broker: Arc<Broker>,
    registered_at: MetadataOffset,
    preload: tokio::task::JoinHandle<Option<MetadataFollower>>,
    applied: tokio::sync::watch::Sender<Option<i64>>,
    stop: CancellationToken,
) {
    let mut preload = preload;
    let preloaded = tokio::select! {
        biased;
        () = stop.cancelled() => {
            // A recovery under way runs to its end: wait for it, so that nothing of this run
            // still touches the logs once the broker has stopped.
            let _ = preload.await;
            return;
        }
        preloaded = &mut preload => preloaded.ok().flatten(),
    };
    let mut follower = preloaded.unwrap_or_default();
    // The preload may have fetched past the registration already: apply that image without
    // waiting for a record more.
    let mut unapplied = follower.next_offset() > registered_at;
    // The connection and the index of the controller it goes to.
    let mut connection: Option<(usize, Connection<BoxStream>)> = None;
    let mut attempt = 0u32;
    let client_id = format!("keel-broker-{}-metadata", broker.node_id());
    loop {
        if stop.is_cancelled() {
            return;
        }
        // Follow the controller the lifecycle found active: a standby cut off from the quorum
        // (or a paused old leader) serves a log that no longer grows.
        if connection
            .as_ref()
            .is_some_and(|(index, _)| *index != broker.controller().preferred())
        {
            connection = None;
        }
        if connection.is_none() {
            match broker.controller().connect_as(&client_id).await {
                Ok(c) => {
                    connection = Some(c);
                    attempt = 0;
                }
                Err(_) => {
                    tokio::select! {
                        biased;
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(lifecycle::reconnect_backoff(attempt)) => {}
                    }
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
        }
        let (index, conn) = connection.as_mut().expect("connected above");
        let index = *index;
        // A controller that stops answering (paused, partitioned) must not hold the broker's
        // metadata: the long poll plus a margin, then the next controller.
        let fetched = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            fetched = tokio::time::timeout(METADATA_FETCH_TIMEOUT, follower.fetch_once(conn, broker.node_id())) => match fetched {
                Ok(fetched) => fetched,
                Err(_) => {
                    warn!(controller = index, "metadata fetch timed out; trying the next controller");
                    broker.controller().demote(index);
                    connection = None;
                    continue;
                }
            },
        };
        match fetched {
            Ok(0) if !unapplied => {}
            Ok(_) => {
                if follower.next_offset() > registered_at {
                    unapplied = false;
                    let image = follower.snapshot();
                    let applying = broker.clone();
                    match run_blocking(move || applying.apply_image(image)).await {
                        Ok(Ok(())) => {
                            applied.send_replace(follower.applied_offset());
                        }
                        Ok(Err(e)) => {
                            warn!(error = %e, "cannot apply the metadata image; retrying");
                            follower = MetadataFollower::new();
                            connection = None;
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Err(e) => warn!(error = %e, "metadata apply task failed"),
                    }
                }
            }
            Err(e) => {
                warn!(error = %e, "metadata fetch failed; reconnecting");
                broker.controller().demote(index);
                connection = None;
            }
        }
    }
}

/// Controlled shutdown (Kafka's KRaft broker): heartbeat with `WantShutDown` until the
/// controller, having moved every leadership away and taken this broker out of the ISRs, says
/// it may stop — while still serving, so in-flight produce requests complete and followers
/// catch up to the new leaders.
async fn controlled_shutdown(
    broker: &Broker,
    control: (usize, Connection<BoxStream>),
    broker_epoch: i64,
    applied: &tokio::sync::watch::Receiver<Option<i64>>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(CONTROLLED_SHUTDOWN_MAX_MS);
    let (mut index, mut control) = control;
    loop {
        let offset = *applied.borrow();
        let report = broker.storage_report();
        match lifecycle::heartbeat(
            &mut control,
            broker.node_id(),
            broker_epoch,
            offset,
            true,
            &report,
        )
        .await
        {
            Ok(state) if state.should_shut_down => {
                info!("controlled shutdown complete: the controller moved every leadership away");
                return;
            }
            Ok(_) => {}
            Err(e) => {
                // The active controller may have moved: try the next one until the deadline.
                broker.controller().demote(index);
                match connect_controller(broker).await {
                    Ok(next) if tokio::time::Instant::now() < deadline => {
                        warn!(error = %e, "controlled shutdown: heartbeat failed; trying the next controller");
                        (index, control) = next;
                    }
                    _ => {
                        warn!(error = %e, "controlled shutdown: heartbeat failed; stopping without it");
                        return;
                    }
                }
            }
        }
        if tokio::time::Instant::now() >= deadline {
            warn!("controlled shutdown did not complete in time; stopping anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(CONTROLLED_SHUTDOWN_POLL_MS)).await;
    }
}

/// Sends the leader core's AlterPartition proposals (v3, ISR with broker epochs) and feeds the
/// answers back; a failure answers every proposal of the batch with a retriable error.
async fn send_alter_partitions(
    broker: Arc<Broker>,
    mut jobs: tokio::sync::mpsc::UnboundedReceiver<AlterPartitionJob>,
    stop: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            job = jobs.recv() => match job {
                Some(job) => job,
                None => return,
            },
        };
        let mut batch = vec![first];
        while let Ok(job) = jobs.try_recv() {
            batch.push(job);
        }
        let mut topics: Vec<WireTopic> = Vec::new();
        for job in &batch {
            let partition = WirePartition::default()
                .with_partition_index(job.partition)
                .with_leader_epoch(job.proposal.leader_epoch.0)
                .with_partition_epoch(job.proposal.partition_epoch.0)
                .with_leader_recovery_state(0)
                .with_new_isr_with_epochs(
                    job.proposal
                        .new_isr
                        .iter()
                        .map(|m| {
                            WireIsrMember::default()
                                .with_broker_id(BrokerId(m.broker.0))
                                .with_broker_epoch(m.broker_epoch.map_or(-1, |e: BrokerEpoch| e.0))
                        })
                        .collect(),
                );
            match topics.iter_mut().find(|t| t.topic_id == job.topic_id) {
                Some(topic) => topic.partitions.push(partition),
                None => topics.push(
                    WireTopic::default()
                        .with_topic_id(job.topic_id)
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let request = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(broker.node_id()))
            .with_broker_epoch(broker.broker_epoch())
            .with_topics(topics);
        let answer: Result<WireAlterPartitionResponse, _> = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            // v3 (NewIsrWithEpochs, KIP-903): Keel's and Kafka 4's controllers serve it.
            answer = broker.controller().call(ApiKey::AlterPartition, 3, 3, &request) => answer,
        };
        for job in &batch {
            let response = match &answer {
                Err(e) => {
                    warn!(partition = %job.tp, error = %e, "AlterPartition not answered; will retry");
                    AlterPartitionResponse::Error(ErrorCode::RequestTimedOut)
                }
                Ok(r) if r.error_code != 0 => {
                    AlterPartitionResponse::Error(ErrorCode::from_code(r.error_code))
                }
                Ok(r) => r
                    .topics
                    .iter()
                    .filter(|t| t.topic_id == job.topic_id)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == job.partition)
                    .map_or(
                        AlterPartitionResponse::Error(ErrorCode::UnknownTopicOrPartition),
                        |p| {
                            if p.error_code != 0 {
                                AlterPartitionResponse::Error(ErrorCode::from_code(p.error_code))
                            } else {
                                AlterPartitionResponse::Committed {
                                    leader_epoch: keel_replication::LeaderEpoch(p.leader_epoch),
                                    partition_epoch: keel_replication::PartitionEpoch(
                                        p.partition_epoch,
                                    ),
                                    isr: p
                                        .isr
                                        .iter()
                                        .map(|b| keel_replication::BrokerId(b.0))
                                        .collect(),
                                }
                            }
                        },
                    ),
            };
            broker.on_alter_partition_answer(job, response);
        }
    }
}

async fn tick_leaders(broker: Arc<Broker>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(Duration::from_millis(REPLICA_TICK_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = ticker.tick() => broker.tick_leaders(),
        }
    }
}

fn spawn_background(
    broker: Arc<Broker>,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let flush_ms = broker
        .config
        .log_flush_scheduler_interval_ms
        .clamp(FLUSH_CHECK_INTERVAL_MS_MIN, FLUSH_CHECK_INTERVAL_MS_MAX);
    let retention_ms = broker.config.log_retention_check_interval_ms.max(1);
    let producer_expiry_ms = broker
        .config
        .producer_id_expiration_check_interval_ms
        .max(1);
    let checkpoint_ms = broker
        .config
        .replica_high_watermark_checkpoint_interval_ms
        .min(broker.config.log_flush_offset_checkpoint_interval_ms)
        .max(1);
    let mut tasks = vec![
        coordinator_timers(broker.clone(), stop.clone()),
        periodic(broker.clone(), stop.clone(), flush_ms, |b| {
            b.flush_due_logs()
        }),
        periodic(broker.clone(), stop.clone(), retention_ms, |b| {
            b.apply_retention()
        }),
        periodic(broker.clone(), stop.clone(), producer_expiry_ms, |b| {
            b.remove_expired_producers()
        }),
        periodic(broker.clone(), stop.clone(), checkpoint_ms, |b| {
            if let Err(e) = b.checkpoint() {
                warn!(error = %e, "checkpoint failed");
            }
        }),
    ];
    tasks.push(offsets_expiry(broker.clone(), stop.clone()));
    tasks.push(txn_coordinator_timers(broker.clone(), stop.clone()));
    let expire_ms = broker.config.transactions.remove_expired_interval_ms;
    let expiring = broker.clone();
    tasks.push(every(stop.clone(), expire_ms, move || {
        let broker = expiring.clone();
        async move { broker.expire_transactional_ids().await }
    }));
    if broker.config.log_scrub_enable {
        tasks.push(tokio::spawn(crate::broker::scrubber::run(
            broker.clone(),
            stop.clone(),
        )));
    }
    if broker.config.log_cleaner_enable {
        let backoff_ms = broker.config.log_cleaner_backoff_ms.max(1);
        tasks.push(periodic(broker, stop, backoff_ms, |b| b.compact_logs()));
    }
    tasks
}

/// How often the transaction coordinator loads the `__transaction_state` partitions it leads
/// and resumes prepared transactions whose markers are not all written.
const TXN_COORDINATOR_TICK_MS: u64 = 500;

/// The transaction coordinator's timers: every [`TXN_COORDINATOR_TICK_MS`], drive prepared
/// transactions to completion (after a failover, or a marker round that gave up); every
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`, abort those past their
/// timeout; and settle the transactions an unclean recovery left in doubt on partitions led
/// here (`broker::stranded`).
fn txn_coordinator_timers(
    broker: Arc<Broker>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(TXN_COORDINATOR_TICK_MS));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let abort_every_ms = broker.config.transactions.abort_timed_out_interval_ms;
        let mut since_abort_ms = 0u64;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = ticker.tick() => {
                    since_abort_ms += TXN_COORDINATOR_TICK_MS;
                    let abort = since_abort_ms >= abort_every_ms;
                    if abort {
                        since_abort_ms = 0;
                    }
                    let work = {
                        let broker = broker.clone();
                        run_blocking(move || broker.txn_coordinator_tick(abort)).await
                    };
                    for item in work.unwrap_or_default() {
                        let broker = broker.clone();
                        tokio::spawn(async move {
                            if item.timed_out {
                                broker.abort_timed_out(&item.scope, &item.id).await;
                            } else {
                                broker.complete_transaction(&item.scope, &item.id).await;
                            }
                        });
                    }
                    // Partitions holding transactions an unclean recovery stranded.
                    for partition in broker.stranded_rounds_due() {
                        let broker = broker.clone();
                        tokio::spawn(async move { broker.settle_stranded(partition).await });
                    }
                }
            }
        }
    })
}

/// `offsets.retention.minutes`, checked every `offsets.retention.check.interval.ms`.
fn offsets_expiry(broker: Arc<Broker>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    let period_ms = broker.config.offsets_retention_check_interval_ms;
    let retention_ms = i64::try_from(
        broker
            .config
            .offsets_retention_minutes
            .saturating_mul(60_000),
    )
    .unwrap_or(i64::MAX);
    every(stop, period_ms, move || {
        let broker = broker.clone();
        async move { broker.expire_group_offsets(retention_ms).await }
    })
}

/// How often the group coordinator's timers run (sessions, rebalance deadlines).
const COORDINATOR_TICK_MS: u64 = 100;

/// The group coordinator's timers: every [`COORDINATOR_TICK_MS`], expire sessions and end
/// rebalance phases, then write what the groups asked to write.
fn coordinator_timers(broker: Arc<Broker>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(COORDINATOR_TICK_MS));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = ticker.tick() => {
                    for (group, scope, persist) in broker.coordinator_tick() {
                        let broker = broker.clone();
                        tokio::spawn(async move {
                            broker.persist_group(&group, &scope, persist).await;
                        });
                    }
                    for (scope, tombstones) in broker.take_deleted_topic_offsets() {
                        let broker = broker.clone();
                        tokio::spawn(async move {
                            if let Err(e) = broker.write_group_records(&scope, tombstones).await {
                                warn!(partition = scope.index, error = ?e,
                                    "cannot delete the offsets of deleted topics");
                            }
                        });
                    }
                }
            }
        }
    })
}

/// Runs `work` every `period_ms` as blocking work (it does file IO, see
/// [`crate::blocking`]) until `stop`.
fn periodic(
    broker: Arc<Broker>,
    stop: CancellationToken,
    period_ms: u64,
    work: fn(&Broker),
) -> tokio::task::JoinHandle<()> {
    every(stop, period_ms, move || {
        let broker = broker.clone();
        async move {
            let _ = run_blocking(move || work(&broker)).await;
        }
    })
}

/// Runs `work` every `period_ms` (the first time one period after the start) until `stop`.
fn every<F, Fut>(
    stop: CancellationToken,
    period_ms: u64,
    mut work: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(Duration::from_millis(period_ms));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = ticker.tick() => work().await,
            }
        }
    })
}
