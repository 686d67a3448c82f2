//! What a coordinator knows of a transaction stranded by an unclean recovery (issue 23 with
//! KIP-966).
//!
//! A partition leader elected by the Unclean Recovery Manager may lack records its predecessor
//! had — among them a COMMIT or ABORT marker the coordinator saw written. Such a transaction is
//! open in the new leader's log although its coordinator has ended it. The leader holds it *in
//! doubt* (`keel_log::ProducerStates::mark_in_doubt`) and asks every broker what its
//! coordinator knows (ListTransactions with Keel's `StrandedTransactions` tag,
//! `keel_wire::keel_ext`). Only a fact the coordinator can prove is an answer:
//!
//! - **Decided**: a committed PrepareCommit or PrepareAbort record of a transactions-v2
//!   producer at the epoch just above the stranded records' epoch, naming the partition. With
//!   v2 every transaction end bumps the epoch, so that record is this transaction's, and
//!   Prepare* is the coordinator's point of no return: its outcome is final. The answer carries
//!   the epoch its markers carry.
//! - **Live**: the producer's transaction at that epoch is still Ongoing here with the
//!   partition in it; the coordinator's own markers will end it.
//!
//! Anything else (a transactions-v1 producer, whose transactions share one epoch; a
//! transactional id long gone; a Prepare record compacted away) has no answer: the transaction
//! stays in doubt, visible to `kafka-transactions.sh find-hanging`, until an operator aborts
//! it. Records above the high watermark are ignored: an uncommitted Prepare may still vanish
//! with this coordinator's leadership, and another coordinator decide otherwise.

use std::collections::BTreeMap;

use keel_log::plain_batch::decode_records;
use keel_log::Offset;
use keel_wire::keel_ext::{StrandedTxn, TxnOutcome, TxnResolution};
use tracing::warn;

use super::records;
use super::state::{TxnMetadata, TxnState, TxnValue};
use super::TRANSACTION_STATE_TOPIC;
use crate::broker::Broker;
use crate::partition::Partition;

/// Whether `value` is the decision that ended `txn`: a v2 Prepare at the next epoch naming
/// the partition.
fn decides(value: &TxnValue, txn: &StrandedTxn) -> Option<TxnOutcome> {
    let outcome = match value.state {
        TxnState::PrepareCommit => TxnOutcome::Committed,
        TxnState::PrepareAbort => TxnOutcome::Aborted,
        _ => return None,
    };
    let names_partition = value
        .partitions
        .iter()
        .any(|(topic, parts)| *topic == txn.topic && parts.contains(&txn.partition));
    let next_epoch = i32::from(value.producer_epoch) == i32::from(txn.producer_epoch) + 1;
    (value.client_transaction_version >= 2
        && value.producer_id == txn.producer_id
        && next_epoch
        && names_partition)
        .then_some(outcome)
}

/// Whether `m` is `txn` still open at the coordinator.
fn is_live(m: &TxnMetadata, txn: &StrandedTxn) -> bool {
    m.client_transaction_version >= 2
        && m.state == TxnState::Ongoing
        && m.producer_id == txn.producer_id
        && m.producer_epoch == txn.producer_epoch
        && m.partitions.contains(&(txn.topic.clone(), txn.partition))
}

/// The answers one `__transaction_state` partition gives: `history` is every committed value
/// in log order, `current` the loaded states, `coordinator_epoch` the partition's leader epoch.
pub(crate) fn resolve_in<'a>(
    history: impl IntoIterator<Item = &'a TxnValue>,
    current: impl IntoIterator<Item = &'a TxnMetadata> + Clone,
    coordinator_epoch: i32,
    stranded: &[StrandedTxn],
) -> Vec<TxnResolution> {
    let mut decided: BTreeMap<usize, TxnResolution> = BTreeMap::new();
    for value in history {
        for (i, txn) in stranded.iter().enumerate() {
            if decided.contains_key(&i) {
                continue;
            }
            if let Some(outcome) = decides(value, txn) {
                decided.insert(
                    i,
                    TxnResolution {
                        txn: txn.clone(),
                        outcome,
                        marker_epoch: value.producer_epoch,
                        coordinator_epoch,
                    },
                );
            }
        }
    }
    for (i, txn) in stranded.iter().enumerate() {
        if decided.contains_key(&i) {
            continue;
        }
        if current.clone().into_iter().any(|m| is_live(m, txn)) {
            decided.insert(
                i,
                TxnResolution {
                    txn: txn.clone(),
                    outcome: TxnOutcome::Live,
                    marker_epoch: -1,
                    coordinator_epoch,
                },
            );
        }
    }
    decided.into_values().collect()
}

/// Every committed transaction state in `partition`'s log (below its high watermark), in order.
fn committed_history(partition: &Partition) -> anyhow::Result<Vec<TxnValue>> {
    let high_watermark = partition.high_watermark();
    let mut values = Vec::new();
    let log = partition.lock_log().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut at = log.log_start_offset();
    while at < high_watermark {
        let data = log.read(at, 1 << 20, Some(high_watermark), true)?;
        let Some(last) = data.last_offset else {
            break;
        };
        for batch in keel_log::batch::BatchIter::new(&data.records) {
            let batch = batch?;
            let Some(decoded) = decode_records(batch.bytes) else {
                continue;
            };
            for record in decoded {
                if record.offset >= high_watermark.0 || record.value_is_null || record.key.is_none()
                {
                    continue;
                }
                if let Ok(value) = records::decode_value(&record.value) {
                    values.push(value);
                }
            }
        }
        at = Offset(last.0 + 1);
    }
    Ok(values)
}

