//! Walking the batches of a segment file from a byte position: header-only (reads, clean loads)
//! or fully validated (recovery), stopping at the first batch that is torn or corrupt.

use std::io;

use crate::batch::{parse_batch_at, BatchError, BatchHeader, HEADER_SIZE};
use crate::storage::StorageFile;

/// How thoroughly [`scan_batches`] checks each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Read the header; check the length fits the file and magic is 2.
    HeaderOnly,
    /// Read the whole batch and run [`parse_batch_at`] (length, magic, CRC-32C, counts).
    Full,
}

/// Why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ScanError {
    /// The batch is torn or corrupt.
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The visitor rejected a well-formed batch.
    #[error("batch at byte {position} rejected: {reason}")]
    Rejected {
        /// Byte position of the batch.
        position: u64,
        /// Why.
        reason: String,
    },
}

/// Where a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanEnd {
    /// Byte position after the last good batch.
    pub position: u64,
    /// Why the scan stopped before the end of the file, if it did.
    pub error: Option<ScanError>,
}

/// What the visitor tells the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Visit {
    /// Go on with the next batch.
    Continue,
    /// Stop here; the scan ends at this batch's position with no error.
    Stop,
    /// Treat this batch as corrupt (e.g. its offsets break the log's order).
    Reject(String),
}

/// Walks batches from `from` to `file_size`, calling `visit(position, header)` for each good one.
pub(crate) fn scan_batches(
    file: &dyn StorageFile,
    file_size: u64,
    from: u64,
    check: Check,
    mut visit: impl FnMut(u64, &BatchHeader) -> io::Result<Visit>,
) -> io::Result<ScanEnd> {
    let mut position = from;
    let mut header_buf = [0u8; HEADER_SIZE];
    let mut batch_buf = Vec::new();
    while position < file_size {
        let at = usize::try_from(position).unwrap_or(usize::MAX);
        let available = file_size - position;
        let stop = |error: BatchError| {
            Ok(ScanEnd {
                position,
                error: Some(error.into()),
            })
        };
        if available < HEADER_SIZE as u64 {
            return stop(BatchError::Truncated {
                position: at,
                needed: HEADER_SIZE,
                available: available as usize,
            });
        }
        file.read_exact_at(position, &mut header_buf)?;
        let header = BatchHeader::parse(&header_buf).expect("buffer holds a whole header");
        let size = match header.size_bytes().filter(|&s| s >= HEADER_SIZE) {
            Some(size) => size,
            None => {
                return stop(BatchError::LengthTooSmall {
                    position: at,
                    batch_length: header.batch_length,
                })
            }
        };
        if size as u64 > available {
            return stop(BatchError::Truncated {
                position: at,
                needed: size,
                available: available as usize,
            });
        }
        if let Err(e) = check_batch(file, position, size, check, &header, &mut batch_buf)? {
            return stop(e);
        }
        match visit(position, &header)? {
            Visit::Continue => position += size as u64,
            Visit::Stop => {
                return Ok(ScanEnd {
                    position,
                    error: None,
                })
            }
            Visit::Reject(reason) => {
                return Ok(ScanEnd {
                    position,
                    error: Some(ScanError::Rejected { position, reason }),
                })
            }
        }
    }
    Ok(ScanEnd {
        position,
        error: None,
    })
}

fn check_batch(
    file: &dyn StorageFile,
    position: u64,
    size: usize,
    check: Check,
    header: &BatchHeader,
    buf: &mut Vec<u8>,
) -> io::Result<Result<(), BatchError>> {
    let at = usize::try_from(position).unwrap_or(usize::MAX);
    match check {
        Check::HeaderOnly if header.magic != crate::batch::MAGIC_V2 => {
            Ok(Err(BatchError::UnsupportedMagic {
                position: at,
                magic: header.magic,
            }))
        }
        Check::HeaderOnly => Ok(Ok(())),
        Check::Full => {
            buf.resize(size, 0);
            file.read_exact_at(position, buf)?;
            Ok(parse_batch_at(buf, 0)
                .map(|_| ())
                .map_err(|e| with_position(e, at)))
        }
    }
}

/// The same error, reported at segment position `at` instead of buffer position 0.
fn with_position(error: BatchError, at: usize) -> BatchError {
    match error {
        BatchError::Truncated {
            needed, available, ..
        } => BatchError::Truncated {
            position: at,
            needed,
            available,
        },
        BatchError::LengthTooSmall { batch_length, .. } => BatchError::LengthTooSmall {
            position: at,
            batch_length,
        },
        BatchError::UnsupportedMagic { magic, .. } => BatchError::UnsupportedMagic {
            position: at,
            magic,
        },
        BatchError::CrcMismatch {
            stored, computed, ..
        } => BatchError::CrcMismatch {
            position: at,
            stored,
            computed,
        },
        BatchError::NegativeRecordsCount { count, .. } => BatchError::NegativeRecordsCount {
            position: at,
            count,
        },
        BatchError::NegativeLastOffsetDelta { delta, .. } => BatchError::NegativeLastOffsetDelta {
            position: at,
            delta,
        },
    }
}
