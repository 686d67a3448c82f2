//! A producer's record batches checked before the leader appends them, and converted to the
//! topic's codec: Kafka's `LogValidator` for client appends (and the checks of
//! `UnifiedLog.analyzeAndValidateRecords` that come before it).
//!
//! Checks, in Kafka's order:
//!
//! 1. the batches are structurally valid (length, magic 2, CRC-32C), and a partition gets exactly
//!    one batch (`getFirstBatchAndMaybeValidateNoMoreBatches`); the batch is at most
//!    `max.message.bytes` (`MESSAGE_TOO_LARGE` for the whole batch, without record errors: Kafka
//!    checks the batch's size, never a record's), starts at offset 0, holds as many records as
//!    its offsets span, is not a control batch, and an idempotent batch has a sequence
//!    (`LogValidator.validateBatch`) — refusals of the whole batch, [`Refused::Batch`];
//! 2. record by record (`LogValidator.validateRecord`): a compacted topic needs a key on every
//!    record; on a `CreateTime` topic every timestamp but -1 must lie within
//!    [now − `message.timestamp.before.max.ms`, now + `message.timestamp.after.max.ms`] (KIP-937);
//!    a producer may not mark its batch `LogAppendTime` unless its records pass the CreateTime
//!    check. Every bad record is named by its index in the batch (KIP-467, [`Refused::Records`]),
//!    and nothing of the batch is appended (`LogValidator.processRecordErrors`).
//!
//! Then, if the topic's `compression.type` names a codec other than the batch's, the batch is
//! rebuilt in that codec at the topic's level (`LogValidator.buildRecordsAndAssignOffsets`):
//! records keep their keys, values, headers and timestamps, their offset deltas become 0, 1, 2,
//! …, and the batch keeps its producer id, epoch, sequence and timestamps; length and CRC are
//! recomputed. The leader's append then assigns offsets and stamps the leader epoch (and the
//! LogAppendTime) as for any batch, and checks the rebuilt batch against `max.message.bytes`
//! again (`UnifiedLog.append` re-validates sizes that may have changed). Followers copy the
//! leader's bytes, so every replica holds the same batch.
//!
//! Compressed records are read through [`RecordCodecs`], whose decompression is bounded: the
//! codec refuses a batch that decompresses beyond its limit instead of allocating it.
//! Called by the broker's Produce handler; the coordinator's own writes and follower appends
//! never come here (Kafka's `AppendOrigin.CLIENT` only).

use std::borrow::Cow;
use std::fmt;

use crate::batch::records::{encode_with_offset_delta, parse_records, RecordRef};
use crate::batch::{
    compute_crc, parse_batches, BatchHeader, BatchView, ATTRIBUTES_POS, COMPRESSION_CODEC_MASK,
    CRC_POS, HEADER_SIZE, LENGTH_POS, LOG_OVERHEAD,
};
use crate::config::TimestampType;
use crate::error::LogError;
use crate::log::APPEND_BYTES_MAX;
use crate::types::TopicPartition;
use crate::RecordCodecs;

#[cfg(test)]
mod tests;

/// Kafka's `RecordBatch.NO_TIMESTAMP`: a record without a timestamp is never out of range.
pub const NO_TIMESTAMP: i64 = -1;

/// At most this many record errors are reported for one batch (a hostile batch of a million
/// keyless records would otherwise get a response of a hundred megabytes). The batch is refused
/// whole either way; clients fail records past the limit as part of a batch with invalid records.
pub const RECORD_ERRORS_MAX: usize = 10_000;

/// Kafka's codec ids in a batch's attributes.
pub const CODEC_NONE: i16 = 0;
/// gzip.
pub const CODEC_GZIP: i16 = 1;
/// snappy (xerial framing).
pub const CODEC_SNAPPY: i16 = 2;
/// lz4 (frame format).
pub const CODEC_LZ4: i16 = 3;
/// zstd.
pub const CODEC_ZSTD: i16 = 4;

/// What a topic stores its batches as (`compression.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopicCompression {
    /// `producer`: as the producer compressed them.
    #[default]
    Producer,
    /// `uncompressed` (codec 0), `gzip`, `snappy`, `lz4` or `zstd`, at a level (`None`: the
    /// codec's default; snappy has none).
    Codec {
        /// Kafka's codec id, [`CODEC_NONE`] to [`CODEC_ZSTD`].
        id: i16,
        /// `compression.gzip.level`, `compression.lz4.level` or `compression.zstd.level`.
        level: Option<i32>,
    },
}

