//! Stripe's load shedders, as the core has them. Both refuse with `ERR_SHED` (HTTP 503), never
//! `ERR_OVER_LIMIT` (429).

use std::sync::Arc;

use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::{cost_from_f64, duration_from_millis};
use ratekeeper::{Clock, UtilizationConfig};

use crate::args::{self, count, Js};
use crate::backend::Backend;
use crate::bridge::{run, Payload, ReplyValue};
use crate::decision::lease_from_js;
use crate::error::{core, guard};
use crate::options::{self, options, ClockOption};
use crate::runtime::CoreResult;
use ratekeeper::DEFAULT_LOCK_TIMEOUT;

/// Options of `new FleetShedder()`.
#[napi(object, object_to_js = false)]
#[derive(Default)]
pub struct FleetShedderOptions {
    /// A request still in flight after this (a crashed worker) gives its slot back (default 30000).
    pub lock_timeout_ms: Option<f64>,
}
options!(FleetShedderOptions { lock_timeout_ms });

/// Fleet usage load shedder: at most `limit` non-critical requests in flight across every
/// process sharing the backend; critical requests bypass it.
///
/// The native side of index.js's `FleetShedder`, which users hold.
#[napi(js_name = "NativeFleetShedder")]
pub struct FleetShedder {
    inner: ratekeeper::FleetShedder,
    local: bool,
}

#[napi]
impl FleetShedder {
    /// A shedder named `name` allowing `limit` non-critical requests in flight at once.
    #[napi(
        constructor,
        ts_args_type = "backend: NativeBackend, name: string, limit: number, options?: FleetShedderOptions"
    )]
    pub fn new(
        env: Env,
        backend: Option<Unknown<'_>>,
        name: Option<Unknown<'_>>,
        limit: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Self> {
        guard(&env, || {
            let build = || -> CoreResult<Self> {
                let backend =
                    args::required(Js::opt(&backend), "backend")?.instance::<Backend>("backend", "Backend")?;
                let name = args::required(Js::opt(&name), "name")?.string("name")?;
                let limit = count(Js::opt(&limit), "limit")?;
                let o = options::optional::<FleetShedderOptions>(&options)?.unwrap_or_default();
                let lock = o.lock_timeout_ms.map(|ms| duration_from_millis("lock_timeout", ms)).transpose()?;
                let lock = lock.unwrap_or(DEFAULT_LOCK_TIMEOUT);
                Ok(FleetShedder {
                    inner: ratekeeper::FleetShedder::new(&backend.inner, &name, limit, lock)?,
                    local: backend.is_local(),
                })
            };
            core(&env, build())
        })
    }

    /// Admits a request: a critical one always passes and holds nothing (`null`); another takes
    /// a slot (a lease) or rejects with `ERR_SHED`. Give the ticket back with `leave`.
    #[napi(ts_args_type = "critical?: boolean", ts_return_type = "NativeReply")]
    pub fn enter(&self, env: Env, critical: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let critical = core(&env, Js::opt(&critical).map(|c| c.boolean("critical")).transpose())?;
            let shedder = self.inner.clone();
            run(&env, self.local, async move { Ok(Payload::Ticket(shedder.enter(critical.unwrap_or(false)).await?)) })
        })
    }

    /// Gives back the slot of a finished request (`null` for critical ones).
    #[napi(ts_args_type = "ticket: Lease | null", ts_return_type = "NativeReply")]
    pub fn leave(&self, env: Env, ticket: Option<Unknown<'_>>) -> napi::Result<ReplyValue> {
        guard(&env, || {
            let ticket = Js::opt(&ticket).map(|t| lease_from_js(Some(t)).map(|(_, lease)| lease)).transpose();
            let ticket = core(&env, ticket)?;
            let shedder = self.inner.clone();
            run(&env, self.local, async move { shedder.leave(ticket).await.map(|()| Payload::Unit) })
        })
    }
}

