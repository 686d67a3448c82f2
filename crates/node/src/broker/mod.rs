//! The broker: its log directories, the partitions it hosts, and the metadata image it
//! follows.
//!
//! Everything about the cluster — topics, partitions, leaders, ISRs, epochs, configs — comes
//! from the replayed metadata log (a `ClusterImage`, [`Broker::apply_image`]); the broker never
//! decides any of it. A partition this broker is a replica of is hosted with a log and a role
//! (leader or follower, `crate::partition::Replica`) that follows the image.
//!
//! | file | what lives there |
//! |---|---|
//! | `mod.rs` | [`Broker`], open (directories, clean-shutdown detection), topic views, maintenance |
//! | `hosting.rs` | loading logs once metadata is known, applying each new image (roles, deletes, configs) |
//! | `replication.rs` | leader commands, follower fetches served as leader, fetch answers applied as follower, ticks |
//! | `delete_records.rs` | DeleteRecords on the leader: Kafka's checks, the log start offset moved, the wait for the low watermark |
//! | `log_start.rs` | the log start offset checkpoint written before a DeleteRecords is answered (coalesced) |
//!
//! Locks are held briefly and never across an `.await`.

mod cleaner;

pub use cleaner::KafkaCodecs;
mod delete_records;
mod hosting;
mod log_start;
mod peers;
mod producer_ids;
mod replication;
pub mod scrubber;
mod storage_faults;
mod stranded;
pub use stranded::STRANDED_MAX;

pub use storage_faults::OfflineLogDir;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_controller::types::{BrokerId as CBrokerId, TopicId};
use keel_controller::ClusterImage;
use keel_log::storage::Storage;
use keel_log::{LogDir, PartitionCheckpoint, TopicPartition};
use keel_replication::{AlterPartitionProposal, RequestId};
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};
use uuid::Uuid;

pub use delete_records::PendingDelete;
pub use log_start::LogStartChange;
pub use replication::{
    AppendError, FollowerFetchAnswer, FollowerFetchInput, FollowerFetchPlan, LeaderWrite,
};

use crate::clock::Clock;
use crate::cluster::controller_channel::ControllerChannel;
use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::metrics::{BrokerMetrics, RequestMetrics};
use crate::net::Network;
use crate::partition::Partition;
use crate::security::{Peer, SecureNetwork, SecurityProtocol};
use crate::topic_config::{self, EffectiveTopicConfig};
use keel_wire::ResponseError;

/// A broker's stored credentials: those of its applied metadata image (Kafka's
/// `ScramPublisher` feeds the broker's credential cache from each new image).
#[derive(Debug)]
struct BrokerCredentials(std::sync::Weak<Broker>);

impl crate::security::sasl::Credentials for BrokerCredentials {
    fn scram(&self, user: &str, mechanism: &str) -> Option<crate::security::sasl::ScramCredential> {
        let broker = self.0.upgrade()?;
        let image = broker.image();
        crate::security::sasl::image_scram(&image, user, mechanism)
    }
}

/// Longest legal topic name (Kafka's limit).
pub const TOPIC_NAME_MAX_LEN: usize = 249;

/// Whether the previous run ended with an orderly shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviousShutdown {
    /// Every log directory had the clean-shutdown file, all with this broker epoch.
    Clean {
        broker_epoch: i64,
    },
    Unclean,
}

/// An AlterPartition the leader core asked for, on its way to the controller.
#[derive(Debug, Clone)]
pub struct AlterPartitionJob {
    pub topic_id: Uuid,
    pub partition: i32,
    pub tp: TopicPartition,
    pub proposal: AlterPartitionProposal,
}

/// Where clients reach a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// One partition as metadata describes it (for Metadata responses and routing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub index: i32,
    pub leader: Option<i32>,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub elr: Vec<i32>,
    pub last_known_elr: Vec<i32>,
    /// Replicas on brokers that are not registered or are fenced.
    pub offline: Vec<i32>,
}

/// One topic as metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub name: String,
    pub id: Uuid,
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionView>,
}

