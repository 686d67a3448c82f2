"""SASL on Keel's listeners and between its nodes (issue 21), with real clients and processes.

Kafka's behaviour is the reference: SaslServerAuthenticator (the state machine, its messages and
error codes), PlainSaslServer / PlainServerCallbackHandler (PLAIN's users from the JAAS line),
KafkaChannel and KIP-368 (session lifetime, re-authentication, expiry), JaasContext (the
`listener.name.<l>.<mechanism>.sasl.jaas.config` form). Clients: confluent-kafka (librdkafka),
kafka-python, Apache Kafka's Java client (tests/java/KeelSecureClientCheck.java).
"""

from __future__ import annotations

import socket
import struct
import time

import confluent_kafka as ck
import kafka as kp
import pytest

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, BrokerError, free_port, retire
from test_tls import confluent_round_trip, java_check, metric
from sasl_config import PLAIN_MODULE, plain_jaas
from tls_certs import Pki

WAIT_S = 60
USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def start_sasl_broker(tmp_path_factory, name: str, **extra: str) -> tuple[Broker, Pki, str, str]:
    """A single node with PLAINTEXT (the harness's), SASL_PLAINTEXT and SASL_SSL listeners whose
    PLAIN users are USERS; returns it, its CA, and the two SASL bootstraps."""
    workdir = tmp_path_factory.mktemp(name)
    pki = Pki(workdir / "pki")
    b = Broker(workdir / "node", name=name)
    sasl_port, sasl_ssl_port = free_port(), free_port()
    b.config.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                     f"SASL_SSL://127.0.0.1:{sasl_ssl_port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(users=USERS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(users=USERS),
        "ssl.keystore.location": str(pki.issue("broker", "broker-1")),
        "ssl.truststore.location": str(pki.ca_file),
        **extra,
    })
    try:
        b.start()
    except BaseException:
        b.stop()
        raise
    return b, pki, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{sasl_ssl_port}"


def confluent_sasl(user: str, password: str, pki: Pki | None = None, mechanism: str = "PLAIN") -> dict[str, str]:
    conf = {**CONFLUENT_COMMON, "security.protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    if pki is not None:
        conf["ssl.ca.location"] = str(pki.ca_file)
    return conf


SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def java_sasl(user: str, password: str, pki: Pki | None = None, mechanism: str = "PLAIN") -> dict[str, str]:
    module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
    props = {"security.protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
             "sasl.jaas.config": f'{module} required username="{user}" password="{password}";'}
    if pki is not None:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)})
    return props


def test_plain_over_sasl_plaintext_and_sasl_ssl_with_three_clients(tmp_path_factory):
    """PLAIN users from the listener's JAAS line: librdkafka, kafka-python and the Java client
    authenticate on SASL_PLAINTEXT and SASL_SSL, produce and read back; Metadata answers each at
    its own listener."""
    b, pki, sasl_bootstrap, sasl_ssl_bootstrap = start_sasl_broker(tmp_path_factory, "sasl-plain")
    try:
        confluent_round_trip(sasl_bootstrap, confluent_sasl("alice", "alice-secret"), unique_topic("sasl-rd"))
        confluent_round_trip(sasl_ssl_bootstrap, confluent_sasl("alice", "alice-secret", pki),
                             unique_topic("sasl-ssl-rd"))
        md = ck.admin.AdminClient({"bootstrap.servers": sasl_ssl_bootstrap,
                                   **confluent_sasl("admin", "admin-secret", pki)}).list_topics(timeout=WAIT_S)
        assert [f"{x.host}:{x.port}" for x in md.brokers.values()] == [sasl_ssl_bootstrap]

        topic = unique_topic("sasl-kafka-python")
        common = dict(security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_plain_username="alice",
                      sasl_plain_password="alice-secret", ssl_cafile=str(pki.ca_file))
        producer = kp.KafkaProducer(bootstrap_servers=sasl_ssl_bootstrap, acks="all", **common)
        for i in range(20):
            producer.send(topic, value=f"kp{i}".encode())
        producer.flush(WAIT_S)
        producer.close()
        consumer = kp.KafkaConsumer(topic, bootstrap_servers=sasl_ssl_bootstrap, auto_offset_reset="earliest",
                                    consumer_timeout_ms=15000, **common)
        assert [m.value for m in consumer] == [f"kp{i}".encode() for i in range(20)]
        consumer.close()

        for bootstrap, props in ((sasl_bootstrap, java_sasl("alice", "alice-secret")),
                                 (sasl_ssl_bootstrap, java_sasl("alice", "alice-secret", pki))):
            run = java_check(bootstrap, props, unique_topic("sasl-java"), b.workdir)
            assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    finally:
        retire(b)


