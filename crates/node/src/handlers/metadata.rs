//! Metadata (key 3): brokers, topics and partitions from the replayed metadata image —
//! leader, leader epoch, replicas, ISR and offline replicas as the controller committed them.
//! Requested topics that do not exist are created (forwarded to the controller) when
//! `auto.create.topics.enable` and the request allow it.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use keel_wire::ResponseError;
use tracing::info;
use uuid::Uuid;

use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};

use super::authz::Authz;
use super::str_bytes;
use crate::broker::{Broker, TopicView};

/// `*_authorized_operations` when not requested.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// How long an auto-creation waits for the topic to reach this broker's metadata.
const AUTO_CREATE_WAIT_MS: u64 = 5_000;

/// The timeout given to the controller for an auto-creation.
const AUTO_CREATE_TIMEOUT_MS: i32 = 30_000;

/// Answers Metadata; brokers are named at their endpoints of `listener`, the listener the
/// request came in on (Kafka: `metadataCache.getAliveBrokerNodes(request.context.listenerName)`).
pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: MetadataRequest,
    version: i16,
    listener: &str,
    client_id: &str,
) -> MetadataResponse {
    let authz = Authz::new(broker, session, ApiKey::Metadata);
    let include_topic_operations = version >= 8 && request.include_topic_authorized_operations;
    let include_cluster_operations =
        (8..=10).contains(&version) && request.include_cluster_authorized_operations;
    // v0: an empty list means all topics; v1+: null means all topics.
    let wanted = match request.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(list),
    };
    // Before v4 the request cannot say no; the broker setting decides.
    let allow_auto_create = broker.config.auto_create_topics_enable
        && (version < 4 || request.allow_auto_topic_creation);

    let mut topics: Vec<MetadataResponseTopic> = match wanted {
        // Every topic the principal may describe; the others are left out silently.
        None => broker
            .topics()
            .iter()
            .filter(|t| authz.allows_quietly(AclOperation::Describe, ResourceType::Topic, &t.name))
            .map(topic_entry)
            .collect(),
        Some(list) => {
            let mut entries = Vec::new();
            for requested in list {
                entries.push(match requested.name {
                    // Kafka does not say whether a topic the principal may not describe exists.
                    Some(name) if !authz.topic(AclOperation::Describe, name.as_str()) => {
                        error_entry(
                            Some(name),
                            Uuid::nil(),
                            ResponseError::TopicAuthorizationFailed,
                        )
                    }
                    Some(name) => {
                        let client = super::forwarded_for(session, client_id);
                        by_name(broker, &authz, &name, allow_auto_create, client).await
                    }
                    // Topic ids in Metadata requests are served from v12 on, as Kafka does.
                    None if version < 12 => error_entry(
                        Some(TopicName(str_bytes(""))),
                        requested.topic_id,
                        ResponseError::InvalidRequest,
                    ),
                    None => by_id(broker, &authz, requested.topic_id),
                });
            }
            entries
        }
    };
    if include_topic_operations {
        for t in topics
            .iter_mut()
            .filter(|t| t.error_code != ResponseError::TopicAuthorizationFailed.code())
        {
            if let Some(name) = &t.name {
                t.topic_authorized_operations =
                    authz.authorized_operations(ResourceType::Topic, name.as_str());
            }
        }
    }
    let cluster_operations = if !include_cluster_operations {
        AUTHORIZED_OPERATIONS_OMITTED
    } else if authz.cluster(AclOperation::Describe) {
        authz.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
    } else {
        0
    };
    MetadataResponse::default()
        .with_brokers(brokers(broker, listener))
        .with_cluster_id(Some(str_bytes(broker.cluster_id.clone())))
        // Kafka's KRaft brokers name a live broker as "controller": admin clients send
        // controller-bound requests there, and brokers forward them.
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(cluster_operations)
}

/// The brokers clients may connect to: registered and not fenced (this broker always).
fn brokers(broker: &Broker, listener: &str) -> Vec<MetadataResponseBroker> {
    broker
        .serving_brokers_on(listener)
        .into_iter()
        .map(|b| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id))
                .with_host(str_bytes(b.host))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.map(str_bytes))
        })
        .collect()
}

