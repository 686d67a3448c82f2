"""ListOffsets by time exactly as Kafka answers it (issue 20): the offset and timestamp of the first
*record* whose timestamp reaches the target — not the base offset of its batch — and the record
with the largest timestamp for MAX_TIMESTAMP (KIP-734), each with the leader epoch of the record's
batch (Kafka: `UnifiedLog.fetchOffsetByTimestamp`, `LogSegment.findOffsetByTimestamp`,
`FileRecords.searchForTimestamp`, `RecordBatch.offsetOfMaxTimestamp`, `ReplicaManager.fetchOffset`).

Records go in ONE batch per partition with chosen, out-of-order timestamps, uncompressed and
compressed, written by librdkafka (confluent-kafka), kafka-python and Apache Kafka's Java producer
(tests/java/KeelOffsetsForTimes.java, kafka-clients 4.1); they are looked up with librdkafka's
and kafka-python's `offsets_for_times`, the Java consumer's `offsetsForTimes` and the Java and
librdkafka admin clients' `listOffsets(maxTimestamp)`. The special timestamps and their version
rules are checked over the raw wire (kafka-python's protocol classes at the exact version).
"""

from __future__ import annotations

import subprocess
import time

import confluent_kafka as ck
import kafka as kp
import pytest
from confluent_kafka.admin import OffsetSpec

import kafka_wire as kw
from clients import (ADMIN_TIMEOUT_S, BASE_TIMESTAMP_MS, CONFLUENT_COMMON, confluent_admin,
                     confluent_consumer, create_topic, kp_consumer, unique_topic)
from kafka_messages import ListOffsetsRequest, MessageConnection
from keel_broker import launch, retire
from test_java_client import JAVA_DIR, build_check

T = BASE_TIMESTAMP_MS
# The issue's two records: a lookup of the second's timestamp must answer offset 1.
ISSUE_TIMESTAMPS = [1234, 999_999_999_999]
# Out of order inside the batch: the first record reaching a target is not the batch's first.
SHUFFLED = [T + 100, T + 500, T + 200, T + 600, T + 300]
# (target, expected offset or None) for SHUFFLED: the first record in offset order at or after it.
SHUFFLED_LOOKUPS = [(T, 0), (T + 100, 0), (T + 150, 1), (T + 500, 1), (T + 501, 3), (T + 600, 3),
                    (T + 601, None)]
ISSUE_LOOKUPS = [(0, 0), (1234, 0), (1235, 1), (999_999_999_999, 1), (1_000_000_000_000, None)]
# org.apache.kafka.common.protocol.Errors
NONE, UNSUPPORTED_VERSION, INVALID_REQUEST = 0, 35, 42
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
WAIT_S = 60


def java(*args: str) -> dict[str, list[str]]:
    """Runs KeelOffsetsForTimes; returns its "KEY rest" lines by key."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelOffsetsForTimes.java", classes / "KeelOffsetsForTimes.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelOffsetsForTimes", *args],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


def batch_count(bootstrap: str, topic: str, partition: int) -> int:
    """How many record batches the partition holds (a raw Fetch from offset 0)."""
    with kw.RawConnection.to(bootstrap) as conn:
        err, _, records = kw.fetch_v4(conn, topic, partition, 0)
    assert err == kw.NONE
    count, at = 0, 0
    while at + 12 <= len(records):
        length = int.from_bytes(records[at + 8:at + 12], "big")
        at += 12 + length
        count += 1
    return count


def confluent_one_batch(bootstrap: str, topic: str, partition: int, timestamps: list[int], codec: str) -> None:
    """librdkafka sends the records together: a long linger, then one flush."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5000,
                     "batch.num.messages": 10_000, "acks": "all", **CONFLUENT_COMMON})
    errors: list = []
    for i, ts in enumerate(timestamps):
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=partition, timestamp=ts,
                  on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0 and not errors, errors


def kafka_python_one_batch(bootstrap: str, topic: str, partition: int, timestamps: list[int], codec: str) -> None:
    p = kp.KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5000,
                         batch_size=1 << 20, acks="all")
    try:
        futures = [p.send(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=partition, timestamp_ms=ts)
                   for i, ts in enumerate(timestamps)]
        p.flush(WAIT_S)
        assert [f.get(WAIT_S).offset for f in futures] == list(range(len(timestamps)))
    finally:
        p.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = launch(tmp_path_factory, "offsets-for-times")
    yield b
    retire(b)


@pytest.fixture(scope="module")
def batches(broker):
    """A topic whose partitions each hold one batch: 0 the issue's two records (librdkafka, plain);
    1-3 SHUFFLED, by librdkafka with zstd, the Java producer with gzip, kafka-python with gzip."""
    topic = unique_topic("by-time")
    create_topic(broker.bootstrap, topic, 4)
    confluent_one_batch(broker.bootstrap, topic, 0, ISSUE_TIMESTAMPS, "none")
    confluent_one_batch(broker.bootstrap, topic, 1, SHUFFLED, "zstd")
    out = java("produce", broker.bootstrap, topic, "2", "gzip", ",".join(map(str, SHUFFLED)))
    assert out["OFFSET"] == [f"{i} {i}" for i in range(len(SHUFFLED))], out
    kafka_python_one_batch(broker.bootstrap, topic, 3, SHUFFLED, "gzip")
    for partition in range(4):
        assert batch_count(broker.bootstrap, topic, partition) == 1, f"partition {partition}: not one batch"
    return topic


