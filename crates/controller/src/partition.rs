//! The state of one partition and the arithmetic of applying a change to it.
//!
//! [`PartitionState::apply`] is the single place where epochs move: every delta bumps the
//! partition epoch by one, and the leader epoch grows by one iff the delta sets the leader field
//! (Kafka's `PartitionRegistration.merge`). [`PartitionState::check_invariants`] is what replay
//! asserts after every partition record.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::records::PartitionDelta;
use crate::types::{
    BrokerId, DirectoryId, LeaderEpoch, LeaderRecoveryState, PartitionEpoch, RecoveryMode,
};

/// One partition's replicated state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// The assigned replicas, in preference order (the first is the preferred leader).
    pub replicas: Vec<BrokerId>,
    /// The log directory of each replica, aligned with `replicas` (`None` = unassigned).
    pub directories: Vec<Option<DirectoryId>>,
    /// In-sync replicas. May be empty in ELR mode.
    pub isr: BTreeSet<BrokerId>,
    /// Eligible leader replicas (KIP-966): out of the ISR but holding data up to the HWM.
    pub elr: BTreeSet<BrokerId>,
    /// ELR members (or ISR members below min ISR) that lost their eligibility through an unclean
    /// shutdown: the replicas a Balanced unclean recovery waits for.
    pub last_known_elr: BTreeSet<BrokerId>,
    /// The leader, if any.
    pub leader: Option<BrokerId>,
    /// The leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch.
    pub partition_epoch: PartitionEpoch,
    /// Whether the leader was elected uncleanly and is still recovering.
    pub leader_recovery_state: LeaderRecoveryState,
    /// An unclean recovery an operator started (ElectLeaders UNCLEAN), in this mode, where the
    /// strategy would not run one — the Manual strategy's paused partition above all;
    /// cleared when a leader is elected (Keel's; KIP-966 keeps it in the controller's memory
    /// only). Every broker reports the partition as recovering, and a new active controller
    /// carries the recovery on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_requested: Option<RecoveryMode>,
    /// A reassignment in progress: the replicas it adds (Kafka's `addingReplicas`). They are in
    /// `replicas` and follow the leader; the reassignment completes once every target replica
    /// is in the ISR.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<BrokerId>,
    /// A reassignment in progress: the replicas it removes (Kafka's `removingReplicas`), still
    /// in `replicas` until it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<BrokerId>,
}

impl PartitionState {
    /// A new partition: every given ISR member in sync, `leader` leading, epochs zero, no ELR.
    pub fn new(
        replicas: Vec<BrokerId>,
        directories: Vec<Option<DirectoryId>>,
        isr: BTreeSet<BrokerId>,
        leader: Option<BrokerId>,
    ) -> Self {
        PartitionState {
            replicas,
            directories,
            isr,
            elr: BTreeSet::new(),
            last_known_elr: BTreeSet::new(),
            leader,
            leader_epoch: LeaderEpoch(0),
            partition_epoch: PartitionEpoch(0),
            leader_recovery_state: LeaderRecoveryState::Recovered,
            recovery_requested: None,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    /// The replication factor: the replicas a reassignment in progress keeps (its target), or
    /// all of them.
    pub fn replication_factor(&self) -> usize {
        self.replicas.len() - self.removing_replicas.len()
    }

    /// Whether a reassignment is in progress.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas a reassignment in progress aims at (in preference order), or the replicas.
    pub fn target_replicas(&self) -> Vec<BrokerId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing_replicas.contains(r))
            .collect()
    }

    /// Whether `broker` is an assigned replica.
    pub fn is_replica(&self, broker: BrokerId) -> bool {
        self.replicas.contains(&broker)
    }

    /// The directory of `broker`'s replica, if assigned.
    pub fn directory_of(&self, broker: BrokerId) -> Option<DirectoryId> {
        let index = self.replicas.iter().position(|r| *r == broker)?;
        self.directories.get(index).copied().flatten()
    }

    /// |ISR| + |ELR|: KIP-966's `electable_replicas_count`.
    pub fn electable_replicas(&self) -> usize {
        self.isr.len() + self.elr.len()
    }

