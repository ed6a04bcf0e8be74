//! The core's tests' support: the real Redis servers and waiting helpers of every suite
//! (`test-support`: started on free loopback ports, never 6379, stopped by pid when dropped; no
//! mocks), and the conformance vectors' runner.
#![allow(dead_code, unused_imports)]

pub mod vectors;

pub use ratekeeper_test_support::{
    free_port, scratch_dir, signal_pid, wait_until, Certificates, RedisCluster, RedisServer, SchedulingNoise,
    SentinelGroup, Watchdog, GIVE_UP,
};

/// The deadline of [`redis_config`]: generous, so that a test that is not about deadlines never
/// fails because a loaded machine answered slower than the default 200 ms.
pub const TEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// `RedisConfig::new(url)` with [`TEST_DEADLINE`]: what a test that is not about deadlines or
/// failures starts from (the default deadline, 200 ms, is for production links; the test suite
/// runs its servers and many tests at once on two cores, where a round trip can take longer).
pub fn redis_config(url: impl Into<String>) -> ratekeeper::RedisConfig {
    ratekeeper::RedisConfig::new(url).deadline(TEST_DEADLINE)
}

/// The deadline of a backend whose test loses a reply on purpose: every lost call waits it out,
/// and every other call of the test must answer within it, also on a loaded machine (300 ms
/// timed out a check at a load average of 12).
pub const LOST_REPLY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// A settle whose reply was lost, then retried. On a limiter from `make` (given a name), checks
/// `charged` on `key`, then settles it to `actual` with the server stopped: the call times out
/// (a lost reply). Then it resumes the server and retries the settle in both forms. Whatever the
/// lost call did, the settle applies once: `remaining` ends at `capacity - actual`, and in
/// between shows only the state before the settle or the settled one.
///
/// The case this is about is the lost call having run on the server before its retry, which the
/// retry must then not apply again. That needs the request written before the call's deadline.
/// On a loaded machine it may not be: the call then gave up unsent, and its retry applies it.
/// So the scenario runs again, on a new limiter, up to 5 times, until the lost call is seen to
/// have run.
pub fn settle_retried_after_a_lost_reply(
    server: &RedisServer,
    make: impl Fn(&str) -> ratekeeper::Limiter,
    key: Option<&str>,
    (capacity, charged, actual): (u64, u64, u64),
    blocking: bool,
) {
    for attempt in 0..5 {
        let limiter = make(&format!("{}-{charged}-{actual}-{attempt}", if blocking { "blocking" } else { "async" }));
        if lost_settle_then_retries(server, &limiter, key, (capacity, charged, actual), blocking) {
            return;
        }
        eprintln!("blocking {blocking}: the lost settle of {charged} to {actual} never ran on the server; again");
    }
    panic!("blocking {blocking}: in 5 attempts, no settle of {charged} to {actual} sent to a stopped server ran there");
}

/// One attempt of [`settle_retried_after_a_lost_reply`]: true when the lost call ran on the
/// server before its retry.
fn lost_settle_then_retries(
    server: &RedisServer,
    limiter: &ratekeeper::Limiter,
    key: Option<&str>,
    (capacity, charged, actual): (u64, u64, u64),
    blocking: bool,
) -> bool {
    let remaining = || limiter.peek_blocking(key).expect("peek").remaining;
    let decision = limiter.check_blocking(key, charged).expect("check");
    let (before, settled) = (capacity - charged, capacity - actual);
    assert_eq!(remaining(), before);

    server.pause();
    let lost = if blocking {
        limiter.settle_blocking(&decision, actual)
    } else {
        ratekeeper::runtime().block_on(limiter.settle(&decision, actual))
    };
    server.resume();
    let error = lost.expect_err("the server was stopped: the settle's reply cannot arrive");
    assert!(
        matches!(error.kind(), ratekeeper::ErrorKind::Timeout | ratekeeper::ErrorKind::BackendUnavailable),
        "a lost reply is a timeout or an unavailable backend, got {error:?}"
    );
    // A request the server had received runs as soon as it resumes; the peek may travel on
    // another connection, so it is given a moment to follow.
    let waited = std::time::Instant::now();
    let mut seen = remaining();
    while seen == before && waited.elapsed() < std::time::Duration::from_secs(1) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        seen = remaining();
    }
    assert!(
        seen == before || seen == settled,
        "blocking {blocking}: {seen} remaining after a lost settle of {charged} to {actual}"
    );

    // The retries, in both forms, apply it once in all, and report the settled state.
    let retried = limiter.settle_blocking(&decision, actual).expect("retry");
    assert_eq!((retried.allowed, retried.remaining), (true, settled), "blocking {blocking}");
    let retried = ratekeeper::runtime().block_on(limiter.settle(&decision, actual)).expect("retry");
    assert_eq!(retried.remaining, settled, "blocking {blocking}");
    assert_eq!(remaining(), settled, "blocking {blocking}: {charged} settled to {actual} once");
    seen == settled
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

/// The name libtest knows a test by, for running this test binary again as a worker process
/// (`--exact <name>`): the test function's path without the crate, e.g.
/// `test_name(module_path!(), "concurrent_worker")` is `redis::concurrent_worker` in
/// `core/tests/concurrent/redis.rs`.
pub fn test_name(module_path: &str, function: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{function}"),
        None => function.to_string(),
    }
}