/// Options of `new UtilizationShedder()`; the defaults are Stripe's.
#[napi(object, object_to_js = false)]
pub struct UtilizationOptions {
    /// Below this utilization, shedding decreases (default 0.7).
    pub end_of_good: Option<f64>,
    /// Above this utilization, shedding increases (default 0.8); in between nothing changes.
    pub start_of_bad: Option<f64>,
    /// Milliseconds of full pressure before anything is shed (default 28000).
    pub before_shedding_ms: Option<f64>,
    /// Milliseconds of full pressure from the first drop until all non-critical traffic is shed
    /// (default 120000).
    pub to_shed_all_ms: Option<f64>,
    /// Levels of non-critical priority (default 3): priority 0 is critical and never shed,
    /// `levels` is the least important and goes first.
    pub levels: Option<f64>,
    /// A manual clock (tests); default: the system clock.
    #[napi(ts_type = "ManualClock")]
    pub clock: Option<ClockOption>,
}
options!(UtilizationOptions { end_of_good, start_of_bad, before_shedding_ms, to_shed_all_ms, levels, clock });

/// Worker utilization load shedder (in-process): the caller reports a utilization signal
/// (0 = idle, 1 = every worker busy) and the drop chance moves slowly with it.
#[napi]
pub struct UtilizationShedder {
    inner: Arc<ratekeeper::UtilizationShedder>,
}

fn small(value: f64, parameter: &'static str) -> CoreResult<u8> {
    let n = cost_from_f64(parameter, value)?;
    // Out-of-range values stay out of range, for the core to refuse with its message.
    Ok(u8::try_from(n).unwrap_or(u8::MAX))
}

#[napi]
impl UtilizationShedder {
    /// A shedder with Stripe's thresholds, or those given.
    #[napi(constructor, ts_args_type = "options?: UtilizationOptions")]
    pub fn new(env: Env, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let build = || -> CoreResult<Self> {
                let mut config = UtilizationConfig::default();
                let mut clock: Arc<dyn Clock> = Arc::new(ratekeeper::SystemClock);
                if let Some(o) = options::optional::<UtilizationOptions>(&options)? {
                    if let Some(v) = o.end_of_good {
                        config.end_of_good = v;
                    }
                    if let Some(v) = o.start_of_bad {
                        config.start_of_bad = v;
                    }
                    if let Some(ms) = o.before_shedding_ms {
                        config.seconds_before_shedding = ms / 1e3;
                    }
                    if let Some(ms) = o.to_shed_all_ms {
                        config.seconds_to_shed_all = ms / 1e3;
                    }
                    if let Some(n) = o.levels {
                        config.levels = small(n, "levels")?;
                    }
                    if let Some(ClockOption(manual)) = o.clock {
                        clock = manual;
                    }
                }
                Ok(UtilizationShedder { inner: Arc::new(ratekeeper::UtilizationShedder::new(config, clock)?) })
            };
            core(&env, build())
        })
    }

    /// Records the current utilization (0..1) and advances the shedding amount to now.
    #[napi(ts_args_type = "utilization: number")]
    pub fn observe(&self, env: Env, utilization: Option<Unknown<'_>>) -> napi::Result<()> {
        guard(&env, || {
            let observe =
                || self.inner.observe(args::required(Js::opt(&utilization), "utilization")?.number("utilization")?);
            core(&env, observe())
        })
    }

    /// The share of overall non-critical traffic being shed now, 0..1.
    #[napi]
    pub fn shedding(&self, env: Env) -> napi::Result<f64> {
        guard(&env, || Ok(self.inner.shedding()))
    }

    /// The chance that a request of `priority` is dropped now (0 for priority 0, critical).
    #[napi(ts_args_type = "priority: number")]
    pub fn drop_chance(&self, env: Env, priority: Option<Unknown<'_>>) -> napi::Result<f64> {
        guard(&env, || {
            core(
                &env,
                args::required(Js::opt(&priority), "priority")
                    .and_then(|p| p.number("priority"))
                    .and_then(|p| small(p, "priority"))
                    .and_then(|p| self.inner.drop_chance(p)),
            )
        })
    }

    /// Admits a request of `priority` (0 = critical … `levels` = least important), or throws
    /// `ERR_SHED` with the current drop chance.
    #[napi(ts_args_type = "priority: number")]
    pub fn check(&self, env: Env, priority: Option<Unknown<'_>>) -> napi::Result<()> {
        guard(&env, || {
            core(
                &env,
                args::required(Js::opt(&priority), "priority")
                    .and_then(|p| p.number("priority"))
                    .and_then(|p| small(p, "priority"))
                    .and_then(|p| self.inner.check(p)),
            )
        })
    }
}
