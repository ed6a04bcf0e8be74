//! ratekeeper's metrics through the OpenTelemetry API (feature `otel`, off by default), beside an
//! application's own: [`instrument`] registers observable counters on the `ratekeeper` meter of
//! the application's meter provider. At each collection their callbacks read
//! [`Backend::metrics_blocking`] (this process's counts, which the core keeps anyway). The
//! duration histograms (`ratekeeper.check.duration`, `ratekeeper.wait.duration`) are
//! synchronous instruments fed at each collection from the core's timings of the calls since
//! the last one ([`Backend::durations`], see [`crate::observe`]): no check calls into the SDK.
//! The names and attributes are those of the Python and Node bindings (`ratekeeper.otel`,
//! `ratekeeper/otel`) and of the docs' Observability page; the limited key is never an
//! attribute (one series per user would be unbounded cardinality). [`traced`] (blocking) and
//! [`traced_async`] make the spans of a call the application wraps in them (its call and its
//! Redis round trips); [`traced_call`] and [`traced_call_async`] those of any call a
//! [`CallSpan`] describes (`check_all`, `settle`…).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::metrics::{Histogram, MeterProvider};
use opentelemetry::{InstrumentationScope, KeyValue};

use crate::metrics::{self, Counter};
use crate::observe::{Call, DURATION_BOUNDS, DURATION_BUCKETS};
use crate::{Backend, Metrics};

/// How one count is read from a limiter's metrics.
pub type Read = fn(&Metrics) -> u64;

/// `ratekeeper.outcome` values and how each is read from a limiter's counts (the metrics' table
/// of outcomes). They partition the checks: `refused` excludes the deny cache's local refusals,
/// which are their own outcome.
pub const OUTCOMES: [(&str, Read); metrics::OUTCOMES.len()] = {
    let mut outcomes: [(&str, Read); metrics::OUTCOMES.len()] = [("", |_| 0); metrics::OUTCOMES.len()];
    let mut i = 0;
    while i < outcomes.len() {
        outcomes[i] = (metrics::OUTCOMES[i].name, metrics::OUTCOMES[i].read);
        i += 1;
    }
    outcomes
};

/// One instrument's counts of a limiter: (attribute, value, count) per series.
type Counts = fn(&Metrics) -> Vec<(&'static str, &'static str, u64)>;

/// The instruments: name, unit, description, counts.
fn counters() -> [(&'static str, &'static str, String, Counts); 4] {
    let outcomes: Vec<&str> = OUTCOMES.iter().map(|(outcome, _)| *outcome).collect();
    let holds: Vec<&str> = metrics::HOLDS.iter().map(|(_, means, _)| *means).collect();
    [
        ("ratekeeper.decisions", "{decision}", format!("Checks by outcome ({}).", outcomes.join(", ")), |m| {
            OUTCOMES.iter().map(|(outcome, read)| ("ratekeeper.outcome", *outcome, read(m))).collect()
        }),
        (
            "ratekeeper.holds",
            "{decision}",
            format!("Checks refused by a hold ({}); also in ratekeeper.decisions.", holds.join(", or ")),
            |m| metrics::HOLDS.iter().map(|(role, _, read)| ("ratekeeper.hold", *role, read(m))).collect(),
        ),
        (
            "ratekeeper.settle.units",
            "{unit}",
            "Units settles charged (the call cost more than checked) or asked to refund (it cost less).".into(),
            |m| {
                vec![
                    ("ratekeeper.direction", "charged", m.settle_charged),
                    ("ratekeeper.direction", "refunded", m.settle_refunded),
                ]
            },
        ),
        (
            "ratekeeper.leases.granted",
            "{lease}",
            "Leases granted by concurrent limiters, by whether the caller waited.".into(),
            |m| vec![("ratekeeper.wait", "immediate", m.immediate), ("ratekeeper.wait", "waited", m.waited)],
        ),
    ]
}

/// What [`instrument`] registered; [`Instrumentation::close`] (or dropping it) stops its
/// reports. The OpenTelemetry API cannot take an instrument back: a closed instrumentation's
/// callbacks report nothing.
#[derive(Debug)]
pub struct Instrumentation {
    open: Arc<AtomicBool>,
    backend: Backend,
}

