//! Follower fetches on the leader, in this order (first failing check wins):
//!
//! | # | check | answer |
//! |---|---|---|
//! | 1 | leadership ended | `NOT_LEADER_OR_FOLLOWER` |
//! | 2 | `CurrentLeaderEpoch` < leader epoch / > leader epoch (KIP-320) | `FENCED_LEADER_EPOCH` / `UNKNOWN_LEADER_EPOCH` |
//! | 3 | sender is not a follower replica | `NOT_LEADER_OR_FOLLOWER` |
//! | 4 | sender's broker epoch < its registered epoch (KIP-903, KAFKA-14139) | `NOT_LEADER_OR_FOLLOWER` |
//! | 5 | `LastFetchedEpoch` ends before the fetch offset here, or is unknown here | `DivergingEpoch` |
//! | 6 | fetch offset below the log start offset or beyond the log end offset | `OFFSET_OUT_OF_RANGE` with the log start offset |
//!
//! Only a fetch that passes all six updates the follower's progress (Kafka's
//! `Replica.updateFetchStateOrThrow`, which also records the follower's log start offset for
//! the low watermark), may propose an ISR expansion, may advance the high watermark and may
//! complete a waiting DeleteRecords. Check 6 is Kafka's `LocalLog.read` refusing an offset
//! outside the log: a follower below the log start offset starts over there
//! (`AbstractFetcherThread.fetchOffsetAndTruncate`).

use super::{Effects, FetchAnswer, FetchOutcome, FollowerFetch, LeaderPartition};
use crate::epochs::EpochView;
use crate::errors::ErrorCode;

impl LeaderPartition {
    /// Handles one follower fetch. `epochs` is the leader's own epoch cache.
    pub fn on_follower_fetch(
        &mut self,
        fetch: &FollowerFetch,
        epochs: &impl EpochView,
        now_ms: u64,
    ) -> FetchOutcome {
        match self.validate_fetch(fetch, epochs) {
            Err(answer) => FetchOutcome {
                answer,
                commands: Vec::new(),
            },
            Ok(()) => {
                let mut fx = Effects::default();
                self.update_progress(fetch, now_ms);
                self.maybe_expand_isr(fetch.broker, &mut fx);
                self.maybe_advance_high_watermark(now_ms, &mut fx);
                self.complete_covered(&mut fx);
                self.complete_deletes(&mut fx);
                FetchOutcome {
                    answer: FetchAnswer::Records {
                        high_watermark: self.high_watermark,
                        log_start_offset: Some(self.log_start_offset),
                    },
                    commands: fx.into_commands(),
                }
            }
        }
    }

    fn validate_fetch(
        &self,
        fetch: &FollowerFetch,
        epochs: &impl EpochView,
    ) -> Result<(), FetchAnswer> {
        use FetchAnswer::Error;
        if self.ended {
            return Err(Error(ErrorCode::NotLeaderOrFollower));
        }
        match fetch.current_leader_epoch {
            Some(epoch) if epoch < self.leader_epoch => {
                return Err(Error(ErrorCode::FencedLeaderEpoch))
            }
            Some(epoch) if epoch > self.leader_epoch => {
                return Err(Error(ErrorCode::UnknownLeaderEpoch))
            }
            _ => {}
        }
        if !self.followers.contains_key(&fetch.broker) {
            return Err(Error(ErrorCode::NotLeaderOrFollower));
        }
        if let Some(registration) = self.brokers.get(&fetch.broker) {
            if registration.epoch > fetch.broker_epoch {
                return Err(Error(ErrorCode::NotLeaderOrFollower));
            }
        }
        if let Some(last_fetched) = fetch.last_fetched_epoch {
            let end = epochs.end_offset_for(last_fetched, self.log_end_offset);
            let diverges = match end {
                None => true,
                Some(end) => end.end_offset < fetch.fetch_offset || end.epoch < last_fetched,
            };
            if diverges {
                return Err(FetchAnswer::DivergingEpoch {
                    end,
                    high_watermark: self.high_watermark,
                });
            }
        }
        if fetch.fetch_offset < self.log_start_offset || fetch.fetch_offset > self.log_end_offset {
            return Err(FetchAnswer::OffsetOutOfRange {
                log_start_offset: Some(self.log_start_offset),
            });
        }
        Ok(())
    }

    /// Kafka's `Replica.updateFetchStateOrThrow`: caught up now if the fetch reached the
    /// leader's log end offset; caught up as of the previous fetch if it reached the leader's
    /// log end offset of that time. A fetch under a new broker epoch starts a new history: the
    /// previous incarnation's caught-up time does not carry over (stricter than Kafka).
    fn update_progress(&mut self, fetch: &FollowerFetch, now_ms: u64) {
        let leader_leo = self.log_end_offset;
        let Some(progress) = self.followers.get_mut(&fetch.broker) else {
            return;
        };
        if progress
            .broker_epoch
            .is_some_and(|epoch| epoch != fetch.broker_epoch)
        {
            progress.last_caught_up_ms = None;
            progress.last_fetch_leader_log_end_offset = None;
            progress.last_fetch_ms = None;
            progress.log_start_offset = None;
        }
        let caught_up_at = if fetch.fetch_offset >= leader_leo {
            Some(now_ms)
        } else {
            match progress.last_fetch_leader_log_end_offset {
                Some(previous_leo) if fetch.fetch_offset >= previous_leo => progress.last_fetch_ms,
                _ => None,
            }
        };
        if let Some(at) = caught_up_at {
            progress.last_caught_up_ms = Some(progress.last_caught_up_ms.map_or(at, |t| t.max(at)));
        }
        progress.log_end_offset = Some(fetch.fetch_offset);
        progress.last_fetch_leader_log_end_offset = Some(leader_leo);
        progress.last_fetch_ms = Some(now_ms);
        progress.broker_epoch = Some(fetch.broker_epoch);
        progress.log_start_offset = fetch.log_start_offset;
    }
}
