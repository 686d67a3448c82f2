#!/usr/bin/env python3
"""The scrubber's cost (issue 19): how fast it validates segments, and what it takes from
produce throughput while it runs.

One Keel broker (target/release/keel, in a temporary directory, 127.0.0.1 only):
1. fill: `keel bench` produces --fill-mb megabytes (acks=1, 4 partitions, 64 MiB segments) with the
   scrubber off;
2. scrub throughput: the broker restarts with the scrubber unthrottled; its first pass (which
   starts at once) is timed from its own "scrub pass complete" line — with the page cache warm,
   and (as root) again after dropping it (`/proc/sys/vm/drop_caches`), which reads the disk;
3. produce throughput: --runs pairs of `keel bench` runs (acks=1, --produce-mb each, a fresh topic),
   alternating a broker with the scrubber off and one scrubbing the filled log continuously at
   --rate-mb MB/s (the default `log.scrub.bytes.per.second` is 50 MiB/s); medians and the ratio.

Usage: bench/scrub.py [--fill-mb 2048] [--produce-mb 1024] [--runs 3] [--rate-mb 50]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEEL = REPO / "target" / "release" / "keel"
PASS = re.compile(r"scrub pass complete partitions=(\d+) segments=(\d+) bytes=(\d+) damaged=(\d+) elapsed_ms=(\d+)")
PRODUCE = re.compile(r"produce: (\d+) records in ([\d.]+) s: (\d+) records/s, ([\d.]+) MB/s")
PORT = 29492
METRICS_PORT = 29493
RECORD_BYTES = 1024


class Broker:
    def __init__(self, work: Path, props: dict[str, str]) -> None:
        self.work = work
        self.props = {"node.id": "1", "log.dirs": str(work / "data"),
                      "listeners": f"PLAINTEXT://127.0.0.1:{PORT}", "log.segment.bytes": str(64 << 20),
                      "log.retention.ms": "-1", "log.retention.bytes": "-1",
                      "metrics.port": str(METRICS_PORT), "metrics.host": "127.0.0.1", **props}
        self.proc = None
        self.log = None

    def start(self) -> None:
        config = self.work / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        if not (self.work / "data" / "meta.properties").exists():
            subprocess.run([str(KEEL), "format", "--config", str(config)], check=True, capture_output=True)
        self.log = open(self.work / "broker.log", "w")
        self.proc = subprocess.Popen([str(KEEL), "server", "--config", str(config)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while "keel: ready" not in self.text():
            assert self.proc.poll() is None, self.text()[-3000:]
            assert time.monotonic() < deadline, "broker not ready in 60 s"
            time.sleep(0.1)

    def text(self) -> str:
        return (self.work / "broker.log").read_text(errors="replace")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def scrubbed_bytes() -> int:
    """The running broker's `keel_log_scrub_bytes_total`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("keel_log_scrub_bytes_total{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("no keel_log_scrub_bytes_total")


def bench(*args: str) -> str:
    out = subprocess.run([str(KEEL), "bench", "--bootstrap", f"127.0.0.1:{PORT}", *args], capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def drop_caches() -> bool:
    if os.geteuid() != 0:
        return False
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    return True


def scrub_pass(work: Path, cold: bool) -> tuple[int, int]:
    """(bytes, elapsed ms) of the first scrub pass of an unthrottled broker."""
    if cold and not drop_caches():
        raise SystemExit("dropping the page cache needs root")
    b = Broker(work, {"log.scrub.bytes.per.second": str(1 << 40)})
    b.start()
    deadline = time.monotonic() + 600
    while not (m := PASS.search(b.text())) or int(m.group(3)) == 0:
        assert time.monotonic() < deadline, "no scrub pass in 600 s"
        time.sleep(0.2)
    b.stop()
    return int(m.group(3)), int(m.group(5))


def produce_run(work: Path, scrub: bool, rate_mb: int, produce_mb: int, run: int) -> float:
    props = ({"log.scrub.bytes.per.second": str(rate_mb << 20), "log.scrub.interval.ms": "1"} if scrub
             else {"log.scrub.enable": "false"})
    b = Broker(work, props)
    b.start()
    try:
        before = scrubbed_bytes()
        out = bench("--topic", f"produce-{'on' if scrub else 'off'}-{run}", "--partitions", "4", "--acks", "1",
                    "--records", str(produce_mb * 1024), "--record-bytes", str(RECORD_BYTES), "--consumers", "0")
        during = scrubbed_bytes() - before
    finally:
        b.stop()
    m = PRODUCE.search(out)
    assert m, out
    seconds = float(m.group(2))
    if scrub:
        assert during > 0, "the scrubber did not run during the produce run"
        print(f"  the scrubber validated {during / 1e6:.0f} MB during the {seconds:.1f} s run "
              f"({during / 1e6 / max(seconds, 1e-9):.0f} MB/s)")
    else:
        assert during == 0, "the scrubber ran while it was off"
    return float(m.group(4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fill-mb", type=int, default=2048)
    parser.add_argument("--produce-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate-mb", type=int, default=50)
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "keel"], cwd=REPO, check=True)
    with tempfile.TemporaryDirectory(prefix="keel-scrub-", dir=REPO / "target") as work:
        work = Path(work)
        b = Broker(work, {"log.scrub.enable": "false"})
        b.start()
        print(bench("--topic", "filled", "--partitions", "4", "--acks", "1", "--records", str(args.fill_mb * 1024),
                    "--record-bytes", str(RECORD_BYTES), "--consumers", "0").strip())
        b.stop()
        warm = scrub_pass(work, cold=False)
        print(f"scrub, page cache warm: {warm[0] / 1e6:.0f} MB in {warm[1] / 1000:.2f} s: "
              f"{warm[0] / 1e3 / max(warm[1], 1):.0f} MB/s")
        if os.geteuid() == 0:
            cold = scrub_pass(work, cold=True)
            print(f"scrub, page cache dropped: {cold[0] / 1e6:.0f} MB in {cold[1] / 1000:.2f} s: "
                  f"{cold[0] / 1e3 / max(cold[1], 1):.0f} MB/s")
        off, on = [], []
        for run in range(args.runs):
            off.append(produce_run(work, False, args.rate_mb, args.produce_mb, run))
            on.append(produce_run(work, True, args.rate_mb, args.produce_mb, run))
            print(f"run {run}: produce {off[-1]:.1f} MB/s without the scrubber, {on[-1]:.1f} MB/s while it "
                  f"scrubs at {args.rate_mb} MB/s")
        ratios = [b / a for a, b in zip(off, on)]
        print(f"produce (acks=1, median of {args.runs}): {statistics.median(off):.1f} MB/s without, "
              f"{statistics.median(on):.1f} MB/s with the scrubber at {args.rate_mb} MB/s "
              f"(with/without, median of pairs: {statistics.median(ratios):.3f})")


if __name__ == "__main__":
    main()
