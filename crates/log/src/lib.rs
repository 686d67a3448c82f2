//! # keel-log: Keel's partition log storage
//!
//! Everything Keel keeps on disk for partition data lives here: record batches in segment files
//! exactly as Kafka lays them out, the offset and time indexes, the leader-epoch checkpoint,
//! the per-directory offset checkpoints, `meta.properties`, the clean-shutdown marker, and crash
//! recovery. All file IO goes through the [`Storage`] trait so a simulator can use
//! [`MemStorage`], which loses unsynced data on [`MemStorage::crash`]. Nothing here reads a clock
//! or draws randomness: time comes in as `now_ms` arguments, directory ids as `Uuid` arguments.
//!
//! ## On-disk layout
//!
//! ```text
//! <log dir>/
//!   meta.properties                      version=1, cluster.id, node.id, directory.id
//!   .kafka_cleanshutdown                 {"version":0,"brokerEpoch":N}, only while stopped cleanly
//!   recovery-point-offset-checkpoint     0 / count / "<topic> <partition> <offset>" lines
//!   replication-offset-checkpoint        same format: high watermarks
//!   log-start-offset-checkpoint          same format: log start offsets
//!   <topic>-<partition>/
//!     00000000000000000000.log           record batches (v2), back to back
//!     00000000000000000000.index         (relative offset u32, position u32) BE, sparse
//!     00000000000000000000.timeindex     (timestamp i64, relative offset u32) BE, sparse
//!     00000000000000001234.log           next segment, named by its base offset
//!     ...
//!     leader-epoch-checkpoint            0 / count / "<epoch> <start offset>" lines
//!     00000000000000001234.snapshot      idempotent producers' state below offset 1234
//!                                        (written at each roll and at close)
//!     00000000000000000000.txnindex      aborted transactions whose ABORT marker is in the
//!                                        segment (34-byte entries, Kafka's layout)
//! ```
//!
//! Checkpoints and markers are replaced atomically ([`storage::write_file_atomically`]: temp
//! file, fsync, rename, fsync directory).
//!
//! ## Tour
//!
//! ```
//! use std::sync::Arc;
//! use keel_log::{plain_batch::build_batch, LeaderEpoch, LogConfig, LogDir, MemStorage, Offset,
//!     Storage, TopicPartition};
//!
//! let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
//! let dir = std::path::Path::new("/data/kafka-logs");
//! let directory_id = uuid::Uuid::from_bytes([1; 16]); // random in real life
//! LogDir::format(storage.clone(), dir, "cluster-a", 1, directory_id)?;
//! let log_dir = LogDir::open(storage.clone(), dir, Some("cluster-a"), 1)?;
//! let clean = log_dir.read_and_remove_clean_shutdown()?.is_some();
//!
//! let tp = TopicPartition::new("orders", 0);
//! let mut log = log_dir.create_log(&tp, LogConfig::default(), 1_000)?;
//! let batch = build_batch(&[(None, b"hello"), (Some(b"k"), b"world")], 1_000);
//! let info = log.append_as_leader(&batch, LeaderEpoch(0), 1_000)?;
//! assert_eq!((info.first_offset, info.last_offset), (Offset(0), Offset(1)));
//!
//! let fetched = log.read(Offset(0), 1 << 20, Some(log.log_end_offset()), true)?;
//! assert_eq!(fetched.last_offset, Some(Offset(1)));
//! assert_eq!(log.end_offset_for_epoch(LeaderEpoch(0)), Some((LeaderEpoch(0), Offset(2))));
//!
//! // Orderly shutdown: close logs, checkpoint, then the clean-shutdown marker last.
//! log.close(2_000)?;
//! log_dir.checkpoint(&[keel_log::PartitionCheckpoint::of(tp.clone(), &log, Some(Offset(2)))])?;
//! log_dir.write_clean_shutdown(7)?;
//!
//! // Next start: clean, so nothing is scanned.
//! assert_eq!(log_dir.read_and_remove_clean_shutdown()?, Some(7));
//! let loaded = log_dir.load_logs(true, 3_000, &|_| LogConfig::default())?;
//! assert_eq!(loaded.logs[&tp].log_end_offset(), Offset(2));
//! assert!(!loaded.logs[&tp].recovery_report().recovered());
//! # let _ = clean;
//! # Ok::<(), keel_log::LogError>(())
//! ```
//!
//! ## The `Log` API
//!
//! - [`Log::open`] (recovery when not clean; see [`RecoveryReport`]), [`Log::close`],
//!   [`Log::delete`];
//! - [`Log::append_as_leader`] / [`Log::append_as_follower`] → [`AppendInfo`];
//!   [`Log::assign_epoch_start_offset`] for a new leader before its first append;
//! - [`Log::read`] → [`FetchData`]; [`Log::offset_for_timestamp`],
//!   [`Log::offset_of_max_timestamp`] → [`RecordTimestamp`], [`Log::end_offset_for_epoch`];
//! - [`Log::truncate_to`], [`Log::truncate_fully_and_start_at`],
//!   [`Log::increment_log_start_offset`];
//! - [`Log::flush`], [`Log::flush_if_due`], [`Log::roll`], [`Log::maybe_roll`],
//!   [`Log::apply_retention`] → [`RetentionResult`];
//! - accessors: log start / end offset, recovery point, latest epoch, size, segments,
//!   [`Log::durable_positions`], [`Log::producer_states`];
//! - [`Log::remove_expired_producers`] (`producer.id.expiration.ms`).
//!
//! Semantics worth knowing:
//! - timestamp lookups answer the first *record* whose timestamp reaches the target, as Kafka
//!   does: the time index points at or before its batch, and only that batch is read and
//!   decoded (decompressed through the caller's [`RecordCodecs`]);
//! - `end_offset_for_epoch` follows Kafka's `LeaderEpochFileCache.endOffsetFor`, including its
//!   answer for an epoch below the earliest known one: (requested epoch, start offset of the
//!   earliest known epoch);
//! - `truncate_to` works on whole batches and flushes the log, so afterwards the recovery point
//!   equals the log end offset; the producer state is reloaded for the new end;
//! - `append_as_leader` answers an idempotent producer's retry of a batch the log holds with
//!   that batch's offsets (`AppendInfo::duplicate`) and appends nothing;
//! - the recovery point is the flushed offset; the caller checkpoints it (with
//!   [`LogDir::checkpoint`]) — to simulate losing unflushed data on an unclean start, truncate a
//!   freshly opened log to its checkpointed recovery point with [`Log::truncate_to`].
//!
//! ## Modules
//!
//! - [`storage`]: the storage trait, [`OsStorage`], [`MemStorage`], atomic writes;
//! - [`batch`]: the v2 batch header, validation, in-place rewrites;
//! - [`Log`] (module `log`): one partition's segments, appends, reads, truncation, retention,
//!   flushing, recovery;
//! - [`LogDir`] (module `log_dir`): identity, clean-shutdown marker, checkpoints, loading logs;
//! - [`checkpoint`]: the text checkpoint formats; [`LeaderEpochCache`]: epoch → start offset;
//! - [`plain_batch`]: building v2 batches for tests and tools;
//! - [`producer_state`]: idempotent producers' sequences and epochs per partition: duplicate
//!   detection and sequence checks on leader appends, snapshots;
//! - [`validate`]: a producer's batch checked record by record before the leader appends it
//!   (KIP-467 record errors) and rebuilt in the topic's codec (`compression.type`).
//!
//! Errors are one [`LogError`] enum split into API errors (mapped to Kafka error codes by
//! [`LogError::kafka_error_code`]) and fatal ones ([`LogError::is_fatal`]).

