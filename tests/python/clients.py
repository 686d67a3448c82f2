"""Produce, consume and admin helpers over the two client libraries the suite drives.

What lives here: `Rec` (one record as a test expects to read it back), record generators, and for
each client (confluent-kafka = librdkafka, kafka-python = pure Python) a producer that returns what
the broker acknowledged and a consumer that reads partitions by manual assignment (no consumer
group: Keel does not serve the group APIs yet). Tests call these; nothing here asserts on the
broker beyond "the client call finished in time".
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

import confluent_kafka as ck
import kafka as kp
from confluent_kafka.admin import AdminClient, NewTopic

CLIENTS = ("confluent", "kafka-python")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CONSUME_TIMEOUT_S = 90.0
FLUSH_TIMEOUT_S = 90.0
ADMIN_TIMEOUT_S = 30.0
BASE_TIMESTAMP_MS = 1_700_000_000_000
# librdkafka's log lines go to Python logging, so pytest shows them only for failing tests.
RDKAFKA_LOG = logging.getLogger("librdkafka")
RDKAFKA_REPEATS_MAX = 3


class _Dedup(logging.Filter):
    """Drops a librdkafka line after RDKAFKA_REPEATS_MAX copies (reconnect loops print forever)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = defaultdict(int)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        self.seen[text] += 1
        return self.seen[text] <= RDKAFKA_REPEATS_MAX


RDKAFKA_LOG.addFilter(_Dedup())
# Idempotence is off in these shared helpers because many tests produce with acks=1 or acks=0,
# which idempotent producers refuse; test_idempotence.py and the kill -9 test in test_cluster.py
# use it.
CONFLUENT_COMMON = {"enable.idempotence": False, "logger": RDKAFKA_LOG}
# confluent-kafka insists on a group.id; with assign() and no commits no group API is used.
CONFLUENT_CONSUMER = {
    "group.id": "keel-tests-unused-group",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": True,
    "fetch.wait.max.ms": 100,  # partition EOF needs an empty fetch; do not long-poll 500 ms for it
    "logger": RDKAFKA_LOG,
}


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_records(n: int, partitions: int, tag: str, value_bytes: int = 0, base_ts: int = BASE_TIMESTAMP_MS) -> list[Rec]:
    """n distinct records, round-robin over partitions, timestamps base_ts+i.

    Values vary in length and repeat themselves enough to compress; `value_bytes` pads each value
    to at least that size. Every 3rd record carries headers, every 101st has a null key and every
    97th a null value (a tombstone), so those encodings cross the broker too.
    """
    out = []
    for i in range(n):
        value: bytes | None = f"{tag}:value:{i}:".encode() + (b"%06d" % i) * (i % 17)
        if len(value) < value_bytes:
            value += bytes((i + j) % 251 for j in range(value_bytes - len(value)))
        key: bytes | None = f"{tag}:key:{i}".encode()
        if i % 101 == 100:
            key = None
        if i % 97 == 96 and key is not None:  # kafka-python refuses a record with neither
            value = None
        headers = (("seq", b"%d" % i), ("tag", tag.encode())) if i % 3 == 0 else ()
        out.append(Rec(i % partitions, key, value, base_ts + i, headers))
    return out


def by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        out[r.partition].append(r)
    return dict(out)


# -- admin ------------------------------------------------------------------------------------


def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOG})


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    """Creates a topic with confluent-kafka's AdminClient and waits until metadata shows every leader."""
    admin = confluent_admin(bootstrap)
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=ADMIN_TIMEOUT_S)[name]
    fut.result(timeout=ADMIN_TIMEOUT_S)
    wait_for_leaders(admin, name, partitions)


def wait_for_leaders(admin: AdminClient, name: str, partitions: int, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=10)
        t = md.topics.get(name)
        last = t
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {name} never showed {partitions} partitions with leaders: {last}")


