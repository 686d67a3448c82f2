//! `keel bench`: a load generator speaking the Kafka protocol directly, so it can drive Keel
//! and Apache Kafka alike. Producers send uncompressed batches of fixed-size records and time
//! each Produce request (acks latency); consumers then read everything back from offset 0.
//! It prints throughput (records/s, MB/s) and latency percentiles; it asserts nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use keel_log::batch::BatchIter;
use keel_node::client::Connection;
use keel_node::net::{BoxStream, TcpNetwork};
use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

/// Kafka's TOPIC_ALREADY_EXISTS error code.
const TOPIC_ALREADY_EXISTS: i16 = 36;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// A broker to start from (`host:port`).
    #[arg(long, default_value = "localhost:9092")]
    bootstrap: String,
    /// Topic to use; created if missing. Default: a fresh `keel-bench-<millis>`.
    #[arg(long)]
    topic: Option<String>,
    #[arg(long, default_value_t = 6)]
    partitions: i32,
    #[arg(long, default_value_t = 1)]
    replication_factor: i16,
    /// Records to produce in total.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Records per batch (one batch per Produce request).
    #[arg(long, default_value_t = 64)]
    batch_records: usize,
    /// Concurrent producers (each with its own connection per leader).
    #[arg(long, default_value_t = 2)]
    producers: usize,
    /// `all`, `1` or `0`.
    #[arg(long, default_value = "all")]
    acks: String,
    /// Target rate over all producers in records/s (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Concurrent consumers reading everything back afterwards (0 = skip).
    #[arg(long, default_value_t = 1)]
    consumers: usize,
}

fn parse_acks(text: &str) -> anyhow::Result<i16> {
    match text {
        "all" | "-1" => Ok(-1),
        "1" => Ok(1),
        "0" => Ok(0),
        other => bail!("--acks must be all, 1 or 0, not {other:?}"),
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(bench(args))
}

/// Where each partition's leader listens.
type Leaders = BTreeMap<i32, String>;

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let acks = parse_acks(&args.acks)?;
    if args.batch_records == 0 || args.producers == 0 || args.partitions < 1 {
        bail!("--batch-records, --producers and --partitions must be positive");
    }
    let topic = args.topic.clone().unwrap_or_else(|| {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("keel-bench-{millis}")
    });
    let mut admin = Connection::connect(&TcpNetwork, &args.bootstrap, "keel-bench")
        .await
        .with_context(|| format!("cannot connect to {}", args.bootstrap))?;
    create_topic(&mut admin, &topic, args.partitions, args.replication_factor).await?;
    let leaders = wait_for_leaders(&mut admin, &topic, args.partitions).await?;
    println!(
        "topic {topic}: {} partitions, {} records x {} B, batches of {}, {} producers, acks={}",
        args.partitions,
        args.records,
        args.record_bytes,
        args.batch_records,
        args.producers,
        args.acks
    );

    let batch = Bytes::from(build_payload_batch(args.batch_records, args.record_bytes));
    let batches_total = args.records.div_ceil(args.batch_records as u64);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for producer in 0..args.producers {
        let share =
            (batches_total + (args.producers - 1 - producer) as u64) / args.producers as u64;
        let interval = (args.rate > 0).then(|| {
            let per_producer = args.rate as f64 / args.producers as f64;
            Duration::from_secs_f64(args.batch_records as f64 / per_producer)
        });
        tasks.push(tokio::spawn(produce(
            topic.clone(),
            leaders.clone(),
            producer,
            args.partitions,
            share,
            batch.clone(),
            acks,
            interval,
        )));
    }
    let mut latencies_us = Vec::new();
    for task in tasks {
        latencies_us.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let produced = batches_total * args.batch_records as u64;
    report("produce", produced, args.record_bytes, elapsed);
    if acks != 0 {
        report_latency(&mut latencies_us);
    }

    if args.consumers > 0 && acks != 0 {
        let started = Instant::now();
        let consumed =
            consume_all(&topic, &leaders, args.consumers, args.partitions, produced).await?;
        report("consume", consumed, args.record_bytes, started.elapsed());
    }
    Ok(())
}

fn report(phase: &str, records: u64, record_bytes: usize, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64().max(1e-9);
    let rate = records as f64 / seconds;
    println!(
        "{phase}: {records} records in {seconds:.2} s: {rate:.0} records/s, {:.1} MB/s",
        rate * record_bytes as f64 / 1e6
    );
}

fn report_latency(latencies_us: &mut [u64]) {
    if latencies_us.is_empty() {
        return;
    }
    latencies_us.sort_unstable();
    let pick = |q: f64| {
        let index = ((latencies_us.len() as f64 - 1.0) * q).round() as usize;
        latencies_us[index] as f64 / 1000.0
    };
    println!(
        "produce latency (per request, ms): p50 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
        pick(0.5),
        pick(0.99),
        pick(0.999),
        pick(1.0)
    );
}

/// One batch of `count` records with `record_bytes`-byte values, reused for every request
/// (the broker assigns offsets; the payload is what is measured).
fn build_payload_batch(count: usize, record_bytes: usize) -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..count)
        .map(|i| {
            (0..record_bytes)
                .map(|j| ((i * 31 + j * 7) % 251) as u8)
                .collect()
        })
        .collect();
    let records: Vec<(Option<&[u8]>, &[u8])> =
        values.iter().map(|v| (None, v.as_slice())).collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    keel_log::plain_batch::build_batch(&records, now_ms)
}

