//! The ids, epochs and offsets this crate shares with the controller core, and the few types of
//! its own: request ids for the produce purgatory, AlterPartition proposal ids, and the broker
//! registration view a leader keeps from metadata.
//!
//! Kafka's wire sentinels (`-1` = unknown epoch or offset) never appear here: absence is an
//! `Option`. The shell converts at the protocol boundary.

use std::fmt;

pub use keel_controller::alter_partition::IsrMember;
pub use keel_controller::types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, PartitionEpoch};

/// An opaque id the shell gives one acks=all produce request for one partition; the purgatory
/// answers by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request-{}", self.0)
    }
}

/// Names one AlterPartition proposal of one leadership, so a response can be matched to the
/// proposal it answers (a response for any other proposal is ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AlterPartitionId(pub u64);

/// What the leader knows about a broker from the metadata image (Kafka's `BrokerRegistration`
/// as far as replication cares).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    /// The broker epoch of its current registration.
    pub epoch: BrokerEpoch,
    /// Fenced by the controller (missed heartbeats, or not yet caught up with metadata).
    pub fenced: bool,
    /// In controlled shutdown.
    pub in_controlled_shutdown: bool,
}

impl BrokerRegistration {
    /// A live registration: unfenced, not shutting down.
    pub fn live(epoch: BrokerEpoch) -> Self {
        BrokerRegistration {
            epoch,
            fenced: false,
            in_controlled_shutdown: false,
        }
    }
}

/// An epoch and the end offset the log holds for it: the answer of Kafka's
/// `LeaderEpochFileCache.endOffsetFor` and of a Fetch `DivergingEpoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEndOffset {
    /// The largest epoch ≤ the one asked for (or the one asked for when it precedes every
    /// epoch the log knows).
    pub epoch: LeaderEpoch,
    /// The start offset of the next epoch, or the log end offset for the latest epoch.
    pub end_offset: Offset,
}
