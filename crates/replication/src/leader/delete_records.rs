//! DeleteRecords on the leader (Kafka's `Partition.deleteRecordsOnLeader`,
//! `Partition.lowWatermarkIfLeader` and `DelayedDeleteRecords`), as pure bookkeeping keyed by
//! the shell's [`RequestId`]s:
//!
//! - [`LeaderPartition::delete_records_offset`] checks the requested offset in Kafka's order:
//!   the high watermark stands for -1 (`DeleteRecordsRequest.HIGH_WATERMARK`); a negative offset
//!   or one beyond the high watermark is `OFFSET_OUT_OF_RANGE` (`UnifiedLog
//!   .maybeIncrementLogStartOffset` refuses a start past the high watermark). The shell checks
//!   leadership and the topic's `cleanup.policy` (`POLICY_VIOLATION` without `delete`) first, as
//!   Kafka does, then moves the log start offset and reports it ([`LeaderPartition
//!   ::on_log_start_offset`]);
//! - the **low watermark** ([`LeaderPartition::low_watermark`]) is the smallest log start offset
//!   over the leader and every follower replica whose broker is registered and not fenced — in
//!   the ISR or not (Kafka's `lowWatermarkIfLeader` uses `metadataCache.hasAliveBroker`); a live
//!   follower that has not reported a log start offset in this leadership makes it unknown
//!   (Kafka's `UnifiedLog.UnknownOffset`, -1), so a request waits for its first fetch;
//! - [`LeaderPartition::await_delete_records`] answers at once when the low watermark has reached
//!   the requested offset, or parks the request until it does (any follower fetch, fencing,
//!   replica change or leader log start move re-checks it) → `Ok(low watermark)`, its timeout
//!   passes → `REQUEST_TIMED_OUT`, or the leadership ends → `NOT_LEADER_OR_FOLLOWER`.
//!
//! Kafka re-checks a waiting request only when a fetch raises the low watermark or the high
//! watermark moves; here every event that can raise it does, so a request whose last lagging
//! follower is fenced completes at once instead of at its timeout.

use super::{Command, Effects, LeaderPartition, WaitingDelete};
use crate::errors::{ErrorCode, ReplicationError};
use crate::types::{Offset, RequestId};

/// The offset a DeleteRecords request names for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteRecordsOffset {
    /// -1 on the wire: delete everything below the high watermark.
    HighWatermark,
    /// Delete everything below this offset (any value the client sent).
    Offset(i64),
}

impl DeleteRecordsOffset {
    /// The wire value: -1 is [`DeleteRecordsOffset::HighWatermark`].
    pub fn from_wire(offset: i64) -> DeleteRecordsOffset {
        if offset == -1 {
            DeleteRecordsOffset::HighWatermark
        } else {
            DeleteRecordsOffset::Offset(offset)
        }
    }
}

impl LeaderPartition {
    /// The new log start offset a DeleteRecords asks for, checked as Kafka's
    /// `deleteRecordsOnLeader` does after its leadership and policy checks:
    /// `NOT_LEADER_OR_FOLLOWER` once the leadership ended, `OFFSET_OUT_OF_RANGE` for a
    /// negative offset or one beyond the high watermark.
    pub fn delete_records_offset(
        &self,
        requested: DeleteRecordsOffset,
    ) -> Result<Offset, ErrorCode> {
        if self.ended {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        let offset = match requested {
            DeleteRecordsOffset::HighWatermark => self.high_watermark,
            DeleteRecordsOffset::Offset(offset) => Offset(offset),
        };
        if offset.0 < 0 || offset > self.high_watermark {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        Ok(offset)
    }

    /// The low watermark (module docs): `None` while a live follower's log start offset is
    /// unknown.
    pub fn low_watermark(&self) -> Option<Offset> {
        let mut low_watermark = self.log_start_offset;
        for (broker, progress) in &self.followers {
            let alive = self.brokers.get(broker).is_some_and(|r| !r.fenced);
            if !alive {
                continue;
            }
            low_watermark = low_watermark.min(progress.log_start_offset?);
        }
        Some(low_watermark)
    }

    /// The leader's log start offset moved (DeleteRecords, or retention deleted segments); it
    /// never moves back. Waiting requests the low watermark now covers complete.
    pub fn on_log_start_offset(
        &mut self,
        log_start_offset: Offset,
    ) -> Result<Vec<Command>, ReplicationError> {
        if self.ended {
            return Ok(Vec::new());
        }
        if log_start_offset > self.high_watermark {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "log start offset ≤ high watermark",
            });
        }
        self.log_start_offset = self.log_start_offset.max(log_start_offset);
        let mut fx = Effects::default();
        self.complete_deletes(&mut fx);
        Ok(fx.into_commands())
    }

    /// Parks a DeleteRecords request until the low watermark reaches `required_offset` (the
    /// offset [`LeaderPartition::delete_records_offset`] returned), or answers it at once.
    pub fn await_delete_records(
        &mut self,
        request: RequestId,
        required_offset: Offset,
        timeout_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<Command>, ReplicationError> {
        if self.waiting_deletes.contains_key(&request) {
            return Err(ReplicationError::DuplicateRequest(request));
        }
        let mut fx = Effects::default();
        if self.ended {
            fx.completed_deletes
                .insert(request, Err(ErrorCode::NotLeaderOrFollower));
            return Ok(fx.into_commands());
        }
        if required_offset > self.log_start_offset {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "a deletion's offset ≤ the leader's log start offset",
            });
        }
        match self.low_watermark() {
            Some(low_watermark) if low_watermark >= required_offset => {
                fx.completed_deletes.insert(request, Ok(low_watermark));
            }
            _ => {
                let deadline_ms = now_ms.saturating_add(timeout_ms);
                self.waiting_deletes.insert(
                    request,
                    WaitingDelete {
                        required_offset,
                        deadline_ms,
                    },
                );
                fx.schedule_tick(deadline_ms);
            }
        }
        Ok(fx.into_commands())
    }

    /// Answers every waiting DeleteRecords the low watermark covers (Kafka's
    /// `DelayedDeleteRecords.tryComplete`).
    pub(super) fn complete_deletes(&mut self, fx: &mut Effects) {
        if self.waiting_deletes.is_empty() {
            return;
        }
        let Some(low_watermark) = self.low_watermark() else {
            return;
        };
        self.waiting_deletes.retain(|request, waiting| {
            let reached = waiting.required_offset <= low_watermark;
            if reached {
                fx.completed_deletes.insert(*request, Ok(low_watermark));
            }
            !reached
        });
    }

    /// Times out every waiting DeleteRecords whose deadline passed (`REQUEST_TIMED_OUT`, as
    /// `DelayedDeleteRecords` answers a partition still pending when it expires).
    pub(super) fn expire_deletes(&mut self, now_ms: u64, fx: &mut Effects) {
        self.waiting_deletes.retain(|request, waiting| {
            let expired = waiting.deadline_ms <= now_ms;
            if expired {
                fx.completed_deletes
                    .insert(*request, Err(ErrorCode::RequestTimedOut));
            }
            !expired
        });
    }

    /// Answers every waiting DeleteRecords with `error` (the leadership ended).
    pub(super) fn fail_all_deletes(&mut self, error: ErrorCode, fx: &mut Effects) {
        for request in std::mem::take(&mut self.waiting_deletes).into_keys() {
            fx.completed_deletes.insert(request, Err(error));
        }
    }
}
