//! Keel's IO shell: everything that touches sockets, files (through `keel_log`'s storage
//! interface) and time, around the pure parts of the broker.
//!
//! * [`config`] and [`topic_config`]: Kafka's property names, defaults and validation;
//!   [`broker_configs`]: the broker configs DescribeConfigs describes;
//! * [`broker`]: hosted partitions, topic metadata, open-with-recovery and clean shutdown;
//! * [`partition`]: one partition's log, high watermark (KIP-966 rule) and leader epoch;
//! * [`handlers`]: one module per Kafka API;
//! * [`coordinator`]: consumer groups and committed offsets in `__consumer_offsets`;
//! * [`server`]: the listener and per-connection request loop;
//! * [`runtime`]: wiring it together — background tasks, signals, orderly shutdown;
//! * [`metrics`]: the Prometheus registry every node reports into and its `/metrics` endpoint.
//!
//! Wall-clock time and random ids come from [`clock::Clock`]; timers use `tokio::time`; files
//! go through `keel_log::storage::Storage`; connections go through [`net::Network`] — so a
//! simulator can substitute all four. Every `tokio::select!` is `biased` and blocking work runs
//! inline on a current-thread runtime ([`blocking`]), so a node driven by a single-threaded
//! runtime with paused time behaves deterministically.

pub mod blocking;
pub mod broker;
pub mod broker_configs;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod controller_server;
pub mod coordinator;
pub mod error;
pub mod handlers;
pub mod metadata_log;
pub mod metrics;
pub mod net;
pub mod partition;
pub mod quotas;
pub mod raft;
pub mod runtime;
pub mod security;
pub mod server;
#[cfg(test)]
mod test_support;
pub mod topic_config;
pub mod txn_coordinator;
