"""DeleteRecords (API 21, issue 20) end to end on a three-broker cluster (three controllers,
RF 3, min.insync.replicas 2): the Java admin client (kafka-clients 4.1, tests/java/KeelDeleteRecords
.java), librdkafka through confluent-kafka's AdminClient.delete_records, the raw wire for exact
error codes, Kafka's own kafka-delete-records.sh (org.apache.kafka.tools.DeleteRecordsCommand,
kafka-tools 4.1), `keel records delete`, and a Kafka Streams 4.4 groupBy whose repartition topic
Streams trims after each commit (the user story).

Kafka sources of the behaviour: KafkaApis.handleDeleteRecordsRequest, ReplicaManager
.deleteRecords / deleteRecordsOnLocalLog, Partition.deleteRecordsOnLeader and lowWatermarkIfLeader,
DelayedDeleteRecords, UnifiedLog.maybeIncrementLogStartOffset, ReplicaFetcherThread
.processPartitionData (followers follow the leader's log start offset) and AbstractFetcherThread
.fetchOffsetAndTruncate (a follower below it starts over there).

Where Keel is stricter than Kafka: the new log start offset is checkpointed (fsynced) before the
leader answers and before a follower reports it — Kafka checkpoints it every minute — so `kill -9`
of every broker right after the answer keeps it; a waiting request completes as soon as the lagging
follower's broker is fenced, not only at the next fetch.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import confluent_kafka as ck
import kafka as kp
import pytest

import kafka_wire as kw
from builds import java_build
from clients import (ADMIN_TIMEOUT_S, CONFLUENT_COMMON, Rec, confluent_admin, confluent_produce,
                     unique_topic)
from keel_broker import keel_bin
from keel_cluster import Cluster
from test_java_client import JAVA_DIR, build_check

API_DELETE_RECORDS = 21
API_FIND_COORDINATOR = 10
# org.apache.kafka.common.protocol.Errors
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
INVALID_TOPIC_EXCEPTION = 17
POLICY_VIOLATION = 44
EARLIEST = -2  # ListOffsets timestamp

SEGMENT_BYTES = 1024 * 1024  # Kafka 4's minimum segment.bytes
VALUE = b"v" * 1000  # ~1,070 bytes a record on disk: about 980 records a segment
WAIT_S = 60.0
TOPIC_CONFIG = {"segment.bytes": str(SEGMENT_BYTES), "min.insync.replicas": "2"}
STREAMS_DIR = JAVA_DIR / "streams"
STREAMS_CACHE = Path(__file__).resolve().parents[2] / "tests" / ".cache" / "java" / "streams"


@pytest.fixture(scope="module")
def dr(tmp_path_factory):
    """One cluster for the whole file; each test leaves every broker running with full ISRs."""
    # A stopped broker is fenced after 10 s (3 s elsewhere in the suite): long enough for the three
    # clients of the stopped-follower test to see their deletions time out first.
    c = Cluster(tmp_path_factory.mktemp("delete-records"), name="dr",
                controller={"broker.session.timeout.ms": "10000"},
                broker={"group.initial.rebalance.delay.ms": "0"})
    c.brokers = c.processes  # conftest attaches these processes' log tails to a failing test
    c.start()
    yield c
    c.stop()


# -- helpers ----------------------------------------------------------------------------------


def make_topic(c: Cluster, prefix: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
    topic = unique_topic(prefix)
    c.create_topic(topic, partitions=partitions, replication_factor=3, config={**TOPIC_CONFIG, **(config or {})})
    return topic


def fill(c: Cluster, topic: str, n: int, partition: int = 0) -> None:
    """Produces n records of ~1 KB to one partition with acks=all."""
    recs = [Rec(partition, f"k{i}".encode(), VALUE, 1_700_000_000_000 + i) for i in range(n)]
    confluent_produce(c.live_bootstrap, topic, recs)


def leader_of(c: Cluster, topic: str, partition: int = 0) -> int:
    def found():
        s = c.partition_state(topic).get(partition)
        return (s.leader,) if s is not None and s.leader >= 0 else None
    return c.wait_for(found, WAIT_S, f"{topic}-{partition} has a leader")[0]


def delete_raw(c: Cluster, broker: int, entries: list[tuple[str, int, int]], timeout_ms: int = 30_000
               ) -> list[tuple[str, int, int, int]]:
    """DeleteRecords v1 to broker `broker`: [(topic, partition, offset)] → [(topic, partition,
    low watermark, error code)] in answer order."""
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset in entries:
        by_topic.setdefault(topic, []).append((partition, offset))
    w = kw.Writer().int32(len(by_topic))
    for topic, parts in by_topic.items():
        w.string(topic).int32(len(parts))
        for partition, offset in parts:
            w.int32(partition).int64(offset)
    w.int32(timeout_ms)
    with kw.RawConnection.to(c.nodes[broker].address, timeout_s=timeout_ms / 1000 + 30) as conn:
        r = conn.call(API_DELETE_RECORDS, 1, w.getvalue())
    r.int32()  # throttle
    out = []
    for topic, parts in r.array(lambda x: (x.string(), x.array(lambda y: (y.int32(), y.int64(), y.int16())))):
        out += [(topic, p, lw, err) for p, lw, err in parts]
    return out


def earliest_at(c: Cluster, broker: int, topic: str, partition: int = 0) -> tuple[int, int]:
    """ListOffsets EARLIEST answered by broker `broker`: (error code, offset)."""
    with kw.RawConnection.to(c.nodes[broker].address) as conn:
        err, _, offset = kw.list_offsets_v1(conn, topic, partition, EARLIEST)
    return err, offset


def keel(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(keel_bin()), *args], capture_output=True, text=True, timeout=120)
    if ok:
        assert run.returncode == 0, f"keel {' '.join(args)}: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    return run


def earliest_on_every_replica(c: Cluster, topic: str, partition: int = 0) -> dict[int, int]:
    """Makes each replica the leader in turn (`keel elect --leader N`) and asks it for the log start
    offset (ListOffsets EARLIEST is answered by the leader only): {broker: log start offset}."""
    c.wait_for_full_isr(topic, [partition], WAIT_S)
    replicas = c.partition_state(topic)[partition].replicas
    starts = {}
    for r in replicas:
        keel("elect", "--topic", topic, "--partition", str(partition), "--leader", str(r),
             "--bootstrap-server", c.nodes[c.running()[0]].address)
        c.wait_for_state(topic, partition, lambda s, r=r: s.leader == r, f"broker {r} leads", WAIT_S)
        err, offset = c.wait_for(lambda r=r: (got := earliest_at(c, r, topic, partition))[0] == NONE and got,
                                 WAIT_S, f"broker {r} answers ListOffsets")
        starts[r] = offset
    return starts


def segment_bases(c: Cluster, broker: int, topic: str, partition: int = 0) -> list[int]:
    d = c.nodes[broker].log_dir / f"{topic}-{partition}"
    return sorted(int(f.name.split(".")[0]) for f in d.glob("*.log"))


def java(*args: str) -> dict[str, list[str]]:
    """Runs KeelDeleteRecords (kafka-clients 4.1); returns its "KEY rest" lines by key."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelDeleteRecords.java", classes / "KeelDeleteRecords.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelDeleteRecords", *args],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