impl Instrumentation {
    /// Stops reporting the backend (and timing its calls for this instrumentation).
    pub fn close(&self) {
        if self.open.swap(false, Ordering::Relaxed) {
            self.backend.stop_observing();
        }
    }
}

impl Drop for Instrumentation {
    fn drop(&mut self) {
        self.close();
    }
}

/// Reports `backend`'s metrics (this process's) through the OpenTelemetry API on the
/// `ratekeeper` meter of `provider` (`opentelemetry::global::meter_provider()` for the global
/// one). Keep the returned [`Instrumentation`] as long as the reports should go on; while it
/// lives, the backend's calls are timed ([`Backend::start_observing`]).
///
/// Each instrument is `ratekeeper.<name>` with the attributes `ratekeeper.limiter` and
/// `ratekeeper.kind`, plus `ratekeeper.outcome` (decisions, check.duration, wait.duration),
/// `ratekeeper.hold` (holds), `ratekeeper.direction` (settle.units) or `ratekeeper.wait`
/// (leases.granted); `ratekeeper.leases.held` is an up-down counter of the leases this process
/// holds. A limiter with no count of an instrument is not a series of it.
pub fn instrument<P: MeterProvider + ?Sized>(backend: &Backend, provider: &P) -> Instrumentation {
    let meter = provider
        .meter_with_scope(InstrumentationScope::builder("ratekeeper").with_version(env!("CARGO_PKG_VERSION")).build());
    let open = Arc::new(AtomicBool::new(true));
    for (name, unit, description, counts) in counters() {
        let (backend, open) = (backend.clone(), open.clone());
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(move |observer| {
                if !open.load(Ordering::Relaxed) {
                    return;
                }
                // This process's counts: no Redis call is made (`fleet` is false).
                let Ok(rows) = backend.metrics_blocking(false) else { return };
                for (limiter, kind, m) in rows {
                    let values = counts(&m);
                    // Cumulative counts: a series, once non-zero, stays.
                    if values.iter().all(|(_, _, n)| *n == 0) {
                        continue;
                    }
                    for (key, value, n) in values {
                        observer.observe(n, &attributes(&limiter, kind.as_str(), key, value));
                    }
                }
            })
            .build();
    }
    let histograms = [Call::Check, Call::Wait].map(|call| {
        meter
            .f64_histogram(call.instrument())
            .with_unit("s")
            .with_description(match call {
                Call::Check => "Duration of checks, by outcome.",
                Call::Wait => {
                    "Duration of calls that may wait (acquire, within_limit) until admitted, refused or failed."
                }
            })
            .with_boundaries(DURATION_BOUNDS.to_vec())
            .build()
    });
    let replayed = Replayed { histograms, seen: Mutex::new((HashMap::new(), Instant::now())) };
    // Calls timed before this instrumentation are not its to report.
    replayed.skip(backend);
    let (held_backend, held_open) = (backend.clone(), open.clone());
    meter
        .i64_observable_up_down_counter("ratekeeper.leases.held")
        .with_unit("{lease}")
        .with_description("Leases of concurrent limiters this process holds (granted, not yet released).")
        .with_callback(move |observer| {
            if !held_open.load(Ordering::Relaxed) {
                return;
            }
            // The collection's one read of the timings: the histograms' new values are
            // recorded before the SDK reads them.
            replayed.record(&held_backend);
            let Ok(rows) = held_backend.metrics_blocking(false) else { return };
            for (limiter, kind, m) in rows.into_iter().filter(|(_, kind, _)| *kind == crate::Kind::Concurrent) {
                let held = i64::try_from(m.leases_held()).unwrap_or(i64::MAX);
                observer.observe(held, &attributes(&limiter, kind.as_str(), "", ""));
            }
        })
        .build();
    backend.start_observing();
    Instrumentation { open, backend: backend.clone() }
}

/// A series' attributes: the limiter's name and kind, and one more when `key` is not empty.
fn attributes(limiter: &str, kind: &'static str, key: &'static str, value: &'static str) -> Vec<KeyValue> {
    let mut out = vec![KeyValue::new("ratekeeper.limiter", limiter.to_owned()), KeyValue::new("ratekeeper.kind", kind)];
    if !key.is_empty() {
        out.push(KeyValue::new(key, value));
    }
    out
}

