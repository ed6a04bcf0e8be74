//! Settles against a real `redis-server`: a settle whose reply was lost (the server stopped
//! after the request was sent, so the call timed out, then resumed and ran it) and that the
//! caller retries applies once; settles of one decision from many threads apply once; on a
//! 3-master Cluster too.

use crate::support;

use std::time::Duration;

use ratekeeper::{Backend, Limiter, RedisConfig};
use support::{settle_retried_after_a_lost_reply, RedisServer, LOST_REPLY_DEADLINE};

/// A token bucket that refills so slowly that time never shows in `remaining` during a test.
fn limiter(backend: &Backend, name: &str) -> Limiter {
    backend.token_bucket(name, 0.001, 10).expect("a limiter")
}

fn remaining(limiter: &Limiter, key: &str) -> u64 {
    limiter.peek_blocking(Some(key)).expect("peek").remaining
}

#[test]
fn a_settle_retried_after_its_reply_was_lost_applies_once() {
    let server = RedisServer::start();
    let config = RedisConfig::new(server.url()).prefix("settle-lost").deadline(LOST_REPLY_DEADLINE);
    let backend = Backend::redis_with(config).expect("a Redis backend");
    for blocking in [true, false] {
        // A refund (8 checked, 3 used), then a charge (2 checked, 6 used).
        for (charged, actual) in [(8, 3), (2, 6)] {
            let make = |name: &str| limiter(&backend, name);
            settle_retried_after_a_lost_reply(&server, make, Some("k"), (10, charged, actual), blocking);
        }
    }
}

/// Settles of one decision raced from many threads, on a Cluster, apply once; the record of
/// the id lives in the identity's hash tag (one slot) with a TTL.
#[test]
fn concurrent_settles_of_one_decision_apply_once_on_a_cluster() {
    let cluster = support::RedisCluster::start();
    let config = RedisConfig::cluster(cluster.seeds()).prefix("settle-race");
    let backend = Backend::redis_with(config).expect("a Cluster backend");
    let window = backend.window("w", 10, Duration::from_secs(3600)).expect("a limiter");
    let bucket = limiter(&backend, "tb");
    for limiter in [&window, &bucket] {
        for key in ["a", "b", "c"] {
            let decision = limiter.check_blocking(Some(key), 9).expect("check");
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| limiter.settle_blocking(&decision, 1).expect("settle"));
                }
            });
            assert_eq!(remaining(limiter, key), 9, "{} {key}: refunded 8 once", limiter.name());
        }
    }
}

/// A settle is not an admission: with Redis gone, it is refused with the backend's error under
/// every failure policy (`fail_open` charged nothing to settle; the in-memory `fallback` never
/// held the charge the ticket names), so that the caller knows the correction did not apply and
/// can retry it. The retry, once Redis is back (empty: no persistence), is answered by Redis.
#[test]
fn a_settle_with_redis_down_errors_under_every_failure_policy() {
    use ratekeeper::{ErrorKind, FailurePolicy};
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen, FailurePolicy::Fallback { divisor: 2 }] {
        let mut server = RedisServer::start();
        let config =
            RedisConfig::new(server.url()).prefix("settle-down").deadline(LOST_REPLY_DEADLINE).failure_policy(policy);
        let backend = Backend::redis_with(config).expect("a Redis backend");
        let bucket = limiter(&backend, "tb");
        let decision = bucket.check_blocking(Some("k"), 8).expect("check");
        assert!(decision.settle.is_some(), "{policy:?}: a ticket");
        server.kill();
        for blocking in [true, false] {
            let settled = if blocking {
                bucket.settle_blocking(&decision, 3)
            } else {
                ratekeeper::block_on(bucket.settle(&decision, 3))
            };
            match settled {
                Err(e) if matches!(e.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout) => {}
                other => {
                    panic!("{policy:?}, blocking {blocking}: a settle that never reached Redis returned {other:?}")
                }
            }
        }
        server.restart();
        support::wait_until("the retried settle", Duration::from_secs(20), || {
            bucket.settle_blocking(&decision, 3).is_ok()
        });
    }
}

