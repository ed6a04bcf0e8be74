//! Behaviour of the memory backend and of the call styles that the vectors cannot express:
//! the max_keys bound, idle expiry, exact waits, wake-on-release, within_limit, contention.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{runtime, Backend, Clock, ErrorKind, Limiter, ManualClock, MemoryConfig, Policy};

const START: u64 = 1_800_000_000_000_000;

fn manual(max_keys: usize) -> (Backend, ManualClock) {
    let clock = ManualClock::new(START);
    let backend =
        Backend::memory_with(MemoryConfig::default().max_keys(max_keys).clock(Arc::new(clock.clone()))).unwrap();
    (backend, clock)
}

#[test]
fn full_backend_refuses_new_keys_and_keeps_live_state() {
    let (backend, clock) = manual(10);
    let limiter = backend.bucket("full", 3, Duration::from_secs(60)).unwrap();
    for i in 0..10 {
        assert!(limiter.check_blocking(Some(&format!("k{i}")), 2).unwrap().allowed);
    }
    let err = limiter.check_blocking(Some("newcomer"), 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BackendUnavailable);
    assert!(err.to_string().contains("max_keys = 10"), "{err}");
    // Live keys were not reset to make room.
    let d = limiter.check_blocking(Some("k0"), 2).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.remaining, 1);
    // Once their windows are over, expired state goes first and new keys are admitted.
    clock.advance(Duration::from_secs(60));
    assert!(limiter.check_blocking(Some("newcomer"), 1).unwrap().allowed);
    assert_eq!(backend.memory_len(), Some(1));
}

#[test]
fn refused_peeked_and_zero_cost_calls_store_nothing() {
    let (backend, _clock) = manual(100);
    let limiter = backend.token_bucket("nothing", 5.0, 2).unwrap();
    limiter.peek_blocking(Some("a")).unwrap();
    limiter.check_blocking(Some("b"), 0).unwrap();
    assert_eq!(limiter.check_blocking(Some("c"), 3).unwrap_err().parameter(), Some("cost"));
    assert_eq!(limiter.check_blocking(Some(&"x".repeat(1025)), 1).unwrap_err().parameter(), Some("key"));
    assert_eq!(backend.memory_len(), Some(0));
}

#[test]
fn idle_state_is_swept_as_new_keys_arrive() {
    let (backend, clock) = manual(1_000_000);
    let limiter = backend.token_bucket("idle", 10.0, 10).unwrap();
    for i in 0..5_000 {
        limiter.check_blocking(Some(&format!("old{i}")), 1).unwrap();
    }
    assert_eq!(backend.memory_len(), Some(5_000));
    clock.advance(Duration::from_secs(1)); // every bucket is full again: the state is idle
    for i in 0..5_000 {
        limiter.check_blocking(Some(&format!("new{i}")), 1).unwrap();
    }
    let len = backend.memory_len().unwrap();
    assert!(len < 10_000, "expired keys were never swept: {len} held");
}

/// Shards take room for keys in chunks (so that inserts on two cores do not share one count):
/// threads racing to fill a backend still end with exactly `max_keys` keys, the last ones
/// granted from the room other shards had taken and given back.
#[test]
fn threads_filling_a_backend_get_exactly_max_keys() {
    let (max_keys, threads, per_thread) = (1_000, 4, 400);
    let config = MemoryConfig::default().max_keys(max_keys).shards(8).clock(Arc::new(ManualClock::new(START)));
    let backend = Backend::memory_with(config).unwrap();
    let limiter = backend.token_bucket("fill", 1.0 / 3600.0, 10).unwrap();
    let granted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (limiter, granted) = (&limiter, &granted);
            s.spawn(move || {
                for i in 0..per_thread {
                    match limiter.check_blocking(Some(&format!("t{t}-{i}")), 1) {
                        Ok(d) => {
                            assert!(d.allowed);
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => assert_eq!(e.kind(), ErrorKind::BackendUnavailable, "{e}"),
                    }
                }
            });
        }
    });
    assert_eq!(granted.load(Ordering::Relaxed), max_keys as u64);
    assert_eq!(backend.memory_len(), Some(max_keys));
}

