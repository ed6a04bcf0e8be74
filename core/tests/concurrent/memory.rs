//! The concurrent limiter's leases on the memory backend under a manual clock: extend, overruns
//! (lease lost, fencing, overages), and the in-process metrics.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{runtime, Backend, ErrorKind, ManualClock, MemoryConfig};

const START: u64 = 1_800_000_000_000_000;

fn setup() -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
    (backend, clock)
}

#[test]
fn extend_keeps_a_long_holder_from_being_reclaimed() {
    let (backend, clock) = setup();
    let limiter = backend.concurrent("long", 1, Duration::from_secs(2)).unwrap();
    let lease = limiter.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_millis(1_500));
    limiter.extend_blocking(None, &lease).unwrap();
    clock.advance(Duration::from_millis(1_500)); // 3 s after the grant, 1.5 s after the extension
    assert!(!limiter.check_blocking(None, 1).unwrap().allowed, "an extended lease must not be reclaimed");
    clock.advance(Duration::from_millis(500)); // the extension has run out
    let next = limiter.check_blocking(None, 1).unwrap();
    assert!(next.allowed);
    assert_eq!(limiter.extend_blocking(None, &lease).unwrap_err().kind(), ErrorKind::LeaseLost);
    assert_eq!(limiter.metrics().reclaimed, 1);
}

#[test]
fn an_overrunning_holder_loses_its_lease_and_has_the_lower_fencing_token() {
    let (backend, clock) = setup();
    let limiter = backend.concurrent("overrun", 1, Duration::from_secs(2)).unwrap();
    let late = limiter.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_secs(3));
    let next = limiter.check_blocking(None, 1).unwrap().lease.unwrap();
    assert!(late.fencing_token < next.fencing_token, "{} !< {}", late.fencing_token, next.fencing_token);
    let err = limiter.release_blocking(None, &late).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LeaseLost);
    clock.advance(Duration::from_millis(500));
    limiter.release_blocking(None, &next).unwrap();
    let m = limiter.metrics();
    assert_eq!((m.held, m.immediate, m.waited, m.overages, m.reclaimed), (2, 2, 0, 1, 1), "{m:?}");
    assert_eq!(m.held_time, Duration::from_millis(500), "only the released lease's hold time counts");
}

#[test]
fn a_release_after_lock_timeout_that_was_not_reclaimed_counts_an_overage() {
    let (backend, clock) = setup();
    let limiter = backend.concurrent("slow", 2, Duration::from_secs(1)).unwrap();
    let lease = limiter.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_millis(1_200));
    limiter.release_blocking(None, &lease).unwrap();
    let m = limiter.metrics();
    assert_eq!((m.held, m.overages, m.reclaimed), (1, 1, 0));
    assert_eq!(m.held_time, Duration::from_millis(1_200));
}

#[test]
fn waits_are_measured_and_one_release_serves_one_waiter() {
    let (backend, clock) = setup();
    let limiter = backend.concurrent("waits", 1, Duration::from_secs(30)).unwrap();
    runtime().block_on(async {
        let first = limiter.check(None, 1).await.unwrap().lease.unwrap();
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(None, 1, Some(Duration::from_secs(10))).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        clock.advance(Duration::from_millis(250));
        limiter.release(None, &first).await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap().unwrap();
        assert!(granted.allowed);
        let m = limiter.metrics();
        assert_eq!((m.held, m.immediate, m.waited), (2, 1, 1), "{m:?}");
        assert_eq!(m.wait_time, Duration::from_millis(250));
        assert_eq!(m.held_time, Duration::from_millis(250));
    });
}

#[test]
fn metrics_are_shared_by_copies_and_leases_are_counted_only_by_concurrent_limiters() {
    let (backend, _clock) = setup();
    let limiter = backend.concurrent("copies", 3, Duration::from_secs(30)).unwrap();
    let copy = limiter.with_wait_timeout(Duration::ZERO).unwrap();
    limiter.check_blocking(None, 1).unwrap();
    copy.check_blocking(None, 1).unwrap();
    assert_eq!(limiter.metrics().held, 2);
    assert_eq!(limiter.fleet_metrics_blocking().unwrap(), limiter.metrics());
    let bucket = backend.bucket("plain", 3, Duration::from_secs(1)).unwrap();
    bucket.check_blocking(None, 1).unwrap();
    let m = bucket.metrics();
    assert_eq!((m.allowed, m.held, m.immediate), (1, 0, 0), "every limiter counts checks; only leases are concurrent");
    assert_eq!(m.latency_count(), 0, "memory checks are not timed");
}

