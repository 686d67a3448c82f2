//! The leader epoch cache as replication needs it: epoch → start offset, and Kafka's
//! `LeaderEpochFileCache.endOffsetFor` rule on top.
//!
//! The log owns the real cache (`leader-epoch-checkpoint` in keel-log). This crate reads it
//! through [`EpochView`], so the shell can pass the log's cache without copying it;
//! [`EpochCache`] is a small in-memory implementation for tests and the simulator.

use std::collections::BTreeMap;

use crate::types::{EpochEndOffset, LeaderEpoch, Offset};

/// Read access to a log's leader epoch cache.
pub trait EpochView {
    /// The start offsets by epoch, ascending.
    fn start_offsets(&self) -> &BTreeMap<LeaderEpoch, Offset>;

    /// The latest epoch in the log, if any.
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.start_offsets().keys().next_back().copied()
    }

    /// Kafka's `endOffsetFor(requested, logEndOffset)`:
    /// - the latest epoch ends at the log end offset;
    /// - an epoch with a later one ends where the first later epoch starts, and is answered
    ///   as the largest known epoch ≤ it;
    /// - an epoch older than every known one is answered as itself, ending where the first
    ///   known epoch starts;
    /// - an epoch newer than every known one, or an empty cache: `None` (Kafka's UNDEFINED).
    fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<EpochEndOffset> {
        let starts = self.start_offsets();
        if self.latest_epoch() == Some(requested) {
            return Some(EpochEndOffset {
                epoch: requested,
                end_offset: log_end_offset,
            });
        }
        let (_, &higher_start) = starts.range(requested..).find(|(e, _)| **e > requested)?;
        let floor = starts.range(..=requested).next_back().map(|(e, _)| *e);
        Some(EpochEndOffset {
            epoch: floor.unwrap_or(requested),
            end_offset: higher_start,
        })
    }
}

/// An in-memory leader epoch cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochCache {
    starts: BTreeMap<LeaderEpoch, Offset>,
}

impl EpochCache {
    /// An empty cache.
    pub fn new() -> Self {
        EpochCache::default()
    }

    /// A cache from (epoch, start offset) pairs.
    pub fn from_entries(entries: impl IntoIterator<Item = (LeaderEpoch, Offset)>) -> Self {
        let mut cache = EpochCache::new();
        for (epoch, start) in entries {
            cache.assign(epoch, start);
        }
        cache
    }

    /// Records that `epoch` starts at `start` (Kafka's `assign`): ignored unless the epoch is
    /// newer than the latest and does not start before it; an epoch in the cache stays.
    pub fn assign(&mut self, epoch: LeaderEpoch, start: Offset) {
        match self.starts.iter().next_back() {
            Some((&latest, &latest_start)) if epoch <= latest || start < latest_start => {}
            _ => {
                self.starts.insert(epoch, start);
            }
        }
    }

    /// Removes every epoch that starts at or after `end` (the log was truncated to `end`).
    pub fn truncate_from_end(&mut self, end: Offset) {
        self.starts.retain(|_, start| *start < end);
    }
}

impl EpochView for EpochCache {
    fn start_offsets(&self) -> &BTreeMap<LeaderEpoch, Offset> {
        &self.starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> EpochCache {
        // epoch 2 covers [0, 10), epoch 4 covers [10, 25), epoch 5 from 25 on.
        EpochCache::from_entries([
            (LeaderEpoch(2), Offset(0)),
            (LeaderEpoch(4), Offset(10)),
            (LeaderEpoch(5), Offset(25)),
        ])
    }

    fn answer(epoch: i32, end: i64) -> Option<EpochEndOffset> {
        Some(EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(end),
        })
    }

    #[test]
    fn end_offset_for_follows_kafka_table() {
        // Kafka LeaderEpochFileCache.endOffsetFor: latest → LEO, known → next start,
        // between → floor epoch, older than all → itself, newer than all → undefined.
        let c = cache();
        let leo = Offset(30);
        let table: &[(i32, Option<EpochEndOffset>)] = &[
            (5, answer(5, 30)),
            (4, answer(4, 25)),
            (2, answer(2, 10)),
            (3, answer(2, 10)),
            (1, answer(1, 0)),
            (6, None),
        ];
        for (requested, expected) in table {
            assert_eq!(
                c.end_offset_for(LeaderEpoch(*requested), leo),
                *expected,
                "epoch {requested}"
            );
        }
        assert_eq!(EpochCache::new().end_offset_for(LeaderEpoch(1), leo), None);
    }

    #[test]
    fn assign_and_truncate() {
        // Kafka's cache only grows forward and drops epochs starting at or after a truncation.
        let mut c = cache();
        c.assign(LeaderEpoch(3), Offset(40)); // older epoch: ignored
        c.assign(LeaderEpoch(6), Offset(20)); // starts before the latest: ignored
        assert_eq!(c.latest_epoch(), Some(LeaderEpoch(5)));
        c.truncate_from_end(Offset(12));
        assert_eq!(c.latest_epoch(), Some(LeaderEpoch(4)));
        c.assign(LeaderEpoch(6), Offset(12));
        assert_eq!(c.latest_epoch(), Some(LeaderEpoch(6)));
    }
}
