"""ratekeeper.otel's traces through the OpenTelemetry SDK's in-memory span exporter, on a real
Redis server: with a tracer provider, one span per sync check/acquire with one child span per
Redis round trip, in the caller's span; the limited key in no attribute; without one, no span."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import ratekeeper
from ratekeeper import otel

from .conftest import REDIS_OPTIONS, RedisServer, free_port, unique_prefix

KEY = "user-4711@example.com"


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def scripted(backend: ratekeeper.Backend, provider: TracerProvider) -> None:
    """Inside a caller's span `request`: 2 admitted checks and 1 refused of `api` (capacity 2),
    then an acquire refused within its wait (wait_timeout 0)."""
    api = backend.token_bucket("api", 0.001, 2)
    with provider.get_tracer("app").start_as_current_span("request"):
        assert api.check(KEY).allowed
        assert api.check(KEY).allowed
        assert not api.check(KEY).allowed
        with pytest.raises(ratekeeper.OverLimit):
            api.acquire(KEY, wait_timeout=0)


def no_key(span: ReadableSpan) -> None:
    for value in (span.attributes or {}).values():
        assert KEY not in str(value), f"the key is an attribute of {span.name}: {span.attributes}"
    assert KEY not in span.name


def read(exporter: InMemorySpanExporter, round_trips: int) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """The spans of `scripted`, checked: no key in any attribute; the caller's span, 4 call spans
    with their outcomes, each a child of the caller's span with `round_trips` EVALSHA spans of its
    own inside its time. Returns the call spans and the EVALSHA spans."""
    spans = exporter.get_finished_spans()
    for span in spans:
        no_key(span)
    assert len(spans) == 1 + 4 + 4 * round_trips, [s.name for s in spans]
    [request] = [s for s in spans if s.name == "request"]
    calls = [s for s in spans if s.name.startswith("ratekeeper ")]
    assert [s.name for s in calls] == ["ratekeeper check"] * 3 + ["ratekeeper acquire"]
    assert [s.attributes["ratekeeper.outcome"] for s in calls] == ["admitted", "admitted", "refused", "refused"]
    trips = []
    for call in calls:
        assert call.parent is not None and call.parent.span_id == request.context.span_id
        assert call.context.trace_id == request.context.trace_id
        children = [t for t in spans if t.parent is not None and t.parent.span_id == call.context.span_id]
        assert [(t.name, t.kind) for t in children] == [("EVALSHA", SpanKind.CLIENT)] * round_trips
        for trip in children:
            assert call.start_time <= trip.start_time <= trip.end_time <= call.end_time
        trips += children
    return calls, trips


def warm(backend: ratekeeper.Backend) -> None:
    """Caches the token bucket's script on the server: every traced check is then one EVALSHA."""
    backend.token_bucket("warm", 1000, 1000).check("warm")


def test_a_span_per_call_and_per_redis_round_trip(redis_server: RedisServer) -> None:
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS)
    warm(backend)
    provider, exporter = tracing()
    handle = otel.instrument(backend, meter_provider=MeterProvider(), tracer_provider=provider)
    scripted(backend, provider)
    calls, trips = read(exporter, round_trips=1)
    for call in calls:
        assert call.attributes["ratekeeper.limiter"] == "api"
        assert call.attributes["ratekeeper.kind"] == "token_bucket"
        assert (call.attributes["ratekeeper.retry_after"] > 0) == (call.attributes["ratekeeper.outcome"] == "refused")
        assert call.status.status_code == StatusCode.UNSET
    for trip in trips:
        assert dict(trip.attributes or {}) == {
            "db.system.name": "redis",
            "db.operation.name": "EVALSHA",
            "server.address": "127.0.0.1",
            "server.port": redis_server.port,
        }
    # Closed: the calls are not traced any more.
    handle.close()
    exporter.clear()
    backend.token_bucket("api", 0.001, 2).check(KEY)
    assert exporter.get_finished_spans() == ()


