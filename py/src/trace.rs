//! Traced calls (see `core/src/trace.rs`): while `ratekeeper.otel` traces a limiter's backend,
//! a sync `check`/`acquire` notes its Redis round trips and hands them, with the decision or the
//! error and the call's start and end, to `ratekeeper.otel._trace_call`, which makes the spans
//! in the caller's context. An asyncio call (`acheck`, `aacquire`) runs on the core's runtime:
//! its task notes its round trips into a [`RoundTrips`] collector, and its future gets a done
//! callback (`ratekeeper.otel._trace_future`) that makes its spans, in the context the call was
//! made in. Untraced, a call pays the one branch of `Limiter::traced`.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::decision::Decision;

/// `ratekeeper.otel._trace_call`, imported at the first traced call (the module is loaded by then:
/// only its `instrument` turns tracing on).
static HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `ratekeeper.otel._trace_future`, likewise.
static FUTURE_HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// When a call of `limiter` starts, if its backend is traced (ns since the epoch).
#[inline]
pub(crate) fn started(limiter: &ratekeeper::Limiter) -> Option<u64> {
    limiter.traced().then(|| epoch_nanos(SystemTime::now()))
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

/// Hands an asyncio call's `future` (a call named `method` of `limiter`, `started` if traced,
/// its task's round trips noted into `collector`) to the hook, which makes its spans when it
/// is done.
pub(crate) fn traced_future(
    py: Python<'_>,
    limiter: &ratekeeper::Limiter,
    method: &'static str,
    future: &Bound<'_, PyAny>,
    started: Option<u64>,
    collector: Option<ratekeeper::trace::Collector>,
) {
    let Some(start) = started else { return };
    let handed = import(py, &FUTURE_HOOK, "_trace_future").and_then(|hook| {
        let trips = collector.map(|c| Py::new(py, RoundTrips(c))).transpose()?;
        hook.call1(py, (future, limiter.backend_id(), method, limiter.name(), limiter.kind().as_str(), start, trips))
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

/// Runs `call` (a call named `method` of `limiter`) with its round trips noted, then hands it to
/// the hook. A failing hook is reported as unraisable: tracing never changes a call's result.
pub(crate) fn traced(
    py: Python<'_>,
    limiter: &ratekeeper::Limiter,
    method: &'static str,
    call: impl FnOnce() -> PyResult<Decision>,
) -> PyResult<Py<Decision>> {
    let start = epoch_nanos(SystemTime::now());
    let (result, trips) = ratekeeper::trace::collect(call);
    let end = epoch_nanos(SystemTime::now());
    let result = result.and_then(|d| Py::new(py, d));
    let (decision, error) = match &result {
        Ok(d) => (Some(d.clone_ref(py)), None),
        Err(e) => (None, Some(e.value(py).clone().unbind())),
    };
    let trips = rows(&trips);
    let handed = import(py, &HOOK, "_trace_call").and_then(|hook| {
        hook.call1(
            py,
            (limiter.backend_id(), method, limiter.name(), limiter.kind().as_str(), decision, error, start, end, trips),
        )
    });
    if let Err(e) = handed {
        e.write_unraisable(py, None);
    }
    result
}
