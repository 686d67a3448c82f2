"""The controller quorum with real processes (issue 6): three controllers (Raft), three brokers.

- kill -9 of the active controller during continuous acks=all production and a burst of topic
  creations: another controller takes over within seconds (the time is printed, and recorded in
  docs/benchmarks.md), no acknowledged record is lost and no topic is half-created;
- the `keel` admin commands sent while the quorum elects a new active controller retry
  NOT_CONTROLLER with back-off and succeed (Kafka's admin client: default.api.timeout.ms), and
  give up with the error after --api-timeout-ms when no quorum is left;
- a fresh cluster of three controller and three broker processes starts, serves and stops without
  logging a warning;
- KAFKA-532 in the KRaft world: the active controller is SIGSTOPped mid-way through topic
  creations and leader elections, another is elected, the old one resumes — it never acts again
  in its old term, and no broker ever sees two leaders for one leader epoch or a leader epoch
  going backward (no broker applied a decision the new controller did not commit).

Cites issue 6, issue 19 (the CLI across a failover; a quiet start), KAFKA-532 (../shared/seeds)
and DESIGN.md's promise that no acknowledged acks=all record is lost.
"""

from __future__ import annotations

import subprocess
import threading
import time

import confluent_kafka as ck
from confluent_kafka.admin import NewTopic

from clients import (RDKAFKA_LOG, BackgroundProducer, confluent_admin, confluent_consume, confluent_watermarks,
                     unique_topic)
from keel_broker import keel_bin
from keel_cluster import MetadataWatcher, Sample

MIN_ISR = {"min.insync.replicas": "2"}
PRODUCER = {
    "retries": 2_147_483_647,
    "retry.backoff.ms": 100,
    "message.timeout.ms": 120_000,
    "max.in.flight.requests.per.connection": 1,
    "socket.timeout.ms": 10_000,
}
BURST_PARTITIONS = 2


