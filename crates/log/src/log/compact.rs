//! Log compaction (`cleanup.policy=compact`): keep only the latest record of each key, then
//! drop tombstones once `delete.retention.ms` has passed since the cleaner first kept them.
//!
//! Kafka's cleaner, in three steps so that the partition is only locked for the first and last:
//!
//! 1. [`Log::plan_compaction`] (`&self`): the *cleanable* segments are the oldest non-active
//!    segments (from the first one not wholly below the log start offset) lying wholly below
//!    the high watermark (only committed data is ever rewritten: a
//!    record is never removed for a later one that a truncation could still take away) and
//!    the last stable offset (every transaction with a record there is decided), and
//!    older than `min.compaction.lag.ms`. Those from the
//!    cleaner offset on are *dirty*. Nothing is planned while the dirty share of the cleanable
//!    bytes is below `min.cleanable.dirty.ratio`, unless a dirty segment is older than
//!    `max.compaction.lag.ms`.
//! 2. [`CompactionPlan::run`] (no lock; reads and writes files only): builds the key → latest
//!    offset map over the dirty segments (stopping at a segment boundary once the map exceeds
//!    its memory budget, `log.cleaner.dedupe.buffer.size`), then filters every cleanable segment
//!    from the first into `<base>.log.cleaned`, fsynced. A record survives if it has a key and no
//!    later record of that key is in the map; a tombstone also needs its batch's delete horizon
//!    (KIP-534: set to `now + delete.retention.ms` the first time the cleaner keeps it, stored in
//!    `baseTimestamp` with attribute bit 6) not to have passed. Records without a key are
//!    dropped (Kafka refuses them on compacted topics). Transactions are handled as by Kafka's
//!    cleaner: the records of an aborted transaction (by the aborted-transaction index) are
//!    removed and never enter the map; a committed transaction's are compacted like any. A
//!    COMMIT or ABORT marker goes once no batch of its transaction is left (the pass that
//!    finds none of them before it gives it a delete horizon, as for a tombstone; a pass after
//!    the horizon removes it), unless it is its producer's last entry (it holds the producer's
//!    epoch, which fences a zombie after a reload). Filtered batches keep their base offset,
//!    `lastOffsetDelta`, leader epoch and producer fields; compressed batches are decompressed
//!    and recompressed with their codec through [`RecordCodecs`] — one it cannot handle keeps
//!    the batch whole. An emptied batch is dropped, except the last batch of a segment (so
//!    segments stay contiguous in offsets) and the last batch of an idempotent producer (so its
//!    sequence state survives a reload); those stay as batches with no records.
//! 3. [`Log::finish_compaction`] (`&mut self`): if the planned segments are unchanged (no
//!    truncation or retention meanwhile), swaps each cleaned file in — delete the segment's
//!    indexes, fsync the directory, rename `.cleaned` over `.log`, fsync the directory, rebuild
//!    the indexes — and stores the new cleaner offset in `cleaner-offset-checkpoint`. A crash at
//!    any point leaves either the old file (and a `.cleaned` leftover that the next open
//!    removes) or the new file without indexes (rebuilt on open).
//!
//! After compaction, offsets inside a segment have gaps: reads return the first batch at or
//! after the requested offset, followers accept a fetched batch starting past their log end,
//! and recovery only rejects batches that go backwards.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Log;
use crate::batch::records::{encode_with_timestamp_delta, parse_records};
use crate::batch::{
    compute_crc, parse_batch_at, BatchHeader, ATTRIBUTES_POS, BASE_TIMESTAMP_POS,
    COMPRESSION_CODEC_MASK, CRC_POS, DELETE_HORIZON_ATTRIBUTE, HEADER_SIZE, LENGTH_POS,
    LOG_OVERHEAD, RECORDS_COUNT_POS, TRANSACTIONAL_ATTRIBUTE,
};
use crate::error::LogError;
use crate::segment::{segment_file_name, Check, Segment, LOG_FILE_SUFFIX};
use crate::storage::{read_file_if_exists, write_file_atomically, OpenMode, Storage};
use crate::types::Offset;

/// File in the partition directory holding the cleaner offset (everything below it was
/// compacted) and the earliest delete horizon of a kept tombstone. Text: a version line (`0`),
/// the offset, the horizon in ms (`-1`: none).
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// Suffix of a segment being rewritten by the cleaner.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";

