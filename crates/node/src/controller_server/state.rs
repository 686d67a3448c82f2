//! The one task that owns the controller (KIP-966 and KRaft keep the controller
//! single-threaded): connection tasks send it events — closures over [`ControllerState`] —
//! through a bounded channel and get answers back on oneshot channels. Between events it
//! follows the Raft quorum (becoming active or standby) and, while active, ticks
//! (`Controller::tick`: session-timeout fencing, re-elections, recovery starts).
//!
//! **Active and standby.** Every controller applies the committed metadata log
//! ([`crate::raft::state_machine`]). The controller is *active* while it is the Raft leader of
//! the current term, has applied every entry of its log (its own first, blank entry included),
//! and heard from a quorum within the election timeout (its lease). Becoming active, it builds
//! the pure `Controller` from the applied image with fresh broker sessions and restarts the
//! unclean recoveries the image needs (the KIP: the Unclean Recovery Manager's state is rebuilt
//! after a failover). Losing any of the three conditions drops that state; events are then
//! answered `NOT_CONTROLLER`.
//!
//! **Writes.** Like KRaft's active controller, an operation generates records, replays them at
//! once into the active `Controller` (so the next operation sees them) and proposes them as
//! one Raft entry; its answer is released only when that entry — and so everything before
//! it — is committed and applied ([`ControllerHandle::call`]). An answer that wrote nothing
//! waits for the last entry proposed before it. An entry that is lost (leadership changed
//! before it committed) or not committed within [`ControllerHandle::commit_timeout`] gets
//! `NOT_CONTROLLER`; the caller retries against the new leader.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use keel_controller::recovery::Command;
use std::collections::BTreeSet;

use keel_controller::types::{BrokerId, MetadataOffset, TopicId};
use keel_controller::{Controller, ControllerConfig, Output, Record, ReplayError};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::clock::Clock;
use crate::metadata_log::MetadataLogError;
use crate::metrics::{ControllerMetrics, ControllerSnapshot};
use crate::raft::state_machine::StateMachine;
use crate::raft::{self, MetadataWrite, Raft};

/// How many events may wait for the controller task before senders wait.
pub const EVENT_QUEUE_BOUND: usize = 1024;

/// How often the controller ticks (session timeouts, re-elections, recovery starts).
pub const TICK_INTERVAL_MS: u64 = 500;

/// How often the controller task re-checks its Raft role and lease when nothing else happens.
const ROLE_CHECK_INTERVAL_MS: u64 = 50;

/// A failure that stops the controller: it can no longer tell what is committed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerStateError {
    #[error(transparent)]
    Log(#[from] MetadataLogError),
    #[error("generated metadata record at offset {offset} does not replay: {source}")]
    Replay {
        offset: i64,
        #[source]
        source: ReplayError,
    },
    #[error("the Raft quorum stopped: {0}")]
    Raft(String),
}

/// What the controller task runs: a closure over the state. An `Err` stops the controller.
pub type Event = Box<dyn FnOnce(&mut ControllerState) -> Result<(), ControllerStateError> + Send>;

/// Why a call got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The controller task stopped (shutdown or a fatal error).
    #[error("the controller stopped")]
    Stopped,
    /// This controller is not the active one, or lost its leadership (or its quorum) before
    /// the operation's records committed: `NOT_CONTROLLER`, retry against the leader.
    #[error("this controller is not the active controller")]
    NotController,
}

/// The outcome of an entry: committed, or lost with the leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WriteLost;

type CommitWait = Shared<BoxFuture<'static, Result<(), WriteLost>>>;

fn committed_already() -> CommitWait {
    futures_util::future::ready(Ok(())).boxed().shared()
}

/// The quorum as this controller sees it, for handlers (leader hints, the controller epoch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuorumView {
    /// The Raft leader, if known (a Keel node id).
    pub leader: Option<i32>,
    /// The current Raft term = controller epoch.
    pub epoch: i32,
    /// Whether this controller is the active one.
    pub active: bool,
}

/// The active controller's state (dropped when it stops being active).
#[derive(Debug)]
struct Active {
    term: u64,
    controller: Controller,
    /// The commit of the last entry this controller proposed.
    tail: CommitWait,
    /// Topics being created in several batches by this controller (a pending topic not in
    /// here is abandoned by the next tick).
    creating: BTreeSet<TopicId>,
}

