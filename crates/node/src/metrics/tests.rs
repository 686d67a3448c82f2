//! Unit tests of the registry and its encoding (issue 7, "Metrics").

use std::collections::{BTreeMap, BTreeSet};

use super::*;

/// The value of the sample `series` (name with labels, exactly as encoded).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// How often each family's `# TYPE` line appears.
fn type_lines(text: &str) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            *counts.entry(rest).or_insert(0) += 1;
        }
    }
    counts
}

// Shows: two nodes in one registry are two series of one family each (labelled node_id), never
// two families of one name; counters get Prometheus' `_total` suffix; a node asking again gets
// its own series back.
#[test]
fn nodes_share_families_and_keep_their_series() {
    let metrics = Metrics::new();
    let one = metrics.broker(1);
    let two = metrics.broker(2);
    one.bytes_in.inc_by(100);
    two.bytes_in.inc_by(7);
    metrics.broker(1).bytes_in.inc_by(1);
    one.set_partition_counts(PartitionCounts {
        hosted: 3,
        led: 2,
        under_replicated: 1,
        under_min_isr: 0,
    });
    let text = metrics.encode();
    assert_eq!(
        sample(&text, "keel_bytes_in_total{node_id=\"1\"}"),
        Some(101.0)
    );
    assert_eq!(
        sample(&text, "keel_bytes_in_total{node_id=\"2\"}"),
        Some(7.0)
    );
    assert_eq!(sample(&text, "keel_leader_count{node_id=\"1\"}"), Some(2.0));
    assert_eq!(
        sample(
            &text,
            "keel_under_replicated_partitions_count{node_id=\"1\"}"
        ),
        Some(1.0)
    );
    assert!(
        text.contains("# TYPE keel_bytes_in_total counter"),
        "{text}"
    );
    for (family, count) in type_lines(&text) {
        assert_eq!(count, 1, "{family} listed {count} times:\n{text}");
    }
}

// Shows: the group gauges are one series per Kafka state name, set from a sweep's counts (a
// state the sweep no longer sees drops to 0; `Dead` is not reported); the cleaner's time is a
// float counter in seconds.
#[test]
fn group_gauges_follow_each_sweep() {
    let metrics = Metrics::new();
    let broker = metrics.broker(4);
    // GROUP_STATES: Empty, PreparingRebalance, CompletingRebalance, Stable.
    broker.set_group_counts([1, 0, 0, 2], 9);
    broker.set_group_counts([0, 1, 0, 3], 7);
    broker.cleaner.seconds.inc_by(0.25);
    let text = metrics.encode();
    let groups = |state: &str| {
        sample(
            &text,
            &format!("keel_group_count{{node_id=\"4\",state=\"{state}\"}}"),
        )
    };
    assert_eq!(groups("Stable"), Some(3.0), "{text}");
    assert_eq!(groups("PreparingRebalance"), Some(1.0));
    assert_eq!(groups("CompletingRebalance"), Some(0.0));
    assert_eq!(groups("Empty"), Some(0.0));
    assert_eq!(groups("Dead"), None);
    assert_eq!(
        sample(&text, "keel_group_offsets_count{node_id=\"4\"}"),
        Some(7.0)
    );
    assert_eq!(
        sample(&text, "keel_log_cleaner_seconds_total{node_id=\"4\"}"),
        Some(0.25)
    );
    for (family, count) in type_lines(&text) {
        assert_eq!(count, 1, "{family} listed {count} times:\n{text}");
    }
}

