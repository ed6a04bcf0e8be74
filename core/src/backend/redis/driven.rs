//! Calls a caller sends on a connection it drives itself: for an event loop (Node's libuv) that
//! polls a socket on its own thread instead of handing every call to the runtime and back.
//!
//! The core stays in charge of everything but the socket: [`Limiter::drive_check`] builds the
//! command, a [`Pipeline`] batches queued calls (the same batched script invocations as the
//! runtime's connection), frames the replies and turns each into a decision, applying the
//! failure policy to a connection that failed or a deadline that passed. The caller writes
//! [`Pipeline::write_queued`]'s bytes (as often as it likes before earlier replies arrive: they
//! are matched in order; [`Pipeline::writes_in_flight`] says how many writes await theirs, for
//! the caller to bound), feeds what it reads to [`Pipeline::read`], calls
//! [`Pipeline::expire`] when [`Pipeline::next_deadline`] passes (each call keeps its own
//! deadline), and [`Pipeline::fail_all`] when the socket fails.
//!
//! Only plain standalone servers are driven ([`Driven::Unsupported`] elsewhere: a cluster
//! routes by slot, TLS needs its own state machine), and only `check` and `peek` of the rate
//! limiters (a concurrent limiter's lease bookkeeping stays on the runtime).

use std::collections::VecDeque;
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use redis::{Cmd, Value};

use super::evalsha::{self, interpret, ScriptReply, MAX_BATCH};
use super::resp::{frame_len, parse_frame};
use super::{Connections, RedisBackend};
use crate::decision::Decision;
use crate::engine::lua::LuaScript;
use crate::engine::{Algorithm, Op, Outcome};
use crate::error::{Error, Result};
use crate::limiter::pipeline::{Call, States};
use crate::limiter::Limiter;
use crate::params::validate_key;
use crate::trace::RoundTrip;

/// What [`Limiter::drive_check`] and [`Limiter::drive_peek`] give.
pub enum Driven {
    /// Answered already: the limiter needs no I/O (memory backend, `unlimited`).
    Done(Decision),
    /// To send on a connection to [`DrivenCall::endpoint`], through a [`Pipeline`].
    Send(DrivenCall),
    /// This call is not driven (a cluster, TLS, a concurrent limiter): use the async call.
    Unsupported,
}

/// A call ready to travel on a driven connection. If it cannot (no connection yet), [`Self::run`]
/// runs it on the runtime instead, exactly like the async call.
pub struct DrivenCall {
    limiter: Limiter,
    backend: Arc<RedisBackend>,
    key: Box<str>,
    op: Op,
    /// Set when the call is queued on a [`Pipeline`]: the call keeps it if it runs on the
    /// runtime after all (see [`Self::run`]).
    deadline: Option<Instant>,
    script: &'static LuaScript,
    cmd: Cmd,
    /// The call as the limiter's check pipeline began it: the live override it decides with (if
    /// any, see [`crate::Backend::set_limit`]) and each policy's state.
    call: Call,
    states: States,
}

impl Limiter {
    /// [`Limiter::check`] as a [`Driven`] call. Arguments are validated here: a bad one is an
    /// error now, before anything is sent.
    pub fn drive_check(&self, key: Option<&str>, cost: u64) -> Result<Driven> {
        let (key, op) = self.check_op(key, cost)?;
        self.drive(key, op)
    }

    /// [`Limiter::peek`] as a [`Driven`] call.
    pub fn drive_peek(&self, key: Option<&str>) -> Result<Driven> {
        self.drive(validate_key(key)?, Op::Peek)
    }

