//! [`Limiter`]: the object users hold, with every call style (`check`, `peek`, `acquire`,
//! `within_limit`, `reset`, leases, `points_used`), async and blocking.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::backend::{Backend, BackendInner, Op, Outcome};
use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, Lease};
use crate::error::{Error, Result};
use crate::limiter::{Algorithm, Kind, LimiterSpec};
use crate::metrics::{Counter, LimiterMetrics, Metrics};
use crate::params::{micros, validate_cost, validate_duration, validate_key};
use crate::runtime::block_on;

/// The default time `acquire` waits (Sidekiq's default).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

/// What `within_limit` does when the limit cannot be had within the wait timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// Return [`Error::OverLimit`] (the default).
    #[default]
    Raise,
    /// Skip the block and return `Ok(None)`.
    Ignore,
}

/// A rate limiter bound to a backend. Cheap to clone, safe to share between threads and tasks.
#[derive(Clone, Debug)]
pub struct Limiter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: Box<str>,
    spec: LimiterSpec,
    algorithm: Algorithm,
    target: Target,
    wait_timeout: Duration,
    /// Shared by the copies `with_wait_timeout` makes (concurrent limiters only record any).
    metrics: Arc<LimiterMetrics>,
}

#[derive(Debug, Clone)]
enum Target {
    Memory {
        backend: Backend,
        namespace: u32,
    },
    /// `fallback`: the limiter scaled for the fallback failure policy, and its namespace there.
    Redis {
        backend: Backend,
        fallback: Option<(Algorithm, u32)>,
    },
    Nowhere,
}

/// What `within_limit` hands the block: the decision, and for points limiters the means to
/// report the actual cost.
#[derive(Debug)]
pub struct Permit {
    limiter: Limiter,
    key: Option<String>,
    estimate: u64,
    decision: Decision,
}

impl Permit {
    /// The decision that admitted the block.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Reports the actual cost of the block; the difference from the estimate is charged or
    /// refunded. Only for the GCRA family (points, token bucket, leaky).
    pub async fn points_used(&self, actual: u64) -> Result<Decision> {
        self.limiter.points_used(self.key.as_deref(), self.estimate, actual).await
    }

    /// Blocking form of [`Permit::points_used`].
    pub fn points_used_blocking(&self, actual: u64) -> Result<Decision> {
        self.limiter.points_used_blocking(self.key.as_deref(), self.estimate, actual)
    }
}

/// A process-unique lease id: a random prefix mixed with the pid (so a forked child never
/// repeats its parent's ids), and a counter.
fn next_lease_id() -> u128 {
    static SEED: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    use std::hash::BuildHasher;
    let seed = SEED.get_or_init(foldhash::fast::RandomState::default);
    // The top bit is left clear: the Redis backend marks fallback leases with it.
    let prefix = seed.hash_one((std::process::id(), SystemClock.now_micros())) >> 1;
    ((prefix as u128) << 64) | COUNTER.fetch_add(1, Ordering::Relaxed) as u128
}

impl Limiter {
    /// A limiter that always allows and touches no backend (admins, tests).
    pub fn unlimited() -> Limiter {
        Limiter {
            inner: Arc::new(Inner {
                name: "unlimited".into(),
                spec: LimiterSpec::Unlimited,
                algorithm: Algorithm::Unlimited,
                target: Target::Nowhere,
                wait_timeout: DEFAULT_WAIT_TIMEOUT,
                metrics: Arc::default(),
            }),
        }
    }

    pub(crate) fn build(backend: &Backend, name: &str, spec: LimiterSpec) -> Result<Limiter> {
        let algorithm = spec.compile()?;
        let target = match (&algorithm, &*backend.inner) {
            (Algorithm::Unlimited, _) => Target::Nowhere,
            (_, BackendInner::Memory(memory)) => {
                Target::Memory { backend: backend.clone(), namespace: memory.namespace(spec.kind(), name) }
            }
            (_, BackendInner::Redis(redis)) => {
                let fallback = match redis.fallback_divisor() {
                    Some(divisor) => {
                        let scaled = spec.scaled(divisor).compile()?;
                        Some((scaled, redis.fallback.namespace(spec.kind(), name)))
                    }
                    None => None,
                };
                Target::Redis { backend: backend.clone(), fallback }
            }
        };
        let metrics = Arc::<LimiterMetrics>::default();
        if let (Target::Redis { backend, .. }, Algorithm::Concurrent(_)) = (&target, &algorithm) {
            if let BackendInner::Redis(redis) = &*backend.inner {
                redis.spawn_metrics_flush(spec.kind(), name, &metrics);
            }
        }
        Ok(Limiter {
            inner: Arc::new(Inner {
                name: name.into(),
                spec,
                algorithm,
                target,
                wait_timeout: DEFAULT_WAIT_TIMEOUT,
                metrics,
            }),
        })
    }

