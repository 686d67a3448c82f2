//! The receiving side of the Raft RPCs on the controller listener: decode the opaque frame,
//! hand the message to the local Raft, encode its answer (or its error) as JSON.

use bytes::Bytes;
use keel_wire::keel_rpc;
use openraft::raft::{AppendEntriesRequest, VoteRequest};

use super::network::decode_snapshot_body;
use super::{KeelRaft, Raft};

/// Answers one Raft RPC frame (without its size prefix). `Err` closes the connection (a
/// frame that does not decode).
pub async fn handle(raft: &Raft, frame: Bytes) -> Result<Bytes, String> {
    let request = keel_rpc::decode_opaque_request(frame).map_err(|e| e.to_string())?;
    let body = match request.key {
        keel_rpc::RAFT_VOTE_KEY => {
            let rpc: VoteRequest<u64> =
                serde_json::from_slice(&request.body).map_err(|e| format!("Vote: {e}"))?;
            serde_json::to_vec(&raft.vote(rpc).await)
        }
        keel_rpc::RAFT_APPEND_ENTRIES_KEY => {
            let rpc: AppendEntriesRequest<KeelRaft> =
                serde_json::from_slice(&request.body).map_err(|e| format!("AppendEntries: {e}"))?;
            serde_json::to_vec(&raft.append_entries(rpc).await)
        }
        keel_rpc::RAFT_SNAPSHOT_KEY => {
            let (header, data) = decode_snapshot_body(&request.body)?;
            let snapshot = openraft::Snapshot {
                meta: header.meta,
                snapshot: Box::new(std::io::Cursor::new(data.to_vec())),
            };
            serde_json::to_vec(&raft.install_full_snapshot(header.vote, snapshot).await)
        }
        other => return Err(format!("api key {other} is not a Raft RPC")),
    }
    .map_err(|e| format!("cannot encode the Raft answer: {e}"))?;
    Ok(keel_rpc::encode_opaque_response(
        request.correlation_id,
        &body,
    ))
}
