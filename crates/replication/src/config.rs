//! Configuration with Kafka's names and defaults, and the limits this crate chooses.

/// `min.insync.replicas` (topic config).
pub const MIN_INSYNC_REPLICAS: &str = "min.insync.replicas";
/// Kafka's default `min.insync.replicas`.
pub const DEFAULT_MIN_INSYNC_REPLICAS: usize = 1;
/// `replica.lag.time.max.ms` (broker config): a follower not caught up for longer leaves the ISR.
pub const REPLICA_LAG_TIME_MAX_MS: &str = "replica.lag.time.max.ms";
/// Kafka's default `replica.lag.time.max.ms`.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: u64 = 30_000;
/// Wait before resending an AlterPartition that failed with a retriable error. Kafka's
/// `retry.backoff.ms` default (100 ms).
pub const DEFAULT_ALTER_PARTITION_RETRY_BACKOFF_MS: u64 = 100;
/// `replica.fetch.backoff.ms`: a follower waits this long after a failed fetch (Kafka: 1000).
pub const DEFAULT_REPLICA_FETCH_BACKOFF_MS: u64 = 1_000;

/// The per-partition replication settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// `min.insync.replicas`; the effective value is min(this, replication factor).
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: u64,
    /// Backoff before an AlterPartition is resent after a retriable error.
    pub alter_partition_retry_backoff_ms: u64,
    /// `replica.fetch.backoff.ms`.
    pub replica_fetch_backoff_ms: u64,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            min_insync_replicas: DEFAULT_MIN_INSYNC_REPLICAS,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            alter_partition_retry_backoff_ms: DEFAULT_ALTER_PARTITION_RETRY_BACKOFF_MS,
            replica_fetch_backoff_ms: DEFAULT_REPLICA_FETCH_BACKOFF_MS,
        }
    }
}

/// The effective min ISR: min(`min.insync.replicas`, replication factor), and at least 1
/// (KIP-966: "the effective min.insync.replicas will be min(min.insync.replicas, replication
/// factor)"; Kafka's `Partition.effectiveMinIsr`).
pub fn effective_min_isr(min_insync_replicas: usize, replication_factor: usize) -> usize {
    min_insync_replicas.min(replication_factor).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_min_isr_is_capped_by_replication_factor() {
        // KIP-966 "Additional High Watermark advance requirement": min(min ISR, RF).
        assert_eq!(effective_min_isr(2, 3), 2);
        assert_eq!(effective_min_isr(5, 3), 3);
        assert_eq!(effective_min_isr(0, 3), 1);
        assert_eq!(effective_min_isr(1, 1), 1);
    }
}
