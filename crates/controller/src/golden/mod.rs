//! The golden-case runner: TOML files of cases anyone can write from the KIP without reading
//! code (format in `docs/testing-golden.md` and [`format`](mod@format)). [`run`] takes a file's text and
//! returns a [`Report`]; it does no IO, so the CLI (`keel golden FILE...`) and the integration
//! test read the files and print the report.
//!
//! ```
//! let report = keel_controller::golden::run(r#"
//! [[case]]
//! name = "ISR shrink below min ISR moves the removed members into ELR"
//! cite = "KIP-966: ELR update, proposed ISR smaller than min ISR"
//! min_isr = 3
//! elr = true
//! strategy = "balanced"
//! [case.before]
//! replicas = [1, 2, 3, 4]
//! isr = [1, 2, 3, 4]
//! leader = 1
//! leader_epoch = 100
//! partition_epoch = 200
//! [[case.step]]
//! event = { kind = "alter_partition", isr = [1, 2] }
//! expect = { isr = [1, 2], elr = [3, 4], leader = 1, leader_epoch = 100, partition_epoch = 201 }
//! "#);
//! assert!(report.passed(), "{report}");
//! ```

pub mod format;
pub mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::errors::ErrorCode;
use crate::partition::PartitionState;
use crate::partition_change::PartitionStatus;
use crate::types::{
    BrokerEpoch, BrokerId, LeaderEpoch, LeaderRecoveryState, Offset, PartitionEpoch, RecoveryMode,
    UncleanRecoveryStrategy,
};

use format::{Case, Event, Expect, GoldenFile};
use harness::{Harness, Setup, StepOutcome};

/// The result of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseReport {
    /// The case's name.
    pub name: String,
    /// Its citation.
    pub cite: String,
    /// Every mismatch (empty = pass).
    pub failures: Vec<String>,
}

impl CaseReport {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The result of one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The file could not be parsed.
    pub parse_error: Option<String>,
    /// One entry per case.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// True when the file parsed, has at least one case, and every case passed.
    pub fn passed(&self) -> bool {
        self.parse_error.is_none() && !self.cases.is_empty() && self.failed() == 0
    }

    /// The number of passing cases.
    pub fn passed_count(&self) -> usize {
        self.cases.iter().filter(|c| c.passed()).count()
    }

    /// The number of failing cases.
    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed_count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(error) = &self.parse_error {
            writeln!(f, "FAIL  (file) {error}")?;
        }
        if self.parse_error.is_none() && self.cases.is_empty() {
            writeln!(f, "FAIL  (file) no [[case]] in file")?;
        }
        for case in &self.cases {
            let verdict = if case.passed() { "PASS" } else { "FAIL" };
            writeln!(f, "{verdict}  {}", case.name)?;
            for failure in &case.failures {
                writeln!(f, "      {failure}")?;
            }
        }
        let failed = self.failed() + usize::from(!self.passed() && self.failed() == 0);
        writeln!(f, "{} passed, {} failed", self.passed_count(), failed)
    }
}

/// Runs every case of a golden file's text.
pub fn run(text: &str) -> Report {
    let file: GoldenFile = match toml::from_str(text) {
        Ok(file) => file,
        Err(error) => {
            return Report {
                parse_error: Some(error.to_string()),
                cases: Vec::new(),
            }
        }
    };
    let cases = file.cases.iter().map(run_case).collect();
    Report {
        parse_error: None,
        cases,
    }
}

fn run_case(case: &Case) -> CaseReport {
    let failures = match catch_unwind(AssertUnwindSafe(|| check_case(case))) {
        Ok(failures) => failures,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            vec![format!("panicked: {message}")]
        }
    };
    CaseReport {
        name: case.name.clone(),
        cite: case.cite.clone(),
        failures,
    }
}

fn check_case(case: &Case) -> Vec<String> {
    let setup = match setup_of(case) {
        Ok(setup) => setup,
        Err(error) => return vec![error],
    };
    let mut harness = match Harness::new(&setup) {
        Ok(harness) => harness,
        Err(error) => return vec![error],
    };
    let mut failures = Vec::new();
    for (index, step) in case.steps.iter().enumerate() {
        let label = format!("step {} ({})", index + 1, step.event.kind());
        match apply(&mut harness, &step.event) {
            Ok(outcome) => {
                for mismatch in compare(&harness, &outcome, &step.expect) {
                    failures.push(format!("{label}: {mismatch}"));
                }
            }
            Err(error) => {
                failures.push(format!("{label}: {error}"));
                break;
            }
        }
    }
    if case.steps.is_empty() {
        failures.push("case has no [[case.step]]".to_string());
    }
    failures
}

