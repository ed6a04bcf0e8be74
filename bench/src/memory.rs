//! `bench-memory`: throughput of the memory backend's `check` against governor's keyed limiter,
//! side by side in one run.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-memory            # full run (~25 s)
//! cargo run --release -p ratekeeper-bench --bin bench-memory -- --quick # short run (~4 s)
//! ```
//!
//! `--round-robin` walks the 100k keys in order instead of in a fixed pseudo-random order.
//!
//! `--one-key` runs only the one-key scenario and writes no results: for paired runs of two
//! builds, one after the other.
//!
//! `--observed` turns the ratekeeper backend's timing on (`Backend::start_observing`, what an
//! OpenTelemetry instrumentation does): with `--one-key`, paired against a run without it, it
//! shows what timing each check costs. It writes no results.
//!
//! `--full-backend` runs only the full-backend scenario instead: a default memory backend
//! (max_keys 1,000,000) filled with live keys (a token bucket refilling one token per hour, so
//! nothing expires during the run), then 10,000 new keys, each refused because the backend is
//! full; it prints the refusals per second (ratekeeper alone: governor has no bound to hit).
//!
//! What is compared (the same work on both sides):
//! - ratekeeper: `Backend::memory()` (default config: 64 shards, max_keys 1,000,000, system
//!   clock), `backend.token_bucket("bench", RATE, BURST)`, `limiter.check_blocking(Some(key), 1)`:
//!   the public entry point, key and cost validation included, returning a full `Decision`.
//! - governor 0.10: `RateLimiter::keyed(Quota::per_second(RATE).allow_burst(BURST))`, i.e.
//!   `DefaultKeyedRateLimiter<String>` (its default store: a `DashMap` with std's `RandomState`,
//!   its default `QuantaClock`), `limiter.check_key(&key)`. `String` keys are governor's
//!   idiomatic owned key type; `check_key` borrows a pre-built `String`, so it never allocates
//!   on the hot path (ratekeeper gets the same pre-built strings as `&str`).
//!
//! Limit shape: one GCRA, refilling `RATE` = 1,000,000 per second (ratekeeper's finest rate), with
//! a burst of `BURST` = 1,000,000,000 on both sides. The large burst keeps nearly every call
//! admitted even on one key checked ~30 million times a second, so both libraries measure their
//! admit path (with a burst of 1,000,000 the one-key case would be rejecting ~97% of calls after a
//! fraction of a second). The admitted share of each scenario is printed to show it.
//!
//! Method: keys are built before timing; the 100k-key scenarios walk one fixed pseudo-random
//! sequence of key indices (the same for both libraries; `--round-robin`: in order) and every
//! key is checked once before timing (so inserts are not measured). Each scenario warms up, then runs ROUNDS rounds of a
//! fixed duration per library, interleaving the libraries (ratekeeper, governor, ratekeeper, ...)
//! so that machine noise hits both alike. The table reports the median round; `best` in the
//! details line is the fastest round. Results are passed through `std::hint::black_box`.
//! The two-thread row runs two threads on one shared limiter (each library's limiter by shared
//! reference, from scoped threads), each walking the key sequence from a different offset; it is
//! informational (2 cores: it also measures the machine's contention).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratekeeper::{Backend, Limiter};
use ratekeeper_bench::report::{Report, Row};

const RATE: u32 = 1_000_000;
const BURST: u32 = 1_000_000_000;
const KEYS: usize = 100_000;
/// Length of the pseudo-random key sequence (a power of two, so the walk is a mask).
const SEQUENCE: usize = 1 << 20;
/// Calls between two reads of the timer.
const BATCH: usize = 1 << 14;

struct Settings {
    rounds: usize,
    round: Duration,
    warmup: Duration,
}

/// Anything that can run one check and say whether it was admitted. Keys are `&String` because
/// that is what governor's `check_key` takes for `String` keys; ratekeeper gets `&str`.
#[allow(clippy::ptr_arg)]
trait Checker: Sync {
    fn check(&self, key: &String) -> bool;
}

struct Ratekeeper(Limiter);

impl Checker for Ratekeeper {
    #[inline]
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool {
        match self.0.check_blocking(Some(key.as_str()), 1) {
            Ok(decision) => decision.allowed,
            Err(e) => panic!("ratekeeper check failed: {e}"),
        }
    }
}

struct Governor(DefaultKeyedRateLimiter<String>);

impl Checker for Governor {
    #[inline]
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool {
        self.0.check_key(key).is_ok()
    }
}

/// The keys a scenario walks: `sequence[i & mask]` indexes `keys`.
struct Workload {
    keys: Vec<String>,
    sequence: Vec<u32>,
}

impl Workload {
    fn one_key() -> Self {
        Workload { keys: vec!["user-42".to_string()], sequence: vec![0] }
    }

