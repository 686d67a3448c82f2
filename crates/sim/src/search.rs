//! Randomized fault search, swarm style: each seed draws which kinds of fault it uses and how
//! often (so some runs hammer one mechanism, others mix many), runs a produce/consume workload
//! through them in Keel mode, heals everything, and checks that every invariant held, that
//! every partition is available again, and that nothing acknowledged was lost. Faults stay
//! within the promise: only one broker (min ISR − 1 with min ISR 2) may lose unflushed data,
//! its disk, or suffer storage faults (bit rot, torn, misdirected and lost writes, EIO, ENOSPC,
//! failed fsyncs: `disk.rs`); the others may be killed, stopped, paused and cut off at will. A
//! broker whose log directory went offline is restarted (as an operator would) once its disk
//! is healed.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::checkers::newest_image;
use crate::disk::DiskFault;
use crate::net::Latency;
use crate::sim::{partition_state, Sim, TopicPlan};
use crate::txn::TxnProducer;
use crate::world::{broker_host, HostKind, Life, Mode, WorldConfig};

/// The share of seeds that draw storage faults.
const DISK_FAULT_SHARE: f64 = 0.4;
/// Broker configs of seeds with storage faults: segments of a few dozen records (damage lands
/// in closed segments too), an index entry every 1 KiB (a clean start validates only the tail
/// of a segment), and a scrub pass every 3 s.
const DISK_FAULT_CONFIGS: &[(&str, &str)] = &[
    ("log.segment.bytes", "4096"),
    ("log.index.interval.bytes", "1024"),
    ("log.scrub.interval.ms", "3000"),
];

/// The share of seeds that draw a transactional workload.
const TXN_SHARE: f64 = 0.5;
/// Broker configs of seeds with transactions: a small `__transaction_state` and
/// `__consumer_offsets`.
const TXN_CONFIGS: &[(&str, &str)] = &[
    ("transaction.state.log.num.partitions", "2"),
    ("offsets.topic.num.partitions", "2"),
];

/// The share of seeds that reassign partitions (and run four brokers).
const REASSIGN_SHARE: f64 = 0.3;

/// How a broker's run ends when every log directory failed (`Broker::open`).
const ALL_DIRS_FAILED: &str = "every log directory failed";

/// The topic every search run uses.
const TOPIC: &str = "search";
const PARTITIONS: u32 = 2;
const BROKERS: u32 = 3;
/// The output topic of the consume-transform-produce workload (its input is `TOPIC`-0).
const ETL_TOPIC: &str = "search-etl";
const ETL_GROUP: &str = "search-etl";

/// The fault mix of one seed.
#[derive(Debug, Clone)]
pub struct Swarm {
    pub kill: bool,
    pub power_loss: bool,
    pub torn: bool,
    pub wipe: bool,
    pub clean_restart: bool,
    pub pause: bool,
    pub partition: bool,
    pub resets: bool,
    pub controller_faults: bool,
    /// Mean time between faults.
    pub fault_gap: Duration,
    /// Share of records produced with acks=all (the rest use acks=1).
    pub acks_all_share: f64,
    /// The only broker allowed to lose data uncleanly.
    pub lossy_broker: i32,
    pub strategy: &'static str,
    pub latency: Latency,
    pub fsync_latency: Duration,
    /// Controllers in the quorum (1 or 3).
    pub controllers: u32,
    /// Storage faults on the lossy broker's disk (with small segments and a frequent scrubber,
    /// so damage lands in closed segments and is looked for).
    pub disk: bool,
    /// A transactional workload too (issue 23): a transactional producer committing and
    /// aborting transactions over both partitions and a read_committed consumer.
    pub txn: bool,
    /// That producer speaks transactions v2 (KIP-890 part 2) rather than v1.
    pub txn_v2: bool,
    /// Partition reassignments among the faults (issue 24), over four brokers instead of
    /// three: an operator moves a partition of the topic to three brokers drawn at random.
    pub reassign: bool,
}

