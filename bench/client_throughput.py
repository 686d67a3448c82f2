#!/usr/bin/env python3
"""Produce and consume throughput against a running broker, measured with librdkafka.

Usage: bench/client_throughput.py [--bootstrap localhost:9092] [--records 200000]
                                  [--record-bytes 1024] [--acks all] [--partitions 1]

Prints one line per phase with records/s and MB/s. The topic is created fresh
(bench-<pid>) so runs do not see each other's data.
"""
import argparse
import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--acks", default="all")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000)
    parser.add_argument("--compression", default="none")
    args = parser.parse_args()

    topic = f"bench-{os.getpid()}-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)

    payload = os.urandom(args.record_bytes)
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes,
        "compression.type": args.compression,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    })
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    start = time.perf_counter()
    for i in range(args.records):
        while True:
            try:
                producer.produce(topic, payload, partition=i % args.partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{len(failures)} deliveries failed, first: {failures[0]}")
    report("produce", args, elapsed)

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "bench-unused",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(args.partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 300
    while seen < args.records and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if seen != args.records:
        raise SystemExit(f"consumed {seen} of {args.records}")
    report("consume", args, elapsed)
    admin.delete_topics([topic])


def report(phase, args, elapsed):
    rate = args.records / elapsed
    mb = rate * args.record_bytes / 1_000_000
    print(f"{phase}: {args.records} records x {args.record_bytes} B, acks={args.acks}, "
          f"partitions={args.partitions}: {rate:,.0f} records/s, {mb:,.1f} MB/s ({elapsed:.2f} s)")


if __name__ == "__main__":
    main()
