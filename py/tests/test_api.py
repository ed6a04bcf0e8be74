"""The Python API over every backend, each test run with the sync methods and their asyncio
forms (mirrored through the ``calls`` fixture)."""

from __future__ import annotations

import asyncio
import math
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

import ratekeeper
from ratekeeper import Decision

from .conftest import Calls, MakeBackend

T0 = 1_700_000_000_000_000  # a manual clock's start, in microseconds


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_check_peek_reset(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        tb = make_backend(clock=clock).token_bucket("api", 10, 5)
        d: Any = await calls(tb.check, "user-1", 2)
        assert isinstance(d, Decision)
        assert (d.allowed, d.limit, d.remaining, d.retry_after, d.reset_after) == (True, 5, 3, 0.0, 0.2)
        assert d.decided_at_us == T0 and d.decided_at == T0 / 1e6 and d.lease is None and d.limits is None
        assert bool(d)
        d = await calls(tb.check, "user-1", 4)  # refused: consumes nothing
        assert not d.allowed and d.remaining == 3 and math.isclose(d.retry_after, 0.1) and not d
        d = await calls(tb.peek, "user-1")
        assert d.allowed and d.remaining == 3
        assert (await calls(tb.peek, "user-2")).remaining == 5  # keys are independent
        assert await calls(tb.reset, "user-1") is None
        assert (await calls(tb.peek, "user-1")).remaining == 5
        clock.advance(0.05)
        assert (await calls(tb.check)).decided_at_us == T0 + 50_000  # no key: the shared key

    run(body())


def test_headers() -> None:
    clock = ratekeeper.ManualClock(T0)
    w = ratekeeper.Backend.memory(clock=clock).window("w", 2, 10)
    w.check()
    clock.advance(0.25)
    d = w.check()
    # Issue 46: draft-11 by default, as the HTTP middleware writes them (it was draft-6).
    assert d.headers() == {"RateLimit-Policy": '"default";q=2', "RateLimit": '"default";r=0;t=10'}
    assert d.headers(policy="w")["RateLimit"] == '"w";r=0;t=10'
    assert d.headers("draft-6") == {"RateLimit-Limit": "2", "RateLimit-Remaining": "0", "RateLimit-Reset": "10"}
    clock.advance(0.5)
    refused = w.check()
    assert refused.retry_after == pytest.approx(9.25)
    assert refused.headers(form="draft-6") == {
        "RateLimit-Limit": "2",
        "RateLimit-Remaining": "0",
        "RateLimit-Reset": "10",  # 9.5 s, rounded up
        "Retry-After": "10",  # 9.25 s, rounded up
    }
    assert refused.headers()["Retry-After"] == "10"
    with pytest.raises(ratekeeper.InvalidArgument) as caught:
        refused.headers("draft-99")
    assert caught.value.parameter == "form"


def test_multi_window_limits(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        w = make_backend(clock=clock).windows("two", [(2, 1), (3, "minute")])
        for _ in range(2):
            assert (await calls(w.check)).allowed
        d: Any = await calls(w.check)
        assert not d.allowed and d.limits is not None
        assert [(s.window, s.limit, s.remaining) for s in d.limits] == [(1.0, 2, 0), (60.0, 3, 1)]
        clock.advance(1)
        d = await calls(w.check)
        assert d.allowed and d.limit == 3 and d.remaining == 0  # the binding limit is the 60 s one
        s = ratekeeper.Backend.memory(clock=clock).sliding_window("s", [(10, 5, 1), (60, 20)])
        assert [x.limit for x in s.check().limits or []] == [5, 20]

    run(body())


def test_concurrent_leases(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        erp = make_backend(clock=clock).concurrent("erp", 2, lock_timeout=30, wait_timeout=0)
        a: Any = await calls(erp.acquire, "tenant")
        b: Any = await calls(erp.check, "tenant")
        assert a.lease is not None and b.lease is not None
        assert b.lease.fencing_token > a.lease.fencing_token and a.lease.key == "tenant"
        with pytest.raises(ratekeeper.OverLimit) as over:
            await calls(erp.acquire, "tenant")
        assert over.value.retry_after == pytest.approx(30)
        assert await calls(erp.extend, a.lease) is None
        assert await calls(erp.release, a.lease) is None  # the key comes from the lease
        with pytest.raises(ratekeeper.LeaseLost):
            await calls(erp.release, a.lease)
        # A lease rebuilt from its parts (as another process would) releases too.
        rebuilt = ratekeeper.Lease(b.lease.id, b.lease.fencing_token, b.lease.granted_at_us, "tenant")
        assert rebuilt == b.lease and hash(rebuilt) == hash(b.lease)
        await calls(erp.release, rebuilt)
        m: Any = await calls(erp.fleet_metrics)
        assert m.held == 2 and m.immediate == 2 and erp.metrics().held == 2

    run(body())


def test_points_used(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        clock = ratekeeper.ManualClock(T0)
        gql = make_backend(clock=clock).points("shopify", 1000, 20)
        assert (await calls(gql.check, "shop", 200)).remaining == 800
        d: Any = await calls(gql.points_used, 200, 50, "shop")  # refunds 150
        assert d.remaining == 950

    run(body())


def test_unlimited(calls: Calls) -> None:
    async def body() -> None:
        for lim in (ratekeeper.unlimited(), ratekeeper.Backend().unlimited("admin")):
            d: Any = await calls(lim.check, "x", 10**15)
            assert d.allowed and d.limit == 2**53 and d.remaining == 2**53 and d.decided_at == 0.0

    run(body())


def test_every_constructor_returns_the_public_limiter_class() -> None:
    # The native class is `NativeLimiter`; users only ever see its subclass `ratekeeper.Limiter`
    # (with `within_limit`), whose name the stub no longer has to alias (`Limiter as Limiter2`).
    from ratekeeper import _ratekeeper

    b = ratekeeper.Backend()
    made = [
        b.bucket("b", 1, 1),
        b.limiter("s", {"kind": "token_bucket", "rate": 1, "capacity": 1}),
        b.unlimited("u"),
        ratekeeper.unlimited(),
        b.concurrent("c", 1).with_wait_timeout(0),
    ]
    for limiter in made:
        assert type(limiter) is ratekeeper.Limiter and isinstance(limiter, _ratekeeper.NativeLimiter)
        assert callable(limiter.within_limit)
    assert not hasattr(_ratekeeper, "Limiter")
    stub = (Path(_ratekeeper.__file__).parent / "_ratekeeper.pyi").read_text(encoding="utf-8")
    assert re.search(r"^from ratekeeper\._limiter import Limiter$", stub, re.M), "the stub imports Limiter plainly"
    assert not re.search(r"import .* as ", stub), "the stub aliases no import"


def test_limiter_is_made_by_its_class() -> None:
    # Constructors make `ratekeeper.Limiter` through the class (its `__new__` takes a limiter
    # and gives another handle on it), so a subclass wraps a limiter the same way.
    b = ratekeeper.Backend()
    bucket = b.bucket("b", 2, 60)

    class Audited(ratekeeper.Limiter):
        __slots__ = ()

        def check_twice(self, key: str) -> bool:
            return bool(self.check(key)) and bool(self.check(key))

    audited = Audited(bucket)
    assert type(audited) is Audited and isinstance(audited, ratekeeper.Limiter)
    assert audited.check_twice("k") and not bucket.check("k"), "the same state"
    again = ratekeeper.Limiter(bucket)
    assert type(again) is ratekeeper.Limiter and again.peek("k").remaining == 0
    assert (again.name, again.kind) == ("b", "bucket")
    with pytest.raises(TypeError):
        ratekeeper.Limiter("not a limiter")  # type: ignore[arg-type]


def test_redis_and_cluster_take_the_same_options() -> None:
    # One options type behind both constructors: the same keyword arguments, the same errors
    # naming them (a path option by its own name), None the same as leaving one out.
    options: dict[str, Any] = {"prefix": "p", "deadline": 0.5, "failure_policy": None, "clock": None}
    assert ratekeeper.Backend.redis("redis://127.0.0.1:1", **options).kind == "redis"
    assert ratekeeper.Backend.cluster(["redis://127.0.0.1:1"], **options).kind == "cluster"
    makers: list[Any] = [
        lambda **kw: ratekeeper.Backend.redis("rediss://127.0.0.1:1", **kw),
        lambda **kw: ratekeeper.Backend.cluster(["rediss://127.0.0.1:1"], **kw),
    ]
    for make in makers:
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'deadlin'"):
            make(deadlin=1)
        for bad, parameter in [
            ({"deadline": -1}, "deadline"),
            ({"fallback_divisor": 2}, "fallback_divisor"),
            ({"tls_ca_file": 5}, "tls_ca_file"),
            ({"tls_cert_file": 5, "tls_key_file": "k.pem"}, "tls_cert_file"),
            ({"tls_cert_file": "c.pem", "tls_key_file": 5}, "tls_key_file"),
        ]:
            with pytest.raises(ratekeeper.InvalidArgument) as e:
                make(**bad)
            assert e.value.parameter == parameter, bad
    with pytest.raises(TypeError):
        ratekeeper.Backend.redis("redis://127.0.0.1:1", "p")  # type: ignore[misc]


def test_limiter_properties() -> None:
    b = ratekeeper.Backend()
    c = b.concurrent("erp", 3, wait_timeout=2.5)
    assert (c.name, c.kind, c.wait_timeout) == ("erp", "concurrent", 2.5)
    assert isinstance(c, ratekeeper.Limiter) and c.with_wait_timeout(0).wait_timeout == 0.0
    assert b.bucket("b", 5, "hour").kind == "bucket" and b.kind == "memory"
    assert repr(b.leaky("l", 10, 60)) == 'Limiter(kind="leaky", name="l")'
    assert b.memory_len() == 0 and b.stats().failed == 0


def test_within_limit_sync() -> None:
    clock = ratekeeper.ManualClock(T0)
    erp = ratekeeper.Backend.memory(clock=clock).concurrent("erp", 1, wait_timeout=0)
    with erp.within_limit("t") as permit:
        assert permit.allowed and permit.decision is not None and permit.decision.lease is not None
        with pytest.raises(ratekeeper.OverLimit):
            with erp.within_limit("t"):
                pass
        with erp.within_limit("t", policy="ignore") as skipped:
            assert not skipped and skipped.decision is None
    assert erp.peek("t").remaining == 1  # released

    ran = []

    @erp.within_limit("t")
    def job(x: int) -> int:
        ran.append(x)
        assert erp.peek("t").remaining == 0
        return x * 2

    assert job(21) == 42 and ran == [21] and job.__name__ == "job"

    @erp.within_limit("t", policy="ignore")
    def optional() -> str:
        return "ran"

    with erp.within_limit("t"):
        assert optional() is None  # skipped: the slot is taken
    assert optional() == "ran"

    # The lease is released when the block raises.
    with pytest.raises(ZeroDivisionError):
        with erp.within_limit("t"):
            1 / 0
    assert erp.peek("t").remaining == 1


def test_within_limit_points_permit() -> None:
    clock = ratekeeper.ManualClock(T0)
    gql = ratekeeper.Backend.memory(clock=clock).points("gql", 100, 10)
    with gql.within_limit("shop", 40) as permit:
        assert permit.points_used(10).remaining == 90


def test_within_limit_async() -> None:
    async def body() -> None:
        erp = ratekeeper.Backend().concurrent("erp", 1, wait_timeout=0)
        async with erp.within_limit("t") as permit:
            assert permit.allowed
            async with erp.within_limit("t", policy="ignore") as skipped:
                assert not skipped.allowed
            with pytest.raises(ratekeeper.OverLimit):
                async with erp.within_limit("t"):
                    pass
        assert (await erp.apeek("t")).remaining == 1

        @erp.within_limit("t")
        async def job(x: int) -> int:
            await asyncio.sleep(0)
            assert (await erp.apeek("t")).remaining == 0
            return x + 1

        assert await job(1) == 2

        @erp.within_limit("t", policy="ignore")
        async def optional() -> int:
            return 7

        async with erp.within_limit("t"):
            assert await optional() is None
        assert await optional() == 7

        gql = ratekeeper.Backend().points("gql", 100, 10)
        async with gql.within_limit("s", 30) as p:
            assert (await p.apoints_used(5)).remaining == 95

    run(body())


def test_acquire_waits_for_a_release(make_backend: MakeBackend, calls: Calls) -> None:
    """A waiter is woken by a release (not by polling, and not by the lock timeout)."""

    async def body() -> None:
        erp = make_backend().concurrent("mutex", 1, lock_timeout=60)
        held: Any = await calls(erp.acquire)

        async def release_soon() -> None:
            await asyncio.sleep(0.2)
            await erp.arelease(held.lease)

        if calls.mode == "async":
            releaser = asyncio.ensure_future(release_soon())
            d: Any = await erp.aacquire(None, 1, 10)
            await releaser
        else:
            import threading

            t = threading.Timer(0.2, erp.release, (held.lease,))
            t.start()
            d = erp.acquire(None, 1, 10)
            t.join()
        assert d.allowed and d.lease.fencing_token > held.lease.fencing_token
        assert erp.metrics().waited == 1

    run(body())


def test_shedders(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        fleet = ratekeeper.FleetShedder(make_backend(), "fleet", 1)
        ticket: Any = await calls(fleet.enter)
        assert ticket is not None
        assert await calls(fleet.enter, True) is None  # critical traffic bypasses
        with pytest.raises(ratekeeper.Shed):
            await calls(fleet.enter)
        await calls(fleet.leave, ticket)
        await calls(fleet.leave, None)
        assert await calls(fleet.enter) is not None

    run(body())


def test_utilization_shedder() -> None:
    clock = ratekeeper.ManualClock(T0)
    config = ratekeeper.UtilizationConfig(seconds_before_shedding=2, seconds_to_shed_all=6, levels=3)
    shed = ratekeeper.UtilizationShedder(config, clock=clock)
    assert config.levels == 3 and config.end_of_good == 0.7
    for _ in range(30):
        shed.observe(1.0)
        clock.advance(1)
    assert shed.shedding() == 1.0 and shed.drop_chance(3) == 1.0 and shed.drop_chance(0) == 0.0
    shed.check(0)  # critical traffic is never shed
    with pytest.raises(ratekeeper.Shed):
        shed.check(3)


def test_exceptions_pickle() -> None:
    over = ratekeeper.OverLimit("over limit", 1.5)
    again = pickle.loads(pickle.dumps(over))
    assert isinstance(again, ratekeeper.OverLimit) and again.retry_after == 1.5 and str(again) == "over limit"
    bad = pickle.loads(pickle.dumps(ratekeeper.InvalidArgument("bad cost", "cost")))
    assert bad.parameter == "cost" and isinstance(bad, ValueError)
    for cls in (ratekeeper.Shed, ratekeeper.LeaseLost, ratekeeper.BackendUnavailable, ratekeeper.Timeout):
        assert issubclass(cls, ratekeeper.RatekeeperError)


def test_failure_policies_on_a_dead_redis(calls: Calls) -> None:
    from .conftest import free_port

    dead = f"redis://127.0.0.1:{free_port()}"

    async def body() -> None:
        closed = ratekeeper.Backend.redis(dead, deadline=0.05, connect_timeout=0.05)
        with pytest.raises((ratekeeper.BackendUnavailable, ratekeeper.Timeout)):
            await calls(closed.bucket("b", 5, 1).check)
        assert closed.stats().failed == 1
        opened = ratekeeper.Backend.redis(dead, failure_policy="fail_open", deadline=0.05)
        assert (await calls(opened.bucket("b", 5, 1).check)).allowed and opened.stats().failed_open == 1
        fallback = ratekeeper.Backend.redis(dead, failure_policy="fallback", fallback_divisor=5, deadline=0.05)
        lim = fallback.bucket("b", 10, 60)
        results = [(await calls(lim.check)).allowed for _ in range(3)]
        assert results == [True, True, False] and fallback.stats().fell_back == 3  # 10 / 5 = 2

    run(body())


def test_concurrent_limiters_fail_closed_on_a_dead_redis_unless_they_allow_fallback(calls: Calls) -> None:
    """A per-process fallback mutex is not a fleet-wide one, and a lease granted open guards
    nothing: concurrent limiters fail closed under every policy unless they opt in."""
    from .conftest import free_port

    dead = f"redis://127.0.0.1:{free_port()}"

    async def body() -> None:
        for policy in ("fail_open", "fallback"):
            backend = ratekeeper.Backend.redis(dead, failure_policy=policy, deadline=0.05, connect_timeout=0.05)
            mutex = backend.concurrent("m", 1, lock_timeout=60)
            assert not mutex.allows_fallback and backend.bucket("b", 5, 1).allows_fallback
            with pytest.raises((ratekeeper.BackendUnavailable, ratekeeper.Timeout)):
                await calls(mutex.check)
            assert backend.stats().failed == 1, policy
            opted = backend.concurrent("m", 1, lock_timeout=60, allow_fallback=True)
            assert opted.allows_fallback
            granted = await calls(opted.check)
            assert granted.allowed and granted.lease is not None, policy
            # fail_open: a lease that guards nothing; fallback: this process's own mutex.
            assert (granted.lease.fencing_token == 0) == (policy == "fail_open"), granted.lease
            if policy == "fallback":
                assert not (await calls(opted.check)).allowed
                await calls(opted.extend, granted.lease)
            await calls(opted.release, granted.lease)

    run(body())


def test_specs_as_data_build_read_back_and_name_bad_fields() -> None:
    backend = ratekeeper.Backend()
    named = [
        backend.token_bucket("tb", 10, 20),
        backend.window("w", 100, 60),
        backend.windows("ws", [(25, 5), (300, 60)]),
        backend.sliding_window("sw", [(60, 100, 1), (1, 10, 0.1)]),
        backend.concurrent("c", 10, lock_timeout=30, wait_timeout=2),
        backend.bucket("b", 5, "minute"),
        backend.leaky("l", 4, 0.5),
        backend.points("p", 1000, 60),
        backend.calendar("cal", 1000, "month", tz="Europe/Berlin", anchor=15),
        backend.unlimited("u"),
    ]
    for limiter in named:
        spec = limiter.spec
        assert spec["kind"] in (limiter.kind, "windows"), spec
        # From a dict and from JSON text: the same canonical spec, the same state.
        from_dict = backend.limiter(limiter.name, spec)
        from_text = backend.limiter(limiter.name, limiter.spec_json)
        assert from_dict.spec == from_text.spec == spec
        assert from_dict.spec_json == limiter.spec_json
    assert backend.limiter("tb", {"kind": "token_bucket", "capacity": 20, "rate": 10.0}).spec_json == (
        '{"kind":"token_bucket","rate":10,"capacity":20}'
    )
    assert named[4].spec == {"kind": "concurrent", "limit": 10, "lock_timeout": 30, "wait_timeout": 2}
    assert backend.limiter("c2", named[4].spec).wait_timeout == 2
    # State is shared with the named limiter of the same name.
    a, b = backend.token_bucket("shared", 1, 2), backend.limiter("shared", {"kind": "token_bucket", "rate": 1, "capacity": 2})
    assert a.check().remaining == 1 and b.check().remaining == 0
    for spec, parameter in [
        ({"kind": "windows", "windows": [[25, 5], [0, 60]]}, "windows[1][0]"),
        ({"kind": "token_bucket", "rate": 1}, "capacity"),
        ({"kind": "token_bucket", "rate": 1, "capacity": 2, "burst": 3}, "burst"),
        ({"kind": "fountain"}, "kind"),
        ('{"kind": ', "spec"),
        ({"kind": "leaky", "size": 1, "drain": float("nan")}, "spec"),
        ([1, 2], "spec"),
    ]:
        with pytest.raises(ratekeeper.InvalidArgument) as raised:
            backend.limiter("bad", spec)  # type: ignore[arg-type]
        assert raised.value.parameter == parameter, (spec, raised.value)
