"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (issue 21, RFC 5802 / RFC 7677) with credentials in the
metadata log (KIP-554), with real clients, Kafka's own kafka-configs and real processes.

Kafka's behaviour is the reference: ScramSaslServer / ScramSaslClient / ScramMessages /
ScramFormatter (the exchange), SaslServerAuthenticator (the one message a failed exchange gets:
"Authentication failed during authentication due to invalid credentials with SASL mechanism
..."), ScramControlManager and ScramImage (AlterUserScramCredentials / DescribeUserScramCredentials
and their errors), ConfigCommand (kafka-configs --entity-type users), StorageTool / ScramParser
(`kafka-storage format --add-scram`, here `keel format --add-scram`). Clients: confluent-kafka
(librdkafka), kafka-python, Apache Kafka's Java client (tests/java/KeelSecureClientCheck.java)
and Admin (inside ConfigCommand).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import kafka as kp
import pytest

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, BrokerError, free_port, keel_bin, retire
from test_go_client import build_producer
from test_kafka_tools import CONFIG_COMMAND, KafkaTools, build_tools
from test_tls import confluent_round_trip, java_check, metric
from tls_certs import Pki

WAIT_S = 60
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
ADMIN = ("admin", "admin-secret")


def kafka_message(mechanism: str, during: str = "authentication") -> str:
    """Kafka's message for a failed SCRAM exchange: it does not say whether the user exists."""
    return f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"


def scram_jaas(user: str, password: str) -> str:
    return f'{SCRAM_MODULE} required username="{user}" password="{password}";'


def java_scram(user: str, password: str, mechanism: str, pki: Pki | None = None) -> dict[str, str]:
    props = {"security.protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
             "sasl.jaas.config": scram_jaas(user, password)}
    if pki is not None:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)})
    return props


def confluent_scram(user: str, password: str, mechanism: str, pki: Pki | None = None) -> dict[str, str]:
    conf = {**CONFLUENT_COMMON, "security.protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    if pki is not None:
        conf["ssl.ca.location"] = str(pki.ca_file)
    return conf


def confluent_auth_errors(bootstrap: str, conf: dict[str, str]) -> list[ck.KafkaError]:
    """Errors librdkafka reports while trying to produce one record with `conf` (10 s)."""
    errors: list[ck.KafkaError] = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, **conf, "error_cb": errors.append,
                            "message.timeout.ms": "5000"})
    producer.produce(unique_topic("scram-refused"), b"x")
    producer.flush(10)
    return errors


