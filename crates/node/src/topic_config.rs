//! Topic-level configuration: Kafka's names, broker-level synonyms, defaults and validation.
//!
//! Every topic config has a default that comes from the broker config (its *synonym*, e.g.
//! `log.retention.ms` for `retention.ms`), which itself defaults to Kafka's value. A topic
//! stores only its overrides; [`EffectiveTopicConfig`] resolves the rest.

use std::collections::BTreeMap;

use crate::config::{ConfigError, UncleanRecoveryStrategy};

/// How a value is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A 64-bit integer no smaller than the bound.
    Long {
        min: i64,
    },
    /// A 32-bit integer no smaller than the bound.
    Int {
        min: i32,
    },
    Boolean,
    /// One of the listed words (case-insensitive; stored as listed).
    OneOf(&'static [&'static str]),
    /// A number in [0, 1] (`min.cleanable.dirty.ratio`).
    Ratio,
    /// `cleanup.policy`: a comma-separated list of `delete` and `compact` (stored as `delete`,
    /// `compact` or `compact,delete`).
    CleanupPolicy,
}

/// One topic config key.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// Broker keys that set the default, in precedence order; each with the factor that turns
    /// its unit into the topic key's unit (e.g. hours to milliseconds).
    pub broker_synonyms: &'static [(&'static str, i64)],
    /// Kafka's default; `None` = derived at resolution time (only `unclean.recovery.strategy`).
    pub default: Option<&'static str>,
    pub kind: Kind,
    pub doc: &'static str,
}

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;

