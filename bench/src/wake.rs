//! `bench-wake`: how soon a concurrent limiter's waiter is granted after a release, and how long
//! checks on other keys take while a waiter blocks in BLPOP. These were latency bounds in
//! `core/tests/redis_concurrent.rs`, `redis_failures.rs` and `redis_cluster.rs`; the tests now
//! assert the orderings (one waiter woken per release, checks answered while the waiter still
//! blocks) and this prints the figures.
//!
//! ```text
//! cargo run --release -p ratekeeper-bench --bin bench-wake            # 100 waiters, 200 releases
//! cargo run --release -p ratekeeper-bench --bin bench-wake -- --quick # 20 waiters, 40 releases
//! ```
//!
//! It starts its own `redis-server` on a free loopback port (never 6379, no persistence) and
//! stops it by pid at the end. Figures from a shared machine move with its load: compare runs
//! made side by side, not with a fixed target.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratekeeper::{runtime, Backend, RedisConfig};

/// A redis-server of our own on a free loopback port, stopped by pid when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Server {
    fn start() -> Server {
        let port = loop {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
            let port = listener.local_addr().expect("local address").port();
            if port != 6379 {
                break port;
            }
        };
        let dir = std::env::temp_dir().join(format!("ratekeeper-bench-wake-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed?)");
        let server = Server { child, port, dir };
        // Started when it answers PING (redis-cli is installed with the server).
        for _ in 0..500 {
            let out = Command::new("redis-cli").args(["-p", &port.to_string(), "PING"]).output();
            if out.is_ok_and(|o| o.stdout.starts_with(b"PONG")) {
                return server;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start on port {port}");
    }

    fn blocked_clients(&self) -> usize {
        let out = Command::new("redis-cli").args(["-p", &self.port.to_string(), "INFO", "clients"]).output();
        let text = String::from_utf8_lossy(&out.expect("redis-cli").stdout).into_owned();
        text.lines().find_map(|l| l.strip_prefix("blocked_clients:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (waiters, rounds) = if quick { (20, 40) } else { (100, 200) };
    let server = Server::start();
    let backend = Backend::redis_with(RedisConfig::new(format!("redis://127.0.0.1:{}", server.port)).prefix("wake"))
        .expect("a Redis backend");
    let mutex = backend.concurrent("wake", 1, Duration::from_secs(600)).expect("a limiter");
    let other = backend.token_bucket("other", 1e6, 1_000_000).expect("a limiter");
    let rt = runtime();

    let mut held = rt.block_on(mutex.check(Some("k"), 1)).expect("the first holder").lease.expect("a lease");
    let (tx, rx) = mpsc::channel();
    for _ in 0..waiters + rounds {
        let (mutex, tx) = (mutex.clone(), tx.clone());
        rt.spawn(async move {
            let result = mutex.acquire(Some("k"), 1, Some(Duration::from_secs(600))).await;
            let _ = tx.send((result, Instant::now()));
        });
    }
    while server.blocked_clients() < waiters.min(waiters + rounds) {
        std::thread::sleep(Duration::from_millis(10));
    }

    // Checks on another key while waiters block: the shared connection is not behind BLPOP.
    let started = Instant::now();
    for i in 0..1000 {
        rt.block_on(other.check(Some(&format!("k{i}")), 1)).expect("Redis answers");
    }
    let checks = started.elapsed();

    let mut wakes = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let released = Instant::now();
        rt.block_on(mutex.release(Some("k"), &held)).expect("release");
        let (result, granted) = rx.recv().expect("a waiter");
        wakes.push(granted - released);
        held = result.expect("the woken waiter gets the slot").lease.expect("a lease");
    }
    wakes.sort();
    println!("bench-wake ({waiters}+ waiters on a limit-1 concurrent limiter, {rounds} releases, same host):");
    println!(
        "  release -> waiter granted: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&wakes, 0.5),
        percentile(&wakes, 0.99),
        wakes[wakes.len() - 1]
    );
    println!("  1000 sequential checks on other keys while waiters block: {checks:?} ({:?} each)", checks / 1000);
    drop(server);
    std::process::exit(0); // the remaining waiters are still blocked: do not wait for them
}
