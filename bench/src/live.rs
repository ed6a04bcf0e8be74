//! bench-live: what live limits cost and how fast they spread, on a redis-server of its own (a
//! free loopback port, never 6379, stopped by pid).
//!
//! - **Lag**: one backend sets a limit, another (with its own background task, as another
//!   process has) peeks until it decides with it; 20 rounds, median and worst.
//! - **Server CPU**: `INFO commandstats` while one process checks for a few seconds with and
//!   without an override in force: the checks' server time per call (the same script either
//!   way), and the background task's (override polls, metric flushes, registrations) per second
//!   and per check.
//!
//! `cargo run --release -p ratekeeper-bench --bin bench-live`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ratekeeper::{Backend, LimiterSpec, RedisConfig};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

/// `(calls, usec)` per command from `INFO commandstats`.
fn commandstats(server: &Server) -> HashMap<String, (u64, u64)> {
    let mut out = HashMap::new();
    for line in server.cli(&["INFO", "commandstats"]).lines() {
        let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
        let field = |f: &str| {
            rest.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('=')?.parse::<u64>().ok()).unwrap_or(0)
        };
        out.insert(name.to_owned(), (field("calls"), field("usec")));
    }
    out
}

fn bucket(capacity: u64) -> LimiterSpec {
    LimiterSpec::TokenBucket { rate: 1e6, capacity }
}

fn lag(server: &Server) -> Vec<Duration> {
    let url = server.url();
    let ops = Backend::redis_with(RedisConfig::new(&url).prefix("lag")).unwrap();
    let worker = Backend::redis_with(RedisConfig::new(&url).prefix("lag")).unwrap();
    let limiter = worker.limiter("api", bucket(1)).unwrap();
    limiter.peek_blocking(None).unwrap();
    let mut lags = Vec::new();
    for round in 0..20u64 {
        let capacity = 2 + round;
        // Start at a random phase of the worker's 200 ms poll.
        std::thread::sleep(Duration::from_millis(37 * round % 200));
        let set_at = Instant::now();
        ops.set_limit_blocking("api", &bucket(capacity), None).unwrap();
        while limiter.peek_blocking(None).unwrap().limit != capacity {
            std::thread::sleep(Duration::from_micros(500));
        }
        lags.push(set_at.elapsed());
    }
    lags.sort();
    lags
}

/// `INFO commandstats` deltas of `commands` around `during`: (calls, usec).
fn cost(server: &Server, commands: &[&str], during: impl FnOnce()) -> (u64, u64) {
    let before = commandstats(server);
    during();
    let after = commandstats(server);
    commands.iter().fold((0, 0), |(calls, usec), c| {
        let (b, a) = (before.get(*c).copied().unwrap_or_default(), after.get(*c).copied().unwrap_or_default());
        (calls + a.0 - b.0, usec + a.1 - b.1)
    })
}

/// One process's costs over `for_how_long`: (checks per second, server usec per check, the
/// background task's server usec per second while idle). Commandstats count the commands a
/// script runs too, so the background task is measured while no check runs: its override
/// polls (GET), override reads (HGETALL) and flushes and registrations (EVAL).
fn load(server: &Server, prefix: &str, overridden: bool, for_how_long: Duration) -> (f64, f64, f64) {
    let url = server.url();
    let backend = Backend::redis_with(RedisConfig::new(&url).prefix(prefix)).unwrap();
    let limiter = backend.limiter("api", bucket(1_000_000_000)).unwrap();
    limiter.check_blocking(Some("warm"), 1).unwrap();
    if overridden {
        backend.set_limit_blocking("api", &bucket(2_000_000_000), None).unwrap();
    }
    let mut checks = 0u64;
    let (_, check_usec) = cost(server, &["evalsha"], || {
        let started = Instant::now();
        while started.elapsed() < for_how_long {
            limiter.check_blocking(Some("k"), 1).unwrap();
            checks += 1;
        }
    });
    let (_, background) = cost(server, &["get", "hgetall", "eval"], || std::thread::sleep(for_how_long));
    let seconds = for_how_long.as_secs_f64();
    (checks as f64 / seconds, check_usec as f64 / checks as f64, background as f64 / seconds)
}

fn main() {
    let server = Server::start();
    let lags = lag(&server);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "lag from set_limit to another backend deciding with it, 20 rounds: median {:.0} ms, worst {:.0} ms (poll interval 200 ms)",
        ms(lags[lags.len() / 2]),
        ms(lags[lags.len() - 1])
    );
    let mut report = Report::new(
        "bench-live",
        "Redis",
        "Live limits: lag from set_limit to another backend deciding with it, and the server's cost",
        "cargo run --release -p ratekeeper-bench --bin bench-live",
    )
    .method("20 rounds of lag (poll interval 200 ms); 4 s load runs with and without an override");
    report.row(Row::figure("lag from set_limit, median", "ms", ms(lags[lags.len() / 2])));
    report.row(Row::figure("lag from set_limit, worst", "ms", ms(lags[lags.len() - 1])));
    let seconds = Duration::from_secs(4);
    println!("| run | checks/s | server us per check | background server us per second | background / checks at this rate | at 100 checks/s |");
    println!("|---|---|---|---|---|---|");
    for (i, overridden) in [false, true, false, true].into_iter().enumerate() {
        let (rate, per_check, background) = load(&server, &format!("load{i}"), overridden, seconds);
        println!(
            "| {} | {:.0} | {:.2} | {:.1} | {:.3}% | {:.2}% |",
            if overridden { "override in force" } else { "no override" },
            rate,
            per_check,
            background,
            100.0 * background / (rate * per_check),
            100.0 * background / (100.0 * per_check)
        );
        let what = if overridden { "override in force" } else { "no override" };
        report.row(Row::figure(format!("server time per check, {what} (run {})", i + 1), "µs", per_check));
    }
    report.write();
}
