//! Transactions in the log ([`crate::txn`]): markers appended for a transaction coordinator,
//! the aborted-transaction index, and the offsets a `read_committed` reader may see.
//!
//! The index lives in memory for the whole log (keyed by marker offset) and on disk as one
//! `<base>.txnindex` per segment holding the entries of the markers in that segment. A segment's
//! file is rewritten (atomically) when the segment stops being active, when the log closes, and
//! after a truncation; between those, the active segment's entries are rebuilt from its batches
//! on the next open (the producer state replay after the newest snapshot covers them: the
//! snapshot written at close comes with the active segment's file). Loading unions what the
//! files say with what the replay finds. A damaged file is not trusted: the producer state is
//! then replayed from the first segment, which rebuilds every entry the log can prove.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::Log;
use crate::batch::{parse_batch_at, BatchHeader};
use crate::error::LogError;
use crate::segment::segment_file_name;
use crate::storage::{read_file_if_exists, write_file_atomically};
use crate::txn::{AbortedTxn, EndTxnMarker, TXN_INDEX_FILE_SUFFIX};
use crate::types::{LeaderEpoch, Offset};

use super::AppendInfo;

impl Log {
    /// Appends a COMMIT or ABORT marker for `producer_id` at `producer_epoch` as the leader in
    /// `leader_epoch` (what WriteTxnMarkers asks of a partition leader). Checks
    /// [`crate::ProducerStates::check_marker`] first; a producer without an open transaction
    /// here still gets its marker (Kafka writes it to every partition of the transaction).
    pub fn append_marker_as_leader(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        if leader_epoch.0 < 0 {
            return Err(LogError::InvalidRecord {
                reason: format!("leader epoch {leader_epoch} is negative"),
            });
        }
        let check = self
            .producers
            .check_marker(producer_id, producer_epoch, &marker)?;
        if check == crate::producer_state::MarkerCheck::NotForThisPartition {
            tracing::info!(dir = %self.dir.display(), producer_id, producer_epoch,
                "a later transaction's marker for a producer whose transaction here is in doubt: nothing appended");
            let end = self.log_end_offset();
            return Ok(AppendInfo::nothing_appended(end, Offset(end.0 - 1)));
        }
        let mut batch = marker.to_batch(producer_id, producer_epoch, now_ms);
        let first_offset = self.log_end_offset();
        crate::batch::set_base_offset(&mut batch, first_offset);
        crate::batch::set_partition_leader_epoch(&mut batch, leader_epoch);
        let header = BatchHeader::parse(&batch).expect("a marker batch has a header");
        let changed = self.epochs.assign(leader_epoch, first_offset);
        self.save_epochs_if(changed)?;
        let info = self.append_batches(&batch, &[(0, header)], now_ms)?;
        self.record_batch(&batch, &header);
        Ok(info)
    }

    /// Records an appended batch (`bytes`: starting with the batch) in the producer state; a
    /// marker that closes an aborted transaction adds its index entry.
    pub(super) fn record_batch(&mut self, bytes: &[u8], header: &BatchHeader) {
        let bytes = &bytes[..header.size_bytes().unwrap_or(0).min(bytes.len())];
        if !header.is_control() {
            self.producers.record(header);
            return;
        }
        if header.producer_id < 0 {
            return;
        }
        let marker = match EndTxnMarker::parse(bytes, header) {
            Ok(Some(marker)) => marker,
            Ok(None) => return,
            Err(reason) => {
                tracing::warn!(dir = %self.dir.display(), offset = %header.base_offset, %reason,
                    "ignoring a malformed transaction marker");
                return;
            }
        };
        if let Some(completed) = self.producers.record_marker(header, &marker) {
            if completed.aborted {
                let entry = AbortedTxn {
                    producer_id: completed.producer_id,
                    first_offset: completed.first_offset,
                    last_offset: completed.last_offset,
                    last_stable_offset: self.producers.last_stable_offset_after(&completed),
                };
                self.aborted.insert(entry.last_offset, entry);
            }
        }
    }

    /// Holds every open transaction in doubt: see [`crate::ProducerStates::mark_in_doubt`].
    pub fn mark_transactions_in_doubt(&mut self) -> Vec<(i64, i16, Offset)> {
        self.producers.mark_in_doubt()
    }

    /// The transactions held in doubt: (producer, epoch of its records, first offset).
    pub fn transactions_in_doubt(&self) -> Vec<(i64, i16, Offset)> {
        self.producers.in_doubt()
    }

    /// How many transactions are held in doubt (cheap: no allocation).
    pub fn transactions_in_doubt_count(&self) -> usize {
        self.producers.in_doubt_count()
    }

    /// Whether `producer_id`'s transaction here is held in doubt at `epoch`.
    pub fn transaction_in_doubt_at(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.in_doubt_at(producer_id, epoch)
    }

    /// See [`crate::ProducerStates::clear_in_doubt`].
    pub fn clear_transaction_in_doubt(&mut self, producer_id: i64) {
        self.producers.clear_in_doubt(producer_id);
    }

    /// See [`crate::ProducerStates::clear_all_in_doubt`].
    pub fn clear_transactions_in_doubt(&mut self) {
        self.producers.clear_all_in_doubt();
    }

