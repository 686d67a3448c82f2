//! DeleteRecords on the leader of one partition (issue 20), Kafka's checks in Kafka's order:
//!
//! | # | check (Kafka) | answer |
//! |---|---|---|
//! | 1 | the partition is not in metadata (`KafkaApis.handleDeleteRecordsRequest`) | `UNKNOWN_TOPIC_OR_PARTITION` |
//! | 2 | an internal topic (`ReplicaManager.deleteRecordsOnLocalLog`, `Topic.isInternal`) | `INVALID_TOPIC_EXCEPTION` |
//! | 3 | its log directory is offline (`getPartitionOrException`) | `KAFKA_STORAGE_ERROR` |
//! | 4 | not hosted here, or not led here (`Partition.deleteRecordsOnLeader`) | `NOT_LEADER_OR_FOLLOWER` |
//! | 5 | `cleanup.policy` without `delete` | `POLICY_VIOLATION` |
//! | 6 | -1 is the high watermark; a negative offset or one past it | `OFFSET_OUT_OF_RANGE` |
//!
//! Then the log start offset moves (`UnifiedLog.maybeIncrementLogStartOffset`), the segments
//! wholly below it are deleted at once, and the request is parked in the leader core until the
//! low watermark reaches the offset (`DelayedDeleteRecords`). The caller makes the move durable
//! ([`Broker::persist_log_start`]) before it answers.

use keel_log::{LogError, Offset};
use keel_replication::{self as repl, DeleteRecordsOffset, ErrorCode};
use keel_wire::ResponseError;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::{Broker, LogStartChange};
use crate::partition::{PartitionError, StorageHealth};

/// Kafka's `Topic.INTERNAL_TOPICS`: records are never deleted from them.
const INTERNAL_TOPICS: [&str; 3] = [
    crate::coordinator::OFFSETS_TOPIC,
    "__transaction_state",
    "__share_group_state",
];

/// A DeleteRecords accepted by the leader: the log start offset moved, the answer waits.
#[derive(Debug)]
pub struct PendingDelete {
    /// The change to make durable before answering (`None`: the log start offset did not move
    /// and no change of this log directory is pending).
    pub durable: Option<LogStartChange>,
    /// The low watermark when the request arrived (what Kafka answers with
    /// `REQUEST_TIMED_OUT`; `None` = -1).
    pub initial_low_watermark: Option<Offset>,
    /// Answered with the low watermark once it reaches the offset, or with the error.
    pub waiter: oneshot::Receiver<Result<Offset, ErrorCode>>,
}

impl Broker {
    /// Starts a DeleteRecords of `topic`-`index` below `requested` (the wire value: -1 is the
    /// high watermark), waiting at most `timeout_ms` for the low watermark. See the module docs.
    pub fn start_delete_records(
        &self,
        topic: &str,
        index: i32,
        requested: i64,
        timeout_ms: u64,
    ) -> Result<PendingDelete, ResponseError> {
        let exists = self
            .topic(topic)
            .is_some_and(|t| t.partitions.iter().any(|p| p.index == index));
        if !exists {
            return Err(ResponseError::UnknownTopicOrPartition);
        }
        if INTERNAL_TOPICS.contains(&topic) {
            return Err(ResponseError::InvalidTopicException);
        }
        let partition = self
            .partition(topic, index)
            .ok_or(ResponseError::NotLeaderOrFollower)?;
        if partition.health() == StorageHealth::Offline {
            return Err(ResponseError::KafkaStorageError);
        }
        let now = self.now();
        let mut replica = partition.lock_replica();
        let Some(leader) = replica.as_leader().filter(|l| !l.has_ended()) else {
            return Err(ResponseError::NotLeaderOrFollower);
        };
        if !partition.config().log_config().cleanup_policy.delete {
            return Err(ResponseError::PolicyViolation);
        }
        let offset = leader
            .delete_records_offset(DeleteRecordsOffset::from_wire(requested))
            .map_err(response_error)?;
        let (moved, log_start) = match move_log_start(&partition, Offset(offset.0)) {
            Ok(moved) => moved,
            Err(e) => return Err(self.delete_failed(&partition, replica, e)),
        };
        let mut commands = match leader.on_log_start_offset(repl::Offset(log_start.0)) {
            Ok(commands) => commands,
            Err(e) => {
                warn!(partition = %partition.tp, error = %e, "replication state out of step");
                return Err(ResponseError::UnknownServerError);
            }
        };
        let initial_low_watermark = leader.low_watermark().map(|lw| Offset(lw.0));
        let request = self.next_request_id();
        let (tx, waiter) = oneshot::channel();
        partition.add_delete_waiter(request, tx);
        match leader.await_delete_records(request, offset, timeout_ms, now) {
            Ok(more) => commands.extend(more),
            Err(e) => {
                partition.complete_delete_waiter(
                    request,
                    Err(ErrorCode::Other(ResponseError::UnknownServerError.code())),
                );
                warn!(partition = %partition.tp, error = %e, "replication state out of step");
            }
        }
        drop(replica);
        if moved {
            info!(partition = %partition.tp, log_start_offset = %log_start,
                "log start offset moved by DeleteRecords");
        }
        self.execute(&partition, commands);
        let durable = if moved {
            Some(self.log_start_moved(partition.log_dir_index))
        } else {
            self.log_start_pending(partition.log_dir_index)
        };
        Ok(PendingDelete {
            durable,
            initial_low_watermark,
            waiter,
        })
    }

    /// A log error while moving the log start offset: a storage failure takes the directory
    /// offline (once the replica lock is released).
    fn delete_failed(
        &self,
        partition: &crate::partition::Partition,
        replica: std::sync::MutexGuard<'_, crate::partition::Replica>,
        error: ResponseErrorOrLog,
    ) -> ResponseError {
        drop(replica);
        match error {
            ResponseErrorOrLog::Response(e) => e,
            ResponseErrorOrLog::Log(e) => {
                if self.check_storage_error(partition, &e) {
                    ResponseError::KafkaStorageError
                } else {
                    warn!(partition = %partition.tp, error = %e, "DeleteRecords failed");
                    crate::error::from_log_error(&e).error
                }
            }
        }
    }
}

/// Moves the log start offset of `partition` (locked by the caller's replica lock) to `offset`
/// and deletes the segments wholly below it: whether it moved, and the log start offset now.
fn move_log_start(
    partition: &crate::partition::Partition,
    offset: Offset,
) -> Result<(bool, Offset), ResponseErrorOrLog> {
    let mut log = partition.lock_log().map_err(|e| match e {
        PartitionError::Offline => ResponseError::KafkaStorageError,
        PartitionError::Deleted | PartitionError::Log(_) => ResponseError::NotLeaderOrFollower,
    })?;
    let moved = log.increment_log_start_offset(offset)?;
    if moved {
        log.delete_segments_below_log_start(partition.high_watermark())?;
    }
    Ok((moved, log.log_start_offset()))
}

/// What moving the log start offset can fail with.
#[derive(Debug)]
enum ResponseErrorOrLog {
    Response(ResponseError),
    Log(LogError),
}

impl From<ResponseError> for ResponseErrorOrLog {
    fn from(e: ResponseError) -> Self {
        ResponseErrorOrLog::Response(e)
    }
}

impl From<LogError> for ResponseErrorOrLog {
    fn from(e: LogError) -> Self {
        ResponseErrorOrLog::Log(e)
    }
}

/// The wire error of the replication core's code.
fn response_error(code: ErrorCode) -> ResponseError {
    ResponseError::try_from_code(code.code()).unwrap_or(ResponseError::UnknownServerError)
}
