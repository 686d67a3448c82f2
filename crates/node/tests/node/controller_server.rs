//! The controller role over real TCP (issue 4 "Controller node"): brokers register, heartbeat,
//! follow the metadata log with Fetch and change ISRs with AlterPartition, all with Kafka's own
//! RPCs against `keel_node::controller_server::run` on 127.0.0.1, with the metadata log on disk.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_controller::records::Record;
use keel_controller::types::MetadataOffset;
use keel_log::storage::{OsStorage, Storage};
use keel_log::LogDir;
use keel_node::client::Connection;
use keel_node::clock::SystemClock;
use keel_node::controller_server::{self, ControllerServerConfig, ControllerServerError};
use keel_node::metadata_log::{decode_metadata_batches, LocalMetadataLog};
use keel_wire::kafka_protocol::messages::alter_partition_request::{
    BrokerState, PartitionData as AlterPartitionData, TopicData as AlterTopicData,
};
use keel_wire::kafka_protocol::messages::broker_registration_request::Listener as WireListener;
use keel_wire::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use keel_wire::kafka_protocol::messages::*;
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CLUSTER: &str = "ctl-test-cluster";
const NODE: i32 = 3000;

type Conn = Connection<keel_node::net::BoxStream>;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A running controller.
struct Running {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ControllerServerError>>,
}

impl Running {
    /// Stops it the way a crash would: the task is dropped mid-flight.
    async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Orderly stop.
    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

fn format(dir: &Path) {
    let storage: Arc<dyn Storage> = Arc::new(OsStorage::new());
    LogDir::format(storage, dir, CLUSTER, NODE, Uuid::new_v4()).unwrap();
}

async fn start(dir: &Path, extra: &[(&str, &str)]) -> Running {
    let mut props: BTreeMap<String, String> = [
        ("node.id", "3000".to_string()),
        ("process.roles", "controller".to_string()),
        ("listeners", "CONTROLLER://127.0.0.1:0".to_string()),
        ("metadata.log.dir", dir.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (k, v) in extra {
        props.insert(k.to_string(), v.to_string());
    }
    start_config(ControllerServerConfig::from_properties(&props).unwrap()).await
}

async fn start_config(config: ControllerServerConfig) -> Running {
    let shutdown = CancellationToken::new();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(controller_server::run(
        config,
        Arc::new(OsStorage::new()),
        Arc::new(SystemClock),
        shutdown.clone(),
        move |addr| {
            let _ = ready_tx.send(addr);
        },
    ));
    let addr = ready_rx.await.expect("controller started");
    Running {
        addr,
        shutdown,
        task,
    }
}

async fn connect(addr: SocketAddr) -> Conn {
    Connection::connect(
        &keel_node::net::TcpNetwork,
        &addr.to_string(),
        "controller-test",
    )
    .await
    .unwrap()
}

fn incarnation(broker: i32) -> Uuid {
    Uuid::from_u128(0x1000 + broker as u128)
}

fn log_dir_id(broker: i32) -> Uuid {
    Uuid::from_u128(0xd000 + broker as u128)
}

async fn register(conn: &mut Conn, broker: i32, previous: i64) -> BrokerRegistrationResponse {
    let request = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(broker))
        .with_cluster_id(s(CLUSTER))
        .with_incarnation_id(incarnation(broker))
        .with_listeners(vec![WireListener::default()
            .with_name(s("PLAINTEXT"))
            .with_host(s("127.0.0.1"))
            .with_port(9000 + broker as u16)
            .with_security_protocol(0)])
        .with_log_dirs(vec![log_dir_id(broker)])
        .with_previous_broker_epoch(previous);
    conn.call_version(ApiKey::BrokerRegistration, 4, &request)
        .await
        .unwrap()
}

async fn heartbeat(
    conn: &mut Conn,
    broker: i32,
    epoch: i64,
    offset: i64,
) -> BrokerHeartbeatResponse {
    let request = BrokerHeartbeatRequest::default()
        .with_broker_id(BrokerId(broker))
        .with_broker_epoch(epoch)
        .with_current_metadata_offset(offset);
    conn.call_version(ApiKey::BrokerHeartbeat, 1, &request)
        .await
        .unwrap()
}

fn metadata_fetch(from: i64, max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(8 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s("__cluster_metadata")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(from)
                .with_partition_max_bytes(8 << 20)])])
}

/// Every committed record from `from`, as a broker following the log sees them, and the
/// high watermark.
async fn fetch_records(conn: &mut Conn, from: i64) -> (Vec<(MetadataOffset, Record)>, i64) {
    let mut records = Vec::new();
    let mut next = from;
    loop {
        let response: FetchResponse = conn
            .call_version(ApiKey::Fetch, 12, &metadata_fetch(next, 0, 0))
            .await
            .unwrap();
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        assert_eq!(partition.current_leader.leader_id.0, NODE);
        assert_eq!(partition.current_leader.leader_epoch, 1);
        let bytes = partition.records.clone().unwrap_or_default();
        let batch = decode_metadata_batches(&bytes, MetadataOffset(next)).unwrap();
        if batch.is_empty() {
            return (records, partition.high_watermark);
        }
        next = batch.last().unwrap().0 .0 + 1;
        records.extend(batch);
    }
}

