//! ratekeeper's metrics through the OpenTelemetry API (feature `otel`, off by default), beside an
//! application's own: [`instrument`] registers observable counters on the `ratekeeper` meter of
//! the application's meter provider. At each collection their callbacks read
//! [`Backend::metrics_blocking`] (this process's counts, which the core keeps anyway), so a check
//! costs nothing more when instrumented. The names and attributes are those of the Python and
//! Node bindings (`ratekeeper.otel`, `ratekeeper/otel`) and of the docs' Observability page; the
//! limited key is never an attribute (one series per user would be unbounded cardinality).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::MeterProvider;
use opentelemetry::{InstrumentationScope, KeyValue};

use crate::{Backend, Metrics};

/// How one count is read from a limiter's metrics.
pub type Read = fn(&Metrics) -> u64;

/// `ratekeeper.outcome` values and how each is read from a limiter's counts. They partition the
/// checks: `refused` excludes the deny cache's local refusals, which are their own outcome.
pub const OUTCOMES: [(&str, Read); 7] = [
    ("admitted", |m| m.allowed),
    ("refused", |m| m.refused.saturating_sub(m.refused_locally)),
    ("shadow_refused", |m| m.shadow_refused),
    ("refused_locally", |m| m.refused_locally),
    ("failed_open", |m| m.failed_open),
    ("fallback", |m| m.fell_back),
    ("error", |m| m.errors),
];

/// One instrument's counts of a limiter: (attribute, value, count) per series.
type Counts = fn(&Metrics) -> Vec<(&'static str, &'static str, u64)>;

/// The instruments: name, unit, description, counts.
const COUNTERS: [(&str, &str, &str, Counts); 4] = [
    (
        "ratekeeper.decisions",
        "{decision}",
        "Checks by outcome (admitted, refused, shadow_refused, refused_locally, failed_open, fallback, error).",
        |m| OUTCOMES.iter().map(|(outcome, read)| ("ratekeeper.outcome", *outcome, read(m))).collect(),
    ),
    (
        "ratekeeper.holds",
        "{decision}",
        "Checks refused by a hold (a block: block_for after a refusal, or block by hand); also in ratekeeper.decisions.",
        |m| vec![("ratekeeper.hold", "block", m.blocked)],
    ),
    (
        "ratekeeper.settle.units",
        "{unit}",
        "Units settles charged (the call cost more than checked) or asked to refund (it cost less).",
        |m| vec![("ratekeeper.direction", "charged", m.settle_charged), ("ratekeeper.direction", "refunded", m.settle_refunded)],
    ),
    (
        "ratekeeper.leases.granted",
        "{lease}",
        "Leases granted by concurrent limiters, by whether the caller waited.",
        |m| vec![("ratekeeper.wait", "immediate", m.immediate), ("ratekeeper.wait", "waited", m.waited)],
    ),
];

/// What [`instrument`] registered; [`Instrumentation::close`] (or dropping it) stops its
/// reports. The OpenTelemetry API cannot take an instrument back: a closed instrumentation's
/// callbacks report nothing.
#[derive(Debug)]
pub struct Instrumentation {
    open: Arc<AtomicBool>,
}

impl Instrumentation {
    /// Stops reporting the backend.
    pub fn close(&self) {
        self.open.store(false, Ordering::Relaxed);
    }
}

impl Drop for Instrumentation {
    fn drop(&mut self) {
        self.close();
    }
}

/// Reports `backend`'s metrics (this process's) through the OpenTelemetry API on the
/// `ratekeeper` meter of `provider` (`opentelemetry::global::meter_provider()` for the global
/// one). Keep the returned [`Instrumentation`] as long as the reports should go on.
///
/// Each instrument is `ratekeeper.<name>` with the attributes `ratekeeper.limiter` and
/// `ratekeeper.kind`, plus `ratekeeper.outcome` (decisions), `ratekeeper.hold` (holds),
/// `ratekeeper.direction` (settle.units) or `ratekeeper.wait` (leases.granted). A limiter with no
/// count of an instrument is not a series of it.
pub fn instrument<P: MeterProvider + ?Sized>(backend: &Backend, provider: &P) -> Instrumentation {
    let meter = provider
        .meter_with_scope(InstrumentationScope::builder("ratekeeper").with_version(env!("CARGO_PKG_VERSION")).build());
    let open = Arc::new(AtomicBool::new(true));
    for (name, unit, description, counts) in COUNTERS {
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
                        let attributes = [
                            KeyValue::new("ratekeeper.limiter", limiter.clone()),
                            KeyValue::new("ratekeeper.kind", kind.as_str()),
                            KeyValue::new(key, value),
                        ];
                        observer.observe(n, &attributes);
                    }
                }
            })
            .build();
    }
    Instrumentation { open }
}
