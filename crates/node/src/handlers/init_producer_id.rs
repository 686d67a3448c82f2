//! InitProducerId (key 22, v0–5) for idempotent producers: a new producer id at epoch 0 from
//! this broker's block ([`Broker::new_producer_id`]). As in Kafka, a request without a
//! transactional id gets a new id whatever producer id and epoch it carries (KIP-360's epoch
//! bump of an idempotent producer is answered with a fresh id). Keel has no transaction
//! coordinator yet: a transactional id is refused with `CLUSTER_AUTHORIZATION_FAILED`, fatal in
//! the Java client (`TransactionManager.InitProducerIdHandler`), librdkafka
//! (`rd_kafka_idemp_check_error`) and franz-go alike (the response has no message field; a
//! client reaches this only past FindCoordinator, which says why:
//! [`super::find_coordinator::TRANSACTIONS_NOT_SUPPORTED`]).

use keel_wire::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use keel_wire::ResponseError;
use tracing::debug;

use crate::broker::Broker;

pub async fn handle(
    broker: &Broker,
    session: &crate::connection::Session,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let refused = |error: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let authz = super::authz::Authz::new(
        broker,
        session,
        keel_wire::kafka_protocol::messages::ApiKey::InitProducerId,
    );
    use keel_controller::acl::{AclOperation, ResourceType};
    if let Some(id) = &request.transactional_id {
        // Kafka: WRITE on the transactional id first.
        if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, &id.0) {
            return refused(ResponseError::TransactionalIdAuthorizationFailed);
        }
        debug!(transactional_id = %id.0, "transactions are not supported");
        return refused(ResponseError::ClusterAuthorizationFailed);
    }
    // KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on at
    // least one topic (Kafka's `authorizeByResourceType`).
    let cluster = keel_controller::acl::CLUSTER_NAME;
    if !authz.allows_quietly(
        AclOperation::IdempotentWrite,
        ResourceType::Cluster,
        cluster,
    ) && !authz.by_resource_type(AclOperation::Write, ResourceType::Topic)
    {
        return refused(ResponseError::ClusterAuthorizationFailed);
    }
    match broker.new_producer_id().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_error_code(0)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => {
            debug!(error = %e, "no producer id");
            refused(e.error)
        }
    }
}
