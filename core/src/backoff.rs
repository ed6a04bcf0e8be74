//! Rescheduling over-limit jobs with backoff, as Sidekiq Enterprise's limiter middleware does.
//!
//! A job that hits a limit is not retried at once (it would hit it again) nor failed: it is put
//! back on its queue to run later. Attempt `n` (the n-th reschedule of that job, counted apart
//! from the job's own retries) waits
//!
//! ```text
//! max(retry_after, base · n) + uniform[0, jitter)
//! ```
//!
//! which with the defaults (`base` = `jitter` = 300 s) is Sidekiq's `300·n + rand(300)` whenever
//! the limiter itself asks for less. `retry_after` (from [`crate::Error::OverLimit`]) is a floor:
//! running the job before the limiter could admit it would only reschedule it again. The jitter
//! is added after the floor so that jobs refused together do not all come back at the same
//! instant. After `max_reschedules` reschedules (attempt > `max_reschedules`),
//! [`Backoff::reschedule_in`] answers `None`: the job fails with the over-limit error, and the
//! job system's own retry policy takes over.
//!
//! Worker integrations (Celery, RQ, BullMQ) live in the bindings; the arithmetic lives here once.

use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::params::MAX_DURATION;

use crate::defaults::{DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_JITTER, DEFAULT_MAX_RESCHEDULES};

/// How long to wait before running an over-limit job again, and when to give up. See the module
/// documentation for the formula.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::Backoff;
///
/// let backoff = Backoff::new(Duration::from_secs(10), Duration::ZERO, 3).unwrap();
/// // The limiter asks for 2 s, the backoff for 2 · 10 s: the larger wins.
/// assert_eq!(backoff.reschedule_in(2, Duration::from_secs(2)).unwrap(), Some(Duration::from_secs(20)));
/// // After the third reschedule the job fails instead.
/// assert_eq!(backoff.reschedule_in(4, Duration::ZERO).unwrap(), None);
/// ```
pub struct Backoff {
    base: Duration,
    jitter: Duration,
    max_reschedules: u32,
    /// xorshift64* state: jitter needs spread, not cryptographic strength, and a seed makes it
    /// reproducible in tests without a dependency.
    rng: Mutex<u64>,
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base)
            .field("jitter", &self.jitter)
            .field("max_reschedules", &self.max_reschedules)
            .finish_non_exhaustive()
    }
}

impl Default for Backoff {
    /// Sidekiq's policy: 300·n + rand(300) seconds, 20 reschedules.
    fn default() -> Self {
        Backoff {
            base: DEFAULT_BACKOFF_BASE,
            jitter: DEFAULT_BACKOFF_JITTER,
            max_reschedules: DEFAULT_MAX_RESCHEDULES,
            rng: Mutex::new(random_seed()),
        }
    }
}

fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    // A per-process random hasher over a per-call counter: two backoffs (or two forked workers)
    // do not draw the same jitter sequence.
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQUENCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    foldhash::fast::RandomState::default().hash_one((n, std::process::id())) | 1
}

fn check_duration(parameter: &'static str, value: Duration) -> Result<Duration> {
    if value > MAX_DURATION {
        return Err(Error::invalid(parameter, format!("must be at most 100 years, got {value:?}")));
    }
    Ok(value)
}

impl Backoff {
    /// A backoff of `base · n` (plus up to `jitter`) for the n-th reschedule, giving up after
    /// `max_reschedules`. `base` and `jitter` may be zero (no step, no spread); each is at most
    /// 100 years, else [`Error::InvalidArgument`] naming it.
    pub fn new(base: Duration, jitter: Duration, max_reschedules: u32) -> Result<Self> {
        Ok(Backoff {
            base: check_duration("base", base)?,
            jitter: check_duration("jitter", jitter)?,
            max_reschedules,
            rng: Mutex::new(random_seed()),
        })
    }

