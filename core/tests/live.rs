//! Live limits, the registry, metrics for every limiter and the Prometheus exposition, on the
//! memory backend, a real redis-server and a 3-master Redis Cluster. Two `Backend` objects on one
//! server stand for two processes: each has its own overrides, poller and metrics.

mod support;

use std::time::{Duration, Instant};

use ratekeeper::{Backend, ErrorKind, LimiterSpec, RedisConfig};
use support::{RedisCluster, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);
/// A hang guard, not a speed target: the lag is measured by the cross-language test and reported
/// in the README.
const GIVE_UP: Duration = Duration::from_secs(20);

fn token_bucket(capacity: u64) -> LimiterSpec {
    LimiterSpec::TokenBucket { rate: 0.001, capacity }
}

/// Polls `probe` until it holds; panics with `what` if it never does.
fn eventually(what: &str, mut probe: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !probe() {
        assert!(started.elapsed() < GIVE_UP, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

fn backends(url: &str, prefix: &str) -> (Backend, Backend) {
    let config = || RedisConfig::new(url).prefix(prefix);
    (Backend::redis_with(config()).unwrap(), Backend::redis_with(config()).unwrap())
}

#[test]
fn memory_overrides_apply_at_once_and_keep_state() {
    let backend = Backend::memory();
    let api = backend.token_bucket("api", 0.001, 3).unwrap();
    for _ in 0..3 {
        assert!(api.check_blocking(Some("a"), 1).unwrap().allowed);
    }
    assert!(!api.check_blocking(Some("a"), 1).unwrap().allowed);
    backend.set_limit_blocking("api", &token_bucket(5), None).unwrap();
    let d = api.check_blocking(Some("a"), 1).unwrap();
    assert!(d.allowed, "the raised capacity admits on the state already there");
    assert_eq!((d.limit, d.remaining), (5, 1), "three used of five, and this one");
    backend.set_limit_blocking("api", &token_bucket(100), Some("vip")).unwrap();
    assert_eq!(api.peek_blocking(Some("vip")).unwrap().limit, 100);
    backend.clear_limit_blocking("api", None).unwrap();
    let d = api.check_blocking(Some("a"), 1).unwrap();
    assert_eq!((d.allowed, d.limit), (false, 3), "back to its own spec, over it");
    let listed = backend.limiters_blocking().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].overrides, vec![(Some("vip".to_owned()), token_bucket(100).to_json())]);
    let m = api.metrics();
    assert_eq!((m.allowed, m.refused, m.errors), (4, 2, 0));
}

#[test]
fn overrides_are_checked_before_anything_is_written() {
    let backend = Backend::memory();
    let _api = backend.token_bucket("api", 1.0, 3).unwrap();
    let invalid = |r: ratekeeper::Result<()>| match r {
        Err(e) => (e.kind(), e.to_string()),
        Ok(()) => panic!("accepted"),
    };
    let (kind, message) =
        invalid(backend.set_limit_blocking("api", &LimiterSpec::Leaky { size: 3, drain: MINUTE }, None));
    assert_eq!(kind, ErrorKind::InvalidArgument);
    assert!(message.contains("spec") && message.contains("token_bucket"), "{message}");
    let (_, message) =
        invalid(backend.set_limit_json_blocking("api", r#"{"kind":"token_bucket","rate":-1,"capacity":3}"#, None));
    assert!(message.contains("rate"), "{message}");
    let (_, message) = invalid(backend.set_limit_blocking("bad name", &token_bucket(1), None));
    assert!(message.contains("name"), "{message}");
    let (_, message) = invalid(backend.set_limit_blocking("api", &LimiterSpec::Unlimited, None));
    assert!(message.contains("spec"), "{message}");
    assert!(backend.limiters_blocking().unwrap()[0].overrides.is_empty());
}

fn redis_overrides_reach_every_process(url: &str, prefix: &str) {
    let (ops, worker) = backends(url, prefix);
    let api = worker.token_bucket("api", 0.001, 2).unwrap();
    assert_eq!(api.check_blocking(Some("t1"), 1).unwrap().limit, 2);
    ops.set_limit_blocking("api", &token_bucket(7), None).unwrap();
    ops.set_limit_blocking("api", &token_bucket(40), Some("t7")).unwrap();
    eventually("the worker applies the override", || api.peek_blocking(Some("t1")).unwrap().limit == 7);
    eventually("the worker applies the key's override", || api.peek_blocking(Some("t7")).unwrap().limit == 40);
    let d = api.check_blocking(Some("t1"), 1).unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 5), "the earlier check still counts");
    ops.clear_limit_blocking("api", None).unwrap();
    eventually("the worker drops the override", || api.peek_blocking(Some("t1")).unwrap().limit == 2);
    assert_eq!(api.peek_blocking(Some("t7")).unwrap().limit, 40, "the key's override stays");

    // Another kind under the registered name is refused (the worker registered `api`).
    worker.flush_blocking().unwrap();
    let err = ops.set_limit_blocking("api", &LimiterSpec::Leaky { size: 2, drain: MINUTE }, None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("token_bucket"), "{err}");

    let listed = ops.limiters_blocking().unwrap();
    let info = listed.iter().find(|l| l.name == "api").expect("api is registered");
    assert_eq!((info.kind.as_str(), info.spec.clone()), ("token_bucket", token_bucket(2).to_json()));
    assert_eq!(info.overrides, vec![(Some("t7".to_owned()), token_bucket(40).to_json())]);
    assert!(info.users.iter().any(|u| u.starts_with("rust ratekeeper/")), "{:?}", info.users);
    assert_eq!(info.processes, 1, "two backends of one process are one process");
    assert!(info.first_seen <= info.last_seen);
}

#[test]
fn redis_overrides_reach_every_process_standalone() {
    let server = RedisServer::start();
    redis_overrides_reach_every_process(&server.url(), "live");
}

#[test]
fn redis_overrides_reach_every_process_on_a_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds();
    let config = || RedisConfig::cluster(seeds.clone()).prefix("live");
    let (ops, worker) = (Backend::redis_with(config()).unwrap(), Backend::redis_with(config()).unwrap());
    // Names spread over the masters; the registry is one slot.
    let limiters: Vec<_> = (0..12).map(|i| worker.window(&format!("w{i}"), 10, MINUTE).unwrap()).collect();
    for l in &limiters {
        l.check_blocking(Some("k"), 1).unwrap();
    }
    ops.set_limit_json_blocking("w3", r#"{"kind":"window","limit":1,"interval":60}"#, None).unwrap();
    eventually("the override reaches the worker", || !limiters[3].check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(limiters[4].check_blocking(Some("k"), 1).unwrap().allowed);
    worker.flush_blocking().unwrap();
    let listed = ops.limiters_blocking().unwrap();
    assert_eq!(listed.len(), 12, "{listed:?}");
    assert_eq!(listed.iter().filter(|l| !l.overrides.is_empty()).count(), 1);
}

#[test]
fn fleet_metrics_sum_every_process_and_render_for_prometheus() {
    let server = RedisServer::start();
    let (a, b) = backends(&server.url(), "metrics");
    let (la, lb) = (a.window("jobs", 3, MINUTE).unwrap(), b.window("jobs", 3, MINUTE).unwrap());
    for _ in 0..4 {
        la.check_blocking(Some("x"), 1).unwrap();
    }
    for _ in 0..2 {
        lb.check_blocking(Some("x"), 1).unwrap();
    }
    let mine = la.metrics();
    assert_eq!((mine.allowed, mine.refused), (3, 1));
    assert_eq!(mine.latency_count(), 4, "every check that went to Redis is timed");
    b.flush_blocking().unwrap();
    let fleet = a.metrics_blocking(true).unwrap();
    let (_, _, jobs) = fleet.iter().find(|(name, ..)| name == "jobs").unwrap();
    assert_eq!((jobs.allowed, jobs.refused, jobs.latency_count()), (3, 3, 6));
    // Flushes are idempotent: another flush adds nothing.
    a.flush_blocking().unwrap();
    b.flush_blocking().unwrap();
    let again = a.metrics_blocking(true).unwrap();
    assert_eq!(again.iter().find(|(n, ..)| n == "jobs").unwrap().2.refused, 3);

    let text = a.prometheus_blocking(true).unwrap();
    assert!(text.contains(r#"ratekeeper_checks_total{limiter="jobs",kind="window",outcome="refused"} 3"#), "{text}");
    assert!(text.contains(r#"ratekeeper_check_duration_seconds_count{limiter="jobs",kind="window"} 6"#), "{text}");
    let local = a.prometheus_blocking(false).unwrap();
    assert!(local.contains(r#"ratekeeper_checks_total{limiter="jobs",kind="window",outcome="refused"} 1"#), "{local}");
}

#[test]
fn failure_policies_are_counted_per_limiter() {
    let mut server = RedisServer::start();
    let config = |policy| RedisConfig::new(server.url()).prefix("policy").failure_policy(policy);
    let open = Backend::redis_with(config(ratekeeper::FailurePolicy::FailOpen)).unwrap();
    let closed = Backend::redis_with(config(ratekeeper::FailurePolicy::FailClosed)).unwrap();
    let fallback = Backend::redis_with(config(ratekeeper::FailurePolicy::Fallback { divisor: 1 })).unwrap();
    let limiters = [&open, &closed, &fallback].map(|b| b.token_bucket("p", 1.0, 5).unwrap());
    server.kill();
    for l in &limiters {
        let _ = l.check_blocking(None, 1);
    }
    let m = limiters.each_ref().map(|l| l.metrics());
    assert_eq!((m[0].failed_open, m[1].errors, m[2].fell_back), (1, 1, 1));
    assert_eq!(m.iter().map(|m| m.checks()).sum::<u64>(), 3);
}

/// The process that sets overrides decides with them at once, even while its own poller reads
/// the table between two of its writes (it used to apply that older table for up to a poll).
#[test]
fn the_setting_process_never_goes_back_to_an_older_table() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).prefix("own")).unwrap();
    let api = backend.token_bucket("api", 0.001, 1).unwrap();
    for round in 0..150u64 {
        backend.set_limit_blocking("api", &token_bucket(100 + round), None).unwrap();
        backend.set_limit_blocking("api", &token_bucket(1000 + round), Some("vip")).unwrap();
        assert_eq!(api.peek_blocking(None).unwrap().limit, 100 + round, "round {round}");
        assert_eq!(api.peek_blocking(Some("vip")).unwrap().limit, 1000 + round, "round {round}");
        std::thread::sleep(Duration::from_millis(3));
    }
}
