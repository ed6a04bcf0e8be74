//! The deny cache on a real Redis server: refusals remembered in process answer later checks
//! with no round trip (counted by the server's `INFO commandstats`), until their `retry_after`
//! has passed or something this process does changes the key (reset, unblock, a live
//! override); a cheaper call still asks Redis; it is off unless the backend or the limiter
//! turns it on.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, LimiterSpec, ManualClock};
use support::RedisServer;

const START: u64 = 1_800_000_000_000_000;
const SECOND: Duration = Duration::from_secs(1);

/// Script calls the server ran since the last `CONFIG RESETSTAT`.
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    ["evalsha", "eval"].iter().map(|cmd| support::command_calls(&stats, cmd)).sum()
}

fn manual(server: &RedisServer, prefix: &str, deny_cache: bool) -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    let config =
        support::redis_config(server.url()).prefix(prefix).clock(Arc::new(clock.clone())).deny_cache(deny_cache);
    (Backend::redis_with(config).unwrap(), clock)
}

#[test]
fn refusals_are_answered_in_process_until_retry_after() {
    let server = RedisServer::start();
    let (backend, clock) = manual(&server, "dc", true);
    let limiter = backend.token_bucket("api", 1.0, 2).unwrap();
    assert!(limiter.deny_cache());
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let refused = limiter.check_blocking(Some("k"), 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, SECOND);

    server.cli(&["CONFIG", "RESETSTAT"]);
    clock.advance(Duration::from_millis(400));
    for _ in 0..100 {
        let local = limiter.check_blocking(Some("k"), 1).unwrap();
        assert!(!local.allowed);
        assert_eq!(local.retry_after, Duration::from_millis(600), "{local:?}");
        assert_eq!(local.decided_at_micros, refused.decided_at_micros + 400_000);
    }
    let local = ratekeeper::block_on(limiter.check(Some("k"), 2)).unwrap();
    assert!(!local.allowed, "a dearer call is refused locally too");
    assert_eq!(script_calls(&server), 0, "no round trip for a remembered refusal");
    let m = limiter.metrics();
    assert_eq!((m.refused_locally, m.refused), (101, 102), "{m:?}");
    assert!(backend.prometheus_blocking(false).unwrap().contains("ratekeeper_refused_locally_total{"));

    // A peek and another key still ask Redis.
    assert!(!limiter.peek_blocking(Some("k")).unwrap().allowed);
    assert!(limiter.check_blocking(Some("other"), 1).unwrap().allowed);
    assert_eq!(script_calls(&server), 2);

    // At retry_after the entry has ended: the call goes to Redis and is admitted.
    clock.advance(Duration::from_millis(600));
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(script_calls(&server), 3);
}

#[test]
fn a_cheaper_call_still_asks_redis() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "cheap", true);
    let limiter = backend.points("credits", 10, Duration::from_secs(10)).unwrap();
    assert!(limiter.check_blocking(Some("k"), 8).unwrap().allowed);
    assert!(!limiter.check_blocking(Some("k"), 5).unwrap().allowed, "5 do not fit in 2");
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!limiter.check_blocking(Some("k"), 6).unwrap().allowed);
    assert_eq!(script_calls(&server), 0);
    assert!(limiter.check_blocking(Some("k"), 2).unwrap().allowed, "2 fit: Redis was asked");
    assert_eq!(script_calls(&server), 1);
}

