//! Client quotas (KIP-546): Kafka's entities and keys, the checks of Kafka's
//! `ClientQuotaControlManager`, the filter of `ClientQuotasImage.describe`, and the resolution
//! of the quota that applies to a client (Kafka's `ClientQuotaManager` default callback).
//!
//! An entity names a `user` and/or a `client-id`, or an `ip`; a name of `None` is that type's
//! default. The quota of a (user, client-id) pair is the most specific one set, in Kafka's order:
//! `users/<user>/clients/<client-id>`, `users/<user>/clients/<default>`, `users/<user>`,
//! `users/<default>/clients/<client-id>`, `users/<default>/clients/<default>`,
//! `users/<default>`, `clients/<client-id>`, `clients/<default>`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::errors::{ApiError, ErrorCode};

/// The `user` entity type.
pub const USER: &str = "user";
/// The `client-id` entity type.
pub const CLIENT_ID: &str = "client-id";
/// The `ip` entity type.
pub const IP: &str = "ip";

/// Bytes a second a client may produce (a whole number).
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Bytes a second a client may fetch (a whole number).
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// The share of one request-handling thread a client may use, in percent.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
/// Partitions a second a client may create or delete.
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
/// Connections a second an IP may open (a whole number).
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// How long a name or key may be (bytes).
pub const FIELD_BYTES_MAX: usize = 4096;

/// The value type of a quota key (Kafka's `ConfigDef` type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueType {
    Long,
    Int,
    Double,
}

/// The keys Kafka accepts for an entity of users and/or client ids, or of an ip.
fn key_type(ip: bool, key: &str) -> Option<ValueType> {
    match (ip, key) {
        (false, PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE) => Some(ValueType::Long),
        (false, REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE) => Some(ValueType::Double),
        (true, CONNECTION_CREATION_RATE) => Some(ValueType::Int),
        _ => None,
    }
}

/// A quota entity: each type at most once; a `None` name is the type's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity(pub BTreeMap<String, Option<String>>);

impl QuotaEntity {
    /// The entity of `(type, name)` pairs (the last of a repeated type wins: check with
    /// [`validate_entity`] first).
    pub fn of<'a>(parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> QuotaEntity {
        QuotaEntity(
            parts
                .into_iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
        )
    }

    /// The name of `entity_type`: `None` when the entity has no such type, `Some(None)` for
    /// its default.
    pub fn get(&self, entity_type: &str) -> Option<Option<&str>> {
        self.0.get(entity_type).map(Option::as_deref)
    }

    fn is_ip(&self) -> bool {
        self.0.contains_key(IP)
    }
}

