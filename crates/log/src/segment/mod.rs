//! One log segment: the `{base_offset:020}.log` file of whole record batches plus its two
//! indexes, and the in-memory state derived from them (next offset, largest timestamp, durable
//! size). Only [`crate::log::Log`] uses segments.
//!
//! Invariants: batches are contiguous in offsets and the first batch's base offset is the
//! segment's base offset; `durable_bytes <= size_bytes`; index entries point inside the file.

mod indexer;
mod scan;

use indexer::Indexer;

pub(crate) use scan::{scan_batches, Check, ScanEnd, ScanError, Visit};

use std::io;
use std::path::{Path, PathBuf};

use crate::batch::{BatchHeader, HEADER_SIZE};
use crate::config::LogConfig;
use crate::index::{OffsetIndex, TimeIndex, OFFSET_INDEX_ENTRY_BYTES, TIME_INDEX_ENTRY_BYTES};
use crate::storage::{OpenMode, Storage, StorageFile};
use crate::types::{Offset, TimestampOffset};

/// Extension of segment data files.
pub const LOG_FILE_SUFFIX: &str = ".log";
/// Extension of offset index files.
pub const INDEX_FILE_SUFFIX: &str = ".index";
/// Extension of time index files.
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";

/// `{base_offset:020}{suffix}`, Kafka's segment file name.
pub fn segment_file_name(base_offset: Offset, suffix: &str) -> String {
    format!("{:020}{suffix}", base_offset.0)
}

/// Parses `{digits}{suffix}` back into a base offset.
pub fn parse_segment_file_name(name: &str, suffix: &str) -> Option<Offset> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Offset)
}

/// Why a segment must roll before an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RollReason {
    /// The append would push the segment past `segment.bytes`.
    Size,
    /// The segment is older than `segment.ms`.
    Time,
    /// An index reached `segment.index.bytes`.
    IndexFull,
    /// An offset would not fit the index's relative `u32`.
    OffsetOverflow,
}

