"""Shadow mode from Python: the `shadow` option (spec field and `with_shadow`), decisions marked
`shadow_refused`, acquire that never waits, within_limit that runs its block, metrics, live
overrides switching it, and the HTTP middleware's one rule (a request let through although a
limit refused it) on memory, a real redis-server and a 3-master Cluster. The decisions' figures
are in tests/vectors/shadow.json."""

from __future__ import annotations

import asyncio
import time

import pytest

import ratekeeper
from ratekeeper import InvalidArgument
from ratekeeper._http import Policy

from .conftest import Calls, MakeBackend

HOUR = 3600.0


def test_the_shadow_option_is_a_field_of_every_spec(make_backend: MakeBackend) -> None:
    backend = make_backend()
    limiter = backend.limiter("s", {"kind": "leaky", "size": 1, "drain": HOUR, "shadow": True})
    assert limiter.shadow and limiter.spec == {"kind": "leaky", "size": 1, "drain": 3600, "shadow": True}
    enforcing = limiter.with_shadow(False)
    assert not enforcing.shadow and "shadow" not in enforcing.spec, "printed only when true"
    assert backend.token_bucket("t", 1.0, 2).with_shadow(True).spec_json.endswith('"shadow":true}')


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_a_bad_shadow_is_refused_naming_it(bad: object) -> None:
    backend = ratekeeper.Backend.memory()
    with pytest.raises(InvalidArgument) as e:
        backend.leaky("s", 1, HOUR).with_shadow(bad)  # type: ignore[arg-type]
    assert e.value.parameter == "shadow"
    if bad is None:
        return  # in a spec, null is the field left out, as for every field
    with pytest.raises(InvalidArgument) as e:
        backend.limiter("s", {"kind": "leaky", "size": 1, "drain": HOUR, "shadow": bad})
    assert e.value.parameter == "shadow"


def test_a_shadow_limiter_admits_what_it_would_refuse(make_backend: MakeBackend, calls: Calls) -> None:
    async def body() -> None:
        limiter = make_backend().leaky("jobs", 1, HOUR).with_shadow(True)
        first = await calls(limiter.check, "k")
        assert isinstance(first, ratekeeper.Decision) and first and not first.shadow_refused
        started = time.monotonic()
        second = await calls(limiter.acquire, "k", wait_timeout=HOUR)
        assert time.monotonic() - started < HOUR / 2, "acquire never waits in shadow mode"
        assert isinstance(second, ratekeeper.Decision)
        assert second.allowed and second.shadow_refused and bool(second)
        assert 0 < second.retry_after <= HOUR, "retry_after says what enforcement would have said"
        assert "shadow_refused=True" in repr(second)
        assert "Retry-After" not in second.headers(), "an admitted call sends no Retry-After"
        m = limiter.metrics()
        assert (m.allowed, m.refused, m.shadow_refused) == (1, 0, 1)
        assert not (await calls(limiter.with_shadow(False).check, "k")).allowed  # type: ignore[attr-defined]

    asyncio.run(body())


def test_within_limit_runs_the_block_of_a_would_be_refusal() -> None:
    slots = ratekeeper.Backend.memory().concurrent("slots", 1).with_shadow(True)
    held = slots.check("k")
    assert held.lease is not None
    ran = []
    with slots.within_limit("k") as permit:
        ran.append(permit.decision)
    assert ran[0].shadow_refused and ran[0].lease is None, "no lease: nothing to release"
    enforcing = slots.with_shadow(False)
    assert not enforcing.check("k"), "only the real lease holds the slot"
    slots.release(held.lease)
    assert enforcing.check("k").lease is not None
    assert slots.metrics().shadow_refused == 1


def test_an_override_switches_shadow_in_another_process(make_backend: MakeBackend) -> None:
    if make_backend().kind == "memory":
        pytest.skip("one process: tests/shadow.rs covers memory overrides")
    # Two backends on one prefix stand for two processes.
    prefix = f"shadow-{time.monotonic_ns()}"
    ops, worker = make_backend(prefix=prefix), make_backend(prefix=prefix)
    api = worker.leaky("api", 1, HOUR)
    assert api.check("k") and not api.check("k")
    ops.set_limit("api", {"kind": "leaky", "size": 1, "drain": HOUR, "shadow": True}, key="k")
    deadline = time.monotonic() + 20
    while not api.check("k").shadow_refused:
        assert time.monotonic() < deadline, "the override never reached the worker"
        time.sleep(0.01)
    assert not api.check("other").shadow_refused
    worker.flush()
    [info] = [i for i in ops.limiters() if i.name == "api"]
    assert info.overrides == [("k", {"kind": "leaky", "size": 1, "drain": 3600, "shadow": True})]
    fleet = {name: m for name, _, m in ops.metrics(fleet=True)}
    assert fleet["api"].shadow_refused >= 1
    from prometheus_client.parser import text_string_to_metric_families

    samples = [
        s for f in text_string_to_metric_families(ops.prometheus(fleet=True)) for s in f.samples
        if s.name == "ratekeeper_checks_total" and s.labels.get("limiter") == "api"
    ]
    by_outcome = {s.labels["outcome"]: s.value for s in samples}
    assert by_outcome["shadow_refused"] == fleet["api"].shadow_refused


def policy(limiter: ratekeeper.Limiter, **options: object) -> Policy[str]:
    defaults: dict[str, object] = dict(
        key=None, cost=1, skip=None, count="all", headers="draft-7", on_refused=None, shadow=False,
        trusted_proxies=None, peer=lambda request: "192.0.2.1", header=lambda request, name: None,
    )
    return Policy(limiter, **{**defaults, **options})  # type: ignore[arg-type]


def test_the_middleware_counts_a_limiters_shadow_refusals_and_never_refuses() -> None:
    backend = ratekeeper.Backend.memory()
    p = policy(backend.window("new", 1, HOUR).with_shadow(True))
    admissions = [p.admit("GET /") for _ in range(3)]
    assert all(a is not None and not a.refused for a in admissions)
    assert p.shadow_refused == 2, "one rule: a request let through although a limit refused it"
    # The middleware's own shadow option counts by the same rule.
    q = policy(backend.window("old", 1, HOUR), shadow=True)
    assert [not a.refused for a in (q.admit("GET /"), q.admit("GET /")) if a is not None] == [True, True]
    assert q.shadow_refused == 1


def test_a_settle_never_refunds_what_a_shadow_refusal_did_not_take() -> None:
    backend = ratekeeper.Backend.memory()
    bucket = backend.token_bucket("login", 0.0001, 2).with_shadow(True)
    p = policy(bucket, count="successes")
    for _ in range(2):
        a = p.admit("POST /login")
        assert a is not None
        a.settle(200)
    refused = p.admit("POST /login")
    assert refused is not None and refused.outcomes[0].decision.shadow_refused  # type: ignore[union-attr]
    refused.settle(401)  # not counted: a refund, but this call took nothing
    assert bucket.peek("192.0.2.1").remaining == 0, "the two admitted calls are still charged"
