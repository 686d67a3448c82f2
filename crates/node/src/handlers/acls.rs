//! DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1–3: Keel has no authorizer yet (a
//! configuration asking for one does not start: `config.rs`), so each is answered as Kafka's
//! broker answers them without `authorizer.class.name` — `SECURITY_DISABLED` with "No Authorizer
//! is configured" (Kafka: `AclApis.handleDescribeAcls` / `handleCreateAcls` / `handleDeleteAcls`,
//! the `authorizer match { case None => ... }` branches). Advertising them matters: MirrorMaker 2
//! syncs ACLs by default and `kafka-acls.sh --list` fails on an API the broker does not list,
//! where `SECURITY_DISABLED` is the answer both treat as "no ACLs here".

use keel_wire::kafka_protocol::messages::create_acls_response::AclCreationResult;
use keel_wire::kafka_protocol::messages::delete_acls_response::DeleteAclsFilterResult;
use keel_wire::kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use keel_wire::ResponseError;

use super::str_bytes;

/// Kafka's message for DescribeAcls without an authorizer.
const DESCRIBE_MESSAGE: &str = "No Authorizer is configured on the broker";
/// Kafka's message for CreateAcls and DeleteAcls without an authorizer.
const ALTER_MESSAGE: &str = "No Authorizer is configured.";

/// DescribeAcls: one top-level `SECURITY_DISABLED`.
pub fn describe(_request: DescribeAclsRequest) -> DescribeAclsResponse {
    DescribeAclsResponse::default()
        .with_error_code(ResponseError::SecurityDisabled.code())
        .with_error_message(Some(str_bytes(DESCRIBE_MESSAGE)))
}

/// CreateAcls: `SECURITY_DISABLED` for every creation, in request order (Kafka's
/// `CreateAclsRequest.getErrorResponse`).
pub fn create(request: CreateAclsRequest) -> CreateAclsResponse {
    let results = request
        .creations
        .iter()
        .map(|_| {
            AclCreationResult::default()
                .with_error_code(ResponseError::SecurityDisabled.code())
                .with_error_message(Some(str_bytes(ALTER_MESSAGE)))
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// DeleteAcls: `SECURITY_DISABLED` for every filter, in request order, no matching ACLs
/// (Kafka's `DeleteAclsRequest.getErrorResponse`).
pub fn delete(request: DeleteAclsRequest) -> DeleteAclsResponse {
    let results = request
        .filters
        .iter()
        .map(|_| {
            DeleteAclsFilterResult::default()
                .with_error_code(ResponseError::SecurityDisabled.code())
                .with_error_message(Some(str_bytes(ALTER_MESSAGE)))
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}

#[cfg(test)]
mod tests {
    use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
    use keel_wire::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    use super::*;

    // Shows: without an authorizer every ACL API answers SECURITY_DISABLED (54) with Kafka's
    // messages, one result per creation and per filter (Kafka: AclApis, the `None` branches).
    #[test]
    fn every_acl_api_answers_security_disabled() {
        let d = describe(DescribeAclsRequest::default());
        assert_eq!(d.error_code, 54);
        assert_eq!(d.error_message.as_deref(), Some(DESCRIBE_MESSAGE));
        let c = create(
            CreateAclsRequest::default()
                .with_creations(vec![AclCreation::default(), AclCreation::default()]),
        );
        assert_eq!(c.results.len(), 2);
        assert!(c.results.iter().all(|r| r.error_code == 54));
        let del = delete(DeleteAclsRequest::default().with_filters(vec![
            DeleteAclsFilter::default(),
            DeleteAclsFilter::default(),
            DeleteAclsFilter::default(),
        ]));
        assert_eq!(del.filter_results.len(), 3);
        assert!(del
            .filter_results
            .iter()
            .all(|r| r.error_code == 54 && r.matching_acls.is_empty()));
    }
}