impl Swarm {
    /// The mix seed `seed` draws.
    pub fn draw(seed: u64) -> Swarm {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5357_4152_4d00);
        let mut swarm = Swarm {
            kill: rng.gen_bool(0.6),
            power_loss: rng.gen_bool(0.5),
            torn: rng.gen_bool(0.3),
            wipe: rng.gen_bool(0.2),
            clean_restart: rng.gen_bool(0.4),
            pause: rng.gen_bool(0.4),
            partition: rng.gen_bool(0.5),
            resets: rng.gen_bool(0.3),
            controller_faults: rng.gen_bool(0.2),
            fault_gap: Duration::from_millis(rng.gen_range(300..3_000)),
            acks_all_share: rng.gen_range(0.5..=1.0),
            lossy_broker: rng.gen_range(1..=BROKERS as i32),
            strategy: ["Balanced", "Proactive"][rng.gen_range(0..2)],
            latency: {
                let min = rng.gen_range(50..1_000);
                Latency {
                    min_us: min,
                    max_us: min + rng.gen_range(0..5_000),
                }
            },
            fsync_latency: Duration::from_micros(rng.gen_range(0..8_000)),
            // Drawn last, so the draws above stay what they were before the quorum.
            controllers: if rng.gen_bool(0.5) { 3 } else { 1 },
            // After the quorum, for the same reason: seeds without storage faults run as before.
            disk: rng.gen_bool(DISK_FAULT_SHARE),
            // After the storage faults, for the same reason.
            txn: rng.gen_bool(TXN_SHARE),
            // Last again: the v1 workloads stay what they were.
            txn_v2: rng.gen_bool(0.5),
            // Last again: seeds without reassignments run as before.
            reassign: rng.gen_bool(REASSIGN_SHARE),
        };
        if !(swarm.kill
            || swarm.power_loss
            || swarm.wipe
            || swarm.clean_restart
            || swarm.pause
            || swarm.partition
            || swarm.resets
            || swarm.disk)
        {
            swarm.kill = true;
        }
        swarm
    }
}

impl fmt::Display for Swarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds = Vec::new();
        for (on, name) in [
            (self.kill, "kill"),
            (self.power_loss, "power-loss"),
            (self.torn, "torn"),
            (self.wipe, "wipe"),
            (self.clean_restart, "restart"),
            (self.pause, "pause"),
            (self.partition, "partition"),
            (self.resets, "resets"),
            (self.controller_faults, "controller"),
            (self.disk, "disk"),
            (self.reassign, "reassign"),
        ] {
            if on {
                kinds.push(name);
            }
        }
        write!(
            f,
            "faults [{}] every ~{}ms, acks=all {:.0}%,{} lossy broker {}, {}, latency {}-{}us, fsync {}us, {} controller{}{}",
            kinds.join(" "),
            self.fault_gap.as_millis(),
            self.acks_all_share * 100.0,
            match (self.txn, self.txn_v2) {
                (false, _) => "",
                (true, false) => " transactions,",
                (true, true) => " transactions v2,",
            },
            self.lossy_broker,
            self.strategy,
            self.latency.min_us,
            self.latency.max_us,
            self.fsync_latency.as_micros(),
            self.controllers,
            if self.controllers == 1 { "" } else { "s" },
            if self.reassign { ", 4 brokers" } else { "" }
        )
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    pub seed: u64,
    pub swarm: String,
    pub failures: Vec<String>,
    pub trace_hash: u64,
    pub steps: u64,
    pub faults: u64,
    /// Storage faults among them.
    pub disk_faults: u64,
    pub acked: u64,
    /// With a transactional workload: transactions committed, aborted and left undecided by
    /// their producer, and records read by the read_committed consumer.
    pub txns: Option<(usize, usize, usize, usize)>,
    /// With a transactional workload: output records of the consume-transform-produce run
    /// read committed.
    pub etl_outputs: usize,
    pub wall: Duration,
}

/// A pending action of the fault schedule.
#[derive(Debug, Clone)]
enum Undo {
    Start(String),
    Resume(String),
    Heal,
    /// End the broker's disk faults; restart it if a log directory of it went offline.
    HealDisk(i32),
}

