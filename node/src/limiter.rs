//! `Limiter`: every call style of the core's limiter, as Promises (and synchronous forms of the
//! calls that never wait on a memory backend).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use napi::bindgen_prelude::External;
use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::driven::Driven;
use ratekeeper::params::{cost_from_f64, timeout_from_millis};
use ratekeeper::Error;
use tokio::sync::watch;

use crate::args::{self, cost, Js};
use crate::bridge::{reply, run, Payload, ReplyValue};
use crate::decision::{lease_from_js, Metrics};
use crate::error::{core, guard};
use crate::options::{self, options, Handled};

/// Options of `limiter.acquire()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct AcquireOptions {
    /// Units to take (default 1; concurrent limiters take exactly 1).
    pub cost: Option<f64>,
    /// How long to wait at most (default: the limiter's `waitTimeoutMs`; 0: do not wait).
    pub wait_timeout_ms: Option<f64>,
    /// Aborts the wait: the Promise then rejects with an `AbortError` (`code: 'ABORT_ERR'`).
    #[napi(ts_type = "AbortSignal")]
    #[allow(dead_code)] // index.js handles it; declared so that it is a known option
    pub signal: Option<Handled>,
}
options!(AcquireOptions { cost, wait_timeout_ms, signal });

/// A rate limiter bound to a backend; build it with a `Backend` method. Every call takes an
/// optional `key` (any string up to 1 KiB, e.g. a user id): one limiter serves many identities.
///
/// The native side of index.js's `Limiter`, which users hold: its calls that may wait return a
/// `NativeReply` that index.js turns into a Promise.
#[napi(js_name = "NativeLimiter")]
pub struct Limiter {
    pub(crate) inner: ratekeeper::Limiter,
    /// No I/O: a memory backend, or `unlimited`. Its calls are answered during the call.
    local: bool,
    /// Its number in this thread's [`HANDLES`] (0: not registered yet).
    handle: Cell<u32>,
}

thread_local! {
    /// The limiters index.js calls by number (see [`Limiter::handle`]): index `n - 1` holds
    /// handle `n`'s limiter, or null once it was dropped (its slot is then reused).
    ///
    /// A method call on a napi class instance unwraps `this` through two private-property
    /// lookups (the wrapped pointer and its type tag) that cost more than an in-process check
    /// itself; `check`, `checkSync`, `peek` and `peekSync` skip them by passing this number to
    /// module functions instead.
    static HANDLES: RefCell<Handles> = const { RefCell::new(Handles { slots: Vec::new(), free: Vec::new() }) };
}

struct Handles {
    slots: Vec<*const Limiter>,
    free: Vec<u32>,
}

impl Drop for Limiter {
    fn drop(&mut self) {
        let handle = self.handle.get();
        if handle != 0 {
            // The thread's table may be gone already when the thread itself is ending.
            let _ = HANDLES.try_with(|h| {
                let mut h = h.borrow_mut();
                h.slots[handle as usize - 1] = std::ptr::null();
                h.free.push(handle);
            });
        }
    }
}

/// The core limiter registered as `handle` on this thread, and whether it is in-process
/// (`backend.checkAll` passes its parts' limiters by handle).
pub(crate) fn limiter_of_handle(handle: u32) -> Option<(ratekeeper::Limiter, bool)> {
    let limiter = HANDLES.with(|h| h.borrow().slots.get((handle as usize).wrapping_sub(1)).copied())?;
    // SAFETY: as in `by_handle`: a registered, non-null pointer is a live limiter.
    (!limiter.is_null()).then(|| unsafe { ((*limiter).inner.clone(), (*limiter).local) })
}

/// Runs `f` on the limiter registered as `handle` on this thread.
fn by_handle<T>(env: &Env, handle: u32, f: impl FnOnce(&Limiter) -> napi::Result<T>) -> napi::Result<T> {
    let limiter = HANDLES.with(|h| h.borrow().slots.get((handle as usize).wrapping_sub(1)).copied());
    match limiter {
        // SAFETY: a registered pointer is the address napi-rs boxed the limiter at; it stays
        // valid until the limiter is dropped (its JavaScript object finalised), which clears
        // the slot first, and only this thread uses it.
        Some(limiter) if !limiter.is_null() => f(unsafe { &*limiter }),
        _ => core(env, Err(Error::invalid("this", "is not a Limiter"))),
    }
}

