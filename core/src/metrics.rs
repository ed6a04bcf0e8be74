//! Per-limiter metrics of concurrent limiters (Sidekiq's set): readable in-process, and for Redis
//! backends aggregated across processes in one hash per limiter, flushed in batches once a second
//! rather than written per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

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
}

/// One flush of counts to Redis: its sequence number (per [`LimiterMetrics::writer`], from 1)
/// and its deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) seq: u64,
    pub(crate) deltas: [u64; 7],
}

/// A limiter's metrics: the in-process totals, and the deltas not yet flushed to Redis.
///
/// Flushes are idempotent: the deltas taken for a flush become a [`Batch`] with the next
/// sequence number, and that same batch is sent again until one of its sends is acknowledged
/// (Redis applies each writer's sequence number once), so a flush whose reply was lost is
/// neither lost nor counted twice. Counts made meanwhile wait for the next batch.
#[derive(Debug)]
pub(crate) struct LimiterMetrics {
    pub(crate) local: Counters,
    unflushed: Counters,
    /// Identifies this limiter object's flushes among every writer of the same limiter (the
    /// process id is added when sending, so a forked child is a writer of its own).
    writer: u64,
    last_seq: AtomicU64,
    /// The batch sent and not yet acknowledged.
    pending: Mutex<Option<Batch>>,
}

impl Default for LimiterMetrics {
    fn default() -> Self {
        use std::hash::BuildHasher;
        static OBJECTS: AtomicU64 = AtomicU64::new(0);
        let seed = (std::process::id(), OBJECTS.fetch_add(1, Ordering::Relaxed), std::time::SystemTime::now());
        LimiterMetrics {
            local: Counters::default(),
            unflushed: Counters::default(),
            writer: foldhash::fast::RandomState::default().hash_one(seed),
            last_seq: AtomicU64::new(0),
            pending: Mutex::new(None),
        }
    }
}

impl LimiterMetrics {
    /// The writer id of this limiter object in this process.
    pub(crate) fn writer(&self) -> String {
        format!("{:016x}-{}", self.writer, std::process::id())
    }

    /// The batch to send: the unacknowledged one if any, else the counts made since the last
    /// batch as a new one; `None` when there is nothing to send.
    pub(crate) fn next_batch(&self) -> Option<Batch> {
        let mut pending = self.pending.lock();
        if pending.is_none() {
            let deltas = self.unflushed.take();
            if deltas.iter().all(|d| *d == 0) {
                return None;
            }
            *pending = Some(Batch { seq: self.last_seq.fetch_add(1, Ordering::Relaxed) + 1, deltas });
        }
        *pending
    }

    /// Redis applied (now or before) the batch numbered `seq`.
    pub(crate) fn acknowledge(&self, seq: u64) {
        let mut pending = self.pending.lock();
        if pending.is_some_and(|b| b.seq == seq) {
            *pending = None;
        }
    }

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
