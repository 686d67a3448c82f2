//! Hosting partitions as the metadata image says: load the logs once the first caught-up
//! image is known (Kafka's LogManager also starts only then, so topic configs and stray logs
//! are known), and apply every new image — create, lead, follow, reconfigure, delete.
//!
//! Roles follow the image's leader and leader epoch: the core ignores anything older than
//! what it has (an older leader epoch, or an older partition epoch within the same leader
//! epoch), so a late image can never overwrite newer partition state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use keel_controller::image::BrokerState;
use keel_controller::types::{BrokerId as CBrokerId, TopicPartition as CTopicPartition};
use keel_controller::{ClusterImage, PartitionState};
use keel_log::{Log, LogDir, Offset, TopicPartition};
use keel_replication::{
    self as repl, BrokerRegistration, Command, ErrorCode, FollowerPartition, LeaderInit,
    LeaderPartition, PartitionMetadata, ReplicationConfig,
};
use tracing::{info, warn};
use uuid::Uuid;

use super::{effective_config, Broker};
use crate::clock::Clock;
use crate::partition::{Partition, Replica, StorageHealth};
use crate::topic_config::EffectiveTopicConfig;

/// Suffix of a deleted partition's directory while it is being removed (Kafka's convention).
const DELETE_SUFFIX: &str = "delete";
/// Suffix of a directory that belongs to no partition of this broker, kept for an operator.
const STRAY_SUFFIX: &str = "stray";
/// The controller's partition directories (a single-node or combined-mode cluster keeps them
/// in the first log directory): the applied metadata log and the Raft log. Never loaded as
/// data partitions.
const CONTROLLER_PARTITION_DIRS: &[&str] =
    &["__cluster_metadata-0", crate::raft::log_store::RAFT_LOG_DIR];
/// Kafka's per-partition file naming the topic id, so a log of a deleted topic is never taken
/// for a new topic of the same name.
use keel_log::PARTITION_METADATA_FILE;

/// A log read from disk at start, waiting to be claimed by the image.
#[derive(Debug)]
pub(super) struct LoadedLog {
    dir_index: usize,
    log: Log,
    high_watermark: Offset,
    /// The topic id its `partition.metadata` names, if any.
    recorded_topic_id: Option<Uuid>,
}

/// Logs recovered before the broker registered (see [`Broker::preload_logs`]), claimed by the
/// first image applied.
pub(super) type PreloadedLogs = BTreeMap<TopicPartition, LoadedLog>;

/// Leader-core commands to run once the locks are released.
pub(super) type Pending = Vec<(Arc<Partition>, Vec<Command>)>;

