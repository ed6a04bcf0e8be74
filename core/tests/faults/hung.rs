//! A server that accepts connections and never answers (a hung process, a black-holing proxy):
//! every way of calling ends with the same `Timeout`, at the call's deadline — not earlier
//! (e.g. at the connect timeout), and by itself: before a watchdog ends the hang (closes the
//! connections, or resumes the stopped server), which an ordering, not a latency, asserts.
//!
//! The "server" is a plain TCP listener that accepts and never writes: the most hung a server
//! can be. Each test uses its own listener (its own port), so no connection is shared.

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support;

use ratekeeper::{runtime, Backend, Error, ErrorKind, Limiter, RedisConfig};
use support::{signal_pid, RedisServer, Watchdog};

/// Accepts connections and holds them open without ever writing, until dropped.
struct HungServer {
    port: u16,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl HungServer {
    fn start() -> HungServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(Mutex::new(Vec::new()));
        let keep = held.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                keep.lock().unwrap().push(stream);
            }
        });
        HungServer { port, held }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Ends the hang of the connections held so far: they are closed, so a call still waiting on
    /// one ends with a connection error.
    fn closer(&self) -> impl FnOnce() + Send + 'static {
        let held = self.held.clone();
        move || {
            for stream in held.lock().unwrap().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

/// A window limiter on a backend whose every call has `deadline`.
fn limiter(config: RedisConfig, deadline: Duration) -> Limiter {
    let backend = Backend::redis_with(config.deadline(deadline)).expect("a Redis backend");
    backend.window("hung", 10, Duration::from_secs(60)).expect("a limiter")
}

/// Asserts that `call` ends with `Timeout` no earlier than `deadline`, and before `end_hang`
/// (run by a watchdog at 4 deadlines + 2 s) ended the hang: had the call waited on the server
/// instead of its deadline, it would have ended only after that, with another outcome. Returns
/// the error's message.
fn assert_times_out_at_deadline(
    what: &str,
    deadline: Duration,
    end_hang: impl FnOnce() + Send + 'static,
    call: impl FnOnce() -> ratekeeper::Result<()>,
) -> String {
    let watchdog = Watchdog::start(deadline * 4 + Duration::from_secs(2), end_hang);
    let began = Instant::now();
    let result = call();
    let ended = Instant::now();
    let took = ended - began;
    println!("[{what}] {took:?}: {result:?}");
    assert!(!watchdog.fired_by(ended), "{what}: ended only after the hang was ended: {result:?}");
    assert!(!watchdog.stop(), "{what}: the call outlasted the hang");
    let error = result.expect_err("a hung server cannot admit");
    assert_eq!(error.kind(), ErrorKind::Timeout, "{what}: {error}");
    assert!(took >= deadline, "{what}: timed out after {took:?}, before its deadline {deadline:?}");
    error.to_string()
}

/// The timeout's message names the server waited on (`host:port` of `url`, never the URL).
fn expected_message(deadline: Duration, url: &str) -> String {
    let server = url.trim_start_matches("redis://");
    Error::Timeout {
        message: format!(
            "Redis at {server} did not answer within {deadline:?}; is it reachable from here and not overloaded? \
             A slow link needs a longer deadline"
        ),
    }
    .to_string()
}

/// Each path, twice (the second call finds whatever the first left behind: a failed connect,
/// a back-off), with a deadline longer than the connect timeout (1 s) and one shorter.
fn every_call_times_out(what: &str, config: impl Fn(&HungServer) -> RedisConfig, blocking: bool) {
    for deadline in [Duration::from_millis(2000), Duration::from_millis(300)] {
        let server = HungServer::start();
        let limiter = limiter(config(&server), deadline);
        for round in 0..2 {
            let name = format!("{what}, deadline {deadline:?}, call {round}");
            let message = assert_times_out_at_deadline(&name, deadline, server.closer(), || {
                if blocking {
                    limiter.check_blocking(Some("k"), 1).map(drop)
                } else {
                    runtime().block_on(limiter.check(Some("k"), 1)).map(drop)
                }
            });
            assert_eq!(message, expected_message(deadline, &server.url()), "{name}");
        }
    }
}

#[test]
fn hung_standalone_blocking_times_out_at_the_deadline() {
    every_call_times_out("standalone, blocking", |s| RedisConfig::new(s.url()), true);
}

#[test]
fn hung_standalone_async_times_out_at_the_deadline() {
    every_call_times_out("standalone, async", |s| RedisConfig::new(s.url()), false);
}

#[test]
fn hung_cluster_blocking_times_out_at_the_deadline() {
    every_call_times_out("cluster, blocking", |s| RedisConfig::cluster([s.url()]), true);
}

#[test]
fn hung_cluster_async_times_out_at_the_deadline() {
    every_call_times_out("cluster, async", |s| RedisConfig::cluster([s.url()]), false);
}

/// A real server stopped (SIGSTOP) after the limiter connected: the same outcome as a server
/// that never answered, on a connection already open (blocking and async).
#[test]
fn stopped_redis_times_out_at_the_deadline_on_an_open_connection() {
    let deadline = Duration::from_millis(1500);
    let server = RedisServer::start();
    let limiter = limiter(RedisConfig::new(server.url()).prefix("stopped"), deadline);
    assert!(limiter.check_blocking(Some("k"), 1).expect("Redis is up").allowed);
    assert!(runtime().block_on(limiter.check(Some("k"), 1)).expect("Redis is up").allowed);
    server.pause();
    for blocking in [true, false] {
        let name = format!("stopped, blocking {blocking}");
        let pid = server.pid();
        let message = assert_times_out_at_deadline(
            &name,
            deadline,
            move || signal_pid(pid, "-CONT"),
            || {
                if blocking {
                    limiter.check_blocking(Some("k"), 1).map(drop)
                } else {
                    runtime().block_on(limiter.check(Some("k"), 1)).map(drop)
                }
            },
        );
        assert_eq!(message, expected_message(deadline, &server.url()), "{name}");
    }
    server.resume();
}

/// A host name (not an IP literal) is looked up on the resolver's helper thread and the
/// blocking call connects through it (the deadline-bounded lookup itself is unit-tested in
/// `backend::redis::resolve`).
#[test]
fn a_host_name_is_resolved_for_blocking_calls() {
    let server = RedisServer::start();
    let url = server.url().replace("127.0.0.1", "localhost");
    assert!(url.contains("localhost"), "{url}");
    let limiter = limiter(RedisConfig::new(url).prefix("by-name"), Duration::from_secs(2));
    assert!(limiter.check_blocking(Some("k"), 1).expect("Redis answers").allowed);
}
