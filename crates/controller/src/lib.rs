//! # keel-controller: the controller's pure core
//!
//! Keel's cluster metadata as a state machine over metadata records, and every decision the
//! controller makes about partitions: the KIP-966 partition state machine (ISR, ELR,
//! LastKnownELR, leader, epochs, leader recovery state), membership and fencing, AlterPartition
//! validation (KIP-903 / KAFKA-14139), and the decisions of the Unclean Recovery Manager. No IO,
//! no clock, no randomness: time (`now_ms`), topic ids and incarnation ids are passed in. Later
//! issues put it behind Raft (the Raft term is the controller epoch, KAFKA-532) and the network.
//!
//! ## Layout
//!
//! | module | what lives there |
//! |---|---|
//! | [`types`] | newtypes (`BrokerId`, `BrokerEpoch`, `LeaderEpoch`, `PartitionEpoch`, `MetadataOffset`, ids) and small enums |
//! | [`records`] | the metadata records (serde) — the only input of replay |
//! | [`image`] | [`ClusterImage`]: brokers, topics, partitions, configs, features; `replay`, `to_snapshot` |
//! | [`partition`] | [`PartitionState`], `apply(delta)` (all epoch arithmetic), invariants |
//! | [`partition_change`](mod@partition_change) | THE partition-change function and [`classify`] |
//! | [`alter_partition`] | AlterPartition request types and validation in Kafka's order |
//! | [`recovery`] | the Unclean Recovery Manager's pure state machine and its [`recovery::Command`]s |
//! | [`config`] | config names, defaults, effective min ISR, strategy resolution |
//! | [`acl`] | ACL bindings, filters and CreateAcls checks with Kafka's codes; [`acl::AclIndex`], the StandardAuthorizer decision |
//! | [`scram`] | SCRAM mechanisms, the key derivation of RFC 5802, credential bounds, DescribeUserScramCredentials |
//! | [`errors`] | [`ErrorCode`] (Kafka's names and numbers), [`ApiError`], [`ReplayError`] |
//! | `controller` | the [`Controller`] facade: membership, topics, AlterPartition, elections, recovery events |
//! | [`golden`] | the golden-case runner ([`golden::run`]) and the one-partition [`golden::harness::Harness`] |
//!
//! ## Records
//!
//! [`Record`] is one of: `RegisterBroker` (epoch, incarnation, listeners, rack, log directory
//! ids, fenced), `BrokerRegistrationChange` (fence / unfence / controlled shutdown),
//! `UnregisterBroker`, `Topic`, `RemoveTopic` (the topic with its partitions and configs),
//! `Partition` (a whole [`PartitionState`]), `PartitionChange` (a
//! [`records::PartitionDelta`]: optional fields = unchanged, the leader as
//! [`records::LeaderChange`] `To(broker)` / `Leaderless` instead of -1/-2), `Config` (topic or
//! cluster, set or delete), `ClearElr` (clears ELR and LastKnownELR of the partitions whose ISR
//! meets their effective min ISR), `FeatureLevel` (`eligible.leader.replicas.enable`, on
//! unless level 0), `ProducerIds`, and `UserScramCredential` / `RemoveUserScramCredential`
//! (KIP-554: a user's salt, iterations, StoredKey and ServerKey for one SCRAM mechanism). A snapshot is a list of records ([`ClusterImage::to_snapshot`]).
//!
//! ## Generate, then replay
//!
//! Operations on the [`Controller`] return an [`Output`]: records to append, commands for the IO
//! shell, and the response. Only [`Controller::replay`] / [`ClusterImage::replay`] changes state.
//! Replay is deterministic (ordered maps), requires strictly increasing offsets, and checks each
//! partition record against the invariants — ISR ∩ ELR = ∅; ISR, ELR, LastKnownELR ⊆ replicas;
//! |ISR| ≥ effective min ISR ⇒ ELR = ∅; the leader, when there is one, is in the ISR (also right
//! after an unclean election, which sets ISR = \[leader\]); epochs grow — rejecting a violating
//! record with a [`ReplayError`] and leaving the image unchanged. The caller replays an
//! operation's records before the next operation; a broker's new epoch is the offset of its
//! `RegisterBroker` record ([`Controller::next_offset`] + the records before it).
//!
//! ```
//! use keel_controller::{Controller, ControllerConfig, RegisterBrokerRequest};
//! use keel_controller::types::{BrokerId, IncarnationId};
//!
//! let mut controller = Controller::new(ControllerConfig::new("cluster-a"));
//! let out = controller.register_broker(&RegisterBrokerRequest {
//!     broker: BrokerId(1),
//!     cluster_id: "cluster-a".into(),
//!     incarnation: IncarnationId(uuid::Uuid::from_u128(7)),
//!     listeners: vec![],
//!     rack: None,
//!     log_dirs: vec![],
//!     previous_broker_epoch: None,
//! }, 0);
//! let epoch = out.response.as_ref().unwrap().broker_epoch;
//! assert_eq!(epoch.0, controller.next_offset().0); // the record's offset
//! controller.replay_all(&out.records).unwrap();   // "committed"
//! assert!(!controller.image().broker(BrokerId(1)).unwrap().is_live()); // starts fenced
//! ```
//!
//! ## The partition-change function
//!
//! [`partition_change`](fn@partition_change)`(partition, proposed change, context)` → [`ChangeDecision`] (an optional
//! delta, the state after it, and how the leader was chosen). The context holds the live brokers
//! (registered, unfenced, not shutting down), the effective min ISR = min(`min.insync.replicas`,
//! replication factor), the topic's `unclean.recovery.strategy` and whether ELR is enabled. Rules
//! (ELR mode), with their KIP-966 source:
//!
//! 1. *ELR update* — "When the proposed ISR is larger or equal to min ISR, the controller will
//!    update the ISR and empty the ELR" (LastKnownELR too); below min ISR it will "retain the
//!    current members of the ELR; add (the current ISR - the proposed ISR) to ELR; remove the
//!    duplicate member in both ISR and ELR from ELR". The ISR may become empty.
//! 2. *Unclean shutdown* — "The controller will remove the ELR member if it registers with an
//!    unclean shutdown … it will be removed from ELR and added to the LastKnownELR"; issue 3
//!    applies it to ISR members too; a replaced log directory (KAFKA-14139) counts as one.
//!    "The LastKnownELR will be cleaned when ISR reaches the min ISR."
//! 3. *Election order* — "If there are other ISR members, choose an ISR member. If there are
//!    unfenced ELR members, choose an ELR member" (ISR becomes \[it\], it leaves ELR). "If there
//!    are fenced ELR members: Proactive → unclean recovery; otherwise wait. If there are no ELR
//!    members: balanced → unclean recovery; Manual → not attempt to elect a leader."
//!    [`classify`] names the waiting states ([`PartitionStatus`]).
//! 4. *Unfencing* — "If the replica is an ELR member and ISR is empty, this replica will be
//!    elected as leader, added to ISR, and removed from ELR."
//! 5. *min.insync.replicas changes* — "if the new min ISR <= current ISR, the ELR will be removed".
//! 6. *Epochs* — "Change of the ELR does not require a leader epoch bump": the leader epoch grows
//!    only when the leader field changes, the partition epoch on every record.
//! 7. *Strategy* — `unclean.recovery.strategy` (topic, else cluster); unset, "If
//!    [unclean.leader.election.enable is] true, unclean.recovery.strategy will be set to
//!    Proactive. If false, … Balanced."
//! 8. *Classic mode* (ELR off) — the ISR never empties, only ISR members are elected, Proactive
//!    (= `unclean.leader.election.enable=true`) elects the first live replica uncleanly (ISR =
//!    \[it\], RECOVERING). This reproduces the seeds' data loss for comparison.
//!
//! ## Unclean recovery
//!
//! [`recovery::UncleanRecoveryManager`] keeps one task per recovering partition: replicas asked,
//! answers (log end offset, last leader epoch, broker epoch, partition leader epoch known by the
//! replica). Stale answers are rejected and the replica is asked again. Balanced elects when every
//! LastKnownELR member (∪ ELR; every replica if both are empty) has a counting answer, Proactive
//! at the 5 s deadline or on the first answer after it; only live replicas count. The winner
//! (highest last leader epoch, then longest log) becomes leader with ISR = \[it\], RECOVERING, ELR
//! and LastKnownELR cleared. Commands: [`recovery::Command::SendGetReplicaLogInfo`],
//! [`recovery::Command::ScheduleRecoveryTimeout`].
//!
//! ## Golden files
//!
//! `crates/controller/golden/*.toml` hold rule cases anyone can write from the KIP (format in
//! `docs/testing-golden.md`): `[[case]]` with `name`, `cite`, `min_isr`, `elr`, `strategy`,
//! optional `fenced` / `shutting_down` / `unregistered` / `broker_epochs`, a `[case.before]`
//! partition, and `[[case.step]]`s of `event = { kind = ... }` and `expect = { ... }`.
//! [`golden::run`]`(text) -> `[`golden::Report`] runs a file's text (no IO); the report's
//! `Display` prints `PASS`/`FAIL` per case with each mismatch and a final `N passed, M failed`.

