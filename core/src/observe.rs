//! Per-call durations for OpenTelemetry's histograms (`ratekeeper.check.duration`,
//! `ratekeeper.wait.duration`), kept only while an instrumentation asks for them.
//!
//! The OpenTelemetry API has no asynchronous histogram, and recording one value through an SDK
//! costs more than a memory check (about 5 µs in Python's SDK, 0.9 µs in Node's, against a
//! 0.15 µs and a 0.35 µs check): a check never calls into an SDK. While a backend is observed
//! (`Switch`), each call's recording step adds its duration to per-limiter counts and sums by
//! call, outcome and bucket (`Timings`); an instrumentation reads them at each collection
//! ([`crate::Backend::durations`]) and records what is new into its histogram, one value per
//! call at its bucket's mean, within a share of the time between collections (the rest at the
//! next ones). Counts and sums are exact; so is each bucket's count under the
//! bounds the instrumentation advises ([`DURATION_BOUNDS`]). Unobserved, a check pays one
//! predictable branch (the memory fast path asks the switch, see `limiter/fast.rs`) and no
//! clock reading.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use crate::metrics::{self, Counter, Padded, STRIPES};

/// Upper bounds (seconds) of the duration histograms' buckets, advised to the SDK: a memory check
/// (microseconds), a Redis round trip (a millisecond), a wait up to its timeout (seconds).
pub const DURATION_BOUNDS: [f64; 22] = [
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
];

/// Buckets: one per bound, then the unbounded one.
pub const DURATION_BUCKETS: usize = DURATION_BOUNDS.len() + 1;

/// The bounds in nanoseconds, for the recording step (no float on the check path).
const BOUNDS_NANOS: [u64; DURATION_BOUNDS.len()] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// `ratekeeper.outcome` values, in the order of the timings' rows (the decisions' outcomes,
/// named once in the metrics' table of outcomes).
pub const OUTCOMES: [&str; metrics::OUTCOMES.len()] = {
    let mut names = [""; metrics::OUTCOMES.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = metrics::OUTCOMES[i].name;
        i += 1;
    }
    names
};

// The fast path's stripes add to the first two rows: the checks admitted and refused.
const _: () = assert!(
    matches!(metrics::OUTCOMES[0].counter, Counter::Allowed)
        && matches!(metrics::OUTCOMES[1].counter, Counter::Refused)
);

/// Which call a duration is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// One check (each attempt of a waiting call is one): `ratekeeper.check.duration`.
    Check = 0,
    /// A call that may wait (`acquire`, `within_limit`), from its start to its decision or
    /// failure: `ratekeeper.wait.duration`.
    Wait = 1,
}

impl Call {
    /// The call's name in [`crate::Backend::durations`]' readers: `check` or `wait`.
    pub fn as_str(self) -> &'static str {
        match self {
            Call::Check => "check",
            Call::Wait => "wait",
        }
    }

    /// The histogram's name.
    pub fn instrument(self) -> &'static str {
        match self {
            Call::Check => "ratekeeper.check.duration",
            Call::Wait => "ratekeeper.wait.duration",
        }
    }
}

/// One (call, outcome) series of a limiter's durations: counts and sums per bucket of
/// [`DURATION_BOUNDS`]. Cumulative since the limiter object was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationSeries {
    /// The call.
    pub call: Call,
    /// One of [`OUTCOMES`].
    pub outcome: &'static str,
    /// Calls per bucket.
    pub counts: [u64; DURATION_BUCKETS],
    /// The sum of the durations in each bucket, in nanoseconds.
    pub sums_nanos: [u64; DURATION_BUCKETS],
}

impl DurationSeries {
    /// The number of calls.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Whether a backend's calls are timed: the number of instrumentations observing it; and
/// whether they are traced (see `trace.rs`): the number of instrumentations tracing it.
#[derive(Debug, Default)]
pub(crate) struct Switch(AtomicUsize, AtomicUsize);

impl Switch {
    /// Whether calls are timed now.
    #[inline(always)]
    pub(crate) fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }

    /// When a call starts, if it is timed.
    #[inline(always)]
    pub(crate) fn start(&self) -> Option<Instant> {
        self.on().then(Instant::now)
    }

    /// Whether calls are traced now.
    #[inline(always)]
    pub(crate) fn traced(&self) -> bool {
        self.1.load(Ordering::Relaxed) != 0
    }

