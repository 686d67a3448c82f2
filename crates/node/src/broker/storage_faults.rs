//! Storage faults as the broker meets them (issue 19). The disk can lie (bytes read back are not
//! the bytes written) and fail (EIO, ENOSPC, a read-only remount, a failed fsync):
//!
//! - **Damage** — a batch that fails validation, found by a read served to a follower, by the
//!   scrubber or by a truncation — is set aside ([`keel_log::Log::set_aside_damage`]: the log
//!   ends before it, the damaged segment and everything after it go to a quarantine directory,
//!   nothing is deleted). The replica has lost data exactly as an unclean shutdown loses it
//!   (KIP-966): it stops leading at once ([`StorageHealth::Damaged`]), keeps following to
//!   re-replicate, and reports itself lost in every heartbeat until the controller has taken it
//!   out of the ISR and ELR. It leads again only after that, or when an unclean recovery
//!   (which knows it may lack data) chooses it.
//! - **A failed log directory** is taken offline, as Kafka does (KIP-858): every partition in
//!   it stops being read, written, led and fetched ([`StorageHealth::Offline`], until a
//!   restart), the heartbeat names the directory and reports its replicas lost, and the
//!   partitions of the other directories go on. An fsync that failed is never retried as if
//!   the data were safe (the fsyncgate lesson): the directory is offline, and the next start
//!   recovers it from its recovery point.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use keel_controller::types::{BrokerId as CBrokerId, TopicId, TopicPartition as CTopicPartition};
use keel_controller::{ClusterImage, LOST_REPLICAS_PER_HEARTBEAT_MAX};
use keel_log::{Damage, LogError, Offset, Quarantine};
use keel_replication::{self as repl, ErrorCode, FollowerPartition};
use keel_wire::keel_ext::LostReplicaEntry;
use tracing::{error, warn};
use uuid::Uuid;

use super::Broker;
use crate::partition::{Partition, Replica, StorageHealth};

/// A log directory taken offline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfflineLogDir {
    /// Its path.
    pub path: PathBuf,
    /// Its `directory.id`, if it could be read.
    pub id: Option<Uuid>,
    /// The error that took it offline.
    pub reason: String,
}

/// The log directories taken offline, by index in `log.dirs` order (those that failed at start
/// are listed by path only).
#[derive(Debug, Default)]
pub(super) struct OfflineDirs {
    pub by_index: BTreeMap<usize, OfflineLogDir>,
    /// Directories that could not even be opened at start (not in `Broker::log_dirs`).
    pub at_start: Vec<OfflineLogDir>,
}

impl Broker {
    /// If `error` is a storage failure (an IO error, a damaged checkpoint: anything fatal for
    /// the directory), takes the partition's log directory offline and returns true.
    pub fn check_storage_error(&self, partition: &Partition, error: &LogError) -> bool {
        if !error.is_fatal() {
            return false;
        }
        self.fail_log_dir(partition.log_dir_index, &error.to_string());
        true
    }

    /// Takes log directory `index` offline (once): its partitions stop leading and serving,
    /// their waiting produce requests are answered `KAFKA_STORAGE_ERROR`, and the next
    /// heartbeat (sent at once) reports them lost.
    pub fn fail_log_dir(&self, index: usize, reason: &str) {
        let Some(dir) = self.log_dirs.get(index) else {
            return;
        };
        {
            let mut offline = self
                .offline_dirs
                .lock()
                .expect("offline dirs lock poisoned");
            if offline.by_index.contains_key(&index) {
                return;
            }
            offline.by_index.insert(
                index,
                OfflineLogDir {
                    path: dir.path().to_path_buf(),
                    id: Some(dir.meta().directory_id),
                    reason: reason.to_string(),
                },
            );
        }
        let partitions: Vec<Arc<Partition>> = self
            .all_partitions()
            .into_iter()
            .filter(|p| p.log_dir_index == index)
            .collect();
        error!(
            dir = %dir.path().display(),
            reason,
            partitions = partitions.len(),
            "log directory failed: taking it offline until a restart (its partitions are no longer \
             served, led or replicated here; leadership moves to other replicas)"
        );
        for partition in &partitions {
            partition.set_health(StorageHealth::Offline);
            let mut replica = partition.lock_replica();
            self.step_down(partition, &mut replica, None, None);
            drop(replica);
            partition.fail_all_waiters(ErrorCode::KafkaStorageError);
        }
        self.metrics
            .storage
            .set_dir_online(&dir.path().display().to_string(), false);
        self.metrics
            .storage
            .offline_dirs
            .set(i64::try_from(self.offline_log_dirs().len()).unwrap_or(i64::MAX));
        self.storage_reports.notify_one();
        self.image_changed.send_modify(|v| *v = v.wrapping_add(1));
        self.notify_data_changed();
    }

