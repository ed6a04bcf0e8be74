//! `bench-redis`: ratekeeper's Redis client against `redis-benchmark` running the SAME Lua script
//! with the SAME arguments on the same server, side by side in one run; then the memory each
//! limiter kind's state takes in Redis.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-redis            # full run (~75 s)
//! cargo run --release -p ratekeeper-bench --bin bench-redis -- --quick # short run (~20 s)
//! ```
//!
//! `--only-memory` prints the memory table alone; `--only-ratekeeper seq|task|blocking|inflight
//! SECONDS` runs one ratekeeper loop alone (for profilers) and prints its CPU per check.
//!
//! The benchmark starts its own `redis-server` on a free loopback port (never 6379, no
//! persistence) and stops it by pid at the end.
//!
//! What is compared, for the token bucket (GCRA script) and the bucket (sliding script):
//! - ratekeeper: `Backend::redis_with(RedisConfig::new(url).deadline(5 s))` (the default
//!   configuration but for the deadline, raised from 200 ms so that a loaded machine does not
//!   fail the run; a deadline costs the same per call whatever its length), and
//!   `limiter.check(Some(key), 1).await`, the public entry point returning a full `Decision`.
//!   Keys are `user-<12 digits>`, 100,000 of them, walked in a fixed pseudo-random order.
//! - redis-benchmark: `EVALSHA <sha> 1 <key> <argv…>` where sha, KEYS and ARGV are captured with
//!   MONITOR from a real ratekeeper call (so they are exactly what the library sends); the key's
//!   16-hex-digit hash tag and the user key become `0000__rand_int__` and `user-__rand_int__`
//!   with `-r 100000`, so keys have the same length and the key space the same size.
//!
//! Scenarios (rows marked "target" are the acceptance criteria: ratio >= 0.90):
//! - sequential (target): one call at a time, a `check_blocking` loop (the calling thread drives
//!   its own connection, as redis-benchmark does), vs `redis-benchmark -c 1`. Informational rows
//!   on the token bucket: a `ratekeeper::runtime().block_on` loop of `check(...).await` (each call
//!   handed to the runtime's workers and back); the same loop spawned onto the runtime as one
//!   task; redis-rs' synchronous `Connection` (no runtime, no ratekeeper); and redis-rs' own
//!   `MultiplexedConnection` sending the same EVALSHA from a `block_on` loop under a
//!   `tokio::time::timeout` (no ratekeeper at all: the floor of the async path's design).
//! - 64 in flight (target): 64 tasks on the runtime, each looping `check(...).await`, sharing the
//!   one multiplexed connection, vs `redis-benchmark -c 1 -P 16`. Informational: the same with
//!   raw redis-rs, and `redis-benchmark -c 64` alone.
//!
//! A command holding a NUL byte (the token bucket's and the sliding window's specs are packed as
//! MessagePack) cannot reach redis-benchmark, whose command comes from argv: its floor is then
//! `bench/floor_client.c -e`, a C client making redis-benchmark's system calls per request (a
//! batch per write with `-P`, a process per connection with `-c`, redis-benchmark's `-r` keys),
//! and each row names the client that ran.
//!
//! Method: each scenario warms up, then runs rounds interleaving the client and redis-benchmark
//! so that machine noise hits both alike; medians are reported. redis-benchmark's request count
//! per round is sized from its previous rate to last about one round; its own rate (`--csv`
//! rps) is used as reported. CPU per call comes from /proc (the client process, redis-benchmark
//! as a waited-for child, and redis-server), at 10 ms resolution.
//!
//! Then MEMORY USAGE: for every limiter kind, a few checks 110 ms apart on one key (one lease
//! held for the concurrent limiter), then every Redis key of that key (found with SCAN on the
//! limiter's own prefix) is measured with `MEMORY USAGE <key> SAMPLES 0` and summed; per-limiter
//! keys (aggregated metrics) are listed but not counted.

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratekeeper::{Backend, Limiter, RedisConfig, SlidingLimit, WindowLimit};
use ratekeeper_bench::report::{Report, Row as ReportRow};

const KEYS: usize = 100_000;
/// How far apart the concurrent tasks start in the key sequence.
const SEQUENCE: usize = 1 << 18;
const IN_FLIGHT: usize = 64;
const PIPELINE: usize = 16;
/// The per-call deadline of the measured backend (and of the redis-rs reference).
const DEADLINE: Duration = Duration::from_secs(5);

struct Settings {
    rounds: usize,
    /// Rounds of the informational rows.
    info_rounds: usize,
    round: Duration,
    warmup: Duration,
}

// ---------------------------------------------------------------------------------------------
// The server

/// A redis-server of our own on a free loopback port, stopped by pid when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local address").port();
        drop(listener);
        if port != 6379 {
            return port;
        }
    }
}