def cases(partition: int):
    if partition == 0:
        return ISSUE_LOOKUPS, ISSUE_TIMESTAMPS
    return SHUFFLED_LOOKUPS, SHUFFLED


@pytest.mark.parametrize("partition", [0, 1, 2, 3])
def test_librdkafka_offsets_for_times_finds_the_record(broker, batches, partition):
    """confluent-kafka's offsets_for_times answers the first record at or after each target (its
    offset inside the batch, not the batch's base offset), -1 (OFFSET_END) past the last."""
    lookups, _ = cases(partition)
    c = confluent_consumer(broker.bootstrap)
    try:
        for target, want in lookups:
            [tp] = c.offsets_for_times([ck.TopicPartition(batches, partition, target)], timeout=10)
            got = (tp.offset, tp.error)
            assert got == (-1 if want is None else want, None), f"p{partition} target {target}: {got}, want {want}"
    finally:
        c.close()


@pytest.mark.parametrize("partition", [0, 1, 2, 3])
def test_kafka_python_offsets_for_times_finds_the_record(broker, batches, partition):
    """kafka-python's offsets_for_times answers (offset, timestamp) of that record, None past the last."""
    lookups, timestamps = cases(partition)
    c = kp_consumer(broker.bootstrap)
    try:
        tp = kp.TopicPartition(batches, partition)
        for target, want in lookups:
            got = c.offsets_for_times({tp: target}, timeout_ms=10_000)[tp]
            expected = None if want is None else (want, timestamps[want])
            assert (got and (got.offset, got.timestamp)) == expected, f"p{partition} target {target}: {got}"
    finally:
        c.close()


@pytest.mark.parametrize("partition", [0, 1, 2, 3])
def test_java_offsets_for_times_finds_the_record(broker, batches, partition):
    """The Java consumer's offsetsForTimes answers the record's offset, timestamp and its batch's
    leader epoch (0: written in the partition's first epoch)."""
    lookups, timestamps = cases(partition)
    out = java("times", broker.bootstrap, batches, str(partition), ",".join(str(t) for t, _ in lookups))
    want = [f"{t} none" if o is None else f"{t} {o} {timestamps[o]} 0" for t, o in lookups]
    assert out["FOUND"] == want


def test_max_timestamp_is_the_record_with_the_largest_timestamp(broker, batches):
    """MAX_TIMESTAMP (-3, KIP-734) answers the record carrying the largest timestamp and its
    timestamp — record 3 of the shuffled batches, record 1 of the issue's — through the Java admin
    client (with the batch's leader epoch) and librdkafka's admin client."""
    admin = confluent_admin(broker.bootstrap)
    for partition in range(4):
        _, timestamps = cases(partition)
        top = timestamps.index(max(timestamps))
        out = java("specs", broker.bootstrap, batches, str(partition))
        assert out["SPEC"] == [f"earliest 0 -1 0", f"latest {len(timestamps)} -1 0",
                               f"max {top} {timestamps[top]} 0"], f"partition {partition}"
        tp = ck.TopicPartition(batches, partition)
        res = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=ADMIN_TIMEOUT_S)
        assert (res.offset, res.timestamp) == (top, timestamps[top]), f"partition {partition}"


def list_offsets(conn: MessageConnection, version: int, topic: str, partitions: list[tuple[int, int]],
                 current_leader_epoch: int = -1):
    """One ListOffsets request for (partition, timestamp) pairs; returns each partition's answer
    as (error, offset, timestamp, leader_epoch) in request order."""
    fields = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "current_leader_epoch": current_leader_epoch, "timestamp": ts}
        for p, ts in partitions]}]}
    if version >= 2:
        fields["isolation_level"] = 0
    if version >= 10:
        fields["timeout_ms"] = 0
    r = conn.call(ListOffsetsRequest, version, **fields)
    [t] = r.topics
    return [(p.error_code, p.offset, p.timestamp, getattr(p, "leader_epoch", None) if version >= 4 else None)
            for p in t.partitions]


