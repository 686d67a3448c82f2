//! The client side of the protocol, for Keel's own connections (follower fetches, broker to
//! controller RPCs, `keel` admin and bench commands): encode a request with its header and size
//! prefix, decode a response body for a known API and version.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Why a response could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ResponseDecodeError {
    #[error("response correlation id {got} does not match the request's {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
    #[error("malformed {api_key:?} v{api_version} response: {source:#}")]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        source: anyhow::Error,
    },
}

/// Encodes `body` as request `correlation_id` of `api_key` at `api_version`, with its size
/// prefix.
pub fn encode_request<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &T,
) -> anyhow::Result<Bytes> {
    let mut buf = BytesMut::with_capacity(128);
    buf.put_i32(0);
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(api_version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
    header.encode(&mut buf, api_key.request_header_version(api_version))?;
    body.encode(&mut buf, api_version)?;
    let size = i32::try_from(buf.len() - 4)?;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(buf.freeze())
}

/// Decodes a response frame (without its size prefix) to request `correlation_id`.
pub fn decode_response<T: Decodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    mut frame: Bytes,
) -> Result<T, ResponseDecodeError> {
    let malformed = |source: anyhow::Error| ResponseDecodeError::Malformed {
        api_key,
        api_version,
        source,
    };
    let header = ResponseHeader::decode(&mut frame, api_key.response_header_version(api_version))
        .map_err(malformed)?;
    if header.correlation_id != correlation_id {
        return Err(ResponseDecodeError::CorrelationMismatch {
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    let body = T::decode(&mut frame, api_version).map_err(malformed)?;
    if frame.has_remaining() {
        return Err(malformed(anyhow::anyhow!(
            "{} trailing bytes after the body",
            frame.remaining()
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::take_frame;
    use crate::request::{decode, Request};
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

    // Shows: what the client encodes the server side decodes, and a response encoded by the
    // server side decodes on the client side (the two halves agree on header versions).
    #[test]
    fn round_trips_with_the_server_side() {
        let bytes = encode_request(
            ApiKey::Metadata,
            12,
            5,
            "keel-test",
            &MetadataRequest::default(),
        )
        .unwrap();
        let mut buffer = BytesMut::from(&bytes[..]);
        let frame = take_frame(&mut buffer, 1 << 20).unwrap().unwrap();
        let decoded = decode(frame).unwrap();
        assert!(matches!(decoded.body, Request::Metadata(_)));
        assert_eq!(decoded.correlation_id(), 5);

        let response = MetadataResponse::default().with_controller_id(3.into());
        let bytes = crate::response::encode(ApiKey::Metadata, 12, 5, &response).unwrap();
        let mut buffer = BytesMut::from(&bytes[..]);
        let frame = take_frame(&mut buffer, 1 << 20).unwrap().unwrap();
        let back: MetadataResponse =
            decode_response(ApiKey::Metadata, 12, 5, frame.clone()).unwrap();
        assert_eq!(back, response);
        assert!(matches!(
            decode_response::<MetadataResponse>(ApiKey::Metadata, 12, 6, frame),
            Err(ResponseDecodeError::CorrelationMismatch { .. })
        ));
    }
}
