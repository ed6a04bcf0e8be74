"""ratekeeper.django against real servers — gunicorn (WSGI, two workers) and uvicorn (ASGI) —
real client processes and a real Redis: the documented example on both servers (the middleware,
an async view's count="failures", an exempt view), a limit shared by sync and async views across
WSGI and ASGI processes counted exactly, and a failed-closed Redis."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ..conftest import RedisServer, unique_prefix
from .support import example, burst, clear_of_window_edge, gunicorn, options, sf_list, uvicorn

# The example the docs include (docs/src/guides/http/python.md), served as it is.
EXAMPLE_DIR, EXAMPLE_MODULE = example("examples/python/http/http_django.py")


@pytest.fixture
def lone_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.mark.parametrize("server", ["gunicorn", "uvicorn"])
def test_the_django_example(lone_redis: RedisServer, server: str) -> None:
    clear_of_window_edge(60, needed=15)
    env = {"REDIS_URL": lone_redis.url}
    start = gunicorn(EXAMPLE_MODULE, cwd=EXAMPLE_DIR, env=env) if server == "gunicorn" else \
        uvicorn(f"{EXAMPLE_MODULE}:asgi", cwd=EXAMPLE_DIR, env=env)
    with start as app, httpx.Client(base_url=app.url) as client:
        hello = client.get("/")
        assert client.get("/login", params={"password": "open sesame"}).status_code == 200
        assert [client.get("/login", params={"password": "guess"}).status_code for _ in range(5)] == [401] * 5
        refused = client.get("/login", params={"password": "open sesame"})
        health = client.get("/health")
    assert hello.json() == {"hello": "world"}
    assert sf_list(hello.headers["ratelimit-policy"]) == [("api", {"q": 100, "w": 60})]
    assert refused.status_code == 429
    assert refused.json()["violated-policies"] == ["login-failures"]
    assert int(refused.headers["retry-after"]) >= 1
    assert health.status_code == 200 and "ratelimit" not in health.headers


def test_one_limit_across_wsgi_and_asgi_processes_and_sync_and_async_views(redis_server: RedisServer) -> None:
    env = options(redis=redis_server.url, prefix=unique_prefix(),
                  limiters=[["api", {"kind": "window", "limit": 15, "interval": 3600}]])
    clear_of_window_edge(3600)
    with gunicorn("django_app:application", env=env) as wsgi, uvicorn("django_app:asgi", env=env) as asgi:
        urls = [wsgi.url + "/", asgi.url + "/async", wsgi.url + "/async", asgi.url + "/"]
        responses = burst(urls, processes=4, per_process=8)
    statuses = [s for s, _ in responses]
    assert statuses.count(200) == 15, statuses
    assert statuses.count(429) == 17, statuses


def test_count_failures_in_the_async_middleware_stack(redis_server: RedisServer) -> None:
    # The middleware under ASGI runs async (sync views behind it run in Django's thread); the
    # decorator's async path is the example's login view, on both servers.
    env = options(redis=redis_server.url, prefix=unique_prefix(), count="failures",
                  limiters=[["login", {"kind": "window", "limit": 2, "interval": 3600}]])
    clear_of_window_edge(3600)
    with uvicorn("django_app:asgi", env=env) as app, httpx.Client(base_url=app.url) as client:
        assert [client.get(path).status_code for path in ("/", "/async", "/", "/async")] == [200] * 4
        assert [client.get(path).status_code for path in ("/fail", "/afail", "/fail")] == [401, 401, 429]


def test_a_failed_closed_backend_answers_503_with_retry_after(lone_redis: RedisServer) -> None:
    env = options(redis=lone_redis.url, prefix=unique_prefix(), deadline=0.5, connect_timeout=0.5,
                  limiters=[["api", {"kind": "window", "limit": 100, "interval": 3600}]])
    with gunicorn("django_app:application", env=env, workers=1) as app:
        assert httpx.get(app.url + "/").status_code == 200
        lone_redis.stop()
        refused = httpx.get(app.url + "/", timeout=10)
        assert "Traceback" not in app.output()
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["status"] == 503
