//! The broker's storage-fault metrics (issue 19): offline log directories, damage found and set
//! aside, the scrubber's work, corrupt batches a follower refused. What each means and what to
//! alert on: `docs/operations.md`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{NodeCounters, NodeGauges, NodeLabels};

/// Where damage was found.
pub const DAMAGE_SOURCES: [&str; 4] = ["recovery", "follower_read", "scrub", "truncation"];

/// A damage counter series: node and where it was found.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DamageLabels {
    node_id: i32,
    found_by: &'static str,
}

/// A log directory series: node and directory path.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabels {
    node_id: i32,
    dir: String,
}

/// The families behind [`StorageMetrics`].
#[derive(Debug, Default)]
pub(super) struct StorageFamilies {
    offline_dirs: NodeGauges,
    dir_online: Family<DirLabels, Gauge>,
    damage_found: Family<DamageLabels, Counter>,
    quarantined_bytes: NodeGauges,
    quarantines: NodeGauges,
    lost_replicas: NodeGauges,
    scrub_bytes: NodeCounters,
    scrub_segments: NodeCounters,
    scrub_passes: NodeCounters,
    fetch_corrupt: NodeCounters,
}

impl StorageFamilies {
    pub(super) fn register(&self, registry: &mut Registry) {
        let gauges: [(&str, &str, &NodeGauges); 4] = [
            (
                "log_dir_offline_count",
                "Log directories of this broker taken offline after an IO error, a full disk \
                 or a failed fsync, until a restart (Kafka: OfflineLogDirectoryCount)",
                &self.offline_dirs,
            ),
            (
                "log_quarantined_bytes",
                "Bytes of damaged log data set aside in <partition>.<offset>-<ms>-quarantine \
                 directories of this broker's log directories, kept until an operator removes \
                 them",
                &self.quarantined_bytes,
            ),
            (
                "log_quarantine_count",
                "Quarantine directories in this broker's log directories",
                &self.quarantines,
            ),
            (
                "lost_replicas_count",
                "Replicas this broker reports to the controller as lost (damage set aside, or \
                 on an offline log directory) while they are still in an ISR or ELR",
                &self.lost_replicas,
            ),
        ];
        for (name, help, family) in gauges {
            registry.register(name, help, family.clone());
        }
        registry.register(
            "log_dir_online",
            "1 while the log directory serves, 0 once it was taken offline",
            self.dir_online.clone(),
        );
        registry.register(
            "log_damage_found",
            "Damaged log data found and set aside, by where it was found (recovery at start, a \
             read served to a follower, the scrubber, a follower's truncation)",
            self.damage_found.clone(),
        );
        let counters: [(&str, &str, &NodeCounters); 4] = [
            (
                "log_scrub_bytes",
                "Bytes of segments the scrubber validated (CRC-32C of every batch)",
                &self.scrub_bytes,
            ),
            (
                "log_scrub_segments",
                "Segments the scrubber walked to the end",
                &self.scrub_segments,
            ),
            (
                "log_scrub_passes",
                "Scrubber passes over every hosted partition completed",
                &self.scrub_passes,
            ),
            (
                "replica_fetch_corrupt_batches",
                "Fetch answers from a leader this broker refused to append because a batch \
                 failed validation (retried after replica.fetch.backoff.ms)",
                &self.fetch_corrupt,
            ),
        ];
        for (name, help, family) in counters {
            registry.register(name, help, family.clone());
        }
    }

    pub(super) fn handles(&self, node_id: i32) -> StorageMetrics {
        let labels = NodeLabels { node_id };
        StorageMetrics {
            node_id,
            offline_dirs: self.offline_dirs.get_or_create_owned(&labels),
            dir_online: self.dir_online.clone(),
            damage_found: DAMAGE_SOURCES.map(|found_by| {
                self.damage_found
                    .get_or_create_owned(&DamageLabels { node_id, found_by })
            }),
            quarantined_bytes: self.quarantined_bytes.get_or_create_owned(&labels),
            quarantines: self.quarantines.get_or_create_owned(&labels),
            lost_replicas: self.lost_replicas.get_or_create_owned(&labels),
            scrub_bytes: self.scrub_bytes.get_or_create_owned(&labels),
            scrub_segments: self.scrub_segments.get_or_create_owned(&labels),
            scrub_passes: self.scrub_passes.get_or_create_owned(&labels),
            fetch_corrupt: self.fetch_corrupt.get_or_create_owned(&labels),
        }
    }
}

/// Handles onto one broker's storage-fault series.
#[derive(Clone, Debug)]
pub struct StorageMetrics {
    node_id: i32,
    pub offline_dirs: Gauge,
    dir_online: Family<DirLabels, Gauge>,
    /// One counter per entry of [`DAMAGE_SOURCES`].
    pub damage_found: [Counter; DAMAGE_SOURCES.len()],
    pub quarantined_bytes: Gauge,
    pub quarantines: Gauge,
    pub lost_replicas: Gauge,
    pub scrub_bytes: Counter,
    pub scrub_segments: Counter,
    pub scrub_passes: Counter,
    pub fetch_corrupt: Counter,
}

impl StorageMetrics {
    /// Sets whether log directory `dir` serves.
    pub fn set_dir_online(&self, dir: &str, online: bool) {
        self.dir_online
            .get_or_create(&DirLabels {
                node_id: self.node_id,
                dir: dir.to_string(),
            })
            .set(i64::from(online));
    }

    /// Counts damage found by `found_by` (one of [`DAMAGE_SOURCES`]).
    pub fn count_damage(&self, found_by: &str) {
        if let Some(i) = DAMAGE_SOURCES.iter().position(|s| *s == found_by) {
            self.damage_found[i].inc();
        }
    }
}
