//! The records of `__transaction_state`, in Kafka's own layout (so Kafka's tools can read the
//! topic): key `TransactionLogKey` v0 (version i16 = 0, transactional id as an i16-length
//! string) and value `TransactionLogValue`, written at version 1 (flexible: compact strings
//! and arrays, tagged fields 0 `PreviousProducerId`, 1 `NextProducerId`, 2
//! `ClientTransactionVersion`); version 0 values (no tagged fields) are read too.
//!
//! ```text
//! value: version i16 | producer id i64 | producer epoch i16 | timeout ms i32 | state i8 |
//!        partitions [topic, [partition i32]] (nullable) | last update ms i64 | start ms i64 |
//!        (v1) tagged fields
//! ```
//!
//! A tombstone (no value) removes an expired transactional id.

use super::state::{TxnState, TxnValue};

/// The longest transactional id a record can hold (an i16-length string in the key).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = i16::MAX as usize;

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 1;

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("__transaction_state record: {0}")]
pub struct RecordError(String);

/// The key of `transactional_id`'s records.
pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let len = i16::try_from(transactional_id.len())
        .expect("handlers refuse transactional ids over MAX_TRANSACTIONAL_ID_BYTES");
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(transactional_id.as_bytes());
    out
}

/// The transactional id a key names.
pub fn decode_key(bytes: &[u8]) -> Result<String, RecordError> {
    let mut r = Reader { bytes, at: 0 };
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(RecordError(format!("unknown key version {version}")));
    }
    let len = r.i16()?;
    let len = usize::try_from(len).map_err(|_| RecordError("null transactional id".into()))?;
    let id = r.utf8(len)?;
    r.end()?;
    Ok(id)
}

/// Encodes a transaction's state (value version 1).
pub fn encode_value(value: &TxnValue) -> Vec<u8> {
    let mut w = Vec::with_capacity(64);
    w.extend_from_slice(&VALUE_VERSION.to_be_bytes());
    w.extend_from_slice(&value.producer_id.to_be_bytes());
    w.extend_from_slice(&value.producer_epoch.to_be_bytes());
    w.extend_from_slice(&value.timeout_ms.to_be_bytes());
    w.push(value.state.id() as u8);
    // Compact array: length + 1.
    put_uvarint(&mut w, value.partitions.len() as u64 + 1);
    for (topic, partitions) in &value.partitions {
        put_uvarint(&mut w, topic.len() as u64 + 1);
        w.extend_from_slice(topic.as_bytes());
        put_uvarint(&mut w, partitions.len() as u64 + 1);
        for p in partitions {
            w.extend_from_slice(&p.to_be_bytes());
        }
        put_uvarint(&mut w, 0); // the entry's tagged fields
    }
    w.extend_from_slice(&value.last_update_ms.to_be_bytes());
    w.extend_from_slice(&value.start_ms.to_be_bytes());
    let mut tagged: Vec<(u64, Vec<u8>)> = Vec::new();
    if value.previous_producer_id != -1 {
        tagged.push((0, value.previous_producer_id.to_be_bytes().to_vec()));
    }
    if value.next_producer_id != -1 {
        tagged.push((1, value.next_producer_id.to_be_bytes().to_vec()));
    }
    if value.client_transaction_version != 0 {
        tagged.push((2, value.client_transaction_version.to_be_bytes().to_vec()));
    }
    put_uvarint(&mut w, tagged.len() as u64);
    for (tag, data) in tagged {
        put_uvarint(&mut w, tag);
        put_uvarint(&mut w, data.len() as u64);
        w.extend_from_slice(&data);
    }
    w
}