/// The state the controller task owns.
pub struct ControllerState {
    raft: Raft,
    machine: StateMachine,
    clock: Arc<dyn Clock>,
    config: ControllerConfig,
    node_id: i32,
    /// Unclean-recovery commands, executed by the recovery task (`super::recovery`).
    commands: mpsc::UnboundedSender<Command>,
    active: Option<Active>,
    /// The co-located broker of a combined-mode process: its session is expired at this
    /// controller's first activation (they started together; its old session is over).
    expire_on_first_activation: Option<BrokerId>,
    /// `eligible.leader.replicas.enable` from the config, written by the first activation on
    /// a cluster whose metadata never set it.
    elr_default: bool,
    /// The records `keel format --add-scram` left, written by the first activation on a
    /// metadata log that never had a record.
    bootstrap: Vec<Record>,
    /// How long a leader may go without a quorum's acknowledgement and still act.
    lease: Duration,
    /// The last Raft metrics seen, and when (monotonic).
    metrics: Option<(
        openraft::RaftMetrics<u64, openraft::BasicNode>,
        tokio::time::Instant,
    )>,
    view: watch::Sender<QuorumView>,
    /// Where the controller's gauges are published and its elections counted.
    report: ControllerMetrics,
}

impl std::fmt::Debug for ControllerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerState")
            .field("node_id", &self.node_id)
            .field("active", &self.active.as_ref().map(|a| a.term))
            .finish_non_exhaustive()
    }
}

/// What [`ControllerState::new`] needs besides the Raft and its state machine.
#[derive(Debug)]
pub struct StateSettings {
    pub node_id: i32,
    pub config: ControllerConfig,
    pub expire_on_first_activation: Option<BrokerId>,
    pub elr_default: bool,
    /// Bootstrap records ([`super::bootstrap`]).
    pub bootstrap: Vec<Record>,
    pub lease: Duration,
    pub metrics: ControllerMetrics,
}

impl ControllerState {
    /// A standby controller over `raft` and its applied state; it becomes active when the
    /// quorum makes it leader.
    pub fn new(
        raft: Raft,
        machine: StateMachine,
        clock: Arc<dyn Clock>,
        settings: StateSettings,
        commands: mpsc::UnboundedSender<Command>,
        view: watch::Sender<QuorumView>,
    ) -> Self {
        ControllerState {
            raft,
            machine,
            clock,
            config: settings.config,
            node_id: settings.node_id,
            commands,
            active: None,
            expire_on_first_activation: settings.expire_on_first_activation,
            elr_default: settings.elr_default,
            bootstrap: settings.bootstrap,
            lease: settings.lease,
            metrics: None,
            view,
            report: settings.metrics,
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

    /// Wall-clock milliseconds for the controller (never negative).
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.clock.now_ms()).unwrap_or(0)
    }

    /// A new random id (topic ids) of the form Kafka hands out, from the clock so a simulation
    /// can reproduce it.
    pub fn new_uuid(&self) -> uuid::Uuid {
        self.clock.new_kafka_id()
    }

    /// Whether this controller is the active one (events run only then).
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// The active controller, for queries (names to ids, live brokers, assignments). Its
    /// image includes records proposed but not yet committed, as KRaft's does.
    ///
    /// # Panics
    /// When not active: events run only on the active controller.
    pub fn controller(&self) -> &Controller {
        &self
            .active
            .as_ref()
            .expect("controller events run only while active")
            .controller
    }

    /// The applied (committed) state.
    pub fn machine(&self) -> &StateMachine {
        &self.machine
    }

