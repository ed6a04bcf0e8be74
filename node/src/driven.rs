//! Redis calls driven on the JavaScript thread, the way ioredis does its I/O: no hand-off to a
//! runtime thread and back.
//!
//! Each environment keeps one connection per Redis endpoint (a plain standalone server; see
//! `ratekeeper::driven`), polled by libuv. A `check` or `peek` is written at once when nothing
//! is awaiting a reply. Otherwise it is queued, and the calls queued meanwhile travel together,
//! as one batched script invocation per script, without waiting for the replies already due:
//! the calls a loop turn makes (an HTTP server's requests, each in its socket's callback) are
//! written by a libuv prepare handle, which runs before the loop next waits for I/O; replies
//! are read and settled in the poll callback, a group at a time, and the calls the Promise
//! continuations of a group make (microtasks) are written before the next group settles. So
//! Redis works on one batch while JavaScript settles or sends the previous one (writing only
//! after a reply, app and Redis would take turns, each idle while the other works). At most
//! [`WRITES_IN_FLIGHT`] writes await their replies at once; replies come back in order on the
//! one connection, so each call still gets its own.
//!
//! The connection is made (and handshaken) on a runtime thread, never here; until it is ready,
//! or after it failed, calls run on the runtime as before. A call the server proves it did not
//! run (its script cache was flushed) runs again on the runtime, which reloads the script.
//! Deadlines are a libuv timer set to the earliest waiting call's. Each call ends at its own
//! deadline (with `Timeout`, through the failure policy); its reply, if it comes, is dropped. A
//! connection with a call that timed out may be stuck, so it is drained: the calls already on it
//! keep their own deadlines, new calls run on the runtime, and once it has no call left it is
//! replaced by a new connection.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use napi::{sys, Env};
use ratekeeper::driven::{DrivenCall, DrivenEndpoint, DrivenTrip, Finished, Pipeline};
use ratekeeper::Error;

use crate::bridge::{self, Outcome, Payload, ReplyValue};

/// libuv, as exported by the Node binary (the subset used here; see uv.h).
mod uv {
    use std::ffi::{c_int, c_void};

    pub const POLL: c_int = 8;
    pub const PREPARE: c_int = 9;
    pub const TIMER: c_int = 13;
    pub const READABLE: c_int = 1;
    pub const WRITABLE: c_int = 2;

    pub type PollCallback = unsafe extern "C" fn(handle: *mut c_void, status: c_int, events: c_int);
    pub type TimerCallback = unsafe extern "C" fn(handle: *mut c_void);
    pub type PrepareCallback = unsafe extern "C" fn(handle: *mut c_void);
    pub type CloseCallback = unsafe extern "C" fn(handle: *mut c_void);

    unsafe extern "C" {
        pub fn uv_handle_size(kind: c_int) -> usize;
        pub fn uv_poll_init_socket(event_loop: *mut c_void, handle: *mut c_void, socket: c_int) -> c_int;
        pub fn uv_poll_start(handle: *mut c_void, events: c_int, callback: PollCallback) -> c_int;
        pub fn uv_poll_stop(handle: *mut c_void) -> c_int;
        pub fn uv_timer_init(event_loop: *mut c_void, handle: *mut c_void) -> c_int;
        pub fn uv_timer_start(handle: *mut c_void, callback: TimerCallback, timeout_ms: u64, repeat: u64) -> c_int;
        pub fn uv_timer_stop(handle: *mut c_void) -> c_int;
        pub fn uv_prepare_init(event_loop: *mut c_void, handle: *mut c_void) -> c_int;
        pub fn uv_prepare_start(handle: *mut c_void, callback: PrepareCallback) -> c_int;
        pub fn uv_prepare_stop(handle: *mut c_void) -> c_int;
        pub fn uv_close(handle: *mut c_void, callback: CloseCallback);
        pub fn uv_ref(handle: *mut c_void);
        pub fn uv_unref(handle: *mut c_void);
    }
}

/// How long after a failed connect the next one starts (calls run on the runtime meanwhile).
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// How many writes may await their replies on one connection. Two already keep Redis busy
/// while JavaScript works; a few more let the batches settled in groups go out as they are
/// made. Queued calls beyond it wait for a reply and travel together.
const WRITES_IN_FLIGHT: usize = 4;