/// Every topic config Keel understands, sorted by name.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    TopicConfigDef {
        name: "cleanup.policy",
        broker_synonyms: &[("log.cleanup.policy", 1)],
        default: Some("delete"),
        kind: Kind::CleanupPolicy,
        doc: "\"delete\": old segments are deleted by retention.ms / retention.bytes; \"compact\": the cleaner keeps the latest record of each key; \"compact,delete\": both.",
    },
    TopicConfigDef {
        name: "compression.type",
        broker_synonyms: &[("compression.type", 1)],
        default: Some("producer"),
        kind: Kind::OneOf(&["producer"]),
        doc: "Keel stores record batches exactly as the producer compressed them (\"producer\").",
    },
    TopicConfigDef {
        name: "delete.retention.ms",
        broker_synonyms: &[("log.cleaner.delete.retention.ms", 1)],
        default: Some("86400000"),
        kind: Kind::Long { min: 0 },
        doc: "How long a tombstone of a compacted topic stays readable after the cleaner first kept it.",
    },
    TopicConfigDef {
        name: "flush.messages",
        broker_synonyms: &[("log.flush.interval.messages", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 1 },
        doc: "fsync the log after this many messages (default: rely on replication).",
    },
    TopicConfigDef {
        name: "flush.ms",
        broker_synonyms: &[("log.flush.interval.ms", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 0 },
        doc: "fsync the log when this many milliseconds passed since the last fsync.",
    },
    TopicConfigDef {
        name: "index.interval.bytes",
        broker_synonyms: &[("log.index.interval.bytes", 1)],
        default: Some("4096"),
        kind: Kind::Int { min: 0 },
        doc: "Bytes between offset index entries.",
    },
    TopicConfigDef {
        name: "max.message.bytes",
        broker_synonyms: &[("message.max.bytes", 1)],
        default: Some("1048588"),
        kind: Kind::Int { min: 0 },
        doc: "Largest record batch size allowed.",
    },
    TopicConfigDef {
        name: "message.timestamp.type",
        broker_synonyms: &[("log.message.timestamp.type", 1)],
        default: Some("CreateTime"),
        kind: Kind::OneOf(&["CreateTime", "LogAppendTime"]),
        doc: "Whether record timestamps are the producer's (CreateTime) or the broker's append time.",
    },
    TopicConfigDef {
        name: "max.compaction.lag.ms",
        broker_synonyms: &[("log.cleaner.max.compaction.lag.ms", 1)],
        default: Some("9223372036854775807"),
        kind: Kind::Long { min: 1 },
        doc: "A dirty segment older than this is compacted whatever the dirty ratio.",
    },
    TopicConfigDef {
        name: "min.cleanable.dirty.ratio",
        broker_synonyms: &[("log.cleaner.min.cleanable.ratio", 1)],
        default: Some("0.5"),
        kind: Kind::Ratio,
        doc: "Compact once the dirty (not yet compacted) bytes are at least this share of the log.",
    },
    TopicConfigDef {
        name: "min.compaction.lag.ms",
        broker_synonyms: &[("log.cleaner.min.compaction.lag.ms", 1)],
        default: Some("0"),
        kind: Kind::Long { min: 0 },
        doc: "A record stays uncompacted for at least this long.",
    },
    TopicConfigDef {
        name: "min.insync.replicas",
        broker_synonyms: &[("min.insync.replicas", 1)],
        default: Some("1"),
        kind: Kind::Int { min: 1 },
        doc: "Minimum ISR size for acks=all writes and for the high watermark to advance (KIP-966).",
    },
    TopicConfigDef {
        name: "retention.bytes",
        broker_synonyms: &[("log.retention.bytes", 1)],
        default: Some("-1"),
        kind: Kind::Long { min: -1 },
        doc: "Largest size of a partition before old segments are deleted (-1: no limit).",
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
        doc: "How long segments are kept before deletion (-1: forever).",
    },
    TopicConfigDef {
        name: "segment.bytes",
        broker_synonyms: &[("log.segment.bytes", 1)],
        default: Some("1073741824"),
        kind: Kind::Int { min: 14 },
        doc: "Segment file size before a new segment is rolled.",
    },
    TopicConfigDef {
        name: "segment.ms",
        broker_synonyms: &[("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR)],
        default: Some("604800000"),
        kind: Kind::Long { min: 1 },
        doc: "Age of a segment before a new one is rolled.",
    },
    TopicConfigDef {
        name: "unclean.leader.election.enable",
        broker_synonyms: &[("unclean.leader.election.enable", 1)],
        default: Some("false"),
        kind: Kind::Boolean,
        doc: "Allow an out-of-sync replica to lead. With KIP-966 this selects the Proactive unclean recovery strategy when unclean.recovery.strategy is not set.",
    },
    TopicConfigDef {
        name: "unclean.recovery.strategy",
        broker_synonyms: &[("unclean.recovery.strategy", 1)],
        default: None,
        kind: Kind::OneOf(&["proactive", "balanced", "manual"]),
        doc: "KIP-966 unclean recovery: proactive, balanced or manual. Unset: proactive if unclean.leader.election.enable=true, else balanced.",
    },
];

/// The definition of `name`, if it is a topic config.
pub fn definition(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether `key` is a broker-level synonym of some topic config.
pub fn is_broker_synonym(key: &str) -> bool {
    key == TEST_LOSE_UNFLUSHED_KEY
        || TOPIC_CONFIGS
            .iter()
            .any(|d| d.broker_synonyms.iter().any(|(s, _)| *s == key))
}

/// Checks and normalizes `value` for topic config `name`.
pub fn validate(name: &str, value: &str) -> Result<String, String> {
    if name == TEST_LOSE_UNFLUSHED_KEY {
        return validate_kind(Kind::Boolean, value);
    }
    let def = definition(name).ok_or_else(|| format!("unknown topic config {name}"))?;
    validate_kind(def.kind, value)
}

fn validate_kind(kind: Kind, value: &str) -> Result<String, String> {
    let value = value.trim();
    match kind {
        Kind::Long { min } => match value.parse::<i64>() {
            Ok(v) if v >= min => Ok(v.to_string()),
            Ok(v) => Err(format!("{v} is below the minimum {min}")),
            Err(e) => Err(format!("{value:?} is not a number: {e}")),
        },
        Kind::Int { min } => match value.parse::<i32>() {
            Ok(v) if v >= min => Ok(v.to_string()),
            Ok(v) => Err(format!("{v} is below the minimum {min}")),
            Err(e) => Err(format!("{value:?} is not a 32-bit number: {e}")),
        },
        Kind::Boolean => match value.to_ascii_lowercase().as_str() {
            "true" => Ok("true".into()),
            "false" => Ok("false".into()),
            _ => Err(format!("{value:?} is not true or false")),
        },
        Kind::OneOf(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(value))
            .map(|w| w.to_string())
            .ok_or_else(|| format!("{value:?} is not one of {}", words.join(", "))),
        Kind::Ratio => match value.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(v.to_string()),
            Ok(v) => Err(format!("{v} is outside [0, 1]")),
            Err(e) => Err(format!("{value:?} is not a number: {e}")),
        },
        Kind::CleanupPolicy => {
            let (mut delete, mut compact) = (false, false);
            for word in value.split(',').map(str::trim) {
                match word.to_ascii_lowercase().as_str() {
                    "delete" => delete = true,
                    "compact" => compact = true,
                    _ => return Err(format!("{word:?} is not delete or compact")),
                }
            }
            Ok(match (compact, delete) {
                (true, true) => "compact,delete",
                (true, false) => "compact",
                _ => "delete",
            }
            .to_string())
        }
    }
}

/// Test-only broker property (also accepted as a topic config, for one topic): on a start after an unclean shutdown, truncate every log to its
/// last flush, as if the machine had lost its page cache (`kill -9` keeps it). Issue 4's
/// fault knob for reproducing the seeds' "unclean shutdown with data loss" with real processes.
pub const TEST_LOSE_UNFLUSHED_KEY: &str = "keel.test.lose.unflushed.data.on.unclean.start";

/// Topic defaults taken from broker properties, keyed by topic config name.
pub fn defaults_from_broker_props(
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut defaults = BTreeMap::new();
    for def in TOPIC_CONFIGS {
        for (synonym, factor) in def.broker_synonyms {
            let Some(raw) = props.get(*synonym) else {
                continue;
            };
            let scaled = if *factor == 1 {
                raw.clone()
            } else {
                let v: i64 = raw.trim().parse().map_err(|e: std::num::ParseIntError| {
                    ConfigError::InvalidValue {
                        key: synonym.to_string(),
                        value: raw.clone(),
                        reason: e.to_string(),
                    }
                })?;
                v.saturating_mul(*factor).to_string()
            };
            let value =
                validate_kind(def.kind, &scaled).map_err(|reason| ConfigError::InvalidValue {
                    key: synonym.to_string(),
                    value: raw.clone(),
                    reason,
                })?;
            defaults.insert(def.name.to_string(), value);
            break;
        }
    }
    if let Some(raw) = props.get(TEST_LOSE_UNFLUSHED_KEY) {
        let value =
            validate_kind(Kind::Boolean, raw).map_err(|reason| ConfigError::InvalidValue {
                key: TEST_LOSE_UNFLUSHED_KEY.to_string(),
                value: raw.clone(),
                reason,
            })?;
        defaults.insert(TEST_LOSE_UNFLUSHED_KEY.to_string(), value);
    }
    Ok(defaults)
}

/// Where a resolved value came from (DescribeConfigs `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Topic,
    StaticBroker,
    Default,
}

impl Source {
    /// Kafka's `ConfigSource` code.
    pub fn code(self) -> i8 {
        match self {
            Source::Topic => 1,
            Source::StaticBroker => 4,
            Source::Default => 5,
        }
    }
}

/// A topic's configuration: its overrides on top of the broker's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveTopicConfig {
    values: BTreeMap<&'static str, (String, Source)>,
    /// The broker's test-only fault knob ([`TEST_LOSE_UNFLUSHED_KEY`]).
    test_lose_unflushed: bool,
}

impl EffectiveTopicConfig {
    pub fn resolve(
        overrides: &BTreeMap<String, String>,
        broker_defaults: &BTreeMap<String, String>,
    ) -> EffectiveTopicConfig {
        let mut values = BTreeMap::new();
        for def in TOPIC_CONFIGS {
            let resolved = if let Some(v) = overrides.get(def.name) {
                Some((v.clone(), Source::Topic))
            } else if let Some(v) = broker_defaults.get(def.name) {
                Some((v.clone(), Source::StaticBroker))
            } else {
                def.default.map(|v| (v.to_string(), Source::Default))
            };
            if let Some(r) = resolved {
                values.insert(def.name, r);
            }
        }
        let mut config = EffectiveTopicConfig {
            values,
            test_lose_unflushed: overrides
                .get(TEST_LOSE_UNFLUSHED_KEY)
                .or_else(|| broker_defaults.get(TEST_LOSE_UNFLUSHED_KEY))
                .is_some_and(|v| v == "true"),
        };
        if !config.values.contains_key("unclean.recovery.strategy") {
            let derived = if config.bool("unclean.leader.election.enable") {
                "proactive"
            } else {
                "balanced"
            };
            config.values.insert(
                "unclean.recovery.strategy",
                (derived.to_string(), Source::Default),
            );
        }
        config
    }

    /// Whether the test-only fault knob is on for this topic's logs.
    pub fn test_lose_unflushed(&self) -> bool {
        self.test_lose_unflushed
    }

    /// Every resolved entry, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = (&'static str, &str, Source)> + '_ {
        self.values.iter().map(|(k, (v, s))| (*k, v.as_str(), *s))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|(v, _)| v.as_str())
    }

    fn long(&self, name: &str) -> i64 {
        // Values were validated on the way in; a parse failure here is a programming error.
        self.get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("topic config {name} is not a validated number"))
    }

    fn ratio(&self, name: &str) -> f64 {
        self.get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("topic config {name} is not a validated ratio"))
    }

    /// Whether the topic is compacted (`cleanup.policy` holds `compact`).
    pub fn is_compacted(&self) -> bool {
        self.get("cleanup.policy")
            .is_some_and(|p| p.split(',').any(|w| w == "compact"))
    }

    fn bool(&self, name: &str) -> bool {
        self.get(name) == Some("true")
    }

    pub fn min_insync_replicas(&self) -> i32 {
        i32::try_from(self.long("min.insync.replicas")).unwrap_or(i32::MAX)
    }

    pub fn max_message_bytes(&self) -> i32 {
        i32::try_from(self.long("max.message.bytes")).unwrap_or(i32::MAX)
    }

    pub fn unclean_recovery_strategy(&self) -> UncleanRecoveryStrategy {
        self.get("unclean.recovery.strategy")
            .and_then(UncleanRecoveryStrategy::parse)
            .unwrap_or(UncleanRecoveryStrategy::Balanced)
    }

    /// The storage settings of this topic's partitions.
    pub fn log_config(&self) -> keel_log::LogConfig {
        let positive = |v: i64| {
            if v < 0 || v == i64::MAX {
                None
            } else {
                Some(v)
            }
        };
        keel_log::LogConfig {
            segment_bytes: self.long("segment.bytes").max(1) as u64,
            segment_ms: self.long("segment.ms").max(1),
            retention_ms: positive(self.long("retention.ms")),
            retention_bytes: positive(self.long("retention.bytes")).map(|v| v as u64),
            flush_messages: positive(self.long("flush.messages")).map(|v| v as u64),
            flush_ms: positive(self.long("flush.ms")),
            index_interval_bytes: self.long("index.interval.bytes").max(0) as u64,
            max_message_bytes: self.long("max.message.bytes").max(0) as u64,
            timestamp_type: if self.get("message.timestamp.type") == Some("LogAppendTime") {
                keel_log::TimestampType::LogAppendTime
            } else {
                keel_log::TimestampType::CreateTime
            },
            cleanup_policy: keel_log::CleanupPolicy {
                delete: self
                    .get("cleanup.policy")
                    .is_none_or(|p| p.split(',').any(|w| w == "delete")),
                compact: self.is_compacted(),
            },
            delete_retention_ms: self.long("delete.retention.ms").max(0),
            min_compaction_lag_ms: self.long("min.compaction.lag.ms").max(0),
            max_compaction_lag_ms: self.long("max.compaction.lag.ms").max(1),
            min_cleanable_dirty_ratio: self.ratio("min.cleanable.dirty.ratio"),
            test_record_flushed_offset: self.test_lose_unflushed,
            ..keel_log::LogConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: broker synonyms with unit factors become topic defaults; topic overrides win.
    #[test]
    fn resolves_defaults_and_overrides() {
        let mut props = BTreeMap::new();
        props.insert("log.retention.hours".to_string(), "2".to_string());
        props.insert(
            "unclean.leader.election.enable".to_string(),
            "true".to_string(),
        );
        let defaults = defaults_from_broker_props(&props).unwrap();
        assert_eq!(defaults["retention.ms"], "7200000");
        let mut overrides = BTreeMap::new();
        overrides.insert("segment.bytes".to_string(), "1024".to_string());
        let config = EffectiveTopicConfig::resolve(&overrides, &defaults);
        assert_eq!(config.get("retention.ms"), Some("7200000"));
        assert_eq!(config.get("segment.bytes"), Some("1024"));
        assert_eq!(config.get("min.insync.replicas"), Some("1"));
        // KIP-966: unset strategy + unclean.leader.election.enable=true means Proactive.
        assert_eq!(
            config.unclean_recovery_strategy(),
            UncleanRecoveryStrategy::Proactive
        );
    }

    // Shows: values are validated per kind; unknown names are refused.
    #[test]
    fn validates() {
        assert_eq!(validate("retention.ms", " 100 ").unwrap(), "100");
        assert!(validate("retention.ms", "-2").is_err());
        assert!(validate("min.insync.replicas", "0").is_err());
        assert_eq!(
            validate("message.timestamp.type", "logappendtime").unwrap(),
            "LogAppendTime"
        );
        assert_eq!(validate("cleanup.policy", "Compact").unwrap(), "compact");
        assert_eq!(
            validate("cleanup.policy", "delete, compact").unwrap(),
            "compact,delete"
        );
        assert!(validate("cleanup.policy", "compact,shred").is_err());
        assert!(validate("cleanup.policy", "").is_err());
        assert_eq!(
            validate("min.cleanable.dirty.ratio", "0.25").unwrap(),
            "0.25"
        );
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate("no.such.config", "1").is_err());
    }
}
