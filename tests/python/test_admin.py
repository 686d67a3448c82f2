"""Topic administration through each client's admin API.

Kafka protocol: CreateTopics (API 19), Metadata (3), DescribeConfigs (32),
IncrementalAlterConfigs (44, KIP-339), CreatePartitions (37, KIP-195), DeleteTopics (20),
DescribeCluster (60, KIP-700). Error codes: TOPIC_ALREADY_EXISTS 36, INVALID_CONFIG 40.
"""

from __future__ import annotations

import time

import confluent_kafka as ck
import kafka.errors as kerr
import pytest
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions,
                                   NewTopic)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from clients import (ADMIN_TIMEOUT_S, RDKAFKA_LOG, confluent_admin, confluent_consume, confluent_produce_one, unique_topic,
                     wait_for_leaders)

RETENTION_MS = "3600000"
RETENTION_MS_ALTERED = "7200000"
KAFKA_DEFAULT_RETENTION_MS = "604800000"
T = ADMIN_TIMEOUT_S


def _error_code(exc: ck.KafkaException) -> int:
    return exc.args[0].code()


def _describe_config(admin, topic: str) -> dict[str, ConfigEntry]:
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return fut.result(timeout=T)


def _wait_gone_confluent(admin, topic: str) -> None:
    """Polls describe_topics (Metadata without auto-creation) until the topic is unknown."""
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        try:
            admin.describe_topics(ck.TopicCollection([topic]))[topic].result(timeout=T)
        except ck.KafkaException as e:
            assert _error_code(e) == ck.KafkaError.UNKNOWN_TOPIC_OR_PART, str(e)
            return
        time.sleep(0.1)
    raise AssertionError(f"confluent-kafka: {topic} still described {T}s after DeleteTopics succeeded")


# -- confluent-kafka --------------------------------------------------------------------------


def test_confluent_topic_lifecycle(broker):
    """confluent-kafka AdminClient creates (with retention.ms), lists, describes, describes configs,
    alters configs incrementally, adds partitions and deletes a topic (KIP-339, KIP-195)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("admin-ck")

    fut = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                        config={"retention.ms": RETENTION_MS})])[topic]
    assert fut.result(timeout=T) is None
    wait_for_leaders(admin, topic, 3)

    md = admin.list_topics(topic=topic, timeout=10)
    assert list(md.brokers) == [1], f"Metadata brokers: {md.brokers}"

    desc = admin.describe_topics(ck.TopicCollection([topic]))[topic].result(timeout=T)
    assert desc.name == topic
    assert sorted(p.id for p in desc.partitions) == [0, 1, 2]
    for p in desc.partitions:
        assert p.leader is not None and p.leader.id == 1, f"partition {p.id} leader {p.leader}"
        assert [n.id for n in p.replicas] == [1] and [n.id for n in p.isr] == [1], (
            f"partition {p.id}: replicas {p.replicas}, isr {p.isr}")

    configs = _describe_config(admin, topic)
    assert "retention.ms" in configs, f"DescribeConfigs lacks retention.ms: {sorted(configs)}"
    assert configs["retention.ms"].value == RETENTION_MS
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (
        f"retention.ms set at creation should report source DYNAMIC_TOPIC_CONFIG, got {configs['retention.ms'].source}")

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", RETENTION_MS_ALTERED, incremental_operation=AlterConfigOpType.SET)])
    [fut] = admin.incremental_alter_configs([res]).values()
    fut.result(timeout=T)
    assert _describe_config(admin, topic)["retention.ms"].value == RETENTION_MS_ALTERED

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    [fut] = admin.incremental_alter_configs([res]).values()
    fut.result(timeout=T)
    entry = _describe_config(admin, topic)["retention.ms"]
    assert entry.value == KAFKA_DEFAULT_RETENTION_MS and entry.is_default, (
        f"after DELETE retention.ms should fall back to Kafka's default: {entry.value} (default={entry.is_default})")

    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=T)
    wait_for_leaders(admin, topic, 5)
    err, msg = confluent_produce_one(broker.bootstrap, topic, b"to-new-partition", partition=4)
    assert err is None, f"produce to partition 4 created by CreatePartitions: {err}"
    got = confluent_consume(broker.bootstrap, topic, [4], {4: 1})
    assert [r.value for _, r in got[4]] == [b"to-new-partition"]

    admin.delete_topics([topic])[topic].result(timeout=T)
    _wait_gone_confluent(admin, topic)


def test_confluent_list_topics(broker):
    """list_topics() with no topic (Metadata with a null topic array: all topics) names every created
    topic and the single broker (Metadata v12+, librdkafka's request)."""
    admin = confluent_admin(broker.bootstrap)
    names = [unique_topic("list-ck") for _ in range(3)]
    for name in names:
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=T)
    md = admin.list_topics(timeout=10)
    assert set(names) <= set(md.topics), f"list_topics lacks {set(names) - set(md.topics)}"
    assert list(md.brokers) == [1], f"Metadata brokers: {md.brokers}"


def test_confluent_recreate_deleted_topic(broker):
    """A topic deleted and created again under the same name starts empty at offset 0 with the new
    partition count (DeleteTopics removes the log, KIP-516 gives the new topic a new id)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("recreate")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=T)
    wait_for_leaders(admin, topic, 2)
    for p in (0, 1):
        err, _ = confluent_produce_one(broker.bootstrap, topic, b"old-%d" % p, partition=p)
        assert err is None, err
    admin.delete_topics([topic])[topic].result(timeout=T)
    _wait_gone_confluent(admin, topic)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=T)
    wait_for_leaders(admin, topic, 1)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "logger": RDKAFKA_LOG})
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10, cached=False) == (0, 0)
    finally:
        c.close()
    err, msg = confluent_produce_one(broker.bootstrap, topic, b"new")
    assert err is None and msg.offset() == 0, (err, msg.offset() if msg else None)


def test_confluent_create_existing_topic(broker):
    """Creating a topic that exists fails with TOPIC_ALREADY_EXISTS (36) (CreateTopics, Kafka Errors)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("admin-ck-dup")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=T)
    with pytest.raises(ck.KafkaException) as e:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=T)
    assert _error_code(e.value) == ck.KafkaError.TOPIC_ALREADY_EXISTS, str(e.value)


