#!/usr/bin/env python3
"""Apache Kafka and Keel side by side on this machine: same topology, same settings, same load.

Run through `bench/compare` (it builds Keel and prepares the Python environment); see
docs/benchmarks.md. For each system in turn it formats and starts a three-node KRaft cluster on
127.0.0.1 (combined broker+controller nodes, identical server.properties), runs the workloads,
records every sample, stops the cluster and deletes its data. Then it writes
bench/results/<date>.md (one table, medians with spread, the Keel/Kafka ratio of every row and
the machine's own ceilings), the raw samples as <date>.json and a chart as <date>.png.

Load generators: Kafka's own ProducerPerformance, ConsumerPerformance, EndToEndLatency and
VerifiableProducer (kafka-tools), `keel bench`, and for transactions bench/transactions.py's
librdkafka transactional producer, each against both systems.

`--security sasl_ssl` (or `both`, after the PLAINTEXT cluster) runs each system again with every
listener — clients, inter-broker, controller — SASL_SSL (PLAIN, TLS from a throwaway CA made
here), the same for both: produce acks=all and the catch-up read, rows keyed *_sasl_ssl; the
report adds each system's SASL_SSL / PLAINTEXT ratios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
CACHE = BENCH / ".cache"
KAFKA_VERSION_RE = re.compile(r"<kafka.version>([^<]+)</kafka.version>")
NODES = (1, 2, 3)
BOOTSTRAP = ",".join(f"127.0.0.1:{29092 + i}" for i in NODES)
VOTERS = ",".join(f"{i}@127.0.0.1:{29192 + i}" for i in NODES)
MB = 1e6
GB = 1e9
RECORD_BYTES = 1024


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class Row:
    """One line of the table: a metric measured on both systems, several samples each."""

    key: str
    workload: str
    tool: str
    metric: str
    unit: str
    higher_is_better: bool
    samples: dict = field(default_factory=dict)  # system -> [float]
    errors: dict = field(default_factory=dict)  # system -> str
    ceiling: tuple | None = None  # (limit value in `unit`, what the limit is)
    note: str = ""


class Results:
    def __init__(self):
        self.rows: dict[str, Row] = {}
        self.ceilings: dict[str, float] = {}
        self.facts: dict[str, str] = {}

    def row(self, key, workload, tool, metric, unit, higher_is_better, ceiling=None) -> Row:
        if key not in self.rows:
            self.rows[key] = Row(key, workload, tool, metric, unit, higher_is_better, ceiling=ceiling)
        return self.rows[key]

    def add(self, row: Row, system: str, value: float) -> None:
        row.samples.setdefault(system, []).append(float(value))
        log(f"  {system}: {row.workload} / {row.tool} / {row.metric} = {value:,.2f} {row.unit}")

    def fail(self, row: Row, system: str, why: str) -> None:
        row.errors[system] = why
        log(f"  {system}: {row.workload} / {row.tool} / {row.metric}: not measured: {why}")

    def to_json(self) -> dict:
        return {
            "facts": self.facts,
            "ceilings": self.ceilings,
            "rows": [row.__dict__ for row in self.rows.values()],
        }


# --------------------------------------------------------------------------------------------
# The machine's own limits


def ceilings(results: Results, scratch: Path, size_mb: int) -> None:
    """Sequential write (buffered; fdatasync at the end; fsync after every MiB) and loopback TCP."""
    scratch.mkdir(parents=True, exist_ok=True)
    path = scratch / "ceiling.bin"
    block = os.urandom(1 << 20)

    def write(sync_each: bool, sync_end: bool) -> float:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        started = time.perf_counter()
        try:
            for _ in range(size_mb):
                os.write(fd, block)
                if sync_each:
                    os.fsync(fd)
            if sync_end:
                os.fsync(fd)
            elapsed = time.perf_counter() - started
        finally:
            os.close(fd)
        return size_mb * (1 << 20) / elapsed / MB

    log(f"ceilings: sequential write of {size_mb} MiB, loopback TCP (best of 3 each)")
    os.sync()  # earlier writes still in the page cache would slow the first measurement
    for key, sync_each, sync_end in (("seq_write_buffered_MBps", False, False),
                                     ("seq_write_fdatasync_end_MBps", False, True),
                                     ("seq_write_fsync_each_MiB_MBps", True, False)):
        best = 0.0
        for _ in range(3):
            best = max(best, write(sync_each, sync_end))
            path.unlink()
            os.sync()
        results.ceilings[key] = best
    results.ceilings["loopback_tcp_MBps"] = max(loopback_tcp(4 * size_mb) for _ in range(3))
    for k, v in results.ceilings.items():
        log(f"  {k}: {v:,.0f}")


def loopback_tcp(size_mb: int) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    total = size_mb * (1 << 20)

    def sink():
        conn, _ = server.accept()
        buf = bytearray(1 << 20)
        got = 0
        while got < total:
            n = conn.recv_into(buf)
            if n == 0:
                break
            got += n
        conn.sendall(b"k")
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    client = socket.create_connection(server.getsockname())
    block = b"\0" * (1 << 20)
    started = time.perf_counter()
    for _ in range(size_mb):
        client.sendall(block)
    client.recv(1)
    elapsed = time.perf_counter() - started
    client.close()
    t.join()
    server.close()
    return total / elapsed / MB


# --------------------------------------------------------------------------------------------
# Processes


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def server_properties(node: int, data: Path, security: "Security") -> str:
    """The same file for Kafka and Keel: Kafka's keys, Kafka's defaults except where named."""
    return "\n".join([
        "process.roles=broker,controller",
        f"node.id={node}",
        f"controller.quorum.voters={VOTERS}",
        *security.listener_lines(node),
        f"log.dirs={data}",
        "num.partitions=6",
        "default.replication.factor=3",
        "min.insync.replicas=2",
        "offsets.topic.replication.factor=3",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",
        # Flush policy: both systems' default, no fsync per message (the OS writes back;
        # durability comes from replication), stated here so neither side differs.
        "",
    ])


# --------------------------------------------------------------------------------------------
# Security: how every listener and every load generator's connection speak


SECURITY_MODES = ("plaintext", "sasl_ssl", "both")
# What a SASL_SSL cluster runs (fewer workloads than PLAINTEXT, to keep the run short): produce
# acks=all and the catch-up read, the rows issue 21 compares.
SECURE_WORKLOADS = ("throughput", "catch-up")
SASL_SUFFIX = "_sasl_ssl"  # appended to the key of a row measured over SASL_SSL
SASL_LABEL = ", SASL_SSL"  # and to its workload
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
TLS_PROTOCOL = "TLSv1.3"
TLS_SUITE = "TLS_AES_256_GCM_SHA384"


def make_pki(directory: Path) -> tuple[Path, Path]:
    """A throwaway CA and one certificate for every node (subject alternative names 127.0.0.1 and
    localhost), EC P-256, valid two days. Writes `ca.crt` (the PEM truststore) and `node.pem`
    (a PEM keystore: the key as PKCS #8, then the certificate) and returns both paths.

    The key is not encrypted: Kafka 4.1 on Java 17 cannot read a PBES2-encrypted PKCS #8 key
    (what openssl and `cryptography` write: `PBES2 SecretKeyFactory not available` at start),
    Keel decrypts only PBES2 (not the PBES1 / PKCS #12 schemes Java reads), and a file-based PEM
    keystore needs no `ssl.key.password` in either. The key is read once at start: nothing
    measured depends on it."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as e:
        raise SystemExit(f"--security sasl_ssl needs Python's cryptography package ({e}); run through "
                         "bench/compare, which installs bench/requirements.txt") from e
    import datetime
    import ipaddress

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = dict(not_valid_before=now - datetime.timedelta(minutes=5), not_valid_after=now + datetime.timedelta(days=2))

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "keel bench/compare"),
                          x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("bench CA")).issuer_name(name("bench CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name("bench node")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(valid["not_valid_before"]).not_valid_after(valid["not_valid_after"])
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_file, keystore = directory / "ca.crt", directory / "node.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    keystore.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + cert.public_bytes(serialization.Encoding.PEM))
    keystore.chmod(0o600)
    return ca_file, keystore


class Security:
    """How a cluster's listeners and the load generators' connections are secured, the same for
    both systems.

    `plaintext`: every listener PLAINTEXT (the run as it always was). `sasl_ssl`: every listener
    — clients, inter-broker (replica fetchers), controller (Raft and broker-to-controller) —
    SASL_SSL with PLAIN, TLS 1.3 with one cipher suite, one throwaway CA and one node
    certificate (PEM) made for this run. Rows measured over SASL_SSL carry SASL_SUFFIX."""

    def __init__(self, name: str, directory: Path, idempotence_off: bool):
        self.name = name
        self.secure = name == "sasl_ssl"
        self.protocol = "SASL_SSL" if self.secure else "PLAINTEXT"
        self.suffix = SASL_SUFFIX if self.secure else ""
        self.label = SASL_LABEL if self.secure else ""
        idempotence = "enable.idempotence=false\n" if idempotence_off else "# the clients' defaults\n"
        if not self.secure:
            # Unchanged from before --security: the producers' properties file, nothing else.
            self.client_props = directory / "client.properties"
            self.client_props.write_text(idempotence)
            self.command_props = None
            return
        import secrets
        directory.mkdir(parents=True, exist_ok=True)
        self.broker_password = secrets.token_urlsafe(18)
        self.client_user, self.client_password = "bench", secrets.token_urlsafe(18)
        self.ca_file, self.keystore = make_pki(directory)
        security = "\n".join([
            "security.protocol=SASL_SSL",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_file}",
            f"ssl.enabled.protocols={TLS_PROTOCOL}",
            f"ssl.cipher.suites={TLS_SUITE}",
            "sasl.mechanism=PLAIN",
            f'sasl.jaas.config={PLAIN_MODULE} required username="{self.client_user}" '
            f'password="{self.client_password}";',
            ""])
        # Kafka's tools' --command-config / --consumer.config / --admin.config and `keel bench
        # --command-config`: the connection's settings only.
        self.command_props = directory / "command.properties"
        self.command_props.write_text(security)
        # The producers' --producer.config (and EndToEndLatency's file): the same plus the
        # idempotence setting every run uses.
        self.client_props = directory / "client.properties"
        self.client_props.write_text(security + idempotence)
        for f in (self.command_props, self.client_props):
            f.chmod(0o600)

    def listener_lines(self, node: int) -> list[str]:
        """The server.properties lines of the listeners and their security."""
        if not self.secure:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{29092 + node},CONTROLLER://127.0.0.1:{29192 + node}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{29092 + node},CONTROLLER://127.0.0.1:{29192 + node}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
            ]
        broker = f'username="broker" password="{self.broker_password}" user_broker="{self.broker_password}"'
        return [
            f"listeners=SASL_SSL://127.0.0.1:{29092 + node},CONTROLLER://127.0.0.1:{29192 + node}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{29092 + node},CONTROLLER://127.0.0.1:{29192 + node}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=SASL_SSL",
            # TLS: one PEM keystore and the CA as truststore, on every listener and every
            # outgoing connection; host names checked (Kafka's default).
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.ca_file}",
            f"ssl.enabled.protocols={TLS_PROTOCOL}",
            f"ssl.cipher.suites={TLS_SUITE}",
            "ssl.endpoint.identification.algorithm=https",
            # SASL PLAIN on both listeners; the nodes authenticate to each other as `broker`,
            # the load generators as `bench`.
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            "sasl.mechanism.controller.protocol=PLAIN",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_MODULE} required {broker} "
            f'user_{self.client_user}="{self.client_password}";',
            f"listener.name.controller.plain.sasl.jaas.config={PLAIN_MODULE} required {broker};",
        ]

    def librdkafka(self) -> dict:
        """confluent-kafka settings for the readiness probes (metadata, end offsets)."""
        if not self.secure:
            return {}
        return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(self.ca_file),
                "ssl.endpoint.identification.algorithm": "https", "sasl.mechanisms": "PLAIN",
                "sasl.username": self.client_user, "sasl.password": self.client_password}

    def command_config(self, flag: str = "--command-config") -> list[str]:
        """`[flag, file]` for a Kafka tool or `keel bench` over SASL_SSL; nothing over PLAINTEXT
        (the commands stay what they were before --security)."""
        return [flag, str(self.command_props)] if self.secure else []

    def describe(self) -> str:
        if not self.secure:
            return "every listener PLAINTEXT"
        return (f"every listener (clients, inter-broker, controller) SASL_SSL: SASL PLAIN, {TLS_PROTOCOL} with "
                f"{TLS_SUITE} only, one throwaway CA and one EC P-256 node certificate (PEM keystore, PKCS #8 "
                "key), host names checked, no client certificates")


