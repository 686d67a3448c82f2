//! Encoding responses: size prefix, response header (v0 or flexible v1 by API and version),
//! body.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;

use crate::versions;

/// Encodes `body` as the response to request `correlation_id` of `api_key` at `api_version`,
/// with its size prefix.
pub fn encode<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header.encode(&mut buf, api_key.response_header_version(api_version))?;
    body.encode(&mut buf, api_version)?;
    let size = i32::try_from(buf.len() - 4)?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// The `ApiVersions` v0 answer with `UNSUPPORTED_VERSION` and the full key list, sent when a
/// client asks with a version the broker does not know (KIP-511).
pub fn unsupported_api_versions(correlation_id: i32) -> anyhow::Result<Bytes> {
    unsupported_api_versions_on(versions::ListenerKind::Broker, correlation_id)
}

/// [`unsupported_api_versions`] for a listener of `kind` (listing that listener's APIs).
pub fn unsupported_api_versions_on(
    kind: versions::ListenerKind,
    correlation_id: i32,
) -> anyhow::Result<Bytes> {
    let body = versions::api_versions_response_on(
        kind,
        Some(kafka_protocol::error::ResponseError::UnsupportedVersion),
    );
    encode(ApiKey::ApiVersions, 0, correlation_id, &body)
}

/// Record sets at least this large leave a Fetch response as their own [`Bytes`] (see
/// [`encode_fetch`]); smaller ones are copied into the surrounding encoding, where one more
/// `iovec` would cost more than the copy.
pub const FETCH_RECORDS_OWN_PART_BYTES: usize = 4096;

/// Stands in for a large record set while the rest of a Fetch response is encoded: an 8-byte
/// tag, then the record set's index (big-endian u64).
const RECORDS_MARKER_TAG: &[u8; 8] = b"\xffKEELREC";
const RECORDS_MARKER_LEN: usize = 16;

/// Encodes a Fetch response as [`encode`] does, but as parts to be written in order (vectored):
/// each record set of at least [`FETCH_RECORDS_OWN_PART_BYTES`] is its own part, the very
/// `Bytes` the log read returned, so the records are never copied into the encoding (Kafka
/// sends them from the segment file the same way, with `sendfile`).
///
/// How: every large record set is replaced by a 16-byte marker, the response is encoded by
/// `kafka-protocol`, and each marker (with its length prefix) is then cut out and replaced by
/// the true length prefix and the record set. The markers are checked to occur exactly once
/// each, in order, behind the length prefix of a 16-byte record set; anything else (which no
/// response Keel builds produces) falls back to the copying [`encode`].
pub fn encode_fetch(
    api_version: i16,
    correlation_id: i32,
    mut body: kafka_protocol::messages::FetchResponse,
) -> anyhow::Result<Vec<Bytes>> {
    // (topic, partition, records) of every record set taken out, in encoding order.
    let mut taken: Vec<(usize, usize, Bytes)> = Vec::new();
    for (t, topic) in body.responses.iter_mut().enumerate() {
        for (p, partition) in topic.partitions.iter_mut().enumerate() {
            let large = partition
                .records
                .as_ref()
                .is_some_and(|r| r.len() >= FETCH_RECORDS_OWN_PART_BYTES);
            if large {
                let mut marker = BytesMut::with_capacity(RECORDS_MARKER_LEN);
                marker.put_slice(RECORDS_MARKER_TAG);
                marker.put_u64(taken.len() as u64);
                let records = partition.records.replace(marker.freeze());
                taken.push((t, p, records.expect("checked above")));
            }
        }
    }
    let encoded = encode(ApiKey::Fetch, api_version, correlation_id, &body)?;
    if taken.is_empty() {
        return Ok(vec![encoded]);
    }
    let records: Vec<Bytes> = taken.iter().map(|(_, _, r)| r.clone()).collect();
    if let Some(parts) = splice_records(&encoded, &records, api_version) {
        return Ok(parts);
    }
    // Put the records back and encode the plain way.
    for (t, p, records) in taken {
        body.responses[t].partitions[p].records = Some(records);
    }
    Ok(vec![encode(
        ApiKey::Fetch,
        api_version,
        correlation_id,
        &body,
    )?])
}

/// Replaces each marker of `encoded` (and the length prefix before it) by the length prefix of
/// `records[i]` and `records[i]` itself; fixes the size prefix. `None` if the markers are not
/// exactly where expected.
fn splice_records(encoded: &Bytes, records: &[Bytes], api_version: i16) -> Option<Vec<Bytes>> {
    // COMPACT_RECORDS (unsigned varint of length + 1) from v12, RECORDS (int32 length) before.
    let compact = api_version >= 12;
    let marker_prefix: &[u8] = if compact {
        &[RECORDS_MARKER_LEN as u8 + 1]
    } else {
        &[0, 0, 0, RECORDS_MARKER_LEN as u8]
    };
    let found: Vec<usize> = encoded
        .windows(RECORDS_MARKER_TAG.len())
        .enumerate()
        .filter(|(_, w)| *w == RECORDS_MARKER_TAG)
        .map(|(at, _)| at)
        .collect();
    if found.len() != records.len() {
        return None;
    }
    let mut parts = Vec::with_capacity(records.len() * 2 + 2);
    let mut head = BytesMut::with_capacity(64);
    head.put_i32(0); // the size, set below
    let mut from = 4; // after the old size prefix
    let mut total = 0usize;
    for (index, (&at, records)) in found.iter().zip(records).enumerate() {
        let index_bytes = encoded.get(at + 8..at + RECORDS_MARKER_LEN)?;
        let prefix_at = at.checked_sub(marker_prefix.len())?;
        if index_bytes != (index as u64).to_be_bytes()
            || encoded.get(prefix_at..at)? != marker_prefix
            || prefix_at < from
        {
            return None;
        }
        head.put_slice(&encoded[from..prefix_at]);
        if compact {
            put_unsigned_varint(&mut head, u32::try_from(records.len() + 1).ok()?);
        } else {
            head.put_i32(i32::try_from(records.len()).ok()?);
        }
        total += head.len();
        parts.push(head.split().freeze());
        total += records.len();
        parts.push(records.clone());
        from = at + RECORDS_MARKER_LEN;
    }
    head.put_slice(&encoded[from..]);
    total += head.len();
    parts.push(head.freeze());
    let size = i32::try_from(total - 4).ok()?;
    let mut first = BytesMut::from(&parts[0][..]);
    first[..4].copy_from_slice(&size.to_be_bytes());
    parts[0] = first.freeze();
    Some(parts)
}

