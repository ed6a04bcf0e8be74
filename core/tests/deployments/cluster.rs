//! Redis Cluster: keys of every limiter kind spread over all three masters (the hash tag comes
//! from the identity, before any user text), no CROSSSLOT ever reaches a caller, keys with `{`,
//! `}` and `:` never share state, and a dead master only fails the keys it owns.
//!
//! The tests of this file run one at a time (see [`serial`]): one of them is a load test, on a
//! 2-core machine. They assert orderings, never latencies.

use crate::support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, ErrorKind, FailurePolicy, Limiter, RedisConfig, SlidingLimit, WindowLimit};
use support::{RedisCluster, RedisServer, Watchdog, GIVE_UP};

const DAY: Duration = Duration::from_secs(24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);
/// The tests about where keys go are not about deadlines: a generous one keeps a loaded 2-core
/// machine (debug build, three servers, many tasks) from turning slow answers into errors.
const LOAD_DEADLINE: Duration = Duration::from_secs(5);

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn block<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// Every limiter kind (window twice: one window and two windows), all named `name`, each with
/// room for `limit` units per key for a long time.
fn every_kind(backend: &Backend, name: &str, limit: u64) -> Vec<Limiter> {
    vec![
        backend.concurrent(name, limit, HOUR).unwrap(),
        backend.bucket(name, limit, DAY).unwrap(),
        backend.window(name, limit, HOUR).unwrap(),
        backend
            .windows(
                &format!("{name}-multi"),
                &[WindowLimit { limit, interval: HOUR }, WindowLimit { limit: limit * 2, interval: DAY }],
            )
            .unwrap(),
        backend
            .sliding_window(name, &[SlidingLimit { duration: HOUR, limit, precision: Some(Duration::from_secs(60)) }])
            .unwrap(),
        // A token per 10,000 s: nothing refills while the test runs.
        backend.token_bucket(name, 0.0001, limit).unwrap(),
        backend.leaky(name, limit, DAY).unwrap(),
        backend.points(name, limit, DAY).unwrap(),
    ]
}

/// Every limiter key on `node` under `prefix` (the registry's keys, `<prefix>:{registry}:…`,
/// share one slot of their own and are left out).
fn node_keys(node: &RedisServer, prefix: &str) -> Vec<String> {
    let out = node.cli(&["--scan", "--pattern", &format!("{prefix}:*")]);
    let registry = format!("{prefix}:{{registry}}:");
    out.lines().filter(|l| !l.is_empty() && !l.starts_with(&registry)).map(str::to_owned).collect()
}

/// The keys that hold limiter state (the other key a limiter may have is its `metrics` hash).
const STATE_ROLES: &[&str] = &["s", "h", "b", "t", "w", "z", "d", "l", "g", "q"];

/// `<prefix>:{<16 hex>}:<kind>:<name>:<role>:<key>` → (kind, name, role, key), checking the tag.
fn parse_key<'k>(prefix: &str, redis_key: &'k str) -> (&'k str, &'k str, &'k str, &'k str) {
    let rest = redis_key.strip_prefix(prefix).and_then(|r| r.strip_prefix(":{")).expect("prefix first");
    let (tag, rest) = rest.split_at(16);
    assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()), "a 16-hex-digit tag first: {redis_key:?}");
    let rest = rest.strip_prefix("}:").expect("the tag closes right after its 16 digits");
    let mut parts = rest.splitn(4, ':');
    let (kind, name, role) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    (kind, name, role, parts.next().expect("the user key comes last"))
}

