"""A tiny hand-written Kafka wire codec for tests that must talk to the broker byte by byte.

What lives here: big-endian primitive writers/readers, request framing (request header v1,
non-flexible), record batch v2 encoding (magic 2, CRC-32C), a blocking raw connection, and encoders
and decoders for the handful of non-flexible request versions the tests use (ApiVersions v0,
Metadata v4 and v7, Produce v3, Fetch v4, ListOffsets v1, OffsetForLeaderEpoch v3). Field layouts follow Kafka's
clients/src/main/resources/common/message/*.json. Nothing here is a client: no retries, no
metadata, no version negotiation beyond `api_versions`.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

import crc32c as _crc32c

# Kafka API keys (clients/src/main/java/org/apache/kafka/common/protocol/ApiKeys.java).
API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
API_OFFSET_FOR_LEADER_EPOCH = 23

# Kafka error codes (org.apache.kafka.common.protocol.Errors).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_LEADER_EPOCH = 75
INVALID_RECORD = 87

RECV_TIMEOUT_S = 10.0


class Writer:
    """Appends big-endian Kafka primitives to a byte buffer."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> "Writer":
        self.buf += struct.pack(">b", v)
        return self

    def int16(self, v: int) -> "Writer":
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> "Writer":
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> "Writer":
        self.buf += struct.pack(">q", v)
        return self

    def boolean(self, v: bool) -> "Writer":
        return self.int8(1 if v else 0)

    def string(self, s: str | None) -> "Writer":
        """STRING / NULLABLE_STRING: int16 length (-1 for null) then UTF-8 bytes."""
        if s is None:
            return self.int16(-1)
        raw = s.encode()
        self.int16(len(raw))
        self.buf += raw
        return self

    def bytes_(self, b: bytes | None) -> "Writer":
        """BYTES / NULLABLE_BYTES / RECORDS: int32 length (-1 for null) then the bytes."""
        if b is None:
            return self.int32(-1)
        self.int32(len(b))
        self.buf += b
        return self

    def raw(self, b: bytes) -> "Writer":
        self.buf += b
        return self

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Reads big-endian Kafka primitives; raises ValueError when the buffer runs out."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"short read: need {n} bytes at {self.pos}, have {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def boolean(self) -> bool:
        return self.int8() != 0

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self._take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self._take(n)

    def array(self, item):
        n = self.int32()
        return [] if n < 0 else [item(self) for _ in range(n)]

    def remaining(self) -> int:
        return len(self.data) - self.pos


def frame(body: bytes) -> bytes:
    """Prefixes a request or response with its int32 size."""
    return struct.pack(">i", len(body)) + body


def request_header_v1(api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> bytes:
    """Request header v1: api key, api version, correlation id, nullable client id."""
    return Writer().int16(api_key).int16(api_version).int32(correlation_id).string(client_id).getvalue()


def request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str | None = "keel-tests") -> bytes:
    """A whole framed non-flexible request."""
    return frame(request_header_v1(api_key, api_version, correlation_id, client_id) + body)


# ---------------------------------------------------------------------------------------------
# Record batch v2 (Kafka's DefaultRecordBatch).


def _zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


def varint(v: int) -> bytes:
    """Zig-zag varint/varlong as used inside records."""
    u = _zigzag(v) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray()
    body += b"\x00"  # attributes
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    if key is None:
        body += varint(-1)
    else:
        body += varint(len(key)) + key
    if value is None:
        body += varint(-1)
    else:
        body += varint(len(value)) + value
    body += varint(0)  # no headers
    return varint(len(body)) + bytes(body)


def record_batch(records: list[tuple[bytes | None, bytes | None, int]], corrupt_crc: bool = False,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 attributes: int = 0) -> bytes:
    """Encodes uncompressed (key, value, timestamp_ms) records as one v2 batch at base offset 0,
    of an idempotent producer when `producer_id` >= 0 (attribute bit 4 marks it transactional)."""
    assert records, "a record batch holds at least one record"
    base_ts = records[0][2]
    max_ts = max(ts for _, _, ts in records)
    recs = b"".join(_record(i, ts - base_ts, k, v) for i, (k, v, ts) in enumerate(records))
    after_crc = (
        Writer()
        .int16(attributes)  # default: no compression, CreateTime, not transactional
        .int32(len(records) - 1)  # last offset delta
        .int64(base_ts)
        .int64(max_ts)
        .int64(producer_id)
        .int16(producer_epoch)
        .int32(base_sequence)
        .int32(len(records))
        .raw(recs)
        .getvalue()
    )
    crc = _crc32c.crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    # batchLength counts from partitionLeaderEpoch to the end.
    after_length = Writer().int32(-1).int8(2).raw(struct.pack(">I", crc)).raw(after_crc).getvalue()
    return Writer().int64(0).int32(len(after_length)).raw(after_length).getvalue()


# ---------------------------------------------------------------------------------------------
# Connection.


class RawConnection:
    """One blocking TCP connection that sends hand-built bytes and reads whole response frames."""

    def __init__(self, host: str, port: int, timeout_s: float = RECV_TIMEOUT_S) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self.next_correlation_id = 1

    @classmethod
    def to(cls, bootstrap: str, timeout_s: float = RECV_TIMEOUT_S) -> "RawConnection":
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), timeout_s)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        assert 0 <= size <= 64 * 1024 * 1024, f"response frame size {size} out of range"
        return self._recv_exact(size)

    def call(self, api_key: int, api_version: int, body: bytes) -> Reader:
        """Sends one request and returns a Reader positioned after the response header v0."""
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        self.send(request(api_key, api_version, correlation_id, body))
        r = Reader(self.recv_frame())
        got = r.int32()
        assert got == correlation_id, f"correlation id {got} != {correlation_id}"
        return r

    def wait_closed(self, timeout_s: float = RECV_TIMEOUT_S) -> bytes:
        """Reads until the peer closes; returns whatever arrived. Raises TimeoutError if it stays open."""
        deadline = time.monotonic() + timeout_s
        got = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"peer kept the connection open for {timeout_s}s (received {len(got)} bytes)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return bytes(got)
            if not chunk:
                return bytes(got)
            got += chunk


