"""The group coordinator in the corners where clients rely on Kafka's exact answers (issue 20):
commits for partitions that do not exist, a static leader's return, commits while a cooperative
group rebalances. Each test cites the Kafka code that defines the behaviour.

The Java side is tests/java/KeelGroupCorners.java (kafka-clients 4.1, built like the Java client
check); librdkafka through confluent-kafka; the rebalance timing over the raw wire, since only a
hand-driven leader can hold a group in CompletingRebalance for as long as a test needs. Every test
here also passes against Apache Kafka 4.1.0 itself (a single combined-mode node with
`group.initial.rebalance.delay.ms=0`, started from the kafka_2.13 jars of tests/java/tools).
"""

from __future__ import annotations

import subprocess
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

import kafka_wire as kw
from clients import CONFLUENT_COMMON, create_topic, unique_topic
from keel_broker import launch, retire
from test_java_client import JAVA_DIR, build_check

NO_DELAY = {"group.initial.rebalance.delay.ms": "0"}
WAIT_S = 60
# org.apache.kafka.common.protocol.Errors
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A single-node broker whose groups rebalance without Kafka's 3 s initial delay."""
    b = launch(tmp_path_factory, "group-corners", config=NO_DELAY)
    yield b
    retire(b)


def java(*args: str) -> dict[str, list[str]]:
    """Runs KeelGroupCorners; returns its "KEY rest" lines by key."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelGroupCorners.java", classes / "KeelGroupCorners.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelGroupCorners", *args],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


def test_commits_for_unknown_topics_or_partitions_are_refused_per_partition(broker):
    """Kafka (KafkaApis.handleOffsetCommitRequest: `metadataCache.contains(topic)`, then
    `getPartitionInfo` per partition) answers UNKNOWN_TOPIC_OR_PARTITION for each partition it
    does not know and commits the others: the Java admin client's alterConsumerGroupOffsets
    fails exactly those partitions (UnknownTopicOrPartitionException), as confluent-kafka's admin
    client does and its consumer's commit of explicit offsets; nothing is stored for them."""
    topic = unique_topic("corners-unknown")
    create_topic(broker.bootstrap, topic, 2)

    group = unique_topic("g-java")
    out = java("alter", broker.bootstrap, topic, group)
    assert sorted(out["RESULT"]) == sorted([f"{topic}-0 OK", f"{topic}-99 UnknownTopicOrPartitionException",
                                            f"{topic}-missing-0 UnknownTopicOrPartitionException"]), out
    assert out["COMMITTED"] == [f"{topic}-0 5"], out

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    group = unique_topic("g-admin")
    asked = [ck.TopicPartition(topic, 0, 5), ck.TopicPartition(topic, 99, 1),
             ck.TopicPartition(topic + "-missing", 0, 1)]
    result = admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, asked)])[group].result()
    errors = {(tp.topic, tp.partition): tp.error and tp.error.code() for tp in result.topic_partitions}
    unknown = ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    assert errors == {(topic, 0): None, (topic, 99): unknown, (topic + "-missing", 0): unknown}, errors

    group = unique_topic("g-consumer")
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "logger": CONFLUENT_COMMON["logger"]})
    try:
        with pytest.raises(ck.KafkaException) as refused:
            consumer.commit(offsets=asked, asynchronous=False)
        assert refused.value.args[0].code() == unknown
        committed = consumer.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=10)
        assert [tp.offset for tp in committed] == [5, ck.OFFSET_INVALID], "the known partition is committed"
    finally:
        consumer.close()


def test_a_returning_static_java_leader_does_not_rebalance(broker):
    """KIP-345 / KIP-814 (Kafka: GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin,
    JoinGroup v9 SkipAssignment): two Java consumers with group.instance.id a (the leader: it
    joined first) and b share four partitions; a is closed (a static member does not leave) and
    a new consumer with instance id a starts. It gets a's partitions back at the same generation,
    and b sees no rebalance: no callback, same generation, same partitions."""
    topic, group = unique_topic("corners-static"), unique_topic("g-static")
    create_topic(broker.bootstrap, topic, 4)
    out = java("static", broker.bootstrap, topic, group)
    a_before, a_after = out["A_BEFORE"][0], out["A_AFTER"][0]
    b_before, b_after = out["B_BEFORE"][0], out["B_AFTER"][0]
    assert a_after == a_before, f"the returning leader's partitions and generation: {a_before} -> {a_after}"
    assert b_after == b_before, f"b's partitions, generation and callbacks: {b_before} -> {b_after}"


