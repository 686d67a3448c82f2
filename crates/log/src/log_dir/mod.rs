//! [`LogDir`]: one log directory (`log.dirs` entry) — its identity (`meta.properties`), its
//! clean-shutdown marker, its three offset checkpoint files, and the partition directories in
//! it. The broker formats it once (`keel format`), opens it at startup, loads every partition
//! log, checkpoints periodically, and writes the clean-shutdown marker last.

mod clean_shutdown;
mod meta;

#[cfg(test)]
mod tests;

pub use clean_shutdown::CLEAN_SHUTDOWN_FILE;
pub use meta::{decode_kafka_uuid, encode_kafka_uuid, MetaProperties, META_PROPERTIES_FILE};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use uuid::Uuid;

use crate::checkpoint::{read_offset_checkpoint, write_offset_checkpoint};
use crate::config::LogConfig;
use crate::error::LogError;
use crate::log::Log;
use crate::storage::{create_dir_all_durable, read_file_if_exists, write_file_atomically, Storage};
use crate::types::{Offset, TopicPartition};

/// Flushed offsets per partition (the recovery points).
pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// High watermarks per partition.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Log start offsets per partition.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";

/// An open, formatted log directory.
#[derive(Debug, Clone)]
pub struct LogDir {
    storage: Arc<dyn Storage>,
    path: PathBuf,
    meta: MetaProperties,
    /// The directory's `.lock`, held while this `LogDir` lives.
    _lock: Arc<crate::storage::DirLock>,
}

/// The offsets of one partition to checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionCheckpoint {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// Its log's recovery point.
    pub recovery_point: Offset,
    /// Its log start offset.
    pub log_start_offset: Offset,
    /// Its high watermark, if known.
    pub high_watermark: Option<Offset>,
}

impl PartitionCheckpoint {
    /// The checkpoint entry of `log` with high watermark `high_watermark`.
    pub fn of(
        topic_partition: TopicPartition,
        log: &Log,
        high_watermark: Option<Offset>,
    ) -> PartitionCheckpoint {
        PartitionCheckpoint {
            topic_partition,
            recovery_point: log.recovery_point(),
            log_start_offset: log.log_start_offset(),
            high_watermark,
        }
    }
}

/// A partition directory [`LogDir::load_logs`] did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedDir {
    /// The directory name.
    pub name: String,
    /// Why it was skipped.
    pub reason: String,
}

/// The result of [`LogDir::load_logs`].
#[derive(Debug)]
pub struct LoadedLogs {
    /// Every partition log, by partition.
    pub logs: BTreeMap<TopicPartition, Log>,
    /// The high watermarks from `replication-offset-checkpoint`.
    pub high_watermarks: BTreeMap<TopicPartition, Offset>,
    /// Subdirectories that are not partition directories.
    pub skipped: Vec<SkippedDir>,
}

impl LogDir {
    /// Formats `path` (created if missing) for `cluster_id` / `node_id` with `directory_id`
    /// (the caller draws it at random). Idempotent: if the directory is already formatted for the
    /// same cluster and node it is left alone and its existing identity (including its directory
    /// id) is returned. Formatted for another cluster or node: [`LogError::AlreadyFormatted`].
    pub fn format(
        storage: Arc<dyn Storage>,
        path: &Path,
        cluster_id: &str,
        node_id: i32,
        directory_id: Uuid,
    ) -> Result<MetaProperties, LogError> {
        if cluster_id.is_empty() || cluster_id.contains(|c: char| c.is_whitespace() || c == '=') {
            return Err(LogError::InvalidConfig {
                reason: format!(
                    "cluster id {cluster_id:?} must be non-empty without spaces or '='"
                ),
            });
        }
        if node_id < 0 {
            return Err(LogError::InvalidConfig {
                reason: format!("node id {node_id} must not be negative"),
            });
        }
        if let Some(existing) = read_meta(storage.as_ref(), path)? {
            if existing.cluster_id == cluster_id && existing.node_id == node_id {
                return Ok(existing);
            }
            return Err(LogError::AlreadyFormatted {
                path: path.to_path_buf(),
                cluster_id: cluster_id.to_string(),
                node_id,
                found_cluster_id: existing.cluster_id,
                found_node_id: existing.node_id,
            });
        }
        create_dir_all_durable(storage.as_ref(), path)
            .map_err(LogError::io("create directory", path))?;
        let meta = MetaProperties {
            cluster_id: cluster_id.to_string(),
            node_id,
            directory_id,
        };
        let file = path.join(META_PROPERTIES_FILE);
        write_file_atomically(storage.as_ref(), &file, meta.to_text().as_bytes())
            .map_err(LogError::io("write", &file))?;
        Ok(meta)
    }