/// The first new key a backend refuses finds it holding `max_keys` keys, though its shards
/// took room in chunks: the room other shards took and did not use is given back first.
#[test]
fn a_new_key_is_refused_only_when_max_keys_are_held() {
    for (max_keys, shards) in [(10, 64), (1_000, 8), (20_000, 64)] {
        let config = MemoryConfig::default().max_keys(max_keys).shards(shards).clock(Arc::new(ManualClock::new(START)));
        let backend = Backend::memory_with(config).unwrap();
        let limiter = backend.token_bucket("fill", 1.0 / 3600.0, 10).unwrap();
        let refused = (0..).find(|i| limiter.check_blocking(Some(&format!("k{i}")), 1).is_err()).unwrap();
        assert_eq!((refused, backend.memory_len()), (max_keys, Some(max_keys)), "max_keys {max_keys}, {shards} shards");
        // Room freed in one shard (a reset key) is room for a new key in any shard: one key
        // freed at a time, each new key lands wherever its hash puts it.
        for i in 0..shards.min(max_keys) {
            limiter.reset_blocking(Some(&format!("k{i}"))).unwrap();
            let newcomer = format!("new{i}");
            let admitted = limiter.check_blocking(Some(&newcomer), 1);
            assert!(admitted.is_ok_and(|d| d.allowed), "max_keys {max_keys}: {newcomer} refused with a key freed");
            assert_eq!(backend.memory_len(), Some(max_keys));
        }
    }
}

#[test]
fn contention_never_over_admits() {
    let backend = Backend::memory();
    let limiter = backend.bucket("contended", 1_000, Duration::from_secs(3600)).unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            s.spawn(move || {
                for _ in 0..1_000 {
                    if limiter.check_blocking(Some("shared"), 1).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    // Unless the hour rolled over mid-test, exactly the limit gets through.
    let n = admitted.load(Ordering::Relaxed);
    assert!((1_000..=2_000).contains(&n), "admitted {n}");
    assert_eq!(n % 1_000, 0, "admitted {n}, not a whole number of windows");
}

/// Lets spawned tasks run until they block on the (manual) clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
}

#[test]
fn acquire_sleeps_exactly_until_the_decision_changes() {
    let (backend, clock) = manual(100);
    let limiter = backend.token_bucket("exact", 10.0, 1).unwrap();
    runtime().block_on(async {
        assert!(limiter.check(None, 1).await.unwrap().allowed);
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(None, 1, Some(Duration::from_secs(1))).await })
        };
        settle().await;
        clock.advance_micros(99_999);
        settle().await;
        assert!(!waiter.is_finished(), "acquire returned before a token existed");
        clock.advance_micros(1);
        let decision = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap().unwrap();
        assert!(decision.allowed);
    });
}

#[test]
fn acquire_fails_at_once_when_the_wait_cannot_succeed() {
    let (backend, clock) = manual(100);
    let limiter = backend.bucket("hopeless", 1, Duration::from_secs(60)).unwrap();
    assert!(limiter.check_blocking(None, 1).unwrap().allowed);
    clock.advance(Duration::from_secs(10));
    let err = limiter.acquire_blocking(None, 1, Some(Duration::from_secs(5))).unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(50)));
    // Nothing was consumed by the refusal.
    assert_eq!(limiter.peek_blocking(None).unwrap().remaining, 0);
    // wait_timeout 0 never waits even for a tiny retry_after.
    let limiter = backend.token_bucket("no-wait", 1e6, 1).unwrap();
    assert!(limiter.check_blocking(None, 1).unwrap().allowed);
    assert!(limiter.acquire_blocking(None, 1, Some(Duration::ZERO)).unwrap_err().is_over_limit());
}

