"""Fixtures for the end-to-end suite: brokers that start, stop and always get cleaned up.

- `start_broker(...)`: function-scoped factory for brokers a test may kill or restart.
- `shared_broker`: one session-wide broker for tests that only create their own topics.
- `broker`: `shared_broker`, checked alive after each test so a crash is blamed on that test.
On any failing test the log tails of the brokers still running are attached to the report.
"""

from __future__ import annotations

import atexit

import pytest

from keel_broker import Broker, kill_all_live_processes, launch, retire, running_brokers

atexit.register(kill_all_live_processes)


@pytest.fixture
def start_broker(tmp_path_factory):
    """Factory: start_broker(name="keel", overrides={...}, config={...}, mode="server"|"dev")."""
    mine: list[Broker] = []

    def start(name: str = "keel", **kwargs) -> Broker:
        b = launch(tmp_path_factory, name, **kwargs)
        mine.append(b)
        return b

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
    assert shared_broker.alive(), f"the shared broker died before this test\n{shared_broker.log_tail()}"
    yield shared_broker
    assert shared_broker.alive(), f"the shared broker died during this test\n{shared_broker.log_tail()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for b in running_brokers:
            state = "running" if b.alive() else f"exited {b.proc.returncode if b.proc else '-'}"
            report.sections.append((f"keel log tail: {b.name} ({state})", b.log_tail()))
