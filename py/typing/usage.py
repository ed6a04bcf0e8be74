"""A typed tour of the public API, checked with `mypy --strict` by scripts/test-python (never
run): if a stub drifts from what users write, this file stops type-checking."""

from __future__ import annotations

import asyncio

import ratekeeper
from ratekeeper import Backend, CombinedDecision, Decision, Lease, Limiter, ManualClock, Metrics, Permit


def sync_api(backend: Backend) -> None:
    api: Limiter = backend.token_bucket("stripe", 10.0, 20)
    d: Decision = api.check("user-42", cost=2)
    allowed: bool = d.allowed
    retry: float = d.retry_after + d.reset_after + d.decided_at
    exact: int = d.retry_after_us + d.reset_after_us + d.decided_at_us + d.limit + d.remaining
    headers: dict[str, str] = d.headers()
    assert allowed and retry >= 0 and exact >= 0 and headers
    api.peek()
    api.reset("user-42")
    api.points_used(5, 3, "user-42")
    settled: Decision = api.settle(d, 1)
    assert settled.remaining >= 0

    ingest: Limiter = backend.partitions("ingest", 100.0, 20, lease_ttl=15, reserved=2, priority=False)
    partitions_held: list[tuple[int, int]] = ingest.partitions_held()
    assert len(partitions_held) >= 0
    ingest.close()

    erp = backend.concurrent("erp", 50, lock_timeout=30, wait_timeout=5)
    got = erp.acquire("tenant-3", wait_timeout=1.5)
    lease: Lease | None = got.lease
    if lease is not None:
        token: int = lease.fencing_token
        erp.extend(lease)
        erp.release(lease)
        assert token > 0
    m: Metrics = erp.metrics()
    fleet: Metrics = erp.fleet_metrics()
    held: int = m.held + fleet.overages
    wait: float = m.wait_time
    assert held >= 0 and wait >= 0

    w = backend.windows("api", [(25, 5), (300, "minute")])
    for status in w.check().limits or []:
        window: float = status.window
        assert window > 0
    backend.sliding_window("s", [(10.0, 5, 1.0), (60, 100)])
    backend.bucket("b", 5, "second")
    backend.window("w", 5, 1.5)
    backend.leaky("l", 10, 60)
    backend.points("p", 1000, 20)
    backend.unlimited("admin")
    ratekeeper.unlimited().check()


def rewrap(erp: Limiter) -> Limiter:
    # Another handle on the same limiter, typed as the class it is made through.
    return Limiter(erp)


def within_limit(erp: Limiter) -> None:
    with erp.within_limit("tenant") as permit:
        p: Permit = permit
        assert p.allowed and p.decision is not None

    @erp.within_limit("tenant")
    def job(x: int) -> str:
        return str(x)

    s: str = job(1)

    @erp.within_limit("tenant", policy="ignore")
    def optional(x: int) -> str:
        return str(x)

    maybe: str | None = optional(2)

    @erp.within_limit("tenant", cost=1, wait_timeout=2)
    async def ajob(x: int) -> int:
        return x

    async def use() -> None:
        n: int = await ajob(3)
        async with erp.within_limit("tenant") as permit:
            d: Decision | None = permit.decision
            assert n and d
        dec: Decision = await erp.acheck("k")
        settled_later: Decision = await erp.asettle(dec, 2)
        assert settled_later.limit >= 0
        fut: asyncio.Future[Decision] = erp.aacquire("k", 1, 2.0)
        await fut
        await erp.arelease(Lease(1, 2, 3, "k"))
        await erp.areset("k")
        assert dec

    assert s and maybe


def several_limits_at_once(backend: Backend) -> None:
    rate = backend.limiter("rate", {"kind": "token_bucket", "rate": 1, "capacity": 5, "colocate": "tenant"})
    quota = backend.limiter("quota", {"kind": "bucket", "limit": 100, "interval": 86400, "colocate": "tenant"})
    combined: CombinedDecision = backend.check_all([(rate, "acme:u1", 2), (quota, "acme", 2)])
    allowed: bool = combined.allowed
    retry: float = combined.retry_after
    parts: list[Decision] = combined.parts
    combined.release()
    waited: CombinedDecision = backend.acquire_all([(rate, "acme:u1", 1), (quota, "acme", 1)], wait_timeout=2.0)

    async def use() -> None:
        got: CombinedDecision = await backend.acheck_all([(rate, None, 1)])
        await backend.aacquire_all([(rate, "acme:u2", 1)], 1.0)
        await got.arelease()

    assert allowed and retry >= 0 and parts and waited


def backends(clock: ManualClock) -> list[Backend]:
    clock.advance(1.5)
    clock.advance_us(10)
    now: int = clock.now_us
    assert now
    return [
        Backend(),
        Backend.memory(max_keys=1000, clock=clock),
        Backend.redis("redis://127.0.0.1:6380", prefix="app", failure_policy="fallback", fallback_divisor=4,
                      deadline=0.1, connect_timeout=0.5, clock=clock),
        Backend.redis("rediss://127.0.0.1:6380", tls_ca_file="/etc/ca.pem"),
        Backend.cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], failure_policy="fail_open"),
    ]


def errors_and_shedders(backend: Backend) -> None:
    try:
        backend.bucket("b", 1, 1).acquire()
    except ratekeeper.OverLimit as e:
        after: float = e.retry_after
        assert after
    except ratekeeper.InvalidArgument as e:
        name: str = e.parameter
        assert name
    except ratekeeper.RatekeeperError:
        pass
    fleet = ratekeeper.FleetShedder(backend, "fleet", 200, 60)
    ticket = fleet.enter(critical=False)
    fleet.leave(ticket)
    config = ratekeeper.UtilizationConfig(end_of_good=0.6, levels=4)
    shedder = ratekeeper.UtilizationShedder(config, clock=ManualClock(0))
    shedder.observe(0.9)
    chance: float = shedder.drop_chance(2)
    shedder.check(1)
    assert chance >= 0


class _Response:
    status_code: int = 429
    headers: dict[str, str] = {"Retry-After": "3"}


def upstream_feedback(limiter: Limiter) -> None:
    in_effect: float = limiter.pause(3.0, "stripe")
    asked: float | None = limiter.observe(429, {"Retry-After": "3"}, "stripe")
    pairs: float | None = limiter.observe(503, [("Retry-After", "3")])
    from_response: float | None = limiter.observe_response(_Response(), key="stripe")
    assert in_effect and asked and pairs and from_response

    async def use() -> None:
        later: float = await limiter.apause(1)
        seen: float | None = await limiter.aobserve(429, {"retry-after": "1"})
        seen_response: float | None = await limiter.aobserve_response(_Response())
        assert later and seen and seen_response


def workers(backend: Backend) -> None:
    from ratekeeper import Backoff
    from ratekeeper.jobs import current_decision

    policy = Backoff(base=60, jitter=30, max_reschedules=5, delay=lambda attempt: 10.0 * attempt, seed=1)
    delay: float | None = policy.reschedule_in(1, 2.5)
    limit: int = policy.max_reschedules
    decision: Decision | None = current_decision()
    assert delay is None or delay >= 0 and limit >= 0 and decision is None
    Backoff(delay=lambda attempt: "soon")  # type: ignore[arg-type, return-value]
