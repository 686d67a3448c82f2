//! One partition this broker hosts: its log, high watermark and leader epoch.
//!
//! Keel runs one broker per process here, so this broker leads every partition and its ISR is
//! itself. The high watermark follows KIP-966's rule — it advances only while the ISR has at
//! least the effective `min.insync.replicas` members, where the effective value is
//! `min(min.insync.replicas, replication factor)` — which for a single replica means it moves
//! with every append.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use keel_log::{LeaderEpoch, Log, LogError, Offset, TopicPartition};
use uuid::Uuid;

use crate::topic_config::EffectiveTopicConfig;

/// What an append produced, for the Produce response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: Offset,
    pub log_append_time_ms: Option<i64>,
    pub log_start_offset: Offset,
}

/// A hosted partition.
#[derive(Debug)]
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    /// Index of the log directory holding this partition.
    pub log_dir_index: usize,
    log: Mutex<Log>,
    high_watermark: AtomicI64,
    leader_epoch: AtomicI32,
    replication_factor: usize,
    config: RwLock<Arc<EffectiveTopicConfig>>,
    /// Set (under the log lock) when the topic is deleted: from then on no operation touches
    /// the log, so a request that raced with the delete cannot write into the removed (or a
    /// recreated) directory.
    deleted: AtomicBool,
}

/// Why a partition operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("the partition was deleted")]
    Deleted,
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Partition {
    pub fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        log_dir_index: usize,
        log: Log,
        leader_epoch: LeaderEpoch,
        replication_factor: usize,
        config: Arc<EffectiveTopicConfig>,
    ) -> Partition {
        let partition = Partition {
            tp,
            topic_id,
            log_dir_index,
            high_watermark: AtomicI64::new(0),
            leader_epoch: AtomicI32::new(leader_epoch.0),
            replication_factor,
            log: Mutex::new(log),
            config: RwLock::new(config),
            deleted: AtomicBool::new(false),
        };
        {
            let mut log = partition.log.lock().expect("partition log lock poisoned");
            partition.maybe_advance_high_watermark(&log);
            // As a new leader does (Kafka's maybeAssignEpochStartOffset): the current epoch
            // starts at the log end offset, so OffsetForLeaderEpoch answers it even before the
            // first append of the epoch.
            if let Err(e) = log.assign_epoch_start_offset(leader_epoch) {
                tracing::warn!(partition = %partition.tp, error = %e, "cannot record the leader epoch start");
            }
        }
        partition
    }

    /// The log, locked, unless the partition was deleted. Held only for the duration of one
    /// append, read or flush.
    pub fn lock_log(&self) -> Result<MutexGuard<'_, Log>, PartitionError> {
        // A poisoned lock means a panic mid-operation on this log: an invariant was broken
        // and continuing would risk serving corrupt state.
        let log = self.log.lock().expect("partition log lock poisoned");
        if self.deleted.load(Ordering::Acquire) {
            return Err(PartitionError::Deleted);
        }
        Ok(log)
    }

    /// Marks the partition deleted; waits for an operation in progress to finish first.
    pub fn mark_deleted(&self) {
        let _log = self.log.lock().expect("partition log lock poisoned");
        self.deleted.store(true, Ordering::Release);
    }

    pub fn high_watermark(&self) -> Offset {
        Offset(self.high_watermark.load(Ordering::Acquire))
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(self.leader_epoch.load(Ordering::Acquire))
    }

    pub fn config(&self) -> Arc<EffectiveTopicConfig> {
        self.config.read().expect("config lock poisoned").clone()
    }

    pub fn set_config(&self, config: Arc<EffectiveTopicConfig>) -> Result<(), PartitionError> {
        self.lock_log()?.set_config(config.log_config())?;
        *self.config.write().expect("config lock poisoned") = config;
        Ok(())
    }

    /// `min(min.insync.replicas, replication factor)` (KIP-966, "effective min ISR").
    pub fn effective_min_isr(&self) -> usize {
        let configured = usize::try_from(self.config().min_insync_replicas()).unwrap_or(1);
        configured.min(self.replication_factor).max(1)
    }

    /// The ISR as this broker knows it: itself.
    fn isr_size(&self) -> usize {
        1
    }

    /// Appends a producer's batches as leader; advances the high watermark as far as the
    /// ISR rule allows.
    pub fn append_as_leader(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendResult, PartitionError> {
        let mut log = self.lock_log()?;
        let info = log.append_as_leader(records, self.leader_epoch(), now_ms)?;
        self.maybe_advance_high_watermark(&log);
        Ok(AppendResult {
            base_offset: info.first_offset,
            log_append_time_ms: info.log_append_time_ms,
            log_start_offset: log.log_start_offset(),
        })
    }

    /// KIP-966: the high watermark moves only while |ISR| >= effective min ISR, and then to
    /// the smallest log end offset in the ISR (here: this broker's). It never moves back.
    fn maybe_advance_high_watermark(&self, log: &Log) -> bool {
        if self.isr_size() < self.effective_min_isr() {
            return false;
        }
        let candidate = log.log_end_offset().0;
        let previous = self.high_watermark.fetch_max(candidate, Ordering::AcqRel);
        candidate > previous
    }

    /// Offsets reported to clients: (log start offset, high watermark, log end offset).
    pub fn offsets(&self) -> Result<(Offset, Offset, Offset), PartitionError> {
        let log = self.lock_log()?;
        Ok((
            log.log_start_offset(),
            self.high_watermark(),
            log.log_end_offset(),
        ))
    }
}
