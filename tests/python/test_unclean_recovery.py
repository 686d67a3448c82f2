"""KIP-966's Unclean Recovery Manager with real processes: every ELR member is lost uncleanly
(kill -9, so each comes back through an unclean registration and lands in the LastKnownELR), and
the controller recovers the partition by its `unclean.recovery.strategy`:

- Balanced waits until every LastKnownELR member has answered GetReplicaLogInfo — even past
  Proactive's 5 seconds, while one of them is paused — then elects the longest log of the highest
  leader epoch, so nothing is lost;
- Proactive, with an ELR member still down, elects whoever answered once its 5 seconds pass;
- Manual stays paused, visibly (`keel status`, `keel topics describe`), until `keel elect
  --leader N`;
- Manual, once an operator starts a recovery (`keel elect --unclean --balanced`), is reported as
  recovering — no longer paused — by every broker and by the controller's metrics, also after a
  controller failover, and elects the longest log once every LastKnownELR member answers.

The partition's history is the same in each test: replicas [0, 1, 2], min ISR 2. Records A are
written with acks=all to all three; broker 2 is killed, records B go to 0 and 1 (acks=all); broker
1 is killed (ISR {0}, ELR {1}), records C go to broker 0 alone (acks=1: acknowledged by the leader,
never committed); broker 0 is killed. So broker 0 has the longest log (A+B+C), broker 1 has A+B,
broker 2 has A, all in the same leader epoch.

Cites issue 7 (tests: "all ELR members lose data uncleanly → Balanced waits ...; Proactive with one
member missing elects after the timeout; Manual stays paused ... until keel elect --leader N") and
issue 19 ("a partition whose recovery an operator started is reported as recovering").
The `keel` admin CLI is what the tests read the partition with.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from clients import confluent_consume, confluent_produce, make_records, unique_topic
from keel_broker import free_port, keel_bin

CONTROLLER = {"broker.session.timeout.ms": "3000"}
A, B, C = 60, 40, 30


def keel(*args: str, bootstrap: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the `keel` admin CLI against `bootstrap` (one broker)."""
    run = subprocess.run([str(keel_bin()), *args, "--bootstrap-server", bootstrap.split(",")[0]],
                         capture_output=True, text=True, timeout=60)
    if check:
        assert run.returncode == 0, f"keel {' '.join(args)} exited {run.returncode}: {run.stdout}{run.stderr}"
    return run


def describe(cluster, topic: str) -> dict:
    """Partition 0 of `topic` as `keel topics describe --json` shows it."""
    out = keel("topics", "describe", topic, "--json", bootstrap=cluster.live_bootstrap)
    return next(p for p in json.loads(out.stdout) if p["partition"] == 0)


def wait_describe(cluster, topic: str, predicate, what: str, timeout_s: float = 60.0) -> dict:
    return cluster.wait_for(lambda: (lambda p: p if predicate(p) else None)(describe(cluster, topic)),
                            timeout_s, what, state=lambda: describe(cluster, topic))


def lose_every_eligible_replica(cluster, strategy: str) -> tuple[str, list, list]:
    """Builds the history in the module docstring; returns (topic, acks=all records, acks=1 records).
    Every broker is down when it returns."""
    topic = unique_topic(f"urm-{strategy.lower()}")
    cluster.create_topic(topic, assignment=[[0, 1, 2]],
                         config={"min.insync.replicas": "2", "unclean.recovery.strategy": strategy})
    acked = [r for r, _ in confluent_produce(cluster.live_bootstrap, topic, make_records(A, 1, tag="a"))]
    cluster.kill9(2)
    cluster.wait_for_isr(topic, 0, [0, 1])
    acked += [r for r, _ in confluent_produce(cluster.live_bootstrap, topic, make_records(B, 1, tag="b"))]
    cluster.kill9(1)
    cluster.wait_for_isr(topic, 0, [0])
    p = describe(cluster, topic)
    assert p["elr"] == [1], f"broker 1 left the ISR at min ISR, so it is in the ELR: {p}"
    leader_only = [r for r, _ in confluent_produce(cluster.live_bootstrap, topic, make_records(C, 1, tag="c"),
                                                   acks="1")]
    cluster.kill9(0)
    # Let the controller fence broker 0 (session timeout 3 s) before anything restarts.
    time.sleep(4)
    return topic, acked, leader_only


def values(recs) -> list[bytes]:
    return [r.value for r in recs]


def read_all(cluster, topic: str, expected: int) -> list[bytes]:
    got = confluent_consume(cluster.live_bootstrap, topic, [0], {0: expected})
    return [rec.value for _, rec in got[0]]


