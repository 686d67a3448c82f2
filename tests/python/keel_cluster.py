"""A multi-process Keel cluster for end-to-end tests: a Raft quorum of controllers (three by
default) and N brokers.

What lives here: `Controller` and `Node` (`Broker`s whose processes run `process.roles=controller`
and `process.roles=broker`), `Cluster` (controllers 100, 101, ... plus brokers 0..N-1, all
formatted with one cluster id, each in its own directory)
with the faults the tests inject — kill -9, SIGTERM, SIGSTOP/SIGCONT, a wiped disk — and the
metadata views the tests poll: `partition_views()` asks every running broker for Metadata v7 over
a raw connection (kafka_wire), so a test knows which broker said what, with leader epochs that tell
a fresh view from a stale one. `MetadataWatcher` records those views in a background thread.

Processes are started from the main thread only (see keel_broker: PR_SET_PDEATHSIG fires when the
forking thread exits). conftest.py's `cluster` fixture creates clusters and always stops them.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import kafka_wire as w
from clients import ADMIN_TIMEOUT_S, confluent_admin
from confluent_kafka.admin import NewTopic
from keel_broker import (CONTROLLER_READY_RE, READY_TIMEOUT_S, Broker, BrokerError, free_port, keel_bin)

CONTROLLER_ID = 100
WAIT_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
METADATA_TIMEOUT_S = 2.0  # per Metadata request; a broker that hangs longer counts as not answering
TEARDOWN_GRACE_S = 10.0

# Timeouts short enough that a fault is noticed within seconds (tests wait on them).
CONTROLLER_DEFAULTS = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "broker.session.timeout.ms": "3000",
    "eligible.leader.replicas.enable": "true",
}
BROKER_DEFAULTS = {
    "replica.lag.time.max.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
}


def random_cluster_id() -> str:
    """`keel random-cluster-id`: a fresh id in Kafka's 22-character base64 form."""
    out = subprocess.run([str(keel_bin()), "random-cluster-id"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0 or not out.stdout.strip():
        raise BrokerError(f"`keel random-cluster-id` exited {out.returncode}: {out.stdout!r} {out.stderr!r}")
    return out.stdout.strip()


ACTIVE_RE = re.compile(r"(?<!the )active controller term=(\d+)")
INACTIVE_RE = re.compile(r"no longer the active controller term=(\d+)")


class Controller(Broker):
    """A controller process (`process.roles=controller`): formats `metadata.log.dir`, prints
    `keel: controller ready at HOST:PORT`, and listens on the CONTROLLER listener only. Its
    `controller.quorum.voters` is set by the Cluster once every controller has a port."""

    ready_re = CONTROLLER_READY_RE
    data_subdir = "meta"

    def __init__(self, workdir: Path, node_id: int = CONTROLLER_ID, **kwargs) -> None:
        self.node_id = node_id
        super().__init__(workdir, **kwargs)

    def active_term(self) -> int | None:
        """The Raft term this controller's current run last became active in, if it has not logged
        losing it since (its log says so: `active controller term=T` / `no longer ...`)."""
        text = self.log_text()
        events = sorted([(m.start(), int(m.group(1)), True) for m in ACTIVE_RE.finditer(text)] +
                        [(m.start(), int(m.group(1)), False) for m in INACTIVE_RE.finditer(text)])
        if not events or not events[-1][2]:
            return None
        return events[-1][1]

    def default_config(self) -> dict[str, str]:
        return {
            "node.id": str(self.node_id),
            "process.roles": "controller",
            "listeners": f"CONTROLLER://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "metadata.log.dir": str(self.data_dir),
        }


class Node(Broker):
    """A broker of a cluster (`process.roles=broker`): node id `node_id`, registered with the
    controller named by `controller.quorum.voters`."""

    def __init__(self, workdir: Path, node_id: int, voters: str, **kwargs) -> None:
        self.node_id = node_id
        self.voters = voters
        super().__init__(workdir, **kwargs)

    def default_config(self) -> dict[str, str]:
        return {
            "node.id": str(self.node_id),
            "process.roles": "broker",
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.quorum.voters": self.voters,
            "controller.listener.names": "CONTROLLER",
            **BROKER_DEFAULTS,
        }


class PartitionState(NamedTuple):
    """One partition as one broker's Metadata answer shows it."""
    leader: int  # -1: no leader
    replicas: tuple[int, ...]
    isr: frozenset[int]
    leader_epoch: int
    offline: frozenset[int]
    error: int


class Sample(NamedTuple):
    """One observation by `MetadataWatcher`: when, which broker answered, and what it said."""
    t: float  # time.monotonic()
    via: int
    state: PartitionState


class Cluster:
    """Controllers 100, 101, ... (a Raft quorum; three by default) and brokers 0..n-1 on
    127.0.0.1, formatted with one cluster id.

    `controller` / `broker` are extra properties for every controller's and every broker's config
    file (they win over CONTROLLER_DEFAULTS / BROKER_DEFAULTS). Brokers are addressed by index,
    which is also their node id; controllers by index into `controllers`.
    """

    def __init__(self, workdir: Path, brokers: int = 3, controller: dict[str, str] | None = None,
                 broker: dict[str, str] | None = None, name: str = "cluster", controllers: int = 3) -> None:
        self.name = name
        self.workdir = Path(workdir)
        self.cluster_id = random_cluster_id()
        self.controllers: list[Controller] = [
            Controller(self.workdir / f"controller-{CONTROLLER_ID + i}", node_id=CONTROLLER_ID + i,
                       name=f"{name}-controller-{CONTROLLER_ID + i}", cluster_id=self.cluster_id,
                       config={**CONTROLLER_DEFAULTS, **(controller or {})})
            for i in range(controllers)]
        voters = ",".join(f"{c.node_id}@{c.address}" for c in self.controllers)
        for c in self.controllers:
            c.config["controller.quorum.voters"] = voters
        self.controller = self.controllers[0]
        self.nodes: list[Node] = [
            Node(self.workdir / f"broker-{i}", i, voters, name=f"{name}-broker-{i}", cluster_id=self.cluster_id,
                 config=broker)
            for i in range(brokers)]

    # -- processes --------------------------------------------------------------------------

    @property
    def processes(self) -> list[Broker]:
        """The controllers and every broker (for log tails)."""
        return [*self.controllers, *self.nodes]

    def broker(self, i: int) -> Node:
        return self.nodes[i]

    def secure_internals(self, pki_dir: Path) -> "Cluster":
        """Before start(): every connection inside the cluster speaks SASL_SSL — the controllers'
        listener (Raft, brokers to controllers) and a second broker listener, INTERNAL, for
        replication — with a certificate per node from one throwaway CA (tls_certs.Pki) and a
        PLAIN user per role; clients keep the PLAINTEXT listener the harness talks to."""
        from tls_certs import Pki
        from sasl_config import plain_jaas
        pki = Pki(pki_dir)
        users = {"controller": "controller-secret", "broker": "broker-secret"}
        common = {"ssl.truststore.location": str(pki.ca_file), "sasl.enabled.mechanisms": "PLAIN",
                  "sasl.mechanism.controller.protocol": "PLAIN"}
        for ctl in self.controllers:
            ctl.config.update({
                **common,
                "ssl.keystore.location": str(pki.issue(f"controller-{ctl.node_id}", f"controller-{ctl.node_id}")),
                "listener.security.protocol.map": "CONTROLLER:SASL_SSL",
                "listener.name.controller.plain.sasl.jaas.config": plain_jaas("controller", users["controller"], users),
            })
        for node in self.nodes:
            node.internal_port = free_port()
            node.config.update({
                **common,
                "ssl.keystore.location": str(pki.issue(f"broker-{node.node_id}", f"broker-{node.node_id}")),
                "listeners": f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.internal.plain.sasl.jaas.config": plain_jaas("broker", users["broker"], users),
                "listener.name.controller.plain.sasl.jaas.config": plain_jaas("broker", users["broker"]),
            })
        return self

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "Cluster":
        """Starts the controllers, then every broker at once; returns when all printed their ready
        line. Stops everything and raises BrokerError if any of them does not get there."""
        try:
            for c in self.controllers:
                c.spawn()
            for c in self.controllers:
                c.wait_ready(timeout_s)
            for b in self.nodes:
                b.spawn()
            for b in self.nodes:
                b.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Teardown, never raises: continue stopped brokers, SIGTERM all brokers together, SIGKILL
        whatever is left after TEARDOWN_GRACE_S, then the same for the controllers."""
        for group in (self.nodes, self.controllers):
            live = [b for b in group if b.alive()]
            for b in live:
                try:
                    b.proc.terminate()
                    if b.stopped:
                        b.sigcont()
                except OSError:
                    pass
            deadline = time.monotonic() + TEARDOWN_GRACE_S
            for b in live:
                try:
                    b.last_returncode = b.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                b.kill9()

    def active_controller(self) -> int | None:
        """Index (into `controllers`) of the controller that is active now, by their logs: among the
        running controllers, the one active in the highest term (a SIGSTOPped one does not count)."""
        best: tuple[int, int] | None = None
        for i, c in enumerate(self.controllers):
            if not c.running():
                continue
            term = c.active_term()
            if term is not None and (best is None or term > best[0]):
                best = (term, i)
        return None if best is None else best[1]

    def wait_for_active_controller(self, timeout_s: float = WAIT_TIMEOUT_S, other_than: int | None = None) -> int:
        """Waits until a running controller (not `other_than`) is active; returns its index."""
        def found():
            i = self.active_controller()
            return None if i is None or i == other_than else (i,)
        return self.wait_for(found, timeout_s, "an active controller")[0]

    def running(self) -> list[int]:
        """Indices of brokers that are up: alive, not SIGSTOPped, and ready in their current run."""
        return [i for i, b in enumerate(self.nodes) if b.running()]

    @property
    def bootstrap(self) -> str:
        """Every broker, comma-separated (what a client would be configured with)."""
        return self.bootstrap_of(range(len(self.nodes)))

    @property
    def live_bootstrap(self) -> str:
        """Only the running brokers: clients bootstrapped from a SIGSTOPped broker hang on it."""
        running = self.running()
        assert running, f"no broker is running: {self.describe()}"
        return self.bootstrap_of(running)

    def bootstrap_of(self, indices: Iterable[int]) -> str:
        return ",".join(self.nodes[i].address for i in indices)

    def kill9(self, i: int) -> None:
        self.nodes[i].kill9()

    def terminate(self, i: int) -> int:
        """SIGTERM (controlled shutdown) and wait; returns the exit code."""
        return self.nodes[i].terminate()

    def restart(self, i: int, timeout_s: float = READY_TIMEOUT_S) -> Broker:
        """Starts broker i again (SIGTERM first if it still runs) and waits for its ready line."""
        b = self.nodes[i]
        if b.stopped:
            b.sigcont()
        return b.restart(timeout_s)

    def sigstop(self, i: int) -> None:
        self.nodes[i].sigstop()

    def sigcont(self, i: int) -> None:
        self.nodes[i].sigcont()

    def wipe(self, i: int) -> None:
        """Broker i's disk is replaced: its data directory is emptied and formatted again with the
        cluster id and its node id (so it gets a new directory id). It must be down."""
        self.nodes[i].wipe()

    def describe(self) -> str:
        """One line per process: name, address and state."""
        return "; ".join(f"{b.name}@{b.port}: {b.state()}" for b in self.processes)

    # -- polling ----------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], object], timeout_s: float = WAIT_TIMEOUT_S, what: str = "condition",
                 state: Callable[[], object] | None = None, interval_s: float = POLL_INTERVAL_S):
        """Polls `predicate()` until it returns something truthy, and returns that.

        An exception from the predicate counts as "not yet". On timeout raises AssertionError naming
        `what`, the last value or exception seen (or `state()` if given) and every process's state.
        """
        deadline = time.monotonic() + timeout_s
        last: object = None
        while True:
            try:
                last = predicate()
                if last:
                    return last
            except Exception as e:  # noqa: BLE001 - a failing probe is an observation, not an error
                last = e
            if time.monotonic() > deadline:
                observed = last
                if state is not None:
                    try:
                        observed = state()
                    except Exception as e:  # noqa: BLE001
                        observed = f"{last!r} (state() raised {e!r})"
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; observed: {observed!r}; "
                                     f"processes: {self.describe()}")
            time.sleep(interval_s)

    def metadata(self, i: int, topics: list[str] | None) -> w.MetadataV7:
        """Broker i's Metadata v7 answer."""
        with w.RawConnection.to(self.nodes[i].address, timeout_s=METADATA_TIMEOUT_S) as conn:
            return w.metadata_v7(conn, topics, allow_auto_topic_creation=False)

    def partition_view(self, i: int, topic: str) -> dict[int, PartitionState]:
        """{partition: state} as broker i sees `topic` (empty if it does not know the topic)."""
        md = self.metadata(i, [topic])
        err, parts = md.topics.get(topic, (w.UNKNOWN_TOPIC_OR_PARTITION, {}))
        if err != w.NONE:
            return {}
        return {p: PartitionState(m.leader, m.replicas, frozenset(m.isr), m.leader_epoch,
                                  frozenset(m.offline_replicas), m.error_code)
                for p, m in parts.items()}

    def partition_views(self, topic: str, brokers: Iterable[int] | None = None) -> dict[int, dict[int, PartitionState] | Exception]:
        """{broker: {partition: state}} from every running broker (or those given); a broker that
        did not answer maps to the exception."""
        views: dict[int, dict[int, PartitionState] | Exception] = {}
        for i in (self.running() if brokers is None else brokers):
            try:
                views[i] = self.partition_view(i, topic)
            except Exception as e:  # noqa: BLE001 - refused, reset, timed out or undecodable: no answer
                views[i] = e
        return views

    def partition_state(self, topic: str, via: int | None = None) -> dict[int, PartitionState]:
        """{partition: (leader, replicas, isr, leader_epoch, ...)}: broker `via`'s view, or else the
        freshest view per partition among the running brokers — highest leader epoch, and at equal
        epochs the view of the broker that leads in it (the leader learns its ISR changes first)."""
        if via is not None:
            return self.partition_view(via, topic)
        best: dict[int, tuple[tuple[int, int], PartitionState]] = {}
        for i, view in self.partition_views(topic).items():
            if isinstance(view, Exception):
                continue
            for p, s in view.items():
                rank = (s.leader_epoch, 1 if s.leader == i else 0)
                if p not in best or rank > best[p][0]:
                    best[p] = (rank, s)
        return {p: s for p, (_, s) in sorted(best.items())}

    def wait_for_state(self, topic: str, partition: int, predicate: Callable[[PartitionState], bool], what: str,
                       timeout_s: float = WAIT_TIMEOUT_S, brokers: Iterable[int] | None = None) -> PartitionState:
        """Waits until every running broker (or every broker in `brokers`) answers Metadata and its
        view of the partition satisfies `predicate` — the cluster has converged on it. Returns the
        freshest of those views."""
        brokers = None if brokers is None else list(brokers)

        def views():
            return self.partition_views(topic, brokers)

        def agreed():
            vs = views()
            if not vs:
                return None
            states = []
            for view in vs.values():
                if isinstance(view, Exception) or partition not in view or not predicate(view[partition]):
                    return None
                states.append(view[partition])
            return max(states, key=lambda s: s.leader_epoch)

        return self.wait_for(agreed, timeout_s, f"{topic}-{partition}: {what} in the metadata of "
                             f"{'every running broker' if brokers is None else f'brokers {brokers}'}", state=views)

    def wait_for_isr(self, topic: str, partition: int, expected: Iterable[int], timeout_s: float = WAIT_TIMEOUT_S,
                     brokers: Iterable[int] | None = None) -> PartitionState:
        """Waits until the running brokers (or `brokers`) all report exactly `expected` as the ISR."""
        want = frozenset(expected)
        return self.wait_for_state(topic, partition, lambda s: s.isr == want, f"ISR == {sorted(want)}",
                                   timeout_s, brokers)

    def wait_for_full_isr(self, topic: str, partitions: Iterable[int], timeout_s: float = WAIT_TIMEOUT_S) -> None:
        """Waits until each partition has a leader and every replica in its ISR."""
        for p in partitions:
            self.wait_for_state(topic, p, lambda s: bool(s.replicas) and s.leader >= 0 and s.isr == frozenset(s.replicas),
                                "a leader and every replica in the ISR", timeout_s)

    # -- admin and files --------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     assignment: list[list[int]] | None = None, config: dict[str, str] | None = None,
                     timeout_s: float = WAIT_TIMEOUT_S) -> dict[int, PartitionState]:
        """CreateTopics through confluent-kafka's AdminClient (an explicit `assignment` lists each
        partition's replicas, preferred leader first); waits until every partition has a leader and
        its full replica set in the ISR on every running broker, and returns that state."""
        admin = confluent_admin(self.live_bootstrap)
        if assignment is not None:
            # librdkafka wants the count alongside an assignment (it sends -1 for both on the wire).
            topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})
            count = len(assignment)
        else:
            topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                             config=config or {})
            count = partitions
        admin.create_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[name].result(timeout=ADMIN_TIMEOUT_S)
        if count < 0:
            count = len(self.wait_for(lambda: self.partition_state(name), timeout_s, f"topic {name} in metadata"))
        self.wait_for_full_isr(name, range(count), timeout_s)
        return self.partition_state(name)

    def segment_bytes(self, i: int, topic: str, partition: int) -> int:
        """Total size of the `*.log` segment files of one partition in broker i's log directory."""
        d = self.nodes[i].log_dir / f"{topic}-{partition}"
        if not d.is_dir():
            return 0
        total = 0
        for f in d.glob("*.log"):
            try:
                total += f.stat().st_size
            except FileNotFoundError:  # deleted or renamed between glob and stat
                pass
        return total


