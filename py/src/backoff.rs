//! `Backoff`: the core's reschedule policy for over-limit jobs (Sidekiq's), with an optional
//! Python function replacing `base · attempt`.

use std::time::Duration;

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::{type_hint_identifier, Borrowed};
use ratekeeper::params::timeout_from_secs;

use crate::args::{
    invalid, Float, PAttempt, PBase, PDelay, PJitter, PMaxReschedules, PRetryAfter, PSeed, Timeout, UInt,
};
use crate::errors::guard;

/// `Callable[[int], float]`, for the generated stub.
const DELAY_FN: PyStaticExpr = PyStaticExpr::Subscript {
    value: &type_hint_identifier!("collections.abc", "Callable"),
    slice: &PyStaticExpr::Tuple {
        elts: &[
            PyStaticExpr::List { elts: &[type_hint_identifier!("builtins", "int")] },
            type_hint_identifier!("builtins", "float"),
        ],
    },
};

/// The `delay` argument: a callable `attempt -> seconds`.
pub(crate) struct DelayFn(Py<PyAny>);

impl<'a, 'py> FromPyObject<'a, 'py> for DelayFn {
    type Error = PyErr;
    const INPUT_TYPE: PyStaticExpr = DELAY_FN;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if !obj.is_callable() {
            let name = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
            return Err(invalid(obj.py(), "delay", format!("must be a function of the attempt, got {name}")));
        }
        Ok(DelayFn(obj.to_owned().unbind()))
    }
}

/// How long to wait before running an over-limit job again (Sidekiq's reschedule policy):
/// reschedule `attempt` (1 for the first, counted apart from the job's own retries) waits
/// `max(retry_after, base * attempt) + uniform(0, jitter)` seconds. After `max_reschedules`
/// reschedules, `reschedule_in` returns None: the job should fail with `OverLimit`.
///
/// `delay`, a function `attempt -> seconds`, replaces `base * attempt` (the floor and the
/// jitter still apply; pass `jitter=0` to use its result as is). `seed` makes the jitter
/// reproducible (tests). Defaults: base 300 s, jitter 300 s, 20 reschedules.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct Backoff {
    inner: ratekeeper::Backoff,
    delay: Option<Py<PyAny>>,
}

#[pymethods]
impl Backoff {
    #[new]
    #[pyo3(signature = (*, base = None, jitter = None, max_reschedules = None, delay = None, seed = None))]
    fn new(
        py: Python<'_>,
        base: Option<Timeout<PBase>>,
        jitter: Option<Timeout<PJitter>>,
        max_reschedules: Option<UInt<PMaxReschedules>>,
        delay: Option<DelayFn>,
        seed: Option<UInt<PSeed>>,
    ) -> PyResult<Self> {
        let max_reschedules = match max_reschedules {
            Some(m) => u32::try_from(m.0)
                .map_err(|_| invalid(py, "max_reschedules", format!("must be at most {}, got {}", u32::MAX, m.0)))?,
            None => ratekeeper::DEFAULT_MAX_RESCHEDULES,
        };
        let base = base.map_or(ratekeeper::DEFAULT_BACKOFF_BASE, |b| b.0);
        let jitter = jitter.map_or(ratekeeper::DEFAULT_BACKOFF_JITTER, |j| j.0);
        let mut inner = guard(py, || ratekeeper::Backoff::new(base, jitter, max_reschedules))?;
        if let Some(seed) = seed {
            let seed = u64::try_from(seed.0).map_err(|_| invalid(py, "seed", "must fit in 64 bits".into()))?;
            inner = inner.with_seed(seed);
        }
        Ok(Backoff { inner, delay: delay.map(|d| d.0) })
    }

    /// The step per reschedule, in seconds (unused when a `delay` function is given).
    #[getter]
    fn base(&self) -> f64 {
        self.inner.base().as_secs_f64()
    }

    /// The largest random spread added to each delay, in seconds.
    #[getter]
    fn jitter(&self) -> f64 {
        self.inner.jitter().as_secs_f64()
    }

    /// How many times a job is rescheduled before it fails with `OverLimit`.
    #[getter]
    fn max_reschedules(&self) -> u32 {
        self.inner.max_reschedules()
    }

    /// Seconds to wait before running the job again for its reschedule `attempt` (1-based),
    /// when the limiter asked for `retry_after` seconds (`OverLimit.retry_after`); None once
    /// `attempt > max_reschedules` (the job should fail with `OverLimit`).
    #[pyo3(signature = (attempt, retry_after = None))]
    fn reschedule_in(
        &self,
        py: Python<'_>,
        attempt: UInt<PAttempt>,
        retry_after: Option<Timeout<PRetryAfter>>,
    ) -> PyResult<Option<f64>> {
        // Beyond u32 is beyond any max_reschedules: the answer is None all the same.
        let attempt = u32::try_from(attempt.0).unwrap_or(u32::MAX);
        let retry_after = retry_after.map_or(Duration::ZERO, |r| r.0);
        let result = match &self.delay {
            // The user's function is not called for an attempt that gives up anyway.
            Some(f) if attempt >= 1 && attempt <= self.inner.max_reschedules() => {
                let value = f.bind(py).call1((attempt,))?;
                let seconds = value.extract::<Float<PDelay>>()?.0;
                let delay = guard(py, || timeout_from_secs("delay", seconds))?;
                guard(py, || self.inner.reschedule_in_with(attempt, retry_after, delay))?
            }
            _ => guard(py, || self.inner.reschedule_in(attempt, retry_after))?,
        };
        Ok(result.map(|d| d.as_secs_f64()))
    }

    fn __repr__(&self) -> String {
        format!(
            "Backoff(base={}, jitter={}, max_reschedules={}{})",
            self.base(),
            self.jitter(),
            self.max_reschedules(),
            if self.delay.is_some() { ", delay=<function>" } else { "" }
        )
    }
}
