"""ListOffsets: earliest, latest, by timestamp and max timestamp, from both clients.

Kafka protocol: ListOffsets (API 2) with timestamps -2 (earliest), -1 (latest), -3 (max timestamp,
KIP-734) and a CreateTime target (KIP-79: the first offset whose timestamp is >= the target).
Partition 0 holds RECORDS records over several batches and 1 MiB segments; partition 1 is empty.
"""

from __future__ import annotations

import confluent_kafka as ck
import kafka as kp
import pytest
from confluent_kafka.admin import OffsetSpec

import kafka_wire as w
from keel_broker import launch, retire
from clients import (ADMIN_TIMEOUT_S, BASE_TIMESTAMP_MS, Rec, confluent_admin, confluent_consumer,
                     confluent_produce, create_topic, kp_consumer, unique_topic)

RECORDS = 300
STEP_MS = 10
VALUE_BYTES = 8 * 1024  # 2.4 MB in partition 0: at least two 1 MiB segments
PROBES = [0, 1, 57, 150, 233, RECORDS - 1]


def ts_of(i: int) -> int:
    return BASE_TIMESTAMP_MS + STEP_MS * i


@pytest.fixture(scope="module")
def topic(tmp_path_factory):
    b = launch(tmp_path_factory, "list-offsets", overrides={"log.segment.bytes": str(1024 * 1024)})
    try:
        name = unique_topic("offsets")
        create_topic(b.bootstrap, name, 2)
        recs = [Rec(0, b"k%d" % i, b"%d:" % i + bytes(VALUE_BYTES), ts_of(i)) for i in range(RECORDS)]
        acked = confluent_produce(b.bootstrap, name, recs, extra={"batch.num.messages": 20})
        assert [off for _, off in acked] == list(range(RECORDS))
        yield b, name
    finally:
        retire(b)


def test_confluent_watermarks(topic):
    """get_watermark_offsets(cached=False) asks ListOffsets for earliest (-2) and latest (-1):
    (0, RECORDS) for partition 0, (0, 0) for the empty partition 1."""
    b, name = topic
    c = confluent_consumer(b.bootstrap)
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(name, 0), timeout=10, cached=False) == (0, RECORDS)
        assert c.get_watermark_offsets(ck.TopicPartition(name, 1), timeout=10, cached=False) == (0, 0)
    finally:
        c.close()


def test_confluent_offsets_for_times(topic):
    """offsets_for_times returns the first offset with timestamp >= target; before all -> 0; after all
    -> -1 (OFFSET_END); empty partition -> -1 (KIP-79)."""
    b, name = topic
    c = confluent_consumer(b.bootstrap)
    try:
        cases = [(ts_of(k), k) for k in PROBES] + [(ts_of(k) + 5, k + 1) for k in PROBES[:-1]]
        cases += [(BASE_TIMESTAMP_MS - 1000, 0), (ts_of(RECORDS - 1) + 1, -1)]
        for ts, want in cases:  # one partition per call: a request may name a partition once
            [tp] = c.offsets_for_times([ck.TopicPartition(name, 0, ts)], timeout=10)
            assert (tp.offset, tp.error) == (want, None), f"target {ts}: got {tp.offset} ({tp.error}), expected {want}"
        [empty] = c.offsets_for_times([ck.TopicPartition(name, 1, BASE_TIMESTAMP_MS)], timeout=10)
        assert (empty.offset, empty.error) == (-1, None)
    finally:
        c.close()


def test_confluent_admin_list_offsets(topic):
    """AdminClient.list_offsets with earliest, latest, a timestamp and max_timestamp (-3, KIP-734,
    ListOffsets v7+) returns the matching offset and that record's timestamp."""
    b, name = topic
    admin = confluent_admin(b.bootstrap)
    tp = ck.TopicPartition(name, 0)
    specs = {"earliest": (OffsetSpec.earliest(), 0), "latest": (OffsetSpec.latest(), RECORDS),
             "timestamp": (OffsetSpec.for_timestamp(ts_of(150)), 150)}
    for label, (spec, want) in specs.items():
        res = admin.list_offsets({tp: spec})[tp].result(timeout=ADMIN_TIMEOUT_S)
        assert res.offset == want, f"{label}: offset {res.offset}, expected {want}"
    res = admin.list_offsets({tp: OffsetSpec.for_timestamp(ts_of(150))})[tp].result(timeout=ADMIN_TIMEOUT_S)
    assert res.timestamp == ts_of(150), f"timestamp lookup returned timestamp {res.timestamp}"