# ---------------------------------------------------------------------------------------------
# Requests and responses.


@dataclass
class ApiVersionsV0:
    error_code: int
    api_keys: dict[int, tuple[int, int]]


def decode_api_versions_v0(r: Reader) -> ApiVersionsV0:
    """ApiVersions response v0 body: error code, [api key, min version, max version]."""
    error_code = r.int16()
    keys = r.array(lambda x: (x.int16(), x.int16(), x.int16()))
    return ApiVersionsV0(error_code, {k: (lo, hi) for k, lo, hi in keys})


def api_versions(conn: RawConnection, version: int = 0, body: bytes = b"") -> ApiVersionsV0:
    """Sends ApiVersions with a v1 header at `version` and decodes the answer as v0.

    Kafka answers an ApiVersions request whose version it does not support in the v0 layout with
    UNSUPPORTED_VERSION and its key list (KIP-511), so the v0 decoder suits both cases.
    """
    return decode_api_versions_v0(conn.call(API_API_VERSIONS, version, body))


def metadata_v4(conn: RawConnection, topics: list[str] | None, allow_auto_topic_creation: bool):
    """Metadata v4; returns {topic: (error_code, {partition: (error_code, leader)})}."""
    w = Writer()
    if topics is None:
        w.int32(-1)
    else:
        w.int32(len(topics))
        for t in topics:
            w.string(t)
    w.boolean(allow_auto_topic_creation)
    r = conn.call(API_METADATA, 4, w.getvalue())
    r.int32()  # throttle
    r.array(lambda x: (x.int32(), x.string(), x.int32(), x.string()))  # brokers
    r.string()  # cluster id
    r.int32()  # controller id

    def partition(x: Reader):
        err, idx, leader = x.int16(), x.int32(), x.int32()
        x.array(lambda y: y.int32())  # replicas
        x.array(lambda y: y.int32())  # ISR (offline replicas only from v5)
        return idx, (err, leader)

    def topic(x: Reader):
        err, name = x.int16(), x.string()
        x.boolean()
        return name, (err, dict(x.array(partition)))

    return dict(r.array(topic))