class System:
    """A three-node cluster of one system under test."""

    name = ""
    title = ""

    def __init__(self, run_dir: Path, tools: "KafkaTools", security: Security):
        self.run_dir = run_dir
        self.tools = tools
        self.security = security
        self.procs: dict[int, subprocess.Popen] = {}

    def node_dir(self, node: int) -> Path:
        return self.run_dir / f"node{node}"

    def config(self, node: int) -> Path:
        return self.node_dir(node) / "server.properties"

    def format(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)
        for node in NODES:
            (self.node_dir(node) / "logs").mkdir(parents=True)
            self.config(node).write_text(server_properties(node, self.node_dir(node) / "data", self.security))
        cluster_id = self.random_cluster_id()
        for node in NODES:
            self.format_node(node, cluster_id)

    def start(self, timeout: float = 120) -> float:
        started = time.monotonic()
        for node in NODES:
            self.start_node(node)
        wait_for(lambda: self.serving_brokers() == len(NODES), timeout, f"{self.name}: three brokers serving",
                 alive=self.check_alive)
        return time.monotonic() - started

    def start_node(self, node: int) -> None:
        out = open(self.node_dir(node) / "logs" / "stdout.log", "ab")
        self.procs[node] = subprocess.Popen(self.node_command(node), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, env=self.env())
        out.close()

    def env(self) -> dict:
        return dict(os.environ)

    def check_alive(self) -> None:
        for node, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.node_dir(node) / "logs" / "stdout.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{self.name} node {node} exited with {proc.returncode}:\n{tail}")

    def stop_node(self, node: int, timeout: float = 120) -> float:
        """SIGTERM (a clean shutdown) and wait; returns the seconds it took."""
        proc = self.procs[node]
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"{self.name} node {node} did not stop within {timeout} s after SIGTERM")
        return time.monotonic() - started

    def kill_node(self, node: int) -> None:
        proc = self.procs[node]
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for node in NODES:
            if node in self.procs and self.procs[node].poll() is None:
                try:
                    self.stop_node(node, timeout=60)
                except RuntimeError as e:
                    log(str(e))

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def serving_brokers(self, bootstrap: str = BOOTSTRAP) -> int:
        from confluent_kafka.admin import AdminClient
        try:
            md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                              **self.security.librdkafka()}).list_topics(timeout=2)
        except Exception:
            return 0
        return len(md.brokers)


