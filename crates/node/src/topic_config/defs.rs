//! The table of topic configs: every config Apache Kafka 4.x defines for a topic (Kafka's
//! `TopicConfig` names, `LogConfig`'s types, defaults and validators, and
//! `ServerTopicConfigSynonyms`' broker names), plus Keel's `unclean.recovery.strategy` (KIP-966).
//! Each says whether Keel acts on it or accepts it without effect, and why.

use super::{Effect, Kind, TopicConfigDef};

const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_MINUTE: i64 = 60_000;

/// Why the tiered-storage configs do nothing.
const NO_TIERED_STORAGE: &str = "Keel has no tiered storage (KIP-405): every segment stays on \
     the broker's disks, as in a Kafka cluster with remote.log.storage.system.enable=false, where \
     this config has no effect either.";

/// Why the replication throttles do nothing.
const NO_THROTTLE_RATE: &str = "Kafka throttles these replicas only at the rate the broker \
     configs leader.replication.throttled.rate / follower.replication.throttled.rate set; Keel has \
     no replication quotas and no per-broker dynamic configs to set a rate with, so, as in Kafka \
     without a rate, nothing is throttled.";

/// Kafka's `compression.type` values (`BrokerCompressionType`).
pub const COMPRESSION_TYPES: &[&str] =
    &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// Every topic config, sorted by name.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_synonyms: &[("log.cleanup.policy", 1)],
        default: Some("delete"),
        kind: Kind::CleanupPolicy,
        effect: Effect::Acted,
        doc: "\"delete\": segments older than retention.ms or beyond retention.bytes are deleted; \
              \"compact\": the log cleaner keeps the latest record of each key; \"compact,delete\": both.",
    },
    TopicConfigDef {
        name: "compression.gzip.level",
        broker_synonyms: &[("compression.gzip.level", 1)],
        default: Some("-1"),
        kind: Kind::IntRange {
            min: 1,
            max: 9,
            also: Some(-1),
        },
        effect: Effect::Acted,
        doc: "The gzip level batches are recompressed at when compression.type is gzip: 1 (fastest) \
              to 9 (smallest), or -1 for zlib's default (6).",
    },
    TopicConfigDef {
        name: "compression.lz4.level",
        broker_synonyms: &[("compression.lz4.level", 1)],
        default: Some("9"),
        kind: Kind::IntRange {
            min: 1,
            max: 17,
            also: None,
        },
        effect: Effect::Acted,
        doc: "The lz4 level batches are recompressed at when compression.type is lz4: 9 (the default) \
              is lz4's fast mode, any other level its high-compression mode (levels above 12 \
              compress as 12, lz4's highest).",
    },
    TopicConfigDef {
        name: "compression.type",
        broker_synonyms: &[("compression.type", 1)],
        default: Some("producer"),
        kind: Kind::OneOf(COMPRESSION_TYPES),
        effect: Effect::Acted,
        doc: "The codec the topic stores batches in: \"producer\" keeps the producer's own; \
              \"uncompressed\", \"gzip\", \"snappy\", \"lz4\" or \"zstd\" make the leader \
              recompress (or decompress) every batch in another codec before appending it.",
    },
    TopicConfigDef {
        name: "compression.zstd.level",
        broker_synonyms: &[("compression.zstd.level", 1)],
        default: Some("3"),
        kind: Kind::IntRange {
            min: -131_072,
            max: 22,
            also: None,
        },
        effect: Effect::Acted,
        doc: "The zstd level batches are recompressed at when compression.type is zstd: -131072 \
              (fastest) to 22 (smallest).",
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_synonyms: &[("log.cleaner.delete.retention.ms", 1)],
        default: Some("86400000"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "How long a tombstone of a compacted topic stays readable after the cleaner first kept it.",
    },
    TopicConfigDef {
        name: "file.delete.delay.ms",
        broker_synonyms: &[("log.segment.delete.delay.ms", 1)],
        default: Some("60000"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Inert(
            "Kafka renames a deleted segment and removes its files this much later, so readers \
             of its memory maps finish; Keel reads segments through open file handles under the \
             partition's lock and removes the files at once, so there is nothing to wait for.",
        ),
        doc: "How long after deletion a segment's files stay on disk.",
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_synonyms: &[("log.flush.interval.messages", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 1 },
        effect: Effect::Acted,
        doc: "fsync the log after this many messages (default: never by count; rely on replication).",
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_synonyms: &[
            ("log.flush.interval.ms", 1),
            ("log.flush.scheduler.interval.ms", 1),
        ],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "fsync the log when this many milliseconds passed since the last fsync (default: never by time).",
    },
    TopicConfigDef {
        name: "follower.replication.throttled.replicas",
        broker_synonyms: &[],
        default: Some(""),
        kind: Kind::ReplicaList,
        effect: Effect::Inert(NO_THROTTLE_RATE),
        doc: "Replicas (partition:broker, or * for all) whose fetching as followers is throttled.",
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        broker_synonyms: &[("log.index.interval.bytes", 1)],
        default: Some("4096"),
        kind: Kind::Int { min: 0 },
        effect: Effect::Acted,
        doc: "Bytes of batches between two entries of a segment's offset index.",
    },
    TopicConfigDef {
        name: "leader.replication.throttled.replicas",
        broker_synonyms: &[],
        default: Some(""),
        kind: Kind::ReplicaList,
        effect: Effect::Inert(NO_THROTTLE_RATE),
        doc: "Replicas (partition:broker, or * for all) whose serving of followers as leaders is throttled.",
    },
    TopicConfigDef {
        name: "local.retention.bytes",
        broker_synonyms: &[("log.local.retention.bytes", 1)],
        default: Some("-2"),
        kind: Kind::Long { min: -2 },
        effect: Effect::Inert(NO_TIERED_STORAGE),
        doc: "With tiered storage, the size a partition keeps on local disk (-2: retention.bytes).",
    },
    TopicConfigDef {
        name: "local.retention.ms",
        broker_synonyms: &[("log.local.retention.ms", 1)],
        default: Some("-2"),
        kind: Kind::Long { min: -2 },
        effect: Effect::Inert(NO_TIERED_STORAGE),
        doc: "With tiered storage, how long segments stay on local disk (-2: retention.ms).",
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_synonyms: &[("log.cleaner.max.compaction.lag.ms", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 1 },
        effect: Effect::Acted,
        doc: "A dirty segment older than this is compacted whatever the dirty ratio.",
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_synonyms: &[("message.max.bytes", 1)],
        default: Some("1048588"),
        kind: Kind::Int { min: 0 },
        effect: Effect::Acted,
        doc: "The largest record batch accepted, after compression and after recompression to \
              compression.type (MESSAGE_TOO_LARGE beyond).",
    },
    TopicConfigDef {
        name: "message.timestamp.after.max.ms",
        broker_synonyms: &[("log.message.timestamp.after.max.ms", 1)],
        default: Some("3600000"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "With CreateTime, how far ahead of the broker's clock a record's timestamp may be \
              (KIP-937); a record beyond is refused with INVALID_TIMESTAMP.",
    },
    TopicConfigDef {
        name: "message.timestamp.before.max.ms",
        broker_synonyms: &[("log.message.timestamp.before.max.ms", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "With CreateTime, how far behind the broker's clock a record's timestamp may be \
              (KIP-937); a record beyond is refused with INVALID_TIMESTAMP.",
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_synonyms: &[("log.message.timestamp.type", 1)],
        default: Some("CreateTime"),
        kind: Kind::OneOf(&["CreateTime", "LogAppendTime"]),
        effect: Effect::Acted,
        doc: "CreateTime keeps the producer's record timestamps; LogAppendTime stamps each batch \
              with the broker's clock when it is appended.",
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_synonyms: &[("log.cleaner.min.cleanable.ratio", 1)],
        default: Some("0.5"),
        kind: Kind::Ratio,
        effect: Effect::Acted,
        doc: "Compact once the dirty (not yet compacted) bytes are at least this share of the log.",
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        broker_synonyms: &[("log.cleaner.min.compaction.lag.ms", 1)],
        default: Some("0"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "A record stays uncompacted for at least this long.",
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        broker_synonyms: &[("min.insync.replicas", 1)],
        default: Some("1"),
        kind: Kind::Int { min: 1 },
        effect: Effect::Acted,
        doc: "Minimum ISR size for acks=all writes and for the high watermark to advance (KIP-966).",
    },
    TopicConfigDef {
        name: "preallocate",
        broker_synonyms: &[("log.preallocate", 1)],
        default: Some("false"),
        kind: Kind::Boolean,
        effect: Effect::Inert(
            "Kafka can preallocate a new segment file to segment.bytes (for filesystems that \
             fragment, mostly on Windows); Keel grows segment files as it appends and never \
             preallocates.",
        ),
        doc: "Whether a new segment file is allocated at full size when created.",
    },
    TopicConfigDef {
        name: "remote.log.copy.disable",
        broker_synonyms: &[],
        default: Some("false"),
        kind: Kind::Boolean,
        effect: Effect::Inert(NO_TIERED_STORAGE),
        doc: "With tiered storage, stop copying segments to remote storage (remote data becomes read-only).",
    },
    TopicConfigDef {
        name: "remote.log.delete.on.disable",
        broker_synonyms: &[],
        default: Some("false"),
        kind: Kind::Boolean,
        effect: Effect::Inert(NO_TIERED_STORAGE),
        doc: "With tiered storage, delete the remote data when tiered storage is turned off for the topic.",
    },
    TopicConfigDef {
        name: "remote.storage.enable",
        broker_synonyms: &[],
        default: Some("false"),
        kind: Kind::Boolean,
        effect: Effect::Inert(
            "Keel has no tiered storage: \"false\" is accepted, \"true\" is refused as Kafka \
             refuses it on a cluster without remote.log.storage.system.enable.",
        ),
        doc: "Whether the topic's old segments move to tiered (remote) storage.",
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_synonyms: &[("log.retention.bytes", 1)],
        default: Some("-1"),
        kind: Kind::Long { min: -1 },
        effect: Effect::Acted,
        doc: "Largest size of a partition before its oldest segments are deleted (-1: no limit).",
    },
    TopicConfigDef {
        name: "retention.ms",
        broker_synonyms: &[
            ("log.retention.ms", 1),
            ("log.retention.minutes", MS_PER_MINUTE),
            ("log.retention.hours", MS_PER_HOUR),
        ],
        default: Some("604800000"),
        kind: Kind::Long { min: -1 },
        effect: Effect::Acted,
        doc: "How long segments are kept before deletion (-1: forever).",
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_synonyms: &[("log.segment.bytes", 1)],
        default: Some("1073741824"),
        kind: Kind::Int { min: 14 },
        effect: Effect::Acted,
        doc: "Size at which a segment file is closed and a new one rolled.",
    },
    TopicConfigDef {
        name: "segment.index.bytes",
        broker_synonyms: &[("log.index.size.max.bytes", 1)],
        default: Some("10485760"),
        kind: Kind::Int { min: 12 },
        effect: Effect::Acted,
        doc: "Largest size of a segment's offset or time index; a full index rolls the segment.",
    },
    TopicConfigDef {
        name: "segment.jitter.ms",
        broker_synonyms: &[
            ("log.roll.jitter.ms", 1),
            ("log.roll.jitter.hours", MS_PER_HOUR),
        ],
        default: Some("0"),
        kind: Kind::Long { min: 0 },
        effect: Effect::Acted,
        doc: "Up to this much earlier than segment.ms a segment rolls (a per-segment share, so \
              partitions created together do not roll together).",
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_synonyms: &[("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR)],
        default: Some("604800000"),
        kind: Kind::Long { min: 1 },
        effect: Effect::Acted,
        doc: "Age at which a segment is closed and a new one rolled, even if not full.",
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        broker_synonyms: &[("unclean.leader.election.enable", 1)],
        default: Some("false"),
        kind: Kind::Boolean,
        effect: Effect::Acted,
        doc: "Allow an out-of-sync replica to lead. With KIP-966 this selects the Proactive unclean \
              recovery strategy when unclean.recovery.strategy is not set.",
    },
    TopicConfigDef {
        name: "unclean.recovery.strategy",
        broker_synonyms: &[("unclean.recovery.strategy", 1)],
        default: None,
        kind: Kind::OneOf(&["proactive", "balanced", "manual"]),
        effect: Effect::Acted,
        doc: "(Keel, KIP-966) Unclean recovery: proactive, balanced or manual. Unset: proactive if \
              unclean.leader.election.enable=true, else balanced.",
    },
];
