//! The connection loop shared by the broker and controller listeners: accept connections,
//! split each byte stream into frames, hand each frame to the listener's [`RequestHandler`],
//! write answers in request order (Kafka answers a connection's requests in order).
//!
//! A malformed or oversized frame closes *that* connection with a log line — at most one per
//! listener per [`MALFORMED_LOG_INTERVAL`], the next one saying how many were left out — and is
//! counted (`keel_malformed_requests_total`); nothing a client sends stops the process. On shutdown, buffered requests are not started and every
//! connection is aborted at its next await (a request's synchronous part — an append — is never
//! cut in half). Generic over the stream type so the simulator can drive it with its own sockets.
//!
//! Each connection first runs its listener's security ([`ListenerSecurity`]): a TLS handshake on
//! SSL listeners, then on SASL listeners the SASL exchange ([`SaslGate`]: until it completes
//! only ApiVersions and the SASL requests are answered, and frames are bounded by
//! `sasl.server.max.receive.size`). A failure closes the connection, is counted in
//! `keel_failed_authentication_total` and logged at most once per listener per
//! [`MALFORMED_LOG_INTERVAL`]. Requests are answered with a [`Session`]: the peer, the listener,
//! and the principal the connection authenticated as.

use std::future::Future;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use keel_wire::frame::{self, FrameError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::RequestMetrics;
use crate::net::{BoxStream, Listener};
use crate::security::sasl::gate::{illegal_state, SaslGate, Verdict};
use crate::security::{KafkaPrincipal, ListenerSecurity};

/// Initial read buffer per connection.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Back-off after a failed accept (usually EMFILE).
const ACCEPT_RETRY_MS: u64 = 100;

/// At most one malformed-request line per listener in this interval (a fuzzer sends thousands
/// a second); the lines left out are counted and the next line says how many.
pub const MALFORMED_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// One listener's rate limit for one kind of line (malformed requests, failed handshakes).
#[derive(Debug, Default)]
struct RateLimitedLog {
    state: std::sync::Mutex<RateLimitedLogState>,
}

#[derive(Debug, Default)]
struct RateLimitedLogState {
    /// When the last line was logged.
    last_logged: Option<tokio::time::Instant>,
    /// Lines left out since.
    suppressed: u64,
}

impl RateLimitedLog {
    /// Whether the malformed request seen at `now` is logged: `Some(n)`, with the `n` lines left
    /// out before it, at most once per [`MALFORMED_LOG_INTERVAL`]; `None` (counted) otherwise.
    fn admit(&self, now: tokio::time::Instant) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let due = state
            .last_logged
            .is_none_or(|last| now.duration_since(last) >= MALFORMED_LOG_INTERVAL);
        if !due {
            state.suppressed += 1;
            return None;
        }
        state.last_logged = Some(now);
        Some(std::mem::take(&mut state.suppressed))
    }
}

/// Who a connection's requests come from.
#[derive(Debug, Clone)]
pub struct Session {
    /// The network's description of the other end (`ip:port` over TCP).
    pub peer: String,
    /// The name of the listener the connection arrived on (as configured, e.g. `PLAINTEXT`).
    pub listener: Arc<str>,
    /// Who the connection authenticated as (`User:ANONYMOUS` without authentication).
    pub principal: KafkaPrincipal,
    /// Set by a handler whose client exceeded a quota: nothing more is read from the
    /// connection until then (KIP-219's muting; the response is sent first).
    pub muted_until: Option<tokio::time::Instant>,
}

impl Session {
    /// Who asks and from where, for the authorizer, in a request of `api`.
    pub fn request_context(
        &self,
        api: keel_wire::kafka_protocol::messages::ApiKey,
    ) -> crate::security::authorizer::RequestContext {
        self.rpc_context(api as i16, &format!("{api:?}"))
    }

    /// [`Session::request_context`] for an API `kafka-protocol` does not know (Keel's own RPCs).
    pub fn rpc_context(&self, key: i16, name: &str) -> crate::security::authorizer::RequestContext {
        crate::security::authorizer::RequestContext {
            principal: self.principal.to_string(),
            host: crate::security::authorizer::host_of(&self.peer),
            api_key: key,
            api: name.to_string(),
        }
    }

    /// A session of `peer` on listener `listener`, not authenticated.
    pub fn anonymous(peer: impl Into<String>, listener: &str) -> Session {
        Session {
            peer: peer.into(),
            listener: Arc::from(listener),
            principal: KafkaPrincipal::anonymous(),
            muted_until: None,
        }
    }
}

