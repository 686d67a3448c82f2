#!/usr/bin/env python3
"""What authorization costs produce throughput (issue 22): ACLs on versus off, same run.

Two single-node Keel brokers (target/release/keel, temporary directories, 127.0.0.1 only) run
side by side:
- off: no `authorizer.class.name`;
- on: Kafka's StandardAuthorizer, no super user, the client (PLAINTEXT, so `User:ANONYMOUS`)
  allowed WRITE, CREATE, DESCRIBE and DELETE on the topics named `bench-*` (a PREFIXED binding) among
  --other-acls unrelated bindings (other users, other topics), so each request is decided by the
  index, not by a super-user shortcut. The ACLs are created by `keel acls add` while ANONYMOUS is
  a super user; the broker then restarts without one.
--runs pairs of `keel bench` runs (acks=1, a fresh topic each, no consumers) alternate between the
two, each topic deleted after its run; each shape is run twice: Keel's default batches (64 records of 1 KiB per request) and one
record of 100 bytes per request, where the per-request check weighs most. Prints each run and
the medians and the ratio on/off pair by pair (each pair ran back to back, after `sync`).

Usage: bench/acl_overhead.py [--runs 5] [--records 300000] [--small-records 50000] [--other-acls 1000]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEEL = REPO / "target" / "release" / "keel"
PRODUCE = re.compile(r"produce: (\d+) records in ([\d.]+) s: (\d+) records/s, ([\d.]+) MB/s")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Broker:
    def __init__(self, work: Path, port: int, props: dict[str, str]) -> None:
        self.work = work
        self.port = port
        self.props = {"node.id": "1", "log.dirs": str(work / "data"),
                      "listeners": f"PLAINTEXT://127.0.0.1:{port}", **props}
        self.proc = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.work / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        if not (self.work / "data" / "meta.properties").exists():
            subprocess.run([str(KEEL), "format", "--config", str(config)], check=True, capture_output=True)
        self.starts += 1
        log = open(self.work / "broker.log", "a")
        self.proc = subprocess.Popen([str(KEEL), "server", "--config", str(config)], stdout=log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            text = (self.work / "broker.log").read_text()
            if text.count("keel: ready") >= self.starts:
                return
            assert self.proc.poll() is None, text[-3000:]
            assert time.monotonic() < deadline, "broker not ready in 60 s"
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(60)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


def keel_acls(bootstrap: str, *args: str) -> None:
    subprocess.run([str(KEEL), "acls", "add", "--bootstrap-server", bootstrap, *args], check=True,
                   capture_output=True, timeout=120)


def bench(bootstrap: str, topic: str, records: int, record_bytes: int, batch: int) -> float:
    out = subprocess.run([str(KEEL), "bench", "--bootstrap", bootstrap, "--topic", topic, "--records", str(records),
                          "--record-bytes", str(record_bytes), "--batch-records", str(batch), "--acks", "1",
                          "--partitions", "6", "--consumers", "0"], capture_output=True, text=True, timeout=900)
    m = PRODUCE.search(out.stdout + out.stderr)
    assert m, out.stdout[-2000:] + out.stderr[-2000:]
    return float(m.group(3))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--small-records", type=int, default=50_000)
    parser.add_argument("--other-acls", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keel-acl-bench-") as tmp:
        off = Broker(Path(tmp) / "off", 29592, {})
        on = Broker(Path(tmp) / "on", 29594, {"authorizer.class.name": AUTHORIZER,
                                              "super.users": "User:ANONYMOUS"})
        for b in (off, on):
            b.work.mkdir()
            b.start()
        try:
            keel_acls(on.bootstrap, "--allow-principal", "User:ANONYMOUS", "--operation", "Write",
                      "--operation", "Create", "--operation", "Describe", "--operation", "Delete", "--topic", "bench-",
                      "--resource-pattern-type", "prefixed")
            # Unrelated bindings, 100 per request.
            for start in range(0, args.other_acls, 100):
                topics = []
                for i in range(start, min(start + 100, args.other_acls)):
                    topics += ["--topic", f"other-{i}"]
                keel_acls(on.bootstrap, "--allow-principal", f"User:user-{start}", "--operation", "Read", *topics)
            del on.props["super.users"]
            on.restart()
            results: dict[tuple[str, str], list[float]] = {}
            shapes = [("64 x 1 KiB", args.records, 1024, 64), ("1 x 100 B", args.small_records, 100, 1)]
            for run in range(args.runs):
                for shape, records, size, batch in shapes:
                    for name, b in (("off", off), ("on", on)):
                        topic = f"bench-{name}-{run}-{batch}"
                        # The previous run's dirty pages reach the disk first, not during this run.
                        os.sync()
                        time.sleep(1)
                        rate = bench(b.bootstrap, topic, records, size, batch)
                        # Deleted at once: every run starts on an empty disk and page cache.
                        subprocess.run([str(KEEL), "topics", "delete", topic, "--bootstrap-server", b.bootstrap],
                                       check=True, capture_output=True, timeout=120)
                        results.setdefault((shape, name), []).append(rate)
                        print(f"run {run + 1} {shape:>10} ACLs {name:>3}: {rate:>9.0f} records/s", flush=True)
            print()
            for shape, *_ in shapes:
                off_r, on_r = results[(shape, "off")], results[(shape, "on")]
                ratios = sorted(b / a for a, b in zip(off_r, on_r))
                print(f"{shape:>10}: ACLs off {statistics.median(off_r):>9.0f} records/s, on "
                      f"{statistics.median(on_r):>9.0f} records/s (median of {args.runs}); on/off pair by pair "
                      f"{ratios[0]:.3f} / {statistics.median(ratios):.3f} / {ratios[-1]:.3f} (min / median / max)")
        finally:
            for b in (off, on):
                b.stop()


if __name__ == "__main__":
    main()
