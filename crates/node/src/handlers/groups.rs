//! The classic group protocol on the group's coordinator ([`crate::coordinator`]): JoinGroup
//! (11, v0–9), SyncGroup (14, v0–5), Heartbeat (12, v0–4), LeaveGroup (13, v0–5), ListGroups
//! (16, v0–5), DescribeGroups (15, v0–5), DeleteGroups (42, v0–2).
//!
//! Every group call first finds the group's `__consumer_offsets` partition: a broker that does
//! not lead it answers `NOT_COORDINATOR` (the client looks the coordinator up again). JoinGroup
//! and SyncGroup answers may wait — for the other members to join, for the leader's assignment
//! and for it to be written with acks=all — on oneshot channels the group state machine keeps.

use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use std::sync::Arc;

use bytes::Bytes;
use keel_wire::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use keel_wire::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use keel_wire::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use keel_wire::kafka_protocol::messages::leave_group_response::MemberResponse;
use keel_wire::kafka_protocol::messages::list_groups_response::ListedGroup;
use keel_wire::kafka_protocol::messages::*;
use keel_wire::ResponseError;
use tokio::sync::oneshot;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinator::group::{Group, GroupState, JoinAnswer, JoinArgs, SyncAnswer};
use crate::coordinator::records::{RecordKey, MAX_STRING_BYTES};

/// Who sent a request: the header's client id and the connection's peer.
pub struct Caller<'a> {
    pub client_id: &'a str,
    pub peer: &'a str,
    pub session: &'a crate::connection::Session,
}

/// May the session do `operation` on `group` (Kafka's GROUP resource)?
fn group_allowed(
    broker: &Broker,
    session: &crate::connection::Session,
    api: keel_wire::kafka_protocol::messages::ApiKey,
    operation: AclOperation,
    group: &str,
) -> bool {
    super::authz::Authz::new(broker, session, api).allows(operation, ResourceType::Group, group)
}

impl Caller<'_> {
    /// Kafka's `clientHost`: `/` and the peer's address without the port.
    fn host(&self) -> String {
        let ip = self
            .peer
            .rsplit_once(':')
            .map_or(self.peer, |(ip, _)| ip)
            .trim_start_matches('[')
            .trim_end_matches(']');
        format!("/{ip}")
    }
}

fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn opt_str(s: Option<String>) -> Option<keel_wire::kafka_protocol::protocol::StrBytes> {
    s.map(str_bytes)
}

fn join_response(answer: JoinAnswer, version: i16) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(code(answer.error))
        .with_generation_id(answer.generation)
        // v7+ carries the protocol type; before it only the name (null there means none).
        .with_protocol_type(if version >= 7 {
            opt_str(answer.protocol_type)
        } else {
            None
        })
        .with_protocol_name(if version >= 7 {
            opt_str(answer.protocol)
        } else {
            Some(str_bytes(answer.protocol.unwrap_or_default()))
        })
        .with_leader(str_bytes(answer.leader))
        .with_skip_assignment(answer.skip_assignment)
        .with_member_id(str_bytes(answer.member_id))
        .with_members(
            answer
                .members
                .into_iter()
                .map(|(id, instance, metadata)| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(id))
                        .with_group_instance_id(opt_str(instance))
                        .with_metadata(metadata)
                })
                .collect(),
        )
}