# -- confluent-kafka --------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, recs: list[Rec], compression: str = "none",
                      acks: str = "all", extra: dict | None = None) -> list[tuple[Rec, int]]:
    """Produces with explicit partitions and timestamps; returns [(rec, offset)] in produce order.

    Small linger.ms / batch.size / batch.num.messages make librdkafka send many batches.
    Raises AssertionError listing the first delivery errors if any record was not acknowledged.
    """
    conf = {
        "bootstrap.servers": bootstrap,
        "compression.type": compression,
        "acks": acks,
        "linger.ms": 2,
        "batch.size": 16384,
        "batch.num.messages": 200,
        "message.timeout.ms": int(FLUSH_TIMEOUT_S * 1000),
        **CONFLUENT_COMMON,
        **(extra or {}),
    }
    producer = ck.Producer(conf)
    offsets: list[int | None] = [None] * len(recs)
    errors: list[str] = []

    def report(i):
        def cb(err, msg):
            if err is not None:
                errors.append(f"record {i}: {err}")
            else:
                offsets[i] = msg.offset()
        return cb

    for i, r in enumerate(recs):
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, partition=r.partition,
                                 timestamp=r.timestamp_ms, headers=list(r.headers) or None,
                                 on_delivery=report(i))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(FLUSH_TIMEOUT_S)
    assert left == 0, f"confluent-kafka: {left} records still in flight after {FLUSH_TIMEOUT_S}s"
    assert not errors, f"confluent-kafka delivery errors ({len(errors)}): {errors[:5]}"
    return list(zip(recs, offsets))


