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

use super::dispatch;
use super::state::ControllerHandle;
use super::Settings;
use crate::connection::{self, Reply, RequestHandler, Session};
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

    async fn handle(&self, frame: Bytes, _session: &mut Session) -> Reply {
        if keel_rpc::peek_api_key(&frame).is_some_and(keel_rpc::is_raft_key) {
            return match crate::raft::rpc::handle(&self.raft, frame).await {
                Ok(bytes) => Reply::Send(bytes),
                Err(e) => Reply::Reject(format!("bad Raft RPC: {e}")),
            };
        }
        match request::decode_controller(frame) {
            Ok(decoded) => match dispatch::dispatch(&self.handle, &self.settings, decoded).await {
                Ok(bytes) => Reply::Send(bytes),
                Err(e) => Reply::Reject(format!("controller cannot answer: {e}")),
            },
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
