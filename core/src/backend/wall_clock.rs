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
    /// Microseconds per counter tick, times 2^64 (from quanta's calibration): a reading is one
    /// multiplication, where quanta's nanoseconds and a division by 1,000 were two and a
    /// variable shift.
    micros_per_tick: u64,
    /// The wall clock minus the counter's microseconds since `start`, at the last anchoring.
    offset: AtomicU64,
    /// The counter's microseconds since `start` after which the next reading re-anchors.
    next_anchor: AtomicU64,
    /// quanta reads the time-stamp counter, so a reading may execute the instruction itself,
    /// inlined in the check (quanta's reading is a call the compiler does not inline).
    reads_tsc: bool,
}

impl CounterClock {
    fn new() -> CounterClock {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        let micros_per_tick = micros_per_tick(clock.delta_as_nanos(0, 1 << SCALE_TICKS_LOG2));
        let counter = CounterClock {
            reads_tsc: reads_tsc(&clock),
            clock,
            start,
            micros_per_tick,
            offset: AtomicU64::new(0),
            next_anchor: AtomicU64::new(0),
        };
        counter.anchor(0);
        counter
    }

    #[inline(always)]
    fn now_micros(&self) -> u64 {
        let ticks = self.raw().saturating_sub(self.start);
        let elapsed = ((u128::from(ticks) * u128::from(self.micros_per_tick)) >> 64) as u64;
        if elapsed >= self.next_anchor.load(Ordering::Relaxed) {
            return self.anchor(elapsed);
        }
        elapsed.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// The counter's reading, as quanta's `raw`.
    #[inline(always)]
    fn raw(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.reads_tsc {
            // SAFETY: `rdtsc` exists on every x86-64 CPU and reads a register; quanta's reading
            // is this same instruction (checked by `reads_tsc`).
            return unsafe { std::arch::x86_64::_rdtsc() };
        }
        self.clock.raw()
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

/// Whether `clock` reads the time-stamp counter: each of several of its readings falls between
/// two readings of the counter taken around it. (Where quanta reads the operating system's
/// monotonic clock instead, its nanoseconds since boot are nowhere near the counter's ticks.)
pub(crate) fn reads_tsc(clock: &quanta::Clock) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        (0..3).all(|_| {
            // SAFETY: as in `CounterClock::raw`.
            let before = unsafe { std::arch::x86_64::_rdtsc() };
            let reading = clock.raw();
            let after = unsafe { std::arch::x86_64::_rdtsc() };
            before <= reading && reading <= after
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = clock;
        false
    }
}

/// The counter ticks whose duration quanta is asked for, as a power of two: enough that its
/// answer, in whole nanoseconds, carries the scale to far better than a microsecond a second.
const SCALE_TICKS_LOG2: u32 = 40;

/// Microseconds per tick times 2^64, from the nanoseconds that 2^[`SCALE_TICKS_LOG2`] ticks
/// last. Saturates for a counter slower than a tick a microsecond (none is).
fn micros_per_tick(nanos_per_scale_ticks: u64) -> u64 {
    let scaled = (u128::from(nanos_per_scale_ticks) << (64 - SCALE_TICKS_LOG2)) / 1_000;
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scale turns ticks into microseconds as quanta's nanoseconds divided by 1,000 do, to
    /// within a microsecond over an hour of ticks, for counters from 1 GHz to 5 GHz and for
    /// quanta's fallback (nanosecond ticks).
    #[test]
    fn the_scale_matches_quantas_nanoseconds() {
        for ticks_per_ns in [1.0f64, 2.1, 2.9, 3.0, 3.7, 5.0] {
            let nanos_per_scale_ticks = ((1u64 << SCALE_TICKS_LOG2) as f64 / ticks_per_ns) as u64;
            let scale = micros_per_tick(nanos_per_scale_ticks);
            let hour_of_ticks = (3.6e12 * ticks_per_ns) as u64;
            for ticks in [0, 1, 999, 1_000_000, hour_of_ticks / 7, hour_of_ticks] {
                let micros = ((u128::from(ticks) * u128::from(scale)) >> 64) as u64;
                let expected = (ticks as f64 / ticks_per_ns / 1_000.0) as u64;
                assert!(
                    micros.abs_diff(expected) <= 1,
                    "{ticks_per_ns} ticks/ns, {ticks} ticks: {micros} µs, not {expected}"
                );
            }
        }
    }

    /// A clock that is not the time-stamp counter is read through quanta.
    #[test]
    fn a_clock_other_than_the_counter_is_not_taken_for_it() {
        let (mock, handle) = quanta::Clock::mock();
        handle.increment(12_345);
        assert!(!reads_tsc(&mock));
    }

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
