"""Every option of every Python entry point is validated when it is built (InvalidArgument naming
the option, nothing touched), and the default key: the client address, IPv6 grouped by /56,
proxy headers believed only from trusted proxies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flask
import pytest
from starlette.applications import Starlette

import ratekeeper
from ratekeeper import InvalidArgument
from ratekeeper.asgi import RateLimitMiddleware
from ratekeeper.django import ratelimit
from ratekeeper.fastapi import limit
from ratekeeper.flask import RateLimiter


def build_asgi(**options: Any) -> object:
    return RateLimitMiddleware(Starlette(), **options)


def build_flask(**options: Any) -> object:
    limiter = options.pop("limiter")
    return RateLimiter(flask.Flask("t"), default=limiter, **options)


def build_flask_route(**options: Any) -> object:
    return RateLimiter(flask.Flask("t")).limit(**options)


ENTRY_POINTS: dict[str, Callable[..., object]] = {
    "asgi": build_asgi, "fastapi": limit, "flask": build_flask, "flask.limit": build_flask_route, "django": ratelimit,
}


def limiters() -> dict[str, ratekeeper.Limiter]:
    backend = ratekeeper.Backend.memory(clock=ratekeeper.ManualClock(1_700_000_000_000_000))
    return {"bucket": backend.token_bucket("tb", 1, 5), "window": backend.window("w", 5, 60),
            "concurrent": backend.concurrent("c", 2)}


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("a string limiter", {"limiter": "api"}, "limiter"),
    ("an empty limiter list", {"limiter": []}, "limiter"),
    ("a list holding a string", {"limiter": ["bucket", "api"]}, "limiter"),
    ("cost 0", {"cost": 0}, "cost"),
    ("cost -1", {"cost": -1}, "cost"),
    ("cost a string", {"cost": "1"}, "cost"),
    ("cost True", {"cost": True}, "cost"),
    ("cost above the capacity", {"cost": 6}, "cost"),
    ("count unknown", {"count": "sometimes"}, "count"),
    ("count failures on a concurrent limiter", {"limiter": "concurrent", "count": "failures"}, "count"),
    ("headers draft-8", {"headers": "draft-8"}, "headers"),
    ("headers True", {"headers": True}, "headers"),
    ("shadow a string", {"shadow": "yes"}, "shadow"),
    ("key a string", {"key": "ip"}, "key"),
    ("skip True", {"skip": True}, "skip"),
    ("on_refused 429", {"on_refused": 429}, "on_refused"),
    ("trusted_proxies a lone string", {"trusted_proxies": "10.0.0.0/8"}, "trusted_proxies"),
    ("trusted proxy prefix 33", {"trusted_proxies": ["10.0.0.0/33"]}, "trusted_proxies"),
    ("trusted proxy a host name", {"trusted_proxies": ["proxy.local"]}, "trusted_proxies"),
    ("proxy_header X-Real-IP", {"proxy_header": "X-Real-IP"}, "proxy_header"),
    ("proxy_header None", {"proxy_header": None}, "proxy_header"),
    ("proxy_header a list of both", {"proxy_header": ["X-Forwarded-For", "Forwarded"]}, "proxy_header"),
    ("partition_key_secret of 15 bytes", {"partition_key_secret": b"fifteen-bytes!!"}, "partition_key_secret"),
    ("partition_key_secret a number", {"partition_key_secret": 12345}, "partition_key_secret"),
    ("partition_key_secret with draft-7", {"partition_key_secret": "a-secret-of-at-least-16-bytes",
                                           "headers": "draft-7"}, "partition_key_secret"),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_a_bad_option_is_refused_when_built(entry: str, case: tuple[str, dict[str, Any], str]) -> None:
    _, options, parameter = case
    named = limiters()
    options = {"limiter": named["bucket"], **options}
    if isinstance(options["limiter"], str) and options["limiter"] in named:
        options["limiter"] = named[options["limiter"]]
    if isinstance(options["limiter"], list):
        options["limiter"] = [named.get(x, x) if isinstance(x, str) else x for x in options["limiter"]]
    before = named["bucket"].peek("k").remaining
    with pytest.raises(InvalidArgument) as raised:
        ENTRY_POINTS[entry](**options)
    assert raised.value.parameter == parameter, str(raised.value)
    assert f"`{parameter}`" in str(raised.value)
    assert named["bucket"].peek("k").remaining == before, "nothing was charged"


def test_count_failures_is_allowed_on_every_kind_but_concurrent() -> None:
    named = limiters()
    for kind in ("bucket", "window"):
        for entry in ENTRY_POINTS.values():
            entry(limiter=named[kind], count="failures")


def test_flask_limit_refuses_an_unknown_option_and_a_second_limit() -> None:
    limiter = RateLimiter(flask.Flask("t"))
    named = limiters()
    with pytest.raises(InvalidArgument) as raised:
        limiter.limit(named["bucket"], window_ms=60_000)
    assert raised.value.parameter == "window_ms"
    view = limiter.limit(named["bucket"])(lambda: "ok")
    with pytest.raises(InvalidArgument):
        limiter.limit(named["window"])(view)


# The client key, the header fields and the partition key are the shared rules of
# tests/http/cases.json (test_cases.py).


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_refused_partition_key_secret_is_never_shown(entry: str) -> None:
    limiter = limiters()["bucket"]
    for secret, headers in (("fifteen-bytes!!", "draft-11"), ("a-secret-of-at-least-16-bytes", "draft-6")):
        with pytest.raises(InvalidArgument) as raised:
            ENTRY_POINTS[entry](limiter=limiter, partition_key_secret=secret, headers=headers)
        assert raised.value.parameter == "partition_key_secret"
        assert secret not in str(raised.value) and secret not in repr(raised.value)
    ENTRY_POINTS[entry](limiter=limiter, partition_key_secret=b"a-secret-of-at-least-16-bytes")
