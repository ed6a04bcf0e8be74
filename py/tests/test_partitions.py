"""Leased partitions from Python on a real Redis server: two limiters (as two processes would
be) split the partitions by fair share, acquire paces to the held rate, close gives them back,
and bad input names its parameter."""

from __future__ import annotations

import time

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

from .conftest import RedisServer, unique_prefix


def test_two_members_split_the_partitions_and_pace(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    first = ratekeeper.Backend.redis(redis_server.url, prefix=prefix).partitions("ingest", 100, 10, lease_ttl=3)
    first.check()
    assert len(first.partitions_held()) == 10
    second = ratekeeper.Backend.redis(redis_server.url, prefix=prefix).partitions("ingest", 100, 10, lease_ttl=3)
    second.check()
    deadline = time.monotonic() + 30
    # The first keeps calling (so keeps renewing): the second gets its share because the first
    # gives back what exceeds its own, never because a lease lapsed.
    while len(second.partitions_held()) < 5:
        assert time.monotonic() < deadline, (first.partitions_held(), second.partitions_held())
        first.check()
        second.check()
        time.sleep(0.02)
    first.check()
    held = sorted(i for i, _ in first.partitions_held() + second.partitions_held())
    assert held == list(range(10)), "each partition has exactly one holder"
    # 5 partitions of 10/s: acquire waits exactly 20 ms between calls of cost 1.
    stamps = [second.acquire(wait_timeout=5).decided_at_us for _ in range(10)]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert sum(gaps) >= 9 * 20_000 - 2 * 20_000, gaps  # at most 2 calls' worth carried
    second.close()
    assert second.partitions_held() == []
    first.check()
    first.close()


def test_memory_holds_every_partition_and_refuses_bad_input() -> None:
    backend = ratekeeper.Backend()
    limiter = backend.partitions("p", 100, 20)
    assert len(limiter.partitions_held()) == 20
    assert limiter.spec["kind"] == "partitions"
    for parameter, call in [
        ("total_rate", lambda: backend.partitions("p", 0, 20)),
        ("partitions", lambda: backend.partitions("p", 100, 0)),
        ("lease_ttl", lambda: backend.partitions("p", 100, 20, lease_ttl=0.01)),
        ("reserved", lambda: backend.partitions("p", 100, 20, reserved=20)),
        ("reserved", lambda: backend.partitions("p", 100, 20, priority=True)),
    ]:
        with pytest.raises(InvalidArgument) as raised:
            call()
        assert raised.value.parameter == parameter
