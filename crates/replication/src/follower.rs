//! The follower side of one partition: what to fetch, and what to do with the leader's answer.
//!
//! - The fetch carries the log end offset as `FetchOffset`, the latest epoch in the log as
//!   `LastFetchedEpoch`, the leader epoch from metadata as `CurrentLeaderEpoch`, and the
//!   broker epoch (KIP-903).
//! - Records → the shell appends them as follower and reports the new log end offset
//!   ([`FollowerPartition::on_appended`]); the follower high watermark is
//!   min(leader high watermark, log end offset).
//! - The leader's log start offset in an answer → the follower's own log start offset moves up
//!   to it (never past its high watermark), as Kafka's `ReplicaFetcherThread
//!   .processPartitionData` does with `maybeIncrementLogStartOffset(leaderLogStartOffset)`: what
//!   DeleteRecords removed on the leader goes from every replica.
//! - `OFFSET_OUT_OF_RANGE` with the leader's log start offset above the follower's log end
//!   offset → the follower's log is wholly below what the leader keeps: start over, empty, at the
//!   leader's log start offset (Kafka's `AbstractFetcherThread.fetchOffsetAndTruncate`:
//!   `truncateFullyAndStartAt(leaderStartOffset)`); otherwise back off and retry.
//! - `DivergingEpoch` → truncate (never halt, KAFKA-3861), with Kafka's rule
//!   (`AbstractFetcherThread.getOffsetTruncationState`): if the follower has the leader's
//!   epoch, to the smaller of the leader's and its own end offset for it; if it only has an
//!   older epoch, to its own end offset for that one (the next fetch continues the search);
//!   if it has none, to the leader's end offset; if the leader knew no epoch, to its own high
//!   watermark. Never past its own log end offset.
//! - `FENCED_LEADER_EPOCH` → stop fetching until metadata names a newer leader epoch; any other
//!   error (`NOT_LEADER_OR_FOLLOWER` and `UNKNOWN_LEADER_EPOCH` included: the leader may not
//!   have applied the metadata yet) → back off `replica.fetch.backoff.ms` and retry.

use crate::config::ReplicationConfig;
use crate::epochs::EpochView;
use crate::errors::{ErrorCode, ReplicationError};
use crate::leader::FetchAnswer;
use crate::types::{BrokerEpoch, BrokerId, EpochEndOffset, LeaderEpoch, Offset};

/// What the follower's IO shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowerCommand {
    /// Truncate the log (and its epoch cache) to end at this offset, before the next fetch.
    Truncate {
        /// The new log end offset.
        to: Offset,
    },
    /// Delete the whole log and start it over, empty, at this offset (log start offset = log
    /// end offset = high watermark = `offset`), before the next fetch.
    TruncateFullyAndStartAt {
        /// The new log start and end offset.
        offset: Offset,
    },
    /// Move the log start offset up to this offset (a no-op if it is there already) and
    /// delete the segments wholly below it.
    IncrementLogStartOffset {
        /// The leader's log start offset.
        to: Offset,
    },
    /// Append the records of the fetch response as follower, then call
    /// [`FollowerPartition::on_appended`].
    AppendRecords,
    /// The follower high watermark changed.
    HighWatermarkUpdated {
        /// The new follower high watermark.
        high_watermark: Offset,
    },
    /// Stop fetching until [`FollowerPartition::on_leader_change`] brings a newer leader epoch.
    AwaitMetadata {
        /// The error that stopped it.
        error: ErrorCode,
    },
    /// Fetch again (call [`FollowerPartition::fetch_request`]) at this time.
    ScheduleFetch {
        /// When.
        at_ms: u64,
    },
    /// Metadata made this broker the leader: build a leader state.
    BecomeLeader {
        /// The new leader epoch.
        leader_epoch: LeaderEpoch,
    },
}

