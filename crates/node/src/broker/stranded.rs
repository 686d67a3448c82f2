//! Transactions an unclean recovery stranded (issue 23 with KIP-966).
//!
//! A leader the Unclean Recovery Manager elected (its partition state says RECOVERING) may lack
//! records its predecessor had, a transaction's COMMIT or ABORT marker among them: the
//! transaction is then open in this log although its coordinator ended it. Guessing its
//! outcome could expose records the coordinator aborted, or hide records it committed, so the
//! leader holds every transaction open at its election *in doubt*
//! (`keel_log::ProducerStates::mark_in_doubt`): the last stable offset stays below it, its
//! producer's batches are refused with `INVALID_TXN_STATE` (nothing may join it), and only its
//! own markers end it. Then it asks every live broker what its coordinator knows
//! (`txn_coordinator::resolve`, over ListTransactions with Keel's `StrandedTransactions`
//! tag), every [`RETRY_MS`] until each is settled:
//!
//! - decided by the coordinator: the leader writes the marker the coordinator wrote, with its
//!   producer and coordinator epochs, as WriteTxnMarkers would — checking, under the log lock,
//!   that the transaction is still the one in doubt (its own marker may have ended it meanwhile,
//!   and the producer begun the next);
//! - live at the coordinator: the mark is lifted, and the coordinator's own markers end it;
//! - unknown (a transactions-v1 producer, whose transactions share one epoch; a transactional
//!   id gone, a decision compacted away): it stays in doubt — listed by `kafka-transactions.sh
//!   find-hanging` and `describe-producers` — until an operator aborts it
//!   (`kafka-transactions.sh abort`).
//!
//! The marks live in the leader's memory: a leader that stops leading drops them, and one
//! elected after it cleanly does not hold them again.

use std::sync::Arc;

use keel_controller::types::BrokerId as CBrokerId;
use keel_wire::kafka_protocol::messages::{
    ApiKey, ListTransactionsRequest, ListTransactionsResponse,
};
use keel_wire::keel_ext::{
    decode_txn_resolutions, encode_stranded_txns, StrandedTxn, TxnOutcome, TxnResolution,
    STRANDED_TXNS_TAG, TXN_RESOLUTIONS_TAG,
};
use tracing::{info, warn};

use super::Broker;
use crate::partition::Partition;
use crate::txn_coordinator::markers::MarkerSpec;

/// How long a leader waits between rounds of asking about in-doubt transactions.
pub const RETRY_MS: i64 = 5_000;

/// The most stranded transactions one request asks about, and the most answers read back.
pub const STRANDED_MAX: usize = 10_000;

impl Broker {
    /// Holds every transaction open in `partition`'s log in doubt: this replica just became
    /// its leader by an unclean recovery in `leader_epoch`.
    pub(super) fn hold_stranded_transactions(&self, partition: &Partition, leader_epoch: i32) {
        let Ok(mut log) = partition.lock_log() else {
            return;
        };
        let marked = log.mark_transactions_in_doubt();
        for (producer_id, epoch, first_offset) in &marked {
            warn!(partition = %partition.tp, leader_epoch, producer_id, producer_epoch = epoch,
                first_offset = first_offset.0,
                "elected by unclean recovery with this transaction open: its marker may be lost; held in doubt until its coordinator settles it");
        }
        if !marked.is_empty() {
            partition.end_stranded_round(0);
        }
    }

    /// Partitions led here with transactions in doubt whose next round is due (claimed: the
    /// caller runs [`Broker::settle_stranded`] for each). Sets the in-doubt gauge.
    pub fn stranded_rounds_due(&self) -> Vec<Arc<Partition>> {
        let now_ms = self.clock.now_ms();
        let mut in_doubt = 0usize;
        let due = self
            .all_partitions()
            .into_iter()
            .filter(|p| p.is_leader())
            .filter(|p| {
                let held = p
                    .lock_log()
                    .map_or(0, |log| log.transactions_in_doubt_count());
                in_doubt += held;
                held > 0
            })
            .filter(|p| p.claim_stranded_round(now_ms))
            .collect();
        self.metrics
            .transactions_in_doubt
            .set(i64::try_from(in_doubt).unwrap_or(i64::MAX));
        due
    }

