//! Newtypes for ids, epochs and offsets, and the small enums the rest of the crate shares.
//!
//! Kafka's wire sentinels (`-1` = no leader, `-2` = unchanged, `-1` = unknown epoch) never appear
//! here: absence is an `Option`, a change is an enum.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! int_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
        )]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

int_newtype!(
    /// A broker's `node.id`. Signed because AlterPartition requests from the wire may carry
    /// negative ids, which validation must be able to reject (`INVALID_REQUEST`).
    BrokerId(i32)
);
int_newtype!(
    /// A broker epoch: the metadata-log offset of the broker's `RegisterBroker` record.
    BrokerEpoch(i64)
);
int_newtype!(
    /// A partition's leader epoch: grows by one each time the leader field changes.
    LeaderEpoch(i32)
);
int_newtype!(
    /// A partition's epoch: grows by one on every change record.
    PartitionEpoch(i32)
);
int_newtype!(
    /// An offset in the metadata log (not a partition's data log).
    MetadataOffset(i64)
);
int_newtype!(
    /// An offset in a partition's data log (a log end offset, in unclean-recovery answers).
    Offset(i64)
);

impl LeaderEpoch {
    /// The next leader epoch.
    pub fn next(self) -> Self {
        LeaderEpoch(self.0 + 1)
    }
}

impl PartitionEpoch {
    /// The next partition epoch.
    pub fn next(self) -> Self {
        PartitionEpoch(self.0 + 1)
    }
}

impl MetadataOffset {
    /// The offset right after this one.
    pub fn next(self) -> Self {
        MetadataOffset(self.0 + 1)
    }
}

macro_rules! uuid_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

uuid_newtype!(
    /// A topic's id (Kafka's topic UUID). Passed in by the caller; this crate draws no randomness.
    TopicId
);
uuid_newtype!(
    /// An ACL binding's id (Kafka's `AccessControlEntryRecord.id`; never on the client wire).
    /// Keel's are derived from the metadata offset of the record that created the binding
    /// ([`AclId::at`]), so the controller draws no randomness.
    AclId
);
uuid_newtype!(
    /// A log directory's id from its `meta.properties`; a replaced disk shows up as a new id.
    DirectoryId
);
uuid_newtype!(
    /// The random id a broker process picks at startup; a new one means the process restarted.
    IncarnationId
);

/// One partition of one topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    /// The topic's id.
    pub topic: TopicId,
    /// The partition index.
    pub partition: u32,
}

impl TopicPartition {
    /// Builds a topic-partition.
    pub fn new(topic: TopicId, partition: u32) -> Self {
        TopicPartition { topic, partition }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Kafka's `LeaderRecoveryState`: `Recovering` after an unclean election, until the new leader
/// reports (through AlterPartition) that it finished recovering.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LeaderRecoveryState {
    /// Normal state.
    #[default]
    Recovered,
    /// The leader was elected uncleanly and may lack committed data.
    Recovering,
}

impl LeaderRecoveryState {
    /// Kafka's name (`RECOVERED` / `RECOVERING`).
    pub fn name(self) -> &'static str {
        match self {
            LeaderRecoveryState::Recovered => "RECOVERED",
            LeaderRecoveryState::Recovering => "RECOVERING",
        }
    }

    /// Parses Kafka's name, case-insensitively.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_uppercase().as_str() {
            "RECOVERED" => Some(LeaderRecoveryState::Recovered),
            "RECOVERING" => Some(LeaderRecoveryState::Recovering),
            _ => None,
        }
    }
}

/// KIP-966 `unclean.recovery.strategy`: what the controller does when no clean leader exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UncleanRecoveryStrategy {
    /// "Recovering the availability as fast as possible": unclean recovery also when only fenced
    /// ELR members remain; elects the best answer after 5 s. In classic mode: unclean leader
    /// election enabled.
    Proactive,
    /// "Auto recovery on potential data loss case, wait as needed for a better result": waits
    /// for fenced ELR members; recovers only when ISR and ELR are empty, once every LastKnownELR
    /// member answered.
    Balanced,
    /// "Stop the partition on potential data loss": waits for an operator.
    Manual,
}

impl UncleanRecoveryStrategy {
    /// The config value (`proactive` | `balanced` | `manual`).
    pub fn name(self) -> &'static str {
        match self {
            UncleanRecoveryStrategy::Proactive => "proactive",
            UncleanRecoveryStrategy::Balanced => "balanced",
            UncleanRecoveryStrategy::Manual => "manual",
        }
    }

    /// Parses a config value, case-insensitively (the KIP writes `Proactive`).
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "proactive" => Some(UncleanRecoveryStrategy::Proactive),
            "balanced" => Some(UncleanRecoveryStrategy::Balanced),
            "manual" => Some(UncleanRecoveryStrategy::Manual),
            _ => None,
        }
    }
}

/// How one unclean recovery decides when to elect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    /// Elect once every LastKnownELR member (every replica if LastKnownELR is empty) answered.
    Balanced,
    /// Elect the best answer received within 5 s, or the first answer after that.
    Proactive,
}

impl RecoveryMode {
    /// The mode a partition's strategy asks for when the controller starts recovery on its own.
    pub fn for_strategy(strategy: UncleanRecoveryStrategy) -> Self {
        match strategy {
            UncleanRecoveryStrategy::Proactive => RecoveryMode::Proactive,
            UncleanRecoveryStrategy::Balanced | UncleanRecoveryStrategy::Manual => {
                RecoveryMode::Balanced
            }
        }
    }

    /// Parses `balanced` / `proactive`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "balanced" => Some(RecoveryMode::Balanced),
            "proactive" => Some(RecoveryMode::Proactive),
            _ => None,
        }
    }
}

impl AclId {
    /// The id of the binding created by the record at `offset`: unique, since no two records
    /// share an offset (the high half spells `keel acl`).
    pub fn at(offset: MetadataOffset) -> AclId {
        AclId(Uuid::from_u64_pair(0x6b65_656c_2061_636c, offset.0 as u64))
    }
}
