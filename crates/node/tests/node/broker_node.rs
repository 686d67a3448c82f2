//! One broker node — a single-node cluster, with its controller in-process — run entirely in
//! memory: files on `MemStorage` (whose `crash()` is a power loss), connections on `MemNetwork`.
//! Clients talk the Kafka protocol to it. What is checked is what a client or an operator sees:
//! records read back, offsets assigned, files in the log directories.
//!
//! Each node runs on its own Tokio runtime, so that killing it (shutting that runtime down
//! without cancelling the broker) stops *every* task of the node — broker, in-process
//! controller, server, background flushes and checkpoints — as `kill -9` would. (Aborting the
//! `runtime::run` task alone would leave the tasks it spawned running, still writing to the
//! storage.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_log::batch::BatchIter;
use keel_log::plain_batch::{build_batch, decode_records};
use keel_log::storage::{read_file_if_exists, MemStorage, Storage};
use keel_log::{LeaderEpoch, LogConfig, LogDir, TopicPartition, CLEAN_SHUTDOWN_FILE};
use keel_node::client::Connection;
use keel_node::clock::{Clock, SystemClock};
use keel_node::config::BrokerConfig;
use keel_node::net::{BoxStream, MemNetwork, Network};
use keel_node::runtime::{self, Ready};
use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use keel_wire::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use keel_wire::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CLUSTER: &str = "broker-node-test";
const NODE: i32 = 1;
const DIRS: [&str; 2] = ["/data/a", "/data/b"];
const LISTENER: &str = "broker:9092";
/// How long a node may take to start or stop (a start after a kill takes a few seconds: the
/// previous run's broker session must end first).
const NODE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a client retries a request that found no leader yet, or waits for the broker to
/// serve what a test expects.
const RETRY_FOR: Duration = Duration::from_secs(5);

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

// ---------------------------------------------------------------------------------------------
// The node
// ---------------------------------------------------------------------------------------------

/// The machine: its disk and its network, which outlive the broker process.
struct Machine {
    storage: Arc<MemStorage>,
    network: Arc<MemNetwork>,
}

impl Machine {
    /// A machine whose log directories are formatted for node [`NODE`].
    fn formatted() -> Machine {
        let machine = Machine {
            storage: Arc::new(MemStorage::new()),
            network: Arc::new(MemNetwork::new()),
        };
        for dir in DIRS {
            machine.format(dir, NODE);
        }
        machine
    }

    fn format(&self, dir: &str, node_id: i32) {
        LogDir::format(
            self.storage.clone(),
            Path::new(dir),
            CLUSTER,
            node_id,
            Uuid::new_v4(),
        )
        .unwrap();
    }

    fn dyn_storage(&self) -> Arc<dyn Storage> {
        self.storage.clone()
    }

    /// Starts the broker and waits until it serves.
    async fn start(&self) -> Node {
        self.start_with(&[]).await
    }

    async fn start_with(&self, extra: &[(&str, &str)]) -> Node {
        self.start_with_clock(extra, Arc::new(SystemClock)).await
    }

    async fn start_with_clock(&self, extra: &[(&str, &str)], clock: Arc<dyn Clock>) -> Node {
        self.start_config(config(NODE, extra), clock).await
    }

    async fn start_config(&self, config: BrokerConfig, clock: Arc<dyn Clock>) -> Node {
        if let Ok(filter) = std::env::var("KEEL_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Ready>();
        let network: Arc<dyn Network> = self.network.clone();
        let task = rt.spawn(runtime::run(
            config,
            self.dyn_storage(),
            clock,
            network,
            shutdown.clone(),
            move |ready| {
                let _ = ready_tx.send(ready.clone());
            },
        ));
        let mut node = Node {
            rt: Some(rt),
            shutdown,
            task: Some(task),
            bootstrap: String::new(),
        };
        match tokio::time::timeout(NODE_TIMEOUT, ready_rx).await {
            Ok(Ok(ready)) => node.bootstrap = ready.bootstrap,
            Ok(Err(_)) => {
                // on_ready was dropped: run() ended before serving.
                let outcome = node.task.take().unwrap().await;
                panic!("the broker stopped before it was ready: {outcome:?}");
            }
            Err(_) => panic!("the broker was not ready within {NODE_TIMEOUT:?}"),
        }
        node
    }

    async fn client(&self, node: &Node) -> Client {
        let conn = Connection::connect(&*self.network, &node.bootstrap, "broker-node-test")
            .await
            .unwrap();
        Client { conn }
    }

    /// The names in a directory (sorted).
    fn list(&self, dir: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .storage
            .list_dir(Path::new(dir))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        names
    }

    /// The broker epoch in each log directory's clean-shutdown file (`None`: no file).
    fn clean_shutdown_epochs(&self) -> Vec<Option<i64>> {
        DIRS.iter()
            .map(|dir| {
                let path = PathBuf::from(dir).join(CLEAN_SHUTDOWN_FILE);
                read_file_if_exists(self.storage.as_ref(), &path)
                    .unwrap()
                    .map(|bytes| {
                        let json: serde_json::Value = serde_json::from_slice(&bytes)
                            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                        assert_eq!(json["version"], 0, "{json}");
                        json["brokerEpoch"]
                            .as_i64()
                            .unwrap_or_else(|| panic!("no brokerEpoch in {json}"))
                    })
            })
            .collect()
    }
}

fn config(node_id: i32, extra: &[(&str, &str)]) -> BrokerConfig {
    let mut props = BTreeMap::new();
    props.insert("node.id".to_string(), node_id.to_string());
    props.insert("log.dirs".to_string(), DIRS.join(","));
    props.insert("listeners".to_string(), format!("PLAINTEXT://{LISTENER}"));
    // A start after a kill waits for the previous run's broker session to end (the new
    // in-process controller replays the old registration): keep sessions short so the tests
    // stay fast.
    props.insert(
        "broker.heartbeat.interval.ms".to_string(),
        "200".to_string(),
    );
    props.insert("broker.session.timeout.ms".to_string(), "1000".to_string());
    for (k, v) in extra {
        props.insert(k.to_string(), v.to_string());
    }
    BrokerConfig::from_properties(&props).unwrap()
}

/// A running broker process.
struct Node {
    /// The node's own runtime: shutting it down is the process dying.
    rt: Option<tokio::runtime::Runtime>,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    bootstrap: String,
}

impl Node {
    /// Orderly shutdown (SIGTERM): cancel and wait for `run` to return.
    async fn stop(mut self) {
        self.shutdown.cancel();
        let task = self.task.take().unwrap();
        match tokio::time::timeout(NODE_TIMEOUT, task).await {
            Ok(Ok(Ok(()))) => {}
            Ok(outcome) => panic!("clean shutdown failed: {outcome:?}"),
            Err(_) => panic!("clean shutdown took more than {NODE_TIMEOUT:?}"),
        }
        self.end_runtime().await;
    }

    /// `kill -9`: every task of the node stops where it is, nothing is cancelled or flushed.
    /// The storage keeps what was written (the page cache survives a process kill); call
    /// `storage.crash()` afterwards for a power loss.
    async fn kill(mut self) {
        drop(self.task.take());
        self.end_runtime().await;
    }

