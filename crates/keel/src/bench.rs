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
use keel_node::net::BoxStream;
use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use keel_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use keel_wire::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;

/// How long a CreateTopics may take (the request's `timeout_ms`).
const CREATE_TIMEOUT_MS: i32 = 300_000;

/// Kafka's TOPIC_ALREADY_EXISTS error code.
const TOPIC_ALREADY_EXISTS: i16 = 36;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// A broker to start from (`host:port`).
    #[arg(long, default_value = "localhost:9092")]
    bootstrap: String,
    /// Client security settings (`security.protocol`, `ssl.*`, `sasl.*`), as Kafka's tools
    /// take them.
    #[arg(long = "command-config", value_name = "FILE")]
    command_config: Option<std::path::PathBuf>,
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
    /// Produce nothing: read an existing `--topic` from its log start offsets up to its end
    /// offsets at the start of the run, with `--consumers` consumers (a catch-up read).
    #[arg(long, requires = "topic", conflicts_with = "end_to_end")]
    consume_only: bool,
    /// Measure end-to-end latency instead of throughput: send this many single-record batches
    /// to partition 0, one at a time, while a consumer long-polls it from the same leader;
    /// each latency runs from the send until the consumer's fetch returns the record (which
    /// needs the high watermark past it, i.e. `min.insync.replicas` replicas for any `--acks`).
    #[arg(long, value_name = "RECORDS")]
    end_to_end: Option<u64>,
    /// Produce nothing: time the creation of a new topic of `--partitions` partitions (one
    /// CreateTopics request, answered once the answering broker has the topic in its
    /// metadata), then until the broker's metadata names a leader for every partition.
    #[arg(long, conflicts_with_all = ["consume_only", "end_to_end"])]
    create_only: bool,
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
    crate::admin::install_client_network(args.command_config.as_deref())?;
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
    if args.end_to_end.is_some() && acks == 0 {
        bail!("--end-to-end needs --acks 1 or all (each send waits for its offset)");
    }
    let topic = args.topic.clone().unwrap_or_else(|| {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        format!("keel-bench-{millis}")
    });
    let mut admin = Connection::connect(crate::admin::network(), &args.bootstrap, "keel-bench")
        .await
        .with_context(|| format!("cannot connect to {}", args.bootstrap))?;
    if args.consume_only {
        return catch_up(&mut admin, &topic, args.consumers.max(1), args.record_bytes).await;
    }
    if args.create_only {
        return time_creation(&mut admin, &topic, args.partitions, args.replication_factor).await;
    }
    create_topic(&mut admin, &topic, args.partitions, args.replication_factor).await?;
    let leaders = wait_for_leaders(&mut admin, &topic).await?;
    // An existing topic keeps its own partition count, whatever --partitions says.
    let partitions = i32::try_from(leaders.len())?;
    if partitions != args.partitions {
        eprintln!(
            "topic {topic} already exists with {partitions} partitions (not --partitions {}); using them",
            args.partitions
        );
    }
    if let Some(count) = args.end_to_end {
        return end_to_end(&topic, &leaders[&0], count, args.record_bytes, acks).await;
    }
    println!(
        "topic {topic}: {partitions} partitions, {} records x {} B, batches of {}, {} producers, acks={}",
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
            partitions,
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
            consume_all(&topic, &leaders, args.consumers, &BTreeMap::new(), produced).await?;
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
        .with_timeout_ms(CREATE_TIMEOUT_MS)
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

/// `--create-only`: creates `topic` (which must be new) and prints how long the CreateTopics
/// answer took and how long until every partition had a leader in the broker's metadata, with
/// both per 10,000 partitions.
async fn time_creation(
    admin: &mut Connection<BoxStream>,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
) -> anyhow::Result<()> {
    let (existing, _) = leaders_now(admin, topic).await?;
    if existing > 0 {
        bail!("--create-only needs a new topic; {topic} exists");
    }
    let started = Instant::now();
    create_topic(admin, topic, partitions, replication_factor).await?;
    let answered = started.elapsed();
    let leaders = wait_for_leaders(admin, topic).await?;
    let led = started.elapsed();
    let per_10k = |d: Duration| d.as_secs_f64() * 10_000.0 / f64::from(partitions.max(1));
    println!(
        "create topic {topic}: {partitions} partitions x {replication_factor} replicas: answered in {:.2} s ({:.3} s per 10,000 partitions), every partition led after {:.2} s ({:.3} s per 10,000)",
        answered.as_secs_f64(),
        per_10k(answered),
        led.as_secs_f64(),
        per_10k(led),
    );
    if leaders.len() != usize::try_from(partitions)? {
        bail!("{} of {partitions} partitions led", leaders.len());
    }
    Ok(())
}

/// How long a new topic's partitions may take to get leaders.
const LEADERS_WAIT: Duration = Duration::from_secs(300);

/// Where every partition of `topic` is led, once each one has a leader ([`LEADERS_WAIT`] at
/// most).
async fn wait_for_leaders(
    admin: &mut Connection<BoxStream>,
    topic: &str,
) -> anyhow::Result<Leaders> {
    let deadline = Instant::now() + LEADERS_WAIT;
    loop {
        let (count, leaders) = leaders_now(admin, topic).await?;
        if count > 0 && leaders.len() == count {
            return Ok(leaders);
        }
        if Instant::now() > deadline {
            bail!("partitions of {topic} have no leader after {LEADERS_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The topic's partition count in the answering broker's metadata, and where each partition
/// with a leader listens.
async fn leaders_now(
    admin: &mut Connection<BoxStream>,
    topic: &str,
) -> anyhow::Result<(usize, Leaders)> {
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
    let mut count = 0;
    if let Some(t) = response.topics.first() {
        count = t.partitions.len();
        for p in &t.partitions {
            if let Some(addr) = brokers.get(&p.leader_id.0) {
                leaders.insert(p.partition_index, addr.clone());
            }
        }
    }
    Ok((count, leaders))
}

/// `--consume-only`: reads an existing topic from its log start to the end offsets it has now.
async fn catch_up(
    admin: &mut Connection<BoxStream>,
    topic: &str,
    consumers: usize,
    record_bytes: usize,
) -> anyhow::Result<()> {
    let (count, leaders) = leaders_now(admin, topic).await?;
    if count == 0 {
        bail!("topic {topic} does not exist (or has no partitions)");
    }
    if leaders.len() != count {
        bail!(
            "{} of {topic}'s {count} partitions have no leader",
            count - leaders.len()
        );
    }
    let mut by_leader: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (p, addr) in &leaders {
        by_leader.entry(addr).or_default().push(*p);
    }
    let (mut start, mut expected) = (BTreeMap::new(), 0u64);
    for (addr, partitions) in by_leader {
        let mut connection =
            Connection::connect(crate::admin::network(), addr, "keel-bench").await?;
        let earliest = list_offsets(&mut connection, topic, &partitions, -2).await?;
        let latest = list_offsets(&mut connection, topic, &partitions, -1).await?;
        for p in partitions {
            let (from, to) = (earliest[&p], latest[&p]);
            expected += u64::try_from(to - from).unwrap_or(0);
            start.insert(p, from);
        }
    }
    println!(
        "topic {topic}: {count} partitions, {expected} records to read, {consumers} consumers"
    );
    let started = Instant::now();
    let consumed = consume_all(topic, &leaders, consumers, &start, expected).await?;
    report("consume", consumed, record_bytes, started.elapsed());
    Ok(())
}

/// ListOffsets at `timestamp` (-1 latest, -2 earliest) for partitions this broker leads.
async fn list_offsets(
    connection: &mut Connection<BoxStream>,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let version = connection.version(ApiKey::ListOffsets, 1, 7)?;
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(
                partitions
                    .iter()
                    .map(|p| {
                        ListOffsetsPartition::default()
                            .with_partition_index(*p)
                            .with_current_leader_epoch(-1)
                            .with_timestamp(timestamp)
                    })
                    .collect(),
            )]);
    let response: ListOffsetsResponse = connection
        .call_version(ApiKey::ListOffsets, version, &request)
        .await?;
    let mut offsets = BTreeMap::new();
    for t in &response.topics {
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!(
                    "ListOffsets for partition {} failed with error {}",
                    p.partition_index,
                    p.error_code
                );
            }
            offsets.insert(p.partition_index, p.offset);
        }
    }
    if let Some(missing) = partitions.iter().find(|p| !offsets.contains_key(p)) {
        bail!("ListOffsets answered nothing for partition {missing}");
    }
    Ok(offsets)
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
                Connection::connect(crate::admin::network(), addr, "keel-bench").await?,
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
    start: &BTreeMap<i32, i64>,
    expected: u64,
) -> anyhow::Result<u64> {
    let partitions = i32::try_from(leaders.len()).unwrap_or(i32::MAX);
    let counted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for consumer in 0..consumers {
        let mine: Vec<i32> = (0..partitions)
            .filter(|p| *p as usize % consumers == consumer)
            .collect();
        // One fetch loop per leader: each partition is read from its leader.
        let mut by_leader: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for p in mine {
            let from = start.get(&p).copied().unwrap_or(0);
            by_leader
                .entry(leaders[&p].clone())
                .or_default()
                .insert(p, from);
        }
        for (addr, group) in by_leader {
            let (topic, counted) = (topic.to_string(), counted.clone());
            tasks.push(tokio::spawn(async move {
                consume_partitions(&topic, &addr, group, counted, expected).await
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    Ok(counted.load(std::sync::atomic::Ordering::Relaxed))
}

/// The next offset after each complete batch of a fetched record set. A fetch answer may end
/// inside a batch (Kafka cuts at the size limit); that partial batch is read again next time.
fn batch_ends(records: &[u8]) -> anyhow::Result<Vec<i64>> {
    let mut ends = Vec::new();
    for batch in BatchIter::new(records) {
        match batch {
            Ok(batch) => ends.push(batch.header.next_offset().0),
            Err(keel_log::batch::BatchError::Truncated { .. }) => break,
            Err(e) => return Err(e).context("fetched a corrupt batch"),
        }
    }
    Ok(ends)
}

/// `--end-to-end`: one single-record Produce at a time to partition 0; a consumer on its own
/// connection long-polls the partition, and each record's latency is from its send until the
/// consumer has it.
async fn end_to_end(
    topic: &str,
    leader: &str,
    count: u64,
    record_bytes: usize,
    acks: i16,
) -> anyhow::Result<()> {
    let mut producer = Connection::connect(crate::admin::network(), leader, "keel-bench").await?;
    let start = list_offsets(&mut producer, topic, &[0], -1).await?[&0];
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<(i64, Instant)>();
    let consumer = {
        let (topic, leader) = (topic.to_string(), leader.to_string());
        tokio::spawn(async move { follow(&topic, &leader, start, seen_tx).await })
    };
    let batch = Bytes::from(build_payload_batch(1, record_bytes));
    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let version = producer.version(ApiKey::Produce, 3, 11)?;
    let mut latencies_us = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut caught_up = start;
    for _ in 0..count {
        let request = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name.clone())
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch.clone()))])]);
        let sent = Instant::now();
        let response: ProduceResponse = producer
            .call_version(ApiKey::Produce, version, &request)
            .await?;
        let Some(answer) = response
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
        else {
            bail!("the Produce answer names no partition");
        };
        if answer.error_code != 0 {
            bail!("produce failed with error {}", answer.error_code);
        }
        let offset = answer.base_offset;
        while caught_up <= offset {
            let next = tokio::time::timeout(Duration::from_secs(30), seen.recv()).await;
            match next {
                Ok(Some((end, at))) => {
                    caught_up = end;
                    if end > offset {
                        latencies_us.push(at.saturating_duration_since(sent).as_micros() as u64);
                    }
                }
                Ok(None) => {
                    return Err(consumer.await?.err().unwrap_or_else(|| {
                        anyhow::anyhow!("the consumer stopped before offset {offset}")
                    }))
                }
                Err(_) => bail!("offset {offset} not consumed 30 s after it was acknowledged"),
            }
        }
    }
    drop(seen);
    consumer.abort();
    latencies_us.sort_unstable();
    let mean = latencies_us.iter().sum::<u64>() as f64 / latencies_us.len().max(1) as f64 / 1000.0;
    let pick = |q: f64| {
        let index = ((latencies_us.len() as f64 - 1.0) * q).round() as usize;
        latencies_us.get(index).copied().unwrap_or(0) as f64 / 1000.0
    };
    println!(
        "end-to-end latency ({} records of {record_bytes} B, acks={acks}, ms): avg {mean:.3}  p50 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
        latencies_us.len(),
        pick(0.5),
        pick(0.99),
        pick(0.999),
        pick(1.0)
    );
    Ok(())
}

