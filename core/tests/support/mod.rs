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