/// One endpoint's connection in this environment.
struct Connection {
    endpoint: DrivenEndpoint,
    state: State,
}

enum State {
    /// Being made on a runtime thread; the result lands here.
    Connecting(Arc<Mutex<Option<ratekeeper::Result<TcpStream>>>>),
    Live(Box<Live>),
    /// No connection; the next call after `retry_at` starts one.
    Down {
        retry_at: Instant,
    },
}

/// A connection polled by libuv.
struct Live {
    stream: TcpStream,
    poll: Handle,
    timer: Handle,
    /// Writes the calls queued during a loop turn before the loop waits (started while calls
    /// are queued and may be written).
    prepare: Handle,
    /// The prepare handle is started.
    flushing: bool,
    pipeline: Pipeline<f64>,
    /// Bytes to write, from `written` on.
    out: Vec<u8>,
    written: usize,
    /// The events polled for now.
    events: c_int,
    /// The poll handle keeps the event loop alive (calls are waiting).
    referenced: bool,
    /// When the timer fires, if it is armed.
    timer_at: Option<Instant>,
    /// A write failed: the poll callback tears the connection down.
    broken: Option<String>,
    /// Where replies are read to (zeroed once, not per read).
    read_buffer: Box<[u8]>,
    /// A call timed out: no new call is sent here, and the connection is replaced once the
    /// calls on it have ended.
    draining: bool,
}

thread_local! {
    /// This thread's environment's connections, by endpoint id.
    static CONNECTIONS: RefCell<HashMap<usize, Connection>> = RefCell::new(HashMap::new());
}

/// Sends `call` on this environment's connection to its endpoint and returns the call id; while
/// that connection is not ready, runs the call on the runtime.
pub fn submit(env: &Env, call: DrivenCall) -> napi::Result<ReplyValue> {
    let id = bridge::next_id()?;
    let endpoint = call.endpoint();
    let key = endpoint.id();
    let not_sent = CONNECTIONS.with(|connections| {
        let mut connections = connections.borrow_mut();
        let connection = connections
            .entry(key)
            .or_insert_with(|| Connection { endpoint, state: State::Down { retry_at: Instant::now() } });
        connection.make_ready(env);
        let State::Live(live) = &mut connection.state else { return Some(call) };
        if live.draining {
            return Some(call);
        }
        let idle = live.pipeline.writes_in_flight() == 0;
        crate::trace::driven(id);
        let deadline = live.pipeline.push(id, call);
        live.arm_timer(deadline);
        // With replies awaited, the call waits for the others of this loop turn (the prepare
        // handle writes them); while replies are settled, for the end of their group.
        if idle && SETTLING.get() != key {
            live.write_queued();
        }
        live.update_handles();
        None
    });
    if let Some(call) = not_sent {
        bridge::spawn(id, run_on_runtime(call));
    }
    bridge::id_value(env.raw(), id)
}

async fn run_on_runtime(call: DrivenCall) -> Outcome {
    Ok(Payload::Decision(call.run().await?, None))
}

/// Closes every connection; returns how many libuv handles are closing.
fn close_all() -> usize {
    let connections = CONNECTIONS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let mut closing = 0;
    for (_, connection) in connections {
        if let State::Live(live) = connection.state {
            live.close(true);
            closing += 3;
        }
    }
    closing
}

thread_local! {
    /// This environment's teardown hook: registered with the first connection.
    static TEARDOWN_HOOK: Cell<bool> = const { Cell::new(false) };
    /// Set once the environment is going away: the hook to remove when the last handle closed.
    static TEARDOWN: Cell<Option<(sys::napi_async_cleanup_hook_handle, usize)>> = const { Cell::new(None) };
}

/// Makes the environment's teardown wait for the connections' handles to close: a worker's
/// event loop must have no handle left when it is closed.
fn watch_teardown(env: &Env) {
    if TEARDOWN_HOOK.get() {
        return;
    }
    let mut handle = std::ptr::null_mut();
    // SAFETY: `env` is the current call's environment (we are on its JavaScript thread);
    // `on_teardown` takes no data and `handle` is a local the hook's handle is written to.
    let status =
        unsafe { sys::napi_add_async_cleanup_hook(env.raw(), Some(on_teardown), std::ptr::null_mut(), &mut handle) };
    TEARDOWN_HOOK.set(status == sys::Status::napi_ok);
}

