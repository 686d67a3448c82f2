//! Uncompressed v2 record batches built the way a producer builds them, and the records of an
//! uncompressed batch decoded. The log itself never needs them; tests, `keel bench` and the
//! controller's metadata log (whose records are small JSON values) do.

use crate::batch::{
    compute_crc, BatchHeader, ATTRIBUTES_POS, BASE_SEQUENCE_POS, CRC_POS, HEADER_SIZE, LENGTH_POS,
    LOG_OVERHEAD, MAGIC_V2, PRODUCER_EPOCH_POS, PRODUCER_ID_POS,
};

/// Builds one uncompressed magic-2 batch as a producer sends it: base offset 0, partition leader
/// epoch -1, no producer id (-1), CreateTime, every record at `base_timestamp`, no headers.
pub fn build_batch(records: &[(Option<&[u8]>, &[u8])], base_timestamp: i64) -> Vec<u8> {
    let timed: Vec<_> = records
        .iter()
        .map(|&(key, value)| (key, value, base_timestamp))
        .collect();
    build_batch_with_timestamps(&timed)
}

/// A record for [`build_batch_with_timestamps`]: (key, value, timestamp).
pub type TimedRecord<'a> = (Option<&'a [u8]>, &'a [u8], i64);

/// Like [`build_batch`], with one timestamp per record (`maxTimestamp` is their maximum, the base
/// timestamp the first one's). An empty slice gives a batch with zero records and timestamp -1.
pub fn build_batch_with_timestamps(records: &[TimedRecord<'_>]) -> Vec<u8> {
    let keyed: Vec<_> = records
        .iter()
        .map(|&(key, value, ts)| (key, Some(value), ts))
        .collect();
    build_keyed_batch(&keyed)
}

/// A record for [`build_keyed_batch`]: (key, value, timestamp); a `None` value is a tombstone.
pub type KeyedRecord<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i64);

/// Like [`build_batch_with_timestamps`], with nullable values (compacted topics' tombstones).
pub fn build_keyed_batch(records: &[KeyedRecord<'_>]) -> Vec<u8> {
    let base_timestamp = records.first().map_or(-1, |r| r.2);
    let max_timestamp = records.iter().map(|r| r.2).max().unwrap_or(-1);
    let mut body = Vec::new();
    for (delta, &(key, value, ts)) in records.iter().enumerate() {
        encode_record(&mut body, delta as i64, ts - base_timestamp, key, value);
    }
    let last_offset_delta = records.len().saturating_sub(1) as i32;
    let mut batch = Vec::with_capacity(HEADER_SIZE + body.len());
    batch.extend_from_slice(&0i64.to_be_bytes()); // baseOffset
    batch.extend_from_slice(&0i32.to_be_bytes()); // batchLength, patched below
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partitionLeaderEpoch
    batch.push(MAGIC_V2 as u8);
    batch.extend_from_slice(&0u32.to_be_bytes()); // crc, patched below
    batch.extend_from_slice(&0i16.to_be_bytes()); // attributes
    batch.extend_from_slice(&last_offset_delta.to_be_bytes());
    batch.extend_from_slice(&base_timestamp.to_be_bytes());
    batch.extend_from_slice(&max_timestamp.to_be_bytes());
    batch.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    batch.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    batch.extend_from_slice(&(records.len() as i32).to_be_bytes());
    assert_eq!(batch.len(), HEADER_SIZE);
    batch.extend_from_slice(&body);
    let batch_length = (batch.len() - LOG_OVERHEAD) as i32;
    batch[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// Marks a batch built by [`build_batch`] as an idempotent producer's: sets its producer id,
/// epoch and base sequence and recomputes the CRC.
pub fn set_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16, base_sequence: i32) {
    batch[PRODUCER_ID_POS..PRODUCER_ID_POS + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_EPOCH_POS..PRODUCER_EPOCH_POS + 2]
        .copy_from_slice(&producer_epoch.to_be_bytes());
    batch[BASE_SEQUENCE_POS..BASE_SEQUENCE_POS + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = compute_crc(batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Marks a batch built by [`build_batch`] as part of producer `producer_id`'s transaction, as
/// a coordinator writes it on the producer's behalf (transactional offset commits): the
/// transactional attribute, the producer id and epoch, no sequence (-1); the CRC recomputed.
pub fn set_transactional_producer(batch: &mut [u8], producer_id: i64, producer_epoch: i16) {
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES_POS], batch[ATTRIBUTES_POS + 1]])
        | crate::batch::TRANSACTIONAL_ATTRIBUTE;
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    set_producer(batch, producer_id, producer_epoch, -1);
}

fn encode_record(
    out: &mut Vec<u8>,
    offset_delta: i64,
    ts_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) {
    let mut record = vec![0u8]; // attributes
    put_varlong(&mut record, ts_delta);
    put_varlong(&mut record, offset_delta);
    for field in [key, value] {
        match field {
            Some(bytes) => {
                put_varlong(&mut record, bytes.len() as i64);
                record.extend_from_slice(bytes);
            }
            None => put_varlong(&mut record, -1),
        }
    }
    put_varlong(&mut record, 0); // headers count
    put_varlong(out, record.len() as i64);
    out.extend_from_slice(&record);
}

/// Appends a zig-zag varint (Kafka's `varint` / `varlong`).
pub(crate) fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(crate) fn get_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(((v >> 1) as i64) ^ -((v & 1) as i64));
        }
    }
    None
}

