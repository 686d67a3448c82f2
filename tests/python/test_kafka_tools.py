"""Apache Kafka's own admin tools and Java Admin client (Kafka 4.1.0 from Maven Central) against a
real Keel cluster (three controllers, three brokers):

- `kafka-topics` (org.apache.kafka.tools.TopicCommand): --create with RF 3, 3 partitions and
  min.insync.replicas=2, --list, --describe — whose partition lines carry `Elr:` and
  `LastKnownElr:` read from DescribeTopicPartitions (API 75; without it the tool falls back to
  Metadata and prints `Elr: N/A`);
- a partition driven into a non-empty ELR (KIP-966: replicas [0, 1, 2], min ISR 2; kill -9 broker 2
  → ISR {0, 1}; kill -9 broker 1 → ISR {0}, ELR {1}) as `kafka-topics --describe` and
  `Admin.describeTopics` (tests/java/KeelDescribeElr.java) show it;
- `kafka-configs` (kafka.admin.ConfigCommand, still in kafka_2.13 in 4.1): --alter --add-config
  retention.ms and unclean.recovery.strategy=Manual, --describe, --delete-config;
- `kafka-leader-election` (org.apache.kafka.tools.LeaderElectionCommand, ElectLeaders API 43):
  PREFERRED on one partition after its preferred leader bounced, UNCLEAN on a partition that has a
  leader (nothing to elect), and --all-topic-partitions;
- `kafka-log-dirs --describe` (org.apache.kafka.tools.LogDirsCommand, DescribeLogDirs API 35,
  issue 19): every broker's log directory with each replica's size.

Cites issue 7 ("Real Kafka tools": kafka-topics, kafka-configs, kafka-leader-election and
Admin.describeTopics work against Keel; describe shows ELR) and KIP-966 (ELR, LastKnownELR,
DescribeTopicPartitions). Maven only resolves the classpath (tests/java/tools/pom.xml, cached in
tests/.cache/java/tools); the tools run as `java -cp <classpath> <main class>`, as Kafka's
bin/kafka-*.sh scripts do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka.admin import ConfigResource

from builds import java_build
from clients import ADMIN_TIMEOUT_S, confluent_admin, unique_topic
from keel_cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
JAVA_DIR = REPO / "tests" / "java"
POM = JAVA_DIR / "tools" / "pom.xml"
CACHE = REPO / "tests" / ".cache" / "java" / "tools"
JAVA_SOURCES = [JAVA_DIR / "KeelDescribeElr.java"]

TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
LEADER_ELECTION_COMMAND = "org.apache.kafka.tools.LeaderElectionCommand"
LOG_DIRS_COMMAND = "org.apache.kafka.tools.LogDirsCommand"
DESCRIBE_ELR = "KeelDescribeElr"
# Short-lived tools on a small machine: C1 only and the serial collector start fastest.
JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx512m"]
TOOL_TIMEOUT_S = 120.0
MIN_ISR = {"min.insync.replicas": "2"}


# -- the tools --------------------------------------------------------------------------------


class Run(NamedTuple):
    argv: list[str]
    code: int
    out: str
    err: str

    def report(self) -> str:
        cmd = self.argv[self.argv.index("-cp") + 2:]  # the main class and its arguments
        return f"$ java {' '.join(cmd)}\nexit {self.code}\nstdout:\n{self.out[-4000:]}\nstderr:\n{self.err[-4000:]}"


class KafkaTools:
    """Runs Kafka's tool main classes and the Java checks on one resolved classpath."""

    def __init__(self, classes: Path, classpath: str) -> None:
        self.classpath = f"{classes}:{classpath}"

    def run(self, main: str, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> Run:
        argv = ["java", *JVM_FLAGS, "-cp", self.classpath, main, *args]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        return Run(argv, p.returncode, p.stdout, p.stderr)

    def ok(self, main: str, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> Run:
        """Runs and asserts exit 0."""
        r = self.run(main, *args, timeout_s=timeout_s)
        assert r.code == 0, f"{main.rsplit('.', 1)[-1]} failed\n{r.report()}"
        return r

    def topics(self, bootstrap: str, *args: str) -> Run:
        return self.ok(TOPIC_COMMAND, "--bootstrap-server", bootstrap, *args)

    def configs(self, bootstrap: str, *args: str) -> Run:
        return self.run(CONFIG_COMMAND, "--bootstrap-server", bootstrap, *args)

    def elect(self, bootstrap: str, *args: str) -> Run:
        return self.run(LEADER_ELECTION_COMMAND, "--bootstrap-server", bootstrap, *args)


def build_tools() -> KafkaTools:
    """Resolves the tools' classpath once per pom change and compiles the Java checks once per
    source change (both cached in tests/.cache/java/tools)."""
    return KafkaTools(*java_build(POM, CACHE, JAVA_SOURCES))


@pytest.fixture(scope="module")
def tools() -> KafkaTools:
    return build_tools()


@pytest.fixture(scope="module")
def tools_cluster(tmp_path_factory, tools):
    """One cluster shared by the non-destructive tests of this file (the leader-election test
    bounces broker 0 and waits for it to rejoin)."""
    c = Cluster(tmp_path_factory.mktemp("tools"), name="tools")
    c.brokers = c.processes  # conftest attaches these processes' log tails to a failing test's report
    c.start()
    yield c
    c.stop()


# -- output parsing ---------------------------------------------------------------------------


def _fields(line: str) -> dict[str, str]:
    """`\tTopic: t\tPartition: 0\tLeader: 1\t...\tElr: \tLastKnownElr: ` → {name: value} (values
    stripped; an empty list prints as an empty value)."""
    out = {}
    for part in line.rstrip("\n").split("\t"):
        if ":" in part:
            k, _, v = part.partition(":")
            out[k.strip()] = v.strip()
    return out


class Described(NamedTuple):
    header: dict[str, str]
    partitions: dict[int, dict[str, str]]


def parse_describe(out: str, topic: str) -> Described:
    """kafka-topics --describe output for one topic: the `Topic: ...\tPartitionCount: ...` line and
    the `\tTopic: ...\tPartition: N\t...` lines."""
    header: dict[str, str] = {}
    parts: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        f = _fields(line)
        if f.get("Topic") != topic:
            continue
        if "Partition" in f:
            parts[int(f["Partition"])] = f
        elif "PartitionCount" in f:
            header = f
    return Described(header, parts)


def ids(value: str) -> list[int]:
    return [int(x) for x in value.split(",") if x.strip()]


def elected_partitions(out: str, prefix: str) -> set[str]:
    """The `topic-partition`s that LeaderElectionCommand listed on its line starting with `prefix`
    (`Successfully completed leader election (PREFERRED) for partitions a-0, b-0`)."""
    found: set[str] = set()
    for line in out.splitlines():
        if line.startswith(prefix):
            found |= {p.strip() for p in line.split(" for partitions ", 1)[1].split(",") if p.strip()}
    return found


SUCCEEDED = "Successfully completed leader election"
ALREADY = "Valid replica already elected for partitions"
FAILED = "Error completing leader election"


def dynamic_topic_configs(out: str, topic: str) -> dict[str, str]:
    """kafka-configs --describe for a topic: `Dynamic configs for topic T are:` then one
    `  name=value sensitive=false synonyms={...}` line per config set on the topic."""
    assert f"Dynamic configs for topic {topic} are:" in out, f"no dynamic configs header in:\n{out}"
    configs = {}
    for line in out.splitlines():
        if line.startswith("  ") and "=" in line:
            name, _, rest = line.strip().partition("=")
            configs[name] = rest.split(" sensitive=", 1)[0]
    return configs


def wait_for_elr(c: Cluster, tools: KafkaTools, bootstrap: str, topic: str, elr: list[int],
                 timeout_s: float = 30.0) -> dict[str, str]:
    """Runs kafka-topics --describe until partition 0's line shows `Elr: <elr>`; returns its fields."""
    last: list[str] = []

    def described():
        out = tools.topics(bootstrap, "--describe", "--topic", topic).out
        last[:] = [out]
        p = parse_describe(out, topic).partitions.get(0)
        return p if p is not None and p.get("Elr") != "N/A" and ids(p["Elr"]) == elr else None

    return c.wait_for(described, timeout_s, f"kafka-topics --describe to show {topic}-0 with Elr: {elr}",
                      state=lambda: last[0] if last else None, interval_s=0.5)


# -- kafka-topics -----------------------------------------------------------------------------


def test_kafka_topics_create_and_list(tools, tools_cluster):
    """kafka-topics --create (3 partitions, RF 3, --config min.insync.replicas=2) prints `Created
    topic T.`, the partitions get three in-sync replicas each, and --list shows the topic."""
    c = tools_cluster
    topic = unique_topic("kt-create")
    out = tools.topics(c.bootstrap, "--create", "--topic", topic, "--partitions", "3",
                       "--replication-factor", "3", "--config", "min.insync.replicas=2").out
    assert f"Created topic {topic}." in out, out
    c.wait_for_full_isr(topic, range(3))
    state = c.partition_state(topic)
    assert sorted(state) == [0, 1, 2] and all(len(s.replicas) == 3 for s in state.values()), state
    listed = tools.topics(c.bootstrap, "--list").out.split()
    assert topic in listed, f"{topic} not in kafka-topics --list: {listed}"

    dup = tools.run(TOPIC_COMMAND, "--bootstrap-server", c.bootstrap, "--create", "--topic", topic,
                    "--partitions", "1")
    assert dup.code == 1 and "already exists" in dup.out, f"creating {topic} twice\n{dup.report()}"


def test_kafka_topics_describe(tools, tools_cluster):
    """kafka-topics --describe: the topic line (id, 3 partitions, RF 3, min.insync.replicas=2 among
    the overridden configs) and per partition leader, replicas, ISR, and `Elr:` / `LastKnownElr:`
    as empty lists — read from DescribeTopicPartitions, so not `N/A`."""
    c = tools_cluster
    topic = unique_topic("kt-describe")
    state = c.create_topic(topic, partitions=3, replication_factor=3, config=MIN_ISR)
    out = tools.topics(c.bootstrap, "--describe", "--topic", topic).out
    d = parse_describe(out, topic)
    assert d.header.get("PartitionCount") == "3" and d.header.get("ReplicationFactor") == "3", out
    assert d.header.get("TopicId") not in (None, "", "AAAAAAAAAAAAAAAAAAAAAA"), out
    assert "min.insync.replicas=2" in d.header.get("Configs", "").split(","), out
    assert sorted(d.partitions) == [0, 1, 2], out
    for p, f in d.partitions.items():
        assert int(f["Leader"]) == state[p].leader, f"partition {p}: {f} vs metadata {state[p]}"
        assert tuple(ids(f["Replicas"])) == state[p].replicas, f"partition {p}: {f} vs {state[p]}"
        assert set(ids(f["Isr"])) == set(state[p].replicas), f"partition {p}: {f}"
        assert "Elr" in f and "LastKnownElr" in f, f"partition {p}: no Elr/LastKnownElr fields:\n{out}"
        assert f["Elr"] == "" and f["LastKnownElr"] == "", (
            f"partition {p}: expected empty ELR and LastKnownELR from DescribeTopicPartitions (API 75), "
            f"got Elr: {f['Elr']!r} LastKnownElr: {f['LastKnownElr']!r} (N/A: the tool fell back to Metadata)\n{out}")


def test_describe_shows_elr(tools, cluster):
    """KIP-966 through Kafka's tools: replicas [0, 1, 2], min ISR 2; broker 2 is killed (ISR {0, 1},
    at min ISR, so no ELR), then broker 1 (ISR {0}: broker 1 left an ISR at min ISR and becomes an
    eligible leader replica). kafka-topics --describe against broker 0 prints `Leader: 0 ... Isr: 0
    Elr: 1 LastKnownElr: ` (empty), and Admin.describeTopics gives elr() == [1],
    lastKnownElr() == []."""
    c = cluster("tools-elr")
    topic = unique_topic("kt-elr")
    out = tools.topics(c.bootstrap, "--create", "--topic", topic, "--replica-assignment", "0:1:2",
                       "--config", "min.insync.replicas=2").out
    assert f"Created topic {topic}." in out, out
    c.wait_for_full_isr(topic, [0])
    before = tools.ok(DESCRIBE_ELR, c.bootstrap, topic).out
    assert f"PARTITION topic={topic} partition=0 leader=0 replicas=0,1,2 isr=0,1,2 elr= lastKnownElr=" in before, (
        f"Admin.describeTopics before any fault (empty ELR lists, not null):\n{before}")

    c.kill9(2)
    c.wait_for_isr(topic, 0, {0, 1})
    c.kill9(1)
    st = c.wait_for_isr(topic, 0, {0})
    assert st.leader == 0, st

    only0 = c.bootstrap_of([0])
    f = wait_for_elr(c, tools, only0, topic, [1])
    assert (f["Leader"], f["Replicas"], f["Isr"], f["Elr"], f["LastKnownElr"]) == ("0", "0,1,2", "0", "1", ""), f
    header = parse_describe(tools.topics(only0, "--describe", "--topic", topic).out, topic).header
    assert header.get("ReplicationFactor") == "3" and "min.insync.replicas=2" in header.get("Configs", ""), header

    java = tools.ok(DESCRIBE_ELR, only0, topic)
    line = f"PARTITION topic={topic} partition=0 leader=0 replicas=0,1,2 isr=0 elr=1 lastKnownElr="
    assert line in java.out.splitlines() and "DESCRIBE-ELR-OK" in java.out, (
        f"Admin.describeTopics: expected the line\n{line}\n{java.report()}")


# -- kafka-configs ----------------------------------------------------------------------------


def test_kafka_configs_alter_describe_delete(tools, tools_cluster):
    """kafka-configs --alter --add-config retention.ms=3600000,unclean.recovery.strategy=Manual,
    --describe lists both as the topic's dynamic configs (and Keel's DescribeConfigs agrees),
    --delete-config unclean.recovery.strategy removes only that one, deleting a config that is not
    set fails in the tool (`Invalid config(s)`), and an unknown strategy is refused by the broker."""
    c = tools_cluster
    topic = unique_topic("kt-configs")
    c.create_topic(topic, partitions=1, replication_factor=3, config=MIN_ISR)
    entity = ["--entity-type", "topics", "--entity-name", topic]

    r = tools.configs(c.bootstrap, "--alter", *entity,
                      "--add-config", "retention.ms=3600000,unclean.recovery.strategy=Manual")
    assert r.code == 0 and f"Completed updating config for topic {topic}." in r.out, r.report()

    r = tools.configs(c.bootstrap, "--describe", *entity)
    assert r.code == 0, r.report()
    got = dynamic_topic_configs(r.out, topic)
    # Keel stores enumerated values in its canonical lower case (docs/configuration.md).
    assert got.get("retention.ms") == "3600000" and got.get("unclean.recovery.strategy", "").lower() == "manual", (
        r.report())
    assert got.get("min.insync.replicas") == "2", r.report()

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = confluent_admin(c.bootstrap)  # held: the futures fail once the client is collected
    entries = admin.describe_configs([res])[res].result(timeout=ADMIN_TIMEOUT_S)
    assert entries["retention.ms"].value == "3600000", entries["retention.ms"]
    assert entries["unclean.recovery.strategy"].value.lower() == "manual", entries["unclean.recovery.strategy"]

    r = tools.configs(c.bootstrap, "--alter", *entity, "--delete-config", "unclean.recovery.strategy")
    assert r.code == 0 and f"Completed updating config for topic {topic}." in r.out, r.report()
    r = tools.configs(c.bootstrap, "--describe", *entity)
    got = dynamic_topic_configs(r.out, topic)
    assert "unclean.recovery.strategy" not in got and got.get("retention.ms") == "3600000", r.report()

    r = tools.configs(c.bootstrap, "--alter", *entity, "--delete-config", "unclean.recovery.strategy")
    assert r.code != 0 and "Invalid config(s): unclean.recovery.strategy" in r.err, r.report()

    r = tools.configs(c.bootstrap, "--alter", *entity, "--add-config", "unclean.recovery.strategy=Sometimes")
    assert r.code != 0 and "InvalidConfigurationException" in r.err and "unclean.recovery.strategy" in r.err, (
        f"an invalid strategy must be refused by the broker (INVALID_CONFIG)\n{r.report()}")


# -- kafka-leader-election --------------------------------------------------------------------


def test_kafka_leader_election(tools, tools_cluster):
    """Two topics with preferred leader 0 ([0, 1, 2] and [0, 2, 1]); broker 0 is stopped (SIGTERM),
    leadership moves away, broker 0 restarts and rejoins every ISR — and stays a follower (Keel has
    no automatic preferred-leader rebalance). Then kafka-leader-election:
    - --election-type PREFERRED --topic A --partition 0: `Successfully completed leader election
      (PREFERRED) for partitions A-0`, and every broker's metadata shows leader 0 (B untouched);
    - the same again: `Valid replica already elected for partitions A-0`;
    - UNCLEAN on B-0, which has a leader: `Valid replica already elected for partitions B-0`
      (ELECTION_NOT_NEEDED), exit 0, leader and epoch unchanged;
    - PREFERRED --all-topic-partitions: elects B-0 (and any other partition off its preferred
      leader), not A-0; afterwards every partition of the cluster is led by replicas[0];
    - PREFERRED and UNCLEAN --all-topic-partitions again: exit 0, nothing elected, nothing failed.
    """
    c = tools_cluster
    a, b = unique_topic("kt-elect-a"), unique_topic("kt-elect-b")
    c.create_topic(a, assignment=[[0, 1, 2]], config=MIN_ISR)
    c.create_topic(b, assignment=[[0, 2, 1]], config=MIN_ISR)

    assert c.terminate(0) == 0, c.broker(0).log_tail()
    for t in (a, b):
        c.wait_for_state(t, 0, lambda s: s.leader in (1, 2), "leadership moved off stopped broker 0")
    c.restart(0)
    all_topics = [t for t in tools.topics(c.bootstrap, "--list").out.split() if t]
    assert a in all_topics and b in all_topics, all_topics
    for t in all_topics:
        c.wait_for_full_isr(t, sorted(c.partition_state(t)))
    before = {t: c.partition_state(t)[0] for t in (a, b)}
    assert before[a].leader != 0 and before[b].leader != 0, (
        f"the preferred leader 0 took leadership back by itself (automatic rebalance?): {before}")

    r = tools.elect(c.bootstrap, "--election-type", "PREFERRED", "--topic", a, "--partition", "0")
    assert r.code == 0 and elected_partitions(r.out, SUCCEEDED) == {f"{a}-0"}, r.report()
    assert f"{SUCCEEDED} (PREFERRED) for partitions {a}-0" in r.out, r.report()
    c.wait_for_state(a, 0, lambda s: s.leader == 0 and s.isr == {0, 1, 2}, "preferred leader 0 elected")
    assert c.partition_state(b)[0].leader == before[b].leader, "electing A's preferred leader moved B"

    r = tools.elect(c.bootstrap, "--election-type", "PREFERRED", "--topic", a, "--partition", "0")
    assert r.code == 0 and f"{ALREADY} {a}-0" in r.out and SUCCEEDED not in r.out, r.report()

    r = tools.elect(c.bootstrap, "--election-type", "UNCLEAN", "--topic", b, "--partition", "0")
    assert r.code == 0 and f"{ALREADY} {b}-0" in r.out, r.report()
    assert SUCCEEDED not in r.out and FAILED not in r.out, r.report()
    after_unclean = c.partition_state(b)[0]
    assert (after_unclean.leader, after_unclean.leader_epoch) == (before[b].leader, before[b].leader_epoch), (
        f"UNCLEAN election on a partition with a leader changed it: {before[b]} -> {after_unclean}")

    r = tools.elect(c.bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions")
    elected = elected_partitions(r.out, SUCCEEDED)
    assert r.code == 0 and FAILED not in r.out, r.report()
    assert f"{b}-0" in elected and f"{a}-0" not in elected, r.report()
    for t in all_topics:
        for p in sorted(c.partition_state(t)):
            c.wait_for_state(t, p, lambda s: s.leader == s.replicas[0], "the preferred replica leads")

    for kind in ("PREFERRED", "UNCLEAN"):
        r = tools.elect(c.bootstrap, "--election-type", kind, "--all-topic-partitions")
        assert r.code == 0 and SUCCEEDED not in r.out and FAILED not in r.out, (
            f"{kind} --all-topic-partitions with every partition on its preferred leader\n{r.report()}")


def test_kafka_log_dirs_describe(tools, tools_cluster):
    """kafka-log-dirs --describe --topic-list T asks every broker for its log directories
    (DescribeLogDirs): each of the three brokers answers with its one directory, no error, and
    every replica of T with a size that covers what was produced."""
    import json
    c = tools_cluster
    topic = unique_topic("kt-logdirs")
    tools.topics(c.bootstrap, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "3")
    c.wait_for_full_isr(topic, range(2))
    from clients import confluent_produce, make_records
    confluent_produce(c.bootstrap, topic, make_records(200, 2, tag="logdirs", value_bytes=500))
    out = tools.ok(LOG_DIRS_COMMAND, "--bootstrap-server", c.bootstrap, "--describe", "--topic-list", topic).out
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    brokers = {b["broker"]: b["logDirs"] for b in report["brokers"]}
    assert sorted(brokers) == [0, 1, 2], out
    for broker, dirs in brokers.items():
        assert len(dirs) == 1 and dirs[0]["error"] is None, out
        assert dirs[0]["logDir"] == str(c.broker(broker).log_dir), out
        parts = {p["partition"]: p for p in dirs[0]["partitions"]}
        assert sorted(parts) == [f"{topic}-0", f"{topic}-1"], out
        assert all(p["size"] >= 100 * 500 and p["offsetLag"] == 0 and not p["isFuture"] for p in parts.values()), out


# -- kafka-features ---------------------------------------------------------------------------


def test_kafka_features_describe_lists_what_keel_finalizes(tools_cluster, tools):
    """`kafka-features describe` (org.apache.kafka.tools.FeatureCommand, ApiVersions v3+
    features, issue 24): KIP-966's `eligible.leader.replicas.version` finalized at 1 (ELR on)
    and KIP-890's `transaction.version` at 2, each with the range Keel supports."""
    run = tools.ok("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                   tools_cluster.bootstrap, "describe")
    features = {f["Feature"]: f for f in (_fields(line) for line in run.out.splitlines()) if "Feature" in f}
    assert set(features) == {"eligible.leader.replicas.version", "transaction.version"}, run.out
    elr, tv = features["eligible.leader.replicas.version"], features["transaction.version"]
    assert (elr["SupportedMinVersion"], elr["SupportedMaxVersion"], elr["FinalizedVersionLevel"]) == ("0", "1", "1"), run.out
    assert (tv["SupportedMinVersion"], tv["SupportedMaxVersion"], tv["FinalizedVersionLevel"]) == ("0", "2", "2"), run.out
    assert int(elr["Epoch"]) >= 0 and elr["Epoch"] == tv["Epoch"], run.out