#[test]
fn ten_thousand_keys_of_every_kind_spread_over_all_masters() {
    let _serial = serial();
    let cluster = RedisCluster::start();
    let prefix = "spread";
    let backend =
        Backend::redis_with(RedisConfig::cluster(cluster.seeds()).prefix(prefix).deadline(LOAD_DEADLINE)).unwrap();
    let limiters = every_kind(&backend, "spread", 100);
    let per_kind: usize = 10_000;
    let tasks_per_kind = 8;

    let start = Instant::now();
    let mut tasks = Vec::new();
    for limiter in &limiters {
        for t in 0..tasks_per_kind {
            let limiter = limiter.clone();
            tasks.push(runtime().spawn(async move {
                let mut failures = Vec::new();
                for i in (t..per_kind).step_by(tasks_per_kind) {
                    let key = format!("user-{i}");
                    match limiter.check(Some(&key), 1).await {
                        Ok(d) if d.allowed => {}
                        other => failures.push(format!("{:?} {key}: {other:?}", limiter.kind())),
                    }
                }
                failures
            }));
        }
    }
    let mut failures = Vec::new();
    for task in tasks {
        failures.extend(block(task).unwrap());
    }
    let elapsed = start.elapsed();
    let calls = per_kind * limiters.len();
    println!(
        "{calls} checks over the cluster in {elapsed:?} ({:.0}/s), {} failures",
        calls as f64 / elapsed.as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "every call succeeds (no CROSSSLOT or other error): {:?}",
        &failures[..failures.len().min(5)]
    );

    // Where the keys went: identities (kind, name, key) per node.
    let mut identities_per_node: Vec<HashMap<(String, String), HashSet<String>>> = Vec::new();
    let mut keys_total = 0;
    for node in &cluster.nodes {
        let keys = node_keys(node, prefix);
        let dbsize: usize = node.cli(&["DBSIZE"]).parse().unwrap();
        let registry = node.cli(&["--scan", "--pattern", &format!("{prefix}:{{registry}}:*")]).lines().count();
        assert_eq!(dbsize, keys.len() + registry, "only this test's keys on node {}", node.port);
        keys_total += keys.len();
        let mut identities: HashMap<(String, String), HashSet<String>> = HashMap::new();
        for k in &keys {
            let (kind, name, role, key) = parse_key(prefix, k);
            if !STATE_ROLES.contains(&role) {
                // The fleet metrics hash and its per-minute history, and the last flush applied
                // per writer (see metrics.lua).
                let per_limiter = (role == "metrics" || role == "history") && key.is_empty();
                assert!(per_limiter || role == "metrics-seq", "an unexpected key {k:?}");
                continue;
            }
            identities.entry((kind.to_owned(), name.to_owned())).or_default().insert(key.to_owned());
        }
        identities_per_node.push(identities);
    }
    let mut report = BTreeMap::new();
    for limiter in &limiters {
        let id = (limiter.kind().as_str().to_owned(), limiter.name().to_owned());
        let counts: Vec<usize> = identities_per_node.iter().map(|m| m.get(&id).map_or(0, HashSet::len)).collect();
        report.insert(format!("{}:{}", id.0, id.1), counts.clone());
        let sum: usize = counts.iter().sum();
        assert_eq!(sum, per_kind, "{id:?}: every identity has state on exactly one node: {counts:?}");
        for (n, &c) in counts.iter().enumerate() {
            assert!(c * 5 >= per_kind, "{id:?}: node {n} holds {c} of {per_kind} identities (< 20%): {counts:?}");
        }
    }
    let dbsizes: Vec<usize> = cluster.nodes.iter().map(|n| n.cli(&["DBSIZE"]).parse().unwrap()).collect();
    println!("identities per node by limiter: {report:?}; DBSIZE per node {dbsizes:?} (total {keys_total})");
    for &size in &dbsizes {
        assert!(size * 5 >= keys_total, "each node holds at least 20% of all keys: {dbsizes:?}");
    }
}

/// Keys that a naive layout (`name:key`, a tag taken from the user's text) would confuse.
const TRICKY: &[&str] = &[
    "", "a", "b", "a:b", "a:b:c", ":", "::", "a:", ":a", "{user}:1", "{user}:2", "{user}", "user", "}{", "{", "}",
    "{}", "{a}", "a}", "{a", "{a}:b", "h:a", "a:h", "z:x", "d:x", "x", "w:x", "t:x", "s:x", " ", "ключ", "🙂",
];

