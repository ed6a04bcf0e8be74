//! `Limiter`: every call style of the core's limiter, sync and asyncio.
//!
//! Sync calls on Redis release the GIL around the blocking call; on the memory backend a check
//! costs less than releasing and retaking the GIL (README, Benchmarks: "Figures behind design
//! choices"), so it runs with the GIL held (only `acquire`, which may wait, releases it there
//! too).

use pyo3::inspect::PyStaticExpr;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use pyo3::{type_hint_identifier, type_hint_subscript, type_hint_union};

use crate::aio::{self, Payload};
use crate::args::{
    Cost, Flag, Headers, Key, PActual, PBlockFor, PCost, PDenyCache, PDuration, PEstimate, PMaxPause, PShadow,
    PWaitTimeout, Seconds, Status, Timeout,
};
use crate::decision::{Decision, Lease, Metrics};
use crate::errors::{guard, guard_detached};
use crate::settle::SettleDecision;

/// A rate limiter bound to a backend; build one with a `Backend` method. Safe to share between
/// threads, tasks and event loops.
///
/// Every call takes an optional `key` (any string up to 1 KiB: a user id, an IP), so one
/// limiter serves many identities. Methods prefixed with `a` are the asyncio forms: they return
/// an `asyncio.Future` and never block the event loop.
///
/// This is the native base of `ratekeeper.Limiter` (which adds `within_limit`); every
/// constructor returns `ratekeeper.Limiter` instances, made through that class like any Python
/// object (see `__new__`).
// Named `NativeLimiter` in Python: sharing the name `Limiter` with its subclass made the
// generated stub import the subclass as `Limiter as Limiter2`.
#[pyclass(frozen, subclass, name = "NativeLimiter", module = "ratekeeper._ratekeeper")]
pub struct Limiter {
    pub(crate) inner: ratekeeper::Limiter,
    /// Calls go to Redis (release the GIL, run on the runtime).
    pub(crate) remote: bool,
}

/// The Python subclass `ratekeeper.Limiter` (adds `within_limit`), whose instances the
/// constructors return.
static PY_CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();

impl Limiter {
    /// `check` without its trace.
    fn check_untraced(&self, py: Python<'_>, key: Key<'_>, cost: Cost<PCost>) -> PyResult<Decision> {
        let k = crate::args::key(&key);
        let d = if self.remote {
            // A leased limiter answers from its lease without releasing the GIL.
            if let Some(d) = guard(py, || self.inner.check_local(k, cost.0))? {
                return Ok(Decision::new(d, k));
            }
            guard_detached(py, || self.inner.check_blocking(k, cost.0))?
        } else {
            guard(py, || self.inner.check_blocking(k, cost.0))?
        };
        Ok(Decision::new(d, k))
    }

    /// Wraps a core limiter in an instance of `ratekeeper.Limiter`: the native object is made
    /// first, then the subclass is called on it (its inherited `__new__` takes the same
    /// limiter), so the instance is allocated by its own type rather than retyped afterwards.
    pub(crate) fn wrap(py: Python<'_>, inner: ratekeeper::Limiter, remote: bool) -> PyResult<PyLimiter<'_>> {
        let class = PY_CLASS.import(py, "ratekeeper._limiter", "Limiter")?;
        let native = Bound::new(py, Limiter { inner, remote })?;
        Ok(PyLimiter(class.call1((native,))?.cast_into::<Limiter>()?))
    }
}

/// An instance of `ratekeeper.Limiter` (typed as such in the stubs).
pub struct PyLimiter<'py>(pub Bound<'py, Limiter>);

impl<'py> IntoPyObject<'py> for PyLimiter<'py> {
    type Target = Limiter;
    type Output = Bound<'py, Limiter>;
    type Error = std::convert::Infallible;
    const OUTPUT_TYPE: PyStaticExpr = type_hint_identifier!("ratekeeper._limiter", "Limiter");

    fn into_pyobject(self, _py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0)
    }
}

/// A spec as a dict (typed `dict[str, Any]` in the stubs).
pub struct SpecDict<'py>(pub Bound<'py, PyDict>);

impl<'py> IntoPyObject<'py> for SpecDict<'py> {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = std::convert::Infallible;
    const OUTPUT_TYPE: PyStaticExpr = type_hint_subscript!(
        type_hint_identifier!("builtins", "dict"),
        type_hint_identifier!("builtins", "str"),
        type_hint_identifier!("typing", "Any")
    );

    fn into_pyobject(self, _py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0)
    }
}

/// The type a future resolves to, for the stubs.
pub trait Hint {
    const HINT: PyStaticExpr;
}

