"""The HTTP middleware puts each decision on the request's span: a real uvicorn server whose
requests run in an OpenTelemetry server span (the SDK's in-memory exporter), a real client, a
real Redis. The limited key (the client address) is in no attribute."""

from __future__ import annotations

import httpx

from ..conftest import RedisServer, unique_prefix
from .support import options, uvicorn


def test_each_decision_is_an_event_on_the_request_span(redis_server: RedisServer) -> None:
    env = options(redis=redis_server.url, prefix=unique_prefix(),
                  limiters=[["api", {"kind": "window", "limit": 1, "interval": 3600}]])
    with uvicorn("otel_app:app", env=env) as server, httpx.Client(timeout=30) as client:
        assert [client.get(server.url).status_code for _ in range(2)] == [200, 429]
        spans = client.get(f"{server.url}/spans").json()
    requests = [s for s in spans if s["name"] == "GET /"]
    assert len(requests) == 2
    events = [[(e["name"], e["attributes"]) for e in s["events"]] for s in requests]
    assert all(events), f"no decision on a request span: {spans}"
    assert events == [
        [("ratekeeper.decision", {"ratekeeper.limiter": "api", "ratekeeper.kind": "window",
                                  "ratekeeper.outcome": outcome, "ratekeeper.retry_after": retry})]
        for outcome, retry in [("admitted", 0.0), ("refused", events[1][0][1]["ratekeeper.retry_after"])]
    ]
    assert events[1][0][1]["ratekeeper.retry_after"] > 0
    assert "127.0.0.1" not in str(spans), "the key (the client address) is no attribute"
