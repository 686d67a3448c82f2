"""Runs a real `keel` process for end-to-end tests.

What lives here: `Broker`, which owns one broker's config, data directory and log files and can
start, kill -9, SIGTERM and restart it; `keel_bin()` which finds the binary; `free_port()`.
Only conftest.py and tests construct brokers. Every process started here is killed at teardown
and, through PR_SET_PDEATHSIG, if the test runner itself dies.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 60
READY_RE = re.compile(r"keel: ready bootstrap\.servers=(\S+)")
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
CLEAN_FOUND = "clean shutdown file found"
CLEAN_MISSING = "no clean shutdown file"

REPO_ROOT = Path(__file__).resolve().parents[2]
_PR_SET_PDEATHSIG = 1
_ports_handed_out: set[int] = set()
_live_processes: set[subprocess.Popen] = set()


class BrokerError(AssertionError):
    """The broker could not be started or stopped as asked; the message carries its log tail."""


def keel_bin() -> Path:
    """The binary under test: $KEEL_BIN, else target/release/keel in the repository."""
    return Path(os.environ.get("KEEL_BIN", REPO_ROOT / "target" / "release" / "keel")).resolve()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now and this run has not handed out."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError("no free port after 100 tries")


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the test runner dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def kill_all_live_processes() -> None:
    """Last-resort cleanup: SIGKILL every process this module started that still runs."""
    for p in list(_live_processes):
        if p.poll() is None:
            p.kill()
            p.wait()
        _live_processes.discard(p)


BACKTRACE_FRAME_RE = re.compile(r"^\s+(\d+: |at )")


def tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines, with Rust backtrace frames left out (they stay in the log file)."""
    kept = [ln for ln in text.splitlines() if not BACKTRACE_FRAME_RE.match(ln)]
    dropped = len(text.splitlines()) - len(kept)
    note = [f"({dropped} backtrace frame lines omitted; see the log file)"] if dropped else []
    return "\n".join(kept[-lines:] + note)


