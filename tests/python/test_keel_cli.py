"""The `keel` admin commands against a running broker, as an operator types them: topics create /
list / describe / delete, configs get / set / --delete, elect, status — readable output, `--json`
that parses, and bad input refused with a clear message and a non-zero exit.

Cites issue 7 ("keel admin commands against any running cluster"). The recovery-related commands
(`status` of a paused partition, `elect --leader N`) are exercised in test_unclean_recovery.py.
"""

from __future__ import annotations

import json
import subprocess

import kafka_wire as w
from clients import unique_topic
from keel_broker import free_port, keel_bin


def keel(broker, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(keel_bin()), *args, "--bootstrap-server", broker.bootstrap],
                         capture_output=True, text=True, timeout=60, env={"RUST_BACKTRACE": "0"})
    if ok:
        assert run.returncode == 0, f"keel {' '.join(args)} exited {run.returncode}: {run.stdout}{run.stderr}"
    else:
        assert run.returncode != 0, f"keel {' '.join(args)} should have failed: {run.stdout}"
    return run


def test_topics_lifecycle(shared_broker):
    """create → list → describe (table and JSON) → delete; a duplicate create and a describe of a
    missing topic fail with Kafka's error names."""
    b = shared_broker
    topic = unique_topic("cli")
    out = keel(b, "topics", "create", topic, "--partitions", "3", "--config", "retention.ms=3600000").stdout
    assert out.strip() == f"Created topic {topic}."
    again = keel(b, "topics", "create", topic, ok=False)
    assert "TopicAlreadyExists" in again.stderr, again.stderr
    assert topic in keel(b, "topics", "list").stdout.split()
    assert topic in json.loads(keel(b, "topics", "list", "--json").stdout)

    table = keel(b, "topics", "describe", topic).stdout.splitlines()
    assert table[0].split() == ["TOPIC", "PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR", "ELR",
                                "LAST-KNOWN-ELR", "OFFLINE", "STATE"], table
    assert len(table) == 4 and all(line.split()[0] == topic for line in table[1:]), table
    parts = json.loads(keel(b, "topics", "describe", topic, "--json").stdout)
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert len(p["replicas"]) == 1 and p["isr"] == p["replicas"] == [p["leader"]], p
        assert p["elr"] == [] and p["last_known_elr"] == [] and p["state"] == "led", p

    missing = keel(b, "topics", "describe", unique_topic("missing"), ok=False)
    assert "UnknownTopicOrPartition" in missing.stderr, missing.stderr
    assert keel(b, "topics", "delete", topic).stdout.strip() == f"Deleted topic {topic}."
    assert topic not in keel(b, "topics", "list").stdout.split()


def test_configs_get_set_delete(shared_broker):
    """configs set (several keys), get (table and JSON, explicit keys only unless --all), --delete;
    an invalid value and a malformed pair are refused and change nothing."""
    b = shared_broker
    topic = unique_topic("cli-configs")
    keel(b, "topics", "create", topic)
    keel(b, "configs", "set", "--topic", topic, "retention.ms=600000", "unclean.recovery.strategy=Manual")
    got = json.loads(keel(b, "configs", "get", "--topic", topic, "--json").stdout)
    assert got == {"retention.ms": "600000", "unclean.recovery.strategy": "manual"}, got
    everything = json.loads(keel(b, "configs", "get", "--topic", topic, "--all", "--json").stdout)
    assert "segment.bytes" in everything and everything["retention.ms"] == "600000"
    table = keel(b, "configs", "get", "--topic", topic).stdout
    assert "retention.ms" in table and "topic" in table, table

    bad = keel(b, "configs", "set", "--topic", topic, "unclean.recovery.strategy=Sometimes", ok=False)
    assert "InvalidConfig" in bad.stderr, bad.stderr
    malformed = keel(b, "configs", "set", "--topic", topic, "retention.ms", ok=False)
    assert "not key=value" in malformed.stderr, malformed.stderr
    keel(b, "configs", "set", "--topic", topic, "--delete", "unclean.recovery.strategy")
    got = json.loads(keel(b, "configs", "get", "--topic", topic, "--json").stdout)
    assert got == {"retention.ms": "600000"}, got


