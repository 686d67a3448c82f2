//! The records of an uncompressed v2 records section, parsed without copying, and re-encoded
//! with a new timestamp or offset delta. Only the cleaner (`crate::log::compact`) and the checks
//! of a producer's batch (`crate::validate`) read records; every other path stores and serves
//! batches as they are.
//!
//! A record (all lengths and deltas are zig-zag varints):
//!
//! ```text
//! length | attributes i8 | timestampDelta | offsetDelta | keyLength | key | valueLength | value
//!        | headersCount | headers...
//! ```
//!
//! A negative key or value length is null; a null value is a tombstone.

use crate::plain_batch::{get_varlong, put_varlong};

/// One record inside a records section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordRef<'a> {
    /// The record's attributes byte (unused by Kafka today).
    pub attributes: u8,
    /// Timestamp relative to the batch's `baseTimestamp`.
    pub timestamp_delta: i64,
    /// Offset relative to the batch's `baseOffset`.
    pub offset_delta: i64,
    /// The key, `None` if null.
    pub key: Option<&'a [u8]>,
    /// Whether the value is null (a tombstone).
    pub value_is_null: bool,
    /// The value, `None` if null.
    pub value: Option<&'a [u8]>,
    /// The body from the key length on (key, value, headers): copied unchanged on re-encoding.
    pub tail: &'a [u8],
    /// The whole record including its length prefix.
    pub raw: &'a [u8],
}

/// Parses exactly `count` records filling `section`. Errors name what is malformed; nothing
/// panics on bad input.
pub(crate) fn parse_records(section: &[u8], count: i32) -> Result<Vec<RecordRef<'_>>, String> {
    let count = usize::try_from(count).map_err(|_| format!("negative record count {count}"))?;
    let mut records = Vec::with_capacity(count.min(section.len()));
    let mut pos = 0;
    for index in 0..count {
        let start = pos;
        let len = get_varlong(section, &mut pos)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| format!("record {index}: bad length"))?;
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= section.len())
            .ok_or_else(|| format!("record {index}: length {len} runs past the section"))?;
        let body = &section[pos..end];
        let record = parse_body(body, &section[start..end])
            .ok_or_else(|| format!("record {index}: malformed body"))?;
        records.push(record);
        pos = end;
    }
    if pos != section.len() {
        return Err(format!(
            "{} bytes after the last of {count} records",
            section.len() - pos
        ));
    }
    Ok(records)
}

fn parse_body<'a>(body: &'a [u8], raw: &'a [u8]) -> Option<RecordRef<'a>> {
    let attributes = *body.first()?;
    let mut pos = 1;
    let timestamp_delta = get_varlong(body, &mut pos)?;
    let offset_delta = get_varlong(body, &mut pos)?;
    let tail_start = pos;
    let key = nullable_bytes(body, &mut pos)?;
    let value = nullable_bytes(body, &mut pos)?;
    // Headers are copied, never interpreted; their count must at least be readable.
    get_varlong(body, &mut pos)?;
    Some(RecordRef {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value_is_null: value.is_none(),
        value,
        tail: &body[tail_start..],
        raw,
    })
}

fn nullable_bytes<'a>(buf: &'a [u8], pos: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = get_varlong(buf, pos)?;
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(usize::try_from(len).ok()?)?;
    let bytes = buf.get(*pos..end)?;
    *pos = end;
    Some(Some(bytes))
}

/// Appends `record` to `out` with `timestamp_delta` in place of its own; everything else is
/// copied.
pub(crate) fn encode_with_timestamp_delta(
    out: &mut Vec<u8>,
    record: &RecordRef<'_>,
    timestamp_delta: i64,
) {
    encode_with_deltas(out, record, timestamp_delta, record.offset_delta);
}

/// Appends `record` to `out` with `offset_delta` in place of its own; everything else is copied.
pub(crate) fn encode_with_offset_delta(
    out: &mut Vec<u8>,
    record: &RecordRef<'_>,
    offset_delta: i64,
) {
    encode_with_deltas(out, record, record.timestamp_delta, offset_delta);
}

fn encode_with_deltas(
    out: &mut Vec<u8>,
    record: &RecordRef<'_>,
    timestamp_delta: i64,
    offset_delta: i64,
) {
    let mut body = Vec::with_capacity(record.raw.len() + 8);
    body.push(record.attributes);
    put_varlong(&mut body, timestamp_delta);
    put_varlong(&mut body, offset_delta);
    body.extend_from_slice(record.tail);
    put_varlong(out, body.len() as i64);
    out.extend_from_slice(&body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::HEADER_SIZE;
    use crate::plain_batch::{build_keyed_batch, decode_records};

    // Shows: records parse back to their keys, tombstones and deltas; re-encoding with a new
    // timestamp delta changes only the timestamp.
    #[test]
    fn parses_and_reencodes() {
        let batch = build_keyed_batch(&[
            (Some(b"a"), Some(b"1"), 100),
            (None, Some(b"2"), 105),
            (Some(b"c"), None, 103),
        ]);
        let records = parse_records(&batch[HEADER_SIZE..], 3).unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0].key, Some(&b"a"[..]));
        assert_eq!(records[1].key, None);
        assert!(records[2].value_is_null && !records[0].value_is_null);
        assert_eq!(
            records.iter().map(|r| r.offset_delta).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(records[1].timestamp_delta, 5);

        let mut out = Vec::new();
        encode_with_timestamp_delta(&mut out, &records[2], -1_000_000);
        let again = parse_records(&out, 1).unwrap();
        assert_eq!(again[0].timestamp_delta, -1_000_000);
        assert_eq!((again[0].key, again[0].offset_delta), (Some(&b"c"[..]), 2));
        assert_eq!(again[0].tail, records[2].tail);
        assert!(decode_records(&batch).is_some());
    }

    // Shows: malformed sections are errors, never panics.
    #[test]
    fn rejects_malformed_sections() {
        let batch = build_keyed_batch(&[(Some(b"a"), Some(b"1"), 100)]);
        let section = &batch[HEADER_SIZE..];
        assert!(parse_records(section, 2).is_err());
        assert!(parse_records(&section[..section.len() - 1], 1).is_err());
        let mut extra = section.to_vec();
        extra.push(0);
        assert!(parse_records(&extra, 1).is_err());
        assert!(parse_records(&[0x7f], 1).is_err());
        assert!(parse_records(&[], -1).is_err());
    }
}
