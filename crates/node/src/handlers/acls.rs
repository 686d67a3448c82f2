//! DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1–3, as Kafka's `AclApis`.
//!
//! Without `authorizer.class.name` each answers `SECURITY_DISABLED` with Kafka's messages ("No
//! Authorizer is configured"), the `authorizer match { case None => ... }` branches — still worth
//! advertising: MirrorMaker 2 syncs ACLs by default and `kafka-acls.sh --list` fails on an API
//! the broker does not list, where `SECURITY_DISABLED` is the answer both treat as "no ACLs".
//!
//! With the authorizer: DescribeAcls needs DESCRIBE on the cluster and is answered from the
//! broker's metadata image; CreateAcls and DeleteAcls need ALTER on the cluster, are forwarded
//! to the controller (which checks each binding and commits the records) and answered once
//! this broker's own image shows the change, so the next request to it is decided by it.
//! A code Kafka does not know (UNKNOWN, or ANY in a creation) is `INVALID_REQUEST` for that
//! creation or filter (Kafka refuses the whole request when it parses it).

use std::sync::Arc;

use keel_controller::acl::{
    self, AclBinding, AclFilter, AclOperation, AclPermission, PatternFilter, PatternType,
    ResourceType, ANY_CODE,
};
use keel_controller::errors::{ApiError, ErrorCode};
use keel_controller::ClusterImage;
use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
use keel_wire::kafka_protocol::messages::create_acls_response::AclCreationResult;
use keel_wire::kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use keel_wire::kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::connection::Session;

/// Kafka's message for DescribeAcls without an authorizer.
const DESCRIBE_MESSAGE: &str = "No Authorizer is configured on the broker";
/// Kafka's message for CreateAcls and DeleteAcls without an authorizer.
const ALTER_MESSAGE: &str = "No Authorizer is configured.";
/// How long the broker waits for a change to reach its own image before answering.
const METADATA_WAIT_MS: u64 = 5_000;

// ---- the wire and the controller's types ----------------------------------------------------

fn unknown(what: &str, code: i8) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("unknown {what} code {code}"),
    )
}

/// The binding a creation asks for.
pub(crate) fn binding_of(c: &AclCreation) -> Result<AclBinding, ApiError> {
    Ok(AclBinding {
        resource_type: ResourceType::from_code(c.resource_type)
            .ok_or_else(|| unknown("resource type", c.resource_type))?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| unknown("pattern type", c.resource_pattern_type))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: AclOperation::from_code(c.operation)
            .ok_or_else(|| unknown("operation", c.operation))?,
        permission: AclPermission::from_code(c.permission_type)
            .ok_or_else(|| unknown("permission type", c.permission_type))?,
    })
}

/// The fields DescribeAcls' and DeleteAcls' filters share.
pub(crate) struct WireFilter<'a> {
    pub resource_type: i8,
    pub resource_name: Option<&'a StrBytes>,
    pub pattern_type: i8,
    pub principal: Option<&'a StrBytes>,
    pub host: Option<&'a StrBytes>,
    pub operation: i8,
    pub permission_type: i8,
}

/// A filter from the wire: ANY (1) is `None`; UNKNOWN (0) and codes Kafka does not know are
/// refused.
pub(crate) fn filter_of(w: WireFilter<'_>) -> Result<AclFilter, ApiError> {
    let any_or = |code: i8| code != ANY_CODE;
    Ok(AclFilter {
        resource_type: if any_or(w.resource_type) {
            Some(
                ResourceType::from_code(w.resource_type)
                    .ok_or_else(|| unknown("resource type", w.resource_type))?,
            )
        } else {
            None
        },
        resource_name: w.resource_name.map(|n| n.to_string()),
        pattern: PatternFilter::from_code(w.pattern_type)
            .ok_or_else(|| unknown("pattern type", w.pattern_type))?,
        principal: w.principal.map(|p| p.to_string()),
        host: w.host.map(|h| h.to_string()),
        operation: if any_or(w.operation) {
            Some(
                AclOperation::from_code(w.operation)
                    .ok_or_else(|| unknown("operation", w.operation))?,
            )
        } else {
            None
        },
        permission: if any_or(w.permission_type) {
            Some(
                AclPermission::from_code(w.permission_type)
                    .ok_or_else(|| unknown("permission type", w.permission_type))?,
            )
        } else {
            None
        },
    })
}

