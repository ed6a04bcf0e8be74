//! A hash slot migrated between masters under load (`CLUSTER SETSLOT … IMPORTING/MIGRATING`,
//! `MIGRATE … KEYS`, `SETSLOT … NODE`): calls meet ASK redirects, then MOVED ones. Every call
//! must be answered by Redis — none lost, none counted twice — so the count Redis holds at the
//! end equals the admissions the callers saw, exactly.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratekeeper::{runtime, Backend, FailurePolicy, RedisConfig};
use support::{RedisCluster, RedisServer};

/// Never reached while the test runs: every call is an admission Redis must count once.
const LIMIT: u64 = 10_000_000;
/// How long the slot stays in each migration state, so that many calls meet it.
const STATE_PAUSE: Duration = Duration::from_millis(300);

fn id(node: &RedisServer) -> String {
    node.cli(&["CLUSTER", "MYID"])
}

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    refused: AtomicU64,
    errors: Mutex<Vec<String>>,
}

#[test]
fn a_slot_migrated_under_load_loses_and_double_counts_nothing() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::cluster(cluster.seeds())
        .prefix("mig")
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(5));
    let backend = Backend::redis_with(config).expect("a cluster backend");
    let limiter = backend.bucket("b", LIMIT, Duration::from_secs(24 * 3600)).unwrap();
    assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    let tally = Arc::new(Tally::default());
    tally.admitted.fetch_add(1, Ordering::Relaxed);

    // Where the key lives, and its slot.
    let (source, key) = cluster
        .nodes
        .iter()
        .find_map(|n| {
            let out = n.cli(&["--scan", "--pattern", "mig:*"]);
            out.lines().find(|l| !l.is_empty()).map(|k| (n, k.to_owned()))
        })
        .expect("the bucket's key is on a master");
    let slot = source.cli(&["CLUSTER", "KEYSLOT", &key]);
    let target = cluster.nodes.iter().find(|n| n.port != source.port).unwrap();
    println!("key {key} slot {slot}: {} -> {}", source.port, target.port);

    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    // Blocking callers (through the runtime on a cluster) and async tasks.
    for blocking in [true, true, false, false] {
        let (limiter, tally, stop) = (limiter.clone(), tally.clone(), stop.clone());
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let result = if blocking {
                    limiter.check_blocking(Some("k"), 1)
                } else {
                    runtime().block_on(limiter.check(Some("k"), 1))
                };
                match result {
                    Ok(d) if d.allowed => tally.admitted.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => tally.refused.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        tally.errors.lock().unwrap().push(e.to_string());
                        0
                    }
                };
            }
        }));
    }

    std::thread::sleep(STATE_PAUSE);
    assert_eq!(target.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(source)]), "OK");
    assert_eq!(source.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(target)]), "OK");
    std::thread::sleep(STATE_PAUSE);
    // The key moves: calls on the source now get ASK (the key is gone from it), until the
    // slot is assigned to the target.
    let moved = source.cli(&["MIGRATE", "127.0.0.1", &target.port.to_string(), "", "0", "5000", "KEYS", &key]);
    assert_eq!(moved, "OK", "MIGRATE");
    std::thread::sleep(STATE_PAUSE);
    let target_id = id(target);
    for node in [target, source] {
        assert_eq!(node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]), "OK");
    }
    for node in cluster.nodes.iter().filter(|n| n.port != source.port && n.port != target.port) {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }
    std::thread::sleep(STATE_PAUSE);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }

    let errors = tally.errors.lock().unwrap();
    let admitted = tally.admitted.load(Ordering::Relaxed);
    println!(
        "admitted {admitted}, refused {}, errors {} (first: {:?})",
        tally.refused.load(Ordering::Relaxed),
        errors.len(),
        errors.first()
    );
    assert!(errors.is_empty(), "{} calls were not answered during the migration: {:?}", errors.len(), errors.first());
    let counted = LIMIT - limiter.peek_blocking(Some("k")).expect("Redis answers").remaining;
    assert_eq!(tally.refused.load(Ordering::Relaxed), 0);
    assert_eq!(counted, admitted, "Redis counted {counted} admissions, callers saw {admitted}");
    assert_eq!(target.cli(&["EXISTS", &key]), "1", "the bucket lives on the target now");
    assert_eq!(source.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), "0", "nothing left behind on the source");
}
