//! Kafka record batches, format v2 (magic 2): the 61-byte header, parsing of a buffer holding
//! zero or more batches, validation, and the few in-place rewrites the broker performs.
//!
//! Layout of a batch (big-endian):
//!
//! | pos | field                | type |
//! |-----|----------------------|------|
//! | 0   | baseOffset           | i64  |
//! | 8   | batchLength          | i32  |
//! | 12  | partitionLeaderEpoch | i32  |
//! | 16  | magic                | i8   |
//! | 17  | crc                  | u32  |
//! | 21  | attributes           | i16  |
//! | 23  | lastOffsetDelta      | i32  |
//! | 27  | baseTimestamp        | i64  |
//! | 35  | maxTimestamp         | i64  |
//! | 43  | producerId           | i64  |
//! | 51  | producerEpoch        | i16  |
//! | 53  | baseSequence         | i32  |
//! | 57  | recordsCount         | i32  |
//! | 61  | records...           |      |
//!
//! `batchLength` counts the bytes after the length field, so a batch occupies
//! `LOG_OVERHEAD + batchLength` bytes. The CRC-32C covers bytes from `attributes` to the end; it
//! does **not** cover `baseOffset` or `partitionLeaderEpoch`, which the broker rewrites.
//!
//! Nothing here panics on malformed input: every problem is a [`BatchError`]. The records inside
//! a batch are not decoded here (they may be compressed); only the cleaner and the produce
//! checks ([`crate::validate`]) read them, through the `records` module.
//! Callers: the log's append, recovery and read paths.

pub(crate) mod records;
mod rewrite;

#[cfg(test)]
mod tests;

pub use rewrite::{set_base_offset, set_log_append_time, set_partition_leader_epoch};

use crate::config::TimestampType;
use crate::types::{LeaderEpoch, Offset};

/// Bytes before `batchLength` is known to count: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header, up to and including `recordsCount`.
pub const HEADER_SIZE: usize = 61;
/// The only supported batch format.
pub const MAGIC_V2: i8 = 2;
/// Attribute bit set when timestamps are LogAppendTime.
pub const TIMESTAMP_TYPE_ATTRIBUTE: i16 = 1 << 3;
/// Attribute bit of transactional batches.
pub const TRANSACTIONAL_ATTRIBUTE: i16 = 1 << 4;
/// Attribute bit of control batches.
pub const CONTROL_ATTRIBUTE: i16 = 1 << 5;
/// Attribute bit of a batch whose `baseTimestamp` holds the cleaner's delete horizon (KIP-534):
/// its tombstones may be removed once that time has passed.
pub const DELETE_HORIZON_ATTRIBUTE: i16 = 1 << 6;
/// Attribute bits holding the compression codec.
pub const COMPRESSION_CODEC_MASK: i16 = 0x07;

pub(crate) const BASE_OFFSET_POS: usize = 0;
pub(crate) const LENGTH_POS: usize = 8;
pub(crate) const PARTITION_LEADER_EPOCH_POS: usize = 12;
pub(crate) const MAGIC_POS: usize = 16;
pub(crate) const CRC_POS: usize = 17;
pub(crate) const ATTRIBUTES_POS: usize = 21;
pub(crate) const LAST_OFFSET_DELTA_POS: usize = 23;
pub(crate) const BASE_TIMESTAMP_POS: usize = 27;
pub(crate) const MAX_TIMESTAMP_POS: usize = 35;
pub(crate) const PRODUCER_ID_POS: usize = 43;
pub(crate) const PRODUCER_EPOCH_POS: usize = 51;
pub(crate) const BASE_SEQUENCE_POS: usize = 53;
pub(crate) const RECORDS_COUNT_POS: usize = 57;

