//! Keel's own RPCs, for the parts of KIP-966 Apache Kafka never shipped: `GetReplicaLogInfo`,
//! which the controller's Unclean Recovery Manager sends to replicas to learn their log end
//! offset and last written leader epoch.
//!
//! Kafka merged a `GetReplicaLogInfo` under API key 93 and reverted it; Keel does not take that
//! key (a future Kafka may give it another meaning). Keel's private keys start at
//! [`KEEL_API_KEY_BASE`], far above Kafka's, and are answered only by Keel brokers. The framing
//! is Kafka's: a request header v1 (`api_key`, `api_version`, `correlation_id`, nullable
//! `client_id`) and a response header v0 (`correlation_id`), then the body in Kafka's classic
//! (non-flexible) encoding: big-endian integers, 16-byte UUIDs, arrays as an `i32` count.
//!
//! ```text
//! GetReplicaLogInfo Request (key 10093, version 0):
//!   BrokerId int32                      the controller asking
//!   Topics [TopicId uuid, Partitions [int32]]
//! GetReplicaLogInfo Response (version 0):
//!   ErrorCode int16
//!   BrokerEpoch int64                   the answering broker's current epoch
//!   Topics [TopicId uuid, Partitions [Partition int32, ErrorCode int16,
//!            LastWrittenLeaderEpoch int32, CurrentLeaderEpoch int32, LogEndOffset int64]]
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// The first API key Keel uses for its own RPCs.
pub const KEEL_API_KEY_BASE: i16 = 10_000;
/// `GetReplicaLogInfo` (KIP-966), Keel's key.
pub const GET_REPLICA_LOG_INFO_KEY: i16 = KEEL_API_KEY_BASE + 93;
/// The only version.
pub const GET_REPLICA_LOG_INFO_VERSION: i16 = 0;
/// Most topics or partitions one message may list (a guard against hostile counts).
const ARRAY_MAX: usize = 1 << 20;

/// The request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetReplicaLogInfoRequest {
    pub broker_id: i32,
    pub topics: Vec<(Uuid, Vec<i32>)>,
}

/// One partition's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionLogInfo {
    pub partition: i32,
    pub error_code: i16,
    /// The latest leader epoch in the replica's log (-1 when the log has none).
    pub last_written_leader_epoch: i32,
    /// The partition leader epoch in the replica's metadata.
    pub current_leader_epoch: i32,
    pub log_end_offset: i64,
}

/// The response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetReplicaLogInfoResponse {
    pub error_code: i16,
    pub broker_epoch: i64,
    pub topics: Vec<(Uuid, Vec<PartitionLogInfo>)>,
}

/// A malformed Keel RPC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Keel RPC: {0}")]
pub struct KeelRpcError(pub String);

fn need(buf: &Bytes, n: usize, what: &str) -> Result<(), KeelRpcError> {
    if buf.remaining() < n {
        return Err(KeelRpcError(format!("truncated {what}")));
    }
    Ok(())
}

fn get_i16(buf: &mut Bytes, what: &str) -> Result<i16, KeelRpcError> {
    need(buf, 2, what)?;
    Ok(buf.get_i16())
}

fn get_i32(buf: &mut Bytes, what: &str) -> Result<i32, KeelRpcError> {
    need(buf, 4, what)?;
    Ok(buf.get_i32())
}

fn get_i64(buf: &mut Bytes, what: &str) -> Result<i64, KeelRpcError> {
    need(buf, 8, what)?;
    Ok(buf.get_i64())
}

fn get_uuid(buf: &mut Bytes) -> Result<Uuid, KeelRpcError> {
    need(buf, 16, "topic id")?;
    let mut bytes = [0u8; 16];
    buf.copy_to_slice(&mut bytes);
    Ok(Uuid::from_bytes(bytes))
}

fn get_count(buf: &mut Bytes, what: &str) -> Result<usize, KeelRpcError> {
    let count = get_i32(buf, what)?;
    let count = usize::try_from(count)
        .map_err(|_| KeelRpcError(format!("negative {what} count {count}")))?;
    if count > ARRAY_MAX || count > buf.remaining() {
        return Err(KeelRpcError(format!(
            "{what} count {count} exceeds the message"
        )));
    }
    Ok(count)
}

