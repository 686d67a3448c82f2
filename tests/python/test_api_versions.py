"""The API versions of Apache Kafka 4.4 for every API Keel serves (issue 20, "newest API
versions"), with what those versions add, and the two APIs added with them: DescribeProducers (61)
and ListConfigResources (74, KIP-1142).

Kafka 4.4's table is hard-coded in crates/wire/src/versions.rs's tests; here the served answer is
checked over the wire and through clients: kafka-python's version probe, the Java admin client
4.1 (tests/java/KeelKafka44Apis.java), Kafka's own `kafka-transactions.sh describe-producers`,
and kafka-python's admin client. Where the codec (kafka-protocol 0.18) stops below Kafka 4.4 the
gap is documented (docs/clients.md) and asserted here as what ApiVersions says.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import confluent_kafka as ck
import kafka as kp
import pytest

from clients import CONFLUENT_COMMON, create_topic, unique_topic
from kafka_messages import (ApiVersionsRequest, DescribeClusterRequest, DescribeGroupsRequest,
                            DescribeProducersRequest, FindCoordinatorRequest, ListConfigResourcesRequest,
                            MessageConnection, MetadataRequest, ProduceRequest)
from keel_broker import launch, retire
from keel_cluster import Cluster
from test_java_client import JAVA_DIR, build_check
from test_kafka_tools import build_tools

# org.apache.kafka.common.protocol.Errors
NONE, UNKNOWN_TOPIC_OR_PARTITION, COORDINATOR_NOT_AVAILABLE = 0, 3, 15
INVALID_TOPIC_EXCEPTION, UNSUPPORTED_VERSION, INVALID_REQUEST = 17, 35, 42
GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_ID, MISMATCHED_ENDPOINT_TYPE = 69, 100, 114
# The broker listener's answer for the APIs whose range changed with this work, and the codec
# gaps (Kafka 4.4's newest version in a comment).
EXPECTED_RANGES = {
    0: (0, 13),   # Produce: served from 3, advertised from 0 (KAFKA-18659)
    1: (4, 18),   # Fetch
    2: (1, 10),   # ListOffsets (Kafka 4.4: 11, KIP-1023 — the codec stops at 10)
    3: (0, 13),   # Metadata
    8: (2, 9),    # OffsetCommit (Kafka 4.4: 10 — the codec's topic struct stops at 9)
    9: (1, 9),    # OffsetFetch (Kafka 4.4: 10 — likewise)
    10: (0, 6),   # FindCoordinator
    15: (0, 6),   # DescribeGroups
    18: (0, 4),   # ApiVersions (Kafka 4.4: 5, KIP-1242)
    22: (0, 5),   # InitProducerId (Kafka 4.4: 6, KIP-939)
    35: (1, 4),   # DescribeLogDirs (Kafka 4.4: 5, KIP-1066)
    42: (0, 2),   # DeleteGroups (Kafka 4.4: 3)
    60: (0, 2),   # DescribeCluster
    61: (0, 0),   # DescribeProducers
    74: (0, 1),   # ListConfigResources
}
WAIT_S = 60


def java(*args: str) -> dict[str, list[str]]:
    """Runs KeelKafka44Apis; returns its "KEY rest" lines by key."""
    classes, classpath = build_check()
    source, compiled = JAVA_DIR / "KeelKafka44Apis.java", classes / "KeelKafka44Apis.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    run = subprocess.run(["java", "-cp", f"{classes}:{classpath}", "KeelKafka44Apis", *args],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    lines: dict[str, list[str]] = {}
    for line in run.stdout.splitlines():
        key, _, rest = line.partition(" ")
        lines.setdefault(key, []).append(rest)
    return lines


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = launch(tmp_path_factory, "api-versions")
    yield b
    retire(b)


def topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with MessageConnection(bootstrap) as conn:
        r = conn.call(MetadataRequest, 12, topics=[{"name": topic}], allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False)
    [t] = r.topics
    assert t.error_code == NONE
    return t.topic_id


def test_api_versions_are_kafka_4_4_s_where_the_codec_reaches(broker):
    """ApiVersions lists Kafka 4.4's ranges (ApiKeys.toApiVersion: Produce from 0 on a broker
    listener), cut only where the codec cannot encode the newer version; DeleteRecords is not
    this change's to advertise."""
    with MessageConnection(broker.bootstrap) as conn:
        r = conn.call(ApiVersionsRequest, 3, client_software_name="keel-tests", client_software_version="1")
    assert r.error_code == NONE
    ranges = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert {k: ranges.get(k) for k in EXPECTED_RANGES} == EXPECTED_RANGES


