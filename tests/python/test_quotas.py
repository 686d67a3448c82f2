"""Client quotas (issue 22, KIP-546): Kafka's kafka-configs (`--entity-type users|clients|ips`)
and `keel quotas` set and describe them; a producer over `producer_byte_rate` is held to it with
`throttle_time_ms` (librdkafka's throttle callback) while another user on the same broker is not
slowed; a consumer over `consumer_byte_rate` is held to it too.

Kafka's behaviour is the reference: ClientQuotaControlManager (the checks and their messages),
ClientQuotasImage.describe (the filters), ClientQuotaManager and QuotaUtils (the windowed rate,
`quota.window.num` 11 × `quota.window.size.seconds` 1, and the throttle time), KIP-219 (the
throttle time in the response, the connection muted for it), ConfigCommand (the tool).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, free_port, keel_bin, retire
from sasl_config import plain_jaas
from kafka_messages import (CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, MessageConnection,
                            MetadataRequest)
from test_kafka_tools import CONFIG_COMMAND, TOPIC_COMMAND, KafkaTools, build_tools

WAIT_S = 60
USERS = {u: f"{u}-secret" for u in ("admin", "alice", "bob", "carol")}
MIB = 1024 * 1024
VALUE = b"q" * 10_000


def rdkafka(user: str) -> dict[str, str]:
    return {**CONFLUENT_COMMON, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return build_tools()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("quotas")
    b = Broker(workdir / "node", name="quotas")
    port = free_port()
    b.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CLIENT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": plain_jaas(users=USERS),
    })
    b.client_bootstrap = f"127.0.0.1:{port}"
    b.admin_config = workdir / "admin.properties"
    b.admin_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                              f"sasl.jaas.config={plain_jaas('admin', USERS['admin'])}\n")
    b.start()
    yield b
    retire(b)


def configs(node: Broker, tools: KafkaTools, *args: str):
    return tools.run(CONFIG_COMMAND, "--bootstrap-server", node.client_bootstrap, "--command-config",
                     str(node.admin_config), *args)


def keel_quotas(node: Broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(keel_bin()), "quotas", *args, "--bootstrap-server", node.client_bootstrap,
                           "--command-config", str(node.admin_config)], capture_output=True, text=True, timeout=60)


def test_kafka_configs_and_keel_quotas_set_describe_and_refuse(node, tools):
    """kafka-configs sets a user's quotas, describes them in Kafka's words, deletes one, sets the
    default client id's; a fractional byte rate and an ip with a key of users are refused with
    Kafka's messages. `keel quotas`
    lists the same entities (table and --json) and sets one."""
    r = configs(node, tools, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert r.code == 0 and "Completed updating config for user alice." in r.out, r.report()
    r = configs(node, tools, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert r.code == 0, r.report()
    assert "Quota configs for user-principal 'alice' are" in r.out, r.report()
    assert "producer_byte_rate=1048576.0" in r.out and "consumer_byte_rate=2097152.0" in r.out, r.report()
    r = configs(node, tools, "--alter", "--entity-type", "users", "--entity-name", "alice",
                "--delete-config", "consumer_byte_rate")
    assert r.code == 0, r.report()
    r = configs(node, tools, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert "producer_byte_rate=1048576.0" in r.out and "consumer_byte_rate" not in r.out, r.report()
    r = configs(node, tools, "--alter", "--entity-type", "clients", "--entity-default", "--add-config",
                "consumer_byte_rate=104857600")
    assert r.code == 0, r.report()
    r = configs(node, tools, "--describe", "--entity-type", "clients", "--entity-default")
    assert "consumer_byte_rate=1.048576E8" in r.out, r.report()

    r = configs(node, tools, "--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
                "producer_byte_rate=1.5")
    assert r.code != 0 and "producer_byte_rate cannot be a fractional value" in r.out + r.err, r.report()

    p = keel_quotas(node, "set", "--user", "bob", "--client-id", "batch", "--add", "producer_byte_rate=5000000")
    assert p.returncode == 0 and "updated the quotas of user=bob, client-id=batch" in p.stdout, p.stdout + p.stderr
    p = keel_quotas(node, "list", "--json")
    assert p.returncode == 0, p.stderr
    listed = {json.dumps(e["entity"], sort_keys=True): e["quotas"] for e in json.loads(p.stdout)}
    assert listed[json.dumps({"user": "alice"})] == {"producer_byte_rate": 1048576.0}, listed
    assert listed[json.dumps({"client-id": None})] == {"consumer_byte_rate": 104857600.0}, listed
    assert listed[json.dumps({"client-id": "batch", "user": "bob"}, sort_keys=True)] == \
        {"producer_byte_rate": 5000000.0}, listed
    p = keel_quotas(node, "list", "--user", "alice")
    assert "user=alice" in p.stdout and "producer_byte_rate" in p.stdout, p.stdout
    p = keel_quotas(node, "set", "--user", "bob", "--client-id", "batch", "--delete", "producer_byte_rate")
    assert p.returncode == 0, p.stderr
    p = keel_quotas(node, "set", "--default-client-id", "--delete", "consumer_byte_rate")
    assert p.returncode == 0, p.stderr


class Producing:
    """A thread producing VALUE to `topic` as `user` as fast as the broker lets it; records when
    each record was acknowledged and every throttle librdkafka reports."""

    def __init__(self, bootstrap: str, user: str, topic: str) -> None:
        self.acked: list[float] = []
        self.throttles: list[int] = []
        self.stop = threading.Event()
        self.producer = ck.Producer({
            "bootstrap.servers": bootstrap, **rdkafka(user), "acks": "1", "linger.ms": "5",
            "client.id": f"{user}-producer", "queue.buffering.max.kbytes": "8192",
            "throttle_cb": lambda event: self.throttles.append(event.throttle_time)})
        self.thread = threading.Thread(target=self._run, args=(topic,), daemon=True)

    def _delivered(self, err, _msg) -> None:
        if err is None:
            self.acked.append(time.monotonic())

    def _run(self, topic: str) -> None:
        while not self.stop.is_set():
            try:
                self.producer.produce(topic, VALUE, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
        self.producer.flush(30)

    def rate(self, start: float, end: float) -> float:
        """Bytes a second acknowledged in [start, end)."""
        return sum(len(VALUE) for t in self.acked if start <= t < end) / (end - start)


def test_a_producer_is_held_to_its_byte_rate_and_others_are_not_slowed(node):
    """alice has producer_byte_rate = 1 MiB/s; she and bob (no quota) produce as fast as they can
    to the same broker for 45 s. Over the last 30 s alice's acknowledged bytes are within 10 % of
    1 MiB/s and librdkafka reported throttle times; bob wrote at least three times as fast and was
    never throttled."""
    p = keel_quotas(node, "set", "--user", "alice", "--add", f"producer_byte_rate={MIB}")
    assert p.returncode == 0, p.stdout + p.stderr
    topic = unique_topic("quota-produce")
    admin = AdminClient({"bootstrap.servers": node.client_bootstrap, **rdkafka("admin")})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(WAIT_S)
    alice = Producing(node.client_bootstrap, "alice", topic)
    bob = Producing(node.client_bootstrap, "bob", topic)
    start = time.monotonic()
    for p in (alice, bob):
        p.thread.start()
    time.sleep(45)
    for p in (alice, bob):
        p.stop.set()
    for p in (alice, bob):
        p.thread.join(60)
    alice_rate = alice.rate(start + 15, start + 45)
    bob_rate = bob.rate(start + 15, start + 45)
    print(f"\nalice {alice_rate / MIB:.3f} MiB/s (quota 1), bob {bob_rate / MIB:.1f} MiB/s; "
          f"alice throttled {len(alice.throttles)} times (max {max(alice.throttles, default=0)} ms), "
          f"bob {len(bob.throttles)}")
    assert 0.9 * MIB <= alice_rate <= 1.1 * MIB, alice_rate / MIB
    assert alice.throttles and max(alice.throttles) > 0, alice.throttles
    assert bob_rate >= 3 * MIB, bob_rate / MIB
    assert not [t for t in bob.throttles if t > 0], bob.throttles


def test_a_consumer_is_held_to_its_byte_rate(node):
    """carol has consumer_byte_rate = 512 KiB/s; reading a topic of 30 MB from the start for 25 s,
    she is sent (over the last 15 s) no more than 10 % over it and no less than 25 % under it —
    a throttled Fetch is answered empty, and its wait counts the bytes it did not send, as in
    Kafka — and librdkafka reports throttle times."""
    quota = 512 * 1024
    p = keel_quotas(node, "set", "--user", "carol", "--add", f"consumer_byte_rate={quota}")
    assert p.returncode == 0, p.stdout + p.stderr
    topic = unique_topic("quota-fetch")
    admin = AdminClient({"bootstrap.servers": node.client_bootstrap, **rdkafka("admin")})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(WAIT_S)
    filler = ck.Producer({"bootstrap.servers": node.client_bootstrap, **rdkafka("admin"), "linger.ms": "20"})
    for _ in range(3000):
        while True:
            try:
                filler.produce(topic, VALUE)
                break
            except BufferError:
                filler.poll(0.1)
    assert filler.flush(60) == 0
    throttles: list[int] = []
    consumer = ck.Consumer({"bootstrap.servers": node.client_bootstrap, **rdkafka("carol"),
                            "group.id": unique_topic("quota-g"), "auto.offset.reset": "earliest",
                            "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.subscribe([topic])
    received: list[float] = []
    start = time.monotonic()
    while time.monotonic() < start + 25:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            received.append(time.monotonic())
    consumer.close()
    rate = sum(len(VALUE) for t in received if t >= start + 10) / 15
    print(f"\ncarol {rate / 1024:.0f} KiB/s (quota 512), throttled {len(throttles)} times")
    assert 0.75 * quota <= rate <= 1.1 * quota, rate / 1024
    assert throttles and max(throttles) > 0, throttles


def answered(port: int, source: str = "127.0.0.1") -> tuple[bool, float]:
    """Opens a connection from `source` and sends ApiVersions v0: whether it was answered, and how
    long the connection lasted when it was closed unanswered."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        client_id = b"conn-rate"
        body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
        s.sendall(struct.pack(">i", len(body)) + body)
        try:
            got = s.recv(4)
        except ConnectionResetError:
            got = b""
        return bool(got), time.monotonic() - start