def java_delete(c: Cluster, topic: str, offset: int, timeout_ms: int = 30_000, partition: int = 0) -> str:
    """"DELETED <low watermark>" or "ERROR <exception>" from Admin.deleteRecords."""
    out = java("delete", c.live_bootstrap, topic, str(partition), str(offset), str(timeout_ms))
    if "DELETED" in out:
        return f"DELETED {out['DELETED'][0]}"
    return f"ERROR {out['ERROR'][0]}"


def confluent_delete(c: Cluster, topic: str, offset: int, operation_timeout: float = 30.0, partition: int = 0):
    """librdkafka's DeleteRecords: the low watermark, or the KafkaError it failed with."""
    admin = confluent_admin(c.live_bootstrap)
    futures = admin.delete_records([ck.TopicPartition(topic, partition, offset)],
                                   request_timeout=ADMIN_TIMEOUT_S + operation_timeout,
                                   operation_timeout=operation_timeout)
    [future] = futures.values()
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S + operation_timeout + 10).low_watermark
    except ck.KafkaException as e:
        return e.args[0]


# -- tests ------------------------------------------------------------------------------------


def test_java_and_librdkafka_delete_records_on_every_replica(dr):
    """Admin.deleteRecords (Java) and AdminClient.delete_records (librdkafka) are answered with the
    low watermark once every replica moved its log start offset (DelayedDeleteRecords); each
    replica, made leader in turn, answers ListOffsets EARLIEST with it; the segments wholly below it
    are gone from every broker's disk (UnifiedLog.deleteLogStartOffsetBreachedSegments); -1 deletes
    up to the high watermark."""
    topic = make_topic(dr, "dr-clients")
    fill(dr, topic, 4000)
    assert java_delete(dr, topic, 1500) == "DELETED 1500"
    assert confluent_delete(dr, topic, 2600) == 2600
    assert earliest_on_every_replica(dr, topic) == {0: 2600, 1: 2600, 2: 2600}
    for b in range(3):
        bases = segment_bases(dr, b, topic)
        assert bases[0] > 0 and bases[0] <= 2600 and (len(bases) == 1 or bases[1] > 2600), (b, bases)
    assert confluent_delete(dr, topic, ck.OFFSET_END) == 4000, "-1: up to the high watermark"
    assert earliest_at(dr, leader_of(dr, topic), topic) == (NONE, 4000)