def test_kafka_python_probes_the_versions_as_kafka_4_1(broker):
    """kafka-python infers the broker version from ApiVersions: Produce 13 is Kafka 4.1; 4.2 would
    need ListOffsets 11, which the codec cannot serve (before this change: 3.8, from Produce 11)."""
    admin = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert admin._manager.broker_version == (4, 1)
    finally:
        admin.close()


def test_produce_v13_names_topics_by_id(broker):
    """Produce v13 (KIP-516) writes by topic id and answers by the same id; an id no topic has is
    UNKNOWN_TOPIC_ID (Kafka's KafkaApis.handleProduceRequest); Produce v2, advertised for
    librdkafka's sake, is refused by closing the connection as Kafka 4 does."""
    topic = unique_topic("by-id")
    create_topic(broker.bootstrap, topic, 1)
    tid = topic_id(broker.bootstrap, topic)
    batch = ck_batch()
    with MessageConnection(broker.bootstrap) as conn:
        for id_, want in ((tid, NONE), (uuid.uuid4(), UNKNOWN_TOPIC_ID)):
            r = conn.call(ProduceRequest, 13, transactional_id=None, acks=-1, timeout_ms=10_000,
                          topic_data=[{"topic_id": id_, "partition_data": [{"index": 0, "records": batch}]}])
            [t] = r.responses
            [p] = t.partition_responses
            assert (t.topic_id, p.error_code) == (id_, want)
            if want == NONE:
                assert p.base_offset == 0
    with MessageConnection(broker.bootstrap) as conn:
        assert conn.closed_by_peer(ProduceRequest, 2, acks=-1, timeout_ms=1000, topic_data=[])


def ck_batch() -> bytes:
    """One uncompressed v2 batch of one record, as a producer sends it."""
    import kafka_wire as kw
    return kw.record_batch([(b"k", b"v", 1_700_000_000_000)])


def test_metadata_v13_has_a_top_level_error_code(broker):
    """Metadata v13 adds a top-level ErrorCode (KIP-1102's REBOOTSTRAP_REQUIRED); brokers answer 0."""
    topic = unique_topic("md13")
    create_topic(broker.bootstrap, topic, 2)
    with MessageConnection(broker.bootstrap) as conn:
        r = conn.call(MetadataRequest, 13, topics=[{"name": topic}], allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False)
    assert r.error_code == NONE
    [t] = r.topics
    assert (t.name, t.error_code, len(t.partitions)) == (topic, NONE, 2)


def test_describe_groups_v6_says_a_group_is_not_found(broker):
    """DescribeGroups v6 (KIP-1043, GroupMetadataManager.describeGroups): an unknown group is
    GROUP_ID_NOT_FOUND with "Group <id> not found."; v5 still describes it as Dead with no error.
    The Java admin client then fails describeConsumerGroups with GroupIdNotFoundException."""
    group = unique_topic("no-such-group")
    with MessageConnection(broker.bootstrap) as conn:
        # The group's coordinator first, as clients ask (creates __consumer_offsets).
        deadline = time.monotonic() + WAIT_S
        while conn.call(FindCoordinatorRequest, 4, key_type=0,
                        coordinator_keys=[group]).coordinators[0].error_code != NONE:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
        [g6] = conn.call(DescribeGroupsRequest, 6, groups=[group], include_authorized_operations=False).groups
        [g5] = conn.call(DescribeGroupsRequest, 5, groups=[group], include_authorized_operations=False).groups
    assert (g6.error_code, g6.error_message, g6.group_state) == (GROUP_ID_NOT_FOUND, f"Group {group} not found.", "Dead")
    assert (g5.error_code, g5.group_state) == (NONE, "Dead")
    assert java("missing-group", broker.bootstrap, group)["DESCRIBE"] == ["GroupIdNotFoundException"]