/// Per-series counts and sums already recorded, by (limiter, kind, call, outcome).
type Seen = HashMap<(String, &'static str, usize, &'static str), ([u64; DURATION_BUCKETS], [u64; DURATION_BUCKETS])>;

/// The share of the time between two collections that recording durations may take: at an
/// SDK's default 60 s interval [`MAX_RECORDING`] binds first (1.7%); with frequent collections
/// this keeps an instrumented process's recording as small.
const RECORD_SHARE: f64 = 0.02;
/// Values recorded between two readings of the clock past the free ones.
const CHUNK: u64 = 16;
/// A collection records this many values whatever the time, and never for longer than
/// [`MAX_RECORDING`].
const FREE_RECORDS: u64 = 100;
const MAX_RECORDING: Duration = Duration::from_secs(1);

/// The duration histograms and what of the backend's timings they hold.
struct Replayed {
    histograms: [Histogram<f64>; 2],
    seen: Mutex<(Seen, Instant)>,
}

impl Replayed {
    /// Marks every call timed so far as recorded (calls before an instrumentation are not its).
    fn skip(&self, backend: &Backend) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for (limiter, kind, all) in backend.durations() {
            for series in all {
                let id = (limiter.clone(), kind.as_str(), series.call as usize, series.outcome);
                seen.0.insert(id, (series.counts, series.sums_nanos));
            }
        }
    }

    /// Records the calls timed since the last collection: per bucket, its new calls at their
    /// mean (the mean of durations in a bucket lies in it). Past its first [`FREE_RECORDS`]
    /// values, recording takes at most [`RECORD_SHARE`] of the time since the last collection:
    /// an SDK's `record` costs more than a memory check. What is left is recorded at the next
    /// collections, so counts and sums stay exact, late.
    fn record(&self, backend: &Backend) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, last) = &mut *seen;
        let now = Instant::now();
        let until = now + now.duration_since(*last).mul_f64(RECORD_SHARE).min(MAX_RECORDING);
        *last = now;
        let mut free = FREE_RECORDS;
        for (limiter, kind, all) in backend.durations() {
            for series in all {
                let id = (limiter.clone(), kind.as_str(), series.call as usize, series.outcome);
                let (counts, sums) = seen.entry(id).or_insert(([0; DURATION_BUCKETS], [0; DURATION_BUCKETS]));
                let attributes = attributes(&limiter, kind.as_str(), "ratekeeper.outcome", series.outcome);
                for i in 0..DURATION_BUCKETS {
                    let new = series.counts[i].saturating_sub(counts[i]);
                    if new == 0 {
                        // A dropped limiter object takes its timings along: never below zero.
                        (counts[i], sums[i]) = (series.counts[i], series.sums_nanos[i]);
                        continue;
                    }
                    let value = series.sums_nanos[i].saturating_sub(sums[i]) as f64 / new as f64 / 1e9;
                    let mut done = 0;
                    while done < new && (free > 0 || Instant::now() < until) {
                        let chunk = (new - done).min(if free > 0 { free } else { CHUNK });
                        for _ in 0..chunk {
                            self.histograms[series.call as usize].record(value, &attributes);
                        }
                        done += chunk;
                        free = free.saturating_sub(chunk);
                    }
                    counts[i] += done;
                    sums[i] =
                        if done == new { series.sums_nanos[i] } else { sums[i] + (value * 1e9 * done as f64) as u64 };
                }
            }
        }
    }
}

/// A traced call's span before it is made: its name (`ratekeeper {method}`) and the attributes
/// its inputs give (who it is of; for a settle, what it settles). Build one with [`CallSpan::of`],
/// [`CallSpan::of_all`] or [`CallSpan::settle`], and trace the call with [`traced_call`] or
/// [`traced_call_async`] ([`traced`] and [`traced_async`] are the one-limiter shorthands).
#[derive(Debug, Clone)]
pub struct CallSpan {
    name: String,
    attributes: Vec<KeyValue>,
}

impl CallSpan {
    /// A call named `method` (`check`, `acquire`, `peek`, `release`…) of `limiter`: its name and kind.
    pub fn of(limiter: &crate::Limiter, method: &str) -> CallSpan {
        CallSpan {
            name: format!("ratekeeper {method}"),
            attributes: vec![
                KeyValue::new("ratekeeper.limiter", limiter.name().to_owned()),
                KeyValue::new("ratekeeper.kind", limiter.kind().as_str()),
            ],
        }
    }