/// Why a buffer does not hold a valid v2 batch at some byte position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The buffer ends inside the batch (a torn write, or a short request).
    #[error("batch at byte {position} is truncated: needs {needed} bytes, {available} available")]
    Truncated {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// Bytes the batch needs.
        needed: usize,
        /// Bytes available from `position`.
        available: usize,
    },
    /// `batchLength` is too small to hold a v2 header.
    #[error("batch at byte {position} declares length {batch_length}, below the v2 header size")]
    LengthTooSmall {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// The declared `batchLength`.
        batch_length: i32,
    },
    /// Magic is not 2.
    #[error("batch at byte {position} has magic {magic}; only magic 2 is supported")]
    UnsupportedMagic {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// The magic byte found.
        magic: i8,
    },
    /// The stored CRC-32C does not match the bytes.
    #[error("batch at byte {position} has crc {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// `recordsCount` is negative.
    #[error("batch at byte {position} has negative records count {count}")]
    NegativeRecordsCount {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// The declared count.
        count: i32,
    },
    /// `lastOffsetDelta` is negative.
    #[error("batch at byte {position} has negative last offset delta {delta}")]
    NegativeLastOffsetDelta {
        /// Byte position of the batch in the buffer.
        position: usize,
        /// The declared delta.
        delta: i32,
    },
}

/// The decoded fields of a v2 batch header. Parsing a header checks nothing but its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// First offset of the batch.
    pub base_offset: Offset,
    /// Bytes after the length field.
    pub batch_length: i32,
    /// Raw partition leader epoch (`-1` when a producer wrote it).
    pub partition_leader_epoch: i32,
    /// Format version.
    pub magic: i8,
    /// Stored CRC-32C.
    pub crc: u32,
    /// Attribute bits (compression, timestamp type, transactional, control).
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest record timestamp (or the LogAppendTime).
    pub max_timestamp: i64,
    /// Idempotent producer id (`-1` if none).
    pub producer_id: i64,
    /// Idempotent producer epoch.
    pub producer_epoch: i16,
    /// Sequence of the first record.
    pub base_sequence: i32,
    /// Number of records in the batch.
    pub records_count: i32,
}

fn be_i64(b: &[u8], pos: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[pos..pos + 8]);
    i64::from_be_bytes(a)
}

fn be_i32(b: &[u8], pos: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[pos..pos + 4]);
    i32::from_be_bytes(a)
}

fn be_i16(b: &[u8], pos: usize) -> i16 {
    i16::from_be_bytes([b[pos], b[pos + 1]])
}

impl BatchHeader {
    /// Decodes the first [`HEADER_SIZE`] bytes of `bytes`; `None` if there are fewer.
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < HEADER_SIZE {
            return None;
        }
        Some(BatchHeader {
            base_offset: Offset(be_i64(bytes, BASE_OFFSET_POS)),
            batch_length: be_i32(bytes, LENGTH_POS),
            partition_leader_epoch: be_i32(bytes, PARTITION_LEADER_EPOCH_POS),
            magic: bytes[MAGIC_POS] as i8,
            crc: be_i32(bytes, CRC_POS) as u32,
            attributes: be_i16(bytes, ATTRIBUTES_POS),
            last_offset_delta: be_i32(bytes, LAST_OFFSET_DELTA_POS),
            base_timestamp: be_i64(bytes, BASE_TIMESTAMP_POS),
            max_timestamp: be_i64(bytes, MAX_TIMESTAMP_POS),
            producer_id: be_i64(bytes, PRODUCER_ID_POS),
            producer_epoch: be_i16(bytes, PRODUCER_EPOCH_POS),
            base_sequence: be_i32(bytes, BASE_SEQUENCE_POS),
            records_count: be_i32(bytes, RECORDS_COUNT_POS),
        })
    }

    /// Total bytes the batch occupies, `LOG_OVERHEAD + batchLength`; `None` if `batchLength`
    /// is negative.
    pub fn size_bytes(&self) -> Option<usize> {
        usize::try_from(self.batch_length)
            .ok()
            .map(|len| len + LOG_OVERHEAD)
    }

    /// Offset of the last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> Offset {
        self.base_offset.plus(i64::from(self.last_offset_delta))
    }

    /// The offset after the batch.
    pub fn next_offset(&self) -> Offset {
        self.last_offset().next()
    }

    /// Number of offsets the batch spans, `last_offset_delta + 1`.
    pub fn offset_count(&self) -> u64 {
        u64::try_from(i64::from(self.last_offset_delta) + 1).unwrap_or(0)
    }

    /// The leader epoch stamped by the broker, or `None` if unset (negative).
    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        (self.partition_leader_epoch >= 0).then_some(LeaderEpoch(self.partition_leader_epoch))
    }

    /// Which clock the timestamps come from.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_ATTRIBUTE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether this is a control batch (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_ATTRIBUTE != 0
    }
}