/// Compression codecs for the cleaner: the log never links a codec itself. Codec ids are
/// Kafka's (1 gzip, 2 snappy, 3 lz4, 4 zstd).
pub trait RecordCodecs: Send + Sync {
    /// The uncompressed records section of a batch compressed with `codec`.
    fn decompress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String>;
    /// `data` compressed with `codec`, as a producer would send it.
    fn compress(&self, codec: i16, data: &[u8]) -> Result<Vec<u8>, String>;
    /// `data` compressed with `codec` at `level` (KIP-390's `compression.<codec>.level`; `None`:
    /// the codec's default). Codecs that know no levels compress at their default only.
    fn compress_at_level(
        &self,
        codec: i16,
        level: Option<i32>,
        data: &[u8],
    ) -> Result<Vec<u8>, String> {
        match level {
            None => self.compress(codec, data),
            Some(level) => Err(format!(
                "compression codec {codec} at level {level} is not available"
            )),
        }
    }
}

/// Codecs that know no compression: the cleaner keeps compressed batches whole.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCodecs;

impl RecordCodecs for NoCodecs {
    fn decompress(&self, codec: i16, _: &[u8]) -> Result<Vec<u8>, String> {
        Err(format!("compression codec {codec} is not available"))
    }

    fn compress(&self, codec: i16, _: &[u8]) -> Result<Vec<u8>, String> {
        Err(format!("compression codec {codec} is not available"))
    }
}

/// What one compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Segments rewritten (those with nothing to remove are left alone).
    pub segments_rewritten: usize,
    /// Bytes of the cleanable segments before.
    pub bytes_before: u64,
    /// Bytes of the same segments after.
    pub bytes_after: u64,
    /// Records removed: superseded, expired tombstones, keyless, of aborted transactions.
    pub records_removed: u64,
    /// Tombstones removed because their delete horizon passed.
    pub tombstones_removed: u64,
    /// Transaction markers removed: their transaction's records were gone and their delete
    /// horizon passed.
    pub markers_removed: u64,
    /// Records of aborted transactions removed.
    pub aborted_records_removed: u64,
    /// Batches kept whole because their records could not be read (unknown codec, malformed).
    pub batches_kept_unread: u64,
    /// Distinct keys in the offset map.
    pub keys: usize,
    /// The earliest delete horizon of a tombstone or marker kept.
    pub delete_horizon_ms: Option<i64>,
    /// The cleaner offset afterwards.
    pub cleaner_offset: Offset,
    /// Whether the plan was dropped because the log changed while it ran.
    pub aborted: bool,
}

#[derive(Debug, Clone)]
struct PlannedSegment {
    base: Offset,
    size_bytes: u64,
    next_offset: Offset,
}

/// Step 1's output: what to clean. See the module docs.
#[derive(Debug)]
pub struct CompactionPlan {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// Every cleanable segment, oldest first.
    segments: Vec<PlannedSegment>,
    first_dirty: Offset,
    now_ms: i64,
    delete_retention_ms: i64,
    map_budget_bytes: usize,
    /// Per idempotent producer the log knows, the last offset of its newest batch: that batch
    /// stays (possibly emptied) so the producer's state is rebuilt right on reload.
    producer_last_offsets: HashMap<i64, Offset>,
    /// Per producer the log knows, its current epoch: a marker at that epoch after its last
    /// data batch is its last entry, and stays.
    producer_epochs: HashMap<i64, i16>,
    /// The aborted transactions reaching into the cleanable segments: per producer, the
    /// (first offset, ABORT marker offset) ranges of its aborted transactions.
    aborted: AbortedRanges,
    generation: u64,
}

/// Per producer id, the (first offset, marker offset) of each of its aborted transactions.
#[derive(Debug, Default)]
struct AbortedRanges(HashMap<i64, Vec<(Offset, Offset)>>);

impl AbortedRanges {
    /// Whether the transactional batch `header` belongs to an aborted transaction. Only asked
    /// below the last stable offset, where every transaction is decided: a transactional batch
    /// there that no aborted range covers was committed.
    fn covers(&self, header: &BatchHeader) -> bool {
        self.0.get(&header.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|(first, marker)| *first <= header.base_offset && header.base_offset < *marker)
        })
    }
}

/// What the cleaner does with a batch, by its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchKind {
    /// A COMMIT or ABORT marker: kept.
    Marker,
    /// Records of an aborted transaction: removed (they never supersede anything).
    Aborted,
    /// Plain records, or those of a committed transaction: compacted by key.
    Data,
}

fn batch_kind(header: &BatchHeader, aborted: &AbortedRanges) -> BatchKind {
    if header.is_control() {
        BatchKind::Marker
    } else if header.attributes & TRANSACTIONAL_ATTRIBUTE != 0 && aborted.covers(header) {
        BatchKind::Aborted
    } else {
        BatchKind::Data
    }
}