pub mod acl;
pub mod alter_partition;
pub mod config;
mod controller;
pub mod errors;
pub mod golden;
pub mod image;
pub mod partition;
pub mod partition_change;
pub mod quota;
pub mod records;
pub mod recovery;
pub mod scram;
pub mod types;

pub use controller::{
    list_reassignments, too_many_partitions, topic_batch_partitions, EXCESSIVE_BATCH,
    EXCESSIVE_PARTITIONS, MAX_NEW_PARTITIONS_PER_CREATE_PARTITIONS, MAX_PARTITIONS_PER_REQUEST,
    MAX_RECORDS_PER_BATCH, MAX_RECORDS_PER_USER_OP, MAX_REPLICAS_PER_REQUEST,
};
pub use controller::{
    ConfigChange, Controller, ControllerConfig, CreatePartitionsRequest, CreateTopicRequest,
    ElectionOutcome, ElectionResult, ElectionType, HeartbeatRequest, HeartbeatResponse,
    LostReplica, LostReplicaReason, OngoingReassignment, Output, ProducerIdBlock, QuotaAlteration,
    ReassignmentRequest, RegisterBrokerRequest, RegisterBrokerResponse, ScramAlterResult,
    ScramDeletion, ScramUpsertion, LOST_REPLICAS_PER_HEARTBEAT_MAX, PRODUCER_ID_BLOCK_SIZE,
    TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX,
};
pub use errors::{ApiError, ErrorCode, ReplayError};
pub use image::ClusterImage;
pub use partition::PartitionState;
pub use partition_change::{
    classify, partition_change, ChangeContext, ChangeDecision, Election, PartitionStatus,
    ProposedChange,
};
pub use records::Record;