impl Broker {
    /// What this broker's coordinator knows of `stranded` (see the module docs): one answer
    /// per transaction it can prove something about, from every `__transaction_state`
    /// partition it leads.
    pub fn resolve_stranded_transactions(&self, stranded: &[StrandedTxn]) -> Vec<TxnResolution> {
        let Some(topic) = self.topic(TRANSACTION_STATE_TOPIC) else {
            return Vec::new();
        };
        let mut answers = Vec::new();
        for p in &topic.partitions {
            if p.leader != Some(self.node_id()) {
                continue;
            }
            let Some(partition) = self
                .partition(TRANSACTION_STATE_TOPIC, p.index)
                .filter(|p| p.is_leader())
            else {
                continue;
            };
            let history = match committed_history(&partition) {
                Ok(h) => h,
                Err(e) => {
                    warn!(partition = p.index, error = %e,
                        "cannot read {TRANSACTION_STATE_TOPIC} to resolve stranded transactions");
                    continue;
                }
            };
            let found = self.with_txn_partition(p.index, |txns, _| {
                resolve_in(
                    &history,
                    txns.values(),
                    partition.leader_epoch().0,
                    stranded,
                )
            });
            if let Ok((_, found)) = found {
                answers.extend(found);
            }
        }
        answers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(
        state: TxnState,
        pid: i64,
        epoch: i16,
        version: i16,
        parts: &[(&str, i32)],
    ) -> TxnValue {
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (t, p) in parts {
            by_topic.entry((*t).to_string()).or_default().push(*p);
        }
        TxnValue {
            producer_id: pid,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: epoch,
            timeout_ms: 60_000,
            state,
            partitions: by_topic.into_iter().collect(),
            last_update_ms: 0,
            start_ms: 0,
            client_transaction_version: version,
        }
    }

    fn stranded(pid: i64, epoch: i16, topic: &str, partition: i32) -> StrandedTxn {
        StrandedTxn {
            producer_id: pid,
            producer_epoch: epoch,
            topic: topic.into(),
            partition,
        }
    }

    // A v2 Prepare at the next epoch naming the partition decides the stranded transaction,
    // with the epoch its markers carry; the same record at another epoch, for another
    // partition or producer, or from a v1 producer (whose transactions share an epoch) proves
    // nothing.
    #[test]
    fn only_a_v2_prepare_at_the_next_epoch_naming_the_partition_decides() {
        let history = [
            value(TxnState::Ongoing, 7, 3, 2, &[("t", 0), ("t", 1)]),
            value(TxnState::PrepareCommit, 7, 4, 2, &[("t", 0), ("t", 1)]),
            value(TxnState::CompleteCommit, 7, 4, 2, &[]),
            value(TxnState::PrepareAbort, 7, 5, 2, &[("t", 1)]),
            value(TxnState::PrepareAbort, 9, 2, 1, &[("t", 0)]),
        ];
        let asked = [
            stranded(7, 3, "t", 0), // committed at 4
            stranded(7, 4, "t", 1), // aborted at 5
            stranded(7, 4, "t", 0), // the abort at 5 did not name t-0
            stranded(7, 2, "t", 0), // no Prepare at 3
            stranded(9, 1, "t", 0), // v1: no answer
            stranded(8, 3, "t", 0), // another producer
        ];
        let answers = resolve_in(&history, std::iter::empty(), 11, &asked);
        assert_eq!(
            answers,
            vec![
                TxnResolution {
                    txn: asked[0].clone(),
                    outcome: TxnOutcome::Committed,
                    marker_epoch: 4,
                    coordinator_epoch: 11
                },
                TxnResolution {
                    txn: asked[1].clone(),
                    outcome: TxnOutcome::Aborted,
                    marker_epoch: 5,
                    coordinator_epoch: 11
                },
            ]
        );
    }

    // A v2 transaction still Ongoing at the stranded epoch with the partition in it is live;
    // at another epoch, or without the partition, it is not.
    #[test]
    fn an_ongoing_v2_transaction_at_that_epoch_with_the_partition_is_live() {
        let ongoing = value(TxnState::Ongoing, 7, 3, 2, &[("t", 0)]);
        let current = [TxnMetadata::from_value("app", &ongoing)];
        let asked = [
            stranded(7, 3, "t", 0),
            stranded(7, 2, "t", 0),
            stranded(7, 3, "t", 1),
        ];
        let answers = resolve_in(std::iter::empty(), current.iter(), 2, &asked);
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0].txn, asked[0]);
        assert_eq!(answers[0].outcome, TxnOutcome::Live);
        let v1 = [TxnMetadata::from_value(
            "app",
            &value(TxnState::Ongoing, 7, 3, 1, &[("t", 0)]),
        )];
        assert!(resolve_in(std::iter::empty(), v1.iter(), 2, &asked[..1]).is_empty());
    }

    // The decision wins over a stale Ongoing state (a record in the log is the later fact).
    #[test]
    fn a_decision_in_the_log_wins_over_the_loaded_state() {
        let history = [value(TxnState::PrepareAbort, 7, 4, 2, &[("t", 0)])];
        let current = [TxnMetadata::from_value(
            "app",
            &value(TxnState::Ongoing, 7, 3, 2, &[("t", 0)]),
        )];
        let answers = resolve_in(&history, current.iter(), 1, &[stranded(7, 3, "t", 0)]);
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].outcome, TxnOutcome::Aborted);
    }
}
