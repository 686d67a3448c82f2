//! Broker lifecycle over the crash-simulating in-memory storage: clean-shutdown detection by
//! broker epoch (KIP-966 "Detection of an unclean shutdown") and recovery of flushed data.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use keel_log::plain_batch::build_batch;
use keel_log::storage::{MemStorage, Storage};
use keel_log::{LogDir, Offset};
use keel_node::broker::{Broker, PreviousShutdown};
use keel_node::clock::Clock;
use keel_node::config::BrokerConfig;
use uuid::Uuid;

#[derive(Debug, Default)]
struct FixedClock(AtomicI64);

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn config() -> BrokerConfig {
    let mut props = BTreeMap::new();
    props.insert("node.id".to_string(), "7".to_string());
    props.insert("log.dirs".to_string(), "/data/a,/data/b".to_string());
    props.insert(
        "listeners".to_string(),
        "PLAINTEXT://127.0.0.1:0".to_string(),
    );
    BrokerConfig::from_properties(&props).unwrap()
}

fn format(storage: &Arc<MemStorage>) {
    for dir in ["/data/a", "/data/b"] {
        LogDir::format(
            storage.clone(),
            Path::new(dir),
            "cluster-x",
            7,
            Uuid::new_v4(),
        )
        .unwrap();
    }
}

fn open(storage: &Arc<MemStorage>) -> Broker {
    let storage: Arc<dyn Storage> = storage.clone();
    Broker::open(
        config(),
        storage,
        Arc::new(FixedClock(AtomicI64::new(1_000))),
    )
    .unwrap()
}

fn produce(broker: &Broker, topic: &str, partition: i32, count: usize) {
    let partition = broker.partition(topic, partition).unwrap();
    for i in 0..count {
        let value = format!("value-{i}");
        let batch = build_batch(&[(None, value.as_bytes())], 1_000);
        partition.append_as_leader(&batch, 1_000).unwrap();
    }
}

// Shows: an orderly shutdown writes the clean-shutdown file with the broker epoch and the next
// start detects it (recovery skipped) and registers a new, larger broker epoch.
#[test]
fn clean_shutdown_is_detected_by_broker_epoch() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let broker = open(&storage);
    assert_eq!(broker.previous_shutdown, PreviousShutdown::Unclean);
    let first_epoch = broker.broker_epoch;
    broker
        .create_topic("t", Some(3), None, &BTreeMap::new(), false)
        .unwrap();
    produce(&broker, "t", 1, 10);
    broker.shutdown().unwrap();
    drop(broker);

    let broker = open(&storage);
    assert_eq!(
        broker.previous_shutdown,
        PreviousShutdown::Clean {
            broker_epoch: first_epoch
        }
    );
    assert!(broker.broker_epoch > first_epoch);
    let partition = broker.partition("t", 1).unwrap();
    assert_eq!(partition.high_watermark(), Offset(10));
    // The file is consumed at startup: a crash now must count as unclean.
    storage.crash();
    let broker = open(&storage);
    assert_eq!(broker.previous_shutdown, PreviousShutdown::Unclean);
}

// Shows: after a crash, data that was fsynced (flush.messages=1) survives and the log accepts
// new appends at the right offset; the topic metadata survives too.
#[test]
fn crash_keeps_flushed_records() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let broker = open(&storage);
    let mut configs = BTreeMap::new();
    configs.insert("flush.messages".to_string(), "1".to_string());
    broker
        .create_topic("durable", Some(2), None, &configs, false)
        .unwrap();
    produce(&broker, "durable", 0, 25);
    drop(broker);
    storage.crash();

    let broker = open(&storage);
    assert_eq!(broker.previous_shutdown, PreviousShutdown::Unclean);
    let partition = broker.partition("durable", 0).unwrap();
    assert_eq!(partition.offsets().unwrap().2, Offset(25));
    produce(&broker, "durable", 0, 1);
    assert_eq!(partition.offsets().unwrap().2, Offset(26));
}

