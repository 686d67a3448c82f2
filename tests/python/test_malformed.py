"""Malformed bytes on the wire never take the broker down.

DESIGN.md (Wire): "Oversized or malformed frames get an error and a closed connection, never a
panic"; unknown or too-new API versions get Kafka's answers (KIP-511: ApiVersions v0 fallback with
UNSUPPORTED_VERSION 35). Kafka's SocketServer closes the connection on a negative or oversized size
prefix (socket.request.max.bytes) and on a request header or body it cannot parse. After every case
the broker process must be alive and a fresh client must still produce and consume.

A flood of malformed frames (a fuzzer made 23,378 WARN lines in 4 minutes, issue 19) logs at most
one line per second per listener, each saying how many it left out, and counts every closed
connection in `keel_malformed_requests_total`.
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time

import pytest

import kafka_wire as w
from clients import create_topic, unique_topic
from keel_broker import free_port, launch, retire
from test_errors import assert_serves
from test_metrics import scrape, value

REQUEST_MAX_BYTES = 1024 * 1024
# What Keel must advertise (the APIs its contract serves).
CONTRACT_APIS = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 18: "ApiVersions",
                 19: "CreateTopics", 20: "DeleteTopics", 23: "OffsetForLeaderEpoch", 32: "DescribeConfigs",
                 37: "CreatePartitions", 44: "IncrementalAlterConfigs", 60: "DescribeCluster"}


@pytest.fixture(scope="module")
def mal_broker(tmp_path_factory):
    b = launch(tmp_path_factory, "malformed", overrides={"socket.request.max.bytes": str(REQUEST_MAX_BYTES)})
    b.health_topic = unique_topic("health")
    create_topic(b.bootstrap, b.health_topic, 1)
    yield b
    retire(b)


@pytest.fixture
def mal(mal_broker):
    """The module's broker, restarted if an earlier case killed it (that case has already failed)."""
    if not mal_broker.alive():
        mal_broker.start()
    return mal_broker


def connect(b) -> w.RawConnection:
    return w.RawConnection.to(b.bootstrap)


def header(api_key: int, version: int, corr: int = 7, client_id: str | None = "mal") -> bytes:
    return w.request_header_v1(api_key, version, corr, client_id)