unsafe extern "C" fn on_teardown(hook: sys::napi_async_cleanup_hook_handle, _: *mut c_void) {
    TEARDOWN_HOOK.set(false);
    match close_all() {
        // SAFETY: `hook` is the handle Node passed for this very hook, not removed yet (the
        // other removal, `closed_during_teardown`, only runs once `TEARDOWN` holds it).
        0 => unsafe {
            sys::napi_remove_async_cleanup_hook(hook);
        },
        closing => TEARDOWN.set(Some((hook, closing))),
    }
}

/// A handle closed by the teardown: the last one lets the environment go.
fn closed_during_teardown() {
    if let Some((hook, closing)) = TEARDOWN.get() {
        if closing <= 1 {
            TEARDOWN.set(None);
            // SAFETY: `hook` is the live hook `on_teardown` stored, removed once: `TEARDOWN`
            // was just cleared.
            unsafe { sys::napi_remove_async_cleanup_hook(hook) };
        } else {
            TEARDOWN.set(Some((hook, closing - 1)));
        }
    }
}

impl Connection {
    /// Moves towards a live connection: takes a finished connect, or starts one.
    fn make_ready(&mut self, env: &Env) {
        match &self.state {
            State::Live(_) => {}
            State::Connecting(slot) => {
                let Some(connected) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
                let key = self.key();
                watch_teardown(env);
                self.state = match connected.map_err(|e| e.to_string()).and_then(|s| Live::start(env, s, key)) {
                    Ok(live) => State::Live(live),
                    Err(_) => State::Down { retry_at: Instant::now() + RECONNECT_BACKOFF },
                };
            }
            State::Down { retry_at } if Instant::now() >= *retry_at => {
                let slot = Arc::new(Mutex::new(None));
                let (endpoint, landing) = (self.endpoint.clone(), slot.clone());
                ratekeeper::runtime().spawn_blocking(move || {
                    let connected = endpoint.connect();
                    *landing.lock().unwrap_or_else(|e| e.into_inner()) = Some(connected);
                });
                self.state = State::Connecting(slot);
            }
            State::Down { .. } => {}
        }
    }

    fn key(&self) -> usize {
        self.endpoint.id()
    }
}

/// A libuv handle's memory (sized by libuv), freed by its close callback.
struct Handle(*mut c_void);

/// Bytes for any handle used here, in 8-byte words.
fn handle_words() -> usize {
    static WORDS: OnceLock<usize> = OnceLock::new();
    *WORDS.get_or_init(|| {
        // SAFETY: `uv_handle_size` only reads a table, for any handle type; these two exist.
        let bytes = unsafe {
            uv::uv_handle_size(uv::POLL).max(uv::uv_handle_size(uv::TIMER)).max(uv::uv_handle_size(uv::PREPARE))
        };
        bytes.div_ceil(8)
    })
}

impl Handle {
    /// Zeroed memory for a handle whose `data` (its first field) is `key`.
    fn new(key: usize) -> Handle {
        let memory: Box<[u64]> = vec![0u64; handle_words()].into_boxed_slice();
        let handle = Box::into_raw(memory) as *mut u64 as *mut c_void;
        // SAFETY: `handle` owns at least one 8-aligned word (a handle is bigger than one): its
        // first, libuv's `data` field, which libuv never writes.
        unsafe { *(handle as *mut usize) = key };
        Handle(handle)
    }

