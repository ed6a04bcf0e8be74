//! Traced calls (see `core/src/trace.rs`): while `ratekeeper.otel` traces a limiter's backend,
//! a sync `check`/`acquire` notes its Redis round trips and hands them, with the decision or the
//! error and the call's start and end, to `ratekeeper.otel._trace_call`, which makes the spans
//! in the caller's context. Untraced, a call pays the one branch of `Limiter::traced`.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::decision::Decision;

/// `ratekeeper.otel._trace_call`, imported at the first traced call (the module is loaded by then:
/// only its `instrument` turns tracing on).
static HOOK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

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
    let trips: Vec<_> = trips
        .iter()
        .map(|t| {
            let (host, port) = t.server.clone().map_or((None, None), |(h, p)| (Some(h), Some(p)));
            (t.command, epoch_nanos(t.start), epoch_nanos(t.end), host, port, t.error.clone())
        })
        .collect();
    let handed = HOOK
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("ratekeeper.otel")?.getattr("_trace_call")?.unbind()))
        .and_then(|hook| {
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
