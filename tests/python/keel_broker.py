"""Runs a real `keel` process for end-to-end tests.

What lives here: `Broker`, which owns one `keel` process's config, data directory and log files
and can start, kill -9, SIGTERM, SIGSTOP/SIGCONT, wipe and restart it; `keel_bin()` which finds the
binary; `free_port()` / `free_port_block()`. keel_cluster.py builds a controller and brokers of a
multi-process cluster out of `Broker` (its `Controller` and `Node` subclasses). Only conftest.py, keel_cluster.py
and tests construct them. Every process started here is killed at teardown and, through
PR_SET_PDEATHSIG, if the test runner itself dies — start processes from the main thread only: the
signal fires when the *thread* that forked the child exits.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 60
READY_RE = re.compile(r"keel: ready bootstrap\.servers=(\S+)")
CONTROLLER_READY_RE = re.compile(r"keel: controller ready at (\S+)")
# `keel dev --port P` serves brokers on P, P+1, P+2; one more port is kept free for its controller.
DEV_PORTS = 4
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
    return free_port_block(1)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(n: int) -> int:
    """A port P such that P .. P+n-1 are all free on 127.0.0.1 now and none was handed out before."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        block = range(base, base + n)
        if base + n > 65536 or any(p in _ports_handed_out for p in block):
            continue
        if all(_bindable(p) for p in block[1:]):
            _ports_handed_out.update(block)
            return base
    raise RuntimeError(f"no block of {n} free ports after 200 tries")


