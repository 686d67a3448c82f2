//! The scrubber's part in the log: walking a segment and validating every batch (length,
//! magic, CRC-32C, offsets in order), in steps the broker runs without the partition lock and
//! paces to `log.scrub.bytes.per.second`. Closed segments are walked whole, the active one up
//! to its size when the task was planned (appends only add bytes after that, always whole
//! batches: the plan is made under the lock).
//!
//! Consumers' reads are not validated on the broker's hot path (clients check CRCs
//! themselves): the scrubber is what finds bit rot in data nobody has read since it was
//! written, before a replica that lost its copy has to be served from this one. That includes
//! the active segment: its followers' verified reads saw its batches as they were written, not
//! the bit rot after (found by the simulator, search seed 1414: the leader's active segment
//! rotted after replication, and its consumers were stuck until the segment rolled).
//!
//! A task is planned under the lock ([`Log::plan_scrub`]), run step by step without it
//! ([`ScrubTask::step`], blocking IO on a handle of its own), and its finding checked under
//! the lock again ([`Log::scrub_finding_applies`]): a segment truncated, deleted by retention,
//! or swapped by the cleaner since the plan invalidates whatever the task saw.

use std::path::PathBuf;

use super::Log;
use crate::error::Damage;
use crate::segment::{scan_batches, Check, Visit, LOG_FILE_SUFFIX};
use crate::storage::{OpenMode, Storage, StorageFile};
use crate::types::Offset;

/// One segment being scrubbed.
#[derive(Debug)]
pub struct ScrubTask {
    segment: Offset,
    path: PathBuf,
    size_bytes: u64,
    position: u64,
    /// The offset the next batch must start at (or after, where compaction left gaps).
    next_offset: Offset,
    allow_gaps: bool,
    generation: u64,
    file: Option<Box<dyn StorageFile>>,
}

/// What one step of a scrub found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrubStep {
    /// Validated this many more bytes; more remain.
    Progress {
        /// Bytes validated in this step.
        bytes: u64,
    },
    /// The whole segment is valid (this step validated `bytes`).
    Done {
        /// Bytes validated in this step.
        bytes: u64,
    },
    /// A batch failed validation; everything before it is valid.
    Damaged(Damage),
}

impl ScrubTask {
    /// The segment's base offset.
    pub fn segment(&self) -> Offset {
        self.segment
    }

    /// The segment's size when planned.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Validates the batches from where the last step stopped, about `max_bytes` of them (at
    /// least one whole batch). Blocking IO; an IO error is the caller's to judge (the segment
    /// may have been deleted meanwhile: check [`Log::scrub_finding_applies`]).
    pub fn step(&mut self, storage: &dyn Storage, max_bytes: u64) -> std::io::Result<ScrubStep> {
        if self.file.is_none() {
            self.file = Some(storage.open_file(&self.path, OpenMode::Existing)?);
        }
        let file = self.file.as_deref().expect("opened above");
        let start = self.position;
        let mut next_offset = self.next_offset;
        let allow_gaps = self.allow_gaps;
        let mut bad_offset = None;
        let end = scan_batches(file, self.size_bytes, start, Check::Full, |at, header| {
            if at > start && at - start >= max_bytes {
                return Ok(Visit::Stop);
            }
            let out_of_order = if allow_gaps {
                header.base_offset < next_offset
            } else {
                header.base_offset != next_offset
            };
            if out_of_order {
                bad_offset = Some((header.base_offset, next_offset));
                return Ok(Visit::Stop);
            }
            next_offset = header.next_offset();
            Ok(Visit::Continue)
        })?;
        let bytes = end.position - start;
        self.position = end.position;
        self.next_offset = next_offset;
        if let Some((found, expected)) = bad_offset {
            return Ok(ScrubStep::Damaged(Damage {
                segment: self.segment,
                position: end.position,
                reason: format!("base offset {found} where {expected} was expected"),
            }));
        }
        if let Some(error) = end.error {
            return Ok(ScrubStep::Damaged(Damage {
                segment: self.segment,
                position: end.position,
                reason: error.to_string(),
            }));
        }
        if self.position >= self.size_bytes {
            self.file = None;
            return Ok(ScrubStep::Done { bytes });
        }
        Ok(ScrubStep::Progress { bytes })
    }
}

impl Log {
    /// The first segment whose base offset is above `after` (all of them if `None`), as a
    /// scrub task up to its size now (the active segment's too); `None` when there is none.
    pub fn plan_scrub(&self, after: Option<Offset>) -> Option<ScrubTask> {
        let lower = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let (base, segment) = self
            .segments
            .range((lower, std::ops::Bound::Unbounded))
            .next()?;
        Some(ScrubTask {
            segment: *base,
            path: self
                .dir
                .join(crate::segment::segment_file_name(*base, LOG_FILE_SUFFIX)),
            size_bytes: segment.size_bytes(),
            position: 0,
            next_offset: *base,
            allow_gaps: self.gaps_allowed(),
            generation: self.generation,
            file: None,
        })
    }

    /// Whether what `task` saw is still the log's segment: no truncation, retention, damage
    /// set aside or cleaner swap since the plan, and the segment is still there with at least
    /// the bytes it had (only the active segment grows, after them).
    pub fn scrub_finding_applies(&self, task: &ScrubTask) -> bool {
        task.generation == self.generation
            && self
                .segments
                .get(&task.segment)
                .is_some_and(|s| s.size_bytes() >= task.size_bytes)
    }
}
