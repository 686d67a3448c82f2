"""Idempotent producers (issue 9): InitProducerId hands out producer ids from blocks the controller
commits; every partition keeps each producer's epoch and its last five batches with the log, so a
retried batch is answered with the offsets it got the first time and never stored twice.

Error codes (Kafka's Errors): OUT_OF_ORDER_SEQUENCE_NUMBER 45, INVALID_PRODUCER_EPOCH 47,
INVALID_RECORD 87, TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53 (transactions: test_transactions.py). Kafka's rules:
ProducerStateManager / ProducerAppendInfo (a producer the partition does not know may start at any
sequence, KIP-360; a new epoch must start at sequence 0).
"""

from __future__ import annotations

import confluent_kafka as ck
import kafka as kp

import kafka_wire as w
from clients import CONFLUENT_COMMON, confluent_consume, confluent_watermarks, create_topic, unique_topic

TS = 1_700_000_000_000
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def batch(pid: int, epoch: int, seq: int, n: int = 1, tag: str = "r", attributes: int = 0) -> bytes:
    return w.record_batch([(None, f"{tag}{seq + i}".encode(), TS) for i in range(n)], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq, attributes=attributes)


def test_sequence_rules_over_the_wire(broker):
    """Two InitProducerId calls give two ids at epoch 0; a retried batch answers its first base
    offset and is stored once; a gap and a new epoch not starting at 0 are out of order; an older
    epoch is fenced; a transactional batch outside a transactional request is refused."""
    topic = unique_topic("idem-wire")
    create_topic(broker.bootstrap, topic, 1)
    with w.RawConnection.to(broker.bootstrap) as conn:
        err, pid, epoch = w.init_producer_id_v0(conn)
        err2, pid2, _ = w.init_producer_id_v0(conn)
        assert (err, err2, epoch) == (w.NONE, w.NONE, 0) and pid >= 0 and pid2 != pid

        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 0, n=3)) == (w.NONE, 0)
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 3, n=2)) == (w.NONE, 3)
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 0, n=3)) == (w.NONE, 0)  # retry: same answer
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 3, n=2)) == (w.NONE, 3)
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 9))[0] == w.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert w.produce_v3(conn, topic, 0, batch(pid, 1, 5))[0] == w.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert w.produce_v3(conn, topic, 0, batch(pid, 1, 0)) == (w.NONE, 5)
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 5))[0] == w.INVALID_PRODUCER_EPOCH
        assert w.produce_v3(conn, topic, 0, batch(pid2, 0, 0, attributes=0x10))[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # a second producer interleaves without disturbing the first
        assert w.produce_v3(conn, topic, 0, batch(pid2, 0, 0, n=2)) == (w.NONE, 6)
        assert w.produce_v3(conn, topic, 0, batch(pid, 1, 1)) == (w.NONE, 8)
    ends = confluent_watermarks(broker.bootstrap, topic, [0])
    assert ends[0][1] == 9, f"the log holds {ends[0][1]} records, wanted 9 (no retry stored twice)"


def test_restarted_broker_still_knows_its_producers(start_broker):
    """Producer state is kept with the log: after a kill -9 and a restart (log recovery, producer
    state from the last snapshot plus the batches after it) the retry of the last batch is still
    answered with its first offset, and the next sequence still follows."""
    b = start_broker("idem-restart")
    topic = unique_topic("idem-restart")
    create_topic(b.bootstrap, topic, 1)
    with w.RawConnection.to(b.bootstrap) as conn:
        _, pid, _ = w.init_producer_id_v0(conn)
        for seq in range(0, 20, 4):
            assert w.produce_v3(conn, topic, 0, batch(pid, 0, seq, n=4)) == (w.NONE, seq)
    b.kill9()
    b.restart()
    with w.RawConnection.to(b.bootstrap) as conn:
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 16, n=4)) == (w.NONE, 16)
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 21))[0] == w.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 20)) == (w.NONE, 20)
        # a new producer id after the restart is not one handed out before it
        _, pid_after, _ = w.init_producer_id_v0(conn)
        assert pid_after != pid
    b.stop()
    b.start()  # clean shutdown: the state comes from the snapshot written at close
    with w.RawConnection.to(b.bootstrap) as conn:
        assert w.produce_v3(conn, topic, 0, batch(pid, 0, 20)) == (w.NONE, 20)


def test_idempotent_clients_store_each_record_once(broker):
    """librdkafka (enable.idempotence=true) and kafka-python (enable_idempotence=True) produce
    through InitProducerId and sequenced batches; every record is stored exactly once, in order."""
    topic = unique_topic("idem-clients")
    partitions, per_client = 3, 600
    create_topic(broker.bootstrap, topic, partitions)

    producer = ck.Producer({**CONFLUENT_COMMON, "bootstrap.servers": broker.bootstrap,
                            "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for n in range(per_client):
        producer.produce(topic, value=f"ck:{n}".encode(), partition=n % partitions,
                         on_delivery=lambda err, _msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed

    kp_producer = kp.KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all")
    futures = [kp_producer.send(topic, value=f"kp:{n}".encode(), partition=n % partitions)
               for n in range(per_client)]
    kp_producer.flush(30)
    for f in futures:
        f.get(timeout=30)
    kp_producer.close()

    ends = {p: hi for p, (_, hi) in confluent_watermarks(broker.bootstrap, topic, list(range(partitions))).items()}
    assert sum(ends.values()) == 2 * per_client, ends
    got = confluent_consume(broker.bootstrap, topic, list(range(partitions)), ends)
    for p, recs in got.items():
        values = [r.value.decode() for _, r in recs]
        for client in ("ck", "kp"):
            numbers = [int(v.split(":")[1]) for v in values if v.startswith(client + ":")]
            assert numbers == list(range(p, per_client, partitions)), f"partition {p} {client}: {numbers[:10]}"
