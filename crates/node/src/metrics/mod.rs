//! Prometheus metrics: one explicit registry ([`Metrics`]) that every node of a process reports
//! into, each series labelled with its `node_id`, served as Prometheus text (version 0.0.4) on
//! `GET /metrics` ([`http`]).
//!
//! Every metric family is registered once, when the registry is made, so a scrape lists each
//! family once with one series per node (several nodes share a registry in `keel dev`, tests and
//! the simulator). Nodes take handles onto their own series: [`Metrics::broker`],
//! [`Metrics::controller`], [`Metrics::requests`]. A node that restarts in the same process gets
//! the same series back (its counters go on counting).
//!
//! | file | what lives there |
//! |---|---|
//! | `mod.rs` | [`Metrics`], the broker's counters and gauges, request latency |
//! | `controller.rs` | the active controller's gauges (a snapshot the controller task publishes, read on scrape), its election counters |
//! | `http.rs` | the `/metrics` endpoint and its config (`metrics.port`, `metrics.host`) |
//! | `names.rs` | API names for the request latency label |
//!
//! Who may call what: the broker ([`crate::broker`], its handlers) counts bytes, records and ISR
//! changes; [`crate::connection`] times requests; the controller task publishes snapshots. The
//! list of metrics, their Kafka equivalents and what to alert on: `docs/operations.md`.

mod controller;
pub mod http;
mod names;
mod storage;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use controller::{ControllerMetrics, ControllerSnapshot, ElectableReplicas};
pub use http::MetricsEndpoint;
pub use names::api_name;
pub use storage::{StorageMetrics, DAMAGE_SOURCES};

/// The prefix of every metric name.
pub const PREFIX: &str = "keel";

/// Upper bounds (seconds) of the request latency histogram's buckets: 0.5 ms to 30 s (a
/// consumer Fetch long-polls up to its `max_wait_ms`; Produce with acks=all waits for the ISR).
pub const REQUEST_LATENCY_BUCKETS_SECONDS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// A series' node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node_id: i32,
}

/// A request latency series: node, listener (`broker` or `controller`) and API.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    node_id: i32,
    listener: &'static str,
    api: &'static str,
}

/// A series of one listener (`broker` or `controller`) of a node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    node_id: i32,
    listener: &'static str,
}

/// A failed-authentication series: node, the listener's configured name, and the mechanism
/// (`TLS` for a failed handshake, else the SASL mechanism).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuthenticationLabels {
    node_id: i32,
    listener: String,
    mechanism: String,
}

/// A consumer-group gauge series: node and group state (Kafka's state names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupStateLabels {
    node_id: i32,
    state: &'static str,
}

type NodeCounters = Family<NodeLabels, Counter>;
type NodeGauges = Family<NodeLabels, Gauge>;
type NodeSecondCounters = Family<NodeLabels, Counter<f64, AtomicU64>>;
type GroupGauges = Family<GroupStateLabels, Gauge>;

/// The group states a coordinator reports (`Dead` groups are gone from it).
pub const GROUP_STATES: [&str; 4] = [
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
];
type LatencyFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(REQUEST_LATENCY_BUCKETS_SECONDS)
}

/// The families behind [`BrokerMetrics`].
#[derive(Debug, Default)]
struct BrokerFamilies {
    bytes_in: NodeCounters,
    bytes_out: NodeCounters,
    records_in: NodeCounters,
    records_out: NodeCounters,
    replication_bytes_in: NodeCounters,
    replication_bytes_out: NodeCounters,
    isr_shrinks: NodeCounters,
    isr_expands: NodeCounters,
    under_replicated: NodeGauges,
    under_min_isr: NodeGauges,
    leaders: NodeGauges,
    partitions: NodeGauges,
    groups: GroupGauges,
    group_offsets: NodeGauges,
    transactions_in_doubt: NodeGauges,
    offset_commits: NodeCounters,
    offsets_expired: NodeCounters,
    cleaner_passes: NodeCounters,
    cleaner_aborted: NodeCounters,
    cleaner_failures: NodeCounters,
    cleaner_bytes_read: NodeCounters,
    cleaner_bytes_written: NodeCounters,
    cleaner_records_removed: NodeCounters,
    cleaner_seconds: NodeSecondCounters,
}

