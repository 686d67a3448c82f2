//! DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: the quotas are records of
//! the metadata log (`keel_controller::quota`). A description is answered from this broker's
//! image, its filter checked as Kafka's `ClientQuotasImage.describe` checks it, with its errors
//! and messages; an alteration needs ALTER_CONFIGS on the cluster, is forwarded to the
//! controller (which checks each entity, key and value as Kafka's `ClientQuotaControlManager`)
//! and answered once this broker's image shows it, so the quota holds for the next request.

use std::collections::BTreeSet;
use std::sync::Arc;

use keel_controller::quota::{self, Match, QuotaEntity};
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntityData, EntryData as AlterEntryData,
};
use keel_wire::kafka_protocol::messages::describe_client_quotas_response::{
    EntityData, EntryData, ValueData,
};
use keel_wire::kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use crate::broker::Broker;

/// How long the broker waits for a change to reach its own image before answering.
const METADATA_WAIT_MS: u64 = 5_000;

/// Kafka's `ClientQuotaEntity` types.
const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// Kafka's `ClientQuotaFilterComponent` match types.
const MATCH_TYPE_EXACT: i8 = 0;
const MATCH_TYPE_DEFAULT: i8 = 1;
const MATCH_TYPE_SPECIFIED: i8 = 2;

/// The filter's error, if any, in Kafka's order.
fn check(request: &DescribeClientQuotasRequest) -> Result<(), (ResponseError, String)> {
    let invalid = |m: String| (ResponseError::InvalidRequest, m);
    let mut seen = BTreeSet::new();
    for c in &request.components {
        let entity = c.entity_type.as_str();
        if entity.is_empty() {
            return Err(invalid("Invalid empty entity type.".into()));
        }
        if !seen.insert(entity) {
            return Err(invalid(format!(
                "Entity type {entity} cannot appear more than once in the filter."
            )));
        }
        if ![IP, USER, CLIENT_ID].contains(&entity) {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {entity}"),
            ));
        }
        match (c.match_type, &c._match) {
            (MATCH_TYPE_EXACT, None) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ))
            }
            (MATCH_TYPE_DEFAULT, Some(_)) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                ))
            }
            (MATCH_TYPE_SPECIFIED, Some(_)) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ))
            }
            (MATCH_TYPE_EXACT | MATCH_TYPE_DEFAULT | MATCH_TYPE_SPECIFIED, _) => {}
            (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
        }
    }
    if seen.contains(IP) && (seen.contains(USER) || seen.contains(CLIENT_ID)) {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be \
             used with user or clientId filter component."
                .into(),
        ));
    }
    Ok(())
}

/// DescribeClientQuotas from this broker's image; Kafka's error for an invalid filter.
pub fn describe(
    broker: &Broker,
    session: &crate::connection::Session,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    // Kafka: DESCRIBE_CONFIGS on the cluster.
    let authz = super::authz::Authz::new(broker, session, ApiKey::DescribeClientQuotas);
    if !authz.cluster(keel_controller::acl::AclOperation::DescribeConfigs) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "Cluster authorization failed.",
            )))
            .with_entries(None);
    }
    describe_from(&broker.image(), &request)
}

