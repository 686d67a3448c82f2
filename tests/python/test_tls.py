"""TLS on Keel's listeners and between its nodes (issue 21), with real clients and processes.

Certificates come from tls_certs.py (a throwaway CA per test). Clients: confluent-kafka
(librdkafka), kafka-python and Apache Kafka's Java client (tests/java/KeelSecureClientCheck.java,
its settings from a properties file as Kafka's tools take them). Kafka's own SSL settings and
behaviour are the reference: org.apache.kafka.common.config.SslConfigs,
BrokerSecurityConfigs.SSL_CLIENT_AUTH_CONFIG, SslFactory / DefaultSslEngineFactory (PEM stores,
reconfiguration), SslPrincipalMapper, and the listener-per-client rule of
KafkaApis.handleTopicMetadataRequest (brokers are returned at the listener the request came in on).
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import kafka as kp
import pytest

from clients import CONFLUENT_COMMON, unique_topic
from keel_broker import Broker, BrokerError, free_port, keel_bin, retire
from test_java_client import JAVA_DIR, build_check
from tls_certs import Pki

WAIT_S = 60


def ssl_broker_config(pki: Pki, plaintext_port: int, ssl_port: int, **extra: str) -> dict[str, str]:
    """A single node serving PLAINTEXT first (the harness's own port) and SSL second."""
    keystore = pki.issue("broker", "broker-1")
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{plaintext_port},SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_file),
        **extra,
    }


def start_ssl_broker(tmp_path_factory, name: str, **extra: str) -> tuple[Broker, Pki, str]:
    """A started single node with an SSL listener; returns it, its CA and the SSL bootstrap."""
    workdir = tmp_path_factory.mktemp(name)
    pki = Pki(workdir / "pki")
    b = Broker(workdir / "node", name=name)
    ssl_port = free_port()
    b.config.update(ssl_broker_config(pki, b.port, ssl_port, **extra))
    try:
        b.start()
    except BaseException:
        b.stop()
        raise
    return b, pki, f"127.0.0.1:{ssl_port}"


def confluent_ssl(pki: Pki, client_pem: Path | None = None) -> dict[str, str]:
    conf = {**CONFLUENT_COMMON, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_file),
            "ssl.endpoint.identification.algorithm": "https"}
    if client_pem is not None:
        conf["ssl.certificate.location"] = str(client_pem.with_suffix(".crt"))
        conf["ssl.key.location"] = str(client_pem.with_suffix(".key"))
    return conf


def confluent_round_trip(bootstrap: str, conf: dict[str, str], topic: str, n: int = 50) -> None:
    """Creates `topic` through the admin API, produces n records, reads them back."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(WAIT_S)
    producer = ck.Producer({"bootstrap.servers": bootstrap, **conf, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=f"v{i}".encode())
    assert producer.flush(WAIT_S) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, **conf, "group.id": unique_topic("tls-group"),
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"v{i}" for i in range(n)], got[:5]


def java_check(bootstrap: str, props: dict[str, str], topic: str, workdir: Path, rf: int = 1,
               records: int = 30) -> subprocess.CompletedProcess:
    """Runs KeelSecureClientCheck with `props` as its client properties file."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelSecureClientCheck.java", classes / "KeelSecureClientCheck.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    props_file = workdir / f"{topic}.properties"
    props_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelSecureClientCheck", bootstrap,
                           str(props_file), topic, str(records), str(rf)],
                          capture_output=True, text=True, timeout=240)


def java_ssl_props(pki: Pki, client_pem: Path | None = None) -> dict[str, str]:
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
             "ssl.truststore.location": str(pki.ca_file)}
    if client_pem is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(client_pem)})
    return props