def test_keel_commands_take_a_command_config(tmp_path_factory):
    """`keel topics` / `keel groups` / `keel status` with `--command-config FILE` (Kafka's client
    settings) work against a SASL_SSL listener; without it, or with a wrong password, they fail
    in one line that says why."""
    import subprocess
    from keel_broker import keel_bin
    b, pki, _, sasl_ssl_bootstrap = start_sasl_broker(tmp_path_factory, "sasl-cli")
    try:
        props = b.workdir / "client.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in java_sasl("admin", "admin-secret", pki).items()))
        topic = unique_topic("sasl-cli")

        def keel(*args, config=props):
            extra = ["--command-config", str(config)] if config else []
            return subprocess.run([str(keel_bin()), *args, "--bootstrap-server", sasl_ssl_bootstrap, *extra,
                                   "--api-timeout-ms", "5000"], capture_output=True, text=True, timeout=60)

        created = keel("topics", "create", topic, "--partitions", "2")
        assert created.returncode == 0, created.stderr
        listed = keel("topics", "list")
        assert listed.returncode == 0 and topic in listed.stdout, listed.stdout + listed.stderr
        assert keel("status").returncode == 0
        assert keel("groups", "list").returncode == 0
        plain = keel("topics", "list", config=None)
        assert plain.returncode != 0 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
        wrong = b.workdir / "wrong.properties"
        wrong.write_text("".join(f"{k}={v}\n" for k, v in java_sasl("admin", "nope", pki).items()))
        refused = keel("topics", "list", config=wrong)
        assert refused.returncode != 0 and "Invalid username or password" in refused.stderr, refused.stderr
    finally:
        retire(b)