    async fn end_runtime(&mut self) {
        let rt = self.rt.take().unwrap();
        // Async tasks are dropped at once; file IO already running on the blocking pool
        // finishes (as a write(2) in progress would), so nothing writes after this returns.
        tokio::task::spawn_blocking(move || rt.shutdown_timeout(Duration::from_secs(10)))
            .await
            .unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A failed test must not hang or panic again while dropping the runtime.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------------

struct Client {
    conn: Connection<BoxStream>,
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    offset: i64,
    value: Vec<u8>,
}

/// What a read of a partition from offset 0 to its high watermark returned.
#[derive(Debug)]
struct Read {
    high_watermark: i64,
    log_start_offset: i64,
    /// `(base offset, record count)` of each batch.
    batches: Vec<(i64, usize)>,
    records: Vec<Record>,
}

impl Read {
    fn values(&self) -> Vec<String> {
        self.records
            .iter()
            .map(|r| String::from_utf8(r.value.clone()).unwrap())
            .collect()
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// A batch of records with the given values, as a producer builds it.
fn batch_of(values: &[String]) -> Bytes {
    let records: Vec<(Option<&[u8]>, &[u8])> =
        values.iter().map(|v| (None, v.as_bytes())).collect();
    Bytes::from(build_batch(&records, SystemClock.now_ms()))
}

/// Values `"{prefix}-{i}"` for `i` in `range`.
fn values(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

impl Client {
    /// CreateTopics v7; asserts success.
    async fn create_topic(&mut self, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(1)
                .with_configs(
                    configs
                        .iter()
                        .map(|(k, v)| {
                            CreatableTopicConfig::default()
                                .with_name(StrBytes::from_string(k.to_string()))
                                .with_value(Some(StrBytes::from_string(v.to_string())))
                        })
                        .collect(),
                )]);
        let response: CreateTopicsResponse = self
            .conn
            .call_version(ApiKey::CreateTopics, 7, &request)
            .await
            .unwrap();
        assert_eq!(response.topics.len(), 1, "{response:?}");
        assert_eq!(
            response.topics[0].error_code, 0,
            "create {topic}: {response:?}"
        );
    }

    /// DeleteTopics by name at `version` (v6: `topics`, before: `topic_names`); asserts success.
    async fn delete_topic(&mut self, topic: &str, version: i16) {
        let request = DeleteTopicsRequest::default().with_timeout_ms(10_000);
        let request = if version >= 6 {
            request.with_topics(vec![
                DeleteTopicState::default().with_name(Some(name(topic)))
            ])
        } else {
            request.with_topic_names(vec![name(topic)])
        };
        let response: DeleteTopicsResponse = self
            .conn
            .call_version(ApiKey::DeleteTopics, version, &request)
            .await
            .unwrap();
        assert_eq!(response.responses.len(), 1, "{response:?}");
        assert_eq!(
            response.responses[0].error_code, 0,
            "delete {topic}: {response:?}"
        );
    }

    /// Produce v9 of one batch; returns its base offset. Retries (briefly) only the errors
    /// that guarantee nothing was appended (no leader yet).
    async fn produce(&mut self, topic: &str, partition: i32, acks: i16, values: &[String]) -> i64 {
        let request = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch_of(values)))])]);
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let response: ProduceResponse = self
                .conn
                .call_version(ApiKey::Produce, 9, &request)
                .await
                .unwrap();
            let p = &response.responses[0].partition_responses[0];
            match p.error_code {
                0 => return p.base_offset,
                UNKNOWN_TOPIC_OR_PARTITION | LEADER_NOT_AVAILABLE | NOT_LEADER_OR_FOLLOWER
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => panic!("produce to {topic}-{partition} failed: {response:?}"),
            }
        }
    }

    /// Produces `batches` batches of `per_batch` records each, valued
    /// `"{prefix}-{n}"` with `n` counting from `first`; asserts each lands right after the
    /// previous one, at `expected_base` on. Returns the values produced.
    #[allow(clippy::too_many_arguments)]
    async fn produce_batches(
        &mut self,
        topic: &str,
        partition: i32,
        acks: i16,
        prefix: &str,
        first: usize,
        batches: usize,
        per_batch: usize,
        expected_base: i64,
    ) -> Vec<String> {
        let mut produced = Vec::new();
        for b in 0..batches {
            let start = first + b * per_batch;
            let batch = values(prefix, start..start + per_batch);
            let base = self.produce(topic, partition, acks, &batch).await;
            assert_eq!(
                base,
                expected_base + (b * per_batch) as i64,
                "batch {b} of {topic}-{partition} landed at the wrong offset"
            );
            produced.extend(batch);
        }
        produced
    }

    /// Fetch v12 from offset 0 until the high watermark. Checks every batch parses (CRC
    /// included) and that batches are contiguous from the log start offset.
    async fn read_all(&mut self, topic: &str, partition: i32) -> Read {
        let mut read = Read {
            high_watermark: -1,
            log_start_offset: -1,
            batches: Vec::new(),
            records: Vec::new(),
        };
        let mut next = 0i64;
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let request = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(0)
                .with_min_bytes(0)
                .with_max_bytes(64 * 1024 * 1024)
                .with_isolation_level(0)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(next)
                        .with_current_leader_epoch(-1)
                        .with_last_fetched_epoch(-1)
                        .with_log_start_offset(-1)
                        .with_partition_max_bytes(16 * 1024 * 1024)])]);
            let response: FetchResponse = self
                .conn
                .call_version(ApiKey::Fetch, 12, &request)
                .await
                .unwrap();
            assert_eq!(response.error_code, 0, "{response:?}");
            let p = &response.responses[0].partitions[0];
            match p.error_code {
                0 => {}
                UNKNOWN_TOPIC_OR_PARTITION | LEADER_NOT_AVAILABLE | NOT_LEADER_OR_FOLLOWER
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                code => panic!("fetch {topic}-{partition} at {next}: error {code}: {p:?}"),
            }
            if read.log_start_offset < 0 {
                read.log_start_offset = p.log_start_offset;
                assert!(
                    p.log_start_offset == 0,
                    "{topic}-{partition}: log start offset {} (nothing was deleted)",
                    p.log_start_offset
                );
            }
            read.high_watermark = p.high_watermark;
            let mut progressed = false;
            if let Some(records) = &p.records {
                for batch in BatchIter::new(records) {
                    let batch = batch.unwrap_or_else(|e| {
                        panic!("{topic}-{partition}: corrupt batch after offset {next}: {e}")
                    });
                    let header = batch.header;
                    if header.base_offset.0 >= p.high_watermark {
                        break;
                    }
                    assert_eq!(
                        header.base_offset.0, next,
                        "{topic}-{partition}: batches are not contiguous"
                    );
                    let decoded = decode_records(batch.bytes)
                        .unwrap_or_else(|| panic!("{topic}-{partition}: undecodable batch"));
                    assert_eq!(decoded.len(), header.records_count as usize);
                    read.batches.push((header.base_offset.0, decoded.len()));
                    for (i, r) in decoded.into_iter().enumerate() {
                        assert_eq!(r.offset, header.base_offset.0 + i as i64);
                        read.records.push(Record {
                            offset: r.offset,
                            value: r.value,
                        });
                    }
                    next = header.next_offset().0;
                    progressed = true;
                }
            }
            if next >= p.high_watermark {
                assert_eq!(
                    next, p.high_watermark,
                    "{topic}-{partition}: read past the HW"
                );
                return read;
            }
            assert!(
                progressed,
                "{topic}-{partition}: no progress at {next} below the HW"
            );
        }
    }

    /// Reads the partition until it serves exactly `expected` (a new leader may take a moment
    /// to expose what it has); fails with what it served last after [`RETRY_FOR`].
    async fn read_expecting(&mut self, topic: &str, partition: i32, expected: &[String]) -> Read {
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let read = self.read_all(topic, partition).await;
            if read.values() == expected {
                assert_eq!(read.high_watermark, expected.len() as i64);
                return read;
            }
            assert!(
                Instant::now() < deadline,
                "{topic}-{partition} serves {:?} (high watermark {}), expected {expected:?}",
                read.values(),
                read.high_watermark
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Metadata v12 of one topic: its error code and `(partition, leader)` for each partition.
    async fn metadata(&mut self, topic: &str) -> (i16, Vec<(i32, i32)>) {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(name(topic)))
            ]))
            .with_allow_auto_topic_creation(false);
        let response: MetadataResponse = self
            .conn
            .call_version(ApiKey::Metadata, 12, &request)
            .await
            .unwrap();
        let t = &response.topics[0];
        let mut leaders: Vec<(i32, i32)> = t
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect();
        leaders.sort();
        (t.error_code, leaders)
    }

    /// `(partition, leader)` of each partition of `topic`, once every partition has a leader
    /// (right after a start the controller may still be electing); the last answer after
    /// [`RETRY_FOR`].
    async fn leaders(&mut self, topic: &str) -> Vec<(i32, i32)> {
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let (error, leaders) = self.metadata(topic).await;
            assert_eq!(error, 0, "metadata of {topic}");
            if leaders.iter().all(|(_, l)| *l >= 0) || Instant::now() >= deadline {
                return leaders;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Polls `done` until it holds; fails the test after [`RETRY_FOR`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + RETRY_FOR;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The partition directories named `<topic>-<partition>` (exactly) in each log directory.
fn partition_dirs(machine: &Machine, tp: &str) -> Vec<String> {
    DIRS.iter()
        .flat_map(|dir| {
            machine
                .list(dir)
                .into_iter()
                .filter(|n| n == tp)
                .map(move |n| format!("{dir}/{n}"))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

// Shows: an orderly shutdown leaves `.kafka_cleanshutdown` in every log directory, all naming
// the broker epoch of the run that ended (KIP-966 "Detection of an unclean shutdown"); the next
// start consumes the files, and the next clean stop names that run's newer broker epoch; a
// killed broker leaves no file. Records produced with acks=all are read back after either stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_shutdown_file_names_the_broker_epoch_and_an_unclean_stop_leaves_none() {
    let machine = Machine::formatted();
    let node = machine.start().await;
    assert_eq!(machine.clean_shutdown_epochs(), vec![None, None]);
    let mut client = machine.client(&node).await;
    client.create_topic("t", 2, &[]).await;
    let mut expected = client.produce_batches("t", 1, -1, "v", 0, 10, 3, 0).await;
    node.stop().await;

    let epochs = machine.clean_shutdown_epochs();
    let first_epoch = epochs[0].expect("a clean stop writes the file");
    assert!(first_epoch >= 0, "{epochs:?}");
    assert_eq!(
        epochs,
        vec![Some(first_epoch); DIRS.len()],
        "every dir, same epoch"
    );

    let node = machine.start().await;
    assert_eq!(
        machine.clean_shutdown_epochs(),
        vec![None, None],
        "a start consumes the files"
    );
    let mut client = machine.client(&node).await;
    client.read_expecting("t", 1, &expected).await;
    expected.extend(client.produce_batches("t", 1, -1, "v", 30, 2, 3, 30).await);
    node.stop().await;
    let epochs = machine.clean_shutdown_epochs();
    let second_epoch = epochs[0].expect("a clean stop writes the file");
    assert_eq!(epochs, vec![Some(second_epoch); DIRS.len()]);
    assert!(
        second_epoch > first_epoch,
        "each run registers a newer broker epoch: {first_epoch} then {second_epoch}"
    );

    // An unclean stop (the page cache survives: no power loss) leaves no file...
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.read_expecting("t", 1, &expected).await;
    expected.extend(client.produce_batches("t", 1, -1, "v", 36, 4, 3, 36).await);
    node.kill().await;
    assert_eq!(machine.clean_shutdown_epochs(), vec![None, None]);

    // ...and loses nothing acknowledged.
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.read_expecting("t", 1, &expected).await;
    client.read_expecting("t", 0, &[]).await;
    node.stop().await;
    let epochs = machine.clean_shutdown_epochs();
    assert!(epochs.iter().all(Option::is_some), "{epochs:?}");
}

// Shows: with `flush.messages=1` every acknowledged record is fsynced before the answer, so it
// survives a power loss — acks=1 and acks=all alike; after recovery the log accepts new appends
// right after it, and the topic itself (in the metadata log) survived too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_keeps_every_acknowledged_record_with_flush_messages_1() {
    let machine = Machine::formatted();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client
        .create_topic("durable", 2, &[("flush.messages", "1")])
        .await;
    let mut p0 = client
        .produce_batches("durable", 0, 1, "a", 0, 25, 1, 0)
        .await;
    let mut p1 = client
        .produce_batches("durable", 1, -1, "b", 0, 5, 4, 0)
        .await;
    node.kill().await;
    machine.storage.crash();

    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    assert_eq!(client.leaders("durable").await, vec![(0, NODE), (1, NODE)]);
    client.read_expecting("durable", 0, &p0).await;
    client.read_expecting("durable", 1, &p1).await;
    p0.extend(
        client
            .produce_batches("durable", 0, 1, "a", 25, 1, 1, 25)
            .await,
    );
    p1.extend(
        client
            .produce_batches("durable", 1, -1, "b", 20, 1, 4, 20)
            .await,
    );
    client.read_expecting("durable", 0, &p0).await;
    client.read_expecting("durable", 1, &p1).await;
    node.stop().await;
}

// Shows: with Kafka's default flush policy (no fsync) a power loss may lose acknowledged
// records on a single broker — but the broker restarts and serves a consistent prefix of what
// was produced: offsets contiguous from 0, every batch whole and valid, no high watermark beyond
// the data (the high-watermark checkpoint is written often here, so it had run ahead of the
// lost data). What the last clean shutdown flushed survives; new appends land right after the
// prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_with_default_flush_policy_recovers_a_consistent_prefix() {
    let machine = Machine::formatted();
    let fast_checkpoints = [
        ("replica.high.watermark.checkpoint.interval.ms", "100"),
        ("log.flush.offset.checkpoint.interval.ms", "100"),
    ];
    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    client.create_topic("lazy", 1, &[]).await;
    let mut produced = client.produce_batches("lazy", 0, -1, "v", 0, 5, 4, 0).await;
    node.stop().await; // flushes: these 20 records are durable

    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    produced.extend(
        client
            .produce_batches("lazy", 0, -1, "v", 20, 6, 4, 20)
            .await,
    );
    client.read_expecting("lazy", 0, &produced).await;
    // Let the (durable) high-watermark checkpoint record the unflushed end.
    tokio::time::sleep(Duration::from_millis(400)).await;
    node.kill().await;
    machine.storage.crash();

    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    // The next append lands at the end of what recovery kept.
    let new = values("w", 0..3);
    let kept = client.produce("lazy", 0, -1, &new).await;
    assert!(
        (20..=produced.len() as i64).contains(&kept),
        "recovery kept {kept} records: the 20 flushed by the clean shutdown must survive"
    );
    assert_eq!(
        kept % 4,
        0,
        "recovery cut a batch: the log ends at offset {kept}"
    );
    let mut expected = produced[..kept as usize].to_vec();
    expected.extend(new);
    let read = client.read_expecting("lazy", 0, &expected).await;
    let mut sizes: Vec<usize> = read.batches.iter().map(|(_, n)| *n).collect();
    assert_eq!(sizes.pop(), Some(3));
    assert!(sizes.iter().all(|n| *n == 4), "{:?}", read.batches);
    node.stop().await;

    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    client.read_expecting("lazy", 0, &expected).await;
    node.stop().await;
}

// Shows: with the default flush policy (no flushes) the segments a log rolled are fsynced in
// the background, as Kafka does after a roll: a power loss keeps them, losing at most the active
// segment's unflushed batches (before, it lost everything written since the broker started).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_keeps_the_rolled_segments_with_default_flush_policy() {
    let machine = Machine::formatted();
    let fast_checkpoints = [
        ("replica.high.watermark.checkpoint.interval.ms", "100"),
        ("log.flush.offset.checkpoint.interval.ms", "100"),
        ("log.flush.scheduler.interval.ms", "100"),
    ];
    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    client
        .create_topic("rolled", 1, &[("segment.bytes", "1024")])
        .await;
    let produced = client
        .produce_batches("rolled", 0, -1, "v", 0, 40, 4, 0)
        .await;
    client.read_expecting("rolled", 0, &produced).await;
    // A few flush-task rounds and checkpoints.
    tokio::time::sleep(Duration::from_millis(600)).await;
    node.kill().await;
    machine.storage.crash();

    let node = machine.start_with(&fast_checkpoints).await;
    let mut client = machine.client(&node).await;
    let new = values("w", 0..3);
    let kept = client.produce("rolled", 0, -1, &new).await;
    assert!(
        kept >= produced.len() as i64 / 2 && kept % 4 == 0,
        "power loss kept {kept} of {} records: the rolled segments (all but about the last \
         1 KiB) must survive, ending at a batch boundary",
        produced.len()
    );
    let mut expected = produced[..kept as usize].to_vec();
    expected.extend(new);
    client.read_expecting("rolled", 0, &expected).await;
    node.stop().await;
}

// Shows: a log directory formatted for another node is refused, by the broker and by a run of
// the whole node (which fails instead of serving), with an error naming both node ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_log_directory_of_another_node() {
    const MINE: i32 = 7001;
    const OTHER: i32 = 8002;
    let machine = Machine {
        storage: Arc::new(MemStorage::new()),
        network: Arc::new(MemNetwork::new()),
    };
    machine.format(DIRS[0], MINE);
    machine.format(DIRS[1], OTHER);
    let check = |text: String| {
        assert!(
            text.contains(&MINE.to_string()) && text.contains(&OTHER.to_string()),
            "the error must name both node ids: {text}"
        );
    };

    let opened = keel_node::broker::Broker::open(
        config(MINE, &[]),
        machine.dyn_storage(),
        Arc::new(SystemClock),
        machine.network.clone(),
        vec![],
    );
    let Err(err) = opened else {
        panic!("a directory of node {OTHER} was opened as node {MINE}");
    };
    check(format!("{err:#}"));

    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Ready>();
    let run = runtime::run(
        config(MINE, &[]),
        machine.dyn_storage(),
        Arc::new(SystemClock),
        machine.network.clone(),
        CancellationToken::new(),
        move |ready| {
            let _ = ready_tx.send(ready.clone());
        },
    );
    let outcome = tokio::time::timeout(NODE_TIMEOUT, run)
        .await
        .expect("run() must fail, not wait");
    let Err(err) = outcome else {
        panic!("run() served on a directory of node {OTHER}");
    };
    check(format!("{err:#}"));
    assert!(ready_rx.await.is_err(), "never ready");
}

// Shows: deleting a topic removes its partition directories, and a topic recreated with the
// same name starts from an empty log at offset 0 — across a power loss too (the deleted
// partitions left the checkpoints, so nothing old is inherited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_topic_starts_with_a_fresh_empty_log() {
    let machine = Machine::formatted();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    let durable = [("flush.messages", "1")];
    client.create_topic("t", 2, &durable).await;
    client.produce_batches("t", 0, -1, "old", 0, 50, 1, 0).await;
    client.produce_batches("t", 1, -1, "old1", 0, 5, 2, 0).await;
    assert_eq!(partition_dirs(&machine, "t-0").len(), 1);
    client.delete_topic("t", 6).await;
    assert_eq!(client.metadata("t").await.0, UNKNOWN_TOPIC_OR_PARTITION);
    // The broker removes the directories as it applies the deletion.
    wait_until("the deleted partitions' directories are removed", || {
        DIRS.iter()
            .all(|dir| !machine.list(dir).iter().any(|n| n.starts_with("t-")))
    })
    .await;

    client.create_topic("t", 1, &durable).await;
    let read = client.read_all("t", 0).await;
    assert_eq!(
        (read.high_watermark, read.records.len()),
        (0, 0),
        "{read:?}"
    );
    let fresh = client.produce_batches("t", 0, -1, "new", 0, 10, 1, 0).await;
    node.kill().await;
    machine.storage.crash();

    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    assert_eq!(
        client.leaders("t").await,
        vec![(0, NODE)],
        "partition 1 is gone"
    );
    client.read_expecting("t", 0, &fresh).await;
    assert!(partition_dirs(&machine, "t-1").is_empty());
    node.stop().await;
}

