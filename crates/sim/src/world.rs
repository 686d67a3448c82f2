//! The simulated world: a controller, brokers and a client host, each running the real node
//! code on its own single-threaded Tokio runtime with paused time, stepped in lockstep.
//!
//! A step advances world time by one tick: the network delivers what is due, then every
//! running host's runtime runs until its own clock has advanced by the tick (timers fire in
//! order; an idle runtime jumps straight to its next timer). Nothing runs on another thread
//! and nothing reads the real clock, so a run is a function of the seed. A killed host is a
//! dropped runtime (every task stops at once, as with `kill -9`); a paused host is one the
//! world stops stepping (memory kept; on resume its clock jumps and overdue timers fire).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_log::storage::{MemStorage, Storage};
use keel_log::LogDir;
use keel_node::broker::Broker;
use keel_node::clock::Clock;
use keel_node::config::BrokerConfig;
use keel_node::controller_server::{self, ControllerServerConfig, MetadataDir};
use keel_node::net::Network;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use keel_node::controller_server::state::QuorumView;

use crate::disk::{DiskFault, DiskFaults};
use crate::net::{Latency, NetCore, Severance, SimNetwork};
use crate::trace::Trace;

/// The first controller's node id (brokers are 1..=N; further controllers are 101, 102, ...).
pub const CONTROLLER_ID: i32 = 0;
/// The controller host's name in a world with one controller (with more: `controller-<i>`).
pub const CONTROLLER_HOST: &str = "controller";
/// The client host's name.
pub const CLIENT_HOST: &str = "client";
/// The controller listener's port.
pub const CONTROLLER_PORT: u16 = 9093;
/// The broker listener's port.
const BROKER_PORT: u16 = 9092;
/// Wall-clock time at the start of every run (2026-01-01T00:00:00Z), in milliseconds.
const EPOCH_MS: i64 = 1_767_225_600_000;
/// Raft entries between metadata snapshots in a simulated quorum (a scenario's `config` may
/// override it).
const SIM_SNAPSHOT_INTERVAL_ENTRIES: u64 = 4;
/// The metadata log directory of the controller host.
const METADATA_DIR: &str = "/metadata";

/// Which replication rules the cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// KIP-966: ELR, strict HWM rule, unclean shutdown detection, unclean recovery.
    Keel,
    /// Kafka's classic rules (`eligible.leader.replicas.enable=false`).
    Classic,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Keel => "keel",
            Mode::Classic => "classic",
        }
    }
}

/// What a world is built from.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    pub seed: u64,
    pub brokers: u32,
    pub mode: Mode,
    /// Cluster-wide configs (Kafka names), given to the controller and every broker.
    pub configs: Vec<(String, String)>,
    /// World time per step.
    pub tick: Duration,
    pub latency: Latency,
    /// How long each fsync (of a file or a directory) blocks the host.
    pub fsync_latency: Duration,
    /// Controllers in the Raft quorum (1, 3 or 5).
    pub controllers: u32,
    /// Log directories per broker (`log.dirs`), each its own directory of the host's disk.
    pub log_dirs: u32,
}

impl WorldConfig {
    pub fn new(seed: u64, brokers: u32, mode: Mode) -> WorldConfig {
        WorldConfig {
            seed,
            brokers,
            mode,
            configs: Vec::new(),
            tick: Duration::from_millis(1),
            latency: Latency::default(),
            fsync_latency: Duration::from_millis(1),
            controllers: 1,
            log_dirs: 1,
        }
    }

    /// The host name of controller `index`.
    pub fn controller_host(&self, index: u32) -> String {
        if self.controllers <= 1 {
            CONTROLLER_HOST.to_string()
        } else {
            format!("{CONTROLLER_HOST}-{index}")
        }
    }

    /// Every controller's host name, in index order.
    pub fn controller_hosts(&self) -> Vec<String> {
        (0..self.controllers.max(1))
            .map(|i| self.controller_host(i))
            .collect()
    }

