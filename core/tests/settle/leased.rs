//! Settles of leased token buckets against a real `redis-server` (docs/src/concepts/settle.md):
//! a settle works on the shared bucket, from any process; a refund gives back only what the
//! bucket would hold had the call's tokens never been taken; a settle whose reply was lost
//! applies once when retried; and the leased rule (`capacity + rate × (span + lease_ttl)`) holds
//! over every span with settles in the mix.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Backend, Clock, Decision, Limiter, ManualClock, RedisConfig};
use ratekeeper_test_support::judge::{self, Record, Rule};
use support::{settle_retried_after_a_lost_reply, RedisServer};

const START: u64 = 1_800_000_000_000_000;
const TTL: Duration = Duration::from_secs(1);

/// `n` processes' worth of backends on one server and prefix, sharing one manual clock.
fn fleet(url: &str, prefix: &str, n: usize, clock: &ManualClock) -> Vec<Backend> {
    (0..n)
        .map(|_| Backend::redis_with(support::redis_config(url).prefix(prefix).clock(Arc::new(clock.clone()))).unwrap())
        .collect()
}

fn remaining(limiter: &Limiter) -> u64 {
    limiter.peek_blocking(None).expect("peek").remaining
}

/// A decision checked by one process is settled by another (a job carries it): its backend is
/// another object, the state is the same.
#[test]
fn a_decision_checked_in_one_process_is_settled_in_another() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backends = fleet(&server.url(), "elsewhere", 2, &clock);
    for kind in ["token_bucket", "leased"] {
        let build = |b: &Backend| match kind {
            "leased" => b.leased("other", 0.001, 10, Some(1), TTL).unwrap(),
            _ => b.token_bucket("other-tb", 0.001, 10).unwrap(),
        };
        let (checker, settler) = (build(&backends[0]), build(&backends[1]));
        let decision = checker.check_blocking(None, 8).expect("check");
        assert_eq!(remaining(&checker), 2, "{kind}");
        let settled = settler.settle_blocking(&decision, 3).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(settled.remaining, 7, "{kind}: the refund applied");
        // The checking process's retry applies nothing more.
        assert_eq!(checker.settle_blocking(&decision, 3).expect("retry").remaining, 7, "{kind}");
        assert_eq!(remaining(&checker), 7, "{kind}");
    }
}

/// Tokens taken by a lease, then refilled by time while the bucket was used by others: a
/// refund of them gives back nothing, since the bucket would have been full meanwhile all the
/// same. A plain token bucket, whose calls are admitted when charged, gives them back.
#[test]
fn a_refund_gives_back_only_what_the_bucket_would_hold_had_the_tokens_never_been_taken() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backends = fleet(&server.url(), "low", 2, &clock);
    let a = backends[0].leased("low", 10.0, 10, Some(5), TTL).unwrap();
    let b = backends[1].leased("low", 10.0, 10, Some(5), TTL).unwrap();
    let d = a.check_blocking(None, 5).expect("check");
    assert!(d.allowed);
    assert_eq!(remaining(&a), 5);
    // Full again after 0.5 s; another process then takes 8.
    clock.advance(Duration::from_millis(600));
    assert!(b.check_blocking(None, 8).unwrap().allowed);
    assert_eq!(remaining(&a), 2);
    let settled = a.settle_blocking(&d, 0).expect("settle");
    assert_eq!(settled.remaining, 2, "the refilled tokens came back on top of the 8 taken since");

    // While the bucket has not refilled since the grant, a refund does come back.
    let d = a.check_blocking(None, 2).expect("check");
    assert!(d.allowed);
    assert_eq!(remaining(&a), 0);
    assert_eq!(a.settle_blocking(&d, 1).expect("settle").remaining, 1);
    // A charge is debt on the shared bucket, seen by every process.
    assert!(!a.settle_blocking(&a.check_blocking(None, 1).expect("check"), 11).unwrap().allowed);
    let refused = b.check_blocking(None, 1).unwrap();
    assert!(!refused.allowed && refused.retry_after == Duration::from_millis(1100), "{refused:?}");
}

