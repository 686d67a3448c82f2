//! Keel's extensions to Kafka messages, carried as **tagged fields** of Kafka's flexible
//! versions so that every Kafka client and tool keeps decoding the messages unchanged (an
//! unknown tag is skipped by Kafka's generated codecs, and by `kafka_protocol`'s, which keeps
//! it in `unknown_tagged_fields`).
//!
//! KIP-966 planned `ElectLeaders` v3 with a `DesiredLeaders` array ("The kafka-leader-election
//! tool ... can directly select a leader"); Apache Kafka never shipped it, so Keel carries the
//! same information as tagged fields of v2, with tag numbers from [`KEEL_TAG_BASE`] on — far
//! above the small tags Kafka assigns — so a future Kafka field cannot collide with them:
//!
//! ```text
//! ElectLeadersRequest v2+ (top level)
//!   tag 10000  RecoveryMode int8        for ElectionType 1 (UNCLEAN) when an unclean recovery
//!                                       starts: 0 = Proactive (the default), 1 = Balanced
//! ElectLeadersRequest v2+ TopicPartitions[i]
//!   tag 10000  DesiredLeaders [int32]   compact array, one per entry of Partitions, by index:
//!                                       elect exactly this replica (KIP-966's manual election)
//! DescribeTopicPartitionsResponse v0 Topics[i].Partitions[j]
//!   tag 10000  KeelStatus int8, Waiting [int32] (compact array)
//!                                       what a leaderless partition waits for ([`PartitionStatusCode`])
//! DescribeLogDirsResponse v2+ Results[i]
//!   tag 10000  QuarantineCount int32, QuarantinedBytes int64, OfflineReason compact nullable string
//!                                       damaged data set aside in the directory, and why it is
//!                                       offline ([`LogDirStatus`])
//! BrokerHeartbeatRequest v0+ (top level)
//!   tag 10000  LostReplicas [TopicId uuid, Partition int32, PartitionEpoch int32, Reason int8]
//!                                       replicas the running broker lost ([`LostReplicaEntry`])
//! ListTransactionsRequest v0+ (top level)
//!   tag 10000  StrandedTransactions [ProducerId int64, ProducerEpoch int16, Topic compact
//!                                   string, Partition int32]
//!                                       transactions left open on a partition whose leader an
//!                                       unclean recovery elected ([`StrandedTxn`])
//! ListTransactionsResponse v0+ (top level)
//!   tag 10000  Resolutions [ProducerId int64, ProducerEpoch int16, Topic compact string,
//!                           Partition int32, Outcome int8, MarkerEpoch int16,
//!                           CoordinatorEpoch int32]
//!                                       what this broker's coordinator knows of them
//!                                       ([`TxnResolution`])
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The first tag number Keel uses.
pub const KEEL_TAG_BASE: i32 = 10_000;
/// `ElectLeadersRequest.RecoveryMode`.
pub const RECOVERY_MODE_TAG: i32 = KEEL_TAG_BASE;
/// `ElectLeadersRequest.TopicPartitions[].DesiredLeaders`.
pub const DESIRED_LEADERS_TAG: i32 = KEEL_TAG_BASE;
/// `DescribeTopicPartitionsResponse...Partitions[].KeelStatus`.
pub const PARTITION_STATUS_TAG: i32 = KEEL_TAG_BASE;

/// `BrokerHeartbeatRequest.LostReplicas`.
pub const LOST_REPLICAS_TAG: i32 = KEEL_TAG_BASE;
/// `DescribeLogDirsResponse.Results[].KeelStatus`.
pub const LOG_DIR_STATUS_TAG: i32 = KEEL_TAG_BASE;
/// `ListTransactionsRequest.StrandedTransactions`.
pub const STRANDED_TXNS_TAG: i32 = KEEL_TAG_BASE;
/// `ListTransactionsResponse.Resolutions`.
pub const TXN_RESOLUTIONS_TAG: i32 = KEEL_TAG_BASE;