    /// `controller.quorum.voters` of this world.
    fn voters(&self) -> String {
        (0..self.controllers.max(1))
            .map(|i| {
                format!(
                    "{}@{}:{CONTROLLER_PORT}",
                    controller_id(i),
                    self.controller_host(i)
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The node id of controller `index`: 0 for the first (as with one controller), 100 + index
/// for the others (clear of the broker ids 1..=9).
pub fn controller_id(index: u32) -> i32 {
    if index == 0 {
        CONTROLLER_ID
    } else {
        100 + i32::try_from(index).unwrap_or(0)
    }
}

/// A host: a machine (disk, network view, clock) and the process on it, if running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostKind {
    /// Controller `index` (see [`controller_id`]).
    Controller(u32),
    Broker(i32),
    Client,
}

/// Whether a host's process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    Down,
    Running,
    /// Stopped at world time `since_us` (SIGSTOP or a long GC pause).
    Paused {
        since_us: u64,
    },
}

/// Wall-clock time and random ids of one host, both from the world.
#[derive(Debug)]
pub struct SimClock {
    net: Arc<NetCore>,
    rng: Mutex<StdRng>,
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        EPOCH_MS + i64::try_from(self.net.now_us() / 1_000).unwrap_or(i64::MAX)
    }

    fn new_uuid(&self) -> Uuid {
        let bits: u128 = self.rng.lock().unwrap_or_else(|e| e.into_inner()).gen();
        uuid::Builder::from_random_bytes(bits.to_le_bytes()).into_uuid()
    }
}

/// One host of the world.
pub struct Host {
    pub name: String,
    pub kind: HostKind,
    pub storage: Arc<MemStorage>,
    /// The faults of the host's disk (they outlive process restarts; see `disk.rs`).
    pub faults: Arc<DiskFaults>,
    /// Disks replaced so far (`wipe`).
    wipes: u32,
    pub net: SimNetwork,
    pub life: Life,
    /// Process starts so far.
    pub incarnation: u32,
    runtime: Option<Runtime>,
    stop: CancellationToken,
    task: Option<JoinHandle<anyhow::Result<()>>>,
    /// The running broker, for observers (set when it opens).
    pub broker: Arc<Mutex<Option<Arc<Broker>>>>,
    pub ready: Arc<AtomicBool>,
    /// How the last process run ended, once it ended by itself.
    pub exit: Option<String>,
    /// A controller's view of the quorum (set when it starts serving).
    pub view: Arc<Mutex<Option<tokio::sync::watch::Receiver<QuorumView>>>>,
    /// fsync latency owed by the process (see `disk.rs`); turned into blocked time.
    io_debt_us: Arc<std::sync::atomic::AtomicU64>,
    /// The process is blocked in fsync until this world time.
    blocked_until_us: u64,
    /// World time the process's clock has reached.
    synced_us: u64,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.name)
            .field("life", &self.life)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// The running broker, if this host runs one.
    pub fn running_broker(&self) -> Option<Arc<Broker>> {
        if self.life == Life::Down {
            return None;
        }
        self.broker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits for `future` on this host's runtime, driving it (and only it).
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime
            .as_ref()
            .expect("the host is running")
            .block_on(future)
    }

    /// Runs `future` on this host's runtime (the host must be up).
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime
            .as_ref()
            .expect("the host is running")
            .spawn(future)
    }
}

/// The whole simulated cluster.
pub struct World {
    pub config: WorldConfig,
    pub net: Arc<NetCore>,
    pub hosts: BTreeMap<String, Host>,
    pub rng: StdRng,
    pub cluster_id: String,
    now_us: u64,
    step: u64,
    pub trace: Trace,
    /// The controller's metadata as an observer on the client host last fetched it (it sees
    /// the metadata even while every broker is down).
    pub observed: Arc<Mutex<Option<Arc<keel_controller::image::ClusterImage>>>>,
    /// The controller host a scenario step named `controller` last resolved to.
    pub last_controller: Option<String>,
    /// The active controller (host, epoch) last written to the trace.
    traced_active: Option<(String, i32)>,
    /// Print every delivery (`KEEL_SIM_DELIVERIES` set): to find where two runs diverge.
    debug_deliveries: bool,
}

impl World {
    /// A formatted cluster (controller, brokers 1..=N, a client host), not yet started.
    pub fn new(config: WorldConfig, trace: Trace) -> anyhow::Result<World> {
        let net = NetCore::new(config.seed ^ 0x6e65_7477_6f72_6b00, config.latency);
        let mut rng = StdRng::seed_from_u64(config.seed);
        let cluster_id = format!("sim-{:016x}", rng.gen::<u64>());
        let mut world = World {
            config,
            net,
            hosts: BTreeMap::new(),
            rng,
            cluster_id,
            now_us: 0,
            step: 0,
            trace,
            observed: Arc::new(Mutex::new(None)),
            last_controller: None,
            traced_active: None,
            debug_deliveries: std::env::var_os("KEEL_SIM_DELIVERIES").is_some(),
        };
        for index in 0..world.config.controllers.max(1) {
            let name = world.config.controller_host(index);
            world.add_host(name, HostKind::Controller(index))?;
        }
        for id in 1..=i32::try_from(world.config.brokers)? {
            world.add_host(broker_host(id), HostKind::Broker(id))?;
        }
        world.add_host(CLIENT_HOST.to_string(), HostKind::Client)?;
        Ok(world)
    }