/// The leased rule's case for refunds: a call spent 50 tokens of a lease long ago; the bucket
/// refilled, and six processes lease all of it and hold it; the old call is settled to 0; all
/// spend what they hold just before their leases lapse, renewing from what the bucket holds.
/// Had the refund put its 50 back on the bucket (bounded only by the bucket's use now, as a
/// token bucket's is), they would have spent from them too: 111 in one instant where the
/// leased rule allows 110 (seen with the lease's low left out of the refund).
#[test]
fn a_refund_after_the_bucket_refilled_adds_nothing_to_what_leases_spend_late() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backends = fleet(&server.url(), "late", 7, &clock);
    let (rate, capacity) = (10.0, 100);
    let a = backends[0].leased("late", rate, capacity, Some(50), TTL).unwrap();
    let takers: Vec<Limiter> =
        backends[1..].iter().map(|b| b.leased("late", rate, capacity, Some(50), TTL).unwrap()).collect();
    let mut record = Record::default();
    let d = a.check_blocking(None, 50).unwrap();
    assert!(d.allowed);
    record.admitted.push((clock.now_micros(), 50));
    clock.advance(Duration::from_secs(11));
    for l in &takers {
        assert!(l.check_blocking(None, 1).unwrap().allowed);
        record.admitted.push((clock.now_micros(), 1));
    }
    assert!(remaining(&a) <= 1, "the takers hold the bucket");
    a.settle_blocking(&d, 0).unwrap();
    record.corrections.push((clock.now_micros(), -50));
    clock.advance(TTL - Duration::from_millis(1));
    for l in &takers {
        while l.check_blocking(None, 1).unwrap().allowed {
            record.admitted.push((clock.now_micros(), 1));
        }
    }
    assert!(record.admitted.len() > 100, "the bucket is used: {}", record.admitted.len());
    judge::judge(Rule::Rate { capacity: capacity + 10, emission_us: 100_000 }, &record).unwrap();
}

/// A lease given back with tokens unspent is still found by a refund of a call spent
/// from it, while Redis remembers it.
#[test]
fn a_refund_reaches_a_lease_given_back_since() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START);
    let backends = fleet(&server.url(), "given", 1, &clock);
    let a = backends[0].leased("given", 0.001, 10, Some(6), TTL).unwrap();
    let d = a.check_blocking(None, 2).expect("check");
    assert_eq!((d.allowed, remaining(&a)), (true, 5), "a lease of 5 (half the bucket), 2 spent");
    a.close_blocking().unwrap();
    assert_eq!(remaining(&a), 8, "3 given back");
    assert_eq!(a.settle_blocking(&d, 0).expect("settle").remaining, 10);
}

#[test]
fn a_leased_settle_retried_after_its_reply_was_lost_applies_once() {
    let server = RedisServer::start();
    let config = RedisConfig::new(server.url()).prefix("leased-lost").deadline(support::LOST_REPLY_DEADLINE);
    let backend = Backend::redis_with(config).expect("a Redis backend");
    for blocking in [true, false] {
        // A refund (8 checked, 3 used), then a charge (2 checked, 4 used). Slow enough that time
        // never shows in `remaining`; leases of 1, so one round trip per call.
        for (charged, actual) in [(8, 3), (2, 4)] {
            let make = |name: &str| backend.leased(name, 0.001, 10, Some(1), TTL).unwrap();
            settle_retried_after_a_lost_reply(&server, make, None, (10, charged, actual), blocking);
        }
    }
}

