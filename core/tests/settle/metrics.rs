//! Settles are counted in a limiter's metrics (settles applied, units charged, units asked to
//! refund), a repeat is not; on Redis the fleet's counts add up across processes and Prometheus
//! shows them (the Python and Node suites parse it with their Prometheus clients).

use crate::support;

use std::time::Duration;

use ratekeeper::{Backend, Limiter, Metrics};
use support::RedisServer;

/// Two settles of 8 to 3 (a refund of 5, then its repeat) and one of 2 to 6 (a charge of 4),
/// on `limiter`; returns its metrics.
fn settle_three(limiter: &Limiter) -> Metrics {
    let refunded = limiter.check_blocking(Some("k"), 8).unwrap();
    limiter.settle_blocking(&refunded, 3).unwrap();
    limiter.settle_blocking(&refunded, 3).unwrap();
    let charged = limiter.check_blocking(Some("k"), 2).unwrap();
    limiter.settle_blocking(&charged, 6).unwrap();
    limiter.metrics()
}

fn counted(m: &Metrics) -> (u64, u64, u64) {
    (m.settles, m.settle_charged, m.settle_refunded)
}

#[test]
fn settles_are_counted_once_on_memory() {
    let backend = Backend::memory();
    for limiter in
        [backend.token_bucket("tb", 0.001, 10).unwrap(), backend.window("w", 10, Duration::from_secs(60)).unwrap()]
    {
        assert_eq!(counted(&settle_three(&limiter)), (2, 4, 5), "{}", limiter.name());
    }
}

/// Two processes settle (one of them another's decisions, whose repeats it does not count);
/// the fleet's metrics and its Prometheus text add them up.
#[test]
fn settles_are_counted_fleet_wide_on_redis() {
    let server = RedisServer::start();
    let backend = || Backend::redis_with(support::redis_config(server.url()).prefix("settle-metrics")).unwrap();
    let (first, second) = (backend(), backend());
    let mine = first.leased("llm", 0.001, 100, Some(1), Duration::from_secs(1)).unwrap();
    let theirs = second.leased("llm", 0.001, 100, Some(1), Duration::from_secs(1)).unwrap();
    assert_eq!(counted(&settle_three(&mine)), (2, 4, 5));
    let d = mine.check_blocking(Some("k"), 10).unwrap();
    theirs.settle_blocking(&d, 0).unwrap();
    mine.settle_blocking(&d, 0).unwrap();
    assert_eq!(counted(&theirs.metrics()), (1, 0, 10));
    assert_eq!(counted(&mine.metrics()), (2, 4, 5), "a repeat is not counted");
    first.flush_blocking().unwrap();
    second.flush_blocking().unwrap();
    let fleet = first.metrics_blocking(true).unwrap();
    let (_, _, m) = fleet.iter().find(|(name, ..)| name == "llm").expect("llm is registered");
    assert_eq!(counted(m), (3, 4, 15));
    let text = first.prometheus_blocking(true).unwrap();
    assert!(text.contains(r#"ratekeeper_settles_total{limiter="llm",kind="leased"} 3"#), "{text}");
    assert!(text.contains(r#"ratekeeper_settled_units_total{limiter="llm",kind="leased",direction="refunded"} 15"#));
}