    fn add_host(&mut self, name: String, kind: HostKind) -> anyhow::Result<()> {
        let storage = Arc::new(MemStorage::new());
        let faults = Arc::new(DiskFaults::new(&name, self.disk_seed(&name, 0)));
        let net = self.net.view(&name);
        let host = Host {
            name: name.clone(),
            kind,
            storage,
            faults,
            wipes: 0,
            net,
            life: Life::Down,
            incarnation: 0,
            runtime: None,
            stop: CancellationToken::new(),
            task: None,
            broker: Arc::new(Mutex::new(None)),
            ready: Arc::new(AtomicBool::new(false)),
            exit: None,
            view: Arc::new(Mutex::new(None)),
            io_debt_us: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            blocked_until_us: 0,
            synced_us: 0,
        };
        self.hosts.insert(name.clone(), host);
        self.format(&name)
    }

    /// Formats the host's disk (a fresh directory id each time).
    fn format(&mut self, name: &str) -> anyhow::Result<()> {
        let dir_id = self.random_uuid();
        let cluster_id = self.cluster_id.clone();
        let host = self.host(name)?;
        let storage: Arc<dyn Storage> = host.storage.clone();
        let kind = host.kind;
        match kind {
            HostKind::Controller(index) => {
                LogDir::format(
                    storage,
                    Path::new(METADATA_DIR),
                    &cluster_id,
                    controller_id(index),
                    dir_id,
                )?;
            }
            HostKind::Broker(id) => {
                let dirs = broker_dirs(id, self.config.log_dirs);
                let mut ids = vec![dir_id];
                ids.extend((1..dirs.len()).map(|_| self.random_uuid()));
                for (dir, dir_id) in dirs.iter().zip(ids) {
                    LogDir::format(storage.clone(), dir, &cluster_id, id, dir_id)?;
                }
            }
            HostKind::Client => {}
        }
        Ok(())
    }