class MetadataWatcher:
    """Polls every running broker's Metadata for one partition in a background thread and records
    each answer as a `Sample` (`samples`), until `stop()`. `on_sample(sample)` runs in the thread
    right after each answer, for a check that must happen the moment a state is seen. Use as a
    context manager so the thread always stops."""

    def __init__(self, cluster: Cluster, topic: str, partition: int,
                 on_sample: Callable[[Sample], None] | None = None, interval_s: float = 0.01) -> None:
        self.cluster, self.topic, self.partition = cluster, topic, partition
        self.on_sample = on_sample
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.failures: list[BaseException] = []  # exceptions raised by on_sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"metadata-watcher-{topic}", daemon=True)

    def __enter__(self) -> "MetadataWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * METADATA_TIMEOUT_S + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            for i, view in self.cluster.partition_views(self.topic).items():
                if isinstance(view, Exception) or self.partition not in view:
                    continue
                sample = Sample(time.monotonic(), i, view[self.partition])
                self.samples.append(sample)
                if self.on_sample is not None:
                    try:
                        self.on_sample(sample)
                    except BaseException as e:  # noqa: BLE001 - reported by the test via `failures`
                        self.failures.append(e)
            self._stop.wait(self.interval_s)

    def leaders(self, min_epoch: int = -1) -> list[tuple[int, int]]:
        """The distinct (leader epoch, leader) pairs seen with an epoch above `min_epoch`, by epoch."""
        return sorted({(s.state.leader_epoch, s.state.leader) for s in list(self.samples)
                       if s.state.leader_epoch > min_epoch})