/// Decodes a transaction's state (value versions 0 and 1). Bounded by the record's own size:
/// a count larger than the bytes left is an error, never an allocation.
pub fn decode_value(bytes: &[u8]) -> Result<TxnValue, RecordError> {
    let mut r = Reader { bytes, at: 0 };
    let version = r.i16()?;
    if !(0..=1).contains(&version) {
        return Err(RecordError(format!("unknown value version {version}")));
    }
    let flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let state_id = r.i8()?;
    let state = TxnState::from_id(state_id)
        .ok_or_else(|| RecordError(format!("unknown transaction state {state_id}")))?;
    let count = if flexible {
        r.uvarint()?.checked_sub(1)
    } else {
        u64::try_from(r.i32()?).ok()
    };
    let mut partitions = Vec::new();
    for _ in 0..count.unwrap_or(0) {
        let topic_len = if flexible {
            r.uvarint()?
                .checked_sub(1)
                .ok_or_else(|| RecordError("null topic".into()))?
        } else {
            u64::try_from(r.i16()?).map_err(|_| RecordError("null topic".into()))?
        };
        let topic = r.utf8(usize::try_from(topic_len).unwrap_or(usize::MAX))?;
        let n = if flexible {
            r.uvarint()?
                .checked_sub(1)
                .ok_or_else(|| RecordError("null partition list".into()))?
        } else {
            u64::try_from(r.i32()?).map_err(|_| RecordError("null partition list".into()))?
        };
        if n > (bytes.len() / 4) as u64 {
            return Err(RecordError(format!(
                "{n} partitions in a {}-byte record",
                bytes.len()
            )));
        }
        let mut ids = Vec::with_capacity(n as usize);
        for _ in 0..n {
            ids.push(r.i32()?);
        }
        if flexible {
            r.skip_tagged()?;
        }
        partitions.push((topic, ids));
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let mut value = TxnValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        client_transaction_version: 0,
    };
    if flexible {
        let fields = r.uvarint()?;
        for _ in 0..fields {
            let tag = r.uvarint()?;
            let size = usize::try_from(r.uvarint()?).unwrap_or(usize::MAX);
            let data = r.take(size)?;
            match (tag, data.len()) {
                (0, 8) => {
                    value.previous_producer_id = i64::from_be_bytes(data.try_into().expect("8"))
                }
                (1, 8) => value.next_producer_id = i64::from_be_bytes(data.try_into().expect("8")),
                (2, 2) => {
                    value.client_transaction_version =
                        i16::from_be_bytes(data.try_into().expect("2"))
                }
                (0..=2, n) => return Err(RecordError(format!("tagged field {tag} of {n} bytes"))),
                _ => {} // a field from a newer version
            }
        }
    }
    r.end()?;
    Ok(value)
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
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
    fn i8(&mut self) -> Result<i8, RecordError> {
        Ok(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn uvarint(&mut self) -> Result<u64, RecordError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(RecordError("varint longer than 10 bytes".into()))
    }
    fn utf8(&mut self, len: usize) -> Result<String, RecordError> {
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| RecordError("a string is not UTF-8".into()))
    }
    fn skip_tagged(&mut self) -> Result<(), RecordError> {
        let fields = self.uvarint()?;
        for _ in 0..fields {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).unwrap_or(usize::MAX);
            self.take(size)?;
        }
        Ok(())
    }
    fn end(&self) -> Result<(), RecordError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(RecordError(format!(
                "{} bytes after the last field",
                self.bytes.len() - self.at
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value() -> TxnValue {
        TxnValue {
            producer_id: 4000,
            previous_producer_id: 3999,
            next_producer_id: -1,
            producer_epoch: 7,
            timeout_ms: 60_000,
            state: TxnState::Ongoing,
            partitions: vec![
                ("orders".into(), vec![0, 3]),
                ("__consumer_offsets".into(), vec![12]),
            ],
            last_update_ms: 1_700_000_000_500,
            start_ms: 1_700_000_000_000,
            client_transaction_version: 2,
        }
    }

    #[test]
    fn keys_and_values_round_trip() {
        assert_eq!(decode_key(&encode_key("tx-1")).unwrap(), "tx-1");
        assert_eq!(encode_key("t"), [0, 0, 0, 1, b't']);
        let v = value();
        assert_eq!(decode_value(&encode_value(&v)).unwrap(), v);
        let empty = TxnValue {
            partitions: Vec::new(),
            state: TxnState::Empty,
            previous_producer_id: -1,
            client_transaction_version: 0,
            ..value()
        };
        assert_eq!(decode_value(&encode_value(&empty)).unwrap(), empty);
    }

    // A version 0 value as Kafka 3.x writes it: non-flexible strings and arrays.
    #[test]
    fn version_0_values_decode() {
        let mut b = Vec::new();
        b.extend_from_slice(&0i16.to_be_bytes());
        b.extend_from_slice(&5i64.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&900i32.to_be_bytes());
        b.push(2); // PrepareCommit
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&1i16.to_be_bytes());
        b.push(b't');
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&10i64.to_be_bytes());
        b.extend_from_slice(&9i64.to_be_bytes());
        let v = decode_value(&b).unwrap();
        assert_eq!(v.state, TxnState::PrepareCommit);
        assert_eq!(v.partitions, vec![("t".to_string(), vec![4])]);
        assert_eq!((v.producer_id, v.producer_epoch, v.timeout_ms), (5, 1, 900));
        assert_eq!(
            (v.last_update_ms, v.start_ms, v.previous_producer_id),
            (10, 9, -1)
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let full = encode_value(&value());
        for cut in 0..full.len() {
            assert!(decode_value(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = encode_value(&TxnValue {
            partitions: vec![("t".into(), vec![1])],
            ..value()
        });
        // Claim billions of partitions in the one topic.
        let at = 2 + 8 + 2 + 4 + 1 + 1 + 1 + 1;
        huge[at] = 0xff;
        assert!(decode_value(&huge).is_err());
        assert!(decode_key(&[0, 1, 0, 0]).is_err());
        assert!(decode_key(&[0, 0, 0, 5, b'x']).is_err());
    }
}