/// Step 2's output, for [`Log::finish_compaction`].
#[derive(Debug)]
pub struct CompactionOutput {
    /// The segments that were cleaned (a prefix of the plan's).
    segments: Vec<PlannedSegment>,
    /// (segment base, cleaned file) for each segment that changed.
    cleaned: Vec<(Offset, PathBuf)>,
    end_dirty: Offset,
    stats: CompactionStats,
    generation: u64,
}

impl Log {
    /// Everything below this offset has been compacted.
    pub fn cleaner_offset(&self) -> Offset {
        self.cleaner_offset
    }

    /// Whether offsets may have gaps: the topic is compacted (a follower copies the leader's
    /// gaps) or was cleaned before. Elsewhere recovery treats any gap as corruption.
    pub(super) fn gaps_allowed(&self) -> bool {
        self.config.cleanup_policy.compact || self.cleaner_offset > Offset(0)
    }

    /// Compacts in one go (plan, run, finish), holding `&mut self` throughout; `None` if there
    /// was nothing to do. The broker uses the three steps instead, to keep the partition
    /// writable while the cleaner reads and writes.
    pub fn compact(
        &mut self,
        now_ms: i64,
        high_watermark: Offset,
        map_budget_bytes: usize,
        codecs: &dyn RecordCodecs,
    ) -> Result<Option<CompactionStats>, LogError> {
        let Some(plan) = self.plan_compaction(now_ms, high_watermark, map_budget_bytes) else {
            return Ok(None);
        };
        let output = plan.run(codecs)?;
        self.finish_compaction(output, now_ms).map(Some)
    }

    /// Step 1 (see the module docs): `None` if the topic is not compacted or not dirty enough.
    pub fn plan_compaction(
        &self,
        now_ms: i64,
        high_watermark: Offset,
        map_budget_bytes: usize,
    ) -> Option<CompactionPlan> {
        if !self.config.cleanup_policy.compact {
            return None;
        }
        // Only stable data is cleaned (Kafka bounds the cleaner by the first unstable offset too):
        // every transaction with a record below the bound is decided, so a transactional batch
        // there is either covered by an aborted transaction or committed.
        let bound = self.last_stable_offset(high_watermark);
        let lag_ms = self.config.min_compaction_lag_ms;
        let active_base = self.active().base_offset();
        let mut segments = Vec::new();
        // Segments wholly below the log start offset (DeleteRecords) are never cleaned: no
        // reader can reach them and retention deletes them; the dirty part starts at the log
        // start offset at the earliest (Kafka's LogCleanerManager.cleanableOffsets: a cleaner
        // checkpoint below the log start offset is replaced by it).
        let log_start_offset = self.log_start_offset;
        for segment in self
            .segments
            .values()
            .skip_while(|s| s.base_offset() != active_base && s.next_offset() <= log_start_offset)
        {
            let young = segment
                .max_timestamp()
                .is_some_and(|m| now_ms.saturating_sub(m.timestamp) < lag_ms);
            let next_offset = segment.next_offset();
            if segment.base_offset() == active_base || next_offset > bound || young {
                break;
            }
            segments.push(PlannedSegment {
                base: segment.base_offset(),
                size_bytes: segment.size_bytes(),
                next_offset,
            });
        }
        let end = segments.last()?.next_offset;
        // The segment holding the cleaner offset is dirty as a whole (a checkpoint inside a
        // segment comes from a truncation or a crash).
        let first_dirty = segments
            .iter()
            .rev()
            .find(|s| s.base <= self.cleaner_offset)
            .map_or(segments[0].base, |s| {
                if s.next_offset <= self.cleaner_offset {
                    s.next_offset
                } else {
                    s.base
                }
            })
            .min(end);
        // Only a passed delete horizon makes a log whose dirty part is above the high watermark
        // (or missing) worth a pass.
        let horizon_passed = self.delete_horizon_ms.is_some_and(|h| now_ms >= h);
        if first_dirty >= end && !horizon_passed {
            return None;
        }
        let total: u64 = segments.iter().map(|s| s.size_bytes).sum();
        let dirty: u64 = segments
            .iter()
            .filter(|s| s.base >= first_dirty)
            .map(|s| s.size_bytes)
            .sum();
        let ratio = if total == 0 {
            0.0
        } else {
            dirty as f64 / total as f64
        };
        let overdue = self.config.max_compaction_lag_ms < i64::MAX
            && self
                .segments
                .range(first_dirty..end)
                .filter_map(|(_, s)| s.max_timestamp())
                .any(|m| now_ms.saturating_sub(m.timestamp) >= self.config.max_compaction_lag_ms);
        if ratio < self.config.min_cleanable_dirty_ratio && !overdue && !horizon_passed {
            return None;
        }
        Some(CompactionPlan {
            storage: self.storage.clone(),
            dir: self.dir.clone(),
            segments,
            first_dirty,
            now_ms,
            delete_retention_ms: self.config.delete_retention_ms,
            map_budget_bytes,
            producer_last_offsets: self
                .producers
                .producers()
                .iter()
                .filter_map(|(id, entry)| Some((*id, entry.batches.back()?.last_offset)))
                .collect(),
            producer_epochs: self
                .producers
                .producers()
                .iter()
                .map(|(id, entry)| (*id, entry.epoch))
                .collect(),
            aborted: {
                let mut ranges = AbortedRanges::default();
                for txn in self.aborted.values().filter(|t| t.first_offset < end) {
                    ranges
                        .0
                        .entry(txn.producer_id)
                        .or_default()
                        .push((txn.first_offset, txn.last_offset));
                }
                ranges
            },
            generation: self.generation,
        })
    }