impl Server {
    fn start() -> Server {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("ratekeeper-bench-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed?)");
        let server = Server { child, port, dir };
        let start = Instant::now();
        loop {
            if let Ok(mut c) = Resp::connect(port) {
                if let Ok(Value::Simple(s)) = c.try_call(&[b"PING"]) {
                    if s == "PONG" {
                        break;
                    }
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "redis-server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal RESP client for the set-up commands (SCRIPT LOAD, MONITOR, SCAN, MEMORY USAGE)

#[derive(Debug)]
enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Value>>),
}

impl Value {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Value::Simple(s) => s.clone().into_bytes(),
            Value::Bulk(Some(b)) => b.clone(),
            other => panic!("expected a string reply, got {other:?}"),
        }
    }

    fn int(&self) -> i64 {
        match self {
            Value::Int(i) => *i,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }
}

struct Resp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Resp {
    fn connect(port: u16) -> std::io::Result<Resp> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Resp { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out)
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    fn read(&mut self) -> std::io::Result<Value> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(1);
        let number = || rest.parse::<i64>().map_err(|e| std::io::Error::other(format!("bad RESP {line:?}: {e}")));
        Ok(match kind {
            "+" => Value::Simple(rest.to_owned()),
            "-" => Value::Error(rest.to_owned()),
            ":" => Value::Int(number()?),
            "$" => {
                let n = number()?;
                if n < 0 {
                    Value::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.reader.read_exact(&mut buf)?;
                    buf.truncate(n as usize);
                    Value::Bulk(Some(buf))
                }
            }
            "*" => {
                let n = number()?;
                if n < 0 {
                    Value::Array(None)
                } else {
                    Value::Array(Some((0..n).map(|_| self.read()).collect::<std::io::Result<_>>()?))
                }
            }
            _ => return Err(std::io::Error::other(format!("unexpected RESP line {line:?}"))),
        })
    }

    fn try_call(&mut self, args: &[&[u8]]) -> std::io::Result<Value> {
        self.send(args)?;
        self.read()
    }

    fn call(&mut self, args: &[&[u8]]) -> Value {
        match self.try_call(args).expect("talk to redis-server") {
            Value::Error(e) => {
                panic!("redis-server answered {:?} with an error: {e}", String::from_utf8_lossy(args[0]))
            }
            v => v,
        }
    }

    /// Every key matching `pattern`, with SCAN.
    fn scan(&mut self, pattern: &str) -> Vec<Vec<u8>> {
        let mut cursor = b"0".to_vec();
        let mut keys = Vec::new();
        loop {
            let Value::Array(Some(reply)) =
                self.call(&[b"SCAN", &cursor, b"MATCH", pattern.as_bytes(), b"COUNT", b"1000"])
            else {
                panic!("unexpected SCAN reply");
            };
            cursor = reply[0].bytes();
            if let Value::Array(Some(found)) = &reply[1] {
                keys.extend(found.iter().map(Value::bytes));
            }
            if cursor == b"0" {
                keys.sort();
                keys.dedup();
                return keys;
            }
        }
    }
}

/// Splits a MONITOR line (`+<time> [<db> <addr>] "arg" "arg" …`) into its arguments, undoing
/// redis' `sdscatrepr` quoting.
fn parse_monitor_line(line: &str) -> Vec<Vec<u8>> {
    let start = line.find("] ").map(|i| i + 2).unwrap_or_else(|| panic!("not a MONITOR line: {line:?}"));
    let bytes = &line.as_bytes()[start..];
    let mut args = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        assert_eq!(bytes[i], b'"', "unquoted MONITOR argument in {line:?}");
        i += 1;
        let mut arg = Vec::new();
        while bytes[i] != b'"' {
            if bytes[i] == b'\\' {
                i += 1;
                match bytes[i] {
                    b'n' => arg.push(b'\n'),
                    b'r' => arg.push(b'\r'),
                    b't' => arg.push(b'\t'),
                    b'a' => arg.push(7),
                    b'b' => arg.push(8),
                    b'x' => {
                        let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("hex escape");
                        arg.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                        i += 2;
                    }
                    other => arg.push(other),
                }
            } else {
                arg.push(bytes[i]);
            }
            i += 1;
        }
        i += 1;
        args.push(arg);
    }
    args
}

// ---------------------------------------------------------------------------------------------
// The workloads

/// The keys the client side walks: position `i` is key `user-<12 digits>` with the digits a
/// fixed pseudo-random function of `i`, below [`KEYS`]. Like redis-benchmark's `__rand_int__`,
/// a key is made on the spot (no table whose cache misses would be charged to the client).
struct Workload;

/// One key, on the stack.
struct UserKey([u8; 17]);

impl UserKey {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("ASCII")
    }
}

impl Workload {
    fn new() -> Arc<Workload> {
        Arc::new(Workload)
    }

    fn key(&self, position: usize) -> UserKey {
        // splitmix64: the same sequence every run.
        let mut z = (position as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let mut n = (z ^ (z >> 31)) % KEYS as u64;
        let mut key = *b"user-000000000000";
        for digit in key[5..].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        UserKey(key)
    }
}

/// One async call on the key at `position` of the workload: 1 if admitted.
trait Caller: Clone + Send + Sync + 'static {
    fn call(&self, position: usize) -> impl Future<Output = u64> + Send + '_;
}

/// ratekeeper: `limiter.check(Some(key), 1).await`.
#[derive(Clone)]
struct Ratekeeper {
    limiter: Limiter,
    work: Arc<Workload>,
}

impl Caller for Ratekeeper {
    #[inline]
    async fn call(&self, position: usize) -> u64 {
        let key = self.work.key(position);
        expect_allowed(self.limiter.check(Some(key.as_str()), 1).await)
    }
}

fn expect_allowed(result: ratekeeper::Result<ratekeeper::Decision>) -> u64 {
    match result {
        Ok(d) => d.allowed as u64,
        Err(e) => panic!("ratekeeper check failed: {e}"),
    }
}

