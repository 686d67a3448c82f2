//! # keel-replication: the per-partition replication core
//!
//! The replication logic of a broker for one partition, as pure state machines: a
//! [`LeaderPartition`] (follower fetches, ISR expansion and shrink through AlterPartition, the
//! KIP-966 high-watermark rule, the acks=all purgatory) and a [`FollowerPartition`] (what to
//! fetch, truncation on a diverging epoch, the follower high watermark). No IO, no clock, no
//! randomness: time comes in as `now_ms`, the log's epoch cache through [`EpochView`], and
//! decisions go out as commands ([`Command`], [`FollowerCommand`]) for the network shell or the
//! deterministic simulator to execute.
//!
//! ## Layout
//!
//! | module | what lives there |
//! |---|---|
//! | [`types`] | the controller's newtypes (`BrokerId`, `BrokerEpoch`, `LeaderEpoch`, `PartitionEpoch`, `Offset`, `IsrMember`) plus `RequestId`, `AlterPartitionId`, `BrokerRegistration`, `EpochEndOffset` |
//! | [`errors`] | [`ErrorCode`] (Kafka's names and numbers) and [`ReplicationError`] (caller bugs) |
//! | [`config`] | `min.insync.replicas`, `replica.lag.time.max.ms`, backoffs, effective min ISR |
//! | [`epochs`] | [`EpochView`] with Kafka's `endOffsetFor`, and the in-memory [`EpochCache`] |
//! | [`leader`] | [`LeaderPartition`] and its [`Command`]s |
//! | [`follower`] | [`FollowerPartition`] and its [`FollowerCommand`]s |
//!
//! ## The rules, with their sources
//!
//! - **High watermark** (KIP-966 "Additional High Watermark advance requirement", reference
//!   §7): frozen while the *committed* ISR has fewer than min(`min.insync.replicas`, RF)
//!   members, for acks=1 data too; otherwise the minimum log end offset over the leader, the
//!   *maximal* ISR (committed ∪ pending additions) and caught-up ISR-eligible non-ISR replicas;
//!   never backward.
//! - **ISR expansion** (reference §6): log end offset ≥ high watermark and ≥ start of the
//!   current leader epoch, registered, unfenced, not in controlled shutdown, and fetching with
//!   the registered broker epoch (KIP-903 / KAFKA-14139). AlterPartition v3 carries each
//!   member's broker epoch.
//! - **ISR shrink**: not caught up within `replica.lag.time.max.ms`.
//! - **One AlterPartition in flight**; its answers are handled as in Kafka's `Partition.scala`
//!   (table in `leader/isr.rs`).
//! - **Fetch fencing**: a follower fetching with a broker epoch older than its registration is
//!   answered `NOT_LEADER_OR_FOLLOWER` and not counted.
//! - **Divergence**: answered with `DivergingEpoch`; the follower truncates and fetches again,
//!   it never halts (KAFKA-3861).
//! - **acks=all**: `NOT_ENOUGH_REPLICAS` before append, then the purgatory
//!   (`NOT_ENOUGH_REPLICAS_AFTER_APPEND`, `REQUEST_TIMED_OUT`, `NOT_LEADER_OR_FOLLOWER`).
//! - **DeleteRecords** (Kafka's `deleteRecordsOnLeader`, `lowWatermarkIfLeader`,
//!   `DelayedDeleteRecords`): the offset checked against the high watermark, then the answer
//!   waits until the low watermark — the smallest log start offset over the leader and every
//!   follower on an unfenced broker, as their fetches report it — reaches it. Followers move
//!   their log start offset up to the leader's (Fetch `LogStartOffset`) and start over at it
//!   when their whole log is below it (`OFFSET_OUT_OF_RANGE`).
//!
//! ## A tour
//!
//! ```
//! use std::collections::{BTreeMap, BTreeSet};
//! use keel_replication::*;
//!
//! let b = BrokerId;
//! let brokers: BTreeMap<_, _> = (0..3)
//!     .map(|i| (b(i), BrokerRegistration::live(BrokerEpoch(100 + i as i64))))
//!     .collect();
//! let mut leader = LeaderPartition::new(LeaderInit {
//!     local: b(0),
//!     local_broker_epoch: BrokerEpoch(100),
//!     metadata: PartitionMetadata {
//!         leader: Some(b(0)),
//!         leader_epoch: LeaderEpoch(1),
//!         partition_epoch: PartitionEpoch(1),
//!         replicas: vec![b(0), b(1), b(2)],
//!         isr: BTreeSet::from([b(0), b(1), b(2)]),
//!     },
//!     log_start_offset: Offset(0),
//!     log_end_offset: Offset(0),
//!     leader_epoch_start_offset: Offset(0),
//!     high_watermark: Offset(0),
//!     brokers,
//!     config: ReplicationConfig { min_insync_replicas: 2, ..ReplicationConfig::default() },
//! }, 0).unwrap();
//! let epochs = EpochCache::from_entries([(LeaderEpoch(1), Offset(0))]);
//!
//! // acks=all: check, append 10 records, wait.
//! leader.check_produce(Acks::All).unwrap();
//! leader.on_leader_append(Offset(10), 1).unwrap();
//! let waiting = leader.await_acks_all(RequestId(7), Offset(10), 30_000, 1).unwrap();
//! assert_eq!(waiting, vec![Command::ScheduleTick { at_ms: 30_001 }]);
//!
//! // Both followers fetch at offset 10: the high watermark reaches 10, the request completes.
//! let fetch = |broker: i32| FollowerFetch {
//!     broker: b(broker),
//!     broker_epoch: BrokerEpoch(100 + broker as i64),
//!     current_leader_epoch: Some(LeaderEpoch(1)),
//!     fetch_offset: Offset(10),
//!     last_fetched_epoch: Some(LeaderEpoch(1)),
//!     log_start_offset: Some(Offset(0)),
//! };
//! leader.on_follower_fetch(&fetch(1), &epochs, 2);
//! let out = leader.on_follower_fetch(&fetch(2), &epochs, 3);
//! assert_eq!(out.commands, vec![
//!     Command::HighWatermarkAdvanced { high_watermark: Offset(10) },
//!     Command::CompleteProduce { request: RequestId(7), result: Ok(()) },
//! ]);
//! ```

pub mod config;
pub mod epochs;
pub mod errors;
pub mod follower;
pub mod leader;
pub mod types;

pub use config::ReplicationConfig;
pub use epochs::{EpochCache, EpochView};
pub use errors::{ErrorCode, ReplicationError};
pub use follower::{FetchRequest, FetchState, FollowerCommand, FollowerPartition};
pub use leader::{
    alter_partition_error_action, Acks, AlterPartitionErrorAction, AlterPartitionProposal,
    AlterPartitionResponse, Command, DeleteRecordsOffset, FetchAnswer, FetchOutcome, FollowerFetch,
    FollowerProgress, Ineligible, LeaderInit, LeaderPartition, PartitionMetadata,
    PendingAlterPartition, PendingState,
};
pub use types::{
    AlterPartitionId, BrokerEpoch, BrokerId, BrokerRegistration, EpochEndOffset, IsrMember,
    LeaderEpoch, Offset, PartitionEpoch, RequestId,
};
