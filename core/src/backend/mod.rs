//! Backends hold limiter state: the embedded memory backend (default) and, later, Redis.

pub(crate) mod memory;

use std::sync::Arc;
use std::time::Duration;

pub use memory::MemoryConfig;
use memory::MemoryBackend;

use crate::clock::Clock;
use crate::error::Result;
use crate::limiter::{LimiterSpec, SlidingLimit, WindowLimit};
use crate::limiter_handle::Limiter;
use crate::params::validate_name;

/// A place where limiter state lives, shared by every limiter built from it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Backend {
    pub(crate) inner: Arc<BackendInner>,
}

#[derive(Debug)]
pub(crate) enum BackendInner {
    Memory(MemoryBackend),
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
        Ok(Backend { inner: Arc::new(BackendInner::Memory(MemoryBackend::new(config)?)) })
    }

    /// The clock limiters on this backend use to wait.
    pub fn clock(&self) -> Arc<dyn Clock> {
        match &*self.inner {
            BackendInner::Memory(m) => m.clock.clone(),
        }
    }

    /// Keys currently held by a memory backend (expired ones included until swept).
    pub fn memory_len(&self) -> Option<usize> {
        match &*self.inner {
            BackendInner::Memory(m) => Some(m.len()),
        }
    }

    /// Builds a limiter from a spec, validating every parameter.
    pub fn limiter(&self, name: &str, spec: LimiterSpec) -> Result<Limiter> {
        validate_name(name)?;
        Limiter::build(self, name, spec)
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

    /// A burst of `size`, draining completely in `drain`.
    pub fn leaky(&self, name: &str, size: u64, drain: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Leaky { size, drain })
    }

    /// `capacity` points refilled completely in `refill`; correct estimates with `points_used`.
    pub fn points(&self, name: &str, capacity: u64, refill: Duration) -> Result<Limiter> {
        self.limiter(name, LimiterSpec::Points { capacity, refill })
    }
}
