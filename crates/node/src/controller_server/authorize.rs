//! Authorization on the controller listener, as Kafka's `ControllerApis` decides it.
//!
//! - The brokers' and controllers' own RPCs — BrokerRegistration, BrokerHeartbeat,
//!   AlterPartition, the metadata Fetch and FetchSnapshot, AllocateProducerIds, and the Raft
//!   RPCs between controllers — need CLUSTER_ACTION on the cluster.
//! - A broker forwards CreateTopics, DeleteTopics and CreatePartitions in Kafka's `Envelope`
//!   (the sender needs CLUSTER_ACTION), naming the client's principal and address: the request
//!   inside is then decided for that principal, as Kafka's controller does, and charged to its
//!   `controller_mutation_rate`. Its other admin requests (IncrementalAlterConfigs, ...,
//!   CreateAcls) it forwards itself, having authorized the client already: a sender holding
//!   CLUSTER_ACTION is trusted as a forwarder — the same trust Kafka's controller gives an
//!   envelope's sender, which must hold CLUSTER_ACTION and then names any principal it likes.
//! - Any other sender is an admin client talking to the controllers directly
//!   (`--bootstrap-controller`) and needs what Kafka's controller asks of it: ALTER on the
//!   cluster for ElectLeaders, AlterPartitionReassignments, AlterUserScramCredentials, CreateAcls, DeleteAcls and (unlike on
//!   a broker) DescribeCluster; DESCRIBE on the cluster for DescribeAcls,
//!   DescribeUserScramCredentials and ListPartitionReassignments; ALTER_CONFIGS on the cluster for AlterClientQuotas; per topic or resource for CreateTopics (CREATE on the
//!   cluster or topic), DeleteTopics (DESCRIBE and DELETE), CreatePartitions (ALTER) and
//!   IncrementalAlterConfigs (ALTER_CONFIGS), the refused items answered with
//!   TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED and the rest carried out.

use keel_controller::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use keel_wire::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use keel_wire::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use keel_wire::kafka_protocol::messages::{CreateTopicsRequest, IncrementalAlterConfigsRequest};
use keel_wire::request::ControllerRequest;

use crate::handlers::authz::Authz;
use crate::handlers::{configs, create_topics};

/// What a request needs before it is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Carry it out whole.
    Allowed,
    /// Refuse it whole with CLUSTER_AUTHORIZATION_FAILED.
    Refused,
    /// Carry out the items the sender may touch; answer the others with their refusal
    /// ([`create_topics`], [`delete_topics`], [`create_partitions`], [`alter_configs`]).
    PerItem,
}

/// The operation on the cluster a whole request needs from a sender that is not a forwarder;
/// `None` for ApiVersions and for the requests decided per item.
fn cluster_operation(body: &ControllerRequest) -> Option<AclOperation> {
    use ControllerRequest as R;
    match body {
        R::ApiVersions(_)
        | R::CreateTopics(_)
        | R::DeleteTopics(_)
        | R::CreatePartitions(_)
        | R::IncrementalAlterConfigs(_) => None,
        R::BrokerRegistration(_)
        | R::BrokerHeartbeat(_)
        | R::AlterPartition(_)
        | R::Fetch(_)
        | R::FetchSnapshot(_)
        | R::AllocateProducerIds(_)
        | R::Envelope(_) => Some(AclOperation::ClusterAction),
        R::ElectLeaders(_)
        | R::AlterPartitionReassignments(_)
        | R::AlterUserScramCredentials(_)
        | R::CreateAcls(_)
        | R::DeleteAcls(_)
        | R::DescribeCluster(_) => Some(AclOperation::Alter),
        R::DescribeAcls(_)
        | R::DescribeUserScramCredentials(_)
        | R::ListPartitionReassignments(_) => Some(AclOperation::Describe),
        R::AlterClientQuotas(_) => Some(AclOperation::AlterConfigs),
    }
}

/// Decides `body` for the sender `authz` describes.
pub(super) fn verdict(authz: &Authz<'_>, body: &ControllerRequest) -> Verdict {
    if matches!(body, ControllerRequest::ApiVersions(_)) || is_forwarder(authz) {
        return Verdict::Allowed;
    }
    match cluster_operation(body) {
        Some(operation) if authz.cluster(operation) => Verdict::Allowed,
        Some(_) => Verdict::Refused,
        None => Verdict::PerItem,
    }
}

/// A sender holding CLUSTER_ACTION (a broker or controller) is trusted with what it forwards
/// (asked quietly: a client's direct admin request is not a denial of CLUSTER_ACTION).
pub(super) fn is_forwarder(authz: &Authz<'_>) -> bool {
    authz.allows_quietly(
        AclOperation::ClusterAction,
        ResourceType::Cluster,
        CLUSTER_NAME,
    )
}

/// Whether a Raft RPC from the sender may be answered (CLUSTER_ACTION, logged if denied).
pub(super) fn raft_allowed(authz: &Authz<'_>) -> bool {
    authz.cluster(AclOperation::ClusterAction)
}

/// Takes the topics the sender may not create out of `request`; their results.
pub(super) fn create_topics(
    authz: &Authz<'_>,
    request: &mut CreateTopicsRequest,
) -> Vec<CreatableTopicResult> {
    let refused = create_topics::unauthorized(authz, request);
    let mut results = Vec::new();
    request
        .topics
        .retain(|t| match refused.get(t.name.as_str()) {
            Some(e) => {
                results.push(create_topics::failed(t.name.clone(), e));
                false
            }
            None => true,
        });
    results
}

/// Takes the topics the sender may not delete out of a request; their results.
pub(super) use crate::handlers::delete_topics::authorize as delete_topics;

/// Takes the topics the sender may not add partitions to out of a request; their results.
pub(super) use crate::handlers::create_partitions::authorize as create_partitions;

/// Takes the resources the sender may not alter out of `request`; their results.
pub(super) fn alter_configs(
    authz: &Authz<'_>,
    request: &mut IncrementalAlterConfigsRequest,
) -> Vec<AlterConfigsResourceResponse> {
    let mut results = Vec::new();
    request.resources.retain(|r| {
        match configs::refused(
            authz,
            AclOperation::AlterConfigs,
            r.resource_type,
            r.resource_name.as_str(),
        ) {
            Some(e) => {
                results.push(
                    AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name.clone())
                        .with_error_code(e.code())
                        .with_error_message(e.message_str()),
                );
                false
            }
            None => true,
        }
    });
    results
}
