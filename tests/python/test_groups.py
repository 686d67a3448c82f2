"""Consumer groups (issue 9): the classic group protocol on the coordinator that leads the group's
`__consumer_offsets` partition, with committed offsets written there with acks=all.

Kafka's behaviour followed: FindCoordinator creates `__consumer_offsets` on first use; JoinGroup
v4+ answers a new member MEMBER_ID_REQUIRED (79) first (KIP-394); a rebalance completes when every
member rejoined; the leader's SyncGroup assignment reaches every member; LeaveGroup rebalances the
rest; a commit outside a generation is allowed only while the group is empty; DeleteGroups of a
group with members is NON_EMPTY_GROUP (68).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import confluent_kafka as ck
import kafka as kp
import pytest
from confluent_kafka.admin import AdminClient

from clients import (CONFLUENT_COMMON, confluent_produce, confluent_watermarks, create_topic, make_records,
                     unique_topic)
import kafka_wire as kw
from keel_broker import keel_bin, launch, retire

NO_DELAY = {"group.initial.rebalance.delay.ms": "0"}
WAIT_S = 60


@pytest.fixture(scope="module")
def groups_broker(tmp_path_factory):
    """A single-node broker whose groups rebalance without Kafka's 3 s initial delay."""
    b = launch(tmp_path_factory, "groups", config=NO_DELAY)
    yield b
    retire(b)


def produce_numbers(bootstrap: str, topic: str, first: int, count: int, partitions: int) -> None:
    p = ck.Producer({**CONFLUENT_COMMON, "bootstrap.servers": bootstrap, "acks": "all"})
    for n in range(first, first + count):
        p.produce(topic, value=str(n).encode(), partition=n % partitions)
    assert p.flush(30) == 0