    /// Takes log directory `index` offline once no broker lock is held (from code that runs
    /// under the state lock: applying an image, loading logs).
    pub(super) fn defer_dir_failure(&self, index: usize, reason: String) {
        self.deferred_dir_failures
            .lock()
            .expect("deferred failures lock poisoned")
            .push((index, reason));
    }

    /// Runs the failures [`Broker::defer_dir_failure`] recorded. No broker lock may be held.
    pub(super) fn run_deferred_dir_failures(&self) {
        let failures = std::mem::take(
            &mut *self
                .deferred_dir_failures
                .lock()
                .expect("deferred failures lock poisoned"),
        );
        for (index, reason) in failures {
            self.fail_log_dir(index, &reason);
        }
    }

    /// Whether loading the logs found that one lost data it held (a torn tail or damage): a
    /// broker whose logs did is not clean, whatever its clean-shutdown files say (KIP-966).
    pub fn logs_lost_data(&self) -> bool {
        self.recovery_lost_data
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether log directory `index` serves.
    pub fn log_dir_online(&self, index: usize) -> bool {
        !self
            .offline_dirs
            .lock()
            .expect("offline dirs lock poisoned")
            .by_index
            .contains_key(&index)
    }

    /// The paths of the log directories, in `log.dirs` order (those that could not be opened
    /// at start are not among them: [`Broker::offline_log_dirs`] lists them).
    pub fn log_dir_paths(&self) -> Vec<PathBuf> {
        self.log_dirs
            .iter()
            .map(|d| d.path().to_path_buf())
            .collect()
    }

    /// Why log directory `index` is offline, if it is.
    pub fn offline_reason(&self, index: usize) -> Option<String> {
        self.offline_dirs
            .lock()
            .expect("offline dirs lock poisoned")
            .by_index
            .get(&index)
            .map(|d| d.reason.clone())
    }

    /// The directories that could not be opened at start.
    pub fn offline_at_start(&self) -> Vec<OfflineLogDir> {
        self.offline_dirs
            .lock()
            .expect("offline dirs lock poisoned")
            .at_start
            .clone()
    }

    /// Every offline log directory (those that failed at start too).
    pub fn offline_log_dirs(&self) -> Vec<OfflineLogDir> {
        let offline = self
            .offline_dirs
            .lock()
            .expect("offline dirs lock poisoned");
        offline
            .at_start
            .iter()
            .chain(offline.by_index.values())
            .cloned()
            .collect()
    }

    /// The ids of the offline log directories whose id is known (BrokerHeartbeat's
    /// `OfflineLogDirs`).
    pub fn offline_log_dir_ids(&self) -> Vec<Uuid> {
        self.offline_log_dirs()
            .iter()
            .filter_map(|d| d.id)
            .collect()
    }

    /// Sets aside damage found in `partition`'s log by `found_by` (one of
    /// [`crate::metrics::DAMAGE_SOURCES`]): the log ends before the damaged batch, the replica
    /// stops leading, keeps following (from its new log end) and reports itself lost. Nothing
    /// happens if the damage is no longer in the log (it changed since it was found).
    pub fn on_damage(&self, partition: &Arc<Partition>, damage: &Damage, found_by: &'static str) {
        let now_ms = self.clock.now_ms();
        // The image before the replica lock: applying an image holds the broker's state lock
        // while it takes replica locks, so taking them the other way round deadlocks (a CI run
        // caught the scrubber's finding racing the broker's first images after a restart).
        let image = self.image();
        let mut replica = partition.lock_replica();
        let (result, log_end_offset) = {
            let Ok(mut log) = partition.lock_log() else {
                return;
            };
            let result = log.set_aside_damage(damage, now_ms);
            (result, log.log_end_offset())
        };
        let quarantine = match result {
            Ok(Some(quarantine)) => quarantine,
            Ok(None) => return,
            Err(e) => {
                drop(replica);
                if !self.check_storage_error(partition, &e) {
                    warn!(partition = %partition.tp, error = %e, "cannot set damaged data aside");
                }
                return;
            }
        };
        error!(
            partition = %partition.tp,
            found_by,
            segment = %damage.segment,
            position = damage.position,
            reason = %damage.reason,
            log_end_offset = %log_end_offset,
            quarantine = %quarantine.path.display(),
            "damaged log data: the log now ends before it, the rest is set aside; this replica \
             lost data, stops leading and re-replicates from the leader"
        );
        let seen =
            image_partition(&image, partition).map_or(i64::MIN, |s| i64::from(s.partition_epoch.0));
        partition.set_damaged_at(seen);
        partition.set_health(StorageHealth::Damaged);
        self.metrics.storage.count_damage(found_by);
        let high_watermark = partition.high_watermark().min(log_end_offset);
        partition.set_high_watermark(high_watermark);
        self.step_down(
            partition,
            &mut replica,
            Some(log_end_offset),
            Some(high_watermark),
        );
        drop(replica);
        partition.fail_all_waiters(ErrorCode::NotLeaderOrFollower);
        self.refresh_quarantine_metrics();
        self.storage_reports.notify_one();
        self.notify_data_changed();
    }

    /// Ends the partition's leadership here (a follower of no one at the same leader epoch;
    /// the next image names the new leader) or, for a follower, restarts it from the log's new
    /// end. `log_end_offset`/`high_watermark` `None`: read them from the partition.
    fn step_down(
        &self,
        partition: &Partition,
        replica: &mut Replica,
        log_end_offset: Option<Offset>,
        high_watermark: Option<Offset>,
    ) {
        let offline = partition.health() == StorageHealth::Offline;
        let (leader, leader_epoch) = match &*replica {
            Replica::Leader(l) => (None, l.leader_epoch()),
            Replica::Follower(f) if offline => (None, f.leader_epoch()),
            Replica::Follower(f) => (f.leader(), f.leader_epoch()),
        };
        let log_end_offset = log_end_offset.unwrap_or_else(|| {
            partition
                .log_end_offset_unchecked()
                .unwrap_or(partition.high_watermark())
        });
        let high_watermark = high_watermark
            .unwrap_or_else(|| partition.high_watermark())
            .min(log_end_offset);
        let config = self.replication_config(&partition.config());
        match FollowerPartition::new(
            repl::BrokerId(self.config.node_id),
            repl::BrokerEpoch(self.broker_epoch()),
            leader,
            leader_epoch,
            repl::Offset(log_end_offset.0),
            repl::Offset(high_watermark.0),
            config,
        ) {
            Ok(follower) => *replica = Replica::Follower(follower),
            Err(e) => warn!(partition = %partition.tp, error = %e, "cannot step down"),
        }
    }

    /// The replicas to report lost in the next heartbeat: damaged or offline ones that the
    /// image still has in an ISR or ELR, or as leader (at most
    /// [`LOST_REPLICAS_PER_HEARTBEAT_MAX`]; the rest go in later heartbeats).
    pub fn lost_replica_reports(&self) -> Vec<LostReplicaEntry> {
        let image = self.image();
        let local = CBrokerId(self.config.node_id);
        let mut reports = Vec::new();
        for partition in self.all_partitions() {
            let reason = match partition.health() {
                StorageHealth::Healthy => continue,
                StorageHealth::Damaged => 0,
                StorageHealth::Offline => 1,
            };
            let Some(state) = image_partition(&image, &partition) else {
                continue;
            };
            if !state.isr.contains(&local)
                && !state.elr.contains(&local)
                && state.leader != Some(local)
            {
                continue;
            }
            reports.push(LostReplicaEntry {
                topic_id: partition.topic_id,
                partition: partition.tp.partition,
                partition_epoch: state.partition_epoch.0,
                reason,
            });
            if reports.len() == LOST_REPLICAS_PER_HEARTBEAT_MAX {
                break;
            }
        }
        self.metrics
            .storage
            .lost_replicas
            .set(i64::try_from(reports.len()).unwrap_or(i64::MAX));
        reports
    }

    /// What the next heartbeat says about storage.
    pub fn storage_report(&self) -> crate::cluster::lifecycle::StorageReport {
        crate::cluster::lifecycle::StorageReport {
            offline_log_dirs: self.offline_log_dir_ids(),
            lost_replicas: self.lost_replica_reports(),
        }
    }

    /// Resolves when a storage fault wants a heartbeat sent now.
    pub async fn storage_report_wanted(&self) {
        self.storage_reports.notified().await;
    }

    /// The quarantine directories in the online log directories.
    pub fn quarantines(&self) -> Vec<Quarantine> {
        let mut found = Vec::new();
        for (index, dir) in self.log_dirs.iter().enumerate() {
            if !self.log_dir_online(index) {
                continue;
            }
            let Ok(entries) = dir.storage().list_dir(dir.path()) else {
                continue;
            };
            for entry in entries {
                if entry.is_dir && entry.name.ends_with(keel_log::QUARANTINE_SUFFIX) {
                    let path = dir.path().join(&entry.name);
                    if let Some(q) = Quarantine::read(dir.storage().as_ref(), &path) {
                        found.push(q);
                    }
                }
            }
        }
        found
    }

    /// Sets the quarantine gauges from what the log directories hold now.
    pub fn refresh_quarantine_metrics(&self) {
        let quarantines = self.quarantines();
        let bytes: u64 = quarantines.iter().map(|q| q.bytes).sum();
        self.metrics
            .storage
            .quarantines
            .set(i64::try_from(quarantines.len()).unwrap_or(i64::MAX));
        self.metrics
            .storage
            .quarantined_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// The image's state of a hosted partition.
pub(super) fn image_partition<'a>(
    image: &'a ClusterImage,
    partition: &Partition,
) -> Option<&'a keel_controller::PartitionState> {
    let index = u32::try_from(partition.tp.partition).ok()?;
    image.partition(CTopicPartition::new(TopicId(partition.topic_id), index))
}
