"""`keel dev`: one command formats on first use and runs a local cluster (a controller and three
brokers) that clients can use; test_cluster.py checks its replication settings.

Cites the Keel CLI contract (DESIGN.md, Operator surface: `keel dev`).
"""

from __future__ import annotations

import random
import time

import confluent_kafka as ck
import kafka as kp

from confluent_kafka.admin import NewTopic

from clients import (RDKAFKA_LOG, confluent_admin, confluent_consume, confluent_produce_one, unique_topic,
                     wait_for_leaders)
from keel_broker import CLEAN_FOUND

GROUP_WAIT_S = 60


def test_dev_round_trip_and_sigterm(start_broker):
    """`keel dev --data-dir D --port P` becomes ready, serves a produce/consume through confluent-kafka,
    and exits 0 on SIGTERM; a second start reuses the data (no re-format) after a clean stop."""
    b = start_broker("dev", mode="dev")
    topic = unique_topic("dev")
    err, msg = confluent_produce_one(b.bootstrap, topic, b"hello from keel dev")
    assert err is None, f"produce to keel dev: {err}"
    got = confluent_consume(b.bootstrap, topic, [0], {0: 1})
    assert [r.value for _, r in got[0]] == [b"hello from keel dev"]
    assert b.terminate() == 0, f"keel dev exit code {b.last_returncode}\n{b.log_tail()}"
    assert b.data_dir.is_dir() and any(b.data_dir.iterdir()), f"keel dev wrote nothing under {b.data_dir}"

    b.start()
    assert CLEAN_FOUND in b.log_text(), f"second `keel dev` start did not find its clean shutdown file\n{b.log_tail()}"
    got = confluent_consume(b.bootstrap, topic, [0], {0: 1})
    assert [r.value for _, r in got[0]] == [b"hello from keel dev"]
    assert b.terminate() == 0


def test_a_fresh_dev_cluster_logs_no_warning(start_broker):
    """A fresh `keel dev` (formatted on this start; its brokers register while the controller
    quorum is still electing) becomes ready, serves a topic created with `keel topics create`,
    acks=all production and a consumer group that commits, and stops on SIGTERM — without a single
    WARN or ERROR line: the normal start of a cluster is not a warning (issue 19)."""
    import subprocess

    from keel_broker import keel_bin

    b = start_broker("dev-quiet", mode="dev")
    topic = unique_topic("dev-quiet")
    created = subprocess.run([str(keel_bin()), "topics", "create", topic, "--partitions", "3",
                              "--bootstrap-server", b.bootstrap.split(",")[0]],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "logger": RDKAFKA_LOG})
    for i in range(30):
        producer.produce(topic, f"quiet-{i}".encode())
    assert producer.flush(30) == 0, "records left unacknowledged"
    got = read_as_group("confluent", b.bootstrap, topic, unique_topic("dev-quiet-group"), 30)
    assert sorted(got) == sorted(f"quiet-{i}".encode() for i in range(30)), got
    assert b.terminate() == 0, b.log_tail()
    noisy = [line for line in b.log_text().splitlines() if " WARN " in line or " ERROR " in line]
    assert not noisy, "a fresh keel dev logged warnings:\n" + "\n".join(noisy[:20])


