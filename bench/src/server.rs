//! A redis-server of a benchmark's own, on a free loopback port (never 6379), with no
//! persistence, stopped by pid when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server; stopped (SIGTERM, then waited for) when dropped.
pub struct Server {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
}

impl Server {
    /// Starts one and waits until it answers PING.
    pub fn start() -> Server {
        let port = loop {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
            let port = listener.local_addr().expect("local address").port();
            if port != 6379 {
                break port;
            }
        };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (is it installed?)");
        let server = Server { child, port };
        let start = Instant::now();
        while server.connection().is_err() {
            assert!(start.elapsed() < Duration::from_secs(10), "redis-server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain redis-rs connection that answered PING.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let mut conn = redis::Client::open(self.url())?.get_connection()?;
        redis::cmd("PING").query::<String>(&mut conn)?;
        Ok(conn)
    }

    /// `usec_per_call` and `calls` of EVALSHA since the last `CONFIG RESETSTAT` (`INFO
    /// commandstats`): the server's own time per script call, which no client-side noise reaches.
    pub fn evalsha_stats(&self) -> (f64, u64) {
        let info = self.cli(&["INFO", "commandstats"]);
        let Some(line) = info.lines().find(|l| l.starts_with("cmdstat_evalsha:")) else { return (0.0, 0) };
        let field = |name: &str| {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(name))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (field("usec_per_call="), field("calls=") as u64)
    }

    /// What `redis-cli` prints for `args` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        let out =
            Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}
