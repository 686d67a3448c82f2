//! Appends: as leader (validate, assign offsets, stamp the leader epoch and LogAppendTime) and
//! as follower (batches already carry offsets and epochs). Both are all-or-nothing: if any
//! batch is invalid, nothing is written.

use crate::batch::{
    parse_batches, set_base_offset, set_log_append_time, set_partition_leader_epoch, BatchHeader,
    BatchView,
};
use crate::config::TimestampType;
use crate::error::LogError;
use crate::producer_state::{BatchMetadata, SequenceCheck};
use crate::types::{LeaderEpoch, TimestampOffset};

use super::{AppendInfo, Log};

/// Largest buffer accepted by one append (segment positions are `u32`).
pub const APPEND_BYTES_MAX: usize = i32::MAX as usize;

impl Log {
    /// Appends producer batches as the leader in `leader_epoch`.
    ///
    /// Each batch must be a valid magic-2 batch (length, CRC-32C), at most `max.message.bytes`,
    /// and hold `lastOffsetDelta + 1` records. Offsets are assigned from the log end offset,
    /// `partitionLeaderEpoch` is set to `leader_epoch`, and for LogAppendTime topics
    /// `maxTimestamp` becomes `now_ms`. The segment rolls first if needed; the flush policy runs
    /// after.
    pub fn append_as_leader(
        &mut self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_leader_batches(records, leader_epoch, now_ms, false)
    }

    /// Like [`Log::append_as_leader`] for batches a coordinator writes on a producer's behalf
    /// (transactional offset commits): their producer epoch is checked, their sequences are
    /// not ([`crate::ProducerStates::check_coordinator`]).
    pub fn append_as_coordinator(
        &mut self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_leader_batches(records, leader_epoch, now_ms, true)
    }

    fn append_leader_batches(
        &mut self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
        from_coordinator: bool,
    ) -> Result<AppendInfo, LogError> {
        if leader_epoch.0 < 0 {
            return Err(LogError::InvalidRecord {
                reason: format!("leader epoch {leader_epoch} is negative"),
            });
        }
        let views = parse_and_check_size(records)?;
        for view in &views {
            self.validate_producer_batch(view)?;
            if from_coordinator {
                self.producers.check_coordinator(&view.header)?;
            }
        }
        let duplicate = if from_coordinator {
            None
        } else {
            self.check_sequences(&views)?
        };
        if let Some(duplicate) = duplicate {
            return Ok(AppendInfo::nothing_appended(
                duplicate.first_offset(),
                duplicate.last_offset,
            ));
        }
        let first_offset = self.log_end_offset();
        let mut buf = records.to_vec();
        let mut batches = Vec::with_capacity(views.len());
        let mut next = first_offset;
        let log_append_time_ms =
            (self.config.timestamp_type == TimestampType::LogAppendTime).then_some(now_ms);
        for view in &views {
            let bytes = &mut buf[view.position..view.position + view.bytes.len()];
            set_base_offset(bytes, next);
            set_partition_leader_epoch(bytes, leader_epoch);
            if let Some(time) = log_append_time_ms {
                set_log_append_time(bytes, time);
            }
            let header = BatchHeader::parse(bytes).expect("a validated batch has a header");
            debug_assert!(
                crate::batch::parse_batch_at(bytes, 0).is_ok(),
                "CRC survives rewrite"
            );
            assert_eq!(header.base_offset, next, "offset assigned");
            next = header.next_offset();
            batches.push((view.position, header));
        }
        let changed = self.epochs.assign(leader_epoch, first_offset);
        self.save_epochs_if(changed)?;
        let mut info = self.append_batches(&buf, &batches, now_ms)?;
        info.log_append_time_ms = log_append_time_ms;
        for (position, header) in &batches {
            self.record_batch(&buf[*position..], header);
        }
        Ok(info)
    }

    /// Appends batches replicated from the leader. They keep their offsets and epochs: the first
    /// must start at the log end offset and each must start where the previous ended. The epoch
    /// cache learns every batch's `partitionLeaderEpoch`. `max.message.bytes` is not enforced
    /// (the leader did; Kafka's followers ignore it too).
    ///
    /// One exception: an empty log started at its log start offset (a follower that started
    /// over at the leader's log start offset, which DeleteRecords may have put inside a batch)
    /// accepts a first batch straddling it — the log restarts at the batch's base offset and
    /// keeps its log start offset (Kafka's `Partition.doAppendRecordsToFollowerOrFutureReplica`
    /// on `UnexpectedAppendOffsetException`); if that append fails, the log is empty at its log
    /// start offset again.
    pub fn append_as_follower(
        &mut self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let views = parse_and_check_size(records)?;
        let log_start_offset = self.log_start_offset;
        let restart_at = views.first().map(|v| v.header).filter(|first| {
            let end = self.log_end_offset();
            end == log_start_offset
                && self.size_bytes() == 0
                && first.base_offset < end
                && first.next_offset() > end
        });
        let Some(first) = restart_at else {
            return self.append_replicated(&views, records, now_ms);
        };
        tracing::info!(dir = %self.dir.display(), %log_start_offset, batch_base_offset = %first.base_offset,
            "the leader's first batch starts below the log start offset: the log restarts at its base offset");
        self.truncate_fully_and_start_at(first.base_offset)?;
        match self.append_replicated(&views, records, now_ms) {
            Ok(info) => {
                self.log_start_offset = log_start_offset;
                self.check_invariants();
                Ok(info)
            }
            Err(e) => {
                self.truncate_fully_and_start_at(log_start_offset)?;
                Err(e)
            }
        }
    }