def test_consumers_below_the_log_start_reset_per_auto_offset_reset(dr):
    """A fetch below the log start offset is OFFSET_OUT_OF_RANGE (Kafka's LocalLog.read); each
    client then resets by auto.offset.reset: earliest → the log start offset, none/error → the
    error reaches the application (Java OffsetOutOfRangeException, librdkafka _AUTO_OFFSET_RESET)."""
    topic = make_topic(dr, "dr-consumers")
    fill(dr, topic, 2000)
    assert confluent_delete(dr, topic, 1200) == 1200
    assert java("consume", dr.live_bootstrap, topic, "0", "100", "earliest")["FIRST"] == ["1200"]
    assert java("consume", dr.live_bootstrap, topic, "0", "100", "none")["ERROR"] == ["OffsetOutOfRangeException"]

    def librdkafka_first(reset: str):
        consumer = ck.Consumer({"bootstrap.servers": dr.live_bootstrap, "group.id": unique_topic("g"),
                                "auto.offset.reset": reset, "enable.auto.commit": False,
                                "logger": CONFLUENT_COMMON["logger"]})
        try:
            consumer.assign([ck.TopicPartition(topic, 0, 100)])
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                return msg.error().code() if msg.error() else msg.offset()
            raise AssertionError(f"librdkafka read nothing with auto.offset.reset={reset}")
        finally:
            consumer.close()

    assert librdkafka_first("earliest") == 1200
    assert librdkafka_first("error") == ck.KafkaError._AUTO_OFFSET_RESET

    consumer = kp.KafkaConsumer(bootstrap_servers=dr.live_bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    try:
        tp = kp.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 100)
        got = consumer.poll(timeout_ms=int(WAIT_S * 1000), max_records=1)
        assert [r.offset for r in got.get(tp, [])] == [1200], got
    finally:
        consumer.close()


