"""The Prometheus endpoint of real `keel` processes (issue 7, "Metrics"; docs/operations.md):
`metrics.port` on `keel server` (broker and controller processes) and `keel dev --metrics-port`,
scraped over HTTP as Prometheus does, in the text format 0.0.4.

Cites KIP-966 "Metrics" (electable_replicas_count) and Kafka's ReplicaManager metrics
(UnderReplicatedPartitions, IsrShrinksPerSec, IsrExpandsPerSec) and ActiveControllerCount.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request

import pytest

from clients import confluent_produce_one, create_topic, unique_topic
from keel_broker import Broker, BrokerError, free_port, retire
from keel_cluster import Cluster

WAIT_S = 30.0
SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Samples = dict[tuple[str, frozenset], float]


def scrape(port: int) -> Samples:
    """GET /metrics; checks the content type and that every line is valid text format 0.0.4 with
    each family's TYPE given once; returns {(name, labels): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
        text = r.read().decode()
    samples: Samples = {}
    types: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split(" ")[2]
            assert family not in types, f"TYPE of {family} given twice"
            types.add(family)
            continue
        if line.startswith("#") or not line:
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(LABEL_RE.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample `name{labels}` (0 when absent)."""
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


def total(samples: Samples, name: str) -> float:
    """The sum of every series of `name`."""
    return sum(v for (n, _), v in samples.items() if n == name)


def scrape_until(port: int, what: str, check) -> Samples:
    deadline = time.monotonic() + WAIT_S
    while True:
        samples = scrape(port)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, f"never saw {what} on :{port}"
        time.sleep(0.2)


def test_server_serves_metrics(start_broker):
    """`keel server` with metrics.port: /metrics counts the produce (bytes, records, Produce
    latency), reports its in-process controller active with electable_replicas_count for the
    partition, and answers 404 elsewhere; metrics.port=-1 (the default) serves nothing."""
    port = free_port()
    b = start_broker("metrics", config={"metrics.port": str(port), "metrics.host": "127.0.0.1"})
    topic = unique_topic("metrics")
    create_topic(b.bootstrap, topic, 1)
    err, _ = confluent_produce_one(b.bootstrap, topic, b"counted")
    assert err is None, err
    samples = scrape_until(port, "the produce and the controller's gauges", lambda s: (
        value(s, "keel_electable_replicas_count", node_id=1, topic=topic, partition=0) == 1
        and value(s, "keel_bytes_in_total", node_id=1) > 0))
    assert value(samples, "keel_records_in_total", node_id=1) >= 1
    assert value(samples, "keel_request_latency_seconds_count", node_id=1, listener="broker", api="Produce") >= 1
    assert value(samples, "keel_active_controller_count", node_id=1) == 1
    assert value(samples, "keel_offline_partitions_count", node_id=1) == 0
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    assert e.value.code == 404

    off = start_broker("metrics-off", config={"metrics.port": "-1"})
    assert "metrics endpoint listening" not in off.log_text()


def test_group_and_cleaner_metrics(start_broker):
    """The coordinator's and the log cleaner's series (Kafka's NumGroups* / NumOffsets,
    offset-commit-rate, the LogCleaner's work): 60 commits of a commit-only group count exactly
    60 and leave one Empty group with one offset; a subscribed consumer makes one Stable group;
    the cleaner, compacting the small segments of __consumer_offsets, counts its passes, bytes
    and removed records."""
    import confluent_kafka as ck

    port = free_port()
    b = start_broker("metrics-groups", config={
        "metrics.port": str(port), "metrics.host": "127.0.0.1",
        "log.cleaner.backoff.ms": "200", "log.cleaner.min.cleanable.ratio": "0.01",
        "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "2048",
        "group.initial.rebalance.delay.ms": "0"})
    topic = unique_topic("metrics-groups")
    create_topic(b.bootstrap, topic, 1)
    err, _ = confluent_produce_one(b.bootstrap, topic, b"x")
    assert err is None, err
    quiet = {"log_level": 0, "enable.auto.commit": False}
    committer = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("commits"), **quiet})
    try:
        for n in range(1, 61):
            committer.commit(offsets=[ck.TopicPartition(topic, 0, n)], asynchronous=False)
    finally:
        committer.close()
    samples = scrape_until(port, "60 commits and an Empty group with its offset", lambda s: (
        value(s, "keel_offset_commits_total", node_id=1) >= 60
        and value(s, "keel_group_count", node_id=1, state="Empty") == 1
        and value(s, "keel_group_offsets_count", node_id=1) == 1))
    assert value(samples, "keel_offset_commits_total", node_id=1) == 60
    assert value(samples, "keel_group_offsets_count", node_id=1) == 1
    assert value(samples, "keel_offsets_expired_total", node_id=1) == 0

    member = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("member"),
                          "auto.offset.reset": "earliest", **quiet})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while member.poll(0.5) is None:
            assert time.monotonic() < deadline, "the consumer never got the record"
        samples = scrape_until(port, "a Stable group", lambda s: (
            value(s, "keel_group_count", node_id=1, state="Stable") == 1))
        assert value(samples, "keel_group_count", node_id=1, state="Empty") == 1
        assert value(samples, "keel_group_count", node_id=1, state="PreparingRebalance") == 0
    finally:
        member.close()

    samples = scrape_until(port, "a log cleaner pass that removed records", lambda s: (
        value(s, "keel_log_cleaner_passes_total", node_id=1) >= 1
        and value(s, "keel_log_cleaner_records_removed_total", node_id=1) >= 1))
    read = value(samples, "keel_log_cleaner_bytes_read_total", node_id=1)
    written = value(samples, "keel_log_cleaner_bytes_written_total", node_id=1)
    assert 0 <= written < read, (read, written)
    assert value(samples, "keel_log_cleaner_records_removed_total", node_id=1) >= 1
    assert value(samples, "keel_log_cleaner_failures_total", node_id=1) == 0
    assert ("keel_log_cleaner_seconds_total", frozenset({("node_id", "1")})) in samples


def test_bad_metrics_port_names_the_key(tmp_path_factory):
    """A bad metrics.port is refused (by `keel format` and `keel server` alike, which read the
    same config) with an error naming the key."""
    b = Broker(tmp_path_factory.mktemp("metrics-bad"), name="metrics-bad", config={"metrics.port": "99999"})
    try:
        with pytest.raises(BrokerError) as e:
            b.start(timeout_s=15)
        assert "metrics.port" in str(e.value), e.value
    finally:
        retire(b)


def test_cluster_metrics_follow_a_lost_replica(tmp_path_factory):
    """Three controllers and three brokers, each with its own metrics.port: exactly one
    controller reports active_controller_count 1; kill -9 of a follower makes the leader's
    partition under-replicated (an ISR shrink) and electable_replicas_count drop to 2 on the
    active controller; the follower's return expands the ISR again."""
    c = Cluster(tmp_path_factory.mktemp("metrics-cluster"), name="metrics")
    ports: dict[int, int] = {}
    for p in c.processes:
        ports[p.node_id] = free_port()
        p.config["metrics.port"] = str(ports[p.node_id])
    try:
        c.start()
        topic = unique_topic("metrics-isr")
        c.create_topic(topic, partitions=1, replication_factor=3)
        c.wait_for_full_isr(topic, [0])
        state = c.partition_state(topic)[0]
        leader = state.leader
        follower = next(i for i in range(3) if i != leader)

        def active_controller(samples_by_node) -> int:
            actives = [n for n, s in samples_by_node.items() if value(s, "keel_active_controller_count", node_id=n) == 1]
            assert len(actives) <= 1, f"two active controllers: {actives}"
            return actives[0] if actives else -1

        deadline = time.monotonic() + WAIT_S
        while True:
            by_node = {n: scrape(ports[n]) for n in (100, 101, 102)}
            active = active_controller(by_node)
            if active >= 0 and value(by_node[active], "keel_electable_replicas_count",
                                     node_id=active, topic=topic, partition=0) == 3:
                break
            assert time.monotonic() < deadline, "no active controller reporting the partition"
            time.sleep(0.2)
        assert sum(total(s, "keel_active_controller_count") for s in by_node.values()) == 1

        c.kill9(follower)
        leader_port = ports[leader]
        samples = scrape_until(leader_port, "the ISR shrink on the leader", lambda s: (
            value(s, "keel_under_replicated_partitions_count", node_id=leader) == 1
            and value(s, "keel_isr_shrinks_total", node_id=leader) >= 1))
        assert value(samples, "keel_under_min_isr_partitions_count", node_id=leader) == 0
        scrape_until(ports[active], "electable_replicas_count 2", lambda s: value(
            s, "keel_electable_replicas_count", node_id=active, topic=topic, partition=0) == 2)

        c.restart(follower)
        scrape_until(leader_port, "the ISR expansion on the leader", lambda s: (
            value(s, "keel_under_replicated_partitions_count", node_id=leader) == 0
            and value(s, "keel_isr_expands_total", node_id=leader) >= 1))
    finally:
        c.stop()


class DevWithMetrics(Broker):
    """`keel dev` on its own metrics port (the default 9464 may be taken on a test machine)."""

    def __init__(self, *args, metrics_port: int, **kwargs) -> None:
        self.metrics_port = metrics_port
        super().__init__(*args, mode="dev", **kwargs)

    def argv(self, binary):
        return [*super().argv(binary), "--metrics-port", str(self.metrics_port)]


def test_dev_serves_one_endpoint_for_every_node(tmp_path_factory):
    """`keel dev --metrics-port P` prints the endpoint next to the bootstrap address; every node
    of the process reports into it with its own node_id; one controller is active."""
    port = free_port()
    b = DevWithMetrics(tmp_path_factory.mktemp("metrics-dev"), name="metrics-dev", metrics_port=port)
    try:
        b.start()
        assert f"keel: metrics: http://127.0.0.1:{port}/metrics" in b.log_text(), b.log_tail()
        samples = scrape_until(port, "an active controller", lambda s: total(s, "keel_active_controller_count") == 1)
        controllers = {dict(l)["node_id"] for (n, l) in samples if n == "keel_active_controller_count"}
        brokers = {dict(l)["node_id"] for (n, l) in samples if n == "keel_bytes_in_total"}
        assert controllers == {"100", "101", "102"}, controllers
        assert brokers == {"0", "1", "2"}, brokers
    finally:
        retire(b)