    /// [`Log::append_as_follower`] once the log ends where the first batch starts.
    fn append_replicated(
        &mut self,
        views: &[BatchView<'_>],
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut expected = self.log_end_offset();
        for view in views {
            // A compacted leader log has gaps: a batch may start past the expected offset.
            if view.header.base_offset < expected {
                return Err(LogError::UnexpectedAppendOffset {
                    expected,
                    found: view.header.base_offset,
                });
            }
            expected = view.header.next_offset();
        }
        let mut changed = false;
        for view in views {
            if let Some(epoch) = view.header.leader_epoch() {
                changed |= self.epochs.assign(epoch, view.header.base_offset);
            }
        }
        self.save_epochs_if(changed)?;
        let batches: Vec<_> = views.iter().map(|v| (v.position, v.header)).collect();
        let info = self.append_batches(records, &batches, now_ms)?;
        for (position, header) in &batches {
            self.record_batch(&records[*position..], header);
        }
        Ok(info)
    }

    /// The idempotent-producer checks of [`crate::ProducerStates::check`] for every batch, each against
    /// the state the earlier batches of the same append leave. The first duplicate found
    /// answers for the whole append (Kafka's rule); an error refuses it all.
    fn check_sequences(&self, views: &[BatchView<'_>]) -> Result<Option<BatchMetadata>, LogError> {
        if let [view] = views {
            return Ok(match self.producers.check(&view.header)? {
                SequenceCheck::Duplicate(batch) => Some(batch),
                SequenceCheck::Append => None,
            });
        }
        let mut pending = self.producers.clone();
        let mut next = self.log_end_offset();
        for view in views {
            match pending.check(&view.header)? {
                SequenceCheck::Duplicate(batch) => return Ok(Some(batch)),
                SequenceCheck::Append => {
                    let mut header = view.header;
                    header.base_offset = next;
                    next = header.next_offset();
                    pending.record(&header);
                }
            }
        }
        Ok(None)
    }

    /// Kafka's producer-batch rules beyond structure: size limit and a consistent record count.
    fn validate_producer_batch(&self, view: &BatchView<'_>) -> Result<(), LogError> {
        let size = view.bytes.len() as u64;
        if size > self.config.max_message_bytes {
            return Err(LogError::RecordTooLarge {
                batch_bytes: size,
                max_message_bytes: self.config.max_message_bytes,
            });
        }
        let header = &view.header;
        if header.records_count <= 0 {
            return Err(LogError::InvalidRecord {
                reason: format!("batch reports {} records", header.records_count),
            });
        }
        if i64::from(header.records_count) != i64::from(header.last_offset_delta) + 1 {
            return Err(LogError::InvalidRecord {
                reason: format!(
                    "batch holds {} records but spans {} offsets",
                    header.records_count,
                    i64::from(header.last_offset_delta) + 1
                ),
            });
        }
        Ok(())
    }

    /// Writes validated batches that start at the log end offset: rolls if needed, appends,
    /// applies the flush policy.
    pub(super) fn append_batches(
        &mut self,
        bytes: &[u8],
        batches: &[(usize, BatchHeader)],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let first = batches.first().expect("at least one batch").1;
        let last = batches.last().expect("at least one batch").1;
        assert!(
            first.base_offset >= self.log_end_offset(),
            "append at or past the log end"
        );
        if let Some(reason) =
            self.active()
                .roll_reason(bytes.len() as u64, last.last_offset(), now_ms, &self.config)
        {
            tracing::debug!(dir = %self.dir.display(), ?reason, "rolling segment");
            self.roll()?;
        }
        let io_error = self.io_error("append");
        self.active_mut()
            .append(bytes, batches, now_ms)
            .map_err(io_error)?;
        let info = AppendInfo {
            first_offset: first.base_offset,
            last_offset: last.last_offset(),
            max_timestamp: max_timestamp(batches),
            log_append_time_ms: None,
            record_count: (last.next_offset().0 - first.base_offset.0) as u64,
            batch_count: batches.len(),
            size_bytes: bytes.len() as u64,
            duplicate: false,
        };
        assert_eq!(
            self.log_end_offset(),
            last.next_offset(),
            "log end advanced"
        );
        self.maybe_flush(now_ms)?;
        Ok(info)
    }
}

/// Parses and validates every batch; at least one, and not more than [`APPEND_BYTES_MAX`] bytes.
fn parse_and_check_size(records: &[u8]) -> Result<Vec<BatchView<'_>>, LogError> {
    if records.len() > APPEND_BYTES_MAX {
        return Err(LogError::RecordTooLarge {
            batch_bytes: records.len() as u64,
            max_message_bytes: APPEND_BYTES_MAX as u64,
        });
    }
    let views = parse_batches(records).map_err(LogError::from_batch_error)?;
    if views.is_empty() {
        return Err(LogError::InvalidRecord {
            reason: "no record batches".to_string(),
        });
    }
    Ok(views)
}

/// The largest non-negative batch max timestamp and the first batch carrying it.
fn max_timestamp(batches: &[(usize, BatchHeader)]) -> Option<TimestampOffset> {
    let mut max: Option<TimestampOffset> = None;
    for (_, header) in batches {
        if header.max_timestamp >= 0 && max.is_none_or(|m| header.max_timestamp > m.timestamp) {
            max = Some(TimestampOffset {
                timestamp: header.max_timestamp,
                offset: header.base_offset,
            });
        }
    }
    max
}
