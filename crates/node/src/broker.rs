//! The broker: hosted partitions, topic metadata, and the lifecycle (open with recovery,
//! orderly shutdown with the clean-shutdown file).
//!
//! Request handlers (in [`crate::handlers`]) call into this type; it owns every piece of
//! mutable broker state. Locks are held briefly and never across an `.await`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use keel_log::storage::Storage;
use keel_log::{LeaderEpoch, Log, LogDir, PartitionCheckpoint, TopicPartition};
use keel_wire::ResponseError;
use tokio::sync::watch;
use tracing::{info, warn};
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::metadata::{LocalMetadata, MetadataStore, PartitionMeta, TopicMeta};
use crate::partition::Partition;
use crate::topic_config::{self, EffectiveTopicConfig};

/// Longest legal topic name (Kafka's limit).
pub const TOPIC_NAME_MAX_LEN: usize = 249;

/// Most partitions one CreateTopics / CreatePartitions may ask for on this broker (a guard
/// against a typo creating millions of files).
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// Mutable broker state, behind one lock.
#[derive(Debug)]
struct State {
    metadata: LocalMetadata,
    partitions: BTreeMap<TopicPartition, Arc<Partition>>,
}

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub broker_epoch: i64,
    /// How the previous run ended, as detected at open.
    pub previous_shutdown: PreviousShutdown,
    pub clock: Arc<dyn Clock>,
    storage: Arc<dyn Storage>,
    log_dirs: Vec<LogDir>,
    metadata_store: MetadataStore,
    state: Mutex<State>,
    /// Bumped whenever a high watermark advances, so long-polling fetches wake up.
    data_changed: watch::Sender<u64>,
}

/// Whether the previous run ended with an orderly shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviousShutdown {
    Clean { broker_epoch: i64 },
    Unclean,
}

impl Broker {
    /// Opens the log directories (which must have been formatted for this node), detects
    /// whether the last shutdown was clean, recovers the logs if it was not, and registers a
    /// new broker epoch.
    pub fn open(
        config: BrokerConfig,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Broker> {
        let mut log_dirs = Vec::new();
        let mut cluster_id: Option<String> = None;
        for path in &config.log_dirs {
            let dir = LogDir::open(storage.clone(), path, cluster_id.as_deref(), config.node_id)?;
            cluster_id.get_or_insert_with(|| dir.meta().cluster_id.clone());
            log_dirs.push(dir);
        }
        let cluster_id = cluster_id.expect("config has at least one log dir");
        let metadata_store = MetadataStore::new(storage.clone(), &config.log_dirs[0]);
        let mut metadata = metadata_store.load()?;

        let previous = Self::detect_previous_shutdown(&log_dirs, metadata.broker_epoch)?;
        let clean = matches!(previous, PreviousShutdown::Clean { .. });
        match previous {
            PreviousShutdown::Clean { broker_epoch } => info!(
                broker_epoch,
                "clean shutdown file found (broker epoch {broker_epoch}): skipping log recovery"
            ),
            PreviousShutdown::Unclean if metadata.broker_epoch == 0 => {
                info!("no clean shutdown file: first start on these log directories")
            }
            PreviousShutdown::Unclean => {
                info!("no clean shutdown file: recovering logs from their recovery points")
            }
        }
        metadata.broker_epoch += 1;
        metadata_store.save(&metadata)?;

        let now_ms = clock.now_ms();
        let mut partitions = BTreeMap::new();
        let mut loaded: BTreeMap<TopicPartition, (usize, Log)> = BTreeMap::new();
        let log_configs = Self::log_configs(&config, &metadata);
        let config_for = |tp: &TopicPartition| {
            log_configs.get(&tp.topic).cloned().unwrap_or_else(|| {
                EffectiveTopicConfig::resolve(&BTreeMap::new(), &config.topic_defaults).log_config()
            })
        };
        for (index, dir) in log_dirs.iter().enumerate() {
            remove_deleted_dirs(dir)?;
            let found = dir.load_logs(clean, now_ms, &config_for)?;
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
                loaded.insert(tp, (index, log));
            }
        }
        for topic in metadata.topics.values() {
            let effective = Arc::new(EffectiveTopicConfig::resolve(
                &topic.configs,
                &config.topic_defaults,
            ));
            for p in &topic.partitions {
                let tp = TopicPartition::new(topic.name.clone(), p.index);
                let (dir_index, log) = match loaded.remove(&tp) {
                    Some(found) => found,
                    None => {
                        warn!(partition = %tp, "log missing for a known partition: starting it empty");
                        let index = Self::pick_log_dir(&log_dirs, &partitions);
                        let log =
                            log_dirs[index].create_log(&tp, effective.log_config(), now_ms)?;
                        (index, log)
                    }
                };
                let partition = Partition::new(
                    tp.clone(),
                    topic.id,
                    dir_index,
                    log,
                    LeaderEpoch(p.leader_epoch),
                    p.replicas.len(),
                    effective.clone(),
                );
                partitions.insert(tp, Arc::new(partition));
            }
        }
        for (tp, (index, log)) in loaded {
            drop(log);
            match set_aside(&log_dirs[index], &tp, STRAY_SUFFIX) {
                Ok(path) => warn!(
                    partition = %tp,
                    moved_to = ?path,
                    "log directory of an unknown partition set aside (kept for an operator)"
                ),
                Err(e) => {
                    warn!(partition = %tp, error = %e, "cannot set aside a stray log directory")
                }
            }
        }
        let (data_changed, _) = watch::channel(0);
        Ok(Broker {
            broker_epoch: metadata.broker_epoch,
            previous_shutdown: previous,
            config,
            cluster_id,
            clock,
            storage,
            log_dirs,
            metadata_store,
            state: Mutex::new(State {
                metadata,
                partitions,
            }),
            data_changed,
        })
    }

