//! Helpers shared by the crate's unit tests.

use std::collections::BTreeMap;

/// A properties map (what a config file parses into) from `key, value` pairs.
pub(crate) fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
