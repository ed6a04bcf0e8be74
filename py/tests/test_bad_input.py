"""The shared bad-input table (tests/bad_input/cases.json) through the Python API: every case
raises the table's error class naming the table's Python parameter, and writes nothing.

The same table runs through Node (node/__test__/bad_input.test.js) and C
(tests/bad_input/run_c.c), so the three languages refuse the same mistakes the same way."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import ratekeeper
from ratekeeper import InvalidArgument

TABLE = json.loads((Path(__file__).resolve().parents[2] / "tests" / "bad_input" / "cases.json").read_text())
CASES: list[dict[str, Any]] = TABLE["cases"]
START_US = 1_700_000_000_000_000

# The Python class of each error class of the table.
CLASSES: dict[str, type[Exception]] = {"invalid_argument": InvalidArgument}


class NotExpressible(Exception):
    """The case cannot be written in Python; the reason is reported as the skip reason."""


def value(v: Any) -> Any:
    """Decodes the table's special values (see its `conventions.values`)."""
    if isinstance(v, dict):
        if "number" in v:
            return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[v["number"]]
        if "repeat" in v:
            return v["repeat"] * v["times"]
        if "lone_surrogate" in v:
            return v["lone_surrogate"] + "\ud800"
        return {k: value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [value(x) for x in v]
    return v


def tuples(v: Any) -> Any:
    """Lists of lists become lists of tuples (`windows`, `sliding_window`), anything else as is."""
    return [tuple(x) if isinstance(x, list) else x for x in v] if isinstance(v, list) else v


def arguments(case: dict[str, Any]) -> dict[str, Any]:
    if "python" in case.get("skip", {}):
        raise NotExpressible(case["skip"]["python"])
    return {k: value(v) for k, v in case.get("args_python", case["args"]).items()}


def redis_options(a: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in a.items() if k not in ("url", "seeds", "sentinels", "service")}


def fresh_backend() -> ratekeeper.Backend:
    return ratekeeper.Backend.memory(clock=ratekeeper.ManualClock(START_US))


def snapshot(limiter: ratekeeper.Limiter) -> list[tuple[bool, int, float]]:
    """What a peek of the shared key and of key "k" sees: must not change on a refused call."""
    return [(d.allowed, d.remaining, d.retry_after) for d in (limiter.peek(None), limiter.peek("k"))]


def call(case: dict[str, Any]) -> None:
    """Makes the case's call; raises what it raises. Checks afterwards that nothing was written."""
    a = arguments(case)
    name = case["call"]
    if name == "memory":
        ratekeeper.Backend.memory(**a)
    elif name == "redis":
        ratekeeper.Backend.redis(a["url"], **redis_options(a))
    elif name == "cluster":
        ratekeeper.Backend.cluster(a["seeds"], **redis_options(a))
    elif name in ("bucket", "window") and "rate" in a:
        getattr(fresh_backend(), name)(a["name"], a["rate"])
    elif name == "sentinel":
        ratekeeper.Backend.sentinel(a["sentinels"], a["service"], **redis_options(a))
    elif name in ("bucket", "window"):
        getattr(fresh_backend(), name)(a["name"], a["limit"], a["interval"])
    elif name == "windows":
        fresh_backend().windows(a["name"], tuples(a["windows"]))
    elif name == "sliding_window":
        fresh_backend().sliding_window(a["name"], tuples(a["limits"]))
    elif name == "token_bucket":
        fresh_backend().token_bucket(a["name"], a["rate"], a["capacity"])
    elif name == "leaky":
        fresh_backend().leaky(a["name"], a["size"], a["drain"])
    elif name == "points":
        fresh_backend().points(a["name"], a["capacity"], a["refill"])
    elif name == "concurrent":
        fresh_backend().concurrent(**a)
    elif name == "calendar":
        fresh_backend().calendar(**a)
    elif name == "unlimited":
        fresh_backend().unlimited(a["name"])
    elif name == "limiter":
        spec = a["spec"]
        fresh_backend().limiter(a["name"], spec if isinstance(spec, str) else spec)
    elif name in ("set_limit", "clear_limit"):
        backend = fresh_backend()
        try:
            if name == "set_limit":
                backend.set_limit(a["name"], a["spec"], a.get("key"))
            else:
                backend.clear_limit(a["name"], a.get("key"))
        finally:
            assert all(not info.overrides for info in backend.limiters()), "a refused call wrote an override"
    elif name == "backoff":
        ratekeeper.Backoff(**a)
    elif name == "reschedule_in":
        ratekeeper.Backoff().reschedule_in(a["attempt"], a.get("retry_after"))
    elif name == "manual_clock":
        ratekeeper.ManualClock(a["start_us"])
    elif name == "advance":
        ratekeeper.ManualClock(START_US).advance(a["seconds"])
    elif name == "http_middleware":
        http_middleware(a["options"])
    elif name == "check_all":
        check_all(a["parts"])
    else:
        limiter_call(case, name, a)


def check_all(parts: list[dict[str, Any]]) -> None:
    """`Backend.check_all` with each part's limiter built from its spec on one fresh memory
    backend (or, with `other_backend`, on another); nothing may change."""
    backend, other = fresh_backend(), fresh_backend()
    built = [(other if p.get("other_backend") else backend).limiter(f"part{i}", p["limiter"])
             for i, p in enumerate(parts)]
    before = [(d.remaining, d.retry_after) for lim in built for d in [lim.peek("t1")]]
    try:
        backend.check_all([(lim, p.get("key"), p.get("cost", 1)) for lim, p in zip(built, parts)])
    finally:
        after = [(d.remaining, d.retry_after) for lim in built for d in [lim.peek("t1")]]
        assert after == before, "a refused check_all changed a part's state"


# The table's HTTP middleware cases are spelled with Node's option names unless they carry
# `args_python`; the Python names of the same options.
PYTHON_OPTION = {"keyGenerator": "key", "standardHeaders": "headers", "handler": "on_refused",
                 "trustedProxies": "trusted_proxies", "proxyHeader": "proxy_header", "windowMs": "window_ms",
                 "partitionKeySecret": "partition_key_secret"}


def http_middleware(options: dict[str, Any]) -> None:
    """Builds every Python entry point of the HTTP middleware with `options` (a `limiter` given
    as an object is a spec, built on a fresh memory backend); each must refuse them alike."""
    import flask
    from starlette.applications import Starlette

    from ratekeeper.asgi import RateLimitMiddleware
    from ratekeeper.django import ratelimit
    from ratekeeper.fastapi import limit
    from ratekeeper.flask import RateLimiter

    opts = {PYTHON_OPTION.get(k, k): v for k, v in options.items()}
    if isinstance(opts.get("limiter"), dict):
        opts["limiter"] = fresh_backend().limiter("http", opts["limiter"])
    builders = [
        lambda o: RateLimitMiddleware(Starlette(), **o),
        lambda o: limit(**o),
        lambda o: RateLimiter(flask.Flask("bad-input")).limit(**o),
        lambda o: ratelimit(**o),
    ]
    errors = []
    for build in builders:
        try:
            build(dict(opts))
        except InvalidArgument as e:
            errors.append(e)
        except TypeError as e:  # a missing or unknown keyword: Python's own refusal, named the same way
            missing = "limiter" if "limiter" not in opts else next(k for k in opts if f"'{k}'" in str(e))
            errors.append(InvalidArgument(f"invalid argument `{missing}`: {e}", missing))
    assert len(errors) == len(builders), "every entry point refuses the options"
    assert len({e.parameter for e in errors}) == 1, [str(e) for e in errors]
    raise errors[0]


def settle_decision(case: dict[str, Any], limiter: Any, which: Any) -> Any:
    """The decision a settle case passes (see the table's `conventions.settle`)."""
    if which == "check":
        return limiter.check(None, 0)
    if which == "peek":
        return limiter.peek(None)
    if which == "other_limiter":
        return fresh_backend().limiter("bad-input-other", case["limiter"]).check(None, 0)
    if isinstance(which, dict):
        return which["value"]
    return which


def limiter_call(case: dict[str, Any], name: str, a: dict[str, Any]) -> None:
    limiter = fresh_backend().limiter("bad-input", case["limiter"])
    before = snapshot(limiter)
    try:
        if name == "check":
            limiter.check(a.get("key"), a.get("cost", 1))
        elif name == "peek":
            limiter.peek(a.get("key"))
        elif name == "acquire":
            limiter.acquire(a.get("key"), a.get("cost", 1), a.get("wait_timeout"))
        elif name == "reset":
            limiter.reset(a.get("key"))
        elif name == "points_used":
            limiter.points_used(a["estimate"], a["actual"], a.get("key"))
        elif name == "pause":
            limiter.pause(a["duration"], a.get("key"))
        elif name == "observe":
            headers = a["headers"]
            pairs = [tuple(h) for h in headers] if isinstance(headers, list) else headers
            options = {"max_pause": a["max_pause"]} if "max_pause" in a else {}
            limiter.observe(a["status"], pairs, a.get("key"), **options)
        elif name == "resume":
            limiter.resume(a.get("key"))
        elif name == "with_max_pause":
            limiter.with_max_pause(a["max_pause"])
        elif name == "block":
            limiter.block(a["duration"], a.get("key"))
        elif name == "unblock":
            limiter.unblock(a.get("key"))
        elif name == "with_block_for":
            limiter.with_block_for(a["block_for"])
        elif name == "with_deny_cache":
            limiter.with_deny_cache(a["on"])
        elif name == "within_limit":
            options = {k: a[k] for k in ("policy", "wait_timeout") if k in a}
            with limiter.within_limit(a.get("key"), a.get("cost", 1), **options):
                pass
        elif name == "with_wait_timeout":
            limiter.with_wait_timeout(a["wait_timeout"])
        elif name == "settle":
            limiter.settle(settle_decision(case, limiter, a["decision"]), a["actual"])
        elif name == "with_shadow":
            limiter.with_shadow(a["shadow"])
        else:
            raise AssertionError(f"the table names a call this runner does not know: {name}")
    finally:
        assert snapshot(limiter) == before, "a refused call changed the limiter's state"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_bad_input(case: dict[str, Any]) -> None:
    try:
        arguments(case)
    except NotExpressible as why:
        pytest.skip(f"not expressible in Python: {why}")
    expected = CLASSES[case["error"]]
    parameter = case["parameter"]["python"]
    with pytest.raises(expected) as raised:
        call(case)
    assert raised.value.parameter == parameter, str(raised.value)
    assert f"`{parameter}`" in str(raised.value), str(raised.value)


def test_every_case_names_a_parameter_in_every_language() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "case names are unique"
    for case in CASES:
        assert set(case["parameter"]) == {"python", "node", "c", "go"}, case["name"]
        assert case["error"] in CLASSES, case["name"]
