//! Leased partitions (Azure's rate limiting pattern) against real Redis servers and a real
//! 3-master Cluster: the fleet never admits more than `total_rate` (exact accounting over every
//! admission), a killed process's partitions return after `lease_ttl`, a newcomer gets its fair
//! share from live holders, pacing spreads calls, `close` gives back at once, the priority class
//! has its reserved partitions, and bad input is refused naming the parameter.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter, RedisConfig};
use support::{RedisCluster, RedisServer, GIVE_UP};

const DEADLINE: Duration = Duration::from_secs(2);

fn unique(label: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{label}{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

fn backend(url: &str, prefix: &str) -> Backend {
    Backend::redis_with(RedisConfig::new(url).prefix(prefix).deadline(DEADLINE)).expect("a Redis backend")
}

fn partitions(backend: &Backend, name: &str, rate: f64, n: u64, ttl: Duration) -> Limiter {
    backend.partitions(name, rate, n, ttl, 0, false).expect("a partitions limiter")
}

/// How many partitions `limiter` holds after one check (which leases when due).
fn held_after_check(limiter: &Limiter) -> usize {
    let _ = limiter.check_blocking(None, 1);
    limiter.partitions_held(None).unwrap().partitions.len()
}

/// Calls `check` until `done` says so (or the give-up), sleeping `step` between calls.
fn check_until(limiter: &Limiter, step: Duration, mut done: impl FnMut(&Limiter) -> bool) {
    let start = Instant::now();
    loop {
        let _ = limiter.check_blocking(None, 1);
        if done(limiter) {
            return;
        }
        assert!(start.elapsed() < GIVE_UP, "gave up waiting: {:?}", limiter.partitions_held(None));
        std::thread::sleep(step);
    }
}

/// The most admissions in any span of `span_us` among sorted instants.
fn most_in_any_span(instants: &[u64], span_us: u64) -> usize {
    let mut most = 0;
    let mut start = 0;
    for end in 0..instants.len() {
        while instants[end] - instants[start] >= span_us {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

#[test]
fn bad_input_is_refused_naming_the_parameter() {
    let memory = Backend::memory();
    let ttl = Duration::from_secs(15);
    let cases: [(f64, u64, Duration, u64, bool, &str); 8] = [
        (0.0, 20, ttl, 0, false, "total_rate"),
        (f64::NAN, 20, ttl, 0, false, "total_rate"),
        (100.0, 0, ttl, 0, false, "partitions"),
        (100.0, 5000, ttl, 0, false, "partitions"),
        (100.0, 20, Duration::from_millis(10), 0, false, "lease_ttl"),
        (100.0, 20, ttl, 20, false, "reserved"),
        (100.0, 20, ttl, 0, true, "reserved"),
        (100.0, 20, ttl, 21, true, "reserved"),
    ];
    for (rate, n, ttl, reserved, priority, parameter) in cases {
        let e = memory.partitions("p", rate, n, ttl, reserved, priority).unwrap_err();
        assert_eq!(e.parameter(), Some(parameter), "{rate} {n} {ttl:?} {reserved} {priority}: {e}");
    }
    let e = memory
        .limiter_from_json("p", r#"{"kind":"partitions","total_rate":100,"partitions":20,"reserved":-1}"#)
        .unwrap_err();
    assert_eq!(e.parameter(), Some("reserved"), "{e}");
    let e = memory.limiter_from_json("p", r#"{"kind":"partitions","total_rate":100,"partitions":20,"priority":1}"#);
    assert_eq!(e.unwrap_err().parameter(), Some("priority"));
    // A cost above one second of the whole capacity is refused before anything is leased.
    let limiter = memory.partitions("p", 100.0, 20, ttl, 0, false).unwrap();
    assert_eq!(limiter.check_blocking(None, 101).unwrap_err().parameter(), Some("cost"));
    // Other limiters hold no partitions.
    let bucket = memory.token_bucket("b", 1.0, 1).unwrap();
    assert_eq!(bucket.partitions_held(None).unwrap_err().parameter(), Some("limiter"));
}

#[test]
fn the_spec_round_trips_as_json() {
    let memory = Backend::memory();
    let limiter = memory
        .limiter_from_json("p", r#"{"kind":"partitions","total_rate":100,"partitions":20}"#)
        .expect("a partitions limiter from JSON");
    assert_eq!(
        limiter.spec_json(),
        r#"{"kind":"partitions","total_rate":100,"partitions":20,"lease_ttl":15,"reserved":0,"priority":false}"#
    );
    // The memory backend is one process: it holds every partition of its class.
    let held = limiter.partitions_held(None).unwrap();
    assert_eq!(held.partitions.len(), 20);
    assert_eq!(held.rate, 100.0);
}

/// One process holding all 20 partitions of 100 per second paces 1 call per 10 ms (20 per
/// 200 ms), never a burst, with `acquire` waiting exactly between calls.
#[test]
fn pacing_spreads_calls_over_the_held_rate() {
    let server = RedisServer::start();
    let backend = backend(&server.url(), &unique("pace"));
    let limiter = partitions(&backend, "pace", 100.0, 20, Duration::from_secs(3));
    let mut stamps = Vec::new();
    for _ in 0..60 {
        let d = limiter.acquire_blocking(None, 1, Some(Duration::from_secs(5))).expect("paced");
        stamps.push(d.decided_at_micros);
    }
    assert_eq!(limiter.partitions_held(None).unwrap().partitions.len(), 20);
    // Credit is never banked beyond 20 ms of the rate (2 calls): at most 20 + 2 in any 200 ms,
    // 1 + 2 in any 10 ms.
    assert!(most_in_any_span(&stamps, 200_000) <= 22, "{stamps:?}");
    assert!(most_in_any_span(&stamps, 10_000) <= 3, "{stamps:?}");
    // A batch of 20 waits for its units to be earned after the last spend: at most one unit is
    // left over from it (20 ms of 100/s may be carried), so at least 19 x 10 ms.
    let before = limiter.acquire_blocking(None, 1, None).unwrap().decided_at_micros;
    let batch = limiter.acquire_blocking(None, 20, None).unwrap().decided_at_micros;
    assert!(batch - before >= 189_000, "a batch of 20 came {} µs after the last call", batch - before);
}

/// Four members with staggered starts and one that closes mid-run: over every admission, no span
/// of 300 ms holds more than `total_rate * 300 ms` plus one carried unit per member.
#[test]
fn holders_never_exceed_the_total_rate() {
    let server = RedisServer::start();
    let prefix = unique("fleet");
    let rate = 200.0;
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let members = 4;
    let threads: Vec<_> = (0..members)
        .map(|i| {
            let (url, prefix, stamps, stop) = (server.url(), prefix.clone(), stamps.clone(), stop.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150 * i as u64));
                // Each member its own backend, as separate processes would have.
                let limiter = partitions(&backend(&url, &prefix), "fleet", rate, 8, Duration::from_millis(600));
                let started = Instant::now();
                let mut mine = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if i == 1 && started.elapsed() > Duration::from_millis(900) {
                        limiter.close_blocking().expect("close");
                        break;
                    }
                    if let Ok(d) = limiter.acquire_blocking(None, 1, Some(Duration::from_millis(300))) {
                        stamps.lock().unwrap().push(d.decided_at_micros);
                        mine += 1;
                    }
                }
                mine
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Relaxed);
    let per_member: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let mut stamps = std::mem::take(&mut *stamps.lock().unwrap());
    stamps.sort_unstable();
    assert!(per_member.iter().all(|&n| n > 0), "every member admitted something: {per_member:?}");
    // Each member carries at most 20 ms of its rate (or one unit) into a span; decisions are
    // stamped next to, not at, the pacer's instant: allow 2 ms of stamping skew.
    let span_us = 300_000;
    let bound = (rate * (span_us + 20_000 + 2_000) as f64 / 1e6).floor() as usize + members;
    let most = most_in_any_span(&stamps, span_us);
    println!("admitted {} ({per_member:?}), at most {most} in any 300 ms (bound {bound})", stamps.len());
    assert!(most <= bound, "{most} admissions in 300 ms exceed {bound}");
    let whole = (stamps[stamps.len() - 1] - stamps[0]) as f64 / 1e6;
    assert!(stamps.len() as f64 <= rate * whole + members as f64, "{} in {whole} s", stamps.len());
}

/// A holder that stays active keeps its leases renewed, so a newcomer gets partitions only
/// because the holder gives back what exceeds its fair share.
#[test]
fn a_newcomer_gets_its_share_from_a_live_holder() {
    let server = RedisServer::start();
    let prefix = unique("fair");
    let ttl = Duration::from_secs(3);
    let holder = partitions(&backend(&server.url(), &prefix), "fair", 80.0, 8, ttl);
    assert_eq!(held_after_check(&holder), 8);
    let newcomer = partitions(&backend(&server.url(), &prefix), "fair", 80.0, 8, ttl);
    // Every partition is held and renewed: the newcomer joins with none, and is counted.
    assert_eq!(held_after_check(&newcomer), 0);
    assert_eq!(newcomer.partitions_held(None).unwrap().members, 2);
    let joined = Instant::now();
    let holder_tokens: Vec<u64> = holder.partitions_held(None).unwrap().partitions.iter().map(|p| p.1).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let active = {
        let (holder, stop) = (holder.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = holder.check_blocking(None, 1);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    check_until(&newcomer, Duration::from_millis(20), |l| l.partitions_held(None).unwrap().partitions.len() == 4);
    let waited = joined.elapsed();
    stop.store(true, Ordering::Relaxed);
    active.join().unwrap();
    println!("the newcomer held its share of 4 after {waited:?} (lease_ttl {ttl:?})");
    let held = holder.partitions_held(None).unwrap();
    assert_eq!(held.partitions.len(), 4, "the holder gave back down to its share: {held:?}");
    let newcomer_held = newcomer.partitions_held(None).unwrap();
    assert!(
        newcomer_held.partitions.iter().all(|(_, token)| holder_tokens.iter().all(|t| token > t)),
        "every grant to the newcomer has a higher fencing token: {newcomer_held:?} vs {holder_tokens:?}"
    );
    let mut indexes: Vec<u32> = held.partitions.iter().chain(newcomer_held.partitions.iter()).map(|p| p.0).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..8).collect::<Vec<_>>(), "each partition has exactly one holder");
}

#[test]
fn close_gives_partitions_back_at_once() {
    let server = RedisServer::start();
    let prefix = unique("close");
    let ttl = Duration::from_secs(60);
    let first = partitions(&backend(&server.url(), &prefix), "close", 10.0, 4, ttl);
    // A peek (an operator's look) leases nothing.
    assert!(!first.peek_blocking(None).unwrap().allowed);
    assert!(first.partitions_held(None).unwrap().partitions.is_empty());
    assert_eq!(held_after_check(&first), 4);
    first.close_blocking().expect("close");
    assert!(first.partitions_held(None).unwrap().partitions.is_empty());
    let second = partitions(&backend(&server.url(), &prefix), "close", 10.0, 4, ttl);
    // Long before the 60 s lease could lapse: the first member left, so all 4 are the second's.
    assert_eq!(held_after_check(&second), 4);
}

#[test]
fn the_priority_class_leases_only_reserved_partitions() {
    let server = RedisServer::start();
    let prefix = unique("prio");
    let ttl = Duration::from_secs(30);
    let shared = backend(&server.url(), &prefix).partitions("prio", 100.0, 10, ttl, 3, false).unwrap();
    let priority = backend(&server.url(), &prefix).partitions("prio", 100.0, 10, ttl, 3, true).unwrap();
    assert_eq!(held_after_check(&shared), 7);
    assert_eq!(held_after_check(&priority), 3);
    let indexes = |l: &Limiter| l.partitions_held(None).unwrap().partitions.iter().map(|p| p.0).collect::<Vec<_>>();
    assert_eq!(indexes(&priority), vec![0, 1, 2]);
    assert_eq!(indexes(&shared), (3..10).collect::<Vec<_>>());
    assert_eq!(priority.partitions_held(None).unwrap().rate, 30.0);
}

#[test]
fn a_cluster_keeps_one_limiters_keys_in_one_slot() {
    let cluster = RedisCluster::start();
    let prefix = unique("cl");
    let config = || RedisConfig::cluster(cluster.seeds()).prefix(&prefix).deadline(DEADLINE);
    let ttl = Duration::from_secs(5);
    let a = Backend::redis_with(config()).unwrap().partitions("cl", 60.0, 6, ttl, 0, false).unwrap();
    let b = Backend::redis_with(config()).unwrap().partitions("cl", 60.0, 6, ttl, 0, false).unwrap();
    for key in ["alpha", "beta"] {
        let d = a.acquire_blocking(Some(key), 1, None).expect("paced on the cluster");
        assert!(d.allowed);
        assert_eq!(a.partitions_held(Some(key)).unwrap().partitions.len(), 6);
    }
    // The second member splits "alpha" with the first.
    let _ = b.check_blocking(Some("alpha"), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let active = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = a.check_blocking(Some("alpha"), 1);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let start = Instant::now();
    while b.partitions_held(Some("alpha")).unwrap().partitions.len() < 3 {
        assert!(start.elapsed() < GIVE_UP, "the second member never got its share");
        let _ = b.check_blocking(Some("alpha"), 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    active.join().unwrap();
    assert_eq!(a.partitions_held(Some("alpha")).unwrap().partitions.len(), 3);
}

/// The child process of `a_killed_holders_partitions_return_after_the_lease_ttl`: holds every
/// partition, prints `HELD <tokens>`, and keeps renewing until killed. A no-op unless the parent
/// set `RKP_URL`.
#[test]
fn partitions_holder_process() {
    let Ok(url) = std::env::var("RKP_URL") else { return };
    let prefix = std::env::var("RKP_PREFIX").unwrap();
    let limiter = partitions(&backend(&url, &prefix), "dead", 40.0, 4, Duration::from_secs(3));
    check_until(&limiter, Duration::from_millis(10), |l| l.partitions_held(None).unwrap().partitions.len() == 4);
    let tokens: Vec<String> =
        limiter.partitions_held(None).unwrap().partitions.iter().map(|p| p.1.to_string()).collect();
    println!("RKP HELD {}", tokens.join(" "));
    loop {
        let _ = limiter.check_blocking(None, 1);
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_holders_partitions_return_after_the_lease_ttl() {
    let server = RedisServer::start();
    let prefix = unique("dead");
    // Long enough that the dead holder's leases (renewed at most a third of it before the kill)
    // are still live when the newcomer first looks, however slow the machine.
    let ttl = Duration::from_secs(3);
    let holder = support::test_name(module_path!(), "partitions_holder_process");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &holder, "--nocapture", "--test-threads=1"])
        .env("RKP_URL", server.url())
        .env("RKP_PREFIX", &prefix)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the holder process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held_line = lines.find_map(|l| l.ok().and_then(|l| l.find("RKP HELD ").map(|at| l[at + 9..].to_owned())));
    let child_tokens: Vec<u64> =
        held_line.expect("the holder's HELD line").split(' ').map(|t| t.parse().unwrap()).collect();
    assert_eq!(child_tokens.len(), 4);
    let pid = child.id();
    support::signal_pid(pid, "-KILL");
    let killed = Instant::now();
    child.wait().unwrap();
    let newcomer = partitions(&backend(&server.url(), &prefix), "dead", 40.0, 4, ttl);
    // The dead process's leases are still live: nothing is free yet.
    assert_eq!(held_after_check(&newcomer), 0, "leased before the dead holder's leases ran out");
    check_until(&newcomer, Duration::from_millis(20), |l| l.partitions_held(None).unwrap().partitions.len() == 4);
    println!("a killed holder's partitions returned {:?} after the kill (lease_ttl {ttl:?})", killed.elapsed());
    let held = newcomer.partitions_held(None).unwrap();
    let newest_dead = child_tokens.iter().max().unwrap();
    assert!(held.partitions.iter().all(|(_, token)| token > newest_dead), "{held:?} vs {child_tokens:?}");
}