def test_kafkas_own_tools_over_sasl_ssl(tmp_path_factory):
    """Kafka 4.1's kafka-topics (--command-config), kafka-console-producer (--producer.config) and
    kafka-console-consumer (--consumer.config) against the SASL_SSL listener, with the same
    client properties file."""
    import subprocess
    from test_kafka_tools import JVM_FLAGS, TOPIC_COMMAND, build_tools
    tools = build_tools()
    b, pki, _, sasl_ssl_bootstrap = start_sasl_broker(tmp_path_factory, "sasl-tools")
    try:
        props = b.workdir / "client.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in java_sasl("alice", "alice-secret", pki).items()))
        topic = unique_topic("sasl-tools")
        tools.ok(TOPIC_COMMAND, "--bootstrap-server", sasl_ssl_bootstrap, "--command-config", str(props),
                 "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
        listed = tools.ok(TOPIC_COMMAND, "--bootstrap-server", sasl_ssl_bootstrap, "--command-config", str(props),
                          "--list")
        assert topic in listed.out.split(), listed.report()
        lines = "".join(f"line-{i}\n" for i in range(10))
        produced = subprocess.run(["java", *JVM_FLAGS, "-cp", tools.classpath, "org.apache.kafka.tools.ConsoleProducer",
                                   "--bootstrap-server", sasl_ssl_bootstrap, "--topic", topic,
                                   "--producer.config", str(props)],
                                  input=lines, capture_output=True, text=True, timeout=120)
        assert produced.returncode == 0, produced.stderr[-3000:]
        consumed = tools.ok("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server",
                            sasl_ssl_bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "10",
                            "--consumer.config", str(props), "--timeout-ms", "30000")
        assert consumed.out.split() == [f"line-{i}" for i in range(10)], consumed.report()
        wrong = b.workdir / "wrong.properties"
        wrong.write_text("".join(f"{k}={v}\n" for k, v in java_sasl("alice", "nope", pki).items()))
        refused = tools.run(TOPIC_COMMAND, "--bootstrap-server", sasl_ssl_bootstrap, "--command-config", str(wrong),
                            "--list")
        assert refused.code != 0 and "Authentication failed" in refused.out + refused.err, refused.report()
    finally:
        retire(b)


def test_failed_authentications_get_kafkas_errors_and_are_counted(tmp_path_factory):
    """A wrong password and an unknown user get Kafka's SASL_AUTHENTICATION_FAILED message (the
    same for both: it does not say whether the user exists) in the Java client and librdkafka; a
    mechanism the listener does not enable gets UNSUPPORTED_SASL_MECHANISM naming the enabled
    ones; each is counted in keel_failed_authentication_total and logged without the password."""
    metrics_port = free_port()
    b, pki, sasl_bootstrap, _ = start_sasl_broker(tmp_path_factory, "sasl-fail", **{"metrics.port": str(metrics_port)})
    try:
        before = metric(b, "keel_failed_authentication_total", listener="SASL_PLAINTEXT", mechanism="PLAIN")
        for user, password in (("alice", "not-her-password"), ("mallory", "whatever")):
            run = java_check(sasl_bootstrap, {**java_sasl(user, password), "request.timeout.ms": "5000"},
                             unique_topic("sasl-bad"), b.workdir)
            assert run.returncode == 1, run.stdout[-2000:]
            assert "SaslAuthenticationException" in run.stdout, run.stdout[-2000:]
            assert "Authentication failed: Invalid username or password" in run.stdout, run.stdout[-2000:]

        errors = []
        producer = ck.Producer({"bootstrap.servers": sasl_bootstrap, **confluent_sasl("alice", "nope"),
                                "error_cb": lambda e: errors.append(e), "message.timeout.ms": "5000"})
        producer.produce(unique_topic("sasl-bad-rd"), b"x")
        producer.flush(10)
        assert any(e.code() == ck.KafkaError._AUTHENTICATION and "Invalid username or password" in e.str()
                   for e in errors), errors

        run = java_check(sasl_bootstrap, {**java_sasl("alice", "alice-secret", mechanism="SCRAM-SHA-256"),
                                          "request.timeout.ms": "5000"}, unique_topic("sasl-mech"), b.workdir)
        assert run.returncode == 1 and "UnsupportedSaslMechanismException" in run.stdout, run.stdout[-2000:]
        errors.clear()
        producer = ck.Producer({"bootstrap.servers": sasl_bootstrap,
                                **confluent_sasl("alice", "alice-secret", mechanism="SCRAM-SHA-256"),
                                "error_cb": lambda e: errors.append(e), "message.timeout.ms": "5000"})
        producer.produce(unique_topic("sasl-mech-rd"), b"x")
        producer.flush(10)
        assert any("PLAIN" in e.str() and "SCRAM-SHA-256" in e.str() for e in errors), errors

        after = metric(b, "keel_failed_authentication_total", listener="SASL_PLAINTEXT", mechanism="PLAIN")
        assert after >= before + 3, (before, after)
        assert metric(b, "keel_failed_authentication_total", listener="SASL_PLAINTEXT",
                      mechanism="SCRAM-SHA-256") >= 1
        log = b.log_text()
        assert "authentication failed" in log
        assert "not-her-password" not in log and "nope" not in log
    finally:
        retire(b)


def test_requests_before_authentication_are_not_served(tmp_path_factory):
    """On a SASL listener only ApiVersions and the SASL requests are answered before the client
    authenticates: a Metadata request first closes the connection unanswered (Kafka: "Unexpected
    Kafka request of type METADATA during SASL handshake"); so does a frame over
    sasl.server.max.receive.size, before it is read."""
    b, _, sasl_bootstrap, _ = start_sasl_broker(tmp_path_factory, "sasl-early")
    try:
        host, port = sasl_bootstrap.split(":")
        # Metadata v0 asking for every topic.
        body = struct.pack(">hhih", 3, 0, 1, 4) + b"test" + struct.pack(">i", 0)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            s.settimeout(10)
            assert s.recv(4096) == b"", "a request before authentication was answered"
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(struct.pack(">i", 10_000_000))
            s.settimeout(10)
            try:
                assert s.recv(4096) == b""
            except ConnectionResetError:
                pass
        log = b.log_text()
        assert "Unexpected Kafka request of type Metadata during SASL handshake." in log, log[-3000:]
        confluent_round_trip(sasl_bootstrap, confluent_sasl("alice", "alice-secret"), unique_topic("sasl-after"))
    finally:
        retire(b)


def test_sessions_are_renewed_in_band_and_expire_for_clients_that_do_not(tmp_path_factory):
    """connections.max.reauth.ms=3000 (KIP-368): the Java client and librdkafka re-authenticate
    on their connections and keep producing for 10 s without an error; the broker tells the
    session lifetime in SaslAuthenticate."""
    b, _, sasl_bootstrap, _ = start_sasl_broker(
        tmp_path_factory, "sasl-reauth", **{"listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "3000"})
    try:
        topic = unique_topic("sasl-reauth")
        errors, delivered = [], []
        producer = ck.Producer({"bootstrap.servers": sasl_bootstrap, **confluent_sasl("alice", "alice-secret"),
                                "acks": "all", "error_cb": lambda e: errors.append(e)})
        deadline = time.monotonic() + 10
        n = 0
        while time.monotonic() < deadline:
            producer.produce(topic, value=f"r{n}".encode(),
                             on_delivery=lambda err, msg: delivered.append(err))
            n += 1
            producer.poll(0.1)
        assert producer.flush(WAIT_S) == 0
        assert all(err is None for err in delivered) and len(delivered) == n, (n, [e for e in delivered if e])
        assert not [e for e in errors if e.code() == ck.KafkaError._AUTHENTICATION], errors
        run = java_check(sasl_bootstrap, java_sasl("alice", "alice-secret"), unique_topic("sasl-reauth-java"),
                         b.workdir, records=30)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:]
    finally:
        retire(b)


def test_a_session_that_is_not_renewed_ends(tmp_path_factory):
    """KIP-368 from the other side: a client that authenticated with SaslAuthenticate v0 (it
    cannot re-authenticate) is told no lifetime but still loses its connection at the first
    request after connections.max.reauth.ms; one with v1 is told the lifetime, and its request
    after it without re-authenticating closes the connection too (KafkaChannel's expiry)."""
    import kafka_wire as kw
    b, _, sasl_bootstrap, _ = start_sasl_broker(
        tmp_path_factory, "sasl-expiry", **{"listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "2000"})
    try:
        for version in (0, 1):
            with kw.RawConnection.to(sasl_bootstrap) as conn:
                r = conn.call(17, 1, kw.Writer().string("PLAIN").getvalue())  # SaslHandshake v1
                assert r.int16() == 0
                token = b"\0alice\0alice-secret"
                r = conn.call(36, version, kw.Writer().bytes_(token).getvalue())  # SaslAuthenticate
                assert r.int16() == 0, "authentication failed"
                r.string()
                r.bytes_()
                if version >= 1:
                    assert r.int64() == 2000  # session_lifetime_ms
                kw.metadata_v7(conn, [])  # served within the session
                time.sleep(2.5)
                conn.send(kw.request(3, 7, 99, kw.Writer().int32(0).boolean(False).getvalue()))
                assert conn.wait_closed() == b"", "a request after the session ended was answered"
        assert "expired" in b.log_text()
    finally:
        retire(b)


def test_cluster_whose_inter_broker_and_controller_traffic_is_sasl_ssl(cluster, tmp_path):
    """Three controllers and three brokers; controllers speak SASL_SSL among themselves and to
    brokers, brokers replicate over a SASL_SSL INTERNAL listener, every node authenticating with
    PLAIN as its own user (sasl.mechanism.controller.protocol / inter.broker.protocol). acks=all
    records survive kill -9 of a follower; a broker whose inter-broker password is wrong cannot
    join and its log says the controller refused its credentials."""
    from clients import create_topic, wait_for_leaders, confluent_admin
    pki = Pki(tmp_path / "pki")
    users = {"controller": "c-secret", "broker": "b-secret"}
    c = cluster("sasl-cluster", start=False)
    common = {"ssl.truststore.location": str(pki.ca_file), "sasl.enabled.mechanisms": "PLAIN",
              "sasl.mechanism.controller.protocol": "PLAIN"}
    for ctl in c.controllers:
        ctl.config.update({**common, "ssl.keystore.location": str(pki.issue(f"c{ctl.node_id}", f"controller-{ctl.node_id}")),
                           "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
                           "listener.name.controller.plain.sasl.jaas.config": plain_jaas("controller", "c-secret", users)})
    internal = {}
    for node in c.nodes:
        internal[node.node_id] = free_port()
        node.config.update({
            **common,
            "ssl.keystore.location": str(pki.issue(f"b{node.node_id}", f"broker-{node.node_id}")),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{internal[node.node_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": plain_jaas("broker", "b-secret", users),
            "listener.name.controller.plain.sasl.jaas.config": plain_jaas("broker", "b-secret"),
        })
    c.start()
    topic = unique_topic("sasl-cluster")
    create_topic(c.bootstrap, topic, 1, {"min.insync.replicas": "2"})
    wait_for_leaders(confluent_admin(c.bootstrap), topic, 1)
    c.wait_for_full_isr(topic, [0])
    producer = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(WAIT_S) == 0
    leader = c.partition_state(topic)[0].leader
    victim = next(i for i in range(3) if i != leader)
    c.kill9(victim)
    for i in range(100, 200):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(WAIT_S) == 0
    c.restart(victim)
    c.wait_for_full_isr(topic, [0])
    got = []
    consumer = ck.Consumer({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in internal.values()),
                            **confluent_sasl("broker", "b-secret", pki), "group.id": unique_topic("g"),
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + WAIT_S
    while len(got) < 200 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"r{i}" for i in range(200)], (len(got), got[:3])

    # Wrong credentials towards the controllers: the broker is refused and says so.
    c.terminate(victim)
    node = c.broker(victim)
    node.overrides["listener.name.controller.plain.sasl.jaas.config"] = plain_jaas("broker", "wrong")
    with pytest.raises(BrokerError):
        node.start(timeout_s=15)
    assert "Invalid username or password" in node.log_text(), node.log_tail()
