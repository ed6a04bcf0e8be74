//! Backends hold limiter state: the embedded memory backend (default), Redis and Redis Cluster.

mod holds;
pub(crate) mod memory;
mod operate;
pub(crate) mod redis;
pub(crate) mod wall_clock;

/// The Redis backend types a limiter holds.
pub(crate) use self::redis::{Failover, RedisBackend};

use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use self::redis::config::{FailurePolicy, OnConflict, RedisConfig, SentinelConfig, TlsConfig};
pub use self::redis::redact::redact_url;
pub use crate::engine::lua::sources as lua_sources;
pub(crate) use memory::MemoryBackend;
pub use memory::MemoryConfig;

use crate::clock::Clock;
use crate::error::Result;

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

    /// A Sentinel-managed primary named `service`, found through any of `sentinels`
    /// (`host:port`), with default settings (see [`RedisConfig::sentinel`]).
    pub fn sentinel<S: Into<String>>(sentinels: impl IntoIterator<Item = S>, service: &str) -> Result<Backend> {
        Backend::redis_with(RedisConfig::sentinel(sentinels, service))
    }

    /// A Redis or Redis Cluster backend.
    pub fn redis_with(config: RedisConfig) -> Result<Backend> {
        let redis = Arc::new(RedisBackend::new(config)?);
        let mut live = LIVE_REDIS.lock();
        live.retain(|b| b.strong_count() > 0);
        live.push(Arc::downgrade(&redis));
        Ok(Backend { inner: Arc::new(BackendInner::Redis(redis)) })
    }

    /// The clock limiters on this backend use to wait.
    pub fn clock(&self) -> Arc<dyn Clock> {
        match &*self.inner {
            BackendInner::Memory(m) => m.clock.clone(),
            BackendInner::Redis(r) => r.fallback.clock.clone(),
        }
    }

    /// Whether this is the in-process memory backend (its calls never wait on I/O).
    pub fn is_memory(&self) -> bool {
        matches!(&*self.inner, BackendInner::Memory(_))
    }

    /// Keys currently held by a memory backend (expired ones included until swept). It counts
    /// them shard by shard, taking each shard's lock in turn: an inspection, not a hot-path call.
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
}

/// The Redis backends of this process, for the flush at exit
/// ([`Backend::flush_every_backend_at_exit`]).
static LIVE_REDIS: parking_lot::Mutex<Vec<std::sync::Weak<RedisBackend>>> = parking_lot::Mutex::new(Vec::new());

/// The Redis backends of this process still alive.
fn live_redis_backends() -> Vec<Arc<RedisBackend>> {
    LIVE_REDIS.lock().iter().filter_map(std::sync::Weak::upgrade).collect()
}
