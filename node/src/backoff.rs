//! `Backoff`: the core's reschedule policy for over-limit jobs (Sidekiq's), durations in
//! milliseconds like every duration of this package, with an optional JavaScript function
//! replacing `baseMs * attempt`.

use napi::bindgen_prelude::{FromNapiValue, Function, FunctionRef};
use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::{cost_from_f64, timeout_from_millis};
use ratekeeper::Error;

use crate::args::{required, Js};
use crate::error::{core, guard};
use crate::options::options;
use crate::runtime::CoreResult;

/// Options of `new Backoff()`; every field is optional.
#[napi(object, object_to_js = false)]
pub struct BackoffOptions {
    /// The step per reschedule: attempt n waits at least `baseMs * n` (default 300 000, five
    /// minutes, as Sidekiq). May be 0.
    pub base_ms: Option<f64>,
    /// Up to this many milliseconds are added at random to each delay, so jobs refused together
    /// do not all come back at once (default 300 000). May be 0.
    pub jitter_ms: Option<f64>,
    /// How many times a job is rescheduled before it fails with `ERR_OVER_LIMIT` (default 20).
    pub max_reschedules: Option<f64>,
    /// Replaces `baseMs * attempt`: a function of the attempt (1-based) returning milliseconds.
    /// The `retryAfterMs` floor and the jitter still apply (pass `jitterMs: 0` to use its result
    /// as is).
    #[napi(ts_type = "(attempt: number) => number")]
    pub delay: Option<DelayFunction>,
    /// Seeds the jitter's generator, so a test sees the same delays on every run.
    pub seed: Option<f64>,
}
options!(BackoffOptions { base_ms, jitter_ms, max_reschedules, delay, seed });

/// The `delay` option: a JavaScript function.
pub struct DelayFunction(Js);

impl FromNapiValue for DelayFunction {
    unsafe fn from_napi_value(env: napi::sys::napi_env, value: napi::sys::napi_value) -> napi::Result<Self> {
        Js { env, value }.function("delay").map(DelayFunction).map_err(|e| crate::options::marked(e, ""))
    }
}

/// How long to wait before running an over-limit job again (Sidekiq's reschedule policy):
/// reschedule `attempt` (1 for the first, counted apart from the job's own retries) waits
/// `max(retryAfterMs, baseMs * attempt)` plus a random `[0, jitterMs)` milliseconds. After
/// `maxReschedules` reschedules, `rescheduleIn` returns `null`: the job should fail with the
/// over-limit error. Defaults: 300 000 ms, 300 000 ms, 20.
#[napi]
pub struct Backoff {
    inner: ratekeeper::Backoff,
    delay: Option<FunctionRef<u32, Unknown<'static>>>,
}

fn whole(value: Js, parameter: &'static str) -> CoreResult<u64> {
    cost_from_f64(parameter, value.number(parameter)?)
}

#[napi]
impl Backoff {
    /// Sidekiq's policy, or the one `options` describe.
    #[napi(constructor, ts_args_type = "options?: BackoffOptions")]
    pub fn new(env: Env, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let mut delay = None;
            let build = |delay: &mut Option<Js>| -> CoreResult<ratekeeper::Backoff> {
                let (mut base, mut jitter) = (ratekeeper::DEFAULT_BACKOFF_BASE, ratekeeper::DEFAULT_BACKOFF_JITTER);
                let mut max = ratekeeper::DEFAULT_MAX_RESCHEDULES;
                let mut seed = None;
                if let Some(o) = crate::options::optional::<BackoffOptions>(&options)? {
                    if let Some(ms) = o.base_ms {
                        base = timeout_from_millis("base", ms)?;
                    }
                    if let Some(ms) = o.jitter_ms {
                        jitter = timeout_from_millis("jitter", ms)?;
                    }
                    if let Some(n) = o.max_reschedules {
                        let n = cost_from_f64("max_reschedules", n)?;
                        max = u32::try_from(n).map_err(|_| {
                            Error::invalid("max_reschedules", format!("must be at most {}, got {n}", u32::MAX))
                        })?;
                    }
                    if let Some(n) = o.seed {
                        seed = Some(cost_from_f64("seed", n)?);
                    }
                    *delay = o.delay.map(|f| f.0);
                }
                let backoff = ratekeeper::Backoff::new(base, jitter, max)?;
                Ok(match seed {
                    Some(s) => backoff.with_seed(s),
                    None => backoff,
                })
            };
            let inner = core(&env, build(&mut delay))?;
            let delay = match delay {
                Some(v) => Some(Function::<u32, Unknown<'static>>::from_unknown(v.unknown())?.create_ref()?),
                None => None,
            };
            Ok(Backoff { inner, delay })
        })
    }

    /// The step per reschedule, in milliseconds.
    #[napi(getter)]
    pub fn base_ms(&self) -> f64 {
        self.inner.base().as_micros() as f64 / 1e3
    }

    /// The largest random spread added to each delay, in milliseconds.
    #[napi(getter)]
    pub fn jitter_ms(&self) -> f64 {
        self.inner.jitter().as_micros() as f64 / 1e3
    }

    /// How many times a job is rescheduled before it fails with the over-limit error.
    #[napi(getter)]
    pub fn max_reschedules(&self) -> u32 {
        self.inner.max_reschedules()
    }

    /// Milliseconds to wait before running the job again for its reschedule `attempt`
    /// (1-based), when the limiter asked for `retryAfterMs` (the over-limit error's
    /// `retryAfterMs`, default 0); `null` once `attempt > maxReschedules` (the job should fail).
    #[napi(ts_args_type = "attempt: number, retryAfterMs?: number | null", ts_return_type = "number | null")]
    pub fn reschedule_in(
        &self,
        env: Env,
        attempt: Option<Unknown<'_>>,
        retry_after_ms: Option<Unknown<'_>>,
    ) -> napi::Result<Option<f64>> {
        guard(&env, || {
            let read = || -> CoreResult<(u32, std::time::Duration)> {
                let attempt = whole(required(Js::opt(&attempt), "attempt")?, "attempt")?;
                let retry_after = match Js::opt(&retry_after_ms) {
                    Some(v) => timeout_from_millis("retry_after", v.number("retry_after")?)?,
                    None => std::time::Duration::ZERO,
                };
                // Beyond u32 is beyond any maxReschedules: the answer is null all the same.
                Ok((u32::try_from(attempt).unwrap_or(u32::MAX), retry_after))
            };
            let (attempt, retry_after) = core(&env, read())?;
            let result = match &self.delay {
                // The user's function is not called for an attempt that gives up anyway.
                Some(f) if attempt >= 1 && attempt <= self.inner.max_reschedules() => {
                    let value = f.borrow_back(&env)?.call(attempt)?;
                    let millis = core(&env, Js::of(&value).number("delay"))?;
                    let delay = core(&env, timeout_from_millis("delay", millis))?;
                    core(&env, self.inner.reschedule_in_with(attempt, retry_after, delay))?
                }
                _ => core(&env, self.inner.reschedule_in(attempt, retry_after))?,
            };
            Ok(result.map(|d| d.as_micros() as f64 / 1e3))
        })
    }
}
