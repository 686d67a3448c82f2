//! The transaction coordinator (KIP-98, KIP-890), built on Keel's own replication like the
//! group coordinator (`crate::coordinator`).
//!
//! A transactional id lives in one partition of `__transaction_state` (Kafka's
//! `abs(String.hashCode) % partitions`), and the leader of that partition coordinates it; the
//! partition's leader epoch is the *coordinator epoch* stamped into every marker. Every state
//! change is a record appended with `acks=all` (the strict high watermark of KIP-966 included)
//! before it is answered, so a transaction's state is as durable as any acknowledged record.
//!
//! A broker that becomes leader of a `__transaction_state` partition loads it (last record per
//! transactional id wins, tombstones delete) before it answers for it; its timer does so for
//! every partition it leads, and drives to completion each transaction it finds in
//! PrepareCommit or PrepareAbort — the markers its predecessor may not have finished. One that
//! stops leading drops the partition's state and answers `NOT_COORDINATOR`.
//!
//! Ending a transaction: EndTxn writes PrepareCommit/PrepareAbort (then answers), the markers go
//! to every partition of the transaction through `WriteTxnMarkers` ([`markers`]: the leaders
//! append a control batch with `acks=all`), and CompleteCommit/CompleteAbort is written last.
//! Transactions open longer than their timeout are aborted by the timer with a bumped epoch,
//! which fences their producer.
//!
//! Modules: [`state`] (one transactional id's state machine, Kafka's transitions),
//! [`records`] (the topic's key and value layout, Kafka's own), [`markers`] and [`resolve`]
//! (what the coordinator knows of a transaction an unclean recovery stranded). The request
//! handlers are in `crate::handlers::txn`.

pub mod api;
pub mod markers;
pub mod records;
pub mod resolve;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_log::plain_batch::{build_keyed_batch, decode_records};
use keel_replication::{Acks, ErrorCode};
use keel_wire::ResponseError;
use tracing::{info, warn};

use self::state::{Transit, TxnMetadata, TxnState};
use crate::broker::{AppendError, Broker};
use crate::partition::Partition;

/// The internal topic holding transaction states.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// How long a write to `__transaction_state` waits for acks=all (Kafka: `request.timeout.ms`).
const WRITE_TIMEOUT_MS: u64 = 30_000;

/// The transaction coordinator's settings (Kafka's names and defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`; default 50.
    pub num_partitions: i32,
    /// `transaction.state.log.replication.factor`; default 3 (1 for a single-node broker).
    pub replication_factor: i16,
    /// `transaction.state.log.min.isr`; default 2 (capped at the replication factor).
    pub min_isr: i16,
    /// `transaction.state.log.segment.bytes`; default 104857600.
    pub segment_bytes: u64,
    /// `transaction.max.timeout.ms`: the longest `transaction.timeout.ms`; default 900000.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`; default 604800000 (7 days).
    pub id_expiration_ms: u64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`; default 10000.
    pub abort_timed_out_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`; default 3600000.
    pub remove_expired_interval_ms: u64,
}

/// Kafka's partition of a transactional id (the same hash as for groups).
pub fn partition_for(transactional_id: &str, partitions: usize) -> i32 {
    crate::coordinator::partition_for(transactional_id, partitions)
}

/// The transactional ids of one `__transaction_state` partition this broker leads, loaded at
/// `leader_epoch` (the coordinator epoch).
#[derive(Debug)]
struct LoadedTxns {
    leader_epoch: i32,
    txns: BTreeMap<String, TxnMetadata>,
}

/// Every transactional id this broker coordinates, by `__transaction_state` partition.
#[derive(Debug, Default)]
pub struct TxnCoordinator {
    loaded: Mutex<BTreeMap<i32, LoadedTxns>>,
    /// Transactional ids whose markers are being written now (one driver each).
    completing: Mutex<BTreeSet<String>>,
    /// Woken whenever a driver of markers finishes or a pending transition is applied.
    completed: tokio::sync::Notify,
}

impl TxnCoordinator {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<i32, LoadedTxns>> {
        self.loaded
            .lock()
            .expect("transaction coordinator lock poisoned")
    }

    /// Claims the completion of `id`'s transaction; false if another task drives it.
    pub(crate) fn claim_completion(&self, id: &str) -> bool {
        self.completing
            .lock()
            .expect("poisoned")
            .insert(id.to_string())
    }

    pub(crate) fn release_completion(&self, id: &str) {
        self.completing.lock().expect("poisoned").remove(id);
        self.completed.notify_waiters();
    }

