"""Any Kafka request at any version over one raw connection, encoded and decoded by kafka-python's
protocol classes (generated from Kafka's message JSON up to Kafka 4.3): for tests that need a
version or a field no client API exposes (ListOffsets v6 asking for MAX_TIMESTAMP, Produce v13 with
an unknown topic id, a duplicated partition). Nothing here asserts on the broker.
"""

from __future__ import annotations

import socket
import struct

from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest, DescribeClientQuotasResponse
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.admin.configs import ListConfigResourcesRequest, ListConfigResourcesResponse
from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.admin.topics import (CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
                                         CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse)
from kafka.protocol.admin.transactions import (DescribeProducersRequest, DescribeProducersResponse,
                                               DescribeTransactionsRequest, DescribeTransactionsResponse)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.admin.users import (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
                                        DescribeUserScramCredentialsRequest,
                                        DescribeUserScramCredentialsResponse)

RESPONSES = {
    AlterUserScramCredentialsRequest: AlterUserScramCredentialsResponse,
    ApiVersionsRequest: ApiVersionsResponse,
    CreatePartitionsRequest: CreatePartitionsResponse,
    CreateTopicsRequest: CreateTopicsResponse,
    DeleteTopicsRequest: DeleteTopicsResponse,
    DescribeClientQuotasRequest: DescribeClientQuotasResponse,
    DescribeClusterRequest: DescribeClusterResponse,
    DescribeGroupsRequest: DescribeGroupsResponse,
    DescribeProducersRequest: DescribeProducersResponse,
    DescribeTransactionsRequest: DescribeTransactionsResponse,
    DescribeUserScramCredentialsRequest: DescribeUserScramCredentialsResponse,
    FindCoordinatorRequest: FindCoordinatorResponse,
    ListConfigResourcesRequest: ListConfigResourcesResponse,
    ListOffsetsRequest: ListOffsetsResponse,
    MetadataRequest: MetadataResponse,
    ProduceRequest: ProduceResponse,
    InitProducerIdRequest: InitProducerIdResponse,
}
RECV_TIMEOUT_S = 30.0
FRAME_MAX_BYTES = 64 * 1024 * 1024


class MessageConnection:
    """One blocking connection; `call` sends a request and returns the decoded response."""

    def __init__(self, bootstrap: str, timeout_s: float = RECV_TIMEOUT_S, client_id: str = "keel-tests") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.next_correlation_id = 1
        self.client_id = client_id

    def __enter__(self) -> "MessageConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def call(self, request_class, version: int, **fields):
        """Sends `request_class` at `version` with `fields` (snake_case, nested as dicts)."""
        request = request_class[version](**_structs(request_class, fields))
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        request.with_header(correlation_id=correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", self._recv_exact(4))
        assert 0 <= size <= FRAME_MAX_BYTES, f"response frame size {size}"
        body = self._recv_exact(size)
        response = RESPONSES[request_class].decode(body, version=version, header=True)
        assert response.header.correlation_id == correlation_id
        return response

    def closed_by_peer(self, request_class, version: int, **fields) -> bool:
        """Sends a request the broker should refuse by closing the connection (a version it does
        not serve); True if it did, False if it answered."""
        request = request_class[version](**_structs(request_class, fields))
        request.with_header(correlation_id=self.next_correlation_id, client_id=self.client_id)
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        try:
            return self.sock.recv(4) == b""
        except ConnectionResetError:
            return True


def _structs(cls, values: dict) -> dict:
    """`values` with each nested dict (or list of dicts) made an instance of the message's nested
    class for that field, as kafka-python's encoder wants."""
    out = {}
    for key, value in values.items():
        field = cls.fields[key]
        type_name = field._json["type"].removeprefix("[]")
        nested = getattr(cls, type_name, None)
        if nested is not None and isinstance(value, list):
            value = [nested(**_structs(nested, v)) if isinstance(v, dict) else v for v in value]
        elif nested is not None and isinstance(value, dict):
            value = nested(**_structs(nested, value))
        out[key] = value
    return out