    fn drive(&self, key: &str, op: Op) -> Result<Driven> {
        let Some((backend, _)) = self.redis_target() else {
            return Ok(Driven::Done(self.ticketed_op(self.run_local(key, op)?, key, op)));
        };
        // A leased limiter's round trips take leases (see `leased_check`), on the runtime; so
        // do a concurrent limiter's, and a call whose policies write after it (a block).
        if let (Algorithm::Leased(_), Op::Check { .. }) = (self.algorithm(), op) {
            return Ok(match self.answer_in_process(key, op) {
                Some(outcome) => Driven::Done(self.ticketed_op(outcome?, key, op)),
                None => Driven::Unsupported,
            });
        }
        if matches!(self.algorithm(), Algorithm::Concurrent(_) | Algorithm::Leased(_))
            || !self.drivable(op)
            || !backend.connections().drivable()
        {
            return Ok(Driven::Unsupported);
        }
        backend.ensure_live_task();
        let (mut call, states) = match self.begin(key, op) {
            Ok(begun) => begun,
            Err(answer) => return Ok(Driven::Done(self.ticketed_op(answer, key, op))),
        };
        // Its latency is counted from here, as a call on the runtime's is (`went_to_redis`).
        call.went_to_redis();
        let prepared = backend.prepare_for(self.kind(), self.name(), key, call.algorithm(self), op, self.colocate())?;
        Ok(Driven::Send(DrivenCall {
            limiter: self.clone(),
            backend: backend.clone(),
            key: key.into(),
            op,
            deadline: None,
            script: prepared.script,
            cmd: prepared.cmd,
            call,
            states,
        }))
    }
}

impl DrivenCall {
    /// Where the call goes: one driven connection serves every call of one endpoint (backends
    /// configured alike share their endpoint).
    pub fn endpoint(&self) -> DrivenEndpoint {
        DrivenEndpoint(self.backend.connections().clone())
    }

    /// Runs the call on the runtime, as the async `check` / `peek` would; a call that was queued
    /// on a [`Pipeline`] still ends by the deadline it got there (with `Timeout`, through the
    /// failure policy).
    pub async fn run(self) -> Result<Decision> {
        let Some(deadline) = self.deadline else {
            let outcome = self.limiter.run(&self.key, self.op).await?;
            return Ok(self.limiter.ticketed_op(outcome, &self.key, self.op));
        };
        match tokio::time::timeout_at(deadline.into(), self.limiter.run(&self.key, self.op)).await {
            Ok(outcome) => Ok(self.limiter.ticketed_op(outcome?, &self.key, self.op)),
            Err(_) => {
                let timed_out = self.timed_out();
                self.conclude(Err(timed_out))
            }
        }
    }

    fn timed_out(&self) -> Error {
        self.backend.connections().timeout(self.backend.deadline())
    }

    /// How the call ends given its reply `value`: rerun when the reply proves the script did
    /// not run (e.g. the server's script cache was flushed).
    fn finish(self, value: Value) -> Finished {
        let remote = match interpret(value) {
            ScriptReply::Values(values) => self.backend.finish(self.algorithm(), self.op, None, values),
            ScriptReply::DidNotRun => return Finished::Rerun(self),
            ScriptReply::Failed(e) => Err(e),
        };
        Finished::Done(self.conclude(remote))
    }

    /// The algorithm the call decides with: its override's, or its limiter's.
    fn algorithm(&self) -> &Algorithm {
        self.call.algorithm(&self.limiter)
    }

    /// What the call returns given what Redis did: the failure policy applies, then the rest of
    /// the limiter's check pipeline (counted, each policy's `after` hook; none writes: see
    /// `Policies::drivable`).
    fn conclude(self, remote: Result<Outcome>) -> Result<Decision> {
        let Some((_, failover)) = self.limiter.redis_target() else {
            return Ok(self.limiter.ticketed_op(remote?, &self.key, self.op));
        };
        let failover = Limiter::failover_for(failover, self.call.over.as_deref());
        let outcome = self.backend.apply_policy(remote, &self.key, self.algorithm(), &failover, self.op);
        let DrivenCall { limiter, key, op, call, states, .. } = self;
        // No policy asks for a hold here (see `Policies::drivable`): nothing more is written.
        let mut outcome = outcome;
        let _ = limiter.after_engine(&call, &outcome);
        limiter.conclude(&key, call, states, None, &mut outcome);
        Ok(limiter.ticketed_op(outcome?, &key, op))
    }
}

/// The server behind driven calls (see [`DrivenCall::endpoint`]).
#[derive(Clone)]
pub struct DrivenEndpoint(Arc<Connections>);

impl DrivenEndpoint {
    /// Identifies the endpoint among others (stable while any of its calls or endpoints live).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// A new connection to the endpoint, handshaken (AUTH, SELECT, PING), in blocking mode:
    /// blocks for up to the connect timeout, so call it off the event loop.
    pub fn connect(&self) -> Result<TcpStream> {
        self.0.connect_driven().unwrap_or_else(|| Err(Error::invalid("backend", "this backend is not driven")))
    }
}

