//! The controller's metadata log: committed metadata records, in order, each at an offset.
//!
//! The records (`keel_controller::Record`) are stored as JSON values of uncompressed Kafka v2
//! record batches in an ordinary partition log, `__cluster_metadata-0`, one batch per append.
//! So the log gets segments, indexes, CRCs and crash recovery from `keel_log` for free, and
//! brokers can follow it with a plain Fetch request, as KRaft brokers do. The batch's partition
//! leader epoch is the controller epoch that wrote it.
//!
//! Snapshots: [`MetadataLog::write_snapshot`] stores the records that rebuild the state below
//! an offset (`ClusterImage::to_snapshot`) in `<end offset>.checkpoint` next to the segments
//! (JSON, written atomically); a restarted controller loads the newest readable one and replays
//! only the records after it. The log itself is kept whole, so a missing or unreadable snapshot
//! only costs replay time.
//!
//! This is the local, single-controller implementation of [`MetadataLog`]; a Raft-replicated
//! one (issue 6) sits behind the same trait.

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
    #[error("metadata snapshot {path}: {source}")]
    Snapshot {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// An ordered, durable log of committed metadata records, with snapshots.
pub trait MetadataLog: Send + std::fmt::Debug {
    /// Stores a snapshot: `records` rebuild the state after every record below `end`. Durable
    /// when it returns.
    fn write_snapshot(
        &mut self,
        end: MetadataOffset,
        records: &[Record],
    ) -> Result<(), MetadataLogError>;
    /// The newest readable snapshot at or below the log's end: its end offset and records.
    fn latest_snapshot(&self) -> Option<(MetadataOffset, Vec<Record>)>;
    /// The offset the next record will get.
    fn end_offset(&self) -> MetadataOffset;
    /// Appends `records` as one batch written by `controller_epoch` and makes them durable
    /// before returning the offset of the first. An empty slice appends nothing.
    fn append(
        &mut self,
        records: &[Record],
        controller_epoch: i32,
        now_ms: i64,
    ) -> Result<MetadataOffset, MetadataLogError>;
    /// Committed records from `from` on, at most about `max_bytes` of batches (at least one
    /// batch if any).
    fn read(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Vec<(MetadataOffset, Record)>, MetadataLogError>;
    /// The raw batches from `from` on, for serving a Fetch of the metadata partition.
    fn read_batches(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Bytes, MetadataLogError>;
}

/// Snapshot files kept (the newest ones; older are deleted).
const SNAPSHOTS_KEPT: usize = 2;
/// Suffix of a snapshot file (Kafka's).
const SNAPSHOT_SUFFIX: &str = ".checkpoint";

/// [`MetadataLog`] in a local partition directory, fsynced on every append.
#[derive(Debug)]
pub struct LocalMetadataLog {
    log: Log,
    storage: Arc<dyn Storage>,
    dir: std::path::PathBuf,
}

impl LocalMetadataLog {
    /// Opens (creating if needed) `<dir>/__cluster_metadata-0`. The log is always recovered
    /// from its start: it is small, and a controller must never trust a torn tail.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        now_ms: i64,
    ) -> Result<Self, MetadataLogError> {
        let path = dir.join(format!("{METADATA_TOPIC}-0"));
        keel_log::storage::create_dir_all_durable(storage.as_ref(), &path)
            .map_err(LogError::io("create directory", &path))?;
        let config = LogConfig {
            retention_ms: None,
            retention_bytes: None,
            ..LogConfig::default()
        };
        let log = Log::open(
            storage.clone(),
            path.clone(),
            config,
            Offset(0),
            Offset(0),
            false,
            now_ms,
        )?;
        Ok(LocalMetadataLog {
            log,
            storage,
            dir: path,
        })
    }

    /// Snapshot end offsets present, ascending.
    fn snapshot_offsets(&self) -> Vec<MetadataOffset> {
        let Ok(entries) = self.storage.list_dir(&self.dir) else {
            return Vec::new();
        };
        let mut offsets: Vec<MetadataOffset> = entries
            .iter()
            .filter(|e| !e.is_dir)
            .filter_map(|e| e.name.strip_suffix(SNAPSHOT_SUFFIX))
            .filter_map(|stem| stem.parse::<i64>().ok())
            .map(MetadataOffset)
            .collect();
        offsets.sort();
        offsets
    }

    fn snapshot_path(&self, end: MetadataOffset) -> std::path::PathBuf {
        self.dir.join(format!("{:020}{SNAPSHOT_SUFFIX}", end.0))
    }
}

impl MetadataLog for LocalMetadataLog {
    fn write_snapshot(
        &mut self,
        end: MetadataOffset,
        records: &[Record],
    ) -> Result<(), MetadataLogError> {
        let path = self.snapshot_path(end);
        let bytes = serde_json::to_vec(records)?;
        keel_log::storage::write_file_atomically(self.storage.as_ref(), &path, &bytes).map_err(
            |source| MetadataLogError::Snapshot {
                path: path.display().to_string(),
                source,
            },
        )?;
        let offsets = self.snapshot_offsets();
        for old in offsets.iter().rev().skip(SNAPSHOTS_KEPT) {
            let old = self.snapshot_path(*old);
            if let Err(e) = self.storage.remove_file(&old) {
                tracing::warn!(path = %old.display(), error = %e, "cannot delete an old metadata snapshot");
            }
        }
        Ok(())
    }

    fn latest_snapshot(&self) -> Option<(MetadataOffset, Vec<Record>)> {
        let end = self.end_offset();
        for offset in self.snapshot_offsets().into_iter().rev() {
            if offset > end {
                // Written after records a crash then lost (cannot happen with fsynced appends,
                // but a snapshot must never claim more than the log holds).
                continue;
            }
            let path = self.snapshot_path(offset);
            let read = keel_log::storage::read_file_if_exists(self.storage.as_ref(), &path);
            match read.map(|b| b.map(|b| serde_json::from_slice::<Vec<Record>>(&b))) {
                Ok(Some(Ok(records))) => return Some((offset, records)),
                Ok(None) => {}
                Ok(Some(Err(e))) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable metadata snapshot ignored")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "unreadable metadata snapshot ignored")
                }
            }
        }
        None
    }

    fn end_offset(&self) -> MetadataOffset {
        MetadataOffset(self.log.log_end_offset().0)
    }

    fn append(
        &mut self,
        records: &[Record],
        controller_epoch: i32,
        now_ms: i64,
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
        self.log.flush(now_ms)?;
        assert_eq!(
            info.first_offset.0, first.0,
            "metadata offsets are contiguous"
        );
        Ok(first)
    }

    fn read(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Vec<(MetadataOffset, Record)>, MetadataLogError> {
        let bytes = self.read_batches(from, max_bytes)?;
        decode_metadata_batches(&bytes, from)
    }

    fn read_batches(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Bytes, MetadataLogError> {
        if from >= self.end_offset() {
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
            .append(&[config_record("a", "1"), config_record("b", "2")], 1, 10)
            .unwrap();
        assert_eq!(first, MetadataOffset(0));
        let second = log.append(&[config_record("c", "3")], 1, 11).unwrap();
        assert_eq!(second, MetadataOffset(2));
        assert_eq!(log.append(&[], 1, 12).unwrap(), MetadataOffset(3));

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