/// The topic settings a producer's batch is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatchRules {
    /// `cleanup.policy` holds `compact`: every record needs a key.
    pub compacted: bool,
    /// `message.timestamp.type`: bounds are checked for `CreateTime` only.
    pub timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms`.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`.
    pub timestamp_after_max_ms: i64,
    /// `max.message.bytes`.
    pub max_message_bytes: u64,
    /// `compression.type` with its level.
    pub compression: TopicCompression,
}

/// Which error a refusal of records carries (the partition's error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordErrorKind {
    /// `INVALID_RECORD` (87).
    InvalidRecord,
    /// `INVALID_TIMESTAMP` (32): at least one record's timestamp is refused.
    InvalidTimestamp,
}

impl RecordErrorKind {
    /// Kafka's error code.
    pub fn code(self) -> i16 {
        match self {
            RecordErrorKind::InvalidRecord => 87,
            RecordErrorKind::InvalidTimestamp => 32,
        }
    }
}

/// One refused record: its index in the batch and why (KIP-467's `BatchIndexAndErrorMessage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The record's position in its batch, from 0.
    pub batch_index: i32,
    /// Kafka's message for this record.
    pub message: String,
}

impl fmt::Display for RecordError {
    /// Kafka's `ProduceResponse.RecordError.toString`, which its summary message lists.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RecordError(batchIndex={}, message='{}')",
            self.batch_index, self.message
        )
    }
}

/// A batch refused because of some of its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordErrors {
    /// The partition's error.
    pub kind: RecordErrorKind,
    /// The refused records, in batch order; at most [`RECORD_ERRORS_MAX`].
    pub errors: Vec<RecordError>,
    /// How many records were refused (may exceed `errors.len()`).
    pub total: usize,
}

impl RecordErrors {
    /// The partition's `error_message`, as Kafka's `LogValidator.processRecordErrors` words it.
    pub fn summary(&self) -> String {
        match self.kind {
            RecordErrorKind::InvalidTimestamp => {
                "One or more records have been rejected due to invalid timestamp".to_string()
            }
            RecordErrorKind::InvalidRecord => {
                let shown: Vec<String> =
                    self.errors.iter().take(3).map(|e| e.to_string()).collect();
                format!(
                    "One or more records have been rejected due to {} record errors in total, \
                     and only showing the first three errors at most: [{}]",
                    self.total,
                    shown.join(", ")
                )
            }
        }
    }
}

/// Why a producer's batches are not appended.
#[derive(Debug)]
pub enum Refused {
    /// The whole batch, without record errors (its code is the error's Kafka code).
    Batch(LogError),
    /// Some records (KIP-467).
    Records(RecordErrors),
}

impl From<LogError> for Refused {
    fn from(e: LogError) -> Refused {
        Refused::Batch(e)
    }
}

impl From<RecordErrors> for Refused {
    fn from(e: RecordErrors) -> Refused {
        Refused::Records(e)
    }
}

/// The checked batches: the request's own bytes, or the batch rebuilt in the topic's codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated<'a> {
    /// What to append.
    pub bytes: Cow<'a, [u8]>,
    /// Whether the batch was rebuilt in the topic's codec.
    pub recompressed: bool,
}

/// Whether checking `records` for `rules` must read the records themselves (decompressing
/// them), rather than only the batch header. The broker runs heavy checks off its async tasks.
pub fn reads_records(records: &[u8], rules: &ProducerBatchRules) -> bool {
    let Some(header) = BatchHeader::parse(records) else {
        return false;
    };
    let codec = header.attributes & COMPRESSION_CODEC_MASK;
    codec != CODEC_NONE && (record_checks_apply(&header, rules) || converts(codec, rules))
}

/// Checks a producer's `records` for `tp` against `rules` at `now_ms` (module docs), and
/// converts them to the topic's codec.
pub fn validate_producer_batches<'a>(
    records: &'a [u8],
    rules: &ProducerBatchRules,
    tp: &TopicPartition,
    now_ms: i64,
    codecs: &dyn RecordCodecs,
) -> Result<Validated<'a>, Refused> {
    let view = single_batch(records)?;
    check_batch(&view, rules, tp)?;
    let header = view.header;
    let codec = header.attributes & COMPRESSION_CODEC_MASK;
    let convert = converts(codec, rules);
    if !record_checks_apply(&header, rules) && !convert {
        return Ok(Validated {
            bytes: Cow::Borrowed(records),
            recompressed: false,
        });
    }
    let section = records_section(&view, codec, codecs)?;
    let parsed =
        parse_records(&section, header.records_count).map_err(|e| LogError::InvalidRecord {
            reason: format!("the batch's records are malformed: {e}"),
        })?;
    check_records(&parsed, &header, rules, tp, now_ms)?;
    if !convert {
        return Ok(Validated {
            bytes: Cow::Borrowed(records),
            recompressed: false,
        });
    }
    let TopicCompression::Codec { id, level } = rules.compression else {
        unreachable!("only a named codec converts");
    };
    let rebuilt = rebuild_in_codec(view.bytes, &parsed, id, level, codecs)?;
    Ok(Validated {
        bytes: Cow::Owned(rebuilt),
        recompressed: true,
    })
}