impl<T> Default for Pipeline<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// How a driven call ended.
pub enum Finished {
    /// Its result (the failure policy already applied).
    Done(Result<Decision>),
    /// The call certainly did not run (the server proved it, or it was never written):
    /// [`DrivenCall::run`] it on the runtime.
    Rerun(DrivenCall),
}

/// A call not yet answered, with the caller's token.
struct Waiting<T> {
    token: T,
    call: DrivenCall,
}

impl<T> Waiting<T> {
    /// When the call's deadline passes (set by [`Pipeline::push`]).
    fn deadline(&self) -> Instant {
        self.call.deadline.unwrap_or_else(Instant::now)
    }
}

/// Calls sent together: one command, so one reply.
struct Sent<T> {
    /// A slot is emptied when its call's deadline passes first: the reply is then read and
    /// dropped.
    calls: Vec<Option<Waiting<T>>>,
    /// More than one call: the reply is an array with one reply per call.
    batched: bool,
    /// The last command of a [`Pipeline::write_queued`]: its reply ends that write.
    ends_write: bool,
    /// When it was written, if the pipeline is traced (see [`Pipeline::trace`]).
    written: Option<(SystemTime, Instant)>,
}

/// One traced command of a driven connection and the calls it answered (see
/// [`Pipeline::take_round_trips`]).
#[derive(Debug)]
pub struct DrivenTrip {
    /// The entries of the `done` list given to [`Pipeline::read`] (or [`Pipeline::fail_all`])
    /// that this command ended: its calls (those whose deadline had not passed).
    pub calls: Range<usize>,
    /// How many calls the command carried (one batched script invocation may carry several).
    pub batch: usize,
    /// The command, its times, server and error code (never a key or an argument).
    pub trip: RoundTrip,
}

/// Queued calls of one script, to be sent as one command.
struct Group<T> {
    script: &'static LuaScript,
    calls: Vec<Waiting<T>>,
}

/// The calls of one driven connection, sans I/O: queued, then sent (in order), then answered.
/// `T` is the caller's token for a call (e.g. the id its Promise waits on).
pub struct Pipeline<T> {
    queued: Vec<Waiting<T>>,
    sent: VecDeque<Sent<T>>,
    /// Bytes read and not yet a whole reply.
    input: Vec<u8>,
    /// A reply said READONLY (see [`Self::demoted`]).
    demoted: bool,
    /// Writes whose replies are not all read (see [`Self::writes_in_flight`]).
    writes: usize,
    /// Traced (see [`Self::trace`]): the round trips answered and not yet taken.
    trips: Option<Vec<DrivenTrip>>,
}

impl<T> Pipeline<T> {
    /// An empty pipeline.
    pub fn new() -> Self {
        Pipeline {
            queued: Vec::new(),
            sent: VecDeque::new(),
            input: Vec::new(),
            demoted: false,
            writes: 0,
            trips: None,
        }
    }

    /// True once a reply said READONLY: the server was demoted to replica in a failover. Its
    /// calls got the failure policy; no new call should be written here: the caller drains this
    /// connection and connects again, which reaches the new primary wherever the address leads
    /// there (a DNS name, a proxy).
    pub fn demoted(&self) -> bool {
        self.demoted
    }

    /// Queues `call` (its backend's deadline starts now) and returns its deadline;
    /// [`Self::write_queued`] sends it.
    pub fn push(&mut self, token: T, mut call: DrivenCall) -> Instant {
        let deadline = Instant::now() + call.backend.deadline();
        call.deadline = Some(deadline);
        self.queued.push(Waiting { token, call });
        deadline
    }

    /// True when calls are queued and not yet written.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// True when calls are waiting to be answered (queued or sent, their deadlines not passed).
    pub fn has_waiting_calls(&self) -> bool {
        !self.queued.is_empty() || self.sent.iter().any(|s| s.calls.iter().any(Option::is_some))
    }

    /// True when commands were written and are not yet answered (including those of calls whose
    /// deadline passed: their replies are still due).
    pub fn awaiting_replies(&self) -> bool {
        !self.sent.is_empty()
    }

    /// How many [`Self::write_queued`]s that wrote something still await a reply: a write may
    /// be made before the previous one's replies arrive (they come back in order on one
    /// connection), so the caller bounds how many it lets travel at once.
    pub fn writes_in_flight(&self) -> usize {
        self.writes
    }