/// The CreateTopics version of an auto-creation (Kafka's newest the controller serves).
const AUTO_CREATE_VERSION: i16 = 7;

async fn by_name(
    broker: &Arc<Broker>,
    authz: &Authz<'_>,
    name: &TopicName,
    allow_auto_create: bool,
    client: crate::cluster::controller_channel::ForwardedFor<'_>,
) -> MetadataResponseTopic {
    if let Some(topic) = broker.topic(name) {
        return topic_entry(&topic);
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
    // Auto-creation needs CREATE on the cluster or on the topic (Kafka checks the cluster
    // quietly first).
    if !authz.allows_quietly(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME)
        && !authz.topic(AclOperation::Create, name.as_str())
    {
        return error_entry(
            Some(name.clone()),
            Uuid::nil(),
            ResponseError::TopicAuthorizationFailed,
        );
    }
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1)])
        .with_timeout_ms(AUTO_CREATE_TIMEOUT_MS);
    // In an Envelope naming the client, as Kafka's AutoTopicCreationManager sends it: the
    // creation is authorized as the client's and charged to its controller_mutation_rate.
    let answer: Result<CreateTopicsResponse, _> = broker
        .controller()
        .forward_enveloped(ApiKey::CreateTopics, AUTO_CREATE_VERSION, &request, client)
        .await;
    let code = match answer {
        // Over its mutation quota the client sees the topic as not ready yet and asks again
        // (Kafka answers auto-creations before they are done and only logs their errors).
        Ok(response) => match response.topics.first().map_or(-1, |t| t.error_code) {
            code if code == ResponseError::ThrottlingQuotaExceeded.code() => {
                ResponseError::LeaderNotAvailable.code()
            }
            code => code,
        },
        Err(_) => ResponseError::LeaderNotAvailable.code(),
    };
    if code == 0 {
        info!(topic = %name.as_str(), "auto-created topic");
    }
    // Created now or by a concurrent request: wait for it to reach this broker's metadata.
    if code == 0 || code == ResponseError::TopicAlreadyExists.code() {
        let wanted = name.to_string();
        broker
            .await_image(AUTO_CREATE_WAIT_MS, |image| {
                image.topic_id(&wanted).is_some()
            })
            .await;
        if let Some(topic) = broker.topic(name) {
            return topic_entry(&topic);
        }
        return error_entry(
            Some(name.clone()),
            Uuid::nil(),
            ResponseError::LeaderNotAvailable,
        );
    }
    let error = ResponseError::try_from_code(code).unwrap_or(ResponseError::LeaderNotAvailable);
    error_entry(Some(name.clone()), Uuid::nil(), error)
}

fn by_id(broker: &Arc<Broker>, authz: &Authz<'_>, id: Uuid) -> MetadataResponseTopic {
    match broker.topic_by_id(id) {
        // Topic ids are not secret: the id is answered, the name is not.
        Some(topic) if !authz.topic(AclOperation::Describe, &topic.name) => {
            error_entry(None, id, ResponseError::TopicAuthorizationFailed)
        }
        Some(topic) => topic_entry(&topic),
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

fn ids(list: &[i32]) -> Vec<BrokerId> {
    list.iter().copied().map(BrokerId).collect()
}

fn topic_entry(topic: &TopicView) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            // No leader: LEADER_NOT_AVAILABLE, so clients wait and ask again.
            let error = if p.leader.is_some() {
                0
            } else {
                ResponseError::LeaderNotAvailable.code()
            };
            MetadataResponsePartition::default()
                .with_error_code(error)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(p.leader.unwrap_or(-1)))
                .with_leader_epoch(p.leader_epoch)
                .with_isr_nodes(ids(&p.isr))
                .with_replica_nodes(ids(&p.replicas))
                .with_offline_replicas(ids(&p.offline))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_error_code(0)
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(topic.id)
        .with_is_internal(topic.name == crate::coordinator::OFFSETS_TOPIC)
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