def test_the_log_start_survives_kill_9_of_every_broker_and_a_clean_restart(dr):
    """The answer is sent only once the new log start offset is checkpointed on the leader and on
    every follower that reported it: kill -9 of all three brokers right after the answer, then a
    restart, and every replica starts at the deleted offset (inside a segment: only the checkpoint
    knows it). A SIGTERM restart of the leader keeps it too."""
    topic = make_topic(dr, "dr-kill9")
    fill(dr, topic, 3000)
    leader = leader_of(dr, topic)
    assert delete_raw(dr, leader, [(topic, 0, 1777)]) == [(topic, 0, 1777, NONE)]
    for b in range(3):
        dr.kill9(b)
    for b in range(3):
        dr.nodes[b].spawn()
    for b in range(3):
        dr.nodes[b].wait_ready()
    assert earliest_on_every_replica(dr, topic) == {0: 1777, 1: 1777, 2: 1777}
    leader = leader_of(dr, topic)
    dr.restart(leader)
    dr.wait_for_full_isr(topic, [0], WAIT_S)
    assert earliest_at(dr, leader_of(dr, topic), topic) == (NONE, 1777)


def test_a_follower_down_during_the_delete_starts_over_at_the_new_start(dr):
    """A follower killed before the delete is fenced and no longer counts (hasAliveBroker), so the
    answer comes without it; restarted, its whole log is below the leader's log start offset: the
    leader answers its fetch OFFSET_OUT_OF_RANGE with its log start offset and the follower starts
    over there (truncateFullyAndStartAt; its first segment starts at the base of the batch holding
    the new start, Partition.doAppendRecordsToFollowerOrFutureReplica, and its checkpoint keeps the
    start across a kill -9), then catches up."""
    topic = make_topic(dr, "dr-down")
    fill(dr, topic, 800)
    leader = leader_of(dr, topic)
    follower = next(b for b in range(3) if b != leader)
    dr.kill9(follower)
    dr.wait_for_state(topic, 0, lambda s: follower not in s.isr and follower in s.offline,
                      f"broker {follower} fenced and out of the ISR", WAIT_S)
    fill(dr, topic, 3000)
    assert java_delete(dr, topic, 3500) == "DELETED 3500"
    dr.restart(follower)
    dr.wait_for_full_isr(topic, [0], WAIT_S)
    # It started over at the leader's start: its first segment begins at the batch holding 3500
    # (Kafka's follower keeps a first batch straddling its log start offset), nothing below came.
    bases = segment_bases(dr, follower, topic)
    assert 3400 < bases[0] <= 3500, bases
    # Only its checkpoint says the start is 3500, not the segment's base: kill -9 keeps it.
    dr.kill9(follower)
    dr.restart(follower)
    assert earliest_on_every_replica(dr, topic) == {0: 3500, 1: 3500, 2: 3500}


def test_a_stopped_follower_holds_the_answer_until_it_is_fenced(dr):
    """Kafka's low watermark counts every replica on a live broker: a SIGSTOPped follower holds a
    DeleteRecords until its timeout — REQUEST_TIMED_OUT with the low watermark the request found
    (raw wire), the Java admin's TimeoutException, librdkafka's REQUEST_TIMED_OUT — while the leader
    has moved its start. Once the controller fences the stopped broker (broker.session.timeout.ms
    10 s here) a deletion completes without it; resumed, it follows the leader's log start offset."""
    topic = make_topic(dr, "dr-stopped")
    fill(dr, topic, 2000)
    leader = leader_of(dr, topic)
    follower = next(b for b in range(3) if b != leader)
    dr.sigstop(follower)
    try:
        # The three clients at once, well within the session timeout.
        with ThreadPoolExecutor(3) as pool:
            started = time.monotonic()
            raw = pool.submit(delete_raw, dr, leader, [(topic, 0, 500)], 1000)
            java_answer = pool.submit(java_delete, dr, topic, 600, 1000)
            librdkafka_answer = pool.submit(confluent_delete, dr, topic, 700, 1.0)
            assert raw.result() == [(topic, 0, 0, REQUEST_TIMED_OUT)]
            assert time.monotonic() - started >= 1.0
            assert java_answer.result() == "ERROR TimeoutException"
            error = librdkafka_answer.result()
        assert isinstance(error, ck.KafkaError) and error.code() == ck.KafkaError.REQUEST_TIMED_OUT, error
        assert earliest_at(dr, leader, topic) == (NONE, 700), "the leader deleted anyway"
        running = [b for b in range(3) if b != follower]
        dr.wait_for_state(topic, 0, lambda s: follower in s.offline, f"broker {follower} fenced", WAIT_S,
                          brokers=running)
        started = time.monotonic()
        assert java_delete(dr, topic, 800) == "DELETED 800"
        assert time.monotonic() - started < 20, "answered without the fenced follower"
    finally:
        dr.sigcont(follower)
    assert earliest_on_every_replica(dr, topic) == {0: 800, 1: 800, 2: 800}