class ScramNode:
    """One node (its controller in-process) with PLAINTEXT, SASL_PLAINTEXT and SASL_SSL listeners
    enabling both SCRAM mechanisms; formatted with `keel format --add-scram` for the admin user."""

    def __init__(self, workdir: Path, name: str, **extra: str) -> None:
        self.pki = Pki(workdir / "pki")
        self.broker = Broker(workdir / "node", name=name)
        sasl_port, sasl_ssl_port = free_port(), free_port()
        self.metrics_port = free_port()
        self.broker.config.update({
            "listeners": f"PLAINTEXT://127.0.0.1:{self.broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                         f"SASL_SSL://127.0.0.1:{sasl_ssl_port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "ssl.keystore.location": str(self.pki.issue("broker", "broker-1")),
            "ssl.truststore.location": str(self.pki.ca_file),
            "metrics.port": str(self.metrics_port),
            **extra,
        })
        self.broker.format_args = ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN[0]},password={ADMIN[1]}]"]
        self.sasl = f"127.0.0.1:{sasl_port}"
        self.sasl_ssl = f"127.0.0.1:{sasl_ssl_port}"
        self.admin_config = workdir / "admin.properties"
        self.admin_config.write_text("".join(
            f"{k}={v}\n" for k, v in java_scram(*ADMIN, "SCRAM-SHA-512", self.pki).items()))

    def start(self) -> "ScramNode":
        try:
            self.broker.start()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def configs(self, tools: KafkaTools, *args: str):
        """kafka-configs as the admin user over SASL_SSL (credentials from --add-scram)."""
        return tools.run(CONFIG_COMMAND, "--bootstrap-server", self.sasl_ssl,
                         "--command-config", str(self.admin_config), *args)


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return build_tools()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = ScramNode(tmp_path_factory.mktemp("scram"), "scram",
                  **{"listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "3000"}).start()
    yield n
    retire(n.broker)


def test_kafka_configs_sets_passwords_and_three_clients_authenticate(node, tools):
    """The admin user exists from `keel format --add-scram`: kafka-configs authenticates as it and
    sets alice's passwords for both mechanisms in one call (Kafka's own documented example, which
    Kafka's KRaft controller refuses as a duplicate; Keel refuses only the same mechanism twice);
    --describe shows mechanisms and iterations; librdkafka, kafka-python and the Java client then
    authenticate as alice with each mechanism, on SASL_PLAINTEXT and SASL_SSL, produce and read
    back."""
    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                     "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]")
    assert r.code == 0 and "Completed updating config for user alice." in r.out, r.report()
    r = node.configs(tools, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert r.code == 0, r.report()
    assert ("SCRAM credential configs for user-principal 'alice' are "
            "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096") in r.out, r.report()
    r = node.configs(tools, "--describe", "--entity-type", "users")
    assert "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096" in r.out, r.report()
    assert "user-principal 'alice'" in r.out, r.report()

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        confluent_round_trip(node.sasl, confluent_scram("alice", "alice-secret", mechanism),
                             unique_topic("scram-rd"))
        confluent_round_trip(node.sasl_ssl, confluent_scram("alice", "alice-secret", mechanism, node.pki),
                             unique_topic("scram-rd-ssl"))

        topic = unique_topic("scram-kafka-python")
        common = dict(security_protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_plain_username="alice",
                      sasl_plain_password="alice-secret", ssl_cafile=str(node.pki.ca_file))
        producer = kp.KafkaProducer(bootstrap_servers=node.sasl_ssl, acks="all", **common)
        for i in range(20):
            producer.send(topic, value=f"kp{i}".encode())
        producer.flush(WAIT_S)
        producer.close()
        consumer = kp.KafkaConsumer(topic, bootstrap_servers=node.sasl_ssl, auto_offset_reset="earliest",
                                    consumer_timeout_ms=15000, **common)
        assert [m.value for m in consumer] == [f"kp{i}".encode() for i in range(20)]
        consumer.close()

        # The Java client (one JVM per mechanism: SHA-256 on SASL_PLAINTEXT, SHA-512 on SASL_SSL).
        bootstrap, props = ((node.sasl, java_scram("alice", "alice-secret", mechanism))
                            if mechanism == "SCRAM-SHA-256" else
                            (node.sasl_ssl, java_scram("alice", "alice-secret", mechanism, node.pki)))
        run = java_check(bootstrap, props, unique_topic("scram-java"), node.broker.workdir)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    assert "alice-secret" not in node.broker.log_text()


def test_wrong_unknown_and_deleted_credentials_fail_with_kafkas_message(node, tools):
    """A wrong password, an unknown user, and a password whose credential kafka-configs deleted all
    fail with Kafka's one message (it does not tell whether the user exists) in the Java client
    and librdkafka, are counted per mechanism and logged without the password; the mechanism left
    still works. kafka-configs' refusals come back with Kafka's errors: describing or deleting a
    credential that does not exist (RESOURCE_NOT_FOUND), too many iterations
    (UNACCEPTABLE_CREDENTIAL)."""
    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
                     "SCRAM-SHA-256=[password=bob-secret],SCRAM-SHA-512=[password=bob-secret]")
    assert r.code == 0, r.report()
    before = metric(node.broker, "keel_failed_authentication_total", listener="SASL_SSL", mechanism="SCRAM-SHA-512")
    message = kafka_message("SCRAM-SHA-512")
    for user, password in (("bob", "not-his-password"), ("mallory", "bob-secret")):
        run = java_check(node.sasl_ssl, {**java_scram(user, password, "SCRAM-SHA-512", node.pki),
                                         "request.timeout.ms": "5000"}, unique_topic("scram-bad"), node.broker.workdir)
        assert run.returncode == 1, run.stdout[-2000:]
        assert "SaslAuthenticationException" in run.stdout and message in run.stdout, run.stdout[-2000:]
        errors = confluent_auth_errors(node.sasl_ssl, confluent_scram(user, password, "SCRAM-SHA-512", node.pki))
        assert any(e.code() == ck.KafkaError._AUTHENTICATION and message in e.str() for e in errors), errors

    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "bob",
                     "--delete-config", "SCRAM-SHA-512")
    assert r.code == 0 and "Completed updating config for user bob." in r.out, r.report()
    r = node.configs(tools, "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096" in r.out, r.report()
    run = java_check(node.sasl_ssl, {**java_scram("bob", "bob-secret", "SCRAM-SHA-512", node.pki),
                                     "request.timeout.ms": "5000"}, unique_topic("scram-deleted"), node.broker.workdir)
    assert run.returncode == 1 and message in run.stdout, run.stdout[-2000:]
    errors = confluent_auth_errors(node.sasl_ssl, confluent_scram("bob", "bob-secret", "SCRAM-SHA-512", node.pki))
    assert any(message in e.str() for e in errors), errors
    confluent_round_trip(node.sasl, confluent_scram("bob", "bob-secret", "SCRAM-SHA-256"), unique_topic("scram-kept"))

    after = metric(node.broker, "keel_failed_authentication_total", listener="SASL_SSL", mechanism="SCRAM-SHA-512")
    assert after >= before + 6, (before, after)
    log = node.broker.log_text()
    assert "authentication failed" in log
    assert "not-his-password" not in log and "bob-secret" not in log

    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "bob",
                     "--delete-config", "SCRAM-SHA-512")
    assert r.code != 0, r.report()
    assert "Attempt to delete a user credential that does not exist" in r.out + r.err, r.report()
    # A user without credentials: RESOURCE_NOT_FOUND, which Kafka's Admin turns into no line.
    r = node.configs(tools, "--describe", "--entity-type", "users", "--entity-name", "nobody")
    assert r.code == 0 and "user-principal 'nobody'" not in r.out, r.report()
    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "carl", "--add-config",
                     "SCRAM-SHA-256=[iterations=20000,password=carl-secret]")
    assert r.code != 0 and "Too many iterations" in r.out + r.err, r.report()
    r = node.configs(tools, "--describe", "--entity-type", "users", "--entity-name", "carl")
    assert r.code == 0 and "user-principal 'carl'" not in r.out, r.report()


