//! `bench-wake`: how soon a concurrent limiter's waiter is granted after a release, and how long
//! checks on other keys take while a waiter blocks in BLPOP. These were latency bounds in
//! `core/tests/concurrent/redis.rs`, `faults/failures.rs` and `deployments/cluster.rs`; the tests now
//! assert the orderings (one waiter woken per release, checks answered while the waiter still
//! blocks) and this prints the figures.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-wake            # 100 waiters, 200 releases
//! cargo run --release -p ratekeeper-bench --bin bench-wake -- --quick # 20 waiters, 40 releases
//! ```
//!
//! It starts its own `redis-server` on a free loopback port (never 6379, no persistence) and
//! stops it by pid at the end. Figures from a shared machine move with its load: compare runs
//! made side by side, not with a fixed target.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, RedisConfig};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

/// Clients blocked in BLPOP, as `INFO clients` counts them.
fn blocked_clients(server: &Server) -> usize {
    let text = server.cli(&["INFO", "clients"]);
    text.lines().find_map(|l| l.strip_prefix("blocked_clients:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (waiters, rounds) = if quick { (20, 40) } else { (100, 200) };
    let server = Server::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).prefix("wake")).expect("a Redis backend");
    let mutex = backend.concurrent("wake", 1, Duration::from_secs(600)).expect("a limiter");
    let other = backend.token_bucket("other", 1e6, 1_000_000).expect("a limiter");
    let rt = runtime();

    let mut held = rt.block_on(mutex.check(Some("k"), 1)).expect("the first holder").lease.expect("a lease");
    let (tx, rx) = mpsc::channel();
    for _ in 0..waiters + rounds {
        let (mutex, tx) = (mutex.clone(), tx.clone());
        rt.spawn(async move {
            let result = mutex.acquire(Some("k"), 1, Some(Duration::from_secs(600))).await;
            let _ = tx.send((result, Instant::now()));
        });
    }
    while blocked_clients(&server) < waiters.min(waiters + rounds) {
        std::thread::sleep(Duration::from_millis(10));
    }

    // Checks on another key while waiters block: the shared connection is not behind BLPOP.
    let started = Instant::now();
    for i in 0..1000 {
        rt.block_on(other.check(Some(&format!("k{i}")), 1)).expect("Redis answers");
    }
    let checks = started.elapsed();

    let mut wakes = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let released = Instant::now();
        rt.block_on(mutex.release(Some("k"), &held)).expect("release");
        let (result, granted) = rx.recv().expect("a waiter");
        wakes.push(granted - released);
        held = result.expect("the woken waiter gets the slot").lease.expect("a lease");
    }
    wakes.sort();
    println!("bench-wake ({waiters}+ waiters on a limit-1 concurrent limiter, {rounds} releases, same host):");
    println!(
        "  release -> waiter granted: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&wakes, 0.5),
        percentile(&wakes, 0.99),
        wakes[wakes.len() - 1]
    );
    println!("  1000 sequential checks on other keys while waiters block: {checks:?} ({:?} each)", checks / 1000);
    let mut report = Report::new(
        "bench-wake",
        "Redis",
        "Concurrent limiter: from a release to the woken waiter's grant",
        "cargo run --release -p ratekeeper-bench --bin bench-wake",
    )
    .method(format!("{waiters}+ waiters blocked on a limit-1 concurrent limiter, {rounds} releases"));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    report.row(Row::figure("release to grant, p50", "ms", ms(percentile(&wakes, 0.5))));
    report.row(Row::figure("release to grant, p99", "ms", ms(percentile(&wakes, 0.99))));
    report.row(Row::figure("a check on another key while waiters block", "ms", ms(checks / 1000)));
    report.write();
    drop(server);
    std::process::exit(0); // the remaining waiters are still blocked: do not wait for them
}
