//! The controller listener's network side, following the broker's `server` module: accept
//! connections, split each byte stream into frames, decode with the controller's API set,
//! dispatch, and write answers in request order. A malformed or oversized frame closes that
//! connection only; shutdown aborts every connection. Generic over the stream type so the
//! simulator can drive it with its own sockets.

use std::sync::Arc;

use bytes::BytesMut;
use keel_wire::frame::{self, FrameError};
use keel_wire::request::{self, DecodeError};
use keel_wire::response;
use keel_wire::versions::ListenerKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::dispatch::{self, DispatchError};
use super::state::ControllerHandle;
use super::Settings;

/// Initial read buffer per connection.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// Back-off after a failed accept (usually EMFILE).
const ACCEPT_RETRY_MS: u64 = 100;

/// Accepts connections until `shutdown` is cancelled, then aborts them all.
pub(super) async fn serve(
    listener: TcpListener,
    handle: ControllerHandle,
    settings: Arc<Settings>,
    shutdown: CancellationToken,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let handle = handle.clone();
                    let settings = settings.clone();
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        handle_connection(stream, peer.to_string(), handle, settings, shutdown)
                            .await;
                    });
                    while connections.try_join_next().is_some() {}
                }
                Err(e) => {
                    warn!(error = %e, "controller accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(ACCEPT_RETRY_MS)).await;
                }
            },
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    debug!("controller listener and connections stopped");
}

/// Why a connection ended.
#[derive(Debug)]
enum Closed {
    Eof,
    Shutdown,
    Io(std::io::Error),
    Frame(FrameError),
    Decode(DecodeError),
    Dispatch(DispatchError),
}

/// Serves one connection until the peer closes it, it misbehaves, or the controller stops.
pub(super) async fn handle_connection<S>(
    stream: S,
    peer: String,
    handle: ControllerHandle,
    settings: Arc<Settings>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let closed = loop {
        let frame = match frame::take_frame(&mut buffer, settings.socket_request_max_bytes) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                buffer.reserve(frame::missing_bytes(&buffer).max(4096));
                let read = tokio::select! {
                    () = shutdown.cancelled() => break Closed::Shutdown,
                    read = reader.read_buf(&mut buffer) => read,
                };
                match read {
                    Ok(0) => break Closed::Eof,
                    Ok(_) => continue,
                    Err(e) => break Closed::Io(e),
                }
            }
            Err(e) => break Closed::Frame(e),
        };
        if shutdown.is_cancelled() {
            break Closed::Shutdown;
        }
        let bytes = match request::decode_controller(frame) {
            Ok(decoded) => match dispatch::dispatch(&handle, &settings, decoded).await {
                Ok(bytes) => bytes,
                Err(e) => break Closed::Dispatch(e),
            },
            Err(e) => match e.answerable_correlation_id() {
                Some(correlation_id) => {
                    match response::unsupported_api_versions_on(
                        ListenerKind::Controller,
                        correlation_id,
                    ) {
                        Ok(bytes) => bytes,
                        Err(err) => break Closed::Dispatch(DispatchError::Encode(err)),
                    }
                }
                None => break Closed::Decode(e),
            },
        };
        if let Err(e) = writer.write_all(&bytes).await {
            break Closed::Io(e);
        }
    };
    match closed {
        Closed::Eof | Closed::Shutdown => debug!(%peer, "controller connection closed"),
        Closed::Io(e) => debug!(%peer, error = %e, "controller connection closed by an I/O error"),
        Closed::Frame(e) => warn!(%peer, error = %e, "closing controller connection: bad frame"),
        Closed::Decode(e) => {
            warn!(%peer, error = %e, "closing controller connection: undecodable request")
        }
        Closed::Dispatch(e) => warn!(%peer, error = %e, "closing controller connection"),
    }
    let _ = writer.shutdown().await;
}
