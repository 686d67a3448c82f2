//! One transactional id's state and its transitions, as Kafka's `TransactionMetadata` and
//! `TransactionCoordinator` decide them. Pure: every transition is *prepared* (checked, and the
//! next [`TxnValue`] computed, with the id marked pending so nothing else starts meanwhile),
//! written to `__transaction_state` by the caller, then *completed* (or *cancelled* if the write
//! failed).
//!
//! States and who moves between them:
//!
//! ```text
//! Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                        │    └──EndTxn(abort) / timeout──▶ PrepareAbort ──markers──▶ CompleteAbort
//!   └──InitProducerId────────┘ (an Ongoing one is aborted first: PrepareEpochFence)
//! ```
//!
//! Transactions v2 (KIP-890 part 2, `client_transaction_version >= 2`): every EndTxn bumps the
//! producer epoch (markers carry the bumped epoch, which fences any late write of the ended
//! transaction), and a producer id whose epoch is exhausted rotates to a new id at the end of a
//! transaction.

use std::collections::BTreeSet;

use keel_wire::ResponseError;

/// Kafka's `TransactionState`, with its record ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's name (DescribeTransactions, ListTransactions filters).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether the transactional id may expire in this state (`transactional.id.expiration.ms`).
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

/// A transactional id's state as written to `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnValue {
    pub producer_id: i64,
    /// The producer id before the last rotation (-1: none).
    pub previous_producer_id: i64,
    /// The producer id the transaction rotates to when it completes (v2; -1: none).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction, by topic.
    pub partitions: Vec<(String, Vec<i32>)>,
    pub last_update_ms: i64,
    /// When the transaction started (-1: none).
    pub start_ms: i64,
    /// The transaction version the client used (0, 1: v1; 2: v2).
    pub client_transaction_version: i16,
}

/// Kafka's limit: an epoch at `i16::MAX - 1` cannot be bumped once more for a fence.
pub fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// What a partition is called here: topic and index.
pub type TopicPartition = (String, i32);

/// One transactional id as the coordinator holds it.
#[derive(Debug, Clone)]
pub struct TxnMetadata {
    pub id: String,
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump, for a retried InitProducerId (in memory only, as Kafka).
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub client_transaction_version: i16,
    /// The state a transition in flight (being written) will reach.
    pub pending: Option<TxnState>,
    /// A fence write failed: the next fence reuses the bumped epoch instead of bumping again.
    pub failed_epoch_fence: bool,
}

/// A prepared transition: the value to write, and the previous epoch it keeps in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    pub value: TxnValue,
    pub last_producer_epoch: i16,
    /// Whether this is the abort that fences the current producer (InitProducerId while a
    /// transaction is open, or a timeout): if its write fails, the bumped epoch stays.
    pub fence: bool,
}

/// What InitProducerId does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitStep {
    /// Write this, then answer with its producer id and epoch.
    Write(Transit),
    /// A transaction is open: write this abort (fencing its producer), finish it, and answer
    /// `CONCURRENT_TRANSACTIONS` so the client retries.
    AbortFirst(Transit),
}

/// What EndTxn does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndStep {
    /// Already ended this way (a retry): answer with the current producer id and epoch.
    Done {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Write this Prepare state, answer, then write the markers and the Complete state.
    Write(Transit),
}

fn group(partitions: &BTreeSet<TopicPartition>) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match out.last_mut() {
            Some((t, ps)) if t == topic => ps.push(*p),
            _ => out.push((topic.clone(), vec![*p])),
        }
    }
    out
}

fn ungroup(partitions: &[(String, Vec<i32>)]) -> BTreeSet<TopicPartition> {
    partitions
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        .collect()
}

/// How a transition changes the metadata: what [`TxnMetadata::prepare`] takes.
struct Change<'a> {
    to: TxnState,
    producer_id: i64,
    next_producer_id: i64,
    epoch: i16,
    last_epoch: i16,
    timeout_ms: i32,
    partitions: &'a BTreeSet<TopicPartition>,
    start_ms: i64,
    client_transaction_version: i16,
}

