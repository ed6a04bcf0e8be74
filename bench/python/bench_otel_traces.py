"""Python benchmark: what ratekeeper.otel's traces cost a check, in one run.

    python bench/python/bench_otel_traces.py [REDIS_URL]

Needs ratekeeper installed in release with opentelemetry-sdk. Memory token buckets that admit
every call, each on its own backend, `check("k")` in a plain loop: "off" not instrumented;
"metrics" instrumented without traces (the traced branch not taken); "traces" instrumented with
a TracerProvider whose span processor drops every span (the SDK's span making is counted, the
export is not). With REDIS_URL the same for one Redis check (one round trip, one more span).
Rounds alternate; medians of calls per second are printed. Not a test: nothing is asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import ratekeeper
from ratekeeper import otel

ROUNDS = 7
ROUND_SECONDS = 1.0


def rate(check: Callable[[str], object]) -> float:
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < ROUND_SECONDS:
        for _ in range(200):
            check("k")
        n += 200
    return n / elapsed


def limiters(make: Callable[[], ratekeeper.Backend]) -> dict[str, Callable[[str], object]]:
    out = {}
    for mode in ("off", "metrics", "traces"):
        backend = make()
        if mode != "off":
            tracing = TracerProvider() if mode == "traces" else None
            if tracing is not None:
                tracing.add_span_processor(SpanProcessor())  # drops every span
            otel.instrument(backend, meter_provider=MeterProvider(), tracer_provider=tracing)
        out[mode] = backend.token_bucket(f"bench-{mode}", 1e6, 10**9).check
    return out


def run(label: str, make: Callable[[], ratekeeper.Backend]) -> None:
    checks = limiters(make)
    rates: dict[str, list[float]] = {mode: [] for mode in checks}
    for _ in range(ROUNDS):
        for mode, check in checks.items():
            rates[mode].append(rate(check))
    off = statistics.median(rates["off"])
    for mode, seen in rates.items():
        median = statistics.median(seen)
        print(f"{label:7} {mode:8} {median:12,.0f} checks/s  {median / off:5.3f} of off")


run("memory", ratekeeper.Backend.memory)
if len(sys.argv) > 1:
    url = sys.argv[1]
    run("redis", lambda: ratekeeper.Backend.redis(url, prefix=f"benchtr{time.monotonic_ns()}", deadline=5.0))