/// Registers brokers 1..=3 and heartbeats them until unfenced; returns their epochs.
async fn three_live_brokers(conn: &mut Conn) -> Vec<i64> {
    let mut epochs = Vec::new();
    for broker in 1..=3 {
        let response = register(conn, broker, -1).await;
        assert_eq!(response.error_code, 0);
        epochs.push(response.broker_epoch);
    }
    for (index, epoch) in epochs.iter().enumerate() {
        let broker = index as i32 + 1;
        let (_, hw) = fetch_records(conn, 0).await;
        let answer = heartbeat(conn, broker, *epoch, hw - 1).await;
        assert_eq!(answer.error_code, 0);
        assert!(answer.is_caught_up);
        assert!(!answer.is_fenced, "broker {broker} unfenced once caught up");
    }
    epochs
}

async fn create_topic(
    conn: &mut Conn,
    name: &str,
    partitions: i32,
    rf: i16,
) -> CreateTopicsResponse {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(s("min.insync.replicas"))
                .with_value(Some(s("2")))])]);
    conn.call_version(ApiKey::CreateTopics, 7, &request)
        .await
        .unwrap()
}

/// The last Partition / PartitionChange state of the first partition, by replaying the fetched
/// records the way a broker does.
fn image_of(records: &[(MetadataOffset, Record)]) -> keel_controller::ClusterImage {
    let mut image = keel_controller::ClusterImage::new();
    for (offset, record) in records {
        image.replay(*offset, record).unwrap();
    }
    image
}

// Shows: brokers register with epoch = offset of their RegisterBroker record, are unfenced by a
// heartbeat once caught up, a topic with RF 3 is assigned over the three unfenced brokers, and a
// broker fetching `__cluster_metadata` from 0 decodes exactly the records in the controller's
// log (issue 4: "brokers talk to it with Kafka's own RPCs"; KRaft's metadata fetch).
#[tokio::test]
async fn brokers_register_unfence_create_a_topic_and_follow_the_log() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut conn = connect(running.addr).await;
    assert!(conn.version(ApiKey::BrokerRegistration, 0, 4).unwrap() == 4);
    assert!(
        conn.version(ApiKey::Produce, 3, 11).is_err(),
        "no client data APIs"
    );

    let epochs = three_live_brokers(&mut conn).await;
    // Offset 0 is the `transaction.version` FeatureLevelRecord the controller finalizes first.
    assert_eq!(
        epochs,
        vec![1, 2, 3],
        "epoch = offset of the RegisterBroker record"
    );
    let created = create_topic(&mut conn, "orders", 1, 3).await;
    let topic = &created.topics[0];
    assert_eq!(topic.error_code, 0, "{:?}", topic.error_message);
    assert_eq!(topic.num_partitions, 1);
    assert_eq!(topic.replication_factor, 3);
    assert!(!topic.topic_id.is_nil());

    let (records, hw) = fetch_records(&mut conn, 0).await;
    assert_eq!(records.len() as i64, hw);
    for (index, epoch) in epochs.iter().enumerate() {
        match &records[*epoch as usize].1 {
            Record::RegisterBroker(r) => {
                assert_eq!(r.broker.0, index as i32 + 1);
                assert_eq!(r.epoch.0, *epoch);
                assert!(r.fenced);
            }
            other => panic!("expected a registration, got {other:?}"),
        }
    }
    let image = image_of(&records);
    let id = image.topic_id("orders").unwrap();
    assert_eq!(id.0, topic.topic_id);
    let partition = image
        .partition(keel_controller::types::TopicPartition::new(id, 0))
        .unwrap();
    assert_eq!(partition.replicas.len(), 3);
    assert_eq!(partition.isr.len(), 3);
    assert_eq!(image.live_brokers().len(), 3);

    // A fetch from the middle starts there; the controller's own log holds the same records.
    let (tail, _) = fetch_records(&mut conn, 2).await;
    assert_eq!(tail[..], records[2..]);
    running.stop().await;
    let log = LocalMetadataLog::open(Arc::new(OsStorage::new()), dir.path(), 0).unwrap();
    assert_eq!(log.read(MetadataOffset(0), 1 << 20).unwrap(), records);
}

fn alter_partition(
    broker: i32,
    broker_epoch: i64,
    topic: Uuid,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[(i32, i64)],
) -> AlterPartitionRequest {
    AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker))
        .with_broker_epoch(broker_epoch)
        .with_topics(vec![AlterTopicData::default()
            .with_topic_id(topic)
            .with_partitions(vec![AlterPartitionData::default()
                .with_partition_index(0)
                .with_leader_epoch(leader_epoch)
                .with_partition_epoch(partition_epoch)
                .with_leader_recovery_state(0)
                .with_new_isr_with_epochs(
                    isr.iter()
                        .map(|(b, e)| {
                            BrokerState::default()
                                .with_broker_id(BrokerId(*b))
                                .with_broker_epoch(*e)
                        })
                        .collect(),
                )])])
}

