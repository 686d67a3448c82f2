#!/usr/bin/env python3
"""What a topic's compression.type costs the broker (issue 20): librdkafka produces the same
compressible records in one codec into topics that keep the producer's codec and into topics that
store another one, and the broker's CPU time per uncompressed megabyte is read from
/proc/<pid>/stat around each run.

One Keel broker (target/release/keel, or --keel PATH, in a temporary directory, 127.0.0.1 only),
acks=1, one partition per topic, a fresh topic per run. Each scenario is "PRODUCER_CODEC>TOPIC_TYPE"
(e.g. gzip>zstd: gzip batches into a topic with compression.type=zstd); runs of the scenarios
alternate, and the script prints each run and the medians.

Usage: bench/recompression.py [--records 100000] [--runs 3] [--keel PATH]
                              [--scenarios none>producer,gzip>producer,gzip>zstd,zstd>producer,zstd>zstd]
"""
import argparse
import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
PORT = 29592
RECORD_BYTES = 1024
TICKS = os.sysconf("SC_CLK_TCK")


def start_broker(keel: Path, work: Path) -> subprocess.Popen:
    config = work / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={work / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:{PORT}\n"
                      "log.retention.ms=-1\n")
    subprocess.run([str(keel), "format", "--config", str(config)], check=True, capture_output=True)
    log = open(work / "broker.log", "w")
    proc = subprocess.Popen([str(keel), "server", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while "keel: ready" not in (work / "broker.log").read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, "broker did not start"
        time.sleep(0.1)
    return proc


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def payloads(n: int) -> list[bytes]:
    """Log-like records that compress about 4:1, like real JSON events."""
    rng = random.Random(20)
    words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(400)]
    out = []
    for i in range(n):
        text = b'{"seq": %d, "user": "%s", "event": "' % (i, rng.choice(words))
        while len(text) < RECORD_BYTES - 2:
            text += rng.choice(words) + b" "
        out.append(text[:RECORD_BYTES - 2] + b'"}')
    return out


def run(bootstrap: str, pid: int, producer_codec: str, topic_type: str, records: list[bytes]) -> tuple[float, float]:
    """Produces `records` once; returns (MB/s of uncompressed records, broker CPU ms per MB)."""
    topic = f"recompress-{producer_codec}-{topic_type}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {} if topic_type == "producer" else {"compression.type": topic_type}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1_000_000, "compression.type": producer_codec,
                         "queue.buffering.max.kbytes": 1_048_576, "enable.idempotence": False})
    failures = []
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(30)
    cpu_before, start = cpu_seconds(pid), time.perf_counter()
    for i, value in enumerate(records):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=lambda e, _m: e and failures.append(e))
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(300)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu_before
    assert not failures, failures[:3]
    megabytes = len(records) * RECORD_BYTES / 1e6
    return megabytes / elapsed, cpu * 1000 / megabytes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keel", type=Path, default=REPO / "target" / "release" / "keel")
    parser.add_argument("--scenarios", default="none>producer,gzip>producer,gzip>zstd,zstd>producer,zstd>zstd")
    args = parser.parse_args()
    scenarios = [tuple(s.split(">")) for s in args.scenarios.split(",")]
    records = payloads(args.records)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {s: [] for s in scenarios}
    with tempfile.TemporaryDirectory(prefix="keel-recompress-") as tmp:
        proc = start_broker(args.keel, Path(tmp))
        try:
            for r in range(args.runs):
                for scenario in scenarios:
                    mbps, cpu_ms = run(f"127.0.0.1:{PORT}", proc.pid, *scenario, records)
                    results[scenario].append((mbps, cpu_ms))
                    print(f"run {r + 1} {scenario[0]}>{scenario[1]}: {mbps:.1f} MB/s, broker {cpu_ms:.1f} CPU ms/MB",
                          flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    print(f"median of {args.runs} runs of {args.records} x {RECORD_BYTES} B records (MB uncompressed):")
    for (producer_codec, topic_type), rows in results.items():
        print(f"  {producer_codec:>5} > {topic_type:<9} {statistics.median(m for m, _ in rows):7.1f} MB/s"
              f"  broker {statistics.median(c for _, c in rows):6.1f} CPU ms/MB")


if __name__ == "__main__":
    main()
