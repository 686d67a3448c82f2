//! ElectLeaders (43, v0–2): `ElectionType` 0 = PREFERRED (v0 always), 1 = UNCLEAN, mapped onto
//! `Controller::elect_leaders` (preferred: `ELECTION_NOT_NEEDED`,
//! `PREFERRED_LEADER_NOT_AVAILABLE`; unclean: a clean candidate if one exists, else KIP-966
//! unclean recovery — answered as success with the message "unclean recovery started", since
//! its GetReplicaLogInfo requests are issue 7's). `TopicPartitions = null` means every partition,
//! and then `ELECTION_NOT_NEEDED` results are left out (Kafka). Unknown topics and partitions are
//! `UNKNOWN_TOPIC_OR_PARTITION`.

use std::collections::BTreeMap;

use keel_controller::types::{TopicId, TopicPartition};
use keel_controller::{ElectionOutcome, ElectionType, ErrorCode};
use keel_wire::kafka_protocol::messages::elect_leaders_response::{
    PartitionResult, ReplicaElectionResult,
};
use keel_wire::kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use keel_wire::kafka_protocol::protocol::StrBytes;
use keel_wire::ResponseError;

use super::state::{CallError, ControllerHandle};

/// One answered partition: topic name, index, error code and message.
type Answer = (String, i32, i16, Option<String>);

/// ElectLeaders.
pub(super) async fn handle(
    handle: &ControllerHandle,
    req: ElectLeadersRequest,
    version: i16,
) -> Result<ElectLeadersResponse, CallError> {
    let election = match (version, req.election_type) {
        (0, _) | (_, 0) => ElectionType::Preferred,
        (_, 1) => ElectionType::Unclean { mode: None },
        (_, _) => {
            return Ok(ElectLeadersResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code()))
        }
    };
    let requested: Option<Vec<(String, Vec<i32>)>> = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .map(|t| (t.topic.to_string(), t.partitions.clone()))
            .collect()
    });
    let all = requested.is_none();
    let answers: Vec<Answer> = handle
        .call(move |s| {
            let image = s.controller().image();
            let mut answers: Vec<Answer> = Vec::new();
            let mut targets: Vec<(String, i32, TopicPartition)> = Vec::new();
            match requested {
                None => {
                    for (tp, _) in image.partitions() {
                        let name = image
                            .topic(tp.topic)
                            .map_or_else(String::new, |t| t.name.clone());
                        targets.push((name, tp.partition as i32, tp));
                    }
                }
                Some(requested) => {
                    for (name, partitions) in requested {
                        let id: Option<TopicId> = image.topic_id(&name);
                        for index in partitions {
                            let tp = id.and_then(|id| {
                                let index = u32::try_from(index).ok()?;
                                let tp = TopicPartition::new(id, index);
                                image.partition(tp).map(|_| tp)
                            });
                            match tp {
                                Some(tp) => targets.push((name.clone(), index, tp)),
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
            let partitions: Vec<TopicPartition> = targets.iter().map(|(_, _, tp)| *tp).collect();
            let results = s.commit(|c, now_ms| c.elect_leaders(election, &partitions, now_ms))?;
            for ((name, index, _), result) in targets.into_iter().zip(results) {
                let answer = match result.result {
                    Ok(ElectionOutcome::Elected { .. }) => (name, index, 0, None),
                    Ok(ElectionOutcome::RecoveryStarted) => {
                        (name, index, 0, Some("unclean recovery started".to_string()))
                    }
                    Err(ErrorCode::ElectionNotNeeded) if all => continue,
                    Err(code) => (name, index, code.code(), Some(code.name().to_string())),
                };
                answers.push(answer);
            }
            Ok(answers)
        })
        .await?;
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
