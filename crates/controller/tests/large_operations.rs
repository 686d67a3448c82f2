//! Sizes a client chooses are bounded before any record is built, and a topic too large for one
//! batch of records is written batch by batch, invisible until complete (issue 19, "A controller
//! no single request can knock over"; Kafka's `QuorumController.MAX_RECORDS_PER_BATCH`).

use std::collections::{BTreeMap, BTreeSet};

use keel_controller::records::Record;
use keel_controller::types::*;
use keel_controller::*;

const CLUSTER: &str = "c1";

fn uuid(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(n)
}

fn commit<R>(c: &mut Controller, out: Output<R>) -> R {
    c.replay_all(&out.records)
        .expect("generated records replay");
    out.response
}

/// Three registered, unfenced brokers.
fn three_brokers() -> Controller {
    let mut c = Controller::new(ControllerConfig::new(CLUSTER));
    for b in 1..=3 {
        let req = RegisterBrokerRequest {
            broker: BrokerId(b),
            cluster_id: CLUSTER.to_string(),
            incarnation: IncarnationId(uuid(b as u128)),
            listeners: Vec::new(),
            rack: None,
            log_dirs: vec![DirectoryId(uuid(0xd000 + b as u128))],
            previous_broker_epoch: None,
        };
        let out = c.register_broker(&req, 0);
        commit(&mut c, out).expect("registered");
        let req = HeartbeatRequest {
            broker: BrokerId(b),
            broker_epoch: c.image().broker(BrokerId(b)).expect("registered").epoch,
            current_metadata_offset: c.image().last_applied(),
            want_fence: false,
            want_shutdown: false,
            lost_replicas: Vec::new(),
        };
        let out = c.heartbeat(&req, 0);
        commit(&mut c, out).expect("unfenced");
    }
    c
}

fn topic_request(name: &str, id: u128, assignment: Vec<Vec<BrokerId>>) -> CreateTopicRequest {
    CreateTopicRequest {
        name: name.to_string(),
        id: TopicId(uuid(id)),
        assignment,
        configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
    }
}

/// Creates `total` partitions of `name` batch by batch, as the shell does; returns the record
/// count of every batch and checks after each one whether the topic is visible yet.
fn create_in_batches(c: &mut Controller, name: &str, id: u128, total: u32) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut first = 0;
    while first < total {
        let count = topic_batch_partitions(first, total, 1);
        let assignment = c.assign_replicas_from(first, count, 3).expect("assignment");
        let out = c.create_topic_batch(&topic_request(name, id, assignment), first, total, 0);
        sizes.push(out.records.len());
        commit(c, out).expect("batch accepted");
        first += count;
        let visible = c.image().topic_id(name).is_some();
        assert_eq!(
            visible,
            first == total,
            "visible only once complete ({first}/{total})"
        );
    }
    sizes
}

// Shows: a 25,000-partition topic is written in batches of at most MAX_RECORDS_PER_BATCH records; it
// is invisible (no topic, no partitions, name taken) until the last one, then whole.
#[test]
fn a_large_topic_is_written_in_bounded_batches_and_appears_whole() {
    let mut c = three_brokers();
    let sizes = create_in_batches(&mut c, "big", 1, 25_000);
    assert!(
        sizes.iter().all(|n| *n <= MAX_RECORDS_PER_BATCH),
        "{sizes:?}"
    );
    assert_eq!(
        sizes.iter().sum::<usize>(),
        25_000 + 2,
        "topic, config, partitions"
    );
    assert_eq!(
        sizes.len(),
        (25_000 + 2usize).div_ceil(MAX_RECORDS_PER_BATCH)
    );
    let id = c.image().topic_id("big").expect("complete");
    let topic = c.image().topic(id).expect("visible");
    assert_eq!(topic.partitions.len(), 25_000);
    assert_eq!(
        topic.configs.get("retention.ms").map(String::as_str),
        Some("1000")
    );
    assert!(c.image().pending_topics().is_empty());
    assert_eq!(c.image().partitions().count(), 25_000);
}

