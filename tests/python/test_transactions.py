"""Transactions (issue 23, KIP-98): a transactional producer's committed records become visible to
read_committed consumers and its aborted ones never do; markers, the last stable offset and the
aborted-transaction index on the partition side; the transaction coordinator on
__transaction_state (InitProducerId fencing, AddPartitionsToTxn, EndTxn, TxnOffsetCommit).

Clients: librdkafka (confluent-kafka) and kafka-python; the Java client and Streams are in
test_java_client.py. Error codes (Kafka's Errors): INVALID_TXN_STATE 48, PRODUCER_FENCED 90,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53, TRANSACTION_ABORTABLE 120.
"""

from __future__ import annotations

import time

import confluent_kafka as ck

import kafka_wire as w
from clients import CONFLUENT_CONSUMER, RDKAFKA_LOG, create_topic, unique_topic

TS = 1_700_000_000_000
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
TIMEOUT_S = 60.0


def txn_producer(bootstrap: str, txn_id: str, **extra) -> ck.Producer:
    conf = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "logger": RDKAFKA_LOG,
        "transaction.timeout.ms": 60_000,
    }
    conf.update(extra)
    p = ck.Producer(conf)
    p.init_transactions(TIMEOUT_S)
    return p


def read_all(bootstrap: str, topic: str, partitions: list[int], isolation: str,
             timeout_s: float = 20.0) -> dict[int, list[bytes]]:
    """Every record of `partitions` up to the (isolation level's) end, by partition."""
    conf = dict(CONFLUENT_CONSUMER)
    conf.update({"bootstrap.servers": bootstrap, "isolation.level": isolation, "logger": RDKAFKA_LOG})
    c = ck.Consumer(conf)
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    got: dict[int, list[bytes]] = {p: [] for p in partitions}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise AssertionError(f"consumer error: {m.error()}")
            at_end.discard(m.partition())
            got[m.partition()].append(m.value())
    finally:
        c.close()
    assert len(at_end) == len(partitions), f"did not reach the end of {partitions}: {at_end}"
    return got


def test_committed_records_are_seen_and_aborted_ones_never(broker):
    """Interleaved commits and aborts over two partitions: read_committed sees exactly the
    committed records in order; read_uncommitted sees everything; the end offsets count the
    markers."""
    topic = unique_topic("txn-basic")
    create_topic(broker.bootstrap, topic, 2)
    p = txn_producer(broker.bootstrap, unique_topic("txn-id"))
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    everything: dict[int, list[bytes]] = {0: [], 1: []}
    for t in range(6):
        p.begin_transaction()
        for i in range(5):
            part = i % 2
            value = f"t{t}-r{i}".encode()
            p.produce(topic, value=value, partition=part)
            everything[part].append(value)
            if t % 2 == 0:
                committed[part].append(value)
        # librdkafka drops what it has not sent yet when aborting: send first, so the aborted
        # records are in the log (and must be skipped by the broker's and client's rules).
        p.flush(TIMEOUT_S)
        if t % 2 == 0:
            p.commit_transaction(TIMEOUT_S)
        else:
            p.abort_transaction(TIMEOUT_S)
    got = read_all(broker.bootstrap, topic, [0, 1], "read_committed")
    assert got == committed
    raw = read_all(broker.bootstrap, topic, [0, 1], "read_uncommitted")
    assert raw == everything


