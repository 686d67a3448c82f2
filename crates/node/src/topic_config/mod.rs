//! Topic-level configuration: Kafka's names, broker-level synonyms, defaults and validation.
//!
//! Every topic config has a default that comes from the broker config (its *synonym*, e.g.
//! `log.retention.ms` for `retention.ms`): first the cluster-wide dynamic default (Kafka's
//! BROKER resource with an empty name, kept in the metadata log), then the broker's config
//! file, then Kafka's value. A topic stores only its overrides; [`EffectiveTopicConfig`]
//! resolves the rest.
//!
//! [`TOPIC_CONFIGS`] holds every topic config Kafka 4.x defines: Keel acts on most and accepts a
//! few without effect, each with its reason ([`Effect::Inert`], shown in DescribeConfigs'
//! documentation); any other name is refused as Kafka refuses it ("Unknown topic config name").

mod defs;

use std::collections::BTreeMap;

use keel_log::validate::{
    ProducerBatchRules, TopicCompression, CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY,
    CODEC_ZSTD,
};

use crate::config::{ConfigError, UncleanRecoveryStrategy};

pub use defs::{COMPRESSION_TYPES, TOPIC_CONFIGS};

/// How a value is checked (Kafka's `ConfigDef` type and validator).
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
    /// A 32-bit integer in `[min, max]`, or equal to `also` (gzip's -1).
    IntRange {
        min: i32,
        max: i32,
        also: Option<i32>,
    },
    Boolean,
    /// One of the listed words (case-insensitive; stored as listed).
    OneOf(&'static [&'static str]),
    /// A number in [0, 1] (`min.cleanable.dirty.ratio`).
    Ratio,
    /// `cleanup.policy`: a comma-separated list of `delete` and `compact` (stored as `delete`,
    /// `compact` or `compact,delete`).
    CleanupPolicy,
    /// The replication throttles: `*` or a comma-separated list of `partition:broker` (Kafka's
    /// `ThrottledReplicaListValidator`).
    ReplicaList,
}

impl Kind {
    /// Kafka's `DescribeConfigsResponse.ConfigType` code.
    pub fn config_type(self) -> i8 {
        match self {
            Kind::Boolean => 1,
            Kind::OneOf(_) => 2,
            Kind::Int { .. } | Kind::IntRange { .. } => 3,
            Kind::Long { .. } => 5,
            Kind::Ratio => 6,
            Kind::CleanupPolicy | Kind::ReplicaList => 7,
        }
    }
}

/// What Keel does with a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Validated, stored and acted on.
    Acted,
    /// Validated and stored (DescribeConfigs shows it), but it changes nothing in Keel: why.
    Inert(&'static str),
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
    pub effect: Effect,
    pub doc: &'static str,
}

impl TopicConfigDef {
    /// DescribeConfigs' documentation: what the config does, and for an inert one why Keel
    /// accepts it without effect.
    pub fn documentation(&self) -> String {
        match self.effect {
            Effect::Acted => self.doc.to_string(),
            Effect::Inert(why) => format!("{} Keel accepts it without effect: {why}", self.doc),
        }
    }
}