/// A manual clock that holds each opted-in waiter thread at its fourth reading, which
/// `acquire_blocking` on a memory limiter takes right after its refused re-check and before it
/// registers for a release's wake-up: so the test decides that both releases happen while both
/// waiters stand between their check and their registration.
#[derive(Debug)]
struct GateClock {
    inner: ManualClock,
    /// (threads held at the gate, gate open)
    state: Arc<(std::sync::Mutex<(usize, bool)>, std::sync::Condvar)>,
}

thread_local! {
    /// Readings taken by this thread, when it opted in to the gate.
    static READINGS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

impl ratekeeper::Clock for GateClock {
    fn now_micros(&self) -> u64 {
        let readings = READINGS.with(|r| {
            let n = r.get().map(|n| n + 1);
            r.set(n);
            n
        });
        if readings == Some(4) {
            let (lock, cond) = &*self.state;
            let mut state = lock.lock().unwrap();
            state.0 += 1;
            cond.notify_all();
            while !state.1 {
                state = cond.wait(state).unwrap();
            }
        }
        self.inner.now_micros()
    }

    fn sleep(&self, duration: Duration) -> ratekeeper::Sleep {
        self.inner.sleep(duration)
    }

    fn is_manual(&self) -> bool {
        true
    }
}

#[test]
fn two_releases_before_two_waiters_register_wake_both() {
    use std::sync::mpsc;
    let state = Arc::new((std::sync::Mutex::new((0, false)), std::sync::Condvar::new()));
    let clock = GateClock { inner: ManualClock::new(START), state: state.clone() };
    let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock))).unwrap();
    let limiter = backend.concurrent("gate", 2, Duration::from_secs(60)).unwrap();
    let held: Vec<_> = (0..2).map(|_| limiter.check_blocking(None, 1).unwrap().lease.unwrap()).collect();
    let (done, outcomes) = mpsc::channel();
    for _ in 0..2 {
        let (limiter, done) = (limiter.clone(), done.clone());
        std::thread::spawn(move || {
            READINGS.with(|r| r.set(Some(0)));
            let _ = done.send(limiter.acquire_blocking(None, 1, Some(Duration::from_secs(10))));
        });
    }
    let (lock, cond) = &*state;
    {
        let mut s = lock.lock().unwrap();
        while s.0 < 2 {
            s = cond.wait(s).unwrap();
        }
    }
    // Both waiters were refused and have not registered yet: both slots are freed now.
    for lease in &held {
        limiter.release_blocking(None, lease).unwrap();
    }
    lock.lock().unwrap().1 = true;
    cond.notify_all();
    // The manual clock never moves: a waiter that missed its wake-up would wait forever (this
    // bound is only how long the test waits to say so).
    for n in 1..=2 {
        let outcome = outcomes
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("waiter {n} of 2 was never woken: two releases woke only {}", n - 1));
        assert!(outcome.unwrap().allowed);
    }
}

/// Found by the C fuzz driver: a limiter refusing while an overdue holder was still stored
/// (full counting live holders only, so nothing was reclaimed) computed `retry_after` from the
/// overdue holder's expiry, before now: an overflow (a panic in debug builds). It takes a
/// lower limit than the one the holders were granted under — a deploy (or, later, a live
/// override) that lowers a limit.
#[test]
fn a_refusal_next_to_an_overdue_holder_waits_for_the_earliest_live_one() {
    let (backend, clock) = setup();
    let before = backend.concurrent("lowered", 3, Duration::from_secs(1)).unwrap();
    before.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_millis(600));
    before.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_millis(100));
    before.check_blocking(None, 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_millis(500)); // the first holder is overdue, still stored
    let after = backend.concurrent("lowered", 2, Duration::from_secs(1)).unwrap();
    let refused = after.check_blocking(None, 1).unwrap();
    assert!(!refused.allowed);
    // The second holder (granted 600 ms ago, lock_timeout 1 s) frees the first slot.
    assert_eq!(refused.retry_after, Duration::from_millis(400));
    let peeked = after.peek_blocking(None).unwrap();
    assert_eq!((peeked.allowed, peeked.retry_after), (false, Duration::from_millis(400)));
}