def test_credential_requests_refused_over_the_wire_with_kafkas_errors(node):
    """AlterUserScramCredentials through a broker (forwarded to the controller) and
    DescribeUserScramCredentials over the raw wire, for what kafka-configs never sends (Kafka's
    ScramControlManager / ScramImage errors, one answer per user): an empty name and too few
    iterations (UNACCEPTABLE_CREDENTIAL), an unknown mechanism (UNSUPPORTED_SASL_MECHANISM), the
    same user and mechanism twice (DUPLICATE_RESOURCE), a salted password that is not one hash
    long (Keel's bound); a user described twice (DUPLICATE_RESOURCE) or without credentials
    (RESOURCE_NOT_FOUND). DescribeClientQuotas (which kafka-configs asks first) matches nothing
    and refuses a malformed filter with INVALID_REQUEST."""
    from kafka_messages import (AlterUserScramCredentialsRequest, DescribeClientQuotasRequest,
                                DescribeUserScramCredentialsRequest, MessageConnection)
    good = bytes(32)

    def upsert(name, mechanism=1, iterations=4096, salted=good):
        return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": b"salt",
                "salted_password": salted}

    with MessageConnection(node.broker.address) as conn:
        r = conn.call(AlterUserScramCredentialsRequest, 0, deletions=[], upsertions=[
            upsert(""), upsert("u1", mechanism=0), upsert("u2", iterations=1), upsert("u3"), upsert("u3"),
            upsert("u4", mechanism=2, salted=good), upsert("u5", mechanism=2, salted=bytes(64))])
        answers = {x.user: (x.error_code, x.error_message) for x in r.results}
        assert answers == {
            "": (93, "Username must not be empty"),
            "u1": (33, "Unknown SCRAM mechanism"),
            "u2": (93, "Too few iterations"),
            "u3": (92, "A user credential cannot be altered twice in the same request"),
            "u4": (93, "Salted password must be 64 bytes for SCRAM-SHA-512"),
            "u5": (0, None),
        }, answers
        r = conn.call(DescribeUserScramCredentialsRequest, 0,
                      users=[{"name": "u5"}, {"name": "u3"}, {"name": "u5"}])
        assert r.error_code == 0
        answers = {x.user: (x.error_code, x.error_message) for x in r.results}
        assert answers == {
            "u5": (92, "Cannot describe SCRAM credentials for the same user twice in a single request: u5"),
            "u3": (91, "Attempt to describe a user credential that does not exist: u3"),
        }, answers
        r = conn.call(DescribeClientQuotasRequest, 1, components=[{"entity_type": "user", "match_type": 0,
                                                                     "match": "alice"}], strict=False)
        assert (r.error_code, list(r.entries)) == (0, [])
        r = conn.call(DescribeClientQuotasRequest, 1, components=[{"entity_type": "user", "match_type": 9,
                                                                     "match": None}], strict=False)
        assert (r.error_code, r.error_message) == (42, "Unknown match type 9")


