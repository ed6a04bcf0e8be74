//! ratekeeper's metrics through the OpenTelemetry API (feature `otel`, off by default), beside an
//! application's own: [`instrument`] registers observable counters on the `ratekeeper` meter of
//! the application's meter provider. At each collection their callbacks read
//! [`Backend::metrics_blocking`] (this process's counts, which the core keeps anyway). The
//! duration histograms (`ratekeeper.check.duration`, `ratekeeper.wait.duration`) are
//! synchronous instruments fed at each collection from the core's timings of the calls since
//! the last one ([`Backend::durations`], see [`crate::observe`]): no check calls into the SDK.
//! The names and attributes are those of the Python and Node bindings (`ratekeeper.otel`,
//! `ratekeeper/otel`) and of the docs' Observability page; the limited key is never an
//! attribute (one series per user would be unbounded cardinality). [`traced`] makes the spans of
//! a blocking call the application wraps in it (its call and its Redis round trips).

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

/// The share of the time between two collections that recording durations may take.
const RECORD_SHARE: f64 = 0.05;
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
                        let chunk = (new - done).min(256);
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

/// Runs `call` (a blocking call named `method` of `limiter`: `check`, `acquire`) and makes its
/// spans on `tracer`, as the Python and Node bindings do for a traced backend: a span
/// `ratekeeper {method}` in the current context (the limiter's name and kind, the outcome and
/// `ratekeeper.retry_after`; never the key), with a client span per Redis round trip the call made
/// (`db.system.name` `redis`, `db.operation.name` the command, `server.address`/`server.port`;
/// never a key or an argument), each with the times the core measured. The Rust API has no
/// hook for [`instrument`] to trace through, so a Rust application wraps the calls it wants
/// traced; untraced calls pay nothing.
pub fn traced<T: opentelemetry::trace::Tracer>(
    tracer: &T,
    limiter: &crate::Limiter,
    method: &'static str,
    call: impl FnOnce() -> crate::Result<crate::Decision>,
) -> crate::Result<crate::Decision>
where
    T::Span: Send + Sync + 'static,
{
    use opentelemetry::trace::{SpanKind, Status, TraceContextExt};

    let start = std::time::SystemTime::now();
    let (result, trips) = crate::trace::collect(call);
    let end = std::time::SystemTime::now();
    let mut attributes = vec![
        KeyValue::new("ratekeeper.limiter", limiter.name().to_owned()),
        KeyValue::new("ratekeeper.kind", limiter.kind().as_str()),
    ];
    let (outcome, retry_after, failed) = match &result {
        Ok(d) => (Counter::of_decision(d).outcome_name(), Some(d.retry_after), None),
        // An acquire that ran out of wait: a refusal, not a failure.
        Err(crate::Error::OverLimit { retry_after }) => (Counter::Refused.outcome_name(), Some(*retry_after), None),
        Err(e) => (Counter::Errors.outcome_name(), None, Some(format!("{:?}", e.kind()))),
    };
    attributes.push(KeyValue::new("ratekeeper.outcome", outcome));
    if let Some(retry_after) = retry_after {
        attributes.push(KeyValue::new("ratekeeper.retry_after", retry_after.as_secs_f64()));
    }
    if let Some(kind) = &failed {
        attributes.push(KeyValue::new("error.type", kind.clone()));
    }
    let parent = opentelemetry::Context::current();
    let span = tracer
        .span_builder(format!("ratekeeper {method}"))
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
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
    result
}