/// What the connection does after a request.
#[derive(Debug)]
pub enum Reply {
    /// Write these bytes (a size-prefixed response).
    Send(Bytes),
    /// Write these parts in order, vectored: a size-prefixed response whose large record sets
    /// are their own parts (a Fetch answer; see `keel_wire::response::encode_fetch`).
    SendParts(Vec<Bytes>),
    /// No response (Produce with `acks=0`).
    Nothing,
    /// Close the connection as Kafka does for this request (a failed `acks=0` Produce), with the
    /// reason for the log.
    Close(String),
    /// Close the connection: the request was malformed or could not be answered.
    Reject(String),
}

/// The most `iovec`s one vectored write is given.
const MAX_WRITE_SLICES: usize = 64;

/// Writes every part in order with vectored writes (several parts per system call where the
/// stream supports it; one at a time where it does not).
async fn write_parts<W: AsyncWrite + Unpin>(
    writer: &mut W,
    mut parts: Vec<Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < parts.len() {
        if parts[first].is_empty() {
            first += 1;
            continue;
        }
        let slices: Vec<std::io::IoSlice<'_>> = parts[first..]
            .iter()
            .filter(|p| !p.is_empty())
            .take(MAX_WRITE_SLICES)
            .map(|p| std::io::IoSlice::new(p))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let part = &mut parts[first];
            let step = written.min(part.len());
            part.advance(step);
            written -= step;
            if part.is_empty() {
                first += 1;
            }
        }
    }
    // Not optional over TLS: see `write_frame`.
    writer.flush().await
}

/// Writes one whole answer and flushes it. Every answer must be flushed: over TLS,
/// tokio-rustls's `poll_write` answers `Ready(n)` once rustls has taken the bytes even when the
/// socket write under it returned `Pending` (a spent cooperative budget is enough), and the bytes
/// then stay in rustls until the next write or flush — an answer left there is never sent while
/// the connection waits for the client's next request, which waits for that answer (issue 21).
async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// One listener's way of answering a frame (decode with its API set, dispatch, encode).
pub trait RequestHandler: Clone + Send + Sync + 'static {
    /// Answers one frame (without its size prefix) of a connection's `session`.
    fn handle(&self, frame: Bytes, session: &mut Session) -> impl Future<Output = Reply> + Send;

    /// Where this listener's request latency goes (`keel_request_latency_seconds`), if
    /// anywhere.
    fn request_metrics(&self) -> Option<&RequestMetrics> {
        None
    }

    /// How long a connection just accepted from `peer` on the listener named `listener` is
    /// held unanswered and then closed (an ip over its `connection_creation_rate`); 0: serve it.
    fn connection_throttle_ms(&self, _peer: &str, _listener: &str) -> u64 {
        0
    }
}

/// Accepts connections until `shutdown` is cancelled, then stops them all; when this returns no
/// request runs any more. Every connection first runs `security` (its TLS handshake).
pub async fn serve<L: Listener, H: RequestHandler>(
    mut listener: L,
    handler: H,
    max_request_bytes: usize,
    security: Arc<ListenerSecurity>,
    shutdown: CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    let malformed = Arc::new(RateLimitedLog::default());
    // Failed TLS handshakes and SASL exchanges.
    let handshakes = Arc::new(RateLimitedLog::default());
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let throttle_ms = handler.connection_throttle_ms(&peer, &security.name);
                    if throttle_ms > 0 {
                        // As Kafka's acceptor: not read, not answered, closed when the throttle
                        // ends, so a client reconnecting in a loop is slowed to the rate.
                        debug!(%peer, listener = %security.name, throttle_ms, "connection over its ip's connection_creation_rate: closing it unanswered");
                        let shutdown = shutdown.clone();
                        connections.spawn(async move {
                            tokio::select! {
                                () = shutdown.cancelled() => {}
                                () = tokio::time::sleep(std::time::Duration::from_millis(throttle_ms)) => {}
                            }
                            drop(stream);
                        });
                        while connections.try_join_next().is_some() {}
                        continue;
                    }
                    let (handler, shutdown) = (handler.clone(), shutdown.clone());
                    let (malformed, handshakes) = (malformed.clone(), handshakes.clone());
                    let security = security.clone();
                    connections.spawn(async move {
                        let secured = tokio::select! {
                            biased;
                            () = shutdown.cancelled() => return,
                            secured = secure(stream, &peer, &security, &handler, &handshakes) => secured,
                        };
                        let Some((stream, principal)) = secured else {
                            return;
                        };
                        let session = Session {
                            peer,
                            listener: Arc::from(security.name.as_str()),
                            principal,
                            muted_until: None,
                        };
                        let gate = security.sasl.clone().map(SaslGate::new);
                        handle_connection(
                            stream,
                            session,
                            gate,
                            handler,
                            max_request_bytes,
                            (&malformed, &handshakes),
                            shutdown,
                        )
                        .await;
                    });
                    // Reap finished connections so the set does not grow without bound.
                    while connections.try_join_next().is_some() {}
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(ACCEPT_RETRY_MS)).await;
                }
            },
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    info!("listener and connections stopped");
}

