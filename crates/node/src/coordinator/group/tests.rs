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
    g.synced(persist.generation, Ok(()), 6, &NO_DELAY);
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
    g.synced(p.unwrap().generation, Ok(()), 1, &NO_DELAY);
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
    g.synced(p.unwrap().generation, Ok(()), 5, &NO_DELAY);

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
    g.synced(p.unwrap().generation, Ok(()), 2, &NO_DELAY);
    assert_eq!(g.state(), GroupState::Stable);

    // it restarts and joins again without its member id: same generation, no rebalance, the
    // new id is written, the old one is fenced
    let (tx, mut back) = oneshot::channel();
    let persist = g.join(static_args, tx, 3, &NO_DELAY, || "s2".to_string());
    let answer = back.try_recv().unwrap();
    assert_eq!(
        (answer.error, answer.member_id.as_str(), answer.generation),
        (None, "s2", 2)
    );
    assert_eq!(g.state(), GroupState::Stable);
    assert!(persist.is_some_and(|p| p.value.members.iter().any(|m| m.member_id == "s2")));
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