/// ElectLeaders' `ErrorMessage` for a partition where an unclean election started KIP-966's
/// unclean recovery instead of electing at once (error code 0; the leader follows when the
/// recovery completes).
pub const RECOVERY_STARTED: &str = "unclean recovery started";

/// ElectLeaders' `ErrorMessage` (error code 0) for a manual election of a replica that was in
/// neither the ISR nor the ELR.
pub const UNCLEAN_WARNING: &str =
    "elected a replica outside the ISR and ELR: records it does not have are lost";

/// Longest array accepted in a tagged field (a guard against hostile counts).
const ARRAY_MAX: usize = 1 << 20;

/// Why a tagged field does not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExtError {
    #[error("tagged field {tag}: {what}")]
    Malformed { tag: i32, what: &'static str },
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn get_uvarint(buf: &mut Bytes, tag: i32) -> Result<u64, ExtError> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if !buf.has_remaining() {
            return Err(ExtError::Malformed {
                tag,
                what: "truncated varint",
            });
        }
        let byte = buf.get_u8();
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(ExtError::Malformed {
        tag,
        what: "varint too long",
    })
}

fn put_int32_array(buf: &mut BytesMut, values: &[i32]) {
    put_uvarint(buf, values.len() as u64 + 1);
    for v in values {
        buf.put_i32(*v);
    }
}

fn get_int32_array(buf: &mut Bytes, tag: i32) -> Result<Vec<i32>, ExtError> {
    let n = get_count(buf, tag, ARRAY_MAX)?;
    if buf.remaining() < n * 4 {
        return Err(ExtError::Malformed {
            tag,
            what: "array longer than the field",
        });
    }
    Ok((0..n).map(|_| buf.get_i32()).collect())
}

fn finished(buf: &Bytes, tag: i32) -> Result<(), ExtError> {
    if buf.has_remaining() {
        return Err(ExtError::Malformed {
            tag,
            what: "trailing bytes",
        });
    }
    Ok(())
}

/// `DesiredLeaders` as a tagged field's bytes.
pub fn encode_desired_leaders(leaders: &[i32]) -> Bytes {
    let mut buf = BytesMut::new();
    put_int32_array(&mut buf, leaders);
    buf.freeze()
}

/// `DesiredLeaders` from a tagged field's bytes.
pub fn decode_desired_leaders(bytes: &Bytes) -> Result<Vec<i32>, ExtError> {
    let mut buf = bytes.clone();
    let leaders = get_int32_array(&mut buf, DESIRED_LEADERS_TAG)?;
    finished(&buf, DESIRED_LEADERS_TAG)?;
    Ok(leaders)
}

/// The recovery mode an unclean ElectLeaders asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryModeField {
    Proactive,
    Balanced,
}

/// `RecoveryMode` as a tagged field's bytes.
pub fn encode_recovery_mode(mode: RecoveryModeField) -> Bytes {
    Bytes::from(vec![match mode {
        RecoveryModeField::Proactive => 0u8,
        RecoveryModeField::Balanced => 1u8,
    }])
}

/// `RecoveryMode` from a tagged field's bytes.
pub fn decode_recovery_mode(bytes: &Bytes) -> Result<RecoveryModeField, ExtError> {
    match bytes.as_ref() {
        [0] => Ok(RecoveryModeField::Proactive),
        [1] => Ok(RecoveryModeField::Balanced),
        _ => Err(ExtError::Malformed {
            tag: RECOVERY_MODE_TAG,
            what: "RecoveryMode must be one byte, 0 or 1",
        }),
    }
}

/// What a partition is doing, as the broker's metadata says (`KeelStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionStatusCode {
    /// It has a leader.
    Led,
    /// No live ISR member; waiting for one of these (classic rules, or an ISR not yet empty).
    WaitingForIsr(Vec<i32>),
    /// ISR empty; waiting for one of these ELR members to come back (Balanced, Manual).
    WaitingForElr(Vec<i32>),
    /// The Unclean Recovery Manager is recovering it; with Balanced, it waits for every one of
    /// these (the LastKnownELR, or every replica when that is empty) to answer.
    UncleanRecovery { balanced: bool, quorum: Vec<i32> },
    /// Manual strategy: paused until an operator elects a leader.
    Paused,
}

