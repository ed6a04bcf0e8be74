//! [`Limiter`]: the object users hold, with every call style (`check`, `peek`, `acquire`,
//! `within_limit`, `reset`, leases, `points_used`), async and blocking.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::backend::{Backend, BackendInner, Failover, MemoryBackend, RedisBackend};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::engine::{Algorithm, Colocate, Kind, LimiterConfig, LimiterSpec, Op, Outcome};
use crate::error::Result;
use crate::live::{Compiled, NameState};
use crate::metrics::{Counter, LimiterMetrics};
use crate::observe::Switch;
use crate::params::{micros, validate_cost, validate_duration, validate_key};
use crate::runtime::block_on;
use partitions::{partition_source, PartitionSet};

mod block;
mod check_all;
mod constructors;
mod deny;
mod fast;
mod hold;
mod inspect;
mod leased;
mod partitions;
mod pause;
pub(crate) mod pipeline;
mod release;
mod seal;
mod settle;
mod shadow;
mod waiting;

use crate::defaults::{DEFAULT_MAX_PAUSE, DEFAULT_WAIT_TIMEOUT};
pub use check_all::{CombinedDecision, PartDecision, MAX_CHECK_ALL_PARTS};
pub use partitions::PartitionsHeld;
pub use waiting::{Permit, Policy};

/// A limiter's Redis backend, and how the limiter applies its failure policy.
pub(crate) type RedisTarget<'a> = (&'a Arc<RedisBackend>, &'a Failover);

/// A rate limiter bound to a backend. Cheap to clone, safe to share between threads and tasks.
#[derive(Clone, Debug)]
pub struct Limiter {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    name: Box<str>,
    spec: LimiterSpec,
    algorithm: Algorithm,
    target: Target,
    wait_timeout: Duration,
    /// The longest pause `pause` and `observe` write (see [`Limiter::with_max_pause`]).
    max_pause: Duration,
    /// Each policy's setting (see `pipeline.rs`).
    policies: pipeline::Policies,
    /// Whether the backend's `fail_open` / `fallback` policy applies (see
    /// [`Limiter::with_allow_fallback`]).
    allow_fallback: bool,
    /// Shared by the copies `with_wait_timeout` makes.
    metrics: Arc<LimiterMetrics>,
    /// The name's live overrides in this backend (`None`: unlimited).
    live: Option<Arc<NameState>>,
    /// A leased token bucket on Redis: this process's leases (shared by the copies).
    pool: Option<Arc<leased::LeasePool>>,
    /// Where the limiter's Redis keys take their hash tag from.
    colocate: Colocate,
    /// What the settle tickets of this limiter's decisions name it by (0: its decisions cannot
    /// be settled); see `settle.rs`.
    settle_identity: u64,
    /// Whether the backend's calls are timed (see `observe.rs`).
    observe: Arc<Switch>,
}

