"""Issue 20's "Per-record produce errors", "Topic config values" and "DescribeConfigs", each
answered as Apache Kafka 4.1 answers (every expected message and code below is what a Kafka
4.1.0 node answered to the same request):

- KIP-467: a batch with invalid records is refused whole, with `record_errors` naming each bad
  record's batch index and Kafka's message, and an `error_message` (Kafka: LogValidator
  validateKey / validateTimestamp / processRecordErrors, ReplicaManager's RecordValidationException
  answer). The Java producer fails the bad records with InvalidRecordException /
  InvalidTimestampException and the others with "part of a batch which had one more more invalid
  records", and sends those again fine; librdkafka reports INVALID_RECORD for the bad ones and
  _INVALID_DIFFERENT_RECORD for the others. A batch over max.message.bytes is MESSAGE_TOO_LARGE
  whole, without record errors (UnifiedLog.analyzeAndValidateRecords checks the batch size).
- compression.type: the leader rebuilds a batch in the topic's codec at its KIP-390 level
  (LogValidator.buildRecordsAndAssignOffsets); every replica holds the leader's bytes.
- Every topic config Kafka 4.x defines is accepted (acted on, or without effect and saying why in
  its documentation) or refused with Kafka's INVALID_CONFIG message; unknown names are "Unknown
  topic config name: x" (LogConfig.validateNames).
- DescribeConfigs: documentation, types, sources and read_only for topics and brokers (the Java
  Admin with includeDocumentation, kafka-configs --describe --all, confluent-kafka's admin),
  advertised.listeners, and an unknown broker key refused (Kafka leaves it out; see
  docs/clients.md).

The Java side is tests/java/KeelConfigsCheck.java (kafka-clients 4.1, built like the Java client
check); Kafka's own kafka-configs runs from the tools classpath of test_kafka_tools.py.
"""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

import kafka_wire as kw
from clients import ADMIN_TIMEOUT_S, CONFLUENT_COMMON, CONFLUENT_CONSUMER, confluent_admin, create_topic, unique_topic
from keel_broker import keel_bin, launch, retire
from test_java_client import JAVA_DIR, build_check

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
# org.apache.kafka.common.protocol.Errors
INVALID_TIMESTAMP = 32
INVALID_CONFIG = 40
INVALID_REQUEST = 42
# Kafka's batch attributes: the codec in the low three bits.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_OF_TOPIC = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
KEYLESS = "Compacted topic cannot accept message without key in topic partition {}"
DIFFERENT = "Failed to append record because it was part of a batch which had one more more invalid records"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A single-node broker with one topic default set in its file (log.retention.hours)."""
    b = launch(tmp_path_factory, "configs-produce", config={"log.retention.hours": "100"})
    yield b
    retire(b)


def java(*args: str) -> dict[str, list[str]]:
    """Runs KeelConfigsCheck; returns its "KEY rest" lines by key."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelConfigsCheck.java", classes / "KeelConfigsCheck.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelConfigsCheck", *args],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