    /// Closes the handle; its memory is freed once libuv is done with it (and, at `teardown`,
    /// the environment is told when the last handle is).
    fn close(self, teardown: bool) {
        unsafe fn free(handle: *mut c_void) {
            let words = std::ptr::slice_from_raw_parts_mut(handle as *mut u64, handle_words());
            // SAFETY: `handle` is the `Box<[u64]>` of `handle_words()` words `Handle::new`
            // leaked; libuv is done with it (its close callback runs once, last).
            drop(unsafe { Box::from_raw(words) });
        }
        unsafe extern "C" fn closed(handle: *mut c_void) {
            // SAFETY: libuv calls this once, for a handle of ours, when it is done with it.
            unsafe { free(handle) };
        }
        unsafe extern "C" fn closed_at_teardown(handle: *mut c_void) {
            // SAFETY: as for `closed`.
            unsafe { free(handle) };
            closed_during_teardown();
        }
        // SAFETY: `self` is an initialised handle of this thread's loop, closed once: `close`
        // takes it by value and `Handle` is neither `Clone` nor `Copy`.
        unsafe { uv::uv_close(self.0, if teardown { closed_at_teardown } else { closed }) };
    }
}

/// The connection key a handle was made for.
fn key_of(handle: *mut c_void) -> usize {
    // SAFETY: libuv passes its callbacks only handles of ours, live until their close callback;
    // their first word is the key `Handle::new` wrote.
    unsafe { *(handle as *const usize) }
}

impl Live {
    fn start(env: &Env, stream: TcpStream, key: usize) -> Result<Box<Live>, String> {
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut event_loop = std::ptr::null_mut();
        // SAFETY: `env` is the current call's environment; `event_loop` is a local.
        let status = unsafe { sys::napi_get_uv_event_loop(env.raw(), &mut event_loop) };
        if status != sys::Status::napi_ok || event_loop.is_null() {
            return Err("no event loop".into());
        }
        let event_loop = event_loop as *mut c_void;
        let (poll, timer, prepare) = (Handle::new(key), Handle::new(key), Handle::new(key));
        // SAFETY: `event_loop` is this thread's loop, the handles are fresh memory of the size
        // libuv asked for, and the socket is open and owned by `stream`, which `Live` keeps
        // until it has stopped polling it. A handle libuv failed to initialise was never
        // registered, so its memory is ours to free, and the timer's is not yet initialised.
        unsafe {
            if uv::uv_poll_init_socket(event_loop, poll.0, stream.as_raw_fd()) != 0 {
                // Never initialised: its memory is ours to free (the timer's and prepare's too).
                for h in [poll, timer, prepare] {
                    drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(h.0 as *mut u64, handle_words())));
                }
                return Err("uv_poll_init_socket failed".into());
            }
            uv::uv_timer_init(event_loop, timer.0);
            uv::uv_unref(timer.0);
            uv::uv_prepare_init(event_loop, prepare.0);
            uv::uv_unref(prepare.0);
            uv::uv_unref(poll.0);
        }
        let mut pipeline = Pipeline::new();
        pipeline.trace(TRACED.get());
        let mut live = Box::new(Live {
            stream,
            poll,
            timer,
            prepare,
            flushing: false,
            pipeline,
            out: Vec::with_capacity(4096),
            written: 0,
            events: 0,
            referenced: false,
            timer_at: None,
            broken: None,
            read_buffer: vec![0; 16 * 1024].into_boxed_slice(),
            draining: false,
        });
        live.update_handles();
        Ok(live)
    }

    /// Writes the queued calls, unless [`WRITES_IN_FLIGHT`] writes already await replies (what
    /// the socket does not take now waits for it to be writable).
    fn write_queued(&mut self) {
        if self.may_write() {
            self.pipeline.write_queued(&mut self.out);
        }
        self.write_out();
    }

    /// Calls are queued and may be written now.
    fn may_write(&self) -> bool {
        self.pipeline.has_queued() && self.pipeline.writes_in_flight() < WRITES_IN_FLIGHT
    }

    fn write_out(&mut self) {
        while self.written < self.out.len() && self.broken.is_none() {
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => self.broken = Some("Redis closed the connection".into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.broken = Some(format!("Redis: {e}")),
            }
        }
        if self.written == self.out.len() {
            self.out.clear();
            self.written = 0;
        }
    }

    /// Polls for what is needed, keeps the loop alive while calls wait, and arms the timer
    /// for the oldest waiting call's deadline.
    fn update_handles(&mut self) {
        let mut events = uv::READABLE;
        if !self.out.is_empty() || self.broken.is_some() {
            events |= uv::WRITABLE;
        }
        if events != self.events {
            // SAFETY: `self.poll` is initialised and not closed (only `close(self)` closes it).
            unsafe { uv::uv_poll_start(self.poll.0, events, on_poll) };
            self.events = events;
        }
        let waiting = self.pipeline.has_queued() || self.pipeline.awaiting_replies();
        if waiting != self.referenced {
            // SAFETY: as above, the poll handle is initialised and open.
            unsafe {
                if waiting {
                    uv::uv_ref(self.poll.0)
                } else {
                    uv::uv_unref(self.poll.0)
                }
            };
            self.referenced = waiting;
        }
        let flush = self.may_write();
        if flush != self.flushing {
            // SAFETY: `self.prepare` is initialised and not closed (only `close(self)` closes it).
            unsafe {
                if flush {
                    uv::uv_prepare_start(self.prepare.0, on_prepare);
                } else {
                    uv::uv_prepare_stop(self.prepare.0);
                }
            };
            self.flushing = flush;
        }
        // An armed timer fires no later than the oldest call's deadline (calls only end, or
        // arm it earlier as they come); when it fires, it re-arms for what is left.
        if self.timer_at.is_none() {
            if let Some(deadline) = self.pipeline.next_deadline() {
                self.arm_timer(deadline);
            }
        }
    }

    /// Makes the timer fire by `deadline`.
    fn arm_timer(&mut self, deadline: Instant) {
        if self.timer_at.is_none_or(|at| deadline < at) {
            let ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64 + 1;
            // SAFETY: `self.timer` is initialised and not closed (only `close(self)` closes it).
            unsafe { uv::uv_timer_start(self.timer.0, on_timer, ms, 0) };
            self.timer_at = Some(deadline);
        }
    }

    /// Reads what has arrived into the pipeline.
    fn read_available(&mut self, done: &mut Vec<(f64, Finished)>) {
        loop {
            match self.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    self.broken = Some("Redis closed the connection".into());
                    return;
                }
                Ok(n) => {
                    if let Err(e) = self.pipeline.read(&self.read_buffer[..n], done) {
                        self.broken = Some(e.to_string());
                        return;
                    }
                    if self.pipeline.demoted() && !self.draining {
                        // The server is a replica now (a failover): drain this connection like a
                        // stuck one, so that a new connection is made once it is empty.
                        self.draining = true;
                        for (id, call) in self.pipeline.take_queued() {
                            done.push((id, Finished::Rerun(call)));
                        }
                    }
                    if n < self.read_buffer.len() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken = Some(format!("Redis: {e}"));
                    return;
                }
            }
        }
    }

    fn close(self, teardown: bool) {
        // SAFETY: the handles are initialised and still open; they are closed right after.
        unsafe {
            uv::uv_poll_stop(self.poll.0);
            uv::uv_timer_stop(self.timer.0);
            uv::uv_prepare_stop(self.prepare.0);
        }
        self.poll.close(teardown);
        self.timer.close(teardown);
        self.prepare.close(teardown);
        // The socket closes here, after libuv stopped polling it.
    }
}

