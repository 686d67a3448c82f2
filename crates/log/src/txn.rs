//! Transactions on the partition side (KIP-98): the COMMIT / ABORT markers a transaction
//! coordinator writes into each partition a transaction touched, and the aborted-transaction
//! index that lets a `read_committed` consumer skip aborted records.
//!
//! A marker is a *control batch* (attributes: control and transactional bits) of the
//! producer's id and epoch, base sequence -1, holding one uncompressed record:
//!
//! ```text
//! key:   version i16 = 0 | type i16 (0 = ABORT, 1 = COMMIT)
//! value: version i16 = 0 | coordinator epoch i32
//! ```
//!
//! An aborted transaction is remembered as an [`AbortedTxn`]: the producer, the offset of its
//! first record in this partition, the offset of its ABORT marker, and the last stable offset
//! when the marker was written (a search through the index stops at the first entry whose last
//! stable offset is past the range it looks for). Each segment keeps the entries of the markers
//! it holds in `<base>.txnindex`, 34 bytes per entry in Kafka's layout:
//!
//! ```text
//! version i16 = 0 | producer id i64 | first offset i64 | last offset i64 | last stable offset i64
//! ```

use crate::batch::records::parse_records;
use crate::batch::{
    compute_crc, BatchHeader, COMPRESSION_CODEC_MASK, CONTROL_ATTRIBUTE, CRC_POS, HEADER_SIZE,
    LENGTH_POS, LOG_OVERHEAD, MAGIC_V2, TRANSACTIONAL_ATTRIBUTE,
};
use crate::plain_batch::put_varlong;
use crate::types::Offset;

/// Extension of aborted-transaction index files.
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
/// Bytes of one [`AbortedTxn`] in a `.txnindex` file.
pub const ABORTED_TXN_BYTES: usize = 34;

/// The two transaction markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// The transaction's records are discarded by `read_committed` readers.
    Abort,
    /// The transaction's records become visible to `read_committed` readers.
    Commit,
}

impl ControlType {
    /// Kafka's control record type id.
    pub fn id(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
        }
    }
}

