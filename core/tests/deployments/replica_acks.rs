//! `replica_acks`: a writing call admits only once that many replicas acknowledged its writes
//! (`WAIT`), on real processes.
//!
//! - On a standalone server without replicas: a check cannot be acknowledged, so it fails as
//!   unavailable within its deadline and the failure policy decides (`fail_open` admits); a peek
//!   writes nothing and does not wait.
//! - A server without `WAIT` (renamed away) is refused at connect, with an error that says so.
//! - The proof, on a Sentinel group: a window of 100; 60 admitted; both replicas stopped and
//!   their links dropped; 40 attempts; the primary killed; the replicas resumed; a stale replica
//!   promoted; attempts until refused. With `replica_acks=1` at most 100 are admitted in all. With
//!   0 (only with `RATEKEEPER_LONG_TESTS=1`) the over-admission is measured and printed.

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, ErrorKind, FailurePolicy, Limiter, RedisConfig, Result};
use support::{RedisCluster, RedisServer, SentinelGroup, GIVE_UP};

const WINDOW: u64 = 100;

fn window(config: RedisConfig) -> Limiter {
    Backend::redis_with(config).unwrap().window("w", WINDOW, Duration::from_secs(3600)).unwrap()
}

fn both_styles(limiter: &Limiter, key: &str) -> [Result<ratekeeper::Decision>; 2] {
    [limiter.check_blocking(Some(key), 1), runtime().block_on(limiter.check(Some(key), 1))]
}

#[test]
fn without_replicas_a_check_fails_as_unavailable_and_a_peek_does_not_wait() {
    let server = RedisServer::start();
    // A deadline long enough that WAIT's count (after three quarters of it) comes back in time.
    let deadline = Duration::from_secs(1);
    let closed = window(RedisConfig::new(server.url()).replica_acks(1).prefix("closed").deadline(deadline));
    for result in both_styles(&closed, "k") {
        let error = result.expect_err("no replica can acknowledge");
        assert_eq!(error.kind(), ErrorKind::BackendUnavailable, "{error}");
        assert!(error.to_string().contains("0 of the 1 replicas"), "{error}");
    }
    // A peek writes nothing: answered without waiting, and it shows both checks ran on the
    // primary (a shortfall is not retried, and not undone).
    assert_eq!(closed.peek_blocking(Some("k")).unwrap().remaining, WINDOW - 2);
    // Pauses (a script), resets (a pipeline) and overrides write state: they wait too.
    let backend =
        Backend::redis_with(RedisConfig::new(server.url()).replica_acks(1).prefix("closed").deadline(deadline));
    let spec = ratekeeper::LimiterSpec::Bucket { limit: 5, interval: Duration::from_secs(60) };
    for (what, result) in [
        ("pause", closed.pause_blocking(Some("k"), Duration::from_secs(1)).map(drop)),
        ("reset", closed.reset_blocking(Some("k"))),
        ("set_limit", backend.unwrap().set_limit_blocking("other", &spec, None)),
    ] {
        let error = result.expect_err(what);
        assert_eq!(error.kind(), ErrorKind::BackendUnavailable, "{what}: {error}");
    }

    let config = RedisConfig::new(server.url()).replica_acks(1).prefix("open").failure_policy(FailurePolicy::FailOpen);
    let config = config.deadline(deadline);
    let backend = Backend::redis_with(config).unwrap();
    let open = backend.window("w", WINDOW, Duration::from_secs(3600)).unwrap();
    for result in both_styles(&open, "k") {
        assert!(result.expect("fail_open admits a call its replicas did not acknowledge").allowed);
    }
    assert_eq!(backend.stats().failed_open, 2);
}

/// On a Cluster the script and its WAIT travel together to the primary of the call's slot (the
/// cluster client routes the pair by the script's keys); these primaries have no replica.
#[test]
fn on_a_cluster_without_replicas_a_check_fails_as_unavailable() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::cluster(cluster.seeds()).replica_acks(1).deadline(Duration::from_secs(1));
    let limiter = window(config);
    for key in ["a", "b"] {
        for result in both_styles(&limiter, key) {
            let error = result.expect_err("no replica can acknowledge");
            assert!(error.to_string().contains("0 of the 1 replicas"), "{error}");
        }
        assert_eq!(limiter.peek_blocking(Some(key)).unwrap().remaining, WINDOW - 2);
    }
}

