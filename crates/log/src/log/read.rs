//! Reads: fetches of whole batches (KIP-74 semantics). Lookups by time live in `timestamps`.

use bytes::Bytes;

use super::Log;
use crate::batch::{parse_batch_at, BatchError};
use crate::error::{Damage, LogError};
use crate::segment::{ScanError, Visit};
use crate::types::Offset;

/// The answer to [`Log::read`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchData {
    /// Whole batches, as stored, concatenated.
    pub records: Bytes,
    /// Last offset of the last returned batch; `None` if nothing was returned.
    pub last_offset: Option<Offset>,
    /// Number of batches returned.
    pub batch_count: usize,
    /// The log start offset at the time of the read.
    pub log_start_offset: Offset,
    /// The log end offset at the time of the read.
    pub log_end_offset: Offset,
}

/// The state of a read while it walks batches.
struct ReadBudget {
    max_bytes: usize,
    min_one_batch: bool,
    limit: Offset,
    out: Vec<u8>,
    batch_count: usize,
    last_offset: Option<Offset>,
    done: bool,
}

impl Log {
    /// Reads whole batches starting with the one containing `start_offset`, stopping before a
    /// batch whose base offset is `>= max_offset` (the high watermark, if given) or at the log
    /// end, and before `max_bytes` would be exceeded — except that with `min_one_batch` the
    /// first batch is returned whatever its size (KIP-74). May span segments.
    ///
    /// `start_offset` outside `[log_start_offset, log_end_offset]` is `OffsetOutOfRange`.
    /// Batches are returned as stored, unchecked (consumers check CRCs themselves; the
    /// scrubber covers what they read): see [`Log::read_verified`].
    pub fn read(
        &self,
        start_offset: Offset,
        max_bytes: usize,
        max_offset: Option<Offset>,
        min_one_batch: bool,
    ) -> Result<FetchData, LogError> {
        self.read_checked(start_offset, max_bytes, max_offset, min_one_batch, false)
    }

    /// [`Log::read`], with every returned batch validated (length, magic, CRC-32C) and the walk
    /// to it checked: what a leader serves to a follower, which would otherwise copy damage to
    /// another replica. A batch that fails is [`LogError::Damaged`], naming the segment and
    /// byte position to set aside ([`Log::set_aside_damage`]).
    pub fn read_verified(
        &self,
        start_offset: Offset,
        max_bytes: usize,
        max_offset: Option<Offset>,
        min_one_batch: bool,
    ) -> Result<FetchData, LogError> {
        self.read_checked(start_offset, max_bytes, max_offset, min_one_batch, true)
    }

    fn read_checked(
        &self,
        start_offset: Offset,
        max_bytes: usize,
        max_offset: Option<Offset>,
        min_one_batch: bool,
        verify: bool,
    ) -> Result<FetchData, LogError> {
        let log_end_offset = self.log_end_offset();
        if start_offset < self.log_start_offset || start_offset > log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                requested: start_offset,
                log_start_offset: self.log_start_offset,
                log_end_offset,
            });
        }
        let mut budget = ReadBudget {
            max_bytes,
            min_one_batch,
            limit: max_offset.map_or(log_end_offset, |m| m.min(log_end_offset)),
            out: Vec::new(),
            batch_count: 0,
            last_offset: None,
            done: false,
        };
        let floor = self
            .segments
            .range(..=start_offset)
            .next_back()
            .map_or(start_offset, |(base, _)| *base);
        let mut target = start_offset;
        let allow_gaps = self.gaps_allowed();
        for segment in self.segments.range(floor..).map(|(_, s)| s) {
            if budget.done || target >= budget.limit {
                break;
            }
            let Some((position, _)) = segment.find_batch(target).map_err(self.io_error("read"))?
            else {
                if verify && target < segment.next_offset() {
                    // The walk to the batch holding `target` broke on a damaged header.
                    let end = segment
                        .visit_batches(0, |_, _| Ok(Visit::Continue))
                        .map_err(self.io_error("read"))?;
                    return Err(self.damaged(segment.base_offset(), end.position, end.error));
                }
                continue;
            };
            let mut end = position;
            // Verified: the batches served are where their offsets say — the first holds
            // `target`, each starts where the one before ends (a valid batch in the wrong
            // place is what a misdirected write leaves). With gaps (compaction) only going
            // backwards is wrong.
            let mut expected = target;
            let mut misplaced = None;
            let walked = segment
                .visit_batches(position, |at, header| {
                    let first = at == position;
                    let wrong = if allow_gaps {
                        !first && header.base_offset < expected
                    } else if first {
                        header.base_offset > expected
                    } else {
                        header.base_offset != expected
                    };
                    if verify && wrong {
                        misplaced = Some((at, header.base_offset, expected));
                        return Ok(Visit::Stop);
                    }
                    expected = header.next_offset();
                    let size = header.size_bytes().expect("stored batch has a size");
                    if !budget.admit(header.base_offset, size, end - position) {
                        return Ok(Visit::Stop);
                    }
                    end += size as u64;
                    budget.batch_count += 1;
                    budget.last_offset = Some(header.last_offset());
                    Ok(Visit::Continue)
                })
                .map_err(self.io_error("read"))?;
            if verify && walked.error.is_some() {
                return Err(self.damaged(segment.base_offset(), walked.position, walked.error));
            }
            if let Some((at, found, expected)) = misplaced {
                return Err(LogError::Damaged(Damage {
                    segment: segment.base_offset(),
                    position: at,
                    reason: format!("base offset {found} where {expected} was expected"),
                }));
            }
            let chunk_start = budget.out.len();
            segment
                .read_to_vec(position, (end - position) as usize, &mut budget.out)
                .map_err(self.io_error("read"))?;
            if verify {
                if let Some((at, error)) = first_invalid_batch(&budget.out[chunk_start..]) {
                    return Err(LogError::Damaged(Damage {
                        segment: segment.base_offset(),
                        position: position + at as u64,
                        reason: error.to_string(),
                    }));
                }
            }
            target = segment.next_offset();
        }
        Ok(FetchData {
            records: Bytes::from(budget.out),
            last_offset: budget.last_offset,
            batch_count: budget.batch_count,
            log_start_offset: self.log_start_offset,
            log_end_offset,
        })
    }

    fn damaged(&self, segment: Offset, position: u64, error: Option<ScanError>) -> LogError {
        LogError::Damaged(Damage {
            segment,
            position,
            reason: error.map_or_else(
                || "a batch header breaks the walk through the segment".to_string(),
                |e| e.to_string(),
            ),
        })
    }
}

impl ReadBudget {
    /// Whether the batch at `base_offset` of `size` bytes fits, given `pending` bytes already
    /// chosen in the current segment. Marks the read done when it does not.
    fn admit(&mut self, base_offset: Offset, size: usize, pending: u64) -> bool {
        if base_offset >= self.limit {
            self.done = true;
            return false;
        }
        let total = self.out.len() + pending as usize;
        let first = total == 0;
        if total + size > self.max_bytes && !(first && self.min_one_batch) {
            self.done = true;
            return false;
        }
        true
    }
}

/// The position and error of the first batch of `bytes` (whole batches, back to back) that
/// fails validation, if any.
fn first_invalid_batch(bytes: &[u8]) -> Option<(usize, BatchError)> {
    let mut at = 0;
    while at < bytes.len() {
        match parse_batch_at(bytes, at) {
            Ok(view) => at += view.bytes.len(),
            Err(error) => return Some((at, error)),
        }
    }
    None
}