class Kafka(System):
    name = "kafka"

    def active_controller(self) -> int:
        out = self.tools.run("org.apache.kafka.tools.MetadataQuorumCommand",
                             ["--bootstrap-server", BOOTSTRAP, *self.security.command_config(),
                              "describe", "--status"])
        m = re.search(r"LeaderId:\s+(\d+)", out)
        if not m:
            raise RuntimeError(f"no LeaderId in: {out.strip()[-200:]}")
        return int(m.group(1))

    def __init__(self, run_dir, tools, security, heap: str):
        super().__init__(run_dir, tools, security)
        self.heap = heap
        self.title = f"Apache Kafka {tools.version}"

    def random_cluster_id(self) -> str:
        return self.tools.run("kafka.tools.StorageTool", ["random-uuid"]).strip()

    def format_node(self, node, cluster_id):
        self.tools.run("kafka.tools.StorageTool", ["format", "-t", cluster_id, "-c", str(self.config(node))])

    def node_command(self, node):
        # kafka-server-start.sh's JVM settings, with the heap this run asks for.
        return ["java", f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                "-Djava.awt.headless=true", f"-Dkafka.logs.dir={self.node_dir(node) / 'logs'}",
                f"-Dlog4j2.configurationFile={BENCH / 'kafka' / 'log4j2-server.properties'}",
                "-cp", self.tools.classpath, "kafka.Kafka", str(self.config(node))]


class Keel(System):
    name = "keel"
    title = "Keel"

    def __init__(self, run_dir, tools, security, binary: Path):
        super().__init__(run_dir, tools, security)
        self.binary = binary
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        self.title = f"Keel ({version or 'keel'}, {commit})"

    def active_controller(self) -> int:
        # Keel's brokers do not answer DescribeQuorum yet: the controller that logged the
        # highest term is the active one.
        best = (-1, -1)
        for node in NODES:
            text = (self.node_dir(node) / "logs" / "stdout.log").read_text(errors="replace")
            for m in re.finditer(r"active controller term=(\d+)", text):
                best = max(best, (int(m.group(1)), node))
        if best[1] < 0:
            raise RuntimeError("no controller has logged that it is active")
        return best[1]

    def random_cluster_id(self) -> str:
        return subprocess.run([str(self.binary), "random-cluster-id"], check=True, capture_output=True,
                              text=True).stdout.strip()

    def format_node(self, node, cluster_id):
        subprocess.run([str(self.binary), "format", "-c", str(self.config(node)), f"--cluster-id={cluster_id}"], check=True,
                       capture_output=True)

    def node_command(self, node):
        return [str(self.binary), "server", "-c", str(self.config(node))]

    def env(self):
        env = dict(os.environ)
        env.update({"RUST_BACKTRACE": "0", "RUST_LOG": env.get("RUST_LOG", "info")})
        return env


def wait_for(predicate, timeout: float, what: str, alive=None, interval: float = 0.1) -> float:
    started = time.monotonic()
    while True:
        if alive:
            alive()
        if predicate():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------
# Load generators


class KafkaTools:
    """Apache Kafka's jars, resolved by Maven (bench/kafka/pom.xml), run as `java -cp`."""

    def __init__(self):
        pom = BENCH / "kafka" / "pom.xml"
        self.version = KAFKA_VERSION_RE.search(pom.read_text()).group(1)
        cp_file = CACHE / f"kafka-{self.version}.classpath"
        if not cp_file.exists() or cp_file.stat().st_mtime < pom.stat().st_mtime:
            log(f"resolving Apache Kafka {self.version} with Maven (first run: about a minute)")
            CACHE.mkdir(exist_ok=True)
            subprocess.run(["mvn", "-q", "-f", str(pom), "dependency:build-classpath",
                            f"-Dmdep.outputFile={cp_file}"], check=True)
        self.classpath = cp_file.read_text().strip()

    def command(self, main: str, args: list[str]) -> list[str]:
        return ["java", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={BENCH / 'kafka' / 'log4j2-tools.properties'}",
                "-cp", self.classpath, main, *args]

    def run(self, main: str, args: list[str], timeout: float = 600) -> str:
        r = subprocess.run(self.command(main, args), capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"{main.rsplit('.', 1)[-1]} exited with {r.returncode}: "
                               f"{(r.stderr or r.stdout).strip().splitlines()[-1:] or ''}")
        return r.stdout


PRODUCER_PERF_RE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")
KEEL_RATE_RE = re.compile(r"^(produce|consume): (\d+) records in ([\d.]+) s: (\d+) records/s, ([\d.]+) MB/s", re.M)
KEEL_LATENCY_RE = re.compile(r"p50 ([\d.]+)\s+p99 ([\d.]+)\s+p99\.9 ([\d.]+)")
E2E_RE = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99.9th = (\d+)")
E2E_AVG_RE = re.compile(r"Avg latency: ([\d.]+) ms")
KEEL_E2E_RE = re.compile(r"avg ([\d.]+)\s+p50 ([\d.]+)\s+p99 ([\d.]+)\s+p99\.9 ([\d.]+)")


def parse_producer_perf(text: str) -> dict:
    lines = [m for m in PRODUCER_PERF_RE.finditer(text)]
    if not lines:
        raise RuntimeError(f"no ProducerPerformance summary in: {text.strip()[-300:]}")
    g = lines[-1].groups()
    return {"records": int(g[0]), "rps": float(g[1]), "MBps": float(g[2]), "avg": float(g[3]),
            "p50": float(g[5]), "p99": float(g[7]), "p999": float(g[8])}


def parse_keel_bench(text: str) -> dict:
    out = {}
    for m in KEEL_RATE_RE.finditer(text):
        out[m.group(1)] = {"records": int(m.group(2)), "seconds": float(m.group(3)),
                           "rps": float(m.group(4)), "MBps": float(m.group(5))}
    m = KEEL_LATENCY_RE.search(text)
    if m:
        out["latency"] = {"p50": float(m.group(1)), "p99": float(m.group(2)), "p999": float(m.group(3))}
    return out


