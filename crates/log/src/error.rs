//! [`LogError`]: every error the crate returns, split into API errors (bad requests: the broker
//! answers them with a Kafka error code and carries on) and fatal errors (IO failures, corrupt
//! metadata files, a log directory that belongs to someone else: the broker must not carry on
//! with this directory). [`LogError::is_fatal`] and [`LogError::kafka_error_code`] classify them;
//! both match exhaustively, so a new variant must be classified.

use std::io;
use std::path::PathBuf;

use crate::batch::BatchError;
use crate::types::Offset;

/// Where stored data failed validation: the segment (by base offset), the byte position of the
/// first bad batch in it (every batch before it is whole), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Base offset of the segment.
    pub segment: Offset,
    /// Byte position of the bad batch in the segment file.
    pub position: u64,
    /// What is wrong with it.
    pub reason: String,
}

/// Errors of the log crate.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    // ---- API errors ----
    /// A batch failed structural or CRC validation (`CORRUPT_MESSAGE`).
    #[error("corrupt record batch: {0}")]
    CorruptRecord(BatchError),
    /// A batch is well formed but breaks a rule (`INVALID_RECORD`).
    #[error("invalid record batch: {reason}")]
    InvalidRecord {
        /// What rule was broken.
        reason: String,
    },
    /// A batch is larger than `max.message.bytes` (`MESSAGE_TOO_LARGE`).
    #[error("record batch of {batch_bytes} bytes exceeds max.message.bytes {max_message_bytes}")]
    RecordTooLarge {
        /// Size of the offending batch.
        batch_bytes: u64,
        /// The configured limit.
        max_message_bytes: u64,
    },
    /// A batch is not magic 2 (`UNSUPPORTED_FOR_MESSAGE_FORMAT`).
    #[error("unsupported record batch magic {magic}")]
    UnsupportedMagic {
        /// The magic found.
        magic: i8,
    },
    /// An offset outside `[log start offset, log end offset]` (`OFFSET_OUT_OF_RANGE`).
    #[error("offset {requested} is outside the log range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The requested offset.
        requested: Offset,
        /// The log start offset.
        log_start_offset: Offset,
        /// The log end offset.
        log_end_offset: Offset,
    },
    /// A follower append whose batches go backwards (below the log end offset or the previous
    /// batch's end; gaps are fine, compaction leaves them).
    #[error("follower append starts at offset {found}, below the log end offset {expected}")]
    UnexpectedAppendOffset {
        /// The log end offset (or the offset after the previous batch).
        expected: Offset,
        /// The base offset of the batch.
        found: Offset,
    },
    /// An idempotent producer's batch does not follow its last one
    /// (`OUT_OF_ORDER_SEQUENCE_NUMBER`).
    #[error("producer {producer_id} epoch {epoch}: expected sequence {expected}, got {found}")]
    OutOfOrderSequence {
        /// The producer.
        producer_id: i64,
        /// The batch's producer epoch.
        epoch: i16,
        /// The sequence that would follow.
        expected: i32,
        /// The batch's base sequence.
        found: i32,
    },
    /// A batch from an older epoch of a producer that has written with a newer one
    /// (`INVALID_PRODUCER_EPOCH`).
    #[error("producer {producer_id} epoch {epoch} is fenced: the partition has epoch {current}")]
    InvalidProducerEpoch {
        /// The producer.
        producer_id: i64,
        /// The batch's producer epoch.
        epoch: i16,
        /// The epoch the partition knows.
        current: i16,
    },
    /// A producer with an open transaction here wrote a non-transactional batch
    /// (`INVALID_TXN_STATE`).
    #[error("producer {producer_id} has an open transaction here from offset {first_offset}: expected a transactional write")]
    InvalidTxnState {
        /// The producer.
        producer_id: i64,
        /// The first offset of its open transaction.
        first_offset: Offset,
    },
    /// A transaction marker from a coordinator older than one that already wrote a marker for
    /// the producer (`TRANSACTION_COORDINATOR_FENCED`).
    #[error("producer {producer_id}: marker from coordinator epoch {coordinator_epoch}, but epoch {current} already wrote one")]
    TransactionCoordinatorFenced {
        /// The producer.
        producer_id: i64,
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The newest coordinator epoch seen for the producer.
        current: i32,
    },

    // ---- damage: fatal for the partition's data from there on, not for the directory ----
    /// Stored data failed validation when read back (bit rot, a misdirected or lost write): the
    /// log must end before it ([`crate::Log::set_aside_damage`]) and the replica has lost data.
    #[error("damaged log data in segment {} at byte {}: {}", .0.segment, .0.position, .0.reason)]
    Damaged(Damage),

    // ---- fatal errors ----
    /// A storage operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A checkpoint, properties or marker file cannot be parsed.
    #[error("corrupt file {}: {reason}", path.display())]
    CorruptFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Another process holds the log directory's `.lock`.
    #[error("log directory {} is in use by another process (its .lock is held)", path.display())]
    Locked {
        /// The log directory.
        path: PathBuf,
    },
    /// The log directory has no `meta.properties`.
    #[error("log directory {} is not formatted (no meta.properties); run `keel format`", path.display())]
    NotFormatted {
        /// The log directory.
        path: PathBuf,
    },
    /// `meta.properties` names another cluster.
    #[error("log directory {} belongs to cluster {found}, but this node is configured for cluster {expected}", path.display())]
    ClusterIdMismatch {
        /// The log directory.
        path: PathBuf,
        /// Cluster id in the configuration.
        expected: String,
        /// Cluster id in `meta.properties`.
        found: String,
    },
    /// `meta.properties` names another node.
    #[error("log directory {} belongs to node {found}, but this node is configured as node {expected}", path.display())]
    NodeIdMismatch {
        /// The log directory.
        path: PathBuf,
        /// Node id in the configuration.
        expected: i32,
        /// Node id in `meta.properties`.
        found: i32,
    },
    /// Formatting a directory already formatted for another cluster or node.
    #[error("log directory {} is already formatted for cluster {found_cluster_id} node {found_node_id}; refusing to format it for cluster {cluster_id} node {node_id}", path.display())]
    AlreadyFormatted {
        /// The log directory.
        path: PathBuf,
        /// Cluster id asked for.
        cluster_id: String,
        /// Node id asked for.
        node_id: i32,
        /// Cluster id on disk.
        found_cluster_id: String,
        /// Node id on disk.
        found_node_id: i32,
    },
    /// A `LogConfig` value out of range.
    #[error("invalid log config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
}