// Shows: a topic deleted with DeleteTopics v4 (before topic ids: what older clients send) and
// recreated at once, again and again, is gone from the broker's metadata when the deletion is
// answered, and every new incarnation gets a working, empty log — the deletion of the old
// incarnation never removes the new one's directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_and_recreate_back_to_back_keeps_the_new_topic() {
    let machine = Machine::formatted();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.create_topic("cycle", 1, &[]).await;
    client
        .produce_batches("cycle", 0, -1, "gen0", 0, 3, 1, 0)
        .await;
    for generation in 1..=8 {
        client.delete_topic("cycle", 4).await;
        assert_eq!(
            client.metadata("cycle").await.0,
            UNKNOWN_TOPIC_OR_PARTITION,
            "generation {generation}: the deleted topic is still in the broker's metadata"
        );
        client.create_topic("cycle", 1, &[]).await;
        let prefix = format!("gen{generation}");
        let records = client
            .produce_batches("cycle", 0, -1, &prefix, 0, 3, 1, 0)
            .await;
        client.read_expecting("cycle", 0, &records).await;
    }
    node.stop().await;
}

// Shows: a partition directory the broker finds that belongs to no partition it hosts — left
// before the first start, or holding an earlier topic of the same name (its
// `partition.metadata` names another topic id) — is set aside as `<name>.<id>-stray`, never
// served as the current topic's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_partition_directory_is_never_reused() {
    let machine = Machine::formatted();
    // A leftover `t-0` from before this cluster knew any topic.
    {
        let dir = LogDir::open(machine.dyn_storage(), Path::new(DIRS[0]), None, NODE).unwrap();
        let tp = TopicPartition::new("t", 0);
        let mut log = dir.create_log(&tp, LogConfig::default(), 0).unwrap();
        let batch = build_batch(&[(None, b"leftover".as_slice())], 0);
        log.append_as_leader(&batch, LeaderEpoch(0), 0).unwrap();
        log.close(0).unwrap();
    }
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    let durable = [("flush.messages", "1")];
    client.create_topic("t", 1, &durable).await;
    let read = client.read_all("t", 0).await;
    assert_eq!(
        read.records,
        vec![],
        "the leftover records must not reappear"
    );
    let strays: Vec<String> = machine
        .list(DIRS[0])
        .into_iter()
        .filter(|n| n.starts_with("t-0.") && n.ends_with("-stray"))
        .collect();
    assert_eq!(strays.len(), 1, "{:?}", machine.list(DIRS[0]));
    let first = client
        .produce_batches("t", 0, -1, "first", 0, 5, 1, 0)
        .await;
    client.read_expecting("t", 0, &first).await;
    node.stop().await;

    // Keep the log of this `t` (topic id A) aside, recreate `t` (topic id B), then put A's
    // log back where B's was: as if B's creation had been lost but A's files had survived.
    let dirs = partition_dirs(&machine, "t-0");
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let live = PathBuf::from(&dirs[0]);
    let parent = live.parent().unwrap().to_path_buf();
    let parked = PathBuf::from("/parking/t-0"); // outside every log directory
    machine
        .storage
        .create_dir_all(Path::new("/parking"))
        .unwrap();
    machine.storage.rename(&live, &parked).unwrap();
    machine.storage.sync_dir(&parent).unwrap();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.delete_topic("t", 6).await;
    client.create_topic("t", 1, &durable).await;
    client
        .produce_batches("t", 0, -1, "second", 0, 3, 1, 0)
        .await;
    node.stop().await;
    for path in partition_dirs(&machine, "t-0") {
        machine.storage.remove_dir_all(Path::new(&path)).unwrap();
    }
    machine.storage.rename(&parked, &live).unwrap();
    machine.storage.sync_dir(&parent).unwrap();

    let strays = || -> usize {
        DIRS.iter()
            .map(|d| {
                machine
                    .list(d)
                    .iter()
                    .filter(|n| n.ends_with("-stray"))
                    .count()
            })
            .sum()
    };
    let strays_before = strays();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    let read = client.read_all("t", 0).await;
    assert_eq!(
        read.records,
        vec![],
        "the log of the earlier topic `t` was served as the current one: {:?}",
        read.values()
    );
    assert_eq!(
        strays(),
        strays_before + 1,
        "the old log is set aside, not removed"
    );
    let again = client
        .produce_batches("t", 0, -1, "third", 0, 2, 1, 0)
        .await;
    client.read_expecting("t", 0, &again).await;
    node.stop().await;
}