def test_connections_over_an_ips_rate_are_closed_unanswered(node, tools):
    """kafka-configs sets connection_creation_rate = 2 for 127.0.0.1 (KIP-612). A client
    reconnecting in a loop for 8 s gets about two connections a second answered; the others are
    held unanswered and closed, as Kafka's acceptor does. Another address (127.0.0.2) and the
    inter-broker listener are not limited; deleting the quota lifts it."""
    r = configs(node, tools, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1", "--add-config",
                "connection_creation_rate=2")
    assert r.code == 0 and "Completed updating config for ip 127.0.0.1." in r.out, r.report()
    try:
        r = configs(node, tools, "--describe", "--entity-type", "ips", "--entity-name", "127.0.0.1")
        assert "connection_creation_rate=2.0" in r.out, r.report()
        port = int(node.client_bootstrap.rsplit(":", 1)[1])
        # The broker applies the record from its metadata log: wait for the first refusal.
        deadline = time.monotonic() + WAIT_S
        while all(answered(port)[0] for _ in range(5)):
            assert time.monotonic() < deadline, "the connection rate was never enforced"
        time.sleep(2)
        results = []
        start = time.monotonic()
        while time.monotonic() < start + 8:
            results.append(answered(port))
        served = sum(ok for ok, _ in results)
        held = [lasted for ok, lasted in results if not ok]
        print(f"\n{served} of {len(results)} connections answered in 8 s at 2/s; refused ones held "
              f"{min(held, default=0):.2f}-{max(held, default=0):.2f} s")
        # Two a second, and up to a few more the window lets through as it starts (its rate is
        # measured since its oldest sample, which predates the loop).
        assert 8 <= served <= 2 * 8 + 4, results
        assert held and min(held) >= 0.1, results
        assert all(answered(port, source="127.0.0.2")[0] for _ in range(10))
        assert all(answered(node.port)[0] for _ in range(10)), "the inter-broker listener is limited"
    finally:
        r = configs(node, tools, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
                    "--delete-config", "connection_creation_rate")
    assert r.code == 0, r.report()
    deadline = time.monotonic() + WAIT_S
    while not all(answered(port)[0] for _ in range(10)):
        assert time.monotonic() < deadline, "the connection rate outlived its quota"


