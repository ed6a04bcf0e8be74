//! `pause` and `observe` (upstream feedback) on every backend: memory with a manual clock, a
//! real Redis server (manual clock, then the server's TIME) and a real 3-master Redis Cluster.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{
    runtime, Backend, CalendarPeriod, Clock, ErrorKind, Limiter, ManualClock, MemoryConfig, RedisConfig, SlidingLimit,
};
use support::{RedisCluster, RedisServer};

const START: u64 = 1_800_000_000_000_000;
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);

fn memory() -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    (Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap(), clock)
}

fn redis_manual(server: &RedisServer) -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    (Backend::redis_with(support::redis_config(server.url()).clock(Arc::new(clock.clone()))).unwrap(), clock)
}

/// One limiter of every kind that keeps state, each with room for 5 calls per key for an hour.
fn every_kind(backend: &Backend, name: &str) -> Vec<Limiter> {
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

/// Pauses `key` of every kind for 10 s and checks what a manual clock lets us check exactly:
/// refused with the remaining pause, nothing consumed, other keys untouched, and back after.
fn pause_semantics(backend: &Backend, clock: &ManualClock, name: &str) {
    for limiter in every_kind(backend, name) {
        let kind = format!("{:?}", limiter.kind());
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "{kind}");
        assert_eq!(limiter.pause_blocking(Some("k"), 10 * SECOND).unwrap(), 10 * SECOND, "{kind}");
        for _ in 0..3 {
            let refused = limiter.check_blocking(Some("k"), 1).unwrap();
            assert!(!refused.allowed, "{kind}");
            assert_eq!(refused.retry_after, 10 * SECOND, "{kind}");
            assert_eq!(refused.remaining, 0, "{kind}");
            assert!(refused.lease.is_none(), "{kind}");
        }
        let peeked = limiter.peek_blocking(Some("k")).unwrap();
        assert!(!peeked.allowed && peeked.retry_after == 10 * SECOND, "{kind}: {peeked:?}");
        assert!(limiter.check_blocking(Some("other"), 1).unwrap().allowed, "{kind}: another key is not paused");
        assert!(limiter.check_blocking(None, 1).unwrap().allowed, "{kind}: the shared key is not paused");

        clock.advance(4 * SECOND);
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 6 * SECOND, "{kind}");
        // A shorter pause leaves the longer one; a longer one extends it.
        assert_eq!(limiter.pause_blocking(Some("k"), 2 * SECOND).unwrap(), 6 * SECOND, "{kind}");
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, 6 * SECOND, "{kind}");
        assert_eq!(limiter.pause_blocking(Some("k"), 8 * SECOND).unwrap(), 8 * SECOND, "{kind}");

        clock.advance(8 * SECOND - Duration::from_micros(1));
        assert_eq!(limiter.check_blocking(Some("k"), 1).unwrap().retry_after, Duration::from_micros(1), "{kind}");
        clock.advance(Duration::from_micros(1));
        // The paused refusals consumed nothing: the first call's unit and this one's.
        let back = limiter.check_blocking(Some("k"), 1).unwrap();
        assert!(back.allowed, "{kind}: {back:?}");
        assert_eq!(back.remaining, 3, "{kind}: {back:?}");
    }
}

/// A pause under a microsecond or over 100 years is refused naming `duration`, before anything
/// is written; so is a key over 1 KiB, naming `key`.
fn bad_pauses_write_nothing(backend: &Backend) {
    let limiter = backend.token_bucket("bad", 1.0, 5).unwrap();
    for bad in [Duration::ZERO, Duration::from_nanos(999), Duration::from_secs(101 * 365 * 24 * 3600)] {
        let err = limiter.pause_blocking(Some("k"), bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        assert_eq!(err.parameter(), Some("duration"), "{bad:?}");
        let err = runtime().block_on(limiter.pause(Some("k"), bad)).unwrap_err();
        assert_eq!(err.parameter(), Some("duration"), "{bad:?}");
    }
    let long_key = "x".repeat(1025);
    assert_eq!(limiter.pause_blocking(Some(&long_key), SECOND).unwrap_err().parameter(), Some("key"));
    let err = limiter.observe_blocking(Some(&long_key), 429, &[("Retry-After", "3")]).unwrap_err();
    assert_eq!(err.parameter(), Some("key"));
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed, "nothing was paused");
}