/// The record of applied settles holds the ids of the settle window (an hour), not of the
/// state's whole life: on a monthly quota, the ids of settles made hours ago are gone, and
/// their decisions are refused (a repeat could not be told apart), not applied again.
#[test]
fn the_record_of_applied_settles_holds_only_the_settle_window() {
    use std::sync::Arc;
    let server = RedisServer::start();
    let clock = Arc::new(ratekeeper::ManualClock::new(1_700_000_000_000_000));
    let config = support::redis_config(server.url()).prefix("settle-window").clock(clock.clone());
    let backend = Backend::redis_with(config).expect("a Redis backend");
    let quota = backend
        .limiter_from_json("quota", r#"{"kind":"calendar","limit":1000000,"period":"month"}"#)
        .expect("a limiter");
    let early: Vec<_> = (0..5)
        .map(|_| {
            let d = quota.check_blocking(Some("tenant"), 10).expect("check");
            quota.settle_blocking(&d, 4).expect("settle");
            d
        })
        .collect();
    let records = || server.cli(&["--scan", "--pattern", "*settled*"]);
    let record = records();
    assert_eq!(record.lines().count(), 1, "one record: {record:?}");
    assert_eq!(server.cli(&["ZCARD", &record]), "5");
    clock.advance_micros(2 * 3600 * 1_000_000);
    let d = quota.check_blocking(Some("tenant"), 10).expect("check");
    quota.settle_blocking(&d, 4).expect("settle");
    assert_eq!(server.cli(&["ZCARD", &record]), "1", "the ids of settles two hours old are still held");
    let before = remaining(&quota, "tenant");
    let old = quota.settle_blocking(&early[0], 4).expect_err("a decision two hours old is past the settle window");
    assert_eq!(old.kind(), ratekeeper::ErrorKind::InvalidArgument, "{old}");
    assert!(old.to_string().contains("decision"), "{old}");
    assert_eq!(remaining(&quota, "tenant"), before, "a refused settle wrote nothing");
}

/// A ticket rebuilt from outside data settles with its seal on another backend of the same Redis
/// and prefix (the secret is shared through Redis), and only unchanged: another key, cost, id or
/// instant, a made-up seal or a backend of another prefix is refused naming `decision`, and
/// nothing is written.
#[test]
fn a_sealed_ticket_settles_in_another_process_and_only_unchanged() {
    use ratekeeper::{Decision, ErrorKind, SettleTicket};
    let server = RedisServer::start();
    let backend =
        |prefix: &str| Backend::redis_with(support::redis_config(server.url()).prefix(prefix)).expect("a backend");
    let (mine, theirs, stranger) = (backend("sealed"), backend("sealed"), backend("sealed-other"));
    let (mine, theirs, stranger) = (limiter(&mine, "tb"), limiter(&theirs, "tb"), limiter(&stranger, "tb"));
    mine.check_blocking(Some("victim"), 9).expect("check");
    let decision = mine.check_blocking(Some("attacker"), 5).expect("check");
    let t = decision.settle.clone().expect("a ticket");
    let seal = mine.seal_blocking(&t).expect("a seal");
    let rebuilt = |key: &str, cost: u64, at: u64, id: u64| {
        let mut d = Decision::from_parts(true, 0, 0, Duration::ZERO, Duration::ZERO);
        d.settle = Some(SettleTicket::from_parts(key, cost, at, id, t.limiter));
        d
    };
    let forged = [
        (rebuilt("victim", 9, t.charged_at_micros, t.id), seal.clone()),
        (rebuilt("attacker", 9, t.charged_at_micros, t.id), seal.clone()),
        (rebuilt("attacker", 5, t.charged_at_micros - 1, t.id), seal.clone()),
        (rebuilt("attacker", 5, t.charged_at_micros, t.id + 1), seal.clone()),
        (rebuilt("attacker", 5, t.charged_at_micros, t.id), "ab".repeat(32)),
    ];
    for (d, seal) in &forged {
        let e = theirs.settle_sealed_blocking(d, 0, seal).expect_err("a forged ticket");
        assert!(e.kind() == ErrorKind::InvalidArgument && e.to_string().contains("decision"), "{e}");
    }
    let e = stranger.settle_sealed_blocking(&decision, 0, &seal).expect_err("another prefix");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!((remaining(&mine, "victim"), remaining(&mine, "attacker")), (1, 5), "nothing was written");
    let genuine = rebuilt("attacker", 5, t.charged_at_micros, t.id);
    assert_eq!(theirs.settle_sealed_blocking(&genuine, 0, &seal).expect("the genuine ticket").remaining, 10);
}
