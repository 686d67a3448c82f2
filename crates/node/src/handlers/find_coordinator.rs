//! FindCoordinator (key 10, v0–6): the group coordinator of a key (type 0) is the leader of the
//! key's `__consumer_offsets` partition, the transaction coordinator of a transactional id
//! (type 1) the leader of its `__transaction_state` partition (Kafka's hash for both). Each topic
//! is created on the first lookup (Kafka does the same), compacted:
//! `offsets.topic.num.partitions` partitions and `offsets.topic.replication.factor` replicas with
//! `min.insync.replicas` 2; `transaction.state.log.num.partitions`,
//! `transaction.state.log.replication.factor` and `transaction.state.log.min.isr` (both min ISRs
//! capped at the replication factor). Until the key's partition has a leader the answer is
//! `COORDINATOR_NOT_AVAILABLE` and the client retries. Share coordinators (key type 2, asked
//! for by brokers of share groups, KIP-932) as Kafka 4.4 without one (`KafkaApisTest`
//! `testFindCoordinatorTooOldForShareStateTopic`, `…NoShareCoordinatorForShareStateTopic`,
//! `…WithInvalidSharePartitionKey`): before v6 `INVALID_REQUEST`, a key that is not
//! `groupId:topicId:partition` `INVALID_REQUEST`, otherwise `COORDINATOR_NOT_AVAILABLE`; any
//! other key type `INVALID_REQUEST`.
//! v0–3 carry one key; v4+ a batch (`CoordinatorKeys`), answered one entry per key.

use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::find_coordinator_response::Coordinator;
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, TopicName,
};
use keel_wire::ResponseError;
use tracing::{info, warn};

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinator::{partition_for, OFFSETS_TOPIC};
use crate::txn_coordinator::TRANSACTION_STATE_TOPIC;

/// Key types (`FindCoordinatorRequest.KeyType`).
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;
const SHARE_KEY: i8 = 2;

/// The first version that may ask for a share coordinator (KIP-932).
const SHARE_KEY_MIN_VERSION: i16 = 6;

/// How long the first lookup waits for the new topic's partition to get a leader.
const CREATE_WAIT_MS: u64 = 5_000;

/// Answers FindCoordinator; a coordinator is named at its endpoint of `listener`, the one the
/// request came in on.
pub async fn handle(
    broker: &Broker,
    session: &crate::connection::Session,
    request: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    use keel_controller::acl::{AclOperation, ResourceType};
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::FindCoordinator,
    );
    let keys: Vec<String> = if version >= 4 {
        request
            .coordinator_keys
            .iter()
            .map(ToString::to_string)
            .collect()
    } else {
        vec![request.key.to_string()]
    };
    let mut coordinators = Vec::new();
    for key in keys {
        // Kafka: DESCRIBE on the group, or on the transactional id.
        let answer = if request.key_type == GROUP_KEY
            && !authz.allows(AclOperation::Describe, ResourceType::Group, &key)
        {
            Err((
                ResponseError::GroupAuthorizationFailed,
                "Group authorization failed.".to_string(),
            ))
        } else if request.key_type == TRANSACTION_KEY
            && !authz.allows(AclOperation::Describe, ResourceType::TransactionalId, &key)
        {
            Err((
                ResponseError::TransactionalIdAuthorizationFailed,
                "Transactional Id authorization failed.".to_string(),
            ))
        } else if request.key_type == GROUP_KEY {
            find_group_coordinator(broker, &key, listener).await
        } else if request.key_type == TRANSACTION_KEY {
            find_txn_coordinator(broker, &key, listener).await
        } else if request.key_type == SHARE_KEY {
            Err(share_coordinator(&key, version))
        } else {
            Err((
                ResponseError::InvalidRequest,
                format!(
                    "coordinator key type {} is not supported: Keel has no share coordinator",
                    request.key_type
                ),
            ))
        };
        coordinators.push(match answer {
            Ok((node, host, port)) => Coordinator::default()
                .with_key(str_bytes(key))
                .with_node_id(BrokerId(node))
                .with_host(str_bytes(host))
                .with_port(i32::from(port))
                .with_error_code(0),
            Err((error, message)) => Coordinator::default()
                .with_key(str_bytes(key))
                .with_node_id(BrokerId(-1))
                .with_host(str_bytes(""))
                .with_port(-1)
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message))),
        });
    }
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let one = coordinators.pop().expect("one key before v4");
    FindCoordinatorResponse::default()
        .with_error_code(one.error_code)
        .with_error_message(one.error_message)
        .with_node_id(one.node_id)
        .with_host(one.host)
        .with_port(one.port)
}

type Found = Result<(i32, String, u16), (ResponseError, String)>;

/// A share coordinator lookup: Keel has none (see the module docs).
fn share_coordinator(key: &str, version: i16) -> (ResponseError, String) {
    if version < SHARE_KEY_MIN_VERSION {
        return (
            ResponseError::InvalidRequest,
            format!("share coordinators need FindCoordinator v{SHARE_KEY_MIN_VERSION}"),
        );
    }
    if !is_share_partition_key(key) {
        return (
            ResponseError::InvalidRequest,
            format!("invalid share coordinator key {key:?}: expected groupId:topicId:partition"),
        );
    }
    (
        ResponseError::CoordinatorNotAvailable,
        "Keel has no share coordinator: share groups (KIP-932) are not supported".to_string(),
    )
}

