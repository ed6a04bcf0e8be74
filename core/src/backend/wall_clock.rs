//! The memory backend's reading of the system clock: wall-clock microseconds taken from the
//! CPU's time-stamp counter (quanta's calibrated clock) and re-anchored to the operating
//! system's wall clock once a second.
//!
//! A `clock_gettime` per check was a third of an in-process check (see the benchmarks page);
//! the counter costs a fraction of it. Re-anchoring keeps the readings on the wall clock: a
//! step of the system clock (NTP, an operator's `date -s`) shows within a second, as it would
//! in a reading of the system clock itself, and the counter's calibration error between two
//! anchorings stays far below a microsecond's worth of drift per call.
//!
//! quanta calibrates its counter once per process, which takes up to a fifth of a second: it
//! runs on a thread of its own when the first memory backend is made, and readings come from
//! the system clock until it is done (or forever, where no usable counter exists: quanta then
//! reads the operating system's monotonic clock, which costs what the system clock does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

use crate::clock::{Clock, SystemClock};

/// How long readings run on the counter alone before the next anchoring, in microseconds.
const ANCHOR_EVERY_US: u64 = 1_000_000;

static COUNTER: OnceLock<CounterClock> = OnceLock::new();

/// Starts the counter's calibration in the background, once per process.
pub(crate) fn prepare() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        // Without a thread, readings simply stay on the system clock.
        let _ = std::thread::Builder::new().name("ratekeeper-clock".into()).spawn(|| {
            COUNTER.get_or_init(CounterClock::new);
        });
    });
}

/// Microseconds since the Unix epoch, as [`SystemClock`] reads them.
#[inline(always)]
pub(crate) fn now_micros() -> u64 {
    match COUNTER.get() {
        Some(counter) => counter.now_micros(),
        None => SystemClock.now_micros(),
    }
}

struct CounterClock {
    clock: quanta::Clock,
    /// The counter's raw reading when this clock was made.
    start: u64,
    /// The wall clock minus the counter's microseconds since `start`, at the last anchoring.
    offset: AtomicU64,
    /// The counter's microseconds since `start` after which the next reading re-anchors.
    next_anchor: AtomicU64,
}

impl CounterClock {
    fn new() -> CounterClock {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        let counter = CounterClock { clock, start, offset: AtomicU64::new(0), next_anchor: AtomicU64::new(0) };
        counter.anchor(0);
        counter
    }

    #[inline(always)]
    fn now_micros(&self) -> u64 {
        let elapsed = self.clock.delta_as_nanos(self.start, self.clock.raw()) / 1_000;
        if elapsed >= self.next_anchor.load(Ordering::Relaxed) {
            return self.anchor(elapsed);
        }
        elapsed.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Reads the wall clock and makes it the reference of the readings to come. Two threads
    /// that anchor at once each store a valid offset: the offset is one word.
    #[cold]
    #[inline(never)]
    fn anchor(&self, elapsed: u64) -> u64 {
        let wall = SystemClock.now_micros();
        self.offset.store(wall.wrapping_sub(elapsed), Ordering::Relaxed);
        self.next_anchor.store(elapsed + ANCHOR_EVERY_US, Ordering::Relaxed);
        wall
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once calibrated, readings stay on the system clock's: each falls between a system reading
    /// taken before and one taken after it (a millisecond of slack for the calibration's error
    /// and for a thread descheduled between the reads), over several anchorings.
    #[test]
    fn readings_follow_the_system_clock() {
        let counter = COUNTER.get_or_init(CounterClock::new);
        let started = std::time::Instant::now();
        let mut readings = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(2_500) {
            let before = SystemClock.now_micros();
            let reading = counter.now_micros();
            let after = SystemClock.now_micros();
            assert!(
                reading + 1_000 >= before && reading <= after + 1_000,
                "reading {reading} outside [{before}, {after}] by more than 1 ms"
            );
            readings += 1;
            if readings % 1_000 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert!(readings > 1_000, "only {readings} readings");
        // The module-level reading goes through the same clock.
        let before = SystemClock.now_micros();
        let reading = now_micros();
        assert!(reading + 1_000 >= before, "{reading} before {before}");
    }
}
