"""A multi-process cluster (one controller, three brokers, RF 3, min.insync.replicas 2) under
kill -9, SIGTERM, SIGSTOP and a wiped disk: acknowledged acks=all records survive, the high
watermark never goes backward, KIP-966's last-replica-standing loss happens in classic mode and
not with ELR, min ISR is enforced (NOT_ENOUGH_REPLICAS; acks=1 data stays hidden until the ISR
recovers), a wiped broker re-enters the ISR only once it holds the data again, and `keel dev`
runs three brokers.

Cites KIP-966 (Eligible Leader Replicas: motivation, strict min ISR high-watermark rule, unclean
shutdown handling), Kafka's produce semantics (acks=all, min.insync.replicas), and DESIGN.md's
promise that no acknowledged acks=all record is lost. The fault knob
`keel.test.lose.unflushed.data.on.unclean.start` (docs/configuration.md) makes a kill -9 lose the
unflushed tail of a log the way a power loss would.
"""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import ConfigResource, NewTopic

import kafka_wire as w
from clients import (ADMIN_TIMEOUT_S, BackgroundProducer, HighWatermarkWatcher, Rec, assert_read_back,
                     by_partition, confluent_admin, confluent_consume, confluent_produce, confluent_produce_one,
                     confluent_watermarks, make_records, unique_topic)
from keel_broker import CLEAN_FOUND, CLEAN_MISSING
from keel_cluster import MetadataWatcher, Sample

MIN_ISR = {"min.insync.replicas": "2"}
LONG_MAX = "9223372036854775807"
# Never fsync by count or time, and drop whatever was not fsynced when a broker starts after kill -9.
LOSE_UNFLUSHED = {"keel.test.lose.unflushed.data.on.unclean.start": "true",
                  "flush.messages": LONG_MAX, "flush.ms": LONG_MAX}
# Errors must surface in the delivery report instead of being retried until they go away.
NO_RETRIES = {"retries": 0, "message.timeout.ms": 5000, "socket.timeout.ms": 5000}
LATEST = -1  # ListOffsets timestamp: the high watermark


def _values(recs: list[tuple[int, Rec]]) -> list[bytes]:
    return [r.value for _, r in recs]


def _assert_started(broker, line: str) -> None:
    assert line in broker.log_text(), f"{broker.name} run {broker.runs} did not print {line!r}\n{broker.log_tail()}"


# -- a. acks=all through kill -9, restart and SIGTERM ------------------------------------------


