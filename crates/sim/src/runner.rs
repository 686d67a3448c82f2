//! Runs a scenario file (see `docs/scenarios.md`) in one mode: boots the cluster it describes,
//! performs its steps, evaluates its expectations, and runs the checkers after every step.

use std::time::Duration;

use crate::checkers::newest_image;
use crate::client::lock;
use crate::scenario::{
    Acks, Cmp, Condition, ConfigResource, Expectation, Mode as ScenarioMode, Node, Scenario, Step,
    Tp, TxnOutcome, TxnStepEnd,
};
use crate::sim::{partition_state, Sim, TopicPlan};
use crate::txn::TxnError;
use crate::world::{broker_host, Mode, World, WorldConfig};

/// The outcome of one scenario in one mode.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub scenario: String,
    pub mode: Mode,
    pub seed: u64,
    /// The first failure (a failed expectation, step or checker), with its source line.
    pub failure: Option<String>,
    /// Per partition: acknowledged acks=all records, records lost (`None`: offline at the end),
    /// time offline, and the final leader (broker, epoch).
    pub partitions: Vec<PartitionOutcome>,
    pub trace_hash: u64,
    pub steps: u64,
    pub sim_time: Duration,
    /// Violations of durability properties (expected in classic mode).
    pub durability_violations: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct PartitionOutcome {
    pub tp: (String, i32),
    pub acked: u64,
    pub lost: Option<u64>,
    pub offline: Duration,
    pub leader: Option<(i32, i32)>,
    pub leaders: Vec<(i32, i32)>,
}

fn mode_of(m: ScenarioMode) -> Mode {
    match m {
        ScenarioMode::Keel => Mode::Keel,
        ScenarioMode::Classic => Mode::Classic,
    }
}

/// The host a step's node names. `controller` is the active controller when the step runs
/// (with one controller, the controller) — except for a step that wakes a node (`start`,
/// `restart`, `resume`), where it is the controller an earlier step acted on if that one is
/// down or paused: `pause controller` ... `resume controller` pause and resume the same host.
fn host_of(world: &mut World, node: &Node, waking: bool) -> String {
    match node {
        Node::Broker(id) => broker_host(*id),
        Node::ControllerAt(i) => world.config.controller_host(*i),
        Node::Controller => {
            let acted_on = world.last_controller.clone().filter(|h| {
                waking
                    && world
                        .host(h)
                        .is_ok_and(|h| h.life != crate::world::Life::Running)
            });
            let host = acted_on
                .or_else(|| world.active_controller())
                .or_else(|| world.last_controller.clone())
                .unwrap_or_else(|| world.config.controller_host(0));
            world.last_controller = Some(host.clone());
            host
        }
    }
}

fn tp_of(tp: &Tp) -> (String, i32) {
    (tp.topic.clone(), tp.partition)
}

fn compare(cmp: &Cmp, left: i64, right: i64) -> bool {
    match cmp {
        Cmp::Eq => left == right,
        Cmp::Ge => left >= right,
        Cmp::Le => left <= right,
        Cmp::Gt => left > right,
        Cmp::Lt => left < right,
    }
}