/// One Fetch (500 ms long poll) of `offsets`' partitions of `topic` from `connection`, each
/// from its offset; moves every offset to the end of the whole batches returned and says how
/// many offsets they advanced in all, and each partition's high watermark.
async fn fetch_once(
    connection: &mut Connection<BoxStream>,
    version: i16,
    topic: &str,
    offsets: &mut BTreeMap<i32, i64>,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> anyhow::Result<(u64, BTreeMap<i32, i64>)> {
    let request = FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
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
                            .with_partition_max_bytes(partition_max_bytes)
                    })
                    .collect(),
            )]);
    let response: FetchResponse = connection
        .call_version(ApiKey::Fetch, version, &request)
        .await?;
    let mut advanced = 0;
    let mut high_watermarks = BTreeMap::new();
    for t in &response.responses {
        for p in &t.partitions {
            if p.error_code != 0 {
                bail!(
                    "fetch from partition {} failed with error {}",
                    p.partition_index,
                    p.error_code
                );
            }
            high_watermarks.insert(p.partition_index, p.high_watermark);
            let Some(records) = &p.records else { continue };
            let Some(offset) = offsets.get_mut(&p.partition_index) else {
                bail!(
                    "the answer names partition {}, not asked for",
                    p.partition_index
                );
            };
            for next in batch_ends(records)? {
                if next > *offset {
                    advanced += (next - *offset) as u64;
                    *offset = next;
                }
            }
        }
    }
    Ok((advanced, high_watermarks))
}