/// Runs the listener's transport security on a new connection: the TLS handshake of an SSL
/// listener. `None`: it failed (counted, logged rate-limited) and the connection is dropped.
async fn secure<H: RequestHandler>(
    stream: BoxStream,
    peer: &str,
    security: &ListenerSecurity,
    handler: &H,
    log: &RateLimitedLog,
) -> Option<(BoxStream, KafkaPrincipal)> {
    let Some(tls) = &security.tls else {
        return Some((stream, KafkaPrincipal::anonymous()));
    };
    match tls.accept(stream).await {
        Ok((stream, principal)) => {
            Some((stream, principal.unwrap_or_else(KafkaPrincipal::anonymous)))
        }
        Err(e) => {
            if let Some(metrics) = handler.request_metrics() {
                metrics.count_failed_authentication(&security.name, "TLS");
            }
            if let Some(suppressed) = log.admit(tokio::time::Instant::now()) {
                // A plaintext client on a TLS port fails the handshake with a corrupt record.
                let hint = match e.to_string().contains("corrupt message") {
                    true => " (a client without TLS? set security.protocol=SSL)",
                    false => "",
                };
                info!(%peer, listener = %security.name, error = %e, suppressed, "TLS handshake failed{hint}");
            }
            None
        }
    }
}

/// The first bytes of a TLS ClientHello (a handshake record of TLS 1.x): what a client speaking
/// TLS to a PLAINTEXT listener sends.
fn looks_like_tls(buffer: &[u8]) -> bool {
    crate::security::tls::record_type(buffer) == Some(crate::security::tls::HANDSHAKE_RECORD)
}

/// Why a connection ended.
#[derive(Debug)]
enum Closed {
    /// The client closed it.
    Eof,
    Shutdown,
    Io(std::io::Error),
    Frame(FrameError),
    Requested(String),
    Rejected(String),
    /// SASL authentication failed, or the client broke its protocol.
    Authentication {
        reason: String,
        mechanism: String,
    },
}

