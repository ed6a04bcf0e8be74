"""ratekeeper.flask against real gunicorn servers (two worker processes), real client processes
and a real Redis: the documented example (a shared limit across two routes counted exactly,
the default, an exempt route), count="failures" and a failed-closed Redis."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ..conftest import RedisServer, unique_prefix
from .support import example, burst, clear_of_window_edge, gunicorn, options, sf_list

# The example the docs include (docs/src/guides/http/python.md), served as it is.
EXAMPLE_DIR, EXAMPLE_MODULE = example("examples/python/http/http_flask.py")

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


@pytest.fixture
def lone_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def test_the_flask_example_shares_a_limit_across_routes_and_processes(lone_redis: RedisServer) -> None:
    clear_of_window_edge(60, needed=20)
    with gunicorn(f"{EXAMPLE_MODULE}:app", cwd=EXAMPLE_DIR, env={"REDIS_URL": lone_redis.url}) as server:
        responses = burst([server.url + "/search", server.url + "/export"], processes=4, per_process=5)
        with httpx.Client(base_url=server.url) as client:
            hello = client.get("/")
            health = [client.get("/health") for _ in range(3)]
    statuses = [s for s, _ in responses]
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 10, statuses
    for status, headers in responses:
        assert sf_list(headers["ratelimit-policy"]) == [("heavy", {"q": 10, "w": 60})]
        if status == 429:
            assert 1 <= int(headers["retry-after"]) <= 60
            assert headers["content-type"] == "application/problem+json"
    assert hello.status_code == 200
    assert sf_list(hello.headers["ratelimit-policy"]) == [("api", {"q": 200, "w": 3600})]
    assert all(r.status_code == 200 and "ratelimit" not in r.headers for r in health)


def test_count_failures_and_a_failing_view(redis_server: RedisServer) -> None:
    env = options(redis=redis_server.url, prefix=unique_prefix(), count="failures",
                  limiters=[["login", {"kind": "token_bucket", "rate": 0.0001, "capacity": 3}]])
    with gunicorn("flask_app:app", env=env) as server:
        with httpx.Client(base_url=server.url) as client:
            assert [client.get("/").status_code for _ in range(4)] == [200] * 4
            assert [client.get("/fail").status_code for _ in range(2)] == [401] * 2
            assert client.get("/boom").status_code == 500  # a raising view counts as a failure
            refused = client.get("/")
    assert refused.status_code == 429
    assert refused.json()["type"] == QUOTA_EXCEEDED
    assert refused.json()["violated-policies"] == ["login"]


def test_a_failed_closed_backend_answers_503_with_retry_after(lone_redis: RedisServer) -> None:
    env = options(redis=lone_redis.url, prefix=unique_prefix(), deadline=0.5, connect_timeout=0.5,
                  limiters=[["api", {"kind": "window", "limit": 100, "interval": 3600}]])
    with gunicorn("flask_app:app", env=env, workers=1) as server:
        assert httpx.get(server.url + "/").status_code == 200
        lone_redis.stop()
        refused = httpx.get(server.url + "/", timeout=10)
        assert "Traceback" not in server.output()
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["status"] == 503
