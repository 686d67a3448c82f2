"""Fixtures for the end-to-end suite: brokers that start, stop and always get cleaned up.

- `start_broker(...)`: function-scoped factory for brokers a test may kill or restart.
- `shared_broker`: one session-wide broker for tests that only create their own topics.
- `broker`: `shared_broker`, checked alive after each test so a crash is blamed on that test
  (and restarted before the next one).
- `cluster(...)`: function-scoped factory for multi-process clusters (keel_cluster.Cluster: one
  controller and N brokers), stopped at teardown whatever happened.
On a failing test the log tails of the brokers (and controllers) it used are attached to the report.
"""

from __future__ import annotations

import atexit

import pytest

from keel_broker import Broker, kill_all_live_processes, launch, retire
from keel_cluster import Cluster

atexit.register(kill_all_live_processes)
PREVIOUS_RUN_TAIL_LINES = 25


@pytest.fixture
def start_broker(tmp_path_factory):
    """Factory: start_broker(name="keel", overrides={...}, config={...}, mode="server"|"dev")."""
    mine: list[Broker] = []

    def start(name: str = "keel", **kwargs) -> Broker:
        b = launch(tmp_path_factory, name, **kwargs)
        mine.append(b)
        return b

    start.brokers = mine
    yield start
    for b in mine:
        retire(b)


@pytest.fixture
def cluster(tmp_path_factory):
    """Factory: cluster(brokers=3, controller={...}, broker={...}, name="cluster") -> a started
    Cluster (with start=False: not started yet, so a test can set per-process config first);
    `controller` / `broker` are extra properties for the controller's / every broker's config
    file. Every cluster it made is stopped at teardown."""
    mine: list[Cluster] = []

    def make(name: str = "cluster", start: bool = True, **kwargs) -> Cluster:
        c = Cluster(tmp_path_factory.mktemp(name), name=name, **kwargs)
        mine.append(c)
        make.brokers.extend(c.processes)  # before start(), so a failed start still shows its logs
        return c.start() if start else c

    make.brokers = []
    yield make
    for c in mine:
        c.stop()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    # Test records carry fixed 2023 timestamps (clients.BASE_TIMESTAMP_MS), which Kafka's
    # time-based retention (7 days) deletes at its first check, 5 minutes into the session;
    # retention has its own tests, so the session-wide broker never runs it.
    b = launch(tmp_path_factory, "shared", config={"log.retention.check.interval.ms": "86400000"})
    yield b
    retire(b)


@pytest.fixture
def broker(shared_broker):
    if not shared_broker.alive():  # an earlier test killed it and has failed for that
        shared_broker.start()
    yield shared_broker
    assert shared_broker.alive(), "the shared broker died during this test; see its log tail below"


def _brokers_of(item) -> list[Broker]:
    """The brokers a test touched: its fixture values (or tuples holding one) and the brokers its
    `start_broker` factory started."""
    found: list[Broker] = []
    for value in getattr(item, "funcargs", {}).values():
        candidates = [value]
        if isinstance(value, tuple):
            candidates = list(value)
        candidates += getattr(value, "brokers", [])
        found += [c for c in candidates if isinstance(c, Broker) and c not in found]
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in _brokers_of(item):
            report.sections.append((f"keel log tail: {b.name} ({b.state()})", b.log_tail()))
            if b.runs > 1:  # the run before a restart often ended in the fault under test
                report.sections.append((f"keel log tail: {b.name} (previous run)",
                                        b.log_tail(PREVIOUS_RUN_TAIL_LINES, run=b.runs - 1)))


# Files whose tests judge timing (a token's expiry, a watcher's sample rate through kill -9 of
# brokers whose every connection is TLS, a quota's rate held within 10 %) and failed now and then with a second pytest-xdist
# worker loading the same two cores (test_quotas.py: so as not to): scripts/test runs them alone, after the others
# (`-m serial`).
SERIAL_FILES = {"test_cluster.py", "test_oauthbearer.py", "test_quotas.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: run without other tests alongside (scripts/test's second pass)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
