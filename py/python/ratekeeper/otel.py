"""ratekeeper's metrics through the OpenTelemetry API, beside an application's own.

``instrument(backend)`` registers asynchronous (observable) instruments on a meter taken from
the application's meter provider (the global one unless given). At each collection they read
``backend.metrics()`` once (the counts the core keeps anyway, this process's) and report them.
The duration histograms (``ratekeeper.check.duration``, ``ratekeeper.wait.duration``) are
synchronous: the OpenTelemetry API has no asynchronous histogram, and one ``record`` costs the
SDK more than a memory check, so the core times each call of an instrumented backend
(``backend.start_observing()``) and the same collection records the calls timed since the last
one (``backend.durations()``), each at its bucket's mean: counts and sums are exact. The names,
their attributes and
their mapping to ASP.NET Core's and Envoy's are on the docs' Observability page. The limited key
is never an attribute (one series per user would be unbounded cardinality): only the limiter's
name, its kind and the outcome are.

``annotate(limiter, decision)`` adds one decision to the current span (if one is recording), as
the HTTP middleware does for each limiter it asks. Needs the optional extra ``ratekeeper[otel]``
(``opentelemetry-api``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import TracerProvider

from ._ratekeeper import Backend, CombinedDecision, Decision, Metrics, NativeLimiter
from .errors import InvalidArgument, OverLimit

__all__ = ["OUTCOMES", "Instrumentation", "annotate", "instrument", "outcome_of"]

#: ``ratekeeper.outcome`` values and how each is read from a limiter's counts. They partition
#: the checks: ``refused`` excludes the deny cache's local refusals, which are their own outcome.
OUTCOMES: tuple[tuple[str, Callable[[Metrics], int]], ...] = (
    ("admitted", lambda m: m.allowed),
    ("refused", lambda m: max(m.refused - m.refused_locally, 0)),
    ("shadow_refused", lambda m: m.shadow_refused),
    ("refused_locally", lambda m: m.refused_locally),
    ("failed_open", lambda m: m.failed_open),
    ("fallback", lambda m: m.fell_back),
    ("error", lambda m: m.errors),
)

_Counts = Callable[[Metrics], Iterable[tuple[dict[str, str], int | float]]]

# Each instrument: name, unit, description, and the counts it reports per limiter (extra
# attributes beside the limiter's name and kind). Concurrent limiters' lease counts are zero
# for other kinds and so left out by `_observe`.
_COUNTERS: tuple[tuple[str, str, str, _Counts], ...] = (
    (
        "ratekeeper.decisions",
        "{decision}",
        "Checks by outcome (admitted, refused, shadow_refused, refused_locally, failed_open, fallback, error).",
        lambda m: (({"ratekeeper.outcome": outcome}, read(m)) for outcome, read in OUTCOMES),
    ),
    (
        "ratekeeper.holds",
        "{decision}",
        "Checks refused by a hold (a pause, or a block: block_for after a refusal, or block by hand); also in "
        "ratekeeper.decisions.",
        lambda m: [({"ratekeeper.hold": "pause"}, m.paused), ({"ratekeeper.hold": "block"}, m.blocked)],
    ),
    (
        "ratekeeper.settle.units",
        "{unit}",
        "Units settles charged (the call cost more than checked) or asked to refund (it cost less).",
        lambda m: [
            ({"ratekeeper.direction": "charged"}, m.settle_charged),
            ({"ratekeeper.direction": "refunded"}, m.settle_refunded),
        ],
    ),
    (
        "ratekeeper.leases.granted",
        "{lease}",
        "Leases granted by concurrent limiters, by whether the caller waited.",
        lambda m: [({"ratekeeper.wait": "immediate"}, m.immediate), ({"ratekeeper.wait": "waited"}, m.waited)],
    ),
)

# The duration histograms: the call they time (`backend.durations()`), name, description.
_HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    ("check", "ratekeeper.check.duration", "Duration of checks, by outcome."),
    ("wait", "ratekeeper.wait.duration",
     "Duration of calls that may wait (acquire, within_limit) until admitted, refused or failed."),
)

# One series of `backend.durations()`: (name, kind, call, outcome) -> (counts, sums_ns) per bucket
# (lists: what a registration has recorded advances in place).
_Durations = dict[tuple[str, str, str, str], tuple[list[int], list[int]]]


def _durations(backend: Backend) -> _Durations:
    return {(n, k, c, o): (counts, sums) for n, k, c, o, counts, sums in backend.durations()}


class Instrumentation:
    """What :func:`instrument` registered for one backend; :meth:`close` stops its reports."""

    def __init__(self, registration: _Registration, backend: Backend, tracer: trace.Tracer | None = None) -> None:
        self._registration = registration
        self._backend = backend
        self._tracer = tracer

    def close(self) -> None:
        """Stops reporting this backend, timing its calls and tracing them (the OpenTelemetry API
        cannot take an instrument back: once no backend is left, the instruments report nothing)."""
        if self._tracer is not None:
            tracers = _tracers.get(self._backend.id, [])
            if self._tracer in tracers:
                tracers.remove(self._tracer)
                if not tracers:
                    del _tracers[self._backend.id]
                self._backend.stop_tracing()
            self._tracer = None
        before = len(self._registration.backends)
        self._registration.backends = [b for b in self._registration.backends if b is not self._backend]
        if len(self._registration.backends) < before:
            self._registration.seen.pop(id(self._backend), None)
            self._backend.stop_observing()


class _Registration:
    """The instruments of one meter provider and the backends they report. An instrument's
    name registers once per meter, so a second backend on the same provider joins the first's
    callbacks instead of creating instruments the SDK would ignore."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.backends: list[Backend] = []
        #: Per backend (by id), the durations its histograms hold so far.
        self.seen: dict[int, _Durations] = {}
        self._last_recorded = time.monotonic()
        self._rows: list[tuple[str, str, Metrics]] = []
        bounds = Backend.duration_bounds()
        self._histograms = {
            call: meter.create_histogram(name, unit="s", description=description,
                                         explicit_bucket_boundaries_advisory=bounds)
            for call, name, description in _HISTOGRAMS
        }
        for index, (name, unit, description, counts) in enumerate(_COUNTERS):
            meter.create_observable_counter(name, [self._callback(counts, index == 0)], unit=unit,
                                            description=description)
        meter.create_observable_up_down_counter(
            "ratekeeper.leases.held", [self._held], unit="{lease}",
            description="Leases of concurrent limiters this process holds (granted, not yet released).")

    def add(self, backend: Backend) -> None:
        """Reports `backend` from now on; calls timed before are not this registration's."""
        backend.start_observing()
        self.seen[id(backend)] = {series: (list(c), list(s)) for series, (c, s) in _durations(backend).items()}
        self.backends.append(backend)

    def _record_durations(self) -> None:
        """Records the calls each backend timed since the last collection into the histograms:
        per bucket, its new calls at their mean (the mean of durations in a bucket lies in it).

        Past its first `_FREE_RECORDS` values, recording takes at most `RECORD_SHARE` of the time
        since the last collection: the SDK's `record` costs more than a memory check, so a process
        checking faster than the SDK records would otherwise spend its time (and the SDK's
        callback timeout) here. What is left is recorded at the next collections, so counts and
        sums stay exact, late."""
        now = time.monotonic()
        until = now + min(RECORD_SHARE * (now - self._last_recorded), _MAX_RECORD_SECONDS)
        self._last_recorded = now
        free = _FREE_RECORDS
        for backend in self.backends:
            seen = self.seen.setdefault(id(backend), {})
            for series, (counts, sums) in _durations(backend).items():
                before_counts, before_sums = seen.setdefault(series, ([0] * len(counts), [0] * len(sums)))
                name, kind, call, outcome = series
                attributes: dict[str, Any] = {"ratekeeper.limiter": name, "ratekeeper.kind": kind,
                                              "ratekeeper.outcome": outcome}
                record = self._histograms[call].record
                for i, (count, total) in enumerate(zip(counts, sums)):
                    new = count - before_counts[i]
                    if new <= 0:
                        # A dropped limiter object takes its timings along: never below zero.
                        before_counts[i], before_sums[i] = count, total
                        continue
                    value = (total - before_sums[i]) / new / 1e9
                    done = 0
                    while done < new and (free > 0 or time.monotonic() < until):
                        chunk = min(new - done, free if free > 0 else _CHUNK)
                        for _ in range(chunk):
                            record(value, attributes)
                        done += chunk
                        free -= chunk
                    before_counts[i] += done
                    before_sums[i] = total if done == new else before_sums[i] + round(value * 1e9 * done)

    def _held(self, _options: CallbackOptions) -> Iterable[Observation]:
        # Every concurrent limiter, none held included: a count that falls to zero shows it.
        return _observe([row for row in self._rows if row[1] == "concurrent"],
                        lambda m: [({}, m.leases_held)], keep_zero=True)

    def _callback(self, counts: _Counts, first: bool) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            # The API has no batch callback in Python: the SDK runs a meter's callbacks in the
            # order the instruments were made, so the first reads every backend and the others
            # reuse that read. A collection costs one `metrics()` per backend, not one per
            # instrument.
            if first:
                self._rows = [row for backend in self.backends for row in backend.metrics()]
                # Before the SDK reads the synchronous instruments of this collection.
                self._record_durations()
            return _observe(self._rows, counts)

        return observe