/// Runs one seed: `faulty` of simulated time with faults, then healing and final checks.
pub fn run_seed(seed: u64, faulty: Duration, verbose: bool) -> SeedOutcome {
    let started = Instant::now();
    let swarm = Swarm::draw(seed);
    let mut outcome = SeedOutcome {
        seed,
        swarm: swarm.to_string(),
        failures: Vec::new(),
        trace_hash: 0,
        steps: 0,
        faults: 0,
        disk_faults: 0,
        acked: 0,
        txns: None,
        etl_outputs: 0,
        wall: Duration::ZERO,
    };
    match run_seed_inner(seed, &swarm, faulty, verbose, &mut outcome) {
        Ok(()) => {}
        Err(e) => outcome.failures.push(format!("{e:#}")),
    }
    outcome.wall = started.elapsed();
    outcome
}

fn run_seed_inner(
    seed: u64,
    swarm: &Swarm,
    faulty: Duration,
    verbose: bool,
    outcome: &mut SeedOutcome,
) -> anyhow::Result<()> {
    let brokers = if swarm.reassign { BROKERS + 1 } else { BROKERS };
    let mut config = WorldConfig::new(seed, brokers, Mode::Keel);
    config.latency = swarm.latency;
    config.fsync_latency = swarm.fsync_latency;
    config.controllers = swarm.controllers;
    config.configs = vec![
        ("min.insync.replicas".into(), "2".into()),
        ("unclean.recovery.strategy".into(), swarm.strategy.into()),
    ];
    if swarm.disk {
        config.configs.extend(
            DISK_FAULT_CONFIGS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
    }
    if swarm.txn {
        config.configs.extend(
            TXN_CONFIGS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
    }
    let mut sim = Sim::new(config, verbose)?;
    // Proactive recovery trades durability for availability by design (KIP-966: it elects the
    // best replica that answered within 5 s, like unclean leader election): its seeds check
    // every structural property and liveness, but not the durability promise.
    sim.enforce_durability = swarm.strategy != "Proactive";
    sim.world.trace.event(0, format!("seed {seed}: {swarm}"));
    let mut topics = vec![TopicPlan {
        name: TOPIC.into(),
        partitions: PARTITIONS,
        replication_factor: 3,
        assignment: None,
        configs: Vec::new(),
    }];
    if swarm.txn {
        topics.push(TopicPlan {
            name: ETL_TOPIC.into(),
            partitions: 1,
            replication_factor: 3,
            assignment: None,
            configs: Vec::new(),
        });
    }
    sim.boot(&topics)?;

    // The workload: one producer and one consumer, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let mut client = sim.client("producer");
        let stop = stop.clone();
        let net = sim.world.net.clone();
        let share = swarm.acks_all_share;
        let mut rng = StdRng::seed_from_u64(seed ^ 0x776f_726b);
        sim.world.host("client")?.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let tp = (TOPIC.to_string(), rng.gen_range(0..PARTITIONS as i32));
                let acks_all = rng.gen_bool(share);
                let deadline = net.now_us() + 6_000_000;
                client.produce(&tp, acks_all, deadline).await;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(2..40))).await;
            }
        })
    };
    let consumer = {
        let mut client = sim.client("consumer");
        let stop = stop.clone();
        let net = sim.world.net.clone();
        sim.world.host("client")?.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                for p in 0..PARTITIONS as i32 {
                    let deadline = net.now_us() + 3_000_000;
                    client.consume(&(TOPIC.to_string(), p), deadline).await;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    // The transactional workload: one producer committing about two transactions in three
    // (aborting the rest) over one or both partitions, and a read_committed consumer.
    let txn_workload = if swarm.txn {
        let mut producer = TxnProducer::new(sim.client("txn-producer"), "search-txn");
        if swarm.txn_v2 {
            producer = producer.transactions_v2();
        }
        let stop_p = stop.clone();
        let net = sim.world.net.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x7478_6e73);
        let writer = sim.world.host("client")?.spawn(async move {
            while !stop_p.load(Ordering::SeqCst) {
                let tps: Vec<(String, i32)> = match rng.gen_range(0..3) {
                    0 => vec![(TOPIC.to_string(), 0)],
                    1 => vec![(TOPIC.to_string(), 1)],
                    _ => vec![(TOPIC.to_string(), 0), (TOPIC.to_string(), 1)],
                };
                let count = rng.gen_range(1..=5);
                let commit = rng.gen_bool(0.67);
                let deadline = net.now_us() + 20_000_000;
                if producer
                    .run_one(&tps, count, commit, deadline)
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..60))).await;
            }
        });
        let mut client = sim.client("committed-consumer");
        let stop_c = stop.clone();
        let net = sim.world.net.clone();
        let reader = sim.world.host("client")?.spawn(async move {
            while !stop_c.load(Ordering::SeqCst) {
                for p in 0..PARTITIONS as i32 {
                    let deadline = net.now_us() + 3_000_000;
                    client
                        .consume_committed(&(TOPIC.to_string(), p), deadline)
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(700)).await;
            }
        });
        // Consume-transform-produce: TOPIC-0 into ETL_TOPIC-0, offsets committed in the
        // transaction; one transaction in five aborted (its input is processed again).
        let mut etl = {
            let mut producer = TxnProducer::new(sim.client("etl-producer"), "search-etl");
            if swarm.txn_v2 {
                producer = producer.transactions_v2();
            }
            crate::etl::Etl::new(
                producer,
                sim.client("etl-consumer"),
                ETL_GROUP,
                (TOPIC.to_string(), 0),
                (ETL_TOPIC.to_string(), 0),
            )
        };
        let stop_e = stop.clone();
        let net = sim.world.net.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0065_746c);
        let processor = sim.world.host("client")?.spawn(async move {
            while !stop_e.load(Ordering::SeqCst) {
                let max = rng.gen_range(1..=8);
                let commit = rng.gen_bool(0.8);
                let deadline = net.now_us() + 20_000_000;
                match etl.round(max, commit, deadline).await {
                    Ok(n) if n > 0 => {}
                    Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(5..60))).await;
            }
        });
        Some((writer, reader, processor))
    } else {
        None
    };

    // The fault schedule.
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6661_756c_7473);
    let mut undo: BTreeMap<u64, Vec<Undo>> = BTreeMap::new();
    let end = sim.world.now_us() + faulty.as_micros() as u64;
    let mut next_fault = sim.world.now_us() + gap(&mut rng, swarm.fault_gap);
    while sim.world.now_us() < end {
        let now = sim.world.now_us();
        let due: Vec<u64> = undo.range(..=now).map(|(t, _)| *t).collect();
        for t in due {
            for action in undo.remove(&t).unwrap_or_default() {
                apply_undo(&mut sim, &action)?;
            }
        }
        if now >= next_fault {
            if let Some((action, after)) = inject(&mut sim, swarm, &mut rng)? {
                outcome.faults += 1;
                if matches!(action, Undo::HealDisk(_)) {
                    outcome.disk_faults += 1;
                }
                undo.entry(now + after.as_micros() as u64)
                    .or_default()
                    .push(action);
            }
            next_fault = now + gap(&mut rng, swarm.fault_gap);
        }
        sim.step()?;
        if !sim.failures().is_empty() {
            break;
        }
    }

    // Heal: every pending undo now, every link, every process.
    if sim.failures().is_empty() {
        sim.world
            .trace
            .event(sim.world.now_us(), "healing everything");
        for (_, actions) in std::mem::take(&mut undo) {
            for action in actions {
                apply_undo(&mut sim, &action)?;
            }
        }
        sim.world.net.heal();
        let names: Vec<String> = sim.world.hosts.keys().cloned().collect();
        for name in names {
            match sim.world.host(&name)?.life {
                Life::Down => sim.world.start(&name)?,
                Life::Paused { .. } => sim.world.resume(&name)?,
                Life::Running => {}
            }
        }
        // Every disk healed, and a broker with an offline log directory restarted.
        for id in sim.world.broker_ids() {
            apply_undo(&mut sim, &Undo::HealDisk(id))?;
        }
        let ids = sim.world.broker_ids();
        let available = sim.run_until(Duration::from_secs(60), |w| {
            let Some(image) = newest_image(w) else {
                return false;
            };
            ids.iter().all(|id| {
                w.host(&broker_host(*id))
                    .is_ok_and(|h| h.ready.load(Ordering::SeqCst))
            }) && (0..PARTITIONS as i32).all(|p| {
                // Led, and a reassignment in progress completed once every broker is back.
                partition_state(&image, TOPIC, p)
                    .is_some_and(|s| s.leader.is_some() && !s.is_reassigning())
            })
        })?;
        if !available && sim.failures().is_empty() {
            let image = newest_image(&sim.world);
            let states: Vec<String> = (0..PARTITIONS as i32)
                .map(|p| {
                    image
                        .as_ref()
                        .and_then(|i| partition_state(i, TOPIC, p).cloned())
                        .map_or(format!("{TOPIC}-{p}: unknown"), |s| {
                            format!(
                                "{TOPIC}-{p}: replicas {:?} adding {:?} removing {:?} leader {:?} ISR {:?} ELR {:?} last known ELR {:?}",
                                s.replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
                                s.adding_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
                                s.removing_replicas.iter().map(|b| b.0).collect::<Vec<_>>(),
                                s.leader.map(|b| b.0),
                                s.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                s.elr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                s.last_known_elr.iter().map(|b| b.0).collect::<Vec<_>>()
                            )
                        })
                })
                .collect();
            outcome.failures.push(format!(
                "liveness: 60 s after every fault healed, not every broker serves and every partition has a leader (and no reassignment in progress): {}",
                states.join("; ")
            ));
        }
        stop.store(true, Ordering::SeqCst);
        // Let the workload finish its last requests, then read everything once more.
        sim.run_until(Duration::from_secs(30), |_| {
            producer.is_finished()
                && consumer.is_finished()
                && txn_workload
                    .as_ref()
                    .is_none_or(|(w, r, e)| w.is_finished() && r.is_finished() && e.is_finished())
        })?;
        // Every transaction decided (the coordinator aborts what the producer left open at its
        // timeout), read with read_committed and checked. Proactive recovery may lose a
        // marker with the rest of an unclean leader's tail, leaving a hanging transaction for
        // an operator (kafka-transactions.sh abort): not a failure of those seeds.
        if swarm.txn {
            let limit =
                Duration::from_millis(crate::txn::TXN_TIMEOUT_MS as u64) + Duration::from_secs(50);
            if let Err(e) = sim.settle_transactions(limit) {
                if sim.enforce_durability && sim.failures().is_empty() {
                    outcome.failures.push(format!("{e:#}"));
                } else {
                    sim.world
                        .trace
                        .event(sim.world.now_us(), format!("not settled: {e:#}"));
                }
            }
        }
        for p in 0..PARTITIONS as i32 {
            let tp = (TOPIC.to_string(), p);
            sim.consume(&tp)?;
            if let Some(lost) = sim.lost(&tp) {
                if lost > 0 && sim.enforce_durability && sim.failures().is_empty() {
                    outcome.failures.push(format!(
                        "{lost} acknowledged acks=all records of {TOPIC}-{p} are lost"
                    ));
                }
            }
            outcome.acked += sim.acked(&tp);
        }
        if swarm.txn {
            let oracle = crate::client::lock(&sim.oracle);
            let (c, a, u) = oracle.txns.counts();
            let read = oracle.txns.read.values().map(|m| m.len()).sum();
            outcome.txns = Some((c, a, u, read));
            outcome.etl_outputs = oracle.txns.read_count(&(ETL_TOPIC.to_string(), 0));
        }
        sim.check(true);
    }
    for f in sim.failures() {
        outcome.failures.push(format!(
            "at {:.3}s (step {}): {}: {}",
            f.at_us as f64 / 1e6,
            f.step,
            f.violation.property,
            f.violation.detail
        ));
    }
    for host in sim.world.hosts.values() {
        if let Some(exit) = &host.exit {
            outcome
                .failures
                .push(format!("{} stopped by itself: {exit}", host.name));
        }
    }
    outcome.trace_hash = sim.world.trace.hash();
    outcome.steps = sim.world.steps();
    if !outcome.failures.is_empty() && !verbose {
        let tail: Vec<String> = sim.world.trace.tail().cloned().collect();
        outcome
            .failures
            .push(format!("last events:\n    {}", tail.join("\n    ")));
    }
    Ok(())
}