class Bench:
    def __init__(self, args, tools: KafkaTools, keel_binary: Path, results: Results):
        self.args = args
        self.tools = tools
        self.keel = keel_binary
        self.results = results
        # The Java clients' defaults (an idempotent producer since Kafka 3.0) on both systems;
        # `--idempotence off` compares with runs made before Keel had one (issue 9). The
        # producers' properties file is the cluster's Security's (it adds the SASL_SSL settings).
        off = args.idempotence == "off"
        self.security: Security | None = None  # the cluster's being measured, set by run_all
        results.facts["client_idempotence"] = ("Java clients with `enable.idempotence=false` on both." if off else
                                               "Java clients with their defaults on both (an idempotent producer).")
        self.rate_for_latency: float | None = args.latency_rate

    # ---- helpers

    @property
    def client_props(self) -> Path:
        return self.security.client_props

    def create_topic(self, topic: str, partitions: int, rf: int = 3, assignment: str | None = None,
                     min_isr: int = 2):
        args = ["--bootstrap-server", BOOTSTRAP, *self.security.command_config(), "--create", "--topic", topic,
                "--config", f"min.insync.replicas={min_isr}"]
        if assignment:
            args += ["--replica-assignment", assignment]
        else:
            args += ["--partitions", str(partitions), "--replication-factor", str(rf)]
        self.tools.run("org.apache.kafka.tools.TopicCommand", args)
        wait_for(lambda: self.leaders(topic) is not None and len(self.leaders(topic)) == partitions, 60,
                 f"leaders of {topic}")

    def metadata(self, topic: str):
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": BOOTSTRAP, "log_level": 0,
                          **self.security.librdkafka()}).list_topics(topic, timeout=5)
        return md.topics.get(topic)

    def leaders(self, topic: str) -> dict | None:
        try:
            t = self.metadata(topic)
        except Exception:
            return None
        if t is None or t.error is not None:
            return None
        return {p: t.partitions[p].leader for p in t.partitions if t.partitions[p].leader >= 0}

    def fully_replicated(self, topic: str) -> bool:
        try:
            t = self.metadata(topic)
        except Exception:
            return False
        return t is not None and t.error is None and all(len(p.isrs) == len(p.replicas) for p in t.partitions.values())

    def producer_perf(self, topic: str, records: int, acks: str, throughput: float = -1,
                      producers: int = 2) -> list[dict]:
        """`producers` ProducerPerformance processes at once, records split between them."""
        procs = []
        for i in range(producers):
            share = records // producers
            tput = throughput / producers if throughput > 0 else -1
            procs.append(subprocess.Popen(self.tools.command("org.apache.kafka.tools.ProducerPerformance", [
                "--topic", topic, "--num-records", str(share), "--record-size", str(RECORD_BYTES),
                "--throughput", f"{tput:.0f}", "--producer.config", str(self.client_props),
                "--producer-props", f"bootstrap.servers={BOOTSTRAP}", f"acks={acks}"]),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=1800)
            if p.returncode != 0:
                raise RuntimeError(f"ProducerPerformance exited with {p.returncode}: {err.strip()[-300:]}")
            outs.append(parse_producer_perf(out))
        return outs

    def keel_bench(self, args: list[str]) -> dict:
        r = subprocess.run([str(self.keel), "bench", "--bootstrap", "127.0.0.1:29093",
                            *self.security.command_config(), *args],
                           capture_output=True, text=True, timeout=3600,
                           env=dict(os.environ, RUST_BACKTRACE="0"))
        if r.returncode != 0:
            raise RuntimeError(f"keel bench exited with {r.returncode}: {r.stderr.strip()[-300:]}")
        return parse_keel_bench(r.stdout)

    def measure(self, row: Row, system: System, fn) -> None:
        """Runs fn() -> value (or list of values) and records it, or records why it failed."""
        try:
            value = fn()
        except Exception as e:  # a failed measurement is reported, the run goes on
            self.results.fail(row, system.name, str(e).strip().splitlines()[0][:200] if str(e).strip() else repr(e))
            return
        for v in value if isinstance(value, list) else [value]:
            self.results.add(row, system.name, v)

    # ---- workloads

    def run_all(self, system: System) -> None:
        a = self.args
        R = self.results
        sec = self.security = system.security
        log(f"== {system.title}, every listener {sec.protocol}: format and start")
        system.format()
        started = system.start()
        log(f"{system.name}: cluster serving in {started:.1f} s")
        R.add(R.row("cluster_start" + sec.suffix, "cluster start (format done)" + sec.label, "—",
                    "three brokers serving", "s", False), system.name, started)
        workloads = [("throughput", self.throughput), ("latency", self.latency), ("end-to-end", self.end_to_end),
                     ("transactions", self.transactions),
                     ("memory", lambda s: self.memory(s, "after the produce and latency runs")),
                     ("catch-up", self.catch_up), ("failover", self.failover), ("cold-start", self.cold_start),
                     ("memory", lambda s: self.memory(s, "at the end"))]
        if a.only:
            workloads = [(name, w) for name, w in workloads if name in a.only]
        if sec.secure:
            if skipped := sorted({name for name, _ in workloads if name not in SECURE_WORKLOADS}):
                log(f"{system.name}: over SASL_SSL only {','.join(SECURE_WORKLOADS)} run; not {','.join(skipped)}")
            workloads = [(name, w) for name, w in workloads if name in SECURE_WORKLOADS]
        try:
            for _, workload in workloads:
                try:
                    workload(system)
                except Exception as e:  # the other workloads still run; the report says what failed
                    log(f"{system.name}: workload failed: {e}")
                    R.facts.setdefault("failures", []).append(f"{system.name} ({sec.protocol}): {e}")
                    system.check_alive()
        finally:
            log(f"{system.name}: stopping")
            system.stop()
            if not a.keep:
                shutil.rmtree(system.run_dir, ignore_errors=True)

    def throughput(self, system: System) -> None:
        """Produce throughput, acks=1 and acks=all (over SASL_SSL acks=all only), and the brokers'
        CPU per GB produced."""
        a, R, sec = self.args, self.results, self.security
        self.create_topic("tput", 6)
        lim = R.ceilings.get("seq_write_buffered_MBps")
        ceiling = (min(lim, R.ceilings["loopback_tcp_MBps"]) / 3, "a third of min(buffered seq write, loopback TCP): "
                   "three replicas write and two fetch every byte") if lim else None
        log(f"{system.name}: warm-up (ProducerPerformance, {a.records // 4:,} records, not recorded)")
        try:
            self.producer_perf("tput", a.records // 4, "1")
        except Exception as e:
            log(f"  warm-up failed: {e}")

        def cpu_now() -> float:
            return sum(cpu_seconds(p) for p in system.pids())
        cpu_before = cpu_now()
        produced = 0
        cpu_all, produced_all = 0.0, 0  # the acks=all runs alone, comparable across security settings
        for rep in range(a.repeats):
            for acks in ("all",) if sec.secure else ("1", "all"):
                log(f"{system.name}: produce acks={acks} over {sec.protocol}, run {rep + 1}/{a.repeats}")
                row = R.row(f"produce_pp_{acks}{sec.suffix}", f"produce 1 KiB, acks={acks}{sec.label}",
                            "ProducerPerformance ×2", "throughput", "MB/s", True, ceiling)

                def pp():
                    runs = self.producer_perf("tput", a.records, acks)
                    return sum(r["MBps"] for r in runs)
                cpu_run = cpu_now()
                self.measure(row, system, pp)
                produced += a.records * RECORD_BYTES
                row = R.row(f"produce_kb_{acks}{sec.suffix}", f"produce 1 KiB, acks={acks}{sec.label}",
                            "keel bench, 2 producers", "throughput", "MB/s", True, ceiling)
                self.measure(row, system, lambda: self.keel_bench([
                    "--topic", "tput", "--records", str(a.records), "--producers", "2", "--acks", acks,
                    "--consumers", "0", "--partitions", "6", "--replication-factor", "3"])["produce"]["MBps"])
                produced += a.records * RECORD_BYTES
                if acks == "all":
                    cpu_all += cpu_now() - cpu_run
                    produced_all += 2 * a.records * RECORD_BYTES
        cpu = cpu_now() - cpu_before
        if not sec.secure:
            R.add(R.row("cpu_per_gb", "broker CPU per GB produced (3 brokers, all produce runs)", "—",
                        "CPU seconds per GB", "s/GB", False), system.name, cpu / (produced / GB))
        R.add(R.row("cpu_per_gb_all" + sec.suffix, f"broker CPU per GB produced (3 brokers, acks=all runs){sec.label}",
                    "—", "CPU seconds per GB", "s/GB", False), system.name, cpu_all / (produced_all / GB))
        if self.rate_for_latency is None and system.name == "kafka" and not sec.secure:
            samples = R.rows["produce_pp_all"].samples.get("kafka")
            if samples:
                self.rate_for_latency = statistics.median(samples) * MB / RECORD_BYTES / 2

    def latency(self, system: System) -> None:
        a, R = self.args, self.results
        rate = self.rate_for_latency
        if rate is None:
            samples = R.rows["produce_pp_all"].samples.get(system.name)
            if not samples:
                log(f"{system.name}: no rate for the latency runs; skipped")
                return
            rate = statistics.median(samples) * MB / RECORD_BYTES / 2
        R.facts["latency_rate"] = f"{rate:,.0f} records/s"
        records = int(rate * a.latency_seconds)
        for rep in range(a.repeats):
            log(f"{system.name}: fixed rate {rate:,.0f} records/s acks=all, run {rep + 1}/{a.repeats}")
            try:
                runs = self.producer_perf("tput", records, "all", throughput=rate)
                for q, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
                    # the slower of the two producers' percentiles
                    R.add(R.row(f"lat_pp_{q}", "latency at half Kafka's max, acks=all",
                                "ProducerPerformance ×2 (per record)", label, "ms", False),
                          system.name, max(r[q] for r in runs))
            except Exception as e:
                R.fail(R.row("lat_pp_p50", "latency at half Kafka's max, acks=all",
                             "ProducerPerformance ×2 (per record)", "p50", "ms", False), system.name, str(e))
            try:
                out = self.keel_bench(["--topic", "tput", "--records", str(records), "--producers", "2",
                                       "--acks", "all", "--rate", f"{rate:.0f}", "--consumers", "0",
                                       "--partitions", "6", "--replication-factor", "3"])
                for q, label in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
                    R.add(R.row(f"lat_kb_{q}", "latency at half Kafka's max, acks=all",
                                "keel bench (per 64-record request)", label, "ms", False),
                          system.name, out["latency"][q])
            except Exception as e:
                R.fail(R.row("lat_kb_p50", "latency at half Kafka's max, acks=all",
                             "keel bench (per 64-record request)", "p50", "ms", False), system.name, str(e))

    def end_to_end(self, system: System) -> None:
        a, R = self.args, self.results
        self.create_topic("e2e", 1)
        for rep in range(a.repeats):
            log(f"{system.name}: end-to-end latency, {a.e2e_messages} messages, run {rep + 1}/{a.repeats}")
            try:
                out = self.tools.run("org.apache.kafka.tools.EndToEndLatency", [
                    BOOTSTRAP, "e2e", str(a.e2e_messages), "all", str(RECORD_BYTES), str(self.client_props)])
                m, avg = E2E_RE.search(out), E2E_AVG_RE.search(out)
                if not m or not avg:
                    raise RuntimeError(f"no EndToEndLatency summary in: {out.strip()[-200:]}")
                for label, value in (("average", avg.group(1)), ("p50", m.group(1)), ("p99", m.group(2)),
                                     ("p99.9", m.group(3))):
                    R.add(R.row(f"e2e_{label}", "end-to-end (produce acks=all → consume), 1 KiB",
                                "EndToEndLatency", label, "ms", False), system.name, float(value))
            except Exception as e:
                R.fail(R.row("e2e_average", "end-to-end (produce acks=all → consume), 1 KiB", "EndToEndLatency",
                             "average", "ms", False), system.name, str(e))
            try:
                r = subprocess.run([str(self.keel), "bench", "--bootstrap", "127.0.0.1:29093",
                                    *self.security.command_config(), "--topic", "e2e",
                                    "--partitions", "1", "--replication-factor", "3", "--acks", "all",
                                    "--end-to-end", str(a.e2e_messages)], capture_output=True, text=True,
                                   timeout=600, env=dict(os.environ, RUST_BACKTRACE="0"))
                m = KEEL_E2E_RE.search(r.stdout)
                if r.returncode != 0 or not m:
                    raise RuntimeError(f"keel bench --end-to-end exited with {r.returncode}: "
                                       f"{(r.stderr or r.stdout).strip()[-200:]}")
                for label, value in zip(("average", "p50", "p99", "p99.9"), m.groups()):
                    R.add(R.row(f"e2e_kb_{label}", "end-to-end (produce acks=all → consume), 1 KiB",
                                "keel bench --end-to-end (long-polling consumer)", label, "ms", False),
                          system.name, float(value))
            except Exception as e:
                R.fail(R.row("e2e_kb_average", "end-to-end (produce acks=all → consume), 1 KiB",
                             "keel bench --end-to-end (long-polling consumer)", "average", "ms", False),
                       system.name, str(e))

    def transactions(self, system: System) -> None:
        """Transactional produce (issue 23): bench/transactions.py's driver, the same on both systems —
        one librdkafka transactional producer (acks=all) committing transactions of 100 records of
        100 B over six partitions (RF 3, min ISR 2), a fresh topic and transactional id per run."""
        a, R = self.args, self.results
        spec = importlib.util.spec_from_file_location("txbench", BENCH / "transactions.py")
        txbench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(txbench)
        count = 50 if a.quick else 200
        workload = "transactional produce, 100 × 100 B records per transaction, acks=all"
        tool = "librdkafka transactional producer ×1 (bench/transactions.py)"
        for rep in range(a.repeats):
            log(f"{system.name}: transactions, {count} × 100 records, run {rep + 1}/{a.repeats}")
            try:
                r = txbench.run(BOOTSTRAP, count, 100, 100)
            except Exception as e:
                R.fail(R.row("txn_100", workload, tool, "throughput", "txn/s", True), system.name, str(e))
                continue
            R.add(R.row("txn_100", workload, tool, "throughput", "txn/s", True), system.name, r["txn_per_s"])
            R.add(R.row("txn_100_p50", workload, tool, "commit latency p50", "ms", False), system.name, r["p50_ms"])
            R.add(R.row("txn_100_p99", workload, tool, "commit latency p99", "ms", False), system.name, r["p99_ms"])
        # The same work from the Java client (Kafka's own, of the harness's version), whose retry
        # of CONCURRENT_TRANSACTIONS backs off differently from librdkafka's.
        tool = f"Java client {self.tools.version} transactional producer ×1 (bench/java/TransactionalProduceBench.java)"
        for rep in range(a.repeats):
            log(f"{system.name}: transactions (Java client), {count} × 100 records, run {rep + 1}/{a.repeats}")
            try:
                classes = self.java_bench_classes()
                topic = txbench.create_topic(BOOTSTRAP)
                out = subprocess.run(
                    ["java", "-Xmx512m", f"-Dlog4j2.configurationFile={BENCH / 'kafka' / 'log4j2-tools.properties'}",
                     "-cp", f"{classes}:{self.tools.classpath}", "TransactionalProduceBench",
                     BOOTSTRAP, topic, str(txbench.PARTITIONS), str(count), "100", "100"],
                    capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    raise RuntimeError(f"TransactionalProduceBench exited with {out.returncode}: "
                                       f"{(out.stderr or out.stdout).strip()[-500:]}")
                txn_per_s, _, p50, p99 = (float(x) for x in out.stdout.split()[-4:])
            except Exception as e:
                R.fail(R.row("txn_100_java", workload, tool, "throughput", "txn/s", True), system.name, str(e))
                continue
            R.add(R.row("txn_100_java", workload, tool, "throughput", "txn/s", True), system.name, txn_per_s)
            R.add(R.row("txn_100_java_p50", workload, tool, "commit latency p50", "ms", False), system.name, p50)
            R.add(R.row("txn_100_java_p99", workload, tool, "commit latency p99", "ms", False), system.name, p99)

    def java_bench_classes(self) -> Path:
        """bench/java/*.java compiled against the harness's Kafka jars (once per source change)."""
        sources = sorted((BENCH / "java").glob("*.java"))
        out = CACHE / f"java-classes-{self.tools.version}"
        stamp = out / ".stamp"
        newest = max(src.stat().st_mtime for src in sources)
        if not stamp.exists() or stamp.stat().st_mtime < newest:
            out.mkdir(parents=True, exist_ok=True)
            subprocess.run(["javac", "-cp", self.tools.classpath, "-d", str(out), *map(str, sources)], check=True)
            stamp.touch()
        return out

    def drop_caches(self) -> bool:
        os.sync()
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
            return True
        except OSError:
            return False

    def catch_up(self, system: System) -> None:
        a, R, sec = self.args, self.results, self.security
        records = int(a.catchup_gb * GB / RECORD_BYTES)
        self.create_topic("catchup", 6)
        log(f"{system.name}: filling catchup with {records:,} records ({a.catchup_gb} GB) using keel bench acks=1")
        self.keel_bench(["--topic", "catchup", "--records", str(records), "--producers", "2", "--acks", "1",
                         "--consumers", "0", "--partitions", "6", "--replication-factor", "3"])
        wait_for(lambda: self.fully_replicated("catchup"), 300, "catchup fully replicated")
        ceiling = (R.ceilings.get("loopback_tcp_MBps", 0), "loopback TCP") if R.ceilings else None
        for rep in range(a.repeats):
            cold = self.drop_caches()
            R.facts["catchup_page_cache"] = "dropped before every read" if cold else "warm (could not drop)"
            log(f"{system.name}: catch-up read over {sec.protocol}, ConsumerPerformance, run {rep + 1}/{a.repeats}")
            row = R.row("catchup_cp" + sec.suffix, f"consumer catch-up over {a.catchup_gb:g} GB{sec.label}",
                        "ConsumerPerformance", "throughput", "MB/s", True, ceiling)

            def cp():
                out = self.tools.run("org.apache.kafka.tools.ConsumerPerformance", [
                    "--bootstrap-server", BOOTSTRAP, *self.security.command_config("--consumer.config"),
                    "--topic", "catchup", "--messages", str(records),
                    "--timeout", "30000", "--group", f"catchup-{time.time_ns()}"], timeout=900)
                # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
                fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
                if int(fields[4]) < records:
                    raise RuntimeError(f"read {fields[4]} of {records} records")
                return float(fields[3]) * (1 << 20) / MB
            self.measure(row, system, cp)
            self.drop_caches()
            log(f"{system.name}: catch-up read over {sec.protocol}, keel bench --consume-only, "
                f"run {rep + 1}/{a.repeats}")
            row = R.row("catchup_kb" + sec.suffix, f"consumer catch-up over {a.catchup_gb:g} GB{sec.label}",
                        "keel bench, 2 consumers", "throughput", "MB/s", True, ceiling)
            self.measure(row, system, lambda: self.keel_bench(
                ["--topic", "catchup", "--consume-only", "--consumers", "2"])["consume"]["MBps"])

    def failover(self, system: System) -> None:
        a, R = self.args, self.results
        self.create_topic("failover", 6)
        for controller in (False, True):
            what = "also the active controller" if controller else "not the active controller"
            row = R.row(f"failover_{'ctl' if controller else 'broker'}",
                        f"failover: kill -9 of a partition leader, {what}", "VerifiableProducer acks=all",
                        "until that partition's acks=all produce succeeds again", "s", False)
            for rep in range(a.failover_repeats):
                log(f"{system.name}: failover (leader {what}), run {rep + 1}/{a.failover_repeats}")
                self.measure(row, system, lambda: self.failover_once(system, controller))

    def failover_once(self, system: System, kill_controller: bool) -> float:
        out_path = system.run_dir / "failover-producer.jsonl"
        with open(out_path, "w") as out:
            producer = subprocess.Popen(self.tools.command("org.apache.kafka.tools.VerifiableProducer", [
                "--bootstrap-server", BOOTSTRAP, "--topic", "failover", "--acks", "-1", "--throughput", "1000",
                "--repeating-keys", "1000", "--producer.config", str(self.client_props)]),
                stdout=out, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: out_path.stat().st_size > 200_000, 60, "the producer to be acked steadily")
            active = system.active_controller()
            leaders = self.leaders("failover")
            if kill_controller and active not in leaders.values():
                # Leadership piles up on the survivors of earlier kills (neither system has
                # rebalanced yet): move it back to the preferred replicas, as an operator would.
                self.tools.run("org.apache.kafka.tools.LeaderElectionCommand", [
                    "--bootstrap-server", BOOTSTRAP, *self.security.command_config("--admin.config"),
                    "--election-type", "PREFERRED", "--all-topic-partitions"])
                wait_for(lambda: active in (self.leaders("failover") or {}).values(), 30,
                         "a partition led by the active controller")
                leaders = self.leaders("failover")
            chosen = [p for p, node in sorted(leaders.items()) if (node == active) == kill_controller]
            if not chosen:
                raise RuntimeError(f"no partition led by {'the' if kill_controller else 'a node other than the'} "
                                   f"active controller (leaders {leaders}, active controller {active})")
            partition, victim = chosen[0], leaders[chosen[0]]
            t_kill = time.time()
            system.kill_node(victim)
            log(f"  killed node {victim} (leader of failover-{partition}; active controller: node {active})")
            time.sleep(self.args.failover_window)
        finally:
            producer.terminate()
            producer.wait()
        acks = []
        for line in out_path.read_text().splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("name") == "producer_send_success" and j.get("partition") == partition:
                acks.append(j["timestamp"] / 1000)
        before = [t for t in acks if t <= t_kill]
        after = sorted(t for t in acks if t > t_kill)
        if not before or not after:
            raise RuntimeError(f"no acks on partition {partition} around the kill")
        # Acks right after the kill answer requests already in flight; the failover ends where
        # the partition's longest silence after the kill ends.
        gap, gap_end = after[0] - max(before), after[0]
        for x, y in zip(after, after[1:]):
            if y - x > gap:
                gap, gap_end = y - x, y
        log(f"  restarting node {victim}")
        system.start_node(victim)
        wait_for(lambda: self.fully_replicated("failover") and system.serving_brokers() == len(NODES), 180,
                 "the killed node back in every ISR")
        return gap_end - t_kill

    def cold_start(self, system: System) -> None:
        a, R = self.args, self.results
        if a.cold_gb <= 0:
            return
        node, partitions = 3, 4
        topic = "cold"
        self.create_topic(topic, partitions, assignment=",".join([str(node)] * partitions), min_isr=1)
        records = int(a.cold_gb * GB / RECORD_BYTES)
        log(f"{system.name}: filling {topic} (replication factor 1, on node {node}) with {a.cold_gb:g} GB")
        self.keel_bench(["--topic", topic, "--records", str(records), "--producers", "2", "--acks", "1",
                         "--consumers", "0", "--partitions", str(partitions), "--replication-factor", "1"])
        expected = self.end_offsets(node, topic, partitions)
        log(f"  {topic}: {sum(expected.values()):,} records on node {node}")
        for kind in ("clean", "unclean"):
            row = R.row(f"cold_{kind}", f"cold start with {a.cold_gb:g} GB of log", f"after {kind} shutdown",
                        "restart until its partitions serve again", "s", False)
            for rep in range(a.repeats):
                log(f"{system.name}: cold start after {kind} shutdown, run {rep + 1}/{a.repeats}")

                def once():
                    if kind == "clean":
                        took = system.stop_node(node)
                        R.add(R.row("clean_stop", f"clean shutdown with {a.cold_gb:g} GB of log", "SIGTERM",
                                    "until the process exits", "s", False), system.name, took)
                    else:
                        system.kill_node(node)
                    self.drop_caches()
                    started = time.monotonic()
                    system.start_node(node)
                    wait_for(lambda: self.end_offsets(node, topic, partitions, quiet=True) == expected, 600,
                             f"node {node} serving {topic} again", alive=system.check_alive, interval=0.05)
                    return time.monotonic() - started
                self.measure(row, system, once)

    def end_offsets(self, node: int, topic: str, partitions: int, quiet: bool = False) -> dict | None:
        from confluent_kafka import Consumer, TopicPartition
        c = Consumer({"bootstrap.servers": f"127.0.0.1:{29092 + node}", "group.id": "probe",
                      "enable.auto.commit": False, "log_level": 0, "socket.connection.setup.timeout.ms": 1000,
                      **self.security.librdkafka()})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=1, cached=False)[1]
                    for p in range(partitions)}
        except Exception:
            if not quiet:
                raise
            return None
        finally:
            c.close()

    def memory(self, system: System, when: str) -> None:
        R = self.results
        rss = [memory_mib(p) for p in system.pids()]
        if not rss:
            return
        R.add(R.row(f"rss_{when}", "broker resident memory", when, "largest of the three brokers", "MiB", False),
              system.name, max(r[0] for r in rss))
        if when == "at the end":
            R.add(R.row("rss_peak", "broker resident memory", "peak of the processes alive at the end (VmHWM)",
                        "largest of the three brokers", "MiB", False), system.name, max(r[1] for r in rss))


# --------------------------------------------------------------------------------------------
# Report


def summary(values: list[float]) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    spread = f" ({fmt(min(values))}–{fmt(max(values))})" if len(values) > 1 else ""
    return f"{fmt(med)}{spread}"


def fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(row: Row) -> float | None:
    k, e = row.samples.get("kafka"), row.samples.get("keel")
    if not k or not e:
        return None
    km, em = statistics.median(k), statistics.median(e)
    if km == 0:
        return None
    return em / km


def security_ratios(results: Results) -> list[tuple[Row, Row, dict]]:
    """Every row measured over SASL_SSL whose PLAINTEXT row (its key without SASL_SUFFIX) is in the
    results: (PLAINTEXT row, SASL_SSL row, {system: SASL_SSL median / PLAINTEXT median, or None})."""
    out = []
    for key, secure in results.rows.items():
        plain = results.rows.get(key[:-len(SASL_SUFFIX)]) if key.endswith(SASL_SUFFIX) else None
        if plain is None:
            continue
        ratios = {}
        for s in ("kafka", "keel"):
            p, q = plain.samples.get(s), secure.samples.get(s)
            ratios[s] = statistics.median(q) / statistics.median(p) if p and q and statistics.median(p) else None
        out.append((plain, secure, ratios))
    return out


def row_title(row: Row) -> str:
    return row.workload + (f", {row.tool}" if row.tool != "—" else "")


def write_report(results: Results, systems: list[System], args, out_md: Path) -> None:
    titles = {s.name: s.title for s in systems}
    kt, et = titles.get("kafka", "Apache Kafka"), titles.get("keel", "Keel")
    c = results.ceilings
    lines = [f"# Keel and Apache Kafka side by side, {results.facts['date']}", "",
             f"Produced by `bench/compare {' '.join(sys.argv[1:])}`".rstrip() + " (see docs/benchmarks.md).", "",
             f"- Machine: {results.facts['machine']}",
             f"- Systems: {kt} (JVM heap {args.kafka_heap}) and {et}; three combined broker+controller nodes on "
             "127.0.0.1 each, the same server.properties (replication factor 3, `min.insync.replicas=2`, "
             "no fsync per message on either), one system at a time.",
             f"- {results.facts.get('client_idempotence', '')}",
             f"- Every row: median of {args.repeats} runs (failover: {args.failover_repeats} of each kind) with min–max in "
             f"parentheses; 1 KiB records, 6 partitions, 2 producers, {args.records:,} records per throughput run.",
             *([f"- Latency runs: a fixed {results.facts['latency_rate']} over 2 producers (half of Kafka's "
                "median ProducerPerformance acks=all throughput)."] if "latency_rate" in results.facts else []),
             *([f"- Catch-up reads: page cache {results.facts['catchup_page_cache']}."]
               if "catchup_page_cache" in results.facts else []),
             *[f"- {'Rows marked SASL_SSL' if protocol == 'SASL_SSL' else 'The other rows'}: {how}"
               + (" (each system's SASL_SSL cluster is a fresh one, started after its PLAINTEXT cluster was "
                  "stopped and deleted; only produce acks=all and the catch-up read run over it)."
                  if protocol == "SASL_SSL" else ".")
               for protocol, how in sorted(results.facts.get("security", {}).items())
               if len(results.facts.get("security", {})) > 1 or protocol == "SASL_SSL"],
             *([f"- {results.facts['baseline']}"] if results.facts.get("baseline") else []), ""]
    if c:
        lines += ["## The machine's ceilings", "", "| ceiling | MB/s |", "|---|---|",
                  f"| sequential write, buffered (no fsync) | {c['seq_write_buffered_MBps']:,.0f} |",
                  f"| sequential write, one fdatasync at the end | {c['seq_write_fdatasync_end_MBps']:,.0f} |",
                  f"| sequential write, fsync after every MiB | {c['seq_write_fsync_each_MiB_MBps']:,.0f} |",
                  f"| loopback TCP, one stream | {c['loopback_tcp_MBps']:,.0f} |", ""]
    lines += ["## Results", "",
              f"| workload | tool | metric | {kt} | {et} | Keel/Kafka | better | share of ceiling (Kafka / Keel) |",
              "|---|---|---|---|---|---|---|---|"]
    for row in results.rows.values():
        cells = []
        for s in ("kafka", "keel"):
            if s in row.errors and not row.samples.get(s):
                cells.append(f"not measured: {row.errors[s]}")
            else:
                cells.append(summary(row.samples.get(s, [])) + (f" {row.unit}" if row.samples.get(s) else ""))
        r = ratio(row)
        rtext = f"{r:.2f}" if r is not None else "—"
        better = "—"
        if r is not None:
            good = r >= 1 if row.higher_is_better else r <= 1
            factor = r if row.higher_is_better else (1 / r if r else float("inf"))
            better = f"Keel ×{factor:.2f}" if good else f"Kafka ×{1 / factor:.2f}"
            if abs(r - 1) < 0.05:
                better = "even (±5 %)"
        share = "—"
        if row.ceiling and row.ceiling[0]:
            parts = [f"{statistics.median(row.samples[s]) / row.ceiling[0] * 100:.0f} %"
                     if row.samples.get(s) else "—" for s in ("kafka", "keel")]
            share = f"{' / '.join(parts)} of {row.ceiling[0]:,.0f} MB/s"
        lines.append(f"| {row.workload} | {row.tool} | {row.metric} | {cells[0]} | {cells[1]} | {rtext} | "
                     f"{better} | {share} |")
    notes = {row.workload.removesuffix(SASL_LABEL): row.ceiling[1] for row in results.rows.values()
             if row.ceiling and row.ceiling[1]}
    if notes:
        lines += ["", "Ceilings used above:", *[f"- {w}: {why}" for w, why in notes.items()]]
    sec = security_ratios(results)
    if sec:
        lines += ["", "## SASL_SSL against PLAINTEXT", "",
                  "Each system against itself: its median over SASL_SSL divided by its median of the same row over "
                  "PLAINTEXT in this run (throughput below 1: what TLS and SASL cost; CPU per GB and start time "
                  "above 1: the same).", "",
                  "| SASL_SSL / PLAINTEXT | " + " | ".join(row_title(plain) for plain, _, _ in sec) + " |",
                  "|---|" + "---|" * len(sec)]
        for s, title in (("kafka", kt), ("keel", et)):
            lines.append(f"| {title} | " + " | ".join(f"{r[s]:.2f}" if r[s] is not None else "—"
                                                      for _, _, r in sec) + " |")
    if results.facts.get("failures"):
        lines += ["", "Failures during the run:", *[f"- {f}" for f in results.facts["failures"]]]
    lines += ["", f"![Keel relative to Kafka]({out_md.with_suffix('.png').name})", ""]
    out_md.write_text("\n".join(lines))


def write_chart(results: Results, out_png: Path) -> None:
    """Keel relative to Kafka for every row; below it, when the run has SASL_SSL rows, each
    system's SASL_SSL / PLAINTEXT ratios."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, factors = [], []
    for row in results.rows.values():
        r = ratio(row)
        if r is None or r <= 0:
            continue
        labels.append(textwrap.fill(f"{row.workload} — {row.tool} — {row.metric}", 70))
        factors.append(r if row.higher_is_better else 1 / r)
    sec = [(row_title(plain), s, r[s]) for plain, _, r in security_ratios(results) for s in ("kafka", "keel")
           if r[s] is not None]
    if not factors and not sec:
        return
    heights = [h for h in (0.5 * len(labels) + 1, 0.35 * len(sec) + 1) if h > 1]
    fig, axes = plt.subplots(len(heights), 1, figsize=(12, sum(heights) + 0.5),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    axes = list(axes[:, 0])
    if factors:
        ax = axes.pop(0)
        colors = ["#2a9d8f" if f >= 1 else "#e76f51" for f in factors]
        y = list(range(len(labels)))[::-1]
        ax.barh(y, factors, color=colors)
        ax.set_xscale("log")
        ax.axvline(1, color="black", linewidth=1)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=7)
        for yi, f in zip(y, factors):
            ax.text(f, yi, f" ×{f:.2f}", va="center", fontsize=7)
        ax.set_xlabel("Keel's advantage over Apache Kafka (>1: Keel better; log scale)")
        ax.set_title(f"Keel vs Apache Kafka on this machine, {results.facts['date']}")
    if sec:
        ax = axes.pop(0)
        y = list(range(len(sec)))[::-1]
        ax.barh(y, [r for _, _, r in sec], color=["#8d99ae" if s == "kafka" else "#2a9d8f" for _, s, _ in sec])
        ax.axvline(1, color="black", linewidth=1)
        ax.set_yticks(y)
        ax.set_yticklabels([textwrap.fill(f"{'Kafka' if s == 'kafka' else 'Keel'}: {t}", 70) for t, s, _ in sec],
                           fontsize=7)
        for yi, (_, _, r) in zip(y, sec):
            ax.text(r, yi, f" {r:.2f}", va="center", fontsize=7)
        ax.set_xlabel("SASL_SSL median / PLAINTEXT median, each system against itself (throughput: <1 is the cost)")
        ax.set_title("Every listener SASL_SSL against every listener PLAINTEXT")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110, bbox_inches="tight")
    plt.close(fig)


def machine() -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / (1 << 20)
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Linux {os.uname().release}, {java}"


# --------------------------------------------------------------------------------------------


WORKLOADS = ("throughput", "latency", "end-to-end", "transactions", "memory", "catch-up", "failover",
             "cold-start")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: sizes set by --quick, --only and --systems split into lists."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default="kafka,keel", help="comma-separated, run in this order (default kafka,keel)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--records", type=int, default=300_000, help="records per throughput run (1 KiB each)")
    p.add_argument("--latency-seconds", type=float, default=20, help="length of each fixed-rate run")
    p.add_argument("--latency-rate", type=float, help="records/s for the latency runs (default: half Kafka's max)")
    p.add_argument("--e2e-messages", type=int, default=2000)
    p.add_argument("--catchup-gb", type=float, default=2.0)
    p.add_argument("--cold-gb", type=float, default=10.0, help="log size for the cold-start rows (0: skip)")
    p.add_argument("--failover-repeats", type=int, default=3, help="runs for each kind of failover")
    p.add_argument("--failover-window", type=float, default=25, help="seconds to watch after each kill")
    p.add_argument("--kafka-heap", default="1g")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run in minutes: 1 repeat, small sizes (numbers not for publishing)")
    p.add_argument("--keep", action="store_true", help="keep the clusters' data directories")
    p.add_argument("--idempotence", choices=["default", "off"], default="default",
                   help="the Java producers' enable.idempotence: their default (on) or off")
    p.add_argument("--only", metavar="LIST",
                   help=f"comma-separated workloads to run, of {','.join(WORKLOADS)} (default: all; the "
                        "latency rate then comes from --latency-rate, --baseline or a throughput run)")
    p.add_argument("--baseline", type=Path, metavar="JSON",
                   help="take Apache Kafka's samples from an earlier run's <date>.json instead of running "
                        "Kafka again (with --systems keel: re-measure Keel after a change); the report says so")
    p.add_argument("--security", choices=SECURITY_MODES, default="plaintext",
                   help="plaintext (default): every listener PLAINTEXT. sasl_ssl: every listener (clients, "
                        "inter-broker, controller) SASL_SSL with PLAIN and a throwaway CA; only the "
                        f"{' and '.join(SECURE_WORKLOADS)} workloads run (produce acks=all, catch-up read), their "
                        f"rows keyed *{SASL_SUFFIX}. both: each system runs its PLAINTEXT cluster, then a fresh "
                        "SASL_SSL one, and the report gives every SASL_SSL row's ratio to the same row over PLAINTEXT")
    p.add_argument("--out", type=Path, help="report path (default bench/results/<date>.md)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.records, args.latency_seconds, args.e2e_messages = 1, 100_000, 8, 500
        args.catchup_gb, args.cold_gb, args.failover_repeats, args.failover_window = 0.2, 0.5, 1, 20
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [n for n in args.systems if n not in ("kafka", "keel")]:
        p.error(f"unknown system(s) {unknown}: expected kafka and/or keel")
    if args.only is not None:
        args.only = [w.strip() for w in args.only.split(",") if w.strip()]
        if not args.only:
            p.error(f"--only names no workload: expected some of {','.join(WORKLOADS)}")
        if unknown := [w for w in args.only if w not in WORKLOADS]:
            p.error(f"unknown workload(s) {unknown}: expected some of {','.join(WORKLOADS)}")
    args.securities = ["plaintext", "sasl_ssl"] if args.security == "both" else [args.security]
    if "sasl_ssl" in args.securities and not set(args.only or WORKLOADS) & set(SECURE_WORKLOADS):
        p.error(f"--security {args.security} measures only {','.join(SECURE_WORKLOADS)} over SASL_SSL, and --only "
                f"names neither of them")
    if args.baseline and "kafka" in args.systems:
        p.error("--baseline replaces the Kafka run: use it with --systems keel")
    return args


def main() -> int:
    args = parse_args()
    names = args.systems
    date = dt.date.today().isoformat()
    out_md = args.out or BENCH / "results" / f"{date}.md"
    out_md.parent.mkdir(parents=True, exist_ok=True)
    results = Results()
    results.facts.update(date=date, machine=machine())
    keel_binary = Path(os.environ.get("KEEL_BIN", REPO / "target" / "release" / "keel"))
    CACHE.mkdir(parents=True, exist_ok=True)
    securities = [Security(s, CACHE if s == "plaintext" else CACHE / s, args.idempotence == "off")
                  for s in args.securities]
    results.facts["security"] = {s.protocol: s.describe() for s in securities}
    tools = KafkaTools()
    bench = Bench(args, tools, keel_binary, results)
    baseline_title = None
    if args.baseline:
        old = json.loads(args.baseline.read_text())
        for row in old["rows"]:
            copy = results.row(row["key"], row["workload"], row["tool"], row["metric"], row["unit"],
                               row["higher_is_better"], tuple(row["ceiling"]) if row["ceiling"] else None)
            if row["samples"].get("kafka"):
                copy.samples["kafka"] = list(row["samples"]["kafka"])
            if row["errors"].get("kafka"):
                copy.errors["kafka"] = row["errors"]["kafka"]
        if old["facts"].get("latency_rate"):
            bench.rate_for_latency = float(old["facts"]["latency_rate"].split()[0].replace(",", ""))
        baseline_title = f"Apache Kafka {tools.version} (samples of {args.baseline.name}, {old['facts']['date']})"
        results.facts["baseline"] = (f"Apache Kafka's samples are those of `{args.baseline}` (same harness and "
                                     f"machine, {old['facts']['date']}); only Keel ran this time.")
        then = old["facts"].get("client_idempotence", "Java clients with `enable.idempotence=false` on both.")
        if then != results.facts["client_idempotence"]:
            results.facts["baseline"] += f" Its clients differed: {then[0].lower()}{then[1:]}"
    ceilings(results, CACHE / "scratch", 256 if args.quick else 2048)
    systems = []
    for name in names:
        # With --security both: the PLAINTEXT cluster, stopped and deleted, then a SASL_SSL one.
        for security in securities:
            run_dir = CACHE / "run" / (name if not security.secure else f"{name}-{security.name}")
            system = (Kafka(run_dir, tools, security, args.kafka_heap) if name == "kafka"
                      else Keel(run_dir, tools, security, keel_binary))
            systems.append(system)
            try:
                bench.run_all(system)
            except Exception as e:
                log(f"{system.name} ({security.protocol}): run aborted: {e}")
                results.facts[f"{system.name}{security.suffix}_aborted"] = str(e)
                results.facts.setdefault("failures", []).append(
                    f"{system.name} ({security.protocol}): run aborted: {e}")
                system.stop()
    (out_md.with_suffix(".json")).write_text(json.dumps(results.to_json(), indent=1))
    if baseline_title:
        systems.insert(0, type("Baseline", (), {"name": "kafka", "title": baseline_title})())
    write_report(results, systems, args, out_md)
    write_chart(results, out_md.with_suffix(".png"))
    print(out_md.read_text())
    log(f"wrote {out_md}, {out_md.with_suffix('.png')} and {out_md.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