def _observe(rows: list[tuple[str, str, Metrics]], counts: _Counts, keep_zero: bool = False) -> list[Observation]:
    totals: dict[tuple[tuple[str, str], ...], int | float] = {}
    for name, kind, m in rows:
        values = list(counts(m))
        # A limiter with no count of this instrument is not a series of it (settles of a
        # limiter never settled, leases of a kind without leases); a cumulative count, once
        # non-zero, stays so, so a series never disappears.
        if not any(value for _, value in values) and not keep_zero:
            continue
        for extra, value in values:
            attributes = (("ratekeeper.limiter", name), ("ratekeeper.kind", kind), *extra.items())
            # Two backends' limiters of one name add up.
            totals[attributes] = totals.get(attributes, 0) + value
    return [Observation(value, dict(attributes)) for attributes, value in totals.items()]


_registrations: dict[int, tuple[MeterProvider, _Registration]] = {}

#: The share of the time between two collections that recording durations may take: at the
#: SDK's default 60 s interval the one-second cap below binds first (1.7%); with frequent
#: collections this keeps an instrumented process's recording as small.
RECORD_SHARE = 0.02
# A collection records this many values whatever the time, and never for longer than this (the
# SDK's callbacks time out).
_FREE_RECORDS = 100
_MAX_RECORD_SECONDS = 1.0
# Values recorded between two readings of the clock past the free ones: at the SDK's 5–11 µs a
# `record`, 16 overrun the share by at most ~0.2 ms (chunks of 256 overran a 100 ms collection's
# 5 ms by up to 2.8 ms, time no checking thread can run: the GIL is the collector's).
_CHUNK = 16