    /// Opens a formatted directory, refusing one that is not formatted
    /// ([`LogError::NotFormatted`]) or belongs to another cluster (when `expected_cluster_id` is
    /// given) or node.
    pub fn open(
        storage: Arc<dyn Storage>,
        path: &Path,
        expected_cluster_id: Option<&str>,
        expected_node_id: i32,
    ) -> Result<LogDir, LogError> {
        let meta = read_meta(storage.as_ref(), path)?.ok_or_else(|| LogError::NotFormatted {
            path: path.to_path_buf(),
        })?;
        if let Some(expected) = expected_cluster_id.filter(|e| *e != meta.cluster_id) {
            return Err(LogError::ClusterIdMismatch {
                path: path.to_path_buf(),
                expected: expected.to_string(),
                found: meta.cluster_id,
            });
        }
        if meta.node_id != expected_node_id {
            return Err(LogError::NodeIdMismatch {
                path: path.to_path_buf(),
                expected: expected_node_id,
                found: meta.node_id,
            });
        }
        let lock = storage.lock_dir(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                LogError::Locked {
                    path: path.to_path_buf(),
                }
            } else {
                LogError::io("lock", path)(e)
            }
        })?;
        Ok(LogDir {
            storage,
            path: path.to_path_buf(),
            meta,
            _lock: Arc::new(lock),
        })
    }

    /// The directory path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The identity read from `meta.properties`.
    pub fn meta(&self) -> &MetaProperties {
        &self.meta
    }

    /// The storage this directory lives on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The directory of partition `tp`: `<log dir>/<topic>-<partition>`.
    pub fn partition_dir(&self, tp: &TopicPartition) -> PathBuf {
        self.path.join(tp.dir_name())
    }

    /// Creates the (empty) log of a new partition, durably. An existing log is opened as is.
    pub fn create_log(
        &self,
        tp: &TopicPartition,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<Log, LogError> {
        let dir = self.partition_dir(tp);
        create_dir_all_durable(self.storage.as_ref(), &dir)
            .map_err(LogError::io("create directory", &dir))?;
        let mut log = Log::open(
            self.storage.clone(),
            dir,
            config,
            Offset(0),
            Offset(0),
            true,
            now_ms,
        )?;
        log.flush(now_ms)?;
        Ok(log)
    }

    /// Deletes a partition's log and its directory, durably.
    pub fn delete_log(&self, log: Log) -> Result<(), LogError> {
        assert!(
            log.dir().parent() == Some(self.path.as_path()),
            "log {} is not in log directory {}",
            log.dir().display(),
            self.path.display()
        );
        log.delete()
    }

    /// Reads `recovery-point-offset-checkpoint`.
    pub fn read_recovery_points(&self) -> Result<BTreeMap<TopicPartition, Offset>, LogError> {
        read_offset_checkpoint(
            self.storage.as_ref(),
            &self.path.join(RECOVERY_POINT_CHECKPOINT_FILE),
        )
    }

    /// Reads `log-start-offset-checkpoint`.
    pub fn read_log_start_offsets(&self) -> Result<BTreeMap<TopicPartition, Offset>, LogError> {
        read_offset_checkpoint(
            self.storage.as_ref(),
            &self.path.join(LOG_START_OFFSET_CHECKPOINT_FILE),
        )
    }

    /// Reads `replication-offset-checkpoint` (high watermarks).
    pub fn read_high_watermarks(&self) -> Result<BTreeMap<TopicPartition, Offset>, LogError> {
        read_offset_checkpoint(
            self.storage.as_ref(),
            &self.path.join(REPLICATION_OFFSET_CHECKPOINT_FILE),
        )
    }

    /// Atomically rewrites the three offset checkpoints from `entries` (each file lists exactly
    /// the given partitions; partitions without a high watermark are left out of
    /// `replication-offset-checkpoint`).
    pub fn checkpoint(&self, entries: &[PartitionCheckpoint]) -> Result<(), LogError> {
        let mut recovery_points = BTreeMap::new();
        let mut log_start_offsets = BTreeMap::new();
        let mut high_watermarks = BTreeMap::new();
        for entry in entries {
            let tp = entry.topic_partition.clone();
            recovery_points.insert(tp.clone(), entry.recovery_point);
            log_start_offsets.insert(tp.clone(), entry.log_start_offset);
            if let Some(hwm) = entry.high_watermark {
                high_watermarks.insert(tp, hwm);
            }
        }
        let storage = self.storage.as_ref();
        write_offset_checkpoint(
            storage,
            &self.path.join(RECOVERY_POINT_CHECKPOINT_FILE),
            &recovery_points,
        )?;
        write_offset_checkpoint(
            storage,
            &self.path.join(LOG_START_OFFSET_CHECKPOINT_FILE),
            &log_start_offsets,
        )?;
        write_offset_checkpoint(
            storage,
            &self.path.join(REPLICATION_OFFSET_CHECKPOINT_FILE),
            &high_watermarks,
        )
    }

    /// Atomically rewrites `log-start-offset-checkpoint` alone (temp file, fsync, rename, fsync
    /// of the directory), listing exactly `log_start_offsets`: what makes a DeleteRecords
    /// durable before it is answered. The caller serializes it with [`LogDir::checkpoint`]
    /// (both write the same file).
    pub fn checkpoint_log_start_offsets(
        &self,
        log_start_offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<(), LogError> {
        write_offset_checkpoint(
            self.storage.as_ref(),
            &self.path.join(LOG_START_OFFSET_CHECKPOINT_FILE),
            log_start_offsets,
        )
    }

    /// Opens every partition log in the directory with its checkpointed recovery point and log
    /// start offset (`Offset(0)` when absent) and the given clean-shutdown flag. Directory names
    /// are split at their last `-`; names that do not parse are reported in
    /// [`LoadedLogs::skipped`], not loaded. `config_for` gives each partition's config.
    pub fn load_logs(
        &self,
        clean_shutdown: bool,
        now_ms: i64,
        config_for: &dyn Fn(&TopicPartition) -> LogConfig,
    ) -> Result<LoadedLogs, LogError> {
        self.load_logs_except(clean_shutdown, now_ms, config_for, &[])
    }

    /// [`LogDir::load_logs`], leaving the directories named in `skip` alone (the metadata
    /// log's, when it shares the directory).
    pub fn load_logs_except(
        &self,
        clean_shutdown: bool,
        now_ms: i64,
        config_for: &dyn Fn(&TopicPartition) -> LogConfig,
        skip: &[&str],
    ) -> Result<LoadedLogs, LogError> {
        let recovery_points = self.read_recovery_points()?;
        let log_start_offsets = self.read_log_start_offsets()?;
        let high_watermarks = self.read_high_watermarks()?;
        let entries = self
            .storage
            .list_dir(&self.path)
            .map_err(LogError::io("list", &self.path))?;
        let mut logs = BTreeMap::new();
        let mut skipped = Vec::new();
        for entry in entries
            .into_iter()
            .filter(|e| e.is_dir && !skip.contains(&e.name.as_str()))
        {
            let Some(tp) = TopicPartition::parse_dir_name(&entry.name) else {
                tracing::warn!(dir = %self.path.display(), name = %entry.name,
                    "skipping directory that is not <topic>-<partition>");
                skipped.push(SkippedDir {
                    name: entry.name,
                    reason: "not <topic>-<partition>".to_string(),
                });
                continue;
            };
            let recovery_point = recovery_points.get(&tp).copied().unwrap_or_default();
            let log_start_offset = log_start_offsets.get(&tp).copied().unwrap_or_default();
            let log = Log::open(
                self.storage.clone(),
                self.partition_dir(&tp),
                config_for(&tp),
                recovery_point,
                log_start_offset,
                clean_shutdown,
                now_ms,
            )?;
            tracing::info!(partition = %tp, report = %log.recovery_report(), "loaded log");
            logs.insert(tp, log);
        }
        Ok(LoadedLogs {
            logs,
            high_watermarks,
            skipped,
        })
    }
}

fn read_meta(storage: &dyn Storage, path: &Path) -> Result<Option<MetaProperties>, LogError> {
    let file = path.join(META_PROPERTIES_FILE);
    let Some(bytes) = read_file_if_exists(storage, &file).map_err(LogError::io("read", &file))?
    else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).map_err(|_| LogError::CorruptFile {
        path: file.clone(),
        reason: "not UTF-8".to_string(),
    })?;
    MetaProperties::parse(&file, &text).map(Some)
}
