//! The controller facade driven as the IO shell will drive it: operations in, records out,
//! records replayed. Each test cites the issue-3 bullet or KIP sentence it shows.

use std::collections::BTreeMap;

use keel_controller::golden::harness::{Harness, Setup};
use keel_controller::records::{ConfigResource, Record};
use keel_controller::recovery::{Command, ReplicaLogInfo};
use keel_controller::types::*;
use keel_controller::*;

const CLUSTER: &str = "c1";

fn uuid(n: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(n)
}

fn register_req(b: i32, incarnation: u128, previous: Option<BrokerEpoch>) -> RegisterBrokerRequest {
    RegisterBrokerRequest {
        broker: BrokerId(b),
        cluster_id: CLUSTER.to_string(),
        incarnation: IncarnationId(uuid(incarnation)),
        listeners: Vec::new(),
        rack: None,
        log_dirs: vec![DirectoryId(uuid(0xd000 + b as u128))],
        previous_broker_epoch: previous,
    }
}

fn commit<R>(c: &mut Controller, out: Output<R>) -> R {
    c.replay_all(&out.records)
        .expect("generated records replay");
    out.response
}

fn heartbeat(c: &mut Controller, b: i32, now: u64, shutdown: bool) -> HeartbeatResponse {
    let req = HeartbeatRequest {
        broker: BrokerId(b),
        broker_epoch: c.image().broker(BrokerId(b)).expect("registered").epoch,
        current_metadata_offset: c.image().last_applied(),
        want_fence: false,
        want_shutdown: shutdown,
        lost_replicas: Vec::new(),
    };
    let out = c.heartbeat(&req, now);
    commit(c, out).expect("heartbeat accepted")
}

/// Three live brokers and a topic `t` with one partition on [1, 2, 3].
fn cluster() -> (Controller, TopicPartition) {
    let mut c = Controller::new(ControllerConfig::new(CLUSTER));
    for b in 1..=3 {
        let out = c.register_broker(&register_req(b, b as u128, None), 0);
        commit(&mut c, out).expect("registered");
        heartbeat(&mut c, b, 0, false);
    }
    let req = CreateTopicRequest {
        name: "t".to_string(),
        id: TopicId(uuid(77)),
        assignment: vec![vec![BrokerId(1), BrokerId(2), BrokerId(3)]],
        configs: BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]),
    };
    let out = c.create_topic(&req, 0);
    commit(&mut c, out).expect("created");
    (c, TopicPartition::new(TopicId(uuid(77)), 0))
}

#[test]
fn broker_epoch_is_the_registration_offset_and_brokers_start_fenced() {
    // issue 3: "the new broker epoch is the metadata log offset at registration; a new broker
    // starts fenced and is unfenced once its metadata offset has caught up".
    let mut c = Controller::new(ControllerConfig::new(CLUSTER));
    let offset = c.next_offset();
    let out = c.register_broker(&register_req(1, 1, None), 0);
    assert_eq!(out.records.len(), 1);
    let response = commit(&mut c, out).expect("registered");
    assert_eq!(response.broker_epoch, BrokerEpoch(offset.0));
    assert!(!response.clean_shutdown);
    let reg = c.image().broker(BrokerId(1)).expect("registered").clone();
    assert_eq!(reg.state, image::BrokerState::Fenced);
    // A heartbeat from behind the registration record does not unfence.
    let behind = HeartbeatRequest {
        broker: BrokerId(1),
        broker_epoch: response.broker_epoch,
        current_metadata_offset: Some(MetadataOffset(reg.registered_at.0 - 1)),
        want_fence: false,
        want_shutdown: false,
        lost_replicas: Vec::new(),
    };
    let out = c.heartbeat(&behind, 1);
    assert!(out.records.is_empty());
    assert!(commit(&mut c, out).expect("ok").is_fenced);
    let resp = heartbeat(&mut c, 1, 2, false);
    assert!(!resp.is_fenced);
    assert!(c.image().broker(BrokerId(1)).expect("registered").is_live());
}

