//! The concurrent limiter on real Redis, across real OS processes:
//!
//! 1. 200 holders in 8 processes, limit 10: a probe reading the holders ZSET every ~2.5 ms never
//!    sees more than 10 live holders, nor does an exact replay of the ZSET's writes from
//!    `MONITOR`; all 200 complete; the fleet metrics count 200 holds and no overage.
//! 2. SIGKILL 5 of 10 holder processes: their slots come back once their leases pass
//!    lock_timeout (not before), to waiters still inside their wait, and the reclaims are counted.
//! 3. 100 waiters, one release at a time: exactly one waiter wakes per release (no other waiter
//!    even re-checks, but on its own timer). The wake latency is a figure, printed by `bench-wake` (bench/).
//! 4. No slot for the whole wait: `acquire` fails with over-limit at the wait timeout, having
//!    blocked in BLPOP rather than polled.
//! 5. An overrunning holder loses its lease to a waiter: lease lost at release, lower fencing
//!    token, overage and reclaim counted.
//! 6. `limit = 1` as a distributed mutex across 4 processes guarding a non-atomic
//!    read-modify-write: the final count is exact (and the same writes without it lose updates).
//! 7. Tests 3 and 4 (lighter) on a 3-master Redis Cluster.
//!
//! Two more tests show library bugs and fail until they are fixed:
//! `an_extended_lease_released_within_its_extension_is_not_an_overage` (a holder that extends
//! as it should is counted as an overage) and
//! `a_wake_up_delivered_to_a_waiter_that_dies_still_frees_the_slot_for_the_others` (a release's
//! only wake-up can be lost with the waiter it was handed to).
//!
//! Worker processes are this test executable run again with `--exact redis::concurrent_worker`; the
//! role and its parameters come in `RKC_*` environment variables, and workers talk to the
//! parent in `RKC …` lines on stdout (and take commands on stdin). Without `RKC_ROLE`,
//! `concurrent_worker` does nothing. The tests of this file run one at a time (see [`serial`]):
//! they start many processes on a 2-core machine. They assert orderings, never latencies.

use crate::support;

use std::collections::HashSet;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, Decision, ErrorKind, FailurePolicy, Lease, Limiter, RedisConfig, Result};
use support::{RedisCluster, RedisServer, GIVE_UP};

/// The key every test uses (one identity, maximal contention).
const KEY: &str = "res";

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn block<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

fn unique_prefix(label: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{label}{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Calls may take this long (default 200 ms): these tests are about the limiter's semantics, and a
/// first call that connects while the 2 cores are busy with worker processes can exceed 200 ms.
/// The deadline itself is tested in `faults/failures.rs`.
const DEADLINE: Duration = Duration::from_secs(2);

fn backend(url: &str, prefix: &str) -> Backend {
    Backend::redis_with(RedisConfig::new(url).prefix(prefix).deadline(DEADLINE)).expect("a Redis backend")
}

fn cluster_backend(seeds: &[String], prefix: &str) -> Backend {
    Backend::redis_with(RedisConfig::cluster(seeds.iter().cloned()).prefix(prefix).deadline(DEADLINE))
        .expect("a cluster backend")
}

/// A plain (synchronous) connection of the `redis` crate to one server, for probes that must not
/// go through the library under test.
fn raw(server: &RedisServer) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{}", server.port))
        .and_then(|c| c.get_connection())
        .expect("a probe connection")
}

/// Clients blocked over all `servers` (in BLPOP, or held by `CLIENT PAUSE`: `CLIENT LIST` flag
/// `b`), leaving out the backends' background tasks (`ratekeeper-live`), whose metric flushes
/// and registrations a pause holds too.
fn blocked_clients(conns: &mut [redis::Connection]) -> usize {
    conns
        .iter_mut()
        .map(|c| {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(c).expect("CLIENT LIST");
            list.lines()
                .filter(|l| l.split_whitespace().any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('b'))))
                .filter(|l| !l.contains(" name=ratekeeper-live "))
                .count()
        })
        .sum()
}

/// Waits until exactly `n` clients are blocked over `conns` (giving up after [`GIVE_UP`]);
/// returns how long that took.
fn wait_blocked(conns: &mut [redis::Connection], n: usize) -> Duration {
    let start = Instant::now();
    loop {
        let blocked = blocked_clients(conns);
        if blocked == n {
            return start.elapsed();
        }
        assert!(start.elapsed() < GIVE_UP, "expected {n} clients blocked, CLIENT LIST says {blocked}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Calls of `command` (e.g. `evalsha`) the server has run so far.
fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).expect("INFO commandstats");
    support::command_calls(&info, command)
}

/// The server's clock (`TIME`) in microseconds.
fn server_time_us(conn: &mut redis::Connection) -> u64 {
    let (secs, us): (u64, u64) = redis::cmd("TIME").query(conn).expect("TIME");
    secs * 1_000_000 + us
}

/// Scripts run so far over `conns` (EVALSHA, and EVAL after a NOSCRIPT).
/// Limiter script calls (EVALSHA: the scripts are loaded by then); the background task's metric
/// flushes and registrations are EVALs.
fn script_calls(conns: &mut [redis::Connection]) -> u64 {
    conns.iter_mut().map(|c| command_calls(c, "evalsha")).sum()
}

/// xorshift64*: deterministic per seed, good enough to vary hold times.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        lo + self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % (hi - lo + 1)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

// ------------------------------------------------------------------------------------------
// Worker processes.
// ------------------------------------------------------------------------------------------

fn say(line: impl AsRef<str>) {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "RKC {}", line.as_ref()).unwrap();
    out.flush().unwrap();
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent"))
}

fn env_u64(name: &str) -> u64 {
    env(name).parse().unwrap_or_else(|_| panic!("{name} is a number"))
}

/// Lines from the parent on stdin (EOF closes the channel).
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The worker process's entry point; a no-op unless the parent set `RKC_ROLE`.
#[test]
fn concurrent_worker() {
    let Ok(role) = std::env::var("RKC_ROLE") else { return };
    let backend = backend(&env("RKC_URL"), &env("RKC_PREFIX"));
    let limiter = backend
        .concurrent(&env("RKC_NAME"), env_u64("RKC_LIMIT"), Duration::from_millis(env_u64("RKC_LOCK_MS")))
        .expect("a concurrent limiter");
    // Connect and load the script before anything is timed (a peek consumes nothing).
    block(limiter.peek(Some(KEY))).expect("warm-up peek");
    let commands = stdin_lines();
    match role.as_str() {
        "holders" => holders_worker(&limiter, &commands),
        "sticky" => sticky_worker(&limiter, &commands),
        "mutex" => mutex_worker(&limiter, &commands),
        "waiter" => waiter_worker(&limiter),
        other => panic!("unknown role {other}"),
    }
    // Flush this process's metric counts before exiting (the background flush runs once a second).
    block(limiter.fleet_metrics()).expect("flush the metrics");
    say("DONE");
}

/// Test 1: `RKC_TASKS` tasks, each acquiring (waiting), holding 50..=500 ms, releasing.
/// Prints `OK <fencing token> <granted_at µs> <hold ms>` per holder.
fn holders_worker(limiter: &Limiter, commands: &mpsc::Receiver<String>) {
    let tasks = env_u64("RKC_TASKS");
    let seed = env_u64("RKC_SEED");
    let wait = Duration::from_millis(env_u64("RKC_WAIT_MS"));
    say("READY");
    commands.recv().expect("the parent's start signal");
    let lines = block(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let hold = Rng::new(seed * 1_000 + t).range(50, 500);
                    let started = Instant::now();
                    let decision = match limiter.acquire(Some(KEY), 1, Some(wait)).await {
                        Ok(d) => d,
                        Err(e) => return format!("ERR acquire after {:?}: {e}", started.elapsed()),
                    };
                    let Some(lease) = decision.lease else { return "ERR granted without a lease".into() };
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    match limiter.release(Some(KEY), &lease).await {
                        Ok(()) => format!("OK {} {} {hold}", lease.fencing_token, lease.granted_at_micros),
                        Err(e) => format!("ERR release: {e}"),
                    }
                })
            })
            .collect();
        let mut lines = Vec::new();
        for h in handles {
            lines.push(h.await.unwrap_or_else(|e| format!("ERR task: {e}")));
        }
        lines
    });
    for line in lines {
        say(line);
    }
}