    /// The state after `delta`: fields replaced where set, partition epoch + 1, leader epoch + 1
    /// iff the leader field is set; a requested recovery ends with a leader.
    pub fn apply(&self, delta: &PartitionDelta) -> PartitionState {
        let mut next = self.clone();
        if let Some(isr) = &delta.isr {
            next.isr = isr.clone();
        }
        if let Some(elr) = &delta.elr {
            next.elr = elr.clone();
        }
        if let Some(last_known_elr) = &delta.last_known_elr {
            next.last_known_elr = last_known_elr.clone();
        }
        if let Some(change) = delta.leader {
            next.leader = change.leader();
            next.leader_epoch = self.leader_epoch.next();
        }
        if let Some(state) = delta.leader_recovery_state {
            next.leader_recovery_state = state;
        }
        if let Some(replicas) = &delta.replicas {
            next.replicas = replicas.clone();
        }
        if let Some(directories) = &delta.directories {
            next.directories = directories.clone();
        }
        if let Some(adding) = &delta.adding_replicas {
            next.adding_replicas = adding.clone();
        }
        if let Some(removing) = &delta.removing_replicas {
            next.removing_replicas = removing.clone();
        }
        if let Some(mode) = delta.recovery_requested {
            next.recovery_requested = Some(mode);
        }
        if next.leader.is_some() {
            next.recovery_requested = None;
        }
        next.partition_epoch = self.partition_epoch.next();
        next
    }

    /// Checks the invariants every replayed partition state must hold (KIP-966's ELR invariants
    /// and the TLA+ specification's structural ones); `min_isr` is the effective min ISR.
    ///
    /// - replicas are distinct and `directories` is aligned with them;
    /// - ISR ⊆ replicas, ELR ⊆ replicas, LastKnownELR ⊆ replicas;
    /// - a reassignment's adding and removing replicas are distinct replicas, disjoint, and
    ///   leave at least one target replica;
    /// - ISR ∩ ELR = ∅ ("the member of ELR should not be in ISR");
    /// - |ISR| ≥ min ISR ⇒ ELR = ∅ ("if ELR is not empty, the ISR is under min ISR");
    /// - the leader, when there is one, is in the ISR — also right after an unclean election,
    ///   which sets ISR = \[leader\].
    pub fn check_invariants(&self, min_isr: usize) -> Result<(), String> {
        let replicas: BTreeSet<BrokerId> = self.replicas.iter().copied().collect();
        if replicas.len() != self.replicas.len() {
            return Err(format!("duplicate replicas {:?}", self.replicas));
        }
        if self.directories.len() != self.replicas.len() {
            return Err(format!(
                "{} directories for {} replicas",
                self.directories.len(),
                self.replicas.len()
            ));
        }
        if !self.isr.is_subset(&replicas) {
            return Err(format!("ISR {:?} not within replicas", self.isr));
        }
        if !self.elr.is_subset(&replicas) {
            return Err(format!("ELR {:?} not within replicas", self.elr));
        }
        if !self.last_known_elr.is_subset(&replicas) {
            return Err(format!(
                "LastKnownELR {:?} not within replicas",
                self.last_known_elr
            ));
        }
        let adding: BTreeSet<BrokerId> = self.adding_replicas.iter().copied().collect();
        let removing: BTreeSet<BrokerId> = self.removing_replicas.iter().copied().collect();
        if adding.len() != self.adding_replicas.len()
            || removing.len() != self.removing_replicas.len()
            || !adding.is_subset(&replicas)
            || !removing.is_subset(&replicas)
            || !adding.is_disjoint(&removing)
            || removing.len() >= replicas.len()
        {
            return Err(format!(
                "reassignment adding {:?} removing {:?} not within replicas {:?}",
                self.adding_replicas, self.removing_replicas, self.replicas
            ));
        }
        if !self.isr.is_disjoint(&self.elr) {
            return Err(format!("ISR {:?} and ELR {:?} overlap", self.isr, self.elr));
        }
        if self.isr.len() >= min_isr && !self.elr.is_empty() {
            return Err(format!(
                "ELR {:?} not empty while ISR {:?} meets min ISR {min_isr}",
                self.elr, self.isr
            ));
        }
        if let Some(leader) = self.leader {
            if !self.isr.contains(&leader) {
                return Err(format!("leader {leader} not in ISR {:?}", self.isr));
            }
        }
        Ok(())
    }
}
