//! Log start offsets made durable before anyone relies on them (issue 20).
//!
//! A DeleteRecords moves a partition's log start offset, often into the middle of a segment:
//! only `log-start-offset-checkpoint` remembers it across a crash. Kafka writes that file every
//! `log.flush.start.offset.checkpoint.interval.ms` (UnifiedLog.maybeIncrementLogStartOffset:
//! "the deleteRecordsOffset may be lost only if all in-sync replicas of this broker are
//! shutdown in an unclean manner"); Keel writes it before the leader answers the DeleteRecords
//! and before a follower reports the new start in its next fetch (which is what the leader's
//! answer waits for), so after a `kill -9` every replica starts where it said it did.
//!
//! The writes are coalesced per log directory (group commit): a change takes a sequence number
//! ([`Broker::log_start_moved`]); [`Broker::persist_log_start`] returns at once if a write that
//! began after that number was taken has finished, and otherwise writes the file itself, with
//! every partition's current start — covering every change numbered before it began. Concurrent
//! deletions share one write. The periodic checkpoint ([`Broker::checkpoint`]) holds the same
//! per-directory lock, so two writers never race on the file and an older snapshot is never
//! written over a newer one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use keel_log::{LogError, Offset, TopicPartition};

use super::Broker;

/// One log directory's change counter and the newest change a finished write covers.
#[derive(Debug, Default)]
struct DirLogStarts {
    /// Bumped by every log start offset change in this directory.
    changes: AtomicU64,
    /// Held while the directory's checkpoint files are written; the highest change number a
    /// finished write covers.
    durable: Mutex<u64>,
}

/// Per log directory (by index in `log.dirs` order), see the module docs.
#[derive(Debug, Default)]
pub(super) struct LogStartCheckpoints {
    dirs: Vec<DirLogStarts>,
}

impl LogStartCheckpoints {
    pub(super) fn new(dirs: usize) -> LogStartCheckpoints {
        LogStartCheckpoints {
            dirs: (0..dirs).map(|_| DirLogStarts::default()).collect(),
        }
    }

    /// Locks directory `index`'s checkpoint files for a write; returns the guard and the change
    /// number the write will cover (taken after the lock, so every change made before it is in
    /// the snapshot the caller takes next).
    pub(super) fn begin_write(&self, index: usize) -> (MutexGuard<'_, u64>, u64) {
        let dir = &self.dirs[index];
        let guard = dir.durable.lock().unwrap_or_else(|e| e.into_inner());
        let covers = dir.changes.load(Ordering::SeqCst);
        (guard, covers)
    }
}

/// A log start offset change that is not known to be durable yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStartChange {
    dir_index: usize,
    seq: u64,
}

impl Broker {
    /// Records that a log start offset of a partition in log directory `dir_index` moved (call
    /// it after the move, with the log lock released or held).
    pub(crate) fn log_start_moved(&self, dir_index: usize) -> LogStartChange {
        let seq = self.log_starts.dirs[dir_index]
            .changes
            .fetch_add(1, Ordering::SeqCst)
            + 1;
        LogStartChange { dir_index, seq }
    }

    /// The newest change recorded in log directory `dir_index`, if any: a DeleteRecords that
    /// moved nothing still waits for an earlier one's write before it answers.
    pub(crate) fn log_start_pending(&self, dir_index: usize) -> Option<LogStartChange> {
        let seq = self.log_starts.dirs[dir_index]
            .changes
            .load(Ordering::SeqCst);
        (seq > 0).then_some(LogStartChange { dir_index, seq })
    }

    /// Blocking (file IO): returns once `change` is in a `log-start-offset-checkpoint` written
    /// and fsynced after it was recorded — writing it, unless a concurrent caller's write
    /// already covers it. A failed write takes the directory offline (as every fatal storage
    /// error does) and is returned.
    pub fn persist_log_start(&self, change: LogStartChange) -> Result<(), LogError> {
        let index = change.dir_index;
        let (mut durable, covers) = self.log_starts.begin_write(index);
        if *durable >= change.seq {
            return Ok(());
        }
        if !self.log_dir_online(index) {
            return Err(LogError::Io {
                op: "checkpoint log start offsets",
                path: self.log_dirs[index].path().to_path_buf(),
                source: std::io::Error::other("the log directory is offline"),
            });
        }
        let offsets: BTreeMap<TopicPartition, Offset> = self
            .all_partitions()
            .into_iter()
            .filter(|p| p.log_dir_index == index)
            .filter_map(|p| {
                let start = p.lock_log().ok()?.log_start_offset();
                Some((p.tp.clone(), start))
            })
            .collect();
        match self.log_dirs[index].checkpoint_log_start_offsets(&offsets) {
            Ok(()) => {
                *durable = (*durable).max(covers);
                Ok(())
            }
            Err(e) => {
                drop(durable);
                if e.is_fatal() {
                    self.fail_log_dir(index, &e.to_string());
                }
                Err(e)
            }
        }
    }

    /// The write lock of directory `index` and the change number a write under it covers, for
    /// [`Broker::checkpoint`].
    pub(super) fn begin_checkpoint(&self, index: usize) -> (MutexGuard<'_, u64>, u64) {
        self.log_starts.begin_write(index)
    }
}
