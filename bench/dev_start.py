#!/usr/bin/env python3
"""How long `keel dev` takes to become ready (issue 20): --runs fresh starts (a new data
directory each: format, controller election, registration, unfencing) and as many restarts of
the last one (after a clean stop), each timed from the process start to its `keel: ready` line.

Usage: bench/dev_start.py [--runs 5] [--port 29192] [--keel target/release/keel]
"""
import argparse
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def start(keel: Path, data: Path, port: int) -> float:
    """Starts `keel dev`, returns the seconds to its ready line, stops it cleanly."""
    began = time.monotonic()
    proc = subprocess.Popen([str(keel), "dev", "--data-dir", str(data), "--port", str(port), "--no-metrics"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:
            if "keel: ready" in line:
                return time.monotonic() - began
        raise SystemExit(f"keel dev exited with {proc.wait()} before it was ready")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--port", type=int, default=29192)
    ap.add_argument("--keel", type=Path, default=REPO / "target" / "release" / "keel")
    args = ap.parse_args()
    fresh, again = [], []
    with tempfile.TemporaryDirectory(prefix="keel-dev-start-") as tmp:
        for i in range(args.runs):
            data = Path(tmp) / f"run-{i}"
            fresh.append(start(args.keel, data, args.port))
            again.append(start(args.keel, data, args.port))
            print(f"run {i}: fresh {fresh[-1]:.2f} s, restart {again[-1]:.2f} s", flush=True)
    print(f"keel dev ready (median of {args.runs}): fresh {statistics.median(fresh):.2f} s "
          f"(min {min(fresh):.2f}, max {max(fresh):.2f}), restart {statistics.median(again):.2f} s "
          f"(min {min(again):.2f}, max {max(again):.2f})")


if __name__ == "__main__":
    main()
