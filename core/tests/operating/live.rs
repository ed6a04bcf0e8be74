//! Live limits, the registry, metrics for every limiter and the Prometheus exposition, on the
//! memory backend, a real redis-server and a 3-master Redis Cluster. Two `Backend` objects on one
//! server stand for two processes: each has its own overrides, poller and metrics.

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::{Backend, ErrorKind, LimiterSpec, RedisConfig};
use support::{RedisCluster, RedisServer};

const MINUTE: Duration = Duration::from_secs(60);
/// A hang guard, not a speed target: the lag is measured by the cross-language test and reported
/// in the README.
const GIVE_UP: Duration = Duration::from_secs(20);
/// Calls may take this long (default 200 ms): these tests are about which table a process decides
/// with, and a loaded machine (other suites building) delays a redis-server past 200 ms. The
/// deadline itself is tested in `faults/failures.rs`.
const DEADLINE: Duration = Duration::from_secs(10);

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
    let config = || RedisConfig::new(url).prefix(prefix).deadline(DEADLINE);
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
    let config = || RedisConfig::cluster(seeds.clone()).prefix("live").deadline(DEADLINE);
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
    let backend = Backend::redis_with(RedisConfig::new(server.url()).prefix("own").deadline(DEADLINE)).unwrap();
    let api = backend.token_bucket("api", 0.001, 1).unwrap();
    for round in 0..150u64 {
        backend.set_limit_blocking("api", &token_bucket(100 + round), None).unwrap();
        backend.set_limit_blocking("api", &token_bucket(1000 + round), Some("vip")).unwrap();
        assert_eq!(api.peek_blocking(None).unwrap().limit, 100 + round, "round {round}");
        assert_eq!(api.peek_blocking(Some("vip")).unwrap().limit, 1000 + round, "round {round}");
        std::thread::sleep(Duration::from_millis(3));
    }
}

/// Redis loses the override table's history in `lose` (a restart without persistence, a
/// `FLUSHALL`, the table evicted); a process that ran all along applies the next override (it
/// used to keep the old overrides and ignore every new one until the counter passed its old
/// value).
fn an_override_after_data_loss_reaches_a_running_process(lose: impl FnOnce(&mut RedisServer)) {
    let mut server = RedisServer::start();
    let (ops, worker) = backends(&server.url(), "lost");
    let api = worker.token_bucket("api", 0.001, 2).unwrap();
    for round in 0..50 {
        ops.set_limit_blocking("api", &token_bucket(100 + round), None).unwrap();
    }
    eventually("the worker applies the 50th override", || api.peek_blocking(None).unwrap().limit == 149);
    lose(&mut server);
    eventually("the lost table is forgotten", || api.peek_blocking(None).map(|d| d.limit).ok() == Some(2));
    ops.set_limit_blocking("api", &token_bucket(7), None).unwrap();
    eventually("the worker applies the override set after the loss", || {
        api.peek_blocking(None).map(|d| d.limit).ok() == Some(7)
    });
    eventually("the worker registers again what Redis lost", || {
        ops.limiters_blocking().unwrap().iter().any(|l| l.name == "api" && l.overrides.len() == 1)
    });
}

#[test]
fn an_override_after_a_restart_without_persistence_reaches_a_running_process() {
    an_override_after_data_loss_reaches_a_running_process(|server| server.restart());
}

#[test]
fn an_override_after_flushall_reaches_a_running_process() {
    an_override_after_data_loss_reaches_a_running_process(|server| {
        server.cli(&["FLUSHALL"]);
    });
}

/// `allkeys-lru` evicts keys one by one: evicting the override table must not leave a version
/// behind that makes running processes ignore the next table.
#[test]
fn an_override_after_the_table_is_evicted_reaches_a_running_process() {
    an_override_after_data_loss_reaches_a_running_process(|server| {
        let keys = server.cli(&["--scan", "--pattern", "lost:{registry}:overrides*"]);
        assert!(!keys.is_empty(), "the override table is where it is expected");
        for key in keys.lines() {
            server.cli(&["DEL", key]);
        }
    });
}