// Shows: with Kafka's default flush policy (never fsync), a crash that loses the page cache
// loses unflushed records on a single broker — which is exactly why replication (and KIP-966)
// matter; the log recovers to a consistent prefix rather than failing.
#[test]
fn crash_without_flush_recovers_a_consistent_prefix() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let broker = open(&storage);
    broker
        .create_topic("lazy", Some(1), None, &BTreeMap::new(), false)
        .unwrap();
    produce(&broker, "lazy", 0, 5);
    drop(broker);
    storage.crash();
    let broker = open(&storage);
    let partition = broker.partition("lazy", 0).unwrap();
    let (start, high_watermark, end) = partition.offsets().unwrap();
    assert_eq!(start, Offset(0));
    assert_eq!(end, Offset(0), "nothing was fsynced");
    assert_eq!(high_watermark, end);
}

// Shows: a log directory formatted for another node is refused with an error naming both ids.
#[test]
fn refuses_a_directory_of_another_node() {
    let storage = Arc::new(MemStorage::new());
    LogDir::format(
        storage.clone(),
        Path::new("/data/a"),
        "cluster-x",
        8,
        Uuid::new_v4(),
    )
    .unwrap();
    LogDir::format(
        storage.clone(),
        Path::new("/data/b"),
        "cluster-x",
        7,
        Uuid::new_v4(),
    )
    .unwrap();
    let storage: Arc<dyn Storage> = storage;
    let err = Broker::open(config(), storage, Arc::new(FixedClock::default())).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains('7') && text.contains('8'), "{text}");
}

// Shows: topic operations validate like Kafka (names, duplicates, partition growth).
#[test]
fn topic_operations_validate() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let broker = open(&storage);
    assert!(broker
        .create_topic("bad name", None, None, &BTreeMap::new(), false)
        .is_err());
    assert!(broker
        .create_topic("..", None, None, &BTreeMap::new(), false)
        .is_err());
    broker
        .create_topic("a.b", Some(1), None, &BTreeMap::new(), false)
        .unwrap();
    // '.' and '_' collide in Kafka's metric names.
    assert!(broker
        .create_topic("a_b", Some(1), None, &BTreeMap::new(), false)
        .is_err());
    assert!(broker
        .create_topic("a.b", Some(1), None, &BTreeMap::new(), false)
        .is_err());
    assert!(broker.create_partitions("a.b", 1, false).is_err());
    broker.create_partitions("a.b", 4, false).unwrap();
    assert!(broker.partition("a.b", 3).is_some());
    let mut bad = BTreeMap::new();
    bad.insert("retention.ms".to_string(), "soon".to_string());
    assert!(broker.set_topic_configs("a.b", bad, false).is_err());
    broker.delete_topic("a.b").unwrap();
    assert!(broker.partition("a.b", 0).is_none());
    assert!(broker.topic("a.b").is_none());
}

// Shows (regression, review finding): deleting a topic drops it from the checkpoints at once, so
// a recreated topic of the same name does not inherit the old log start offset after a crash —
// which used to hide every record of the new topic.
#[test]
fn recreated_topic_does_not_inherit_checkpoints() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let broker = open(&storage);
    let mut configs = BTreeMap::new();
    configs.insert("flush.messages".to_string(), "1".to_string());
    broker
        .create_topic("t", Some(1), None, &configs, false)
        .unwrap();
    produce(&broker, "t", 0, 50);
    {
        let partition = broker.partition("t", 0).unwrap();
        let mut log = partition.lock_log().unwrap();
        log.increment_log_start_offset(Offset(44)).unwrap();
    }
    broker.checkpoint().unwrap();
    broker.delete_topic("t").unwrap();
    broker
        .create_topic("t", Some(1), None, &configs, false)
        .unwrap();
    produce(&broker, "t", 0, 10);
    drop(broker);
    storage.crash();

    let broker = open(&storage);
    let partition = broker.partition("t", 0).unwrap();
    assert_eq!(
        partition.offsets().unwrap(),
        (Offset(0), Offset(10), Offset(10))
    );
}