def test_refusals_in_kafkas_order(dr):
    """ReplicaManager.deleteRecordsOnLocalLog and Partition.deleteRecordsOnLeader: an offset past the
    high watermark or negative other than -1 is OFFSET_OUT_OF_RANGE (Java OffsetOutOfRangeException,
    librdkafka OFFSET_OUT_OF_RANGE), a topic whose cleanup.policy lacks delete POLICY_VIOLATION
    (PolicyViolationException), an unknown partition UNKNOWN_TOPIC_OR_PARTITION, an internal topic
    INVALID_TOPIC_EXCEPTION, a broker that does not lead NOT_LEADER_OR_FOLLOWER; nothing moves. A
    partition named twice is answered once, with the last offset (Kafka keys them in a map)."""
    topic = make_topic(dr, "dr-refused")
    fill(dr, topic, 10)
    assert java_delete(dr, topic, 11) == "ERROR OffsetOutOfRangeException"
    error = confluent_delete(dr, topic, 11)
    assert isinstance(error, ck.KafkaError) and error.code() == ck.KafkaError.OFFSET_OUT_OF_RANGE, error
    compacted = make_topic(dr, "dr-compacted", config={"cleanup.policy": "compact"})
    confluent_produce(dr.live_bootstrap, compacted, [Rec(0, b"k", b"v", 1_700_000_000_000)])
    assert java_delete(dr, compacted, 1) == "ERROR PolicyViolationException"
    error = confluent_delete(dr, compacted, 1)
    assert isinstance(error, ck.KafkaError) and error.code() == ck.KafkaError.POLICY_VIOLATION, error

    leader = leader_of(dr, topic)
    with kw.RawConnection.to(dr.nodes[leader].address) as conn:  # creates __consumer_offsets
        deadline = time.monotonic() + WAIT_S
        while conn.call(API_FIND_COORDINATOR, 0, kw.Writer().string("g").getvalue()).int16() != NONE:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
    internal_leader = leader_of(dr, "__consumer_offsets")
    assert delete_raw(dr, internal_leader, [("__consumer_offsets", 0, 0)]) == [
        ("__consumer_offsets", 0, -1, INVALID_TOPIC_EXCEPTION)]
    assert delete_raw(dr, leader, [(topic, 0, -2), (topic, 9, 1), (compacted, 0, 0)]) == [
        (topic, 0, -1, OFFSET_OUT_OF_RANGE), (topic, 9, -1, UNKNOWN_TOPIC_OR_PARTITION),
        (compacted, 0, -1, NOT_LEADER_OR_FOLLOWER if leader_of(dr, compacted) != leader else POLICY_VIOLATION)]
    follower = next(b for b in range(3) if b != leader)
    assert delete_raw(dr, follower, [(topic, 0, 3)]) == [(topic, 0, -1, NOT_LEADER_OR_FOLLOWER)]
    assert earliest_at(dr, leader, topic) == (NONE, 0), "nothing moved"
    assert delete_raw(dr, leader, [(topic, 0, 2), (topic, 0, 4)]) == [(topic, 0, 4, NONE)]
    assert delete_raw(dr, leader, [(topic, 0, -1)]) == [(topic, 0, 10, NONE)], "-1 is the high watermark"


