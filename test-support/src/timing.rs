//! Waiting in tests: polling with a give-up, the machine's scheduling noise, and watchdogs for
//! ordering assertions.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a polling wait (for a client to block, for a server to come back) runs before it
/// fails the test rather than hang it. A give-up, not a performance bound: generous, so that a
/// loaded machine never trips it; what the tests assert are the orderings around the wait.
pub const GIVE_UP: Duration = Duration::from_secs(30);

/// Polls `ready` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Measures how late this machine wakes a sleeping OS thread (CPU starvation from other
/// processes), so that latency bounds can tell the library's delays from the machine's. A thread
/// sleeps 2 ms at a time and records how late each wake-up was, until dropped.
pub struct SchedulingNoise {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(Instant, Duration)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SchedulingNoise {
    /// Starts the sampling thread.
    pub fn start() -> SchedulingNoise {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let target = Instant::now() + Duration::from_millis(2);
                std::thread::sleep(Duration::from_millis(2));
                let woke = Instant::now();
                s.lock().unwrap().push((woke, woke.saturating_duration_since(target)));
            }
        });
        SchedulingNoise { samples, stop, thread: Some(thread) }
    }

    /// The worst wake-up delay observed between `from` and `to` (plus one sample after `to`,
    /// which covers a delay that was still going on at `to`).
    pub fn worst_between(&self, from: Instant, to: Instant) -> Duration {
        let samples = self.samples.lock().unwrap();
        let mut worst = Duration::ZERO;
        for &(woke, late) in samples.iter() {
            if woke >= from {
                worst = worst.max(late);
                if woke > to {
                    break;
                }
            }
        }
        worst
    }
}

impl Drop for SchedulingNoise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A deferred event for ordering assertions: `action` runs `after` from now (unless the
/// watchdog is stopped first), and the instant it ran is kept. A test asserts that something
/// happened *before* it, e.g. "every call against a SIGSTOPped server ended before the watchdog
/// resumed the server": had a call waited on the server instead of its deadline, it would have
/// ended only once the server answered, after the resume. `after` is not a bound on anything
/// measured; it only has to be long enough for the ordering to mean something.
pub struct Watchdog {
    fired: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    /// Runs `action` after `after`, unless stopped first.
    pub fn start(after: Duration, action: impl FnOnce() + Send + 'static) -> Watchdog {
        let fired = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let record = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(after) {
                action();
                *record.lock().unwrap() = Some(Instant::now());
            }
        });
        Watchdog { fired, stop: Some(stop), thread: Some(thread) }
    }

    /// Whether the action had run by `at`.
    pub fn fired_by(&self, at: Instant) -> bool {
        self.fired.lock().unwrap().is_some_and(|fired| fired <= at)
    }

    /// Cancels the action if it has not run yet; returns whether it had.
    pub fn stop(mut self) -> bool {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let fired = self.fired.lock().unwrap().is_some();
        fired
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