/// A segment and its indexes.
#[derive(Debug)]
pub(crate) struct Segment {
    base_offset: Offset,
    log_path: PathBuf,
    log_file: Box<dyn StorageFile>,
    size_bytes: u64,
    durable_bytes: u64,
    /// What `segment.ms` is measured from: the first append's time, or after a reload the first
    /// batch's max timestamp (Kafka's `rollingBasedTimestamp`).
    roll_timestamp_ms: Option<i64>,
    /// Picks this segment's share of `segment.jitter.ms` ([`Segment::roll_jitter_ms`]): a hash
    /// of its file path, so partitions created together do not all roll at once, without
    /// randomness (the same segment always gets the same jitter).
    jitter_seed: u64,
    /// Whether an index file was missing at open (a crash during the cleaner's swap, or files
    /// removed by hand): a clean load then rebuilds the indexes.
    indexes_missing: bool,
    indexer: Indexer,
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn max_index_entries(config: &LogConfig, entry_bytes: usize) -> usize {
    usize::try_from(config.segment_index_bytes / entry_bytes as u64).unwrap_or(usize::MAX)
}

impl Segment {
    /// Opens the segment files at `dir` for `base_offset`, creating missing ones. The derived
    /// state is empty until [`Segment::load_clean`] or [`Segment::recover`] runs.
    pub fn open(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: Offset,
        config: &LogConfig,
    ) -> io::Result<Segment> {
        let log_path = dir.join(segment_file_name(base_offset, LOG_FILE_SUFFIX));
        let log_file = storage.open_file(&log_path, OpenMode::CreateOrOpen)?;
        let index_path = dir.join(segment_file_name(base_offset, INDEX_FILE_SUFFIX));
        let time_index_path = dir.join(segment_file_name(base_offset, TIME_INDEX_FILE_SUFFIX));
        let indexes_missing = !storage.exists(&index_path)? || !storage.exists(&time_index_path)?;
        let offset_index = OffsetIndex::open(
            storage,
            &index_path,
            base_offset,
            max_index_entries(config, OFFSET_INDEX_ENTRY_BYTES),
        )?;
        let time_index = TimeIndex::open(
            storage,
            &time_index_path,
            base_offset,
            max_index_entries(config, TIME_INDEX_ENTRY_BYTES),
        )?;
        let size_bytes = log_file.size()?;
        let jitter_seed = fnv1a(log_path.as_os_str().as_encoded_bytes());
        Ok(Segment {
            base_offset,
            log_path,
            log_file,
            size_bytes,
            durable_bytes: size_bytes,
            roll_timestamp_ms: None,
            jitter_seed,
            indexes_missing,
            indexer: Indexer {
                base_offset,
                offset_index,
                time_index,
                next_offset: base_offset,
                max_timestamp: None,
                bytes_since_last_index_entry: 0,
                index_interval_bytes: config.index_interval_bytes,
                unsynced: false,
            },
        })
    }

    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    pub fn next_offset(&self) -> Offset {
        self.indexer.next_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn durable_bytes(&self) -> u64 {
        self.durable_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    pub fn max_timestamp(&self) -> Option<TimestampOffset> {
        self.indexer.max_timestamp
    }

    /// Trusts the files of a cleanly closed segment. Checks the indexes for obvious damage and
    /// rescans, fully validated, only the batches from the last offset-index entry on. Returns
    /// `Some(reason)` if something is wrong: the caller then recovers the segment instead.
    pub fn load_clean(&mut self, now_ms: i64) -> io::Result<Option<String>> {
        if self.indexes_missing && self.size_bytes > 0 {
            return Ok(Some(format!(
                "{} has no index files",
                self.log_path.display()
            )));
        }
        let indexer = &mut self.indexer;
        if let Err(reason) = indexer.offset_index.sanity_check(self.size_bytes) {
            return Ok(Some(reason));
        }
        if indexer.offset_index.len() > 0 && indexer.time_index.last().is_none() {
            return Ok(Some(format!(
                "{} has no time index",
                self.log_path.display()
            )));
        }
        indexer.max_timestamp = indexer.time_index.last();
        let last_entry = indexer.offset_index.last();
        let from = last_entry.map_or(0, |e| u64::from(e.position));
        let mut first = true;
        let mut problem = None;
        indexer.bytes_since_last_index_entry = 0;
        let end = scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            from,
            Check::Full,
            |_, header| {
                let indexed = first && last_entry.is_some();
                if indexed && last_entry.is_some_and(|e| e.offset != header.last_offset()) {
                    problem = Some("the last index entry does not name the batch it points at");
                    return Ok(Visit::Stop);
                }
                if !indexed && indexer.wants_entry() {
                    problem = Some("the offset index misses entries");
                    return Ok(Visit::Stop);
                }
                first = false;
                indexer.follow(header);
                Ok(Visit::Continue)
            },
        )?;
        if let Some(problem) = problem {
            return Ok(Some(format!("{}: {problem}", self.log_path.display())));
        }
        if let Some(error) = end.error {
            return Ok(Some(format!("{}: {error}", self.log_path.display())));
        }
        if let Err(reason) = indexer.time_index.sanity_check(indexer.next_offset) {
            return Ok(Some(reason));
        }
        self.roll_timestamp_ms = self.first_batch_roll_timestamp(now_ms)?;
        Ok(None)
    }

    fn first_batch_roll_timestamp(&self, now_ms: i64) -> io::Result<Option<i64>> {
        if self.size_bytes < HEADER_SIZE as u64 {
            return Ok(None);
        }
        let mut buf = [0u8; HEADER_SIZE];
        self.log_file.read_exact_at(0, &mut buf)?;
        let header = BatchHeader::parse(&buf).expect("buffer holds a whole header");
        Ok(Some(if header.max_timestamp >= 0 {
            header.max_timestamp
        } else {
            now_ms
        }))
    }

    /// Validates every batch (length, magic, CRC-32C, offsets contiguous from the base offset,
    /// or only increasing if `allow_gaps`: a compacted log has gaps), rebuilds both indexes,
    /// and truncates the file at the first bad batch.
    ///
    /// `check` is [`Check::Full`] for crash recovery; the cleaner, which validated every batch of
    /// a cleaned file as it wrote it, re-indexes with [`Check::HeaderOnly`].
    pub fn recover(
        &mut self,
        now_ms: i64,
        allow_gaps: bool,
        check: Check,
    ) -> io::Result<SegmentRecovery> {
        let found = self.recover_scan(now_ms, allow_gaps, check)?;
        self.truncate_after_recovery(found.bytes_valid)?;
        Ok(found)
    }

    /// [`Segment::recover`] without the truncation: validates and re-indexes the good prefix and
    /// reports where it ends, leaving the bytes after it in the file so that the caller can set
    /// them aside first ([`Segment::truncate_after_recovery`] then cuts them). Until then the
    /// derived state (next offset, indexes) describes only the good prefix.
    pub fn recover_scan(
        &mut self,
        now_ms: i64,
        allow_gaps: bool,
        check: Check,
    ) -> io::Result<SegmentRecovery> {
        let indexer = &mut self.indexer;
        indexer.reset()?;
        let mut batches = 0u64;
        let end = scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            0,
            check,
            |position, header| {
                // `baseOffset` is not covered by the CRC: where the log has no gaps, any jump is
                // corruption; where compaction left gaps, only going backwards is.
                let bad = if allow_gaps {
                    header.base_offset < indexer.next_offset
                } else {
                    header.base_offset != indexer.next_offset
                };
                if bad {
                    return Ok(Visit::Reject(format!(
                        "base offset {} where {} was expected",
                        header.base_offset, indexer.next_offset
                    )));
                }
                batches += 1;
                indexer.index_batch(position, header)?;
                Ok(Visit::Continue)
            },
        )?;
        let bytes_truncated = self.size_bytes - end.position;
        self.roll_timestamp_ms = self.first_batch_roll_timestamp(now_ms)?;
        Ok(SegmentRecovery {
            batches,
            bytes_valid: end.position,
            bytes_truncated,
            error: end.error,
        })
    }

