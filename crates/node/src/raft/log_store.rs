//! The Raft log of a controller: `<metadata.log.dir>/__raft_log-0`, an ordinary `keel_log`
//! partition log (segments, indexes, CRCs, crash recovery) holding one uncompressed batch per
//! Raft entry — the batch's offset is the entry's index, its partition leader epoch the
//! entry's term, its one record's value the entry as JSON.
//!
//! Beside it, in the same directory:
//! - `raft-state.json`: the vote and the last purged log id, replaced atomically (fsync) on
//!   every change — a voter must never forget whom it voted for;
//! - `raft-committed.json`: the last known committed log id, written without fsync. It is a
//!   hint (a restart re-applies up to it before serving); losing it costs only a wait for the
//!   leader to say what is committed.
//!
//! Every append is fsynced before openraft hears it is flushed (`LogFlushed`), and entries are
//! readable as soon as `append` returns. All IO is synchronous on the caller's task (Keel's
//! `Storage` is), serialized by one mutex shared with the readers.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_log::batch::BatchIter;
use keel_log::plain_batch::{build_batch, decode_records};
use keel_log::storage::{OpenMode, Storage};
use keel_log::{LeaderEpoch, Log, LogConfig, LogError, Offset};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};

use super::{Entry, KeelRaft, LogId, StorageError, Vote};
use crate::clock::Clock;

/// The Raft log's partition directory name.
pub const RAFT_LOG_DIR: &str = "__raft_log-0";
const STATE_FILE: &str = "raft-state.json";
const COMMITTED_FILE: &str = "raft-committed.json";
/// Bytes read per step when loading entries.
const READ_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct DurableState {
    vote: Option<Vote>,
    last_purged: Option<LogId>,
}

#[derive(Debug)]
struct Inner {
    log: Log,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    state: DurableState,
    last_log_id: Option<LogId>,
}

/// The Raft log store (and its reader: a clone shares the log).
#[derive(Debug, Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_error(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(AnyError::error(format!("{what}: {e}"))).into()
}

fn read_error(what: &str, e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(AnyError::error(format!("{what}: {e}"))).into()
}

/// Runs storage IO off the async runtime's threads (inline on a current-thread runtime).
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    crate::blocking::run_blocking(f)
        .await
        .map_err(|e| io_error("storage task", e))?
}

