//! `Backend::check_all` / `acquire_all` (several limits, all or nothing) on every backend:
//! memory with a manual clock, a real Redis server (manual clock, then the server's TIME) and a
//! real 3-master Redis Cluster, where co-located limiters combine and others are refused.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{
    Backend, CalendarPeriod, Colocate, ErrorKind, Limiter, ManualClock, MemoryConfig, RedisConfig, SlidingLimit,
};
use support::{RedisCluster, RedisServer};

const START: u64 = 1_800_000_000_000_000;
const HOUR: Duration = Duration::from_secs(3600);

/// One co-located limiter of every kind that can take part, each with room for 5 per key for
/// an hour.
fn every_kind(backend: &Backend, name: &str) -> Vec<Limiter> {
    let hourly = SlidingLimit { duration: HOUR, limit: 5, precision: Some(Duration::from_secs(60)) };
    let limiters = vec![
        backend.token_bucket(&format!("{name}-tb"), 5.0 / 3600.0, 5).unwrap(),
        backend.leaky(&format!("{name}-leaky"), 5, HOUR).unwrap(),
        backend.points(&format!("{name}-points"), 5, HOUR).unwrap(),
        backend.bucket(&format!("{name}-bucket"), 5, HOUR).unwrap(),
        backend.window(&format!("{name}-window"), 5, HOUR).unwrap(),
        backend.sliding_window(&format!("{name}-sliding"), &[hourly]).unwrap(),
        backend.concurrent(&format!("{name}-conc"), 5, HOUR).unwrap(),
        backend.calendar(&format!("{name}-cal"), 5, CalendarPeriod::Year, "UTC", None).unwrap(),
    ];
    limiters.into_iter().map(|l| l.with_colocate(Colocate::Tenant)).collect()
}

/// What a part has left, as a peek reports it.
fn remaining(limiter: &Limiter, key: &str) -> u64 {
    limiter.peek_blocking(Some(key)).unwrap().remaining
}

