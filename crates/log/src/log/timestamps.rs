//! ListOffsets by time: the first record with a timestamp at or after a target, the record
//! with the largest timestamp (KIP-734), and the leader epoch the earliest offset answers with.
//!
//! Records are found at record granularity, as Kafka does (`UnifiedLog.fetchOffsetByTimestamp`,
//! `LogSegment.findOffsetByTimestamp`, `FileRecords.searchForTimestamp`,
//! `RecordBatch.offsetOfMaxTimestamp`): the sparse time index and the offset index give a byte
//! position at or before the batch holding the wanted record, batch headers are walked from
//! there, and only a batch whose max timestamp reaches the target is read and decoded —
//! decompressed through [`RecordCodecs`] when compressed (the log links no codec; the broker's
//! codecs bound what a batch may decompress to). A batch read for a lookup is CRC-checked
//! first: damage is [`LogError::Damaged`], never a wrong answer.

use super::compact::{records_section, RecordCodecs};
use super::Log;
use crate::batch::records::parse_records;
use crate::batch::{parse_batch_at, BatchHeader};
use crate::config::TimestampType;
use crate::error::{Damage, LogError};
use crate::segment::Segment;
use crate::types::{LeaderEpoch, Offset};

/// The largest batch a lookup reads into memory, unless `max.message.bytes` allows larger ones: a
/// header length read from disk is not trusted to size an allocation.
pub const LOOKUP_BATCH_BYTES_MAX: u64 = 64 << 20;

/// A record found by a lookup by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTimestamp {
    /// The record's offset.
    pub offset: Offset,
    /// The record's timestamp (for a LogAppendTime batch, the time the broker stamped).
    pub timestamp: i64,
    /// The partition leader epoch stamped on the record's batch, if any.
    pub leader_epoch: Option<LeaderEpoch>,
}