fn describe_filter(r: &DescribeAclsRequest) -> Result<AclFilter, ApiError> {
    filter_of(WireFilter {
        resource_type: r.resource_type_filter,
        resource_name: r.resource_name_filter.as_ref(),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref(),
        host: r.host_filter.as_ref(),
        operation: r.operation,
        permission_type: r.permission_type,
    })
}

/// The filters of a DeleteAcls request, each decoded on its own.
pub(crate) fn delete_filters(r: &DeleteAclsRequest) -> Vec<Result<AclFilter, ApiError>> {
    r.filters
        .iter()
        .map(|f| {
            filter_of(WireFilter {
                resource_type: f.resource_type_filter,
                resource_name: f.resource_name_filter.as_ref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref(),
                host: f.host_filter.as_ref(),
                operation: f.operation,
                permission_type: f.permission_type,
            })
        })
        .collect()
}

/// DescribeAcls answered from `image`: the matching bindings grouped by resource pattern
/// (Kafka's `DescribeAclsResponse.aclsResources`).
pub(crate) fn describe_from(image: &ClusterImage, r: &DescribeAclsRequest) -> DescribeAclsResponse {
    let filter = match describe_filter(r) {
        Ok(filter) => filter,
        Err(e) => {
            return DescribeAclsResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)))
        }
    };
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    let mut matching: Vec<&AclBinding> = image.acls().matching(&filter).map(|(_, b)| b).collect();
    matching.sort();
    for b in matching {
        let same = resources.last().is_some_and(|last| {
            last.resource_type == b.resource_type.code()
                && last.pattern_type == b.pattern_type.code()
                && *last.resource_name == *b.resource_name
        });
        if !same {
            resources.push(
                DescribeAclsResource::default()
                    .with_resource_type(b.resource_type.code())
                    .with_resource_name(str_bytes(b.resource_name.clone()))
                    .with_pattern_type(b.pattern_type.code()),
            );
        }
        let last = resources.last_mut().expect("pushed above");
        last.acls.push(
            AclDescription::default()
                .with_principal(str_bytes(b.principal.clone()))
                .with_host(str_bytes(b.host.clone()))
                .with_operation(b.operation.code())
                .with_permission_type(b.permission.code()),
        );
    }
    DescribeAclsResponse::default().with_resources(resources)
}

/// CreateAcls results in request order.
pub(crate) fn creation_results(results: &[Result<(), ApiError>]) -> CreateAclsResponse {
    CreateAclsResponse::default().with_results(
        results
            .iter()
            .map(|r| match r {
                Ok(()) => AclCreationResult::default(),
                Err(e) => AclCreationResult::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message.clone()))),
            })
            .collect(),
    )
}

/// DeleteAcls results in request order, each filter with the bindings it matched.
pub(crate) fn deletion_results(
    results: &[Result<Vec<AclBinding>, ApiError>],
) -> DeleteAclsResponse {
    DeleteAclsResponse::default().with_filter_results(
        results
            .iter()
            .map(|r| match r {
                Ok(bindings) => DeleteAclsFilterResult::default().with_matching_acls(
                    bindings
                        .iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type.code())
                                .with_resource_name(str_bytes(b.resource_name.clone()))
                                .with_pattern_type(b.pattern_type.code())
                                .with_principal(str_bytes(b.principal.clone()))
                                .with_host(str_bytes(b.host.clone()))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code())
                        })
                        .collect(),
                ),
                Err(e) => DeleteAclsFilterResult::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message.clone()))),
            })
            .collect(),
    )
}

/// Every creation refused with `code` and `message`.
fn create_failed(r: &CreateAclsRequest, code: i16, message: &str) -> CreateAclsResponse {
    CreateAclsResponse::default().with_results(
        r.creations
            .iter()
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message)))
            })
            .collect(),
    )
}