fn put_count(out: &mut BytesMut, count: usize) {
    out.put_i32(i32::try_from(count).unwrap_or(i32::MAX));
}

/// Frames a message: 4-byte size, then `header_and_body`.
fn frame(header_and_body: BytesMut) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + header_and_body.len());
    put_count(&mut out, header_and_body.len());
    out.extend_from_slice(&header_and_body);
    out.freeze()
}

impl GetReplicaLogInfoRequest {
    /// The whole size-prefixed request frame.
    pub fn encode(&self, correlation_id: i32, client_id: &str) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i16(GET_REPLICA_LOG_INFO_KEY);
        out.put_i16(GET_REPLICA_LOG_INFO_VERSION);
        out.put_i32(correlation_id);
        out.put_i16(i16::try_from(client_id.len()).unwrap_or(i16::MAX));
        out.extend_from_slice(&client_id.as_bytes()[..client_id.len().min(i16::MAX as usize)]);
        out.put_i32(self.broker_id);
        put_count(&mut out, self.topics.len());
        for (topic, partitions) in &self.topics {
            out.extend_from_slice(topic.as_bytes());
            put_count(&mut out, partitions.len());
            for p in partitions {
                out.put_i32(*p);
            }
        }
        frame(out)
    }

    /// Decodes a request frame (without its size prefix); returns it with its correlation id.
    pub fn decode(mut frame: Bytes) -> Result<(i32, Self), KeelRpcError> {
        let key = get_i16(&mut frame, "api key")?;
        if key != GET_REPLICA_LOG_INFO_KEY {
            return Err(KeelRpcError(format!(
                "api key {key} is not GetReplicaLogInfo"
            )));
        }
        let version = get_i16(&mut frame, "api version")?;
        if version != GET_REPLICA_LOG_INFO_VERSION {
            return Err(KeelRpcError(format!(
                "unsupported GetReplicaLogInfo version {version}"
            )));
        }
        let correlation_id = get_i32(&mut frame, "correlation id")?;
        let client_id_len = get_i16(&mut frame, "client id")?;
        if client_id_len > 0 {
            let len = usize::try_from(client_id_len).unwrap_or(0);
            need(&frame, len, "client id")?;
            frame.advance(len);
        }
        let broker_id = get_i32(&mut frame, "broker id")?;
        let mut topics = Vec::new();
        for _ in 0..get_count(&mut frame, "topics")? {
            let topic = get_uuid(&mut frame)?;
            let mut partitions = Vec::new();
            for _ in 0..get_count(&mut frame, "partitions")? {
                partitions.push(get_i32(&mut frame, "partition")?);
            }
            topics.push((topic, partitions));
        }
        if frame.has_remaining() {
            return Err(KeelRpcError(format!(
                "{} trailing bytes",
                frame.remaining()
            )));
        }
        Ok((
            correlation_id,
            GetReplicaLogInfoRequest { broker_id, topics },
        ))
    }
}

impl GetReplicaLogInfoResponse {
    /// The whole size-prefixed response frame.
    pub fn encode(&self, correlation_id: i32) -> Bytes {
        let mut out = BytesMut::new();
        out.put_i32(correlation_id);
        out.put_i16(self.error_code);
        out.put_i64(self.broker_epoch);
        put_count(&mut out, self.topics.len());
        for (topic, partitions) in &self.topics {
            out.extend_from_slice(topic.as_bytes());
            put_count(&mut out, partitions.len());
            for p in partitions {
                out.put_i32(p.partition);
                out.put_i16(p.error_code);
                out.put_i32(p.last_written_leader_epoch);
                out.put_i32(p.current_leader_epoch);
                out.put_i64(p.log_end_offset);
            }
        }
        frame(out)
    }

