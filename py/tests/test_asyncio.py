"""The asyncio bridge: the event loop keeps running while calls wait, cancelled futures are
left alone, and several loops (in several threads, or one after another) each get their own
completions."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import ratekeeper

from .conftest import REDIS_OPTIONS, MakeBackend, RedisServer, unique_prefix


async def ticking_while(awaitable: Any) -> tuple[Any, int, float]:
    """Awaits `awaitable` while a ticker counts 10 ms ticks; returns (result or exception,
    ticks, seconds taken)."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.ensure_future(ticker())
    start = time.monotonic()
    try:
        result: Any = await awaitable
    except ratekeeper.RatekeeperError as e:
        result = e
    elapsed = time.monotonic() - start
    done = True
    await task
    return result, ticks, elapsed


def test_event_loop_is_not_blocked_while_waiting(make_backend: MakeBackend) -> None:
    async def body() -> None:
        backend = make_backend()
        # A concurrent waiter sleeps until a release (none comes) or its 1 s wait ends.
        mutex = backend.concurrent("mutex", 1, lock_timeout=60)
        await mutex.aacquire()
        result, ticks, elapsed = await ticking_while(mutex.aacquire(None, 1, 1.0))
        assert isinstance(result, ratekeeper.OverLimit) and elapsed >= 0.95
        assert ticks >= 20, f"the loop ticked only {ticks} times during a 1 s wait"
        # A rate limiter's waiter sleeps exactly until the decision can change (1 s here).
        tb = backend.token_bucket("tb", 1, 1)
        await tb.acheck()
        result, ticks, elapsed = await ticking_while(tb.aacquire(None, 1, 5))
        assert isinstance(result, ratekeeper.Decision) and result.allowed and elapsed >= 0.9
        assert ticks >= 20, f"the loop ticked only {ticks} times during a 1 s wait"

    asyncio.run(body())


def test_cancelled_calls_are_left_alone(make_backend: MakeBackend) -> None:
    async def body() -> None:
        mutex = make_backend().concurrent("mutex", 1, lock_timeout=60)
        held = await mutex.aacquire()
        waiter = mutex.aacquire(None, 1, 2)
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        # The cancelled waiter stopped waiting: after a release, the slot is free (not taken by
        # it), and a lease granted to a cancelled call is given back.
        assert held.lease is not None
        await mutex.arelease(held.lease)
        await asyncio.sleep(0.1)
        assert (await mutex.apeek()).remaining == 1
        held = await mutex.aacquire()
        granted_then_cancelled = mutex.acheck()
        granted_then_cancelled.cancel()
        await asyncio.sleep(0.1)
        assert (await mutex.apeek()).remaining == 0  # only `held`
        # Calls cancelled before their result arrives are dropped by the bridge.
        tb = make_backend().token_bucket("tb", 1000, 1000)
        futures = [tb.acheck("k") for _ in range(50)]
        cancelled = sum(f.cancel() for f in futures[::2])  # memory calls are already resolved
        done = await asyncio.gather(*futures, return_exceptions=True)
        assert sum(isinstance(d, ratekeeper.Decision) for d in done) == 50 - cancelled
        assert held.lease is not None
        await mutex.arelease(held.lease)
        assert (await mutex.apeek()).remaining == 1

    asyncio.run(body())


def blocked_checks(server: RedisServer) -> int:
    """Clients blocked by ``CLIENT PAUSE`` (``CLIENT LIST`` flag ``b``), leaving out the backends'
    background tasks (named ``ratekeeper-live``), whose metric flushes a paused server holds too."""
    lines = server.cli("CLIENT", "LIST").splitlines()
    return sum(
        1
        for line in lines
        if any(f.startswith("flags=") and "b" in f[6:] for f in line.split()) and " name=ratekeeper-live " not in line
    )