    /// Whether `id`'s markers are being written now.
    pub(crate) fn is_completing(&self, id: &str) -> bool {
        self.completing.lock().expect("poisoned").contains(id)
    }
}

/// Where a transactional id lives: its `__transaction_state` partition, led here at
/// `coordinator_epoch`.
#[derive(Debug, Clone)]
pub struct TxnScope {
    pub partition: Arc<Partition>,
    pub index: i32,
    pub coordinator_epoch: i32,
}

/// Kafka's mapping of a transaction log write failure to what clients understand
/// (`TransactionStateManager.appendTransactionToLog`).
fn write_error(e: ErrorCode) -> ResponseError {
    match e {
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => {
            ResponseError::NotCoordinator
        }
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

impl Broker {
    /// Where `id` lives; this broker must lead its partition (`NOT_COORDINATOR` otherwise,
    /// `COORDINATOR_NOT_AVAILABLE` while the topic does not exist).
    pub fn txn_scope(&self, id: &str) -> Result<TxnScope, ResponseError> {
        let topic = self
            .topic(TRANSACTION_STATE_TOPIC)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let index = partition_for(id, topic.partitions.len());
        let partition = self
            .partition(TRANSACTION_STATE_TOPIC, index)
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        let coordinator_epoch = partition.leader_epoch().0;
        Ok(TxnScope {
            partition,
            index,
            coordinator_epoch,
        })
    }

    /// Runs `f` on the transactional ids of `scope`'s partition, loading it first if needed.
    /// `NOT_COORDINATOR` if the partition is no longer led at the scope's epoch.
    pub fn with_txns<R>(
        &self,
        scope: &TxnScope,
        f: impl FnOnce(&mut BTreeMap<String, TxnMetadata>, i64) -> R,
    ) -> Result<R, ResponseError> {
        let (epoch, r) = self.with_txn_partition(scope.index, f)?;
        if epoch != scope.coordinator_epoch {
            return Err(ResponseError::NotCoordinator);
        }
        Ok(r)
    }

    /// Like [`Broker::with_txns`] for a partition index; also returns the epoch it was loaded at.
    /// A partition not loaded at its current leader epoch is (re)loaded first.
    fn with_txn_partition<R>(
        &self,
        index: i32,
        f: impl FnOnce(&mut BTreeMap<String, TxnMetadata>, i64) -> R,
    ) -> Result<(i32, R), ResponseError> {
        let partition = self
            .partition(TRANSACTION_STATE_TOPIC, index)
            .filter(|p| p.is_leader())
            .ok_or(ResponseError::NotCoordinator)?;
        let epoch = partition.leader_epoch().0;
        let now_ms = self.clock.now_ms();
        let mut loaded = self.txn_coordinator.lock();
        if loaded.get(&index).is_none_or(|l| l.leader_epoch != epoch) {
            let txns = load_txns(&partition).map_err(|e| {
                warn!(partition = index, error = %e, "cannot load {TRANSACTION_STATE_TOPIC}");
                ResponseError::CoordinatorLoadInProgress
            })?;
            if !txns.is_empty() {
                info!(
                    partition = index,
                    coordinator_epoch = epoch,
                    transactional_ids = txns.len(),
                    "loaded transaction states"
                );
            }
            loaded.insert(
                index,
                LoadedTxns {
                    leader_epoch: epoch,
                    txns,
                },
            );
        }
        let part = loaded.get_mut(&index).expect("loaded above");
        Ok((epoch, f(&mut part.txns, now_ms)))
    }

    /// Appends `id`'s new state (or a tombstone) to its partition with acks=all and waits for
    /// the high watermark to cover it; then checks the partition is still led at the scope's
    /// epoch.
    pub async fn write_txn_state(
        &self,
        scope: &TxnScope,
        id: &str,
        value: Option<&state::TxnValue>,
    ) -> Result<(), ResponseError> {
        let now_ms = self.clock.now_ms();
        let key = records::encode_key(id);
        let value = value.map(records::encode_value);
        let batch = build_keyed_batch(&[(Some(key.as_slice()), value.as_deref(), now_ms)]);
        let waiter =
            match self.append_as_leader(&scope.partition, &batch, Acks::All, WRITE_TIMEOUT_MS) {
                Ok((_, Some(waiter))) => waiter,
                Ok((_, None)) => unreachable!("acks=all always waits"),
                Err(AppendError::Replication(code)) => return Err(write_error(code)),
                Err(e) => {
                    warn!(error = %e, "cannot write to {TRANSACTION_STATE_TOPIC}");
                    return Err(ResponseError::NotCoordinator);
                }
            };
        match waiter.await {
            Ok(Ok(())) => {}
            Ok(Err(code)) => return Err(write_error(code)),
            Err(_) => return Err(ResponseError::NotCoordinator),
        }
        let still = scope.partition.is_leader()
            && scope.partition.leader_epoch().0 == scope.coordinator_epoch
            && !scope.partition.is_deleted();
        if still {
            Ok(())
        } else {
            Err(ResponseError::NotCoordinator)
        }
    }

    /// Writes a prepared transition of `id` and applies it (or cancels it if the write failed).
    pub async fn apply_transit(
        &self,
        scope: &TxnScope,
        id: &str,
        transit: &Transit,
    ) -> Result<(), ResponseError> {
        let written = self.write_txn_state(scope, id, Some(&transit.value)).await;
        let applied = self.with_txns(scope, |txns, _| {
            let Some(m) = txns.get_mut(id) else {
                return Err(ResponseError::NotCoordinator);
            };
            if m.pending != Some(transit.value.state) {
                // Reloaded meanwhile: the log is the truth.
                return Err(ResponseError::NotCoordinator);
            }
            match written {
                Ok(()) => {
                    m.complete(transit);
                    Ok(())
                }
                Err(e) => {
                    m.cancel(transit);
                    Err(e)
                }
            }
        });
        // Requests waiting for this transition (txn_add_partitions) try again.
        self.txn_coordinator.completed.notify_waiters();
        applied.and_then(|r| r)
    }

    /// The coordinator's timer: loads every `__transaction_state` partition this broker leads
    /// (dropping those it no longer leads), and returns the transactions to drive: those in
    /// PrepareCommit/PrepareAbort nobody is completing, and those open past their timeout
    /// (`abort_timed_out`).
    pub fn txn_coordinator_tick(&self, abort_timed_out: bool) -> Vec<TxnWork> {
        let mut work = Vec::new();
        let led: BTreeSet<i32> = self
            .topic(TRANSACTION_STATE_TOPIC)
            .map(|t| {
                t.partitions
                    .iter()
                    .filter(|p| p.leader == Some(self.node_id()))
                    .map(|p| p.index)
                    .collect()
            })
            .unwrap_or_default();
        {
            let mut loaded = self.txn_coordinator.lock();
            loaded.retain(|index, l| {
                let current = self
                    .partition(TRANSACTION_STATE_TOPIC, *index)
                    .filter(|p| p.is_leader())
                    .is_some_and(|p| p.leader_epoch().0 == l.leader_epoch);
                if !current {
                    info!(
                        partition = index,
                        "no longer the coordinator of these transactions"
                    );
                }
                current
            });
        }
        for index in led {
            let Ok((epoch, found)) = self.with_txn_partition(index, |txns, now_ms| {
                let mut found = Vec::new();
                for (id, m) in txns.iter() {
                    if m.pending.is_some() {
                        continue;
                    }
                    match m.state {
                        TxnState::PrepareCommit | TxnState::PrepareAbort => {
                            found.push((id.clone(), false));
                        }
                        TxnState::Ongoing if abort_timed_out && m.timed_out(now_ms) => {
                            found.push((id.clone(), true));
                        }
                        _ => {}
                    }
                }
                found
            }) else {
                continue;
            };
            let Some(partition) = self.partition(TRANSACTION_STATE_TOPIC, index) else {
                continue;
            };
            for (id, timed_out) in found {
                work.push(TxnWork {
                    scope: TxnScope {
                        partition: partition.clone(),
                        index,
                        coordinator_epoch: epoch,
                    },
                    id,
                    timed_out,
                });
            }
        }
        work
    }

    /// Aborts a transaction past its timeout: the epoch bumped (fencing its producer), then
    /// PrepareAbort, the markers and CompleteAbort.
    pub async fn abort_timed_out(&self, scope: &TxnScope, id: &str) {
        let fence = self.with_txns(scope, |txns, now_ms| {
            let m = txns.get_mut(id)?;
            (m.pending.is_none() && m.timed_out(now_ms)).then(|| m.prepare_fence_abort(now_ms))
        });
        let Ok(Some(fence)) = fence else {
            return;
        };
        info!(
            transactional_id = id,
            producer_id = fence.value.producer_id,
            epoch = fence.value.producer_epoch,
            "aborting a transaction past its timeout"
        );
        if let Err(e) = self.apply_transit(scope, id, &fence).await {
            warn!(transactional_id = id, error = ?e, "cannot abort a timed-out transaction");
            return;
        }
        self.complete_transaction(scope, id).await;
    }

    /// `transactional.id.expiration.ms`: removes (tombstones) transactional ids idle that long
    /// in a state that allows it.
    pub async fn expire_transactional_ids(&self) {
        let expiration_ms =
            i64::try_from(self.config.transactions.id_expiration_ms).unwrap_or(i64::MAX);
        let mut doomed = Vec::new();
        let indexes: Vec<i32> = self.txn_coordinator.lock().keys().copied().collect();
        for index in indexes {
            let Ok((epoch, ids)) = self.with_txn_partition(index, |txns, now_ms| {
                txns.iter()
                    .filter(|(_, m)| {
                        m.pending.is_none()
                            && m.state.expiration_allowed()
                            && now_ms.saturating_sub(m.last_update_ms) >= expiration_ms
                    })
                    .map(|(id, _)| id.clone())
                    .collect::<Vec<_>>()
            }) else {
                continue;
            };
            if let Some(partition) = self.partition(TRANSACTION_STATE_TOPIC, index) {
                for id in ids {
                    let scope = TxnScope {
                        partition: partition.clone(),
                        index,
                        coordinator_epoch: epoch,
                    };
                    doomed.push((scope, id));
                }
            }
        }
        for (scope, id) in doomed {
            // Mark it Dead while the tombstone is written, so nothing starts meanwhile.
            let claimed = self.with_txns(&scope, |txns, now_ms| {
                let m = txns.get_mut(&id)?;
                let idle = m.pending.is_none()
                    && m.state.expiration_allowed()
                    && now_ms.saturating_sub(m.last_update_ms) >= expiration_ms;
                idle.then(|| m.pending = Some(TxnState::Dead))
            });
            if !matches!(claimed, Ok(Some(()))) {
                continue;
            }
            let written = self.write_txn_state(&scope, &id, None).await;
            let _ = self.with_txns(&scope, |txns, _| match written {
                Ok(()) => {
                    txns.remove(&id);
                }
                Err(_) => {
                    if let Some(m) = txns.get_mut(&id) {
                        m.pending = None;
                    }
                }
            });
            if written.is_ok() {
                info!(transactional_id = %id, "expired transactional id (transactional.id.expiration.ms)");
            }
        }
    }

    /// Loads every `__transaction_state` partition this broker leads that is not loaded yet.
    pub fn load_all_txn_partitions(&self) {
        let Some(topic) = self.topic(TRANSACTION_STATE_TOPIC) else {
            return;
        };
        for p in &topic.partitions {
            if p.leader == Some(self.node_id()) {
                let _ = self.with_txn_partition(p.index, |_, _| ());
            }
        }
    }

    /// Every transactional id this broker coordinates now (copies).
    pub fn coordinated_transactions(&self) -> Vec<TxnMetadata> {
        self.txn_coordinator
            .lock()
            .values()
            .flat_map(|l| l.txns.values().cloned())
            .collect()
    }
}

/// A transaction the timer found to drive.
#[derive(Debug)]
pub struct TxnWork {
    pub scope: TxnScope,
    pub id: String,
    /// Open past its timeout (abort it), rather than prepared (complete it).
    pub timed_out: bool,
}

/// Reads a `__transaction_state` partition from its log start to its end: the last record per
/// transactional id wins, a tombstone deletes. A record that does not decode is skipped with a
/// warning (never a reason to stop coordinating the others).
fn load_txns(partition: &Partition) -> anyhow::Result<BTreeMap<String, TxnMetadata>> {
    let mut latest: BTreeMap<String, Option<state::TxnValue>> = BTreeMap::new();
    crate::coordinator::scan_log(partition, |batch| {
        let Some(decoded) = decode_records(batch.bytes) else {
            warn!(offset = %batch.header.base_offset,
                "skipping a compressed or malformed batch in {TRANSACTION_STATE_TOPIC}");
            return;
        };
        for record in decoded {
            let Some(key) = record.key.as_deref() else {
                continue;
            };
            let id = match records::decode_key(key) {
                Ok(id) => id,
                Err(e) => {
                    warn!(offset = record.offset, error = %e, "skipping a record");
                    continue;
                }
            };
            if record.value_is_null {
                latest.insert(id, None);
                continue;
            }
            match records::decode_value(&record.value) {
                Ok(value) => {
                    latest.insert(id, Some(value));
                }
                Err(e) => warn!(offset = record.offset, error = %e, "skipping a record"),
            }
        }
    })?;
    Ok(latest
        .into_iter()
        .filter_map(|(id, v)| v.map(|v| (id.clone(), TxnMetadata::from_value(&id, &v))))
        .collect())
}