    /// Cuts the file after a [`Segment::recover_scan`] that ended at `position`.
    pub fn truncate_after_recovery(&mut self, position: u64) -> io::Result<()> {
        assert!(
            position <= self.size_bytes,
            "recovery ends inside the segment"
        );
        if position < self.size_bytes {
            self.log_file.truncate(position)?;
            self.size_bytes = position;
            self.durable_bytes = self.durable_bytes.min(position);
        }
        Ok(())
    }

    /// Whether every byte from `position` to the end of the file is zero: the tail a crash
    /// leaves when the file grew but its data never reached the disk.
    pub fn is_zero_from(&self, position: u64) -> io::Result<bool> {
        let mut buf = vec![0u8; 64 * 1024];
        let mut at = position;
        while at < self.size_bytes {
            let len = usize::try_from((self.size_bytes - at).min(buf.len() as u64))
                .expect("bounded by the buffer");
            self.log_file.read_exact_at(at, &mut buf[..len])?;
            if buf[..len].iter().any(|b| *b != 0) {
                return Ok(false);
            }
            at += len as u64;
        }
        Ok(true)
    }

    /// The path of the segment's log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Whether the segment must roll before appending `append_bytes` bytes ending at
    /// `last_offset` at `now_ms`. An empty segment never rolls.
    pub fn roll_reason(
        &self,
        append_bytes: u64,
        last_offset: Offset,
        now_ms: i64,
        config: &LogConfig,
    ) -> Option<RollReason> {
        if self.is_empty() {
            return None;
        }
        if self.size_bytes + append_bytes > config.segment_bytes {
            return Some(RollReason::Size);
        }
        if self.is_expired(now_ms, config) {
            return Some(RollReason::Time);
        }
        if self.indexer.offset_index.is_full() || self.indexer.time_index.is_full() {
            return Some(RollReason::IndexFull);
        }
        if last_offset.0 - self.base_offset.0 > i64::from(u32::MAX) {
            return Some(RollReason::OffsetOverflow);
        }
        None
    }

    /// Whether a non-empty segment is at least `segment.ms` minus its jitter old.
    pub fn is_expired(&self, now_ms: i64, config: &LogConfig) -> bool {
        let age_max_ms = config.segment_ms - self.roll_jitter_ms(config);
        self.roll_timestamp_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= age_max_ms)
    }

    /// How much earlier than `segment.ms` this segment rolls: in [0, min(`segment.jitter.ms`,
    /// `segment.ms`)), as Kafka's `LogConfig.randomSegmentJitter` draws it per segment — here
    /// from the segment's path instead of a random number.
    pub fn roll_jitter_ms(&self, config: &LogConfig) -> i64 {
        let bound = config.segment_jitter_ms.min(config.segment_ms);
        match u64::try_from(bound) {
            Ok(bound) if bound > 0 => {
                i64::try_from(self.jitter_seed % bound).expect("below an i64 bound")
            }
            _ => 0,
        }
    }

