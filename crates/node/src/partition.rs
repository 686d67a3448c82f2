//! One partition this broker hosts: its log, high watermark, topic config, and its replica
//! role — leader ([`LeaderPartition`]) or follower ([`FollowerPartition`]) from the pure
//! replication core, chosen by the replayed metadata image.
//!
//! Locks: the replica lock is taken before the log lock, never the other way; neither is held
//! across an `.await`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use keel_log::{Log, LogError, Offset, TopicPartition};
use keel_replication::{
    self as repl, EpochCache, ErrorCode, FollowerPartition, LeaderPartition, RequestId,
};
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::topic_config::EffectiveTopicConfig;

/// What an append produced, for the Produce response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    pub base_offset: Offset,
    /// The log end offset after the append (acks=all waits for the high watermark to reach it).
    pub end_offset: Offset,
    pub log_append_time_ms: Option<i64>,
    pub log_start_offset: Offset,
}

/// The replica's role, from metadata.
#[derive(Debug)]
pub enum Replica {
    /// This broker leads the partition (boxed: the leader's state is several times the
    /// follower's).
    Leader(Box<LeaderPartition>),
    /// This broker follows the leader named by metadata (or waits for one).
    Follower(FollowerPartition),
}

impl Replica {
    /// The leader epoch this role was built for.
    pub fn leader_epoch(&self) -> repl::LeaderEpoch {
        match self {
            Replica::Leader(l) => l.leader_epoch(),
            Replica::Follower(f) => f.leader_epoch(),
        }
    }

    /// The leader state, if this broker leads.
    pub fn as_leader(&mut self) -> Option<&mut LeaderPartition> {
        match self {
            Replica::Leader(l) => Some(l),
            Replica::Follower(_) => None,
        }
    }
}

/// Whether the replica's storage can be trusted (issue 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageHealth {
    /// Nothing wrong found.
    Healthy,
    /// Damage was found and set aside (the log now ends before it): the replica lost data and
    /// must not lead cleanly until the controller has taken it out of the ISR and ELR. It keeps
    /// following, to re-replicate what it lost.
    Damaged,
    /// Its log directory failed: nothing of it is read, written, led or fetched until the
    /// broker restarts.
    Offline,
}

impl StorageHealth {
    fn code(self) -> u8 {
        match self {
            StorageHealth::Healthy => 0,
            StorageHealth::Damaged => 1,
            StorageHealth::Offline => 2,
        }
    }

    fn from_code(code: u8) -> StorageHealth {
        match code {
            0 => StorageHealth::Healthy,
            1 => StorageHealth::Damaged,
            _ => StorageHealth::Offline,
        }
    }
}

/// A waiting acks=all produce: answered when the leader core completes its request id.
pub type ProduceWaiter = oneshot::Sender<Result<(), ErrorCode>>;

/// A waiting DeleteRecords: answered with the low watermark when the leader core completes its
/// request id.
pub type DeleteWaiter = oneshot::Sender<Result<Offset, ErrorCode>>;

/// A hosted partition.
#[derive(Debug)]
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    /// Index of the log directory holding this partition.
    pub log_dir_index: usize,
    replica: Mutex<Replica>,
    log: Mutex<Log>,
    high_watermark: AtomicI64,
    config: RwLock<Arc<EffectiveTopicConfig>>,
    /// Set (under the log lock) when the topic is deleted or the replica removed: from then on
    /// no operation touches the log, so a request that raced with the delete cannot write into
    /// the removed (or a recreated) directory.
    deleted: AtomicBool,
    /// A [`StorageHealth`] code.
    health: AtomicU8,
    /// The partition epoch this broker's image had when damage was last found (`i64::MIN`:
    /// never): the damage is settled only by a newer partition state.
    damaged_at_partition_epoch: AtomicI64,
    waiters: Mutex<BTreeMap<RequestId, ProduceWaiter>>,
    delete_waiters: Mutex<BTreeMap<RequestId, DeleteWaiter>>,
    /// When this leader next asks the coordinators about its in-doubt transactions (ms since
    /// the epoch; 0: now), and whether a round is running (`broker::stranded`).
    stranded_next_ms: AtomicI64,
    stranded_round: AtomicBool,
}

