//! The active controller's state: the pure `keel_controller::Controller` and the durable
//! metadata log it commits to.
//!
//! Every operation follows KRaft's discipline: the pure controller *generates* records and a
//! response; the records are appended durably to the metadata log; only then are they replayed
//! into the controller and the response released. A restart loads the newest snapshot and
//! replays the records after it, so the image after a crash is exactly the committed one; a
//! snapshot is written every [`SNAPSHOT_INTERVAL_RECORDS`] records. The network shell (the controller listener)
//! calls [`ActiveController::run`] from one task, which keeps the controller single-threaded.

use keel_controller::recovery::Command;
use keel_controller::types::MetadataOffset;
use keel_controller::{Controller, ControllerConfig, Output, ReplayError};

use crate::metadata_log::{MetadataLog, MetadataLogError};

/// Most bytes of metadata batches replayed per read at startup.
const REPLAY_READ_BYTES: usize = 1024 * 1024;

/// Records between two metadata snapshots.
pub const SNAPSHOT_INTERVAL_RECORDS: i64 = 10_000;

/// A failure that stops the controller: it can no longer tell what is committed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerStateError {
    #[error(transparent)]
    Log(#[from] MetadataLogError),
    #[error("committed metadata record at offset {offset} does not replay: {source}")]
    Replay {
        offset: i64,
        #[source]
        source: ReplayError,
    },
}

/// An operation's result once its records are committed.
#[derive(Debug)]
pub struct Committed<R> {
    pub response: R,
    /// Work for the IO shell (unclean recovery requests, timers).
    pub commands: Vec<Command>,
    /// The offset after the operation's records (what a broker must have applied to see them).
    pub end_offset: MetadataOffset,
}

/// The controller and its log.
#[derive(Debug)]
pub struct ActiveController<L: MetadataLog> {
    controller: Controller,
    log: L,
    controller_epoch: i32,
    /// The end offset of the newest snapshot (0 = none).
    snapshot_end: MetadataOffset,
    snapshot_interval: i64,
}

impl<L: MetadataLog> ActiveController<L> {
    /// Replays every committed record of `log` into a fresh controller.
    pub fn open(
        log: L,
        config: ControllerConfig,
        controller_epoch: i32,
    ) -> Result<Self, ControllerStateError> {
        let (mut controller, mut from) = match log.latest_snapshot() {
            Some((end, records)) => {
                match keel_controller::ClusterImage::from_snapshot(end, &records) {
                    Ok(image) => (Controller::from_image(image, config.clone(), 0), end),
                    Err(e) => {
                        tracing::warn!(end = end.0, error = %e, "metadata snapshot does not load; replaying the whole log");
                        (Controller::new(config), MetadataOffset(0))
                    }
                }
            }
            None => (Controller::new(config), MetadataOffset(0)),
        };
        let snapshot_end = from;
        loop {
            let records = log.read(from, REPLAY_READ_BYTES)?;
            if records.is_empty() {
                break;
            }
            for (offset, record) in records {
                controller.replay(offset, &record).map_err(|source| {
                    ControllerStateError::Replay {
                        offset: offset.0,
                        source,
                    }
                })?;
                from = offset.next();
            }
        }
        assert_eq!(
            controller.next_offset(),
            log.end_offset(),
            "replay consumed the whole log"
        );
        Ok(ActiveController {
            controller,
            log,
            controller_epoch,
            snapshot_end,
            snapshot_interval: SNAPSHOT_INTERVAL_RECORDS,
        })
    }

    /// [`ActiveController::open`] for a controller becoming active at `now_ms`: every
    /// registered broker gets a fresh heartbeat session (sessions are soft state, not in the log;
    /// without this a restarted controller would fence every broker at its first tick), and the
    /// unclean recoveries the image needs are started. Returns their commands.
    pub fn open_at(
        log: L,
        config: ControllerConfig,
        controller_epoch: i32,
        now_ms: u64,
    ) -> Result<(Self, Vec<Command>), ControllerStateError> {
        let mut active = ActiveController::open(log, config.clone(), controller_epoch)?;
        active.controller =
            Controller::from_image(active.controller.image().clone(), config, now_ms);
        let started = active.controller.start_needed_recoveries(now_ms);
        assert!(
            started.records.is_empty(),
            "starting recoveries writes nothing"
        );
        Ok((active, started.commands))
    }

