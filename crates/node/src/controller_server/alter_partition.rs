//! AlterPartition (56, v2–3): a partition leader proposes a new ISR.
//!
//! v2 sends `NewIsr` (broker ids, no epochs); v3 sends `NewIsrWithEpochs` (KIP-903: the broker
//! epoch the leader saw each member fetch with; -1 = unchecked). Per-partition results are
//! exactly the controller crate's (`keel_controller::alter_partition`: Kafka's validation
//! order and error codes); the sender's stale broker epoch is the top-level
//! `STALE_BROKER_EPOCH`. A leader recovery state other than 0 (RECOVERED) or 1 (RECOVERING) and a
//! negative partition index are rejected at the wire (`INVALID_REQUEST`,
//! `UNKNOWN_TOPIC_OR_PARTITION`).

use keel_controller::alter_partition::{
    AlterPartitionItem, AlterPartitionItemResponse, AlterPartitionRequest as Request, IsrMember,
    PartitionView,
};
use keel_controller::types::{
    BrokerEpoch, BrokerId, LeaderEpoch, LeaderRecoveryState, PartitionEpoch, TopicId,
};
use keel_controller::ErrorCode;
use keel_wire::kafka_protocol::messages::alter_partition_response::{PartitionData, TopicData};
use keel_wire::kafka_protocol::messages::{
    AlterPartitionRequest, AlterPartitionResponse, BrokerId as WireBrokerId,
};
use keel_wire::ResponseError;

use super::state::{CallError, ControllerHandle};

/// Kafka's `LeaderRecoveryState` byte.
fn leader_recovery_state(value: i8) -> Option<LeaderRecoveryState> {
    match value {
        0 => Some(LeaderRecoveryState::Recovered),
        1 => Some(LeaderRecoveryState::Recovering),
        _ => None,
    }
}

fn recovery_state_byte(state: LeaderRecoveryState) -> i8 {
    match state {
        LeaderRecoveryState::Recovered => 0,
        LeaderRecoveryState::Recovering => 1,
    }
}

/// A request partition: sent to the controller, or answered at the wire.
enum Slot {
    Controller,
    Wire(i16),
}

/// AlterPartition.
pub(super) async fn handle(
    handle: &ControllerHandle,
    req: AlterPartitionRequest,
    version: i16,
) -> Result<AlterPartitionResponse, CallError> {
    let mut items = Vec::new();
    let mut slots = Vec::new();
    for topic in &req.topics {
        for p in &topic.partitions {
            let Ok(partition) = u32::try_from(p.partition_index) else {
                slots.push(Slot::Wire(ResponseError::UnknownTopicOrPartition.code()));
                continue;
            };
            let Some(lrs) = leader_recovery_state(p.leader_recovery_state) else {
                slots.push(Slot::Wire(ResponseError::InvalidRequest.code()));
                continue;
            };
            let new_isr = if version >= 3 {
                p.new_isr_with_epochs
                    .iter()
                    .map(|m| IsrMember {
                        broker: BrokerId(m.broker_id.0),
                        broker_epoch: (m.broker_epoch >= 0).then_some(BrokerEpoch(m.broker_epoch)),
                    })
                    .collect()
            } else {
                p.new_isr
                    .iter()
                    .map(|b| IsrMember {
                        broker: BrokerId(b.0),
                        broker_epoch: None,
                    })
                    .collect()
            };
            items.push(AlterPartitionItem {
                topic: TopicId(topic.topic_id),
                partition,
                leader_epoch: LeaderEpoch(p.leader_epoch),
                partition_epoch: PartitionEpoch(p.partition_epoch),
                new_isr,
                leader_recovery_state: lrs,
            });
            slots.push(Slot::Controller);
        }
    }
    let request = Request {
        broker: BrokerId(req.broker_id.0),
        broker_epoch: BrokerEpoch(req.broker_epoch),
        partitions: items,
    };
    let result = handle
        .call(move |s| s.commit(|c, now_ms| c.alter_partition(&request, now_ms)))
        .await?;
    let results = match result {
        Ok(results) => results,
        Err(code) => {
            return Ok(AlterPartitionResponse::default().with_error_code(code.code()));
        }
    };
    let mut answers = results.into_iter();
    let mut slots = slots.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let base = PartitionData::default().with_partition_index(p.partition_index);
                    match slots.next() {
                        Some(Slot::Wire(code)) => base.with_error_code(code),
                        Some(Slot::Controller) => match answers.next() {
                            Some(answer) => partition_data(base, answer),
                            None => base.with_error_code(ErrorCode::InvalidRequest.code()),
                        },
                        None => base.with_error_code(ErrorCode::InvalidRequest.code()),
                    }
                })
                .collect();
            TopicData::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    Ok(AlterPartitionResponse::default()
        .with_error_code(0)
        .with_topics(topics))
}

fn partition_data(base: PartitionData, answer: AlterPartitionItemResponse) -> PartitionData {
    match answer.result {
        Ok(PartitionView {
            leader,
            isr,
            leader_epoch,
            partition_epoch,
            leader_recovery_state,
        }) => base
            .with_error_code(0)
            .with_leader_id(WireBrokerId(leader.map_or(-1, |b| b.0)))
            .with_leader_epoch(leader_epoch.0)
            .with_isr(isr.iter().map(|b| WireBrokerId(b.0)).collect())
            .with_leader_recovery_state(recovery_state_byte(leader_recovery_state))
            .with_partition_epoch(partition_epoch.0),
        Err(code) => base.with_error_code(code.code()),
    }
}
