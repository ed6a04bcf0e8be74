//! One `redis-server` process on a free loopback port, in its own scratch directory, stopped by
//! pid when dropped (unless detached for another process to stop).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::ports::{free_port, scratch_dir};
use crate::timing::wait_until;
use crate::tls::Certificates;

/// How long a freshly spawned server has to answer on its port.
const START_GIVE_UP: Duration = Duration::from_secs(10);

/// How many times [`RedisServer::relaunch`] tries to take its port back.
const RELAUNCH_TRIES: usize = 20;

/// One redis-server process.
pub struct RedisServer {
    /// The port it listens on (its TLS port for a TLS server).
    pub port: u16,
    /// Its working directory (log, cluster config, generated certificates).
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    /// The TLS material of a TLS server.
    pub tls: Option<Certificates>,
    /// Whether `dir` is the server's own, removed on drop (a relaunched server's may not be).
    owns_dir: bool,
}

/// Where a detached server is: what `rk-test-redis start` and `launch` print, one per server.
#[derive(Debug, Clone, Serialize)]
pub struct DetachedServer {
    pub port: u16,
    pub pid: u32,
    pub url: String,
    pub dir: PathBuf,
    /// The redis-server arguments, for `rk-test-redis launch` to start it again on its port.
    pub args: Vec<String>,
    /// The CA certificate of a TLS server.
    pub ca: Option<PathBuf>,
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The arguments every server gets: loopback only, no persistence.
fn base_args() -> Vec<String> {
    strings(&["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"])
}

/// The arguments of a server that only speaks TLS on `port`, with the material in `certs`.
fn tls_args(port: u16, certs: &Certificates) -> Vec<String> {
    let file = |name: &str| certs.file(name).to_string_lossy().into_owned();
    vec![
        "--port".into(),
        "0".into(),
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        file("server.crt"),
        "--tls-key-file".into(),
        file("server.key"),
        "--tls-ca-cert-file".into(),
        file("ca.crt"),
        "--tls-auth-clients".into(),
        "no".into(),
    ]
}

/// The arguments that make a node cluster-enabled.
pub const CLUSTER_NODE_ARGS: [&str; 6] =
    ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"];

impl RedisServer {
    /// A standalone server.
    pub fn start() -> RedisServer {
        Self::spawn("standalone", Vec::new(), None)
    }

    /// A standalone server with more redis-server arguments.
    pub fn start_with(extra: &[String]) -> RedisServer {
        Self::spawn("standalone", extra.to_vec(), None)
    }

    /// A standalone server that tries `port` first, as a test racing another for one free port
    /// would (for the test of that race).
    pub fn start_trying_port(port: u16) -> RedisServer {
        let args = strings(&["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--port", &port.to_string()]);
        let mut server = RedisServer { port, dir: scratch_dir("taken"), child: None, args, tls: None, owns_dir: true };
        server.launch_on_free_port();
        server
    }

    /// A server that only speaks TLS, with certificates from a fresh CA.
    pub fn start_tls() -> RedisServer {
        Self::spawn("tls", Vec::new(), Some(None))
    }

    /// A server that only speaks TLS, with the certificates already in `certs`.
    pub fn start_tls_with(certs: &Path) -> RedisServer {
        Self::spawn("tls", Vec::new(), Some(Some(Certificates::existing(certs))))
    }

    /// A cluster-enabled node (not yet part of a cluster).
    pub fn start_cluster_node() -> RedisServer {
        Self::spawn("cluster", strings(&CLUSTER_NODE_ARGS), None)
    }

    /// A Sentinel (`redis-server sentinel.conf --sentinel`) monitoring the primary on
    /// `primary_port` as `service`, judging it down after `down_after` (quorum 2); with
    /// `passwords`, the data nodes' (`requirepass`) and the sentinels' own.
    pub fn start_sentinel(
        primary_port: u16,
        service: &str,
        down_after: Duration,
        passwords: Option<(&str, &str)>,
    ) -> RedisServer {
        let dir = scratch_dir("sentinel");
        let port = free_port();
        // The file is the sentinel's own: it rewrites it as it learns the group.
        let conf = format!(
            "sentinel monitor {service} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {service} {}\n\
             sentinel failover-timeout {service} 4000\n\
             sentinel parallel-syncs {service} 2\n",
            down_after.as_millis()
        );
        let conf = match passwords {
            // How it reaches the data nodes, and the other sentinels (which share its password).
            Some((nodes, sentinels)) => {
                format!("{conf}sentinel auth-pass {service} {nodes}\nsentinel sentinel-pass {sentinels}\n")
            }
            None => conf,
        };
        std::fs::write(dir.join("sentinel.conf"), conf).expect("write sentinel.conf");
        let args = strings(&["sentinel.conf", "--sentinel", "--bind", "127.0.0.1", "--protected-mode", "no", "--port"]);
        let mut args = args;
        args.push(port.to_string());
        if let Some((_, sentinels)) = passwords {
            args.extend(["--requirepass".to_string(), sentinels.to_string()]);
        }
        let mut server = RedisServer { port, dir, child: None, args, tls: None, owns_dir: true };
        server.launch_on_free_port();
        server
    }