    /// Appends every queued call to `out`: calls of one script travel as one batched script
    /// invocation (up to the batch limit), like the runtime connection's. Replies still due for
    /// earlier writes come first: the calls' replies are matched in the order they were written.
    pub fn write_queued(&mut self, out: &mut Vec<u8>) {
        if self.queued.is_empty() {
            return;
        }
        let mut groups: Vec<Group<T>> = Vec::new();
        for waiting in self.queued.drain(..) {
            let group = match groups.iter().position(|g| std::ptr::eq(g.script, waiting.call.script)) {
                Some(i) => &mut groups[i],
                None => {
                    groups.push(Group { script: waiting.call.script, calls: Vec::new() });
                    groups.last_mut().expect("just pushed")
                }
            };
            group.calls.push(waiting);
        }
        for Group { calls, .. } in groups {
            let mut calls = calls.into_iter().peekable();
            let size = batch_size(calls.len());
            while calls.peek().is_some() {
                let batch: Vec<Waiting<T>> = calls.by_ref().take(size).collect();
                let batched = batch.len() > 1;
                if batched {
                    let cmds: Vec<&Cmd> = batch.iter().map(|w| &w.call.cmd).collect();
                    evalsha::batch(&cmds).write_packed_command(out);
                } else {
                    batch[0].call.cmd.write_packed_command(out);
                }
                let written = self.trips.is_some().then(|| (SystemTime::now(), Instant::now()));
                self.sent.push_back(Sent {
                    calls: batch.into_iter().map(Some).collect(),
                    batched,
                    ends_write: false,
                    written,
                });
            }
        }
        if let Some(last) = self.sent.back_mut() {
            last.ends_write = true;
        }
        self.writes += 1;
    }

    /// Takes `bytes` read from the connection and appends each call they answer to `done`. An
    /// error means the stream is not RESP (the caller should drop the connection and
    /// [`Self::fail_all`]).
    pub fn read(&mut self, bytes: &[u8], done: &mut Vec<(T, Finished)>) -> Result<()> {
        self.input.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(len) = frame_len(&self.input[start..]).map_err(protocol_error)? {
            let value = parse_frame(&self.input[start..start + len]).map_err(|e| protocol_error(e.to_string()))?;
            start += len;
            let Some(sent) = self.sent.pop_front() else {
                return Err(protocol_error("a reply nobody asked for".into()));
            };
            self.demoted |= says_readonly(&value);
            self.writes -= usize::from(sent.ends_write);
            let note = self.note(&sent, done.len(), || reply_error(&value));
            answer(sent, value, done);
            self.noted(note, done.len());
        }
        self.input.drain(..start);
        Ok(())
    }

