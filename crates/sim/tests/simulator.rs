//! The simulator proves things only if it is deterministic and its checkers can fail: same
//! seed, same trace; and a run of Kafka's classic rules through KIP-966's motivating example
//! must lose acknowledged records — and the checkers must say so — where Keel's rules lose none.

use std::time::Duration;

use keel_sim::runner;
use keel_sim::scenario;
use keel_sim::search;
use keel_sim::world::Mode;

const LAST_REPLICA_STANDING: &str =
    include_str!("../scenarios/kip966-last-replica-standing.scenario");
const LAST_REPLICA_DAMAGED: &str =
    include_str!("../scenarios/issue19-last-replica-damaged.scenario");

// Shows: a seed run twice gives the same trace hash and the same number of steps — seed 10
// with storage faults too (every choice of the faulty disk comes from the seed).
#[test]
fn a_seed_replays_bit_for_bit() {
    for seed in [3, 10, 11] {
        let a = search::run_seed(seed, Duration::from_secs(5), false);
        let b = search::run_seed(seed, Duration::from_secs(5), false);
        assert_eq!(a.failures, b.failures, "seed {seed}");
        assert_eq!(
            (a.trace_hash, a.steps),
            (b.trace_hash, b.steps),
            "seed {seed} ran differently twice"
        );
    }
}

// Shows: different seeds give different runs (the hash covers the run, not a constant).
#[test]
fn different_seeds_differ() {
    let a = search::run_seed(1, Duration::from_secs(3), false);
    let b = search::run_seed(2, Duration::from_secs(3), false);
    assert_ne!(a.trace_hash, b.trace_hash);
}

// Shows: in classic mode the last-replica-standing sequence loses acknowledged acks=all
// records and the durability checkers report it; in Keel mode nothing is lost and no checker
// fires.
#[test]
fn classic_loses_what_keel_keeps() {
    let s = scenario::parse(LAST_REPLICA_STANDING).unwrap();
    let classic = runner::run(&s, Mode::Classic, 1, false);
    assert!(classic.failure.is_none(), "{:?}", classic.failure);
    let p = &classic.partitions[0];
    assert!(p.acked >= 20, "{p:?}");
    assert!(p.lost.unwrap_or(0) >= 1, "classic lost nothing: {p:?}");
    assert!(
        classic
            .durability_violations
            .iter()
            .any(|v| v.contains("committed record")),
        "no checker noticed the loss: {:?}",
        classic.durability_violations
    );

    let keel = runner::run(&s, Mode::Keel, 1, false);
    assert!(keel.failure.is_none(), "{:?}", keel.failure);
    assert_eq!(keel.partitions[0].lost, Some(0));
    assert!(
        keel.durability_violations.is_empty(),
        "{:?}",
        keel.durability_violations
    );
}

// Shows: fsync latency costs simulated time — the controller fsyncs its metadata log on every
// commit, so a cluster on slow disks takes longer (in simulated time) to boot and create a
// topic.
#[test]
fn fsync_latency_blocks_the_host() {
    use keel_sim::sim::{Sim, TopicPlan};
    use keel_sim::world::WorldConfig;
    let boot = |fsync: Duration| {
        let mut config = WorldConfig::new(5, 3, Mode::Keel);
        config.fsync_latency = fsync;
        let mut sim = Sim::new(config, false).unwrap();
        sim.boot(&[TopicPlan {
            name: "t".into(),
            partitions: 1,
            replication_factor: 3,
            assignment: None,
            configs: Vec::new(),
        }])
        .unwrap();
        sim.world.now()
    };
    let fast = boot(Duration::ZERO);
    let slow = boot(Duration::from_millis(300));
    assert!(
        slow > fast + Duration::from_millis(300),
        "fsync latency did not slow the boot: {fast:?} vs {slow:?}"
    );
}

// Shows: the checkers see what storage faults cost (issue 19). The last replica standing finds
// bit rot and sets it aside: classic rules elect it again with its truncated log, and the
// durability checkers report the acknowledged records it lacks; Keel's Balanced recovery elects
// the longer log instead and nothing is lost.
#[test]
fn a_damaged_last_replica_costs_classic_not_keel() {
    let s = scenario::parse(LAST_REPLICA_DAMAGED).unwrap();
    let classic = runner::run(&s, Mode::Classic, 1, false);
    assert!(classic.failure.is_none(), "{:?}", classic.failure);
    assert!(classic.partitions[0].lost.unwrap_or(0) >= 1, "{classic:?}");
    assert!(
        classic
            .durability_violations
            .iter()
            .any(|v| v.contains("committed record")),
        "{:?}",
        classic.durability_violations
    );
    let keel = runner::run(&s, Mode::Keel, 1, false);
    assert!(keel.failure.is_none(), "{:?}", keel.failure);
    assert_eq!(keel.partitions[0].lost, Some(0));
    assert!(
        keel.durability_violations.is_empty(),
        "{:?}",
        keel.durability_violations
    );
}