/// Whether `cond` holds now; `Err` explains what was found instead.
pub fn holds(world: &World, cond: &Condition) -> Result<(), String> {
    let image = newest_image(world);
    let state = |tp: &Tp| {
        image
            .as_ref()
            .and_then(|i| partition_state(i, &tp.topic, tp.partition).cloned())
            .ok_or_else(|| format!("{tp} is not in any running broker's metadata"))
    };
    let list = |set: &std::collections::BTreeSet<keel_controller::types::BrokerId>| {
        set.iter().map(|b| b.0).collect::<Vec<_>>()
    };
    let same = |found: Vec<i32>, want: &Vec<i32>, what: &str| {
        if &found == want {
            Ok(())
        } else {
            Err(format!("{what} is {found:?}"))
        }
    };
    match cond {
        Condition::Leader { tp, is } => {
            let s = state(tp)?;
            let found = s.leader.map(|b| b.0);
            if found == *is {
                Ok(())
            } else {
                Err(format!(
                    "leader is {}",
                    found.map_or("none".to_string(), |l| l.to_string())
                ))
            }
        }
        Condition::Isr { tp, is } => same(list(&state(tp)?.isr), is, "ISR"),
        Condition::Elr { tp, is } => same(list(&state(tp)?.elr), is, "ELR"),
        Condition::LastKnownElr { tp, is } => {
            same(list(&state(tp)?.last_known_elr), is, "last known ELR")
        }
        Condition::LeaderEpoch { tp, cmp, value } => {
            let e = i64::from(state(tp)?.leader_epoch.0);
            if compare(cmp, e, *value) {
                Ok(())
            } else {
                Err(format!("leader epoch is {e}"))
            }
        }
        Condition::Fenced { node, fenced } => {
            let image = image.ok_or("no running broker has metadata")?;
            let reg = image
                .broker(keel_controller::types::BrokerId(*node))
                .ok_or_else(|| format!("broker {node} is not registered"))?;
            let is_fenced = reg.state == keel_controller::image::BrokerState::Fenced;
            if is_fenced == *fenced {
                Ok(())
            } else {
                Err(format!("broker {node} is {:?}", reg.state))
            }
        }
        Condition::DirOffline { node, dir, offline } => {
            let broker = world
                .host(&broker_host(*node))
                .ok()
                .and_then(|h| h.running_broker())
                .ok_or_else(|| format!("broker {node} is not running"))?;
            let offline_dirs: Vec<std::path::PathBuf> = broker
                .offline_log_dirs()
                .into_iter()
                .map(|d| d.path)
                .collect();
            let found = match dir {
                Some(i) => {
                    let path = world.broker_log_dirs(*node)[*i as usize].clone();
                    offline_dirs.contains(&path)
                }
                None => !offline_dirs.is_empty(),
            };
            if found == *offline {
                Ok(())
            } else {
                Err(format!(
                    "broker {node}'s offline log directories are {offline_dirs:?}"
                ))
            }
        }
        Condition::Ready(id) => {
            let ready = world
                .host(&broker_host(*id))
                .is_ok_and(|h| h.ready.load(std::sync::atomic::Ordering::SeqCst));
            if ready {
                Ok(())
            } else {
                Err(format!("broker {id} is not serving"))
            }
        }
    }
}