/// One validated batch inside a buffer.
#[derive(Debug, Clone, Copy)]
pub struct BatchView<'a> {
    /// The decoded header.
    pub header: BatchHeader,
    /// Byte position of the batch in the parsed buffer.
    pub position: usize,
    /// The whole batch, header included.
    pub bytes: &'a [u8],
}

/// Validates the batch starting at `position` in `buf`: length at least a header, whole batch
/// present, magic 2, CRC-32C matches, `recordsCount >= 0`, `lastOffsetDelta >= 0`.
pub fn parse_batch_at(buf: &[u8], position: usize) -> Result<BatchView<'_>, BatchError> {
    let rest = buf.get(position..).unwrap_or(&[]);
    if rest.len() < LOG_OVERHEAD {
        return Err(BatchError::Truncated {
            position,
            needed: LOG_OVERHEAD,
            available: rest.len(),
        });
    }
    let batch_length = be_i32(rest, LENGTH_POS);
    let size = usize::try_from(batch_length)
        .ok()
        .map(|len| len + LOG_OVERHEAD)
        .filter(|&size| size >= HEADER_SIZE)
        .ok_or(BatchError::LengthTooSmall {
            position,
            batch_length,
        })?;
    if rest.len() < size {
        return Err(BatchError::Truncated {
            position,
            needed: size,
            available: rest.len(),
        });
    }
    let bytes = &rest[..size];
    let header = BatchHeader::parse(bytes).ok_or(BatchError::Truncated {
        position,
        needed: HEADER_SIZE,
        available: bytes.len(),
    })?;
    validate_header(&header, bytes, position)?;
    Ok(BatchView {
        header,
        position,
        bytes,
    })
}

fn validate_header(header: &BatchHeader, bytes: &[u8], position: usize) -> Result<(), BatchError> {
    if header.magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic {
            position,
            magic: header.magic,
        });
    }
    let computed = compute_crc(bytes);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            position,
            stored: header.crc,
            computed,
        });
    }
    if header.records_count < 0 {
        return Err(BatchError::NegativeRecordsCount {
            position,
            count: header.records_count,
        });
    }
    if header.last_offset_delta < 0 {
        return Err(BatchError::NegativeLastOffsetDelta {
            position,
            delta: header.last_offset_delta,
        });
    }
    Ok(())
}

/// CRC-32C over `bytes[ATTRIBUTES_POS..]` of a whole batch.
pub(crate) fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(ATTRIBUTES_POS..).unwrap_or(&[]))
}

/// Iterates the batches of a buffer, validating each; stops after the first error.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    position: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Iterates `buf` from its start.
    pub fn new(buf: &'a [u8]) -> BatchIter<'a> {
        BatchIter {
            buf,
            position: 0,
            failed: false,
        }
    }

    /// Byte position of the next batch (after the last valid one, once an error was returned).
    pub fn position(&self) -> usize {
        self.position
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchView<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.buf.len() {
            return None;
        }
        match parse_batch_at(self.buf, self.position) {
            Ok(view) => {
                self.position += view.bytes.len();
                Some(Ok(view))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses and validates every batch of `buf`; the buffer must end exactly at a batch boundary.
pub fn parse_batches(buf: &[u8]) -> Result<Vec<BatchView<'_>>, BatchError> {
    BatchIter::new(buf).collect()
}
