"""A client's default producer writing through kill -9 of a partition leader (issue 9), shared by
the Java (`test_java_client.py`) and franz-go (`test_go_client.py`) checks.

The program is started as `PROGRAM... BOOTSTRAP TOPIC RECORDS PARTITIONS RATE`: it sends record n
(value "n") to partition n % PARTITIONS at RATE records/s, prints "acked N" as acknowledgements
arrive and "DONE sent=N acked=A failed=F" at the end. Once 1,500 records are acknowledged the
leader of partition 0 is killed with -9; every send must succeed and each partition must hold its
numbers exactly once, in order.
"""

from __future__ import annotations

import subprocess
import threading
import time

from clients import confluent_consume, confluent_watermarks, unique_topic

RECORDS, PARTITIONS, RATE, KILL_AFTER = 6000, 3, 1500, 1500


def producer_through_leader_kill9(c, program: list[str], name: str) -> None:
    topic = unique_topic(name)
    c.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
    producer = subprocess.Popen(
        [*program, c.bootstrap, topic, str(RECORDS), str(PARTITIONS), str(RATE)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(producer.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any(line.startswith("acked ") and int(line.split()[1]) >= KILL_AFTER for line in list(out)):
        assert producer.poll() is None, f"the producer ended early: {out[-3:]} {producer.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"the producer acknowledged too little: {out[-3:]}"
        time.sleep(0.05)
    victim = c.partition_state(topic)[0].leader
    c.kill9(victim)
    try:
        producer.wait(180)
    finally:
        if producer.poll() is None:
            producer.kill()
    reader.join(10)
    stderr = producer.stderr.read()
    assert producer.returncode == 0 and any(l.startswith(f"DONE sent={RECORDS} acked={RECORDS} failed=0")
                                            for l in out), (out[-3:], stderr[-3000:])

    alive = [i for i in range(3) if i != victim]
    bootstrap = c.bootstrap_of(alive)
    ends = {p: hi for p, (_, hi) in confluent_watermarks(bootstrap, topic, list(range(PARTITIONS))).items()}
    got = confluent_consume(bootstrap, topic, list(range(PARTITIONS)), ends)
    for p, recs in got.items():
        numbers = [int(r.value) for _, r in recs]
        assert numbers == list(range(p, RECORDS, PARTITIONS)), (
            f"partition {p}: {len(numbers)} records, duplicates "
            f"{sorted(n for n in set(numbers) if numbers.count(n) > 1)[:5]}, "
            f"missing {sorted(set(range(p, RECORDS, PARTITIONS)) - set(numbers))[:5]}")
