"""Configurations as operators bring them to `keel format` and `keel server` (issue 19):

- Kafka 4.x's stock `config/server.properties` (KRaft combined mode, `controller.quorum.bootstrap
  .servers`, an empty host in `CONTROLLER://:9093`) formats the way Kafka's quickstart does it
  (`kafka-storage.sh format --standalone -t ID -c FILE`) and starts; clients produce and consume;
- an authorizer setting Keel cannot honour (ZooKeeper's AclAuthorizer, a class Keel does not
  have, a malformed `super.users`) stops `keel format`, `keel server` and `keel dev` with one line
  naming the key, instead of serving without it. (TLS and SASL are served since issue 21:
  test_tls.py, test_sasl.py; Kafka's StandardAuthorizer since issue 22: test_acls.py.)

Cites issue 19 ("Refuse what it does not do"; "Kafka 4.x's stock config/server.properties must
start") and KIP-853 (controller.quorum.bootstrap.servers, `kafka-storage format --standalone`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from clients import confluent_consume, confluent_produce_one, unique_topic
from keel_broker import Broker, free_port, keel_bin
from keel_cluster import random_cluster_id

CLI_TIMEOUT_S = 60


def kafka_4_server_properties(data_dir: Path, port: int, controller_port: int) -> dict[str, str]:
    """Every setting of Kafka 4.x's `config/server.properties` (its comments left out), with the
    ports and `log.dirs` of this test instead of 9092, 9093 and /tmp/kraft-combined-logs."""
    return {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"localhost:{controller_port}",
        "listeners": f"PLAINTEXT://:{port},CONTROLLER://:{controller_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "advertised.listeners": f"PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "num.network.threads": "3",
        "num.io.threads": "8",
        "socket.send.buffer.bytes": "102400",
        "socket.receive.buffer.bytes": "102400",
        "socket.request.max.bytes": "104857600",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "num.recovery.threads.per.data.dir": "1",
        "offsets.topic.replication.factor": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "log.retention.hours": "168",
        "log.segment.bytes": "1073741824",
        "log.retention.check.interval.ms": "300000",
    }


class StockBroker(Broker):
    """A `keel server` run from Kafka 4.x's stock settings."""

    def __init__(self, workdir: Path, **kwargs) -> None:
        self.controller_port = free_port()
        super().__init__(workdir, **kwargs)

    def default_config(self) -> dict[str, str]:
        return kafka_4_server_properties(self.data_dir, self.port, self.controller_port)


def keel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(keel_bin()), *args], capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          env={"RUST_BACKTRACE": "1"})


def write_config(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_kafka_4_stock_server_properties_start(tmp_path):
    """`keel format --standalone -t ID -c server.properties` then `keel server -c server.properties`
    with Kafka 4.x's stock settings: the combined node binds both listeners on every interface,
    resolves its single-voter quorum from controller.quorum.bootstrap.servers, and a record
    produced to localhost:PORT is consumed back. `--standalone` with a quorum of several voters is
    refused."""
    b = StockBroker(tmp_path / "stock", name="stock")
    config = write_config(b.config_path, b.config)
    cluster_id = random_cluster_id()
    out = keel("format", "--standalone", "-t", cluster_id, "-c", str(config))
    assert out.returncode == 0, f"keel format --standalone: {out.stdout}{out.stderr}"
    assert cluster_id in out.stdout, out.stdout
    b.formatted, b.cluster_id = True, cluster_id
    try:
        b.start()
        assert b.bootstrap == f"localhost:{b.port}", b.bootstrap
        topic = unique_topic("stock")
        err, _ = confluent_produce_one(b.bootstrap, topic, b"from a stock server.properties")
        assert err is None, f"produce: {err}"
        got = confluent_consume(b.bootstrap, topic, [0], {0: 1})
        assert [r.value for _, r in got[0]] == [b"from a stock server.properties"]
        assert b.terminate() == 0, b.log_tail()
    finally:
        b.stop()

    several = dict(b.config)
    several["controller.quorum.voters"] = f"1@localhost:{b.controller_port},2@localhost:{free_port()}"
    refused = keel("format", "--standalone", "-t", cluster_id, "-c",
                   str(write_config(tmp_path / "several.properties", several)))
    assert refused.returncode == 1 and "--standalone" in refused.stderr, refused


def refused_everywhere(tmp_path: Path, extra: dict[str, str], named: str, says: str) -> None:
    """`keel format`, `keel server` and `keel dev --override` each refuse a config with `extra`
    at once, in one line that names `named` and says `says`; format wrote nothing."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "data"
    port = free_port()
    props = {"node.id": "1", "log.dirs": str(data), "listeners": f"PLAINTEXT://127.0.0.1:{port}", **extra}
    config = write_config(tmp_path / "server.properties", props)
    runs = {
        "format": keel("format", "-c", str(config)),
        "server": keel("server", "-c", str(config)),
        "dev": keel("dev", "--data-dir", str(tmp_path / "dev"), "--port", str(free_port()), "--no-metrics",
                    *[a for k, v in extra.items() for a in ("--override", f"{k}={v}")]),
    }
    for command, run in runs.items():
        assert run.returncode == 1, f"keel {command} with {extra} exited {run.returncode}: {run.stdout}{run.stderr}"
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0] and says in lines[0], \
            f"keel {command} with {extra}: {run.stderr}"
    assert not data.exists(), f"a refused format wrote {list(data.iterdir())}"
    assert not (tmp_path / "dev").exists(), "a refused keel dev formatted its data directory"


def test_an_authorizer_keel_cannot_honour_is_refused_not_run_without_authorization(tmp_path):
    """An authorizer other than Kafka's StandardAuthorizer would let every principal do everything
    if Keel ran without it: format, server and dev refuse ZooKeeper's AclAuthorizer (saying why),
    a class Keel does not have, and a `super.users` without a principal type, naming the key."""
    refused_everywhere(tmp_path / "acl-authorizer",
                       {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
                       "authorizer.class.name", "kept its ACLs in ZooKeeper")
    refused_everywhere(tmp_path / "custom",
                       {"authorizer.class.name": "com.example.MyAuthorizer"},
                       "authorizer.class.name", "is not an authorizer Keel has")
    refused_everywhere(tmp_path / "super-users",
                       {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "super.users": "admin"},
                       "super.users", "admin")


def test_a_sasl_listener_without_a_mechanism_does_not_start(tmp_path):
    """A SASL listener that enables no mechanism (Kafka's default is GSSAPI, which Keel does not
    have) stops `keel server` before it serves anything, naming the setting — not a listener
    that lets everyone in. TLS and SASL are otherwise served (test_tls.py, test_sasl.py)."""
    port = free_port()
    data = tmp_path / "data"
    config = write_config(tmp_path / "server.properties", {
        "node.id": "1", "log.dirs": str(data), "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}"})
    assert keel("format", "-c", str(config)).returncode == 0
    run = keel("server", "-c", str(config))
    assert run.returncode != 0, run.stderr[-2000:]
    # The broker's own identity on its inter-broker listener is checked first.
    assert "sasl.mechanism.inter.broker.protocol" in run.stderr and "GSSAPI" in run.stderr, run.stderr[-2000:]
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";'
    config = write_config(tmp_path / "server.properties", {
        "node.id": "1", "log.dirs": str(data), "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    run = keel("server", "-c", str(config))
    assert run.returncode != 0, run.stderr[-2000:]
    assert "sasl.enabled.mechanisms" in run.stderr and "GSSAPI" in run.stderr, run.stderr[-2000:]