/// All or nothing, for every kind: an admitted combination consumes every part; one refused
/// part makes the whole combination consume nothing (every other kind's state is as it was),
/// and the result carries each part's decision and the longest retry_after.
fn all_or_nothing(backend: &Backend, name: &str) {
    let kinds = every_kind(backend, name);
    let quota = backend.bucket(&format!("{name}-quota"), 3, HOUR).unwrap().with_colocate(Colocate::Tenant);
    let key = "t1:user";
    for limiter in &kinds {
        assert_eq!(remaining(limiter, key), 5, "{:?}", limiter.kind());
    }
    // A concurrent part takes one slot; the others ask for 2.
    let cost = |l: &Limiter| if l.kind() == ratekeeper::Kind::Concurrent { 1 } else { 2 };
    let mut parts: Vec<(&Limiter, Option<&str>, u64)> = kinds.iter().map(|l| (l, Some(key), cost(l))).collect();
    parts.push((&quota, Some("t1"), 2));
    let admitted = backend.check_all_blocking(&parts).unwrap();
    assert!(admitted.allowed, "{admitted:?}");
    assert_eq!(admitted.retry_after, Duration::ZERO);
    assert_eq!(admitted.parts.len(), parts.len());
    for (limiter, part) in kinds.iter().zip(&admitted.parts) {
        assert!(part.decision.allowed, "{:?}", limiter.kind());
        assert_eq!(part.key, key);
        assert_eq!(remaining(limiter, key), 5 - cost(limiter), "{:?} consumed its part", limiter.kind());
    }
    let conc = admitted.parts[6].decision.lease.expect("the concurrent part holds a lease");
    assert!(conc.fencing_token > 0);

    // The quota has 1 left: asking 2 again refuses the combination, and nothing is consumed.
    let refused = backend.check_all_blocking(&parts).unwrap();
    assert!(!refused.allowed);
    let quota_part = &refused.parts.last().unwrap().decision;
    assert!(!quota_part.allowed);
    assert!(refused.retry_after > Duration::ZERO);
    assert_eq!(refused.retry_after, quota_part.retry_after, "the longest refused part's");
    for (limiter, part) in kinds.iter().zip(&refused.parts) {
        assert!(part.decision.allowed, "{:?} alone would pass", limiter.kind());
        assert!(part.decision.lease.is_none(), "a refused combination holds no lease");
        assert_eq!(remaining(limiter, key), 5 - cost(limiter), "{:?} consumed nothing", limiter.kind());
    }
    assert_eq!(remaining(&quota, "t1"), 1);

    // Releasing the admitted combination frees the concurrent part's slot.
    assert_eq!(remaining(&kinds[6], key), 4);
    admitted.release_blocking().unwrap();
    assert_eq!(remaining(&kinds[6], key), 5);

    // A limiter twice on one key counts both parts: 3 + 3 > 5 refuses, 2 + 1 fits.
    let tb = &kinds[0];
    let twice = backend.check_all_blocking(&[(tb, Some("t1:twice"), 3), (tb, Some("t1:twice"), 3)]).unwrap();
    assert!(!twice.allowed);
    assert_eq!(remaining(tb, "t1:twice"), 5);
    let fits = backend.check_all_blocking(&[(tb, Some("t1:twice"), 2), (tb, Some("t1:twice"), 1)]).unwrap();
    assert!(fits.allowed);
    assert_eq!(remaining(tb, "t1:twice"), 2);
    // The same for a concurrent limiter: each part takes a slot, and 5 + 1 do not fit in 5.
    let conc = &kinds[6];
    let slots: Vec<(&Limiter, Option<&str>, u64)> = (0..6).map(|_| (conc, Some("t1:twice"), 1)).collect();
    let over = backend.check_all_blocking(&slots).unwrap();
    assert!(!over.allowed && !over.parts[5].decision.allowed && over.parts[4].decision.allowed, "{over:?}");
    assert!(over.retry_after > Duration::ZERO);
    assert_eq!(remaining(conc, "t1:twice"), 5);
    let five = backend.check_all_blocking(&slots[..5]).unwrap();
    assert!(five.allowed);
    assert_eq!(remaining(conc, "t1:twice"), 0);
    five.release_blocking().unwrap();
    // Limiters of one name and kind share state; with different specs one step cannot decide
    // both, and the combination is refused before anything is written.
    let other_spec = backend.token_bucket(tb.name(), 1.0, 5).unwrap().with_colocate(Colocate::Tenant);
    let e = backend.check_all_blocking(&[(tb, Some("t1:twice"), 1), (&other_spec, Some("t1:twice"), 1)]).unwrap_err();
    assert_eq!((e.kind(), e.parameter()), (ErrorKind::InvalidArgument, Some("parts[1]")), "{e}");
    assert_eq!(remaining(tb, "t1:twice"), 2);

    // Every kind, as the part that refuses, undoes the others (each engine says it refused).
    let witness =
        backend.token_bucket(&format!("{name}-witness"), 5.0 / 3600.0, 5).unwrap().with_colocate(Colocate::Tenant);
    for (i, limiter) in kinds.iter().enumerate() {
        let full = format!("t1:full-{i}");
        for _ in 0..5 {
            assert!(limiter.check_blocking(Some(&full), 1).unwrap().allowed);
        }
        let refused = backend.check_all_blocking(&[(&witness, Some("t1:w"), 1), (limiter, Some(&full), 1)]).unwrap();
        assert!(!refused.allowed, "{:?}", limiter.kind());
        assert!(refused.parts[0].decision.allowed && !refused.parts[1].decision.allowed);
        assert!(refused.retry_after > Duration::ZERO, "{:?}", limiter.kind());
        assert_eq!(remaining(&witness, "t1:w"), 5, "{:?} refusing undid the other part", limiter.kind());
    }

    // A paused or blocked part refuses the combination; the others consume nothing.
    let held = &kinds[3];
    held.pause_blocking(Some("t1:held"), Duration::from_secs(10)).unwrap();
    let paused = backend.check_all_blocking(&[(&witness, Some("t1:w"), 1), (held, Some("t1:held"), 1)]).unwrap();
    assert!(!paused.allowed && !paused.parts[1].decision.allowed);
    // (Exact on a manual clock; on the server's TIME a little has passed since the pause.)
    assert!(paused.retry_after <= Duration::from_secs(10) && paused.retry_after > Duration::from_secs(9));
    held.resume_blocking(Some("t1:held")).unwrap();
    held.block_blocking(Some("t1:held"), Duration::from_secs(20)).unwrap();
    let blocked = backend.check_all_blocking(&[(&witness, Some("t1:w"), 1), (held, Some("t1:held"), 1)]).unwrap();
    assert!(!blocked.allowed);
    assert!(blocked.retry_after <= Duration::from_secs(20) && blocked.retry_after > Duration::from_secs(19));
    assert_eq!(remaining(&witness, "t1:w"), 5, "a held part undid the other part");

    // A combined decision is settled part by part: each admitted part carries its ticket.
    let settled = backend.check_all_blocking(&[(tb, Some("t1:settle"), 4), (&quota, Some("t1:settle"), 1)]).unwrap();
    assert!(settled.allowed);
    assert_eq!(remaining(tb, "t1:settle"), 1);
    let part = &settled.parts[0];
    assert!(part.decision.settle.is_some(), "an admitted part carries a settle ticket");
    part.limiter.settle_blocking(&part.decision, 1).unwrap();
    assert_eq!(remaining(tb, "t1:settle"), 4, "the part's estimate of 4 settled to 1");
    assert!(refused.parts.iter().all(|p| p.decision.settle.is_none()), "a refused combination has nothing to settle");

    // Unlimited parts always pass and change nothing.
    let unlimited = Limiter::unlimited();
    let with_unlimited = backend.check_all_blocking(&[(&unlimited, Some("t1"), 100), (tb, Some("t1:u2"), 1)]).unwrap();
    assert!(with_unlimited.allowed);
    assert!(with_unlimited.parts[0].decision.allowed);
}