/// A blocking acquire in process makes its first attempt without a runtime; when that attempt
/// is refused, the wait goes on from it and does not check again, so every refused attempt is
/// one refusal in the metrics (as on Redis and with the async acquire).
#[test]
fn a_refused_blocking_acquire_is_one_check() {
    let (backend, clock) = manual(100);
    let limiter = backend.bucket("once", 1, Duration::from_secs(60)).unwrap();
    assert!(limiter.check_blocking(None, 1).unwrap().allowed);
    clock.advance(Duration::from_secs(10));
    assert!(limiter.acquire_blocking(None, 1, Some(Duration::from_secs(5))).unwrap_err().is_over_limit());
    assert!(limiter.acquire_blocking(None, 1, Some(Duration::ZERO)).unwrap_err().is_over_limit());
    runtime().block_on(async {
        assert!(limiter.acquire(None, 1, Some(Duration::ZERO)).await.unwrap_err().is_over_limit());
    });
    let m = limiter.metrics();
    assert_eq!((m.allowed, m.refused), (1, 3), "one check per refused acquire: {m:?}");
}

#[test]
fn released_slot_wakes_exactly_one_waiter_without_time_passing() {
    let (backend, _clock) = manual(100);
    let limiter = backend.concurrent("mutex", 1, Duration::from_secs(30)).unwrap();
    runtime().block_on(async {
        let held = limiter.check(None, 1).await.unwrap().lease.unwrap();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.acquire(None, 1, Some(Duration::from_secs(10))).await })
            })
            .collect();
        settle().await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        // The manual clock never moves: only the release can wake a waiter.
        limiter.release(None, &held).await.unwrap();
        settle().await;
        let finished: Vec<_> = waiters.iter().filter(|w| w.is_finished()).collect();
        assert_eq!(finished.len(), 1, "one release must wake exactly one waiter");
        for w in waiters {
            w.abort();
        }
    });
}

#[test]
fn overdue_lease_is_reclaimed_and_its_release_reports_lease_lost() {
    let (backend, clock) = manual(100);
    let limiter = backend.concurrent("reclaim", 1, Duration::from_secs(2)).unwrap();
    let first = limiter.check_blocking(Some("r"), 1).unwrap().lease.unwrap();
    clock.advance(Duration::from_secs(2));
    let second = limiter.check_blocking(Some("r"), 1).unwrap().lease.unwrap();
    assert!(second.fencing_token > first.fencing_token);
    assert_eq!(limiter.release_blocking(Some("r"), &first).unwrap_err().kind(), ErrorKind::LeaseLost);
    limiter.release_blocking(Some("r"), &second).unwrap();
}

#[test]
fn within_limit_runs_releases_and_honours_policy() {
    let (backend, _clock) = manual(100);
    let limiter =
        backend.concurrent("block", 1, Duration::from_secs(30)).unwrap().with_wait_timeout(Duration::ZERO).unwrap();
    let ran = limiter
        .within_limit_blocking(None, 1, Policy::Raise, |permit| {
            assert!(permit.decision().lease.is_some());
            // Inside the block the slot is held.
            let inner = limiter.within_limit_blocking(None, 1, Policy::Ignore, |_| "inner ran").unwrap();
            assert_eq!(inner, None, "Ignore must skip the block when over limit");
            let err = limiter.within_limit_blocking(None, 1, Policy::Raise, |_| ()).unwrap_err();
            assert!(err.is_over_limit());
            42
        })
        .unwrap();
    assert_eq!(ran, Some(42));
    // The lease was released after the block.
    assert_eq!(limiter.peek_blocking(None).unwrap().remaining, 1);
}