def test_scram_sessions_are_renewed_in_band_and_credentials_survive_a_restart(node, tools):
    """connections.max.reauth.ms=3000 on SCRAM-SHA-256 (KIP-368): librdkafka re-authenticates
    with the whole SCRAM exchange on its connections and produces for 8 s without an error. After
    a SIGTERM and restart the credentials are still there (they are in the metadata log, not in
    memory): the admin of --add-scram and a user kafka-configs added authenticate."""
    r = node.configs(tools, "--alter", "--entity-type", "users", "--entity-name", "dora", "--add-config",
                     "SCRAM-SHA-256=[password=dora-secret]")
    assert r.code == 0, r.report()
    topic = unique_topic("scram-reauth")
    errors, delivered = [], []
    producer = ck.Producer({"bootstrap.servers": node.sasl, **confluent_scram("dora", "dora-secret", "SCRAM-SHA-256"),
                            "acks": "all", "error_cb": errors.append})
    deadline = time.monotonic() + 8
    n = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=f"r{n}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        n += 1
        producer.poll(0.1)
    assert producer.flush(WAIT_S) == 0
    assert all(err is None for err in delivered) and len(delivered) == n, [e for e in delivered if e]
    assert not [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION], errors

    node.broker.restart()
    confluent_round_trip(node.sasl, confluent_scram("dora", "dora-secret", "SCRAM-SHA-256"), unique_topic("scram-after"))
    confluent_round_trip(node.sasl_ssl, confluent_scram(*ADMIN, "SCRAM-SHA-512", node.pki), unique_topic("scram-adm"))


