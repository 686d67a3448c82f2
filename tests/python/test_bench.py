"""`keel bench` against a running broker: it produces and consumes the records it says it did and
prints throughput and latency lines (issue 4: "a benchmark command that prints numbers"); its
catch-up (`--consume-only`) and end-to-end (`--end-to-end`) modes; and bench/compare.py's parsing
and report (issue 8; the side-by-side run itself takes half an hour and is a command, not a test:
docs/benchmarks.md). Timing is never asserted; only that the tools count, parse and report
correctly."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from clients import unique_topic
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


REPO = Path(__file__).resolve().parents[2]


def bench(broker, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(keel_bin()), "bench", "--bootstrap", broker.bootstrap, *args],
                         capture_output=True, text=True, timeout=120, env={"RUST_BACKTRACE": "0"})
    if ok:
        assert run.returncode == 0, f"keel bench {' '.join(args)} exited {run.returncode}: {run.stdout}{run.stderr}"
    else:
        assert run.returncode != 0, f"keel bench {' '.join(args)} should have failed: {run.stdout}"
    return run


def compare_module():
    spec = importlib.util.spec_from_file_location("bench_compare", REPO / "bench" / "compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compare"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_consume_only_reads_exactly_what_the_topic_holds(shared_broker):
    """Two producing runs into one topic, then a catch-up read counts both runs' records, from
    the log start offsets to the end offsets it found — no more, no fewer."""
    topic = unique_topic("bench-catchup")
    for _ in range(2):
        out = bench(shared_broker, "--topic", topic, "--partitions", "3", "--records", "3000",
                    "--batch-records", "50", "--record-bytes", "100", "--consumers", "0").stdout
        assert re.search(r"^produce: 3000 records in", out, re.M), out
    out = bench(shared_broker, "--topic", topic, "--consume-only", "--consumers", "2",
                "--record-bytes", "100").stdout
    assert "3 partitions, 6000 records to read, 2 consumers" in out, out
    assert re.search(r"^consume: 6000 records in [\d.]+ s: \d+ records/s", out, re.M), out


def test_consume_only_refuses_a_missing_topic(shared_broker):
    run = bench(shared_broker, "--topic", unique_topic("absent"), "--consume-only", ok=False)
    assert "does not exist" in run.stderr, run.stderr
    run = bench(shared_broker, "--consume-only", ok=False)  # which topic?
    assert "--topic" in run.stderr, run.stderr


def test_end_to_end_measures_every_record(shared_broker):
    """Each record is timed from its send until the long-polling consumer has it; the summary
    covers all of them, with ordered percentiles."""
    topic = unique_topic("bench-e2e")
    out = bench(shared_broker, "--topic", topic, "--partitions", "1", "--end-to-end", "200",
                "--acks", "all").stdout
    m = re.search(r"end-to-end latency \((\d+) records of 1024 B, acks=-1, ms\): avg ([\d.]+)\s+p50 ([\d.]+)"
                  r"\s+p99 ([\d.]+)\s+p99\.9 ([\d.]+)\s+max ([\d.]+)", out)
    assert m, out
    assert int(m.group(1)) == 200
    p50, p99, p999, top = (float(m.group(i)) for i in range(3, 7))
    assert 0 < p50 <= p99 <= p999 <= top, out
    # the topic now holds exactly those records
    out = bench(shared_broker, "--topic", topic, "--consume-only", "--consumers", "1").stdout
    assert "200 records to read" in out, out
    # acks=0 cannot time a record (no offset comes back): refused before anything is sent
    run = bench(shared_broker, "--topic", topic, "--end-to-end", "5", "--acks", "0", ok=False)
    assert "--acks 1 or all" in run.stderr, run.stderr
    # an existing topic keeps its partition count (the default --partitions is 6)
    run = bench(shared_broker, "--topic", topic, "--end-to-end", "5")
    assert "already exists with 1 partitions" in run.stderr, run.stderr
    assert "end-to-end latency (5 records" in run.stdout, run.stdout


def test_compare_parses_the_tools_output():
    c = compare_module()
    line = ("300000 records sent, 23850.1 records/sec (23.29 MB/sec), 1021.30 ms avg latency, "
            "1900.00 ms max latency, 4 ms 50th, 950 ms 95th, 1433 ms 99th, 1622 ms 99.9th.")
    got = c.parse_producer_perf("some progress line\n" + line + "\n")
    assert got == {"records": 300000, "rps": 23850.1, "MBps": 23.29, "avg": 1021.3, "p50": 4.0,
                   "p99": 1433.0, "p999": 1622.0}
    keel_out = ("topic t: 6 partitions, 1000 records x 1024 B, batches of 64, 2 producers, acks=all\n"
                "produce: 1024 records in 0.01 s: 102400 records/s, 104.9 MB/s\n"
                "produce latency (per request, ms): p50 0.12  p99 0.40  p99.9 0.90  max 1.00\n"
                "consume: 1024 records in 0.02 s: 51200 records/s, 52.4 MB/s\n")
    got = c.parse_keel_bench(keel_out)
    assert got["produce"]["MBps"] == 104.9 and got["consume"]["records"] == 1024
    assert got["latency"] == {"p50": 0.12, "p99": 0.40, "p999": 0.90}


def test_compare_report_has_ratios_and_ceilings(tmp_path):
    """The report's arithmetic: medians, min–max, Keel/Kafka and which side is ahead, for a
    higher-is-better and a lower-is-better row, and a row one side could not measure."""
    c = compare_module()
    r = c.Results()
    r.facts.update(date="2026-11-30", machine="test machine", latency_rate="1,000 records/s")
    r.ceilings.update(seq_write_buffered_MBps=3000, seq_write_fdatasync_end_MBps=1000,
                      seq_write_fsync_each_MiB_MBps=900, loopback_tcp_MBps=4000)
    tput = r.row("tput", "produce", "tool", "throughput", "MB/s", True, ceiling=(1000.0, "a limit"))
    for v in (10, 30, 20):
        r.add(tput, "kafka", v)
    for v in (50, 40, 60):
        r.add(tput, "keel", v)
    lat = r.row("lat", "latency", "tool", "p99", "ms", False)
    r.add(lat, "kafka", 2.0)
    r.add(lat, "keel", 8.0)
    missing = r.row("cp", "catch-up", "ConsumerPerformance", "throughput", "MB/s", True)
    r.add(missing, "kafka", 100)
    r.fail(missing, "keel", "The node does not support FIND_COORDINATOR")

    class Args:
        repeats, failover_repeats, records, kafka_heap = 3, 2, 1000, "1g"

    out = tmp_path / "report.md"
    c.write_report(r, [], Args(), out)
    text = out.read_text()
    assert "| produce | tool | throughput | 20.0 (10.0–30.0) MB/s | 50.0 (40.0–60.0) MB/s | 2.50 | Keel ×2.50 | " \
           "2 % / 5 % of 1,000 MB/s |" in text, text
    assert "| latency | tool | p99 | 2.00 ms | 8.00 ms | 4.00 | Kafka ×4.00 | — |" in text, text
    assert "not measured: The node does not support FIND_COORDINATOR" in text, text
    assert "| loopback TCP, one stream | 4,000 |" in text, text


def test_compare_command_line():
    """bench/compare's options: --quick sets the small sizes, --only and --systems are checked
    lists, --baseline replaces only the Kafka run; bad values exit with argparse's usage error."""
    import pytest

    c = compare_module()
    args = c.parse_args(["--systems", "keel", "--only", "cold-start, failover", "--cold-gb", "4"])
    assert args.systems == ["keel"] and args.only == ["cold-start", "failover"] and args.cold_gb == 4
    assert args.idempotence == "default"
    quick = c.parse_args(["--quick"])
    assert quick.repeats == 1 and quick.cold_gb == 0.5 and quick.only is None
    assert quick.systems == ["kafka", "keel"]
    for bad in (["--only", "cold"], ["--only", ","], ["--systems", "redpanda"],
                ["--baseline", "x.json"], ["--idempotence", "on"]):
        with pytest.raises(SystemExit):
            c.parse_args(bad)