impl BrokerFamilies {
    fn register(&self, registry: &mut Registry) {
        let counters: [(&str, &str, &NodeCounters); 16] = [
            (
                "bytes_in",
                "Bytes of record batches appended by Produce requests (Kafka: BytesInPerSec)",
                &self.bytes_in,
            ),
            (
                "bytes_out",
                "Bytes of record batches sent to consumers in Fetch responses (Kafka: \
                 BytesOutPerSec)",
                &self.bytes_out,
            ),
            (
                "records_in",
                "Records appended by Produce requests (Kafka: MessagesInPerSec)",
                &self.records_in,
            ),
            (
                "records_out",
                "Records sent to consumers in Fetch responses",
                &self.records_out,
            ),
            (
                "replication_bytes_in",
                "Bytes of record batches appended as a follower (Kafka: \
                 ReplicationBytesInPerSec)",
                &self.replication_bytes_in,
            ),
            (
                "replication_bytes_out",
                "Bytes of record batches sent to follower replicas (Kafka: \
                 ReplicationBytesOutPerSec)",
                &self.replication_bytes_out,
            ),
            (
                "isr_shrinks",
                "Committed ISR changes of partitions led here that removed a replica, by this \
                 leader or by the controller (Kafka: IsrShrinksPerSec)",
                &self.isr_shrinks,
            ),
            (
                "isr_expands",
                "Committed ISR changes of partitions led here that added a replica, by this \
                 leader or by the controller (Kafka: IsrExpandsPerSec)",
                &self.isr_expands,
            ),
            (
                "offset_commits",
                "Offsets committed by OffsetCommit requests to groups coordinated here, one per \
                 partition (Kafka: offset-commit-rate)",
                &self.offset_commits,
            ),
            (
                "offsets_expired",
                "Committed offsets deleted by offsets.retention.minutes (Kafka: \
                 offset-expiration-rate)",
                &self.offsets_expired,
            ),
            (
                "log_cleaner_passes",
                "Log cleaner passes that compacted a partition",
                &self.cleaner_passes,
            ),
            (
                "log_cleaner_aborted_passes",
                "Log cleaner passes dropped because the log changed meanwhile (truncation, \
                 retention); retried at the next pass",
                &self.cleaner_aborted,
            ),
            (
                "log_cleaner_failures",
                "Log cleaner passes that failed (see the broker's log; Kafka: \
                 uncleanable-partitions-count)",
                &self.cleaner_failures,
            ),
            (
                "log_cleaner_bytes_read",
                "Bytes of the cleanable segments the log cleaner's passes read (those it \
                 left alone included)",
                &self.cleaner_bytes_read,
            ),
            (
                "log_cleaner_bytes_written",
                "Bytes of the segments the log cleaner wrote in their place",
                &self.cleaner_bytes_written,
            ),
            (
                "log_cleaner_records_removed",
                "Records the log cleaner removed: superseded, expired tombstones, keyless",
                &self.cleaner_records_removed,
            ),
        ];
        for (name, help, family) in counters {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "log_cleaner_seconds",
            "Time the log cleaner spent in passes (Kafka: max-clean-time-secs is the longest)",
            self.cleaner_seconds.clone(),
        );
        registry.register(
            "group_count",
            "Consumer groups coordinated here, by state (Kafka: NumGroups, \
             NumGroupsPreparingRebalance, NumGroupsCompletingRebalance, NumGroupsStable, \
             NumGroupsEmpty)",
            self.groups.clone(),
        );
        let gauges: [(&str, &str, &NodeGauges); 6] = [
            (
                "under_replicated_partitions_count",
                "Partitions led here whose ISR is smaller than the replica set (Kafka: \
                 UnderReplicatedPartitions)",
                &self.under_replicated,
            ),
            (
                "under_min_isr_partitions_count",
                "Partitions led here whose committed ISR is below the effective \
                 min.insync.replicas: acks=all produce fails (Kafka: UnderMinIsrPartitionCount)",
                &self.under_min_isr,
            ),
            (
                "leader_count",
                "Partitions led here (Kafka: LeaderCount)",
                &self.leaders,
            ),
            (
                "partition_count",
                "Partitions hosted here (Kafka: PartitionCount)",
                &self.partitions,
            ),
            (
                "group_offsets_count",
                "Committed offsets of the groups coordinated here (Kafka: NumOffsets)",
                &self.group_offsets,
            ),
            (
                "transactions_in_doubt_count",
                "Transactions an unclean recovery left open in partitions led here, held until \
                 their coordinator settles them or an operator aborts them",
                &self.transactions_in_doubt,
            ),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
    }
}

struct Inner {
    registry: Registry,
    broker: BrokerFamilies,
    storage: storage::StorageFamilies,
    requests: LatencyFamily,
    malformed_requests: Family<ListenerLabels, Counter>,
    failed_authentications: Family<AuthenticationLabels, Counter>,
    authorizer_denials: Family<RequestLabels, Counter>,
    controllers: Arc<controller::Controllers>,
}

/// The registry of one process: cheap to clone (every clone is the same registry), passed to
/// each node explicitly (`BrokerConfig::metrics`, `ControllerServerConfig::metrics`).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The same registry (configs compare equal when they report into the same one).
impl PartialEq for Metrics {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Metrics {}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A new, empty registry with every Keel metric family registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let broker = BrokerFamilies::default();
        broker.register(&mut registry);
        let storage = storage::StorageFamilies::default();
        storage.register(&mut registry);
        let requests = LatencyFamily::new_with_constructor(latency_histogram);
        registry.register(
            "request_latency_seconds",
            "Time from a request's arrival to its answer, per listener and API (Kafka: \
             RequestMetrics TotalTimeMs)",
            requests.clone(),
        );
        let malformed_requests = Family::<ListenerLabels, Counter>::default();
        registry.register(
            "malformed_requests",
            "Connections closed for a malformed request, per listener: a bad size prefix, a \
             frame over socket.request.max.bytes, or a request that cannot be decoded",
            malformed_requests.clone(),
        );
        let failed_authentications = Family::<AuthenticationLabels, Counter>::default();
        registry.register(
            "failed_authentication",
            "Connections that failed to authenticate, per listener and mechanism (TLS: the \
             handshake or the client certificate; else the SASL mechanism) (Kafka: \
             failed-authentication-total)",
            failed_authentications.clone(),
        );
        let authorizer_denials = Family::<RequestLabels, Counter>::default();
        registry.register(
            "authorizer_denials",
            "Requests (or the items of one) the authorizer refused, per listener and API — \
             each is logged, rate-limited, to kafka.authorizer.logger",
            authorizer_denials.clone(),
        );
        let controllers = Arc::new(controller::Controllers::default());
        controller::register(&mut registry, &controllers);
        Metrics {
            inner: Arc::new(Inner {
                registry,
                broker,
                storage,
                requests,
                malformed_requests,
                failed_authentications,
                authorizer_denials,
                controllers,
            }),
        }
    }

