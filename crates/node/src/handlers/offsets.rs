//! Committed offsets on the group's coordinator: OffsetCommit (8, v2–9), OffsetFetch (9, v1–9;
//! v8+ batches groups), OffsetDelete (47, v0).
//!
//! A commit is checked against the group (Kafka's rules: a commit outside any generation —
//! `generation -1`, no member id, as `assign()` consumers send — only while the group has no
//! members; otherwise the member, its instance id and the generation must match, and not during
//! the sync phase of a rebalance), written to `__consumer_offsets` with acks=all, and only then
//! applied and answered: an answered commit survives the coordinator's `kill -9`. A partition
//! the metadata does not know is answered `UNKNOWN_TOPIC_OR_PARTITION` and not committed.

use keel_controller::acl::{AclOperation, ResourceType};
use std::collections::BTreeMap;
use std::sync::Arc;

use keel_wire::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use keel_wire::kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use keel_wire::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use keel_wire::kafka_protocol::messages::*;
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinator::group::Group;
use crate::coordinator::records::{encode_offset, OffsetValue, RecordKey};

/// OffsetCommit.
pub async fn commit(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    req: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let group_id = req.group_id.to_string();
    // Kafka: READ on the group (else every partition GROUP_AUTHORIZATION_FAILED), then READ on
    // each topic.
    let authz = super::authz::Authz::new(broker, session, ApiKey::OffsetCommit);
    let group_denied = !authz.allows(AclOperation::Read, ResourceType::Group, &group_id);
    let readable: BTreeMap<String, bool> = if group_denied {
        BTreeMap::new()
    } else {
        req.topics
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    authz.topic(AclOperation::Read, t.name.as_str()),
                )
            })
            .collect()
    };
    let max_metadata = broker
        .config
        .offset_metadata_max_bytes
        .min(crate::coordinator::records::MAX_STRING_BYTES);
    // Per partition: the value to write, or the error it gets.
    let mut planned: Vec<(String, i32, Result<OffsetValue, ResponseError>)> = Vec::new();
    let now_ms = broker.clock.now_ms();
    for topic in &req.topics {
        for p in &topic.partitions {
            let metadata = p
                .committed_metadata
                .as_deref()
                .unwrap_or_default()
                .to_string();
            // The topic name is an i16-length string in the offset record's key (and no Kafka
            // topic name is longer than 249 bytes); flexible versions can send longer ones.
            let value = if !group_denied && !readable[topic.name.as_str()] {
                Err(ResponseError::TopicAuthorizationFailed)
            } else if topic.name.len() > crate::coordinator::records::MAX_STRING_BYTES {
                Err(ResponseError::InvalidTopicException)
            } else if !partition_exists(broker, &topic.name, p.partition_index) {
                Err(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > max_metadata {
                Err(ResponseError::OffsetMetadataTooLarge)
            } else {
                Ok(OffsetValue {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata,
                    commit_timestamp: now_ms,
                })
            };
            planned.push((topic.name.to_string(), p.partition_index, value));
        }
    }
    let member = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(ToString::to_string);
    // Kafka answers a request naming no partition it can commit from the metadata alone: the
    // group is neither checked nor created (KafkaApis.handleOffsetCommitRequest).
    let nothing_to_commit = !planned.is_empty() && planned.iter().all(|(_, _, v)| v.is_err());
    let checked = if group_denied {
        Err(ResponseError::GroupAuthorizationFailed)
    } else if nothing_to_commit {
        Ok(None)
    } else if group_id.is_empty() {
        Err(ResponseError::InvalidGroupId)
    } else {
        broker
            .with_groups(&group_id, |groups, now_ms| {
                let generation = req.generation_id_or_member_epoch;
                match groups.get(&group_id) {
                    Some(group) => group.validate_commit(&member, instance.as_deref(), generation),
                    None if generation < 0 => {
                        groups.insert(group_id.clone(), Group::new(&group_id, now_ms));
                        Ok(())
                    }
                    // Kafka (OffsetMetadataManager.validateOffsetCommit): v9+ names the
                    // missing group, older versions keep ILLEGAL_GENERATION.
                    None if version >= 9 => Err(ResponseError::GroupIdNotFound),
                    None => Err(ResponseError::IllegalGeneration),
                }
            })
            .and_then(|(scope, r)| r.map(|()| Some(scope)))
    };
    let outcome = match checked {
        Err(e) => Err(e),
        Ok(None) => Ok(()),
        Ok(Some(scope)) => {
            let records: crate::coordinator::GroupRecords = planned
                .iter()
                .filter_map(|(topic, partition, value)| {
                    let value = value.as_ref().ok()?;
                    Some((
                        RecordKey::Offset {
                            group: group_id.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                        },
                        Some(encode_offset(value)),
                    ))
                })
                .collect();
            let committed = records.len() as u64;
            let written = broker.write_group_records(&scope, records).await;
            if written.is_ok() {
                broker.metrics.offset_commits.inc_by(committed);
                let _ = broker.with_groups(&group_id, |groups, now_ms| {
                    let group = groups
                        .entry(group_id.clone())
                        .or_insert_with(|| Group::new(&group_id, now_ms));
                    for (topic, partition, value) in &planned {
                        if let Ok(value) = value {
                            group
                                .offsets
                                .insert((topic.clone(), *partition), value.clone());
                        }
                    }
                });
            }
            written
        }
    };
    let mut topics: BTreeMap<String, Vec<OffsetCommitResponsePartition>> = BTreeMap::new();
    for (topic, partition, value) in planned {
        let error = match (&outcome, value) {
            (Err(e), _) => e.code(),
            (Ok(()), Err(e)) => e.code(),
            (Ok(()), Ok(_)) => 0,
        };
        topics.entry(topic).or_default().push(
            OffsetCommitResponsePartition::default()
                .with_partition_index(partition)
                .with_error_code(error),
        );
    }
    OffsetCommitResponse::default().with_topics(
        topics
            .into_iter()
            .map(|(name, partitions)| {
                OffsetCommitResponseTopic::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}

/// Whether `topic` has partition `index` in this broker's metadata image. Kafka answers a
/// commit for a partition it does not know `UNKNOWN_TOPIC_OR_PARTITION` per partition and
/// commits the others (KafkaApis.handleOffsetCommitRequest: `metadataCache.contains(topic)`,
/// then `getPartitionInfo` per partition; OffsetCommitRequestTest).
fn partition_exists(broker: &Broker, topic: &str, index: i32) -> bool {
    let image = broker.image();
    let (Some(id), Ok(index)) = (image.topic_id(topic), u32::try_from(index)) else {
        return false;
    };
    image
        .partition(keel_controller::types::TopicPartition::new(id, index))
        .is_some()
}

/// One group's committed offsets for the asked partitions (`None`: every partition it has).
/// Unknown partitions are answered with offset -1 and no error, as Kafka does.
type Fetched = Vec<(
    String,
    Vec<(i32, Result<Option<OffsetValue>, ResponseError>)>,
)>;

/// The committed offsets of `group_id` (those `asked`, or all). With `require_stable` (v7+,
/// KIP-447), a partition with an offset pending in an open transaction is
/// `UNSTABLE_OFFSET_COMMIT`: the client retries until the transaction ends.
fn fetch_group(
    broker: &Broker,
    group_id: &str,
    asked: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Fetched, ResponseError> {
    let (_, fetched) = broker.with_groups(group_id, |groups, _| {
        let group = groups.get(group_id);
        let offsets = group.map(|g| &g.offsets);
        let unstable = |topic: &str, p: i32| {
            require_stable && group.is_some_and(|g| g.has_pending_txn_offset(topic, p))
        };
        match asked {
            Some(asked) => asked
                .into_iter()
                .map(|(topic, partitions)| {
                    let values = partitions
                        .into_iter()
                        .map(|p| {
                            if unstable(&topic, p) {
                                return (p, Err(ResponseError::UnstableOffsetCommit));
                            }
                            let value = offsets.and_then(|o| o.get(&(topic.clone(), p))).cloned();
                            (p, Ok(value))
                        })
                        .collect();
                    (topic, values)
                })
                .collect(),
            None => {
                type Values = Vec<(i32, Result<Option<OffsetValue>, ResponseError>)>;
                let mut by_topic: BTreeMap<String, Values> = BTreeMap::new();
                for ((topic, partition), value) in offsets.into_iter().flatten() {
                    let value = if unstable(topic, *partition) {
                        Err(ResponseError::UnstableOffsetCommit)
                    } else {
                        Ok(Some(value.clone()))
                    };
                    by_topic
                        .entry(topic.clone())
                        .or_default()
                        .push((*partition, value));
                }
                by_topic.into_iter().collect()
            }
        }
    })?;
    Ok(fetched)
}

/// OffsetFetch: v1–7 one group (top-level error from v2), v8+ several.
pub fn fetch(
    broker: &Broker,
    session: &crate::connection::Session,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::OffsetFetch);
    let require_stable = version >= 7 && req.require_stable;
    let fetch_group = |group_id: &str, asked: Option<Vec<(String, Vec<i32>)>>| {
        fetch_group_authorized(broker, &authz, group_id, asked, require_stable)
    };
    if version >= 8 {
        let groups = req
            .groups
            .iter()
            .map(|g| {
                let id = g.group_id.to_string();
                let asked = g.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let base = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                match fetch_group(&id, asked) {
                    Err(e) => base.with_error_code(e.code()),
                    Ok(fetched) => base.with_topics(
                        fetched
                            .into_iter()
                            .map(|(topic, partitions)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(TopicName(str_bytes(topic)))
                                    .with_partitions(
                                        partitions
                                            .into_iter()
                                            .map(|(p, v)| {
                                                let (offset, epoch, metadata, error) = parts(v);
                                                OffsetFetchResponsePartitions::default()
                                                    .with_partition_index(p)
                                                    .with_committed_offset(offset)
                                                    .with_committed_leader_epoch(epoch)
                                                    .with_metadata(Some(str_bytes(metadata)))
                                                    .with_error_code(error)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let asked = req.topics.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    match fetch_group(&req.group_id, asked) {
        Err(e) => {
            // v1 has no top-level error: every asked partition carries it.
            let topics = req
                .topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    OffsetFetchResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partition_indexes
                                .iter()
                                .map(|p| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(*p)
                                        .with_committed_offset(-1)
                                        .with_error_code(e.code())
                                })
                                .collect(),
                        )
                })
                .collect();
            OffsetFetchResponse::default()
                .with_error_code(e.code())
                .with_topics(topics)
        }
        Ok(fetched) => OffsetFetchResponse::default().with_topics(
            fetched
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(str_bytes(topic)))
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|(p, v)| {
                                    let (offset, epoch, metadata, error) = parts(v);
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(offset)
                                        .with_committed_leader_epoch(epoch)
                                        .with_metadata(Some(str_bytes(metadata)))
                                        .with_error_code(error)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// A partition's committed offset, leader epoch, metadata and error code (`Err`: a topic the
/// session may not describe).
fn parts(value: Result<Option<OffsetValue>, ResponseError>) -> (i64, i32, String, i16) {
    match value {
        Ok(Some(v)) => (v.offset, v.leader_epoch, v.metadata, 0),
        Ok(None) => (-1, -1, String::new(), 0),
        Err(e) => (-1, -1, String::new(), e.code()),
    }
}

/// Committed offsets a session may see (Kafka's `handleOffsetFetchRequest`): DESCRIBE on the
/// group, else GROUP_AUTHORIZATION_FAILED; asked partitions of a topic it may not DESCRIBE get
/// TOPIC_AUTHORIZATION_FAILED; a fetch of every topic leaves such topics out quietly.
#[allow(clippy::type_complexity)]
fn fetch_group_authorized(
    broker: &Broker,
    authz: &super::authz::Authz<'_>,
    group_id: &str,
    asked: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<
    Vec<(
        String,
        Vec<(i32, Result<Option<OffsetValue>, ResponseError>)>,
    )>,
    ResponseError,
> {
    if !authz.allows(AclOperation::Describe, ResourceType::Group, group_id) {
        return Err(ResponseError::GroupAuthorizationFailed);
    }
    let all = asked.is_none();
    let fetched = fetch_group(broker, group_id, asked, require_stable)?;
    Ok(fetched
        .into_iter()
        .filter_map(|(topic, partitions)| {
            let described = if all {
                authz.allows_quietly(AclOperation::Describe, ResourceType::Topic, &topic)
            } else {
                authz.topic(AclOperation::Describe, &topic)
            };
            if all && !described {
                return None;
            }
            let partitions = partitions
                .into_iter()
                .map(|(p, v)| {
                    let v = if described {
                        v
                    } else {
                        Err(ResponseError::TopicAuthorizationFailed)
                    };
                    (p, v)
                })
                .collect();
            Some((topic, partitions))
        })
        .collect())
}

/// OffsetDelete: tombstones for the asked partitions' offsets. A partition of a topic the group
/// consumes now is `GROUP_SUBSCRIBED_TO_TOPIC`; an unknown group `GROUP_ID_NOT_FOUND`.
pub async fn delete(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let group_id = req.group_id.to_string();
    // Kafka: DELETE on the group (a top-level GROUP_AUTHORIZATION_FAILED), then READ on each
    // topic.
    let authz = super::authz::Authz::new(broker, session, ApiKey::OffsetDelete);
    if !authz.allows(AclOperation::Delete, ResourceType::Group, &group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let asked: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let unreadable: std::collections::BTreeSet<&str> = asked
        .iter()
        .map(|(topic, _)| topic.as_str())
        .filter(|topic| !authz.topic(AclOperation::Read, topic))
        .collect();
    let checked = broker.with_groups(&group_id, |groups, _| {
        let Some(group) = groups.get(&group_id) else {
            return Err(ResponseError::GroupIdNotFound);
        };
        Ok(asked
            .iter()
            .map(|(topic, partitions)| {
                let error = if unreadable.contains(topic.as_str()) {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else {
                    group
                        .consumes_topic(topic)
                        .then_some(ResponseError::GroupSubscribedToTopic)
                };
                (topic.clone(), partitions.clone(), error)
            })
            .collect::<Vec<_>>())
    });
    let plan = match checked {
        Err(e) | Ok((_, Err(e))) => {
            return OffsetDeleteResponse::default().with_error_code(e.code());
        }
        Ok((scope, Ok(plan))) => (scope, plan),
    };
    let (scope, plan) = plan;
    let tombstones = plan
        .iter()
        .filter(|(_, _, error)| error.is_none())
        .flat_map(|(topic, partitions, _)| {
            partitions.iter().map(|p| {
                (
                    RecordKey::Offset {
                        group: group_id.clone(),
                        topic: topic.clone(),
                        partition: *p,
                    },
                    None,
                )
            })
        })
        .collect();
    let written = broker.write_group_records(&scope, tombstones).await;
    if let Err(e) = written {
        return OffsetDeleteResponse::default().with_error_code(e.code());
    }
    let _ = broker.with_groups(&group_id, |groups, _| {
        if let Some(group) = groups.get_mut(&group_id) {
            for (topic, partitions, error) in &plan {
                if error.is_none() {
                    for p in partitions {
                        group.offsets.remove(&(topic.clone(), *p));
                    }
                }
            }
        }
    });
    OffsetDeleteResponse::default().with_topics(
        plan.into_iter()
            .map(|(topic, partitions, error)| {
                OffsetDeleteResponseTopic::default()
                    .with_name(TopicName(str_bytes(topic)))
                    .with_partitions(
                        partitions
                            .into_iter()
                            .map(|p| {
                                OffsetDeleteResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(error.map_or(0, |e| e.code()))
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}
