//! The high watermark (Kafka's `Partition.maybeIncrementLeaderHW` with KIP-966's strict rule):
//!
//! - while the *committed* ISR has fewer than the effective min ISR members, it does not move
//!   at all — for acks=1 data too ("Additional High Watermark advance requirement");
//! - otherwise it is the minimum log end offset over the leader, every member of the *maximal*
//!   ISR (a member whose log end offset is unknown holds it back), and every non-ISR replica
//!   that is caught up and ISR-eligible (so a replica about to join is not overtaken);
//! - it only moves forward.

use super::{Effects, LeaderPartition};
use crate::types::Offset;

impl LeaderPartition {
    /// The high watermark the rule allows now, or `None` when it may not move.
    pub(super) fn allowed_high_watermark(&self, now_ms: u64) -> Option<Offset> {
        if self.is_under_min_isr() {
            return None;
        }
        let maximal = self.maximal_isr();
        let mut high_watermark = self.log_end_offset;
        for broker in maximal.iter().filter(|b| **b != self.local) {
            let leo = self.followers.get(broker)?.log_end_offset?;
            high_watermark = high_watermark.min(leo);
        }
        for (broker, progress) in &self.followers {
            if maximal.contains(broker) {
                continue;
            }
            if self.is_caught_up(progress, now_ms) && self.registration_eligible(*broker) {
                if let Some(leo) = progress.log_end_offset {
                    high_watermark = high_watermark.min(leo);
                }
            }
        }
        Some(high_watermark)
    }

    /// Moves the high watermark forward when the rule allows it.
    pub(super) fn maybe_advance_high_watermark(&mut self, now_ms: u64, fx: &mut Effects) {
        if self.ended {
            return;
        }
        if let Some(allowed) = self.allowed_high_watermark(now_ms) {
            if allowed > self.high_watermark {
                self.high_watermark = allowed;
                fx.high_watermark = Some(allowed);
            }
        }
        assert!(self.high_watermark <= self.log_end_offset);
    }
}