    /// Decodes a response frame (without its size prefix), checking the correlation id.
    pub fn decode(mut frame: Bytes, correlation_id: i32) -> Result<Self, KeelRpcError> {
        let got = get_i32(&mut frame, "correlation id")?;
        if got != correlation_id {
            return Err(KeelRpcError(format!(
                "correlation id {got}, expected {correlation_id}"
            )));
        }
        let error_code = get_i16(&mut frame, "error code")?;
        let broker_epoch = get_i64(&mut frame, "broker epoch")?;
        let mut topics = Vec::new();
        for _ in 0..get_count(&mut frame, "topics")? {
            let topic = get_uuid(&mut frame)?;
            let mut partitions = Vec::new();
            for _ in 0..get_count(&mut frame, "partitions")? {
                partitions.push(PartitionLogInfo {
                    partition: get_i32(&mut frame, "partition")?,
                    error_code: get_i16(&mut frame, "error code")?,
                    last_written_leader_epoch: get_i32(&mut frame, "leader epoch")?,
                    current_leader_epoch: get_i32(&mut frame, "leader epoch")?,
                    log_end_offset: get_i64(&mut frame, "log end offset")?,
                });
            }
            topics.push((topic, partitions));
        }
        if frame.has_remaining() {
            return Err(KeelRpcError(format!(
                "{} trailing bytes",
                frame.remaining()
            )));
        }
        Ok(GetReplicaLogInfoResponse {
            error_code,
            broker_epoch,
            topics,
        })
    }
}

/// The controller quorum's Raft RPCs between controllers (Vote, AppendEntries, a whole
/// snapshot). Their bodies are opaque to this crate — the Raft messages as JSON — framed like
/// every Keel RPC: request header v1 then the body; response header v0 then the body.
pub const RAFT_VOTE_KEY: i16 = KEEL_API_KEY_BASE + 500;
/// AppendEntries (also the leader's heartbeat).
pub const RAFT_APPEND_ENTRIES_KEY: i16 = KEEL_API_KEY_BASE + 501;
/// A whole snapshot, sent to a voter that lags behind the leader's purged log.
pub const RAFT_SNAPSHOT_KEY: i16 = KEEL_API_KEY_BASE + 502;
/// The only version of the Raft RPCs.
pub const RAFT_RPC_VERSION: i16 = 0;

/// Whether `key` is one of the Raft RPCs.
pub fn is_raft_key(key: i16) -> bool {
    matches!(
        key,
        RAFT_VOTE_KEY | RAFT_APPEND_ENTRIES_KEY | RAFT_SNAPSHOT_KEY
    )
}

/// The whole size-prefixed frame of an opaque Keel request.
pub fn encode_opaque_request(key: i16, correlation_id: i32, client_id: &str, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + client_id.len() + body.len());
    out.put_i16(key);
    out.put_i16(RAFT_RPC_VERSION);
    out.put_i32(correlation_id);
    let id = &client_id.as_bytes()[..client_id.len().min(i16::MAX as usize)];
    out.put_i16(id.len() as i16);
    out.extend_from_slice(id);
    out.extend_from_slice(body);
    frame(out)
}

/// An opaque Keel request: its key, correlation id and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueRequest {
    pub key: i16,
    pub correlation_id: i32,
    pub body: Bytes,
}

/// Decodes an opaque request frame (without its size prefix).
pub fn decode_opaque_request(mut frame: Bytes) -> Result<OpaqueRequest, KeelRpcError> {
    let key = get_i16(&mut frame, "api key")?;
    let version = get_i16(&mut frame, "api version")?;
    if version != RAFT_RPC_VERSION {
        return Err(KeelRpcError(format!(
            "unsupported version {version} of Keel RPC {key}"
        )));
    }
    let correlation_id = get_i32(&mut frame, "correlation id")?;
    let client_id_len = get_i16(&mut frame, "client id")?;
    if client_id_len > 0 {
        let len = usize::try_from(client_id_len).unwrap_or(0);
        need(&frame, len, "client id")?;
        frame.advance(len);
    }
    Ok(OpaqueRequest {
        key,
        correlation_id,
        body: frame,
    })
}

/// The whole size-prefixed frame of an opaque Keel response.
pub fn encode_opaque_response(correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(4 + body.len());
    out.put_i32(correlation_id);
    out.extend_from_slice(body);
    frame(out)
}

/// Decodes an opaque response frame (without its size prefix), checking the correlation id;
/// returns the body.
pub fn decode_opaque_response(
    mut frame: Bytes,
    correlation_id: i32,
) -> Result<Bytes, KeelRpcError> {
    let got = get_i32(&mut frame, "correlation id")?;
    if got != correlation_id {
        return Err(KeelRpcError(format!(
            "correlation id {got}, expected {correlation_id}"
        )));
    }
    Ok(frame)
}

