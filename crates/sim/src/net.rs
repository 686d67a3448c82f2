//! The simulated network: TCP-like byte streams between named hosts, with latency, cut links
//! (partitions), resets and black holes — all driven by the world's clock and seed.
//!
//! Each host sees the network through its own [`SimNetwork`] (a [`Network`] of `keel-node`), so
//! the network knows which host opened a connection and which link it crosses. A stream is two
//! one-way pipes. Bytes written at world time `t` are *in flight* until `t + latency` (never
//! before earlier bytes of the same pipe: TCP keeps order); [`NetCore::deliver`], called by the
//! world at every step, moves due bytes to the reader — unless the link is cut, in which case
//! they wait, as TCP retransmits until the partition heals. A connect across a cut link times
//! out after [`CONNECT_TIMEOUT`]; to a host with no listener at that address it is refused.
//!
//! A process crash resets the host's connections (the kernel answers with RST); a power loss
//! turns them into black holes (peers hear nothing) until the host starts again and its
//! kernel resets whatever the peers still send. *Holds* keep the first request of one Kafka API
//! on a connection — or the answer to it — and everything after it in flight until released;
//! what a host wrote on a held connection before it went down is still in the network and is
//! delivered, once released, before that connection's reset (a delayed answer reaching its
//! asker after the answering broker restarted).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use keel_node::net::{BoxFuture, BoxListener, BoxStream, Listener, Network};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// How long a connect across a cut link waits before failing (a SYN that is never answered).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A host's name (also the host part of its addresses).
pub type HostName = String;

/// Latency bounds, in microseconds of world time.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub min_us: u64,
    pub max_us: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            min_us: 200,
            max_us: 1_500,
        }
    }
}

/// How a host's connections behave after it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severance {
    /// Reset now (a killed process: its kernel closes every socket).
    Reset,
    /// Silence: bytes to and from the host vanish (a machine without power).
    BlackHole,
}

/// The shared network state.
#[derive(Debug)]
pub struct NetCore {
    now_us: AtomicU64,
    state: Mutex<NetState>,
}

#[derive(Debug)]
struct NetState {
    rng: StdRng,
    latency: Latency,
    listeners: BTreeMap<String, (HostName, mpsc::UnboundedSender<(BoxStream, String)>)>,
    /// Cut links, as (smaller, larger) host-name pairs.
    cut: BTreeSet<(HostName, HostName)>,
    /// Hosts whose connections are black holes.
    silent: BTreeSet<HostName>,
    /// Hold rules: (from, to, Kafka API key) — see [`NetCore::hold`].
    holds: BTreeSet<(HostName, HostName, i16)>,
    /// Answer hold rules: (answering host, asking host, Kafka API key) — see
    /// [`NetCore::hold_answer`].
    answer_holds: BTreeSet<(HostName, HostName, i16)>,
    pipes: Vec<Weak<Pipe>>,
    next_connection: u64,
    /// Bytes delivered so far (for the trace).
    delivered_bytes: u64,
}

/// One direction of a connection.
#[derive(Debug)]
struct Pipe {
    from: HostName,
    to: HostName,
    state: Mutex<PipeState>,
}

#[derive(Debug, Default)]
struct PipeState {
    in_flight: VecDeque<(u64, Bytes)>,
    /// Delivery time of the last byte put in flight (order is kept).
    last_delivery_us: u64,
    readable: BytesMut,
    /// The writer closed: end of stream once everything in flight is delivered.
    fin_at: Option<u64>,
    eof: bool,
    reset: bool,
    /// Held by a hold rule: nothing is delivered until released.
    held: bool,
    /// An answer hold rule matched a request on the other direction: the next write on this
    /// pipe (the answer) and everything after it is held.
    hold_next: bool,
    /// The writer's host went down while this pipe held bytes in flight: those bytes are
    /// already in the network and are delivered (once released) before the reset.
    reset_when_delivered: bool,
    reader_gone: bool,
    waker: Option<Waker>,
}

