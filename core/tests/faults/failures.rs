//! What callers see when Redis dies, hangs or was never there, under each failure policy, and that
//! the backend comes back; and the concurrent limiter's BLPOP wake-up on its own connection.
//!
//! Every test runs against a real `redis-server` (SIGKILL, SIGSTOP/SIGCONT, restart on the same
//! port). The tests of this file run one at a time (see [`serial`]). They assert orderings, not
//! latencies: calls made while the server is stopped end before a watchdog resumes it.
//!
//! The outage tests run twice: with async calls (the shared multiplexed connection, driven by the
//! runtime) and with blocking calls (each thread's own direct connection).

use crate::support;

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ratekeeper::{
    runtime, Backend, BackendStats, Decision, ErrorKind, FailurePolicy, Limiter, RedisConfig, Result, DEFAULT_DEADLINE,
};
use support::{signal_pid, RedisServer, Watchdog, GIVE_UP};

/// When a watchdog ends an outage that the calls under test must not have waited for: long
/// against the 200 ms deadline, so that a call still running then waited on the server instead.
/// It bounds nothing measured (the tests assert orderings: "ended before the server came back").
const OUTAGE_END: Duration = Duration::from_secs(10);
/// The wait timeout of [`spawn_waiter`]'s waiters.
const WAITER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle backend is left after a restart before its first call.
const IDLE_AFTER_RESTART: Duration = Duration::from_secs(1);
/// The window limiter used throughout: 10 per minute (5 per process under `Fallback { divisor: 2 }`).
const LIMIT: u64 = 10;
const DIVISOR: u32 = 2;

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn block<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// Which API the outage calls use.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    Async,
    Blocking,
}

const STYLES: [Style; 2] = [Style::Async, Style::Blocking];

impl Style {
    fn check(self, limiter: &Limiter, key: &str) -> Result<Decision> {
        match self {
            Style::Async => block(limiter.check(Some(key), 1)),
            Style::Blocking => limiter.check_blocking(Some(key), 1),
        }
    }

    fn peek(self, limiter: &Limiter, key: &str) -> Result<Decision> {
        match self {
            Style::Async => block(limiter.peek(Some(key))),
            Style::Blocking => limiter.peek_blocking(Some(key)),
        }
    }

    /// Opens this style's connection with peeks (which count nothing) until one is answered by
    /// Redis itself, for up to 10 s: the first call of a style connects, and on a loaded machine
    /// connecting can take longer than the 200 ms default deadline, which the failure policy
    /// would then answer. Returns the backend's counters once a peek was served.
    fn warm_up(self, backend: &Backend, limiter: &Limiter, key: &str) -> BackendStats {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let before = backend.stats();
            let served = self.peek(limiter, key).is_ok() && backend.stats() == before;
            if served {
                return before;
            }
            assert!(Instant::now() < give_up, "{}: Redis did not answer a peek within 10 s", self.name());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn name(self) -> &'static str {
        match self {
            Style::Async => "async",
            Style::Blocking => "blocking",
        }
    }
}

fn total(stats: BackendStats) -> u64 {
    stats.failed_open + stats.fell_back + stats.failed
}

fn policy_name(policy: FailurePolicy) -> &'static str {
    match policy {
        FailurePolicy::FailClosed => "fail_closed",
        FailurePolicy::FailOpen => "fail_open",
        FailurePolicy::Fallback { .. } => "fallback",
        _ => "other",
    }
}

fn backend(url: &str, prefix: &str, policy: FailurePolicy) -> Backend {
    Backend::redis_with(RedisConfig::new(url).prefix(prefix).failure_policy(policy)).expect("a Redis backend")
}