#[test]
fn registration_errors() {
    // Kafka ClusterControlManager.registerBroker: INCONSISTENT_CLUSTER_ID,
    // DUPLICATE_BROKER_REGISTRATION for a new incarnation while the old session is alive; the
    // same incarnation keeps its epoch.
    let (mut c, _) = cluster();
    let mut wrong = register_req(1, 50, None);
    wrong.cluster_id = "other".to_string();
    let out = c.register_broker(&wrong, 1);
    assert_eq!(
        out.response.unwrap_err().code,
        ErrorCode::InconsistentClusterId
    );
    let out = c.register_broker(&register_req(1, 50, None), 1);
    assert!(out.records.is_empty());
    assert_eq!(
        out.response.unwrap_err().code,
        ErrorCode::DuplicateBrokerRegistration
    );
    let epoch = c.image().broker(BrokerId(1)).expect("registered").epoch;
    let out = c.register_broker(&register_req(1, 1, None), 1);
    assert!(out.records.is_empty());
    assert_eq!(out.response.expect("same incarnation").broker_epoch, epoch);
}

#[test]
fn clean_and_unclean_registration_are_told_apart_by_the_previous_epoch() {
    // KIP-966: "The controller will verify the broker epoch in the request with its
    // registration record. If it is the same, it is a clean shutdown."
    let (mut c, _) = cluster();
    let out = c.fence_broker(BrokerId(2), 1);
    commit(&mut c, out).expect("fenced");
    let epoch = c.image().broker(BrokerId(2)).expect("registered").epoch;
    let out = c.register_broker(&register_req(2, 60, Some(epoch)), 2);
    let clean = commit(&mut c, out).expect("registered");
    assert!(clean.clean_shutdown);
    assert!(clean.broker_epoch > epoch);
    let out = c.fence_broker(BrokerId(3), 3);
    commit(&mut c, out).expect("fenced");
    let out = c.register_broker(&register_req(3, 61, Some(BrokerEpoch(1))), 3);
    assert!(!commit(&mut c, out).expect("registered").clean_shutdown);
}

#[test]
fn session_timeout_fences_silent_brokers() {
    // issue 3: "heartbeats with a session timeout fence silent brokers".
    let (mut c, tp) = cluster();
    let timeout = c.config().session_timeout_ms;
    heartbeat(&mut c, 1, timeout, false);
    heartbeat(&mut c, 2, timeout, false);
    let out = c.tick(timeout);
    assert_eq!(out.response, vec![BrokerId(3)]);
    commit(&mut c, out);
    let p = c.partition(tp).expect("partition");
    assert!(!p.isr.contains(&BrokerId(3)));
    assert!(!c.image().broker(BrokerId(3)).expect("registered").is_live());
    let out = c.tick(timeout + 1);
    assert!(out.response.is_empty(), "brokers that heartbeated stay");
}

#[test]
fn controlled_shutdown_moves_leadership_before_allowing_the_stop() {
    // issue 3: "controlled shutdown moves leadership away and removes the broker from ISRs
    // before it is allowed to stop".
    let (mut c, tp) = cluster();
    assert_eq!(c.partition(tp).expect("p").leader, Some(BrokerId(1)));
    let first = heartbeat(&mut c, 1, 1, true);
    assert!(first.in_controlled_shutdown);
    assert!(!first.should_shut_down);
    let p = c.partition(tp).expect("p");
    assert_eq!(p.leader, Some(BrokerId(2)));
    assert!(!p.isr.contains(&BrokerId(1)));
    let second = heartbeat(&mut c, 1, 2, true);
    assert!(second.should_shut_down);
    assert!(second.is_fenced);
}