impl NetCore {
    /// A network whose latencies are drawn from `seed`.
    pub fn new(seed: u64, latency: Latency) -> Arc<NetCore> {
        Arc::new(NetCore {
            now_us: AtomicU64::new(0),
            state: Mutex::new(NetState {
                rng: StdRng::seed_from_u64(seed),
                latency,
                listeners: BTreeMap::new(),
                cut: BTreeSet::new(),
                silent: BTreeSet::new(),
                holds: BTreeSet::new(),
                answer_holds: BTreeSet::new(),
                pipes: Vec::new(),
                next_connection: 0,
                delivered_bytes: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// World time, microseconds.
    pub fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }

    /// Sets world time (the world calls this before each step).
    pub fn set_now_us(&self, now: u64) {
        self.now_us.store(now, Ordering::SeqCst);
    }

    /// A host's view of the network.
    pub fn view(self: &Arc<Self>, host: &str) -> SimNetwork {
        SimNetwork {
            core: self.clone(),
            host: host.to_string(),
        }
    }

    fn link_cut(state: &NetState, a: &str, b: &str) -> bool {
        let key = if a <= b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        };
        state.cut.contains(&key)
    }

    /// Cuts the link between `a` and `b` (both directions).
    pub fn cut(&self, a: &str, b: &str) {
        if a == b {
            return;
        }
        let key = if a <= b {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        };
        self.lock().cut.insert(key);
    }

    /// From now on, the first request of Kafka API `api_key` that `from` writes to `to` — and
    /// everything after it on that connection — is held in flight until [`NetCore::release`]:
    /// a request delayed in the network while the host's other connections flow. (Keel's
    /// clients write whole frames, so a write that starts a frame names its API at bytes 4..6.)
    pub fn hold(&self, from: &str, to: &str, api_key: i16) {
        self.lock()
            .holds
            .insert((from.to_string(), to.to_string(), api_key));
    }

    /// From now on, the answer `from` writes to the first request of Kafka API `api_key` that
    /// `to` sends it — and everything after it on that connection — is held in flight until
    /// [`NetCore::release`]: an answer delayed in the network (it stays deliverable even if
    /// `from` loses power and restarts meanwhile, like a segment queued in the network).
    pub fn hold_answer(&self, from: &str, to: &str, api_key: i16) {
        self.lock()
            .answer_holds
            .insert((from.to_string(), to.to_string(), api_key));
    }

    /// Drops every hold rule and lets every held connection deliver.
    pub fn release(&self) {
        let mut state = self.lock();
        state.holds.clear();
        state.answer_holds.clear();
        for pipe in state.pipes.iter().filter_map(Weak::upgrade) {
            let mut s = pipe.lock();
            s.held = false;
            s.hold_next = false;
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.lock().cut.clear();
    }

    /// Restores every link of `host`.
    pub fn heal_host(&self, host: &str) {
        self.lock().cut.retain(|(a, b)| a != host && b != host);
    }

    /// The cut links (for traces).
    pub fn cut_links(&self) -> Vec<(HostName, HostName)> {
        self.lock().cut.iter().cloned().collect()
    }

    /// The host stopped: its listeners go away; its connections are reset or go silent.
    pub fn host_down(&self, host: &str, how: Severance) {
        let mut state = self.lock();
        state.listeners.retain(|_, (owner, _)| owner != host);
        match how {
            Severance::Reset => {
                state.silent.remove(host);
                reset_pipes(&mut state, host);
            }
            Severance::BlackHole => {
                state.silent.insert(host.to_string());
            }
        }
    }

    /// The host starts (again): whatever its peers still send on old connections is reset.
    pub fn host_up(&self, host: &str) {
        let mut state = self.lock();
        state.silent.remove(host);
        reset_pipes(&mut state, host);
    }

    /// Resets one connection of the network at random (a dropped connection), if any.
    pub fn reset_random_connection(&self, rng: &mut StdRng) -> Option<(HostName, HostName)> {
        let mut state = self.lock();
        let live: Vec<Arc<Pipe>> = state.pipes.iter().filter_map(Weak::upgrade).collect();
        if live.is_empty() {
            return None;
        }
        let pipe = &live[rng.gen_range(0..live.len())];
        let pair = (pipe.from.clone(), pipe.to.clone());
        let (from, to) = pair.clone();
        for p in &live {
            if (p.from == from && p.to == to) || (p.from == to && p.to == from) {
                let mut s = p.lock();
                if !s.reset {
                    s.reset = true;
                    s.wake();
                }
            }
        }
        state.pipes.retain(|w| w.strong_count() > 0);
        Some(pair)
    }

    /// Moves every due byte to its reader (links that are cut hold their bytes); returns how
    /// many bytes moved.
    pub fn deliver(&self) -> u64 {
        let now = self.now_us();
        let mut state = self.lock();
        state.pipes.retain(|w| w.strong_count() > 0);
        let pipes: Vec<Arc<Pipe>> = state.pipes.iter().filter_map(Weak::upgrade).collect();
        let mut moved = 0;
        for pipe in pipes {
            if pipe.lock().held {
                continue;
            }
            if NetCore::link_cut(&state, &pipe.from, &pipe.to)
                || state.silent.contains(&pipe.from)
                || state.silent.contains(&pipe.to)
            {
                continue;
            }
            let mut s = pipe.lock();
            let mut changed = false;
            while let Some((at, _)) = s.in_flight.front() {
                if *at > now {
                    break;
                }
                let (_, bytes) = s.in_flight.pop_front().expect("front exists");
                moved += bytes.len() as u64;
                if !s.reader_gone {
                    s.readable.extend_from_slice(&bytes);
                }
                changed = true;
            }
            if s.in_flight.is_empty() && !s.eof && s.fin_at.is_some_and(|at| at <= now) {
                s.eof = true;
                changed = true;
            }
            if s.in_flight.is_empty() && s.reset_when_delivered && !s.reset {
                s.reset = true;
                changed = true;
            }
            if changed {
                s.wake();
            }
        }
        state.delivered_bytes += moved;
        moved
    }

    /// Bytes delivered since the start.
    pub fn delivered_bytes(&self) -> u64 {
        self.lock().delivered_bytes
    }

    fn latency_us(state: &mut NetState) -> u64 {
        let Latency { min_us, max_us } = state.latency;
        if max_us <= min_us {
            min_us
        } else {
            state.rng.gen_range(min_us..=max_us)
        }
    }
}

/// Resets every connection of `host` — except that bytes `host` wrote on a held connection
/// stay in the network: they are delivered when released, then the reset.
fn reset_pipes(state: &mut NetState, host: &str) {
    for pipe in state.pipes.iter().filter_map(Weak::upgrade) {
        if pipe.from == host || pipe.to == host {
            let mut s = pipe.lock();
            if pipe.from == host && s.held && !s.in_flight.is_empty() {
                s.reset_when_delivered = true;
            } else if !s.reset {
                s.reset = true;
                s.wake();
            }
        }
    }
    state.pipes.retain(|w| w.strong_count() > 0);
}

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PipeState {
    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }
}

/// One host's view of the network.
#[derive(Debug, Clone)]
pub struct SimNetwork {
    core: Arc<NetCore>,
    host: HostName,
}

impl SimNetwork {
    /// Binds `addr` for this host (a later bind of the same address replaces it).
    pub fn bind(&self, addr: &str) -> SimListener {
        let (tx, rx) = mpsc::unbounded_channel();
        self.core
            .lock()
            .listeners
            .insert(addr.to_string(), (self.host.clone(), tx));
        SimListener { incoming: rx }
    }
}

impl Network for SimNetwork {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<BoxStream>> {
        Box::pin(async move {
            let (outcome, latency) = {
                let mut state = self.core.lock();
                let latency = NetCore::latency_us(&mut state);
                let outcome = match state.listeners.get(addr) {
                    None => Err(io::ErrorKind::ConnectionRefused),
                    Some((owner, _))
                        if NetCore::link_cut(&state, &self.host, owner)
                            || state.silent.contains(owner) =>
                    {
                        Err(io::ErrorKind::TimedOut)
                    }
                    Some((owner, tx)) => Ok((owner.clone(), tx.clone())),
                };
                (outcome, latency)
            };
            match outcome {
                Err(io::ErrorKind::TimedOut) => {
                    tokio::time::sleep(CONNECT_TIMEOUT).await;
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("connect {addr}"),
                    ))
                }
                Err(kind) => {
                    tokio::time::sleep(Duration::from_micros(latency)).await;
                    Err(io::Error::new(kind, format!("connect {addr}")))
                }
                Ok((owner, tx)) => {
                    // The handshake's round trip.
                    tokio::time::sleep(Duration::from_micros(2 * latency)).await;
                    let (client, server, id) = {
                        let mut state = self.core.lock();
                        let up = Arc::new(Pipe {
                            from: self.host.clone(),
                            to: owner.clone(),
                            state: Mutex::new(PipeState::default()),
                        });
                        let down = Arc::new(Pipe {
                            from: owner.clone(),
                            to: self.host.clone(),
                            state: Mutex::new(PipeState::default()),
                        });
                        state.pipes.push(Arc::downgrade(&up));
                        state.pipes.push(Arc::downgrade(&down));
                        state.next_connection += 1;
                        let id = state.next_connection;
                        let client = SimStream {
                            core: self.core.clone(),
                            tx: up.clone(),
                            rx: down.clone(),
                        };
                        let server = SimStream {
                            core: self.core.clone(),
                            tx: down,
                            rx: up,
                        };
                        (client, server, id)
                    };
                    tx.send((Box::new(server) as BoxStream, format!("{}#{id}", self.host)))
                        .map_err(|_| {
                            io::Error::new(io::ErrorKind::ConnectionRefused, addr.to_string())
                        })?;
                    Ok(Box::new(client) as BoxStream)
                }
            }
        })
    }

    fn listen<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<(BoxListener, u16)>> {
        Box::pin(async move {
            let port = if port == 0 { 9092 } else { port };
            let host = if host.is_empty() || host == "0.0.0.0" {
                self.host.as_str()
            } else {
                host
            };
            Ok((
                Box::new(self.bind(&format!("{host}:{port}"))) as BoxListener,
                port,
            ))
        })
    }
}

/// Accepts a host's incoming simulated connections.
#[derive(Debug)]
pub struct SimListener {
    incoming: mpsc::UnboundedReceiver<(BoxStream, String)>,
}

impl Listener for SimListener {
    async fn accept(&mut self) -> io::Result<(BoxStream, String)> {
        self.incoming
            .recv()
            .await
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "listener closed"))
    }
}

