//! Membership and fencing: broker registration (clean-shutdown detection, replaced log
//! directories), heartbeats (unfencing, session expiry), controlled shutdown, unregistration.
//!
//! - KIP-966 "Detection of an unclean shutdown": the broker sends the epoch from its
//!   clean-shutdown file; equal to the registered epoch means clean, anything else unclean.
//!   An unclean broker leaves ISR and ELR (into LastKnownELR) *before* its registration record.
//! - KAFKA-14139: replicas on a log directory that is no longer registered are treated like an
//!   unclean shutdown, whatever the clean-shutdown file says.
//! - A new broker epoch is the metadata-log offset of the `RegisterBroker` record; the broker
//!   starts fenced and is unfenced by a heartbeat whose metadata offset reached that record.
//! - Unfencing elects the broker in leaderless partitions where it is eligible (KIP-966: "If the
//!   replica is an ELR member and ISR is empty, this replica will be elected as leader").
//! - A broker silent for `broker.session.timeout.ms` is fenced: it leaves every ISR (into ELR
//!   when the ISR drops below min ISR) and leads nothing.
//! - Controlled shutdown moves leadership away and removes the broker from ISRs; the broker may
//!   stop (and is fenced) once it leads nothing.

use crate::errors::{ApiError, ErrorCode};
use crate::image::BrokerState;
use crate::partition_change::ProposedChange;
use crate::records::{
    BrokerRegistrationChangeRecord, BrokerStateChange, Listener, Record, RegisterBrokerRecord,
    UnregisterBrokerRecord,
};
use crate::types::{
    BrokerEpoch, BrokerId, DirectoryId, IncarnationId, MetadataOffset, PartitionEpoch,
    TopicPartition,
};

use super::{Batch, Controller, Output};

/// A `BrokerRegistration` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterBrokerRequest {
    /// The broker.
    pub broker: BrokerId,
    /// The cluster id from its `meta.properties`.
    pub cluster_id: String,
    /// Its process incarnation id.
    pub incarnation: IncarnationId,
    /// Its listeners.
    pub listeners: Vec<Listener>,
    /// Its rack.
    pub rack: Option<String>,
    /// Its online log directory ids.
    pub log_dirs: Vec<DirectoryId>,
    /// The broker epoch read from its clean-shutdown file(s), if every directory had one.
    pub previous_broker_epoch: Option<BrokerEpoch>,
}

/// The answer to a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterBrokerResponse {
    /// The broker's (new) epoch.
    pub broker_epoch: BrokerEpoch,
    /// Whether the controller judged the previous shutdown clean.
    pub clean_shutdown: bool,
}

/// Most lost replicas one heartbeat may report; the rest of a longer list is ignored (the
/// broker reports at most this many at a time and the rest in its next heartbeats).
pub const LOST_REPLICAS_PER_HEARTBEAT_MAX: usize = 10_000;

/// Why a running broker reports one of its replicas as lost (issue 19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LostReplicaReason {
    /// Its log held a batch that failed validation; the broker set everything from it aside
    /// and truncated there: the replica lacks records it had.
    Damaged,
    /// Its log directory failed (EIO, ENOSPC, read-only, a failed fsync): nothing of it can be
    /// served or trusted until the broker restarts (KIP-858's offline log directory).
    DirectoryOffline,
}

/// A replica a running broker reports as having lost data, with the partition epoch of the
/// state it saw: a report about an older state of the partition is ignored (the broker
/// reports again with the state it sees now, if the replica is still in the ISR or ELR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LostReplica {
    /// The partition.
    pub partition: TopicPartition,
    /// Its partition epoch in the broker's image.
    pub partition_epoch: PartitionEpoch,
    /// Why.
    pub reason: LostReplicaReason,
}

/// A `BrokerHeartbeat` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRequest {
    /// The broker.
    pub broker: BrokerId,
    /// Its epoch.
    pub broker_epoch: BrokerEpoch,
    /// The metadata-log offset it has applied, if any.
    pub current_metadata_offset: Option<MetadataOffset>,
    /// It wants to stay (or become) fenced.
    pub want_fence: bool,
    /// It wants to shut down.
    pub want_shutdown: bool,
    /// Replicas it lost while running (Keel's heartbeat extension; empty from Kafka brokers).
    pub lost_replicas: Vec<LostReplica>,
}

