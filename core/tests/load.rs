//! Load tests on real Redis servers, judged by the server's own clock (`decided_at_micros`):
//!
//! 1. over-admission across OS processes: 8 processes × 8 tasks calling for 3 s (8 s with
//!    `RATEKEEPER_LONG_TESTS=1`) against every limiter kind on one standalone Redis; nothing is
//!    admitted beyond the limit, and at least 95% of what a model limiter admits from the same
//!    arrivals is (the theoretical maximum over the contended span is printed beside it; for the
//!    concurrent limiter, slot occupancy sampled from the server);
//! 2. a `SCRIPT FLUSH` storm: no errors, counts exact;
//! 3. every key has a TTL, and idle state disappears;
//! 4. the over-admission check (lighter: 4 processes × 4 tasks for the same time) on a 3-master
//!    Redis Cluster.
//!
//! Every job is bounded by time, not by a number of calls: a machine that runs the calls faster
//! (or slower) makes more (or fewer) of them in the same windows, so the contention each job
//! reaches does not depend on the machine's speed, and neither does the verdict: the floor is
//! judged against the arrivals the server actually saw.
//!
//! Worker processes are this test executable run again with `--exact load_worker`; the job is
//! described by `RK_LOAD_*` environment variables, and the worker prints one `RKLOAD …` line per
//! admitted call (and, for window jobs, per refused call) for the parent to judge. Without those
//! variables `load_worker` does nothing. `RK_LOAD_ONLY=window,concurrent` restricts the
//! over-admission suites to some kinds (labels as printed in their tables).

mod support;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, Limiter, RedisConfig, SlidingLimit, WindowLimit};
use ratekeeper_test_support::judge::{self, Record, Rule};
use support::{RedisCluster, RedisServer};

/// How long every task of a job calls: the lean default of the test command, or the full shape
/// with `RATEKEEPER_LONG_TESTS=1`.
fn calling_time() -> Duration {
    if std::env::var("RATEKEEPER_LONG_TESTS").as_deref() == Ok("1") {
        Duration::from_secs(8)
    } else {
        Duration::from_secs(3)
    }
}

/// The key every load job uses (one identity, maximal contention).
const KEY: &str = "shared";

