//! Idempotent producers: for each producer id that wrote to a partition, its epoch and the
//! sequence ranges and offsets of its last [`BATCHES_KEPT`] batches (Kafka's
//! `ProducerStateManager`).
//!
//! The leader checks every producer batch before it is appended ([`ProducerStates::check`]):
//! a batch the log already holds (same producer, epoch and sequence range — a retry after a lost
//! answer or a leader change) is a duplicate, answered with the offsets it got the first time and
//! never appended again; an older epoch is fenced (`INVALID_PRODUCER_EPOCH`); a sequence that
//! does not follow the last one is `OUT_OF_ORDER_SEQUENCE_NUMBER`. A producer the partition does
//! not know may start at any sequence (KIP-360: its earlier batches may have expired or been
//! deleted). Every appended batch — leader or follower — is recorded ([`ProducerStates::record`]),
//! so a follower that becomes leader detects the same duplicates.
//!
//! The state is kept with the log: a snapshot `<offset>.snapshot` (the state of every batch below
//! `offset`) is written when a segment rolls and when the log closes; opening a log loads the
//! newest snapshot at or below the log end and replays the batch headers after it, and a
//! truncation reloads the same way. The snapshot format is Keel's own, versioned and checked
//! with CRC-32C:
//!
//! ```text
//! version u16 = 2 | crc32c u32 (of everything after it) | producers u32 |
//!   per producer: id i64 | epoch i16 | last timestamp i64 |
//!     coordinator epoch i32 | open transaction's first offset i64 (-1: none) | batches u8 |
//!     per batch: first sequence i32 | last sequence i32 | last offset i64 | offset delta i32
//! ```
//!
//! Version 1 (before transactions) lacks the two transaction fields and still loads.
//!
//! **Transactions (KIP-98).** A producer's first transactional batch opens its transaction
//! here; the COMMIT or ABORT marker its coordinator writes ([`ProducerStates::record_marker`])
//! closes it. While open, the producer may only write transactional batches
//! (`INVALID_TXN_STATE`), a marker from an older coordinator epoch is fenced, and the producer
//! never expires. The *first unstable offset* is the first offset of the oldest transaction
//! that is open, or decided but with its marker not yet below the high watermark
//! ([`ProducerStates::on_high_watermark`]); the partition's last stable offset is never past it.
//!
//! Entries expire when a producer has not written for `producer.id.expiration.ms`
//! ([`ProducerStates::remove_expired`]); deleting old segments does not remove them (KIP-360).

use std::collections::{BTreeMap, VecDeque};

use crate::batch::{BatchHeader, CONTROL_ATTRIBUTE, TRANSACTIONAL_ATTRIBUTE};
use crate::error::LogError;
use crate::txn::{CompletedTxn, ControlType, EndTxnMarker};
use crate::types::Offset;

/// How many of a producer's latest batches are remembered for duplicate detection (Kafka's
/// limit of in-flight requests for an idempotent producer).
pub const BATCHES_KEPT: usize = 5;
/// The producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// Suffix of producer state snapshot files (`<offset, 20 digits>.snapshot`).
pub const PRODUCER_SNAPSHOT_SUFFIX: &str = ".snapshot";

const SNAPSHOT_VERSION: u16 = 2;
/// No coordinator has written a marker for the producer yet.
pub const NO_COORDINATOR_EPOCH: i32 = -1;

/// One batch a producer wrote: its sequence range and where it landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the batch's first record.
    pub first_sequence: i32,
    /// Sequence of the batch's last record.
    pub last_sequence: i32,
    /// Offset of the batch's last record.
    pub last_offset: Offset,
    /// `lastOffsetDelta` of the batch: its first offset is `last_offset - offset_delta`.
    pub offset_delta: i32,
}

impl BatchMetadata {
    /// Offset of the batch's first record.
    pub fn first_offset(&self) -> Offset {
        Offset(self.last_offset.0 - i64::from(self.offset_delta))
    }
}

/// What a partition knows about one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The producer's current epoch here.
    pub epoch: i16,
    /// Its latest batches in this epoch, oldest first (at most [`BATCHES_KEPT`]).
    pub batches: VecDeque<BatchMetadata>,
    /// Max timestamp of its latest batch or marker (expiration counts from it).
    pub last_timestamp: i64,
    /// Epoch of the coordinator that wrote its latest marker ([`NO_COORDINATOR_EPOCH`]: none).
    pub coordinator_epoch: i32,
    /// Offset of the first record of its open transaction here, if one is open.
    pub current_txn_first_offset: Option<Offset>,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry {
            epoch: 0,
            batches: VecDeque::new(),
            last_timestamp: 0,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
            current_txn_first_offset: None,
        }
    }
}

