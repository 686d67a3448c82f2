use super::*;

const NO_DELAY: GroupSettings = GroupSettings {
    initial_rebalance_delay_ms: 0,
    min_session_timeout_ms: 6_000,
    max_session_timeout_ms: 1_800_000,
    max_size: 100,
};

fn args(member_id: &str, protocols: &[&str]) -> JoinArgs {
    JoinArgs {
        member_id: member_id.to_string(),
        instance_id: None,
        client_id: "c".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".to_string(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
            .collect(),
        require_known_member_id: true,
        supports_skip_assignment: true,
    }
}

/// Joins with a fresh member: MEMBER_ID_REQUIRED, then the join with that id.
fn join(
    g: &mut Group,
    protocols: &[&str],
    now: i64,
    id: &str,
) -> (oneshot::Receiver<JoinAnswer>, Option<Persist>) {
    let (tx, mut rx) = oneshot::channel();
    g.join(args("", protocols), tx, now, &NO_DELAY, || id.to_string());
    let first = rx.try_recv().unwrap();
    assert_eq!(first.error, Some(ResponseError::MemberIdRequired));
    assert_eq!(first.member_id, id);
    let (tx, rx) = oneshot::channel();
    let persist = g.join(args(id, protocols), tx, now, &NO_DELAY, || unreachable!());
    (rx, persist)
}

fn sync(
    g: &mut Group,
    id: &str,
    generation: i32,
    assignments: Vec<(String, Bytes)>,
    now: i64,
) -> (oneshot::Receiver<SyncAnswer>, Option<Persist>) {
    let (tx, rx) = oneshot::channel();
    let p = g.sync(id, None, generation, None, None, assignments, tx, now);
    (rx, p)
}

