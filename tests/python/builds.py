"""Programs the suite compiles once per source change and keeps in tests/.cache: the Java checks
(a Maven-resolved classpath and javac) and the franz-go producer.

Every build holds an exclusive lock on tests/.cache/.lock, so the suite's parallel workers
(pytest-xdist, see scripts/test) never run Maven or javac on the same files at once, and none
reads a classpath or a class file another is still writing; a worker that finds the work done
under the lock uses it as it is."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / "tests" / ".cache"


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """Holds tests/.cache/.lock exclusively (released when the block ends, or the process does)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def require(*programs: str, why: str) -> None:
    """Fails the test, naming what is missing, unless every program is on PATH."""
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: {why} (see docs/testing.md)")


def _stale(output: Path, source: Path) -> bool:
    return not output.exists() or output.stat().st_mtime < source.stat().st_mtime


def java_build(pom: Path, cache: Path, sources: Sequence[Path], *, classpath_file: str = "classpath.txt",
               classes_dir: str = "classes") -> tuple[Path, str]:
    """Resolves `pom`'s dependencies into `cache/classpath_file` once per pom change and compiles
    each of `sources` (in order) into `cache/classes_dir` once per source change; returns (classes, classpath)."""
    require("mvn", "javac", "java", why="the Java checks need a JDK 17+ and Maven")
    with cache_lock():
        cache.mkdir(parents=True, exist_ok=True)
        cp_file = cache / classpath_file
        if _stale(cp_file, pom):
            r = subprocess.run(["mvn", "-q", "-f", str(pom), "dependency:build-classpath",
                                f"-Dmdep.outputFile={cp_file}"], capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                cp_file.unlink(missing_ok=True)
                pytest.fail(f"mvn could not resolve {pom}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
        classpath = cp_file.read_text().strip()
        classes = cache / classes_dir
        classes.mkdir(exist_ok=True)
        for source in sources:
            if _stale(classes / f"{source.stem}.class", source):
                # The classes built so far are on the classpath: a program may use an earlier one's.
                r = subprocess.run(["javac", "-d", str(classes), "-cp", f"{classes}:{classpath}", str(source)],
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    pytest.fail(f"javac {source.name} failed:\n{r.stdout}\n{r.stderr}")
    return classes, classpath


def go_build(source: Path, binary: Path) -> Path:
    """`go build` of the package in `source` into `binary`, once per change of a file in it."""
    require("go", why="the franz-go check needs Go")
    with cache_lock():
        newest = max(p.stat().st_mtime for p in source.iterdir())
        if not binary.exists() or binary.stat().st_mtime < newest:
            binary.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["go", "build", "-o", str(binary), "."], cwd=source, check=True, timeout=600)
    return binary
