//! Config names (Kafka's), defaults, validation, and how a partition's effective min ISR and
//! unclean-recovery strategy are resolved from topic and cluster configs.

use std::collections::BTreeMap;

use crate::errors::{ApiError, ErrorCode};
use crate::types::UncleanRecoveryStrategy;

/// `min.insync.replicas` (topic config, cluster default).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Kafka's default for `min.insync.replicas`.
pub const DEFAULT_MIN_INSYNC_REPLICAS: usize = 1;
/// `unclean.leader.election.enable` (topic config, cluster default).
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";
/// KIP-966 `unclean.recovery.strategy` (topic config, cluster default).
pub const UNCLEAN_RECOVERY_STRATEGY: &str = "unclean.recovery.strategy";
/// The feature that turns ELR on (level 1, the default) or off (level 0 = classic mode).
pub const ELR_FEATURE: &str = "eligible.leader.replicas.enable";
/// Kafka's `broker.session.timeout.ms` default.
pub const DEFAULT_BROKER_SESSION_TIMEOUT_MS: u64 = 9_000;
/// KIP-966: "we don't want to make a separate config for it so just make the fixed time of 5
/// seconds" — how long a Proactive recovery collects answers.
pub const PROACTIVE_RECOVERY_WAIT_MS: u64 = 5_000;
/// How long the recovery manager waits before asking silent replicas again.
pub const RECOVERY_RETRY_MS: u64 = 5_000;

/// Checks a config value for the names this crate interprets; other names are accepted as is.
pub fn validate(name: &str, value: Option<&str>) -> Result<(), ApiError> {
    let Some(value) = value else {
        return Ok(());
    };
    let ok = match name {
        MIN_INSYNC_REPLICAS => value.parse::<usize>().is_ok_and(|n| n >= 1),
        UNCLEAN_LEADER_ELECTION_ENABLE => parse_bool(value).is_some(),
        UNCLEAN_RECOVERY_STRATEGY => UncleanRecoveryStrategy::parse(value).is_some(),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::InvalidConfig,
            format!("invalid value {value:?} for {name}"),
        ))
    }
}

/// Parses Kafka's boolean config values (`true` / `false`, any case).
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

fn lookup<'a>(
    name: &str,
    topic: &'a BTreeMap<String, String>,
    cluster: &'a BTreeMap<String, String>,
) -> Option<&'a str> {
    topic
        .get(name)
        .or_else(|| cluster.get(name))
        .map(String::as_str)
}

/// `min.insync.replicas` as configured (topic, else cluster, else Kafka's default).
pub fn configured_min_isr(
    topic: &BTreeMap<String, String>,
    cluster: &BTreeMap<String, String>,
) -> usize {
    lookup(MIN_INSYNC_REPLICAS, topic, cluster)
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(DEFAULT_MIN_INSYNC_REPLICAS)
}

/// KIP-966: "the effective min.insync.replicas will be min(min.insync.replicas, replication
/// factor)" (and at least 1).
pub fn effective_min_isr(configured: usize, replication_factor: usize) -> usize {
    configured.min(replication_factor).max(1)
}

/// The unclean-recovery strategy: `unclean.recovery.strategy` (topic, else cluster); when not
/// set, KIP-966's mapping "If `unclean.leader.election.enable` is true, `unclean.recovery.strategy`
/// will be set to Proactive. If false, Balanced" (Kafka's default for it is false).
pub fn resolve_strategy(
    topic: &BTreeMap<String, String>,
    cluster: &BTreeMap<String, String>,
) -> UncleanRecoveryStrategy {
    if let Some(strategy) =
        lookup(UNCLEAN_RECOVERY_STRATEGY, topic, cluster).and_then(UncleanRecoveryStrategy::parse)
    {
        return strategy;
    }
    match lookup(UNCLEAN_LEADER_ELECTION_ENABLE, topic, cluster).and_then(parse_bool) {
        Some(true) => UncleanRecoveryStrategy::Proactive,
        Some(false) | None => UncleanRecoveryStrategy::Balanced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn strategy_resolution_table() {
        // KIP-966 "Unclean recovery": unclean.leader.election.enable true -> Proactive, false -> Balanced;
        // the explicit strategy wins, the topic wins over the cluster.
        type Pairs = &'static [(&'static str, &'static str)];
        let rows: &[(Pairs, Pairs, UncleanRecoveryStrategy)] = &[
            (&[], &[], UncleanRecoveryStrategy::Balanced),
            (
                &[(UNCLEAN_LEADER_ELECTION_ENABLE, "true")],
                &[],
                UncleanRecoveryStrategy::Proactive,
            ),
            (
                &[],
                &[(UNCLEAN_LEADER_ELECTION_ENABLE, "true")],
                UncleanRecoveryStrategy::Proactive,
            ),
            (
                &[(UNCLEAN_LEADER_ELECTION_ENABLE, "false")],
                &[(UNCLEAN_LEADER_ELECTION_ENABLE, "true")],
                UncleanRecoveryStrategy::Balanced,
            ),
            (
                &[(UNCLEAN_LEADER_ELECTION_ENABLE, "true")],
                &[(UNCLEAN_RECOVERY_STRATEGY, "manual")],
                UncleanRecoveryStrategy::Manual,
            ),
            (
                &[(UNCLEAN_RECOVERY_STRATEGY, "Balanced")],
                &[(UNCLEAN_RECOVERY_STRATEGY, "proactive")],
                UncleanRecoveryStrategy::Balanced,
            ),
        ];
        for (topic, cluster, expected) in rows {
            assert_eq!(
                resolve_strategy(&map(topic), &map(cluster)),
                *expected,
                "topic {topic:?} cluster {cluster:?}"
            );
        }
    }

    #[test]
    fn effective_min_isr_is_capped_by_replication_factor() {
        // KIP-966 "Compatibility": effective min ISR = min(min.insync.replicas, replication factor).
        assert_eq!(effective_min_isr(3, 2), 2);
        assert_eq!(effective_min_isr(2, 3), 2);
        assert_eq!(effective_min_isr(0, 3), 1);
        assert_eq!(configured_min_isr(&map(&[]), &map(&[])), 1);
        assert_eq!(
            configured_min_isr(
                &map(&[(MIN_INSYNC_REPLICAS, "3")]),
                &map(&[(MIN_INSYNC_REPLICAS, "2")])
            ),
            3
        );
    }

    #[test]
    fn validation_rejects_bad_values_with_invalid_config() {
        // Kafka's AlterConfigs answers INVALID_CONFIG for values that do not parse.
        for (name, value) in [
            (MIN_INSYNC_REPLICAS, "0"),
            (MIN_INSYNC_REPLICAS, "two"),
            (UNCLEAN_RECOVERY_STRATEGY, "aggressive"),
            (UNCLEAN_LEADER_ELECTION_ENABLE, "yes"),
        ] {
            assert_eq!(
                validate(name, Some(value)).unwrap_err().code,
                ErrorCode::InvalidConfig
            );
        }
        assert!(validate(MIN_INSYNC_REPLICAS, Some("2")).is_ok());
        assert!(validate(UNCLEAN_RECOVERY_STRATEGY, None).is_ok());
    }
}
