//! The GCRA family (token bucket, leaky, points) admits its configured rate exactly, whatever the
//! rate (no time per unit rounded to a whole microsecond), on memory and on Redis alike; and an
//! overcharge reported through `points_used` is charged as debt, bounded, once per permit.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, Clock, Limiter, ManualClock, MemoryConfig};
use support::RedisServer;

const START: u64 = 1_800_000_000_000_000;

/// Admissions of `limiter` (one key, cost 1) over `span` of manual time, after its burst was
/// spent: every refusal moves the clock by its `retry_after`, so nothing is waited in vain.
fn admissions_over(limiter: &Limiter, clock: &ManualClock, span: Duration) -> u64 {
    while limiter.check_blocking(Some("k"), 1).unwrap().allowed {}
    let end = clock.now_micros() + span.as_micros() as u64;
    let mut admitted = 0;
    loop {
        let d = limiter.check_blocking(Some("k"), 1).unwrap();
        if d.allowed {
            admitted += 1;
            continue;
        }
        let next = clock.now_micros() + d.retry_after.as_micros() as u64;
        if next > end {
            return admitted;
        }
        clock.set_micros(next);
    }
}

/// A second, or long enough for a few thousand admissions at low rates: the manual clock counts
/// whole microseconds, so an admission due at a fraction of one lands on the next one, and over
/// a single second of `rate = 7` that boundary alone would be one admission in seven.
fn span_for(rate: f64) -> Duration {
    Duration::from_secs_f64((3000.0 / rate).max(1.0).ceil())
}

fn assert_within_a_thousandth(what: &str, admitted: u64, expected: f64) {
    let error = (admitted as f64 - expected).abs() / expected;
    assert!(error <= 0.001, "{what}: {admitted} admitted, expected {expected} (off by {:.4}%)", error * 100.0);
}

const RATES: [u64; 6] = [700_000, 3, 7, 333_333, 999_999, 1_000_000];

#[test]
fn token_buckets_admit_their_rate_over_a_second_on_memory() {
    for rate in RATES {
        let clock = ManualClock::new(START);
        let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
        let limiter = backend.token_bucket("exact", rate as f64, 10).unwrap();
        let span = span_for(rate as f64);
        let admitted = admissions_over(&limiter, &clock, span);
        assert_within_a_thousandth(
            &format!("token_bucket(rate={rate}) over {span:?}"),
            admitted,
            rate as f64 * span.as_secs_f64(),
        );
    }
}

#[test]
fn leaky_and_points_admit_their_rate_over_a_second_on_memory() {
    // size/drain and capacity/refill whose time per unit is not a whole microsecond.
    for (size, drain) in [(700_000, 1.0), (3, 1.0), (7, 1.0), (999_999, 1.0), (3, 2.0)] {
        let clock = ManualClock::new(START);
        let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
        let rate = size as f64 / drain;
        // High rates over 100 ms (tens of thousands of admissions) keep the test quick.
        let span = if rate >= 10_000.0 { Duration::from_millis(100) } else { span_for(rate) };
        let expected = rate * span.as_secs_f64();
        let leaky = backend.leaky("exact", size, Duration::from_secs_f64(drain)).unwrap();
        let admitted = admissions_over(&leaky, &clock, span);
        assert_within_a_thousandth(&format!("leaky({size}, {drain}) over {span:?}"), admitted, expected);
        let points = backend.points("exact", size, Duration::from_secs_f64(drain)).unwrap();
        let admitted = admissions_over(&points, &clock, span);
        assert_within_a_thousandth(&format!("points({size}, {drain}) over {span:?}"), admitted, expected);
    }
}

#[test]
fn token_buckets_admit_their_rate_on_redis() {
    let server = RedisServer::start();
    for rate in [700_000u64, 333_333, 3, 7] {
        let clock = ManualClock::new(START);
        let backend = Backend::redis_with(
            support::redis_config(server.url()).prefix(format!("exact{rate}")).clock(Arc::new(clock.clone())),
        )
        .unwrap();
        let limiter = backend.token_bucket("exact", rate as f64, 10).unwrap();
        // A few thousand admissions: every call is a round trip.
        let span = if rate > 1000 { Duration::from_millis(10) } else { span_for(rate as f64) };
        let admitted = admissions_over(&limiter, &clock, span);
        let expected = rate as f64 * span.as_secs_f64();
        assert_within_a_thousandth(&format!("redis token_bucket(rate={rate}) over {span:?}"), admitted, expected);
    }
}

