//! keel-node's integration tests, one module per area, linked into one test binary: five
//! binaries each re-instantiating the node's generic code took most of the workspace's build
//! time (`cargo test -p keel-node --test node <module>::` runs one area).

mod broker_node;
mod cluster_follow;
mod controller_quorum;
mod controller_server;
mod metrics;