    /// Ends a broker's heartbeat session (see `Controller::expire_session`).
    pub fn expire_session(&mut self, broker: keel_controller::types::BrokerId) {
        self.controller.expire_session(broker);
    }

    /// The controller epoch this controller writes with.
    pub fn controller_epoch(&self) -> i32 {
        self.controller_epoch
    }

    /// The controller, for queries.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The metadata log, for serving reads.
    pub fn log(&self) -> &L {
        &self.log
    }

    /// Runs one operation: generate, append durably, replay, release the response.
    pub fn run<R>(
        &mut self,
        now_ms: u64,
        operation: impl FnOnce(&mut Controller) -> Output<R>,
    ) -> Result<Committed<R>, ControllerStateError> {
        let output = operation(&mut self.controller);
        let first = self.controller.next_offset();
        let appended_at = self.log.append(
            &output.records,
            self.controller_epoch,
            i64::try_from(now_ms).unwrap_or(i64::MAX),
        )?;
        assert_eq!(
            appended_at, first,
            "the log and the controller agree on offsets"
        );
        for (index, record) in output.records.iter().enumerate() {
            let offset = MetadataOffset(first.0 + index as i64);
            self.controller.replay(offset, record).map_err(|source| {
                ControllerStateError::Replay {
                    offset: offset.0,
                    source,
                }
            })?;
        }
        let end = self.controller.next_offset();
        if end.0 - self.snapshot_end.0 >= self.snapshot_interval {
            // A failed snapshot is not fatal: the log still holds everything.
            match self
                .log
                .write_snapshot(end, &self.controller.image().to_snapshot())
            {
                Ok(()) => self.snapshot_end = end,
                Err(e) => tracing::warn!(error = %e, "cannot write a metadata snapshot"),
            }
        }
        Ok(Committed {
            response: output.response,
            commands: output.commands,
            end_offset: end,
        })
    }

