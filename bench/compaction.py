#!/usr/bin/env python3
"""Log cleaner throughput: one Keel broker (target/release/keel, in a temporary directory),
one compacted topic per codec, each filled with MB megabytes of keyed records (KEYS distinct keys,
1000-byte values, half random so codecs compress about 2:1), then the broker's own "compacted log"
lines read back: the bytes the passes read, their wall time and MB/s, and the size of the
cleaned segments after the last pass. Each topic is then read
from the start with librdkafka to check it holds every key and nothing else twice.

Usage: bench/compaction.py [--mb 200] [--keys 10000] [--codecs none,lz4,zstd,snappy,gzip]
                           [--segment-mb 16]

Needs confluent-kafka (tests/requirements.txt; run it with .venv/bin/python). Uses 127.0.0.1 only.
"""
import argparse
import collections
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"partition=(\S+)-0 segments=(\d+) bytes_before=(\d+) bytes_after=(\d+) "
                  r"records_removed=(\d+) .* elapsed_ms=(\d+)")


def produce(bootstrap: str, topic: str, codec: str, mb: int, keys: int) -> int:
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                     "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20})
    tail = b"v" * 500
    count = mb * 1024
    for i in range(count):
        while True:
            try:
                p.produce(topic, key=b"key-%06d" % (i % keys), value=os.urandom(500) + tail)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(120) == 0
    return count


def verify(bootstrap: str, topic: str, keys: int) -> str:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{topic}",
                     "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    seen, last = collections.Counter(), -1
    while True:
        m = c.poll(10)
        assert m is not None, "no end of partition within 10 s"
        if m.error():
            assert m.error().code() == ck.KafkaError._PARTITION_EOF, m.error()
            break
        assert m.offset() > last
        last = m.offset()
        seen[m.key()] += 1
    c.close()
    assert len(seen) == keys, f"{len(seen)} keys read, {keys} written"
    return f"{sum(seen.values())} records read back, {len(seen)} keys"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--codecs", default="none,lz4,zstd,snappy,gzip")
    parser.add_argument("--segment-mb", type=int, default=16)
    args = parser.parse_args()
    binary = REPO / "target" / "release" / "keel"
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "keel"], cwd=REPO, check=True)
    with tempfile.TemporaryDirectory(prefix="keel-compaction-") as work:
        work = Path(work)
        port = 29392
        props = work / "server.properties"
        props.write_text(f"node.id=1\nlog.dirs={work / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:{port}\n"
                         "log.cleaner.backoff.ms=500\n")
        subprocess.run([binary, "format", "--config", props, "--cluster-id=AAAAAAAAAAAAAAAAAAAAAg"],
                       check=True, capture_output=True)
        log = open(work / "broker.log", "w")
        broker = subprocess.Popen([binary, "server", "--config", props], stdout=log, stderr=subprocess.STDOUT)
        bootstrap = f"127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while "keel: ready" not in (work / "broker.log").read_text():
                assert time.monotonic() < deadline and broker.poll() is None, "the broker did not start"
                time.sleep(0.1)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            print(f"{args.mb} MB per codec, {args.keys} keys, 1000-byte values, "
                  f"{args.segment_mb} MiB segments")
            print(f"{'codec':8} {'passes':>6} {'MB read':>8} {'seconds':>8} {'MB/s':>6} {'MB after':>9}  read back")
            for codec in args.codecs.split(","):
                topic = f"compacted-{codec}"
                config = {"cleanup.policy": "compact", "segment.bytes": str(args.segment_mb << 20)}
                admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result()
                produce(bootstrap, topic, codec, args.mb, args.keys)
                # Let the cleaner catch up: no new pass for three backoffs.
                passes, quiet_since = [], time.monotonic()
                while time.monotonic() - quiet_since < 2.0:
                    found = [m for m in LINE.finditer((work / "broker.log").read_text()) if m.group(1) == topic]
                    if len(found) != len(passes):
                        passes, quiet_since = found, time.monotonic()
                    time.sleep(0.2)
                assert passes, f"no compaction of {topic}: its data fits the active segment"
                read = sum(int(m.group(3)) for m in passes) / 1e6
                after = int(passes[-1].group(4)) / 1e6
                seconds = sum(int(m.group(6)) for m in passes) / 1e3
                rate = read / seconds if seconds else 0.0
                print(f"{codec:8} {len(passes):>6} {read:>8.1f} {seconds:>8.2f} {rate:>6.0f} {after:>9.1f}  "
                      f"{verify(bootstrap, topic, args.keys)}")
        finally:
            broker.terminate()
            broker.wait(30)
            log.close()


if __name__ == "__main__":
    main()