/// Reference without ratekeeper: redis-rs' own `MultiplexedConnection` on the same runtime,
/// sending the same EVALSHA (sha, key shape, ARGV) with `Cmd::query_async` under a
/// `tokio::time::timeout` of the same deadline.
#[derive(Clone)]
struct RawRedisRs {
    conn: redis::aio::MultiplexedConnection,
    sha: Arc<str>,
    /// Each key is `<before>{0000<12 digits>}<after><user key>`, as redis-benchmark sends it
    /// (the limiter's key, then the pause key).
    keys: Arc<[(String, String)]>,
    argv: Arc<[Vec<u8>]>,
    work: Arc<Workload>,
}

impl RawRedisRs {
    fn connect(server: &Server, command: &BenchCommand, work: &Arc<Workload>) -> RawRedisRs {
        let client = redis::Client::open(server.url()).expect("a redis-rs client");
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let conn = ratekeeper::runtime()
            .block_on(client.get_multiplexed_async_connection_with_config(&config))
            .expect("a redis-rs connection");
        let key_count: usize = command.text(2).parse().expect("the number of keys");
        let keys: Vec<(String, String)> = (3..3 + key_count)
            .map(|i| command.text(i))
            .map(|pattern| {
                let (before, rest) = pattern.split_once("{0000__rand_int__}").expect("the key pattern");
                let after = rest.strip_suffix("user-__rand_int__").expect("the key pattern");
                (before.to_owned(), after.to_owned())
            })
            .collect();
        RawRedisRs {
            conn,
            sha: command.text(1).into(),
            keys: keys.into(),
            argv: command.args[3 + key_count..].to_vec().into(),
            work: work.clone(),
        }
    }
}

impl RawRedisRs {
    /// The keys of the captured command for `user`, as redis-benchmark would send them.
    fn keys_of(&self, user: &str) -> Vec<String> {
        self.keys.iter().map(|(before, after)| format!("{before}{{0000{}}}{after}{user}", &user[5..])).collect()
    }
}

impl Caller for RawRedisRs {
    fn call(&self, position: usize) -> impl Future<Output = u64> + Send + '_ {
        let mut conn = self.conn.clone();
        async move {
            let user = self.work.key(position);
            let user = user.as_str();
            let keys = self.keys_of(user);
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&*self.sha).arg(keys.len()).arg(keys).arg(&*self.argv);
            match tokio::time::timeout(DEADLINE, cmd.query_async::<Vec<i64>>(&mut conn)).await {
                Ok(Ok(reply)) => (reply.first() == Some(&1)) as u64,
                Ok(Err(e)) => panic!("redis-rs call failed: {e}"),
                Err(_) => panic!("redis-rs call timed out"),
            }
        }
    }
}

/// Reference without ratekeeper and without any runtime: redis-rs' synchronous `Connection`,
/// the calling thread writing and reading its own socket (what redis-benchmark does), sending
/// the same EVALSHA as [`RawRedisRs`] with the deadline as the socket's read timeout.
fn raw_sync(server: &Server, raw: &RawRedisRs, offset: usize, duration: Duration) -> Run {
    let client = redis::Client::open(server.url()).expect("a redis-rs client");
    let mut conn = client.get_connection().expect("a synchronous redis-rs connection");
    conn.set_read_timeout(Some(DEADLINE)).expect("a read timeout");
    let (mut calls, mut admitted, mut position) = (0u64, 0u64, offset);
    let start = Instant::now();
    loop {
        for _ in 0..BATCH {
            let user = raw.work.key(position);
            let keys = raw.keys_of(user.as_str());
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&*raw.sha).arg(keys.len()).arg(keys).arg(&*raw.argv);
            let reply: Vec<i64> = cmd.query(&mut conn).unwrap_or_else(|e| panic!("redis-rs call failed: {e}"));
            admitted += (reply.first() == Some(&1)) as u64;
            position += 1;
        }
        calls += BATCH as u64;
        if start.elapsed() >= duration {
            return Run { calls, admitted, seconds: start.elapsed().as_secs_f64() };
        }
    }
}

/// Calls between two reads of the timer.
const BATCH: usize = 64;

/// What one measured run did.
#[derive(Clone, Copy, Default)]
struct Run {
    calls: u64,
    admitted: u64,
    seconds: f64,
}

/// A `runtime().block_on` loop of `call(...).await`, one call at a time.
fn sequential<C: Caller>(caller: &C, offset: usize, duration: Duration) -> Run {
    ratekeeper::runtime().block_on(sequential_loop(caller, offset, duration))
}

async fn sequential_loop<C: Caller>(caller: &C, offset: usize, duration: Duration) -> Run {
    let (mut calls, mut admitted, mut position) = (0u64, 0u64, offset);
    let start = Instant::now();
    loop {
        for _ in 0..BATCH {
            admitted += caller.call(position).await;
            position += 1;
        }
        calls += BATCH as u64;
        if start.elapsed() >= duration {
            return Run { calls, admitted, seconds: start.elapsed().as_secs_f64() };
        }
    }
}

/// The sequential loop spawned onto the runtime as one task.
fn sequential_task<C: Caller>(caller: &C, offset: usize, duration: Duration) -> Run {
    let caller = caller.clone();
    let runtime = ratekeeper::runtime();
    runtime
        .block_on(runtime.spawn(async move { sequential_loop(&caller, offset, duration).await }))
        .expect("bench task panicked")
}

