//! The Redis round trips of one call, for a binding that turns them into spans (OpenTelemetry
//! traces, see `docs/src/operating/observability.md`).
//!
//! A binding whose backend is traced ([`crate::Backend::start_tracing`], asked per call with
//! [`crate::Limiter::traced`]) runs the call inside [`collect`]; while it does, each command the
//! calling thread sends to Redis is noted as a [`RoundTrip`]: its command name, its start and end
//! and the server's address, never a key or an argument. The binding then makes one span per
//! round trip with those times, after the call, in the caller's context. Untraced, a round trip
//! pays one thread-local read; the memory path pays nothing.
//!
//! A blocking call (`*_blocking`, which runs the Redis call on the caller's thread, or polls it
//! there on a cluster) is noted by the calling thread ([`collect`]); an async call by its task,
//! wherever the runtime polls it ([`collect_into`] with a [`Collector`]). A call whose round
//! trips are made by another task (Node's driven checks, batched with other callers') notes
//! nothing here: a traced driven pipeline notes each of its round trips with the calls it
//! carried (`backend::redis::driven::Pipeline::trace`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// One command sent to Redis and its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundTrip {
    /// The command's name (`EVALSHA`, `EVAL`): OpenTelemetry's `db.operation.name`.
    pub command: &'static str,
    /// When it was sent (wall clock).
    pub start: SystemTime,
    /// When its reply was read (the start plus the monotonic clock's duration).
    pub end: SystemTime,
    /// The server's host and port when the backend names one server (`None` on a cluster or a
    /// Unix socket).
    pub server: Option<(String, u16)>,
    /// The error reply's code (`NOSCRIPT`, `BUSY`…) or `io` for a failed connection; `None`
    /// when Redis answered. Never the error's text (it may quote a key).
    pub error: Option<String>,
}

thread_local! {
    static COLLECTING: Cell<bool> = const { Cell::new(false) };
    static TRIPS: RefCell<Vec<RoundTrip>> = const { RefCell::new(Vec::new()) };
}

tokio::task_local! {
    static TASK: Collector;
}

/// Where an async call's round trips are noted (see [`collect_into`]); clones share the notes.
#[derive(Debug, Clone, Default)]
pub struct Collector(Arc<parking_lot::Mutex<Vec<RoundTrip>>>);

impl Collector {
    /// The round trips noted so far, leaving none.
    pub fn take(&self) -> Vec<RoundTrip> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// Runs `future`, noting into `collector` the Redis round trips its task makes meanwhile.
pub async fn collect_into<F: Future>(collector: Collector, future: F) -> F::Output {
    TASK.scope(collector, future).await
}

/// Runs `call`, noting the Redis round trips the calling thread makes meanwhile.
pub fn collect<R>(call: impl FnOnce() -> R) -> (R, Vec<RoundTrip>) {
    let collecting = begin();
    let result = call();
    (result, finish(collecting))
}

/// The calling thread noting its round trips, from [`begin`] to [`finish`].
#[derive(Debug)]
#[must_use = "finish it: the calling thread notes round trips until then"]
pub struct Collecting {
    outer: bool,
    before: usize,
}

/// Starts noting the Redis round trips the calling thread makes, until [`finish`]: [`collect`]
/// for a binding whose call starts and ends in two calls of its own (Node's tracing hook). The
/// last begun is finished first.
pub fn begin() -> Collecting {
    Collecting { outer: COLLECTING.with(|c| c.replace(true)), before: TRIPS.with(|t| t.borrow().len()) }
}

/// Ends [`begin`]: the round trips the calling thread made since.
pub fn finish(collecting: Collecting) -> Vec<RoundTrip> {
    COLLECTING.with(|c| c.set(collecting.outer));
    TRIPS.with(|t| t.borrow_mut().split_off(collecting.before))
}

/// Whether the calling thread, or the task it polls, notes round trips now.
#[inline(always)]
pub(crate) fn collecting() -> bool {
    COLLECTING.with(Cell::get) || TASK.try_with(|_| ()).is_ok()
}

/// A round trip being made: [`end`] notes it.
pub(crate) struct Pending {
    command: &'static str,
    wall: SystemTime,
    started: Instant,
}

/// Starts noting a round trip of `command`, if the calling thread collects.
#[inline]
pub(crate) fn start(command: &'static str) -> Option<Pending> {
    collecting().then(|| Pending { command, wall: SystemTime::now(), started: Instant::now() })
}

/// Notes the round trip `trip` (if the calling thread collects), to `servers` (the backend's
/// configured addresses), ended with `error` (a reply's error) or not.
pub(crate) fn end(trip: Option<Pending>, servers: &str, error: Option<&redis::RedisError>) {
    let Some(trip) = trip else { return };
    let noted = RoundTrip {
        command: trip.command,
        start: trip.wall,
        end: trip.wall + trip.started.elapsed(),
        server: server_of(servers),
        error: error.map(|e| e.code().unwrap_or("io").to_owned()),
    };
    if COLLECTING.with(Cell::get) {
        TRIPS.with(|t| t.borrow_mut().push(noted));
    } else {
        let _ = TASK.try_with(|c| c.0.lock().push(noted));
    }
}

/// Host and port of a single `host:port` address (a list, a cluster's or a socket path: `None`).
pub(crate) fn server_of(servers: &str) -> Option<(String, u16)> {
    if servers.contains(',') || servers.contains(' ') {
        return None;
    }
    let (host, port) = servers.rsplit_once(':')?;
    Some((host.trim_start_matches('[').trim_end_matches(']').to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_only_while_collecting() {
        assert!(start("EVALSHA").is_none());
        let ((), trips) = collect(|| {
            end(start("EVALSHA"), "127.0.0.1:7000", None);
            end(start("EVAL"), "a:1, b:2", None);
        });
        assert_eq!(trips.len(), 2);
        assert_eq!(trips[0].server, Some(("127.0.0.1".to_owned(), 7000)));
        assert_eq!(trips[1].command, "EVAL");
        assert_eq!(trips[1].server, None);
        assert!(trips[0].end >= trips[0].start);
        assert!(!collecting());
    }

    #[test]
    fn an_async_call_notes_into_its_collector_on_any_thread() {
        let collector = Collector::default();
        crate::runtime::block_on(collect_into(collector.clone(), async {
            end(start("EVALSHA"), "127.0.0.1:7000", None);
            // Polled again, perhaps elsewhere: still this task's.
            tokio::task::yield_now().await;
            end(start("EVAL"), "127.0.0.1:7000", None);
        }));
        assert_eq!(collector.take().iter().map(|t| t.command).collect::<Vec<_>>(), ["EVALSHA", "EVAL"]);
        assert!(collector.take().is_empty());
        assert!(!collecting());
    }
}
