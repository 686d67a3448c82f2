//! GetReplicaLogInfo (Keel's RPC for KIP-966's Unclean Recovery Manager, see
//! `keel_wire::keel_rpc`): for each asked partition, this replica's log end offset, the last
//! leader epoch written in its log, and the partition leader epoch in its metadata — with its
//! current broker epoch, so the controller can reject answers from a replica that restarted
//! ("avoid electing a broker that has rebooted") or from stale metadata.

use keel_controller::types::{TopicId, TopicPartition as CTopicPartition};
use keel_wire::keel_rpc::{GetReplicaLogInfoRequest, GetReplicaLogInfoResponse, PartitionLogInfo};
use keel_wire::ResponseError;
use tracing::warn;

use crate::broker::Broker;
use crate::connection::Reply;

pub(crate) fn handle(
    broker: &Broker,
    session: &crate::connection::Session,
    frame: bytes::Bytes,
) -> Reply {
    let (correlation_id, request) = match GetReplicaLogInfoRequest::decode(frame) {
        Ok(decoded) => decoded,
        Err(e) => return Reply::Reject(e.to_string()),
    };
    // The URM's question is the controller's: CLUSTER_ACTION on the cluster (as Kafka's
    // inter-broker RPCs), else every partition CLUSTER_AUTHORIZATION_FAILED.
    let authz = super::authz::Authz::for_rpc(
        broker,
        session,
        keel_wire::keel_rpc::GET_REPLICA_LOG_INFO_KEY,
        "GetReplicaLogInfo",
    );
    let denied = !authz.cluster(keel_controller::acl::AclOperation::ClusterAction);
    let image = broker.image();
    let topics = request
        .topics
        .iter()
        .map(|(topic_id, partitions)| {
            let topic = image.topic(TopicId(*topic_id));
            let answers = partitions
                .iter()
                .map(|index| {
                    let unknown = PartitionLogInfo {
                        partition: *index,
                        error_code: ResponseError::UnknownTopicOrPartition.code(),
                        last_written_leader_epoch: -1,
                        current_leader_epoch: -1,
                        log_end_offset: -1,
                    };
                    if denied {
                        return PartitionLogInfo {
                            error_code: ResponseError::ClusterAuthorizationFailed.code(),
                            ..unknown
                        };
                    }
                    let Some(topic) = topic else {
                        return unknown;
                    };
                    let current_leader_epoch = u32::try_from(*index)
                        .ok()
                        .and_then(|i| image.partition(CTopicPartition::new(topic.id, i)))
                        .map_or(-1, |p| p.leader_epoch.0);
                    let Some(partition) = broker.partition(&topic.name, *index) else {
                        return unknown;
                    };
                    let Ok(log) = partition.lock_log() else {
                        return unknown;
                    };
                    PartitionLogInfo {
                        partition: *index,
                        error_code: 0,
                        last_written_leader_epoch: log.latest_epoch().map_or(-1, |e| e.0),
                        current_leader_epoch,
                        log_end_offset: log.log_end_offset().0,
                    }
                })
                .collect();
            (*topic_id, answers)
        })
        .collect();
    let response = GetReplicaLogInfoResponse {
        error_code: 0,
        broker_epoch: broker.broker_epoch(),
        topics,
    };
    if broker.broker_epoch() < 0 {
        warn!("GetReplicaLogInfo answered before registration");
    }
    Reply::Send(response.encode(correlation_id))
}