    fn log_configs(
        config: &BrokerConfig,
        metadata: &LocalMetadata,
    ) -> BTreeMap<String, keel_log::LogConfig> {
        metadata
            .topics
            .values()
            .map(|t| {
                let effective = EffectiveTopicConfig::resolve(&t.configs, &config.topic_defaults);
                (t.name.clone(), effective.log_config())
            })
            .collect()
    }

    /// KIP-966 "Detection of an unclean shutdown": clean only if every log directory has the
    /// clean-shutdown file and each holds the broker epoch of the previous run.
    fn detect_previous_shutdown(
        log_dirs: &[LogDir],
        registered_epoch: i64,
    ) -> anyhow::Result<PreviousShutdown> {
        let mut epochs = Vec::new();
        for dir in log_dirs {
            epochs.push(dir.read_and_remove_clean_shutdown()?);
        }
        let all_match = epochs.iter().all(|e| *e == Some(registered_epoch));
        if all_match && registered_epoch > 0 {
            return Ok(PreviousShutdown::Clean {
                broker_epoch: registered_epoch,
            });
        }
        if epochs.iter().any(Option::is_some) {
            warn!(
                ?epochs,
                registered_epoch,
                "clean shutdown files do not match the registered broker epoch: treating the last shutdown as unclean"
            );
        }
        Ok(PreviousShutdown::Unclean)
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("broker state lock poisoned")
    }