/// Internal (index.js): `limiter.check(key, cost)` by handle. The arguments arrive as passed
/// (`undefined` when left out) and are read by their expected type first (see
/// [`args::with_key_arg`]): N-API's optional arguments would ask every value for its type.
/// Exported by [`crate::hot_calls`].
pub fn limiter_check(env: Env, handle: u32, key: Unknown<'_>, cost: Unknown<'_>) -> napi::Result<ReplyValue> {
    by_handle(&env, handle, |l| {
        if l.local {
            l.check_now_args(env, key, cost)
        } else {
            l.check(env, args::present(key), args::present(cost))
        }
    })
}

/// Internal (index.js): `limiter.checkSync(key, cost)` by handle (arguments as in
/// [`limiter_check`]). Exported by [`crate::hot_calls`].
pub fn limiter_check_sync(env: Env, handle: u32, key: Unknown<'_>, cost: Unknown<'_>) -> napi::Result<ReplyValue> {
    by_handle(&env, handle, |l| l.check_now_args(env, key, cost))
}

/// Internal (index.js): `limiter.peek(key)` by handle. Exported by [`crate::hot_calls`].
pub fn limiter_peek(env: Env, handle: u32, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
    by_handle(&env, handle, |l| l.peek(env, key))
}

/// Internal (index.js): `limiter.peekSync(key)` by handle. Exported by [`crate::hot_calls`].
pub fn limiter_peek_sync(env: Env, handle: u32, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
    by_handle(&env, handle, |l| l.peek_sync(env, key))
}

impl Limiter {
    /// A check answered during the call (blocking on Redis), the key read without allocating.
    fn check_now(&self, env: &Env, key: &Option<Unknown<'_>>, cost: u64) -> napi::Result<ReplyValue> {
        let outcome = args::with_key(key, |key| self.check_blocking(key, cost));
        reply(env, outcome)
    }

    /// [`Limiter::check_now`] with its arguments as passed (the by-handle calls).
    fn check_now_args(&self, env: Env, key: Unknown<'_>, cost: Unknown<'_>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let cost = core(&env, args::cost_arg(Js::of(&cost), "cost", 1))?;
            reply(&env, args::with_key_arg(Js::of(&key), |key| self.check_blocking(key, cost)))
        })
    }

    fn check_blocking(&self, key: Option<&str>, cost: u64) -> crate::bridge::Outcome {
        let decision = self.inner.check_blocking(key, cost)?;
        // The key travels with a lease only.
        let key = decision.lease.as_ref().and(key).map(str::to_owned);
        Ok(Payload::Decision(decision, key))
    }

    /// Sends a driven call on the JavaScript thread's own connection (see [`crate::driven`]);
    /// `None` when the call is not driven (it then runs on the runtime).
    fn drive(&self, env: &Env, driven: ratekeeper::Result<Driven>) -> napi::Result<Option<ReplyValue>> {
        match core(env, driven)? {
            Driven::Send(call) => crate::driven::submit(env, call).map(Some),
            Driven::Done(decision) => reply(env, Ok(Payload::Decision(decision, None))).map(Some),
            Driven::Unsupported => Ok(None),
        }
    }

    /// Wraps a core limiter; `local` when its backend is in-process.
    pub fn new(inner: ratekeeper::Limiter, local: bool) -> Self {
        let local = local || inner.kind() == ratekeeper::Kind::Unlimited;
        Limiter { inner, local, handle: Cell::new(0) }
    }
}

/// Lets `index.js` abort a waiting `acquire` from an `AbortSignal`.
pub struct Canceller(pub(crate) Arc<watch::Sender<bool>>);

/// Internal (`index.js`): a canceller for one `acquire`.
#[napi(skip_typescript)]
pub fn new_canceller() -> External<Canceller> {
    External::new(Canceller(Arc::new(watch::Sender::new(false))))
}

