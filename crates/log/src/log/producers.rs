//! The log's idempotent-producer state ([`crate::producer_state`]): snapshot files
//! `<offset>.snapshot` beside the segments, loading them at open and after a truncation, and
//! replaying the batch headers after the newest one.

use std::path::PathBuf;

use super::Log;
use crate::error::LogError;
use crate::producer_state::{ProducerStates, PRODUCER_SNAPSHOT_SUFFIX};
use crate::segment::{parse_segment_file_name, segment_file_name, Visit};
use crate::storage::{read_file_if_exists, write_file_atomically};
use crate::types::Offset;

impl Log {
    /// Every producer's state in this partition, up to the log end offset.
    pub fn producer_states(&self) -> &ProducerStates {
        &self.producers
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`); returns how
    /// many.
    pub fn remove_expired_producers(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.remove_expired(now_ms, expiration_ms)
    }

    fn snapshot_path(&self, offset: Offset) -> PathBuf {
        self.dir
            .join(segment_file_name(offset, PRODUCER_SNAPSHOT_SUFFIX))
    }

    /// The offsets of the snapshot files present, ascending.
    pub(super) fn producer_snapshot_offsets(&self) -> Result<Vec<Offset>, LogError> {
        let entries = self
            .storage
            .list_dir(&self.dir)
            .map_err(self.io_error("list"))?;
        let mut offsets: Vec<Offset> = entries
            .iter()
            .filter(|e| !e.is_dir)
            .filter_map(|e| parse_segment_file_name(&e.name, PRODUCER_SNAPSHOT_SUFFIX))
            .collect();
        offsets.sort();
        Ok(offsets)
    }

    /// Writes the state as of the log end offset to `<log end>.snapshot` (durably), after the
    /// `.txnindex` of the last two segments (the active one, and the one a roll just closed):
    /// every aborted transaction below a snapshot is in a file, so a load replaying from the
    /// snapshot finds them all.
    pub(super) fn write_producer_snapshot(&mut self) -> Result<(), LogError> {
        let last_two: Vec<Offset> = self.segments.keys().rev().take(2).copied().collect();
        for base in last_two {
            self.write_txn_index(base)?;
        }
        let path = self.snapshot_path(self.log_end_offset());
        write_file_atomically(self.storage.as_ref(), &path, &self.producers.encode())
            .map_err(LogError::io("write producer snapshot", path))
    }

    /// Removes the snapshots `doomed` selects.
    pub(super) fn delete_producer_snapshots(
        &mut self,
        doomed: impl Fn(Offset) -> bool,
    ) -> Result<(), LogError> {
        for offset in self.producer_snapshot_offsets()? {
            if doomed(offset) {
                let path = self.snapshot_path(offset);
                self.storage
                    .remove_file(&path)
                    .map_err(LogError::io("remove producer snapshot", path))?;
                self.dir_unsynced = true;
            }
        }
        Ok(())
    }

    /// Rebuilds the producer state and the aborted-transaction index for the current log end
    /// offset: drops snapshots past it, loads the `.txnindex` files and the newest remaining
    /// snapshot (a damaged one is removed and the next older one tried), and replays every
    /// batch header after it (markers read whole). Without any snapshot the replay starts at
    /// the second-to-last segment, as Kafka does for logs written before snapshots existed; a
    /// damaged `.txnindex` makes it start at the first segment with no snapshot.
    pub(super) fn load_producer_state(&mut self) -> Result<(), LogError> {
        let log_end_offset = self.log_end_offset();
        self.delete_producer_snapshots(|offset| offset > log_end_offset)?;
        let txn_index_damaged = self.load_txn_indexes()?;
        let before = self.aborted.clone();
        let mut offsets = if txn_index_damaged {
            Vec::new()
        } else {
            self.producer_snapshot_offsets()?
        };
        let mut loaded = None;
        while let Some(offset) = offsets.pop() {
            let path = self.snapshot_path(offset);
            let bytes = read_file_if_exists(self.storage.as_ref(), &path)
                .map_err(LogError::io("read producer snapshot", path.clone()))?;
            match bytes.map(|b| ProducerStates::decode(&b)) {
                Some(Ok(states)) => {
                    loaded = Some((offset, states));
                    break;
                }
                Some(Err(reason)) => {
                    tracing::warn!(file = %path.display(), %reason, "removing a damaged producer snapshot");
                    self.storage
                        .remove_file(&path)
                        .map_err(LogError::io("remove producer snapshot", path))?;
                    self.dir_unsynced = true;
                }
                None => {}
            }
        }
        let (from, states) = loaded.unwrap_or_else(|| {
            let mut bases = self.segments.keys().rev();
            let second_to_last = bases.nth(1).filter(|_| !txn_index_damaged);
            let from = second_to_last
                .or_else(|| self.segments.keys().next())
                .copied()
                .expect("a log has a segment");
            (from, ProducerStates::new())
        });
        self.producers = states;
        self.replay_producers_from(from)?;
        self.trim_aborted();
        self.save_changed_txn_indexes(&before)
    }

    /// Records every batch from offset `from` (a batch boundary) to the log end.
    fn replay_producers_from(&mut self, from: Offset) -> Result<(), LogError> {
        let first = self.segments.range(..=from).next_back().map(|(b, _)| *b);
        let bases: Vec<Offset> = match first {
            Some(first) => self.segments.range(first..).map(|(b, _)| *b).collect(),
            None => self.segments.keys().copied().collect(),
        };
        let dir = self.dir.clone();
        let io_error = |e| LogError::io("read producer batches", dir.clone())(e);
        for base in bases {
            let segment = &self.segments[&base];
            let start = if base < from {
                match segment.find_batch(from).map_err(io_error)? {
                    Some((position, _)) => position,
                    None => continue,
                }
            } else {
                0
            };
            // Headers are enough for data batches; markers are read whole afterwards.
            let mut headers = Vec::new();
            segment
                .visit_batches(start, |position, header| {
                    if header.base_offset >= from {
                        headers.push((position, *header));
                    }
                    Ok(Visit::Continue)
                })
                .map_err(io_error)?;
            for (position, header) in headers {
                if header.is_control() {
                    let bytes = self.read_batch_at(base, position, &header)?;
                    self.record_batch(&bytes, &header);
                } else {
                    self.producers.record(&header);
                }
            }
        }
        Ok(())
    }
}
