"""Log compaction (issue 9): `cleanup.policy=compact` keeps the latest record of every key, with
its offset, timestamp and headers; tombstones leave after `delete.retention.ms`; compressed
batches are recompressed with their own codec and stay readable by librdkafka and kafka-python;
a record without a key is refused (INVALID_RECORD, Kafka's rule); `__consumer_offsets` is
compacted too, and a coordinator restarted with kill -9 loads the latest commit from it.

The broker runs its cleaner every 200 ms (`log.cleaner.backoff.ms`) so the tests need not wait
Kafka's 15 s.
"""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest

from clients import (BASE_TIMESTAMP_MS, CODECS, CONFLUENT_COMMON, Rec, confluent_consume,
                     confluent_produce, confluent_produce_one, create_topic, kp_consume, unique_topic)
from keel_broker import launch, retire

CLEANER = {
    "log.cleaner.backoff.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "2048",
    # The broker default for every topic, __consumer_offsets included.
    "log.cleaner.min.cleanable.ratio": "0.01",
}
WAIT_S = 30
KEYS = 10
ROUNDS = 30
FILLERS = 40


@pytest.fixture(scope="module")
def cleaner_broker(tmp_path_factory):
    b = launch(tmp_path_factory, "compaction", config=CLEANER)
    yield b
    retire(b)


def compacted_topic(bootstrap: str, **extra: str) -> str:
    topic = unique_topic("compacted")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact", "segment.bytes": "1024",
                                       "min.cleanable.dirty.ratio": "0.01", **extra})
    return topic


def read_all(bootstrap: str, topic: str, client: str) -> list[tuple[int, Rec]]:
    consume = confluent_consume if client == "confluent" else kp_consume
    return consume(bootstrap, topic, [0], {0: 0})[0]


def wait_for(bootstrap: str, topic: str, want: list[tuple[int, Rec]]) -> None:
    """Reads the whole partition with both clients until it holds exactly `want`."""
    deadline = time.monotonic() + WAIT_S
    got: list[tuple[int, Rec]] = []
    while time.monotonic() < deadline:
        got = read_all(bootstrap, topic, "kafka-python")
        if got == want:
            break
        time.sleep(0.3)
    assert got == want, (f"after {WAIT_S}s the compacted log holds {len(got)} records, "
                         f"expected {len(want)}; first differences: "
                         f"{[g for g in got if g not in want][:3]} / {[w for w in want if w not in got][:3]}")
    assert read_all(bootstrap, topic, "confluent") == want, "librdkafka reads the same log"


def test_latest_value_of_each_key_survives_every_codec(cleaner_broker):
    """Rounds of every key, each round with another codec; then a tombstone for k0 and filler
    records so the tail segment holds nothing compactable. The cleaner leaves one record per key
    (the last round's, same offset, timestamp and headers), drops k0 once its tombstone's
    delete.retention.ms passed, and every client reads the result."""
    bootstrap = cleaner_broker.bootstrap
    topic = compacted_topic(bootstrap, **{"delete.retention.ms": "500"})
    acked: list[tuple[Rec, int]] = []
    for r in range(ROUNDS):
        recs = [Rec(0, f"k{k}".encode(), f"k{k}-round{r}".encode(), BASE_TIMESTAMP_MS + r * KEYS + k,
                    (("round", str(r).encode()),))
                for k in range(KEYS)]
        acked += confluent_produce(bootstrap, topic, recs, compression=CODECS[r % len(CODECS)],
                                   extra={"linger.ms": 50})
    tombstone = Rec(0, b"k0", None, BASE_TIMESTAMP_MS + 10_000)
    acked += confluent_produce(bootstrap, topic, [tombstone])
    fillers = [Rec(0, f"filler{i}".encode(), b"x" * 40, BASE_TIMESTAMP_MS + 20_000 + i) for i in range(FILLERS)]
    acked += confluent_produce(bootstrap, topic, fillers)
    assert [o for _, o in acked] == list(range(len(acked)))

    last_round = [(o, rec) for rec, o in acked
                  if rec.value is not None and rec.value.endswith(f"round{ROUNDS - 1}".encode()) and rec.key != b"k0"]
    want = sorted(last_round + [(o, rec) for rec, o in acked if rec.key.startswith(b"filler")])
    wait_for(bootstrap, topic, want)


def test_record_without_key_is_refused(cleaner_broker):
    bootstrap = cleaner_broker.bootstrap
    topic = compacted_topic(bootstrap)
    err, _ = confluent_produce_one(bootstrap, topic, b"no key")
    assert err is not None and err.code() == ck.KafkaError.INVALID_RECORD, err
    err, msg = confluent_produce_one(bootstrap, topic, b"keyed", key=b"k")
    assert err is None and msg.offset() == 0, err


def offsets_partition_bytes(broker) -> int:
    segments = (broker.log_dir / "__consumer_offsets-0").glob("*.log")
    return sum(p.stat().st_size for p in segments)


def test_consumer_offsets_is_compacted_and_reloads_after_kill9(cleaner_broker):
    """400 commits of one group to one partition fill many 2 KiB segments of
    __consumer_offsets-0; the cleaner shrinks them to about one record per segment, and after
    kill -9 and a restart the coordinator loads the latest commit from the compacted log."""
    bootstrap = cleaner_broker.bootstrap
    topic = compacted_topic(bootstrap)
    assert confluent_produce_one(bootstrap, topic, b"v", key=b"k")[0] is None
    group = unique_topic("compacted-group")
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "logger": CONFLUENT_COMMON["logger"]})
    try:
        for n in range(1, 401):
            consumer.commit(offsets=[ck.TopicPartition(topic, 0, n)], asynchronous=False)
    finally:
        consumer.close()
    written = 400 * 60  # an offset commit record is well over 60 bytes

    deadline = time.monotonic() + WAIT_S
    while offsets_partition_bytes(cleaner_broker) > written // 4 and time.monotonic() < deadline:
        time.sleep(0.3)
    size = offsets_partition_bytes(cleaner_broker)
    assert size <= written // 4, f"__consumer_offsets-0 still holds {size} bytes"

    cleaner_broker.kill9()
    cleaner_broker.start()
    consumer = ck.Consumer({"bootstrap.servers": cleaner_broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "logger": CONFLUENT_COMMON["logger"]})
    try:
        deadline = time.monotonic() + WAIT_S
        committed = None
        while time.monotonic() < deadline:
            try:
                committed = consumer.committed([ck.TopicPartition(topic, 0)], timeout=5)[0].offset
            except ck.KafkaException:
                committed = None  # the coordinator is still loading
            if committed == 400:
                break
            time.sleep(0.2)
        assert committed == 400, f"committed offset after kill -9: {committed}"
    finally:
        consumer.close()
