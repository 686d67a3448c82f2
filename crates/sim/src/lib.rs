//! Keel's deterministic cluster simulator.
//!
//! The real node code — controller, brokers, storage, replication — runs in one process over a
//! simulated network ([`net`]), clock and disk (`keel_log`'s `MemStorage`, whose crash drops
//! every unsynced write), one single-threaded Tokio runtime with paused time per host, stepped
//! in lockstep by the [`world`]. Simulated Kafka clients ([`client`]) produce and consume and
//! record what they were told; the [`checkers`] test the invariants of `DESIGN.md` after every
//! step. Scenario files ([`scenario`], [`runner`]) replay the seed documents' failures in Keel
//! mode and classic mode; [`search`] runs randomized fault schedules; [`report`] writes the
//! classic-vs-Keel table of `docs/durability.md`. Same seed, same run: every event is hashed
//! into the [`trace`].

pub mod checkers;
pub mod client;
pub mod disk;
pub mod etl;
pub mod net;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod search;
pub mod sim;
pub mod trace;
pub mod txn;
pub mod world;