/// One end of a simulated connection.
#[derive(Debug)]
pub struct SimStream {
    core: Arc<NetCore>,
    tx: Arc<Pipe>,
    rx: Arc<Pipe>,
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut s = self.rx.lock();
        if !s.readable.is_empty() {
            let n = s.readable.len().min(buf.remaining());
            buf.put_slice(&s.readable[..n]);
            s.readable.advance(n);
            return Poll::Ready(Ok(()));
        }
        if s.reset {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset",
            )));
        }
        if s.eof {
            return Poll::Ready(Ok(()));
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let (latency, hold, hold_answer) = {
            let mut state = self.core.lock();
            let api = (buf.len() >= 6).then(|| i16::from_be_bytes([buf[4], buf[5]]));
            let hold = api.is_some_and(|api| {
                state
                    .holds
                    .contains(&(self.tx.from.clone(), self.tx.to.clone(), api))
            });
            // A request whose answer is to be held: the peer's next write on this connection.
            let hold_answer = api.is_some_and(|api| {
                state
                    .answer_holds
                    .contains(&(self.tx.to.clone(), self.tx.from.clone(), api))
            });
            (NetCore::latency_us(&mut state), hold, hold_answer)
        };
        if hold_answer {
            self.rx.lock().hold_next = true;
        }
        let now = self.core.now_us();
        let mut s = self.tx.lock();
        if (hold || s.hold_next) && !s.held {
            s.held = true;
        }
        s.hold_next = false;
        if s.reset {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset",
            )));
        }
        if s.reader_gone || s.fin_at.is_some() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "connection closed",
            )));
        }
        if std::env::var_os("KEEL_SIM_WRITES").is_some() {
            let text: String = buf
                .iter()
                .map(|b| {
                    if b.is_ascii_graphic() {
                        *b as char
                    } else {
                        '.'
                    }
                })
                .collect();
            eprintln!(
                "write {}->{} {} {text}",
                self.tx.from,
                self.tx.to,
                buf.len()
            );
        }
        let at = (now + latency).max(s.last_delivery_us);
        s.last_delivery_us = at;
        s.in_flight.push_back((at, Bytes::copy_from_slice(buf)));
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let now = self.core.now_us();
        let mut s = self.tx.lock();
        if s.fin_at.is_none() {
            let at = now.max(s.last_delivery_us);
            s.fin_at = Some(at);
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        let now = self.core.now_us();
        {
            let mut s = self.tx.lock();
            if s.fin_at.is_none() {
                let at = now.max(s.last_delivery_us);
                s.fin_at = Some(at);
            }
        }
        let mut r = self.rx.lock();
        r.reader_gone = true;
        r.readable.clear();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// Moves world time on and delivers what is due.
    /// A network with 1 ms latency, host `a` (`client`) connected to `b:1` (`listener`): the
    /// two ends of that connection.
    fn connected_pair() -> (
        Arc<NetCore>,
        tokio::runtime::Runtime,
        SimNetwork,
        SimListener,
        BoxStream,
        BoxStream,
    ) {
        let core = NetCore::new(
            1,
            Latency {
                min_us: 1_000,
                max_us: 1_000,
            },
        );
        let rt = runtime();
        let client = core.view("a");
        let mut listener = core.view("b").bind("b:1");
        let (a, b) = rt.block_on(async {
            let a = client.connect("b:1").await.unwrap();
            let (b, _) = listener.accept().await.unwrap();
            (a, b)
        });
        (core, rt, client, listener, a, b)
    }

    fn advance(core: &NetCore, us: u64) {
        core.set_now_us(core.now_us() + us);
        core.deliver();
    }

    // Shows: bytes arrive only once their latency has passed; a cut link holds them (TCP
    // retransmits) until healed; a hold rule holds one API's request until released, while
    // another connection of the same hosts flows.
    #[test]
    fn latency_cuts_and_holds() {
        let (core, rt, client, mut listener, mut a, mut b) = connected_pair();
        let mut buf = [0u8; 16];
        rt.block_on(a.write_all(b"hello")).unwrap();
        advance(&core, 500);
        let early = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), b.read(&mut buf)).await
        });
        assert!(early.is_err(), "delivered before its latency");
        advance(&core, 500);
        assert_eq!(rt.block_on(b.read(&mut buf)).unwrap(), 5);

        core.cut("a", "b");
        rt.block_on(a.write_all(b"x")).unwrap();
        advance(&core, 10_000);
        let held = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), b.read(&mut buf)).await
        });
        assert!(held.is_err(), "crossed a cut link");
        core.heal();
        advance(&core, 0);
        assert_eq!(rt.block_on(b.read(&mut buf)).unwrap(), 1);

        // A frame whose API key (bytes 4..6) is 56 (AlterPartition) is held; heartbeats flow.
        core.hold("a", "b", 56);
        let frame = [0u8, 0, 0, 4, 0, 56, 0, 3];
        rt.block_on(a.write_all(&frame)).unwrap();
        let (mut c, mut d) = rt.block_on(async {
            let c = client.connect("b:1").await.unwrap();
            let (d, _) = listener.accept().await.unwrap();
            (c, d)
        });
        rt.block_on(c.write_all(&[0u8, 0, 0, 4, 0, 63, 0, 1]))
            .unwrap();
        advance(&core, 10_000);
        assert_eq!(
            rt.block_on(d.read(&mut buf)).unwrap(),
            8,
            "the heartbeat flows"
        );
        let held = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), b.read(&mut buf)).await
        });
        assert!(held.is_err(), "the held request was delivered");
        core.release();
        advance(&core, 0);
        assert_eq!(rt.block_on(b.read(&mut buf)).unwrap(), 8);
    }

    /// An answer hold: the request flows, the answer (the peer's next write on that connection)
    /// is held — across a power loss and restart of the answering host — until released.
    #[test]
    fn held_answers() {
        let (core, rt, _client, _listener, mut a, mut b) = connected_pair();
        let mut buf = [0u8; 16];
        core.hold_answer("b", "a", keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY);
        // A request of another API: its answer flows.
        rt.block_on(a.write_all(&[0u8, 0, 0, 4, 0, 63, 0, 1]))
            .unwrap();
        advance(&core, 1_000);
        assert_eq!(rt.block_on(b.read(&mut buf)).unwrap(), 8);
        rt.block_on(b.write_all(&[0u8, 0, 0, 1, 9])).unwrap();
        advance(&core, 1_000);
        assert_eq!(rt.block_on(a.read(&mut buf)).unwrap(), 5);
        // The request of the held API is delivered; its answer is not.
        let key = keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY.to_be_bytes();
        let request = [0u8, 0, 0, 4, key[0], key[1], 0, 2];
        rt.block_on(a.write_all(&request)).unwrap();
        advance(&core, 1_000);
        assert_eq!(
            rt.block_on(b.read(&mut buf)).unwrap(),
            8,
            "the request flows"
        );
        rt.block_on(b.write_all(&[0u8, 0, 0, 1, 7])).unwrap();
        advance(&core, 10_000);
        let held = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), a.read(&mut buf)).await
        });
        assert!(held.is_err(), "the held answer was delivered");
        // The answering host loses power and starts again: the answer is still in the network
        // (the reset that the restart causes waits behind it).
        core.host_down("b", Severance::BlackHole);
        drop(b);
        core.host_up("b");
        advance(&core, 1_000);
        let held = rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(1), a.read(&mut buf)).await
        });
        assert!(held.is_err(), "the held answer was delivered or reset");
        core.release();
        advance(&core, 0);
        assert_eq!(rt.block_on(a.read(&mut buf)).unwrap(), 5);
        assert_eq!(buf[4], 7);
        assert!(
            rt.block_on(a.read(&mut buf)).is_err(),
            "then the connection is reset"
        );
    }
}