/// Whether a batch in `codec` must be rebuilt for the topic.
fn converts(codec: i16, rules: &ProducerBatchRules) -> bool {
    matches!(rules.compression, TopicCompression::Codec { id, .. } if id != codec)
}

/// Whether any record-level check can refuse a record of this batch.
fn record_checks_apply(header: &BatchHeader, rules: &ProducerBatchRules) -> bool {
    let create_time_bounds = rules.timestamp_type == TimestampType::CreateTime
        && (rules.timestamp_before_max_ms != i64::MAX || rules.timestamp_after_max_ms != i64::MAX);
    rules.compacted || create_time_bounds || header.timestamp_type() == TimestampType::LogAppendTime
}

/// The request's one batch (Kafka refuses more than one magic-2 batch per partition).
fn single_batch(records: &[u8]) -> Result<BatchView<'_>, LogError> {
    if records.len() > APPEND_BYTES_MAX {
        return Err(LogError::RecordTooLarge {
            batch_bytes: records.len() as u64,
            max_message_bytes: APPEND_BYTES_MAX as u64,
        });
    }
    let views = parse_batches(records).map_err(LogError::from_batch_error)?;
    match views.as_slice() {
        [view] => Ok(*view),
        [] => Err(LogError::InvalidRecord {
            reason: "the produce request holds no record batch".to_string(),
        }),
        more => Err(LogError::InvalidRecord {
            reason: format!(
                "a produce request holds one record batch per partition, not {}",
                more.len()
            ),
        }),
    }
}

/// The batch-level rules (module docs, step 1).
fn check_batch(
    view: &BatchView<'_>,
    rules: &ProducerBatchRules,
    tp: &TopicPartition,
) -> Result<(), LogError> {
    let header = &view.header;
    let size = view.bytes.len() as u64;
    if size > rules.max_message_bytes {
        return Err(LogError::RecordTooLarge {
            batch_bytes: size,
            max_message_bytes: rules.max_message_bytes,
        });
    }
    let invalid = |reason: String| Err(LogError::InvalidRecord { reason });
    if header.base_offset.0 != 0 {
        return invalid(format!(
            "the batch to {tp} starts at offset {}; a producer's batch starts at 0",
            header.base_offset
        ));
    }
    if header.records_count <= 0
        || i64::from(header.records_count) != i64::from(header.last_offset_delta) + 1
    {
        return invalid(format!(
            "the batch to {tp} spans offsets [0, {}] but counts {} records",
            header.last_offset_delta, header.records_count
        ));
    }
    if header.is_control() {
        return invalid(format!("clients may not write control batches (to {tp})"));
    }
    if header.producer_id >= 0 && header.base_sequence < 0 {
        return invalid(format!(
            "the batch of producer {} to {tp} has no sequence ({})",
            header.producer_id, header.base_sequence
        ));
    }
    Ok(())
}

/// The records section, decompressed (boundedly, by `codecs`) if the batch is compressed.
fn records_section<'v>(
    view: &BatchView<'v>,
    codec: i16,
    codecs: &dyn RecordCodecs,
) -> Result<Cow<'v, [u8]>, LogError> {
    let section = &view.bytes[HEADER_SIZE..];
    if codec == CODEC_NONE {
        return Ok(Cow::Borrowed(section));
    }
    codecs
        .decompress(codec, section)
        .map(Cow::Owned)
        .map_err(|e| LogError::InvalidRecord {
            reason: format!("the batch's records cannot be decompressed (codec {codec}): {e}"),
        })
}