impl LogError {
    /// Builds an [`LogError::Io`] for `path`.
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { op, path, source }
    }

    /// Maps a batch validation failure to the API error Kafka would return for it.
    pub fn from_batch_error(error: BatchError) -> LogError {
        match error {
            BatchError::UnsupportedMagic { magic, .. } => LogError::UnsupportedMagic { magic },
            other => LogError::CorruptRecord(other),
        }
    }

    /// Whether the error is fatal for the log directory (as opposed to a rejected request).
    pub fn is_fatal(&self) -> bool {
        match self {
            LogError::CorruptRecord(_)
            | LogError::InvalidRecord { .. }
            | LogError::RecordTooLarge { .. }
            | LogError::UnsupportedMagic { .. }
            | LogError::OffsetOutOfRange { .. }
            | LogError::UnexpectedAppendOffset { .. }
            | LogError::OutOfOrderSequence { .. }
            | LogError::InvalidProducerEpoch { .. }
            | LogError::InvalidTxnState { .. }
            | LogError::TransactionCoordinatorFenced { .. }
            | LogError::Damaged(_) => false,
            LogError::Io { .. }
            | LogError::Locked { .. }
            | LogError::CorruptFile { .. }
            | LogError::NotFormatted { .. }
            | LogError::ClusterIdMismatch { .. }
            | LogError::NodeIdMismatch { .. }
            | LogError::AlreadyFormatted { .. }
            | LogError::InvalidConfig { .. } => true,
        }
    }

    /// The Kafka error code an API error maps to at the protocol boundary; `None` for fatal
    /// errors and for errors without a client-facing code.
    pub fn kafka_error_code(&self) -> Option<i16> {
        match self {
            LogError::OffsetOutOfRange { .. } => Some(1),
            LogError::CorruptRecord(_) => Some(2),
            LogError::RecordTooLarge { .. } => Some(10),
            LogError::UnsupportedMagic { .. } => Some(43),
            LogError::InvalidRecord { .. } => Some(87),
            LogError::OutOfOrderSequence { .. } => Some(45),
            LogError::InvalidProducerEpoch { .. } => Some(47),
            LogError::InvalidTxnState { .. } => Some(48),
            LogError::TransactionCoordinatorFenced { .. } => Some(52),
            LogError::Damaged(_) => Some(56),
            LogError::UnexpectedAppendOffset { .. }
            | LogError::Io { .. }
            | LogError::Locked { .. }
            | LogError::CorruptFile { .. }
            | LogError::NotFormatted { .. }
            | LogError::ClusterIdMismatch { .. }
            | LogError::NodeIdMismatch { .. }
            | LogError::AlreadyFormatted { .. }
            | LogError::InvalidConfig { .. } => None,
        }
    }
}