/// Mutable broker state, behind one lock.
#[derive(Debug, Default)]
struct State {
    image: Arc<ClusterImage>,
    partitions: BTreeMap<TopicPartition, Arc<Partition>>,
    /// False until the logs were loaded (after the first caught-up image).
    logs_loaded: bool,
    /// Logs recovered before the registration, for the first image to claim.
    preloaded: Option<hosting::PreloadedLogs>,
    /// Partitions the first image assigned here that no online log directory held while
    /// another was offline: never created this run (the offline one may hold them).
    unplaced: std::collections::BTreeSet<TopicPartition>,
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    /// How the previous run ended, as detected at open.
    pub previous_shutdown: PreviousShutdown,
    pub clock: Arc<dyn Clock>,
    storage: Arc<dyn Storage>,
    log_dirs: Vec<LogDir>,
    /// This run's broker epoch, from the controller's answer to the registration (-1 before).
    broker_epoch: AtomicI64,
    state: Mutex<State>,
    /// Bumped whenever a log grows or a high watermark moves, so long-polling fetches wake up.
    data_changed: watch::Sender<u64>,
    /// Bumped whenever a new image was applied (fetchers pick up role changes).
    image_changed: watch::Sender<u64>,
    next_request_id: AtomicU64,
    alter_partition: mpsc::UnboundedSender<AlterPartitionJob>,
    network: Arc<dyn Network>,
    /// Connections to other brokers' inter-broker listener (TLS when it speaks it).
    inter_broker_network: Arc<SecureNetwork>,
    /// Connections to the controllers' listener.
    controller_network: Arc<SecureNetwork>,
    controller: ControllerChannel,
    /// The consumer groups this broker coordinates.
    pub coordinator: crate::coordinator::GroupCoordinator,
    /// The transaction coordinator's loaded state (`crate::txn_coordinator`).
    pub txn_coordinator: crate::txn_coordinator::TxnCoordinator,
    /// Cached connections to the other brokers for the coordinator's calls.
    peers: peers::PeerClients,
    /// The block of producer ids InitProducerId hands out from.
    producer_ids: tokio::sync::Mutex<producer_ids::ProducerIdPool>,
    /// This broker's series in `config.metrics` (bytes and records, ISR changes, partition
    /// gauges).
    pub metrics: BrokerMetrics,
    /// The broker listener's request latency.
    pub request_metrics: RequestMetrics,
    /// Log directories taken offline (issue 19).
    offline_dirs: Mutex<storage_faults::OfflineDirs>,
    /// Woken when a storage fault wants a heartbeat sent at once.
    storage_reports: tokio::sync::Notify,
    /// Directory failures found under a broker lock, run once it is released.
    deferred_dir_failures: Mutex<Vec<(usize, String)>>,
    /// Set when loading the logs truncated one (a torn tail or damage set aside).
    recovery_lost_data: std::sync::atomic::AtomicBool,
    /// The rate limit of "request refused" lines (issue 20).
    pub refusals: crate::handlers::refusals::RefusalLog,
    /// Log start offset checkpoints written on demand, coalesced (issue 20).
    log_starts: log_start::LogStartCheckpoints,
    /// The authorizer (`authorizer.class.name`), deciding from this broker's image.
    authorizer: Option<crate::security::authorizer::Authorizer>,
    /// Client quota usage (`producer_byte_rate`, `consumer_byte_rate`).
    quota_usage: crate::quotas::QuotaUsage,
}

/// The registered listener named `name` (Kafka compares listener names upper-cased); for
/// registrations that name one listener only (written before brokers registered them all),
/// that one.
fn endpoint_of<'a>(
    listeners: &'a [keel_controller::records::Listener],
    name: &str,
) -> Option<&'a keel_controller::records::Listener> {
    listeners
        .iter()
        .find(|l| l.name.eq_ignore_ascii_case(name))
        .or(match listeners {
            [only] => Some(only),
            _ => None,
        })
}