/// Three processes check with random costs and settle random calls (of any of them, from any
/// of them, to 0 up to 2 more than checked), let time pass (often to just before a lease
/// lapses) and close, on a manual clock, for several seeds. The judge counts each call's actual
/// cost: its check's cost at its instant, the settle's difference at the settle's.
#[test]
fn random_fleet_traffic_with_settles_stays_within_the_leased_rule_over_every_span() {
    let server = RedisServer::start();
    let (rate, capacity, ttl) = (50.0, 40, Duration::from_millis(300));
    let emission_us = 20_000;
    let burst = capacity + 15; // capacity + rate × lease_ttl
    let (mut refunded, mut charged) = (0, 0);
    for round in 0..4u64 {
        let clock = ManualClock::new(START);
        let backends = fleet(&server.url(), &format!("settled{round}"), 3, &clock);
        let limiters: Vec<Limiter> = backends
            .iter()
            .enumerate()
            .map(|(i, b)| b.leased("random", rate, capacity, Some(4 + 8 * i as u64), ttl).unwrap())
            .collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (round << 32);
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut record = Record::default();
        let mut unsettled: Vec<Decision> = Vec::new();
        for _ in 0..1500 {
            let l = &limiters[next(3) as usize];
            match next(14) {
                0..=6 => {
                    let cost = 1 + next(3);
                    let d = l.check_blocking(None, cost).unwrap();
                    if d.allowed {
                        record.admitted.push((clock.now_micros(), cost));
                        unsettled.push(d);
                    }
                }
                7..=8 if !unsettled.is_empty() => {
                    let d = unsettled.swap_remove(next(unsettled.len() as u64) as usize);
                    let cost = d.settle.as_ref().expect("a ticket").cost;
                    let actual = next(cost + 3);
                    l.settle_blocking(&d, actual).unwrap();
                    record.corrections.push((clock.now_micros(), actual as i64 - cost as i64));
                    if actual < cost {
                        refunded += cost - actual;
                    } else {
                        charged += actual - cost;
                    }
                }
                7..=10 => clock.advance(Duration::from_micros(next(40_000))),
                11 => clock.advance(ttl - Duration::from_micros(1 + next(2_000))),
                _ => l.close_blocking().unwrap(),
            }
        }
        assert!(record.admitted.iter().map(|a| a.1).sum::<u64>() > 200, "the bucket is used");
        judge::judge(Rule::Rate { capacity: burst, emission_us }, &record)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    assert!(refunded > 100 && charged > 100, "settles in the mix: {refunded} refunded, {charged} charged");
}

/// A block reaches a process spending a lease it already holds: another process blocks the
/// key, and within the live poll the holder refuses from its lease too, until the block ends
/// (`unblock`, from the other process). The blocking process itself refuses at once.
fn a_block_from_another_process_stops_spending_from_a_held_lease(config: &dyn Fn() -> RedisConfig) {
    let (a, b) = (Backend::redis_with(config()).unwrap(), Backend::redis_with(config()).unwrap());
    let holder = a.leased("held", 0.001, 1000, Some(100), Duration::from_secs(60)).unwrap();
    let blocker = b.leased("held", 0.001, 1000, Some(100), Duration::from_secs(60)).unwrap();
    assert!(holder.check_blocking(Some("k"), 1).unwrap().allowed, "a lease of 100 taken");
    assert!(blocker.check_blocking(Some("k"), 1).unwrap().allowed, "and another");
    blocker.block_blocking(Some("k"), Duration::from_secs(30)).unwrap();
    let refused = blocker.check_blocking(Some("k"), 1).unwrap();
    assert!(!refused.allowed && refused.retry_after > Duration::from_secs(29), "the blocker at once: {refused:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let d = holder.check_blocking(Some("k"), 1).unwrap();
        if !d.allowed {
            break d;
        }
        assert!(std::time::Instant::now() < deadline, "the holder kept spending its lease past the block");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.retry_after > Duration::from_secs(25), "refused for the block: {refused:?}");
    assert!(holder.metrics().blocked >= 1);
    blocker.unblock_blocking(Some("k")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !holder.check_blocking(Some("k"), 1).unwrap().allowed {
        assert!(std::time::Instant::now() < deadline, "the holder stayed blocked after the unblock");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_block_from_another_process_stops_spending_from_a_held_lease_standalone() {
    let server = RedisServer::start();
    a_block_from_another_process_stops_spending_from_a_held_lease(&|| {
        RedisConfig::new(server.url()).prefix("leased-block")
    });
}

#[test]
fn a_block_from_another_process_stops_spending_from_a_held_lease_on_a_cluster() {
    let cluster = support::RedisCluster::start();
    a_block_from_another_process_stops_spending_from_a_held_lease(&|| {
        RedisConfig::cluster(cluster.seeds()).prefix("leased-block")
    });
}
