"""``Backend.check_all`` / ``acquire_all`` (several limits, all or nothing) and their asyncio
forms, on memory, a real Redis server and a real 3-master Redis Cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ratekeeper
from ratekeeper import Backend, Limiter

from .conftest import Calls, MakeBackend, RedisCluster, REDIS_OPTIONS, unique_prefix

HOUR = 3600.0


def colocated(backend: Backend, name: str, spec: dict[str, object]) -> Limiter:
    return backend.limiter(name, {**spec, "colocate": "tenant"})


def test_all_or_nothing(make_backend: MakeBackend, calls: Calls) -> None:
    asyncio.run(_all_or_nothing(make_backend, calls))


async def _all_or_nothing(make_backend: MakeBackend, calls: Calls) -> None:
    backend = make_backend()
    rate = colocated(backend, "py-rate", {"kind": "token_bucket", "rate": 5 / HOUR, "capacity": 5})
    quota = colocated(backend, "py-quota", {"kind": "bucket", "limit": 3, "interval": HOUR})
    slots = colocated(backend, "py-slots", {"kind": "concurrent", "limit": 2, "lock_timeout": HOUR})
    parts = [(rate, "t1:u", 2), (quota, "t1", 2), (slots, "t1")]

    admitted: Any = await calls(backend.check_all, parts)
    assert isinstance(admitted, ratekeeper.CombinedDecision)
    assert admitted.allowed and admitted and admitted.retry_after == 0
    assert [d.remaining for d in admitted.parts] == [3, 1, 1]
    assert admitted.parts[2].lease is not None and admitted.parts[0].lease is None

    refused: Any = await calls(backend.check_all, parts)
    assert not refused.allowed and not refused
    assert [d.allowed for d in refused.parts] == [True, False, True]
    assert refused.retry_after == refused.parts[1].retry_after > 0
    assert all(d.lease is None for d in refused.parts), "a refused combination holds no lease"
    assert rate.peek("t1:u").remaining == 3, "nothing was consumed"
    assert quota.peek("t1").remaining == 1
    assert slots.peek("t1").remaining == 1

    await calls(admitted.release)
    assert slots.peek("t1").remaining == 2


def test_bad_parts_are_named_and_write_nothing(make_backend: MakeBackend, calls: Calls) -> None:
    asyncio.run(_bad_parts_are_named_and_write_nothing(make_backend, calls))


async def _bad_parts_are_named_and_write_nothing(make_backend: MakeBackend, calls: Calls) -> None:
    backend = make_backend()
    bucket = colocated(backend, "py-bad", {"kind": "bucket", "limit": 5, "interval": 60})
    leased = backend.leased("py-leased", 1.0, 5)
    cases: list[tuple[object, str]] = [
        ([], "parts"),
        ("t1", "parts"),
        ([(bucket, "t1", 1), (bucket, "t1", 0)], "parts[1].cost"),
        ([(bucket, "t1", -1)], "parts[0].cost"),
        ([(bucket, "t1", 1.5)], "parts[0].cost"),
        ([(bucket, "t1", 6)], "parts[0].cost"),
        ([(bucket, 7, 1)], "parts[0].key"),
        ([(bucket, "k" * 2000, 1)], "parts[0].key"),
        ([(bucket,)], "parts[0]"),
        ([("not a limiter", "t1", 1)], "parts[0]"),
        ([(bucket, "t1", 1), (leased, "t1", 1)], "parts[1]"),
        ([(bucket, "t1", 1), (Backend.memory().bucket("other", 5, 60), "t1", 1)], "parts[1]"),
    ]
    for parts, parameter in cases:
        with pytest.raises(ratekeeper.InvalidArgument) as raised:
            await calls(backend.check_all, parts)
        assert raised.value.parameter == parameter, (parts, raised.value)
    assert bucket.peek("t1").remaining == 5


def test_acquire_all_gives_up_with_the_retry_after(make_backend: MakeBackend, calls: Calls) -> None:
    asyncio.run(_acquire_all_gives_up_with_the_retry_after(make_backend, calls))


async def _acquire_all_gives_up_with_the_retry_after(make_backend: MakeBackend, calls: Calls) -> None:
    backend = make_backend()
    rate = colocated(backend, "py-acq", {"kind": "token_bucket", "rate": 1.0, "capacity": 2})
    quota = colocated(backend, "py-acq-quota", {"kind": "bucket", "limit": 1, "interval": HOUR})
    parts = [(rate, "t9:a", 1), (quota, "t9", 1)]
    acquired: Any = await calls(backend.acquire_all, parts, wait_timeout=1.0)
    assert acquired.allowed
    with pytest.raises(ratekeeper.OverLimit) as raised:
        await calls(backend.acquire_all, parts, wait_timeout=1.0)
    assert 1.0 < raised.value.retry_after <= HOUR
    assert rate.peek("t9:a").remaining == 1


def test_a_cluster_refuses_a_combination_across_slots(redis_cluster: RedisCluster) -> None:
    backend = Backend.cluster(redis_cluster.seeds, **{**REDIS_OPTIONS, "prefix": unique_prefix()})
    a = backend.token_bucket("py-plain-a", 1.0, 5)
    b = backend.token_bucket("py-plain-b", 1.0, 5)
    with pytest.raises(ratekeeper.InvalidArgument) as raised:
        backend.check_all([(a, "x", 1), (b, "x", 1)])
    assert raised.value.parameter == "parts"
    assert "py-plain-a" in str(raised.value) and "py-plain-b" in str(raised.value)
    assert a.peek("x").remaining == 5 and b.peek("x").remaining == 5
    quota = colocated(backend, "py-tenant-quota", {"kind": "calendar", "limit": 10, "period": "month", "tz": "UTC"})
    rate = colocated(backend, "py-tenant-rate", {"kind": "token_bucket", "rate": 1.0, "capacity": 5})
    for t in range(8):
        assert backend.check_all([(rate, f"tenant{t}:u", 1), (quota, f"tenant{t}", 1)]).allowed
