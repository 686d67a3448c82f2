"""franz-go (github.com/twmb/franz-go, from the Go module proxy) against Keel: its producer with
default settings (idempotent, acks=all) writes through a partition leader's kill -9 in a
three-broker cluster, and the consumed log has no duplicates and no gaps (issue 9: "franz-go's
default producer ... work[s], including across a leader kill -9").

The program is tests/go/franzproducer; `go build` compiles it into tests/.cache/go once per source
change (the module cache keeps franz-go between runs).
"""

from __future__ import annotations

from pathlib import Path

from builds import go_build
from leader_kill9 import producer_through_leader_kill9

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "go" / "franzproducer"
BINARY = REPO / "tests" / ".cache" / "go" / "franzproducer"


def build_producer() -> Path:
    return go_build(SOURCE, BINARY)


def test_franz_go_default_producer_through_a_leader_kill9(cluster):
    """6,000 numbered records to three partitions at 1,500 records/s; the leader of partition 0 is
    killed with -9 after 1,500 acknowledgements: every record is acknowledged and stored exactly
    once, in order."""
    producer = build_producer()
    producer_through_leader_kill9(cluster("franz-idem"), [str(producer)], "franz-idem")
