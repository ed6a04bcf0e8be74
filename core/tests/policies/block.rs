//! Blocking (`block_for`, `block`, `unblock`) on every backend: memory with a manual clock, a
//! real Redis server (manual clock, then the server's TIME), two processes' worth of backends
//! on one server, and a real 3-master Redis Cluster. The exact figures are in the shared
//! vectors (`tests/vectors/block.json`); these tests hold what vectors cannot say: every kind,
//! pauses and blocks kept apart, metrics, key layout, round trips, fleet-wide effect.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{
    runtime, Backend, CalendarPeriod, ErrorKind, Limiter, ManualClock, MemoryConfig, RedisConfig, SlidingLimit,
};
use support::{RedisCluster, RedisServer};

const START: u64 = 1_800_000_000_000_000;
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

fn memory() -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    (Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap(), clock)
}

fn redis_manual(server: &RedisServer, prefix: &str) -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    let config = support::redis_config(server.url()).prefix(prefix).clock(Arc::new(clock.clone()));
    (Backend::redis_with(config).unwrap(), clock)
}

/// One limiter of every kind that keeps state, each with room for 5 calls per key for an hour.
pub(crate) fn every_kind(backend: &Backend, name: &str) -> Vec<Limiter> {
    let hourly = SlidingLimit { duration: HOUR, limit: 5, precision: Some(Duration::from_secs(60)) };
    vec![
        backend.token_bucket(name, 5.0 / 3600.0, 5).unwrap(),
        backend.leaky(name, 5, HOUR).unwrap(),
        backend.points(name, 5, HOUR).unwrap(),
        backend.bucket(name, 5, HOUR).unwrap(),
        backend.window(name, 5, HOUR).unwrap(),
        backend.sliding_window(name, &[hourly]).unwrap(),
        backend.concurrent(name, 5, HOUR).unwrap(),
        backend.calendar(name, 5, CalendarPeriod::Year, "UTC", None).unwrap(),
    ]
}

/// Blocks `key` of every kind by hand and checks: refused with the block's remaining time,
/// nothing consumed, other keys untouched, `resume` leaves a block alone and `unblock` leaves a
/// pause alone, blocked checks counted apart, and back after the block.
fn block_semantics(backend: &Backend, clock: &ManualClock, name: &str) {
    for limiter in every_kind(backend, name) {
        let kind = format!("{:?}", limiter.kind());
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}");
        assert!(!limiter.unblock_blocking(Some("k")).unwrap(), "{kind}: nothing to unblock yet");
        assert_eq!(limiter.block_blocking(Some("k"), 10 * SECOND).unwrap(), 10 * SECOND, "{kind}");
        for _ in 0..3 {
            let refused = limiter.check_blocking(Some("k"), 1).unwrap();
            assert!(!refused.allowed, "{kind}");
            assert_eq!((refused.retry_after, refused.remaining), (10 * SECOND, 0), "{kind}");
            assert!(refused.lease.is_none(), "{kind}");
        }
        let peeked = limiter.peek_blocking(Some("k")).unwrap();
        assert!(!peeked.allowed && peeked.retry_after == 10 * SECOND, "{kind}: {peeked:?}");
        assert!(limiter.check_blocking(Some("other"), 1).unwrap().allowed, "{kind}: another key is not blocked");
        let metrics = limiter.metrics();
        assert_eq!((metrics.blocked, metrics.refused, metrics.allowed), (3, 3, 2), "{kind}: {metrics:?}");

        // A resume ends a pause, never a block.
        assert!(!limiter.resume_blocking(Some("k")).unwrap(), "{kind}: a block is no pause");
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 10 * SECOND, "{kind}");
        // The later of a pause and a block answers; unblock ends the block, not the pause.
        limiter.pause_blocking(Some("k"), 20 * SECOND).unwrap();
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 20 * SECOND, "{kind}");
        assert_eq!(limiter.metrics().blocked, 4, "{kind}: a paused refusal is not a blocked one");
        assert!(limiter.unblock_blocking(Some("k")).unwrap(), "{kind}");
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 20 * SECOND, "{kind}");
        assert!(limiter.resume_blocking(Some("k")).unwrap(), "{kind}");

        // A block by hand replaces the block in effect, and ends at its instant.
        limiter.block_blocking(Some("k"), HOUR).unwrap();
        assert_eq!(limiter.block_blocking(Some("k"), 2 * SECOND).unwrap(), 2 * SECOND, "{kind}");
        clock.advance(2 * SECOND - Duration::from_micros(1));
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, Duration::from_micros(1), "{kind}");
        clock.advance(Duration::from_micros(1));
        let back = limiter.check_blocking(Some("k"), 1).unwrap();
        assert!(back.allowed, "{kind}: {back:?}");
        assert_eq!(back.remaining, 3, "{kind}: the blocked refusals consumed nothing: {back:?}");
        clock.advance(HOUR);
    }
}

