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
//! The writes are coalesced per log directory (group commit, [`GroupCommit`]): a change takes a
//! sequence number ([`Broker::log_start_moved`]); [`Broker::persist_log_start`] returns at once
//! if a write that began after that number was taken has finished, and otherwise writes the file
//! itself, with every partition's current start — covering every change numbered before it
//! began. Concurrent deletions share one write. The periodic checkpoint ([`Broker::checkpoint`])
//! writes under the same per-directory lock, so two writers never race on the file and an older
//! snapshot is never written over a newer one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use keel_log::{LogError, Offset, TopicPartition};

use super::Broker;

/// Group commit of one file: changes are numbered; a write covers every change numbered before
/// it began; a caller waiting for its change either finds a finished write that covers it or
/// writes itself. Writes are serialized.
#[derive(Debug, Default)]
pub(super) struct GroupCommit {
    /// The number of changes recorded so far.
    changes: AtomicU64,
    /// Held while the file is written; the highest change number a finished write covers.
    durable: Mutex<u64>,
}

impl GroupCommit {
    /// Records a change (made before this call); returns its number.
    pub(super) fn record(&self) -> u64 {
        self.changes.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The number of the newest change recorded (0: none).
    pub(super) fn newest(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Returns once change `seq` is covered by a finished write: at once if one is, otherwise
    /// after running `write` (which must snapshot the state after it is called). `Ok(true)` when
    /// this call wrote. A failed write covers nothing.
    pub(super) fn persist<E>(
        &self,
        seq: u64,
        write: impl FnOnce() -> Result<(), E>,
    ) -> Result<bool, E> {
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        if *durable >= seq {
            return Ok(false);
        }
        // Taken under the lock, before the snapshot: every change numbered up to here is in it.
        let covers = self.newest();
        write()?;
        *durable = (*durable).max(covers);
        Ok(true)
    }

    /// Runs `write` (a full checkpoint) under the same lock, recording what it covers.
    pub(super) fn write_all<E>(&self, write: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let mut durable = self.durable.lock().unwrap_or_else(|e| e.into_inner());
        let covers = self.newest();
        write()?;
        *durable = (*durable).max(covers);
        Ok(())
    }
}

/// Per log directory (by index in `log.dirs` order), see the module docs.
#[derive(Debug, Default)]
pub(super) struct LogStartCheckpoints {
    dirs: Vec<GroupCommit>,
}

impl LogStartCheckpoints {
    pub(super) fn new(dirs: usize) -> LogStartCheckpoints {
        LogStartCheckpoints {
            dirs: (0..dirs).map(|_| GroupCommit::default()).collect(),
        }
    }

    /// Directory `index`'s group commit.
    pub(super) fn dir(&self, index: usize) -> &GroupCommit {
        &self.dirs[index]
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
    /// it after the move).
    pub(crate) fn log_start_moved(&self, dir_index: usize) -> LogStartChange {
        LogStartChange {
            dir_index,
            seq: self.log_starts.dir(dir_index).record(),
        }
    }

    /// The newest change recorded in log directory `dir_index`, if any: a DeleteRecords that
    /// moved nothing still waits for an earlier one's write before it answers.
    pub(crate) fn log_start_pending(&self, dir_index: usize) -> Option<LogStartChange> {
        let seq = self.log_starts.dir(dir_index).newest();
        (seq > 0).then_some(LogStartChange { dir_index, seq })
    }

    /// Blocking (file IO): returns once `change` is in a `log-start-offset-checkpoint` written
    /// and fsynced after it was recorded — writing it, unless a concurrent caller's write
    /// already covers it. A failed write takes the directory offline (as every fatal storage
    /// error does) and is returned.
    pub fn persist_log_start(&self, change: LogStartChange) -> Result<(), LogError> {
        let index = change.dir_index;
        let dir = &self.log_dirs[index];
        let written = self.log_starts.dir(index).persist(change.seq, || {
            if !self.log_dir_online(index) {
                return Err(LogError::Io {
                    op: "checkpoint log start offsets",
                    path: dir.path().to_path_buf(),
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
            dir.checkpoint_log_start_offsets(&offsets)
        });
        match written {
            Ok(_) => Ok(()),
            Err(e) => {
                if e.is_fatal() && self.log_dir_online(index) {
                    self.fail_log_dir(index, &e.to_string());
                }
                Err(e)
            }
        }
    }

    /// Runs `write` (the periodic checkpoint of directory `index`) under that directory's
    /// checkpoint lock ([`Broker::checkpoint`]).
    pub(super) fn checkpoint_dir<E>(
        &self,
        index: usize,
        write: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        self.log_starts.dir(index).write_all(write)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    use super::*;

    // Shows (issue 20): deletions that change the log start offsets of one directory at the same
    // time share one checkpoint write, and each returns only after a write that began after its
    // change finished; a failed write covers nothing, so the next caller writes again.
    #[test]
    fn concurrent_changes_share_one_write() {
        const CALLERS: usize = 8;
        let commit = Arc::new(GroupCommit::default());
        let writes = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(CALLERS));
        let threads: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (commit, writes, barrier) = (commit.clone(), writes.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let seq = commit.record();
                    barrier.wait(); // every change is recorded before anyone writes
                    commit
                        .persist(seq, || {
                            // What this write covers: every change recorded before it began.
                            assert_eq!(commit.newest(), CALLERS as u64);
                            std::thread::sleep(Duration::from_millis(20));
                            writes.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, ()>(())
                        })
                        .unwrap()
                })
            })
            .collect();
        let wrote: Vec<bool> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        assert_eq!(wrote.iter().filter(|w| **w).count(), 1);
        // A change after the write needs a new one; a failed write covers nothing.
        let seq = commit.record();
        assert_eq!(commit.persist(seq, || Err("disk full")), Err("disk full"));
        assert_eq!(commit.persist(seq, || Ok::<_, ()>(())), Ok(true));
        assert_eq!(commit.persist(seq, || Ok::<_, ()>(())), Ok(false));
        // The periodic checkpoint covers what was recorded before it began.
        let seq = commit.record();
        commit.write_all(|| Ok::<_, ()>(())).unwrap();
        assert_eq!(
            commit.persist(seq, || -> Result<(), ()> { unreachable!() }),
            Ok(false)
        );
    }
}