/// One name, one kind: a second kind under a name does not take the registry entry over while
/// a process of the first kind is alive, in this process or another; the entry reports it, and an
/// override of the second kind is refused naming both kinds. Each keeps its own state.
#[test]
fn one_name_has_one_kind() {
    let server = RedisServer::start();
    let (first, second) = backends(&server.url(), "kinds");
    let bucket = first.token_bucket("api", 1.0, 5).unwrap();
    first.flush_blocking().unwrap();
    let window = second.window("api", 1, MINUTE).unwrap();
    assert!(window.check_blocking(None, 1).unwrap().allowed, "its own state, its own spec");
    assert!(!window.check_blocking(None, 1).unwrap().allowed);
    assert!(bucket.check_blocking(None, 1).unwrap().allowed, "the bucket's state is apart");
    second.flush_blocking().unwrap();
    let listed = first.limiters_blocking().unwrap();
    let [info] = &listed[..] else { panic!("one entry per name: {listed:?}") };
    assert_eq!((info.kind.as_str(), info.processes), ("token_bucket", 1));
    let conflict = info.conflict.as_deref().unwrap_or_default();
    assert!(conflict.contains("window"), "the entry reports the other kind: {conflict:?}");
    let err = first.set_limit_json_blocking("api", r#"{"kind":"window","limit":9,"interval":60}"#, None).unwrap_err();
    assert!(err.to_string().contains("token_bucket") && err.to_string().contains("window"), "{err}");

    // Both kinds in one process: the same rule.
    let (third, _) = backends(&server.url(), "kinds-one");
    let _bucket = third.token_bucket("api", 1.0, 5).unwrap();
    third.flush_blocking().unwrap();
    let _window = third.window("api", 1, MINUTE).unwrap();
    third.flush_blocking().unwrap();
    let listed = third.limiters_blocking().unwrap();
    let [info] = &listed[..] else { panic!("one entry per name: {listed:?}") };
    assert_eq!(info.kind, "token_bucket");
    assert!(info.conflict.as_deref().unwrap_or_default().contains("window"), "{info:?}");
}

/// An override set before any process used its name is listed as waiting for a first user;
/// a first user of another kind is reported, one of its kind takes it.
#[test]
fn an_override_ahead_of_its_first_user_is_listed_as_waiting() {
    let server = RedisServer::start();
    let (ops, worker) = backends(&server.url(), "ahead");
    ops.set_limit_json_blocking("op_x", r#"{"kind":"window","limit":7,"interval":60}"#, None).unwrap();
    ops.set_limit_json_blocking("op_y", r#"{"kind":"window","limit":7,"interval":60}"#, None).unwrap();
    let listed = ops.limiters_blocking().unwrap();
    assert_eq!(
        listed.iter().map(|l| (l.name.as_str(), l.kind.as_str(), l.waiting)).collect::<Vec<_>>(),
        [("op_x", "window", true), ("op_y", "window", true)]
    );
    assert_eq!(listed[0].overrides.len(), 1);
    let x = worker.window("op_x", 1, MINUTE).unwrap();
    let y = worker.token_bucket("op_y", 1.0, 1).unwrap();
    eventually("the first user applies the override", || x.peek_blocking(None).unwrap().limit == 7);
    assert_eq!(y.peek_blocking(None).unwrap().limit, 1, "an override of another kind does not apply");
    worker.flush_blocking().unwrap();
    let listed = ops.limiters_blocking().unwrap();
    let x_info = listed.iter().find(|l| l.name == "op_x").unwrap();
    assert!(!x_info.waiting && x_info.conflict.is_none(), "{x_info:?}");
    let y_info = listed.iter().find(|l| l.name == "op_y").unwrap();
    assert!(!y_info.waiting && y_info.kind == "token_bucket", "{y_info:?}");
    let conflict = y_info.conflict.as_deref().unwrap_or_default();
    assert!(conflict.contains("window") && conflict.contains("token_bucket"), "reported: {conflict:?}");
}

/// A limiter object dropped before the next tick is registered and its counts flushed: `flush()`
/// after it leaves the name in `limiters()` and its checks in the fleet's metrics (it used to be
/// forgotten, so `ratekeeper reset x` then failed).
#[test]
fn a_dropped_limiter_is_registered_and_counted_by_flush() {
    let server = RedisServer::start();
    let (b, ops) = backends(&server.url(), "dropped");
    assert!(b.window("x", 7, MINUTE).unwrap().check_blocking(None, 1).unwrap().allowed);
    b.flush_blocking().unwrap();
    let listed = ops.limiters_blocking().unwrap();
    assert_eq!(listed.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["x"]);
    let fleet = ops.metrics_blocking(true).unwrap();
    let (_, _, x) = fleet.iter().find(|(name, ..)| name == "x").expect("x's counts were flushed");
    assert_eq!(x.allowed, 1);
    // Once registered and flushed, the dropped object is let go: nothing more to send.
    assert!(b.metrics_blocking(false).unwrap().is_empty(), "{:?}", b.metrics_blocking(false));
}

/// A cost the limiter's own spec allows but a live override's smaller limit never can is
/// refused, not an error: an operator lowering a limit must not turn a valid call into a panic
/// or a script error. The exact sliding window refuses it until every admission now in the
/// window has left (a whole interval when none is), on memory and on Redis alike. (It panicked
/// on memory, an index past the log's end, found by `ffi-c/tests/fuzz_abi.c` with seed 27; the
/// script failed on an empty log.)
#[test]
fn a_cost_above_an_overrides_limit_is_refused_on_memory_and_redis() {
    let server = RedisServer::start();
    let redis = Backend::redis_with(RedisConfig::new(server.url()).prefix("over").deadline(DEADLINE)).unwrap();
    for backend in [Backend::memory(), redis] {
        let limiter = backend.window("w", 10, MINUTE).unwrap();
        backend
            .set_limit_blocking(
                "w",
                &LimiterSpec::Window { windows: vec![ratekeeper::WindowLimit { limit: 2, interval: MINUTE }] },
                None,
            )
            .unwrap();
        let refused = eventually_decided(&limiter, "empty", 5);
        assert!(!refused.allowed, "{refused:?}");
        assert_eq!(refused.retry_after, MINUTE, "an empty window: a whole interval");
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
        let refused = limiter.check_blocking(Some("k"), 5).unwrap();
        assert!(!refused.allowed, "{refused:?}");
        assert!(refused.retry_after > Duration::ZERO && refused.retry_after <= MINUTE, "{refused:?}");
    }
}

/// The decision of a check of `cost` on `key` once the override is in effect (a Redis backend
/// reads it from its poller).
fn eventually_decided(limiter: &ratekeeper::Limiter, key: &str, cost: u64) -> ratekeeper::Decision {
    let mut last = None;
    eventually("the override", || {
        let d = limiter.check_blocking(Some(key), cost).unwrap();
        let done = !d.allowed;
        last = Some(d);
        done
    });
    last.unwrap()
}

/// Every counting kind refuses a cost above a live override's smaller limit (never an error or
/// a panic) with a `retry_after` above zero, on a used key and on a fresh one, on memory and on
/// Redis. (The fixed and sliding windows refused with a zero `retry_after` on memory, and on
/// Redis for a fresh key: an `acquire` would have spun until its timeout.)
#[test]
fn every_kind_refuses_a_cost_above_an_overrides_limit() {
    let server = RedisServer::start();
    let pairs = [
        (r#"{"kind":"bucket","limit":10,"interval":60}"#, r#"{"kind":"bucket","limit":2,"interval":60}"#),
        (r#"{"kind":"windows","windows":[[10,60],[20,600]]}"#, r#"{"kind":"windows","windows":[[2,60],[3,600]]}"#),
        (r#"{"kind":"sliding_window","limits":[[60,10]]}"#, r#"{"kind":"sliding_window","limits":[[60,2]]}"#),
        (r#"{"kind":"token_bucket","rate":1,"capacity":10}"#, r#"{"kind":"token_bucket","rate":1,"capacity":2}"#),
        (r#"{"kind":"leaky","size":10,"drain":10}"#, r#"{"kind":"leaky","size":2,"drain":10}"#),
        (r#"{"kind":"points","capacity":10,"refill":10}"#, r#"{"kind":"points","capacity":2,"refill":10}"#),
        (
            r#"{"kind":"calendar","limit":10,"period":"day","tz":"UTC"}"#,
            r#"{"kind":"calendar","limit":2,"period":"day","tz":"UTC"}"#,
        ),
    ];
    let redis = Backend::redis_with(RedisConfig::new(server.url()).prefix("kinds").deadline(DEADLINE)).unwrap();
    let mut wrong = Vec::new();
    for (b, backend) in [Backend::memory(), redis].into_iter().enumerate() {
        for (i, (own, smaller)) in pairs.iter().enumerate() {
            let name = format!("k{i}");
            let limiter = backend.limiter_from_json(&name, own).unwrap();
            backend.set_limit_json_blocking(&name, smaller, None).unwrap();
            assert!(limiter.check_blocking(Some("a"), 1).unwrap().allowed, "{own}");
            let refused = eventually_decided(&limiter, "a", 5);
            let fresh = limiter.check_blocking(Some("fresh"), 5).unwrap();
            for d in [refused, fresh] {
                if d.allowed || d.retry_after == Duration::ZERO {
                    wrong.push(format!("{} {own}: {d:?}", ["memory", "redis"][b]));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The metrics page's row for `ratekeeper_checks_total` names every outcome label the exporter
/// can emit: its HELP text, generated from the one table of outcomes, lists them.
#[test]
fn the_metrics_page_lists_every_outcome_label_prometheus_emits() {
    let backend = Backend::memory();
    backend.token_bucket("docs", 1.0, 1).unwrap().check_blocking(Some("x"), 1).unwrap();
    let text = backend.prometheus_blocking(false).unwrap();
    let help = text
        .lines()
        .find(|line| line.starts_with("# HELP ratekeeper_checks_total "))
        .unwrap_or_else(|| panic!("no HELP line for ratekeeper_checks in {text}"));
    let labels: Vec<&str> = help
        .trim_start_matches("# HELP ratekeeper_checks_total Checks by outcome: ")
        .trim_end_matches('.')
        .split("), ")
        .filter_map(|part| part.split(" (").next())
        .collect();
    assert!(labels.len() >= 6, "{help}");
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/src/operating/metrics.md")).unwrap();
    let row = page.lines().find(|line| line.starts_with("| `ratekeeper_checks_total`")).unwrap();
    for label in labels {
        assert!(row.contains(&format!("`{label}`")), "the page's row lacks `{label}`: {row}");
    }
}