def test_find_coordinator_v6_share_keys(broker):
    """FindCoordinator v6 adds share coordinators (KIP-932). Keel has none: as Kafka 4.4 without
    one (KafkaApisTest testFindCoordinatorNoShareCoordinatorForShareStateTopic,
    ...WithInvalidSharePartitionKey, ...TooOldForShareStateTopic), a well-formed key is
    COORDINATOR_NOT_AVAILABLE, a malformed one INVALID_REQUEST, and v5 INVALID_REQUEST."""
    key = "group:AAAAAAAAAAAAAAAAAAAAAQ:0"
    with MessageConnection(broker.bootstrap) as conn:
        def ask(version, k):
            [c] = conn.call(FindCoordinatorRequest, version, key_type=2, coordinator_keys=[k]).coordinators
            return c.error_code, c.node_id
        assert ask(6, key) == (COORDINATOR_NOT_AVAILABLE, -1)
        assert ask(6, "") == (INVALID_REQUEST, -1)
        assert ask(6, "group:not-an-id:0") == (INVALID_REQUEST, -1)
        assert ask(5, key) == (INVALID_REQUEST, -1)


def test_list_config_resources(broker):
    """ListConfigResources v1 (KIP-1142) lists topics and brokers (and a broker logger per broker,
    as Kafka does); filtered by type when asked; v0 lists client-metrics resources only (none in
    Keel); a type the version does not know is UNSUPPORTED_VERSION. The Java admin client's
    listConfigResources and kafka-python's list_config_resources see the same."""
    topic = unique_topic("cfg")
    create_topic(broker.bootstrap, topic, 1)
    with MessageConnection(broker.bootstrap) as conn:
        all_ = conn.call(ListConfigResourcesRequest, 1, resource_types=[])
        topics = conn.call(ListConfigResourcesRequest, 1, resource_types=[2])
        v0 = conn.call(ListConfigResourcesRequest, 0)
        bad = conn.call(ListConfigResourcesRequest, 1, resource_types=[2, 64])
        group_on_v0 = conn.call(ListConfigResourcesRequest, 1, resource_types=[1])
    listed = {(r.resource_type, r.resource_name) for r in all_.config_resources}
    node = "1"
    assert {(2, topic), (4, node), (8, node)} <= listed, listed
    assert all(t in (2, 4, 8) for t, _ in listed)
    assert {r.resource_name for r in topics.config_resources} >= {topic}
    assert all(r.resource_type == 2 for r in topics.config_resources)
    assert (v0.error_code, v0.config_resources) == (NONE, [])
    assert (bad.error_code, bad.config_resources) == (UNSUPPORTED_VERSION, [])
    assert group_on_v0.error_code == UNSUPPORTED_VERSION
    out = java("config-resources", broker.bootstrap)
    assert {f"TOPIC {topic}", f"BROKER {node}", f"BROKER_LOGGER {node}"} <= set(out["ALL"])
    assert f"{topic}" in out["TOPIC"] and all(not n.startswith("__") or n == "__consumer_offsets" for n in out["TOPIC"])
    admin = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        got = admin.list_config_resources()
    finally:
        admin.close()
    assert topic in got.get("topic", []) and node in got.get("broker", []), got