    /// Step 3 (see the module docs). If the log changed since planning, the cleaned files are
    /// removed and nothing else happens (`aborted`).
    pub fn finish_compaction(
        &mut self,
        output: CompactionOutput,
        now_ms: i64,
    ) -> Result<CompactionStats, LogError> {
        let mut stats = output.stats;
        let unchanged = output.generation == self.generation
            && output.segments.iter().all(|p| {
                self.segments.get(&p.base).is_some_and(|s| {
                    s.size_bytes() == p.size_bytes
                        && s.next_offset() == p.next_offset
                        && s.base_offset() != self.active().base_offset()
                })
            });
        if !unchanged {
            for (_, path) in &output.cleaned {
                remove_if_exists(self.storage.as_ref(), path)
                    .map_err(LogError::io("remove", path.clone()))?;
            }
            stats.aborted = true;
            stats.cleaner_offset = self.cleaner_offset;
            return Ok(stats);
        }
        // A scrub planned before the swap read files that are gone now.
        self.generation += 1;
        for (base, cleaned) in &output.cleaned {
            self.swap_in_cleaned(*base, cleaned, now_ms)?;
        }
        let cleaner_offset = self.cleaner_offset.max(output.end_dirty);
        // A pass that stopped below the old cleaner offset did not see every kept tombstone.
        let horizon = if output.end_dirty < self.cleaner_offset {
            [self.delete_horizon_ms, stats.delete_horizon_ms]
                .into_iter()
                .flatten()
                .min()
        } else {
            stats.delete_horizon_ms
        };
        self.set_cleaner_offset(cleaner_offset, horizon)?;
        stats.cleaner_offset = self.cleaner_offset;
        self.check_invariants();
        Ok(stats)
    }

    /// Replaces segment `base` by its cleaned file; see the module docs for the crash story. If
    /// a step fails, the segment is reopened from whichever file is in place (and its indexes
    /// rebuilt), so the log stays whole in memory too.
    fn swap_in_cleaned(
        &mut self,
        base: Offset,
        cleaned: &Path,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let old_next = self.segments[&base].next_offset();
        let result = self.try_swap_in_cleaned(base, cleaned, old_next, now_ms);
        if result.is_err() && !self.segments.contains_key(&base) {
            let _ = remove_if_exists(self.storage.as_ref(), cleaned);
            let mut segment = Segment::open(self.storage.as_ref(), &self.dir, base, &self.config)
                .map_err(self.io_error("reopen segment"))?;
            segment
                .recover(now_ms, true, Check::Full)
                .map_err(self.io_error("reopen segment"))?;
            self.segments.insert(base, segment);
        }
        result
    }

    fn try_swap_in_cleaned(
        &mut self,
        base: Offset,
        cleaned: &Path,
        old_next: Offset,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let old = self.segments.remove(&base).expect("checked segment");
        old.delete_indexes(self.storage.as_ref(), &self.dir)
            .map_err(self.io_error("delete index"))?;
        self.dir_unsynced = true;
        self.sync_dir_if_needed()?;
        let log_path = self.dir.join(segment_file_name(base, LOG_FILE_SUFFIX));
        self.storage
            .rename(cleaned, &log_path)
            .map_err(self.io_error("rename cleaned segment"))?;
        self.dir_unsynced = true;
        self.sync_dir_if_needed()?;
        let mut segment = Segment::open(self.storage.as_ref(), &self.dir, base, &self.config)
            .map_err(self.io_error("open cleaned segment"))?;
        let found = segment
            .recover(now_ms, true, Check::HeaderOnly)
            .map_err(self.io_error("index cleaned segment"))?;
        if found.error.is_some() || found.bytes_truncated > 0 || segment.next_offset() != old_next {
            return Err(LogError::CorruptFile {
                path: log_path,
                reason: format!(
                    "the cleaned segment does not read back whole ({:?}, next offset {} where {} \
                     was expected)",
                    found.error,
                    segment.next_offset(),
                    old_next
                ),
            });
        }
        segment
            .finish_time_index()
            .map_err(self.io_error("finish segment"))?;
        segment.sync().map_err(self.io_error("fsync segment"))?;
        self.segments.insert(base, segment);
        Ok(())
    }

