"""Requests whose counts a client chose are answered at once, and the controller stays active.

Issue 19 ("A controller no single request can knock over"): on d704e1a a 46-byte CreateTopics
(also with validate_only) or CreatePartitions (`kafka-topics --alter --partitions 2147483647`)
asking for ~2^31 partitions was never answered while the active controller allocated hundreds of
MB/s. Each case here is sent over the raw Kafka wire (CreateTopics v2, CreatePartitions v1, both
non-flexible; layouts from Kafka's clients/src/main/resources/common/message/*.json) to a real
single-node `keel server`, whose controller runs in-process, and must be answered within
ANSWER_WITHIN_S with Kafka's error code; afterwards the broker still produces and consumes, its
controller is active and its lease never lapsed.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

import kafka_wire as w
from clients import create_topic, unique_topic
from keel_broker import free_port, launch, retire
from test_errors import assert_serves

API_CREATE_TOPICS = 19
API_CREATE_PARTITIONS = 37
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
POLICY_VIOLATION = 44
# Generous for a loaded 2-core machine; the unbounded requests were never answered at all.
ANSWER_WITHIN_S = 5.0
I32_MAX = 2**31 - 1


def create_topics_v2(topics: list[tuple[str, int, int, list[tuple[int, list[int]]]]],
                     validate_only: bool = False, timeout_ms: int = 30_000) -> bytes:
    """CreateTopics v2: topics [name, num_partitions, replication_factor, assignments [partition,
    broker_ids], configs []], timeout_ms, validate_only."""
    out = w.Writer().int32(len(topics))
    for name, partitions, rf, assignments in topics:
        out.string(name).int32(partitions).int16(rf).int32(len(assignments))
        for index, brokers in assignments:
            out.int32(index).int32(len(brokers))
            for b in brokers:
                out.int32(b)
        out.int32(0)  # configs
    return out.int32(timeout_ms).boolean(validate_only).getvalue()


def create_partitions_v1(name: str, count: int, validate_only: bool = False) -> bytes:
    """CreatePartitions v1: topics [name, count, assignments (null)], timeout_ms, validate_only."""
    out = w.Writer().int32(1).string(name).int32(count).int32(-1)
    return out.int32(30_000).boolean(validate_only).getvalue()


def results(r: w.Reader) -> list[tuple[str, int, str | None]]:
    """Both responses (v2 / v1): throttle_time_ms, [name, error_code, error_message]."""
    r.int32()
    return r.array(lambda x: (x.string(), x.int16(), x.string()))


def timed_call(b, api_key: int, version: int, body: bytes) -> tuple[list, float]:
    started = time.monotonic()
    with w.RawConnection.to(b.bootstrap, timeout_s=2 * ANSWER_WITHIN_S) as conn:
        got = results(conn.call(api_key, version, body))
    return got, time.monotonic() - started


def scrape(b) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def sample(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, f"{name} not in the scrape"
    return float(m.group(1))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    port = free_port()
    b = launch(tmp_path_factory, "hostile", overrides={"metrics.port": str(port)})
    b.metrics_port = port
    b.grown = unique_topic("grown")
    create_topic(b.bootstrap, b.grown, 1)
    yield b
    retire(b)


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_near_2_31_partitions_is_invalid_partitions_at_once(node, validate_only):
    """CreateTopics with 2^31 - 1 partitions: INVALID_PARTITIONS at once (issue 19's 46 bytes)."""
    name = unique_topic("huge")
    got, took = timed_call(node, API_CREATE_TOPICS, 2,
                           create_topics_v2([(name, I32_MAX, 1, [])], validate_only))
    assert took < ANSWER_WITHIN_S, f"answered after {took:.1f} s"
    assert [(n, code) for n, code, _ in got] == [(name, INVALID_PARTITIONS)], got
    assert "at most 1000000" in got[0][2]


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_partitions_to_2_31_is_invalid_partitions_at_once(node, validate_only):
    """`kafka-topics --alter --partitions 2147483647`: INVALID_PARTITIONS at once."""
    got, took = timed_call(node, API_CREATE_PARTITIONS, 1,
                           create_partitions_v1(node.grown, I32_MAX, validate_only))
    assert took < ANSWER_WITHIN_S, f"answered after {took:.1f} s"
    assert [(n, code) for n, code, _ in got] == [(node.grown, INVALID_PARTITIONS)], got


def test_more_new_partitions_than_one_request_may_add_is_policy_violation(node):
    """CreatePartitions adding 10,001 partitions, and a CreateTopics whose topics add up to more
    than a request may create: POLICY_VIOLATION with Kafka's message, for every topic."""
    got, took = timed_call(node, API_CREATE_PARTITIONS, 1, create_partitions_v1(node.grown, 10_002))
    assert took < ANSWER_WITHIN_S
    assert got[0][1] == POLICY_VIOLATION, got
    assert got[0][2].startswith("Excessively large number of partitions per request."), got
    names = [unique_topic("half") for _ in range(2)]
    got, took = timed_call(node, API_CREATE_TOPICS, 2,
                           create_topics_v2([(n, 600_000, 1, []) for n in names]))
    assert took < ANSWER_WITHIN_S
    assert [(n, code) for n, code, _ in got] == [(n, POLICY_VIOLATION) for n in names], got


def test_hostile_replica_counts_are_refused_at_once(node):
    """A manual assignment listing 100,000 broker ids for one partition is
    INVALID_REPLICA_ASSIGNMENT; a replication factor of 32767 is INVALID_REPLICATION_FACTOR."""
    name = unique_topic("many-replicas")
    got, took = timed_call(node, API_CREATE_TOPICS, 2,
                           create_topics_v2([(name, -1, -1, [(0, list(range(100_000)))])]))
    assert took < ANSWER_WITHIN_S
    assert got[0][1] == INVALID_REPLICA_ASSIGNMENT, got
    got, took = timed_call(node, API_CREATE_TOPICS, 2, create_topics_v2([(name, 3, 32767, [])]))
    assert took < ANSWER_WITHIN_S
    assert got[0][1] == INVALID_REPLICATION_FACTOR, got


def test_the_node_serves_and_its_controller_stayed_active(node):
    """After the hostile requests the broker produces and consumes, and its controller is active
    with no lease lapse (keel_controller_lease_lapses_total)."""
    assert_serves(node)
    text = scrape(node)
    assert sample(text, "keel_active_controller_count") == 1.0
    assert sample(text, "keel_controller_lease_lapses_total") == 0.0


def incremental_alter_configs_v0(resources: list[tuple[str, list[tuple[str, str]]]]) -> bytes:
    """IncrementalAlterConfigs v0: resources [type, name, configs [name, op, value]], validate_only."""
    out = w.Writer().int32(len(resources))
    for topic, configs in resources:
        out.int8(2).string(topic).int32(len(configs))
        for name, value in configs:
            out.string(name).int8(0).string(value)
    return out.boolean(False).getvalue()


def test_more_config_changes_than_one_operation_may_write_is_policy_violation(node):
    """IncrementalAlterConfigs carrying 10,001 config changes (one topic named 10,001 times; Kafka
    caps the records of one user operation at 10,000, QuorumController.MAX_RECORDS_PER_USER_OP):
    POLICY_VIOLATION at once for every resource, with Kafka's message, and nothing written."""
    resources = [(node.grown, [("retention.ms", str(1000 + i))]) for i in range(10_001)]
    started = time.monotonic()
    with w.RawConnection.to(node.bootstrap, timeout_s=2 * ANSWER_WITHIN_S) as conn:
        r = conn.call(44, 0, incremental_alter_configs_v0(resources))
        r.int32()
        got = r.array(lambda x: (x.int16(), x.string(), x.int8(), x.string()))
    assert time.monotonic() - started < ANSWER_WITHIN_S
    assert len(got) == len(resources)
    assert {code for code, _, _, _ in got} == {POLICY_VIOLATION}, got[:3]
    assert got[0][1].startswith("Unable to perform excessively large batch operation."), got[0]