def test_describe_producers(broker):
    """DescribeProducers (61) lists the idempotent producers a partition's log knows: id, epoch,
    last sequence, last timestamp, coordinator epoch -1 and no transaction (Kafka's
    UnifiedLog.activeProducers) — through Kafka's kafka-transactions.sh describe-producers, the
    Java admin client and kafka-python; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION and an
    illegal topic name INVALID_TOPIC_EXCEPTION per partition."""
    topic = unique_topic("producers")
    create_topic(broker.bootstrap, topic, 1)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                     "logger": CONFLUENT_COMMON["logger"]})
    for i in range(5):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=1_700_000_000_000 + i)
        p.flush(WAIT_S)  # one batch per record: the last sequence is 4
    with MessageConnection(broker.bootstrap) as conn:
        r = conn.call(DescribeProducersRequest, 0, topics=[
            {"name": topic, "partition_indexes": [0]},
            {"name": topic + "-missing", "partition_indexes": [0]},
            {"name": "bad/name", "partition_indexes": [0]}])
    [ours, missing, bad] = r.topics
    [part] = ours.partitions
    assert part.error_code == NONE
    [state] = part.active_producers
    assert (state.producer_epoch, state.last_sequence, state.last_timestamp) == (0, 4, 1_700_000_000_004)
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)
    assert missing.partitions[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert bad.partitions[0].error_code == INVALID_TOPIC_EXCEPTION
    pid = state.producer_id

    out = java("producers", broker.bootstrap, topic, "0")
    assert out["PRODUCER"] == [f"{pid} 0 4 1700000000004 - -"]

    tools = build_tools()
    run = tools.ok("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap,
                   "describe-producers", "--topic", topic, "--partition", "0")
    rows = [line.split() for line in run.out.splitlines() if line.strip()]
    assert rows[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"], run.out
    assert rows[1][:4] == [str(pid), "0", "-1", "4"], run.out

    admin = kp.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        states = admin.describe_producers([kp.TopicPartition(topic, 0)])
    finally:
        admin.close()
    [got] = states[kp.TopicPartition(topic, 0)].active_producers
    assert (got.producer_id, got.producer_epoch, got.last_sequence) == (pid, 0, 4)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("describe-cluster"), name="describe-cluster")
    c.brokers = c.processes
    c.start()
    yield c
    c.stop()


def test_describe_cluster_v2_lists_fenced_brokers(cluster):
    """DescribeCluster v2 (KIP-1073): with IncludeFencedBrokers a broker the controller fenced (its
    heartbeats stopped) is listed with IsFenced; without it, and before v2, it is not. Asking a
    broker listener for controllers is MISMATCHED_ENDPOINT_TYPE (AuthHelper
    computeDescribeClusterResponse). The Java admin client's describeCluster sees the same."""
    cluster.kill9(2)
    bootstrap = cluster.bootstrap_of([0, 1])
    one = cluster.nodes[0].address
    deadline = time.monotonic() + WAIT_S
    while True:
        with MessageConnection(one) as conn:
            r = conn.call(DescribeClusterRequest, 2, include_cluster_authorized_operations=False,
                          endpoint_type=1, include_fenced_brokers=True)
        fenced = {b.broker_id: b.is_fenced for b in r.brokers}
        if fenced.get(2):
            break
        assert time.monotonic() < deadline, f"broker 2 never shown fenced: {fenced}"
        time.sleep(0.5)
    ids = sorted(fenced)
    assert [fenced[i] for i in ids] == [i == 2 for i in ids]
    with MessageConnection(one) as conn:
        live = conn.call(DescribeClusterRequest, 2, include_cluster_authorized_operations=False,
                         endpoint_type=1, include_fenced_brokers=False)
        v1 = conn.call(DescribeClusterRequest, 1, include_cluster_authorized_operations=False, endpoint_type=1)
        controllers = conn.call(DescribeClusterRequest, 1, include_cluster_authorized_operations=False,
                                endpoint_type=2)
    assert 2 not in {b.broker_id for b in live.brokers} and 2 not in {b.broker_id for b in v1.brokers}
    assert controllers.error_code == MISMATCHED_ENDPOINT_TYPE
    out = java("cluster", bootstrap)
    assert "2 true" in out["ALL"] and all(line.endswith("false") for line in out["ALL"] if not line.startswith("2 "))
    assert "2" not in out["LIVE"]