impl PartitionStatusCode {
    fn code(&self) -> i8 {
        match self {
            PartitionStatusCode::Led => 0,
            PartitionStatusCode::WaitingForIsr(_) => 1,
            PartitionStatusCode::WaitingForElr(_) => 2,
            PartitionStatusCode::UncleanRecovery {
                balanced: false, ..
            } => 3,
            PartitionStatusCode::UncleanRecovery { balanced: true, .. } => 4,
            PartitionStatusCode::Paused => 5,
        }
    }

    fn brokers(&self) -> &[i32] {
        match self {
            PartitionStatusCode::WaitingForIsr(b)
            | PartitionStatusCode::WaitingForElr(b)
            | PartitionStatusCode::UncleanRecovery { quorum: b, .. } => b,
            PartitionStatusCode::Led | PartitionStatusCode::Paused => &[],
        }
    }

    /// The tagged field's bytes.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i8(self.code());
        put_int32_array(&mut buf, self.brokers());
        buf.freeze()
    }

    /// From the tagged field's bytes.
    pub fn decode(bytes: &Bytes) -> Result<Self, ExtError> {
        let tag = PARTITION_STATUS_TAG;
        let mut buf = bytes.clone();
        if !buf.has_remaining() {
            return Err(ExtError::Malformed { tag, what: "empty" });
        }
        let code = buf.get_i8();
        let brokers = get_int32_array(&mut buf, tag)?;
        finished(&buf, tag)?;
        Ok(match code {
            0 => PartitionStatusCode::Led,
            1 => PartitionStatusCode::WaitingForIsr(brokers),
            2 => PartitionStatusCode::WaitingForElr(brokers),
            3 => PartitionStatusCode::UncleanRecovery {
                balanced: false,
                quorum: brokers,
            },
            4 => PartitionStatusCode::UncleanRecovery {
                balanced: true,
                quorum: brokers,
            },
            5 => PartitionStatusCode::Paused,
            _ => {
                return Err(ExtError::Malformed {
                    tag,
                    what: "unknown status code",
                })
            }
        })
    }
}

/// What Keel adds to a DescribeLogDirs result: the damaged data set aside in the directory
/// (issue 19) and, for an offline directory, the error that took it offline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogDirStatus {
    /// Quarantine directories in the log directory.
    pub quarantine_count: i32,
    /// Bytes they hold.
    pub quarantined_bytes: i64,
    /// Why the directory is offline, if it is.
    pub offline_reason: Option<String>,
}

/// Longest `OfflineReason` encoded (an IO error message; longer ones are cut).
const OFFLINE_REASON_BYTES_MAX: usize = 4096;

impl LogDirStatus {
    /// The tagged field's bytes.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i32(self.quarantine_count);
        buf.put_i64(self.quarantined_bytes);
        match &self.offline_reason {
            None => put_uvarint(&mut buf, 0),
            Some(reason) => {
                let mut end = reason.len().min(OFFLINE_REASON_BYTES_MAX);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                put_uvarint(&mut buf, end as u64 + 1);
                buf.put_slice(&reason.as_bytes()[..end]);
            }
        }
        buf.freeze()
    }

    /// From the tagged field's bytes.
    pub fn decode(bytes: &Bytes) -> Result<Self, ExtError> {
        let tag = LOG_DIR_STATUS_TAG;
        let mut buf = bytes.clone();
        if buf.remaining() < 12 {
            return Err(ExtError::Malformed {
                tag,
                what: "too short",
            });
        }
        let quarantine_count = buf.get_i32();
        let quarantined_bytes = buf.get_i64();
        let n = get_uvarint(&mut buf, tag)?;
        let offline_reason = match usize::try_from(n).ok().and_then(|n| n.checked_sub(1)) {
            None => None,
            Some(len) if len <= OFFLINE_REASON_BYTES_MAX && buf.remaining() >= len => {
                let text = buf.split_to(len);
                Some(
                    String::from_utf8(text.to_vec()).map_err(|_| ExtError::Malformed {
                        tag,
                        what: "reason not UTF-8",
                    })?,
                )
            }
            Some(_) => {
                return Err(ExtError::Malformed {
                    tag,
                    what: "reason longer than the field",
                })
            }
        };
        finished(&buf, tag)?;
        Ok(LogDirStatus {
            quarantine_count,
            quarantined_bytes,
            offline_reason,
        })
    }
}

