//! One decoded controller-listener request to its handler, and the encoded answer.

use bytes::Bytes;
use keel_wire::kafka_protocol::messages::{ApiKey, EnvelopeRequest, EnvelopeResponse};
use keel_wire::kafka_protocol::protocol::Encodable;
use keel_wire::request::{ControllerRequest, DecodedRequest};
use keel_wire::response;
use keel_wire::versions::{self, ListenerKind};

use super::authorize::{self, Verdict};
use super::mutation_quota::{self, Mutator};
use super::state::{CallError, ControllerHandle};
use super::{
    acls, alter_partition, configs, describe_cluster, elect_leaders, fetch_snapshot, membership,
    metadata_fetch, producer_ids, quotas, reassignments, scram_credentials, topics, Settings,
};

/// Why a request got no answer; the connection is closed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DispatchError {
    #[error("the controller stopped")]
    Stopped,
    #[error("cannot encode the response: {0:#}")]
    Encode(anyhow::Error),
}

fn encode<T: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, DispatchError> {
    response::encode(key, version, correlation_id, body).map_err(DispatchError::Encode)
}

/// Handles one request. A request that only the active controller can answer gets Kafka's
/// `NOT_CONTROLLER` on a standby (or when leadership moved before its records committed); the
/// sender retries against the leader.
///
/// `authz` is the sender's view of the authorizer ([`authorize`]): a request it may not send
/// is refused whole with CLUSTER_AUTHORIZATION_FAILED, or item by item.
///
/// Mutations are charged to `who` ([`mutation_quota`]): the sender, or the client an Envelope
/// names; `None` for the cluster's own requests.
pub(super) async fn dispatch(
    handle: &ControllerHandle,
    settings: &Settings,
    request: DecodedRequest<ControllerRequest>,
    authz: &crate::handlers::authz::Authz<'_>,
    who: Option<&Mutator>,
) -> Result<Bytes, DispatchError> {
    let key = request.api_key;
    let v = request.api_version();
    let id = request.correlation_id();
    let verdict = authorize::verdict(authz, &request.body);
    if verdict == Verdict::Refused {
        let code = keel_wire::ResponseError::ClusterAuthorizationFailed.code();
        let message = || {
            Some(
                keel_wire::kafka_protocol::protocol::StrBytes::from_static_str(
                    "Cluster authorization failed.",
                ),
            )
        };
        return refuse_all(key, v, id, request.body, code, message);
    }
    let body = request.body.clone();
    let per_item = (verdict == Verdict::PerItem).then_some(authz);
    match answer(handle, settings, request, per_item, who).await {
        Ok(bytes) => Ok(bytes),
        Err(AnswerError::Call(CallError::NotController)) => {
            not_controller(key, v, id, body, handle.view().leader)
        }
        Err(AnswerError::Call(CallError::Stopped)) => Err(DispatchError::Stopped),
        Err(AnswerError::Encode(e)) => Err(e),
    }
}

enum AnswerError {
    Call(CallError),
    Encode(DispatchError),
}

impl From<CallError> for AnswerError {
    fn from(e: CallError) -> Self {
        AnswerError::Call(e)
    }
}

impl From<DispatchError> for AnswerError {
    fn from(e: DispatchError) -> Self {
        AnswerError::Encode(e)
    }
}

/// `NOT_CONTROLLER` for every item of `body`, in the shape of its response.
fn not_controller(
    key: ApiKey,
    v: i16,
    id: i32,
    body: ControllerRequest,
    leader: Option<i32>,
) -> Result<Bytes, DispatchError> {
    let code = keel_wire::ResponseError::NotController.code();
    let message = || {
        Some(keel_wire::kafka_protocol::protocol::StrBytes::from_string(
            match leader {
                Some(leader) => format!("this controller is not active; controller {leader} leads"),
                None => "this controller is not active; no controller leads yet".to_string(),
            },
        ))
    };
    refuse_all(key, v, id, body, code, message)
}