// Shows (regression, review finding): a directory left behind by an earlier partition of the same
// name (a crash between deleting the topic and removing its files) is set aside, never served as
// the new topic's data.
#[test]
fn leftover_partition_directory_is_never_reused() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    {
        let dir = LogDir::open(storage.clone(), Path::new("/data/a"), None, 7).unwrap();
        let tp = keel_log::TopicPartition::new("t", 0);
        let mut log = dir
            .create_log(&tp, keel_log::LogConfig::default(), 0)
            .unwrap();
        let batch = build_batch(&[(None, b"old".as_slice())], 0);
        log.append_as_leader(&batch, keel_log::LeaderEpoch(0), 0)
            .unwrap();
        log.close(0).unwrap();
    }
    let broker = open(&storage);
    broker
        .create_topic("t", Some(1), None, &BTreeMap::new(), false)
        .unwrap();
    let partition = broker.partition("t", 0).unwrap();
    assert_eq!(
        partition.offsets().unwrap().2,
        Offset(0),
        "old records must not reappear"
    );
    let names: Vec<String> = storage
        .list_dir(Path::new("/data/a"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("t-0.") && n.ends_with("-stray")),
        "{names:?}"
    );

    // And a deleted topic's directory is gone, not set aside.
    broker.delete_topic("t").unwrap();
    let names: Vec<String> = storage
        .list_dir(Path::new("/data/a"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(
        !names.iter().any(|n| n == "t-0" || n.ends_with("-delete")),
        "{names:?}"
    );
}

// Shows: the test-only fault knob (issue 4) makes a restart after an unclean stop lose exactly
// what was never flushed, even though the (simulated) page cache kept it — the "unclean shutdown
// with data loss" of the KIP-966 motivation — and it does nothing after a clean shutdown.
#[test]
fn fault_knob_loses_unflushed_records_after_an_unclean_stop() {
    let storage = Arc::new(MemStorage::new());
    format(&storage);
    let knob_config = || {
        let mut props = BTreeMap::new();
        props.insert("node.id".to_string(), "7".to_string());
        props.insert("log.dirs".to_string(), "/data/a,/data/b".to_string());
        props.insert(
            keel_node::topic_config::TEST_LOSE_UNFLUSHED_KEY.to_string(),
            "true".to_string(),
        );
        BrokerConfig::from_properties(&props).unwrap()
    };
    let open_with_knob = || {
        let storage: Arc<dyn Storage> = storage.clone();
        Broker::open(
            knob_config(),
            storage,
            Arc::new(FixedClock(AtomicI64::new(1_000))),
        )
        .unwrap()
    };
    let broker = open_with_knob();
    let mut durable = BTreeMap::new();
    durable.insert("flush.messages".to_string(), "1".to_string());
    broker
        .create_topic("durable", Some(1), None, &durable, false)
        .unwrap();
    broker
        .create_topic("lazy", Some(1), None, &BTreeMap::new(), false)
        .unwrap();
    produce(&broker, "durable", 0, 5);
    produce(&broker, "lazy", 0, 5);
    drop(broker); // kill -9: no clean shutdown, but the storage keeps every byte

    let broker = open_with_knob();
    assert_eq!(broker.previous_shutdown, PreviousShutdown::Unclean);
    let end = |b: &Broker, t: &str| b.partition(t, 0).unwrap().offsets().unwrap().2;
    assert_eq!(end(&broker, "durable"), Offset(5));
    assert_eq!(
        end(&broker, "lazy"),
        Offset(0),
        "unflushed records are dropped"
    );
    produce(&broker, "lazy", 0, 3);
    broker.shutdown().unwrap();
    drop(broker);

    let broker = open_with_knob();
    assert!(matches!(
        broker.previous_shutdown,
        PreviousShutdown::Clean { .. }
    ));
    assert_eq!(
        end(&broker, "lazy"),
        Offset(3),
        "a clean shutdown flushed everything"
    );
}
