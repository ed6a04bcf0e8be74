"""``pause``, ``observe`` and ``observe_response`` (upstream feedback) on memory, Redis and
Redis Cluster, sync and asyncio, with a manual clock."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

from .conftest import Calls, MakeBackend

T0 = 1_700_000_000_000_000  # a manual clock's start, in microseconds (a whole second)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Response:
    """What `requests` and `httpx` responses offer `observe_response`: `status_code` and a
    case-insensitive mapping of headers (here a plain dict with the server's spelling)."""

    def __init__(self, status_code: int, headers: Mapping[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


def test_pause_refuses_until_it_ends(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        limiter = make_backend(clock=clock).token_bucket("api", 0.01, 5)  # 12 s refill 0.12
        assert (await calls(limiter.check, "k")).allowed
        assert await calls(limiter.pause, 10, "k") == 10.0
        for _ in range(3):
            d: Any = await calls(limiter.check, "k")
            assert not d.allowed and d.retry_after == 10.0 and d.remaining == 0
        assert (await calls(limiter.peek, "k")).retry_after == 10.0
        assert (await calls(limiter.check, "other")).allowed, "other keys are not paused"
        clock.advance(4)
        assert await calls(limiter.pause, 2.5, "k") == 6.0, "a shorter pause never shortens"
        assert await calls(limiter.pause, 8, "k") == 8.0, "a longer one extends"
        clock.advance(8)
        d = await calls(limiter.check, "k")
        assert d.allowed and d.remaining == 3, "paused refusals consumed nothing"

    run(body())


def test_acquire_waits_out_the_pause(make_backend: MakeBackend) -> None:
    clock = ratekeeper.ManualClock(T0)
    limiter = make_backend(clock=clock).token_bucket("api", 10, 5)
    limiter.pause(5)
    with pytest.raises(ratekeeper.OverLimit) as over:
        limiter.acquire(wait_timeout=1)
    assert over.value.retry_after == 5.0

    async def body() -> None:
        waiter = asyncio.ensure_future(limiter.aacquire(wait_timeout=10))
        await asyncio.sleep(0.05)
        clock.advance(5 - 1e-6)
        await asyncio.sleep(0.05)
        assert not waiter.done(), "acquire returned before the pause ended"
        clock.advance(1e-6)
        d = await asyncio.wait_for(waiter, 10)
        assert d.allowed and d.remaining == 4

    run(body())


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "3", None, True])
def test_bad_durations_name_duration_and_write_nothing(make_backend: MakeBackend, bad: Any) -> None:
    limiter = make_backend().token_bucket("api", 10, 5)
    with pytest.raises(InvalidArgument) as e:
        limiter.pause(bad, "k")
    assert e.value.parameter == "duration"
    with pytest.raises(InvalidArgument) as e:
        limiter.apause(bad, "k")
    assert e.value.parameter == "duration"
    assert limiter.check("k").allowed


def test_observe_reads_every_form(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        limiter = make_backend(clock=clock).token_bucket("api", 100, 100)
        # Nothing applies: not a 429/503, or nothing well formed.
        assert await calls(limiter.observe, 200, {"Retry-After": "30"}, "a") is None
        assert await calls(limiter.observe, 429, {"Retry-After": "soon"}, "a") is None
        assert await calls(limiter.observe, 429, [("RateLimit-Remaining", "2"), ("RateLimit-Reset", "9")], "a") is None
        assert (await calls(limiter.check, "a")).allowed
        # Each form, names in any case, as a mapping or as pairs.
        assert await calls(limiter.observe, 429, {"retry-after": "3"}, "b") == 3.0
        date = "Tue, 14 Nov 2023 22:13:40 GMT"  # T0 + 20 s
        assert await calls(limiter.observe, 503, [("RETRY-AFTER", date)], "c") == 20.0
        draft = [("RateLimit-Remaining", "0"), ("RateLimit-Reset", "7")]
        assert await calls(limiter.observe, 429, draft, "d") == 7.0
        assert await calls(limiter.observe, 429, {"X-RateLimit-Reset": str(T0 // 1_000_000 + 45)}, "e") == 45.0
        assert await calls(limiter.observe, 429, {"x-ratelimit-reset": "60"}, "f") == 60.0
        assert await calls(limiter.observe, 429, [(b"Retry-After", b"4")], "g") == 4.0
        for key, wait in [("b", 3), ("c", 20), ("d", 7), ("e", 45), ("f", 60), ("g", 4)]:
            assert (await calls(limiter.check, key)).retry_after == wait, key

    run(body())


def test_observe_response_duck_types_requests_and_httpx(make_backend: MakeBackend) -> None:
    clock = ratekeeper.ManualClock(T0)
    limiter = make_backend(clock=clock).token_bucket("api", 100, 100)
    assert limiter.observe_response(Response(200, {})) is None
    assert limiter.observe_response(Response(429, {"Retry-After": "3"}), "k") == 3.0
    assert limiter.check("k").retry_after == 3.0

    async def body() -> None:
        assert await limiter.aobserve_response(Response(429, {"Retry-After": "5"}), "k") == 5.0

    run(body())
    assert limiter.check("k").retry_after == 5.0


@pytest.mark.parametrize(
    ("status", "headers", "parameter"),
    [
        (99, {}, "status"),
        (1000, {}, "status"),
        (429.5, {}, "status"),
        ("429", {}, "status"),
        (429, "Retry-After: 3", "headers"),
        (429, 3, "headers"),
        (429, [("Retry-After",)], "headers"),
        (429, {"Retry-After": 3}, "headers"),
    ],
)
def test_observe_refuses_bad_arguments_naming_them(status: Any, headers: Any, parameter: str) -> None:
    limiter = ratekeeper.Backend.memory().token_bucket("api", 100, 100)
    with pytest.raises(InvalidArgument) as e:
        limiter.observe(status, headers, "k")
    assert e.value.parameter == parameter
    assert limiter.check("k").allowed, "nothing was paused"


def test_a_pause_is_bounded_by_max_pause_and_resume_ends_it(make_backend: MakeBackend, calls: Calls) -> None:
    """One hostile 429 (`Retry-After: 2200000000`, 70 years of `X-RateLimit-Reset`) pauses for
    the limiter's `max_pause` (one hour by default), counted; `resume` ends it in every process
    that shares the backend, and a worker's reschedule then never lands decades out."""

    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        backend = make_backend(clock=clock)
        limiter = backend.token_bucket("api", 100, 100)
        assert limiter.max_pause == 3600.0
        hostile = {"Retry-After": "2200000000"}
        assert await calls(limiter.observe, 429, hostile, "k") == 3600.0
        assert await calls(limiter.observe, 429, {"X-RateLimit-Reset": "4000000000"}, "k") == 3600.0
        refused: Any = await calls(limiter.check, "k")
        assert not refused.allowed and refused.retry_after == 3600.0
        # A job refused by it is rescheduled within the hour (plus the jitter), at attempt 1.
        delay = ratekeeper.Backoff(seed=7).reschedule_in(1, refused.retry_after)
        assert delay is not None and 3600 <= delay < 3600 + 300
        assert limiter.metrics().pauses_clamped == 2

        # Another process of the fleet sees the pause, and the operator's resume.
        other = backend.token_bucket("api", 100, 100)
        assert not (await calls(other.check, "k")).allowed
        assert await calls(other.resume, "k") is True
        assert (await calls(limiter.check, "k")).allowed
        assert await calls(other.resume, "k") is False, "nothing left to resume"

        # Per limiter and per call.
        short = limiter.with_max_pause(10)
        assert short.max_pause == 10.0
        assert await calls(short.observe, 429, hostile, "a") == 10.0
        assert await calls(short.observe, 429, hostile, "b", max_pause=5) == 5.0
        assert await calls(limiter.pause, 7200, "c") == 3600.0, "pause is bounded too"
        assert limiter.metrics().pauses_clamped == 5, "copies share their metrics"
        clock.advance(10)
        assert (await calls(short.check, "a")).allowed

    run(body())


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 3153600001, "3"])
def test_bad_max_pause_names_max_pause_and_writes_nothing(bad: Any) -> None:
    limiter = ratekeeper.Backend.memory().token_bucket("api", 100, 100)
    with pytest.raises(InvalidArgument) as e:
        limiter.with_max_pause(bad)
    assert e.value.parameter == "max_pause"
    with pytest.raises(InvalidArgument) as e:
        limiter.observe(429, {"Retry-After": "30"}, "k", max_pause=bad)
    assert e.value.parameter == "max_pause"
    with pytest.raises(InvalidArgument) as e:
        limiter.aobserve(429, {"Retry-After": "30"}, "k", max_pause=bad)
    assert e.value.parameter == "max_pause"
    assert limiter.check("k").allowed, "nothing was paused"