# Resolved in the parent: the child of a fork from a process with other threads running (client
# library threads in the cluster tests) should not dlopen anything before exec.
_prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the test runner dies."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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
    what the current run printed (`log_text()`) apart from earlier runs. With `cluster_id` the
    format uses that id (`keel format --cluster-id`), as every member of one cluster must.
    """

    ready_re = READY_RE
    data_subdir = "data"

    def __init__(self, workdir: Path, name: str = "keel", overrides: dict[str, str] | None = None,
                 config: dict[str, str] | None = None, mode: str = "server", cluster_id: str | None = None) -> None:
        assert mode in ("server", "dev"), mode
        self.name = name
        self.mode = mode
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port_block(DEV_PORTS) if mode == "dev" else free_port()
        self.data_dir = self.workdir / self.data_subdir
        self.config_path = self.workdir / "server.properties"
        self.overrides = dict(overrides or {})
        self.config = {**self.default_config(), **(config or {})}
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.formatted = False
        self.cluster_id: str | None = cluster_id
        self._bootstrap: str | None = None
        self.last_returncode: int | None = None
        self.stopped = False  # SIGSTOPped and not continued since
        self.format_args: list[str] = []  # extra `keel format` arguments (e.g. --add-scram ...)
        self.dev_args: list[str] = []  # extra `keel dev` arguments (e.g. --secure)

    def default_config(self) -> dict[str, str]:
        """The properties every run gets unless `config` replaces them."""
        return {
            "node.id": "1",
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
        }

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

    def log_tail(self, lines: int = LOG_TAIL_LINES, run: int | None = None) -> str:
        """The end of a run's log (default: the latest); before any run, the end of format.log."""
        run = self.runs if run is None else run
        if run == 0:
            fmt = self.workdir / "format.log"
            text = fmt.read_text(errors="replace") if fmt.exists() else "(nothing formatted yet)"
            return f"[{self.name} never started, {fmt}]\n" + tail(text, lines)
        return f"[{self.name} run {run}, {self.log_path(run)}]\n" + tail(self.log_text(run), lines)

    @property
    def bootstrap(self) -> str:
        assert self._bootstrap is not None, f"{self.name} has not become ready"
        return self._bootstrap

    @property
    def address(self) -> str:
        """host:port of this process's (first) listener."""
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """The process exists (it may be SIGSTOPped: see `running()`)."""
        return self.proc is not None and self.proc.poll() is None

    def running(self) -> bool:
        """Alive, not SIGSTOPped, and this run printed its ready line."""
        return self.alive() and not self.stopped and self._bootstrap is not None

    def state(self) -> str:
        """One word for reports: running, stopped (SIGSTOP), starting, exited N, never started."""
        if self.proc is None:
            return "never started"
        if self.proc.poll() is not None:
            return f"exited {self.proc.returncode}"
        if self.stopped:
            return "stopped (SIGSTOP)"
        return "running" if self._bootstrap is not None else "starting"

    def meta_properties(self) -> dict[str, str]:
        """The key=value lines of `<data dir>/meta.properties` (written by `keel format`)."""
        text = (self.data_dir / "meta.properties").read_text()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))

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
        argv = [str(binary), "format", "--config", str(self.config_path)]
        if self.cluster_id is not None:
            argv.append(f"--cluster-id={self.cluster_id}")
        argv += self.format_args
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=self.workdir)
        with open(self.workdir / "format.log", "a") as log:
            log.write(f"$ {' '.join(argv)}\n{out.stdout}{out.stderr}")
        if out.returncode != 0:
            raise BrokerError(f"`keel format` exited {out.returncode}\nstdout:\n{tail(out.stdout)}\n"
                              f"stderr:\n{tail(out.stderr)}")
        # The cluster id is the last word `keel format` prints ("... for cluster <ID>").
        words = out.stdout.split()
        printed = words[-1] if words else None
        if self.cluster_id is not None and printed != self.cluster_id:
            raise BrokerError(f"`keel format --cluster-id {self.cluster_id}` printed {out.stdout!r}")
        self.cluster_id = printed
        self.formatted = True

    def wipe(self) -> None:
        """A replaced disk: deletes everything in the data directory, then formats it again with the
        same cluster id and node id (a new `directory.id`). The process must not be running."""
        assert not self.alive(), f"{self.name} must be stopped before its disk is wiped"
        assert self.formatted and self.cluster_id is not None, f"{self.name} was never formatted"
        for entry in self.data_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self._format(self._check_binary())

    def argv(self, binary: Path) -> list[str]:
        if self.mode == "dev":
            return [str(binary), "dev", "--data-dir", str(self.data_dir), "--port", str(self.port), *self.dev_args]
        argv = [str(binary), "server", "--config", str(self.config_path)]
        for k, v in self.overrides.items():
            argv += ["--override", f"{k}={v}"]
        return argv

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "Broker":
        """Starts a run and waits for its ready line; raises BrokerError with the log tail otherwise."""
        self.spawn()
        self.wait_ready(timeout_s)
        return self

    def spawn(self) -> None:
        """Formats on first use and starts a run without waiting for its ready line."""
        assert not self.alive(), f"{self.name} is already running"
        binary = self._check_binary()
        if self.mode == "server" and not self.formatted:
            self._format(binary)
        self.runs += 1
        self._bootstrap = None
        self.stopped = False
        with open(self.log_path(), "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(binary), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.workdir, preexec_fn=_die_with_parent,
                env={**os.environ, "RUST_BACKTRACE": "1"})
        _live_processes.add(self.proc)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Waits for this run's ready line; kills the run and raises BrokerError if it does not come."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.ready_re.search(self.log_text())
            if m:
                # A comma-separated list (keel dev names every broker) starts with this process's own.
                first = m.group(1).split(",")[0]
                if first != self.address and not first.endswith(f":{self.port}"):
                    raise BrokerError(f"ready line names {m.group(1)}, expected {self.address} first\n"
                                      f"{self.log_tail()}")
                self._bootstrap = m.group(1)
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
            self.proc.kill()  # delivered to a SIGSTOPped process too
        self.last_returncode = self.proc.wait()
        self.stopped = False
        _live_processes.discard(self.proc)

    def sigstop(self) -> None:
        """SIGSTOP: the process freezes with its sockets open (a hung or partitioned node)."""
        assert self.alive(), f"{self.name} is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        """SIGCONT: a SIGSTOPped process carries on where it stopped."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S, sig: int = signal.SIGTERM) -> int:
        """Sends SIGTERM (or `sig`) and waits for the exit; returns the exit code.

        Raises BrokerError (after a SIGKILL) if the broker does not exit within `timeout_s`.
        """
        assert self.proc is not None, f"{self.name} was never started"
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            if self.stopped:  # a stopped process handles the signal only once continued
                self.sigcont()
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
