//! The order every operation of a limiter goes through, written once ([`pipeline!`]):
//!
//! 1. **before** ([`Limiter::begin`]): the live override and the spec the call decides with,
//!    then each policy's `before` hook, in the order of [`policies!`]'s list; a hook may answer
//!    the call itself (the deny cache's remembered refusal), and then nothing else runs. Holds
//!    (pauses and blocks) are checked by the backend in the same atomic step as the engine:
//!    a refusal they cause comes back marked `held`.
//! 2. **the engine call** (`execute`): on the runtime ([`OnRuntime`]), on the calling thread
//!    ([`OnThread`]), or in process only ([`InProcess`], which answers nothing that needs a
//!    round trip). The three differ only in how they wait: [`pipeline!`] is the one order,
//!    expanded once with `.await` (the async calls) and once without (the blocking and
//!    in-process calls, with no future on the hot path).
//! 3. **after** ([`Limiter::after_engine`], [`Limiter::conclude`]): the outcome is counted
//!    ([`Limiter::record`], the one outcome → counter mapping); a hold a policy asks for (a
//!    block after a refusal) is written through the same I/O (`hold`); then each policy's
//!    `after` hook changes the result in place, in list order: block, the deny cache (remember
//!    the refusal), shadow (a refusal only reported becomes an admission).
//!
//! A policy is one file with its hooks ([`Policy`]) and one line in [`policies!`]; its
//! per-limiter setting lives in [`Policies`], its per-call state in [`States`]. The fast path
//! (`fast.rs`) asks [`Policies::leave_fast_path`] whether it may answer without the pipeline,
//! and an event loop's driven call (`backend/redis/driven.rs`) asks [`Policies::drivable`]
//! whether the hooks need no I/O of their own. Dispatch is static: the list is a struct of the
//! policies' own types, and each hook is inlined where it is a no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Limiter, Target};
use crate::decision::Decision;
use crate::engine::{Algorithm, Op, Outcome, Served};
use crate::error::{Error, Result};
use crate::live::Compiled;
use crate::metrics::Counter;
use crate::observe::Call as Timed;

/// One policy over a limiter's calls: its setting on a limiter is the value of the type, its
/// hooks run in the pipeline's order (see the module documentation). Every hook but `before`
/// and `after` has a default that leaves the call alone.
pub(crate) trait Policy: std::fmt::Debug + Clone + Default {
    /// What the policy keeps of one call, from `before` to `after`.
    type State;

    /// Whether the policy has nothing to do to the checks of a limiter with this setting, so
    /// that the fast path (`fast.rs`), which runs no hook, may answer them.
    fn leaves_fast_path(&self) -> bool {
        true
    }

    /// Whether a driven call of `op` (`backend/redis/driven.rs`) may be made: the policy's
    /// `after` hook needs no I/O of its own for it.
    fn drivable(&self, _op: Op) -> bool {
        true
    }

    /// Puts the policy's setting into the limiter's configuration as data.
    fn describe(&self, _config: &mut crate::engine::LimiterConfig) {}

    /// Before the engine call: the policy's state for the call, or the call's answer (`Err`:
    /// the engine is not called and no later hook runs; the policy counts what it answered).
    #[allow(clippy::result_large_err)] // an answer is an `Outcome`, moved as every engine call's is
    fn before(&self, limiter: &Limiter, key: &str, call: &Call) -> std::result::Result<Self::State, Outcome>;

    /// After the engine call (and the outcome's count): a hold of the key the policy asks to be
    /// written for this result, for how long (a block after a refusal). The pipeline writes it
    /// with its own I/O and hands the hold in effect to [`Policy::after`].
    fn hold_after(&self, _call: &Call, _result: &Result<Outcome>) -> Option<Duration> {
        None
    }