/// Bad input is refused naming the part, before anything is written.
fn bad_input_writes_nothing(backend: &Backend, other: &Backend, name: &str) {
    let tb = backend.token_bucket(&format!("{name}-bad"), 1.0, 5).unwrap().with_colocate(Colocate::Tenant);
    let param = |r: ratekeeper::Result<ratekeeper::CombinedDecision>| {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        e.parameter().unwrap().to_owned()
    };
    assert_eq!(param(backend.check_all_blocking(&[])), "parts");
    assert_eq!(param(backend.check_all_blocking(&[(&tb, Some("t1"), 1), (&tb, Some("t1"), 0)])), "parts[1].cost");
    assert_eq!(param(backend.check_all_blocking(&[(&tb, Some("t1"), 6)])), "parts[0].cost");
    let long_key = "k".repeat(100_000);
    assert_eq!(param(backend.check_all_blocking(&[(&tb, Some("t1"), 1), (&tb, Some(&long_key), 1)])), "parts[1].key");
    let foreign = other.token_bucket(&format!("{name}-foreign"), 1.0, 5).unwrap();
    assert_eq!(param(backend.check_all_blocking(&[(&tb, Some("t1"), 1), (&foreign, Some("t1"), 1)])), "parts[1]");
    let leased = backend.leased(&format!("{name}-leased"), 1.0, 5, None, HOUR).unwrap();
    assert_eq!(param(backend.check_all_blocking(&[(&leased, Some("t1"), 1)])), "parts[0]");
    let partitions = backend.partitions(&format!("{name}-parts"), 10.0, 2, HOUR, 0, false).unwrap();
    assert_eq!(param(backend.check_all_blocking(&[(&tb, Some("t1"), 1), (&partitions, Some("t1"), 1)])), "parts[1]");
    let too_many: Vec<(&Limiter, Option<&str>, u64)> = (0..65).map(|_| (&tb, Some("t1"), 1)).collect();
    assert_eq!(param(backend.check_all_blocking(&too_many)), "parts");
    assert_eq!(remaining(&tb, "t1"), 5, "nothing was written");
}

/// `acquire_all` returns at once when the combination is admitted, and fails at once with the
/// combination's retry_after when waiting cannot succeed in time.
fn acquire_all_gives_up_with_the_retry_after(backend: &Backend, name: &str) {
    let tb = backend.token_bucket(&format!("{name}-acq"), 1.0, 2).unwrap().with_colocate(Colocate::Tenant);
    let quota = backend.bucket(&format!("{name}-acq-quota"), 1, HOUR).unwrap().with_colocate(Colocate::Tenant);
    let parts = [(&tb, Some("t9:a"), 1), (&quota, Some("t9"), 1)];
    assert!(backend.acquire_all_blocking(&parts, Some(Duration::from_secs(1))).unwrap().allowed);
    let e = backend.acquire_all_blocking(&parts, Some(Duration::from_secs(1))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OverLimit);
    let retry = e.retry_after().unwrap();
    assert!(retry > Duration::from_secs(1) && retry <= HOUR, "{retry:?}");
    assert_eq!(remaining(&tb, "t9:a"), 1, "the refused attempts consumed nothing");

    // A refused acquire_all that may not wait is one attempt, counted as a refused check_all
    // is (the blocking form once tried again through the async form: two attempts, two counts).
    let counts = || (tb.metrics(), quota.metrics());
    let before = counts();
    assert!(!backend.check_all_blocking(&parts).unwrap().allowed);
    let one_attempt = counts();
    let e = backend.acquire_all_blocking(&parts, Some(Duration::ZERO)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OverLimit);
    let after = counts();
    let delta = |a: &ratekeeper::Metrics, b: &ratekeeper::Metrics| (b.allowed - a.allowed, b.refused - a.refused);
    assert_eq!(
        (delta(&one_attempt.0, &after.0), delta(&one_attempt.1, &after.1)),
        (delta(&before.0, &one_attempt.0), delta(&before.1, &one_attempt.1)),
        "a refused acquire_all_blocking counts as one check_all"
    );
}

