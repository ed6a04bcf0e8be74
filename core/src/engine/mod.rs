//! The limiter catalogue: each algorithm written once as a pure function of
//! (parameters, state, now). The memory backend runs it on its state; on Redis, the GCRA and
//! sliding-window scripts apply its write and return the state they read, and the decision is
//! this function replayed on that state (the exact sliding window's script mirrors its rule).
//!
//! Each engine is one file (with its Lua script beside it) implementing [`Engine`]: its rule
//! in memory, its Redis call and the reading of its reply, and the names of its keys.
//! - [`gcra`]: token bucket, leaky bucket and points (one GCRA engine, O(1) state);
//! - [`leased`]: the token bucket spent from leases taken from Redis in chunks;
//! - [`sliding`]: fixed buckets and Carlson's sliding windows with sub-buckets;
//! - [`log`]: the exact sliding window (single and multi-window);
//! - [`concurrent`]: leases with fencing tokens;
//! - [`calendar`]: quotas per calendar day, week, month or year in a time zone;
//! - [`partitions`]: leased partitions, the pure rule of a rate split into partitions that
//!   processes lease and pace in process (its Redis side in `backend/redis/partitions.rs`);
//! - [`unlimited`]: always allows.
//!
//! Backends run engines through [`Algorithm`] and [`Engine`]; nothing here depends on a backend.

pub(crate) mod calendar;
pub(crate) mod calendar_period;
pub(crate) mod colocate;
pub(crate) mod concurrent;
pub(crate) mod contract;
pub(crate) mod divisor;
pub mod gcra;
pub(crate) mod hold;
pub(crate) mod kinds;
pub(crate) mod leased;
pub(crate) mod log;
pub(crate) mod lua;
pub(crate) mod packed;
pub(crate) mod partitions;
pub(crate) mod script_all;
pub(crate) mod settle;
pub(crate) mod sliding;
pub(crate) mod spec;
pub(crate) mod spec_json;
pub(crate) mod unlimited;
pub(crate) mod words;

use std::time::Duration;

use redis::Cmd;

use crate::decision::{Decision, LimitStatus};
use crate::error::Result;
pub use calendar_period::CalendarPeriod;
pub use colocate::Colocate;
pub(crate) use contract::{Engine, Op, Outcome, ReleaseWaiter, Served, Waiter, Wake, WakeList};
pub use kinds::{Kind, LimiterSpec};
use lua::LuaScript;
pub use spec::{SlidingLimit, WindowLimit};
pub use spec_json::LimiterConfig;

/// Generates [`Algorithm`], one variant per engine of the table in `kinds.rs`, and
/// `with_engine!`, the one dispatch from a compiled limiter to its engine.
macro_rules! algorithm {
    // `$d` is a `$`, so that the generated macro can declare its own variables.
    ($d:tt $($variant:ident: $engine:ty, $storage:ident;)*) => {
        /// A compiled limiter: integer microseconds, ready to evaluate.
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) enum Algorithm {
            $(
                #[doc = concat!("The `", stringify!($variant), "` engine.")]
                $variant($engine),
            )*
        }

        /// Each engine's part in `check_all`'s combined script, in the order of the table
        /// (see [`Engine::COMBINED`]).
        pub(crate) const COMBINED: &[Option<contract::Combined>] = &[$(<$engine as Engine>::COMBINED,)*];

        /// Runs `$body` with `$e` bound to the engine of `$algorithm`.
        macro_rules! with_engine {
            ($d algorithm:expr, $d e:ident => $d body:expr) => {
                match $d algorithm {
                    $(Algorithm::$variant($d e) => $d body,)*
                }
            };
        }
    };
}
kinds::for_each_engine!(algorithm $);

/// The Redis side of [`Engine`], for whichever engine the limiter compiled to.
impl Algorithm {
    /// The engine's part in `check_all`'s combined script (see [`Engine::COMBINED`]).
    #[cfg(test)]
    pub(crate) fn combined(&self) -> Option<contract::Combined> {
        fn of<E: Engine>(_: &E) -> Option<contract::Combined> {
            E::COMBINED
        }
        with_engine!(self, e => of(e))
    }

