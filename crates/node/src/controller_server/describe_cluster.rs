//! DescribeCluster (60, v0–2) on the controller listener: `EndpointType` 1 (BROKERS, the v0
//! default) lists the registered, unfenced brokers at their first listener (v2
//! `IncludeFencedBrokers`: the fenced ones too, KIP-1073); 2 (CONTROLLERS,
//! KIP-919) lists every voter of `controller.quorum.voters`. Other types are
//! `UNSUPPORTED_ENDPOINT_TYPE`. `ControllerId` is the Raft leader as this controller knows it
//! (-1 when none). Any controller answers, from its applied image.

use keel_controller::image::BrokerState;
use keel_wire::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use keel_wire::kafka_protocol::messages::{
    BrokerId as WireBrokerId, DescribeClusterRequest, DescribeClusterResponse,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::state::{CallError, ControllerHandle};
use super::Settings;

/// Kafka's `EndpointType.BROKER`.
const ENDPOINT_BROKERS: i8 = 1;
/// Kafka's `EndpointType.CONTROLLER`.
const ENDPOINT_CONTROLLERS: i8 = 2;
/// Kafka's "authorized operations not requested" sentinel.
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// DescribeCluster.
pub(super) async fn handle(
    handle: &ControllerHandle,
    settings: &Settings,
    req: DescribeClusterRequest,
) -> Result<DescribeClusterResponse, CallError> {
    let base = DescribeClusterResponse::default()
        .with_error_code(0)
        .with_endpoint_type(req.endpoint_type)
        .with_cluster_id(StrBytes::from_string(settings.cluster_id.clone()))
        .with_controller_id(WireBrokerId(handle.view().leader.unwrap_or(-1)))
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
    let brokers = match req.endpoint_type {
        ENDPOINT_BROKERS => {
            let include_fenced = req.include_fenced_brokers;
            handle.machine().with_image(|image| {
                image
                    .brokers()
                    .values()
                    .filter(|b| include_fenced || b.state != BrokerState::Fenced)
                    .filter_map(|b| {
                        let listener = b.listeners.first()?;
                        Some(
                            DescribeClusterBroker::default()
                                .with_broker_id(WireBrokerId(b.id.0))
                                .with_host(StrBytes::from_string(listener.host.clone()))
                                .with_port(i32::from(listener.port))
                                .with_rack(b.rack.clone().map(StrBytes::from_string))
                                .with_is_fenced(b.state == BrokerState::Fenced),
                        )
                    })
                    .collect::<Vec<_>>()
            })
        }
        ENDPOINT_CONTROLLERS => settings
            .voters
            .iter()
            .map(|(id, addr)| {
                // This controller's own entry names its bound endpoint (the config may say
                // port 0); the others are as configured.
                let (host, port) = if *id == settings.node_id {
                    (settings.endpoint.host.clone(), settings.endpoint.port)
                } else {
                    let (host, port) = addr.rsplit_once(':').unwrap_or((addr.as_str(), "0"));
                    (host.to_string(), port.parse().unwrap_or(0))
                };
                DescribeClusterBroker::default()
                    .with_broker_id(WireBrokerId(*id))
                    .with_host(StrBytes::from_string(host))
                    .with_port(i32::from(port))
                    .with_rack(None)
            })
            .collect(),
        other => {
            return Ok(base
                .with_error_code(ResponseError::UnsupportedEndpointType.code())
                .with_error_message(Some(StrBytes::from_string(format!(
                    "endpoint type {other} is not supported"
                )))))
        }
    };
    Ok(base.with_brokers(brokers))
}
