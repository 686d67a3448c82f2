//! The broker's side of the cluster against the real controller listener (issue 4, "Metadata
//! propagation" and "Shutdown and restart"): brokers register with `cluster::lifecycle`, follow
//! `__cluster_metadata` with `cluster::follower`, and end with identical images; a broker that
//! comes back after an unclean shutdown leaves the ISR (KIP-966), one with its clean-shutdown
//! epoch does not.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_controller::types::BrokerId;
use keel_controller::ClusterImage;
use keel_log::storage::{OsStorage, Storage};
use keel_log::LogDir;
use keel_node::client::Connection;
use keel_node::clock::SystemClock;
use keel_node::cluster::follower::MetadataFollower;
use keel_node::cluster::lifecycle::{heartbeat, register, Registration};
use keel_node::config::Listener;
use keel_node::controller_server::{self, ControllerServerConfig};
use keel_wire::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use keel_wire::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const CLUSTER: &str = "follow-test-cluster";

async fn start_controller(dir: &std::path::Path) -> (SocketAddr, CancellationToken) {
    let storage: Arc<dyn Storage> = Arc::new(OsStorage::new());
    LogDir::format(storage, dir, CLUSTER, 100, Uuid::new_v4()).unwrap();
    let props: BTreeMap<String, String> = [
        ("node.id", "100".to_string()),
        ("process.roles", "controller".to_string()),
        ("listeners", "CONTROLLER://127.0.0.1:0".to_string()),
        ("metadata.log.dir", dir.display().to_string()),
        ("broker.session.timeout.ms", "1500".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let config = ControllerServerConfig::from_properties(&props).unwrap();
    let shutdown = CancellationToken::new();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(controller_server::run(
        config,
        Arc::new(OsStorage::new()),
        Arc::new(SystemClock),
        shutdown.clone(),
        move |addr| {
            let _ = ready_tx.send(addr);
        },
    ));
    (ready_rx.await.unwrap(), shutdown)
}

fn registration(
    broker: i32,
    incarnation: u128,
    previous_broker_epoch: Option<i64>,
) -> Registration {
    Registration {
        broker_id: broker,
        cluster_id: CLUSTER.to_string(),
        incarnation_id: Uuid::from_u128(incarnation),
        listeners: vec![(
            Listener {
                name: "PLAINTEXT".to_string(),
                host: "127.0.0.1".to_string(),
                port: 9000 + broker as u16,
            },
            keel_node::security::SecurityProtocol::Plaintext,
        )],
        rack: None,
        log_dir_ids: vec![Uuid::from_u128(0xd000 + broker as u128)],
        previous_broker_epoch,
    }
}

/// A broker as far as this slice goes: a lifecycle connection and a metadata follower.
struct TestBroker {
    id: i32,
    epoch: i64,
    control: Connection<keel_node::net::BoxStream>,
    fetch: Connection<keel_node::net::BoxStream>,
    follower: MetadataFollower,
}

impl TestBroker {
    async fn start(addr: SocketAddr, reg: Registration) -> TestBroker {
        let mut control =
            Connection::connect(&keel_node::net::TcpNetwork, &addr.to_string(), "broker")
                .await
                .unwrap();
        let epoch = register(&mut control, &reg).await.unwrap();
        let fetch = Connection::connect(
            &keel_node::net::TcpNetwork,
            &addr.to_string(),
            "broker-metadata",
        )
        .await
        .unwrap();
        TestBroker {
            id: reg.broker_id,
            epoch,
            control,
            fetch,
            follower: MetadataFollower::new(),
        }
    }

    /// Follows the log and heartbeats until the controller unfences it.
    async fn run_until_unfenced(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.follower
                .fetch_once(&mut self.fetch, self.id)
                .await
                .unwrap();
            let state = heartbeat(
                &mut self.control,
                self.id,
                self.epoch,
                self.follower.applied_offset(),
                false,
                &Default::default(),
            )
            .await
            .unwrap();
            if !state.is_fenced {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "broker {} never unfenced",
                self.id
            );
        }
    }

    /// Fetches until the image reaches `end` (the controller's next offset).
    async fn catch_up(&mut self, end: i64) -> &ClusterImage {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.follower.next_offset().0 < end {
            self.follower
                .fetch_once(&mut self.fetch, self.id)
                .await
                .unwrap();
            assert!(
                Instant::now() < deadline,
                "broker {} did not catch up",
                self.id
            );
        }
        self.follower.image()
    }
}

async fn create_topic(addr: SocketAddr, name: &str) -> CreateTopicsResponse {
    let mut admin = Connection::connect(&keel_node::net::TcpNetwork, &addr.to_string(), "admin")
        .await
        .unwrap();
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(1)
            .with_replication_factor(3)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("min.insync.replicas"))
                .with_value(Some(StrBytes::from_static_str("3")))])]);
    admin
        .call_version(ApiKey::CreateTopics, 7, &request)
        .await
        .unwrap()
}

