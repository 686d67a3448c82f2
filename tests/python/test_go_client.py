"""franz-go (github.com/twmb/franz-go, from the Go module proxy) against Keel: its producer with
default settings (idempotent, acks=all) writes through a partition leader's kill -9 in a
three-broker cluster, and the consumed log has no duplicates and no gaps (issue 9: "franz-go's
default producer ... work[s], including across a leader kill -9"); its GroupTransactSession
copies a topic exactly once through a broker's kill -9 (issue 23).

The programs are tests/go/franzproducer and tests/go/franzetl; `go build` compiles each into
tests/.cache/go once per source change (the module cache keeps franz-go between runs).
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from builds import go_build
from leader_kill9 import producer_through_leader_kill9

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "go" / "franzproducer"
BINARY = REPO / "tests" / ".cache" / "go" / "franzproducer"
ETL_SOURCE = REPO / "tests" / "go" / "franzetl"
ETL_BINARY = REPO / "tests" / ".cache" / "go" / "franzetl"


def build_producer() -> Path:
    return go_build(SOURCE, BINARY)


def test_franz_go_default_producer_through_a_leader_kill9(cluster):
    """6,000 numbered records to three partitions at 1,500 records/s; the leader of partition 0 is
    killed with -9 after 1,500 acknowledgements: every record is acknowledged and stored exactly
    once, in order."""
    producer = build_producer()
    producer_through_leader_kill9(cluster("franz-idem"), [str(producer)], "franz-idem")


def test_franz_go_group_transact_session_copies_exactly_once_through_a_kill9(cluster):
    """franz-go's GroupTransactSession reads 3,000 records of a three-partition topic as a group
    member (read_committed) and writes each transformed record with its group offsets in one
    transaction per poll. Once it is writing, the leader of the output partition is killed with
    -9, the second half of the input is written, and the broker comes back: the output read with
    read_committed holds every input record exactly once."""
    from clients import Rec, confluent_produce, confluent_watermarks, unique_topic
    from test_transactions import read_all

    etl = go_build(ETL_SOURCE, ETL_BINARY)
    c = cluster("franz-etl")
    src, out = unique_topic("etl-in"), unique_topic("etl-out")
    c.create_topic(src, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    c.create_topic(out, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    recs = [Rec(n % 3, None, f"in-{n}".encode(), 1_700_000_000_000 + n) for n in range(3000)]
    confluent_produce(c.live_bootstrap, src, recs[:1500])
    run = subprocess.Popen([str(etl), c.live_bootstrap, src, out, unique_topic("etl-group"),
                            unique_topic("etl-txn"), str(len(recs))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = c.partition_state(out)[0].leader

    def chaos() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            if confluent_watermarks(c.live_bootstrap, out, [0])[0][1] > 0:
                break
            time.sleep(0.2)
        c.kill9(victim)
        confluent_produce(c.live_bootstrap, src, recs[1500:])
        time.sleep(5)
        c.restart(victim)

    killer = threading.Thread(target=chaos, daemon=True)
    killer.start()
    try:
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    killer.join(120)
    assert run.returncode == 0 and "ETL-DONE" in stdout, f"exit {run.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
    got = read_all(c.live_bootstrap, out, [0], "read_committed", timeout_s=60)[0]
    assert sorted(got) == sorted(f"out-{n}".encode() for n in range(3000)), (
        f"{len(got)} records, {len(set(got))} distinct")