impl LogStore {
    /// Opens (creating if needed) the Raft log under `metadata_dir`, recovering it from its
    /// start (a controller never trusts a torn tail).
    pub fn open(
        storage: Arc<dyn Storage>,
        metadata_dir: &Path,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, LogError> {
        let dir = metadata_dir.join(RAFT_LOG_DIR);
        keel_log::storage::create_dir_all_durable(storage.as_ref(), &dir)
            .map_err(LogError::io("create directory", &dir))?;
        let state_path = dir.join(STATE_FILE);
        let state = match keel_log::storage::read_file_if_exists(storage.as_ref(), &state_path)
            .map_err(LogError::io("read", &state_path))?
        {
            Some(bytes) => serde_json::from_slice::<DurableState>(&bytes).map_err(|e| {
                LogError::CorruptFile {
                    path: state_path.clone(),
                    reason: format!("unreadable Raft state: {e}"),
                }
            })?,
            None => DurableState::default(),
        };
        let start = state.last_purged.map(|l| l.index + 1).unwrap_or(0);
        let log = Log::open(
            storage.clone(),
            dir.clone(),
            raft_log_config(),
            Offset(0),
            Offset(i64::try_from(start).unwrap_or(i64::MAX)),
            false,
            clock.now_ms(),
        )?;
        let mut inner = Inner {
            log,
            storage,
            dir,
            clock,
            state,
            last_log_id: None,
        };
        inner.last_log_id = inner
            .last_log_id_on_disk()
            .map_err(|e| LogError::CorruptFile {
                path: inner.dir.clone(),
                reason: e.to_string(),
            })?;
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug; the data (a file-backed log) is still
        // consistent on disk, so keep going rather than poison every later call.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the log holds no entry and no vote: a freshly formatted controller.
    pub fn is_pristine(&self) -> bool {
        let inner = self.lock();
        inner.last_log_id.is_none() && inner.state.vote.is_none()
    }
}

fn raft_log_config() -> LogConfig {
    LogConfig {
        retention_ms: None,
        retention_bytes: None,
        segment_bytes: 8 * 1024 * 1024,
        // One entry is one operation's records; the request size limit bounds it.
        max_message_bytes: 256 * 1024 * 1024,
        ..LogConfig::default()
    }
}

impl Inner {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn start_index(&self) -> u64 {
        u64::try_from(self.log.log_start_offset().0).unwrap_or(0)
    }

    fn end_index(&self) -> u64 {
        u64::try_from(self.log.log_end_offset().0).unwrap_or(0)
    }

    /// Entries with index in `start..end` (clamped to what the log holds).
    fn read(&self, start: u64, end: u64) -> Result<Vec<Entry>, StorageError> {
        let end = end.min(self.end_index());
        let mut next = start.max(self.start_index());
        let mut out = Vec::new();
        while next < end {
            let data = self
                .log
                .read(
                    Offset(next as i64),
                    READ_BYTES,
                    Some(Offset(end as i64)),
                    true,
                )
                .map_err(|e| read_error("read the Raft log", e))?;
            let before = next;
            for batch in BatchIter::new(&data.records) {
                let batch = batch.map_err(|e| read_error("decode a Raft log batch", e))?;
                let records = decode_records(batch.bytes)
                    .ok_or_else(|| read_error("decode a Raft log batch", "not a plain batch"))?;
                for record in records {
                    let index = u64::try_from(record.offset).unwrap_or(0);
                    if index < next || index >= end {
                        continue;
                    }
                    let entry: Entry = serde_json::from_slice(&record.value)
                        .map_err(|e| read_error(&format!("decode Raft entry {index}"), e))?;
                    out.push(entry);
                    next = index + 1;
                }
            }
            if next == before {
                return Err(read_error(
                    "read the Raft log",
                    format!("no entry at index {next}"),
                ));
            }
        }
        Ok(out)
    }

    fn last_log_id_on_disk(&self) -> Result<Option<LogId>, StorageError> {
        let end = self.end_index();
        if end > self.start_index() {
            Ok(self.read(end - 1, end)?.last().map(|e| e.log_id))
        } else {
            Ok(self.state.last_purged)
        }
    }

    /// Appends entries (their indexes must continue the log) and fsyncs them.
    fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        let now_ms = self.now_ms();
        for entry in entries {
            let value = serde_json::to_vec(entry).map_err(|e| io_error("encode", e))?;
            let batch = build_batch(&[(None, value.as_slice())], now_ms);
            let epoch = LeaderEpoch(super::controller_epoch(entry.log_id.leader_id.term));
            let info = self
                .log
                .append_as_leader(&batch, epoch, now_ms)
                .map_err(|e| io_error("append to the Raft log", e))?;
            if u64::try_from(info.first_offset.0).ok() != Some(entry.log_id.index) {
                return Err(io_error(
                    "append to the Raft log",
                    format!(
                        "entry {} landed at offset {}",
                        entry.log_id.index, info.first_offset.0
                    ),
                ));
            }
            self.last_log_id = Some(entry.log_id);
        }
        self.log
            .flush(now_ms)
            .map_err(|e| io_error("fsync the Raft log", e))
    }

    fn save_state(&self) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&self.state).map_err(|e| io_error("encode", e))?;
        keel_log::storage::write_file_atomically(
            self.storage.as_ref(),
            &self.dir.join(STATE_FILE),
            &bytes,
        )
        .map_err(|e| io_error("write the Raft state", e))
    }
}

impl RaftLogReader<KeelRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e + 1,
            Bound::Excluded(e) => *e,
            Bound::Unbounded => u64::MAX,
        };
        blocking({
            let store = self.clone();
            move || store.lock().read(start, end)
        })
        .await
    }
}