/// Runs `scenario` in `mode` with `seed`.
pub fn run(scenario: &Scenario, mode: Mode, seed: u64, verbose: bool) -> Outcome {
    let mut config = WorldConfig::new(seed, scenario.brokers, mode);
    config.controllers = scenario.controllers;
    config.log_dirs = scenario.log_dirs;
    config.configs = scenario.configs.clone();
    let mut outcome = Outcome {
        scenario: scenario.name.clone(),
        mode,
        seed,
        failure: None,
        partitions: Vec::new(),
        trace_hash: 0,
        steps: 0,
        sim_time: Duration::ZERO,
        durability_violations: Vec::new(),
    };
    let mut sim = match Sim::new(config, verbose) {
        Ok(s) => s,
        Err(e) => {
            outcome.failure = Some(format!("cannot build the world: {e:#}"));
            return outcome;
        }
    };
    let topics: Vec<TopicPlan> = scenario
        .topics
        .iter()
        .map(|t| TopicPlan {
            name: t.name.clone(),
            partitions: t.partitions,
            replication_factor: t.replication_factor,
            assignment: t.assignment.clone(),
            configs: t.configs.clone(),
        })
        .collect();
    if let Err(e) = sim.boot(&topics) {
        outcome.failure = Some(format!("boot: {e:#}"));
    }
    if outcome.failure.is_none() {
        for line in &scenario.steps {
            if line.mode.is_some_and(|m| mode_of(m) != mode) {
                continue;
            }
            sim.world.trace.event(
                sim.world.now_us(),
                format!("line {}: {}", line.line, line.item),
            );
            let result = perform(&mut sim, &line.item);
            if let Err(e) = result {
                outcome.failure = Some(format!("line {} ({}): {e}", line.line, line.item));
                break;
            }
            if let Some(f) = sim.failures().first() {
                outcome.failure = Some(format!(
                    "line {} ({}): at {:.3}s (step {}): {}: {}",
                    line.line,
                    line.item,
                    f.at_us as f64 / 1e6,
                    f.step,
                    f.violation.property,
                    f.violation.detail
                ));
                break;
            }
        }
    }
    if outcome.failure.is_none() {
        // Every transaction decided (the coordinator aborts what was left open when it times
        // out), every partition it wrote read with read_committed, and checked.
        let limit =
            Duration::from_millis(crate::txn::TXN_TIMEOUT_MS as u64) + Duration::from_secs(50);
        if let Err(e) = sim.settle_transactions(limit) {
            outcome.failure = Some(format!("at the end: {e:#}"));
        }
    }
    if outcome.failure.is_none() {
        sim.check(true);
        if let Some(f) = sim.failures().first() {
            outcome.failure = Some(format!(
                "at the end: {}: {}",
                f.violation.property, f.violation.detail
            ));
        }
    }
    for t in &topics {
        for p in 0..t.partitions as i32 {
            let tp = (t.name.clone(), p);
            let leaders = sim.leader_history.get(&tp).cloned().unwrap_or_default();
            let leader = newest_image(&sim.world).and_then(|i| {
                partition_state(&i, &t.name, p)
                    .and_then(|s| s.leader.map(|l| (l.0, s.leader_epoch.0)))
            });
            outcome.partitions.push(PartitionOutcome {
                acked: sim.acked(&tp),
                lost: sim.lost(&tp),
                offline: Duration::from_micros(sim.offline_us.get(&tp).copied().unwrap_or(0)),
                leader,
                leaders,
                tp,
            });
        }
    }
    outcome.durability_violations = sim
        .found
        .iter()
        .filter(|f| f.violation.durability)
        .map(|f| format!("{}: {}", f.violation.property, f.violation.detail))
        .collect();
    outcome.trace_hash = sim.world.trace.hash();
    outcome.steps = sim.world.steps();
    outcome.sim_time = sim.world.now();
    if outcome.failure.is_some() && !verbose {
        let tail: Vec<String> = sim.world.trace.tail().cloned().collect();
        if let Some(f) = outcome.failure.as_mut() {
            f.push_str("\n  last events:\n");
            for line in tail {
                f.push_str("    ");
                f.push_str(&line);
                f.push('\n');
            }
        }
    }
    outcome
}

/// Whether a transactional step ended as the scenario expects.
fn txn_expected(outcome: Result<(), TxnError>, expect: TxnOutcome) -> Result<(), String> {
    match (expect, outcome) {
        (TxnOutcome::Ok, Ok(())) => Ok(()),
        (TxnOutcome::Fenced, Err(TxnError::Fenced(_))) => Ok(()),
        (TxnOutcome::Failed, Err(_)) => Ok(()),
        (_, Ok(())) => Err(format!(
            "the transactional producer succeeded; expected {expect}"
        )),
        (_, Err(e)) => Err(format!(
            "the transactional producer failed: {e}; expected {expect}"
        )),
    }
}