/// The content of a COMMIT or ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    /// Commit or abort.
    pub kind: ControlType,
    /// The epoch of the coordinator that wrote it: a marker from an older coordinator than one
    /// that already wrote for the producer is fenced.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// The marker as a control batch of producer `producer_id` / `producer_epoch`, ready for
    /// [`crate::Log::append_marker_as_leader`]: base offset 0 and partition leader epoch -1
    /// (the log assigns both), every timestamp `timestamp_ms`.
    pub fn to_batch(self, producer_id: i64, producer_epoch: i16, timestamp_ms: i64) -> Vec<u8> {
        let mut record = vec![0u8]; // attributes
        put_varlong(&mut record, 0); // timestamp delta
        put_varlong(&mut record, 0); // offset delta
        put_varlong(&mut record, 4);
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&self.kind.id().to_be_bytes());
        put_varlong(&mut record, 6);
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        put_varlong(&mut record, 0); // headers
        let mut body = Vec::with_capacity(record.len() + 2);
        put_varlong(&mut body, record.len() as i64);
        body.extend_from_slice(&record);

        let mut batch = Vec::with_capacity(HEADER_SIZE + body.len());
        batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
        batch.extend_from_slice(&0i32.to_be_bytes()); // length, set below
        batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        batch.push(MAGIC_V2 as u8);
        batch.extend_from_slice(&0u32.to_be_bytes()); // crc, set below
        batch.extend_from_slice(&(CONTROL_ATTRIBUTE | TRANSACTIONAL_ATTRIBUTE).to_be_bytes());
        batch.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        batch.extend_from_slice(&timestamp_ms.to_be_bytes());
        batch.extend_from_slice(&timestamp_ms.to_be_bytes());
        batch.extend_from_slice(&producer_id.to_be_bytes());
        batch.extend_from_slice(&producer_epoch.to_be_bytes());
        batch.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        batch.extend_from_slice(&1i32.to_be_bytes()); // records
        batch.extend_from_slice(&body);
        let length = (batch.len() - LOG_OVERHEAD) as i32;
        batch[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
        let crc = compute_crc(&batch);
        batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// The marker a control batch holds (`batch`: the whole batch, its header `header`).
    /// `Ok(None)`: a control batch of another kind (Raft's leader-change and snapshot records)
    /// or one emptied by the cleaner. Errors describe a malformed marker.
    pub fn parse(batch: &[u8], header: &BatchHeader) -> Result<Option<EndTxnMarker>, String> {
        if !header.is_control() {
            return Err("not a control batch".to_string());
        }
        if header.records_count == 0 {
            return Ok(None);
        }
        if header.attributes & COMPRESSION_CODEC_MASK != 0 {
            return Err("a control batch must not be compressed".to_string());
        }
        let section = batch
            .get(HEADER_SIZE..)
            .ok_or_else(|| "control batch shorter than its header".to_string())?;
        let records = parse_records(section, header.records_count)?;
        let record = records.first().ok_or("control batch without a record")?;
        let key = record.key.ok_or("control record without a key")?;
        let (Some(version), Some(kind)) = (read_i16(key, 0), read_i16(key, 2)) else {
            return Err(format!("control record key of {} bytes", key.len()));
        };
        if version < 0 {
            return Err(format!("control record key version {version}"));
        }
        let kind = match kind {
            0 => ControlType::Abort,
            1 => ControlType::Commit,
            _ => return Ok(None),
        };
        let value = record.value.ok_or("transaction marker without a value")?;
        let (Some(value_version), Some(coordinator_epoch)) =
            (read_i16(value, 0), read_i32(value, 2))
        else {
            return Err(format!("transaction marker value of {} bytes", value.len()));
        };
        if value_version < 0 {
            return Err(format!("transaction marker value version {value_version}"));
        }
        Ok(Some(EndTxnMarker {
            kind,
            coordinator_epoch,
        }))
    }
}

