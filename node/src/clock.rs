//! `ManualClock`: the core's manual clock, for tests and the conformance vectors.

use std::sync::Arc;

use napi::{Env, Unknown};
use napi_derive::napi;
use ratekeeper::params::cost_from_f64;
use ratekeeper::Clock;

use crate::args::{required, Js};
use crate::error::{core, guard};

/// A clock that only moves when told to (tests). Pass it to `Backend.memory({ clock })` or
/// `Backend.redis(url, { clock })`: waits (`acquire`) then end when the clock is advanced past
/// them, and Redis calls use its time instead of the server's.
#[napi]
pub struct ManualClock {
    pub(crate) inner: Arc<ratekeeper::ManualClock>,
}

/// A whole number of microseconds in 0..=2^53 (the core's converter names the parameter).
fn micros(value: Option<Unknown<'_>>, parameter: &'static str) -> ratekeeper::Result<u64> {
    cost_from_f64(parameter, required(value.as_ref().map(Js::of), parameter)?.number(parameter)?)
}

#[napi]
impl ManualClock {
    /// A manual clock reading `startUs` microseconds since the epoch (default: now).
    #[napi(constructor, ts_args_type = "startUs?: number")]
    pub fn new(env: Env, start_us: Option<Unknown<'_>>) -> napi::Result<Self> {
        guard(&env, || {
            let start = match start_us {
                None => ratekeeper::SystemClock.now_micros(),
                some => core(&env, micros(some, "startUs"))?,
            };
            Ok(ManualClock { inner: Arc::new(ratekeeper::ManualClock::new(start)) })
        })
    }

    /// Moves the clock forward by `ms` milliseconds (fractions down to the microsecond).
    #[napi(ts_args_type = "ms: number")]
    pub fn advance(&self, env: Env, ms: Option<Unknown<'_>>) -> napi::Result<()> {
        guard(&env, || {
            let ms = core(&env, required(ms.as_ref().map(Js::of), "ms").and_then(|v| v.number("ms")))?;
            let us = core(&env, cost_from_f64("ms", (ms * 1e3).round()))?;
            self.inner.advance_micros(us);
            Ok(())
        })
    }

    /// Moves the clock forward by `us` microseconds.
    #[napi(ts_args_type = "us: number")]
    pub fn advance_us(&self, env: Env, us: Option<Unknown<'_>>) -> napi::Result<()> {
        guard(&env, || {
            self.inner.advance_micros(core(&env, micros(us, "us"))?);
            Ok(())
        })
    }

    /// Sets the clock to `us` microseconds since the epoch (it may move backwards).
    #[napi(ts_args_type = "us: number")]
    pub fn set_us(&self, env: Env, us: Option<Unknown<'_>>) -> napi::Result<()> {
        guard(&env, || {
            self.inner.set_micros(core(&env, micros(us, "us"))?);
            Ok(())
        })
    }

    /// The time, in microseconds since the epoch.
    #[napi(getter)]
    pub fn now_us(&self) -> f64 {
        self.inner.now_micros() as f64
    }
}
