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
//!
//! The same counter reading gives a monotonic clock too ([`monotonic_micros`], for deadlines a
//! process keeps to itself: a lease's lapse), anchored to the operating system's monotonic clock
//! at the same instants, and never moved back: a reading is never earlier than one before it on
//! the same thread, and falls behind the operating system's by at most the counter's drift over
//! a second. A counter that runs fast is never pulled back, so its readings may run ahead of the
//! operating system's by its drift since the first anchoring: a deadline on this clock then comes
//! early, never late (a lease lapses sooner, which spends less). A leased check reads both clocks (its deadlines and its decision's instant), from
//! one reading of the counter ([`now_both`]).

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

/// Microseconds on a monotonic clock, comparable with [`crate::clock::monotonic_micros`]'s
/// readings (which serve until the counter is calibrated).
#[inline(always)]
pub(crate) fn monotonic_micros() -> u64 {
    now_both().monotonic
}

/// [`monotonic_micros`] and [`now_micros`] at once, from one reading of the counter.
#[inline(always)]
pub(crate) fn now_both() -> Readings {
    match COUNTER.get() {
        Some(counter) => counter.now(),
        None => Readings { monotonic: crate::clock::monotonic_micros(), wall: SystemClock.now_micros() },
    }
}

/// The two clocks' readings at one instant (µs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Readings {
    /// On the monotonic clock ([`monotonic_micros`]).
    pub(crate) monotonic: u64,
    /// Since the Unix epoch ([`now_micros`]).
    pub(crate) wall: u64,
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
    /// The monotonic clock minus the counter's microseconds since `start`: the largest of its
    /// values at the anchorings so far (so a reading never goes back).
    monotonic_offset: AtomicU64,
    /// The counter's microseconds since `start` after which the next reading re-anchors.
    next_anchor: AtomicU64,
    /// quanta reads the time-stamp counter, so a reading may execute the instruction itself,
    /// inlined in the check (quanta's reading is a call the compiler does not inline).
    reads_tsc: bool,
}

impl CounterClock {
    fn new() -> CounterClock {
        let clock = quanta::Clock::new();
        // The monotonic clock's origin comes first, so that its readings from here on are at
        // least the counter's microseconds since `start`.
        crate::clock::monotonic_micros();
        let start = clock.raw();
        let micros_per_tick = micros_per_tick(clock.delta_as_nanos(0, 1 << SCALE_TICKS_LOG2));
        let counter = CounterClock {
            reads_tsc: reads_tsc(&clock),
            clock,
            start,
            micros_per_tick,
            offset: AtomicU64::new(0),
            monotonic_offset: AtomicU64::new(0),
            next_anchor: AtomicU64::new(0),
        };
        counter.anchor(0);
        counter
    }

    /// The counter's microseconds since `start`.
    #[inline(always)]
    fn elapsed(&self) -> u64 {
        let ticks = self.raw().saturating_sub(self.start);
        ((u128::from(ticks) * u128::from(self.micros_per_tick)) >> 64) as u64
    }

    /// The wall clock alone (the memory backend's reading: no load of the monotonic offset).
    #[inline(always)]
    fn now_micros(&self) -> u64 {
        let elapsed = self.elapsed();
        if elapsed >= self.next_anchor.load(Ordering::Relaxed) {
            return self.anchor(elapsed).wall;
        }
        elapsed.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Both clocks.
    #[inline(always)]
    fn now(&self) -> Readings {
        let elapsed = self.elapsed();
        if elapsed >= self.next_anchor.load(Ordering::Relaxed) {
            return self.anchor(elapsed);
        }
        Readings {
            monotonic: elapsed.wrapping_add(self.monotonic_offset.load(Ordering::Relaxed)),
            wall: elapsed.wrapping_add(self.offset.load(Ordering::Relaxed)),
        }
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

    /// Reads the wall clock and the monotonic clock and makes them the references of the
    /// readings to come (the monotonic one only forward). Two threads that anchor at once each
    /// store a valid offset: each offset is one word.
    #[cold]
    #[inline(never)]
    fn anchor(&self, elapsed: u64) -> Readings {
        let wall = SystemClock.now_micros();
        let monotonic = crate::clock::monotonic_micros().saturating_sub(elapsed);
        self.offset.store(wall.wrapping_sub(elapsed), Ordering::Relaxed);
        let monotonic = self.monotonic_offset.fetch_max(monotonic, Ordering::Relaxed).max(monotonic);
        self.next_anchor.store(elapsed + ANCHOR_EVERY_US, Ordering::Relaxed);
        Readings { monotonic: elapsed + monotonic, wall }
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

    /// The monotonic readings stay on the operating system's monotonic clock (within a
    /// millisecond, as the wall readings above) and never go back on a thread, over several
    /// anchorings; the two readings of one `now` are the module's two clocks.
    #[test]
    fn monotonic_readings_follow_the_monotonic_clock_and_never_go_back() {
        let counter = COUNTER.get_or_init(CounterClock::new);
        let started = std::time::Instant::now();
        let (mut readings, mut last) = (0u64, 0u64);
        while started.elapsed() < std::time::Duration::from_millis(2_500) {
            let (before, wall_before) = (crate::clock::monotonic_micros(), SystemClock.now_micros());
            let reading = counter.now();
            let (after, wall_after) = (crate::clock::monotonic_micros(), SystemClock.now_micros());
            assert!(
                reading.monotonic + 1_000 >= before && reading.monotonic <= after + 1_000,
                "reading {} outside [{before}, {after}] by more than 1 ms",
                reading.monotonic
            );
            assert!(
                reading.wall + 1_000 >= wall_before && reading.wall <= wall_after + 1_000,
                "wall reading {} outside [{wall_before}, {wall_after}] by more than 1 ms",
                reading.wall
            );
            assert!(reading.monotonic >= last, "went back from {last} to {}", reading.monotonic);
            last = reading.monotonic;
            readings += 1;
            if readings % 1_000 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        assert!(readings > 1_000, "only {readings} readings");
        let (before, reading) = (crate::clock::monotonic_micros(), monotonic_micros());
        assert!(reading + 1_000 >= before, "{reading} before {before}");
    }

    /// An anchoring that finds the counter's monotonic readings behind the monotonic clock moves
    /// them forward to it; one that finds them ahead keeps them where they are, not moved back.
    /// (A counter of its own, its offset set by hand.)
    #[test]
    fn an_anchoring_moves_the_monotonic_readings_only_forward() {
        // The monotonic clock's origin at least 20 ms before the counter's start.
        crate::clock::monotonic_micros();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let counter = CounterClock::new();
        // As if the counter had counted 20 ms less than the monotonic clock since it started.
        counter.monotonic_offset.store(0, Ordering::Relaxed);
        let behind = counter.now().monotonic;
        let monotonic = crate::clock::monotonic_micros();
        assert!(behind + 10_000 <= monotonic, "{behind} not behind {monotonic}");
        let caught_up = counter.anchor(counter.elapsed()).monotonic;
        assert!(caught_up >= monotonic, "{caught_up} not caught up with {monotonic}");
        assert!(counter.now().monotonic >= caught_up);
        // As if it had counted 5 s more: the offset stays.
        counter.monotonic_offset.fetch_add(5_000_000, Ordering::Relaxed);
        let ahead = counter.now().monotonic;
        let kept = counter.anchor(counter.elapsed()).monotonic;
        assert!(kept >= ahead && kept < ahead + 1_000_000, "{ahead} then {kept}: moved");
        assert!(counter.now().monotonic >= kept);
    }
}
