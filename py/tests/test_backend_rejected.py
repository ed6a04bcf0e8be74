"""Redis refusals an operator must fix (NOPERM, WRONGPASS, OOM) raise BackendRejected under
every failure policy — never admitted by fail_open or fallback — and are counted."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator

import pytest

import ratekeeper

from .conftest import RedisServer


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    s.cli("ACL", "SETUSER", "limited", "on", ">secret", "~*", "+@all", "-evalsha", "-eval")
    yield s
    s.stop()


def _check(limiter: ratekeeper.Limiter, style: str) -> None:
    if style == "sync":
        limiter.check("k")
    else:

        async def go() -> None:
            await limiter.acheck("k")

        asyncio.run(go())


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("policy", ["fail_open", "fallback"])
@pytest.mark.parametrize("case", ["NOPERM", "WRONGPASS"])
def test_refusals_are_raised_not_failed_open(server: RedisServer, case: str, policy: str, style: str) -> None:
    password = "secret" if case == "NOPERM" else "wrong"
    url = f"redis://limited:{password}@127.0.0.1:{server.port}"
    divisor = 2 if policy == "fallback" else None
    backend = ratekeeper.Backend.redis(url, failure_policy=policy, fallback_divisor=divisor, deadline=1.0)
    limiter = backend.window("w", 10, 60)
    with pytest.raises(ratekeeper.BackendRejected) as caught:
        _check(limiter, style)
    assert caught.value.code == case
    assert case in str(caught.value)
    assert isinstance(caught.value, ratekeeper.RatekeeperError)
    assert not isinstance(caught.value, ratekeeper.BackendUnavailable)
    stats = backend.stats()
    assert (stats.failed_open, stats.fell_back, stats.failed, stats.rejected) == (0, 0, 0, 1)


def test_out_of_memory_is_raised_not_failed_open(server: RedisServer) -> None:
    backend = ratekeeper.Backend.redis(server.url, failure_policy="fail_open", prefix="py-oom")
    limiter = backend.window("w", 10, 60)
    server.cli("CONFIG", "SET", "maxmemory-policy", "noeviction")
    server.cli("CONFIG", "SET", "maxmemory", "1")
    try:
        with pytest.raises(ratekeeper.BackendRejected) as caught:
            limiter.check("k")
        assert caught.value.code == "OOM"
    finally:
        server.cli("CONFIG", "SET", "maxmemory", "0")
    assert limiter.check("k").allowed
    assert backend.stats().rejected == 1


def test_backend_rejected_pickles() -> None:
    error = ratekeeper.BackendRejected("backend rejected the call (OOM): Redis: OOM", "OOM")
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, ratekeeper.BackendRejected) and again.code == "OOM" and str(again) == str(error)