/// One entry of `BrokerHeartbeatRequest.LostReplicas`: a replica the running broker lost
/// (issue 19), with the partition epoch of the state it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostReplicaEntry {
    /// The topic id.
    pub topic_id: uuid::Uuid,
    /// The partition index.
    pub partition: i32,
    /// The partition epoch in the broker's image.
    pub partition_epoch: i32,
    /// 0 = damaged data set aside, 1 = its log directory failed.
    pub reason: i8,
}

/// Bytes of one encoded [`LostReplicaEntry`].
const LOST_REPLICA_ENTRY_BYTES: usize = 16 + 4 + 4 + 1;

/// `LostReplicas` as a tagged field's bytes.
pub fn encode_lost_replicas(entries: &[LostReplicaEntry]) -> Bytes {
    let mut buf = BytesMut::with_capacity(5 + entries.len() * LOST_REPLICA_ENTRY_BYTES);
    put_uvarint(&mut buf, entries.len() as u64 + 1);
    for e in entries {
        buf.put_slice(e.topic_id.as_bytes());
        buf.put_i32(e.partition);
        buf.put_i32(e.partition_epoch);
        buf.put_i8(e.reason);
    }
    buf.freeze()
}

/// `LostReplicas` from a tagged field's bytes; at most `max` entries are accepted.
pub fn decode_lost_replicas(bytes: &Bytes, max: usize) -> Result<Vec<LostReplicaEntry>, ExtError> {
    let tag = LOST_REPLICAS_TAG;
    let mut buf = bytes.clone();
    let n = get_count(&mut buf, tag, max)?;
    if buf.remaining() != n * LOST_REPLICA_ENTRY_BYTES {
        return Err(ExtError::Malformed {
            tag,
            what: "array length does not match the field",
        });
    }
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let mut id = [0u8; 16];
        buf.copy_to_slice(&mut id);
        entries.push(LostReplicaEntry {
            topic_id: uuid::Uuid::from_bytes(id),
            partition: buf.get_i32(),
            partition_epoch: buf.get_i32(),
            reason: buf.get_i8(),
        });
    }
    Ok(entries)
}

/// A transaction open on a partition whose leader an unclean recovery elected: its marker may
/// have been lost with the previous leader's log, so the partition asks the coordinators.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StrandedTxn {
    pub producer_id: i64,
    /// The epoch of the transaction's records.
    pub producer_epoch: i16,
    pub topic: String,
    pub partition: i32,
}

/// What a coordinator knows of a [`StrandedTxn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Still open at the coordinator, or being ended: its own markers will come.
    Live,
    /// Decided: committed.
    Committed,
    /// Decided: aborted.
    Aborted,
}

/// A coordinator's answer for one [`StrandedTxn`]: the outcome, and for a decided one the
/// producer epoch and coordinator epoch its markers carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResolution {
    pub txn: StrandedTxn,
    pub outcome: TxnOutcome,
    pub marker_epoch: i16,
    pub coordinator_epoch: i32,
}

fn put_compact_string(buf: &mut BytesMut, s: &str) {
    put_uvarint(buf, s.len() as u64 + 1);
    buf.put_slice(s.as_bytes());
}