def test_special_timestamps_need_the_version_that_defines_them(broker, batches):
    """Kafka's `ReplicaManager.isListOffsetsTimestampUnsupported`: MAX_TIMESTAMP needs v7,
    EARLIEST_LOCAL v8, LATEST_TIERED v9, any other negative timestamp — EARLIEST_PENDING_UPLOAD
    (-6) needs v11, which Keel cannot serve — is UNSUPPORTED_VERSION; with no tiered storage
    EARLIEST_LOCAL is the log start with its epoch and LATEST_TIERED offset -1 with epoch -1."""
    with MessageConnection(broker.bootstrap) as conn:
        assert list_offsets(conn, 6, batches, [(1, MAX_TIMESTAMP)]) == [(UNSUPPORTED_VERSION, -1, -1, -1)]
        assert list_offsets(conn, 7, batches, [(1, MAX_TIMESTAMP)]) == [(NONE, 3, T + 600, 0)]
        assert list_offsets(conn, 7, batches, [(1, EARLIEST_LOCAL)]) == [(UNSUPPORTED_VERSION, -1, -1, -1)]
        assert list_offsets(conn, 8, batches, [(1, EARLIEST_LOCAL)]) == [(NONE, 0, -1, 0)]
        assert list_offsets(conn, 8, batches, [(1, LATEST_TIERED)]) == [(UNSUPPORTED_VERSION, -1, -1, -1)]
        assert list_offsets(conn, 9, batches, [(1, LATEST_TIERED)]) == [(NONE, -1, -1, -1)]
        for ts in (EARLIEST_PENDING_UPLOAD, -7):
            assert list_offsets(conn, 10, batches, [(1, ts)]) == [(UNSUPPORTED_VERSION, -1, -1, -1)], ts
        # v1 knows only EARLIEST and LATEST.
        assert list_offsets(conn, 1, batches, [(1, MAX_TIMESTAMP)]) == [(UNSUPPORTED_VERSION, -1, -1, None)]
        assert list_offsets(conn, 1, batches, [(1, T + 150)]) == [(NONE, 1, T + 500, None)]


def test_a_partition_named_twice_is_an_invalid_request(broker, batches):
    """Kafka (`ListOffsetsRequest.duplicatePartitions`, `ReplicaManager.fetchOffset`): a partition
    named twice in one request is INVALID_REQUEST; the others are answered."""
    with MessageConnection(broker.bootstrap) as conn:
        got = list_offsets(conn, 10, batches, [(1, EARLIEST), (2, LATEST), (1, LATEST)])
    assert got == [(INVALID_REQUEST, -1, -1, -1), (NONE, len(SHUFFLED), -1, 0), (INVALID_REQUEST, -1, -1, -1)]


def wait_for_epoch_change(bootstrap: str, topic: str, old_epoch: int) -> int:
    """The partition's leader epoch once it moved past `old_epoch` (raw Metadata v7)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            with kw.RawConnection.to(bootstrap) as conn:
                md = kw.metadata_v7(conn, [topic])
            p = md.topics[topic][1][0]
            if p.leader >= 0 and p.leader_epoch > old_epoch:
                return p.leader_epoch
        except (OSError, KeyError, IndexError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{topic}-0 never got a leader epoch above {old_epoch}")


def test_each_answer_carries_its_own_leader_epoch(tmp_path_factory):
    """Kafka answers each lookup with the leader epoch of what it found: the batch's epoch for a
    timestamp and MAX_TIMESTAMP, the first cached epoch for EARLIEST, the current one for LATEST
    (`UnifiedLog.fetchOffsetByTimestamp`, `Partition.fetchOffsetForTimestamp`) — not always the
    current epoch. A batch written before a restart (epoch 0) keeps answering epoch 0 afterwards;
    librdkafka's and the Java client's lookups see the same."""
    b = launch(tmp_path_factory, "offsets-epochs")
    try:
        topic = unique_topic("epochs")
        create_topic(b.bootstrap, topic, 1)
        confluent_one_batch(b.bootstrap, topic, 0, [T + 10, T + 20], "none")
        b.kill9()
        b.start()
        epoch = wait_for_epoch_change(b.bootstrap, topic, 0)
        confluent_one_batch(b.bootstrap, topic, 0, [T + 30], "lz4")
        with MessageConnection(b.bootstrap) as conn:
            got = list_offsets(conn, 10, topic, [(0, T + 15)])
            got += list_offsets(conn, 10, topic, [(0, T + 25)])
            got += list_offsets(conn, 10, topic, [(0, EARLIEST)])
            got += list_offsets(conn, 10, topic, [(0, LATEST)])
            got += list_offsets(conn, 10, topic, [(0, MAX_TIMESTAMP)])
        assert got == [(NONE, 1, T + 20, 0), (NONE, 2, T + 30, epoch), (NONE, 0, -1, 0),
                       (NONE, 3, -1, epoch), (NONE, 2, T + 30, epoch)]
        out = java("times", b.bootstrap, topic, "0", f"{T + 15},{T + 25}")
        assert out["FOUND"] == [f"{T + 15} 1 {T + 20} 0", f"{T + 25} 2 {T + 30} {epoch}"]
        c = confluent_consumer(b.bootstrap)
        try:
            [tp] = c.offsets_for_times([ck.TopicPartition(topic, 0, T + 15)], timeout=10)
            assert (tp.offset, tp.leader_epoch) == (1, 0)
        finally:
            c.close()
    finally:
        retire(b)