// Shows: request latency is a histogram per node, listener and API, named by Kafka's API name;
// keys that are neither Kafka's nor Keel's share one `unknown` series.
#[test]
fn request_latency_is_labelled_by_api() {
    let metrics = Metrics::new();
    let broker = metrics.requests(1, "broker");
    broker.observe(Some(0), 0.002);
    broker.observe(Some(0), 0.2);
    broker.observe(Some(keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY), 0.001);
    broker.observe(Some(12_345), 0.001);
    broker.observe(Some(-7), 0.001);
    broker.observe(None, 0.001);
    let text = metrics.encode();
    let produce = "node_id=\"1\",listener=\"broker\",api=\"Produce\"";
    assert_eq!(
        sample(
            &text,
            &format!("keel_request_latency_seconds_count{{{produce}}}")
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("keel_request_latency_seconds_bucket{{{produce},le=\"0.005\"}}")
        ),
        Some(1.0)
    );
    assert!(text.contains("api=\"GetReplicaLogInfo\""), "{text}");
    assert_eq!(
        sample(
            &text,
            "keel_request_latency_seconds_count{node_id=\"1\",listener=\"broker\",api=\"unknown\"}"
        ),
        Some(3.0)
    );
    assert_eq!(api_name(1), "Fetch");
    assert_eq!(api_name(75), "DescribeTopicPartitions");
}

// Shows: the controller gauges come from the published snapshot: the active controller reports
// partition state and electable_replicas_count per partition, a standby reports 0 and no
// per-partition series (KIP-966 "Metrics").
#[test]
fn controller_gauges_follow_the_snapshot() {
    let metrics = Metrics::new();
    let active = metrics.controller(100);
    let standby = metrics.controller(101);
    active.publish(ControllerSnapshot {
        active: true,
        partitions: 2,
        offline: 1,
        under_min_isr: 1,
        unclean_recovery: 1,
        paused: 0,
        live_brokers: 2,
        fenced_brokers: 1,
        electable: vec![
            ElectableReplicas {
                topic: "t".into(),
                partition: 0,
                count: 3,
            },
            ElectableReplicas {
                topic: "t".into(),
                partition: 1,
                count: 0,
            },
        ],
    });
    standby.publish(ControllerSnapshot::default());
    active.elr_elections.inc();
    let text = metrics.encode();
    assert_eq!(
        sample(&text, "keel_active_controller_count{node_id=\"100\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "keel_active_controller_count{node_id=\"101\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "keel_offline_partitions_count{node_id=\"100\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "keel_unclean_recovery_partitions_count{node_id=\"101\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "keel_electable_replicas_count{node_id=\"100\",topic=\"t\",partition=\"0\"}"
        ),
        Some(3.0),
        "{text}"
    );
    assert!(!text.contains("electable_replicas_count{node_id=\"101\""));
    assert_eq!(
        sample(&text, "keel_elr_elections_total{node_id=\"100\"}"),
        Some(1.0)
    );
    // The same node's handle again (a restarted controller) sees the same series.
    assert!(metrics.controller(100).snapshot().active);
    for (family, count) in type_lines(&text) {
        assert_eq!(count, 1, "{family} listed {count} times:\n{text}");
    }
}

// Shows: ISR shrinks and expansions are counted per committed change (one replacing another
// counts as both).
#[test]
fn counts_isr_changes() {
    let metrics = Metrics::new();
    let broker = metrics.broker(1);
    let set = |ids: &[i32]| ids.iter().copied().collect::<BTreeSet<i32>>();
    broker.count_isr_change(&set(&[1, 2, 3]), &set(&[1, 2]));
    broker.count_isr_change(&set(&[1, 2]), &set(&[1, 2, 3]));
    broker.count_isr_change(&set(&[1, 2]), &set(&[1, 3]));
    broker.count_isr_change(&set(&[1, 2]), &set(&[1, 2]));
    assert_eq!(broker.isr_shrinks.get(), 2);
    assert_eq!(broker.isr_expands.get(), 2);
}

// Shows: records and bytes of a fetch answer come from the batch headers.
#[test]
fn counts_batches() {
    let records: [(Option<&[u8]>, &[u8]); 3] = [(None, b"a"), (None, b"bb"), (None, b"c")];
    let batch = keel_log::plain_batch::build_batch(&records, 0);
    let mut two = batch.clone();
    two.extend_from_slice(&batch);
    assert_eq!(batch_totals(&two), (6, two.len() as u64));
    // A trailing partial header is not counted as records.
    two.extend_from_slice(&batch[..20]);
    assert_eq!(batch_totals(&two).0, 6);
    assert_eq!(batch_totals(&[]), (0, 0));
}
