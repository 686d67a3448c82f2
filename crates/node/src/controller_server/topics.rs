//! CreateTopics (19, v2–7), DeleteTopics (20, v1–6) and CreatePartitions (37, v0–3), as a
//! KRaft controller answers them (brokers forward these unchanged).
//!
//! CreateTopics: a name listed twice is `INVALID_REQUEST` for every copy; names follow Kafka's
//! rules (`INVALID_TOPIC_EXCEPTION`); `num_partitions` / `replication_factor` -1 mean the
//! controller's `num.partitions` / `default.replication.factor`; an explicit assignment excludes
//! both (`INVALID_REQUEST`); otherwise replicas are assigned round-robin over the unfenced
//! brokers (`INVALID_REPLICATION_FACTOR` when too few). A configured `min.insync.replicas` is
//! stamped on topics that do not set it. `validate_only` checks everything and writes nothing.
//! The answered configs (v5+) are the topic's explicit configs (source DYNAMIC_TOPIC_CONFIG).

use std::collections::BTreeMap;

use std::collections::VecDeque;

use keel_controller::types::{BrokerId, TopicId};
use keel_controller::{
    too_many_partitions, topic_batch_partitions, ApiError, CreatePartitionsRequest as Grow,
    CreateTopicRequest, EXCESSIVE_PARTITIONS, MAX_PARTITIONS_PER_REQUEST, MAX_RECORDS_PER_BATCH,
    MAX_REPLICAS_PER_REQUEST,
};
use keel_wire::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use keel_wire::kafka_protocol::messages::create_topics_request::CreatableTopic;
use keel_wire::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use keel_wire::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use keel_wire::kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;
use uuid::Uuid;

use super::state::{CallError, ControllerHandle, ControllerState, ControllerStateError};
use super::Settings;

/// Kafka's longest topic name.
pub const TOPIC_NAME_MAX_LEN: usize = 249;

/// Kafka's `ConfigSource.DYNAMIC_TOPIC_CONFIG`.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// An error answered for one topic: Kafka's code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopicError {
    pub code: i16,
    pub message: String,
}

impl TopicError {
    fn wire(error: ResponseError, message: impl Into<String>) -> Self {
        TopicError {
            code: error.code(),
            message: message.into(),
        }
    }
}

impl From<ApiError> for TopicError {
    fn from(e: ApiError) -> Self {
        TopicError {
            code: e.code.code(),
            message: e.message,
        }
    }
}