/// The heavy tests run one at a time: each saturates the machine's two cores on its own.
fn heavy_lock() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unique_prefix(label: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{label}{}x{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// xorshift64*: cheap, deterministic per seed, good enough to vary costs and hold times.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

// ------------------------------------------------------------------------------------------
// Jobs: what a worker process runs, encoded in one environment variable.
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Job {
    /// Fixed windows: `limit` per aligned `interval_us`.
    Bucket { limit: u64, interval_us: u64 },
    /// Exact sliding windows `(limit, interval_us)`, all checked together.
    Window { windows: Vec<(u64, u64)> },
    /// Sub-bucket sliding windows `(limit, duration_us, precision_us)`.
    Sliding { limits: Vec<(u64, u64, u64)> },
    /// `rate` tokens per second up to `capacity`; each call costs 1..=`max_cost`.
    Token { rate: u64, capacity: u64, max_cost: u64 },
    /// A burst of `size` draining in `drain_us`.
    Leaky { size: u64, drain_us: u64 },
    /// Points: each admitted call estimates 1..=`max_estimate`, then reports 0..=`max_actual`.
    Points { capacity: u64, refill_us: u64, max_estimate: u64, max_actual: u64 },
    /// `limit` slots; holders keep a lease for `hold_min_us..=hold_max_us`, then release it.
    Concurrent { limit: u64, lock_us: u64, hold_min_us: u64, hold_max_us: u64 },
}

impl Job {
    fn label(&self) -> &'static str {
        match self {
            Job::Bucket { .. } => "bucket",
            Job::Window { windows } if windows.len() > 1 => "multi-window",
            Job::Window { .. } => "window",
            Job::Sliding { .. } => "sliding_window",
            Job::Token { .. } => "token_bucket",
            Job::Leaky { .. } => "leaky",
            Job::Points { .. } => "points",
            Job::Concurrent { .. } => "concurrent",
        }
    }

    fn encode(&self) -> String {
        let nums: Vec<u64> = match self {
            Job::Bucket { limit, interval_us } => vec![*limit, *interval_us],
            Job::Window { windows } => windows.iter().flat_map(|&(l, i)| [l, i]).collect(),
            Job::Sliding { limits } => limits.iter().flat_map(|&(l, d, p)| [l, d, p]).collect(),
            Job::Token { rate, capacity, max_cost } => vec![*rate, *capacity, *max_cost],
            Job::Leaky { size, drain_us } => vec![*size, *drain_us],
            Job::Points { capacity, refill_us, max_estimate, max_actual } => {
                vec![*capacity, *refill_us, *max_estimate, *max_actual]
            }
            Job::Concurrent { limit, lock_us, hold_min_us, hold_max_us } => {
                vec![*limit, *lock_us, *hold_min_us, *hold_max_us]
            }
        };
        let kind = match self {
            Job::Bucket { .. } => "bucket",
            Job::Window { .. } => "window",
            Job::Sliding { .. } => "sliding",
            Job::Token { .. } => "token",
            Job::Leaky { .. } => "leaky",
            Job::Points { .. } => "points",
            Job::Concurrent { .. } => "concurrent",
        };
        let mut s = kind.to_string();
        for n in nums {
            s.push(' ');
            s.push_str(&n.to_string());
        }
        s
    }

    fn decode(s: &str) -> Job {
        let mut parts = s.split(' ');
        let kind = parts.next().unwrap();
        let n: Vec<u64> = parts.map(|p| p.parse().unwrap()).collect();
        match kind {
            "bucket" => Job::Bucket { limit: n[0], interval_us: n[1] },
            "window" => Job::Window { windows: n.chunks(2).map(|c| (c[0], c[1])).collect() },
            "sliding" => Job::Sliding { limits: n.chunks(3).map(|c| (c[0], c[1], c[2])).collect() },
            "token" => Job::Token { rate: n[0], capacity: n[1], max_cost: n[2] },
            "leaky" => Job::Leaky { size: n[0], drain_us: n[1] },
            "points" => Job::Points { capacity: n[0], refill_us: n[1], max_estimate: n[2], max_actual: n[3] },
            "concurrent" => Job::Concurrent { limit: n[0], lock_us: n[1], hold_min_us: n[2], hold_max_us: n[3] },
            other => panic!("unknown job kind {other:?}"),
        }
    }

    fn limiter(&self, backend: &Backend) -> Limiter {
        let us = Duration::from_micros;
        let name = format!("load-{}", self.label());
        match self {
            Job::Bucket { limit, interval_us } => backend.bucket(&name, *limit, us(*interval_us)),
            Job::Window { windows } => {
                let w: Vec<WindowLimit> =
                    windows.iter().map(|&(limit, i)| WindowLimit { limit, interval: us(i) }).collect();
                backend.windows(&name, &w)
            }
            Job::Sliding { limits } => {
                let l: Vec<SlidingLimit> = limits
                    .iter()
                    .map(|&(limit, d, p)| SlidingLimit { duration: us(d), limit, precision: Some(us(p)) })
                    .collect();
                backend.sliding_window(&name, &l)
            }
            Job::Token { rate, capacity, .. } => backend.token_bucket(&name, *rate as f64, *capacity),
            Job::Leaky { size, drain_us } => backend.leaky(&name, *size, us(*drain_us)),
            Job::Points { capacity, refill_us, .. } => backend.points(&name, *capacity, us(*refill_us)),
            Job::Concurrent { limit, lock_us, .. } => backend.concurrent(&name, *limit, us(*lock_us)),
        }
        .expect("a valid limiter")
    }

    /// GCRA kinds: (emission interval T in µs, capacity). Parameters are chosen so that T is exact.
    fn gcra(&self) -> Option<(u64, u64)> {
        let exact = |num: u64, den: u64| {
            assert_eq!(num % den, 0, "choose parameters with an exact emission interval");
            num / den
        };
        match self {
            Job::Token { rate, capacity, .. } => Some((exact(1_000_000, *rate), *capacity)),
            Job::Leaky { size, drain_us } => Some((exact(*drain_us, *size), *size)),
            Job::Points { capacity, refill_us, .. } => Some((exact(*refill_us, *capacity), *capacity)),
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
enum Target {
    Standalone(String),
    Cluster(Vec<String>),
}

impl Target {
    fn backend(&self, prefix: &str) -> Backend {
        // A generous deadline: on a saturated 2-core machine a call may queue for a while, and a
        // timed-out call (which may or may not have run) would blur the accounting.
        let config = match self {
            Target::Standalone(url) => RedisConfig::new(url.clone()),
            Target::Cluster(seeds) => RedisConfig::cluster(seeds.clone()),
        };
        Backend::redis_with(config.prefix(prefix).deadline(Duration::from_secs(10))).expect("a Redis backend")
    }
}

// ------------------------------------------------------------------------------------------
// The worker: runs `tasks` tasks × `attempts` calls and prints what was admitted.
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct TaskLog {
    lines: Vec<String>,
    first_us: u64,
    last_us: u64,
    attempts: u64,
    admitted: u64,
}

async fn worker_task(job: Job, limiter: Limiter, until: Instant, seed: u64) -> TaskLog {
    let mut rng = Rng::new(seed);
    let mut log = TaskLog::default();
    let key = Some(KEY);
    while Instant::now() < until {
        let cost = match &job {
            Job::Token { max_cost, .. } => rng.range(1, *max_cost),
            Job::Points { max_estimate, .. } => rng.range(1, *max_estimate),
            _ => 1,
        };
        log.attempts += 1;
        let d = match limiter.check(key, cost).await {
            Ok(d) => d,
            Err(e) => {
                log.lines.push(format!("E check: {e}"));
                continue;
            }
        };
        if log.first_us == 0 {
            log.first_us = d.decided_at_micros;
        }
        log.last_us = log.last_us.max(d.decided_at_micros);
        if !d.allowed {
            // Refusals too: the parent replays every arrival through a model limiter.
            if !matches!(job, Job::Concurrent { .. }) {
                log.lines.push(format!("R {} {cost}", d.decided_at_micros));
            }
            continue;
        }
        log.admitted += 1;
        match &job {
            Job::Concurrent { hold_min_us, hold_max_us, .. } => {
                let granted = Instant::now();
                let lease = d.lease.expect("a concurrent grant carries a lease");
                tokio::time::sleep(Duration::from_micros(rng.range(*hold_min_us, *hold_max_us))).await;
                // Measured just before the release is sent: the release runs on the server at
                // least this long after the grant did (both clocks tick at the same rate).
                let held = granted.elapsed().as_micros() as u64;
                if let Err(e) = limiter.release(key, &lease).await {
                    log.lines.push(format!("E release: {e}"));
                }
                log.lines.push(format!("C {} {} {} {}", d.decided_at_micros, held, d.remaining, lease.fencing_token));
            }
            Job::Points { max_actual, .. } => {
                log.lines.push(format!("A {} {} {}", d.decided_at_micros, cost, d.remaining));
                let actual = rng.range(0, *max_actual);
                match limiter.points_used(key, cost, actual).await {
                    Ok(a) => log.lines.push(format!("J {} {}", a.decided_at_micros, actual as i64 - cost as i64)),
                    Err(e) => log.lines.push(format!("E points_used: {e}")),
                }
            }
            _ => log.lines.push(format!("A {} {} {}", d.decided_at_micros, cost, d.remaining)),
        }
    }
    log
}

/// The worker process's entry point; a no-op unless the parent set `RK_LOAD_JOB`.
#[test]
fn load_worker() {
    let Ok(encoded) = std::env::var("RK_LOAD_JOB") else { return };
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent"));
    let job = Job::decode(&encoded);
    let tasks: u64 = env("RK_LOAD_TASKS").parse().unwrap();
    let calling = Duration::from_micros(env("RK_LOAD_CALLING_US").parse().unwrap());
    let seed: u64 = env("RK_LOAD_SEED").parse().unwrap();
    let target = match std::env::var("RK_LOAD_SEEDS") {
        Ok(seeds) => Target::Cluster(seeds.split(',').map(str::to_owned).collect()),
        Err(_) => Target::Standalone(env("RK_LOAD_URL")),
    };
    let backend = target.backend(&env("RK_LOAD_PREFIX"));
    let limiter = job.limiter(&backend);
    // Connect and load the script before the start signal (a peek consumes nothing).
    runtime().block_on(limiter.peek(Some(KEY))).expect("warm-up peek");
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "RKLOAD READY").unwrap();
    stdout.lock().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("the parent's start signal");

    let until = Instant::now() + calling;
    let logs = runtime().block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| tokio::spawn(worker_task(job.clone(), limiter.clone(), until, seed * 1000 + t)))
            .collect();
        let mut logs = Vec::new();
        for h in handles {
            logs.push(h.await.expect("a worker task"));
        }
        logs
    });
    let mut out = std::io::BufWriter::new(stdout.lock());
    for log in logs {
        for line in &log.lines {
            writeln!(out, "RKLOAD {line}").unwrap();
        }
        writeln!(out, "RKLOAD T {} {} {} {}", log.first_us, log.last_us, log.attempts, log.admitted).unwrap();
    }
    out.flush().unwrap();
}

// ------------------------------------------------------------------------------------------
// The parent: spawns workers, collects their lines, judges them.
// ------------------------------------------------------------------------------------------

#[derive(Default, Debug)]
struct Collected {
    /// (server time, cost, remaining) of every admitted check.
    admits: Vec<(u64, u64, u64)>,
    /// (server time, cost) of refused checks (every job but concurrent).
    refusals: Vec<(u64, u64)>,
    /// (server time, actual − estimate) of every `points_used`.
    adjusts: Vec<(u64, i64)>,
    /// (grant server time, hold µs lower bound, remaining at grant, fencing token).
    grants: Vec<(u64, u64, u64, u64)>,
    /// (first server time, last server time, attempts, admitted) per task.
    tasks: Vec<(u64, u64, u64, u64)>,
    errors: Vec<String>,
    /// (server time, remaining) sampled by the parent's probe (concurrent jobs).
    probe: Vec<(u64, u64)>,
    wall: Duration,
}

fn spawn_worker(target: &Target, job: &Job, prefix: &str, tasks: u64, calling: Duration, seed: u64) -> Child {
    let exe = std::env::current_exe().expect("the test executable");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "load_worker", "--nocapture", "--test-threads=1"])
        .env("RK_LOAD_JOB", job.encode())
        .env("RK_LOAD_TASKS", tasks.to_string())
        .env("RK_LOAD_CALLING_US", calling.as_micros().to_string())
        .env("RK_LOAD_PREFIX", prefix)
        .env("RK_LOAD_SEED", seed.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match target {
        Target::Standalone(url) => cmd.env("RK_LOAD_URL", url).env_remove("RK_LOAD_SEEDS"),
        Target::Cluster(seeds) => cmd.env("RK_LOAD_SEEDS", seeds.join(",")).env_remove("RK_LOAD_URL"),
    };
    cmd.spawn().expect("spawn a worker process")
}

