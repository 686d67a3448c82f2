//! [`LeaderEpochCache`]: the in-memory list of (leader epoch, start offset) pairs of one partition,
//! with Kafka's `LeaderEpochFileCache` rules. Pure: the log persists it to
//! `leader-epoch-checkpoint` whenever a method reports a change.

use crate::checkpoint::EpochEntry;
use crate::types::{LeaderEpoch, Offset};

/// Epoch → start offset, strictly increasing in both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// A cache holding `entries` (which must be strictly increasing in epoch, non-decreasing in
    /// start offset, as [`crate::checkpoint::read_epoch_checkpoint`] guarantees).
    pub fn from_entries(entries: Vec<EpochEntry>) -> LeaderEpochCache {
        let cache = LeaderEpochCache { entries };
        cache.check_invariants();
        cache
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`. As in Kafka, nothing changes when `epoch`
    /// is already the latest epoch with an earlier or equal start; otherwise entries with an epoch
    /// `>= epoch` or a start offset `>= start_offset` are removed first. Returns whether the
    /// cache changed.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        assert!(epoch.0 >= 0, "assign of a negative epoch");
        assert!(start_offset.0 >= 0, "assign of a negative start offset");
        if let Some(latest) = self.latest() {
            if latest.epoch == epoch && latest.start_offset <= start_offset {
                return false;
            }
        }
        self.entries
            .retain(|e| e.epoch < epoch && e.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.check_invariants();
        true
    }

    /// Removes entries whose start offset is `>= end_offset` (after the log was truncated to
    /// `end_offset`). Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        before != self.entries.len()
    }

    /// Removes entries that start at or before `start_offset`, keeping the newest of them with
    /// its start moved to `start_offset` (after the log start offset advanced). Returns whether
    /// the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> bool {
        let removed = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(newest_removed) = removed.checked_sub(1).map(|i| self.entries[i]) else {
            return false;
        };
        if removed == 1 && newest_removed.start_offset == start_offset {
            return false;
        }
        self.entries.drain(..removed);
        self.entries.insert(
            0,
            EpochEntry {
                epoch: newest_removed.epoch,
                start_offset,
            },
        );
        self.check_invariants();
        true
    }

    /// Removes everything. Returns whether the cache changed.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// Kafka's `endOffsetFor` (OffsetForLeaderEpoch): for the latest epoch, the log end offset;
    /// otherwise the largest known epoch `<= requested` paired with the start offset of the next
    /// higher epoch. When `requested` is below every known epoch, Kafka answers with the requested
    /// epoch and the start offset of the earliest known epoch (the follower's data before it is
    /// gone anyway); so does this. `None` (Kafka's UNDEFINED) when the cache is empty or
    /// `requested` is above the latest epoch.
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        let latest = self.latest()?;
        if requested == latest.epoch {
            return Some((requested, log_end_offset));
        }
        let higher_index = self.entries.partition_point(|e| e.epoch <= requested);
        let higher = self.entries.get(higher_index)?;
        match higher_index.checked_sub(1).map(|i| self.entries[i]) {
            Some(floor) => Some((floor.epoch, higher.start_offset)),
            None => Some((requested, higher.start_offset)),
        }
    }

    fn check_invariants(&self) {
        for pair in self.entries.windows(2) {
            assert!(pair[0].epoch < pair[1].epoch, "epochs must increase");
            assert!(
                pair[0].start_offset <= pair[1].start_offset,
                "epoch start offsets must not decrease"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(pairs: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::default();
        for &(epoch, start) in pairs {
            cache.assign(LeaderEpoch(epoch), Offset(start));
        }
        cache
    }

    fn pairs(cache: &LeaderEpochCache) -> Vec<(i32, i64)> {
        cache
            .entries()
            .iter()
            .map(|e| (e.epoch.0, e.start_offset.0))
            .collect()
    }

    // Re-assigning the latest epoch at a later offset changes nothing (every append does it).
    #[test]
    fn assign_same_epoch_is_a_no_op() {
        let mut c = cache(&[(1, 0)]);
        assert!(!c.assign(LeaderEpoch(1), Offset(10)));
        assert_eq!(pairs(&c), vec![(1, 0)]);
    }

    // A new entry removes entries it contradicts (Kafka's maybeTruncateNonMonotonicEntries).
    #[test]
    fn assign_removes_conflicting_entries() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.assign(LeaderEpoch(4), Offset(15)));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 10), (4, 15)]);
        assert!(c.assign(LeaderEpoch(6), Offset(12)));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 10), (6, 12)]);
    }

    // OffsetForLeaderEpoch table: latest epoch → LEO; middle epochs → next epoch's start; gaps
    // → floor epoch; above latest / empty → undefined; below earliest → requested epoch and the
    // earliest start (Kafka's LeaderEpochFileCache.endOffsetFor).
    #[test]
    fn end_offset_for_epoch_table() {
        let c = cache(&[(1, 0), (3, 10), (5, 20)]);
        let leo = Offset(30);
        let cases = [
            (5, Some((5, 30))),
            (3, Some((3, 20))),
            (4, Some((3, 20))),
            (1, Some((1, 10))),
            (2, Some((1, 10))),
            (0, Some((0, 0))),
            (6, None),
        ];
        for (requested, expected) in cases {
            let got = c
                .end_offset_for(LeaderEpoch(requested), leo)
                .map(|(e, o)| (e.0, o.0));
            assert_eq!(got, expected, "requested epoch {requested}");
        }
        assert_eq!(
            LeaderEpochCache::default().end_offset_for(LeaderEpoch(0), leo),
            None
        );
    }

    // Truncating from the end drops epochs that start at or after the new log end offset.
    #[test]
    fn truncate_from_end_drops_later_epochs() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.truncate_from_end(Offset(10)));
        assert_eq!(pairs(&c), vec![(1, 0)]);
        assert!(!c.truncate_from_end(Offset(10)));
    }

    // Truncating from the start keeps the epoch covering the new start, moved to it.
    #[test]
    fn truncate_from_start_keeps_covering_epoch() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(c.truncate_from_start(Offset(15)));
        assert_eq!(pairs(&c), vec![(3, 15), (5, 20)]);
        assert!(!c.truncate_from_start(Offset(15)));
        assert!(!c.truncate_from_start(Offset(2)));
    }
}