@pytest.mark.parametrize("internals", ["plaintext", "sasl_ssl"])
def test_acks_all_survives_kill9_restart_and_sigterm(cluster, tmp_path, internals):
    """While an idempotent producer writes continuously with acks=all, kill -9 the leader of partition 0 and
    restart it, kill -9 another broker and restart it, SIGTERM the third and restart it (each back
    in every ISR before the next fault). Every partition keeps accepting writes with one broker
    down; afterwards every acknowledged record is at its acknowledged offset, per-partition order
    held, every produced record is stored exactly once, and no ListOffsets answer ever showed a
    high watermark lower than an earlier one. With `sasl_ssl` every connection inside the cluster
    (replication, brokers to controllers, Raft) is SASL_SSL (issue 21)."""
    partitions = 3
    c = cluster("acks-all", start=False)
    if internals == "sasl_ssl":
        c.secure_internals(tmp_path / "pki")
    c.start()
    topic = unique_topic("acks-all")
    c.create_topic(topic, partitions=partitions, replication_factor=3, config=MIN_ISR)
    producer_conf = {
        # Idempotent (issue 9): retries neither reorder a partition nor store a record twice,
        # across leader changes too (the new leader knows the producer's sequences).
        "enable.idempotence": True,
        "retries": 2_147_483_647,
        "retry.backoff.ms": 100,
        "message.timeout.ms": 120_000,
        "socket.timeout.ms": 10_000,
    }

    with HighWatermarkWatcher(c.bootstrap, topic, partitions) as hwm, \
            BackgroundProducer(c.bootstrap, topic, partitions, tag="acks-all", extra=producer_conf) as prod:
        prod.wait_progress(100, what="before any fault")
        first = c.partition_state(topic)[0].leader
        assert first in (0, 1, 2), f"partition 0 has no leader: {c.partition_state(topic)}"
        second = (first + 1) % 3
        third = (first + 2) % 3

        for victim, how in ((first, "kill -9"), (second, "kill -9"), (third, "SIGTERM")):
            if how == "SIGTERM":
                code = c.terminate(victim)
                assert code == 0, f"broker {victim}: SIGTERM exit code {code}\n{c.broker(victim).log_tail()}"
            else:
                c.kill9(victim)
            prod.wait_progress(50, what=f"every partition writable while broker {victim} is down after {how}")
            c.restart(victim)
            _assert_started(c.broker(victim), CLEAN_FOUND if how == "SIGTERM" else CLEAN_MISSING)
            c.wait_for_full_isr(topic, range(partitions))
            prod.wait_progress(50, what=f"after broker {victim} rejoined every ISR")

        prod.stop()
        hwm.stop()

    assert prod.crash is None, f"producer thread failed: {prod.crash!r}"
    assert not prod.errors, f"{len(prod.errors)} records failed although retries were on: {prod.errors[:5]}"
    assert prod.left_in_flight == 0, f"{prod.left_in_flight} records never got a delivery report"
    assert hwm.crash is None, f"high watermark watcher failed: {hwm.crash!r}"
    assert not hwm.regressions(), f"the high watermark went backward: {hwm.regressions()[:10]}"
    short = {p: len(s) for p, s in hwm.samples.items() if len(s) < 10}
    assert not short, (f"too few high watermark samples {short}; failures {dict(hwm.failures)}; "
                       f"queries slower than 1 s (partition, start, seconds, outcome): {hwm.slow}")

    acked = list(prod.acked)
    for p in range(partitions):
        offsets = [off for q, off, _ in acked if q == p]
        assert offsets == sorted(set(offsets)), (
            f"partition {p}: acknowledged offsets not increasing in delivery order "
            f"(first inversions {[(a, b) for a, b in zip(offsets, offsets[1:]) if b <= a][:5]})")
        numbers = [prod.number(v) for q, _, v in sorted(acked, key=lambda a: a[1]) if q == p]
        assert numbers == sorted(set(numbers)), (
            f"partition {p}: acknowledged records out of produce order by offset "
            f"(first inversions {[(a, b) for a, b in zip(numbers, numbers[1:]) if b <= a][:5]})")

    ends = {p: hi for p, (_, hi) in confluent_watermarks(c.bootstrap, topic, list(range(partitions))).items()}
    for p in range(partitions):
        top = max((off for q, off, _ in acked if q == p), default=-1)
        assert ends[p] > top, f"partition {p}: high watermark {ends[p]} but offset {top} was acknowledged with acks=all"
        seen = max((hi for _, hi in hwm.samples[p]), default=0)
        assert ends[p] >= seen, f"partition {p}: final high watermark {ends[p]} below {seen} seen during the run"

    got = confluent_consume(c.bootstrap, topic, list(range(partitions)), ends)
    at: dict[tuple[int, int], bytes] = {}
    for p, recs in got.items():
        offsets = [off for off, _ in recs]
        assert offsets == list(range(ends[p])), f"partition {p}: offsets not 0..{ends[p] - 1}: starts {offsets[:3]}"
        at.update({(p, off): r.value for off, r in recs})
    produced = {prod.value(n) for n in range(prod.sent)}
    wrong = [(p, off, v, at.get((p, off))) for p, off, v in acked if at.get((p, off)) != v]
    assert not wrong, f"{len(wrong)} acknowledged records not at their offsets, first (p, off, acked, read): {wrong[:5]}"
    foreign = [(k, v) for k, v in at.items() if v not in produced]
    assert not foreign, f"records nobody produced: {foreign[:5]}"
    # Idempotence: resends after lost answers and leader changes are never stored twice.
    copies: dict[bytes, list[tuple[int, int]]] = {}
    for (p, off), v in sorted(at.items()):
        copies.setdefault(v, []).append((p, off))
    twice = {prod.number(v): where for v, where in copies.items() if len(where) > 1}
    assert not twice, (
        f"{len(twice)} records stored more than once although the producer is idempotent "
        f"(librdkafka resent {prod.resent()}); first: {sorted(twice.items())[:5]}")
    missing = sorted(set(range(prod.sent)) - {prod.number(v) for v in copies})
    assert not missing, f"{len(missing)} produced records are not in the log, first {missing[:5]}"


