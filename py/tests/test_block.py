"""``block``, ``unblock`` and ``block_for`` on memory, Redis and Redis Cluster, sync and
asyncio, with a manual clock. The exact figures are the shared vectors' (tests/vectors/
block.json); these hold the Python surface: return values, the option, metrics, errors."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

from .conftest import Calls, MakeBackend

T0 = 1_700_000_000_000_000  # a manual clock's start, in microseconds (a whole second)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_block_refuses_until_unblocked_and_resume_leaves_it(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        limiter = make_backend(clock=clock).token_bucket("api", 0.01, 5)
        assert (await calls(limiter.check, "k")).allowed
        assert await calls(limiter.unblock, "k") is False
        assert await calls(limiter.block, 10, "k") == 10.0
        for _ in range(3):
            d: Any = await calls(limiter.check, "k")
            assert not d.allowed and d.retry_after == 10.0 and d.remaining == 0
        assert (await calls(limiter.peek, "k")).retry_after == 10.0
        assert (await calls(limiter.check, "other")).allowed, "other keys are not blocked"
        assert await calls(limiter.resume, "k") is False, "a block is not a pause"
        assert limiter.metrics().blocked == 3
        clock.advance(4)
        assert await calls(limiter.block, 2.5, "k") == 2.5, "a block by hand replaces the one in effect"
        assert await calls(limiter.unblock, "k") is True
        d = await calls(limiter.check, "k")
        assert d.allowed and d.remaining == 3, "blocked refusals consumed nothing"

    run(body())


def test_block_for_blocks_after_a_refusal(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        backend = make_backend(clock=clock)
        plain = backend.bucket("login", 1, 60)
        assert plain.block_for is None
        limiter = plain.with_block_for(600)
        assert limiter.block_for == 600.0
        assert limiter.spec["block_for"] == 600
        assert backend.limiter("login", {"kind": "bucket", "limit": 1, "interval": 60, "block_for": 600}).block_for == 600
        assert (await calls(limiter.check, "u")).allowed
        refused: Any = await calls(limiter.check, "u")
        assert not refused.allowed and refused.retry_after == 600.0
        clock.advance(120)
        d: Any = await calls(plain.check, "u")
        assert not d.allowed and d.retry_after == 480.0, "the block is the key's, whichever limiter object asks"
        await calls(limiter.reset, "u")
        assert (await calls(limiter.check, "u")).allowed, "reset forgets the block"
        assert limiter.with_block_for(None).block_for is None

    run(body())


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "3", True])
def test_bad_durations_name_their_parameter_and_write_nothing(make_backend: MakeBackend, bad: Any) -> None:
    limiter = make_backend().token_bucket("api", 10, 5)
    with pytest.raises(InvalidArgument) as e:
        limiter.block(bad, "k")
    assert e.value.parameter == "duration"
    with pytest.raises(InvalidArgument) as e:
        run(limiter.ablock(bad, "k"))
    assert e.value.parameter == "duration"
    with pytest.raises(InvalidArgument) as e:
        limiter.with_block_for(bad)
    assert e.value.parameter == "block_for"
    assert limiter.check("k").allowed, "nothing was blocked"