fn read_i16(bytes: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn read_i32(bytes: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn read_i64(bytes: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// A transaction that ended in this partition: written by a marker, returned by
/// [`crate::ProducerStates::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first record here.
    pub first_offset: Offset,
    /// Offset of its marker.
    pub last_offset: Offset,
    /// Whether it was aborted.
    pub aborted: bool,
}

/// One entry of the aborted-transaction index (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first record here.
    pub first_offset: Offset,
    /// Offset of its ABORT marker.
    pub last_offset: Offset,
    /// The partition's last stable offset once the marker was written, ignoring replication.
    pub last_stable_offset: Offset,
}

impl AbortedTxn {
    /// The 34 bytes of the entry.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&0i16.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.first_offset.0.to_be_bytes());
        out.extend_from_slice(&self.last_offset.0.to_be_bytes());
        out.extend_from_slice(&self.last_stable_offset.0.to_be_bytes());
    }

    /// Parses a whole `.txnindex` file. Every entry must have version 0, a producer id >= 0
    /// and `0 <= first <= last`, a last stable offset >= 0 — a file that breaks any of it is damaged
    /// (the error says where), never half used.
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<AbortedTxn>, String> {
        if !bytes.len().is_multiple_of(ABORTED_TXN_BYTES) {
            return Err(format!(
                "{} bytes is not a whole number of {ABORTED_TXN_BYTES}-byte entries",
                bytes.len()
            ));
        }
        let mut entries = Vec::with_capacity(bytes.len() / ABORTED_TXN_BYTES);
        for (i, chunk) in bytes.chunks_exact(ABORTED_TXN_BYTES).enumerate() {
            let field = |at| read_i64(chunk, at).expect("34-byte chunk");
            let version = read_i16(chunk, 0).expect("34-byte chunk");
            let entry = AbortedTxn {
                producer_id: field(2),
                first_offset: Offset(field(10)),
                last_offset: Offset(field(18)),
                last_stable_offset: Offset(field(26)),
            };
            if version != 0
                || entry.producer_id < 0
                || entry.first_offset.0 < 0
                || entry.first_offset > entry.last_offset
                || entry.last_stable_offset.0 < 0
            {
                return Err(format!(
                    "entry {i} is malformed: version {version}, {entry:?}"
                ));
            }
            entries.push(entry);
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::parse_batch_at;

    #[test]
    fn markers_round_trip_through_a_valid_control_batch() {
        for kind in [ControlType::Abort, ControlType::Commit] {
            let marker = EndTxnMarker {
                kind,
                coordinator_epoch: 17,
            };
            let batch = marker.to_batch(42, 3, 1_000);
            let view = parse_batch_at(&batch, 0).expect("valid batch, CRC included");
            let header = view.header;
            assert!(header.is_control());
            assert_ne!(header.attributes & TRANSACTIONAL_ATTRIBUTE, 0);
            assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
            assert_eq!((header.base_sequence, header.records_count), (-1, 1));
            assert_eq!(EndTxnMarker::parse(&batch, &header), Ok(Some(marker)));
        }
    }

    #[test]
    fn kafka_marker_bytes_parse() {
        // An ABORT marker as Kafka 4.x writes it (coordinator epoch 5, producer 1000/0).
        let record: &[u8] = &[
            0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x05, 0x00,
        ];
        let mut section = Vec::new();
        put_varlong(&mut section, record.len() as i64);
        section.extend_from_slice(record);
        let mut batch = EndTxnMarker {
            kind: ControlType::Commit,
            coordinator_epoch: 0,
        }
        .to_batch(1000, 0, 0);
        batch.truncate(HEADER_SIZE);
        batch.extend_from_slice(&section);
        let header = BatchHeader::parse(&batch).expect("header");
        assert_eq!(
            EndTxnMarker::parse(&batch, &header),
            Ok(Some(EndTxnMarker {
                kind: ControlType::Abort,
                coordinator_epoch: 5
            }))
        );
    }

    #[test]
    fn malformed_markers_are_errors_not_panics() {
        let good = EndTxnMarker {
            kind: ControlType::Commit,
            coordinator_epoch: 1,
        }
        .to_batch(1, 0, 0);
        let header = BatchHeader::parse(&good).expect("header");
        for cut in 0..good.len() {
            let _ = EndTxnMarker::parse(&good[..cut], &header);
        }
        let mut data = good.clone();
        data[21..23].copy_from_slice(&0i16.to_be_bytes());
        let data_header = BatchHeader::parse(&data).expect("header");
        assert!(EndTxnMarker::parse(&data, &data_header).is_err());
    }

    #[test]
    fn index_entries_are_34_bytes_and_checked() {
        let entries = [
            AbortedTxn {
                producer_id: 7,
                first_offset: Offset(10),
                last_offset: Offset(20),
                last_stable_offset: Offset(21),
            },
            AbortedTxn {
                producer_id: 8,
                first_offset: Offset(15),
                last_offset: Offset(30),
                last_stable_offset: Offset(31),
            },
        ];
        let mut bytes = Vec::new();
        for e in &entries {
            e.encode(&mut bytes);
        }
        assert_eq!(bytes.len(), 2 * ABORTED_TXN_BYTES);
        assert_eq!(AbortedTxn::decode_all(&bytes), Ok(entries.to_vec()));
        assert!(AbortedTxn::decode_all(&bytes[..33]).is_err());
        let mut bad = bytes.clone();
        bad[10..18].copy_from_slice(&25i64.to_be_bytes()); // first > last
        assert!(AbortedTxn::decode_all(&bad).is_err());
        let mut bad = bytes;
        bad[0] = 1; // version
        assert!(AbortedTxn::decode_all(&bad).is_err());
    }
}