/// Internal (`index.js`): aborts the `acquire` holding `canceller`.
#[napi(skip_typescript)]
pub fn cancel(canceller: &External<Canceller>) {
    canceller.0.send_replace(true);
}

#[napi]
impl Limiter {
    /// A limiter that always allows and touches no backend (admins, tests); `limit` and
    /// `remaining` are 2^53.
    #[napi(factory)]
    pub fn unlimited() -> Limiter {
        Limiter::new(ratekeeper::Limiter::unlimited(), true)
    }

    /// Internal (index.js): this limiter's number for the by-handle calls (see [`HANDLES`]),
    /// registered on first use.
    #[napi(skip_typescript)]
    pub fn handle(&self) -> u32 {
        if self.handle.get() == 0 {
            let handle = HANDLES.with(|h| {
                let mut h = h.borrow_mut();
                match h.free.pop() {
                    Some(handle) => {
                        h.slots[handle as usize - 1] = self;
                        handle
                    }
                    None => {
                        h.slots.push(self);
                        h.slots.len() as u32
                    }
                }
            });
            self.handle.set(handle);
        }
        self.handle.get()
    }

    /// The limiter's name.
    #[napi(getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_owned()
    }

    /// The limiter's spec as canonical JSON text (durations in seconds); `limiter.spec` is the
    /// same parsed into an object.
    #[napi(getter)]
    pub fn spec_json(&self) -> String {
        self.inner.spec_json()
    }

    /// Its backend's `id` (what `ratekeeper/otel` finds a limiter's tracers by).
    #[napi(getter)]
    pub fn backend_id(&self) -> f64 {
        self.inner.backend_id() as f64
    }

    /// The limiter's kind: `concurrent`, `bucket`, `window`, `sliding_window`, `token_bucket`,
    /// `leaky`, `points` or `unlimited`.
    #[napi(getter)]
    pub fn kind(&self) -> &'static str {
        self.inner.kind().as_str()
    }

    /// The most one call may cost (the burst, the smallest limit, the slot count; 2^53 for
    /// `unlimited`): a larger cost is refused on every call.
    #[napi(getter)]
    pub fn capacity(&self) -> f64 {
        self.inner.capacity() as f64
    }

    /// Whether a charge can be given back (`pointsUsed(key, cost, 0)`): token bucket, leaky,
    /// points.
    #[napi(getter)]
    pub fn refundable(&self) -> bool {
        self.inner.refundable()
    }

    /// The span the quota covers in milliseconds, where the kind has one window (the HTTP
    /// fields' `w`); null otherwise.
    #[napi(getter)]
    pub fn window_ms(&self) -> Option<f64> {
        self.inner.window().map(|w| w.as_micros() as f64 / 1e3)
    }

    /// Whether the backend's `fail_open` / `fallback` policy applies to this limiter: true for
    /// every limiter but concurrent ones, which fail closed unless built with
    /// `allowFallback: true`.
    #[napi(getter)]
    pub fn allows_fallback(&self) -> bool {
        self.inner.allows_fallback()
    }

    /// How long `acquire` and `withinLimit` wait by default, in milliseconds.
    #[napi(getter)]
    pub fn wait_timeout_ms(&self) -> f64 {
        self.inner.wait_timeout().as_micros() as f64 / 1e3
    }

    /// The longest pause `pause` and `observe` write, in milliseconds (default 3600000).
    #[napi(getter)]
    pub fn max_pause_ms(&self) -> f64 {
        self.inner.max_pause().as_micros() as f64 / 1e3
    }

    /// The same limiter (same state and metrics) whose pauses last at most `maxPause` (a
    /// string with its unit, e.g. `'10m'`; default one hour): a longer pause asked of `pause` or
    /// `observe` is shortened to it and counted in `metrics().pausesClamped`. A `maxPause` that
    /// is not a positive duration up to 100 years throws `ERR_INVALID_ARGUMENT` naming
    /// `maxPause`.
    #[napi(ts_args_type = "maxPause: string")]
    pub fn with_max_pause(&self, env: Env, max_pause_ms: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let max_pause = args::duration_text(Js::opt(&max_pause_ms), "maxPause")?;
                Ok(Limiter::new(self.inner.with_max_pause(max_pause)?, self.local))
            };
            core(&env, build())
        })
    }

    /// How long a refusal blocks the key, in milliseconds (`null`: a refusal blocks nothing,
    /// the default; see `withBlockFor`).
    #[napi(getter)]
    pub fn block_for_ms(&self) -> Option<f64> {
        self.inner.block_for().map(|d| d.as_micros() as f64 / 1e3)
    }

    /// The same limiter (same state and metrics) whose refusals block the key for
    /// `blockFor` (a string with its unit, e.g. `'15m'`; `null`: they block nothing): after a refused check, every `check`, `peek`
    /// and `acquire` of this limiter and key, in every process sharing the backend, is refused
    /// with `retryAfterMs` = the block's remaining time, consuming nothing; the refusal that
    /// starts the block says so too. A spec carries it as `block_for` (seconds). A `blockFor`
    /// that is not a positive duration up to 100 years throws `ERR_INVALID_ARGUMENT` naming
    /// `blockFor`.
    #[napi(ts_args_type = "blockFor: string | null")]
    pub fn with_block_for(&self, env: Env, block_for_ms: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let block_for = args::opt_duration_text(Js::opt(&block_for_ms), "blockFor")?;
                Ok(Limiter::new(self.inner.with_block_for(block_for)?, self.local))
            };
            core(&env, build())
        })
    }

    /// Whether the limiter is in shadow mode (a live override of the limiter or of a key decides
    /// instead, with the `shadow` of its spec).
    #[napi(getter)]
    pub fn shadow(&self) -> bool {
        self.inner.shadow()
    }

    /// The same limiter (same state and metrics) in shadow mode (`true`) or enforcing (`false`).
    /// In shadow mode a call the limit would refuse is admitted: `allowed` and `shadowRefused`
    /// are true, nothing is consumed, `remaining` and `retryAfterMs` say what enforcement would
    /// have said; `acquire` never waits, `withinLimit` runs its function, a concurrent limiter
    /// grants no lease to it. Counted in `metrics().shadowRefused`.
    #[napi(ts_args_type = "shadow: boolean")]
    pub fn with_shadow(&self, env: Env, shadow: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let shadow = args::required(Js::opt(&shadow), "shadow")?.boolean("shadow")?;
                Ok(Limiter::new(self.inner.with_shadow(shadow)?, self.local))
            };
            core(&env, build())
        })
    }

    /// Whether this limiter remembers refusals in process (see `withDenyCache`).
    #[napi(getter)]
    pub fn deny_cache(&self) -> bool {
        self.inner.deny_cache()
    }

    /// The same limiter (same state and metrics) with the deny cache on or off: on, a refusal
    /// with `retryAfterMs` R is remembered in this process, and until R has passed a check of
    /// the same key with at least the refused cost is refused from memory, with no round trip
    /// (counted in `metrics().refusedLocally`). A `reset`, an `unblock` or a live override seen
    /// by this process ends the entries they affect. Only Redis limiters of the counting kinds
    /// use it. A `on` that is not a boolean throws `ERR_INVALID_ARGUMENT` naming `denyCache`.
    #[napi(ts_args_type = "on: boolean")]
    pub fn with_deny_cache(&self, env: Env, on: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let on = args::required(Js::opt(&on), "deny_cache")?.boolean("deny_cache")?;
                Ok(Limiter::new(self.inner.with_deny_cache(on)?, self.local))
            };
            core(&env, build())
        })
    }

    /// The same limiter (same state) with another default wait timeout, a string with its unit
    /// (`'5s'`; `0`: never wait).
    #[napi(ts_args_type = "waitTimeout: string | 0")]
    pub fn with_wait_timeout(&self, env: Env, wait_timeout_ms: Option<Unknown<'_>>) -> napi::Result<Limiter> {
        guard(&env, || {
            let build = || {
                let wait = args::timeout_text(Js::opt(&wait_timeout_ms), "waitTimeout")?;
                Ok(Limiter::new(self.inner.with_wait_timeout(wait)?, self.local))
            };
            core(&env, build())
        })
    }

    /// Takes `cost` (default 1) for `key` if the limit allows, never waiting. A refused call
    /// consumes nothing and resolves with `allowed: false` and the exact `retryAfterMs`. On a
    /// concurrent limiter an admitted call holds `decision.lease`: release it.
    #[napi(ts_args_type = "key?: string | null, cost?: number", ts_return_type = "NativeReply")]
    pub fn check(&self, env: Env, key: Option<Unknown<'_>>, cost: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let cost = core(&env, args::cost(Js::opt(&cost), "cost", 1))?;
            if self.local {
                return self.check_now(&env, &key, cost);
            }
            if let Some(sent) = self.drive(&env, args::with_key(&key, |k| self.inner.drive_check(k, cost)))? {
                return Ok(sent);
            }
            let key = core(&env, args::key(&key))?;
            let limiter = self.inner.clone();
            run(&env, false, async move { Ok(Payload::Decision(limiter.check(key.as_deref(), cost).await?, key)) })
        })
    }

    /// `check` without a Promise: for memory backends and `unlimited` (on Redis it blocks the
    /// thread for the round trip).
    #[napi(ts_args_type = "key?: string | null, cost?: number", ts_return_type = "NativeReply")]
    pub fn check_sync(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        cost: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let cost = core(&env, args::cost(Js::opt(&cost), "cost", 1))?;
            self.check_now(&env, &key, cost)
        })
    }

    /// What a call of cost 1 would get now, consuming nothing.
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "NativeReply")]
    pub fn peek(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            if self.local {
                return reply(&env, self.inner.peek_blocking(key.as_deref()).map(|d| Payload::Decision(d, key)));
            }
            if let Some(sent) = self.drive(&env, self.inner.drive_peek(key.as_deref()))? {
                return Ok(sent);
            }
            let limiter = self.inner.clone();
            run(&env, false, async move { Ok(Payload::Decision(limiter.peek(key.as_deref()).await?, key)) })
        })
    }

    /// `peek` without a Promise (see `checkSync`).
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "NativeReply")]
    pub fn peek_sync(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            reply(&env, self.inner.peek_blocking(key.as_deref()).map(|d| Payload::Decision(d, key)))
        })
    }

    /// Takes `cost`, waiting up to `waitTimeoutMs` (default: the limiter's) for the limit to
    /// allow it: sleeping exactly until the decision can change, or until a release wakes it,
    /// never polling. Rejects with `ERR_OVER_LIMIT` (and its `retryAfterMs`) at once when the
    /// wait could not succeed in time.
    #[napi(ts_args_type = "key?: string | null, options?: AcquireOptions", ts_return_type = "NativeReply")]
    pub fn acquire(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
        canceller: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || {
                let key = args::key(&key)?;
                let o = options::optional::<AcquireOptions>(&options)?.unwrap_or_default();
                let cost = o.cost.map(|c| cost_from_f64("cost", c)).transpose()?.unwrap_or(1);
                let wait = o.wait_timeout_ms.map(|ms| timeout_from_millis("wait_timeout", ms)).transpose()?;
                let cancel = match Js::opt(&canceller) {
                    Some(c) => Some(c.external::<Canceller>("canceller")?.0.subscribe()),
                    None => None,
                };
                Ok((key, cost, wait, cancel))
            };
            let (key, cost, wait, cancel) = core(&env, parse())?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move {
                let acquired = limiter.acquire(key.as_deref(), cost, wait);
                let decision = match cancel {
                    None => acquired.await?,
                    Some(mut cancelled) => tokio::select! {
                        decision = acquired => decision?,
                        _ = cancelled.wait_for(|c| *c) => {
                            return Err(Error::Timeout { message: "the wait was aborted".into() })
                        }
                    },
                };
                Ok(Payload::Decision(decision, key))
            })
        })
    }

    /// Forgets all state of `key` (waiters on a concurrent limiter wake to re-check).
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "NativeReply")]
    pub fn reset(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move { limiter.reset(key.as_deref()).await.map(|()| Payload::Unit) })
        })
    }

    /// Gives back what this process holds: every partition of a partitions limiter (other
    /// processes may lease them at once instead of after the lease TTL), the unspent tokens of
    /// a leased limiter's leases; a later call leases anew. Does nothing on other limiters.
    #[napi(ts_return_type = "NativeReply")]
    pub fn close(&self, env: Env) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let limiter = self.inner.clone();
            run(&env, self.local, async move { limiter.close().await.map(|()| Payload::Unit) })
        })
    }

    /// The partitions this process holds of a partitions limiter for `key`, as
    /// `[index, fencingToken]` pairs. Throws `ERR_INVALID_ARGUMENT` naming `limiter` on other
    /// kinds.
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "Array<[number, number]>")]
    pub fn partitions_held(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<Vec<Vec<f64>>> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            let held = core(&env, self.inner.partitions_held(key.as_deref()))?;
            Ok(held.partitions.iter().map(|&(index, token)| vec![f64::from(index), token as f64]).collect())
        })
    }

    /// Gives back a lease of a concurrent limiter (its key travels in the lease). Rejects with
    /// `ERR_LEASE_LOST` when it had been reclaimed (it outlived `lockTimeoutMs`) or reset.
    #[napi(ts_args_type = "lease: Lease", ts_return_type = "NativeReply")]
    pub fn release(&self, env: Env, lease: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let (key, lease) = core(&env, lease_from_js(Js::opt(&lease)))?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move { limiter.release(key.as_deref(), &lease).await.map(|()| Payload::Unit) })
        })
    }

    /// Renews a lease for another `lockTimeoutMs` from now, so a long task keeps its slot.
    /// Rejects with `ERR_LEASE_LOST` if it was already reclaimed.
    #[napi(ts_args_type = "lease: Lease", ts_return_type = "NativeReply")]
    pub fn extend(&self, env: Env, lease: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let (key, lease) = core(&env, lease_from_js(Js::opt(&lease)))?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move { limiter.extend(key.as_deref(), &lease).await.map(|()| Payload::Unit) })
        })
    }

    /// Corrects a charge of `estimate` to `actual` (points, token bucket and leaky limiters):
    /// the difference is charged or refunded. An `actual` above the capacity is charged as debt
    /// the bucket waits out, at most 16 capacities ahead of now. Each call applies its own
    /// difference (a `withinLimit` permit reports once). Resolves with the state after the
    /// correction.
    #[napi(
        ts_args_type = "key: string | null | undefined, estimate: number, actual: number",
        ts_return_type = "NativeReply"
    )]
    pub fn points_used(
        &self,
        env: Env,
        key: Option<Unknown<'_>>,
        estimate: Option<Unknown<'_>>,
        actual: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || {
                let estimate = args::required(Js::opt(&estimate), "estimate")?;
                let actual = args::required(Js::opt(&actual), "actual")?;
                Ok((args::key(&key)?, cost(Some(estimate), "estimate", 0)?, cost(Some(actual), "actual", 0)?))
            };
            let (key, estimate, actual) = core(&env, parse())?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move {
                Ok(Payload::Decision(limiter.points_used(key.as_deref(), estimate, actual).await?, key))
            })
        })
    }

    /// Settles `decision` (an admitted call of this limiter, checked with an estimated cost) to
    /// its `actual` cost: the difference is charged or refunded exactly once, however often the
    /// same decision is settled (a retry after a timeout is safe). A charge applies even past
    /// the limit (later calls wait the debt out); a refund never gives back more than the call
    /// took, nor to a window that has rolled over. Resolves with the state after it, as `peek`
    /// reports it. A decision that cannot be settled (refused; concurrent, unlimited or
    /// partitions; another limiter's; older than the settle window; `sealed` and its ticket's
    /// seal missing or not matching it) rejects with `ERR_INVALID_ARGUMENT` naming `decision`.
    /// `sealed`: the ticket came from outside this process (index.js passes it for any ticket
    /// it did not issue), so its seal is checked first.
    #[napi(ts_args_type = "decision: Decision, actual: number, sealed?: boolean", ts_return_type = "NativeReply")]
    pub fn settle(
        &self,
        env: Env,
        decision: Option<Unknown<'_>>,
        actual: Option<Unknown<'_>>,
        sealed: Option<bool>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let (decision, actual, seal) = core(&env, settle_args(&decision, &actual, sealed))?;
            let limiter = self.inner.clone();
            run(&env, self.local, async move {
                let settled = match seal {
                    Some(seal) => limiter.settle_sealed(&decision, actual, &seal).await?,
                    None => limiter.settle(&decision, actual).await?,
                };
                Ok(Payload::Decision(settled, None))
            })
        })
    }

    /// `settle` without a Promise: for memory backends (on Redis it blocks the thread for the
    /// round trip).
    #[napi(ts_args_type = "decision: Decision, actual: number, sealed?: boolean", ts_return_type = "NativeReply")]
    pub fn settle_sync(
        &self,
        env: Env,
        decision: Option<Unknown<'_>>,
        actual: Option<Unknown<'_>>,
        sealed: Option<bool>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let outcome = settle_args(&decision, &actual, sealed).and_then(|(decision, actual, seal)| {
                let settled = match seal {
                    Some(seal) => self.inner.settle_sealed_blocking(&decision, actual, &seal)?,
                    None => self.inner.settle_blocking(&decision, actual)?,
                };
                Ok(Payload::Decision(settled, None))
            });
            reply(&env, outcome)
        })
    }

    /// The seal of `ticket` (a settle ticket of this limiter's decision), which its JSON form
    /// carries (index.js's `toJSON`). On Redis the first one reads (or creates) the fleet's
    /// secret in Redis, blocking the thread for that round trip; later ones are computed in
    /// process.
    #[napi(ts_args_type = "ticket: SettleTicket")]
    pub fn seal_ticket(&self, env: Env, ticket: Option<Unknown<'_>>) -> napi::Result<String> {
        guard(&env, || {
            let sealed = args::required(Js::opt(&ticket), "decision")
                .and_then(crate::settle::ticket_from_js)
                .and_then(|(ticket, _)| self.inner.seal_blocking(&ticket));
            core(&env, sealed)
        })
    }

    /// Pauses `key` for `duration`, in every process sharing the backend: until it ends,
    /// `check` and `peek` resolve refused with `retryAfterMs` = the remaining pause (consuming
    /// nothing) and `acquire` waits it out. A pause lasts at most the limiter's `maxPauseMs` (see
    /// `withMaxPause`). A longer pause extends the one in effect; a shorter one never shortens
    /// it; `resume` ends it. Resolves with the pause in effect (ms). On Redis the check costs
    /// no extra round trip. `duration` is a string with its unit (`'30s'`); anything else rejects
    /// with `ERR_INVALID_ARGUMENT` naming `duration`.
    #[napi(ts_args_type = "duration: string, key?: string | null", ts_return_type = "NativeReply")]
    pub fn pause(
        &self,
        env: Env,
        duration_ms: Option<Unknown<'_>>,
        key: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || Ok((args::duration_text(Js::opt(&duration_ms), "duration")?, args::key(&key)?));
            let (duration, key) = core(&env, parse())?;
            let limiter = self.inner.clone();
            // Never inline: see `Payload::Pause`.
            run(&env, false, async move { Ok(Payload::Pause(Some(limiter.pause(key.as_deref(), duration).await?))) })
        })
    }

    /// `observe` with the headers as `[name, value]` pairs (index.js's `observe` and
    /// `observeResponse` accept objects, `Headers`, `Map`s and `Response`s).
    #[napi(skip_typescript)]
    pub fn observe_pairs(
        &self,
        env: Env,
        status: Option<Unknown<'_>>,
        headers: Option<Unknown<'_>>,
        key: Option<Unknown<'_>>,
        max_pause_ms: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || {
                let (status, headers) = (args::status(Js::opt(&status))?, args::header_pairs(Js::opt(&headers))?);
                Ok((status, headers, args::key(&key)?, args::opt_millis(Js::opt(&max_pause_ms), "max_pause")?))
            };
            let (status, headers, key, max_pause) = core(&env, parse())?;
            let limiter = self.inner.clone();
            run(&env, false, async move {
                Ok(Payload::Pause(limiter.observe_within(key.as_deref(), status, &headers, max_pause).await?))
            })
        })
    }

    /// Ends the pause of `key` now, in every process sharing the backend (an operator's
    /// override of a pause that is wrong or no longer needed); the key's other state is kept.
    /// Resolves with whether a pause was in effect.
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "NativeReply")]
    pub fn resume(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            let limiter = self.inner.clone();
            run(&env, false, async move { Ok(Payload::Flag(limiter.resume(key.as_deref()).await?)) })
        })
    }

    /// Blocks `key` for `duration` from now, in every process sharing the backend: until it
    /// ends (or `unblock`, or `reset`), `check` and `peek` resolve refused with `retryAfterMs` =
    /// the block's remaining time (consuming nothing) and `acquire` waits it out. The block
    /// replaces the one in effect, shorter or longer. A block is not a pause: `resume` leaves it
    /// alone. Resolves with the block in effect (ms). On Redis the check costs no extra round
    /// trip. `duration` is a string with its unit (`'15m'`); anything else rejects with
    /// `ERR_INVALID_ARGUMENT` naming `duration`.
    #[napi(ts_args_type = "duration: string, key?: string | null", ts_return_type = "NativeReply")]
    pub fn block(
        &self,
        env: Env,
        duration_ms: Option<Unknown<'_>>,
        key: Option<Unknown<'_>>,
    ) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let parse = || Ok((args::duration_text(Js::opt(&duration_ms), "duration")?, args::key(&key)?));
            let (duration, key) = core(&env, parse())?;
            let limiter = self.inner.clone();
            // Never inline: see `Payload::Pause`.
            run(&env, false, async move { Ok(Payload::Pause(Some(limiter.block(key.as_deref(), duration).await?))) })
        })
    }

    /// Ends the block of `key` now, in every process sharing the backend; the key's other
    /// state, and a pause, are kept. Resolves with whether a block was in effect.
    #[napi(ts_args_type = "key?: string | null", ts_return_type = "NativeReply")]
    pub fn unblock(&self, env: Env, key: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let key = core(&env, args::key(&key))?;
            let limiter = self.inner.clone();
            run(&env, false, async move { Ok(Payload::Flag(limiter.unblock(key.as_deref()).await?)) })
        })
    }

    /// This process's metrics for this limiter: its checks by outcome (and their latency on
    /// Redis); concurrent limiters add their leases.
    #[napi]
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics().into()
    }

    /// The metrics of every process sharing this limiter (on Redis: this process's pending
    /// counts are flushed first, then the sum is read back; on memory: `metrics()`).
    #[napi(ts_return_type = "NativeReply")]
    pub fn fleet_metrics(&self, env: Env) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let limiter = self.inner.clone();
            run(&env, self.local, async move { Ok(Payload::Metrics(limiter.fleet_metrics().await?)) })
        })
    }
}

/// The arguments of `settle`: the decision (with its ticket), then the actual cost; when
/// `sealed`, the ticket's seal, which it must carry.
fn settle_args(
    decision: &Option<Unknown<'_>>,
    actual: &Option<Unknown<'_>>,
    sealed: Option<bool>,
) -> ratekeeper::Result<(ratekeeper::Decision, u64, Option<String>)> {
    let (decision, seal) = crate::settle::decision_from_js(Js::opt(decision))?;
    let actual = cost(Some(args::required(Js::opt(actual), "actual")?), "actual", 0)?;
    if sealed != Some(true) || decision.settle.is_none() {
        return Ok((decision, actual, None));
    }
    match seal {
        Some(seal) => Ok((decision, actual, Some(seal))),
        None => Err(ratekeeper::Error::invalid(
            "decision",
            "its settle ticket was not issued in this process and carries no seal: store a decision as \
             JSON.stringify makes it (the seal comes with it), and give it back unchanged",
        )),
    }
}