impl Hint for Decision {
    const HINT: PyStaticExpr = <Decision as pyo3::PyTypeInfo>::TYPE_HINT;
}

impl Hint for Metrics {
    const HINT: PyStaticExpr = <Metrics as pyo3::PyTypeInfo>::TYPE_HINT;
}

impl Hint for Option<Lease> {
    const HINT: PyStaticExpr = type_hint_union!(<Lease as pyo3::PyTypeInfo>::TYPE_HINT, NONE);
}

impl Hint for f64 {
    const HINT: PyStaticExpr = type_hint_identifier!("builtins", "float");
}

impl Hint for Option<f64> {
    const HINT: PyStaticExpr = type_hint_union!(type_hint_identifier!("builtins", "float"), NONE);
}

impl Hint for () {
    const HINT: PyStaticExpr = NONE;
}

impl Hint for bool {
    const HINT: PyStaticExpr = type_hint_identifier!("builtins", "bool");
}

const NONE: PyStaticExpr = PyStaticExpr::Constant { value: pyo3::inspect::PyStaticConstant::None };

/// An `asyncio.Future[T]` (typed as such in the stubs).
pub struct Fut<'py, T>(pub Bound<'py, PyAny>, std::marker::PhantomData<T>);

impl<'py, T> Fut<'py, T> {
    pub(crate) fn new(b: Bound<'py, PyAny>) -> Self {
        Fut(b, std::marker::PhantomData)
    }
}

impl<'py, T: Hint> IntoPyObject<'py> for Fut<'py, T> {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = std::convert::Infallible;
    const OUTPUT_TYPE: PyStaticExpr = type_hint_subscript!(type_hint_identifier!("asyncio", "Future"), T::HINT);

    fn into_pyobject(self, _py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(self.0)
    }
}

/// The limiter, if it grants leases (see [`Payload::Decision`]).
fn concurrent(limiter: ratekeeper::Limiter) -> Option<ratekeeper::Limiter> {
    (limiter.kind() == ratekeeper::Kind::Concurrent).then_some(limiter)
}

fn owned(k: Option<&str>) -> Option<String> {
    k.map(str::to_owned)
}

fn lease_key<'a>(lease: &'a Lease, key: &Key<'a>) -> Option<&'a str> {
    crate::args::key(key).or(lease.key.as_deref())
}

#[pymethods]
impl Limiter {
    /// Another handle on `limiter`: the same state, metrics and settings. Constructors return
    /// `ratekeeper.Limiter` instances already; this is how they are made, and how a subclass of
    /// `ratekeeper.Limiter` wraps one.
    #[new]
    fn py_new(limiter: &Bound<'_, Self>) -> Self {
        let this = limiter.get();
        Limiter { inner: this.inner.clone(), remote: this.remote }
    }

