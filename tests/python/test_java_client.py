"""Apache Kafka's own Java client (kafka-clients 4.1, from Maven Central) against Keel: admin
(create, describe, incremental config change, list, describe cluster), a producer per compression
with acks=all (idempotent, the default), an assign()-based consumer that reads every record back in
order, and a subscribe()-based group consumer that commits; and the producer with its default
settings writing through a partition leader's kill -9 in a three-broker cluster.

Cites issue 2 ("check the Java client 4.x works") and issue 9 ("The Java producer with default
settings ... writes through a leader kill -9 and the consumed log has no duplicates and no
gaps"). The programs are tests/java/KeelJavaClientCheck.java and KeelIdempotentProducer.java;
Maven only resolves the classpath (cached in tests/.cache/java).
"""

from __future__ import annotations

import subprocess
from pathlib import Path


from builds import java_build
from leader_kill9 import producer_through_leader_kill9

REPO = Path(__file__).resolve().parents[2]
JAVA_DIR = REPO / "tests" / "java"
CACHE = REPO / "tests" / ".cache" / "java"
RECORDS_PER_COMPRESSION = 2000
JAVA_PROGRAMS = ["KeelJavaClientCheck", "KeelIdempotentProducer", "KeelTransactions", "KeelTransactionsChaos",
                 "KeelTransactionsEtlChaos"]


def build_check() -> tuple[Path, str]:
    """Compiles the check once per source change; returns (classes dir, classpath)."""
    return java_build(JAVA_DIR / "pom.xml", CACHE, [JAVA_DIR / f"{p}.java" for p in JAVA_PROGRAMS])


def test_java_client_round_trip(start_broker):
    """Against `keel dev` (three brokers; `__consumer_offsets` with RF 3 and min ISR 2), the Java
    client creates, describes and reconfigures a topic, produces 10,000 records over
    five compressions with acks=all and its default (idempotent) settings, consumes them back
    identical, in order, offsets from 0, then reads them once more as a consumer group and finds
    its committed offsets from a new consumer."""
    classes, classpath = build_check()
    broker = start_broker("java-dev", mode="dev")
    run = subprocess.run(
        ["java", "-cp", f"{classes}:{classpath}", "KeelJavaClientCheck", broker.bootstrap,
         str(RECORDS_PER_COMPRESSION), "3"],
        capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0 and "JAVA-CLIENT-OK" in run.stdout, (
        f"java check failed (exit {run.returncode})\nstdout:\n{run.stdout[-4000:]}\nstderr:\n{run.stderr[-4000:]}"
    )


def test_java_default_producer_through_a_leader_kill9(cluster):
    """Issue 9: the Java producer with its default settings (idempotent, acks=all) writes 6,000
    numbered records to three partitions at 1,500 records/s while the leader of partition 0 is
    killed with -9: every send succeeds and the log holds every record exactly once, in order —
    no duplicates from the retries, no gaps."""
    classes, classpath = build_check()
    producer_through_leader_kill9(cluster("java-idem"),
                                  ["java", "-cp", f"{classes}:{classpath}", "KeelIdempotentProducer"], "java-idem")


def test_java_transactions(start_broker):
    """Issue 23, against `keel dev` (three brokers, __transaction_state with RF 3 and min ISR 2):
    the Java producer's transactions (interleaved commits and aborts: read_committed reads exactly
    the committed records) and consume-transform-produce with sendOffsetsToTransaction (aborted
    rounds redone; every input transformed once, the group's offset at the end)."""
    classes, classpath = build_check()
    broker = start_broker("java-txn", mode="dev")
    run = subprocess.run(
        ["java", "-cp", f"{classes}:{classpath}", "KeelTransactions", broker.bootstrap, "3", "dev"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0 and "JAVA-TXN-OK" in run.stdout, (
        f"java transactions failed (exit {run.returncode})\nstdout:\n{run.stdout[-4000:]}\n"
        f"stderr:\n{run.stderr[-4000:]}"
    )