fn perform(sim: &mut Sim, step: &Step) -> Result<(), String> {
    let err = |e: anyhow::Error| format!("{e:#}");
    match step {
        Step::Start(node) => {
            let host = host_of(&mut sim.world, node, true);
            sim.world.start(&host).map_err(err)
        }
        Step::Crash {
            node,
            lose_unflushed,
            torn,
        } => {
            let host = host_of(&mut sim.world, node, false);
            sim.crash(&host, *lose_unflushed, *torn).map_err(err)
        }
        Step::Shutdown(node) => {
            let host = host_of(&mut sim.world, node, false);
            sim.shutdown(&host).map_err(err)
        }
        Step::Restart(node) => {
            let host = host_of(&mut sim.world, node, true);
            sim.shutdown(&host).map_err(err)?;
            sim.world.start(&host).map_err(err)
        }
        Step::Wipe(id) => sim.wipe(&broker_host(*id)).map_err(err),
        Step::Pause(node) => {
            let host = host_of(&mut sim.world, node, false);
            sim.world.pause(&host).map_err(err)
        }
        Step::Resume(node) => {
            let host = host_of(&mut sim.world, node, true);
            sim.world.resume(&host).map_err(err)
        }
        Step::Isolate(node) => {
            let me = host_of(&mut sim.world, node, false);
            let others: Vec<String> = sim.world.hosts.keys().cloned().collect();
            for other in others {
                sim.world.net.cut(&me, &other);
            }
            sim.world
                .trace
                .event(sim.world.now_us(), format!("isolate {me}"));
            Ok(())
        }
        Step::Partition(a, b) => {
            for x in a {
                for y in b {
                    let (x, y) = (
                        host_of(&mut sim.world, x, false),
                        host_of(&mut sim.world, y, false),
                    );
                    sim.world.net.cut(&x, &y);
                }
            }
            sim.world.trace.event(
                sim.world.now_us(),
                format!("cut links: {:?}", sim.world.net.cut_links()),
            );
            Ok(())
        }
        Step::Heal => {
            sim.world.net.heal();
            sim.world.trace.event(sim.world.now_us(), "heal");
            Ok(())
        }
        Step::Hold {
            from,
            to,
            api,
            answer,
        } => {
            let key = crate::scenario::api_key(api).ok_or_else(|| format!("unknown API {api}"))?;
            let (from, to) = (
                host_of(&mut sim.world, from, false),
                host_of(&mut sim.world, to, false),
            );
            if *answer {
                sim.world.net.hold_answer(&from, &to, key);
            } else {
                sim.world.net.hold(&from, &to, key);
            }
            sim.world.trace.event(
                sim.world.now_us(),
                format!(
                    "hold {api} {} {from} -> {to}",
                    if *answer { "answers" } else { "requests" }
                ),
            );
            Ok(())
        }
        Step::Release => {
            sim.world.net.release();
            sim.world
                .trace
                .event(sim.world.now_us(), "release held requests");
            Ok(())
        }
        Step::Elect { tp, kind } => {
            let net = sim
                .world
                .host(crate::world::CLIENT_HOST)
                .map_err(err)?
                .net
                .clone();
            let controller = host_of(&mut sim.world, &Node::Controller, false);
            let addr = format!("{controller}:{}", crate::world::CONTROLLER_PORT);
            let tp2 = tp_of(tp);
            let kind = *kind;
            let answer = sim
                .run_task(Duration::from_secs(40), async move {
                    crate::client::elect_leader(&net, &addr, &tp2, kind).await
                })
                .map_err(err)?
                .ok_or("ElectLeaders did not finish")?
                .map_err(err)?;
            sim.world.trace.event(
                sim.world.now_us(),
                format!(
                    "ElectLeaders {kind} {tp}: error {} {}",
                    answer.0,
                    answer.1.clone().unwrap_or_default()
                ),
            );
            match answer.0 {
                0 => Ok(()),
                code => Err(format!(
                    "ElectLeaders answered error {code}: {}",
                    answer.1.unwrap_or_default()
                )),
            }
        }
        Step::Wait(d) => sim.advance(*d).map_err(err),
        Step::Await { cond, within } => {
            let c = cond.clone();
            let held = sim
                .run_until(*within, |w| holds(w, &c).is_ok())
                .map_err(err)?;
            if held {
                Ok(())
            } else {
                Err(format!(
                    "still not true after {within:?}: {}",
                    holds(&sim.world, cond).err().unwrap_or_default()
                ))
            }
        }
        Step::Produce { tp, count, acks } => sim
            .produce(&tp_of(tp), *count, matches!(acks, Acks::All))
            .map(|_| ())
            .map_err(err),
        Step::Consume(tp) => sim.consume(&tp_of(tp)).map(|_| ()).map_err(err),
        Step::ConsumeCommitted(tp) => match sim.consume_committed(&tp_of(tp)).map_err(err)? {
            Some(_) => Ok(()),
            None => Err(format!("{tp} could not be read within 15 s")),
        },
        Step::Txn {
            id,
            tps,
            count,
            v2,
            end,
            expect,
        } => {
            let end = match end {
                TxnStepEnd::Commit => Some(true),
                TxnStepEnd::Abort => Some(false),
                TxnStepEnd::Open => None,
            };
            let write = Some((tps.iter().map(tp_of).collect(), *count));
            let outcome = sim.txn(id, *v2, write, end).map_err(err)?;
            txn_expected(outcome, *expect)
        }
        Step::TxnEnd { id, commit, expect } => {
            let outcome = sim.txn(id, false, None, Some(*commit)).map_err(err)?;
            txn_expected(outcome, *expect)
        }
        Step::AlterConfig {
            resource,
            key,
            value,
        } => {
            let mut client = sim.client("admin");
            let topic = match resource {
                ConfigResource::Topic(t) => Some(t.clone()),
                ConfigResource::Cluster => None,
            };
            let (key, value) = (key.clone(), value.clone());
            let deadline = sim.world.now_us() + 15_000_000;
            let done = sim
                .run_task(Duration::from_secs(16), async move {
                    client
                        .alter_config(topic.as_deref(), &key, value.as_deref(), deadline)
                        .await
                })
                .map_err(err)?;
            match done {
                Some(Ok(())) => Ok(()),
                Some(Err(e)) => Err(format!("{e:#}")),
                None => Err("the config change did not finish".to_string()),
            }
        }
        Step::Expect(expectation) => expect(sim, expectation),
        Step::Corrupt {
            broker,
            tp,
            segment,
            at,
            bytes,
        } => sim
            .corrupt(*broker, &tp_of(tp), *segment, *at, *bytes)
            .map_err(err),
        Step::Disk { broker, fault, dir } => sim
            .disk_fault(*broker, dir.map(|d| d as usize), *fault)
            .map_err(err),
        Step::HealDisk(broker) => sim.world.heal_disk(*broker).map_err(err),
    }
}

