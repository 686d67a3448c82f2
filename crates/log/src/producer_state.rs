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
//! version u16 = 1 | crc32c u32 (of everything after it) | producers u32 |
//!   per producer: id i64 | epoch i16 | last timestamp i64 | batches u8 |
//!     per batch: first sequence i32 | last sequence i32 | last offset i64 | offset delta i32
//! ```
//!
//! Entries expire when a producer has not written for `producer.id.expiration.ms`
//! ([`ProducerStates::remove_expired`]); deleting old segments does not remove them (KIP-360).

use std::collections::{BTreeMap, VecDeque};

use crate::batch::{BatchHeader, CONTROL_ATTRIBUTE, TRANSACTIONAL_ATTRIBUTE};
use crate::error::LogError;
use crate::types::Offset;

/// How many of a producer's latest batches are remembered for duplicate detection (Kafka's
/// limit of in-flight requests for an idempotent producer).
pub const BATCHES_KEPT: usize = 5;
/// The producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// Suffix of producer state snapshot files (`<offset, 20 digits>.snapshot`).
pub const PRODUCER_SNAPSHOT_SUFFIX: &str = ".snapshot";

const SNAPSHOT_VERSION: u16 = 1;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The producer's current epoch here.
    pub epoch: i16,
    /// Its latest batches in this epoch, oldest first (at most [`BATCHES_KEPT`]).
    pub batches: VecDeque<BatchMetadata>,
    /// Max timestamp of its latest batch (expiration counts from it).
    pub last_timestamp: i64,
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
    /// Transactional and control batches are refused: Keel has no transaction coordinator.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, LogError> {
        if header.attributes & CONTROL_ATTRIBUTE != 0 {
            return Err(LogError::InvalidRecord {
                reason: "control batches cannot be produced".to_string(),
            });
        }
        if header.attributes & TRANSACTIONAL_ATTRIBUTE != 0 {
            return Err(LogError::InvalidRecord {
                reason:
                    "transactional batches are not supported (Keel has no transaction coordinator)"
                        .to_string(),
            });
        }
        if !is_idempotent(header) {
            return Ok(SequenceCheck::Append);
        }
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

    /// Records an appended batch (its offsets assigned). Batches without a producer id and
    /// control batches change nothing.
    pub fn record(&mut self, header: &BatchHeader) {
        if !is_idempotent(header) || header.attributes & CONTROL_ATTRIBUTE != 0 {
            return;
        }
        let entry = self.producers.entry(header.producer_id).or_default();
        if header.producer_epoch != entry.epoch || entry.batches.is_empty() {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
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

    /// Forgets producers whose latest batch is older than `expiration_ms` at `now_ms`
    /// (`producer.id.expiration.ms`). Returns how many were removed.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, e| now_ms.saturating_sub(e.last_timestamp) < expiration_ms);
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

    /// Parses a snapshot written by [`ProducerStates::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut r = Reader { bytes, at: 0 };
        let version = u16::from_be_bytes(r.take()?);
        if version != SNAPSHOT_VERSION {
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
        for _ in 0..count {
            let id = i64::from_be_bytes(r.take()?);
            let epoch = i16::from_be_bytes(r.take()?);
            let last_timestamp = i64::from_be_bytes(r.take()?);
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
            producers.insert(
                id,
                ProducerEntry {
                    epoch,
                    batches,
                    last_timestamp,
                },
            );
        }
        if r.at != bytes.len() {
            return Err(format!(
                "{} bytes after the last producer",
                bytes.len() - r.at
            ));
        }
        Ok(ProducerStates { producers })
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