/// Sets its flag when dropped (stops the probe even when an assertion fails).
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The worker processes of one job; any still running when this is dropped (a failed
/// assertion) are killed, by their own handles.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn run_job(target: &Target, job: &Job, processes: u64, tasks: u64, calling: Duration) -> Collected {
    let prefix = unique_prefix("ld");
    let mut workers =
        Workers((0..processes).map(|p| spawn_worker(target, job, &prefix, tasks, calling, p + 1)).collect());
    let children = &mut workers.0;
    // `true`: a worker is ready; `false`: a worker's output ended before it was.
    let (ready_tx, ready_rx) = mpsc::channel::<bool>();
    let readers: Vec<_> = children
        .iter_mut()
        .map(|child| {
            let stdout = child.stdout.take().unwrap();
            let ready_tx = ready_tx.clone();
            std::thread::spawn(move || {
                let mut lines = Vec::new();
                let mut ready = false;
                for line in BufReader::new(stdout).lines() {
                    let line = line.expect("read a worker's output");
                    // libtest may have printed `test load_worker ... ` on the same line.
                    let Some(at) = line.find("RKLOAD ") else { continue };
                    let rest = &line[at + "RKLOAD ".len()..];
                    if rest == "READY" {
                        ready = true;
                        let _ = ready_tx.send(true);
                    } else {
                        lines.push(rest.to_string());
                    }
                }
                if !ready {
                    let _ = ready_tx.send(false);
                }
                lines
            })
        })
        .collect();
    drop(ready_tx);
    for _ in 0..processes {
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(true) => {}
            Ok(false) => panic!("{}: a worker exited before it was ready (see its stderr)", job.label()),
            Err(_) => panic!("{}: a worker did not get ready within 60 s", job.label()),
        }
    }
    let started = Instant::now();
    for child in children.iter_mut() {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").expect("start a worker");
    }

    // Concurrent jobs: sample the server's own count of holders while the workers run.
    let done = Arc::new(AtomicBool::new(false));
    let _stop_probe = StopOnDrop(done.clone());
    let probe = if let Job::Concurrent { .. } = job {
        let backend = target.backend(&prefix);
        let limiter = job.limiter(&backend);
        let done = done.clone();
        Some(runtime().spawn(async move {
            let mut samples = Vec::new();
            while !done.load(Ordering::Relaxed) {
                if let Ok(d) = limiter.peek(Some(KEY)).await {
                    samples.push((d.decided_at_micros, d.remaining));
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        }))
    } else {
        None
    };

    let give_up = Instant::now() + Duration::from_secs(120);
    for child in children.iter_mut() {
        loop {
            match child.try_wait().expect("wait for a worker") {
                Some(status) => {
                    assert!(status.success(), "{}: a worker failed: {status}", job.label());
                    break;
                }
                None if Instant::now() > give_up => panic!("{}: workers still running after 120 s", job.label()),
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
    let wall = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let mut c = Collected { wall, ..Collected::default() };
    if let Some(probe) = probe {
        c.probe = runtime().block_on(probe).expect("the probe task");
    }
    for reader in readers {
        for line in reader.join().expect("a reader thread") {
            let mut f = line.split(' ');
            let tag = f.next().unwrap();
            if tag == "E" {
                c.errors.push(line);
                continue;
            }
            let n: Vec<i64> = f.map(|x| x.parse().unwrap()).collect();
            let u = |i: usize| n[i] as u64;
            match tag {
                "A" => c.admits.push((u(0), u(1), u(2))),
                "J" => c.adjusts.push((u(0), n[1])),
                "R" => c.refusals.push((u(0), u(1))),
                "C" => c.grants.push((u(0), u(1), u(2), u(3))),
                "T" => c.tasks.push((u(0), u(1), u(2), u(3))),
                other => panic!("unexpected worker line {other:?}"),
            }
        }
    }
    assert_eq!(c.tasks.len() as u64, processes * tasks, "{}: every task reports", job.label());
    c
}

/// What one job measured.
struct Verdict {
    /// Units admitted in the contended span.
    admitted: u64,
    /// The most any correct limiter could admit in that span.
    theoretical: f64,
    span_us: u64,
    /// Every job but concurrent: what a model limiter admits from the calls as they actually
    /// reached the server.
    given_arrivals: Option<Replay>,
}

/// A model limiter's replay of the calls that reached the server in the contended span.
#[derive(Debug, Clone, Copy)]
struct Replay {
    /// Units the library admitted among those calls.
    library: u64,
    /// Units the model admits from the same calls: the most a correct limiter could admit given
    /// when they arrived (the floor is judged against it, not against the theoretical maximum,
    /// which assumes a call the instant a unit frees: eight worker processes on a loaded
    /// two-core machine do not keep up with that, and a faster machine would).
    model: u64,
    /// Calls the model decides otherwise than the library did.
    differ: u64,
}

/// Every call that reached the server, `(instant µs, cost, admitted by the library)`, in server
/// order: within one instant (a batched script's calls share it) admissions first.
fn arrivals(c: &Collected) -> Vec<(u64, u64, bool)> {
    let mut arrivals: Vec<(u64, u64, bool)> = c.admits.iter().map(|a| (a.0, a.1, true)).collect();
    arrivals.extend(c.refusals.iter().map(|&(t, cost)| (t, cost, false)));
    arrivals.sort_unstable_by_key(|&(t, cost, admitted)| (t, !admitted, cost));
    arrivals
}

impl Verdict {
    fn fraction(&self) -> f64 {
        self.admitted as f64 / self.theoretical
    }
}

/// Checks the run of `job` for over-admission (an `Err` describes the first violation) and
/// measures the admitted fraction of the theoretical maximum over the contended span: from the
/// first call of any task (the limiter's state is new then) to the last call of the task that
/// finished first (every task is still calling until then).
fn judge(job: &Job, c: &Collected) -> Result<Verdict, String> {
    if !c.errors.is_empty() {
        return Err(format!("{} calls failed, e.g. {:?}", c.errors.len(), &c.errors[..c.errors.len().min(3)]));
    }
    let t0 = c.tasks.iter().map(|t| t.0).min().unwrap();
    let tc = c.tasks.iter().map(|t| t.1).min().unwrap();
    if c.tasks.iter().any(|t| t.0 == 0) || tc <= t0 {
        return Err(format!("a task made no call: {:?}", c.tasks));
    }
    let span_us = tc - t0;
    let mut admits = c.admits.clone();
    admits.sort_unstable();
    let in_span = |t: u64| t <= tc;
    let arrivals = arrivals(c);
    match job {
        Job::Bucket { limit, interval_us } => {
            bucket_never_over(&admits, *limit, *interval_us)?;
            // Whole windows: from the one holding the first call (the state is new then) to the
            // last one that ended before `tc`.
            let end = tc / interval_us * interval_us;
            let windows = tc / interval_us - t0 / interval_us;
            if windows < 10 {
                return Err(format!("only {windows} windows in the contended span: the job ran too briefly"));
            }
            let admitted = admits.iter().filter(|a| a.0 < end).map(|a| a.1).sum();
            Ok(Verdict {
                admitted,
                theoretical: (limit * windows) as f64,
                span_us: end - t0,
                given_arrivals: Some(replay_bucket(*limit, *interval_us, &arrivals, end)),
            })
        }
        Job::Window { windows } => {
            window_never_over(&admits, windows)?;
            assert!(admits.iter().all(|a| a.1 == 1), "window jobs use cost 1");
            // Up to the last admission in the span: admissions come in bursts (a freed slot is
            // taken at once), and `tc` may fall just before one.
            let end = admits.iter().map(|a| a.0).filter(|&t| in_span(t)).max().unwrap_or(t0);
            let admitted = admits.iter().filter(|a| a.0 <= end).count() as u64;
            Ok(Verdict {
                admitted,
                theoretical: greedy_log(windows, t0, end) as f64,
                span_us: end - t0,
                given_arrivals: Some(replay_log(windows, &arrivals, end)),
            })
        }
        Job::Sliding { limits } => {
            sliding_never_over(&admits, limits)?;
            assert!(admits.iter().all(|a| a.1 == 1), "sliding jobs use cost 1");
            // Whole blocks of the finest precision, up to the last one that ended before `tc`.
            let step = limits.iter().map(|l| l.2).min().unwrap();
            let end = tc / step * step;
            let admitted = admits.iter().filter(|a| a.0 < end).count() as u64;
            Ok(Verdict {
                admitted,
                theoretical: greedy_sliding(limits, t0, end - 1) as f64,
                span_us: end - t0,
                given_arrivals: Some(replay_sliding(limits, &arrivals, end)),
            })
        }
        Job::Token { .. } | Job::Leaky { .. } | Job::Points { .. } => {
            let (t_us, capacity) = job.gcra().unwrap();
            gcra_never_over(&admits, &c.adjusts, t_us, capacity)?;
            // Net units charged (admissions, plus points_used corrections) within the span.
            let net: i64 = admits.iter().filter(|a| in_span(a.0)).map(|a| a.1 as i64).sum::<i64>()
                + c.adjusts.iter().filter(|a| in_span(a.0)).map(|a| a.1).sum::<i64>();
            let theoretical = capacity as f64 + span_us as f64 / t_us as f64;
            Ok(Verdict {
                admitted: net.max(0) as u64,
                theoretical,
                span_us,
                given_arrivals: Some(replay_gcra(t_us, capacity, &arrivals, &c.adjusts, tc)),
            })
        }
        Job::Concurrent { limit, .. } => {
            concurrent_never_over(&c.grants, *limit)?;
            // The server's own count of holders, sampled by the probe: how full the slots were.
            let samples: Vec<_> = c.probe.iter().filter(|s| s.0 >= t0 && s.0 <= tc).collect();
            if samples.len() < 50 {
                return Err(format!("the probe took only {} samples in the contended span", samples.len()));
            }
            let held: u64 = samples.iter().map(|s| limit - s.1).sum();
            Ok(Verdict {
                admitted: held,
                theoretical: (limit * samples.len() as u64) as f64,
                span_us,
                given_arrivals: None,
            })
        }
    }
}

/// The admissions as the shared judge reads them: `(server time µs, cost)`.
fn record(admits: &[(u64, u64, u64)], corrections: &[(u64, i64)]) -> Record {
    Record { admitted: admits.iter().map(|&(t, cost, _)| (t, cost)).collect(), corrections: corrections.to_vec() }
}

/// Every aligned window of `interval_us` holds at most `limit` units.
fn bucket_never_over(admits: &[(u64, u64, u64)], limit: u64, interval_us: u64) -> Result<(), String> {
    judge::judge(Rule::Blocks { limit, block_us: interval_us, blocks: 1 }, &record(admits, &[]))
}

/// Any span `(t − interval, t]` holds at most `limit` units, for every window.
fn window_never_over(admits: &[(u64, u64, u64)], windows: &[(u64, u64)]) -> Result<(), String> {
    let record = record(admits, &[]);
    windows.iter().try_for_each(|&(limit, interval_us)| judge::judge(Rule::Span { limit, interval_us }, &record))
}

/// Judged by blocks, as the limiter counts: the `ceil(duration / precision)` blocks of
/// `precision` ending with any block hold at most `limit` units, for every limit.
fn sliding_never_over(admits: &[(u64, u64, u64)], limits: &[(u64, u64, u64)]) -> Result<(), String> {
    let record = record(admits, &[]);
    limits.iter().try_for_each(|&(limit, duration, precision)| {
        judge::judge(Rule::Blocks { limit, block_us: precision, blocks: duration.div_ceil(precision) }, &record)
    })
}

/// Counts a model's decisions on the calls that reached the server up to `end` (inclusive
/// when `inclusive`): `model` decides each call, given its instant and cost, and records it when
/// it admits.
fn replay(arrivals: &[(u64, u64, bool)], end: u64, inclusive: bool, mut model: impl FnMut(u64, u64) -> bool) -> Replay {
    let mut out = Replay { library: 0, model: 0, differ: 0 };
    for &(t, cost, library) in arrivals.iter().filter(|a| a.0 < end || (inclusive && a.0 == end)) {
        let admits = model(t, cost);
        out.library += if library { cost } else { 0 };
        out.model += if admits { cost } else { 0 };
        out.differ += u64::from(admits != library);
    }
    out
}

/// Exact sliding windows that admit whenever every window allows: the most any limiter could
/// admit from these arrivals.
fn replay_log(windows: &[(u64, u64)], arrivals: &[(u64, u64, bool)], end: u64) -> Replay {
    let mut admitted: Vec<u64> = Vec::new();
    replay(arrivals, end, true, |t, _| {
        let admits = windows.iter().all(|&(limit, interval)| {
            let gone = admitted.partition_point(|&s| s + interval <= t);
            ((admitted.len() - gone) as u64) < limit
        });
        if admits {
            admitted.push(t);
        }
        admits
    })
}

/// Fixed windows aligned to `interval_us`, `limit` units each.
fn replay_bucket(limit: u64, interval_us: u64, arrivals: &[(u64, u64, bool)], end: u64) -> Replay {
    let (mut window, mut used) = (u64::MAX, 0);
    replay(arrivals, end, false, |t, cost| {
        if t / interval_us != window {
            (window, used) = (t / interval_us, 0);
        }
        let admits = used + cost <= limit;
        used += if admits { cost } else { 0 };
        admits
    })
}

/// Sub-bucket limits counted by blocks, as the limiter counts (see `sliding_never_over`).
fn replay_sliding(limits: &[(u64, u64, u64)], arrivals: &[(u64, u64, bool)], end: u64) -> Replay {
    let mut admitted: Vec<u64> = Vec::new(); // instants of admitted units (cost 1)
    replay(arrivals, end, false, |t, cost| {
        let admits = limits.iter().all(|&(limit, duration, precision)| {
            let first_block = (t / precision + 1).saturating_sub(duration.div_ceil(precision));
            let inside = admitted.len() - admitted.partition_point(|&s| s / precision < first_block);
            inside as u64 + cost <= limit
        });
        if admits {
            admitted.extend(std::iter::repeat(t).take(cost as usize));
        }
        admits
    })
}

/// GCRA with the run's `points_used` corrections applied at their instants, as the script
/// applies them (a charge up to 16 capacities ahead, a refund never beyond full).
fn replay_gcra(t_us: u64, capacity: u64, arrivals: &[(u64, u64, bool)], adjusts: &[(u64, i64)], end: u64) -> Replay {
    let (t_us, tau) = (i128::from(t_us), i128::from(capacity * t_us));
    let mut adjusts = adjusts.to_vec();
    adjusts.sort_unstable();
    let mut next_adjust = 0;
    let mut tat: i128 = 0;
    replay(arrivals, end, true, |t, cost| {
        let now = i128::from(t);
        // Corrections made before this call (at its instant too: the lenient order).
        while let Some(&(at, units)) = adjusts.get(next_adjust).filter(|a| a.0 <= t) {
            let used = (tat - i128::from(at)).max(0);
            let used = if units >= 0 {
                (used + i128::from(units) * t_us).min(16 * tau)
            } else {
                (used + i128::from(units) * t_us).max(0)
            };
            tat = i128::from(at) + used;
            next_adjust += 1;
        }
        let used = (tat - now).max(0);
        let admits = used + i128::from(cost) * t_us <= tau;
        if admits {
            tat = now + used + i128::from(cost) * t_us;
        }
        admits
    })
}

/// The most admissions of cost 1 in `[t0, tc]` under exact sliding windows: admitting each as
/// early as every window allows is optimal.
fn greedy_log(windows: &[(u64, u64)], t0: u64, tc: u64) -> u64 {
    let mut at: Vec<u64> = Vec::new();
    loop {
        let k = at.len();
        let mut t = t0;
        for &(limit, interval) in windows {
            if k >= limit as usize {
                t = t.max(at[k - limit as usize] + interval);
            }
        }
        if t > tc {
            return k as u64;
        }
        at.push(t);
    }
}

/// The most admissions of cost 1 in `[t0, tc]` under sub-bucket limits: at the start of every
/// block (the finest precision; the others are multiples of it), admit all that fits.
fn greedy_sliding(limits: &[(u64, u64, u64)], t0: u64, tc: u64) -> u64 {
    let step = limits.iter().map(|l| l.2).min().unwrap();
    assert!(limits.iter().all(|l| l.2 % step == 0), "precisions are multiples of the finest");
    let mut admitted: Vec<(u64, u64)> = Vec::new();
    for s in t0 / step..=tc / step {
        let now = (s * step).max(t0);
        let fits = limits
            .iter()
            .map(|&(limit, duration, precision)| {
                let blocks = duration.div_ceil(precision);
                let current = now / precision;
                let used: u64 = admitted.iter().filter(|(t, _)| t / precision + blocks > current).map(|a| a.1).sum();
                limit - used
            })
            .min()
            .unwrap();
        if fits > 0 {
            admitted.push((now, fits));
        }
    }
    admitted.iter().map(|a| a.1).sum()
}

/// GCRA never lets the units charged from admission `a` through admission `b` (inclusive,
/// corrections in between counted) exceed `capacity + (t_b − t_a) / T`: the theoretical arrival
/// time only grows by what is charged, and an admission needs it within `tau` of now.
fn gcra_never_over(admits: &[(u64, u64, u64)], adjusts: &[(u64, i64)], t_us: u64, capacity: u64) -> Result<(), String> {
    judge::judge(Rule::Rate { capacity, emission_us: t_us }, &record(admits, adjusts))
}

/// At every grant, the leases surely still held (granted earlier, and not yet released by a
/// lower bound of their release: grant + measured hold) number at most `limit − 1`, and at most
/// the count the server itself reported (`limit − 1 − remaining`). Fencing tokens increase.
fn concurrent_never_over(grants: &[(u64, u64, u64, u64)], limit: u64) -> Result<(), String> {
    let mut grants = grants.to_vec();
    // The grants of one batched script share its instant; their fencing tokens keep their order.
    grants.sort_unstable_by_key(|&(g, _, _, token)| (g, token));
    let mut held: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut last_token = 0;
    for &(g, hold_us, remaining, token) in &grants {
        while held.peek().is_some_and(|Reverse(end)| *end <= g) {
            held.pop();
        }
        let surely_held = held.len() as u64;
        if surely_held >= limit {
            return Err(format!("a lease was granted at {g} µs while {surely_held} leases were held (limit {limit})"));
        }
        if surely_held > limit - 1 - remaining {
            return Err(format!(
                "at {g} µs the server counted {} other holders but {surely_held} were held",
                limit - 1 - remaining
            ));
        }
        if token <= last_token {
            return Err(format!("fencing token {token} at {g} µs does not exceed the previous {last_token}"));
        }
        last_token = token;
        // Lower bound of the release's server time, minus a margin for clock slewing.
        held.push(Reverse(g + hold_us - hold_us / 1000 - 2));
    }
    Ok(())
}

/// CPU seconds a standalone server has used so far (0 for clusters).
fn redis_cpu(target: &Target) -> f64 {
    let Target::Standalone(url) = target else { return 0.0 };
    let port = url.rsplit(':').next().unwrap();
    let out = Command::new("redis-cli").args(["-p", port, "INFO", "cpu"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .map(|l| l.split(':').nth(1).unwrap().trim().parse::<f64>().unwrap())
        .sum()
}

/// Runs every job, prints a table and fails with every violation found.
fn run_suite(target: &Target, jobs: &[Job], processes: u64, tasks: u64, calling: Duration) {
    let mut failures = Vec::new();
    let suite_started = Instant::now();
    eprintln!(
        "{:<15} {:>9} {:>9} {:>9} {:>12} {:>9} {:>8} {:>8}  given arrivals",
        "kind", "attempts", "admitted", "span ms", "theoretical", "fraction", "wall s", "redis s"
    );
    let only = std::env::var("RK_LOAD_ONLY").ok();
    for job in jobs.iter().filter(|j| only.as_deref().map_or(true, |o| o.split(',').any(|o| o == j.label()))) {
        let cpu_before = redis_cpu(target);
        let c = run_job(target, job, processes, tasks, calling);
        let cpu = redis_cpu(target) - cpu_before;
        let attempts: u64 = c.tasks.iter().map(|t| t.2).sum();
        let admitted: u64 = c.tasks.iter().map(|t| t.3).sum();
        match judge(job, &c) {
            Ok(v) => {
                let replay = v.given_arrivals.map(|r| {
                    format!(
                        "{} of {} → {:.1}%, {} decisions differ",
                        r.library,
                        r.model,
                        r.library as f64 * 100.0 / r.model as f64,
                        r.differ
                    )
                });
                eprintln!(
                    "{:<15} {:>9} {:>9} {:>9.0} {:>12.1} {:>8.1}% {:>8.2} {:>8.2}  {}",
                    job.label(),
                    attempts,
                    admitted,
                    v.span_us as f64 / 1e3,
                    v.theoretical,
                    v.fraction() * 100.0,
                    c.wall.as_secs_f64(),
                    cpu,
                    replay.unwrap_or_default()
                );
                match v.given_arrivals {
                    // The floor is what a model limiter admits from the arrivals the server saw.
                    Some(r) if (r.library as f64) < 0.95 * r.model as f64 => failures.push(format!(
                        "{}: admitted {} units where a model limiter given the same arrivals admits {} ({} decisions differ)",
                        job.label(),
                        r.library,
                        r.model,
                        r.differ
                    )),
                    Some(_) => {}
                    // Concurrent: how full the server's own count of holders was.
                    None if v.fraction() < 0.95 => failures.push(format!(
                        "{}: held {} of {:.1} slot samples ({:.1}%) — below 95%",
                        job.label(),
                        v.admitted,
                        v.theoretical,
                        v.fraction() * 100.0
                    )),
                    None => {}
                }
                if admitted * 2 > attempts {
                    failures.push(format!(
                        "{}: {admitted} of {attempts} attempts admitted: not contended, retune",
                        job.label()
                    ));
                }
            }
            Err(e) => {
                eprintln!("{:<15} {:>9} {:>9} OVER-ADMISSION: {e}", job.label(), attempts, admitted);
                failures.push(format!("{}: {e}", job.label()));
            }
        }
    }
    eprintln!("suite took {:.1} s", suite_started.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "limiter violations:\n{}", failures.join("\n"));
}

const MS: u64 = 1000;

// ------------------------------------------------------------------------------------------
// 1. Over-admission across OS processes, standalone Redis.
// ------------------------------------------------------------------------------------------

fn standalone_jobs() -> Vec<Job> {
    vec![
        Job::Bucket { limit: 20, interval_us: 100 * MS },
        Job::Window { windows: vec![(20, 200 * MS)] },
        Job::Window { windows: vec![(10, 100 * MS), (50, 1000 * MS)] },
        Job::Sliding { limits: vec![(50, 500 * MS, 50 * MS), (150, 2000 * MS, 250 * MS)] },
        Job::Token { rate: 200, capacity: 50, max_cost: 3 },
        Job::Leaky { size: 20, drain_us: 100 * MS },
        Job::Points { capacity: 100, refill_us: 500 * MS, max_estimate: 5, max_actual: 8 },
        Job::Concurrent { limit: 8, lock_us: 30_000 * MS, hold_min_us: 10 * MS, hold_max_us: 40 * MS },
    ]
}

#[test]
fn no_over_admission_across_processes_on_redis() {
    let _heavy = heavy_lock();
    let server = RedisServer::start();
    run_suite(&Target::Standalone(server.url()), &standalone_jobs(), 8, 8, calling_time());
}

// ------------------------------------------------------------------------------------------
// 4. The same on a 3-master Redis Cluster (lighter).
// ------------------------------------------------------------------------------------------

#[test]
fn no_over_admission_across_processes_on_redis_cluster() {
    let _heavy = heavy_lock();
    let cluster = RedisCluster::start();
    let jobs = [
        Job::Token { rate: 250, capacity: 20, max_cost: 2 },
        Job::Window { windows: vec![(10, 100 * MS)] },
        Job::Concurrent { limit: 4, lock_us: 30_000 * MS, hold_min_us: 10 * MS, hold_max_us: 30 * MS },
    ];
    run_suite(&Target::Cluster(cluster.seeds()), &jobs, 4, 4, calling_time());
}

// ------------------------------------------------------------------------------------------
// 2. SCRIPT FLUSH storm.
// ------------------------------------------------------------------------------------------

/// How many times `command` ran on `server` (INFO commandstats).
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    support::command_calls(&server.cli(&["INFO", "commandstats"]), command)
}

/// Meanwhile, every other script (GCRA check and adjust, the log, concurrent check and
/// release) runs in a loop until `done`: returns the rounds run and the errors met.
async fn other_scripts_until(backend: Backend, done: Arc<AtomicBool>) -> (u64, Vec<String>) {
    let ms = Duration::from_millis;
    let token = backend.token_bucket("storm-tb", 1000.0, 50).unwrap();
    let points = backend.points("storm-pt", 100, ms(1000)).unwrap();
    let window = backend
        .windows(
            "storm-w",
            &[WindowLimit { limit: 20, interval: ms(100) }, WindowLimit { limit: 100, interval: ms(1000) }],
        )
        .unwrap();
    let conc = backend.concurrent("storm-cc", 2, ms(10_000)).unwrap();
    let (mut rounds, mut errors) = (0, Vec::new());
    while !done.load(Ordering::Relaxed) {
        rounds += 1;
        if let Err(e) = token.check(None, 1).await {
            errors.push(format!("token_bucket check: {e}"));
        }
        match points.check(None, 3).await {
            Ok(d) if d.allowed => {
                if let Err(e) = points.points_used(None, 3, 1).await {
                    errors.push(format!("points_used: {e}"));
                }
            }
            Ok(_) => {}
            Err(e) => errors.push(format!("points check: {e}")),
        }
        if let Err(e) = window.check(None, 1).await {
            errors.push(format!("window check: {e}"));
        }
        match conc.check(None, 1).await {
            Ok(d) => match d.lease {
                Some(lease) => {
                    if let Err(e) = conc.release(None, &lease).await {
                        errors.push(format!("concurrent release: {e}"));
                    }
                }
                None => errors.push("concurrent: refused with every slot free".into()),
            },
            Err(e) => errors.push(format!("concurrent check: {e}")),
        }
    }
    (rounds, errors)
}

#[test]
fn script_flush_storm_neither_fails_nor_miscounts() {
    let _heavy = heavy_lock();
    let server = RedisServer::start();
    let prefix = unique_prefix("fl");
    let backend = Target::Standalone(server.url()).backend(&prefix);
    let (limit, interval_us) = (40u64, 100 * MS);
    let limiter = backend.bucket("storm", limit, Duration::from_micros(interval_us)).unwrap();
    runtime().block_on(limiter.peek(None)).unwrap();
    let evals_before = command_calls(&server, "eval");
    let (tasks, per_task) = (8u64, 1250u64);

    let stop = AtomicBool::new(false);
    let flushes = AtomicU64::new(0);
    let started = Instant::now();
    let (results, (side_rounds, side_errors)) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
                flushes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let (results, side) = runtime().block_on(async {
            let side_done = Arc::new(AtomicBool::new(false));
            let side = tokio::spawn(other_scripts_until(backend.clone(), side_done.clone()));
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        for _ in 0..per_task {
                            out.push(
                                limiter.check(None, 1).await.map(|d| (d.decided_at_micros, d.allowed, d.remaining)),
                            );
                        }
                        out
                    })
                })
                .collect();
            let mut all = Vec::new();
            for h in handles {
                all.extend(h.await.unwrap());
            }
            side_done.store(true, Ordering::Relaxed);
            (all, side.await.unwrap())
        });
        stop.store(true, Ordering::Relaxed);
        (results, side)
    });
    let elapsed = started.elapsed();
    let flushes = flushes.load(Ordering::Relaxed);
    let evals = command_calls(&server, "eval") - evals_before;
    let errors: Vec<String> = results.iter().filter_map(|r| r.as_ref().err().map(|e| e.to_string())).collect();
    assert!(
        errors.is_empty(),
        "{} of 10,000 checks failed during the storm, e.g. {:?}",
        errors.len(),
        &errors[..3.min(errors.len())]
    );
    let mut decisions: Vec<(u64, bool, u64)> = results.into_iter().map(Result::unwrap).collect();
    // The calls of one batched script share its instant: within an instant, admissions come in
    // the order they counted down, before any refusal.
    decisions.sort_unstable_by_key(|&(t, allowed, remaining)| (t, Reverse(allowed), Reverse(remaining)));
    assert_eq!(decisions.len(), 10_000);
    assert!(side_errors.is_empty(), "the other scripts failed during the storm: {side_errors:?}");
    assert!(side_rounds >= 10, "only {side_rounds} rounds of the other scripts ran during the storm");
    assert!(flushes >= 3, "only {flushes} flushes in {elapsed:?}: the storm did not happen");
    assert!(evals > 0, "no EVAL ran: no call met a flushed script cache");

    // Per aligned window (server time): admissions in time order report remaining limit−1,
    // limit−2, … — so no admission was lost or counted twice — and every refusal comes after
    // the window's `limit` admissions.
    let longest_pause = decisions.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
    let mut windows: BTreeMap<u64, Vec<(u64, bool, u64)>> = BTreeMap::new();
    for d in &decisions {
        windows.entry(d.0 / interval_us).or_default().push(*d);
    }
    let last = *windows.keys().next_back().unwrap();
    let (mut admitted_total, mut saturated) = (0, 0);
    for (&w, calls) in &windows {
        let mut admitted = 0;
        for &(t, allowed, remaining) in calls {
            if allowed {
                assert_eq!(
                    remaining,
                    limit - 1 - admitted,
                    "window {w}: admission #{} at {t} µs reports remaining {remaining}",
                    admitted + 1
                );
                admitted += 1;
            } else {
                assert_eq!(admitted, limit, "window {w}: refused at {t} µs after only {admitted} admissions");
                assert_eq!(remaining, 0, "window {w}: a refusal reports remaining {remaining}");
            }
        }
        assert!(admitted <= limit, "window {w}: {admitted} admitted (limit {limit})");
        // (A window with fewer admissions had no refusal: every call in it was admitted. That
        // happens only when the machine stalls the callers for most of a window.)
        saturated += u64::from(admitted == limit);
        admitted_total += admitted;
    }
    assert!(saturated >= 3, "only {saturated} of {} windows reached the limit: the load was too light", windows.len());

    // What Redis holds for the last window equals what the decisions say was admitted in it.
    let keys = server.cli(&["KEYS", &format!("{prefix}:*:bucket:storm:h:*")]);
    let key = keys.lines().next().expect("the bucket's hash exists");
    let fields = server.cli(&["HGETALL", key]);
    let fields: Vec<&str> = fields.lines().collect();
    let hash: BTreeMap<&str, &str> = fields.chunks(2).map(|c| (c[0], c[1])).collect();
    let last_admitted = windows[&last].iter().filter(|d| d.1).count() as u64;
    // A fixed window's fields (see sliding.lua): `<limit index>:<d>:<p>:n` its block id, `…:c` its count.
    let field = |f: &str| hash.get(format!("0:{interval_us}:{interval_us}:{f}").as_str()).map(|v| v.to_string());
    assert_eq!(field("n"), Some(last.to_string()), "the stored block is the last window: {hash:?}");
    let stored: u64 = field("c").map_or(0, |v| v.parse().unwrap());
    assert_eq!(
        stored, last_admitted,
        "Redis counts {stored} in the last window, the decisions {last_admitted}: {hash:?}"
    );
    eprintln!(
        "SCRIPT FLUSH storm: 10,000 checks in {elapsed:?}, {flushes} flushes, {evals} EVAL reloads, \
         {admitted_total} admitted over {} windows ({saturated} full), all exact; {side_rounds} rounds of the \
         other scripts; longest pause between two checks {longest_pause} µs",
        windows.len()
    );
}