    /// Runs one operation at the current time: generate, replay into the active controller,
    /// propose the records as one Raft entry; its unclean-recovery commands go to the recovery
    /// task. The caller's answer waits for the entry's commit ([`ControllerHandle::call`]).
    pub fn commit<R>(
        &mut self,
        operation: impl FnOnce(&mut Controller, u64) -> Output<R>,
    ) -> Result<R, ControllerStateError> {
        let now_ms = self.now_ms();
        let active = self
            .active
            .as_mut()
            .expect("controller events run only while active");
        let output = operation(&mut active.controller, now_ms);
        if !output.records.is_empty() {
            let first = active.controller.next_offset();
            for (index, record) in output.records.iter().enumerate() {
                let offset = MetadataOffset(first.0 + index as i64);
                let changed = match record {
                    Record::PartitionChange(change) => active
                        .controller
                        .partition(change.partition)
                        .cloned()
                        .map(|before| (change.partition, before)),
                    _ => None,
                };
                active.controller.replay(offset, record).map_err(|source| {
                    ControllerStateError::Replay {
                        offset: offset.0,
                        source,
                    }
                })?;
                if let Some((tp, before)) = changed {
                    if let Some(after) = active.controller.partition(tp) {
                        self.report.count_election(&before, after);
                    }
                }
            }
            let write = MetadataWrite {
                first_offset: first.0,
                records: output.records,
            };
            // The proposal is a send on an unbounded channel: it completes on its first poll.
            let receiver = match self.raft.client_write_ff(write).now_or_never() {
                Some(Ok(receiver)) => receiver,
                Some(Err(fatal)) => return Err(ControllerStateError::Raft(fatal.to_string())),
                None => {
                    return Err(ControllerStateError::Raft(
                        "proposing an entry did not complete at once".to_string(),
                    ))
                }
            };
            active.tail = async move {
                match receiver.await {
                    Ok(Ok(_)) => Ok(()),
                    _ => Err(WriteLost),
                }
            }
            .boxed()
            .shared();
        }
        self.execute(output.commands);
        Ok(output.response)
    }

    /// Marks `topic` as being created in several batches by this controller: the tick leaves
    /// its pending topic alone until [`ControllerState::end_creation`].
    pub fn begin_creation(&mut self, topic: TopicId) {
        if let Some(active) = self.active.as_mut() {
            active.creating.insert(topic);
        }
    }

    /// Ends a creation in several batches: a topic still pending (the creation gave up) is
    /// removed at once.
    pub fn end_creation(&mut self, topic: TopicId) -> Result<(), ControllerStateError> {
        if let Some(active) = self.active.as_mut() {
            active.creating.remove(&topic);
        }
        self.abandon_pending()
    }

    /// Removes the pending topics no creation of this controller is writing: every one after a
    /// failover (the previous controller's creations are over), abandoned ones at each tick.
    fn abandon_pending(&mut self) -> Result<(), ControllerStateError> {
        let Some(active) = self.active.as_ref() else {
            return Ok(());
        };
        let creating = active.creating.clone();
        let abandoned = self.commit(|c, now_ms| c.abandon_pending_topics(&creating, now_ms))?;
        for topic in abandoned {
            info!(%topic, "removed a topic whose creation did not finish");
        }
        Ok(())
    }

    /// What an answer given now must wait for: the last proposed entry's commit.
    fn commit_wait(&self) -> CommitWait {
        self.active
            .as_ref()
            .map_or_else(committed_already, |a| a.tail.clone())
    }

    fn tick(&mut self) -> Result<(), ControllerStateError> {
        if !self.is_active() {
            return Ok(());
        }
        let fenced = self.commit(|c, now_ms| c.tick(now_ms))?;
        for broker in fenced {
            info!(%broker, "broker session expired: fenced");
        }
        self.abandon_pending()?;
        self.publish_metrics();
        Ok(())
    }

    /// Publishes the gauges a scrape reads: the active controller's view, or a standby's
    /// zeros.
    fn publish_metrics(&self) {
        let snapshot = match &self.active {
            Some(active) => ControllerSnapshot::of(&active.controller),
            None => ControllerSnapshot::default(),
        };
        self.report.publish(snapshot);
    }

    /// Records new Raft metrics.
    fn observe(&mut self, metrics: openraft::RaftMetrics<u64, openraft::BasicNode>) {
        if let Err(e) = &metrics.running_state {
            warn!(error = %e, "the Raft quorum stopped");
        }
        self.metrics = Some((metrics, tokio::time::Instant::now()));
    }