#[test]
fn unclean_recovery_emits_requests_to_every_replica_and_a_timer() {
    // KIP-966: "The URM will query all the replicas including the fenced replicas"; events in,
    // commands out; stale answers are rejected and the replica asked again.
    let mut partition = PartitionState::new(
        vec![BrokerId(1), BrokerId(2), BrokerId(3)],
        vec![None; 3],
        Default::default(),
        None,
    );
    partition.last_known_elr = [BrokerId(1), BrokerId(2)].into_iter().collect();
    let setup = Setup {
        min_isr: 2,
        elr: true,
        strategy: Some(UncleanRecoveryStrategy::Balanced),
        unclean_leader_election: None,
        fenced: [BrokerId(3)].into_iter().collect(),
        shutting_down: Default::default(),
        unregistered: Default::default(),
        broker_epochs: BTreeMap::new(),
        partition,
    };
    let mut c = Harness::new(&setup).expect("setup").controller().clone();
    let tp = c.partitions_under_recovery()[0];
    // A failover loses the URM state; the first tick starts recovery again.
    let mut fresh = Controller::from_image(c.image().clone(), c.config().clone(), 100);
    assert!(fresh.partitions_under_recovery().is_empty());
    let out = fresh.tick(100);
    assert_eq!(
        out.commands,
        vec![
            Command::SendGetReplicaLogInfo {
                broker: BrokerId(1),
                partitions: vec![tp]
            },
            Command::SendGetReplicaLogInfo {
                broker: BrokerId(2),
                partitions: vec![tp]
            },
            Command::SendGetReplicaLogInfo {
                broker: BrokerId(3),
                partitions: vec![tp]
            },
            Command::ScheduleRecoveryTimeout {
                partition: tp,
                at_ms: 5_100
            },
        ]
    );
    let stale = ReplicaLogInfo {
        log_end_offset: Offset(5),
        last_leader_epoch: LeaderEpoch(0),
        broker_epoch: BrokerEpoch(1),
        partition_leader_epoch: LeaderEpoch(0),
    };
    let out = c.recovery_answer(tp, BrokerId(2), stale, 10);
    assert_eq!(out.response, Err(ErrorCode::StaleBrokerEpoch));
    assert_eq!(
        out.commands,
        vec![Command::SendGetReplicaLogInfo {
            broker: BrokerId(2),
            partitions: vec![tp]
        }]
    );
    let out = c.recovery_request_failed(BrokerId(1), &[tp], 11);
    assert_eq!(
        out.commands,
        vec![Command::SendGetReplicaLogInfo {
            broker: BrokerId(1),
            partitions: vec![tp]
        }]
    );
    let out = c.recovery_timeout(tp, 5_000);
    assert_eq!(out.response, None);
    assert!(out.commands.contains(&Command::ScheduleRecoveryTimeout {
        partition: tp,
        at_ms: 10_000
    }));
}