// Shows: the test-only fault knob (`keel.test.lose.unflushed.data.on.unclean.start`) makes a
// restart after a kill lose exactly what was never flushed — though the page cache kept it (no
// power loss here) — for the topics that set it and no others; after a clean shutdown it does
// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_knob_loses_exactly_the_unflushed_records_after_a_kill() {
    const KNOB: &str = keel_node::topic_config::TEST_LOSE_UNFLUSHED_KEY;
    let machine = Machine::formatted();
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    // Flushed once 4 messages are unflushed: of 7 single-record batches, the first 4 are.
    client
        .create_topic("knob", 1, &[("flush.messages", "4"), (KNOB, "true")])
        .await;
    client
        .create_topic(
            "knob-durable",
            1,
            &[("flush.messages", "1"), (KNOB, "true")],
        )
        .await;
    client.create_topic("plain", 1, &[]).await;
    let knob = client.produce_batches("knob", 0, 1, "k", 0, 7, 1, 0).await;
    let durable = client
        .produce_batches("knob-durable", 0, 1, "d", 0, 7, 1, 0)
        .await;
    let plain = client.produce_batches("plain", 0, 1, "p", 0, 7, 1, 0).await;
    node.kill().await; // no storage.crash(): the knob is what loses data

    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.read_expecting("knob", 0, &knob[..4]).await;
    client.read_expecting("knob-durable", 0, &durable).await;
    client.read_expecting("plain", 0, &plain).await; // without the knob a kill loses nothing
    let mut knob_now = knob[..4].to_vec();
    knob_now.extend(client.produce_batches("knob", 0, 1, "k2", 0, 2, 1, 4).await);
    node.stop().await;

    // After a clean shutdown (which flushed everything) the knob drops nothing.
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.read_expecting("knob", 0, &knob_now).await;
    node.stop().await;
}

// Shows: a broker killed in the middle of its work restarts (recovering its logs, since there
// is no clean-shutdown file), leads every partition again, serves everything acknowledged (the
// page cache survived) and appends right after it — kill after kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_broker_recovers_and_serves_everything_acknowledged() {
    let machine = Machine::formatted();
    let mut node = machine.start().await;
    let mut client = machine.client(&node).await;
    client.create_topic("orders", 3, &[]).await;
    let mut produced: Vec<Vec<String>> = Vec::new();
    for p in 0..3 {
        produced.push(
            client
                .produce_batches("orders", p, -1, &format!("p{p}"), 0, 4, 5, 0)
                .await,
        );
    }
    for round in 0..2 {
        node.kill().await;
        assert_eq!(machine.clean_shutdown_epochs(), vec![None, None]);
        node = machine.start().await;
        let mut client = machine.client(&node).await;
        assert_eq!(
            client.leaders("orders").await,
            vec![(0, NODE), (1, NODE), (2, NODE)],
            "round {round}"
        );
        for (p, records) in (0..).zip(produced.iter_mut()) {
            client.read_expecting("orders", p, records).await;
            let end = records.len();
            let prefix = format!("p{p}");
            records.extend(
                client
                    .produce_batches("orders", p, -1, &prefix, end, 1, 5, end as i64)
                    .await,
            );
        }
    }
    node.stop().await;
    let node = machine.start().await;
    let mut client = machine.client(&node).await;
    for (p, records) in (0..).zip(produced.iter()) {
        client.read_expecting("orders", p, records).await;
    }
    node.stop().await;
}

/// A metadata image built record by record for tests that drive `Broker::apply_image` directly:
/// this node registered, topics named "t" with one partition led by it.
struct TestImage {
    image: keel_controller::ClusterImage,
    next_offset: i64,
}

impl TestImage {
    fn with_this_node_registered() -> TestImage {
        use keel_controller::records::{Record, RegisterBrokerRecord};
        use keel_controller::types::{BrokerEpoch, BrokerId, IncarnationId};
        let mut image = TestImage {
            image: keel_controller::ClusterImage::new(),
            next_offset: 0,
        };
        image.replay(Record::RegisterBroker(RegisterBrokerRecord {
            broker: BrokerId(NODE),
            epoch: BrokerEpoch(0),
            incarnation: IncarnationId(Uuid::new_v4()),
            listeners: vec![],
            rack: None,
            log_dirs: vec![],
            fenced: false,
        }));
        image
    }

    fn replay(&mut self, record: keel_controller::records::Record) {
        let offset = keel_controller::types::MetadataOffset(self.next_offset);
        self.image.replay(offset, &record).unwrap();
        self.next_offset += 1;
    }

    /// Topic "t" with id `id` and its partition 0, replicated and led here.
    fn create_t(&mut self, id: keel_controller::types::TopicId) {
        use keel_controller::records::{PartitionRecord, Record, TopicRecord};
        use keel_controller::types::{BrokerId, TopicPartition as ControllerTp};
        self.replay(Record::Topic(TopicRecord {
            name: "t".to_string(),
            id,
        }));
        self.replay(Record::Partition(PartitionRecord {
            partition: ControllerTp::new(id, 0),
            state: keel_controller::PartitionState::new(
                vec![BrokerId(NODE)],
                vec![None],
                [BrokerId(NODE)].into_iter().collect(),
                Some(BrokerId(NODE)),
            ),
        }));
    }