fn partition_sets(image: &ClusterImage) -> (Vec<i32>, Vec<i32>, Vec<i32>) {
    let (_, p) = image.partitions().next().expect("one partition");
    let ids = |set: &std::collections::BTreeSet<BrokerId>| set.iter().map(|b| b.0).collect();
    (ids(&p.isr), ids(&p.elr), ids(&p.last_known_elr))
}

/// One round of a live broker's work: follow the log, heartbeat.
async fn round(b: &mut TestBroker) {
    b.follower.fetch_once(&mut b.fetch, b.id).await.unwrap();
    heartbeat(
        &mut b.control,
        b.id,
        b.epoch,
        b.follower.applied_offset(),
        false,
        &Default::default(),
    )
    .await
    .unwrap();
}

/// Runs rounds of `live` until broker `live[0]`'s image satisfies `done`.
async fn until(live: &mut [&mut TestBroker], what: &str, done: impl Fn(&ClusterImage) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for b in live.iter_mut() {
            round(b).await;
        }
        if done(live[0].follower.image()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            live[0].follower.image().partitions().next()
        );
    }
}

// Shows: every broker applies the same committed records in the same order (DESIGN invariant),
// and KIP-966's clean-shutdown proof travels end to end over the real RPCs: two replicas fall
// silent and are fenced (ISR [1], ELR {2, 3} with min ISR 3); broker 2 comes back with its old
// broker epoch (clean) and stays an ELR member, broker 3 comes back without it (unclean) and
// moves to LastKnownELR.
#[tokio::test]
async fn brokers_follow_the_same_log_and_unclean_restarts_leave_the_elr() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, shutdown) = start_controller(dir.path()).await;
    let mut b1 = TestBroker::start(addr, registration(1, 1, None)).await;
    let mut b2 = TestBroker::start(addr, registration(2, 2, None)).await;
    let mut b3 = TestBroker::start(addr, registration(3, 3, None)).await;
    for b in [&mut b1, &mut b2, &mut b3] {
        b.run_until_unfenced().await;
    }
    let created = create_topic(addr, "replicated").await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    until(&mut [&mut b1, &mut b2, &mut b3], "the topic", |image| {
        image.partitions().next().is_some()
    })
    .await;
    let end = b1.follower.next_offset().0;
    let images = [
        b1.catch_up(end).await.clone(),
        b2.catch_up(end).await.clone(),
        b3.catch_up(end).await.clone(),
    ];
    assert!(
        images.windows(2).all(|w| w[0] == w[1]),
        "brokers disagree on metadata"
    );
    assert_eq!(partition_sets(&images[0]).0, vec![1, 2, 3]);

    // Brokers 2 and 3 go silent; the controller fences them after the session timeout.
    let (old_epoch_2, _old_epoch_3) = (b2.epoch, b3.epoch);
    drop((b2, b3));
    until(
        &mut [&mut b1],
        "brokers 2 and 3 fenced into the ELR",
        |image| partition_sets(image) == (vec![1], vec![2, 3], vec![]),
    )
    .await;

    // Broker 2 returns with the proof of a clean shutdown; broker 3 without it.
    let mut b2 = TestBroker::start(addr, registration(2, 0x22, Some(old_epoch_2))).await;
    let mut b3 = TestBroker::start(addr, registration(3, 0x33, None)).await;
    until(
        &mut [&mut b1, &mut b2, &mut b3],
        "the restarts applied",
        |image| partition_sets(image).2 == vec![3],
    )
    .await;
    let (isr, elr, last_known_elr) = partition_sets(b1.follower.image());
    assert_eq!(
        last_known_elr,
        vec![3],
        "the unclean restart moved 3 to LastKnownELR"
    );
    assert!(
        !elr.contains(&3),
        "an uncleanly restarted replica is never eligible"
    );
    assert!(
        elr.contains(&2) || isr.contains(&2),
        "the clean restart kept 2 eligible: {isr:?} {elr:?}"
    );
    // Once every broker is unfenced nothing more is committed: compare at one offset.
    until(
        &mut [&mut b1, &mut b2, &mut b3],
        "all brokers unfenced",
        |image| (1..=3).all(|id| image.broker(BrokerId(id)).is_some_and(|b| b.is_live())),
    )
    .await;
    round(&mut b1).await;
    let end = b1.follower.next_offset().0;
    let image = b1.follower.image().clone();
    for b in [&mut b2, &mut b3] {
        assert_eq!(
            b.catch_up(end).await,
            &image,
            "a restarted broker disagrees"
        );
    }
    shutdown.cancel();
}