/// The definition of `name`, if it is a topic config.
pub fn definition(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Whether `key` is a broker-level synonym of some topic config.
pub fn is_broker_synonym(key: &str) -> bool {
    key == TEST_LOSE_UNFLUSHED_KEY || synonym_of(key).is_some()
}

/// The topic config `key` is a broker synonym of, with its unit factor.
pub fn synonym_of(key: &str) -> Option<(&'static TopicConfigDef, i64)> {
    TOPIC_CONFIGS.iter().find_map(|d| {
        d.broker_synonyms
            .iter()
            .find(|(s, _)| *s == key)
            .map(|(_, factor)| (d, *factor))
    })
}

/// Kafka's message for a name it does not know (`LogConfig.validateNames`).
pub fn unknown_name(name: &str) -> String {
    format!("Unknown topic config name: {name}")
}

/// Checks and normalizes `value` for topic config `name`; the error is the whole
/// `INVALID_CONFIG` message, worded as Kafka words it.
pub fn validate(name: &str, value: &str) -> Result<String, String> {
    if name == TEST_LOSE_UNFLUSHED_KEY {
        return validate_kind(Kind::Boolean, value).map_err(|reason| invalid(name, value, &reason));
    }
    let def = definition(name).ok_or_else(|| unknown_name(name))?;
    let normalized =
        validate_kind(def.kind, value).map_err(|reason| invalid(name, value, &reason))?;
    if name == REMOTE_STORAGE_ENABLE && normalized == "true" {
        // Kafka: LogConfig.validateRemoteStorageOnlyIfSystemEnabled.
        return Err(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be \
                    configured with remote log storage."
                .to_string(),
        );
    }
    Ok(normalized)
}

/// `remote.storage.enable`: `true` is refused (Keel has no tiered storage).
const REMOTE_STORAGE_ENABLE: &str = "remote.storage.enable";

fn invalid(name: &str, value: &str, reason: &str) -> String {
    format!("Invalid value {value} for configuration {name}: {reason}")
}

/// Checks the topic's configs together, as Kafka's `LogConfig.validateValues` does after each
/// one passed on its own: `effective` is the topic's resolved config.
pub fn validate_combination(effective: &EffectiveTopicConfig) -> Result<(), String> {
    let (min_lag, max_lag) = (
        effective.long("min.compaction.lag.ms"),
        effective.long("max.compaction.lag.ms"),
    );
    if min_lag > max_lag {
        return Err(format!(
            "conflict topic config setting min.compaction.lag.ms ({min_lag}) > \
             max.compaction.lag.ms ({max_lag})"
        ));
    }
    Ok(())
}

fn validate_kind(kind: Kind, value: &str) -> Result<String, String> {
    let value = value.trim();
    match kind {
        Kind::Long { min } => match value.parse::<i64>() {
            Ok(v) if v >= min => Ok(v.to_string()),
            Ok(_) => Err(format!("Value must be at least {min}")),
            Err(_) => Err("Not a number of type LONG".to_string()),
        },
        Kind::Int { min } => match value.parse::<i32>() {
            Ok(v) if v >= min => Ok(v.to_string()),
            Ok(_) => Err(format!("Value must be at least {min}")),
            Err(_) => Err("Not a number of type INT".to_string()),
        },
        Kind::IntRange { min, max, also } => match value.parse::<i32>() {
            Ok(v) if (min..=max).contains(&v) || also == Some(v) => Ok(v.to_string()),
            Ok(_) => Err(match also {
                Some(also) => format!("Value must be between {min} and {max} or equal to {also}"),
                None => format!("Value must be between {min} and {max}"),
            }),
            Err(_) => Err("Not a number of type INT".to_string()),
        },
        Kind::Boolean => match value.to_ascii_lowercase().as_str() {
            "true" => Ok("true".into()),
            "false" => Ok("false".into()),
            _ => Err("Expected value to be either true or false".to_string()),
        },
        Kind::OneOf(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(value))
            .map(|w| w.to_string())
            .ok_or_else(|| format!("String must be one of: {}", words.join(", "))),
        Kind::Ratio => match value.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(v.to_string()),
            Ok(_) => Err("Value must be between 0 and 1".to_string()),
            Err(_) => Err("Not a number of type DOUBLE".to_string()),
        },
        Kind::CleanupPolicy => {
            let (mut delete, mut compact) = (false, false);
            for word in value.split(',').map(str::trim) {
                match word.to_ascii_lowercase().as_str() {
                    "delete" => delete = true,
                    "compact" => compact = true,
                    _ => {
                        return Err(format!(
                        "Invalid value {word:?}: cleanup.policy is a list of delete and compact"
                    ))
                    }
                }
            }
            Ok(match (compact, delete) {
                (true, true) => "compact,delete",
                (true, false) => "compact",
                _ => "delete",
            }
            .to_string())
        }
        Kind::ReplicaList => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            let numbered = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let replica = |item: &&str| {
                item.is_empty()
                    || item
                        .split_once(':')
                        .is_some_and(|(p, b)| numbered(p) && numbered(b))
            };
            if items.concat() == "*" || items.iter().all(replica) {
                Ok(items.join(","))
            } else {
                Err(
                    "the value must be the literal '*' or a list of replicas in the following \
                     format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                        .to_string(),
                )
            }
        }
    }
}

/// Test-only broker property (also accepted as a topic config, for one topic): on a start after an unclean shutdown, truncate every log to its
/// last flush, as if the machine had lost its page cache (`kill -9` keeps it). Issue 4's
/// fault knob for reproducing the seeds' "unclean shutdown with data loss" with real processes.
pub const TEST_LOSE_UNFLUSHED_KEY: &str = "keel.test.lose.unflushed.data.on.unclean.start";

