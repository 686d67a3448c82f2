//! Topic deletion, partition growth and multi-config changes (issue 4: the controller listener
//! serves DeleteTopics, CreatePartitions and IncrementalAlterConfigs), driven like the IO shell
//! drives the controller: operation, then replay of the generated records.

use std::collections::BTreeMap;

use keel_controller::config::{ELR_FEATURE, MIN_INSYNC_REPLICAS, UNCLEAN_RECOVERY_STRATEGY};
use keel_controller::records::{ConfigResource, Record};
use keel_controller::types::*;
use keel_controller::*;

const CLUSTER: &str = "c1";

fn commit<R>(c: &mut Controller, out: Output<R>) -> R {
    c.replay_all(&out.records)
        .expect("generated records replay");
    out.response
}

/// Brokers 1..=n registered and unfenced, and topic `t` (id 77) with `partitions` partitions at
/// replication factor `rf`.
fn cluster(n: i32, partitions: u32, rf: usize) -> Controller {
    let mut c = Controller::new(ControllerConfig::new(CLUSTER));
    for b in 1..=n {
        let out = c.register_broker(
            &RegisterBrokerRequest {
                broker: BrokerId(b),
                cluster_id: CLUSTER.to_string(),
                incarnation: IncarnationId(uuid::Uuid::from_u128(b as u128)),
                listeners: Vec::new(),
                rack: None,
                log_dirs: vec![DirectoryId(uuid::Uuid::from_u128(0xd000 + b as u128))],
                previous_broker_epoch: None,
            },
            0,
        );
        let epoch = commit(&mut c, out).expect("registered").broker_epoch;
        let out = c.heartbeat(
            &HeartbeatRequest {
                broker: BrokerId(b),
                broker_epoch: epoch,
                current_metadata_offset: c.image().last_applied(),
                want_fence: false,
                want_shutdown: false,
                lost_replicas: Vec::new(),
            },
            0,
        );
        commit(&mut c, out).expect("unfenced");
    }
    let assignment = c.assign_replicas(partitions, rf).expect("enough brokers");
    let out = c.create_topic(
        &CreateTopicRequest {
            name: "t".to_string(),
            id: topic(),
            assignment,
            configs: BTreeMap::new(),
        },
        0,
    );
    commit(&mut c, out).expect("created");
    c
}

fn topic() -> TopicId {
    TopicId(uuid::Uuid::from_u128(77))
}

#[test]
fn delete_topic_removes_partitions_and_configs_and_frees_the_name() {
    // Kafka's RemoveTopicRecord: the topic, its partitions and configs go; the name can be reused.
    let mut c = cluster(3, 2, 3);
    let out = c.alter_config(
        &ConfigResource::Topic("t".into()),
        MIN_INSYNC_REPLICAS,
        Some("2"),
        0,
    );
    commit(&mut c, out).expect("config set");
    let out = c.delete_topic(topic(), 1);
    assert_eq!(out.records.len(), 1);
    assert!(matches!(out.records[0], Record::RemoveTopic(_)));
    assert_eq!(commit(&mut c, out).expect("deleted"), "t");
    assert!(c.image().topic(topic()).is_none());
    assert!(c.image().topic_id("t").is_none());
    assert_eq!(c.image().partitions().count(), 0);
    // Deleting again: Kafka's UNKNOWN_TOPIC_ID for an id it does not know.
    let out = c.delete_topic(topic(), 2);
    assert!(out.records.is_empty());
    assert_eq!(out.response.unwrap_err().code, ErrorCode::UnknownTopicId);
    // The name is free again, under a new id.
    let out = c.create_topic(
        &CreateTopicRequest {
            name: "t".into(),
            id: TopicId(uuid::Uuid::from_u128(78)),
            assignment: vec![vec![BrokerId(1)]],
            configs: BTreeMap::new(),
        },
        3,
    );
    commit(&mut c, out).expect("recreated");
    // The recreated topic does not inherit the deleted one's configs.
    let id = c.image().topic_id("t").unwrap();
    assert!(c.image().topic(id).unwrap().configs.is_empty());
}

#[test]
fn create_partitions_grows_the_topic_round_robin_at_its_replication_factor() {
    // Kafka's CreatePartitions: new partitions get the topic's replication factor; the
    // controller's assignment continues the rotation; leader = first live replica.
    let mut c = cluster(3, 2, 2);
    let req = CreatePartitionsRequest {
        topic: topic(),
        count: 4,
        assignment: None,
    };
    assert!(c.validate_create_partitions(&req).is_ok());
    let out = c.create_partitions(&req, 1);
    assert_eq!(out.records.len(), 2);
    commit(&mut c, out).expect("grown");
    let t = c.image().topic(topic()).unwrap();
    assert_eq!(t.partitions.len(), 4);
    assert_eq!(t.partitions[&2].replicas, vec![BrokerId(3), BrokerId(1)]);
    assert_eq!(t.partitions[&3].replicas, vec![BrokerId(1), BrokerId(2)]);
    assert_eq!(t.partitions[&3].leader, Some(BrokerId(1)));
    assert_eq!(t.partitions[&3].isr.len(), 2);
}

