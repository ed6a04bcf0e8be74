//! Real Redis servers for tests: started on free loopback ports (never 6379), each in its own
//! temporary directory, stopped by pid when dropped. No mocks.
#![allow(dead_code)]

pub mod vectors;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A port nobody listens on now, with its cluster bus port (+10000) free too, never 6379.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        if port != 6379 && port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

pub fn scratch_dir(label: &str) -> PathBuf {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ratekeeper-test-{}-{label}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// How long a polling wait (for a client to block, for a server to come back) runs before it
/// fails the test rather than hang it. A give-up, not a performance bound: generous, so that a
/// loaded machine never trips it; what the tests assert are the orderings around the wait.
pub const GIVE_UP: Duration = Duration::from_secs(30);

pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// TLS material made with openssl: a CA and a server certificate for 127.0.0.1.
pub struct Certificates {
    pub dir: PathBuf,
}

impl Certificates {
    pub fn make(dir: &Path) -> Certificates {
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output().expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(&["genrsa", "-out", "ca.key", "2048"]);
        run(&[
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            "ca.key",
            "-sha256",
            "-days",
            "2",
            "-subj",
            "/CN=ratekeeper test CA",
            "-out",
            "ca.crt",
        ]);
        run(&["genrsa", "-out", "server.key", "2048"]);
        run(&["req", "-new", "-key", "server.key", "-subj", "/CN=127.0.0.1", "-out", "server.csr"]);
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-sha256",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        Certificates { dir: dir.to_path_buf() }
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("ca.crt")).unwrap()
    }
}

/// One redis-server process.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    pub tls: Option<Certificates>,
}

impl RedisServer {
    /// A standalone server.
    pub fn start() -> RedisServer {
        Self::spawn("standalone", Vec::new(), false)
    }

    /// A standalone server that tries `port` first, as a test racing another for one free port
    /// would (for the test of that race).
    #[allow(dead_code)]
    pub fn start_trying_port(port: u16) -> RedisServer {
        let args = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port", &port.to_string()]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut server = RedisServer { port, dir: scratch_dir("taken"), child: None, args, tls: None };
        server.launch_on_free_port();
        server
    }

    /// A server that only speaks TLS, with certificates from a fresh CA.
    pub fn start_tls() -> RedisServer {
        Self::spawn("tls", Vec::new(), true)
    }

    /// A cluster-enabled node (not yet part of a cluster).
    pub fn start_cluster_node() -> RedisServer {
        let args =
            ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
        Self::spawn("cluster", args.iter().map(|s| s.to_string()).collect(), false)
    }

