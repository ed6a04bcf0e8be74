"""Python benchmark: what ratekeeper.otel costs a check, instrumentation on against off, in one
run.

    python bench/python/bench_otel.py            # ~40 s
    python bench/python/bench_otel.py --quick    # ~10 s

Needs ratekeeper installed in release (`pip install ./py`) with opentelemetry-sdk. Two memory
token buckets that admit every call (a burst of 10^9), each on its own backend, `check("k")` in
a plain loop: "off" has no instrumentation; "on" is instrumented on a MeterProvider whose
periodic reader collects every 100 ms (600 times the SDK's default rate) into an exporter that
drops the data, and each "on" round ends with a collection inside its timing, so the cost of
recording every check's duration into the SDK's histogram (made at collection time) falls inside
the timed rounds even when the periodic collections fall behind. Rounds alternate off, on,
...; medians are printed. Each round is measured twice: checks per second of wall time, and
checks per second of the process's CPU time (every thread's, the periodic reader's included),
which other processes on a shared machine disturb far less. Not a test: nothing is asserted.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData, PeriodicExportingMetricReader

import ratekeeper
from ratekeeper import otel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report as results  # noqa: E402  (bench/python/report.py, beside this file)

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 7
ROUND_SECONDS = 1.0 if QUICK else 2.0
EXPORT_MS = 100
TARGET = 0.85  # instrumented: at most 15% slower
LOADED = ("loaded machine: 2 cores shared with other builds and tests while it ran (see machine.load); "
          "on records each check's duration into the SDK's histogram at collection time")


class Dropped(MetricExporter):
    """Takes every export and keeps nothing (the cost measured is collecting, not shipping)."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **_: object) -> MetricExportResult:
        self.exports += 1
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: object) -> None:
        pass


def rate_of(limiter: ratekeeper.Limiter, seconds: float, flush: Callable[[], object] | None) -> tuple[float, float]:
    """Checks per second of wall time and per second of the process's CPU time, for `seconds`;
    `flush` (a collection) ends the round inside the timing, so that every check's duration
    recorded into the histogram is paid for in the round."""
    check = limiter.check
    calls, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        for _ in range(10_000):
            check("k")
        calls += 10_000
    if flush is not None:
        flush()
    return calls / (time.perf_counter() - start), calls / (time.process_time() - cpu)


def medians(limiters: Sequence[tuple[ratekeeper.Limiter, Callable[[], object] | None]]) -> list[tuple[float, float]]:
    """Per limiter, the medians of its rounds' (wall, CPU) rates."""
    for limiter, flush in limiters:
        rate_of(limiter, ROUND_SECONDS / 4, flush)
    rates: list[list[tuple[float, float]]] = [[] for _ in limiters]
    for _ in range(ROUNDS):
        for i, (limiter, flush) in enumerate(limiters):
            rates[i].append(rate_of(limiter, ROUND_SECONDS, flush))
    return [(statistics.median(w for w, _ in r), statistics.median(c for _, c in r)) for r in rates]


def main() -> None:
    off = ratekeeper.Backend.memory()
    on = ratekeeper.Backend.memory()
    exporter = Dropped()
    provider = MeterProvider(metric_readers=[PeriodicExportingMetricReader(exporter, export_interval_millis=EXPORT_MS)])
    otel.instrument(on, meter_provider=provider)
    # A handful of limiters beside the one checked, so each collection reads several.
    others = [on.token_bucket(f"other-{i}", 10, 10) for i in range(9)]
    for limiter in others:
        limiter.check("k")
    (off_rate, off_cpu), (on_rate, on_cpu) = medians([(off.token_bucket("bench", 1_000_000, 10**9), None),
                                 (on.token_bucket("bench", 1_000_000, 10**9), provider.force_flush)])
    provider.shutdown()
    ratio = on_rate / off_rate
    print(f"| memory token_bucket.check (Python) | checks/s (median of {ROUNDS}) |")
    print("|---|---:|")
    print(f"| not instrumented | {off_rate:,.0f} |")
    print(f"| instrumented, collected every {EXPORT_MS} ms | {on_rate:,.0f} |")
    print(f"| not instrumented, per CPU second | {off_cpu:,.0f} |")
    print(f"| instrumented, per CPU second | {on_cpu:,.0f} |")
    print(f"on / off = {ratio:.3f} by wall time, {on_cpu / off_cpu:.3f} by CPU time (target ≥ {TARGET}); "
          f"{exporter.exports} collections")
    results.write("bench-python-otel", "Python", "ratekeeper.otel instrumentation on against off (Python, memory check)",
                  "python bench/python/bench_otel.py",
                  f"median of {ROUNDS} alternating rounds of {ROUND_SECONDS} s; on: collected every {EXPORT_MS} ms, "
                  "each round ending with a collection; loaded machine",
                  [results.row(f"memory token_bucket.check, instrumented (collected every {EXPORT_MS} ms)", on_rate,
                               "not instrumented", off_rate, target=TARGET),
                   results.row(f"memory token_bucket.check per CPU second of the process, instrumented (collected every "
                               f"{EXPORT_MS} ms)", on_cpu, "not instrumented", off_cpu, target=TARGET)],
                  note=LOADED)


if __name__ == "__main__":
    main()