/// DescribeClientQuotas answered from `image` (a broker's, or a controller's committed one).
pub(crate) fn describe_from(
    image: &ClusterImage,
    request: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    if let Err((error, message)) = check(request) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_string(message)))
            .with_entries(None);
    }
    let filter: Vec<(String, Match)> = request
        .components
        .iter()
        .map(|c| {
            let m = match c.match_type {
                MATCH_TYPE_SPECIFIED => Match::Specified,
                _ => Match::Exact(c._match.as_ref().map(|m| m.to_string())),
            };
            (c.entity_type.to_string(), m)
        })
        .collect();
    let entries = image
        .client_quotas()
        .iter()
        .filter(|(entity, _)| quota::matches(entity, &filter, request.strict))
        .map(|(entity, keys)| {
            EntryData::default()
                .with_entity(
                    entity
                        .0
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(StrBytes::from_string(t.clone()))
                                .with_entity_name(n.clone().map(StrBytes::from_string))
                        })
                        .collect(),
                )
                .with_values(
                    keys.iter()
                        .map(|(k, v)| {
                            ValueData::default()
                                .with_key(StrBytes::from_string(k.clone()))
                                .with_value(v.0)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default()
        .with_error_code(0)
        .with_error_message(None)
        .with_entries(Some(entries))
}

/// The controller's alterations of a request: each entry's entity as given, and each op's new
/// value (`None`: remove).
pub(crate) fn alterations_of(
    request: &AlterClientQuotasRequest,
) -> Vec<keel_controller::QuotaAlteration> {
    request
        .entries
        .iter()
        .map(|e| keel_controller::QuotaAlteration {
            entity: e
                .entity
                .iter()
                .map(|d| {
                    (
                        d.entity_type.to_string(),
                        d.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                .collect(),
        })
        .collect()
}

/// AlterClientQuotas' answer: each entry's entity, with its error.
pub(crate) fn alter_results(
    request: &AlterClientQuotasRequest,
    results: &[Result<(), (i16, String)>],
) -> AlterClientQuotasResponse {
    AlterClientQuotasResponse::default().with_entries(
        request
            .entries
            .iter()
            .zip(results)
            .map(|(e, r)| {
                let (code, message) = match r {
                    Ok(()) => (0, None),
                    Err((code, message)) => (*code, Some(StrBytes::from_string(message.clone()))),
                };
                AlterEntryData::default()
                    .with_error_code(code)
                    .with_error_message(message)
                    .with_entity(
                        e.entity
                            .iter()
                            .map(|d| {
                                AlterEntityData::default()
                                    .with_entity_type(d.entity_type.clone())
                                    .with_entity_name(d.entity_name.clone())
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// Every entry of `request` failed with `code` and `message`.
pub(crate) fn alter_failed(
    request: &AlterClientQuotasRequest,
    code: i16,
    message: &str,
) -> AlterClientQuotasResponse {
    let results = vec![Err((code, message.to_string())); request.entries.len()];
    alter_results(request, &results)
}

/// Whether `image` shows every change of the entries the controller accepted.
fn applied(image: &ClusterImage, request: &AlterClientQuotasRequest, ok: &BTreeSet<usize>) -> bool {
    alterations_of(request)
        .iter()
        .enumerate()
        .filter(|(i, _)| ok.contains(i))
        .all(|(_, a)| {
            let entity = QuotaEntity(a.entity.iter().cloned().collect());
            let keys = image.client_quotas().get(&entity);
            a.ops.iter().all(|(key, value)| {
                let now = keys.and_then(|k| k.get(key)).map(|v| v.0);
                match value {
                    None => now.is_none(),
                    Some(v) => now.map(f64::to_bits) == Some(v.to_bits()),
                }
            })
        })
}

/// AlterClientQuotas on a broker: forwarded to the controller.
pub async fn alter(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AlterClientQuotasRequest,
    version: i16,
) -> AlterClientQuotasResponse {
    // Kafka: ALTER_CONFIGS on the cluster, else every entry CLUSTER_AUTHORIZATION_FAILED.
    let authz = super::authz::Authz::new(broker, session, ApiKey::AlterClientQuotas);
    if !authz.cluster(keel_controller::acl::AclOperation::AlterConfigs) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        return alter_failed(&request, code, "Cluster authorization failed.");
    }
    let answer: AlterClientQuotasResponse = match broker
        .controller()
        .forward(ApiKey::AlterClientQuotas, version, &request)
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return alter_failed(&request, e.code(), e.message.as_deref().unwrap_or_default());
        }
    };
    let ok: BTreeSet<usize> = answer
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.error_code == 0)
        .map(|(i, _)| i)
        .collect();
    if !ok.is_empty() && !request.validate_only && answer.entries.len() == request.entries.len() {
        broker
            .await_image(METADATA_WAIT_MS, |image| applied(image, &request, &ok))
            .await;
    }
    answer
}

#[cfg(test)]
mod tests {
    use keel_wire::kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    use super::*;

    fn component(entity: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(StrBytes::from_string(entity.into()))
            .with_match_type(match_type)
            .with_match(name.map(|n| StrBytes::from_string(n.into())))
    }

    fn answer(components: Vec<ComponentData>) -> (i16, Option<String>, Option<usize>) {
        let r = describe_from(
            &ClusterImage::new(),
            &DescribeClientQuotasRequest::default().with_components(components),
        );
        (
            r.error_code,
            r.error_message.map(|m| m.to_string()),
            r.entries.map(|e| e.len()),
        )
    }

    // Shows: kafka-configs' filters (a user by name, every user) match nothing in an image
    // without quotas, and Kafka's ClientQuotasImage.describe refusals come with its codes and
    // messages.
    #[test]
    fn no_quotas_and_kafkas_filter_checks() {
        assert_eq!(
            answer(vec![component(USER, 0, Some("alice"))]),
            (0, None, Some(0))
        );
        assert_eq!(answer(vec![component(USER, 2, None)]), (0, None, Some(0)));
        assert_eq!(answer(vec![]), (0, None, Some(0)));
        let refused = |components| {
            let (code, message, entries) = answer(components);
            assert_eq!(entries, None);
            (code, message.unwrap())
        };
        let invalid = ResponseError::InvalidRequest.code();
        assert_eq!(
            refused(vec![component("", 0, Some("a"))]),
            (invalid, "Invalid empty entity type.".into())
        );
        assert_eq!(
            refused(vec![component(USER, 2, None), component(USER, 1, None)]).0,
            invalid
        );
        assert_eq!(
            refused(vec![component("group", 2, None)]).0,
            ResponseError::UnsupportedVersion.code()
        );
        assert_eq!(refused(vec![component(USER, 0, None)]).0, invalid);
        assert_eq!(refused(vec![component(USER, 1, Some("a"))]).0, invalid);
        assert_eq!(refused(vec![component(USER, 2, Some("a"))]).0, invalid);
        assert_eq!(
            refused(vec![component(USER, 7, None)]),
            (invalid, "Unknown match type 7".into())
        );
        assert_eq!(
            refused(vec![component(IP, 2, None), component(CLIENT_ID, 2, None)]).0,
            invalid
        );
    }
}
