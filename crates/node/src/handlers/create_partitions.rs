//! CreatePartitions (key 37): forwarded to the controller, which assigns the new partitions'
//! replicas and commits them. The broker answers once its own metadata has them.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse,
};

use crate::broker::Broker;

/// How long the broker waits for new partitions to reach its metadata before answering.
const METADATA_WAIT_MS: u64 = 5_000;

pub async fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    mut request: CreatePartitionsRequest,
    version: i16,
    client_id: &str,
) -> CreatePartitionsResponse {
    // The refused topics are answered here, the rest forwarded.
    let authz = super::authz::Authz::new(broker, session, ApiKey::CreatePartitions);
    let refused = authorize(&authz, &mut request);
    if request.topics.is_empty() && !refused.is_empty() {
        return CreatePartitionsResponse::default().with_results(refused);
    }
    let forwarded_for = super::forwarded_for(session, client_id);
    let mut response = forward(broker, &request, version, forwarded_for).await;
    response.results.extend(refused);
    response
}

/// Kafka's authorization of CreatePartitions: ALTER on each topic. Takes the refused topics out
/// of `request`, answered with TOPIC_AUTHORIZATION_FAILED.
pub(crate) fn authorize(
    authz: &super::authz::Authz<'_>,
    request: &mut CreatePartitionsRequest,
) -> Vec<CreatePartitionsTopicResult> {
    let (allowed, refused): (Vec<_>, Vec<_>) = std::mem::take(&mut request.topics)
        .into_iter()
        .partition(|t| authz.topic(keel_controller::acl::AclOperation::Alter, t.name.as_str()));
    request.topics = allowed;
    refused
        .into_iter()
        .map(|t| {
            CreatePartitionsTopicResult::default()
                .with_name(t.name)
                .with_error_code(keel_wire::ResponseError::TopicAuthorizationFailed.code())
                .with_error_message(None)
        })
        .collect()
}

async fn forward(
    broker: &Arc<Broker>,
    request: &CreatePartitionsRequest,
    version: i16,
    forwarded_for: crate::cluster::controller_channel::ForwardedFor<'_>,
) -> CreatePartitionsResponse {
    let response: CreatePartitionsResponse = match broker
        .controller()
        .forward_enveloped(ApiKey::CreatePartitions, version, request, forwarded_for)
        .await
    {
        Ok(response) => response,
        Err(e) => {
            let e = super::controller_unavailable(e);
            let results = request
                .topics
                .iter()
                .map(|t| {
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_code(e.code())
                        .with_error_message(e.message_str())
                })
                .collect();
            return CreatePartitionsResponse::default().with_results(results);
        }
    };
    if !request.validate_only {
        let wanted_by_name: std::collections::BTreeMap<&str, i32> = request
            .topics
            .iter()
            .map(|t| (t.name.as_str(), t.count))
            .collect();
        let grown: Vec<(String, usize)> = response
            .results
            .iter()
            .filter(|r| r.error_code == 0)
            .filter_map(|r| {
                let count = *wanted_by_name.get(r.name.as_str())?;
                Some((r.name.to_string(), usize::try_from(count).ok()?))
            })
            .collect();
        if !grown.is_empty() {
            broker
                .await_image(METADATA_WAIT_MS, |image| {
                    grown.iter().all(|(name, count)| {
                        image
                            .topic_id(name)
                            .and_then(|id| image.topic(id))
                            .is_none_or(|t| t.partitions.len() >= *count)
                    })
                })
                .await;
        }
    }
    response
}