/// Why a partition operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("the partition was deleted")]
    Deleted,
    #[error("the partition's log directory is offline")]
    Offline,
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Partition {
    pub fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        log_dir_index: usize,
        log: Log,
        high_watermark: Offset,
        replica: Replica,
        config: Arc<EffectiveTopicConfig>,
    ) -> Partition {
        // Kafka's UnifiedLog keeps log start offset ≤ high watermark ≤ log end offset: a high
        // watermark checkpoint older than the log start offset's (which DeleteRecords writes at
        // once) is raised to it.
        let high_watermark = high_watermark
            .0
            .clamp(log.log_start_offset().0, log.log_end_offset().0);
        Partition {
            tp,
            topic_id,
            log_dir_index,
            replica: Mutex::new(replica),
            log: Mutex::new(log),
            high_watermark: AtomicI64::new(high_watermark),
            config: RwLock::new(config),
            deleted: AtomicBool::new(false),
            health: AtomicU8::new(StorageHealth::Healthy.code()),
            damaged_at_partition_epoch: AtomicI64::new(i64::MIN),
            waiters: Mutex::new(BTreeMap::new()),
            delete_waiters: Mutex::new(BTreeMap::new()),
            stranded_next_ms: AtomicI64::new(0),
            stranded_round: AtomicBool::new(false),
        }
    }

    /// Claims the next round of asking about in-doubt transactions if it is due at `now_ms`;
    /// false if not due or one is running.
    pub(crate) fn claim_stranded_round(&self, now_ms: i64) -> bool {
        self.stranded_next_ms.load(Ordering::Acquire) <= now_ms
            && self
                .stranded_round
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// Ends a round; the next one is due at `next_ms`.
    pub(crate) fn end_stranded_round(&self, next_ms: i64) {
        self.stranded_next_ms.store(next_ms, Ordering::Release);
        self.stranded_round.store(false, Ordering::Release);
    }

    /// The log, locked, unless the partition was deleted. Held only for the duration of one
    /// append, read, truncation or flush.
    pub fn lock_log(&self) -> Result<MutexGuard<'_, Log>, PartitionError> {
        // A poisoned lock means a panic mid-operation on this log: an invariant was broken
        // and continuing would risk serving corrupt state.
        let log = self.log.lock().expect("partition log lock poisoned");
        if self.deleted.load(Ordering::Acquire) {
            return Err(PartitionError::Deleted);
        }
        if self.health() == StorageHealth::Offline {
            return Err(PartitionError::Offline);
        }
        Ok(log)
    }

    /// The log end offset as the log holds it in memory, even when the log directory is
    /// offline (no IO); `None` once the partition was deleted.
    pub fn log_end_offset_unchecked(&self) -> Option<Offset> {
        let log = self.log.lock().expect("partition log lock poisoned");
        (!self.deleted.load(Ordering::Acquire)).then(|| log.log_end_offset())
    }

    /// Whether the replica's storage can be trusted.
    pub fn health(&self) -> StorageHealth {
        StorageHealth::from_code(self.health.load(Ordering::Acquire))
    }

    /// Notes the partition epoch of the image in which damage was found.
    pub fn set_damaged_at(&self, partition_epoch: i64) {
        self.damaged_at_partition_epoch
            .store(partition_epoch, Ordering::Release);
    }

    /// The partition epoch of the image in which damage was last found.
    pub fn damaged_at(&self) -> i64 {
        self.damaged_at_partition_epoch.load(Ordering::Acquire)
    }

    /// Records what was found; `Offline` is final for this run (it never goes back).
    pub fn set_health(&self, health: StorageHealth) {
        let _ = self
            .health
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (StorageHealth::from_code(current) != StorageHealth::Offline)
                    .then_some(health.code())
            });
    }

    /// The replica role, locked (before the log lock, if both are needed; after the broker's
    /// state lock, never while asking the broker for its image or partitions).
    pub fn lock_replica(&self) -> MutexGuard<'_, Replica> {
        self.replica
            .lock()
            .expect("partition replica lock poisoned")
    }

    /// Marks the partition deleted; waits for an operation in progress to finish first.
    pub fn mark_deleted(&self) {
        let _log = self.log.lock().expect("partition log lock poisoned");
        self.deleted.store(true, Ordering::Release);
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    pub fn high_watermark(&self) -> Offset {
        Offset(self.high_watermark.load(Ordering::Acquire))
    }

    /// Sets the high watermark (the leader's only moves forward; a follower's may drop when
    /// it truncates).
    pub fn set_high_watermark(&self, offset: Offset) {
        self.high_watermark.store(offset.0, Ordering::Release);
    }

    /// The leader epoch of the current role.
    pub fn leader_epoch(&self) -> keel_log::LeaderEpoch {
        keel_log::LeaderEpoch(self.lock_replica().leader_epoch().0)
    }

    /// Whether this broker leads the partition now.
    pub fn is_leader(&self) -> bool {
        matches!(&*self.lock_replica(), Replica::Leader(l) if !l.has_ended())
    }

    /// A new leader whose high watermark has not yet reached the start of its leader epoch:
    /// offsets it would answer could be lower than its predecessor's (Kafka answers
    /// `OFFSET_NOT_AVAILABLE` to ListOffsets then).
    pub fn high_watermark_lags_leader_epoch(&self) -> bool {
        match &*self.lock_replica() {
            Replica::Leader(l) => l.high_watermark() < l.leader_epoch_start_offset(),
            Replica::Follower(_) => false,
        }
    }

    pub fn config(&self) -> Arc<EffectiveTopicConfig> {
        self.config.read().expect("config lock poisoned").clone()
    }

    pub fn set_config(&self, config: Arc<EffectiveTopicConfig>) -> Result<(), PartitionError> {
        self.lock_log()?.set_config(config.log_config())?;
        *self.config.write().expect("config lock poisoned") = config;
        Ok(())
    }

    /// Parks an acks=all request's answer.
    pub fn add_waiter(&self, request: RequestId, waiter: ProduceWaiter) {
        self.waiters
            .lock()
            .expect("waiter lock poisoned")
            .insert(request, waiter);
    }

    /// Answers a parked acks=all request (no-op if it is not parked here).
    pub fn complete_waiter(&self, request: RequestId, result: Result<(), ErrorCode>) {
        let waiter = self
            .waiters
            .lock()
            .expect("waiter lock poisoned")
            .remove(&request);
        if let Some(waiter) = waiter {
            let _ = waiter.send(result);
        }
    }

    /// Parks a DeleteRecords request's answer.
    pub fn add_delete_waiter(&self, request: RequestId, waiter: DeleteWaiter) {
        self.delete_waiters
            .lock()
            .expect("waiter lock poisoned")
            .insert(request, waiter);
    }

    /// Answers a parked DeleteRecords request (no-op if it is not parked here).
    pub fn complete_delete_waiter(&self, request: RequestId, result: Result<Offset, ErrorCode>) {
        let waiter = self
            .delete_waiters
            .lock()
            .expect("waiter lock poisoned")
            .remove(&request);
        if let Some(waiter) = waiter {
            let _ = waiter.send(result);
        }
    }

    /// Answers every parked request — acks=all produces and DeleteRecords — with `error` (the
    /// partition is going away).
    pub fn fail_all_waiters(&self, error: ErrorCode) {
        let waiters = std::mem::take(&mut *self.waiters.lock().expect("waiter lock poisoned"));
        for (_, waiter) in waiters {
            let _ = waiter.send(Err(error));
        }
        let deletes =
            std::mem::take(&mut *self.delete_waiters.lock().expect("waiter lock poisoned"));
        for (_, waiter) in deletes {
            let _ = waiter.send(Err(error));
        }
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

/// The log's leader epoch cache as the replication core reads it.
pub fn epoch_view(log: &Log) -> EpochCache {
    EpochCache::from_entries(
        log.epoch_entries()
            .iter()
            .map(|e| (repl::LeaderEpoch(e.epoch.0), repl::Offset(e.start_offset.0))),
    )
}
