//! ListOffsets (key 2, v1–10): the earliest offset, the latest (the high watermark), the record
//! with the largest timestamp, or the first record at or after a timestamp — as Kafka answers
//! (`ReplicaManager.fetchOffset`, `Partition.fetchOffsetForTimestamp`,
//! `UnifiedLog.fetchOffsetByTimestamp`):
//!
//! - a partition named twice in one request is `INVALID_REQUEST`; a special timestamp the
//!   request's version does not know (MAX_TIMESTAMP before v7, EARLIEST_LOCAL before v8,
//!   LATEST_TIERED before v9, any other negative one) is `UNSUPPORTED_VERSION`
//!   (`ReplicaManager.isListOffsetsTimestampUnsupported`);
//! - consumers (replica id -1) are answered by the leader within what they may read: the high
//!   watermark, or the last stable offset for read_committed (`isolation_level` 1, v2+).
//!   A record found at or past it is no answer (offset -1). A leader whose high watermark has
//!   not reached the start of its epoch answers LATEST, and any lookup with no answer below
//!   it, `OFFSET_NOT_AVAILABLE` (v5+; `LEADER_NOT_AVAILABLE` before, as Kafka); EARLIEST never
//!   waits. A replica id >= 0 is answered by the leader up to its log end; -2 (Kafka's
//!   debugging id) by any replica;
//! - the leader epoch (v4+) is the one of the answer: the current leader epoch for LATEST, the
//!   first cached epoch for EARLIEST if it starts at or below the log start, the record's
//!   batch epoch for a timestamp and MAX_TIMESTAMP, -1 for LATEST_TIERED;
//! - EARLIEST_LOCAL (-4, KIP-405) is EARLIEST (no tiered storage: the local log starts at the
//!   log start offset), LATEST_TIERED (-5, KIP-1005) is offset -1 with epoch -1, as Kafka
//!   answers with remote storage off. EARLIEST_PENDING_UPLOAD (-6, KIP-1023) needs v11, which
//!   the codec cannot decode: it is `UNSUPPORTED_VERSION` at every version Keel serves.

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_log::LogError;
use keel_wire::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use keel_wire::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use keel_wire::ResponseError;
use tracing::warn;

use super::fetch::check_leader_epoch;
use crate::broker::{Broker, KafkaCodecs};
use crate::partition::{Partition, PartitionError};

/// Kafka's special timestamps (`ListOffsetsRequest`).
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL_TIMESTAMP: i64 = -4;
const LATEST_TIERED_TIMESTAMP: i64 = -5;

/// Replica ids of the request: a consumer, and Kafka's debugging id (any replica answers).
const CONSUMER_REPLICA_ID: i32 = -1;
const DEBUGGING_REPLICA_ID: i32 = -2;

/// The first version whose response carries the leader epoch.
const LEADER_EPOCH_MIN_VERSION: i16 = 4;
/// The first version that may be answered `OFFSET_NOT_AVAILABLE`.
const OFFSET_NOT_AVAILABLE_MIN_VERSION: i16 = 5;

/// The first version that knows each special timestamp (Kafka's
/// `ReplicaManager.timestampMinSupportedVersion`).
fn min_version_of(timestamp: i64) -> Option<i16> {
    match timestamp {
        EARLIEST_TIMESTAMP | LATEST_TIMESTAMP => Some(1),
        MAX_TIMESTAMP => Some(7),
        EARLIEST_LOCAL_TIMESTAMP => Some(8),
        LATEST_TIERED_TIMESTAMP => Some(9),
        _ => None,
    }
}

/// An answer: offset, timestamp and leader epoch, each `None` when unknown (-1 on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Found {
    offset: Option<i64>,
    timestamp: Option<i64>,
    leader_epoch: Option<i32>,
}

/// Who asks, from the request's replica id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asker {
    /// A client: the leader answers within the high watermark (or last stable offset).
    Consumer,
    /// A replica (id >= 0): the leader answers up to its log end.
    Replica,
    /// Kafka's debugging id: any replica answers, up to its log end.
    Debugging,
}

pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::ListOffsets,
    );
    let asker = match request.replica_id.0 {
        CONSUMER_REPLICA_ID => Asker::Consumer,
        DEBUGGING_REPLICA_ID => Asker::Debugging,
        _ => Asker::Replica,
    };
    let duplicates = duplicate_partitions(&request);
    let read_committed = asker == Asker::Consumer && request.isolation_level == 1;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            // Kafka: DESCRIBE on the topic, before anything else is checked.
            let described = authz.topic(
                keel_controller::acl::AclOperation::Describe,
                topic.name.as_str(),
            );
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let key = (topic.name.0.to_string(), p.partition_index);
                    let answer = if !described {
                        Err(ResponseError::TopicAuthorizationFailed)
                    } else if duplicates.contains(&key) {
                        Err(ResponseError::InvalidRequest)
                    } else if p.timestamp < 0
                        && min_version_of(p.timestamp).is_none_or(|min| version < min)
                    {
                        Err(ResponseError::UnsupportedVersion)
                    } else {
                        let asking = Asking {
                            asker,
                            read_committed,
                            version,
                        };
                        lookup(broker, &topic.name, p.partition_index, asking, p)
                    };
                    partition_response(p.partition_index, answer, version)
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// The partitions a request names more than once (Kafka's `ListOffsetsRequest.duplicatePartitions`).
fn duplicate_partitions(request: &ListOffsetsRequest) -> BTreeSet<(String, i32)> {
    let mut seen = BTreeSet::new();
    let mut duplicates = BTreeSet::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            let key = (topic.name.0.to_string(), p.partition_index);
            if !seen.insert(key.clone()) {
                duplicates.insert(key);
            }
        }
    }
    duplicates
}

