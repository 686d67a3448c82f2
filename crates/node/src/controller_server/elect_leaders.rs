//! ElectLeaders (43, v0–2): `ElectionType` 0 = PREFERRED (v0 always), 1 = UNCLEAN, mapped onto
//! `Controller::elect_each` (preferred: `ELECTION_NOT_NEEDED`, `PREFERRED_LEADER_NOT_AVAILABLE`;
//! unclean: a clean candidate if one exists, else KIP-966 unclean recovery — answered as success
//! with the message [`RECOVERY_STARTED`]). Keel's tagged fields (`keel_wire::keel_ext`, v2):
//! `RecoveryMode` picks Balanced instead of Proactive for a recovery started here, and a topic's
//! `DesiredLeaders` elects exactly the named replica per partition (KIP-966 "directly select a
//! leader": it must be a replica — `INVALID_REPLICA_ASSIGNMENT` — and live —
//! `ELIGIBLE_LEADERS_NOT_AVAILABLE`; a replica in neither ISR nor ELR is elected with the
//! message [`UNCLEAN_WARNING`]). `TopicPartitions = null` means every partition, and then
//! `ELECTION_NOT_NEEDED` results are left out (Kafka). Unknown topics and partitions are
//! `UNKNOWN_TOPIC_OR_PARTITION`; a malformed or mismatched `DesiredLeaders` is
//! `INVALID_REQUEST` for that topic's partitions.

use std::collections::BTreeMap;

use keel_controller::types::{BrokerId, RecoveryMode, TopicId, TopicPartition};
use keel_controller::{ElectionOutcome, ElectionType, ErrorCode};
use keel_wire::kafka_protocol::messages::elect_leaders_response::{
    PartitionResult, ReplicaElectionResult,
};
use keel_wire::kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::keel_ext::{self, RecoveryModeField, RECOVERY_STARTED, UNCLEAN_WARNING};
use keel_wire::ResponseError;

use super::state::{CallError, ControllerHandle};

/// One answered partition: topic name, index, error code and message.
type Answer = (String, i32, i16, Option<String>);

/// One partition to elect: topic name, index, the partition and how.
type Target = (String, i32, TopicPartition, ElectionType);