    /// The earliest deadline of the calls still waiting (sent or queued), if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        let sent = self.sent.iter().flat_map(|s| s.calls.iter().flatten());
        sent.chain(&self.queued).map(Waiting::deadline).min()
    }

    /// Ends every call whose deadline is `now` or earlier with `Timeout`, through the failure
    /// policy; calls with later deadlines keep waiting. Returns whether any call ended: the
    /// server or the connection may then be stuck (see [`Self::take_queued`]).
    pub fn expire(&mut self, now: Instant, done: &mut Vec<(T, Finished)>) -> bool {
        let mut expired = Vec::new();
        for slot in self.sent.iter_mut().flat_map(|s| s.calls.iter_mut()) {
            if slot.as_ref().is_some_and(|w| w.deadline() <= now) {
                expired.extend(slot.take());
            }
        }
        let (late, waiting) = std::mem::take(&mut self.queued).into_iter().partition(|w| w.deadline() <= now);
        self.queued = waiting;
        expired.extend::<Vec<_>>(late);
        let any = !expired.is_empty();
        for Waiting { token, call } in expired {
            let timed_out = call.timed_out();
            let result = call.conclude(Err(timed_out));
            done.push((token, Finished::Done(result)));
        }
        any
    }

    /// Takes the calls queued and not yet written (to send them another way, e.g. on the
    /// runtime while this connection is drained).
    pub fn take_queued(&mut self) -> Vec<(T, DrivenCall)> {
        self.queued.drain(..).map(|w| (w.token, w.call)).collect()
    }

    /// Ends every call with `error` (the connection failed), through the failure policy. The
    /// connection must be dropped with it: replies may still be on their way.
    pub fn fail_all(&mut self, error: &Error, done: &mut Vec<(T, Finished)>) {
        self.input.clear();
        self.writes = 0;
        for sent in std::mem::take(&mut self.sent) {
            let note = self.note(&sent, done.len(), || Some("io".into()));
            for Waiting { token, call } in sent.calls.into_iter().flatten() {
                let result = call.conclude(Err(error.clone()));
                done.push((token, Finished::Done(result)));
            }
            self.noted(note, done.len());
        }
        for Waiting { token, call } in self.queued.drain(..) {
            let result = call.conclude(Err(error.clone()));
            done.push((token, Finished::Done(result)));
        }
    }

    /// Turns tracing on or off: traced, each command written from now on is timed, and its
    /// round trip is noted when its reply is read or the connection fails (untraced, a write
    /// pays one branch).
    pub fn trace(&mut self, on: bool) {
        if on != self.trips.is_some() {
            self.trips = on.then(Vec::new);
        }
    }

    /// The round trips noted since the last call (traced only): each names the entries of the
    /// `done` list it ended, so take them after every [`Self::read`] / [`Self::fail_all`] into
    /// one list, before that list is consumed.
    pub fn take_round_trips(&mut self) -> Vec<DrivenTrip> {
        self.trips.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// A traced command `sent` about to end its calls from entry `first` of `done`, with
    /// `error()` (asked only when traced).
    fn note(
        &self,
        sent: &Sent<T>,
        first: usize,
        error: impl FnOnce() -> Option<String>,
    ) -> Option<(usize, usize, RoundTrip)> {
        let (wall, started) = sent.written?;
        self.trips.as_ref()?;
        let error = error();
        let server = sent
            .calls
            .iter()
            .flatten()
            .next()
            .and_then(|w| crate::trace::server_of(w.call.backend.connections().servers()));
        let trip = RoundTrip { command: "EVALSHA", start: wall, end: wall + started.elapsed(), server, error };
        Some((first, sent.calls.len(), trip))
    }

    /// Keeps a round trip [`Self::note`] made, now that its calls end before entry `end`.
    fn noted(&mut self, note: Option<(usize, usize, RoundTrip)>, end: usize) {
        if let (Some((first, batch, trip)), Some(trips)) = (note, self.trips.as_mut()) {
            trips.push(DrivenTrip { calls: first..end, batch, trip });
        }
    }
}

/// How many calls each batch of `queued` calls of one script carries: as few batches as the
/// batch limit allows, evenly filled.
fn batch_size(queued: usize) -> usize {
    queued.div_ceil(queued.div_ceil(MAX_BATCH).max(1)).max(1)
}

/// Ends the calls of `sent` from their command's reply.
fn answer<T>(sent: Sent<T>, value: Value, done: &mut Vec<(T, Finished)>) {
    match value {
        Value::Array(replies) if sent.batched && replies.len() == sent.calls.len() => {
            for (waiting, reply) in sent.calls.into_iter().zip(replies) {
                if let Some(Waiting { token, call }) = waiting {
                    done.push((token, call.finish(reply)));
                }
            }
        }
        // One call, or an error answering the whole batch (each call gets it).
        value => {
            let single = !sent.batched;
            for Waiting { token, call } in sent.calls.into_iter().flatten() {
                let reply = if single { value.clone() } else { batch_error(&value) };
                done.push((token, call.finish(reply)));
            }
        }
    }
}

/// The error code of a reply that is an error (`NOSCRIPT`, `BUSY`…): never its text.
fn reply_error(value: &Value) -> Option<String> {
    match value {
        Value::ServerError(e) => Some(e.code().to_owned()),
        _ => None,
    }
}

/// Whether `value`, a reply to one call or to a batch, is (or holds) a READONLY error.
fn says_readonly(value: &Value) -> bool {
    let readonly = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "READONLY");
    match value {
        Value::Array(replies) => replies.iter().any(readonly),
        value => readonly(value),
    }
}

/// What each call of a batch gets when the batch's reply is not one reply per call: the
/// server's error as is (NOSCRIPT reruns them), anything else as a malformed reply.
fn batch_error(value: &Value) -> Value {
    match value {
        Value::ServerError(_) => value.clone(),
        _ => Value::SimpleString("unexpected batch reply".into()),
    }
}

fn protocol_error(message: String) -> Error {
    Error::BackendUnavailable { message: format!("Redis: protocol error: {message}") }
}