/// The value broker properties `props` give topic config `def`: its first synonym present,
/// scaled to the topic key's unit and validated. The synonym's name comes with the result.
fn synonym_value(
    def: &TopicConfigDef,
    props: &BTreeMap<String, String>,
) -> Option<(&'static str, Result<String, String>)> {
    def.broker_synonyms.iter().find_map(|(synonym, factor)| {
        let raw = props.get(*synonym)?;
        let scaled = if *factor == 1 {
            Ok(raw.clone())
        } else {
            raw.trim()
                .parse::<i64>()
                .map(|v| v.saturating_mul(*factor).to_string())
                .map_err(|e| e.to_string())
        };
        Some((*synonym, scaled.and_then(|v| validate_kind(def.kind, &v))))
    })
}

/// Topic defaults taken from the broker's config file, keyed by topic config name; a bad
/// value stops the broker, naming the broker key.
pub fn defaults_from_broker_props(
    props: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut defaults = BTreeMap::new();
    for def in TOPIC_CONFIGS {
        if let Some((synonym, value)) = synonym_value(def, props) {
            let value = value.map_err(|reason| ConfigError::InvalidValue {
                key: synonym.to_string(),
                value: props[synonym].clone(),
                reason,
            })?;
            defaults.insert(def.name.to_string(), value);
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

/// Topic defaults from the cluster-wide dynamic configs (Kafka's BROKER resource with an empty
/// name), keyed by topic config name: by broker synonym (`log.retention.ms`), as Kafka's
/// `DynamicLogConfig` reads them, or by the topic config's own name (Keel has always accepted
/// `min.insync.replicas`-style names there, which are mostly the same). Values were validated
/// when they were set; one that does not validate (written by an older version) is skipped.
pub fn cluster_defaults(cluster: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut defaults = BTreeMap::new();
    for def in TOPIC_CONFIGS {
        let by_synonym = synonym_value(def, cluster).and_then(|(_, v)| v.ok());
        let by_name = || {
            cluster
                .get(def.name)
                .and_then(|v| validate_kind(def.kind, v).ok())
        };
        if let Some(value) = by_synonym.or_else(by_name) {
            defaults.insert(def.name.to_string(), value);
        }
    }
    defaults
}

/// Checks a cluster-wide dynamic config (BROKER resource, empty name) that sets a topic
/// default: by a broker synonym or by the topic config's own name. `Ok(false)`: `name` sets no
/// topic default.
pub fn validate_cluster_default(name: &str, value: &str) -> Result<bool, String> {
    let (def, factor) = match (synonym_of(name), definition(name)) {
        (Some(found), _) => found,
        (None, Some(def)) => (def, 1),
        (None, None) => return Ok(false),
    };
    let scaled = if factor == 1 {
        value.to_string()
    } else {
        match value.trim().parse::<i64>() {
            Ok(v) => v.saturating_mul(factor).to_string(),
            Err(_) => return Err(invalid(name, value, "Not a number of type LONG")),
        }
    };
    validate_kind(def.kind, &scaled).map_err(|reason| invalid(name, value, &reason))?;
    Ok(true)
}

/// Where a resolved value came from (DescribeConfigs `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// DYNAMIC_TOPIC_CONFIG: the topic's own override.
    Topic,
    /// DYNAMIC_DEFAULT_BROKER_CONFIG: the cluster-wide dynamic default.
    DynamicDefaultBroker,
    /// STATIC_BROKER_CONFIG: the broker's config file.
    StaticBroker,
    /// DEFAULT_CONFIG: Kafka's default.
    Default,
}

impl Source {
    /// Kafka's `ConfigSource` code.
    pub fn code(self) -> i8 {
        match self {
            Source::Topic => 1,
            Source::DynamicDefaultBroker => 3,
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
    /// The topic's `overrides` over the cluster-wide dynamic defaults ([`cluster_defaults`])
    /// over the broker's static defaults ([`defaults_from_broker_props`]) over Kafka's.
    pub fn resolve(
        overrides: &BTreeMap<String, String>,
        cluster_defaults: &BTreeMap<String, String>,
        broker_defaults: &BTreeMap<String, String>,
    ) -> EffectiveTopicConfig {
        let mut values = BTreeMap::new();
        for def in TOPIC_CONFIGS {
            let resolved = if let Some(v) = overrides.get(def.name) {
                Some((v.clone(), Source::Topic))
            } else if let Some(v) = cluster_defaults.get(def.name) {
                Some((v.clone(), Source::DynamicDefaultBroker))
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

    /// Where `name`'s value came from.
    pub fn source(&self, name: &str) -> Option<Source> {
        self.values.get(name).map(|(_, s)| *s)
    }

    pub(crate) fn long(&self, name: &str) -> i64 {
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

    /// What a producer's batches are checked against and converted to
    /// ([`keel_log::validate`]).
    pub fn producer_batch_rules(&self) -> ProducerBatchRules {
        let level = |name: &str| Some(i32::try_from(self.long(name)).expect("a validated INT"));
        let compression = match self.get("compression.type") {
            Some("uncompressed") => TopicCompression::Codec {
                id: CODEC_NONE,
                level: None,
            },
            Some("gzip") => TopicCompression::Codec {
                id: CODEC_GZIP,
                level: level("compression.gzip.level"),
            },
            Some("snappy") => TopicCompression::Codec {
                id: CODEC_SNAPPY,
                level: None,
            },
            Some("lz4") => TopicCompression::Codec {
                id: CODEC_LZ4,
                level: level("compression.lz4.level"),
            },
            Some("zstd") => TopicCompression::Codec {
                id: CODEC_ZSTD,
                level: level("compression.zstd.level"),
            },
            _ => TopicCompression::Producer,
        };
        let log = self.log_config();
        ProducerBatchRules {
            compacted: self.is_compacted(),
            timestamp_type: log.timestamp_type,
            timestamp_before_max_ms: self.long("message.timestamp.before.max.ms"),
            timestamp_after_max_ms: self.long("message.timestamp.after.max.ms"),
            max_message_bytes: log.max_message_bytes,
            compression,
        }
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
            segment_jitter_ms: self.long("segment.jitter.ms").max(0),
            segment_index_bytes: self.long("segment.index.bytes").max(12) as u64,
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
        let config = EffectiveTopicConfig::resolve(&overrides, &BTreeMap::new(), &defaults);
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

    /// Every topic config Kafka 4.1 defines (`LogConfig.configNames()` of kafka-storage 4.1.0,
    /// internal ones left out), with its default and type as Kafka's DescribeConfigs reports them.
    const KAFKA_4_1: &[(&str, &str, i8)] = &[
        ("cleanup.policy", "delete", 7),
        ("compression.gzip.level", "-1", 3),
        ("compression.lz4.level", "9", 3),
        ("compression.type", "producer", 2),
        ("compression.zstd.level", "3", 3),
        ("delete.retention.ms", "86400000", 5),
        ("file.delete.delay.ms", "60000", 5),
        ("flush.messages", "9223372036854775807", 5),
        ("flush.ms", "9223372036854775807", 5),
        ("follower.replication.throttled.replicas", "", 7),
        ("index.interval.bytes", "4096", 3),
        ("leader.replication.throttled.replicas", "", 7),
        ("local.retention.bytes", "-2", 5),
        ("local.retention.ms", "-2", 5),
        ("max.compaction.lag.ms", "9223372036854775807", 5),
        ("max.message.bytes", "1048588", 3),
        ("message.timestamp.after.max.ms", "3600000", 5),
        ("message.timestamp.before.max.ms", "9223372036854775807", 5),
        ("message.timestamp.type", "CreateTime", 2),
        ("min.cleanable.dirty.ratio", "0.5", 6),
        ("min.compaction.lag.ms", "0", 5),
        ("min.insync.replicas", "1", 3),
        ("preallocate", "false", 1),
        ("remote.log.copy.disable", "false", 1),
        ("remote.log.delete.on.disable", "false", 1),
        ("remote.storage.enable", "false", 1),
        ("retention.bytes", "-1", 5),
        ("retention.ms", "604800000", 5),
        ("segment.bytes", "1073741824", 3),
        ("segment.index.bytes", "10485760", 3),
        ("segment.jitter.ms", "0", 5),
        ("segment.ms", "604800000", 5),
        ("unclean.leader.election.enable", "false", 1),
    ];

    // Shows: issue 20's "every topic config Kafka 4.x defines is accepted": each of Kafka 4.1's
    // is defined with Kafka's default (which validates) and type; the only other one is Keel's
    // KIP-966 unclean.recovery.strategy; the table is sorted and every inert config says why.
    #[test]
    fn every_kafka_topic_config_is_defined_with_kafkas_default() {
        for (name, default, config_type) in KAFKA_4_1 {
            let def = definition(name).unwrap_or_else(|| panic!("{name} is not defined"));
            assert_eq!(def.default, Some(*default), "{name}");
            assert_eq!(def.kind.config_type(), *config_type, "{name}");
            assert_eq!(validate(name, default).as_deref(), Ok(*default), "{name}");
        }
        let ours: Vec<&str> = TOPIC_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = ours.clone();
        sorted.sort_unstable();
        assert_eq!(ours, sorted);
        let extra: Vec<&str> = ours
            .iter()
            .filter(|n| !KAFKA_4_1.iter().any(|(k, _, _)| k == *n))
            .copied()
            .collect();
        assert_eq!(extra, ["unclean.recovery.strategy"]);
        for def in TOPIC_CONFIGS {
            assert!(!def.doc.is_empty(), "{}", def.name);
            if let Effect::Inert(why) = def.effect {
                assert!(def.documentation().contains(why), "{}", def.name);
            }
        }
    }

    // Shows: values are refused with Kafka's INVALID_CONFIG messages (as Kafka 4.1 words them
    // for the same CreateTopics, see test_configs_produce.py): unknown and removed names
    // (Kafka 4.0 removed message.format.version & co.), the KIP-390 level ranges, the codec
    // names, the replica-list format, remote.storage.enable=true without tiered storage.
    #[test]
    fn refuses_as_kafka_does() {
        let refused = |name: &str, value: &str| validate(name, value).unwrap_err();
        for name in [
            "nosuch.config",
            "message.format.version",
            "message.timestamp.difference.max.ms",
            "message.downconversion.enable",
        ] {
            assert_eq!(
                refused(name, "1"),
                format!("Unknown topic config name: {name}")
            );
        }
        assert_eq!(
            refused("compression.gzip.level", "0"),
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 \
             and 9 or equal to -1"
        );
        assert_eq!(
            refused("compression.lz4.level", "18"),
            "Invalid value 18 for configuration compression.lz4.level: Value must be between 1 \
             and 17"
        );
        assert!(refused("compression.zstd.level", "-131073").contains("between -131072 and 22"));
        assert_eq!(validate("compression.zstd.level", "-5").unwrap(), "-5");
        assert_eq!(
            refused("compression.type", "brotli"),
            "Invalid value brotli for configuration compression.type: String must be one of: \
             uncompressed, zstd, lz4, snappy, gzip, producer"
        );
        for codec in ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"] {
            assert_eq!(validate("compression.type", codec).unwrap(), codec);
        }
        assert_eq!(
            refused("remote.storage.enable", "true"),
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured \
             with remote log storage."
        );
        assert_eq!(validate("remote.storage.enable", "false").unwrap(), "false");
        for ok in ["*", "0:1,1:2", "", " 0:1 , 3:4"] {
            assert!(
                validate("leader.replication.throttled.replicas", ok).is_ok(),
                "{ok}"
            );
        }
        for bad in ["0-1", "0 : 1", "*,0:1", "a:1", "0:"] {
            assert!(
                refused("follower.replication.throttled.replicas", bad)
                    .contains("must be the literal '*'"),
                "{bad}"
            );
        }
        assert_eq!(
            refused("local.retention.ms", "-3"),
            "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"
        );
        assert!(
            refused("preallocate", "yes").ends_with("Expected value to be either true or false")
        );
        assert!(refused("segment.jitter.ms", "-1").ends_with("Value must be at least 0"));
        assert!(refused("segment.index.bytes", "11").ends_with("Value must be at least 12"));
        assert!(refused("message.timestamp.after.max.ms", "-1").ends_with("at least 0"));
    }

    // Shows: LogConfig.validateValues' cross-check — min.compaction.lag.ms above
    // max.compaction.lag.ms is refused with Kafka's message, whichever level set them.
    #[test]
    fn compaction_lags_are_checked_together() {
        let overrides = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let none = BTreeMap::new();
        let config = EffectiveTopicConfig::resolve(
            &overrides(&[
                ("min.compaction.lag.ms", "10"),
                ("max.compaction.lag.ms", "5"),
            ]),
            &none,
            &none,
        );
        assert_eq!(
            validate_combination(&config).unwrap_err(),
            "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"
        );
        let broker = overrides(&[("max.compaction.lag.ms", "5")]);
        let config = EffectiveTopicConfig::resolve(
            &overrides(&[("min.compaction.lag.ms", "10")]),
            &none,
            &broker,
        );
        assert!(validate_combination(&config).is_err());
        let config = EffectiveTopicConfig::resolve(
            &overrides(&[("min.compaction.lag.ms", "10")]),
            &none,
            &none,
        );
        assert!(validate_combination(&config).is_ok());
    }

    // Shows: the cluster-wide dynamic defaults (BROKER resource, empty name) set topic defaults
    // by broker synonym with its unit (log.retention.hours) or by the topic name, win over the
    // broker's file and lose to the topic's override, and report DYNAMIC_DEFAULT_BROKER_CONFIG.
    #[test]
    fn cluster_defaults_win_over_static_ones() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let cluster = cluster_defaults(&map(&[
            ("log.retention.hours", "3"),
            ("min.insync.replicas", "2"),
            ("log.segment.bytes", "not a number"),
            ("num.io.threads", "8"),
        ]));
        assert_eq!(
            cluster,
            map(&[("min.insync.replicas", "2"), ("retention.ms", "10800000")])
        );
        let file = defaults_from_broker_props(&map(&[
            ("log.retention.ms", "1000"),
            ("log.segment.bytes", "2048"),
            ("compression.type", "zstd"),
        ]))
        .unwrap();
        let config =
            EffectiveTopicConfig::resolve(&map(&[("min.insync.replicas", "3")]), &cluster, &file);
        assert_eq!(config.get("retention.ms"), Some("10800000"));
        assert_eq!(
            config.source("retention.ms"),
            Some(Source::DynamicDefaultBroker)
        );
        assert_eq!(Source::DynamicDefaultBroker.code(), 3);
        assert_eq!(config.get("segment.bytes"), Some("2048"));
        assert_eq!(config.source("segment.bytes"), Some(Source::StaticBroker));
        assert_eq!(config.get("min.insync.replicas"), Some("3"));
        assert_eq!(config.source("min.insync.replicas"), Some(Source::Topic));
        assert_eq!(config.source("flush.ms"), Some(Source::Default));
        assert_eq!(
            config.producer_batch_rules().compression,
            TopicCompression::Codec {
                id: CODEC_ZSTD,
                level: Some(3)
            }
        );
        assert_eq!(
            validate_cluster_default("log.retention.hours", "2"),
            Ok(true)
        );
        assert_eq!(validate_cluster_default("num.io.threads", "2"), Ok(false));
        assert!(validate_cluster_default("log.retention.hours", "-2")
            .unwrap_err()
            .contains("log.retention.hours"));
        assert!(validate_cluster_default("compression.type", "brotli").is_err());
    }

    // Shows: the configs Keel acts on reach the log and the producer checks — segment.jitter.ms,
    // segment.index.bytes, the KIP-937 bounds and each codec with its KIP-390 level (gzip -1 is
    // zlib's default, passed on as such).
    #[test]
    fn acted_on_configs_reach_the_log_and_the_producer_checks() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let none = BTreeMap::new();
        let config = EffectiveTopicConfig::resolve(
            &map(&[
                ("segment.jitter.ms", "500"),
                ("segment.index.bytes", "4096"),
                ("message.timestamp.before.max.ms", "7"),
                ("cleanup.policy", "compact"),
                ("max.message.bytes", "900"),
            ]),
            &none,
            &none,
        );
        let log = config.log_config();
        assert_eq!(
            (log.segment_jitter_ms, log.segment_index_bytes),
            (500, 4096)
        );
        let rules = config.producer_batch_rules();
        assert_eq!(
            rules,
            ProducerBatchRules {
                compacted: true,
                timestamp_type: keel_log::TimestampType::CreateTime,
                timestamp_before_max_ms: 7,
                timestamp_after_max_ms: 3_600_000,
                max_message_bytes: 900,
                compression: TopicCompression::Producer,
            }
        );
        for (codec, level_key, level, want) in [
            (
                "gzip",
                "compression.gzip.level",
                "-1",
                (CODEC_GZIP, Some(-1)),
            ),
            ("lz4", "compression.lz4.level", "17", (CODEC_LZ4, Some(17))),
            (
                "zstd",
                "compression.zstd.level",
                "-7",
                (CODEC_ZSTD, Some(-7)),
            ),
            (
                "snappy",
                "compression.zstd.level",
                "1",
                (CODEC_SNAPPY, None),
            ),
            (
                "uncompressed",
                "compression.gzip.level",
                "1",
                (CODEC_NONE, None),
            ),
        ] {
            let config = EffectiveTopicConfig::resolve(
                &map(&[("compression.type", codec), (level_key, level)]),
                &none,
                &none,
            );
            assert_eq!(
                config.producer_batch_rules().compression,
                TopicCompression::Codec {
                    id: want.0,
                    level: want.1
                },
                "{codec}"
            );
        }
    }
}