    /// Appends whole, validated batches; `batches` lists each batch's position within `bytes`
    /// and its header. The first batch must start at `next_offset`.
    pub fn append(
        &mut self,
        bytes: &[u8],
        batches: &[(usize, BatchHeader)],
        now_ms: i64,
    ) -> io::Result<()> {
        let first = batches.first().expect("append of at least one batch");
        assert!(
            first.1.base_offset >= self.indexer.next_offset,
            "segment append out of order"
        );
        assert!(
            self.size_bytes + bytes.len() as u64 <= u64::from(u32::MAX),
            "segment positions must fit the index's u32"
        );
        let start = self.size_bytes;
        self.log_file.append(bytes)?;
        self.size_bytes += bytes.len() as u64;
        for (position, header) in batches {
            self.indexer.index_batch(start + *position as u64, header)?;
        }
        self.roll_timestamp_ms.get_or_insert(now_ms);
        Ok(())
    }

    /// The first batch whose last offset is `>= target`: its position and header.
    pub fn find_batch(&self, target: Offset) -> io::Result<Option<(u64, BatchHeader)>> {
        let from = self
            .indexer
            .offset_index
            .lookup(target)
            .map_or(0, |e| u64::from(e.position));
        self.first_batch_from(from, |header| header.last_offset() >= target)
    }

    /// Where a search for the first record with a timestamp `>= target` at or after
    /// `min_offset` may start: the time index's last entry at or below `target` names a batch
    /// no later than the wanted one (every record before it is older), and the offset index
    /// turns that offset — or `min_offset`, if later — into a byte position at or before its
    /// batch. Kafka's `LogSegment.findOffsetByTimestamp` does the same two lookups.
    pub fn position_for_timestamp(&self, target: i64, min_offset: Offset) -> u64 {
        let indexed = self
            .indexer
            .time_index
            .lookup(target)
            .map_or(self.base_offset, |e| e.offset);
        self.indexer
            .offset_index
            .lookup(indexed.max(min_offset))
            .map_or(0, |e| u64::from(e.position))
    }

    /// The first batch whose header satisfies `wanted`, walking headers from byte `from` (a
    /// batch boundary): its position and header. `None` at the end of the segment or where a
    /// header breaks the walk.
    pub fn find_batch_from(
        &self,
        from: u64,
        wanted: impl FnMut(&BatchHeader) -> bool,
    ) -> io::Result<Option<(u64, BatchHeader)>> {
        self.first_batch_from(from, wanted)
    }