    /// The limiter's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The limiter's kind: `concurrent`, `bucket`, `window`, `sliding_window`, `token_bucket`,
    /// `leaky`, `points` or `unlimited`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().as_str()
    }

    /// The limiter's spec as data (a dict in the canonical JSON form, durations in seconds):
    /// `backend.limiter(name, limiter.spec)` builds the same limiter in any language.
    #[getter]
    fn spec<'py>(&self, py: Python<'py>) -> PyResult<SpecDict<'py>> {
        let loads = py.import("json")?.getattr("loads")?;
        Ok(SpecDict(loads.call1((self.inner.spec_json(),))?.cast_into::<PyDict>()?))
    }

    /// The limiter's spec as canonical JSON text (what every language reads back alike).
    #[getter]
    fn spec_json(&self) -> String {
        self.inner.spec_json()
    }

    /// The most one call may cost (the burst, the smallest limit, the slot count; 2^53 for
    /// `unlimited`): a larger cost is refused on every call.
    #[getter]
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }

    /// Whether a charge can be given back (`points_used(cost, 0)`): token bucket, leaky, points.
    #[getter]
    fn refundable(&self) -> bool {
        self.inner.refundable()
    }

    /// The span the quota covers in seconds, where the kind has one window (the HTTP fields'
    /// `w`); None otherwise.
    #[getter]
    fn window(&self) -> Option<f64> {
        self.inner.window().map(|w| w.as_secs_f64())
    }

    /// The default time `acquire` and `within_limit` wait, in seconds.
    #[getter]
    fn wait_timeout(&self) -> f64 {
        self.inner.wait_timeout().as_secs_f64()
    }

    /// Whether the backend's `fail_open` / `fallback` policy applies to this limiter: true for
    /// every limiter but concurrent ones, which fail closed unless built with
    /// `allow_fallback=True`.
    #[getter]
    fn allows_fallback(&self) -> bool {
        self.inner.allows_fallback()
    }

    /// The longest pause `pause` and `observe` write, in seconds (default 3600).
    #[getter]
    fn max_pause(&self) -> f64 {
        self.inner.max_pause().as_secs_f64()
    }

    /// The same limiter (same state and metrics) whose pauses last at most `max_pause` seconds
    /// (default one hour): a longer pause asked of `pause` or `observe` is shortened to it and
    /// counted in `metrics().pauses_clamped`. A `max_pause` that is not a positive number of
    /// seconds up to 100 years raises `InvalidArgument` naming `max_pause`.
    fn with_max_pause<'py>(slf: &Bound<'py, Self>, max_pause: Seconds<PMaxPause>) -> PyResult<PyLimiter<'py>> {
        let py = slf.py();
        let this = slf.get();
        let inner = guard(py, || this.inner.with_max_pause(max_pause.0))?;
        Limiter::wrap(py, inner, this.remote)
    }

    /// How long a refusal blocks the key, in seconds (`None`: a refusal blocks nothing, the
    /// default; see `with_block_for`).
    #[getter]
    fn block_for(&self) -> Option<f64> {
        self.inner.block_for().map(|d| d.as_secs_f64())
    }

    /// The same limiter (same state and metrics) whose refusals block the key for `block_for`
    /// seconds (`None`: they block nothing): after a refused check, every `check`, `peek` and
    /// `acquire` of this limiter and key, in every process sharing the backend, is refused with
    /// `retry_after` = the block's remaining time, consuming nothing; the refusal that starts
    /// the block says so too. A spec carries it as `"block_for": seconds`. A `block_for` that
    /// is not a positive number of seconds up to 100 years raises `InvalidArgument` naming
    /// `block_for`.
    fn with_block_for<'py>(slf: &Bound<'py, Self>, block_for: Option<Seconds<PBlockFor>>) -> PyResult<PyLimiter<'py>> {
        let py = slf.py();
        let this = slf.get();
        let inner = guard(py, || this.inner.with_block_for(block_for.map(|b| b.0)))?;
        Limiter::wrap(py, inner, this.remote)
    }

    /// Whether the limiter is in shadow mode (a live override of the limiter or of a key decides
    /// instead, with the `shadow` of its spec).
    #[getter]
    fn shadow(&self) -> bool {
        self.inner.shadow()
    }

    /// The same limiter (same state and metrics) in shadow mode (`True`) or enforcing
    /// (`False`). In shadow mode a call the limit would refuse is admitted: `allowed` is True,
    /// `shadow_refused` is True, nothing is consumed, `remaining` and `retry_after` say what
    /// enforcement would have said; `acquire` never waits, `within_limit` runs its block, a
    /// concurrent limiter grants no lease to it. Counted in `metrics().shadow_refused`.
    fn with_shadow<'py>(slf: &Bound<'py, Self>, shadow: Flag<PShadow>) -> PyResult<PyLimiter<'py>> {
        let py = slf.py();
        let this = slf.get();
        let inner = guard(py, || this.inner.with_shadow(shadow.0))?;
        Limiter::wrap(py, inner, this.remote)
    }

    /// Whether this limiter remembers refusals in process (see `with_deny_cache`).
    #[getter]
    fn deny_cache(&self) -> bool {
        self.inner.deny_cache()
    }

    /// The same limiter (same state and metrics) with the deny cache on or off, whatever its
    /// backend's `deny_cache`: on, a refusal with `retry_after` R is remembered in this
    /// process, and until R has passed a check of the same key with at least the refused cost
    /// is refused from memory, with no round trip (counted in `metrics().refused_locally`). A
    /// `reset`, an `unblock` or a live override seen by this process ends the entries they
    /// affect. Only Redis limiters of the counting kinds use it.
    fn with_deny_cache<'py>(slf: &Bound<'py, Self>, on: Flag<PDenyCache>) -> PyResult<PyLimiter<'py>> {
        let py = slf.py();
        let this = slf.get();
        let inner = guard(py, || this.inner.with_deny_cache(on.0))?;
        Limiter::wrap(py, inner, this.remote)
    }

    /// The same limiter with another default wait timeout (seconds; 0: never wait).
    fn with_wait_timeout<'py>(slf: &Bound<'py, Self>, wait_timeout: Timeout<PWaitTimeout>) -> PyResult<PyLimiter<'py>> {
        let py = slf.py();
        let this = slf.get();
        let inner = guard(py, || this.inner.with_wait_timeout(wait_timeout.0))?;
        Limiter::wrap(py, inner, this.remote)
    }

    /// Consumes `cost` for `key` if the limit allows, never waiting. A refused call consumes
    /// nothing and returns `allowed=False` with the exact `retry_after`. On a concurrent limiter
    /// an admitted call holds a lease (`decision.lease`) that must be released.
    #[pyo3(signature = (key = None, cost = Cost::ONE))]
    fn check(&self, py: Python<'_>, key: Key<'_>, cost: Cost<PCost>) -> PyResult<Py<Decision>> {
        if self.inner.traced() {
            let subject = crate::trace::Subject::of(&self.inner);
            return crate::trace::traced(py, subject, "check", || Py::new(py, self.check_untraced(py, key, cost)?));
        }
        Py::new(py, self.check_untraced(py, key, cost)?)
    }

    /// What a call of cost 1 would get, consuming nothing.
    #[pyo3(signature = (key = None))]
    fn peek(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Py<Decision>> {
        let k = crate::args::key(&key);
        let peek = || {
            let d = if self.remote {
                guard_detached(py, || self.inner.peek_blocking(k))?
            } else {
                guard(py, || self.inner.peek_blocking(k))?
            };
            Py::new(py, Decision::new(d, k))
        };
        if self.inner.traced() {
            return crate::trace::traced(py, crate::trace::Subject::of(&self.inner), "peek", peek);
        }
        peek()
    }

    /// Consumes `cost`, waiting up to `wait_timeout` seconds (default: the limiter's) for the
    /// limit to allow it — sleeping exactly until the decision can change, or until a release
    /// wakes it. Raises `OverLimit` (with `retry_after`) when it cannot succeed in time.
    #[pyo3(signature = (key = None, cost = Cost::ONE, wait_timeout = None))]
    fn acquire(
        &self,
        py: Python<'_>,
        key: Key<'_>,
        cost: Cost<PCost>,
        wait_timeout: Option<Timeout<PWaitTimeout>>,
    ) -> PyResult<Py<Decision>> {
        let k = crate::args::key(&key);
        let wait = wait_timeout.map(|w| w.0);
        let acquire =
            || guard_detached(py, || self.inner.acquire_blocking(k, cost.0, wait)).map(|d| Decision::new(d, k));
        if self.inner.traced() {
            return crate::trace::traced(py, crate::trace::Subject::of(&self.inner), "acquire", || {
                Py::new(py, acquire()?)
            });
        }
        Py::new(py, acquire()?)
    }

    /// Forgets the state of `key` (waiters on a concurrent limiter re-check).
    #[pyo3(signature = (key = None))]
    fn reset(&self, py: Python<'_>, key: Key<'_>) -> PyResult<()> {
        let k = crate::args::key(&key);
        if self.remote {
            guard_detached(py, || self.inner.reset_blocking(k))
        } else {
            guard(py, || self.inner.reset_blocking(k))
        }
    }

    /// Gives back what this process holds: every partition of a partitions limiter (other
    /// processes may lease them at once instead of after `lease_ttl`), the unspent tokens of a
    /// leased limiter's leases; a later call leases anew. Does nothing on other limiters.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        guard_detached(py, || self.inner.close_blocking())
    }

    /// The partitions this process holds of a partitions limiter for `key`, as
    /// `(index, fencing_token)` pairs. Raises `InvalidArgument` naming `limiter` on other kinds.
    #[pyo3(signature = (key = None))]
    fn partitions_held(&self, py: Python<'_>, key: Key<'_>) -> PyResult<Vec<(u32, u64)>> {
        let k = crate::args::key(&key);
        Ok(guard(py, || self.inner.partitions_held(k))?.partitions)
    }

    /// Frees a lease of a concurrent limiter (for the key it was granted for, unless `key` is
    /// given). Raises `LeaseLost` if it had been reclaimed (it outlived `lock_timeout`) or the
    /// limiter was reset.
    #[pyo3(signature = (lease, key = None))]
    fn release(&self, py: Python<'_>, lease: PyRef<'_, Lease>, key: Key<'_>) -> PyResult<()> {
        let k = lease_key(&lease, &key);
        let l = lease.inner;
        let release = || {
            if self.remote {
                guard_detached(py, || self.inner.release_blocking(k, &l))
            } else {
                guard(py, || self.inner.release_blocking(k, &l))
            }
        };
        if self.inner.traced() {
            return crate::trace::traced(py, crate::trace::Subject::of(&self.inner), "release", release);
        }
        release()
    }

    /// Renews a concurrent lease for another `lock_timeout` from now. Raises `LeaseLost` if it
    /// was already reclaimed.
    #[pyo3(signature = (lease, key = None))]
    fn extend(&self, py: Python<'_>, lease: PyRef<'_, Lease>, key: Key<'_>) -> PyResult<()> {
        let k = lease_key(&lease, &key);
        let l = lease.inner;
        if self.remote {
            guard_detached(py, || self.inner.extend_blocking(k, &l))
        } else {
            guard(py, || self.inner.extend_blocking(k, &l))
        }
    }

    /// Corrects a charge of `estimate` to `actual` (points, token bucket and leaky limiters):
    /// the difference is charged or refunded. An `actual` above the capacity is charged as debt
    /// the bucket waits out, at most 16 capacities ahead of now. Each call applies its own
    /// difference (a `within_limit` permit reports once). Returns the state after the correction.
    #[pyo3(signature = (estimate, actual, key = None))]
    fn points_used(
        &self,
        py: Python<'_>,
        estimate: Cost<PEstimate>,
        actual: Cost<PActual>,
        key: Key<'_>,
    ) -> PyResult<Decision> {
        let k = crate::args::key(&key);
        let d = if self.remote {
            guard_detached(py, || self.inner.points_used_blocking(k, estimate.0, actual.0))?
        } else {
            guard(py, || self.inner.points_used_blocking(k, estimate.0, actual.0))?
        };
        Ok(Decision::new(d, k))
    }

    /// Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
    /// its `actual` cost: the difference is charged or refunded exactly once, however often the
    /// same decision is settled (a retry after a timeout is safe). A charge applies even past
    /// the limit (later calls wait the debt out); a refund never gives back more than the call
    /// took, nor to a window that has rolled over. Returns the state after it, as `peek` reports
    /// it. A decision that cannot be settled (refused; concurrent, unlimited or partitions;
    /// another limiter's) raises `InvalidArgument` naming `decision`; nothing is written.
    fn settle(&self, py: Python<'_>, decision: SettleDecision, actual: Cost<PActual>) -> PyResult<Py<Decision>> {
        let settle = || {
            let d = if self.remote {
                guard_detached(py, || self.inner.settle_blocking(&decision.0, actual.0))?
            } else {
                guard(py, || self.inner.settle_blocking(&decision.0, actual.0))?
            };
            Py::new(py, Decision::new(d, None))
        };
        if self.inner.traced() {
            let subject = crate::trace::Subject::settle(&self.inner, &decision.0, actual.0);
            return crate::trace::traced(py, subject, "settle", settle);
        }
        settle()
    }

    /// Pauses `key` for `duration` seconds, in every process sharing the backend: until it
    /// ends, `check` and `peek` are refused with `retry_after` = the remaining pause (consuming
    /// nothing) and `acquire` waits it out. A pause is at most the limiter's `max_pause` (see
    /// `with_max_pause`). A longer pause extends the one in effect; a shorter one never shortens
    /// it; `resume` ends it. Returns the pause in effect, in seconds. On Redis the check costs
    /// no extra round trip. A `duration` that is not a positive number (0, negative, NaN) raises
    /// `InvalidArgument` naming `duration`.
    #[pyo3(signature = (duration, key = None))]
    fn pause(&self, py: Python<'_>, duration: Seconds<PDuration>, key: Key<'_>) -> PyResult<f64> {
        let k = crate::args::key(&key);
        let d = if self.remote {
            guard_detached(py, || self.inner.pause_blocking(k, duration.0))?
        } else {
            guard(py, || self.inner.pause_blocking(k, duration.0))?
        };
        Ok(d.as_secs_f64())
    }

    /// Reads an upstream response's `status` and `headers` (a mapping, e.g. `requests`' or
    /// `httpx`' headers, or `(name, value)` pairs) and pauses `key` for as long as a 429 or 503
    /// asks: `Retry-After` (seconds or HTTP-date), else `RateLimit-Reset` when
    /// `RateLimit-Remaining` is 0, else `X-RateLimit-Reset`. Header names are case-insensitive;
    /// malformed values are ignored. The pause lasts at most `max_pause` seconds (default: the
    /// limiter's, one hour unless `with_max_pause` said otherwise). Returns the pause in effect
    /// in seconds, or `None` when the response asks for none.
    #[pyo3(signature = (status, headers, key = None, max_pause = None))]
    fn observe(
        &self,
        py: Python<'_>,
        status: Status,
        headers: Headers,
        key: Key<'_>,
        max_pause: Option<Seconds<PMaxPause>>,
    ) -> PyResult<Option<f64>> {
        let k = crate::args::key(&key);
        let m = max_pause.map(|m| m.0);
        let d = if self.remote {
            guard_detached(py, || self.inner.observe_within_blocking(k, status.0, &headers.0, m))?
        } else {
            guard(py, || self.inner.observe_within_blocking(k, status.0, &headers.0, m))?
        };
        Ok(d.map(|d| d.as_secs_f64()))
    }

    /// Ends the pause of `key` now, in every process sharing the backend (an operator's
    /// override of a pause that is wrong or no longer needed); the key's other state is kept.
    /// Returns whether a pause was in effect.
    #[pyo3(signature = (key = None))]
    fn resume(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        let k = crate::args::key(&key);
        if self.remote {
            guard_detached(py, || self.inner.resume_blocking(k))
        } else {
            guard(py, || self.inner.resume_blocking(k))
        }
    }

    /// Blocks `key` for `duration` seconds from now, in every process sharing the backend:
    /// until it ends (or `unblock`, or `reset`), `check` and `peek` are refused with
    /// `retry_after` = the block's remaining time (consuming nothing) and `acquire` waits it
    /// out. The block replaces the one in effect, shorter or longer. A block is not a pause:
    /// `resume` leaves it alone. Returns the block in effect, in seconds. On Redis the check
    /// costs no extra round trip. A `duration` that is not a positive number (0, negative, NaN)
    /// raises `InvalidArgument` naming `duration`.
    #[pyo3(signature = (duration, key = None))]
    fn block(&self, py: Python<'_>, duration: Seconds<PDuration>, key: Key<'_>) -> PyResult<f64> {
        let k = crate::args::key(&key);
        let d = if self.remote {
            guard_detached(py, || self.inner.block_blocking(k, duration.0))?
        } else {
            guard(py, || self.inner.block_blocking(k, duration.0))?
        };
        Ok(d.as_secs_f64())
    }

    /// Ends the block of `key` now, in every process sharing the backend; the key's other
    /// state, and a pause, are kept. Returns whether a block was in effect.
    #[pyo3(signature = (key = None))]
    fn unblock(&self, py: Python<'_>, key: Key<'_>) -> PyResult<bool> {
        let k = crate::args::key(&key);
        if self.remote {
            guard_detached(py, || self.inner.unblock_blocking(k))
        } else {
            guard(py, || self.inner.unblock_blocking(k))
        }
    }

    /// This process's metrics for this limiter: its checks by outcome (and their latency on
    /// Redis); concurrent limiters add their leases.
    fn metrics(&self) -> Metrics {
        Metrics { inner: self.inner.metrics() }
    }

    /// The metrics of every process sharing this limiter (on Redis, this process's pending
    /// counts are flushed first); on memory, the same as `metrics()`.
    fn fleet_metrics(&self, py: Python<'_>) -> PyResult<Metrics> {
        let m = if self.remote {
            guard_detached(py, || self.inner.fleet_metrics_blocking())?
        } else {
            guard(py, || self.inner.fleet_metrics_blocking())?
        };
        Ok(Metrics { inner: m })
    }

    /// Validates the arguments of a call without making it (`within_limit` uses it to fail
    /// early, naming the bad argument).
    #[pyo3(signature = (key = None, cost = Cost::ONE, wait_timeout = None))]
    fn _validate(&self, key: Key<'_>, cost: Cost<PCost>, wait_timeout: Option<Timeout<PWaitTimeout>>) {
        let _ = (key, cost, wait_timeout);
    }

    // ------------------------------------------------------------------------------- asyncio

    /// asyncio form of `check`.
    #[pyo3(signature = (key = None, cost = Cost::ONE))]
    fn acheck<'py>(&self, py: Python<'py>, key: Key<'_>, cost: Cost<PCost>) -> PyResult<Fut<'py, Decision>> {
        let started = crate::trace::started(&self.inner);
        let collector = crate::trace::collector(started);
        let future = if !self.remote {
            // Decided in process, never waiting: the sync call, its result on a completed future.
            let k = crate::args::key(&key);
            aio::decided(py, || Ok(Decision::new(self.inner.check_blocking(k, cost.0)?, k)))?
        } else {
            let limiter = self.inner.clone();
            let k = owned(crate::args::key(&key));
            let cost = cost.0;
            let noted = collector.clone();
            aio::run(py, self.remote, false, async move {
                let d = crate::trace::noted(noted, limiter.check(k.as_deref(), cost)).await?;
                Ok(Payload::Decision(d, k, concurrent(limiter)))
            })?
        };
        self.trace_future(py, "check", &future, started, collector);
        Ok(Fut::new(future))
    }

    /// asyncio form of `peek`.
    #[pyo3(signature = (key = None))]
    fn apeek<'py>(&self, py: Python<'py>, key: Key<'_>) -> PyResult<Fut<'py, Decision>> {
        let started = crate::trace::started(&self.inner);
        let collector = crate::trace::collector(started);
        let future = if !self.remote {
            let k = crate::args::key(&key);
            aio::decided(py, || Ok(Decision::new(self.inner.peek_blocking(k)?, k)))?
        } else {
            let limiter = self.inner.clone();
            let k = owned(crate::args::key(&key));
            let noted = collector.clone();
            aio::run(py, self.remote, false, async move {
                let d = crate::trace::noted(noted, limiter.peek(k.as_deref())).await?;
                Ok(Payload::Decision(d, k, None))
            })?
        };
        self.trace_future(py, "peek", &future, started, collector);
        Ok(Fut::new(future))
    }

    /// asyncio form of `acquire`: waits without blocking the event loop.
    #[pyo3(signature = (key = None, cost = Cost::ONE, wait_timeout = None))]
    fn aacquire<'py>(
        &self,
        py: Python<'py>,
        key: Key<'_>,
        cost: Cost<PCost>,
        wait_timeout: Option<Timeout<PWaitTimeout>>,
    ) -> PyResult<Fut<'py, Decision>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        let (cost, wait) = (cost.0, wait_timeout.map(|w| w.0));
        let started = crate::trace::started(&self.inner);
        let collector = crate::trace::collector(started);
        let noted = collector.clone();
        let future = aio::run(py, self.remote, true, async move {
            let d = crate::trace::noted(noted, limiter.acquire(k.as_deref(), cost, wait)).await?;
            Ok(Payload::Decision(d, k, concurrent(limiter)))
        })?;
        self.trace_future(py, "acquire", &future, started, collector);
        Ok(Fut::new(future))
    }

    /// asyncio form of `close`.
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Fut<'py, ()>> {
        let limiter = self.inner.clone();
        aio::run(py, self.remote, false, async move {
            limiter.close().await?;
            Ok(Payload::None)
        })
        .map(Fut::new)
    }

    /// asyncio form of `reset`.
    #[pyo3(signature = (key = None))]
    fn areset<'py>(&self, py: Python<'py>, key: Key<'_>) -> PyResult<Fut<'py, ()>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        aio::run(py, self.remote, false, async move {
            limiter.reset(k.as_deref()).await?;
            Ok(Payload::None)
        })
        .map(Fut::new)
    }

    /// asyncio form of `release`.
    #[pyo3(signature = (lease, key = None))]
    fn arelease<'py>(&self, py: Python<'py>, lease: PyRef<'py, Lease>, key: Key<'_>) -> PyResult<Fut<'py, ()>> {
        let limiter = self.inner.clone();
        let k = owned(lease_key(&lease, &key));
        let l = lease.inner;
        let started = crate::trace::started(&self.inner);
        let collector = crate::trace::collector(started);
        let noted = collector.clone();
        let future = aio::run(py, self.remote, false, async move {
            crate::trace::noted(noted, limiter.release(k.as_deref(), &l)).await?;
            Ok(Payload::None)
        })?;
        self.trace_future(py, "release", &future, started, collector);
        Ok(Fut::new(future))
    }

    /// asyncio form of `extend`.
    #[pyo3(signature = (lease, key = None))]
    fn aextend<'py>(&self, py: Python<'py>, lease: PyRef<'py, Lease>, key: Key<'_>) -> PyResult<Fut<'py, ()>> {
        let limiter = self.inner.clone();
        let k = owned(lease_key(&lease, &key));
        let l = lease.inner;
        aio::run(py, self.remote, false, async move {
            limiter.extend(k.as_deref(), &l).await?;
            Ok(Payload::None)
        })
        .map(Fut::new)
    }

    /// asyncio form of `points_used`.
    #[pyo3(signature = (estimate, actual, key = None))]
    fn apoints_used<'py>(
        &self,
        py: Python<'py>,
        estimate: Cost<PEstimate>,
        actual: Cost<PActual>,
        key: Key<'_>,
    ) -> PyResult<Fut<'py, Decision>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        let (estimate, actual) = (estimate.0, actual.0);
        aio::run(py, self.remote, false, async move {
            let d = limiter.points_used(k.as_deref(), estimate, actual).await?;
            Ok(Payload::Decision(d, k, None))
        })
        .map(Fut::new)
    }

    /// asyncio form of `settle`.
    fn asettle<'py>(
        &self,
        py: Python<'py>,
        decision: SettleDecision,
        actual: Cost<PActual>,
    ) -> PyResult<Fut<'py, Decision>> {
        let limiter = self.inner.clone();
        let (decision, actual) = (decision.0, actual.0);
        let started = crate::trace::started(&self.inner);
        let collector = crate::trace::collector(started);
        let noted = collector.clone();
        let subject = started.map(|_| crate::trace::Subject::settle(&self.inner, &decision, actual));
        let future = aio::run(py, self.remote, false, async move {
            let d = crate::trace::noted(noted, limiter.settle(&decision, actual)).await?;
            Ok(Payload::Decision(d, None, None))
        })?;
        if let Some(subject) = subject {
            crate::trace::traced_future(py, || subject, "settle", &future, started, collector);
        }
        Ok(Fut::new(future))
    }

    /// asyncio form of `pause`.
    #[pyo3(signature = (duration, key = None))]
    fn apause<'py>(&self, py: Python<'py>, duration: Seconds<PDuration>, key: Key<'_>) -> PyResult<Fut<'py, f64>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        let duration = duration.0;
        aio::run(py, self.remote, false, async move {
            Ok(Payload::Seconds(Some(limiter.pause(k.as_deref(), duration).await?)))
        })
        .map(Fut::new)
    }

    /// asyncio form of `observe`.
    #[pyo3(signature = (status, headers, key = None, max_pause = None))]
    fn aobserve<'py>(
        &self,
        py: Python<'py>,
        status: Status,
        headers: Headers,
        key: Key<'_>,
        max_pause: Option<Seconds<PMaxPause>>,
    ) -> PyResult<Fut<'py, Option<f64>>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        let (status, max_pause) = (status.0, max_pause.map(|m| m.0));
        aio::run(py, self.remote, false, async move {
            Ok(Payload::Seconds(limiter.observe_within(k.as_deref(), status, &headers.0, max_pause).await?))
        })
        .map(Fut::new)
    }

    /// asyncio form of `resume`.
    #[pyo3(signature = (key = None))]
    fn aresume<'py>(&self, py: Python<'py>, key: Key<'_>) -> PyResult<Fut<'py, bool>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        aio::run(py, self.remote, false, async move { Ok(Payload::Flag(limiter.resume(k.as_deref()).await?)) })
            .map(Fut::new)
    }

    /// asyncio form of `block`.
    #[pyo3(signature = (duration, key = None))]
    fn ablock<'py>(&self, py: Python<'py>, duration: Seconds<PDuration>, key: Key<'_>) -> PyResult<Fut<'py, f64>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        let duration = duration.0;
        aio::run(py, self.remote, false, async move {
            Ok(Payload::Seconds(Some(limiter.block(k.as_deref(), duration).await?)))
        })
        .map(Fut::new)
    }

    /// asyncio form of `unblock`.
    #[pyo3(signature = (key = None))]
    fn aunblock<'py>(&self, py: Python<'py>, key: Key<'_>) -> PyResult<Fut<'py, bool>> {
        let limiter = self.inner.clone();
        let k = owned(crate::args::key(&key));
        aio::run(py, self.remote, false, async move { Ok(Payload::Flag(limiter.unblock(k.as_deref()).await?)) })
            .map(Fut::new)
    }

    /// asyncio form of `fleet_metrics`.
    fn afleet_metrics<'py>(&self, py: Python<'py>) -> PyResult<Fut<'py, Metrics>> {
        let limiter = self.inner.clone();
        aio::run(py, self.remote, false, async move { Ok(Payload::Metrics(limiter.fleet_metrics().await?)) })
            .map(Fut::new)
    }

    fn __repr__(&self) -> String {
        format!("Limiter(kind={:?}, name={:?})", self.inner.kind().as_str(), self.inner.name())
    }
}

/// A limiter that always allows and touches no backend (admins, tests).
#[pyfunction]
pub fn unlimited(py: Python<'_>) -> PyResult<PyLimiter<'_>> {
    Limiter::wrap(py, ratekeeper::Limiter::unlimited(), false)
}

impl Limiter {
    /// Hands a traced asyncio call of this limiter to the hook (see `trace::traced_future`).
    fn trace_future(
        &self,
        py: Python<'_>,
        method: &'static str,
        future: &Bound<'_, PyAny>,
        started: Option<u64>,
        collector: Option<ratekeeper::trace::Collector>,
    ) {
        crate::trace::traced_future(py, || crate::trace::Subject::of(&self.inner), method, future, started, collector);
    }
}