def confluent_batch(bootstrap: str, topic: str, records: list[tuple[bytes | None, int]],
                    extra: dict | None = None, values: list[bytes] | None = None) -> list[tuple[int, str | None]]:
    """librdkafka sends (key, timestamp) records (`values`, or value-<i>) to partition 0 in one
    batch; returns each record's (error code or 0, error name or None)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "message.timeout.ms": 30_000,
                            "retries": 0, **CONFLUENT_COMMON, **(extra or {})})
    outcomes: list[tuple[int, str | None] | None] = [None] * len(records)

    def report(i):
        def cb(err, _msg):
            outcomes[i] = (0, None) if err is None else (err.code(), err.name())
        return cb

    for i, (key, timestamp) in enumerate(records):
        value = values[i] if values else b"value-%d" % i
        producer.produce(topic, key=key, value=value, partition=0, timestamp=timestamp, on_delivery=report(i))
    # Waiting out linger.ms (not flush(), which sends at once, sometimes before every record is
    # queued) keeps the records in one batch.
    deadline = time.monotonic() + 40
    while None in outcomes and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(10)
    assert None not in outcomes, outcomes
    return outcomes


def log_end(bootstrap: str, topic: str) -> int:
    with kw.RawConnection.to(bootstrap) as conn:
        err, _, offset = kw.list_offsets_v1(conn, topic, 0, -1)
    assert err == 0
    return offset


def batches_of(segment: Path) -> list[tuple[int, int, bytes]]:
    """Every batch of a segment file: (base offset, codec, the batch's bytes)."""
    data = segment.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        batch = data[pos:pos + 12 + length]
        (attributes,) = struct.unpack_from(">h", batch, 21)
        out.append((base, attributes & 0x07, batch))
        pos += 12 + length
    return out


def segments(data_dir: Path, topic: str) -> list[Path]:
    return sorted(data_dir.glob(f"**/{topic}-0/*.log"))


def consume_values(bootstrap: str, topic: str, count: int) -> list[tuple[bytes | None, bytes | None, int]]:
    """Reads `count` records of partition 0 from the start: (key, value, timestamp type)."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONSUMER, "group.id": unique_topic("g")})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.key(), msg.value(), msg.timestamp()[0]))
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


# -- KIP-467: record errors ---------------------------------------------------------------------


def test_keyless_records_of_a_compacted_topic_fail_one_by_one(broker):
    """A compacted topic refuses a batch with keyless records, naming them (Kafka:
    LogValidator.validateKey, processRecordErrors): over the raw wire, Produce v8 answers
    INVALID_RECORD with record_errors [1, 3, 4] and Kafka's messages, the summary error_message
    and the log start offset, and appends nothing; librdkafka fails the keyless records with
    INVALID_RECORD and the others with _INVALID_DIFFERENT_RECORD (a batch with a single record
    error it fails whole with INVALID_RECORD, against Kafka as well); the Java producer (idempotent)
    throws InvalidRecordException with Kafka's message for each keyless record and KafkaException
    for the others, and sends the others again fine (offsets follow on)."""
    topic = unique_topic("keyless")
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    message = KEYLESS.format(f"{topic}-0")
    with kw.RawConnection.to(broker.bootstrap) as conn:
        answer = kw.produce_v8(conn, topic, 0, kw.record_batch(
            [(b"a", b"1", now), (None, b"2", now), (b"c", b"3", now), (None, b"4", now), (None, None, now)]))
    assert (answer.error, answer.base_offset, answer.log_start_offset) == (kw.INVALID_RECORD, -1, 0), answer
    assert answer.record_errors == [(1, message), (3, message), (4, message)], answer
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{message}')" for i in (1, 3, 4))
    assert answer.error_message == ("One or more records have been rejected due to 3 record errors in total, "
                                    f"and only showing the first three errors at most: [{shown}]")
    assert log_end(broker.bootstrap, topic) == 0, "nothing of the batch was appended"
    with kw.RawConnection.to(broker.bootstrap) as conn:  # v3-7 carry the error code only
        assert kw.produce_v3(conn, topic, 0, kw.record_batch([(None, b"x", now)])) == (kw.INVALID_RECORD, -1)

    # With a single record error librdkafka fails the whole batch with it, as against Kafka.
    outcomes = confluent_batch(broker.bootstrap, topic, [(b"a", now), (None, now), (b"c", now), (None, now)])
    assert outcomes == [(-138, "_INVALID_DIFFERENT_RECORD"), (kw.INVALID_RECORD, "INVALID_RECORD")] * 2, outcomes
    assert confluent_batch(broker.bootstrap, topic, [(b"a", now), (None, now)]) == \
        [(kw.INVALID_RECORD, "INVALID_RECORD")] * 2
    assert log_end(broker.bootstrap, topic) == 0

    out = java("records", broker.bootstrap, topic, "a,-,c,-,e")
    assert out["FIRST"] == ["OK 0"], out
    assert out["SEND"] == [f"0 KafkaException {DIFFERENT}", f"1 InvalidRecordException {message}",
                           f"2 KafkaException {DIFFERENT}", f"3 InvalidRecordException {message}",
                           f"4 KafkaException {DIFFERENT}"], out
    assert out["RETRY"] == ["0 OK 1", "2 OK 2", "4 OK 3"], out


def test_timestamps_out_of_bounds_fail_one_by_one(broker):
    """KIP-937 (Kafka 3.6+): on a CreateTime topic a record's timestamp must lie within
    [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] (Kafka 4's
    defaults: unbounded before, one hour after); -1 (no timestamp) always passes. Raw wire:
    INVALID_TIMESTAMP, record_errors [1, 2, 4] with Kafka's message naming the window, error_message
    "One or more records have been rejected due to invalid timestamp". librdkafka: INVALID_RECORD
    for the late records, _INVALID_DIFFERENT_RECORD for the others. Java (on a topic with the
    defaults): InvalidTimestampException for a record two hours ahead, KafkaException for the
    others, which go through when sent again."""
    topic = unique_topic("timestamps")
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.before.max.ms": str(MINUTE_MS),
                                              "message.timestamp.after.max.ms": str(MINUTE_MS)})
    now = int(time.time() * 1000)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        answer = kw.produce_v8(conn, topic, 0, kw.record_batch(
            [(None, b"0", now), (None, b"1", now + HOUR_MS), (None, b"2", now - HOUR_MS), (None, b"3", -1),
             (None, b"4", -5)]))
    assert (answer.error, answer.base_offset, answer.log_start_offset) == (INVALID_TIMESTAMP, -1, 0), answer
    assert [i for i, _ in answer.record_errors] == [1, 2, 4], answer
    index, text = answer.record_errors[0]
    prefix = f"Timestamp {now + HOUR_MS} of message with offset 1 is out of range. The timestamp should be within ["
    assert text.startswith(prefix), text
    low, high = (int(v) for v in text[len(prefix):-1].split(", "))
    assert high - low == 2 * MINUTE_MS and abs(low + MINUTE_MS - now) < MINUTE_MS, text
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    assert log_end(broker.bootstrap, topic) == 0

    outcomes = confluent_batch(broker.bootstrap, topic, [(None, now), (None, now + HOUR_MS)] * 2)
    assert outcomes == [(-138, "_INVALID_DIFFERENT_RECORD"), (kw.INVALID_RECORD, "INVALID_RECORD")] * 2, outcomes

    defaults = unique_topic("timestamps-default")
    create_topic(broker.bootstrap, defaults, 1)
    out = java("records", broker.bootstrap, defaults, "a,late,c")
    assert out["SEND"][0] == f"0 KafkaException {DIFFERENT}", out
    assert out["SEND"][1].startswith("1 InvalidTimestampException Timestamp "), out
    assert "is out of range. The timestamp should be within [" in out["SEND"][1], out
    assert out["SEND"][2] == f"2 KafkaException {DIFFERENT}", out
    assert out["RETRY"] == ["0 OK 1", "2 OK 2"], out


def test_log_append_time_topics_stamp_and_refuse_producer_stamped_batches(broker):
    """message.timestamp.type=LogAppendTime: the bounds do not apply (a record a day ahead is
    accepted) and the broker stamps the batch (log_append_time in the answer, consumers see a
    LogAppendTime timestamp); a batch the producer itself marked LogAppendTime is refused record by
    record with INVALID_TIMESTAMP and Kafka's "Producer should not set timestamp type to
    LogAppendTime" (LogValidator.validateTimestamp)."""
    topic = unique_topic("append-time")
    create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    now = int(time.time() * 1000)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        ok = kw.produce_v8(conn, topic, 0, kw.record_batch([(None, b"ahead", now + 24 * HOUR_MS)]))
        assert (ok.error, ok.base_offset) == (0, 0), ok
        assert abs(ok.log_append_time_ms - now) < MINUTE_MS, ok
        stamped = kw.produce_v8(conn, topic, 0, kw.record_batch([(None, b"x", now), (b"kk", b"yy", now)],
                                                                attributes=0x08))
    assert stamped.error == INVALID_TIMESTAMP, stamped
    assert stamped.record_errors == [
        (i, f"Invalid timestamp type in message DefaultRecord(offset={i}, timestamp={now}, key={k} bytes, "
            f"value={v} bytes). Producer should not set timestamp type to LogAppendTime.")
        for i, k, v in [(0, 0, 1), (1, 2, 2)]], stamped
    [(_, value, timestamp_type)] = consume_values(broker.bootstrap, topic, 1)
    assert (value, timestamp_type) == (b"ahead", ck.TIMESTAMP_LOG_APPEND_TIME)


def test_a_batch_over_max_message_bytes_fails_whole(broker):
    """A batch over max.message.bytes is MESSAGE_TOO_LARGE for the whole batch, without record
    errors, even when a single record made it so (Kafka checks the batch's size:
    UnifiedLog.analyzeAndValidateRecords; Kafka 4.1 answers exactly this, log start offset -1
    included). librdkafka fails every record of the batch with MSG_SIZE_TOO_LARGE."""
    topic = unique_topic("too-large")
    create_topic(broker.bootstrap, topic, 1, {"max.message.bytes": "2000", "cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        answer = kw.produce_v8(conn, topic, 0, kw.record_batch(
            [(b"a", b"small", now), (None, b"x" * 3000, now), (b"c", b"small", now)]))
    assert (answer.error, answer.record_errors, answer.log_start_offset) == (kw.MESSAGE_TOO_LARGE, [], -1), answer
    outcomes = confluent_batch(broker.bootstrap, topic, [(b"k", now)] * 3, values=[b"small", b"y" * 2500, b"small"])
    assert outcomes == [(ck.KafkaError.MSG_SIZE_TOO_LARGE, "MSG_SIZE_TOO_LARGE")] * 3, outcomes
    assert log_end(broker.bootstrap, topic) == 0


# -- compression.type -----------------------------------------------------------------------------


def test_compression_type_recompresses_to_the_topic_codec(broker):
    """compression.type (Kafka: LogValidator.buildRecordsAndAssignOffsets): a topic of each codec
    stores what librdkafka sends in every codec as one batch in the topic's codec ("producer":
    as sent), and reads back the same records, timestamps and offsets; compression.zstd.level
    19 stores fewer bytes than level -5 for the same records (KIP-390)."""
    now = int(time.time() * 1000)
    records = [(b"key-%d" % i, b"value %d of a record that compresses well; " % i * 8) for i in range(200)]
    for topic_codec in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
        topic = unique_topic(f"codec-{topic_codec}")
        create_topic(broker.bootstrap, topic, 1, {"compression.type": topic_codec})
        for producer_codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": producer_codec,
                                    "linger.ms": 1000, "batch.num.messages": 1000, **CONFLUENT_COMMON})
            for key, value in records:
                producer.produce(topic, key=key, value=value, partition=0, timestamp=now)
            assert producer.flush(40) == 0
        batches = [b for segment in segments(broker.data_dir, topic) for b in batches_of(segment)]
        # librdkafka may cut a producer's 200 records into more than one batch.
        stored = {base // 200: codec for base, codec, _ in batches}
        want = [CODECS[c] for c in ("none", "gzip", "snappy", "lz4", "zstd")] if topic_codec == "producer" \
            else [CODEC_OF_TOPIC[topic_codec]] * 5
        assert [stored[i] for i in range(5)] == want, (topic_codec, batches)
        assert all(codec == stored[base // 200] for base, codec, _ in batches), (topic_codec, batches)
        got = consume_values(broker.bootstrap, topic, 1000)
        assert [(k, v) for k, v, _ in got] == records * 5, topic_codec

    sizes = {}
    for level in ("-5", "19"):
        topic = unique_topic(f"zstd-{level}")
        create_topic(broker.bootstrap, topic, 1, {"compression.type": "zstd", "compression.zstd.level": level})
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, **CONFLUENT_COMMON})
        for key, value in records:
            producer.produce(topic, key=key, value=value, partition=0, timestamp=now)
        assert producer.flush(40) == 0
        sizes[level] = sum(len(b) for s in segments(broker.data_dir, topic) for _, _, b in batches_of(s))
    assert sizes["19"] < sizes["-5"], sizes


def test_broker_compression_type_is_the_topic_default(tmp_path_factory):
    """The broker config compression.type (and compression.gzip.level) is the default of topics
    without an override (ServerTopicConfigSynonyms): an uncompressed batch is stored in gzip, and
    DescribeConfigs shows the value with source STATIC_BROKER_CONFIG."""
    b = launch(tmp_path_factory, "broker-codec", config={"compression.type": "gzip", "compression.gzip.level": "9"})
    try:
        topic = unique_topic("broker-default")
        create_topic(b.bootstrap, topic, 1)
        now = int(time.time() * 1000)
        with kw.RawConnection.to(b.bootstrap) as conn:
            answer = kw.produce_v8(conn, topic, 0, kw.record_batch([(b"k", b"v" * 500, now)]))
        assert answer.error == 0, answer
        [(_, codec, _)] = [x for s in segments(b.data_dir, topic) for x in batches_of(s)]
        assert codec == CODECS["gzip"]
        resource = ConfigResource("topic", topic)
        admin = confluent_admin(b.bootstrap)
        entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
        entry = entries["compression.type"]
        assert (entry.value, entry.source) == ("gzip", ConfigSource.STATIC_BROKER_CONFIG.value), entry
        assert entries["compression.gzip.level"].value == "9"
        assert got_values(b.bootstrap, topic) == [b"v" * 500]
    finally:
        retire(b)


def got_values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [v for _, v, _ in consume_values(bootstrap, topic, 1)]


def test_followers_hold_the_leaders_recompressed_bytes(start_broker):
    """Against keel dev (three brokers), a zstd topic with replication factor 3 gets gzip batches
    from librdkafka: the leader stores them in zstd, and every follower's segment is the leader's,
    byte for byte (followers copy the leader's batches; they never recompress)."""
    dev = start_broker("codec-dev", mode="dev")
    topic = unique_topic("codec-replicas")
    admin = confluent_admin(dev.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 3, config={"compression.type": "zstd", "min.insync.replicas": "3"})
                         ])[topic].result(timeout=ADMIN_TIMEOUT_S)
    producer = ck.Producer({"bootstrap.servers": dev.bootstrap, "compression.type": "gzip", "acks": "all",
                            **CONFLUENT_COMMON})
    for i in range(3000):
        producer.produce(topic, key=b"%d" % (i % 50), value=b"payload %d " % i * 10, partition=0)
    assert producer.flush(60) == 0
    files = segments(dev.data_dir, topic)
    assert len(files) == 3, files
    deadline = time.monotonic() + 30
    while len({f.read_bytes() for f in files}) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    contents = [f.read_bytes() for f in files]
    assert contents[0] == contents[1] == contents[2], [len(c) for c in contents]
    assert {codec for _, codec, _ in batches_of(files[0])} == {CODECS["zstd"]}