def instrument(
    backend: Backend,
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    *,
    traces: bool | None = None,
) -> Instrumentation:
    """Reports ``backend``'s metrics (this process's) through the OpenTelemetry API on the
    ``ratekeeper`` meter of ``meter_provider`` (the global meter provider when None).

    Traces are off unless asked for: giving a ``tracer_provider`` turns them on, and so does
    ``traces=True`` (on the global tracer provider when no provider is given); ``traces=False``
    keeps them off whatever the provider. Traced, each ``check``, ``acquire``, ``peek``,
    ``settle`` and ``release`` of the backend's limiters (sync and asyncio) and the backend's
    ``check_all`` and ``acquire_all`` make a span ``ratekeeper <method>`` (the limiter's name and
    kind, or ``ratekeeper.limiters`` for a call over several; the outcome, ``retry_after``; a
    settle's ``ratekeeper.direction`` and ``ratekeeper.units``; never the key) in the caller's
    context, with a child span per Redis round trip (``db.system.name`` ``redis``, ``db.operation.name`` the
    command, ``server.address``/``server.port``; never a key or an argument)."""
    if not isinstance(backend, Backend):
        raise InvalidArgument(f"invalid argument `backend`: must be a ratekeeper.Backend, got {backend!r}", "backend")
    if traces is not None and not isinstance(traces, bool):
        raise InvalidArgument(f"invalid argument `traces`: must be a bool or None, got {traces!r}", "traces")
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    if not isinstance(provider, MeterProvider):
        raise InvalidArgument(
            f"invalid argument `meter_provider`: must be an OpenTelemetry MeterProvider, got {provider!r}",
            "meter_provider")
    if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
        raise InvalidArgument(
            f"invalid argument `tracer_provider`: must be an OpenTelemetry TracerProvider, got {tracer_provider!r}",
            "tracer_provider")
    from . import __version__

    tracer = None
    if traces if traces is not None else tracer_provider is not None:
        tracer = trace.get_tracer("ratekeeper", __version__, tracer_provider=tracer_provider)
    known = _registrations.get(id(provider))
    if known is None or known[0] is not provider:
        known = (provider, _Registration(provider.get_meter("ratekeeper", __version__)))
        _registrations[id(provider)] = known
    registration = known[1]
    registration.add(backend)
    if tracer is not None:
        _tracers.setdefault(backend.id, []).append(tracer)
        backend.start_tracing()
    return Instrumentation(registration, backend, tracer)