def test_balanced_waits_for_every_last_known_elr_member(cluster):
    """Balanced: with broker 1 back and broker 0 paused, the recovery waits (well past 5 s) for
    broker 0's answer; once it answers, broker 0 — the longest log — is elected and every record,
    even the leader-only ones, is readable."""
    c = cluster("urm-balanced", controller=CONTROLLER)
    topic, acked, leader_only = lose_every_eligible_replica(c, "Balanced")

    c.restart(0)
    p = wait_describe(c, topic, lambda p: p["last_known_elr"] == [0],
                      "broker 0's unclean restart moves it from the ELR to the LastKnownELR")
    assert p["leader"] == -1 and p["elr"] == [1] and p["state"] == "waiting-for-elr", p
    c.sigstop(0)
    c.restart(1)
    p = wait_describe(c, topic, lambda p: p["last_known_elr"] == [0, 1],
                      "broker 1's unclean restart: ELR empty, LastKnownELR {0, 1}")
    assert p["elr"] == [] and p["state"] == "unclean-recovery", p
    assert "0,1" in p["waiting_for"], p
    status = keel("status", bootstrap=c.live_bootstrap).stdout
    assert topic in status and "Balanced unclean recovery" in status, status

    # Proactive would elect broker 1 after 5 s; Balanced must not while broker 0 has not answered.
    deadline = time.monotonic() + 9
    while time.monotonic() < deadline:
        p = describe(c, topic)
        assert p["leader"] == -1, f"elected without broker 0's answer: {p}"
        time.sleep(0.5)

    c.sigcont(0)
    resumed = time.monotonic()
    p = wait_describe(c, topic, lambda p: p["leader"] >= 0, "a leader once broker 0 answers")
    print(f"\nBalanced: leader elected {time.monotonic() - resumed:.2f}s after the paused member resumed")
    assert p["leader"] == 0, f"Balanced elects the longest log of the highest epoch (broker 0): {p}"
    c.restart(2)
    got = read_all(c, topic, A + B + C)
    assert got == values(acked + leader_only), f"read {len(got)} records, expected {A + B + C}"


def test_proactive_elects_after_the_timeout_without_the_missing_member(cluster):
    """Proactive: broker 0 (an ELR member) stays down; broker 1 answers and is elected once the
    5 seconds pass. Every acks=all record survives; the leader-only records on broker 0 are gone —
    the trade Proactive makes by design."""
    c = cluster("urm-proactive", controller=CONTROLLER)
    topic, acked, _ = lose_every_eligible_replica(c, "Proactive")

    c.restart(1)
    back = time.monotonic()
    p = wait_describe(c, topic, lambda p: p["leader"] >= 0, "Proactive elects without broker 0", timeout_s=60)
    print(f"\nProactive: leader elected {time.monotonic() - back:.2f}s after broker 1 was ready")
    assert p["leader"] == 1, p
    assert not c.nodes[0].alive(), "broker 0 stayed down throughout"
    # The high watermark moves again once the ISR is back at min ISR (KIP-966's strict rule).
    c.restart(2)
    got = read_all(c, topic, A + B)
    assert got == values(acked), f"read {len(got)} records, expected the {A + B} acks=all ones"


def controller_gauge(ports: list[int], name: str) -> float:
    """The sum of gauge `name` over the controllers' metrics endpoints that answer (only the active
    controller reports a non-zero value)."""
    total = 0.0
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError:  # a controller the test killed
            continue
        for line in text.splitlines():
            if line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def paused_partitions(ports: list[int]) -> float:
    """The sum of `keel_paused_partitions_count` over the controllers' metrics endpoints."""
    return controller_gauge(ports, "keel_paused_partitions_count")


def recovery_counts(ports: list[int]) -> tuple[float, float]:
    """(paused, under unclean recovery) partitions, as the controllers' metrics count them."""
    return paused_partitions(ports), controller_gauge(ports, "keel_unclean_recovery_partitions_count")