    fn many_keys(n: usize, round_robin: bool) -> Self {
        let keys = (0..n).map(|i| format!("user-{i:08}")).collect();
        // xorshift64*, fixed seed: the same sequence every run and for both libraries.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let sequence = (0..SEQUENCE)
            .map(|i| {
                if round_robin {
                    return (i % n) as u32;
                }
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32 % n as u32
            })
            .collect();
        Workload { keys, sequence }
    }
}

/// Runs checks for at least `duration`, starting at `offset` in the sequence; returns
/// (calls, admitted, elapsed).
fn run<C: Checker>(checker: &C, work: &Workload, offset: usize, duration: Duration) -> (u64, u64, Duration) {
    let mask = work.sequence.len() - 1;
    let keys = &work.keys[..];
    let sequence = &work.sequence[..];
    let mut position = offset;
    let mut calls = 0u64;
    let mut admitted = 0u64;
    let start = Instant::now();
    loop {
        for _ in 0..BATCH {
            let key = &keys[sequence[position & mask] as usize];
            position = position.wrapping_add(1);
            admitted += black_box(checker.check(black_box(key))) as u64;
        }
        calls += BATCH as u64;
        let elapsed = start.elapsed();
        if elapsed >= duration {
            return (calls, admitted, elapsed);
        }
    }
}

/// One measured round on `threads` threads sharing `checker`: (calls per second, admitted, calls).
fn round<C: Checker>(checker: &C, work: &Workload, threads: usize, duration: Duration) -> (f64, u64, u64) {
    if threads == 1 {
        let (calls, admitted, elapsed) = run(checker, work, 0, duration);
        return (calls as f64 / elapsed.as_secs_f64(), admitted, calls);
    }
    let barrier = Barrier::new(threads);
    let results: Vec<(u64, u64, Duration)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    run(checker, work, t * (SEQUENCE / threads), duration)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    });
    let calls: u64 = results.iter().map(|r| r.0).sum();
    let admitted: u64 = results.iter().map(|r| r.1).sum();
    // Each thread's rate over its own timed span, summed: threads start together at the barrier.
    let rate = results.iter().map(|r| r.0 as f64 / r.2.as_secs_f64()).sum();
    (rate, admitted, calls)
}