/// Runs `f` on the live connection `key`, then, if it broke, fails its calls and drops it.
/// Returns the calls that ended, to be settled with no borrow held (settling runs JavaScript,
/// which may submit calls).
fn with_live(key: usize, f: impl FnOnce(&mut Live, &mut Vec<(f64, Finished)>)) -> Vec<(f64, Finished)> {
    let mut done = Vec::new();
    CONNECTIONS.with(|connections| {
        let mut connections = connections.borrow_mut();
        let Some(connection) = connections.get_mut(&key) else { return };
        let State::Live(live) = &mut connection.state else { return };
        f(live, &mut done);
        if TRACED.get() {
            note_round_trips(live.pipeline.take_round_trips(), &done);
        }
        if live.draining && !live.pipeline.has_waiting_calls() && live.broken.is_none() {
            live.broken = Some("drained".into()); // no call is left to fail
        }
        if let Some(message) = live.broken.take() {
            live.pipeline.fail_all(&Error::BackendUnavailable { message }, &mut done);
            note_round_trips(live.pipeline.take_round_trips(), &done);
            if let State::Live(live) =
                std::mem::replace(&mut connection.state, State::Down { retry_at: Instant::now() })
            {
                live.close(false);
            }
        } else {
            live.update_handles();
        }
    });
    done
}