#[test]
fn points_permit_refunds_and_overcharges() {
    let (backend, _clock) = manual(100);
    let limiter = backend.points("graphql", 1000, Duration::from_secs(20)).unwrap();
    let result = runtime().block_on(limiter.within_limit(Some("shop"), 200, Policy::Raise, |permit| async move {
        assert_eq!(permit.decision().remaining, 800);
        permit.points_used(50).await.unwrap()
    }));
    assert_eq!(result.unwrap().unwrap().remaining, 950);
    let after = limiter
        .within_limit_blocking(Some("shop"), 100, Policy::Raise, |permit| permit.points_used_blocking(400).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(after.remaining, 550);
}

#[test]
fn unlimited_allows_everything_and_stores_nothing() {
    let limiter = Limiter::unlimited();
    for _ in 0..1_000 {
        assert!(limiter.check_blocking(Some("admin"), 1 << 53).unwrap().allowed);
    }
    assert!(limiter.acquire_blocking(None, 5, None).unwrap().allowed);
    assert_eq!(limiter.within_limit_blocking(None, 1, Policy::Raise, |_| 7).unwrap(), Some(7));
}

#[test]
fn limiters_sharing_a_name_share_state_and_wait_timeouts_are_validated() {
    let (backend, clock) = manual(100);
    let a = backend.leaky("shared", 2, Duration::from_secs(2)).unwrap();
    let b = backend.leaky("shared", 2, Duration::from_secs(2)).unwrap();
    assert!(a.check_blocking(None, 2).unwrap().allowed);
    assert!(!b.check_blocking(None, 1).unwrap().allowed);
    assert_eq!(a.with_wait_timeout(Duration::from_nanos(1)).unwrap_err().parameter(), Some("wait_timeout"));
    assert_eq!(
        a.acquire_blocking(None, 1, Some(Duration::from_nanos(5))).unwrap_err().parameter(),
        Some("wait_timeout")
    );
    assert_eq!(clock.now_micros(), START);
}

#[test]
fn concurrent_waiter_gives_up_with_over_limit_at_its_wait_timeout() {
    let (backend, clock) = manual(100);
    let limiter = backend.concurrent("busy", 1, Duration::from_secs(30)).unwrap();
    runtime().block_on(async {
        let _held = limiter.check(None, 1).await.unwrap().lease.unwrap();
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire(None, 1, Some(Duration::from_secs(2))).await })
        };
        settle().await;
        clock.advance_micros(1_999_999);
        settle().await;
        assert!(!waiter.is_finished(), "the waiter gave up before its wait_timeout");
        clock.advance_micros(1);
        let err = tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap().unwrap_err();
        assert!(err.is_over_limit(), "{err}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(28)));
    });
}

#[test]
fn http_headers_round_up_and_name_retry_after_only_when_refused() {
    let (backend, clock) = manual(10);
    let limiter = backend.token_bucket("headers", 1.0, 2).unwrap();
    let allowed = limiter.check_blocking(None, 1).unwrap();
    assert_eq!(
        allowed.http_headers(),
        vec![("RateLimit-Limit", 2), ("RateLimit-Remaining", 1), ("RateLimit-Reset", 1)]
    );
    limiter.check_blocking(None, 1).unwrap();
    clock.advance_micros(1); // 0.999999 s until a token: still 1 whole second
    let refused = limiter.check_blocking(None, 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.http_headers().last(), Some(&("Retry-After", 1)));
    assert_eq!(refused.http_headers()[2], ("RateLimit-Reset", 2)); // 1.999999 s until full
}

/// Found by the C fuzz driver: a manual clock moved near the end of u64 microseconds made
/// every engine overflow (`now + interval`), a panic in debug builds. Clock readings now stop
/// at 2^53 µs (the year 2255, the largest instant a Lua script holds exactly).
#[test]
fn a_manual_clock_at_the_end_of_time_saturates_instead_of_overflowing() {
    for start in [u64::MAX - 5, 1 << 60] {
        let clock = ManualClock::new(start);
        let backend = Backend::memory_with(MemoryConfig::default().clock(Arc::new(clock.clone()))).unwrap();
        clock.advance_micros(u64::MAX);
        let limiters = [
            backend.window("w", 2, Duration::from_secs(60)).unwrap(),
            backend.bucket("b", 2, Duration::from_secs(60)).unwrap(),
            backend.concurrent("c", 2, Duration::from_secs(60)).unwrap(),
            backend.token_bucket("t", 1.0, 2).unwrap(),
            backend
                .sliding_window(
                    "s",
                    &[ratekeeper::SlidingLimit {
                        duration: Duration::from_secs(60),
                        limit: 2,
                        precision: Some(Duration::from_secs(1)),
                    }],
                )
                .unwrap(),
        ];
        for limiter in &limiters {
            for _ in 0..3 {
                limiter.check_blocking(Some("k"), 1).unwrap();
            }
            assert!(!limiter.peek_blocking(Some("k")).unwrap().allowed, "{:?}", limiter.kind());
        }
        assert_eq!(clock.now_micros(), 1 << 53);
    }
}
