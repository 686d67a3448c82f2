//! Three controllers over real TCP (issue 6): one Raft leader is the active controller, the
//! standbys answer `NOT_CONTROLLER` to writes but serve the same committed metadata log; when
//! the leader crashes another takes over with a higher epoch and every committed record, and
//! the crashed one catches up after a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_controller::records::Record;
use keel_controller::types::MetadataOffset;
use keel_log::storage::{OsStorage, Storage};
use keel_log::LogDir;
use keel_node::client::Connection;
use keel_node::clock::SystemClock;
use keel_node::config::Listener;
use keel_node::controller_server::{self, ControllerServerConfig, MetadataDir};
use keel_node::metadata_log::decode_metadata_batches;
use keel_wire::kafka_protocol::messages::broker_registration_request::Listener as WireListener;
use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use keel_wire::kafka_protocol::messages::*;
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CLUSTER: &str = "quorum-test-cluster";
const NOT_CONTROLLER: i16 = 41;

type Conn = Connection<keel_node::net::BoxStream>;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// One controller process: its own runtime, so a crash stops every task it spawned (the
/// Raft core included).
struct Controller {
    id: i32,
    rt: Option<tokio::runtime::Runtime>,
    shutdown: CancellationToken,
}

impl Controller {
    fn crash(mut self) {
        self.shutdown.cancel();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

struct Quorum {
    dirs: Vec<tempfile::TempDir>,
    addrs: Vec<String>,
    voters: String,
    /// Every controller reports here (one series per node id).
    metrics: keel_node::metrics::Metrics,
}

impl Quorum {
    /// Three formatted directories and three free loopback ports.
    fn new() -> Quorum {
        let mut dirs = Vec::new();
        let mut addrs = Vec::new();
        for id in 1..=3 {
            let dir = tempfile::tempdir().unwrap();
            let storage: Arc<dyn Storage> = Arc::new(OsStorage::new());
            LogDir::format(storage, dir.path(), CLUSTER, id, Uuid::new_v4()).unwrap();
            dirs.push(dir);
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            addrs.push(probe.local_addr().unwrap().to_string());
        }
        let voters = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}@{a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        Quorum {
            dirs,
            addrs,
            voters,
            metrics: keel_node::metrics::Metrics::new(),
        }
    }

    fn start(&self, id: i32) -> Controller {
        self.start_with(id, &[])
    }

    fn start_with(&self, id: i32, extra: &[(&str, &str)]) -> Controller {
        let index = (id - 1) as usize;
        let addr = self.addrs[index].clone();
        let props: BTreeMap<String, String> = [
            ("node.id", id.to_string()),
            ("process.roles", "controller".to_string()),
            ("listeners", format!("CONTROLLER://{addr}")),
            (
                "metadata.log.dir",
                self.dirs[index].path().display().to_string(),
            ),
            ("controller.quorum.voters", self.voters.clone()),
            ("controller.quorum.election.timeout.ms", "500".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
        let mut config = ControllerServerConfig::from_properties(&props).unwrap();
        config.metrics = self.metrics.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        rt.spawn(async move {
            let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
            let endpoint = Listener::parse(&format!("CONTROLLER://{addr}")).unwrap();
            let result = controller_server::serve(
                config,
                MetadataDir::Own,
                Arc::new(OsStorage::new()),
                Arc::new(SystemClock),
                Arc::new(keel_node::net::TcpNetwork),
                listener,
                endpoint,
                stop,
                || {},
            )
            .await;
            if let Err(e) = result {
                eprintln!("controller {id} stopped: {e}");
            }
        });
        Controller {
            id,
            rt: Some(rt),
            shutdown,
        }
    }

    async fn connect(&self, id: i32) -> Option<Conn> {
        Connection::connect(
            &keel_node::net::TcpNetwork,
            &self.addrs[(id - 1) as usize],
            "quorum-test",
        )
        .await
        .ok()
    }
}

fn registration(broker: i32) -> BrokerRegistrationRequest {
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(broker))
        .with_cluster_id(s(CLUSTER))
        .with_incarnation_id(Uuid::from_u128(0x1000 + broker as u128))
        .with_listeners(vec![WireListener::default()
            .with_name(s("PLAINTEXT"))
            .with_host(s("127.0.0.1"))
            .with_port(9000 + broker as u16)
            .with_security_protocol(0)])
        .with_log_dirs(vec![Uuid::from_u128(0xd000 + broker as u128)])
        .with_previous_broker_epoch(-1)
}

fn create_topic(name: &str) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(1)
            .with_replication_factor(1)])
}