impl ProducerEntry {
    /// The sequence of the last record written in the current epoch.
    pub fn last_sequence(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_sequence)
    }

    fn duplicate_of(&self, epoch: i16, first: i32, last: i32) -> Option<BatchMetadata> {
        if epoch != self.epoch {
            return None;
        }
        self.batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
            .copied()
    }
}

/// What [`ProducerStates::check`] decided for a batch that may be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not an idempotent batch, or the next one of its producer: append it.
    Append,
    /// The log already holds this batch, at these offsets: answer with them, append nothing.
    Duplicate(BatchMetadata),
}

/// Every producer's state in one partition. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStates {
    producers: BTreeMap<i64, ProducerEntry>,
    /// Open transactions: first offset → producer.
    ongoing: BTreeMap<Offset, i64>,
    /// Decided transactions whose marker may still be at or above the high watermark: first
    /// offset → marker offset.
    unreplicated: BTreeMap<Offset, Offset>,
    /// Open transactions an unclean recovery may have stranded (their marker lost with the
    /// previous leader's log), until a marker or the coordinators settle them: producer →
    /// epoch of its records. In memory only, on the leader that found them
    /// ([`ProducerStates::mark_in_doubt`]).
    in_doubt: BTreeMap<i64, i16>,
}

/// What a leader does with a transaction marker ([`ProducerStates::check_marker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerCheck {
    /// Append it.
    Write,
    /// Append nothing and answer success: the marker ends a later transaction of a producer
    /// whose in-doubt transaction is still open here. That later transaction wrote nothing
    /// here (its records were refused while the other was in doubt), so it has nothing to end,
    /// and appending the marker would end the in-doubt one with the wrong outcome.
    NotForThisPartition,
}

/// The sequence of a batch's last record: sequences wrap from `i32::MAX` to 0.
pub fn last_sequence_of(first_sequence: i32, last_offset_delta: i32) -> i32 {
    if first_sequence > i32::MAX - last_offset_delta {
        last_offset_delta - (i32::MAX - first_sequence) - 1
    } else {
        first_sequence + last_offset_delta
    }
}

fn in_sequence(last: i32, next: i32) -> bool {
    next == last.wrapping_add(1) || (last == i32::MAX && next == 0)
}

fn is_idempotent(header: &BatchHeader) -> bool {
    header.producer_id > NO_PRODUCER_ID
}

impl ProducerStates {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The producers known, by id.
    pub fn producers(&self) -> &BTreeMap<i64, ProducerEntry> {
        &self.producers
    }

    /// One producer's state.
    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Kafka's checks of a producer batch before a leader appends it (see the module docs).
    /// Control batches are refused: only a transaction coordinator writes markers
    /// ([`ProducerStates::check_marker`]).
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, LogError> {
        if header.attributes & CONTROL_ATTRIBUTE != 0 {
            return Err(LogError::InvalidRecord {
                reason: "control batches cannot be produced".to_string(),
            });
        }
        let transactional = header.attributes & TRANSACTIONAL_ATTRIBUTE != 0;
        if !is_idempotent(header) {
            if transactional {
                return Err(LogError::InvalidRecord {
                    reason: "a transactional batch needs a producer id".to_string(),
                });
            }
            return Ok(SequenceCheck::Append);
        }
        if let Some(&epoch) = self.in_doubt.get(&header.producer_id) {
            // Nothing may join (or follow) a transaction whose outcome is not known here yet.
            let first_offset = self
                .producers
                .get(&header.producer_id)
                .and_then(|e| e.current_txn_first_offset)
                .unwrap_or_default();
            tracing::debug!(producer_id = header.producer_id, epoch, %first_offset,
                "refusing a batch of a producer whose transaction here is in doubt");
            return Err(LogError::InvalidTxnState {
                producer_id: header.producer_id,
                first_offset,
            });
        }
        let check = self.check_sequence(header)?;
        if check == SequenceCheck::Append && !transactional {
            if let Some(entry) = self.producers.get(&header.producer_id) {
                if let Some(first_offset) = entry.current_txn_first_offset {
                    return Err(LogError::InvalidTxnState {
                        producer_id: header.producer_id,
                        first_offset,
                    });
                }
            }
        }
        Ok(check)
    }