    /// After the engine call: changes the call's result in place. `held` is the hold in effect
    /// after the one [`Policy::hold_after`] asked for was written (`None`: none was asked for,
    /// or this way of calling cannot write it).
    fn after(
        &self,
        limiter: &Limiter,
        key: &str,
        call: &Call,
        state: Self::State,
        held: Option<Duration>,
        result: &mut Result<Outcome>,
    );
}

/// Declares the policies, in the order their hooks run: [`Policies`] (each policy's setting on
/// a limiter), [`States`] (each one's state during a call) and the hooks of the whole list.
macro_rules! policies {
    ($($field:ident: $policy:ty),* $(,)?) => {
        /// Each policy's setting on one limiter (see [`Policy`]).
        #[derive(Debug, Clone, Default)]
        pub(crate) struct Policies {
            $(pub(crate) $field: $policy,)*
        }

        /// Each policy's state during one call.
        pub(crate) struct States {
            $($field: <$policy as Policy>::State,)*
        }

        impl Policies {
            /// Whether no policy has anything to do to a check (see [`Policy::leaves_fast_path`]).
            #[inline(always)]
            pub(crate) fn leave_fast_path(&self) -> bool {
                true $(&& self.$field.leaves_fast_path())*
            }

            /// Whether a driven call of `op` may be made (see [`Policy::drivable`]).
            #[inline]
            pub(crate) fn drivable(&self, op: Op) -> bool {
                true $(&& self.$field.drivable(op))*
            }

            /// Every policy's setting, as data.
            pub(crate) fn describe(&self, config: &mut crate::engine::LimiterConfig) {
                $(self.$field.describe(config);)*
            }

            #[inline]
            #[allow(clippy::result_large_err)] // see `Policy::before`
            fn before(&self, limiter: &Limiter, key: &str, call: &Call) -> std::result::Result<States, Outcome> {
                Ok(States { $($field: self.$field.before(limiter, key, call)?,)* })
            }

            /// The hold the first policy that asks for one wants written (see
            /// [`Policy::hold_after`]).
            #[inline]
            fn hold_after(&self, call: &Call, result: &Result<Outcome>) -> Option<Duration> {
                None $(.or_else(|| self.$field.hold_after(call, result)))*
            }

            #[inline]
            fn after(
                &self,
                limiter: &Limiter,
                key: &str,
                call: &Call,
                states: States,
                held: Option<Duration>,
                result: &mut Result<Outcome>,
            ) {
                $(self.$field.after(limiter, key, call, states.$field, held, result);)*
            }
        }
    };
}

// The policies, in the order their hooks run. A new policy: its file (a type implementing
// `Policy`, with its `with_…` setter on `Limiter`), and one line here.
policies! {
    block: super::block::BlockFor,
    deny_cache: super::deny::DenyCache,
    shadow: super::shadow::Shadow,
}

/// One operation on its way through the pipeline: what the policies and the engine call share.
#[derive(Debug)]
pub(crate) struct Call {
    /// The operation.
    pub(crate) op: Op,
    /// The live override the call decides with, if any.
    pub(crate) over: Option<Arc<Compiled>>,
    /// Whether the call's refusals are enforced: not when the spec it decides with is in shadow
    /// mode, where a refusal is only reported (see `shadow.rs`).
    pub(crate) enforced: bool,
    /// When the call began, when it is timed: while its backend is observed (see `observe.rs`),
    /// and always once it goes to Redis.
    pub(crate) started: Option<Instant>,
    /// Whether the engine call went to Redis (its latency is counted).
    pub(crate) round_trip: bool,
}

impl Call {
    /// Notes that the engine call goes to Redis now: its latency is counted from the call's
    /// start.
    #[inline]
    pub(crate) fn went_to_redis(&mut self) {
        self.started.get_or_insert_with(Instant::now);
        self.round_trip = true;
    }

    /// The algorithm the call decides with: its override's, or its limiter's.
    #[inline]
    pub(crate) fn algorithm<'a>(&'a self, limiter: &'a Limiter) -> &'a Algorithm {
        self.over.as_ref().map_or(&limiter.inner.algorithm, |o| &o.algorithm)
    }
}

