//! The controller's metrics. Gauges come from a [`ControllerSnapshot`] that the controller task
//! publishes (on every tick and on every change between active and standby) and a scrape
//! reads: a scrape never waits for the controller loop. Only the active controller reports
//! partition state; a standby reports `active_controller_count` 0 and zero counts (so sums
//! over every controller are the cluster's numbers) and no per-partition series.
//!
//! The election counters are plain counters the controller task increments when a record it
//! proposes elects a leader from the ELR or uncleanly (`controller_server::state`); the lease
//! lapse counter when it stops being active as leader for want of a quorum's acknowledgement.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use keel_controller::types::LeaderRecoveryState;
use keel_controller::{Controller, PartitionState};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::NodeLabels;

/// One partition's |ISR| + |ELR| (KIP-966 `electable_replicas_count`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectableReplicas {
    pub topic: String,
    pub partition: u32,
    pub count: u64,
}

/// What the active controller knows about the cluster, as of its last publication.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerSnapshot {
    /// Whether this controller is the active one (the other fields are zero when not).
    pub active: bool,
    /// Partitions in the image.
    pub partitions: u64,
    /// Leaderless partitions.
    pub offline: u64,
    /// Partitions whose ISR is below the effective `min.insync.replicas`.
    pub under_min_isr: u64,
    /// Partitions under unclean recovery (KIP-966).
    pub unclean_recovery: u64,
    /// Leaderless partitions waiting for an operator (KIP-966, the Manual strategy).
    pub paused: u64,
    /// Registered brokers that are unfenced and not shutting down.
    pub live_brokers: u64,
    /// Registered brokers that are fenced.
    pub fenced_brokers: u64,
    /// Every partition's |ISR| + |ELR|, by topic name and partition.
    pub electable: Vec<ElectableReplicas>,
}

impl ControllerSnapshot {
    /// The active controller's view.
    pub fn of(controller: &Controller) -> ControllerSnapshot {
        let image = controller.image();
        let mut snapshot = ControllerSnapshot {
            active: true,
            unclean_recovery: controller.partitions_under_recovery().len() as u64,
            paused: controller.paused_partitions().len() as u64,
            ..ControllerSnapshot::default()
        };
        for broker in image.brokers().values() {
            if broker.is_live() {
                snapshot.live_brokers += 1;
            } else if broker.state == keel_controller::image::BrokerState::Fenced {
                snapshot.fenced_brokers += 1;
            }
        }
        for (id, topic) in image.topics() {
            let min_isr = image.effective_min_isr(*id);
            for (index, p) in &topic.partitions {
                snapshot.partitions += 1;
                snapshot.offline += u64::from(p.leader.is_none());
                snapshot.under_min_isr += u64::from(p.isr.len() < min_isr);
                snapshot.electable.push(ElectableReplicas {
                    topic: topic.name.clone(),
                    partition: *index,
                    count: p.electable_replicas() as u64,
                });
            }
        }
        snapshot
    }
}

/// One controller's handles: publish snapshots, count elections.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    snapshot: Arc<Mutex<Arc<ControllerSnapshot>>>,
    /// Leaders elected from the ELR (Kafka: `ElectionFromEligibleLeaderReplicasPerSec`).
    pub elr_elections: Counter,
    /// Leaders elected uncleanly: by the Unclean Recovery Manager, or by Kafka's classic
    /// unclean election when ELR is off (Kafka: `UncleanLeaderElectionsPerSec`).
    pub unclean_recoveries: Counter,
    /// Times this controller stopped being active while still the Raft leader of its term
    /// because its lease (a quorum's acknowledgement within the election timeout) lapsed.
    pub lease_lapses: Counter,
}

impl ControllerMetrics {
    /// Replaces the published snapshot.
    pub fn publish(&self, snapshot: ControllerSnapshot) {
        let mut current = self.snapshot.lock().unwrap_or_else(|e| e.into_inner());
        if **current != snapshot {
            *current = Arc::new(snapshot);
        }
    }

    /// Counts the election a partition change made, if it made one: a new leader elected
    /// uncleanly (its recovery state is `RECOVERING`) or from the previous ELR.
    pub fn count_election(&self, before: &PartitionState, after: &PartitionState) {
        let Some(leader) = after.leader else {
            return;
        };
        if before.leader == Some(leader) {
            return;
        }
        if after.leader_recovery_state == LeaderRecoveryState::Recovering {
            self.unclean_recoveries.inc();
        } else if before.elr.contains(&leader) {
            self.elr_elections.inc();
        }
    }

