//! Where "now" comes from: the system clock, or a manual clock that tests move by hand.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
#[cfg(not(unix))]
use std::time::{SystemTime, UNIX_EPOCH};

/// A boxed future returned by [`Clock::sleep`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of wall-clock time in integer microseconds since the Unix epoch.
///
/// Fixed windows are aligned to the epoch, so the clock must be wall time, not a monotonic
/// counter. Microseconds keep every instant exact in a Lua number (a double) on Redis too.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
    /// A future that completes once this clock has moved forward by `duration`.
    fn sleep(&self, duration: Duration) -> Sleep;
    /// True for clocks moved by hand; remote backends then take time from the caller instead of
    /// the server.
    fn is_manual(&self) -> bool {
        false
    }
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[cfg(unix)]
    #[inline]
    fn now_micros(&self) -> u64 {
        // clock_gettime directly: SystemTime's checked conversions are measurable on the hot path
        // (README, Benchmarks: "Figures behind design choices").
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime only writes the timespec we pass, which lives on our stack.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
        ts.tv_sec.max(0) as u64 * 1_000_000 + ts.tv_nsec.max(0) as u64 / 1_000
    }

    #[cfg(not(unix))]
    fn now_micros(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Microseconds on a monotonic clock (from the first reading, plus one so that 0 means
/// "never"): for deadlines kept in this process only, which a step of the wall clock (NTP, an
/// operator's `date -s`) must neither stretch nor cut.
pub(crate) fn monotonic_micros() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64 + 1
}

/// The clock a process's own deadlines are kept on: `clock` when it is a manual one (tests move
/// it by hand), else [`monotonic_micros`].
#[derive(Debug, Clone)]
pub(crate) struct LocalClock {
    manual: Option<Arc<dyn Clock>>,
}

impl LocalClock {
    /// The local clock beside the backend's `clock`.
    pub(crate) fn beside(clock: &Arc<dyn Clock>) -> LocalClock {
        LocalClock { manual: clock.is_manual().then(|| clock.clone()) }
    }

    /// Now, in microseconds on this clock (comparable only with its own readings).
    #[inline]
    pub(crate) fn now_micros(&self) -> u64 {
        match &self.manual {
            Some(clock) => clock.now_micros(),
            None => monotonic_micros(),
        }
    }
}

/// The latest instant a [`ManualClock`] reads: 2^53 µs after the epoch (the year 2255), the
/// largest instant a Redis script holds exactly as a number. Engines add durations of up to 100
/// years to the clock's reading, which must not overflow.
pub const MAX_INSTANT_MICROS: u64 = 1 << 53;

/// A clock that only moves when told to; sleepers wake when it is advanced past their deadline.
/// Its readings stop at [`MAX_INSTANT_MICROS`].
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<tokio::sync::watch::Sender<u64>>,
}

impl ManualClock {
    /// A manual clock reading `start_micros` microseconds since the epoch (at most
    /// [`MAX_INSTANT_MICROS`]).
    pub fn new(start_micros: u64) -> Self {
        ManualClock { now: Arc::new(tokio::sync::watch::Sender::new(start_micros.min(MAX_INSTANT_MICROS))) }
    }

    /// Moves the clock forward by `duration` (truncated to whole microseconds).
    pub fn advance(&self, duration: Duration) {
        self.advance_micros(duration.as_micros() as u64);
    }

    /// Moves the clock forward by `micros` microseconds.
    pub fn advance_micros(&self, micros: u64) {
        self.now.send_modify(|now| *now = now.saturating_add(micros).min(MAX_INSTANT_MICROS));
    }

    /// Sets the clock to an absolute time (it may move backwards: tests of clock skew use that).
    pub fn set_micros(&self, micros: u64) {
        self.now.send_replace(micros.min(MAX_INSTANT_MICROS));
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("now_micros", &*self.now.borrow()).finish()
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        *self.now.borrow()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let mut receiver = self.now.subscribe();
        let deadline = self.now_micros().saturating_add(duration.as_micros() as u64);
        Box::pin(async move {
            // `wait_for` re-checks on every advance; the sender lives as long as the clock.
            let _ = receiver.wait_for(|now| *now >= deadline).await;
        })
    }

    fn is_manual(&self) -> bool {
        true
    }
}