/// The Fetch request fields for this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// Send it to this broker.
    pub leader: BrokerId,
    /// `ReplicaState.ReplicaEpoch`.
    pub broker_epoch: BrokerEpoch,
    /// `CurrentLeaderEpoch`.
    pub current_leader_epoch: LeaderEpoch,
    /// `FetchOffset` = the log end offset.
    pub fetch_offset: Offset,
    /// `LastFetchedEpoch` = the latest epoch in the log.
    pub last_fetched_epoch: Option<LeaderEpoch>,
}

/// Where the follower's fetching stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FetchState {
    /// Ready to fetch.
    Fetching,
    /// Records are being appended; the leader's high watermark and log start offset apply once
    /// they are.
    Appending {
        /// The leader's high watermark in the response.
        leader_high_watermark: Offset,
        /// The leader's log start offset in the response.
        leader_log_start_offset: Option<Offset>,
    },
    /// Waiting after an error.
    BackingOff {
        /// Fetch again from this time.
        until_ms: u64,
    },
    /// Waiting for metadata (no leader, or the leader fenced this fetch).
    AwaitingMetadata,
}

/// The follower's replication state for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowerPartition {
    local: BrokerId,
    local_broker_epoch: BrokerEpoch,
    config: ReplicationConfig,
    leader: Option<BrokerId>,
    leader_epoch: LeaderEpoch,
    log_end_offset: Offset,
    high_watermark: Offset,
    /// The largest leader log start offset applied here (so each move is asked for once).
    applied_log_start_offset: Offset,
    state: FetchState,
}

impl FollowerPartition {
    /// Starts following `leader` in `leader_epoch` with the local log's offsets.
    pub fn new(
        local: BrokerId,
        local_broker_epoch: BrokerEpoch,
        leader: Option<BrokerId>,
        leader_epoch: LeaderEpoch,
        log_end_offset: Offset,
        high_watermark: Offset,
        config: ReplicationConfig,
    ) -> Result<Self, ReplicationError> {
        if high_watermark > log_end_offset || high_watermark.0 < 0 {
            return Err(ReplicationError::OffsetsOutOfOrder {
                what: "0 ≤ high watermark ≤ log end offset",
            });
        }
        let mut follower = FollowerPartition {
            local,
            local_broker_epoch,
            config,
            leader: None,
            leader_epoch,
            log_end_offset,
            high_watermark,
            applied_log_start_offset: Offset(0),
            state: FetchState::AwaitingMetadata,
        };
        follower.set_leader(leader);
        Ok(follower)
    }

    fn set_leader(&mut self, leader: Option<BrokerId>) {
        self.leader = leader.filter(|l| *l != self.local);
        self.state = if self.leader.is_some() {
            FetchState::Fetching
        } else {
            FetchState::AwaitingMetadata
        };
    }

    /// The leader being followed.
    pub fn leader(&self) -> Option<BrokerId> {
        self.leader
    }

    /// The leader epoch from metadata.
    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// The local log end offset as this state knows it.
    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// The follower high watermark.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// Where fetching stands.
    pub fn state(&self) -> FetchState {
        self.state
    }

    /// The fetch to send now, if any. `epochs` is the local log's epoch cache.
    pub fn fetch_request(&mut self, epochs: &impl EpochView, now_ms: u64) -> Option<FetchRequest> {
        if let FetchState::BackingOff { until_ms } = self.state {
            if now_ms >= until_ms {
                self.state = FetchState::Fetching;
            }
        }
        match (self.state, self.leader) {
            (FetchState::Fetching, Some(leader)) => Some(FetchRequest {
                leader,
                broker_epoch: self.local_broker_epoch,
                current_leader_epoch: self.leader_epoch,
                fetch_offset: self.log_end_offset,
                last_fetched_epoch: epochs.latest_epoch(),
            }),
            _ => None,
        }
    }