/// The one order of a call (see the module documentation), on `$limiter` for `$key` and `$op`
/// with the I/O `$io`; `$await` is `await` for an I/O whose calls are async, nothing for one
/// whose calls return at once. Evaluates to `None` when `$io` cannot answer the call.
macro_rules! pipeline {
    ($limiter:expr, $key:expr, $op:expr, $io:expr $(, $await:tt)?) => {{
        let limiter: &Limiter = $limiter;
        let key: &str = $key;
        match limiter.begin(key, $op) {
            Err(answer) => Some(Ok(answer)),
            Ok((mut call, states)) => {
                // The result stays where the engine call put it: every later step changes it in
                // place (an outcome is a few hundred bytes, and each move was a copy).
                let mut answered = $io.execute(limiter, key, &mut call) $(.$await)?;
                if let Some(result) = &mut answered {
                    let held = match limiter.after_engine(&call, result) {
                        Some(duration) => $io.hold(limiter, key, duration) $(.$await)?,
                        None => None,
                    };
                    limiter.conclude(key, call, states, held, result);
                }
                answered
            }
        }
    }};
}

/// How a call that returns at once performs its I/O: the engine call, and the hold a policy
/// writes after it. (The async calls' I/O is [`OnRuntime`]'s methods of the same names.)
pub(crate) trait Io {
    /// Runs `call` on the limiter's target; `None` when this way cannot answer it (it needs a
    /// round trip that [`InProcess`] does not make). Sets [`Call::started`] when it goes to
    /// Redis.
    fn execute(&self, limiter: &Limiter, key: &str, call: &mut Call) -> Option<Result<Outcome>>;

    /// Holds `key` refused for `duration` from now (a block: extends one in effect, never
    /// shortens it) and returns the hold in effect (`duration` when the write failed); `None`
    /// when this way cannot write it.
    fn hold(&self, limiter: &Limiter, key: &str, duration: Duration) -> Option<Duration>;
}

/// I/O on the runtime: the async calls.
pub(crate) struct OnRuntime;

/// I/O on the calling thread: the blocking calls.
pub(crate) struct OnThread;

/// No I/O but in process: answers what the memory backend, leased partitions or a lease held
/// here can, and nothing that needs a round trip.
pub(crate) struct InProcess;

impl OnRuntime {
    /// [`Io::execute`], waiting on the runtime.
    async fn execute(&self, limiter: &Limiter, key: &str, call: &mut Call) -> Option<Result<Outcome>> {
        let inner = &*limiter.inner;
        Some(match (&inner.target, &inner.pool, call.op) {
            (Target::Redis { .. }, Some(pool), Op::Check { cost, .. }) => {
                limiter.leased_check(pool, key, cost, call).await
            }
            (Target::Redis { backend, failover }, ..) => {
                backend.ensure_live_task();
                call.went_to_redis();
                let failover = Limiter::failover_for(failover, call.over.as_deref());
                backend.execute(limiter.kind(), &inner.name, key, call.algorithm(limiter), &failover, call.op).await
            }
            (Target::Partitions(set), ..) => set.run(key, call.op).await,
            _ => return InProcess.execute(limiter, key, call),
        })
    }

    /// [`Io::hold`], waiting on the runtime.
    async fn hold(&self, limiter: &Limiter, key: &str, duration: Duration) -> Option<Duration> {
        Some(limiter.hold_key(key, duration).await.unwrap_or(duration))
    }
}

impl Io for OnThread {
    #[inline]
    fn execute(&self, limiter: &Limiter, key: &str, call: &mut Call) -> Option<Result<Outcome>> {
        let inner = &*limiter.inner;
        Some(match (&inner.target, &inner.pool, call.op) {
            (Target::Redis { .. }, Some(pool), Op::Check { cost, .. }) => {
                limiter.leased_check_blocking(pool, key, cost, call)
            }
            (Target::Redis { backend, failover }, ..) => {
                backend.ensure_live_task();
                call.went_to_redis();
                let failover = Limiter::failover_for(failover, call.over.as_deref());
                backend.execute_blocking(limiter.kind(), &inner.name, key, call.algorithm(limiter), &failover, call.op)
            }
            _ => return InProcess.execute(limiter, key, call),
        })
    }

