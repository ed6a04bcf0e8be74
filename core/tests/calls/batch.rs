//! Concurrent async calls on a standalone server travel as batches: one script invocation
//! answering many calls. Each call of a batch is decided as if alone (in order, each seeing the
//! writes of the calls before it), and each call's error is its own.

use crate::support;

use std::time::Duration;

use ratekeeper::{runtime, Backend, ErrorKind, RedisConfig, SlidingLimit};
use support::RedisServer;

const TASKS: usize = 64;

fn commandstat(server: &RedisServer, command: &str) -> u64 {
    support::command_calls(&server.cli(&["INFO", "commandstats"]), command)
}

/// Runs `TASKS` concurrent checks of `limiter` on the keys `key_of(task)`, returning the results
/// in task order.
fn concurrent_checks(
    limiter: &ratekeeper::Limiter,
    key_of: impl Fn(usize) -> String,
) -> Vec<ratekeeper::Result<ratekeeper::Decision>> {
    concurrent_checks_of(|_| limiter, key_of)
}

/// Runs `TASKS` concurrent checks, task `t` of `limiter_of(t)` on key `key_of(t)`, returning the
/// results in task order.
fn concurrent_checks_of<'a>(
    limiter_of: impl Fn(usize) -> &'a ratekeeper::Limiter,
    key_of: impl Fn(usize) -> String,
) -> Vec<ratekeeper::Result<ratekeeper::Decision>> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (limiter, key) = (limiter_of(t).clone(), key_of(t));
            runtime().spawn(async move { limiter.check(Some(&key), 1).await })
        })
        .collect();
    tasks.into_iter().map(|t| ratekeeper::block_on(t).expect("a check task")).collect()
}

#[test]
fn concurrent_calls_share_script_invocations_and_each_is_decided_in_turn() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    // 40 of the 64 concurrent checks on one key fit: each must see the ones before it.
    let limiter = backend.token_bucket("batched", 0.001, 40).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    server.cli(&["CONFIG", "RESETSTAT"]);

    let mut rounds = 0;
    let mut checks = 0;
    loop {
        rounds += 1;
        let key = format!("shared-{rounds}");
        let results = concurrent_checks(&limiter, |_| key.clone());
        checks += TASKS as u64;
        let decisions: Vec<_> = results.into_iter().map(|r| r.expect("Redis answers")).collect();
        let allowed = decisions.iter().filter(|d| d.allowed).count();
        assert_eq!(allowed, 40, "exactly the capacity is admitted, batched or not");
        let mut remaining: Vec<u64> = decisions.iter().filter(|d| d.allowed).map(|d| d.remaining).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..40).collect::<Vec<_>>(), "every admitted call saw every admission before it");
        let invocations = commandstat(&server, "evalsha");
        if invocations < checks || rounds == 10 {
            assert!(
                invocations < checks,
                "{checks} concurrent checks were sent as {invocations} script invocations: never batched"
            );
            break;
        }
    }
}