fn partition_response(
    index: i32,
    answer: Result<Found, ResponseError>,
    version: i16,
) -> ListOffsetsPartitionResponse {
    let response = ListOffsetsPartitionResponse::default().with_partition_index(index);
    match answer {
        Ok(found) => {
            let response = response
                .with_error_code(0)
                .with_offset(found.offset.unwrap_or(-1))
                .with_timestamp(found.timestamp.unwrap_or(-1));
            if version >= LEADER_EPOCH_MIN_VERSION {
                response.with_leader_epoch(found.leader_epoch.unwrap_or(-1))
            } else {
                response
            }
        }
        Err(error) => response
            .with_error_code(error.code())
            .with_offset(-1)
            .with_timestamp(-1),
    }
}

/// Who asks, at which isolation level and request version.
#[derive(Clone, Copy)]
struct Asking {
    asker: Asker,
    read_committed: bool,
    version: i16,
}

fn lookup(
    broker: &Broker,
    topic: &str,
    index: i32,
    asking: Asking,
    p: &keel_wire::kafka_protocol::messages::list_offsets_request::ListOffsetsPartition,
) -> Result<Found, ResponseError> {
    let Asking {
        asker,
        read_committed,
        version,
    } = asking;
    let partition = broker
        .partition(topic, index)
        .ok_or_else(|| super::missing_partition_error(broker, topic, index))?;
    if asker == Asker::Debugging {
        check_epoch_only(&partition, p.current_leader_epoch)?;
    } else {
        check_leader_epoch(&partition, p.current_leader_epoch)?;
    }
    let timestamp = p.timestamp;
    // Only a client's lookup waits for a new leader's high watermark (Kafka: the error is
    // attached only when an isolation level is, i.e. for replica id -1).
    let lagging = asker == Asker::Consumer && partition.high_watermark_lags_leader_epoch();
    let not_available = if version >= OFFSET_NOT_AVAILABLE_MIN_VERSION {
        ResponseError::OffsetNotAvailable
    } else {
        ResponseError::LeaderNotAvailable
    };
    let log = partition.lock_log().map_err(|e| match e {
        PartitionError::Offline => ResponseError::KafkaStorageError,
        _ => ResponseError::UnknownTopicOrPartition,
    })?;
    let last_fetchable = match asker {
        Asker::Consumer if read_committed => log.last_stable_offset(partition.high_watermark()),
        Asker::Consumer => partition.high_watermark(),
        Asker::Replica | Asker::Debugging => log.log_end_offset(),
    };
    let found = match timestamp {
        LATEST_TIMESTAMP => {
            if lagging {
                return Err(not_available);
            }
            return Ok(Found {
                offset: Some(last_fetchable.0),
                timestamp: None,
                leader_epoch: Some(partition.leader_epoch().0),
            });
        }
        EARLIEST_TIMESTAMP | EARLIEST_LOCAL_TIMESTAMP => {
            return Ok(Found {
                offset: Some(log.log_start_offset().0),
                timestamp: None,
                leader_epoch: log.epoch_at_log_start().map(|e| e.0),
            });
        }
        // Remote storage off: Kafka answers offset -1 with epoch -1.
        LATEST_TIERED_TIMESTAMP => {
            return Ok(Found {
                offset: None,
                timestamp: None,
                leader_epoch: None,
            })
        }
        MAX_TIMESTAMP => log.offset_of_max_timestamp(&KafkaCodecs),
        ts => log.offset_for_timestamp(ts, None, &KafkaCodecs),
    };
    drop(log);
    let found = found.map_err(|e| storage_error(broker, &partition, &e))?;
    match found {
        Some(record) if record.offset < last_fetchable => Ok(Found {
            offset: Some(record.offset.0),
            timestamp: Some(record.timestamp),
            leader_epoch: record.leader_epoch.map(|e| e.0),
        }),
        // Nothing, or nothing the asker may read yet.
        _ if lagging => Err(not_available),
        _ => Ok(Found::default()),
    }
}

/// Kafka's epoch check without the leader check (`Partition.checkCurrentLeaderEpoch`), for
/// the debugging replica id, which any replica answers.
fn check_epoch_only(partition: &Partition, requested: i32) -> Result<(), ResponseError> {
    let current = partition.leader_epoch().0;
    if requested < 0 || requested == current {
        Ok(())
    } else if requested < current {
        Err(ResponseError::FencedLeaderEpoch)
    } else {
        Err(ResponseError::UnknownLeaderEpoch)
    }
}

/// The error a failed lookup answers: damage and IO failures are `KAFKA_STORAGE_ERROR`
/// (a failing directory is taken offline), records that cannot be read `INVALID_RECORD`.
fn storage_error(broker: &Broker, partition: &Arc<Partition>, e: &LogError) -> ResponseError {
    if !broker.check_storage_error(partition, e) {
        warn!(partition = %partition.tp, error = %e, "ListOffsets lookup failed");
    }
    match e {
        LogError::InvalidRecord { .. } => ResponseError::InvalidRecord,
        _ => ResponseError::KafkaStorageError,
    }
}