async fn create_topic(
    admin: &mut Connection<BoxStream>,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
) -> anyhow::Result<()> {
    let version = admin.version(ApiKey::CreateTopics, 2, 7)?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)]);
    let response: CreateTopicsResponse = admin
        .call_version(ApiKey::CreateTopics, version, &request)
        .await?;
    for result in &response.topics {
        if result.error_code != 0 && result.error_code != TOPIC_ALREADY_EXISTS {
            bail!(
                "cannot create {topic}: error {} {}",
                result.error_code,
                result.error_message.as_deref().unwrap_or("")
            );
        }
    }
    Ok(())
}

async fn wait_for_leaders(
    admin: &mut Connection<BoxStream>,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<Leaders> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let version = admin.version(ApiKey::Metadata, 4, 12)?;
        let request = MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_string())),
            ))]))
            .with_allow_auto_topic_creation(false);
        let response: MetadataResponse = admin
            .call_version(ApiKey::Metadata, version, &request)
            .await?;
        let brokers: BTreeMap<i32, String> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        let mut leaders = Leaders::new();
        if let Some(t) = response.topics.first() {
            for p in &t.partitions {
                if let Some(addr) = brokers.get(&p.leader_id.0) {
                    leaders.insert(p.partition_index, addr.clone());
                }
            }
        }
        if leaders.len() == usize::try_from(partitions).unwrap_or(0) {
            return Ok(leaders);
        }
        if Instant::now() > deadline {
            bail!("partitions of {topic} have no leader after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn produce(
    topic: String,
    leaders: Leaders,
    producer: usize,
    partitions: i32,
    batches: u64,
    batch: Bytes,
    acks: i16,
    interval: Option<Duration>,
) -> anyhow::Result<Vec<u64>> {
    let mut connections: BTreeMap<String, Connection<BoxStream>> = BTreeMap::new();
    for addr in leaders.values() {
        if !connections.contains_key(addr) {
            connections.insert(
                addr.clone(),
                Connection::connect(&TcpNetwork, addr, "keel-bench").await?,
            );
        }
    }
    let name = TopicName(StrBytes::from_string(topic));
    let mut latencies = Vec::with_capacity(usize::try_from(batches).unwrap_or(0));
    let mut next_send = Instant::now();
    for i in 0..batches {
        let partition = ((producer as u64 + i) % partitions as u64) as i32;
        let connection = connections
            .get_mut(&leaders[&partition])
            .expect("a connection per leader");
        let version = connection.version(ApiKey::Produce, 3, 11)?;
        let request = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name.clone())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch.clone()))])]);
        if let Some(interval) = interval {
            tokio::time::sleep_until(next_send.into()).await;
            next_send += interval;
        }
        let sent = Instant::now();
        if acks == 0 {
            connection
                .send_only(ApiKey::Produce, version, &request)
                .await?;
            continue;
        }
        let response: ProduceResponse = connection
            .call_version(ApiKey::Produce, version, &request)
            .await?;
        latencies.push(sent.elapsed().as_micros() as u64);
        for t in &response.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    bail!(
                        "produce to partition {partition} failed with error {}",
                        p.error_code
                    );
                }
            }
        }
    }
    Ok(latencies)
}

async fn consume_all(
    topic: &str,
    leaders: &Leaders,
    consumers: usize,
    partitions: i32,
    expected: u64,
) -> anyhow::Result<u64> {
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for consumer in 0..consumers {
        let mine: Vec<i32> = (0..partitions)
            .filter(|p| *p as usize % consumers == consumer)
            .collect();
        // One fetch loop per leader: each partition is read from its leader.
        let mut by_leader: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for p in mine {
            by_leader.entry(leaders[&p].clone()).or_default().push(p);
        }
        for (addr, group) in by_leader {
            let (topic, counted) = (topic.to_string(), counted.clone());
            tasks.push(tokio::spawn(async move {
                consume_partitions(&topic, &addr, &group, counted, expected).await
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    Ok(counted.load(std::sync::atomic::Ordering::Relaxed))
}

async fn consume_partitions(
    topic: &str,
    addr: &str,
    partitions: &[i32],
    counted: Arc<std::sync::atomic::AtomicU64>,
    expected: u64,
) -> anyhow::Result<()> {
    let mut connection = Connection::connect(&TcpNetwork, addr, "keel-bench").await?;
    let version = connection.version(ApiKey::Fetch, 4, 12)?;
    let mut offsets: BTreeMap<i32, i64> = partitions.iter().map(|p| (*p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut idle_rounds = 0;
    while counted.load(std::sync::atomic::Ordering::Relaxed) < expected && Instant::now() < deadline
    {
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(50 * 1024 * 1024)
            .with_isolation_level(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(p, o)| {
                            FetchPartition::default()
                                .with_partition(*p)
                                .with_fetch_offset(*o)
                                .with_current_leader_epoch(-1)
                                .with_last_fetched_epoch(-1)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(10 * 1024 * 1024)
                        })
                        .collect(),
                )]);
        let response: FetchResponse = connection
            .call_version(ApiKey::Fetch, version, &request)
            .await?;
        let mut got = 0;
        for t in &response.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    bail!(
                        "fetch from partition {} failed with error {}",
                        p.partition_index,
                        p.error_code
                    );
                }
                let Some(records) = &p.records else { continue };
                let offset = offsets
                    .get_mut(&p.partition_index)
                    .expect("requested partition");
                for batch in BatchIter::new(records) {
                    let batch = batch.context("fetched a corrupt batch")?;
                    let next = batch.header.next_offset().0;
                    if next > *offset {
                        got += (next - *offset) as u64;
                        *offset = next;
                    }
                }
            }
        }
        counted.fetch_add(got, std::sync::atomic::Ordering::Relaxed);
        idle_rounds = if got == 0 { idle_rounds + 1 } else { 0 };
        if idle_rounds > 20 {
            bail!("no progress for 20 fetches");
        }
    }
    Ok(())
}
