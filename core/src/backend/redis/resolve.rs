//! Host name resolution within a call's deadline, for connections the calling thread makes
//! itself (see [`super::sync_client`]).
//!
//! The system resolver (`getaddrinfo`) cannot be cancelled or given a timeout, and an
//! unreachable DNS server holds it for seconds: a blocking call that resolved on its own thread
//! would outlive its deadline by that much. The lookup runs on a helper thread instead and the
//! caller waits for it only until its deadline; callers that come while a lookup is under way
//! wait for that one, so a stuck resolver holds one helper thread, not one per call. An address
//! that is already an IP literal is never looked up.

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

/// How a host name becomes addresses: the system resolver, or a stand-in in tests.
pub(crate) type LookupFn = fn(&str, u16) -> io::Result<Vec<SocketAddr>>;

/// The system resolver.
fn system_lookup(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// The answer of one lookup, shared by everyone waiting for it.
type Answer = Option<Result<Vec<SocketAddr>, (io::ErrorKind, String)>>;

/// One lookup under way (or just finished).
struct Lookup {
    answer: Mutex<Answer>,
    done: Condvar,
}

/// Resolves one host and port, each lookup bounded by its caller's deadline.
pub(crate) struct Resolver {
    host: String,
    port: u16,
    lookup: LookupFn,
    pending: Mutex<Option<Arc<Lookup>>>,
}

impl Resolver {
    /// Resolves `host` with the system resolver.
    pub(crate) fn new(host: String, port: u16) -> Resolver {
        Resolver::with_lookup(host, port, system_lookup)
    }

    /// Resolves `host` with `lookup` (tests).
    pub(crate) fn with_lookup(host: String, port: u16, lookup: LookupFn) -> Resolver {
        Resolver { host, port, lookup, pending: Mutex::new(None) }
    }

    /// The addresses of the host, or a `TimedOut` error once `until` passes.
    pub(crate) fn resolve(&self, until: Instant) -> io::Result<Vec<SocketAddr>> {
        let trimmed = self.host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = trimmed.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let lookup = {
            let mut pending = self.pending.lock();
            match &*pending {
                // A lookup is under way (or its answer not yet collected by a new caller).
                Some(lookup) if lookup.answer.lock().is_none() => lookup.clone(),
                _ => {
                    let lookup = Arc::new(Lookup { answer: Mutex::new(None), done: Condvar::new() });
                    let (shared, host, port, resolve) = (lookup.clone(), self.host.clone(), self.port, self.lookup);
                    let spawned = std::thread::Builder::new().name("ratekeeper-dns".into()).spawn(move || {
                        let answer = resolve(&host, port).map_err(|e| (e.kind(), e.to_string()));
                        *shared.answer.lock() = Some(answer);
                        shared.done.notify_all();
                    });
                    spawned?;
                    *pending = Some(lookup.clone());
                    lookup
                }
            }
        };
        let mut answer = lookup.answer.lock();
        while answer.is_none() {
            if lookup.done.wait_until(&mut answer, until).timed_out() && answer.is_none() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("resolving {} timed out", self.host)));
            }
        }
        match answer.as_ref().expect("answered") {
            Ok(addresses) => Ok(addresses.clone()),
            Err((kind, message)) => Err(io::Error::new(*kind, message.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn slow(_: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        std::thread::sleep(Duration::from_millis(1500));
        Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
    }

    fn fast(_: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        Ok(vec![SocketAddr::from(([127, 0, 0, 2], port))])
    }

    fn never(_: &str, _: u16) -> io::Result<Vec<SocketAddr>> {
        panic!("an IP literal is not looked up")
    }

    /// A resolver slower than the deadline ends the wait at the deadline, with a timeout; a
    /// second caller during the same lookup waits for that lookup (no second one), and once the
    /// lookup answers, its answer is used.
    #[test]
    fn a_slow_lookup_ends_at_the_deadline() {
        let resolver = Resolver::with_lookup("redis.example".into(), 6380, slow);
        let deadline = Duration::from_millis(200);
        for _ in 0..2 {
            let began = Instant::now();
            let error = resolver.resolve(began + deadline).expect_err("slower than the deadline");
            let took = began.elapsed();
            assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
            assert!(took >= deadline, "gave up after {took:?}, before the deadline");
            assert!(took < Duration::from_millis(1200), "waited {took:?} for a lookup past the deadline");
        }
        let addresses = resolver.resolve(Instant::now() + Duration::from_secs(5)).expect("answered");
        assert_eq!(addresses, vec![SocketAddr::from(([127, 0, 0, 1], 6380))]);
    }

    #[test]
    fn a_fast_lookup_answers_and_ip_literals_are_not_looked_up() {
        let resolver = Resolver::with_lookup("redis.example".into(), 7000, fast);
        assert_eq!(resolver.resolve(Instant::now() + Duration::from_secs(1)).unwrap()[0].port(), 7000);
        for host in ["127.0.0.1", "[::1]"] {
            let resolver = Resolver::with_lookup(host.into(), 7001, never);
            assert_eq!(resolver.resolve(Instant::now()).unwrap()[0].port(), 7001);
        }
    }
}