impl Broker {
    /// Opens the log directories (which must have been formatted for this node) and reads
    /// their clean-shutdown files — KIP-966 "Detection of an unclean shutdown": the shutdown
    /// was clean only if every directory has the file, all with the same broker epoch. The
    /// logs themselves are loaded once metadata is known ([`Broker::apply_image`]). AlterPartition
    /// proposals of the partitions it leads come out of the returned receiver.
    pub fn open(
        config: BrokerConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        network: Arc<dyn Network>,
        controller_voters: Vec<String>,
    ) -> anyhow::Result<(Broker, mpsc::UnboundedReceiver<AlterPartitionJob>)> {
        let mut log_dirs = Vec::new();
        let mut offline = storage_faults::OfflineDirs::default();
        let mut cluster_id: Option<String> = None;
        for path in &config.log_dirs {
            match LogDir::open(storage.clone(), path, cluster_id.as_deref(), config.node_id) {
                Ok(dir) => {
                    cluster_id.get_or_insert_with(|| dir.meta().cluster_id.clone());
                    log_dirs.push(dir);
                }
                // A directory the disk fails to read is offline (Kafka starts with the
                // others); one that is not this node's, or not formatted, stops the start.
                Err(e @ keel_log::LogError::Io { .. }) => {
                    error!(dir = %path.display(), error = %e, "log directory failed at start: offline");
                    offline.at_start.push(OfflineLogDir {
                        path: path.clone(),
                        id: None,
                        reason: e.to_string(),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        let Some(cluster_id) = cluster_id else {
            anyhow::bail!(
                "every log directory failed at start: {:?}",
                offline.at_start
            );
        };
        let mut epochs = Vec::new();
        for (index, dir) in log_dirs.iter().enumerate() {
            match dir.read_and_remove_clean_shutdown() {
                Ok(epoch) => epochs.push(epoch),
                Err(e) if e.is_fatal() => {
                    error!(dir = %dir.path().display(), error = %e, "log directory failed at start: offline");
                    offline.by_index.insert(
                        index,
                        OfflineLogDir {
                            path: dir.path().to_path_buf(),
                            id: Some(dir.meta().directory_id),
                            reason: e.to_string(),
                        },
                    );
                    epochs.push(None);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !offline.at_start.is_empty() {
            // Its clean-shutdown file could not be read: the shutdown counts as unclean.
            epochs.push(None);
        }
        if offline.by_index.len() == log_dirs.len() {
            anyhow::bail!("every log directory failed at start");
        }
        let previous_shutdown = match epochs.first().copied().flatten() {
            Some(epoch) if epochs.iter().all(|e| *e == Some(epoch)) => PreviousShutdown::Clean {
                broker_epoch: epoch,
            },
            _ => {
                if epochs.iter().any(Option::is_some) {
                    warn!(
                        ?epochs,
                        "clean shutdown files disagree between log directories: treating the last shutdown as unclean"
                    );
                }
                PreviousShutdown::Unclean
            }
        };
        match previous_shutdown {
            PreviousShutdown::Clean { broker_epoch } => info!(
                broker_epoch,
                "clean shutdown file found (broker epoch {broker_epoch}): skipping log recovery"
            ),
            PreviousShutdown::Unclean => {
                info!("no clean shutdown file: logs will be recovered from their recovery points")
            }
        }
        for (index, dir) in log_dirs.iter().enumerate() {
            if !offline.by_index.contains_key(&index) {
                hosting::remove_deleted_dirs(dir)?;
            }
        }
        let (data_changed, _) = watch::channel(0);
        let (image_changed, _) = watch::channel(0);
        let (alter_partition, jobs) = mpsc::unbounded_channel();
        // Outgoing connections speak the security protocol of the listener they reach: the
        // controllers' listener, other brokers' inter-broker listener. The in-memory listener of
        // an in-process controller is never on a network.
        let controller_protocol = match controller_voters
            .iter()
            .all(|v| v == crate::runtime::IN_PROCESS_CONTROLLER)
        {
            true => SecurityProtocol::Plaintext,
            false => config.protocol_of(config.controller_listener_name()),
        };
        let controller_network = Arc::new(SecureNetwork::new(
            network.clone(),
            &config.raw,
            config.controller_listener_name(),
            controller_protocol,
            Peer::Controller,
        )?);
        let inter_broker_network = Arc::new(SecureNetwork::new(
            network.clone(),
            &config.raw,
            &config.inter_broker_listener_name,
            config.protocol_of(&config.inter_broker_listener_name),
            Peer::Broker,
        )?);
        let controller = ControllerChannel::new(
            controller_network.clone(),
            controller_voters,
            format!("keel-broker-{}", config.node_id),
        );
        let group_settings = crate::coordinator::group::GroupSettings {
            initial_rebalance_delay_ms: i64::try_from(config.group_initial_rebalance_delay_ms)
                .unwrap_or(i64::MAX),
            min_session_timeout_ms: config.group_min_session_timeout_ms,
            max_session_timeout_ms: config.group_max_session_timeout_ms,
            max_size: usize::try_from(config.group_max_size).unwrap_or(0),
        };
        let metrics = config.metrics.broker(config.node_id);
        let request_metrics = config.metrics.requests(config.node_id, "broker");
        let log_dirs_count = log_dirs.len();
        let quota_usage = crate::quotas::QuotaUsage::new(config.quota_windows);
        let authorizer = config.authorizer.clone().map(|c| {
            crate::security::authorizer::Authorizer::new(c, Some(request_metrics.clone()))
        });
        Ok((
            Broker {
                config,
                cluster_id,
                previous_shutdown,
                clock,
                storage,
                log_dirs,
                broker_epoch: AtomicI64::new(-1),
                state: Mutex::new(State::default()),
                data_changed,
                image_changed,
                next_request_id: AtomicU64::new(1),
                alter_partition,
                network,
                inter_broker_network,
                controller_network,
                controller,
                producer_ids: tokio::sync::Mutex::default(),
                coordinator: crate::coordinator::GroupCoordinator::new(group_settings),
                txn_coordinator: crate::txn_coordinator::TxnCoordinator::default(),
                peers: peers::PeerClients::default(),
                metrics,
                request_metrics,
                offline_dirs: Mutex::new(offline),
                storage_reports: tokio::sync::Notify::new(),
                deferred_dir_failures: Mutex::default(),
                recovery_lost_data: std::sync::atomic::AtomicBool::new(false),
                refusals: Default::default(),
                authorizer,
                quota_usage,
                log_starts: log_start::LogStartCheckpoints::new(log_dirs_count),
            },
            jobs,
        ))
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("broker state lock poisoned")
    }

    /// The channel to the controller (AlterPartition, forwarded admin requests).
    pub fn controller(&self) -> &ControllerChannel {
        &self.controller
    }

    /// The controllers' addresses (`host:port`).
    pub fn controller_voters(&self) -> &[String] {
        self.controller.voters()
    }

    /// The network underneath: listeners bind on it.
    pub fn network(&self) -> &Arc<dyn Network> {
        &self.network
    }

    /// Connections to other brokers' inter-broker listener (replica fetchers).
    pub fn inter_broker_network(&self) -> &Arc<SecureNetwork> {
        &self.inter_broker_network
    }

    /// Connections to the controllers' listener.
    pub fn controller_network(&self) -> &Arc<SecureNetwork> {
        &self.controller_network
    }

    /// What this broker's SASL listeners authenticate with: the SCRAM credentials of the
    /// metadata image it applied last, and its clock.
    pub fn sasl_context(self: &Arc<Self>) -> crate::security::sasl::ExchangeContext {
        crate::security::sasl::ExchangeContext {
            credentials: Arc::new(BrokerCredentials(Arc::downgrade(self))),
            clock: self.clock.clone(),
        }
    }

    /// The node id.
    pub fn node_id(&self) -> i32 {
        self.config.node_id
    }

    /// The `directory.id` of every online log directory (what the registration names: a
    /// directory missing from it is lost to the controller, KIP-858).
    pub fn log_dir_ids(&self) -> Vec<Uuid> {
        self.log_dirs
            .iter()
            .enumerate()
            .filter(|(index, _)| self.log_dir_online(*index))
            .map(|(_, d)| d.meta().directory_id)
            .collect()
    }

    /// This run's broker epoch (-1 before registration).
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Acquire)
    }

    /// Records the broker epoch the controller assigned.
    pub fn set_broker_epoch(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Release);
    }

    /// A fresh id for an acks=all request.
    pub fn next_request_id(&self) -> RequestId {
        RequestId(self.next_request_id.fetch_add(1, Ordering::Relaxed))
    }

    /// A receiver that changes whenever a log grows or a high watermark moves.
    pub fn subscribe_data_changes(&self) -> watch::Receiver<u64> {
        self.data_changed.subscribe()
    }

    /// Wakes long-polling fetches.
    pub fn notify_data_changed(&self) {
        self.data_changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that changes whenever a new metadata image was applied.
    pub fn subscribe_image_changes(&self) -> watch::Receiver<u64> {
        self.image_changed.subscribe()
    }

    /// Waits until the applied image satisfies `done` (true), or `timeout_ms` passes (false).
    /// Forwarded admin requests use it so a client that created a topic finds it in this
    /// broker's metadata right after.
    pub async fn await_image(&self, timeout_ms: u64, done: impl Fn(&ClusterImage) -> bool) -> bool {
        let mut changes = self.subscribe_image_changes();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
        loop {
            changes.borrow_and_update();
            if done(&self.image()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(&self.image()),
            }
        }
    }

    /// Whether every hosted partition has a leader in the applied image.
    pub fn all_hosted_partitions_led(&self) -> bool {
        let state = self.lock_state();
        let image = &state.image;
        state.partitions.values().all(|p| {
            let Ok(index) = u32::try_from(p.tp.partition) else {
                return true;
            };
            image
                .partition(keel_controller::types::TopicPartition::new(
                    TopicId(p.topic_id),
                    index,
                ))
                .is_none_or(|s| s.leader.is_some())
        })
    }

    /// The metadata image applied last.
    /// The authorizer, when `authorizer.class.name` is set (without one every request is
    /// allowed, as Kafka).
    pub fn authorizer(&self) -> Option<&crate::security::authorizer::Authorizer> {
        self.authorizer.as_ref()
    }

    /// Records `bytes` against the client quota of `kind` that applies to `principal` with
    /// `client_id` (from this broker's image); the throttle time in ms (0: none).
    pub fn record_quota(
        &self,
        principal: &crate::security::KafkaPrincipal,
        client_id: &str,
        kind: crate::quotas::QuotaKind,
        bytes: f64,
    ) -> u64 {
        let image = self.image();
        if image.client_quotas().is_empty() {
            return 0;
        }
        let now = u64::try_from(self.clock.now_ms()).unwrap_or(0);
        self.quota_usage.record(
            image.client_quotas(),
            kind,
            &principal.name,
            client_id,
            bytes,
            now,
        )
    }

    /// How long a connection just accepted from `peer` on `listener` is held unanswered before
    /// it is closed, by its ip's `connection_creation_rate` (KIP-612); 0: served. Brokers
    /// connecting on the inter-broker listener are never limited.
    pub fn connection_throttle_ms(&self, peer: &str, listener: &str) -> u64 {
        if listener.eq_ignore_ascii_case(&self.config.inter_broker_listener_name) {
            return 0;
        }
        let image = self.image();
        if image.client_quotas().is_empty() {
            return 0;
        }
        let Ok(addr) = peer.parse::<std::net::SocketAddr>() else {
            return 0;
        };
        let now = u64::try_from(self.clock.now_ms()).unwrap_or(0);
        self.quota_usage
            .record_connection(image.client_quotas(), addr.ip(), now)
    }

    /// Takes back what [`Broker::record_quota`] recorded for a response that was not sent.
    pub fn unrecord_quota(
        &self,
        principal: &crate::security::KafkaPrincipal,
        client_id: &str,
        kind: crate::quotas::QuotaKind,
        bytes: f64,
    ) {
        let image = self.image();
        let now = u64::try_from(self.clock.now_ms()).unwrap_or(0);
        self.quota_usage.unrecord(
            image.client_quotas(),
            kind,
            &principal.name,
            client_id,
            bytes,
            now,
        );
    }

    pub fn image(&self) -> Arc<ClusterImage> {
        self.lock_state().image.clone()
    }

    /// The hosted partition, if any.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let state = self.lock_state();
        state
            .partitions
            .get(&TopicPartition::new(topic.to_string(), index))
            .cloned()
    }

    /// All hosted partitions (for background work).
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.lock_state().partitions.values().cloned().collect()
    }

    /// One topic, by name.
    pub fn topic(&self, name: &str) -> Option<TopicView> {
        let image = self.image();
        let id = image.topic_id(name)?;
        Some(topic_view(&image, id))
    }

    /// A topic's name, by id: what the hot paths (Fetch v13+, Produce v13+) need, without
    /// building the whole [`TopicView`].
    pub fn topic_name(&self, id: Uuid) -> Option<String> {
        self.image().topic(TopicId(id)).map(|t| t.name.clone())
    }

    /// One topic, by id.
    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicView> {
        let image = self.image();
        image.topic(TopicId(id))?;
        Some(topic_view(&image, TopicId(id)))
    }

    /// Every topic, sorted by name.
    pub fn topics(&self) -> Vec<TopicView> {
        let image = self.image();
        let mut topics: Vec<TopicView> = image
            .topics()
            .keys()
            .map(|id| topic_view(&image, *id))
            .collect();
        topics.sort_by(|a, b| a.name.cmp(&b.name));
        topics
    }

    /// The effective config of a topic: its overrides, then the cluster's dynamic defaults,
    /// then this broker's static defaults, then Kafka's.
    pub fn topic_config(&self, topic: &TopicView) -> EffectiveTopicConfig {
        effective_config(&self.image(), &topic.configs, &self.config)
    }

    /// The brokers clients of listener `listener` may use: registered and not fenced, and
    /// always this broker (at its advertised listener if the image does not have it yet), by
    /// id; each at its endpoint of that listener — a broker without such a listener is left out
    /// (Kafka's Metadata answers each listener with its own endpoints).
    pub fn serving_brokers_on(&self, listener: &str) -> Vec<BrokerEndpoint> {
        let image = self.image();
        let mut list: Vec<BrokerEndpoint> = image
            .brokers()
            .values()
            .filter(|b| {
                b.state != keel_controller::image::BrokerState::Fenced || b.id.0 == self.node_id()
            })
            .filter_map(|b| {
                let endpoint = endpoint_of(&b.listeners, listener)?;
                Some(BrokerEndpoint {
                    id: b.id.0,
                    host: endpoint.host.clone(),
                    port: endpoint.port,
                    rack: b.rack.clone(),
                })
            })
            .collect();
        if !list.iter().any(|b| b.id == self.node_id()) {
            if let Some(own) = self.config.advertised_listener(listener) {
                list.push(BrokerEndpoint {
                    id: self.node_id(),
                    host: own.host.clone(),
                    port: own.port,
                    rack: None,
                });
                list.sort_by_key(|b| b.id);
            }
        }
        list
    }

    /// Every registered broker's id, fenced or not, ascending (and this broker's).
    pub fn registered_broker_ids(&self) -> Vec<i32> {
        let mut ids: Vec<i32> = self.image().brokers().keys().map(|id| id.0).collect();
        if !ids.contains(&self.node_id()) {
            ids.push(self.node_id());
        }
        ids.sort_unstable();
        ids
    }

    /// The brokers DescribeCluster lists on listener `listener`: [`Broker::serving_brokers_on`],
    /// and with `include_fenced` every other registered broker with that listener too; each with
    /// whether the image has it fenced (KIP-1073).
    pub fn described_brokers(
        &self,
        listener: &str,
        include_fenced: bool,
    ) -> Vec<(BrokerEndpoint, bool)> {
        let image = self.image();
        let fenced = |id: i32| {
            image
                .broker(CBrokerId(id))
                .is_some_and(|b| b.state == keel_controller::image::BrokerState::Fenced)
        };
        let mut list: Vec<(BrokerEndpoint, bool)> = self
            .serving_brokers_on(listener)
            .into_iter()
            .map(|b| {
                let is_fenced = fenced(b.id);
                (b, is_fenced)
            })
            .collect();
        if include_fenced {
            for b in image.brokers().values() {
                if list.iter().any(|(listed, _)| listed.id == b.id.0) {
                    continue;
                }
                let Some(endpoint) = endpoint_of(&b.listeners, listener) else {
                    continue;
                };
                list.push((
                    BrokerEndpoint {
                        id: b.id.0,
                        host: endpoint.host.clone(),
                        port: endpoint.port,
                        rack: b.rack.clone(),
                    },
                    b.state == keel_controller::image::BrokerState::Fenced,
                ));
            }
            list.sort_by_key(|(b, _)| b.id);
        }
        list
    }

    /// A live broker's advertised `(host, port)` on listener `listener`.
    pub fn broker_endpoint_on(&self, id: i32, listener: &str) -> Option<(String, u16)> {
        let image = self.image();
        let registration = image.broker(CBrokerId(id))?;
        let endpoint = endpoint_of(&registration.listeners, listener)?;
        Some((endpoint.host.clone(), endpoint.port))
    }

    /// Flushes logs whose `flush.ms` is due, and the segments each log rolled since its
    /// recovery point (as Kafka does after a roll): fsynced without the log's lock, then the
    /// recovery point moves to the active segment, so recovery after an unclean shutdown
    /// scans only that segment, not every segment written since the broker started.
    pub fn flush_due_logs(&self) {
        let now_ms = self.clock.now_ms();
        for partition in self.all_partitions() {
            let rolled = {
                let Ok(mut log) = partition.lock_log() else {
                    continue;
                };
                let flushed = log.flush_if_due(now_ms);
                let rolled = log.plan_rolled_flush();
                drop(log);
                if let Err(e) = flushed {
                    // An fsync that failed is never retried as if the data were safe: the
                    // directory goes offline and the next start recovers it.
                    if !self.check_storage_error(&partition, &e) {
                        warn!(partition = %partition.tp, error = %e, "flush failed");
                    }
                    continue;
                }
                rolled
            };
            let Some(rolled) = rolled else { continue };
            if let Err(e) = rolled.run(self.storage.as_ref()) {
                let error =
                    keel_log::LogError::io("fsync rolled segments", partition.tp.dir_name())(e);
                self.check_storage_error(&partition, &error);
                continue;
            }
            if let Ok(mut log) = partition.lock_log() {
                log.finish_rolled_flush(rolled);
            }
        }
    }

    /// Deletes segments past `retention.ms` / `retention.bytes` (never above the high
    /// watermark).
    pub fn apply_retention(&self) {
        let now_ms = self.clock.now_ms();
        for partition in self.all_partitions() {
            let high_watermark = partition.high_watermark();
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            match log.apply_retention(now_ms, high_watermark) {
                Ok(result) if !result.deleted.is_empty() => {
                    drop(log);
                    info!(
                        partition = %partition.tp,
                        segments = result.deleted.len(),
                        log_start_offset = %result.log_start_offset,
                        "retention deleted segments"
                    );
                    self.leader_log_start_moved(&partition, result.log_start_offset);
                }
                Ok(_) => {}
                Err(e) => {
                    drop(log);
                    if !self.check_storage_error(&partition, &e) {
                        warn!(partition = %partition.tp, error = %e, "retention failed");
                    }
                }
            }
        }
    }

    /// Tells the leader core of `partition` (if this broker leads it) that retention moved its
    /// log start offset: the low watermark a DeleteRecords waits for may have risen.
    fn leader_log_start_moved(
        &self,
        partition: &Arc<Partition>,
        log_start_offset: keel_log::Offset,
    ) {
        let commands = match partition.lock_replica().as_leader() {
            Some(leader) if !leader.has_ended() => {
                match leader.on_log_start_offset(keel_replication::Offset(log_start_offset.0)) {
                    Ok(commands) => commands,
                    Err(e) => {
                        warn!(partition = %partition.tp, error = %e, "replication state out of step");
                        return;
                    }
                }
            }
            _ => return,
        };
        self.execute(partition, commands);
    }

    /// Forgets idempotent producers idle for `producer.id.expiration.ms` in every partition.
    pub fn remove_expired_producers(&self) {
        let now_ms = self.clock.now_ms();
        let expiration_ms =
            i64::try_from(self.config.producer_id_expiration_ms).unwrap_or(i64::MAX);
        for partition in self.all_partitions() {
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            let removed = log.remove_expired_producers(now_ms, expiration_ms);
            if removed > 0 {
                info!(partition = %partition.tp, removed, "expired idle producer ids");
            }
        }
    }

    /// Writes the recovery-point, high-watermark and log-start-offset checkpoints of every
    /// log directory (each under its directory's checkpoint lock, `log_start.rs`).
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        if !self.lock_state().logs_loaded {
            // Before the logs are loaded the checkpoints still describe them: keep them.
            return Ok(());
        }
        let partitions = self.all_partitions();
        for (index, dir) in self.log_dirs.iter().enumerate() {
            if !self.log_dir_online(index) {
                continue;
            }
            let written = self.checkpoint_dir(index, || {
                let mut entries = Vec::new();
                for p in partitions.iter().filter(|p| p.log_dir_index == index) {
                    let Ok(log) = p.lock_log() else {
                        continue;
                    };
                    entries.push(PartitionCheckpoint::of(
                        p.tp.clone(),
                        &log,
                        Some(p.high_watermark()),
                    ));
                }
                dir.checkpoint(&entries)
            });
            if let Err(e) = written {
                if e.is_fatal() {
                    self.fail_log_dir(index, &e.to_string());
                    continue;
                }
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Orderly shutdown: flush every log, write checkpoints, then — last — the clean-shutdown
    /// file with this run's broker epoch in every log directory. Without a broker epoch (never
    /// registered) or before the logs were loaded, no clean-shutdown file is written: the next
    /// start recovers, which is always safe.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        let partitions = self.all_partitions();
        let now_ms = self.clock.now_ms();
        for p in &partitions {
            p.fail_all_waiters(keel_replication::ErrorCode::NotLeaderOrFollower);
            let closed = match p.lock_log() {
                Ok(mut log) => log.close(now_ms),
                Err(_) => Ok(()),
            };
            if let Err(e) = closed {
                if !self.check_storage_error(p, &e) {
                    return Err(e.into());
                }
            }
        }
        self.checkpoint()?;
        let broker_epoch = self.broker_epoch();
        if broker_epoch < 0 || !self.lock_state().logs_loaded {
            info!("shut down before registering: no clean shutdown file written");
            return Ok(());
        }
        // Not in an offline directory: the next start finds the files disagree and recovers
        // (an unclean registration), as it must after a storage failure.
        for (index, dir) in self.log_dirs.iter().enumerate() {
            if self.log_dir_online(index) {
                if let Err(e) = dir.write_clean_shutdown(broker_epoch) {
                    warn!(dir = %dir.path().display(), error = %e, "cannot write the clean shutdown file");
                }
            }
        }
        let offline = self.offline_log_dirs();
        if !offline.is_empty() {
            warn!(
                offline = offline.len(),
                "shut down with offline log directories: the next start recovers every log"
            );
        }
        info!(
            broker_epoch,
            partitions = partitions.len(),
            "clean shutdown complete"
        );
        Ok(())
    }

    /// The storage the broker runs on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The first log directory (where a single-node cluster keeps its metadata log).
    pub fn first_log_dir(&self) -> PathBuf {
        self.log_dirs[0].path().to_path_buf()
    }
}

/// Kafka's topic-name rules: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |reason: String| Err(ApiError::new(ResponseError::InvalidTopicException, reason));
    if name.is_empty() {
        return invalid("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return invalid("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > TOPIC_NAME_MAX_LEN {
        return invalid(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LEN} characters, topic name: {name}"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return invalid(format!(
            "Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Validates and normalizes a topic's config overrides as Kafka's `LogConfig.validate` does:
/// every name known (`INVALID_CONFIG` "Unknown topic config name"), then every value, then the
/// values together with the defaults they resolve against (`image`'s cluster-wide ones and the
/// broker's).
pub fn validate_topic_configs(
    configs: &BTreeMap<String, String>,
    image: &ClusterImage,
    broker: &BrokerConfig,
) -> Result<BTreeMap<String, String>, ApiError> {
    let invalid = |message: String| ApiError::new(ResponseError::InvalidConfig, message);
    if let Some(name) = configs.keys().find(|name| {
        topic_config::definition(name).is_none() && *name != topic_config::TEST_LOSE_UNFLUSHED_KEY
    }) {
        return Err(invalid(topic_config::unknown_name(name)));
    }
    let normalized = configs
        .iter()
        .map(|(name, value)| {
            topic_config::validate(name, value)
                .map(|v| (name.clone(), v))
                .map_err(invalid)
        })
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    topic_config::validate_combination(&effective_config(image, &normalized, broker))
        .map_err(invalid)?;
    Ok(normalized)
}

/// The effective topic config from the topic's overrides, the image's cluster-wide dynamic
/// defaults and the broker's static defaults.
pub fn effective_config(
    image: &ClusterImage,
    topic_configs: &BTreeMap<String, String>,
    config: &BrokerConfig,
) -> EffectiveTopicConfig {
    EffectiveTopicConfig::resolve(
        topic_configs,
        &topic_config::cluster_defaults(image.cluster_configs()),
        &config.topic_defaults,
    )
}

fn topic_view(image: &ClusterImage, id: TopicId) -> TopicView {
    let topic = image.topic(id).expect("caller checked the topic exists");
    let ids = |set: &std::collections::BTreeSet<CBrokerId>| -> Vec<i32> {
        set.iter().map(|b| b.0).collect()
    };
    let partitions = topic
        .partitions
        .iter()
        .map(|(index, p)| PartitionView {
            index: i32::try_from(*index).unwrap_or(i32::MAX),
            leader: p.leader.map(|b| b.0),
            leader_epoch: p.leader_epoch.0,
            replicas: p.replicas.iter().map(|b| b.0).collect(),
            isr: ids(&p.isr),
            elr: ids(&p.elr),
            last_known_elr: ids(&p.last_known_elr),
            offline: p
                .replicas
                .iter()
                .filter(|b| {
                    image
                        .broker(**b)
                        .is_none_or(|r| r.state == keel_controller::image::BrokerState::Fenced)
                })
                .map(|b| b.0)
                .collect(),
        })
        .collect();
    TopicView {
        name: topic.name.clone(),
        id: id.0,
        configs: topic.configs.clone(),
        partitions,
    }
}