    /// Handles the answer to `request`. `has_records` says whether the answer carried records.
    /// An answer to a request made under another leader epoch or from another log end offset
    /// is ignored.
    pub fn on_fetch_response(
        &mut self,
        request: &FetchRequest,
        answer: &FetchAnswer,
        has_records: bool,
        epochs: &impl EpochView,
        now_ms: u64,
    ) -> Vec<FollowerCommand> {
        let current = self.state == FetchState::Fetching
            && Some(request.leader) == self.leader
            && request.current_leader_epoch == self.leader_epoch
            && request.fetch_offset == self.log_end_offset;
        if !current {
            return Vec::new();
        }
        match *answer {
            FetchAnswer::Records {
                high_watermark,
                log_start_offset,
            } if has_records => {
                self.state = FetchState::Appending {
                    leader_high_watermark: high_watermark,
                    leader_log_start_offset: log_start_offset,
                };
                vec![FollowerCommand::AppendRecords]
            }
            FetchAnswer::Records {
                high_watermark,
                log_start_offset,
            } => self.apply_leader_offsets(high_watermark, log_start_offset),
            FetchAnswer::DivergingEpoch { end, .. } => self.truncate(end, epochs, now_ms),
            FetchAnswer::OffsetOutOfRange { log_start_offset } => {
                self.on_out_of_range(log_start_offset, now_ms)
            }
            FetchAnswer::Error(error) => self.on_error(error, now_ms),
        }
    }

    /// The records of the last response were appended; the log now ends at `log_end_offset`.
    pub fn on_appended(
        &mut self,
        log_end_offset: Offset,
    ) -> Result<Vec<FollowerCommand>, ReplicationError> {
        let FetchState::Appending {
            leader_high_watermark,
            leader_log_start_offset,
        } = self.state
        else {
            return Ok(Vec::new());
        };
        if log_end_offset < self.log_end_offset {
            return Err(ReplicationError::LogEndOffsetBackward {
                current: self.log_end_offset,
                new: log_end_offset,
            });
        }
        self.log_end_offset = log_end_offset;
        self.state = FetchState::Fetching;
        Ok(self.apply_leader_offsets(leader_high_watermark, leader_log_start_offset))
    }

    /// The fetch failed without an answer (connection lost, timeout): back off.
    pub fn on_fetch_failed(&mut self, now_ms: u64) -> Vec<FollowerCommand> {
        if self.state != FetchState::Fetching {
            return Vec::new();
        }
        self.back_off(now_ms)
    }

    /// Metadata names a leader for a newer leader epoch (older or equal epochs are ignored).
    pub fn on_leader_change(
        &mut self,
        leader: Option<BrokerId>,
        leader_epoch: LeaderEpoch,
    ) -> Vec<FollowerCommand> {
        if leader_epoch <= self.leader_epoch {
            return Vec::new();
        }
        self.leader_epoch = leader_epoch;
        self.set_leader(leader);
        if leader == Some(self.local) {
            vec![FollowerCommand::BecomeLeader { leader_epoch }]
        } else {
            Vec::new()
        }
    }

    /// The leader's high watermark, then its log start offset: moved up to only when it is at
    /// or below the new follower high watermark (Kafka's `maybeIncrementLogStartOffset` refuses
    /// a start past the high watermark; a later answer brings it again).
    fn apply_leader_offsets(
        &mut self,
        leader_high_watermark: Offset,
        leader_log_start_offset: Option<Offset>,
    ) -> Vec<FollowerCommand> {
        let mut commands = self.update_high_watermark(leader_high_watermark);
        if let Some(start) = leader_log_start_offset {
            if start > self.applied_log_start_offset && start <= self.high_watermark {
                self.applied_log_start_offset = start;
                commands.push(FollowerCommand::IncrementLogStartOffset { to: start });
            }
        }
        commands
    }

