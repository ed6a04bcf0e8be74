//! Blocking calls on a standalone server (plain and TLS) go over connections the calling threads
//! drive themselves: one per thread calling at the same time, reused from call to call, never
//! the runtime's shared connection.

use crate::support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use ratekeeper::{Backend, RedisConfig, TlsConfig};
use support::RedisServer;

const THREADS: usize = 4;
const CALLS: u64 = 200;

/// The server's client connections other than redis-cli's own and the backend's background
/// task's (named `ratekeeper-live`: it polls live limits), as CLIENT LIST lines.
fn library_clients(server: &RedisServer) -> Vec<String> {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|l| !l.contains("cmd=client") && !l.contains("name=ratekeeper-live "))
        .map(str::to_owned)
        .collect()
}

fn connections_received(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO stats has total_connections_received:\n{info}"))
}

fn blocking_calls_drive_their_own_connections(server: &RedisServer, backend: Backend) {
    // Refills one token in 1000 s: the remaining count after each call is exact however slowly the
    // machine runs the calls.
    let limiter = backend.token_bucket("direct", 0.001, 1_000_000).unwrap();

    // One blocking call, then long enough for the runtime's watchdog to have pinged a shared
    // connection twice, had there been one: the only connection's last command is the script
    // (EVAL, since a new server has no script cached).
    assert!(limiter.check_blocking(Some("first"), 1).unwrap().allowed);
    std::thread::sleep(Duration::from_millis(600));
    let clients = library_clients(server);
    assert_eq!(clients.len(), 1, "one connection after one blocking call: {clients:#?}");
    assert!(
        clients[0].contains("cmd=eval ") || clients[0].contains("cmd=evalsha "),
        "the blocking call's own connection, not the shared one: {clients:?}"
    );

    // Threads calling at the same time each take a connection; all of them are kept for reuse.
    let before = connections_received(server);
    let mut round = 0;
    let most = loop {
        round += 1;
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (limiter, start) = (limiter.clone(), start.clone());
                std::thread::spawn(move || {
                    let key = format!("round{round}-thread{t}");
                    start.wait();
                    for i in 1..=CALLS {
                        let d = limiter.check_blocking(Some(&key), 1).expect("Redis answers");
                        assert_eq!(d.remaining, 1_000_000 - i, "{key}: Redis counted every call once");
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().expect("a calling thread"));
        let open = library_clients(server).len();
        if open >= 2 || round == 20 {
            break open;
        }
    };
    assert!(most >= 2, "{THREADS} threads calling at once must not share one connection ({round} rounds)");
    let opened = connections_received(server) - before;
    // redis-cli's own connections: one per round (CLIENT LIST) and the last INFO.
    let by_cli = round as u64 + 1;
    assert!(
        opened - by_cli <= THREADS as u64,
        "connections are reused: {} opened for {} calls by {THREADS} threads",
        opened - by_cli,
        round as u64 * CALLS * THREADS as u64
    );
}

#[test]
fn blocking_calls_drive_their_own_connections_on_redis() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(5))).unwrap();
    blocking_calls_drive_their_own_connections(&server, backend);
}

#[test]
fn blocking_calls_drive_their_own_connections_over_tls() {
    let server = RedisServer::start_tls();
    let ca = server.tls.as_ref().unwrap().ca_pem();
    let config = RedisConfig::new(server.url()).tls(TlsConfig::with_ca_pem(ca)).deadline(Duration::from_secs(5));
    blocking_calls_drive_their_own_connections(&server, Backend::redis_with(config).unwrap());
}

/// Does nothing: a handler an application installed (SIGCHLD, SIGTERM, Python's own), whose
/// only effect here is that the signal interrupts system calls.
extern "C" fn ignore_signal(_: libc::c_int) {}

/// A signal caught while a thread is blocked in a call interrupts the call's read (`EINTR`): the
/// socket has a read timeout (the deadline), and Linux never restarts those reads, `SA_RESTART`
/// or not. A process stopped and continued (SIGSTOP/SIGCONT, a frozen container) sees the same.
/// The call goes on reading within its deadline (it used to fail with "Interrupted system call").
fn a_signal_during_a_blocking_call_does_not_fail_it(
    server: &RedisServer,
    backend: Backend,
    interrupt: impl Fn(libc::pthread_t),
) {
    let limiter = backend.token_bucket("signalled", 1.0, 100).unwrap();
    assert!(limiter.check_blocking(Some("warm"), 1).unwrap().allowed, "connected, script loaded");
    // A hung server holds the next call in its read while signals arrive.
    server.pause();
    let (thread_tx, thread_rx) = std::sync::mpsc::channel();
    let caller = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        thread_tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
        limiter.check_blocking(Some("k"), 1)
    });
    let thread = thread_rx.recv().unwrap() as libc::pthread_t;
    // Several, so that one lands while the call waits in its read whatever the scheduling.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        interrupt(thread);
    }
    server.resume();
    let decision = caller.join().unwrap().expect("the call is answered once the server resumes");
    assert!(decision.allowed, "{decision:?}");
}

/// Sends SIGUSR1, handled by [`ignore_signal`], to `thread`.
fn signal_thread(thread: libc::pthread_t) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    // SAFETY: installs a handler that does nothing, with a zeroed (then filled) sigaction.
    INSTALLED.call_once(|| unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ignore_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
    });
    // SAFETY: the caller thread is alive until joined.
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
}

/// Stops this process and has another continue it, as a shell's job control, a container
/// freeze or a benchmark that pauses background work does.
fn stop_and_continue(_: libc::pthread_t) {
    let pid = std::process::id();
    let status = std::process::Command::new("sh")
        .args(["-c", &format!("kill -STOP {pid}; sleep 0.05; kill -CONT {pid}")])
        .status()
        .expect("run sh");
    assert!(status.success());
}

#[test]
fn a_signal_caught_during_a_blocking_call_does_not_fail_it_on_redis() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(10))).unwrap();
    a_signal_during_a_blocking_call_does_not_fail_it(&server, backend, signal_thread);
}

#[test]
fn a_signal_caught_during_a_blocking_call_does_not_fail_it_over_tls() {
    let server = RedisServer::start_tls();
    let ca = server.tls.as_ref().unwrap().ca_pem();
    let config = RedisConfig::new(server.url()).tls(TlsConfig::with_ca_pem(ca)).deadline(Duration::from_secs(10));
    a_signal_during_a_blocking_call_does_not_fail_it(&server, Backend::redis_with(config).unwrap(), signal_thread);
}

#[test]
fn a_stop_and_continue_during_a_blocking_call_does_not_fail_it() {
    let server = RedisServer::start();
    let backend = Backend::redis_with(RedisConfig::new(server.url()).deadline(Duration::from_secs(10))).unwrap();
    a_signal_during_a_blocking_call_does_not_fail_it(&server, backend, stop_and_continue);
}
