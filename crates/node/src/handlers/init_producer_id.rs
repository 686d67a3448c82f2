//! InitProducerId (key 22, v0–5).
//!
//! Without a transactional id (idempotent producers): a new producer id at epoch 0 from this
//! broker's block ([`Broker::new_producer_id`]). As in Kafka, such a request gets a new id
//! whatever producer id and epoch it carries (KIP-360's epoch bump of an idempotent producer
//! is answered with a fresh id).
//!
//! With one (transactional producers, asked of the id's transaction coordinator): WRITE on the
//! transactional id; an empty id, or one longer than 32767 bytes, is `INVALID_REQUEST`;
//! `transaction.timeout.ms` outside `1..=transaction.max.timeout.ms` is
//! `INVALID_TRANSACTION_TIMEOUT`; then the coordinator's answer ([`Broker::txn_init_producer_id`]): the id's producer id with its epoch bumped,
//! fencing the previous producer (`PRODUCER_FENCED` for it from then on), after aborting any
//! transaction it left open (`CONCURRENT_TRANSACTIONS` meanwhile: the client retries). A
//! producer that already had an id and epoch sends them (v3+, KIP-360) and gets the same
//! answer again if its previous request's answer was lost.

use keel_wire::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use keel_wire::ResponseError;
use tracing::debug;

use crate::broker::Broker;

pub async fn handle(
    broker: &std::sync::Arc<Broker>,
    session: &crate::connection::Session,
    request: InitProducerIdRequest,
    version: i16,
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
        // Flexible versions carry longer strings than `__transaction_state`'s key can hold.
        if id.0.is_empty()
            || id.0.len() > crate::txn_coordinator::records::MAX_TRANSACTIONAL_ID_BYTES
        {
            return refused(ResponseError::InvalidRequest);
        }
        let max = broker.config.transactions.max_timeout_ms;
        if request.transaction_timeout_ms <= 0 || request.transaction_timeout_ms > max {
            return refused(ResponseError::InvalidTransactionTimeout);
        }
        let expected =
            (request.producer_id.0 >= 0).then_some((request.producer_id.0, request.producer_epoch));
        return match broker
            .txn_init_producer_id(&id.0, request.transaction_timeout_ms, expected)
            .await
        {
            Ok((producer_id, epoch)) => InitProducerIdResponse::default()
                .with_error_code(0)
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(epoch),
            Err(error) => {
                debug!(transactional_id = %id.0, error = ?error, "InitProducerId refused");
                // KIP-588: PRODUCER_FENCED from v4; older clients know INVALID_PRODUCER_EPOCH.
                if error == ResponseError::ProducerFenced && version < 4 {
                    refused(ResponseError::InvalidProducerEpoch)
                } else {
                    refused(error)
                }
            }
        };
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