    /// `tls`: `None` for plain TCP, `Some(None)` for TLS with fresh certificates.
    fn spawn(label: &str, extra: Vec<String>, tls: Option<Option<Certificates>>) -> RedisServer {
        let dir = scratch_dir(label);
        let port = free_port();
        let tls = tls.map(|given| given.unwrap_or_else(|| Certificates::make(&dir)));
        let mut args = base_args();
        match &tls {
            Some(certs) => args.extend(tls_args(port, certs)),
            None => args.extend(["--port".to_string(), port.to_string()]),
        }
        args.extend(extra);
        let mut server = RedisServer { port, dir, child: None, args, tls, owns_dir: true };
        server.launch_on_free_port();
        server
    }

    /// A standalone server on a given `port` (for example one a backend was pointed at while
    /// nothing listened there).
    pub fn start_on_port(port: u16) -> RedisServer {
        let dir = scratch_dir("standalone-on-port");
        let mut args = base_args();
        args.extend(["--port".to_string(), port.to_string()]);
        let mut server = RedisServer { port, dir, child: None, args, tls: None, owns_dir: true };
        server.launch_on_free_port();
        server
    }

    /// Starts a server again with the `args` and `dir` a stopped one had (as
    /// [`DetachedServer`] reports them), on the same port: an error if it cannot take it.
    pub fn relaunch(dir: &Path, args: Vec<String>) -> Result<RedisServer, String> {
        let value_of = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
        let (port, tls) = match value_of("--tls-port") {
            Some(port) => (port, true),
            None => (value_of("--port").ok_or("the arguments name no --port")?, false),
        };
        let port: u16 = port.parse().map_err(|_| format!("not a port: {port}"))?;
        let tls = tls.then(|| {
            let ca = value_of("--tls-ca-cert-file").map(PathBuf::from).unwrap_or_default();
            Certificates::existing(ca.parent().unwrap_or(dir))
        });
        let mut server = RedisServer { port, dir: dir.to_path_buf(), child: None, args, tls, owns_dir: false };
        // A few tries: the port's previous server may be a moment from releasing it.
        for _ in 0..RELAUNCH_TRIES {
            if server.launch() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("redis-server could not take port {port} (see {:?})", dir.join("redis.log")))
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
        wait_until(&format!("redis-server on port {port}"), START_GIVE_UP, || {
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

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://` for a TLS server.
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
        // A server started with a password is asked with it.
        if let Some(at) = self.args.iter().position(|a| a == "--requirepass") {
            cmd.args(["--no-auth-warning", "-a", &self.args[at + 1]]);
        }
        if let Some(certs) = &self.tls {
            cmd.arg("--tls").arg("--cacert").arg(certs.file("ca.crt"));
        }
        let out = cmd.args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Whether the process is still running (not killed by [`Self::kill`]).
    pub fn pid_alive(&self) -> bool {
        self.child.is_some()
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

    /// Leaves the process running past this value's drop, for another process to stop by pid
    /// (`rk-test-redis stop`), and says where it is.
    pub fn detach(mut self) -> DetachedServer {
        let detached = DetachedServer {
            port: self.port,
            pid: self.pid(),
            url: self.url(),
            dir: self.dir.clone(),
            args: self.args.clone(),
            ca: self.tls.as_ref().map(|certs| certs.file("ca.crt")),
        };
        // The process is not waited for here: it outlives this one (and is reparented).
        self.child = None;
        self.owns_dir = false;
        detached
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
        if self.owns_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill").args([signal, &pid.to_string()]).status().expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed");
}

/// Sends `sig` (`-CONT`, `-STOP`) to `pid`: for a [`crate::Watchdog`] action, which cannot
/// borrow the server.
pub fn signal_pid(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// The redis-server to run: Debian's, else the one on PATH.
pub fn redis_server_binary() -> &'static str {
    if Path::new("/usr/bin/redis-server").exists() {
        "/usr/bin/redis-server"
    } else {
        "redis-server"
    }
}
