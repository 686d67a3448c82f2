//! A simulation run: the [`World`], the clients' [`Oracle`](crate::client::Oracle) and the [`Checker`], stepped
//! together — the API both the scenario runner and the randomized search drive.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use keel_controller::image::ClusterImage;
use keel_controller::types::TopicPartition;

use crate::checkers::{newest_image, record_at, Checker, Violation};
use crate::client::{lock, Client, SharedOracle, Tp};
use crate::disk::DiskFault;
use crate::trace::Trace;
use crate::txn::{TxnError, TxnProducer};
use crate::world::{broker_host, Mode, SegmentChoice, World, WorldConfig, CLIENT_HOST};

/// How often (in steps) the expensive checks (replica agreement) run.
const FULL_CHECK_EVERY: u64 = 1_000;

/// A topic to create at boot.
#[derive(Debug, Clone)]
pub struct TopicPlan {
    pub name: String,
    pub partitions: u32,
    pub replication_factor: u16,
    pub assignment: Option<Vec<Vec<i32>>>,
    pub configs: Vec<(String, String)>,
}

/// A violation and when it was seen.
#[derive(Debug, Clone)]
pub struct Found {
    pub step: u64,
    pub at_us: u64,
    pub violation: Violation,
}

/// One simulation run.
pub struct Sim {
    pub world: World,
    pub oracle: SharedOracle,
    pub checker: Checker,
    /// Every violation seen, in order.
    pub found: Vec<Found>,
    /// Time each partition spent without a leader (by the newest image), microseconds.
    pub offline_us: BTreeMap<Tp, u64>,
    /// Leaders each partition had, in order of election: (broker, leader epoch); broker -1
    /// marks a time without a leader.
    pub leader_history: BTreeMap<Tp, Vec<(i32, i32)>>,
    topics: Vec<TopicPlan>,
    /// Whether durability violations are failures (Keel mode, unless the run opts out).
    pub enforce_durability: bool,
    /// Transactional producers by transactional id, between scenario steps.
    txn_producers: BTreeMap<String, TxnProducer>,
}

impl Sim {
    pub fn new(config: WorldConfig, verbose: bool) -> anyhow::Result<Sim> {
        let world = World::new(config, Trace::new(verbose))?;
        Ok(Sim {
            world,
            oracle: Arc::new(Mutex::new(Default::default())),
            checker: Checker::new(),
            found: Vec::new(),
            offline_us: BTreeMap::new(),
            leader_history: BTreeMap::new(),
            topics: Vec::new(),
            enforce_durability: true,
            txn_producers: BTreeMap::new(),
        })
    }

    pub fn mode(&self) -> Mode {
        self.world.config.mode
    }

    /// A client on the client host.
    pub fn client(&self, name: &str) -> Client {
        let bootstrap = self
            .world
            .broker_ids()
            .into_iter()
            .map(|id| (id, format!("{}:9092", broker_host(id))))
            .collect();
        let net = self.world.net.clone();
        Client::new(
            self.world
                .host(CLIENT_HOST)
                .expect("the client host exists")
                .net
                .clone(),
            bootstrap,
            self.oracle.clone(),
            Arc::new(move || net.now_us()),
            name,
        )
    }

    /// Starts every node, waits for the brokers to serve, creates `topics` and waits until
    /// every partition has a leader and a full ISR.
    pub fn boot(&mut self, topics: &[TopicPlan]) -> anyhow::Result<()> {
        self.world.start_all()?;
        let client = self.world.host(CLIENT_HOST)?;
        client.spawn(crate::world::observe_metadata(
            client.net.clone(),
            self.world.config.controller_hosts(),
            self.world.observed.clone(),
        ));
        let ids = self.world.broker_ids();
        let all_ready = |w: &World| {
            ids.iter().all(|id| {
                w.host(&broker_host(*id))
                    .is_ok_and(|h| h.ready.load(std::sync::atomic::Ordering::SeqCst))
            })
        };
        if !self.run_until(Duration::from_secs(60), all_ready)? {
            anyhow::bail!("the brokers did not all start within 60 s of simulated time");
        }
        for topic in topics {
            let mut client = self.client("admin");
            let t = topic.clone();
            let deadline = self.world.now_us() + 30_000_000;
            self.run_task(Duration::from_secs(31), async move {
                client
                    .create_topic(
                        &t.name,
                        t.partitions as i32,
                        t.replication_factor as i16,
                        t.assignment.clone(),
                        &t.configs,
                        deadline,
                    )
                    .await
            })?
            .ok_or_else(|| anyhow::anyhow!("creating topic {} did not finish", topic.name))??;
        }
        self.topics = topics.to_vec();
        let plans = self.topics.clone();
        let settled = move |w: &World| {
            let Some(image) = newest_image(w) else {
                return false;
            };
            plans.iter().all(|t| {
                (0..t.partitions).all(|p| {
                    partition_state(&image, &t.name, p as i32)
                        .is_some_and(|s| s.leader.is_some() && s.isr.len() == s.replicas.len())
                })
            }) && w
                .brokers()
                .iter()
                .all(|(_, b)| b.image().last_applied() == image.last_applied())
        };
        if !self.run_until(Duration::from_secs(30), settled)? {
            anyhow::bail!("the topics did not get leaders and full ISRs within 30 s");
        }
        self.world.trace.event(self.world.now_us(), "booted");
        Ok(())
    }