impl TxnMetadata {
    /// A transactional id seen for the first time: a new producer id, no epoch yet.
    pub fn new(id: &str, producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            id: id.to_string(),
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: -1,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            client_transaction_version: 0,
            pending: None,
            failed_epoch_fence: false,
        }
    }

    /// The state read back from `__transaction_state`.
    pub fn from_value(id: &str, value: &TxnValue) -> TxnMetadata {
        TxnMetadata {
            id: id.to_string(),
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: -1,
            timeout_ms: value.timeout_ms,
            state: value.state,
            partitions: ungroup(&value.partitions),
            start_ms: value.start_ms,
            last_update_ms: value.last_update_ms,
            client_transaction_version: value.client_transaction_version,
            pending: None,
            failed_epoch_fence: false,
        }
    }

    /// The current state as a value.
    pub fn to_value(&self) -> TxnValue {
        TxnValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: group(&self.partitions),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }

    fn prepare(&mut self, change: Change<'_>, now_ms: i64, fence: bool) -> Transit {
        assert!(self.pending.is_none(), "a transition is already pending");
        assert!(
            change.to.valid_previous().contains(&self.state),
            "{} cannot move from {:?} to {:?}",
            self.id,
            self.state,
            change.to
        );
        self.pending = Some(change.to);
        Transit {
            value: TxnValue {
                producer_id: change.producer_id,
                previous_producer_id: self.producer_id,
                next_producer_id: change.next_producer_id,
                producer_epoch: change.epoch,
                timeout_ms: change.timeout_ms,
                state: change.to,
                partitions: group(change.partitions),
                last_update_ms: now_ms,
                start_ms: change.start_ms,
                client_transaction_version: change.client_transaction_version,
            },
            last_producer_epoch: change.last_epoch,
            fence,
        }
    }

    /// The write of `transit` succeeded: apply it (Kafka's `completeTransitionTo`).
    pub fn complete(&mut self, transit: &Transit) {
        let v = &transit.value;
        debug_assert_eq!(
            self.pending,
            Some(v.state),
            "completing the pending transition"
        );
        let tv2 = v.client_transaction_version >= 2;
        match v.state {
            TxnState::Empty => {
                self.timeout_ms = v.timeout_ms;
                self.producer_epoch = v.producer_epoch;
                self.last_producer_epoch = transit.last_producer_epoch;
                self.producer_id = v.producer_id;
                self.previous_producer_id = v.previous_producer_id;
                self.partitions.clear();
                self.start_ms = -1;
            }
            TxnState::Ongoing => {
                self.start_ms = v.start_ms;
                self.partitions.extend(ungroup(&v.partitions));
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                if tv2 || transit.fence {
                    self.producer_epoch = v.producer_epoch;
                    self.last_producer_epoch = transit.last_producer_epoch;
                    self.next_producer_id = v.next_producer_id;
                }
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                self.start_ms = v.start_ms;
                self.partitions.clear();
                if tv2 {
                    self.producer_epoch = v.producer_epoch;
                    self.last_producer_epoch = transit.last_producer_epoch;
                    self.previous_producer_id = v.previous_producer_id;
                    self.producer_id = v.producer_id;
                    self.next_producer_id = v.next_producer_id;
                }
            }
            TxnState::Dead | TxnState::PrepareEpochFence => {}
        }
        if transit.fence {
            self.failed_epoch_fence = false;
        }
        self.client_transaction_version = v.client_transaction_version;
        self.last_update_ms = v.last_update_ms;
        self.pending = None;
        self.state = v.state;
    }

    /// The write of `transit` failed: nothing changed, except that a fence keeps its bumped
    /// epoch (the old producer stays fenced here; the next fence does not bump again).
    pub fn cancel(&mut self, transit: &Transit) {
        self.pending = None;
        if transit.fence {
            self.producer_epoch = transit.value.producer_epoch;
            self.last_producer_epoch = -1;
            self.failed_epoch_fence = true;
        }
    }

    /// InitProducerId for this transactional id (Kafka's `prepareInitProducerIdTransit`).
    /// `expected`: the producer id and epoch a producer that already had one sends (KIP-360);
    /// `allocate`: a new producer id, when the epoch is exhausted.
    pub fn init_producer_id(
        &mut self,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        now_ms: i64,
        allocate: &mut dyn FnMut() -> Result<i64, ResponseError>,
    ) -> Result<InitStep, ResponseError> {
        if self.pending.is_some() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let valid = expected.is_none_or(|(pid, epoch)| {
            self.producer_epoch == -1
                || pid == self.producer_id
                || (pid == self.previous_producer_id && epoch_exhausted(epoch))
        });
        if !valid {
            return Err(ResponseError::ProducerFenced);
        }
        let empty = BTreeSet::new();
        match self.state {
            TxnState::PrepareAbort | TxnState::PrepareCommit => {
                Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::CompleteAbort | TxnState::CompleteCommit | TxnState::Empty => {
                let (producer_id, epoch, last_epoch) = if epoch_exhausted(self.producer_epoch)
                    && expected.is_none_or(|(_, e)| e == self.producer_epoch)
                {
                    let last = if expected.is_some() {
                        self.producer_epoch
                    } else {
                        -1
                    };
                    (allocate()?, 0, last)
                } else {
                    let bumped = self.producer_epoch + 1;
                    let (epoch, last) = match expected {
                        None => (bumped, -1),
                        Some((_, e)) if self.producer_epoch == -1 || e == self.producer_epoch => {
                            (bumped, self.producer_epoch)
                        }
                        // A retry of a bump whose answer was lost.
                        Some((_, e)) if e == self.last_producer_epoch => {
                            (self.producer_epoch, self.last_producer_epoch)
                        }
                        Some(_) => return Err(ResponseError::ProducerFenced),
                    };
                    (self.producer_id, epoch, last)
                };
                let change = Change {
                    to: TxnState::Empty,
                    producer_id,
                    next_producer_id: -1,
                    epoch,
                    last_epoch,
                    timeout_ms,
                    partitions: &empty,
                    start_ms: -1,
                    client_transaction_version: 0,
                };
                Ok(InitStep::Write(self.prepare(change, now_ms, false)))
            }
            TxnState::Ongoing => Ok(InitStep::AbortFirst(self.prepare_fence_abort(now_ms))),
            TxnState::Dead | TxnState::PrepareEpochFence => {
                Err(ResponseError::ConcurrentTransactions)
            }
        }
    }

    /// The abort that fences the current producer: its epoch bumped (once: a fence whose write
    /// failed already bumped it), then PrepareAbort (Kafka's PrepareEpochFence followed by
    /// the abort).
    pub fn prepare_fence_abort(&mut self, now_ms: i64) -> Transit {
        let epoch = if self.failed_epoch_fence {
            self.producer_epoch
        } else {
            self.producer_epoch.saturating_add(1)
        };
        let partitions = self.partitions.clone();
        let change = Change {
            to: TxnState::PrepareAbort,
            producer_id: self.producer_id,
            next_producer_id: -1,
            epoch,
            last_epoch: -1,
            timeout_ms: self.timeout_ms,
            partitions: &partitions,
            start_ms: self.start_ms,
            client_transaction_version: self.client_transaction_version,
        };
        self.prepare(change, now_ms, true)
    }

    fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), ResponseError> {
        if self.producer_id != producer_id {
            Err(ResponseError::InvalidProducerIdMapping)
        } else if self.producer_epoch != epoch {
            Err(ResponseError::ProducerFenced)
        } else {
            Ok(())
        }
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn's partition of `__consumer_offsets`). `None`:
    /// already in the transaction, nothing to write.
    pub fn add_partitions(
        &mut self,
        producer_id: i64,
        epoch: i16,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<Option<Transit>, ResponseError> {
        self.check_producer(producer_id, epoch)?;
        if self.pending.is_some()
            || matches!(self.state, TxnState::PrepareCommit | TxnState::PrepareAbort)
        {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if self.state == TxnState::Ongoing && added.is_subset(&self.partitions) {
            return Ok(None);
        }
        let start_ms = match self.state {
            TxnState::Empty | TxnState::CompleteAbort | TxnState::CompleteCommit => now_ms,
            _ => self.start_ms,
        };
        let partitions: BTreeSet<TopicPartition> = self.partitions.union(added).cloned().collect();
        let change = Change {
            to: TxnState::Ongoing,
            producer_id,
            next_producer_id: -1,
            epoch,
            last_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            partitions: &partitions,
            start_ms,
            client_transaction_version: 0,
        };
        Ok(Some(self.prepare(change, now_ms, false)))
    }

    /// AddPartitionsToTxn's verification (v4+ `VerifyOnly`, KIP-890 part 1): per partition,
    /// `None` if it is in the ongoing transaction, else `TRANSACTION_ABORTABLE`.
    pub fn verify(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_producer(producer_id, epoch)?;
        if matches!(self.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        Ok(partitions
            .iter()
            .map(|tp| {
                (self.state != TxnState::Ongoing || !self.partitions.contains(tp))
                    .then_some(ResponseError::TransactionAbortable)
            })
            .collect())
    }

    /// EndTxn from the client (Kafka's `endTransaction` with `isFromClient`).
    /// `client_transaction_version`: 2 for EndTxn v5+ (transactions v2), else 1.
    pub fn end_txn(
        &mut self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        client_transaction_version: i16,
        now_ms: i64,
        allocate: &mut dyn FnMut() -> Result<i64, ResponseError>,
    ) -> Result<EndStep, ResponseError> {
        let tv2_now = self.transaction_v2();
        let bumped_from = |e: i16| i32::from(self.producer_epoch) == i32::from(e) + 1;
        let retry_on_overflow = tv2_now
            && self.previous_producer_id == producer_id
            && epoch == i16::MAX - 1
            && self.producer_epoch == 0;
        let retry_on_bump = tv2_now && bumped_from(epoch);
        let valid_epoch = if tv2_now {
            match self.state {
                TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
                TxnState::CompleteCommit | TxnState::CompleteAbort => {
                    retry_on_bump || retry_on_overflow
                }
                _ => epoch == self.producer_epoch,
            }
        } else {
            epoch == self.producer_epoch
        };
        if self.producer_id != producer_id && !retry_on_overflow {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if !valid_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        if self.pending.is_some() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let done = EndStep::Done {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
        };
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                let to = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                let tv2 = client_transaction_version >= 2;
                let next_producer_id = if tv2 && epoch_exhausted(self.producer_epoch) {
                    allocate()?
                } else {
                    -1
                };
                let (epoch, last_epoch) = if tv2 {
                    (self.producer_epoch + 1, self.producer_epoch)
                } else {
                    (self.producer_epoch, self.last_producer_epoch)
                };
                let partitions = self.partitions.clone();
                let change = Change {
                    to,
                    producer_id: self.producer_id,
                    next_producer_id,
                    epoch,
                    last_epoch,
                    timeout_ms: self.timeout_ms,
                    partitions: &partitions,
                    start_ms: self.start_ms,
                    client_transaction_version,
                };
                Ok(EndStep::Write(self.prepare(change, now_ms, false)))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(done),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                Err(ResponseError::ConcurrentTransactions)
            }
            _ => Err(ResponseError::InvalidTxnState),
        }
    }

    /// The markers are written: Prepare* becomes Complete* (a v2 transaction whose epoch was
    /// exhausted moves to its next producer id at epoch 0).
    pub fn prepare_complete(&mut self, now_ms: i64) -> Transit {
        let to = if self.state == TxnState::PrepareCommit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        let (producer_id, epoch) = if self.transaction_v2() && self.next_producer_id != -1 {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        };
        let empty = BTreeSet::new();
        let change = Change {
            to,
            producer_id,
            next_producer_id: -1,
            epoch,
            last_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            partitions: &empty,
            start_ms: self.start_ms,
            client_transaction_version: self.client_transaction_version,
        };
        self.failed_epoch_fence = false;
        self.prepare(change, now_ms, false)
    }

    pub fn transaction_v2(&self) -> bool {
        self.client_transaction_version >= 2
    }

    /// Whether an open transaction ran past its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && self.pending.is_none()
            && now_ms > self.start_ms.saturating_add(i64::from(self.timeout_ms))
    }
}

#[cfg(test)]
mod tests;
