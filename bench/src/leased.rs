//! `bench-leased`: checks per second of a leased token bucket on Redis against the memory
//! backend's token bucket, side by side in one run, with the ratio (target: at least 0.5).
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-leased            # ~60 s
//! cargo run --release -p ratekeeper-bench --bin bench-leased -- --quick # ~15 s
//! ```
//!
//! Both limiters refill 1,000,000 per second with a burst of 1,000,000,000 (so nearly every
//! call is admitted and both measure their admit path), one thread, cost 1, through the public
//! `check_blocking`: with no key (the headline row), then on one key (a keyed leased limiter
//! holds a lease per key). The leased bucket (default chunk: capacity / 16; lease TTL
//! 10 s) lives on a redis-server of the bench's own; its round trips (one per lease) are part
//! of what is timed. Rounds interleave the two (memory, leased, memory, ...) so machine noise
//! hits both alike; the median round is reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

const RATE: f64 = 1_000_000.0;
const BURST: u64 = 1_000_000_000;
const BATCH: usize = 1 << 14;

/// The key of the keyed rows.
const KEY: &str = "user-42";

/// Checks per second of `key` over one round of `length`, and the share admitted.
fn round(limiter: &Limiter, key: Option<&str>, length: Duration) -> (f64, f64) {
    let start = Instant::now();
    let (mut calls, mut admitted) = (0u64, 0u64);
    while start.elapsed() < length {
        for _ in 0..BATCH {
            let d = limiter.check_blocking(black_box(key), 1).expect("check");
            admitted += u64::from(black_box(d.allowed));
        }
        calls += BATCH as u64;
    }
    (calls as f64 / start.elapsed().as_secs_f64(), admitted as f64 / calls as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, length) = if quick { (3, Duration::from_secs(1)) } else { (7, Duration::from_secs(2)) };
    let server = Server::start();
    let memory = Backend::memory().token_bucket("bench", RATE, BURST).expect("memory limiter");
    let redis = Backend::redis(&server.url()).expect("redis backend");
    let leased = redis.leased("bench", RATE, BURST, None, Duration::from_secs(10)).expect("leased limiter");
    let mut rows = Vec::new();
    for key in [None, Some(KEY)] {
        round(&memory, key, length / 4);
        round(&leased, key, length / 4);
        let (mut m, mut l, mut shares) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            m.push(round(&memory, key, length).0);
            let (rate, share) = round(&leased, key, length);
            l.push(rate);
            shares.push(share);
        }
        rows.push((key, median(m), median(l), median(shares)));
    }
    leased.close_blocking().expect("give the lease back");
    println!("| key | limiter | checks/s (median of {rounds}) | ratio |");
    println!("|---|---|---:|---:|");
    for &(key, m, l, share) in &rows {
        let key = key.unwrap_or("none");
        println!("| {key} | memory token_bucket | {:.2}M | 1.00 |", m / 1e6);
        println!("| {key} | leased on Redis | {:.2}M | {:.2} |", l / 1e6, l / m);
        println!("key {key}: leased / memory = {:.2} (target >= 0.50); leased admitted share {share:.4}", l / m);
    }
    let mut report = Report::new(
        "bench-leased",
        "leased",
        "Leased token bucket on Redis against the memory token bucket (Rust, check_blocking)",
        "cargo run --release -p ratekeeper-bench --bin bench-leased",
    )
    .method(format!(
        "median of {rounds} rounds of {length:?}, alternating; both refill {RATE}/s with a burst of {BURST}, one thread; no key, then one key"
    ));
    for &(key, m, l, _) in &rows {
        let row = match key {
            None => Row::rate("leased on Redis, check_blocking", l, "memory token bucket", m).target(0.5).headline(),
            Some(_) => {
                Row::rate("leased on Redis, check_blocking, one key", l, "memory token bucket, one key", m).target(0.5)
            }
        };
        report.row(row);
    }
    report.write();
}
