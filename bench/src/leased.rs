//! `bench-leased`: checks per second of a leased token bucket on Redis against the memory
//! backend's token bucket, side by side in one run, with the ratio (target: at least 0.5).
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-leased            # ~60 s
//! cargo run --release -p ratekeeper-bench --bin bench-leased -- --quick # ~15 s
//! ```
//!
//! `--one-key` runs only the one-key rows and writes no results: for paired runs of two builds,
//! one after the other.
//!
//! Both limiters refill 1,000,000 per second with a burst of 1,000,000,000 (so nearly every
//! call is admitted and both measure their admit path), one thread, cost 1, through the public
//! `check_blocking`: with no key (the headline row), then on one key (a keyed leased limiter
//! holds a lease per key). The leased bucket (default chunk: capacity / 16; lease TTL
//! 10 s) lives on a redis-server of the bench's own; its round trips (one per lease) are part
//! of what is timed. Rounds interleave the two (memory, leased, memory, ...) so machine noise
//! hits both alike; the median round is reported.
//!
//! Then the cost of many leasing processes on one bucket: a grant reads every live lease entry
//! (each keeps the least the bucket held since its grant, for give-backs), so its server time
//! grows with the holders. 1, 16 and 256 holders (each a backend of its own, as a process
//! would be) take turns on one bucket with a chunk of 64 tokens, so grants are frequent; the rows
//! give the checks per second of all holders together and the server's µs per script call
//! (`INFO commandstats`), with 256 holders against 1.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter, RedisConfig};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

const RATE: f64 = 1_000_000.0;
const BURST: u64 = 1_000_000_000;
const BATCH: usize = 1 << 14;

/// The key of the keyed rows.
const KEY: &str = "user-42";

/// How many leasing holders share one bucket in the holder rows.
const HOLDERS: [usize; 3] = [1, 16, 256];
/// The holder rows' chunk: small, so that a grant comes every 64 checks of a holder.
const HOLDER_CHUNK: u64 = 64;

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

/// `count` holders of one leased bucket, each on a backend of its own, each holding a lease.
fn holders(server: &Server, count: usize) -> Vec<Limiter> {
    let name = format!("holders-{count}");
    (0..count)
        .map(|_| {
            // A generous deadline: 256 holders connecting on a loaded machine may take a while.
            let config = RedisConfig::new(server.url()).deadline(Duration::from_secs(5));
            let backend = Backend::redis_with(config).expect("redis backend");
            let limiter = backend
                .leased(&name, RATE, BURST, Some(HOLDER_CHUNK), Duration::from_secs(10))
                .expect("leased limiter");
            limiter.check_blocking(None, 1).expect("a first lease");
            limiter
        })
        .collect()
}

/// (checks per second of all `holders` together, taking turns; server µs per script call) over
/// one round of `length`.
fn holders_round(server: &Server, holders: &[Limiter], length: Duration) -> (f64, f64) {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < length {
        for limiter in holders {
            for _ in 0..HOLDER_CHUNK {
                black_box(limiter.check_blocking(None, 1).expect("check"));
            }
        }
        calls += HOLDER_CHUNK * holders.len() as u64;
    }
    (calls as f64 / start.elapsed().as_secs_f64(), server.evalsha_stats().0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let one_key_only = std::env::args().any(|a| a == "--one-key");
    let (rounds, length) = if quick { (3, Duration::from_secs(1)) } else { (7, Duration::from_secs(2)) };
    let server = Server::start();
    let memory = Backend::memory().token_bucket("bench", RATE, BURST).expect("memory limiter");
    let redis = Backend::redis(&server.url()).expect("redis backend");
    let leased = redis.leased("bench", RATE, BURST, None, Duration::from_secs(10)).expect("leased limiter");
    let mut rows = Vec::new();
    let keys: &[Option<&str>] = if one_key_only { &[Some(KEY)] } else { &[None, Some(KEY)] };
    for &key in keys {
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
    if one_key_only {
        for &(_, m, l, share) in &rows {
            println!(
                "one key: memory {:.2}M, leased {:.2}M checks/s; leased / memory = {:.3} (admitted {share:.4})",
                m / 1e6,
                l / 1e6,
                l / m
            );
        }
        return;
    }
    let groups: Vec<Vec<Limiter>> = HOLDERS.iter().map(|&count| holders(&server, count)).collect();
    let mut held: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); HOLDERS.len()];
    for _ in 0..rounds {
        for (group, (rates, server_us)) in groups.iter().zip(held.iter_mut()) {
            let (rate, us) = holders_round(&server, group, length / 2);
            rates.push(rate);
            server_us.push(us);
        }
    }
    let held: Vec<(usize, f64, f64)> =
        HOLDERS.iter().zip(held).map(|(&count, (rates, us))| (count, median(rates), median(us))).collect();
    for limiter in groups.iter().flatten() {
        limiter.close_blocking().expect("give the lease back");
    }
    println!("| key | limiter | checks/s (median of {rounds}) | ratio |");
    println!("|---|---|---:|---:|");
    for &(key, m, l, share) in &rows {
        let key = key.unwrap_or("none");
        println!("| {key} | memory token_bucket | {:.2}M | 1.00 |", m / 1e6);
        println!("| {key} | leased on Redis | {:.2}M | {:.2} |", l / 1e6, l / m);
        println!("key {key}: leased / memory = {:.2} (target >= 0.50); leased admitted share {share:.4}", l / m);
    }
    println!("| leasing holders | checks/s, all together | server µs per script call |");
    println!("|---:|---:|---:|");
    for &(count, rate, us) in &held {
        println!("| {count} | {:.2}M | {us:.2} |", rate / 1e6);
    }
    let mut report = Report::new(
        "bench-leased",
        "leased",
        "Leased token bucket on Redis against the memory token bucket (Rust, check_blocking)",
        "cargo run --release -p ratekeeper-bench --bin bench-leased",
    )
    .method(format!(
        "median of {rounds} rounds of {length:?}, alternating; both refill {RATE}/s with a burst of {BURST}, one thread; no key, then one key; then 1, 16 and 256 leasing holders (a backend each) taking turns on one bucket, chunk {HOLDER_CHUNK}, rounds of {:?}", length / 2
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
    let (_, one_rate, one_us) = held[0];
    for &(count, rate, us) in &held[1..] {
        report.row(Row::rate(
            format!("{count} leasing holders on one bucket, chunk {HOLDER_CHUNK}"),
            rate,
            "1 holder",
            one_rate,
        ));
        report.row(Row::figure(
            format!("server µs per grant or give-back, {count} holders (1 holder: {one_us:.2})"),
            "µs per call",
            us,
        ));
    }
    report.write();
}
