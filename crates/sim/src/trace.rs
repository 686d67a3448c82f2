//! The run's trace: every event the world and the checkers note, hashed in order (two runs of
//! the same seed must give the same hash) and, when asked, printed as it happens.

use std::fmt::Write as _;

/// FNV-1a, 64 bits: stable across builds and platforms, unlike `std`'s hashers.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// Events of one run.
#[derive(Debug, Default)]
pub struct Trace {
    hash: Fnv,
    events: u64,
    /// Print each event to stderr as it happens.
    pub verbose: bool,
    /// Keep the last events, to show around a failure.
    tail: std::collections::VecDeque<String>,
}

/// How many recent events a trace keeps for failure reports.
const TAIL: usize = 40;

impl Trace {
    pub fn new(verbose: bool) -> Trace {
        Trace {
            verbose,
            ..Trace::default()
        }
    }

    /// Notes an event at world time `now_us`.
    pub fn event(&mut self, now_us: u64, text: impl AsRef<str>) {
        let mut line = String::new();
        let _ = write!(
            line,
            "[{:>5}.{:03}s] {}",
            now_us / 1_000_000,
            (now_us / 1_000) % 1_000,
            text.as_ref()
        );
        self.hash.write(line.as_bytes());
        self.hash.write(b"\n");
        self.events += 1;
        if self.verbose {
            eprintln!("{line}");
        }
        if self.tail.len() == TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// Mixes state into the hash without printing it.
    pub fn mix(&mut self, bytes: &[u8]) {
        self.hash.write(bytes);
    }

    pub fn hash(&self) -> u64 {
        self.hash.finish()
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// The last events (oldest first).
    pub fn tail(&self) -> impl Iterator<Item = &String> {
        self.tail.iter()
    }
}