// Shows: AlterPartition v3 from the leader with a stale broker epoch is STALE_BROKER_EPOCH
// (top level), a valid ISR shrink commits and answers the new ISR and partition epoch, and a
// member with a wrong broker epoch is INELIGIBLE_REPLICA (KIP-903, the KAFKA-14139 fix).
#[tokio::test]
async fn alter_partition_is_fenced_by_broker_epochs() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut conn = connect(running.addr).await;
    let epochs = three_live_brokers(&mut conn).await;
    let topic = create_topic(&mut conn, "t", 1, 3).await.topics[0].topic_id;
    let (records, _) = fetch_records(&mut conn, 0).await;
    let image = image_of(&records);
    let p = image
        .partition(keel_controller::types::TopicPartition::new(
            keel_controller::types::TopicId(topic),
            0,
        ))
        .unwrap()
        .clone();
    let leader = p.leader.unwrap().0;
    let epoch_of = |b: i32| epochs[(b - 1) as usize];
    let others: Vec<i32> = p
        .replicas
        .iter()
        .map(|b| b.0)
        .filter(|b| *b != leader)
        .collect();

    let stale = alter_partition(
        leader,
        epoch_of(leader) + 100,
        topic,
        0,
        0,
        &[(leader, epoch_of(leader))],
    );
    let answer: AlterPartitionResponse = conn
        .call_version(ApiKey::AlterPartition, 3, &stale)
        .await
        .unwrap();
    assert_eq!(answer.error_code, 77, "STALE_BROKER_EPOCH");

    let wrong_member = alter_partition(
        leader,
        epoch_of(leader),
        topic,
        0,
        0,
        &[
            (leader, epoch_of(leader)),
            (others[0], epoch_of(others[0]) + 7),
        ],
    );
    let answer: AlterPartitionResponse = conn
        .call_version(ApiKey::AlterPartition, 3, &wrong_member)
        .await
        .unwrap();
    assert_eq!(
        answer.topics[0].partitions[0].error_code, 107,
        "INELIGIBLE_REPLICA"
    );

    let shrink = alter_partition(
        leader,
        epoch_of(leader),
        topic,
        0,
        0,
        &[(leader, epoch_of(leader)), (others[0], epoch_of(others[0]))],
    );
    let answer: AlterPartitionResponse = conn
        .call_version(ApiKey::AlterPartition, 3, &shrink)
        .await
        .unwrap();
    assert_eq!(answer.error_code, 0);
    let result = &answer.topics[0].partitions[0];
    assert_eq!(result.error_code, 0);
    let mut isr: Vec<i32> = result.isr.iter().map(|b| b.0).collect();
    isr.sort();
    let mut expected = vec![leader, others[0]];
    expected.sort();
    assert_eq!(isr, expected);
    assert_eq!(result.leader_id.0, leader);
    assert_eq!(
        result.leader_epoch, 0,
        "an ISR change keeps the leader epoch"
    );
    assert_eq!(result.partition_epoch, 1);

    // Brokers see the same change in the metadata log.
    let (records, _) = fetch_records(&mut conn, 0).await;
    assert!(matches!(
        records.last().unwrap().1,
        Record::PartitionChange(_)
    ));
    running.stop().await;
}

// Shows: a broker that stops heartbeating is fenced after broker.session.timeout.ms, and the
// fence is a committed record brokers see (KRaft's session timeout; issue 4 SIGSTOP scenarios).
#[tokio::test]
async fn session_timeout_fences_a_silent_broker() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[("broker.session.timeout.ms", "1200")]).await;
    let mut conn = connect(running.addr).await;
    let epochs = three_live_brokers(&mut conn).await;
    let started = Instant::now();
    let fenced = loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "broker 3 never fenced"
        );
        for broker in 1..=2 {
            let (_, hw) = fetch_records(&mut conn, 0).await;
            let answer = heartbeat(&mut conn, broker, epochs[broker as usize - 1], hw - 1).await;
            assert!(
                !answer.is_fenced,
                "heartbeating broker {broker} stays unfenced"
            );
        }
        let (records, _) = fetch_records(&mut conn, 0).await;
        let image = image_of(&records);
        let state = image
            .broker(keel_controller::types::BrokerId(3))
            .unwrap()
            .state;
        if state == keel_controller::image::BrokerState::Fenced {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        fenced >= Duration::from_millis(1000),
        "not before the timeout: {fenced:?}"
    );
    running.stop().await;
}

// Shows: a controller killed without an orderly shutdown and restarted on the same directory
// replays the fsynced metadata log: the same records, the same registrations (old broker epochs
// still valid) and topics (issue 4: "the controller's own durable local log").
#[tokio::test]
async fn restart_replays_the_same_metadata() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut conn = connect(running.addr).await;
    let epochs = three_live_brokers(&mut conn).await;
    assert_eq!(
        create_topic(&mut conn, "kept", 2, 3).await.topics[0].error_code,
        0
    );
    let (before, hw) = fetch_records(&mut conn, 0).await;
    drop(conn);
    running.crash().await;

    let running = start(dir.path(), &[]).await;
    let mut conn = connect(running.addr).await;
    let (after, _) = fetch_records(&mut conn, 0).await;
    assert_eq!(after, before);
    assert_eq!(image_of(&after), image_of(&before));
    for (index, epoch) in epochs.iter().enumerate() {
        let answer = heartbeat(&mut conn, index as i32 + 1, *epoch, hw - 1).await;
        assert_eq!(answer.error_code, 0, "registration survived the restart");
        assert!(!answer.is_fenced);
    }
    let again = create_topic(&mut conn, "kept", 2, 3).await;
    assert_eq!(again.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
    running.stop().await;
}