/// Error `code` (with `message`) for every item of `body`, in the shape of its response.
fn refuse_all(
    key: ApiKey,
    v: i16,
    id: i32,
    body: ControllerRequest,
    code: i16,
    message: impl Fn() -> Option<keel_wire::kafka_protocol::protocol::StrBytes>,
) -> Result<Bytes, DispatchError> {
    use keel_wire::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
    use keel_wire::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use keel_wire::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
    use keel_wire::kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    use keel_wire::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    use keel_wire::kafka_protocol::messages::*;
    use ControllerRequest as R;
    match body {
        R::BrokerRegistration(_) => encode(
            key,
            v,
            id,
            &BrokerRegistrationResponse::default().with_error_code(code),
        ),
        R::BrokerHeartbeat(_) => encode(
            key,
            v,
            id,
            &BrokerHeartbeatResponse::default()
                .with_error_code(code)
                .with_is_fenced(true),
        ),
        R::AllocateProducerIds(_) => encode(
            key,
            v,
            id,
            &AllocateProducerIdsResponse::default()
                .with_error_code(code)
                .with_producer_id_start(ProducerId(-1)),
        ),
        R::AlterPartition(_) => encode(
            key,
            v,
            id,
            &AlterPartitionResponse::default().with_error_code(code),
        ),
        R::CreateTopics(r) => encode(
            key,
            v,
            id,
            &CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        R::DeleteTopics(r) => {
            let mut results: Vec<DeletableTopicResult> = r
                .topic_names
                .iter()
                .map(|n| {
                    DeletableTopicResult::default()
                        .with_name(Some(n.clone()))
                        .with_error_code(code)
                        .with_error_message(message())
                })
                .collect();
            results.extend(r.topics.iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_error_code(code)
                    .with_error_message(message())
            }));
            encode(
                key,
                v,
                id,
                &DeleteTopicsResponse::default().with_responses(results),
            )
        }
        R::CreatePartitions(r) => encode(
            key,
            v,
            id,
            &CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        R::IncrementalAlterConfigs(r) => encode(
            key,
            v,
            id,
            &IncrementalAlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|res| {
                        AlterConfigsResourceResponse::default()
                            .with_resource_type(res.resource_type)
                            .with_resource_name(res.resource_name.clone())
                            .with_error_code(code)
                            .with_error_message(message())
                    })
                    .collect(),
            ),
        ),
        R::ElectLeaders(r) => encode(
            key,
            v,
            id,
            &ElectLeadersResponse::default()
                // v0 has no top-level error code (the per-partition codes carry it).
                .with_error_code(if v >= 1 { code } else { 0 })
                .with_replica_election_results(
                    r.topic_partitions
                        .unwrap_or_default()
                        .iter()
                        .map(|t| {
                            ReplicaElectionResult::default()
                                .with_topic(t.topic.clone())
                                .with_partition_result(
                                    t.partitions
                                        .iter()
                                        .map(|p| {
                                            PartitionResult::default()
                                                .with_partition_id(*p)
                                                .with_error_code(code)
                                                .with_error_message(message())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ),
        R::AlterUserScramCredentials(r) => encode(
            key,
            v,
            id,
            &crate::handlers::scram_credentials::alter_failed(
                &r,
                code,
                message().as_deref().unwrap_or_default(),
            ),
        ),
        R::CreateAcls(r) => {
            let error = api_error(code, message());
            let results = vec![Err(error); r.creations.len()];
            encode(
                key,
                v,
                id,
                &crate::handlers::acls::creation_results(&results),
            )
        }
        R::DeleteAcls(r) => {
            let error = api_error(code, message());
            let results = vec![Err(error); r.filters.len()];
            encode(
                key,
                v,
                id,
                &crate::handlers::acls::deletion_results(&results),
            )
        }
        R::AlterClientQuotas(r) => encode(
            key,
            v,
            id,
            &crate::handlers::client_quotas::alter_failed(
                &r,
                code,
                message().as_deref().unwrap_or_default(),
            ),
        ),
        // The rest are answered by any controller (never NOT_CONTROLLER), but may be refused.
        R::DescribeAcls(_) => encode(
            key,
            v,
            id,
            &DescribeAclsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        R::DescribeCluster(_) => encode(
            key,
            v,
            id,
            &DescribeClusterResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        R::Fetch(_) => encode(key, v, id, &FetchResponse::default().with_error_code(code)),
        R::FetchSnapshot(_) => encode(
            key,
            v,
            id,
            &FetchSnapshotResponse::default().with_error_code(code),
        ),
        R::DescribeUserScramCredentials(_) => encode(
            key,
            v,
            id,
            &DescribeUserScramCredentialsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        R::ApiVersions(_) => encode(
            key,
            v,
            id,
            &ApiVersionsResponse::default().with_error_code(code),
        ),
        R::AlterPartitionReassignments(_) => encode(
            key,
            v,
            id,
            &AlterPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        R::ListPartitionReassignments(_) => encode(
            key,
            v,
            id,
            &ListPartitionReassignmentsResponse::default()
                .with_error_code(code)
                .with_error_message(message()),
        ),
        R::Envelope(_) => encode(
            key,
            v,
            id,
            &EnvelopeResponse::default().with_error_code(code),
        ),
    }
}

/// Answers `request`; with `per_item`, the items that view may not touch are refused and left
/// out of what the controller carries out.
async fn answer(
    handle: &ControllerHandle,
    settings: &Settings,
    request: DecodedRequest<ControllerRequest>,
    per_item: Option<&crate::handlers::authz::Authz<'_>>,
    who: Option<&Mutator>,
) -> Result<Bytes, AnswerError> {
    let key = request.api_key;
    let v = request.api_version();
    let id = request.correlation_id();
    let quotas = handle.machine().image().client_quotas().clone();
    let mutations = &settings.mutation_quotas;
    use ControllerRequest as R;
    Ok(match request.body {
        R::ApiVersions(_) => encode(
            key,
            v,
            id,
            &versions::api_versions_response_on(ListenerKind::Controller, None),
        ),
        R::BrokerRegistration(r) => encode(key, v, id, &membership::register(handle, r, v).await?),
        R::BrokerHeartbeat(r) => encode(key, v, id, &membership::heartbeat(handle, r).await?),
        R::AlterPartition(r) => encode(key, v, id, &alter_partition::handle(handle, r, v).await?),
        R::CreateTopics(mut r) => {
            let refused = per_item.map(|a| authorize::create_topics(a, &mut r));
            let admission = mutations.admission(&quotas, who, v >= 6);
            let image = handle.machine().image();
            let (charged, throttled) = mutation_quota::admit_creations(
                &admission,
                mutations.now_ms(),
                settings.num_partitions,
                &image,
                &mut r,
            );
            let mut response = match topics::create(handle, settings, r, v).await {
                Ok(response) => response,
                Err(e) => {
                    charged.give_back_all(&admission, mutations.now_ms());
                    return Err(e.into());
                }
            };
            let now = mutations.now_ms();
            charged.settle(
                &admission,
                now,
                response
                    .topics
                    .iter()
                    .map(|t| (t.name.as_str(), t.error_code)),
            );
            response.topics.extend(refused.into_iter().flatten());
            response.topics.extend(throttled);
            response.throttle_time_ms = response
                .throttle_time_ms
                .max(admission.throttle_ms_i32(now));
            encode(key, v, id, &response)
        }
        R::DeleteTopics(mut r) => {
            let image = handle.machine().image();
            let refused = per_item.map(|a| authorize::delete_topics(a, &image, &mut r));
            let admission = mutations.admission(&quotas, who, v >= 5);
            let (charged, throttled) =
                mutation_quota::admit_deletions(&admission, mutations.now_ms(), &image, &mut r);
            let mut response = match topics::delete(handle, r, v).await {
                Ok(response) => response,
                Err(e) => {
                    charged.give_back_all(&admission, mutations.now_ms());
                    return Err(e.into());
                }
            };
            let now = mutations.now_ms();
            charged.settle(
                &admission,
                now,
                response
                    .responses
                    .iter()
                    .map(|t| (mutation_quota::deleted_name(t), t.error_code)),
            );
            response.responses.extend(refused.into_iter().flatten());
            response.responses.extend(throttled);
            response.throttle_time_ms = response
                .throttle_time_ms
                .max(admission.throttle_ms_i32(now));
            encode(key, v, id, &response)
        }
        R::CreatePartitions(mut r) => {
            let refused = per_item.map(|a| authorize::create_partitions(a, &mut r));
            let admission = mutations.admission(&quotas, who, v >= 3);
            let image = handle.machine().image();
            let (charged, throttled) = mutation_quota::admit_new_partitions(
                &admission,
                mutations.now_ms(),
                &image,
                &mut r,
            );
            let mut response = match topics::create_partitions(handle, r).await {
                Ok(response) => response,
                Err(e) => {
                    charged.give_back_all(&admission, mutations.now_ms());
                    return Err(e.into());
                }
            };
            let now = mutations.now_ms();
            charged.settle(
                &admission,
                now,
                response
                    .results
                    .iter()
                    .map(|t| (t.name.as_str(), t.error_code)),
            );
            response.results.extend(refused.into_iter().flatten());
            response.results.extend(throttled);
            response.throttle_time_ms = response
                .throttle_time_ms
                .max(admission.throttle_ms_i32(now));
            encode(key, v, id, &response)
        }
        R::Envelope(r) => {
            let answer = Box::pin(envelope(handle, settings, r)).await?;
            encode(key, v, id, &answer)
        }
        R::IncrementalAlterConfigs(mut r) => {
            let refused = per_item.map(|a| authorize::alter_configs(a, &mut r));
            let mut response = configs::incremental_alter(handle, r).await?;
            response.responses.extend(refused.into_iter().flatten());
            encode(key, v, id, &response)
        }
        R::ElectLeaders(r) => encode(key, v, id, &elect_leaders::handle(handle, r, v).await?),
        R::AlterPartitionReassignments(r) => {
            encode(key, v, id, &reassignments::alter(handle, r, v).await?)
        }
        R::ListPartitionReassignments(r) => {
            encode(key, v, id, &reassignments::list(handle, r).await?)
        }
        R::DescribeCluster(r) => encode(
            key,
            v,
            id,
            &describe_cluster::handle(handle, settings, r).await?,
        ),
        R::Fetch(r) => encode(key, v, id, &metadata_fetch::handle(handle, r, v).await?),
        R::FetchSnapshot(r) => encode(key, v, id, &fetch_snapshot::handle(handle, r)),
        R::AllocateProducerIds(r) => encode(key, v, id, &producer_ids::allocate(handle, r).await?),
        R::AlterUserScramCredentials(r) => {
            encode(key, v, id, &scram_credentials::alter(handle, r).await?)
        }
        R::DescribeUserScramCredentials(r) => {
            encode(key, v, id, &scram_credentials::describe(handle, &r))
        }
        R::CreateAcls(r) => encode(key, v, id, &acls::create(handle, settings, r).await?),
        R::DeleteAcls(r) => encode(key, v, id, &acls::delete(handle, settings, r).await?),
        R::DescribeAcls(r) => encode(key, v, id, &acls::describe(handle, settings, &r)),
        R::AlterClientQuotas(r) => encode(key, v, id, &quotas::alter(handle, r).await?),
    }?)
}

/// The API keys a broker may forward in an Envelope: the client admin requests the controller
/// carries out (as Kafka's forwardable APIs).
fn forwardable(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::CreateAcls
            | ApiKey::DeleteAcls
            | ApiKey::AlterClientQuotas
            | ApiKey::AlterUserScramCredentials
    )
}

/// Answers a client's request a broker forwarded in Kafka's Envelope (KIP-590): the sender
/// holds CLUSTER_ACTION (checked by [`dispatch`]); the request inside is decided for the client
/// principal and address the envelope names — authorized as theirs and charged to their
/// mutation quota — and its answer goes back inside the envelope's. A standby answers the
/// envelope with NOT_CONTROLLER, so the broker tries the next controller.
async fn envelope(
    handle: &ControllerHandle,
    settings: &Settings,
    envelope: EnvelopeRequest,
) -> Result<EnvelopeResponse, AnswerError> {
    let refuse = |error: keel_wire::ResponseError| {
        Ok(EnvelopeResponse::default().with_error_code(error.code()))
    };
    if !handle.view().active {
        return refuse(keel_wire::ResponseError::NotController);
    }
    let Some(principal) = envelope
        .request_principal
        .as_ref()
        .and_then(|p| crate::security::KafkaPrincipal::deserialize(p.clone()))
    else {
        return refuse(keel_wire::ResponseError::PrincipalDeserializationFailure);
    };
    let host = match envelope.client_host_address.len() {
        4 => <[u8; 4]>::try_from(&envelope.client_host_address[..])
            .map(|b| std::net::IpAddr::from(b).to_string()),
        16 => <[u8; 16]>::try_from(&envelope.client_host_address[..])
            .map(|b| std::net::IpAddr::from(b).to_canonical().to_string()),
        _ => return refuse(keel_wire::ResponseError::InvalidRequest),
    };
    let Ok(host) = host else {
        return refuse(keel_wire::ResponseError::InvalidRequest);
    };
    let Ok(inner) = keel_wire::request::decode_controller(envelope.request_data) else {
        return refuse(keel_wire::ResponseError::InvalidRequest);
    };
    if !forwardable(inner.api_key) {
        return refuse(keel_wire::ResponseError::InvalidRequest);
    }
    let who = Mutator {
        user: principal.name.clone(),
        client_id: inner
            .header
            .client_id
            .as_deref()
            .unwrap_or_default()
            .to_string(),
    };
    let context = crate::security::authorizer::RequestContext {
        principal: principal.to_string(),
        host,
        api_key: inner.api_key as i16,
        api: format!("{:?}", inner.api_key),
    };
    let authorizer = settings
        .authorizer
        .as_ref()
        .filter(|_| !settings.in_process);
    let authz = crate::handlers::authz::Authz::on_controller(authorizer, handle.machine(), context);
    let (key, v, id) = (inner.api_key, inner.api_version(), inner.correlation_id());
    let bytes = match authorize::verdict(&authz, &inner.body) {
        Verdict::Refused => refuse_all(
            key,
            v,
            id,
            inner.body,
            keel_wire::ResponseError::ClusterAuthorizationFailed.code(),
            || {
                Some(
                    keel_wire::kafka_protocol::protocol::StrBytes::from_static_str(
                        "Cluster authorization failed.",
                    ),
                )
            },
        )?,
        verdict => {
            let per_item = (verdict == Verdict::PerItem).then_some(&authz);
            match answer(handle, settings, inner, per_item, Some(&who)).await {
                Ok(bytes) => bytes,
                Err(AnswerError::Call(CallError::NotController)) => {
                    return refuse(keel_wire::ResponseError::NotController)
                }
                Err(e) => return Err(e),
            }
        }
    };
    // The inner answer without its size prefix, as Kafka's envelope carries it.
    Ok(EnvelopeResponse::default().with_response_data(Some(bytes.slice(4..))))
}

/// Error `code` with `message`, as the controller crate's error.
fn api_error(
    code: i16,
    message: Option<keel_wire::kafka_protocol::protocol::StrBytes>,
) -> keel_controller::errors::ApiError {
    keel_controller::errors::ApiError::new(
        keel_controller::errors::ErrorCode::from_code(code)
            .unwrap_or(keel_controller::errors::ErrorCode::UnknownServerError),
        message.map(|m| m.to_string()).unwrap_or_default(),
    )
}
