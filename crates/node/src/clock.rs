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
