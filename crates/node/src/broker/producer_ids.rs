//! Producer ids for InitProducerId: handed out one at a time from a block the active controller
//! allocated to this broker (AllocateProducerIds, committed in the metadata log before it is
//! answered), so no two producers anywhere in the cluster, ever, get the same id.

use keel_wire::kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, ApiKey, BrokerId,
};
use keel_wire::ResponseError;
use tracing::info;

use super::Broker;
use crate::error::ApiError;

/// The ids `next..end` of this broker's current block.
#[derive(Debug, Default)]
pub(crate) struct ProducerIdPool {
    next: i64,
    end: i64,
}

impl Broker {
    /// A producer id no one else has: the next of this broker's block, or the first of a new
    /// block from the controller. While no block can be had the answer is the retriable
    /// `COORDINATOR_LOAD_IN_PROGRESS`, as in Kafka.
    pub async fn new_producer_id(&self) -> Result<i64, ApiError> {
        let mut pool = self.producer_ids.lock().await;
        if pool.next >= pool.end {
            let request = AllocateProducerIdsRequest::default()
                .with_broker_id(BrokerId(self.node_id()))
                .with_broker_epoch(self.broker_epoch());
            let unavailable = |reason: String| {
                ApiError::new(
                    ResponseError::CoordinatorLoadInProgress,
                    format!("no producer id block yet: {reason}"),
                )
            };
            let answer: AllocateProducerIdsResponse = self
                .controller()
                .call(ApiKey::AllocateProducerIds, 0, 0, &request)
                .await
                .map_err(|e| unavailable(e.to_string()))?;
            if answer.error_code != 0 || answer.producer_id_len <= 0 {
                return Err(unavailable(format!(
                    "the controller answered error {}",
                    answer.error_code
                )));
            }
            let first = answer.producer_id_start.0;
            info!(
                first,
                len = answer.producer_id_len,
                "allocated a block of producer ids"
            );
            pool.next = first;
            pool.end = first.saturating_add(i64::from(answer.producer_id_len));
        }
        let id = pool.next;
        pool.next += 1;
        Ok(id)
    }
}
