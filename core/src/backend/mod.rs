//! Backends hold limiter state: the embedded memory backend (default), Redis and Redis Cluster.

pub(crate) mod memory;
mod operate;
pub(crate) mod redis;

/// The Redis backend types a limiter holds.
pub(crate) use self::redis::{Failover, RedisBackend};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub use self::redis::config::{FailurePolicy, RedisConfig, TlsConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEADLINE};
pub use self::redis::keys::DEFAULT_PREFIX;
pub use self::redis::redact::redact_url;
pub use crate::limiter::script::sources as lua_sources;
pub(crate) use memory::MemoryBackend;
pub use memory::MemoryConfig;

use crate::clock::Clock;
use crate::error::Result;
use crate::limiter::{CalendarPeriod, LimiterConfig, LimiterSpec, SlidingLimit, WindowLimit};
use crate::limiter_handle::Limiter;
use crate::params::validate_name;

/// What a Redis backend's failure policy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStats {
    /// Calls allowed because Redis failed under [`FailurePolicy::FailOpen`].
    pub failed_open: u64,
    /// Calls answered by the in-memory fallback under [`FailurePolicy::Fallback`].
    pub fell_back: u64,
    /// Calls that failed because Redis failed under [`FailurePolicy::FailClosed`].
    pub failed: u64,
    /// Calls Redis refused ([`crate::Error::BackendRejected`]: a missing permission, a wrong
    /// password, memory full, a script error), under any policy: none of them was admitted.
    pub rejected: u64,
    /// Calls of a counting limiter (bucket, window, sliding window) that found the key's state
    /// last recorded by another configuration of the same name and kind, e.g. during a rolling
    /// deploy that changes a limit. Each call decides with its own configuration and never
    /// deletes what another configuration still counts.
    pub config_mismatches: u64,
}

/// A place where limiter state lives, shared by every limiter built from it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Backend {
    pub(crate) inner: Arc<BackendInner>,
}

#[derive(Debug)]
pub(crate) enum BackendInner {
    Memory(Arc<MemoryBackend>),
    Redis(Arc<RedisBackend>),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::memory()
    }
}

impl Backend {
    /// A new in-process memory backend with default settings (the embedded default).
    pub fn memory() -> Backend {
        Backend::memory_with(MemoryConfig::default()).expect("the default memory configuration is valid")
    }

    /// A new in-process memory backend.
    pub fn memory_with(config: MemoryConfig) -> Result<Backend> {
        Ok(Backend { inner: Arc::new(BackendInner::Memory(Arc::new(MemoryBackend::new(config)?))) })
    }

    /// A standalone Redis server, `redis://[user:password@]host:port[/db]` or `rediss://…`, with
    /// default settings. Nothing connects until the first call; every backend built for the
    /// same URL in this process shares one connection set.
    pub fn redis(url: &str) -> Result<Backend> {
        Backend::redis_with(RedisConfig::new(url))
    }

    /// A Redis Cluster reached through any of `seeds`, with default settings.
    pub fn redis_cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Result<Backend> {
        Backend::redis_with(RedisConfig::cluster(seeds))
    }

    /// A Redis or Redis Cluster backend.
    pub fn redis_with(config: RedisConfig) -> Result<Backend> {
        Ok(Backend { inner: Arc::new(BackendInner::Redis(Arc::new(RedisBackend::new(config)?))) })
    }

    /// The clock limiters on this backend use to wait.
    pub fn clock(&self) -> Arc<dyn Clock> {
        match &*self.inner {
            BackendInner::Memory(m) => m.clock.clone(),
            BackendInner::Redis(r) => r.fallback.clock.clone(),
        }
    }

    /// Keys currently held by a memory backend (expired ones included until swept).
    pub fn memory_len(&self) -> Option<usize> {
        match &*self.inner {
            BackendInner::Memory(m) => Some(m.len()),
            BackendInner::Redis(_) => None,
        }
    }

    /// What the failure policy has done (all zero for the memory backend).
    pub fn stats(&self) -> BackendStats {
        match &*self.inner {
            BackendInner::Memory(m) => BackendStats {
                config_mismatches: m.config_mismatches.load(Ordering::Relaxed),
                ..BackendStats::default()
            },
            BackendInner::Redis(r) => BackendStats {
                failed_open: r.counters.failed_open.load(Ordering::Relaxed),
                fell_back: r.counters.fell_back.load(Ordering::Relaxed),
                failed: r.counters.failed.load(Ordering::Relaxed),
                rejected: r.counters.rejected.load(Ordering::Relaxed),
                config_mismatches: r.counters.config_mismatches.load(Ordering::Relaxed)
                    + r.fallback.config_mismatches.load(Ordering::Relaxed),
            },
        }
    }

    /// Builds a limiter from a spec, validating every parameter.
    pub fn limiter(&self, name: &str, spec: LimiterSpec) -> Result<Limiter> {
        validate_name(name)?;
        Limiter::build(self, name, spec)
    }

    /// Builds a limiter from a JSON spec (see [`LimiterConfig`]), applying the options it carries
    /// (`wait_timeout`). A bad field is [`crate::Error::InvalidArgument`] naming its path.
    pub fn limiter_from_json(&self, name: &str, json: &str) -> Result<Limiter> {
        self.limiter_from_config(name, LimiterConfig::from_json(json)?)
    }

    /// A limiter for operators' reads (`peek`, `concurrent_use`, `busiest_keys`, `reset`) from a
    /// JSON spec: it applies live overrides as every process does, but never registers itself
    /// as a user of the name, nor counts its calls in the name's metrics. (Its checks still
    /// consume: it is an ordinary limiter otherwise.)
    pub fn observer_from_json(&self, name: &str, json: &str) -> Result<Limiter> {
        validate_name(name)?;
        Limiter::build_as(self, name, LimiterConfig::from_json(json)?.spec, false)
    }

    /// Builds a limiter from a spec and its options.
    pub fn limiter_from_config(&self, name: &str, config: LimiterConfig) -> Result<Limiter> {
        let limiter = self.limiter(name, config.spec)?;
        match config.wait_timeout {
            Some(wait) => limiter.with_wait_timeout(wait),
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
    /// or lapse `lease_ttl` after they were taken. The fleet never admits more than the bucket
    /// allows; leasing ahead may under-use it. On the memory backend it is the token bucket.
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