    /// Kafka's checks of a transaction marker before a leader appends it for
    /// `producer_id` / `producer_epoch`: an older producer epoch is fenced
    /// (`INVALID_PRODUCER_EPOCH`), and so is a coordinator older than the last one that wrote a
    /// marker for the producer (`TRANSACTION_COORDINATOR_FENCED`). A producer whose transaction
    /// here is in doubt at epoch `e` gets markers at `e` (an operator's abort, or a
    /// transactions-v1 coordinator's) and `e + 1` (a v2 coordinator's: every end bumps the
    /// epoch) appended; a higher epoch belongs to a later transaction
    /// ([`MarkerCheck::NotForThisPartition`]).
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: &EndTxnMarker,
    ) -> Result<MarkerCheck, LogError> {
        if producer_id < 0 || producer_epoch < 0 {
            return Err(LogError::InvalidRecord {
                reason: format!(
                    "a transaction marker needs a producer id and epoch, got {producer_id} / {producer_epoch}"
                ),
            });
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(MarkerCheck::Write);
        };
        if producer_epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id,
                epoch: producer_epoch,
                current: entry.epoch,
            });
        }
        if marker.coordinator_epoch < entry.coordinator_epoch {
            return Err(LogError::TransactionCoordinatorFenced {
                producer_id,
                coordinator_epoch: marker.coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        match self.in_doubt.get(&producer_id) {
            Some(&epoch) if i32::from(producer_epoch) > i32::from(epoch) + 1 => {
                Ok(MarkerCheck::NotForThisPartition)
            }
            _ => Ok(MarkerCheck::Write),
        }
    }

    /// Holds every open transaction in doubt (a leader an unclean recovery elected: their
    /// markers may have been lost); returns them as (producer, epoch of its records, first
    /// offset). Their producers' batches are refused until they are settled.
    pub fn mark_in_doubt(&mut self) -> Vec<(i64, i16, Offset)> {
        let mut marked = Vec::new();
        for (&first_offset, &producer_id) in &self.ongoing {
            let epoch = self.producers.get(&producer_id).map_or(0, |e| e.epoch);
            self.in_doubt.insert(producer_id, epoch);
            marked.push((producer_id, epoch, first_offset));
        }
        marked
    }

    /// The transactions held in doubt: (producer, epoch of its records, first offset).
    pub fn in_doubt(&self) -> Vec<(i64, i16, Offset)> {
        self.in_doubt
            .iter()
            .filter_map(|(&pid, &epoch)| {
                let first = self.producers.get(&pid)?.current_txn_first_offset?;
                Some((pid, epoch, first))
            })
            .collect()
    }

    /// Whether `producer_id`'s transaction is held in doubt at `epoch`.
    pub fn in_doubt_at(&self, producer_id: i64, epoch: i16) -> bool {
        self.in_doubt.get(&producer_id) == Some(&epoch)
    }

    /// How many transactions are held in doubt.
    pub fn in_doubt_count(&self) -> usize {
        self.in_doubt.len()
    }

    /// Settles `producer_id`'s in-doubt transaction as still open at its coordinator (whose
    /// own markers will end it); its batches are accepted again.
    pub fn clear_in_doubt(&mut self, producer_id: i64) {
        self.in_doubt.remove(&producer_id);
    }

    /// Forgets every in-doubt mark (this replica stopped leading).
    pub fn clear_all_in_doubt(&mut self) {
        self.in_doubt.clear();
    }

    /// The checks of a batch a coordinator writes for a producer (the group coordinator's
    /// transactional offset commits, Kafka's `AppendOrigin.COORDINATOR`): no sequences, only
    /// the producer epoch (an older one is `INVALID_PRODUCER_EPOCH`). Control batches are
    /// refused here too: markers go through [`ProducerStates::check_marker`]. A producer whose
    /// transaction here is in doubt is refused (`INVALID_TXN_STATE`), as in
    /// [`ProducerStates::check`].
    pub fn check_coordinator(&self, header: &BatchHeader) -> Result<(), LogError> {
        if header.attributes & CONTROL_ATTRIBUTE != 0 {
            return Err(LogError::InvalidRecord {
                reason: "control batches cannot be appended as data".to_string(),
            });
        }
        if let Some(first_offset) = self
            .in_doubt
            .contains_key(&header.producer_id)
            .then(|| self.producers.get(&header.producer_id))
            .flatten()
            .and_then(|e| e.current_txn_first_offset)
        {
            // A transactional offset commit may not join an in-doubt transaction either.
            return Err(LogError::InvalidTxnState {
                producer_id: header.producer_id,
                first_offset,
            });
        }
        match self.producers.get(&header.producer_id) {
            Some(entry) if is_idempotent(header) && header.producer_epoch < entry.epoch => {
                Err(LogError::InvalidProducerEpoch {
                    producer_id: header.producer_id,
                    epoch: header.producer_epoch,
                    current: entry.epoch,
                })
            }
            _ => Ok(()),
        }
    }

    /// The epoch and sequence checks of an idempotent batch.
    fn check_sequence(&self, header: &BatchHeader) -> Result<SequenceCheck, LogError> {
        let (id, epoch, first) = (
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
        );
        if first < 0 || epoch < 0 {
            return Err(LogError::InvalidRecord {
                reason: format!(
                    "producer {id} sent epoch {epoch} and base sequence {first}; both must be >= 0"
                ),
            });
        }
        let Some(entry) = self.producers.get(&id) else {
            return Ok(SequenceCheck::Append);
        };
        let last = last_sequence_of(first, header.last_offset_delta);
        if let Some(duplicate) = entry.duplicate_of(epoch, first, last) {
            return Ok(SequenceCheck::Duplicate(duplicate));
        }
        if epoch < entry.epoch {
            return Err(LogError::InvalidProducerEpoch {
                producer_id: id,
                epoch,
                current: entry.epoch,
            });
        }
        if epoch > entry.epoch {
            if first != 0 {
                return Err(LogError::OutOfOrderSequence {
                    producer_id: id,
                    epoch,
                    expected: 0,
                    found: first,
                });
            }
            return Ok(SequenceCheck::Append);
        }
        match entry.last_sequence() {
            Some(previous) if !in_sequence(previous, first) => Err(LogError::OutOfOrderSequence {
                producer_id: id,
                epoch,
                expected: previous.wrapping_add(1).max(0),
                found: first,
            }),
            _ => Ok(SequenceCheck::Append),
        }
    }

    /// Records an appended data batch (its offsets assigned); a transactional one opens its
    /// producer's transaction if none is open. Batches without a producer id and control
    /// batches change nothing (markers go to [`ProducerStates::record_marker`]).
    pub fn record(&mut self, header: &BatchHeader) {
        if !is_idempotent(header) || header.attributes & CONTROL_ATTRIBUTE != 0 {
            return;
        }
        let entry = self.producers.entry(header.producer_id).or_default();
        if header.producer_epoch != entry.epoch || entry.batches.is_empty() {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if header.attributes & TRANSACTIONAL_ATTRIBUTE != 0
            && entry.current_txn_first_offset.is_none()
        {
            entry.current_txn_first_offset = Some(header.base_offset);
            self.ongoing.insert(header.base_offset, header.producer_id);
        }
        entry.batches.push_back(BatchMetadata {
            first_sequence: header.base_sequence,
            last_sequence: last_sequence_of(header.base_sequence, header.last_offset_delta),
            last_offset: header.last_offset(),
            offset_delta: header.last_offset_delta,
        });
        while entry.batches.len() > BATCHES_KEPT {
            entry.batches.pop_front();
        }
        entry.last_timestamp = header.max_timestamp;
    }

    /// Records an appended marker (`header`: its control batch, offset assigned). Closes the
    /// producer's open transaction, if any, and returns it; the producer takes the marker's
    /// epoch (transactions v2 bump it at every end) and coordinator epoch.
    pub fn record_marker(
        &mut self,
        header: &BatchHeader,
        marker: &EndTxnMarker,
    ) -> Option<CompletedTxn> {
        let entry = self.producers.entry(header.producer_id).or_default();
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = header.max_timestamp;
        self.in_doubt.remove(&header.producer_id);
        let first_offset = entry.current_txn_first_offset.take()?;
        self.ongoing.remove(&first_offset);
        self.unreplicated.insert(first_offset, header.base_offset);
        Some(CompletedTxn {
            producer_id: header.producer_id,
            first_offset,
            last_offset: header.base_offset,
            aborted: marker.kind == ControlType::Abort,
        })
    }

    /// The first offset of the oldest transaction still open, or decided with its marker not
    /// yet below `high_watermark`: the last stable offset never passes it.
    pub fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        let ongoing = self.ongoing.keys().next().copied();
        let unreplicated = self
            .unreplicated
            .iter()
            .find(|(_, marker)| **marker >= high_watermark)
            .map(|(first, _)| *first);
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The first offset of the oldest open transaction (Kafka's first undecided offset).
    pub fn first_undecided_offset(&self) -> Option<Offset> {
        self.ongoing.keys().next().copied()
    }

    /// The last stable offset to store with an aborted transaction just completed: the first
    /// offset of the oldest transaction still open, or the offset after its marker.
    pub fn last_stable_offset_after(&self, completed: &CompletedTxn) -> Offset {
        self.ongoing
            .keys()
            .next()
            .copied()
            .unwrap_or(completed.last_offset.next())
    }

    /// The high watermark reached `high_watermark`: decided transactions whose marker lies
    /// below it are stable now and forgotten here.
    pub fn on_high_watermark(&mut self, high_watermark: Offset) {
        self.unreplicated
            .retain(|_, marker| *marker >= high_watermark);
    }

    /// Open transactions, oldest first: (first offset, producer id).
    pub fn open_transactions(&self) -> impl Iterator<Item = (Offset, i64)> + '_ {
        self.ongoing.iter().map(|(o, p)| (*o, *p))
    }

    /// Forgets producers whose latest batch is older than `expiration_ms` at `now_ms`
    /// (`producer.id.expiration.ms`); a producer with an open transaction never expires.
    /// Returns how many were removed.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// The snapshot bytes (format in the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(4 + self.producers.len() * 64);
        body.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        for (id, entry) in &self.producers {
            body.extend_from_slice(&id.to_be_bytes());
            body.extend_from_slice(&entry.epoch.to_be_bytes());
            body.extend_from_slice(&entry.last_timestamp.to_be_bytes());
            body.extend_from_slice(&entry.coordinator_epoch.to_be_bytes());
            let txn_first = entry.current_txn_first_offset.map_or(-1, |o| o.0);
            body.extend_from_slice(&txn_first.to_be_bytes());
            body.push(entry.batches.len() as u8);
            for b in &entry.batches {
                body.extend_from_slice(&b.first_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_sequence.to_be_bytes());
                body.extend_from_slice(&b.last_offset.0.to_be_bytes());
                body.extend_from_slice(&b.offset_delta.to_be_bytes());
            }
        }
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Parses a snapshot written by [`ProducerStates::encode`] (version 2, or version 1 from
    /// before transactions).
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = u16::from_be_bytes(r.take()?);
        if version != SNAPSHOT_VERSION && version != 1 {
            return Err(format!("unknown producer snapshot version {version}"));
        }
        let crc = u32::from_be_bytes(r.take()?);
        let computed = crc32c::crc32c(&bytes[r.at..]);
        if crc != computed {
            return Err(format!(
                "producer snapshot crc {crc:#010x}, computed {computed:#010x}"
            ));
        }
        let count = u32::from_be_bytes(r.take()?);
        let mut producers = BTreeMap::new();
        let mut ongoing = BTreeMap::new();
        for _ in 0..count {
            let id = i64::from_be_bytes(r.take()?);
            let epoch = i16::from_be_bytes(r.take()?);
            let last_timestamp = i64::from_be_bytes(r.take()?);
            let (coordinator_epoch, txn_first) = if version >= 2 {
                (i32::from_be_bytes(r.take()?), i64::from_be_bytes(r.take()?))
            } else {
                (NO_COORDINATOR_EPOCH, -1)
            };
            if txn_first < -1 {
                return Err(format!(
                    "producer {id}: open transaction at offset {txn_first}"
                ));
            }
            let current_txn_first_offset = (txn_first >= 0).then_some(Offset(txn_first));
            let [batch_count] = r.take::<1>()?;
            let mut batches = VecDeque::with_capacity(usize::from(batch_count));
            for _ in 0..batch_count {
                batches.push_back(BatchMetadata {
                    first_sequence: i32::from_be_bytes(r.take()?),
                    last_sequence: i32::from_be_bytes(r.take()?),
                    last_offset: Offset(i64::from_be_bytes(r.take()?)),
                    offset_delta: i32::from_be_bytes(r.take()?),
                });
            }
            if let Some(first) = current_txn_first_offset {
                if ongoing.insert(first, id).is_some() {
                    return Err(format!("two open transactions start at offset {first}"));
                }
            }
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                    coordinator_epoch,
                    current_txn_first_offset,
                },
            );
        }
        if r.at != bytes.len() {
            return Err(format!(
                "{} bytes after the last producer",
                bytes.len() - r.at
            ));
        }
        Ok(ProducerStates {
            producers,
            ongoing,
            unreplicated: BTreeMap::new(),
            in_doubt: BTreeMap::new(),
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.at + N;
        let slice = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| format!("producer snapshot ends at byte {}", self.bytes.len()))?;
        self.at = end;
        Ok(slice.try_into().expect("slice of N bytes"))
    }
}

#[cfg(test)]
mod tests;