    /// Sets and persists the cleaner offset and delete horizon.
    pub(super) fn set_cleaner_offset(
        &mut self,
        offset: Offset,
        delete_horizon_ms: Option<i64>,
    ) -> Result<(), LogError> {
        if (offset, delete_horizon_ms) == (self.cleaner_offset, self.delete_horizon_ms) {
            return Ok(());
        }
        self.cleaner_offset = offset;
        self.delete_horizon_ms = delete_horizon_ms;
        let path = self.dir.join(CLEANER_OFFSET_CHECKPOINT_FILE);
        let text = format!("0\n{}\n{}\n", offset.0, delete_horizon_ms.unwrap_or(-1));
        write_file_atomically(self.storage.as_ref(), &path, text.as_bytes())
            .map_err(LogError::io("write cleaner offset", path))
    }

    /// Reads the persisted cleaner offset and delete horizon (`Offset(0)` and none if missing
    /// or unreadable: the next compaction then treats the whole log as dirty, only slower).
    pub(super) fn read_cleaner_offset(&self) -> Result<(Offset, Option<i64>), LogError> {
        let path = self.dir.join(CLEANER_OFFSET_CHECKPOINT_FILE);
        let bytes = read_file_if_exists(self.storage.as_ref(), &path)
            .map_err(LogError::io("read cleaner offset", path.clone()))?;
        let parsed = bytes.and_then(|b| {
            let text = String::from_utf8(b).ok()?;
            let mut lines = text.lines();
            (lines.next()? == "0").then_some(())?;
            let offset = lines.next()?.trim().parse::<i64>().ok()?;
            let horizon = lines.next()?.trim().parse::<i64>().ok()?;
            Some((Offset(offset.max(0)), (horizon >= 0).then_some(horizon)))
        });
        Ok(parsed.unwrap_or((Offset(0), None)))
    }
}