// Shows: while pending, a topic's name is taken (TOPIC_ALREADY_EXISTS), it is in no reader's
// view, a snapshot keeps it pending, and abandoning it removes it; a batch after that fails
// instead of adding partitions to nothing.
#[test]
fn a_pending_topic_is_invisible_survives_a_snapshot_and_can_be_abandoned() {
    let mut c = three_brokers();
    let total = 15_000;
    let count = topic_batch_partitions(0, total, 1);
    let assignment = c.assign_replicas_from(0, count, 3).expect("assignment");
    let out = c.create_topic_batch(&topic_request("big", 1, assignment), 0, total, 0);
    assert!(matches!(out.records[0], Record::PendingTopic(_)));
    commit(&mut c, out).expect("first batch");
    assert_eq!(c.image().topic_id("big"), None);
    assert_eq!(c.image().partitions().count(), 0);
    let again = topic_request("big", 2, vec![vec![BrokerId(1)]]);
    assert_eq!(
        c.validate_create_topic(&again).unwrap_err().code,
        ErrorCode::TopicAlreadyExists
    );

    let end = c.next_offset();
    let restored = ClusterImage::from_snapshot(end, &c.image().to_snapshot()).expect("loads");
    assert_eq!(restored.pending_topics(), c.image().pending_topics());
    assert_eq!(restored.topic_id("big"), None);

    let keep: BTreeSet<TopicId> = BTreeSet::from([TopicId(uuid(1))]);
    let out = c.abandon_pending_topics(&keep, 0);
    assert!(out.records.is_empty(), "a creation in progress is kept");
    let out = c.abandon_pending_topics(&BTreeSet::new(), 0);
    assert_eq!(commit(&mut c, out), vec!["big".to_string()]);
    assert!(c.image().pending_topics().is_empty());

    let rest = c
        .assign_replicas_from(count, total - count, 3)
        .expect("assignment");
    let out = c.create_topic_batch(&topic_request("big", 1, rest), count, total, 0);
    assert!(out.records.is_empty());
    assert_eq!(
        out.response.unwrap_err().code,
        ErrorCode::UnknownTopicOrPartition
    );
}

// Shows: counts near 2^31 and oversized increases are refused before anything is built:
// INVALID_PARTITIONS for a count no topic may have, POLICY_VIOLATION (Kafka's message) for more
// new partitions than one CreatePartitions may add (KAFKA-19673), also when only validating.
#[test]
fn create_partitions_counts_are_bounded_first() {
    let mut c = three_brokers();
    let assignment = c.assign_replicas(1, 3).expect("assignment");
    let out = c.create_topic(&topic_request("t", 1, assignment), 0);
    commit(&mut c, out).expect("created");
    let topic = TopicId(uuid(1));
    let grow = |count: u32| CreatePartitionsRequest {
        topic,
        count,
        assignment: None,
    };
    let error = c
        .validate_create_partitions(&grow(i32::MAX as u32))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidPartitions);
    assert!(
        error.message.contains("at most 1000000"),
        "{}",
        error.message
    );
    let out = c.create_partitions(&grow(i32::MAX as u32), 0);
    assert!(out.records.is_empty());
    assert_eq!(out.response.unwrap_err().code, ErrorCode::InvalidPartitions);
    let too_many = 1 + MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS + 1;
    let error = c.validate_create_partitions(&grow(too_many)).unwrap_err();
    assert_eq!(error.code, ErrorCode::PolicyViolation);
    assert!(error.message.starts_with(EXCESSIVE_PARTITIONS));
    let out = c.create_partitions(&grow(1 + MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS), 0);
    assert_eq!(commit(&mut c, out), Ok(()));
    assert_eq!(c.image().topic(topic).expect("t").partitions.len(), 10_001);
}

// Shows: a manual assignment naming a million replicas for one partition (more than there are
// brokers) is INVALID_REPLICA_ASSIGNMENT at once, its message bounded.
#[test]
fn hostile_manual_assignments_are_refused_at_once() {
    let c = three_brokers();
    let replicas: Vec<BrokerId> = (0..1_000_000).map(BrokerId).collect();
    let error = c
        .validate_create_topic(&topic_request("t", 1, vec![replicas]))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidReplicaAssignment);
    assert!(error.message.len() < 400, "{}", error.message);
    let error = c
        .validate_create_topic(&topic_request("t", 1, vec![vec![BrokerId(1), BrokerId(1)]]))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidReplicaAssignment);
    let error = c
        .validate_create_topic(&topic_request("t", 1, vec![vec![BrokerId(9)]]))
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidReplicaAssignment);
}