fn gap(rng: &mut StdRng, mean: Duration) -> u64 {
    let mean = mean.as_micros() as u64;
    rng.gen_range(mean / 2..=mean * 3 / 2)
}

fn apply_undo(sim: &mut Sim, action: &Undo) -> anyhow::Result<()> {
    match action {
        Undo::Start(host) => {
            if sim.world.host(host)?.life == Life::Down {
                sim.world.start(host)?;
            }
        }
        Undo::Resume(host) => {
            if matches!(sim.world.host(host)?.life, Life::Paused { .. }) {
                sim.world.resume(host)?;
            }
        }
        Undo::Heal => {
            sim.world.net.heal();
            sim.world.trace.event(sim.world.now_us(), "heal");
        }
        Undo::HealDisk(id) => {
            let host = broker_host(*id);
            if !sim.world.host(&host)?.faults.rules().is_empty() {
                sim.world.heal_disk(*id)?;
            }
            let gave_up = sim
                .world
                .host(&host)?
                .exit
                .as_deref()
                .is_some_and(|e| e.contains(ALL_DIRS_FAILED));
            if gave_up {
                // A broker stops when every log directory failed (as Kafka does); it starts
                // again once the disk is fixed.
                sim.world.finish_stop(&host)?;
                sim.world.start(&host)?;
                return Ok(());
            }
            let offline = sim
                .world
                .host(&host)?
                .running_broker()
                .is_some_and(|b| !b.offline_log_dirs().is_empty());
            if offline && sim.world.host(&host)?.life == Life::Running {
                // The directory comes back by restart (what an operator does once the disk
                // is fixed).
                sim.shutdown(&host)?;
                sim.world.start(&host)?;
            }
        }
    }
    Ok(())
}