#[test]
fn an_operators_recovery_of_a_paused_partition_is_recorded_and_survives_a_failover() {
    // issue 19: under the Manual strategy a partition whose recovery an operator started
    // (`keel elect --unclean --balanced`) is reported as recovering — by the controller's
    // paused/recovery counts and by the image every broker describes partitions from — and a new
    // active controller carries the recovery on (the URM's tasks live in memory only, KIP-966).
    let mut partition = PartitionState::new(
        vec![BrokerId(1), BrokerId(2), BrokerId(3)],
        vec![None; 3],
        Default::default(),
        None,
    );
    partition.last_known_elr = [BrokerId(1), BrokerId(2)].into_iter().collect();
    let setup = Setup {
        min_isr: 2,
        elr: true,
        strategy: Some(UncleanRecoveryStrategy::Manual),
        unclean_leader_election: None,
        fenced: [BrokerId(2)].into_iter().collect(),
        shutting_down: Default::default(),
        unregistered: Default::default(),
        broker_epochs: BTreeMap::new(),
        partition,
    };
    let mut h = Harness::new(&setup).expect("setup");
    let tp = h.tp();
    assert_eq!(h.controller().paused_partitions(), vec![tp]);
    assert!(h.controller().partitions_under_recovery().is_empty());

    let step = h
        .elect_unclean(Some(RecoveryMode::Balanced))
        .expect("elect");
    assert_eq!(step.error, None);
    let c = h.controller().clone();
    assert!(c.paused_partitions().is_empty(), "no longer paused");
    assert_eq!(c.partitions_under_recovery(), vec![tp]);
    assert_eq!(
        c.partition(tp).map(|p| p.recovery_requested),
        Some(Some(RecoveryMode::Balanced))
    );
    // What a broker's DescribeTopicPartitions computes from its image.
    let live = c.image().live_brokers();
    assert_eq!(
        c.image().partition_status(tp, &live),
        Some(PartitionStatus::NeedsUncleanRecovery)
    );

    // A failover: the new active controller has only the image, and recovers in the
    // operator's mode (Balanced waits for broker 2, fenced).
    let mut fresh = Controller::from_image(c.image().clone(), c.config().clone(), h.now_ms());
    assert!(fresh.paused_partitions().is_empty());
    let out = fresh.tick(h.now_ms());
    assert!(out.commands.contains(&Command::SendGetReplicaLogInfo {
        broker: BrokerId(1),
        partitions: vec![tp]
    }));
    let task = fresh.recovery_task(tp).expect("recovery carried on");
    assert_eq!(task.mode, RecoveryMode::Balanced);

    // Balanced: broker 1's answer alone does not elect; once broker 2 is back and answers, the
    // longest log wins and the request is cleared with the election.
    h.recovery_answer(BrokerId(1), Offset(30), LeaderEpoch(0), None, None)
        .expect("answer");
    assert_eq!(h.partition().leader, None);
    h.unfence(BrokerId(2)).expect("unfence");
    h.recovery_answer(BrokerId(2), Offset(20), LeaderEpoch(0), None, None)
        .expect("answer");
    assert_eq!(h.partition().leader, Some(BrokerId(1)));
    assert_eq!(h.partition().recovery_requested, None);
    assert!(h.controller().partitions_under_recovery().is_empty());
}

#[test]
fn snapshot_rebuilds_the_image() {
    // issue 3: records "designed to be appended to a log and snapshotted".
    let (mut c, tp) = cluster();
    let out = c.fence_broker(BrokerId(3), 1);
    commit(&mut c, out).expect("fenced");
    let out = c.alter_config(
        &ConfigResource::Cluster,
        "unclean.recovery.strategy",
        Some("manual"),
        1,
    );
    commit(&mut c, out).expect("config");
    let snapshot = c.image().to_snapshot();
    let mut rebuilt = ClusterImage::new();
    for (i, r) in snapshot.iter().enumerate() {
        rebuilt
            .replay(MetadataOffset(i as i64), r)
            .expect("snapshot replays");
    }
    assert_eq!(rebuilt.to_snapshot(), snapshot);
    assert_eq!(rebuilt.partition(tp), c.partition(tp));
    assert_eq!(rebuilt.strategy(tp.topic), UncleanRecoveryStrategy::Manual);

    // Loaded as a snapshot ending at the controller's offset: same state, same next offset,
    // and later records replay after it.
    let end = c.next_offset();
    let loaded = ClusterImage::from_snapshot(end, &snapshot).expect("snapshot loads");
    assert_eq!(loaded.next_offset(), end);
    assert_eq!(loaded.to_snapshot(), snapshot);
    assert_eq!(loaded.partition(tp), c.partition(tp));
    // A snapshot cannot hold more records than offsets below its end.
    assert!(ClusterImage::from_snapshot(MetadataOffset(1), &snapshot).is_err());
}

