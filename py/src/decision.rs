//! The result types: decisions, leases, per-limit statuses and metrics. Each wraps the core
//! value and converts fields only when they are read, so a check allocates one small object.

use std::collections::BTreeMap;
use std::time::Duration;

use pyo3::prelude::*;

use crate::args::{PFencingToken, PGrantedAtUs, PId, PKey, Text, UInt};
use crate::errors::to_py_err;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A float as Python's repr writes it (`0.0`, not `0`).
fn py_float(v: f64) -> String {
    format!("{v:?}")
}

fn micros(d: Duration) -> u64 {
    d.as_micros() as u64
}

/// The outcome of `check`, `peek` or `acquire`.
///
/// Durations are exact (to the microsecond) floats of seconds, never negative. A refused call
/// consumed nothing. `bool(decision)` is `decision.allowed`.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct Decision {
    /// Whether the call was admitted (for `peek`: whether a call of cost 1 would be).
    #[pyo3(get)]
    allowed: bool,
    /// The limit that binds: for multi-limit limiters, the one with the least remaining.
    #[pyo3(get)]
    limit: u64,
    /// What is left of `limit` after this call.
    #[pyo3(get)]
    remaining: u64,
    /// Seconds until the same call could succeed; 0.0 when allowed.
    #[pyo3(get)]
    retry_after: f64,
    /// Seconds until the limiter is back to full for this key.
    #[pyo3(get)]
    reset_after: f64,
    /// `retry_after` in whole microseconds (exact).
    #[pyo3(get)]
    retry_after_us: u64,
    /// `reset_after` in whole microseconds (exact).
    #[pyo3(get)]
    reset_after_us: u64,
    /// When the decision was made, in seconds since the epoch, by the deciding clock (the Redis
    /// server's for Redis backends); 0.0 for unlimited limiters.
    #[pyo3(get)]
    decided_at: f64,
    /// `decided_at` in whole microseconds since the epoch (exact).
    #[pyo3(get)]
    decided_at_us: u64,
    /// The lease a concurrent limiter granted (release it when done), else None.
    #[pyo3(get)]
    lease: Option<Lease>,
    /// One status per configured limit, for multi-limit limiters (`windows`, `sliding_window`).
    #[pyo3(get)]
    limits: Option<Vec<LimitStatus>>,
    /// The core's decision, for the rules that belong to it (the HTTP headers).
    inner: ratekeeper::Decision,
}

impl Decision {
    /// The Python decision of a core one; `key` is the call's, kept with a lease (for `release`).
    #[inline]
    pub(crate) fn new(mut inner: ratekeeper::Decision, key: Option<&str>) -> Self {
        Decision {
            allowed: inner.allowed,
            limit: inner.limit,
            remaining: inner.remaining,
            retry_after: secs(inner.retry_after),
            reset_after: secs(inner.reset_after),
            retry_after_us: micros(inner.retry_after),
            reset_after_us: micros(inner.reset_after),
            decided_at: inner.decided_at_micros as f64 / 1e6,
            decided_at_us: inner.decided_at_micros,
            lease: inner.lease.map(|lease| Lease { inner: lease, key: key.map(str::to_owned) }),
            limits: inner.limits.take().map(|l| l.iter().map(LimitStatus::new).collect()),
            inner,
        }
    }
}

#[pymethods]
impl Decision {
    /// HTTP rate-limit headers: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
    /// (seconds until full, rounded up) and, when refused, `Retry-After` (rounded up).
    fn headers(&self) -> BTreeMap<&'static str, String> {
        // The core's rule; a BTreeMap's order happens to be the usual one: RateLimit-*, then Retry-After.
        self.inner.http_headers().into_iter().map(|(name, value)| (name, value.to_string())).collect()
    }

    fn __bool__(&self) -> bool {
        self.allowed
    }

    fn __repr__(&self) -> String {
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after={}, reset_after={}{})",
            if self.allowed { "True" } else { "False" },
            self.limit,
            self.remaining,
            py_float(self.retry_after),
            py_float(self.reset_after),
            match &self.lease {
                Some(l) => format!(", lease=Lease(fencing_token={})", l.inner.fencing_token),
                None => String::new(),
            }
        )
    }
}