class StaticMember:
    """A librdkafka consumer with a group.instance.id polling on its own thread; counts its
    rebalance callbacks and keeps its assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        self.callbacks, self.assigned, self.crash = 0, set(), None
        self._stop = threading.Event()
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "group.instance.id": instance, "enable.auto.commit": False,
                                     "session.timeout.ms": 30_000, "logger": CONFLUENT_COMMON["logger"]})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"static-{instance}")
        self.thread.start()

    def _on_assign(self, consumer, partitions) -> None:
        self.callbacks += 1
        self.assigned = {tp.partition for tp in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        self.callbacks += 1
        self.assigned = set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(0.1)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.crash = e
        finally:
            self.consumer.close()  # a static member does not send LeaveGroup

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)


def wait_until(what: str, condition, members) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        crashed = [m for m in members if m.crash is not None]
        assert not crashed, f"{what}: consumer failed: {crashed[0].crash!r}"
        assert time.monotonic() < deadline, f"{what}: not after {WAIT_S}s"
        time.sleep(0.1)


def test_a_returning_static_librdkafka_leader_does_not_rebalance(broker):
    """KIP-345 with librdkafka, whose JoinGroup is older than v9 (Kafka answers such a returning
    leader with its old member id as the leader, so it only syncs): the leader a of a two-member
    static group restarts; the new a gets a's partitions back and b has no rebalance callback."""
    topic, group = unique_topic("corners-static-rd"), unique_topic("g-static-rd")
    create_topic(broker.bootstrap, topic, 4)
    a = StaticMember(broker.bootstrap, group, topic, "a")
    wait_until("a owns every partition", lambda: a.assigned == {0, 1, 2, 3}, [a])
    b = StaticMember(broker.bootstrap, group, topic, "b")
    wait_until("a and b share the partitions",
               lambda: a.assigned and b.assigned and a.assigned | b.assigned == {0, 1, 2, 3}, [a, b])
    time.sleep(1)
    a_partitions, b_partitions, b_callbacks = set(a.assigned), set(b.assigned), b.callbacks
    a.stop()
    again = StaticMember(broker.bootstrap, group, topic, "a")
    try:
        wait_until("the returning a is assigned", lambda: again.assigned, [again, b])
        time.sleep(7)  # b heartbeats every 3 s: long enough to hear of a rebalance
        assert again.assigned == a_partitions
        assert (b.assigned, b.callbacks) == (b_partitions, b_callbacks), "b saw a rebalance"
    finally:
        again.stop()
        b.stop()


# --- the raw wire: JoinGroup v5, SyncGroup v3, Heartbeat v3, OffsetCommit v7 (non-flexible) ---