#[test]
fn create_partitions_errors_in_kafka_order() {
    // Kafka's ReplicationControlManager.createPartitions: unknown topic, not an increase,
    // assignment count and replication factor mismatches, too few live brokers.
    let mut c = cluster(2, 2, 2);
    let cases: Vec<(CreatePartitionsRequest, ErrorCode)> = vec![
        (
            CreatePartitionsRequest {
                topic: TopicId(uuid::Uuid::from_u128(1)),
                count: 3,
                assignment: None,
            },
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            CreatePartitionsRequest {
                topic: topic(),
                count: 1,
                assignment: None,
            },
            ErrorCode::InvalidPartitions,
        ),
        (
            CreatePartitionsRequest {
                topic: topic(),
                count: 2,
                assignment: None,
            },
            ErrorCode::InvalidPartitions,
        ),
        (
            CreatePartitionsRequest {
                topic: topic(),
                count: 4,
                assignment: Some(vec![vec![BrokerId(1), BrokerId(2)]]),
            },
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            CreatePartitionsRequest {
                topic: topic(),
                count: 3,
                assignment: Some(vec![vec![BrokerId(1)]]),
            },
            ErrorCode::InvalidReplicaAssignment,
        ),
        (
            CreatePartitionsRequest {
                topic: topic(),
                count: 3,
                assignment: Some(vec![vec![BrokerId(1), BrokerId(1)]]),
            },
            ErrorCode::InvalidReplicaAssignment,
        ),
    ];
    for (req, code) in cases {
        assert_eq!(
            c.validate_create_partitions(&req).unwrap_err().code,
            code,
            "{req:?}"
        );
        let out = c.create_partitions(&req, 1);
        assert!(out.records.is_empty(), "{req:?}");
        assert_eq!(out.response.unwrap_err().code, code, "{req:?}");
    }
    // Fence broker 2: RF 2 no longer fits on the live brokers.
    let out = c.fence_broker(BrokerId(2), 2);
    commit(&mut c, out).unwrap();
    let out = c.create_partitions(
        &CreatePartitionsRequest {
            topic: topic(),
            count: 3,
            assignment: None,
        },
        3,
    );
    assert_eq!(
        out.response.unwrap_err().code,
        ErrorCode::InvalidReplicationFactor
    );
}

#[test]
fn alter_configs_is_one_batch_and_all_or_nothing() {
    // IncrementalAlterConfigs applies a resource's changes together: one bad value rejects
    // them all (INVALID_CONFIG); the ELR switch is a feature level (KIP-966), cluster-only.
    let mut c = cluster(3, 1, 3);
    let change = |name: &str, value: Option<&str>| ConfigChange {
        name: name.to_string(),
        value: value.map(str::to_string),
    };
    let bad = [
        change(MIN_INSYNC_REPLICAS, Some("2")),
        change(UNCLEAN_RECOVERY_STRATEGY, Some("aggressive")),
    ];
    let out = c.alter_configs(&ConfigResource::Cluster, &bad, 1);
    assert!(out.records.is_empty());
    assert_eq!(out.response.unwrap_err().code, ErrorCode::InvalidConfig);
    let topic_elr = [change(ELR_FEATURE, Some("false"))];
    assert_eq!(
        c.validate_configs(&ConfigResource::Topic("t".into()), &topic_elr)
            .unwrap_err()
            .code,
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        c.validate_configs(&ConfigResource::Topic("nope".into()), &[])
            .unwrap_err()
            .code,
        ErrorCode::UnknownTopicOrPartition
    );
    let good = [
        change(MIN_INSYNC_REPLICAS, Some("2")),
        change(ELR_FEATURE, Some("false")),
    ];
    let out = c.alter_configs(&ConfigResource::Cluster, &good, 1);
    // Config, FeatureLevel; no ClearElr since ELR is off by then.
    assert_eq!(out.records.len(), 2);
    commit(&mut c, out).expect("applied");
    assert!(!c.image().elr_enabled());
    assert_eq!(
        c.image()
            .cluster_configs()
            .get(MIN_INSYNC_REPLICAS)
            .map(String::as_str),
        Some("2")
    );
    let out = c.alter_configs(&ConfigResource::Cluster, &[change(ELR_FEATURE, None)], 2);
    commit(&mut c, out).expect("reset");
    assert!(c.image().elr_enabled());
}
