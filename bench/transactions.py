#!/usr/bin/env python3
"""Transactional produce on Keel (issue 23): transactions per second and commit latency.

Starts `keel dev` (target/release/keel: three controllers and three brokers on 127.0.0.1, a
temporary data directory; `__transaction_state` with RF 3 and min ISR 2) unless --bootstrap names
a running cluster. Then, --runs times, one librdkafka (confluent-kafka) transactional producer
(acks=all, idempotent, linger.ms 5) writes --transactions transactions of --records records of
--value-bytes bytes spread over a six-partition topic (RF 3, min.insync.replicas 2), committing
each; a fresh topic and transactional id per run. Prints each run (transactions/s, records/s,
commit_transaction latency p50 / p99: begin to commit answered, the records flushed first, as
librdkafka's commit does) and the median of the runs.

The commit is answered once PrepareCommit is durable in __transaction_state (acks=all); the
markers follow, as in Kafka.

Usage: bench/transactions.py [--runs 3] [--transactions 200] [--records 100] [--value-bytes 100]
                             [--bootstrap HOST:PORT]
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
KEEL = REPO / "target" / "release" / "keel"
PORT = 19192
PARTITIONS = 6


def start_dev(work: Path) -> tuple[subprocess.Popen, str]:
    log = open(work / "dev.log", "w")
    proc = subprocess.Popen([str(KEEL), "dev", "--data-dir", str(work / "data"), "--port", str(PORT),
                             "--no-metrics"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while "keel: ready" not in (work / "dev.log").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"keel dev did not start:\n{(work / 'dev.log').read_text()[-3000:]}")
        time.sleep(0.2)
    return proc, ",".join(f"127.0.0.1:{PORT + i}" for i in range(3))


def create_topic(bootstrap: str) -> str:
    name = f"txbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[name].result(30)
    time.sleep(1)  # leaders elected everywhere
    return name


def run(bootstrap: str, transactions: int, records: int, value_bytes: int) -> dict:
    topic = create_topic(bootstrap)
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"txbench-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 5, "acks": "all"})
    p.init_transactions(60)
    value = b"x" * value_bytes
    latencies = []
    started = time.monotonic()
    for _ in range(transactions):
        t = time.monotonic()
        p.begin_transaction()
        for i in range(records):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        p.commit_transaction(60)
        latencies.append((time.monotonic() - t) * 1000)
    elapsed = time.monotonic() - started
    latencies.sort()
    return {
        "txn_per_s": transactions / elapsed,
        "records_per_s": transactions * records / elapsed,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[max(0, int(len(latencies) * 0.99) - 1)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--transactions", type=int, default=200)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--bootstrap")
    a = ap.parse_args()
    proc = None
    with tempfile.TemporaryDirectory(prefix="keel-txbench-") as tmp:
        bootstrap = a.bootstrap
        if bootstrap is None:
            proc, bootstrap = start_dev(Path(tmp))
        try:
            results = []
            for n in range(a.runs):
                r = run(bootstrap, a.transactions, a.records, a.value_bytes)
                results.append(r)
                print(f"run {n + 1}: {r['txn_per_s']:.1f} txn/s, {r['records_per_s']:.0f} records/s, "
                      f"commit p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms", flush=True)
            med = {k: statistics.median(r[k] for r in results) for k in results[0]}
            print(f"median of {a.runs}: {med['txn_per_s']:.1f} txn/s, {med['records_per_s']:.0f} records/s, "
                  f"commit p50 {med['p50_ms']:.1f} ms, p99 {med['p99_ms']:.1f} ms "
                  f"({a.transactions} transactions x {a.records} records of {a.value_bytes} B, acks=all)")
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
