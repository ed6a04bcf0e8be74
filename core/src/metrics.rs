//! Per-limiter metrics of concurrent limiters (Sidekiq's set): readable in-process, and for Redis
//! backends aggregated across processes in one hash per limiter, flushed in batches once a second
//! rather than written per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of a concurrent limiter's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Leases granted (blocks run).
    pub held: u64,
    /// Total time leases were held, measured at release.
    pub held_time: Duration,
    /// Leases granted without waiting.
    pub immediate: u64,
    /// Leases granted after waiting.
    pub waited: u64,
    /// Total time spent waiting for the leases that were granted after waiting.
    pub wait_time: Duration,
    /// Leases released after their lock_timeout (including those already reclaimed): holders
    /// that ran too long.
    pub overages: u64,
    /// Overdue leases reclaimed for a new caller: each may have let more than `limit` run at once.
    pub reclaimed: u64,
}

/// The field names, in the order of [`Counters`]'s slots (also the Redis hash fields).
pub(crate) const FIELDS: [&str; 7] = ["held", "held_us", "immediate", "waited", "wait_us", "overages", "reclaimed"];

/// One counter per field; times in microseconds.
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; 7]);

/// Which counter.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Counter {
    Held = 0,
    HeldMicros = 1,
    Immediate = 2,
    Waited = 3,
    WaitMicros = 4,
    Overages = 5,
    Reclaimed = 6,
}

impl Counters {
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        if n > 0 {
            self.0[counter as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    fn load(&self) -> [u64; 7] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }

    /// Reads and zeroes every counter (the deltas to flush).
    pub(crate) fn take(&self) -> [u64; 7] {
        std::array::from_fn(|i| self.0[i].swap(0, Ordering::Relaxed))
    }

    /// Puts back deltas whose flush failed.
    pub(crate) fn restore(&self, deltas: [u64; 7]) {
        for (i, d) in deltas.into_iter().enumerate() {
            self.0[i].fetch_add(d, Ordering::Relaxed);
        }
    }
}

/// A limiter's metrics: the in-process totals, and the deltas not yet flushed to Redis.
#[derive(Debug, Default)]
pub(crate) struct LimiterMetrics {
    pub(crate) local: Counters,
    pub(crate) unflushed: Counters,
}

impl LimiterMetrics {
    pub(crate) fn add(&self, counter: Counter, n: u64) {
        self.local.add(counter, n);
        self.unflushed.add(counter, n);
    }

    pub(crate) fn snapshot(&self) -> Metrics {
        from_values(self.local.load())
    }
}

/// A snapshot from the counters' values (in [`FIELDS`] order).
pub(crate) fn from_values(v: [u64; 7]) -> Metrics {
    Metrics {
        held: v[0],
        held_time: Duration::from_micros(v[1]),
        immediate: v[2],
        waited: v[3],
        wait_time: Duration::from_micros(v[4]),
        overages: v[5],
        reclaimed: v[6],
    }
}
