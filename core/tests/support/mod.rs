//! The core's tests' support: the real Redis servers and waiting helpers of every suite
//! (`test-support`: started on free loopback ports, never 6379, stopped by pid when dropped; no
//! mocks), and the conformance vectors' runner.
#![allow(dead_code, unused_imports)]

pub mod vectors;

pub use ratekeeper_test_support::{
    free_port, scratch_dir, signal_pid, wait_until, Certificates, RedisCluster, RedisServer, SchedulingNoise, Watchdog,
    GIVE_UP,
};

/// Stops the server, settles (the request is sent, the reply never comes: the call times out),
/// resumes the server (which runs the request it had received), and checks the call failed as a
/// lost reply does (a timeout or an unavailable backend).
pub fn settle_with_lost_reply(
    server: &RedisServer,
    limiter: &ratekeeper::Limiter,
    decision: &ratekeeper::Decision,
    actual: u64,
    blocking: bool,
) {
    server.pause();
    let lost = if blocking {
        limiter.settle_blocking(decision, actual)
    } else {
        ratekeeper::runtime().block_on(limiter.settle(decision, actual))
    };
    server.resume();
    let error = lost.expect_err("the server was stopped: the settle's reply cannot arrive");
    assert!(
        matches!(error.kind(), ratekeeper::ErrorKind::Timeout | ratekeeper::ErrorKind::BackendUnavailable),
        "a lost reply is a timeout or an unavailable backend, got {error:?}"
    );
}

/// The calls each command had in `stats` (an `INFO commandstats` reply); 0 for a command never
/// called.
pub fn command_calls(stats: &str, command: &str) -> u64 {
    stats
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .map_or(0, |v| v.parse::<u64>().unwrap())
}

/// `INFO commandstats` over a window that holds `calls` and nothing a backend's background task
/// sends. Every Redis backend polls its live limits every 200 ms (an `HMGET` and a `GET`) and,
/// every fifth poll, flushes its metrics (an `EVAL`): a window that caught one counted commands
/// the calls never sent. So the window opens just after a poll (seen by its `HMGET`), when the
/// next is furthest away, and is taken again if a poll still fell in it (a slow machine).
/// `calls` runs once per window: it must be repeatable (refusals, reads).
pub fn commandstats_between_polls(server: &RedisServer, mut calls: impl FnMut()) -> String {
    for _ in 0..20 {
        server.cli(&["CONFIG", "RESETSTAT"]);
        wait_until("a live-limits poll (is a Redis backend open?)", std::time::Duration::from_secs(2), || {
            command_calls(&server.cli(&["INFO", "commandstats"]), "hmget") > 0
        });
        // The poll's flush, when due, follows it at once.
        std::thread::sleep(std::time::Duration::from_millis(30));
        server.cli(&["CONFIG", "RESETSTAT"]);
        calls();
        let stats = server.cli(&["INFO", "commandstats"]);
        if command_calls(&stats, "hmget") == 0 {
            return stats;
        }
    }
    panic!("every window of 20 held a live-limits poll");
}