// ------------------------------------------------------------------------------------------
// 3. Every key has a TTL, and idle state goes away.
// ------------------------------------------------------------------------------------------

fn scan_keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let out = server.cli(&["--scan", "--pattern", pattern]);
    out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn every_key_has_a_ttl_and_idle_state_expires() {
    let server = RedisServer::start();
    let prefix = unique_prefix("ttl");
    let backend = Target::Standalone(server.url()).backend(&prefix);
    let (s, ms) = (Duration::from_secs, Duration::from_millis);
    runtime().block_on(async {
        let bucket = backend.bucket("b", 3, s(1)).unwrap();
        for key in [None, Some("a"), Some("reset-me")] {
            for _ in 0..5 {
                bucket.check(key, 1).await.unwrap();
            }
        }
        bucket.reset(Some("reset-me")).await.unwrap();
        bucket.check(Some("reset-me"), 1).await.unwrap();

        let window = backend.window("w", 3, s(1)).unwrap();
        for _ in 0..5 {
            window.check(None, 1).await.unwrap();
        }
        window.peek(None).await.unwrap();
        window.check(Some("reset-me"), 2).await.unwrap();
        window.reset(Some("reset-me")).await.unwrap();
        window.check(Some("reset-me"), 1).await.unwrap();

        let multi = backend
            .windows("mw", &[WindowLimit { limit: 2, interval: ms(500) }, WindowLimit { limit: 4, interval: s(2) }])
            .unwrap();
        for _ in 0..6 {
            multi.check(None, 1).await.unwrap();
        }
        // Waits until the 500 ms window frees a slot.
        multi.acquire(None, 1, Some(s(1))).await.unwrap();

        let sliding = backend
            .sliding_window(
                "sw",
                &[
                    SlidingLimit { duration: s(1), limit: 5, precision: Some(ms(100)) },
                    SlidingLimit { duration: s(2), limit: 8, precision: Some(ms(500)) },
                ],
            )
            .unwrap();
        for _ in 0..10 {
            sliding.check(None, 1).await.unwrap();
        }
        sliding.peek(Some("never-written")).await.unwrap();
        let fixed =
            backend.sliding_window("sf", &[SlidingLimit { duration: s(1), limit: 3, precision: None }]).unwrap();
        for _ in 0..4 {
            fixed.check(None, 1).await.unwrap();
        }

        let token = backend.token_bucket("tb", 10.0, 5).unwrap();
        for _ in 0..7 {
            token.check(None, 1).await.unwrap();
        }
        token.acquire(None, 1, Some(s(1))).await.unwrap();
        token.check(Some("reset-me"), 3).await.unwrap();
        token.reset(Some("reset-me")).await.unwrap();

        let leaky = backend.leaky("lk", 5, s(1)).unwrap();
        for _ in 0..7 {
            leaky.check(None, 1).await.unwrap();
        }

        // capacity 10 over 2 s: 200 ms per point; the state never runs more than 2 s ahead.
        let points = backend.points("pt", 10, s(2)).unwrap();
        assert!(points.check(None, 4).await.unwrap().allowed);
        points.points_used(None, 4, 6).await.unwrap();
        assert!(points.check(None, 3).await.unwrap().allowed);
        points.points_used(None, 3, 1).await.unwrap();
        points.check(Some("refund"), 2).await.unwrap();
        points.points_used(Some("refund"), 2, 0).await.unwrap();
        points.points_used(Some("never-charged"), 1, 0).await.unwrap();

        let conc = backend.concurrent("cc", 2, s(2)).unwrap();
        let a = conc.check(None, 1).await.unwrap().lease.unwrap();
        let b = conc.check(None, 1).await.unwrap().lease.unwrap();
        assert!(!conc.check(None, 1).await.unwrap().allowed);
        let waiter = {
            let conc = conc.clone();
            tokio::spawn(async move { conc.acquire(None, 1, Some(s(2))).await })
        };
        tokio::time::sleep(ms(100)).await;
        conc.release(None, &a).await.unwrap();
        let c = waiter.await.unwrap().expect("the waiter gets the released slot").lease.unwrap();
        conc.release(None, &c).await.unwrap();
        conc.release(None, &b).await.unwrap();
        // Never released: its state must still expire.
        conc.check(Some("abandoned"), 1).await.unwrap();
        conc.check(Some("reset-me"), 1).await.unwrap();
        conc.reset(Some("reset-me")).await.unwrap();
    });
    let last_call = Instant::now();

    let keys = scan_keys(&server, &format!("{prefix}:*"));
    for role in STATE_ROLES {
        assert!(keys.iter().any(|k| role_of(k) == role), "no key with role {role} among {keys:#?}");
    }
    let mut offenders = Vec::new();
    for key in &keys {
        let pttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
        // -1: no TTL. (-2: expired since the scan, and 0: expiring now, are fine.) Limiter state
        // lives at most its longest window (2 s) plus 1 s of slack; per-limiter metadata
        // (metrics) has its own long TTL.
        let bounded = !STATE_ROLES.contains(&role_of(key)) || pttl <= 3_000;
        if pttl == -1 || !bounded {
            offenders.push(format!("{key}: PTTL {pttl}"));
        }
    }
    assert!(offenders.is_empty(), "keys without a (bounded) TTL:\n{}", offenders.join("\n"));
    eprintln!("{} keys, all with a TTL (state: at most 3 s)", keys.len());

    // The longest window (2 s) plus the scripts' 1 s of slack later, no state is left, and what
    // is left (per-limiter metadata) still has a TTL.
    std::thread::sleep((last_call + Duration::from_millis(3_300)).saturating_duration_since(Instant::now()));
    let left: Vec<String> = scan_keys(&server, &format!("{prefix}:*"))
        .into_iter()
        .filter_map(|k| {
            let pttl: i64 = server.cli(&["PTTL", &k]).parse().unwrap();
            let left = pttl == -1 || (pttl >= 0 && STATE_ROLES.contains(&role_of(&k)));
            left.then(|| format!("{k}: PTTL {pttl}"))
        })
        .collect();
    assert!(left.is_empty(), "keys left 3.3 s after the last call:\n{}", left.join("\n"));
}

