"""Every bad argument raises InvalidArgument (a RatekeeperError and a ValueError) naming it, as
Python spells it — wrong types included — and nothing is written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

B = ratekeeper.Backend()
TB = B.token_bucket("tb", 10, 5)
ERP = B.concurrent("erp", 2)
LEASE = ratekeeper.Lease(1, 1, 1)

CASES: list[tuple[str, Callable[[], Any]]] = [
    ("name", lambda: B.bucket("has space", 1, 1)),
    ("name", lambda: B.bucket("", 1, 1)),
    ("name", lambda: B.bucket("x" * 129, 1, 1)),
    ("name", lambda: B.bucket(42, 1, 1)),  # type: ignore[arg-type]
    ("limit", lambda: B.bucket("b", 0, 1)),
    ("limit", lambda: B.bucket("b", -1, 1)),
    ("limit", lambda: B.bucket("b", 1.5, 1)),
    ("limit", lambda: B.bucket("b", 2**53 + 1, 1)),
    ("limit", lambda: B.bucket("b", float("nan"), 1)),
    ("limit", lambda: B.bucket("b", "5", 1)),  # type: ignore[arg-type]
    ("limit", lambda: B.bucket("b", True, 1)),
    ("interval", lambda: B.bucket("b", 1, 0)),
    ("interval", lambda: B.bucket("b", 1, "fortnight")),
    ("interval", lambda: B.window("w", 1, float("inf"))),
    ("interval", lambda: B.window("w", 1, None)),  # type: ignore[arg-type]
    ("limit", lambda: B.concurrent("c", 0)),
    ("lock_timeout", lambda: B.concurrent("c", 1, lock_timeout=-1)),
    ("wait_timeout", lambda: B.concurrent("c", 1, wait_timeout=-1)),
    ("windows", lambda: B.windows("w", [])),
    ("windows", lambda: B.windows("w", [(1,)])),  # type: ignore[list-item]
    ("rate", lambda: B.windows("w", "25 windows")),  # a str is a rate string ("25/5s")
    ("windows", lambda: B.windows("w", 25)),  # type: ignore[arg-type]
    ("interval", lambda: B.windows("w", [(5, 1), (10, -1)])),
    ("limits", lambda: B.sliding_window("s", [])),
    ("limits", lambda: B.sliding_window("s", [(1, 2, 3, 4)])),  # type: ignore[list-item]
    ("duration", lambda: B.sliding_window("s", [(0, 5)])),
    ("precision", lambda: B.sliding_window("s", [(10, 5, 1e-6)])),
    ("rate", lambda: B.token_bucket("t", 0, 5)),
    ("rate", lambda: B.token_bucket("t", 2e6, 5)),
    ("rate", lambda: B.token_bucket("t", "fast", 5)),  # type: ignore[arg-type]
    ("capacity", lambda: B.token_bucket("t", 1, 0)),
    ("size", lambda: B.leaky("l", 0, 1)),
    ("drain", lambda: B.leaky("l", 1, 0)),
    ("capacity", lambda: B.points("p", 0, 1)),
    ("refill", lambda: B.points("p", 1, -5)),
    ("key", lambda: TB.check("k" * 1025)),
    ("key", lambda: TB.check(7)),  # type: ignore[arg-type]
    ("cost", lambda: TB.check("k", -1)),
    ("cost", lambda: TB.check("k", 1.5)),
    ("cost", lambda: TB.check("k", 6)),  # above the capacity: could never be admitted
    ("cost", lambda: TB.check("k", "1")),  # type: ignore[arg-type]
    ("key", lambda: TB.peek(b"bytes")),  # type: ignore[arg-type]
    # Strings that are not Unicode scalar values (lone surrogates) are refused, never mangled.
    ("key", lambda: TB.check("user-\ud800")),
    ("key", lambda: TB.peek("\udc00")),
    ("key", lambda: TB.acquire("a\ud83d", 1)),
    ("key", lambda: TB.reset("\ud800")),
    ("key", lambda: TB.points_used(1, 1, "\ud800")),
    ("key", lambda: TB.within_limit("\ud800")),
    ("key", lambda: ERP.release(LEASE, "\ud800")),
    ("name", lambda: B.bucket("b\ud800", 1, 1)),
    ("wait_timeout", lambda: TB.acquire("k", 1, -0.5)),
    ("estimate", lambda: TB.points_used(-1, 1)),
    ("actual", lambda: TB.points_used(1, 2**53 + 1)),  # above capacity is charged; above 2^53 is refused
    ("lease", lambda: TB.release(LEASE)),
    ("policy", lambda: TB.within_limit(policy="sometimes")),  # type: ignore[call-overload]
    ("cost", lambda: TB.within_limit("k", -2)),
    ("wait_timeout", lambda: TB.within_limit("k", wait_timeout=float("nan"))),
    ("url", lambda: ratekeeper.Backend.redis("http://127.0.0.1:1")),
    ("url", lambda: ratekeeper.Backend.redis(None)),  # type: ignore[arg-type]
    ("seeds", lambda: ratekeeper.Backend.cluster([])),
    ("seeds", lambda: ratekeeper.Backend.cluster("redis://127.0.0.1:1")),
    ("prefix", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", prefix="")),
    ("failure_policy", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", failure_policy="maybe")),  # type: ignore[arg-type]
    ("fallback_divisor", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", failure_policy="fallback", fallback_divisor=0)),
    ("fallback_divisor", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", fallback_divisor=2)),
    ("allow_fallback", lambda: ratekeeper.Backend.memory().concurrent("m", 1, allow_fallback=1)),  # type: ignore[arg-type]
    ("deadline", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", deadline=0)),
    ("connect_timeout", lambda: ratekeeper.Backend.redis("redis://127.0.0.1:1", connect_timeout=-1)),
    ("tls_ca_file", lambda: ratekeeper.Backend.redis("rediss://127.0.0.1:1", tls_ca_file="/nonexistent/ca.pem")),
    ("tls_ca_data", lambda: ratekeeper.Backend.redis("rediss://127.0.0.1:1", tls_ca_data=5)),  # type: ignore[arg-type]
    ("tls_key_file", lambda: ratekeeper.Backend.redis("rediss://127.0.0.1:1", tls_cert_file="/tmp/c.pem")),
    ("clock", lambda: ratekeeper.Backend.memory(clock=12345)),  # type: ignore[arg-type]
    ("max_keys", lambda: ratekeeper.Backend.memory(max_keys=0)),
    ("start_us", lambda: ratekeeper.ManualClock(-1)),
    ("seconds", lambda: ratekeeper.ManualClock(0).advance(-1)),
    ("micros", lambda: ratekeeper.ManualClock(0).advance_us(1.5)),  # type: ignore[arg-type]
    ("id", lambda: ratekeeper.Lease(-1, 1, 1)),
    ("fencing_token", lambda: ratekeeper.Lease(1, 2**64, 1)),
    ("utilization", lambda: ratekeeper.UtilizationShedder().observe(1.5)),
    ("priority", lambda: ratekeeper.UtilizationShedder().check(4)),
    ("priority", lambda: ratekeeper.UtilizationShedder().drop_chance(-1)),
    ("end_of_good", lambda: ratekeeper.UtilizationConfig(end_of_good=2)),
    ("start_of_bad", lambda: ratekeeper.UtilizationConfig(end_of_good=0.9, start_of_bad=0.8)),
    ("seconds_to_shed_all", lambda: ratekeeper.UtilizationConfig(seconds_to_shed_all=0)),
    ("levels", lambda: ratekeeper.UtilizationConfig(levels=0)),
    ("limit", lambda: ratekeeper.FleetShedder(B, "fleet", 0)),
]


@pytest.mark.parametrize(("parameter", "call"), CASES, ids=[f"{i}-{p}" for i, (p, _) in enumerate(CASES)])
def test_bad_argument_names_the_parameter(parameter: str, call: Callable[[], Any]) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert raised.value.parameter == parameter, str(raised.value)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, ratekeeper.RatekeeperError)
    assert parameter in str(raised.value)


def test_async_forms_validate_too() -> None:
    async def body() -> None:
        with pytest.raises(InvalidArgument) as raised:
            await TB.acheck("k", -1)
        assert raised.value.parameter == "cost"
        with pytest.raises(InvalidArgument) as raised:
            await TB.apeek(3)  # type: ignore[arg-type]
        assert raised.value.parameter == "key"
        with pytest.raises(InvalidArgument) as raised:
            await ERP.aacquire("k", 1, -1)
        assert raised.value.parameter == "wait_timeout"
        with pytest.raises(InvalidArgument) as raised:
            await TB.acheck("\ud800")
        assert raised.value.parameter == "key"

    asyncio.run(body())


def test_bad_input_writes_nothing() -> None:
    tb = ratekeeper.Backend().token_bucket("t", 1, 3)
    with pytest.raises(InvalidArgument):
        tb.check("k", 4)
    assert tb.peek("k").remaining == 3


def test_lone_surrogates_never_share_state_with_a_replacement_character() -> None:
    tb = ratekeeper.Backend().token_bucket("t", 1, 1)
    assert tb.check("x\ufffd").allowed
    with pytest.raises(InvalidArgument):
        tb.check("x\ud800")
    assert tb.peek("x\ufffd").remaining == 0


def test_a_permit_reports_points_used_once() -> None:
    points = ratekeeper.Backend().points("p", 10, 10)
    with points.within_limit("k", 4) as permit:
        with pytest.raises(InvalidArgument):
            permit.points_used(-1)  # refused before anything was written: the report is still due
        assert permit.points_used(1).remaining == 9
        with pytest.raises(InvalidArgument) as raised:
            permit.points_used(1)
        assert raised.value.parameter == "actual"
    assert points.peek("k").remaining == 9  # refunded once
    with points.within_limit("k", 2) as permit:
        d = permit.points_used(25)  # above capacity: charged as debt, not refused
        assert not d.allowed and d.retry_after == pytest.approx(17.0, abs=0.5)  # 26 points owed: a call of 1 waits 17 s