/// A record decoded by [`decode_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Absolute offset (batch base offset + offset delta).
    pub offset: i64,
    /// Absolute timestamp (base timestamp + delta).
    pub timestamp: i64,
    /// The key, if not null.
    pub key: Option<Vec<u8>>,
    /// The value (a null value decodes as empty; see `value_is_null`).
    pub value: Vec<u8>,
    /// Whether the value was null (a tombstone).
    pub value_is_null: bool,
}

/// Decodes the records of one uncompressed v2 batch (headers are skipped). Fails with
/// `None` on a compressed or malformed batch (never panics on malformed input).
pub fn decode_records(batch: &[u8]) -> Option<Vec<DecodedRecord>> {
    let view = crate::batch::parse_batch_at(batch, 0).ok()?;
    let header: BatchHeader = view.header;
    if header.attributes & crate::batch::COMPRESSION_CODEC_MASK != 0 {
        return None;
    }
    let mut pos = HEADER_SIZE;
    let mut records = Vec::new();
    for _ in 0..header.records_count {
        let len = usize::try_from(get_varlong(view.bytes, &mut pos)?).ok()?;
        let end = pos.checked_add(len)?;
        let body = view.bytes.get(pos..end)?;
        records.push(decode_record(body, &header)?);
        pos = end;
    }
    (pos == view.bytes.len()).then_some(records)
}

fn decode_record(body: &[u8], header: &BatchHeader) -> Option<DecodedRecord> {
    let mut pos = 1; // attributes
    let ts_delta = get_varlong(body, &mut pos)?;
    let offset_delta = get_varlong(body, &mut pos)?;
    let key = get_bytes(body, &mut pos)?;
    let value = get_bytes(body, &mut pos)?;
    Some(DecodedRecord {
        offset: header.base_offset.0 + offset_delta,
        timestamp: header.base_timestamp + ts_delta,
        key,
        value_is_null: value.is_none(),
        value: value.unwrap_or_default(),
    })
}

fn get_bytes(buf: &[u8], pos: &mut usize) -> Option<Option<Vec<u8>>> {
    let len = get_varlong(buf, pos)?;
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(usize::try_from(len).ok()?)?;
    let bytes = buf.get(*pos..end)?.to_vec();
    *pos = end;
    Some(Some(bytes))
}