fn metadata_fetch(from: i64) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(8 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s("__cluster_metadata")))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(from)
                .with_partition_max_bytes(8 << 20)])])
}

/// Every applied record of controller `id` and the (leader, epoch) it reports.
async fn records_of(quorum: &Quorum, id: i32) -> Option<(Vec<(MetadataOffset, Record)>, i32, i32)> {
    records_from(quorum, id, 0).await
}

/// The applied records of controller `id` from offset `start` on, and the (leader, epoch) it
/// reports.
async fn records_from(
    quorum: &Quorum,
    id: i32,
    start: i64,
) -> Option<(Vec<(MetadataOffset, Record)>, i32, i32)> {
    let mut conn = quorum.connect(id).await?;
    let mut records = Vec::new();
    loop {
        let from = records
            .last()
            .map_or(start, |(o, _): &(MetadataOffset, Record)| o.0 + 1);
        let response: FetchResponse = conn
            .call_version(ApiKey::Fetch, 12, &metadata_fetch(from))
            .await
            .ok()?;
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0);
        let bytes = partition.records.clone().unwrap_or_default();
        let batch = decode_metadata_batches(&bytes, MetadataOffset(from)).unwrap();
        if batch.is_empty() {
            return Some((
                records,
                partition.current_leader.leader_id.0,
                partition.current_leader.leader_epoch,
            ));
        }
        records.extend(batch);
    }
}