// Shows: a metadata Fetch at the end of the log waits (Kafka's long poll, MaxWaitMs) and
// returns as soon as a new record commits, with the new high watermark.
#[tokio::test]
async fn long_poll_fetch_wakes_on_commit() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut follower = connect(running.addr).await;
    let mut admin = connect(running.addr).await;
    assert_eq!(register(&mut admin, 1, -1).await.error_code, 0);
    let (_, end) = fetch_records(&mut follower, 0).await;
    assert_eq!(
        end, 2,
        "the finalized transaction.version, then the registration"
    );

    let started = Instant::now();
    let poll = tokio::spawn(async move {
        let response: FetchResponse = follower
            .call_version(ApiKey::Fetch, 12, &metadata_fetch(end, 20_000, 1))
            .await
            .unwrap();
        (response, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "the fetch waits for new records");
    assert_eq!(register(&mut admin, 2, -1).await.error_code, 0);
    let (response, waited) = poll.await.unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "woken by the commit, not the timeout"
    );
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.high_watermark, 3);
    let records = decode_metadata_batches(
        partition.records.as_deref().unwrap_or_default(),
        MetadataOffset(end),
    )
    .unwrap();
    assert_eq!(records.len(), 1);
    assert!(matches!(&records[0].1, Record::RegisterBroker(r) if r.broker.0 == 2));

    // Without MinBytes the fetch answers at once, empty. Beyond this controller's end is not an
    // error: a broker may have fetched from a controller further ahead; it waits (here MinBytes
    // 0 answers at once, empty, with the high watermark). Negative offsets are out of range.
    let response: FetchResponse = admin
        .call_version(ApiKey::Fetch, 12, &metadata_fetch(3, 20_000, 0))
        .await
        .unwrap();
    assert!(response.responses[0].partitions[0]
        .records
        .as_ref()
        .is_none_or(|r| r.is_empty()));
    let response: FetchResponse = admin
        .call_version(ApiKey::Fetch, 12, &metadata_fetch(99, 0, 0))
        .await
        .unwrap();
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert!(partition.records.as_ref().is_none_or(|r| r.is_empty()));
    assert_eq!(partition.high_watermark, 3);
    assert!(partition.current_leader.leader_epoch >= 1, "the Raft term");
    let response: FetchResponse = admin
        .call_version(ApiKey::Fetch, 12, &metadata_fetch(-5, 0, 0))
        .await
        .unwrap();
    assert_eq!(
        response.responses[0].partitions[0].error_code, 1,
        "OFFSET_OUT_OF_RANGE"
    );
    running.stop().await;
}

// Shows: registration errors straight from the controller crate — INCONSISTENT_CLUSTER_ID, a
// new incarnation while the old one's session is alive is DUPLICATE_BROKER_REGISTRATION — and
// a heartbeat with another epoch is STALE_BROKER_EPOCH (Kafka's ClusterControlManager).
#[tokio::test]
async fn registration_and_heartbeat_errors() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut conn = connect(running.addr).await;
    let wrong_cluster = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(1))
        .with_cluster_id(s("another"))
        .with_incarnation_id(incarnation(1))
        .with_log_dirs(vec![log_dir_id(1)]);
    let answer: BrokerRegistrationResponse = conn
        .call_version(ApiKey::BrokerRegistration, 4, &wrong_cluster)
        .await
        .unwrap();
    assert_eq!(answer.error_code, 104, "INCONSISTENT_CLUSTER_ID");
    assert_eq!(answer.broker_epoch, -1);

    let epochs = three_live_brokers(&mut conn).await;
    let twin = BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(1))
        .with_cluster_id(s(CLUSTER))
        .with_incarnation_id(Uuid::from_u128(0xbad))
        .with_log_dirs(vec![log_dir_id(1)]);
    let answer: BrokerRegistrationResponse = conn
        .call_version(ApiKey::BrokerRegistration, 4, &twin)
        .await
        .unwrap();
    assert_eq!(answer.error_code, 101, "DUPLICATE_BROKER_REGISTRATION");

    let answer = heartbeat(&mut conn, 2, epochs[1] + 1, 0).await;
    assert_eq!(answer.error_code, 77, "STALE_BROKER_EPOCH");
    assert!(answer.is_fenced);
    running.stop().await;
}