    /// See [`Engine::script`].
    pub(crate) fn script(&self) -> Option<&'static LuaScript> {
        with_engine!(self, e => e.script())
    }

    /// See [`Engine::keys`].
    pub(crate) fn keys(&self, op: Op) -> &'static [&'static str] {
        with_engine!(self, e => e.keys(op))
    }

    /// See [`Engine::state_keys`].
    pub(crate) fn state_keys(&self) -> &'static [&'static str] {
        with_engine!(self, e => e.state_keys())
    }

    /// See [`Engine::encode`].
    #[inline]
    pub(crate) fn encode(&self, op: Op, now: Option<u64>, cmd: &mut Cmd) -> Result<()> {
        with_engine!(self, e => e.encode(op, now, cmd))
    }

    /// See [`Engine::decode`].
    pub(crate) fn decode(&self, op: Op, reply: &[i64]) -> Result<Outcome> {
        with_engine!(self, e => e.decode(op, reply))
    }

    /// See [`Engine::wake_list`].
    pub(crate) fn wake_list(&self) -> Option<WakeList> {
        with_engine!(self, e => e.wake_list())
    }
}

impl Algorithm {
    /// See [`Engine::capacity`].
    pub(crate) fn capacity(&self) -> u64 {
        with_engine!(self, e => e.capacity())
    }

    /// See [`Engine::adjusts`].
    pub(crate) fn adjusts(&self) -> bool {
        with_engine!(self, e => e.adjusts())
    }

    /// See [`Engine::validate_cost`].
    #[inline]
    pub(crate) fn validate_cost(&self, cost: u64) -> Result<()> {
        with_engine!(self, e => e.validate_cost(cost))
    }
}

/// Identifies a configuration of a counting limiter among others of the same name (FNV-1a over
/// its parameters; never 0, which stands for "none" in stored state). Stable across processes
/// and versions, so that every process of a fleet computes the same one.
pub(crate) fn fingerprint(values: impl IntoIterator<Item = u64>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for value in values {
        for byte in value.to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    // At most 2^53 - 1, so that a Lua script reads and writes it exactly as a number.
    (hash & ((1 << 53) - 1)).max(1)
}

/// A single-limit decision from microsecond figures.
#[inline(always)]
pub(crate) fn decision(allowed: bool, limit: u64, remaining: u64, retry_us: u64, reset_us: u64) -> Decision {
    let retry_after = if allowed { Duration::ZERO } else { Duration::from_micros(retry_us) };
    Decision::from_parts(allowed, limit, remaining, retry_after, Duration::from_micros(reset_us))
}

/// Folds per-limit figures of a multi-limit check into one decision: the binding limit is the
/// one with the least remaining (first on ties), `retry_after` and `reset_after` the largest.
pub(crate) struct Combine {
    limit: u64,
    remaining: u64,
    retry_us: u64,
    reset_us: u64,
    details: Option<Vec<LimitStatus>>,
}

impl Combine {
    /// An empty fold; `multi` keeps per-limit details (only multi-limit limiters pay for them).
    pub(crate) fn new(multi: bool, capacity: usize) -> Self {
        Combine {
            limit: 0,
            remaining: u64::MAX,
            retry_us: 0,
            reset_us: 0,
            details: multi.then(|| Vec::with_capacity(capacity)),
        }
    }

    /// Adds one limit's figures.
    pub(crate) fn push(&mut self, window_us: u64, limit: u64, remaining: u64, retry_us: u64, reset_us: u64) {
        if remaining < self.remaining {
            self.remaining = remaining;
            self.limit = limit;
        }
        self.retry_us = self.retry_us.max(retry_us);
        self.reset_us = self.reset_us.max(reset_us);
        if let Some(details) = &mut self.details {
            details.push(LimitStatus {
                window: Duration::from_micros(window_us),
                limit,
                remaining,
                retry_after: Duration::from_micros(retry_us),
                reset_after: Duration::from_micros(reset_us),
            });
        }
    }

    /// The combined decision.
    pub(crate) fn finish(self, allowed: bool) -> Decision {
        let mut d = decision(allowed, self.limit, self.remaining, self.retry_us, self.reset_us);
        d.limits = self.details.map(Vec::into_boxed_slice);
        d
    }
}