    fn remove(&mut self, id: keel_controller::types::TopicId) {
        use keel_controller::records::{Record, RemoveTopicRecord};
        self.replay(Record::RemoveTopic(RemoveTopicRecord { id }));
    }

    fn snapshot(&self) -> Arc<keel_controller::ClusterImage> {
        Arc::new(self.image.clone())
    }
}

// Shows: one metadata image that both deletes a topic and creates another of the same name (a
// broker that fetched both at once, or caught up after both) hosts the new topic on a fresh,
// working log: the deletion of the old incarnation never removes the new one's directory, and
// the old records never show up in the new log.
#[test]
fn one_image_deleting_and_recreating_a_topic_keeps_the_new_log() {
    use keel_controller::types::TopicId;

    let machine = Machine::formatted();
    let (broker, _alter_partition_jobs) = keel_node::broker::Broker::open(
        config(NODE, &[]),
        machine.dyn_storage(),
        Arc::new(SystemClock),
        machine.network.clone(),
        vec![],
    )
    .unwrap();
    broker.set_broker_epoch(0);
    let mut image = TestImage::with_this_node_registered();
    let (old_id, new_id) = (TopicId(Uuid::new_v4()), TopicId(Uuid::new_v4()));
    image.create_t(old_id);
    broker.apply_image(image.snapshot()).unwrap();
    let now = SystemClock.now_ms();
    let append = |values: &[String]| {
        let partition = broker.partition("t", 0).expect("t-0 is hosted");
        let batch = build_batch(
            &values
                .iter()
                .map(|v| (None, v.as_bytes()))
                .collect::<Vec<_>>(),
            now,
        );
        let mut log = partition.lock_log().unwrap();
        log.append_as_leader(&batch, LeaderEpoch(0), now)
            .map(|info| info.first_offset.0)
    };
    assert_eq!(append(&values("old", 0..5)).unwrap(), 0);

    image.remove(old_id);
    image.create_t(new_id);
    broker.apply_image(image.snapshot()).unwrap();

    let partition = broker.partition("t", 0).expect("the new t-0 is hosted");
    assert_eq!(partition.topic_id, new_id.0);
    assert_eq!(
        partition_dirs(&machine, "t-0").len(),
        1,
        "the new topic's directory must exist: {:?} {:?}",
        machine.list(DIRS[0]),
        machine.list(DIRS[1])
    );
    assert_eq!(
        append(&values("new", 0..3)).expect("the new topic's log must accept appends"),
        0,
        "the new topic's log starts empty"
    );
}

// Shows: after an unclean shutdown the broker recovers its logs before it registers
// (`Broker::preload_logs`, with the metadata as it was then), and the first image applied after
// the registration claims those logs — unless that image says the topic was deleted and
// recreated meanwhile: then the recovered log (its `partition.metadata` names the old topic
// id) is set aside and the new topic starts on a fresh log.
#[test]
fn logs_recovered_before_registering_are_claimed_only_by_their_own_topic() {
    use keel_controller::types::TopicId;
    use keel_node::broker::{Broker, PreviousShutdown};

    let machine = Machine::formatted();
    let open = || {
        let (broker, jobs) = Broker::open(
            config(NODE, &[]),
            machine.dyn_storage(),
            Arc::new(SystemClock),
            machine.network.clone(),
            vec![],
        )
        .unwrap();
        broker.set_broker_epoch(0);
        (broker, jobs)
    };
    let mut image = TestImage::with_this_node_registered();
    let (old_id, new_id) = (TopicId(Uuid::new_v4()), TopicId(Uuid::new_v4()));
    image.create_t(old_id);
    let now = SystemClock.now_ms();
    let log_end = |broker: &Broker| {
        let partition = broker.partition("t", 0).expect("t-0 is hosted");
        let log = partition.lock_log().unwrap();
        (partition.topic_id, log.log_end_offset().0)
    };

    // First run: five records, then a stop without the clean-shutdown file.
    {
        let (broker, _jobs) = open();
        broker.apply_image(image.snapshot()).unwrap();
        let partition = broker.partition("t", 0).expect("t-0 is hosted");
        let batch = build_batch(
            &values("old", 0..5)
                .iter()
                .map(|v| (None, v.as_bytes()))
                .collect::<Vec<_>>(),
            now,
        );
        partition
            .lock_log()
            .unwrap()
            .append_as_leader(&batch, LeaderEpoch(0), now)
            .unwrap();
    }

    // Second run: recovered before registering, claimed by an image of the same topic.
    {
        let (broker, _jobs) = open();
        assert!(matches!(
            broker.previous_shutdown,
            PreviousShutdown::Unclean
        ));
        assert!(
            broker.partition("t", 0).is_none(),
            "nothing hosted before an image"
        );
        assert_eq!(broker.preload_logs(&image.image).unwrap(), 1);
        assert!(
            broker.partition("t", 0).is_none(),
            "recovering hosts nothing"
        );
        broker.apply_image(image.snapshot()).unwrap();
        assert_eq!(
            log_end(&broker),
            (old_id.0, 5),
            "the recovered log is claimed"
        );
    }

    // Third run: recovered with the old image, but the first image applied after the
    // registration has the topic deleted and recreated.
    {
        let (broker, _jobs) = open();
        assert_eq!(broker.preload_logs(&image.image).unwrap(), 1);
        image.remove(old_id);
        image.create_t(new_id);
        broker.apply_image(image.snapshot()).unwrap();
        assert_eq!(
            log_end(&broker),
            (new_id.0, 0),
            "the new topic starts empty"
        );
        let strays: Vec<String> = DIRS
            .iter()
            .flat_map(|dir| machine.list(dir))
            .filter(|n| n.starts_with("t-0.") && n.ends_with("-stray"))
            .collect();
        assert_eq!(
            strays.len(),
            1,
            "the old topic's log is set aside: {strays:?}"
        );
    }
}

/// The system clock moved by a shift a test sets: lets a test jump days ahead.
#[derive(Debug, Default)]
struct ShiftedClock {
    shift_ms: std::sync::atomic::AtomicI64,
}

impl Clock for ShiftedClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.shift_ms.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn new_uuid(&self) -> Uuid {
        SystemClock.new_uuid()
    }
}

impl Client {
    /// FindCoordinator v4 for `group`, retried until the coordinator is available (the first call
    /// creates `__consumer_offsets`); returns the error code of the last answer.
    async fn find_coordinator(&mut self, group: &str) -> i16 {
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let request = FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![StrBytes::from_string(group.to_string())]);
            let response: FindCoordinatorResponse = self
                .conn
                .call_version(ApiKey::FindCoordinator, 4, &request)
                .await
                .unwrap();
            let error = response.coordinators[0].error_code;
            if error == 0 || Instant::now() >= deadline {
                return error;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// OffsetCommit v8 outside any generation (an `assign()` consumer's commit).
    async fn commit(&mut self, group: &str, topic: &str, partition: i32, offset: i64) -> i16 {
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(partition)
                    .with_committed_offset(offset)])]);
        let response: OffsetCommitResponse = self
            .conn
            .call_version(ApiKey::OffsetCommit, 8, &request)
            .await
            .unwrap();
        response.topics[0].partitions[0].error_code
    }

    /// The committed offset of `group` for the partition (-1: none), by OffsetFetch v7.
    async fn committed(&mut self, group: &str, topic: &str, partition: i32) -> i64 {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(vec![partition])]));
        let response: OffsetFetchResponse = self
            .conn
            .call_version(ApiKey::OffsetFetch, 7, &request)
            .await
            .unwrap();
        assert_eq!(response.error_code, 0, "offset fetch of {group}");
        let p = &response.topics[0].partitions[0];
        assert_eq!(
            p.error_code, 0,
            "offset fetch of {group} {topic}-{partition}"
        );
        p.committed_offset
    }

    async fn group_ids(&mut self) -> Vec<String> {
        let response: ListGroupsResponse = self
            .conn
            .call_version(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
            .await
            .unwrap();
        response
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect()
    }
}