/// Points (capacity 10, refilled in 10 s: one point per second) on `backend`: a block admitted
/// with an estimate of 2 that used 25 is charged all 25 (debt waited out), not refused after the
/// fact; its permit reports once; and debt is bounded at 16 capacities ahead of now.
fn overcharges_are_debt(backend: &Backend, clock: &ManualClock) {
    let points = backend.points("debt", 10, Duration::from_secs(10)).unwrap();
    // A refund reported twice through one permit refunds once.
    points
        .within_limit_blocking(Some("r"), 4, ratekeeper::Policy::Raise, |permit| {
            // A report refused as invalid writes nothing and leaves the permit's report to make.
            assert_eq!(permit.points_used_blocking(1 << 60).unwrap_err().parameter(), Some("actual"));
            assert_eq!(permit.points_used_blocking(1).unwrap().remaining, 9);
            assert!(permit.points_used_blocking(1).is_err());
        })
        .unwrap();
    assert_eq!(points.peek_blocking(Some("r")).unwrap().remaining, 9, "refunded once");

    let reported = points
        .within_limit_blocking(Some("k"), 2, ratekeeper::Policy::Raise, |permit| {
            let after = permit.points_used_blocking(25).expect("an actual cost above capacity is charged");
            let again = permit.points_used_blocking(25).unwrap_err();
            (after, again)
        })
        .unwrap()
        .unwrap();
    let (after, again) = reported;
    // 25 points owed: 15 beyond the capacity, so a call of 1 waits 16 s.
    assert!(!after.allowed);
    assert_eq!((after.retry_after, after.reset_after), (Duration::from_secs(16), Duration::from_secs(25)));
    assert_eq!(again.kind(), ratekeeper::ErrorKind::InvalidArgument, "{again}");
    assert_eq!(again.parameter(), Some("actual"));
    let peek = points.peek_blocking(Some("k")).unwrap();
    assert_eq!(peek.retry_after, Duration::from_secs(16), "the second report changed nothing");
    clock.advance(Duration::from_secs(16) - Duration::from_micros(1));
    assert!(!points.check_blocking(Some("k"), 1).unwrap().allowed);
    clock.advance(Duration::from_micros(1));
    assert!(points.check_blocking(Some("k"), 1).unwrap().allowed);

    // Debt is bounded: 16 capacities (160 s) ahead of now at most.
    let d = points.points_used_blocking(Some("big"), 1, 1 << 40).unwrap();
    assert_eq!((d.retry_after, d.reset_after), (Duration::from_secs(151), Duration::from_secs(160)));
}

#[test]
fn overcharges_are_debt_on_memory() {
    let clock = ManualClock::new(START);
    let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
    overcharges_are_debt(&backend, &clock);
}

#[test]
fn overcharges_are_debt_on_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backend =
        Backend::redis_with(support::redis_config(server.url()).prefix("debt").clock(Arc::new(clock.clone()))).unwrap();
    overcharges_are_debt(&backend, &clock);
}

/// The benchmarks page's token-bucket peer, the cheapest GCRA a user could write
/// (bench/lua/hand_written_gcra.lua, which bench/python/peer_server_time.py times against
/// gcra.lua), is a GCRA: on a real server it admits its burst and refuses the next call, and its
/// key holds the theoretical arrival time with a TTL.
#[test]
fn the_benchmarks_hand_written_gcra_admits_its_burst_and_refuses_the_next() {
    let server = RedisServer::start();
    let mut conn = redis::Client::open(server.url()).and_then(|c| c.get_connection()).expect("a connection");
    let script = redis::Script::new(include_str!("../../../bench/lua/hand_written_gcra.lua"));
    // One token an hour (T, µs), a burst of three (tau = 3 T): nothing refills during the test.
    let (t, tau) = (3_600_000_000u64, 3 * 3_600_000_000u64);
    let replies: Vec<i64> =
        (0..4).map(|_| script.key("peer-gcra").arg(t).arg(tau).invoke(&mut conn).expect("the script runs")).collect();
    assert_eq!(replies, [1, 1, 1, 0], "three admitted, the fourth refused");
    let ttl: i64 = redis::cmd("PTTL").arg("peer-gcra").query(&mut conn).unwrap();
    assert!(ttl > 2 * 3_600_000 && ttl <= 3 * 3_600_000, "the key lives until the bucket is full again: {ttl} ms");
}

/// The token bucket's stored state is what processes of different versions share during a
/// rolling deploy (issue #48 changed how the script receives its spec, not what it stores): a
/// TAT written in the stored form, microseconds and nanoseconds within the microsecond
/// (`bucket_state.lua`), is read as that TAT, and an admitted check writes the same form.
#[test]
fn a_token_buckets_stored_state_keeps_its_form() {
    let server = RedisServer::start();
    let mut conn = redis::Client::open(server.url()).and_then(|c| c.get_connection()).expect("a connection");
    let clock = ManualClock::new(START);
    let backend =
        Backend::redis_with(support::redis_config(server.url()).prefix("form").clock(Arc::new(clock.clone()))).unwrap();
    // 10 per second (one token every 100 ms), bursts of 10.
    let limiter = backend.token_bucket("form", 10.0, 10).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*form*").query(&mut conn).unwrap();
    let state: Vec<&String> = keys
        .iter()
        .filter(|k| redis::cmd("TYPE").arg(k.as_str()).query::<String>(&mut conn).unwrap() == "string")
        .collect();
    assert_eq!(state.len(), 1, "one state key among {keys:?}");
    let state = state[0].as_str();
    let stored: String = redis::cmd("GET").arg(state).query(&mut conn).unwrap();
    assert_eq!(stored, (START + 100_000).to_string(), "one token's time ahead of now, in whole µs");
    // As a process of another version writes it: 5.0000025 tokens in use (a TAT 500,000.25 µs
    // ahead), so 4 are left, and taking them moves the TAT by 400 ms, fraction kept.
    let () = redis::cmd("SET").arg(state).arg(format!("{}.250", START + 500_000)).query(&mut conn).unwrap();
    assert_eq!(limiter.peek_blocking(Some("k")).unwrap().remaining, 4);
    assert!(limiter.check_blocking(Some("k"), 4).unwrap().allowed);
    assert!(!limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let stored: String = redis::cmd("GET").arg(state).query(&mut conn).unwrap();
    assert_eq!(stored, format!("{}.250", START + 900_000));
}
