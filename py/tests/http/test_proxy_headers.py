"""A client cannot choose its own rate-limit key behind a trusted proxy (issue #41, items 1-3), on
every Python entry point behind a real server: the Starlette middleware and the FastAPI
dependency on uvicorn (its own proxy handling off, as the guide says), Flask and Django (WSGI)
on gunicorn, Django (ASGI) on uvicorn.

The test client plays a trusted proxy on 127.0.0.1 in front of one client (``CLIENT``), which
sends 10 requests against 2 a minute, varying a header a proxy does not strip:

- ``Forwarded: for=<random>`` beside the proxy's constant ``X-Forwarded-For`` (nginx, ALB and
  HAProxy append to ``X-Forwarded-For`` and pass ``Forwarded`` through);
- its own ``X-Forwarded-For: <random>`` line, followed by the line the proxy adds (HAProxy adds
  a line of its own rather than appending to the client's).

Either way the client is one client: at most 2 of its 10 requests may pass (per minute the run
touched), and its key is the proxy's word, not the client's. The same holds for the documented
example (examples/python/http/behind_proxy.py) behind nginx, an ALB and Cloudflare, and for a
proxy that sets ``Forwarded`` (``proxy_header="Forwarded"``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from ratekeeper import Backend, Limiter

from ..conftest import RedisServer, unique_prefix
from .support import Server, example, gunicorn, options, uvicorn

# The example the docs include (docs/src/guides/http/python.md), served as it is.
EXAMPLE_DIR, EXAMPLE_MODULE = example("examples/python/http/behind_proxy.py")

LIMIT = 2
INTERVAL = 60
REQUESTS = 10
# The client's address as the trusted proxy reports it, one per scenario (one limit, two keys).
CLIENT = {"forwarded": "203.0.113.7", "two-lines": "203.0.113.8"}

SERVERS: dict[str, Callable[[dict[str, str]], Server]] = {
    "starlette middleware on uvicorn": lambda env: uvicorn("starlette_app:app", env=env),
    "fastapi dependency on uvicorn": lambda env: uvicorn("fastapi_app:app", env=env),
    "flask on gunicorn": lambda env: gunicorn("flask_app:app", env=env, workers=1),
    "django wsgi on gunicorn": lambda env: gunicorn("django_app:application", env=env, workers=1),
    "django asgi on uvicorn": lambda env: uvicorn("django_app:asgi", env=env),
}


def spoofed() -> str:
    """A fresh address per request, none of them a trusted proxy."""
    return f"198.18.{random.randrange(256)}.{random.randrange(1, 255)}"


def request_headers(scenario: str) -> list[tuple[str, str]]:
    """One request's header lines as the app receives them from the proxy, in order."""
    if scenario == "forwarded":
        return [("Forwarded", f"for={spoofed()}"), ("X-Forwarded-For", CLIENT[scenario])]
    return [("X-Forwarded-For", spoofed()), ("X-Forwarded-For", CLIENT[scenario])]


@pytest.fixture(params=list(SERVERS), scope="module")
def served(request: pytest.FixtureRequest, redis_server_module: RedisServer) -> Iterator[tuple[Server, str, str]]:
    prefix = unique_prefix()
    env = options(redis=redis_server_module.url, prefix=prefix, trusted_proxies=["127.0.0.1"],
                  limiters=[["proxied", {"kind": "window", "limit": LIMIT, "interval": INTERVAL}]])
    with SERVERS[request.param](env) as server:
        yield server, redis_server_module.url, prefix


@pytest.fixture(scope="module")
def redis_server_module() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.mark.parametrize("scenario", list(CLIENT))
def test_a_client_varying_a_proxy_header_is_still_one_client(served: tuple[Server, str, str], scenario: str) -> None:
    server, redis_url, prefix = served
    judge(server, proxied(redis_url, prefix), lambda: request_headers(scenario), CLIENT[scenario])


def test_behind_a_proxy_that_sets_forwarded_only_its_line_counts(redis_server_module: RedisServer) -> None:
    # proxy_header="Forwarded": the client varies X-Forwarded-For and writes a Forwarded line of
    # its own; the proxy adds its line after it.
    prefix = unique_prefix()
    env = options(redis=redis_server_module.url, prefix=prefix, trusted_proxies=["127.0.0.1"], proxy_header="Forwarded",
                  limiters=[["proxied", {"kind": "window", "limit": LIMIT, "interval": INTERVAL}]])

    def lines(scenario: str) -> list[tuple[str, str]]:
        return [("X-Forwarded-For", spoofed()), ("Forwarded", f"for={spoofed()}"),
                ("Forwarded", f'for="{CLIENT[scenario]}:4711";proto=http')]

    with uvicorn("starlette_app:app", env=env) as server:
        judge(server, proxied(redis_server_module.url, prefix), lambda: lines("forwarded"), CLIENT["forwarded"])


# What each deployment of the example sends the app: the client forges a Forwarded header and
# X-Forwarded-For entries of its own; each proxy appends the address it was connected from.
DEPLOYMENTS: dict[str, Callable[[], list[tuple[str, str]]]] = {
    "nginx": lambda: [("Forwarded", f"for={spoofed()}"), ("X-Forwarded-For", f"{spoofed()}, 203.0.113.7")],
    "alb": lambda: [("Forwarded", f"for={spoofed()}"), ("X-Forwarded-For", f"{spoofed()}, 203.0.113.7")],
    # Cloudflare appends the client, then nginx appends Cloudflare's edge (173.245.48.5).
    "cloudflare": lambda: [("Forwarded", f"for={spoofed()}"),
                           ("X-Forwarded-For", f"{spoofed()}, 203.0.113.7, 173.245.48.5")],
}


@pytest.mark.parametrize("deployment", list(DEPLOYMENTS))
def test_the_behind_a_proxy_example(deployment: str) -> None:
    redis = RedisServer()
    try:
        # The ALB's VPC is the loopback network here: the test connects from 127.0.0.1.
        env = {"REDIS_URL": redis.url, "API_LIMIT": str(LIMIT), "PROXY": deployment, "VPC_CIDR": "127.0.0.0/8"}
        with uvicorn(f"{EXAMPLE_MODULE}:app", cwd=EXAMPLE_DIR, env=env) as server:
            judge(server, Backend.redis(redis.url).window("api", LIMIT, "minute"), DEPLOYMENTS[deployment], "203.0.113.7")
    finally:
        redis.stop()


def proxied(redis_url: str, prefix: str) -> Limiter:
    """The test apps' limiter, as this process sees it."""
    return Backend.redis(redis_url, prefix=prefix).window("proxied", LIMIT, INTERVAL)


def judge(server: Server, limiter: Limiter, lines: Callable[[], list[tuple[str, str]]], key: str) -> None:
    """Sends 10 requests with the header ``lines`` and judges what was admitted, and under which key."""
    started = time.time()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        statuses = [client.get("/", headers=lines()).status_code for _ in range(REQUESTS)]
    windows = int(time.time() // INTERVAL) - int(started // INTERVAL) + 1
    assert set(statuses) <= {200, 429}, statuses
    admitted = statuses.count(200)
    assert 1 <= admitted <= LIMIT * windows, f"{admitted} of {REQUESTS} admitted: {statuses}"
    # The requests were counted under the address the proxy gave, not under the client's.
    if time.time() - started < INTERVAL:
        assert limiter.peek(key).remaining < LIMIT, "not counted under the address the proxy gave"