/// Settles ended calls; calls to run again (or to send another way) go to the runtime.
fn settle(done: Vec<(f64, Finished)>) {
    // Traced: the round trips noted for these calls are dropped once they settled (a call rerun
    // on the runtime settles later, without one).
    let ids: Option<Vec<f64>> = TRACED.get().then(|| done.iter().map(|(id, _)| *id).collect());
    let mut settled = Vec::with_capacity(done.len());
    for (id, finished) in done {
        // A traced call's round trips on the runtime (a NOSCRIPT's re-run) are its own.
        let traced = ids.is_some() && crate::trace::take_driven(id);
        match finished {
            Finished::Done(result) => settled.push((id, result.map(|d| Payload::Decision(d, None)))),
            Finished::Rerun(call) if traced => {
                crate::trace::spawning_traced(|| bridge::spawn(id, run_on_runtime(call)))
            }
            Finished::Rerun(call) => bridge::spawn(id, run_on_runtime(call)),
        }
    }
    bridge::settle_from_loop(settled);
    if let Some(ids) = ids {
        // Their continuations have run (and taken their round trips): drop the rest (calls of
        // untraced backends sharing the connection, calls rerun on the runtime).
        ROUND_TRIPS.with(|trips| {
            let mut trips = trips.borrow_mut();
            for id in ids {
                trips.remove(&id.to_bits());
            }
        });
    }
}

thread_local! {
    /// Round trips are noted for `ratekeeper/otel` (see [`driven_tracing`]).
    static TRACED: Cell<bool> = const { Cell::new(false) };
    /// The round trip of each call being settled, by call id (see [`driven_round_trip`]).
    static ROUND_TRIPS: RefCell<HashMap<u64, DrivenRoundTrip>> = RefCell::new(HashMap::new());
    /// The last round trip's number (unique within the environment).
    static LAST_TRIP: Cell<f64> = const { Cell::new(0.0) };
}

/// Internal (`ratekeeper/otel`): one Redis round trip of a driven connection, as the call it
/// carried sees it. Never a key or an argument.
#[napi_derive::napi(object)]
pub struct DrivenRoundTrip {
    /// Identifies the round trip among this environment's: the calls it carried share it.
    pub trip: f64,
    /// The command (`EVALSHA`).
    pub command: String,
    /// When it was written and when its reply was read (or the connection failed), as
    /// milliseconds since the Unix epoch.
    pub start_ms: f64,
    pub end_ms: f64,
    /// How many calls it carried, this one included (traced or not).
    pub batch: u32,
    /// The configured server, if the backend names one.
    pub address: Option<String>,
    pub port: Option<u32>,
    /// The reply's error code, or `io` when the connection failed.
    pub error: Option<String>,
}

impl DrivenRoundTrip {
    /// Round trip `trip` as a call it carried sees it: its number (0: none) and how many calls
    /// it carried.
    pub(crate) fn of(trip: &ratekeeper::trace::RoundTrip, number: f64, batch: usize) -> Self {
        let epoch_ms =
            |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let (address, port) =
            trip.server.as_ref().map_or((None, None), |(host, port)| (Some(host.clone()), Some(u32::from(*port))));
        DrivenRoundTrip {
            trip: number,
            command: trip.command.to_owned(),
            start_ms: epoch_ms(trip.start),
            end_ms: epoch_ms(trip.end),
            batch: batch as u32,
            address,
            port,
            error: trip.error.clone(),
        }
    }
}

/// Notes `trips` by the ids of the calls they ended (entries of `done`).
fn note_round_trips(trips: Vec<DrivenTrip>, done: &[(f64, Finished)]) {
    ROUND_TRIPS.with(|noted| {
        let mut noted = noted.borrow_mut();
        for DrivenTrip { calls, batch, trip } in trips {
            let number = LAST_TRIP.get() + 1.0;
            LAST_TRIP.set(number);
            for (id, _) in &done[calls] {
                noted.insert(id.to_bits(), DrivenRoundTrip::of(&trip, number, batch));
            }
        }
    });
}