def test_a_cancelled_aacquire_gives_back_the_lease_its_check_got_later(redis_server: RedisServer) -> None:
    """An ``aacquire`` cancelled while its check waits on the server (held back by ``CLIENT
    PAUSE``) does not leave the lease that check grants once the server resumes: the mutex is
    free for the next caller at once, not after ``lock_timeout`` (60 s)."""

    async def body() -> None:
        backend = ratekeeper.Backend.redis(redis_server.url, **{**REDIS_OPTIONS, "prefix": unique_prefix()})
        mutex = backend.concurrent("paused", 1, lock_timeout=60)
        await mutex.apeek()  # connected: the check below is sent, then held by the pause
        redis_server.cli("CLIENT", "PAUSE", "10000", "WRITE")
        try:
            call = asyncio.ensure_future(mutex.aacquire(None, 1, 5))
            for _ in range(1000):
                if blocked_checks(redis_server) >= 1:
                    break
                await asyncio.sleep(0.005)
            else:
                raise AssertionError("the check never reached the paused server")
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.sleep(0.1)  # the cancellation has reached the call's Rust future
        finally:
            redis_server.cli("CLIENT", "UNPAUSE")
        second = await mutex.aacquire(None, 1, 5)
        assert second.lease is not None
        await mutex.arelease(second.lease)

    asyncio.run(body())


def test_many_loops_in_many_threads(make_backend: MakeBackend) -> None:
    # One token an hour: no refill while 1,200 checks run on a loaded machine (at 1/s, a run
    # longer than a second shifted every remaining count by one).
    tb = make_backend().token_bucket("shared", 1 / 3600, 10_000)
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def thread_main(n: int) -> None:
        async def body() -> list[int]:
            decisions = await asyncio.gather(*(tb.acheck(f"t{n}") for _ in range(300)))
            return sorted(d.remaining for d in decisions)

        try:
            results[n] = asyncio.run(body())
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=thread_main, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for n in range(4):
        assert results[n] == list(range(10_000 - 300, 10_000)), f"thread {n}"


def test_loops_one_after_another(make_backend: MakeBackend) -> None:
    backend = make_backend()
    mutex = backend.concurrent("m", 1, lock_timeout=60)

    async def leave_a_waiter_behind() -> None:
        await mutex.aacquire()
        # The loop ends (asyncio.run cancels the task) while this waiter is pending.
        asyncio.ensure_future(mutex.aacquire(None, 1, 0.3))
        await asyncio.sleep(0.01)

    asyncio.run(leave_a_waiter_behind())
    for _ in range(3):
        tb = backend.token_bucket("tb", 100, 100)

        async def body() -> int:
            return len(await asyncio.gather(*(tb.acheck() for _ in range(20))))

        assert asyncio.run(body()) == 20


def test_async_call_needs_a_running_loop() -> None:
    # `asyncio.run(limiter.acheck())` is the natural first try (issue 15): the message shows the
    # form that works.
    with pytest.raises(RuntimeError, match=r"needs a running event loop.*await .*asyncio\.run\(main\(\)\)"):
        ratekeeper.Backend().bucket("b", 1, 1).acheck()
    with pytest.raises(RuntimeError, match=r"needs a running event loop"):
        ratekeeper.Backend().concurrent("c", 1, lock_timeout=1).aacquire()


def test_async_call_without_a_loop_consumes_nothing() -> None:
    # The loop is looked up before the call runs: a refused `acheck` leaves the limit whole.
    bucket = ratekeeper.Backend().bucket("b", 1, 60)
    with pytest.raises(RuntimeError, match=r"needs a running event loop"):
        bucket.acheck("k")
    assert bucket.peek("k").remaining == 1


def test_memory_calls_return_completed_futures() -> None:
    # Decided in process: the future is done when returned (awaiting it takes no turn of the
    # loop), its result or exception already set, and it is a real asyncio future of this loop.
    backend = ratekeeper.Backend()
    bucket = backend.bucket("b", 1, 60)

    async def body() -> None:
        loop = asyncio.get_running_loop()
        first, second = bucket.acheck("k"), bucket.acheck("k")
        for f in (first, second):
            assert isinstance(f, asyncio.Future) and f.done() and f.get_loop() is loop
        assert first.result().allowed and not second.result().allowed
        failed = bucket.apoints_used(1, 2, "k")  # not a points limiter: refused in process
        assert failed.done() and isinstance(failed.exception(), ratekeeper.InvalidArgument)
        assert (await bucket.apeek("k")).remaining == 0

    asyncio.run(body())