    /// The first offset of the oldest transaction not yet stable at `high_watermark` (open,
    /// or decided with its marker at or above it), never below the log start offset (retention
    /// may delete an open transaction's first records: it then stays unstable from the log
    /// start).
    pub fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        self.producers
            .first_unstable_offset(high_watermark)
            .map(|o| o.max(self.log_start_offset))
    }

    /// The last stable offset (LSO) at `high_watermark`: a `read_committed` reader sees
    /// nothing at or past it.
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        self.first_unstable_offset(high_watermark)
            .map_or(high_watermark, |unstable| unstable.min(high_watermark))
    }

    /// The high watermark moved to `high_watermark`: decided transactions with their marker
    /// below it are stable and need not be remembered (queries give the high watermark anyway;
    /// this only bounds memory).
    pub fn on_high_watermark(&mut self, high_watermark: Offset) {
        self.producers.on_high_watermark(high_watermark);
    }

    /// The aborted transactions a `read_committed` fetch of `[from, upper)` must be told about:
    /// those whose marker is at or after `from` and whose first record is before `upper`,
    /// in marker order (Kafka's `collectAbortedTransactions`).
    pub fn aborted_transactions(&self, from: Offset, upper: Offset) -> Vec<AbortedTxn> {
        let mut found = Vec::new();
        for entry in self.aborted.range(from..).map(|(_, e)| e) {
            if entry.first_offset < upper {
                found.push(*entry);
            }
            // No later marker can close a transaction that started before `upper`.
            if entry.last_stable_offset > upper {
                break;
            }
        }
        found
    }

    fn txn_index_path(&self, base: Offset) -> PathBuf {
        self.dir
            .join(segment_file_name(base, TXN_INDEX_FILE_SUFFIX))
    }

    /// The entries of segment `base` (markers from `base` to the next segment's base).
    fn segment_aborted(&self, base: Offset) -> impl Iterator<Item = &AbortedTxn> {
        let end = self.segments.range(base.next()..).next().map(|(b, _)| *b);
        self.aborted
            .range(base..)
            .map(|(_, e)| e)
            .take_while(move |e| end.is_none_or(|end| e.last_offset < end))
    }

    /// Writes segment `base`'s `.txnindex` (durably), or removes it if the segment has no
    /// entries.
    pub(super) fn write_txn_index(&mut self, base: Offset) -> Result<(), LogError> {
        let mut bytes = Vec::new();
        for entry in self.segment_aborted(base) {
            entry.encode(&mut bytes);
        }
        let path = self.txn_index_path(base);
        if bytes.is_empty() {
            match self.storage.remove_file(&path) {
                Ok(()) => self.dir_unsynced = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io("remove transaction index", path)(e)),
            }
            return Ok(());
        }
        write_file_atomically(self.storage.as_ref(), &path, &bytes)
            .map_err(LogError::io("write transaction index", path))
    }

    /// Loads every segment's `.txnindex`, keeping entries whose marker lies inside the segment
    /// as it is now. Returns whether a file was damaged (its entries are then not trusted).
    pub(super) fn load_txn_indexes(&mut self) -> Result<bool, LogError> {
        self.aborted.clear();
        let mut damaged = false;
        let bounds: Vec<(Offset, Offset)> = self
            .segments
            .values()
            .map(|s| (s.base_offset(), s.next_offset()))
            .collect();
        for (base, next) in bounds {
            let path = self.txn_index_path(base);
            let Some(bytes) = read_file_if_exists(self.storage.as_ref(), &path)
                .map_err(LogError::io("read transaction index", path.clone()))?
            else {
                continue;
            };
            match AbortedTxn::decode_all(&bytes) {
                Ok(entries) => {
                    for entry in entries {
                        if entry.last_offset >= base && entry.last_offset < next {
                            self.aborted.insert(entry.last_offset, entry);
                        }
                    }
                }
                Err(reason) => {
                    let problem =
                        format!("{}: {reason}; rebuilding it from the log", path.display());
                    tracing::warn!(dir = %self.dir.display(), %problem, "damaged transaction index");
                    self.recovery_report.problems.push(problem);
                    damaged = true;
                }
            }
        }
        Ok(damaged)
    }

    /// Rewrites the `.txnindex` of every segment whose entries differ from `before` (the
    /// entries as loaded from the files).
    pub(super) fn save_changed_txn_indexes(
        &mut self,
        before: &BTreeMap<Offset, AbortedTxn>,
    ) -> Result<(), LogError> {
        let bases: Vec<Offset> = self.segments.keys().copied().collect();
        for base in bases {
            let now: Vec<AbortedTxn> = self.segment_aborted(base).copied().collect();
            let end = self.segments.range(base.next()..).next().map(|(b, _)| *b);
            let then: Vec<AbortedTxn> = before
                .range(base..)
                .map(|(_, e)| *e)
                .take_while(|e| end.is_none_or(|end| e.last_offset < end))
                .collect();
            if now != then {
                self.write_txn_index(base)?;
            }
        }
        Ok(())
    }

    /// Drops index entries of markers at or past the log end offset (after a truncation) and
    /// below the first segment (after segments were deleted).
    pub(super) fn trim_aborted(&mut self) {
        let end = self.log_end_offset();
        let first = *self.segments.keys().next().expect("a log has a segment");
        self.aborted.retain(|last, _| *last < end && *last >= first);
    }

    /// The marker in the control batch at `position` of segment `base`, read for the producer
    /// state replay.
    pub(super) fn read_batch_at(
        &self,
        base: Offset,
        position: u64,
        header: &BatchHeader,
    ) -> Result<Vec<u8>, LogError> {
        let size = header.size_bytes().unwrap_or(0);
        let mut bytes = Vec::with_capacity(size);
        self.segments[&base]
            .read_to_vec(position, size, &mut bytes)
            .map_err(LogError::io("read batch", self.dir.clone()))?;
        parse_batch_at(&bytes, 0).map_err(LogError::from_batch_error)?;
        Ok(bytes)
    }
}