    fn hold(&self, limiter: &Limiter, key: &str, duration: Duration) -> Option<Duration> {
        let in_effect = match &limiter.inner.target {
            Target::Redis { .. } => crate::runtime::block_on(limiter.hold_key(key, duration)),
            _ => limiter.hold_local(key, duration),
        };
        Some(in_effect.unwrap_or(duration))
    }
}

impl Io for InProcess {
    /// The engine call on an in-process target, or from a lease held here.
    #[inline(always)]
    fn execute(&self, limiter: &Limiter, key: &str, call: &mut Call) -> Option<Result<Outcome>> {
        let inner = &*limiter.inner;
        match (&inner.target, &inner.pool, call.op) {
            (Target::Memory { backend, namespace }, ..) => {
                Some(backend.execute(*namespace, key, call.algorithm(limiter), call.op))
            }
            (Target::Redis { .. }, Some(pool), Op::Check { cost, .. }) => {
                limiter.leased_in_process(pool, key, cost).map(Ok)
            }
            (Target::Partitions(set), ..) => Some(set.run_blocking(key, call.op)),
            (Target::Nowhere, ..) => Some(Ok(Outcome::of(Decision::unlimited()))),
            _ => None,
        }
    }

    fn hold(&self, limiter: &Limiter, key: &str, duration: Duration) -> Option<Duration> {
        match &limiter.inner.target {
            Target::Redis { .. } => None,
            _ => Some(limiter.hold_local(key, duration).unwrap_or(duration)),
        }
    }
}

impl Limiter {
    /// Runs one operation through the pipeline with an I/O that returns at once; `None` when
    /// `io` cannot answer it.
    #[inline(always)]
    pub(crate) fn pass<I: Io>(&self, key: &str, op: Op, io: &I) -> Option<Result<Outcome>> {
        if let Target::Nowhere = self.inner.target {
            return Some(Ok(Outcome::of(Decision::unlimited())));
        }
        pipeline!(self, key, op, io)
    }

    /// Runs one operation.
    pub(crate) async fn run(&self, key: &str, op: Op) -> Result<Outcome> {
        match self.inner.target {
            Target::Redis { .. } | Target::Partitions(_) => {
                pipeline!(self, key, op, OnRuntime, await).unwrap_or_else(unanswered)
            }
            _ => self.run_local(key, op),
        }
    }

    /// Runs one operation, blocking the calling thread on remote backends.
    #[inline]
    pub(crate) fn run_blocking(&self, key: &str, op: Op) -> Result<Outcome> {
        self.pass(key, op, &OnThread).unwrap_or_else(unanswered)
    }

    /// Runs one operation on an in-process target: never waits, so it is the hot path of both
    /// the async and the blocking forms (a limiter on Redis answers nothing here: see
    /// [`Limiter::answer_in_process`]).
    #[inline]
    pub(crate) fn run_local(&self, key: &str, op: Op) -> Result<Outcome> {
        match self.inner.target {
            Target::Redis { .. } => Ok(Outcome::of(Decision::unlimited())),
            _ => self.pass(key, op, &InProcess).unwrap_or_else(unanswered),
        }
    }

    /// One operation answered in process, if it can be without a round trip (a leased
    /// limiter's lease, a refusal the deny cache remembers, an in-process target).
    #[inline]
    pub(crate) fn answer_in_process(&self, key: &str, op: Op) -> Option<Result<Outcome>> {
        self.pass(key, op, &InProcess)
    }

    /// Whether a driven call of `op` may be made (see [`Policy::drivable`]).
    #[inline]
    pub(crate) fn drivable(&self, op: Op) -> bool {
        self.inner.policies.drivable(op)
    }