fn str_bytes(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// Kafka's topic-name rules: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(super) fn check_topic_name(name: &str) -> Result<(), TopicError> {
    let invalid = |why: String| TopicError::wire(ResponseError::InvalidTopicException, why);
    if name.is_empty() || name == "." || name == ".." {
        return Err(invalid(format!("Topic name {name:?} is illegal")));
    }
    if name.len() > TOPIC_NAME_MAX_LEN {
        return Err(invalid(format!(
            "Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LEN} characters"
        )));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(invalid(format!(
            "Topic name {name:?} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )));
    }
    Ok(())
}

/// One topic to create, after the wire-level checks.
#[derive(Debug, Clone)]
struct TopicPlan {
    name: String,
    num_partitions: u32,
    replication_factor: usize,
    assignment: Option<Vec<Vec<BrokerId>>>,
    configs: BTreeMap<String, String>,
}

fn plan(topic: &CreatableTopic, settings: &Settings) -> Result<TopicPlan, TopicError> {
    let name = topic.name.to_string();
    check_topic_name(&name)?;
    let mut configs = BTreeMap::new();
    for config in &topic.configs {
        let Some(value) = &config.value else {
            return Err(TopicError::wire(
                ResponseError::InvalidConfig,
                format!(
                    "Null value not supported for topic configs: {}",
                    config.name.as_str()
                ),
            ));
        };
        configs.insert(config.name.to_string(), value.to_string());
    }
    if let Some(min_isr) = settings.min_insync_replicas {
        configs
            .entry(keel_controller::config::MIN_INSYNC_REPLICAS.to_string())
            .or_insert_with(|| min_isr.to_string());
    }
    for (key, value) in &settings.topic_defaults {
        configs.entry(key.clone()).or_insert_with(|| value.clone());
    }
    if !topic.assignments.is_empty() {
        if topic.assignments.len() > MAX_PARTITIONS_PER_REQUEST as usize {
            return Err(too_many_partitions(&name, topic.assignments.len()).into());
        }
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(TopicError::wire(
                ResponseError::InvalidRequest,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
            ));
        }
        let mut by_index = BTreeMap::new();
        for a in &topic.assignments {
            let replicas = a.broker_ids.iter().map(|b| BrokerId(b.0)).collect();
            if by_index.insert(a.partition_index, replicas).is_some() {
                return Err(TopicError::wire(
                    ResponseError::InvalidReplicaAssignment,
                    format!("Partition {} is listed twice", a.partition_index),
                ));
            }
        }
        let consecutive = by_index.keys().copied().eq(0..by_index.len() as i32);
        if !consecutive {
            return Err(TopicError::wire(
                ResponseError::InvalidReplicaAssignment,
                "Partitions must be numbered consecutively from 0",
            ));
        }
        let assignment: Vec<Vec<BrokerId>> = by_index.into_values().collect();
        return Ok(TopicPlan {
            name,
            num_partitions: assignment.len() as u32,
            replication_factor: assignment.first().map_or(0, Vec::len),
            assignment: Some(assignment),
            configs,
        });
    }
    let num_partitions = match topic.num_partitions {
        -1 => settings.num_partitions,
        n if n > 0 => n as u32,
        n => {
            return Err(TopicError::wire(
                ResponseError::InvalidPartitions,
                format!("Number of partitions was set to an invalid non-positive value {n}."),
            ))
        }
    };
    if num_partitions > MAX_PARTITIONS_PER_REQUEST {
        return Err(too_many_partitions(&name, num_partitions).into());
    }
    let replication_factor = match topic.replication_factor {
        -1 => usize::from(settings.default_replication_factor),
        n if n > 0 => n as usize,
        n => {
            return Err(TopicError::wire(
                ResponseError::InvalidReplicationFactor,
                format!("Replication factor must be larger than 0, or -1 to use the default value, not {n}."),
            ))
        }
    };
    Ok(TopicPlan {
        name,
        num_partitions,
        replication_factor,
        assignment: None,
        configs,
    })
}

/// Checks one topic as its creation would, building nothing in proportion to its partition
/// count: the replication factor against the live brokers (one partition's round-robin
/// assignment stands for all), or every partition of a manual assignment.
fn validate_plan(s: &ControllerState, plan: TopicPlan) -> Result<TopicPlan, TopicError> {
    let assignment = match &plan.assignment {
        Some(assignment) => assignment.clone(),
        None => s
            .controller()
            .assign_replicas(1, plan.replication_factor)
            .map_err(TopicError::from)?,
    };
    if plan.num_partitions > MAX_PARTITIONS_PER_REQUEST {
        return Err(TopicError::from(too_many_partitions(
            &plan.name,
            plan.num_partitions,
        )));
    }
    let request = CreateTopicRequest {
        name: plan.name.clone(),
        id: TopicId(s.new_uuid()),
        assignment,
        configs: plan.configs.clone(),
    };
    s.controller().validate_create_topic(&request)?;
    Ok(plan)
}

/// The request-level bounds (Kafka fails the whole request over its partition limit): the new
/// partitions and replicas of all topics together. Counted from the plans, before anything is
/// assigned or built.
fn check_request_size(plans: &[Result<TopicPlan, TopicError>]) -> Result<(), TopicError> {
    let (partitions, replicas) = plans.iter().flatten().fold((0u64, 0u64), |(p, r), plan| {
        let n = u64::from(plan.num_partitions);
        let replicas = match &plan.assignment {
            Some(assignment) => assignment.iter().map(|a| a.len() as u64).sum(),
            None => n * plan.replication_factor as u64,
        };
        (p + n, r + replicas)
    });
    if partitions > u64::from(MAX_PARTITIONS_PER_REQUEST) {
        return Err(TopicError::wire(
            ResponseError::PolicyViolation,
            format!("{EXCESSIVE_PARTITIONS} {partitions} new partitions; at most {MAX_PARTITIONS_PER_REQUEST} in one request."),
        ));
    }
    if replicas > MAX_REPLICAS_PER_REQUEST {
        return Err(TopicError::wire(
            ResponseError::PolicyViolation,
            format!("{replicas} new replicas in one request; at most {MAX_REPLICAS_PER_REQUEST}."),
        ));
    }
    Ok(())
}

/// A topic whose creation has started: its id and the next partition to write.
#[derive(Debug)]
struct Creating {
    index: usize,
    plan: TopicPlan,
    id: TopicId,
    next: u32,
}

/// What one controller event of a CreateTopics did: the topic left half-way (its next batch
/// waits for this one's commit), the topics not started, and the finished outcomes.
type Progress = (
    Option<Creating>,
    VecDeque<(usize, TopicPlan)>,
    Vec<(usize, Result<(Uuid, TopicPlan), TopicError>)>,
);

/// Writes topics for one controller event: consecutive topics until
/// [`MAX_RECORDS_PER_BATCH`] records are proposed, or one batch of a topic too large for that;
/// the caller awaits the commit before the next event, so other events (heartbeats,
/// AlterPartition) run between batches.
fn create_step(
    s: &mut ControllerState,
    mut current: Option<Creating>,
    mut todo: VecDeque<(usize, TopicPlan)>,
) -> Result<Progress, ControllerStateError> {
    let mut done = Vec::new();
    let mut budget = MAX_RECORDS_PER_BATCH;
    loop {
        let mut c = match current.take() {
            Some(c) => c,
            None => match todo.pop_front() {
                Some((index, plan)) => {
                    let id = TopicId(s.new_uuid());
                    Creating {
                        index,
                        plan,
                        id,
                        next: 0,
                    }
                }
                None => break,
            },
        };
        let total = c.plan.num_partitions;
        let count = topic_batch_partitions(c.next, total, c.plan.configs.len());
        let records = count as usize
            + if c.next == 0 {
                1 + c.plan.configs.len()
            } else {
                0
            };
        if records > budget && budget < MAX_RECORDS_PER_BATCH {
            current = Some(c);
            break;
        }
        let assignment = match &c.plan.assignment {
            Some(assignment) => {
                let from = c.next as usize;
                Ok(assignment[from..from + count as usize].to_vec())
            }
            None => s
                .controller()
                .assign_replicas_from(c.next, count, c.plan.replication_factor),
        };
        let request = assignment.map(|assignment| CreateTopicRequest {
            name: c.plan.name.clone(),
            id: c.id,
            assignment,
            configs: c.plan.configs.clone(),
        });
        let result = match request {
            Ok(request) => {
                let first = c.next;
                if first == 0 && count < total {
                    s.begin_creation(c.id);
                }
                s.commit(|ctl, now_ms| ctl.create_topic_batch(&request, first, total, now_ms))?
            }
            Err(e) => Err(e),
        };
        budget = budget.saturating_sub(records);
        match result {
            Err(e) => {
                if c.next > 0 || count < total {
                    // Roll a half-written topic back.
                    s.end_creation(c.id)?;
                }
                done.push((c.index, Err(TopicError::from(e))));
            }
            Ok(()) => {
                c.next += count;
                if c.next < total {
                    current = Some(c);
                    break;
                }
                if count < total {
                    s.end_creation(c.id)?;
                }
                done.push((c.index, Ok((c.id.0, c.plan))));
            }
        }
        if budget == 0 {
            break;
        }
    }
    Ok((current, todo, done))
}

/// CreateTopics.
pub(super) async fn create(
    handle: &ControllerHandle,
    settings: &Settings,
    req: CreateTopicsRequest,
    version: i16,
) -> Result<CreateTopicsResponse, CallError> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for topic in &req.topics {
        *counts.entry(topic.name.to_string()).or_default() += 1;
    }
    let mut plans: Vec<Result<TopicPlan, TopicError>> = req
        .topics
        .iter()
        .map(|topic| {
            if counts[topic.name.as_str()] > 1 {
                return Err(TopicError::wire(
                    ResponseError::InvalidRequest,
                    format!(
                        "Create topics request from client contains duplicate topic '{}'",
                        topic.name.as_str()
                    ),
                ));
            }
            plan(topic, settings)
        })
        .collect();
    if let Err(e) = check_request_size(&plans) {
        plans = plans.iter().map(|_| Err(e.clone())).collect();
    }
    let mut outcomes: Vec<Option<Result<(Uuid, TopicPlan), TopicError>>> =
        (0..plans.len()).map(|_| None).collect();
    let mut todo = VecDeque::new();
    for (index, plan) in plans.into_iter().enumerate() {
        match plan {
            Ok(plan) => todo.push_back((index, plan)),
            Err(e) => outcomes[index] = Some(Err(e)),
        }
    }
    if req.validate_only {
        let checked = handle
            .call(move |s| {
                Ok(todo
                    .into_iter()
                    .map(|(index, plan)| (index, validate_plan(s, plan)))
                    .collect::<Vec<_>>())
            })
            .await?;
        for (index, outcome) in checked {
            outcomes[index] = Some(outcome.map(|plan| (Uuid::nil(), plan)));
        }
    } else {
        let mut current = None;
        while current.is_some() || !todo.is_empty() {
            let (next, rest, done) = handle.call(move |s| create_step(s, current, todo)).await?;
            for (index, outcome) in done {
                outcomes[index] = Some(outcome);
            }
            current = next;
            todo = rest;
        }
    }
    let topics = req
        .topics
        .iter()
        .zip(outcomes)
        .map(|(topic, outcome)| {
            let result = CreatableTopicResult::default().with_name(topic.name.clone());
            let outcome = outcome.unwrap_or_else(|| {
                Err(TopicError::wire(
                    ResponseError::UnknownServerError,
                    "the topic was not processed",
                ))
            });
            match outcome {
                Ok((id, plan)) => {
                    let configs = (version >= 5).then(|| {
                        plan.configs
                            .iter()
                            .map(|(name, value)| {
                                CreatableTopicConfigs::default()
                                    .with_name(str_bytes(name.clone()))
                                    .with_value(Some(str_bytes(value.clone())))
                                    .with_read_only(false)
                                    .with_config_source(DYNAMIC_TOPIC_CONFIG)
                                    .with_is_sensitive(false)
                            })
                            .collect()
                    });
                    result
                        .with_error_code(0)
                        .with_topic_id(id)
                        .with_num_partitions(i32::try_from(plan.num_partitions).unwrap_or(i32::MAX))
                        .with_replication_factor(
                            i16::try_from(plan.replication_factor).unwrap_or(i16::MAX),
                        )
                        .with_configs(configs)
                }
                Err(e) => result
                    .with_error_code(e.code)
                    .with_error_message(Some(str_bytes(e.message)))
                    .with_topic_id(Uuid::nil())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
                    .with_configs(None),
            }
        })
        .collect();
    Ok(CreateTopicsResponse::default().with_topics(topics))
}

/// One topic of a DeleteTopics request: by name (v1–5, and v6 when named) or by id (v6).
#[derive(Debug, Clone)]
enum DeleteTarget {
    Name(String),
    Id(Uuid),
    Invalid(TopicError),
}

/// DeleteTopics.
pub(super) async fn delete(
    handle: &ControllerHandle,
    req: DeleteTopicsRequest,
    version: i16,
) -> Result<DeleteTopicsResponse, CallError> {
    let mut targets: Vec<DeleteTarget> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| match (&t.name, t.topic_id.is_nil()) {
                (Some(name), true) => DeleteTarget::Name(name.to_string()),
                (None, false) => DeleteTarget::Id(t.topic_id),
                _ => DeleteTarget::Invalid(TopicError::wire(
                    ResponseError::InvalidRequest,
                    "Give a topic name or a topic id, not both or neither",
                )),
            })
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| DeleteTarget::Name(n.to_string()))
            .collect()
    };
    // A topic listed twice is INVALID_REQUEST for every copy (Kafka's rule).
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for t in &targets {
        match t {
            DeleteTarget::Name(n) => *seen.entry(format!("n:{n}")).or_default() += 1,
            DeleteTarget::Id(id) => *seen.entry(format!("i:{id}")).or_default() += 1,
            DeleteTarget::Invalid(_) => {}
        }
    }
    for t in &mut targets {
        let key = match t {
            DeleteTarget::Name(n) => format!("n:{n}"),
            DeleteTarget::Id(id) => format!("i:{id}"),
            DeleteTarget::Invalid(_) => continue,
        };
        if seen[&key] > 1 {
            *t = DeleteTarget::Invalid(TopicError::wire(
                ResponseError::InvalidRequest,
                "Duplicate topic in request",
            ));
        }
    }
    let results = handle
        .call(move |s| {
            let mut results = Vec::new();
            for target in targets {
                let id = match &target {
                    DeleteTarget::Invalid(e) => {
                        results.push((target.clone(), Err(e.clone())));
                        continue;
                    }
                    DeleteTarget::Name(name) => {
                        s.controller().image().topic_id(name).ok_or_else(|| {
                            TopicError::wire(
                                ResponseError::UnknownTopicOrPartition,
                                "This server does not host this topic-partition.",
                            )
                        })
                    }
                    DeleteTarget::Id(id) => Ok(TopicId(*id)),
                };
                let outcome = match id {
                    Ok(id) => s
                        .commit(|c, now_ms| c.delete_topic(id, now_ms))?
                        .map(|name| (id, name))
                        .map_err(TopicError::from),
                    Err(e) => Err(e),
                };
                results.push((target, outcome));
            }
            Ok(results)
        })
        .await?;
    let responses = results
        .into_iter()
        .map(|(target, outcome)| {
            let requested_name = match &target {
                DeleteTarget::Name(n) => Some(n.clone()),
                _ => None,
            };
            let requested_id = match &target {
                DeleteTarget::Id(id) => *id,
                _ => Uuid::nil(),
            };
            match outcome {
                Ok((id, name)) => DeletableTopicResult::default()
                    .with_name(Some(TopicName(str_bytes(name))))
                    .with_topic_id(id.0)
                    .with_error_code(0),
                Err(e) => DeletableTopicResult::default()
                    .with_name(requested_name.map(|n| TopicName(str_bytes(n))))
                    .with_topic_id(requested_id)
                    .with_error_code(e.code)
                    .with_error_message(Some(str_bytes(e.message))),
            }
        })
        .collect();
    Ok(DeleteTopicsResponse::default().with_responses(responses))
}