/// One storage fault on broker `id`'s disk: bit rot in one of its segment files (running or
/// not), or a fault of the disk (a persistent one lasts until the undo heals it).
fn inject_disk_fault(sim: &mut Sim, id: i32, rng: &mut StdRng) -> anyhow::Result<()> {
    const FAULTS: [Option<DiskFault>; 8] = [
        None, // bit rot
        Some(DiskFault::TornWrite),
        Some(DiskFault::MisdirectedWrite),
        Some(DiskFault::LostWrite),
        Some(DiskFault::WriteErrors),
        Some(DiskFault::ReadErrors),
        Some(DiskFault::Full),
        Some(DiskFault::FailedFsync),
    ];
    match FAULTS[rng.gen_range(0..FAULTS.len())] {
        Some(fault) => sim.disk_fault(id, None, fault),
        None => {
            let dirs = sim.world.partition_dirs(id);
            let files: Vec<(std::path::PathBuf, u64)> = dirs
                .iter()
                .flat_map(|dir| sim.world.segment_files(id, dir))
                .filter(|(_, size)| *size > 0)
                .collect();
            if files.is_empty() {
                return Ok(());
            }
            let (path, size) = files[rng.gen_range(0..files.len())].clone();
            let len = rng.gen_range(1..=16u64).min(size);
            let start = rng.gen_range(0..=size - len);
            let tp = path
                .parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('-'))
                .and_then(|(topic, p)| Some((topic.to_string(), p.parse().ok()?)))
                .ok_or_else(|| anyhow::anyhow!("{} is no partition's", path.display()))?;
            sim.rot(id, &tp, &path, start, len)
        }
    }
}