#[test]
fn replay_rejects_records_that_break_invariants() {
    // KIP-966 ELR invariants asserted on replay: "The member of ELR should not be in ISR".
    let (mut c, tp) = cluster();
    let before = c.image().clone();
    let bad = Record::PartitionChange(records::PartitionChangeRecord {
        partition: tp,
        change: records::PartitionDelta {
            elr: Some([BrokerId(1)].into_iter().collect()),
            ..Default::default()
        },
    });
    let err = c.replay(c.next_offset(), &bad).unwrap_err();
    assert!(matches!(err, ReplayError::Invariant { .. }), "{err}");
    assert_eq!(c.image(), &before);
    let leaderless_outside_isr = Record::PartitionChange(records::PartitionChangeRecord {
        partition: tp,
        change: records::PartitionDelta {
            leader: Some(records::LeaderChange::To(BrokerId(9))),
            ..Default::default()
        },
    });
    assert!(c.replay(c.next_offset(), &leaderless_outside_isr).is_err());
    let last = c.image().last_applied().expect("records replayed");
    assert!(matches!(
        c.replay(last, &bad),
        Err(ReplayError::OffsetNotIncreasing { .. })
    ));
}

#[test]
fn create_topic_validation() {
    // Kafka CreateTopics: TOPIC_ALREADY_EXISTS, INVALID_REPLICA_ASSIGNMENT,
    // INVALID_REPLICATION_FACTOR, INVALID_CONFIG.
    let (mut c, tp) = cluster();
    let p = c.partition(tp).expect("p");
    assert_eq!(p.isr.len(), 3);
    assert_eq!(p.leader, Some(BrokerId(1)));
    let mut req = CreateTopicRequest {
        name: "t".to_string(),
        id: TopicId(uuid(78)),
        assignment: vec![vec![BrokerId(1)]],
        configs: BTreeMap::new(),
    };
    assert_eq!(
        c.create_topic(&req, 1).response.unwrap_err().code,
        ErrorCode::TopicAlreadyExists
    );
    req.name = "u".to_string();
    req.assignment = vec![vec![BrokerId(1), BrokerId(1)]];
    assert_eq!(
        c.create_topic(&req, 1).response.unwrap_err().code,
        ErrorCode::InvalidReplicaAssignment
    );
    req.assignment = vec![vec![BrokerId(1)]];
    req.configs.insert(
        "unclean.recovery.strategy".to_string(),
        "sometimes".to_string(),
    );
    let out = c.create_topic(&req, 1);
    assert!(out.records.is_empty());
    assert_eq!(out.response.unwrap_err().code, ErrorCode::InvalidConfig);
    req.configs.clear();
    let out = c.fence_broker(BrokerId(1), 1);
    commit(&mut c, out).expect("fenced");
    assert_eq!(
        c.create_topic(&req, 1).response.unwrap_err().code,
        ErrorCode::InvalidReplicationFactor
    );
    assert_eq!(
        c.assign_replicas(2, 2).expect("two live brokers"),
        vec![
            vec![BrokerId(2), BrokerId(3)],
            vec![BrokerId(3), BrokerId(2)]
        ]
    );
    assert_eq!(
        c.assign_replicas(1, 3).unwrap_err().code,
        ErrorCode::InvalidReplicationFactor
    );
}

#[test]
fn topic_min_isr_change_clears_elr_through_clear_elr_record() {
    // KIP-966: "When updating the config min.insync.replicas, if the new min ISR <= current ISR,
    // the ELR will be removed" (one ClearElr record, Kafka's shape).
    let (mut c, tp) = cluster();
    let out = c.alter_config(
        &ConfigResource::Topic("t".to_string()),
        "min.insync.replicas",
        Some("3"),
        1,
    );
    commit(&mut c, out).expect("config");
    let out = c.fence_broker(BrokerId(3), 1);
    commit(&mut c, out).expect("fenced");
    assert_eq!(c.partition(tp).expect("p").elr.len(), 1);
    let out = c.alter_config(
        &ConfigResource::Topic("t".to_string()),
        "min.insync.replicas",
        Some("2"),
        2,
    );
    assert!(matches!(out.records.last(), Some(Record::ClearElr(_))));
    commit(&mut c, out).expect("config");
    assert!(c.partition(tp).expect("p").elr.is_empty());
    let out = c.alter_config(
        &ConfigResource::Topic("nope".to_string()),
        "min.insync.replicas",
        Some("2"),
        2,
    );
    assert_eq!(
        out.response.unwrap_err().code,
        ErrorCode::UnknownTopicOrPartition
    );
    let out = c.alter_config(
        &ConfigResource::Cluster,
        "min.insync.replicas",
        Some("0"),
        2,
    );
    assert_eq!(out.response.unwrap_err().code, ErrorCode::InvalidConfig);
}