    /// The same backoff with its jitter drawn from a generator seeded with `seed`, so a test
    /// sees the same sequence on every run.
    pub fn with_seed(self, seed: u64) -> Self {
        // xorshift never leaves the all-zero state: a zero seed is mapped to a fixed odd one.
        let state = if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed };
        Backoff { rng: Mutex::new(state), ..self }
    }

    /// The step per reschedule.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The largest random spread added to a delay (the spread is in `[0, jitter)`).
    pub fn jitter(&self) -> Duration {
        self.jitter
    }

    /// How many times a job is rescheduled before it fails with the over-limit error.
    pub fn max_reschedules(&self) -> u32 {
        self.max_reschedules
    }

    /// The backoff of reschedule `attempt` (1-based) before the floor and the jitter:
    /// `base · attempt`, at most 100 years. Attempt 0 is an [`Error::InvalidArgument`].
    pub fn delay(&self, attempt: u32) -> Result<Duration> {
        check_attempt(attempt)?;
        Ok(self.base.checked_mul(attempt).map_or(MAX_DURATION, |d| d.min(MAX_DURATION)))
    }

    /// How long to wait before running the job again for its reschedule `attempt` (1 for the
    /// first), when the limiter asked for `retry_after`: `max(retry_after, base · attempt)`
    /// plus a random spread in `[0, jitter)`. `None` when `attempt > max_reschedules`: the job
    /// should fail with the over-limit error instead.
    pub fn reschedule_in(&self, attempt: u32, retry_after: Duration) -> Result<Option<Duration>> {
        let delay = self.delay(attempt)?;
        self.reschedule_in_with(attempt, retry_after, delay)
    }

    /// [`Self::reschedule_in`] with the backoff of this attempt computed by the caller (a user
    /// function in Python or Node replacing `base · attempt`); the floor, the jitter and the
    /// `max_reschedules` cut-off apply as usual. `delay` is at most 100 years.
    pub fn reschedule_in_with(&self, attempt: u32, retry_after: Duration, delay: Duration) -> Result<Option<Duration>> {
        check_attempt(attempt)?;
        let retry_after = check_duration("retry_after", retry_after)?;
        let delay = check_duration("delay", delay)?;
        if attempt > self.max_reschedules {
            return Ok(None);
        }
        let spread = self.spread();
        Ok(Some((retry_after.max(delay) + spread).min(MAX_DURATION)))
    }

    /// A uniform draw in `[0, jitter)`, to the microsecond.
    fn spread(&self) -> Duration {
        let range = self.jitter.as_micros() as u64;
        if range == 0 {
            return Duration::ZERO;
        }
        let draw = {
            let mut state = self.rng.lock();
            // xorshift64*
            *state ^= *state >> 12;
            *state ^= *state << 25;
            *state ^= *state >> 27;
            state.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        // The high bits are the good ones; the modulo bias over a 64-bit draw is below 2^-20
        // for any jitter up to 100 years (~2^42 µs).
        Duration::from_micros((draw >> 1) % range)
    }
}