    /// `OFFSET_OUT_OF_RANGE`: start over at the leader's log start offset when the whole local
    /// log is below it; otherwise (a fetch offset beyond the leader's log end) back off.
    fn on_out_of_range(
        &mut self,
        leader_log_start_offset: Option<Offset>,
        now_ms: u64,
    ) -> Vec<FollowerCommand> {
        let Some(start) = leader_log_start_offset.filter(|s| *s > self.log_end_offset) else {
            return self.back_off(now_ms);
        };
        self.log_end_offset = start;
        self.applied_log_start_offset = start;
        let mut commands = vec![FollowerCommand::TruncateFullyAndStartAt { offset: start }];
        if self.high_watermark != start {
            self.high_watermark = start;
            commands.push(FollowerCommand::HighWatermarkUpdated {
                high_watermark: start,
            });
        }
        commands
    }

    fn update_high_watermark(&mut self, leader_high_watermark: Offset) -> Vec<FollowerCommand> {
        let high_watermark = leader_high_watermark
            .min(self.log_end_offset)
            .max(Offset(0));
        if high_watermark == self.high_watermark {
            return Vec::new();
        }
        self.high_watermark = high_watermark;
        vec![FollowerCommand::HighWatermarkUpdated { high_watermark }]
    }

    /// The offset to truncate to for a diverging answer (module docs).
    pub fn truncation_offset(
        &self,
        leader_end: Option<EpochEndOffset>,
        epochs: &impl EpochView,
    ) -> Offset {
        let leo = self.log_end_offset;
        let to = match leader_end {
            None => self.high_watermark,
            Some(leader) => match epochs.end_offset_for(leader.epoch, leo) {
                Some(own) if own.epoch == leader.epoch => leader.end_offset.min(own.end_offset),
                Some(own) => own.end_offset,
                None => leader.end_offset,
            },
        };
        to.min(leo).max(Offset(0))
    }

    fn truncate(
        &mut self,
        leader_end: Option<EpochEndOffset>,
        epochs: &impl EpochView,
        now_ms: u64,
    ) -> Vec<FollowerCommand> {
        let to = self.truncation_offset(leader_end, epochs);
        if to == self.log_end_offset {
            // No record to cut, but the leader still sees divergence: this replica's epoch
            // cache ends with an epoch it assigned as a leader that never appended (it starts at
            // the log end). Truncating at the log end drops it (Kafka's UnifiedLog.truncateTo);
            // the back-off keeps a disagreement truncation cannot fix from spinning.
            let mut commands = vec![FollowerCommand::Truncate { to }];
            commands.extend(self.back_off(now_ms));
            return commands;
        }
        self.log_end_offset = to;
        let mut commands = vec![FollowerCommand::Truncate { to }];
        if self.high_watermark > to {
            self.high_watermark = to;
            commands.push(FollowerCommand::HighWatermarkUpdated { high_watermark: to });
        }
        commands
    }

    fn on_error(&mut self, error: ErrorCode, now_ms: u64) -> Vec<FollowerCommand> {
        match error {
            // Our leader epoch is stale: only new metadata helps (Kafka's onPartitionFenced).
            // NOT_LEADER_OR_FOLLOWER and UNKNOWN_LEADER_EPOCH mean the leader has not applied
            // the metadata we have yet: retry after the back-off, as Kafka's fetcher does.
            ErrorCode::FencedLeaderEpoch => {
                self.state = FetchState::AwaitingMetadata;
                vec![FollowerCommand::AwaitMetadata { error }]
            }
            _ => self.back_off(now_ms),
        }
    }