#[test]
fn alter_partition_unknown_topic_id() {
    // Kafka AlterPartition: unknown topic id -> UNKNOWN_TOPIC_ID (topic level).
    let (mut c, tp) = cluster();
    let epoch = c.image().broker(BrokerId(1)).expect("registered").epoch;
    let p = c.partition(tp).expect("p").clone();
    let mk = |topic: TopicId, partition: u32| alter_partition::AlterPartitionItem {
        topic,
        partition,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        new_isr: vec![alter_partition::IsrMember {
            broker: BrokerId(1),
            broker_epoch: None,
        }],
        leader_recovery_state: LeaderRecoveryState::Recovered,
    };
    let req = alter_partition::AlterPartitionRequest {
        broker: BrokerId(1),
        broker_epoch: epoch,
        partitions: vec![mk(TopicId(uuid(5)), 0), mk(tp.topic, 9), mk(tp.topic, 0)],
    };
    let out = c.alter_partition(&req, 1);
    let items = out.response.clone().expect("request accepted");
    assert_eq!(
        items[0].result.clone().unwrap_err(),
        ErrorCode::UnknownTopicId
    );
    assert_eq!(
        items[1].result.clone().unwrap_err(),
        ErrorCode::UnknownTopicOrPartition
    );
    let view = items[2].result.clone().expect("valid shrink to [1]");
    assert_eq!(view.isr.len(), 1);
    assert_eq!(view.partition_epoch, p.partition_epoch.next());
    commit(&mut c, out).expect("accepted");
    assert_eq!(
        c.partition(tp).expect("p").elr.len(),
        2,
        "ISR [1] < min ISR 2: [2, 3] into ELR"
    );
}

#[test]
fn producer_id_blocks_never_overlap_and_survive_a_snapshot() {
    let (mut c, _) = cluster();
    let epoch = |c: &Controller, b: i32| c.image().broker(BrokerId(b)).expect("registered").epoch;
    let e1 = epoch(&c, 1);
    let out = c.allocate_producer_ids(BrokerId(1), e1, 1);
    let a = commit(&mut c, out).expect("block for broker 1");
    let e2 = epoch(&c, 2);
    let out = c.allocate_producer_ids(BrokerId(2), e2, 1);
    let b = commit(&mut c, out).expect("block for broker 2");
    assert_eq!((a.first, a.len), (0, PRODUCER_ID_BLOCK_SIZE));
    assert_eq!(b.first, a.first + i64::from(a.len));
    // a stale epoch or an unknown broker gets nothing
    let out = c.allocate_producer_ids(BrokerId(1), BrokerEpoch(e1.0 + 100), 1);
    assert!(out.records.is_empty());
    assert_eq!(
        commit(&mut c, out).unwrap_err().code,
        ErrorCode::StaleBrokerEpoch
    );
    let out = c.allocate_producer_ids(BrokerId(9), e1, 1);
    assert_eq!(
        commit(&mut c, out).unwrap_err().code,
        ErrorCode::StaleBrokerEpoch
    );
    // a controller rebuilt from a snapshot goes on after the last block
    let end = c.next_offset();
    let image = ClusterImage::from_snapshot(end, &c.image().to_snapshot()).expect("loads");
    assert_eq!(image.next_producer_id(), b.first + i64::from(b.len));
    let mut rebuilt = Controller::from_image(image, ControllerConfig::new(CLUSTER), 1);
    let out = rebuilt.allocate_producer_ids(BrokerId(3), epoch(&rebuilt, 3), 2);
    assert_eq!(
        commit(&mut rebuilt, out).unwrap().first,
        2 * i64::from(PRODUCER_ID_BLOCK_SIZE)
    );
}