#[test]
fn keys_with_braces_and_colons_never_share_state_and_still_spread() {
    let _serial = serial();
    let cluster = RedisCluster::start();
    let prefix = "tricky";
    let backend =
        Backend::redis_with(RedisConfig::cluster(cluster.seeds()).prefix(prefix).deadline(LOAD_DEADLINE)).unwrap();
    let limit = 50;
    let limiters = every_kind(&backend, "same", limit);
    // A different count for every (kind, key) identity; any two sharing state would show the sum.
    let count = |k: usize, i: usize| ((k * 7 + i) % 13 + 1) as u64;
    block(async {
        for (k, limiter) in limiters.iter().enumerate() {
            for (i, key) in TRICKY.iter().enumerate() {
                for _ in 0..count(k, i) {
                    let d = limiter.check(Some(key), 1).await.unwrap_or_else(|e| panic!("{key:?}: {e:?}"));
                    assert!(d.allowed, "{:?} {key:?}: {d:?}", limiter.kind());
                }
            }
        }
        for (k, limiter) in limiters.iter().enumerate() {
            for (i, key) in TRICKY.iter().enumerate() {
                let d = limiter.peek(Some(key)).await.unwrap();
                assert_eq!(
                    d.remaining,
                    limit - count(k, i),
                    "{:?} ({}) key {key:?}: its state is its own (made {} checks)",
                    limiter.kind(),
                    limiter.name(),
                    count(k, i)
                );
            }
        }
    });

    // Resetting one identity (a multi-key DEL, plus wake-ups for concurrent limiters: one slot,
    // no CROSSSLOT) leaves its look-alikes alone, for every kind.
    block(async {
        for (k, limiter) in limiters.iter().enumerate() {
            limiter.reset(Some("a:b")).await.unwrap_or_else(|e| panic!("{:?} reset: {e:?}", limiter.kind()));
            assert_eq!(limiter.peek(Some("a:b")).await.unwrap().remaining, limit, "{:?}", limiter.kind());
            for (i, key) in TRICKY.iter().enumerate().filter(|(_, k)| **k != "a:b") {
                let d = limiter.peek(Some(key)).await.unwrap();
                assert_eq!(d.remaining, limit - count(k, i), "{:?} {key:?} after a reset of \"a:b\"", limiter.kind());
            }
        }
    });

    // Keys that share a `{user}` look-alike tag still spread over every node: the library's own
    // tag, not the user's braces, picks the slot.
    let spread = backend.bucket("spreadcheck", 10, DAY).unwrap();
    let n = 300;
    block(async {
        for i in 0..n {
            assert!(spread.check(Some(&format!("{{user}}:{i}")), 1).await.unwrap().allowed);
        }
    });
    let mut per_node = Vec::new();
    let mut tricky_per_node = Vec::new();
    for node in &cluster.nodes {
        let keys = node_keys(node, prefix);
        let mine = keys.iter().filter(|k| matches!(parse_key(prefix, k), (_, "spreadcheck", "h", _))).count();
        per_node.push(mine);
        tricky_per_node.push(keys.len() - mine);
    }
    println!("{{user}}:N keys per node {per_node:?}; look-alike identities' keys per node {tricky_per_node:?}");
    assert_eq!(per_node.iter().sum::<usize>(), n);
    for &c in &per_node {
        assert!(c * 5 >= n, "each node holds at least 20% of the {{user}}:N keys: {per_node:?}");
    }
    for &c in &tricky_per_node {
        assert!(c > 0, "the look-alike keys land on every node: {tricky_per_node:?}");
    }
}