THROTTLING_QUOTA_EXCEEDED = 89


def create_topic(conn: MessageConnection, version: int, name: str, partitions: int) -> tuple[int, int]:
    """CreateTopics of one topic at `version`: its error code and the response's throttle."""
    fields = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                          "configs": []}], "timeout_ms": 30_000}
    if version >= 1:
        fields["validate_only"] = False
    r = conn.call(CreateTopicsRequest, version, **fields)
    return r.topics[0].error_code, r.throttle_time_ms


def test_controller_mutations_over_their_rate_are_refused_or_throttled(node, tools, tmp_path):
    """kafka-configs sets controller_mutation_rate = 1 partition a second for a client id
    (KIP-599): the active controller lets it take 11 partitions (11 windows of 1 s) at once, and
    one more topic however large, then throttles it. From CreateTopics v6 / DeleteTopics v5 /
    CreatePartitions v3 a topic that arrives below zero is refused with THROTTLING_QUOTA_EXCEEDED
    and the time to wait; CreateTopics v4 cannot carry that error, so its topic is created and
    only throttled. Another client id is not limited; Kafka's kafka-topics, which waits out a
    quota refusal and retries, deletes a topic anyway."""
    cid = unique_topic("mutator")
    r = configs(node, tools, "--alter", "--entity-type", "clients", "--entity-name", cid, "--add-config",
                "controller_mutation_rate=1")
    assert r.code == 0, r.report()
    r = configs(node, tools, "--describe", "--entity-type", "clients", "--entity-name", cid)
    assert "controller_mutation_rate=1.0" in r.out, r.report()
    plain = f"127.0.0.1:{node.port}"
    names = {k: unique_topic(f"mut-{k}") for k in "abcde"}
    with MessageConnection(plain, client_id=cid) as c:
        assert create_topic(c, 7, names["a"], 11) == (0, 0)
        # The bucket is (about) empty, not below zero: admitted, and 10 below → about 10 s.
        code, throttle = create_topic(c, 7, names["b"], 10)
        assert code == 0 and 7_000 <= throttle <= 10_000, (code, throttle)
    # A throttled connection is not read until its throttle ends (KIP-219): new ones ask now.
    with MessageConnection(plain, client_id=cid) as c:
        code, throttle = create_topic(c, 7, names["c"], 1)
        assert code == THROTTLING_QUOTA_EXCEEDED and 5_000 <= throttle <= 10_000, (code, throttle)
    with MessageConnection(plain, client_id=cid) as c:
        code, throttle = create_topic(c, 4, names["d"], 1)
        assert code == 0 and throttle > 5_000, (code, throttle)
    with MessageConnection(plain, client_id=cid) as c:
        r = c.call(DeleteTopicsRequest, 5, topic_names=[names["a"]], timeout_ms=30_000)
        assert r.responses[0].error_code == THROTTLING_QUOTA_EXCEEDED and r.throttle_time_ms > 5_000, r
    with MessageConnection(plain, client_id=unique_topic("other")) as c:
        assert create_topic(c, 7, names["e"], 100) == (0, 0)

    # kafka-topics asks Admin not to retry a quota refusal: it reports Kafka's error, and
    # succeeds once the throttle has passed.
    props = tmp_path / "mutator.properties"
    props.write_text(node.admin_config.read_text() + f"client.id={cid}\n")
    delete = ("--bootstrap-server", node.client_bootstrap, "--command-config", str(props), "--delete", "--topic",
              names["a"])
    r = tools.run(TOPIC_COMMAND, *delete)
    assert r.code != 0 and "The throttling quota has been exceeded" in r.out + r.err, r.report()
    wait_ms = int(re.search(r"retry in (\d+) ms", r.out + r.err).group(1))
    assert 1_000 <= wait_ms <= 11_000, wait_ms
    time.sleep(wait_ms / 1000)
    r = tools.run(TOPIC_COMMAND, *delete)
    assert r.code == 0, r.report()
    with MessageConnection(plain, client_id=cid) as c:
        # 11 partitions just deleted: about 11 s below zero again.
        r = c.call(CreatePartitionsRequest, 3, topics=[{"name": names["e"], "count": 101, "assignments": None}],
                   timeout_ms=30_000, validate_only=False)
        assert r.results[0].error_code == THROTTLING_QUOTA_EXCEEDED and r.throttle_time_ms > 5_000, r
    r = configs(node, tools, "--alter", "--entity-type", "clients", "--entity-name", cid, "--delete-config",
                "controller_mutation_rate")
    assert r.code == 0, r.report()