/// A loop of `check_blocking` on the calling thread.
fn blocking(rk: &Ratekeeper, offset: usize, duration: Duration) -> Run {
    let (mut calls, mut admitted, mut position) = (0u64, 0u64, offset);
    let start = Instant::now();
    loop {
        for _ in 0..BATCH {
            admitted += expect_allowed(rk.limiter.check_blocking(Some(rk.work.key(position).as_str()), 1));
            position += 1;
        }
        calls += BATCH as u64;
        if start.elapsed() >= duration {
            return Run { calls, admitted, seconds: start.elapsed().as_secs_f64() };
        }
    }
}

/// `tasks` tasks on the runtime, each looping `call(...).await`, for `duration`.
fn in_flight<C: Caller>(caller: &C, tasks: usize, duration: Duration) -> Run {
    let runtime = ratekeeper::runtime();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (caller, stop) = (caller.clone(), stop.clone());
            runtime.spawn(async move {
                let (mut calls, mut admitted, mut position) = (0u64, 0u64, t * (SEQUENCE / tasks));
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..16 {
                        admitted += caller.call(position).await;
                        position += 1;
                    }
                    calls += 16;
                }
                (calls, admitted)
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    let (calls, admitted) = runtime.block_on(async {
        let mut total = (0, 0);
        for h in handles {
            let (c, a) = h.await.expect("bench task panicked");
            total = (total.0 + c, total.1 + a);
        }
        total
    });
    Run { calls, admitted, seconds: start.elapsed().as_secs_f64() }
}

// ---------------------------------------------------------------------------------------------
// redis-benchmark

/// The command the floor client runs: EVALSHA with the captured sha, key pattern and ARGV, as
/// their exact bytes.
struct BenchCommand {
    script: &'static str,
    args: Vec<Vec<u8>>,
}

impl BenchCommand {
    /// The command for a log line (bytes outside printable ASCII escaped).
    fn display(&self) -> String {
        let show = |a: &Vec<u8>| if a.is_empty() { "''".to_owned() } else { a.escape_ascii().to_string() };
        self.args.iter().map(show).collect::<Vec<_>>().join(" ")
    }

    /// An argument as text (the sha, the key count, the key patterns: ASCII).
    fn text(&self, i: usize) -> &str {
        std::str::from_utf8(&self.args[i]).expect("an ASCII argument")
    }

    /// Which client runs the floor: redis-benchmark, which takes the command through argv, where
    /// a NUL byte cannot pass; or, for a command with one (a spec packed as MessagePack),
    /// `bench/floor_client.c -e`, a C client making redis-benchmark's system calls per request,
    /// with its `-c`, `-P` and `-r`.
    fn client(&self) -> &'static str {
        if self.args.iter().any(|a| a.contains(&0)) {
            "floor_client.c -e"
        } else {
            "redis-benchmark"
        }
    }
}

/// Runs the floor client once (see [`BenchCommand::client`]): its rate.
fn redis_benchmark(port: u16, command: &BenchCommand, clients: usize, pipeline: usize, requests: u64) -> f64 {
    if command.client() != "redis-benchmark" {
        return floor_client(port, command, clients, pipeline, requests);
    }
    let args = command.args.iter().map(|a| std::str::from_utf8(a).expect("no NUL, so text")).collect::<Vec<_>>();
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string(), "-P", &pipeline.to_string(), "-n", &requests.to_string()])
        .args(["-r", &KEYS.to_string(), "--csv"])
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-benchmark (is it installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-benchmark failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    // `"test","rps","avg_latency_ms",…` then `"<command>","<rps>",…`: the rps is the field
    // after the command, which is the 7th from the end.
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("\"EVALSHA"))
        .unwrap_or_else(|| panic!("no result line in redis-benchmark's output: {stdout}"));
    let fields: Vec<&str> = line.split("\",\"").collect();
    let rps = fields[fields.len() - 7].trim_matches('"');
    rps.parse().unwrap_or_else(|e| panic!("bad rps {rps:?} in {line:?}: {e}"))
}

