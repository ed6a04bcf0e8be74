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
    pub(crate) inner: ratekeeper::Decision,
    /// The key of the call, kept only when the decision carries a lease (for `release`).
    pub(crate) key: Option<String>,
}

impl Decision {
    #[inline]
    pub(crate) fn new(inner: ratekeeper::Decision, key: Option<&str>) -> Self {
        let key = if inner.lease.is_some() { key.map(str::to_owned) } else { None };
        Decision { inner, key }
    }
}

#[pymethods]
impl Decision {
    /// Whether the call was admitted (for `peek`: whether a call of cost 1 would be).
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed
    }

    /// The limit that binds: for multi-limit limiters, the one with the least remaining.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// What is left of `limit` after this call.
    #[getter]
    fn remaining(&self) -> u64 {
        self.inner.remaining
    }

    /// Seconds until the same call could succeed; 0.0 when allowed.
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.inner.retry_after)
    }

    /// Seconds until the limiter is back to full for this key.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.inner.reset_after)
    }

    /// `retry_after` in whole microseconds (exact).
    #[getter]
    fn retry_after_us(&self) -> u64 {
        micros(self.inner.retry_after)
    }

    /// `reset_after` in whole microseconds (exact).
    #[getter]
    fn reset_after_us(&self) -> u64 {
        micros(self.inner.reset_after)
    }

    /// When the decision was made, in seconds since the epoch, by the deciding clock (the Redis
    /// server's for Redis backends); 0.0 for unlimited limiters.
    #[getter]
    fn decided_at(&self) -> f64 {
        self.inner.decided_at_micros as f64 / 1e6
    }

    /// `decided_at` in whole microseconds since the epoch (exact).
    #[getter]
    fn decided_at_us(&self) -> u64 {
        self.inner.decided_at_micros
    }

    /// Shadow mode only: the limiter would have refused this call and admitted it (`allowed`
    /// is True, nothing was consumed, no lease was granted); `remaining` and `retry_after` say
    /// what enforcement would have said.
    #[getter]
    fn shadow_refused(&self) -> bool {
        self.inner.shadow_refused
    }

    /// The lease a concurrent limiter granted (release it when done), else None.
    #[getter]
    fn lease(&self) -> Option<Lease> {
        self.inner.lease.map(|inner| Lease { inner, key: self.key.clone() })
    }

    /// One status per configured limit, for multi-limit limiters (`windows`, `sliding_window`).
    #[getter]
    fn limits(&self) -> Option<Vec<LimitStatus>> {
        self.inner.limits.as_ref().map(|l| l.iter().map(|s| LimitStatus { inner: *s }).collect())
    }

    /// HTTP rate-limit headers in `form`, draft-11 by default as the HTTP middleware writes
    /// them (`RateLimit-Policy: "default";q=5`, `RateLimit: "default";r=0;t=10`; `policy` names
    /// the item, e.g. the limiter's name), or `"draft-7"`, `"draft-6"` (`RateLimit-Limit`,
    /// `-Remaining`, `-Reset`), `"legacy"` (`X-RateLimit-*`); when refused, `Retry-After`. Times
    /// are whole seconds, rounded up.
    #[pyo3(signature = (form = "draft-11", policy = "default"))]
    fn headers(&self, py: Python<'_>, form: &str, policy: &str) -> PyResult<BTreeMap<&'static str, String>> {
        let form = ratekeeper::HeaderForm::from_name("form", form).map_err(|e| crate::errors::to_py_err(py, e))?;
        // The core's rule; a BTreeMap's order happens to be the usual one: RateLimit-*, then Retry-After.
        Ok(self.inner.rate_limit_headers(form, policy).into_iter().collect())
    }

    fn __bool__(&self) -> bool {
        self.inner.allowed
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        format!(
            "Decision(allowed={}, limit={}, remaining={}, retry_after={}, reset_after={}{}{})",
            if d.allowed { "True" } else { "False" },
            d.limit,
            d.remaining,
            py_float(secs(d.retry_after)),
            py_float(secs(d.reset_after)),
            match &d.lease {
                Some(l) => format!(", lease=Lease(fencing_token={})", l.fencing_token),
                None => String::new(),
            },
            if d.shadow_refused { ", shadow_refused=True" } else { "" }
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
#[pyclass(frozen, module = "ratekeeper._ratekeeper")]
pub struct LimitStatus {
    inner: ratekeeper::LimitStatus,
}

#[pymethods]
impl LimitStatus {
    /// The span this limit covers, in seconds.
    #[getter]
    fn window(&self) -> f64 {
        secs(self.inner.window)
    }

    /// The span in whole microseconds.
    #[getter]
    fn window_us(&self) -> u64 {
        micros(self.inner.window)
    }

    /// The limit's size.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// What is left of it.
    #[getter]
    fn remaining(&self) -> u64 {
        self.inner.remaining
    }

    /// 0.0 if this limit admits the call; otherwise seconds until it would.
    #[getter]
    fn retry_after(&self) -> f64 {
        secs(self.inner.retry_after)
    }

    /// Seconds until this limit is back to full.
    #[getter]
    fn reset_after(&self) -> f64 {
        secs(self.inner.reset_after)
    }

    /// `retry_after` in whole microseconds.
    #[getter]
    fn retry_after_us(&self) -> u64 {
        micros(self.inner.retry_after)
    }

    /// `reset_after` in whole microseconds.
    #[getter]
    fn reset_after_us(&self) -> u64 {
        micros(self.inner.reset_after)
    }

    fn __repr__(&self) -> String {
        let s = &self.inner;
        format!(
            "LimitStatus(window={}, limit={}, remaining={}, retry_after={}, reset_after={})",
            py_float(secs(s.window)),
            s.limit,
            s.remaining,
            py_float(secs(s.retry_after)),
            py_float(secs(s.reset_after))
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

    /// Checks refused by a block (`block_for` after a refusal, or `block` by hand) rather than
    /// by the limiter's state; also counted in `refused`.
    #[getter]
    fn blocked(&self) -> u64 {
        self.inner.blocked
    }

    /// Checks a limiter in shadow mode would have refused and admitted instead (counted in
    /// neither `allowed` nor `refused`).
    #[getter]
    fn shadow_refused(&self) -> u64 {
        self.inner.shadow_refused
    }

    /// Checks a Redis limiter refused from its deny cache, with no round trip; also counted
    /// in `refused`.
    #[getter]
    fn refused_locally(&self) -> u64 {
        self.inner.refused_locally
    }

    /// Registrations (about one a minute) that found the name used with another spec by a live
    /// process on the same Redis (one name, two limits; see `on_conflict`).
    #[getter]
    fn spec_conflicts(&self) -> u64 {
        self.inner.spec_conflicts
    }

    /// Settles applied (`settle`, `asettle`); a repeat of one already applied is not counted.
    #[getter]
    fn settles(&self) -> u64 {
        self.inner.settles
    }

    /// Units the applied settles charged (calls that cost more than checked).
    #[getter]
    fn settle_charged(&self) -> u64 {
        self.inner.settle_charged
    }

    /// Units the applied settles asked to refund (calls that cost less than checked); a kind's
    /// rule may give back less.
    #[getter]
    fn settle_refunded(&self) -> u64 {
        self.inner.settle_refunded
    }

    /// Checks refused by a pause (`pause`, `observe`) rather than by the limiter's state; also
    /// counted in `refused`.
    #[getter]
    fn paused(&self) -> u64 {
        self.inner.paused
    }

    /// Concurrent limiters: leases given back by a release (including one already reclaimed).
    #[getter]
    fn released(&self) -> u64 {
        self.inner.released
    }

    /// Concurrent limiters: leases this process was granted and has not released (`held -
    /// released`).
    #[getter]
    fn leases_held(&self) -> u64 {
        self.inner.leases_held()
    }

    fn __repr__(&self) -> String {
        let m = &self.inner;
        format!(
            "Metrics(allowed={}, refused={}, errors={}, failed_open={}, fell_back={}, held={}, held_time={}, \
             immediate={}, waited={}, wait_time={}, overages={}, reclaimed={}, pauses_clamped={}, blocked={}, \
             shadow_refused={}, refused_locally={}, settles={}, settle_charged={}, settle_refunded={}, spec_conflicts={}, \
             paused={}, released={})",
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
            m.pauses_clamped,
            m.blocked,
            m.shadow_refused,
            m.refused_locally,
            m.settles,
            m.settle_charged,
            m.settle_refunded,
            m.spec_conflicts,
            m.paused,
            m.released
        )
    }
}