// Shows: forwarded admin requests get a Kafka controller's answers — RF above the unfenced
// brokers is INVALID_REPLICATION_FACTOR, validate_only creates nothing, -1 takes
// num.partitions / default.replication.factor, CreatePartitions grows, IncrementalAlterConfigs
// validates, ElectLeaders preferred is ELECTION_NOT_NEEDED, DeleteTopics removes, and
// DescribeCluster lists brokers (type 1) and this controller (type 2, KIP-919).
#[tokio::test]
async fn admin_requests_answer_like_a_kafka_controller() {
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(
        dir.path(),
        &[("num.partitions", "2"), ("default.replication.factor", "3")],
    )
    .await;
    let mut conn = connect(running.addr).await;
    three_live_brokers(&mut conn).await;

    assert_eq!(
        create_topic(&mut conn, "big", 1, 4).await.topics[0].error_code,
        38
    );
    let validate = CreateTopicsRequest::default()
        .with_validate_only(true)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s("dry")))
            .with_num_partitions(-1)
            .with_replication_factor(-1)]);
    let answer: CreateTopicsResponse = conn
        .call_version(ApiKey::CreateTopics, 7, &validate)
        .await
        .unwrap();
    assert_eq!(answer.topics[0].error_code, 0);
    assert_eq!(answer.topics[0].num_partitions, 2);
    assert_eq!(answer.topics[0].replication_factor, 3);
    let real = validate.with_validate_only(false);
    let answer: CreateTopicsResponse = conn
        .call_version(ApiKey::CreateTopics, 7, &real)
        .await
        .unwrap();
    assert_eq!(
        answer.topics[0].error_code, 0,
        "validate_only created nothing"
    );
    assert_eq!(answer.topics[0].num_partitions, 2);

    let grow =
        CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(s("dry")))
            .with_count(3)
            .with_assignments(None)]);
    let answer: CreatePartitionsResponse = conn
        .call_version(ApiKey::CreatePartitions, 3, &grow)
        .await
        .unwrap();
    assert_eq!(answer.results[0].error_code, 0);
    let answer: CreatePartitionsResponse = conn
        .call_version(ApiKey::CreatePartitions, 3, &grow)
        .await
        .unwrap();
    assert_eq!(
        answer.results[0].error_code, 37,
        "INVALID_PARTITIONS: not an increase"
    );

    let configs = |value: &str| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("dry"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("min.insync.replicas"))
                    .with_config_operation(0)
                    .with_value(Some(s(value)))]),
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(s(""))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("unclean.recovery.strategy"))
                    .with_config_operation(0)
                    .with_value(Some(s("manual")))]),
        ])
    };
    let answer: IncrementalAlterConfigsResponse = conn
        .call_version(ApiKey::IncrementalAlterConfigs, 1, &configs("zero"))
        .await
        .unwrap();
    assert_eq!(answer.responses[0].error_code, 40, "INVALID_CONFIG");
    assert_eq!(answer.responses[1].error_code, 0);
    let answer: IncrementalAlterConfigsResponse = conn
        .call_version(ApiKey::IncrementalAlterConfigs, 1, &configs("2"))
        .await
        .unwrap();
    assert_eq!(answer.responses[0].error_code, 0);

    let elect = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(TopicName(s("dry")))
            .with_partitions(vec![0, 9])]));
    let answer: ElectLeadersResponse = conn
        .call_version(ApiKey::ElectLeaders, 2, &elect)
        .await
        .unwrap();
    let results = &answer.replica_election_results[0].partition_result;
    let code = |p: i32| {
        results
            .iter()
            .find(|r| r.partition_id == p)
            .unwrap()
            .error_code
    };
    assert_eq!(code(0), 84, "ELECTION_NOT_NEEDED");
    assert_eq!(code(9), 3, "UNKNOWN_TOPIC_OR_PARTITION");

    let describe: DescribeClusterResponse = conn
        .call_version(
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterRequest::default().with_endpoint_type(1),
        )
        .await
        .unwrap();
    assert_eq!(describe.cluster_id.as_str(), CLUSTER);
    assert_eq!(describe.brokers.len(), 3);
    assert_eq!(describe.brokers[0].port, 9001);
    let describe: DescribeClusterResponse = conn
        .call_version(
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterRequest::default().with_endpoint_type(2),
        )
        .await
        .unwrap();
    assert_eq!(describe.brokers.len(), 1);
    assert_eq!(describe.brokers[0].broker_id.0, NODE);
    assert_eq!(describe.brokers[0].port, i32::from(running.addr.port()));

    let delete = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(s("dry")), TopicName(s("nope"))]);
    let answer: DeleteTopicsResponse = conn
        .call_version(ApiKey::DeleteTopics, 5, &delete)
        .await
        .unwrap();
    assert_eq!(answer.responses[0].error_code, 0);
    assert_eq!(answer.responses[1].error_code, 3);
    let (records, _) = fetch_records(&mut conn, 0).await;
    assert!(matches!(records.last().unwrap().1, Record::RemoveTopic(_)));
    assert!(image_of(&records).topic_id("dry").is_none());
    running.stop().await;
}

// Shows: a garbage frame closes only that connection; the controller keeps serving others
// (STYLE: bad input never panics; the broker listener's rule).
#[tokio::test]
async fn a_bad_frame_closes_only_its_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let running = start(dir.path(), &[]).await;
    let mut raw = TcpStream::connect(running.addr).await.unwrap();
    raw.write_all(&[0, 0, 0, 10, 0, 62, 0, 4, 0, 0, 0, 1, 0xff, 0xff])
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "closed without an answer");
    let mut conn = connect(running.addr).await;
    assert_eq!(register(&mut conn, 1, -1).await.error_code, 0);
    running.stop().await;
}

/// A connection to `addr` authenticated with SCRAM as `user`.
async fn connect_scram(
    addr: SocketAddr,
    mechanism: keel_controller::scram::ScramMechanism,
    user: &str,
    password: &str,
) -> Result<Conn, keel_node::client::ClientError> {
    use keel_node::net::Network;
    let stream = keel_node::net::TcpNetwork
        .connect(&addr.to_string())
        .await?;
    let mut conn = Connection::new(stream, "controller-test");
    conn.negotiate().await?;
    let client = keel_node::security::sasl::scram::ScramClient::new(mechanism, user, password);
    conn.authenticate(Arc::new(client)).await?;
    Ok(conn)
}