def test_elect_and_status_on_a_healthy_cluster(shared_broker):
    """Nothing to elect on a healthy partition (preferred and unclean say so, exit 0); a manual
    election of a broker that is not a replica fails; status lists nothing wrong."""
    b = shared_broker
    topic = unique_topic("cli-elect")
    keel(b, "topics", "create", topic, "--partitions", "2")
    out = keel(b, "elect", "--topic", topic, "--preferred").stdout
    assert out.splitlines() == [f"{topic}-0: no election needed", f"{topic}-1: no election needed"], out
    out = keel(b, "elect", "--topic", topic, "--partition", "1", "--unclean").stdout
    assert out.strip() == f"{topic}-1: no election needed", out
    refused = keel(b, "elect", "--topic", topic, "--partition", "0", "--leader", "5", ok=False)
    assert "broker 5 is not a replica" in refused.stdout, refused.stdout
    nothing = keel(b, "elect", "--topic", topic, ok=False)
    assert "--preferred" in nothing.stderr, nothing.stderr
    report = json.loads(keel(b, "status", "--json").stdout)
    assert report["offline"] == [] and report["under_min_isr"] == [], report
    assert len(report["brokers"]) == 1 and report["partitions"] >= 2, report


def test_elect_leaders_v0_through_a_broker(shared_broker):
    """ElectLeaders v0 (no top-level error code on the wire) is forwarded and answered per
    partition — ELECTION_NOT_NEEDED for a led partition, UNKNOWN_TOPIC_OR_PARTITION for a missing
    one — and the connection stays usable."""
    b = shared_broker
    topic = unique_topic("cli-v0")
    keel(b, "topics", "create", topic)
    body = (w.Writer().int32(2)
            .string(topic).int32(1).int32(0)
            .string("no-such-topic").int32(1).int32(0)
            .int32(30000).getvalue())
    with w.RawConnection.to(b.bootstrap) as conn:
        r = conn.call(43, 0, body)
        r.int32()  # throttle
        results = {}
        for _ in range(r.int32()):
            name = r.string()
            for _ in range(r.int32()):
                partition, code, _message = r.int32(), r.int16(), r.string()
                results[(name, partition)] = code
        assert r.remaining() == 0
        assert results == {(topic, 0): 84, ("no-such-topic", 0): 3}, results
        # The same connection answers the next request.
        r = conn.call(43, 0, body)
        assert r.int32() == 0


def test_errors_are_one_line_without_a_backtrace_even_with_rust_backtrace(shared_broker, tmp_path):
    """With RUST_BACKTRACE=1 (and RUST_LIB_BACKTRACE=1) set, an unreachable broker, a refused
    request, a bad argument value and a missing config file each print one `Error: ...` line
    (the causes joined) and exit 1 — no "Stack backtrace" from main's Result (issue 19)."""
    env = {"RUST_BACKTRACE": "1", "RUST_LIB_BACKTRACE": "1"}
    topic = unique_topic("cli-errors")
    keel(shared_broker, "topics", "create", topic)
    cases = {
        "unreachable broker": (["topics", "list", "--bootstrap-server", f"127.0.0.1:{free_port()}"],
                               "cannot reach a broker"),
        "refused request": (["topics", "create", topic, "--bootstrap-server", shared_broker.bootstrap],
                            "TopicAlreadyExists"),
        "bad argument": (["configs", "set", "--topic", topic, "retention.ms", "--bootstrap-server",
                          shared_broker.bootstrap], "not key=value"),
        "missing config file": (["server", "--config", str(tmp_path / "missing.properties")],
                                "cannot read config file"),
    }
    for case, (args, expected) in cases.items():
        run = subprocess.run([str(keel_bin()), *args], capture_output=True, text=True, timeout=60, env=env)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 1, f"{case}: exit {run.returncode}: {run.stderr}"
        assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], f"{case}: {run.stderr}"
        assert "backtrace" not in run.stderr.lower(), f"{case}: {run.stderr}"