/// JoinGroup.
pub async fn join(
    broker: &Arc<Broker>,
    req: JoinGroupRequest,
    version: i16,
    caller: Caller<'_>,
) -> JoinGroupResponse {
    let group_id = req.group_id.to_string();
    let error = |e: ResponseError| join_response(JoinAnswer::error(e, &req.member_id), version);
    // Kafka: READ on the group, before anything else.
    if !group_allowed(
        broker,
        caller.session,
        ApiKey::JoinGroup,
        AclOperation::Read,
        &group_id,
    ) {
        return error(ResponseError::GroupAuthorizationFailed);
    }
    if group_id.is_empty() || group_id.len() > MAX_STRING_BYTES {
        return error(ResponseError::InvalidGroupId);
    }
    let too_long = |s: &str| s.len() > MAX_STRING_BYTES;
    if req.group_instance_id.as_deref().is_some_and(too_long)
        || too_long(&req.protocol_type)
        || req.protocols.iter().any(|p| too_long(&p.name))
    {
        return error(ResponseError::InvalidRequest);
    }
    let args = JoinArgs {
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(ToString::to_string),
        client_id: caller.client_id.to_string(),
        client_host: caller.host(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
    };
    let (tx, rx) = oneshot::channel();
    let settings = broker.coordinator.settings;
    let client_id = args.client_id.clone();
    let outcome = broker.with_groups(&group_id, |groups, now_ms| {
        let group = groups
            .entry(group_id.clone())
            .or_insert_with(|| Group::new(&group_id, now_ms));
        let new_id = || format!("{client_id}-{}", broker.clock.new_uuid());
        group.join(args, tx, now_ms, &settings, new_id)
    });
    match outcome {
        Err(e) => return error(e),
        Ok((scope, Some(persist))) => {
            let broker = broker.clone();
            let group_id = group_id.clone();
            tokio::spawn(async move { broker.persist_group(&group_id, &scope, persist).await });
        }
        Ok((_, None)) => {}
    }
    match rx.await {
        Ok(answer) => join_response(answer, version),
        Err(_) => error(ResponseError::NotCoordinator),
    }
}

fn sync_response(answer: SyncAnswer, version: i16) -> SyncGroupResponse {
    let mut response = SyncGroupResponse::default()
        .with_error_code(code(answer.error))
        .with_assignment(answer.assignment);
    if version >= 5 {
        response = response
            .with_protocol_type(opt_str(answer.protocol_type))
            .with_protocol_name(opt_str(answer.protocol));
    }
    response
}

/// SyncGroup.
pub async fn sync(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    req: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let group_id = req.group_id.to_string();
    if !group_allowed(
        broker,
        session,
        ApiKey::SyncGroup,
        AclOperation::Read,
        &group_id,
    ) {
        let answer = SyncAnswer::error(ResponseError::GroupAuthorizationFailed);
        return sync_response(answer, version);
    }
    if group_id.is_empty() {
        return sync_response(SyncAnswer::error(ResponseError::InvalidGroupId), version);
    }
    let (tx, rx) = oneshot::channel();
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(ToString::to_string);
    let assignments: Vec<(String, Bytes)> = req
        .assignments
        .iter()
        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
        .collect();
    let outcome = broker.with_groups(&group_id, |groups, now_ms| {
        match groups.get_mut(&group_id) {
            Some(group) => group.sync(
                &member,
                instance.as_deref(),
                req.generation_id,
                req.protocol_type.as_deref(),
                req.protocol_name.as_deref(),
                assignments,
                tx,
                now_ms,
            ),
            None => {
                let _ = tx.send(SyncAnswer::error(ResponseError::UnknownMemberId));
                None
            }
        }
    });
    match outcome {
        Err(e) => return sync_response(SyncAnswer::error(e), version),
        Ok((scope, Some(persist))) => {
            let broker = broker.clone();
            tokio::spawn(async move { broker.persist_group(&group_id, &scope, persist).await });
        }
        Ok((_, None)) => {}
    }
    match rx.await {
        Ok(answer) => sync_response(answer, version),
        Err(_) => sync_response(SyncAnswer::error(ResponseError::NotCoordinator), version),
    }
}

/// Heartbeat.
pub fn heartbeat(
    broker: &Broker,
    session: &crate::connection::Session,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    let group_id = req.group_id.to_string();
    let result = if !group_allowed(
        broker,
        session,
        ApiKey::Heartbeat,
        AclOperation::Read,
        &group_id,
    ) {
        Err(ResponseError::GroupAuthorizationFailed)
    } else if group_id.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else {
        broker
            .with_groups(&group_id, |groups, now_ms| {
                match groups.get_mut(&group_id) {
                    Some(group) => group.heartbeat(
                        &req.member_id,
                        req.group_instance_id.as_deref(),
                        req.generation_id,
                        now_ms,
                    ),
                    None => Err(ResponseError::UnknownMemberId),
                }
            })
            .and_then(|(_, r)| r)
    };
    HeartbeatResponse::default().with_error_code(result.err().map_or(0, |e| e.code()))
}

/// LeaveGroup: v0–2 one member id, v3+ a batch of members (with instance ids).
pub async fn leave(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    req: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group_id = req.group_id.to_string();
    if !group_allowed(
        broker,
        session,
        ApiKey::LeaveGroup,
        AclOperation::Read,
        &group_id,
    ) {
        let code = ResponseError::GroupAuthorizationFailed.code();
        return LeaveGroupResponse::default().with_error_code(code);
    }
    let leaving: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(ToString::to_string),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    if group_id.is_empty() {
        return LeaveGroupResponse::default().with_error_code(ResponseError::InvalidGroupId.code());
    }
    let settings = broker.coordinator.settings;
    let outcome = broker.with_groups(&group_id, |groups, now_ms| {
        match groups.get_mut(&group_id) {
            Some(group) => group.leave(&leaving, now_ms, &settings),
            None => (
                vec![Some(ResponseError::UnknownMemberId); leaving.len()],
                None,
            ),
        }
    });
    let answers = match outcome {
        Err(e) => return LeaveGroupResponse::default().with_error_code(e.code()),
        Ok((scope, (answers, persist))) => {
            if let Some(persist) = persist {
                broker.persist_group(&group_id, &scope, persist).await;
            }
            answers
        }
    };
    if version < 3 {
        return LeaveGroupResponse::default().with_error_code(code(answers[0]));
    }
    LeaveGroupResponse::default().with_members(
        leaving
            .into_iter()
            .zip(answers)
            .map(|((member, instance), error)| {
                MemberResponse::default()
                    .with_member_id(str_bytes(member))
                    .with_group_instance_id(opt_str(instance))
                    .with_error_code(code(error))
            })
            .collect(),
    )
}

/// ListGroups: the groups this broker coordinates (clients ask every broker), filtered by state
/// (v4+) and type (v5+, only `classic` exists here).
pub fn list(
    broker: &Broker,
    session: &crate::connection::Session,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    // Kafka: every group with DESCRIBE on the cluster, else those the session may DESCRIBE
    // (both asked quietly).
    let authz = super::authz::Authz::new(broker, session, ApiKey::ListGroups);
    let all = authz.allows_quietly(AclOperation::Describe, ResourceType::Cluster, CLUSTER_NAME);
    broker.load_all_coordinated();
    let states: Vec<String> = req.states_filter.iter().map(|s| s.to_lowercase()).collect();
    let types: Vec<String> = req.types_filter.iter().map(|s| s.to_lowercase()).collect();
    let groups = broker
        .coordinated_groups()
        .into_iter()
        .filter(|(_, state, _)| states.is_empty() || states.contains(&state.to_lowercase()))
        .filter(|_| types.is_empty() || types.iter().any(|t| t == "classic"))
        .filter(|(id, _, _)| {
            all || authz.allows_quietly(AclOperation::Describe, ResourceType::Group, id)
        })
        .map(|(id, state, protocol_type)| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(id)))
                .with_protocol_type(str_bytes(protocol_type))
                .with_group_state(str_bytes(state))
                .with_group_type(str_bytes("classic"))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// DescribeGroups. A group that does not exist is described as `Dead` with no members (Kafka's
/// answer), not as an error.
/// The first DescribeGroups version that answers an unknown group `GROUP_ID_NOT_FOUND`
/// (KIP-1043; Kafka's `GroupMetadataManager.describeGroups`); before it an unknown group is
/// described as Dead with no error.
const DESCRIBE_GROUP_NOT_FOUND_MIN_VERSION: i16 = 6;

pub fn describe(
    broker: &Broker,
    session: &crate::connection::Session,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::DescribeGroups);
    let groups = req
        .groups
        .iter()
        .map(|id| {
            let id = id.to_string();
            // Kafka: DESCRIBE on each group; KIP-430's operations when asked (v3+).
            if !authz.allows(AclOperation::Describe, ResourceType::Group, &id) {
                return DescribedGroup::default()
                    .with_group_id(GroupId(str_bytes(id)))
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            let operations = if req.include_authorized_operations {
                authz.authorized_operations(ResourceType::Group, &id)
            } else {
                i32::MIN
            };
            let described = broker.with_groups(&id, |groups, _| {
                groups.get(&id).map(|g| {
                    (
                        g.state(),
                        g.protocol_type().unwrap_or_default().to_string(),
                        g.protocol().unwrap_or_default().to_string(),
                        g.describe_members(),
                    )
                })
            });
            let base = DescribedGroup::default()
                .with_group_id(GroupId(str_bytes(id.clone())))
                .with_authorized_operations(operations);
            // A Dead group is one Kafka no longer holds: described as not found (v6+).
            let described = described
                .map(|(x, group)| (x, group.filter(|(state, ..)| *state != GroupState::Dead)));
            match described {
                Err(e) => base.with_error_code(e.code()),
                Ok((_, None)) if version >= DESCRIBE_GROUP_NOT_FOUND_MIN_VERSION => base
                    .with_group_state(str_bytes(GroupState::Dead.name()))
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!("Group {id} not found.")))),
                Ok((_, None)) => base
                    .with_group_state(str_bytes(GroupState::Dead.name()))
                    .with_error_code(0),
                Ok((_, Some((state, protocol_type, protocol, members)))) => base
                    .with_error_code(0)
                    .with_group_state(str_bytes(state.name()))
                    .with_protocol_type(str_bytes(protocol_type))
                    .with_protocol_data(str_bytes(protocol))
                    .with_members(
                        members
                            .into_iter()
                            .map(|(member, instance, client, host, metadata, assignment)| {
                                DescribedGroupMember::default()
                                    .with_member_id(str_bytes(member))
                                    .with_group_instance_id(opt_str(instance))
                                    .with_client_id(str_bytes(client))
                                    .with_client_host(str_bytes(host))
                                    .with_member_metadata(metadata)
                                    .with_member_assignment(assignment)
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// DeleteGroups: an empty group's metadata and committed offsets are deleted (tombstones);
/// a group with members is `NON_EMPTY_GROUP`, an unknown one `GROUP_ID_NOT_FOUND`.
pub async fn delete(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::DeleteGroups);
    let mut results = Vec::new();
    for id in &req.groups_names {
        let id = id.to_string();
        // Kafka: DELETE on each group.
        if !authz.allows(AclOperation::Delete, ResourceType::Group, &id) {
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(GroupId(str_bytes(id)))
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code()),
            );
            continue;
        }
        let checked = broker.with_groups(&id, |groups, _| match groups.get(&id) {
            None => Err(ResponseError::GroupIdNotFound),
            Some(g) if g.state() == GroupState::Dead => Err(ResponseError::GroupIdNotFound),
            Some(g) if !g.is_empty() => Err(ResponseError::NonEmptyGroup),
            Some(g) => {
                let mut tombstones: Vec<(RecordKey, Option<Vec<u8>>)> = g
                    .offsets
                    .keys()
                    .map(|(topic, partition)| {
                        (
                            RecordKey::Offset {
                                group: id.clone(),
                                topic: topic.clone(),
                                partition: *partition,
                            },
                            None,
                        )
                    })
                    .collect();
                tombstones.push((RecordKey::Group { group: id.clone() }, None));
                Ok(tombstones)
            }
        });
        let error = match checked {
            Err(e) | Ok((_, Err(e))) => Some(e),
            Ok((scope, Ok(tombstones))) => {
                match broker.write_group_records(&scope, tombstones).await {
                    Ok(()) => {
                        let _ = broker.with_groups(&id, |groups, now_ms| {
                            if let Some(mut g) = groups.remove(&id) {
                                g.mark_dead(now_ms);
                            }
                        });
                        None
                    }
                    Err(e) => Some(e),
                }
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(GroupId(str_bytes(id)))
                .with_error_code(code(error)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