fn remove_if_exists(storage: &dyn Storage, path: &Path) -> io::Result<()> {
    match storage.remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The key → latest offset map of the dirty segments.
#[derive(Default)]
struct OffsetMap {
    latest: HashMap<Vec<u8>, Offset>,
    /// Estimated heap bytes.
    bytes: usize,
}

/// Heap bytes of one map entry besides its key: the `Vec` header, the offset, the table slot.
const MAP_ENTRY_OVERHEAD: usize = 48;

impl CompactionPlan {
    /// Step 2 (see the module docs). IO errors and unreadable segments are errors: nothing is
    /// swapped in, and leftover `.cleaned` files are removed here or by the next open.
    pub fn run(self, codecs: &dyn RecordCodecs) -> Result<CompactionOutput, LogError> {
        let mut stats = CompactionStats::default();
        let mut map = OffsetMap::default();
        let mut end_dirty = self.first_dirty;
        for planned in self.segments.iter().filter(|s| s.base >= self.first_dirty) {
            if map.bytes > self.map_budget_bytes && end_dirty > self.first_dirty {
                break;
            }
            self.for_each_batch(planned, |bytes, header, _| {
                if batch_kind(header, &self.aborted) == BatchKind::Data {
                    map.add_batch(bytes, header, codecs);
                }
                Ok(())
            })?;
            end_dirty = planned.next_offset;
        }
        stats.keys = map.latest.len();
        let segments: Vec<PlannedSegment> = self
            .segments
            .iter()
            .filter(|s| s.next_offset <= end_dirty)
            .cloned()
            .collect();
        let mut cleaned = Vec::new();
        let filter = Filter {
            map: &map,
            producer_last_offsets: &self.producer_last_offsets,
            producer_epochs: &self.producer_epochs,
            with_batches: RefCell::new(HashSet::new()),
            aborted: &self.aborted,
            now_ms: self.now_ms,
            new_horizon_ms: self.now_ms.saturating_add(self.delete_retention_ms),
            codecs,
        };
        for planned in &segments {
            stats.bytes_before += planned.size_bytes;
            match self.clean_segment(planned, &filter, &mut stats) {
                Ok(Some((path, size))) => {
                    stats.bytes_after += size;
                    stats.segments_rewritten += 1;
                    cleaned.push((planned.base, path));
                }
                Ok(None) => stats.bytes_after += planned.size_bytes,
                Err(e) => {
                    for (_, path) in &cleaned {
                        let _ = remove_if_exists(self.storage.as_ref(), path);
                    }
                    return Err(e);
                }
            }
        }
        Ok(CompactionOutput {
            segments,
            cleaned,
            end_dirty,
            stats,
            generation: self.generation,
        })
    }

    fn log_path(&self, base: Offset) -> PathBuf {
        self.dir.join(segment_file_name(base, LOG_FILE_SUFFIX))
    }

    /// Calls `visit(batch bytes, header, is last)` for each batch of the planned segment,
    /// validating each (CRC included).
    fn for_each_batch(
        &self,
        planned: &PlannedSegment,
        mut visit: impl FnMut(&[u8], &BatchHeader, bool) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let path = self.log_path(planned.base);
        let file = self
            .storage
            .open_file(&path, OpenMode::Existing)
            .map_err(LogError::io("open segment", path.clone()))?;
        let mut position = 0u64;
        let mut buf = Vec::new();
        let mut overhead = [0u8; LOG_OVERHEAD];
        while position < planned.size_bytes {
            let corrupt = |reason: String| LogError::CorruptFile {
                path: path.clone(),
                reason,
            };
            file.read_exact_at(position, &mut overhead)
                .map_err(LogError::io("read segment", path.clone()))?;
            let length = i32::from_be_bytes(
                overhead[LENGTH_POS..LENGTH_POS + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            let size = usize::try_from(length).unwrap_or(0) + LOG_OVERHEAD;
            if size < HEADER_SIZE || position + size as u64 > planned.size_bytes {
                return Err(corrupt(format!(
                    "batch at byte {position} has length {length}"
                )));
            }
            buf.clear();
            file.read_to_vec_at(position, size, &mut buf)
                .map_err(LogError::io("read segment", path.clone()))?;
            let view = parse_batch_at(&buf, 0)
                .map_err(|e| corrupt(format!("batch at byte {position}: {e}")))?;
            let header = view.header;
            position += size as u64;
            visit(&buf, &header, position == planned.size_bytes)?;
        }
        Ok(())
    }

    /// Writes the cleaned copy of one segment, in chunks of [`WRITE_CHUNK_BYTES`], fsynced;
    /// `None` if nothing in it changes. Every rebuilt batch is validated (CRC included) before
    /// it is written, so a `.cleaned` file holds only valid batches.
    fn clean_segment(
        &self,
        planned: &PlannedSegment,
        filter: &Filter<'_>,
        stats: &mut CompactionStats,
    ) -> Result<Option<(PathBuf, u64)>, LogError> {
        let mut name = segment_file_name(planned.base, LOG_FILE_SUFFIX);
        name.push_str(CLEANED_FILE_SUFFIX);
        let path = self.dir.join(name);
        let io_error = || LogError::io("write cleaned segment", path.clone());
        let mut pending = Vec::new();
        let mut file: Option<Box<dyn crate::storage::StorageFile>> = None;
        let mut written = 0u64;
        let mut changed = false;
        self.for_each_batch(planned, |bytes, header, last| {
            match filter.batch(bytes, header, last, stats) {
                Fate::Keep => pending.extend_from_slice(bytes),
                Fate::Drop => changed = true,
                Fate::Rewrite(new) => {
                    parse_batch_at(&new, 0).map_err(|e| LogError::CorruptFile {
                        path: path.clone(),
                        reason: format!("a rebuilt batch does not validate: {e}"),
                    })?;
                    pending.extend_from_slice(&new);
                    changed = true;
                }
            }
            if changed && pending.len() >= WRITE_CHUNK_BYTES {
                if file.is_none() {
                    let mut f = self
                        .storage
                        .open_file(&path, OpenMode::CreateOrOpen)
                        .map_err(io_error())?;
                    f.truncate(0).map_err(io_error())?;
                    file = Some(f);
                }
                let f = file.as_mut().expect("opened above");
                f.append(&pending).map_err(io_error())?;
                written += pending.len() as u64;
                pending.clear();
            }
            Ok(())
        })?;
        if !changed {
            return Ok(None);
        }
        let mut file = match file {
            Some(f) => f,
            None => {
                let mut f = self
                    .storage
                    .open_file(&path, OpenMode::CreateOrOpen)
                    .map_err(io_error())?;
                f.truncate(0).map_err(io_error())?;
                f
            }
        };
        file.append(&pending).map_err(io_error())?;
        written += pending.len() as u64;
        file.sync().map_err(io_error())?;
        Ok(Some((path, written)))
    }
}

/// How much of a cleaned segment is buffered before it is written.
const WRITE_CHUNK_BYTES: usize = 1 << 20;

impl OffsetMap {
    /// Adds the keys of a batch of plain or committed records ([`BatchKind::Data`]): a record
    /// of an aborted transaction must never make an earlier record of its key look superseded.
    fn add_batch(&mut self, bytes: &[u8], header: &BatchHeader, codecs: &dyn RecordCodecs) {
        let Ok(section) = records_section(bytes, header, codecs) else {
            return;
        };
        let Ok(records) = parse_records(&section, header.records_count) else {
            return;
        };
        for record in records {
            let Some(key) = record.key else { continue };
            let offset = header.base_offset.plus(record.offset_delta);
            if let Some(latest) = self.latest.get_mut(key) {
                *latest = offset;
            } else {
                self.bytes += key.len() + MAP_ENTRY_OVERHEAD;
                self.latest.insert(key.to_vec(), offset);
            }
        }
    }
}

/// The uncompressed records section of a batch.
pub(super) fn records_section(
    bytes: &[u8],
    header: &BatchHeader,
    codecs: &dyn RecordCodecs,
) -> Result<Vec<u8>, String> {
    let codec = header.attributes & COMPRESSION_CODEC_MASK;
    let section = &bytes[HEADER_SIZE..];
    if codec == 0 {
        Ok(section.to_vec())
    } else {
        codecs.decompress(codec, section)
    }
}

enum Fate {
    Keep,
    Drop,
    Rewrite(Vec<u8>),
}

struct Filter<'a> {
    map: &'a OffsetMap,
    producer_last_offsets: &'a HashMap<i64, Offset>,
    producer_epochs: &'a HashMap<i64, i16>,
    /// Producers whose current transaction had a batch in the pass so far (Kafka's
    /// `CleanedTransactionMetadata`): its marker must stay this time.
    with_batches: RefCell<HashSet<i64>>,
    aborted: &'a AbortedRanges,
    now_ms: i64,
    new_horizon_ms: i64,
    codecs: &'a dyn RecordCodecs,
}

impl Filter<'_> {
    fn batch(
        &self,
        bytes: &[u8],
        header: &BatchHeader,
        last_in_segment: bool,
        stats: &mut CompactionStats,
    ) -> Fate {
        // An aborted transaction's records all go; committed ones are compacted like any; a
        // marker stays while a batch of its transaction does.
        let kind = batch_kind(header, self.aborted);
        if kind == BatchKind::Marker {
            return self.marker(bytes, header, last_in_segment, stats);
        }
        if header.attributes & TRANSACTIONAL_ATTRIBUTE != 0 {
            self.with_batches.borrow_mut().insert(header.producer_id);
        }
        let codec = header.attributes & COMPRESSION_CODEC_MASK;
        let Ok(section) = records_section(bytes, header, self.codecs) else {
            stats.batches_kept_unread += 1;
            return Fate::Keep;
        };
        let Ok(records) = parse_records(&section, header.records_count) else {
            stats.batches_kept_unread += 1;
            return Fate::Keep;
        };
        let horizon =
            (header.attributes & DELETE_HORIZON_ATTRIBUTE != 0).then_some(header.base_timestamp);
        let mut kept = Vec::with_capacity(records.len());
        let mut needs_horizon = false;
        for record in &records {
            let offset = header.base_offset.plus(record.offset_delta);
            let keep = match record.key {
                _ if kind == BatchKind::Aborted => {
                    stats.aborted_records_removed += 1;
                    false
                }
                None => false,
                Some(key) => match self.map.latest.get(key) {
                    Some(&latest) if offset < latest => false,
                    _ if record.value_is_null => match horizon {
                        Some(h) if self.now_ms >= h => {
                            stats.tombstones_removed += 1;
                            false
                        }
                        Some(h) => {
                            note_horizon(stats, h);
                            true
                        }
                        None => {
                            needs_horizon = true;
                            note_horizon(stats, self.new_horizon_ms);
                            true
                        }
                    },
                    _ => true,
                },
            };
            if keep {
                kept.push(record);
            }
        }
        stats.records_removed += (records.len() - kept.len()) as u64;
        if kept.len() == records.len() && !needs_horizon {
            return Fate::Keep;
        }
        if kept.is_empty() {
            let producer_last = header.producer_id >= 0
                && self.producer_last_offsets.get(&header.producer_id)
                    == Some(&header.last_offset());
            if !last_in_segment && !producer_last {
                return Fate::Drop;
            }
        }
        let (attributes, base_timestamp) = if needs_horizon {
            (
                header.attributes | DELETE_HORIZON_ATTRIBUTE,
                self.new_horizon_ms,
            )
        } else {
            (header.attributes, header.base_timestamp)
        };
        let section = if needs_horizon {
            rebased(kept.iter().copied(), header.base_timestamp, base_timestamp)
        } else {
            kept.iter().flat_map(|r| r.raw.iter().copied()).collect()
        };
        let (attributes, section) = if kept.is_empty() {
            (attributes & !COMPRESSION_CODEC_MASK, Vec::new())
        } else if codec != 0 {
            match self.codecs.compress(codec, &section) {
                Ok(compressed) => (attributes, compressed),
                Err(_) => {
                    stats.batches_kept_unread += 1;
                    stats.records_removed -= (records.len() - kept.len()) as u64;
                    return Fate::Keep;
                }
            }
        } else {
            (attributes, section)
        };
        Fate::Rewrite(rebuild_batch(
            &bytes[..HEADER_SIZE],
            attributes,
            base_timestamp,
            kept.len(),
            &section,
        ))
    }
}

impl Filter<'_> {
    /// A COMMIT or ABORT marker: removed once no batch of its transaction was left before it
    /// in this pass and its delete horizon (set by the first such pass) has passed; kept if it
    /// is the last batch of its segment or its producer's last entry.
    fn marker(
        &self,
        bytes: &[u8],
        header: &BatchHeader,
        last_in_segment: bool,
        stats: &mut CompactionStats,
    ) -> Fate {
        let had_batches = self.with_batches.borrow_mut().remove(&header.producer_id);
        let producer_last = self.producer_epochs.get(&header.producer_id)
            == Some(&header.producer_epoch)
            && self
                .producer_last_offsets
                .get(&header.producer_id)
                .is_none_or(|last| header.base_offset > *last);
        if had_batches || producer_last || last_in_segment {
            return Fate::Keep;
        }
        if header.attributes & DELETE_HORIZON_ATTRIBUTE != 0 {
            let horizon = header.base_timestamp;
            if self.now_ms >= horizon {
                stats.markers_removed += 1;
                return Fate::Drop;
            }
            note_horizon(stats, horizon);
            return Fate::Keep;
        }
        // The first pass that finds its transaction gone: stamp the horizon, as for a tombstone.
        let Ok(records) = parse_records(&bytes[HEADER_SIZE..], header.records_count) else {
            stats.batches_kept_unread += 1;
            return Fate::Keep;
        };
        let section = rebased(&records, header.base_timestamp, self.new_horizon_ms);
        note_horizon(stats, self.new_horizon_ms);
        Fate::Rewrite(rebuild_batch(
            &bytes[..HEADER_SIZE],
            header.attributes | DELETE_HORIZON_ATTRIBUTE,
            self.new_horizon_ms,
            records.len(),
            &section,
        ))
    }
}