/// The api key of a request frame (without its size prefix), if it has one.
pub fn peek_api_key(frame: &[u8]) -> Option<i16> {
    (frame.len() >= 2).then(|| i16::from_be_bytes([frame[0], frame[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: request and response survive an encode/decode round trip, frame sizes included.
    #[test]
    fn round_trips() {
        let topic = Uuid::from_bytes([7; 16]);
        let request = GetReplicaLogInfoRequest {
            broker_id: 100,
            topics: vec![(topic, vec![0, 2])],
        };
        let bytes = request.encode(42, "keel-controller");
        assert_eq!(
            bytes.len() - 4,
            i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize
        );
        assert_eq!(peek_api_key(&bytes[4..]), Some(GET_REPLICA_LOG_INFO_KEY));
        assert_eq!(
            GetReplicaLogInfoRequest::decode(bytes.slice(4..)).unwrap(),
            (42, request)
        );
        let response = GetReplicaLogInfoResponse {
            error_code: 0,
            broker_epoch: 17,
            topics: vec![(
                topic,
                vec![PartitionLogInfo {
                    partition: 2,
                    error_code: 0,
                    last_written_leader_epoch: 3,
                    current_leader_epoch: 4,
                    log_end_offset: 1234,
                }],
            )],
        };
        let bytes = response.encode(42);
        assert_eq!(
            GetReplicaLogInfoResponse::decode(bytes.slice(4..), 42).unwrap(),
            response
        );
        assert!(GetReplicaLogInfoResponse::decode(bytes.slice(4..), 43).is_err());
    }

    // Shows: truncated input, hostile counts and trailing bytes are errors, never panics.
    #[test]
    fn malformed_input_is_an_error() {
        let request = GetReplicaLogInfoRequest {
            broker_id: 1,
            topics: vec![(Uuid::nil(), vec![0])],
        };
        let bytes = request.encode(1, "c").slice(4..);
        for cut in 0..bytes.len() {
            assert!(
                GetReplicaLogInfoRequest::decode(bytes.slice(..cut)).is_err(),
                "cut {cut}"
            );
        }
        let mut trailing = BytesMut::from(&bytes[..]);
        trailing.put_u8(0);
        assert!(GetReplicaLogInfoRequest::decode(trailing.freeze()).is_err());
        let mut hostile = BytesMut::new();
        hostile.put_i16(GET_REPLICA_LOG_INFO_KEY);
        hostile.put_i16(0);
        hostile.put_i32(1);
        hostile.put_i16(-1);
        hostile.put_i32(1);
        hostile.put_i32(i32::MAX);
        assert!(GetReplicaLogInfoRequest::decode(hostile.freeze()).is_err());
    }

    // Shows: opaque Raft frames round-trip, and a wrong correlation id or version is refused.
    #[test]
    fn opaque_frames_round_trip() {
        let bytes = encode_opaque_request(RAFT_VOTE_KEY, 9, "keel-controller-1", b"{\"x\":1}");
        assert_eq!(
            bytes.len() - 4,
            i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize
        );
        assert_eq!(peek_api_key(&bytes[4..]), Some(RAFT_VOTE_KEY));
        assert!(is_raft_key(RAFT_VOTE_KEY) && !is_raft_key(GET_REPLICA_LOG_INFO_KEY));
        let request = decode_opaque_request(bytes.slice(4..)).unwrap();
        assert_eq!(request.key, RAFT_VOTE_KEY);
        assert_eq!(request.correlation_id, 9);
        assert_eq!(&request.body[..], b"{\"x\":1}");
        let response = encode_opaque_response(9, b"ok");
        assert_eq!(
            &decode_opaque_response(response.slice(4..), 9).unwrap()[..],
            b"ok"
        );
        assert!(decode_opaque_response(response.slice(4..), 8).is_err());
        let mut wrong_version = BytesMut::from(&bytes[4..]);
        wrong_version[3] = 1;
        assert!(decode_opaque_request(wrong_version.freeze()).is_err());
        for cut in 0..9 {
            assert!(decode_opaque_request(bytes.slice(4..4 + cut)).is_err());
        }
    }
}
