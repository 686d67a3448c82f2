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
from clients import CONFLUENT_CONSUMER, RDKAFKA_LOG, Rec, confluent_produce, create_topic, unique_topic

TS = 1_700_000_000_000
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_TRANSACTION_TIMEOUT = 50
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


def read_messages(bootstrap: str, topic: str, partitions: list[int], isolation: str,
                  timeout_s: float = 20.0) -> dict[int, list[tuple[bytes | None, bytes]]]:
    """Every record (key, value) of `partitions` up to the (isolation level's) end, by partition."""
    conf = dict(CONFLUENT_CONSUMER)
    conf.update({"bootstrap.servers": bootstrap, "isolation.level": isolation, "logger": RDKAFKA_LOG})
    c = ck.Consumer(conf)
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    got: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in partitions}
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
            got[m.partition()].append((m.key(), m.value()))
    finally:
        c.close()
    assert len(at_end) == len(partitions), f"did not reach the end of {partitions}: {at_end}"
    return got


def read_all(bootstrap: str, topic: str, partitions: list[int], isolation: str,
             timeout_s: float = 20.0) -> dict[int, list[bytes]]:
    """The values of [`read_messages`]."""
    got = read_messages(bootstrap, topic, partitions, isolation, timeout_s)
    return {p: [v for _, v in records] for p, records in got.items()}


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


def java_string_hash_partition(key: str, partitions: int) -> int:
    """Kafka's partition for a transactional id: abs(String.hashCode) % partitions."""
    h = 0
    for unit in key.encode("utf-16-be").hex(" ", 2).split():
        h = (h * 31 + int(unit, 16)) & 0xFFFFFFFF
    if h >= 2 ** 31:
        h -= 2 ** 32
    return (0 if h == -(2 ** 31) else abs(h)) % partitions


def run_transactions(bootstrap: str, topic: str, txn_id: str, count: int, on_round=None) -> dict[int, bool]:
    """`count` transactions of one record per partition (values "t<n>-p<p>"); every fourth is
    aborted. Returns each transaction's outcome as the producer learned it (True: committed).
    A failed commit is retried until it answers; an abortable error aborts the transaction."""
    p = txn_producer(bootstrap, txn_id, **{"transaction.timeout.ms": 20_000})
    outcomes: dict[int, bool] = {}
    for n in range(count):
        if on_round:
            on_round(n)
        p.begin_transaction()
        for part in range(3):
            p.produce(topic, value=f"t{n}-p{part}".encode(), partition=part)
        want_commit = n % 4 != 3
        p.flush(TIMEOUT_S)
        while True:
            try:
                if want_commit:
                    p.commit_transaction(TIMEOUT_S)
                else:
                    p.abort_transaction(TIMEOUT_S)
                outcomes[n] = want_commit
                break
            except ck.KafkaException as e:
                err = e.args[0]
                if err.txn_requires_abort():
                    want_commit = False
                    continue
                assert err.retriable(), f"transaction {n}: {err}"
                time.sleep(0.2)
    return outcomes


def test_transactions_survive_a_kill9_of_the_coordinator_and_leaders(cluster):
    """Three brokers; a transactional producer commits (and every fourth time aborts) one record
    per partition per transaction while the broker coordinating its transactional id — which also
    leads some of the partitions — is killed with -9 and later restarted. Every transaction the
    producer saw committed is read by a read_committed consumer exactly once, and no record of an
    aborted one ever is."""
    c = cluster("txn-kill9")
    topic = unique_topic("txn-kill9")
    c.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    txn_id = unique_topic("txn-kill9-id")
    victim: list[int] = []

    def kill_coordinator(n: int) -> None:
        if n == 10:
            index = java_string_hash_partition(txn_id, 50)
            leader = c.partition_state("__transaction_state")[index].leader
            victim.append(leader)
            c.kill9(leader)
        if n == 25:
            c.restart(victim[0])

    outcomes = run_transactions(c.live_bootstrap, topic, txn_id, 35, kill_coordinator)
    assert victim, "the coordinator was killed"
    got = read_all(c.live_bootstrap, topic, [0, 1, 2], "read_committed", timeout_s=60)
    for part in range(3):
        want = [f"t{n}-p{part}".encode() for n in sorted(outcomes) if outcomes[n]]
        assert got[part] == want, f"partition {part}: {got[part]} != {want}"


