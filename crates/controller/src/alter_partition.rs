//! AlterPartition: request types and validation in Kafka's order with Kafka's error codes
//! (`ReplicationControlManager.alterPartition` / `validateAlterPartitionData`), including
//! KIP-903's per-member broker epochs — the KAFKA-14139 fix.
//!
//! Request level: the sender's broker epoch must be its registered one (`STALE_BROKER_EPOCH`).
//! Per partition, the first failing check wins:
//!
//! | # | check | error |
//! |---|---|---|
//! | 0 | topic id unknown | `UNKNOWN_TOPIC_ID` |
//! | 1 | partition unknown | `UNKNOWN_TOPIC_OR_PARTITION` |
//! | 2 | request leader epoch > controller's | `NOT_CONTROLLER` |
//! | 3 | request partition epoch > controller's | `NOT_CONTROLLER` |
//! | 4 | request leader epoch < controller's | `FENCED_LEADER_EPOCH` |
//! | 5 | sender is not the leader | `INVALID_REQUEST` |
//! | 6 | request partition epoch < controller's | `INVALID_UPDATE_VERSION` |
//! | 7 | ISR has a non-replica, a negative id or a duplicate | `INVALID_REQUEST` |
//! | 8 | ISR lacks the leader | `INVALID_REQUEST` |
//! | 9 | RECOVERING asked with more than one ISR member | `INVALID_REQUEST` |
//! | 10 | RECOVERED → RECOVERING asked | `INVALID_REQUEST` |
//! | 11 | an ISR member unregistered, fenced, in controlled shutdown, or with a broker epoch in the request that is not its registered one | `INELIGIBLE_REPLICA` |

use std::collections::{BTreeMap, BTreeSet};

use crate::errors::ErrorCode;
use crate::image::{BrokerRegistration, BrokerState};
use crate::partition::PartitionState;
use crate::types::{
    BrokerEpoch, BrokerId, LeaderEpoch, LeaderRecoveryState, PartitionEpoch, TopicId,
    TopicPartition,
};

/// One proposed ISR member and, since KIP-903, the broker epoch the leader saw it fetch with
/// (`None` = not checked, as in AlterPartition v2 where the wire carries -1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IsrMember {
    /// The broker.
    pub broker: BrokerId,
    /// Its broker epoch as seen by the leader.
    pub broker_epoch: Option<BrokerEpoch>,
}

/// One partition of an AlterPartition request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionItem {
    /// The topic.
    pub topic: TopicId,
    /// The partition index.
    pub partition: u32,
    /// The leader epoch the sender leads in.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the sender's ISR is based on.
    pub partition_epoch: PartitionEpoch,
    /// The proposed ISR.
    pub new_isr: Vec<IsrMember>,
    /// The leader recovery state the sender reports.
    pub leader_recovery_state: LeaderRecoveryState,
}

/// An AlterPartition request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionRequest {
    /// The sender.
    pub broker: BrokerId,
    /// The sender's broker epoch.
    pub broker_epoch: BrokerEpoch,
    /// The partitions.
    pub partitions: Vec<AlterPartitionItem>,
}

/// The partition fields answered on success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionView {
    /// The leader.
    pub leader: Option<BrokerId>,
    /// The ISR.
    pub isr: BTreeSet<BrokerId>,
    /// The leader epoch.
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch.
    pub partition_epoch: PartitionEpoch,
    /// The leader recovery state.
    pub leader_recovery_state: LeaderRecoveryState,
}

impl From<&PartitionState> for PartitionView {
    fn from(p: &PartitionState) -> Self {
        PartitionView {
            leader: p.leader,
            isr: p.isr.clone(),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            leader_recovery_state: p.leader_recovery_state,
        }
    }
}

/// The answer for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlterPartitionItemResponse {
    /// The partition.
    pub partition: TopicPartition,
    /// The state after the change (as it will be once the records are replayed), or the error.
    pub result: Result<PartitionView, ErrorCode>,
}