impl Broker {
    /// Applies a newer metadata image: loads the logs on the first call, then makes every
    /// partition this broker is a replica of hosted with the role the image names, and removes
    /// the ones it no longer hosts. Blocking (file IO): call it off the async executor.
    pub fn apply_image(&self, image: Arc<ClusterImage>) -> anyhow::Result<()> {
        let now_ms = self.clock.now_ms();
        let now = u64::try_from(now_ms).unwrap_or(0);
        let local = CBrokerId(self.config.node_id);
        let mut pending: Pending = Vec::new();
        let mut removed = Vec::new();
        let mut replaced = false;
        {
            let mut state = self.lock_state();
            if let Some(last) = state.image.last_applied() {
                if image.last_applied().is_none_or(|new| new <= last) {
                    return Ok(());
                }
            }
            let first_load = !state.logs_loaded;
            let mut loaded = if state.logs_loaded {
                BTreeMap::new()
            } else {
                let recovered = match state.preloaded.take() {
                    Some(preloaded) => preloaded,
                    None => self.recover_all_logs(&image, now_ms)?,
                };
                self.set_aside_other_topics(recovered, &image)?
            };
            let old_image = state.image.clone();
            let mut wanted = BTreeSet::new();
            for (ctp, partition_state) in image.partitions() {
                if !partition_state.replicas.contains(&local) {
                    continue;
                }
                let topic = image.topic(ctp.topic).expect("partition of a known topic");
                let index = i32::try_from(ctp.partition).unwrap_or(i32::MAX);
                let tp = TopicPartition::new(topic.name.clone(), index);
                wanted.insert(tp.clone());
                let config = Arc::new(effective_config(&image, &topic.configs, &self.config));
                let existing = state.partitions.get(&tp).cloned();
                if existing.is_none() && !loaded.contains_key(&tp) {
                    // A log directory that failed at start may hold this partition: a new
                    // empty log elsewhere would shadow it when the directory is back. Not
                    // hosted until a restart with every directory online.
                    if first_load && !self.offline_log_dirs().is_empty() {
                        warn!(partition = %tp,
                            "not found in the online log directories while one is offline: not hosted until a restart with every log directory online");
                        state.unplaced.insert(tp.clone());
                    }
                    if state.unplaced.contains(&tp) {
                        continue;
                    }
                }
                let partition = match existing {
                    Some(p) if p.topic_id == topic.id.0 => p,
                    other => {
                        if let Some(old) = other {
                            // A topic of the same name was deleted and recreated: the old log
                            // goes before the new one takes its directory name.
                            state.partitions.remove(&tp);
                            self.remove_partition_dirs(std::slice::from_ref(&old));
                            replaced = true;
                        }
                        let partition = self.host(
                            &tp,
                            topic.id.0,
                            loaded.remove(&tp),
                            &state,
                            config.clone(),
                            partition_state,
                            now_ms,
                        )?;
                        state.partitions.insert(tp.clone(), partition.clone());
                        partition
                    }
                };
                if *partition.config() != *config {
                    if let Err(e) = partition.set_config(config.clone()) {
                        warn!(partition = %tp, error = %e, "cannot apply new topic config");
                    }
                }
                let commands = self.set_role(
                    &partition,
                    ctp,
                    partition_state,
                    &image,
                    &old_image,
                    &config,
                    now,
                );
                if !commands.is_empty() {
                    pending.push((partition, commands));
                }
            }
            let gone: Vec<TopicPartition> = state
                .partitions
                .keys()
                .filter(|tp| !wanted.contains(*tp))
                .cloned()
                .collect();
            for tp in gone {
                if let Some(p) = state.partitions.remove(&tp) {
                    removed.push(p);
                }
            }
            for (tp, stray) in loaded {
                let dir = &self.log_dirs[stray.dir_index];
                drop(stray.log);
                match set_aside(dir, &tp, STRAY_SUFFIX, self.clock.as_ref()) {
                    Ok(path) => warn!(
                        partition = %tp,
                        moved_to = ?path,
                        "log of a partition this broker does not host set aside (kept for an operator)"
                    ),
                    Err(e) => {
                        warn!(partition = %tp, error = %e, "cannot set aside a stray log directory")
                    }
                }
            }
            let deleted: Vec<String> = old_image
                .topics()
                .values()
                .filter(|t| !image.topics().contains_key(&t.id))
                .map(|t| t.name.clone())
                .collect();
            if !deleted.is_empty() {
                self.coordinator.topics_deleted(deleted);
            }
            state.image = image;
            state.logs_loaded = true;
        }
        for (partition, commands) in pending {
            self.execute(&partition, commands);
        }
        if !removed.is_empty() || replaced {
            self.remove_partition_dirs(&removed);
            // Drop the deleted partitions from the checkpoints now, so a recreated topic of
            // the same name never inherits their recovery point or log start offset.
            if let Err(e) = self.checkpoint() {
                warn!(error = %e, "checkpoint after partition removal failed");
            }
        }
        self.run_deferred_dir_failures();
        self.image_changed.send_modify(|v| *v = v.wrapping_add(1));
        self.notify_data_changed();
        Ok(())
    }

    /// Recovers every log before the broker registers, with the topic configs of `image` (the
    /// metadata as of now, fetched without a registration), so that after an unclean shutdown
    /// the recovery overlaps the wait for the previous incarnation's session to expire (the
    /// controller refuses the registration until then). The first image applied after the
    /// registration claims these logs instead of loading them again, re-checking their topic
    /// ids against that image. Returns how many logs it holds. Blocking (file IO).
    pub fn preload_logs(&self, image: &ClusterImage) -> anyhow::Result<usize> {
        let recovered = self.recover_all_logs(image, self.clock.now_ms());
        self.run_deferred_dir_failures();
        let recovered = recovered?;
        let count = recovered.len();
        let mut state = self.lock_state();
        if state.logs_loaded {
            // Too late: the logs were loaded meanwhile (the runtime applies no image before
            // the preload ended, so only another caller could get here); these handles are
            // dropped unused.
            return Ok(0);
        }
        state.preloaded = Some(recovered);
        Ok(count)
    }