def confluent_produce_one(bootstrap: str, topic: str, value: bytes, partition: int = 0, key: bytes | None = None,
                          extra: dict | None = None):
    """Produces one record and returns (error or None, message) from its delivery report."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000,
                            **CONFLUENT_COMMON, **(extra or {})})
    result = []
    producer.produce(topic, key=key, value=value, partition=partition,
                     on_delivery=lambda err, msg: result.append((err, msg)))
    producer.flush(40)
    assert result, "confluent-kafka: no delivery report within 40s"
    return result[0]


def confluent_consumer(bootstrap: str, extra: dict | None = None) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONSUMER, **(extra or {})})


def confluent_consume(bootstrap: str, topic: str, partitions: list[int], expected: dict[int, int],
                      start_offset: int = ck.OFFSET_BEGINNING, extra: dict | None = None
                      ) -> dict[int, list[tuple[int, Rec]]]:
    """Reads every assigned partition from `start_offset` until it reaches partition EOF having seen
    at least `expected[p]` records; returns {partition: [(offset, rec)]}. EOF means the fetch offset
    reached the high watermark (read_committed: the last stable offset), so with `expected` = {p: 0}
    this returns exactly what consumers can see now. `extra` overrides consumer settings."""
    consumer = confluent_consumer(bootstrap, extra)
    try:
        consumer.assign([ck.TopicPartition(topic, p, start_offset) for p in partitions])
        got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in partitions}
        at_eof: set[int] = set()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(p in at_eof and len(got[p]) >= expected.get(p, 0) for p in partitions):
                return got
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition())
                        continue
                    raise AssertionError(f"confluent-kafka consume error: {err}")
                at_eof.discard(msg.partition())
                ts_type, ts = msg.timestamp()
                got[msg.partition()].append(
                    (msg.offset(), Rec(msg.partition(), msg.key(), msg.value(), ts, tuple(msg.headers() or ()))))
        counts = {p: len(v) for p, v in got.items()}
        raise AssertionError(f"confluent-kafka: consumed {counts}, expected {expected}, EOF on {sorted(at_eof)} "
                             f"after {CONSUME_TIMEOUT_S}s")
    finally:
        consumer.close()


def confluent_watermarks(bootstrap: str, topic: str, partitions: list[int], timeout_s: float = 10.0
                         ) -> dict[int, tuple[int, int]]:
    """{partition: (log start offset, high watermark)} by ListOffsets from the leaders, uncached."""
    consumer = confluent_consumer(bootstrap, {"isolation.level": "read_uncommitted"})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=timeout_s, cached=False)
                for p in partitions}
    finally:
        consumer.close()


class BackgroundProducer:
    """A thread that produces numbered records (value b"<tag>:<n>:" + padding, partition n mod
    `partitions`) with confluent-kafka until `stop()`, and records every delivery report.

    `acked` lists (partition, offset, value) in delivery-report order, `errors` (value, error) for
    records that failed. `transmissions` counts records put into produce requests, every resend
    included (librdkafka's per-partition `txmsgs` statistic), so after `stop()` `resent()` bounds
    how many records can legitimately be stored twice. It sends at most `rate_per_s` records a second (None: as fast as it can)
    and keeps at most `max_in_queue` waiting in the client, so a long run or an outage does not
    pile up an unbounded backlog. Use as a context manager so the thread always ends.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str, acks: str = "all",
                 value_bytes: int = 100, rate_per_s: float | None = 2000, max_in_queue: int = 2000,
                 extra: dict | None = None) -> None:
        self.topic, self.partitions, self.tag = topic, partitions, tag
        self.value_bytes, self.max_in_queue, self.rate_per_s = value_bytes, max_in_queue, rate_per_s
        self.conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "statistics.interval.ms": 500,
                     "stats_cb": self._stats, **CONFLUENT_COMMON, **(extra or {})}
        self.transmissions = 0
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[tuple[bytes, ck.KafkaError]] = []
        self.sent = 0
        self.left_in_flight: int | None = None  # records never reported, after the final flush
        self.crash: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{tag}", daemon=True)

    def __enter__(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _stats(self, text: str) -> None:
        topic = json.loads(text).get("topics", {}).get(self.topic, {})
        sent = sum(p.get("txmsgs", 0) for p in topic.get("partitions", {}).values())
        self.transmissions = max(self.transmissions, sent)

    def resent(self) -> int:
        """Records transmitted more than once (valid after `stop()`: every record was sent by then)."""
        return max(0, self.transmissions - self.sent)

    def value(self, n: int) -> bytes:
        v = f"{self.tag}:{n}:".encode()
        return v + b"x" * max(0, self.value_bytes - len(v))

    @staticmethod
    def number(value: bytes) -> int:
        """The n of a value made by `value(n)`."""
        return int(value.split(b":", 2)[1])

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def acked_by_partition(self) -> dict[int, int]:
        """How many records each partition has acknowledged so far."""
        counts = {p: 0 for p in range(self.partitions)}
        with self._lock:
            for p, _, _ in self.acked:
                counts[p] += 1
        return counts

    def wait_progress(self, more: int, timeout_s: float = 30.0, what: str = "") -> None:
        """Waits until every partition has acknowledged at least `more` records beyond what it had
        when called: each partition is writable, not just some of them."""
        start = self.acked_by_partition()
        deadline = time.monotonic() + timeout_s
        while True:
            now = self.acked_by_partition()
            if all(now[p] - start[p] >= more for p in start):
                return
            if self.crash is not None or not self._thread.is_alive():
                raise AssertionError(f"{what}: producer thread ended early: {self.crash!r}")
            if time.monotonic() > deadline:
                with self._lock:
                    errors = self.errors[:5]
                raise AssertionError(f"{what}: acknowledged per partition went {start} -> {now} in {timeout_s}s, "
                                     f"wanted +{more} each ({self.sent} sent, first errors {errors})")
            time.sleep(0.05)

    def stop(self, flush_timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Stops producing and waits (up to `flush_timeout_s`) for the outstanding delivery reports."""
        self._flush_timeout_s = flush_timeout_s
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(flush_timeout_s + 30)

    def _run(self) -> None:
        try:
            producer = ck.Producer(self.conf)

            def report(err, msg):
                with self._lock:
                    if err is None:
                        self.acked.append((msg.partition(), msg.offset(), msg.value()))
                    else:
                        self.errors.append((msg.value(), err))

            n = 0
            began = time.monotonic()
            while not self._stop.is_set():
                ahead = self.rate_per_s is not None and n >= self.rate_per_s * (time.monotonic() - began)
                if ahead or len(producer) >= self.max_in_queue:
                    producer.poll(0.005)
                    continue
                try:
                    producer.produce(self.topic, value=self.value(n), partition=n % self.partitions,
                                     on_delivery=report)
                    n += 1
                    self.sent = n
                except BufferError:
                    producer.poll(0.01)
                producer.poll(0)
            self.left_in_flight = producer.flush(getattr(self, "_flush_timeout_s", FLUSH_TIMEOUT_S))
            settle = time.monotonic() + 1.2  # statistics emitted after the flush cover every send
            while time.monotonic() < settle:
                producer.poll(0.1)
        except BaseException as e:  # noqa: BLE001 - surfaced by wait_acked and the test
            self.crash = e


class HighWatermarkWatcher:
    """Threads that ask the partition leaders for the high watermark of every partition
    (ListOffsets latest via confluent-kafka `get_watermark_offsets`, uncached, read_uncommitted)
    over and over until `stop()`, one thread and one consumer per partition. `samples[p]` lists
    (time.monotonic(), high watermark); failed queries (no leader, leader moving,
    OFFSET_NOT_AVAILABLE, ...) are counted in `failures`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = 0.02) -> None:
        self.topic, self.partitions, self.interval_s = topic, partitions, interval_s
        self.bootstrap = bootstrap
        self.samples: dict[int, list[tuple[float, int]]] = {p: [] for p in range(partitions)}
        self.failures: dict[str, int] = defaultdict(int)
        # (partition, time.monotonic() it started, seconds, outcome) of every query over a second.
        self.slow: list[tuple[int, float, float, str]] = []
        self.crash: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hwm-{topic}", daemon=True)

    def __enter__(self) -> "HighWatermarkWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        # One thread and one consumer per partition: a query that waits out its timeout on a dead
        # leader holds up only its own partition's samples. confluent-kafka (2.16) serializes the
        # calls made on one handle, so a shared consumer would hold every thread behind it.
        try:
            pollers = [threading.Thread(target=self._poll, args=(p,), daemon=True, name=f"hwm-{self.topic}-{p}")
                       for p in range(self.partitions)]
            for t in pollers:
                t.start()
            for t in pollers:
                t.join()
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.crash = e

    def _poll(self, p: int) -> None:
        try:
            consumer = confluent_consumer(self.bootstrap, {"isolation.level": "read_uncommitted"})
            try:
                while not self._stop.is_set():
                    started = time.monotonic()
                    outcome = "ok"
                    try:
                        _, hi = consumer.get_watermark_offsets(ck.TopicPartition(self.topic, p), timeout=2,
                                                               cached=False)
                    except ck.KafkaException as e:
                        outcome = e.args[0].name()
                        hi = None
                    took = time.monotonic() - started
                    with self._lock:
                        if outcome != "ok":
                            self.failures[outcome] += 1
                        if took > 1.0:
                            self.slow.append((p, round(started, 3), round(took, 3), outcome))
                    if hi is not None and hi < 0:  # librdkafka's "no offset" sentinel
                        with self._lock:
                            self.failures[f"high watermark {hi}"] += 1
                    elif hi is not None:
                        self.samples[p].append((time.monotonic(), hi))
                    # After a failure too: an answer that fails at once (an unknown partition)
                    # must not turn this into a busy loop that starves the brokers of CPU.
                    self._stop.wait(self.interval_s)
            finally:
                consumer.close()
        except BaseException as e:  # noqa: BLE001 - surfaced by the test
            self.crash = e

    def regressions(self) -> list[str]:
        """Every place where a partition's high watermark was lower than one seen before it."""
        out = []
        for p, samples in self.samples.items():
            highest, at = -1, 0.0
            for t, hi in samples:
                if hi < highest:
                    out.append(f"partition {p}: {highest} (t={at:.3f}) then {hi} (t={t:.3f})")
                if hi > highest:
                    highest, at = hi, t
        return out


# -- kafka-python -----------------------------------------------------------------------------


def kp_produce(bootstrap: str, topic: str, recs: list[Rec], compression: str = "none",
               acks="all", extra: dict | None = None) -> list[tuple[Rec, int]]:
    """kafka-python twin of confluent_produce; returns [(rec, offset)] in produce order."""
    producer = kp.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if compression == "none" else compression,
        acks=acks,
        linger_ms=2,
        batch_size=16384,
        enable_idempotence=False,
        request_timeout_ms=30000,
        **(extra or {}),
    )
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, partition=r.partition,
                                 timestamp_ms=r.timestamp_ms, headers=list(r.headers) or None) for r in recs]
        producer.flush(timeout=FLUSH_TIMEOUT_S)
        offsets, errors = [], []
        for i, f in enumerate(futures):
            try:
                offsets.append(f.get(timeout=FLUSH_TIMEOUT_S).offset)
            except Exception as e:  # noqa: BLE001 - reported below with the record index
                offsets.append(None)
                errors.append(f"record {i}: {e!r}")
        assert not errors, f"kafka-python delivery errors ({len(errors)}): {errors[:5]}"
        return list(zip(recs, offsets))
    finally:
        producer.close(timeout=10)


