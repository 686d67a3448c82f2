//! The transaction APIs (KIP-98), answered as Kafka's `KafkaApis` does — authorization first,
//! in Kafka's order, then the transaction coordinator (`crate::txn_coordinator`):
//!
//! - AddPartitionsToTxn (24): v0–3 from clients (WRITE on the transactional id, WRITE on each
//!   topic; an unknown or unauthorized partition fails the request, the others are
//!   `OPERATION_NOT_ATTEMPTED`); v4–5 from brokers (CLUSTER_ACTION), batched per transaction,
//!   `VerifyOnly` for KIP-890's check of a transactional write;
//! - AddOffsetsToTxn (25): adds the group's `__consumer_offsets` partition (WRITE on the
//!   transactional id, READ on the group);
//! - EndTxn (26): commit or abort (v5+: transactions v2, the epoch bumped and returned);
//! - WriteTxnMarkers (27, v1): from a coordinator to partition leaders (CLUSTER_ACTION);
//! - TxnOffsetCommit (28): offsets committed inside the transaction, visible at its commit;
//! - DescribeTransactions (65) and ListTransactions (66, v0–2).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keel_controller::acl::{AclOperation, ResourceType};
use keel_wire::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use keel_wire::kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedState,
};
use keel_wire::kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use keel_wire::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use keel_wire::kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use keel_wire::kafka_protocol::messages::*;
use keel_wire::keel_ext;
use keel_wire::ResponseError;

use super::str_bytes;
use crate::broker::Broker;
use crate::coordinator::records::OffsetValue;
use crate::coordinator::{partition_for, OFFSETS_TOPIC};
use crate::txn_coordinator::markers::MarkerSpec;
use crate::txn_coordinator::records::MAX_TRANSACTIONAL_ID_BYTES;
use crate::txn_coordinator::state::TopicPartition;

/// The first AddPartitionsToTxn version sent by brokers (batched, `VerifyOnly`).
const BROKER_ADD_PARTITIONS_MIN_VERSION: i16 = 4;
/// The first EndTxn version of transactions v2 (KIP-890 part 2).
const END_TXN_V2_MIN_VERSION: i16 = 5;
/// The first TxnOffsetCommit version of transactions v2: it adds the group's partition itself.
const TXN_OFFSET_COMMIT_V2_MIN_VERSION: i16 = 5;

fn valid_id(id: &str) -> Result<(), ResponseError> {
    if id.is_empty() || id.len() > MAX_TRANSACTIONAL_ID_BYTES {
        Err(ResponseError::InvalidRequest)
    } else {
        Ok(())
    }
}

/// Per-partition answers for AddPartitionsToTxn, grouped by topic.
fn topic_results(
    results: impl IntoIterator<Item = (TopicPartition, Option<ResponseError>)>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut by_topic: BTreeMap<String, Vec<AddPartitionsToTxnPartitionResult>> = BTreeMap::new();
    for ((topic, partition), error) in results {
        by_topic.entry(topic).or_default().push(
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(partition)
                .with_partition_error_code(error.map_or(0, |e| e.code())),
        );
    }
    by_topic
        .into_iter()
        .map(|(name, results)| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(str_bytes(name)))
                .with_results_by_partition(results)
        })
        .collect()
}

fn requested(
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.to_string(), *p)))
        .collect()
}