/// Kafka's `SharePartitionKey.getInstance(String)` format: three `:`-separated parts, a
/// non-empty group id, a topic id in Kafka's base64 form and a partition index.
fn is_share_partition_key(key: &str) -> bool {
    let parts: Vec<&str> = key.split(':').collect();
    matches!(parts.as_slice(), [group, topic, partition]
        if !group.is_empty()
            && topic.len() == 22
            && keel_log::decode_kafka_uuid(topic).is_some_and(|id| !id.is_nil())
            && partition.parse::<i32>().is_ok_and(|p| p >= 0))
}

async fn find_group_coordinator(broker: &Broker, group: &str, listener: &str) -> Found {
    let config = &broker.config;
    let topic = InternalTopic {
        name: OFFSETS_TOPIC,
        partitions: config.offsets_topic_num_partitions,
        replication: config.offsets_topic_replication_factor,
        min_isr: 2,
        segment_bytes: config.offsets_topic_segment_bytes,
        replication_key: "offsets.topic.replication.factor",
    };
    find_coordinator_in(broker, &topic, group, listener).await
}

async fn find_txn_coordinator(broker: &Broker, id: &str, listener: &str) -> Found {
    let txn = &broker.config.transactions;
    let topic = InternalTopic {
        name: TRANSACTION_STATE_TOPIC,
        partitions: txn.num_partitions,
        replication: txn.replication_factor,
        min_isr: txn.min_isr,
        segment_bytes: txn.segment_bytes,
        replication_key: "transaction.state.log.replication.factor",
    };
    find_coordinator_in(broker, &topic, id, listener).await
}

/// An internal topic a coordinator lives in, created on the first lookup.
struct InternalTopic {
    name: &'static str,
    partitions: i32,
    replication: i16,
    /// Capped at the replication factor.
    min_isr: i16,
    segment_bytes: u64,
    replication_key: &'static str,
}

/// The leader of `key`'s partition of `topic` (Kafka's hash), at its `listener` endpoint.
async fn find_coordinator_in(
    broker: &Broker,
    topic: &InternalTopic,
    key: &str,
    listener: &str,
) -> Found {
    if broker.topic(topic.name).is_none() {
        create_internal_topic(broker, topic).await?;
    }
    let name = topic.name;
    let not_available = |why: String| (ResponseError::CoordinatorNotAvailable, why);
    let view = broker
        .topic(name)
        .ok_or_else(|| not_available(format!("{name} is being created")))?;
    let index = partition_for(key, view.partitions.len());
    let leader = view
        .partitions
        .iter()
        .find(|p| p.index == index)
        .and_then(|p| p.leader)
        .ok_or_else(|| not_available(format!("{name}-{index} has no leader")))?;
    let (host, port) = broker
        .broker_endpoint_on(leader, listener)
        .ok_or_else(|| not_available(format!("broker {leader} has no endpoint")))?;
    Ok((leader, host, port))
}

async fn create_internal_topic(
    broker: &Broker,
    internal: &InternalTopic,
) -> Result<(), (ResponseError, String)> {
    let topic = internal;
    let name = topic.name;
    let (partitions, replication_key) = (topic.partitions, topic.replication_key);
    let replication = topic.replication;
    let configs = [
        ("cleanup.policy", "compact".to_string()),
        (
            "min.insync.replicas",
            replication.min(topic.min_isr).to_string(),
        ),
        ("segment.bytes", topic.segment_bytes.to_string()),
    ];
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(str_bytes(name)))
            .with_num_partitions(topic.partitions)
            .with_replication_factor(replication)
            .with_configs(
                configs
                    .into_iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(str_bytes(name))
                            .with_value(Some(str_bytes(value)))
                    })
                    .collect(),
            )]);
    let answer: Result<CreateTopicsResponse, _> = broker
        .controller()
        // At most v5, which cannot carry THROTTLING_QUOTA_EXCEEDED: the cluster's own creation
        // is never refused by a controller_mutation_rate (KIP-599).
        .call(
            ApiKey::CreateTopics,
            2,
            super::INTERNAL_CREATE_TOPICS_VERSION_MAX,
            &request,
        )
        .await;
    let unavailable = |why: String| (ResponseError::CoordinatorNotAvailable, why);
    let topic = match answer {
        Ok(response) => response.topics.into_iter().next(),
        Err(e) => return Err(unavailable(format!("the controller is not reachable: {e}"))),
    };
    let code = topic.as_ref().map_or(-1, |t| t.error_code);
    if code == ResponseError::InvalidReplicationFactor.code() {
        warn!(replication, "cannot create {name}: too few brokers");
        return Err(unavailable(format!(
            "{name} needs {}={replication} brokers: {}",
            replication_key,
            topic
                .and_then(|t| t.error_message.map(|m| m.to_string()))
                .unwrap_or_default()
        )));
    }
    if code != 0 && code != ResponseError::TopicAlreadyExists.code() {
        return Err(unavailable(format!("cannot create {name}: error {code}")));
    }
    if code == 0 {
        info!(partitions, replication, "created {name}");
    }
    broker
        .await_image(CREATE_WAIT_MS, |image| {
            image
                .topic_id(name)
                .and_then(|id| image.topic(id))
                .is_some_and(|t| t.partitions.values().all(|p| p.leader.is_some()))
        })
        .await;
    Ok(())
}
