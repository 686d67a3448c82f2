//! The network side: accept connections, split the byte stream into frames, decode, dispatch,
//! write responses in request order (Kafka answers each connection's requests in order).
//!
//! A malformed or oversized frame closes *that* connection with a log line; nothing a client
//! sends can stop the broker. The connection loop is generic over the stream type so the
//! simulator can drive it with its own sockets.

use std::sync::Arc;

use bytes::BytesMut;
use keel_wire::frame::{self, FrameError};
use keel_wire::request::{self, DecodeError};
use keel_wire::response;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::handlers::{self, Reply};

/// Initial read buffer per connection.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Accepts connections until `shutdown` is cancelled, then stops every connection: a request
/// in progress finishes its synchronous part (an append is never cut in half), waiting ones
/// (long-polling fetches, reads) are dropped. When this returns no request runs any more.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>, shutdown: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let broker = broker.clone();
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        handle_connection(stream, peer.to_string(), broker, shutdown).await;
                    });
                    // Reap finished connections so the set does not grow without bound.
                    while connections.try_join_next().is_some() {}
                }
                Err(e) => {
                    // Usually EMFILE; back off briefly rather than spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    info!("listener and connections stopped");
}

/// Why a connection ended.
#[derive(Debug)]
enum Closed {
    /// The client closed it.
    Eof,
    Shutdown,
    Io(std::io::Error),
    Frame(FrameError),
    Decode(DecodeError),
    Handler(anyhow::Error),
    /// A handler asked for it (a failed `acks=0` Produce).
    Requested(String),
}

/// Serves one connection until the peer closes it, it misbehaves, or the broker stops.
pub async fn handle_connection<S>(
    stream: S,
    peer: String,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut buffer = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let max_bytes = broker.config.socket_request_max_bytes;
    let closed = loop {
        let frame = match frame::take_frame(&mut buffer, max_bytes) {
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
        // A request already buffered when shutdown began is not started: its client will
        // retry elsewhere or later, and nothing may append after the logs are closed.
        if shutdown.is_cancelled() {
            break Closed::Shutdown;
        }
        let reply = match request::decode(frame) {
            Ok(decoded) => match handlers::dispatch(&broker, decoded).await {
                Ok(reply) => reply,
                Err(e) => break Closed::Handler(e),
            },
            Err(e) => match e.answerable_correlation_id() {
                Some(correlation_id) => match response::unsupported_api_versions(correlation_id) {
                    Ok(bytes) => Reply::Send(bytes),
                    Err(err) => break Closed::Handler(err),
                },
                None => break Closed::Decode(e),
            },
        };
        match reply {
            Reply::Send(bytes) => {
                if let Err(e) = writer.write_all(&bytes).await {
                    break Closed::Io(e);
                }
            }
            Reply::Nothing => {}
            Reply::Close(reason) => break Closed::Requested(reason),
        }
    };
    match closed {
        Closed::Eof | Closed::Shutdown => debug!(%peer, "connection closed"),
        Closed::Io(e) => debug!(%peer, error = %e, "connection closed by an I/O error"),
        Closed::Frame(e) => warn!(%peer, error = %e, "closing connection: bad frame"),
        Closed::Decode(e) => warn!(%peer, error = %e, "closing connection: undecodable request"),
        Closed::Handler(e) => warn!(%peer, error = %e, "closing connection: cannot answer request"),
        Closed::Requested(reason) => info!(%peer, %reason, "closing connection"),
    }
    let _ = writer.shutdown().await;
}