class GroupMember:
    """One consumer of a group on its own thread: polls, commits synchronously after every poll
    that returned records, then records them (partition, offset, value), until `stop()`."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str) -> None:
        self.kind, self.records, self.crash = kind, [], None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        if kind == "confluent":
            self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "session.timeout.ms": 10_000, "logger": CONFLUENT_COMMON["logger"]})
            self.consumer.subscribe([topic])
        else:
            self.consumer = kp.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                             auto_offset_reset="earliest", enable_auto_commit=False,
                                             session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"{kind}-member")
        self.thread.start()

    def assignment(self) -> set[int]:
        with self._lock:
            return set(self._assigned)

    _assigned: set[int] = set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                got = []
                if self.kind == "confluent":
                    msg = self.consumer.poll(0.2)
                    if msg is not None and msg.error() is None:
                        got.append((msg.partition(), msg.offset(), msg.value()))
                    assigned = {tp.partition for tp in self.consumer.assignment()}
                else:
                    for records in self.consumer.poll(timeout_ms=200).values():
                        got.extend((r.partition, r.offset, r.value) for r in records)
                    assigned = {tp.partition for tp in self.consumer.assignment()}
                if got:
                    # Committed before recorded: a record the test sees is a committed one.
                    if self.kind == "confluent":
                        self.consumer.commit(asynchronous=False)
                    else:
                        self.consumer.commit()
                    with self._lock:
                        self.records.extend(got)
                with self._lock:
                    self._assigned = assigned
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.crash = e
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)

    def values(self) -> list[int]:
        with self._lock:
            return [int(v) for _, _, v in self.records]


def wait_until(what: str, condition, members) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        crashed = [m for m in members if m.crash is not None]
        assert not crashed, f"{what}: consumer failed: {crashed[0].crash!r}"
        assert time.monotonic() < deadline, f"{what}: not after {WAIT_S}s"
        time.sleep(0.1)


def test_librdkafka_and_kafka_python_share_a_group(groups_broker):
    """A confluent-kafka and a kafka-python consumer in one group over three partitions: the second
    member's join rebalances the partitions between them, together they read every record, and
    when one leaves the other takes its partitions over from the committed offsets — reading
    exactly the new records, nothing skipped and nothing again."""
    bootstrap = groups_broker.bootstrap
    topic, group, partitions = unique_topic("grp"), unique_topic("g"), 3
    create_topic(bootstrap, topic, partitions)
    produce_numbers(bootstrap, topic, 0, 300, partitions)

    a = GroupMember("confluent", bootstrap, group, topic)
    wait_until("the first member owns every partition", lambda: a.assignment() == {0, 1, 2}, [a])
    b = GroupMember("kafka-python", bootstrap, group, topic)
    wait_until("the partitions are split between both members",
               lambda: a.assignment() and b.assignment() and a.assignment() | b.assignment() == {0, 1, 2}
               and not a.assignment() & b.assignment(), [a, b])
    wait_until("every record is read", lambda: set(a.values()) | set(b.values()) >= set(range(300)), [a, b])

    b.stop()  # LeaveGroup: a takes every partition again
    wait_until("the remaining member owns every partition", lambda: a.assignment() == {0, 1, 2}, [a])
    seen_before = len(a.values())
    produce_numbers(bootstrap, topic, 300, 30, partitions)
    wait_until("the new records are read", lambda: set(a.values()) >= set(range(300, 330)), [a])
    time.sleep(0.5)
    a.stop()
    assert sorted(a.values()[seen_before:]) == list(range(300, 330)), "after the rebalance: new records only"
    assert a.crash is None and b.crash is None, (a.crash, b.crash)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends = confluent_watermarks(bootstrap, topic, list(range(partitions)))
    request = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, p) for p in range(partitions)])
    committed = admin.list_consumer_group_offsets([request])[group].result()
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == \
        {p: hi for p, (_, hi) in ends.items()}


def test_group_admin_operations(groups_broker):
    """ListGroups and DescribeGroups show a live group with its member; DeleteGroups refuses it
    (NON_EMPTY_GROUP) until it is empty; offsets set by the admin client (a commit outside any
    generation) are read back, deleted one partition at a time (OffsetDelete) and with the group."""
    bootstrap = groups_broker.bootstrap
    topic, group = unique_topic("grp-admin"), unique_topic("g-admin")
    create_topic(bootstrap, topic, 2)
    confluent_produce(bootstrap, topic, make_records(20, 2, tag="adm"), acks="all")
    admin = AdminClient({"bootstrap.servers": bootstrap})

    member = GroupMember("confluent", bootstrap, group, topic)
    wait_until("the member is assigned", lambda: member.assignment() == {0, 1}, [member])
    listed = {g.group_id: g for g in admin.list_consumer_groups().result().valid}
    assert group in listed and listed[group].state == ck.ConsumerGroupState.STABLE, listed.get(group)
    described = admin.describe_consumer_groups([group])[group].result()
    assert described.state == ck.ConsumerGroupState.STABLE and len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1}
    with pytest.raises(ck.KafkaException) as refused:
        admin.delete_consumer_groups([group])[group].result()
    assert refused.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    member.stop()

    offsets = [ck.TopicPartition(topic, 0, 3), ck.TopicPartition(topic, 1, 7)]
    admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, offsets)])[group].result()
    asked = [ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)]
    read = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, asked)])[group].result()
    assert {tp.partition: tp.offset for tp in read.topic_partitions} == {0: 3, 1: 7}
    kp_admin = kp.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # OffsetDelete (confluent-kafka's Python admin client does not expose it)
        answer = kp_admin.delete_group_offsets(group, [kp.TopicPartition(topic, 0)])
    finally:
        kp_admin.close()
    assert [e.errno for e in answer.values()] == [0], answer
    read = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, asked)])[group].result()
    assert {tp.partition: tp.offset for tp in read.topic_partitions} == {0: ck.OFFSET_INVALID, 1: 7}
    admin.delete_consumer_groups([group])[group].result()
    assert group not in {g.group_id for g in admin.list_consumer_groups().result().valid}


def test_committed_offsets_survive_the_coordinators_kill9(cluster):
    """Three brokers, `__consumer_offsets` with RF 3 and min ISR 2: a group commits offsets 40 of
    every partition and leaves; the broker coordinating it is killed with -9; a new member of the
    group is served by the new leader of the group's partition and starts exactly at the
    committed offsets."""
    c = cluster("groups-kill", broker=NO_DELAY)
    topic, group, partitions = unique_topic("grp-kill"), unique_topic("g-kill"), 3
    c.create_topic(topic, partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    produce_numbers(c.bootstrap, topic, 0, 300, partitions)

    first = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "logger": CONFLUENT_COMMON["logger"]})
    first.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while len(first.assignment()) < partitions:
        first.poll(0.2)
        assert time.monotonic() < deadline, "no assignment"
    first.commit(offsets=[ck.TopicPartition(topic, p, 40) for p in range(partitions)], asynchronous=False)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result().coordinator.id
    first.close()

    c.kill9(coordinator)
    alive = [i for i in range(3) if i != coordinator]
    second = ck.Consumer({"bootstrap.servers": c.bootstrap_of(alive), "group.id": group,
                          "auto.offset.reset": "earliest", "enable.auto.commit": False,
                          "logger": CONFLUENT_COMMON["logger"]})
    second.subscribe([topic])
    firsts: dict[int, int] = {}
    deadline = time.monotonic() + WAIT_S
    while len(firsts) < partitions:
        msg = second.poll(0.2)
        if msg is not None and msg.error() is None:
            firsts.setdefault(msg.partition(), msg.offset())
        assert time.monotonic() < deadline, f"the new member read only {firsts}"
    second.close()
    assert firsts == {p: 40 for p in range(partitions)}, f"first offsets read after the failover: {firsts}"
    c.restart(coordinator)


def keel_groups(broker, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(keel_bin()), "groups", *args, "--bootstrap-server", broker.bootstrap],
                         capture_output=True, text=True, timeout=60, env={"RUST_BACKTRACE": "0"})
    assert (run.returncode == 0) == ok, f"keel groups {' '.join(args)}: exit {run.returncode}\n{run.stdout}{run.stderr}"
    return run


def test_keel_groups_commands(groups_broker):
    """`keel groups list / describe / reset-offsets / delete`: the group, its committed offsets,
    log end offsets and lag; a reset is only printed without --execute, is refused while the
    group has a member, and commits with --execute; delete removes the group."""
    bootstrap = groups_broker.bootstrap
    topic, group = unique_topic("grp-cli"), unique_topic("g-cli")
    create_topic(bootstrap, topic, 2)
    produce_numbers(bootstrap, topic, 0, 20, 2)
    member = GroupMember("confluent", bootstrap, group, topic)
    wait_until("the member reads everything", lambda: len(member.values()) >= 20, [member])

    listed = json.loads(keel_groups(groups_broker, "list", "--json").stdout)
    assert {"group": group, "state": "Stable", "protocol_type": "consumer"}.items() <= \
        next(g for g in listed if g["group"] == group).items(), listed
    described = json.loads(keel_groups(groups_broker, "describe", group, "--json").stdout)
    assert described["state"] == "Stable" and described["members"] == 1, described
    rows = {r["partition"]: r for r in described["partitions"]}
    assert {p: (r["committed_offset"], r["log_end_offset"], r["lag"]) for p, r in rows.items()} == \
        {0: (10, 10, 0), 1: (10, 10, 0)}, rows
    assert all(r["member"] for r in rows.values()), rows
    refused = keel_groups(groups_broker, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                          ok=False)
    assert "active members" in refused.stderr, refused.stderr
    member.stop()

    no_target = keel_groups(groups_broker, "reset-offsets", group, "--topic", topic, ok=False)
    assert "--to-earliest, --to-latest or --to-offset" in no_target.stderr, no_target.stderr
    dry = keel_groups(groups_broker, "reset-offsets", group, "--topic", topic, "--to-offset", "4")
    assert "dry run" in dry.stdout, dry.stdout
    keel_groups(groups_broker, "reset-offsets", group, "--topic", topic, "--partition", "1", "--to-offset", "4",
                "--execute")
    described = json.loads(keel_groups(groups_broker, "describe", group, "--json").stdout)
    assert described["state"] == "Empty"
    assert {r["partition"]: (r["committed_offset"], r["lag"]) for r in described["partitions"]} == \
        {0: (10, 0), 1: (4, 6)}, described
    text = keel_groups(groups_broker, "describe", group).stdout
    assert "LAG" in text and f"{topic}  1" in text, text
    keel_groups(groups_broker, "delete", group)
    assert group not in keel_groups(groups_broker, "list").stdout


def test_describe_of_a_missing_group_says_so(groups_broker):
    """`keel groups describe` of a group the coordinator has never seen exits non-zero with Kafka's
    kafka-consumer-groups.sh message, "Consumer group 'x' does not exist." (issue 19), instead of
    describing an empty Dead group."""
    group = unique_topic("g-missing")
    missing = keel_groups(groups_broker, "describe", group, ok=False)
    assert missing.returncode == 1, missing
    assert missing.stderr.strip() == f"Error: Consumer group '{group}' does not exist.", missing.stderr
    assert keel_groups(groups_broker, "describe", group, "--json", ok=False).stdout == ""


CRASHING_MEMBER = r"""
import json, sys, time
import confluent_kafka as ck
bootstrap, group, topic = sys.argv[1:4]
c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                 "enable.auto.commit": False, "session.timeout.ms": 6000})
c.subscribe([topic])
read = []
while len(read) < 60:
    m = c.poll(0.5)
    if m is None or m.error():
        continue
    read.append(int(m.value()))
    if len(read) == 40:
        c.commit(asynchronous=False)
        print(json.dumps({"committed": read}), flush=True)