/// Every filter refused with `code` and `message`.
fn delete_failed(r: &DeleteAclsRequest, code: i16, message: &str) -> DeleteAclsResponse {
    DeleteAclsResponse::default().with_filter_results(
        r.filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message)))
            })
            .collect(),
    )
}

/// Kafka's message for a request refused on the cluster resource.
fn cluster_refused(operation: AclOperation) -> String {
    format!("Cluster authorization failed: {operation} on the cluster resource is not allowed")
}

// ---- the broker's handlers --------------------------------------------------------------------

/// DescribeAcls on a broker.
pub fn describe(
    broker: &Arc<Broker>,
    session: &Session,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let Some(authorizer) = broker.authorizer() else {
        return DescribeAclsResponse::default()
            .with_error_code(ResponseError::SecurityDisabled.code())
            .with_error_message(Some(str_bytes(DESCRIBE_MESSAGE)));
    };
    let image = broker.image();
    let context = session.request_context(ApiKey::DescribeAcls);
    if !authorizer.authorize(
        &image,
        &context,
        AclOperation::Describe,
        ResourceType::Cluster,
        acl::CLUSTER_NAME,
    ) {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes(cluster_refused(AclOperation::Describe))));
    }
    describe_from(&image, &request)
}

/// CreateAcls on a broker: forwarded to the controller.
pub async fn create(
    broker: &Arc<Broker>,
    session: &Session,
    request: CreateAclsRequest,
    version: i16,
) -> CreateAclsResponse {
    let Some(authorizer) = broker.authorizer() else {
        return create_failed(
            &request,
            ResponseError::SecurityDisabled.code(),
            ALTER_MESSAGE,
        );
    };
    let context = session.request_context(ApiKey::CreateAcls);
    if !authorizer.authorize(
        &broker.image(),
        &context,
        AclOperation::Alter,
        ResourceType::Cluster,
        acl::CLUSTER_NAME,
    ) {
        let code = ErrorCode::ClusterAuthorizationFailed.code();
        return create_failed(&request, code, &cluster_refused(AclOperation::Alter));
    }
    let answer: CreateAclsResponse = match broker
        .controller()
        .forward(ApiKey::CreateAcls, version, &request)
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return create_failed(&request, e.code(), e.message.as_deref().unwrap_or_default());
        }
    };
    let created: Vec<AclBinding> = request
        .creations
        .iter()
        .zip(&answer.results)
        .filter(|(_, r)| r.error_code == 0)
        .filter_map(|(c, _)| binding_of(c).ok())
        .collect();
    if !created.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                created.iter().all(|b| image.acls().id_of(b).is_some())
            })
            .await;
    }
    answer
}

/// DeleteAcls on a broker: forwarded to the controller.
pub async fn delete(
    broker: &Arc<Broker>,
    session: &Session,
    request: DeleteAclsRequest,
    version: i16,
) -> DeleteAclsResponse {
    let Some(authorizer) = broker.authorizer() else {
        return delete_failed(
            &request,
            ResponseError::SecurityDisabled.code(),
            ALTER_MESSAGE,
        );
    };
    let context = session.request_context(ApiKey::DeleteAcls);
    if !authorizer.authorize(
        &broker.image(),
        &context,
        AclOperation::Alter,
        ResourceType::Cluster,
        acl::CLUSTER_NAME,
    ) {
        let code = ErrorCode::ClusterAuthorizationFailed.code();
        return delete_failed(&request, code, &cluster_refused(AclOperation::Alter));
    }
    let answer: DeleteAclsResponse = match broker
        .controller()
        .forward(ApiKey::DeleteAcls, version, &request)
        .await
    {
        Ok(answer) => answer,
        Err(e) => {
            let e = super::controller_unavailable(e);
            return delete_failed(&request, e.code(), e.message.as_deref().unwrap_or_default());
        }
    };
    let removed: Vec<AclBinding> = answer
        .filter_results
        .iter()
        .filter(|r| r.error_code == 0)
        .flat_map(|r| &r.matching_acls)
        .filter_map(|m| {
            binding_of(
                &AclCreation::default()
                    .with_resource_type(m.resource_type)
                    .with_resource_name(m.resource_name.clone())
                    .with_resource_pattern_type(m.pattern_type)
                    .with_principal(m.principal.clone())
                    .with_host(m.host.clone())
                    .with_operation(m.operation)
                    .with_permission_type(m.permission_type),
            )
            .ok()
        })
        .collect();
    if !removed.is_empty() {
        broker
            .await_image(METADATA_WAIT_MS, |image| {
                removed.iter().all(|b| image.acls().id_of(b).is_none())
            })
            .await;
    }
    answer
}