# Each case is bytes after which the broker must close the connection by itself (without our
# half-close), as Kafka's SocketServer does.
CASES = {
    "huge-size-prefix": struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
    "negative-size-prefix": struct.pack(">i", -1) + b"\x00" * 16,
    "over-socket.request.max.bytes": struct.pack(">i", 2 * REQUEST_MAX_BYTES) + b"\x00" * 16,
    "zero-size-frame": struct.pack(">i", 0),
    "frame-shorter-than-header": w.frame(b"\x00\x12\x00"),
    "unknown-api-key": w.frame(header(9999, 0)),
    "negative-api-key": w.frame(header(-5, 0)),
    "client-id-longer-than-frame": w.frame(w.Writer().int16(18).int16(0).int32(1).int16(500).raw(b"ab").getvalue()),
    "metadata-garbage-body": w.frame(header(3, 4) + bytes(range(200, 256)) * 3),
    "metadata-unsupported-version": w.frame(header(3, 999) + b"\x00\x00\x00\x00"),
    "produce-garbage-body": w.frame(header(0, 3) + b"\xff" * 64),
    "fetch-array-count-huge": (w.frame(header(1, 4) + w.Writer().int32(-1).int32(100).int32(1).int32(1 << 20)
                                       .int8(0).int32(2**31 - 1).getvalue())),
    "produce-array-count-huge": (w.frame(header(0, 3) + w.Writer().string(None).int16(1).int32(1000)
                                         .int32(2**31 - 1).getvalue())),
    "metadata-array-count-huge": w.frame(header(3, 4) + w.Writer().int32(2**31 - 1).getvalue()),
    # Metadata v12: request header v2 (tagged fields), topics as a compact array of 2^31 - 1 entries.
    "metadata-v12-compact-array-huge": w.frame(header(3, 12) + b"\x00" + b"\x80\x80\x80\x80\x08"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_frame_closes_connection(mal, case):
    """A malformed or oversized frame makes the broker close that connection by itself (within 10 s),
    and the broker keeps serving (DESIGN.md Wire; Kafka SocketServer)."""
    data = CASES[case]
    with connect(mal) as conn:
        conn.send(data)
        try:
            conn.wait_closed(timeout_s=10)
        except TimeoutError as e:
            pytest.fail(f"{case}: {e}")
    assert_serves(mal, mal.health_topic)


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(mal, seed):
    """4 KiB of seeded random bytes, then our half-close: the broker closes too and keeps serving."""
    data = random.Random(seed).randbytes(4096)
    with connect(mal) as conn:
        conn.send(data)
        conn.sock.shutdown(socket.SHUT_WR)
        conn.wait_closed(timeout_s=10)
    assert_serves(mal, mal.health_topic)


def test_truncated_frame_then_close(mal):
    """A size prefix of 100 followed by 10 bytes and an abrupt close leaves the broker serving."""
    for _ in range(20):
        with connect(mal) as conn:
            conn.send(struct.pack(">i", 100) + b"\x00\x03\x00\x04" + b"\x00" * 6)
    with connect(mal) as conn:
        conn.send(struct.pack(">i", 100) + b"\x00" * 10)
        conn.sock.shutdown(socket.SHUT_WR)
        conn.wait_closed(timeout_s=10)
    assert_serves(mal, mal.health_topic)


def test_idle_connections(mal):
    """50 connections opened and dropped without a byte leave the broker serving."""
    for _ in range(50):
        socket.create_connection(("127.0.0.1", mal.port), timeout=5).close()
    assert_serves(mal, mal.health_topic)


def test_api_versions_v0_lists_contract(mal):
    """ApiVersions v0 answers error 0 and advertises every API in Keel's contract with min <= max."""
    with connect(mal) as conn:
        res = w.api_versions(conn, 0)
    assert res.error_code == 0
    missing = {k: n for k, n in CONTRACT_APIS.items() if k not in res.api_keys}
    assert not missing, f"ApiVersions does not advertise {missing}; got {sorted(res.api_keys)}"
    bad = {k: v for k, v in res.api_keys.items() if not 0 <= v[0] <= v[1]}
    assert not bad, f"ranges with min > max: {bad}"
    assert res.api_keys[18][1] >= 3, f"ApiVersions max version {res.api_keys[18][1]} < 3 (KIP-511)"


@pytest.mark.parametrize("body", [b"", b"\x07garbage-body\x00\xff"], ids=["empty-body", "garbage-body"])
def test_api_versions_unsupported_version(mal, body):
    """ApiVersions at version 127 gets a v0-layout answer with UNSUPPORTED_VERSION (35) and the full
    key list, and the connection stays usable for a v0 request (KIP-511)."""
    with connect(mal) as conn:
        res = w.api_versions(conn, 127, body)
        assert res.error_code == w.UNSUPPORTED_VERSION, f"error {res.error_code}"
        assert 18 in res.api_keys and res.api_keys[18][0] == 0, f"key list: {res.api_keys}"
        assert set(CONTRACT_APIS) <= set(res.api_keys), f"key list lacks {set(CONTRACT_APIS) - set(res.api_keys)}"
        again = w.api_versions(conn, 0)
        assert again.error_code == 0
    assert_serves(mal, mal.health_topic)


def test_api_versions_v3_flexible(mal):
    """ApiVersions v3 (flexible request header v2, compact strings) answers error 0 (KIP-511)."""
    body = b"\x05keel\x06" + b"0.1.0" + b"\x00"  # compact client software name/version, no tags
    hdr = w.Writer().int16(18).int16(3).int32(42).string("mal").raw(b"\x00").getvalue()
    with connect(mal) as conn:
        conn.send(w.frame(hdr + body))
        r = w.Reader(conn.recv_frame())
        assert r.int32() == 42
        assert r.int16() == 0, "ApiVersions v3 error code"


def test_pipelined_valid_then_garbage(mal):
    """A valid ApiVersions v0 followed in the same write by an unknown API key: the valid request is
    answered first, then the connection closes (requests are handled in order)."""
    good = w.request(w.API_API_VERSIONS, 0, 5, b"")
    bad = w.frame(header(9999, 0, corr=6))
    with connect(mal) as conn:
        conn.send(good + bad)
        r = w.Reader(conn.recv_frame())
        assert r.int32() == 5
        assert r.int16() == 0
        conn.wait_closed(timeout_s=10)
    assert_serves(mal, mal.health_topic)


def test_produce_corrupt_crc(mal):
    """Produce v3 with a batch whose CRC-32C is wrong answers CORRUPT_MESSAGE (2) and appends nothing
    (Kafka LogValidator); the connection stays usable."""
    topic = unique_topic("crc")
    create_topic(mal.bootstrap, topic, 1)
    with connect(mal) as conn:
        try:
            err, _ = w.produce_v3(conn, topic, 0, w.record_batch([(b"k", b"v", 1_700_000_000_000)], corrupt_crc=True))
        except ConnectionError as e:
            pytest.fail(f"broker closed the connection instead of answering CORRUPT_MESSAGE: {e}")
        assert err == w.CORRUPT_MESSAGE, f"error {err}"
        err, hwm, _ = w.fetch_v4(conn, topic, 0, 0)
        assert (err, hwm) == (w.NONE, 0), "the corrupt batch must not be appended"
        err, base = w.produce_v3(conn, topic, 0, w.record_batch([(b"k", b"v", 1_700_000_000_000)]))
        assert (err, base) == (w.NONE, 0)
    assert_serves(mal, mal.health_topic)


@pytest.mark.parametrize("mangle", ["truncated-batch", "batch-length-lies", "record-count-lies", "record-count-huge",
                                    "magic-1"])
def test_produce_malformed_batch(mal, mangle):
    """Produce v3 whose records field holds a damaged v2 batch is refused (CORRUPT_MESSAGE 2,
    INVALID_RECORD 87, or for magic 1 UNSUPPORTED_FOR_MESSAGE_FORMAT 43) or the connection is closed;
    nothing is appended and the broker serves on (Kafka ProduceRequest.validateRecords, LogValidator)."""
    topic = unique_topic("badbatch")
    create_topic(mal.bootstrap, topic, 1)
    batch = bytearray(w.record_batch([(b"k%d" % i, b"v" * 50, 1_700_000_000_000 + i) for i in range(5)]))
    if mangle == "truncated-batch":
        batch = batch[:-20]
    elif mangle == "batch-length-lies":
        struct.pack_into(">i", batch, 8, len(batch) * 4)
    elif mangle in ("record-count-lies", "record-count-huge"):
        count = 500 if mangle == "record-count-lies" else 2**31 - 1
        struct.pack_into(">i", batch, 57, count)  # records count, with a valid CRC over the lie
        _fix_crc(batch)
    else:
        batch[16] = 1  # magic
    with connect(mal) as conn:
        try:
            err, _ = w.produce_v3(conn, topic, 0, bytes(batch))
            assert err in (w.CORRUPT_MESSAGE, w.INVALID_RECORD, w.UNSUPPORTED_FOR_MESSAGE_FORMAT), f"{mangle}: error {err}"
        except ConnectionError:
            pass
    with connect(mal) as conn:
        err, hwm, _ = w.fetch_v4(conn, topic, 0, 0)
        assert (err, hwm) == (w.NONE, 0), f"{mangle}: high watermark {hwm} after a refused batch"
    assert_serves(mal, mal.health_topic)


def _fix_crc(batch: bytearray) -> None:
    import crc32c

    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))