def test_manual_stays_paused_until_an_operator_elects(cluster):
    """Manual: with every replica back, the partition stays leaderless and says it waits for an
    operator (`keel status`, `paused_partitions_count`); `keel elect --leader 0` elects broker 0 —
    an unclean election the answer warns about — and every record is readable."""
    c = cluster("urm-manual", controller=CONTROLLER, start=False)
    ports = []
    for controller in c.controllers:
        ports.append(free_port())
        controller.config["metrics.port"] = str(ports[-1])
    c.start()
    assert paused_partitions(ports) == 0
    topic, acked, leader_only = lose_every_eligible_replica(c, "Manual")

    for i in (0, 1, 2):
        c.restart(i)
    p = wait_describe(c, topic, lambda p: p["state"] == "paused", "the partition paused for an operator")
    assert p["leader"] == -1 and p["elr"] == [] and p["last_known_elr"] == [0, 1], p
    time.sleep(6)
    p = describe(c, topic)
    assert p["leader"] == -1 and p["state"] == "paused", f"Manual never elects on its own: {p}"
    status = keel("status", "--json", bootstrap=c.live_bootstrap).stdout
    offline = json.loads(status)["offline"]
    assert [(o["topic"], o["state"]) for o in offline] == [(topic, "paused")], status
    text = keel("status", bootstrap=c.live_bootstrap).stdout
    assert "keel elect" in text, text
    c.wait_for(lambda: paused_partitions(ports) == 1, 10, "paused_partitions_count 1 on the active controller",
               state=lambda: paused_partitions(ports))

    refused = keel("elect", "--topic", topic, "--partition", "0", "--leader", "7", bootstrap=c.live_bootstrap,
                   check=False)
    assert refused.returncode != 0 and "not a replica" in refused.stdout, refused
    asked = time.monotonic()
    out = keel("elect", "--topic", topic, "--partition", "0", "--leader", "0", bootstrap=c.live_bootstrap).stdout
    print(f"\nManual: `keel elect --leader 0` answered in {time.monotonic() - asked:.2f}s")
    assert f"{topic}-0: elected; warning" in out, out
    p = wait_describe(c, topic, lambda p: p["leader"] >= 0, "the operator's leader")
    assert p["leader"] == 0 and p["state"] == "led", p
    c.wait_for(lambda: paused_partitions(ports) == 0, 10, "paused_partitions_count back to 0",
               state=lambda: paused_partitions(ports))
    got = read_all(c, topic, A + B + C)
    assert got == values(acked + leader_only), f"read {len(got)} records, expected {A + B + C}"


def test_manual_recovery_started_by_an_operator_is_reported_as_recovering(cluster):
    """Manual: broker 0 (the longest log) is SIGSTOPped after its unclean restart and broker 1 comes
    back, so the partition is paused for an operator. `keel elect --unclean --balanced` starts a
    Balanced recovery, which waits for broker 0: from then on `keel topics describe`, `keel status`
    and the controller's metrics (paused 0, under unclean recovery 1) say it is recovering — also
    after the active controller is killed and another takes over the recovery. Once broker 0
    resumes and answers, it is elected and every record is readable."""
    c = cluster("urm-manual-recover", controller=CONTROLLER, start=False)
    ports = []
    for controller in c.controllers:
        ports.append(free_port())
        controller.config["metrics.port"] = str(ports[-1])
    c.start()
    topic, acked, leader_only = lose_every_eligible_replica(c, "Manual")

    c.restart(0)
    wait_describe(c, topic, lambda p: p["last_known_elr"] == [0], "broker 0's unclean restart")
    c.sigstop(0)
    c.restart(1)
    p = wait_describe(c, topic, lambda p: p["state"] == "paused", "the partition paused for an operator")
    assert p["last_known_elr"] == [0, 1] and p["elr"] == [], p
    c.wait_for(lambda: recovery_counts(ports) == (1, 0), 10, "paused 1, recovering 0",
               state=lambda: recovery_counts(ports))

    out = keel("elect", "--topic", topic, "--partition", "0", "--unclean", "--balanced",
               bootstrap=c.live_bootstrap).stdout
    assert out.strip() == f"{topic}-0: unclean recovery started", out
    p = wait_describe(c, topic, lambda p: p["state"] == "unclean-recovery", "the partition reported as recovering")
    assert p["leader"] == -1 and "0,1" in p["waiting_for"], p
    offline = json.loads(keel("status", "--json", bootstrap=c.live_bootstrap).stdout)["offline"]
    assert [(o["topic"], o["state"]) for o in offline] == [(topic, "unclean-recovery")], offline
    c.wait_for(lambda: recovery_counts(ports) == (0, 1), 10, "paused 0, recovering 1",
               state=lambda: recovery_counts(ports))

    # The URM's task lives in the active controller's memory; a new one carries the recovery on.
    old = c.wait_for_active_controller()
    c.controllers[old].kill9()
    c.wait_for_active_controller(other_than=old)
    c.wait_for(lambda: recovery_counts(ports) == (0, 1), 20, "the new active controller: paused 0, recovering 1",
               state=lambda: recovery_counts(ports))
    p = describe(c, topic)
    assert p["leader"] == -1 and p["state"] == "unclean-recovery", p

    c.sigcont(0)
    p = wait_describe(c, topic, lambda p: p["leader"] >= 0, "a leader once broker 0 answers")
    assert p["leader"] == 0 and p["state"] == "led", f"Balanced elects the longest log (broker 0): {p}"
    c.wait_for(lambda: recovery_counts(ports) == (0, 0), 10, "nothing paused or recovering",
               state=lambda: recovery_counts(ports))
    c.restart(2)
    got = read_all(c, topic, A + B + C)
    assert got == values(acked + leader_only), f"read {len(got)} records, expected {A + B + C}"