// Shows: offsets.retention.minutes deletes a group's committed offsets once they expired
// (Kafka's rule for a group that only committed: retention after the commit) with tombstones in
// __consumer_offsets, and deletes the group left without offsets: after a kill -9 and restart
// the coordinator, loading the log again, still knows neither. A fresher commit of another
// group is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_offsets_are_deleted_for_good() {
    let machine = Machine::formatted();
    let clock = Arc::new(ShiftedClock::default());
    let extra = [
        ("offsets.retention.minutes", "1"),
        ("offsets.retention.check.interval.ms", "100"),
        // One partition: both groups' state loads at the first lookup after the restart.
        ("offsets.topic.num.partitions", "1"),
    ];
    let node = machine.start_with_clock(&extra, clock.clone()).await;
    let mut client = machine.client(&node).await;
    client.create_topic("orders", 1, &[]).await;
    assert_eq!(client.find_coordinator("old").await, 0);
    assert_eq!(client.commit("old", "orders", 0, 5).await, 0);
    assert_eq!(client.committed("old", "orders", 0).await, 5);
    clock
        .shift_ms
        .store(50_000, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(client.commit("new", "orders", 0, 7).await, 0);
    clock
        .shift_ms
        .store(61_000, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + RETRY_FOR;
    while client.committed("old", "orders", 0).await != -1 {
        assert!(Instant::now() < deadline, "the old commit never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(client.committed("new", "orders", 0).await, 7);
    assert_eq!(client.group_ids().await, vec!["new".to_string()]);

    node.kill().await;
    let node = machine.start_with_clock(&extra, clock.clone()).await;
    let mut client = machine.client(&node).await;
    assert_eq!(client.find_coordinator("old").await, 0);
    assert_eq!(client.committed("old", "orders", 0).await, -1);
    assert_eq!(client.committed("new", "orders", 0).await, 7);
    assert_eq!(client.group_ids().await, vec!["new".to_string()]);
    node.stop().await;
}

// Shows (issue 22): with an authorizer, CreateAcls and DeleteAcls sent to a broker need ALTER on
// the cluster (a super user has it; `allow.everyone.if.no.acl.found` grants it while no ACL
// names the cluster), reach the in-process controller, and are answered once the broker's own
// image shows them; DescribeAcls (DESCRIBE on the cluster) answers from that image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_apis_go_through_the_broker_with_the_authorizers_checks() {
    use keel_controller::acl::AuthorizerConfig;
    use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
    use keel_wire::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    use keel_wire::kafka_protocol::messages::{
        CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
        DescribeAclsRequest, DescribeAclsResponse,
    };
    let s = |t: &str| StrBytes::from_string(t.to_string());
    let creation = |name: &str, principal: &str, resource_type: i8, operation: i8| {
        AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_resource_pattern_type(3)
            .with_principal(s(principal))
            .with_host(s("*"))
            .with_operation(operation)
            .with_permission_type(3)
    };
    let describe_all = DescribeAclsRequest::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1);
    let machine = Machine::formatted();
    let start = |authorizer: AuthorizerConfig| {
        let mut c = config(NODE, &[]);
        c.authorizer = Some(authorizer);
        machine.start_config(c, Arc::new(SystemClock))
    };

    // Nobody may alter the cluster: no super user, no ACL, allow.everyone false.
    let node = start(AuthorizerConfig::default()).await;
    let mut client = machine.client(&node).await;
    let create =
        CreateAclsRequest::default().with_creations(vec![creation("orders", "User:alice", 2, 3)]);
    let refused: CreateAclsResponse = client
        .conn
        .call_version(ApiKey::CreateAcls, 3, &create)
        .await
        .unwrap();
    assert_eq!(refused.results[0].error_code, 31, "{refused:?}");
    let refused: DescribeAclsResponse = client
        .conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all)
        .await
        .unwrap();
    assert_eq!(refused.error_code, 31);
    node.stop().await;

    // The plaintext client (User:ANONYMOUS) as a super user.
    let admin = AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        allow_everyone_if_no_acl_found: false,
    };
    let node = start(admin).await;
    let mut client = machine.client(&node).await;
    let create = CreateAclsRequest::default().with_creations(vec![
        creation("orders", "User:alice", 2, 3),
        creation("kafka-cluster", "User:alice", 4, 7),
        creation("not-the-cluster", "User:alice", 4, 7),
    ]);
    let created: CreateAclsResponse = client
        .conn
        .call_version(ApiKey::CreateAcls, 3, &create)
        .await
        .unwrap();
    let codes: Vec<i16> = created.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [0, 0, 42], "{created:?}");
    // Answered once this broker's image has them: DescribeAcls at once shows both.
    let described: DescribeAclsResponse = client
        .conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all)
        .await
        .unwrap();
    assert_eq!(described.resources.len(), 2, "{described:?}");
    node.stop().await;

    // allow.everyone.if.no.acl.found: the cluster now has an ACL (alice's ALTER), so ANONYMOUS,
    // no longer a super user, is refused; the topic without ACLs of its own is open.
    let open = AuthorizerConfig {
        allow_everyone_if_no_acl_found: true,
        ..Default::default()
    };
    let node = start(open).await;
    let mut client = machine.client(&node).await;
    let delete = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
        .with_resource_type_filter(1)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(1)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(1)
        .with_permission_type(1)]);
    let refused: DeleteAclsResponse = client
        .conn
        .call_version(ApiKey::DeleteAcls, 3, &delete)
        .await
        .unwrap();
    assert_eq!(refused.filter_results[0].error_code, 31, "{refused:?}");
    node.stop().await;

    let node = start(AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        allow_everyone_if_no_acl_found: false,
    })
    .await;
    let mut client = machine.client(&node).await;
    let deleted: DeleteAclsResponse = client
        .conn
        .call_version(ApiKey::DeleteAcls, 3, &delete)
        .await
        .unwrap();
    assert_eq!(
        deleted.filter_results[0].matching_acls.len(),
        2,
        "{deleted:?}"
    );
    let left: DescribeAclsResponse = client
        .conn
        .call_version(ApiKey::DescribeAcls, 3, &describe_all)
        .await
        .unwrap();
    assert!(
        left.resources.is_empty(),
        "the broker's image has the deletion at once: {left:?}"
    );
    node.stop().await;
}

// Shows (issue 22): with an authorizer, the data path is decided by ACLs as Kafka decides it —
// Metadata for all topics lists only the topics the principal may DESCRIBE, a named topic it
// may not describe is TOPIC_AUTHORIZATION_FAILED whether or not it exists (and is not
// auto-created); Produce needs WRITE, Fetch READ, ListOffsets DESCRIBE (each refused per
// partition with TOPIC_AUTHORIZATION_FAILED); a follower's Fetch needs CLUSTER_ACTION;
// InitProducerId for an idempotent producer passes with WRITE on one topic (KIP-679) and is
// CLUSTER_AUTHORIZATION_FAILED without; KIP-430's operations are filled in when asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_path_is_authorized_by_acls() {
    use keel_controller::acl::AuthorizerConfig;
    use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
    use keel_wire::kafka_protocol::messages::list_offsets_request::{
        ListOffsetsPartition, ListOffsetsTopic,
    };
    use keel_wire::kafka_protocol::messages::{
        CreateAclsRequest, CreateAclsResponse, InitProducerIdRequest, InitProducerIdResponse,
        ListOffsetsRequest, ListOffsetsResponse, MetadataResponse,
    };
    const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    let s = |t: &str| StrBytes::from_string(t.to_string());
    let machine = Machine::formatted();
    let metrics = keel_node::metrics::Metrics::new();
    let start = |authorizer: AuthorizerConfig| {
        let mut c = config(NODE, &[]);
        c.authorizer = Some(authorizer);
        c.metrics = metrics.clone();
        machine.start_config(c, Arc::new(SystemClock))
    };
    let root = AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        allow_everyone_if_no_acl_found: false,
    };
    let node = start(root).await;
    let mut client = machine.client(&node).await;
    client.create_topic("mine", 1, &[]).await;
    client.create_topic("theirs", 1, &[]).await;
    client.produce("mine", 0, -1, &values("m", 0..3)).await;
    client.produce("theirs", 0, -1, &values("t", 0..3)).await;
    let allow = |operation: i8| {
        AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("mine"))
            .with_resource_pattern_type(3)
            .with_principal(s("User:ANONYMOUS"))
            .with_host(s("*"))
            .with_operation(operation)
            .with_permission_type(3)
    };
    let created: CreateAclsResponse = client
        .conn
        .call_version(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(vec![allow(3), allow(4)]),
        )
        .await
        .unwrap();
    assert!(
        created.results.iter().all(|r| r.error_code == 0),
        "{created:?}"
    );
    node.stop().await;

    // No longer a super user: READ and WRITE on "mine" only.
    let node = start(AuthorizerConfig::default()).await;
    let mut client = machine.client(&node).await;
    let all: MetadataResponse = client
        .conn
        .call_version(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default()
                .with_topics(None)
                .with_include_topic_authorized_operations(true),
        )
        .await
        .unwrap();
    let listed: Vec<(String, i32)> = all
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().unwrap().to_string(),
                t.topic_authorized_operations,
            )
        })
        .collect();
    // READ (3), WRITE (4) and DESCRIBE (8), which they imply.
    assert_eq!(
        listed,
        [("mine".to_string(), (1 << 3) | (1 << 4) | (1 << 8))]
    );
    let named: MetadataResponse = client
        .conn
        .call_version(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default()
                .with_allow_auto_topic_creation(true)
                .with_topics(Some(
                    ["theirs", "nowhere", "mine"]
                        .iter()
                        .map(|t| MetadataRequestTopic::default().with_name(Some(name(t))))
                        .collect(),
                )),
        )
        .await
        .unwrap();
    let codes: Vec<i16> = named.topics.iter().map(|t| t.error_code).collect();
    assert_eq!(
        codes,
        [TOPIC_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED, 0]
    );
    assert!(
        named.topics[0].topic_id.is_nil(),
        "no id for a topic it may not describe"
    );
    assert_eq!(
        client.metadata("nowhere").await.0,
        TOPIC_AUTHORIZATION_FAILED,
        "not auto-created"
    );

    client.produce("mine", 0, -1, &values("m", 3..4)).await;
    let refused: ProduceResponse = client
        .conn
        .call_version(
            ApiKey::Produce,
            9,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name("theirs"))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch_of(&values("x", 0..1))))])]),
        )
        .await
        .unwrap();
    assert_eq!(
        refused.responses[0].partition_responses[0].error_code,
        TOPIC_AUTHORIZATION_FAILED
    );
    assert_eq!(client.read_all("mine", 0).await.records.len(), 4);

    let fetch = |topic: &str, replica_id: i32| {
        FetchRequest::default()
            .with_replica_id(replica_id.into())
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(-1)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let theirs: FetchResponse = client
        .conn
        .call_version(ApiKey::Fetch, 12, &fetch("theirs", -1))
        .await
        .unwrap();
    assert_eq!(
        theirs.responses[0].partitions[0].error_code,
        TOPIC_AUTHORIZATION_FAILED
    );
    assert!(theirs.responses[0].partitions[0]
        .records
        .as_ref()
        .is_none_or(|r| r.is_empty()));
    let follower: FetchResponse = client
        .conn
        .call_version(ApiKey::Fetch, 12, &fetch("mine", 7))
        .await
        .unwrap();
    assert_eq!(
        follower.responses[0].partitions[0].error_code, TOPIC_AUTHORIZATION_FAILED,
        "a follower's fetch needs CLUSTER_ACTION"
    );

    let list = |topic: &str| {
        ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_timestamp(-1)])])
    };
    let offsets: ListOffsetsResponse = client
        .conn
        .call_version(ApiKey::ListOffsets, 7, &list("theirs"))
        .await
        .unwrap();
    assert_eq!(
        offsets.topics[0].partitions[0].error_code,
        TOPIC_AUTHORIZATION_FAILED
    );
    let offsets: ListOffsetsResponse = client
        .conn
        .call_version(ApiKey::ListOffsets, 7, &list("mine"))
        .await
        .unwrap();
    assert_eq!(offsets.topics[0].partitions[0].offset, 4);

    let init = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let idempotent: InitProducerIdResponse = client
        .conn
        .call_version(ApiKey::InitProducerId, 4, &init)
        .await
        .unwrap();
    assert_eq!(
        idempotent.error_code, 0,
        "WRITE on one topic is enough (KIP-679)"
    );
    // Every denial is counted per API.
    let text = metrics.encode();
    let denials = |api: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("keel_authorizer_denials_total{")
                    && l.contains(&format!("api=\"{api}\""))
                    && l.contains("listener=\"broker\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert!(denials("Produce").is_some_and(|n| n >= 1.0), "{text}");
    assert!(denials("Fetch").is_some_and(|n| n >= 1.0), "{text}");
    node.stop().await;

    // A DENY of WRITE on every topic shadows the ALLOW: no WRITE anywhere, no producer id.
    let deny = AclCreation::default()
        .with_resource_type(2)
        .with_resource_name(s("*"))
        .with_resource_pattern_type(3)
        .with_principal(s("User:ANONYMOUS"))
        .with_host(s("*"))
        .with_operation(4)
        .with_permission_type(2);
    let node = start(AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        ..Default::default()
    })
    .await;
    let mut admin = machine.client(&node).await;
    let created: CreateAclsResponse = admin
        .conn
        .call_version(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(vec![deny]),
        )
        .await
        .unwrap();
    assert_eq!(created.results[0].error_code, 0);
    node.stop().await;
    let node = start(AuthorizerConfig::default()).await;
    let mut client = machine.client(&node).await;
    let refused: InitProducerIdResponse = client
        .conn
        .call_version(ApiKey::InitProducerId, 4, &init)
        .await
        .unwrap();
    assert_eq!(refused.error_code, 31, "CLUSTER_AUTHORIZATION_FAILED");
    node.stop().await;
}