    /// A call named `method` (`check_all`, `acquire_all`) over `limiters`, the parts' limiters in
    /// order: their names as the array `ratekeeper.limiters`.
    pub fn of_all(limiters: &[&crate::Limiter], method: &str) -> CallSpan {
        let names: Vec<opentelemetry::StringValue> = limiters.iter().map(|l| l.name().to_owned().into()).collect();
        CallSpan {
            name: format!("ratekeeper {method}"),
            attributes: vec![KeyValue::new("ratekeeper.limiters", opentelemetry::Value::Array(names.into()))],
        }
    }

    /// A settle of `decision` to `actual` by `limiter`: `ratekeeper.direction` (`charged` when
    /// the call cost more than checked, `refunded` when less; absent when equal) and
    /// `ratekeeper.units`, the difference, as the `ratekeeper.settle.units` counter has them.
    pub fn settle(limiter: &crate::Limiter, decision: &crate::Decision, actual: u64) -> CallSpan {
        let mut span = CallSpan::of(limiter, "settle");
        if let Some(ticket) = &decision.settle {
            if let Some(direction) = settle_direction(ticket.cost, actual) {
                span.attributes.push(KeyValue::new("ratekeeper.direction", direction));
            }
            let units = i64::try_from(actual.abs_diff(ticket.cost)).unwrap_or(i64::MAX);
            span.attributes.push(KeyValue::new("ratekeeper.units", units));
        }
        span
    }
}

/// `charged` when a settle's `actual` cost is above the `checked` one, `refunded` when below.
fn settle_direction(checked: u64, actual: u64) -> Option<&'static str> {
    match actual.cmp(&checked) {
        std::cmp::Ordering::Greater => Some("charged"),
        std::cmp::Ordering::Less => Some("refunded"),
        std::cmp::Ordering::Equal => None,
    }
}