    /// Handles onto broker `node_id`'s series (created on first use).
    pub fn broker(&self, node_id: i32) -> BrokerMetrics {
        let labels = NodeLabels { node_id };
        let f = &self.inner.broker;
        BrokerMetrics {
            bytes_in: f.bytes_in.get_or_create_owned(&labels),
            bytes_out: f.bytes_out.get_or_create_owned(&labels),
            records_in: f.records_in.get_or_create_owned(&labels),
            records_out: f.records_out.get_or_create_owned(&labels),
            replication_bytes_in: f.replication_bytes_in.get_or_create_owned(&labels),
            replication_bytes_out: f.replication_bytes_out.get_or_create_owned(&labels),
            isr_shrinks: f.isr_shrinks.get_or_create_owned(&labels),
            isr_expands: f.isr_expands.get_or_create_owned(&labels),
            under_replicated: f.under_replicated.get_or_create_owned(&labels),
            under_min_isr: f.under_min_isr.get_or_create_owned(&labels),
            leaders: f.leaders.get_or_create_owned(&labels),
            partitions: f.partitions.get_or_create_owned(&labels),
            groups: GROUP_STATES.map(|state| {
                f.groups
                    .get_or_create_owned(&GroupStateLabels { node_id, state })
            }),
            group_offsets: f.group_offsets.get_or_create_owned(&labels),
            transactions_in_doubt: f.transactions_in_doubt.get_or_create_owned(&labels),
            offset_commits: f.offset_commits.get_or_create_owned(&labels),
            offsets_expired: f.offsets_expired.get_or_create_owned(&labels),
            cleaner: CleanerMetrics {
                passes: f.cleaner_passes.get_or_create_owned(&labels),
                aborted: f.cleaner_aborted.get_or_create_owned(&labels),
                failures: f.cleaner_failures.get_or_create_owned(&labels),
                bytes_read: f.cleaner_bytes_read.get_or_create_owned(&labels),
                bytes_written: f.cleaner_bytes_written.get_or_create_owned(&labels),
                records_removed: f.cleaner_records_removed.get_or_create_owned(&labels),
                seconds: f.cleaner_seconds.get_or_create_owned(&labels),
            },
            storage: self.inner.storage.handles(node_id),
        }
    }

