"""Fixtures for the end-to-end suite: brokers that start, stop and always get cleaned up.

- `start_broker(...)`: function-scoped factory for brokers a test may kill or restart.
- `shared_broker`: one session-wide broker for tests that only create their own topics.
- `broker`: `shared_broker`, checked alive after each test so a crash is blamed on that test
  (and restarted before the next one).
On a failing test the log tails of the brokers it used are attached to the report.
"""

from __future__ import annotations

import atexit

import pytest

from keel_broker import Broker, kill_all_live_processes, launch, retire

atexit.register(kill_all_live_processes)


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


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory):
    b = launch(tmp_path_factory, "shared")
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
            state = "running" if b.alive() else f"exited {b.proc.returncode if b.proc else '-'}"
            report.sections.append((f"keel log tail: {b.name} ({state})", b.log_tail()))