    /// The seed of a host's disk faults: from the run's seed, the host's name and how many
    /// disks it had before (no draw from the world's generator, so runs without disk faults
    /// draw what they drew before).
    fn disk_seed(&self, name: &str, wipes: u32) -> u64 {
        self.config.seed
            ^ 0x6469_736b_0000_0000
            ^ (u64::from(wipes) << 48)
            ^ name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)))
    }

    pub fn random_uuid(&mut self) -> Uuid {
        uuid::Builder::from_random_bytes(self.rng.gen::<u128>().to_le_bytes()).into_uuid()
    }

    pub fn host(&self, name: &str) -> anyhow::Result<&Host> {
        self.hosts
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("no host {name}"))
    }

    fn host_mut(&mut self, name: &str) -> anyhow::Result<&mut Host> {
        self.hosts
            .get_mut(name)
            .ok_or_else(|| anyhow::anyhow!("no host {name}"))
    }

    /// World time.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now_us)
    }

    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The broker ids.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.hosts
            .values()
            .filter_map(|h| match h.kind {
                HostKind::Broker(id) => Some(id),
                _ => None,
            })
            .collect()
    }

    /// The running brokers (paused ones included: their memory is intact).
    pub fn brokers(&self) -> Vec<(i32, Arc<Broker>)> {
        self.hosts
            .values()
            .filter_map(|h| match h.kind {
                HostKind::Broker(id) => h.running_broker().map(|b| (id, b)),
                _ => None,
            })
            .collect()
    }

    fn broker_config(&self, id: i32) -> anyhow::Result<BrokerConfig> {
        let mut props = BTreeMap::new();
        props.insert("node.id".into(), id.to_string());
        props.insert("process.roles".into(), "broker".into());
        let dirs: Vec<String> = broker_dirs(id, self.config.log_dirs)
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        props.insert("log.dirs".into(), dirs.join(","));
        props.insert(
            "listeners".into(),
            format!("PLAINTEXT://{}:{BROKER_PORT}", broker_host(id)),
        );
        props.insert("controller.quorum.voters".into(), self.config.voters());
        props.insert("controller.listener.names".into(), "CONTROLLER".into());
        props.insert("default.replication.factor".into(), "3".into());
        // Simulated records carry simulated timestamps: keep retention out of the way.
        props.insert("log.retention.check.interval.ms".into(), "86400000".into());
        for (k, v) in &self.config.configs {
            props.insert(k.clone(), v.clone());
        }
        Ok(BrokerConfig::from_properties(&props)?)
    }

    fn controller_config(&self, index: u32) -> anyhow::Result<ControllerServerConfig> {
        let mut props = BTreeMap::new();
        props.insert("node.id".into(), controller_id(index).to_string());
        props.insert("process.roles".into(), "controller".into());
        props.insert(
            "listeners".into(),
            format!(
                "CONTROLLER://{}:{CONTROLLER_PORT}",
                self.config.controller_host(index)
            ),
        );
        props.insert("controller.quorum.voters".into(), self.config.voters());
        props.insert("controller.listener.names".into(), "CONTROLLER".into());
        props.insert("metadata.log.dir".into(), METADATA_DIR.into());
        // Snapshots, purges and snapshot installs happen within a run, not after 2,000 entries.
        props.insert(
            "keel.metadata.snapshot.interval.entries".into(),
            SIM_SNAPSHOT_INTERVAL_ENTRIES.to_string(),
        );
        props.insert("default.replication.factor".into(), "3".into());
        for (k, v) in &self.config.configs {
            props.insert(k.clone(), v.clone());
        }
        if self.config.mode == Mode::Classic {
            props.insert("eligible.leader.replicas.enable".into(), "false".into());
        }
        Ok(ControllerServerConfig::from_properties(&props)?)
    }

    /// Each running (not paused) controller's view of the quorum: (host, view).
    pub fn quorum_views(&self) -> Vec<(String, QuorumView)> {
        self.config
            .controller_hosts()
            .into_iter()
            .filter_map(|name| {
                let host = self.hosts.get(&name)?;
                if host.life != Life::Running {
                    return None;
                }
                let view = *host
                    .view
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()?
                    .borrow();
                Some((name, view))
            })
            .collect()
    }

    /// The controller acting now: among the running controllers that say they are active, the
    /// one in the highest epoch. `None` between an active controller's loss and the next.
    pub fn active_controller(&self) -> Option<String> {
        self.quorum_views()
            .into_iter()
            .filter(|(_, v)| v.active)
            .max_by_key(|(_, v)| v.epoch)
            .map(|(name, _)| name)
    }

    /// Starts the process on a host that is down.
    pub fn start(&mut self, name: &str) -> anyhow::Result<()> {
        let host = self.host(name)?;
        if host.life != Life::Down {
            anyhow::bail!("{name} is already running");
        }
        let kind = host.kind;
        let seed = self.config.seed
            ^ (u64::from(host.incarnation) << 32)
            ^ name
                .bytes()
                .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let clock: Arc<dyn Clock> = Arc::new(SimClock {
            net: self.net.clone(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        });
        let broker_config = match kind {
            HostKind::Broker(id) => Some(self.broker_config(id)?),
            _ => None,
        };
        let controller_config = match kind {
            HostKind::Controller(index) => Some(self.controller_config(index)?),
            _ => None,
        };
        self.net.host_up(name);
        let now_us = self.now_us;
        let fsync_us = self.config.fsync_latency.as_micros() as u64;
        // Tokio's own random choices (the wakeup order of watch channels, for one) come from
        // the runtime's seed: seeded from the world, they repeat with it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
            .build()?;
        let host = self.host_mut(name)?;
        let stop = CancellationToken::new();
        host.stop = stop.clone();
        host.incarnation += 1;
        host.exit = None;
        host.ready.store(false, Ordering::SeqCst);
        *host.broker.lock().unwrap_or_else(|e| e.into_inner()) = None;
        host.io_debt_us.store(0, Ordering::SeqCst);
        host.blocked_until_us = 0;
        host.synced_us = now_us;
        let storage: Arc<dyn Storage> = Arc::new(crate::disk::SlowDisk::new(
            host.storage.clone(),
            fsync_us,
            host.io_debt_us.clone(),
            host.faults.clone(),
        ));
        let network = host.net.clone();
        let task: Option<JoinHandle<anyhow::Result<()>>> = match kind {
            HostKind::Broker(_) => {
                let config = broker_config.expect("broker config built above");
                let slot = host.broker.clone();
                let ready = host.ready.clone();
                let network: Arc<dyn Network> = Arc::new(network);
                Some(runtime.spawn(tracing::Instrument::instrument(
                    keel_node::runtime::run_observed(
                        config,
                        storage,
                        clock,
                        network,
                        stop,
                        move |broker: &Arc<Broker>| {
                            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(broker.clone());
                        },
                        move |_ready: &keel_node::runtime::Ready| {
                            ready.store(true, Ordering::SeqCst);
                        },
                    ),
                    tracing::info_span!("node", host = %name),
                )))
            }
            HostKind::Controller(_) => {
                let config = controller_config.expect("controller config built above");
                let listener = network.bind(&format!("{name}:{CONTROLLER_PORT}"));
                let endpoint = config.listener.clone();
                let ready = host.ready.clone();
                let view_slot = host.view.clone();
                *view_slot.lock().unwrap_or_else(|e| e.into_inner()) = None;
                let network: Arc<dyn Network> = Arc::new(network);
                let span = tracing::info_span!("node", host = %name);
                Some(runtime.spawn(tracing::Instrument::instrument(
                    async move {
                        controller_server::serve_observed(
                            config,
                            MetadataDir::Own,
                            storage,
                            clock,
                            network,
                            listener,
                            endpoint,
                            stop,
                            move |view| {
                                *view_slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(view);
                            },
                            move || ready.store(true, Ordering::SeqCst),
                        )
                        .await
                        .map_err(anyhow::Error::new)
                    },
                    span,
                )))
            }
            HostKind::Client => None,
        };
        host.runtime = Some(runtime);
        host.task = task;
        host.life = Life::Running;
        let incarnation = host.incarnation;
        self.trace.event(
            self.now_us,
            format!("start {name} (incarnation {incarnation})"),
        );
        Ok(())
    }

    /// Starts every host.
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        let names: Vec<String> = self.hosts.keys().cloned().collect();
        // The controllers first, then the brokers, then the client.
        let controllers = self.config.controller_hosts();
        let mut order = controllers.clone();
        order.extend(
            names
                .iter()
                .filter(|n| !controllers.contains(n) && *n != CLIENT_HOST)
                .cloned(),
        );
        order.push(CLIENT_HOST.to_string());
        for name in order {
            self.start(&name)?;
        }
        Ok(())
    }

    /// Kills the process (dropping its runtime stops every task at once). With `power_loss`
    /// the machine also loses every write not yet fsynced (with `torn`, files keep a random
    /// prefix of their unsynced tails).
    pub fn crash(&mut self, name: &str, power_loss: bool, torn: bool) -> anyhow::Result<()> {
        let torn_seed = self.rng.gen::<u64>();
        let now = self.now_us;
        let host = self.host_mut(name)?;
        if host.life == Life::Down {
            anyhow::bail!("{name} is not running");
        }
        *host.broker.lock().unwrap_or_else(|e| e.into_inner()) = None;
        host.ready.store(false, Ordering::SeqCst);
        host.task = None;
        host.life = Life::Down;
        let runtime = host.runtime.take();
        let storage = host.storage.clone();
        let faults = host.faults.clone();
        self.net.host_down(
            name,
            if power_loss {
                Severance::BlackHole
            } else {
                Severance::Reset
            },
        );
        drop(runtime);
        if power_loss {
            faults.power_loss(&storage);
            if torn {
                storage.crash_with_torn_tails(torn_seed);
            } else {
                storage.crash();
            }
        }
        let how = match (power_loss, torn) {
            (false, _) => "killed",
            (true, false) => "power loss",
            (true, true) => "power loss, torn writes",
        };
        self.trace.event(now, format!("crash {name} ({how})"));
        self.trace_disk_events();
        Ok(())
    }

    /// Asks the process to stop cleanly (controlled shutdown, flush, clean-shutdown file);
    /// step until [`World::task_finished`], then [`World::finish_stop`].
    pub fn request_stop(&mut self, name: &str) -> anyhow::Result<()> {
        let host = self.host(name)?;
        if host.life == Life::Down {
            anyhow::bail!("{name} is not running");
        }
        if matches!(host.life, Life::Paused { .. }) {
            anyhow::bail!("{name} is paused");
        }
        host.stop.cancel();
        self.trace.event(self.now_us, format!("shutdown {name}"));
        Ok(())
    }

    /// Whether the host's process has ended.
    pub fn task_finished(&self, name: &str) -> bool {
        self.hosts
            .get(name)
            .is_some_and(|h| h.task.as_ref().is_none_or(|t| t.is_finished()))
    }

    /// Takes down a host whose process ended after [`World::request_stop`].
    pub fn finish_stop(&mut self, name: &str) -> anyhow::Result<()> {
        let host = self.host_mut(name)?;
        let task = host.task.take();
        let runtime = host.runtime.take();
        let mut outcome = None;
        if let (Some(task), Some(rt)) = (task, runtime.as_ref()) {
            outcome = Some(rt.block_on(task));
        }
        *host.broker.lock().unwrap_or_else(|e| e.into_inner()) = None;
        host.ready.store(false, Ordering::SeqCst);
        host.life = Life::Down;
        self.net.host_down(name, Severance::Reset);
        drop(runtime);
        let exit = match &outcome {
            Some(Ok(Err(e))) => format!("stopped with an error: {e:#}"),
            Some(Err(e)) => format!("task failed: {e}"),
            _ => "stopped cleanly".to_string(),
        };
        self.trace.event(self.now_us, format!("{name} {exit}"));
        match &outcome {
            Some(Ok(Err(_))) | Some(Err(_)) => anyhow::bail!("{name} {exit}"),
            _ => Ok(()),
        }
    }

    /// Gives a stopped broker an empty, freshly formatted disk (a replaced drive).
    pub fn wipe(&mut self, name: &str) -> anyhow::Result<()> {
        let host = self.host_mut(name)?;
        if host.life != Life::Down {
            anyhow::bail!("{name} must be stopped before its disk is replaced");
        }
        host.storage = Arc::new(MemStorage::new());
        host.wipes += 1;
        let wipes = host.wipes;
        let seed = self.disk_seed(name, wipes);
        self.host_mut(name)?.faults = Arc::new(DiskFaults::new(name, seed));
        self.format(name)?;
        self.trace.event(self.now_us, format!("wipe {name}"));
        Ok(())
    }

    pub fn pause(&mut self, name: &str) -> anyhow::Result<()> {
        let now = self.now_us;
        let host = self.host_mut(name)?;
        if host.life != Life::Running {
            anyhow::bail!("{name} is not running");
        }
        host.life = Life::Paused { since_us: now };
        self.trace.event(now, format!("pause {name}"));
        Ok(())
    }

    pub fn resume(&mut self, name: &str) -> anyhow::Result<()> {
        let now = self.now_us;
        let host = self.host_mut(name)?;
        let Life::Paused { since_us } = host.life else {
            anyhow::bail!("{name} is not paused");
        };
        host.life = Life::Running;
        // Its clock catches up at its next step: overdue timers fire at once.
        let paused = Duration::from_micros(now - since_us);
        self.trace
            .event(now, format!("resume {name} after {}ms", paused.as_millis()));
        Ok(())
    }

    /// One step: deliver due bytes, then run every running host for one tick.
    pub fn step(&mut self) -> anyhow::Result<()> {
        self.step += 1;
        self.now_us += self.config.tick.as_micros() as u64;
        self.net.set_now_us(self.now_us);
        let moved = self.net.deliver();
        if moved > 0 {
            // Every delivery shapes what follows: it is part of the run's fingerprint.
            self.trace.mix(&self.now_us.to_le_bytes());
            self.trace.mix(&moved.to_le_bytes());
            if self.debug_deliveries {
                eprintln!("step {} t={}us delivered {moved}", self.step, self.now_us);
            }
        }
        let tick = self.config.tick;
        let tick_us = tick.as_micros() as u64;
        let now_us = self.now_us;
        let World { hosts, trace, .. } = self;
        for host in hosts.values_mut() {
            if host.life != Life::Running || host.blocked_until_us > now_us {
                continue;
            }
            let Some(rt) = host.runtime.as_ref() else {
                continue;
            };
            // A process that was paused or blocked in fsync: its clock jumps to now.
            let lag = now_us
                .saturating_sub(tick_us)
                .saturating_sub(host.synced_us);
            if lag > 0 {
                let lag = Duration::from_micros(lag);
                rt.block_on(async move { tokio::time::advance(lag).await });
            }
            rt.block_on(async move { tokio::time::sleep(tick).await });
            host.synced_us = now_us;
            let debt = host.io_debt_us.swap(0, Ordering::SeqCst);
            if debt > 0 {
                host.blocked_until_us = now_us + debt;
            }
            if host.exit.is_none() && host.task.as_ref().is_some_and(|t| t.is_finished()) {
                let task = host.task.take().expect("checked above");
                let outcome = match rt.block_on(task) {
                    Ok(Ok(())) => "stopped".to_string(),
                    Ok(Err(e)) => format!("stopped with an error: {e:#}"),
                    Err(e) => format!("task failed: {e}"),
                };
                trace.event(now_us, format!("{} exited: {outcome}", host.name));
                host.exit = Some(outcome);
            }
        }
        self.trace_disk_events();
        let active = self.active_controller().map(|host| {
            let epoch = self
                .quorum_views()
                .into_iter()
                .find(|(h, _)| *h == host)
                .map_or(-1, |(_, v)| v.epoch);
            (host, epoch)
        });
        if active != self.traced_active {
            let text = match &active {
                Some((host, epoch)) => format!("active controller: {host} (epoch {epoch})"),
                None => "no active controller".to_string(),
            };
            self.trace.event(self.now_us, text);
            self.traced_active = active;
        }
        Ok(())
    }
}