/// `observe` pauses for what a 429 asks, and does nothing for a response that asks nothing.
fn observe_pauses(backend: &Backend, clock: &ManualClock) {
    let limiter = backend.token_bucket("observed", 100.0, 100).unwrap();
    let ok = [("Retry-After", "30")];
    assert_eq!(limiter.observe_blocking(Some("api"), 200, &ok).unwrap(), None);
    assert_eq!(limiter.observe_blocking(Some("api"), 429, &[("Retry-After", "soon")]).unwrap(), None);
    assert!(limiter.check_blocking(Some("api"), 1).unwrap().allowed);
    let asked = limiter.observe_blocking(Some("api"), 429, &[("retry-after", "3")]).unwrap();
    assert_eq!(asked, Some(3 * SECOND));
    assert_eq!(limiter.check_blocking(Some("api"), 1).unwrap().retry_after, 3 * SECOND);
    // An HTTP-date is read against the limiter's clock.
    assert_eq!(clock.now_micros() % 1_000_000, 0, "the clock is on a whole second");
    let at = httpdate(clock.now_micros() / 1_000_000 + 20);
    let asked = runtime().block_on(limiter.observe(Some("api"), 503, &[("Retry-After", at)])).unwrap();
    assert_eq!(asked, Some(20 * SECOND));
    clock.advance(20 * SECOND);
    assert!(limiter.check_blocking(Some("api"), 1).unwrap().allowed);
}

/// A pause is never longer than the limiter's `max_pause` (default one hour), however long a
/// response asks for: `X-RateLimit-Reset: 4000000000` (70 years ahead) pauses for an hour, and
/// each clamp is counted. `resume` ends a pause early; bad `max_pause` values write nothing.
fn pauses_are_bounded_and_resumable(backend: &Backend, clock: &ManualClock) {
    let limiter = backend.token_bucket("bounded", 100.0, 100).unwrap();
    assert_eq!(limiter.max_pause(), HOUR);
    let decades = limiter.observe_blocking(Some("api"), 429, &[("X-RateLimit-Reset", "4000000000")]).unwrap();
    assert_eq!(decades, Some(HOUR), "70 years asked, one hour written");
    assert_eq!(limiter.check_blocking(Some("api"), 1).unwrap().retry_after, HOUR);
    let hostile = [("Retry-After", "2200000000")];
    assert_eq!(limiter.observe_blocking(Some("api"), 429, &hostile).unwrap(), Some(HOUR));
    assert_eq!(limiter.metrics().pauses_clamped, 2);
    assert_eq!(limiter.pause_blocking(Some("other"), 2 * HOUR).unwrap(), HOUR, "pause is bounded too");
    assert_eq!(limiter.metrics().pauses_clamped, 3);
    assert_eq!(limiter.pause_blocking(Some("other"), 30 * SECOND).unwrap(), HOUR, "not shortened");
    assert_eq!(limiter.metrics().pauses_clamped, 3, "a pause within the bound is no clamp");

    // The operator ends the pause: calls are decided at once, other keys stay paused.
    assert!(limiter.resume_blocking(Some("api")).unwrap());
    assert!(limiter.check_blocking(Some("api"), 1).unwrap().allowed);
    assert!(!limiter.resume_blocking(Some("api")).unwrap(), "nothing left to resume");
    assert!(!limiter.check_blocking(Some("other"), 1).unwrap().allowed);
    assert!(runtime().block_on(limiter.resume(Some("other"))).unwrap());
    assert!(limiter.check_blocking(Some("other"), 1).unwrap().allowed);

    // Per limiter and per call.
    let short = limiter.with_max_pause(10 * SECOND).unwrap();
    assert_eq!(short.observe_blocking(Some("a"), 429, &hostile).unwrap(), Some(10 * SECOND));
    let call = runtime().block_on(short.observe_within(Some("b"), 429, &hostile, Some(5 * SECOND))).unwrap();
    assert_eq!(call, Some(5 * SECOND));
    assert_eq!(
        short.observe_within_blocking(Some("c"), 429, &[("Retry-After", "3")], Some(HOUR)).unwrap(),
        Some(3 * SECOND)
    );
    assert_eq!(limiter.metrics().pauses_clamped, 5, "the copies share the metrics");
    clock.advance(10 * SECOND);
    assert!(short.check_blocking(Some("a"), 1).unwrap().allowed);

    // Bad bounds are refused naming `max_pause`, and nothing is paused.
    for bad in [Duration::ZERO, Duration::from_secs(101 * 365 * 24 * 3600)] {
        assert_eq!(limiter.with_max_pause(bad).unwrap_err().parameter(), Some("max_pause"));
        let err = limiter.observe_within_blocking(Some("d"), 429, &hostile, Some(bad)).unwrap_err();
        assert_eq!((err.kind(), err.parameter()), (ErrorKind::InvalidArgument, Some("max_pause")));
    }
    assert!(limiter.check_blocking(Some("d"), 1).unwrap().allowed, "nothing was paused");
}