fn memory() -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    (Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap(), clock)
}

#[test]
fn memory_check_all() {
    let (backend, _clock) = memory();
    all_or_nothing(&backend, "m");
    bad_input_writes_nothing(&backend, &Backend::memory(), "m");
    acquire_all_gives_up_with_the_retry_after(&backend, "m");
}

#[test]
fn memory_check_all_spans_shards_without_deadlock() {
    let backend = Backend::memory_with(MemoryConfig::default().shards(4)).unwrap();
    let a = backend.token_bucket("a", 1e6, 1_000_000).unwrap();
    let b = backend.token_bucket("b", 1e6, 1_000_000).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (backend, a, b) = (backend.clone(), a.clone(), b.clone());
            std::thread::spawn(move || {
                for i in 0..2_000 {
                    let (x, y) = (format!("k{}", i % 17), format!("k{}", (i + t) % 13));
                    let parts = if t % 2 == 0 {
                        [(&a, Some(&*x), 1), (&b, Some(&*y), 1)]
                    } else {
                        [(&b, Some(&*y), 1), (&a, Some(&*x), 1)]
                    };
                    assert!(backend.check_all_blocking(&parts).unwrap().allowed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn redis_check_all_with_a_manual_clock() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backend = Backend::redis_with(support::redis_config(server.url()).clock(Arc::new(clock))).unwrap();
    all_or_nothing(&backend, "r");
    let other = Backend::redis_with(support::redis_config(server.url()).prefix("other")).unwrap();
    bad_input_writes_nothing(&backend, &other, "r");
    acquire_all_gives_up_with_the_retry_after(&backend, "r");
}

/// On the server's TIME: one script call decides every part at one instant, and a refused
/// combination leaves every key byte for byte as it was (TTLs included).
#[test]
fn redis_check_all_is_one_call_at_one_instant() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    all_or_nothing(&backend, "s");
    let a = backend.window("one-a", 5, HOUR).unwrap();
    let b = backend.concurrent("one-b", 5, HOUR).unwrap();
    let c = backend.bucket("one-c", 1, HOUR).unwrap();
    assert!(c.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(a.check_blocking(Some("k"), 1).unwrap().allowed);
    let dump = |pattern: &str| {
        let mut keys: Vec<String> = server.cli(&["KEYS", pattern]).lines().map(str::to_owned).collect();
        keys.sort();
        keys.iter().map(|k| (server.cli(&["DUMP", k]), server.cli(&["PTTL", k]))).collect::<Vec<_>>()
    };
    // The limiters' state for key `k` only: the background task writes the names' registry
    // entries and metrics (keys with these names too) about once a second, whenever it is due.
    let before = dump("*one-*:k");
    server.cli(&["CONFIG", "RESETSTAT"]);
    let refused = backend.check_all_blocking(&[(&a, Some("k"), 1), (&b, Some("k"), 1), (&c, Some("k"), 1)]).unwrap();
    assert!(!refused.allowed);
    let stats = server.cli(&["INFO", "commandstats"]);
    // EVALSHA: the script is loaded by now (all_or_nothing ran it); the background task's metric
    // flushes and registrations, which may come at any moment, are EVALs.
    let calls = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok());
    assert_eq!(calls, Some(1), "one script command: {stats}");
    let after = dump("*one-*:k");
    assert_eq!(before.len(), after.len());
    for ((d0, t0), (d1, t1)) in before.iter().zip(&after) {
        assert_eq!(d0, d1, "a refused combination restores every key");
        let (t0, t1): (i64, i64) = (t0.parse().unwrap(), t1.parse().unwrap());
        assert!((t0 - t1).abs() < 2_000, "TTL kept: {t0} then {t1}");
    }
    let admitted = backend.check_all_blocking(&[(&a, Some("k"), 1), (&b, Some("k"), 1)]).unwrap();
    assert!(admitted.allowed);
    let instants: Vec<u64> = admitted.parts.iter().map(|p| p.decision.decided_at_micros).collect();
    assert!(instants[0] > 0 && instants.iter().all(|t| *t == instants[0]), "one instant: {instants:?}");
    admitted.release_blocking().unwrap();
}

/// On a 3-master Cluster: co-located limiters of one tenant combine; a combination spanning
/// slots is refused naming the limiters, before anything is written.
#[test]
fn cluster_check_all_needs_one_slot() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(START);
    let config = RedisConfig::cluster(cluster.seeds()).clock(Arc::new(clock.clone()));
    let backend = Backend::redis_with(config).unwrap();
    all_or_nothing(&backend, "c");
    acquire_all_gives_up_with_the_retry_after(&backend, "c");
    // Several tenants, so that their slots differ across the masters.
    let tb = backend.token_bucket("c-tenants", 1.0, 5).unwrap().with_colocate(Colocate::Tenant);
    let quota =
        backend.calendar("c-quota", 10, CalendarPeriod::Month, "UTC", None).unwrap().with_colocate(Colocate::Tenant);
    for t in 0..12 {
        let (user, tenant) = (format!("tenant{t}:user"), format!("tenant{t}"));
        assert!(backend.check_all_blocking(&[(&tb, Some(&user), 1), (&quota, Some(&tenant), 1)]).unwrap().allowed);
    }
    let plain_a = backend.token_bucket("c-plain-a", 1.0, 5).unwrap();
    let plain_b = backend.token_bucket("c-plain-b", 1.0, 5).unwrap();
    let e = backend.check_all_blocking(&[(&plain_a, Some("x"), 1), (&plain_b, Some("x"), 1)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(e.parameter(), Some("parts"));
    let message = e.to_string();
    assert!(message.contains("c-plain-a") && message.contains("c-plain-b"), "{message}");
    assert_eq!(remaining(&plain_a, "x"), 5);
    assert_eq!(remaining(&plain_b, "x"), 5);
    // Plain calls of a co-located limiter use the same keys as its combined calls.
    assert_eq!(remaining(&tb, "tenant3:user"), 4);
    assert!(tb.check_blocking(Some("tenant3:user"), 4).unwrap().allowed);
    let over = backend.check_all_blocking(&[(&tb, Some("tenant3:user"), 1), (&quota, Some("tenant3"), 1)]).unwrap();
    assert!(!over.allowed);
    assert_eq!(remaining(&quota, "tenant3"), 9);
}

/// A part in shadow mode never refuses the combination: it is checked on its own after the
/// enforcing parts were admitted (consuming what it admits, `shadow_refused` beyond), and only
/// peeked when they were refused, on memory and on Redis. (Before, a shadow part's refusal
/// refused the whole combination: enforcement of a limit being rolled out in shadow mode.)
#[test]
fn a_part_in_shadow_mode_never_refuses_the_combination() {
    let server = RedisServer::start();
    let redis = Backend::redis_with(support::redis_config(server.url()).prefix("shadowall")).unwrap();
    for backend in [Backend::memory(), redis] {
        let enforced = backend.bucket("enforced", 3, HOUR).unwrap();
        let shadow = backend.bucket("shadow", 1, HOUR).unwrap().with_shadow(true).unwrap();
        let parts = [(&shadow, Some("k"), 1), (&enforced, Some("k"), 1)];
        let first = backend.check_all_blocking(&parts).unwrap();
        assert!(first.allowed && first.parts[0].decision.allowed && !first.parts[0].decision.shadow_refused);
        for _ in 0..2 {
            let d = backend.check_all_blocking(&parts).unwrap();
            assert!(d.allowed, "{d:?}");
            assert_eq!(d.parts[0].limiter.name(), "shadow", "parts keep their order");
            assert!(d.parts[0].decision.shadow_refused, "{d:?}");
        }
        assert_eq!(remaining(&enforced, "k"), 0, "the enforcing part consumed each time");
        let refused = backend.check_all_blocking(&parts).unwrap();
        assert!(!refused.allowed, "the enforcing part refuses: {refused:?}");
        assert_eq!(shadow.metrics().shadow_refused, 2, "the refused combination only peeked the shadow part");
    }
}

/// On the server's TIME, a combination's state lives as long as a single check's would: the
/// server's clock needs none of the hour of slack a caller's (manual) clock gets, so a
/// combined check keeps no key an hour longer than its window.
#[test]
fn redis_check_all_on_the_server_clock_keeps_the_server_clocks_ttls() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    let second = Duration::from_secs(1);
    let a = backend.bucket("ttl-a", 5, second).unwrap();
    let b = backend.window("ttl-b", 5, second).unwrap();
    assert!(backend.check_all_blocking(&[(&a, Some("k"), 1), (&b, Some("k"), 1)]).unwrap().allowed);
    let keys: Vec<String> = server.cli(&["KEYS", "*ttl-*:k*"]).lines().map(str::to_owned).collect();
    assert!(!keys.is_empty(), "the parts wrote their state");
    for key in &keys {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        // A one-second window and the server clock's one second of slack.
        assert!((0..=2_100).contains(&ttl), "{key}: PTTL {ttl} ms");
    }
}

/// Creates, on `server`, the user `app` with the common ACL `+@all -@dangerous` (no RESTORE,
/// no DEBUG, no KEYS…) and returns its URL.
fn restricted_user(server: &RedisServer) -> String {
    let set = server.cli(&["ACL", "SETUSER", "app", "on", ">app-secret", "~*", "&*", "+@all", "-@dangerous"]);
    assert_eq!(set, "OK", "ACL SETUSER");
    format!("redis://app:app-secret@127.0.0.1:{}", server.port)
}

/// A refused combination as a user without `@dangerous` (the common `+@all -@dangerous` ACL):
/// it is refused as a decision, not an error, and consumes nothing. (Before, the rollback
/// RESTOREd the admitted part's key, which this ACL forbids: the call failed with
/// BackendRejected after the admitted part had consumed, 8 left where 9 were.) An admitted
/// combination needs no snapshot either: the server ran no DUMP.
#[test]
fn check_all_under_an_acl_without_dangerous_commands() {
    let server = RedisServer::start();
    let backend = Backend::redis(&restricted_user(&server)).unwrap();
    let a = backend.bucket("acl-a", 10, HOUR).unwrap();
    let b = backend.bucket("acl-b", 1, HOUR).unwrap();
    let admitted = backend.check_all_blocking(&[(&a, Some("k"), 1), (&b, Some("k"), 1)]).unwrap();
    assert!(admitted.allowed, "{admitted:?}");
    assert_eq!(remaining(&a, "k"), 9);
    let refused = backend.check_all_blocking(&[(&a, Some("k"), 1), (&b, Some("k"), 1)]);
    let refused = refused.expect("a refused combination is a decision, not an error");
    assert!(!refused.allowed && refused.parts[0].decision.allowed && !refused.parts[1].decision.allowed);
    assert_eq!(remaining(&a, "k"), 9, "the refused combination consumed nothing");
    let stats = server.cli(&["INFO", "commandstats"]);
    assert!(!stats.contains("cmdstat_dump:") && !stats.contains("cmdstat_restore:"), "{stats}");
}

/// The same on a 3-master Cluster, every master with the restricted user: co-located parts of
/// one tenant, refused by one, consume nothing.
#[test]
fn cluster_check_all_under_an_acl_without_dangerous_commands() {
    let cluster = RedisCluster::start();
    let seeds: Vec<String> = cluster.nodes.iter().map(restricted_user).collect();
    let backend = Backend::redis_with(RedisConfig::cluster(seeds)).unwrap();
    let a = backend.token_bucket("cacl-a", 1.0 / 3600.0, 10).unwrap().with_colocate(Colocate::Tenant);
    let b = backend.window("cacl-b", 1, HOUR).unwrap().with_colocate(Colocate::Tenant);
    let parts = [(&a, Some("t1:user"), 1), (&b, Some("t1"), 1)];
    assert!(backend.check_all_blocking(&parts).unwrap().allowed);
    let refused = backend.check_all_blocking(&parts).expect("a refused combination is a decision, not an error");
    assert!(!refused.allowed);
    assert_eq!(remaining(&a, "t1:user"), 9, "the refused combination consumed nothing");
}
