//! DescribeCluster (key 60): this broker is the whole cluster and its controller.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use keel_wire::kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse,
};

use super::str_bytes;
use crate::broker::Broker;

/// `cluster_authorized_operations` when the client did not ask for them.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

pub fn handle(broker: &Arc<Broker>, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let listener = broker.config.advertised();
    let node = DescribeClusterBroker::default()
        .with_broker_id(BrokerId(broker.config.node_id))
        .with_host(str_bytes(listener.host.clone()))
        .with_port(i32::from(listener.port))
        .with_rack(None);
    DescribeClusterResponse::default()
        .with_error_code(0)
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(broker.cluster_id.clone()))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_brokers(vec![node])
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