/// `block_for` on every kind: the refusal that starts the block says how long, the key stays
/// refused, `reset` forgets the block; a limiter with the same name and without `block_for`
/// honours it (the block is the key's, not the limiter object's).
fn block_for_semantics(backend: &Backend, clock: &ManualClock, name: &str) {
    for plain in every_kind(backend, name) {
        let kind = format!("{:?}", plain.kind());
        let blocking = plain.with_block_for(Some(30 * SECOND)).unwrap();
        assert_eq!(blocking.block_for(), Some(30 * SECOND));
        assert!(blocking.spec_json().ends_with(r#","block_for":30}"#), "{kind}: {}", blocking.spec_json());
        assert_eq!(plain.block_for(), None);
        for _ in 0..5 {
            assert!(blocking.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}");
        }
        let refused = blocking.check_blocking(Some("k"), 1).unwrap();
        assert!(!refused.allowed, "{kind}");
        assert!(refused.retry_after >= 30 * SECOND, "{kind}: {refused:?}");
        assert_eq!(blocking.metrics().blocked, 0, "{kind}: the refusal that starts a block is not blocked");
        clock.advance(SECOND);
        let blocked = plain.check_blocking(Some("k"), 1).unwrap();
        assert_eq!((blocked.allowed, blocked.retry_after), (false, 29 * SECOND), "{kind}");
        assert_eq!(plain.peek_blocking(Some("k")).unwrap().retry_after, 29 * SECOND, "{kind}");
        // A peek never starts a block; a refused peek under block_for neither.
        assert!(blocking.peek_blocking(Some("j")).unwrap().allowed, "{kind}");
        blocking.reset_blocking(Some("k")).unwrap();
        assert!(blocking.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}: reset forgets the block");
        clock.advance(HOUR);
    }
}

/// A refusal caused by a hold (a pause, or a block already in effect) starts no `block_for`
/// block: `resume` ends a pause and the key is back at once, for every kind. (Before, a check
/// refused by a pause started a block that `resume` cannot end: the key stayed refused for
/// `block_for` after the operator resumed it.)
fn a_pause_starts_no_block(backend: &Backend, clock: &ManualClock, name: &str) {
    for plain in every_kind(backend, name) {
        let kind = format!("{:?}", plain.kind());
        let blocking = plain.with_block_for(Some(30 * SECOND)).unwrap();
        blocking.pause_blocking(Some("k"), 10 * SECOND).unwrap();
        let paused = blocking.check_blocking(Some("k"), 1).unwrap();
        assert_eq!((paused.allowed, paused.retry_after), (false, 10 * SECOND), "{kind}: the pause's own refusal");
        assert!(blocking.resume_blocking(Some("k")).unwrap(), "{kind}");
        let back = blocking.check_blocking(Some("k"), 1).unwrap();
        assert!(back.allowed, "{kind}: resumed, yet refused: {back:?}");
        assert!(!blocking.unblock_blocking(Some("k")).unwrap(), "{kind}: the pause started no block");
        clock.advance(HOUR);
    }
}

/// Bad durations are refused naming their parameter, before anything is written.
fn bad_blocks_write_nothing(backend: &Backend) {
    let limiter = backend.token_bucket("bad", 1.0, 1).unwrap();
    for bad in [Duration::ZERO, Duration::from_secs(101 * 365 * 24 * 3600)] {
        let err = limiter.block_blocking(Some("k"), bad).unwrap_err();
        assert_eq!((err.kind(), err.parameter()), (ErrorKind::InvalidArgument, Some("duration")));
        let err = runtime().block_on(limiter.block(Some("k"), bad)).unwrap_err();
        assert_eq!(err.parameter(), Some("duration"));
        assert_eq!(limiter.with_block_for(Some(bad)).unwrap_err().parameter(), Some("block_for"));
    }
    let long_key = "x".repeat(2000);
    assert_eq!(limiter.block_blocking(Some(&long_key), SECOND).unwrap_err().parameter(), Some("key"));
    assert_eq!(limiter.unblock_blocking(Some(&long_key)).unwrap_err().parameter(), Some("key"));
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "nothing was blocked");
}

#[test]
fn memory_blocks() {
    let (backend, clock) = memory();
    block_semantics(&backend, &clock, "b");
    block_for_semantics(&backend, &clock, "f");
    a_pause_starts_no_block(&backend, &clock, "p");
    bad_blocks_write_nothing(&backend);
}

#[test]
fn unlimited_never_blocks() {
    let limiter = Limiter::unlimited().with_block_for(Some(SECOND)).unwrap();
    assert_eq!(limiter.block_blocking(Some("k"), HOUR).unwrap(), Duration::ZERO);
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    assert!(!limiter.unblock_blocking(Some("k")).unwrap());
}

#[test]
fn redis_blocks_with_a_manual_clock() {
    let server = RedisServer::start();
    let (backend, clock) = redis_manual(&server, "manual");
    block_semantics(&backend, &clock, "b");
    block_for_semantics(&backend, &clock, "f");
    a_pause_starts_no_block(&backend, &clock, "p");
    bad_blocks_write_nothing(&backend);
    // The async forms answer alike.
    let limiter = backend.token_bucket("async", 1.0, 1).unwrap();
    assert_eq!(runtime().block_on(limiter.block(None, 5 * SECOND)).unwrap(), 5 * SECOND);
    assert_eq!(runtime().block_on(limiter.check(None, 1)).unwrap().retry_after, 5 * SECOND);
    assert!(runtime().block_on(limiter.unblock(None)).unwrap());
    assert!(runtime().block_on(limiter.check(None, 1)).unwrap().allowed);
}

/// A block is the fleet's: a refusal under `block_for` in one process blocks the key in another
/// that shares the Redis server (two backends here, each with its own connections).
#[test]
fn redis_block_is_fleet_wide() {
    let server = RedisServer::start();
    let one = Backend::redis_with(support::redis_config(server.url()).prefix("fleet")).unwrap();
    let two = Backend::redis_with(support::redis_config(server.url()).prefix("fleet")).unwrap();
    let strict =
        one.limiter_from_json("login", r#"{"kind":"bucket","limit":1,"interval":3600,"block_for":600}"#).unwrap();
    let other = two.limiter_from_json("login", r#"{"kind":"bucket","limit":1,"interval":3600}"#).unwrap();
    assert!(strict.check_blocking(Some("mallory"), 1).unwrap().allowed);
    let refused = strict.check_blocking(Some("mallory"), 1).unwrap();
    assert!(!refused.allowed && refused.retry_after > 590 * SECOND, "{refused:?}");
    other.reset_blocking(Some("alice")).unwrap();
    // The other process's limiter has no block_for, yet the key is blocked there too.
    let there = other.peek_blocking(Some("mallory")).unwrap();
    assert!(!there.allowed && there.retry_after > 590 * SECOND, "{there:?}");
    // An unblock anywhere ends it everywhere; the limit itself still refuses.
    assert!(other.unblock_blocking(Some("mallory")).unwrap());
    let after = strict.peek_blocking(Some("mallory")).unwrap();
    assert!(after.retry_after < 3600 * SECOND && after.retry_after <= refused.retry_after, "{after:?}");
    // By hand, from the other process.
    other.block_blocking(Some("eve"), HOUR).unwrap();
    assert!(!strict.check_blocking(Some("eve"), 1).unwrap().allowed);
}

/// On Redis (the server's TIME): the block is one key beside the limiter's, with its hash tag
/// and a TTL of the block; a blocked check is one EVALSHA with one EXISTS and one MGET and nothing else, and
/// `acquire` waits the block out.
#[test]
fn redis_block_key_has_the_tag_and_the_ttl_and_costs_no_round_trip() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    let limiter = backend.token_bucket("tagged", 1.0, 5).unwrap();
    assert!(limiter.check_blocking(Some("user:{7}"), 1).unwrap().allowed);
    limiter.block_blocking(Some("user:{7}"), 30 * SECOND).unwrap();
    let keys = server.cli(&["KEYS", "*tagged*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_by_key(|k| k.contains(":bk:"));
    assert_eq!(keys.len(), 2, "{keys:?}");
    let (state, block) = (keys[0], keys[1]);
    assert!(block.ends_with(":tagged:bk:user:{7}"), "{block}");
    assert_eq!(state[..state.find('}').unwrap()], block[..block.find('}').unwrap()], "one hash tag");
    let ttl: u64 = server.cli(&["PTTL", block]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    let stats = support::commandstats_between_polls(&server, || {
        for _ in 0..5 {
            let refused = limiter.check_blocking(Some("user:{7}"), 1).unwrap();
            assert!(!refused.allowed && refused.retry_after > Duration::ZERO && refused.retry_after <= 30 * SECOND);
        }
    });
    let calls = |cmd: &str| support::command_calls(&stats, cmd);
    assert_eq!(calls("evalsha") + calls("eval"), 5, "{stats}");
    assert_eq!(calls("mget"), 5, "{stats}");
    assert_eq!(calls("exists"), 5, "{stats}");
    assert_eq!(calls("set") + calls("del") + calls("get"), 0, "a blocked refusal writes nothing: {stats}");

    let short = backend.token_bucket("short", 100.0, 100).unwrap();
    short.block_blocking(None, Duration::from_millis(300)).unwrap();
    let refused = short.check_blocking(None, 1).unwrap();
    assert!(!refused.allowed);
    let admitted = short.acquire_blocking(None, 1, Some(5 * SECOND)).unwrap();
    assert!(admitted.allowed);
    assert!(admitted.decided_at_micros >= refused.decided_at_micros + refused.retry_after.as_micros() as u64);
    assert_eq!(admitted.remaining, 99, "the blocked refusals consumed nothing");
    let text = backend.prometheus_blocking(false).unwrap();
    assert!(text.lines().any(|l| l.starts_with("ratekeeper_blocked_total{") && l.contains("tagged")), "{text}");
}

/// On a 3-master Cluster: every kind blocks (no CROSSSLOT: the block key shares the identity's
/// slot), and blocks spread over the masters stay per key.
#[test]
fn cluster_blocks_every_kind() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(START);
    let config = RedisConfig::cluster(cluster.seeds()).clock(Arc::new(clock.clone()));
    let backend = Backend::redis_with(config).unwrap();
    block_semantics(&backend, &clock, "c");
    block_for_semantics(&backend, &clock, "cf");
    let limiter = backend.token_bucket("spread", 100.0, 100).unwrap();
    for i in 0..30 {
        limiter.block_blocking(Some(&format!("user-{i}")), HOUR).unwrap();
    }
    for i in 0..30 {
        assert!(!limiter.check_blocking(Some(&format!("user-{i}")), 1).unwrap().allowed, "user-{i}");
    }
    assert!(limiter.check_blocking(Some("user-30"), 1).unwrap().allowed);
}

/// On the memory backend with the system clock, a block and the checks it refuses read one
/// clock: a check right after `block(key, d)` is refused for at most `d`. (The block read the
/// system clock and the checks the time-stamp counter's reading of it, which may lag it by a
/// few microseconds between anchorings: `retry_after` came out above `d`, seen in the C suite.)
#[test]
fn a_block_and_its_refusals_read_one_clock() {
    let backend = Backend::memory();
    let limiter = backend.token_bucket("one-clock", 0.001, 5).unwrap();
    // The counter's calibration runs in the background: let it finish, so the checks use it.
    std::thread::sleep(Duration::from_millis(400));
    let block = Duration::from_secs(3600);
    for i in 0..20_000 {
        let key = format!("k{}", i % 64);
        limiter.block_blocking(Some(&key), block).unwrap();
        let d = limiter.check_blocking(Some(&key), 1).unwrap();
        assert!(!d.allowed && d.retry_after <= block, "{i}: {d:?}");
    }
}