/// A slot held in a concurrent limiter: give it back with `limiter.release(lease)`.
///
/// It remembers the key it was granted for. Rebuild one from its parts (for example in another
/// process) with `Lease(id, fencing_token, granted_at_us, key)`.
#[pyclass(frozen, eq, hash, module = "ratekeeper._ratekeeper")]
#[derive(PartialEq, Eq, Hash, Clone)]
pub struct Lease {
    pub(crate) inner: ratekeeper::Lease,
    pub(crate) key: Option<String>,
}

#[pymethods]
impl Lease {
    #[new]
    #[pyo3(signature = (id, fencing_token, granted_at_us, key = None))]
    fn py_new(
        id: UInt<PId>,
        fencing_token: UInt<PFencingToken>,
        granted_at_us: UInt<PGrantedAtUs>,
        key: Option<Text<'_, PKey>>,
        py: Python<'_>,
    ) -> PyResult<Self> {
        let small = |v: u128, name: &'static str| {
            u64::try_from(v).map_err(|_| to_py_err(py, ratekeeper::Error::invalid(name, "must fit in 64 bits")))
        };
        Ok(Lease {
            inner: ratekeeper::Lease::from_parts(
                id.0,
                small(fencing_token.0, "fencing_token")?,
                small(granted_at_us.0, "granted_at_us")?,
            ),
            key: key.map(|k| k.0.to_owned()),
        })
    }

    /// Unique id of this grant (a 128-bit integer).
    #[getter]
    fn id(&self) -> u128 {
        self.inner.id
    }

    /// Strictly increases with every grant of the same limiter and key: a guarded resource can
    /// refuse writes carrying a token lower than one it has already seen. Zero for a lease
    /// granted while failing open, which guards nothing.
    #[getter]
    fn fencing_token(&self) -> u64 {
        self.inner.fencing_token
    }

    /// When it was granted, in microseconds since the epoch, by the deciding clock.
    #[getter]
    fn granted_at_us(&self) -> u64 {
        self.inner.granted_at_micros
    }

    /// The key it was granted for (None: the limiter's shared key).
    #[getter]
    fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(id={}, fencing_token={}, granted_at_us={}, key={})",
            self.inner.id,
            self.inner.fencing_token,
            self.inner.granted_at_micros,
            match &self.key {
                Some(k) => format!("{k:?}"),
                None => "None".into(),
            }
        )
    }
}

/// The state of one limit of a multi-limit limiter.
#[pyclass(frozen, get_all, module = "ratekeeper._ratekeeper")]
#[derive(Clone)]
pub struct LimitStatus {
    /// The span this limit covers, in seconds.
    window: f64,
    /// The span in whole microseconds.
    window_us: u64,
    /// The limit's size.
    limit: u64,
    /// What is left of it.
    remaining: u64,
    /// 0.0 if this limit admits the call; otherwise seconds until it would.
    retry_after: f64,
    /// Seconds until this limit is back to full.
    reset_after: f64,
    /// `retry_after` in whole microseconds.
    retry_after_us: u64,
    /// `reset_after` in whole microseconds.
    reset_after_us: u64,
}

impl LimitStatus {
    fn new(s: &ratekeeper::LimitStatus) -> Self {
        LimitStatus {
            window: secs(s.window),
            window_us: micros(s.window),
            limit: s.limit,
            remaining: s.remaining,
            retry_after: secs(s.retry_after),
            reset_after: secs(s.reset_after),
            retry_after_us: micros(s.retry_after),
            reset_after_us: micros(s.reset_after),
        }
    }
}