/// Which node holds the bucket state of each of `keys` (bucket keys end in `:h:<key>`).
fn owners(cluster: &RedisCluster, prefix: &str) -> Vec<Vec<String>> {
    cluster
        .nodes
        .iter()
        .map(|node| {
            let keys = node_keys(node, prefix);
            keys.iter()
                .filter_map(|k| match parse_key(prefix, k) {
                    (_, _, "h", key) => Some(key.to_owned()),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_dead_master_fails_only_its_own_keys_within_the_deadline() {
    let _serial = serial();
    let mut cluster = RedisCluster::start();
    // Without replicas the cluster cannot fail over; let the surviving masters keep serving their
    // slots once the dead one is marked FAIL (after cluster-node-timeout, 2 s here).
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]), "OK");
    }
    let prefix = "deadnode";
    let config = RedisConfig::cluster(cluster.seeds()).prefix(prefix);
    let closed = Backend::redis_with(config.clone().failure_policy(FailurePolicy::FailClosed)).unwrap();
    let open = Backend::redis_with(config.failure_policy(FailurePolicy::FailOpen)).unwrap();
    let limiter = closed.bucket("api", 1_000_000, DAY).unwrap();
    let open_limiter = open.bucket("api", 1_000_000, DAY).unwrap();
    block(async {
        for i in 0..60 {
            assert!(limiter.check(Some(&format!("key{i}")), 1).await.unwrap().allowed);
        }
    });
    let owners = owners(&cluster, prefix);
    assert!(owners.iter().all(|o| !o.is_empty()), "keys on every node: {owners:?}");
    let dead_key = owners[2][0].clone();
    let live_keys = [owners[0][0].clone(), owners[1][0].clone()];

    cluster.nodes[2].kill();
    let killed = Instant::now();
    // Something answers on the dead master's port again after 10 s (a plain server, holding none
    // of the slots): a call that waited on the dead master rather than its deadline would end
    // only then. Every call must end before (an ordering; the calls span about 4 s).
    let (port, replacement) = (cluster.nodes[2].port, Arc::new(Mutex::new(None)));
    let slot = replacement.clone();
    let comeback = Watchdog::start(Duration::from_secs(10), move || {
        *slot.lock().unwrap() = Some(RedisServer::start_on_port(port));
    });
    let trace = std::env::var_os("RK_TRACE").is_some();
    let mut calls: Vec<Call> = Vec::new();
    // Sequential calls, alternating the dead master's key and the live ones, long enough to span
    // the other masters marking the dead one PFAIL and then FAIL (cluster-node-timeout 2 s).
    while killed.elapsed() < Duration::from_millis(3500) {
        for (key, dead) in [(&dead_key, true), (&live_keys[0], false), (&live_keys[1], false)] {
            let call = Call::run(&limiter, key, dead);
            if trace {
                println!("  {:?} {key}: {:?} {:?}", call.began - killed, call.took, call.result);
            }
            calls.push(call);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let sequential_calls = calls.len();
    // Then a burst: many callers at once on the dead and on the live masters.
    let tasks: Vec<_> = (0..48)
        .map(|i| {
            let (key, dead) = match i % 3 {
                0 => (dead_key.clone(), true),
                n => (live_keys[n - 1].clone(), false),
            };
            let limiter = limiter.clone();
            runtime().spawn(async move {
                let began = Instant::now();
                let result = limiter.check(Some(&key), 1).await;
                Call { dead, began, took: began.elapsed(), result }
            })
        })
        .collect();
    calls.extend(tasks.into_iter().map(|t| block(t).unwrap()));
    let began = Instant::now();
    let opened = block(open_limiter.check(Some(&dead_key), 1)).expect("fail_open allows");
    let open_took = began.elapsed();

    let (dead, live): (Vec<&Call>, Vec<&Call>) = calls.iter().partition(|c| c.dead);
    let max = |calls: &[&Call]| calls.iter().map(|c| c.took).max().unwrap_or_default();
    let mut kinds = BTreeMap::new();
    for call in &dead {
        match &call.result {
            Ok(d) => panic!("a key on the dead master cannot be decided: {d:?} at {:?}", call.began - killed),
            Err(e) => {
                assert!(matches!(e.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout), "fail_closed: {e:?}");
                *kinds.entry(e.kind().as_str()).or_insert(0) += 1;
            }
        }
    }
    // Keys on the surviving masters keep working call after call. (In the concurrent burst they
    // may time out with the dead master's: redis-rs drives every node of a cluster from one task,
    // which a slot-map refresh after a master dies can hold up; the burst is held to the deadline
    // and the error kinds below, not to success.)
    let sequential_live: Vec<&Call> = calls[..sequential_calls].iter().filter(|c| !c.dead).collect();
    let burst_live_failures = calls[sequential_calls..].iter().filter(|c| !c.dead && c.result.is_err()).count();
    let live_failures: Vec<String> = sequential_live
        .iter()
        .filter(|c| !matches!(&c.result, Ok(d) if d.allowed))
        .map(|c| format!("at {:?} ({:?}): {:?}", c.began - killed, c.took, c.result))
        .collect();
    for call in calls[sequential_calls..].iter().filter(|c| !c.dead) {
        if let Err(e) = &call.result {
            assert!(matches!(e.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout), "burst: {e:?}");
        }
    }
    println!(
        "dead master: {} calls on its key (max {:?}, {kinds:?}); {} calls on live masters' keys (max {:?}, {} \
         failures one at a time, {burst_live_failures} in the burst); fail_open call {open_took:?}",
        dead.len(),
        max(&dead),
        live.len(),
        max(&live),
        live_failures.len()
    );
    assert!(
        live_failures.is_empty(),
        "keys on the surviving masters must keep working: {} of {} failed, first: {:?}",
        live_failures.len(),
        sequential_live.len(),
        &live_failures[..live_failures.len().min(5)]
    );
    assert!(opened.allowed && open.stats().failed_open == 1, "fail_open allows and counts");
    let open_call = Call { dead: true, began, took: open_took, result: Ok(opened) };
    for call in calls.iter().chain([&open_call]) {
        assert!(
            !comeback.fired_by(call.began + call.took),
            "a call (dead master: {}) begun {:?} after the kill ended only once its port answered again: {:?}",
            call.dead,
            call.began - killed,
            call.result
        );
    }
    assert!(!comeback.stop(), "the calls outlasted the outage");
    drop(replacement);
}

struct Call {
    dead: bool,
    began: Instant,
    took: Duration,
    result: ratekeeper::Result<ratekeeper::Decision>,
}

impl Call {
    fn run(limiter: &Limiter, key: &str, dead: bool) -> Call {
        let began = Instant::now();
        let result = block(limiter.check(Some(key), 1));
        Call { dead, began, took: began.elapsed(), result }
    }
}

#[test]
fn concurrent_waiter_on_the_cluster_is_woken_by_release() {
    let _serial = serial();
    let cluster = RedisCluster::start();
    let backend = Backend::redis_with(RedisConfig::cluster(cluster.seeds()).prefix("conc")).unwrap();
    let mutex = backend.concurrent("mutex", 1, Duration::from_secs(30)).unwrap();
    let other = backend.token_bucket("other", 1000.0, 1_000_000).unwrap();
    let holder = block(mutex.check(Some("res"), 1)).unwrap().lease.expect("a lease");
    let waiter = {
        let mutex = mutex.clone();
        runtime().spawn(async move {
            let result = mutex.acquire(Some("res"), 1, Some(Duration::from_secs(5))).await;
            (result, Instant::now())
        })
    };
    // The waiter blocks in BLPOP on one of the masters.
    let start = Instant::now();
    while !cluster.nodes.iter().any(|n| n.cli(&["INFO", "clients"]).contains("blocked_clients:1")) {
        assert!(start.elapsed() < GIVE_UP, "no client blocked in BLPOP on any master");
        std::thread::sleep(Duration::from_millis(10));
    }
    let start = Instant::now();
    block(async {
        for i in 0..100 {
            assert!(other.check(Some(&format!("k{i}")), 1).await.expect("the cluster answers").allowed);
        }
    });
    let checks = start.elapsed();
    assert!(!waiter.is_finished(), "every check was answered while the waiter still blocked");
    assert!(
        cluster.nodes.iter().any(|n| n.cli(&["INFO", "clients"]).contains("blocked_clients:1")),
        "the waiter is still in BLPOP"
    );
    let released = Instant::now();
    block(mutex.release(Some("res"), &holder)).unwrap();
    let (result, woke) = block(waiter).unwrap();
    let wake = woke.duration_since(released);
    println!("cluster: 100 checks in {checks:?} while a waiter blocked; woken {wake:?} after the release");
    // Orderings, not latencies: the checks were all answered while the waiter still blocked (the
    // `is_finished` check above; stalled behind its BLPOP, they would have ended with it), and the
    // waiter was granted, so woken by the release, inside its 5 s wait and 30 s before the
    // holder's lease could be reclaimed.
    let lease = result.expect("the waiter gets the slot").lease.expect("a lease");
    assert!(lease.fencing_token > holder.fencing_token);
}