def test_format_writes_meta_properties(tmp_path):
    """`keel format --config F --cluster-id ID` prints the id and writes meta.properties with
    cluster.id and node.id in the log dir (Kafka's `kafka-storage format`, KIP-631)."""
    import subprocess

    from keel_broker import Broker, keel_bin

    cluster_id = "MkU3OEVBNTcwNTJENDM2Qk"
    b = Broker(tmp_path, name="format-only")
    b.config_path.write_text("".join(f"{k}={v}\n" for k, v in b.config.items()))
    out = subprocess.run([str(keel_bin()), "format", "--config", str(b.config_path), "--cluster-id", cluster_id],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert cluster_id in out.stdout, out.stdout
    meta = b.log_dir / "meta.properties"
    assert meta.is_file(), f"no meta.properties in {b.log_dir}"
    props = dict(line.split("=", 1) for line in meta.read_text().splitlines() if "=" in line and not line.startswith("#"))
    assert props.get("cluster.id") == cluster_id, props
    assert props.get("node.id") == "1", props


def test_format_refuses_a_cluster_id_that_is_not_kafkas(tmp_path):
    """`keel format -t ID` (and `--cluster-id`) refuses an id that is not 22 characters of URL-safe
    base64 encoding 16 bytes, as `kafka-storage.sh format` does, with a message saying what the form
    is — and writes nothing (issue 19). Kafka's documented `MkU3OEVBNTcwNTJENDM2Qk` is accepted."""
    import subprocess

    from keel_broker import Broker, keel_bin

    b = Broker(tmp_path, name="format-bad-id")
    b.config_path.write_text("".join(f"{k}={v}\n" for k, v in b.config.items()))
    for flag, bad in [("-t", "my-cluster"), ("--cluster-id", "MkU3OEVBNTcwNTJENDM2QkMkU3"),
                      ("-t", "MkU3OEVBNTcwNTJENDM2Q"), ("-t", "MkU3OEVBNTcwNTJENDM2Q+"), ("-t", "")]:
        out = subprocess.run([str(keel_bin()), "format", "--config", str(b.config_path), flag, bad],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, f"{flag} {bad!r} accepted: {out.stdout}{out.stderr}"
        assert "is not a Kafka cluster id" in out.stderr and "22 characters" in out.stderr, out.stderr
        assert not b.log_dir.exists(), f"{flag} {bad!r}: a refused format wrote {b.log_dir}"
    out = subprocess.run([str(keel_bin()), "format", "--config", str(b.config_path), "-t", "MkU3OEVBNTcwNTJENDM2Qk"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def read_as_group(kind: str, bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    """Subscribes with the client's default group settings, reads `count` records, commits them."""
    got: list[bytes] = []
    deadline = time.monotonic() + GROUP_WAIT_S
    if kind == "confluent":
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "logger": RDKAFKA_LOG})
        c.subscribe([topic])
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        c.commit(asynchronous=False)
        committed = c.committed([ck.TopicPartition(topic, p) for p in range(3)], timeout=10)
        c.close()
        total = sum(max(tp.offset, 0) for tp in committed)
    else:
        c = kp.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest")
        while len(got) < count and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                got.extend(m.value for m in msgs)
        c.commit()
        total = sum(c.committed(kp.TopicPartition(topic, p)) or 0 for p in range(3))
        c.close()
    assert total == count, f"{kind}: committed offsets add up to {total}, read {len(got)} of {count}"
    return got


def test_client_defaults_against_keel_dev(start_broker):
    """Issue 9's "done when": against `keel dev` (three brokers, RF 3, min ISR 2, a replicated
    `__consumer_offsets`), librdkafka and kafka-python produce idempotently and read back as
    consumer groups with their default group settings (subscribe, automatic assignment,
    commits); each group's committed offsets cover every record. The Java client does the same
    in test_java_client.py."""
    b = start_broker("dev-clients", mode="dev")
    topic = unique_topic("dev-defaults")
    admin = confluent_admin(b.bootstrap)
    new = NewTopic(topic, num_partitions=3, replication_factor=-1)  # keel dev's default: 3
    admin.create_topics([new])[topic].result(timeout=30)
    wait_for_leaders(admin, topic, 3)
    values = []
    producer = ck.Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "logger": RDKAFKA_LOG})
    for n in range(300):
        producer.produce(topic, key=str(n % 7).encode(), value=f"rdkafka-{n}".encode())
        values.append(f"rdkafka-{n}".encode())
    assert producer.flush(30) == 0
    kp_producer = kp.KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, acks="all")
    for n in range(300):
        kp_producer.send(topic, key=str(n % 7).encode(), value=f"kafka-python-{n}".encode())
        values.append(f"kafka-python-{n}".encode())
    kp_producer.flush(30)
    kp_producer.close()
    for kind in ("confluent", "kafka-python"):
        got = read_as_group(kind, b.bootstrap, topic, unique_topic(f"dev-{kind}"), len(values))
        assert sorted(got) == sorted(values), f"{kind}: {len(got)} records, {len(set(got))} distinct"


def test_dev_fails_at_once_when_a_port_is_taken(tmp_path):
    """`keel dev` whose second broker port is taken exits non-zero at once, naming the port and
    the reason, instead of never printing ready (issue 20; on d704e1a it waited forever)."""
    import socket
    import subprocess

    from keel_broker import keel_bin

    import random

    def free(port):
        probe = socket.socket()
        try:
            probe.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
        finally:
            probe.close()

    # Ports below the kernel's ephemeral range, so no outgoing connection of this machine holds
    # broker 0's or broker 2's port by chance; another process still may between the probe and
    # the run, so an attempt whose error names a port other than the held one is tried again.
    for _ in range(5):
        base = random.randrange(20000, 32000)
        if not (free(base) and free(base + 2)):
            continue
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", base + 1))
        except OSError:
            holder.close()
            continue
        holder.listen()
        taken = base + 1
        try:
            run = subprocess.run([str(keel_bin()), "dev", "--data-dir", str(tmp_path / f"dev-{base}"), "--port",
                                  str(base), "--no-metrics"], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"keel dev did not exit with its port {taken} taken:\n{e.stderr}") from None
        finally:
            holder.close()
        assert run.returncode != 0, run.stderr[-3000:]
        assert "keel: ready" not in run.stderr, run.stderr[-3000:]
        if "dev broker 1 could not start" not in run.stderr and "Address already in use" in run.stderr:
            continue  # another process took broker 0's or 2's port meanwhile
        assert f"127.0.0.1:{taken}" in run.stderr and "dev broker 1 could not start" in run.stderr, run.stderr[-3000:]
        return
    raise AssertionError("no free port range found for the test in five attempts")


def test_dev_warns_about_ports_in_the_ephemeral_range(tmp_path):
    """`keel dev --port P` with P inside the kernel's ephemeral port range
    (/proc/sys/net/ipv4/ip_local_port_range) warns that an outgoing connection may hold it, and
    still starts; a port below the range gets no such warning (issue 20)."""
    import subprocess
    from pathlib import Path

    from keel_broker import keel_bin

    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert high - low > 10

    def launch(port: int) -> str:
        proc = subprocess.Popen([str(keel_bin()), "dev", "--data-dir", str(tmp_path / f"dev-{port}"), "--port",
                                 str(port), "--no-metrics"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                text=True)
        lines = []
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                lines.append(line)
                if "keel: ready" in line:
                    break
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return "".join(lines)

    # What the warning is about can happen here too: another test's outgoing connection may
    # hold one of the three ports between the check and the bind. Then try other ports.
    rng = random.Random()
    for _ in range(5):
        port = rng.randrange(low + 5, high - 10)
        text = launch(port)
        if "Address already in use" not in text:
            break
    assert "keel: ready" in text, text[-3000:]
    assert "ephemeral port range" in text and f"{low}-{high}" in text, text[-3000:]