fn ids(list: &[i32]) -> BTreeSet<BrokerId> {
    list.iter().map(|b| BrokerId(*b)).collect()
}

fn leader_of(id: i32) -> Option<BrokerId> {
    (id >= 0).then_some(BrokerId(id))
}

fn epochs(map: &BTreeMap<String, i64>) -> Result<BTreeMap<BrokerId, BrokerEpoch>, String> {
    map.iter()
        .map(|(k, v)| {
            k.trim()
                .parse::<i32>()
                .map(|b| (BrokerId(b), BrokerEpoch(*v)))
                .map_err(|_| format!("broker id {k:?} is not a number"))
        })
        .collect()
}

fn lrs(text: &Option<String>) -> Result<Option<LeaderRecoveryState>, String> {
    match text {
        None => Ok(None),
        Some(t) => LeaderRecoveryState::parse(t)
            .map(Some)
            .ok_or_else(|| format!("unknown leader_recovery_state {t:?}")),
    }
}

fn setup_of(case: &Case) -> Result<Setup, String> {
    let b = &case.before;
    let replicas: Vec<BrokerId> = b.replicas.iter().map(|r| BrokerId(*r)).collect();
    let strategy = match &case.strategy {
        None => None,
        Some(s) => Some(
            UncleanRecoveryStrategy::parse(s).ok_or_else(|| format!("unknown strategy {s:?}"))?,
        ),
    };
    let mut partition = PartitionState::new(
        replicas.clone(),
        vec![None; replicas.len()],
        ids(&b.isr),
        leader_of(b.leader),
    );
    partition.elr = ids(&b.elr);
    partition.last_known_elr = ids(&b.last_known_elr);
    partition.leader_epoch = LeaderEpoch(b.leader_epoch);
    partition.partition_epoch = PartitionEpoch(b.partition_epoch);
    partition.leader_recovery_state = lrs(&b.leader_recovery_state)?.unwrap_or_default();
    Ok(Setup {
        min_isr: case.min_isr,
        elr: case.elr,
        strategy,
        unclean_leader_election: case.unclean_leader_election,
        fenced: ids(&case.fenced),
        shutting_down: ids(&case.shutting_down),
        unregistered: ids(&case.unregistered),
        broker_epochs: epochs(&case.broker_epochs)?,
        partition,
    })
}

fn apply(h: &mut Harness, event: &Event) -> Result<StepOutcome, String> {
    match event {
        Event::AlterPartition {
            isr,
            sender,
            sender_epoch,
            leader_epoch,
            partition_epoch,
            isr_epochs,
            leader_recovery_state,
        } => {
            let isr: Vec<BrokerId> = isr.iter().map(|b| BrokerId(*b)).collect();
            h.alter_partition(
                &isr,
                sender.map(BrokerId),
                sender_epoch.map(BrokerEpoch),
                leader_epoch.map(LeaderEpoch),
                partition_epoch.map(PartitionEpoch),
                &epochs(isr_epochs)?,
                lrs(leader_recovery_state)?,
            )
        }
        Event::Fence { broker } => h.fence(BrokerId(*broker)),
        Event::Unfence { broker } => h.unfence(BrokerId(*broker)),
        Event::HeartbeatTimeout { broker } => h.heartbeat_timeout(BrokerId(*broker)),
        Event::ControlledShutdown { broker } => h.controlled_shutdown(BrokerId(*broker)),
        Event::CleanRegister { broker } => h.register(BrokerId(*broker), true, false),
        Event::UncleanRegister { broker } => h.register(BrokerId(*broker), false, false),
        Event::DirectoryChange { broker } => h.register(BrokerId(*broker), true, true),
        Event::LoseReplica {
            broker,
            offline,
            partition_epoch,
        } => h.lose_replica(BrokerId(*broker), *offline, *partition_epoch),
        Event::SetMinIsr { min_isr } => h.set_min_isr(*min_isr),
        Event::ElectPreferred => h.elect(crate::ElectionType::Preferred),
        Event::ElectUnclean { mode } => {
            let mode = match mode {
                None => None,
                Some(m) => {
                    Some(RecoveryMode::parse(m).ok_or_else(|| format!("unknown mode {m:?}"))?)
                }
            };
            h.elect_unclean(mode)
        }
        Event::ElectBroker { broker } => h.elect(crate::ElectionType::Manual(BrokerId(*broker))),
        Event::RecoveryAnswer {
            broker,
            log_end_offset,
            last_leader_epoch,
            broker_epoch,
            partition_leader_epoch,
        } => h.recovery_answer(
            BrokerId(*broker),
            Offset(*log_end_offset),
            LeaderEpoch(*last_leader_epoch),
            broker_epoch.map(BrokerEpoch),
            partition_leader_epoch.map(LeaderEpoch),
        ),
        Event::RecoveryTimeout => h.recovery_timeout(),
        Event::SetStrategy { strategy } => h.set_strategy(strategy),
        Event::Unregister { broker } => h.unregister(BrokerId(*broker)),
        Event::Tick => h.tick(),
        Event::Reassign { replicas } => {
            h.reassign(Some(replicas.iter().copied().map(BrokerId).collect()))
        }
        Event::CancelReassignment => h.reassign(None),
    }
}