#: The tracers of each traced backend (by ``Backend.id``): one per ``instrument`` call with traces.
_tracers: dict[int, list[trace.Tracer]] = {}

#: One round trip as the core notes it: command, start and end (ns since the epoch), the
#: server's host and port (None on a cluster), the error reply's code (None when answered).
_RoundTrip = tuple[str, int, int, "str | None", "int | None", "str | None"]


class _RoundTrips(Protocol):
    def take(self) -> list[_RoundTrip]: ...


def _trace_future(future: asyncio.Future[Any], backend_id: int, method: str, attributes: _Attributes,
                  start: int, trips: _RoundTrips | None) -> None:
    """Called by the native module for each traced asyncio call: its spans once `future` is done,
    in the context of the call (asyncio runs a done callback in the context it was added in),
    with the round trips its task noted (`trips`; None for a call decided in process)."""
    def done(finished: asyncio.Future[Any]) -> None:
        if finished.cancelled():
            error: BaseException | None = asyncio.CancelledError()
            result = None
        else:
            error = finished.exception()
            result = None if error is not None else finished.result()
        _trace_call(backend_id, method, attributes, result, error, start, time.time_ns(),
                    trips.take() if trips is not None else [])

    future.add_done_callback(done)


#: A traced call's attributes from its inputs, as the native module gives them: the limiter's
#: name and kind (or ``ratekeeper.limiters`` for a call over several), a settle's direction and
#: units. Never a key.
_Attributes = list[tuple[str, "str | int | list[str]"]]


def _trace_call(backend_id: int, method: str, inputs: _Attributes, result: Any, error: BaseException | None,
                start: int, end: int, trips: list[_RoundTrip]) -> None:
    """Called by the native module after each traced call: its span, and one child span per
    Redis round trip, with the times the core measured, in the caller's current context.
    `result` is a Decision, a CombinedDecision (``allowed``, ``retry_after``) or None (a release
    decides nothing)."""
    for tracer in _tracers.get(backend_id, ()):
        attributes: dict[str, Any] = dict(inputs)
        if result is not None:
            attributes["ratekeeper.outcome"] = outcome_of(result)
            attributes["ratekeeper.retry_after"] = result.retry_after
        elif isinstance(error, OverLimit):
            # `acquire` refused within its wait: a decision, not a failure.
            attributes["ratekeeper.outcome"] = "refused"
            attributes["ratekeeper.retry_after"] = error.retry_after
            error = None
        elif error is not None:
            attributes["ratekeeper.outcome"] = "error"
        span = tracer.start_span(f"ratekeeper {method}", start_time=start, attributes=attributes)
        context = trace.set_span_in_context(span)
        for command, trip_start, trip_end, host, port, code in trips:
            db: dict[str, str | int] = {"db.system.name": "redis", "db.operation.name": command}
            if host is not None and port is not None:
                db["server.address"] = host
                db["server.port"] = port
            if code is not None:
                db["error.type"] = code
            child = tracer.start_span(command, context=context, kind=trace.SpanKind.CLIENT, start_time=trip_start,
                                      attributes=db)
            if code is not None:
                child.set_status(trace.StatusCode.ERROR)
            child.end(end_time=trip_end)
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(trace.StatusCode.ERROR)
        span.end(end_time=end)


def outcome_of(decision: Decision | CombinedDecision) -> str:
    """A decision's ``ratekeeper.outcome``: ``admitted``, ``refused`` or ``shadow_refused``
    (a failed-open or fallback answer is seen in the counts, not on a decision)."""
    if getattr(decision, "shadow_refused", False):
        return "shadow_refused"
    return "admitted" if decision.allowed else "refused"


def annotate(limiter: NativeLimiter, decision: Decision) -> None:
    """Adds a ``ratekeeper.decision`` event to the current span when one is recording: the
    limiter's name and kind, the outcome and ``retry_after`` (seconds). Never the key."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.add_event(
        "ratekeeper.decision",
        {
            "ratekeeper.limiter": limiter.name,
            "ratekeeper.kind": limiter.kind,
            "ratekeeper.outcome": outcome_of(decision),
            "ratekeeper.retry_after": decision.retry_after,
        },
    )