#[test]
fn a_server_without_wait_is_refused_at_connect() {
    let server = RedisServer::start_with(&["--rename-command".into(), "WAIT".into(), "".into()]);
    let limiter = window(RedisConfig::new(server.url()).replica_acks(1));
    for result in both_styles(&limiter, "k") {
        let error = result.expect_err("WAIT is missing");
        assert_eq!(error.kind(), ErrorKind::BackendRejected, "{error}");
        assert!(error.to_string().contains("WAIT") && error.to_string().contains("replica_acks"), "{error}");
    }
    // Without replica_acks the same server serves.
    let plain = window(RedisConfig::new(server.url()).prefix("plain"));
    assert!(plain.check_blocking(Some("k"), 1).unwrap().allowed);
}

/// 40 attempts from 8 threads at once (with replica_acks each waits out its deadline); returns
/// how many were admitted.
fn attempts_while_stalled(limiter: &Limiter) -> u64 {
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| (0..5).filter(|_| limiter.check_blocking(Some("k"), 1).is_ok_and(|d| d.allowed)).count())
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap() as u64).sum()
    })
}

/// Checks until one is refused (errors while the backend reconnects are retried); returns how
/// many were admitted.
fn attempts_until_refused(limiter: &Limiter) -> u64 {
    let (mut admitted, began) = (0u64, Instant::now());
    loop {
        assert!(began.elapsed() < GIVE_UP, "never refused after the failover ({admitted} admitted)");
        match limiter.check_blocking(Some("k"), 1) {
            Ok(d) if d.allowed => admitted += 1,
            Ok(_) => return admitted,
            // Reconnecting, or (with replica_acks) no replica following the new primary yet.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The scenario on a Sentinel group with `replica_acks`; returns how many calls were
/// admitted in all.
fn admitted_across_a_lossy_failover(replica_acks: u32) -> u64 {
    let mut group = SentinelGroup::start();
    let limiter = window(RedisConfig::new(group.url()).replica_acks(replica_acks));
    for _ in 0..60 {
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    let primary = group.primary_port().expect("a primary");
    assert_eq!(group.node(primary).cli(&["WAIT", "2", "10000"]), "2", "both replicas hold the 60");
    let replicas: Vec<u16> = group.nodes.iter().map(|n| n.port).filter(|p| *p != primary).collect();
    for port in &replicas {
        group.node(*port).pause();
    }
    group.node(primary).cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    let during = attempts_while_stalled(&limiter);
    group.node_mut(primary).kill();
    for port in &replicas {
        group.node(*port).resume();
    }
    let new = group.wait_failed_over_from(primary, GIVE_UP);
    let after = attempts_until_refused(&limiter);
    let total = 60 + during + after;
    println!(
        "replica_acks={replica_acks}: 60 admitted, {during} of 40 while the replicas stalled, {after} after {new} \
         was promoted: {total} in a window of {WINDOW}"
    );
    total
}

/// The same on a Cluster whose masters have a replica each: the key's master is killed while its
/// replica is stalled, the replica is promoted by the cluster, and the killed master is started
/// again (it rejoins as the new master's replica, which `replica_acks=1` then waits for).
fn admitted_across_a_lossy_cluster_failover(replica_acks: u32) -> u64 {
    let mut cluster = RedisCluster::start_with_replicas();
    let config = RedisConfig::cluster(cluster.seeds()).replica_acks(replica_acks).prefix("lossy");
    let limiter = window(config);
    for _ in 0..60 {
        assert!(limiter.check_blocking(Some("k"), 1).unwrap().allowed);
    }
    // The master holding the limiter's keys, and its replica.
    let master = cluster
        .nodes
        .iter()
        .find(|n| n.cli(&["ROLE"]).starts_with("master") && !n.cli(&["KEYS", "lossy*"]).is_empty())
        .expect("the keys' master")
        .port;
    let replica = cluster
        .nodes
        .iter()
        .find(|n| n.cli(&["INFO", "replication"]).contains(&format!("master_port:{master}")))
        .expect("the master's replica")
        .port;
    assert_eq!(cluster.node_mut(master).cli(&["WAIT", "1", "10000"]), "1", "the replica holds the 60");
    cluster.node_mut(replica).pause();
    cluster.node_mut(master).cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    let during = attempts_while_stalled(&limiter);
    cluster.node_mut(master).kill();
    cluster.node_mut(replica).resume();
    ratekeeper_test_support::wait_until("the replica promoted", GIVE_UP, || {
        cluster.node_mut(replica).cli(&["ROLE"]).starts_with("master")
    });
    cluster.node_mut(master).restart();
    let after = attempts_until_refused(&limiter);
    let total = 60 + during + after;
    println!(
        "cluster, replica_acks={replica_acks}: 60 admitted, {during} of 40 while the replica stalled, {after} after \
         it was promoted: {total} in a window of {WINDOW}"
    );
    total
}

#[test]
fn with_one_replica_ack_a_lossy_failover_admits_no_more_than_the_window() {
    let total = admitted_across_a_lossy_failover(1);
    assert!(total <= WINDOW, "{total} admitted in a window of {WINDOW}");
}

#[test]
fn without_replica_acks_a_lossy_failover_over_admits() {
    if std::env::var("RATEKEEPER_LONG_TESTS").as_deref() != Ok("1") {
        println!("skipped: set RATEKEEPER_LONG_TESTS=1");
        return;
    }
    let total = admitted_across_a_lossy_failover(0);
    println!("over-admission without replica_acks: {} (expected 40)", total.saturating_sub(WINDOW));
    assert!(total > WINDOW, "the scenario lost no admission ({total}): it no longer shows what WAIT prevents");
}

/// What `replica_acks=1` costs against 0 on the Sentinel group: calls per second, sequential
/// (blocking calls) and 64 in flight (async calls), each for two seconds. Printed, not asserted
/// (a debug build on a shared machine: compare the columns). Only with `RATEKEEPER_LONG_TESTS=1`.
#[test]
fn the_cost_of_one_replica_ack() {
    if std::env::var("RATEKEEPER_LONG_TESTS").as_deref() != Ok("1") {
        println!("skipped: set RATEKEEPER_LONG_TESTS=1");
        return;
    }
    let group = SentinelGroup::start();
    let run_for = Duration::from_secs(2);
    for acks in [0, 1, 0, 1] {
        let limiter =
            Backend::redis_with(RedisConfig::new(group.url()).replica_acks(acks).prefix(format!("cost{acks}")))
                .unwrap()
                .window("w", 1 << 40, Duration::from_secs(3600))
                .unwrap();
        limiter.check_blocking(Some("warm"), 1).unwrap();
        let (mut sequential, began) = (0u64, Instant::now());
        while began.elapsed() < run_for {
            limiter.check_blocking(Some("k"), 1).unwrap();
            sequential += 1;
        }
        let sequential = sequential as f64 / began.elapsed().as_secs_f64();
        let (in_flight, began) = runtime().block_on(async {
            let (mut done, began) = (0u64, Instant::now());
            while began.elapsed() < run_for {
                let calls: Vec<_> = (0..64)
                    .map(|i| {
                        let limiter = limiter.clone();
                        tokio::spawn(async move { limiter.check(Some(&format!("k{i}")), 1).await })
                    })
                    .collect();
                for call in calls {
                    call.await.unwrap().unwrap();
                    done += 1;
                }
            }
            (done, began)
        });
        let in_flight = in_flight as f64 / began.elapsed().as_secs_f64();
        println!("replica_acks={acks}: sequential {sequential:.0} calls/s, 64 in flight {in_flight:.0} calls/s");
    }
}

#[test]
fn on_a_cluster_with_one_replica_ack_a_lossy_failover_admits_no_more_than_the_window() {
    if std::env::var("RATEKEEPER_LONG_TESTS").as_deref() != Ok("1") {
        println!("skipped: set RATEKEEPER_LONG_TESTS=1");
        return;
    }
    let total = admitted_across_a_lossy_cluster_failover(1);
    assert!(total <= WINDOW, "{total} admitted in a window of {WINDOW}");
    let total = admitted_across_a_lossy_cluster_failover(0);
    println!("over-admission on a cluster without replica_acks: {}", total.saturating_sub(WINDOW));
}