impl Log {
    /// The first record at or after the log start offset whose timestamp is `>= target`, if
    /// it lies below `max_offset` (the high watermark, if given) and the log end offset.
    ///
    /// Kafka's rule (`UnifiedLog.fetchOffsetByTimestamp`): the first segment whose largest
    /// timestamp reaches the target, then in it the first batch whose max timestamp does, then
    /// in that batch the first record that does. One difference: when no record of that segment
    /// qualifies (every one that reaches the target lies below the log start offset, or a
    /// producer's batch header claims a max timestamp none of its records has), Kafka answers
    /// nothing while this goes on to the next segments.
    pub fn offset_for_timestamp(
        &self,
        target: i64,
        max_offset: Option<Offset>,
        codecs: &dyn RecordCodecs,
    ) -> Result<Option<RecordTimestamp>, LogError> {
        let log_end_offset = self.log_end_offset();
        let limit = max_offset.map_or(log_end_offset, |m| m.min(log_end_offset));
        let start = self.log_start_offset;
        for segment in self.segments.values() {
            let reaches = segment
                .max_timestamp()
                .is_some_and(|m| m.timestamp >= target);
            if segment.next_offset() <= start || !reaches {
                continue;
            }
            let mut from = segment.position_for_timestamp(target, start);
            while let Some((position, header)) = segment
                .find_batch_from(from, |h| {
                    h.max_timestamp >= target && h.last_offset() >= start
                })
                .map_err(self.io_error("read"))?
            {
                if header.base_offset >= limit {
                    return Ok(None);
                }
                let found = self.first_record_where(segment, position, &header, codecs, |r| {
                    r.timestamp >= target && r.offset >= start
                })?;
                if let Some(found) = found {
                    return Ok((found.offset < limit).then_some(found));
                }
                from = position + header.size_bytes().expect("walked batch has a size") as u64;
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (KIP-734): the first record carrying the largest timestamp of
    /// the log, with its batch's leader epoch. As Kafka (`UnifiedLog.fetchOffsetByTimestamp`
    /// for `MAX_TIMESTAMP`, `RecordBatch.offsetOfMaxTimestamp`): the first segment holding the
    /// largest segment max timestamp, its first batch with that max timestamp, that batch's
    /// first record with it — `None` when no record of the batch has it (a producer's header
    /// that lies). Segments wholly below the log start offset are left out (they await
    /// deletion); the caller filters by the high watermark.
    pub fn offset_of_max_timestamp(
        &self,
        codecs: &dyn RecordCodecs,
    ) -> Result<Option<RecordTimestamp>, LogError> {
        let mut best: Option<(&Segment, i64, Offset)> = None;
        for segment in self.segments.values() {
            if segment.next_offset() <= self.log_start_offset {
                continue;
            }
            if let Some(m) = segment.max_timestamp() {
                if best.is_none_or(|(_, timestamp, _)| m.timestamp > timestamp) {
                    best = Some((segment, m.timestamp, m.offset));
                }
            }
        }
        let Some((segment, max_timestamp, batch_offset)) = best else {
            return Ok(None);
        };
        let from = segment.position_for_timestamp(max_timestamp, batch_offset);
        let Some((position, header)) = segment
            .find_batch_from(from, |h| h.max_timestamp == max_timestamp)
            .map_err(self.io_error("read"))?
        else {
            return Ok(None);
        };
        self.first_record_where(segment, position, &header, codecs, |r| {
            r.timestamp == max_timestamp
        })
    }

    /// The leader epoch ListOffsets EARLIEST answers with: the first epoch of the cache if it
    /// starts at or below the log start offset (Kafka: `UnifiedLog.fetchOffsetByTimestamp`
    /// for `EARLIEST_TIMESTAMP`), otherwise none.
    pub fn epoch_at_log_start(&self) -> Option<LeaderEpoch> {
        self.epochs
            .entries()
            .first()
            .filter(|e| e.start_offset <= self.log_start_offset)
            .map(|e| e.epoch)
    }

    /// Reads the batch at `position` of `segment` (whose header is `header`), checks it and
    /// returns its first record satisfying `wanted`.
    fn first_record_where(
        &self,
        segment: &Segment,
        position: u64,
        header: &BatchHeader,
        codecs: &dyn RecordCodecs,
        mut wanted: impl FnMut(&RecordTimestamp) -> bool,
    ) -> Result<Option<RecordTimestamp>, LogError> {
        let size = header.size_bytes().expect("walked batch has a size");
        let bound = self.config.max_message_bytes.max(LOOKUP_BATCH_BYTES_MAX);
        if size as u64 > bound {
            return Err(LogError::InvalidRecord {
                reason: format!(
                    "the batch at offset {} is {size} bytes, more than a lookup reads ({bound})",
                    header.base_offset
                ),
            });
        }
        let mut bytes = Vec::with_capacity(size);
        segment
            .read_to_vec(position, size, &mut bytes)
            .map_err(self.io_error("read"))?;
        let view = parse_batch_at(&bytes, 0).map_err(|e| {
            LogError::Damaged(Damage {
                segment: segment.base_offset(),
                position,
                reason: e.to_string(),
            })
        })?;
        let unreadable = |reason: String| LogError::InvalidRecord {
            reason: format!(
                "the records of the batch at offset {} cannot be read: {reason}",
                header.base_offset
            ),
        };
        let section = records_section(view.bytes, &view.header, codecs).map_err(unreadable)?;
        let records = parse_records(&section, view.header.records_count).map_err(unreadable)?;
        let append_time = view.header.timestamp_type() == TimestampType::LogAppendTime;
        Ok(records
            .iter()
            .map(|r| RecordTimestamp {
                offset: view.header.base_offset.plus(r.offset_delta),
                // Kafka's `DefaultRecord.timestamp`: a LogAppendTime batch's records all carry
                // the batch's max timestamp.
                timestamp: if append_time {
                    view.header.max_timestamp
                } else {
                    view.header.base_timestamp.saturating_add(r.timestamp_delta)
                },
                leader_epoch: view.header.leader_epoch(),
            })
            .find(|r| wanted(r)))
    }
}