def test_keel_format_refuses_bad_add_scram_arguments(tmp_path):
    """`keel format --add-scram` takes Kafka's syntax and refuses what kafka-storage refuses (an
    unknown mechanism, too few iterations, no name, no password) before writing anything, never
    echoing the password; a broker-only node has no controller to bootstrap and says so."""
    from keel_broker import keel_bin
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={tmp_path / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:{free_port()}\n")
    for bad, message in (
        ("SCRAM-SHA-1=[name=a,password=s3cret-1]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
        ("SCRAM-SHA-256=[name=a,iterations=100,password=s3cret-1]", "must be >= 4096"),
        ("SCRAM-SHA-256=[password=s3cret-1]", "You must supply 'name' to add-scram"),
        ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
    ):
        out = subprocess.run([str(keel_bin()), "format", "-c", str(config), "--add-scram", bad],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and message in out.stderr, (bad, out.stdout, out.stderr)
        assert "s3cret-1" not in out.stderr
        assert not (tmp_path / "data").exists(), "nothing is written before the arguments are checked"
    broker_only = tmp_path / "broker.properties"
    broker_only.write_text(f"node.id=1\nprocess.roles=broker\nlog.dirs={tmp_path / 'b'}\n"
                           f"listeners=PLAINTEXT://127.0.0.1:{free_port()}\n"
                           f"controller.quorum.voters=100@127.0.0.1:{free_port()}\ncontroller.listener.names=CONTROLLER\n")
    out = subprocess.run([str(keel_bin()), "format", "-c", str(broker_only), "--add-scram",
                          "SCRAM-SHA-256=[name=a,password=b]"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--add-scram ignored" in out.stderr, (out.stdout, out.stderr)
    assert not (tmp_path / "b" / "bootstrap.json").exists()


def test_cluster_whose_nodes_authenticate_with_scram_bootstrapped_at_format(cluster, tmp_path, tools):
    """Three controllers and three brokers formatted with `keel format --add-scram` for their own
    users; controllers talk Raft over SASL_SSL with SCRAM-SHA-512 among themselves (from the
    bootstrap credentials before the first record commits — Kafka's controllers cannot,
    KAFKA-15513), brokers reach them and each other (an INTERNAL SASL_SSL listener) with
    SCRAM-SHA-512. acks=all records survive kill -9 of a follower broker and of the active
    controller; a user kafka-configs adds during the run, and the bootstrap users, survive a
    metadata snapshot (every 4 entries): a wiped broker loads the snapshot and authenticates
    them, and the three controllers restarted at once load their images from their snapshots and
    still authenticate each other and the brokers (a user added then works). A broker with a wrong SCRAM password towards the controllers cannot join and its log
    has Kafka's message."""
    from clients import confluent_admin, create_topic, wait_for_leaders
    pki = Pki(tmp_path / "pki")
    users = {"controller": "c-secret", "broker": "b-secret", "admin": "admin-secret"}
    add_scram = [arg for user, password in users.items()
                 for arg in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")]
    c = cluster("scram-cluster", start=False, controller={"keel.metadata.snapshot.interval.entries": "4"})
    common = {"ssl.truststore.location": str(pki.ca_file), "sasl.enabled.mechanisms": "SCRAM-SHA-512",
              "sasl.mechanism.controller.protocol": "SCRAM-SHA-512"}
    for ctl in c.controllers:
        ctl.format_args = add_scram
        ctl.config.update({**common,
                           "ssl.keystore.location": str(pki.issue(f"c{ctl.node_id}", f"controller-{ctl.node_id}")),
                           "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
                           "listener.name.controller.scram-sha-512.sasl.jaas.config": scram_jaas("controller", "c-secret")})
    internal = {}
    for node in c.nodes:
        internal[node.node_id] = free_port()
        node.config.update({
            **common,
            "ssl.keystore.location": str(pki.issue(f"b{node.node_id}", f"broker-{node.node_id}")),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{internal[node.node_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": scram_jaas("broker", "b-secret"),
            "listener.name.controller.scram-sha-512.sasl.jaas.config": scram_jaas("broker", "b-secret"),
        })
    c.start()
    assert any("wrote the bootstrap metadata of a new cluster" in ctl.log_text() for ctl in c.controllers)
    topic = unique_topic("scram-cluster")
    create_topic(c.bootstrap, topic, 1, {"min.insync.replicas": "2"})
    wait_for_leaders(confluent_admin(c.bootstrap), topic, 1)
    c.wait_for_full_isr(topic, [0])
    producer = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})

    def produce(first: int, count: int) -> None:
        for i in range(first, first + count):
            producer.produce(topic, value=f"r{i}".encode())
        assert producer.flush(WAIT_S) == 0

    produce(0, 100)
    leader = c.partition_state(topic)[0].leader
    victim = next(i for i in range(3) if i != leader)
    c.kill9(victim)
    produce(100, 100)
    c.restart(victim)
    c.wait_for_full_isr(topic, [0])

    active = c.wait_for_active_controller()
    c.controllers[active].kill9()
    c.wait_for_active_controller(other_than=active)
    produce(200, 100)
    c.controllers[active].restart()

    # A user added during the run, and enough metadata entries for snapshots to be taken.
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text("".join(f"{k}={v}\n" for k, v in
                                    java_scram("admin", "admin-secret", "SCRAM-SHA-512", pki).items()))
    r = tools.run(CONFIG_COMMAND, "--bootstrap-server", ",".join(f"127.0.0.1:{p}" for p in internal.values()),
                  "--command-config", str(admin_config), "--alter", "--entity-type", "users",
                  "--entity-name", "carol", "--add-config", "SCRAM-SHA-512=[password=carol-secret]")
    assert r.code == 0, r.report()
    for _ in range(4):
        create_topic(c.bootstrap, unique_topic("scram-snap"), 1, {})
    c.wait_for(lambda: all(any(ctl.data_dir.rglob("*.checkpoint")) for ctl in c.controllers), 30,
               "a metadata snapshot on every controller")
    c.terminate(2)
    c.wipe(2)
    c.restart(2)
    assert "loaded a metadata snapshot" in c.broker(2).log_text(), c.broker(2).log_tail()
    c.wait_for_full_isr(topic, [0])
    for user, password in (("carol", "carol-secret"), ("admin", "admin-secret")):
        md = ck.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{internal[2]}",
                                   **confluent_scram(user, password, "SCRAM-SHA-512", pki)}).list_topics(timeout=WAIT_S)
        assert topic in md.topics, (user, sorted(md.topics))

    # Every controller restarted at once: each loads its image from its snapshot (the records
    # before it are gone from its Raft log's replay), so the Raft traffic among them and the
    # brokers' connections to them authenticate with credentials that came from a snapshot; a
    # user added then is forwarded, committed and usable.
    for ctl in c.controllers:
        ctl.terminate()
    for ctl in c.controllers:
        ctl.spawn()
    for ctl in c.controllers:
        ctl.wait_ready()
        opened = re.search(r"controller opened its Raft log and applied metadata .*applied_end_offset=(\d+)",
                           ctl.log_text())
        assert opened and int(opened.group(1)) > 0, ctl.log_tail()
    c.wait_for_active_controller()
    r = c.wait_for(lambda: (lambda r: r if r.code == 0 else None)(tools.run(
        CONFIG_COMMAND, "--bootstrap-server", ",".join(f"127.0.0.1:{p}" for p in internal.values()),
        "--command-config", str(admin_config), "--alter", "--entity-type", "users", "--entity-name", "dave",
        "--add-config", "SCRAM-SHA-512=[password=dave-secret]")), 60, "kafka-configs adding dave")
    md = ck.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{internal[0]}",
                               **confluent_scram("dave", "dave-secret", "SCRAM-SHA-512", pki)}).list_topics(timeout=WAIT_S)
    assert topic in md.topics, sorted(md.topics)

    got = []
    consumer = ck.Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in internal.values()),
                            **confluent_scram("broker", "b-secret", "SCRAM-SHA-512", pki),
                            "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while len(got) < 300 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"r{i}" for i in range(300)], (len(got), got[:3])

    # Wrong credentials towards the controllers: the broker is refused and says so.
    c.terminate(victim)
    node = c.broker(victim)
    node.overrides["listener.name.controller.scram-sha-512.sasl.jaas.config"] = scram_jaas("broker", "not-b-secret-9")
    with pytest.raises(BrokerError):
        node.start(timeout_s=15)
    assert kafka_message("SCRAM-SHA-512") in node.log_text(), node.log_tail()
    assert "not-b-secret-9" not in node.log_text()


def printed_settings(log: str, header: str) -> dict[str, str]:
    """The `key=value` lines `keel dev --secure` prints (indented) under the line holding
    `header`, up to its next `keel:` line; log lines of the nodes in between are skipped."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if header in line)
    settings: dict[str, str] = {}
    for line in lines[start + 1:]:
        if line.startswith("keel:"):
            break
        if line.startswith("    ") and "=" in line:
            key, _, value = line.strip().partition("=")
            settings[key] = value
    return settings


def test_keel_dev_secure_settings_work_as_printed(tmp_path_factory, tools):
    """`keel dev --secure`: every listener SASL_SSL with SCRAM-SHA-512 and a throwaway CA, the
    admin credential bootstrapped at format time (as `--add-scram` does) so the nodes authenticate
    to each other from their first start. The Kafka client properties and librdkafka settings it
    prints are used as they are: librdkafka and the Java client produce and consume, Kafka's
    kafka-configs adds a user (the cluster's controllers take credentials); a plaintext client gets
    nothing; the first run logs no warning. A restart reuses the files; a data directory a plain `keel dev` made is refused by
    `--secure` with the reason."""
    from confluent_kafka.admin import AdminClient, NewTopic
    b = Broker(tmp_path_factory.mktemp("dev-secure"), name="dev-secure", mode="dev")
    b.dev_args = ["--secure"]
    try:
        b.start()
        log = b.log_text()
        java_props = printed_settings(log, "Kafka client properties")
        rdkafka = printed_settings(log, "librdkafka (confluent-kafka")
        assert java_props["security.protocol"] == "SASL_SSL" and java_props["sasl.mechanism"] == "SCRAM-SHA-512"
        assert rdkafka["sasl.mechanisms"] == "SCRAM-SHA-512" and rdkafka["sasl.username"] == "admin"
        secure_dir = b.data_dir / "secure"
        assert (secure_dir / "client.properties").read_text().splitlines() == \
            [f"{k}={v}" for k, v in java_props.items()]
        assert (secure_dir / "librdkafka.properties").read_text().splitlines() == \
            [f"{k}={v}" for k, v in rdkafka.items()]

        def rdkafka_round_trip(topic: str, n: int = 30) -> None:
            admin = AdminClient({"bootstrap.servers": b.bootstrap, **rdkafka})
            admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(WAIT_S)
            producer = ck.Producer({"bootstrap.servers": b.bootstrap, **rdkafka, "acks": "all"})
            for i in range(n):
                producer.produce(topic, value=f"d{i}".encode(), partition=i % 3)
            assert producer.flush(WAIT_S) == 0
            consumer = ck.Consumer({"bootstrap.servers": b.bootstrap, **rdkafka, "group.id": unique_topic("g"),
                                    "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])
            got = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < n and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value().decode())
            consumer.close()
            assert sorted(got) == sorted(f"d{i}" for i in range(n)), got

        rdkafka_round_trip(unique_topic("dev-secure-rd"))
        run = java_check(b.bootstrap, java_props, unique_topic("dev-secure-java"), b.workdir, rf=3)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
        # franz-go with the same CA and SCRAM-SHA-512 user (its idempotent acks=all producer).
        franz_topic = unique_topic("dev-secure-franz")
        franz_admin = AdminClient({"bootstrap.servers": b.bootstrap, **rdkafka})
        franz_admin.create_topics([NewTopic(franz_topic, 3, 3)])[franz_topic].result(WAIT_S)
        franz = subprocess.run(
            [str(build_producer()), b.bootstrap, franz_topic, "600", "3", "3000"], capture_output=True, text=True,
            timeout=120, env={**os.environ, "KEEL_TLS_CA_FILE": rdkafka["ssl.ca.location"],
                              "KEEL_SASL_MECHANISM": "SCRAM-SHA-512", "KEEL_SASL_USERNAME": rdkafka["sasl.username"],
                              "KEEL_SASL_PASSWORD": rdkafka["sasl.password"]})
        assert "DONE sent=600 acked=600 failed=0" in franz.stdout, franz.stdout[-2000:] + franz.stderr[-2000:]
        command_config = b.workdir / "printed-client.properties"
        command_config.write_text("".join(f"{k}={v}\n" for k, v in java_props.items()))
        r = tools.run(CONFIG_COMMAND, "--bootstrap-server", b.bootstrap.split(",")[0], "--command-config",
                      str(command_config), "--alter", "--entity-type", "users", "--entity-name", "dev-user",
                      "--add-config", "SCRAM-SHA-512=[password=dev-user-secret]")
        assert r.code == 0, r.report()
        plain = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": "3000"})
        with pytest.raises(ck.KafkaException):
            plain.list_topics(timeout=4)

        assert b.terminate() == 0, b.log_tail()
        noisy = [line for line in b.log_text().splitlines() if " WARN " in line or " ERROR " in line]
        assert not noisy, "a fresh secure dev cluster logged warnings:\n" + "\n".join(noisy[:20])
        b.start()
        assert printed_settings(b.log_text(), "librdkafka (confluent-kafka") == rdkafka, "the same password again"
        rdkafka_round_trip(unique_topic("dev-secure-again"), n=9)
        again = {**rdkafka, "sasl.username": "dev-user", "sasl.password": "dev-user-secret"}
        md = AdminClient({"bootstrap.servers": b.bootstrap, **again}).list_topics(timeout=WAIT_S)
        assert len(md.brokers) == 3, md.brokers

        # ACLs are on with admin the super user: dev-user may write a topic once `keel acls add`
        # (with the printed client properties) grants it.
        acl_topic = unique_topic("dev-secure-acl")
        acl_admin = AdminClient({"bootstrap.servers": b.bootstrap, **rdkafka})
        acl_admin.create_topics([NewTopic(acl_topic, 1, 3)])[acl_topic].result(WAIT_S)

        def dev_user_writes() -> ck.KafkaError | None:
            result = []
            p = ck.Producer({"bootstrap.servers": b.bootstrap, **again, "message.timeout.ms": "10000"})
            p.produce(acl_topic, b"x", on_delivery=lambda err, _m: result.append(err))
            p.flush(20)
            return result[0] if result else ck.KafkaError(ck.KafkaError._MSG_TIMED_OUT)

        refused = dev_user_writes()
        assert refused is not None and refused.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
        granted = subprocess.run(
            [str(keel_bin()), "acls", "add", "--bootstrap-server", b.bootstrap.split(",")[0], "--command-config",
             str(command_config), "--allow-principal", "User:dev-user", "--operation", "Write", "--topic", acl_topic],
            capture_output=True, text=True, timeout=60)
        assert granted.returncode == 0 and "added 1 ACLs" in granted.stdout, granted.stdout + granted.stderr
        assert dev_user_writes() is None
    finally:
        b.stop()

    plain_dev = Broker(tmp_path_factory.mktemp("dev-plain"), name="dev-plain", mode="dev")
    try:
        plain_dev.start()
        assert plain_dev.terminate() == 0
        plain_dev.dev_args = ["--secure"]
        with pytest.raises(BrokerError):
            plain_dev.start(timeout_s=30)
        assert "was formatted without the admin credential" in plain_dev.log_text(), plain_dev.log_tail()
    finally:
        plain_dev.stop()