/// Which segment file of a partition a `corrupt` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentChoice {
    /// The `n`th oldest (0: the first).
    Index(usize),
    /// The newest (the active segment).
    Last,
}

/// The storage side of the world: the brokers' log directories, bit rot, the disks' faults.
impl World {
    /// Notes in the trace what the disks' faults did since the last call.
    pub fn trace_disk_events(&mut self) {
        let now = self.now_us;
        let World { hosts, trace, .. } = self;
        for host in hosts.values() {
            for event in host.faults.take_events() {
                trace.event(now, event);
            }
        }
    }

    /// The log directories (`log.dirs`) of broker `id`.
    pub fn broker_log_dirs(&self, id: i32) -> Vec<PathBuf> {
        broker_dirs(id, self.config.log_dirs)
    }

    /// The directory of a broker's replica of `topic`-`partition`, in whichever of its log
    /// directories holds it (`None` if none does).
    pub fn partition_dir(&self, id: i32, topic: &str, partition: i32) -> Option<PathBuf> {
        let storage = self.host(&broker_host(id)).ok()?.storage.clone();
        self.broker_log_dirs(id)
            .into_iter()
            .map(|dir| dir.join(format!("{topic}-{partition}")))
            .find(|dir| storage.exists(dir).unwrap_or(false))
    }