/// Internal (`ratekeeper/otel`): notes each driven round trip from now on (`on`), or stops.
/// Untraced, the driven path pays one branch per write and per reply read.
#[napi_derive::napi(skip_typescript)]
pub fn driven_tracing(on: bool) {
    TRACED.set(on);
    CONNECTIONS.with(|c| {
        for connection in c.borrow_mut().values_mut() {
            if let State::Live(live) = &mut connection.state {
                live.pipeline.trace(on);
            }
        }
    });
    if !on {
        ROUND_TRIPS.with(|t| t.borrow_mut().clear());
        crate::trace::clear();
    }
}

/// Internal (`ratekeeper/otel`): the round trip that carried driven call `id`, while its result
/// is being settled (its Promise's continuations run then); taken once.
#[napi_derive::napi(skip_typescript)]
pub fn driven_round_trip(id: f64) -> Option<DrivenRoundTrip> {
    ROUND_TRIPS.with(|t| t.borrow_mut().remove(&id.to_bits()))
}

/// Replies are settled this many at a time; the calls their continuations make are written
/// after each group, so the server works on them while the next group settles.
const SETTLE_GROUP: usize = 16;

thread_local! {
    /// The connection whose replies are being settled (0: none): calls made on it then are
    /// written after their group; calls on other connections are written at once.
    static SETTLING: Cell<usize> = const { Cell::new(0) };
}

unsafe extern "C" fn on_poll(handle: *mut c_void, status: c_int, events: c_int) {
    without_unwinding(|| poll_ready(key_of(handle), status, events));
}

/// Runs a libuv callback's body: a panic (a bug) must not unwind into libuv, which would abort
/// the process; the calls of that moment may then stay unsettled until their deadline.
fn without_unwinding(body: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
}

fn poll_ready(key: usize, status: c_int, events: c_int) {
    let done = with_live(key, |live, done| {
        if status < 0 {
            live.broken = Some(format!("Redis: connection error (libuv status {status})"));
            return;
        }
        if events & uv::WRITABLE != 0 {
            live.write_out();
        }
        if events & uv::READABLE != 0 {
            live.read_available(done);
        }
    });
    let mut done = done.into_iter().peekable();
    while done.peek().is_some() {
        SETTLING.set(key);
        settle(done.by_ref().take(SETTLE_GROUP).collect());
        SETTLING.set(0);
        // The calls made by the continuations just run (or queued while waiting) go out now.
        let failed = with_live(key, |live, _| live.write_queued());
        settle(failed);
    }
}

unsafe extern "C" fn on_prepare(handle: *mut c_void) {
    without_unwinding(|| settle(with_live(key_of(handle), |live, _| live.write_queued())));
}

unsafe extern "C" fn on_timer(handle: *mut c_void) {
    without_unwinding(|| timer_fired(key_of(handle)));
}

fn timer_fired(key: usize) {
    let done = with_live(key, |live, done| {
        live.timer_at = None;
        if live.pipeline.expire(Instant::now(), done) {
            // The server or the connection may be stuck: drain it (see the module
            // documentation). Calls not yet written go to the runtime.
            live.draining = true;
            for (id, call) in live.pipeline.take_queued() {
                done.push((id, Finished::Rerun(call)));
            }
        }
    });
    settle(done);
}

/// Internal (tests): how many writes await their replies on this environment's connections.
#[napi_derive::napi(skip_typescript)]
pub fn driven_in_flight() -> u32 {
    CONNECTIONS.with(|c| {
        let connections = c.borrow();
        let live = connections.values().filter_map(|c| match &c.state {
            State::Live(live) => Some(live.pipeline.writes_in_flight()),
            _ => None,
        });
        live.sum::<usize>() as u32
    })
}

/// Internal (tests): how many driven connections this environment has live.
#[napi_derive::napi(skip_typescript)]
pub fn driven_connections() -> u32 {
    CONNECTIONS.with(|c| c.borrow().values().filter(|c| matches!(c.state, State::Live(_))).count() as u32)
}
