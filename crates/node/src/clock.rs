//! Wall-clock time behind an interface, so the simulator can substitute its own.
//!
//! Timers and sleeps go through `tokio::time`, which the simulator also controls; only the
//! wall-clock reading (record timestamps, segment ages, retention) needs this trait.

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + Debug {
    fn now_ms(&self) -> i64;
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
}