class Broker:
    """One Keel broker: `keel format` once, then `keel server` (or `keel dev`) runs as asked.

    Each run writes stderr to its own file `run-N.log` in the work directory, so a test can read
    what the current run printed (`log_text()`) apart from earlier runs.
    """

    def __init__(self, workdir: Path, name: str = "keel", overrides: dict[str, str] | None = None,
                 config: dict[str, str] | None = None, mode: str = "server") -> None:
        assert mode in ("server", "dev"), mode
        self.name = name
        self.mode = mode
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.data_dir = self.workdir / "data"
        self.config_path = self.workdir / "server.properties"
        self.overrides = dict(overrides or {})
        self.config = {
            "node.id": "1",
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            **(config or {}),
        }
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.formatted = False
        self.cluster_id: str | None = None
        self._bootstrap: str | None = None
        self.last_returncode: int | None = None

    # -- paths and text ---------------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """The single log directory (Kafka's `log.dirs` entry) this broker writes."""
        return self.data_dir

    @property
    def clean_shutdown_file(self) -> Path:
        return self.log_dir / CLEAN_SHUTDOWN_FILE

    def log_path(self, run: int | None = None) -> Path:
        run = self.runs if run is None else run
        return self.workdir / f"run-{run}.log"

    def log_text(self, run: int | None = None) -> str:
        """What the given run (default: the latest) wrote to stderr so far."""
        path = self.log_path(run)
        return path.read_text(errors="replace") if path.exists() else ""

    def all_logs(self) -> str:
        return "\n".join(f"--- run {i} ---\n{self.log_text(i)}" for i in range(1, self.runs + 1))

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return f"[{self.name} run {self.runs}, {self.log_path()}]\n" + tail(self.log_text(), lines)

    @property
    def bootstrap(self) -> str:
        assert self._bootstrap is not None, f"{self.name} has not become ready"
        return self._bootstrap

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- lifecycle --------------------------------------------------------------------------

    def _check_binary(self) -> Path:
        binary = keel_bin()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise BrokerError(
                f"keel binary not found or not executable at {binary}; build it with "
                f"`cargo build --release -p keel` or set KEEL_BIN")
        return binary

    def _format(self, binary: Path) -> None:
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        out = subprocess.run([str(binary), "format", "--config", str(self.config_path)],
                             capture_output=True, text=True, timeout=60, cwd=self.workdir)
        (self.workdir / "format.log").write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            raise BrokerError(f"`keel format` exited {out.returncode}\nstdout:\n{tail(out.stdout)}\n"
                              f"stderr:\n{tail(out.stderr)}")
        # The cluster id is the last word `keel format` prints ("... for cluster <ID>").
        words = out.stdout.split()
        self.cluster_id = words[-1] if words else None
        self.formatted = True

    def argv(self, binary: Path) -> list[str]:
        if self.mode == "dev":
            return [str(binary), "dev", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        argv = [str(binary), "server", "--config", str(self.config_path)]
        for k, v in self.overrides.items():
            argv += ["--override", f"{k}={v}"]
        return argv

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "Broker":
        """Starts a run and waits for its ready line; raises BrokerError with the log tail otherwise."""
        assert not self.alive(), f"{self.name} is already running"
        binary = self._check_binary()
        if self.mode == "server" and not self.formatted:
            self._format(binary)
        self.runs += 1
        self._bootstrap = None
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(binary), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.workdir, preexec_fn=_die_with_parent,
                env={**os.environ, "RUST_BACKTRACE": "1"})
        _live_processes.add(self.proc)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            m = READY_RE.search(self.log_text())
            if m:
                self._bootstrap = m.group(1)
                expected = f"127.0.0.1:{self.port}"
                if self._bootstrap != expected and not self._bootstrap.endswith(f":{self.port}"):
                    raise BrokerError(f"ready line names {self._bootstrap}, expected {expected}\n"
                                      f"{self.log_tail()}")
                return
            if self.proc.poll() is not None:
                self.last_returncode = self.proc.returncode
                raise BrokerError(f"{self.name} exited with {self.proc.returncode} before printing "
                                  f"its ready line\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise BrokerError(f"{self.name} printed no ready line within {timeout_s}s\n{self.log_tail()}")
            time.sleep(0.05)

    def kill9(self) -> None:
        """SIGKILL: the process dies at once, with no flush and no clean-shutdown file."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.last_returncode = self.proc.wait()
        _live_processes.discard(self.proc)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S, sig: int = signal.SIGTERM) -> int:
        """Sends SIGTERM (or `sig`) and waits for the exit; returns the exit code.

        Raises BrokerError (after a SIGKILL) if the broker does not exit within `timeout_s`.
        """
        assert self.proc is not None, f"{self.name} was never started"
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.last_returncode = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise BrokerError(f"{self.name} did not exit within {timeout_s}s of signal {sig}\n{self.log_tail()}")
        _live_processes.discard(self.proc)
        return self.last_returncode

    def restart(self, timeout_s: float = READY_TIMEOUT_S) -> "Broker":
        """SIGTERM if running, then start a new run on the same port and data."""
        if self.alive():
            self.terminate()
        return self.start(timeout_s)

    def stop(self) -> None:
        """Teardown: SIGTERM, and SIGKILL if that does not end it in time. Never raises."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.terminate(timeout_s=10)
        except BrokerError:
            pass


def launch(tmp_path_factory, name: str, **kwargs) -> Broker:
    """Creates and starts a broker in a fresh directory; the caller must `retire()` it."""
    b = Broker(tmp_path_factory.mktemp(name), name=name, **kwargs)
    try:
        b.start()
    except BaseException:
        b.stop()
        raise
    return b


def retire(b: Broker) -> None:
    """Stops a launched broker (teardown)."""
    b.stop()
