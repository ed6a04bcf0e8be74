//! The lease pool's own bounds, on a real Redis server: lease ids that do not collide across
//! processes, and a per-key map that stays bounded.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper_test_support::RedisServer;

use super::*;
use crate::{Backend, ManualClock, RedisConfig};

/// The first lease ids of 100,000 processes (each with its own random seed, as unrelated
/// processes have; or one parent's seed, as forked children have) are all distinct: a
/// give-back names its lease, and a collision would give back into, and wipe, another
/// process's lease. (Before, an id was a 21-bit prefix and a counter from 1: among 1,000
/// processes two shared their first id about one time in five.)
#[test]
fn lease_ids_do_not_collide_across_processes() {
    use std::hash::BuildHasher;
    let random = foldhash::fast::RandomState::default();
    let processes = 100_000u32;
    let unrelated: HashSet<u64> = (0..processes).map(|p| lease_id(random.hash_one(p), 4242, 1)).collect();
    assert_eq!(unrelated.len(), processes as usize, "unrelated processes' first ids collided");
    let forked: HashSet<u64> = (0..processes).map(|pid| lease_id(7, pid, 1)).collect();
    assert_eq!(forked.len(), processes as usize, "forked children's first ids collided");
    assert!(!unrelated.contains(&0) && !forked.contains(&0), "0 names no lease");
}

fn leased_on(server: &RedisServer, clock: &ManualClock) -> Limiter {
    let config = RedisConfig::new(server.url()).prefix("pool").clock(Arc::new(clock.clone()));
    let backend = Backend::redis_with(config).unwrap();
    backend.leased("pool", 1000.0, 1_000_000, Some(10), Duration::from_secs(3600)).unwrap()
}

fn keys_held(limiter: &Limiter) -> usize {
    limiter.inner.pool.as_ref().unwrap().keyed.read().unwrap().len()
}

/// The per-key map stays at most [`MAX_KEYS`] however many keys hold a live lease: keys with
/// nothing left go first, then the leases that lapse soonest (their unspent tokens are unused:
/// under-use, never over-use). (Before, keys that held tokens were never dropped: the map grew
/// without bound past the cap.)
#[test]
fn the_per_key_map_stays_bounded() {
    let server = RedisServer::start();
    let clock = ManualClock::new(1_800_000_000_000_000);
    let limiter = leased_on(&server, &clock);
    for i in 0..MAX_KEYS + 50 {
        assert!(limiter.check_blocking(Some(&format!("k{i}")), 1).unwrap().allowed);
        clock.advance(Duration::from_micros(1));
        assert!(keys_held(&limiter) <= MAX_KEYS, "{} keys held after {i}", keys_held(&limiter));
    }
    // The newest keys are kept, and spend from their lease without a round trip.
    let newest = format!("k{}", MAX_KEYS + 49);
    assert!(limiter.check_local(Some(&newest), 1).unwrap().is_some_and(|d| d.allowed));
}
