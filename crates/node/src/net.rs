//! The network behind an interface, so the simulator (and the in-process controller of a
//! single-node cluster) can substitute its own.
//!
//! Node code never names `tokio::net`: outgoing connections go through a [`Network`]
//! (`connect(host:port)` → a byte stream) and listeners implement [`Listener`]. [`TcpNetwork`]
//! and `tokio::net::TcpListener` are the real ones; [`MemNetwork`] connects in-memory pipes to
//! in-memory listeners by address and falls back to another network for the rest.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// A bidirectional byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A boxed stream (what every connection is, whichever network made it).
pub type BoxStream = Box<dyn Stream>;

/// A boxed future, for the object-safe [`Network`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens outgoing connections and listens for incoming ones.
pub trait Network: Send + Sync + Debug + 'static {
    /// Connects to `addr` (`host:port`).
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>>;

    /// Listens on `host:port` (port 0 = any free port); returns the listener and its port.
    fn listen<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(BoxListener, u16)>>;

    /// The SASL mechanism a Kafka connection over this network authenticates with once
    /// connected (see `crate::security::SecureNetwork`); none by default.
    fn sasl(&self) -> Option<Arc<dyn crate::security::sasl::ClientMechanism>> {
        None
    }
}

/// Accepts incoming connections.
pub trait Listener: Send + 'static {
    /// The next connection and a description of its peer.
    fn accept(&mut self) -> impl Future<Output = io::Result<(BoxStream, String)>> + Send;
}

/// The object-safe form of [`Listener`], for listeners a [`Network`] returns.
pub trait DynListener: Send + 'static {
    /// The next connection and a description of its peer.
    fn accept_boxed(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>>;
}

/// A listener of any network.
pub type BoxListener = Box<dyn DynListener>;

impl<L: Listener> DynListener for L {
    fn accept_boxed(&mut self) -> BoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(self.accept())
    }
}

impl Listener for BoxListener {
    fn accept(&mut self) -> impl Future<Output = io::Result<(BoxStream, String)>> + Send {
        // The inner listener's method: `Box` itself is a `DynListener` too (through this impl).
        let inner: &mut dyn DynListener = &mut **self;
        inner.accept_boxed()
    }
}

/// The operating system's TCP.
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpNetwork;

impl Network for TcpNetwork {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxStream)
        })
    }

    fn listen<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(BoxListener, u16)>> {
        Box::pin(async move {
            let host = if host.is_empty() { "0.0.0.0" } else { host };
            let listener = tokio::net::TcpListener::bind((host, port)).await?;
            let port = listener.local_addr()?.port();
            Ok((Box::new(listener) as BoxListener, port))
        })
    }
}

impl Listener for tokio::net::TcpListener {
    async fn accept(&mut self) -> io::Result<(BoxStream, String)> {
        let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
        // Small requests and responses must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        Ok((Box::new(stream) as BoxStream, peer.to_string()))
    }
}

/// Bytes an in-memory pipe buffers in each direction.
const MEM_PIPE_BYTES: usize = 1024 * 1024;

type Incoming = mpsc::UnboundedSender<(BoxStream, String)>;

/// In-memory connections to listeners bound by address; other addresses go to `fallback`
/// (which also serves `listen` when present).
#[derive(Debug, Default)]
pub struct MemNetwork {
    listeners: Mutex<BTreeMap<String, Incoming>>,
    fallback: Option<Arc<dyn Network>>,
    next_port: std::sync::atomic::AtomicU16,
}

/// A listener of a [`MemNetwork`].
#[derive(Debug)]
pub struct MemListener {
    incoming: mpsc::UnboundedReceiver<(BoxStream, String)>,
}

impl MemNetwork {
    /// A network with only in-memory listeners.
    pub fn new() -> Self {
        MemNetwork::default()
    }

    /// In-memory listeners first, then `fallback` (e.g. [`TcpNetwork`]).
    pub fn with_fallback(fallback: Arc<dyn Network>) -> Self {
        MemNetwork {
            listeners: Mutex::new(BTreeMap::new()),
            fallback: Some(fallback),
            next_port: std::sync::atomic::AtomicU16::new(0),
        }
    }

    /// Listens on `addr`; a later bind of the same address replaces this one.
    pub fn bind(&self, addr: &str) -> MemListener {
        let (tx, rx) = mpsc::unbounded_channel();
        self.listeners
            .lock()
            .expect("listener table lock poisoned")
            .insert(addr.to_string(), tx);
        MemListener { incoming: rx }
    }
}

impl Network for MemNetwork {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        let listener = self
            .listeners
            .lock()
            .expect("listener table lock poisoned")
            .get(addr)
            .cloned();
        Box::pin(async move {
            if let Some(listener) = listener {
                let (client, server) = tokio::io::duplex(MEM_PIPE_BYTES);
                listener
                    .send((Box::new(server), format!("in-memory client of {addr}")))
                    .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, addr))?;
                return Ok(Box::new(client) as BoxStream);
            }
            match &self.fallback {
                Some(fallback) => fallback.connect(addr).await,
                None => Err(io::Error::new(io::ErrorKind::ConnectionRefused, addr)),
            }
        })
    }

    fn listen<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(BoxListener, u16)>> {
        Box::pin(async move {
            if let Some(fallback) = &self.fallback {
                return fallback.listen(host, port).await;
            }
            let port = if port == 0 {
                // In-memory "ports" for port 0 count up from 40000.
                40_000u16.saturating_add(
                    self.next_port
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                )
            } else {
                port
            };
            let listener = self.bind(&format!("{host}:{port}"));
            Ok((Box::new(listener) as BoxListener, port))
        })
    }
}

impl Listener for MemListener {
    async fn accept(&mut self) -> io::Result<(BoxStream, String)> {
        self.incoming
            .recv()
            .await
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "in-memory network dropped"))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    // Shows: an in-memory connect reaches the listener bound at that address, both ways; an
    // unbound address is refused.
    #[tokio::test]
    async fn mem_network_connects_by_address() {
        let net = MemNetwork::new();
        let mut listener = net.bind("controller:9093");
        let mut client = net.connect("controller:9093").await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        server.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
        let refused = net.connect("elsewhere:1").await.err().unwrap();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    }

    // Shows (regression): a listener returned by `Network::listen` accepts through the boxed
    // listener (an earlier version recursed into itself and overflowed the stack).
    #[tokio::test]
    async fn listen_returns_a_working_boxed_listener() {
        let net = MemNetwork::new();
        let (mut listener, port) = net.listen("broker", 0).await.unwrap();
        let mut client = net.connect(&format!("broker:{port}")).await.unwrap();
        let (mut server, _) = Listener::accept(&mut listener).await.unwrap();
        client.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
    }
}
