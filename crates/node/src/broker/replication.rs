//! The IO side of the replication core: executing the leader's commands, serving follower
//! fetches as leader, applying fetch answers as follower, the periodic tick, and AlterPartition
//! answers.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use keel_log::{LogError, Offset};
use keel_replication::{
    self as repl, AlterPartitionResponse, Command, ErrorCode, FetchAnswer, FollowerCommand,
    FollowerFetch,
};
use tracing::{debug, info, warn};

use tokio::sync::oneshot;

use super::{AlterPartitionJob, Broker, LogStartChange};
use crate::metrics::PartitionCounts;
use crate::partition::{
    epoch_view, AppendResult, Partition, PartitionError, Replica, StorageHealth,
};

/// Answers an acks=all request once the high watermark covers it (or with its error).
pub type AckWaiter = oneshot::Receiver<Result<(), ErrorCode>>;

/// Why a leader append did not happen.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("{}", .0.name())]
    Replication(ErrorCode),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("replication state out of step: {0}")]
    Internal(String),
}

/// A follower's fetch of one partition (Fetch v15+ `ReplicaState` plus the partition fields).
#[derive(Debug, Clone, Copy)]
pub struct FollowerFetchInput {
    pub broker: i32,
    pub broker_epoch: i64,
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    /// The follower's log start offset (-1: not reported), for the low watermark.
    pub log_start_offset: i64,
}

/// The leader's answer for one partition of a follower fetch.
#[derive(Debug, Clone)]
pub enum FollowerFetchAnswer {
    /// Serve records from the fetch offset (read by the caller, up to the log end offset).
    Records,
    /// The follower must truncate: the leader's end offset for the largest epoch ≤ its last
    /// fetched epoch (`None` = no such epoch: -1/-1 on the wire).
    Diverging {
        epoch: i32,
        end_offset: i64,
    },
    /// `OFFSET_OUT_OF_RANGE`, answered with the leader's log start offset (so a follower below
    /// it starts over there).
    OutOfRange,
    Error(ErrorCode),
}

/// One partition's fetch from its leader, as the replica fetcher sends it.
#[derive(Debug, Clone)]
pub struct FollowerFetchPlan {
    pub partition: Arc<Partition>,
    pub request: repl::FetchRequest,
    /// This replica's log start offset (Fetch `LogStartOffset`, for the leader's low
    /// watermark).
    pub log_start_offset: Offset,
}