    /// The same limiter with another default wait timeout for `acquire` and `within_limit`
    /// (zero: never wait).
    pub fn with_wait_timeout(&self, wait_timeout: Duration) -> Result<Limiter> {
        if !wait_timeout.is_zero() {
            validate_duration("wait_timeout", wait_timeout)?;
        }
        let inner = &self.inner;
        Ok(Limiter {
            inner: Arc::new(Inner {
                name: inner.name.clone(),
                spec: inner.spec.clone(),
                algorithm: inner.algorithm.clone(),
                target: inner.target.clone(),
                wait_timeout,
                metrics: inner.metrics.clone(),
            }),
        })
    }

    /// The limiter's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The limiter's kind.
    pub fn kind(&self) -> Kind {
        self.inner.spec.kind()
    }

    /// The spec the limiter was built from.
    pub fn spec(&self) -> &LimiterSpec {
        &self.inner.spec
    }

    /// The default wait timeout of `acquire`.
    pub fn wait_timeout(&self) -> Duration {
        self.inner.wait_timeout
    }

    fn clock(&self) -> Arc<dyn Clock> {
        match &self.inner.target {
            Target::Memory { backend, .. } | Target::Redis { backend, .. } => backend.clock(),
            Target::Nowhere => Arc::new(SystemClock),
        }
    }

    /// Runs one operation.
    async fn run(&self, key: &str, op: Op) -> Result<Outcome> {
        match &self.inner.target {
            Target::Redis { backend, fallback } => match &*backend.inner {
                BackendInner::Redis(redis) => {
                    redis
                        .execute(self.kind(), &self.inner.name, key, &self.inner.algorithm, fallback.as_ref(), op)
                        .await
                }
                BackendInner::Memory(_) => unreachable!("a Redis target holds a Redis backend"),
            },
            _ => self.run_local(key, op),
        }
    }

