//! Which Redis errors the failure policy covers and which it must not.
//!
//! A Redis that answers with a refusal an operator has to fix (an ACL without the permission,
//! a wrong password, memory full under `noeviction`, a script error) is not an outage: failing
//! open on it would admit everything, silently, for as long as nobody looks. Those calls fail
//! with `BackendRejected` under every policy and are counted in `stats().rejected`. A server
//! demoted to replica in a failover (`READONLY`) is an outage: the policy applies, and the
//! connection is dropped so the next call reconnects (to the new primary, where the address
//! now leads).

use crate::support;

use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, Decision, ErrorKind, FailurePolicy, Limiter, RedisConfig, Result};
use support::{RedisServer, GIVE_UP};

const POLICIES: [FailurePolicy; 2] = [FailurePolicy::FailOpen, FailurePolicy::Fallback { divisor: 2 }];

fn backend(url: String, prefix: &str, policy: FailurePolicy) -> Backend {
    Backend::redis_with(RedisConfig::new(url).prefix(prefix).failure_policy(policy).deadline(Duration::from_secs(1)))
        .expect("a Redis backend")
}

fn check(limiter: &Limiter, blocking: bool) -> Result<Decision> {
    if blocking {
        limiter.check_blocking(Some("k"), 1)
    } else {
        runtime().block_on(limiter.check(Some("k"), 1))
    }
}

/// Every call on `url` under each lenient policy, blocking and async, fails with
/// `BackendRejected` naming `code`, never admitted by the policy, and counted.
fn assert_rejected(url: impl Fn() -> String, prefix: &str, code: &str) {
    for policy in POLICIES {
        for blocking in [true, false] {
            let what = format!("{code}, {policy:?}, blocking {blocking}");
            let backend = backend(url(), prefix, policy);
            let limiter = backend.window("w", 10, Duration::from_secs(60)).unwrap();
            for _ in 0..2 {
                let result = check(&limiter, blocking);
                println!("[{what}] {result:?}");
                let error = result.expect_err("a refusal is never admitted by the failure policy");
                assert_eq!(error.kind(), ErrorKind::BackendRejected, "{what}: {error}");
                assert!(error.to_string().contains(code), "{what}: {error}");
            }
            let stats = backend.stats();
            assert_eq!((stats.failed_open, stats.fell_back, stats.failed), (0, 0, 0), "{what}: {stats:?}");
            assert_eq!(stats.rejected, 2, "{what}: {stats:?}");
        }
    }
}

#[test]
fn an_acl_without_evalsha_is_rejected_not_failed_open() {
    let server = RedisServer::start();
    server.cli(&["ACL", "SETUSER", "limited", "on", ">secret", "~*", "+@all", "-evalsha", "-eval"]);
    assert_rejected(|| format!("redis://limited:secret@127.0.0.1:{}", server.port), "rej-noperm", "NOPERM");
}

#[test]
fn a_wrong_password_is_rejected_not_failed_open() {
    let server = RedisServer::start();
    server.cli(&["ACL", "SETUSER", "user", "on", ">right", "~*", "+@all"]);
    assert_rejected(|| format!("redis://user:wrong@127.0.0.1:{}", server.port), "rej-wrongpass", "WRONGPASS");
}

#[test]
fn out_of_memory_is_rejected_not_failed_open() {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_rejected(|| server.url(), "rej-oom", "OOM");
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let limiter = backend(server.url(), "rej-oom", FailurePolicy::FailOpen).window("w", 10, Duration::from_secs(60));
    assert!(check(&limiter.unwrap(), true).expect("memory is back").allowed);
}

#[test]
fn a_script_error_is_rejected_not_failed_open() {
    let server = RedisServer::start();
    // The limiter's key holds a string (another program wrote it): its script fails (WRONGTYPE).
    let limiter = backend(server.url(), "rej-script", FailurePolicy::FailClosed)
        .window("w", 10, Duration::from_secs(60))
        .unwrap();
    check(&limiter, true).expect("Redis answers");
    let keys = server.cli(&["--scan", "--pattern", "rej-script:*"]);
    for key in keys.lines().filter(|k| !k.is_empty()) {
        server.cli(&["SET", key, "not a limiter"]);
    }
    assert_rejected(|| server.url(), "rej-script", "WRONGTYPE");
}

/// The ids of the clients connected to `server` whose last command was a script call.
fn script_clients(server: &RedisServer) -> Vec<String> {
    let list = server.cli(&["CLIENT", "LIST"]);
    list.lines()
        .filter(|l| l.contains("cmd=evalsha") || l.contains("cmd=eval "))
        // The background task (live limits, metrics, registry) runs scripts of its own.
        .filter(|l| !l.contains("name=ratekeeper-live "))
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")).map(str::to_owned))
        .collect()
}

/// A primary demoted to replica answers READONLY: the failure policy applies (an outage, not a
/// refusal), and the connection that got it is dropped, so the calls after it reconnect (after
/// a failover the address leads to the new primary; here the same server is promoted back).
#[test]
fn readonly_applies_the_policy_and_reconnects() {
    let primary = RedisServer::start();
    let other = RedisServer::start();
    for blocking in [true, false] {
        let what = format!("blocking {blocking}");
        let backend = backend(primary.url(), &format!("ro-{blocking}"), FailurePolicy::FailOpen);
        let limiter = backend.window("w", 10, Duration::from_secs(60)).unwrap();
        let first = check(&limiter, blocking).expect("Redis answers");
        assert!(first.allowed && first.decided_at_micros > 0, "{what}: {first:?}");
        let before = script_clients(&primary);
        assert!(!before.is_empty(), "{what}: the limiter's connection is listed");

        primary.cli(&["REPLICAOF", "127.0.0.1", &other.port.to_string()]);
        let demoted = check(&limiter, blocking).expect("fail_open admits");
        assert_eq!(backend.stats().failed_open, 1, "{what}: READONLY is an outage for the policy");
        assert_eq!(demoted.decided_at_micros, 0, "{what}: admitted by the policy, not by Redis: {demoted:?}");

        primary.cli(&["REPLICAOF", "NO", "ONE"]);
        let began = Instant::now();
        loop {
            let d = check(&limiter, blocking).expect("fail_open admits");
            let still = script_clients(&primary).into_iter().filter(|id| before.contains(id)).collect::<Vec<_>>();
            if d.decided_at_micros > 0 && still.is_empty() {
                break;
            }
            assert!(
                began.elapsed() < GIVE_UP,
                "{what}: the connection that got READONLY is still in use: {still:?} of {before:?}, last {d:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The test support's servers: a port another test's server took first (two tests picked the
/// same free port at once) is detected — that server answers, ours could not bind — and another
/// port is chosen. Before, the test went on talking to the other test's server and failed with
/// "connection refused" once that one stopped (seen in a CI run of the load tests).
#[test]
fn a_server_whose_port_was_taken_moves_to_another() {
    let first = RedisServer::start();
    let second = RedisServer::start_trying_port(first.port);
    assert_ne!(second.port, first.port);
    let info = second.cli(&["INFO", "server"]);
    assert!(info.lines().any(|l| l.trim() == format!("process_id:{}", second.pid())), "{info}");
}