    /// The segment (`.log`) files of a partition directory, oldest first, with their sizes.
    pub fn segment_files(&self, id: i32, dir: &Path) -> Vec<(PathBuf, u64)> {
        let Ok(host) = self.host(&broker_host(id)) else {
            return Vec::new();
        };
        let Ok(entries) = host.storage.list_dir(dir) else {
            return Vec::new();
        };
        entries
            .into_iter()
            .filter(|e| !e.is_dir && e.name.ends_with(".log"))
            .filter_map(|e| {
                let path = dir.join(&e.name);
                let size = host
                    .storage
                    .open_file(&path, keel_log::storage::OpenMode::Existing)
                    .and_then(|f| f.size())
                    .ok()?;
                Some((path, size))
            })
            .collect()
    }

    /// The live partition directories of broker `id` (not set aside: no `-quarantine`,
    /// `-delete` or `-stray` suffix), in every log directory.
    pub fn partition_dirs(&self, id: i32) -> Vec<PathBuf> {
        let Ok(host) = self.host(&broker_host(id)) else {
            return Vec::new();
        };
        let mut dirs = Vec::new();
        for log_dir in self.broker_log_dirs(id) {
            let Ok(entries) = host.storage.list_dir(&log_dir) else {
                continue;
            };
            for entry in entries.into_iter().filter(|e| e.is_dir) {
                let set_aside = ["-quarantine", "-delete", "-stray"]
                    .iter()
                    .any(|suffix| entry.name.ends_with(suffix));
                if !set_aside && entry.name.rsplit_once('-').is_some() {
                    dirs.push(log_dir.join(&entry.name));
                }
            }
        }
        dirs
    }

