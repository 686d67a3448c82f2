//! The sending side of the Raft RPCs: one connection per other voter, over Keel's
//! [`crate::net::Network`] (so the simulator carries it), on Keel's private API keys
//! (`keel_wire::keel_rpc::RAFT_*`). Bodies are the openraft messages as JSON; a snapshot is a
//! length-prefixed JSON header (vote and snapshot meta) followed by the snapshot's bytes.
//!
//! A connection is taken out of its slot for the length of a call and put back only after a
//! complete answer: openraft drops an RPC future that times out, and a dropped call must not
//! leave a late answer on a connection that would be read as the next call's. Connection
//! failures are `Unreachable`, so openraft's replication backs off instead of retrying in a
//! tight loop.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use keel_wire::keel_rpc;
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{KeelRaft, Vote};
use crate::client::Connection;
use crate::net::{BoxStream, Network};

/// The header of a snapshot RPC (the snapshot's bytes follow it).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SnapshotHeader {
    pub vote: Vote,
    pub meta: openraft::SnapshotMeta<u64, BasicNode>,
}

/// Encodes a snapshot RPC body: `u32` header length, header JSON, snapshot bytes.
pub(super) fn encode_snapshot_body(
    header: &SnapshotHeader,
    data: &[u8],
) -> Result<Bytes, serde_json::Error> {
    let json = serde_json::to_vec(header)?;
    let mut out = BytesMut::with_capacity(4 + json.len() + data.len());
    out.put_u32(u32::try_from(json.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(&json);
    out.extend_from_slice(data);
    Ok(out.freeze())
}

/// Splits a snapshot RPC body.
pub(super) fn decode_snapshot_body(body: &Bytes) -> Result<(SnapshotHeader, Bytes), String> {
    if body.len() < 4 {
        return Err("truncated snapshot header".to_string());
    }
    let len = u32::from_be_bytes([body[0], body[1], body[2], body[3]]) as usize;
    if body.len() < 4 + len {
        return Err("truncated snapshot header".to_string());
    }
    let header: SnapshotHeader =
        serde_json::from_slice(&body[4..4 + len]).map_err(|e| e.to_string())?;
    Ok((header, body.slice(4 + len..)))
}

/// Creates the clients of the other voters.
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    network: Arc<dyn Network>,
    /// Voter id → `host:port` of its controller listener (`controller.quorum.voters`).
    voters: Arc<BTreeMap<u64, String>>,
    client_id: String,
    backoff: Duration,
}

impl NetworkFactory {
    /// Clients for `voters`, identifying themselves as controller `node_id`; an unreachable
    /// voter is retried every `backoff`.
    pub fn new(
        network: Arc<dyn Network>,
        voters: BTreeMap<u64, String>,
        node_id: i32,
        backoff: Duration,
    ) -> Self {
        NetworkFactory {
            network,
            voters: Arc::new(voters),
            client_id: format!("keel-controller-{node_id}"),
            backoff,
        }
    }
}

impl RaftNetworkFactory<KeelRaft> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        let addr = self
            .voters
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        PeerClient {
            target,
            addr,
            network: self.network.clone(),
            client_id: self.client_id.clone(),
            connection: std::sync::Mutex::new(None),
            backoff: self.backoff,
        }
    }
}

/// One other voter.
pub struct PeerClient {
    target: u64,
    addr: String,
    network: Arc<dyn Network>,
    client_id: String,
    /// Held only between calls (never across an await): `Mutex` for `Sync`.
    connection: std::sync::Mutex<Option<Connection<BoxStream>>>,
    backoff: Duration,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient")
            .field("target", &self.target)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Why a call failed before the peer answered.
#[derive(Debug)]
enum CallError {
    /// No connection, or it broke: back off.
    Unreachable(String),
    /// The answer made no sense.
    Garbled(String),
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

impl CallError {
    fn into_rpc<E: std::error::Error>(self) -> RPCError<u64, BasicNode, E> {
        match self {
            CallError::Unreachable(m) => RPCError::Unreachable(Unreachable::new(&Message(m))),
            CallError::Garbled(m) => RPCError::Network(NetworkError::new(&Message(m))),
        }
    }