/// What a traced call's result says on its span: `ratekeeper.outcome` and
/// `ratekeeper.retry_after` for a decision, `error.type` (an [`crate::ErrorKind`]) for a failure.
pub trait Traced {
    /// The outcome (`None`: the call decides nothing, as a release), its `retry_after`, and the
    /// error's kind when the call failed.
    fn traced(&self) -> (Option<&'static str>, Option<Duration>, Option<String>);
}

impl Traced for crate::Result<crate::Decision> {
    fn traced(&self) -> (Option<&'static str>, Option<Duration>, Option<String>) {
        match self {
            Ok(d) => (Some(Counter::of_decision(d).outcome_name()), Some(d.retry_after), None),
            Err(e) => failed(e),
        }
    }
}

impl Traced for crate::Result<crate::CombinedDecision> {
    fn traced(&self) -> (Option<&'static str>, Option<Duration>, Option<String>) {
        match self {
            Ok(c) => {
                let counter = if c.allowed { Counter::Allowed } else { Counter::Refused };
                (Some(counter.outcome_name()), Some(c.retry_after), None)
            }
            Err(e) => failed(e),
        }
    }
}

impl Traced for crate::Result<()> {
    fn traced(&self) -> (Option<&'static str>, Option<Duration>, Option<String>) {
        match self {
            Ok(()) => (None, None, None),
            Err(e) => failed(e),
        }
    }
}

/// A failed call's span: a waiting call that ran out of wait is a refusal, not a failure.
fn failed(e: &crate::Error) -> (Option<&'static str>, Option<Duration>, Option<String>) {
    match e {
        crate::Error::OverLimit { retry_after } => (Some(Counter::Refused.outcome_name()), Some(*retry_after), None),
        e => (Some(Counter::Errors.outcome_name()), None, Some(format!("{:?}", e.kind()))),
    }
}

/// Runs `call` (a blocking call named `method` of `limiter`: `check`, `acquire`, `peek`,
/// `release`…) and makes its spans on `tracer`, as the Python and Node bindings do for a traced
/// backend: a span `ratekeeper {method}` in the current context (the limiter's name and kind,
/// the outcome and `ratekeeper.retry_after`; never the key), with a client span per Redis round
/// trip the call made (`db.system.name` `redis`, `db.operation.name` the command,
/// `server.address`/`server.port`; never a key or an argument), each with the times the core
/// measured. The Rust API has no hook for [`instrument`] to trace through, so a Rust
/// application wraps the calls it wants traced; untraced calls pay nothing.
pub fn traced<T: opentelemetry::trace::Tracer, R: Traced>(
    tracer: &T,
    limiter: &crate::Limiter,
    method: &str,
    call: impl FnOnce() -> R,
) -> R
where
    T::Span: Send + Sync + 'static,
{
    traced_call(tracer, CallSpan::of(limiter, method), call)
}

/// [`traced`] for an async call (`check`, `acquire`, …): the round trips are those its task
/// makes, wherever the runtime polls it; the span's parent is the context current when this
/// is called.
pub async fn traced_async<T: opentelemetry::trace::Tracer, R: Traced>(
    tracer: &T,
    limiter: &crate::Limiter,
    method: &str,
    call: impl std::future::Future<Output = R>,
) -> R
where
    T::Span: Send + Sync + 'static,
{
    traced_call_async(tracer, CallSpan::of(limiter, method), call).await
}

/// Runs the blocking `call` and makes its spans (see [`traced`]) as `span` describes it.
pub fn traced_call<T: opentelemetry::trace::Tracer, R: Traced>(
    tracer: &T,
    span: CallSpan,
    call: impl FnOnce() -> R,
) -> R
where
    T::Span: Send + Sync + 'static,
{
    let parent = opentelemetry::Context::current();
    let start = std::time::SystemTime::now();
    let (result, trips) = crate::trace::collect(call);
    make_spans(tracer, &parent, span, start, &result, trips);
    result
}

/// Runs the async `call` and makes its spans (see [`traced_async`]) as `span` describes it.
pub async fn traced_call_async<T: opentelemetry::trace::Tracer, R: Traced>(
    tracer: &T,
    span: CallSpan,
    call: impl std::future::Future<Output = R>,
) -> R
where
    T::Span: Send + Sync + 'static,
{
    let parent = opentelemetry::Context::current();
    let start = std::time::SystemTime::now();
    let collector = crate::trace::Collector::default();
    let result = crate::trace::collect_into(collector.clone(), call).await;
    make_spans(tracer, &parent, span, start, &result, collector.take());
    result
}

/// A finished call's span (from `start` to now, in `parent`) and its round trips' child spans.
fn make_spans<T: opentelemetry::trace::Tracer, R: Traced>(
    tracer: &T,
    parent: &opentelemetry::Context,
    span: CallSpan,
    start: std::time::SystemTime,
    result: &R,
    trips: Vec<crate::trace::RoundTrip>,
) where
    T::Span: Send + Sync + 'static,
{
    use opentelemetry::trace::{SpanKind, Status, TraceContextExt};

    let end = std::time::SystemTime::now();
    let CallSpan { name, mut attributes } = span;
    let (outcome, retry_after, failed) = result.traced();
    if let Some(outcome) = outcome {
        attributes.push(KeyValue::new("ratekeeper.outcome", outcome));
    }
    if let Some(retry_after) = retry_after {
        attributes.push(KeyValue::new("ratekeeper.retry_after", retry_after.as_secs_f64()));
    }
    if let Some(kind) = &failed {
        attributes.push(KeyValue::new("error.type", kind.clone()));
    }
    let span =
        tracer.span_builder(name).with_start_time(start).with_attributes(attributes).start_with_context(tracer, parent);
    let context = parent.with_span(span);
    for trip in trips {
        let mut db = vec![KeyValue::new("db.system.name", "redis"), KeyValue::new("db.operation.name", trip.command)];
        if let Some((host, port)) = trip.server {
            db.push(KeyValue::new("server.address", host));
            db.push(KeyValue::new("server.port", i64::from(port)));
        }
        if let Some(code) = &trip.error {
            db.push(KeyValue::new("error.type", code.clone()));
        }
        let mut child = tracer
            .span_builder(trip.command)
            .with_kind(SpanKind::Client)
            .with_start_time(trip.start)
            .with_attributes(db)
            .start_with_context(tracer, &context);
        if let Some(code) = trip.error {
            opentelemetry::trace::Span::set_status(&mut child, Status::error(code));
        }
        opentelemetry::trace::Span::end_with_timestamp(&mut child, trip.end);
    }
    let span = context.span();
    if let Some(kind) = failed {
        span.set_status(Status::error(kind));
    }
    span.end_with_timestamp(end);
}