/// Sends a request to every live controller in turn until one (the active one) answers
/// without NOT_CONTROLLER; returns its id and error code. Standbys must say NOT_CONTROLLER.
async fn call_active<Req, Resp>(
    quorum: &Quorum,
    live: &[i32],
    key: ApiKey,
    version: i16,
    request: &Req,
    code_of: fn(&Resp) -> i16,
    within: Duration,
) -> (i32, i16)
where
    Req: keel_wire::kafka_protocol::protocol::Encodable,
    Resp: keel_wire::kafka_protocol::protocol::Decodable,
{
    let deadline = Instant::now() + within;
    loop {
        for id in live {
            let Some(mut conn) = quorum.connect(*id).await else {
                continue;
            };
            let Ok(response) = conn.call_version::<_, Resp>(key, version, request).await else {
                continue;
            };
            let code = code_of(&response);
            if code != NOT_CONTROLLER {
                return (*id, code);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no active controller within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create_on_active(
    quorum: &Quorum,
    live: &[i32],
    name: &str,
    within: Duration,
) -> (i32, i16) {
    call_active(
        quorum,
        live,
        ApiKey::CreateTopics,
        7,
        &create_topic(name),
        |r: &CreateTopicsResponse| r.topics[0].error_code,
        within,
    )
    .await
}

/// Waits until every controller in `ids` has applied exactly `expected`.
async fn converge(quorum: &Quorum, ids: &[i32], expected: &[(MetadataOffset, Record)]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in ids {
        loop {
            if let Some((records, _, _)) = records_of(quorum, *id).await {
                if records == expected {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "controller {id} did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

// Shows (issue 6): exactly one controller acts; standbys refuse writes with NOT_CONTROLLER and
// serve the same committed log; after the active controller crashes another one takes over
// within a few seconds with a higher epoch, keeps every committed record and accepts writes;
// the crashed controller restarts and catches up.
#[test]
fn a_three_controller_quorum_survives_the_loss_of_its_leader() {
    let quorum = Quorum::new();
    let mut controllers: Vec<Controller> = (1..=3).map(|id| quorum.start(id)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (active, code) = call_active(
            &quorum,
            &[1, 2, 3],
            ApiKey::BrokerRegistration,
            4,
            &registration(1),
            |r: &BrokerRegistrationResponse| r.error_code,
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(code, 0);
        // Registration on a standby is refused; on the active controller it works.
        for id in [1, 2, 3] {
            let mut conn = quorum.connect(id).await.unwrap();
            let answer: BrokerRegistrationResponse = conn
                .call_version(ApiKey::BrokerRegistration, 4, &registration(2))
                .await
                .unwrap();
            if id == active {
                assert_eq!(answer.error_code, 0);
            } else {
                assert_eq!(answer.error_code, NOT_CONTROLLER, "standby {id}");
            }
        }
        // A fenced broker cannot host a topic; the answer still comes from the active one.
        let (creator, _) = create_on_active(&quorum, &[1, 2, 3], "first", Duration::from_secs(5)).await;
        assert_eq!(creator, active);
        let (records, leader, epoch) = records_of(&quorum, active).await.unwrap();
        assert_eq!(leader, active);
        assert!(epoch >= 1);
        assert!(records.iter().any(|(_, r)| matches!(r, Record::RegisterBroker(b) if b.broker.0 == 2)));
        converge(&quorum, &[1, 2, 3], &records).await;

        // The active controller crashes.
        let crashed = controllers.iter().position(|c| c.id == active).unwrap();
        let started = Instant::now();
        controllers.remove(crashed).crash();
        let live: Vec<i32> = [1, 2, 3].into_iter().filter(|id| *id != active).collect();
        let (successor, code) = call_active(
            &quorum,
            &live,
            ApiKey::BrokerRegistration,
            4,
            &registration(3),
            |r: &BrokerRegistrationResponse| r.error_code,
            Duration::from_secs(20),
        )
        .await;
        let failover = started.elapsed();
        eprintln!("failover: controller {successor} accepted a write {failover:?} after controller {active} crashed");
        assert_eq!(code, 0);
        assert_ne!(successor, active);
        let (after, leader, new_epoch) = records_of(&quorum, successor).await.unwrap();
        assert_eq!(leader, successor);
        assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");
        assert_eq!(&after[..records.len()], &records[..], "every committed record survives");
        assert!(after.iter().any(|(_, r)| matches!(r, Record::RegisterBroker(b) if b.broker.0 == 3)));

        // The crashed controller comes back as a standby and catches up.
        controllers.push(quorum.start(active));
        converge(&quorum, &[1, 2, 3], &after).await;
    });
}

// Shows: an active controller whose standbys are gone stays the Raft leader (openraft 0.9 never
// steps down) but stops acting once its lease lapses — it answers NOT_CONTROLLER — and counts
// that lapse in `keel_controller_lease_lapses_total` (issue 19).
#[test]
fn a_leader_without_its_quorum_counts_a_lease_lapse() {
    let quorum = Quorum::new();
    let mut controllers: Vec<Controller> = (1..=3).map(|id| quorum.start(id)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (active, code) = call_active(
            &quorum,
            &[1, 2, 3],
            ApiKey::BrokerRegistration,
            4,
            &registration(1),
            |r: &BrokerRegistrationResponse| r.error_code,
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(code, 0);
        let lapses = quorum.metrics.controller(active).lease_lapses;
        assert_eq!(lapses.get(), 0, "no lapse while the quorum answers");
        let (kept, standbys): (Vec<_>, Vec<_>) =
            controllers.drain(..).partition(|c| c.id == active);
        for standby in standbys {
            standby.crash();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while lapses.get() == 0 {
            assert!(Instant::now() < deadline, "the lease never lapsed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(lapses.get(), 1);
        let mut conn = quorum.connect(active).await.unwrap();
        let answer: BrokerRegistrationResponse = conn
            .call_version(ApiKey::BrokerRegistration, 4, &registration(2))
            .await
            .unwrap();
        assert_eq!(answer.error_code, NOT_CONTROLLER);
        drop(kept);
    });
}

/// The applied log's start offset and high watermark of controller `id`.
async fn log_range(quorum: &Quorum, id: i32) -> Option<(i64, i64)> {
    let mut conn = quorum.connect(id).await?;
    let response: FetchResponse = conn
        .call_version(ApiKey::Fetch, 12, &metadata_fetch(i64::MAX / 2))
        .await
        .ok()?;
    let partition = &response.responses[0].partitions[0];
    Some((partition.log_start_offset, partition.high_watermark))
}

// Shows (issue 6, snapshots): with a snapshot every 4 Raft entries, a controller that was down
// while the others wrote and purged their Raft logs catches up from the leader's snapshot plus
// the entries after it — its applied log then starts at the snapshot's end and holds the same
// records from there — and the quorum keeps working when the leader then crashes.
#[test]
fn a_controller_behind_the_purged_log_catches_up_from_a_snapshot() {
    let quorum = Quorum::new();
    let small = [("keel.metadata.snapshot.interval.entries", "4")];
    let mut controllers: Vec<Controller> =
        (1..=3).map(|id| quorum.start_with(id, &small)).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let register = |broker: i32, live: Vec<i32>| {
            let quorum = &quorum;
            async move {
                call_active(
                    quorum,
                    &live,
                    ApiKey::BrokerRegistration,
                    4,
                    &registration(broker),
                    |r: &BrokerRegistrationResponse| r.error_code,
                    Duration::from_secs(20),
                )
                .await
            }
        };
        let (active, code) = register(1, vec![1, 2, 3]).await;
        assert_eq!(code, 0);
        let lagging = if active == 3 { 2 } else { 3 };
        let position = controllers.iter().position(|c| c.id == lagging).unwrap();
        controllers.remove(position).crash();
        let live: Vec<i32> = [1, 2, 3].into_iter().filter(|id| *id != lagging).collect();
        for broker in 2..=40 {
            let (_, code) = register(broker, live.clone()).await;
            assert_eq!(code, 0, "registration of broker {broker}");
        }
        // The leader compacted its applied log below a snapshot.
        let (leader_start, leader_end) = log_range(&quorum, active).await.unwrap();
        assert!(
            leader_start > 0,
            "the leader compacted its log (start {leader_start})"
        );
        let (leader_tail, _, _) = records_from(&quorum, active, leader_start).await.unwrap();
        assert_eq!(leader_tail.len() as i64, leader_end - leader_start);
        controllers.push(quorum.start_with(lagging, &small));

        // The lagging controller installs a snapshot: its applied log starts after 0, ends
        // where the leader's does, and holds the leader's records from there.
        let deadline = Instant::now() + Duration::from_secs(20);
        let (start, end) = loop {
            if let Some((start, end)) = log_range(&quorum, lagging).await {
                if end >= leader_end {
                    break (start, end);
                }
            }
            assert!(
                Instant::now() < deadline,
                "controller {lagging} did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(end, leader_end);
        assert!(
            start > 0,
            "controller {lagging} caught up from a snapshot (log start {start})"
        );
        let from = start.max(leader_start);
        let (tail, _, _) = records_from(&quorum, lagging, from).await.unwrap();
        assert_eq!(&tail[..], &leader_tail[(from - leader_start) as usize..]);

        // A new broker following either controller from offset 0 loads the newest snapshot
        // (FetchSnapshot), then fetches the rest: both end with the same image, which knows
        // every registered broker.
        let mut images = Vec::new();
        for id in [active, lagging] {
            let mut conn = quorum.connect(id).await.unwrap();
            let mut follower = keel_node::cluster::follower::MetadataFollower::new();
            while follower.next_offset().0 < end {
                follower.fetch_once(&mut conn, 77).await.unwrap();
            }
            assert_eq!(follower.next_offset().0, end);
            assert_eq!(
                follower.image().brokers().len(),
                40,
                "brokers via controller {id}"
            );
            images.push(follower.image().clone());
        }
        assert_eq!(images[0], images[1]);
        let records_len = end;

        // The leader crashes: the two others (one restored from a snapshot) carry on.
        let position = controllers.iter().position(|c| c.id == active).unwrap();
        controllers.remove(position).crash();
        let survivors: Vec<i32> = [1, 2, 3].into_iter().filter(|id| *id != active).collect();
        let (successor, code) = register(41, survivors.clone()).await;
        assert_eq!(code, 0);
        assert!(survivors.contains(&successor));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ends: Vec<i64> = {
                let mut ends = Vec::new();
                for id in &survivors {
                    ends.push(log_range(&quorum, *id).await.map_or(-1, |(_, e)| e));
                }
                ends
            };
            if ends.iter().all(|e| *e == records_len + 1) {
                break;
            }
            assert!(Instant::now() < deadline, "survivors at {ends:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// Partitions of the large-topic test: 25,000 (three batches) by default, so CI stays quick;
/// `KEEL_LARGE_TOPIC_PARTITIONS=100000` is the benchmark of docs/benchmarks.md.
fn large_topic_partitions() -> i32 {
    std::env::var("KEEL_LARGE_TOPIC_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25_000)
}

/// A broker's heartbeats every 250 ms until `stop`: the longest answer and how many said
/// NOT_CONTROLLER (or failed).
async fn heartbeat_until(
    quorum: &Quorum,
    active: i32,
    broker: i32,
    epoch: i64,
    stop: CancellationToken,
) -> (Duration, u32) {
    let mut conn = quorum.connect(active).await.unwrap();
    let mut longest = Duration::ZERO;
    let mut refused = 0;
    while !stop.is_cancelled() {
        let request = BrokerHeartbeatRequest::default()
            .with_broker_id(BrokerId(broker))
            .with_broker_epoch(epoch)
            .with_current_metadata_offset(i64::MAX / 2);
        let sent = Instant::now();
        match conn
            .call_version::<_, BrokerHeartbeatResponse>(ApiKey::BrokerHeartbeat, 1, &request)
            .await
        {
            Ok(r) if r.error_code == 0 => {}
            _ => refused += 1,
        }
        longest = longest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (longest, refused)
}

// Shows: a CreateTopics larger than one batch of records (25,000 partitions x 3 replicas in CI,
// 100,000 as the benchmark) completes on a three-controller quorum while three brokers keep
// heartbeating: every heartbeat is answered (none NOT_CONTROLLER), no controller's lease lapses,
// and every controller applies the whole topic (issue 19: "Large valid operations complete
// without stalling the controller").
#[test]
fn a_topic_larger_than_a_batch_is_created_while_heartbeats_are_served() {
    let partitions = large_topic_partitions();
    let quorum = Quorum::new();
    let _controllers: Vec<Controller> = (1..=3)
        .map(|id| quorum.start_with(id, &[("controller.quorum.election.timeout.ms", "1000")]))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut epochs = Vec::new();
        let mut active = 0;
        for broker in 1..=3 {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let (id, _) = call_active(
                    &quorum,
                    &[1, 2, 3],
                    ApiKey::BrokerRegistration,
                    4,
                    &registration(broker),
                    |r: &BrokerRegistrationResponse| r.error_code,
                    Duration::from_secs(20),
                )
                .await;
                active = id;
                let mut conn = quorum.connect(active).await.unwrap();
                let r: BrokerRegistrationResponse = conn
                    .call_version(ApiKey::BrokerRegistration, 4, &registration(broker))
                    .await
                    .unwrap();
                if r.error_code == 0 {
                    epochs.push(r.broker_epoch);
                    break;
                }
                assert!(Instant::now() < deadline, "broker {broker} not registered");
            }
        }
        let stop = CancellationToken::new();
        let mut beating = Vec::new();
        for (index, epoch) in epochs.iter().enumerate() {
            let broker = index as i32 + 1;
            let (stop, epoch) = (stop.clone(), *epoch);
            let quorum = &quorum;
            beating.push(async move { heartbeat_until(quorum, active, broker, epoch, stop).await });
        }
        let create = async {
            // Unfenced by their first heartbeats.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let request = CreateTopicsRequest::default()
                .with_timeout_ms(600_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(TopicName(s("large")))
                    .with_num_partitions(partitions)
                    .with_replication_factor(3)]);
            let mut conn = quorum.connect(active).await.unwrap();
            let started = Instant::now();
            let response: CreateTopicsResponse = conn
                .call_version(ApiKey::CreateTopics, 7, &request)
                .await
                .unwrap();
            let took = started.elapsed();
            stop.cancel();
            (response, took)
        };
        let ((response, took), beats) =
            tokio::join!(create, futures_util::future::join_all(beating));
        let lapses: Vec<u64> = (1..=3)
            .map(|id| quorum.metrics.controller(id).lease_lapses.get())
            .collect();
        let topic = &response.topics[0];
        assert_eq!(
            topic.error_code, 0,
            "{:?} (lease lapses {lapses:?})",
            topic.error_message
        );
        assert_eq!(topic.num_partitions, partitions);
        let longest = beats.iter().map(|(l, _)| *l).max().unwrap_or_default();
        eprintln!(
            "created {partitions} partitions x 3 replicas in {:.2} s ({:.3} s per 10,000 partitions); longest heartbeat meanwhile {:?}",
            took.as_secs_f64(),
            took.as_secs_f64() * 10_000.0 / f64::from(partitions),
            longest
        );
        for (broker, (_, refused)) in beats.iter().enumerate() {
            assert_eq!(*refused, 0, "broker {}: heartbeats refused", broker + 1);
        }
        for id in 1..=3 {
            assert_eq!(
                quorum.metrics.controller(id).lease_lapses.get(),
                0,
                "controller {id} lost its lease"
            );
        }
        for id in 1..=3 {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (records, _, _) = records_of(&quorum, id).await.unwrap();
                let created = records
                    .iter()
                    .filter(|(_, r)| matches!(r, Record::Partition(_)))
                    .count();
                if created == partitions as usize {
                    break;
                }
                assert!(Instant::now() < deadline, "controller {id}: {created} partitions");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
}