# -- every topic config ------------------------------------------------------------------------------

# Every topic config of Kafka 4.1 with a valid value other than its default.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete", "compression.gzip.level": "5", "compression.lz4.level": "12",
    "compression.type": "lz4", "compression.zstd.level": "-3", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1", "index.interval.bytes": "1024",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "1000",
    "local.retention.ms": "1000", "max.compaction.lag.ms": "100000", "max.message.bytes": "100000",
    "message.timestamp.after.max.ms": "1000", "message.timestamp.before.max.ms": "1000",
    "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.25",
    "min.compaction.lag.ms": "10", "min.insync.replicas": "1", "preallocate": "true",
    "remote.log.copy.disable": "true", "remote.log.delete.on.disable": "true", "remote.storage.enable": "false",
    "retention.bytes": "100000000", "retention.ms": "100000000", "segment.bytes": "10000000",
    "segment.index.bytes": "100000", "segment.jitter.ms": "1000", "segment.ms": "100000000",
    "unclean.leader.election.enable": "true",
}

# (configs, Kafka 4.1's INVALID_CONFIG message for a CreateTopics with them).
REFUSED = [
    ({"nosuch.config": "1"}, "Unknown topic config name: nosuch.config"),
    ({"message.format.version": "3.0"}, "Unknown topic config name: message.format.version"),
    ({"message.timestamp.difference.max.ms": "1"}, "Unknown topic config name: message.timestamp.difference.max.ms"),
    ({"message.downconversion.enable": "true"}, "Unknown topic config name: message.downconversion.enable"),
    ({"remote.storage.enable": "true"},
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be "
                                     "one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.gzip.level": "0"},
     "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
    ({"compression.zstd.level": "-131073"},
     "Invalid value -131073 for configuration compression.zstd.level: Value must be between -131072 and 22"),
    ({"local.retention.ms": "-3"}, "Invalid value -3 for configuration local.retention.ms: Value must be at least -2"),
    ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
]