    /// Handles onto controller `node_id`'s series (created on first use; a controller that
    /// restarts in this process takes over its series).
    pub fn controller(&self, node_id: i32) -> ControllerMetrics {
        self.inner.controllers.get_or_create(node_id)
    }

    /// Request latency of one listener (`"broker"` or `"controller"`) of node `node_id`.
    pub fn requests(&self, node_id: i32, listener: &'static str) -> RequestMetrics {
        RequestMetrics {
            family: self.inner.requests.clone(),
            malformed: self
                .inner
                .malformed_requests
                .get_or_create_owned(&ListenerLabels { node_id, listener }),
            failed_authentications: self.inner.failed_authentications.clone(),
            authorizer_denials: self.inner.authorizer_denials.clone(),
            node_id,
            listener,
        }
    }

    /// Every series, in the Prometheus text format (version 0.0.4).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; the encoders only fail when the writer does.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.inner.registry)
        {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        text
    }
}

/// The `Content-Type` of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A broker's counters and gauges (clones share the series).
#[derive(Clone, Debug)]
pub struct BrokerMetrics {
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub records_in: Counter,
    pub records_out: Counter,
    pub replication_bytes_in: Counter,
    pub replication_bytes_out: Counter,
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub under_replicated: Gauge,
    pub under_min_isr: Gauge,
    pub leaders: Gauge,
    pub partitions: Gauge,
    /// Groups coordinated here, one gauge per state of [`GROUP_STATES`].
    pub groups: [Gauge; GROUP_STATES.len()],
    pub group_offsets: Gauge,
    /// Transactions held in doubt in partitions led here (`broker::stranded`).
    pub transactions_in_doubt: Gauge,
    pub offset_commits: Counter,
    pub offsets_expired: Counter,
    pub cleaner: CleanerMetrics,
    pub storage: StorageMetrics,
}

/// The log cleaner's counters of one broker.
#[derive(Clone, Debug)]
pub struct CleanerMetrics {
    pub passes: Counter,
    pub aborted: Counter,
    pub failures: Counter,
    pub bytes_read: Counter,
    pub bytes_written: Counter,
    pub records_removed: Counter,
    pub seconds: Counter<f64, AtomicU64>,
}

