//! The one task that owns the active controller (KIP-966 and KRaft keep the controller
//! single-threaded): connection tasks send it events — closures over [`ControllerState`] — through
//! a bounded channel and get answers back on oneshot channels. Between events it ticks
//! (`Controller::tick`: session-timeout fencing, re-elections, recovery starts).
//!
//! Every committed operation publishes the new end offset of the metadata log on a watch
//! channel, which wakes long-polling metadata fetches.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use keel_controller::recovery::Command;
use keel_controller::types::MetadataOffset;
use keel_controller::{Controller, Output};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::active_controller::{ActiveController, ControllerStateError};
use crate::clock::Clock;
use crate::metadata_log::{LocalMetadataLog, MetadataLog};

/// How many events may wait for the controller task before senders wait.
pub const EVENT_QUEUE_BOUND: usize = 1024;

/// How often the controller ticks (session timeouts, re-elections, recovery starts).
pub const TICK_INTERVAL_MS: u64 = 500;

/// What the controller task runs: a closure over the state. An `Err` stops the controller (the
/// metadata log failed or a committed record does not replay).
pub type Event = Box<dyn FnOnce(&mut ControllerState) -> Result<(), ControllerStateError> + Send>;

/// The controller task stopped (shutdown or a fatal error); the request cannot be answered.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the controller stopped")]
pub struct ControllerStopped;

/// The state the controller task owns.
#[derive(Debug)]
pub struct ControllerState {
    active: ActiveController<LocalMetadataLog>,
    clock: Arc<dyn Clock>,
    committed: watch::Sender<MetadataOffset>,
    /// Unclean-recovery commands, executed by the recovery task (`super::recovery`).
    commands: mpsc::UnboundedSender<Command>,
}

impl ControllerState {
    /// Wraps an opened controller; `committed` gets every new end offset.
    pub fn new(
        active: ActiveController<LocalMetadataLog>,
        clock: Arc<dyn Clock>,
        committed: watch::Sender<MetadataOffset>,
        commands: mpsc::UnboundedSender<Command>,
    ) -> Self {
        committed.send_replace(active.log().end_offset());
        ControllerState {
            active,
            clock,
            committed,
            commands,
        }
    }

    /// Hands unclean-recovery commands to the recovery task.
    pub fn execute(&self, commands: Vec<Command>) {
        for command in commands {
            debug!(?command, "unclean recovery command");
            if self.commands.send(command).is_err() {
                warn!("the recovery task stopped; unclean recovery command dropped");
            }
        }
    }

    /// The co-located broker of a combined-mode or single-node process is not running when
    /// its controller starts (they start together): its old session is over.
    pub fn expire_session(&mut self, broker: keel_controller::types::BrokerId) {
        self.active.expire_session(broker);
    }

    /// Wall-clock milliseconds for the controller (never negative).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now_ms()).unwrap_or(0)
    }

    /// A new random id (topic ids), from the clock so a simulation can reproduce it.
    pub fn new_uuid(&self) -> uuid::Uuid {
        self.clock.new_uuid()
    }

    /// The controller, for queries (names to ids, live brokers, assignments).
    pub fn controller(&self) -> &Controller {
        self.active.controller()
    }

    /// The metadata log's end offset (everything below it is committed).
    pub fn end_offset(&self) -> MetadataOffset {
        self.active.log().end_offset()
    }

    /// Runs one operation at the current time: generate, append durably, replay, publish the
    /// new end offset; its unclean-recovery commands go to the recovery task
    /// ([`ControllerState::execute`]).
    pub fn commit<R>(
        &mut self,
        operation: impl FnOnce(&mut Controller, u64) -> Output<R>,
    ) -> Result<R, ControllerStateError> {
        let now_ms = self.now_ms();
        let committed = self.active.run(now_ms, |c| operation(c, now_ms))?;
        self.committed.send_replace(committed.end_offset);
        self.execute(committed.commands);
        Ok(committed.response)
    }

    /// Raw metadata batches from `from` on (at most about `max_bytes`, at least one batch).
    pub fn read_batches(
        &self,
        from: MetadataOffset,
        max_bytes: usize,
    ) -> Result<Bytes, ControllerStateError> {
        Ok(self.active.log().read_batches(from, max_bytes)?)
    }

    fn tick(&mut self) -> Result<(), ControllerStateError> {
        let fenced = self.commit(|c, now_ms| c.tick(now_ms))?;
        for broker in fenced {
            info!(%broker, "broker session expired: fenced");
        }
        Ok(())
    }
}

/// The connection tasks' side of the controller task.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    events: mpsc::Sender<Event>,
    committed: watch::Receiver<MetadataOffset>,
}

impl ControllerHandle {
    /// Runs `f` on the controller task and returns its answer.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ControllerState) -> Result<R, ControllerStateError> + Send + 'static,
    ) -> Result<R, ControllerStopped> {
        let (tx, rx) = oneshot::channel();
        let event: Event = Box::new(move |state| {
            let answer = f(state)?;
            let _ = tx.send(answer);
            Ok(())
        });
        self.events
            .send(event)
            .await
            .map_err(|_| ControllerStopped)?;
        rx.await.map_err(|_| ControllerStopped)
    }

    /// A receiver of the committed end offset, for long polls.
    pub fn committed(&self) -> watch::Receiver<MetadataOffset> {
        self.committed.clone()
    }
}

/// Creates the channels between connection tasks and the controller task.
pub fn channels(
    state_end: MetadataOffset,
) -> (
    ControllerHandle,
    mpsc::Receiver<Event>,
    watch::Sender<MetadataOffset>,
) {
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE_BOUND);
    let (committed_tx, committed_rx) = watch::channel(state_end);
    (
        ControllerHandle {
            events: events_tx,
            committed: committed_rx,
        },
        events_rx,
        committed_tx,
    )
}

/// The controller task: events and ticks, one at a time, until `shutdown` or a fatal error.
pub async fn run_controller(
    mut state: ControllerState,
    mut events: mpsc::Receiver<Event>,
    shutdown: CancellationToken,
) -> Result<(), ControllerStateError> {
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            // Before events, so a busy queue cannot starve session expiry.
            _ = tick.tick() => state.tick()?,
            event = events.recv() => match event {
                Some(event) => event(&mut state)?,
                None => return Ok(()),
            },
        }
    }
}