/// AddPartitionsToTxn.
pub async fn add_partitions(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::AddPartitionsToTxn);
    if version >= BROKER_ADD_PARTITIONS_MIN_VERSION {
        if !authz.cluster(AclOperation::ClusterAction) {
            return AddPartitionsToTxnResponse::default()
                .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        }
        let mut results = Vec::new();
        for txn in request.transactions {
            let id = txn.transactional_id.to_string();
            let tps = requested(&txn.topics);
            let answers: Vec<(TopicPartition, Option<ResponseError>)> = match valid_id(&id) {
                Err(e) => tps.into_iter().map(|tp| (tp, Some(e))).collect(),
                Ok(()) if txn.verify_only => {
                    match broker.txn_verify_here(&id, txn.producer_id.0, txn.producer_epoch, &tps) {
                        Ok(each) => tps.into_iter().zip(each).collect(),
                        Err(e) => tps.into_iter().map(|tp| (tp, Some(e))).collect(),
                    }
                }
                Ok(()) => {
                    let set: BTreeSet<TopicPartition> = tps.iter().cloned().collect();
                    let outcome = broker
                        .txn_add_partitions(&id, txn.producer_id.0, txn.producer_epoch, &set)
                        .await
                        .err();
                    tps.into_iter().map(|tp| (tp, outcome)).collect()
                }
            };
            results.push(
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(txn.transactional_id)
                    .with_topic_results(topic_results(answers)),
            );
        }
        return AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    }
    let id = request.v3_and_below_transactional_id.to_string();
    let tps = requested(&request.v3_and_below_topics);
    let answer = |tps: Vec<(TopicPartition, Option<ResponseError>)>| {
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topic_results(tps))
    };
    if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, &id) {
        return answer(
            tps.into_iter()
                .map(|tp| (tp, Some(ResponseError::TransactionalIdAuthorizationFailed)))
                .collect(),
        );
    }
    // Kafka: unauthorized topics, then unknown partitions fail the request; the others are
    // OPERATION_NOT_ATTEMPTED.
    let mut failed = Vec::new();
    for tp in &tps {
        if !authz.topic(AclOperation::Write, &tp.0) {
            failed.push((tp.clone(), ResponseError::TopicAuthorizationFailed));
        } else if !broker
            .topic(&tp.0)
            .is_some_and(|t| t.partitions.iter().any(|p| p.index == tp.1))
        {
            failed.push((tp.clone(), ResponseError::UnknownTopicOrPartition));
        }
    }
    if !failed.is_empty() {
        let failed_set: BTreeSet<&TopicPartition> = failed.iter().map(|(tp, _)| tp).collect();
        let rest: Vec<_> = tps
            .iter()
            .filter(|tp| !failed_set.contains(tp))
            .map(|tp| (tp.clone(), Some(ResponseError::OperationNotAttempted)))
            .collect();
        let failed = failed.into_iter().map(|(tp, e)| (tp, Some(e)));
        return answer(failed.chain(rest).collect());
    }
    let outcome = match valid_id(&id) {
        Err(e) => Some(e),
        Ok(()) => {
            let set: BTreeSet<TopicPartition> = tps.iter().cloned().collect();
            broker
                .txn_add_partitions(
                    &id,
                    request.v3_and_below_producer_id.0,
                    request.v3_and_below_producer_epoch,
                    &set,
                )
                .await
                .err()
        }
    };
    // PRODUCER_FENCED exists from v2; older clients know INVALID_PRODUCER_EPOCH.
    let outcome = outcome.map(|e| fenced_for(e, version));
    answer(tps.into_iter().map(|tp| (tp, outcome)).collect())
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
pub async fn add_offsets(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::AddOffsetsToTxn);
    let id = request.transactional_id.to_string();
    let group = request.group_id.to_string();
    let error = if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, &id) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !authz.allows(AclOperation::Read, ResourceType::Group, &group) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else if let Err(e) = valid_id(&id) {
        Some(e)
    } else {
        let partitions = broker
            .config
            .offsets_topic_num_partitions
            .max(1)
            .try_into()
            .unwrap_or(50);
        let count = broker
            .topic(OFFSETS_TOPIC)
            .map_or(partitions, |t| t.partitions.len());
        let tp = (OFFSETS_TOPIC.to_string(), partition_for(&group, count));
        broker
            .txn_add_partitions(
                &id,
                request.producer_id.0,
                request.producer_epoch,
                &BTreeSet::from([tp]),
            )
            .await
            .err()
    };
    AddOffsetsToTxnResponse::default()
        .with_error_code(error.map_or(0, |e| fenced_for(e, version).code()))
}