// Shows (issue 22): admin and group APIs refused by ACLs with Kafka's codes — CreateTopics,
// DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs (topic 29, broker 31),
// IncrementalAlterConfigs, ElectLeaders, DescribeLogDirs, FindCoordinator, OffsetCommit,
// OffsetFetch, DescribeGroups, DeleteGroups; ListGroups lists only groups the principal may
// describe; DescribeCluster's KIP-430 operations are 0 without DESCRIBE on the cluster — and
// READ on the group and the topic is what an `assign()` consumer's commits need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_and_group_apis_are_authorized_by_acls() {
    use keel_controller::acl::AuthorizerConfig;
    use keel_wire::kafka_protocol::messages::create_acls_request::AclCreation;
    use keel_wire::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use keel_wire::kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use keel_wire::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use keel_wire::kafka_protocol::messages::{
        CreateAclsRequest, CreateAclsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
        DeleteGroupsRequest, DeleteGroupsResponse, DeleteRecordsRequest, DeleteRecordsResponse,
        DescribeClusterRequest, DescribeClusterResponse, DescribeConfigsRequest,
        DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
        DescribeLogDirsRequest, DescribeLogDirsResponse, ElectLeadersRequest, ElectLeadersResponse,
    };
    let s = |t: &str| StrBytes::from_string(t.to_string());
    let machine = Machine::formatted();
    let start = |authorizer: AuthorizerConfig| {
        let mut c = config(NODE, &[]);
        c.authorizer = Some(authorizer);
        machine.start_config(c, Arc::new(SystemClock))
    };
    let root = || AuthorizerConfig {
        super_users: ["User:ANONYMOUS".to_string()].into(),
        allow_everyone_if_no_acl_found: false,
    };
    let node = start(root()).await;
    let mut client = machine.client(&node).await;
    client.create_topic("t", 1, &[]).await;
    client.produce("t", 0, -1, &values("v", 0..3)).await;
    assert_eq!(
        client.find_coordinator("g").await,
        0,
        "__consumer_offsets is ready"
    );
    assert_eq!(client.commit("g", "t", 0, 1).await, 0);
    node.stop().await;

    let node = start(AuthorizerConfig::default()).await;
    let mut client = machine.client(&node).await;
    let mut create = CreateTopicsRequest::default().with_timeout_ms(10_000);
    create.topics.push(
        CreatableTopic::default()
            .with_name(name("new"))
            .with_num_partitions(1)
            .with_replication_factor(1),
    );
    let created: CreateTopicsResponse = client
        .conn
        .call_version(ApiKey::CreateTopics, 7, &create)
        .await
        .unwrap();
    assert_eq!(created.topics[0].error_code, 29, "{created:?}");
    let grow = CreatePartitionsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(name("t"))
            .with_count(2)]);
    let grown: CreatePartitionsResponse = client
        .conn
        .call_version(ApiKey::CreatePartitions, 3, &grow)
        .await
        .unwrap();
    assert_eq!(grown.results[0].error_code, 29);
    let trim = DeleteRecordsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![DeleteRecordsTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(1)])]);
    let trimmed: DeleteRecordsResponse = client
        .conn
        .call_version(ApiKey::DeleteRecords, 2, &trim)
        .await
        .unwrap();
    assert_eq!(trimmed.topics[0].partitions[0].error_code, 29);
    let configs = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(s("t")),
        DescribeConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(s(&NODE.to_string())),
    ]);
    let described: DescribeConfigsResponse = client
        .conn
        .call_version(ApiKey::DescribeConfigs, 4, &configs)
        .await
        .unwrap();
    let codes: Vec<i16> = described.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [29, 31]);
    let elect = ElectLeadersRequest::default()
        .with_election_type(0)
        .with_timeout_ms(10_000)
        .with_topic_partitions(None);
    let elected: ElectLeadersResponse = client
        .conn
        .call_version(ApiKey::ElectLeaders, 2, &elect)
        .await
        .unwrap();
    assert_eq!(elected.error_code, 31);
    let dirs: DescribeLogDirsResponse = client
        .conn
        .call_version(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default().with_topics(None),
        )
        .await
        .unwrap();
    assert_eq!((dirs.error_code, dirs.results.len()), (31, 0));
    let find = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s("g")]);
    let found: FindCoordinatorResponse = client
        .conn
        .call_version(ApiKey::FindCoordinator, 4, &find)
        .await
        .unwrap();
    assert_eq!(found.coordinators[0].error_code, 30);
    assert_eq!(client.commit("g", "t", 0, 2).await, 30);
    let groups: DescribeGroupsResponse = client
        .conn
        .call_version(
            ApiKey::DescribeGroups,
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
        )
        .await
        .unwrap();
    assert_eq!(groups.groups[0].error_code, 30);
    assert!(
        client.group_ids().await.is_empty(),
        "a group it may not describe is not listed"
    );
    let deleted: DeleteGroupsResponse = client
        .conn
        .call_version(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
        )
        .await
        .unwrap();
    assert_eq!(deleted.results[0].error_code, 30);
    let cluster: DescribeClusterResponse = client
        .conn
        .call_version(
            ApiKey::DescribeCluster,
            1,
            &DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
        )
        .await
        .unwrap();
    assert_eq!(cluster.cluster_authorized_operations, 0);
    let delete = DeleteTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![DeleteTopicState::default().with_name(Some(name("t")))]);
    let refused: DeleteTopicsResponse = client
        .conn
        .call_version(ApiKey::DeleteTopics, 6, &delete)
        .await
        .unwrap();
    assert_eq!(refused.responses[0].error_code, 29, "{refused:?}");
    node.stop().await;

    // READ on the group and the topic: an assign() consumer commits and reads its offsets back.
    let node = start(root()).await;
    let mut admin = machine.client(&node).await;
    let acl = |resource_type: i8, resource: &str| {
        AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(resource))
            .with_resource_pattern_type(3)
            .with_principal(s("User:ANONYMOUS"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3)
    };
    let granted: CreateAclsResponse = admin
        .conn
        .call_version(
            ApiKey::CreateAcls,
            3,
            &CreateAclsRequest::default().with_creations(vec![acl(3, "g"), acl(2, "t")]),
        )
        .await
        .unwrap();
    assert!(granted.results.iter().all(|r| r.error_code == 0));
    node.stop().await;
    let node = start(AuthorizerConfig::default()).await;
    let mut client = machine.client(&node).await;
    assert_eq!(client.find_coordinator("g").await, 0);
    assert_eq!(client.commit("g", "t", 0, 2).await, 0);
    assert_eq!(client.committed("g", "t", 0).await, 2);
    assert_eq!(client.group_ids().await, ["g"]);
    node.stop().await;
}

