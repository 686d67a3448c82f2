"""`keel server` with `process.roles=controller` (issue 4, "a process role ... as in KRaft"):
`keel format` formats its metadata.log.dir, the controller listener serves Kafka's controller
RPCs (its ApiVersions lists BrokerRegistration, BrokerHeartbeat and AlterPartition), SIGTERM
stops it with exit code 0, and unknown roles are refused with a clear error.
The cluster behaviour itself is tested in crates/node/tests/node/{controller_server,cluster_follow}.rs.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time

import kafka_wire as w
from keel_broker import free_port, keel_bin

READY = re.compile(r"keel: controller ready at (\S+)")
API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT, API_ALTER_PARTITION = 62, 63, 56


def write_config(path, lines: dict[str, str]):
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))


def test_controller_role_serves_controller_rpcs(tmp_path):
    """A controller-only process formats, starts, answers ApiVersions with the controller APIs,
    and exits 0 on SIGTERM."""
    port = free_port()
    config = tmp_path / "controller.properties"
    write_config(config, {
        "node.id": "100",
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "metadata.log.dir": str(tmp_path / "meta"),
    })
    fmt = subprocess.run([str(keel_bin()), "format", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert fmt.returncode == 0, fmt.stderr
    assert (tmp_path / "meta" / "meta.properties").exists()

    log = (tmp_path / "controller.log").open("w")
    proc = subprocess.Popen([str(keel_bin()), "server", "--config", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.time() + 30
        addr = None
        while time.time() < deadline and addr is None:
            m = READY.search((tmp_path / "controller.log").read_text())
            addr = m.group(1) if m else None
            assert proc.poll() is None, (tmp_path / "controller.log").read_text()
            time.sleep(0.05)
        assert addr == f"127.0.0.1:{port}", (tmp_path / "controller.log").read_text()
        with w.RawConnection.to(addr) as conn:
            versions = w.api_versions(conn, 0)
        assert versions.error_code == 0
        for key in (API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT, API_ALTER_PARTITION):
            assert key in versions.api_keys, versions.api_keys
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_unknown_roles_are_refused(tmp_path):
    """Roles Keel does not know are refused: exit non-zero with a clear reason. (Brokers with
    `controller.quorum.voters` run in a cluster: test_cluster.py; combined mode and the
    single-node cluster run a controller in the broker's process.)"""
    config = tmp_path / "refused.properties"
    write_config(config, {"node.id": "1", "process.roles": "observer"})
    run = subprocess.run([str(keel_bin()), "server", "--config", str(config)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "unknown role" in run.stderr, run.stderr