    /// One more tracer (`true`) or one fewer (never below zero).
    pub(crate) fn trace(&self, on: bool) {
        if on {
            self.1.fetch_add(1, Ordering::Relaxed);
        } else {
            let _ = self.1.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// One more observer (`true`) or one fewer. `reads_tsc` says whether a quanta clock reads
    /// the time-stamp counter (the memory backend's clock knows).
    pub(crate) fn turn(&self, on: bool, reads_tsc: fn(&quanta::Clock) -> bool) {
        if on {
            // Calibrated here, not on a check (quanta takes up to a fifth of a second).
            COUNTER.get_or_init(|| {
                let clock = quanta::Clock::new();
                let tsc = reads_tsc(&clock);
                (clock, tsc)
            });
            self.0.fetch_add(1, Ordering::Relaxed);
        } else {
            // Never below zero: a second `stop` changes nothing.
            let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}

/// The CPU's time-stamp counter (quanta's calibrated clock, and whether it reads the counter
/// itself) for the memory fast path's timings: a reading costs a fraction of `Instant::now()`'s,
/// which was a third of a check.
static COUNTER: OnceLock<(quanta::Clock, bool)> = OnceLock::new();

/// A raw reading of [`COUNTER`] (0 before any backend was observed).
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    match COUNTER.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `rdtsc` exists on every x86-64 CPU and reads a register; quanta's reading is
        // this same instruction (checked when the clock was made, as the memory backend does).
        Some((_, true)) => unsafe { std::arch::x86_64::_rdtsc() },
        Some((clock, _)) => clock.raw(),
        None => 0,
    }
}

/// Nanoseconds since the reading `start` of [`ticks`].
#[inline]
pub(crate) fn nanos_since(start: u64) -> u64 {
    let end = ticks();
    COUNTER.get().map_or(0, |(clock, _)| clock.delta_as_nanos(start, end))
}

/// Rows: (call, outcome); cells per row: counts then sums.
const ROWS: usize = 2 * OUTCOMES.len();
const CELLS: usize = ROWS * 2 * DURATION_BUCKETS;

/// The memory fast path's buckets (up to 250 µs) are counted per thread (as the decisions
/// are, see `metrics::Striped`): a plain add, where an atomic one costs a quarter of a check.
const FAST_BUCKETS: usize = 8;
/// Per stripe: admitted then refused, each counts then sums of the fast buckets.
const FAST_CELLS: usize = 2 * 2 * FAST_BUCKETS;

/// A limiter object's durations, allocated at its first timed call.
#[derive(Debug, Default)]
pub(crate) struct Timings {
    shared: OnceLock<Box<[AtomicU64; CELLS]>>,
    fast: OnceLock<Box<[Padded<[AtomicU64; FAST_CELLS]>; STRIPES]>>,
}

impl Timings {
    /// Adds one call of `call` that ended with `outcome` (a decision's counter), started at
    /// `started`.
    pub(crate) fn add(&self, call: Call, outcome: Counter, started: Instant) {
        self.add_nanos(call, outcome, u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds one call that took `nanos`.
    #[inline]
    pub(crate) fn add_nanos(&self, call: Call, outcome: Counter, nanos: u64) {
        let Some(outcome) = outcome.outcome_row() else { return };
        let bucket = BOUNDS_NANOS.iter().position(|bound| nanos <= *bound).unwrap_or(BOUNDS_NANOS.len());
        let cells = self.shared.get_or_init(|| Box::new(std::array::from_fn(|_| AtomicU64::new(0))));
        let row = (call as usize * OUTCOMES.len() + outcome) * 2 * DURATION_BUCKETS;
        cells[row + bucket].fetch_add(1, Ordering::Relaxed);
        cells[row + DURATION_BUCKETS + bucket].fetch_add(nanos, Ordering::Relaxed);
    }

    /// Adds one check of the memory fast path that took `nanos`: in `stripe`, the calling
    /// thread's ([`crate::metrics::stripe`]), when it falls in a fast bucket.
    #[inline]
    pub(crate) fn add_fast(&self, stripe: usize, allowed: bool, nanos: u64) {
        let Some(bucket) = BOUNDS_NANOS[..FAST_BUCKETS].iter().position(|bound| nanos <= *bound) else {
            let outcome = if allowed { Counter::Allowed } else { Counter::Refused };
            return self.add_nanos(Call::Check, outcome, nanos);
        };
        let stripes = self.fast.get_or_init(|| Box::new(std::array::from_fn(|_| Padded::default())));
        let row = usize::from(!allowed) * 2 * FAST_BUCKETS;
        let cells = &stripes[stripe].0;
        for (cell, n) in [(&cells[row + bucket], 1), (&cells[row + FAST_BUCKETS + bucket], nanos)] {
            if stripe < STRIPES - 1 {
                // Only this thread ever writes this stripe: no other write can fall in between.
                cell.store(cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
            } else {
                cell.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Adds these durations to `into` (several objects of one limiter name add up); series
    /// with no call are left out.
    pub(crate) fn add_to(&self, into: &mut Vec<DurationSeries>) {
        for (row, (call, outcome)) in [Call::Check, Call::Wait]
            .into_iter()
            .flat_map(|call| OUTCOMES.iter().map(move |outcome| (call, *outcome)))
            .enumerate()
        {
            let base = row * 2 * DURATION_BUCKETS;
            let read = |i: usize| self.shared.get().map_or(0, |cells| cells[base + i].load(Ordering::Relaxed));
            let mut counts: [u64; DURATION_BUCKETS] = std::array::from_fn(read);
            let mut sums_nanos: [u64; DURATION_BUCKETS] = std::array::from_fn(|i| read(DURATION_BUCKETS + i));
            // Rows 0 and 1 are the checks admitted and refused: the fast path's stripes add to them.
            if let (Some(stripes), 0..=1) = (self.fast.get(), row) {
                for stripe in stripes.iter() {
                    for i in 0..FAST_BUCKETS {
                        counts[i] += stripe.0[row * 2 * FAST_BUCKETS + i].load(Ordering::Relaxed);
                        sums_nanos[i] += stripe.0[row * 2 * FAST_BUCKETS + FAST_BUCKETS + i].load(Ordering::Relaxed);
                    }
                }
            }
            if counts.iter().all(|n| *n == 0) {
                continue;
            }
            match into.iter_mut().find(|s| s.call == call && s.outcome == outcome) {
                Some(series) => {
                    for i in 0..DURATION_BUCKETS {
                        series.counts[i] += counts[i];
                        series.sums_nanos[i] += sums_nanos[i];
                    }
                }
                None => into.push(DurationSeries { call, outcome, counts, sums_nanos }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::stripe;
    use std::time::Duration;

    #[test]
    fn bounds_in_nanoseconds_are_the_advised_bounds() {
        for (nanos, seconds) in BOUNDS_NANOS.iter().zip(DURATION_BOUNDS) {
            assert_eq!(*nanos as f64 / 1e9, seconds);
        }
    }

    #[test]
    fn calls_add_up_by_call_outcome_and_bucket() {
        let timings = Timings::default();
        let long_ago = Instant::now() - Duration::from_secs(20);
        timings.add(Call::Check, Counter::Allowed, Instant::now());
        timings.add(Call::Check, Counter::Allowed, Instant::now());
        timings.add(Call::Wait, Counter::Refused, long_ago);
        timings.add(Call::Check, Counter::Held, Instant::now());
        let mut series = Vec::new();
        timings.add_to(&mut series);
        timings.add_to(&mut series);
        assert_eq!(series.len(), 2);
        assert_eq!((series[0].call, series[0].outcome, series[0].count()), (Call::Check, "admitted", 4));
        assert_eq!((series[1].call, series[1].outcome), (Call::Wait, "refused"));
        assert_eq!(series[1].counts[DURATION_BUCKETS - 1], 2, "20 s: the unbounded bucket");
        assert!(series[1].sums_nanos[DURATION_BUCKETS - 1] >= 40_000_000_000);
    }

    #[test]
    fn fast_path_checks_in_every_thread_add_up_with_the_others() {
        let timings = std::sync::Arc::new(Timings::default());
        let threads: Vec<_> = (0..2 * STRIPES)
            .map(|_| {
                let timings = timings.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        timings.add_fast(stripe(), true, 300);
                        timings.add_fast(stripe(), false, 3_000);
                    }
                    // Past the fast buckets: the shared cells.
                    timings.add_fast(stripe(), true, 2_000_000);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        timings.add(Call::Check, Counter::Allowed, Instant::now());
        let mut series = Vec::new();
        timings.add_to(&mut series);
        let threads = 2 * STRIPES as u64;
        assert_eq!((series[0].outcome, series[0].count()), ("admitted", threads * 101 + 1));
        assert_eq!((series[1].outcome, series[1].count()), ("refused", threads * 100));
        assert_eq!(series[1].counts[2], threads * 100, "3 µs: the third bucket");
        assert_eq!(series[1].sums_nanos[2], threads * 100 * 3_000);
        assert_eq!(series[0].counts[10], threads, "2 ms: the bucket up to 2.5 ms");
    }
}
