//! DescribeProducers (key 61, v0): the idempotent producers a partition's log knows — what
//! `kafka-transactions.sh describe-producers` and `Admin.describeProducers` show. As Kafka
//! (`KafkaApis.handleDescribeProducersRequest`, `ReplicaManager.activeProducerState`,
//! `Partition.activeProducerState`, `UnifiedLog.activeProducers`):
//!
//! - a topic name that is not a legal one is `INVALID_TOPIC_EXCEPTION`, an unknown topic
//!   `UNKNOWN_TOPIC_OR_PARTITION`, for each requested partition;
//! - any replica hosting the partition answers (the admin client asks the leader unless told
//!   a broker); one it does not host is `NOT_LEADER_OR_FOLLOWER` (`UNKNOWN_TOPIC_OR_PARTITION`
//!   if the partition does not exist), one whose log directory is offline `KAFKA_STORAGE_ERROR`;
//! - per producer id: its epoch, the last sequence it wrote in that epoch (-1 if none), the
//!   max timestamp of its last batch or marker, the epoch of the coordinator that wrote its
//!   last transaction marker here (-1: none) and the first offset of its open transaction
//!   (-1: none) — what `kafka-transactions.sh find-hanging` looks at.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use keel_wire::kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};
use keel_wire::ResponseError;

use crate::broker::{validate_topic_name, Broker};
use crate::error::ApiError;
use crate::partition::PartitionError;

/// What a producer without a transaction carries (Kafka's `ProducerStateEntry` defaults).
const NO_TXN_START_OFFSET: i64 = -1;
const NO_SEQUENCE: i32 = -1;

pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeProducers,
    );
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            // Kafka: READ on the topic, before its existence is looked at.
            let readable = authz.topic(keel_controller::acl::AclOperation::Read, &name);
            let refused = (!readable).then(|| {
                ApiError::new(
                    ResponseError::TopicAuthorizationFailed,
                    "Topic authorization failed.",
                )
            });
            let topic_error = refused
                .or_else(|| validate_topic_name(&name).err())
                .or_else(|| {
                    broker.topic(&name).is_none().then(|| {
                        ApiError::new(
                            ResponseError::UnknownTopicOrPartition,
                            format!("topic {name} does not exist"),
                        )
                    })
                });
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    let answer = match &topic_error {
                        Some(e) => Err(e.clone()),
                        None => active_producers(broker, &name, index),
                    };
                    let response = PartitionResponse::default().with_partition_index(index);
                    match answer {
                        Ok(producers) => {
                            response.with_error_code(0).with_active_producers(producers)
                        }
                        Err(e) => response
                            .with_error_code(e.code())
                            .with_error_message(e.message_str()),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

fn active_producers(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> Result<Vec<ProducerState>, ApiError> {
    let partition = broker.partition(topic, index).ok_or_else(|| {
        let error = super::missing_partition_error(broker, topic, index);
        ApiError::new(
            error,
            format!("{topic}-{index} is not hosted by this broker"),
        )
    })?;
    let log = partition.lock_log().map_err(|e| match e {
        PartitionError::Offline => ApiError::new(
            ResponseError::KafkaStorageError,
            "the partition's log directory on this broker is offline",
        ),
        _ => ApiError::bare(ResponseError::NotLeaderOrFollower),
    })?;
    Ok(log
        .producer_states()
        .producers()
        .iter()
        .map(|(&producer_id, entry)| {
            ProducerState::default()
                .with_producer_id(producer_id.into())
                .with_producer_epoch(i32::from(entry.epoch))
                .with_last_sequence(entry.last_sequence().unwrap_or(NO_SEQUENCE))
                .with_last_timestamp(entry.last_timestamp)
                .with_coordinator_epoch(entry.coordinator_epoch)
                .with_current_txn_start_offset(
                    entry
                        .current_txn_first_offset
                        .map_or(NO_TXN_START_OFFSET, |o| o.0),
                )
        })
        .collect())
}
