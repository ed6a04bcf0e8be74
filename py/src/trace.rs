//! Traced calls (see `core/src/trace.rs`): while `ratekeeper.otel` traces a limiter's backend,
//! a sync call (`check`, `acquire`, `peek`, `settle`, `release`, the backend's `check_all` and
//! `acquire_all`) notes its Redis round trips and hands them, with the span's attributes
//! ([`Subject`]), the result or the error and the call's start and end, to
//! `ratekeeper.otel._trace_call`, which makes the spans in the caller's context. An asyncio call
//! (`acheck`, `aacquire`, `apeek`, `asettle`, `arelease`, …) runs on the core's runtime:
//! its task notes its round trips into a [`RoundTrips`] collector, and its future gets a done
//! callback (`ratekeeper.otel._trace_future`) that makes its spans, in the context the call was
//! made in. Untraced, a call pays the one branch of `Limiter::traced`.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// `ratekeeper.otel._trace_call`, imported at the first traced call (the module is loaded by then:
/// only its `instrument` turns tracing on).
static HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `ratekeeper.otel._trace_future`, likewise.
static FUTURE_HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// When a call of `limiter` starts, if its backend is traced (ns since the epoch).
#[inline]
pub(crate) fn started(limiter: &ratekeeper::Limiter) -> Option<u64> {
    limiter.traced().then(now)
}

/// Now, as a traced call's start (ns since the epoch).
pub(crate) fn now() -> u64 {
    epoch_nanos(SystemTime::now())
}

/// Who a traced call is of, as its span says it: the backend (which tracers) and the span's
/// attributes from the call's inputs (never a key).
pub(crate) struct Subject {
    backend_id: usize,
    attributes: Vec<(&'static str, Attribute)>,
}

/// An attribute's value.
#[derive(IntoPyObject)]
enum Attribute {
    Text(String),
    Number(u64),
    Texts(Vec<String>),
}

impl Subject {
    /// A call of `limiter`: its name and kind.
    pub(crate) fn of(limiter: &ratekeeper::Limiter) -> Subject {
        Subject {
            backend_id: limiter.backend_id(),
            attributes: vec![
                ("ratekeeper.limiter", Attribute::Text(limiter.name().to_owned())),
                ("ratekeeper.kind", Attribute::Text(limiter.kind().as_str().to_owned())),
            ],
        }
    }

    /// A call over several limiters (`check_all`, `acquire_all`): their names, in order.
    pub(crate) fn of_all<'a>(backend_id: usize, limiters: impl Iterator<Item = &'a ratekeeper::Limiter>) -> Subject {
        let names = limiters.map(|l| l.name().to_owned()).collect();
        Subject { backend_id, attributes: vec![("ratekeeper.limiters", Attribute::Texts(names))] }
    }

    /// A settle of `decision` to `actual` by `limiter`: the direction (`charged`, `refunded`;
    /// none when equal) and the units, as `ratekeeper.settle.units` counts them.
    pub(crate) fn settle(limiter: &ratekeeper::Limiter, decision: &ratekeeper::Decision, actual: u64) -> Subject {
        let mut subject = Subject::of(limiter);
        if let Some(ticket) = &decision.settle {
            if actual != ticket.cost {
                let direction = if actual > ticket.cost { "charged" } else { "refunded" };
                subject.attributes.push(("ratekeeper.direction", Attribute::Text(direction.to_owned())));
            }
            subject.attributes.push(("ratekeeper.units", Attribute::Number(actual.abs_diff(ticket.cost))));
        }
        subject
    }
}