    /// Bit rot: flips every bit of `len` bytes of segment `segment` of broker `id`'s replica
    /// of `topic`-`partition`, from byte `at` (default: the middle of the file), durable or not.
    pub fn corrupt(
        &mut self,
        id: i32,
        topic: &str,
        partition: i32,
        segment: SegmentChoice,
        at: Option<u64>,
        len: u64,
    ) -> anyhow::Result<()> {
        let dir = self.partition_dir(id, topic, partition).ok_or_else(|| {
            anyhow::anyhow!("broker {id} has no directory for {topic}-{partition}")
        })?;
        let files = self.segment_files(id, &dir);
        let chosen = match segment {
            SegmentChoice::Index(n) => files.get(n),
            SegmentChoice::Last => files.last(),
        };
        let Some((path, size)) = chosen.cloned() else {
            anyhow::bail!(
                "{topic}-{partition} on broker {id} has {} segment(s), no segment {segment:?}",
                files.len()
            );
        };
        let start = at.unwrap_or(size.saturating_sub(len) / 2);
        if start + len > size {
            anyhow::bail!(
                "{} has {size} bytes: bytes {start}..{} are not all in it",
                path.display(),
                start + len
            );
        }
        self.flip(id, &path, start, len)
    }

    /// Flips every bit of bytes `start..start + len` of a file of broker `id`'s disk.
    pub fn flip(&mut self, id: i32, path: &Path, start: u64, len: u64) -> anyhow::Result<()> {
        let host = self.host(&broker_host(id))?;
        for pos in start..start + len {
            host.storage.corrupt_byte(path, pos)?;
        }
        let event = format!(
            "{} disk: bit rot: {len} bytes flipped in {} from byte {start}",
            host.name,
            path.display()
        );
        self.trace.event(self.now_us, event);
        Ok(())
    }