class TopicCreator:
    """A thread that creates topics `<prefix>-<n>` one after another (2 partitions, RF 3) until
    `stop()`, recording for each name whether CreateTopics succeeded and when."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.bootstrap, self.prefix = bootstrap, prefix
        self.outcomes: dict[str, tuple[float, str | None]] = {}  # name -> (time, error or None)
        self.crash: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"creator-{prefix}", daemon=True)

    def __enter__(self) -> "TopicCreator":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def created_after(self, t: float) -> float | None:
        """When the first topic created after `t` was acknowledged."""
        times = [at for at, err in self.outcomes.values() if err is None and at > t]
        return min(times) if times else None

    def _run(self) -> None:
        try:
            admin = confluent_admin(self.bootstrap)
            n = 0
            while not self._stop.is_set():
                name = f"{self.prefix}-{n}"
                n += 1
                future = admin.create_topics(
                    [NewTopic(name, num_partitions=BURST_PARTITIONS, replication_factor=3, config=MIN_ISR)],
                    operation_timeout=20, request_timeout=20)[name]
                try:
                    future.result(timeout=30)
                    self.outcomes[name] = (time.monotonic(), None)
                except Exception as e:  # noqa: BLE001 - recorded; the checks decide what is allowed
                    self.outcomes[name] = (time.monotonic(), str(e))
                    self._stop.wait(0.2)
                self._stop.wait(0.05)
        except BaseException as e:  # noqa: BLE001
            self.crash = e


def _assert_no_half_created_topics(c, creator: TopicCreator) -> None:
    """Every topic of the burst that exists has all its partitions, each with a leader and its
    replicas; every creation that succeeded exists."""
    def complete():
        md = confluent_admin(c.live_bootstrap).list_topics(timeout=10)
        listed = {name: t for name, t in md.topics.items() if name.startswith(creator.prefix)}
        problems = []
        for name, t in listed.items():
            if t.error is not None or len(t.partitions) != BURST_PARTITIONS or any(
                    p.leader < 0 or len(p.replicas) != 3 for p in t.partitions.values()):
                problems.append((name, t.error, {i: (p.leader, p.replicas) for i, p in t.partitions.items()}))
        missing = [name for name, (_, err) in creator.outcomes.items() if err is None and name not in listed]
        return (listed, problems, missing) if not problems and not missing else None

    listed, _, _ = c.wait_for(complete, 30, "every burst topic complete (no half-created topic)",
                              state=lambda: "half-created or missing topics")
    assert len(listed) >= 3, f"too few topics created: {sorted(listed)}"


def _assert_acked_records_read_back(c, topic: str, partitions: int, prod: BackgroundProducer) -> None:
    assert prod.crash is None, f"producer thread failed: {prod.crash!r}"
    assert not prod.errors, f"{len(prod.errors)} records failed although retries were on: {prod.errors[:5]}"
    assert prod.left_in_flight == 0, f"{prod.left_in_flight} records never got a delivery report"
    ends = {p: hi for p, (_, hi) in confluent_watermarks(c.live_bootstrap, topic, list(range(partitions))).items()}
    got = confluent_consume(c.live_bootstrap, topic, list(range(partitions)), ends)
    at = {(p, off): r.value for p, recs in got.items() for off, r in recs}
    wrong = [(p, off) for p, off, v in prod.acked if at.get((p, off)) != v]
    assert not wrong, f"{len(wrong)} acknowledged records lost or moved, first {wrong[:5]}"


def test_active_controller_kill9_loses_nothing(cluster):
    """kill -9 the active controller while producers write with acks=all and a client creates
    topics back to back: a standby takes over (time printed), production never loses an
    acknowledged record, and every topic is either fully created or absent."""
    c = cluster("ctl-kill9")
    partitions = 3
    topic = unique_topic("ctl-kill9")
    c.create_topic(topic, partitions=partitions, replication_factor=3, config=MIN_ISR)
    old = c.wait_for_active_controller()
    with BackgroundProducer(c.bootstrap, topic, partitions, tag="ctl-kill9", extra=PRODUCER, rate_per_s=500) as prod, \
            TopicCreator(c.bootstrap, unique_topic("burst")) as creator:
        prod.wait_progress(100, what="before the controller crash")
        c.wait_for(lambda: len(creator.outcomes) >= 3, 30, "a few topic creations")
        killed_at = time.monotonic()
        c.controllers[old].kill9()
        new = c.wait_for_active_controller(other_than=old, timeout_s=30)
        active_after = time.monotonic() - killed_at
        c.wait_for(lambda: creator.created_after(killed_at), 30, "a topic created after the crash")
        created_after = creator.created_after(killed_at) - killed_at
        prod.wait_progress(100, what="after the controller failover")
        print(f"\ncontroller failover (kill -9 of controller {c.controllers[old].node_id}): controller "
              f"{c.controllers[new].node_id} active after {active_after:.2f}s; first topic created "
              f"{created_after:.2f}s after the kill")
        c.controllers[old].start()
        creator.stop()
        prod.stop()
    assert creator.crash is None, f"topic creator failed: {creator.crash!r}"
    assert active_after < 10, f"no new active controller for {active_after:.1f}s"
    _assert_acked_records_read_back(c, topic, partitions, prod)
    _assert_no_half_created_topics(c, creator)


def test_kafka_532_paused_controller_cannot_act_after_it_wakes(cluster):
    """KAFKA-532: SIGSTOP the active controller during topic creations; kill -9 the leader of a
    partition so the new controller elects another; SIGCONT the old one. It gives up its old term
    without acting, and no broker ever reports two leaders for one leader epoch or an epoch going
    backward."""
    c = cluster("ctl-532")
    topic = unique_topic("ctl-532")
    c.create_topic(topic, partitions=1, replication_factor=3, config=MIN_ISR)
    seen: dict[int, int] = {}  # leader epoch -> leader
    last_epoch: dict[int, int] = {}  # broker -> last leader epoch it reported
    lock = threading.Lock()

    def check(sample: Sample) -> None:
        with lock:
            s = sample.state
            if s.leader >= 0:
                other = seen.setdefault(s.leader_epoch, s.leader)
                assert other == s.leader, (f"leader epoch {s.leader_epoch}: broker {sample.via} says leader "
                                           f"{s.leader}, another broker said {other}")
            previous = last_epoch.get(sample.via, -1)
            assert s.leader_epoch >= previous, (f"broker {sample.via}: leader epoch went back "
                                                f"{previous} -> {s.leader_epoch}")
            last_epoch[sample.via] = s.leader_epoch

    old = c.wait_for_active_controller()
    old_term = c.controllers[old].active_term()
    with MetadataWatcher(c, topic, 0, on_sample=check) as watcher, \
            TopicCreator(c.bootstrap, unique_topic("burst532")) as creator:
        c.wait_for(lambda: len(creator.outcomes) >= 3, 30, "a few topic creations")
        c.controllers[old].sigstop()
        new = c.wait_for_active_controller(other_than=old, timeout_s=30)
        new_term = c.controllers[new].active_term()
        assert new_term is not None and old_term is not None and new_term > old_term
        # A decision only the new controller can make: a new leader for the partition.
        leader = c.partition_state(topic)[0].leader
        c.kill9(leader)
        c.wait_for_state(topic, 0, lambda s: s.leader not in (-1, leader), "a new leader",
                         brokers=[i for i in range(3) if i != leader])
        c.restart(leader)
        restarted_at = time.monotonic()
        c.wait_for(lambda: creator.created_after(restarted_at), 30, "a topic created by the new controller",
                   state=lambda: sorted(creator.outcomes.items(), key=lambda kv: kv[1][0])[-3:])
        c.controllers[old].sigcont()
        # The old controller wakes up: its lease is gone, it learns the new term.
        c.wait_for(lambda: c.controllers[old].active_term() is None, 15,
                   "the resumed controller to give up its old term")
        c.wait_for_full_isr(topic, [0])
        time.sleep(2)
        creator.stop()
        watcher.stop()
    assert creator.crash is None, f"topic creator failed: {creator.crash!r}"
    assert not watcher.failures, f"brokers acted on a stale decision: {watcher.failures[:3]}"
    assert len(watcher.samples) > 50, f"too few metadata samples: {len(watcher.samples)}"
    assert c.active_controller() == new, f"controller {c.active_controller()} active, expected {new}"
    resumed = c.controllers[old].log_text()
    assert "no longer the active controller" in resumed, c.controllers[old].log_tail()
    _assert_no_half_created_topics(c, creator)


def test_restarted_broker_catches_up_from_a_snapshot(cluster):
    """With a metadata snapshot every 4 Raft entries the controllers compact their metadata log;
    a broker that was down meanwhile starts from offset 0, is answered a snapshot id, loads the
    snapshot with FetchSnapshot and fetches the rest: it knows every topic created while it was
    down and serves them."""
    c = cluster("ctl-snap", controller={"keel.metadata.snapshot.interval.entries": "4"})
    c.kill9(2)
    names = [unique_topic("snap") for _ in range(6)]
    admin = confluent_admin(c.live_bootstrap)
    for name in names:
        # RF 2: two brokers are up.
        admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=2)],
                            operation_timeout=20)[name].result(timeout=30)
    c.restart(2)
    assert "loaded a metadata snapshot" in c.broker(2).log_text(), c.broker(2).log_tail()
    for name in names:
        c.wait_for(lambda n=name: c.partition_view(2, n), 30, f"broker 2 knows {name}")


def keel_cli(*args: str, bootstrap: str) -> subprocess.Popen:
    """Starts one `keel` admin command against `bootstrap`; stdout and stderr are captured."""
    return subprocess.Popen([str(keel_bin()), *args, "--bootstrap-server", bootstrap], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={"RUST_BACKTRACE": "0"})


def test_keel_commands_retry_not_controller_across_a_failover(cluster):
    """kill -9 of the active controller with a 3 s election timeout leaves the quorum without an
    active controller for seconds: `keel topics create`, `keel configs set` and `keel elect`, sent
    in that window, are answered NOT_CONTROLLER by the broker (it cannot forward them) and must
    retry until the new controller answers, not fail at once. With two of three controllers gone
    the same command gives up after --api-timeout-ms, saying how often it retried (issue 19)."""
    c = cluster("cli-failover", brokers=1, controller={"controller.quorum.election.timeout.ms": "3000",
                                                        "default.replication.factor": "1",
                                                        "min.insync.replicas": "1"})
    bootstrap = c.live_bootstrap
    existing, created = unique_topic("cli-fo"), unique_topic("cli-fo-new")
    c.create_topic(existing, partitions=1, replication_factor=1)
    old = c.wait_for_active_controller()
    c.controllers[old].kill9()
    killed_at = time.monotonic()
    runs = {
        "topics create": keel_cli("topics", "create", created, "--partitions", "2", bootstrap=bootstrap),
        "configs set": keel_cli("configs", "set", "--topic", existing, "retention.ms=3600000", bootstrap=bootstrap),
        "elect": keel_cli("elect", "--topic", existing, "--preferred", bootstrap=bootstrap),
    }
    outputs = {}
    for name, run in runs.items():
        out, err = run.communicate(timeout=90)
        outputs[name] = (run.returncode, out, err, time.monotonic() - killed_at)
    new = c.wait_for_active_controller(other_than=old)
    for name, (code, out, err, took) in outputs.items():
        print(f"\n`keel {name}` sent during the failover succeeded {took:.2f}s after the kill")
        assert code == 0, f"keel {name} failed during the failover: {out}{err}"
    assert outputs["topics create"][1].strip() == f"Created topic {created}."
    assert outputs["elect"][1].strip() == f"{existing}-0: no election needed"
    assert len(c.partition_state(created)) == 2, c.partition_state(created)

    # No quorum at all: bounded retries, then the error.
    c.controllers[new].kill9()
    started = time.monotonic()
    run = keel_cli("topics", "create", unique_topic("cli-fo-never"), "--api-timeout-ms", "3000",
                   bootstrap=bootstrap)
    out, err = run.communicate(timeout=90)
    took = time.monotonic() - started
    print(f"`keel topics create --api-timeout-ms 3000` without a quorum gave up after {took:.2f}s")
    assert run.returncode == 1, f"created without a quorum: {out}{err}"
    assert "NotController" in err and "retries over" in err and len(err.strip().splitlines()) == 1, err


def test_a_fresh_cluster_starts_serves_and_stops_without_warnings(cluster):
    """Three controllers and three brokers started fresh (brokers start as soon as the controllers
    listen, before the quorum has elected), a topic created, records produced and read back by a
    consumer group, everything stopped with SIGTERM: no process logged a WARN or ERROR line — the
    normal start of a cluster is not a warning (issue 19)."""
    c = cluster("quiet")
    topic = unique_topic("quiet")
    c.create_topic(topic, partitions=3, replication_factor=3, config=MIN_ISR)
    consumer_group_round_trip(c.live_bootstrap, topic)
    c.stop()
    noisy = [f"{p.name}: {line}" for p in c.processes for line in p.all_logs().splitlines()
             if " WARN " in line or " ERROR " in line]
    assert not noisy, "a fresh cluster logged warnings:\n" + "\n".join(noisy[:20])


def consumer_group_round_trip(bootstrap: str, topic: str, count: int = 30) -> None:
    """Produces `count` records with acks=all and reads them back as a consumer group that commits
    (so `__consumer_offsets` and a group coordinator are part of the run)."""
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": RDKAFKA_LOG})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0, "records left unacknowledged"
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("quiet-group"),
                            "auto.offset.reset": "earliest", "logger": RDKAFKA_LOG})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(count)), f"read {len(got)} of {count}"