    /// Becomes active or standby as the quorum says (see the module docs).
    fn follow_quorum(&mut self) -> Result<(), ControllerStateError> {
        let Some((metrics, seen_at)) = &self.metrics else {
            return Ok(());
        };
        if let Err(e) = &metrics.running_state {
            return Err(ControllerStateError::Raft(e.to_string()));
        }
        let me = raft::raft_id(self.node_id);
        let term = metrics.current_term;
        let leader =
            metrics.state == openraft::ServerState::Leader && metrics.current_leader == Some(me);
        // The lease: the quorum's last acknowledgement as of the metrics, plus the time since.
        let lease_held = metrics
            .millis_since_quorum_ack
            .map(|ms| Duration::from_millis(ms) + seen_at.elapsed())
            .is_some_and(|since| since < self.lease);
        let caught_up = metrics
            .last_applied
            .is_some_and(|a| a.leader_id.term == term && Some(a.index) == metrics.last_log_index);
        let view = QuorumView {
            leader: metrics.current_leader.map(raft::node_id),
            epoch: raft::controller_epoch(term),
            active: false,
        };
        if let Some(active) = &self.active {
            if !leader || active.term != term || !lease_held {
                info!(
                    term = active.term,
                    still_leader = leader,
                    lease_held,
                    "no longer the active controller"
                );
                if leader && active.term == term {
                    self.report.lease_lapses.inc();
                }
                self.active = None;
            }
        } else if leader && lease_held && caught_up {
            self.activate(term)?;
        }
        let view = QuorumView {
            active: self.active.is_some(),
            ..view
        };
        if view.active != self.view.borrow().active {
            self.publish_metrics();
        }
        self.view.send_if_modified(|v| {
            let changed = *v != view;
            *v = view;
            changed
        });
        Ok(())
    }

    /// Becomes the active controller of `term` (see the module docs).
    fn activate(&mut self, term: u64) -> Result<(), ControllerStateError> {
        let now_ms = self.now_ms();
        let image = self.machine.image();
        let mut controller = Controller::from_image(image, self.config.clone(), now_ms);
        if let Some(broker) = self.expire_on_first_activation.take() {
            controller.expire_session(broker);
        }
        let started = controller.start_needed_recoveries(now_ms);
        assert!(
            started.records.is_empty(),
            "starting recoveries writes nothing"
        );
        info!(
            term,
            end_offset = controller.next_offset().0,
            brokers = controller.image().brokers().len(),
            topics = controller.image().topics().len(),
            recoveries = started.commands.len(),
            "active controller"
        );
        self.active = Some(Active {
            term,
            controller,
            tail: committed_already(),
            creating: BTreeSet::new(),
        });
        self.execute(started.commands);
        self.write_bootstrap()?;
        self.abandon_pending()?;
        self.apply_elr_default()?;
        self.apply_transaction_version_default()
    }

    /// The bootstrap records, first of all on a metadata log that never had a record (the
    /// controller crate checks; on any other log this writes nothing).
    fn write_bootstrap(&mut self) -> Result<(), ControllerStateError> {
        if self.bootstrap.is_empty() {
            return Ok(());
        }
        let records = self.bootstrap.clone();
        match self.commit(|c, now_ms| c.bootstrap(&records, now_ms))? {
            Ok(0) => {}
            Ok(n) => info!(
                records = n,
                "wrote the bootstrap metadata of a new cluster (keel format --add-scram)"
            ),
            Err(e) => warn!(error = %e, "the bootstrap metadata does not replay: not written"),
        }
        Ok(())
    }

    /// `eligible.leader.replicas.enable` in the controller's config is the cluster's starting
    /// point (Kafka sets the feature when formatting): it is written once, on a cluster whose
    /// metadata has never set the feature. Later changes go through IncrementalAlterConfigs on
    /// the cluster resource and win over the file.
    fn apply_elr_default(&mut self) -> Result<(), ControllerStateError> {
        if self.elr_default
            || self
                .controller()
                .image()
                .feature_level(keel_controller::config::ELR_FEATURE)
                .is_some()
        {
            return Ok(());
        }
        let change = keel_controller::ConfigChange {
            name: keel_controller::config::ELR_FEATURE.to_string(),
            value: Some("false".to_string()),
        };
        match self.commit(|c, now_ms| {
            c.alter_configs(
                &keel_controller::records::ConfigResource::Cluster,
                std::slice::from_ref(&change),
                now_ms,
            )
        })? {
            Ok(()) => info!("eligible.leader.replicas.enable=false: the cluster runs Kafka's classic ISR rules (no ELR)"),
            Err(e) => warn!(error = %e.message, "cannot apply eligible.leader.replicas.enable=false"),
        }
        Ok(())
    }
}