def kp_consumer(bootstrap: str, **extra) -> kp.KafkaConsumer:
    return kp.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                            auto_offset_reset="earliest", **extra)


def kp_consume(bootstrap: str, topic: str, partitions: list[int], expected: dict[int, int]
               ) -> dict[int, list[tuple[int, Rec]]]:
    """kafka-python twin of confluent_consume: reads from the beginning until each partition's
    position reaches its end offset having seen at least `expected[p]` records."""
    consumer = kp_consumer(bootstrap)
    try:
        tps = [kp.TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in partitions}
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(len(got[p]) >= expected.get(p, 0) for p in partitions):
                ends = consumer.end_offsets(tps)
                if all(consumer.position(tp) >= ends[tp] for tp in tps):
                    return got
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                for m in msgs:
                    got[tp.partition].append(
                        (m.offset, Rec(tp.partition, m.key, m.value, m.timestamp, tuple(m.headers or ()))))
        counts = {p: len(v) for p, v in got.items()}
        raise AssertionError(f"kafka-python: consumed {counts}, expected {expected} after {CONSUME_TIMEOUT_S}s")
    finally:
        consumer.close()


PRODUCERS = {"confluent": confluent_produce, "kafka-python": kp_produce}
CONSUMERS = {"confluent": confluent_consume, "kafka-python": kp_consume}


