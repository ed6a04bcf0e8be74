//! The operator's views of raw state, on memory, standalone Redis and a 3-master Cluster: a
//! concurrent key's holders (fencing tokens, ages, oldest first) and waiters, the busiest keys of
//! a limiter (found on every master), and the per-minute history the metrics flush writes.

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, ErrorKind, Kind, RedisConfig};
use support::{RedisCluster, RedisServer};

const HOUR: Duration = Duration::from_secs(3600);

/// Polls `probe` until it holds (the background acquire registers as a waiter when its first
/// check reaches the backend); gives up after 10 s.
fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    let start = Instant::now();
    while !probe() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn holders_and_waiters(backend: &Backend) {
    let limiter = backend.concurrent("views-mutex", 2, HOUR).unwrap();
    let first = limiter.check_blocking(Some("job"), 1).unwrap().lease.unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let second = limiter.check_blocking(Some("job"), 1).unwrap().lease.unwrap();
    let seen = limiter.concurrent_use_blocking(Some("job")).unwrap();
    assert_eq!((seen.held, seen.waiters, seen.holders.len()), (2, 0, 2), "{seen:?}");
    // Oldest grant first, with its own fencing token, older than the second.
    assert_eq!(seen.holders[0].fencing_token, Some(first.fencing_token));
    assert_eq!(seen.holders[1].fencing_token, Some(second.fencing_token));
    let (a, b) = (seen.holders[0].age.unwrap(), seen.holders[1].age.unwrap());
    assert!(a >= b + Duration::from_millis(15), "ages {a:?} {b:?}");
    assert!(seen.holders.iter().all(|h| !h.overdue && h.expires_in > HOUR - Duration::from_secs(60)));
    // The lease id is not shown, only a digest of it.
    assert_eq!(seen.holders[0].lease.len(), 8);
    assert!(!format!("{:x}", first.id).contains(&seen.holders[0].lease));
    assert_ne!(seen.holders[0].lease, seen.holders[1].lease);
    // Another key has nobody.
    assert_eq!(limiter.concurrent_use_blocking(Some("other")).unwrap().held, 0);

    // A third caller waits; it is counted until it gets the slot a release frees.
    let waiting = limiter.clone();
    let waiter = std::thread::spawn(move || waiting.acquire_blocking(Some("job"), 1, Some(Duration::from_secs(20))));
    eventually("one waiter", || limiter.concurrent_use_blocking(Some("job")).unwrap().waiters == 1);
    limiter.release_blocking(Some("job"), &first).unwrap();
    let third = waiter.join().unwrap().unwrap().lease.unwrap();
    let seen = limiter.concurrent_use_blocking(Some("job")).unwrap();
    assert_eq!((seen.held, seen.waiters), (2, 0), "{seen:?}");
    let tokens: Vec<_> = seen.holders.iter().map(|h| h.fencing_token).collect();
    assert_eq!(tokens, [Some(second.fencing_token), Some(third.fencing_token)]);
    assert!(third.fencing_token > second.fencing_token);

    let bucket = backend.token_bucket("views-mutex-bucket", 1.0, 5).unwrap();
    let refused = bucket.concurrent_use_blocking(None).unwrap_err();
    assert_eq!((refused.kind(), refused.parameter()), (ErrorKind::InvalidArgument, Some("limiter")));
}

fn busiest_keys(backend: &Backend, keys: usize) {
    let limiter = backend.bucket("views-busy", 100, HOUR).unwrap();
    for (key, n) in [("light", 2), ("heavy", 9), ("middle", 5)] {
        for _ in 0..n {
            assert!(limiter.check_blocking(Some(key), 1).unwrap().allowed);
        }
    }
    for i in 0..keys {
        limiter.check_blocking(Some(&format!("spread-{i}")), 1).unwrap();
    }
    // Another limiter's keys are not this one's.
    backend.bucket("views-busy-other", 100, HOUR).unwrap().check_blocking(Some("heavy"), 50).unwrap();
    let top = limiter.busiest_keys_blocking(3).unwrap();
    let got: Vec<_> = top.iter().map(|k| (k.key.as_str(), k.used, k.remaining)).collect();
    assert_eq!(got, [("heavy", 9, 91), ("middle", 5, 95), ("light", 2, 98)]);
    let all = limiter.busiest_keys_blocking(usize::MAX).unwrap();
    assert_eq!(all.len(), 3 + keys, "every key is found");
}

fn history(backend: &Backend) {
    let limiter = backend.bucket("views-history", 3, HOUR).unwrap();
    for _ in 0..5 {
        limiter.check_blocking(Some("k"), 1).unwrap();
    }
    let minutes = backend.history_blocking("views-history", Kind::Bucket).unwrap();
    assert_eq!(minutes.len(), 60);
    let allowed: u64 = minutes.iter().map(|m| m.allowed).sum();
    let refused: u64 = minutes.iter().map(|m| m.refused).sum();
    assert_eq!((allowed, refused), (3, 2));
    // Counted in the last minute or two (a flush may straddle a minute's end).
    assert!(minutes[..58].iter().all(|m| m.allowed == 0 && m.refused == 0));
    assert!(minutes.windows(2).all(|w| w[1].start > w[0].start));
    // Another limiter has none.
    let other = backend.history_blocking("views-nothing", Kind::Bucket).unwrap();
    assert!(other.iter().all(|m| m.allowed == 0 && m.refused == 0));
}

#[test]
fn memory() {
    let backend = Backend::memory();
    holders_and_waiters(&backend);
    busiest_keys(&backend, 20);
    assert!(backend.history_blocking("views-history", Kind::Bucket).unwrap().is_empty(), "memory keeps none");
}

#[test]
fn redis() {
    let server = RedisServer::start();
    let backend = Backend::redis(&server.url()).unwrap();
    holders_and_waiters(&backend);
    busiest_keys(&backend, 20);
    history(&backend);
}

#[test]
fn cluster() {
    let cluster = RedisCluster::start();
    let backend = Backend::redis_with(RedisConfig::cluster(cluster.seeds())).unwrap();
    runtime();
    holders_and_waiters(&backend);
    busiest_keys(&backend, 60);
    // The keys found lie on every master.
    for node in &cluster.nodes {
        let held = node.cli(&["--scan", "--pattern", "rk:{*}:bucket:views-busy:h:*"]);
        assert!(held.lines().count() >= 5, "a master holds few keys: {held}");
    }
    history(&backend);
}