@pytest.mark.parametrize("config", [{"retention.ms": "not-a-number"}, {"no.such.topic.config": "1"},
                                    {"cleanup.policy": "shred"}])
def test_confluent_create_topic_invalid_config(broker, config):
    """CreateTopics with a bad or unknown topic config fails with INVALID_CONFIG (40) and creates
    nothing (Kafka's TopicConfig validation)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("admin-ck-bad")
    with pytest.raises(ck.KafkaException) as e:
        admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(timeout=T)
    assert _error_code(e.value) == ck.KafkaError.INVALID_CONFIG, str(e.value)
    _wait_gone_confluent(admin, topic)


def test_confluent_alter_invalid_config(broker):
    """IncrementalAlterConfigs with an unparsable value fails with INVALID_CONFIG and keeps the old
    value (KIP-339)."""
    admin = confluent_admin(broker.bootstrap)
    topic = unique_topic("admin-ck-alter-bad")
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": RETENTION_MS})])[topic].result(timeout=T)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    [fut] = admin.incremental_alter_configs([res]).values()
    with pytest.raises(ck.KafkaException) as e:
        fut.result(timeout=T)
    assert _error_code(e.value) == ck.KafkaError.INVALID_CONFIG, str(e.value)
    assert _describe_config(admin, topic)["retention.ms"].value == RETENTION_MS


def test_confluent_describe_cluster(broker):
    """DescribeCluster names this node, a controller, and the cluster id `keel format` printed (KIP-700)."""
    admin = confluent_admin(broker.bootstrap)
    desc = admin.describe_cluster().result(timeout=T)
    assert [n.id for n in desc.nodes] == [1]
    assert desc.nodes[0].port == broker.port
    assert desc.controller is not None
    if broker.cluster_id:
        assert desc.cluster_id == broker.cluster_id, f"{desc.cluster_id} != format's {broker.cluster_id}"


# -- kafka-python -----------------------------------------------------------------------------


@pytest.fixture
def kp_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(T * 1000))
    yield admin
    admin.close()


def _kp_describe_config(admin, topic: str) -> dict:
    res = admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return res["topic"][topic]


def test_kafka_python_topic_lifecycle(broker, kp_admin):
    """kafka-python KafkaAdminClient creates (with retention.ms), lists, describes, describes configs,
    alters configs incrementally, adds partitions and deletes a topic (KIP-339, KIP-195)."""
    topic = unique_topic("admin-kp")
    kp_admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1,
                                    "configs": {"retention.ms": RETENTION_MS}}})
    kp_admin.wait_for_topics([topic], timeout_ms=int(T * 1000))
    assert topic in kp_admin.list_topics()

    [desc] = kp_admin.describe_topics([topic])
    assert desc["error_code"] == 0
    parts = sorted(desc["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in parts] == [0, 1, 2]
    assert all(p["leader_id"] == 1 for p in parts), parts

    configs = _kp_describe_config(kp_admin, topic)
    assert configs["retention.ms"]["value"] == RETENTION_MS, configs.get("retention.ms")
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG", configs["retention.ms"]

    result = kp_admin.alter_configs(
        [KpConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": RETENTION_MS_ALTERED})],
        raise_on_unknown=False, incremental=True)
    assert result == {"topic": {topic: "OK"}}, result
    assert _kp_describe_config(kp_admin, topic)["retention.ms"]["value"] == RETENTION_MS_ALTERED

    kp_admin.create_partitions({topic: 5})
    kp_admin.wait_for_topics([topic], timeout_ms=int(T * 1000))
    [desc] = kp_admin.describe_topics([topic])
    assert len(desc["partitions"]) == 5, desc

    kp_admin.delete_topics([topic])
    deadline = time.monotonic() + T
    while topic in kp_admin.list_topics():
        assert time.monotonic() < deadline, f"kafka-python: {topic} still listed after DeleteTopics"
        time.sleep(0.1)


def test_kafka_python_create_existing_topic(broker, kp_admin):
    """kafka-python: creating an existing topic raises TopicAlreadyExistsError (error 36)."""
    topic = unique_topic("admin-kp-dup")
    kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kerr.TopicAlreadyExistsError):
        kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})


def test_kafka_python_create_topic_invalid_config(broker, kp_admin):
    """kafka-python: CreateTopics with an unparsable retention.ms raises InvalidConfigurationError (40)."""
    topic = unique_topic("admin-kp-bad")
    with pytest.raises(kerr.InvalidConfigurationError):
        kp_admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1,
                                        "configs": {"retention.ms": "not-a-number"}}})
    assert topic not in kp_admin.list_topics()


def test_kafka_python_describe_cluster(broker, kp_admin):
    """kafka-python's describe_cluster (built on Metadata) reports node 1 on our port, a controller
    and the formatted cluster id (Metadata v1+ controller_id, v2+ cluster_id)."""
    desc = kp_admin.describe_cluster()
    brokers = desc["brokers"]
    assert [b["broker_id"] for b in brokers] == [1], desc
    assert desc["controller_id"] == 1, desc
    assert brokers[0]["port"] == broker.port
    if broker.cluster_id:
        assert desc["cluster_id"] == broker.cluster_id, desc