/// Serves one connection until the peer closes it, it misbehaves, or the process stops; on a
/// SASL listener `gate` authenticates it first.
async fn handle_connection<S, H>(
    stream: S,
    mut session: Session,
    mut gate: Option<SaslGate>,
    handler: H,
    max_request_bytes: usize,
    (malformed, auth_failures): (&RateLimitedLog, &RateLimitedLog),
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    H: RequestHandler,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let mut first = true;
    let closed = loop {
        let limit = gate
            .as_ref()
            .map_or(max_request_bytes, |g| g.frame_limit(max_request_bytes));
        let frame = match frame::take_frame(&mut buffer, limit) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                buffer.reserve(frame::missing_bytes(&buffer).max(4096));
                let read = tokio::select! {
                    biased;
                    () = shutdown.cancelled() => break Closed::Shutdown,
                    read = reader.read_buf(&mut buffer) => read,
                };
                match read {
                    Ok(0) => break Closed::Eof,
                    Ok(_) => continue,
                    Err(e) => break Closed::Io(e),
                }
            }
            Err(_) if first && looks_like_tls(&buffer) => {
                break Closed::Rejected(format!(
                    "the client speaks TLS to listener {}, which is PLAINTEXT (set \
                     security.protocol=PLAINTEXT, or connect to a TLS listener)",
                    session.listener
                ))
            }
            Err(e) => break Closed::Frame(e),
        };
        first = false;
        // A request already buffered when shutdown began is not started: its client will
        // retry elsewhere or later, and nothing may append after the logs are closed.
        if shutdown.is_cancelled() {
            break Closed::Shutdown;
        }
        // SASL: the gate answers the SASL requests, and nothing else before authentication.
        if let Some(g) = gate.as_mut() {
            let verdict = g.on_frame(&frame);
            let passed = matches!(verdict, Verdict::Pass);
            let (answer, failed) = match verdict {
                Verdict::Pass => (None, None),
                Verdict::Answer(bytes) => (Some(bytes), None),
                Verdict::Authenticated { answer, principal } => {
                    debug!(peer = %session.peer, listener = %session.listener, %principal, "authenticated");
                    session.principal = principal;
                    (Some(answer), None)
                }
                Verdict::Fail {
                    answer,
                    reason,
                    mechanism,
                } => (answer, Some((reason, mechanism))),
            };
            if let Some(bytes) = answer {
                if let Err(e) = write_frame(&mut writer, &bytes).await {
                    break Closed::Io(e);
                }
            }
            if let Some((reason, mechanism)) = failed {
                let mechanism = mechanism.unwrap_or_else(|| "none".to_string());
                if let Some(metrics) = handler.request_metrics() {
                    metrics.count_failed_authentication(&session.listener, &mechanism);
                }
                break Closed::Authentication { reason, mechanism };
            }
            if !passed {
                continue;
            }
        } else if keel_wire::request::is_sasl(&frame) {
            match illegal_state(
                &frame,
                "SaslAuthenticate request received after successful authentication",
            ) {
                Some(bytes) => {
                    if let Err(e) = write_frame(&mut writer, &bytes).await {
                        break Closed::Io(e);
                    }
                    continue;
                }
                None => break Closed::Rejected("undecodable SASL request".into()),
            }
        }
        // Latency is from the whole frame's arrival to the answer being ready (Kafka's
        // TotalTimeMs less the response send); tokio's clock, so a simulation measures its own
        // time.
        let api_key = keel_wire::keel_rpc::peek_api_key(&frame);
        let started = tokio::time::Instant::now();
        let reply = handler.handle(frame, &mut session).await;
        if let Some(metrics) = handler.request_metrics() {
            metrics.observe(api_key, started.elapsed().as_secs_f64());
        }
        match reply {
            Reply::Send(bytes) => {
                if let Err(e) = write_frame(&mut writer, &bytes).await {
                    break Closed::Io(e);
                }
            }
            Reply::SendParts(parts) => {
                if let Err(e) = write_parts(&mut writer, parts).await {
                    break Closed::Io(e);
                }
            }
            Reply::Nothing => {}
            Reply::Close(reason) => break Closed::Requested(reason),
            Reply::Reject(reason) => break Closed::Rejected(reason),
        }
        // A throttled client: its next request is not read before the throttle ends.
        if let Some(until) = session.muted_until.take() {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break Closed::Shutdown,
                () = tokio::time::sleep_until(until) => {}
            }
        }
    };
    let admit_malformed = || {
        if let Some(metrics) = handler.request_metrics() {
            metrics.count_malformed();
        }
        malformed.admit(tokio::time::Instant::now())
    };
    let peer = &session.peer;
    match closed {
        Closed::Eof | Closed::Shutdown => debug!(%peer, "connection closed"),
        Closed::Io(e) => debug!(%peer, error = %e, "connection closed by an I/O error"),
        Closed::Frame(e) => {
            if let Some(suppressed) = admit_malformed() {
                warn!(%peer, error = %e, suppressed, "closing connection: bad frame");
            }
        }
        Closed::Requested(reason) => info!(%peer, %reason, "closing connection"),
        Closed::Authentication { reason, mechanism } => {
            if let Some(suppressed) = auth_failures.admit(tokio::time::Instant::now()) {
                info!(%peer, listener = %session.listener, %mechanism, %reason, suppressed, "authentication failed");
            }
        }
        Closed::Rejected(reason) => {
            if let Some(suppressed) = admit_malformed() {
                warn!(%peer, %reason, suppressed, "closing connection");
            }
        }
    }
    let _ = writer.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: malformed-request lines are rate-limited to one per MALFORMED_LOG_INTERVAL per
    // listener, and the next line carries the count of those left out (issue 19: a fuzzer made
    // 23,378 lines in 4 minutes).
    #[test]
    fn malformed_lines_are_rate_limited_with_a_count() {
        let log = RateLimitedLog::default();
        let start = tokio::time::Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        assert_eq!(log.admit(at(0)), Some(0));
        let logged: Vec<Option<u64>> = (1..=999).map(|ms| log.admit(at(ms))).collect();
        assert!(logged.iter().all(Option::is_none), "{logged:?}");
        assert_eq!(log.admit(at(1_000)), Some(999));
        assert_eq!(log.admit(at(1_500)), None);
        assert_eq!(log.admit(at(5_000)), Some(1));
        assert_eq!(log.admit(at(6_000)), Some(0));
    }
}