def test_confluent_admin_max_timestamp(topic):
    """ListOffsets with timestamp -3 returns the offset and timestamp of the record with the largest
    timestamp (KIP-734, ListOffsets v7)."""
    b, name = topic
    admin = confluent_admin(b.bootstrap)
    tp = ck.TopicPartition(name, 0)
    res = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=ADMIN_TIMEOUT_S)
    assert (res.offset, res.timestamp) == (RECORDS - 1, ts_of(RECORDS - 1))


def test_kafka_python_beginning_end_offsets(topic):
    """kafka-python beginning_offsets / end_offsets (ListOffsets -2 / -1) for a full and an empty partition."""
    b, name = topic
    c = kp_consumer(b.bootstrap)
    try:
        tps = [kp.TopicPartition(name, 0), kp.TopicPartition(name, 1)]
        assert c.beginning_offsets(tps, timeout_ms=10000) == {tps[0]: 0, tps[1]: 0}
        assert c.end_offsets(tps, timeout_ms=10000) == {tps[0]: RECORDS, tps[1]: 0}
    finally:
        c.close()


def test_kafka_python_offsets_for_times(topic):
    """kafka-python offsets_for_times returns (offset, timestamp) of the first record at or after the
    target, and None past the end or on an empty partition (KIP-79)."""
    b, name = topic
    c = kp_consumer(b.bootstrap)
    try:
        tp0, tp1 = kp.TopicPartition(name, 0), kp.TopicPartition(name, 1)
        for k in PROBES:
            for delta, want in ((0, k), (5, k + 1)):
                if want >= RECORDS:
                    continue
                res = c.offsets_for_times({tp0: ts_of(k) + delta}, timeout_ms=10000)[tp0]
                assert res is not None and (res.offset, res.timestamp) == (want, ts_of(want)), (
                    f"target {ts_of(k) + delta}: got {res}, expected offset {want}")
        assert c.offsets_for_times({tp0: BASE_TIMESTAMP_MS - 1}, timeout_ms=10000)[tp0].offset == 0
        assert c.offsets_for_times({tp0: ts_of(RECORDS)}, timeout_ms=10000)[tp0] is None
        assert c.offsets_for_times({tp1: BASE_TIMESTAMP_MS}, timeout_ms=10000)[tp1] is None
    finally:
        c.close()


def test_raw_list_offsets_v1(topic):
    """ListOffsets v1 (the oldest version Kafka 4 serves) answers earliest, latest and a timestamp
    lookup with (timestamp, offset) on partition 0."""
    b, name = topic
    with w.RawConnection.to(b.bootstrap) as conn:
        try:
            assert w.list_offsets_v1(conn, name, 0, -2)[::2] == (w.NONE, 0)
            assert w.list_offsets_v1(conn, name, 0, -1)[::2] == (w.NONE, RECORDS)
            assert w.list_offsets_v1(conn, name, 0, ts_of(57)) == (w.NONE, ts_of(57), 57)
        except ConnectionError as e:
            pytest.fail(f"broker closed the connection instead of answering ListOffsets v1: {e}")


def test_raw_offset_for_leader_epoch(topic):
    """OffsetForLeaderEpoch v3 for the current epoch 0 of a fresh topic answers the log end offset, also
    on an empty partition (Kafka's Partition.makeLeader records epoch 0 at offset 0 before any data);
    an unknown partition answers UNKNOWN_TOPIC_OR_PARTITION (3) and a current_leader_epoch from the
    future answers UNKNOWN_LEADER_EPOCH (75) (KIP-101, KIP-320)."""
    b, name = topic
    with w.RawConnection.to(b.bootstrap) as conn:
        assert w.offset_for_leader_epoch_v3(conn, name, 0, 0) == (w.NONE, 0, RECORDS)
        assert w.offset_for_leader_epoch_v3(conn, name, 99, 0)[0] == w.UNKNOWN_TOPIC_OR_PARTITION
        assert w.offset_for_leader_epoch_v3(conn, name, 0, 0, current_leader_epoch=1000)[0] == w.UNKNOWN_LEADER_EPOCH
        assert w.offset_for_leader_epoch_v3(conn, name, 1, 0) == (w.NONE, 0, 0), "empty partition"