    /// Reads every log directory once: recovery after an unclean shutdown (topic configs from
    /// `image`), the test-only data-loss knob, and each log's recorded topic id.
    fn recover_all_logs(&self, image: &ClusterImage, now_ms: i64) -> anyhow::Result<PreloadedLogs> {
        let clean = matches!(
            self.previous_shutdown,
            super::PreviousShutdown::Clean { .. }
        );
        let config_for = |tp: &TopicPartition| {
            let configs = image
                .topic_id(&tp.topic)
                .and_then(|id| image.topic(id))
                .map(|t| t.configs.clone())
                .unwrap_or_default();
            effective_config(image, &configs, &self.config).log_config()
        };
        let mut loaded = BTreeMap::new();
        for (dir_index, dir) in self.log_dirs.iter().enumerate() {
            if !self.log_dir_online(dir_index) {
                continue;
            }
            let found =
                match dir.load_logs_except(clean, now_ms, &config_for, CONTROLLER_PARTITION_DIRS) {
                    Ok(found) => found,
                    // A directory that fails while loading is offline; the others load.
                    Err(e) if e.is_fatal() => {
                        self.defer_dir_failure(dir_index, e.to_string());
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
            for (tp, mut log) in found.logs {
                if !clean && log.config().test_record_flushed_offset {
                    if let Some(offset) = log.truncate_to_recorded_flush(now_ms)? {
                        warn!(
                            partition = %tp,
                            %offset,
                            "fault injection ({}): truncated the log to its last flush",
                            crate::topic_config::TEST_LOSE_UNFLUSHED_KEY
                        );
                    }
                }
                if log.recovery_report().quarantine.is_some() {
                    self.metrics.storage.count_damage("recovery");
                }
                if log.recovery_report().lost_data() {
                    self.recovery_lost_data
                        .store(true, std::sync::atomic::Ordering::Release);
                }
                let recorded_topic_id = read_partition_metadata(dir, &tp);
                let high_watermark = found
                    .high_watermarks
                    .get(&tp)
                    .copied()
                    .unwrap_or_default()
                    .min(log.log_end_offset());
                loaded.insert(
                    tp,
                    LoadedLog {
                        dir_index,
                        log,
                        high_watermark,
                        recorded_topic_id,
                    },
                );
            }
        }
        Ok(loaded)
    }

    /// The topic-id check of `partition.metadata`: a log whose recorded topic id is not the
    /// id `image` gives its topic name belongs to an earlier topic of that name and is set
    /// aside (kept for an operator), never taken for the new topic.
    fn set_aside_other_topics(
        &self,
        logs: PreloadedLogs,
        image: &ClusterImage,
    ) -> anyhow::Result<PreloadedLogs> {
        let mut kept = BTreeMap::new();
        for (tp, loaded) in logs {
            let current = image.topic_id(&tp.topic).map(|id| id.0);
            if let (Some(recorded), Some(current)) = (loaded.recorded_topic_id, current) {
                if recorded != current {
                    warn!(partition = %tp, %recorded, %current,
                        "log belongs to an earlier topic of the same name");
                    let dir = &self.log_dirs[loaded.dir_index];
                    drop(loaded);
                    set_aside(dir, &tp, STRAY_SUFFIX, self.clock.as_ref())?;
                    continue;
                }
            }
            kept.insert(tp, loaded);
        }
        Ok(kept)
    }

    /// A new hosted partition: the log found at start, or a new empty one.
    #[allow(clippy::too_many_arguments)]
    fn host(
        &self,
        tp: &TopicPartition,
        topic_id: Uuid,
        loaded: Option<LoadedLog>,
        state: &super::State,
        config: Arc<EffectiveTopicConfig>,
        partition_state: &PartitionState,
        now_ms: i64,
    ) -> anyhow::Result<Arc<Partition>> {
        let (dir_index, log, high_watermark) = match loaded {
            Some(l) => {
                // Recovered with the configs of an earlier image when it was preloaded: the
                // topic's config may have changed since (retention and compaction read it).
                let mut log = l.log;
                log.set_config(config.log_config())?;
                (l.dir_index, log, l.high_watermark)
            }
            None => {
                // A directory left by an earlier topic of this name is never reused.
                for dir in &self.log_dirs {
                    set_aside(dir, tp, STRAY_SUFFIX, self.clock.as_ref())?;
                }
                let online: Vec<bool> = (0..self.log_dirs.len())
                    .map(|i| self.log_dir_online(i))
                    .collect();
                let index = pick_log_dir(&online, &state.partitions).ok_or_else(|| {
                    anyhow::anyhow!("partition {tp}: every log directory is offline")
                })?;
                let log = self.log_dirs[index].create_log(tp, config.log_config(), now_ms)?;
                (index, log, Offset(0))
            }
        };
        write_partition_metadata(&self.log_dirs[dir_index], tp, topic_id)?;
        let follower = FollowerPartition::new(
            repl::BrokerId(self.config.node_id),
            repl::BrokerEpoch(self.broker_epoch()),
            None,
            repl::LeaderEpoch(-1),
            repl::Offset(log.log_end_offset().0),
            repl::Offset(
                high_watermark
                    .0
                    .clamp(log.log_start_offset().0, log.log_end_offset().0),
            ),
            self.replication_config(&config),
        )
        .map_err(|e| anyhow::anyhow!("partition {tp}: {e}"))?;
        info!(partition = %tp, leader = ?partition_state.leader.map(|b| b.0),
            leader_epoch = partition_state.leader_epoch.0, log_end_offset = %log.log_end_offset(),
            "hosting partition");
        Ok(Arc::new(Partition::new(
            tp.clone(),
            topic_id,
            dir_index,
            log,
            high_watermark,
            Replica::Follower(follower),
            config,
        )))
    }

    /// The replication settings of a partition.
    pub(super) fn replication_config(&self, config: &EffectiveTopicConfig) -> ReplicationConfig {
        ReplicationConfig {
            min_insync_replicas: usize::try_from(config.min_insync_replicas()).unwrap_or(1),
            replica_lag_time_max_ms: self.config.replica_lag_time_max_ms,
            replica_fetch_backoff_ms: self.config.replica_fetch_backoff_ms,
            ..ReplicationConfig::default()
        }
    }

    /// Brings the partition's role in line with the image; returns leader commands to run.
    #[allow(clippy::too_many_arguments)]
    fn set_role(
        &self,
        partition: &Arc<Partition>,
        ctp: CTopicPartition,
        state: &PartitionState,
        image: &ClusterImage,
        old_image: &ClusterImage,
        config: &EffectiveTopicConfig,
        now: u64,
    ) -> Vec<Command> {
        let local = repl::BrokerId(self.config.node_id);
        let meta = partition_metadata(state);
        let replication = self.replication_config(config);
        let mut replica = partition.lock_replica();
        let mut commands = Vec::new();
        self.settle_damage(partition, state, image.elr_enabled());
        if meta.leader == Some(local) && partition.health() != StorageHealth::Healthy {
            // A replica that lost data leads only once the controller knows (issue 19): it
            // keeps reporting itself lost meanwhile, and the controller elects someone else.
            if let Replica::Follower(follower) = &mut *replica {
                if meta.leader_epoch > follower.leader_epoch() {
                    follower.on_leader_change(None, meta.leader_epoch);
                    warn!(partition = %partition.tp, leader_epoch = meta.leader_epoch.0,
                        health = ?partition.health(),
                        "elected leader, but this replica lost data: not leading until the controller has taken it out of the ISR and ELR");
                }
            }
            return commands;
        }
        if meta.leader == Some(local) {
            if let Replica::Leader(leader) = &mut *replica {
                if !leader.has_ended() && leader.leader_epoch() == meta.leader_epoch {
                    // An ISR change the controller made (fencing, controlled shutdown) or this
                    // leader's own, if its answer has not arrived yet: counted once either way.
                    let isr_before = leader.isr().clone();
                    commands.extend(leader.on_partition_metadata(&meta, now));
                    self.metrics.count_isr_change(&isr_before, leader.isr());
                    // A replica a reassignment just added may have registered again while it
                    // was no replica here: this leader's view of it is then stale.
                    let old_replicas = old_image.partition(ctp).map(|p| p.replicas.clone());
                    for broker in &meta.replicas {
                        let id = CBrokerId(broker.0);
                        let new = image.broker(id).map(registration);
                        let added = old_replicas.as_ref().is_some_and(|r| !r.contains(&id));
                        if *broker != local
                            && (added || old_image.broker(id).map(registration) != new)
                        {
                            commands.extend(leader.on_broker_registration(*broker, new, now));
                        }
                    }
                    if old_image.partition(ctp).is_some()
                        && old_image.effective_min_isr(ctp.topic)
                            != image.effective_min_isr(ctp.topic)
                    {
                        commands.extend(
                            leader.on_min_insync_replicas(replication.min_insync_replicas, now),
                        );
                    }
                    return commands;
                }
                // A newer leader epoch of our own leadership: end the old one first (its
                // waiting requests are answered NOT_LEADER_OR_FOLLOWER and retried).
                commands.extend(leader.on_partition_metadata(&meta, now));
            }
            match self.new_leader(partition, meta.clone(), image, replication, now) {
                Ok(mut leader) => {
                    info!(partition = %partition.tp, leader_epoch = meta.leader_epoch.0,
                        isr = ?meta.isr, "became leader");
                    if state.leader_recovery_state
                        == keel_controller::types::LeaderRecoveryState::Recovering
                    {
                        self.hold_stranded_transactions(partition, meta.leader_epoch.0);
                    }
                    // A leader alone in its ISR (at min ISR) commits its log at once.
                    commands.extend(leader.tick(now));
                    *replica = Replica::Leader(Box::new(leader));
                }
                Err(e) => {
                    warn!(partition = %partition.tp, error = %e, "cannot become leader");
                    if let Some(e) = e
                        .downcast_ref::<keel_log::LogError>()
                        .filter(|e| e.is_fatal())
                    {
                        self.defer_dir_failure(partition.log_dir_index, e.to_string());
                    }
                }
            }
            return commands;
        }
        match &mut *replica {
            Replica::Follower(follower) => {
                if meta.leader_epoch > follower.leader_epoch() {
                    follower.on_leader_change(meta.leader, meta.leader_epoch);
                    info!(partition = %partition.tp, leader = ?meta.leader.map(|b| b.0),
                        leader_epoch = meta.leader_epoch.0, "following");
                }
            }
            Replica::Leader(leader) => {
                if meta.leader_epoch < leader.leader_epoch() {
                    return commands;
                }
                commands.extend(leader.on_partition_metadata(&meta, now));
                let (log_end_offset, high_watermark) = match partition.lock_log() {
                    Ok(mut log) => {
                        // In-doubt marks are the leader's: a follower checks nothing.
                        log.clear_transactions_in_doubt();
                        (log.log_end_offset(), partition.high_watermark())
                    }
                    Err(_) => return commands,
                };
                match FollowerPartition::new(
                    local,
                    repl::BrokerEpoch(self.broker_epoch()),
                    meta.leader,
                    meta.leader_epoch,
                    repl::Offset(log_end_offset.0),
                    repl::Offset(high_watermark.0.min(log_end_offset.0)),
                    replication,
                ) {
                    Ok(follower) => {
                        info!(partition = %partition.tp, leader = ?meta.leader.map(|b| b.0),
                            leader_epoch = meta.leader_epoch.0, "leadership moved: following");
                        *replica = Replica::Follower(follower);
                    }
                    Err(e) => {
                        warn!(partition = %partition.tp, error = %e, "cannot become follower")
                    }
                }
            }
        }
        commands
    }

    /// A damaged replica is trusted again once the image shows the controller acted on its
    /// report — it is out of the ISR and ELR in a partition state newer than the one it found
    /// the damage in (its image may lag: the leader may have added it to the ISR, from its
    /// fetches before the damage, in a state it has not applied yet) — or chose it in an
    /// unclean recovery (which knows it may lack data: its leader recovery state is
    /// RECOVERING). Under classic rules
    /// (ELR off) the controller never takes the last ISR member out: Kafka elects it again
    /// whatever it lost, so elected as the only ISR member it leads with the log it has —
    /// waiting would leave the partition leaderless for good.
    fn settle_damage(&self, partition: &Partition, state: &PartitionState, elr_enabled: bool) {
        if partition.health() != StorageHealth::Damaged {
            return;
        }
        let local = CBrokerId(self.config.node_id);
        let eligible =
            state.isr.contains(&local) || state.elr.contains(&local) || state.leader == Some(local);
        let newer = i64::from(state.partition_epoch.0) > partition.damaged_at();
        let recovered_here = state.leader == Some(local)
            && state.leader_recovery_state
                == keel_controller::types::LeaderRecoveryState::Recovering;
        let classic_last_member = !elr_enabled
            && state.leader == Some(local)
            && state.isr.iter().eq(std::iter::once(&local));
        if (!eligible && newer) || recovered_here || classic_last_member {
            partition.set_health(StorageHealth::Healthy);
            info!(partition = %partition.tp, leader_epoch = state.leader_epoch.0,
                "the controller took the damaged replica out of the ISR and ELR: it may rejoin once caught up");
        }
    }

    fn new_leader(
        &self,
        partition: &Partition,
        meta: PartitionMetadata,
        image: &ClusterImage,
        config: ReplicationConfig,
        now: u64,
    ) -> anyhow::Result<LeaderPartition> {
        let mut log = partition.lock_log()?;
        // As a new leader does (Kafka's maybeAssignEpochStartOffset): the epoch starts at the
        // log end offset, so OffsetForLeaderEpoch and divergence checks answer it at once.
        log.assign_epoch_start_offset(keel_log::LeaderEpoch(meta.leader_epoch.0))?;
        let log_end_offset = repl::Offset(log.log_end_offset().0);
        let log_start_offset = repl::Offset(log.log_start_offset().0);
        // Kafka's invariant: log start offset ≤ high watermark ≤ log end offset.
        let high_watermark = repl::Offset(
            partition
                .high_watermark()
                .0
                .clamp(log_start_offset.0, log_end_offset.0),
        );
        let brokers = image
            .brokers()
            .iter()
            .map(|(id, r)| (repl::BrokerId(id.0), registration(r)))
            .collect();
        let leader = LeaderPartition::new(
            LeaderInit {
                local: repl::BrokerId(self.config.node_id),
                local_broker_epoch: repl::BrokerEpoch(self.broker_epoch()),
                metadata: meta,
                log_start_offset,
                log_end_offset,
                leader_epoch_start_offset: log_end_offset,
                high_watermark,
                brokers,
                config,
            },
            now,
        )?;
        Ok(leader)
    }

    /// Stops hosting partitions (topic deleted or replica reassigned away): waiting requests
    /// are answered, the log is closed to every operation, and its directory removed. Takes no
    /// broker lock (it runs under the state lock too).
    fn remove_partition_dirs(&self, removed: &[Arc<Partition>]) {
        for partition in removed {
            partition.fail_all_waiters(ErrorCode::NotLeaderOrFollower);
            partition.mark_deleted();
            let dir = &self.log_dirs[partition.log_dir_index];
            // The directory under this name may already belong to a newer topic of the same
            // name: only the partition's own log is removed.
            if read_partition_metadata(dir, &partition.tp)
                .is_some_and(|id| id != partition.topic_id)
            {
                continue;
            }
            let result = set_aside(dir, &partition.tp, DELETE_SUFFIX, self.clock.as_ref())
                .and_then(|moved| moved.map_or(Ok(()), |path| dir.storage().remove_dir_all(&path)));
            match result {
                Ok(()) => info!(partition = %partition.tp, "deleted partition"),
                Err(e) => {
                    warn!(partition = %partition.tp, error = %e, "cannot delete log directory")
                }
            }
        }
    }
}

/// The replication core's view of a registration.
fn registration(r: &keel_controller::image::BrokerRegistration) -> BrokerRegistration {
    BrokerRegistration {
        epoch: repl::BrokerEpoch(r.epoch.0),
        fenced: r.state == BrokerState::Fenced,
        in_controlled_shutdown: r.state == BrokerState::ControlledShutdown,
    }
}

/// The replication core's view of a partition's state.
fn partition_metadata(state: &PartitionState) -> PartitionMetadata {
    PartitionMetadata {
        leader: state.leader.map(|b| repl::BrokerId(b.0)),
        leader_epoch: repl::LeaderEpoch(state.leader_epoch.0),
        partition_epoch: repl::PartitionEpoch(state.partition_epoch.0),
        replicas: state.replicas.iter().map(|b| repl::BrokerId(b.0)).collect(),
        isr: state.isr.iter().map(|b| repl::BrokerId(b.0)).collect(),
    }
}

/// The online log directory holding the fewest partitions (`None` if none is online).
fn pick_log_dir(
    online: &[bool],
    partitions: &BTreeMap<TopicPartition, Arc<Partition>>,
) -> Option<usize> {
    let mut counts = vec![0usize; online.len()];
    for p in partitions.values() {
        if let Some(c) = counts.get_mut(p.log_dir_index) {
            *c += 1;
        }
    }
    counts
        .iter()
        .enumerate()
        .filter(|(i, _)| online[*i])
        .min_by_key(|(_, c)| **c)
        .map(|(i, _)| i)
}

/// Renames a partition directory out of the way, to `<topic>-<partition>.<id>-<suffix>` (a
/// name that is never loaded as a partition), durably. `None` if there is no such directory.
/// The id comes from `clock`, drawn only when there is a directory to move.
fn set_aside(
    dir: &LogDir,
    tp: &TopicPartition,
    suffix: &str,
    clock: &dyn Clock,
) -> std::io::Result<Option<PathBuf>> {
    let path = dir.partition_dir(tp);
    if !dir.storage().exists(&path)? {
        return Ok(None);
    }
    let target = dir.path().join(format!(
        "{}.{}-{suffix}",
        tp.dir_name(),
        clock.new_uuid().simple()
    ));
    dir.storage().rename(&path, &target)?;
    dir.storage().sync_dir(dir.path())?;
    Ok(Some(target))
}

/// Removes what an interrupted deletion left behind.
pub(super) fn remove_deleted_dirs(dir: &LogDir) -> std::io::Result<()> {
    let suffix = format!("-{DELETE_SUFFIX}");
    for entry in dir.storage().list_dir(dir.path())? {
        if entry.is_dir && entry.name.ends_with(&suffix) {
            dir.storage()
                .remove_dir_all(&dir.path().join(&entry.name))?;
        }
    }
    Ok(())
}

/// The topic id recorded in a partition directory, if any (unreadable = none).
fn read_partition_metadata(dir: &LogDir, tp: &TopicPartition) -> Option<Uuid> {
    let path = dir.partition_dir(tp).join(PARTITION_METADATA_FILE);
    let bytes = keel_log::storage::read_file_if_exists(dir.storage().as_ref(), &path).ok()??;
    let text = String::from_utf8(bytes).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("topic_id:"))
        .and_then(|id| keel_log::decode_kafka_uuid(id.trim()))
}

/// Records the topic id in the partition directory (Kafka's `partition.metadata`), once.
fn write_partition_metadata(
    dir: &LogDir,
    tp: &TopicPartition,
    topic_id: Uuid,
) -> std::io::Result<()> {
    if read_partition_metadata(dir, tp) == Some(topic_id) {
        return Ok(());
    }
    let path = dir.partition_dir(tp).join(PARTITION_METADATA_FILE);
    let text = format!(
        "version: 0\ntopic_id: {}\n",
        keel_log::encode_kafka_uuid(topic_id)
    );
    keel_log::storage::write_file_atomically(dir.storage().as_ref(), &path, text.as_bytes())
}