/// The answer to a heartbeat (as it will be once the records are replayed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// The broker is fenced.
    pub is_fenced: bool,
    /// The broker is in controlled shutdown.
    pub in_controlled_shutdown: bool,
    /// The broker may stop now.
    pub should_shut_down: bool,
}

impl Controller {
    /// Handles a broker registration.
    pub fn register_broker(
        &mut self,
        req: &RegisterBrokerRequest,
        now_ms: u64,
    ) -> Output<Result<RegisterBrokerResponse, ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let response = self.register_into(&mut batch, req, now_ms);
        if response.is_ok() {
            self.sessions.insert(req.broker, now_ms);
        }
        batch.finish(response)
    }

    fn register_into(
        &mut self,
        batch: &mut Batch,
        req: &RegisterBrokerRequest,
        now_ms: u64,
    ) -> Result<RegisterBrokerResponse, ApiError> {
        if req.cluster_id != self.config.cluster_id {
            return Err(ApiError::new(
                ErrorCode::InconsistentClusterId,
                format!(
                    "cluster id {:?} is not {:?}",
                    req.cluster_id, self.config.cluster_id
                ),
            ));
        }
        let existing = self.image.broker(req.broker).cloned();
        if let Some(existing) = &existing {
            if existing.incarnation == req.incarnation {
                // The same process retrying: keep its epoch, nothing to clean up.
                return Ok(RegisterBrokerResponse {
                    broker_epoch: existing.epoch,
                    clean_shutdown: true,
                });
            }
            let session_alive = self
                .sessions
                .get(&req.broker)
                .is_some_and(|last| now_ms < last + self.config.session_timeout_ms);
            if existing.state != BrokerState::Fenced && session_alive {
                return Err(ApiError::new(
                    ErrorCode::DuplicateBrokerRegistration,
                    format!("broker {} is registered with a live session", req.broker),
                ));
            }
        }
        let clean = existing
            .as_ref()
            .is_some_and(|e| req.previous_broker_epoch == Some(e.epoch));
        let b = req.broker;
        // Directories the broker registered before and no longer has (replaced disks).
        let gone_dirs: Vec<DirectoryId> = existing
            .iter()
            .flat_map(|e| e.log_dirs.iter().copied())
            .filter(|d| !req.log_dirs.contains(d))
            .collect();
        let changes = Controller::partitions_where(batch, |p| {
            if !p.is_replica(b) {
                return None;
            }
            // A replica whose directory is unassigned (its disk was lost before, and the broker
            // rebuilt it somewhere it never reported) may sit on any of them: when one is gone,
            // it is treated as lost too (losing eligibility is recoverable, trusting an empty
            // disk is not).
            let lost_directory = match p.directory_of(b) {
                Some(d) => existing.is_some() && !req.log_dirs.contains(&d),
                None => !gone_dirs.is_empty(),
            };
            let eligible = p.isr.contains(&b) || p.elr.contains(&b);
            if lost_directory || (!clean && eligible) {
                Some(ProposedChange::UncleanShutdown {
                    broker: b,
                    lost_directory,
                })
            } else if p.isr.contains(&b) {
                Some(ProposedChange::RemoveFromIsr(b))
            } else {
                None
            }
        });
        for (tp, change) in changes {
            self.change(batch, tp, &change, now_ms);
        }
        let epoch = BrokerEpoch(batch.next_offset().0);
        batch.push(Record::RegisterBroker(RegisterBrokerRecord {
            broker: b,
            epoch,
            incarnation: req.incarnation,
            listeners: req.listeners.clone(),
            rack: req.rack.clone(),
            log_dirs: req.log_dirs.clone(),
            fenced: true,
        }));
        // Answers the broker gave under its old epoch are stale now.
        self.recheck_recovery(batch, Some(b), now_ms);
        Ok(RegisterBrokerResponse {
            broker_epoch: epoch,
            clean_shutdown: clean,
        })
    }

    /// Handles a heartbeat.
    pub fn heartbeat(
        &mut self,
        req: &HeartbeatRequest,
        now_ms: u64,
    ) -> Output<Result<HeartbeatResponse, ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let Some(broker) = self.image.broker(req.broker).cloned() else {
            return batch.finish(Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!("broker {} is not registered", req.broker),
            )));
        };
        if broker.epoch != req.broker_epoch {
            return batch.finish(Err(ApiError::new(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "broker {} epoch {} is not {}",
                    req.broker, req.broker_epoch, broker.epoch
                ),
            )));
        }
        self.sessions.insert(req.broker, now_ms);
        self.lost_replicas_into(&mut batch, req.broker, &req.lost_replicas, now_ms);
        let mut should_shut_down = false;
        match broker.state {
            BrokerState::Fenced => {
                let caught_up = req
                    .current_metadata_offset
                    .is_some_and(|o| o >= broker.registered_at);
                if req.want_shutdown {
                    should_shut_down = true;
                } else if !req.want_fence && caught_up {
                    self.unfence_into(&mut batch, req.broker, now_ms);
                }
            }
            BrokerState::Unfenced => {
                if req.want_fence {
                    self.fence_into(&mut batch, req.broker, now_ms);
                } else if req.want_shutdown {
                    self.controlled_shutdown_into(&mut batch, req.broker, now_ms);
                    should_shut_down = self.shutdown_complete(&mut batch, req.broker, now_ms);
                }
            }
            BrokerState::ControlledShutdown => {
                if req.want_fence {
                    self.fence_into(&mut batch, req.broker, now_ms);
                } else if req.want_shutdown {
                    should_shut_down = self.shutdown_complete(&mut batch, req.broker, now_ms);
                }
            }
        }
        self.reconcile_recovery(&mut batch, now_ms);
        let state = batch.scratch.broker(req.broker).map(|b| b.state);
        batch.finish(Ok(HeartbeatResponse {
            is_fenced: state == Some(BrokerState::Fenced),
            in_controlled_shutdown: state == Some(BrokerState::ControlledShutdown),
            should_shut_down,
        }))
    }

    /// Replicas a running broker lost (damage set aside, a failed log directory) leave the ISR
    /// and ELR exactly as after an unclean shutdown of that one replica (KIP-966: a replica
    /// that lost data is not clean; into LastKnownELR; leadership moves to a clean ISR or ELR
    /// member, or the strategy decides). A failed directory's replicas also lose their
    /// directory assignment (KIP-858). Reports about an older partition state, or about a
    /// replica already out of the ISR and ELR, change nothing.
    fn lost_replicas_into(
        &mut self,
        batch: &mut Batch,
        broker: BrokerId,
        lost: &[LostReplica],
        now_ms: u64,
    ) {
        for report in lost.iter().take(LOST_REPLICAS_PER_HEARTBEAT_MAX) {
            let Some(p) = batch.partition(report.partition) else {
                continue;
            };
            let eligible =
                p.isr.contains(&broker) || p.elr.contains(&broker) || p.leader == Some(broker);
            if p.partition_epoch != report.partition_epoch || !eligible || !p.is_replica(broker) {
                continue;
            }
            let change = ProposedChange::UncleanShutdown {
                broker,
                lost_directory: report.reason == LostReplicaReason::DirectoryOffline,
            };
            self.change(batch, report.partition, &change, now_ms);
        }
    }

    /// Fences brokers whose session expired, re-runs elections of leaderless partitions and
    /// starts the unclean recoveries that are needed.
    pub fn tick(&mut self, now_ms: u64) -> Output<Vec<BrokerId>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let timeout = self.config.session_timeout_ms;
        let expired: Vec<BrokerId> = self
            .image
            .brokers()
            .values()
            .filter(|b| b.state != BrokerState::Fenced)
            // No session: expired (`Controller::expire_session`).
            .filter(|b| {
                self.sessions
                    .get(&b.id)
                    .is_none_or(|last| now_ms >= last + timeout)
            })
            .map(|b| b.id)
            .collect();
        for broker in &expired {
            self.fence_into(&mut batch, *broker, now_ms);
        }
        self.reelect_leaderless(&mut batch, now_ms);
        self.reconcile_recovery(&mut batch, now_ms);
        batch.finish(expired)
    }

    /// Fences a broker now (operator action, or a heartbeat with `want_fence`).
    pub fn fence_broker(&mut self, broker: BrokerId, now_ms: u64) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let result = match self.image.broker(broker) {
            None => Err(ApiError::new(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {broker} is not registered"),
            )),
            Some(b) if b.state == BrokerState::Fenced => Ok(()),
            Some(_) => {
                self.fence_into(&mut batch, broker, now_ms);
                Ok(())
            }
        };
        batch.finish(result)
    }

    /// Removes a broker's registration; it leaves every ISR first (it stays in ELRs, where it is
    /// never electable; a later registration has no stored epoch and so counts as unclean).
    pub fn unregister_broker(
        &mut self,
        broker: BrokerId,
        now_ms: u64,
    ) -> Output<Result<(), ApiError>> {
        self.advance(now_ms);
        let mut batch = Batch::new(&self.image);
        let Some(registration) = self.image.broker(broker).cloned() else {
            return batch.finish(Err(ApiError::new(
                ErrorCode::BrokerIdNotRegistered,
                format!("broker {broker} is not registered"),
            )));
        };
        let changes = Controller::partitions_where(&batch, |p| {
            p.isr
                .contains(&broker)
                .then_some(ProposedChange::RemoveFromIsr(broker))
        });
        for (tp, change) in changes {
            self.change(&mut batch, tp, &change, now_ms);
        }
        batch.push(Record::UnregisterBroker(UnregisterBrokerRecord {
            broker,
            epoch: registration.epoch,
        }));
        self.recheck_recovery(&mut batch, Some(broker), now_ms);
        batch.finish(Ok(()))
    }

    fn fence_into(&mut self, batch: &mut Batch, broker: BrokerId, now_ms: u64) {
        let changes = Controller::partitions_where(batch, |p| {
            p.isr
                .contains(&broker)
                .then_some(ProposedChange::RemoveFromIsr(broker))
        });
        for (tp, change) in changes {
            self.change(batch, tp, &change, now_ms);
        }
        self.push_state_change(batch, broker, BrokerStateChange::Fence);
    }

    fn unfence_into(&mut self, batch: &mut Batch, broker: BrokerId, now_ms: u64) {
        self.push_state_change(batch, broker, BrokerStateChange::Unfence);
        let changes = Controller::partitions_where(batch, |p| {
            (p.leader.is_none() && p.is_replica(broker))
                .then_some(ProposedChange::BrokerUnfenced(broker))
        });
        for (tp, change) in changes {
            self.change(batch, tp, &change, now_ms);
        }
        // KIP-966: "when a replica gets unfenced, URM should check if it can be elected."
        self.recheck_recovery(batch, Some(broker), now_ms);
    }

    fn controlled_shutdown_into(&mut self, batch: &mut Batch, broker: BrokerId, now_ms: u64) {
        self.push_state_change(batch, broker, BrokerStateChange::ControlledShutdown);
        let changes = Controller::partitions_where(batch, |p| {
            p.isr
                .contains(&broker)
                .then_some(ProposedChange::RemoveFromIsr(broker))
        });
        for (tp, change) in changes {
            self.change(batch, tp, &change, now_ms);
        }
    }

    /// A broker in controlled shutdown may stop once it leads nothing; it is fenced then.
    fn shutdown_complete(&mut self, batch: &mut Batch, broker: BrokerId, now_ms: u64) -> bool {
        let leads_something = batch
            .scratch
            .partitions()
            .any(|(_, p)| p.leader == Some(broker));
        if leads_something || !batch.records.is_empty() {
            // Let this batch commit first: the broker asks again with its next heartbeat.
            return false;
        }
        self.fence_into(batch, broker, now_ms);
        true
    }

    fn push_state_change(&self, batch: &mut Batch, broker: BrokerId, change: BrokerStateChange) {
        let Some(epoch) = batch.scratch.broker(broker).map(|b| b.epoch) else {
            return;
        };
        batch.push(Record::BrokerRegistrationChange(
            BrokerRegistrationChangeRecord {
                broker,
                epoch,
                change,
            },
        ));
    }
}
