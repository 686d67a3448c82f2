"""Apache Kafka's own Java client (kafka-clients 4.1, from Maven Central) against Keel: admin
(create, describe, incremental config change, list, describe cluster), a producer per compression
with acks=all (idempotent, the default), an assign()-based consumer that reads every record back in
order, and a subscribe()-based group consumer that commits.

Cites issue 2 ("check the Java client 4.x works"). The check program is tests/java/
KeelJavaClientCheck.java; Maven only resolves the classpath (cached in tests/.cache/java).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
JAVA_DIR = REPO / "tests" / "java"
CACHE = REPO / "tests" / ".cache" / "java"
RECORDS_PER_COMPRESSION = 2000


def build_check() -> tuple[Path, str]:
    """Compiles the check once per source change; returns (classes dir, classpath)."""
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        pytest.fail("mvn and javac are required for the Java client check (see docs/testing.md)")
    CACHE.mkdir(parents=True, exist_ok=True)
    cp_file = CACHE / "classpath.txt"
    pom = JAVA_DIR / "pom.xml"
    if not cp_file.exists() or cp_file.stat().st_mtime < pom.stat().st_mtime:
        subprocess.run(
            ["mvn", "-q", "-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={cp_file}"],
            check=True, timeout=600,
        )
    classpath = cp_file.read_text().strip()
    classes = CACHE / "classes"
    source = JAVA_DIR / "KeelJavaClientCheck.java"
    compiled = classes / "KeelJavaClientCheck.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        classes.mkdir(exist_ok=True)
        subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(source)], check=True, timeout=300)
    return classes, classpath


def test_java_client_round_trip(broker):
    """The Java client creates, describes and reconfigures a topic, produces 10,000 records over
    five compressions with acks=all and its default (idempotent) settings, consumes them back
    identical, in order, offsets from 0, then reads them once more as a consumer group and finds
    its committed offsets from a new consumer."""
    classes, classpath = build_check()
    run = subprocess.run(
        ["java", "-cp", f"{classes}:{classpath}", "KeelJavaClientCheck", broker.bootstrap,
         str(RECORDS_PER_COMPRESSION)],
        capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0 and "JAVA-CLIENT-OK" in run.stdout, (
        f"java check failed (exit {run.returncode})\nstdout:\n{run.stdout[-4000:]}\nstderr:\n{run.stderr[-4000:]}"
    )