/// The roles of per-identity limiter state: GCRA `s`, counters `h` and `b`, log `z`, `d` and
/// `l`, concurrent holders `h`, token `t`, wake list `w` and grants `g`.
const STATE_ROLES: [&str; 9] = ["s", "h", "b", "z", "d", "l", "t", "w", "g"];

/// The role of `<prefix>:{<tag>}:<kind>:<name>:<role>:<key>`.
fn role_of(key: &str) -> &str {
    key.split(':').nth(4).unwrap_or("")
}

// ------------------------------------------------------------------------------------------
// The judges themselves catch over-admission (synthetic runs).
// ------------------------------------------------------------------------------------------

#[test]
fn judges_catch_over_admission() {
    let a = |t: u64, cost: u64| (t, cost, 0);
    // Fixed windows of 100 ms, limit 2: three in one aligned window is too many, but the same
    // three straddling a boundary are fine.
    assert!(bucket_never_over(&[a(1_010_000, 1), a(1_020_000, 1), a(1_090_000, 1)], 2, 100 * MS).is_err());
    assert!(bucket_never_over(&[a(1_090_000, 1), a(1_110_000, 1), a(1_120_000, 1)], 2, 100 * MS).is_ok());
    // …which a sliding window of 100 ms, limit 2, refuses; 100 ms apart is allowed again.
    assert!(window_never_over(&[a(1_090_000, 1), a(1_110_000, 1), a(1_120_000, 1)], &[(2, 100 * MS)]).is_err());
    assert!(window_never_over(&[a(1_090_000, 1), a(1_110_000, 1), a(1_190_000, 1)], &[(2, 100 * MS)]).is_ok());
    assert!(window_never_over(&[a(1_000_000, 1), a(1_000_001, 2)], &[(5, MS), (2, 100 * MS)]).is_err());
    // Sub-buckets: 2 per 2 blocks of 50 ms.
    let limits = [(2, 100 * MS, 50 * MS)];
    assert!(sliding_never_over(&[a(1_040_000, 1), a(1_060_000, 1), a(1_090_000, 1)], &limits).is_err());
    assert!(sliding_never_over(&[a(1_040_000, 1), a(1_060_000, 1), a(1_100_000, 1)], &limits).is_ok());
    // GCRA, 100 ms per unit, capacity 2: a burst of 2 then one unit per 100 ms.
    let t = 100 * MS;
    assert!(gcra_never_over(&[a(0, 2), a(100_000, 1), a(200_000, 1)], &[], t, 2).is_ok());
    assert!(gcra_never_over(&[a(0, 2), a(100_000, 1), a(199_999, 1)], &[], t, 2).is_err());
    assert!(gcra_never_over(&[a(5_000_000, 1), a(5_000_001, 2)], &[], t, 2).is_err());
    // An overcharge reported with points_used counts; a refund gives it back.
    assert!(gcra_never_over(&[a(0, 1), a(10, 1)], &[(5, 1)], t, 2).is_err());
    assert!(gcra_never_over(&[a(0, 2), a(10, 1)], &[(5, -1)], t, 2).is_ok());
    // Concurrent, limit 1: (grant µs, held µs, remaining, token).
    assert!(concurrent_never_over(&[(0, 10_000, 0, 1), (5_000, 10_000, 0, 2)], 1).is_err());
    assert!(concurrent_never_over(&[(0, 10_000, 0, 1), (11_000, 10_000, 0, 2)], 1).is_ok());
    assert!(concurrent_never_over(&[(0, 10_000, 0, 2), (11_000, 10_000, 0, 2)], 1).is_err(), "tokens increase");
    // Limit 2, and the server said it counted no other holder while one surely was held.
    assert!(concurrent_never_over(&[(0, 10_000, 1, 1), (5_000, 10_000, 1, 2)], 2).is_err());
    // The greedy maxima.
    assert_eq!(greedy_log(&[(2, 100 * MS)], 0, 250 * MS), 6);
    assert_eq!(greedy_log(&[(5, 50 * MS), (8, 500 * MS)], 0, 499_999), 8);
    assert_eq!(greedy_sliding(&[(2, 100 * MS, 50 * MS)], 0, 199_999), 4);
}

