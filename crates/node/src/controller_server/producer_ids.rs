//! AllocateProducerIds (67, v0): a block of producer ids for a broker, committed as a
//! `ProducerIds` record before the answer (`keel_controller::Controller::allocate_producer_ids`).

use keel_controller::types::{BrokerEpoch, BrokerId};
use keel_wire::kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, ProducerId,
};
use tracing::warn;

use super::state::{CallError, ControllerHandle};

pub(super) async fn allocate(
    handle: &ControllerHandle,
    req: AllocateProducerIdsRequest,
) -> Result<AllocateProducerIdsResponse, CallError> {
    let (broker, epoch) = (BrokerId(req.broker_id.0), BrokerEpoch(req.broker_epoch));
    let result = handle
        .call(move |s| s.commit(|c, now_ms| c.allocate_producer_ids(broker, epoch, now_ms)))
        .await?;
    Ok(match result {
        Ok(block) => AllocateProducerIdsResponse::default()
            .with_error_code(0)
            .with_producer_id_start(ProducerId(block.first))
            .with_producer_id_len(block.len),
        Err(error) => {
            warn!(%broker, %error, "producer id block refused");
            AllocateProducerIdsResponse::default()
                .with_error_code(error.code.code())
                .with_producer_id_start(ProducerId(-1))
                .with_producer_id_len(0)
        }
    })
}
