//! The single broker's durable metadata: topics (id, partitions, config overrides), the
//! partition leader epochs, and the broker epoch.
//!
//! This file is the stand-in for the controller's metadata log until the controller runs as
//! its own role: it is rewritten atomically (through the storage interface) on every change,
//! and read once at startup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_log::storage::Storage;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// File name inside the first log directory.
pub const METADATA_FILE_NAME: &str = "__keel_metadata.json";

/// One partition's replication state (a single broker leads every partition).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMeta {
    pub index: i32,
    pub replicas: Vec<i32>,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionMeta>,
    /// Topic-level config overrides (validated, normalized).
    pub configs: BTreeMap<String, String>,
}

/// Everything the broker persists about the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalMetadata {
    /// The broker epoch of the current run: bumped at every start (a registration), written
    /// into the clean-shutdown file at orderly shutdown and compared at the next start.
    pub broker_epoch: i64,
    pub topics: BTreeMap<String, TopicMeta>,
}

/// Reads and writes [`LocalMetadata`].
#[derive(Debug, Clone)]
pub struct MetadataStore {
    storage: Arc<dyn Storage>,
    path: PathBuf,
}

impl MetadataStore {
    pub fn new(storage: Arc<dyn Storage>, log_dir: &Path) -> MetadataStore {
        MetadataStore {
            storage,
            path: log_dir.join(METADATA_FILE_NAME),
        }
    }

    /// Loads the metadata, or the empty metadata when the file does not exist yet.
    pub fn load(&self) -> anyhow::Result<LocalMetadata> {
        let Some(bytes) =
            keel_log::storage::read_file_if_exists(self.storage.as_ref(), &self.path)?
        else {
            return Ok(LocalMetadata::default());
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| anyhow::anyhow!("corrupt metadata file {}: {e}", self.path.display()))
    }

    /// Replaces the file atomically (temp file, fsync, rename, fsync directory).
    pub fn save(&self, metadata: &LocalMetadata) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(metadata)?;
        keel_log::storage::write_file_atomically(self.storage.as_ref(), &self.path, &bytes)?;
        Ok(())
    }
}
