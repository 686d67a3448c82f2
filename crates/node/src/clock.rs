//! Wall-clock time and random ids behind an interface, so the simulator can substitute its own.
//!
//! Timers and sleeps go through `tokio::time`, which the simulator also controls; only the
//! wall-clock reading (record timestamps, segment ages, retention) and the random ids a node
//! draws need this trait.

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

/// A source of wall-clock milliseconds since the Unix epoch, and of random ids.
pub trait Clock: Send + Sync + Debug {
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// A new random id. Every random id a node draws — broker incarnation ids, topic ids,
    /// the suffixes of directories set aside for deleted or stray logs — comes from here, so a
    /// simulation can make them reproducible (a seeded generator instead of the OS's).
    fn new_uuid(&self) -> Uuid;

    /// A new id for something a user names on a command line — a topic id, a cluster id:
    /// drawn again until it is one Kafka would hand out ([`is_kafka_id`]).
    fn new_kafka_id(&self) -> Uuid {
        loop {
            let id = self.new_uuid();
            if is_kafka_id(id) {
                return id;
            }
        }
    }
}

/// Kafka's metadata topic id (`AAAAAAAAAAAAAAAAAAAAAQ`), reserved like the nil id.
const METADATA_TOPIC_ID: Uuid = Uuid::from_u128(1);

/// Whether Kafka's `Uuid.randomUuid` could return `id`: neither the nil id nor the metadata
/// topic's, and its base64 form does not start with `-` — a command line would read such an id
/// (`--cluster-id -Pw…`, `--topic-id -x…`) as an option. The first base64 character is the top
/// six bits of the first byte; `-` is the 62nd letter of the URL-safe alphabet.
pub fn is_kafka_id(id: Uuid) -> bool {
    !id.is_nil() && id != METADATA_TOPIC_ID && id.as_bytes()[0] >> 2 != 62
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    fn new_uuid(&self) -> Uuid {
        Uuid::new_v4()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Draws(std::sync::Mutex<Vec<Uuid>>);

    impl Clock for Draws {
        fn now_ms(&self) -> i64 {
            0
        }

        fn new_uuid(&self) -> Uuid {
            self.0.lock().unwrap().remove(0)
        }
    }

    #[test]
    fn kafka_ids_never_start_with_a_dash_and_are_never_reserved() {
        // 0xF8 = 0b111110_00: the first base64 character is the 62nd letter, `-`.
        let dash = Uuid::from_u128(0xF8 << 120);
        assert!(!is_kafka_id(dash));
        assert!(!is_kafka_id(Uuid::nil()));
        assert!(!is_kafka_id(METADATA_TOPIC_ID));
        // 0xFC is `_`, 0xF4 is `9`: both fine.
        assert!(is_kafka_id(Uuid::from_u128(0xFC << 120)));
        assert!(is_kafka_id(Uuid::from_u128(0xF4 << 120)));
        let good = Uuid::from_u128(0x1234);
        let clock = Draws(std::sync::Mutex::new(vec![
            dash,
            Uuid::nil(),
            METADATA_TOPIC_ID,
            good,
        ]));
        assert_eq!(clock.new_kafka_id(), good);
    }
}