/// Test 2: acquires one slot and holds it, extending it every 400 ms, until the parent says
/// `release` (or closes stdin). Prints `LEASE <id> <token> <granted_at>` and
/// `RELEASED ok|<error kind>`; any failed extend prints `EXTEND_ERR`.
fn sticky_worker(limiter: &Limiter, commands: &mpsc::Receiver<String>) {
    let lease = limiter.acquire_blocking(Some(KEY), 1, Some(Duration::from_secs(5))).expect("a slot").lease.unwrap();
    say(format!("LEASE {} {} {}", lease.id, lease.fencing_token, lease.granted_at_micros));
    // Until the parent says `release` or closes stdin.
    while let Err(mpsc::RecvTimeoutError::Timeout) = commands.recv_timeout(Duration::from_millis(400)) {
        if let Err(e) = limiter.extend_blocking(Some(KEY), &lease) {
            say(format!("EXTEND_ERR {e}"));
        }
    }
    match limiter.release_blocking(Some(KEY), &lease) {
        Ok(()) => say("RELEASED ok"),
        Err(e) => say(format!("RELEASED {}", e.kind().as_str())),
    }
}

/// Test 6: `RKC_N` times: take the mutex, read the counter and the last fencing token with GET,
/// pause, write both back with SET (a non-atomic read-modify-write), release. Prints
/// `OK <fencing violations>`.
fn mutex_worker(limiter: &Limiter, commands: &mpsc::Receiver<String>) {
    let n = env_u64("RKC_N");
    let counter = env("RKC_COUNTER");
    let fence = format!("{counter}:fence");
    let mut conn = redis::Client::open(env("RKC_URL")).and_then(|c| c.get_connection()).expect("a connection");
    say("READY");
    commands.recv().expect("the parent's start signal");
    let mut violations = 0;
    for _ in 0..n {
        let lease = limiter.acquire_blocking(Some(KEY), 1, Some(Duration::from_secs(30))).expect("the mutex");
        let lease = lease.lease.expect("a lease");
        let value: Option<u64> = redis::cmd("GET").arg(&counter).query(&mut conn).unwrap();
        let last: Option<u64> = redis::cmd("GET").arg(&fence).query(&mut conn).unwrap();
        if last.is_some_and(|last| last >= lease.fencing_token) {
            violations += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
        let _: () = redis::cmd("SET").arg(&counter).arg(value.unwrap_or(0) + 1).query(&mut conn).unwrap();
        let _: () = redis::cmd("SET").arg(&fence).arg(lease.fencing_token).query(&mut conn).unwrap();
        limiter.release_blocking(Some(KEY), &lease).expect("release the mutex");
    }
    say(format!("OK {violations}"));
}

/// The lost-wake-up test: one `acquire` that waits up to 30 s. Prints `WAITING` before it and
/// `GRANTED` after it.
fn waiter_worker(limiter: &Limiter) {
    say("WAITING");
    let decision = limiter.acquire_blocking(Some(KEY), 1, Some(Duration::from_secs(30))).expect("a slot");
    say(format!("GRANTED {}", decision.lease.unwrap().fencing_token));
}

// ------------------------------------------------------------------------------------------
// The parent side: spawning workers and reading their lines.
// ------------------------------------------------------------------------------------------

/// Worker processes of one test; killed (by pid) on drop if still running.
struct Workers {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    lines: mpsc::Receiver<(usize, String)>,
    backlog: Vec<(usize, String)>,
}

impl Workers {
    fn spawn(
        count: usize,
        role: &str,
        url: &str,
        prefix: &str,
        extra: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Workers {
        let exe = std::env::current_exe().expect("the test executable");
        let (tx, rx) = mpsc::channel();
        let mut children = Vec::new();
        let mut stdins = Vec::new();
        let worker = support::test_name(module_path!(), "concurrent_worker");
        for i in 0..count {
            let mut cmd = Command::new(&exe);
            cmd.args(["--exact", &worker, "--nocapture", "--test-threads=1"])
                .env("RKC_ROLE", role)
                .env("RKC_URL", url)
                .env("RKC_PREFIX", prefix)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            for (name, value) in extra(i) {
                cmd.env(name, value);
            }
            let mut child = cmd.spawn().expect("spawn a worker process");
            let stdout = child.stdout.take().unwrap();
            stdins.push(child.stdin.take());
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    // The harness may have written `test concurrent_worker ... ` before it.
                    if let Some(at) = line.find("RKC ") {
                        let _ = tx.send((i, line[at + 4..].to_owned()));
                    }
                }
                let _ = tx.send((i, "EOF".to_owned()));
            });
            children.push(child);
        }
        Workers { children, stdins, lines: rx, backlog: Vec::new() }
    }

    /// The next line from any worker (lines set aside by [`Workers::each`] first).
    fn next(&mut self, deadline: Instant) -> (usize, String) {
        if !self.backlog.is_empty() {
            return self.backlog.remove(0);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no worker line within the deadline"))
    }

    /// Reads lines until every worker has sent one whose first word is `word`; returns them in
    /// worker order. Other lines are set aside for later calls and [`Workers::unexpected`].
    fn each(&mut self, word: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut got: Vec<Option<String>> = vec![None; self.children.len()];
        let mut rest = Vec::new();
        let matches = |line: &str| line.split(' ').next() == Some(word);
        for (i, line) in std::mem::take(&mut self.backlog) {
            if got[i].is_none() && matches(&line) {
                got[i] = Some(line);
            } else {
                rest.push((i, line));
            }
        }
        while got.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok((i, line)) = self.lines.recv_timeout(left) else {
                panic!("not every worker sent {word} within {timeout:?}; other lines: {rest:?}")
            };
            if got[i].is_none() && matches(&line) {
                got[i] = Some(line);
            } else {
                assert!(
                    line != "EOF" || got[i].is_some(),
                    "worker {i} exited before sending {word}; other lines: {rest:?}"
                );
                rest.push((i, line));
            }
        }
        self.backlog = rest;
        got.into_iter().map(Option::unwrap).collect()
    }

    /// Lines set aside so far, except end-of-output markers.
    fn unexpected(&mut self) -> Vec<(usize, String)> {
        self.backlog.iter().filter(|(_, l)| l != "EOF").cloned().collect()
    }

    fn send(&mut self, i: usize, line: &str) {
        let stdin = self.stdins[i].as_mut().expect("the worker's stdin");
        writeln!(stdin, "{line}").expect("write to a worker");
        stdin.flush().unwrap();
    }

    fn send_all(&mut self, line: &str) {
        for i in 0..self.children.len() {
            self.send(i, line);
        }
    }

    /// SIGSTOP worker `i` (by pid): it hangs, its connections stay open.
    fn stop(&self, i: usize) {
        let pid = self.children[i].id().to_string();
        let status = Command::new("kill").args(["-STOP", &pid]).status().expect("run kill");
        assert!(status.success(), "kill -STOP {pid}");
    }

    /// SIGKILL worker `i` (a crash) and reap it.
    fn kill(&mut self, i: usize) {
        self.children[i].kill().expect("SIGKILL a worker");
        self.children[i].wait().expect("reap a worker");
        self.stdins[i] = None;
    }

    /// Waits for every worker that is still running to exit successfully.
    fn wait_all(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        for (i, child) in self.children.iter_mut().enumerate() {
            self.stdins[i] = None;
            loop {
                match child.try_wait().expect("poll a worker") {
                    Some(status) => {
                        assert!(status.success() || status.code().is_none(), "worker {i} failed: {status}");
                        break;
                    }
                    None => {
                        assert!(Instant::now() < deadline, "worker {i} did not exit");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// 1. 200 holders in 8 processes never exceed the limit.
// ------------------------------------------------------------------------------------------

/// Live holders (score after the server's now) and all holders of every holders ZSET matching
/// ARGV[1], in one atomic read.
const PROBE: &str = r#"
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local live, all = 0, 0
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  live = live + redis.call('ZCOUNT', k, '(' .. now, '+inf')
  all = all + redis.call('ZCARD', k)
end
return {live, all}
"#;

struct ProbeReport {
    samples: usize,
    max_live: i64,
    max_all: i64,
    mean_gap: Duration,
    p99_gap: Duration,
    max_gap: Duration,
    /// How long after the probe started the longest gap ended.
    max_gap_at: Duration,
}

/// Samples the holders of `pattern` every ~2 ms on its own connection until `stop`; returns once
/// the first sample is taken (the script loaded), so that no grant precedes the probe.
fn spawn_probe(server: &RedisServer, pattern: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<ProbeReport> {
    let mut conn = raw(server);
    let script = redis::Script::new(PROBE);
    let (_, first): (i64, i64) = script.arg(&pattern).invoke(&mut conn).expect("probe");
    assert_eq!(first, 0, "nobody holds a slot before the start");
    std::thread::spawn(move || {
        let (mut max_live, mut max_all) = (0i64, 0i64);
        let mut gaps = Vec::new();
        let (mut max_gap, mut max_gap_at) = (Duration::ZERO, Duration::ZERO);
        let started = Instant::now();
        let mut last = started;
        while !stop.load(Ordering::Relaxed) {
            let (live, all): (i64, i64) = script.arg(&pattern).invoke(&mut conn).expect("probe");
            let now = Instant::now();
            if now - last > max_gap {
                (max_gap, max_gap_at) = (now - last, now - started);
            }
            gaps.push(now - last);
            last = now;
            max_live = max_live.max(live);
            max_all = max_all.max(all);
            std::thread::sleep(Duration::from_millis(2));
        }
        let samples = gaps.len();
        let mean_gap = started.elapsed() / samples.max(1) as u32;
        gaps.sort();
        let p99_gap = percentile(&gaps, 0.99);
        ProbeReport { samples, max_live, max_all, mean_gap, p99_gap, max_gap, max_gap_at }
    })
}

/// An exact witness besides the sampling probe: `redis-cli monitor` reports every command the
/// scripts run, in execution order, so replaying the writes to the holders ZSET (ZADD of a new
/// lease, ZREM at release, ZREMRANGEBYSCORE at reclaim) gives the holder count after every change.
struct Monitor {
    child: Child,
    reader: Option<std::thread::JoinHandle<Vec<String>>>,
    end: mpsc::Receiver<()>,
}

/// What the MONITOR replay found.
#[derive(Debug, Default)]
struct Replay {
    grants: u64,
    releases: u64,
    reclaims: u64,
    max_holders: i64,
    final_holders: i64,
}

const MONITOR_END: &str = "rkc-monitor-end";

impl Monitor {
    /// Starts monitoring `server`, keeping the script writes to keys containing `needle`.
    fn start(server: &RedisServer, needle: String) -> Monitor {
        Monitor::keeping(server, move |line| {
            (line.contains("[0 lua] \"ZADD\"") || line.contains("[0 lua] \"ZREM")) && line.contains(&needle)
        })
    }

    /// Starts monitoring `server`, keeping the lines `keep` selects.
    fn keeping(server: &RedisServer, keep: impl Fn(&str) -> bool + Send + 'static) -> Monitor {
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "monitor"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-cli monitor");
        let stdout = child.stdout.take().unwrap();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (end_tx, end) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut kept = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line == "OK" {
                    let _ = ready_tx.send(());
                } else if line.contains(MONITOR_END) {
                    let _ = end_tx.send(());
                } else if keep(&line) {
                    kept.push(line);
                }
            }
            kept
        });
        ready_rx.recv_timeout(GIVE_UP).expect("MONITOR starts");
        Monitor { child, reader: Some(reader), end }
    }

    /// Stops after every command up to now has been reported; returns the lines kept.
    fn lines(mut self, conn: &mut redis::Connection) -> Vec<String> {
        let _: String = redis::cmd("ECHO").arg(MONITOR_END).query(conn).expect("ECHO");
        self.end.recv_timeout(GIVE_UP).expect("MONITOR reports everything");
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader.take().unwrap().join().expect("the MONITOR reader")
    }

    /// Stops after every command up to now has been reported, and replays the holders' writes.
    fn finish(self, conn: &mut redis::Connection) -> Replay {
        let lines = self.lines(conn);
        let mut replay = Replay::default();
        let mut holders = 0i64;
        for line in &lines {
            let command = line.split("[0 lua] ").nth(1).unwrap_or_default();
            if command.starts_with("\"ZADD\"") && !command.contains("\"XX\"") {
                replay.grants += 1;
                holders += 1;
            } else if command.starts_with("\"ZREM\"") {
                replay.releases += 1;
                holders -= 1;
            } else if command.starts_with("\"ZREMRANGEBYSCORE\"") {
                replay.reclaims += 1;
            }
            replay.max_holders = replay.max_holders.max(holders);
        }
        replay.final_holders = holders;
        replay
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn two_hundred_holders_in_eight_processes_never_exceed_the_limit() {
    let _serial = serial();
    const PROCESSES: usize = 8;
    const PER_PROCESS: usize = 25;
    const LIMIT: i64 = 10;
    let server = RedisServer::start();
    let prefix = unique_prefix("c1");
    let name = "fleet";
    let lock = Duration::from_secs(10);
    let mut workers = Workers::spawn(PROCESSES, "holders", &server.url(), &prefix, |i| {
        vec![
            ("RKC_NAME", name.to_owned()),
            ("RKC_LIMIT", LIMIT.to_string()),
            ("RKC_LOCK_MS", lock.as_millis().to_string()),
            ("RKC_TASKS", PER_PROCESS.to_string()),
            ("RKC_SEED", (i + 1).to_string()),
            ("RKC_WAIT_MS", "30000".to_owned()),
        ]
    });
    workers.each("READY", Duration::from_secs(20));

    let monitor = Monitor::start(&server, format!(":concurrent:{name}:h:"));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = spawn_probe(&server, format!("{prefix}:*:concurrent:{name}:h:*"), stop.clone());
    let started = Instant::now();
    workers.send_all("go");
    workers.each("DONE", Duration::from_secs(40));
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let probe = probe.join().expect("the probe");
    let replay = monitor.finish(&mut raw(&server));
    workers.wait_all(Duration::from_secs(10));
    let results = workers.unexpected();

    let errors: Vec<_> = results.iter().filter(|(_, l)| !l.starts_with("OK ")).collect();
    assert!(errors.is_empty(), "every holder acquires and releases: {errors:?}");
    let oks: Vec<Vec<u64>> =
        results.iter().map(|(_, l)| l.split(' ').skip(1).map(|f| f.parse().unwrap()).collect()).collect();
    assert_eq!(oks.len(), PROCESSES * PER_PROCESS, "all 200 holders complete");
    let tokens: HashSet<u64> = oks.iter().map(|f| f[0]).collect();
    assert_eq!(tokens.len(), oks.len(), "every grant has its own fencing token");
    let held_ms: u64 = oks.iter().map(|f| f[2]).sum();

    println!(
        "200 holders, limit {LIMIT}, 8 processes: {elapsed:?}; probe: {} samples, gap mean {:?} p99 {:?} \
         max {:?} ({:?} into the run); max live holders {}, max holders (live or overdue) {}",
        probe.samples, probe.mean_gap, probe.p99_gap, probe.max_gap, probe.max_gap_at, probe.max_live, probe.max_all
    );
    assert!(probe.max_live <= LIMIT, "the probe saw {} live holders (limit {LIMIT})", probe.max_live);
    assert!(probe.max_all <= LIMIT, "the probe saw {} holders (limit {LIMIT})", probe.max_all);
    assert_eq!(probe.max_live, LIMIT, "the limit was actually reached (otherwise the probe proves nothing)");
    // The probe may be descheduled on a busy machine; the MONITOR replay misses nothing.
    println!("MONITOR replay of the holders ZSET: {replay:?}");
    assert_eq!(replay.max_holders, LIMIT, "most holders at any moment, by the MONITOR replay: {replay:?}");
    assert_eq!((replay.grants, replay.releases, replay.reclaims, replay.final_holders), (200, 200, 0, 0), "{replay:?}");
    // How long 200 holds took through 10 slots is a figure (printed above), not asserted.

    let fleet = block(backend(&server.url(), &prefix).concurrent(name, LIMIT as u64, lock).unwrap().fleet_metrics())
        .expect("fleet metrics");
    println!("fleet metrics: {fleet:?}");
    assert_eq!(fleet.held, 200, "{fleet:?}");
    assert_eq!(fleet.overages, 0, "{fleet:?}");
    assert_eq!(fleet.reclaimed, 0, "{fleet:?}");
    assert_eq!(fleet.immediate + fleet.waited, 200, "{fleet:?}");
    assert!(fleet.waited >= 190 - LIMIT as u64, "most holders had to wait: {fleet:?}");
    assert!(fleet.held_time >= Duration::from_millis(held_ms), "held_time covers every hold: {fleet:?}");
}

// ------------------------------------------------------------------------------------------
// 2. Crashed holders' slots come back after lock_timeout.
// ------------------------------------------------------------------------------------------

#[test]
fn slots_of_sigkilled_holders_are_reclaimed_after_lock_timeout() {
    let _serial = serial();
    const LIMIT: u64 = 10;
    const KILLED: usize = 5;
    let lock = Duration::from_secs(2);
    let server = RedisServer::start();
    let prefix = unique_prefix("c2");
    let name = "crash";
    let mut workers = Workers::spawn(LIMIT as usize, "sticky", &server.url(), &prefix, |_| {
        vec![
            ("RKC_NAME", name.to_owned()),
            ("RKC_LIMIT", LIMIT.to_string()),
            ("RKC_LOCK_MS", lock.as_millis().to_string()),
        ]
    });
    let leases: Vec<Lease> = workers
        .each("LEASE", Duration::from_secs(20))
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Lease::from_parts(f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect();
    let limiter = backend(&server.url(), &prefix).concurrent(name, LIMIT, lock).unwrap();
    assert!(!block(limiter.check(Some(KEY), 1)).unwrap().allowed, "10 processes hold the 10 slots");

    let mut probe = raw(&server);
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..KILLED {
        workers.kill(i);
    }
    let killed_at = Instant::now();
    let killed_at_us = server_time_us(&mut probe);
    // The dead processes' leases are still live: nothing is free yet.
    assert!(!block(limiter.check(Some(KEY), 1)).unwrap().allowed, "no slot is free right after the kill");

    let acquirers: Vec<_> = (0..KILLED)
        .map(|_| {
            let limiter = limiter.clone();
            runtime().spawn(async move {
                let result = limiter.acquire(Some(KEY), 1, Some(Duration::from_secs(5))).await;
                (result, Instant::now())
            })
        })
        .collect();
    let mut grants = Vec::new();
    let mut recovered = Duration::ZERO;
    for task in acquirers {
        let (result, at) = block(task).unwrap();
        let lease = result.expect("a dead holder's slot comes back").lease.unwrap();
        grants.push(lease);
        recovered = recovered.max(at - killed_at);
    }
    let dead = &leases[..KILLED];
    let mut dead_expiries: Vec<u64> = dead.iter().map(|l| l.granted_at_micros + lock.as_micros() as u64).collect();
    dead_expiries.sort_unstable();
    let mut granted_at: Vec<u64> = grants.iter().map(|l| l.granted_at_micros).collect();
    granted_at.sort_unstable();
    let lags: Vec<i64> = granted_at.iter().zip(&dead_expiries).map(|(&g, &e)| g as i64 - e as i64).collect();
    let held_before_kill: Vec<u64> = dead.iter().map(|l| (killed_at_us - l.granted_at_micros) / 1000).collect();
    println!(
        "SIGKILL 5 of 10 holders (lock_timeout {lock:?}) {held_before_kill:?} ms after their grants: all 5 slots \
         back {recovered:?} after the kill ({:.3} s by the server); each new grant came {:?} µs after the \
         matching dead lease expired",
        (granted_at[KILLED - 1] - killed_at_us) as f64 / 1e6,
        lags
    );
    // Orderings: every acquirer was granted inside its 5 s wait (the `expect` above), i.e. the
    // slots came back to waiters rather than after they gave up, and the k-th new grant came
    // only once the k-th dead lease was overdue (the survivors keep theirs).
    for (k, lag) in lags.iter().enumerate() {
        assert!(*lag >= 0, "grant #{k} came {} µs before dead lease #{k} expired", -lag);
    }
    let max_dead_token = dead.iter().map(|l| l.fencing_token).max().unwrap();
    assert!(grants.iter().all(|l| l.fencing_token > max_dead_token), "new grants carry higher fencing tokens");
    // The survivors still hold theirs (extended), so the limiter is full again.
    assert!(!block(limiter.check(Some(KEY), 1)).unwrap().allowed, "5 survivors + 5 reclaimed slots = full");
    assert_eq!(limiter.metrics().reclaimed, KILLED as u64, "{:?}", limiter.metrics());

    for lease in &grants {
        block(limiter.release(Some(KEY), lease)).expect("release a reclaimed slot");
    }
    for i in KILLED..LIMIT as usize {
        workers.send(i, "release");
    }
    let mut released = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut done = 0;
    while done < LIMIT as usize - KILLED {
        let (i, line) = workers.next(deadline);
        match line.as_str() {
            "RELEASED ok" => released += 1,
            "DONE" => done += 1,
            "EOF" => {}
            other => panic!("survivor {i}: {other}"),
        }
    }
    workers.wait_all(Duration::from_secs(10));
    assert_eq!(released, LIMIT as usize - KILLED, "the survivors' extended leases were never reclaimed");
    let fleet = block(limiter.fleet_metrics()).unwrap();
    println!("fleet metrics after the crash: {fleet:?}");
    assert_eq!(fleet.reclaimed, KILLED as u64, "{fleet:?}");
}

// ------------------------------------------------------------------------------------------
// 3. One release wakes exactly one of 100 waiters, within milliseconds.
// ------------------------------------------------------------------------------------------

type Granted = (usize, Result<Decision>, Instant);

/// A blocked waiter also re-checks on its own, without any release: after the backend's
/// `max_block()` (1.5 s plus jitter), timed from after its previous check's reply. A waiter's
/// check that comes sooner than this after its own previous one (by the server's clock, less a
/// margin for that clock against the client's timer) was caused by a release's wake-up.
const OWN_RECHECK_AFTER: Duration = Duration::from_millis(1_490);

/// `ECHO`ed on every server before each release, so that MONITOR shows where a round starts.
const ROUND_MARKER: &str = "rkc-round-";

/// A MONITOR line's server time (seconds) and arguments.
fn monitor_args(line: &str) -> Option<(f64, Vec<&str>)> {
    let (time, rest) = line.split_once(' ')?;
    let (_, command) = rest.split_once("] ")?;
    let command = command.strip_prefix('"')?.strip_suffix('"')?;
    Some((time.parse().ok()?, command.split("\" \"").collect()))
}

/// The waiters a script call checks for: ARGV[6] of each `check` in it, alone or in a batch
/// (`batch-same`: count, keys and arguments per call, then the calls; `batch-shared`: the same
/// with the one call's arguments that every call has; `batch`: count, keys and arguments of each
/// call, then the calls). A check that will not wait (the first holder's) has none.
fn waiters_checked<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let script = args.first().is_some_and(|c| c.eq_ignore_ascii_case("evalsha") || c.eq_ignore_ascii_case("eval"));
    let argv = match args.get(2).and_then(|n| n.parse::<usize>().ok()) {
        Some(keys) if script => args.get(3 + keys..).unwrap_or_default(),
        _ => return Vec::new(),
    };
    let number = |i: usize| argv.get(i).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    let calls: Vec<&[&str]> = match argv.first() {
        Some(&"batch-same") => argv.get(4..).unwrap_or_default().chunks(number(3).max(1)).take(number(1)).collect(),
        Some(&"batch-shared") => vec![argv.get(4..).unwrap_or_default(); number(1)],
        Some(&"batch") => {
            let mut at = 2 * number(1) + 2;
            (0..number(1))
                .map(|i| {
                    let call = argv.get(at..at + number(3 + 2 * i)).unwrap_or_default();
                    at += number(3 + 2 * i);
                    call
                })
                .collect()
        }
        _ => vec![argv],
    };
    calls
        .into_iter()
        .filter(|call| call.first() == Some(&"check"))
        .filter_map(|call| call.get(5).copied().filter(|waiter| !waiter.is_empty()))
        .collect()
}

/// Per round, from one server's MONITOR lines: the waiters' checks a release's wake-up caused
/// (sooner than [`OWN_RECHECK_AFTER`] after that waiter's previous check), and those that may be
/// a waiter's own re-check.
fn checks_per_round(lines: &[String], rounds: usize) -> Vec<(usize, usize)> {
    let mut last_check: std::collections::HashMap<&str, f64> = std::collections::HashMap::new();
    let mut per_round = vec![(0, 0); rounds];
    let mut round = None;
    for line in lines {
        let Some((at, args)) = monitor_args(line) else { continue };
        if let Some(r) = args.get(1).and_then(|a| a.strip_prefix(ROUND_MARKER)) {
            round = r.parse::<usize>().ok();
            continue;
        }
        for waiter in waiters_checked(&args) {
            let previous = last_check.insert(waiter, at);
            let Some(round) = round else { continue };
            match previous {
                Some(previous) if at - previous >= OWN_RECHECK_AFTER.as_secs_f64() => per_round[round].1 += 1,
                _ => per_round[round].0 += 1,
            }
        }
    }
    per_round
}

/// `waiters` tasks wait on a full `limit = 1` limiter; `rounds` times the holder releases and
/// exactly one waiter must take the slot, the others staying blocked; a release makes no other
/// waiter re-check (by MONITOR on `servers`: waiters also re-check on their own timer, which a
/// loaded machine reaches before the rounds end). Returns the wake latencies (release call to
/// the winner's grant).
fn one_release_wakes_one_waiter(
    limiter: &Limiter,
    servers: &[&RedisServer],
    probes: &mut [redis::Connection],
    waiters: usize,
    rounds: usize,
) -> Vec<Duration> {
    let monitors: Vec<Monitor> = servers
        .iter()
        .map(|server| Monitor::keeping(server, |line| line.contains("\"check\"") || line.contains(ROUND_MARKER)))
        .collect();
    let mut held = block(limiter.check(Some(KEY), 1)).unwrap().lease.expect("the first holder");
    let (tx, rx) = mpsc::channel::<Granted>();
    let tasks: Vec<_> = (0..waiters)
        .map(|i| {
            let (limiter, tx) = (limiter.clone(), tx.clone());
            runtime().spawn(async move {
                let result = limiter.acquire(Some(KEY), 1, Some(Duration::from_secs(60))).await;
                let _ = tx.send((i, result, Instant::now()));
            })
        })
        .collect();
    let blocked_in = wait_blocked(probes, waiters);
    println!("{waiters} waiters blocked in BLPOP after {blocked_in:?}");
    let mut latencies = Vec::new();
    let mut winners = HashSet::new();
    for round in 0..rounds {
        for probe in probes.iter_mut() {
            let _: String = redis::cmd("ECHO").arg(format!("{ROUND_MARKER}{round}")).query(probe).expect("ECHO");
        }
        let released = Instant::now();
        block(limiter.release(Some(KEY), &held)).expect("release");
        let (winner, result, at) = rx
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_else(|_| panic!("round {round}: no waiter woke within 2 s of the release"));
        latencies.push(at - released);
        let lease = result.expect("the woken waiter gets the slot").lease.unwrap();
        assert!(lease.fencing_token > held.fencing_token, "fencing tokens increase");
        assert!(winners.insert(winner), "waiter {winner} won twice");
        held = lease;
        // Exactly one: the others go back to (or never left) BLPOP and nobody else is granted.
        wait_blocked(probes, waiters - round - 1);
        if let Ok((other, result, _)) = rx.recv_timeout(Duration::from_millis(20)) {
            panic!("round {round}: waiter {other} was woken too ({:?}) by a single release", result.map(|d| d.allowed));
        }
    }
    let finished = tasks.iter().filter(|t| t.is_finished()).count();
    assert_eq!(finished, rounds, "exactly one waiter per release finished");
    // Nobody else even woke up spuriously: a release causes one check (the winner's, or that of
    // a waiter that found the slot taken by another's own re-check and went back to wait). A
    // wake-up may be acted on after the next release on a loaded machine, so two consecutive
    // releases cause at most two; unloaded, every round has exactly its winner's.
    let mut per_round = vec![(0, 0); rounds];
    for (monitor, probe) in monitors.into_iter().zip(probes.iter_mut()) {
        for (total, (woken, own)) in per_round.iter_mut().zip(checks_per_round(&monitor.lines(probe), rounds)) {
            *total = (total.0 + woken, total.1 + own);
        }
    }
    println!("waiters' checks per round (after a release's wake-up, maybe on their own timer): {per_round:?}");
    for (round, &(woken, own)) in per_round.iter().enumerate() {
        assert!(woken + own >= 1, "round {round}: the winner's check is missing from MONITOR: {per_round:?}");
        // Before the first release nothing was pending: it alone may cause one.
        let before = round.checked_sub(1).map_or(1, |r| per_round[r].0);
        assert!(
            before + woken <= 2,
            "round {round}: {woken} waiters re-checked after the release ({before} after the one before): \
             {per_round:?}"
        );
    }
    for task in &tasks {
        task.abort();
    }
    block(limiter.release(Some(KEY), &held)).expect("release the last holder");
    latencies
}

/// Prints the wake latencies (informational: the figure belongs to `bench-wake`).
fn report_wakes(what: &str, latencies: &[Duration]) {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let p99 = percentile(&sorted, 0.99);
    println!(
        "{what}: {} rounds, wake latency p50 {:?}, p99 {p99:?}, max {:?}",
        sorted.len(),
        percentile(&sorted, 0.5),
        sorted[sorted.len() - 1]
    );
}

#[test]
fn one_release_wakes_exactly_one_of_a_hundred_waiters() {
    let _serial = serial();
    let server = RedisServer::start();
    let limiter = backend(&server.url(), &unique_prefix("c3")).concurrent("wake", 1, Duration::from_secs(60)).unwrap();
    let latencies = one_release_wakes_one_waiter(&limiter, &[&server], &mut [raw(&server)], 100, 20);
    report_wakes("standalone, 100 waiters", &latencies);
    let m = limiter.metrics();
    assert_eq!((m.held, m.immediate, m.waited), (21, 1, 20), "{m:?}");
}

/// A release's wake-up goes to the longest-blocked waiter. If that waiter's process hangs and dies
/// before acting on it (here: SIGSTOP, release, SIGKILL; in async code, an `acquire` future
/// dropped as its BLPOP reply arrives), the slot is free but no other waiter is told.
#[test]
fn a_wake_up_delivered_to_a_waiter_that_dies_still_frees_the_slot_for_the_others() {
    let _serial = serial();
    let server = RedisServer::start();
    let prefix = unique_prefix("c3x");
    let limiter = backend(&server.url(), &prefix).concurrent("handoff", 1, Duration::from_secs(30)).unwrap();
    let mut probes = [raw(&server)];
    let holder = block(limiter.check(Some(KEY), 1)).unwrap().lease.expect("the holder");
    // A waiter in another process blocks first (Redis serves blocked clients first come, first
    // served)...
    let mut workers = Workers::spawn(1, "waiter", &server.url(), &prefix, |_| {
        vec![("RKC_NAME", "handoff".to_owned()), ("RKC_LIMIT", "1".to_owned()), ("RKC_LOCK_MS", "30000".to_owned())]
    });
    workers.each("WAITING", Duration::from_secs(20));
    wait_blocked(&mut probes, 1);
    // ...then one in this process, willing to wait long: without a remedy it would sit out all of it.
    let wait = Duration::from_secs(10);
    let waiter = {
        let limiter = limiter.clone();
        runtime().spawn(async move {
            let result = limiter.acquire(Some(KEY), 1, Some(wait)).await;
            (result, Instant::now())
        })
    };
    wait_blocked(&mut probes, 2);

    workers.stop(0);
    let released = Instant::now();
    block(limiter.release(Some(KEY), &holder)).expect("release");
    // Redis hands the wake-up to the stopped process (the reply waits in its socket)...
    wait_blocked(&mut probes, 1);
    // ...which dies without ever reading it.
    workers.kill(0);
    std::thread::sleep(Duration::from_millis(300));
    let idle = if waiter.is_finished() { None } else { Some(block(limiter.peek(Some(KEY))).unwrap().remaining) };
    let (result, at) = block(waiter).unwrap();
    let lease = result.expect("the waiter gets the slot in the end").lease.unwrap();
    let late = at - released;
    println!(
        "release with the first waiter dead: the live waiter got the slot {late:?} after the release \
         (wait_timeout {wait:?}); 300 ms after the death: {}",
        match idle {
            Some(remaining) => format!("still waiting while peek said remaining = {remaining}"),
            None => "already served".to_owned(),
        }
    );
    // Nothing can tell that a woken process died before re-checking; every blocked waiter
    // re-checks on its own after at most 2.5 s (the backend's max_block()), so the slot is found then.
    assert!(
        late < Duration::from_millis(3_000),
        "a slot sat free for {late:?} while a waiter waited: the release's only wake-up went to a waiter \
         that died, and the live waiter did not re-check within the 2.5 s safety bound"
    );
    block(limiter.release(Some(KEY), &lease)).unwrap();
}

// ------------------------------------------------------------------------------------------
// 4. No slot for the whole wait: over-limit at the wait timeout, without polling.
// ------------------------------------------------------------------------------------------

/// `wait` is the limiter's wait timeout; `explicit` passes it to `acquire` rather than relying on
/// the limiter's default (`with_wait_timeout`).
fn over_limit_at_the_wait_timeout(limiter: &Limiter, probes: &mut [redis::Connection], wait: Duration, explicit: bool) {
    let lock = Duration::from_secs(30);
    let holder = block(limiter.check(Some(KEY), 1)).unwrap().lease.expect("the holder");
    // The holder's metric counts are flushed now: a flush is a script call too (metrics.lua),
    // and none is due during the wait (a refused check counts nothing).
    block(limiter.fleet_metrics()).unwrap();
    let scripts_before: u64 = script_calls(probes);
    let started_us = server_time_us(&mut probes[0]);
    let started = Instant::now();
    let waiter = {
        let limiter = limiter.clone();
        runtime().spawn(async move { limiter.acquire(Some(KEY), 1, explicit.then_some(wait)).await })
    };
    wait_blocked(probes, 1);
    let error = block(waiter).unwrap().expect_err("no slot was free for the whole wait");
    let took = started.elapsed();
    let scripts = script_calls(probes) - scripts_before;
    assert_eq!(error.kind(), ErrorKind::OverLimit, "{error}");
    // retry_after is exact (the holder's expiry minus the refusing check's server time), which
    // dates the refusal by the server's clock, free of this thread's scheduling.
    let retry = error.retry_after().expect("over-limit carries retry_after");
    let refused_us = holder.granted_at_micros + lock.as_micros() as u64 - retry.as_micros() as u64;
    let refused_after = Duration::from_micros(refused_us.saturating_sub(started_us));
    println!(
        "acquire with wait_timeout {wait:?} failed with {error}: refused {refused_after:?} after the call by the \
         server's clock, returned after {took:?}; {scripts} script calls"
    );
    // Not before the wait timeout (lower bounds), and at it rather than when a slot freed: the
    // refusal came while the holder's lease was still live (an ordering: retry_after > 0).
    let early = wait - Duration::from_millis(100);
    assert!(refused_after >= early, "refused {refused_after:?} after the call, before its wait timeout {wait:?}");
    assert!(took >= early, "returned after {took:?}, before the wait timeout {wait:?}");
    assert!(retry > Duration::ZERO, "refused at the wait timeout, while the holder's lease was live");
    // Not polling: one refused check, one after the BLPOP timed out (plus a spare).
    assert!(scripts <= 3, "{scripts} script calls while waiting {wait:?}");
    // The waiter returns on its own exact timer; its BLPOP ends at Redis's (checked ~10 times a
    // second) moments later, and must not linger.
    wait_blocked(probes, 0);
    block(limiter.release(Some(KEY), &holder)).expect("the holder still holds");
}

#[test]
fn acquire_fails_with_over_limit_at_the_wait_timeout() {
    let _serial = serial();
    let server = RedisServer::start();
    let limiter = backend(&server.url(), &unique_prefix("c4")).concurrent("full", 1, Duration::from_secs(30)).unwrap();
    over_limit_at_the_wait_timeout(&limiter, &mut [raw(&server)], Duration::from_secs(2), true);
}

// ------------------------------------------------------------------------------------------
// 5. An overrunning holder.
// ------------------------------------------------------------------------------------------

#[test]
fn an_overrunning_holder_is_reclaimed_loses_its_lease_and_has_the_lower_token() {
    let _serial = serial();
    let server = RedisServer::start();
    let prefix = unique_prefix("c5");
    let lock = Duration::from_secs(1);
    // Two backends: each limiter object keeps its own in-process metrics.
    let a = backend(&server.url(), &prefix).concurrent("overrun", 1, lock).unwrap();
    let b = backend(&server.url(), &prefix).concurrent("overrun", 1, lock).unwrap();
    let lease_a = block(a.check(Some(KEY), 1)).unwrap().lease.expect("A holds");
    let a_started = Instant::now();
    let waiter = {
        let b = b.clone();
        runtime().spawn(async move {
            let result = b.acquire(Some(KEY), 1, Some(Duration::from_secs(3))).await;
            (result, Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(!waiter.is_finished(), "B waits while A's lease is live");
    std::thread::sleep(Duration::from_millis(1_000));
    let (result, b_at) = block(waiter).unwrap();
    let lease_b = result.expect("B reclaims A's overdue slot").lease.unwrap();
    let b_wait = b_at - a_started;

    let lost = block(a.release(Some(KEY), &lease_a)).expect_err("A's lease was reclaimed");
    println!(
        "A (token {}) overran lock_timeout {lock:?}; B (token {}) got the slot {b_wait:?} after A's grant \
         ({} µs by the server); A's release: {lost}",
        lease_a.fencing_token,
        lease_b.fencing_token,
        lease_b.granted_at_micros - lease_a.granted_at_micros
    );
    assert_eq!(lost.kind(), ErrorKind::LeaseLost, "{lost}");
    assert!(lease_a.fencing_token < lease_b.fencing_token);
    assert!(lease_b.granted_at_micros >= lease_a.granted_at_micros + lock.as_micros() as u64, "B came too early");
    // And B got it inside its own 3 s wait (the `expect` above), i.e. it was woken to reclaim.
    block(b.release(Some(KEY), &lease_b)).expect("B releases in time");

    let (ma, mb) = (a.metrics(), b.metrics());
    println!("A's metrics {ma:?}\nB's metrics {mb:?}");
    assert_eq!((ma.held, ma.overages, ma.reclaimed), (1, 1, 0), "A overran: {ma:?}");
    assert_eq!((mb.held, mb.waited, mb.overages, mb.reclaimed), (1, 1, 0, 1), "B reclaimed A's slot: {mb:?}");
    block(a.fleet_metrics()).unwrap();
    let fleet = block(b.fleet_metrics()).unwrap();
    assert_eq!((fleet.held, fleet.overages, fleet.reclaimed), (2, 1, 1), "{fleet:?}");
}

#[test]
fn an_extended_lease_released_within_its_extension_is_not_an_overage() {
    let _serial = serial();
    let server = RedisServer::start();
    let lock = Duration::from_secs(1);
    let limiter = backend(&server.url(), &unique_prefix("c5x")).concurrent("long", 1, lock).unwrap();
    let lease = block(limiter.check(Some(KEY), 1)).unwrap().lease.expect("a lease");
    std::thread::sleep(Duration::from_millis(700));
    block(limiter.extend(Some(KEY), &lease)).expect("extend within lock_timeout");
    std::thread::sleep(Duration::from_millis(700));
    // 1.4 s after the grant, 0.7 s after the extension: the lease is still held...
    assert!(!block(limiter.check(Some(KEY), 1)).unwrap().allowed, "the extended lease is not reclaimable");
    block(limiter.release(Some(KEY), &lease)).expect("the extended lease is still held");
    // ...so the block did not outrun its lease: Sidekiq's "took longer than lock_timeout, this is
    // bad" must not fire for a holder that extended as it should.
    let m = limiter.metrics();
    println!("metrics after an extended 1.4 s hold with lock_timeout {lock:?}: {m:?}");
    assert_eq!(m.overages, 0, "a properly extended lease was counted as an overage: {m:?}");
}

// ------------------------------------------------------------------------------------------
// 6. limit = 1 is a distributed mutex.
// ------------------------------------------------------------------------------------------

#[test]
fn limit_one_is_a_distributed_mutex_across_four_processes() {
    let _serial = serial();
    const PROCESSES: usize = 4;
    const N: u64 = 30;
    let server = RedisServer::start();
    let prefix = unique_prefix("c6");
    let counter = format!("{prefix}-counter");

    // Control: the same read-modify-write without the mutex loses updates, so the exact final
    // count below is evidence of mutual exclusion.
    let control = format!("{prefix}-control");
    let threads: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let mut conn = raw(&server);
            let control = control.clone();
            std::thread::spawn(move || {
                for _ in 0..N {
                    let v: Option<u64> = redis::cmd("GET").arg(&control).query(&mut conn).unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                    let _: () = redis::cmd("SET").arg(&control).arg(v.unwrap_or(0) + 1).query(&mut conn).unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let unlocked: u64 = server.cli(&["GET", &control]).parse().unwrap();
    assert!(unlocked < PROCESSES as u64 * N, "without the mutex updates are lost ({unlocked})");

    let mut workers = Workers::spawn(PROCESSES, "mutex", &server.url(), &prefix, |_| {
        vec![
            ("RKC_NAME", "mutex".to_owned()),
            ("RKC_LIMIT", "1".to_owned()),
            ("RKC_LOCK_MS", "10000".to_owned()),
            ("RKC_N", N.to_string()),
            ("RKC_COUNTER", counter.clone()),
        ]
    });
    workers.each("READY", Duration::from_secs(20));
    let started = Instant::now();
    workers.send_all("go");
    let oks = workers.each("OK", Duration::from_secs(30));
    let elapsed = started.elapsed();
    workers.each("DONE", Duration::from_secs(10));
    workers.wait_all(Duration::from_secs(10));
    let other = workers.unexpected();
    assert!(other.is_empty(), "unexpected worker lines: {other:?}");
    let violations: u64 = oks.iter().map(|l| l[3..].parse::<u64>().unwrap()).sum();
    let count: u64 = server.cli(&["GET", &counter]).parse().unwrap();
    println!(
        "mutex across {PROCESSES} processes: counter {count} (expected {}), {violations} fencing violations, \
         {elapsed:?}; without the mutex: {unlocked}",
        PROCESSES as u64 * N
    );
    assert_eq!(count, PROCESSES as u64 * N, "no increment was lost under the mutex");
    assert_eq!(violations, 0, "each holder saw only lower fencing tokens written before it");
    let fleet =
        block(backend(&server.url(), &prefix).concurrent("mutex", 1, Duration::from_secs(10)).unwrap().fleet_metrics())
            .unwrap();
    assert_eq!((fleet.held, fleet.overages, fleet.reclaimed), (PROCESSES as u64 * N, 0, 0), "{fleet:?}");
}

// ------------------------------------------------------------------------------------------
// 7. The same on a 3-master Redis Cluster.
// ------------------------------------------------------------------------------------------

#[test]
fn cluster_wakes_one_waiter_per_release_and_fails_over_limit_at_the_wait_timeout() {
    let _serial = serial();
    let cluster = RedisCluster::start();
    let backend = cluster_backend(&cluster.seeds(), &unique_prefix("c7"));
    let mut probes: Vec<redis::Connection> = cluster.nodes.iter().map(raw).collect();

    let wake = backend.concurrent("wake", 1, Duration::from_secs(60)).unwrap();
    let latencies = one_release_wakes_one_waiter(&wake, &cluster.nodes.iter().collect::<Vec<_>>(), &mut probes, 30, 8);
    report_wakes("cluster, 30 waiters", &latencies);
    // Its metric counts flushed and its flushes stopped: a flush is a script call too.
    block(wake.fleet_metrics()).unwrap();
    drop(wake);

    let full = backend
        .concurrent("full", 1, Duration::from_secs(30))
        .unwrap()
        .with_wait_timeout(Duration::from_secs(2))
        .unwrap();
    over_limit_at_the_wait_timeout(&full, &mut probes, Duration::from_secs(2), false);
}

// ------------------------------------------------------------------------------------------
// 8. A lease granted to a call that gave up is released (issue #13, item 3).
// ------------------------------------------------------------------------------------------

/// Long enough that a leaked lease cannot be mistaken for a released one within these tests.
const LONG_LOCK: Duration = Duration::from_secs(60);

/// `CLIENT PAUSE <ms> WRITE`: scripts (and BLPOP) wait, INFO still answers.
fn pause_writes(probe: &mut redis::Connection, ms: u64) {
    let _: () = redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("WRITE").query(probe).expect("CLIENT PAUSE");
}

/// A second caller (its own backend, a 2 s deadline) asking for the limit-1 mutex `name`.
fn patient(server: &RedisServer, prefix: &str, name: &str) -> Limiter {
    backend(&server.url(), prefix).concurrent(name, 1, LONG_LOCK).unwrap()
}

/// Starts the second caller's `acquire` (5 s of waiting, far below the 60 s a leaked lease would
/// hold the mutex for).
fn second_acquire(limiter: &Limiter) -> tokio::task::JoinHandle<Result<Decision>> {
    let limiter = limiter.clone();
    runtime().spawn(async move { limiter.acquire(Some(KEY), 1, Some(Duration::from_secs(5))).await })
}

/// The second caller must get the mutex that the call which gave up had asked for first.
fn second_caller_gets_the_mutex(limiter: &Limiter, second: tokio::task::JoinHandle<Result<Decision>>) {
    let decision = block(second).unwrap().expect("the lease of the call that gave up was released");
    block(limiter.release(Some(KEY), &decision.lease.unwrap())).unwrap();
}

#[test]
fn a_lease_granted_after_its_call_timed_out_is_released() {
    let _serial = serial();
    let server = RedisServer::start();
    let prefix = unique_prefix("c8");
    let quick =
        Backend::redis_with(RedisConfig::new(server.url()).prefix(&prefix).deadline(Duration::from_millis(100)))
            .unwrap();
    let mut probe = raw(&server);

    // Async (`acquire`: Rust, Python, Node, C's acquire), under `CLIENT PAUSE 400`, with the
    // second caller's check in flight on the same shared connection (which so stays open and
    // runs the timed-out check once the pause ends).
    let limiter = quick.concurrent("async", 1, LONG_LOCK).unwrap();
    let second = patient(&server, &prefix, "async");
    block(limiter.peek(Some(KEY))).unwrap(); // connected: the check below is sent, then waits
    pause_writes(&mut probe, 400);
    let first = {
        let limiter = limiter.clone();
        runtime().spawn(async move { limiter.acquire(Some(KEY), 1, Some(Duration::from_secs(5))).await })
    };
    wait_blocked(std::slice::from_mut(&mut probe), 1);
    let waiting = second_acquire(&second);
    let err = block(first).unwrap().expect_err("the paused server cannot answer within 100 ms");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    second_caller_gets_the_mutex(&second, waiting);

    // Blocking (`check_blocking`: the calling thread's own connection, dropped at the timeout),
    // on a hung server (SIGSTOP): once resumed, the server still runs the check it had received.
    let limiter = quick.concurrent("blocking", 1, LONG_LOCK).unwrap();
    let second = patient(&server, &prefix, "blocking");
    limiter.peek_blocking(Some(KEY)).unwrap();
    server.pause();
    let err = limiter.check_blocking(Some(KEY), 1).expect_err("the hung server cannot answer within 100 ms");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let waiting = second_acquire(&second);
    server.resume();
    second_caller_gets_the_mutex(&second, waiting);
}

#[test]
fn a_lease_granted_to_a_dropped_acquire_is_released() {
    let _serial = serial();
    let server = RedisServer::start();
    let prefix = unique_prefix("c8d");
    let limiter = backend(&server.url(), &prefix).concurrent("dropped", 1, LONG_LOCK).unwrap();
    block(limiter.peek(Some(KEY))).unwrap();
    let mut probe = raw(&server);
    pause_writes(&mut probe, 10_000);
    let call = {
        let limiter = limiter.clone();
        runtime().spawn(async move { limiter.acquire(Some(KEY), 1, Some(Duration::from_secs(5))).await })
    };
    // The check is on the server, postponed by the pause: drop the call's future now.
    wait_blocked(std::slice::from_mut(&mut probe), 1);
    call.abort();
    assert!(block(call).unwrap_err().is_cancelled());
    let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut probe).unwrap();
    let second = patient(&server, &prefix, "dropped");
    second_caller_gets_the_mutex(&second, second_acquire(&second));
}

// ------------------------------------------------------------------------------------------
// 9. Concurrent limiters and the failure policies (issue #13, item 9).
// ------------------------------------------------------------------------------------------

fn policy_backend(url: &str, prefix: &str, policy: FailurePolicy) -> Backend {
    let config = RedisConfig::new(url).prefix(prefix).deadline(Duration::from_millis(300)).failure_policy(policy);
    Backend::redis_with(config).unwrap()
}

/// Waits until the restarted server answers this process's connections to `url` again (through
/// a fail-closed backend: calls that fall back would not tell).
fn wait_for_redis(url: &str) {
    let probe = policy_backend(url, "probe", FailurePolicy::FailClosed).token_bucket("probe", 1.0, 1).unwrap();
    let start = Instant::now();
    while block(probe.peek(None)).is_err() {
        assert!(start.elapsed() < GIVE_UP, "Redis did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn concurrent_limiters_fail_closed_under_fallback_and_fail_open_by_default() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let prefix = unique_prefix("c9");
    let backends = [
        ("fallback", policy_backend(&server.url(), &prefix, FailurePolicy::Fallback { divisor: 1 })),
        ("fail_open", policy_backend(&server.url(), &prefix, FailurePolicy::FailOpen)),
    ];
    for (_, backend) in &backends {
        block(backend.concurrent("mutex", 1, LONG_LOCK).unwrap().peek(Some(KEY))).unwrap();
    }
    server.kill();
    for (policy, backend) in &backends {
        let mutex = backend.concurrent("mutex", 1, LONG_LOCK).unwrap();
        assert!(!mutex.allows_fallback(), "{policy}: concurrent limiters do not fall back unless they opt in");
        for blocking in [false, true] {
            let granted = match blocking {
                false => block(mutex.acquire(Some(KEY), 1, Some(Duration::from_millis(500)))),
                true => mutex.check_blocking(Some(KEY), 1),
            };
            let err = granted.expect_err("a concurrent limiter fails closed while Redis is down");
            assert!(
                matches!(err.kind(), ErrorKind::BackendUnavailable | ErrorKind::Timeout),
                "{policy} (blocking: {blocking}): {err}"
            );
        }
        assert!(block(mutex.peek(Some(KEY))).is_err(), "{policy}: peek fails closed too");
        // Rate limiters on the same backend still follow its policy.
        let rate = backend.token_bucket("rate", 10.0, 10).unwrap();
        assert!(rate.allows_fallback());
        assert!(block(rate.check(Some(KEY), 1)).unwrap().allowed, "{policy}: rate limiters follow the policy");
        assert!(backend.stats().failed >= 3, "{policy}: {:?}", backend.stats());
    }
}

#[test]
fn an_opted_in_concurrent_limiter_falls_back_and_its_lease_extends_and_releases_after_recovery() {
    let _serial = serial();
    let mut server = RedisServer::start();
    let prefix = unique_prefix("c9o");
    let backend = policy_backend(&server.url(), &prefix, FailurePolicy::Fallback { divisor: 1 });
    let mutex = backend.concurrent("mutex", 1, LONG_LOCK).unwrap().with_allow_fallback(true).unwrap();
    assert!(mutex.allows_fallback());
    let open = policy_backend(&server.url(), &prefix, FailurePolicy::FailOpen)
        .concurrent("open", 1, LONG_LOCK)
        .unwrap()
        .with_allow_fallback(true)
        .unwrap();
    block(mutex.peek(Some(KEY))).unwrap();
    let held = block(mutex.acquire(Some(KEY), 1, None)).unwrap().lease.unwrap();
    server.kill();
    // The in-process fallback mutex takes over: one holder in this process (its fencing tokens
    // increase in this process only), whatever Redis held.
    let lease = block(mutex.acquire(Some(KEY), 1, Some(Duration::from_millis(500)))).unwrap().lease.unwrap();
    assert!(lease.fencing_token > 0);
    assert!(!block(mutex.check(Some(KEY), 1)).unwrap().allowed, "the fallback mutex has one holder");
    assert!(backend.stats().fell_back >= 2, "{:?}", backend.stats());
    // Failing open grants a lease that guards nothing (fencing token 0).
    let opened = block(open.acquire(Some(KEY), 1, None)).unwrap().lease.unwrap();
    assert_eq!(opened.fencing_token, 0);
    block(open.release(Some(KEY), &opened)).unwrap();

    server.restart();
    wait_for_redis(&server.url());
    // The fallback lease is the fallback's: extended and released there, even with Redis back.
    block(mutex.extend(Some(KEY), &lease)).expect("a fallback lease extends after Redis recovered");
    block(mutex.release(Some(KEY), &lease)).expect("a fallback lease is released after Redis recovered");
    // Redis restarted empty: the lease it held before the outage is gone.
    let lost = block(mutex.release(Some(KEY), &held)).unwrap_err();
    assert_eq!(lost.kind(), ErrorKind::LeaseLost);
}

/// The script's `abandon`, whichever order the server sees it in: after the check, it frees the
/// granted lease (and wakes a waiter); before it (a check held in a hung server or a slow
/// network), the check grants nothing. Other leases are never touched.
#[test]
fn an_abandon_frees_its_own_lease_whether_it_comes_after_or_before_the_check() {
    let _serial = serial();
    let server = RedisServer::start();
    let mut conn = raw(&server);
    let body = ratekeeper::lua_sources().into_iter().find(|(name, _)| *name == "concurrent").unwrap().1;
    let keys = ["t:h", "t:t", "t:w", "t:x", "t:g", "t:q"];
    let mut run = |op: &str, id: &str| -> Vec<i64> {
        // A check passes the pause and block keys last (see `hold_check.lua`); other verbs do not.
        let hold_keys: &[&str] = if op == "check" { &["t:p", "t:b"] } else { &[] };
        redis::cmd("EVAL")
            .arg(body)
            .arg(keys.len() + hold_keys.len())
            .arg(&keys)
            .arg(hold_keys)
            .arg(op)
            .arg("")
            .arg(1)
            .arg(60_000_000)
            .arg(id)
            .arg("") // no waiter
            .arg(0)
            .query(&mut conn)
            .unwrap()
    };
    assert_eq!(run("abandon", "early")[0], 0, "nothing to free yet");
    assert_eq!(run("check", "early")[0], 0, "the abandoned check grants nothing");
    assert_eq!(run("check", "other")[0], 1, "the slot is still free for another caller");
    assert_eq!(run("abandon", "late")[0], 0, "an id that was never granted frees nothing");
    assert_eq!(run("check", "third")[0], 0, "the other caller still holds the mutex");
    assert_eq!(run("abandon", "other")[0], 1, "abandoning a granted lease frees it");
    assert_eq!(run("abandon", "other")[0], 0, "abandoning twice is a no-op");
    assert_eq!(run("check", "third")[0], 1);
    let woken: i64 = redis::cmd("LLEN").arg("t:w").query(&mut conn).unwrap();
    assert_eq!(woken, 1, "the freed slot woke one waiter");
}

/// The Redis side of `a_refusal_next_to_an_overdue_holder_waits_for_the_earliest_live_one`
/// (core/tests/concurrent/memory.rs): with an overdue holder still stored and the live ones filling a
/// lowered limit, the script answered a negative `retry_after` (from the overdue holder).
#[test]
fn a_refusal_next_to_an_overdue_holder_waits_for_the_earliest_live_one() {
    let _serial = serial();
    let server = RedisServer::start();
    let prefix = unique_prefix("c8");
    let lock = Duration::from_millis(400);
    let before = backend(&server.url(), &prefix).concurrent("lowered", 3, lock).unwrap();
    let first = block(before.check(Some(KEY), 1)).unwrap().lease.expect("first holder");
    std::thread::sleep(Duration::from_millis(200));
    let second = block(before.check(Some(KEY), 1)).unwrap().lease.expect("second holder");
    block(before.check(Some(KEY), 1)).unwrap().lease.expect("third holder");
    std::thread::sleep(Duration::from_millis(250)); // the first is overdue, still stored
    let after = backend(&server.url(), &prefix).concurrent("lowered", 2, lock).unwrap();
    let refused = block(after.check(Some(KEY), 1)).unwrap();
    assert!(!refused.allowed, "{refused:?}");
    // By the server's clock: the second holder's expiry, less the refusal's instant.
    let second_expires = second.granted_at_micros + lock.as_micros() as u64;
    assert!(first.granted_at_micros + (lock.as_micros() as u64) < refused.decided_at_micros);
    assert_eq!(refused.retry_after, Duration::from_micros(second_expires - refused.decided_at_micros), "{refused:?}");
}