def test_kafka_delete_records_sh_and_keel_records_delete(dr, tmp_path):
    """Kafka's kafka-delete-records.sh (DeleteRecordsCommand, its JSON file) prints each partition's
    low watermark; `keel records delete` does the same from flags or the same JSON file, refuses an
    offset past the high watermark (exit 1, OffsetOutOfRange) and Kafka's duplicate check."""
    from test_kafka_tools import build_tools
    topic = make_topic(dr, "dr-tools", partitions=2)
    fill(dr, topic, 100, partition=0)
    fill(dr, topic, 100, partition=1)
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 30},
                                                  {"topic": topic, "partition": 1, "offset": 40}],
                                   "version": 1}))
    tools = build_tools()
    run = tools.ok("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", dr.live_bootstrap,
                   "--offset-json-file", str(offsets))
    assert "Records delete operation completed:" in run.out, run.report()
    assert f"partition: {topic}-0\tlow_watermark: 30" in run.out, run.report()
    assert f"partition: {topic}-1\tlow_watermark: 40" in run.out, run.report()

    bootstrap = ("--bootstrap-server", dr.nodes[dr.running()[0]].address)
    out = keel("records", "delete", "--topic", topic, "--partition", "0", "--offset", "55", *bootstrap).stdout
    assert out.split("\n")[1].split() == [topic, "0", "55", "-"], out
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 60},
                                                  {"topic": topic, "partition": 1, "offset": -1}]}))
    out = keel("records", "delete", "--offset-json-file", str(offsets), "--json", *bootstrap).stdout
    assert sorted((o["partition"], o["low_watermark"], o["error"]) for o in json.loads(out)) == [
        (0, 60, None), (1, 100, None)], out
    refused = keel("records", "delete", "--topic", topic, "--partition", "0", "--offset", "101", *bootstrap,
                   ok=False)
    assert refused.returncode == 1 and "OffsetOutOfRange" in refused.stdout, refused
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 1},
                                                  {"topic": topic, "partition": 0, "offset": 2}]}))
    refused = keel("records", "delete", "--offset-json-file", str(offsets), *bootstrap, ok=False)
    assert "Offset json file contains duplicate topic partitions" in refused.stderr, refused
    assert confluent_delete(dr, topic, 0, partition=0) == 60, "nothing below the start moves it back"


def build_streams() -> tuple[Path, str]:
    """Resolves Kafka Streams 4.4 (tests/java/streams/pom.xml) and compiles the app, both cached."""
    return java_build(STREAMS_DIR / "pom.xml", STREAMS_CACHE, [STREAMS_DIR / "KeelStreamsRepartition.java"])


def test_a_kafka_streams_groupby_trims_its_repartition_topic(dr, tmp_path):
    """The user story: Kafka Streams 4.4 counts a topic grouped by value; its repartition topic
    (retention.ms=-1) is trimmed by Streams' own DeleteRecords after commits, so its log start
    offset moves past 0 on every partition (before: the admin client refused DELETE_RECORDS
    locally, Streams logged it at DEBUG, and the topic grew forever)."""
    classes, classpath = build_streams()
    topic = make_topic(dr, "dr-streams-in", partitions=3)
    records = [Rec(i % 3, f"k{i}".encode(), f"word{i % 7}".encode(), 1_700_000_000_000 + i) for i in range(600)]
    confluent_produce(dr.live_bootstrap, topic, records)
    app = unique_topic("dr-streams")
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelStreamsRepartition", dr.live_bootstrap,
                          app, topic, str(len(records)), str(tmp_path / "state")],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0 and run.stdout.startswith("TRIMMED"), (
        f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