/// `PRODUCER_FENCED` exists from v2 of the transaction APIs; older clients know
/// `INVALID_PRODUCER_EPOCH`.
fn fenced_for(error: ResponseError, version: i16) -> ResponseError {
    if error == ResponseError::ProducerFenced && version < 2 {
        ResponseError::InvalidProducerEpoch
    } else {
        error
    }
}

/// EndTxn.
pub async fn end(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::EndTxn);
    let id = request.transactional_id.to_string();
    let refused = |error: ResponseError| {
        let error = fenced_for(error, version);
        EndTxnResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, &id) {
        return refused(ResponseError::TransactionalIdAuthorizationFailed);
    }
    if let Err(e) = valid_id(&id) {
        return refused(e);
    }
    let client_transaction_version = if version >= END_TXN_V2_MIN_VERSION {
        2
    } else {
        1
    };
    match broker
        .txn_end(
            &id,
            request.producer_id.0,
            request.producer_epoch,
            request.committed,
            client_transaction_version,
        )
        .await
    {
        Ok((producer_id, epoch)) => EndTxnResponse::default()
            .with_error_code(0)
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(e) => refused(e),
    }
}

/// WriteTxnMarkers: a coordinator's markers, appended here as the partitions' leader.
pub async fn write_markers(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::WriteTxnMarkers);
    let allowed = authz.cluster(AclOperation::ClusterAction);
    let mut markers = Vec::new();
    for marker in request.markers {
        let tps: Vec<TopicPartition> = marker
            .topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(move |p| (t.name.to_string(), *p))
            })
            .collect();
        let results = if allowed {
            let spec = MarkerSpec {
                producer_id: marker.producer_id.0,
                producer_epoch: marker.producer_epoch,
                commit: marker.transaction_result,
                coordinator_epoch: marker.coordinator_epoch,
                only_in_doubt_at: None,
            };
            broker.write_markers_locally(spec, &tps).await
        } else {
            tps.into_iter()
                .map(|tp| (tp, ResponseError::ClusterAuthorizationFailed.code()))
                .collect()
        };
        let mut by_topic: BTreeMap<String, Vec<WritableTxnMarkerPartitionResult>> = BTreeMap::new();
        for ((topic, partition), error) in results {
            by_topic.entry(topic).or_default().push(
                WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(partition)
                    .with_error_code(error),
            );
        }
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(
                    by_topic
                        .into_iter()
                        .map(|(name, partitions)| {
                            WritableTxnMarkerTopicResult::default()
                                .with_name(TopicName(str_bytes(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}

/// TxnOffsetCommit: offsets written inside the transaction, pending until its marker.
pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    session: &crate::connection::Session,
    request: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::TxnOffsetCommit);
    let id = request.transactional_id.to_string();
    let group = request.group_id.to_string();
    let max_metadata = broker.config.offset_metadata_max_bytes;
    // Each partition's answer so far (None: to be written).
    let mut answers: Vec<(String, i32, Option<ResponseError>)> = Vec::new();
    let whole = if !authz.allows(AclOperation::Write, ResourceType::TransactionalId, &id) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !authz.allows(AclOperation::Read, ResourceType::Group, &group) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        valid_id(&id).err()
    };
    let mut offsets = Vec::new();
    let now_ms = broker.clock.now_ms();
    for topic in &request.topics {
        let readable = authz.topic(AclOperation::Read, topic.name.as_str());
        for p in &topic.partitions {
            let metadata = p.committed_metadata.as_deref().unwrap_or_default();
            let refusal = if let Some(e) = whole {
                Some(e)
            } else if !readable {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if broker.topic(topic.name.as_str()).is_none() {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > max_metadata {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                None
            };
            if refusal.is_none() {
                offsets.push((
                    (topic.name.to_string(), p.partition_index),
                    OffsetValue {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: metadata.to_string(),
                        commit_timestamp: now_ms,
                    },
                ));
            }
            answers.push((topic.name.to_string(), p.partition_index, refusal));
        }
    }
    let outcome = if offsets.is_empty() {
        None
    } else {
        Some(commit_txn_offsets(broker, &request, &group, offsets, version).await)
    };
    let mut by_topic: BTreeMap<String, Vec<TxnOffsetCommitResponsePartition>> = BTreeMap::new();
    for (topic, partition, refusal) in answers {
        let error = refusal.or(outcome.flatten());
        by_topic.entry(topic).or_default().push(
            TxnOffsetCommitResponsePartition::default()
                .with_partition_index(partition)
                .with_error_code(error.map_or(0, |e| e.code())),
        );
    }
    TxnOffsetCommitResponse::default().with_topics(
        by_topic
            .into_iter()
            .map(|(name, partitions)| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(partitions)
            })
            .collect(),
    )
}

/// The group checks, KIP-890's check that the group's partition is in the transaction, and
/// the write. `None`: written.
async fn commit_txn_offsets(
    broker: &Arc<Broker>,
    request: &TxnOffsetCommitRequest,
    group: &str,
    offsets: Vec<(TopicPartition, OffsetValue)>,
    version: i16,
) -> Option<ResponseError> {
    let member = request.member_id.to_string();
    let instance = request.group_instance_id.as_ref().map(ToString::to_string);
    let generation = request.generation_id;
    let checked = broker.with_groups(group, |groups, _| match groups.get(group) {
        // Producers that do not send the group's metadata (v0–2, or -1 / empty member)
        // commit without a generation, as Kafka allows for transactional commits.
        _ if generation < 0 && member.is_empty() && instance.is_none() => Ok(()),
        None => Err(ResponseError::IllegalGeneration),
        Some(g) => g.validate_commit(&member, instance.as_deref(), generation),
    });
    let scope = match checked {
        Ok((scope, Ok(()))) => scope,
        Ok((_, Err(e))) | Err(e) => return Some(e),
    };
    let tp = (OFFSETS_TOPIC.to_string(), scope.index);
    let id = request.transactional_id.to_string();
    let (producer_id, epoch) = (request.producer_id.0, request.producer_epoch);
    // v5+ (transactions v2) sends no AddOffsetsToTxn: the group's partition is added here.
    let add = version >= TXN_OFFSET_COMMIT_V2_MIN_VERSION;
    if let Err(e) = broker
        .verify_txn_partition(&id, producer_id, epoch, &tp, add)
        .await
    {
        return Some(verification_error(e, version >= 4));
    }
    broker
        .write_txn_offsets(&scope, group, producer_id, epoch, offsets)
        .await
        .err()
        .map(|e| fenced_for(e, version))
}

/// What a client is told when the check of its transactional write failed (Kafka's
/// `ReplicaManager` mapping): coordinator trouble and concurrent transitions are retriable
/// (`NOT_ENOUGH_REPLICAS`, as the producer retries it); a partition not in the transaction is
/// `TRANSACTION_ABORTABLE`, or `INVALID_TXN_STATE` for clients that predate it.
pub fn verification_error(error: ResponseError, knows_abortable: bool) -> ResponseError {
    match error {
        ResponseError::CoordinatorNotAvailable
        | ResponseError::NotCoordinator
        | ResponseError::CoordinatorLoadInProgress
        | ResponseError::ConcurrentTransactions => ResponseError::NotEnoughReplicas,
        ResponseError::TransactionAbortable if !knows_abortable => ResponseError::InvalidTxnState,
        other => other,
    }
}

/// DescribeTransactions.
pub fn describe(
    broker: &Broker,
    session: &crate::connection::Session,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let authz = super::authz::Authz::new(broker, session, ApiKey::DescribeTransactions);
    let states = request
        .transactional_ids
        .into_iter()
        .map(|id| {
            let name = id.to_string();
            let base = DescribedState::default()
                .with_transactional_id(id)
                .with_transaction_state(str_bytes(""))
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            if !authz.allows(AclOperation::Describe, ResourceType::TransactionalId, &name) {
                return base
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            if name.is_empty() {
                return base.with_error_code(ResponseError::InvalidRequest.code());
            }
            let found = broker.txn_scope(&name).and_then(|scope| {
                broker.with_txns(&scope, |txns, _| {
                    txns.get(&name)
                        .filter(|m| {
                            m.pending != Some(crate::txn_coordinator::state::TxnState::Dead)
                        })
                        .cloned()
                })
            });
            match found {
                Err(e) => base.with_error_code(e.code()),
                Ok(None) => base.with_error_code(ResponseError::TransactionalIdNotFound.code()),
                Ok(Some(m)) => {
                    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
                    for (t, p) in &m.partitions {
                        topics.entry(t.clone()).or_default().push(*p);
                    }
                    base.with_error_code(0)
                        .with_transaction_state(str_bytes(m.state.name()))
                        .with_transaction_timeout_ms(m.timeout_ms)
                        .with_transaction_start_time_ms(m.start_ms)
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_producer_epoch(m.producer_epoch)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(t, ps)| {
                                    TopicData::default()
                                        .with_topic(TopicName(str_bytes(t)))
                                        .with_partitions(ps)
                                })
                                .collect(),
                        )
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions: the transactions this broker coordinates, filtered by state names,
/// producer ids, how long they have run (v1+) and a transactional id pattern (v2+).
pub fn list(
    broker: &Broker,
    session: &crate::connection::Session,
    request: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    use crate::txn_coordinator::state::TxnState;
    const STATES: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];
    let authz = super::authz::Authz::new(broker, session, ApiKey::ListTransactions);
    let unknown: Vec<_> = request
        .state_filters
        .iter()
        .filter(|s| !STATES.iter().any(|t| t.name() == s.as_str()))
        .cloned()
        .collect();
    let pattern = match request.transactional_id_pattern.as_deref() {
        Some(p) if version >= 2 && !p.is_empty() => {
            match regex::Regex::new(&format!("^(?:{p})$")) {
                Ok(re) => Some(re),
                Err(_) => {
                    return ListTransactionsResponse::default()
                        .with_error_code(ResponseError::InvalidRegularExpression.code())
                }
            }
        }
        _ => None,
    };
    let now_ms = broker.clock.now_ms();
    let duration = if version >= 1 {
        request.duration_filter
    } else {
        -1
    };
    broker.load_all_txn_partitions();
    let states = broker
        .coordinated_transactions()
        .into_iter()
        .filter(|m| m.pending != Some(TxnState::Dead))
        .filter(|m| {
            request.state_filters.is_empty()
                || request
                    .state_filters
                    .iter()
                    .any(|s| s.as_str() == m.state.name())
        })
        .filter(|m| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .iter()
                    .any(|p| p.0 == m.producer_id)
        })
        .filter(|m| duration < 0 || (m.start_ms >= 0 && now_ms - m.start_ms >= duration))
        .filter(|m| pattern.as_ref().is_none_or(|re| re.is_match(&m.id)))
        .filter(|m| {
            authz.allows_quietly(AclOperation::Describe, ResourceType::TransactionalId, &m.id)
        })
        .map(|m| {
            ListedState::default()
                .with_transactional_id(TransactionalId(str_bytes(m.id.clone())))
                .with_producer_id(ProducerId(m.producer_id))
                .with_transaction_state(str_bytes(m.state.name()))
        })
        .collect();
    let response = ListTransactionsResponse::default()
        .with_error_code(0)
        .with_unknown_state_filters(unknown)
        .with_transaction_states(states);
    // Keel's question from a partition leader an unclean recovery elected: what this broker's
    // coordinator knows of the transactions open there (`broker::stranded`).
    let Some(asked) = request
        .unknown_tagged_fields
        .get(&keel_ext::STRANDED_TXNS_TAG)
    else {
        return response;
    };
    if !authz.cluster(AclOperation::ClusterAction) {
        return ListTransactionsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    match keel_ext::decode_stranded_txns(asked, crate::broker::STRANDED_MAX) {
        Ok(stranded) => {
            let answers = broker.resolve_stranded_transactions(&stranded);
            response.with_unknown_tagged_field(
                keel_ext::TXN_RESOLUTIONS_TAG,
                keel_ext::encode_txn_resolutions(&answers),
            )
        }
        Err(_) => ListTransactionsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code()),
    }
}
