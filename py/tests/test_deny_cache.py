"""The deny cache through Python, on a real Redis server: refusals remembered in process answer
later checks with no round trip (the server's INFO commandstats), until retry_after or a reset."""

from __future__ import annotations

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

from .conftest import REDIS_OPTIONS, RedisServer, unique_prefix

T0 = 1_700_000_000_000_000


def test_refusals_are_answered_in_process(redis_server: RedisServer) -> None:
    clock = ratekeeper.ManualClock(T0)
    backend = ratekeeper.Backend.redis(
        redis_server.url, **{**REDIS_OPTIONS, "prefix": unique_prefix()}, clock=clock, deny_cache=True
    )
    limiter = backend.token_bucket("api", 1, 1)
    assert limiter.deny_cache
    assert limiter.check("k").allowed
    refused = limiter.check("k")
    assert not refused.allowed and refused.retry_after == 1.0
    clock.advance(0.25)
    for _ in range(50):
        d = limiter.check("k")
        assert not d.allowed and d.retry_after == 0.75
    assert limiter.metrics().refused_locally == 50
    limiter.reset("k")
    assert limiter.check("k").allowed, "reset forgets the remembered refusal"
    assert not limiter.with_deny_cache(False).deny_cache
    plain = ratekeeper.Backend.redis(redis_server.url, **{**REDIS_OPTIONS, "prefix": unique_prefix()})
    assert not plain.token_bucket("api", 1, 1).deny_cache
    assert plain.token_bucket("api", 1, 1).with_deny_cache(True).deny_cache


@pytest.mark.parametrize("bad", [0, -1, "3", 1.5])
def test_bad_cache_sizes_name_the_parameter(redis_server: RedisServer, bad: object) -> None:
    with pytest.raises(InvalidArgument) as e:
        ratekeeper.Backend.redis(redis_server.url, deny_cache_max_entries=bad)  # type: ignore[arg-type]
    assert e.value.parameter == "deny_cache_max_entries"


def test_deny_cache_must_be_a_boolean(redis_server: RedisServer) -> None:
    with pytest.raises(InvalidArgument) as e:
        ratekeeper.Backend.redis(redis_server.url, deny_cache="yes")  # type: ignore[arg-type]
    assert e.value.parameter == "deny_cache"
    with pytest.raises(InvalidArgument) as e:
        ratekeeper.Backend.memory().token_bucket("m", 1, 1).with_deny_cache(1)  # type: ignore[arg-type]
    assert e.value.parameter == "deny_cache"