fn get_compact_string(buf: &mut Bytes, tag: i32) -> Result<String, ExtError> {
    let n = get_uvarint(buf, tag)?;
    let Some(n) = usize::try_from(n).ok().and_then(|n| n.checked_sub(1)) else {
        return Err(ExtError::Malformed {
            tag,
            what: "null string",
        });
    };
    if n > buf.remaining() {
        return Err(ExtError::Malformed {
            tag,
            what: "string longer than the field",
        });
    }
    let bytes = buf.split_to(n);
    String::from_utf8(bytes.to_vec()).map_err(|_| ExtError::Malformed {
        tag,
        what: "string is not UTF-8",
    })
}

fn put_stranded(buf: &mut BytesMut, t: &StrandedTxn) {
    buf.put_i64(t.producer_id);
    buf.put_i16(t.producer_epoch);
    put_compact_string(buf, &t.topic);
    buf.put_i32(t.partition);
}

fn get_stranded(buf: &mut Bytes, tag: i32) -> Result<StrandedTxn, ExtError> {
    let short = ExtError::Malformed {
        tag,
        what: "entry longer than the field",
    };
    if buf.remaining() < 10 {
        return Err(short);
    }
    let producer_id = buf.get_i64();
    let producer_epoch = buf.get_i16();
    let topic = get_compact_string(buf, tag)?;
    if buf.remaining() < 4 {
        return Err(short);
    }
    Ok(StrandedTxn {
        producer_id,
        producer_epoch,
        topic,
        partition: buf.get_i32(),
    })
}

/// The count of a compact array, at most `max` (checked before anything is allocated).
fn get_count(buf: &mut Bytes, tag: i32, max: usize) -> Result<usize, ExtError> {
    let n = get_uvarint(buf, tag)?;
    let Some(n) = usize::try_from(n).ok().and_then(|n| n.checked_sub(1)) else {
        return Err(ExtError::Malformed {
            tag,
            what: "null array",
        });
    };
    if n > max.min(ARRAY_MAX) {
        return Err(ExtError::Malformed {
            tag,
            what: "more entries than allowed",
        });
    }
    Ok(n)
}

/// `StrandedTransactions` as a tagged field's bytes.
pub fn encode_stranded_txns(txns: &[StrandedTxn]) -> Bytes {
    let mut buf = BytesMut::new();
    put_uvarint(&mut buf, txns.len() as u64 + 1);
    for t in txns {
        put_stranded(&mut buf, t);
    }
    buf.freeze()
}

/// `StrandedTransactions` from a tagged field's bytes; at most `max` entries are accepted.
pub fn decode_stranded_txns(bytes: &Bytes, max: usize) -> Result<Vec<StrandedTxn>, ExtError> {
    let tag = STRANDED_TXNS_TAG;
    let mut buf = bytes.clone();
    let n = get_count(&mut buf, tag, max)?;
    let mut txns = Vec::with_capacity(n.min(buf.remaining() / 15));
    for _ in 0..n {
        txns.push(get_stranded(&mut buf, tag)?);
    }
    finished(&buf, tag)?;
    Ok(txns)
}

/// `Resolutions` as a tagged field's bytes.
pub fn encode_txn_resolutions(resolutions: &[TxnResolution]) -> Bytes {
    let mut buf = BytesMut::new();
    put_uvarint(&mut buf, resolutions.len() as u64 + 1);
    for r in resolutions {
        put_stranded(&mut buf, &r.txn);
        buf.put_i8(match r.outcome {
            TxnOutcome::Live => 0,
            TxnOutcome::Committed => 1,
            TxnOutcome::Aborted => 2,
        });
        buf.put_i16(r.marker_epoch);
        buf.put_i32(r.coordinator_epoch);
    }
    buf.freeze()
}