/// What one sweep over the hosted partitions counted (see `Broker::tick_leaders`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    pub hosted: u64,
    pub led: u64,
    pub under_replicated: u64,
    pub under_min_isr: u64,
}

impl BrokerMetrics {
    /// Sets the partition gauges from one sweep.
    pub fn set_partition_counts(&self, counts: PartitionCounts) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.partitions.set(gauge(counts.hosted));
        self.leaders.set(gauge(counts.led));
        self.under_replicated.set(gauge(counts.under_replicated));
        self.under_min_isr.set(gauge(counts.under_min_isr));
    }

    /// Sets the group gauges from one sweep of the coordinator: how many groups are in each
    /// state of [`GROUP_STATES`] (Kafka's names, in that order) and how many offsets they hold.
    pub fn set_group_counts(&self, by_state: [u64; GROUP_STATES.len()], offsets: u64) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.group_offsets.set(gauge(offsets));
        for (series, count) in self.groups.iter().zip(by_state) {
            series.set(gauge(count));
        }
    }

    /// Counts a committed ISR change of a partition led here (this leader's AlterPartition, or
    /// the controller's change seen in metadata): a shrink when a member left, an expansion when
    /// one joined (both, when one replaced another).
    pub fn count_isr_change<T: Ord>(
        &self,
        before: &std::collections::BTreeSet<T>,
        after: &std::collections::BTreeSet<T>,
    ) {
        if before.difference(after).next().is_some() {
            self.isr_shrinks.inc();
        }
        if after.difference(before).next().is_some() {
            self.isr_expands.inc();
        }
    }
}

/// Counts the records and bytes of the v2 record batches in `records` (a Fetch answer's
/// partition data), from the batch headers alone; stops at the first incomplete header.
pub fn batch_totals(records: &[u8]) -> (u64, u64) {
    use keel_log::batch::BatchHeader;
    let (mut count, mut position) = (0u64, 0usize);
    while let Some(header) = records.get(position..).and_then(BatchHeader::parse) {
        let Some(size) = header.size_bytes() else {
            break;
        };
        count += u64::try_from(header.records_count).unwrap_or(0);
        position += size;
    }
    (count, records.len() as u64)
}

/// One listener's request latency histogram.
#[derive(Clone, Debug)]
pub struct RequestMetrics {
    family: LatencyFamily,
    /// `keel_malformed_requests_total` of this listener.
    malformed: Counter,
    /// `keel_failed_authentication_total`, every listener's.
    failed_authentications: Family<AuthenticationLabels, Counter>,
    /// `keel_authorizer_denials_total`, every listener's.
    authorizer_denials: Family<RequestLabels, Counter>,
    node_id: i32,
    listener: &'static str,
}

impl RequestMetrics {
    /// Records one request of API `api_key` (the frame's first two bytes) that took `seconds`.
    pub fn observe(&self, api_key: Option<i16>, seconds: f64) {
        let labels = RequestLabels {
            node_id: self.node_id,
            listener: self.listener,
            api: api_key.map_or(names::UNKNOWN_API, api_name),
        };
        self.family.get_or_create(&labels).observe(seconds);
    }

    /// Counts one connection closed for a malformed request.
    pub fn count_malformed(&self) {
        self.malformed.inc();
    }

    /// Counts one denial by the authorizer of a request of API `api_key`.
    pub fn count_denial(&self, api_key: i16) {
        self.authorizer_denials
            .get_or_create(&RequestLabels {
                node_id: self.node_id,
                listener: self.listener,
                api: api_name(api_key),
            })
            .inc();
    }

    /// Counts one connection that failed to authenticate on listener `listener` (its configured
    /// name) with `mechanism`.
    pub fn count_failed_authentication(&self, listener: &str, mechanism: &str) {
        self.failed_authentications
            .get_or_create(&AuthenticationLabels {
                node_id: self.node_id,
                listener: listener.to_string(),
                mechanism: mechanism.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests;
