//! The transaction coordinator (KIP-98, KIP-890), built on Keel's own replication like the
//! group coordinator: a transactional id lives in one partition of `__transaction_state`
//! (Kafka's `abs(hashCode) % partitions`), whose leader coordinates it; every state change is
//! a record appended with `acks=all` before it is answered.
//!
//! Modules: [`state`] (one transactional id's state machine, Kafka's transitions) and
//! [`records`] (the topic's key and value layout, Kafka's own).

pub mod records;
pub mod state;