// The model limiters the floor is judged against, on synthetic arrivals `(µs, cost, library)`.
#[test]
fn models_replay_the_arrivals() {
    let counts = |r: Replay| (r.library, r.model, r.differ);
    // Fixed windows of 100 ms, limit 2: the third call of a window is refused, the next window
    // starts afresh; the library refused one call the model admits.
    let calls = [(0, 1, true), (10, 1, true), (20, 1, false), (100_000, 1, false), (100_001, 1, true)];
    assert_eq!(counts(replay_bucket(2, 100 * MS, &calls, 200 * MS)), (3, 4, 1));
    // Exact sliding window, 2 per 100 ms: the call at 100 ms is admitted once the first is gone.
    let calls = [(0, 1, true), (10, 1, true), (50_000, 1, false), (100_000, 1, true)];
    assert_eq!(counts(replay_log(&[(2, 100 * MS)], &calls, 100 * MS)), (3, 3, 0));
    // Sub-buckets: 2 per 2 blocks of 50 ms; a call in the third block finds the first gone.
    let calls = [(0, 1, true), (60_000, 1, true), (70_000, 1, true), (100_000, 1, true)];
    assert_eq!(counts(replay_sliding(&[(2, 100 * MS, 50 * MS)], &calls, 150 * MS)), (4, 3, 1));
    // GCRA, 100 ms per unit, capacity 2: a burst of 2, then one unit per 100 ms; a refund at
    // 50 ms gives one back, a charge at 150 ms takes one.
    let calls = [(0, 2, true), (60_000, 1, false), (100_000, 1, true), (200_000, 1, false)];
    assert_eq!(counts(replay_gcra(100 * MS, 2, &calls, &[(50_000, -1), (150_000, 1)], 200 * MS)), (3, 4, 1));
    assert_eq!(counts(replay_gcra(100 * MS, 2, &calls, &[], 200 * MS)), (3, 4, 1));
    // A charge of 2 at 150 ms leaves nothing for the call at 200 ms.
    assert_eq!(counts(replay_gcra(100 * MS, 2, &calls, &[(150_000, 2)], 200 * MS)), (3, 3, 0));
}