def metric(broker: Broker, name: str, **labels: str) -> float:
    """Reads one series from the broker's /metrics (0 if absent)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{broker.config['metrics.port']}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_ssl_listener_serves_librdkafka_kafka_python_and_java(tmp_path_factory):
    """One node with a PLAINTEXT and an SSL listener: each client bootstraps on the SSL port,
    checks the broker's certificate (host name included) and gets the SSL endpoints back in
    Metadata — were it given the PLAINTEXT port, its TLS handshake there would fail."""
    b, pki, ssl_bootstrap = start_ssl_broker(tmp_path_factory, "tls-clients")
    try:
        confluent_round_trip(ssl_bootstrap, confluent_ssl(pki), unique_topic("tls-rdkafka"))

        topic = unique_topic("tls-kafka-python")
        producer = kp.KafkaProducer(bootstrap_servers=ssl_bootstrap, security_protocol="SSL",
                                    ssl_cafile=str(pki.ca_file), ssl_check_hostname=True, acks="all")
        for i in range(20):
            producer.send(topic, value=f"kp{i}".encode())
        producer.flush(WAIT_S)
        producer.close()
        consumer = kp.KafkaConsumer(topic, bootstrap_servers=ssl_bootstrap, security_protocol="SSL",
                                    ssl_cafile=str(pki.ca_file), auto_offset_reset="earliest",
                                    consumer_timeout_ms=15000)
        assert [m.value for m in consumer] == [f"kp{i}".encode() for i in range(20)]
        consumer.close()

        run = java_check(ssl_bootstrap, java_ssl_props(pki), unique_topic("tls-java"), b.workdir)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]

        # Metadata over the SSL listener names the SSL port, over PLAINTEXT the PLAINTEXT port.
        md = ck.admin.AdminClient({"bootstrap.servers": ssl_bootstrap, **confluent_ssl(pki)}).list_topics(timeout=WAIT_S)
        assert [f"{x.host}:{x.port}" for x in md.brokers.values()] == [ssl_bootstrap]
        md = ck.admin.AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=WAIT_S)
        assert [f"{x.host}:{x.port}" for x in md.brokers.values()] == [b.bootstrap]
    finally:
        retire(b)


def test_mutual_tls_requires_a_trusted_client_certificate(tmp_path_factory):
    """ssl.client.auth=required: a client with a certificate the truststore's CA signed is served
    (librdkafka and Java); without one, or with one from another CA, the handshake fails and the
    failure is counted per listener (keel_failed_authentication_total{mechanism="TLS"})."""
    metrics_port = free_port()
    b, pki, ssl_bootstrap = start_ssl_broker(
        tmp_path_factory, "tls-mutual", **{"ssl.client.auth": "required", "metrics.port": str(metrics_port),
                                           "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/,DEFAULT"})
    try:
        alice = pki.issue("alice", "alice", hosts=())
        confluent_round_trip(ssl_bootstrap, confluent_ssl(pki, alice), unique_topic("mtls-rdkafka"))
        run = java_check(ssl_bootstrap, java_ssl_props(pki, alice), unique_topic("mtls-java"), b.workdir)
        assert "SECURE-CLIENT-OK" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]

        before = metric(b, "keel_failed_authentication_total", listener="SSL", mechanism="TLS")
        run = java_check(ssl_bootstrap, {**java_ssl_props(pki), "request.timeout.ms": "5000"},
                         unique_topic("mtls-java-nocert"), b.workdir)
        assert run.returncode == 1 and "SSL" in run.stdout, run.stdout[-3000:]
        stranger_ca = Pki(b.workdir / "stranger", name="stranger")
        mallory = stranger_ca.issue("mallory", "mallory", hosts=())
        producer = ck.Producer({"bootstrap.servers": ssl_bootstrap, **confluent_ssl(pki, mallory),
                                "message.timeout.ms": "5000"})
        reports = []
        producer.produce(unique_topic("mtls-stranger"), b"x", on_delivery=lambda err, msg: reports.append(err))
        producer.flush(15)
        assert len(reports) == 1 and reports[0] is not None, \
            f"a client whose certificate no trusted CA signed was served: {reports}"
        after = metric(b, "keel_failed_authentication_total", listener="SSL", mechanism="TLS")
        assert after >= before + 2, (before, after)
        assert "TLS handshake failed" in b.log_text()
    finally:
        retire(b)


def test_plaintext_and_tls_mixed_up_are_refused_with_a_reason(tmp_path_factory):
    """A client speaking plaintext to the SSL port, and one speaking TLS to the PLAINTEXT port,
    are disconnected, and the broker's log says which mistake it was; the broker serves on."""
    b, pki, ssl_bootstrap = start_ssl_broker(tmp_path_factory, "tls-mixup")
    try:
        # Plaintext ApiVersions v0 to the TLS port: no Kafka answer, the connection is closed.
        host, port = ssl_bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
            s.sendall(struct.pack(">i", len(body)) + body)
            s.settimeout(10)
            try:
                data = s.recv(4096)
            except ConnectionError:
                data = b""
            # A Kafka answer would start with its size (a zero first byte); a TLS alert starts 0x15.
            assert not data or data[0] == 0x15, data
        # TLS to the PLAINTEXT port: the handshake gets no answer and the connection closes.
        context = ssl.create_default_context(cafile=str(pki.ca_file))
        host, port = b.bootstrap.split(":")
        with socket.create_connection((host, int(port)), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                with context.wrap_socket(raw, server_hostname="localhost"):
                    pass
        # Keel's own CLI without TLS on the TLS port says so, instead of a frame-size error.
        refused = subprocess.run([str(keel_bin()), "topics", "list", "--bootstrap-server", ssl_bootstrap,
                                  "--api-timeout-ms", "5000"], capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0, refused
        assert "the peer answered with TLS" in refused.stderr, refused.stderr
        assert "exceeds" not in refused.stderr, refused.stderr
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ("speaks TLS" in b.log_text() and "TLS handshake failed" in b.log_text()):
            time.sleep(0.1)
        log = b.log_text()
        assert "speaks TLS to listener PLAINTEXT" in log, log[-3000:]
        assert "TLS handshake failed (a client without TLS?" in log, log[-3000:]
        confluent_round_trip(ssl_bootstrap, confluent_ssl(pki), unique_topic("tls-after-mixup"))
    finally:
        retire(b)


def test_certificates_rotate_on_sighup(tmp_path_factory):
    """The keystore file is replaced by one from a new CA and the broker gets SIGHUP: clients
    trusting only the new CA are then served, without a restart (the old connections' certificates
    stay theirs). A broken keystore on the next SIGHUP keeps the working one."""
    import signal as sig
    b, pki, ssl_bootstrap = start_ssl_broker(tmp_path_factory, "tls-rotate")
    try:
        confluent_round_trip(ssl_bootstrap, confluent_ssl(pki), unique_topic("rotate-before"))
        new_ca = Pki(b.workdir / "new-ca", name="new")
        new_keystore = new_ca.issue("broker-new", "broker-1")
        Path(b.config["ssl.keystore.location"]).write_bytes(new_keystore.read_bytes())
        b.proc.send_signal(sig.SIGHUP)
        deadline = time.monotonic() + 10
        while "TLS keystores and truststores reloaded" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "TLS keystores and truststores reloaded" in b.log_text()
        confluent_round_trip(ssl_bootstrap, confluent_ssl(new_ca), unique_topic("rotate-after"))

        Path(b.config["ssl.keystore.location"]).write_text("not a keystore")
        b.proc.send_signal(sig.SIGHUP)
        deadline = time.monotonic() + 10
        while "TLS reload failed" not in b.log_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "TLS reload failed" in b.log_text()
        confluent_round_trip(ssl_bootstrap, confluent_ssl(new_ca), unique_topic("rotate-kept"))
    finally:
        retire(b)


@pytest.mark.parametrize("case", ["missing-keystore", "jks", "wrong-key-password", "unknown-suite"])
def test_bad_tls_settings_stop_the_start_naming_the_key(tmp_path, case):
    """A TLS listener whose settings cannot work does not start half-secured: the broker exits
    with the key and the reason, before it serves anything."""
    pki = Pki(tmp_path / "pki")
    b = Broker(tmp_path / "node", name=f"tls-bad-{case}")
    ssl_port = free_port()
    b.config.update(ssl_broker_config(pki, b.port, ssl_port))
    encrypted = pki.issue("encrypted", "broker-1", password="right")
    expected = {
        "missing-keystore": ({"ssl.keystore.location": str(tmp_path / "absent.pem")}, "absent.pem"),
        "jks": ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        "wrong-key-password": ({"ssl.keystore.location": str(encrypted), "ssl.key.password": "wrong"},
                               "ssl.key.password"),
        "unknown-suite": ({"ssl.cipher.suites": "TLS_RSA_WITH_RC4_128_MD5"}, "ssl.cipher.suites"),
    }
    settings, needle = expected[case]
    b.config.update(settings)
    try:
        with pytest.raises(BrokerError) as refused:
            b.start(timeout_s=20)
        assert needle in str(refused.value), str(refused.value)[-2000:]
        assert b.last_returncode not in (None, 0)
    finally:
        b.stop()


def test_encrypted_pkcs8_key_with_ssl_key_password(tmp_path_factory):
    """A keystore whose key is an encrypted PKCS #8 key (openssl's and Java's default when a key
    has a password) is read with ssl.key.password, as Kafka reads PEM keystores."""
    workdir = tmp_path_factory.mktemp("tls-encrypted")
    pki = Pki(workdir / "pki")
    b = Broker(workdir / "node", name="tls-encrypted")
    ssl_port = free_port()
    b.config.update(ssl_broker_config(pki, b.port, ssl_port))
    b.config.update({"ssl.keystore.location": str(pki.issue("enc", "broker-1", password="s3cret", rsa_key=True)),
                     "ssl.key.password": "s3cret"})
    try:
        b.start()
        confluent_round_trip(f"127.0.0.1:{ssl_port}", confluent_ssl(pki), unique_topic("tls-encrypted"))
    finally:
        b.stop()


def test_cluster_whose_inter_broker_and_controller_traffic_is_mutual_tls(cluster, tmp_path):
    """Three controllers and three brokers: the controllers' Raft and every broker's
    registration, heartbeats and AlterPartition go over the CONTROLLER listener, replication over
    the INTERNAL listener — both TLS with client certificates required, host names checked. Clients
    use PLAINTEXT or TLS (each gets its own listener's endpoints). Records written with acks=all
    are on every replica; a broker killed with -9 and restarted catches up over TLS."""
    from clients import create_topic, wait_for_leaders, confluent_admin
    pki = Pki(tmp_path / "pki")
    c = cluster("tls-cluster", start=False)
    mtls = {"ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca_file), "ssl.client.auth": "required"}
    for ctl in c.controllers:
        ctl.config.update({**mtls, "ssl.keystore.location": str(pki.issue(f"controller-{ctl.node_id}", f"controller-{ctl.node_id}")),
                           "listener.security.protocol.map": "CONTROLLER:SSL"})
    internal_ports = {}
    for node in c.nodes:
        internal_ports[node.node_id] = free_port()
        node.config.update({
            **mtls,
            "ssl.keystore.location": str(pki.issue(f"broker-{node.node_id}", f"broker-{node.node_id}")),
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{internal_ports[node.node_id]}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "INTERNAL",
        })
    c.start()
    topic = unique_topic("tls-cluster")
    create_topic(c.bootstrap, topic, 1, {"min.insync.replicas": "2"})
    admin = confluent_admin(c.bootstrap)
    wait_for_leaders(admin, topic, 1)
    c.wait_for_full_isr(topic, [0])
    producer = ck.Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(WAIT_S) == 0
    # TLS clients on INTERNAL get INTERNAL endpoints (with a client certificate: it is required).
    client = pki.issue("client", "client", hosts=())
    internal = ",".join(f"127.0.0.1:{p}" for p in internal_ports.values())
    md = ck.admin.AdminClient({"bootstrap.servers": internal, **confluent_ssl(pki, client)}).list_topics(timeout=WAIT_S)
    assert sorted(b.port for b in md.brokers.values()) == sorted(internal_ports.values())
    leader = c.partition_state(topic)[0].leader
    victim = next(i for i in range(3) if i != leader)
    c.kill9(victim)
    for i in range(200, 300):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(WAIT_S) == 0
    c.restart(victim)
    c.wait_for_full_isr(topic, [0])
    consumer = ck.Consumer({"bootstrap.servers": internal, **confluent_ssl(pki, client),
                            "group.id": unique_topic("tls-cluster-g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 300 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    assert got == [f"r{i}" for i in range(300)], (len(got), got[:3])