fn describe_users(users: &[&str]) -> DescribeUserScramCredentialsRequest {
    use keel_wire::kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
    DescribeUserScramCredentialsRequest::default().with_users(Some(
        users
            .iter()
            .map(|u| UserName::default().with_name(s(u)))
            .collect(),
    ))
}

// Shows (KIP-554, `kafka-storage format --add-scram`): a controller formatted with a bootstrap
// credential authenticates SCRAM clients on its SASL listener with it before anything is
// committed, writes it to the metadata log at its first activation (once: not again after a
// restart), answers DescribeUserScramCredentials from its committed image and
// AlterUserScramCredentials with Kafka's per-user errors; the stored records hold keys derived
// from the salted password, never the salted password; a wrong password is refused.
#[tokio::test]
async fn scram_credentials_on_the_controller_listener() {
    use keel_controller::scram::ScramMechanism;
    use keel_wire::kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let bootstrap = keel_node::controller_server::bootstrap::parse_add_scrams(
        &["SCRAM-SHA-512=[name=admin,password=admin-secret]".to_string()],
        &SystemClock,
    )
    .unwrap();
    keel_node::controller_server::bootstrap::write(&OsStorage::new(), dir.path(), &bootstrap)
        .unwrap();
    let jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"admin-secret\";";
    let secure = [
        (
            "listener.security.protocol.map",
            "CONTROLLER:SASL_PLAINTEXT",
        ),
        ("sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512"),
        ("sasl.mechanism.controller.protocol", "SCRAM-SHA-512"),
        (
            "listener.name.controller.scram-sha-512.sasl.jaas.config",
            jaas,
        ),
    ];
    let running = start(dir.path(), &secure).await;
    let mut conn = connect_scram(
        running.addr,
        ScramMechanism::Sha512,
        "admin",
        "admin-secret",
    )
    .await
    .unwrap();
    let wrong = connect_scram(running.addr, ScramMechanism::Sha512, "admin", "nope").await;
    let Err(keel_node::client::ClientError::Authentication(message)) = wrong else {
        panic!("a wrong password authenticated, or another error");
    };
    assert!(
        message.contains("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
        "{message}"
    );

    let salted = keel_node::security::sasl::scram::salted_password(
        ScramMechanism::Sha256,
        b"alice-secret",
        b"alice-salt",
        8192,
    );
    let alter = AlterUserScramCredentialsRequest::default()
        .with_upsertions(vec![
            ScramCredentialUpsertion::default()
                .with_name(s("alice"))
                .with_mechanism(1)
                .with_iterations(8192)
                .with_salt(bytes::Bytes::from_static(b"alice-salt"))
                .with_salted_password(bytes::Bytes::from(salted.clone())),
            ScramCredentialUpsertion::default()
                .with_name(s("eve"))
                .with_mechanism(0)
                .with_iterations(8192)
                .with_salt(bytes::Bytes::from_static(b"s"))
                .with_salted_password(bytes::Bytes::from(salted.clone())),
        ])
        .with_deletions(vec![ScramCredentialDeletion::default()
            .with_name(s("ghost"))
            .with_mechanism(2)]);
    let answer: AlterUserScramCredentialsResponse = conn
        .call_version(ApiKey::AlterUserScramCredentials, 0, &alter)
        .await
        .unwrap();
    let results: Vec<(String, i16, Option<String>)> = answer
        .results
        .iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.error_code,
                r.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (
                "ghost".to_string(),
                91,
                Some("Attempt to delete a user credential that does not exist".to_string())
            ),
            ("alice".to_string(), 0, None),
            (
                "eve".to_string(),
                33,
                Some("Unknown SCRAM mechanism".to_string())
            ),
        ]
    );
    let described: DescribeUserScramCredentialsResponse = conn
        .call_version(
            ApiKey::DescribeUserScramCredentials,
            0,
            &describe_users(&["alice", "admin", "ghost"]),
        )
        .await
        .unwrap();
    type Described = (String, i16, Vec<(i8, i32)>);
    let shown: Vec<Described> = described
        .results
        .iter()
        .map(|r| {
            (
                r.user.to_string(),
                r.error_code,
                r.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("alice".to_string(), 0, vec![(1, 8192)]),
            ("admin".to_string(), 0, vec![(2, 4096)]),
            ("ghost".to_string(), 91, vec![]),
        ]
    );
    // Alice authenticates with the credential the controller derived from her salted password.
    connect_scram(
        running.addr,
        ScramMechanism::Sha256,
        "alice",
        "alice-secret",
    )
    .await
    .unwrap();
    let (records, _) = fetch_records(&mut conn, 0).await;
    let credentials: Vec<&keel_controller::records::UserScramCredentialRecord> = records
        .iter()
        .filter_map(|(_, r)| match r {
            Record::UserScramCredential(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(
        credentials
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["admin", "alice"],
        "the bootstrap record first, then alice's"
    );
    assert_ne!(credentials[1].credential.stored_key, salted);
    assert_ne!(credentials[1].credential.server_key, salted);
    drop(conn);
    running.crash().await;

    let running = start(dir.path(), &secure).await;
    let mut conn = connect_scram(
        running.addr,
        ScramMechanism::Sha256,
        "alice",
        "alice-secret",
    )
    .await
    .unwrap();
    let (after, _) = fetch_records(&mut conn, 0).await;
    let admins = after
        .iter()
        .filter(|(_, r)| matches!(r, Record::UserScramCredential(c) if c.name == "admin"))
        .count();
    assert_eq!(admins, 1, "the bootstrap records are written once");
    running.stop().await;
}

fn acl_creation(
    name: &str,
    pattern: i8,
    principal: &str,
) -> keel_wire::kafka_protocol::messages::create_acls_request::AclCreation {
    keel_wire::kafka_protocol::messages::create_acls_request::AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(principal))
        .with_host(s("*"))
        .with_operation(3)
        .with_permission_type(3)
}

fn describe_all_acls() -> keel_wire::kafka_protocol::messages::DescribeAclsRequest {
    keel_wire::kafka_protocol::messages::DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(1)
        .with_pattern_type_filter(1)
        .with_operation(1)
        .with_permission_type(1)
}

// Shows (issue 22): with an authorizer configured the controller commits CreateAcls and
// DeleteAcls as AccessControlEntry / RemoveAccessControlEntry records (a binding that exists
// gets no second record, a bad one Kafka's INVALID_REQUEST), answers DescribeAcls from its
// image, and replays the bindings after a restart; without an authorizer each API answers
// SECURITY_DISABLED.
#[tokio::test]
async fn acls_on_the_controller_listener() {
    use keel_wire::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use keel_wire::kafka_protocol::messages::{
        CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
        DescribeAclsResponse,
    };
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let props: BTreeMap<String, String> = [
        ("node.id", "3000".to_string()),
        ("process.roles", "controller".to_string()),
        ("listeners", "CONTROLLER://127.0.0.1:0".to_string()),
        ("metadata.log.dir", dir.path().display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut config = ControllerServerConfig::from_properties(&props).unwrap();
    config.authorizer = Some(super_user_anonymous());
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    let create = CreateAclsRequest::default().with_creations(vec![
        acl_creation("orders", 3, "User:alice"),
        acl_creation("", 3, "User:alice"),
        acl_creation("orders", 3, "User:alice"),
        acl_creation("pay-", 4, "User:*"),
        acl_creation("x", 2, "User:bob"),
    ]);
    let created: CreateAclsResponse = conn
        .call_version(ApiKey::CreateAcls, 3, &create)
        .await
        .unwrap();
    let codes: Vec<i16> = created.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [0, 42, 0, 0, 42], "{created:?}");
    assert_eq!(
        created.results[1].error_message.as_deref(),
        Some("Invalid empty resource name")
    );
    let described: DescribeAclsResponse = conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all_acls())
        .await
        .unwrap();
    assert_eq!(described.error_code, 0);
    let mut names: Vec<(String, i8, usize)> = described
        .resources
        .iter()
        .map(|r| (r.resource_name.to_string(), r.pattern_type, r.acls.len()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("orders".to_string(), 3, 1), ("pay-".to_string(), 4, 1)]
    );
    let (records, _) = fetch_records(&mut conn, 0).await;
    let entries = records
        .iter()
        .filter(|(_, r)| matches!(r, Record::AccessControlEntry(_)))
        .count();
    assert_eq!(entries, 2, "one record per new binding");

    // A restart replays them.
    running.stop().await;
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    let again: DescribeAclsResponse = loop {
        let answer: DescribeAclsResponse = conn
            .call_version(ApiKey::DescribeAcls, 3, &describe_all_acls())
            .await
            .unwrap();
        if answer.resources.len() == 2 {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(again.resources.len(), 2);
    let delete = DeleteAclsRequest::default().with_filters(vec![
        DeleteAclsFilter::default()
            .with_resource_type_filter(1)
            .with_resource_name_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(1)
            .with_principal_filter(Some(s("User:alice")))
            .with_operation(1)
            .with_permission_type(1),
        DeleteAclsFilter::default().with_resource_type_filter(0),
    ]);
    let deleted: DeleteAclsResponse = conn
        .call_version(ApiKey::DeleteAcls, 3, &delete)
        .await
        .unwrap();
    assert_eq!(deleted.filter_results[0].error_code, 0);
    assert_eq!(deleted.filter_results[0].matching_acls.len(), 1);
    assert_eq!(
        deleted.filter_results[0].matching_acls[0]
            .resource_name
            .as_str(),
        "orders"
    );
    assert_eq!(
        deleted.filter_results[1].error_code, 42,
        "an UNKNOWN resource type"
    );
    let (records, _) = fetch_records(&mut conn, 0).await;
    assert!(records
        .iter()
        .any(|(_, r)| matches!(r, Record::RemoveAccessControlEntry(_))));
    let left: DescribeAclsResponse = conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all_acls())
        .await
        .unwrap();
    assert_eq!(left.resources.len(), 1);
    running.stop().await;

    // Without an authorizer: SECURITY_DISABLED, as Kafka's controller.
    let plain = start(dir.path(), &[]).await;
    let mut conn = connect(plain.addr).await;
    let refused: CreateAclsResponse = conn
        .call_version(ApiKey::CreateAcls, 3, &create)
        .await
        .unwrap();
    assert!(
        refused.results.iter().all(|r| r.error_code == 54),
        "{refused:?}"
    );
    let refused: DescribeAclsResponse = conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all_acls())
        .await
        .unwrap();
    assert_eq!(refused.error_code, 54);
    plain.stop().await;
}

/// An authorizer whose only super user is the plaintext listener's `User:ANONYMOUS`.
fn super_user_anonymous() -> keel_controller::acl::AuthorizerConfig {
    keel_controller::acl::AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        ..Default::default()
    }
}

// Shows (issue 22): the controller listener authorizes each sender as Kafka's ControllerApis
// does — the brokers' RPCs (registration, the metadata Fetch) need CLUSTER_ACTION, a direct
// admin client needs ALTER / DESCRIBE on the cluster or its operation on each topic, and a
// sender holding CLUSTER_ACTION (a broker forwarding its authorized clients' requests) is
// trusted with what it forwards.
#[tokio::test]
async fn the_controller_listener_authorizes_its_senders() {
    use keel_controller::acl::AuthorizerConfig;
    use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
    let dir = tempfile::tempdir().unwrap();
    format(dir.path());
    let mut config = ControllerServerConfig::from_properties(
        &[
            ("node.id", "3000".to_string()),
            ("process.roles", "controller".to_string()),
            ("listeners", "CONTROLLER://127.0.0.1:0".to_string()),
            ("metadata.log.dir", dir.path().display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    )
    .unwrap();
    let grant = |resource_type: i8, name: &str, pattern: i8, operation: i8| {
        AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_resource_pattern_type(pattern)
            .with_principal(s("User:ANONYMOUS"))
            .with_host(s("*"))
            .with_operation(operation)
            .with_permission_type(3)
    };
    // As a super user: ANONYMOUS may CREATE topics named `ok-*`, nothing else.
    config.authorizer = Some(super_user_anonymous());
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    let created: CreateAclsResponse = conn
        .call_version(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(vec![grant(2, "ok-", 4, 5)]),
        )
        .await
        .unwrap();
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    running.stop().await;

    let create_topics = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(s("ok-1")))
                .with_num_partitions(1)
                .with_replication_factor(1),
            CreatableTopic::default()
                .with_name(TopicName(s("no-1")))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ])
        .with_timeout_ms(5_000);
    let code_of = |r: &CreateTopicsResponse, name: &str| {
        r.topics
            .iter()
            .find(|t| t.name.as_str() == name)
            .map(|t| t.error_code)
    };

    // No super user: ANONYMOUS is an admin client with one grant.
    config.authorizer = Some(AuthorizerConfig::default());
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    // The grant is in the replayed image once ok-1 is no longer refused.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let answer = loop {
        let answer: CreateTopicsResponse = conn
            .call_version(ApiKey::CreateTopics, 7, &create_topics)
            .await
            .unwrap();
        if code_of(&answer, "ok-1") != Some(29) || std::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(answer.topics.len(), 2, "{answer:?}");
    assert_eq!(code_of(&answer, "no-1"), Some(29), "{answer:?}");
    // Allowed, and refused only for want of brokers.
    assert_ne!(code_of(&answer, "ok-1"), Some(29), "{answer:?}");
    assert_ne!(code_of(&answer, "ok-1"), Some(0), "{answer:?}");
    let registration = register(&mut conn, 1, -1).await;
    assert_eq!(
        registration.error_code, 31,
        "a broker RPC needs CLUSTER_ACTION"
    );
    let fetched: FetchResponse = conn
        .call_version(ApiKey::Fetch, 12, &metadata_fetch(0, 0, 0))
        .await
        .unwrap();
    assert_eq!(fetched.error_code, 31, "{fetched:?}");
    assert!(fetched.responses.is_empty(), "no record leaks: {fetched:?}");
    let cluster: DescribeClusterResponse = conn
        .call_version(
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterRequest::default(),
        )
        .await
        .unwrap();
    assert_eq!(cluster.error_code, 31, "Kafka's controller wants ALTER");
    let acls: DescribeAclsResponse = conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all_acls())
        .await
        .unwrap();
    assert_eq!(acls.error_code, 31);
    assert!(acls.resources.is_empty());
    let versions: ApiVersionsResponse = conn
        .call_version(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(versions.error_code, 0, "ApiVersions is never refused");
    running.stop().await;

    // CLUSTER_ACTION makes ANONYMOUS a broker: its RPCs and what it forwards are answered.
    config.authorizer = Some(super_user_anonymous());
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    let created: CreateAclsResponse = conn
        .call_version(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(vec![grant(4, "kafka-cluster", 3, 9)]),
        )
        .await
        .unwrap();
    assert_eq!(created.results[0].error_code, 0, "{created:?}");
    running.stop().await;
    config.authorizer = Some(AuthorizerConfig::default());
    let running = start_config(config.clone()).await;
    let mut conn = connect(running.addr).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let registration = loop {
        let registration = register(&mut conn, 1, -1).await;
        if registration.error_code != 31 || std::time::Instant::now() > deadline {
            break registration;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(registration.error_code, 0, "{registration:?}");
    let answer: CreateTopicsResponse = conn
        .call_version(ApiKey::CreateTopics, 7, &create_topics)
        .await
        .unwrap();
    assert!(
        answer.topics.iter().all(|t| t.error_code != 29),
        "forwarded requests are trusted: {answer:?}"
    );
    running.stop().await;
}