impl ControllerState {
    /// A cluster whose metadata never set `transaction.version` finalizes Keel's highest
    /// (KIP-890's transactions v2), as `kafka-storage format` does for a new Kafka 4.x cluster.
    fn apply_transaction_version_default(&mut self) -> Result<(), ControllerStateError> {
        use keel_controller::{TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX};
        if let Ok(true) = self.commit(|c, now_ms| {
            c.finalize_feature_default(TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION_MAX, now_ms)
        }) {
            info!(
                level = TRANSACTION_VERSION_MAX,
                "finalized {TRANSACTION_VERSION_FEATURE}"
            );
        }
        Ok(())
    }
}

/// The connection tasks' side of the controller task.
#[derive(Debug, Clone)]
pub struct ControllerHandle {
    events: mpsc::Sender<Event>,
    machine: StateMachine,
    view: watch::Receiver<QuorumView>,
    commit_timeout: Duration,
}

impl ControllerHandle {
    /// Runs `f` on the active controller and returns its answer once the records it (or an
    /// earlier operation) proposed are committed.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut ControllerState) -> Result<R, ControllerStateError> + Send + 'static,
    ) -> Result<R, CallError> {
        let (tx, rx) = oneshot::channel();
        let event: Event = Box::new(move |state| {
            if !state.is_active() {
                let _ = tx.send(Err(CallError::NotController));
                return Ok(());
            }
            let answer = f(state)?;
            let _ = tx.send(Ok((answer, state.commit_wait())));
            Ok(())
        });
        self.events
            .send(event)
            .await
            .map_err(|_| CallError::Stopped)?;
        let (answer, wait) = rx.await.map_err(|_| CallError::Stopped)??;
        match tokio::time::timeout(self.commit_timeout, wait).await {
            Ok(Ok(())) => Ok(answer),
            Ok(Err(WriteLost)) | Err(_) => Err(CallError::NotController),
        }
    }

    /// The applied (committed) state: what standbys and the active controller serve reads
    /// (metadata fetches, DescribeCluster) from.
    pub fn machine(&self) -> &StateMachine {
        &self.machine
    }

    /// The quorum as this controller sees it.
    pub fn view(&self) -> QuorumView {
        *self.view.borrow()
    }

    /// A receiver of the applied end offset, for long polls.
    pub fn committed(&self) -> watch::Receiver<MetadataOffset> {
        self.machine.subscribe()
    }

    /// How long an answer waits for its records to commit.
    pub fn commit_timeout(&self) -> Duration {
        self.commit_timeout
    }
}

/// Creates the channels between connection tasks and the controller task.
pub fn channels(
    machine: StateMachine,
    commit_timeout: Duration,
) -> (
    ControllerHandle,
    mpsc::Receiver<Event>,
    watch::Sender<QuorumView>,
) {
    let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE_BOUND);
    let (view_tx, view_rx) = watch::channel(QuorumView::default());
    (
        ControllerHandle {
            events: events_tx,
            machine,
            view: view_rx,
            commit_timeout,
        },
        events_rx,
        view_tx,
    )
}

/// The controller task: Raft role changes, ticks and events, one at a time, until `shutdown`
/// or a fatal error.
pub async fn run_controller(
    mut state: ControllerState,
    mut events: mpsc::Receiver<Event>,
    shutdown: CancellationToken,
) -> Result<(), ControllerStateError> {
    let mut metrics = state.raft.metrics();
    state.observe(metrics.borrow_and_update().clone());
    state.follow_quorum()?;
    let mut tick = tokio::time::interval(Duration::from_millis(TICK_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut role_check = tokio::time::interval(Duration::from_millis(ROLE_CHECK_INTERVAL_MS));
    role_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            changed = metrics.changed() => {
                if changed.is_err() {
                    return Err(ControllerStateError::Raft("the Raft core stopped".to_string()));
                }
                state.observe(metrics.borrow_and_update().clone());
                state.follow_quorum()?;
            }
            _ = role_check.tick() => state.follow_quorum()?,
            // Before events, so a busy queue cannot starve session expiry.
            _ = tick.tick() => {
                state.follow_quorum()?;
                state.tick()?;
            }
            event = events.recv() => match event {
                Some(event) => {
                    // A paused process must not act on its view from before the pause.
                    state.follow_quorum()?;
                    event(&mut state)?
                }
                None => return Ok(()),
            },
        }
    }
}
