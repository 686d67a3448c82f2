//! The applied metadata log: committed metadata records, in order, each at an offset — what
//! brokers fetch and replay.
//!
//! The records (`keel_controller::Record`) are stored as JSON values of uncompressed Kafka v2
//! record batches in an ordinary partition log, `__cluster_metadata-0`, one batch per Raft
//! entry that carried records. So the log gets segments, indexes, CRCs and crash recovery from
//! `keel_log` for free, and brokers follow it with a plain Fetch request, as KRaft brokers do.
//! The batch's partition leader epoch is the controller epoch (Raft term) that wrote it.
//!
//! It is *derived* data: every controller writes it when it applies committed Raft entries
//! (`crate::raft::state_machine`), and rebuilds it from its newest snapshot and the Raft log
//! after a restart. Appends are therefore not fsynced.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use keel_controller::types::MetadataOffset;
use keel_controller::Record;
use keel_log::batch::BatchIter;
use keel_log::plain_batch::{build_batch, decode_records};
use keel_log::storage::Storage;
use keel_log::{LeaderEpoch, Log, LogConfig, LogError, Offset};

/// The metadata log's partition, as KRaft names it.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// Why the metadata log failed. Every variant is fatal for a controller: it cannot decide
/// anything without its log.
#[derive(Debug, thiserror::Error)]
pub enum MetadataLogError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("metadata record at offset {offset} cannot be decoded: {reason}")]
    Corrupt { offset: i64, reason: String },
    #[error("metadata record cannot be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

/// `__cluster_metadata-0` in a local metadata directory.
#[derive(Debug)]
pub struct LocalMetadataLog {
    log: Log,
    dir: std::path::PathBuf,
}