def test_an_open_transaction_holds_back_read_committed_readers(broker):
    """While a transaction is open its records are invisible to read_committed readers and so is
    everything after them (the last stable offset), even another producer's committed records;
    once it commits all become visible."""
    topic = unique_topic("txn-lso")
    create_topic(broker.bootstrap, topic, 1)
    slow = txn_producer(broker.bootstrap, unique_topic("txn-slow"))
    fast = txn_producer(broker.bootstrap, unique_topic("txn-fast"))
    slow.begin_transaction()
    slow.produce(topic, value=b"slow-1", partition=0)
    slow.flush(TIMEOUT_S)
    fast.begin_transaction()
    fast.produce(topic, value=b"fast-1", partition=0)
    fast.commit_transaction(TIMEOUT_S)
    assert read_all(broker.bootstrap, topic, [0], "read_committed") == {0: []}
    assert read_all(broker.bootstrap, topic, [0], "read_uncommitted") == {0: [b"slow-1", b"fast-1"]}
    slow.commit_transaction(TIMEOUT_S)
    assert read_all(broker.bootstrap, topic, [0], "read_committed") == {0: [b"slow-1", b"fast-1"]}


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(broker):
    """InitProducerId for the same transactional id bumps the epoch: the open transaction of the
    old producer is aborted, and the old producer is fenced from then on."""
    topic = unique_topic("txn-fence")
    create_topic(broker.bootstrap, topic, 1)
    txn_id = unique_topic("txn-zombie")
    old = txn_producer(broker.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic, value=b"zombie", partition=0)
    old.flush(TIMEOUT_S)
    new = txn_producer(broker.bootstrap, txn_id)
    new.begin_transaction()
    new.produce(topic, value=b"fresh", partition=0)
    new.commit_transaction(TIMEOUT_S)
    fenced = False
    try:
        old.produce(topic, value=b"late", partition=0)
        old.commit_transaction(TIMEOUT_S)
    except ck.KafkaException as e:
        fenced = e.args[0].fatal() or e.args[0].code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                                           ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert fenced, "the old producer must be fenced"
    assert read_all(broker.bootstrap, topic, [0], "read_committed") == {0: [b"fresh"]}


def test_consume_transform_produce_commits_offsets_with_the_output(broker):
    """sendOffsetsToTransaction: the group's offsets are committed with the output records or not
    at all; an aborted round leaves the committed offset where it was."""
    src = unique_topic("txn-src")
    dst = unique_topic("txn-dst")
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "logger": RDKAFKA_LOG})
    for i in range(10):
        plain.produce(src, value=f"in-{i}".encode(), partition=0)
    plain.flush(TIMEOUT_S)
    group = unique_topic("txn-group")
    consumer = ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed", "logger": RDKAFKA_LOG,
    })
    consumer.assign([ck.TopicPartition(src, 0, 0)])
    producer = txn_producer(broker.bootstrap, unique_topic("txn-etl"))
    rounds = [(0, 4, True), (4, 7, False), (4, 10, True)]
    for start, end, commit in rounds:
        consumer.seek(ck.TopicPartition(src, 0, start))
        producer.begin_transaction()
        taken = 0
        deadline = time.monotonic() + TIMEOUT_S
        while taken < end - start and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            producer.produce(dst, value=m.value().replace(b"in", b"out"), partition=0)
            taken += 1
        assert taken == end - start
        producer.flush(TIMEOUT_S)
        producer.send_offsets_to_transaction([ck.TopicPartition(src, 0, end)],
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
        committed = consumer.committed([ck.TopicPartition(src, 0)], timeout=TIMEOUT_S)[0].offset
        assert committed == (end if commit else 4), (start, end, commit, committed)
    consumer.close()
    got = read_all(broker.bootstrap, dst, [0], "read_committed")
    assert got == {0: [f"out-{i}".encode() for i in range(10)]}


def test_transactional_writes_need_the_transactional_id_and_a_started_transaction(broker):
    """Over the wire: a transactional batch in a Produce without a transactional id is refused
    whole; one whose partition was never added to the transaction is refused too, and opens
    nothing (the last stable offset stays at the high watermark)."""
    topic = unique_topic("txn-wire")
    create_topic(broker.bootstrap, topic, 1)
    txn_producer(broker.bootstrap, "txn-wire-init").flush(1)  # creates __transaction_state
    with w.RawConnection.to(broker.bootstrap) as conn:
        _, pid, epoch = w.init_producer_id_v0(conn)
        batch = w.record_batch([(None, b"x", TS)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                               attributes=0x10)
        assert w.produce_v3(conn, topic, 0, batch)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert read_all(broker.bootstrap, topic, [0], "read_uncommitted") == {0: []}