    /// Runs one operation, blocking the calling thread on remote backends.
    #[inline]
    fn run_blocking(&self, key: &str, op: Op) -> Result<Outcome> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.run(key, op)),
            _ => self.run_local(key, op),
        }
    }

    /// Runs one operation on an in-process target: never waits, so it is the hot path of both
    /// the async and the blocking forms.
    #[inline]
    fn run_local(&self, key: &str, op: Op) -> Result<Outcome> {
        match &self.inner.target {
            Target::Memory { backend, namespace } => match &*backend.inner {
                BackendInner::Memory(memory) => memory.execute(*namespace, key, &self.inner.algorithm, op),
                BackendInner::Redis(_) => unreachable!("a memory target holds a memory backend"),
            },
            _ => Ok(Outcome::of(Decision::unlimited())),
        }
    }

    #[inline]
    fn check_op<'k>(&self, key: Option<&'k str>, cost: u64) -> Result<(&'k str, Op)> {
        let key = validate_key(key)?;
        validate_cost("cost", cost)?;
        self.inner.algorithm.validate_cost(cost)?;
        let lease_id = if matches!(self.inner.algorithm, Algorithm::Concurrent(_)) { next_lease_id() } else { 0 };
        Ok((key, Op::Check { cost, lease_id }))
    }

    /// Consumes `cost` for `key` if the limit allows, never waiting. A refused call consumes
    /// nothing and returns `allowed: false` with the exact `retry_after`. On a concurrent limiter
    /// an admitted call holds a lease (in the decision) that must be released.
    pub async fn check(&self, key: Option<&str>, cost: u64) -> Result<Decision> {
        let (key, op) = self.check_op(key, cost)?;
        let outcome = self.run(key, op).await?;
        Ok(self.granted(outcome, None))
    }

    /// Blocking form of [`Limiter::check`].
    #[inline]
    pub fn check_blocking(&self, key: Option<&str>, cost: u64) -> Result<Decision> {
        let (key, op) = self.check_op(key, cost)?;
        let outcome = self.run_blocking(key, op)?;
        Ok(self.granted(outcome, None))
    }

    /// Records a concurrent limiter's grant (after `waited`, if it waited) and reclaims.
    #[inline]
    fn granted(&self, outcome: Outcome, waited: Option<Duration>) -> Decision {
        if let Algorithm::Concurrent(_) = self.inner.algorithm {
            let m = &self.inner.metrics;
            m.add(Counter::Reclaimed, outcome.reclaimed);
            if outcome.decision.allowed {
                m.add(Counter::Held, 1);
                match waited {
                    None => m.add(Counter::Immediate, 1),
                    Some(wait) => {
                        m.add(Counter::Waited, 1);
                        m.add(Counter::WaitMicros, micros(wait));
                    }
                }
            }
        }
        outcome.decision
    }

    /// Reports what a call of cost 1 would get, consuming nothing.
    pub async fn peek(&self, key: Option<&str>) -> Result<Decision> {
        let key = validate_key(key)?;
        Ok(self.run(key, Op::Peek).await?.decision)
    }

    /// Blocking form of [`Limiter::peek`].
    pub fn peek_blocking(&self, key: Option<&str>) -> Result<Decision> {
        let key = validate_key(key)?;
        Ok(self.run_blocking(key, Op::Peek)?.decision)
    }

    /// Consumes `cost`, waiting up to `wait_timeout` (default: the limiter's) for the limit to
    /// allow it. Waits sleep exactly until the decision can change (or, for a concurrent limiter,
    /// until a slot is released); when the wait cannot succeed in time, fails at once with
    /// [`Error::OverLimit`] carrying the exact `retry_after`.
    pub async fn acquire(&self, key: Option<&str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Decision> {
        let wait = match wait_timeout {
            Some(w) if !w.is_zero() => validate_duration("wait_timeout", w)?,
            Some(w) => w,
            None => self.inner.wait_timeout,
        };
        let (key, _) = self.check_op(key, cost)?;
        let clock = self.clock();
        let started = clock.now_micros();
        let deadline = started.saturating_add(micros(wait));
        let mut attempts = 0;
        loop {
            let (_, op) = self.check_op(Some(key), cost)?;
            let outcome = self.run(key, op).await?;
            attempts += 1;
            if outcome.decision.allowed {
                let waited = (attempts > 1).then(|| Duration::from_micros(clock.now_micros().saturating_sub(started)));
                return Ok(self.granted(outcome, waited));
            }
            self.inner.metrics.add(Counter::Reclaimed, outcome.reclaimed);
            let retry_after = outcome.decision.retry_after;
            let now = clock.now_micros();
            let ready_at = now.saturating_add(micros(retry_after));
            match outcome.wake {
                // A release may free a slot long before `retry_after` (which is when an overdue
                // holder could be reclaimed): wait for either, up to the deadline.
                Some(wake) if now < deadline => {
                    wake.wait(&*clock, Duration::from_micros(ready_at.min(deadline) - now)).await;
                }
                // Nothing but time changes these decisions: if waiting cannot succeed within
                // the deadline, say so at once instead of sleeping in vain.
                None if ready_at <= deadline => clock.sleep(retry_after.max(Duration::from_micros(1))).await,
                _ => return Err(Error::OverLimit { retry_after }),
            }
        }
    }

    /// Blocking form of [`Limiter::acquire`]. Call it from plain threads, not from inside an
    /// async task.
    pub fn acquire_blocking(&self, key: Option<&str>, cost: u64, wait_timeout: Option<Duration>) -> Result<Decision> {
        if let Target::Redis { .. } = self.inner.target {
            return block_on(self.acquire(key, cost, wait_timeout));
        }
        // In-process fast path: a call that need not wait involves no runtime.
        let (key_ok, op) = self.check_op(key, cost)?;
        let outcome = self.run_local(key_ok, op)?;
        if outcome.decision.allowed {
            return Ok(self.granted(outcome, None));
        }
        self.inner.metrics.add(Counter::Reclaimed, outcome.reclaimed);
        block_on(self.acquire(key, cost, wait_timeout))
    }

    /// Frees a lease granted by a concurrent limiter. Fails with [`Error::LeaseLost`] when the
    /// lease had been reclaimed (it outlived `lock_timeout`) or the limiter was reset.
    pub async fn release(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, op)) => {
                let result = self.run(key, op).await;
                self.released(lease, result)
            }
            None => Ok(()),
        }
    }

    /// Blocking form of [`Limiter::release`].
    pub fn release_blocking(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, op)) => {
                let result = self.run_blocking(key, op);
                self.released(lease, result)
            }
            None => Ok(()),
        }
    }

    /// Records a release: the hold time, and an overage when the lease outlived lock_timeout.
    fn released(&self, lease: &Lease, result: Result<Outcome>) -> Result<()> {
        let Algorithm::Concurrent(c) = &self.inner.algorithm else { return result.map(|_| ()) };
        let m = &self.inner.metrics;
        match result {
            Ok(outcome) => {
                let held = outcome.decision.decided_at_micros.saturating_sub(lease.granted_at_micros);
                m.add(Counter::HeldMicros, held);
                if held > c.lock_us {
                    m.add(Counter::Overages, 1);
                }
                Ok(())
            }
            Err(e) => {
                if let Error::LeaseLost { .. } = e {
                    m.add(Counter::Overages, 1);
                }
                Err(e)
            }
        }
    }

    /// Renews a concurrent lease for another `lock_timeout` from now, so a long block keeps its
    /// slot. Fails with [`Error::LeaseLost`] if the lease was already reclaimed.
    pub async fn extend(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, _)) => self.run(key, Op::Extend { lease_id: lease.id }).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Blocking form of [`Limiter::extend`].
    pub fn extend_blocking(&self, key: Option<&str>, lease: &Lease) -> Result<()> {
        match self.release_op(key, lease)? {
            Some((key, _)) => self.run_blocking(key, Op::Extend { lease_id: lease.id }).map(|_| ()),
            None => Ok(()),
        }
    }

    /// This process's metrics for this limiter (concurrent limiters; zero for others).
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics.snapshot()
    }

    /// The metrics of every process sharing this limiter: on Redis, this process's pending
    /// counts are flushed first and the aggregate read back; on memory, the same as
    /// [`Limiter::metrics`].
    pub async fn fleet_metrics(&self) -> Result<Metrics> {
        match &self.inner.target {
            Target::Redis { backend, .. } => match &*backend.inner {
                BackendInner::Redis(redis) => {
                    redis.fleet_metrics(self.kind(), &self.inner.name, &self.inner.metrics).await
                }
                BackendInner::Memory(_) => unreachable!("a Redis target holds a Redis backend"),
            },
            _ => Ok(self.metrics()),
        }
    }

    /// Blocking form of [`Limiter::fleet_metrics`].
    pub fn fleet_metrics_blocking(&self) -> Result<Metrics> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.fleet_metrics()),
            _ => Ok(self.metrics()),
        }
    }

    /// The operation releasing `lease`, or `None` when there is nothing to release or extend (unlimited
    /// limiters, and leases granted while failing open, whose fencing token is 0).
    fn release_op<'k>(&self, key: Option<&'k str>, lease: &Lease) -> Result<Option<(&'k str, Op)>> {
        let key = validate_key(key)?;
        match self.inner.algorithm {
            Algorithm::Concurrent(_) if lease.fencing_token == 0 => Ok(None),
            Algorithm::Concurrent(_) => Ok(Some((key, Op::Release { lease_id: lease.id }))),
            Algorithm::Unlimited => Ok(None),
            _ => Err(Error::invalid("lease", "only concurrent limiters grant leases")),
        }
    }

    /// Corrects a charge of `estimate` to `actual` for the GCRA family (points, token bucket,
    /// leaky): the difference is charged or refunded. Returns the state after the correction.
    pub async fn points_used(&self, key: Option<&str>, estimate: u64, actual: u64) -> Result<Decision> {
        match self.adjust_op(key, estimate, actual)? {
            Some((key, op)) => Ok(self.run(key, op).await?.decision),
            None => Ok(Decision::unlimited()),
        }
    }

    /// Blocking form of [`Limiter::points_used`].
    pub fn points_used_blocking(&self, key: Option<&str>, estimate: u64, actual: u64) -> Result<Decision> {
        match self.adjust_op(key, estimate, actual)? {
            Some((key, op)) => Ok(self.run_blocking(key, op)?.decision),
            None => Ok(Decision::unlimited()),
        }
    }

    /// The operation correcting `estimate` to `actual`, or `None` for unlimited limiters.
    fn adjust_op<'k>(&self, key: Option<&'k str>, estimate: u64, actual: u64) -> Result<Option<(&'k str, Op)>> {
        let key = validate_key(key)?;
        validate_cost("estimate", estimate)?;
        validate_cost("actual", actual)?;
        match &self.inner.algorithm {
            Algorithm::Gcra(g) => {
                for (name, value) in [("estimate", estimate), ("actual", actual)] {
                    if value > g.capacity {
                        return Err(Error::invalid(name, format!("{value} exceeds the capacity of {}", g.capacity)));
                    }
                }
                Ok(Some((key, Op::Adjust { estimate, actual })))
            }
            Algorithm::Unlimited => Ok(None),
            _ => Err(Error::invalid("actual", "points_used applies to points, token bucket and leaky limiters")),
        }
    }

    /// Forgets all state of `key` (waiters on a concurrent limiter are woken to re-check).
    pub async fn reset(&self, key: Option<&str>) -> Result<()> {
        let key = validate_key(key)?;
        match &self.inner.target {
            Target::Redis { backend, .. } => match &*backend.inner {
                BackendInner::Redis(redis) => {
                    redis.reset(self.kind(), &self.inner.name, key, &self.inner.algorithm).await
                }
                BackendInner::Memory(_) => unreachable!("a Redis target holds a Redis backend"),
            },
            _ => Ok(self.reset_local(key)),
        }
    }

    /// Blocking form of [`Limiter::reset`].
    pub fn reset_blocking(&self, key: Option<&str>) -> Result<()> {
        match &self.inner.target {
            Target::Redis { .. } => block_on(self.reset(key)),
            _ => Ok(self.reset_local(validate_key(key)?)),
        }
    }

    fn reset_local(&self, key: &str) {
        if let Target::Memory { backend, namespace } = &self.inner.target {
            if let BackendInner::Memory(memory) = &*backend.inner {
                memory.reset(*namespace, key);
            }
        }
    }

    /// Acquires (waiting up to the wait timeout), runs `block`, then releases any lease.
    /// With [`Policy::Ignore`] an over-limit skips the block and returns `Ok(None)`.
    pub async fn within_limit<T, F, Fut>(
        &self,
        key: Option<&str>,
        cost: u64,
        policy: Policy,
        block: F,
    ) -> Result<Option<T>>
    where
        F: FnOnce(Permit) -> Fut,
        Fut: Future<Output = T>,
    {
        let decision = match self.acquire(key, cost, None).await {
            Ok(decision) => decision,
            Err(e) if e.is_over_limit() && policy == Policy::Ignore => return Ok(None),
            Err(e) => return Err(e),
        };
        let lease = decision.lease;
        let output = block(self.permit(key, cost, decision)).await;
        if let Some(lease) = lease {
            self.release(key, &lease).await?;
        }
        Ok(Some(output))
    }

    /// Blocking form of [`Limiter::within_limit`].
    pub fn within_limit_blocking<T>(
        &self,
        key: Option<&str>,
        cost: u64,
        policy: Policy,
        block: impl FnOnce(&Permit) -> T,
    ) -> Result<Option<T>> {
        let decision = match self.acquire_blocking(key, cost, None) {
            Ok(decision) => decision,
            Err(e) if e.is_over_limit() && policy == Policy::Ignore => return Ok(None),
            Err(e) => return Err(e),
        };
        let lease = decision.lease;
        let output = block(&self.permit(key, cost, decision));
        if let Some(lease) = lease {
            self.release_blocking(key, &lease)?;
        }
        Ok(Some(output))
    }

    fn permit(&self, key: Option<&str>, estimate: u64, decision: Decision) -> Permit {
        Permit { limiter: self.clone(), key: key.map(str::to_owned), estimate, decision }
    }
}
