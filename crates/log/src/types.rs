//! Small value types shared by the whole crate: [`Offset`], [`LeaderEpoch`],
//! [`TimestampOffset`] and [`TopicPartition`]. Wire sentinels (`-1` "no epoch") never appear here: an absent epoch is
//! `Option<LeaderEpoch>`.

use std::fmt;

/// A Kafka log offset. Offsets in a log are non-negative; the type does not forbid negative
/// values so that values read from the wire can be represented before they are validated.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Offset(pub i64);

impl Offset {
    /// The offset `delta` positions after this one (saturating: offsets read from damaged
    /// files must not overflow).
    #[must_use]
    pub fn plus(self, delta: i64) -> Offset {
        Offset(self.0.saturating_add(delta))
    }

    /// The offset right after this one.
    #[must_use]
    pub fn next(self) -> Offset {
        self.plus(1)
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A partition leader epoch, as stamped into every record batch by the leader that appended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LeaderEpoch(pub i32);

impl fmt::Display for LeaderEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A timestamp and the offset it belongs to (at batch granularity: the batch's base offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// Milliseconds since the epoch (Kafka record timestamp).
    pub timestamp: i64,
    /// The offset.
    pub offset: Offset,
}

/// A topic name and partition index. The partition directory is named `<topic>-<partition>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name (may itself contain `-`).
    pub topic: String,
    /// Partition index (non-negative).
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition pair.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition directory name, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    /// Parses a partition directory name by its LAST `-` (topics may contain `-`).
    /// Returns `None` for names that are not `<non-empty topic>-<non-negative partition>`.
    pub fn parse_dir_name(name: &str) -> Option<TopicPartition> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty() || partition.is_empty() {
            return None;
        }
        if !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let partition: i32 = partition.parse().ok()?;
        Some(TopicPartition::new(topic, partition))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Directory names split at the last '-', so topics containing '-' round-trip.
    #[test]
    fn dir_name_round_trips_with_dashes_in_topic() {
        let tp = TopicPartition::new("my-topic-x", 12);
        assert_eq!(tp.dir_name(), "my-topic-x-12");
        assert_eq!(TopicPartition::parse_dir_name("my-topic-x-12"), Some(tp));
    }

    // Names that are not `<topic>-<partition>` are rejected instead of guessed.
    #[test]
    fn unparseable_dir_names_are_rejected() {
        for name in [
            "topic",
            "-3",
            "topic-",
            "topic-x",
            "topic-+1",
            "t-99999999999",
        ] {
            assert_eq!(TopicPartition::parse_dir_name(name), None, "{name}");
        }
    }
}