impl RaftLogStorage<KeelRaft> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<KeelRaft>, StorageError> {
        let inner = self.lock();
        Ok(LogState {
            last_purged_log_id: inner.state.last_purged,
            last_log_id: inner.last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let vote = *vote;
        blocking({
            let store = self.clone();
            move || {
                let mut inner = store.lock();
                let previous = inner.state.vote.replace(vote);
                if let Err(e) = inner.save_state() {
                    inner.state.vote = previous;
                    return Err(e);
                }
                Ok(())
            }
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.lock().state.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let inner = self.lock();
        let path = inner.dir.join(COMMITTED_FILE);
        let bytes = serde_json::to_vec(&committed).map_err(|e| io_error("encode", e))?;
        // A hint, not fsynced (see the module docs); a torn write reads as "unknown".
        let mut file = inner
            .storage
            .open_file(&path, OpenMode::CreateOrOpen)
            .map_err(|e| io_error("open the committed hint", e))?;
        file.truncate(0)
            .and_then(|()| file.append(&bytes))
            .map_err(|e| io_error("write the committed hint", e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let inner = self.lock();
        let path = inner.dir.join(COMMITTED_FILE);
        let Ok(Some(bytes)) = keel_log::storage::read_file_if_exists(inner.storage.as_ref(), &path)
        else {
            return Ok(None);
        };
        let committed: Option<LogId> = serde_json::from_slice(&bytes).unwrap_or(None);
        // Never past what the log holds (the hint may outlive entries a crash took).
        Ok(committed.filter(|c| Some(c.index) <= inner.last_log_id.map(|l| l.index)))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<KeelRaft>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let result = blocking({
            let store = self.clone();
            move || store.lock().append(&entries)
        })
        .await;
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        blocking({
            let store = self.clone();
            move || {
                let mut inner = store.lock();
                let now_ms = inner.now_ms();
                inner
                    .log
                    .truncate_to(Offset(log_id.index as i64), now_ms)
                    .map_err(|e| io_error("truncate the Raft log", e))?;
                inner
                    .log
                    .flush(now_ms)
                    .map_err(|e| io_error("fsync the Raft log", e))?;
                inner.last_log_id = inner.last_log_id_on_disk()?;
                Ok(())
            }
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        blocking({
            let store = self.clone();
            move || {
                let mut inner = store.lock();
                // Durable first: a restart must not believe purged entries are still there.
                let previous = inner.state.last_purged.replace(log_id);
                if let Err(e) = inner.save_state() {
                    inner.state.last_purged = previous;
                    return Err(e);
                }
                let now_ms = inner.now_ms();
                let new_start = Offset(i64::try_from(log_id.index + 1).unwrap_or(i64::MAX));
                if new_start > inner.log.log_end_offset() {
                    // Past the end: a snapshot from the leader covers more than this log holds
                    // (openraft purges up to the installed snapshot). The log restarts empty
                    // after it.
                    inner
                        .log
                        .truncate_fully_and_start_at(new_start)
                        .map_err(|e| io_error("purge the Raft log", e))?;
                } else {
                    inner
                        .log
                        .increment_log_start_offset(new_start)
                        .map_err(|e| io_error("purge the Raft log", e))?;
                    let end = inner.log.log_end_offset();
                    inner
                        .log
                        .apply_retention(now_ms, end)
                        .map_err(|e| io_error("purge the Raft log", e))?;
                }
                if inner.last_log_id.is_none_or(|l| l.index < log_id.index) {
                    inner.last_log_id = Some(log_id);
                }
                Ok(())
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_log::storage::MemStorage;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(super::super::MetadataWrite {
                first_offset: index as i64,
                records: vec![],
            }),
        }
    }

    fn open(storage: &Arc<MemStorage>) -> LogStore {
        LogStore::open(
            storage.clone(),
            Path::new("/meta"),
            Arc::new(crate::clock::SystemClock),
        )
        .unwrap()
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    // Shows: entries, the vote and purges survive a crash (everything fsynced before it is
    // acknowledged); truncation removes the suffix; the committed hint never points past the log.
    #[test]
    fn entries_votes_and_purges_survive_a_crash() {
        let storage = Arc::new(MemStorage::new());
        block_on(async {
            let mut store = open(&storage);
            assert!(store.is_pristine());
            let entries: Vec<Entry> = (0..5).map(|i| entry(1 + i / 3, i)).collect();
            store.lock().append(&entries).unwrap();
            let vote = Vote::new(2, 1);
            store.save_vote(&vote).await.unwrap();
            store
                .save_committed(Some(entry(2, 4).log_id))
                .await
                .unwrap();
            store.truncate(entry(2, 4).log_id).await.unwrap();
            store.purge(entry(1, 1).log_id).await.unwrap();

            storage.crash();
            let mut store = open(&storage);
            assert!(!store.is_pristine());
            assert_eq!(store.read_vote().await.unwrap(), Some(vote));
            let state = store.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(entry(1, 1).log_id));
            assert_eq!(state.last_log_id, Some(entry(2, 3).log_id));
            let entries = store.try_get_log_entries(2..10).await.unwrap();
            assert_eq!(entries, vec![entry(1, 2), entry(2, 3)]);
            // The hint (index 4) points past the truncated log: ignored.
            assert_eq!(store.read_committed().await.unwrap(), None);

            // A purge past the end (an installed snapshot) leaves an empty log after it; the
            // next append continues there, also after a crash.
            store.purge(entry(3, 9).log_id).await.unwrap();
            store.lock().append(&[entry(3, 10)]).unwrap();
            storage.crash();
            let mut store = open(&storage);
            let state = store.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id, Some(entry(3, 9).log_id));
            assert_eq!(state.last_log_id, Some(entry(3, 10).log_id));
            assert_eq!(
                store.try_get_log_entries(10..11).await.unwrap(),
                vec![entry(3, 10)]
            );
        });
    }
}