/// `records` (of a batch based at `old_base`) encoded for a batch based at `new_base`: each
/// keeps its own timestamp.
fn rebased<'r, 'b: 'r>(
    records: impl IntoIterator<Item = &'r crate::batch::records::RecordRef<'b>>,
    old_base: i64,
    new_base: i64,
) -> Vec<u8> {
    let mut section = Vec::new();
    for record in records {
        let timestamp = old_base.saturating_add(record.timestamp_delta);
        encode_with_timestamp_delta(&mut section, record, timestamp.saturating_sub(new_base));
    }
    section
}

fn note_horizon(stats: &mut CompactionStats, horizon_ms: i64) {
    stats.delete_horizon_ms = Some(
        stats
            .delete_horizon_ms
            .map_or(horizon_ms, |h| h.min(horizon_ms)),
    );
}

/// A batch with `header`'s fields except attributes, base timestamp and record count, holding
/// `section`; length and CRC recomputed.
fn rebuild_batch(
    header: &[u8],
    attributes: i16,
    base_timestamp: i64,
    count: usize,
    section: &[u8],
) -> Vec<u8> {
    let mut batch = Vec::with_capacity(HEADER_SIZE + section.len());
    batch.extend_from_slice(header);
    batch.extend_from_slice(section);
    batch[ATTRIBUTES_POS..ATTRIBUTES_POS + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[BASE_TIMESTAMP_POS..BASE_TIMESTAMP_POS + 8]
        .copy_from_slice(&base_timestamp.to_be_bytes());
    let count = i32::try_from(count).expect("fewer records than the original batch");
    batch[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&count.to_be_bytes());
    let length = i32::try_from(batch.len() - LOG_OVERHEAD)
        .expect("a cleaned batch is smaller than a segment");
    batch[LENGTH_POS..LENGTH_POS + 4].copy_from_slice(&length.to_be_bytes());
    let crc = compute_crc(&batch);
    batch[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}
