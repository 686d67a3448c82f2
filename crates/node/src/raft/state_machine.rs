//! The controller quorum's state machine: every controller — active or standby — applies the
//! committed Raft entries in order, replaying their records into a `ClusterImage` and appending
//! them to `__cluster_metadata-0` (the applied log brokers fetch). The applied end offset is
//! published on a watch channel, which wakes long-polling metadata fetches.
//!
//! Snapshots: the image's records (`ClusterImage::to_snapshot`) with the metadata offset they
//! end at, the Raft log id and membership they cover, in `<end offset>.checkpoint` next to the
//! segments of `__cluster_metadata-0` (JSON, written atomically; the two newest are kept). The
//! snapshot's bytes are also what one voter sends another that lags behind the purged Raft log.
//!
//! A restart loads the newest readable snapshot, cuts `__cluster_metadata-0` back to its end
//! and reports its log id as applied; openraft then re-applies the committed entries after it
//! from the Raft log before the controller serves anything.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use keel_controller::types::MetadataOffset;
use keel_controller::{ClusterImage, Record};
use keel_log::storage::Storage;
use openraft::storage::RaftStateMachine;
use openraft::{AnyError, EntryPayload, RaftSnapshotBuilder, SnapshotMeta, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::log_store::blocking;
use super::{Entry, KeelRaft, LogId, MetadataApplied, StorageError, StoredMembership};
use crate::clock::Clock;
use crate::metadata_log::{LocalMetadataLog, MetadataLogError};

/// Snapshot files kept (the newest ones; older are deleted).
const SNAPSHOTS_KEPT: usize = 2;
/// Suffix of a snapshot file (Kafka's).
const SNAPSHOT_SUFFIX: &str = ".checkpoint";

/// A snapshot as stored and as sent between voters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotFile {
    /// The metadata offset the records rebuild the state up to (exclusive).
    pub end_offset: i64,
    pub last_log_id: Option<LogId>,
    pub membership: StoredMembership,
    pub snapshot_id: String,
    pub records: Vec<Record>,
}

impl SnapshotFile {
    fn meta(&self) -> SnapshotMeta<u64, openraft::BasicNode> {
        SnapshotMeta {
            last_log_id: self.last_log_id,
            last_membership: self.membership.clone(),
            snapshot_id: self.snapshot_id.clone(),
        }
    }