print(json.dumps({"uncommitted": read[40:]}), flush=True)
time.sleep(600)
"""


def test_only_an_uncommitted_crash_brings_records_back(groups_broker, tmp_path):
    """A member reads 40 records and commits, reads 20 more and is killed with -9 before it
    commits them. Once its session expires, another member takes its partitions over from the
    commits: it reads exactly those 20 again (the only duplicates) and everything after them."""
    bootstrap = groups_broker.bootstrap
    topic, group = unique_topic("grp-crash"), unique_topic("g-crash")
    create_topic(bootstrap, topic, 2)
    produce_numbers(bootstrap, topic, 0, 100, 2)
    script = tmp_path / "member.py"
    script.write_text(CRASHING_MEMBER)
    proc = subprocess.Popen([sys.executable, str(script), bootstrap, group, topic],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[dict] = []
    reader = threading.Thread(target=lambda: lines.extend(json.loads(line) for line in proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while len(lines) < 2:
            assert time.monotonic() < deadline, f"the crashing member printed only {lines} in {WAIT_S}s"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(10)
    committed, uncommitted = lines[0]["committed"], lines[1]["uncommitted"]
    assert len(committed) == 40 and len(uncommitted) == 20, lines

    survivor = GroupMember("confluent", bootstrap, group, topic)
    wait_until("the survivor reads what the crashed member did not commit",
               lambda: set(survivor.values()) >= set(range(100)) - set(committed), [survivor])
    time.sleep(0.5)
    survivor.stop()
    again = sorted(set(survivor.values()) & (set(committed) | set(uncommitted)))
    assert again == sorted(uncommitted), f"read again: {again}; uncommitted: {sorted(uncommitted)}"
    assert sorted(survivor.values()) == sorted(set(range(100)) - set(committed)), "each once, none skipped"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return _uvarint(0)
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _read_uvarint(r) -> int:
    value, shift = 0, 0
    while True:
        byte = r.int8() & 0xFF
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7


def offset_commit_v8(conn, group: str, topic: str, partition: int, offset: int) -> int:
    """OffsetCommit v8 (a flexible version: compact strings, so a group id may exceed 32,767
    bytes) outside any generation; returns the partition's error code."""
    body = (_compact_string(group) + kw.Writer().int32(-1).getvalue() + _compact_string("")
            + _compact_string(None) + _uvarint(2) + _compact_string(topic) + _uvarint(2)
            + kw.Writer().int32(partition).int64(offset).int32(-1).getvalue() + _compact_string(None)
            + b"\0" + b"\0" + b"\0")
    correlation_id = conn.next_correlation_id
    conn.next_correlation_id += 1
    header = kw.Writer().int16(8).int16(8).int32(correlation_id).string("keel-tests").getvalue() + b"\0"
    conn.send(kw.frame(header + body))
    r = kw.Reader(conn.recv_frame())
    assert r.int32() == correlation_id
    assert r.int8() == 0  # response header tagged fields
    r.int32()  # throttle
    assert _read_uvarint(r) == 2 and _read_uvarint(r) == len(topic.encode()) + 1
    r._take(len(topic.encode()))
    assert r.int8() == 2
    assert r.int32() == partition
    return r.int16()