/// The Redis keys under `prefix`, as `redis-cli --scan` lists them.
fn keys(server: &RedisServer, prefix: &str) -> Vec<String> {
    let out = server.cli(&["--scan", "--pattern", &format!("{prefix}:*")]);
    out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// The number of admissions Redis holds for the window limiter's `key` (its log's ZCARD).
fn admissions_in_redis(server: &RedisServer, prefix: &str, key: &str) -> u64 {
    let log: Vec<String> = keys(server, prefix).into_iter().filter(|k| k.ends_with(&format!(":z:{key}"))).collect();
    assert!(log.len() <= 1, "one log key per identity, got {log:?}");
    match log.first() {
        Some(k) => server.cli(&["ZCARD", k]).parse().expect("ZCARD answers a number"),
        None => 0,
    }
}

/// One call during an outage: what it returned and how long it took.
struct Call {
    result: Result<Decision>,
    began: Instant,
    took: Duration,
}

/// Makes sequential checks for at least `span` (and at least `min_calls`), then a burst of
/// `burst` concurrent checks (tasks, or threads for blocking calls), timing each call.
fn calls_during_outage(
    style: Style,
    limiter: &Limiter,
    key: &str,
    span: Duration,
    min_calls: usize,
    burst: usize,
) -> Vec<Call> {
    let mut calls = Vec::new();
    let start = Instant::now();
    while start.elapsed() < span || calls.len() < min_calls {
        let began = Instant::now();
        let result = style.check(limiter, key);
        calls.push(Call { result, began, took: began.elapsed() });
        std::thread::sleep(Duration::from_millis(2));
    }
    let timed = move |limiter: Limiter, key: String| {
        let began = Instant::now();
        let result = style.check(&limiter, &key);
        Call { result, began, took: began.elapsed() }
    };
    match style {
        Style::Async => {
            let tasks: Vec<_> = (0..burst)
                .map(|_| {
                    let (limiter, key) = (limiter.clone(), key.to_owned());
                    runtime().spawn(async move {
                        let began = Instant::now();
                        let result = limiter.check(Some(&key), 1).await;
                        Call { result, began, took: began.elapsed() }
                    })
                })
                .collect();
            for task in tasks {
                calls.push(block(task).expect("a check task"));
            }
        }
        Style::Blocking => {
            let threads: Vec<_> = (0..burst)
                .map(|_| {
                    let (limiter, key) = (limiter.clone(), key.to_owned());
                    std::thread::spawn(move || timed(limiter, key))
                })
                .collect();
            for thread in threads {
                calls.push(thread.join().expect("a check thread"));
            }
        }
    }
    calls
}

fn max_took(calls: &[Call]) -> Duration {
    calls.iter().map(|c| c.took).max().unwrap_or_default()
}

/// Asserts that every call ended before `watchdog` ended the outage (resumed or restarted the
/// server): none waited on the server rather than its deadline or the policy.
fn assert_ended_before(calls: &[Call], watchdog: &Watchdog, what: &str) {
    for (i, call) in calls.iter().enumerate() {
        let ended = call.began + call.took;
        assert!(
            !watchdog.fired_by(ended),
            "{what}: call {i} ended only after the server came back ({:?})",
            call.result
        );
    }
}

/// Asserts what each policy does with calls made while Redis cannot answer. `hung` demands that
/// fail-closed calls that waited on the server end in `Timeout`.
fn assert_policy_outcomes(policy: FailurePolicy, calls: &[Call], stats_delta: BackendStats, what: &str) {
    let n = calls.len() as u64;
    match policy {
        FailurePolicy::FailClosed => {
            for (i, call) in calls.iter().enumerate() {
                match &call.result {
                    Err(e) => assert!(
                        matches!(e.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout),
                        "{what}: call {i} must fail with backend_unavailable or timeout, got {e:?}"
                    ),
                    Ok(d) => panic!("{what}: call {i} must fail closed, got a decision {d:?}"),
                }
            }
            assert_eq!(stats_delta.failed, n, "{what}: every failed call is counted");
        }
        FailurePolicy::FailOpen => {
            for (i, call) in calls.iter().enumerate() {
                let d = call.result.as_ref().unwrap_or_else(|e| panic!("{what}: call {i} must fail open: {e:?}"));
                assert!(d.allowed, "{what}: call {i} must be allowed");
            }
            assert_eq!(stats_delta.failed_open, n, "{what}: every call allowed open is counted");
        }
        FailurePolicy::Fallback { divisor } => {
            let admitted = LIMIT / u64::from(divisor);
            for (i, call) in calls.iter().enumerate() {
                let d = call.result.as_ref().unwrap_or_else(|e| panic!("{what}: call {i} must fall back: {e:?}"));
                assert_eq!(d.limit, admitted, "{what}: the fallback limit is limit/divisor");
                assert_eq!(
                    d.allowed,
                    (i as u64) < admitted,
                    "{what}: call {i}: first {admitted} admitted, then refused"
                );
            }
            assert_eq!(stats_delta.fell_back, n, "{what}: every call answered by the fallback is counted");
        }
        _ => unreachable!(),
    }
}

fn delta(after: BackendStats, before: BackendStats) -> BackendStats {
    let mut d = BackendStats::default();
    d.failed_open = after.failed_open - before.failed_open;
    d.fell_back = after.fell_back - before.fell_back;
    d.failed = after.failed - before.failed;
    d
}

/// Polls until a check on `key` is answered by Redis itself: it succeeds and no policy counter
/// moves. Returns how long that took (from the call of this function) and the decision.
fn await_recovery(style: Style, backend: &Backend, limiter: &Limiter, key: &str, what: &str) -> (Duration, Decision) {
    let start = Instant::now();
    loop {
        let before = total(backend.stats());
        let result = style.check(limiter, key);
        if let Ok(decision) = result {
            if total(backend.stats()) == before {
                return (start.elapsed(), decision);
            }
        }
        assert!(start.elapsed() < GIVE_UP, "{what}: Redis never came back ({:?})", backend.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// After recovery: a few more checks, all answered by Redis (counters frozen, remaining counting
/// down from a fresh state), and visible with redis-cli.
#[allow(clippy::too_many_arguments)] // a test helper: each argument is one part of the scenario
fn assert_served_by_redis(
    style: Style,
    backend: &Backend,
    limiter: &Limiter,
    server: &RedisServer,
    prefix: &str,
    key: &str,
    first: &Decision,
    what: &str,
) {
    assert!(first.allowed, "{what}: {first:?}");
    assert_eq!(first.limit, LIMIT, "{what}: the full limit again, not the fallback's");
    assert_eq!(first.remaining, LIMIT - 1, "{what}: a fresh (restarted, empty) Redis decided");
    assert!(first.decided_at_micros > 0, "{what}: decided by a clock");
    assert_eq!(admissions_in_redis(server, prefix, key), 1, "{what}: redis-cli sees the admission");
    let frozen = backend.stats();
    for i in 2..=4 {
        let d = style.check(limiter, key).expect("Redis answers");
        assert_eq!(d.remaining, LIMIT - i, "{what}: counted by Redis");
    }
    assert_eq!(backend.stats(), frozen, "{what}: the policy counters stopped increasing");
    assert_eq!(admissions_in_redis(server, prefix, key), 4, "{what}: redis-cli sees every admission");
}

fn killed_mid_run(policy: FailurePolicy) {
    for style in STYLES {
        killed_mid_run_with(policy, style);
    }
}

fn killed_mid_run_with(policy: FailurePolicy, style: Style) {
    let _serial = serial();
    let name = &format!("{}, {}", policy_name(policy), style.name());
    let prefix = format!("kill-{}-{}", policy_name(policy), style.name());
    let mut server = RedisServer::start();
    let backend = backend(&server.url(), &prefix, policy);
    let limiter = backend.window("api", LIMIT, Duration::from_secs(60)).unwrap();
    let healthy = style.warm_up(&backend, &limiter, "user");

    // Healthy: Redis counts.
    for i in 1..=3 {
        let d = style.check(&limiter, "user").expect("Redis is up");
        assert_eq!(d.remaining, LIMIT - i);
    }
    assert_eq!(admissions_in_redis(&server, &prefix, "user"), 3);
    assert_eq!(total(delta(backend.stats(), healthy)), 0);

    server.kill();
    // A server on the same port once OUTAGE_END has passed: a call that waited for a connection
    // rather than failing (or falling back) at once would be answered by it.
    let (port, replacement) = (server.port, Arc::new(Mutex::new(None)));
    let slot = replacement.clone();
    let comeback = Watchdog::start(OUTAGE_END, move || *slot.lock().unwrap() = Some(RedisServer::start_on_port(port)));
    let before = backend.stats();
    let calls = calls_during_outage(style, &limiter, "user", Duration::from_millis(400), 20, 32);
    let stats = delta(backend.stats(), before);
    let max = max_took(&calls);
    println!("[{name}] killed: {} calls, max call time {max:?}, stats {stats:?}", calls.len());
    assert_policy_outcomes(policy, &calls, stats, &format!("{name}, Redis killed"));
    assert_ended_before(&calls, &comeback, &format!("{name}, Redis killed"));
    assert!(!comeback.stop(), "{name}: the calls outlasted the outage");

    server.restart();
    let (recovery, first) = await_recovery(style, &backend, &limiter, "user", name);
    println!("[{name}] recovered {recovery:?} after the restarted server accepted connections");
    assert_served_by_redis(style, &backend, &limiter, &server, &prefix, "user", &first, name);
}

#[test]
fn killed_redis_fail_closed_errors_fast_then_recovers() {
    killed_mid_run(FailurePolicy::FailClosed);
}

#[test]
fn killed_redis_fail_open_allows_and_counts_then_recovers() {
    killed_mid_run(FailurePolicy::FailOpen);
}

#[test]
fn killed_redis_fallback_admits_limit_over_divisor_then_recovers() {
    killed_mid_run(FailurePolicy::Fallback { divisor: DIVISOR });
}

fn hung(policy: FailurePolicy) {
    for style in STYLES {
        hung_with(policy, style);
    }
}

fn hung_with(policy: FailurePolicy, style: Style) {
    let _serial = serial();
    let name = &format!("{}, {}", policy_name(policy), style.name());
    let prefix = format!("hang-{}-{}", policy_name(policy), style.name());
    let server = RedisServer::start();
    let backend = backend(&server.url(), &prefix, policy);
    let limiter = backend.window("api", LIMIT, Duration::from_secs(60)).unwrap();
    style.warm_up(&backend, &limiter, "user");
    assert!(style.check(&limiter, "user").expect("Redis is up").allowed);

    server.pause();
    let pid = server.pid();
    let resume = Watchdog::start(OUTAGE_END, move || signal_pid(pid, "-CONT"));
    let before = backend.stats();
    // Long enough to cover a reconnect attempt that hangs for the whole connect timeout (1 s)
    // and the back-off after it.
    let calls = calls_during_outage(style, &limiter, "user", Duration::from_millis(1300), 5, 16);
    let stats = delta(backend.stats(), before);
    let max = max_took(&calls);
    let timeouts = calls.iter().filter(|c| matches!(&c.result, Err(e) if e.kind() == ErrorKind::Timeout)).count();
    let unavailable =
        calls.iter().filter(|c| matches!(&c.result, Err(e) if e.kind() == ErrorKind::BackendUnavailable)).count();
    println!(
        "[{name}] hung: {} calls, max call time {max:?}, {timeouts} timeouts, {unavailable} backend_unavailable, \
         stats {stats:?}",
        calls.len()
    );
    if std::env::var_os("RK_TRACE").is_some() {
        for (i, c) in calls.iter().enumerate() {
            println!("  call {i}: {:?} {:?}", c.took, c.result.as_ref().map(|d| d.allowed));
        }
    }
    assert_policy_outcomes(policy, &calls, stats, &format!("{name}, Redis hung"));
    // Every call ended while the server was still stopped: by its deadline, not the server.
    assert_ended_before(&calls, &resume, &format!("{name}, Redis hung"));
    assert!(!resume.stop(), "{name}: the calls outlasted the hang");
    if policy == FailurePolicy::FailClosed {
        // The first call waits on the hung server: it must be a timeout, after the full deadline.
        let first = &calls[0];
        assert_eq!(first.result.as_ref().unwrap_err().kind(), ErrorKind::Timeout, "{name}: {:?}", first.result);
        assert!(first.took >= DEFAULT_DEADLINE, "{name}: a timeout comes at the deadline, not before");
    }

    server.resume();
    let resumed = Instant::now();
    let (_, first) = await_recovery(style, &backend, &limiter, "user", name);
    let recovery = resumed.elapsed();
    println!("[{name}] recovered {recovery:?} after SIGCONT");
    assert!(first.allowed && first.limit == LIMIT && first.decided_at_micros > 0, "{name}: {first:?}");
    // 1 admission before the hang, this one, and the script of the first call of the hang, sent
    // on a connection that was open then, which Redis ran on SIGCONT although its caller had
    // timed out. No other: a new connection proves the server answers before it sends a script.
    let admissions = admissions_in_redis(&server, &prefix, "user");
    println!("[{name}] after SIGCONT Redis holds {admissions} admissions");
    assert!(admissions <= 3, "{name}: calls that timed out on the hung server were run later: {admissions}");
    let frozen = backend.stats();
    for _ in 0..3 {
        block(limiter.peek(Some("user"))).expect("Redis answers");
    }
    assert_eq!(backend.stats(), frozen, "{name}: the policy counters stopped increasing");
}

#[test]
fn hung_redis_fail_closed_times_out_within_the_deadline_then_recovers() {
    hung(FailurePolicy::FailClosed);
}

#[test]
fn hung_redis_fail_open_allows_within_the_deadline_then_recovers() {
    hung(FailurePolicy::FailOpen);
}

#[test]
fn backend_built_while_redis_is_down_fails_fast_then_connects() {
    for style in STYLES {
        built_while_down(style);
    }
}

fn built_while_down(style: Style) {
    let _serial = serial();
    let port = support::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let policies = [FailurePolicy::FailClosed, FailurePolicy::FailOpen, FailurePolicy::Fallback { divisor: DIVISOR }];
    // Construction never connects, so it cannot fail because nothing listens.
    let setups: Vec<(FailurePolicy, String, Backend, Limiter)> = policies
        .iter()
        .map(|&policy| {
            let prefix = format!("down-{}-{}", policy_name(policy), style.name());
            let backend = backend(&url, &prefix, policy);
            let limiter = backend.window("api", LIMIT, Duration::from_secs(60)).expect("limiters build offline too");
            (policy, prefix, backend, limiter)
        })
        .collect();

    // A server appears on the port once OUTAGE_END has passed: a call that waited for one rather
    // than failing (or falling back) when its connection was refused would be answered by it.
    let replacement = Arc::new(Mutex::new(None));
    let slot = replacement.clone();
    let appears = Watchdog::start(OUTAGE_END, move || *slot.lock().unwrap() = Some(RedisServer::start_on_port(port)));
    for (policy, _, backend, limiter) in &setups {
        let name = &format!("{}, {}", policy_name(*policy), style.name());
        let before = backend.stats();
        let calls = calls_during_outage(style, limiter, "user", Duration::from_millis(250), 20, 16);
        let stats = delta(backend.stats(), before);
        let max = max_took(&calls);
        println!("[{name}] never up: {} calls, max call time {max:?}", calls.len());
        assert_policy_outcomes(*policy, &calls, stats, &format!("{name}, nothing listening"));
        assert_ended_before(&calls, &appears, &format!("{name}, nothing listening"));
        if *policy == FailurePolicy::FailClosed {
            // Refused at once, not timed out: a call that waited out its deadline is a Timeout.
            for call in &calls {
                assert_eq!(call.result.as_ref().unwrap_err().kind(), ErrorKind::BackendUnavailable);
            }
        }
    }
    assert!(!appears.stop(), "the calls outlasted the outage");
    drop(replacement);

    let server = RedisServer::start_on_port(port);
    let up = Instant::now();
    for (policy, prefix, backend, limiter) in &setups {
        let name = &format!("{}, {}", policy_name(*policy), style.name());
        let (_, first) = await_recovery(style, backend, limiter, "user", name);
        let recovery = up.elapsed();
        println!("[{name}] connected {recovery:?} after the server started accepting connections");
        assert_served_by_redis(style, backend, limiter, &server, prefix, "user", &first, name);
    }
}

/// Waits until Redis reports `n` clients blocked (in BLPOP).
fn wait_blocked_clients(server: &RedisServer, n: usize) -> Duration {
    let start = Instant::now();
    loop {
        let info = server.cli(&["INFO", "clients"]);
        let blocked = info
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(usize::MAX);
        if blocked == n {
            return start.elapsed();
        }
        assert!(start.elapsed() < GIVE_UP, "expected {n} blocked clients, INFO says:\n{info}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

type Waiter = tokio::task::JoinHandle<(Result<Decision>, Instant)>;

fn spawn_waiter(limiter: &Limiter, key: &str) -> Waiter {
    let limiter = limiter.clone();
    let key = key.to_owned();
    runtime().spawn(async move {
        let result = limiter.acquire(Some(&key), 1, Some(WAITER_TIMEOUT)).await;
        (result, Instant::now())
    })
}

#[test]
fn concurrent_waiter_is_woken_by_release_via_blpop_without_stalling_other_calls() {
    let _serial = serial();
    let server = RedisServer::start();
    let backend = backend(&server.url(), "conc", FailurePolicy::FailClosed);
    let lock_timeout = Duration::from_secs(30);
    let mutex = backend.concurrent("mutex", 1, lock_timeout).unwrap();
    let other = backend.token_bucket("other", 1000.0, 1_000_000).unwrap();

    let holder = block(mutex.check(Some("res"), 1)).unwrap();
    assert!(holder.allowed);
    let holder_lease = holder.lease.expect("a lease");

    let waiter = spawn_waiter(&mutex, "res");
    wait_blocked_clients(&server, 1);
    let clients = server.cli(&["CLIENT", "LIST"]);
    let blpop: Vec<&str> = clients.lines().filter(|l| l.contains("cmd=blpop")).collect();
    assert_eq!(blpop.len(), 1, "one connection blocks in BLPOP:\n{clients}");
    assert!(blpop[0].contains("flags=b"), "it is blocked:\n{clients}");

    // The shared connection is not stalled behind the BLPOP: checks on other keys are answered
    // while the waiter still blocks (an ordering: stalled, they would be answered only once the
    // BLPOP ended, i.e. after the waiter's wait timeout, and the waiter would have finished).
    let start = Instant::now();
    for i in 0..100 {
        let d = block(other.check(Some(&format!("k{i}")), 1)).expect("Redis answers");
        assert!(d.allowed);
    }
    let sequential = start.elapsed();
    let start = Instant::now();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let other = other.clone();
            runtime().spawn(async move { other.check(Some(&format!("c{i}")), 1).await })
        })
        .collect();
    for task in tasks {
        assert!(block(task).unwrap().expect("Redis answers").allowed);
    }
    let concurrent = start.elapsed();
    println!("while a waiter blocks: 100 sequential checks {sequential:?}, 100 concurrent {concurrent:?}");
    // A check of the same mutex from elsewhere is refused, not queued behind the waiter either.
    assert!(!block(mutex.check(Some("res"), 1)).unwrap().allowed);
    assert!(!waiter.is_finished(), "every check was answered while the waiter still waited");
    wait_blocked_clients(&server, 1);

    let released = Instant::now();
    block(mutex.release(Some("res"), &holder_lease)).expect("release");
    let (result, woke) = block(waiter).unwrap();
    let wake = woke.duration_since(released);
    println!("waiter woke {wake:?} after the release (lock_timeout {lock_timeout:?})");
    // Granted, so woken by the release: before its wait timeout, and 30 s before the holder's
    // lease could have been reclaimed. (Wake latency is a figure: `bench-wake` prints it.)
    let granted = result.expect("the waiter gets the slot");
    assert!(granted.allowed);
    let lease = granted.lease.expect("a lease");
    assert!(lease.fencing_token > holder_lease.fencing_token, "fencing tokens increase");
    block(mutex.release(Some("res"), &lease)).unwrap();
}

#[test]
fn concurrent_release_wakes_one_waiter_per_freed_slot() {
    let _serial = serial();
    let server = RedisServer::start();
    let backend = backend(&server.url(), "conc2", FailurePolicy::FailClosed);
    let mutex = backend.concurrent("mutex", 1, Duration::from_secs(30)).unwrap();
    let holder = block(mutex.check(Some("res"), 1)).unwrap().lease.expect("a lease");

    let waiters = vec![spawn_waiter(&mutex, "res"), spawn_waiter(&mutex, "res")];
    wait_blocked_clients(&server, 2);

    let released = Instant::now();
    block(mutex.release(Some("res"), &holder)).unwrap();
    // Exactly one waiter wins the slot; the other goes back to blocking. (Had the release woken
    // nobody, both would end at their wait timeout without the slot, failing the `expect`.)
    let winner = loop {
        if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
            break i;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut waiters = waiters;
    let first = waiters.remove(winner);
    let (result, woke) = block(first).unwrap();
    let first_wake = woke.duration_since(released);
    let lease = result.expect("the first waiter gets the slot").lease.expect("a lease");
    wait_blocked_clients(&server, 1);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiters[0].is_finished(), "the second waiter must keep waiting: the slot is taken");

    let released = Instant::now();
    block(mutex.release(Some("res"), &lease)).unwrap();
    let (result, woke) = block(waiters.remove(0)).unwrap();
    let second_wake = woke.duration_since(released);
    println!("one slot, two waiters: first woke {first_wake:?}, second {second_wake:?} after each release");
    let second = result.expect("the second waiter gets the slot after the second release").lease.unwrap();
    assert!(second.fencing_token > lease.fencing_token);
    block(mutex.release(Some("res"), &second)).unwrap();
}

/// Redis restarts while this process makes no calls (a deploy, a crash and a supervisor restart).
/// Long after it is back, the next calls must be answered by it: the backend must not hand out
/// the shared connection whose server went away.
#[test]
fn first_calls_after_an_idle_restart_are_served_by_redis_fail_closed() {
    idle_restart(FailurePolicy::FailClosed);
}

#[test]
fn first_calls_after_an_idle_restart_are_served_by_redis_fail_open() {
    idle_restart(FailurePolicy::FailOpen);
}

fn idle_restart(policy: FailurePolicy) {
    for style in STYLES {
        idle_restart_with(policy, style);
    }
}

fn idle_restart_with(policy: FailurePolicy, style: Style) {
    let _serial = serial();
    let mut server = RedisServer::start();
    let name = &format!("{}, {}", policy_name(policy), style.name());
    let prefix = format!("idle-{}-{}", policy_name(policy), style.name());
    let backend = backend(&server.url(), &prefix, policy);
    let limiter = backend.window("api", LIMIT, Duration::from_secs(60)).unwrap();
    // Every connection the burst below will use exists before the restart: the blocking calls
    // leave one direct connection per thread in the pool.
    let warm = calls_during_outage(style, &limiter, "warm", Duration::ZERO, 1, 8);
    assert!(warm.iter().all(|c| c.result.as_ref().is_ok_and(|d| d.allowed)), "{name}: Redis is up");

    server.restart();
    // A while, with no call in between (a lower bound: the server has been back this long).
    std::thread::sleep(IDLE_AFTER_RESTART);
    let before = backend.stats();
    // The first calls: a burst, as a busy service would make them.
    let calls = calls_during_outage(style, &limiter, "user", Duration::ZERO, 0, 8);
    let after = backend.stats();
    let failed: Vec<_> = calls.iter().filter_map(|c| c.result.as_ref().err()).collect();
    println!(
        "[{name}] {IDLE_AFTER_RESTART:?} after an idle restart, {} of {} first calls not served by Redis \
         (stats {after:?}), e.g. {:?}",
        total(after) - total(before),
        calls.len(),
        failed.first()
    );
    assert!(failed.is_empty(), "{name}: Redis has been back for {IDLE_AFTER_RESTART:?}, yet calls failed: {failed:?}");
    assert_eq!(after, before, "{name}: every first call after an idle restart must be served by Redis");
    assert_eq!(admissions_in_redis(&server, &prefix, "user"), calls.len() as u64);
}

/// Fencing tokens keep increasing when Redis loses its data (restart without persistence): a
/// lease granted after the restart outranks one granted before it.
#[test]
fn fencing_tokens_increase_across_a_redis_restart() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let backend = backend(&server.url(), "fence", FailurePolicy::FailClosed);
    let mutex = backend.concurrent("mutex", 1, Duration::from_secs(30)).unwrap();
    let before = block(mutex.check(Some("res"), 1)).unwrap().lease.expect("a lease");
    server.restart();
    let (_, after) = await_recovery(Style::Async, &backend, &mutex, "res", "fence");
    let after = after.lease.expect("the restarted Redis lost the old lease and grants a new one");
    assert!(after.fencing_token > before.fencing_token, "{after:?} must outrank {before:?}");
}

/// A waiter blocked in BLPOP when Redis dies does not sit out its wait timeout: it learns at
/// once and answers per policy (fail_closed: an error; fail_open: admitted, the mutex having
/// opted in to its backend's policy with `with_allow_fallback`).
#[test]
fn blocked_waiter_answers_per_policy_when_redis_dies() {
    let _serial = serial();
    for policy in [FailurePolicy::FailClosed, FailurePolicy::FailOpen] {
        let name = policy_name(policy);
        let mut server = RedisServer::start();
        let backend = backend(&server.url(), &format!("dying-{name}"), policy);
        let mutex = backend.concurrent("mutex", 1, Duration::from_secs(30)).unwrap().with_allow_fallback(true).unwrap();
        let _holder = block(mutex.check(Some("res"), 1)).unwrap().lease.expect("a lease");
        let waiter = spawn_waiter(&mutex, "res");
        wait_blocked_clients(&server, 1);
        let killed = Instant::now();
        server.kill();
        let (result, done) = block(waiter).unwrap();
        let took = done.duration_since(killed);
        println!("[{name}] blocked waiter answered {took:?} after Redis died: {result:?}");
        match policy {
            FailurePolicy::FailClosed => {
                let e = result.expect_err("fail_closed: the waiter fails");
                assert!(matches!(e.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout), "{name}: {e:?}");
            }
            _ => assert!(result.expect("fail_open: the waiter is admitted").allowed, "{name}"),
        }
        // An ordering against the waiter's own timer, not a figure: it answered before its wait
        // timeout ended, so it learnt of the death rather than sitting the wait out.
        assert!(took < WAITER_TIMEOUT, "{name}: the waiter sat out its {WAITER_TIMEOUT:?} wait ({took:?})");
    }
}