/// An operator moves a partition of the topic to three of the brokers, in a random order
/// (issue 24), sent from the client host without waiting for the answer: the reassignment runs
/// through whatever faults follow.
fn reassign(sim: &mut Sim, rng: &mut StdRng) -> anyhow::Result<()> {
    let mut brokers = sim.world.broker_ids();
    for i in (1..brokers.len()).rev() {
        brokers.swap(i, rng.gen_range(0..=i));
    }
    brokers.truncate(3);
    let tp = (TOPIC.to_string(), rng.gen_range(0..PARTITIONS as i32));
    let controllers: Vec<String> = sim
        .world
        .config
        .controller_hosts()
        .into_iter()
        .map(|h| format!("{h}:{}", crate::world::CONTROLLER_PORT))
        .collect();
    let now = sim.world.now_us();
    sim.world
        .trace
        .event(now, format!("reassign {}-{} to {brokers:?}", tp.0, tp.1));
    let net = sim.world.host("client")?.net.clone();
    sim.world.host("client")?.spawn(async move {
        // The answer is not awaited by anyone: a refusal (an unregistered or fenced broker is
        // fine to name; a controller failover loses the request) changes nothing.
        let _ = crate::client::reassign_partition(&net, &controllers, &tp, &brokers).await;
    });
    Ok(())
}