def test_group_ids_too_long_for_a_record_are_refused(groups_broker):
    """A group id is stored with an i16 length in __consumer_offsets: one over 32,767 bytes
    (possible with flexible versions' compact strings) is INVALID_GROUP_ID (24), and nothing is
    written; a topic name that long is INVALID_TOPIC_EXCEPTION (17) for its partition; the
    longest allowed group id commits."""
    topic = unique_topic("long-group")
    create_topic(groups_broker.bootstrap, topic, 1)
    # A FindCoordinator (here librdkafka's) creates __consumer_offsets if no test did yet.
    c = ck.Consumer({"bootstrap.servers": groups_broker.bootstrap, "group.id": "short",
                     "logger": CONFLUENT_COMMON["logger"]})
    c.committed([ck.TopicPartition(topic, 0)], timeout=WAIT_S)
    c.close()
    with kw.RawConnection.to(groups_broker.bootstrap) as conn:
        assert offset_commit_v8(conn, "g" * 40_000, topic, 0, 5) == 24
        # A topic name too long for the record key: the partition's error, not a broken broker.
        assert offset_commit_v8(conn, "g-long-topic", "t" * 40_000, 0, 5) == 17
        deadline = time.monotonic() + WAIT_S
        while (error := offset_commit_v8(conn, "g" * 32_767, topic, 0, 5)) in (14, 15) \
                and time.monotonic() < deadline:
            time.sleep(0.1)  # the group's partition is still getting its leader or loading
        assert error == 0
    c = ck.Consumer({"bootstrap.servers": groups_broker.bootstrap, "group.id": "g" * 32_767,
                     "logger": CONFLUENT_COMMON["logger"]})
    try:
        assert c.committed([ck.TopicPartition(topic, 0)], timeout=WAIT_S)[0].offset == 5
    finally:
        c.close()