def metadata_loop(bootstrap: str, client_id: str, seconds: float) -> tuple[int, list[int]]:
    """Asks for all topics' metadata as fast as the broker answers for `seconds`: how many
    answers, and their throttle times."""
    throttles = []
    end = time.monotonic() + seconds
    with MessageConnection(bootstrap, client_id=client_id) as c:
        while time.monotonic() < end:
            r = c.call(MetadataRequest, 12, topics=None, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)
            throttles.append(r.throttle_time_ms)
    return len(throttles), throttles


def test_a_client_over_its_request_percentage_is_throttled(node, tools):
    """kafka-configs sets request_percentage = 0.1 for a client id (KIP-124): 0.1 % of one
    thread's time, 1 ms a second, for decoding, handling and encoding its requests (a Metadata
    request takes Keel a few microseconds). Asking for every topic's metadata in a loop, it gets
    throttle times and its connection is muted for them, so it is answered at a third or less of
    the rate another client id gets for the same requests on the same broker."""
    cid = unique_topic("busy")
    r = configs(node, tools, "--alter", "--entity-type", "clients", "--entity-name", cid, "--add-config",
                "request_percentage=0.1")
    assert r.code == 0, r.report()
    plain = f"127.0.0.1:{node.port}"
    try:
        free, free_throttles = metadata_loop(plain, unique_topic("free"), 5)
        limited, throttles = metadata_loop(plain, cid, 10)
        print(f"\n{free / 5:.0f} answers/s unlimited, {limited / 10:.0f}/s at request_percentage=0.1; "
              f"throttled {sum(t > 0 for t in throttles)} times, up to {max(throttles)} ms")
        assert not [t for t in free_throttles if t > 0], free_throttles
        assert [t for t in throttles if t > 0], throttles
        assert limited / 10 <= free / 5 / 3, (limited, free)
    finally:
        r = configs(node, tools, "--alter", "--entity-type", "clients", "--entity-name", cid, "--delete-config",
                    "request_percentage")
    assert r.code == 0, r.report()