/// A traced call's result as the hook takes it: the decision (or combined decision), or None.
pub(crate) trait Outcome {
    /// The object the hook reads the outcome from.
    fn for_hook(&self, py: Python<'_>) -> Py<PyAny>;
}

impl<T> Outcome for Py<T> {
    fn for_hook(&self, py: Python<'_>) -> Py<PyAny> {
        self.clone_ref(py).into_any()
    }
}

impl Outcome for () {
    fn for_hook(&self, py: Python<'_>) -> Py<PyAny> {
        py.None()
    }
}

/// The round trips an asyncio call's task notes, for `_trace_future` to take once the call is
/// done (internal: never exported).
#[pyclass(frozen)]
pub(crate) struct RoundTrips(pub(crate) ratekeeper::trace::Collector);

#[pymethods]
impl RoundTrips {
    /// The round trips noted so far, as `_trace_call` takes them.
    fn take(&self) -> Vec<Trip> {
        rows(&self.0.take())
    }
}

/// One round trip for the hook: command, start and end (ns since the epoch), host, port, error.
type Trip = (&'static str, u64, u64, Option<String>, Option<u16>, Option<String>);

fn rows(trips: &[ratekeeper::trace::RoundTrip]) -> Vec<Trip> {
    trips
        .iter()
        .map(|t| {
            let (host, port) = t.server.clone().map_or((None, None), |(h, p)| (Some(h), Some(p)));
            (t.command, epoch_nanos(t.start), epoch_nanos(t.end), host, port, t.error.clone())
        })
        .collect()
}

/// A collector for a traced asyncio call's task (`started`: the call is traced).
pub(crate) fn collector(started: Option<u64>) -> Option<ratekeeper::trace::Collector> {
    started.map(|_| ratekeeper::trace::Collector::default())
}

/// Runs `call` with its round trips noted into `collector`, if there is one.
pub(crate) async fn noted<F: std::future::Future>(
    collector: Option<ratekeeper::trace::Collector>,
    call: F,
) -> F::Output {
    match collector {
        Some(collector) => ratekeeper::trace::collect_into(collector, call).await,
        None => call.await,
    }
}

/// Hands an asyncio call's `future` (a call named `method` of `subject`, `started` if traced,
/// its task's round trips noted into `collector`) to the hook, which makes its spans when it
/// is done.
pub(crate) fn traced_future(
    py: Python<'_>,
    subject: impl FnOnce() -> Subject,
    method: &'static str,
    future: &Bound<'_, PyAny>,
    started: Option<u64>,
    collector: Option<ratekeeper::trace::Collector>,
) {
    let Some(start) = started else { return };
    let handed = import(py, &FUTURE_HOOK, "_trace_future").and_then(|hook| {
        let trips = collector.map(|c| Py::new(py, RoundTrips(c))).transpose()?;
        let Subject { backend_id, attributes } = subject();
        hook.call1(py, (future, backend_id, method, attributes, start, trips))
    });
    if let Err(e) = handed {
        e.write_unraisable(py, None);
    }
}

/// The function `name` of `ratekeeper.otel`, imported once into `cell`.
fn import<'a>(py: Python<'_>, cell: &'a PyOnceLock<Py<PyAny>>, name: &str) -> PyResult<&'a Py<PyAny>> {
    cell.get_or_try_init(py, || Ok(py.import("ratekeeper.otel")?.getattr(name)?.unbind()))
}

/// Nanoseconds since the Unix epoch (OpenTelemetry's span times).
fn epoch_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Runs `call` (a call named `method` of `subject`) with its round trips noted, then hands it
/// to the hook. A failing hook is reported as unraisable: tracing never changes a call's result.
pub(crate) fn traced<R: Outcome>(
    py: Python<'_>,
    subject: Subject,
    method: &'static str,
    call: impl FnOnce() -> PyResult<R>,
) -> PyResult<R> {
    let start = epoch_nanos(SystemTime::now());
    let (result, trips) = ratekeeper::trace::collect(call);
    let end = epoch_nanos(SystemTime::now());
    let (outcome, error) = match &result {
        Ok(r) => (r.for_hook(py), None),
        Err(e) => (py.None(), Some(e.value(py).clone().unbind())),
    };
    let trips = rows(&trips);
    let Subject { backend_id, attributes } = subject;
    let handed = import(py, &HOOK, "_trace_call")
        .and_then(|hook| hook.call1(py, (backend_id, method, attributes, outcome, error, start, end, trips)));
    if let Err(e) = handed {
        e.write_unraisable(py, None);
    }
    result
}
