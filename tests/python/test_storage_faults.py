"""Disks that lie and disks that fail, with real processes (issue 19): a three-broker cluster
(RF 3, min.insync.replicas 2) where one broker's segment files are damaged while it is stopped,
or its log directory fills up while it runs.

What each test shows (the issue's "done when"):
- damaged bytes in the first batch of a stopped broker's segment: on restart nothing acknowledged
  is lost, the broker registers as an unclean shutdown (never clean over a log it truncated), the
  damaged segment and every later one are kept in a quarantine directory (byte for byte), and
  the replica re-replicates from the leader before it rejoins the ISR;
- damage in the middle of a closed segment after a clean shutdown (which a clean start does not
  scan): found when a follower reads it from that broker as leader — the leader stops leading,
  leadership moves to a clean ISR member, the follower never appends the damaged batch; and found
  by the scrubber on a follower, which then leaves the ISR and re-replicates;
- a full log directory (a 64 MB tmpfs as one of a broker's two log directories): the directory
  goes offline, leadership of its partitions moves, producers carry on against the other brokers,
  the broker's partitions on its other directory keep replicating, and a restart brings the
  directory back.

Cites KIP-966 (a replica that lost data is not clean: unclean-shutdown detection, ELR/LastKnownELR),
KIP-858 (offline log directories in the broker heartbeat) and DESIGN.md's widened promise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from clients import assert_read_back, confluent_consume, confluent_produce, make_records, unique_topic

MIN_ISR = {"min.insync.replicas": "2"}
SEGMENT_BYTES = 1048576


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def _quarantines(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.is_dir() and p.name.endswith("-quarantine"))


def _overwrite(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _produce_filled(c, topic: str, n: int, value_bytes: int = 1000):
    recs = make_records(n, 1, tag=topic, value_bytes=value_bytes)
    return confluent_produce(c.bootstrap, topic, recs, acks="all")


def test_damaged_segment_of_a_stopped_broker_is_set_aside_and_rereplicated(cluster):
    """Issue 19's first bug: 16 corrupt bytes in a batch a clean start checks wiped the whole
    partition (every later segment deleted, `clean_shutdown=true`). Now: broker 2 (a follower) is
    stopped cleanly and 16 bytes of the last batch of its first segment overwritten (a clean start
    validates a segment's tail); on restart it registers as an unclean shutdown, keeps the damaged
    segment (copied) and every later one (moved, unchanged) in a quarantine directory, leaves the
    ISR until it re-replicated the data from the leader, and every acknowledged record is read
    back."""
    c = cluster("damaged-start")
    topic = unique_topic("damaged-start")
    c.create_topic(topic, assignment=[[0, 1, 2]], config={**MIN_ISR, "segment.bytes": str(SEGMENT_BYTES)})
    acked = _produce_filled(c, topic, 5000)
    leader_bytes = c.segment_bytes(0, topic, 0)
    c.wait_for(lambda: c.segment_bytes(2, topic, 0) == leader_bytes, what="broker 2 caught up")
    assert c.terminate(2) == 0
    c.wait_for_isr(topic, 0, {0, 1})

    part = c.broker(2).log_dir / f"{topic}-0"
    segments = _segments(part)
    assert len(segments) >= 5, segments
    later = {s.name: _sha(s) for s in segments[1:]}
    first = segments[0]
    position, base_offset = _last_batch(first)
    _overwrite(first, position + 100, b"\xde\xad\xbe\xef" * 4)
    damaged_sha = _sha(first)

    c.restart(2)
    log = c.broker(2).log_text()
    assert "registering as an unclean shutdown" in log, c.broker(2).log_tail()
    assert "damaged log data set aside" in log, c.broker(2).log_tail()
    quarantines = _quarantines(c.broker(2).log_dir)
    assert len(quarantines) == 1, quarantines
    q = quarantines[0]
    info = json.loads((q / "quarantine.json").read_text())
    assert (info["from_offset"], info["position"]) == (base_offset, position), info
    assert _sha(q / first.name) == damaged_sha, "the damaged segment is kept as it was"
    for name, sha in later.items():
        assert _sha(q / name) == sha, f"{name} set aside unchanged"
    # Re-replicated from the leader: back in the ISR only with the whole log.
    c.wait_for_isr(topic, 0, {0, 1, 2}, timeout_s=60)
    c.wait_for(lambda: _log_hash(c, 2, topic) == _log_hash(c, 0, topic), 60,
               "broker 2 re-replicated the leader's log")
    got = confluent_consume(c.bootstrap, topic, [0], {0: len(acked)})
    assert_read_back(acked, got, "after broker 2's segment was damaged")
    # The quarantine is not touched by re-replication, and `keel status` names it.
    assert _quarantines(c.broker(2).log_dir) == [q]
    status = _status(c)
    assert "damaged data set aside: 1 log directories" in status, status
    assert str(c.broker(2).log_dir) in status, status


def _last_batch(segment: Path) -> tuple[int, int]:
    """(byte position, base offset) of the last record batch of a segment file."""
    data = segment.read_bytes()
    at, last = 0, None
    while at + 12 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big")
        last = (at, int.from_bytes(data[at:at + 8], "big"))
        at += 12 + length
    assert last is not None and at == len(data), f"{segment} does not end at a batch boundary"
    return last


def test_damage_in_a_leader_is_found_when_a_follower_reads_it(cluster):
    """Issue 19's second bug: damage in the middle of a segment after a clean shutdown was served
    as is (a clean start scans nothing) and a follower would replicate it. Broker 0 is stopped
    cleanly and a batch in the middle of its first segment damaged; it restarts, is made leader
    again, and broker 2 — behind — fetches the old data from it: broker 0's verified read finds
    the damage, it stops leading, leadership moves to broker 1 (ISR, clean), broker 2 completes
    from broker 1 without ever appending the damaged batch, broker 0 re-replicates, and every
    acknowledged record is read back."""
    c = cluster("damaged-leader", start=False)
    # Here the follower's read must find the damage: the scrubber (which would find it first,
    # see the next test) is off on broker 0.
    c.broker(0).config["log.scrub.enable"] = "false"
    c.start()
    topic = unique_topic("damaged-leader")
    c.create_topic(topic, assignment=[[0, 1, 2]], config={**MIN_ISR, "segment.bytes": str(SEGMENT_BYTES)})
    assert c.terminate(2) == 0  # behind from here on
    acked = _produce_filled(c, topic, 3000)
    assert c.terminate(0) == 0
    c.wait_for_state(topic, 0, lambda s: s.leader == 1, "broker 1 leads")
    first = _segments(c.broker(0).log_dir / f"{topic}-0")[0]
    middle = first.stat().st_size // 2
    _overwrite(first, middle, b"\x00\xff" * 8)
    c.restart(0)
    assert "registering as an unclean shutdown" not in c.broker(0).log_text(), \
        "the damage is in the middle of a segment: a clean start does not see it"
    c.wait_for_isr(topic, 0, {0, 1})
    subprocess.run([str(_keel()), "elect", "--bootstrap-server", c.broker(1).address, "--topic", topic,
                    "--partition", "0", "--preferred"], check=True, capture_output=True, timeout=60)
    c.wait_for_state(topic, 0, lambda s: s.leader == 0, "broker 0 leads again")

    c.restart(2)
    c.wait_for(lambda: 'found_by="follower_read"' in c.broker(0).log_text(), 60,
               "broker 0 finds the damage serving broker 2's fetch")
    c.wait_for_state(topic, 0, lambda s: s.leader == 1 and 0 not in s.isr, "leadership moved off broker 0")
    c.wait_for_isr(topic, 0, {0, 1, 2}, timeout_s=90)
    # Broker 2 never appended the damaged batch: its copy equals the clean leader's.
    c.wait_for(lambda: _log_hash(c, 2, topic) == _log_hash(c, 1, topic), 60,
               "broker 2 holds exactly broker 1's segments")
    assert len(_quarantines(c.broker(0).log_dir)) == 1
    got = confluent_consume(c.bootstrap, topic, [0], {0: len(acked)})
    assert_read_back(acked, got, "after broker 0's damaged batch")


def test_scrubber_finds_damage_on_a_follower(cluster):
    """Damage nobody reads is found by the scrubber: a follower's closed segment is damaged while it
    is stopped cleanly; after its restart the scrubber (fast for the test) finds it, the follower
    sets it aside, leaves the ISR, re-replicates and rejoins; nothing acknowledged is lost."""
    c = cluster("scrub", broker={"log.scrub.interval.ms": "1000", "log.scrub.bytes.per.second": "104857600"})
    topic = unique_topic("scrub")
    c.create_topic(topic, assignment=[[0, 1, 2]], config={**MIN_ISR, "segment.bytes": str(SEGMENT_BYTES)})
    acked = _produce_filled(c, topic, 3000)
    leader_bytes = c.segment_bytes(0, topic, 0)
    c.wait_for(lambda: c.segment_bytes(1, topic, 0) == leader_bytes, what="broker 1 caught up")
    assert c.terminate(1) == 0
    second = _segments(c.broker(1).log_dir / f"{topic}-0")[1]
    _overwrite(second, second.stat().st_size // 3, b"\x5a" * 16)
    c.restart(1)
    c.wait_for(lambda: 'found_by="scrub"' in c.broker(1).log_text(), 60, "the scrubber finds the damage")
    c.wait_for_isr(topic, 0, {0, 1, 2}, timeout_s=90)
    c.wait_for(lambda: _log_hash(c, 1, topic) == _log_hash(c, 0, topic), 60, "broker 1 re-replicated")
    metrics = c.broker(1).log_text()
    assert "scrub pass complete" in metrics
    got = confluent_consume(c.bootstrap, topic, [0], {0: len(acked)})
    assert_read_back(acked, got, "after the scrubber found damage")


def _log_hash(c, i: int, topic: str) -> str:
    """The hash of broker i's whole log of partition 0: its segments' bytes, in order (a
    follower rolls segments where its appends make it, so only the concatenation is comparable)."""
    h = hashlib.sha256()
    for segment in _segments(c.broker(i).log_dir / f"{topic}-0"):
        h.update(segment.read_bytes())
    return h.hexdigest()


def _status(c) -> str:
    """`keel status` against a running broker."""
    out = subprocess.run([str(_keel()), "status", "--bootstrap-server", c.broker(0).address],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _keel() -> Path:
    from keel_broker import keel_bin
    return keel_bin()


# -- a full disk ------------------------------------------------------------------------------


@pytest.fixture
def tmpfs(tmp_path):
    """A 64 MB tmpfs mounted for the test (needs root, as the machine's CI runs)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], check=True, timeout=30)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def _metric(address: str, name: str) -> float | None:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_full_log_directory_goes_offline_and_others_carry_on(cluster, tmpfs):
    """Issue 19's third bug: a full disk froze a partition for good (the broker stayed leader and
    answered KAFKA_STORAGE_ERROR forever, its fetchers for other partitions stopped). Broker 2 has
    two log directories, the second on a 64 MB tmpfs. Producing acks=all until that directory is
    full: it goes offline (the metric and the heartbeat say so), leadership of its partition moves
    to another broker, the producer carries on, broker 2's partition on its other directory keeps
    being led and replicated; a restart with space again brings the directory back, and every
    acknowledged record is read back."""
    c = cluster("full-disk", start=False)
    b2 = c.broker(2)
    small = tmpfs / "log-dir-2"
    metrics_port = _free_port()
    b2.config["log.dirs"] = f"{b2.data_dir},{small}"
    b2.config["metrics.port"] = str(metrics_port)
    c.start()
    topic = unique_topic("full-disk")
    # Broker 2 leads partitions 0 and 1 and follows 2; it spreads them over its two directories
    # (fewest partitions first): one of them lands on the small disk.
    c.create_topic(topic, assignment=[[2, 0, 1], [2, 0, 1], [0, 2, 1]],
                   config={**MIN_ISR, "segment.bytes": str(SEGMENT_BYTES)})
    on_small = [p for p in (0, 1, 2) if (small / f"{topic}-{p}").is_dir()]
    assert on_small == [1], f"partition 1 on the small disk: {list(small.iterdir())}"
    full, other, followed = 1, 0, 2

    # 100 MB: more than the tmpfs holds.
    recs = [dataclasses.replace(r, partition=full) for r in make_records(100_000, 1, tag="full", value_bytes=1000)]
    acked = confluent_produce(c.bootstrap, topic, recs, acks="all",
                              extra={"message.timeout.ms": 120_000, "retries": 2_147_483_647})
    address = f"127.0.0.1:{metrics_port}"
    assert _metric(address, 'keel_log_dir_offline_count') == 1.0
    assert "log directory failed" in b2.log_text(), b2.log_tail()
    status = _status(c)
    assert "offline log directories: 1" in status and str(small) in status, status
    assert "No space left on device" in status, status
    state = c.partition_state(topic)
    assert state[full].leader in (0, 1) and 2 not in state[full].isr, state
    # The partition on the other directory is still led by broker 2 and takes writes.
    assert state[other].leader == 2, state
    more = [dataclasses.replace(r, partition=other) for r in make_records(2000, 1, tag="other", value_bytes=100)]
    acked_other = confluent_produce(c.bootstrap, topic, more, acks="all")
    c.wait_for_isr(topic, other, {0, 1, 2})
    # Broker 2's fetcher for the partition it follows on its good directory never stopped: it
    # stays in the ISR while the leader takes new records, and holds them all.
    third = [dataclasses.replace(r, partition=followed) for r in make_records(2000, 1, tag="third", value_bytes=100)]
    acked_third = confluent_produce(c.bootstrap, topic, third, acks="all")
    c.wait_for_isr(topic, followed, {0, 1, 2})
    c.wait_for(lambda: c.segment_bytes(2, topic, followed) == c.segment_bytes(0, topic, followed), 30,
               "broker 2 replicated the followed partition")

    # Space again, then a restart: the directory is back and the replica rejoins.
    subprocess.run(["mount", "-o", "remount,size=256m", str(tmpfs)], check=True, timeout=30)
    c.restart(2)
    c.wait_for_isr(topic, full, {0, 1, 2}, timeout_s=120)
    assert _metric(address, 'keel_log_dir_offline_count') == 0.0
    assert "offline log directories: none" in _status(c)
    got = confluent_consume(c.bootstrap, topic, [full, other, followed],
                            {full: len(acked), other: len(acked_other), followed: len(acked_third)})
    assert_read_back(acked + acked_other + acked_third, got, "after broker 2's directory filled up")
    c.stop()  # before the tmpfs is unmounted under the running broker


def _free_port() -> int:
    from keel_broker import free_port
    return free_port()