    /// One step of the world, then the checks.
    pub fn step(&mut self) -> anyhow::Result<()> {
        self.world.step()?;
        let full = self.world.steps().is_multiple_of(FULL_CHECK_EVERY);
        self.check(full);
        Ok(())
    }

    /// Runs the checks now (`full`: the expensive ones too).
    pub fn check(&mut self, full: bool) {
        let violations = {
            let oracle = lock(&self.oracle);
            self.checker.check(&self.world, &oracle, full)
        };
        for violation in violations {
            self.world.trace.event(
                self.world.now_us(),
                format!("VIOLATION {}: {}", violation.property, violation.detail),
            );
            self.found.push(Found {
                step: self.world.steps(),
                at_us: self.world.now_us(),
                violation,
            });
        }
        self.observe_leaders();
    }

    fn observe_leaders(&mut self) {
        let Some(image) = newest_image(&self.world) else {
            return;
        };
        let tick = self.world.config.tick.as_micros() as u64;
        for topic in &self.topics {
            for p in 0..topic.partitions as i32 {
                let tp = (topic.name.clone(), p);
                let Some(state) = partition_state(&image, &topic.name, p) else {
                    continue;
                };
                match state.leader {
                    None => {
                        let history = self.leader_history.entry(tp.clone()).or_default();
                        if history.last().is_some_and(|(b, _)| *b >= 0) {
                            history.push((-1, state.leader_epoch.0));
                            self.world.trace.event(
                                self.world.now_us(),
                                format!(
                                    "{}-{}: no leader (epoch {}), ISR {:?}, ELR {:?}, last known ELR {:?}",
                                    tp.0,
                                    tp.1,
                                    state.leader_epoch.0,
                                    state.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                    state.elr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                    state.last_known_elr.iter().map(|b| b.0).collect::<Vec<_>>()
                                ),
                            );
                        }
                        *self.offline_us.entry(tp).or_default() += tick;
                    }
                    Some(leader) => {
                        let history = self.leader_history.entry(tp.clone()).or_default();
                        let now = (leader.0, state.leader_epoch.0);
                        if history.last() != Some(&now) {
                            history.push(now);
                            self.world.trace.event(
                                self.world.now_us(),
                                format!(
                                    "{}-{}: leader {} (epoch {}), ISR {:?}, ELR {:?}, last known ELR {:?}",
                                    tp.0,
                                    tp.1,
                                    leader.0,
                                    state.leader_epoch.0,
                                    state.isr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                    state.elr.iter().map(|b| b.0).collect::<Vec<_>>(),
                                    state.last_known_elr.iter().map(|b| b.0).collect::<Vec<_>>()
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    /// Steps until `done` holds or `limit` passes; whether it held.
    pub fn run_until(
        &mut self,
        limit: Duration,
        mut done: impl FnMut(&World) -> bool,
    ) -> anyhow::Result<bool> {
        let deadline = self.world.now_us() + limit.as_micros() as u64;
        loop {
            if done(&self.world) {
                return Ok(true);
            }
            if self.world.now_us() >= deadline {
                return Ok(false);
            }
            self.step()?;
        }
    }

    /// Steps for `duration`.
    pub fn advance(&mut self, duration: Duration) -> anyhow::Result<()> {
        self.run_until(duration, |_| false).map(|_| ())
    }

    /// Runs `future` on the client host until it finishes (`None` if `limit` passed first).
    pub fn run_task<T: Send + 'static>(
        &mut self,
        limit: Duration,
        future: impl std::future::Future<Output = T> + Send + 'static,
    ) -> anyhow::Result<Option<T>> {
        let handle = self.world.host(CLIENT_HOST)?.spawn(future);
        let finished = self.run_until(limit, |_| handle.is_finished())?;
        if !finished {
            handle.abort();
            return Ok(None);
        }
        let rt_host = self.world.host(CLIENT_HOST)?;
        Ok(Some(rt_host.block_on(handle)?))
    }

    /// Produces `count` records to `tp`, one at a time; each is retried for up to 15 s.
    /// Returns (acknowledged, not acknowledged).
    pub fn produce(&mut self, tp: &Tp, count: u32, acks_all: bool) -> anyhow::Result<(u32, u32)> {
        let mut client = self.client("producer");
        let tp2 = tp.clone();
        let net = self.world.net.clone();
        let outcome =
            self.run_task(Duration::from_secs(15 * u64::from(count) + 5), async move {
                let (mut acked, mut failed) = (0, 0);
                for _ in 0..count {
                    let deadline = net.now_us() + 15_000_000;
                    match client.produce(&tp2, acks_all, deadline).await {
                        Some(_) => acked += 1,
                        None => failed += 1,
                    }
                }
                (acked, failed)
            })?;
        let (acked, failed) = outcome.unwrap_or((0, count));
        self.world.trace.event(
            self.world.now_us(),
            format!(
                "produced to {}-{} (acks={}): {acked} acknowledged, {failed} not",
                tp.0,
                tp.1,
                if acks_all { "all" } else { "1" }
            ),
        );
        Ok((acked, failed))
    }

    /// Reads `tp` up to its high watermark; whether the read completed within 15 s.
    pub fn consume(&mut self, tp: &Tp) -> anyhow::Result<bool> {
        let mut client = self.client("consumer");
        let tp2 = tp.clone();
        let deadline = self.world.now_us() + 15_000_000;
        let done = self
            .run_task(Duration::from_secs(16), async move {
                client.consume(&tp2, deadline).await
            })?
            .unwrap_or(false);
        let consumed = lock(&self.oracle).consumed.get(tp).map_or(0, |m| m.len());
        self.world.trace.event(
            self.world.now_us(),
            format!(
                "consumed {}-{}: {} ({consumed} records known)",
                tp.0,
                tp.1,
                if done {
                    "up to the high watermark"
                } else {
                    "incomplete"
                }
            ),
        );
        Ok(done)
    }

    /// Reads `tp` with `read_committed` up to its last stable offset; the (last stable offset,
    /// high watermark) of the final answer, `None` if the read did not complete within 15 s.
    pub fn consume_committed(&mut self, tp: &Tp) -> anyhow::Result<Option<(i64, i64)>> {
        let mut client = self.client("committed-consumer");
        let tp2 = tp.clone();
        let deadline = self.world.now_us() + 15_000_000;
        let done = self
            .run_task(Duration::from_secs(16), async move {
                client.consume_committed(&tp2, deadline).await
            })?
            .flatten();
        let read = lock(&self.oracle).txns.read_count(tp);
        self.world.trace.event(
            self.world.now_us(),
            format!(
                "read_committed {}-{}: {} ({read} records read)",
                tp.0,
                tp.1,
                match done {
                    Some((lso, hw)) =>
                        format!("up to the last stable offset {lso} (high watermark {hw})"),
                    None => "incomplete".to_string(),
                }
            ),
        );
        Ok(done)
    }

    /// Runs one step of transactional producer `id` (created and initialized on first use,
    /// speaking transactions v2 if `v2` then): `Some((tps, count, commit))` writes `count` records to each partition in a new
    /// transaction (or the open one) and ends it (`commit: None` leaves it open); `None` ends
    /// the open transaction (`end_commit`).
    pub fn txn(
        &mut self,
        id: &str,
        v2: bool,
        write: Option<(Vec<Tp>, u32)>,
        end: Option<bool>,
    ) -> anyhow::Result<Result<(), TxnError>> {
        let mut producer = match self.txn_producers.remove(id) {
            Some(p) => p,
            None if v2 => TxnProducer::new(self.client(&format!("txn-{id}")), id).transactions_v2(),
            None => TxnProducer::new(self.client(&format!("txn-{id}")), id),
        };
        let net = self.world.net.clone();
        let ran = self.run_task(Duration::from_secs(60), async move {
            let deadline = net.now_us() + 45_000_000;
            let outcome = async {
                if let Some((tps, count)) = &write {
                    producer.begin(deadline).await?;
                    for tp in tps {
                        producer.send(tp, *count, deadline).await?;
                    }
                }
                match end {
                    Some(commit) => producer.end(commit, deadline).await,
                    None => Ok(()),
                }
            }
            .await;
            (producer, outcome)
        })?;
        let Some((producer, outcome)) = ran else {
            anyhow::bail!("transactional producer {id} did not finish within 60 s");
        };
        self.world.trace.event(
            self.world.now_us(),
            format!(
                "transactional producer {id} (producer {:?}): {}",
                producer.producer(),
                match &outcome {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.to_string(),
                }
            ),
        );
        self.txn_producers.insert(id.to_string(), producer);
        Ok(outcome)
    }

    /// Once every transaction is decided: reads every partition a transaction wrote with
    /// `read_committed` until its last stable offset reaches its high watermark (within
    /// `limit`), then checks the end-of-run transaction properties. `Err` if a partition did
    /// not become stable.
    pub fn settle_transactions(&mut self, limit: Duration) -> anyhow::Result<()> {
        let tps: Vec<Tp> = {
            let oracle = lock(&self.oracle);
            let mut tps: Vec<Tp> = oracle
                .txns
                .txns
                .values()
                .flat_map(|t| t.acked.keys().cloned())
                .chain(
                    oracle
                        .txns
                        .etl_runs
                        .iter()
                        .map(|(_, input, _)| input.clone()),
                )
                .collect();
            tps.sort();
            tps.dedup();
            tps
        };
        if tps.is_empty() {
            return Ok(());
        }
        let deadline = self.world.now_us() + limit.as_micros() as u64;
        for tp in &tps {
            loop {
                if let Some((lso, hw)) = self.consume_committed(tp)? {
                    if lso == hw {
                        break;
                    }
                }
                if self.world.now_us() >= deadline {
                    anyhow::bail!(
                        "{}-{}: the last stable offset did not reach the high watermark within {} s (an undecided transaction)",
                        tp.0,
                        tp.1,
                        limit.as_secs()
                    );
                }
                self.advance(Duration::from_millis(500))?;
            }
        }
        {
            let mut oracle = lock(&self.oracle);
            let found = crate::txn::final_violations(&oracle.txns);
            oracle.violations.extend(found);
        }
        // Consume-transform-produce runs: their groups' stable committed offsets against the
        // output read.
        let runs: Vec<(String, Tp, Tp)> =
            lock(&self.oracle).txns.etl_runs.iter().cloned().collect();
        for (group, input, output) in runs {
            let mut client = self.client("committed-consumer");
            let (g, tp) = (group.clone(), input.clone());
            let deadline = self.world.now_us() + 15_000_000;
            let committed = self
                .run_task(Duration::from_secs(16), async move {
                    client.committed_offset(&g, &tp, deadline).await
                })?
                .flatten();
            let Some(committed) = committed else {
                anyhow::bail!(
                    "group {group}: the committed offset of {}-{} could not be read (stable) within 15 s",
                    input.0,
                    input.1
                );
            };
            self.world.trace.event(
                self.world.now_us(),
                format!(
                    "group {group} committed {committed:?} for {}-{}",
                    input.0, input.1
                ),
            );
            let mut oracle = lock(&self.oracle);
            let found =
                crate::etl::etl_violations(&oracle.txns, &group, &input, &output, committed);
            oracle.violations.extend(found);
        }
        self.check(false);
        Ok(())
    }

    /// Acknowledged `acks=all` records of `tp` that its current leader's log lacks; `None`
    /// while the partition has no serving leader.
    pub fn lost(&self, tp: &Tp) -> Option<u64> {
        let image = newest_image(&self.world)?;
        let state = partition_state(&image, &tp.0, tp.1)?;
        let leader = state.leader?;
        let broker = self
            .world
            .brokers()
            .into_iter()
            .find(|(id, _)| *id == leader.0)?
            .1;
        let partition = broker.partition(&tp.0, tp.1)?;
        let oracle = lock(&self.oracle);
        Some(
            oracle
                .acked_all(tp)
                .filter(|(offset, a)| record_at(&partition, *offset).as_ref() != Some(&a.value))
                .count() as u64,
        )
    }

    /// Acknowledged `acks=all` records of `tp` that broker `id`'s replica does not hold in a
    /// valid batch; `None` if the broker is not running or has no replica.
    pub fn missing(&self, id: i32, tp: &Tp) -> Option<u64> {
        let broker = self.world.brokers().into_iter().find(|(b, _)| *b == id)?.1;
        let partition = broker.partition(&tp.0, tp.1)?;
        let oracle = lock(&self.oracle);
        Some(
            oracle
                .acked_all(tp)
                .filter(|(offset, a)| record_at(&partition, *offset).as_ref() != Some(&a.value))
                .count() as u64,
        )
    }

    /// Acknowledged `acks=all` records of `tp`.
    pub fn acked(&self, tp: &Tp) -> u64 {
        lock(&self.oracle).acked_all(tp).count() as u64
    }

    /// Crashes a host, noting an unclean data loss against its partitions' budgets.
    pub fn crash(&mut self, host: &str, power_loss: bool, torn: bool) -> anyhow::Result<()> {
        if power_loss {
            if let Some(id) = host.strip_prefix('b').and_then(|s| s.parse().ok()) {
                self.checker.note_unclean_loss(&self.world, id);
            }
        }
        self.world.crash(host, power_loss, torn)
    }

    /// Replaces a stopped broker's disk, noting the loss.
    pub fn wipe(&mut self, host: &str) -> anyhow::Result<()> {
        if let Some(id) = host.strip_prefix('b').and_then(|s| s.parse().ok()) {
            self.checker.note_unclean_loss(&self.world, id);
        }
        self.world.wipe(host)
    }

    /// Bit rot in broker `id`'s replica of `tp` (see [`World::corrupt`]), noted as a loss of
    /// that replica and as a disk that lied.
    pub fn corrupt(
        &mut self,
        id: i32,
        tp: &Tp,
        segment: SegmentChoice,
        at: Option<u64>,
        len: u64,
    ) -> anyhow::Result<()> {
        self.checker.note_loss(tp, id);
        self.checker.lying_disks.insert(id);
        self.world.corrupt(id, &tp.0, tp.1, segment, at, len)
    }

    /// Bit rot in bytes `start..start + len` of `path`, a file of broker `id`'s replica of
    /// `tp` (see [`World::flip`]), noted like [`Sim::corrupt`].
    pub fn rot(
        &mut self,
        id: i32,
        tp: &Tp,
        path: &std::path::Path,
        start: u64,
        len: u64,
    ) -> anyhow::Result<()> {
        self.checker.note_loss(tp, id);
        self.checker.lying_disks.insert(id);
        self.world.flip(id, path, start, len)
    }

    /// A fault of broker `id`'s disk (see [`World::disk_fault`]), noted as a loss of every
    /// replica the broker holds (and, for a fault that returns other bytes than were
    /// written, as a disk that lied).
    pub fn disk_fault(
        &mut self,
        id: i32,
        dir: Option<usize>,
        fault: DiskFault,
    ) -> anyhow::Result<()> {
        self.checker.note_unclean_loss(&self.world, id);
        if fault.lies() {
            self.checker.lying_disks.insert(id);
        }
        self.world.disk_fault(id, dir, fault)
    }

    /// Cleanly stops a host (stepping the world meanwhile, checks included).
    pub fn shutdown(&mut self, host: &str) -> anyhow::Result<()> {
        self.world.request_stop(host)?;
        let name = host.to_string();
        let stopped = self.run_until(Duration::from_secs(60), |w| w.task_finished(&name))?;
        if !stopped {
            anyhow::bail!("{host} did not stop within 60 s");
        }
        self.world.finish_stop(host)
    }

    /// Violations that count as failures in this mode: all in Keel mode, structural ones in
    /// classic mode.
    pub fn failures(&self) -> Vec<&Found> {
        let durability = self.mode() == Mode::Keel && self.enforce_durability;
        self.found
            .iter()
            .filter(|f| durability || !f.violation.durability)
            .collect()
    }
}

/// A partition's state in an image, by topic name and index.
pub fn partition_state<'a>(
    image: &'a ClusterImage,
    topic: &str,
    partition: i32,
) -> Option<&'a keel_controller::partition::PartitionState> {
    let id = image.topic_id(topic)?;
    image.partition(TopicPartition::new(id, u32::try_from(partition).ok()?))
}