#[cfg(test)]
mod tests {
    use keel_controller::records::{AccessControlEntryRecord, Record};
    use keel_controller::types::{AclId, MetadataOffset};
    use keel_wire::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;

    use super::*;

    fn creation(
        resource_type: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        op: i8,
        perm: i8,
    ) -> AclCreation {
        AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(str_bytes(name))
            .with_resource_pattern_type(pattern)
            .with_principal(str_bytes(principal))
            .with_host(str_bytes("*"))
            .with_operation(op)
            .with_permission_type(perm)
    }

    // Shows: creations and filters decode with Kafka's codes; UNKNOWN and ANY where a concrete
    // value is needed are refused with the field named.
    #[test]
    fn codes_decode_as_kafkas() {
        let b = binding_of(&creation(2, "t", 4, "User:a", 3, 3)).unwrap();
        assert_eq!(
            (b.resource_type, b.pattern_type, b.operation, b.permission),
            (
                ResourceType::Topic,
                PatternType::Prefixed,
                AclOperation::Read,
                AclPermission::Allow
            )
        );
        let e = binding_of(&creation(1, "t", 3, "User:a", 3, 3)).unwrap_err();
        assert!(e.message.contains("resource type"), "{}", e.message);
        assert!(
            binding_of(&creation(2, "t", 2, "User:a", 3, 3)).is_err(),
            "MATCH is a filter's"
        );
        assert!(
            binding_of(&creation(2, "t", 3, "User:a", 1, 3)).is_err(),
            "ANY operation"
        );
        let filters = delete_filters(&DeleteAclsRequest::default().with_filters(vec![
            DeleteAclsFilter::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_pattern_type_filter(2)
                .with_operation(1)
                .with_permission_type(1),
            DeleteAclsFilter::default().with_resource_type_filter(0),
        ]));
        let any = filters[0].as_ref().unwrap();
        assert_eq!(any.resource_type, None);
        assert_eq!(any.pattern, PatternFilter::Match);
        assert!(filters[1].is_err());
    }

    // Shows: DescribeAcls groups the matching bindings by resource pattern.
    #[test]
    fn describe_groups_bindings_by_resource() {
        let mut image = ClusterImage::new();
        for (i, c) in [
            creation(2, "t", 3, "User:a", 3, 3),
            creation(2, "t", 3, "User:b", 4, 3),
            creation(3, "g", 3, "User:a", 3, 2),
        ]
        .iter()
        .enumerate()
        {
            let offset = MetadataOffset(i as i64);
            let record = Record::AccessControlEntry(AccessControlEntryRecord {
                id: AclId::at(offset),
                binding: binding_of(c).unwrap(),
            });
            image.replay(offset, &record).unwrap();
        }
        let all = DescribeAclsRequest::default()
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_resource_type_filter(1)
            .with_pattern_type_filter(1)
            .with_operation(1)
            .with_permission_type(1);
        let answer = describe_from(&image, &all);
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.resources.len(), 2);
        let topic = answer
            .resources
            .iter()
            .find(|r| r.resource_type == 2)
            .unwrap();
        assert_eq!(topic.acls.len(), 2);
        let topics_only = describe_from(&image, &all.clone().with_resource_type_filter(2));
        assert_eq!(topics_only.resources.len(), 1);
        let bad = describe_from(&image, &all.with_pattern_type_filter(0));
        assert_eq!(bad.error_code, ErrorCode::InvalidRequest.code());
    }
}
