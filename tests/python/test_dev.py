"""`keel dev`: one command formats on first use and runs a local cluster (a controller and three
brokers) that clients can use; test_cluster.py checks its replication settings.

Cites the Keel CLI contract (DESIGN.md, Operator surface: `keel dev`).
"""

from __future__ import annotations

from clients import confluent_consume, confluent_produce_one, unique_topic
from keel_broker import CLEAN_FOUND


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
