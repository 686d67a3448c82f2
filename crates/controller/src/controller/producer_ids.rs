//! AllocateProducerIds: blocks of producer ids for brokers' InitProducerId answers (Kafka's
//! `ProducerIdControlManager`). Every block is a [`Record::ProducerIds`] committed before the
//! broker hands out an id from it, so no id is ever given twice, across controller failovers
//! and broker restarts.

use super::{Batch, Controller, Output};
use crate::errors::{ApiError, ErrorCode};
use crate::records::{ProducerIdsRecord, Record};
use crate::types::{BrokerEpoch, BrokerId};

/// Producer ids per block (Kafka's `ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE`).
pub const PRODUCER_ID_BLOCK_SIZE: i32 = 1000;

/// Producer ids `first .. first + len` for one broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdBlock {
    /// The first id of the block.
    pub first: i64,
    /// How many ids it holds.
    pub len: i32,
}

impl Controller {
    /// Hands `broker` (registered at `broker_epoch`) the next block of producer ids.
    pub fn allocate_producer_ids(
        &mut self,
        broker: BrokerId,
        broker_epoch: BrokerEpoch,
        now_ms: u64,
    ) -> Output<Result<ProducerIdBlock, ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        match self.image.broker(broker) {
            None => {
                return batch.finish(Err(ApiError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!("broker {broker} is not registered"),
                )))
            }
            Some(b) if b.epoch != broker_epoch => {
                return batch.finish(Err(ApiError::new(
                    ErrorCode::StaleBrokerEpoch,
                    format!("broker {broker} epoch {broker_epoch} is not {}", b.epoch),
                )))
            }
            Some(_) => {}
        }
        let first = self.image.next_producer_id();
        let Some(next) = first.checked_add(i64::from(PRODUCER_ID_BLOCK_SIZE)) else {
            return batch.finish(Err(ApiError::new(
                ErrorCode::UnknownServerError,
                "every producer id has been handed out".to_string(),
            )));
        };
        batch.push(Record::ProducerIds(ProducerIdsRecord {
            broker,
            broker_epoch,
            next_producer_id: next,
        }));
        batch.finish(Ok(ProducerIdBlock {
            first,
            len: PRODUCER_ID_BLOCK_SIZE,
        }))
    }
}