# -- b. KIP-966: the last replica standing -----------------------------------------------------


def _produce_batch(bootstrap: str, topic: str, tag: str, n: int = 50) -> list[tuple[Rec, int]]:
    recs = make_records(n, 1, tag=tag)
    return confluent_produce(bootstrap, topic, recs, acks="all", extra={"socket.timeout.ms": 10_000})


@pytest.mark.parametrize("mode", ["elr", "classic"])
def test_kip966_last_replica_standing(cluster, mode):
    """KIP-966's motivating sequence with replicas [2, 0, 1], leader 2, min ISR 2: batch A is
    acknowledged by all three; broker 0 hangs (SIGSTOP) and leaves the ISR; batch B is acknowledged
    by ISR {1, 2}; broker 1 hangs and the ISR is {2} (acks=all now gets NOT_ENOUGH_REPLICAS);
    broker 2 dies (kill -9) and restarts having lost its unflushed log, after 0 and 1 resume.

    ELR: broker 1 was an eligible leader replica, so it is elected, broker 2 never leads while it
    lacks the data, and every record of A and B is read back. Classic ISR mode: broker 2, the
    last ISR member, is elected with its truncated log, and the records of B are gone — the loss
    ELR exists to prevent, asserted so the comparison stays honest."""
    c = cluster(f"kip966-{mode}", controller={"eligible.leader.replicas.enable": str(mode == "elr").lower()})
    topic = unique_topic(f"kip966-{mode}")
    state = c.create_topic(topic, assignment=[[2, 0, 1]], config={**MIN_ISR, **LOSE_UNFLUSHED})
    assert state[0].replicas == (2, 0, 1) and state[0].leader == 2, f"created as {state}"

    a = _produce_batch(c.live_bootstrap, topic, "A")
    c.sigstop(0)
    c.wait_for_isr(topic, 0, {1, 2})
    b = _produce_batch(c.live_bootstrap, topic, "B")
    c.sigstop(1)
    st = c.wait_for_isr(topic, 0, {2})
    assert st.leader == 2, f"leader moved away from broker 2: {st}"
    err, _ = confluent_produce_one(c.live_bootstrap, topic, b"needs two in-sync replicas", extra=NO_RETRIES)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, (
        f"acks=all with ISR {{2}} and min.insync.replicas=2: got {err}")

    epoch_before = c.partition_state(topic, via=2)[0].leader_epoch
    c.kill9(2)
    c.sigcont(0)
    c.sigcont(1)
    with MetadataWatcher(c, topic, 0) as watcher:
        c.restart(2)
        _assert_started(c.broker(2), CLEAN_MISSING)
        c.wait_for_isr(topic, 0, {0, 1, 2}, timeout_s=60)
        after = _produce_batch(c.bootstrap, topic, "C", 20)
        hi = confluent_watermarks(c.bootstrap, topic, [0])[0][1]
        got = confluent_consume(c.bootstrap, topic, [0], {0: hi})[0]
    leaders = watcher.leaders(min_epoch=epoch_before)
    elected = [leader for _, leader in leaders if leader >= 0]
    assert elected, f"no leader elected after broker 2's kill -9 (leader epochs > {epoch_before}): {leaders}"

    read = set(_values(got))
    missing_a = [r.value for r, _ in a if r.value not in read]
    missing_b = [r.value for r, _ in b if r.value not in read]
    c_at = {off: r for off, r in got}
    for r, off in after:
        assert c_at.get(off) == r, f"{mode}: batch C record acknowledged at offset {off}, read {c_at.get(off)}"

    if mode == "elr":
        assert elected[0] == 1, (
            f"ELR: broker 1 (in the ELR) should be elected first, saw (epoch, leader) {leaders}")
        rejoined = min((s.state.leader_epoch for s in watcher.samples
                        if s.state.leader == 1 and 2 in s.state.isr and s.state.leader_epoch > epoch_before),
                       default=None)
        early = [(e, ld) for e, ld in leaders if ld == 2 and (rejoined is None or e <= rejoined)]
        assert not early, (f"ELR: broker 2 led (epoch, leader) {early} before it was seen back in the ISR under "
                           f"broker 1 (epoch {rejoined}); all leaders {leaders}")
        assert not missing_a and not missing_b, (
            f"ELR lost acknowledged records: {len(missing_a)} of A, {len(missing_b)} of B (first {(missing_a + missing_b)[:3]})")
        assert_read_back(a + b + after, {0: got}, "ELR after the last replica standing restarted")
    else:
        assert elected[0] == 2, (
            f"classic: broker 2, the last ISR member, should be elected when it returns; saw {leaders}")
        assert len(missing_b) == len(b), (
            f"classic mode is expected to lose batch B with broker 2's unflushed log, but {len(b) - len(missing_b)} "
            f"of {len(b)} B records were read (A missing: {len(missing_a)} of {len(a)}); did broker 2 fsync, or "
            f"was another broker elected? leaders {leaders}")


