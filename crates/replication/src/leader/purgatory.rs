//! acks=all produce (Kafka's `appendRecordsToLeader` check and `DelayedProduce`), as pure
//! bookkeeping keyed by the shell's [`RequestId`]s:
//!
//! - before appending, [`LeaderPartition::check_produce`]: committed ISR smaller than the
//!   effective min ISR → `NOT_ENOUGH_REPLICAS` (nothing is appended);
//! - after appending ([`LeaderPartition::on_leader_append`]), [`LeaderPartition::await_acks_all`]
//!   parks the request until the high watermark reaches its last offset + 1 → acknowledged;
//! - the committed ISR drops below the effective min ISR while it waits →
//!   `NOT_ENOUGH_REPLICAS_AFTER_APPEND` (issue 4; Kafka would keep it waiting);
//! - its timeout passes → `REQUEST_TIMED_OUT`; the leadership ends → `NOT_LEADER_OR_FOLLOWER`.
//!
//! acks=0 and acks=1 data is appended and acknowledged by the shell at once, but stays above
//! the high watermark until the ISR is back at min ISR (KIP-966).

use super::{Command, Effects, LeaderPartition, WaitingProduce};
use crate::errors::{ErrorCode, ReplicationError};
use crate::types::{Offset, RequestId};

/// A produce request's `acks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: no answer.
    None,
    /// `acks=1`: answered once the leader appended.
    Leader,
    /// `acks=all` (-1): answered once the high watermark covers the records.
    All,
}

impl LeaderPartition {
    /// May a produce with these acks be appended? `NOT_LEADER_OR_FOLLOWER` once the
    /// leadership ended; `NOT_ENOUGH_REPLICAS` for acks=all while the committed ISR is below
    /// the effective min ISR.
    pub fn check_produce(&self, acks: Acks) -> Result<(), ErrorCode> {
        if self.ended {
            return Err(ErrorCode::NotLeaderOrFollower);
        }
        if acks == Acks::All && self.is_under_min_isr() {
            return Err(ErrorCode::NotEnoughReplicas);
        }
        Ok(())
    }

    /// The leader appended up to `log_end_offset` (any acks). The high watermark may advance
    /// (a one-member ISR at min ISR 1 commits at once).
    pub fn on_leader_append(
        &mut self,
        log_end_offset: Offset,
        now_ms: u64,
    ) -> Result<Vec<Command>, ReplicationError> {
        if self.ended {
            return Err(ReplicationError::LeadershipEnded(self.leader_epoch));
        }
        if log_end_offset < self.log_end_offset {
            return Err(ReplicationError::LogEndOffsetBackward {
                current: self.log_end_offset,
                new: log_end_offset,
            });
        }
        self.log_end_offset = log_end_offset;
        let mut fx = Effects::default();
        self.maybe_advance_high_watermark(now_ms, &mut fx);
        self.complete_covered(&mut fx);
        Ok(fx.into_commands())
    }

    /// Parks an appended acks=all request until the high watermark reaches `required_offset`
    /// (its last offset + 1), or answers it at once.
    pub fn await_acks_all(
        &mut self,
        request: RequestId,
        required_offset: Offset,
        timeout_ms: u64,
        now_ms: u64,
    ) -> Result<Vec<Command>, ReplicationError> {
        if self.waiting.contains_key(&request) {
            return Err(ReplicationError::DuplicateRequest(request));
        }
        if required_offset > self.log_end_offset {
            return Err(ReplicationError::BeyondLogEnd {
                request,
                required: required_offset,
                log_end_offset: self.log_end_offset,
            });
        }
        let mut fx = Effects::default();
        if self.ended {
            fx.completed
                .insert(request, Err(ErrorCode::NotLeaderOrFollower));
        } else if required_offset <= self.high_watermark {
            fx.completed.insert(request, Ok(()));
        } else if self.is_under_min_isr() {
            fx.completed
                .insert(request, Err(ErrorCode::NotEnoughReplicasAfterAppend));
        } else {
            let deadline_ms = now_ms.saturating_add(timeout_ms);
            self.waiting.insert(
                request,
                WaitingProduce {
                    required_offset,
                    deadline_ms,
                },
            );
            fx.schedule_tick(deadline_ms);
        }
        Ok(fx.into_commands())
    }

    /// Acknowledges every waiting request the high watermark covers.
    pub(super) fn complete_covered(&mut self, fx: &mut Effects) {
        let high_watermark = self.high_watermark;
        self.waiting.retain(|request, waiting| {
            let covered = waiting.required_offset <= high_watermark;
            if covered {
                fx.completed.insert(*request, Ok(()));
            }
            !covered
        });
    }

    /// Fails every waiting request with `NOT_ENOUGH_REPLICAS_AFTER_APPEND` when the committed
    /// ISR is below the effective min ISR.
    pub(super) fn fail_if_under_min_isr(&mut self, fx: &mut Effects) {
        if self.is_under_min_isr() {
            self.fail_all_waiting(ErrorCode::NotEnoughReplicasAfterAppend, fx);
        }
    }

    pub(super) fn fail_all_waiting(&mut self, error: ErrorCode, fx: &mut Effects) {
        for request in std::mem::take(&mut self.waiting).into_keys() {
            fx.completed.insert(request, Err(error));
        }
    }

    /// Times out every waiting request whose deadline passed.
    pub(super) fn expire_waiting(&mut self, now_ms: u64, fx: &mut Effects) {
        self.waiting.retain(|request, waiting| {
            let expired = waiting.deadline_ms <= now_ms;
            if expired {
                fx.completed
                    .insert(*request, Err(ErrorCode::RequestTimedOut));
            }
            !expired
        });
    }
}