    /// Changes how many records separate two snapshots (tests).
    pub fn set_snapshot_interval(&mut self, records: i64) {
        self.snapshot_interval = records.max(1);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::Arc;

    use keel_controller::types::{BrokerId, IncarnationId, TopicId};
    use keel_controller::{CreateTopicRequest, HeartbeatRequest, RegisterBrokerRequest};
    use keel_log::storage::{MemStorage, Storage};

    use super::*;
    use crate::metadata_log::LocalMetadataLog;

    fn register(broker: i32) -> RegisterBrokerRequest {
        RegisterBrokerRequest {
            broker: BrokerId(broker),
            cluster_id: "c".into(),
            incarnation: IncarnationId(uuid::Uuid::from_u128(broker as u128)),
            listeners: vec![],
            rack: None,
            log_dirs: vec![],
            previous_broker_epoch: None,
        }
    }

    // Shows: committed operations survive a controller crash exactly — the reopened controller
    // replays the log to the same image, and a broker's epoch is its registration's offset.
    #[test]
    fn committed_state_survives_a_restart() {
        let storage = Arc::new(MemStorage::new());
        let dir = Path::new("/controller");
        let log = LocalMetadataLog::open(storage.clone(), dir, 0).unwrap();
        let mut active = ActiveController::open(log, ControllerConfig::new("c"), 1).unwrap();
        let mut epochs = Vec::new();
        for broker in 1..=3 {
            let committed = active
                .run(10, |c| c.register_broker(&register(broker), 10))
                .unwrap();
            epochs.push(committed.response.unwrap().broker_epoch);
        }
        assert_eq!(epochs[0].0, 0);
        for (index, epoch) in epochs.iter().enumerate() {
            let caught_up = active.controller().next_offset();
            let heartbeat = HeartbeatRequest {
                broker: BrokerId(index as i32 + 1),
                broker_epoch: *epoch,
                current_metadata_offset: Some(caught_up),
                want_fence: false,
                want_shutdown: false,
            };
            let committed = active.run(15, |c| c.heartbeat(&heartbeat, 15)).unwrap();
            assert!(!committed.response.unwrap().is_fenced);
        }
        let committed = active
            .run(20, |c| {
                c.create_topic(
                    &CreateTopicRequest {
                        name: "t".into(),
                        id: TopicId(uuid::Uuid::from_u128(99)),
                        assignment: vec![vec![BrokerId(1), BrokerId(2), BrokerId(3)]],
                        configs: BTreeMap::new(),
                    },
                    20,
                )
            })
            .unwrap();
        committed.response.unwrap();
        let image = active.controller().image().clone();
        let end = active.controller().next_offset();

        storage.crash();
        let log = LocalMetadataLog::open(storage, dir, 30).unwrap();
        let reopened = ActiveController::open(log, ControllerConfig::new("c"), 2).unwrap();
        assert_eq!(reopened.controller().next_offset(), end);
        assert_eq!(reopened.controller().image(), &image);
    }

    // Shows: snapshots are written every N records; a reopened controller loads the newest and
    // replays the rest to the same state, and an unreadable snapshot only costs replay time.
    #[test]
    fn snapshots_rebuild_the_state_and_are_optional() {
        let storage = Arc::new(MemStorage::new());
        let dir = Path::new("/controller");
        let log = LocalMetadataLog::open(storage.clone(), dir, 0).unwrap();
        let mut active = ActiveController::open(log, ControllerConfig::new("c"), 1).unwrap();
        active.set_snapshot_interval(2);
        for broker in 1..=5 {
            active
                .run(10, |c| c.register_broker(&register(broker), 10))
                .unwrap()
                .response
                .unwrap();
        }
        let expected = active.controller().image().to_snapshot();
        let end = active.controller().next_offset();
        let snapshots: Vec<String> = storage
            .list_dir(&dir.join("__cluster_metadata-0"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n.ends_with(".checkpoint"))
            .collect();
        assert_eq!(snapshots.len(), 2, "the two newest are kept: {snapshots:?}");
        let reopen = || {
            let log = LocalMetadataLog::open(storage.clone(), dir, 0).unwrap();
            let (newest, _) = log.latest_snapshot().expect("a snapshot");
            let active = ActiveController::open(log, ControllerConfig::new("c"), 1).unwrap();
            (newest, active)
        };
        let (newest, reopened) = reopen();
        assert!(newest.0 > 0 && newest <= end, "{newest:?}");
        assert_eq!(reopened.controller().next_offset(), end);
        assert_eq!(reopened.controller().image().to_snapshot(), expected);

        // Corrupt the newest snapshot: the older one (or the log) still rebuilds the state.
        let path = dir
            .join("__cluster_metadata-0")
            .join(format!("{:020}.checkpoint", newest.0));
        keel_log::storage::write_file_atomically(storage.as_ref(), &path, b"not json").unwrap();
        let (older, reopened) = reopen();
        assert!(older < newest);
        assert_eq!(reopened.controller().next_offset(), end);
        assert_eq!(reopened.controller().image().to_snapshot(), expected);
    }

    // Shows: a controller becoming active gives every registered broker a fresh session
    // (Kafka's BrokerHeartbeatManager starts empty on failover): replaying the log alone would
    // leave sessions at time 0 and the first tick would fence every live broker.
    #[test]
    fn open_at_starts_fresh_sessions() {
        let storage = Arc::new(MemStorage::new());
        let dir = Path::new("/controller");
        let log = LocalMetadataLog::open(storage.clone(), dir, 0).unwrap();
        let mut active = ActiveController::open(log, ControllerConfig::new("c"), 1).unwrap();
        let now = 1_000_000;
        let epoch = active
            .run(now, |c| c.register_broker(&register(1), now))
            .unwrap()
            .response
            .unwrap()
            .broker_epoch;
        let heartbeat = HeartbeatRequest {
            broker: BrokerId(1),
            broker_epoch: epoch,
            current_metadata_offset: Some(active.controller().next_offset()),
            want_fence: false,
            want_shutdown: false,
        };
        let unfenced = active.run(now, |c| c.heartbeat(&heartbeat, now)).unwrap();
        assert!(!unfenced.response.unwrap().is_fenced);

        let restart = now + 60_000;
        let log = LocalMetadataLog::open(storage, dir, 0).unwrap();
        let (mut reopened, commands) =
            ActiveController::open_at(log, ControllerConfig::new("c"), 1, restart).unwrap();
        assert!(commands.is_empty());
        let tick = reopened.run(restart + 1, |c| c.tick(restart + 1)).unwrap();
        assert!(
            tick.response.is_empty(),
            "nobody fenced right after the restart"
        );
        let expired = restart + keel_controller::config::DEFAULT_BROKER_SESSION_TIMEOUT_MS;
        let tick = reopened.run(expired, |c| c.tick(expired)).unwrap();
        assert_eq!(
            tick.response,
            vec![BrokerId(1)],
            "fenced one session timeout later"
        );
    }
}
