//! Metadata the leader learns from the replayed metadata log:
//!
//! - partition state ([`LeaderPartition::on_partition_metadata`]): an older leader epoch is
//!   ignored; a newer leader epoch or another leader ends this leadership; within the leader
//!   epoch, a partition epoch not newer than the local one is ignored
//!   (`testIgnoreLeaderPartitionStateChangeWithOlderPartitionEpoch`), a newer one replaces the
//!   replicas and the committed ISR and drops any outstanding AlterPartition. A member the new
//!   ISR leaves out no longer counts as caught up from its earlier fetches: the controller took
//!   it out (a replica that reported its storage lost, issue 19, is registered and unfenced), so
//!   the high watermark waits for it again only once it fetches up to the log end offset —
//!   otherwise a replica that stopped fetching would hold acks=all back for
//!   `replica.lag.time.max.ms`;
//! - broker registrations ([`LeaderPartition::on_broker_registration`]): used for ISR
//!   eligibility, fetch fencing and the low watermark (only unfenced brokers count). A
//!   registration newer than the epoch a follower last fetched with means that broker
//!   restarted: what the leader knew of its log is forgotten, its log start offset too
//!   (KAFKA-14139: a replaced disk must not be counted with its old log end offset; Kafka keeps
//!   the log start offset, Keel waits for the restarted replica to report it again);
//! - `min.insync.replicas` changes ([`LeaderPartition::on_min_insync_replicas`]).

use super::{Command, Effects, LeaderPartition, PartitionMetadata};
use crate::errors::ErrorCode;
use crate::types::{BrokerId, BrokerRegistration};

impl LeaderPartition {
    /// Applies replayed partition metadata.
    pub fn on_partition_metadata(&mut self, meta: &PartitionMetadata, now_ms: u64) -> Vec<Command> {
        let mut fx = Effects::default();
        if self.ended || meta.leader_epoch < self.leader_epoch {
            return Vec::new();
        }
        let still_leading = meta.leader_epoch == self.leader_epoch
            && meta.leader == Some(self.local)
            && meta.replicas.contains(&self.local)
            && meta.isr.contains(&self.local);
        if !still_leading {
            self.end_leadership(meta, &mut fx);
            return fx.into_commands();
        }
        if meta.partition_epoch <= self.partition_epoch {
            return Vec::new();
        }
        self.partition_epoch = meta.partition_epoch;
        self.pending = None;
        for removed in self.isr.difference(&meta.isr) {
            if let Some(progress) = self.followers.get_mut(removed) {
                progress.last_caught_up_ms = None;
            }
        }
        self.isr = meta.isr.clone();
        self.set_replicas(meta.replicas.clone(), now_ms);
        self.commit_isr(meta.isr.clone(), now_ms, &mut fx);
        // A replica removed from the assignment no longer holds the low watermark back.
        self.complete_deletes(&mut fx);
        fx.into_commands()
    }

    fn end_leadership(&mut self, meta: &PartitionMetadata, fx: &mut Effects) {
        self.fail_all_waiting(ErrorCode::NotLeaderOrFollower, fx);
        self.fail_all_deletes(ErrorCode::NotLeaderOrFollower, fx);
        self.pending = None;
        self.ended = true;
        fx.ended = Some((meta.leader, meta.leader_epoch));
    }

    /// Applies a broker's registration (`None` = unregistered).
    pub fn on_broker_registration(
        &mut self,
        broker: BrokerId,
        registration: Option<BrokerRegistration>,
        now_ms: u64,
    ) -> Vec<Command> {
        let mut fx = Effects::default();
        if self.ended {
            return Vec::new();
        }
        match registration {
            Some(registration) => {
                if let Some(progress) = self.followers.get_mut(&broker) {
                    if progress
                        .broker_epoch
                        .is_some_and(|e| e < registration.epoch)
                    {
                        progress.log_end_offset = None;
                        progress.last_caught_up_ms = None;
                        progress.last_fetch_leader_log_end_offset = None;
                        progress.log_start_offset = None;
                    }
                }
                self.brokers.insert(broker, registration);
            }
            None => {
                self.brokers.remove(&broker);
            }
        }
        self.maybe_advance_high_watermark(now_ms, &mut fx);
        self.complete_covered(&mut fx);
        // A fenced (or unregistered) broker no longer holds the low watermark back.
        self.complete_deletes(&mut fx);
        fx.into_commands()
    }

    /// Applies a new `min.insync.replicas`: waiting requests fail if the ISR is now below it,
    /// otherwise the high watermark may advance.
    pub fn on_min_insync_replicas(
        &mut self,
        min_insync_replicas: usize,
        now_ms: u64,
    ) -> Vec<Command> {
        let mut fx = Effects::default();
        if self.ended {
            return Vec::new();
        }
        self.config.min_insync_replicas = min_insync_replicas;
        self.maybe_advance_high_watermark(now_ms, &mut fx);
        self.complete_covered(&mut fx);
        self.fail_if_under_min_isr(&mut fx);
        fx.into_commands()
    }
}