#[pymethods]
impl LimitStatus {
    fn __repr__(&self) -> String {
        format!(
            "LimitStatus(window={}, limit={}, remaining={}, retry_after={}, reset_after={})",
            py_float(self.window),
            self.limit,
            self.remaining,
            py_float(self.retry_after),
            py_float(self.reset_after)
        )
    }
}

/// A limiter's metrics: its checks by outcome, their latency on Redis, and for concurrent
/// limiters Sidekiq's set; times in seconds.
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct Metrics {
    pub(crate) inner: ratekeeper::Metrics,
}

#[pymethods]
impl Metrics {
    /// Checks the backend allowed (each attempt of a waiting `acquire` counts).
    #[getter]
    fn allowed(&self) -> u64 {
        self.inner.allowed
    }

    /// Checks the backend refused.
    #[getter]
    fn refused(&self) -> u64 {
        self.inner.refused
    }

    /// Checks that failed because Redis failed or refused the call.
    #[getter]
    fn errors(&self) -> u64 {
        self.inner.errors
    }

    /// Checks allowed because Redis failed, under `failure_policy="fail_open"`.
    #[getter]
    fn failed_open(&self) -> u64 {
        self.inner.failed_open
    }

    /// Checks the in-memory fallback answered, under `failure_policy="fallback"`.
    #[getter]
    fn fell_back(&self) -> u64 {
        self.inner.fell_back
    }

    /// Checks that went to Redis and were timed (none on the memory backend).
    #[getter]
    fn latency_count(&self) -> u64 {
        self.inner.latency_count()
    }

    /// Their total client-side latency.
    #[getter]
    fn latency_sum(&self) -> f64 {
        secs(self.inner.latency_sum)
    }

    /// The latency histogram: `(upper bound, count)` per bucket (not cumulative), the last
    /// bound infinite.
    #[getter]
    fn latency_buckets(&self) -> Vec<(f64, u64)> {
        let bounds = ratekeeper::LATENCY_BOUNDS.iter().map(|b| b.as_secs_f64()).chain([f64::INFINITY]);
        bounds.zip(self.inner.latency_buckets).collect()
    }

    /// Leases granted (blocks run).
    #[getter]
    fn held(&self) -> u64 {
        self.inner.held
    }

    /// Total time leases were held, measured at release.
    #[getter]
    fn held_time(&self) -> f64 {
        secs(self.inner.held_time)
    }

    /// Leases granted without waiting.
    #[getter]
    fn immediate(&self) -> u64 {
        self.inner.immediate
    }

    /// Leases granted after waiting.
    #[getter]
    fn waited(&self) -> u64 {
        self.inner.waited
    }

    /// Total time spent waiting by the leases granted after waiting.
    #[getter]
    fn wait_time(&self) -> f64 {
        secs(self.inner.wait_time)
    }

    /// Leases released after their lock_timeout (holders that ran too long).
    #[getter]
    fn overages(&self) -> u64 {
        self.inner.overages
    }

    /// Overdue leases reclaimed for a new caller.
    #[getter]
    fn reclaimed(&self) -> u64 {
        self.inner.reclaimed
    }

    /// Pauses (`pause`, `observe`) shortened to the limiter's `max_pause`: a third party asked
    /// callers to stay away longer than the operator allows.
    #[getter]
    fn pauses_clamped(&self) -> u64 {
        self.inner.pauses_clamped
    }

    fn __repr__(&self) -> String {
        let m = &self.inner;
        format!(
            "Metrics(allowed={}, refused={}, errors={}, failed_open={}, fell_back={}, held={}, held_time={}, \
             immediate={}, waited={}, wait_time={}, overages={}, reclaimed={}, pauses_clamped={})",
            m.allowed,
            m.refused,
            m.errors,
            m.failed_open,
            m.fell_back,
            m.held,
            py_float(secs(m.held_time)),
            m.immediate,
            m.waited,
            py_float(secs(m.wait_time)),
            m.overages,
            m.reclaimed,
            m.pauses_clamped
        )
    }
}
