"""Partition reassignment (issue 24) with Apache Kafka's own `kafka-reassign-partitions`
(org.apache.kafka.tools.reassign.ReassignPartitionsCommand, kafka-tools 4.x) against a real Keel
cluster of four brokers and three controllers:

- Kafka's reassign-under-bounce system test, as a user runs it: an RF 3 topic on brokers
  {0, 1, 2} moved to {1, 2, 3} with `--execute` while an acks=all idempotent producer writes
  and broker 1 is killed with -9 and restarted mid-move; `--list` until nothing is in progress,
  `--verify --preserve-throttles`; every partition ends on [1, 2, 3] in the plan's order with
  all three in the ISR, and every acknowledged record is read back at its offset;
- KIP-860's `--disallow-replication-factor-change` refusing a plan that shrinks a partition;
- `--cancel`: a move to a broker that is down stays in progress (`--list` and `keel status`
  show the adding replica; it is not counted under-replicated), the cancel puts the partition back on its replicas and the added one leaves.

AlterPartitionReassignments (45) is forwarded to the controller; ListPartitionReassignments (46)
is answered from the broker's metadata.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from clients import BackgroundProducer, confluent_consume, confluent_watermarks, unique_topic
from keel_broker import keel_bin
from keel_cluster import Cluster
from test_kafka_tools import KafkaTools, build_tools

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
MIN_ISR = {"min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return build_tools()


def reassign(tools: KafkaTools, c: Cluster, *args: str):
    return tools.run(REASSIGN, "--bootstrap-server", c.live_bootstrap, *args)


def plan(path, topic: str, replicas: dict[int, list[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in replicas.items()]}))
    return str(path)


def in_progress(tools: KafkaTools, c: Cluster) -> str:
    r = reassign(tools, c, "--list")
    assert r.code == 0, r.report()
    return r.out


def test_reassign_under_bounce_loses_nothing(cluster, tools, tmp_path):
    c: Cluster = cluster("reassign", brokers=4)
    partitions = 3
    topic = unique_topic("reassign")
    c.create_topic(topic, assignment=[[0, 1, 2], [1, 2, 0], [2, 0, 1]], config=MIN_ISR)
    target = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    producer_conf = {"enable.idempotence": True, "retries": 2_147_483_647, "retry.backoff.ms": 100,
                     "message.timeout.ms": 120_000, "socket.timeout.ms": 10_000}
    with BackgroundProducer(c.bootstrap_of([0, 2]), topic, partitions, tag="reassign",
                            value_bytes=1000, extra=producer_conf) as prod:
        prod.wait_progress(2000, what="before the reassignment")
        # Broker 3, the one being added, is frozen so the move is surely still in progress when
        # broker 1 (a replica before and after) is bounced.
        c.sigstop(3)
        run = reassign(tools, c, "--execute", "--reassignment-json-file", plan(tmp_path / "plan.json", topic, target))
        assert run.code == 0 and "Successfully started partition reassignments" in run.out, run.report()
        listed = in_progress(tools, c)
        for p in range(partitions):
            assert f"{topic}-{p}: replicas: " in listed and "adding: 3. removing: 0." in listed, listed
        c.kill9(1)
        prod.wait_progress(200, what="writes go on with broker 1 down mid-move")
        c.restart(1)
        c.sigcont(3)

        def settled():
            return "No partition reassignments found." in in_progress(tools, c)

        c.wait_for(settled, 120, "every reassignment to complete", interval_s=1.0)
        prod.wait_progress(200, what="after the reassignment")
        prod.stop()

    verify = reassign(tools, c, "--verify", "--preserve-throttles", "--reassignment-json-file",
                      str(tmp_path / "plan.json"))
    assert verify.code == 0, verify.report()
    for p in range(partitions):
        assert f"Reassignment of partition {topic}-{p} is completed." in verify.out, verify.report()
    c.wait_for_full_isr(topic, range(partitions))
    state = c.partition_state(topic)
    for p, replicas in target.items():
        assert list(state[p].replicas) == replicas, f"partition {p}: {state[p]}"
        assert state[p].leader in replicas, f"partition {p} led outside its replicas: {state[p]}"

    assert prod.crash is None, f"producer thread failed: {prod.crash!r}"
    assert not prod.errors, f"{len(prod.errors)} records failed: {prod.errors[:5]}"
    acked = list(prod.acked)
    ends = {p: hi for p, (_, hi) in confluent_watermarks(c.bootstrap_of([1, 2, 3]), topic, list(range(partitions))).items()}
    got = confluent_consume(c.bootstrap_of([1, 2, 3]), topic, list(range(partitions)), ends)
    for p, recs in got.items():
        offsets = [off for off, _ in recs]
        assert offsets == list(range(ends[p])), f"partition {p}: offsets not 0..{ends[p] - 1}: starts {offsets[:3]}"
    stored = {(p, off): r.value for p, recs in got.items() for off, r in recs}
    values = list(stored.values())
    assert len(values) == len(set(values)), "a record stored twice although the producer is idempotent"
    # librdkafka acknowledges a record without its offset when a later batch of the producer was
    # acknowledged after the request carrying it was lost (the kill): that one is looked up by
    # value.
    missing = [(p, off) for p, off, value in acked
               if (stored.get((p, off)) != value if off is not None else value not in set(values))]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records not read back, first {missing[:5]}"


def test_a_reassignment_to_a_down_broker_stays_in_progress_and_can_be_cancelled(cluster, tools, tmp_path):
    c: Cluster = cluster("reassign-cancel", brokers=4)
    topic = unique_topic("cancel")
    c.create_topic(topic, assignment=[[0, 1, 2]], config=MIN_ISR)
    # KIP-860: a plan changing the replication factor is refused when the tool says so.
    shrink = plan(tmp_path / "shrink.json", topic, {0: [0, 1]})
    refused = reassign(tools, c, "--execute", "--disallow-replication-factor-change",
                       "--reassignment-json-file", shrink)
    assert "The replication factor is changed from 3 to 2" in refused.out + refused.err, refused.report()
    assert list(c.partition_state(topic)[0].replicas) == [0, 1, 2]
    c.kill9(3)
    file = plan(tmp_path / "plan.json", topic, {0: [0, 1, 3]})
    run = reassign(tools, c, "--execute", "--reassignment-json-file", file)
    assert run.code == 0, run.report()
    listed = in_progress(tools, c)
    assert f"{topic}-0: replicas: 0,1,3,2. adding: 3. removing: 2." in listed, listed
    state = c.partition_state(topic)[0]
    assert list(state.replicas) == [0, 1, 3, 2] and 3 not in state.isr, state
    # `keel status` lists the move, and does not count the partition under-replicated: its
    # original replicas are all in sync (Kafka's replication factor during a reassignment).
    status = subprocess.run([str(keel_bin()), "status", "--json", "--bootstrap-server", c.bootstrap_of([0])],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    report = json.loads(status.stdout)
    assert report["reassigning"] == [{"topic": topic, "partition": 0, "replicas": [0, 1, 3, 2],
                                      "adding": [3], "removing": [2]}], report
    assert report["under_replicated"] == [] and report["under_min_isr"] == [], report

    # --preserve-throttles: without it the tool also clears each broker's throttle configs, one
    # request per broker, and broker 3 is down (with Kafka too that step would time out).
    cancel = reassign(tools, c, "--cancel", "--preserve-throttles", "--reassignment-json-file", file)
    assert cancel.code == 0, cancel.report()
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in cancel.out, cancel.report()
    assert "No partition reassignments found." in in_progress(tools, c)
    state = c.wait_for_state(topic, 0, lambda s: sorted(s.replicas) == [0, 1, 2], "the original replicas back")
    assert state.isr == frozenset([0, 1, 2]), state