    /// The first batch at or after `from` satisfying `wanted`.
    fn first_batch_from(
        &self,
        from: u64,
        mut wanted: impl FnMut(&BatchHeader) -> bool,
    ) -> io::Result<Option<(u64, BatchHeader)>> {
        let mut found = None;
        scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            from,
            Check::HeaderOnly,
            |position, header| {
                if wanted(header) {
                    found = Some((position, *header));
                    Ok(Visit::Stop)
                } else {
                    Ok(Visit::Continue)
                }
            },
        )?;
        Ok(found)
    }

    /// Where damage reported at byte `position` really starts, as (position, the offset the log
    /// would end at): the first batch before it whose base offset is not where the batches
    /// before it end (only going backwards counts, with `allow_gaps`) — a valid batch in the
    /// wrong place, what a misdirected write leaves — or `position` itself. `None` if
    /// `position` is not a batch boundary of the segment as it is now.
    pub fn damage_start(
        &self,
        position: u64,
        allow_gaps: bool,
    ) -> io::Result<Option<(u64, Offset)>> {
        let mut expected = self.base_offset;
        let mut found = (position == 0).then_some((0, expected));
        if found.is_some() {
            return Ok(found);
        }
        scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            0,
            Check::HeaderOnly,
            |at, header| {
                let misplaced = if allow_gaps {
                    header.base_offset < expected
                } else {
                    header.base_offset != expected
                };
                if misplaced {
                    found = Some((at, expected));
                    return Ok(Visit::Stop);
                }
                expected = header.next_offset();
                let end = at + header.size_bytes().expect("scanned batch has a size") as u64;
                if end == position {
                    found = Some((position, expected));
                }
                Ok(if end >= position {
                    Visit::Stop
                } else {
                    Visit::Continue
                })
            },
        )?;
        Ok(found)
    }

    /// Calls `visit` on every batch header from byte `from` until it says stop.
    pub fn visit_batches(
        &self,
        from: u64,
        visit: impl FnMut(u64, &BatchHeader) -> io::Result<Visit>,
    ) -> io::Result<ScanEnd> {
        scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            from,
            Check::HeaderOnly,
            visit,
        )
    }

    /// Drops every batch at or after byte `position` (a batch boundary) whose first offset is
    /// `next_offset`; fixes the indexes and the derived state.
    pub fn truncate_to(
        &mut self,
        position: u64,
        next_offset: Offset,
        now_ms: i64,
    ) -> io::Result<()> {
        assert!(
            position <= self.size_bytes,
            "truncate beyond the segment end"
        );
        assert!(
            next_offset >= self.base_offset,
            "truncate below the segment base"
        );
        self.log_file.truncate(position)?;
        self.size_bytes = position;
        self.durable_bytes = self.durable_bytes.min(position);
        let indexer = &mut self.indexer;
        indexer.offset_index.truncate_to_position(position)?;
        indexer.time_index.truncate_to_offset(next_offset)?;
        indexer.bytes_since_last_index_entry = 0;
        indexer.next_offset = self.base_offset;
        indexer.max_timestamp = indexer.time_index.last();
        let from = indexer
            .offset_index
            .last()
            .map_or(0, |e| u64::from(e.position));
        let end = scan_batches(
            self.log_file.as_ref(),
            self.size_bytes,
            from,
            Check::HeaderOnly,
            |_, header| {
                indexer.follow(header);
                Ok(Visit::Continue)
            },
        )?;
        assert!(
            end.error.is_none(),
            "batches before a truncation point were valid"
        );
        // Equal, or below when compaction removed the batches just before the cut.
        assert!(
            indexer.next_offset <= next_offset,
            "truncation point is a batch boundary"
        );
        self.roll_timestamp_ms = self.first_batch_roll_timestamp(now_ms)?;
        Ok(())
    }

    /// Writes the final time index entry, as Kafka does when a segment stops being active.
    pub fn finish_time_index(&mut self) -> io::Result<()> {
        let indexer = &mut self.indexer;
        if let Some(max) = indexer.max_timestamp {
            indexer
                .time_index
                .maybe_append(max.timestamp, max.offset, true)?;
            indexer.unsynced = true;
        }
        Ok(())
    }

    /// Whether some appended bytes or index entries are not yet fsynced.
    pub fn needs_sync(&self) -> bool {
        self.durable_bytes < self.size_bytes || self.indexer.unsynced
    }

    /// Forgets that the log file's bytes are durable. After an unclean shutdown they may sit in
    /// the page cache only (a killed process's writes survive it, unsynced): what recovery
    /// validated must be fsynced before the recovery point moves past it, or a power loss
    /// right after the restart takes it from below the recovery point, where the next
    /// recovery trusts the files.
    pub fn forget_durability(&mut self) {
        self.durable_bytes = 0;
    }

    /// Fsyncs the log file and both indexes.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.durable_bytes < self.size_bytes {
            self.log_file.sync()?;
            self.durable_bytes = self.size_bytes;
        }
        if self.indexer.unsynced {
            self.indexer.offset_index.sync()?;
            self.indexer.time_index.sync()?;
            self.indexer.unsynced = false;
        }
        Ok(())
    }

    /// Appends the `len` bytes at `position` to `out`.
    pub fn read_to_vec(&self, position: u64, len: usize, out: &mut Vec<u8>) -> io::Result<()> {
        self.log_file.read_to_vec_at(position, len, out)
    }

    /// Closes the files and removes them, its `.txnindex` included (the caller fsyncs the
    /// directory).
    pub fn delete(self, storage: &dyn Storage, dir: &Path) -> io::Result<()> {
        self.delete_files(
            storage,
            dir,
            &[
                LOG_FILE_SUFFIX,
                INDEX_FILE_SUFFIX,
                TIME_INDEX_FILE_SUFFIX,
                crate::txn::TXN_INDEX_FILE_SUFFIX,
            ],
        )
    }

    /// Closes the files and removes only the two indexes (before the cleaner swaps in a new log
    /// file; the caller fsyncs the directory).
    pub fn delete_indexes(self, storage: &dyn Storage, dir: &Path) -> io::Result<()> {
        self.delete_files(storage, dir, &[INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX])
    }

    fn delete_files(self, storage: &dyn Storage, dir: &Path, suffixes: &[&str]) -> io::Result<()> {
        let base = self.base_offset;
        drop(self);
        for suffix in suffixes {
            match storage.remove_file(&dir.join(segment_file_name(base, suffix))) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What [`Segment::recover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentRecovery {
    /// Valid batches kept.
    pub batches: u64,
    /// Bytes of valid batches kept.
    pub bytes_valid: u64,
    /// Bytes cut from the end of the file.
    pub bytes_truncated: u64,
    /// Why the scan stopped early, if it did.
    pub error: Option<ScanError>,
}