FLOOD = 400
CLOSING_RE = re.compile(r" WARN .*closing connection.*suppressed=(\d+)")


def test_a_flood_of_malformed_frames_is_counted_and_logged_sparingly(tmp_path_factory):
    """FLOOD connections, each closed by the broker for a malformed frame (alternately an
    unknown API key — an undecodable request — and a size prefix over socket.request.max.bytes):
    `keel_malformed_requests_total{listener="broker"}` counts every one, while the log has at most
    one WARN line per second of the flood (plus one), whose suppressed counts add up to the rest."""
    port = free_port()
    b = launch(tmp_path_factory, "malformed-flood", overrides={"socket.request.max.bytes": str(REQUEST_MAX_BYTES)},
               config={"metrics.port": str(port)})
    try:
        frames = [CASES["unknown-api-key"], CASES["over-socket.request.max.bytes"]]
        started = time.monotonic()
        for i in range(FLOOD):
            with connect(b) as conn:
                conn.send(frames[i % 2])
                conn.wait_closed(timeout_s=10)
        flood_s = time.monotonic() - started
        deadline = time.monotonic() + 10
        counted = 0.0
        while time.monotonic() < deadline:
            counted = value(scrape(port), "keel_malformed_requests_total", node_id="1", listener="broker")
            if counted >= FLOOD:
                break
            time.sleep(0.1)
        assert counted == FLOOD, f"keel_malformed_requests_total is {counted}, {FLOOD} were sent"
        # One more, a second later: its line reports what the flood's last second left out.
        time.sleep(1.1)
        with connect(b) as conn:
            conn.send(frames[0])
            conn.wait_closed(timeout_s=10)
        time.sleep(0.5)
        lines = CLOSING_RE.findall(b.log_text())
        print(f"\n{FLOOD + 1} malformed frames in {flood_s:.2f}s: {len(lines)} WARN lines")
        assert 2 <= len(lines) <= flood_s + 3, f"{len(lines)} WARN lines for {FLOOD + 1} frames in {flood_s:.1f}s"
        assert sum(int(n) for n in lines) + len(lines) == FLOOD + 1, lines
        assert_serves(b, unique_topic("after-flood"))
    finally:
        retire(b)
