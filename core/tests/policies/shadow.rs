//! Shadow mode: a limiter (or one key, by a live override) that admits the calls it would refuse,
//! marks them `shadow_refused` and counts them, on the memory backend, a real redis-server and a
//! 3-master Redis Cluster. Two `Backend` objects on one server stand for two processes. The
//! decisions' figures are in `tests/vectors/shadow.json`; this file covers what vectors cannot
//! express: waiting calls, overrides, metrics and the Prometheus exposition.

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::{Backend, LimiterConfig, Policy, RedisConfig};
use support::{RedisCluster, RedisServer};

const HOUR: Duration = Duration::from_secs(3600);
/// A hang guard, not a speed target.
const GIVE_UP: Duration = Duration::from_secs(20);

/// Polls `probe` until it holds; panics with `what` if it never does.
fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let started = Instant::now();
    while !probe() {
        assert!(started.elapsed() < GIVE_UP, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_shadow_option_round_trips_through_the_spec() {
    let backend = Backend::memory();
    let shadow = backend.leaky("s", 2, HOUR).unwrap().with_shadow(true).unwrap();
    assert!(shadow.shadow());
    assert_eq!(shadow.spec_json(), r#"{"kind":"leaky","size":2,"drain":3600,"shadow":true}"#);
    let rebuilt = backend.limiter_from_json("s", &shadow.spec_json()).unwrap();
    assert!(rebuilt.shadow());
    let enforcing = rebuilt.with_shadow(false).unwrap();
    assert_eq!(enforcing.spec_json(), r#"{"kind":"leaky","size":2,"drain":3600}"#, "no field when false");
    assert!(!backend
        .limiter_from_config("e", LimiterConfig::from_json(&enforcing.spec_json()).unwrap())
        .unwrap()
        .shadow());
}

#[test]
fn a_shadow_limiter_never_waits_and_runs_every_block() {
    let backend = Backend::memory();
    let limiter = backend.leaky("jobs", 1, HOUR).unwrap().with_shadow(true).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let started = Instant::now();
    let d = limiter.acquire_blocking(Some("k"), 1, Some(HOUR)).unwrap();
    assert!(started.elapsed() < HOUR / 2, "acquire returned without waiting out the hour");
    assert!(d.allowed && d.shadow_refused, "{d:?}");
    let minute = Duration::from_secs(60);
    assert!(d.retry_after > HOUR - minute && d.retry_after <= HOUR, "retry_after says what enforcement would: {d:?}");
    let ran = limiter.within_limit_blocking(Some("k"), 1, Policy::Raise, |permit| permit.decision().shadow_refused);
    assert_eq!(ran.unwrap(), Some(true), "the block runs, and sees the decision");
    let m = limiter.metrics();
    assert_eq!((m.allowed, m.refused, m.shadow_refused), (1, 0, 2), "{m:?}");
    assert_eq!(m.checks(), 3);
    // The enforcing twin shares the state the shadow limiter built: one call, still refused.
    let enforcing = limiter.with_shadow(false).unwrap();
    assert!(!enforcing.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(limiter.shadow(), "a copy's option does not change the original");
}

#[test]
fn a_shadow_concurrent_limiter_grants_no_lease_to_a_would_be_refusal() {
    let backend = Backend::memory();
    let slots = backend.concurrent("slots", 1, HOUR).unwrap().with_shadow(true).unwrap();
    let held = slots.check_blocking(Some("k"), 1).unwrap();
    assert!(held.lease.is_some());
    let started = Instant::now();
    let extra = slots.acquire_blocking(Some("k"), 1, Some(HOUR)).unwrap();
    assert!(started.elapsed() < HOUR / 2);
    assert!(extra.allowed && extra.shadow_refused && extra.lease.is_none(), "{extra:?}");
    // The block of a would-be refusal runs, holding nothing: nothing is released after it.
    let ran = slots.within_limit_blocking(Some("k"), 1, Policy::Raise, |p| p.decision().lease.is_none()).unwrap();
    assert_eq!(ran, Some(true));
    assert_eq!(slots.concurrent_use_blocking(Some("k")).unwrap().held, 1, "only the real lease is held");
    slots.release_blocking(Some("k"), &held.lease.unwrap()).unwrap();
    let m = slots.metrics();
    assert_eq!((m.held, m.shadow_refused), (1, 2), "{m:?}");
    assert!(slots.check_blocking(Some("k"), 1).unwrap().lease.is_some());
}

#[test]
fn a_memory_override_switches_shadow_for_the_limiter_or_one_key() {
    let backend = Backend::memory();
    let api = backend.leaky("api", 1, HOUR).unwrap();
    for key in ["a", "b"] {
        assert!(api.check_blocking(Some(key), 1).unwrap().allowed);
    }
    backend.set_limit_json_blocking("api", r#"{"kind":"leaky","size":1,"drain":3600,"shadow":true}"#, None).unwrap();
    backend.set_limit_json_blocking("api", r#"{"kind":"leaky","size":1,"drain":3600}"#, Some("b")).unwrap();
    assert!(api.check_blocking(Some("a"), 1).unwrap().shadow_refused, "the limiter's override shadows");
    assert!(!api.check_blocking(Some("b"), 1).unwrap().allowed, "the key's override enforces");
    backend.clear_limit_blocking("api", None).unwrap();
    assert!(!api.check_blocking(Some("a"), 1).unwrap().allowed, "back to its own spec: enforcing");
    let listed = backend.limiters_blocking().unwrap();
    assert_eq!(
        listed[0].overrides,
        vec![(Some("b".to_owned()), r#"{"kind":"leaky","size":1,"drain":3600}"#.to_owned())]
    );
}

/// An override flipping shadow mode reaches another process (a second backend on the same
/// Redis), per limiter and per key, and the fleet's metrics count the shadow refusals.
fn an_override_flips_shadow_in_every_process(ops: Backend, worker: Backend) {
    let api = worker.leaky("api", 1, HOUR).unwrap().with_shadow(true).unwrap();
    for key in ["k1", "k2"] {
        assert!(api.check_blocking(Some(key), 1).unwrap().allowed);
        assert!(api.check_blocking(Some(key), 1).unwrap().shadow_refused);
    }
    ops.set_limit_json_blocking("api", r#"{"kind":"leaky","size":1,"drain":3600}"#, Some("k2")).unwrap();
    eventually("the worker enforces k2", || !api.check_blocking(Some("k2"), 1).unwrap().allowed);
    assert!(api.check_blocking(Some("k1"), 1).unwrap().shadow_refused, "k1 stays in shadow mode");
    ops.set_limit_json_blocking("api", r#"{"kind":"leaky","size":1,"drain":3600}"#, None).unwrap();
    eventually("the worker enforces k1", || !api.check_blocking(Some("k1"), 1).unwrap().allowed);
    ops.set_limit_json_blocking("api", r#"{"kind":"leaky","size":1,"drain":3600,"shadow":true}"#, Some("k2")).unwrap();
    eventually("the worker shadows k2 again", || api.check_blocking(Some("k2"), 1).unwrap().shadow_refused);

    worker.flush_blocking().unwrap();
    let listed = ops.limiters_blocking().unwrap();
    let info = listed.iter().find(|l| l.name == "api").expect("api is registered");
    assert_eq!(info.spec, r#"{"kind":"leaky","size":1,"drain":3600,"shadow":true}"#, "the registry shows shadow mode");
    assert!(info
        .overrides
        .contains(&(Some("k2".to_owned()), r#"{"kind":"leaky","size":1,"drain":3600,"shadow":true}"#.to_owned())));
    let mine = api.metrics();
    assert!(mine.shadow_refused >= 4 && mine.refused >= 2, "{mine:?}");
    let fleet = ops.metrics_blocking(true).unwrap();
    let (_, _, counted) = fleet.iter().find(|(name, ..)| name == "api").unwrap();
    assert_eq!((counted.shadow_refused, counted.refused), (mine.shadow_refused, mine.refused));
    let text = ops.prometheus_blocking(true).unwrap();
    let line = format!(
        r#"ratekeeper_checks_total{{limiter="api",kind="leaky",outcome="shadow_refused"}} {}"#,
        mine.shadow_refused
    );
    assert!(text.contains(&line), "{text}");
}

#[test]
fn an_override_flips_shadow_in_every_process_standalone() {
    let server = RedisServer::start();
    let config = || support::redis_config(server.url()).prefix("shadow");
    an_override_flips_shadow_in_every_process(
        Backend::redis_with(config()).unwrap(),
        Backend::redis_with(config()).unwrap(),
    );
}

#[test]
fn an_override_flips_shadow_in_every_process_on_a_cluster() {
    let cluster = RedisCluster::start();
    let config = || RedisConfig::cluster(cluster.seeds()).prefix("shadow");
    an_override_flips_shadow_in_every_process(
        Backend::redis_with(config()).unwrap(),
        Backend::redis_with(config()).unwrap(),
    );
}

#[test]
fn a_leased_limiter_in_shadow_mode_admits_its_remembered_refusals() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(support::redis_config(server.url()).prefix("leased")).unwrap();
    let spec = r#"{"kind":"leased","rate":0.001,"capacity":2,"chunk":2,"lease_ttl":60,"shadow":true}"#;
    let limiter = backend.limiter_from_json("llm", spec).unwrap();
    let decisions: Vec<_> = (0..5).map(|_| limiter.check_blocking(Some("k"), 1).unwrap()).collect();
    assert!(decisions.iter().all(|d| d.allowed), "{decisions:?}");
    let shadowed = decisions.iter().filter(|d| d.shadow_refused).count();
    assert_eq!(shadowed, 3, "{decisions:?}");
    let m = limiter.metrics();
    assert_eq!((m.allowed, m.refused, m.shadow_refused), (2, 0, 3), "{m:?}");
}

#[test]
fn a_shadow_limiter_on_redis_never_waits() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(support::redis_config(server.url()).prefix("wait")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let slots = backend.concurrent("slots", 1, HOUR).unwrap().with_shadow(true).unwrap();
    let held = slots.check_blocking(None, 1).unwrap();
    let started = Instant::now();
    let extra = runtime.block_on(slots.acquire(None, 1, Some(HOUR))).unwrap();
    assert!(started.elapsed() < HOUR / 2);
    assert!(extra.shadow_refused && extra.lease.is_none(), "{extra:?}");
    let use_ = slots.concurrent_use_blocking(None).unwrap();
    assert_eq!((use_.held, use_.waiters), (1, 0), "a shadowed call is never counted as a waiter");
    slots.release_blocking(None, &held.lease.unwrap()).unwrap();
}

#[test]
fn a_would_be_refusal_starts_the_block_enforcement_would_start() {
    let backend = Backend::memory();
    let enforcing = backend.leaky("login", 1, Duration::from_secs(1)).unwrap().with_block_for(Some(HOUR)).unwrap();
    let shadow = enforcing.with_shadow(true).unwrap();
    assert!(shadow.check_blocking(Some("k"), 1).unwrap().allowed);
    let d = shadow.check_blocking(Some("k"), 1).unwrap();
    assert!(d.allowed && d.shadow_refused, "{d:?}");
    assert!(d.retry_after > HOUR / 2, "the block it reports: {d:?}");
    let refused = enforcing.check_blocking(Some("k"), 1).unwrap();
    assert!(!refused.allowed && refused.retry_after > HOUR / 2, "the enforcing twin is blocked: {refused:?}");
    assert!(shadow.check_blocking(Some("k"), 1).unwrap().shadow_refused, "the block is shadowed too");
}

#[test]
fn a_shadow_refusal_carries_no_settle_ticket() {
    let backend = Backend::memory();
    let limiter = backend.token_bucket("llm", 0.001, 10).unwrap().with_shadow(true).unwrap();
    let admitted = limiter.check_blocking(Some("k"), 10).unwrap();
    assert!(admitted.settle.is_some(), "{admitted:?}");
    let shadowed = limiter.check_blocking(Some("k"), 5).unwrap();
    assert!(shadowed.shadow_refused, "{shadowed:?}");
    assert!(shadowed.settle.is_none(), "it charged nothing, so a settle must not refund it: {shadowed:?}");
}
