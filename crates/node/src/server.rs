//! The broker listener: the shared connection loop ([`crate::connection`]) with the broker's
//! API set — decode a frame into a broker request, dispatch it to [`crate::handlers`], or answer
//! an unsupported ApiVersions version with the v0 fallback (KIP-511).

use std::sync::Arc;

use bytes::Bytes;
use keel_wire::request;
use keel_wire::response;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::connection::{self, Reply, RequestHandler, Session};
use crate::handlers;
use crate::security::ListenerSecurity;

/// Answers broker requests.
#[derive(Debug, Clone)]
pub struct BrokerHandler(pub Arc<Broker>);

impl RequestHandler for BrokerHandler {
    fn request_metrics(&self) -> Option<&crate::metrics::RequestMetrics> {
        Some(&self.0.request_metrics)
    }

    fn connection_throttle_ms(&self, peer: &str, listener: &str) -> u64 {
        self.0.connection_throttle_ms(peer, listener)
    }

    async fn handle(&self, frame: Bytes, session: &mut Session) -> Reply {
        if keel_wire::keel_rpc::peek_api_key(&frame)
            == Some(keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY)
        {
            return handlers::replica_log_info::handle(&self.0, session, frame);
        }
        let request_bytes = frame.len();
        // The request's handler time, its decoding included (request_percentage).
        let time = crate::quotas::HandlerTime::default();
        match time.poll(|| request::decode(frame)) {
            Ok(decoded) => {
                let mut answering = std::pin::pin!(handlers::dispatch(
                    &self.0,
                    decoded,
                    session,
                    request_bytes,
                    &time
                ));
                let answered = std::future::poll_fn(|cx| {
                    time.poll(|| std::future::Future::poll(answering.as_mut(), cx))
                })
                .await;
                match answered {
                    Ok(reply) => reply,
                    Err(e) => Reply::Reject(format!("cannot answer request: {e:#}")),
                }
            }
            Err(e) => match e.answerable_correlation_id() {
                Some(correlation_id) => match response::unsupported_api_versions(correlation_id) {
                    Ok(bytes) => Reply::Send(bytes),
                    Err(err) => Reply::Reject(format!("cannot answer ApiVersions: {err:#}")),
                },
                None => Reply::Reject(format!("undecodable request: {e}")),
            },
        }
    }
}

/// Accepts broker connections on one listener until `shutdown` is cancelled, then stops every
/// connection.
pub async fn serve<L: crate::net::Listener>(
    listener: L,
    broker: Arc<Broker>,
    security: Arc<ListenerSecurity>,
    shutdown: CancellationToken,
) {
    let max_bytes = broker.config.socket_request_max_bytes;
    connection::serve(
        listener,
        BrokerHandler(broker),
        max_bytes,
        security,
        shutdown,
    )
    .await;
}