def test_a_first_call_that_loads_the_script_shows_both_round_trips(redis_server: RedisServer) -> None:
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS)
    warm(backend)
    redis_server.cli("SCRIPT", "FLUSH")
    provider, exporter = tracing()
    otel.instrument(backend, tracer_provider=provider)
    backend.token_bucket("api", 0.001, 2).check(KEY)
    trips = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert [(t.name, (t.attributes or {}).get("error.type")) for t in trips] == [("EVALSHA", "NOSCRIPT"), ("EVAL", None)]
    assert trips[0].status.status_code == StatusCode.ERROR


@pytest.mark.parametrize("traces", [None, False])
def test_no_tracer_provider_or_traces_false_makes_no_span(redis_server: RedisServer, traces: bool | None) -> None:
    backend = ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS)
    provider, exporter = tracing()
    # `traces=False` wins over a given provider; without a provider and `traces`, nothing.
    otel.instrument(backend, meter_provider=MeterProvider(), tracer_provider=provider if traces is False else None,
                    traces=traces)
    scripted(backend, provider)
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]


@pytest.mark.parametrize("where", ["redis", "memory"])
def test_asyncio_calls_have_their_span_in_the_callers_context(redis_server: RedisServer, where: str) -> None:
    backend = (ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS) if where == "redis"
               else ratekeeper.Backend.memory())
    warm(backend)
    provider, exporter = tracing()
    otel.instrument(backend, tracer_provider=provider)
    api = backend.token_bucket("api", 0.001, 2)

    async def calls() -> None:
        with provider.get_tracer("app").start_as_current_span("request"):
            assert (await api.acheck(KEY)).allowed
            assert (await api.acheck(KEY)).allowed
            assert not (await api.acheck(KEY)).allowed
            with pytest.raises(ratekeeper.OverLimit):
                await api.aacquire(KEY, wait_timeout=0)

    asyncio.run(calls())
    # The round trips, made by each call's task on the core's runtime, are its children.
    read(exporter, round_trips=1 if where == "redis" else 0)


def test_a_failed_call_has_an_error_span() -> None:
    backend = ratekeeper.Backend.redis(f"redis://127.0.0.1:{free_port()}", deadline=0.3, connect_timeout=0.3)
    provider, exporter = tracing()
    otel.instrument(backend, tracer_provider=provider)
    with pytest.raises(ratekeeper.BackendUnavailable):
        backend.token_bucket("api", 0.001, 2).check(KEY)
    [span] = exporter.get_finished_spans()
    no_key(span)
    assert span.name == "ratekeeper check"
    assert span.status.status_code == StatusCode.ERROR
    assert dict(span.attributes or {}) == {"ratekeeper.limiter": "api", "ratekeeper.kind": "token_bucket",
                                           "ratekeeper.outcome": "error", "error.type": "BackendUnavailable"}


def test_memory_calls_have_their_span_and_no_round_trip() -> None:
    backend = ratekeeper.Backend.memory()
    provider, exporter = tracing()
    otel.instrument(backend, tracer_provider=provider)
    scripted(backend, provider)
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["ratekeeper check"] * 3 + ["ratekeeper acquire", "request"]


def test_traces_must_be_a_bool() -> None:
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        otel.instrument(ratekeeper.Backend.memory(), traces="yes")  # type: ignore[arg-type]
    assert e.value.parameter == "traces"