struct Measured {
    /// Every round's rate, in the order run.
    rounds: Vec<f64>,
    median: f64,
    best: f64,
    admitted: f64,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Measures both libraries on one workload, rounds interleaved.
fn scenario(
    rk: &Ratekeeper,
    gov: &Governor,
    work: &Workload,
    threads: usize,
    settings: &Settings,
) -> (Measured, Measured) {
    // Touch every key once (inserts are not what is measured), then warm up.
    for key in &work.keys {
        black_box(rk.check(key));
        black_box(gov.check(key));
    }
    round(rk, work, threads, settings.warmup);
    round(gov, work, threads, settings.warmup);
    let mut rates = [Vec::new(), Vec::new()];
    let mut totals = [(0u64, 0u64); 2];
    for _ in 0..settings.rounds {
        for (i, (rate, admitted, calls)) in
            [round(rk, work, threads, settings.round), round(gov, work, threads, settings.round)]
                .into_iter()
                .enumerate()
        {
            rates[i].push(rate);
            totals[i].0 += admitted;
            totals[i].1 += calls;
        }
    }
    let [mut a, mut b] = rates;
    let measure = |rates: &mut Vec<f64>, (admitted, calls): (u64, u64)| Measured {
        rounds: rates.clone(),
        best: rates.iter().copied().fold(0.0, f64::max),
        median: median(rates),
        admitted: admitted as f64 / calls as f64,
    };
    (measure(&mut a, totals[0]), measure(&mut b, totals[1]))
}

fn millions(rate: f64) -> String {
    format!("{:.2}M", rate / 1e6)
}

/// Keys a full backend is asked to take in the `--full-backend` scenario.
const NEW_KEYS: usize = 10_000;

/// `--full-backend`: new keys against a memory backend full of live keys.
fn full_backend() {
    let backend = Backend::memory();
    let limiter = backend.token_bucket("full", 1.0 / 3600.0, 10).expect("valid token bucket");
    let started = Instant::now();
    let mut held = 0;
    loop {
        match limiter.check_blocking(Some(&format!("live-{held}")), 1) {
            Ok(_) => held += 1,
            Err(e) if e.kind() == ratekeeper::ErrorKind::BackendUnavailable => break,
            Err(e) => panic!("filling failed: {e}"),
        }
    }
    eprintln!("bench-memory: filled with {held} live keys in {:.2}s", started.elapsed().as_secs_f64());
    let keys: Vec<String> = (0..NEW_KEYS).map(|i| format!("new-{i}")).collect();
    let started = Instant::now();
    let mut refused = 0;
    for key in &keys {
        if let Err(e) = black_box(limiter.check_blocking(Some(key), 1)) {
            assert_eq!(e.kind(), ratekeeper::ErrorKind::BackendUnavailable, "{e}");
            refused += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(refused, NEW_KEYS, "every new key is refused by a full backend");
    println!();
    println!("| scenario | ratekeeper ops/s |");
    println!("|---|---:|");
    println!("| {NEW_KEYS} new keys, full backend ({held} live keys) | {:.0} |", NEW_KEYS as f64 / elapsed);
    println!();
    println!("{NEW_KEYS} new keys refused in {elapsed:.3}s");
}

fn main() {
    let mut quick = false;
    let mut round_robin = false;
    let mut one_key_only = false;
    let mut observed = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quick" => quick = true,
            "--round-robin" => round_robin = true,
            "--one-key" => one_key_only = true,
            "--observed" => observed = true,
            "--full-backend" => return full_backend(),
            _ => {
                eprintln!("unknown argument {arg:?}; usage: bench-memory [--quick] [--round-robin] [--one-key] [--observed] [--full-backend]");
                std::process::exit(2);
            }
        }
    }
    let settings = if quick {
        Settings { rounds: 3, round: Duration::from_millis(150), warmup: Duration::from_millis(100) }
    } else {
        Settings { rounds: 7, round: Duration::from_millis(500), warmup: Duration::from_millis(500) }
    };

    let burst = NonZeroU32::new(BURST).expect("burst is positive");
    let quota = Quota::per_second(NonZeroU32::new(RATE).expect("rate is positive")).allow_burst(burst);
    let new_pair = || {
        let backend = Backend::memory();
        if observed {
            backend.start_observing();
        }
        let limiter = backend.token_bucket("bench", RATE as f64, BURST as u64).expect("valid token bucket");
        let governor: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
        (Ratekeeper(limiter), Governor(governor))
    };

    let one = Workload::one_key();
    let many = Workload::many_keys(KEYS, round_robin);
    let scenarios: [(&str, &Workload, usize); 3] = [
        ("1 key, 1 thread", &one, 1),
        ("100k keys, 1 thread", &many, 1),
        ("100k keys, 2 threads (shared limiter, informational)", &many, 2),
    ];

    let started = Instant::now();
    eprintln!(
        "bench-memory: {} rounds of {:?} per library per scenario (median reported), rate {RATE}/s, burst {BURST}",
        settings.rounds, settings.round
    );
    let mut rows = Vec::new();
    let scenarios = if one_key_only { &scenarios[..1] } else { &scenarios[..] };
    for &(name, work, threads) in scenarios {
        // Fresh limiters per scenario, so each starts from a full bucket and an empty table.
        let (rk, gov) = new_pair();
        let (r, g) = scenario(&rk, &gov, work, threads, &settings);
        eprintln!(
            "  {name}: ratekeeper median {} best {} (admitted {:.4}%), governor median {} best {} (admitted {:.4}%)",
            millions(r.median),
            millions(r.best),
            r.admitted * 100.0,
            millions(g.median),
            millions(g.best),
            g.admitted * 100.0
        );
        // Each round beside the other library's: this VM alternates between a fast and a slow
        // state for seconds at a time, and the rounds show which state each median came from.
        let rounds = |m: &Measured| m.rounds.iter().map(|r| format!("{:.1}", r / 1e6)).collect::<Vec<_>>().join(" ");
        eprintln!("    rounds (M checks/s): ratekeeper {}; governor {}", rounds(&r), rounds(&g));
        rows.push((name, r, g));
    }

    println!();
    println!("| scenario | ratekeeper checks/s | governor checks/s | ratio (ratekeeper/governor) |");
    println!("|---|---:|---:|---:|");
    for (name, r, g) in &rows {
        println!("| {name} | {} | {} | {:.2} |", millions(r.median), millions(g.median), r.median / g.median);
    }
    if one_key_only || observed {
        return;
    }
    let mut report = Report::new(
        "bench-memory",
        "memory",
        "Memory backend against governor's keyed limiter (Rust)",
        "cargo run --release -p ratekeeper-bench --bin bench-memory",
    )
    .method(format!(
        "median of {} rounds of {:?} per library, interleaved; token bucket {RATE}/s, burst {BURST}; governor's DefaultKeyedRateLimiter<String>",
        settings.rounds, settings.round
    ));
    for ((name, r, g), target) in rows.iter().zip([1.0, 1.3, 1.0]) {
        let row = Row::rate(*name, r.median, "governor", g.median).target(target);
        report.row(if name.starts_with("1 key") { row.headline() } else { row });
    }
    report.write();
    println!();
    println!(
        "median of {} rounds x {:?}; token bucket {RATE}/s, burst {BURST}; governor = DefaultKeyedRateLimiter<String> (DashMap, QuantaClock); total {:.1}s",
        settings.rounds,
        settings.round,
        started.elapsed().as_secs_f64()
    );
}
