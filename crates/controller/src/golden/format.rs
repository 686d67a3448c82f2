//! The golden-file format (TOML), as issue 3 specifies it; see `docs/testing-golden.md`.
//! Unknown fields are errors, so a typo cannot silently skip a check.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A golden file: `[[case]]` tables.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldenFile {
    /// The cases, in file order.
    #[serde(rename = "case", default)]
    pub cases: Vec<Case>,
}

fn yes() -> bool {
    true
}

/// One case: a cluster around one partition, and steps with expectations.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// What the case shows.
    pub name: String,
    /// The KIP sentence or issue it comes from.
    #[serde(default)]
    pub cite: String,
    /// The effective min ISR (at most the replication factor).
    pub min_isr: usize,
    /// `eligible.leader.replicas.enable` (false = classic mode). Default true.
    #[serde(default = "yes")]
    pub elr: bool,
    /// `unclean.recovery.strategy`; when absent it follows `unclean_leader_election`.
    #[serde(default)]
    pub strategy: Option<String>,
    /// Optional: `unclean.leader.election.enable` (default false).
    #[serde(default)]
    pub unclean_leader_election: Option<bool>,
    /// Registered but fenced brokers.
    #[serde(default)]
    pub fenced: Vec<i32>,
    /// Registered brokers in controlled shutdown.
    #[serde(default)]
    pub shutting_down: Vec<i32>,
    /// Brokers without a registration.
    #[serde(default)]
    pub unregistered: Vec<i32>,
    /// Broker epochs of the registrations (others get `1000 + id`).
    #[serde(default)]
    pub broker_epochs: BTreeMap<String, i64>,
    /// The partition before the first step.
    pub before: Before,
    /// The steps, in order.
    #[serde(rename = "step")]
    pub steps: Vec<Step>,
}

/// The partition before the first step.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Before {
    /// Replicas in preference order.
    pub replicas: Vec<i32>,
    /// ISR.
    pub isr: Vec<i32>,
    /// ELR.
    #[serde(default)]
    pub elr: Vec<i32>,
    /// LastKnownELR.
    #[serde(default)]
    pub last_known_elr: Vec<i32>,
    /// Leader, -1 = none.
    pub leader: i32,
    /// Leader epoch.
    #[serde(default)]
    pub leader_epoch: i32,
    /// Partition epoch.
    #[serde(default)]
    pub partition_epoch: i32,
    /// Optional: `RECOVERED` (default) or `RECOVERING`.
    #[serde(default)]
    pub leader_recovery_state: Option<String>,
}

/// One step: an event and what must hold after it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The event.
    pub event: Event,
    /// The expectations (only the listed fields are checked).
    #[serde(default)]
    pub expect: Expect,
}

/// The events a step can apply.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// An AlterPartition from the leader (or `sender`).
    AlterPartition {
        /// The proposed ISR.
        isr: Vec<i32>,
        /// Default: the leader (or the first replica when leaderless).
        #[serde(default)]
        sender: Option<i32>,
        /// Default: the sender's registered epoch.
        #[serde(default)]
        sender_epoch: Option<i64>,
        /// Default: the partition's leader epoch.
        #[serde(default)]
        leader_epoch: Option<i32>,
        /// Default: the partition's partition epoch.
        #[serde(default)]
        partition_epoch: Option<i32>,
        /// Broker epochs of ISR members as the leader saw them (others unchecked).
        #[serde(default)]
        isr_epochs: BTreeMap<String, i64>,
        /// Default `RECOVERED`.
        #[serde(default)]
        leader_recovery_state: Option<String>,
    },
    /// The controller fences the broker.
    Fence {
        /// The broker.
        broker: i32,
    },
    /// The broker heartbeats with a caught-up metadata offset.
    Unfence {
        /// The broker.
        broker: i32,
    },
    /// The broker's session expires (everyone else keeps heartbeating).
    HeartbeatTimeout {
        /// The broker.
        broker: i32,
    },
    /// The broker asks to shut down (two heartbeats: request, then completion).
    ControlledShutdown {
        /// The broker.
        broker: i32,
    },
    /// The broker restarts with its clean-shutdown file (previous epoch = registered epoch).
    CleanRegister {
        /// The broker.
        broker: i32,
    },
    /// The broker restarts without a clean-shutdown file.
    UncleanRegister {
        /// The broker.
        broker: i32,
    },
    /// The broker restarts cleanly but with a replaced log directory (new directory id).
    DirectoryChange {
        /// The broker.
        broker: i32,
    },
    /// The running broker reports its replica lost (issue 19): damage set aside, or with
    /// `offline` its log directory failed; about `partition_epoch` (default: the current one).
    LoseReplica {
        /// The broker.
        broker: i32,
        /// Whether the directory failed (otherwise: damage set aside).
        #[serde(default)]
        offline: bool,
        /// The partition epoch the broker saw.
        #[serde(default)]
        partition_epoch: Option<i32>,
    },
    /// `min.insync.replicas` changes (cluster config).
    SetMinIsr {
        /// The new value.
        min_isr: usize,
    },
    /// ElectLeaders PREFERRED.
    ElectPreferred,
    /// ElectLeaders UNCLEAN.
    ElectUnclean {
        /// Optional recovery mode (`proactive` default, or `balanced`).
        #[serde(default)]
        mode: Option<String>,
    },
    /// ElectLeaders naming a broker (manual election).
    ElectBroker {
        /// The broker.
        broker: i32,
    },
    /// A `GetReplicaLogInfo` answer.
    RecoveryAnswer {
        /// The answering broker.
        broker: i32,
        /// Its log end offset.
        log_end_offset: i64,
        /// The last leader epoch in its log.
        last_leader_epoch: i32,
        /// Default: its registered epoch.
        #[serde(default)]
        broker_epoch: Option<i64>,
        /// Default: the controller's leader epoch.
        #[serde(default)]
        partition_leader_epoch: Option<i32>,
    },
    /// The recovery timer fires (time moves to the 5 s deadline if needed).
    RecoveryTimeout,
    /// Optional extra: change `unclean.recovery.strategy` (cluster config).
    SetStrategy {
        /// The new strategy.
        strategy: String,
    },
    /// Optional extra: unregister the broker.
    Unregister {
        /// The broker.
        broker: i32,
    },
    /// Optional extra: every live broker heartbeats, then the controller ticks.
    Tick,
    /// AlterPartitionReassignments to these replicas (issue 24).
    Reassign {
        /// The target replicas, in preference order.
        replicas: Vec<i32>,
    },
    /// AlterPartitionReassignments cancelling the reassignment in progress (issue 24).
    CancelReassignment,
}