    fn into_streaming(self) -> StreamingError<KeelRaft, Fatal<u64>> {
        match self {
            CallError::Unreachable(m) => StreamingError::Unreachable(Unreachable::new(&Message(m))),
            CallError::Garbled(m) => StreamingError::Network(NetworkError::new(&Message(m))),
        }
    }
}

impl PeerClient {
    /// Sends one request body on `key` and returns the answer's body.
    async fn call_raw(&mut self, key: i16, body: Bytes, ttl: Duration) -> Result<Bytes, CallError> {
        let call = async {
            let idle = self.connection.lock().map(|mut c| c.take()).unwrap_or(None);
            let mut connection = match idle {
                Some(c) => c,
                None => Connection::connect(self.network.as_ref(), &self.addr, &self.client_id)
                    .await
                    .map_err(|e| {
                        CallError::Unreachable(format!("connect to {}: {e}", self.addr))
                    })?,
            };
            let client_id = self.client_id.clone();
            let (correlation_id, frame) = connection
                .call_raw(|id| keel_rpc::encode_opaque_request(key, id, &client_id, &body))
                .await
                .map_err(|e| CallError::Unreachable(format!("call {}: {e}", self.addr)))?;
            let answer = keel_rpc::decode_opaque_response(frame, correlation_id)
                .map_err(|e| CallError::Garbled(e.to_string()))?;
            if let Ok(mut slot) = self.connection.lock() {
                *slot = Some(connection);
            }
            Ok(answer)
        };
        match tokio::time::timeout(ttl, call).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Unreachable(format!(
                "no answer from {} within {ttl:?}",
                self.addr
            ))),
        }
    }

    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &mut self,
        key: i16,
        request: &Req,
        ttl: Duration,
    ) -> Result<Resp, CallError> {
        let body = serde_json::to_vec(request).map_err(|e| CallError::Garbled(e.to_string()))?;
        let answer = self.call_raw(key, Bytes::from(body), ttl).await?;
        serde_json::from_slice(&answer).map_err(|e| CallError::Garbled(e.to_string()))
    }
}

/// The largest AppendEntries body sent with more than one entry. openraft 0.9 gives an
/// AppendEntries one heartbeat interval (a tenth of the election timeout) to be sent, appended,
/// fsynced and answered, and packs up to 300 entries into one: a follower catching up on large
/// entries would time out forever. Over this size the call asks openraft for fewer entries
/// (`PayloadTooLarge`); one entry always goes (the controller keeps entries small,
/// `keel_controller::MAX_RECORDS_PER_BATCH`).
pub const MAX_APPEND_ENTRIES_BYTES: usize = 1 << 20;

impl RaftNetwork<KeelRaft> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KeelRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let body = serde_json::to_vec(&rpc)
            .map_err(|e| CallError::Garbled(e.to_string()).into_rpc::<RaftError<u64>>())?;
        let entries = rpc.entries.len();
        if entries > 1 && body.len() > MAX_APPEND_ENTRIES_BYTES {
            let fit = entries * MAX_APPEND_ENTRIES_BYTES / body.len();
            let hint = u64::try_from(fit.clamp(1, entries - 1)).unwrap_or(1);
            return Err(RPCError::PayloadTooLarge(
                openraft::error::PayloadTooLarge::new_entries_hint(hint),
            ));
        }
        let answer = self
            .call_raw(
                keel_rpc::RAFT_APPEND_ENTRIES_KEY,
                Bytes::from(body),
                option.hard_ttl(),
            )
            .await
            .map_err(CallError::into_rpc)?;
        let answer: Result<AppendEntriesResponse<u64>, RaftError<u64>> =
            serde_json::from_slice(&answer)
                .map_err(|e| CallError::Garbled(e.to_string()).into_rpc::<RaftError<u64>>())?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let answer: Result<VoteResponse<u64>, RaftError<u64>> = self
            .call(keel_rpc::RAFT_VOTE_KEY, &rpc, option.hard_ttl())
            .await
            .map_err(CallError::into_rpc)?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::Snapshot<KeelRaft>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<KeelRaft, Fatal<u64>>> {
        let header = SnapshotHeader {
            vote,
            meta: snapshot.meta.clone(),
        };
        let body = encode_snapshot_body(&header, snapshot.snapshot.get_ref())
            .map_err(|e| CallError::Garbled(e.to_string()).into_streaming())?;
        // A whole snapshot may take longer than one heartbeat: allow the larger of openraft's
        // limit and a second per 8 MiB.
        let ttl = option
            .hard_ttl()
            .max(Duration::from_secs(1 + (body.len() as u64 >> 23)));
        let send = self.call_raw(keel_rpc::RAFT_SNAPSHOT_KEY, body, ttl);
        let answer = tokio::select! {
            biased;
            closed = cancel => return Err(StreamingError::Closed(closed)),
            answer = send => answer.map_err(CallError::into_streaming)?,
        };
        let answer: Result<SnapshotResponse<u64>, Fatal<u64>> = serde_json::from_slice(&answer)
            .map_err(|e| CallError::Garbled(e.to_string()).into_streaming())?;
        answer.map_err(|e| StreamingError::RemoteError(RemoteError::new(self.target, e)))
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(self.backoff))
    }
}