/// The name [`Expect::status`] uses for a status.
pub fn status_name(status: &PartitionStatus) -> &'static str {
    match status {
        PartitionStatus::Led(_) => "led",
        PartitionStatus::WaitingForIsrMember(_) => "waiting_for_isr_member",
        PartitionStatus::WaitingForElrMember(_) => "waiting_for_elr_member",
        PartitionStatus::NeedsUncleanRecovery => "needs_unclean_recovery",
        PartitionStatus::PausedForOperator => "paused_for_operator",
    }
}

fn show(set: &BTreeSet<BrokerId>) -> String {
    let items: Vec<String> = set.iter().map(|b| b.to_string()).collect();
    format!("[{}]", items.join(", "))
}

fn compare(h: &Harness, outcome: &StepOutcome, expect: &Expect) -> Vec<String> {
    let p = h.partition();
    let mut out = Vec::new();
    let mut exact = |field: &str, want: String, got: String| {
        if want != got {
            out.push(format!("{field}: expected {want}, got {got}"));
        }
    };
    if let Some(leader) = expect.leader {
        let got = p.leader.map_or(-1, |b| b.0);
        exact("leader", leader.to_string(), got.to_string());
    }
    if let Some(e) = expect.leader_epoch {
        exact("leader_epoch", e.to_string(), p.leader_epoch.to_string());
    }
    if let Some(e) = expect.partition_epoch {
        exact(
            "partition_epoch",
            e.to_string(),
            p.partition_epoch.to_string(),
        );
    }
    if let Some(state) = &expect.leader_recovery_state {
        exact(
            "leader_recovery_state",
            state.to_ascii_uppercase(),
            p.leader_recovery_state.name().to_string(),
        );
    }
    for (field, want, got) in [
        ("isr", &expect.isr, &p.isr),
        ("elr", &expect.elr, &p.elr),
        ("last_known_elr", &expect.last_known_elr, &p.last_known_elr),
    ] {
        if let Some(want) = want {
            exact(field, show(&ids(want)), show(got));
        }
    }
    for (field, want, got) in [
        ("replicas", &expect.replicas, &p.replicas),
        ("adding", &expect.adding, &p.adding_replicas),
        ("removing", &expect.removing, &p.removing_replicas),
    ] {
        if let Some(want) = want {
            let got: Vec<i32> = got.iter().map(|b| b.0).collect();
            exact(field, format!("{want:?}"), format!("{got:?}"));
        }
    }
    if let Some(error) = &expect.error {
        let got = outcome.error.unwrap_or(ErrorCode::None).name();
        match ErrorCode::from_name(error) {
            Some(code) => exact("error", code.name().to_string(), got.to_string()),
            None => exact("error", format!("{error} (unknown code)"), got.to_string()),
        }
    }
    let c = h.controller();
    if let Some(recovering) = expect.recovering {
        let got = c.recovery_task(h.tp()).is_some();
        exact("recovering", recovering.to_string(), got.to_string());
    }
    if let Some(paused) = expect.paused {
        let got = c.paused_partitions().contains(&h.tp());
        exact("paused", paused.to_string(), got.to_string());
    }
    if let Some(warning) = expect.warning {
        let got = outcome
            .warning
            .map_or("none".to_string(), |w| w.to_string());
        exact("warning", warning.to_string(), got);
    }
    if let Some(electable) = expect.electable {
        exact(
            "electable",
            electable.to_string(),
            p.electable_replicas().to_string(),
        );
    }
    if let Some(status) = &expect.status {
        let got = c
            .partition_status(h.tp())
            .map_or("unknown", |s| status_name(&s));
        exact("status", status.clone(), got.to_string());
    }
    out
}
