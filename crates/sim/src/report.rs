//! The classic-vs-Keel table of `docs/durability.md`: every seed scenario run in both modes,
//! with what each lost, how long it was offline and whom it elected.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::runner::Outcome;
use crate::scenario::Scenario;
use crate::world::Mode;

/// One scenario's file, parsed scenario and outcomes.
#[derive(Debug, Clone)]
pub struct Row {
    pub file: PathBuf,
    pub scenario: Scenario,
    pub outcomes: Vec<Outcome>,
}

fn leader(o: &Outcome) -> String {
    let chosen: Vec<String> = o
        .partitions
        .iter()
        .map(|p| match p.leader {
            Some((b, e)) => format!("broker {b} (epoch {e})"),
            None => "none (offline)".to_string(),
        })
        .collect();
    chosen.join(", ")
}

fn lost(o: &Outcome) -> String {
    let parts: Vec<String> = o
        .partitions
        .iter()
        .map(|p| match p.lost {
            Some(n) => format!("{n} of {}", p.acked),
            None => format!("unknown (offline) of {}", p.acked),
        })
        .collect();
    parts.join(", ")
}

fn offline(o: &Outcome) -> String {
    let parts: Vec<String> = o
        .partitions
        .iter()
        .map(|p| format!("{:.1} s", p.offline.as_secs_f64()))
        .collect();
    parts.join(", ")
}

/// The markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| Scenario | Mode | acks=all records lost | Time offline | Leader at the end | Expectations |\n",
    );
    out.push_str("|---|---|---|---|---|---|\n");
    for row in rows {
        for o in &row.outcomes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.scenario.name,
                match o.mode {
                    Mode::Keel => "Keel",
                    Mode::Classic => "classic",
                },
                lost(o),
                offline(o),
                leader(o),
                if o.failure.is_none() {
                    "pass"
                } else {
                    "**FAIL**"
                }
            );
        }
    }
    out
}

/// What each storage fault costs and what the operator sees (issue 19), after the table.
const STORAGE_FAULTS: &str = "
## Storage faults: what each costs

A replica whose disk lied or failed has lost data, like one that lost its page cache: it is \
not clean, leaves the ISR and ELR and re-replicates from the leader. What that costs is the \
re-replication of what it lost and, where it led, one leader change; nothing acknowledged is \
lost while a clean ISR or ELR member exists. Damaged data is set aside, never deleted \
(`docs/operations.md`, *Storage faults*, lists the log lines, metrics and `keel status` lines; \
`docs/benchmarks.md` what the checks cost).

| fault | scenario | what it costs | what the operator sees |
|---|---|---|---|
| bit rot in a closed segment of a stopped broker | `issue19-corrupt-first-batch` | that replica's log from the damaged batch on, re-replicated; it registers as an unclean shutdown, so while it is the only ELR member the partition waits for a clean replica instead of electing its short log (offline 7.4 s here, in both modes: Kafka's rules had no ELR to lose it from) | ERROR `damaged log data set aside`, WARN `registering as an unclean shutdown`, the quarantine directory, `keel status`: damaged data set aside |
| bit rot found by a leader's verified read for a follower | `issue19-corrupt-closed-segment` | one leader change, no time offline; the follower never receives the corrupt batch | ERROR `damaged log data`, `keel_log_damage_found_total{found_by=\"follower_read\"}`, the quarantine |
| bit rot in the last replica standing (the scrubber finds it) | `issue19-last-replica-damaged` | the Balanced recovery decides with the truncated log end and elects the longer replica: nothing lost; Kafka's rules elect the damaged last ISR member with what it has left (8 of 40 lost) | as above, `found_by=\"scrub\"`; the partition's recovery in `keel status` |
| a torn write | `issue19-torn-write` | one leader change; the producer retries once (NOT_LEADER_OR_FOLLOWER) | as for bit rot |
| a lost write (the disk acknowledged an append and its fsync it never made) | `issue19-lost-write` | found by the next recovery: the log ends before the hole, the rest of the segment is quarantined and re-replicated | WARN/ERROR at start, unclean registration, the quarantine |
| a misdirected write (a valid batch in the wrong place) | search, seed 1694 (`--seconds 40`) | as for bit rot: a verified read requires each batch to hold the offsets asked for | as for bit rot |
| a failed fsync | `issue19-failed-fsync` | the whole log directory, offline until a restart (never retried as if the data were safe); the high watermark stops waiting for it at once | ERROR `log directory failed`, `keel_log_dir_offline_count`, `keel status`: offline log directories |
| a full disk (ENOSPC), EIO | `issue19-full-disk` | that directory's partitions, led and followed elsewhere until a restart; the broker's other directories go on | as for a failed fsync; producers get `KAFKA_STORAGE_ERROR` and move to the new leader |

The randomized search draws these faults for 40% of its seeds (`docs/simulator.md`).
";

/// The whole of `docs/durability.md`: how it was made, the table, and what each scenario is.
pub fn document(rows: &[Row], table: &str, seed: u64) -> String {
    let mut out = String::new();
    out.push_str("# Durability: classic Kafka rules vs Keel, in the simulator\n\n");
    out.push_str(
        "Generated by `cargo run --release -p keel-sim -- report --out docs/durability.md` \
         (do not edit by hand). Each scenario of `crates/sim/scenarios/` runs twice in the \
         deterministic simulator — the real controller and broker code over a simulated \
         network, clock and disk — once in Keel mode (KIP-966: ELR, the strict high-watermark \
         rule, unclean-shutdown detection, unclean recovery) and once in classic mode \
         (`eligible.leader.replicas.enable=false`: Kafka's ISR rules). Seed ",
    );
    let _ = write!(out, "{seed}.\n\n");
    out.push_str(
        "*acks=all records lost*: acknowledged `acks=all` records missing from the leader's \
         log at the end, of those acknowledged. *Time offline*: simulated time the partition \
         had no leader. *Expectations*: whether every `expect` of the scenario held (and, in \
         Keel mode, every checker).\n\n",
    );
    out.push_str(table);
    out.push_str(
        "\nThe KAFKA-532 scenario runs a quorum of three controllers; in both modes the paused \
         controller's stale view never reaches a broker (Raft commits, the checkers' one active \
         controller per epoch), so its row reads the same in both.\n",
    );
    out.push_str(
        "\nThe `issue19-` scenarios inject storage faults (bit rot, torn, misdirected and lost \
         writes, a full disk, a failed fsync: `docs/scenarios.md`). Classic mode runs Keel's \
         handling of them too — damage set aside and quarantined, a failed log directory taken \
         offline, an unclean registration after a log lost data — and differs only in the \
         election rules: where the last ISR member lost data (`issue19-last-replica-damaged`) \
         Kafka's rules elect it again with what it has left.\n",
    );
    out.push_str(STORAGE_FAULTS);
    out.push_str("\n## The scenarios\n\n");
    for row in rows {
        let _ = writeln!(
            out,
            "### {}\n\n`{}`\n",
            row.scenario.name,
            row.file.file_name().map_or(String::new(), |f| format!(
                "crates/sim/scenarios/{}",
                f.to_string_lossy()
            ))
        );
        for line in &row.scenario.description {
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}