    fn back_off(&mut self, now_ms: u64) -> Vec<FollowerCommand> {
        let until_ms = now_ms.saturating_add(self.config.replica_fetch_backoff_ms);
        self.state = FetchState::BackingOff { until_ms };
        vec![FollowerCommand::ScheduleFetch { at_ms: until_ms }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epochs::EpochCache;

    fn e(epoch: i32) -> LeaderEpoch {
        LeaderEpoch(epoch)
    }

    fn follower(leo: i64, hwm: i64) -> FollowerPartition {
        FollowerPartition::new(
            BrokerId(1),
            BrokerEpoch(101),
            Some(BrokerId(0)),
            e(5),
            Offset(leo),
            Offset(hwm),
            ReplicationConfig::default(),
        )
        .unwrap()
    }

    fn end(epoch: i32, offset: i64) -> Option<EpochEndOffset> {
        Some(EpochEndOffset {
            epoch: e(epoch),
            end_offset: Offset(offset),
        })
    }

    #[test]
    fn fetch_request_carries_leo_last_epoch_and_broker_epoch() {
        // Issue 4 / Fetch v15: FetchOffset = LEO, LastFetchedEpoch, CurrentLeaderEpoch, ReplicaEpoch.
        let mut f = follower(15, 3);
        let cache = EpochCache::from_entries([(e(1), Offset(0)), (e(2), Offset(10))]);
        assert_eq!(
            f.fetch_request(&cache, 0),
            Some(FetchRequest {
                leader: BrokerId(0),
                broker_epoch: BrokerEpoch(101),
                current_leader_epoch: e(5),
                fetch_offset: Offset(15),
                last_fetched_epoch: Some(e(2)),
            })
        );
    }

    #[test]
    fn records_are_appended_then_hwm_is_min_of_leader_hwm_and_leo() {
        // Kafka follower: HWM = min(leader HWM, own LEO).
        let mut f = follower(10, 3);
        let cache = EpochCache::from_entries([(e(5), Offset(0))]);
        let req = f.fetch_request(&cache, 0).unwrap();
        let answer = FetchAnswer::Records {
            high_watermark: Offset(30),
            log_start_offset: Some(Offset(0)),
        };
        assert_eq!(
            f.on_fetch_response(&req, &answer, true, &cache, 1),
            vec![FollowerCommand::AppendRecords]
        );
        assert_eq!(f.fetch_request(&cache, 1), None, "no fetch while appending");
        assert_eq!(
            f.on_appended(Offset(20)).unwrap(),
            vec![FollowerCommand::HighWatermarkUpdated {
                high_watermark: Offset(20)
            }]
        );
        assert_eq!(
            (f.log_end_offset(), f.high_watermark()),
            (Offset(20), Offset(20))
        );
        // An answer to the old request (fetch offset 10) is stale now.
        assert_eq!(f.on_fetch_response(&req, &answer, true, &cache, 2), vec![]);
    }

    // Found by issue 19's real-process test: a replica that led epoch 1 without appending has
    // epoch 1 starting at its log end; the new leader (epoch 2) answers every fetch with a
    // divergence whose end is that log end. Backing off without truncating kept the stale epoch
    // forever (the follower never caught up and fell out of the ISR); truncating at the log end
    // drops it (Kafka's UnifiedLog.truncateTo), and the next fetch carries epoch 0.
    #[test]
    fn divergence_at_the_log_end_truncates_the_empty_epoch() {
        let mut f = follower(3000, 3000);
        let cache = EpochCache::from_entries([(e(0), Offset(0)), (e(1), Offset(3000))]);
        let req = f.fetch_request(&cache, 0).unwrap();
        assert_eq!(req.last_fetched_epoch, Some(e(1)));
        let answer = FetchAnswer::DivergingEpoch {
            end: end(0, 3000),
            high_watermark: Offset(3000),
        };
        let commands = f.on_fetch_response(&req, &answer, false, &cache, 10);
        assert_eq!(
            commands,
            vec![
                FollowerCommand::Truncate { to: Offset(3000) },
                FollowerCommand::ScheduleFetch {
                    at_ms: 10 + ReplicationConfig::default().replica_fetch_backoff_ms
                },
            ]
        );
        // The shell truncated the epoch cache at the log end: the next fetch is in epoch 0.
        let truncated = EpochCache::from_entries([(e(0), Offset(0))]);
        let next = f.fetch_request(&truncated, 10_000).unwrap();
        assert_eq!(next.last_fetched_epoch, Some(e(0)));
        assert_eq!(next.fetch_offset, Offset(3000));
    }

    #[test]
    fn truncation_rule_table() {
        // AbstractFetcherThread.getOffsetTruncationState, reference rule from the brief.
        // Follower log: epoch 1 [0,10), epoch 3 [10,15); LEO 15, HWM 4.
        let cache = EpochCache::from_entries([(e(1), Offset(0)), (e(3), Offset(10))]);
        let rows: &[(&str, Option<EpochEndOffset>, i64)] = &[
            ("same epoch, leader ends earlier", end(3, 12), 12),
            ("same epoch, follower ends earlier", end(1, 12), 10),
            (
                "leader epoch unknown here: own floor epoch end",
                end(2, 13),
                10,
            ),
            ("older than every epoch here", end(0, 7), 0),
            ("leader knows no epoch: own HWM", None, 4),
            ("never past own LEO", end(3, 40), 15),
        ];
        let f = follower(15, 4);
        for (name, leader_end, to) in rows {
            assert_eq!(
                f.truncation_offset(*leader_end, &cache),
                Offset(*to),
                "{name}"
            );
        }
    }

    #[test]
    fn follower_ahead_of_new_leader_truncates_and_converges() {
        // KAFKA-3861 / KIP-966 unclean election: the new leader (0) lacks the follower's tail;
        // the follower truncates to the divergence point and fetches on — it never halts.
        use crate::leader::{FollowerFetch, LeaderInit, LeaderPartition, PartitionMetadata};
        use crate::types::{BrokerRegistration, PartitionEpoch};
        // Follower 1: epoch 1 [0,10), epoch 2 [10,15) (written while it led alone).
        let mut follower_cache = EpochCache::from_entries([(e(1), Offset(0)), (e(2), Offset(10))]);
        // New leader 0 elected uncleanly in epoch 3: it had epoch 1 up to 8 only.
        let leader_cache = EpochCache::from_entries([(e(1), Offset(0)), (e(3), Offset(8))]);
        let mut leader = LeaderPartition::new(
            LeaderInit {
                local: BrokerId(0),
                local_broker_epoch: BrokerEpoch(100),
                metadata: PartitionMetadata {
                    leader: Some(BrokerId(0)),
                    leader_epoch: e(3),
                    partition_epoch: PartitionEpoch(7),
                    replicas: vec![BrokerId(0), BrokerId(1)],
                    isr: [BrokerId(0)].into(),
                },
                log_start_offset: Offset(0),
                log_end_offset: Offset(12),
                leader_epoch_start_offset: Offset(8),
                high_watermark: Offset(8),
                brokers: [(BrokerId(1), BrokerRegistration::live(BrokerEpoch(101)))].into(),
                config: ReplicationConfig::default(),
            },
            0,
        )
        .unwrap();
        let mut f = FollowerPartition::new(
            BrokerId(1),
            BrokerEpoch(101),
            Some(BrokerId(0)),
            e(3),
            Offset(15),
            Offset(8),
            ReplicationConfig::default(),
        )
        .unwrap();
        let as_fetch = |r: &FetchRequest| FollowerFetch {
            broker: BrokerId(1),
            broker_epoch: r.broker_epoch,
            current_leader_epoch: Some(r.current_leader_epoch),
            fetch_offset: r.fetch_offset,
            last_fetched_epoch: r.last_fetched_epoch,
            log_start_offset: Some(Offset(0)),
        };
        let req = f.fetch_request(&follower_cache, 1).unwrap();
        let out = leader.on_follower_fetch(&as_fetch(&req), &leader_cache, 1);
        assert_eq!(
            out.answer,
            FetchAnswer::DivergingEpoch {
                end: end(1, 8),
                high_watermark: Offset(8)
            }
        );
        let cmds = f.on_fetch_response(&req, &out.answer, false, &follower_cache, 1);
        assert_eq!(cmds, vec![FollowerCommand::Truncate { to: Offset(8) }]);
        follower_cache.truncate_from_end(Offset(8));
        // Next fetch from 8 in epoch 1: no divergence; it joins the ISR.
        let req = f.fetch_request(&follower_cache, 2).unwrap();
        assert_eq!(
            (req.fetch_offset, req.last_fetched_epoch),
            (Offset(8), Some(e(1)))
        );
        let out = leader.on_follower_fetch(&as_fetch(&req), &leader_cache, 2);
        assert_eq!(
            out.answer,
            FetchAnswer::Records {
                high_watermark: Offset(8),
                log_start_offset: Some(Offset(0)),
            }
        );
        assert_eq!(
            out.commands.len(),
            1,
            "expansion proposed: {:?}",
            out.commands
        );
    }

    #[test]
    fn fetch_error_table() {
        // Issue 4: fenced → wait for metadata; others back off and retry (a leader that has
        // not applied the new metadata yet answers NOT_LEADER_OR_FOLLOWER or
        // UNKNOWN_LEADER_EPOCH; waiting for newer metadata would stall the follower forever).
        let rows: &[(ErrorCode, bool)] = &[
            (ErrorCode::FencedLeaderEpoch, true),
            (ErrorCode::NotLeaderOrFollower, false),
            (ErrorCode::UnknownLeaderEpoch, false),
            (ErrorCode::UnknownTopicOrPartition, false),
            (ErrorCode::Other(13), false),
        ];
        let cache = EpochCache::from_entries([(e(5), Offset(0))]);
        for (error, await_metadata) in rows {
            let mut f = follower(10, 3);
            let req = f.fetch_request(&cache, 0).unwrap();
            let cmds = f.on_fetch_response(&req, &FetchAnswer::Error(*error), false, &cache, 50);
            if *await_metadata {
                assert_eq!(cmds, vec![FollowerCommand::AwaitMetadata { error: *error }]);
                assert_eq!(f.state(), FetchState::AwaitingMetadata);
                assert_eq!(f.fetch_request(&cache, 1_000_000), None);
            } else {
                assert_eq!(cmds, vec![FollowerCommand::ScheduleFetch { at_ms: 1_050 }]);
                assert_eq!(f.fetch_request(&cache, 1_049), None);
                assert!(f.fetch_request(&cache, 1_050).is_some());
            }
        }
    }

    #[test]
    fn the_leaders_log_start_offset_moves_the_followers() {
        // ReplicaFetcherThread.processPartitionData: after appending, the follower's high
        // watermark, then maybeIncrementLogStartOffset(leader's log start offset) — asked for
        // once per move, never past the follower's own high watermark.
        let cache = EpochCache::from_entries([(e(5), Offset(0))]);
        let mut f = follower(10, 3);
        let records = |hwm: i64, start: Option<i64>| FetchAnswer::Records {
            high_watermark: Offset(hwm),
            log_start_offset: start.map(Offset),
        };
        let req = f.fetch_request(&cache, 0).unwrap();
        assert_eq!(
            f.on_fetch_response(&req, &records(30, Some(7)), true, &cache, 1),
            vec![FollowerCommand::AppendRecords]
        );
        assert_eq!(
            f.on_appended(Offset(20)).unwrap(),
            vec![
                FollowerCommand::HighWatermarkUpdated {
                    high_watermark: Offset(20)
                },
                FollowerCommand::IncrementLogStartOffset { to: Offset(7) },
            ]
        );
        // The same start again: nothing to do; no records, a newer start: moved.
        let req = f.fetch_request(&cache, 2).unwrap();
        assert_eq!(
            f.on_fetch_response(&req, &records(20, Some(7)), false, &cache, 2),
            vec![]
        );
        assert_eq!(
            f.on_fetch_response(&req, &records(20, Some(12)), false, &cache, 3),
            vec![FollowerCommand::IncrementLogStartOffset { to: Offset(12) }]
        );
        // A start past the follower's high watermark waits (Kafka refuses it); -1 is nothing.
        let mut f = follower(10, 3);
        let req = f.fetch_request(&cache, 0).unwrap();
        assert_eq!(
            f.on_fetch_response(&req, &records(5, Some(8)), false, &cache, 1),
            vec![FollowerCommand::HighWatermarkUpdated {
                high_watermark: Offset(5)
            }]
        );
        assert_eq!(
            f.on_fetch_response(&req, &records(9, None), false, &cache, 2),
            vec![FollowerCommand::HighWatermarkUpdated {
                high_watermark: Offset(9)
            }]
        );
        assert_eq!(
            f.on_fetch_response(&req, &records(9, Some(8)), false, &cache, 3),
            vec![FollowerCommand::IncrementLogStartOffset { to: Offset(8) }]
        );
    }

    #[test]
    fn a_follower_wholly_below_the_leaders_log_start_starts_over_there() {
        // AbstractFetcherThread.fetchOffsetAndTruncate: OFFSET_OUT_OF_RANGE with the leader's
        // log start offset above the follower's log end offset → truncateFullyAndStartAt(leader
        // start), high watermark = new log end offset; fetch again at once. A start at or below
        // the log end (the fetch offset was beyond the leader's end) backs off instead.
        let cache = EpochCache::from_entries([(e(5), Offset(0))]);
        let mut f = follower(10, 3);
        let req = f.fetch_request(&cache, 0).unwrap();
        let out_of_range = |start: Option<i64>| FetchAnswer::OffsetOutOfRange {
            log_start_offset: start.map(Offset),
        };
        assert_eq!(
            f.on_fetch_response(&req, &out_of_range(Some(25)), false, &cache, 1),
            vec![
                FollowerCommand::TruncateFullyAndStartAt { offset: Offset(25) },
                FollowerCommand::HighWatermarkUpdated {
                    high_watermark: Offset(25)
                },
            ]
        );
        assert_eq!(
            (f.log_end_offset(), f.high_watermark(), f.state()),
            (Offset(25), Offset(25), FetchState::Fetching)
        );
        let empty = EpochCache::new();
        let next = f.fetch_request(&empty, 1).unwrap();
        assert_eq!(
            (next.fetch_offset, next.last_fetched_epoch),
            (Offset(25), None)
        );
        // The leader's start is applied already: the next answer does not ask again.
        assert_eq!(
            f.on_fetch_response(
                &next,
                &FetchAnswer::Records {
                    high_watermark: Offset(25),
                    log_start_offset: Some(Offset(25)),
                },
                false,
                &empty,
                2
            ),
            vec![]
        );
        for start in [Some(10), Some(4), None] {
            let mut f = follower(10, 3);
            let req = f.fetch_request(&cache, 0).unwrap();
            assert_eq!(
                f.on_fetch_response(&req, &out_of_range(start), false, &cache, 50),
                vec![FollowerCommand::ScheduleFetch { at_ms: 1_050 }],
                "{start:?}"
            );
            assert_eq!(f.log_end_offset(), Offset(10));
        }
    }

    #[test]
    fn leader_change_resumes_fetching_or_becomes_leader() {
        // Metadata with a newer leader epoch: follow the new leader; older epochs ignored.
        let cache = EpochCache::new();
        let mut f = follower(10, 3);
        let req = f.fetch_request(&cache, 0).unwrap();
        f.on_fetch_response(
            &req,
            &FetchAnswer::Error(ErrorCode::FencedLeaderEpoch),
            false,
            &cache,
            0,
        );
        assert_eq!(f.on_leader_change(Some(BrokerId(2)), e(5)), vec![]);
        assert_eq!(f.state(), FetchState::AwaitingMetadata);
        assert_eq!(f.on_leader_change(Some(BrokerId(2)), e(6)), vec![]);
        assert_eq!(f.fetch_request(&cache, 1).unwrap().leader, BrokerId(2));
        assert_eq!(
            f.on_leader_change(Some(BrokerId(1)), e(7)),
            vec![FollowerCommand::BecomeLeader { leader_epoch: e(7) }]
        );
        assert_eq!(f.fetch_request(&cache, 2), None);
    }
}