impl fmt::Display for QuotaEntity {
    /// Kafka's `ClientQuotaEntity` shape: `user=alice, client-id=<default>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(t, n)| format!("{t}={}", n.as_deref().unwrap_or("<default>")))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// A quota value. Compared (and kept in records) by its bits, so records stay `Eq`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

/// Checks an entity as Kafka's `validateEntity` and `configKeysForEntityType` do, given as the
/// request's (type, name) pairs: not empty, each type once, only `user`, `client-id` and `ip`,
/// no empty name, `ip` alone and an address (or the default).
pub fn validate_entity(parts: &[(String, Option<String>)]) -> Result<QuotaEntity, ApiError> {
    if parts.is_empty() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let mut entity = BTreeMap::new();
    for (entity_type, name) in parts {
        if entity.contains_key(entity_type) {
            return Err(invalid(format!(
                "Invalid client quota entity, duplicate entity entry {entity_type}"
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&entity_type.as_str()) {
            return Err(invalid(format!(
                "Unhandled client quota entity type: {entity_type}"
            )));
        }
        if name.as_deref() == Some("") {
            return Err(invalid(format!("Empty {entity_type} not supported")));
        }
        if name.as_ref().is_some_and(|n| n.len() > FIELD_BYTES_MAX) {
            return Err(invalid(format!(
                "The {entity_type} name is longer than {FIELD_BYTES_MAX} bytes"
            )));
        }
        entity.insert(entity_type.clone(), name.clone());
    }
    if entity.contains_key(IP) {
        if entity.len() > 1 {
            return Err(invalid(
                "Invalid quota entity combination, IP entity should not be combined with User \
                 or ClientId",
            ));
        }
        if let Some(Some(ip)) = entity.get(IP) {
            if ip.parse::<core::net::IpAddr>().is_err() {
                return Err(invalid(format!(
                    "{ip} is not a valid IP or resolvable host."
                )));
            }
        }
    }
    Ok(QuotaEntity(entity))
}

/// Checks one key and value for `entity` as Kafka's `validateQuotaKeyValue`: a key of the
/// entity's kind, a value above 0, a whole number for the integral keys, within the type.
pub fn validate_value(entity: &QuotaEntity, key: &str, value: f64) -> Result<(), ApiError> {
    let Some(value_type) = key_type(entity.is_ip(), key) else {
        return Err(invalid(format!("Invalid configuration key {key}")));
    };
    // NaN fails this too.
    if value.is_nan() || value <= 0.0 || value.is_infinite() {
        return Err(invalid(format!("Quota {key} must be greater than 0")));
    }
    let whole = |limit: f64, type_name: &str| {
        if value > limit {
            return Err(invalid(format!(
                "Proposed value for {key} is too large for {type_name}."
            )));
        }
        if (value % 1.0).abs() > 1e-6 {
            return Err(invalid(format!("{key} cannot be a fractional value.")));
        }
        Ok(())
    };
    match value_type {
        ValueType::Double => Ok(()),
        ValueType::Int => whole(f64::from(i32::MAX), "an INT"),
        ValueType::Long => whole(i64::MAX as f64, "a LONG"),
    }
}

/// Every quota set, by entity, then key.
pub type ClientQuotas = BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>;

/// One component of a DescribeClientQuotas filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// Entities whose name of the type is this one (`None`: the default).
    Exact(Option<String>),
    /// Entities with any name of the type (the default included).
    Specified,
}

/// Kafka's `ClientQuotasImage.matches`: every component's type is in the entity with the
/// right name; with `strict`, the entity has no other type.
pub fn matches(entity: &QuotaEntity, filter: &[(String, Match)], strict: bool) -> bool {
    if strict && entity.0.len() != filter.len() {
        return false;
    }
    filter
        .iter()
        .all(|(entity_type, m)| match (entity.0.get(entity_type), m) {
            (None, _) => false,
            (Some(name), Match::Exact(want)) => name == want,
            (Some(_), Match::Specified) => true,
        })
}

/// The quota of `key` that applies to `user` (the principal's name) with `client_id`, and the
/// (user, client-id) pair whose usage it limits — Kafka's metric tags: clients share a quota
/// set for their user alone, or for their client id alone, and each (user, client-id) has its
/// own under a quota of a pair. `None` when no quota of `key` applies.
pub fn resolve(
    quotas: &ClientQuotas,
    key: &str,
    user: &str,
    client_id: &str,
) -> Option<(f64, (String, String))> {
    let at = |user_name: Option<Option<&str>>, client: Option<Option<&str>>| {
        let mut entity = BTreeMap::new();
        if let Some(u) = user_name {
            entity.insert(USER.to_string(), u.map(str::to_string));
        }
        if let Some(c) = client {
            entity.insert(CLIENT_ID.to_string(), c.map(str::to_string));
        }
        quotas
            .get(&QuotaEntity(entity))
            .and_then(|keys| keys.get(key))
            .map(|v| v.0)
    };
    // Which of the pair the usage is counted for, at each level.
    #[derive(Clone, Copy)]
    enum Tags {
        Pair,
        User,
        Client,
    }
    let (u, c) = (Some(user), Some(client_id));
    [
        (at(Some(u), Some(c)), Tags::Pair),
        (at(Some(u), Some(None)), Tags::Pair),
        (at(Some(u), None), Tags::User),
        (at(Some(None), Some(c)), Tags::Pair),
        (at(Some(None), Some(None)), Tags::Pair),
        (at(Some(None), None), Tags::User),
        (at(None, Some(c)), Tags::Client),
        (at(None, Some(None)), Tags::Client),
    ]
    .into_iter()
    .find_map(|(limit, tags)| {
        let tags = match tags {
            Tags::Pair => (user.to_string(), client_id.to_string()),
            Tags::User => (user.to_string(), String::new()),
            Tags::Client => (String::new(), client_id.to_string()),
        };
        limit.map(|l| (l, tags))
    })
}

/// The `connection_creation_rate` of `ip`: its own, else the ip default. An entity names its
/// address however it was written (`::1` and `0:0:0:0:0:0:0:1` are one address), as Kafka
/// resolves the name to an `InetAddress`; an IPv4 address mapped into IPv6 is the IPv4 one.
pub fn ip_connection_rate(quotas: &ClientQuotas, ip: core::net::IpAddr) -> Option<f64> {
    let ip = ip.to_canonical();
    let rate =
        |keys: &BTreeMap<String, QuotaValue>| keys.get(CONNECTION_CREATION_RATE).map(|v| v.0);
    let own = quotas.iter().find_map(|(entity, keys)| {
        let name = entity.get(IP)??;
        let addr = name.parse::<core::net::IpAddr>().ok()?;
        (entity.0.len() == 1 && addr.to_canonical() == ip)
            .then(|| rate(keys))
            .flatten()
    });
    own.or_else(|| quotas.get(&QuotaEntity::of([(IP, None)])).and_then(rate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(p: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        p.iter()
            .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
            .collect()
    }

    // Shows: entities are checked with Kafka's messages — empty, duplicate type, unknown type,
    // empty name, ip combined or not an address; user / client-id / both / ip / defaults pass.
    #[test]
    fn entities_are_checked_as_kafka_checks_them() {
        let err = |p: &[(&str, Option<&str>)]| validate_entity(&parts(p)).unwrap_err().message;
        assert_eq!(err(&[]), "Invalid empty client quota entity");
        assert_eq!(
            err(&[(USER, Some("a")), (USER, Some("b"))]),
            "Invalid client quota entity, duplicate entity entry user"
        );
        assert_eq!(
            err(&[("group", Some("g"))]),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(err(&[(USER, Some(""))]), "Empty user not supported");
        assert!(err(&[(IP, Some("1.2.3.4")), (USER, Some("a"))]).contains("IP entity"));
        assert!(err(&[(IP, Some("not-an-ip"))]).contains("is not a valid IP"));
        for ok in [
            vec![(USER, Some("alice"))],
            vec![(USER, None), (CLIENT_ID, Some("c"))],
            vec![(CLIENT_ID, None)],
            vec![(IP, Some("10.0.0.1"))],
            vec![(IP, Some("::1"))],
            vec![(IP, None)],
        ] {
            assert!(validate_entity(&parts(&ok)).is_ok(), "{ok:?}");
        }
    }

    // Shows: keys and values as Kafka's validateQuotaKeyValue: the keys of the entity's kind,
    // above 0, whole numbers for the LONG / INT keys, request_percentage fractional.
    #[test]
    fn keys_and_values_are_checked_as_kafka_checks_them() {
        let user = QuotaEntity::of([(USER, Some("a"))]);
        let ip = QuotaEntity::of([(IP, None)]);
        let err = |e: &QuotaEntity, k: &str, v: f64| validate_value(e, k, v).unwrap_err().message;
        assert!(validate_value(&user, PRODUCER_BYTE_RATE, 1048576.0).is_ok());
        assert!(validate_value(&user, REQUEST_PERCENTAGE, 12.5).is_ok());
        assert!(validate_value(&ip, CONNECTION_CREATION_RATE, 10.0).is_ok());
        assert_eq!(
            err(&user, CONNECTION_CREATION_RATE, 1.0),
            "Invalid configuration key connection_creation_rate"
        );
        assert_eq!(
            err(&ip, PRODUCER_BYTE_RATE, 1.0),
            "Invalid configuration key producer_byte_rate"
        );
        assert_eq!(
            err(&user, CONSUMER_BYTE_RATE, 0.0),
            "Quota consumer_byte_rate must be greater than 0"
        );
        assert_eq!(
            err(&user, CONSUMER_BYTE_RATE, f64::NAN),
            "Quota consumer_byte_rate must be greater than 0"
        );
        assert_eq!(
            err(&user, PRODUCER_BYTE_RATE, 1.5),
            "producer_byte_rate cannot be a fractional value."
        );
        assert_eq!(
            err(&ip, CONNECTION_CREATION_RATE, 3e9),
            "Proposed value for connection_creation_rate is too large for an INT."
        );
    }

    // Shows: the most specific quota applies, in Kafka's order of the eight levels, with the
    // (user, client-id) pair whose usage it limits.
    #[test]
    fn resolution_follows_kafkas_eight_levels() {
        let mut quotas = ClientQuotas::new();
        let mut set = |p: &[(&'static str, Option<&'static str>)], v: f64| {
            quotas
                .entry(QuotaEntity::of(p.iter().copied()))
                .or_default()
                .insert(PRODUCER_BYTE_RATE.to_string(), QuotaValue(v));
        };
        set(&[(CLIENT_ID, None)], 8.0);
        set(&[(CLIENT_ID, Some("c"))], 7.0);
        set(&[(USER, None)], 6.0);
        set(&[(USER, None), (CLIENT_ID, None)], 5.0);
        set(&[(USER, None), (CLIENT_ID, Some("c"))], 4.0);
        set(&[(USER, Some("u"))], 3.0);
        set(&[(USER, Some("u")), (CLIENT_ID, None)], 2.0);
        set(&[(USER, Some("u")), (CLIENT_ID, Some("c"))], 1.0);
        let pair = |u: &str, c: &str| (u.to_string(), c.to_string());
        let mut expected = vec![
            (1.0, pair("u", "c")),
            (2.0, pair("u", "c")),
            (3.0, pair("u", "")),
            (4.0, pair("u", "c")),
            (5.0, pair("u", "c")),
            (6.0, pair("u", "")),
            (7.0, pair("", "c")),
            (8.0, pair("", "c")),
        ];
        // Remove the most specific level each time: the next one applies.
        let levels: Vec<QuotaEntity> = {
            let mut by_value: Vec<(f64, QuotaEntity)> = quotas
                .iter()
                .map(|(e, k)| (k[PRODUCER_BYTE_RATE].0, e.clone()))
                .collect();
            by_value.sort_by(|a, b| a.0.total_cmp(&b.0));
            by_value.into_iter().map(|(_, e)| e).collect()
        };
        for level in levels {
            let want = expected.remove(0);
            assert_eq!(
                resolve(&quotas, PRODUCER_BYTE_RATE, "u", "c"),
                Some(want.clone()),
                "{level}"
            );
            quotas.remove(&level);
        }
        assert_eq!(resolve(&quotas, PRODUCER_BYTE_RATE, "u", "c"), None);
        assert_eq!(resolve(&quotas, CONSUMER_BYTE_RATE, "u", "c"), None);
    }

    // Shows: DescribeClientQuotas' filter as Kafka's: exact names (the default included),
    // any name of a type, and strict matching.
    #[test]
    fn filters_match_as_kafkas() {
        let pair = QuotaEntity::of([(USER, Some("u")), (CLIENT_ID, None)]);
        let user = QuotaEntity::of([(USER, Some("u"))]);
        let exact = |n: Option<&str>| Match::Exact(n.map(str::to_string));
        let f = |c: &[(&str, Match)]| -> Vec<(String, Match)> {
            c.iter().map(|(t, m)| (t.to_string(), m.clone())).collect()
        };
        assert!(matches(&pair, &f(&[(USER, exact(Some("u")))]), false));
        assert!(!matches(&pair, &f(&[(USER, exact(Some("u")))]), true));
        assert!(matches(&user, &f(&[(USER, exact(Some("u")))]), true));
        assert!(matches(&pair, &f(&[(CLIENT_ID, exact(None))]), false));
        assert!(!matches(&user, &f(&[(CLIENT_ID, Match::Specified)]), false));
        assert!(matches(&pair, &f(&[(CLIENT_ID, Match::Specified)]), false));
        assert!(matches(&user, &[], false));
        assert!(!matches(&user, &[], true));
    }

    // Shows: an ip's own connection_creation_rate wins over the ip default, whichever way either
    // address is written (IPv6 short or long, IPv4 mapped into IPv6); other ips get the default.
    #[test]
    fn ip_rates_match_addresses_however_written() {
        let mut quotas = ClientQuotas::new();
        let set = |quotas: &mut ClientQuotas, ip: Option<&str>, v: f64| {
            quotas
                .entry(QuotaEntity::of([(IP, ip)]))
                .or_default()
                .insert(CONNECTION_CREATION_RATE.to_string(), QuotaValue(v));
        };
        set(&mut quotas, Some("0:0:0:0:0:0:0:1"), 1.0);
        set(&mut quotas, Some("10.0.0.7"), 2.0);
        let ip = |s: &str| s.parse::<core::net::IpAddr>().unwrap();
        assert_eq!(ip_connection_rate(&quotas, ip("::1")), Some(1.0));
        assert_eq!(
            ip_connection_rate(&quotas, ip("::ffff:10.0.0.7")),
            Some(2.0)
        );
        assert_eq!(ip_connection_rate(&quotas, ip("10.0.0.8")), None);
        set(&mut quotas, None, 5.0);
        assert_eq!(ip_connection_rate(&quotas, ip("10.0.0.8")), Some(5.0));
        assert_eq!(ip_connection_rate(&quotas, ip("10.0.0.7")), Some(2.0));
    }
}