/// Long-polls partition 0 from `from`, sending the end offset of each fetch that returned
/// records (and when it arrived) until the receiver is dropped.
async fn follow(
    topic: &str,
    leader: &str,
    from: i64,
    seen: tokio::sync::mpsc::UnboundedSender<(i64, Instant)>,
) -> anyhow::Result<()> {
    let mut connection = Connection::connect(crate::admin::network(), leader, "keel-bench").await?;
    let version = connection.version(ApiKey::Fetch, 4, 12)?;
    let mut offsets = BTreeMap::from([(0, from)]);
    loop {
        let (advanced, _) = fetch_once(
            &mut connection,
            version,
            topic,
            &mut offsets,
            1024 * 1024,
            1024 * 1024,
        )
        .await?;
        let arrived = Instant::now();
        if advanced > 0 && seen.send((offsets[&0], arrived)).is_err() {
            return Ok(());
        }
    }
}

/// How long one catch-up Fetch may take (a 500 ms long poll answered with up to 50 MB) before
/// the consumer reports it stuck.
const FETCH_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads `offsets`' partitions from their leader at `addr`, from the given offsets, until each
/// reached its high watermark or all consumers together counted `expected` records. A
/// partition at its high watermark is finished and no longer fetched (the other consumers may
/// still be reading theirs); a Fetch without an answer, or partitions below their high
/// watermark that make no progress, are reported with the partitions, offsets and leader.
async fn consume_partitions(
    topic: &str,
    addr: &str,
    mut offsets: BTreeMap<i32, i64>,
    counted: Arc<std::sync::atomic::AtomicU64>,
    expected: u64,
) -> anyhow::Result<()> {
    let mut connection = Connection::connect(crate::admin::network(), addr, "keel-bench").await?;
    let version = connection.version(ApiKey::Fetch, 4, 12)?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut idle_rounds = 0;
    while !offsets.is_empty()
        && counted.load(std::sync::atomic::Ordering::Relaxed) < expected
        && Instant::now() < deadline
    {
        let asked = offsets.clone();
        let fetch = fetch_once(
            &mut connection,
            version,
            topic,
            &mut offsets,
            50 * 1024 * 1024,
            10 * 1024 * 1024,
        );
        let Ok(fetched) = tokio::time::timeout(FETCH_ANSWER_TIMEOUT, fetch).await else {
            bail!(
                "stalled: the Fetch of {topic} partitions {asked:?} (partition: offset) sent to \
                 {addr} got no answer in {FETCH_ANSWER_TIMEOUT:?}"
            );
        };
        let (got, high_watermarks) = fetched?;
        counted.fetch_add(got, std::sync::atomic::Ordering::Relaxed);
        // Finished partitions: read up to their high watermark.
        offsets.retain(|p, next| high_watermarks.get(p).is_none_or(|hw| *next < *hw));
        idle_rounds = if got == 0 { idle_rounds + 1 } else { 0 };
        if idle_rounds > 20 && !offsets.is_empty() {
            let behind: Vec<String> = offsets
                .iter()
                .map(|(p, next)| match high_watermarks.get(p) {
                    Some(hw) => format!("{p}: at {next} of {hw}"),
                    None => format!("{p}: at {next}, not in the answer"),
                })
                .collect();
            bail!(
                "no progress for 20 fetches from {addr}: {topic} partitions {}",
                behind.join(", ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, records: usize) -> Vec<u8> {
        let values: Vec<Vec<u8>> = (0..records).map(|i| vec![i as u8; 10]).collect();
        let records: Vec<(Option<&[u8]>, &[u8])> =
            values.iter().map(|v| (None, v.as_slice())).collect();
        let mut bytes = keel_log::plain_batch::build_batch(&records, 0);
        // The base offset is outside the CRC: the broker assigns it.
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes
    }

    #[test]
    fn batch_ends_stops_before_a_partial_trailing_batch() {
        let mut records = batch(0, 3);
        records.extend(batch(3, 2));
        assert_eq!(batch_ends(&records).unwrap(), vec![3, 5]);
        // A fetch answer cut at its size limit ends inside the next batch: not an error.
        let whole = records.len();
        records.extend(batch(5, 4));
        records.truncate(whole + 20);
        assert_eq!(batch_ends(&records).unwrap(), vec![3, 5]);
        assert_eq!(batch_ends(&[]).unwrap(), Vec::<i64>::new());
    }

    #[test]
    fn batch_ends_refuses_a_corrupt_batch() {
        let mut records = batch(0, 3);
        let last = records.len() - 1;
        records[last] ^= 0xff; // the CRC no longer matches
        let error = batch_ends(&records).unwrap_err();
        assert!(format!("{error:#}").contains("corrupt"), "{error:#}");
    }
}