/// What a leader appends: a client's batches (every producer check), a coordinator's batches
/// for a producer (its epoch checked, not its sequences), or a transaction marker.
#[derive(Debug, Clone, Copy)]
pub enum LeaderWrite<'a> {
    Client(&'a [u8]),
    Coordinator(&'a [u8]),
    Marker {
        producer_id: i64,
        producer_epoch: i16,
        marker: keel_log::EndTxnMarker,
        /// Set by a leader settling a transaction an unclean recovery stranded: append only
        /// while that producer's transaction here is still in doubt at this epoch (otherwise
        /// nothing is appended — its own marker ended it meanwhile, and this one could end the
        /// next).
        only_in_doubt_at: Option<i16>,
    },
}

impl Broker {
    /// Runs the leader core's commands for `partition`.
    pub(super) fn execute(&self, partition: &Arc<Partition>, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::HighWatermarkAdvanced { high_watermark } => {
                    partition.set_high_watermark(Offset(high_watermark.0));
                    self.notify_data_changed();
                }
                Command::CompleteProduce { request, result } => {
                    partition.complete_waiter(request, result);
                }
                Command::CompleteDeleteRecords { request, result } => {
                    partition.complete_delete_waiter(request, result.map(|lw| Offset(lw.0)));
                }
                Command::SendAlterPartition(proposal) => {
                    debug!(partition = %partition.tp, isr = ?proposal.new_isr, "proposing ISR change");
                    let job = AlterPartitionJob {
                        topic_id: partition.topic_id,
                        partition: partition.tp.partition,
                        tp: partition.tp.clone(),
                        proposal,
                    };
                    if self.alter_partition.send(job).is_err() {
                        debug!(partition = %partition.tp, "AlterPartition channel closed (shutting down)");
                    }
                }
                // The periodic tick (`tick_leaders`) runs often enough for every timer the
                // core schedules.
                Command::ScheduleTick { .. } => {}
                Command::LeadershipEnded {
                    leader,
                    leader_epoch,
                } => info!(partition = %partition.tp, new_leader = ?leader.map(|b| b.0),
                    leader_epoch = leader_epoch.0, "leadership ended"),
            }
        }
    }

    /// Serves one partition of a follower fetch as its leader: validation, follower progress,
    /// ISR expansion and the high watermark happen in the core; the records are read by the
    /// caller.
    pub fn serve_follower_fetch(
        &self,
        partition: &Arc<Partition>,
        input: FollowerFetchInput,
    ) -> FollowerFetchAnswer {
        let now = self.now();
        let commands;
        let answer = {
            let mut replica = partition.lock_replica();
            let Some(leader) = replica.as_leader() else {
                return FollowerFetchAnswer::Error(ErrorCode::NotLeaderOrFollower);
            };
            let Ok(log) = partition.lock_log() else {
                return FollowerFetchAnswer::Error(ErrorCode::UnknownTopicOrPartition);
            };
            let epochs = epoch_view(&log);
            drop(log);
            let fetch = FollowerFetch {
                broker: repl::BrokerId(input.broker),
                broker_epoch: repl::BrokerEpoch(input.broker_epoch),
                current_leader_epoch: (input.current_leader_epoch >= 0)
                    .then_some(repl::LeaderEpoch(input.current_leader_epoch)),
                fetch_offset: repl::Offset(input.fetch_offset),
                last_fetched_epoch: (input.last_fetched_epoch >= 0)
                    .then_some(repl::LeaderEpoch(input.last_fetched_epoch)),
                log_start_offset: (input.log_start_offset >= 0)
                    .then_some(repl::Offset(input.log_start_offset)),
            };
            let outcome = leader.on_follower_fetch(&fetch, &epochs, now);
            commands = outcome.commands;
            match outcome.answer {
                FetchAnswer::Records { .. } => FollowerFetchAnswer::Records,
                FetchAnswer::DivergingEpoch { end, .. } => FollowerFetchAnswer::Diverging {
                    epoch: end.map_or(-1, |e| e.epoch.0),
                    end_offset: end.map_or(-1, |e| e.end_offset.0),
                },
                FetchAnswer::OffsetOutOfRange { .. } => FollowerFetchAnswer::OutOfRange,
                FetchAnswer::Error(e) => FollowerFetchAnswer::Error(e),
            }
        };
        self.execute(partition, commands);
        answer
    }

    /// Ticks every partition this broker leads: produce timeouts, ISR shrink, AlterPartition
    /// retries, the high watermark. The same sweep sets the partition gauges (hosted, led,
    /// under-replicated, under min ISR).
    pub fn tick_leaders(&self) {
        let now = self.now();
        let mut counts = PartitionCounts::default();
        let image = self.image();
        for partition in self.all_partitions() {
            counts.hosted += 1;
            // Kafka's replication factor of a partition being reassigned, for this gauge: its
            // original replicas (`OngoingReassignmentState`: the replicas without those being
            // added, which are not missing from the ISR while they catch up).
            let adding = u32::try_from(partition.tp.partition)
                .ok()
                .and_then(|index| {
                    image.partition(keel_controller::types::TopicPartition::new(
                        keel_controller::types::TopicId(partition.topic_id),
                        index,
                    ))
                })
                .map_or(0, |p| p.adding_replicas.len());
            let commands = match partition.lock_replica().as_leader() {
                Some(leader) => {
                    counts.led += 1;
                    counts.under_replicated += u64::from(
                        leader.isr().len() < leader.replicas().len().saturating_sub(adding),
                    );
                    counts.under_min_isr += u64::from(leader.is_under_min_isr());
                    leader.tick(now)
                }
                None => continue,
            };
            if !commands.is_empty() {
                self.execute(&partition, commands);
            }
        }
        self.metrics.set_partition_counts(counts);
    }

    /// The controller answered (or failed to answer) an AlterPartition.
    pub fn on_alter_partition_answer(
        &self,
        job: &AlterPartitionJob,
        answer: AlterPartitionResponse,
    ) {
        let Some(partition) = self.partition(&job.tp.topic, job.tp.partition) else {
            return;
        };
        if partition.topic_id != job.topic_id {
            return;
        }
        let now = self.now();
        let commands = match partition.lock_replica().as_leader() {
            Some(leader) => {
                let isr_before = leader.isr().clone();
                let commands = leader.on_alter_partition_response(job.proposal.id, &answer, now);
                if matches!(answer, AlterPartitionResponse::Committed { .. }) {
                    self.metrics.count_isr_change(&isr_before, leader.isr());
                }
                commands
            }
            None => return,
        };
        if let AlterPartitionResponse::Error(e) = &answer {
            info!(partition = %partition.tp, error = e.name(), "AlterPartition refused");
        }
        self.execute(&partition, commands);
    }

    /// The leaders some hosted partition is following.
    pub fn leaders_followed(&self) -> BTreeSet<i32> {
        let mut leaders = BTreeSet::new();
        for partition in self.all_partitions() {
            if partition.health() == StorageHealth::Offline {
                continue;
            }
            if let Replica::Follower(f) = &*partition.lock_replica() {
                if let Some(leader) = f.leader() {
                    leaders.insert(leader.0);
                }
            }
        }
        leaders
    }

    /// The fetches to send to `leader` now, one per partition that follows it and is ready.
    pub fn follower_fetches(&self, leader: i32) -> Vec<FollowerFetchPlan> {
        let now = self.now();
        let mut fetches = Vec::new();
        for partition in self.all_partitions() {
            let mut replica = partition.lock_replica();
            let Replica::Follower(follower) = &mut *replica else {
                continue;
            };
            if follower.leader() != Some(repl::BrokerId(leader))
                || partition.health() == StorageHealth::Offline
            {
                continue;
            }
            let Ok(log) = partition.lock_log() else {
                continue;
            };
            let epochs = epoch_view(&log);
            let log_start_offset = log.log_start_offset();
            drop(log);
            let request = follower.fetch_request(&epochs, now);
            drop(replica);
            if let Some(request) = request {
                fetches.push(FollowerFetchPlan {
                    partition,
                    request,
                    log_start_offset,
                });
            }
        }
        fetches
    }

    /// Applies the leader's answer for one partition as its follower: append, truncate, or
    /// back off, then the follower high watermark and the leader's log start offset. Returns
    /// the log start offset change to make durable before the next fetch reports it (the
    /// leader's DeleteRecords answer waits for that report).
    pub fn on_follower_fetch_answer(
        &self,
        partition: &Arc<Partition>,
        request: &repl::FetchRequest,
        answer: &FetchAnswer,
        records: Option<Bytes>,
    ) -> Option<LogStartChange> {
        let now = self.now();
        let mut replica = partition.lock_replica();
        let Replica::Follower(follower) = &mut *replica else {
            return None;
        };
        let Ok(mut log) = partition.lock_log() else {
            return None;
        };
        let mut start_moved = false;
        let records = records.filter(|r| !r.is_empty());
        let epochs = epoch_view(&log);
        let mut commands =
            follower.on_fetch_response(request, answer, records.is_some(), &epochs, now);
        let mut grew = false;
        // Storage faults are handled once the locks are released.
        let mut fault: Option<LogError> = None;
        while !commands.is_empty() {
            let mut next = Vec::new();
            for command in commands {
                match command {
                    FollowerCommand::AppendRecords => {
                        let bytes = records.as_deref().unwrap_or_default();
                        // Transactions decided below the high watermark are stable: forget them.
                        log.on_high_watermark(partition.high_watermark());
                        match log.append_as_follower(bytes, self.clock.now_ms()) {
                            Ok(_) => {
                                grew = true;
                                self.metrics.replication_bytes_in.inc_by(bytes.len() as u64);
                                let end = repl::Offset(log.log_end_offset().0);
                                match follower.on_appended(end) {
                                    Ok(more) => next.extend(more),
                                    Err(e) => warn!(partition = %partition.tp, error = %e,
                                        "follower state out of step with the log"),
                                }
                            }
                            Err(e) => {
                                if let LogError::CorruptRecord(_) = e {
                                    // Damaged in the leader's log or on the way: never
                                    // appended; the leader's own verified read finds the
                                    // former, a retry gets past the latter.
                                    self.metrics.storage.fetch_corrupt.inc();
                                    warn!(partition = %partition.tp, error = %e,
                                        "the leader sent a batch that fails validation; not appended");
                                } else if !matches!(e, LogError::UnexpectedAppendOffset { .. }) {
                                    // (An unexpected offset: the answer raced with a
                                    // truncation; fetch again.)
                                    warn!(partition = %partition.tp, error = %e, "follower append failed");
                                }
                                next.extend(follower.on_fetch_failed(now));
                                if e.is_fatal() {
                                    fault = Some(e);
                                }
                            }
                        }
                    }
                    FollowerCommand::Truncate { to } => {
                        info!(partition = %partition.tp, to = to.0,
                            log_end_offset = %log.log_end_offset(), "truncating to the leader's log (diverging epoch)");
                        if let Err(e) = log.truncate_to(Offset(to.0), self.clock.now_ms()) {
                            warn!(partition = %partition.tp, error = %e, "truncation failed");
                            fault = Some(e);
                        }
                    }
                    FollowerCommand::TruncateFullyAndStartAt { offset } => {
                        info!(partition = %partition.tp, offset = offset.0,
                            log_end_offset = %log.log_end_offset(),
                            "the whole log is below the leader's log start offset: starting over there");
                        match log.truncate_fully_and_start_at(Offset(offset.0)) {
                            // Checkpointed before the next fetch reports it: the segment that
                            // arrives next may start below it (a batch straddling the start).
                            Ok(()) => start_moved = true,
                            Err(e) => {
                                warn!(partition = %partition.tp, error = %e, "truncation failed");
                                fault = Some(e);
                            }
                        }
                    }
                    FollowerCommand::IncrementLogStartOffset { to } => {
                        let high_watermark = partition.high_watermark();
                        let moved =
                            log.increment_log_start_offset(Offset(to.0))
                                .and_then(|moved| {
                                    if moved {
                                        log.delete_segments_below_log_start(high_watermark)?;
                                    }
                                    Ok(moved)
                                });
                        match moved {
                            Ok(moved) => start_moved |= moved,
                            Err(e) => {
                                warn!(partition = %partition.tp, error = %e,
                                    "cannot follow the leader's log start offset");
                                if e.is_fatal() {
                                    fault = Some(e);
                                }
                            }
                        }
                    }
                    FollowerCommand::HighWatermarkUpdated { high_watermark } => {
                        partition.set_high_watermark(Offset(high_watermark.0));
                        grew = true;
                    }
                    FollowerCommand::AwaitMetadata { error } => {
                        debug!(partition = %partition.tp, error = error.name(),
                            "follower waits for new metadata");
                    }
                    FollowerCommand::ScheduleFetch { .. }
                    | FollowerCommand::BecomeLeader { .. } => {}
                }
            }
            commands = next;
        }
        drop(log);
        drop(replica);
        match fault {
            Some(LogError::Damaged(damage)) => self.on_damage(partition, &damage, "truncation"),
            Some(e) => {
                self.check_storage_error(partition, &e);
            }
            None => {}
        }
        if grew {
            self.notify_data_changed();
        }
        start_moved.then(|| self.log_start_moved(partition.log_dir_index))
    }

    /// A fetch to the leader failed without an answer: every partition in it backs off.
    pub fn on_follower_fetch_failed(&self, partitions: &[Arc<Partition>]) {
        let now = self.now();
        for partition in partitions {
            if let Replica::Follower(f) = &mut *partition.lock_replica() {
                f.on_fetch_failed(now);
            }
        }
    }

    /// Appends a producer's batches as leader. acks=all is refused with `NOT_ENOUGH_REPLICAS`
    /// while the committed ISR is below the effective min ISR (nothing is appended); otherwise
    /// the returned receiver answers once the high watermark covers the records (or with
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`, `REQUEST_TIMED_OUT`, `NOT_LEADER_OR_FOLLOWER`).
    pub fn append_as_leader(
        &self,
        partition: &Arc<Partition>,
        records: &[u8],
        acks: repl::Acks,
        timeout_ms: u64,
    ) -> Result<(AppendResult, Option<AckWaiter>), AppendError> {
        self.write_as_leader(partition, LeaderWrite::Client(records), acks, timeout_ms)
    }

    /// [`Broker::append_as_leader`] for any [`LeaderWrite`]: a client's batches, a
    /// coordinator's, or a transaction marker.
    pub fn write_as_leader(
        &self,
        partition: &Arc<Partition>,
        write: LeaderWrite<'_>,
        acks: repl::Acks,
        timeout_ms: u64,
    ) -> Result<(AppendResult, Option<AckWaiter>), AppendError> {
        let now = self.now();
        let mut commands;
        let mut waiter = None;
        let result = {
            let mut replica = partition.lock_replica();
            let Some(leader) = replica.as_leader() else {
                // A replica that lost its storage answers as Kafka does for an offline one.
                let error = match partition.health() {
                    StorageHealth::Offline => ErrorCode::KafkaStorageError,
                    StorageHealth::Healthy | StorageHealth::Damaged => {
                        ErrorCode::NotLeaderOrFollower
                    }
                };
                return Err(AppendError::Replication(error));
            };
            leader
                .check_produce(acks)
                .map_err(AppendError::Replication)?;
            let epoch = keel_log::LeaderEpoch(leader.leader_epoch().0);
            let appended = partition
                .lock_log()
                .map_err(AppendError::from)
                .and_then(|mut log| {
                    log.on_high_watermark(partition.high_watermark());
                    let now_ms = self.clock.now_ms();
                    let info = match write {
                        LeaderWrite::Client(records) => {
                            log.append_as_leader(records, epoch, now_ms)?
                        }
                        LeaderWrite::Coordinator(records) => {
                            log.append_as_coordinator(records, epoch, now_ms)?
                        }
                        LeaderWrite::Marker {
                            producer_id,
                            only_in_doubt_at: Some(in_doubt),
                            ..
                        } if !log.transaction_in_doubt_at(producer_id, in_doubt) => {
                            let end = log.log_end_offset();
                            keel_log::AppendInfo::nothing_appended(end, Offset(end.0 - 1))
                        }
                        LeaderWrite::Marker {
                            producer_id,
                            producer_epoch,
                            marker,
                            ..
                        } => log.append_marker_as_leader(
                            producer_id,
                            producer_epoch,
                            marker,
                            epoch,
                            now_ms,
                        )?,
                    };
                    Ok((info, log.log_end_offset(), log.log_start_offset()))
                });
            let (info, end, log_start) = match appended {
                Ok(appended) => appended,
                Err(AppendError::Log(e)) if e.is_fatal() => {
                    drop(replica);
                    self.check_storage_error(partition, &e);
                    return Err(AppendError::Log(e));
                }
                Err(e) => return Err(e),
            };
            // An idempotent producer's retry of a batch the log holds appends nothing; its
            // acks=all answer waits for the high watermark to pass the original batch.
            let required = info.last_offset.next();
            if info.duplicate {
                commands = Vec::new();
            } else {
                self.metrics.bytes_in.inc_by(info.size_bytes);
                self.metrics
                    .records_in
                    .inc_by(u64::try_from(end.0 - info.first_offset.0).unwrap_or(0));
                commands = leader
                    .on_leader_append(repl::Offset(end.0), now)
                    .map_err(|e| AppendError::Internal(e.to_string()))?;
            }
            if acks == repl::Acks::All {
                let request = self.next_request_id();
                let (tx, rx) = oneshot::channel();
                partition.add_waiter(request, tx);
                waiter = Some(rx);
                commands.extend(
                    leader
                        .await_acks_all(request, repl::Offset(required.0), timeout_ms, now)
                        .map_err(|e| AppendError::Internal(e.to_string()))?,
                );
            }
            AppendResult {
                base_offset: info.first_offset,
                end_offset: end,
                log_append_time_ms: info.log_append_time_ms,
                log_start_offset: log_start,
            }
        };
        self.execute(partition, commands);
        self.notify_data_changed();
        Ok((result, waiter))
    }

    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.clock.now_ms()).unwrap_or(0)
    }
}