def test_deleting_a_topic_removes_its_committed_offsets(groups_broker):
    """Kafka removes a deleted topic's committed offsets from every group: a group's offsets for
    a deleted topic disappear (also from a coordinator that reloads them after kill -9), those
    for another topic stay."""
    bootstrap = groups_broker.bootstrap
    doomed, kept, group = unique_topic("doomed"), unique_topic("kept"), unique_topic("g-doomed")
    create_topic(bootstrap, doomed, 2)
    create_topic(bootstrap, kept, 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    offsets = [ck.TopicPartition(doomed, 0, 3), ck.TopicPartition(doomed, 1, 4), ck.TopicPartition(kept, 0, 5)]
    admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group, offsets)])[group].result()

    def committed() -> dict[tuple[str, int], int]:
        read = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result()
        return {(tp.topic, tp.partition): tp.offset for tp in read.topic_partitions}

    assert committed() == {(doomed, 0): 3, (doomed, 1): 4, (kept, 0): 5}
    admin.delete_topics([doomed], operation_timeout=30)[doomed].result()
    deadline = time.monotonic() + WAIT_S
    while committed() != {(kept, 0): 5}:
        assert time.monotonic() < deadline, f"offsets after the topic's deletion: {committed()}"
        time.sleep(0.1)
    groups_broker.kill9()
    groups_broker.start()
    admin = AdminClient({"bootstrap.servers": groups_broker.bootstrap})
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if committed() == {(kept, 0): 5}:
                break
        except ck.KafkaException:
            pass  # the coordinator is still loading
        assert time.monotonic() < deadline, "the reloaded group does not match"
        time.sleep(0.2)