    fn pick_log_dir(
        log_dirs: &[LogDir],
        partitions: &BTreeMap<TopicPartition, Arc<Partition>>,
    ) -> usize {
        let mut counts = vec![0usize; log_dirs.len()];
        for p in partitions.values() {
            counts[p.log_dir_index] += 1;
        }
        counts
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| **c)
            .map_or(0, |(i, _)| i)
    }

    /// A receiver that changes whenever any high watermark advances.
    pub fn subscribe_data_changes(&self) -> watch::Receiver<u64> {
        self.data_changed.subscribe()
    }

    /// Wakes long-polling fetches.
    pub fn notify_data_changed(&self) {
        self.data_changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The hosted partition, if any.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let state = self.lock_state();
        state
            .partitions
            .get(&TopicPartition::new(topic.to_string(), index))
            .cloned()
    }

    /// All partitions (for background work).
    pub fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.lock_state().partitions.values().cloned().collect()
    }

    /// A snapshot of one topic's metadata.
    pub fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.lock_state().metadata.topics.get(name).cloned()
    }

    /// The topic with this id.
    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicMeta> {
        self.lock_state()
            .metadata
            .topics
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// A snapshot of every topic, sorted by name.
    pub fn topics(&self) -> Vec<TopicMeta> {
        self.lock_state()
            .metadata
            .topics
            .values()
            .cloned()
            .collect()
    }

    /// The effective config of a topic.
    pub fn topic_config(&self, topic: &TopicMeta) -> EffectiveTopicConfig {
        EffectiveTopicConfig::resolve(&topic.configs, &self.config.topic_defaults)
    }

    /// Creates a topic. With `validate_only` nothing changes; the checks are the same.
    pub fn create_topic(
        &self,
        name: &str,
        num_partitions: Option<i32>,
        replication_factor: Option<i16>,
        configs: &BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<TopicMeta, ApiError> {
        validate_topic_name(name)?;
        let num_partitions = num_partitions.unwrap_or(self.config.num_partitions);
        if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&num_partitions) {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("number of partitions must be between 1 and {PARTITIONS_PER_TOPIC_MAX}, got {num_partitions}"),
            ));
        }
        let replication_factor =
            replication_factor.unwrap_or(self.config.default_replication_factor);
        if replication_factor != 1 {
            return Err(ApiError::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} is larger than the number of available brokers (1)"
                ),
            ));
        }
        let configs = validate_topic_configs(configs)?;
        let mut state = self.lock_state();
        if state.metadata.topics.contains_key(name) {
            return Err(ApiError::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        if let Some(existing) = colliding_topic(&state.metadata, name) {
            return Err(ApiError::new(
                ResponseError::InvalidTopicException,
                format!("Topic '{name}' collides with existing topic '{existing}' ('.' and '_' are interchangeable in metric names)"),
            ));
        }
        let topic = TopicMeta {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions: (0..num_partitions)
                .map(|index| PartitionMeta {
                    index,
                    replicas: vec![self.config.node_id],
                    leader_epoch: 0,
                    partition_epoch: 0,
                })
                .collect(),
            configs,
        };
        if validate_only {
            return Ok(topic);
        }
        self.add_partitions_locked(&mut state, &topic, &topic.partitions)?;
        state
            .metadata
            .topics
            .insert(name.to_string(), topic.clone());
        self.persist_locked(&state)?;
        info!(topic = name, partitions = num_partitions, "created topic");
        Ok(topic)
    }

    fn add_partitions_locked(
        &self,
        state: &mut State,
        topic: &TopicMeta,
        new: &[PartitionMeta],
    ) -> Result<(), ApiError> {
        let effective = Arc::new(self.topic_config(topic));
        let now_ms = self.clock.now_ms();
        for p in new {
            let tp = TopicPartition::new(topic.name.clone(), p.index);
            // A directory left by an earlier topic of this name is never reused.
            for dir in &self.log_dirs {
                set_aside(dir, &tp, STRAY_SUFFIX)
                    .map_err(|e| ApiError::new(ResponseError::KafkaStorageError, e.to_string()))?;
            }
            let index = Self::pick_log_dir(&self.log_dirs, &state.partitions);
            let log = self.log_dirs[index]
                .create_log(&tp, effective.log_config(), now_ms)
                .map_err(|e| {
                    warn!(partition = %tp, error = %e, "cannot create log");
                    ApiError::new(ResponseError::KafkaStorageError, e.to_string())
                })?;
            let partition = Partition::new(
                tp.clone(),
                topic.id,
                index,
                log,
                LeaderEpoch(p.leader_epoch),
                p.replicas.len(),
                effective.clone(),
            );
            state.partitions.insert(tp, Arc::new(partition));
        }
        Ok(())
    }

    fn persist_locked(&self, state: &State) -> Result<(), ApiError> {
        self.metadata_store.save(&state.metadata).map_err(|e| {
            warn!(error = %e, "cannot persist metadata");
            ApiError::new(ResponseError::KafkaStorageError, e.to_string())
        })
    }

    /// Deletes a topic and its logs.
    pub fn delete_topic(&self, name: &str) -> Result<TopicMeta, ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::new(
                ResponseError::TopicDeletionDisabled,
                "delete.topic.enable is false",
            ));
        }
        let mut removed = Vec::new();
        let topic = {
            let mut state = self.lock_state();
            let Some(topic) = state.metadata.topics.remove(name) else {
                return Err(ApiError::new(
                    ResponseError::UnknownTopicOrPartition,
                    format!("Topic '{name}' does not exist."),
                ));
            };
            // The deletion is decided once it is durable; the directories follow. A crash in
            // between leaves stray directories, which the next start sets aside, never reuses.
            self.persist_locked(&state)?;
            for p in &topic.partitions {
                let tp = TopicPartition::new(name.to_string(), p.index);
                if let Some(partition) = state.partitions.remove(&tp) {
                    partition.mark_deleted();
                    removed.push(partition);
                }
            }
            topic
        };
        for partition in &removed {
            let dir = &self.log_dirs[partition.log_dir_index];
            let result = set_aside(dir, &partition.tp, DELETE_SUFFIX)
                .and_then(|moved| moved.map_or(Ok(()), |path| dir.storage().remove_dir_all(&path)));
            if let Err(e) = result {
                warn!(partition = %partition.tp, error = %e, "cannot delete log directory");
            }
        }
        // Drop the deleted partitions from the checkpoints now, so a recreated topic of the
        // same name never inherits their recovery point or log start offset.
        if let Err(e) = self.checkpoint() {
            warn!(error = %e, "checkpoint after topic deletion failed");
        }
        info!(topic = name, "deleted topic");
        Ok(topic)
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let mut state = self.lock_state();
        let Some(topic) = state.metadata.topics.get(name).cloned() else {
            return Err(ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            ));
        };
        let current = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
        if count <= current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("Topic currently has {current} partitions, which is higher than or equal to the requested {count}."),
            ));
        }
        if count > PARTITIONS_PER_TOPIC_MAX {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!("at most {PARTITIONS_PER_TOPIC_MAX} partitions per topic"),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let new: Vec<PartitionMeta> = (current..count)
            .map(|index| PartitionMeta {
                index,
                replicas: vec![self.config.node_id],
                leader_epoch: 0,
                partition_epoch: 0,
            })
            .collect();
        self.add_partitions_locked(&mut state, &topic, &new)?;
        let entry = state
            .metadata
            .topics
            .get_mut(name)
            .expect("topic checked above under the same lock");
        entry.partitions.extend(new);
        self.persist_locked(&state)?;
        info!(topic = name, partitions = count, "added partitions");
        Ok(())
    }

    /// Replaces a topic's config overrides (already validated by the caller's operation
    /// semantics; validated again here).
    pub fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.update_topic_configs(name, validate_only, |_| Ok(configs))
    }

    /// Replaces a topic's config overrides with what `update` computes from the current ones,
    /// atomically: concurrent updates of one topic see each other's results.
    pub fn update_topic_configs(
        &self,
        name: &str,
        validate_only: bool,
        update: impl FnOnce(&TopicMeta) -> Result<BTreeMap<String, String>, ApiError>,
    ) -> Result<(), ApiError> {
        let mut state = self.lock_state();
        let Some(current) = state.metadata.topics.get(name) else {
            return Err(ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist."),
            ));
        };
        let configs = validate_topic_configs(&update(current)?)?;
        if validate_only {
            return Ok(());
        }
        let topic = {
            let topic = state
                .metadata
                .topics
                .get_mut(name)
                .expect("checked above under the same lock");
            topic.configs = configs;
            topic.clone()
        };
        self.persist_locked(&state)?;
        let effective = Arc::new(self.topic_config(&topic));
        for p in &topic.partitions {
            if let Some(partition) = state
                .partitions
                .get(&TopicPartition::new(name.to_string(), p.index))
            {
                if let Err(e) = partition.set_config(effective.clone()) {
                    warn!(partition = %partition.tp, error = %e, "cannot apply new topic config");
                }
            }
        }
        info!(topic = name, configs = ?topic.configs, "updated topic configs");
        Ok(())
    }

    /// Flushes logs whose `flush.ms` is due.
    pub fn flush_due_logs(&self) {
        let now_ms = self.clock.now_ms();
        for partition in self.all_partitions() {
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            if let Err(e) = log.flush_if_due(now_ms) {
                warn!(partition = %partition.tp, error = %e, "flush failed");
            }
        }
    }

    /// Deletes segments past `retention.ms` / `retention.bytes`.
    pub fn apply_retention(&self) {
        let now_ms = self.clock.now_ms();
        for partition in self.all_partitions() {
            let high_watermark = partition.high_watermark();
            let Ok(mut log) = partition.lock_log() else {
                continue;
            };
            match log.apply_retention(now_ms, high_watermark) {
                Ok(result) if !result.deleted.is_empty() => info!(
                    partition = %partition.tp,
                    segments = result.deleted.len(),
                    log_start_offset = %result.log_start_offset,
                    "retention deleted segments"
                ),
                Ok(_) => {}
                Err(e) => warn!(partition = %partition.tp, error = %e, "retention failed"),
            }
        }
    }

    /// Writes the recovery-point, high-watermark and log-start-offset checkpoints of every
    /// log directory.
    pub fn checkpoint(&self) -> anyhow::Result<()> {
        let partitions = self.all_partitions();
        for (index, dir) in self.log_dirs.iter().enumerate() {
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
            dir.checkpoint(&entries)?;
        }
        Ok(())
    }

    /// Orderly shutdown: flush every log, write checkpoints, then — last — the clean-shutdown
    /// file with this run's broker epoch in every log directory.
    pub fn shutdown(&self) -> anyhow::Result<()> {
        let partitions = self.all_partitions();
        let now_ms = self.clock.now_ms();
        for p in &partitions {
            if let Ok(mut log) = p.lock_log() {
                log.close(now_ms)?;
            }
        }
        self.checkpoint()?;
        for dir in &self.log_dirs {
            dir.write_clean_shutdown(self.broker_epoch)?;
        }
        info!(
            broker_epoch = self.broker_epoch,
            partitions = partitions.len(),
            "clean shutdown complete"
        );
        Ok(())
    }

    /// The storage the broker runs on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
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

