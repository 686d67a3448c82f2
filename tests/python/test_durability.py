"""Acknowledged records survive kill -9 and orderly restarts; the clean-shutdown file tells them apart.

Cites DESIGN.md's promise (no acknowledged acks=all record is lost) and KIP-966's clean shutdown
detection: `.kafka_cleanshutdown` holds {"version":0,"brokerEpoch":N}, is written last on orderly
shutdown, removed at startup, and its absence makes startup run log recovery.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

from clients import (RDKAFKA_LOG, Rec, assert_read_back, by_partition, confluent_admin, confluent_consume,
                     confluent_consumer, confluent_produce, create_topic, kp_consume, make_records, unique_topic,
                     wait_for_leaders)
from keel_broker import CLEAN_FOUND, CLEAN_MISSING, CLEAN_SHUTDOWN_FILE

PARTITIONS = 2
RECORDS = 3000
VALUE_BYTES = 1024  # ~3 MiB over 1 MiB segments: every partition rolls at least once
SEGMENT_BYTES = str(1024 * 1024)


def _assert_recovery_line(broker, expect: str) -> None:
    log = broker.log_text()
    other = CLEAN_MISSING if expect == CLEAN_FOUND else CLEAN_FOUND
    assert expect in log, f"run {broker.runs} log lacks {expect!r}\n{broker.log_tail()}"
    assert other not in log, f"run {broker.runs} log has both {expect!r} and {other!r}"


def _produce_more_and_check_offsets(broker, topic: str, ends: dict[int, int]) -> None:
    """New writes are accepted and land at the old log end offsets."""
    more = make_records(10 * PARTITIONS, PARTITIONS, tag="after-restart")
    acked = confluent_produce(broker.bootstrap, topic, more)
    for p, recs in by_partition([r for r, _ in acked]).items():
        offsets = [off for r, off in acked if r.partition == p]
        assert offsets == list(range(ends[p], ends[p] + len(recs))), (
            f"partition {p}: new records got offsets {offsets[:3]}..., log end offset was {ends[p]}")


@pytest.fixture
def durable_broker(start_broker):
    return start_broker("durable", overrides={"log.segment.bytes": SEGMENT_BYTES})


def test_kill9_keeps_acknowledged_records(durable_broker):
    """After kill -9 and restart every acks=all record is readable where it was acknowledged, log
    recovery ran ('no clean shutdown file'), and offsets continue (DESIGN.md promise, KIP-966)."""
    b = durable_broker
    topic = unique_topic("kill9")
    create_topic(b.bootstrap, topic, PARTITIONS)
    recs = make_records(RECORDS, PARTITIONS, tag="kill9", value_bytes=VALUE_BYTES)
    acked = confluent_produce(b.bootstrap, topic, recs, acks="all")

    b.kill9()
    assert not b.clean_shutdown_file.exists(), "kill -9 cannot have written the clean shutdown file"
    b.start()
    _assert_recovery_line(b, CLEAN_MISSING)

    expected = {p: len(rs) for p, rs in by_partition(recs).items()}
    got = confluent_consume(b.bootstrap, topic, list(range(PARTITIONS)), expected)
    assert_read_back(acked, got, "after kill -9 (confluent-kafka)")
    _produce_more_and_check_offsets(b, topic, expected)


def test_kill9_during_produce(durable_broker):
    """kill -9 while a producer is mid-stream: after restart every acknowledged record is at its
    offset, offsets are contiguous, and the log accepts writes at its end (DESIGN.md promise;
    recovery truncates only unacknowledged tails)."""
    b = durable_broker
    topic = unique_topic("kill9-mid")
    create_topic(b.bootstrap, topic, PARTITIONS)
    acked: list[tuple[Rec, int]] = []
    stop = threading.Event()

    def produce_forever():
        producer = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 2,
                                "enable.idempotence": False, "message.timeout.ms": 5000,
                                "retries": 0, "batch.num.messages": 100, "logger": RDKAFKA_LOG})
        i = 0
        while not stop.is_set() and i < 200_000:
            r = Rec(i % PARTITIONS, b"mid:key:%d" % i, b"mid:value:%d:" % i + b"x" * 512, 1_700_000_000_000 + i)

            def cb(err, msg, r=r):
                if err is None:
                    acked.append((r, msg.offset()))
            try:
                producer.produce(topic, key=r.key, value=r.value, partition=r.partition,
                                 timestamp=r.timestamp_ms, on_delivery=cb)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001 if i % 100 == 0 else 0)
        producer.flush(15)

    t = threading.Thread(target=produce_forever, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 2000, f"only {len(acked)} records acknowledged in 30s before the kill"
    b.kill9()
    stop.set()
    t.join(30)
    acked_at_kill = list(acked)

    b.start()
    _assert_recovery_line(b, CLEAN_MISSING)
    # Everything acknowledged must be there; unacknowledged records may or may not be.
    ends = {}
    consumer = confluent_consumer(b.bootstrap)
    try:
        for p in range(PARTITIONS):
            lo, hi = consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10, cached=False)
            assert lo == 0
            ends[p] = hi
            n_acked = max((off for r, off in acked_at_kill if r.partition == p), default=-1) + 1
            assert hi >= n_acked, f"partition {p}: log end offset {hi} < highest acknowledged offset + 1 = {n_acked}"
    finally:
        consumer.close()
    got = confluent_consume(b.bootstrap, topic, list(range(PARTITIONS)), ends)
    by_off = {(p, off): r for p, recs in got.items() for off, r in recs}
    for p, recs in got.items():
        assert [o for o, _ in recs] == list(range(ends[p])), f"partition {p}: offsets not contiguous"
    for r, off in acked_at_kill:
        assert by_off.get((r.partition, off)) == r, (
            f"acknowledged {r.key!r} at partition {r.partition} offset {off}, read {by_off.get((r.partition, off))}")
    _produce_more_and_check_offsets(b, topic, ends)


def test_clean_shutdown_file(durable_broker):
    """SIGTERM exits 0 and leaves .kafka_cleanshutdown {"version":0,"brokerEpoch":N}; the next start
    says 'clean shutdown file found', removes the file while running, and serves all data (KIP-966)."""
    b = durable_broker
    topic = unique_topic("clean")
    create_topic(b.bootstrap, topic, PARTITIONS)
    recs = make_records(RECORDS // 3, PARTITIONS, tag="clean", value_bytes=VALUE_BYTES)
    acked = confluent_produce(b.bootstrap, topic, recs, acks="all")
    assert not b.clean_shutdown_file.exists(), f"{CLEAN_SHUTDOWN_FILE} exists while the broker runs"

    code = b.terminate()
    assert code == 0, f"SIGTERM exit code {code}\n{b.log_tail()}"
    assert b.clean_shutdown_file.exists(), (
        f"no {CLEAN_SHUTDOWN_FILE} in {b.log_dir} after SIGTERM: {sorted(p.name for p in b.log_dir.iterdir())}")
    content = json.loads(b.clean_shutdown_file.read_text())
    assert content.get("version") == 0, content
    assert isinstance(content.get("brokerEpoch"), int) and content["brokerEpoch"] >= 0, content

    b.start()
    _assert_recovery_line(b, CLEAN_FOUND)
    assert not b.clean_shutdown_file.exists(), f"{CLEAN_SHUTDOWN_FILE} still present after startup"
    expected = {p: len(rs) for p, rs in by_partition(recs).items()}
    got = kp_consume(b.bootstrap, topic, list(range(PARTITIONS)), expected)
    assert_read_back(acked, got, "after clean restart (kafka-python)")
    _produce_more_and_check_offsets(b, topic, expected)

    # A second orderly stop writes the file again; a later kill -9 run must not trust it.
    assert b.terminate() == 0
    first_epoch = content["brokerEpoch"]
    second = json.loads(b.clean_shutdown_file.read_text())
    assert second.get("version") == 0 and isinstance(second.get("brokerEpoch"), int), second
    assert second["brokerEpoch"] >= first_epoch, f"broker epoch went backwards: {first_epoch} -> {second['brokerEpoch']}"
    b.start()
    _assert_recovery_line(b, CLEAN_FOUND)
    b.kill9()
    b.start()
    _assert_recovery_line(b, CLEAN_MISSING)


def test_sigint_is_orderly(start_broker):
    """SIGINT stops the broker like SIGTERM: exit 0 and a clean-shutdown file (KIP-966)."""
    b = start_broker("sigint")
    assert b.terminate(sig=signal.SIGINT) == 0, b.log_tail()
    assert b.clean_shutdown_file.exists()


@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
def test_metadata_survives_restart(start_broker, stop):
    """Topics, partition counts added by CreatePartitions, altered topic configs and deletions all
    survive a restart, clean or after kill -9 (the metadata is as durable as the data)."""
    b = start_broker(f"meta-{stop}")
    admin = confluent_admin(b.bootstrap)
    kept, gone = unique_topic("kept"), unique_topic("gone")
    create_topic(b.bootstrap, kept, 2, config={"retention.ms": "3600000"})
    create_topic(b.bootstrap, gone, 1)
    admin.create_partitions([NewPartitions(kept, 3)])[kept].result(timeout=30)
    res = ConfigResource(ConfigResource.Type.TOPIC, kept, incremental_configs=[
        ConfigEntry("segment.ms", "600000", incremental_operation=AlterConfigOpType.SET)])
    [fut] = admin.incremental_alter_configs([res]).values()
    fut.result(timeout=30)
    admin.delete_topics([gone])[gone].result(timeout=30)
    acked = confluent_produce(b.bootstrap, kept, make_records(30, 3, tag="meta"))

    if stop == "sigterm":
        assert b.terminate() == 0
    else:
        b.kill9()
    b.start()

    admin = confluent_admin(b.bootstrap)
    wait_for_leaders(admin, kept, 3)
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, kept)]).values()
    configs = fut.result(timeout=30)
    assert configs["retention.ms"].value == "3600000", configs["retention.ms"]
    assert configs["segment.ms"].value == "600000", configs["segment.ms"]
    with pytest.raises(ck.KafkaException) as e:
        admin.describe_topics(ck.TopicCollection([gone]))[gone].result(timeout=30)
    assert e.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, f"deleted topic {gone} came back: {e.value}"
    got = confluent_consume(b.bootstrap, kept, [0, 1, 2], {p: 10 for p in range(3)})
    assert_read_back(acked, got, f"after {stop} restart")