    /// The published snapshot.
    pub fn snapshot(&self) -> Arc<ControllerSnapshot> {
        self.snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Every controller of the process, by node id; the collector that reports their gauges.
#[derive(Debug, Default)]
pub(super) struct Controllers {
    nodes: Mutex<BTreeMap<i32, ControllerMetrics>>,
    elr_elections: Family<NodeLabels, Counter>,
    unclean_recoveries: Family<NodeLabels, Counter>,
    lease_lapses: Family<NodeLabels, Counter>,
}

impl Controllers {
    pub(super) fn get_or_create(&self, node_id: i32) -> ControllerMetrics {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes
            .entry(node_id)
            .or_insert_with(|| {
                let labels = NodeLabels { node_id };
                ControllerMetrics {
                    snapshot: Arc::default(),
                    elr_elections: self.elr_elections.get_or_create_owned(&labels),
                    unclean_recoveries: self.unclean_recoveries.get_or_create_owned(&labels),
                    lease_lapses: self.lease_lapses.get_or_create_owned(&labels),
                }
            })
            .clone()
    }

    fn snapshots(&self) -> Vec<(i32, Arc<ControllerSnapshot>)> {
        let nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.iter().map(|(id, m)| (*id, m.snapshot())).collect()
    }
}

/// Registers the controller counters and the snapshot collector.
pub(super) fn register(registry: &mut Registry, controllers: &Arc<Controllers>) {
    registry.register(
        "elr_elections",
        "Leaders the active controller elected from the ELR (Kafka: \
         ElectionFromEligibleLeaderReplicasPerSec)",
        controllers.elr_elections.clone(),
    );
    registry.register(
        "unclean_recoveries",
        "Leaders the active controller elected uncleanly, by unclean recovery or by the classic \
         unclean election when ELR is off (Kafka: UncleanLeaderElectionsPerSec)",
        controllers.unclean_recoveries.clone(),
    );
    registry.register(
        "controller_lease_lapses",
        "Times the active controller stopped being active while still the Raft leader of its \
         term, because no quorum acknowledged it within the election timeout (its lease)",
        controllers.lease_lapses.clone(),
    );
    registry.register_collector(Box::new(SnapshotCollector(controllers.clone())));
}

/// A per-node gauge of the snapshot: name, help, value.
type NodeGauge = (&'static str, &'static str, fn(&ControllerSnapshot) -> u64);

const NODE_GAUGES: [NodeGauge; 8] = [
    (
        "active_controller_count",
        "1 on the active controller, 0 on a standby; the sum over a quorum must be 1 (Kafka: \
         ActiveControllerCount).",
        |s| u64::from(s.active),
    ),
    (
        "offline_partitions_count",
        "Leaderless partitions (Kafka: OfflinePartitionsCount).",
        |s| s.offline,
    ),
    (
        "controller_under_min_isr_partitions_count",
        "Partitions whose ISR is below the effective min.insync.replicas, in the active \
         controller's image.",
        |s| s.under_min_isr,
    ),
    (
        "unclean_recovery_partitions_count",
        "Partitions under unclean recovery (KIP-966 unclean_recovery_partitions_count).",
        |s| s.unclean_recovery,
    ),
    (
        "paused_partitions_count",
        "Leaderless partitions waiting for an operator's election (KIP-966 \
         paused_partitions_count).",
        |s| s.paused,
    ),
    (
        "global_partition_count",
        "Partitions in the cluster (Kafka: GlobalPartitionCount).",
        |s| s.partitions,
    ),
    (
        "active_broker_count",
        "Registered brokers that are unfenced and not shutting down (Kafka: ActiveBrokerCount).",
        |s| s.live_brokers,
    ),
    (
        "fenced_broker_count",
        "Registered brokers that are fenced (Kafka: FencedBrokerCount).",
        |s| s.fenced_brokers,
    ),
];

/// Labels of one partition's `electable_replicas_count`.
type PartitionLabels = [(&'static str, String); 3];

#[derive(Debug)]
struct SnapshotCollector(Arc<Controllers>);

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshots = self.0.snapshots();
        if snapshots.is_empty() {
            return Ok(());
        }
        for (name, help, value) in NODE_GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (node_id, snapshot) in &snapshots {
                let gauge = ConstGauge::new(i64::try_from(value(snapshot)).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&NodeLabels { node_id: *node_id })?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "electable_replicas_count",
            "A partition's |ISR| + |ELR|, reported by the active controller (KIP-966 \
             electable_replicas_count).",
            None,
            MetricType::Gauge,
        )?;
        for (node_id, snapshot) in &snapshots {
            for p in &snapshot.electable {
                let labels: PartitionLabels = [
                    ("node_id", node_id.to_string()),
                    ("topic", p.topic.clone()),
                    ("partition", p.partition.to_string()),
                ];
                let gauge = ConstGauge::new(i64::try_from(p.count).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