    /// The pipeline's first step: the call, with the spec it decides with and each policy's
    /// state, or its answer when a policy gave one.
    #[inline(always)]
    #[allow(clippy::result_large_err)] // see `Policy::before`
    pub(crate) fn begin(&self, key: &str, op: Op) -> std::result::Result<(Call, States), Outcome> {
        let over = self.override_for(key);
        let enforced = !self.shadow_under(over.as_deref());
        let call = Call { op, over, enforced, started: self.inner.observe.start(), round_trip: false };
        let states = self.inner.policies.before(self, key, &call)?;
        Ok((call, states))
    }

    /// The pipeline's step after the engine call: `result` counted, and the hold a policy asks
    /// to be written for it, if any.
    #[inline(always)]
    pub(crate) fn after_engine(&self, call: &Call, result: &Result<Outcome>) -> Option<Duration> {
        self.record(call, result);
        self.inner.policies.hold_after(call, result)
    }

    /// The pipeline's last step: `result` through every policy's `after` hook (in place), given
    /// the hold in effect that was written for it (`held`).
    #[inline(always)]
    pub(crate) fn conclude(
        &self,
        key: &str,
        call: Call,
        states: States,
        held: Option<Duration>,
        result: &mut Result<Outcome>,
    ) {
        self.inner.policies.after(self, key, &call, states, held, result);
    }

    /// Counts a check in the limiter's metrics: the one mapping of outcomes to counters (a
    /// refusal the backend made for a call whose refusals are not enforced counts as
    /// shadow-refused), a refusal by a hold, the latency of a call that went to Redis, and its
    /// duration while observed.
    #[inline]
    pub(crate) fn record(&self, call: &Call, result: &Result<Outcome>) {
        if !matches!(call.op, Op::Check { .. }) {
            return;
        }
        let m = &self.inner.metrics;
        let counter = match result {
            Ok(outcome) => counter_of(outcome.served, outcome.decision.allowed, !call.enforced),
            Err(e) if reached_backend(e) => Counter::Errors,
            // Bad input never reached a backend.
            Err(_) => return,
        };
        m.add(counter, 1);
        if let Ok(outcome) = result {
            m.add_hold(outcome);
        }
        if let (Some(started), true) = (call.started, call.round_trip) {
            m.observe_latency(started.elapsed());
        }
        self.time(Timed::Check, counter, call.started);
    }

    /// Adds a call's duration to the limiter's timings while its backend is observed (see
    /// `observe.rs`); `started` is `None` for a call that was not timed.
    #[inline]
    pub(crate) fn time(&self, call: Timed, counter: Counter, started: Option<Instant>) {
        if let Some(started) = started {
            if self.inner.observe.on() {
                self.inner.metrics.timings.add(call, counter, started);
            }
        }
    }
}

/// The counter of a check decided by `served`, `allowed` or not, in shadow mode or not.
#[inline]
pub(crate) fn counter_of(served: Served, allowed: bool, shadow: bool) -> Counter {
    match served {
        Served::Backend if allowed => Counter::Allowed,
        Served::Backend if shadow => Counter::ShadowRefused,
        Served::Backend => Counter::Refused,
        Served::FailedOpen => Counter::FailedOpen,
        Served::FellBack => Counter::FellBack,
    }
}

/// Whether `error` is a backend's failure (counted among errors) rather than bad input.
pub(crate) fn reached_backend(error: &Error) -> bool {
    matches!(error, Error::BackendUnavailable { .. } | Error::Timeout { .. } | Error::BackendRejected { .. })
}

/// What a pipeline whose I/O answers every call never returns: [`OnRuntime`] and [`OnThread`]
/// answer everything.
#[cold]
fn unanswered() -> Result<Outcome> {
    Err(Error::BackendUnavailable { message: "internal: a call that needs I/O was run in process".into() })
}