// Shows (issue 22): AlterClientQuotas through a broker reaches the controller, is answered once
// the broker's image has it (DescribeClientQuotas at once shows it, with Kafka's filters), and
// refuses what Kafka refuses per entry; with an authorizer it needs ALTER_CONFIGS on the
// cluster (CLUSTER_AUTHORIZATION_FAILED for every entry without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_quotas_are_altered_and_described_through_the_broker() {
    use keel_controller::acl::AuthorizerConfig;
    use keel_wire::kafka_protocol::messages::alter_client_quotas_request::{
        EntityData, EntryData, OpData,
    };
    use keel_wire::kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use keel_wire::kafka_protocol::messages::{
        AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
    };
    let s = |t: &str| StrBytes::from_string(t.to_string());
    let entry = |entity: &[(&str, Option<&str>)], ops: &[(&str, Option<f64>)]| {
        EntryData::default()
            .with_entity(
                entity
                    .iter()
                    .map(|(t, n)| {
                        EntityData::default()
                            .with_entity_type(s(t))
                            .with_entity_name(n.map(s))
                    })
                    .collect(),
            )
            .with_ops(
                ops.iter()
                    .map(|(k, v)| {
                        OpData::default()
                            .with_key(s(k))
                            .with_value(v.unwrap_or(0.0))
                            .with_remove(v.is_none())
                    })
                    .collect(),
            )
    };
    let alter = AlterClientQuotasRequest::default().with_entries(vec![
        entry(
            &[("user", Some("alice"))],
            &[("producer_byte_rate", Some(1048576.0))],
        ),
        entry(
            &[("user", None), ("client-id", None)],
            &[("consumer_byte_rate", Some(2e6))],
        ),
        entry(&[("ip", Some("1.2.3.4")), ("user", Some("x"))], &[]),
    ]);
    let machine = Machine::formatted();
    let node = machine
        .start_config(config(NODE, &[]), Arc::new(SystemClock))
        .await;
    let mut client = machine.client(&node).await;
    let altered: AlterClientQuotasResponse = client
        .conn
        .call_version(ApiKey::AlterClientQuotas, 1, &alter)
        .await
        .unwrap();
    let codes: Vec<i16> = altered.entries.iter().map(|e| e.error_code).collect();
    assert_eq!(codes, [0, 0, 42], "{altered:?}");
    let describe = |components: Vec<ComponentData>, strict: bool| {
        DescribeClientQuotasRequest::default()
            .with_components(components)
            .with_strict(strict)
    };
    let user_alice = ComponentData::default()
        .with_entity_type(s("user"))
        .with_match_type(0)
        .with_match(Some(s("alice")));
    let described: DescribeClientQuotasResponse = client
        .conn
        .call_version(
            ApiKey::DescribeClientQuotas,
            1,
            &describe(vec![user_alice.clone()], true),
        )
        .await
        .unwrap();
    let entries = described.entries.unwrap();
    assert_eq!(entries.len(), 1, "at once, from the broker's own image");
    assert_eq!(entries[0].values[0].key.as_str(), "producer_byte_rate");
    assert_eq!(entries[0].values[0].value, 1048576.0);
    let everything: DescribeClientQuotasResponse = client
        .conn
        .call_version(ApiKey::DescribeClientQuotas, 1, &describe(vec![], false))
        .await
        .unwrap();
    assert_eq!(everything.entries.unwrap().len(), 2);
    node.stop().await;

    // With an authorizer and no grant: refused, nothing changes.
    let mut c = config(NODE, &[]);
    c.authorizer = Some(AuthorizerConfig::default());
    let node = machine.start_config(c, Arc::new(SystemClock)).await;
    let mut client = machine.client(&node).await;
    let removal = AlterClientQuotasRequest::default().with_entries(vec![entry(
        &[("user", Some("alice"))],
        &[("producer_byte_rate", None)],
    )]);
    let refused: AlterClientQuotasResponse = client
        .conn
        .call_version(ApiKey::AlterClientQuotas, 1, &removal)
        .await
        .unwrap();
    assert_eq!(refused.entries[0].error_code, 31, "{refused:?}");
    let described: DescribeClientQuotasResponse = client
        .conn
        .call_version(
            ApiKey::DescribeClientQuotas,
            1,
            &describe(vec![user_alice], true),
        )
        .await
        .unwrap();
    assert_eq!(described.error_code, 31, "DESCRIBE_CONFIGS on the cluster");
    node.stop().await;
}

// A transactions v2 producer (Java 4.x) adds no partitions itself: its first batches of a
// transaction reach their leaders together, and each leader adds its partition with the
// coordinator. Those adds — and the first one after EndTxn, while the markers are being written
// — wait their turn at the coordinator instead of being refused (`CONCURRENT_TRANSACTIONS`,
// which a produce answers as `NOT_ENOUGH_REPLICAS`, costing the client its retry backoff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_producers_concurrent_first_writes_are_all_added_without_a_refusal() {
    use keel_log::plain_batch::{set_producer, set_transactional_producer};
    use keel_wire::kafka_protocol::messages::{
        EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
        TransactionalId,
    };
    const PARTITIONS: i32 = 6;
    const TXN_ID: &str = "concurrent-adds";
    let machine = Machine::formatted();
    let node = machine
        .start_with(&[
            ("transaction.state.log.replication.factor", "1"),
            ("transaction.state.log.min.isr", "1"),
            ("transaction.state.log.num.partitions", "1"),
        ])
        .await;
    let mut admin = machine.client(&node).await;
    admin.create_topic("v2", PARTITIONS, &[]).await;
    let txn_id = || TransactionalId(StrBytes::from_static_str(TXN_ID));

    // The coordinator (this node) found and loaded, then a producer id.
    let deadline = Instant::now() + NODE_TIMEOUT;
    let (mut pid, mut epoch) = loop {
        let found: FindCoordinatorResponse = admin
            .conn
            .call_version(
                ApiKey::FindCoordinator,
                4,
                &FindCoordinatorRequest::default()
                    .with_key_type(1)
                    .with_coordinator_keys(vec![StrBytes::from_static_str(TXN_ID)]),
            )
            .await
            .unwrap();
        if found.coordinators[0].error_code == 0 {
            let init: InitProducerIdResponse = admin
                .conn
                .call_version(
                    ApiKey::InitProducerId,
                    5,
                    &InitProducerIdRequest::default()
                        .with_transactional_id(Some(txn_id()))
                        .with_transaction_timeout_ms(60_000)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                )
                .await
                .unwrap();
            if init.error_code == 0 {
                break (init.producer_id.0, init.producer_epoch);
            }
        }
        assert!(Instant::now() < deadline, "no transaction coordinator");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let mut writers = Vec::new();
    for _ in 0..PARTITIONS {
        writers.push(machine.client(&node).await);
    }
    for round in 0..5 {
        // Every partition's first write of the transaction at once, each on its connection.
        let writes = writers.iter_mut().enumerate().map(|(p, w)| {
            let mut batch = build_batch(&[(None, format!("r{round}p{p}").as_bytes())], 0);
            set_transactional_producer(&mut batch, pid, epoch);
            set_producer(&mut batch, pid, epoch, 0);
            let request = ProduceRequest::default()
                .with_transactional_id(Some(txn_id()))
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name("v2"))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(p as i32)
                        .with_records(Some(Bytes::from(batch)))])]);
            async move {
                let response: ProduceResponse = w
                    .conn
                    .call_version(ApiKey::Produce, 12, &request)
                    .await
                    .unwrap();
                response.responses[0].partition_responses[0].error_code
            }
        });
        let codes = futures_util::future::join_all(writes).await;
        assert_eq!(
            codes,
            vec![0; PARTITIONS as usize],
            "round {round}: every first write added and appended"
        );
        // EndTxn v5 answers the bumped epoch; the next round starts at once, while the markers
        // are being written.
        let ended: EndTxnResponse = admin
            .conn
            .call_version(
                ApiKey::EndTxn,
                5,
                &EndTxnRequest::default()
                    .with_transactional_id(txn_id())
                    .with_producer_id(ProducerId(pid))
                    .with_producer_epoch(epoch)
                    .with_committed(true),
            )
            .await
            .unwrap();
        assert_eq!(ended.error_code, 0, "round {round}: {ended:?}");
        (pid, epoch) = (ended.producer_id.0, ended.producer_epoch);
    }
    node.stop().await;
}