# -- c. min ISR: NOT_ENOUGH_REPLICAS and hidden acks=1 data -----------------------------------


def test_not_enough_replicas_and_hidden_acks1(cluster):
    """With brokers 1 and 2 killed the ISR is {0}, below min.insync.replicas=2: acks=all gets
    NOT_ENOUGH_REPLICAS and appends nothing; acks=1 is acknowledged but stays above the high
    watermark (KIP-966's strict rule), invisible to ListOffsets and to read_uncommitted and
    read_committed consumers. Once 1 and 2 are back in the ISR those records become visible."""
    c = cluster("min-isr")
    topic = unique_topic("min-isr")
    c.create_topic(topic, assignment=[[0, 1, 2]], config=MIN_ISR)
    base = confluent_produce(c.bootstrap, topic, make_records(50, 1, tag="base"), acks="all")
    n_base = len(base)

    c.kill9(1)
    c.kill9(2)
    c.wait_for_isr(topic, 0, {0})
    err, _ = confluent_produce_one(c.live_bootstrap, topic, b"needs two in-sync replicas", extra=NO_RETRIES)
    assert err is not None and err.code() == ck.KafkaError.NOT_ENOUGH_REPLICAS, (
        f"acks=all with ISR {{0}} and min.insync.replicas=2: got {err}")
    hidden = confluent_produce(c.live_bootstrap, topic, make_records(20, 1, tag="acks1"), acks="1")
    assert [off for _, off in hidden] == list(range(n_base, n_base + len(hidden))), (
        f"acks=1 records acknowledged at {[off for _, off in hidden]}; the rejected acks=all record must not take an offset")

    assert confluent_watermarks(c.live_bootstrap, topic, [0])[0] == (0, n_base), (
        "ListOffsets (librdkafka watermarks) shows the acks=1 records below the high watermark")
    with w.RawConnection.to(c.broker(0).address) as conn:
        assert w.list_offsets_v1(conn, topic, 0, LATEST)[::2] == (w.NONE, n_base), "raw ListOffsets v1 latest"
    for isolation in ("read_uncommitted", "read_committed"):
        got = confluent_consume(c.live_bootstrap, topic, [0], {0: 0}, extra={"isolation.level": isolation})
        assert [off for off, _ in got[0]] == list(range(n_base)), (
            f"{isolation} consumer read offsets {[off for off, _ in got[0]][-3:]}... while the ISR is below min ISR")

    c.restart(1)
    c.restart(2)
    c.wait_for_state(topic, 0, lambda s: s.leader == 0 and len(s.isr) >= 2, "leader 0 with at least 2 in the ISR")
    total = n_base + len(hidden)
    c.wait_for(lambda: confluent_watermarks(c.bootstrap, topic, [0])[0][1] == total, what=f"high watermark {total}",
               state=lambda: confluent_watermarks(c.bootstrap, topic, [0]))
    for isolation in ("read_uncommitted", "read_committed"):
        got = confluent_consume(c.bootstrap, topic, [0], {0: total}, extra={"isolation.level": isolation})
        assert_read_back(base + hidden, got, f"{isolation} after the ISR recovered")


# -- d. a wiped disk -------------------------------------------------------------------------


