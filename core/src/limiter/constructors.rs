//! The constructors of limiters on a [`Backend`]: the generic one taking a spec, and the named
//! ones (sugar over specs). They live with the handle they return, so the backend layer never
//! names [`Limiter`].

use std::time::Duration;

use super::Limiter;
use crate::backend::Backend;
use crate::engine::{CalendarPeriod, LimiterConfig, LimiterSpec, SlidingLimit, WindowLimit};
use crate::error::Result;
use crate::params::validate_name;

impl Backend {
    /// Builds a limiter from a spec, validating every parameter.
    pub fn limiter(&self, name: &str, spec: LimiterSpec) -> Result<Limiter> {
        validate_name(name)?;
        Limiter::build(self, name, spec)
    }

    /// Builds a limiter from a JSON spec (see [`LimiterConfig`]), applying the options it carries
    /// (`wait_timeout`, `block_for`, `colocate`, `shadow`). A bad field is [`crate::Error::InvalidArgument`]
    /// naming its path.
    pub fn limiter_from_json(&self, name: &str, json: &str) -> Result<Limiter> {
        self.limiter_from_config(name, LimiterConfig::from_json(json)?)
    }

    /// A limiter for operators' reads (`peek`, `concurrent_use`, `busiest_keys`, `reset`) from a
    /// JSON spec: it applies live overrides as every process does, but never registers itself
    /// as a user of the name, nor counts its calls in the name's metrics. (Its checks still
    /// consume: it is an ordinary limiter otherwise.)
    pub fn observer_from_json(&self, name: &str, json: &str) -> Result<Limiter> {
        validate_name(name)?;
        let config = LimiterConfig::from_json(json)?;
        Limiter::build_as(self, name, config.spec, false)?.with_shadow(config.shadow)
    }

    /// Builds a limiter from a spec and its options.
    pub fn limiter_from_config(&self, name: &str, config: LimiterConfig) -> Result<Limiter> {
        let mut limiter = self.limiter(name, config.spec)?.with_shadow(config.shadow)?;
        if let Some(colocate) = config.colocate {
            limiter = limiter.with_colocate(colocate);
        }
        let limiter = match config.wait_timeout {
            Some(wait) => limiter.with_wait_timeout(wait)?,
            None => limiter,
        };
        match config.block_for {
            Some(block_for) => limiter.with_block_for(Some(block_for)),
            None => Ok(limiter),
        }
    }

    /// At most `limit` concurrent holders; leases older than `lock_timeout` may be reclaimed.
    pub fn concurrent(&self, name: &str, limit: u64, lock_timeout: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Concurrent { limit, lock_timeout })
    }

    /// `limit` per fixed window of `interval`, windows aligned to the epoch.
    pub fn bucket(&self, name: &str, limit: u64, interval: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Bucket { limit, interval })
    }

    /// Never more than `limit` in any span of `interval` (exact sliding window).
    pub fn window(&self, name: &str, limit: u64, interval: Duration) -> Result<Limiter> {
        self.windows(name, &[WindowLimit { limit, interval }])
    }

    /// Several exact sliding windows checked and recorded together.
    pub fn windows(&self, name: &str, windows: &[WindowLimit]) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Window { windows: windows.to_vec() })
    }

    /// Several `(duration, limit, precision)` limits over sub-buckets, checked atomically.
    pub fn sliding_window(&self, name: &str, limits: &[SlidingLimit]) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::SlidingWindow { limits: limits.to_vec() })
    }

    /// `rate` tokens per second up to `capacity`.
    pub fn token_bucket(&self, name: &str, rate: f64, capacity: u64) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::TokenBucket { rate, capacity })
    }

    /// A token bucket (`rate` per second up to `capacity`) shared by the fleet, whose tokens each
    /// process takes from Redis in leases of up to `chunk` (`None`: capacity / 16, at least 1)
    /// and spends in-process; unspent tokens go back at [`Limiter::close`] or the next lease,
    /// or lapse `lease_ttl` after they were taken. The fleet admits at most capacity + rate × (span + lease_ttl) over any
    /// span; leasing ahead may under-use it. On the memory backend it is the token bucket.
    pub fn leased(
        &self,
        name: &str,
        rate: f64,
        capacity: u64,
        chunk: Option<u64>,
        lease_ttl: Duration,
    ) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Leased { rate, capacity, chunk, lease_ttl })
    }

    /// A burst of `size`, draining completely in `drain`.
    pub fn leaky(&self, name: &str, size: u64, drain: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Leaky { size, drain })
    }

    /// `capacity` points refilled completely in `refill`; correct estimates with `points_used`.
    pub fn points(&self, name: &str, capacity: u64, refill: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Points { capacity, refill })
    }

    /// Leased partitions (Azure's rate limiting pattern): `total_rate` units per second split
    /// into `partitions` equal partitions; each process leases a fair share of them for
    /// `lease_ttl` (renewing while it uses them) and paces its calls to the rate it holds. The
    /// first `reserved` partitions are for limiters built with `priority` only, the rest for the
    /// others. On the memory backend the process holds every partition of its class.
    pub fn partitions(
        &self,
        name: &str,
        total_rate: f64,
        partitions: u64,
        lease_ttl: Duration,
        reserved: u64,
        priority: bool,
    ) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Partitions { total_rate, partitions, lease_ttl, reserved, priority })
    }

    /// `limit` per calendar `period` in IANA time zone `tz`; monthly periods start on day
    /// `anchor` (1-31, clamped to the month's last day; default 1).
    pub fn calendar(
        &self,
        name: &str,
        limit: u64,
        period: CalendarPeriod,
        tz: &str,
        anchor: Option<u8>,
    ) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Calendar { limit, period, tz: tz.to_owned(), anchor })
    }
}