    /// One round for `partition`: asks every live broker about its in-doubt transactions and
    /// acts on the answers (see the module docs).
    pub async fn settle_stranded(self: &Arc<Self>, partition: Arc<Partition>) {
        let stranded: Vec<StrandedTxn> = match partition.lock_log() {
            Ok(log) => log
                .transactions_in_doubt()
                .into_iter()
                .take(STRANDED_MAX)
                .map(|(producer_id, producer_epoch, _)| StrandedTxn {
                    producer_id,
                    producer_epoch,
                    topic: partition.tp.topic.clone(),
                    partition: partition.tp.partition,
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        if !stranded.is_empty() {
            let answers = self.ask_coordinators(&stranded).await;
            for answer in answers {
                self.act_on(&partition, answer).await;
            }
        }
        let next = self.clock.now_ms().saturating_add(RETRY_MS);
        partition.end_stranded_round(next);
    }

    /// Every live broker's answers (this one's asked directly).
    async fn ask_coordinators(&self, stranded: &[StrandedTxn]) -> Vec<TxnResolution> {
        let mut answers = self.resolve_stranded_transactions(stranded);
        let peers: Vec<i32> = self
            .image()
            .brokers()
            .values()
            .filter(|r| r.is_live() && r.id != CBrokerId(self.node_id()))
            .map(|r| r.id.0)
            .collect();
        let request = ListTransactionsRequest::default()
            .with_state_filters(vec![])
            .with_producer_id_filters(vec![])
            .with_unknown_tagged_field(STRANDED_TXNS_TAG, encode_stranded_txns(stranded));
        for peer in peers {
            let response: anyhow::Result<ListTransactionsResponse> = self
                .call_peer(peer, ApiKey::ListTransactions, (0, 2), &request)
                .await;
            let decoded = response.and_then(|r| {
                if r.error_code != 0 {
                    anyhow::bail!("ListTransactions answered error {}", r.error_code);
                }
                r.unknown_tagged_fields
                    .get(&TXN_RESOLUTIONS_TAG)
                    .map_or(Ok(Vec::new()), |b| {
                        decode_txn_resolutions(b, STRANDED_MAX).map_err(anyhow::Error::from)
                    })
            });
            match decoded {
                Ok(found) => answers.extend(found),
                Err(e) => {
                    warn!(broker = peer, error = %e,
                        "cannot ask about transactions in doubt; asking again later")
                }
            }
        }
        answers
    }

    async fn act_on(&self, partition: &Arc<Partition>, answer: TxnResolution) {
        let still_in_doubt = partition.lock_log().is_ok_and(|log| {
            log.transaction_in_doubt_at(answer.txn.producer_id, answer.txn.producer_epoch)
        });
        if !still_in_doubt || !partition.is_leader() {
            return;
        }
        let commit = match answer.outcome {
            TxnOutcome::Live => {
                if let Ok(mut log) = partition.lock_log() {
                    log.clear_transaction_in_doubt(answer.txn.producer_id);
                }
                info!(partition = %partition.tp, producer_id = answer.txn.producer_id,
                    producer_epoch = answer.txn.producer_epoch,
                    "in-doubt transaction is still open at its coordinator: its markers will end it");
                return;
            }
            TxnOutcome::Committed => true,
            TxnOutcome::Aborted => false,
        };
        let spec = MarkerSpec {
            producer_id: answer.txn.producer_id,
            producer_epoch: answer.marker_epoch,
            commit,
            coordinator_epoch: answer.coordinator_epoch,
            only_in_doubt_at: Some(answer.txn.producer_epoch),
        };
        let tp = (partition.tp.topic.clone(), partition.tp.partition);
        let results = self
            .write_markers_locally(spec, std::slice::from_ref(&tp))
            .await;
        let code = results.first().map_or(-1, |(_, code)| *code);
        if code == 0 {
            info!(partition = %partition.tp, producer_id = answer.txn.producer_id,
                producer_epoch = answer.txn.producer_epoch, committed = commit,
                "wrote the marker the coordinator decided for an in-doubt transaction");
        } else {
            warn!(partition = %partition.tp, producer_id = answer.txn.producer_id, error_code = code,
                "cannot write the marker of an in-doubt transaction; asking again later");
        }
    }
}