/// Checks the sender's broker epoch (request level).
pub fn validate_sender(
    brokers: &BTreeMap<BrokerId, BrokerRegistration>,
    sender: BrokerId,
    sender_epoch: BrokerEpoch,
) -> Result<(), ErrorCode> {
    match brokers.get(&sender) {
        Some(b) if b.epoch == sender_epoch => Ok(()),
        _ => Err(ErrorCode::StaleBrokerEpoch),
    }
}

/// Checks one partition (checks 1–11; the topic check 0 is the caller's) and returns the
/// proposed ISR as a set.
pub fn validate_item(
    brokers: &BTreeMap<BrokerId, BrokerRegistration>,
    sender: BrokerId,
    item: &AlterPartitionItem,
    partition: Option<&PartitionState>,
) -> Result<BTreeSet<BrokerId>, ErrorCode> {
    let p = partition.ok_or(ErrorCode::UnknownTopicOrPartition)?;
    if item.leader_epoch > p.leader_epoch || item.partition_epoch > p.partition_epoch {
        return Err(ErrorCode::NotController);
    }
    if item.leader_epoch < p.leader_epoch {
        return Err(ErrorCode::FencedLeaderEpoch);
    }
    if p.leader != Some(sender) {
        return Err(ErrorCode::InvalidRequest);
    }
    if item.partition_epoch < p.partition_epoch {
        return Err(ErrorCode::InvalidUpdateVersion);
    }
    let mut isr = BTreeSet::new();
    for member in &item.new_isr {
        let ok = member.broker.0 >= 0 && p.is_replica(member.broker) && isr.insert(member.broker);
        if !ok {
            return Err(ErrorCode::InvalidRequest);
        }
    }
    if !isr.contains(&sender) {
        return Err(ErrorCode::InvalidRequest);
    }
    let asks_recovering = item.leader_recovery_state == LeaderRecoveryState::Recovering;
    if asks_recovering
        && (isr.len() > 1 || p.leader_recovery_state == LeaderRecoveryState::Recovered)
    {
        return Err(ErrorCode::InvalidRequest);
    }
    for member in &item.new_isr {
        let eligible = brokers.get(&member.broker).is_some_and(|b| {
            b.state == BrokerState::Unfenced && member.broker_epoch.is_none_or(|e| e == b.epoch)
        });
        if !eligible {
            return Err(ErrorCode::IneligibleReplica);
        }
    }
    Ok(isr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{IncarnationId, MetadataOffset};

    fn broker(id: i32, epoch: i64, state: BrokerState) -> (BrokerId, BrokerRegistration) {
        (
            BrokerId(id),
            BrokerRegistration {
                id: BrokerId(id),
                epoch: BrokerEpoch(epoch),
                incarnation: IncarnationId(uuid::Uuid::from_u128(id as u128)),
                listeners: Vec::new(),
                rack: None,
                log_dirs: Vec::new(),
                state,
                registered_at: MetadataOffset(epoch),
            },
        )
    }

    fn item(
        isr: &[(i32, Option<i64>)],
        le: i32,
        pe: i32,
        lrs: LeaderRecoveryState,
    ) -> AlterPartitionItem {
        AlterPartitionItem {
            topic: TopicId(uuid::Uuid::from_u128(1)),
            partition: 0,
            leader_epoch: LeaderEpoch(le),
            partition_epoch: PartitionEpoch(pe),
            new_isr: isr
                .iter()
                .map(|(b, e)| IsrMember {
                    broker: BrokerId(*b),
                    broker_epoch: e.map(BrokerEpoch),
                })
                .collect(),
            leader_recovery_state: lrs,
        }
    }

    #[test]
    #[rustfmt::skip]
    fn validation_order_and_error_codes() {
        // Kafka ReplicationControlManager.validateAlterPartitionData, checks 1-11 in order
        // (reference §6); KIP-903 per-member broker epochs.
        use LeaderRecoveryState::{Recovered as OK, Recovering as RC};
        let brokers: BTreeMap<BrokerId, BrokerRegistration> = [
            broker(1, 101, BrokerState::Unfenced),
            broker(2, 102, BrokerState::Unfenced),
            broker(3, 103, BrokerState::Fenced),
            broker(4, 104, BrokerState::ControlledShutdown),
        ].into_iter().collect();
        let mut p = PartitionState::new(
            vec![BrokerId(1), BrokerId(2), BrokerId(3), BrokerId(4), BrokerId(5)],
            vec![None; 5],
            [BrokerId(1)].into_iter().collect(),
            Some(BrokerId(1)),
        );
        p.leader_epoch = LeaderEpoch(5);
        p.partition_epoch = PartitionEpoch(9);
        type Row<'a> = (&'a str, Option<&'a PartitionState>, i32, AlterPartitionItem, Result<(), ErrorCode>);
        let rows: Vec<Row> = vec![
            ("1 unknown partition", None, 1, item(&[(1, None)], 5, 9, OK), Err(ErrorCode::UnknownTopicOrPartition)),
            ("2 newer leader epoch", Some(&p), 1, item(&[(1, None)], 6, 9, OK), Err(ErrorCode::NotController)),
            ("3 newer partition epoch", Some(&p), 1, item(&[(1, None)], 5, 10, OK), Err(ErrorCode::NotController)),
            ("2 before 4: newer leader epoch wins over everything", Some(&p), 2, item(&[(9, None)], 6, 1, OK), Err(ErrorCode::NotController)),
            ("4 older leader epoch", Some(&p), 1, item(&[(1, None)], 4, 9, OK), Err(ErrorCode::FencedLeaderEpoch)),
            ("4 before 5: older leader epoch from a non-leader", Some(&p), 2, item(&[(1, None)], 4, 9, OK), Err(ErrorCode::FencedLeaderEpoch)),
            ("5 sender not leader", Some(&p), 2, item(&[(1, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("6 older partition epoch", Some(&p), 1, item(&[(1, None)], 5, 8, OK), Err(ErrorCode::InvalidUpdateVersion)),
            ("7 non-replica", Some(&p), 1, item(&[(1, None), (7, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("7 negative id", Some(&p), 1, item(&[(1, None), (-1, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("7 duplicate", Some(&p), 1, item(&[(1, None), (2, None), (2, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("8 leader missing", Some(&p), 1, item(&[(2, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("9 RECOVERING with two members", Some(&p), 1, item(&[(1, None), (2, None)], 5, 9, RC), Err(ErrorCode::InvalidRequest)),
            ("10 RECOVERED -> RECOVERING", Some(&p), 1, item(&[(1, None)], 5, 9, RC), Err(ErrorCode::InvalidRequest)),
            ("11 fenced member", Some(&p), 1, item(&[(1, None), (3, None)], 5, 9, OK), Err(ErrorCode::IneligibleReplica)),
            ("11 shutting-down member", Some(&p), 1, item(&[(1, None), (4, None)], 5, 9, OK), Err(ErrorCode::IneligibleReplica)),
            ("11 unregistered member", Some(&p), 1, item(&[(1, None), (5, None)], 5, 9, OK), Err(ErrorCode::IneligibleReplica)),
            ("11 stale member epoch (KAFKA-14139)", Some(&p), 1, item(&[(1, Some(101)), (2, Some(99))], 5, 9, OK), Err(ErrorCode::IneligibleReplica)),
            ("7 before 11: malformed wins over ineligible", Some(&p), 1, item(&[(1, None), (3, None), (3, None)], 5, 9, OK), Err(ErrorCode::InvalidRequest)),
            ("valid with epochs", Some(&p), 1, item(&[(1, Some(101)), (2, Some(102))], 5, 9, OK), Ok(())),
            ("valid without epochs (v2)", Some(&p), 1, item(&[(1, None), (2, None)], 5, 9, OK), Ok(())),
        ];
        for (cite, partition, sender, item, expected) in rows {
            let got = validate_item(&brokers, BrokerId(sender), &item, partition).map(|_| ());
            assert_eq!(got, expected, "{cite}");
        }
        assert_eq!(validate_sender(&brokers, BrokerId(1), BrokerEpoch(100)), Err(ErrorCode::StaleBrokerEpoch));
        assert_eq!(validate_sender(&brokers, BrokerId(9), BrokerEpoch(100)), Err(ErrorCode::StaleBrokerEpoch));
        assert_eq!(validate_sender(&brokers, BrokerId(1), BrokerEpoch(101)), Ok(()));
    }
}