#[test]
fn a_failing_call_in_a_batch_fails_alone() {
    let server = RedisServer::start();
    let backend =
        Backend::redis_with(RedisConfig::new(server.url()).prefix("iso").deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.token_bucket("isolated", 1.0, 1_000).unwrap();
    assert!(limiter.check_blocking(Some("poisoned"), 1).unwrap().allowed);
    // The key's state replaced by a value of the wrong type: the script fails on it.
    let state = server.cli(&["--scan", "--pattern", "iso:*:poisoned"]);
    assert_eq!(state.lines().count(), 1, "one state key: {state:?}");
    server.cli(&["DEL", state.trim()]);
    server.cli(&["HSET", state.trim(), "field", "1"]);
    server.cli(&["CONFIG", "RESETSTAT"]);

    for round in 0..10 {
        let results = concurrent_checks(&limiter, |t| if t == 7 { "poisoned".into() } else { format!("r{round}-{t}") });
        for (t, result) in results.iter().enumerate() {
            match (t, result) {
                (7, Err(e)) => assert_eq!(e.kind(), ErrorKind::BackendRejected, "{e}"),
                (7, Ok(d)) => panic!("a check on a key of the wrong type succeeded: {d:?}"),
                (_, Ok(d)) => assert!(d.allowed && d.remaining == 999, "task {t}: {d:?}"),
                (_, Err(e)) => panic!("task {t} failed with the poisoned call: {e}"),
            }
        }
        if commandstat(&server, "evalsha") < TASKS as u64 * (round + 1) {
            return; // the poisoned call shared a batch with others at least once
        }
    }
    panic!("the concurrent checks were never batched");
}

#[test]
fn calls_of_one_script_with_different_shapes_share_a_batch() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    // One script (sliding windows), two argument shapes: one limit and two limits.
    let bucket = backend.bucket("one-limit", 20, Duration::from_secs(3600)).unwrap();
    let minute = |limit, precision| SlidingLimit { duration: Duration::from_secs(60), limit, precision };
    let two = [minute(25, Some(Duration::from_secs(1))), minute(1_000, None)];
    let sliding = backend.sliding_window("two-limits", &two).unwrap();
    assert!(bucket.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    server.cli(&["CONFIG", "RESETSTAT"]);

    let mut checks = 0;
    for round in 0..10 {
        let results =
            concurrent_checks_of(|t| if t % 2 == 0 { &bucket } else { &sliding }, |t| format!("{}-{round}", t % 2));
        checks += TASKS as u64;
        for (parity, limit) in [(0, 20u64), (1, 25)] {
            let decisions: Vec<_> =
                results.iter().skip(parity).step_by(2).map(|r| r.as_ref().expect("Redis answers")).collect();
            let mut remaining: Vec<u64> = decisions.iter().filter(|d| d.allowed).map(|d| d.remaining).collect();
            remaining.sort_unstable();
            assert_eq!(remaining, (0..limit).collect::<Vec<_>>(), "shape {parity}: each call decided in turn");
        }
        if commandstat(&server, "evalsha") < checks {
            return; // the two shapes shared a batch at least once
        }
    }
    panic!("the concurrent checks were never batched");
}

/// The calls of one batch arrived together and share one instant: the script reads the server's
/// TIME once per invocation, so a round of concurrent checks is decided at no more instants than
/// it took invocations.
#[test]
fn calls_of_one_batch_share_the_instant_of_their_invocation() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.bucket("one-instant", 1_000, Duration::from_secs(3600)).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    for round in 0..10 {
        server.cli(&["CONFIG", "RESETSTAT"]);
        let results = concurrent_checks(&limiter, |t| format!("r{round}-{t}"));
        let invocations = commandstat(&server, "evalsha");
        let mut instants: Vec<u64> =
            results.iter().map(|r| r.as_ref().expect("Redis answers").decided_at_micros).collect();
        assert!(instants.iter().all(|&t| t > 0), "decided on the server's clock: {instants:?}");
        instants.sort_unstable();
        instants.dedup();
        assert!(
            instants.len() as u64 <= invocations,
            "{} instants for {invocations} script invocations: the calls of a batch read TIME each",
            instants.len()
        );
        if invocations < TASKS as u64 {
            return; // batched at least once
        }
    }
    panic!("the concurrent checks were never batched");
}

/// A batch whose calls differ only in their cost charges each call its own cost: the arguments are
/// written once for all only when every call has the same.
#[test]
fn calls_of_one_limiter_at_different_costs_keep_their_costs_in_a_batch() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    let limiter = backend.bucket("costs", 4, Duration::from_secs(3600)).unwrap();
    assert!(limiter.check_blocking(Some("warm-up"), 1).unwrap().allowed, "the script is cached");
    let cost = |t: usize| if t % 2 == 0 { 3 } else { 1 };
    for round in 0..10 {
        server.cli(&["CONFIG", "RESETSTAT"]);
        // Each task on its own key: what is left there is what its own cost left.
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (limiter, key) = (limiter.clone(), format!("r{round}-{t}"));
                runtime().spawn(async move { limiter.check(Some(&key), cost(t)).await })
            })
            .collect();
        for (t, task) in tasks.into_iter().enumerate() {
            let decision = ratekeeper::block_on(task).expect("a check task").expect("Redis answers");
            assert!(decision.allowed, "task {t}: {decision:?}");
            assert_eq!(decision.remaining, 4 - cost(t), "task {t}: {decision:?}");
        }
        let invocations = commandstat(&server, "evalsha");
        for t in 0..TASKS {
            let left = limiter.peek_blocking(Some(&format!("r{round}-{t}"))).unwrap().remaining;
            assert_eq!(left, 4 - cost(t), "task {t} was charged its own cost");
        }
        if invocations < TASKS as u64 {
            return; // batched at least once
        }
    }
    panic!("the concurrent checks were never batched");
}