def test_every_kafka_topic_config_is_accepted_and_described(broker):
    """Every topic config Kafka 4.1 defines is accepted at creation with a value of its own, and
    DescribeConfigs (confluent-kafka's admin) then shows each with that value and source
    DYNAMIC_TOPIC_CONFIG, not read-only; the defaults of a plain topic come from the broker's file
    (log.retention.hours=100: retention.ms 360000000, STATIC_BROKER_CONFIG) or Kafka's defaults
    (DEFAULT_CONFIG, message.timestamp.after.max.ms 3600000 as in Kafka 4)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("every-config")
    admin.create_topics([NewTopic(topic, 1, 1, config=KAFKA_TOPIC_CONFIGS)])[topic].result(timeout=ADMIN_TIMEOUT_S)
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    for name, value in KAFKA_TOPIC_CONFIGS.items():
        entry = entries[name]
        assert (entry.value, entry.source, entry.is_read_only) == \
            (value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False), (name, entry)

    plain = unique_topic("plain")
    create_topic(broker.bootstrap, plain, 1)
    resource = ConfigResource("topic", plain)
    entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    assert set(KAFKA_TOPIC_CONFIGS) <= set(entries), set(KAFKA_TOPIC_CONFIGS) - set(entries)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == \
        (str(100 * HOUR_MS), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (entries["message.timestamp.after.max.ms"].value, entries["message.timestamp.after.max.ms"].source) == \
        ("3600000", ConfigSource.DEFAULT_CONFIG.value)


@pytest.mark.parametrize("configs,message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_topic_configs_are_refused_as_kafka_refuses_them(broker, configs, message):
    """CreateTopics (validate_only and for real) with a config Kafka 4.1 refuses answers
    INVALID_CONFIG with Kafka's own message (LogConfig.validateNames / validate /
    validateValues / validateRemoteStorageOnlyIfSystemEnabled), and creates nothing."""
    admin = confluent_admin(broker.bootstrap)
    for validate_only in (True, False):
        topic = unique_topic("refused")
        with pytest.raises(ck.KafkaException) as refused:
            admin.create_topics([NewTopic(topic, 1, 1, config=configs)],
                                validate_only=validate_only)[topic].result(timeout=ADMIN_TIMEOUT_S)
        error = refused.value.args[0]
        assert (error.code(), error.str()) == (INVALID_CONFIG, message)
        assert topic not in admin.list_topics(timeout=10).topics


def test_incremental_alter_refuses_by_name_and_acts_on_the_rest(broker):
    """IncrementalAlterConfigs from the Java Admin: an unknown name is InvalidConfigurationException
    "Unknown topic config name: x"; remote.storage.enable=true is refused; compression.type=zstd
    with a level is accepted and acted on (the next batch is stored in zstd); confluent-kafka's
    incremental_alter_configs sees the same refusal."""
    topic = unique_topic("alter")
    create_topic(broker.bootstrap, topic, 1)
    out = java("alter", broker.bootstrap, topic, "nosuch.config=1", "remote.storage.enable=true",
               "compression.type=zstd", "compression.zstd.level=19")
    assert out["ALTER"] == [
        "nosuch.config InvalidConfigurationException Unknown topic config name: nosuch.config",
        "remote.storage.enable InvalidConfigurationException Tiered Storage functionality is disabled in the "
        "broker. Topic cannot be configured with remote log storage.",
        "compression.type OK", "compression.zstd.level OK"], out
    now = int(time.time() * 1000)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        assert kw.produce_v8(conn, topic, 0, kw.record_batch([(b"k", b"v" * 100, now)])).error == 0
    assert [codec for s in segments(broker.data_dir, topic) for _, codec, _ in batches_of(s)] == [CODECS["zstd"]]

    admin = confluent_admin(broker.bootstrap)
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("message.format.version", "3.0", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as refused:
        admin.incremental_alter_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
    error = refused.value.args[0]
    assert (error.code(), error.str()) == (INVALID_CONFIG, "Unknown topic config name: message.format.version")


def test_segment_index_bytes_rolls_segments(broker):
    """segment.index.bytes is acted on: with room for two time-index entries (24 bytes) and an
    index entry per batch (index.interval.bytes=1), a segment rolls once its index is full, so ten
    batches fill several segments; the records read back in order."""
    topic = unique_topic("index-bytes")
    create_topic(broker.bootstrap, topic, 1, {"segment.index.bytes": "24", "index.interval.bytes": "1"})
    now = int(time.time() * 1000)
    with kw.RawConnection.to(broker.bootstrap) as conn:
        for i in range(10):
            assert kw.produce_v8(conn, topic, 0, kw.record_batch([(b"k", b"%d" % i, now)])).base_offset == i
    assert len(segments(broker.data_dir, topic)) >= 3, segments(broker.data_dir, topic)
    assert [v for _, v, _ in consume_values(broker.bootstrap, topic, 10)] == [b"%d" % i for i in range(10)]


# -- DescribeConfigs -------------------------------------------------------------------------------


def test_describe_configs_with_documentation_and_broker_configs(broker):
    """The Java Admin's describeConfigs with includeDocumentation and includeSynonyms
    (ConfigHelper): every topic and broker entry has documentation and a type; the broker
    answers advertised.listeners (the listener clients are given), node.id and broker.id, log.dirs
    and listeners from its file with source STATIC_BROKER_CONFIG and read_only true, the topic
    default log.retention.hours from its file, and compression.type (a topic default the cluster
    can change) with read_only false; an inert topic config says so in its documentation."""
    topic = unique_topic("describe")
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    out = java("describe", broker.bootstrap, topic, "1")
    topic_entries = {line.split("|")[0]: line.split("|") for line in out["TOPIC"]}
    broker_entries = {line.split("|")[0]: line.split("|") for line in out["BROKER"]}
    assert set(KAFKA_TOPIC_CONFIGS) <= set(topic_entries)
    assert all(e[5] == "true" for e in topic_entries.values()), "every topic entry documented"
    assert all(e[5] == "true" and e[4] != "UNKNOWN" for e in broker_entries.values())
    assert topic_entries["cleanup.policy"][1:5] == ["compact", "DYNAMIC_TOPIC_CONFIG", "false", "LIST"]
    assert topic_entries["cleanup.policy"][6] == "cleanup.policy=compact:DYNAMIC_TOPIC_CONFIG;" \
                                                 "log.cleanup.policy=delete:DEFAULT_CONFIG;"
    assert topic_entries["retention.ms"][1:3] == [str(100 * HOUR_MS), "STATIC_BROKER_CONFIG"]
    assert topic_entries["retention.ms"][6].startswith("log.retention.hours=100:STATIC_BROKER_CONFIG;")
    listener = f"PLAINTEXT://{broker.bootstrap}"
    assert broker_entries["advertised.listeners"][1:5] == [listener, "DEFAULT_CONFIG", "true", "STRING"]
    assert broker_entries["listeners"][1:5] == [listener, "STATIC_BROKER_CONFIG", "true", "STRING"]
    assert broker_entries["node.id"][1:5] == ["1", "STATIC_BROKER_CONFIG", "true", "INT"]
    assert broker_entries["broker.id"][1:5] == ["1", "STATIC_BROKER_CONFIG", "true", "INT"]
    assert broker_entries["log.dirs"][1:4] == [str(broker.data_dir), "STATIC_BROKER_CONFIG", "true"]
    assert broker_entries["log.retention.hours"][1:5] == ["100", "STATIC_BROKER_CONFIG", "false", "INT"]
    assert broker_entries["compression.type"][1:5] == ["producer", "DEFAULT_CONFIG", "false", "STRING"]
    assert broker_entries["process.roles"][1:4] == ["null", "DEFAULT_CONFIG", "true"]

    # The same documentation over the raw wire: an inert config says why.
    with kw.RawConnection.to(broker.bootstrap) as conn:
        described = kw.describe_configs_v3(conn, kw.RESOURCE_TOPIC, topic, ["preallocate", "segment.bytes"],
                                           documentation=True)
        assert set(described.entries) == {"preallocate", "segment.bytes"}
        assert "Keel accepts it without effect" in described.entries["preallocate"].documentation
        assert "without effect" not in described.entries["segment.bytes"].documentation
        undocumented = kw.describe_configs_v3(conn, kw.RESOURCE_TOPIC, topic, ["segment.bytes"])
        assert undocumented.entries["segment.bytes"].documentation is None


def test_describe_broker_unknown_key_other_broker_and_cluster_defaults(broker):
    """DescribeConfigs of a BROKER resource over the raw wire (v3): a key this broker does not have
    fails the resource with INVALID_CONFIG naming it (issue 20; Kafka 4.1 leaves it out of the
    answer), known keys are answered; another broker id is INVALID_REQUEST with Kafka's message
    (ConfigHelper.describeConfigs); the empty name answers the cluster-wide dynamic defaults, here
    one set with `keel configs set --cluster` (DYNAMIC_DEFAULT_BROKER_CONFIG), which
    the broker's own entry then shows as its source."""
    with kw.RawConnection.to(broker.bootstrap) as conn:
        unknown = kw.describe_configs_v3(conn, kw.RESOURCE_BROKER, "1", ["log.dirs", "nosuch.key"])
        assert unknown.error == INVALID_CONFIG and "nosuch.key" in unknown.message, unknown
        known = kw.describe_configs_v3(conn, kw.RESOURCE_BROKER, "1", ["advertised.listeners", "log.dirs"])
        assert known.error == 0 and set(known.entries) == {"advertised.listeners", "log.dirs"}, known
        assert known.entries["advertised.listeners"].value == f"PLAINTEXT://{broker.bootstrap}"
        other = kw.describe_configs_v3(conn, kw.RESOURCE_BROKER, "7", None)
        assert (other.error, other.message) == \
            (INVALID_REQUEST, "Unexpected broker id, expected 1 or empty string, but received 7")

    admin = confluent_admin(broker.bootstrap)
    keel_configs(broker, "set", "--cluster", "log.retention.ms=7200000")
    try:
        with kw.RawConnection.to(broker.bootstrap) as conn:
            defaults = kw.describe_configs_v3(conn, kw.RESOURCE_BROKER, "", None)
            assert defaults.error == 0 and defaults.entries["log.retention.ms"].value == "7200000", defaults
            assert defaults.entries["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        resource = ConfigResource("broker", "1")
        entries = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)
        entry = entries["log.retention.ms"]
        assert (entry.value, entry.source, entry.is_read_only) == \
            ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False), entry
        assert entries["listeners"].is_read_only and entries["advertised.listeners"].is_read_only
        topic = unique_topic("cluster-default")
        create_topic(broker.bootstrap, topic, 1)
        resource = ConfigResource("topic", topic)
        retention = admin.describe_configs([resource])[resource].result(timeout=ADMIN_TIMEOUT_S)["retention.ms"]
        assert (retention.value, retention.source) == ("7200000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    finally:
        keel_configs(broker, "set", "--cluster", "--delete", "log.retention.ms")


def keel_configs(broker, *args: str) -> None:
    """`keel configs ...` (IncrementalAlterConfigs; confluent-kafka cannot name the BROKER
    resource with an empty name)."""
    run = subprocess.run([str(keel_bin()), "configs", *args, "--bootstrap-server", broker.bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_kafka_configs_describe_all(broker):
    """Kafka 4.1's kafka-configs (kafka.admin.ConfigCommand) --describe --all of this broker and of
    a topic: every line parses, the broker's advertised.listeners and node.id are there with their
    synonyms, the topic lists every Kafka topic config."""
    from test_kafka_tools import CONFIG_COMMAND, build_tools
    tools = build_tools()
    topic = unique_topic("tool")
    create_topic(broker.bootstrap, topic, 1, {"compression.type": "zstd"})
    run = tools.run(CONFIG_COMMAND, "--bootstrap-server", broker.bootstrap, "--describe", "--all",
                    "--entity-type", "brokers", "--entity-name", "1")
    assert run.code == 0, run.report()
    lines = [line.strip() for line in run.out.splitlines()]
    assert lines[0] == "All configs for broker 1 are:", run.report()
    assert f"advertised.listeners=PLAINTEXT://{broker.bootstrap} sensitive=false synonyms=" \
           f"{{DEFAULT_CONFIG:advertised.listeners=PLAINTEXT://{broker.bootstrap}}}" in lines, run.report()
    assert "node.id=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=1}" in lines, run.report()
    run = tools.run(CONFIG_COMMAND, "--bootstrap-server", broker.bootstrap, "--describe", "--all",
                    "--entity-type", "topics", "--entity-name", topic)
    assert run.code == 0, run.report()
    names = {line.strip().split("=", 1)[0] for line in run.out.splitlines()[1:] if "=" in line}
    assert set(KAFKA_TOPIC_CONFIGS) <= names, set(KAFKA_TOPIC_CONFIGS) - names
    assert "compression.type=zstd sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:compression.type=zstd, " \
           "DEFAULT_CONFIG:compression.type=producer}" in [line.strip() for line in run.out.splitlines()]
