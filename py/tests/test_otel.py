"""ratekeeper.otel through the OpenTelemetry SDK's in-memory reader and span exporter: exact counts
for one scripted sequence of decisions on memory and on a real Redis server, the limited key in
no attribute, and a decision event on the current span. The region `setup` of this file
(py/tests/test_otel.py) is the example of docs/src/operating/observability.md."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ratekeeper
from ratekeeper import otel

from .conftest import REDIS_OPTIONS, RedisServer, free_port, unique_prefix

KEY = "user-4711@example.com"


def script(backend: ratekeeper.Backend) -> list[ratekeeper.Limiter]:
    """The scripted decisions: 3 admitted and 2 refused by `api`; 1 admitted and 2 shadow-refused
    by `dry`; a check and an acquire refused by a block on `blocky`; a check refused by a pause
    on `quiet`; 2 leases of `pool` granted at once, a third refused, one released, one more
    acquired; a settle of `api` refunding 2 units. Returns the limiters (a backend's metrics are
    those of its live limiters)."""
    api = backend.token_bucket("api", 0.001, 5)
    first = api.check(KEY, cost=3)
    for _ in range(2):
        api.check(KEY)
    for _ in range(2):
        assert not api.check(KEY).allowed
    api.settle(first, 1)
    dry = backend.token_bucket("dry", 0.001, 1).with_shadow(True)
    for _ in range(3):
        assert dry.check(KEY).allowed
    blocky = backend.token_bucket("blocky", 0.001, 10)
    blocky.block(60.0, KEY)
    assert not blocky.check(KEY).allowed
    async def refused() -> None:
        # The async form: on memory, `acquire` tries once in process and once more after a
        # refusal (two checks), on Redis once.
        await blocky.aacquire(KEY, wait_timeout=0)

    with pytest.raises(ratekeeper.OverLimit):
        asyncio.run(refused())
    quiet = backend.token_bucket("quiet", 0.001, 10)
    quiet.pause(60.0, KEY)
    assert not quiet.check(KEY).allowed
    pool = backend.concurrent("pool", 2)
    leases = [pool.check(KEY), pool.check(KEY)]
    assert not pool.check(KEY).allowed
    lease = leases[0].lease
    assert lease is not None
    pool.release(lease, KEY)
    pool.acquire(KEY, wait_timeout=5)
    return [api, dry, blocky, quiet, pool]


_DECISIONS = {
    ("api", "admitted"): 3,
    ("api", "refused"): 2,
    ("dry", "admitted"): 1,
    ("dry", "shadow_refused"): 2,
    ("blocky", "refused"): 2,
    ("quiet", "refused"): 1,
    ("pool", "admitted"): 3,
    ("pool", "refused"): 1,
}

#: What the script counts; each check's duration is in ratekeeper.check.duration under its
#: outcome (as many as its decisions), each acquire's in ratekeeper.wait.duration.
EXPECTED = {
    **{("ratekeeper.decisions", *series): n for series, n in _DECISIONS.items()},
    **{("ratekeeper.check.duration", *series): n for series, n in _DECISIONS.items()},
    ("ratekeeper.holds", "blocky", "block"): 2,
    ("ratekeeper.holds", "blocky", "pause"): 0,
    ("ratekeeper.holds", "quiet", "block"): 0,
    ("ratekeeper.holds", "quiet", "pause"): 1,
    ("ratekeeper.settle.units", "api", "refunded"): 2,
    ("ratekeeper.settle.units", "api", "charged"): 0,
    ("ratekeeper.leases.granted", "pool", "immediate"): 3,
    ("ratekeeper.leases.granted", "pool", "waited"): 0,
    ("ratekeeper.leases.held", "pool", ""): 2,
    ("ratekeeper.wait.duration", "blocky", "refused"): 1,
    ("ratekeeper.wait.duration", "pool", "admitted"): 1,
}


def points(reader: InMemoryMetricReader) -> Iterator[tuple[str, dict[str, Any], float]]:
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == "ratekeeper"
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    if isinstance(p, HistogramDataPoint):
                        # A histogram's value here: its count (checked against its buckets).
                        assert sum(p.bucket_counts) == p.count and p.sum > 0
                        yield metric.name, dict(p.attributes or {}), p.count
                    else:
                        yield metric.name, dict(p.attributes or {}), p.value


def counted(reader: InMemoryMetricReader) -> dict[tuple[str, str, str], float]:
    """The points with a value, by (instrument, limiter, the third attribute); each point's
    attributes checked for the key."""
    out = {}
    for name, attributes, value in points(reader):
        assert KEY not in attributes.values(), f"the key is an attribute of {name}: {attributes}"
        assert not any(KEY in str(v) for v in attributes.values())
        third = [v for k, v in attributes.items() if k not in ("ratekeeper.limiter", "ratekeeper.kind")] or [""]
        if value or name != "ratekeeper.decisions":
            out[(name, str(attributes["ratekeeper.limiter"]), str(third[0]))] = value
    return out


def check_sequence(backend: ratekeeper.Backend) -> None:
    reader = InMemoryMetricReader()
    otel.instrument(backend, meter_provider=MeterProvider(metric_readers=[reader]))
    limiters = script(backend)
    assert counted(reader) == EXPECTED
    kinds = {a["ratekeeper.limiter"]: a["ratekeeper.kind"] for n, a, _ in points(reader) if n == "ratekeeper.decisions"}
    assert kinds == {"api": "token_bucket", "dry": "token_bucket", "blocky": "token_bucket", "quiet": "token_bucket",
                     "pool": "concurrent"}
    # Every outcome is reported for every limiter, so a rate of refusals has a zero to start from.
    outcomes = {a["ratekeeper.outcome"] for n, a, _ in points(reader) if n == "ratekeeper.decisions"}
    assert outcomes == {o for o, _ in otel.OUTCOMES}
    # Cumulative: the next collection adds the next decision, and records its duration once.
    limiters[0].check(KEY)
    got = counted(reader)
    assert got[("ratekeeper.decisions", "api", "admitted")] == 4, "the settle gave 2 back"
    assert got[("ratekeeper.check.duration", "api", "admitted")] == 4


def test_scripted_decisions_are_counted_exactly_on_memory() -> None:
    check_sequence(ratekeeper.Backend.memory())


def test_scripted_decisions_are_counted_exactly_on_redis(redis_server: RedisServer) -> None:
    check_sequence(ratekeeper.Backend.redis(redis_server.url, prefix=unique_prefix(), **REDIS_OPTIONS))


def test_failed_open_and_fallback_are_outcomes() -> None:
    reader = InMemoryMetricReader()
    down = f"redis://127.0.0.1:{free_port()}"
    options: dict[str, Any] = {"deadline": 0.5, "connect_timeout": 0.2}
    open_ = ratekeeper.Backend.redis(down, failure_policy="fail_open", prefix=unique_prefix(), **options)
    fallback = ratekeeper.Backend.redis(down, failure_policy="fallback", prefix=unique_prefix(), **options)
    provider = MeterProvider(metric_readers=[reader])
    otel.instrument(open_, meter_provider=provider)
    otel.instrument(fallback, meter_provider=provider)
    a, b = open_.token_bucket("a", 1, 1), fallback.token_bucket("b", 1, 1)
    assert a.check(KEY).allowed
    b.check(KEY)
    got = counted(reader)
    assert got[("ratekeeper.decisions", "a", "failed_open")] == 1
    assert got[("ratekeeper.decisions", "b", "fallback")] == 1


def test_close_stops_reporting() -> None:
    reader = InMemoryMetricReader()
    backend = ratekeeper.Backend.memory()
    instrumentation = otel.instrument(backend, meter_provider=MeterProvider(metric_readers=[reader]))
    api = backend.token_bucket("api", 1, 1)
    api.check(KEY)
    assert counted(reader)[("ratekeeper.decisions", "api", "admitted")] == 1
    instrumentation.close()
    api.check(KEY)
    # The SDK keeps exporting a synchronous histogram's cumulative series; nothing new is added.
    assert counted(reader) == {("ratekeeper.check.duration", "api", "admitted"): 1}, "nothing new after close"


def test_durations_beyond_a_collections_share_are_recorded_at_the_next_ones_exactly() -> None:
    """A collection records at most a share of its interval's time (past 100 values): more
    checks than that are recorded by the following collections, each once."""
    reader = InMemoryMetricReader()
    backend = ratekeeper.Backend.memory()
    otel.instrument(backend, meter_provider=MeterProvider(metric_readers=[reader]))
    api = backend.token_bucket("api", 1_000_000, 10**9)
    for _ in range(5_000):
        api.check(KEY)
    seen = []
    while not seen or seen[-1] < 5_000:
        got = counted(reader)
        assert got[("ratekeeper.decisions", "api", "admitted")] == 5_000
        seen.append(got[("ratekeeper.check.duration", "api", "admitted")])
        assert seen[-1] <= 5_000, "never counted twice"
        assert len(seen) <= 5_000, f"no progress: {seen[-5:]}"
    assert seen == sorted(seen)



def test_a_collection_past_its_share_records_its_free_values_and_no_more() -> None:
    """A collection with no time left of its share (it follows another at once) records its
    `_FREE_RECORDS` values and at most one more chunk: the SDK's `record` costs 5–11 µs here,
    so each chunk recorded past the share is time a checking thread cannot run."""
    reader = InMemoryMetricReader()
    backend = ratekeeper.Backend.memory()
    otel.instrument(backend, meter_provider=MeterProvider(metric_readers=[reader]))
    api = backend.token_bucket("api", 1_000_000, 10**9)
    api.check(KEY)
    assert counted(reader)[("ratekeeper.check.duration", "api", "admitted")] == 1
    for _ in range(5_000):
        api.check(KEY)
    (_, registration), = [v for v in otel._registrations.values() if v[1].backends == [backend]]
    # The time since the last collection (its share) set to nothing: only the free values remain.
    registration._last_recorded = float("inf")
    recorded = counted(reader)[("ratekeeper.check.duration", "api", "admitted")] - 1
    assert otel._FREE_RECORDS <= recorded <= otel._FREE_RECORDS + otel._CHUNK, recorded


@pytest.mark.parametrize("allowed", [True, False])
def test_annotate_adds_the_decision_to_the_current_span(allowed: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    limiter = ratekeeper.Backend.memory().token_bucket("api", 1, 1)
    if not allowed:
        limiter.check(KEY)
    with provider.get_tracer("test").start_as_current_span("request"):
        otel.annotate(limiter, limiter.check(KEY))
    otel.annotate(limiter, limiter.check(KEY))  # no span: nothing, no error
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == "ratekeeper.decision"
    attributes = dict(event.attributes or {})
    assert KEY not in map(str, attributes.values())
    assert attributes["ratekeeper.limiter"] == "api"
    assert attributes["ratekeeper.kind"] == "token_bucket"
    assert attributes["ratekeeper.outcome"] == ("admitted" if allowed else "refused")
    assert (attributes["ratekeeper.retry_after"] == 0.0) == allowed


def test_the_documented_setup() -> None:
    """The Observability page's example: instrument a backend on the application's provider."""
    # --8<-- [start:setup]
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import ratekeeper
    import ratekeeper.otel

    # The application's provider; in production a PeriodicExportingMetricReader(OTLPMetricExporter()).
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    backend = ratekeeper.Backend.memory()
    ratekeeper.otel.instrument(backend, meter_provider=provider)  # None: the global provider
    api = backend.token_bucket("api", rate=10, capacity=2)
    for _ in range(3):
        api.check("user-42")
    # ratekeeper.decisions{ratekeeper.limiter="api", ratekeeper.kind="token_bucket",
    #                      ratekeeper.outcome="admitted"} = 2, ...{outcome="refused"} = 1
    # ratekeeper.check.duration{...same attributes}: a histogram of 2 and of 1 checks (seconds)
    # --8<-- [end:setup]
    assert counted(reader) == {("ratekeeper.decisions", "api", "admitted"): 2,
                               ("ratekeeper.decisions", "api", "refused"): 1,
                               ("ratekeeper.check.duration", "api", "admitted"): 2,
                               ("ratekeeper.check.duration", "api", "refused"): 1}


def test_bad_arguments_are_typed_errors_naming_the_parameter() -> None:
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        otel.instrument("redis://localhost")  # type: ignore[arg-type]
    assert e.value.parameter == "backend"
    with pytest.raises(ratekeeper.InvalidArgument) as e:
        otel.instrument(ratekeeper.Backend.memory(), meter_provider=InMemoryMetricReader())  # type: ignore[arg-type]
    assert e.value.parameter == "meter_provider"