    fn spawn(label: &str, extra: Vec<String>, tls: bool) -> RedisServer {
        let dir = scratch_dir(label);
        let port = free_port();
        let tls = tls.then(|| Certificates::make(&dir));
        let mut args: Vec<String> =
            ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        if tls.is_some() {
            args.extend(
                [
                    "--port",
                    "0",
                    "--tls-port",
                    &port.to_string(),
                    "--tls-cert-file",
                    "server.crt",
                    "--tls-key-file",
                    "server.key",
                    "--tls-ca-cert-file",
                    "ca.crt",
                    "--tls-auth-clients",
                    "no",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
        } else {
            args.extend(["--port".to_string(), port.to_string()]);
        }
        args.extend(extra);
        let mut server = RedisServer { port, dir, child: None, args, tls };
        server.launch_on_free_port();
        server
    }

    /// Starts the process on `self.port`; false when the port turned out to belong to another
    /// server (two tests running at once picked the same free port, and ours could not bind it).
    #[must_use]
    fn launch(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.join("redis.log")).unwrap();
        let child = Command::new(redis_server_binary())
            .args(&self.args)
            .current_dir(&self.dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start redis-server (the test command installs it)");
        self.child = Some(child);
        let port = self.port;
        let mut exited = false;
        wait_until(&format!("redis-server on port {port}"), Duration::from_secs(10), || {
            exited = self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            exited || TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        // Something answers on the port: make sure it is this process, not another test's
        // server that bound the same port first (ours then exits, failing to bind).
        let ours = !exited
            && match &self.tls {
                None => {
                    let info = self.cli(&["INFO", "server"]);
                    info.lines().any(|l| l.trim() == format!("process_id:{}", self.pid()))
                }
                Some(_) => {
                    std::thread::sleep(Duration::from_millis(200));
                    self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
                }
            };
        if !ours {
            self.kill();
        }
        ours
    }

    /// Starts the process on a free port, choosing another while a concurrent test takes it.
    fn launch_on_free_port(&mut self) {
        for _ in 0..20 {
            if self.launch() {
                return;
            }
            let port = free_port();
            let old = self.port.to_string();
            for arg in self.args.iter_mut().filter(|a| **a == old) {
                *arg = port.to_string();
            }
            self.port = port;
        }
        panic!("could not start redis-server on a free port (see {:?})", self.dir.join("redis.log"));
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("rediss://127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if self.tls.is_some() {
            cmd.args(["--tls", "--cacert", "ca.crt"]).current_dir(&self.dir);
        }
        let out = cmd.args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty, as no persistence is configured).
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.launch(), "redis-server could not take its port {} back", self.port);
    }

    /// SIGSTOP: the server hangs, connections stay open.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }
}

impl RedisServer {
    /// A standalone server on a given `port` (for example one a backend was pointed at while
    /// nothing listened there).
    pub fn start_on_port(port: u16) -> RedisServer {
        let dir = scratch_dir("standalone-on-port");
        let args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--port",
            &port.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut server = RedisServer { port, dir, child: None, args, tls: None };
        server.launch_on_free_port();
        server
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters built with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_cluster_node()).collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        wait_until("cluster_state:ok on every node", Duration::from_secs(20), || {
            nodes.iter().all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        RedisCluster { nodes }
    }

    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// Measures how late this machine wakes a sleeping OS thread (CPU starvation from other
/// processes), so that latency bounds can tell the library's delays from the machine's. A thread
/// sleeps 2 ms at a time and records how late each wake-up was, until dropped.
pub struct SchedulingNoise {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(Instant, Duration)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SchedulingNoise {
    pub fn start() -> SchedulingNoise {
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let target = Instant::now() + Duration::from_millis(2);
                std::thread::sleep(Duration::from_millis(2));
                let woke = Instant::now();
                s.lock().unwrap().push((woke, woke.saturating_duration_since(target)));
            }
        });
        SchedulingNoise { samples, stop, thread: Some(thread) }
    }

    /// The worst wake-up delay observed between `from` and `to` (plus one sample after `to`,
    /// which covers a delay that was still going on at `to`).
    pub fn worst_between(&self, from: Instant, to: Instant) -> Duration {
        let samples = self.samples.lock().unwrap();
        let mut worst = Duration::ZERO;
        for &(woke, late) in samples.iter() {
            if woke >= from {
                worst = worst.max(late);
                if woke > to {
                    break;
                }
            }
        }
        worst
    }
}

impl Drop for SchedulingNoise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn redis_server_binary() -> &'static str {
    if Path::new("/usr/bin/redis-server").exists() {
        "/usr/bin/redis-server"
    } else {
        "redis-server"
    }
}

/// A deferred event for ordering assertions: `action` runs `after` from now (unless the
/// watchdog is stopped first), and the instant it ran is kept. A test asserts that something
/// happened *before* it, e.g. "every call against a SIGSTOPped server ended before the watchdog
/// resumed the server": had a call waited on the server instead of its deadline, it would have
/// ended only once the server answered, after the resume. `after` is not a bound on anything
/// measured; it only has to be long enough for the ordering to mean something.
pub struct Watchdog {
    fired: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(after: Duration, action: impl FnOnce() + Send + 'static) -> Watchdog {
        let fired = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let record = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(after) {
                action();
                *record.lock().unwrap() = Some(Instant::now());
            }
        });
        Watchdog { fired, stop: Some(stop), thread: Some(thread) }
    }

    /// Whether the action had run by `at`.
    pub fn fired_by(&self, at: Instant) -> bool {
        self.fired.lock().unwrap().is_some_and(|fired| fired <= at)
    }

    /// Cancels the action if it has not run yet; returns whether it had.
    pub fn stop(mut self) -> bool {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let fired = self.fired.lock().unwrap().is_some();
        fired
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sends `sig` (`-CONT`, `-STOP`) to `pid`: for a [`Watchdog`] action, which cannot borrow the
/// server.
pub fn signal_pid(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}
