//! Real Redis servers for the CLI's tests (a trimmed copy of `core/tests/support/mod.rs`):
//! started on free loopback ports (never 6379), each in its own temporary directory, stopped by
//! pid when dropped. And the built `ratekeeper` binary, run against them.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
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
        "ratekeeper-cli-test-{}-{label}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Polls `ready` every 20 ms; `timeout` is a generous hang guard, not a timing assertion.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One redis-server process.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
}

impl RedisServer {
    /// A standalone server.
    pub fn start() -> RedisServer {
        Self::spawn("standalone", Vec::new())
    }

    /// A cluster-enabled node (not yet part of a cluster).
    pub fn start_cluster_node() -> RedisServer {
        let args =
            ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];
        Self::spawn("cluster", args.iter().map(|s| s.to_string()).collect())
    }

    fn spawn(label: &str, extra: Vec<String>) -> RedisServer {
        let dir = scratch_dir(label);
        let port = free_port();
        let mut args: Vec<String> =
            ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--port"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        args.push(port.to_string());
        args.extend(extra);
        let mut server = RedisServer { port, dir, child: None, args };
        server.launch_on_free_port();
        server
    }

    /// Starts the process on `self.port`; false when another test's server took the port first.
    #[must_use]
    fn launch(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.join("redis.log")).unwrap();
        let binary = if Path::new("/usr/bin/redis-server").exists() { "/usr/bin/redis-server" } else { "redis-server" };
        let child = Command::new(binary)
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
        let ours = !exited && {
            let info = self.cli(&["INFO", "server"]);
            info.lines().any(|l| l.trim() == format!("process_id:{}", self.pid()))
        };
        if !ours {
            self.kill();
        }
        ours
    }

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
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
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

/// The built `ratekeeper` binary, with no RATEKEEPER_* variables from the environment.
pub fn ratekeeper() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    cmd.env_remove("RATEKEEPER_REDIS_URL").env_remove("RATEKEEPER_TOKEN").stdin(Stdio::null());
    cmd
}

/// Runs `ratekeeper ARGS` and returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = ratekeeper().args(args).output().expect("run ratekeeper");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Replaces what changes from run to run ("12s ago", host names) with fixed text.
pub fn mask(text: &str) -> String {
    let mut out = String::new();
    for word in text.split_inclusive(' ') {
        let trimmed = word.trim_end();
        if trimmed.len() > 1
            && trimmed.ends_with('s')
            && trimmed[..trimmed.len() - 1].chars().all(|c| c.is_ascii_digit())
        {
            out.push_str(&word.replace(trimmed, "Ns"));
        } else {
            out.push_str(word);
        }
    }
    out
}
