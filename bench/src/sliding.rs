//! `bench-sliding`: the Redis server's own time per sliding-window call (`INFO commandstats`,
//! `usec_per_call` of EVALSHA) with 60 and 3,600 non-empty sub-buckets per key.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-sliding            # 2,000 checks per row
//! cargo run --release -p ratekeeper-bench --bin bench-sliding -- 10000   # N checks per row
//! ```
//!
//! Each row uses one key of `sliding_window(name, [(blocks s, limit, precision 1 s)])` on a manual
//! clock: first `blocks` checks one second apart fill every sub-bucket, then the statistics are
//! reset and N checks are measured:
//! - `steady`: admitted checks one second apart (each opens a sub-bucket and one goes stale);
//! - `refused`: the limit is exactly `blocks`, so after the fill every check is refused (the
//!   retry_after search), at one instant.
//!
//! Then two rows for fixed windows (`bucket`): checks within one window, and checks that each
//! open a new window.
//!
//! The benchmark starts its own `redis-server` on a free loopback port (never 6379, no
//! persistence) and stops it by pid at the end.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, ManualClock, RedisConfig, SlidingLimit};
use ratekeeper_bench::report::{Report, Row};
use ratekeeper_bench::server::Server;

fn main() {
    let checks: u64 = std::env::args().nth(1).map(|n| n.parse().expect("N checks")).unwrap_or(2_000);
    let server = Server::start();
    let mut conn = server.connection().expect("connect");
    let mut report = Report::new(
        "bench-sliding",
        "Redis",
        "Server time of the sliding-window script (INFO commandstats)",
        "cargo run --release -p ratekeeper-bench --bin bench-sliding",
    )
    .method(format!("{checks} checks per row, one key, a manual clock"));
    println!("| sub-buckets | scenario | checks | server µs per call (EVALSHA) |");
    println!("|---:|---|---:|---:|");
    for blocks in [60u64, 3_600] {
        for scenario in ["steady", "refused"] {
            let clock = Arc::new(ManualClock::new(1_800_000_000_000_000));
            let config = RedisConfig::new(server.url()).deadline(Duration::from_secs(10)).clock(clock.clone());
            let backend = Backend::redis_with(config).expect("a Redis backend");
            let limit = if scenario == "refused" { blocks } else { 1 << 40 };
            let limiter = backend
                .sliding_window(
                    &format!("bench-{blocks}-{scenario}"),
                    &[SlidingLimit {
                        duration: Duration::from_secs(blocks),
                        limit,
                        precision: Some(Duration::from_secs(1)),
                    }],
                )
                .expect("a sliding window");
            for i in 0..blocks {
                if i > 0 {
                    clock.advance(Duration::from_secs(1));
                }
                assert!(limiter.check_blocking(Some("k"), 1).expect("fill").allowed);
            }
            redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(&mut conn).expect("CONFIG RESETSTAT");
            for _ in 0..checks {
                let d = limiter.check_blocking(Some("k"), 1).expect("check");
                assert_eq!(d.allowed, scenario == "steady", "{scenario}: {d:?}");
                if scenario == "steady" {
                    clock.advance(Duration::from_secs(1));
                }
            }
            let (usec, calls) = server.evalsha_stats();
            assert_eq!(calls, checks, "one EVALSHA per check");
            println!("| {blocks} | {scenario} | {checks} | {usec:.2} |");
            report.row(Row::figure(format!("{blocks} sub-buckets, {scenario}"), "server µs per call", usec));
        }
    }
    // Fixed windows (the `bucket` limiter, one block): every check in one window, then every
    // check in a new one.
    for (interval, scenario) in [(3_600u64, "bucket, same window"), (1, "bucket, new window each call")] {
        let clock = Arc::new(ManualClock::new(1_800_000_000_000_000));
        let config = RedisConfig::new(server.url()).deadline(Duration::from_secs(10)).clock(clock.clone());
        let backend = Backend::redis_with(config).expect("a Redis backend");
        let limiter = backend
            .bucket(&format!("bench-bucket-{interval}"), 1 << 40, Duration::from_secs(interval))
            .expect("a bucket");
        redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(&mut conn).expect("CONFIG RESETSTAT");
        for _ in 0..checks {
            assert!(limiter.check_blocking(Some("k"), 1).expect("check").allowed);
            if interval == 1 {
                clock.advance(Duration::from_secs(1));
            }
        }
        let (usec, _) = server.evalsha_stats();
        println!("| 1 | {scenario} | {checks} | {usec:.2} |");
        report.row(Row::figure(scenario, "server µs per call", usec));
    }
    report.write();
}