/// Injects one fault the swarm allows; returns how to undo it and when.
fn inject(
    sim: &mut Sim,
    swarm: &Swarm,
    rng: &mut StdRng,
) -> anyhow::Result<Option<(Undo, Duration)>> {
    let mut kinds = Vec::new();
    for (on, kind) in [
        (swarm.kill, 0),
        (swarm.power_loss, 1),
        (swarm.wipe, 2),
        (swarm.clean_restart, 3),
        (swarm.pause, 4),
        (swarm.partition, 5),
        (swarm.resets, 6),
        (swarm.disk, 7),
        (swarm.reassign, 8),
    ] {
        if on {
            kinds.push(kind);
        }
    }
    let kind = kinds[rng.gen_range(0..kinds.len())];
    let running: Vec<String> = sim
        .world
        .hosts
        .values()
        .filter(|h| h.life == Life::Running && h.name != "client")
        .filter(|h| swarm.controller_faults || !matches!(h.kind, HostKind::Controller(_)))
        .map(|h| h.name.clone())
        .collect();
    if running.is_empty() {
        return Ok(None);
    }
    let target = running[rng.gen_range(0..running.len())].clone();
    let lossy = broker_host(swarm.lossy_broker);
    let down_for = Duration::from_millis(rng.gen_range(300..6_000));
    Ok(match kind {
        0 => {
            sim.crash(&target, false, false)?;
            Some((Undo::Start(target), down_for))
        }
        1 | 2 => {
            if sim.world.host(&lossy)?.life != Life::Running {
                return Ok(None);
            }
            if kind == 1 {
                sim.crash(&lossy, true, swarm.torn && rng.gen_bool(0.5))?;
            } else {
                sim.crash(&lossy, false, false)?;
                sim.wipe(&lossy)?;
            }
            Some((Undo::Start(lossy), down_for))
        }
        3 => {
            sim.shutdown(&target)?;
            Some((
                Undo::Start(target),
                Duration::from_millis(rng.gen_range(0..3_000)),
            ))
        }
        4 => {
            sim.world.pause(&target)?;
            Some((Undo::Resume(target), down_for))
        }
        7 => {
            inject_disk_fault(sim, swarm.lossy_broker, rng)?;
            Some((Undo::HealDisk(swarm.lossy_broker), down_for))
        }
        8 => {
            reassign(sim, rng)?;
            None
        }
        5 => {
            let others: Vec<String> = sim
                .world
                .hosts
                .keys()
                .filter(|n| **n != target)
                .filter(|_| rng.gen_bool(0.7))
                .cloned()
                .collect();
            for other in &others {
                sim.world.net.cut(&target, other);
            }
            sim.world.trace.event(
                sim.world.now_us(),
                format!("cut {target} from {}", others.join(",")),
            );
            Some((Undo::Heal, down_for))
        }
        _ => {
            let mut local = StdRng::seed_from_u64(rng.gen());
            if let Some((a, b)) = sim.world.net.reset_random_connection(&mut local) {
                sim.world.trace.event(
                    sim.world.now_us(),
                    format!("reset a connection {a} <-> {b}"),
                );
            }
            None
        }
    })
}
