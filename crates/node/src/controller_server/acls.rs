//! CreateAcls (30), DeleteAcls (31) and DescribeAcls (29) on the controller listener: a
//! creation or deletion — forwarded by a broker, or sent by a client that talks to the
//! controllers directly — is decided and committed by the active controller
//! (`keel_controller::Controller::create_acls` / `delete_acls`, Kafka's `AclControlManager`);
//! a description is answered by any controller from its committed image. Without an
//! authorizer in the controller's configuration each answers `SECURITY_DISABLED`, as Kafka's
//! controller does.

use keel_controller::errors::{ApiError, ErrorCode};
use keel_wire::kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

use super::state::{CallError, ControllerHandle};
use super::Settings;
use crate::handlers::acls as wire;

/// Kafka's message without an authorizer.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

fn disabled() -> ApiError {
    ApiError::new(ErrorCode::SecurityDisabled, NO_AUTHORIZER)
}

/// CreateAcls, answered once its records are committed.
pub(super) async fn create(
    handle: &ControllerHandle,
    settings: &Settings,
    req: CreateAclsRequest,
) -> Result<CreateAclsResponse, CallError> {
    if settings.authorizer.is_none() {
        return Ok(wire::creation_results(&vec![
            Err(disabled());
            req.creations.len()
        ]));
    }
    let decoded: Vec<Result<_, ApiError>> = req.creations.iter().map(wire::binding_of).collect();
    let valid: Vec<_> = decoded
        .iter()
        .filter_map(|d| d.as_ref().ok().cloned())
        .collect();
    let mut committed = handle
        .call(move |s| s.commit(|c, now_ms| c.create_acls(&valid, now_ms)))
        .await?
        .into_iter();
    let results: Vec<Result<(), ApiError>> = decoded
        .into_iter()
        .map(|d| match d {
            Ok(binding) => {
                let result = committed.next().expect("one result per valid binding");
                if result.is_ok() {
                    tracing::info!(acl = %binding, "ACL created");
                }
                result
            }
            Err(e) => Err(e),
        })
        .collect();
    Ok(wire::creation_results(&results))
}

/// DeleteAcls, answered once its records are committed.
pub(super) async fn delete(
    handle: &ControllerHandle,
    settings: &Settings,
    req: DeleteAclsRequest,
) -> Result<DeleteAclsResponse, CallError> {
    if settings.authorizer.is_none() {
        return Ok(wire::deletion_results(&vec![
            Err(disabled());
            req.filters.len()
        ]));
    }
    let decoded = wire::delete_filters(&req);
    let valid: Vec<_> = decoded
        .iter()
        .filter_map(|d| d.as_ref().ok().cloned())
        .collect();
    let mut committed = handle
        .call(move |s| s.commit(|c, now_ms| c.delete_acls(&valid, now_ms)))
        .await?
        .into_iter();
    let results: Vec<_> = decoded
        .into_iter()
        .map(|d| match d {
            Ok(_) => {
                let result = committed.next().expect("one result per valid filter");
                for binding in result.iter().flatten() {
                    tracing::info!(acl = %binding, "ACL deleted");
                }
                result
            }
            Err(e) => Err(e),
        })
        .collect();
    Ok(wire::deletion_results(&results))
}

/// DescribeAcls from the committed image.
pub(super) fn describe(
    handle: &ControllerHandle,
    settings: &Settings,
    req: &DescribeAclsRequest,
) -> DescribeAclsResponse {
    if settings.authorizer.is_none() {
        return DescribeAclsResponse::default()
            .with_error_code(ErrorCode::SecurityDisabled.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "No Authorizer is configured on the broker",
            )));
    }
    handle
        .machine()
        .with_image(|image| wire::describe_from(image, req))
}