#[test]
fn two_members_join_sync_and_become_stable() {
    let mut g = Group::new("g", 0);
    let (mut a, _) = join(&mut g, &["range", "roundrobin"], 0, "a");
    // alone: the rebalance completes at once (no initial delay here)
    let answer = a.try_recv().unwrap();
    assert_eq!(
        (answer.error, answer.generation, answer.leader.as_str()),
        (None, 1, "a")
    );
    assert_eq!(answer.members.len(), 1);
    assert_eq!(g.state(), GroupState::CompletingRebalance);

    // a second member: the group rebalances; the first must rejoin before it completes
    let (mut b, _) = join(&mut g, &["roundrobin", "range"], 1, "b");
    assert!(b.try_recv().is_err(), "waits for the other member");
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(
        g.heartbeat("a", None, 1, 2),
        Err(ResponseError::RebalanceInProgress)
    );
    let (tx, mut a2) = oneshot::channel();
    g.join(
        args("a", &["range", "roundrobin"]),
        tx,
        3,
        &NO_DELAY,
        || unreachable!(),
    );
    let (la, lb) = (a2.try_recv().unwrap(), b.try_recv().unwrap());
    assert_eq!((la.generation, lb.generation), (2, 2));
    assert_eq!(la.leader, "a");
    assert_eq!(la.members.len(), 2, "the leader sees every member");
    assert!(lb.members.is_empty());
    // one vote each: the tie goes to the first member's preference
    assert_eq!(la.protocol.as_deref(), Some("range"));

    let (mut sb, none) = sync(&mut g, "b", 2, vec![], 4);
    assert!(none.is_none() && sb.try_recv().is_err());
    let assignments = vec![
        ("a".to_string(), Bytes::from_static(b"A")),
        ("b".to_string(), Bytes::from_static(b"B")),
    ];
    let (mut sa, persist) = sync(&mut g, "a", 2, assignments, 5);
    let persist = persist.expect("the leader's assignment is written");
    assert_eq!(persist.value.members.len(), 2);
    assert!(sa.try_recv().is_err(), "answers wait for the write");
    g.synced(&persist, Ok(()), 6, &NO_DELAY);
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(sa.try_recv().unwrap().assignment, Bytes::from_static(b"A"));
    assert_eq!(sb.try_recv().unwrap().assignment, Bytes::from_static(b"B"));
    assert_eq!(g.heartbeat("b", None, 2, 7), Ok(()));
    assert_eq!(
        g.heartbeat("b", None, 1, 7),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.heartbeat("zz", None, 2, 7),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(g.validate_commit("a", None, 2), Ok(()));
    assert_eq!(
        g.validate_commit("", None, -1),
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn leaving_and_expiring_members_rebalance_and_an_empty_group_is_written() {
    let mut g = Group::new("g", 0);
    let (mut a, _) = join(&mut g, &["range"], 0, "a");
    a.try_recv().unwrap();
    let (_, p) = sync(&mut g, "a", 1, vec![("a".into(), Bytes::new())], 1);
    g.synced(&p.unwrap(), Ok(()), 1, &NO_DELAY);
    let (mut b, _) = join(&mut g, &["range"], 2, "b");
    let (tx, mut a2) = oneshot::channel();
    g.join(args("a", &["range"]), tx, 2, &NO_DELAY, || unreachable!());
    assert_eq!(a2.try_recv().unwrap().generation, 2);
    assert_eq!(b.try_recv().unwrap().generation, 2);

    // b leaves during the sync phase: a rebalances alone
    let (answers, persist) = g.leave(&[("b".into(), None), ("nobody".into(), None)], 3, &NO_DELAY);
    assert_eq!(answers, vec![None, Some(ResponseError::UnknownMemberId)]);
    assert!(persist.is_none());
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    let (tx, mut a3) = oneshot::channel();
    g.join(args("a", &["range"]), tx, 4, &NO_DELAY, || unreachable!());
    assert_eq!(a3.try_recv().unwrap().generation, 3);
    let (_, p) = sync(&mut g, "a", 3, vec![], 5);
    g.synced(&p.unwrap(), Ok(()), 5, &NO_DELAY);

    // a goes silent past its session timeout: the group ends up empty, which is written
    let persist = g.tick(5 + 10_001, &NO_DELAY).expect("empty group written");
    assert_eq!(g.state(), GroupState::Empty);
    assert!(persist.value.members.is_empty());
    assert_eq!(g.generation(), 4);
    assert_eq!(g.validate_commit("", None, -1), Ok(()));
}

#[test]
fn joins_are_checked() {
    let mut g = Group::new("g", 0);
    let (mut a, _) = join(&mut g, &["range"], 0, "a");
    a.try_recv().unwrap();
    let (tx, mut rx) = oneshot::channel();
    let mut other = args("", &["sticky"]);
    other.require_known_member_id = false;
    g.join(other, tx, 1, &NO_DELAY, || "x".to_string());
    assert_eq!(
        rx.try_recv().unwrap().error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    let (tx, mut rx) = oneshot::channel();
    let mut short = args("", &["range"]);
    short.session_timeout_ms = 10;
    g.join(short, tx, 1, &NO_DELAY, || "y".to_string());
    assert_eq!(
        rx.try_recv().unwrap().error,
        Some(ResponseError::InvalidSessionTimeout)
    );
    let (tx, mut rx) = oneshot::channel();
    g.join(
        args("ghost", &["range"]),
        tx,
        1,
        &NO_DELAY,
        || unreachable!(),
    );
    assert_eq!(
        rx.try_recv().unwrap().error,
        Some(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_static_member_returns_with_a_new_id_without_a_rebalance() {
    let mut g = Group::new("g", 0);
    let (mut a, _) = join(&mut g, &["range"], 0, "a");
    a.try_recv().unwrap();
    // a static member (group.instance.id) joins: no MEMBER_ID_REQUIRED round trip
    let mut static_args = args("", &["range"]);
    static_args.instance_id = Some("i-1".into());
    let (tx, mut s1) = oneshot::channel();
    g.join(static_args.clone(), tx, 1, &NO_DELAY, || "s1".to_string());
    let (tx, mut a2) = oneshot::channel();
    g.join(args("a", &["range"]), tx, 1, &NO_DELAY, || unreachable!());
    let leader = a2.try_recv().unwrap();
    assert_eq!((leader.leader.as_str(), leader.generation), ("a", 2));
    assert_eq!(s1.try_recv().unwrap().member_id, "s1");
    let (_, p) = sync(
        &mut g,
        "a",
        2,
        vec![("s1".into(), Bytes::from_static(b"S"))],
        2,
    );
    g.synced(&p.unwrap(), Ok(()), 2, &NO_DELAY);
    assert_eq!(g.state(), GroupState::Stable);

    // it restarts and joins again without its member id: same generation, no rebalance, the
    // new id is written, the old one is fenced
    let (tx, mut back) = oneshot::channel();
    let persist = g
        .join(static_args, tx, 3, &NO_DELAY, || "s2".to_string())
        .expect("the new member id is written");
    assert!(persist.value.members.iter().any(|m| m.member_id == "s2"));
    assert!(back.try_recv().is_err(), "the answer waits for the write");
    g.synced(&persist, Ok(()), 3, &NO_DELAY);
    let answer = back.try_recv().unwrap();
    assert_eq!(
        (answer.error, answer.member_id.as_str(), answer.generation),
        (None, "s2", 2)
    );
    assert_eq!(
        (answer.leader.as_str(), answer.skip_assignment),
        ("a", false)
    );
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(
        g.heartbeat("s1", Some("i-1"), 2, 3),
        Err(ResponseError::FencedInstanceId)
    );
    assert_eq!(g.heartbeat("s2", Some("i-1"), 2, 3), Ok(()));
    let (tx, mut assigned) = oneshot::channel();
    g.sync("s2", Some("i-1"), 2, None, None, vec![], tx, 4);
    assert_eq!(
        assigned.try_recv().unwrap().assignment,
        Bytes::from_static(b"S")
    );
}

/// A stable group of generation 2 whose leader is the static member `s1` (instance `i-1`,
/// assignment `S`) and whose other member is the dynamic `b` (assignment `B`).
fn stable_group_with_a_static_leader() -> (Group, JoinArgs) {
    let mut g = Group::new("g", 0);
    let mut static_args = args("", &["range"]);
    static_args.instance_id = Some("i-1".into());
    let (tx, mut s1) = oneshot::channel();
    g.join(static_args.clone(), tx, 0, &NO_DELAY, || "s1".to_string());
    assert_eq!(s1.try_recv().unwrap().leader, "s1");
    let (_, p) = sync(&mut g, "s1", 1, vec![], 0);
    g.synced(&p.unwrap(), Ok(()), 0, &NO_DELAY);
    let (mut b, _) = join(&mut g, &["range"], 1, "b");
    let mut rejoin = static_args.clone();
    rejoin.member_id = "s1".into();
    let (tx, mut s1) = oneshot::channel();
    g.join(rejoin, tx, 1, &NO_DELAY, || unreachable!());
    assert_eq!(s1.try_recv().unwrap().generation, 2);
    assert_eq!(b.try_recv().unwrap().leader, "s1");
    let assignments = vec![
        ("s1".to_string(), Bytes::from_static(b"S")),
        ("b".to_string(), Bytes::from_static(b"B")),
    ];
    let (_, p) = sync(&mut g, "s1", 2, assignments, 2);
    g.synced(&p.unwrap(), Ok(()), 2, &NO_DELAY);
    assert_eq!(g.state(), GroupState::Stable);
    (g, static_args)
}

// KIP-814 (Kafka: GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin,
// GroupMetadataManagerTest.testStaticMemberRejoinAsLeaderWithUnknownMemberId...): the static
// leader restarts and joins without a member id; JoinGroup v9+ answers it, once its new id is
// written, as leader with SkipAssignment and every member — no rebalance, the other member's
// generation and assignment stay.
#[test]
fn a_returning_static_leader_skips_the_assignment_without_a_rebalance() {
    let (mut g, static_args) = stable_group_with_a_static_leader();
    let (tx, mut back) = oneshot::channel();
    let persist = g
        .join(static_args, tx, 3, &NO_DELAY, || "s2".to_string())
        .expect("the new member id is written");
    assert_eq!(persist.rejoined.as_deref(), Some("s2"));
    assert_eq!(persist.value.leader.as_deref(), Some("s2"));
    assert!(back.try_recv().is_err(), "the answer waits for the write");
    assert_eq!(g.state(), GroupState::Stable);
    g.synced(&persist, Ok(()), 3, &NO_DELAY);
    let answer = back.try_recv().unwrap();
    assert_eq!(answer.error, None);
    assert_eq!(
        (
            answer.member_id.as_str(),
            answer.leader.as_str(),
            answer.generation
        ),
        ("s2", "s2", 2)
    );
    assert!(answer.skip_assignment);
    let members: Vec<&str> = answer.members.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(members, ["s2", "b"]);
    // nothing rebalanced: b's generation and assignment hold, the leader syncs (with no
    // assignment, as a skipping leader does) and gets its own back
    assert_eq!(g.state(), GroupState::Stable);
    assert_eq!(g.heartbeat("b", None, 2, 4), Ok(()));
    assert_eq!(g.validate_commit("b", None, 2), Ok(()));
    let (mut sb, none) = sync(&mut g, "b", 2, vec![], 4);
    assert!(none.is_none());
    assert_eq!(sb.try_recv().unwrap().assignment, Bytes::from_static(b"B"));
    let (tx, mut s2) = oneshot::channel();
    assert!(g
        .sync("s2", Some("i-1"), 2, None, None, vec![], tx, 4)
        .is_none());
    assert_eq!(s2.try_recv().unwrap().assignment, Bytes::from_static(b"S"));
    assert_eq!(
        g.heartbeat("s1", Some("i-1"), 2, 4),
        Err(ResponseError::FencedInstanceId)
    );
}

// Kafka (updateStaticMemberThenRebalanceOrCompleteJoin, JoinGroup before v9): the returning
// static leader is told the leader is its old member id, so it only syncs — no members, no
// SkipAssignment, no rebalance.
#[test]
fn a_returning_static_leader_before_join_group_v9_is_answered_as_a_follower() {
    let (mut g, mut static_args) = stable_group_with_a_static_leader();
    static_args.supports_skip_assignment = false;
    let (tx, mut back) = oneshot::channel();
    let persist = g
        .join(static_args, tx, 3, &NO_DELAY, || "s2".to_string())
        .unwrap();
    g.synced(&persist, Ok(()), 3, &NO_DELAY);
    let answer = back.try_recv().unwrap();
    assert_eq!(
        (
            answer.member_id.as_str(),
            answer.leader.as_str(),
            answer.generation
        ),
        ("s2", "s1", 2)
    );
    assert!(!answer.skip_assignment && answer.members.is_empty());
    assert_eq!((g.state(), g.leader()), (GroupState::Stable, Some("s2")));
}

// Kafka: a static member whose protocols change the group's selected protocol rebalances;
// one whose write fails gets its old member id back and the JoinGroup the error.
#[test]
fn a_static_rejoin_rebalances_on_a_new_protocol_and_reverts_when_not_written() {
    let (mut g, mut static_args) = stable_group_with_a_static_leader();
    let (tx, mut back) = oneshot::channel();
    let persist = g
        .join(static_args.clone(), tx, 3, &NO_DELAY, || "s2".to_string())
        .unwrap();
    g.synced(&persist, Err(ResponseError::NotCoordinator), 3, &NO_DELAY);
    let answer = back.try_recv().unwrap();
    assert_eq!(answer.error, Some(ResponseError::NotCoordinator));
    assert_eq!(
        (answer.member_id.as_str(), answer.leader.as_str()),
        ("", "s1")
    );
    assert_eq!((g.state(), g.leader()), (GroupState::Stable, Some("s1")));
    assert_eq!(g.heartbeat("s1", Some("i-1"), 2, 3), Ok(()));
    assert_eq!(
        g.heartbeat("s2", Some("i-1"), 2, 3),
        Err(ResponseError::FencedInstanceId)
    );

    // "range" only is what b supports: a member now preferring "roundrobin" over it keeps
    // "range" selected, one offering only "roundrobin" would not be supported at all
    static_args.protocols = vec![
        ("roundrobin".to_string(), Bytes::from_static(b"rr")),
        ("range".to_string(), Bytes::from_static(b"changed")),
    ];
    let (tx, _back) = oneshot::channel();
    let persist = g.join(static_args.clone(), tx, 4, &NO_DELAY, || "s3".to_string());
    assert!(persist.is_some_and(|p| p.rejoined.as_deref() == Some("s3")));
    assert_eq!(
        g.state(),
        GroupState::Stable,
        "the selected protocol stays range"
    );
    // b leaves; the static member alone prefers roundrobin: its next return rebalances
    g.leave(&[("b".into(), None)], 5, &NO_DELAY);
    let (tx, mut rejoined) = oneshot::channel();
    let mut known = static_args;
    known.member_id = g.leader().unwrap().to_string();
    g.join(known, tx, 6, &NO_DELAY, || unreachable!());
    let answer = rejoined.try_recv().unwrap();
    assert_eq!(answer.protocol.as_deref(), Some("roundrobin"));
    let (_, p) = sync(&mut g, &answer.member_id, answer.generation, vec![], 6);
    g.synced(&p.unwrap(), Ok(()), 6, &NO_DELAY);
    assert_eq!((g.state(), g.generation()), (GroupState::Stable, 3));
    // it returns offering range only: the selected protocol changes, so the group rebalances
    // (alone, at once) instead of keeping generation 3
    let (tx, mut changed) = oneshot::channel();
    let mut range_only = args("", &["range"]);
    range_only.instance_id = Some("i-1".into());
    let persist = g.join(range_only, tx, 7, &NO_DELAY, || "s4".to_string());
    assert!(persist.is_none());
    let answer = changed.try_recv().unwrap();
    assert_eq!(
        (answer.generation, answer.protocol.as_deref()),
        (4, Some("range"))
    );
    assert!(!answer.skip_assignment);
    assert_eq!(g.state(), GroupState::CompletingRebalance);
}

// Kafka (ClassicGroup.validateOffsetCommit, GroupMetadataManagerTest / OffsetMetadataManagerTest
// testGenericGroupOffsetCommit...): members and generations are checked before the state — a
// current member commits while the group prepares a rebalance (cooperative members keep their
// partitions, KIP-429), an older generation is ILLEGAL_GENERATION in every state, and only a
// current member between JoinGroup and the durable assignment gets REBALANCE_IN_PROGRESS.
#[test]
fn commits_during_a_rebalance_follow_kafkas_order() {
    let (mut g, _) = stable_group_with_a_static_leader();
    // a new member joins: PreparingRebalance, generation 2 still current
    let (_c, _) = join(&mut g, &["range"], 3, "c");
    assert_eq!(g.state(), GroupState::PreparingRebalance);
    assert_eq!(g.validate_commit("b", None, 2), Ok(()));
    assert_eq!(
        g.validate_commit("b", None, 1),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.validate_commit("c", None, 2),
        Ok(()),
        "Kafka checks the generation, not whether the member has it"
    );
    // everyone rejoins: CompletingRebalance at generation 3
    for id in ["s1", "b"] {
        let mut a = args(id, &["range"]);
        if id == "s1" {
            a.instance_id = Some("i-1".into());
        }
        let (tx, _) = oneshot::channel();
        g.join(a, tx, 4, &NO_DELAY, || unreachable!());
    }
    assert_eq!(
        (g.state(), g.generation()),
        (GroupState::CompletingRebalance, 3)
    );
    assert_eq!(
        g.validate_commit("b", None, 2),
        Err(ResponseError::IllegalGeneration),
        "a commit of the generation before is ILLEGAL_GENERATION, not REBALANCE_IN_PROGRESS"
    );
    assert_eq!(
        g.validate_commit("zz", None, 3),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.validate_commit("b", None, 3),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.validate_commit("", None, -1),
        Err(ResponseError::UnknownMemberId)
    );
}

fn offset(commit_timestamp: i64) -> OffsetValue {
    OffsetValue {
        offset: 7,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp,
    }
}

// Shows: offsets.retention.minutes follows Kafka's KIP-211 rule: a group with members keeps its
// offsets; once empty, a consumer group loses all of them `retention` after it became empty; a
// group that only ever committed loses each one `retention` after its commit.
#[test]
fn offsets_expire_by_kafkas_rule() {
    let retention = 1_000;
    let mut g = Group::new("g", 0);
    let (_a, _) = join(&mut g, &["range"], 0, "a");
    g.offsets.insert(("t".into(), 0), offset(0));
    assert!(
        g.expired_offsets(10_000, retention).is_empty(),
        "a member is in the group"
    );
    assert!(!g.is_idle());
    let (_, _) = g.leave(&[("a".into(), None)], 5_000, &NO_DELAY);
    assert_eq!(g.state(), GroupState::Empty);
    assert!(
        g.expired_offsets(5_999, retention).is_empty(),
        "emptied at 5000"
    );
    assert_eq!(
        g.expired_offsets(6_000, retention),
        vec![(("t".to_string(), 0), 0)]
    );
    assert!(g.is_idle());

    let mut standalone = Group::new("s", 0);
    standalone.offsets.insert(("t".into(), 0), offset(100));
    standalone.offsets.insert(("t".into(), 1), offset(900));
    assert_eq!(
        standalone.expired_offsets(1_500, retention),
        vec![(("t".to_string(), 0), 100)]
    );
    assert_eq!(standalone.expired_offsets(1_900, retention).len(), 2);
}