#[test]
fn reset_unblock_and_an_override_end_an_entry() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "ends", true);
    let limiter = backend.bucket("logins", 1, Duration::from_secs(3600)).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    limiter.reset_blocking(Some("k")).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "reset forgets the remembered refusal");

    // A blocked key is remembered with the block's retry_after; unblock forgets it.
    let strict = limiter.with_block_for(Some(7200 * SECOND)).unwrap();
    let refused = strict.check_blocking(Some("k"), 1).unwrap();
    assert_eq!(refused.retry_after, 7200 * SECOND);
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(strict.check_blocking(Some("k"), 1).unwrap().retry_after, 7200 * SECOND);
    assert_eq!(script_calls(&server), 0);
    assert!(strict.unblock_blocking(Some("k")).unwrap());
    // (The unblock told the other processes with a script of its own.)
    server.cli(&["CONFIG", "RESETSTAT"]);
    let after = limiter.check_blocking(Some("k"), 1).unwrap();
    assert_eq!(after.retry_after, 3600 * SECOND, "the limit's own refusal: {after:?}");
    assert_eq!(script_calls(&server), 1, "Redis was asked");

    // A live override set in this process applies at once: the remembered refusal is stale.
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(script_calls(&server), 0);
    let wider = LimiterSpec::Bucket { limit: 5, interval: Duration::from_secs(3600) };
    backend.set_limit_blocking("logins", &wider, None).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "the override's limit decides");
}

#[test]
fn off_unless_the_backend_or_the_limiter_says_so() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "off", false);
    let plain = backend.token_bucket("api", 1.0, 1).unwrap();
    assert!(!plain.deny_cache());
    assert!(plain.check_blocking(None, 1).unwrap().allowed);
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        assert!(!plain.check_blocking(None, 1).unwrap().allowed);
    }
    assert_eq!(script_calls(&server), 3, "every refusal was a round trip");
    let cached = plain.with_deny_cache(true).unwrap();
    assert!(cached.deny_cache());
    for _ in 0..3 {
        assert!(!cached.check_blocking(None, 1).unwrap().allowed);
    }
    assert_eq!(script_calls(&server), 4, "one round trip, then the cache");
    assert!(!backend.concurrent("mutex", 1, SECOND).unwrap().with_deny_cache(true).unwrap().deny_cache());
    let memory = Backend::memory();
    assert!(!memory.token_bucket("m", 1.0, 1).unwrap().with_deny_cache(true).unwrap().deny_cache());
    let err = Backend::redis_with(support::redis_config(server.url()).deny_cache_max_entries(0)).unwrap_err();
    assert_eq!(err.parameter(), Some("deny_cache_max_entries"));
}

/// A limiter in shadow mode never refuses, so its would-be refusals are not remembered: a deny
/// cache that kept them would refuse from memory what shadow mode admits. Switched to
/// enforcing, the same limiter remembers its refusals again.
#[test]
fn a_shadow_limiter_remembers_no_refusal() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "dcs", true);
    let shadow = backend.token_bucket("api", 1.0, 1).unwrap().with_shadow(true).unwrap();
    assert!(shadow.check_blocking(Some("k"), 1).unwrap().allowed);
    for _ in 0..5 {
        let d = shadow.check_blocking(Some("k"), 1).unwrap();
        assert!(d.allowed && d.shadow_refused, "{d:?}");
    }
    assert_eq!(shadow.metrics().refused_locally, 0);
    assert_eq!(shadow.metrics().shadow_refused, 5);

    let enforcing = shadow.with_shadow(false).unwrap();
    assert!(!enforcing.check_blocking(Some("k"), 1).unwrap().allowed);
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!enforcing.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(script_calls(&server), 0, "the enforcing limiter's second refusal is answered in process");
    // The shadow limiter shares the key but not the enforcing one's decisions: still admitted.
    let d = shadow.check_blocking(Some("k"), 1).unwrap();
    assert!(d.allowed && d.shadow_refused, "{d:?}");
}

/// `resume` in this process forgets the key's remembered refusal at once, as `reset` and
/// `unblock` do. (Before, a key paused then resumed was still refused from the cache until the
/// pause's end.)
#[test]
fn resume_ends_an_entry() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "resume", true);
    let limiter = backend.bucket("upstream", 5, Duration::from_secs(3600)).unwrap();
    limiter.pause_blocking(Some("k"), 600 * SECOND).unwrap();
    assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 600 * SECOND);
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert_eq!(script_calls(&server), 0, "the paused refusal is remembered");
    assert!(limiter.resume_blocking(Some("k")).unwrap());
    let back = limiter.check_blocking(Some("k"), 1).unwrap();
    assert!(back.allowed, "resumed, yet refused from the cache: {back:?}");
}