    fn into_snapshot(self) -> Result<openraft::Snapshot<KeelRaft>, StorageError> {
        let bytes = serde_json::to_vec(&self).map_err(|e| sm_error("encode a snapshot", e))?;
        Ok(openraft::Snapshot {
            meta: self.meta(),
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

fn sm_error(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_state_machine(AnyError::error(format!("{what}: {e}"))).into()
}

#[derive(Debug)]
struct Inner {
    image: ClusterImage,
    log: LocalMetadataLog,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
}

/// The applied state, shared between openraft (which applies) and the controller server
/// (which reads the image, serves the log and waits for offsets). Clones share it.
#[derive(Debug, Clone)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    applied_end: Arc<watch::Sender<MetadataOffset>>,
    /// The newest snapshot encoded for brokers (FetchSnapshot), by its end offset.
    broker_snapshot: Arc<Mutex<Option<BrokerSnapshot>>>,
}

/// A snapshot as brokers fetch it: its records as uncompressed metadata batches (JSON values,
/// offsets 0..n), the metadata offset it ends at and the controller epoch of its last entry.
#[derive(Debug, Clone)]
pub struct BrokerSnapshot {
    pub end_offset: i64,
    pub epoch: i32,
    pub bytes: Bytes,
}

/// Records per batch of an encoded snapshot.
const SNAPSHOT_RECORDS_PER_BATCH: usize = 500;

impl StateMachine {
    /// Opens `__cluster_metadata-0` under `metadata_dir` and rebuilds the applied state from
    /// the newest readable snapshot (or from nothing).
    pub fn open(
        storage: Arc<dyn Storage>,
        metadata_dir: &Path,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, MetadataLogError> {
        let now_ms = clock.now_ms();
        let mut log = LocalMetadataLog::open(storage.clone(), metadata_dir, now_ms)?;
        let (image, last_applied, membership, end) = match latest_snapshot(
            storage.as_ref(),
            log.dir(),
        ) {
            Some(file) => {
                let end = MetadataOffset(file.end_offset);
                match ClusterImage::from_snapshot(end, &file.records) {
                    Ok(image) => (image, file.last_log_id, file.membership, end),
                    Err(e) => {
                        tracing::warn!(end = end.0, error = %e,
                                "metadata snapshot does not load; applying the Raft log from the start");
                        (
                            ClusterImage::new(),
                            None,
                            StoredMembership::default(),
                            MetadataOffset(0),
                        )
                    }
                }
            }
            None => (
                ClusterImage::new(),
                None,
                StoredMembership::default(),
                MetadataOffset(0),
            ),
        };
        log.reset_to(end, now_ms)?;
        let (applied_end, _) = watch::channel(end);
        Ok(StateMachine {
            inner: Arc::new(Mutex::new(Inner {
                image,
                log,
                last_applied,
                membership,
                storage,
                clock,
            })),
            applied_end: Arc::new(applied_end),
            broker_snapshot: Arc::new(Mutex::new(None)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the applied image (what a controller becoming active starts from).
    pub fn image(&self) -> ClusterImage {
        self.lock().image.clone()
    }

    /// Runs `f` on the applied image without copying it.
    pub fn with_image<R>(&self, f: impl FnOnce(&ClusterImage) -> R) -> R {
        f(&self.lock().image)
    }

    /// The last applied Raft log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.lock().last_applied
    }

    /// The applied end offset of `__cluster_metadata-0`.
    pub fn end_offset(&self) -> MetadataOffset {
        *self.applied_end.borrow()
    }

    /// A receiver of the applied end offset.
    pub fn subscribe(&self) -> watch::Receiver<MetadataOffset> {
        self.applied_end.subscribe()
    }

    /// The first offset `__cluster_metadata-0` holds.
    pub fn start_offset(&self) -> MetadataOffset {
        self.lock().log.start_offset()
    }

    /// Raw applied metadata batches from `from` on (at most about `max_bytes`, at least one
    /// batch).
    pub fn read_batches(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Bytes, MetadataLogError> {
        self.lock().log.read_batches(from, max_bytes)
    }

    /// Applied records from `from` on.
    pub fn read(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Vec<(MetadataOffset, Record)>, MetadataLogError> {
        self.lock().log.read(from, max_bytes)
    }

    /// End offset and epoch of the newest snapshot, for a Fetch below the applied log's start.
    pub fn latest_snapshot_id(&self) -> Option<(i64, i32)> {
        self.broker_snapshot().map(|s| (s.end_offset, s.epoch))
    }

    /// The newest snapshot encoded for brokers (cached until a newer one is written).
    pub fn broker_snapshot(&self) -> Option<BrokerSnapshot> {
        let newest = {
            let inner = self.lock();
            snapshot_offsets(inner.storage.as_ref(), inner.log.dir())
                .last()
                .copied()
        }?;
        let mut cache = self
            .broker_snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(cached) = cache.as_ref().filter(|c| c.end_offset == newest) {
            return Some(cached.clone());
        }
        let file = self.latest_snapshot()?;
        let encoded = encode_for_brokers(&file).ok()?;
        *cache = Some(encoded.clone());
        Some(encoded)
    }

    /// After a snapshot: the applied log keeps the records from the *previous* snapshot's end
    /// on (brokers slightly behind still fetch records; the rest load the newest snapshot).
    fn compact(&self) {
        let mut inner = self.lock();
        let offsets = snapshot_offsets(inner.storage.as_ref(), inner.log.dir());
        if offsets.len() < 2 {
            return;
        }
        let start = MetadataOffset(offsets[offsets.len() - 2]);
        let now_ms = inner.clock.now_ms();
        if let Err(e) = inner.log.advance_start(start, now_ms) {
            tracing::warn!(error = %e, "cannot compact __cluster_metadata-0");
        }
    }

    /// The newest stored snapshot, if any.
    pub fn latest_snapshot(&self) -> Option<SnapshotFile> {
        let inner = self.lock();
        latest_snapshot(inner.storage.as_ref(), inner.log.dir())
    }

    fn apply_entry(&self, entry: &Entry) -> Result<MetadataApplied, StorageError> {
        let mut inner = self.lock();
        match &entry.payload {
            EntryPayload::Blank => {}
            EntryPayload::Membership(membership) => {
                inner.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
            }
            EntryPayload::Normal(write) => {
                let next = inner.image.next_offset();
                if write.first_offset != next.0 {
                    return Err(sm_error(
                        "apply",
                        format!(
                            "entry {} was generated for metadata offset {} but applies at {}",
                            entry.log_id, write.first_offset, next.0
                        ),
                    ));
                }
                let now_ms = inner.clock.now_ms();
                let epoch = super::controller_epoch(entry.log_id.leader_id.term);
                inner
                    .log
                    .append(&write.records, epoch, now_ms, false)
                    .map_err(|e| sm_error("append to __cluster_metadata-0", e))?;
                for (index, record) in write.records.iter().enumerate() {
                    let offset = MetadataOffset(next.0 + index as i64);
                    inner.image.replay(offset, record).map_err(|e| {
                        sm_error(&format!("replay the record at offset {}", offset.0), e)
                    })?;
                }
            }
        }
        inner.last_applied = Some(entry.log_id);
        Ok(MetadataApplied {
            end_offset: inner.image.next_offset().0,
        })
    }

    fn snapshot_file(&self) -> SnapshotFile {
        let inner = self.lock();
        let end_offset = inner.image.next_offset().0;
        let snapshot_id = match inner.last_applied {
            Some(l) => format!("{}-{}-{end_offset}", l.leader_id.term, l.index),
            None => format!("0-0-{end_offset}"),
        };
        SnapshotFile {
            end_offset,
            last_log_id: inner.last_applied,
            membership: inner.membership.clone(),
            snapshot_id,
            records: inner.image.to_snapshot(),
        }
    }
}

fn snapshot_path(dir: &Path, end: i64) -> PathBuf {
    dir.join(format!("{end:020}{SNAPSHOT_SUFFIX}"))
}

/// Snapshot end offsets present in `dir`, ascending.
fn snapshot_offsets(storage: &dyn Storage, dir: &Path) -> Vec<i64> {
    let Ok(entries) = storage.list_dir(dir) else {
        return Vec::new();
    };
    let mut offsets: Vec<i64> = entries
        .iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| e.name.strip_suffix(SNAPSHOT_SUFFIX))
        .filter_map(|stem| stem.parse::<i64>().ok())
        .collect();
    offsets.sort();
    offsets
}

/// The newest readable snapshot in `dir` (unreadable ones are skipped with a warning).
fn latest_snapshot(storage: &dyn Storage, dir: &Path) -> Option<SnapshotFile> {
    for offset in snapshot_offsets(storage, dir).into_iter().rev() {
        let path = snapshot_path(dir, offset);
        match keel_log::storage::read_file_if_exists(storage, &path) {
            Ok(Some(bytes)) => match serde_json::from_slice::<SnapshotFile>(&bytes) {
                Ok(file) if file.end_offset == offset => return Some(file),
                Ok(_) => {
                    tracing::warn!(path = %path.display(), "metadata snapshot names another offset; ignored")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable metadata snapshot ignored")
                }
            },
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable metadata snapshot ignored")
            }
        }
    }
    None
}

/// A snapshot's records as metadata batches with offsets `0..n` (what FetchSnapshot serves and
/// `decode_metadata_batches` reads back).
fn encode_for_brokers(file: &SnapshotFile) -> Result<BrokerSnapshot, serde_json::Error> {
    let mut bytes = Vec::new();
    for (chunk_index, chunk) in file.records.chunks(SNAPSHOT_RECORDS_PER_BATCH).enumerate() {
        let values = chunk
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()?;
        let entries: Vec<(Option<&[u8]>, &[u8])> =
            values.iter().map(|v| (None, v.as_slice())).collect();
        let mut batch = keel_log::plain_batch::build_batch(&entries, 0);
        keel_log::batch::set_base_offset(
            &mut batch,
            keel_log::Offset((chunk_index * SNAPSHOT_RECORDS_PER_BATCH) as i64),
        );
        bytes.extend_from_slice(&batch);
    }
    Ok(BrokerSnapshot {
        end_offset: file.end_offset,
        epoch: file
            .last_log_id
            .map_or(0, |l| super::controller_epoch(l.leader_id.term)),
        bytes: Bytes::from(bytes),
    })
}

/// Writes `file` durably and deletes all but the newest snapshots.
fn store_snapshot(
    storage: &dyn Storage,
    dir: &Path,
    file: &SnapshotFile,
) -> Result<(), StorageError> {
    let bytes = serde_json::to_vec(file).map_err(|e| sm_error("encode a snapshot", e))?;
    let path = snapshot_path(dir, file.end_offset);
    keel_log::storage::write_file_atomically(storage, &path, &bytes)
        .map_err(|e| sm_error(&format!("write {}", path.display()), e))?;
    for old in snapshot_offsets(storage, dir)
        .iter()
        .rev()
        .skip(SNAPSHOTS_KEPT)
    {
        let old = snapshot_path(dir, *old);
        if let Err(e) = storage.remove_file(&old) {
            tracing::warn!(path = %old.display(), error = %e, "cannot delete an old metadata snapshot");
        }
    }
    Ok(())
}

/// Builds a snapshot from a copy of the state taken when openraft asked for a builder (apply
/// goes on meanwhile).
#[derive(Debug)]
pub struct SnapshotBuilder {
    file: Option<SnapshotFile>,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    machine: StateMachine,
}

impl RaftSnapshotBuilder<KeelRaft> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<openraft::Snapshot<KeelRaft>, StorageError> {
        let file = self
            .file
            .take()
            .ok_or_else(|| sm_error("build a snapshot", "built twice"))?;
        let storage = self.storage.clone();
        let dir = self.dir.clone();
        let machine = self.machine.clone();
        let file = blocking(move || {
            store_snapshot(storage.as_ref(), &dir, &file)?;
            machine.compact();
            Ok(file)
        })
        .await?;
        tracing::info!(end_offset = file.end_offset, log_id = ?file.last_log_id, "metadata snapshot written");
        file.into_snapshot()
    }
}

impl RaftStateMachine<KeelRaft> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<MetadataApplied>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let machine = self.clone();
        let applied = blocking(move || {
            entries
                .iter()
                .map(|entry| machine.apply_entry(entry))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
        if let Some(last) = applied.last() {
            self.applied_end
                .send_replace(MetadataOffset(last.end_offset));
        }
        Ok(applied)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        let file = self.snapshot_file();
        let inner = self.lock();
        SnapshotBuilder {
            file: Some(file),
            storage: inner.storage.clone(),
            dir: inner.log.dir().to_path_buf(),
            machine: self.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let file: SnapshotFile = serde_json::from_slice(snapshot.get_ref())
            .map_err(|e| sm_error("decode a received snapshot", e))?;
        if file.last_log_id != meta.last_log_id {
            return Err(sm_error(
                "install a snapshot",
                format!(
                    "its file covers {:?} but its meta says {:?}",
                    file.last_log_id, meta.last_log_id
                ),
            ));
        }
        let end = MetadataOffset(file.end_offset);
        let image = ClusterImage::from_snapshot(end, &file.records)
            .map_err(|e| sm_error("load a received snapshot", e))?;
        let machine = self.clone();
        blocking(move || {
            let mut inner = machine.lock();
            store_snapshot(inner.storage.as_ref(), inner.log.dir(), &file)?;
            let now_ms = inner.clock.now_ms();
            inner
                .log
                .reset_to(end, now_ms)
                .map_err(|e| sm_error("reset __cluster_metadata-0", e))?;
            inner.image = image;
            inner.last_applied = file.last_log_id;
            inner.membership = file.membership;
            Ok(())
        })
        .await?;
        tracing::info!(end_offset = end.0, log_id = ?meta.last_log_id, "installed a metadata snapshot from the leader");
        self.applied_end.send_replace(end);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<openraft::Snapshot<KeelRaft>>, StorageError> {
        match self.latest_snapshot() {
            Some(file) => Ok(Some(file.into_snapshot()?)),
            None => Ok(None),
        }
    }
}
