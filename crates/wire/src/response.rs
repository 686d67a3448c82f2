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
