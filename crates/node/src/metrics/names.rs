//! API names for the `api` label of `keel_request_latency_seconds`: Kafka's message names
//! (`Produce`, `Fetch`, ...) and Keel's private RPCs. Any other key is `unknown`, so a client
//! sending garbage keys cannot create series without bound.

use keel_wire::kafka_protocol::messages::ApiKey;
use keel_wire::keel_rpc;

/// The label of a key that is neither Kafka's nor Keel's.
pub const UNKNOWN_API: &str = "unknown";

/// Keel's private RPCs (`keel_wire::keel_rpc`).
const KEEL_APIS: [(i16, &str); 4] = [
    (keel_rpc::GET_REPLICA_LOG_INFO_KEY, "GetReplicaLogInfo"),
    (keel_rpc::RAFT_VOTE_KEY, "RaftVote"),
    (keel_rpc::RAFT_APPEND_ENTRIES_KEY, "RaftAppendEntries"),
    (keel_rpc::RAFT_SNAPSHOT_KEY, "RaftSnapshot"),
];

/// Kafka's APIs by key, named as in Kafka's message definitions. Built once: `ApiKey`'s
/// variant names are Kafka's (`Produce`, `DescribeTopicPartitions`, ...).
fn kafka_names() -> &'static std::collections::BTreeMap<i16, &'static str> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeMap<i16, &'static str>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        (0..=i16::from(u8::MAX))
            .filter_map(|key| {
                let api = ApiKey::try_from(key).ok()?;
                // One small string per Kafka API, made once for the process's lifetime.
                let name: &'static str = Box::leak(format!("{api:?}").into_boxed_str());
                Some((key, name))
            })
            .collect()
    })
}

/// The label for API key `key`.
pub fn api_name(key: i16) -> &'static str {
    if let Some((_, name)) = KEEL_APIS.iter().find(|(k, _)| *k == key) {
        return name;
    }
    kafka_names().get(&key).copied().unwrap_or(UNKNOWN_API)
}