/// Where a limiter's state lives: a typed handle on its backend.
#[derive(Debug, Clone)]
enum Target {
    /// `namespace`: the limiter's (kind, name) in the memory backend.
    Memory { backend: Arc<MemoryBackend>, namespace: u32 },
    /// `failover`: how the limiter applies the backend's failure policy.
    Redis { backend: Arc<RedisBackend>, failover: Failover },
    /// `partitions`: leases and pacing in this process (see `partitions/set.rs`).
    Partitions(Arc<PartitionSet>),
    /// `unlimited`: no state anywhere.
    Nowhere,
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
                algorithm: Algorithm::Unlimited(crate::engine::unlimited::Unlimited),
                target: Target::Nowhere,
                wait_timeout: DEFAULT_WAIT_TIMEOUT,
                max_pause: DEFAULT_MAX_PAUSE,
                policies: pipeline::Policies::default(),
                allow_fallback: true,
                metrics: Arc::default(),
                live: None,
                pool: None,
                colocate: Colocate::Identity,
                settle_identity: 0,
                observe: Arc::default(),
            }),
        }
    }

    pub(crate) fn build(backend: &Backend, name: &str, spec: LimiterSpec) -> Result<Limiter> {
        Limiter::build_as(backend, name, spec, true)
    }

    /// Builds a limiter; one that does not `join` only observes the name (see
    /// [`Backend::observer_from_json`]).
    pub(crate) fn build_as(backend: &Backend, name: &str, spec: LimiterSpec, join: bool) -> Result<Limiter> {
        let algorithm = spec.compile()?;
        // Concurrent limiters fail closed unless they opt in (see `with_allow_fallback`); leased
        // partitions spend what they hold while Redis is unreachable, and nothing more.
        let allow_fallback = !matches!(algorithm, Algorithm::Concurrent(_) | Algorithm::Partitions(_));
        let target = match (&algorithm, &*backend.inner) {
            (Algorithm::Unlimited(_), _) => Target::Nowhere,
            (Algorithm::Partitions(params), inner) => {
                Target::Partitions(Arc::new(PartitionSet::new(*params, name, partition_source(inner), backend.clock())))
            }
            (_, BackendInner::Memory(memory)) => {
                Target::Memory { backend: memory.clone(), namespace: memory.namespace(spec.kind(), name) }
            }
            (_, BackendInner::Redis(redis)) => {
                if join && redis.on_conflict() == crate::OnConflict::Raise {
                    // One read of the registry, before anything is joined or registered.
                    crate::runtime::block_on(redis.refuse_spec_conflict(name, &spec))?;
                }
                let failover = redis.failover(spec.kind(), name, &spec, allow_fallback)?;
                Target::Redis { backend: redis.clone(), failover }
            }
        };
        let metrics = Arc::<LimiterMetrics>::default();
        let live = match (&target, &*backend.inner) {
            (Target::Nowhere, _) => None,
            (_, BackendInner::Memory(backend)) if !join => Some(backend.live.observe(name)),
            (_, BackendInner::Redis(backend)) if !join => Some(backend.live.observe(name)),
            (_, BackendInner::Memory(backend)) => Some(backend.live.join(name, &spec, &metrics)),
            (_, BackendInner::Redis(backend)) => {
                let state = backend.live.join(name, &spec, &metrics);
                backend.ensure_live_task();
                Some(state)
            }
        };
        let pool = match &target {
            Target::Redis { backend, failover } => leased::pool_for(&algorithm, backend, name, failover.colocate),
            _ => None,
        };
        let settle_identity = settle::identity(&algorithm, &target, spec.kind(), name);
        let observe = match &*backend.inner {
            BackendInner::Memory(memory) => memory.live.observe.clone(),
            BackendInner::Redis(redis) => redis.live.observe.clone(),
        };
        Ok(Limiter {
            inner: Arc::new(Inner {
                settle_identity,
                name: name.into(),
                spec,
                algorithm,
                target,
                wait_timeout: DEFAULT_WAIT_TIMEOUT,
                max_pause: DEFAULT_MAX_PAUSE,
                policies: pipeline::Policies::default(),
                allow_fallback,
                metrics,
                live,
                pool,
                colocate: Colocate::Identity,
                observe,
            }),
        })
    }

    /// The same limiter with another default wait timeout for `acquire` and `within_limit`
    /// (zero: never wait).
    pub fn with_wait_timeout(&self, wait_timeout: Duration) -> Result<Limiter> {
        if !wait_timeout.is_zero() {
            validate_duration("wait_timeout", wait_timeout)?;
        }
        Ok(self.with(|inner| inner.wait_timeout = wait_timeout))
    }

    /// The same limiter (same state, same metrics) with `max_pause` as the longest pause that
    /// [`Limiter::pause`] and [`Limiter::observe`] write (default [`DEFAULT_MAX_PAUSE`], one
    /// hour): a longer one is shortened to it and counted in [`crate::Metrics::pauses_clamped`].
    /// A third party's `Retry-After` of decades is then an hour, and [`Limiter::resume`] ends
    /// it sooner. A `max_pause` under one microsecond or over 100 years is
    /// [`crate::Error::InvalidArgument`] naming `max_pause`.
    pub fn with_max_pause(&self, max_pause: Duration) -> Result<Limiter> {
        let max_pause = validate_duration("max_pause", max_pause)?;
        Ok(self.with(|inner| inner.max_pause = max_pause))
    }

    /// The same limiter with its Redis keys' hash tag taken as `colocate` says (see
    /// [`Colocate`]): [`Colocate::Tenant`] puts every co-located limiter's keys of one tenant
    /// in one Cluster slot, so they can be checked together ([`Backend::check_all`]). It moves
    /// the keys: state kept under the other layout is not seen. No effect on other backends.
    pub fn with_colocate(&self, colocate: Colocate) -> Limiter {
        self.with(|inner| {
            if let Target::Redis { failover, .. } = &mut inner.target {
                failover.colocate = colocate;
            }
            inner.colocate = colocate;
        })
    }

    /// Where this limiter's Redis keys take their hash tag from (see [`Limiter::with_colocate`]).
    pub fn colocate(&self) -> Colocate {
        self.inner.colocate
    }

    /// The longest pause this limiter writes (see [`Limiter::with_max_pause`]).
    pub fn max_pause(&self) -> Duration {
        self.inner.max_pause
    }

    /// A copy of this limiter (same state, metrics, leases) with `change` made to its options.
    fn with(&self, change: impl FnOnce(&mut Inner)) -> Limiter {
        let mut inner = (*self.inner).clone();
        change(&mut inner);
        Limiter { inner: Arc::new(inner) }
    }

    /// The same limiter (same state) with the backend's `fail_open` / `fallback` failure policy
    /// applying to it (`true`) or not (`false`: it fails closed while Redis is unreachable).
    ///
    /// Every limiter allows it by default except concurrent limiters: a process's in-memory
    /// fallback is a limit per process (a mutex held in N processes at once), its fencing tokens
    /// only increase within the process, and a lease granted open has fencing token 0. A
    /// concurrent limiter that opts in gets exactly that while Redis is down; its fallback leases
    /// are released and extended by the fallback, even after Redis has recovered.
    pub fn with_allow_fallback(&self, allow: bool) -> Result<Limiter> {
        let inner = &self.inner;
        let target = match &inner.target {
            Target::Redis { backend, failover } => Target::Redis {
                backend: backend.clone(),
                failover: Failover {
                    colocate: failover.colocate,
                    ..backend.failover(inner.spec.kind(), &inner.name, &inner.spec, allow)?
                },
            },
            other => other.clone(),
        };
        Ok(self.with(|inner| {
            inner.target = target;
            inner.allow_fallback = allow;
        }))
    }

    /// Whether the backend's `fail_open` / `fallback` policy applies to this limiter (see
    /// [`Limiter::with_allow_fallback`]).
    pub fn allows_fallback(&self) -> bool {
        self.inner.allow_fallback
    }

    /// Whether the backend's calls are traced (see [`crate::Backend::start_tracing`]).
    pub fn traced(&self) -> bool {
        self.inner.observe.traced()
    }

    /// Its backend's [`crate::Backend::id`].
    pub fn backend_id(&self) -> usize {
        Arc::as_ptr(&self.inner.observe) as usize
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

    /// The most one call may cost: the burst, the smallest limit, the slot count; 2^53 (the
    /// largest cost) for an `unlimited` limiter. A larger cost is refused on every call, so a
    /// caller with a fixed cost (the HTTP middleware) can refuse it once, up front.
    pub fn capacity(&self) -> u64 {
        self.inner.algorithm.capacity()
    }

    /// Whether a charge can be given back with [`Limiter::points_used`] (`estimate` → 0): true
    /// for the kinds on the GCRA engine (token bucket, leaky, points). The HTTP middleware's
    /// `count` charges these before the response and refunds after; the others it peeks before
    /// and charges after.
    pub fn refundable(&self) -> bool {
        self.inner.algorithm.adjusts()
    }

    /// The span the quota covers, where the kind has one window (see [`LimiterSpec::window`]).
    pub fn window(&self) -> Option<Duration> {
        self.inner.spec.window()
    }

    /// The spec and options the limiter was built with, as data.
    pub fn config(&self) -> LimiterConfig {
        let colocate = self.colocate();
        let mut config = LimiterConfig::from(self.inner.spec.clone());
        config.wait_timeout = Some(self.inner.wait_timeout);
        config.colocate = (colocate != Colocate::Identity).then_some(colocate);
        self.inner.policies.describe(&mut config);
        config
    }

    /// The canonical JSON spec of the limiter (see [`LimiterConfig`]): what every language
    /// reads back, and what two limiters of one name are compared by.
    pub fn spec_json(&self) -> String {
        self.config().to_json()
    }

    /// The default wait timeout of `acquire`.
    pub fn wait_timeout(&self) -> Duration {
        self.inner.wait_timeout
    }

    /// The limiter's algorithm.
    pub(crate) fn algorithm(&self) -> &Algorithm {
        &self.inner.algorithm
    }

    /// The Redis backend and the fallback limiter (its scaled algorithm and namespace), when
    /// the limiter lives on Redis.
    pub(crate) fn redis_target(&self) -> Option<RedisTarget<'_>> {
        match &self.inner.target {
            Target::Redis { backend, failover } => Some((backend, failover)),
            _ => None,
        }
    }

    fn clock(&self) -> Arc<dyn Clock> {
        match &self.inner.target {
            Target::Memory { backend, .. } => backend.clock.clone(),
            Target::Redis { backend, .. } => backend.fallback.clock.clone(),
            Target::Partitions(set) => set.clock(),
            Target::Nowhere => Arc::new(SystemClock),
        }
    }

    /// The live override that applies to `key`, if any.
    #[inline]
    pub(crate) fn override_for(&self, key: &str) -> Option<Arc<Compiled>> {
        self.inner.live.as_ref()?.lookup(self.kind(), key)
    }

    /// The failover of a call decided by `over`: the limiter's policy, with the override's
    /// scaled limiter as the fallback.
    pub(crate) fn failover_for<'a>(failover: &'a Failover, over: Option<&Compiled>) -> Cow<'a, Failover> {
        match (over, &failover.fallback) {
            (Some(over), Some((_, namespace))) => Cow::Owned(Failover {
                policy: failover.policy,
                colocate: failover.colocate,
                fallback: over.fallback.clone().map(|algorithm| (algorithm, *namespace)),
            }),
            _ => Cow::Borrowed(failover),
        }
    }

    /// A check's key and cost, validated: the key (`""` for `None`).
    #[inline(always)]
    pub(crate) fn validate_check<'k>(&self, key: Option<&'k str>, cost: u64) -> Result<&'k str> {
        let key = validate_key(key)?;
        validate_cost("cost", cost)?;
        self.inner.algorithm.validate_cost(cost)?;
        Ok(key)
    }

    /// The operation of a check of `cost` (validated): a concurrent limiter's carries a new
    /// lease id.
    #[inline]
    pub(crate) fn check_op_of(&self, cost: u64) -> Op {
        let lease_id = if matches!(self.inner.algorithm, Algorithm::Concurrent(_)) { next_lease_id() } else { 0 };
        Op::Check { cost, lease_id, waiter: None }
    }

    /// [`Limiter::validate_check`] and [`Limiter::check_op_of`].
    #[inline]
    pub(crate) fn check_op<'k>(&self, key: Option<&'k str>, cost: u64) -> Result<(&'k str, Op)> {
        let key = self.validate_check(key, cost)?;
        Ok((key, self.check_op_of(cost)))
    }

    /// Consumes `cost` for `key` if the limit allows, never waiting. A refused call consumes
    /// nothing and returns `allowed: false` with the exact `retry_after`. On a concurrent limiter
    /// an admitted call holds a lease (in the decision) that must be released.
    pub async fn check(&self, key: Option<&str>, cost: u64) -> Result<Decision> {
        let key = self.validate_check(key, cost)?;
        if let Some(decision) = self.fast_check(key, cost) {
            return Ok(decision);
        }
        if let Some(decision) = self.fast_leased(key, cost) {
            return Ok(decision);
        }
        let outcome = self.run(key, self.check_op_of(cost)).await?;
        Ok(self.ticketed_granted(outcome, None, key, cost))
    }

    /// Blocking form of [`Limiter::check`].
    #[inline]
    pub fn check_blocking(&self, key: Option<&str>, cost: u64) -> Result<Decision> {
        // The operation is built past the fast path, which does not need it: built first, it
        // was returned from an outlined call through memory and copied twice.
        let key = self.validate_check(key, cost)?;
        if self.fast_path_observed() {
            return self.check_observed_blocking(key, cost);
        }
        if let Some(decision) = self.fast_check_untimed(key, cost) {
            return Ok(decision);
        }
        self.check_general_blocking(key, cost)
    }

    /// [`Limiter::check_blocking`] while an instrumentation observes the limiter: the timed
    /// fast path, else the general path. Out of line, so that the untimed fast path is the one
    /// source of the decision `check_blocking` returns (see [`Limiter::fast_path_observed`]).
    #[cold]
    #[inline(never)]
    fn check_observed_blocking(&self, key: &str, cost: u64) -> Result<Decision> {
        // The timed fast path inlined here: one source of the decision, built in the return
        // slot (a call of `fast_check_timed` returned it through a temporary).
        if let Some(decision) = self.fast_check_as::<true>(key, cost) {
            return Ok(decision);
        }
        self.check_general_blocking(key, cost)
    }

    /// [`Limiter::check_blocking`] past the memory backend's fast path: a leased limiter's own
    /// fast path, else the general path. Kept out of line so that the memory fast path's caller
    /// stays as small as it was.
    #[inline(never)]
    fn check_general_blocking(&self, key: &str, cost: u64) -> Result<Decision> {
        if let Some(decision) = self.fast_leased(key, cost) {
            return Ok(decision);
        }
        let outcome = self.run_blocking(key, self.check_op_of(cost))?;
        Ok(self.ticketed_granted(outcome, None, key, cost))
    }

    /// Records a concurrent limiter's grant (after `waited`, if it waited) and reclaims.
    #[inline]
    pub(super) fn granted(&self, outcome: Outcome, waited: Option<Duration>) -> Decision {
        if let Algorithm::Concurrent(_) = self.inner.algorithm {
            let m = &self.inner.metrics;
            m.add(Counter::Reclaimed, outcome.reclaimed);
            if outcome.decision.lease.is_some() {
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

    /// Forgets all state of `key` (waiters on a concurrent limiter are woken to re-check). A
    /// partitions limiter gives back this process's partitions of `key` (other processes keep
    /// theirs: they may be spending them).
    pub async fn reset(&self, key: Option<&str>) -> Result<()> {
        let key = validate_key(key)?;
        match &self.inner.target {
            Target::Partitions(set) => set.release(Some(key)).await,
            Target::Redis { backend, .. } => {
                self.forget_refusal(key);
                backend.reset(self.kind(), &self.inner.name, key, &self.inner.algorithm, self.colocate()).await?;
                self.forget_lease(key);
                Ok(())
            }
            _ => {
                self.reset_local(key);
                Ok(())
            }
        }
    }

    /// Blocking form of [`Limiter::reset`].
    pub fn reset_blocking(&self, key: Option<&str>) -> Result<()> {
        match &self.inner.target {
            Target::Redis { .. } | Target::Partitions(_) => block_on(self.reset(key)),
            _ => {
                self.reset_local(validate_key(key)?);
                Ok(())
            }
        }
    }

    fn reset_local(&self, key: &str) {
        if let Target::Memory { backend, namespace } = &self.inner.target {
            backend.reset(*namespace, key);
        }
    }
}
