//! The controller listener: the shared connection loop ([`crate::connection`]) with the
//! controller's API set — decode a frame into a controller request and dispatch it to the
//! controller task, or answer an unsupported ApiVersions version with the v0 fallback.

use std::sync::Arc;

use bytes::Bytes;
use keel_wire::keel_rpc;
use keel_wire::request;
use keel_wire::response;
use keel_wire::versions::ListenerKind;
use tokio_util::sync::CancellationToken;

use super::state::ControllerHandle;
use super::Settings;
use super::{authorize, dispatch};
use crate::connection::{self, Reply, RequestHandler, Session};
use crate::handlers::authz::Authz;
use crate::net::Listener;
use crate::raft::Raft;
use crate::security::ListenerSecurity;

/// Answers controller requests by sending events to the controller task.
#[derive(Clone)]
struct ControllerHandler {
    handle: ControllerHandle,
    raft: Raft,
    settings: Arc<Settings>,
}

impl std::fmt::Debug for ControllerHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandler").finish_non_exhaustive()
    }
}

impl RequestHandler for ControllerHandler {
    fn request_metrics(&self) -> Option<&crate::metrics::RequestMetrics> {
        Some(&self.settings.request_metrics)
    }

    async fn handle(&self, frame: Bytes, session: &mut Session) -> Reply {
        // The in-process channel's requests come from this process's broker, which authorized
        // its clients' requests before forwarding them.
        let authorizer = self
            .settings
            .authorizer
            .as_ref()
            .filter(|_| !self.settings.in_process);
        let machine = self.handle.machine();
        if let Some(key) = keel_rpc::peek_api_key(&frame).filter(|k| keel_rpc::is_raft_key(*k)) {
            let context = session.rpc_context(key, "Raft");
            if !authorize::raft_allowed(&Authz::on_controller(authorizer, machine, context)) {
                return Reply::Reject(format!(
                    "{} may not send Raft RPCs: it needs CLUSTER_ACTION on the cluster",
                    session.principal
                ));
            }
            return match crate::raft::rpc::handle(&self.raft, frame).await {
                Ok(bytes) => Reply::Send(bytes),
                Err(e) => Reply::Reject(format!("bad Raft RPC: {e}")),
            };
        }
        match request::decode_controller(frame) {
            Ok(decoded) => {
                let context = session.request_context(decoded.api_key);
                let authz = Authz::on_controller(authorizer, machine, context);
                // Mutations are charged to the sender, unless it is this process's broker (the
                // in-memory channel) or a broker or controller (by its CLUSTER_ACTION): a
                // broker forwards its clients' in Envelopes, which name them, and sends the
                // cluster's own (auto-created topics, __consumer_offsets) directly. Without an
                // authorizer other brokers' are charged to their principal, but at versions
                // that are only throttled, never refused.
                let cluster_own = self.settings.in_process
                    || (authorizer.is_some() && authorize::is_forwarder(&authz));
                let who = (!cluster_own).then(|| super::mutation_quota::Mutator {
                    user: session.principal.name.clone(),
                    client_id: decoded
                        .header
                        .client_id
                        .as_deref()
                        .unwrap_or_default()
                        .to_string(),
                });
                match dispatch::dispatch(
                    &self.handle,
                    &self.settings,
                    decoded,
                    &authz,
                    who.as_ref(),
                )
                .await
                {
                    Ok(bytes) => Reply::Send(bytes),
                    Err(e) => Reply::Reject(format!("controller cannot answer: {e}")),
                }
            }
            Err(e) => match e.answerable_correlation_id() {
                Some(correlation_id) => {
                    match response::unsupported_api_versions_on(
                        ListenerKind::Controller,
                        correlation_id,
                    ) {
                        Ok(bytes) => Reply::Send(bytes),
                        Err(err) => Reply::Reject(format!("cannot answer ApiVersions: {err:#}")),
                    }
                }
                None => Reply::Reject(format!("undecodable controller request: {e}")),
            },
        }
    }
}

/// Accepts connections until `shutdown` is cancelled, then aborts them all.
pub(super) async fn serve<L: Listener>(
    listener: L,
    handle: ControllerHandle,
    raft: Raft,
    settings: Arc<Settings>,
    security: Arc<ListenerSecurity>,
    shutdown: CancellationToken,
) {
    let max_bytes = settings.socket_request_max_bytes;
    connection::serve(
        listener,
        ControllerHandler {
            handle,
            raft,
            settings,
        },
        max_bytes,
        security,
        shutdown,
    )
    .await;
}