pub mod batch;
pub mod checkpoint;
mod config;
mod epoch_cache;
mod error;
pub mod index;
mod log;
mod log_dir;
pub mod plain_batch;
pub mod producer_state;
mod segment;
pub mod storage;
pub mod txn;
mod types;
pub mod validate;

pub use config::{CleanupPolicy, LogConfig, TimestampType};
pub use epoch_cache::LeaderEpochCache;
pub use error::{Damage, LogError};
pub use log::{
    AppendInfo, CompactionOutput, CompactionPlan, CompactionStats, DeletedSegment, FetchData, Log,
    NoCodecs, Quarantine, RecordCodecs, RecordTimestamp, RecoveryReport, RetentionReason,
    RetentionResult, RolledFlush, ScrubStep, ScrubTask, CLEANED_FILE_SUFFIX,
    CLEANER_OFFSET_CHECKPOINT_FILE, LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE,
    QUARANTINE_INFO_FILE, QUARANTINE_SUFFIX,
};
pub use log_dir::{
    decode_kafka_uuid, encode_kafka_uuid, LoadedLogs, LogDir, MetaProperties, PartitionCheckpoint,
    SkippedDir, CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
pub use producer_state::{MarkerCheck, ProducerEntry, ProducerStates, SequenceCheck};
pub use segment::{
    parse_segment_file_name, segment_file_name, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
pub use storage::{MemStorage, OsStorage, Storage, StorageFile, VolumeSpace};
pub use txn::{AbortedTxn, CompletedTxn, ControlType, EndTxnMarker, TXN_INDEX_FILE_SUFFIX};
pub use types::{LeaderEpoch, Offset, TimestampOffset, TopicPartition};
