//! DescribeClientQuotas (48): Keel keeps no client quotas yet (quotas are the next issue), so
//! every valid filter matches nothing — which is what `kafka-configs --describe --entity-type
//! users` asks first, before it describes the users' SCRAM credentials. The filter is checked
//! as Kafka's `ClientQuotasImage.describe` checks it, with its errors and messages.

use std::collections::BTreeSet;

use keel_wire::kafka_protocol::messages::{
    DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

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

/// DescribeClientQuotas: no entries for a valid filter, Kafka's error for an invalid one.
pub fn describe(
    broker: &crate::broker::Broker,
    session: &crate::connection::Session,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    // Kafka: DESCRIBE_CONFIGS on the cluster.
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeClientQuotas,
    );
    if !authz.cluster(keel_controller::acl::AclOperation::DescribeConfigs) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(keel_wire::ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "Cluster authorization failed.",
            )))
            .with_entries(None);
    }
    describe_allowed(&request)
}

/// DescribeClientQuotas for a session allowed to ask.
fn describe_allowed(request: &DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    match check(request) {
        Ok(()) => DescribeClientQuotasResponse::default()
            .with_error_code(0)
            .with_error_message(None)
            .with_entries(Some(Vec::new())),
        Err((error, message)) => DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_string(message)))
            .with_entries(None),
    }
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
        let r =
            describe_allowed(&DescribeClientQuotasRequest::default().with_components(components));
        (
            r.error_code,
            r.error_message.map(|m| m.to_string()),
            r.entries.map(|e| e.len()),
        )
    }

    // Shows: kafka-configs' filters (a user by name, every user) match no quota — Keel has none
    // — and Kafka's ClientQuotasImage.describe refusals come with its codes and messages.
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