/// One requested topic: its name and, per partition, the desired leader if one was named
/// (`Err` = the `DesiredLeaders` field is unusable).
type Requested = (String, Vec<i32>, Result<Option<Vec<i32>>, &'static str>);

/// ElectLeaders.
pub(super) async fn handle(
    handle: &ControllerHandle,
    req: ElectLeadersRequest,
    version: i16,
) -> Result<ElectLeadersResponse, CallError> {
    let mode = match req
        .unknown_tagged_fields
        .get(&keel_ext::RECOVERY_MODE_TAG)
        .map(keel_ext::decode_recovery_mode)
    {
        None | Some(Ok(RecoveryModeField::Proactive)) => RecoveryMode::Proactive,
        Some(Ok(RecoveryModeField::Balanced)) => RecoveryMode::Balanced,
        Some(Err(_)) => {
            return Ok(ElectLeadersResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code()))
        }
    };
    let election = match (version, req.election_type) {
        (0, _) | (_, 0) => ElectionType::Preferred,
        (_, 1) => ElectionType::Unclean { mode: Some(mode) },
        (_, _) => {
            return Ok(ElectLeadersResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code()))
        }
    };
    let listed: usize = req
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| t.partitions.len())
        .sum();
    if listed > keel_controller::MAX_PARTITIONS_PER_REQUEST as usize {
        return Ok(
            ElectLeadersResponse::default().with_error_code(ResponseError::PolicyViolation.code())
        );
    }
    let requested: Option<Vec<Requested>> = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .map(|t| {
                let desired = match t.unknown_tagged_fields.get(&keel_ext::DESIRED_LEADERS_TAG) {
                    None => Ok(None),
                    Some(bytes) => match keel_ext::decode_desired_leaders(bytes) {
                        Ok(leaders) if leaders.len() == t.partitions.len() => Ok(Some(leaders)),
                        Ok(_) => Err("DesiredLeaders must name one leader per partition"),
                        Err(_) => Err("DesiredLeaders does not decode"),
                    },
                };
                (t.topic.to_string(), t.partitions.clone(), desired)
            })
            .collect()
    });
    let all = requested.is_none();
    let (targets, mut answers) = handle
        .call(move |s| {
            let image = s.controller().image();
            let mut answers: Vec<Answer> = Vec::new();
            let mut targets: Vec<Target> = Vec::new();
            match requested {
                None => {
                    for (tp, _) in image.partitions() {
                        let name = image
                            .topic(tp.topic)
                            .map_or_else(String::new, |t| t.name.clone());
                        targets.push((name, tp.partition as i32, tp, election));
                    }
                }
                Some(requested) => {
                    for (name, partitions, desired) in requested {
                        let desired = match desired {
                            Ok(desired) => desired,
                            Err(message) => {
                                for index in partitions {
                                    answers.push((
                                        name.clone(),
                                        index,
                                        ErrorCode::InvalidRequest.code(),
                                        Some(message.to_string()),
                                    ));
                                }
                                continue;
                            }
                        };
                        let id: Option<TopicId> = image.topic_id(&name);
                        for (i, index) in partitions.into_iter().enumerate() {
                            let tp = id.and_then(|id| {
                                let index = u32::try_from(index).ok()?;
                                let tp = TopicPartition::new(id, index);
                                image.partition(tp).map(|_| tp)
                            });
                            let this = match &desired {
                                Some(leaders) => ElectionType::Manual(BrokerId(leaders[i])),
                                None => election,
                            };
                            match tp {
                                Some(tp) => targets.push((name.clone(), index, tp, this)),
                                None => answers.push((
                                    name.clone(),
                                    index,
                                    ErrorCode::UnknownTopicOrPartition.code(),
                                    Some("The partition does not exist.".to_string()),
                                )),
                            }
                        }
                    }
                }
            }
            Ok((targets, answers))
        })
        .await?;
    // Elections are independent: run them in batches, each committed before the next, so a
    // request over every partition of a large cluster never writes one huge entry.
    let mut targets = targets.into_iter();
    loop {
        let chunk: Vec<Target> = targets
            .by_ref()
            .take(keel_controller::MAX_RECORDS_PER_BATCH)
            .collect();
        if chunk.is_empty() {
            break;
        }
        let answered = handle
            .call(move |s| {
                let elections: Vec<(TopicPartition, ElectionType)> =
                    chunk.iter().map(|(_, _, tp, e)| (*tp, *e)).collect();
                let results = s.commit(|c, now_ms| c.elect_each(&elections, now_ms))?;
                Ok(chunk
                    .into_iter()
                    .zip(results)
                    .filter_map(|((name, index, _, this), result)| {
                        answer_of(name, index, this, result.result, all)
                    })
                    .collect::<Vec<Answer>>())
            })
            .await?;
        answers.extend(answered);
    }
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for (name, index, code, message) in answers {
        if !by_topic.contains_key(&name) {
            order.push(name.clone());
        }
        by_topic.entry(name).or_default().push(
            PartitionResult::default()
                .with_partition_id(index)
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string)),
        );
    }
    let results = order
        .into_iter()
        .map(|name| {
            let partitions = by_topic.remove(&name).unwrap_or_default();
            ReplicaElectionResult::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_partition_result(partitions)
        })
        .collect();
    Ok(ElectLeadersResponse::default()
        .with_error_code(0)
        .with_replica_election_results(results))
}

/// The answer for one election's result (`None`: left out, Kafka's rule for
/// `ELECTION_NOT_NEEDED` when every partition was asked for).
fn answer_of(
    name: String,
    index: i32,
    this: ElectionType,
    result: Result<ElectionOutcome, ErrorCode>,
    all: bool,
) -> Option<Answer> {
    Some(match result {
        Err(code @ ErrorCode::InvalidReplicaAssignment) if manual(this).is_some() => {
            let b = manual(this).unwrap_or_default();
            let m = format!("broker {b} is not a replica of this partition");
            (name, index, code.code(), Some(m))
        }
        Err(code @ ErrorCode::EligibleLeadersNotAvailable) if manual(this).is_some() => {
            let b = manual(this).unwrap_or_default();
            let m = format!("broker {b} is not live (fenced, shutting down or not registered)");
            (name, index, code.code(), Some(m))
        }
        Ok(ElectionOutcome::Elected { warning: false, .. }) => (name, index, 0, None),
        Ok(ElectionOutcome::Elected { warning: true, .. }) => {
            (name, index, 0, Some(UNCLEAN_WARNING.to_string()))
        }
        Ok(ElectionOutcome::RecoveryStarted) => {
            (name, index, 0, Some(RECOVERY_STARTED.to_string()))
        }
        Err(ErrorCode::ElectionNotNeeded) if all => return None,
        Err(code) => (name, index, code.code(), Some(code.name().to_string())),
    })
}

/// The broker a manual election names.
fn manual(election: ElectionType) -> Option<i32> {
    match election {
        ElectionType::Manual(b) => Some(b.0),
        _ => None,
    }
}