/// The record-level rules (module docs, step 2).
fn check_records(
    records: &[RecordRef<'_>],
    header: &BatchHeader,
    rules: &ProducerBatchRules,
    tp: &TopicPartition,
    now_ms: i64,
) -> Result<(), RecordErrors> {
    let mut refused = RecordErrors {
        kind: RecordErrorKind::InvalidRecord,
        errors: Vec::new(),
        total: 0,
    };
    for (index, record) in records.iter().enumerate() {
        let Some((kind, message)) = check_record(record, header, rules, tp, now_ms) else {
            continue;
        };
        if kind == RecordErrorKind::InvalidTimestamp {
            refused.kind = RecordErrorKind::InvalidTimestamp;
        }
        refused.total += 1;
        if refused.errors.len() < RECORD_ERRORS_MAX {
            refused.errors.push(RecordError {
                batch_index: i32::try_from(index).unwrap_or(i32::MAX),
                message,
            });
        }
    }
    if refused.total == 0 {
        Ok(())
    } else {
        Err(refused)
    }
}

/// One record's error, if any (Kafka's `LogValidator.validateKey` then `validateTimestamp`).
fn check_record(
    record: &RecordRef<'_>,
    header: &BatchHeader,
    rules: &ProducerBatchRules,
    tp: &TopicPartition,
    now_ms: i64,
) -> Option<(RecordErrorKind, String)> {
    if rules.compacted && record.key.is_none() {
        return Some((
            RecordErrorKind::InvalidRecord,
            format!("Compacted topic cannot accept message without key in topic partition {tp}"),
        ));
    }
    let batch_log_append_time = header.timestamp_type() == TimestampType::LogAppendTime;
    // A batch marked LogAppendTime gives every record its max timestamp
    // (DefaultRecordBatch's record iterator); otherwise base timestamp plus the record's delta.
    let timestamp = if batch_log_append_time {
        header.max_timestamp
    } else {
        header.base_timestamp.wrapping_add(record.timestamp_delta)
    };
    if rules.timestamp_type == TimestampType::CreateTime && timestamp != NO_TIMESTAMP {
        // Kafka's arithmetic, overflow included (LogValidator.recordHasInvalidTimestamp).
        let diff = now_ms.wrapping_sub(timestamp);
        if diff > rules.timestamp_before_max_ms
            || diff.wrapping_neg() > rules.timestamp_after_max_ms
        {
            return Some((
                RecordErrorKind::InvalidTimestamp,
                format!(
                    "Timestamp {timestamp} of message with offset {} is out of range. The \
                     timestamp should be within [{}, {}]",
                    header.base_offset.0.wrapping_add(record.offset_delta),
                    now_ms.wrapping_sub(rules.timestamp_before_max_ms),
                    now_ms.wrapping_add(rules.timestamp_after_max_ms)
                ),
            ));
        }
    } else if batch_log_append_time {
        return Some((
            RecordErrorKind::InvalidTimestamp,
            format!(
                "Invalid timestamp type in message DefaultRecord(offset={}, timestamp={timestamp}, \
                 key={} bytes, value={} bytes). Producer should not set timestamp type to \
                 LogAppendTime.",
                header.base_offset.0.wrapping_add(record.offset_delta),
                record.key.map_or(0, <[u8]>::len),
                record.value.map_or(0, <[u8]>::len)
            ),
        ));
    }
    None
}

/// `batch` rebuilt with its records in `codec` at `level` (module docs).
fn rebuild_in_codec(
    batch: &[u8],
    records: &[RecordRef<'_>],
    codec: i16,
    level: Option<i32>,
    codecs: &dyn RecordCodecs,
) -> Result<Vec<u8>, LogError> {
    let mut section = Vec::with_capacity(records.iter().map(|r| r.raw.len()).sum());
    for (index, record) in records.iter().enumerate() {
        let delta = i64::try_from(index).expect("fewer records than i64::MAX");
        if record.offset_delta == delta {
            section.extend_from_slice(record.raw);
        } else {
            encode_with_offset_delta(&mut section, record, delta);
        }
    }
    let section = if codec == CODEC_NONE {
        section
    } else {
        codecs
            .compress_at_level(codec, level, &section)
            .map_err(|e| LogError::InvalidRecord {
                reason: format!("the batch cannot be compressed with codec {codec}: {e}"),
            })?
    };
    let mut rebuilt = Vec::with_capacity(HEADER_SIZE + section.len());
    rebuilt.extend_from_slice(&batch[..HEADER_SIZE]);
    rebuilt.extend_from_slice(&section);
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_POS], batch[ATTRIBUTES_POS + 1]]);
    let attributes = (attributes & !COMPRESSION_CODEC_MASK) | codec;
    rebuilt[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    let length =
        i32::try_from(rebuilt.len() - LOG_OVERHEAD).map_err(|_| LogError::RecordTooLarge {
            batch_bytes: rebuilt.len() as u64,
            max_message_bytes: APPEND_BYTES_MAX as u64,
        })?;
    rebuilt[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
    let crc = compute_crc(&rebuilt);
    rebuilt[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(rebuilt)
}