    /// Adds a fault to broker `id`'s disk, for log directory `dir` (index in `log.dirs`) or,
    /// with `None`, for all of them.
    pub fn disk_fault(
        &mut self,
        id: i32,
        dir: Option<usize>,
        fault: DiskFault,
    ) -> anyhow::Result<()> {
        let dirs = self.broker_log_dirs(id);
        let scopes: Vec<PathBuf> = match dir {
            None => dirs,
            Some(i) => vec![dirs.get(i).cloned().ok_or_else(|| {
                anyhow::anyhow!("broker {id} has {} log directories, no dir={i}", dirs.len())
            })?],
        };
        let host = self.host(&broker_host(id))?;
        for scope in &scopes {
            host.faults.add(scope, fault);
        }
        self.trace_disk_events();
        Ok(())
    }

    /// Ends every fault of broker `id`'s disk.
    pub fn heal_disk(&mut self, id: i32) -> anyhow::Result<()> {
        self.host(&broker_host(id))?.faults.heal();
        self.trace_disk_events();
        Ok(())
    }

    /// Bytes set aside in quarantine directories for `topic`-`partition` on broker `id`'s disk
    /// (from their `quarantine.json`; readable while the broker is down).
    pub fn quarantined_bytes(&self, id: i32, topic: &str, partition: i32) -> u64 {
        let Ok(host) = self.host(&broker_host(id)) else {
            return 0;
        };
        let prefix = format!("{topic}-{partition}.");
        let mut bytes = 0;
        for log_dir in self.broker_log_dirs(id) {
            let Ok(entries) = host.storage.list_dir(&log_dir) else {
                continue;
            };
            for entry in entries {
                if entry.is_dir
                    && entry.name.starts_with(&prefix)
                    && entry.name.ends_with(keel_log::QUARANTINE_SUFFIX)
                {
                    let path = log_dir.join(&entry.name);
                    if let Some(q) = keel_log::Quarantine::read(host.storage.as_ref(), &path) {
                        bytes += q.bytes;
                    }
                }
            }
        }
        bytes
    }
}

/// Follows the controller's metadata log from the client host, as a broker would, and
/// publishes each image to `slot`; reconnects whenever the controller is unreachable.
pub async fn observe_metadata(
    net: SimNetwork,
    controllers: Vec<String>,
    slot: Arc<Mutex<Option<Arc<keel_controller::image::ClusterImage>>>>,
) {
    use keel_node::cluster::follower::MetadataFollower;
    let mut next = 0usize;
    loop {
        // Any controller serves the committed log; move on to the next after a failure.
        let addr = format!(
            "{}:{CONTROLLER_PORT}",
            controllers[next % controllers.len()]
        );
        next += 1;
        let connected =
            keel_node::client::Connection::connect(&net, &addr, "keel-sim-observer").await;
        let Ok(mut connection) = connected else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        // A fresh follower per connection: a restarted controller may have a different log.
        let mut follower = MetadataFollower::new();
        loop {
            let fetched = tokio::time::timeout(
                Duration::from_secs(5),
                follower.fetch_once(&mut connection, -1),
            )
            .await;
            match fetched {
                Ok(Ok(0)) => {}
                Ok(Ok(_)) => {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(follower.snapshot());
                }
                _ => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A broker's host name.
pub fn broker_host(id: i32) -> String {
    format!("b{id}")
}

/// The log directories of broker `id` (`log.dirs`): `/data/b<id>`, then `/data/b<id>-1`, ...
pub fn broker_dirs(id: i32, count: u32) -> Vec<PathBuf> {
    (0..count.max(1))
        .map(|i| match i {
            0 => PathBuf::from(format!("/data/b{id}")),
            _ => PathBuf::from(format!("/data/b{id}-{i}")),
        })
        .collect()
}