impl LocalMetadataLog {
    /// Opens (creating if needed) `<dir>/__cluster_metadata-0`, recovering it from its start.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        now_ms: i64,
    ) -> Result<Self, MetadataLogError> {
        let path = Self::dir_in(dir);
        keel_log::storage::create_dir_all_durable(storage.as_ref(), &path)
            .map_err(LogError::io("create directory", &path))?;
        let config = LogConfig {
            retention_ms: None,
            retention_bytes: None,
            max_message_bytes: 256 * 1024 * 1024,
            // Small segments, so compaction below a snapshot frees space.
            segment_bytes: 8 * 1024 * 1024,
            ..LogConfig::default()
        };
        let log = Log::open(
            storage,
            path.clone(),
            config,
            Offset(0),
            Offset(0),
            false,
            now_ms,
        )?;
        Ok(LocalMetadataLog { log, dir: path })
    }

    /// `<metadata dir>/__cluster_metadata-0`.
    pub fn dir_in(metadata_dir: &Path) -> std::path::PathBuf {
        metadata_dir.join(format!("{METADATA_TOPIC}-0"))
    }

    /// The partition directory (snapshots live next to the segments).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The offset the next record will get.
    pub fn end_offset(&self) -> MetadataOffset {
        MetadataOffset(self.log.log_end_offset().0)
    }

    /// The first offset the log holds (records below are only in a snapshot).
    pub fn start_offset(&self) -> MetadataOffset {
        MetadataOffset(self.log.log_start_offset().0)
    }

    /// Appends `records` as one batch written by `controller_epoch`; returns the offset of the
    /// first. An empty slice appends nothing. Not fsynced (see the module docs) unless
    /// `durable`.
    pub fn append(
        &mut self,
        records: &[Record],
        controller_epoch: i32,
        now_ms: i64,
        durable: bool,
    ) -> Result<MetadataOffset, MetadataLogError> {
        let first = self.end_offset();
        if records.is_empty() {
            return Ok(first);
        }
        let values = records
            .iter()
            .map(serde_json::to_vec)
            .collect::<Result<Vec<_>, _>>()?;
        let entries: Vec<(Option<&[u8]>, &[u8])> =
            values.iter().map(|v| (None, v.as_slice())).collect();
        let batch = build_batch(&entries, now_ms);
        let info = self
            .log
            .append_as_leader(&batch, LeaderEpoch(controller_epoch), now_ms)?;
        if durable {
            self.log.flush(now_ms)?;
        }
        assert_eq!(
            info.first_offset.0, first.0,
            "metadata offsets are contiguous"
        );
        Ok(first)
    }

    /// Compaction below a snapshot: records before `start` are no longer served (a fetch below
    /// it loads the snapshot instead); whole segments below it are deleted.
    pub fn advance_start(
        &mut self,
        start: MetadataOffset,
        now_ms: i64,
    ) -> Result<(), MetadataLogError> {
        let start = Offset(start.0.min(self.end_offset().0));
        if self.log.increment_log_start_offset(start)? {
            let end = self.log.log_end_offset();
            self.log.apply_retention(now_ms, end)?;
        }
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), MetadataLogError> {
        Ok(self.log.flush(now_ms)?)
    }

    /// Makes `end` the log's end offset: keeps the records below it if the log holds them all
    /// (a restart rebuilding from a snapshot that ends at `end`), else starts an empty log at
    /// `end` (the records before are only in the snapshot).
    pub fn reset_to(&mut self, end: MetadataOffset, now_ms: i64) -> Result<(), MetadataLogError> {
        if self.start_offset() <= end && end <= self.end_offset() {
            self.log.truncate_to(Offset(end.0), now_ms)?;
            self.log.flush(now_ms)?;
        } else {
            self.log.truncate_fully_and_start_at(Offset(end.0))?;
        }
        Ok(())
    }

    /// Committed records from `from` on, at most about `max_bytes` of batches (at least one
    /// batch if any).
    pub fn read(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Vec<(MetadataOffset, Record)>, MetadataLogError> {
        let bytes = self.read_batches(from, max_bytes)?;
        decode_metadata_batches(&bytes, from)
    }

    /// The raw batches from `from` on, for serving a Fetch of the metadata partition.
    pub fn read_batches(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Bytes, MetadataLogError> {
        if from >= self.end_offset() || from < self.start_offset() {
            return Ok(Bytes::new());
        }
        Ok(self
            .log
            .read(Offset(from.0), max_bytes, None, true)?
            .records)
    }
}

/// Decodes fetched metadata batches into records at or after `from` (a fetch may start in the
/// middle of a batch). Used by the controller and by brokers following the log.
pub fn decode_metadata_batches(
    bytes: &[u8],
    from: MetadataOffset,
) -> Result<Vec<(MetadataOffset, Record)>, MetadataLogError> {
    let mut out = Vec::new();
    for batch in BatchIter::new(bytes) {
        let batch = batch.map_err(|e| MetadataLogError::Corrupt {
            offset: from.0,
            reason: e.to_string(),
        })?;
        let base = batch.header.base_offset.0;
        let records = decode_records(batch.bytes).ok_or_else(|| MetadataLogError::Corrupt {
            offset: base,
            reason: "not an uncompressed batch of records".to_string(),
        })?;
        for record in records.into_iter().filter(|r| r.offset >= from.0) {
            let decoded: Record =
                serde_json::from_slice(&record.value).map_err(|e| MetadataLogError::Corrupt {
                    offset: record.offset,
                    reason: e.to_string(),
                })?;
            out.push((MetadataOffset(record.offset), decoded));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_controller::records::{ConfigRecord, ConfigResource};
    use keel_log::storage::MemStorage;

    fn config_record(name: &str, value: &str) -> Record {
        Record::Config(ConfigRecord {
            resource: ConfigResource::Cluster,
            name: name.to_string(),
            value: Some(value.to_string()),
        })
    }

    // Shows: appended records come back in order at contiguous offsets, also from the middle
    // of a batch, and survive a crash because every append is fsynced.
    #[test]
    fn appends_are_durable_and_ordered() {
        let storage = Arc::new(MemStorage::new());
        let dir = Path::new("/meta");
        let mut log = LocalMetadataLog::open(storage.clone(), dir, 0).unwrap();
        let first = log
            .append(
                &[config_record("a", "1"), config_record("b", "2")],
                1,
                10,
                true,
            )
            .unwrap();
        assert_eq!(first, MetadataOffset(0));
        let second = log.append(&[config_record("c", "3")], 1, 11, true).unwrap();
        assert_eq!(second, MetadataOffset(2));
        assert_eq!(log.append(&[], 1, 12, true).unwrap(), MetadataOffset(3));

        storage.crash();
        let log = LocalMetadataLog::open(storage, dir, 20).unwrap();
        assert_eq!(log.end_offset(), MetadataOffset(3));
        let all = log.read(MetadataOffset(0), 1 << 20).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2], (MetadataOffset(2), config_record("c", "3")));
        let tail = log.read(MetadataOffset(1), 1 << 20).unwrap();
        assert_eq!(tail[0], (MetadataOffset(1), config_record("b", "2")));
        assert!(log.read(MetadataOffset(3), 1 << 20).unwrap().is_empty());
    }
}