def assert_read_back(acked: list[tuple[Rec, int]], got: dict[int, list[tuple[int, Rec]]], who: str) -> None:
    """Every partition holds exactly the acknowledged records, in produce order, at offsets 0..n-1,
    and each record sits at the offset its delivery report named."""
    want: dict[int, list[tuple[Rec, int]]] = defaultdict(list)
    for r, off in acked:
        want[r.partition].append((r, off))
    for p in sorted(set(want) | set(got)):
        recs = got.get(p, [])
        offsets = [o for o, _ in recs]
        assert offsets == list(range(len(recs))), (
            f"{who}: partition {p} offsets not contiguous from 0: first gaps "
            f"{[(a, b) for a, b in zip(offsets, offsets[1:]) if b != a + 1][:5]}, starts at {offsets[:3]}")
        assert len(recs) == len(want.get(p, [])), (
            f"{who}: partition {p} holds {len(recs)} records, {len(want.get(p, []))} were acknowledged")
        for (off, r), (w, acked_off) in zip(recs, want[p]):
            if r != w:
                raise AssertionError(f"{who}: partition {p} offset {off}: got {_short(r)}, expected {_short(w)}")
            assert acked_off == off, f"{who}: record {_short(w)} acknowledged at offset {acked_off}, read at {off}"


def _short(r: Rec) -> str:
    v = r.value if r.value is None or len(r.value) < 60 else r.value[:60] + b"..."
    return f"Rec(p={r.partition}, key={r.key!r}, value={v!r}, ts={r.timestamp_ms}, headers={r.headers})"