def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics and no user data."""
    return kw.Writer().int16(0).int32(1).string(topic).bytes_(None).getvalue()


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    w = kw.Writer().int16(0).int32(1).string(topic).int32(len(partitions))
    for p in partitions:
        w.int32(p)
    return w.bytes_(None).getvalue()


def find_coordinator(conn, group: str) -> None:
    """FindCoordinator v0 until it answers (the first one creates `__consumer_offsets`)."""
    deadline = time.monotonic() + WAIT_S
    while conn.call(10, 0, kw.Writer().string(group).getvalue()).int16() != 0:
        assert time.monotonic() < deadline, "no coordinator"
        time.sleep(0.1)


def join_group(conn, group: str, member_id: str, topic: str) -> tuple[int, int, str, str, list[str]]:
    """(error, generation, leader, member id, the member ids a leader is given)."""
    body = (kw.Writer().string(group).int32(30_000).int32(30_000).string(member_id).string(None)
            .string("consumer").int32(1).string("cooperative-sticky").bytes_(subscription(topic)).getvalue())
    r = conn.call(11, 5, body)
    r.int32()
    error, generation = r.int16(), r.int32()
    r.string()
    leader, member = r.string(), r.string()
    members = r.array(lambda x: (x.string(), x.string(), x.bytes_()))
    return error, generation, leader, member, [m[0] for m in members]


def sync_group(conn, group: str, generation: int, member_id: str, assignments: list[tuple[str, bytes]]) -> int:
    w = kw.Writer().string(group).int32(generation).string(member_id).string(None).int32(len(assignments))
    for member, data in assignments:
        w.string(member).bytes_(data)
    r = conn.call(14, 3, w.getvalue())
    r.int32()
    return r.int16()


def heartbeat(conn, group: str, generation: int, member_id: str) -> int:
    r = conn.call(12, 3, kw.Writer().string(group).int32(generation).string(member_id).string(None).getvalue())
    r.int32()
    return r.int16()


def commit(conn, group: str, generation: int, member_id: str, topic: str, partition: int, offset: int) -> int:
    body = (kw.Writer().string(group).int32(generation).string(member_id).string(None).int32(1).string(topic)
            .int32(1).int32(partition).int64(offset).int32(-1).string(None).getvalue())
    r = conn.call(8, 7, body)
    r.int32()
    topics = r.array(lambda x: (x.string(), x.array(lambda y: (y.int32(), y.int16()))))
    return topics[0][1][0][1]


def test_commits_while_a_cooperative_group_rebalances(broker):
    """Kafka's ClassicGroup.validateOffsetCommit checks the member and its generation before the
    state: a current member's commit is accepted while the group prepares a rebalance (a
    cooperative member still owns its partitions, KIP-429), a commit of the generation before
    is ILLEGAL_GENERATION — also in CompletingRebalance, where Keel answered REBALANCE_IN_PROGRESS
    — and only a current member between its JoinGroup answer and the written assignment is told
    REBALANCE_IN_PROGRESS. A hand-driven leader holds the group there while a librdkafka
    cooperative-sticky consumer joins it."""
    topic, group = unique_topic("corners-coop"), unique_topic("g-coop")
    create_topic(broker.bootstrap, topic, 2)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        find_coordinator(conn, group)
        error, _, _, member, _ = join_group(conn, group, "", topic)
        assert error == MEMBER_ID_REQUIRED
        error, first, leader, member, _ = join_group(conn, group, member, topic)
        assert (error, leader) == (0, member)
        assert sync_group(conn, group, first, member, [(member, assignment(topic, [0, 1]))]) == 0
        assert commit(conn, group, first, member, topic, 0, 1) == 0

        other = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "partition.assignment.strategy": "cooperative-sticky",
                             "enable.auto.commit": False, "logger": CONFLUENT_COMMON["logger"]})
        other.subscribe([topic])
        stop = threading.Event()
        polling = threading.Thread(target=lambda: [other.poll(0.1) for _ in iter(stop.is_set, True)], daemon=True)
        polling.start()
        try:
            deadline = time.monotonic() + WAIT_S
            while heartbeat(conn, group, first, member) != REBALANCE_IN_PROGRESS:
                assert time.monotonic() < deadline, "librdkafka's member never joined"
                time.sleep(0.1)
            # PreparingRebalance: the leader still owns both partitions and commits them
            assert commit(conn, group, first, member, topic, 0, 2) == 0
            error, second, leader, _, members = join_group(conn, group, member, topic)
            assert (error, second, leader, len(members)) == (0, first + 1, member, 2)
            # CompletingRebalance, the leader's SyncGroup held back
            assert commit(conn, group, first, member, topic, 0, 3) == ILLEGAL_GENERATION
            assert commit(conn, group, second, "nobody", topic, 0, 3) == 25  # UNKNOWN_MEMBER_ID
            assert commit(conn, group, second, member, topic, 0, 3) == REBALANCE_IN_PROGRESS
            given = [(m, assignment(topic, [0] if m == member else [1])) for m in members]
            assert sync_group(conn, group, second, member, given) == 0
            assert commit(conn, group, second, member, topic, 0, 4) == 0
        finally:
            stop.set()
            polling.join(10)
            other.close()