fn httpdate(epoch_seconds: u64) -> String {
    // Formatted by hand (the core's dependency is not the tests'): IMF-fixdate.
    let days = epoch_seconds / 86_400;
    let secs = epoch_seconds % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][m as usize - 1];
    format!("{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Howard Hinnant's days-to-civil.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `acquire` sleeps exactly until the pause ends (by the manual clock), then checks.
fn acquire_waits_out_the_pause(backend: &Backend, clock: &ManualClock) {
    let limiter = backend.token_bucket("waiting", 100.0, 100).unwrap();
    limiter.pause_blocking(None, 5 * SECOND).unwrap();
    let err = limiter.acquire_blocking(None, 1, Some(SECOND)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OverLimit, "a wait shorter than the pause fails at once");
    assert_eq!(err.retry_after(), Some(5 * SECOND));
    runtime().block_on(async {
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(None, 1, Some(10 * SECOND)).await })
        };
        settle().await;
        clock.advance(5 * SECOND - Duration::from_micros(1));
        settle().await;
        assert!(!waiter.is_finished(), "acquire returned before the pause ended");
        clock.advance(Duration::from_micros(1));
        let decision = tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap().unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.remaining, 99);
    });
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// `reset` forgets the pause with the rest of the key's state.
fn reset_forgets_the_pause(backend: &Backend) {
    let limiter = backend.token_bucket("reset", 1.0, 5).unwrap();
    limiter.pause_blocking(Some("k"), HOUR).unwrap();
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    limiter.reset_blocking(Some("k")).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
}

/// A lease held before the pause is still released, and its slot counts again afterwards.
fn releases_apply_during_a_pause(backend: &Backend, clock: &ManualClock) {
    let mutex = backend.concurrent("held", 1, HOUR).unwrap();
    let lease = mutex.check_blocking(None, 1).unwrap().lease.unwrap();
    mutex.pause_blocking(None, 10 * SECOND).unwrap();
    mutex.release_blocking(None, &lease).unwrap();
    assert!(!mutex.check_blocking(None, 1).unwrap().allowed);
    clock.advance(10 * SECOND);
    assert!(mutex.check_blocking(None, 1).unwrap().allowed, "the release applied during the pause");
}

#[test]
fn memory_pauses() {
    let (backend, clock) = memory();
    pause_semantics(&backend, &clock, "p");
    bad_pauses_write_nothing(&backend);
    observe_pauses(&backend, &clock);
    pauses_are_bounded_and_resumable(&backend, &clock);
    acquire_waits_out_the_pause(&backend, &clock);
    reset_forgets_the_pause(&backend);
    releases_apply_during_a_pause(&backend, &clock);
}

/// An unlimited limiter touches no backend: it never pauses, but still checks its arguments.
#[test]
fn unlimited_never_pauses() {
    let limiter = Limiter::unlimited();
    assert_eq!(limiter.pause_blocking(None, HOUR).unwrap(), Duration::ZERO);
    assert!(limiter.check_blocking(None, 1).unwrap().allowed);
    assert_eq!(limiter.pause_blocking(None, Duration::ZERO).unwrap_err().parameter(), Some("duration"));
}

#[test]
fn redis_pauses_with_a_manual_clock() {
    let server = RedisServer::start();
    let (backend, clock) = redis_manual(&server);
    pause_semantics(&backend, &clock, "p");
    bad_pauses_write_nothing(&backend);
    observe_pauses(&backend, &clock);
    pauses_are_bounded_and_resumable(&backend, &clock);
    acquire_waits_out_the_pause(&backend, &clock);
    reset_forgets_the_pause(&backend);
    releases_apply_during_a_pause(&backend, &clock);
}

