//! Kafka wire protocol adapter for Keel.
//!
//! This crate is the only place where Kafka's byte layout is known to the broker. It sits on
//! top of the [`kafka_protocol`] crate, which owns the generated message types, and adds what a
//! broker needs around them:
//!
//! * [`frame`]: splitting a byte stream into size-prefixed frames, with the
//!   `socket.request.max.bytes` bound, separating "is a whole frame here?" from "parse it";
//! * [`versions`]: the table of API versions Keel serves, and the `ApiVersions` answers
//!   (including the v0 fallback for a version the broker does not support);
//! * [`request`]: decoding a frame into a typed [`request::Request`], with errors that tell
//!   the caller whether the connection can still be answered;
//! * [`response`]: encoding a response body with the right header version.
//!
//! Nothing here does IO: callers hand in bytes and get bytes back, so the same code runs over
//! a real socket and under the simulator.

pub mod client;
pub mod frame;
pub mod keel_ext;
pub mod keel_rpc;
pub mod request;
pub mod response;
pub mod versions;

pub use kafka_protocol;
pub use kafka_protocol::error::ResponseError;
