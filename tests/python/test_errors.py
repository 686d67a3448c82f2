"""Kafka error answers for requests the broker must refuse, through both clients and raw requests.

Error codes from Kafka's Errors: UNKNOWN_TOPIC_OR_PARTITION 3, MESSAGE_TOO_LARGE 10 (the Java
client's RecordTooLargeException). Configs: message.max.bytes (per-batch limit, Kafka default
1048588), auto.create.topics.enable, num.partitions. Metadata v4+ allow_auto_topic_creation: KIP-204.
"""

from __future__ import annotations

import confluent_kafka as ck
import kafka as kp
import kafka.errors as kerr
import pytest
from confluent_kafka.admin import ConfigResource

import kafka_wire as w
from clients import confluent_admin, confluent_consume, confluent_produce_one, create_topic, unique_topic
from keel_broker import launch, retire

MESSAGE_MAX_BYTES = 10_000
NUM_PARTITIONS = 3
TOO_BIG = b"x" * (2 * MESSAGE_MAX_BYTES)
FITS = b"y" * (MESSAGE_MAX_BYTES // 2)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A broker with message.max.bytes=10000 and num.partitions=3 (auto-create on, Kafka's default)."""
    b = launch(tmp_path_factory, "small-msg", overrides={"message.max.bytes": str(MESSAGE_MAX_BYTES),
                                                         "num.partitions": str(NUM_PARTITIONS)})
    yield b
    retire(b)


@pytest.fixture(scope="module")
def no_auto_create(tmp_path_factory):
    b = launch(tmp_path_factory, "no-auto-create", overrides={"auto.create.topics.enable": "false"})
    yield b
    retire(b)


def assert_serves(b, topic: str | None = None) -> None:
    """The broker process is alive and a fresh confluent-kafka client still produces and consumes."""
    assert b.alive(), f"broker died (exit {b.proc.returncode}); see its log tail below"
    topic = topic or unique_topic("health")
    err, msg = confluent_produce_one(b.bootstrap, topic, b"still-serving")
    assert b.alive(), f"broker died (exit {b.proc.returncode}) while serving the health check"
    assert err is None, f"produce after the error case failed: {err}"
    got = confluent_consume(b.bootstrap, topic, [0], {0: 1}, start_offset=msg.offset())
    assert [r.value for _, r in got[0]] == [b"still-serving"]


# -- message.max.bytes ------------------------------------------------------------------------


def test_confluent_record_too_large(small):
    """confluent-kafka: a 20,000-byte record to a broker with message.max.bytes=10000 fails delivery
    with MSG_SIZE_TOO_LARGE (10); a 5,000-byte record still succeeds."""
    topic = unique_topic("too-large-ck")
    create_topic(small.bootstrap, topic, 1)
    err, _ = confluent_produce_one(small.bootstrap, topic, TOO_BIG, extra={"retries": 0})
    assert err is not None and err.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, f"delivery result: {err}"
    err, msg = confluent_produce_one(small.bootstrap, topic, FITS)
    assert err is None, err
    assert msg.offset() == 0, f"the refused record must not take an offset; small record got {msg.offset()}"
    assert_serves(small)


def test_kafka_python_record_too_large(small):
    """kafka-python: the same oversized record raises MessageSizeTooLargeError (error 10)."""
    topic = unique_topic("too-large-kp")
    create_topic(small.bootstrap, topic, 1)
    producer = kp.KafkaProducer(bootstrap_servers=small.bootstrap, enable_idempotence=False, retries=0, acks="all")
    try:
        with pytest.raises(kerr.MessageSizeTooLargeError):
            producer.send(topic, value=TOO_BIG, partition=0).get(timeout=30)
        assert producer.send(topic, value=FITS, partition=0).get(timeout=30).offset == 0
    finally:
        producer.close(timeout=10)
    assert_serves(small)


def test_raw_produce_too_large(small):
    """Produce v3 with one 20,000-byte batch answers MESSAGE_TOO_LARGE (10) on the partition and keeps
    the connection usable."""
    topic = unique_topic("too-large-raw")
    create_topic(small.bootstrap, topic, 1)
    with w.RawConnection.to(small.bootstrap) as conn:
        err, _ = w.produce_v3(conn, topic, 0, w.record_batch([(b"k", TOO_BIG, 1_700_000_000_000)]))
        assert err == w.MESSAGE_TOO_LARGE
        err, base = w.produce_v3(conn, topic, 0, w.record_batch([(b"k", FITS, 1_700_000_000_000)]))
        assert (err, base) == (w.NONE, 0)


# -- partitions and topics that do not exist --------------------------------------------------


@pytest.fixture(scope="module")
def two_partitions(small):
    topic = unique_topic("two-parts")
    create_topic(small.bootstrap, topic, 2)
    return topic


@pytest.mark.parametrize("api", ["produce", "fetch", "list_offsets"])
@pytest.mark.parametrize("where", ["missing-partition", "missing-topic"])
def test_raw_unknown_partition(small, two_partitions, api, where):
    """Produce v3 / Fetch v4 / ListOffsets v1 naming partition 99 of a 2-partition topic, or a topic
    that does not exist, answer UNKNOWN_TOPIC_OR_PARTITION (3) for it (Produce never auto-creates)."""
    topic, partition = (two_partitions, 99) if where == "missing-partition" else (unique_topic("nope"), 0)
    with w.RawConnection.to(small.bootstrap) as conn:
        if api == "produce":
            err, _ = w.produce_v3(conn, topic, partition, w.record_batch([(b"k", b"v", 1_700_000_000_000)]))
        elif api == "fetch":
            err, _, _ = w.fetch_v4(conn, topic, partition, 0)
        else:
            err, _, _ = w.list_offsets_v1(conn, topic, partition, -1)
        assert err == w.UNKNOWN_TOPIC_OR_PARTITION, f"{api} to {where}: error {err}"
        if where == "missing-topic":
            md = w.metadata_v4(conn, [topic], allow_auto_topic_creation=False)
            assert md[topic][0] == w.UNKNOWN_TOPIC_OR_PARTITION, f"{api} created {topic}: {md}"
    assert_serves(small)


def test_raw_fetch_out_of_range(small, two_partitions):
    """Fetch v4 past the log end offset answers OFFSET_OUT_OF_RANGE (1); at the log end offset it
    answers no records and no error (Kafka ReplicaManager.readFromLocalLog)."""
    with w.RawConnection.to(small.bootstrap) as conn:
        err, base = w.produce_v3(conn, two_partitions, 1, w.record_batch([(b"k", b"v", 1_700_000_000_000)]))
        assert err == w.NONE
        err, hwm, _ = w.fetch_v4(conn, two_partitions, 1, base + 100)
        assert err == w.OFFSET_OUT_OF_RANGE, f"fetch at {base + 100} with hwm {hwm}: error {err}"
        err, hwm, recs = w.fetch_v4(conn, two_partitions, 1, base + 1)
        assert (err, hwm, recs or b"") == (w.NONE, base + 1, b"")


def test_confluent_produce_unknown_partition(small, two_partitions):
    """confluent-kafka refuses partition 99 of a 2-partition topic with an unknown-partition error."""
    err, _ = confluent_produce_one(small.bootstrap, two_partitions, b"v", partition=99)
    assert err is not None and err.code() in (ck.KafkaError._UNKNOWN_PARTITION, ck.KafkaError.UNKNOWN_TOPIC_OR_PART), err


def test_kafka_python_unknown_partition(small, two_partitions):
    """kafka-python refuses to send to partition 99 of a 2-partition topic (its metadata shows 2)."""
    producer = kp.KafkaProducer(bootstrap_servers=small.bootstrap, enable_idempotence=False, max_block_ms=5000)
    try:
        with pytest.raises((ValueError, AssertionError, kerr.KafkaError)):
            producer.send(two_partitions, value=b"v", partition=99).get(timeout=10)
    finally:
        producer.close(timeout=10)


# -- auto topic creation ----------------------------------------------------------------------


def test_auto_create_on(small):
    """With auto.create.topics.enable=true, Metadata v4 with allow_auto_topic_creation=true creates the
    topic with num.partitions partitions; with it false the topic stays unknown (KIP-204)."""
    with w.RawConnection.to(small.bootstrap) as conn:
        quiet = unique_topic("no-create")
        md = w.metadata_v4(conn, [quiet], allow_auto_topic_creation=False)
        assert md[quiet][0] == w.UNKNOWN_TOPIC_OR_PARTITION, md
        loud = unique_topic("auto")
        md = w.metadata_v4(conn, [loud], allow_auto_topic_creation=True)
        # Kafka answers LEADER_NOT_AVAILABLE (5) or NONE on the creating call, then NONE.
        assert md[loud][0] in (0, 5), md
        md = w.metadata_v4(conn, [loud, quiet], allow_auto_topic_creation=False)
        assert md[loud][0] == w.NONE and sorted(md[loud][1]) == list(range(NUM_PARTITIONS)), md
        assert md[quiet][0] == w.UNKNOWN_TOPIC_OR_PARTITION, md


def test_auto_create_by_producing(small):
    """confluent-kafka producing to a new topic auto-creates it (producer Metadata asks for creation)."""
    topic = unique_topic("auto-produce")
    err, msg = confluent_produce_one(small.bootstrap, topic, b"hello", partition=0)
    assert err is None, err
    assert_serves(small, topic)


def test_auto_create_off_raw(no_auto_create):
    """With auto.create.topics.enable=false, Metadata asking for creation still answers
    UNKNOWN_TOPIC_OR_PARTITION and creates nothing."""
    topic = unique_topic("off")
    with w.RawConnection.to(no_auto_create.bootstrap) as conn:
        for _ in range(2):
            md = w.metadata_v4(conn, [topic], allow_auto_topic_creation=True)
            assert md[topic][0] == w.UNKNOWN_TOPIC_OR_PARTITION, md


def test_auto_create_off_confluent(no_auto_create):
    """confluent-kafka producing to an unknown topic with auto-create off fails with an unknown-topic
    error and the topic does not appear."""
    topic = unique_topic("off-ck")
    err, _ = confluent_produce_one(no_auto_create.bootstrap, topic, b"v", extra={
        "topic.metadata.propagation.max.ms": 2000, "message.timeout.ms": 8000})
    assert err is not None and err.code() in (ck.KafkaError._UNKNOWN_TOPIC, ck.KafkaError.UNKNOWN_TOPIC_OR_PART), err
    with w.RawConnection.to(no_auto_create.bootstrap) as conn:
        md = w.metadata_v4(conn, [topic], allow_auto_topic_creation=False)
    assert md[topic][0] == w.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} exists after a refused produce: {md}"
    assert_serves(no_auto_create, topic=_created(no_auto_create))


def test_auto_create_off_kafka_python(no_auto_create):
    """kafka-python sending to an unknown topic with auto-create off fails (metadata never shows it)."""
    topic = unique_topic("off-kp")
    producer = kp.KafkaProducer(bootstrap_servers=no_auto_create.bootstrap, enable_idempotence=False,
                                max_block_ms=3000)
    try:
        with pytest.raises((kerr.KafkaTimeoutError, kerr.UnknownTopicOrPartitionError)):
            producer.send(topic, value=b"v").get(timeout=10)
    finally:
        producer.close(timeout=10)


def _created(b) -> str:
    topic = unique_topic("explicit")
    create_topic(b.bootstrap, topic, 1)
    return topic


def test_broker_config_override_visible(small):
    """DescribeConfigs on the broker resource shows the --override value of message.max.bytes
    (Kafka: static broker config source)."""
    admin = confluent_admin(small.bootstrap)
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "1")]).values()
    configs = fut.result(timeout=30)
    assert "message.max.bytes" in configs, f"broker configs: {sorted(configs)[:20]}"
    assert configs["message.max.bytes"].value == str(MESSAGE_MAX_BYTES), configs["message.max.bytes"]