def _java_rounds(args: list[str], on_round, done: str) -> None:
    """Runs one of tests/java's programs, calling `on_round(n)` for each "ROUND <n>" it prints, and
    requires it to exit 0 having printed `done`."""
    import subprocess
    import threading

    from test_java_client import build_check

    classes, classpath = build_check()
    app = subprocess.Popen(["java", "-cp", f"{classes}:{classpath}", *args], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(300, app.kill)
    watchdog.start()
    output: list[str] = []
    try:
        for line in app.stdout:
            output.append(line)
            if line.startswith("ROUND "):
                on_round(int(line.split()[1]))
        app.wait(30)
    finally:
        watchdog.cancel()
        if app.poll() is None:
            app.kill()
    text = "".join(output)
    assert app.returncode == 0 and done in text, f"exit {app.returncode}\n{text[-4000:]}"


def _kill_coordinator_then_restart(c, txn_id: str, kill_at: int, restart_at: int):
    """An `on_round` that kills -9 the broker coordinating `txn_id` at round `kill_at` and
    restarts it at `restart_at`; returns it and the list the victim is put in."""
    victim: list[int] = []

    def on_round(n: int) -> None:
        if n == kill_at:
            index = java_string_hash_partition(txn_id, 50)
            victim.append(c.partition_state("__transaction_state")[index].leader)
            c.kill9(victim[0])
        elif n == restart_at and victim:
            c.restart(victim[0])

    return on_round, victim


def test_java_transactions_survive_a_kill9_of_the_coordinator(cluster):
    """The Java client (tests/java/KeelTransactionsChaos.java, transactions v2) commits 40
    transactions of one record per partition, every fourth aborted, while the broker coordinating
    its transactional id is killed with -9 (at the 10th) and restarted (at the 25th). Timed-out
    commits are called again, as the client's contract says; read_committed then reads exactly the
    records of the transactions the producer saw committed, in order, and none of an aborted one."""
    c = cluster("txn-java-kill9")
    topic = unique_topic("txn-java-kill9")
    c.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    txn_id = unique_topic("txn-java-kill9-id")
    on_round, victim = _kill_coordinator_then_restart(c, txn_id, 10, 25)
    _java_rounds(["KeelTransactionsChaos", c.live_bootstrap, topic, txn_id, "40"], on_round, "JAVA-TXN-CHAOS-OK")
    assert victim, "the coordinator was never killed"


def test_java_consume_transform_produce_survives_a_kill9_of_the_coordinator(cluster):
    """The Java client's consume-transform-produce (tests/java/KeelTransactionsEtlChaos.java):
    600 input records over three partitions are copied in transactions of at most 25 records, each
    carrying the consumer's next positions (sendOffsetsToTransaction), every fifth aborted and
    redone, while the broker coordinating the transactional id is killed with -9 (round 3) and
    restarted (round 12). The group's committed offsets end at the input's end and read_committed
    reads every input record exactly once in the output, in order."""
    c = cluster("txn-java-etl")
    source, sink = unique_topic("txn-etl-in"), unique_topic("txn-etl-out")
    for topic in (source, sink):
        c.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    now_ms = int(time.time() * 1000)
    confluent_produce(c.bootstrap, source, [Rec(partition=n % 3, key=None, value=f"in-{n}".encode(),
                                                timestamp_ms=now_ms + n) for n in range(600)])
    txn_id = unique_topic("txn-java-etl-id")
    on_round, victim = _kill_coordinator_then_restart(c, txn_id, 3, 12)
    _java_rounds(["KeelTransactionsEtlChaos", c.live_bootstrap, source, sink, unique_topic("txn-etl-group"), txn_id],
                 on_round, "JAVA-ETL-CHAOS-OK")
    assert victim, "the coordinator was never killed"


def test_kafka_transactions_tool_lists_describes_and_aborts(broker):
    """Kafka's own kafka-transactions.sh (TransactionsCommand, kafka-tools 4.4): `list` and
    `describe` show an open transaction from its coordinator, `describe-producers` shows its first
    offset in the partition, `find-hanging` runs, and `abort` (WriteTxnMarkers from the admin
    client to the partition leader) closes it there, so read_committed readers move past it."""
    from test_kafka_tools import build_tools
    tools = build_tools()
    command = "org.apache.kafka.tools.TransactionsCommand"
    topic = unique_topic("txn-tool")
    create_topic(broker.bootstrap, topic, 1)
    txn_id = unique_topic("txn-tool-id")
    p = txn_producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(TIMEOUT_S)

    def tool(*args: str) -> str:
        return tools.ok(command, "--bootstrap-server", broker.bootstrap, *args).out

    listed = tool("list")
    assert txn_id in listed and "Ongoing" in listed, listed
    described = tool("describe", "--transactional-id", txn_id)
    assert "Ongoing" in described and f"{topic}-0" in described, described
    producers = tool("describe-producers", "--topic", topic, "--partition", "0")
    row = [line.split() for line in producers.splitlines()[1:] if line.strip()]
    assert len(row) == 1 and row[0][-1] == "0", producers  # CurrentTransactionStartOffset
    tool("find-hanging", "--broker-id", "1")
    other = txn_producer(broker.bootstrap, unique_topic("txn-tool-other"))
    other.begin_transaction()
    other.produce(topic, value=b"after", partition=0)
    other.commit_transaction(TIMEOUT_S)
    # Held back by the open transaction.
    assert read_all(broker.bootstrap, topic, [0], "read_committed") == {0: []}
    tool("abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    # Aborted there: its record is skipped, the committed one after it is visible.
    assert read_all(broker.bootstrap, topic, [0], "read_committed") == {0: [b"after"]}
    producers = tool("describe-producers", "--topic", topic, "--partition", "0")
    row = [line.split() for line in producers.splitlines()[1:] if line.strip()]
    assert row[0][-1] == "None", producers


def test_kafka_streams_exactly_once_v2_word_count_survives_a_broker_kill9(cluster, tmp_path):
    """Kafka Streams 4.4 with processing.guarantee=exactly_once_v2 (tests/java/streams/
    KeelStreamsEos.java, two stream threads) counts the words of 3,000 lines over three brokers;
    the broker leading the first input partition is killed with -9 mid-run and restarted. The
    output read with read_committed ends with every word's exact count: nothing lost, nothing
    counted twice."""
    import subprocess
    import threading
    from collections import Counter

    from builds import java_build
    from clients import Rec, confluent_produce, confluent_watermarks
    from test_delete_records import STREAMS_CACHE, STREAMS_DIR

    classes, classpath = java_build(STREAMS_DIR / "pom.xml", STREAMS_CACHE,
                                    [STREAMS_DIR / "KeelStreamsEos.java"])
    c = cluster("txn-streams")
    src, out = unique_topic("eos-in"), unique_topic("eos-out")
    c.create_topic(src, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    c.create_topic(out, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    words = [f"w{i}" for i in range(40)]
    lines = [" ".join(words[(n * 7 + k) % len(words)] for k in range(1 + n % 5)) for n in range(3000)]
    expected = Counter(w for line in lines for w in line.split())
    recs = [Rec(n % 3, f"k{n}".encode(), line.encode(), TS + n) for n, line in enumerate(lines)]
    confluent_produce(c.live_bootstrap, src, recs[:1500])
    app = subprocess.Popen(["java", "-cp", f"{classes}:{classpath}", "KeelStreamsEos", c.live_bootstrap,
                            unique_topic("eos-app"), src, out, str(tmp_path / "state"), str(len(lines))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = c.partition_state(src)[0].leader

    def chaos() -> None:
        # Once the application is writing output, kill a broker, feed it the second half while
        # the broker is down, and bring the broker back.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and app.poll() is None:
            ends = [hi for _, hi in confluent_watermarks(c.live_bootstrap, out, [0, 1, 2]).values()]
            if sum(ends) > 0:
                break
            time.sleep(0.2)
        c.kill9(victim)
        confluent_produce(c.live_bootstrap, src, recs[1500:])
        time.sleep(5)
        c.restart(victim)

    killer = threading.Thread(target=chaos, daemon=True)
    killer.start()
    try:
        stdout, stderr = app.communicate(timeout=300)
    finally:
        if app.poll() is None:
            app.kill()
    killer.join(120)
    assert not killer.is_alive(), "the broker was restarted"
    assert app.returncode == 0 and "EOS-DONE" in stdout, f"exit {app.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    # The last transactions' markers may still be on their way when the application exits
    # (EndTxn is answered once PrepareCommit is durable): read until the counts are final, or
    # a transaction that never ends shows as missing words at the deadline.
    deadline = time.monotonic() + 60
    while True:
        latest: dict[str, int] = {}
        for records in read_messages(c.live_bootstrap, out, [0, 1, 2], "read_committed", timeout_s=60).values():
            for key, value in records:
                latest[key.decode()] = int.from_bytes(value, "big", signed=True)
        if latest == dict(expected) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert latest == dict(expected), {w: (latest.get(w), n) for w, n in expected.items() if latest.get(w) != n}


def test_the_coordinator_aborts_a_transaction_past_its_timeout_and_expires_idle_ids(start_broker):
    """A producer opens a transaction with transaction.timeout.ms=2000 and goes silent: the
    coordinator aborts it (checked every 500 ms here) with a bumped epoch, so read_committed
    readers move past it and the producer's late commit is refused. A transactional id idle past
    transactional.id.expiration.ms is removed (DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND).
    A timeout above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT."""
    b = start_broker("txn-timeout", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "500",
        "transactional.id.expiration.ms": "3000",
        "transaction.max.timeout.ms": "60000",
    })
    topic = unique_topic("txn-timeout")
    create_topic(b.bootstrap, topic, 1)
    slow_id = unique_topic("txn-slow")
    slow = txn_producer(b.bootstrap, slow_id, **{"transaction.timeout.ms": 2000})
    slow.begin_transaction()
    slow.produce(topic, value=b"abandoned", partition=0)
    slow.flush(TIMEOUT_S)
    other = txn_producer(b.bootstrap, unique_topic("txn-other"))
    other.begin_transaction()
    other.produce(topic, value=b"later", partition=0)
    other.commit_transaction(TIMEOUT_S)
    assert read_all(b.bootstrap, topic, [0], "read_committed") == {0: []}
    deadline = time.monotonic() + 30
    while read_all(b.bootstrap, topic, [0], "read_committed") != {0: [b"later"]}:
        assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
        time.sleep(0.5)
    refused = False
    try:
        slow.commit_transaction(10)
    except ck.KafkaException:
        refused = True
    assert refused, "the producer of an aborted transaction cannot commit it"

    idle_id = unique_topic("txn-idle")
    idle = txn_producer(b.bootstrap, idle_id)
    idle.begin_transaction()
    idle.produce(topic, value=b"x", partition=0)
    idle.commit_transaction(TIMEOUT_S)
    with w.RawConnection.to(b.bootstrap) as conn:
        assert w.init_producer_id_v0(conn, transactional_id=unique_topic("txn-long"),
                                     timeout_ms=60_001)[0] == INVALID_TRANSACTION_TIMEOUT
    from kafka_messages import MessageConnection
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    def described_error() -> int:
        with MessageConnection(b.bootstrap) as conn:
            r = conn.call(DescribeTransactionsRequest, 0, transactional_ids=[idle_id])
        return r.transaction_states[0].error_code

    assert described_error() == 0
    deadline = time.monotonic() + 30
    while described_error() != 105:  # TRANSACTIONAL_ID_NOT_FOUND
        assert time.monotonic() < deadline, "the idle transactional id never expired"
        time.sleep(0.5)


def test_a_transactional_id_too_long_for_the_log_is_refused(broker):
    """InitProducerId v4 (compact strings) with a 40,000-byte transactional id — longer than the
    i16-length key `__transaction_state` stores — is INVALID_REQUEST, and the broker serves on."""
    from kafka_messages import MessageConnection
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    txn_producer(broker.bootstrap, unique_topic("txn-long-init")).flush(1)  # the topic exists
    with MessageConnection(broker.bootstrap) as conn:
        r = conn.call(InitProducerIdRequest, 4, transactional_id="t" * 40_000, transaction_timeout_ms=60_000,
                      producer_id=-1, producer_epoch=-1)
    assert r.error_code == 42, r  # INVALID_REQUEST
    p = txn_producer(broker.bootstrap, unique_topic("txn-after-long"))
    p.begin_transaction()
    p.abort_transaction(TIMEOUT_S)
