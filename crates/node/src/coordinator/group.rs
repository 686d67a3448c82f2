//! One consumer group of the classic protocol: Kafka's group state machine (`ClassicGroup` and
//! the join / sync / heartbeat / leave rules of its `GroupMetadataManager`).
//!
//! States: `Empty` (no members; committed offsets may exist) → `PreparingRebalance` (members
//! (re)join; completes when every known member has sent JoinGroup and no new member id is
//! pending, after `group.initial.rebalance.delay.ms` for a group that was empty, or at the
//! rebalance timeout, dropping members that did not rejoin) → `CompletingRebalance` (the new
//! generation exists; waiting for the leader's SyncGroup with the assignment) → `Stable` (the
//! assignment was written to `__consumer_offsets`). A member silent for its session timeout is
//! removed and the group rebalances.
//!
//! Nothing here does IO: JoinGroup and SyncGroup answers that must wait are oneshot senders kept
//! in the member, time comes in as `now_ms`, and a group that must be written says so
//! ([`Persist`]); the coordinator writes it and reports back ([`Group::synced`]).

use std::collections::BTreeMap;

use bytes::Bytes;
use keel_wire::ResponseError;
use tokio::sync::oneshot;

use super::records::{GroupValue, OffsetValue, StoredMember};

/// Group settings (Kafka's broker configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSettings {
    /// `group.initial.rebalance.delay.ms` (default 3000).
    pub initial_rebalance_delay_ms: i64,
    /// `group.min.session.timeout.ms` (default 6000).
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms` (default 1800000).
    pub max_session_timeout_ms: i32,
    /// `group.max.size` (default `i32::MAX`).
    pub max_size: usize,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as usize,
        }
    }
}

/// Kafka's group states (their names are what DescribeGroups and ListGroups report).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// A JoinGroup answer.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinAnswer {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// For the leader: every member's id, instance id and metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// JoinGroup v9+ (KIP-814): the returning static leader keeps the current assignment and
    /// must not compute a new one.
    pub skip_assignment: bool,
}

impl JoinAnswer {
    /// An error answer (the member id is echoed, as Kafka does).
    pub fn error(error: ResponseError, member_id: &str) -> JoinAnswer {
        JoinAnswer {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncAnswer {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignment: Bytes,
}

impl SyncAnswer {
    pub fn error(error: ResponseError) -> SyncAnswer {
        SyncAnswer {
            error: Some(error),
            protocol_type: None,
            protocol: None,
            assignment: Bytes::new(),
        }
    }
}

pub type JoinReply = oneshot::Sender<JoinAnswer>;
pub type SyncReply = oneshot::Sender<SyncAnswer>;

/// What a JoinGroup asks.
#[derive(Debug, Clone)]
pub struct JoinArgs {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ (KIP-394): a new dynamic member first gets its id with `MEMBER_ID_REQUIRED`.
    pub require_known_member_id: bool,
    /// JoinGroup v9+ (KIP-814): the answer can tell a returning static leader to skip the
    /// assignment.
    pub supports_skip_assignment: bool,
}

/// The group's state must be written to `__consumer_offsets`; the coordinator calls
/// [`Group::synced`] with it once it is (or failed).
#[derive(Debug, Clone, PartialEq)]
pub struct Persist {
    pub generation: i32,
    pub value: GroupValue,
    /// The new member id of a static member that replaced its old one in a stable group: its
    /// JoinGroup is answered once this write is durable (and reverted if it fails).
    pub rejoined: Option<String>,
}

/// A static member's JoinGroup in a stable group, waiting for the write of its new member id
/// (Kafka's `updateStaticMemberThenRebalanceOrCompleteJoin`, Stable branch).
#[derive(Debug)]
struct StaticRejoin {
    /// The member's new id.
    member_id: String,
    /// The leader before the replacement: what a JoinGroup before v9 is told (so a returning
    /// leader acts as a follower and does not assign again).
    old_leader: Option<String>,
    supports_skip_assignment: bool,
    /// What the member was, restored if the write fails.
    old_id: String,
    old_client_id: String,
    old_client_host: String,
    old_protocols: Vec<(String, Bytes)>,
    old_session_timeout_ms: i32,
    old_rebalance_timeout_ms: i32,
}

#[derive(Debug)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    join: Option<JoinReply>,
    sync: Option<SyncReply>,
    last_seen_ms: i64,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn answer_join(&mut self, answer: JoinAnswer) {
        if let Some(reply) = self.join.take() {
            let _ = reply.send(answer);
        }
    }

    fn answer_sync(&mut self, answer: SyncAnswer) {
        if let Some(reply) = self.sync.take() {
            let _ = reply.send(answer);
        }
    }
}

/// One group. See the module docs.
#[derive(Debug)]
pub struct Group {
    id: String,
    state: GroupState,
    protocol_type: Option<String>,
    protocol: Option<String>,
    generation: i32,
    leader: Option<String>,
    /// In join order (the first member becomes leader when there is none).
    members: Vec<Member>,
    /// KIP-394: member ids handed out with `MEMBER_ID_REQUIRED`, until when they may join.
    pending: BTreeMap<String, i64>,
    /// When the current rebalance phase gives up on members that did not answer.
    phase_deadline_ms: i64,
    /// `group.initial.rebalance.delay.ms` of a rebalance that started empty.
    delay_until_ms: Option<i64>,
    state_timestamp_ms: i64,
    /// Static members replaced in `Stable` whose new member id is being written.
    static_rejoins: Vec<StaticRejoin>,
    /// Committed offsets by (topic, partition).
    pub offsets: BTreeMap<(String, i32), OffsetValue>,
    /// Offsets committed inside open transactions (TxnOffsetCommit), by producer id: they
    /// become `offsets` when the transaction's COMMIT marker reaches the group's partition,
    /// and vanish at its ABORT.
    pub pending_txn_offsets: BTreeMap<i64, BTreeMap<(String, i32), OffsetValue>>,
}

fn same_protocols(a: &[(String, Bytes)], b: &[(String, Bytes)]) -> bool {
    a == b
}

impl Group {
    /// A new, empty group.
    pub fn new(id: &str, now_ms: i64) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: Vec::new(),
            pending: BTreeMap::new(),
            phase_deadline_ms: 0,
            delay_until_ms: None,
            state_timestamp_ms: now_ms,
            static_rejoins: Vec::new(),
            offsets: BTreeMap::new(),
            pending_txn_offsets: BTreeMap::new(),
        }
    }

    /// Settles producer `producer_id`'s pending transactional offsets: committed or dropped.
    /// Returns whether it had any.
    pub fn complete_txn_offsets(&mut self, producer_id: i64, commit: bool) -> bool {
        let Some(pending) = self.pending_txn_offsets.remove(&producer_id) else {
            return false;
        };
        if commit {
            self.offsets.extend(pending);
        }
        true
    }

    /// Whether a transaction holds an uncommitted offset of this partition (OffsetFetch with
    /// `require_stable` answers `UNSTABLE_OFFSET_COMMIT`).
    pub fn has_pending_txn_offset(&self, topic: &str, partition: i32) -> bool {
        self.pending_txn_offsets
            .values()
            .any(|p| p.contains_key(&(topic.to_string(), partition)))
    }

    /// A group as loaded from `__consumer_offsets`: its members are back (their sessions start
    /// now), in `Stable` if it has any, `Empty` otherwise.
    pub fn from_value(id: &str, value: GroupValue, now_ms: i64) -> Group {
        let mut group = Group::new(id, now_ms);
        group.generation = value.generation;
        group.protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
        group.protocol = value.protocol;
        group.leader = value.leader;
        group.state_timestamp_ms = value.state_timestamp;
        let protocol = group.protocol.clone().unwrap_or_default();
        group.members = value
            .members
            .into_iter()
            .map(|m| Member {
                id: m.member_id,
                instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: vec![(protocol.clone(), m.subscription)],
                assignment: m.assignment,
                join: None,
                sync: None,
                last_seen_ms: now_ms,
            })
            .collect();
        group.state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group
    }

    /// What is written to `__consumer_offsets` for this group.
    pub fn to_value(&self) -> GroupValue {
        let protocol = self.protocol.clone().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            state_timestamp: self.state_timestamp_ms,
            members: self
                .members
                .iter()
                .map(|m| StoredMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }
    pub fn state(&self) -> GroupState {
        self.state
    }
    pub fn generation(&self) -> i32 {
        self.generation
    }
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// For DescribeGroups: (member id, instance id, client id, client host, metadata for the
    /// group's protocol, assignment).
    pub fn describe_members(&self) -> Vec<(String, Option<String>, String, String, Bytes, Bytes)> {
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members
            .iter()
            .map(|m| {
                (
                    m.id.clone(),
                    m.instance_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    m.metadata(&protocol),
                    m.assignment.clone(),
                )
            })
            .collect()
    }

    /// The topics the members' assignments or subscriptions name, for the consumer protocol
    /// (OffsetDelete refuses to delete offsets of a topic the group consumes).
    pub fn consumes_topic(&self, topic: &str) -> bool {
        if self.protocol_type.as_deref() != Some("consumer") || self.state == GroupState::Empty {
            return false;
        }
        let protocol = self.protocol.clone().unwrap_or_default();
        self.members.iter().any(|m| {
            super::consumer_protocol::subscription_topics(&m.metadata(&protocol))
                .iter()
                .any(|t| t == topic)
        })
    }

    fn member_index(&self, id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    fn instance_index(&self, instance: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// Kafka's member check: unknown member id → `UNKNOWN_MEMBER_ID`; a static member whose
    /// instance id now belongs to another member id → `FENCED_INSTANCE_ID`.
    fn check_member(&self, id: &str, instance: Option<&str>) -> Result<usize, ResponseError> {
        if let Some(instance) = instance {
            if let Some(index) = self.instance_index(instance) {
                if self.members[index].id != id {
                    return Err(ResponseError::FencedInstanceId);
                }
                return Ok(index);
            }
        }
        self.member_index(id).ok_or(ResponseError::UnknownMemberId)
    }

    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn current_join_answer(&self, member: &Member, leader_view: bool) -> JoinAnswer {
        let protocol = self.protocol.clone().unwrap_or_default();
        JoinAnswer {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member.id.clone(),
            members: if leader_view {
                self.members
                    .iter()
                    .map(|m| (m.id.clone(), m.instance_id.clone(), m.metadata(&protocol)))
                    .collect()
            } else {
                Vec::new()
            },
            skip_assignment: false,
        }
    }

    /// JoinGroup. The answer goes to `reply`, now or when the rebalance completes; returns what
    /// must be written, if anything. `new_member_id` makes a member id (Kafka's
    /// `clientId-uuid`).
    pub fn join(
        &mut self,
        args: JoinArgs,
        reply: JoinReply,
        now_ms: i64,
        settings: &GroupSettings,
        new_member_id: impl FnOnce() -> String,
    ) -> Option<Persist> {
        let refuse = |reply: JoinReply, error: ResponseError, id: &str| {
            let _ = reply.send(JoinAnswer::error(error, id));
            None
        };
        if args.session_timeout_ms < settings.min_session_timeout_ms
            || args.session_timeout_ms > settings.max_session_timeout_ms
        {
            return refuse(reply, ResponseError::InvalidSessionTimeout, &args.member_id);
        }
        if self.state == GroupState::Dead {
            return refuse(
                reply,
                ResponseError::CoordinatorNotAvailable,
                &args.member_id,
            );
        }
        if !self.supports(&args.protocol_type, &args.protocols) {
            return refuse(
                reply,
                ResponseError::InconsistentGroupProtocol,
                &args.member_id,
            );
        }
        if args.member_id.is_empty() {
            let id = new_member_id();
            if let Some(instance) = args.instance_id.clone() {
                if let Some(index) = self.instance_index(&instance) {
                    return self.rejoin_static(index, id, args, reply, now_ms, settings);
                }
            } else if args.require_known_member_id {
                self.pending
                    .insert(id.clone(), now_ms + i64::from(args.session_timeout_ms));
                return refuse(reply, ResponseError::MemberIdRequired, &id);
            }
            return self.add_member(id, args, reply, now_ms, settings);
        }
        if self.pending.remove(&args.member_id).is_some() {
            let id = args.member_id.clone();
            return self.add_member(id, args, reply, now_ms, settings);
        }
        let index = match self.check_member(&args.member_id, args.instance_id.as_deref()) {
            Ok(index) => index,
            Err(error) => return refuse(reply, error, &args.member_id),
        };
        match self.state {
            GroupState::Empty | GroupState::Dead => {
                refuse(reply, ResponseError::UnknownMemberId, &args.member_id)
            }
            GroupState::PreparingRebalance => {
                self.update_member(index, &args, reply, now_ms);
                self.maybe_complete_join(now_ms)
            }
            GroupState::CompletingRebalance => {
                if same_protocols(&self.members[index].protocols, &args.protocols) {
                    // A retried JoinGroup of this generation: the same answer again.
                    let is_leader = self.leader.as_deref() == Some(args.member_id.as_str());
                    let answer = self.current_join_answer(&self.members[index], is_leader);
                    self.members[index].last_seen_ms = now_ms;
                    let _ = reply.send(answer);
                    None
                } else {
                    self.update_member(index, &args, reply, now_ms);
                    self.prepare_rebalance(now_ms, settings);
                    self.maybe_complete_join(now_ms)
                }
            }
            GroupState::Stable => {
                let is_leader = self.leader.as_deref() == Some(args.member_id.as_str());
                if is_leader || !same_protocols(&self.members[index].protocols, &args.protocols) {
                    self.update_member(index, &args, reply, now_ms);
                    self.prepare_rebalance(now_ms, settings);
                    self.maybe_complete_join(now_ms)
                } else {
                    let answer = self.current_join_answer(&self.members[index], false);
                    self.members[index].last_seen_ms = now_ms;
                    let _ = reply.send(answer);
                    None
                }
            }
        }
    }

    fn update_member(&mut self, index: usize, args: &JoinArgs, reply: JoinReply, now_ms: i64) {
        let member = &mut self.members[index];
        member.protocols = args.protocols.clone();
        member.session_timeout_ms = args.session_timeout_ms;
        member.rebalance_timeout_ms = args.rebalance_timeout_ms;
        member.last_seen_ms = now_ms;
        if let Some(old) = member.join.replace(reply) {
            let _ = old.send(JoinAnswer::error(
                ResponseError::RebalanceInProgress,
                &member.id,
            ));
        }
    }

    fn add_member(
        &mut self,
        id: String,
        args: JoinArgs,
        reply: JoinReply,
        now_ms: i64,
        settings: &GroupSettings,
    ) -> Option<Persist> {
        if self.members.len() >= settings.max_size {
            let _ = reply.send(JoinAnswer::error(ResponseError::GroupMaxSizeReached, &id));
            return None;
        }
        if self.protocol_type.is_none() || self.members.is_empty() {
            self.protocol_type = Some(args.protocol_type.clone());
        }
        self.members.push(Member {
            id,
            instance_id: args.instance_id,
            client_id: args.client_id,
            client_host: args.client_host,
            session_timeout_ms: args.session_timeout_ms,
            rebalance_timeout_ms: args.rebalance_timeout_ms,
            protocols: args.protocols,
            assignment: Bytes::new(),
            join: Some(reply),
            sync: None,
            last_seen_ms: now_ms,
        });
        match self.state {
            GroupState::PreparingRebalance => {
                if let Some(until) = self.delay_until_ms.as_mut() {
                    // Kafka's InitialDelayedJoin: every new member buys the others one more
                    // delay, up to the rebalance timeout.
                    *until =
                        (now_ms + settings.initial_rebalance_delay_ms).min(self.phase_deadline_ms);
                }
                self.phase_deadline_ms = self
                    .phase_deadline_ms
                    .max(now_ms + self.max_rebalance_timeout());
            }
            _ => self.prepare_rebalance(now_ms, settings),
        }
        self.maybe_complete_join(now_ms)
    }

    /// KIP-345: a static member came back with a new member id (Kafka's
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`). Its old member id is fenced and the
    /// member takes the new one with its previous assignment. In a stable group whose selected
    /// protocol its new protocols do not change, nothing rebalances — also when it was the
    /// leader (KIP-814): the new member id is written and the JoinGroup answered once it is
    /// ([`Group::synced`]). Otherwise (another protocol, or a rebalance under way) the group
    /// rebalances.
    fn rejoin_static(
        &mut self,
        index: usize,
        new_id: String,
        args: JoinArgs,
        reply: JoinReply,
        now_ms: i64,
        settings: &GroupSettings,
    ) -> Option<Persist> {
        let old_leader = self.leader.clone();
        let previous = {
            let member = &mut self.members[index];
            member.answer_join(JoinAnswer::error(
                ResponseError::FencedInstanceId,
                &member.id,
            ));
            member.answer_sync(SyncAnswer::error(ResponseError::FencedInstanceId));
            let old_id = std::mem::replace(&mut member.id, new_id.clone());
            StaticRejoin {
                member_id: new_id.clone(),
                old_leader: old_leader.clone(),
                supports_skip_assignment: args.supports_skip_assignment,
                old_client_id: std::mem::replace(&mut member.client_id, args.client_id.clone()),
                old_client_host: std::mem::replace(
                    &mut member.client_host,
                    args.client_host.clone(),
                ),
                old_protocols: member.protocols.clone(),
                old_session_timeout_ms: member.session_timeout_ms,
                old_rebalance_timeout_ms: member.rebalance_timeout_ms,
                old_id,
            }
        };
        // A rejoin of this instance still waiting for its write was just fenced.
        self.static_rejoins
            .retain(|r| r.member_id != previous.old_id);
        if old_leader.as_deref() == Some(previous.old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        self.update_member(index, &args, reply, now_ms);
        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol => {
                self.static_rejoins.push(previous);
                Some(Persist {
                    rejoined: Some(new_id),
                    ..self.persist()
                })
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                // In CompletingRebalance the leader may already be assigning to the old member
                // id: Kafka rebalances again.
                self.prepare_rebalance(now_ms, settings);
                self.maybe_complete_join(now_ms)
            }
            GroupState::PreparingRebalance | GroupState::Empty | GroupState::Dead => {
                self.maybe_complete_join(now_ms)
            }
        }
    }

    /// The write of a replaced static member's new id is durable (`Ok`): its JoinGroup gets the
    /// current generation — v9+ with the members and `SkipAssignment` if it leads, before v9
    /// with the old leader id, so a returning leader only syncs. It failed: the member gets its
    /// old id back and the JoinGroup the error.
    fn finish_static_rejoin(&mut self, member_id: &str, result: Result<(), ResponseError>) {
        let Some(at) = self
            .static_rejoins
            .iter()
            .position(|r| r.member_id == member_id)
        else {
            return;
        };
        let rejoin = self.static_rejoins.remove(at);
        let Some(index) = self.member_index(member_id) else {
            return;
        };
        let is_leader = self.leader.as_deref() == Some(member_id);
        match result {
            Ok(()) => {
                let skip = rejoin.supports_skip_assignment && is_leader;
                let mut answer = self.current_join_answer(&self.members[index], skip);
                answer.skip_assignment = skip;
                if !rejoin.supports_skip_assignment {
                    answer.leader = rejoin.old_leader.unwrap_or_default();
                }
                self.members[index].answer_join(answer);
            }
            Err(error) => {
                let member = &mut self.members[index];
                member.id = rejoin.old_id.clone();
                member.client_id = rejoin.old_client_id;
                member.client_host = rejoin.old_client_host;
                member.protocols = rejoin.old_protocols;
                member.session_timeout_ms = rejoin.old_session_timeout_ms;
                member.rebalance_timeout_ms = rejoin.old_rebalance_timeout_ms;
                if is_leader {
                    self.leader = Some(rejoin.old_id);
                }
                let mut answer = JoinAnswer::error(error, "");
                answer.generation = self.generation;
                answer.protocol_type = self.protocol_type.clone();
                answer.protocol = self.protocol.clone();
                answer.leader = rejoin.old_leader.unwrap_or_default();
                self.members[index].answer_join(answer);
            }
        }
    }

    fn max_rebalance_timeout(&self) -> i64 {
        self.members
            .iter()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn set_state(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = now_ms;
    }

    fn prepare_rebalance(&mut self, now_ms: i64, settings: &GroupSettings) {
        // A static member's JoinGroup waiting for its write is now answered by the rebalance.
        self.static_rejoins.clear();
        if self.state == GroupState::CompletingRebalance {
            for member in &mut self.members {
                member.assignment = Bytes::new();
                member.answer_sync(SyncAnswer::error(ResponseError::RebalanceInProgress));
            }
        }
        let was_empty = self.state == GroupState::Empty;
        self.set_state(GroupState::PreparingRebalance, now_ms);
        self.phase_deadline_ms = now_ms + self.max_rebalance_timeout();
        self.delay_until_ms = (was_empty && settings.initial_rebalance_delay_ms > 0)
            .then(|| (now_ms + settings.initial_rebalance_delay_ms).min(self.phase_deadline_ms));
    }

    fn maybe_complete_join(&mut self, now_ms: i64) -> Option<Persist> {
        if self.state != GroupState::PreparingRebalance {
            return None;
        }
        let all_joined = self.members.iter().all(|m| m.join.is_some()) && self.pending.is_empty();
        let delay_over = self.delay_until_ms.is_none_or(|d| now_ms >= d);
        if (all_joined && delay_over) || now_ms >= self.phase_deadline_ms {
            return self.complete_join(now_ms);
        }
        None
    }

    /// The rebalance ends: members that did not rejoin leave, the generation moves on, the
    /// protocol is chosen and every member gets its JoinGroup answer (the leader with the
    /// members' metadata).
    fn complete_join(&mut self, now_ms: i64) -> Option<Persist> {
        self.members.retain(|m| m.join.is_some());
        self.pending.clear();
        self.delay_until_ms = None;
        self.generation += 1;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.set_state(GroupState::Empty, now_ms);
            return Some(self.persist());
        }
        self.protocol = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.iter().any(|m| &m.id == l))
        {
            self.leader = Some(self.members[0].id.clone());
        }
        self.set_state(GroupState::CompletingRebalance, now_ms);
        self.phase_deadline_ms = now_ms + self.max_rebalance_timeout();
        let leader = self.leader.clone().unwrap_or_default();
        let leader_answer = {
            let first = &self.members[0];
            self.current_join_answer(first, true)
        };
        for member in &mut self.members {
            member.last_seen_ms = now_ms;
            let mut answer = leader_answer.clone();
            answer.member_id = member.id.clone();
            if member.id != leader {
                answer.members = Vec::new();
            }
            member.answer_join(answer);
        }
        None
    }

    /// Kafka's vote: among the protocols every member supports, the one most members list
    /// first (ties to the earliest in the first member's preference order).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(name, _)| name)
            .filter(|name| {
                self.members
                    .iter()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .collect();
        let mut best: Option<(&String, usize)> = None;
        for candidate in &candidates {
            let votes = self
                .members
                .iter()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .map(|(n, _)| n)
                        .find(|n| candidates.contains(n))
                        == Some(*candidate)
                })
                .count();
            if best.is_none_or(|(_, most)| votes > most) {
                best = Some((candidate, votes));
            }
        }
        best.map(|(name, _)| name.clone())
    }

    fn persist(&self) -> Persist {
        Persist {
            generation: self.generation,
            value: self.to_value(),
            rejoined: None,
        }
    }

    /// SyncGroup. The leader's request carries the assignment; every member's answer waits
    /// until it is written (the coordinator calls [`Group::synced`]).
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        reply: SyncReply,
        now_ms: i64,
    ) -> Option<Persist> {
        let refuse = |reply: SyncReply, error: ResponseError| {
            let _ = reply.send(SyncAnswer::error(error));
            None
        };
        if self.state == GroupState::Dead {
            return refuse(reply, ResponseError::CoordinatorNotAvailable);
        }
        let index = match self.check_member(member_id, instance_id) {
            Ok(index) => index,
            Err(error) => return refuse(reply, error),
        };
        if generation != self.generation {
            return refuse(reply, ResponseError::IllegalGeneration);
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol.is_some_and(|p| Some(p) != self.protocol.as_deref())
        {
            return refuse(reply, ResponseError::InconsistentGroupProtocol);
        }
        self.members[index].last_seen_ms = now_ms;
        match self.state {
            GroupState::Empty | GroupState::Dead => refuse(reply, ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => refuse(reply, ResponseError::RebalanceInProgress),
            GroupState::Stable => {
                let _ = reply.send(self.sync_answer(index));
                None
            }
            GroupState::CompletingRebalance => {
                self.members[index].sync = Some(reply);
                if self.leader.as_deref() != Some(member_id) {
                    return None;
                }
                let mut given: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                for member in &mut self.members {
                    member.assignment = given.remove(&member.id).unwrap_or_default();
                }
                Some(self.persist())
            }
        }
    }

    fn sync_answer(&self, index: usize) -> SyncAnswer {
        SyncAnswer {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            assignment: self.members[index].assignment.clone(),
        }
    }

    /// The group `written` is durable (`Ok`) or could not be written: a completing rebalance of
    /// its generation becomes `Stable` and answers every waiting SyncGroup, or (on failure)
    /// answers them with `error` and rebalances again; a replaced static member's JoinGroup
    /// waiting for it is answered ([`Group::finish_static_rejoin`]).
    pub fn synced(
        &mut self,
        written: &Persist,
        result: Result<(), ResponseError>,
        now_ms: i64,
        settings: &GroupSettings,
    ) {
        if let Some(member_id) = &written.rejoined {
            if self.state == GroupState::Stable && self.generation == written.generation {
                self.finish_static_rejoin(member_id, result);
            }
            return;
        }
        if self.state != GroupState::CompletingRebalance || self.generation != written.generation {
            return;
        }
        match result {
            Ok(()) => {
                self.set_state(GroupState::Stable, now_ms);
                for index in 0..self.members.len() {
                    let answer = self.sync_answer(index);
                    self.members[index].answer_sync(answer);
                }
            }
            Err(error) => {
                for member in &mut self.members {
                    member.answer_sync(SyncAnswer::error(error));
                }
                self.prepare_rebalance(now_ms, settings);
            }
        }
    }

    /// Heartbeat.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
        match self.state {
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            _ => {}
        }
        let index = self.check_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        self.members[index].last_seen_ms = now_ms;
        if self.state == GroupState::PreparingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// LeaveGroup for each (member id, instance id); the per-member answers, and what must be
    /// written if the group became empty.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        now_ms: i64,
        settings: &GroupSettings,
    ) -> (Vec<Option<ResponseError>>, Option<Persist>) {
        let mut answers = Vec::new();
        let mut removed = false;
        for (member_id, instance_id) in leaving {
            let found = match instance_id {
                Some(instance) => match self.instance_index(instance) {
                    Some(index) if member_id.is_empty() || self.members[index].id == *member_id => {
                        Ok(index)
                    }
                    Some(_) => Err(ResponseError::FencedInstanceId),
                    None => Err(ResponseError::UnknownMemberId),
                },
                None => {
                    if self.pending.remove(member_id).is_some() {
                        answers.push(None);
                        continue;
                    }
                    self.member_index(member_id)
                        .ok_or(ResponseError::UnknownMemberId)
                }
            };
            match found {
                Ok(index) => {
                    self.remove_member(index);
                    removed = true;
                    answers.push(None);
                }
                Err(error) => answers.push(Some(error)),
            }
        }
        let persist = if removed {
            self.after_removal(now_ms, settings)
        } else {
            None
        };
        (answers, persist)
    }

    fn remove_member(&mut self, index: usize) {
        let mut member = self.members.remove(index);
        self.static_rejoins.retain(|r| r.member_id != member.id);
        member.answer_join(JoinAnswer::error(
            ResponseError::UnknownMemberId,
            &member.id,
        ));
        member.answer_sync(SyncAnswer::error(ResponseError::UnknownMemberId));
        if self.leader.as_deref() == Some(member.id.as_str()) {
            self.leader = self.members.first().map(|m| m.id.clone());
        }
    }

    fn after_removal(&mut self, now_ms: i64, settings: &GroupSettings) -> Option<Persist> {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(
                    now_ms,
                    &GroupSettings {
                        initial_rebalance_delay_ms: 0,
                        ..*settings
                    },
                );
                self.maybe_complete_join(now_ms)
            }
            GroupState::PreparingRebalance => self.maybe_complete_join(now_ms),
            GroupState::Empty | GroupState::Dead => None,
        }
    }

    /// Timers: pending member ids and silent members expire, a rebalance phase ends at its
    /// deadline (members that did not answer are dropped). Returns what must be written.
    pub fn tick(&mut self, now_ms: i64, settings: &GroupSettings) -> Option<Persist> {
        self.pending.retain(|_, deadline| *deadline > now_ms);
        let mut expired = false;
        let mut index = 0;
        while index < self.members.len() {
            let m = &self.members[index];
            let waiting = m.join.is_some() || m.sync.is_some();
            if !waiting && now_ms - m.last_seen_ms > i64::from(m.session_timeout_ms) {
                tracing::info!(group = %self.id, member = %m.id, "member session expired");
                self.remove_member(index);
                expired = true;
            } else {
                index += 1;
            }
        }
        if self.state == GroupState::CompletingRebalance && now_ms >= self.phase_deadline_ms {
            // The leader's assignment never came: drop the members that did not sync.
            let before = self.members.len();
            let mut i = 0;
            while i < self.members.len() {
                if self.members[i].sync.is_none() {
                    self.remove_member(i);
                } else {
                    i += 1;
                }
            }
            expired |= self.members.len() != before;
        }
        if expired {
            return self.after_removal(now_ms, settings);
        }
        self.maybe_complete_join(now_ms)
    }

    /// Kafka's OffsetCommit validation for this group (`ClassicGroup.validateOffsetCommit`), in
    /// its order: the member and its generation first, the state last. A commit outside any
    /// generation (`-1`, as `assign()` consumers and admin clients send) only while the group is
    /// empty. A member of the current generation commits while the group prepares a rebalance
    /// (a cooperative member still owns its partitions, KIP-429); a commit of an older
    /// generation is `ILLEGAL_GENERATION` whatever the state; only between the JoinGroup answers
    /// and the durable assignment (`CompletingRebalance`) is a current member told
    /// `REBALANCE_IN_PROGRESS`.
    pub fn validate_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        if self.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.check_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        } else {
            // No member id and no generation while the group has members.
            return Err(ResponseError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// Fails every waiting JoinGroup and SyncGroup with `error` (the coordinator moved away).
    pub fn abandon(&mut self, error: ResponseError) {
        for member in &mut self.members {
            let id = member.id.clone();
            member.answer_join(JoinAnswer::error(error, &id));
            member.answer_sync(SyncAnswer::error(error));
        }
    }

    /// `offsets.retention.minutes` (Kafka's rule, KIP-211): the committed offsets that expired,
    /// each with the commit time it had. Only an `Empty` group loses offsets: a consumer group
    /// (one that had members) all of them once it has been empty for `retention_ms`; a group
    /// only ever committed to (`assign()` consumers, admin tools) each one `retention_ms` after
    /// its commit. Offsets of groups with members never expire here (Kafka's KIP-496 expiry of
    /// unsubscribed topics is not done).
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: i64) -> Vec<((String, i32), i64)> {
        if self.state != GroupState::Empty {
            return Vec::new();
        }
        let emptied_long_ago = now_ms.saturating_sub(self.state_timestamp_ms) >= retention_ms;
        self.offsets
            .iter()
            .filter(|(_, v)| match self.protocol_type {
                Some(_) => emptied_long_ago,
                None => now_ms.saturating_sub(v.commit_timestamp) >= retention_ms,
            })
            .map(|(k, v)| (k.clone(), v.commit_timestamp))
            .collect()
    }

    /// Whether the group is `Empty` with no join under way (no member id handed out and not
    /// yet used): once it has no offsets either, offset expiry deletes it.
    pub fn is_idle(&self) -> bool {
        self.state == GroupState::Empty && self.pending.is_empty()
    }

    /// DeleteGroups: the group becomes `Dead` (only an empty group may be deleted).
    pub fn mark_dead(&mut self, now_ms: i64) {
        self.set_state(GroupState::Dead, now_ms);
    }
}

#[cfg(test)]
mod tests;