fn expect(sim: &mut Sim, expectation: &Expectation) -> Result<(), String> {
    match expectation {
        Expectation::Holds(cond) => holds(&sim.world, cond),
        Expectation::Lost { tp, cmp, count } => {
            let lost = sim.lost(&tp_of(tp)).ok_or_else(|| {
                format!("{tp} has no serving leader: lost records cannot be counted")
            })?;
            if compare(cmp, lost as i64, *count as i64) {
                Ok(())
            } else {
                Err(format!("{lost} acknowledged acks=all records are lost"))
            }
        }
        Expectation::Committed { tp, cmp, count } => {
            let read = lock(&sim.oracle).txns.read_count(&tp_of(tp));
            if compare(cmp, read as i64, *count as i64) {
                Ok(())
            } else {
                Err(format!("read_committed consumers read {read} records"))
            }
        }
        Expectation::Acked { tp, cmp, count } => {
            let acked = sim.acked(&tp_of(tp));
            if compare(cmp, acked as i64, *count as i64) {
                Ok(())
            } else {
                Err(format!("{acked} acks=all records were acknowledged"))
            }
        }
        Expectation::Quarantined {
            node,
            tp,
            cmp,
            bytes,
        } => {
            let found = sim.world.quarantined_bytes(*node, &tp.topic, tp.partition);
            if compare(cmp, found as i64, *bytes as i64) {
                Ok(())
            } else {
                Err(format!(
                    "broker {node} has {found} bytes of {tp} in quarantine"
                ))
            }
        }
        Expectation::Missing {
            node,
            tp,
            cmp,
            count,
        } => {
            let missing = sim
                .missing(*node, &tp_of(tp))
                .ok_or_else(|| format!("broker {node} is not running or has no replica of {tp}"))?;
            if compare(cmp, missing as i64, *count as i64) {
                Ok(())
            } else {
                Err(format!(
                    "broker {node}'s replica lacks {missing} acknowledged acks=all records"
                ))
            }
        }
        Expectation::LogDir { node, tp, dir } => {
            let found = sim
                .world
                .partition_dir(*node, &tp.topic, tp.partition)
                .ok_or_else(|| format!("broker {node} has no directory for {tp}"))?;
            let want = &sim.world.broker_log_dirs(*node)[*dir as usize];
            if found.starts_with(want) {
                Ok(())
            } else {
                Err(format!("{tp} is in {} on broker {node}", found.display()))
            }
        }
        Expectation::Offline { tp, offline } => {
            let image = newest_image(&sim.world).ok_or("no running broker has metadata")?;
            let state = partition_state(&image, &tp.topic, tp.partition)
                .ok_or_else(|| format!("{tp} is unknown"))?;
            let is_offline = state.leader.is_none();
            if is_offline == *offline {
                Ok(())
            } else {
                Err(format!(
                    "{tp} is {}",
                    if is_offline { "offline" } else { "online" }
                ))
            }
        }
    }
}