fn check_attempt(attempt: u32) -> Result<()> {
    if attempt == 0 {
        return Err(Error::invalid("attempt", "must be at least 1 (the first reschedule is attempt 1), got 0"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn default_is_sidekiq_linear_with_jitter_bounds() {
        let b = Backoff::default().with_seed(42);
        assert_eq!((b.base(), b.jitter(), b.max_reschedules()), (S(300), S(300), 20));
        for attempt in 1..=20 {
            for _ in 0..200 {
                let d = b.reschedule_in(attempt, Duration::ZERO).unwrap().unwrap();
                let low = S(300 * u64::from(attempt));
                assert!(d >= low && d < low + S(300), "attempt {attempt}: {d:?}");
            }
        }
        assert_eq!(b.reschedule_in(21, Duration::ZERO).unwrap(), None);
        assert_eq!(b.reschedule_in(u32::MAX, S(1)).unwrap(), None);
    }

    #[test]
    fn jitter_spreads_over_its_range() {
        // Not one constant: a draw lands in each tenth of the range (2000 draws: a miss has
        // probability 10 · 0.9^2000, effectively zero, and the seed fixes the sequence anyway).
        let b = Backoff::new(Duration::ZERO, S(10), 5).unwrap().with_seed(7);
        let mut seen = [false; 10];
        for _ in 0..2000 {
            let d = b.reschedule_in(1, Duration::ZERO).unwrap().unwrap();
            assert!(d < S(10));
            seen[(d.as_secs_f64()) as usize] = true;
        }
        assert_eq!(seen, [true; 10]);
    }

    #[test]
    fn seeded_sequences_repeat() {
        let draws = |seed| {
            let b = Backoff::default().with_seed(seed);
            (1..=5).map(|n| b.reschedule_in(n, Duration::ZERO).unwrap().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
        assert_eq!(draws(0), draws(0));
    }

    #[test]
    fn retry_after_is_a_floor_under_the_jitter() {
        let b = Backoff::new(S(1), S(2), 3).unwrap().with_seed(3);
        for _ in 0..100 {
            let d = b.reschedule_in(2, S(30)).unwrap().unwrap();
            assert!(d >= S(30) && d < S(32), "{d:?}");
            // The backoff wins when larger than retry_after.
            let d = b.reschedule_in(3, Duration::from_millis(500)).unwrap().unwrap();
            assert!(d >= S(3) && d < S(5), "{d:?}");
        }
        let exact = Backoff::new(S(1), Duration::ZERO, 3).unwrap();
        assert_eq!(exact.reschedule_in(1, Duration::from_millis(1500)).unwrap(), Some(Duration::from_millis(1500)));
        assert_eq!(exact.reschedule_in(3, Duration::ZERO).unwrap(), Some(S(3)));
        assert_eq!(exact.reschedule_in(4, Duration::ZERO).unwrap(), None);
    }

    #[test]
    fn caller_delay_replaces_the_formula() {
        let b = Backoff::new(S(300), Duration::ZERO, 2).unwrap();
        assert_eq!(b.reschedule_in_with(1, S(1), S(7)).unwrap(), Some(S(7)));
        assert_eq!(b.reschedule_in_with(2, S(9), S(7)).unwrap(), Some(S(9)));
        assert_eq!(b.reschedule_in_with(3, S(9), S(7)).unwrap(), None);
    }

    #[test]
    fn zero_reschedules_fails_at_once() {
        let b = Backoff::new(S(1), S(1), 0).unwrap();
        assert_eq!(b.reschedule_in(1, Duration::ZERO).unwrap(), None);
    }

    #[test]
    fn huge_values_saturate_instead_of_overflowing() {
        let b = Backoff::new(MAX_DURATION, MAX_DURATION, u32::MAX).unwrap();
        assert_eq!(b.delay(u32::MAX).unwrap(), MAX_DURATION);
        assert_eq!(b.reschedule_in(u32::MAX, MAX_DURATION).unwrap(), Some(MAX_DURATION));
    }

    #[test]
    fn bad_parameters_are_named() {
        let too_long = MAX_DURATION + S(1);
        let name = |e: Error| e.parameter().map(str::to_owned);
        assert_eq!(name(Backoff::new(too_long, S(1), 1).unwrap_err()).as_deref(), Some("base"));
        assert_eq!(name(Backoff::new(S(1), too_long, 1).unwrap_err()).as_deref(), Some("jitter"));
        let b = Backoff::default();
        assert_eq!(name(b.reschedule_in(0, S(1)).unwrap_err()).as_deref(), Some("attempt"));
        assert_eq!(name(b.reschedule_in(1, too_long).unwrap_err()).as_deref(), Some("retry_after"));
        assert_eq!(name(b.reschedule_in_with(1, S(1), too_long).unwrap_err()).as_deref(), Some("delay"));
        assert_eq!(name(b.delay(0).unwrap_err()).as_deref(), Some("attempt"));
    }
}