/// `Resolutions` from a tagged field's bytes; at most `max` entries are accepted.
pub fn decode_txn_resolutions(bytes: &Bytes, max: usize) -> Result<Vec<TxnResolution>, ExtError> {
    let tag = TXN_RESOLUTIONS_TAG;
    let mut buf = bytes.clone();
    let n = get_count(&mut buf, tag, max)?;
    let mut out = Vec::with_capacity(n.min(buf.remaining() / 22));
    for _ in 0..n {
        let txn = get_stranded(&mut buf, tag)?;
        if buf.remaining() < 7 {
            return Err(ExtError::Malformed {
                tag,
                what: "entry longer than the field",
            });
        }
        let outcome = match buf.get_i8() {
            0 => TxnOutcome::Live,
            1 => TxnOutcome::Committed,
            2 => TxnOutcome::Aborted,
            _ => {
                return Err(ExtError::Malformed {
                    tag,
                    what: "unknown outcome",
                })
            }
        };
        out.push(TxnResolution {
            txn,
            outcome,
            marker_epoch: buf.get_i16(),
            coordinator_epoch: buf.get_i32(),
        });
    }
    finished(&buf, tag)?;
    Ok(out)
}

#[cfg(test)]
mod tests {

    // A log directory's Keel status round-trips, with and without an offline reason.
    #[test]
    fn log_dir_status_round_trips() {
        for status in [
            LogDirStatus::default(),
            LogDirStatus {
                quarantine_count: 2,
                quarantined_bytes: 5_000_000,
                offline_reason: Some("append x: No space left on device (os error 28)".into()),
            },
        ] {
            assert_eq!(LogDirStatus::decode(&status.encode()), Ok(status));
        }
        assert!(LogDirStatus::decode(&Bytes::from_static(&[0, 0])).is_err());
    }

    // LostReplicas round-trips, and hostile counts or lengths are refused before allocating.
    #[test]
    fn lost_replicas_round_trip_and_bounds() {
        let entries = vec![
            LostReplicaEntry {
                topic_id: uuid::Uuid::from_u128(7),
                partition: 3,
                partition_epoch: 12,
                reason: 0,
            },
            LostReplicaEntry {
                topic_id: uuid::Uuid::from_u128(9),
                partition: 0,
                partition_epoch: 1,
                reason: 1,
            },
        ];
        let bytes = encode_lost_replicas(&entries);
        assert_eq!(decode_lost_replicas(&bytes, 10), Ok(entries.clone()));
        assert!(decode_lost_replicas(&bytes, 1).is_err(), "over the bound");
        let mut hostile = BytesMut::new();
        put_uvarint(&mut hostile, u64::from(u32::MAX));
        assert!(decode_lost_replicas(&hostile.freeze(), usize::MAX).is_err());
        let short = bytes.slice(..bytes.len() - 1);
        assert!(decode_lost_replicas(&short, 10).is_err());
    }
    use super::*;
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::messages::{ElectLeadersRequest, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    // Shows: DesiredLeaders rides through Kafka's v2 codec as a tagged field and comes back
    // whole; a decoder that does not know it (Kafka's) still reads the standard fields.
    #[test]
    fn desired_leaders_survive_the_v2_codec() {
        let request = ElectLeadersRequest::default()
            .with_election_type(1)
            .with_topic_partitions(Some(vec![TopicPartitions::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![0, 1])
                .with_unknown_tagged_field(
                    DESIRED_LEADERS_TAG,
                    encode_desired_leaders(&[3, 1]),
                )]))
            .with_unknown_tagged_field(
                RECOVERY_MODE_TAG,
                encode_recovery_mode(RecoveryModeField::Balanced),
            );
        let mut buf = BytesMut::new();
        request.encode(&mut buf, 2).unwrap();
        let decoded = ElectLeadersRequest::decode(&mut buf.freeze(), 2).unwrap();
        assert_eq!(decoded.election_type, 1);
        let tp = &decoded.topic_partitions.as_ref().unwrap()[0];
        assert_eq!(tp.partitions, vec![0, 1]);
        let leaders = decode_desired_leaders(&tp.unknown_tagged_fields[&DESIRED_LEADERS_TAG]);
        assert_eq!(leaders, Ok(vec![3, 1]));
        let mode = decode_recovery_mode(&decoded.unknown_tagged_fields[&RECOVERY_MODE_TAG]);
        assert_eq!(mode, Ok(RecoveryModeField::Balanced));
    }

