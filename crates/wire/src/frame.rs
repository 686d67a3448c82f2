//! Size-prefixed framing: every Kafka request and response is an `int32` length followed by
//! that many bytes. [`take_frame`] only answers "is a whole frame here?"; parsing the frame is
//! [`crate::request`]'s job.

use bytes::{Buf, Bytes, BytesMut};

/// Kafka's default for `socket.request.max.bytes` (100 MiB).
pub const SOCKET_REQUEST_MAX_BYTES_DEFAULT: usize = 100 * 1024 * 1024;

/// Length of the size prefix in bytes.
pub const SIZE_PREFIX_BYTES: usize = 4;

/// A frame that cannot be accepted. The connection must be closed: the stream position after
/// a bad size prefix is meaningless.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame size {size} is negative")]
    NegativeSize { size: i32 },
    #[error("frame size {size} exceeds socket.request.max.bytes ({max_bytes})")]
    TooLarge { size: usize, max_bytes: usize },
}

/// Removes one complete frame (without its size prefix) from the front of `buffer`.
///
/// Returns `Ok(None)` when more bytes are needed. Never consumes a partial frame.
pub fn take_frame(buffer: &mut BytesMut, max_bytes: usize) -> Result<Option<Bytes>, FrameError> {
    if buffer.len() < SIZE_PREFIX_BYTES {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]);
    let size = usize::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
    if size > max_bytes {
        return Err(FrameError::TooLarge { size, max_bytes });
    }
    if buffer.len() < SIZE_PREFIX_BYTES + size {
        buffer.reserve(SIZE_PREFIX_BYTES + size - buffer.len());
        return Ok(None);
    }
    buffer.advance(SIZE_PREFIX_BYTES);
    Ok(Some(buffer.split_to(size).freeze()))
}

/// Bytes still needed before the frame at the front of `buffer` is complete (0 when unknown
/// or complete). Used to size reads.
pub fn missing_bytes(buffer: &BytesMut) -> usize {
    if buffer.len() < SIZE_PREFIX_BYTES {
        return SIZE_PREFIX_BYTES - buffer.len();
    }
    let size = i32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]);
    match usize::try_from(size) {
        Ok(size) => (SIZE_PREFIX_BYTES + size).saturating_sub(buffer.len()),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: frames are only taken whole, and a partial frame is left untouched.
    #[test]
    fn takes_whole_frames_only() {
        let mut buffer = BytesMut::new();
        buffer.extend_from_slice(&5i32.to_be_bytes());
        buffer.extend_from_slice(b"hel");
        assert_eq!(take_frame(&mut buffer, 100), Ok(None));
        assert_eq!(missing_bytes(&buffer), 2);
        buffer.extend_from_slice(b"lo");
        buffer.extend_from_slice(&1i32.to_be_bytes());
        assert_eq!(
            take_frame(&mut buffer, 100).unwrap().unwrap(),
            &b"hello"[..]
        );
        assert_eq!(take_frame(&mut buffer, 100), Ok(None));
        buffer.extend_from_slice(b"x");
        assert_eq!(take_frame(&mut buffer, 100).unwrap().unwrap(), &b"x"[..]);
        assert!(buffer.is_empty());
    }

    // Shows: oversized and negative size prefixes are refused before any body arrives.
    #[test]
    fn refuses_bad_sizes() {
        let mut buffer = BytesMut::from(&i32::MAX.to_be_bytes()[..]);
        assert!(matches!(
            take_frame(&mut buffer, 1024),
            Err(FrameError::TooLarge { .. })
        ));
        let mut buffer = BytesMut::from(&(-7i32).to_be_bytes()[..]);
        assert_eq!(
            take_frame(&mut buffer, 1024),
            Err(FrameError::NegativeSize { size: -7 })
        );
    }
}
