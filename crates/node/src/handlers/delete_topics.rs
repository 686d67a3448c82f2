//! DeleteTopics (key 20): forwarded to the controller (by name, or by id from v6). With
//! `delete.topic.enable=false` this broker refuses (`TOPIC_DELETION_DISABLED`). The broker
//! answers once the deleted topics are gone from its own metadata.

use std::sync::Arc;

use keel_controller::types::TopicId;
use keel_wire::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use keel_wire::kafka_protocol::messages::{ApiKey, DeleteTopicsRequest, DeleteTopicsResponse};
use keel_wire::ResponseError;

use crate::broker::Broker;
use crate::error::ApiError;

/// How long the broker waits for deletions to reach its metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    mut request: DeleteTopicsRequest,
    version: i16,
    client_id: &str,
) -> DeleteTopicsResponse {
    // Kafka's controller: DESCRIBE, then DELETE, on each topic (a topic named by an unknown id
    // is left to the controller's UNKNOWN_TOPIC_ID). The refused are answered here.
    let authz = super::authz::Authz::new(broker, session, ApiKey::DeleteTopics);
    let refused = authorize(&authz, &broker.image(), &mut request);
    if request.topics.is_empty() && request.topic_names.is_empty() && !refused.is_empty() {
        return DeleteTopicsResponse::default().with_responses(refused);
    }
    let forwarded_for = super::forwarded_for(session, client_id);
    let mut response = delete(broker, request, version, forwarded_for).await;
    response.responses.extend(refused);
    response
}

/// Takes the topics the session may not delete out of `request`, answered with
/// TOPIC_AUTHORIZATION_FAILED (`image` names the topics given by id).
pub(crate) fn authorize(
    authz: &super::authz::Authz<'_>,
    image: &keel_controller::ClusterImage,
    request: &mut DeleteTopicsRequest,
) -> Vec<DeletableTopicResult> {
    use keel_controller::acl::AclOperation;
    let may_delete = |name: &str| {
        authz.topic(AclOperation::Describe, name) && authz.topic(AclOperation::Delete, name)
    };
    let code = ResponseError::TopicAuthorizationFailed.code();
    let mut refused = Vec::new();
    request.topic_names.retain(|n| {
        let ok = may_delete(n.as_str());
        if !ok {
            refused.push(
                DeletableTopicResult::default()
                    .with_name(Some(n.clone()))
                    .with_error_code(code),
            );
        }
        ok
    });
    request.topics.retain(|t| {
        let name = match &t.name {
            Some(n) => Some(n.to_string()),
            None => image
                .topic(TopicId(t.topic_id))
                .map(|topic| topic.name.clone()),
        };
        let ok = name.as_deref().is_none_or(&may_delete);
        if !ok {
            // A topic named by id: its name is not disclosed.
            refused.push(
                DeletableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_error_code(code),
            );
        }
        ok
    });
    refused
}

async fn delete(
    broker: &Arc<Broker>,
    request: DeleteTopicsRequest,
    version: i16,
    forwarded_for: crate::cluster::controller_channel::ForwardedFor<'_>,
) -> DeleteTopicsResponse {
    let refuse = |e: ApiError| {
        let responses = if version >= 6 {
            request
                .topics
                .iter()
                .map(|t| {
                    DeletableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_topic_id(t.topic_id)
                        .with_error_code(e.code())
                        .with_error_message(e.message_str())
                })
                .collect()
        } else {
            request
                .topic_names
                .iter()
                .map(|n| {
                    DeletableTopicResult::default()
                        .with_name(Some(n.clone()))
                        .with_error_code(e.code())
                        .with_error_message(e.message_str())
                })
                .collect()
        };
        DeleteTopicsResponse::default().with_responses(responses)
    };
    if !broker.config.delete_topic_enable {
        return refuse(ApiError::new(
            ResponseError::TopicDeletionDisabled,
            "delete.topic.enable is false",
        ));
    }
    // Before v6 answers carry no topic ids: note them now, by name, to wait for them below.
    let image = broker.image();
    let ids_by_name: std::collections::BTreeMap<String, uuid::Uuid> = request
        .topic_names
        .iter()
        .chain(request.topics.iter().filter_map(|t| t.name.as_ref()))
        .filter_map(|name| image.topic_id(name).map(|id| (name.to_string(), id.0)))
        .collect();
    drop(image);
    let response: DeleteTopicsResponse = match broker
        .controller()
        .forward_enveloped(ApiKey::DeleteTopics, version, &request, forwarded_for)
        .await
    {
        Ok(response) => response,
        Err(e) => return refuse(super::controller_unavailable(e)),
    };
    let deleted: Vec<TopicId> = response
        .responses
        .iter()
        .filter(|r| r.error_code == 0)
        .filter_map(|r| {
            if !r.topic_id.is_nil() {
                return Some(TopicId(r.topic_id));
            }
            let name = r.name.as_ref()?;
            ids_by_name.get(name.as_str()).map(|id| TopicId(*id))
        })
        .collect();
    if !deleted.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                deleted.iter().all(|id| image.topic(*id).is_none())
            })
            .await;
    }
    response
}