/// What another process does to a key (an operator's `unblock`, `reset` or `resume`, from the
/// CLI or the Limits page) reaches this process's remembered refusals within its live poll:
/// the key is let back in without waiting out the remembered `retry_after`. Two backends on one
/// server stand for two processes; their manual clocks never move, so only the poll can end an
/// entry. (Before, the application kept refusing from its cache until the refusal's
/// `retry_after`: up to the block's or the pause's whole length.)
#[test]
fn another_processs_unblock_reset_and_resume_end_an_entry() {
    let server = RedisServer::start();
    let (app, _app_clock) = manual(&server, "fleet", true);
    let (operator, _operator_clock) = manual(&server, "fleet", true);
    let hour = Duration::from_secs(3600);
    let limiter = app.bucket("logins", 2, hour).unwrap();
    let ops = operator.bucket("logins", 2, hour).unwrap();
    let remembered = |key: &str| {
        server.cli(&["CONFIG", "RESETSTAT"]);
        let d = limiter.check_blocking(Some(key), 1).unwrap();
        !d.allowed && script_calls(&server) == 0
    };
    let let_back_in = |what: &str, key: &str| {
        support::wait_until(what, Duration::from_secs(30), || limiter.check_blocking(Some(key), 1).unwrap().allowed);
    };

    ops.block_blocking(Some("blocked"), 2 * hour).unwrap();
    assert!(!limiter.check_blocking(Some("blocked"), 1).unwrap().allowed);
    assert!(remembered("blocked"));
    assert!(ops.unblock_blocking(Some("blocked")).unwrap());
    let_back_in("the operator's unblock to reach the application", "blocked");

    ops.pause_blocking(Some("paused"), hour).unwrap();
    assert!(!limiter.check_blocking(Some("paused"), 1).unwrap().allowed);
    assert!(remembered("paused"));
    assert!(ops.resume_blocking(Some("paused")).unwrap());
    let_back_in("the operator's resume to reach the application", "paused");

    for _ in 0..2 {
        assert!(limiter.check_blocking(Some("spent"), 1).unwrap().allowed);
    }
    assert!(!limiter.check_blocking(Some("spent"), 1).unwrap().allowed);
    assert!(remembered("spent"));
    ops.reset_blocking(Some("spent")).unwrap();
    let_back_in("the operator's reset to reach the application", "spent");
}

/// Limiters of one name and kind with another spec, or another key layout (`colocate`), keep
/// their remembered refusals apart: each is decided by its own spec on its own state. (Before,
/// the cache was keyed by kind, name and key alone: a refusal of one answered for the other.)
#[test]
fn limiters_of_one_name_with_other_specs_or_layouts_keep_their_refusals_apart() {
    let server = RedisServer::start();
    let (backend, _clock) = manual(&server, "specs", true);
    let small = backend.token_bucket("api", 1.0 / 3600.0, 1).unwrap();
    assert!(small.check_blocking(Some("t:k"), 1).unwrap().allowed);
    assert!(!small.check_blocking(Some("t:k"), 1).unwrap().allowed);
    // Same name and kind, another spec: the same state, decided by its own capacity.
    let large = backend.token_bucket("api", 1.0 / 3600.0, 100).unwrap();
    let d = large.check_blocking(Some("t:k"), 1).unwrap();
    assert!(d.allowed, "the larger spec has room: {d:?}");
    // Same spec, co-located: other keys in Redis, fresh state.
    let colocated = small.with_colocate(ratekeeper::Colocate::Tenant);
    let d = colocated.check_blocking(Some("t:k"), 1).unwrap();
    assert!(d.allowed, "the co-located limiter's own state has room: {d:?}");
    assert!(!small.check_blocking(Some("t:k"), 1).unwrap().allowed);
}