impl Event {
    /// The event's kind as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::AlterPartition { .. } => "alter_partition",
            Event::Fence { .. } => "fence",
            Event::Unfence { .. } => "unfence",
            Event::HeartbeatTimeout { .. } => "heartbeat_timeout",
            Event::ControlledShutdown { .. } => "controlled_shutdown",
            Event::CleanRegister { .. } => "clean_register",
            Event::UncleanRegister { .. } => "unclean_register",
            Event::DirectoryChange { .. } => "directory_change",
            Event::LoseReplica { .. } => "lose_replica",
            Event::SetMinIsr { .. } => "set_min_isr",
            Event::ElectPreferred => "elect_preferred",
            Event::ElectUnclean { .. } => "elect_unclean",
            Event::ElectBroker { .. } => "elect_broker",
            Event::RecoveryAnswer { .. } => "recovery_answer",
            Event::RecoveryTimeout => "recovery_timeout",
            Event::SetStrategy { .. } => "set_strategy",
            Event::Unregister { .. } => "unregister",
            Event::Tick => "tick",
            Event::Reassign { .. } => "reassign",
            Event::CancelReassignment => "cancel_reassignment",
        }
    }
}

/// What must hold after a step. Absent fields are not checked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Leader, -1 = none (exact).
    pub leader: Option<i32>,
    /// Leader epoch (exact).
    pub leader_epoch: Option<i32>,
    /// Partition epoch (exact).
    pub partition_epoch: Option<i32>,
    /// `RECOVERED` | `RECOVERING` (exact).
    pub leader_recovery_state: Option<String>,
    /// ISR (as a set).
    pub isr: Option<Vec<i32>>,
    /// ELR (as a set).
    pub elr: Option<Vec<i32>>,
    /// LastKnownELR (as a set).
    pub last_known_elr: Option<Vec<i32>>,
    /// Replicas, in order (exact; issue 24).
    pub replicas: Option<Vec<i32>>,
    /// A reassignment's adding replicas, in order (exact; issue 24).
    pub adding: Option<Vec<i32>>,
    /// A reassignment's removing replicas, in order (exact; issue 24).
    pub removing: Option<Vec<i32>>,
    /// The Kafka error the step answered, `NONE` for success.
    pub error: Option<String>,
    /// Whether an unclean recovery runs for the partition.
    pub recovering: Option<bool>,
    /// Whether the partition is paused for an operator.
    pub paused: Option<bool>,
    /// Optional extra: the manual/unclean election's warning flag.
    pub warning: Option<bool>,
    /// Optional extra: |ISR| + |ELR|.
    pub electable: Option<usize>,
    /// Optional extra: `led` | `waiting_for_isr_member` | `waiting_for_elr_member` |
    /// `needs_unclean_recovery` | `paused_for_operator`.
    pub status: Option<String>,
}