def test_the_documented_trace_setup(redis_server: RedisServer) -> None:
    """The Observability page's example: traces on through the tracer provider given."""
    url = redis_server.url
    # --8<-- [start:setup]
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import ratekeeper
    import ratekeeper.otel

    # The application's provider; in production a BatchSpanProcessor(OTLPSpanExporter()).
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))

    backend = ratekeeper.Backend.redis(url)
    # A tracer provider turns traces on (traces=True: the global one; traces=False: off).
    ratekeeper.otel.instrument(backend, tracer_provider=tracer_provider)
    api = backend.token_bucket("api", rate=10, capacity=2)
    with tracer_provider.get_tracer("app").start_as_current_span("GET /orders"):
        api.check("user-42")
    # GET /orders
    # └─ ratekeeper check   ratekeeper.limiter=api ratekeeper.outcome=admitted ...
    #    └─ EVALSHA         db.system.name=redis db.operation.name=EVALSHA server.port=...
    # --8<-- [end:setup]
    names = [s.name for s in exporter.get_finished_spans()]
    assert names[-2:] == ["ratekeeper check", "GET /orders"]
    assert set(names[:-2]) <= {"EVALSHA", "EVAL"} and names[:-2], names


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
@pytest.mark.parametrize("where", ["redis", "memory"])
def test_peek_settle_release_and_check_all_have_a_span_each(redis_server: RedisServer, where: str, mode: str) -> None:
    backend = (ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS) if where == "redis"
               else ratekeeper.Backend.memory())
    api = backend.token_bucket("api", 0.001, 10)
    pool = backend.concurrent("pool", 1, lock_timeout=30)
    # Each call once untraced: every script is then cached (one EVALSHA each).
    checked = api.check("warm", 2)
    api.peek("warm")
    api.settle(checked, 1)
    backend.check_all([(api, "warm", 1), (pool, "warm", 1)]).release()
    first, second = api.check(KEY, 3), api.check(KEY, 1)
    provider, exporter = tracing()
    instrumentation = otel.instrument(backend, meter_provider=MeterProvider(), tracer_provider=provider)

    async def calls() -> ratekeeper.CombinedDecision:
        await api.apeek(KEY)
        await api.asettle(first, 1)
        await api.asettle(second, 4)
        combined = await backend.acheck_all([(api, KEY, 1), (pool, KEY, 1)])
        with pytest.raises(ratekeeper.OverLimit):
            await backend.aacquire_all([(pool, KEY)], wait_timeout=0)
        lease = combined.parts[1].lease
        assert lease is not None
        await pool.arelease(lease)
        return combined

    if mode == "asyncio":
        combined = asyncio.run(calls())
    else:
        api.peek(KEY)
        api.settle(first, 1)
        api.settle(second, 4)
        combined = backend.check_all([(api, KEY, 1), (pool, KEY, 1)])
        with pytest.raises(ratekeeper.OverLimit):
            backend.acquire_all([(pool, KEY)], wait_timeout=0)
        lease = combined.parts[1].lease
        assert lease is not None
        pool.release(lease)
    assert combined.allowed
    instrumentation.close()
    spans = exporter.get_finished_spans()
    for span in spans:
        no_key(span)
    calls_ = [s for s in spans if s.name.startswith("ratekeeper ")]
    assert [(s.name, (s.attributes or {}).get("ratekeeper.outcome")) for s in calls_] == [
        ("ratekeeper peek", "admitted"),
        ("ratekeeper settle", "admitted"),
        ("ratekeeper settle", "admitted"),
        ("ratekeeper check_all", "admitted"),
        ("ratekeeper acquire_all", "refused"),
        ("ratekeeper release", None),
    ]
    # One round trip each on Redis: a refused acquire_all that may not wait is one attempt in
    # either form (the sync form once tried again through the async one: two round trips).
    trips = [0] * 6 if where == "memory" else [1] * 6
    assert len(spans) == len(calls_) + sum(trips), " ".join(s.name for s in spans)
    for call, n in zip(calls_, trips):
        children = [t for t in spans if t.parent is not None and t.parent.span_id == call.context.span_id]
        assert [(t.name, t.kind) for t in children] == [("EVALSHA", SpanKind.CLIENT)] * n
        for trip in children:
            assert call.start_time <= trip.start_time <= trip.end_time <= call.end_time
    peek, refund, charge, check_all, acquire_all, release = (dict(s.attributes or {}) for s in calls_)
    assert (peek["ratekeeper.limiter"], peek["ratekeeper.kind"], peek["ratekeeper.retry_after"]) == (
        "api", "token_bucket", 0)
    assert (refund["ratekeeper.direction"], refund["ratekeeper.units"]) == ("refunded", 2)
    assert (charge["ratekeeper.direction"], charge["ratekeeper.units"]) == ("charged", 3)
    assert tuple(check_all["ratekeeper.limiters"]) == ("api", "pool")
    assert check_all["ratekeeper.retry_after"] == 0
    assert tuple(acquire_all["ratekeeper.limiters"]) == ("pool",)
    assert acquire_all["ratekeeper.retry_after"] > 0
    assert (release["ratekeeper.limiter"], release["ratekeeper.kind"]) == ("pool", "concurrent")