fn colliding_topic<'a>(metadata: &'a LocalMetadata, name: &str) -> Option<&'a str> {
    let normalize = |s: &str| s.replace('.', "_");
    let wanted = normalize(name);
    metadata
        .topics
        .keys()
        .find(|existing| existing.as_str() != name && normalize(existing) == wanted)
        .map(String::as_str)
}

/// Validates and normalizes topic config overrides.
pub fn validate_topic_configs(
    configs: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    configs
        .iter()
        .map(|(name, value)| {
            topic_config::validate(name, value)
                .map(|v| (name.clone(), v))
                .map_err(|reason| {
                    ApiError::new(
                        ResponseError::InvalidConfig,
                        format!("Invalid value {value} for configuration {name}: {reason}"),
                    )
                })
        })
        .collect()
}

/// Suffix of a deleted partition's directory while it is being removed (Kafka's convention).
const DELETE_SUFFIX: &str = "delete";
/// Suffix of a directory that belongs to no known partition, kept for an operator.
const STRAY_SUFFIX: &str = "stray";

/// Renames a partition directory out of the way, to `<topic>-<partition>.<id>-<suffix>` (a
/// name that is never loaded as a partition), durably. `None` if there is no such directory.
fn set_aside(dir: &LogDir, tp: &TopicPartition, suffix: &str) -> std::io::Result<Option<PathBuf>> {
    let path = dir.partition_dir(tp);
    if !dir.storage().exists(&path)? {
        return Ok(None);
    }
    let target = dir.path().join(format!(
        "{}.{}-{suffix}",
        tp.dir_name(),
        Uuid::new_v4().simple()
    ));
    dir.storage().rename(&path, &target)?;
    dir.storage().sync_dir(dir.path())?;
    Ok(Some(target))
}

/// Removes what an interrupted topic deletion left behind.
fn remove_deleted_dirs(dir: &LogDir) -> std::io::Result<()> {
    let suffix = format!("-{DELETE_SUFFIX}");
    for entry in dir.storage().list_dir(dir.path())? {
        if entry.is_dir && entry.name.ends_with(&suffix) {
            dir.storage()
                .remove_dir_all(&dir.path().join(&entry.name))?;
        }
    }
    Ok(())
}
