//! The records of `__consumer_offsets`, in Kafka's own binary layout (so Kafka's tools can read
//! the topic): a versioned key and a versioned value, both big-endian and non-flexible.
//!
//! | key version | key fields | value |
//! |---|---|---|
//! | 1 | group, topic, partition (`OffsetCommitKey`) | `OffsetCommitValue` v3: offset, leader epoch, metadata, commit timestamp |
//! | 2 | group (`GroupMetadataKey`) | `GroupMetadataValue` v3: protocol type, generation, protocol, leader, state timestamp, members |
//!
//! A record without a value (a tombstone) deletes its key: compaction drops both in the end.

use bytes::Bytes;

/// What a `__consumer_offsets` record is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordKey {
    /// A committed offset of one partition for one group.
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    /// A group's membership and generation.
    Group { group: String },
}

impl RecordKey {
    /// The group the record belongs to.
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. } | RecordKey::Group { group } => group,
        }
    }
}

/// A committed offset (`OffsetCommitValue` v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when the client did not say.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// One member as stored (`MemberMetadata` v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group as stored (`GroupMetadataValue` v3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<StoredMember>,
}

/// The longest string a record can hold: strings carry an i16 length. Ids longer than this
/// (possible in flexible request versions) are refused before anything is written.
pub const MAX_STRING_BYTES: usize = i16::MAX as usize;

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_VALUE_VERSION: i16 = 3;

/// Encodes a key.
pub fn encode_key(key: &RecordKey) -> Vec<u8> {
    let mut w = Writer::default();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            w.i16(OFFSET_KEY_VERSION);
            w.string(group);
            w.string(topic);
            w.i32(*partition);
        }
        RecordKey::Group { group } => {
            w.i16(GROUP_KEY_VERSION);
            w.string(group);
        }
    }
    w.0
}

/// Encodes a committed offset.
pub fn encode_offset(value: &OffsetValue) -> Vec<u8> {
    let mut w = Writer::default();
    w.i16(OFFSET_VALUE_VERSION);
    w.i64(value.offset);
    w.i32(value.leader_epoch);
    w.string(&value.metadata);
    w.i64(value.commit_timestamp);
    w.0
}

/// Encodes a group.
pub fn encode_group(value: &GroupValue) -> Vec<u8> {
    let mut w = Writer::default();
    w.i16(GROUP_VALUE_VERSION);
    w.string(&value.protocol_type);
    w.i32(value.generation);
    w.nullable_string(value.protocol.as_deref());
    w.nullable_string(value.leader.as_deref());
    w.i64(value.state_timestamp);
    w.i32(value.members.len() as i32);
    for m in &value.members {
        w.string(&m.member_id);
        w.nullable_string(m.group_instance_id.as_deref());
        w.string(&m.client_id);
        w.string(&m.client_host);
        w.i32(m.rebalance_timeout_ms);
        w.i32(m.session_timeout_ms);
        w.bytes(&m.subscription);
        w.bytes(&m.assignment);
    }
    w.0
}

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("__consumer_offsets record: {0}")]
pub struct RecordError(String);

/// Decodes a key.
pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, RecordError> {
    let mut r = Reader { bytes, at: 0 };
    let key = match r.i16()? {
        0 | OFFSET_KEY_VERSION => RecordKey::Offset {
            group: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        },
        GROUP_KEY_VERSION => RecordKey::Group { group: r.string()? },
        other => return Err(RecordError(format!("unknown key version {other}"))),
    };
    Ok(key)
}

/// Decodes a committed offset (value versions 0–3).
pub fn decode_offset(bytes: &[u8]) -> Result<OffsetValue, RecordError> {
    let mut r = Reader { bytes, at: 0 };
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp = match version {
        0..=3 => r.i64()?,
        other => return Err(RecordError(format!("unknown offset value version {other}"))),
    };
    Ok(OffsetValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

/// Decodes a group (value version 3).
pub fn decode_group(bytes: &[u8]) -> Result<GroupValue, RecordError> {
    let mut r = Reader { bytes, at: 0 };
    let version = r.i16()?;
    if version != GROUP_VALUE_VERSION {
        return Err(RecordError(format!(
            "unsupported group value version {version}"
        )));
    }
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let state_timestamp = r.i64()?;
    let count = r.i32()?;
    let mut members = Vec::new();
    for _ in 0..count.max(0) {
        members.push(StoredMember {
            member_id: r.string()?,
            group_instance_id: r.nullable_string()?,
            client_id: r.string()?,
            client_host: r.string()?,
            rebalance_timeout_ms: r.i32()?,
            session_timeout_ms: r.i32()?,
            subscription: r.bytes()?,
            assignment: r.bytes()?,
        });
    }
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        state_timestamp,
        members,
    })
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn i16(&mut self, v: i16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn string(&mut self, s: &str) {
        let len = i16::try_from(s.len()).expect("handlers refuse strings over MAX_STRING_BYTES");
        self.i16(len);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.i16(-1),
        }
    }
    fn bytes(&mut self, b: &[u8]) {
        self.i32(b.len() as i32);
        self.0.extend_from_slice(b);
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RecordError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| {
            RecordError(format!(
                "ends at byte {} while reading {n} bytes at {}",
                self.bytes.len(),
                self.at
            ))
        })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn nullable_string(&mut self) -> Result<Option<String>, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let raw = self.take(len as usize)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| RecordError("a string is not UTF-8".to_string()))
    }
    fn string(&mut self) -> Result<String, RecordError> {
        self.nullable_string()?
            .ok_or_else(|| RecordError("a non-nullable string is null".to_string()))
    }
    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(self.take(len as usize)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        let keys = [
            RecordKey::Offset {
                group: "g".into(),
                topic: "orders".into(),
                partition: 7,
            },
            RecordKey::Group { group: "g".into() },
        ];
        for key in keys {
            assert_eq!(decode_key(&encode_key(&key)).unwrap(), key);
        }
        let offset = OffsetValue {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp: 1_700_000_000_000,
        };
        assert_eq!(decode_offset(&encode_offset(&offset)).unwrap(), offset);
        let group = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            state_timestamp: 9,
            members: vec![StoredMember {
                member_id: "m-1".into(),
                group_instance_id: Some("i-1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        assert_eq!(decode_group(&encode_group(&group)).unwrap(), group);
    }

    // Kafka's layout, byte for byte: OffsetCommitKey v1 = version, group, topic, partition.
    #[test]
    fn offset_key_layout_is_kafkas() {
        let key = encode_key(&RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 1,
        });
        assert_eq!(key, [0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 1]);
    }

    #[test]
    fn damaged_records_are_errors() {
        let full = encode_offset(&OffsetValue {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 0,
        });
        assert!(decode_offset(&full[..full.len() - 1]).is_err());
        assert!(decode_key(&[0, 9]).is_err());
        assert!(decode_key(&[]).is_err());
    }
}
