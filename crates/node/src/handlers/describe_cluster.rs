//! DescribeCluster (key 60, v0–2): the registered brokers from the metadata image — the
//! unfenced ones, and with `IncludeFencedBrokers` (v2, KIP-1073) the fenced ones too, each with
//! `IsFenced`. Like a KRaft broker, it names a live broker (itself) as the controller: it
//! forwards what clients send there. Endpoint types as Kafka's `AuthHelper`
//! `computeDescribeClusterResponse`: a broker listener describes brokers (1); asking it for
//! controllers (2) is `MISMATCHED_ENDPOINT_TYPE`, any other type `UNSUPPORTED_ENDPOINT_TYPE` —
//! both `INVALID_REQUEST` at v0, which knows neither error.

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

/// KIP-919's endpoint types: 1 = brokers (the only one a broker listener serves), 2 =
/// controllers.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
const ENDPOINT_TYPE_CONTROLLERS: i8 = 2;

/// The first version that knows the endpoint type errors.
const ENDPOINT_ERRORS_MIN_VERSION: i16 = 1;

/// Answers DescribeCluster with the brokers' endpoints of `listener`, the listener the request
/// came in on (as Metadata does).
pub fn handle(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: DescribeClusterRequest,
    version: i16,
    listener: &str,
) -> DescribeClusterResponse {
    if request.endpoint_type != ENDPOINT_TYPE_BROKERS {
        let (error, message) = if request.endpoint_type == ENDPOINT_TYPE_CONTROLLERS {
            (
                ResponseError::MismatchedEndpointType,
                "this is a broker listener: it describes brokers; ask a controller listener for \
                 the controllers"
                    .to_string(),
            )
        } else {
            (
                ResponseError::UnsupportedEndpointType,
                format!("endpoint type {} is unknown", request.endpoint_type),
            )
        };
        let error = if version < ENDPOINT_ERRORS_MIN_VERSION {
            ResponseError::InvalidRequest
        } else {
            error
        };
        return DescribeClusterResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)))
            .with_endpoint_type(request.endpoint_type)
            .with_cluster_id(str_bytes(broker.cluster_id.clone()))
            .with_controller_id(BrokerId(-1))
            .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    }
    let brokers: Vec<DescribeClusterBroker> = broker
        .described_brokers(listener, request.include_fenced_brokers)
        .into_iter()
        .map(|(b, fenced)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id))
                .with_host(str_bytes(b.host))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.map(str_bytes))
                .with_is_fenced(fenced)
        })
        .collect();
    DescribeClusterResponse::default()
        .with_error_code(0)
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(str_bytes(broker.cluster_id.clone()))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(cluster_operations(broker, session, &request))
}

/// KIP-430: when asked, the cluster operations the session may do — 0 without DESCRIBE on the
/// cluster (Kafka's `handleDescribeCluster`).
fn cluster_operations(
    broker: &Broker,
    session: &crate::connection::Session,
    request: &DescribeClusterRequest,
) -> i32 {
    use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};
    if !request.include_cluster_authorized_operations {
        return AUTHORIZED_OPERATIONS_OMITTED;
    }
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::DescribeCluster,
    );
    if authz.cluster(AclOperation::Describe) {
        authz.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
    } else {
        0
    }
}
