//! DescribeCluster (key 60): the registered, unfenced brokers from the metadata image. Like
//! a KRaft broker, it names a live broker (itself) as the controller: it forwards what clients
//! send there.

use std::sync::Arc;

use keel_wire::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use keel_wire::kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse,
};

use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;

/// `cluster_authorized_operations` when the client did not ask for them.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// KIP-919's endpoint types: 1 = brokers (the only one a broker listener serves).
const ENDPOINT_TYPE_BROKERS: i8 = 1;

/// Answers DescribeCluster with the brokers' endpoints of `listener`, the listener the request
/// came in on (as Metadata does).
pub fn handle(
    broker: &Arc<Broker>,
    request: DescribeClusterRequest,
    listener: &str,
) -> DescribeClusterResponse {
    if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        return DescribeClusterResponse::default()
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes(format!(
                "endpoint type {} is not served by a broker listener",
                request.endpoint_type
            ))))
            .with_endpoint_type(request.endpoint_type)
            .with_cluster_id(str_bytes(broker.cluster_id.clone()))
            .with_controller_id(BrokerId(-1))
            .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    }
    let brokers: Vec<DescribeClusterBroker> = broker
        .serving_brokers_on(listener)
        .into_iter()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(str_bytes(b.host))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.map(str_bytes))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_error_code(0)
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(broker.cluster_id.clone()))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