def test_wiped_broker_rejoins_only_after_rereplicating(cluster):
    """Broker 2 is killed, its disk wiped and formatted again (same cluster id and node id, new
    directory id) and restarted. The first time any broker's metadata shows 2 in the ISR again,
    its copy of the partition is already as large as the leader's: a replica joins the ISR only
    once it holds every record, never because it registered."""
    c = cluster("wipe")
    topic = unique_topic("wipe")
    c.create_topic(topic, assignment=[[0, 1, 2]], config=MIN_ISR)
    recs = make_records(8000, 1, tag="wipe", value_bytes=1024)  # ~8 MiB: catching up takes many fetches
    acked = confluent_produce(c.bootstrap, topic, recs, acks="all")
    leader_bytes = c.segment_bytes(0, topic, 0)
    assert leader_bytes >= 8000 * 1024, f"leader's segments hold {leader_bytes} bytes"
    old_dir_id = c.broker(2).meta_properties().get("directory.id")
    assert old_dir_id, c.broker(2).meta_properties()

    c.kill9(2)
    c.wait_for_isr(topic, 0, {0, 1})
    c.wipe(2)
    assert not (c.broker(2).log_dir / f"{topic}-0").exists(), "wipe left the partition directory"
    new_dir_id = c.broker(2).meta_properties().get("directory.id")
    assert new_dir_id and new_dir_id != old_dir_id, f"directory.id {old_dir_id} -> {new_dir_id} after the re-format"

    joined: list[tuple[Sample, int]] = []

    def on_sample(s: Sample) -> None:
        if 2 in s.state.isr and not joined:
            joined.append((s, c.segment_bytes(2, topic, 0)))  # measured the moment the ISR shows it

    with MetadataWatcher(c, topic, 0, on_sample=on_sample, interval_s=0.005):
        c.restart(2)
        c.wait_for(lambda: joined, 60, "broker 2 back in the ISR", state=lambda: c.partition_views(topic))
    sample, size = joined[0]
    assert size >= leader_bytes, (
        f"broker {sample.via}'s metadata showed broker 2 in the ISR {sample.state} while broker 2 held {size} of "
        f"the leader's {leader_bytes} bytes")
    c.wait_for_isr(topic, 0, {0, 1, 2})
    assert c.broker(2).meta_properties().get("directory.id") == new_dir_id, "the broker rewrote its directory id"
    got = confluent_consume(c.bootstrap, topic, [0], {0: len(recs)})
    assert_read_back(acked, got, "after broker 2's disk was replaced")


# -- e. keel dev ----------------------------------------------------------------------------


def _wait_for_rf3(admin, topic: str, timeout_s: float = 30.0) -> dict:
    """Polls Metadata until every partition of `topic` has a leader, 3 replicas and 3 in its ISR;
    returns {partition: (leader, replicas, isrs)}."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while True:
        t = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        seen = None if t is None else (t.error, {q.id: (q.leader, q.replicas, q.isrs) for q in t.partitions.values()})
        if t is not None and t.error is None and t.partitions and all(
                q.leader >= 0 and len(q.replicas) == 3 and len(q.isrs) == 3 for q in t.partitions.values()):
            return seen[1]
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic} never showed RF 3 with a full ISR in {timeout_s}s: {seen}")
        time.sleep(0.1)


def test_keel_dev_runs_three_brokers(start_broker):
    """`keel dev --data-dir D --port P` runs three brokers on P, P+1, P+2 and names all three in
    its ready line; a topic created with default settings gets RF 3 and min.insync.replicas=2;
    1000 records produced with acks=all are read back; SIGTERM exits 0."""
    b = start_broker("dev-cluster", mode="dev")
    p = b.port
    assert b.bootstrap == f"127.0.0.1:{p},127.0.0.1:{p + 1},127.0.0.1:{p + 2}", b.bootstrap
    admin = confluent_admin(b.bootstrap)
    topic = unique_topic("dev-cluster")
    admin.create_topics([NewTopic(topic)], operation_timeout=ADMIN_TIMEOUT_S)[topic].result(timeout=ADMIN_TIMEOUT_S)

    partitions = len(_wait_for_rf3(admin, topic))

    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    configs = fut.result(timeout=ADMIN_TIMEOUT_S)
    assert configs["min.insync.replicas"].value == "2", configs["min.insync.replicas"]

    recs = make_records(1000, partitions, tag="dev-cluster")
    acked = confluent_produce(b.bootstrap, topic, recs, acks="all")
    expected = {q: len(rs) for q, rs in by_partition(recs).items()}
    got = confluent_consume(b.bootstrap, topic, list(range(partitions)), expected)
    assert_read_back(acked, got, "keel dev with three brokers")
    assert b.terminate() == 0, f"keel dev exit code {b.last_returncode}\n{b.log_tail()}"