/// Runs `bench/floor_client.c` (built once with the system's C compiler) once: its rate.
fn floor_client(port: u16, command: &BenchCommand, clients: usize, pipeline: usize, requests: u64) -> f64 {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = std::env::temp_dir().join(format!("rk-bench-floor-{}", std::process::id()));
    let binary = BUILT.get_or_init(|| {
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let binary = dir.join("floor_client");
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/floor_client.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let built = Command::new(cc).args(["-O2", "-o"]).arg(&binary).arg(source).status().expect("run cc");
        assert!(built.success(), "cc failed on {source}");
        binary
    });
    let mut resp = format!("*{}\r\n", command.args.len()).into_bytes();
    for arg in &command.args {
        resp.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        resp.extend_from_slice(arg);
        resp.extend_from_slice(b"\r\n");
    }
    let file = dir.join("command.resp");
    std::fs::write(&file, resp).expect("write the command");
    // -e: redis-benchmark's system calls per request, so that it stands in for it.
    let out = Command::new(binary)
        .args(["-e", "-c", &clients.to_string(), "-P", &pipeline.to_string(), "-r", &KEYS.to_string()])
        .args([port.to_string(), requests.to_string()])
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("run floor_client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "floor_client failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    stdout.trim().parse().unwrap_or_else(|e| panic!("bad rate {stdout:?}: {e}"))
}

/// Captures, with MONITOR, the EVALSHA a check of `probe` on `limiter` sends, and turns it into
/// a redis-benchmark command over the same key space shape.
fn capture(port: u16, limiter: &Limiter, probe: &str, shas: &HashMap<String, &'static str>) -> BenchCommand {
    let mut monitor = Resp::connect(port).expect("connect for MONITOR");
    assert!(matches!(monitor.call(&[b"MONITOR"]), Value::Simple(_)));
    expect_allowed(limiter.check_blocking(Some(probe), 1));
    let args = loop {
        let line = monitor.line().expect("read MONITOR");
        if line.contains("] \"EVALSHA\"") || line.contains("] \"evalsha\"") {
            break parse_monitor_line(&line);
        }
    };
    drop(monitor);
    let text = |i: usize| String::from_utf8(args[i].clone()).expect("an ASCII sha, key count and keys");
    let script = *shas.get(&text(1)).unwrap_or_else(|| panic!("unknown script sha {}", text(1)));
    let key_count: usize = text(2).parse().expect("the number of keys");
    let mut bench = vec![b"EVALSHA".to_vec(), args[1].clone(), args[2].clone()];
    for key in (3..3 + key_count).map(text) {
        // `<prefix>:{<16 hex>}:<kind>:<name>:<role>:<probe>`
        let open = key.find('{').expect("hash tag");
        let close = key.find('}').expect("hash tag");
        assert_eq!(close - open - 1, 16, "a 16-hex-digit tag: {key}");
        let stem = key.strip_suffix(probe).expect("the key ends with the user key");
        let pattern = format!("{}{{0000__rand_int__}}{}user-__rand_int__", &key[..open], &stem[close + 1..]);
        // With `__rand_int__` as 12 digits, keys are exactly as long as ratekeeper's.
        assert_eq!(pattern.replace("__rand_int__", "000000000000").len(), key.len(), "{pattern} vs {key}");
        bench.push(pattern.into_bytes());
    }
    bench.extend(args[3 + key_count..].iter().cloned());
    BenchCommand { script, args: bench }
}

// ---------------------------------------------------------------------------------------------
// Measuring

/// CPU seconds (user + system) from /proc: a process's own (`self` or a pid), or those of its
/// waited-for children (redis-benchmark runs).
fn cpu_seconds(pid: &str, children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return f64::NAN };
    // Fields after `pid (comm) `: state is index 0, so utime/stime/cutime/cstime are 11..=14.
    let fields: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 2)..].split_whitespace().collect();
    let at = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(f64::NAN);
    let ticks = if children { at(13) + at(14) } else { at(11) + at(12) };
    ticks / 100.0 // USER_HZ
}

/// One side's result over the rounds of a scenario.
#[derive(Default)]
struct Side {
    rates: Vec<f64>,
    calls: u64,
    admitted: u64,
    client_cpu: f64,
    server_cpu: f64,
}

impl Side {
    fn median(&self) -> f64 {
        median(&mut self.rates.clone())
    }

    fn client_us(&self) -> f64 {
        self.client_cpu * 1e6 / self.calls as f64
    }

    fn server_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.calls as f64
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Runs redis-benchmark and the client loops, keeping redis-benchmark's last rate per
/// configuration to size its next run to about one round.
struct Bench<'a> {
    settings: &'a Settings,
    port: u16,
    server_pid: String,
    last_rate: HashMap<(String, usize, usize), f64>,
}

impl Bench<'_> {
    /// One redis-benchmark round, with its CPU and the server's.
    fn benchmark_round(&mut self, command: &BenchCommand, clients: usize, pipeline: usize, side: &mut Side) {
        let key = (command.text(1).to_owned(), clients, pipeline);
        let rate = match self.last_rate.get(&key) {
            Some(&rate) => rate,
            None => redis_benchmark(self.port, command, clients, pipeline, 5_000 * pipeline as u64),
        };
        let requests = ((rate * self.settings.round.as_secs_f64()) as u64).max(5_000);
        let (client0, server0) = (cpu_seconds("self", true), cpu_seconds(&self.server_pid, false));
        let rate = redis_benchmark(self.port, command, clients, pipeline, requests);
        side.client_cpu += cpu_seconds("self", true) - client0;
        side.server_cpu += cpu_seconds(&self.server_pid, false) - server0;
        side.calls += requests;
        side.admitted += requests; // not reported by redis-benchmark
        side.rates.push(rate);
        self.last_rate.insert(key, rate);
    }

    /// One round of a client loop, with its CPU (the whole process) and the server's.
    fn client_round(&self, side: &mut Side, round: Duration, run: &mut dyn FnMut(Duration) -> Run) {
        let (client0, server0) = (cpu_seconds("self", false), cpu_seconds(&self.server_pid, false));
        let r = run(round);
        side.client_cpu += cpu_seconds("self", false) - client0;
        side.server_cpu += cpu_seconds(&self.server_pid, false) - server0;
        side.calls += r.calls;
        side.admitted += r.admitted;
        side.rates.push(r.calls as f64 / r.seconds);
    }

    /// Interleaved rounds of a client loop and a redis-benchmark configuration.
    fn compare(
        &mut self,
        command: &BenchCommand,
        (clients, pipeline): (usize, usize),
        rounds: usize,
        mut run: impl FnMut(Duration) -> Run,
    ) -> (Side, Side) {
        run(self.settings.warmup);
        let (mut ours, mut theirs) = (Side::default(), Side::default());
        for _ in 0..rounds {
            self.client_round(&mut ours, self.settings.round, &mut run);
            self.benchmark_round(command, clients, pipeline, &mut theirs);
        }
        (ours, theirs)
    }

    fn benchmark_only(&mut self, command: &BenchCommand, clients: usize, pipeline: usize, rounds: usize) -> Side {
        let mut side = Side::default();
        for _ in 0..rounds {
            self.benchmark_round(command, clients, pipeline, &mut side);
        }
        side
    }
}

