"""`keel bench` against a running broker: it produces and consumes the records it says it did and
prints throughput and latency lines (issue 4: "a benchmark command that prints numbers").
Timing is never asserted; only that the tool works and reports every phase."""

from __future__ import annotations

import re
import subprocess

from keel_broker import keel_bin


def test_bench_reports_produce_consume_and_latency(broker):
    """A small run with two producers and two consumers over 3 partitions at acks=all reports
    the exact record counts for both phases and the latency percentiles."""
    run = subprocess.run(
        [str(keel_bin()), "bench", "--bootstrap", broker.bootstrap, "--records", "3000",
         "--record-bytes", "100", "--batch-records", "50", "--partitions", "3",
         "--producers", "2", "--consumers", "2", "--acks", "all"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, f"keel bench failed\nstdout:\n{run.stdout}\nstderr:\n{run.stderr[-3000:]}"
    assert re.search(r"^produce: 3000 records in [\d.]+ s: \d+ records/s, [\d.]+ MB/s$", run.stdout, re.M), run.stdout
    assert re.search(r"^consume: 3000 records in ", run.stdout, re.M), run.stdout
    assert re.search(r"p50 [\d.]+ +p99 [\d.]+ +p99\.9 [\d.]+", run.stdout), run.stdout


def test_bench_refuses_bad_acks(broker):
    """Bad input gets a clear error and a non-zero exit, not a panic."""
    run = subprocess.run(
        [str(keel_bin()), "bench", "--bootstrap", broker.bootstrap, "--acks", "two"],
        capture_output=True, text=True, timeout=60,
    )
    assert run.returncode != 0
    assert "--acks must be all, 1 or 0" in run.stderr
