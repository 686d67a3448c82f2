//! DescribeLogDirs (35, v1–4): this broker's log directories, as Kafka's broker answers —
//! each directory's partitions with their size and lag, the volume's total and usable bytes
//! (v4), `KAFKA_STORAGE_ERROR` for a directory that is offline — plus Keel's status tag
//! ([`keel_wire::keel_ext::LogDirStatus`]: quarantined data, why a directory is offline), for
//! `kafka-log-dirs.sh --describe` and `keel status`.
//!
//! `Topics` null asks for every partition; otherwise only the named ones (a topic or partition
//! this broker does not host is left out, as in Kafka).

use std::collections::{BTreeMap, BTreeSet};

use keel_wire::kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use keel_wire::kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName,
};
use keel_wire::keel_ext::{LogDirStatus, LOG_DIR_STATUS_TAG};
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::partition::Partition;

/// Answers DescribeLogDirs.
pub fn handle(
    broker: &Broker,
    session: &crate::connection::Session,
    request: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    // Kafka: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED and no directories.
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeLogDirs,
    );
    if !authz.cluster(keel_controller::acl::AclOperation::Describe) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    // What was asked, by topic name: `None` = everything.
    let wanted: Option<BTreeMap<String, BTreeSet<i32>>> = request.topics.map(|topics| {
        let mut wanted: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
        for t in topics {
            wanted
                .entry(t.topic.to_string())
                .or_default()
                .extend(t.partitions);
        }
        wanted
    });
    let quarantines = broker.quarantines();
    let partitions = broker.all_partitions();
    let mut results = Vec::new();
    for (index, dir) in broker.log_dir_paths().into_iter().enumerate() {
        let in_dir = |q: &keel_log::Quarantine| q.path.parent() == Some(dir.as_path());
        let status = LogDirStatus {
            quarantine_count: i32::try_from(quarantines.iter().filter(|q| in_dir(q)).count())
                .unwrap_or(i32::MAX),
            quarantined_bytes: i64::try_from(
                quarantines
                    .iter()
                    .filter(|q| in_dir(q))
                    .map(|q| q.bytes)
                    .sum::<u64>(),
            )
            .unwrap_or(i64::MAX),
            offline_reason: broker.offline_reason(index),
        };
        let mut result = DescribeLogDirsResult::default()
            .with_log_dir(str_bytes(dir.display().to_string()))
            .with_total_bytes(-1)
            .with_usable_bytes(-1)
            .with_unknown_tagged_field(LOG_DIR_STATUS_TAG, status.encode());
        if status.offline_reason.is_some() {
            results.push(result.with_error_code(ResponseError::KafkaStorageError.code()));
            continue;
        }
        if let Ok(Some(space)) = broker.storage().space(&dir) {
            result = result
                .with_total_bytes(i64::try_from(space.total_bytes).unwrap_or(i64::MAX))
                .with_usable_bytes(i64::try_from(space.usable_bytes).unwrap_or(i64::MAX));
        }
        let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
        for p in partitions.iter().filter(|p| p.log_dir_index == index) {
            let asked = wanted.as_ref().is_none_or(|w| {
                w.get(&p.tp.topic)
                    .is_some_and(|parts| parts.contains(&p.tp.partition))
            });
            if let Some(entry) = asked.then(|| describe(p)).flatten() {
                topics.entry(p.tp.topic.clone()).or_default().push(entry);
            }
        }
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str_bytes(&name)))
                    .with_partitions(partitions)
            })
            .collect();
        results.push(result.with_error_code(0).with_topics(topics));
    }
    for dir in broker.offline_at_start() {
        let status = LogDirStatus {
            offline_reason: Some(dir.reason.clone()),
            ..LogDirStatus::default()
        };
        results.push(
            DescribeLogDirsResult::default()
                .with_error_code(ResponseError::KafkaStorageError.code())
                .with_log_dir(str_bytes(dir.path.display().to_string()))
                .with_total_bytes(-1)
                .with_usable_bytes(-1)
                .with_unknown_tagged_field(LOG_DIR_STATUS_TAG, status.encode()),
        );
    }
    DescribeLogDirsResponse::default()
        .with_error_code(0)
        .with_results(results)
}

/// One partition's size and lag (Kafka: `max(high watermark - log end offset, 0)` for a
/// current replica); `None` once it was deleted or its directory went offline.
fn describe(p: &Partition) -> Option<DescribeLogDirsPartition> {
    let log = p.lock_log().ok()?;
    let lag = (p.high_watermark().0 - log.log_end_offset().0).max(0);
    Some(
        DescribeLogDirsPartition::default()
            .with_partition_index(p.tp.partition)
            .with_partition_size(i64::try_from(log.size_bytes()).unwrap_or(i64::MAX))
            .with_offset_lag(lag)
            .with_is_future_key(false),
    )
}