struct Row {
    scenario: String,
    client: Option<Side>,
    benchmark: Side,
    benchmark_label: String,
    target: bool,
}

fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else {
        format!("{:.1}k", value / 1e3)
    }
}

fn rates(side: &Side) -> String {
    side.rates.iter().map(|r| format!("{:.0}", r)).collect::<Vec<_>>().join(" ")
}

/// The backend measured: the default configuration, except a deadline of 5 s instead of 200 ms
/// so that a loaded machine does not fail the run (the deadline's cost per call is the same).
fn bench_backend(server: &Server) -> Backend {
    Backend::redis_with(RedisConfig::new(server.url()).deadline(DEADLINE)).expect("a Redis backend")
}

// ---------------------------------------------------------------------------------------------
// Memory usage

fn memory_usage(server: &Server) -> Vec<(String, usize, i64, String)> {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    let backend = |prefix: &str| {
        Backend::redis_with(RedisConfig::new(server.url()).prefix(prefix)).expect("a Redis backend for memory usage")
    };
    let limiters: Vec<(&str, &str, Limiter)> = vec![
        ("token_bucket", "rate 1/s, capacity 100", backend("m-tb").token_bucket("api", 1.0, 100).unwrap()),
        ("leaky", "size 100, drain 60 s", backend("m-lk").leaky("api", 100, s(60)).unwrap()),
        ("points", "capacity 100, refill 60 s", backend("m-pt").points("api", 100, s(60)).unwrap()),
        ("bucket", "100 per 60 s", backend("m-bk").bucket("api", 100, s(60)).unwrap()),
        ("window", "100 per 60 s (exact log)", backend("m-wn").window("api", 100, s(60)).unwrap()),
        (
            "multi-window",
            "10 per 1 s + 100 per 60 s (exact log)",
            backend("m-mw")
                .windows(
                    "api",
                    &[WindowLimit { limit: 10, interval: s(1) }, WindowLimit { limit: 100, interval: s(60) }],
                )
                .unwrap(),
        ),
        (
            "sliding_window",
            "100 per 60 s, precision 1 s + 10 per 1 s, precision 100 ms",
            backend("m-sw")
                .sliding_window(
                    "api",
                    &[
                        SlidingLimit { duration: s(60), limit: 100, precision: Some(s(1)) },
                        SlidingLimit { duration: s(1), limit: 10, precision: Some(ms(100)) },
                    ],
                )
                .unwrap(),
        ),
        ("concurrent", "limit 10, one lease held", backend("m-cc").concurrent("api", 10, s(60)).unwrap()),
    ];
    const CHECKS: usize = 5;
    const MEMORY_KEY: &str = "user-000000000042";
    let mut leases = Vec::new();
    for i in 0..CHECKS {
        for (kind, _, limiter) in &limiters {
            if *kind == "concurrent" && i > 0 {
                continue; // one lease, held
            }
            let d = limiter.check_blocking(Some(MEMORY_KEY), 1).expect("a memory-usage check");
            assert!(d.allowed, "{kind} refused a memory-usage check");
            if let Some(lease) = d.lease {
                leases.push(lease);
            }
        }
        // Checks 110 ms apart, so sub-bucketed limiters touch several sub-buckets.
        if i + 1 < CHECKS {
            std::thread::sleep(ms(110));
        }
    }
    let prefixes = ["m-tb", "m-lk", "m-pt", "m-bk", "m-wn", "m-mw", "m-sw", "m-cc"];
    let mut client = Resp::connect(server.port).expect("connect for MEMORY USAGE");
    let rows = limiters
        .iter()
        .zip(prefixes)
        .map(|((kind, shape, _), prefix)| {
            let keys = client.scan(&format!("{prefix}:*"));
            let (mut count, mut bytes) = (0, 0);
            let mut roles = Vec::new();
            for key in &keys {
                let size = client.call(&[b"MEMORY", b"USAGE", key, b"SAMPLES", b"0"]).int();
                let text = String::from_utf8_lossy(key).into_owned();
                let kind_type = String::from_utf8_lossy(&client.call(&[b"TYPE", key]).bytes()).into_owned();
                // `<prefix>:{tag}:<kind>:<name>:<role>:<key>`
                let role = text.split(':').nth(4).unwrap_or("?").to_owned();
                if text.ends_with(MEMORY_KEY) {
                    count += 1;
                    bytes += size;
                    roles.push(format!("{role} ({kind_type}) {size} B"));
                } else {
                    // Not state of the key: per-limiter data (e.g. aggregated metrics).
                    roles.push(format!("[per limiter, not counted: {role} ({kind_type}) {size} B]"));
                }
            }
            let checks = if *kind == "concurrent" { 1 } else { CHECKS };
            (format!("{kind} ({shape}), {checks} check(s)"), count, bytes, roles.join(", "))
        })
        .collect();
    drop(leases);
    rows
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let mut quick = false;
    let mut only_ratekeeper: Option<(String, f64)> = None;
    let mut only_memory = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--only-memory" => only_memory = true,
            // For profilers: only ratekeeper's loop (`seq`, `task`, `blocking` or `inflight`) on
            // the token bucket for the given seconds.
            "--only-ratekeeper" => {
                let what = args.next().unwrap_or_default();
                let secs = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0);
                only_ratekeeper = Some((what, secs));
            }
            _ => {
                eprintln!(
                    "unknown argument {arg:?}; usage: bench-redis [--quick] [--only-memory] [--only-ratekeeper seq|task|blocking|inflight SECONDS]"
                );
                std::process::exit(2);
            }
        }
    }
    let settings = if quick {
        Settings { rounds: 1, info_rounds: 1, round: Duration::from_millis(500), warmup: Duration::from_millis(200) }
    } else {
        Settings { rounds: 3, info_rounds: 2, round: Duration::from_millis(1200), warmup: Duration::from_millis(400) }
    };
    let started = Instant::now();
    let server = Server::start();
    let server_pid = server.child.id().to_string();

    if only_memory {
        for (what, keys, bytes, roles) in memory_usage(&server) {
            println!("| {what} | {keys} | {bytes} | {roles} |");
        }
        return;
    }
    let work = Workload::new();
    let backend = bench_backend(&server);
    if let Some((what, secs)) = only_ratekeeper {
        let rk = Ratekeeper { limiter: backend.token_bucket("bench", 100.0, 1000).expect("a token bucket"), work };
        let d = Duration::from_secs_f64(secs);
        sequential(&rk, 0, Duration::from_millis(300));
        let (client0, server0) = (cpu_seconds("self", false), cpu_seconds(&server_pid, false));
        let r = match what.as_str() {
            "seq" => sequential(&rk, 0, d),
            "task" => sequential_task(&rk, 0, d),
            "blocking" => blocking(&rk, 0, d),
            "inflight" => in_flight(&rk, IN_FLIGHT, d),
            other => panic!("unknown loop {other:?}"),
        };
        let (client, server_cpu) = (cpu_seconds("self", false) - client0, cpu_seconds(&server_pid, false) - server0);
        println!(
            "{what}: {:.0} checks/s, CPU per check: client {:.1} us, redis-server {:.1} us",
            r.calls as f64 / r.seconds,
            client * 1e6 / r.calls as f64,
            server_cpu * 1e6 / r.calls as f64
        );
        return;
    }

    eprintln!(
        "bench-redis: redis-server {} on 127.0.0.1:{}; {} round(s) of {:?} per side ({} for informational rows), medians",
        Command::new("redis-server")
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(2).unwrap_or("?").to_owned())
            .unwrap_or_default(),
        server.port,
        settings.rounds,
        settings.round,
        settings.info_rounds,
    );
    let mut admin = Resp::connect(server.port).expect("connect to redis-server");
    let mut shas = HashMap::new();
    for (name, body) in ratekeeper::lua_sources() {
        let sha = String::from_utf8(admin.call(&[b"SCRIPT", b"LOAD", body.as_bytes()]).bytes()).unwrap();
        shas.insert(sha, name);
    }

    let cases: Vec<(&str, Limiter, bool)> = vec![
        ("token bucket", backend.token_bucket("bench", 100.0, 1000).expect("a token bucket"), true),
        ("bucket", backend.bucket("bench", 1000, Duration::from_secs(60)).expect("a bucket"), false),
    ];
    let mut bench =
        Bench { settings: &settings, port: server.port, server_pid: server_pid.clone(), last_rate: HashMap::new() };
    let mut rows = Vec::new();
    let mut offset = 0;
    let mut next_offset = || {
        offset += 7919;
        offset
    };
    let (rounds, info) = (settings.rounds, settings.info_rounds);
    for (name, limiter, informational) in &cases {
        let command = capture(server.port, limiter, "user-999999999999", &shas);
        eprintln!("{name}: {} runs {}", command.client(), command.display());
        let label = format!("{name} ({}.lua)", command.script);
        let rk = Ratekeeper { limiter: limiter.clone(), work: work.clone() };
        let raw = RawRedisRs::connect(&server, &command, &work);
        let floor = command.client();
        let c1 = format!("{floor} -c 1");
        let p16 = format!("{floor} -c 1 -P {PIPELINE}");

        let (r, b) = bench.compare(&command, (1, 1), rounds, |d| blocking(&rk, next_offset(), d));
        rows.push(Row {
            scenario: format!("{label}: sequential, `check_blocking` loop"),
            client: Some(r),
            benchmark: b,
            benchmark_label: c1.clone(),
            target: true,
        });
        if *informational {
            let (r, b) = bench.compare(&command, (1, 1), info, |d| sequential(&rk, next_offset(), d));
            rows.push(Row {
                scenario: format!("{label}: sequential, `runtime().block_on` loop of `check().await`"),
                client: Some(r),
                benchmark: b,
                benchmark_label: c1.clone(),
                target: false,
            });
            let (r, b) = bench.compare(&command, (1, 1), info, |d| sequential_task(&rk, next_offset(), d));
            rows.push(Row {
                scenario: format!("{label}: sequential, the loop spawned as one runtime task"),
                client: Some(r),
                benchmark: b,
                benchmark_label: c1.clone(),
                target: false,
            });
            let (r, b) = bench.compare(&command, (1, 1), info, |d| raw_sync(&server, &raw, next_offset(), d));
            rows.push(Row {
                scenario: format!(
                    "{label}: sequential, reference: redis-rs synchronous `Connection` (no runtime, no ratekeeper)"
                ),
                client: Some(r),
                benchmark: b,
                benchmark_label: c1.clone(),
                target: false,
            });
            let (r, b) = bench.compare(&command, (1, 1), info, |d| sequential(&raw, next_offset(), d));
            rows.push(Row {
                scenario: format!("{label}: sequential, reference: raw redis-rs `block_on` loop (no ratekeeper)"),
                client: Some(r),
                benchmark: b,
                benchmark_label: c1.clone(),
                target: false,
            });
        }
        let (r, b) = bench.compare(&command, (1, PIPELINE), rounds, |d| in_flight(&rk, IN_FLIGHT, d));
        rows.push(Row {
            scenario: format!("{label}: {IN_FLIGHT} in flight (tasks sharing one connection)"),
            client: Some(r),
            benchmark: b,
            benchmark_label: p16.clone(),
            target: true,
        });
        if *informational {
            let (r, b) = bench.compare(&command, (1, PIPELINE), info, |d| in_flight(&raw, IN_FLIGHT, d));
            rows.push(Row {
                scenario: format!("{label}: {IN_FLIGHT} in flight, reference: raw redis-rs (no ratekeeper)"),
                client: Some(r),
                benchmark: b,
                benchmark_label: p16.clone(),
                target: false,
            });
        }
        let b = bench.benchmark_only(&command, IN_FLIGHT, 1, info);
        rows.push(Row {
            scenario: format!("{label}: {floor} `-c {IN_FLIGHT}` (reference)"),
            client: None,
            benchmark: b,
            benchmark_label: format!("{floor} -c {IN_FLIGHT}"),
            target: false,
        });
        for row in &rows {
            if row.scenario.starts_with(&label) {
                let ours = row.client.as_ref().map_or(String::new(), |c| {
                    format!("client [{}] admitted {:.1}%, ", rates(c), 100.0 * c.admitted as f64 / c.calls as f64)
                });
                eprintln!("  {}: {ours}{} [{}]", row.scenario, row.benchmark_label, rates(&row.benchmark));
            }
        }
    }

    let memory = memory_usage(&server);
    let keys_at_end = admin.call(&[b"DBSIZE"]).int();
    drop(admin);
    drop(cases);
    drop(backend);
    drop(server);

    println!();
    println!("| scenario | ratekeeper ops/s | redis-benchmark ops/s | ratio |");
    println!("|---|---:|---:|---:|");
    for row in &rows {
        let (ours, ratio) = match &row.client {
            Some(c) => {
                let ratio = c.median() / row.benchmark.median();
                let mark = if row.target {
                    if ratio >= 0.9 {
                        " (target 0.90: met)"
                    } else {
                        " (target 0.90: missed)"
                    }
                } else {
                    ""
                };
                (rate(c.median()), format!("{ratio:.2}{mark}"))
            }
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {ours} | {} (`{}`) | {ratio} |",
            row.scenario,
            rate(row.benchmark.median()),
            row.benchmark_label
        );
    }
    let mut report = Report::new(
        "bench-redis",
        "Redis",
        "Redis client against redis-benchmark sending the same EVALSHA (Rust)",
        "cargo run --release -p ratekeeper-bench --bin bench-redis",
    )
    .method(format!(
        "median of {} round(s) of {:?} ({} for informational rows), interleaved with redis-benchmark on one redis-server; {KEYS} keys",
        settings.rounds, settings.round, settings.info_rounds
    ));
    let mut headline = true;
    for row in &rows {
        if let Some(c) = &row.client {
            let peer = row.benchmark_label.clone();
            let mut out = ReportRow::rate(row.scenario.replace('`', ""), c.median(), &peer, row.benchmark.median());
            if row.target {
                out = out.target(0.9);
                if std::mem::take(&mut headline) {
                    out = out.headline();
                }
            }
            report.row(out);
        }
    }
    report.write();
    println!();
    println!("CPU per call (µs; from /proc, whole client process; rough on a shared machine):");
    println!();
    println!(
        "| scenario | client: ours | client: redis-benchmark | redis-server, ours | redis-server, redis-benchmark |"
    );
    println!("|---|---:|---:|---:|---:|");
    for row in &rows {
        let (c, s) = row.client.as_ref().map_or(("—".into(), "—".into()), |c| {
            (format!("{:.1}", c.client_us()), format!("{:.1}", c.server_us()))
        });
        println!(
            "| {} | {c} | {:.1} | {s} | {:.1} |",
            row.scenario,
            row.benchmark.client_us(),
            row.benchmark.server_us()
        );
    }
    println!();
    println!("| limiter state of one key in Redis | Redis keys | bytes (MEMORY USAGE, summed) | keys |");
    println!("|---|---:|---:|---|");
    for (what, keys, bytes, roles) in &memory {
        println!("| {what} | {keys} | {bytes} | {roles} |");
    }
    println!();
    println!(
        "median of {} round(s) x {:?} ({} for informational rows), interleaved with redis-benchmark; {KEYS} keys walked pseudo-randomly (redis-benchmark: -r {KEYS}); deadline {DEADLINE:?}; {keys_at_end} keys in Redis at the end; total {:.1}s",
        settings.rounds,
        settings.round,
        settings.info_rounds,
        started.elapsed().as_secs_f64()
    );
}
