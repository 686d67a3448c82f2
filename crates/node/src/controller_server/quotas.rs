//! AlterClientQuotas (49) on the controller listener (KIP-546): an alteration — forwarded by a
//! broker, or sent by a client that talks to the controllers directly — is checked and committed
//! by the active controller (`keel_controller::Controller::alter_client_quotas`, Kafka's
//! `ClientQuotaControlManager`).

use keel_wire::kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::state::{CallError, ControllerHandle};
use crate::handlers::client_quotas as wire;

/// AlterClientQuotas, answered once its records are committed.
pub(super) async fn alter(
    handle: &ControllerHandle,
    req: AlterClientQuotasRequest,
) -> Result<AlterClientQuotasResponse, CallError> {
    let alterations = wire::alterations_of(&req);
    let validate_only = req.validate_only;
    let results = handle
        .call(move |s| {
            s.commit(|c, now_ms| c.alter_client_quotas(&alterations, validate_only, now_ms))
        })
        .await?;
    let results: Vec<Result<(), (i16, String)>> = results
        .into_iter()
        .map(|r| r.map_err(|e| (e.code.code(), e.message)))
        .collect();
    for (entry, result) in req.entries.iter().zip(&results) {
        if result.is_ok() && !validate_only {
            let entity: Vec<String> = entry
                .entity
                .iter()
                .map(|d| {
                    format!(
                        "{}={}",
                        d.entity_type.as_str(),
                        d.entity_name.as_deref().unwrap_or("<default>")
                    )
                })
                .collect();
            tracing::info!(entity = %entity.join(", "), "client quotas altered");
        }
    }
    Ok(wire::alter_results(&req, &results))
}
