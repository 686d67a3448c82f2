//! The Prometheus endpoint of a running node (issue 7, "Metrics"): a single-node cluster (its
//! controller in-process, reporting into the broker's registry) with `metrics.port=0`, scraped
//! over real TCP as Prometheus would. Files live in `MemStorage`; client and scrape connections
//! are real sockets on 127.0.0.1.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use keel_log::plain_batch::build_batch;
use keel_log::storage::MemStorage;
use keel_log::LogDir;
use keel_node::client::Connection;
use keel_node::clock::{Clock, SystemClock};
use keel_node::config::BrokerConfig;
use keel_node::net::{BoxStream, Network, TcpNetwork};
use keel_node::runtime::{self, Ready};
use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const NODE: i32 = 1;
const DIR: &str = "/data/a";
const TOPIC: &str = "metered";
/// How long the node may take to start, and a condition to become true.
const WAIT_FOR: Duration = Duration::from_secs(20);

fn config() -> BrokerConfig {
    let props: BTreeMap<String, String> = [
        ("node.id", "1"),
        ("log.dirs", DIR),
        ("listeners", "PLAINTEXT://127.0.0.1:0"),
        ("metrics.port", "0"),
        ("broker.heartbeat.interval.ms", "200"),
        ("broker.session.timeout.ms", "1000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    BrokerConfig::from_properties(&props).unwrap()
}

/// `GET path` over a fresh TCP connection; returns (status line, headers and body).
async fn http_get(address: &str, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (status, rest) = answer.split_once("\r\n").unwrap();
    (status.to_string(), rest.to_string())
}

async fn scrape(address: &str) -> String {
    let (status, rest) = http_get(address, "/metrics").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{rest}");
    assert!(
        rest.contains("Content-Type: text/plain; version=0.0.4"),
        "{rest}"
    );
    rest.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The value of the sample `series` (name with labels, exactly as encoded); 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// Scrapes until `check` holds for some scrape, which it returns.
async fn scrape_until(address: &str, what: &str, check: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT_FOR;
    loop {
        let text = scrape(address).await;
        if check(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never saw {what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

async fn create_topic(conn: &mut Connection<BoxStream>) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(TOPIC))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let response: CreateTopicsResponse = conn
        .call_version(ApiKey::CreateTopics, 7, &request)
        .await
        .unwrap();
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

/// Produces one batch of `count` records (retrying while the partition has no leader yet);
/// returns the batch's size in bytes.
async fn produce(conn: &mut Connection<BoxStream>, count: usize) -> usize {
    let values: Vec<String> = (0..count).map(|i| format!("value-{i}")).collect();
    let records: Vec<(Option<&[u8]>, &[u8])> =
        values.iter().map(|v| (None, v.as_bytes())).collect();
    let batch = Bytes::from(build_batch(&records, SystemClock.now_ms()));
    let size = batch.len();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch))])]);
    let deadline = Instant::now() + WAIT_FOR;
    loop {
        let response: ProduceResponse = conn
            .call_version(ApiKey::Produce, 9, &request)
            .await
            .unwrap();
        let error = response.responses[0].partition_responses[0].error_code;
        if error == 0 {
            return size;
        }
        assert!(Instant::now() < deadline, "produce failed: {response:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A consumer fetch of partition 0 from offset 0; returns the bytes of records answered.
async fn consume(conn: &mut Connection<BoxStream>) -> usize {
    let request = FetchRequest::default()
        .with_replica_id(keel_wire::kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let response: FetchResponse = conn
        .call_version(ApiKey::Fetch, 12, &request)
        .await
        .unwrap();
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0, "{response:?}");
    partition.records.as_ref().map_or(0, Bytes::len)
}

// Shows: a node with metrics.port set serves /metrics (404 elsewhere); producing and consuming
// move bytes and records in and out and the Produce latency histogram; the in-process
// controller reports itself active and KIP-966's electable_replicas_count for the partition
// (issue 7, "Metrics").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_its_metrics() {
    let storage = Arc::new(MemStorage::new());
    LogDir::format(
        storage.clone(),
        Path::new(DIR),
        "metrics-test",
        NODE,
        Uuid::new_v4(),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Ready>();
    let network: Arc<dyn Network> = Arc::new(TcpNetwork);
    let node = tokio::spawn(runtime::run(
        config(),
        storage,
        Arc::new(SystemClock),
        network.clone(),
        shutdown.clone(),
        move |ready| {
            let _ = ready_tx.send(ready.clone());
        },
    ));
    let ready = tokio::time::timeout(WAIT_FOR, ready_rx)
        .await
        .expect("the node did not start in time")
        .expect("the node stopped before it was ready");
    let metrics = ready.metrics.clone().expect("metrics.port is set");

    let (status, _) = http_get(&metrics, "/other").await;
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    let before = scrape(&metrics).await;
    let produce_count =
        "keel_request_latency_seconds_count{node_id=\"1\",listener=\"broker\",api=\"Produce\"}";
    assert_eq!(sample(&before, produce_count), 0.0);

    let mut conn = Connection::connect(&*network, &ready.bootstrap, "metrics-test")
        .await
        .unwrap();
    create_topic(&mut conn).await;
    let produced = produce(&mut conn, 5).await;
    let consumed = consume(&mut conn).await;
    assert_eq!(consumed, produced);

    let text = scrape(&metrics).await;
    assert_eq!(
        sample(&text, "keel_bytes_in_total{node_id=\"1\"}"),
        produced as f64,
        "{text}"
    );
    assert_eq!(sample(&text, "keel_records_in_total{node_id=\"1\"}"), 5.0);
    assert_eq!(
        sample(&text, "keel_bytes_out_total{node_id=\"1\"}"),
        consumed as f64
    );
    assert_eq!(sample(&text, "keel_records_out_total{node_id=\"1\"}"), 5.0);
    assert!(sample(&text, produce_count) >= 1.0, "{text}");
    let heartbeats = "keel_request_latency_seconds_count{node_id=\"1\",listener=\"controller\",\
                      api=\"BrokerHeartbeat\"}";
    assert!(sample(&text, heartbeats) >= 1.0, "{text}");

    // The controller publishes its gauges on its 500 ms tick.
    let electable =
        format!("keel_electable_replicas_count{{node_id=\"1\",topic=\"{TOPIC}\",partition=\"0\"}}");
    let text = scrape_until(&metrics, "the controller's gauges", |text| {
        sample(text, &electable) == 1.0
    })
    .await;
    assert_eq!(
        sample(&text, "keel_active_controller_count{node_id=\"1\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "keel_offline_partitions_count{node_id=\"1\"}"),
        0.0
    );
    assert_eq!(
        sample(&text, "keel_global_partition_count{node_id=\"1\"}"),
        1.0
    );
    assert_eq!(
        sample(&text, "keel_active_broker_count{node_id=\"1\"}"),
        1.0
    );
    // The broker's sweep (every 50 ms) sees the partition it leads, fully replicated.
    let text = scrape_until(&metrics, "the broker's partition gauges", |text| {
        sample(text, "keel_leader_count{node_id=\"1\"}") == 1.0
    })
    .await;
    assert_eq!(
        sample(
            &text,
            "keel_under_replicated_partitions_count{node_id=\"1\"}"
        ),
        0.0
    );
    assert_eq!(
        sample(&text, "keel_under_min_isr_partitions_count{node_id=\"1\"}"),
        0.0
    );

    shutdown.cancel();
    tokio::time::timeout(WAIT_FOR, node)
        .await
        .expect("the node did not stop in time")
        .unwrap()
        .unwrap();
    // The endpoint stops with the node.
    assert!(tokio::net::TcpStream::connect(&metrics).await.is_err());
}

// Shows: a metrics.port that cannot be bound stops the start with an error naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_metrics_port_is_a_clear_error() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap().port();
    let storage = Arc::new(MemStorage::new());
    LogDir::format(
        storage.clone(),
        Path::new(DIR),
        "metrics-test",
        NODE,
        Uuid::new_v4(),
    )
    .unwrap();
    let mut config = config();
    config.metrics_endpoint = Some(keel_node::metrics::MetricsEndpoint {
        host: "127.0.0.1".into(),
        port,
    });
    let outcome = runtime::run(
        config,
        storage,
        Arc::new(SystemClock),
        Arc::new(TcpNetwork),
        CancellationToken::new(),
        |_| {},
    )
    .await;
    let error = format!("{:#}", outcome.unwrap_err());
    assert!(error.contains("metrics.port"), "{error}");
}
