//! The controller quorum's Raft: `openraft` (pinned, see `docs/ARCHITECTURE.md`) over Keel's
//! own storage and network interfaces, so the simulator drives it like everything else.
//!
//! | module | what lives there |
//! |---|---|
//! | [`log_store`] | the Raft log (`__raft_log-0`, one batch per entry) and `raft-state.json` (vote, committed, purged) |
//! | [`state_machine`] | applies committed entries: the replayed `ClusterImage` and `__cluster_metadata-0`, the applied log brokers fetch; snapshots |
//! | [`network`] | Vote / AppendEntries / snapshot RPCs to the other voters on Keel's private keys |
//! | [`rpc`] | the receiving side of those RPCs on the controller listener |
//!
//! One Raft entry carries the records of one controller operation ([`MetadataWrite`]). The
//! Raft term is the controller epoch; the Raft leader is the active controller once it has
//! applied its own first (blank) entry. Brokers never join the Raft group: they fetch the
//! applied `__cluster_metadata-0` from any controller, as KRaft observers do.
//!
//! openraft types stay inside this module (its 0.10 line changes them).

// openraft's traits fix the error type (`StorageError`, ~200 bytes); helpers return it as is.
#![allow(clippy::result_large_err)]

pub mod log_store;
pub mod network;
pub mod rpc;
pub mod state_machine;

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use keel_controller::Record;
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// Keel's Raft type configuration.
    pub KeelRaft:
        D = MetadataWrite,
        R = MetadataApplied,
        NodeId = u64,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A Raft instance of the controller quorum.
pub type Raft = openraft::Raft<KeelRaft>;
/// A Raft log entry.
pub type Entry = openraft::Entry<KeelRaft>;
/// A Raft log position.
pub type LogId = openraft::LogId<u64>;
/// A vote (term, candidate, committed).
pub type Vote = openraft::Vote<u64>;
/// The membership as stored.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
/// A storage failure as openraft reports it.
pub type StorageError = openraft::StorageError<u64>;

/// The payload of one normal Raft entry: the records one controller operation generated.
/// `first_offset` is where the active controller expects them in `__cluster_metadata-0`
/// (it generated them against that state); applying them anywhere else is a bug that stops
/// the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataWrite {
    pub first_offset: i64,
    pub records: Vec<Record>,
}

/// What applying an entry produced: the metadata log's end offset after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataApplied {
    pub end_offset: i64,
}

/// A Keel node id as a Raft node id (node ids are never negative; the config checks).
pub fn raft_id(node_id: i32) -> u64 {
    u64::try_from(node_id).unwrap_or(0)
}

/// A Raft node id as a Keel node id.
pub fn node_id(raft_id: u64) -> i32 {
    i32::try_from(raft_id).unwrap_or(i32::MAX)
}

/// The controller epoch of a Raft term (terms beyond `i32::MAX` cannot happen in practice:
/// one election per millisecond for 24 days).
pub fn controller_epoch(term: u64) -> i32 {
    i32::try_from(term).unwrap_or(i32::MAX)
}

/// Timing of the quorum. `election_timeout_ms` is `controller.quorum.election.timeout.ms`;
/// the heartbeat (and so the AppendEntries timeout, which openraft ties to it) is a tenth.
/// `snapshot_interval_entries` is `keel.metadata.snapshot.interval.entries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumTiming {
    pub election_timeout_ms: u64,
    pub snapshot_interval_entries: u64,
}

impl QuorumTiming {
    /// The heartbeat interval: a tenth of the election timeout, at least 20 ms.
    pub fn heartbeat_ms(&self) -> u64 {
        (self.election_timeout_ms / 10).max(20)
    }

    /// The openraft config for the voter at `rank` (its index among the sorted voter ids).
    ///
    /// openraft 0.9 draws a node's election timeout once, from an unseeded RNG, in
    /// `min..max`, and a tie between two candidates repeats forever with `single-term-leader`
    /// (both time out on the same tick every term). So Keel picks every voter's timeout itself
    /// — a one-millisecond range, which the RNG cannot change — and spaces voters two ticks
    /// apart (a tick is 1.5 heartbeats), which is also what makes a simulation reproducible.
    pub fn openraft_config(&self, rank: usize) -> Result<Arc<openraft::Config>, String> {
        let heartbeat = self.heartbeat_ms();
        let tick = heartbeat * 3 / 2;
        let min = self.election_timeout_ms + 2 * tick * rank as u64;
        let config = openraft::Config {
            cluster_name: "keel-controllers".to_string(),
            heartbeat_interval: heartbeat,
            election_timeout_min: min,
            election_timeout_max: min + 1,
            // Votes get the election timeout; snapshots are one RPC carrying the whole image.
            install_snapshot_timeout: self.election_timeout_ms,
            max_payload_entries: 300,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(
                self.snapshot_interval_entries.max(1),
            ),
            // A quarter of the interval stays below a snapshot, so a briefly lagging voter
            // catches up from the log instead of a whole snapshot.
            max_in_snapshot_log_to_keep: self.snapshot_interval_entries / 4,
            purge_batch_size: (self.snapshot_interval_entries / 4).clamp(1, 64),
            ..Default::default()
        };
        config.validate().map(Arc::new).map_err(|e| e.to_string())
    }

    /// How long a Raft RPC to another voter may take before the connection is dropped.
    pub fn rpc_timeout(&self) -> Duration {
        Duration::from_millis(self.election_timeout_ms)
    }
}

/// Raft entries between two snapshots of the metadata state (the default of
/// `keel.metadata.snapshot.interval.entries`).
pub const SNAPSHOT_INTERVAL_ENTRIES: u64 = 2_000;