/// On Redis (the server's TIME): the pause is one key beside the limiter's, with its hash tag
/// and a TTL of the pause; a paused check is one EVALSHA and nothing else.
#[test]
fn redis_pause_key_has_the_tag_and_the_ttl_and_costs_no_round_trip() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    let limiter = backend.token_bucket("tagged", 1.0, 5).unwrap();
    assert!(limiter.check_blocking(Some("user:{7}"), 1).unwrap().allowed);
    limiter.pause_blocking(Some("user:{7}"), 30 * SECOND).unwrap();
    let keys = server.cli(&["KEYS", "*tagged*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_by_key(|k| k.contains(":p:"));
    assert_eq!(keys.len(), 2, "{keys:?}");
    let (state, pause) = (keys[0], keys[1]);
    assert!(pause.ends_with(":tagged:p:user:{7}"), "{pause}");
    assert_eq!(state[..state.find('}').unwrap()], pause[..pause.find('}').unwrap()], "one hash tag");
    let ttl: u64 = server.cli(&["PTTL", pause]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    let stats = support::commandstats_between_polls(&server, || {
        for _ in 0..5 {
            let refused = limiter.check_blocking(Some("user:{7}"), 1).unwrap();
            assert!(!refused.allowed && refused.retry_after > Duration::ZERO && refused.retry_after <= 30 * SECOND);
        }
    });
    let calls = |cmd: &str| support::command_calls(&stats, cmd);
    assert_eq!(calls("evalsha") + calls("eval"), 5, "{stats}");
    // Inside the scripts: one EXISTS and one MGET of the pause and block keys and one TIME per call; the engine
    // ran nothing.
    assert_eq!(calls("mget"), 5, "{stats}");
    assert_eq!(calls("exists"), 5, "{stats}");
    assert_eq!(calls("get"), 0, "{stats}");
    assert_eq!(calls("set") + calls("del"), 0, "a paused refusal writes nothing: {stats}");
}

/// A paused refusal from the server's TIME: exact to the microsecond of the server's clock.
#[test]
fn redis_pause_by_the_servers_clock_ends() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    let limiter = backend.token_bucket("short", 100.0, 100).unwrap();
    limiter.pause_blocking(None, Duration::from_millis(300)).unwrap();
    let refused = limiter.check_blocking(None, 1).unwrap();
    assert!(!refused.allowed);
    // Waits exactly the remaining pause by the server's clock, then is admitted.
    let admitted = limiter.acquire_blocking(None, 1, Some(5 * SECOND)).unwrap();
    assert!(admitted.allowed);
    assert!(admitted.decided_at_micros >= refused.decided_at_micros + refused.retry_after.as_micros() as u64);
    assert_eq!(admitted.remaining, 99, "the refusals consumed nothing");
}

/// On a 3-master Cluster: every kind pauses (no CROSSSLOT: the pause key shares the identity's
/// slot), keys spread over the masters, and the pause is per key.
#[test]
fn cluster_pauses_every_kind_on_every_master() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(START);
    let config = RedisConfig::cluster(cluster.seeds()).clock(Arc::new(clock.clone()));
    let backend = Backend::redis_with(config).unwrap();
    pause_semantics(&backend, &clock, "c");
    let limiter = backend.token_bucket("spread", 100.0, 100).unwrap();
    for i in 0..30 {
        limiter.pause_blocking(Some(&format!("user-{i}")), HOUR).unwrap();
    }
    for i in 0..30 {
        assert!(!limiter.check_blocking(Some(&format!("user-{i}")), 1).unwrap().allowed, "user-{i}");
    }
    for node in &cluster.nodes {
        let held: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
        assert!(held > 0, "every master holds some pauses");
    }
}

/// A leased token bucket remembers a refusal from Redis until its `retry_after`, a paused one
/// too: `resume` forgets it at once in the process that resumes, and within their live poll in
/// the others (two backends on one server stand for two processes; their manual clocks never
/// move, so only the resume can end the remembered refusal). (Before, both kept refusing from
/// memory until the pause's end.)
#[test]
fn resume_reaches_a_leased_limiters_remembered_refusal() {
    let server = RedisServer::start();
    let (app, _app_clock) = redis_manual(&server);
    let (operator, _operator_clock) = redis_manual(&server);
    let limiter = app.leased("leased-paused", 100.0, 100, Some(10), HOUR).unwrap();
    let ops = operator.leased("leased-paused", 100.0, 100, Some(10), HOUR).unwrap();
    limiter.pause_blocking(Some("here"), HOUR).unwrap();
    assert!(!limiter.check_blocking(Some("here"), 1).unwrap().allowed);
    assert!(limiter.resume_blocking(Some("here")).unwrap());
    let back = limiter.check_blocking(Some("here"), 1).unwrap();
    assert!(back.allowed, "resumed in this process, yet refused from memory: {back:?}");

    ops.pause_blocking(Some("there"), HOUR).unwrap();
    assert!(!limiter.check_blocking(Some("there"), 1).unwrap().allowed);
    assert!(ops.resume_blocking(Some("there")).unwrap());
    support::wait_until("another process's resume to reach the leased limiter", Duration::from_secs(30), || {
        limiter.check_blocking(Some("there"), 1).unwrap().allowed
    });
}