@dataclass(frozen=True)
class PartitionMetadata:
    """One partition of a Metadata v7 answer, as the answering broker's metadata cache has it."""
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True)
class MetadataV7:
    brokers: dict[int, tuple[str, int]]
    cluster_id: str | None
    controller_id: int
    topics: dict[str, tuple[int, dict[int, PartitionMetadata]]]  # name -> (error code, partitions)


def metadata_v7(conn: RawConnection, topics: list[str] | None, allow_auto_topic_creation: bool = False) -> MetadataV7:
    """Metadata v7 (the last non-flexible version with partition leader epochs): brokers, controller
    id, and per partition the leader, leader epoch, replicas, ISR and offline replicas."""
    w = Writer()
    if topics is None:
        w.int32(-1)
    else:
        w.int32(len(topics))
        for t in topics:
            w.string(t)
    w.boolean(allow_auto_topic_creation)
    r = conn.call(API_METADATA, 7, w.getvalue())
    r.int32()  # throttle
    brokers = r.array(lambda x: (x.int32(), x.string(), x.int32(), x.string()))
    cluster_id = r.string()
    controller_id = r.int32()

    def ids(x: Reader) -> tuple[int, ...]:
        return tuple(x.array(lambda y: y.int32()))

    def partition(x: Reader):
        err, idx, leader, epoch = x.int16(), x.int32(), x.int32(), x.int32()
        return idx, PartitionMetadata(err, leader, epoch, ids(x), ids(x), ids(x))

    def topic(x: Reader):
        err, name = x.int16(), x.string()
        x.boolean()  # is internal
        return name, (err, dict(x.array(partition)))

    return MetadataV7({b: (host, port) for b, host, port, _ in brokers}, cluster_id, controller_id,
                      dict(r.array(topic)))


def produce_v3(conn: RawConnection, topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 10_000):
    """Produce v3 to one partition; returns (error_code, base_offset)."""
    body = (
        Writer()
        .string(None)  # transactional id
        .int16(acks)
        .int32(timeout_ms)
        .int32(1)
        .string(topic)
        .int32(1)
        .int32(partition)
        .bytes_(records)
        .getvalue()
    )
    r = conn.call(API_PRODUCE, 3, body)
    topics = r.array(lambda x: (x.string(), x.array(lambda y: (y.int32(), y.int16(), y.int64(), y.int64()))))
    [(_, [(_, err, base_offset, _)])] = topics
    return err, base_offset


@dataclass
class ProduceV8:
    """One partition's Produce v8 answer (KIP-467: the batch indexes of the records that made the
    batch fail, each with its message, and a message for the whole batch)."""

    error: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: list[tuple[int, str | None]]
    error_message: str | None


def produce_v8(conn: RawConnection, topic: str, partition: int, records: bytes, acks: int = -1,
               timeout_ms: int = 10_000) -> ProduceV8:
    """Produce v8 (the last non-flexible version, the first with RecordErrors and ErrorMessage;
    ProduceResponse.json) to one partition."""
    body = (
        Writer()
        .string(None)  # transactional id
        .int16(acks)
        .int32(timeout_ms)
        .int32(1)
        .string(topic)
        .int32(1)
        .int32(partition)
        .bytes_(records)
        .getvalue()
    )
    r = conn.call(API_PRODUCE, 8, body)

    def partition_response(x: Reader) -> ProduceV8:
        _index, error, base_offset, append_time, log_start = x.int32(), x.int16(), x.int64(), x.int64(), x.int64()
        record_errors = x.array(lambda y: (y.int32(), y.string()))
        return ProduceV8(error, base_offset, append_time, log_start, record_errors, x.string())

    topics = r.array(lambda x: (x.string(), x.array(partition_response)))
    r.int32()  # throttle time
    [(_, [answer])] = topics
    return answer


API_DESCRIBE_CONFIGS = 32
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4


@dataclass
class ConfigEntryV3:
    """One entry of a DescribeConfigs v3 answer (DescribeConfigsResponse.json)."""

    name: str
    value: str | None
    read_only: bool
    source: int
    sensitive: bool
    synonyms: list[tuple[str, str | None, int]]
    config_type: int
    documentation: str | None


@dataclass
class DescribeConfigsV3:
    error: int
    message: str | None
    entries: dict[str, ConfigEntryV3]