    // Shows: every status round-trips, and malformed bytes are errors, not panics.
    #[test]
    fn partition_status_round_trip_and_errors() {
        for status in [
            PartitionStatusCode::Led,
            PartitionStatusCode::WaitingForIsr(vec![1]),
            PartitionStatusCode::WaitingForElr(vec![2, 3]),
            PartitionStatusCode::UncleanRecovery {
                balanced: true,
                quorum: vec![1, 3],
            },
            PartitionStatusCode::UncleanRecovery {
                balanced: false,
                quorum: vec![],
            },
            PartitionStatusCode::Paused,
        ] {
            assert_eq!(PartitionStatusCode::decode(&status.encode()), Ok(status));
        }
        for bad in [&b""[..], &[9, 1], &[0], &[0, 5, 0], &[1, 1, 7]] {
            assert!(PartitionStatusCode::decode(&Bytes::copy_from_slice(bad)).is_err());
        }
        assert!(decode_desired_leaders(&Bytes::from_static(&[0x80])).is_err());
        assert!(decode_desired_leaders(&Bytes::from_static(&[0])).is_err());
        assert!(decode_recovery_mode(&Bytes::from_static(&[2])).is_err());
    }

    // Stranded transactions and their resolutions round-trip; hostile counts, short entries,
    // unknown outcomes and trailing bytes are refused.
    #[test]
    fn stranded_transactions_and_resolutions_round_trip_and_bounds() {
        let txns = vec![
            StrandedTxn {
                producer_id: 4000,
                producer_epoch: 7,
                topic: "orders".into(),
                partition: 2,
            },
            StrandedTxn {
                producer_id: 1,
                producer_epoch: 0,
                topic: String::new(),
                partition: 0,
            },
        ];
        let bytes = encode_stranded_txns(&txns);
        assert_eq!(decode_stranded_txns(&bytes, 10), Ok(txns.clone()));
        assert!(decode_stranded_txns(&bytes, 1).is_err(), "over the bound");
        assert!(decode_stranded_txns(&bytes.slice(..bytes.len() - 1), 10).is_err());
        let mut trailing = BytesMut::from(&bytes[..]);
        trailing.put_u8(0);
        assert!(decode_stranded_txns(&trailing.freeze(), 10).is_err());
        let mut hostile = BytesMut::new();
        put_uvarint(&mut hostile, u64::from(u32::MAX));
        assert!(decode_stranded_txns(&hostile.clone().freeze(), usize::MAX).is_err());

        let resolutions = vec![
            TxnResolution {
                txn: txns[0].clone(),
                outcome: TxnOutcome::Committed,
                marker_epoch: 8,
                coordinator_epoch: 3,
            },
            TxnResolution {
                txn: txns[1].clone(),
                outcome: TxnOutcome::Live,
                marker_epoch: -1,
                coordinator_epoch: -1,
            },
        ];
        let bytes = encode_txn_resolutions(&resolutions);
        assert_eq!(decode_txn_resolutions(&bytes, 10), Ok(resolutions));
        assert!(decode_txn_resolutions(&bytes.slice(..bytes.len() - 2), 10).is_err());
        assert!(decode_txn_resolutions(&hostile.freeze(), usize::MAX).is_err());
        let mut unknown = BytesMut::new();
        put_uvarint(&mut unknown, 2);
        put_stranded(&mut unknown, &txns[0]);
        unknown.put_i8(9);
        unknown.put_i16(0);
        unknown.put_i32(0);
        assert!(decode_txn_resolutions(&unknown.freeze(), 10).is_err());
    }
}
