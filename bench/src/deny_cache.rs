//! `bench-deny-cache`: one hot refused key hit from one process on a real Redis, with and
//! without the deny cache (see `Limiter::with_deny_cache`): refusals per second, and the Redis
//! commands each refusal costs (every command the server ran, from `INFO commandstats` before
//! and after, the limiter's background work included).
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-deny-cache            # 2 s per round
//! cargo run --release -p ratekeeper-bench --bin bench-deny-cache -- --quick # 0.5 s per round
//! ```
//!
//! Both limiters are the same token bucket (one token an hour, so the key stays refused for the
//! whole run) on one backend, one with the cache and one without; the rows alternate for
//! `ROUNDS` rounds and each reports its median. The benchmark starts its own `redis-server` on
//! a free loopback port (never 6379, no persistence) and stops it by pid at the end.

use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter, RedisConfig};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

const ROUNDS: usize = 5;

/// Every command the server has run since it started, but `INFO` and `CONFIG` (the bench's own).
fn commands(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_config"))
        .filter_map(|l| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// Refusals per second of `limiter` on its hot key for `length`, and the commands they cost.
fn round(limiter: &Limiter, length: Duration, conn: &mut redis::Connection) -> (f64, f64) {
    let before = commands(conn);
    let started = Instant::now();
    let mut refusals = 0u64;
    while started.elapsed() < length {
        for _ in 0..64 {
            let d = limiter.check_blocking(Some("hot"), 1).expect("check");
            assert!(!d.allowed, "the hot key stays refused");
            refusals += 1;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let sent = commands(conn) - before;
    (refusals as f64 / elapsed, sent as f64 / refusals as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let length = if quick { Duration::from_millis(500) } else { Duration::from_secs(2) };
    let server = Server::start();
    let mut conn = server.connection().expect("connect");
    let backend = Backend::redis_with(RedisConfig::new(server.url())).expect("backend");
    let plain = backend.token_bucket("hot", 1.0 / 3600.0, 1).expect("limiter");
    let cached = plain.with_deny_cache(true).expect("deny cache");
    assert!(plain.check_blocking(Some("hot"), 1).expect("check").allowed, "the one token");

    let (mut with, mut without, mut with_cmds, mut without_cmds) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let (rate, cmds) = round(&plain, length, &mut conn);
        without.push(rate);
        without_cmds.push(cmds);
        let (rate, cmds) = round(&cached, length, &mut conn);
        with.push(rate);
        with_cmds.push(cmds);
    }
    let (with, without, with_cmds, without_cmds) =
        (median(with), median(without), median(with_cmds), median(without_cmds));
    println!("| one hot refused key, check_blocking | refusals/s (median of {ROUNDS}) | Redis commands per refusal |");
    println!("|---|---:|---:|");
    println!("| without the deny cache | {without:.0} | {without_cmds:.4} |");
    println!("| with the deny cache | {with:.0} | {with_cmds:.6} |");
    println!(
        "with / without = {:.1}x (target >= 50x); commands per refusal with the cache = {with_cmds:.6} (target < 0.01)",
        with / without
    );
    let mut report = Report::new(
        "bench-deny-cache",
        "Redis",
        "One hot refused key from one process: the deny cache against a round trip per refusal (Rust, check_blocking)",
        "cargo run --release -p ratekeeper-bench --bin bench-deny-cache",
    )
    .method(format!("median of {ROUNDS} alternating rounds of {length:?}; commands from INFO commandstats"));
    report.row(
        Row::rate("refusals of a hot key, with the deny cache", with, "without the deny cache", without)
            .unit("refusals/s")
            .target(50.0),
    );
    let mut commands_row = Row::figure("Redis commands per refusal, with the deny cache", "commands", with_cmds);
    commands_row.peer = Some("the target's ceiling".into());
    commands_row.peer_value = Some(0.01);
    report.row(commands_row.target(1.0));
    report.row(Row::figure("Redis commands per refusal, without the deny cache", "commands", without_cmds));
    report.write();
}
