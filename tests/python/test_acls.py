"""Authorization (issue 22): Kafka's ACLs, decided as Kafka's StandardAuthorizer decides them, on
a real cluster of processes, with Kafka's own kafka-acls (org.apache.kafka.tools.AclCommand),
kafka-topics and kafka-console-producer, librdkafka (confluent-kafka), kafka-python and `keel acls`.

The cluster: three controllers and three brokers, every connection inside it SASL_SSL with PLAIN
users `controller` and `broker` (keel_cluster.Cluster.secure_internals), clients on a CLIENT
listener (SASL_PLAINTEXT, PLAIN users admin, alice, bob, carol, dave, erin). The controllers' super
users are controller, broker and admin; the brokers' only admin and controller — so replication
between brokers (`broker` fetching from a leader) needs CLUSTER_ACTION from an ACL, as a Kafka
cluster whose brokers are not super users does.

Kafka's behaviour is the reference: AclAuthorizer's successor StandardAuthorizer(Data) (the
decision, `kafka.authorizer.logger`), KafkaApis / AuthHelper (which operation each API needs, and
its error), AclCommand (the tool's options and output).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import confluent_kafka as ck
import kafka as kp
import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, free_port, keel_bin, retire
from keel_cluster import Cluster
from sasl_config import plain_jaas
from builds import java_build
from test_kafka_tools import CACHE as TOOLS_CACHE, CONFIG_COMMAND, POM as TOOLS_POM, KafkaTools, Run, build_tools

WAIT_S = 60
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
JAVA_CHECK = Path(__file__).resolve().parents[2] / "tests" / "java" / "KeelAclCheck.java"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CLIENT_USERS = {u: f"{u}-secret" for u in ("admin", "alice", "bob", "carol", "dave", "erin")}
# Revocation rounds measured by the propagation test.
REVOCATION_ROUNDS = 5


# -- clients ------------------------------------------------------------------------------------


def rdkafka(user: str) -> dict[str, str]:
    return {**CONFLUENT_COMMON, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": CLIENT_USERS[user]}


def java_props(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": plain_jaas(user, CLIENT_USERS[user])}


def kafka_python(user: str) -> dict[str, str]:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_plain_username=user,
                sasl_plain_password=CLIENT_USERS[user])


def admin(bootstrap: str, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **rdkafka(user)})


def produce_one(bootstrap: str, user: str, topic: str, value: bytes = b"v", timeout_s: float = 15.0
                ) -> ck.KafkaError | None:
    """Produces one record as `user` with acks=all; the delivery error, or None when acknowledged."""
    result: list[ck.KafkaError | None] = []
    p = ck.Producer({"bootstrap.servers": bootstrap, **rdkafka(user), "acks": "all",
                     "message.timeout.ms": str(int(timeout_s * 1000))})
    p.produce(topic, value, partition=0, on_delivery=lambda err, _msg: result.append(err))
    p.flush(timeout_s + 5)
    assert result, f"no delivery report for {topic}"
    return result[0]


def create_topics(bootstrap: str, *names: str, partitions: int = 1, rf: int = 3) -> None:
    a = admin(bootstrap)
    for name, future in a.create_topics([NewTopic(n, partitions, rf) for n in names]).items():
        future.result(WAIT_S)


def java_acl_check(bootstrap: str, config: Path, *actions: str) -> dict[str, str]:
    """Runs KeelAclCheck (the Java client) with `config`; what it printed for each action."""
    classes, classpath = java_build(TOOLS_POM, TOOLS_CACHE, [JAVA_CHECK])
    p = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelAclCheck", bootstrap, str(config), *actions],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    seen = {}
    for line in p.stdout.splitlines():
        action, _, rest = line.partition(" ")
        if action in actions:
            seen[action] = rest.strip()
    assert set(seen) == set(actions), p.stdout
    return seen


class Acls:
    """kafka-acls as the admin user, and `keel acls`, against one cluster."""

    def __init__(self, tools: KafkaTools, bootstrap: str, workdir: Path) -> None:
        self.tools = tools
        self.bootstrap = bootstrap
        self.config = workdir / "admin.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in java_props("admin").items()))

    def kafka(self, *args: str) -> Run:
        r = self.tools.run(ACL_COMMAND, "--bootstrap-server", self.bootstrap, "--command-config", str(self.config),
                           *args)
        assert r.code == 0, r.report()
        return r

    def keel(self, *args: str) -> subprocess.CompletedProcess:
        p = subprocess.run([str(keel_bin()), "acls", *args, "--bootstrap-server", self.bootstrap.split(",")[0],
                            "--command-config", str(self.config)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"keel acls {' '.join(args)}: {p.stdout}{p.stderr}"
        return p


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return build_tools()


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("acls")
    c = Cluster(workdir, name="acls",
                controller={"authorizer.class.name": STANDARD_AUTHORIZER,
                            "super.users": "User:controller;User:broker;User:admin",
                            # Snapshots every few entries: the ACLs below end up in them.
                            "keel.metadata.snapshot.interval.entries": "16"},
                broker={"authorizer.class.name": STANDARD_AUTHORIZER,
                        "super.users": "User:admin;User:controller"})
    c.secure_internals(workdir / "pki")
    c.client_ports = []
    for node in c.nodes:
        port = free_port()
        c.client_ports.append(port)
        node.config["listeners"] += f",CLIENT://127.0.0.1:{port}"
        node.config["listener.security.protocol.map"] += ",CLIENT:SASL_PLAINTEXT"
        node.config["listener.name.client.plain.sasl.jaas.config"] = plain_jaas(users=CLIENT_USERS)
    c.brokers = c.processes  # conftest attaches these processes' log tails to a failing test's report
    c.client_bootstrap = ",".join(f"127.0.0.1:{p}" for p in c.client_ports)
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def acls(acl_cluster, tools, tmp_path_factory) -> Acls:
    return Acls(tools, acl_cluster.client_bootstrap, tmp_path_factory.mktemp("acl-tools"))


# -- the tests (in this order: the first grants the brokers CLUSTER_ACTION) ---------------------


def test_a_follower_without_cluster_action_is_refused_until_granted(acl_cluster, acls):
    """The brokers are not super users of each other: a follower's Fetch (as User:broker) is
    refused — CLUSTER_ACTION on the cluster, logged by the leader as Kafka's authorizer logs it —
    so an acks=all write to an RF 3 topic with min.insync.replicas=2 cannot be acknowledged. Once
    kafka-acls grants User:broker CLUSTER_ACTION, replication runs and the write succeeds."""
    c = acl_cluster
    topic = unique_topic("acl-repl")
    a = admin(c.client_bootstrap)
    a.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(WAIT_S)
    err = produce_one(c.client_bootstrap, "admin", topic, timeout_s=8)
    assert err is not None, "acknowledged without replication"
    denial = ("Principal = User:broker is Denied operation = CLUSTER_ACTION from host = 127.0.0.1 on resource = "
              "Cluster:LITERAL:kafka-cluster for request = Fetch")
    c.wait_for(lambda: any(denial in n.log_text() for n in c.nodes), what="the leader's denial line")

    acls.kafka("--add", "--allow-principal", "User:broker", "--operation", "ClusterAction", "--cluster")
    deadline = time.monotonic() + WAIT_S
    while (err := produce_one(c.client_bootstrap, "admin", topic, timeout_s=10)) is not None:
        assert time.monotonic() < deadline, f"still refused after the grant: {err}"


def test_kafka_acls_prefixed_and_deny_rules(acl_cluster, acls):
    """kafka-acls --add with a PREFIXED ALLOW and a LITERAL DENY; --list with MATCH shows both for a
    topic they apply to, in Kafka's format. The DENY wins over the ALLOW (librdkafka and
    kafka-python get TOPIC_AUTHORIZATION_FAILED on bob-secret, write bob-data); `keel acls list
    --json` shows the same bindings; `keel acls remove` of the DENY lets bob write bob-secret."""
    c = acl_cluster
    prefix = unique_topic("bob")
    data, secret = f"{prefix}-data", f"{prefix}-secret"
    create_topics(c.client_bootstrap, data, secret)
    acls.kafka("--add", "--allow-principal", "User:bob", "--operation", "Write", "--operation", "Describe",
               "--topic", f"{prefix}-", "--resource-pattern-type", "prefixed")
    acls.kafka("--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", secret)
    listed = acls.kafka("--list", "--topic", secret, "--resource-pattern-type", "match").out
    assert f"ResourcePattern(resourceType=TOPIC, name={prefix}-, patternType=PREFIXED)" in listed, listed
    assert f"ResourcePattern(resourceType=TOPIC, name={secret}, patternType=LITERAL)" in listed, listed
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)" in listed, listed
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)" in listed, listed

    assert produce_one(c.client_bootstrap, "bob", data) is None
    err = produce_one(c.client_bootstrap, "bob", secret)
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    producer = kp.KafkaProducer(bootstrap_servers=c.client_bootstrap, acks="all", **kafka_python("bob"))
    try:
        producer.send(data, b"kp").get(timeout=WAIT_S)
        with pytest.raises(kp.errors.TopicAuthorizationFailedError):
            producer.send(secret, b"kp").get(timeout=WAIT_S)
    finally:
        producer.close()

    shown = json.loads(acls.keel("list", "--principal", "User:bob", "--json").stdout)
    mine = {(b["resource_name"], b["pattern_type"], b["operation"], b["permission"]) for b in shown
            if b["resource_name"].startswith(prefix)}
    assert mine == {(f"{prefix}-", "PREFIXED", "WRITE", "ALLOW"), (f"{prefix}-", "PREFIXED", "DESCRIBE", "ALLOW"),
                    (secret, "LITERAL", "WRITE", "DENY")}, shown
    removed = acls.keel("remove", "--topic", secret, "--deny-principal", "User:bob", "--operation", "Write")
    assert "removed 1 ACLs" in removed.stdout, removed.stdout
    assert produce_one(c.client_bootstrap, "bob", secret) is None


def test_a_read_only_user_cannot_see_write_or_delete_other_topics(acl_cluster, acls, tools):
    """alice may READ one topic (and READ one group): librdkafka, kafka-python and the Java client
    (Kafka's kafka-topics and kafka-console-producer) list only that topic; writing it or another
    topic is TOPIC_AUTHORIZATION_FAILED; deleting another topic is TOPIC_AUTHORIZATION_FAILED;
    her group consumes the topic, any other group is GROUP_AUTHORIZATION_FAILED; DescribeAcls is
    CLUSTER_AUTHORIZATION_FAILED (kafka-acls --list says so; librdkafka drops that error and lists
    nothing). The admin (a super user) does all of it."""
    c = acl_cluster
    mine, theirs = unique_topic("ro-mine"), unique_topic("ro-theirs")
    group = unique_topic("ro-group")
    create_topics(c.client_bootstrap, mine, theirs)
    for t in (mine, theirs):
        assert produce_one(c.client_bootstrap, "admin", t, b"seed") is None
    acls.kafka("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", mine)
    acls.kafka("--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group)

    # librdkafka
    a = admin(c.client_bootstrap, "alice")
    topics = set(a.list_topics(timeout=WAIT_S).topics)
    assert mine in topics and theirs not in topics, topics
    for t in (mine, theirs):
        err = produce_one(c.client_bootstrap, "alice", t)
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, (t, err)
    with pytest.raises(ck.KafkaException) as deleted:
        a.delete_topics([theirs])[theirs].result(WAIT_S)
    assert deleted.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, deleted.value
    # librdkafka drops DescribeAcls' top-level error: alice sees no ACL, not the admin's.
    described = a.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(WAIT_S)
    assert described == [], described

    def consume(group_id: str) -> tuple[list[bytes], list[ck.KafkaError]]:
        consumer = ck.Consumer({"bootstrap.servers": c.client_bootstrap, **rdkafka("alice"), "group.id": group_id,
                                "auto.offset.reset": "earliest"})
        consumer.subscribe([mine])
        got, errors = [], []
        deadline = time.monotonic() + 30
        while not got and not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            (errors.append(msg.error()) if msg.error() else got.append(msg.value()))
        consumer.close()
        return got, errors

    assert consume(group) == ([b"seed"], [])
    _, errors = consume(unique_topic("not-hers"))
    assert errors and errors[0].code() == ck.KafkaError.GROUP_AUTHORIZATION_FAILED, errors

    # kafka-python
    kadmin = kp.KafkaAdminClient(bootstrap_servers=c.client_bootstrap, **kafka_python("alice"))
    try:
        listed = set(kadmin.list_topics())
        assert mine in listed and theirs not in listed, listed
        with pytest.raises(kp.errors.TopicAuthorizationFailedError):
            kadmin.delete_topics([theirs])
    finally:
        kadmin.close()
    # Not idempotent: the write itself is refused. Idempotent (kafka-python's default, as the Java
    # client's): without WRITE on any topic there is no producer id (KIP-679).
    producer = kp.KafkaProducer(bootstrap_servers=c.client_bootstrap, acks="all", max_block_ms=10_000,
                                enable_idempotence=False, **kafka_python("alice"))
    try:
        with pytest.raises(kp.errors.TopicAuthorizationFailedError):
            producer.send(mine, b"kp").get(timeout=WAIT_S)
    finally:
        producer.close()
    producer = kp.KafkaProducer(bootstrap_servers=c.client_bootstrap, acks="all", max_block_ms=10_000,
                                **kafka_python("alice"))
    try:
        with pytest.raises(kp.errors.KafkaError, match="ClusterAuthorizationFailed"):
            producer.send(mine, b"kp").get(timeout=WAIT_S)
    finally:
        producer.close()

    # The Java client: Admin and producers (KeelAclCheck), and Kafka's own kafka-topics and kafka-acls.
    config = acls.config.parent / "alice.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in java_props("alice").items()))
    seen = java_acl_check(c.client_bootstrap, config, "list", f"produce:{mine}", f"produce:{theirs}",
                          f"idempotent:{mine}", f"delete:{theirs}", "describeAcls")
    assert seen["list"] == f"OK {mine}", seen
    for action in (f"produce:{mine}", f"produce:{theirs}", f"delete:{theirs}"):
        assert seen[action].startswith("org.apache.kafka.common.errors.TopicAuthorizationException"), seen
    # Idempotent without WRITE on any topic: no producer id (KIP-679).
    assert seen[f"idempotent:{mine}"].startswith("org.apache.kafka.common.errors.ClusterAuthorizationException"), seen
    assert seen["describeAcls"].startswith("org.apache.kafka.common.errors.ClusterAuthorizationException"), seen
    r = tools.run(TOPIC_COMMAND, "--bootstrap-server", c.client_bootstrap, "--command-config", str(config), "--list")
    assert r.code == 0 and mine in r.out.split() and theirs not in r.out, r.report()
    r = tools.run(TOPIC_COMMAND, "--bootstrap-server", c.client_bootstrap, "--command-config", str(config),
                  "--delete", "--topic", theirs)
    # Kafka's tool: a topic alice may not describe does not exist for her.
    assert r.code != 0 and f"Topic '{theirs}' does not exist" in r.out + r.err, r.report()
    r = tools.run(ACL_COMMAND, "--bootstrap-server", c.client_bootstrap, "--command-config", str(config), "--list")
    assert "ClusterAuthorizationException" in r.out + r.err, r.report()

    # The super user is not limited.
    a = admin(c.client_bootstrap)
    a.delete_topics([theirs])[theirs].result(WAIT_S)


def test_transactional_id_acls(acl_cluster, acls):
    """A transactional producer needs WRITE (which implies DESCRIBE) on its transactional id:
    without it librdkafka's init_transactions fails with TRANSACTIONAL_ID_AUTHORIZATION_FAILED; with
    it init_transactions succeeds (the coordinator's partition may live on another broker, which
    the brokers' own principal reaches)."""
    c = acl_cluster
    txn = unique_topic("txn-carol")

    def producer() -> ck.Producer:
        return ck.Producer({"bootstrap.servers": c.client_bootstrap, **rdkafka("carol"), "transactional.id": txn,
                            "enable.idempotence": True})

    with pytest.raises(ck.KafkaException) as failed:
        producer().init_transactions(30)
    err = failed.value.args[0]
    assert err.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err
    acls.keel("add", "--allow-principal", "User:carol", "--operation", "Write", "--transactional-id", txn)
    p = producer()
    p.init_transactions(30)
    p.begin_transaction()
    p.abort_transaction(30)


def test_a_revoked_acl_stops_a_running_producer(acl_cluster, acls):
    """dave produces one acks=all record after another to a three-partition topic led by all
    three brokers; each round removes his WRITE (librdkafka's delete_acls, through one broker) and
    measures how long after the removal was answered his writes are refused on every partition
    (the last acknowledged write or the first refused one, whichever is later). The answer comes
    once the broker that took the request has applied the record; the other brokers apply it from
    their metadata fetch. Each round starts a new producer after granting WRITE again."""
    c = acl_cluster
    topic = unique_topic("revoke")
    create_topics(c.client_bootstrap, topic, partitions=3)
    a = admin(c.client_bootstrap)
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:dave", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    binding_filter = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:dave", None,
                                      AclOperation.WRITE, AclPermissionType.ALLOW)

    def round_trip() -> float:
        events: list[tuple[float, int, bool]] = []  # (monotonic time, partition, acknowledged)
        stop = threading.Event()

        def run() -> None:
            p = ck.Producer({"bootstrap.servers": c.client_bootstrap, **rdkafka("dave"), "acks": "all",
                             "message.timeout.ms": "5000", "linger.ms": "0"})
            i = 0
            while not stop.is_set():
                partition = i % 3
                i += 1
                try:
                    p.produce(topic, b"x", partition=partition,
                              on_delivery=lambda err, _m, part=partition: events.append(
                                  (time.monotonic(), part, err is None)))
                except ck.KafkaException:
                    # Refused locally: the last Metadata answer said the topic is not authorized.
                    events.append((time.monotonic(), partition, False))
                    time.sleep(0.01)
                    continue
                p.flush(10)

        a.create_acls([binding])[binding].result(WAIT_S)
        producer = threading.Thread(target=run, daemon=True)
        producer.start()
        try:
            c.wait_for(lambda: {part for _, part, ok in list(events)[-6:] if ok} == {0, 1, 2}, timeout_s=WAIT_S,
                       what="dave writes every partition")
            sent = time.monotonic()
            a.delete_acls([binding_filter])[binding_filter].result(WAIT_S)
            answered = time.monotonic()
            answer_times.append(answered - sent)

            def refused_everywhere() -> bool:
                after = [(part, ok) for t, part, ok in list(events) if t > answered]
                return {part for part, ok in after[-3:] if not ok} == {0, 1, 2}

            c.wait_for(refused_everywhere, timeout_s=WAIT_S, what="dave refused on every partition")
            after = [(t, ok) for t, _, ok in list(events) if t > answered]
            last_allowed = max([t for t, ok in after if ok], default=answered)
            first_refused = min(t for t, ok in after if not ok)
            return max(last_allowed, first_refused) - answered
        finally:
            stop.set()
            producer.join(30)

    answer_times: list[float] = []
    delays = [round_trip() for _ in range(REVOCATION_ROUNDS)]
    print(f"\nrevocation: DeleteAcls answered in {statistics.median(answer_times) * 1000:.0f} ms (median), "
          f"{max(answer_times) * 1000:.0f} ms (max); writes refused on every partition "
          f"{statistics.median(delays) * 1000:.0f} ms (median), {max(delays) * 1000:.0f} ms (max) after the answer, "
          f"over {len(delays)} rounds")
    assert max(delays) < 5.0, delays


def test_acls_and_quotas_survive_controller_failover_and_snapshots(acl_cluster, acls, tools):
    """Thirty ACLs and a client quota (several snapshots' worth of entries at
    keel.metadata.snapshot.interval.entries=16) are created; the active controller is killed with
    -9 and comes back; a controller asked directly (kafka-acls --bootstrap-controller as
    User:controller) lists every ACL, removing them through a broker returns every one — the
    active controller's image had them — and a broker whose disk was wiped learns the quota
    again from the controllers (`keel quotas list` through it alone)."""
    c = acl_cluster
    prefix = unique_topic("snap")
    names = [f"{prefix}-{i}" for i in range(30)]
    a = admin(c.client_bootstrap)
    bindings = [AclBinding(ResourceType.TOPIC, n, ResourcePatternType.LITERAL, "User:erin", "*",
                           AclOperation.READ, AclPermissionType.ALLOW) for n in names]
    for b, f in a.create_acls(bindings).items():
        f.result(WAIT_S)
    quota = tools.run(CONFIG_COMMAND, "--bootstrap-server", c.client_bootstrap, "--command-config", str(acls.config),
                      "--alter", "--entity-type", "users", "--entity-name", "erin", "--add-config",
                      "producer_byte_rate=4096000")
    assert quota.code == 0, quota.report()
    index = c.wait_for_active_controller()
    c.controllers[index].kill9()
    c.wait_for_active_controller(other_than=index)
    c.controllers[index].restart()

    ctl = c.controllers[index]
    config = acls.config.parent / "controller.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": plain_jaas("controller", "controller-secret"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": ctl.config["ssl.truststore.location"]}.items()))

    def listed() -> str:
        r = tools.run(ACL_COMMAND, "--bootstrap-controller", ctl.address, "--command-config", str(config),
                      "--list", "--principal", "User:erin")
        assert r.code == 0, r.report()
        return r.out

    c.wait_for(lambda: all(f"name={n}," in listed() for n in names), timeout_s=WAIT_S,
               what="the restarted controller lists every ACL")
    deleted = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:erin", None,
                                              AclOperation.ANY, AclPermissionType.ANY)])
    removed = list(deleted.values())[0].result(WAIT_S)
    assert sorted(b.name for b in removed) == sorted(names), removed

    c.kill9(0)
    c.wipe(0)
    c.restart(0)

    def described() -> list:
        # `keel quotas` asks the broker it is given, not the least loaded one as Kafka's Admin.
        p = subprocess.run([str(keel_bin()), "quotas", "list", "--user", "erin", "--json", "--bootstrap-server",
                            f"127.0.0.1:{c.client_ports[0]}", "--command-config", str(acls.config)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)

    c.wait_for(lambda: described() == [{"entity": {"user": "erin"}, "quotas": {"producer_byte_rate": 4096000.0}}],
               timeout_s=WAIT_S, what="the wiped broker describes erin's quota")


def test_allow_everyone_if_no_acl_found_both_ways(tmp_path_factory):
    """One node: with allow.everyone.if.no.acl.found=true a user with no ACL may write a topic no
    ACL names, and not one an ACL names (for someone else); with the default (false) the same
    user may write neither."""
    workdir = tmp_path_factory.mktemp("acl-open")
    b = Broker(workdir / "node", name="acl-open")
    sasl_port = free_port()
    b.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},CLIENT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.client.plain.sasl.jaas.config": plain_jaas(users=CLIENT_USERS),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
    })
    b.overrides["allow.everyone.if.no.acl.found"] = "true"
    bootstrap = f"127.0.0.1:{sasl_port}"
    try:
        b.start()
        open_topic, closed_topic = unique_topic("open"), unique_topic("closed")
        create_topics(bootstrap, open_topic, closed_topic, rf=1)
        a = admin(bootstrap)
        grant = AclBinding(ResourceType.TOPIC, closed_topic, ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.WRITE, AclPermissionType.ALLOW)
        a.create_acls([grant])[grant].result(WAIT_S)
        assert produce_one(bootstrap, "carol", open_topic) is None
        err = produce_one(bootstrap, "carol", closed_topic)
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, err
        assert produce_one(bootstrap, "alice", closed_topic) is None

        b.terminate()
        del b.overrides["allow.everyone.if.no.acl.found"]
        b.start()
        for t in (open_topic, closed_topic):
            err = produce_one(bootstrap, "carol", t)
            assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, (t, err)
        assert produce_one(bootstrap, "alice", closed_topic) is None
    finally:
        retire(b)