fn put_unsigned_varint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
        PartitionData, SnapshotId,
    };
    use kafka_protocol::messages::{BrokerId, FetchResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn records(len: usize, seed: u8) -> Bytes {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>()
            .into()
    }

    /// A response with every field Keel sets (and some it does not), valid at `version`.
    fn response(version: i16, sizes: &[Option<usize>]) -> FetchResponse {
        let partitions = |topic: u8| -> Vec<PartitionData> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, size)| {
                    let mut p = PartitionData::default()
                        .with_partition_index(i as i32)
                        .with_error_code(if i == 1 { 6 } else { 0 })
                        .with_high_watermark(1000 + i as i64)
                        .with_last_stable_offset(900 + i as i64)
                        .with_log_start_offset(if version >= 5 { 10 } else { -1 })
                        .with_aborted_transactions((i % 2 == 0).then(|| {
                            vec![AbortedTransaction::default()
                                .with_producer_id(7.into())
                                .with_first_offset(3)]
                        }))
                        .with_records(size.map(|n| records(n, topic + i as u8)));
                    if version >= 11 {
                        p = p.with_preferred_read_replica(BrokerId(i as i32 % 3 - 1));
                    }
                    if version >= 12 && i == 2 {
                        p = p
                            .with_diverging_epoch(
                                EpochEndOffset::default().with_epoch(4).with_end_offset(77),
                            )
                            .with_current_leader(
                                LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(2))
                                    .with_leader_epoch(9),
                            )
                            .with_snapshot_id(
                                SnapshotId::default().with_end_offset(5).with_epoch(1),
                            );
                    }
                    p
                })
                .collect()
        };
        let topics = (0..3u8)
            .map(|t| {
                let mut topic = FetchableTopicResponse::default().with_partitions(partitions(t));
                if version >= 13 {
                    topic = topic.with_topic_id(uuid::Uuid::from_u128(0x1234_5678 + u128::from(t)));
                } else {
                    topic =
                        topic.with_topic(TopicName(StrBytes::from_string(format!("topic-{t}"))));
                }
                topic
            })
            .collect();
        let mut body = FetchResponse::default()
            .with_throttle_time_ms(0)
            .with_responses(topics);
        if version >= 7 {
            body = body.with_error_code(0).with_session_id(42);
        }
        if version >= 16 {
            body = body.with_node_endpoints(vec![NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(9093)
                .with_rack(None)]);
        }
        body
    }

    fn concat(parts: &[Bytes]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.iter().copied()).collect()
    }

    #[test]
    fn encode_fetch_is_encode_in_parts_at_every_version() {
        let sizes = [
            Some(FETCH_RECORDS_OWN_PART_BYTES),
            None,
            Some(0),
            Some(100),
            Some(70_000),
            Some(FETCH_RECORDS_OWN_PART_BYTES - 1),
            Some(200_000),
        ];
        for version in 4..=18 {
            let body = response(version, &sizes);
            let plain = encode(ApiKey::Fetch, version, 99, &body).unwrap();
            let parts = encode_fetch(version, 99, body.clone()).unwrap();
            assert_eq!(concat(&parts), plain.to_vec(), "version {version}");
            // The three large record sets of each topic are parts of their own: the same
            // memory, not copies; the smaller ones are not.
            for topic in &body.responses {
                for (i, partition) in topic.partitions.iter().enumerate() {
                    let Some(records) = &partition.records else {
                        continue;
                    };
                    let own_part = parts
                        .iter()
                        .any(|p| p.as_ptr() == records.as_ptr() && p.len() == records.len());
                    let large = records.len() >= FETCH_RECORDS_OWN_PART_BYTES;
                    assert_eq!(own_part, large, "version {version}, partition {i}");
                }
            }
        }
    }

    #[test]
    fn encode_fetch_without_large_records_is_one_part() {
        let body = response(18, &[Some(10), None]);
        let parts = encode_fetch(18, 1, body.clone()).unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0], encode(ApiKey::Fetch, 18, 1, &body).unwrap());
    }

    #[test]
    fn encode_fetch_falls_back_when_a_marker_is_ambiguous() {
        // A small record set that happens to hold the marker's tag: the splice refuses, and the
        // plain encoding (with every record set back in place) is sent.
        for version in [11, 16, 18] {
            let mut body = response(version, &[Some(10_000), Some(20)]);
            let mut tricky = BytesMut::new();
            tricky.put_slice(RECORDS_MARKER_TAG);
            tricky.put_u64(0);
            tricky.put_slice(b"tail");
            body.responses[1].partitions[1].records = Some(tricky.freeze());
            let plain = encode(ApiKey::Fetch, version, 5, &body).unwrap();
            let parts = encode_fetch(version, 5, body).unwrap();
            assert_eq!(parts.len(), 1, "version {version}");
            assert_eq!(parts[0], plain, "version {version}");
        }
    }
}
