//! `bench-partitions`: what a check costs on a partitions limiter (decided in the process, with a
//! lease round trip every third of `lease_ttl`) against a token bucket on the same Redis server
//! (one round trip per check), in one run.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-partitions            # 20,000 checks per row
//! cargo run --release -p ratekeeper-bench --bin bench-partitions -- 50000   # N checks per row
//! ```
//!
//! One thread calls `check_blocking` in a loop. Token bucket: 1,000,000 per second, a burst of
//! 2^40 (always admits). Partitions: 1,000,000 per second in 20 partitions (one member holds
//! all of them; calls beyond the rate are refused, which costs the same as an admission). Rows
//! alternate for `ROUNDS` rounds; each reports its median, with the EVALSHA calls the server
//! counted (`INFO commandstats`) per check.
//!
//! The benchmark starts its own `redis-server` on a free loopback port (never 6379, no
//! persistence) and stops it by pid at the end.

use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

const ROUNDS: usize = 5;

/// (checks per second, EVALSHA calls per check) of `checks` checks.
fn measure(server: &Server, limiter: &Limiter, checks: u64) -> (f64, f64) {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let start = Instant::now();
    for _ in 0..checks {
        limiter.check_blocking(None, 1).expect("a check");
    }
    let elapsed = start.elapsed();
    (checks as f64 / elapsed.as_secs_f64(), server.evalsha_stats().1 as f64 / checks as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let checks: u64 = std::env::args().nth(1).map(|n| n.parse().expect("N checks")).unwrap_or(20_000);
    let server = Server::start();
    let backend = Backend::redis(&server.url()).expect("a Redis backend");
    let bucket = backend.token_bucket("bench-bucket", 1e6, 1 << 40).expect("a token bucket");
    let partitions =
        backend.partitions("bench-partitions", 1e6, 20, Duration::from_secs(15), 0, false).expect("partitions");
    // Connect, load the scripts and take the leases before anything is timed.
    bucket.check_blocking(None, 1).unwrap();
    partitions.check_blocking(None, 1).unwrap();
    let (mut bucket_rates, mut partition_rates, mut bucket_calls, mut partition_calls) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let (rate, calls) = measure(&server, &bucket, checks);
        bucket_rates.push(rate);
        bucket_calls.push(calls);
        let (rate, calls) = measure(&server, &partitions, checks);
        partition_rates.push(rate);
        partition_calls.push(calls);
    }
    let (b, p) = (median(bucket_rates), median(partition_rates));
    let (bucket_calls, partition_calls) = (median(bucket_calls), median(partition_calls));
    println!("{checks} checks per row, one thread, median of {ROUNDS} rounds, one redis-server");
    println!("| limiter | checks/s | Redis scripts per check |");
    println!("|---|---:|---:|");
    println!("| token_bucket (one round trip per check) | {b:.0} | {:.3} |", bucket_calls);
    println!("| partitions (decided in process) | {p:.0} | {:.4} |", partition_calls);
    println!("partitions / token_bucket: {:.1}x", p / b);
    let mut report = Report::new(
        "bench-partitions",
        "leased",
        "Leased partitions against a token bucket on the same redis-server (Rust)",
        "cargo run --release -p ratekeeper-bench --bin bench-partitions",
    )
    .method(format!("{checks} checks per row, one thread, median of {ROUNDS} alternating rounds"));
    report.row(Row::rate("partitions (decided in process)", p, "token bucket on Redis (one round trip per check)", b));
    report.row(Row::figure("partitions: Redis scripts per check", "scripts", partition_calls));
    report.row(Row::figure("token bucket: Redis scripts per check", "scripts", bucket_calls));
    report.write();
}
