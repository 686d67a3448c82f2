//! Metadata (key 3): brokers, controller, topics and partitions; creates requested topics
//! when `auto.create.topics.enable` and the request allow it.

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use keel_wire::kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use keel_wire::ResponseError;
use tracing::info;
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::metadata::TopicMeta;

/// `*_authorized_operations` when not requested.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn handle(broker: &Arc<Broker>, request: MetadataRequest, version: i16) -> MetadataResponse {
    let listener = broker.config.advertised();
    let brokers = vec![MetadataResponseBroker::default()
        .with_node_id(BrokerId(broker.config.node_id))
        .with_host(str_bytes(listener.host.clone()))
        .with_port(i32::from(listener.port))
        .with_rack(None)];

    // v0: an empty list means all topics; v1+: null means all topics.
    let wanted = match request.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(list),
    };
    // Before v4 the request cannot say no; the broker setting decides.
    let allow_auto_create = broker.config.auto_create_topics_enable
        && (version < 4 || request.allow_auto_topic_creation);

    let topics = match wanted {
        None => broker
            .topics()
            .iter()
            .map(|t| topic_entry(broker, t))
            .collect(),
        Some(list) => list
            .into_iter()
            .map(|requested| match requested.name {
                Some(name) => by_name(broker, &name, allow_auto_create),
                // Topic ids in Metadata requests are served from v12 on, as Kafka does.
                None if version < 12 => error_entry(
                    Some(TopicName(str_bytes(""))),
                    requested.topic_id,
                    ResponseError::InvalidRequest,
                ),
                None => by_id(broker, requested.topic_id),
            })
            .collect(),
    };
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn by_name(
    broker: &Arc<Broker>,
    name: &TopicName,
    allow_auto_create: bool,
) -> MetadataResponseTopic {
    if let Some(topic) = broker.topic(name) {
        return topic_entry(broker, &topic);
    }
    if let Err(e) = crate::broker::validate_topic_name(name) {
        return error_entry(Some(name.clone()), Uuid::nil(), e.error);
    }
    if !allow_auto_create {
        return error_entry(
            Some(name.clone()),
            Uuid::nil(),
            ResponseError::UnknownTopicOrPartition,
        );
    }
    match broker.create_topic(name, None, None, &BTreeMap::new(), false) {
        Ok(topic) => {
            info!(topic = %name.as_str(), "auto-created topic");
            topic_entry(broker, &topic)
        }
        // A concurrent request created it first.
        Err(e) if e.error == ResponseError::TopicAlreadyExists => match broker.topic(name) {
            Some(topic) => topic_entry(broker, &topic),
            None => error_entry(
                Some(name.clone()),
                Uuid::nil(),
                ResponseError::LeaderNotAvailable,
            ),
        },
        Err(e) => error_entry(Some(name.clone()), Uuid::nil(), e.error),
    }
}

fn by_id(broker: &Arc<Broker>, id: Uuid) -> MetadataResponseTopic {
    match broker.topic_by_id(id) {
        Some(topic) => topic_entry(broker, &topic),
        None => error_entry(None, id, ResponseError::UnknownTopicId),
    }
}

fn error_entry(name: Option<TopicName>, id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name)
        .with_topic_id(id)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn topic_entry(broker: &Arc<Broker>, topic: &TopicMeta) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let leader_epoch = broker
                .partition(&topic.name, p.index)
                .map_or(p.leader_epoch, |hosted| hosted.leader_epoch().0);
            let replicas: Vec<BrokerId> = p.replicas.iter().copied().map(BrokerId).collect();
            MetadataResponsePartition::default()
                .with_error_code(0)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(broker.config.node_id))
                .with_leader_epoch(leader_epoch)
                .with_isr_nodes(replicas.clone())
                .with_replica_nodes(replicas)
                .with_offline_replicas(Vec::new())
        })
        .collect();
    MetadataResponseTopic::default()
        .with_error_code(0)
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(false)
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