def describe_configs_v3(conn: RawConnection, resource_type: int, name: str, keys: list[str] | None = None,
                        synonyms: bool = False, documentation: bool = False) -> DescribeConfigsV3:
    """DescribeConfigs v3 (the last non-flexible version, the first with ConfigType and
    Documentation) of one resource; `keys` None asks for every config."""
    w = Writer().int32(1).int8(resource_type).string(name)
    if keys is None:
        w.int32(-1)
    else:
        w.int32(len(keys))
        for key in keys:
            w.string(key)
    r = conn.call(API_DESCRIBE_CONFIGS, 3, w.int8(int(synonyms)).int8(int(documentation)).getvalue())
    r.int32()  # throttle time

    def entry(x: Reader) -> ConfigEntryV3:
        name_, value, read_only, source, sensitive = x.string(), x.string(), x.boolean(), x.int8(), x.boolean()
        syns = x.array(lambda y: (y.string(), y.string(), y.int8()))
        return ConfigEntryV3(name_, value, read_only, source, sensitive, syns, x.int8(), x.string())

    def result(x: Reader) -> DescribeConfigsV3:
        error, message, _type, _name = x.int16(), x.string(), x.int8(), x.string()
        return DescribeConfigsV3(error, message, {e.name: e for e in x.array(entry)})

    [answer] = r.array(result)
    return answer


def init_producer_id_v0(conn: RawConnection, transactional_id: str | None = None,
                        timeout_ms: int = 60_000) -> tuple[int, int, int]:
    """InitProducerId v0; returns (error_code, producer_id, producer_epoch)."""
    body = Writer().string(transactional_id).int32(timeout_ms).getvalue()
    r = conn.call(API_INIT_PRODUCER_ID, 0, body)
    r.int32()  # throttle time
    return r.int16(), r.int64(), r.int16()


def fetch_v4(conn: RawConnection, topic: str, partition: int, offset: int, max_wait_ms: int = 100):
    """Fetch v4 from one partition; returns (error_code, high_watermark, records_bytes)."""
    body = (
        Writer()
        .int32(-1)  # replica id: a consumer
        .int32(max_wait_ms)
        .int32(1)  # min bytes
        .int32(1024 * 1024)  # max bytes
        .int8(0)  # isolation level
        .int32(1)
        .string(topic)
        .int32(1)
        .int32(partition)
        .int64(offset)
        .int32(1024 * 1024)
        .getvalue()
    )
    r = conn.call(API_FETCH, 4, body)
    r.int32()  # throttle

    def part(y: Reader):
        idx, err, hwm = y.int32(), y.int16(), y.int64()
        y.int64()  # last stable offset
        y.array(lambda z: (z.int64(), z.int64()))
        return idx, err, hwm, y.bytes_()

    topics = r.array(lambda x: (x.string(), x.array(part)))
    [(_, [(_, err, hwm, recs)])] = topics
    return err, hwm, recs


def list_offsets_v1(conn: RawConnection, topic: str, partition: int, timestamp: int):
    """ListOffsets v1 for one partition; returns (error_code, timestamp, offset)."""
    body = Writer().int32(-1).int32(1).string(topic).int32(1).int32(partition).int64(timestamp).getvalue()
    r = conn.call(API_LIST_OFFSETS, 1, body)
    topics = r.array(lambda x: (x.string(), x.array(lambda y: (y.int32(), y.int16(), y.int64(), y.int64()))))
    [(_, [(_, err, ts, off)])] = topics
    return err, ts, off


def offset_for_leader_epoch_v3(conn: RawConnection, topic: str, partition: int, leader_epoch: int,
                               current_leader_epoch: int = -1):
    """OffsetForLeaderEpoch v3 (consumer form, replica id -1); returns (error_code, leader_epoch, end_offset)."""
    body = (Writer().int32(-1).int32(1).string(topic).int32(1)
            .int32(partition).int32(current_leader_epoch).int32(leader_epoch).getvalue())
    r = conn.call(API_OFFSET_FOR_LEADER_EPOCH, 3, body)
    r.int32()  # throttle
    topics = r.array(lambda x: (x.string(), x.array(lambda y: (y.int16(), y.int32(), y.int32(), y.int64()))))
    [(_, [(err, _, epoch, end_offset)])] = topics
    return err, epoch, end_offset