/// One CreatePartitions topic: name, new count, assignment, listed more than once.
type GrowItem = (String, i32, Option<Vec<Vec<BrokerId>>>, bool);

/// CreatePartitions.
pub(super) async fn create_partitions(
    handle: &ControllerHandle,
    req: CreatePartitionsRequest,
) -> Result<CreatePartitionsResponse, CallError> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for topic in &req.topics {
        *counts.entry(topic.name.to_string()).or_default() += 1;
    }
    let validate_only = req.validate_only;
    let items: Vec<GrowItem> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.count,
                t.assignments.as_ref().map(|a| {
                    a.iter()
                        .map(|x| x.broker_ids.iter().map(|b| BrokerId(b.0)).collect())
                        .collect()
                }),
                counts[t.name.as_str()] > 1,
            )
        })
        .collect();
    let outcomes = handle
        .call(move |s| {
            let mut outcomes = Vec::new();
            for (name, count, assignment, duplicate) in items {
                if duplicate {
                    outcomes.push(Err(TopicError::wire(
                        ResponseError::InvalidRequest,
                        "Duplicate topic in request.",
                    )));
                    continue;
                }
                let Some(topic) = s.controller().image().topic_id(&name) else {
                    outcomes.push(Err(TopicError::wire(
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.",
                    )));
                    continue;
                };
                let Ok(count) = u32::try_from(count) else {
                    outcomes.push(Err(TopicError::wire(
                        ResponseError::InvalidPartitions,
                        format!("The topic {name} cannot have {count} partitions."),
                    )));
                    continue;
                };
                let request = Grow {
                    topic,
                    count,
                    assignment,
                };
                let result = if validate_only {
                    s.controller().validate_create_partitions(&request)
                } else {
                    s.commit(|c, now_ms| c.create_partitions(&request, now_ms))?
                };
                outcomes.push(result.map_err(TopicError::from));
            }
            Ok(outcomes)
        })
        .await?;
    let results = req
        .topics
        .iter()
        .zip(outcomes)
        .map(|(t, outcome)| {
            let result = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            match outcome {
                Ok(()) => result.with_error_code(0),
                Err(e) => result
                    .with_error_code(e.code)
                    .with_error_message(Some(str_bytes(e.message))),
            }
        })
        .collect();
    Ok(CreatePartitionsResponse::default().with_results(results))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shows: Kafka's topic-name rules (Topic.validate): legal characters, length, "." and "..".
    #[test]
    fn topic_names() {
        assert!(check_topic_name("orders_v1.x-y").is_ok());
        for bad in ["", ".", "..", "a b", "é", &"x".repeat(250)] {
            assert_eq!(
                check_topic_name(bad).unwrap_err().code,
                ResponseError::InvalidTopicException.code(),
                "{bad:?}"
            );
        }
    }
}
