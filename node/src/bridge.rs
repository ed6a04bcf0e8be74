//! How results reach JavaScript, fast.
//!
//! A call that needs no I/O (memory backend, `unlimited`, argument errors) is answered during
//! the call itself. A call that needs Redis runs on the core's runtime and its result comes back
//! through one long-lived thread-safe function per Node environment: finished calls queue up,
//! the first one of a batch wakes the JavaScript thread, and one drain settles the whole batch.
//! There is no thread-safe function, uv handle or Promise made in Rust per call.
//!
//! What a native call returns (index.js turns it into the public value, a Promise or not):
//! - `undefined`: a plain decision, written to the environment's `syncOut` Float64Array;
//! - a number: the id of a call still running (index.js keeps its Promise's settle functions);
//! - `null`: done, nothing to return;
//! - an object: the result itself (a decision with a lease, per-limit details or
//!   `shadowRefused`, metrics, …),
//!   or `false` for the `null` of a critical request's fleet ticket;
//! - or it throws (index.js turns that into a rejection for Promise-returning methods).
//!
//! A drain writes one record per finished call to the `records` Float64Array and calls
//! `onSettled(count, values)`: record = `[id, kind, allowed, limit, remaining, retryAfterMs,
//! resetAfterMs, decidedAtUs]`, kind 0 = a plain decision in the record, 1 = resolve with the
//! next of `values`, 2 = reject with the next of `values`, 3 = resolve with `undefined`.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use napi::bindgen_prelude::ToNapiValue;
use napi::{sys, Env, JsValue, Unknown};
use napi_derive::napi;

use crate::decision::{Decision, Lease, Metrics};
use crate::error::{convert_error, js_error_value, panic_error, panic_error_value};

/// Fields of a record in `records`.
pub const RECORD: usize = 11;
/// Fields of `syncOut`: the decision's six, then its settle ticket's id, limiter and cost (0:
/// none; its instant is `decidedAtUs`, its key the call's, which index.js knows).
pub const SYNC_OUT: usize = 9;

/// What a call produced, before conversion to JavaScript (on the JavaScript thread).
pub enum Payload {
    Decision(ratekeeper::Decision, Option<String>),
    Unit,
    Metrics(ratekeeper::Metrics),
    Ticket(Option<ratekeeper::Lease>),
    /// Text: JSON for index.js to parse, or an exposition.
    Text(String),
    /// A pause in effect (`pause`, `observe`), as milliseconds; `None`: no pause applied. Only
    /// ever settled through the drain (its calls are never answered inline, where a number
    /// would read as a call id).
    Pause(Option<std::time::Duration>),
    /// A yes or no (`resume`), as 1 or 0 (`false` reads as "nothing" in index.js, which turns
    /// the number into a boolean). Settled through the drain only, as `Pause`.
    Flag(bool),
    /// A `checkAll` / `acquireAll` result.
    Combined(ratekeeper::CombinedDecision),
}

pub type Outcome = Result<Payload, ratekeeper::Error>;

struct Completion {
    id: f64,
    outcome: Result<Outcome, Box<dyn Any + Send>>,
    /// A traced call's Redis round trips (see `crate::trace`).
    trips: Option<Vec<ratekeeper::trace::RoundTrip>>,
}

/// The part of an environment's bridge that runtime threads touch.
struct Shared {
    /// Finished calls not yet drained, and the environment's thread-safe function (null once
    /// the environment is gone: Node frees it then, so it is only called under this lock).
    queue: Mutex<(Vec<Completion>, usize)>,
}

impl Shared {
    fn complete(&self, completion: Completion) {
        let mut guard = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (queue, tsfn) = &mut *guard;
        if *tsfn == 0 {
            return; // the environment is gone; nobody waits for this any more
        }
        queue.push(completion);
        if queue.len() == 1 {
            // The first of a batch wakes the JavaScript thread; the drain takes the whole queue.
            // SAFETY: a non-zero `tsfn` is the live thread-safe function: `env_cleanup` and
            // `finalize` zero it under this lock before Node frees it, and we hold the lock, so
            // it cannot be freed during the call. Any thread may call it (that is its purpose).
            unsafe {
                sys::napi_call_threadsafe_function(
                    *tsfn as sys::napi_threadsafe_function,
                    ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            };
        }
    }
}

/// One environment's bridge (each Node environment has its own JavaScript thread).
struct EnvState {
    env: sys::napi_env,
    shared: Arc<Shared>,
    tsfn: sys::napi_threadsafe_function,
    records: *mut f64,
    capacity: usize,
    sync_out: *mut f64,
    /// Calls spawned and not yet drained: while any are, the thread-safe function keeps the
    /// event loop alive.
    running: usize,
    next_id: f64,
    /// Keeps the two typed arrays alive.
    _buffers: [sys::napi_ref; 2],
    /// `onSettled`, for settling from a libuv callback (see [`settle_from_loop`]).
    on_settled: sys::napi_ref,
    async_context: sys::napi_async_context,
}

thread_local! {
    static STATE: RefCell<Option<EnvState>> = const { RefCell::new(None) };
}

fn typed_array_data(env: sys::napi_env, value: sys::napi_value) -> napi::Result<(*mut f64, usize)> {
    let (mut kind, mut len, mut data) = (sys::TypedarrayType::float64_array, 0usize, ptr::null_mut());
    let (mut buffer, mut offset) = (ptr::null_mut(), 0usize);
    // SAFETY: `env` and `value` are the current call's (we are on the JavaScript thread, inside
    // it), and every out-pointer is a live local of the type N-API writes.
    napi::check_status!(unsafe {
        sys::napi_get_typedarray_info(env, value, &mut kind, &mut len, &mut data, &mut buffer, &mut offset)
    })?;
    if kind != sys::TypedarrayType::float64_array || data.is_null() {
        return Err(napi::Error::from_reason("expected a Float64Array"));
    }
    Ok((data.cast(), len))
}

/// Internal (index.js, once per environment): the drain callback and the two result buffers.
#[napi(skip_typescript)]
pub fn init_bridge(env: Env, on_settled: Unknown<'_>, records: Unknown<'_>, sync_out: Unknown<'_>) -> napi::Result<()> {
    let raw = env.raw();
    let (records_ptr, records_len) = typed_array_data(raw, records.value().value)?;
    let (sync_ptr, sync_len) = typed_array_data(raw, sync_out.value().value)?;
    if records_len < RECORD || sync_len < SYNC_OUT {
        return Err(napi::Error::from_reason("result buffers too small"));
    }
    let shared = Arc::new(Shared { queue: Mutex::new((Vec::new(), 0)) });
    let mut name = ptr::null_mut();
    // SAFETY: `raw` is this call's environment; the C string literal is 10 bytes long, as passed.
    napi::check_status!(unsafe { sys::napi_create_string_utf8(raw, c"ratekeeper".as_ptr(), 10, &mut name) })?;
    let mut tsfn = ptr::null_mut();
    let context = Arc::into_raw(shared.clone()) as *mut std::ffi::c_void;
    // SAFETY: `on_settled` and `name` are live values of this call. `context` is one strong
    // count of `Shared`, handed to Node as both the function's context (read by `drain`) and
    // its finalize data: `finalize` takes that count back, once, and `drain` reads the context
    // only while the function lives (Node passes a null env after finalizing it).
    napi::check_status!(unsafe {
        sys::napi_create_threadsafe_function(
            raw,
            on_settled.value().value,
            ptr::null_mut(),
            name,
            0,
            1,
            context,
            Some(finalize),
            context,
            Some(drain),
            &mut tsfn,
        )
    })?;
    // Idle until a call is running.
    // SAFETY: `tsfn` was just created on this thread's environment, and is not finalized
    // before the environment goes away.
    unsafe { sys::napi_unref_threadsafe_function(raw, tsfn) };
    shared.queue.lock().unwrap_or_else(|e| e.into_inner()).1 = tsfn as usize;
    let mut refs = [ptr::null_mut(); 2];
    let (mut on_settled_ref, mut async_context, mut resource) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: on the JavaScript thread, during the call, with its live values; each out-pointer
    // is a local of the type written. The references keep the two typed arrays (whose data
    // pointers `EnvState` holds) and the callback alive for the environment's life.
    // `env_cleanup` takes no data, so nothing has to outlive the hook.
    unsafe {
        sys::napi_create_reference(raw, records.value().value, 1, &mut refs[0]);
        sys::napi_create_reference(raw, sync_out.value().value, 1, &mut refs[1]);
        sys::napi_create_reference(raw, on_settled.value().value, 1, &mut on_settled_ref);
        sys::napi_create_object(raw, &mut resource);
        napi::check_status!(sys::napi_async_init(raw, resource, name, &mut async_context))?;
        sys::napi_add_env_cleanup_hook(raw, Some(env_cleanup), ptr::null_mut());
    }
    STATE.with(|s| {
        *s.borrow_mut() = Some(EnvState {
            env: raw,
            shared,
            tsfn,
            records: records_ptr,
            capacity: records_len / RECORD,
            sync_out: sync_ptr,
            running: 0,
            next_id: 1.0,
            _buffers: refs,
            on_settled: on_settled_ref,
            async_context,
        })
    });
    Ok(())
}

/// The environment is going away: forget its bridge (its thread-safe function is finalized by
/// Node right after, see `finalize`).
unsafe extern "C" fn env_cleanup(_: *mut std::ffi::c_void) {
    let state = STATE.with(|s| s.borrow_mut().take());
    if let Some(state) = state {
        state.shared.queue.lock().unwrap_or_else(|e| e.into_inner()).1 = 0;
    }
}

/// The thread-safe function is finalized: no call may reach it any more.
unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut std::ffi::c_void, _hint: *mut std::ffi::c_void) {
    // SAFETY: `data` is the strong count `init_bridge` leaked with `Arc::into_raw` for this
    // function; Node finalizes a thread-safe function once, so the count is taken back once.
    let shared = unsafe { Arc::from_raw(data as *const Shared) };
    let mut guard = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
    guard.1 = 0;
    guard.0.clear();
}

/// Writes a plain decision (no lease, no per-limit details) to `out`.
fn write_decision(out: *mut f64, d: &ratekeeper::Decision) {
    let fields = [
        if d.allowed { 1.0 } else { 0.0 },
        d.limit as f64,
        d.remaining as f64,
        d.retry_after.as_micros() as f64 / 1e3,
        d.reset_after.as_micros() as f64 / 1e3,
        d.decided_at_micros as f64,
        d.settle.as_ref().map_or(0.0, |t| t.id as f64),
        d.settle.as_ref().map_or(0.0, |t| t.limiter as f64),
        d.settle.as_ref().map_or(0.0, |t| t.cost as f64),
    ];
    // SAFETY: every caller passes a pointer to at least SYNC_OUT f64s it may write: `syncOut`
    // (checked at `init_bridge` to hold SYNC_OUT) or a record's fields 2.. (RECORD = SYNC_OUT + 2).
    // Both arrays are index.js's private constants, kept alive by `EnvState`'s references and
    // never transferred (which would detach their memory); `fields` is a separate local.
    unsafe { ptr::copy_nonoverlapping(fields.as_ptr(), out, SYNC_OUT) };
}

fn is_plain(d: &ratekeeper::Decision) -> bool {
    d.lease.is_none() && d.limits.is_none() && !d.shadow_refused
}

/// A payload as a JavaScript value (the slow path: an object made through N-API).
fn payload_value(env: sys::napi_env, payload: Payload) -> napi::Result<sys::napi_value> {
    // SAFETY: `env` is the environment of the JavaScript thread we are on (a call, the drain or
    // a libuv callback, each inside a handle scope), which is all `to_napi_value` requires.
    unsafe {
        match payload {
            Payload::Decision(d, key) => Decision::to_napi_value(env, Decision::new(d, key.as_deref())),
            Payload::Unit => <()>::to_napi_value(env, ()),
            Payload::Metrics(m) => Metrics::to_napi_value(env, m.into()),
            // `false` stands for "no ticket" (`null` means "nothing to return"): index.js
            // turns it into `null`.
            Payload::Ticket(None) => bool::to_napi_value(env, false),
            Payload::Ticket(Some(lease)) => Lease::to_napi_value(env, Lease::new(lease, None)),
            Payload::Text(text) => String::to_napi_value(env, text),
            // `false` stands for "no pause", as for tickets: index.js turns it into `null`.
            Payload::Pause(None) => bool::to_napi_value(env, false),
            Payload::Pause(Some(d)) => f64::to_napi_value(env, d.as_micros() as f64 / 1e3),
            Payload::Flag(b) => f64::to_napi_value(env, f64::from(u8::from(b))),
            Payload::Combined(c) => {
                crate::check_all::CombinedDecision::to_napi_value(env, crate::check_all::CombinedDecision::new(c))
            }
        }
    }
}

/// The return value of a call answered at once (see the module documentation).
pub fn reply(env: &Env, outcome: Outcome) -> napi::Result<ReplyValue> {
    let raw = env.raw();
    match outcome {
        Err(e) => Err(convert_error(env, e)),
        Ok(Payload::Decision(d, _)) if is_plain(&d) => {
            STATE.with(|s| match &*s.borrow() {
                Some(state) => {
                    write_decision(state.sync_out, &d);
                    Ok(())
                }
                None => Err(napi::Error::from_reason("ratekeeper: index.js did not initialise the addon")),
            })?;
            let mut undefined = ptr::null_mut();
            // SAFETY: `raw` is this call's environment; `undefined` is a local napi_value.
            unsafe { sys::napi_get_undefined(raw, &mut undefined) };
            Ok(ReplyValue(undefined))
        }
        Ok(Payload::Unit) => {
            let mut null = ptr::null_mut();
            // SAFETY: `raw` is this call's environment; `null` is a local napi_value.
            unsafe { sys::napi_get_null(raw, &mut null) };
            Ok(ReplyValue(null))
        }
        Ok(payload) => Ok(ReplyValue(payload_value(raw, payload)?)),
    }
}

/// Runs `future` and returns what the call returns: polled once here when `inline` (calls that
/// never do I/O finish now), otherwise (or if it must wait) run on the core's runtime and
/// settled through the drain; then the return value is the call's id.
pub fn run<F>(env: &Env, inline: bool, future: F) -> napi::Result<ReplyValue>
where
    F: Future<Output = Outcome> + Send + 'static,
{
    let mut future = Box::pin(future);
    if inline {
        let first = {
            let _context = ratekeeper::runtime().enter();
            let mut cx = Context::from_waker(Waker::noop());
            catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)))
        };
        match first {
            Ok(Poll::Ready(outcome)) => return reply(env, outcome),
            Ok(Poll::Pending) => {}
            Err(panic) => return Err(panic_error(env, panic)),
        }
    }
    let id = next_id()?;
    spawn(id, future);
    id_value(env.raw(), id)
}

/// A new call id (see the module documentation).
pub fn next_id() -> napi::Result<f64> {
    STATE.with(|s| {
        let mut state = s.borrow_mut();
        let state = state
            .as_mut()
            .ok_or_else(|| napi::Error::from_reason("ratekeeper: index.js did not initialise the addon"))?;
        let id = state.next_id;
        state.next_id += 1.0;
        Ok(id)
    })
}

/// A call id as the value a native call returns.
pub fn id_value(env: sys::napi_env, id: f64) -> napi::Result<ReplyValue> {
    let mut value = ptr::null_mut();
    // SAFETY: callers pass the environment of the call they are in; `value` is a local.
    napi::check_status!(unsafe { sys::napi_create_double(env, id, &mut value) })?;
    Ok(ReplyValue(value))
}

/// Runs call `id` on the core's runtime; the drain settles it.
pub fn spawn<F>(id: f64, future: F)
where
    F: Future<Output = Outcome> + Send + 'static,
{
    let future = Box::pin(future);
    STATE.with(|s| {
        let mut state = s.borrow_mut();
        let Some(state) = state.as_mut() else { return };
        if state.running == 0 {
            // SAFETY: `state` is this thread's bridge, so we are on its JavaScript thread and
            // its thread-safe function is live (`env_cleanup` removes `state` first).
            unsafe { sys::napi_ref_threadsafe_function(state.env, state.tsfn) };
        }
        state.running += 1;
        let shared = state.shared.clone();
        let collector = crate::trace::collector();
        ratekeeper::runtime().spawn(async move {
            let (outcome, trips) = match collector {
                None => (ratekeeper::CatchPanic(future).await, None),
                Some(collector) => {
                    let traced = ratekeeper::trace::collect_into(collector.clone(), future);
                    (ratekeeper::CatchPanic(Box::pin(traced)).await, Some(collector.take()))
                }
            };
            shared.complete(Completion { id, outcome, trips });
        });
    });
}

/// The thread-safe function's callback, on the JavaScript thread: settles every finished call.
unsafe extern "C" fn drain(
    env: sys::napi_env,
    callback: sys::napi_value,
    context: *mut std::ffi::c_void,
    _: *mut std::ffi::c_void,
) {
    if env.is_null() || context.is_null() {
        return; // the environment is shutting down
    }
    // SAFETY: a non-null env means the function is not finalized yet, so `context`, the
    // strong count `init_bridge` leaked, still keeps `Shared` alive.
    let shared = unsafe { &*(context as *const Shared) };
    let completions = std::mem::take(&mut shared.queue.lock().unwrap_or_else(|e| e.into_inner()).0);
    if completions.is_empty() {
        return;
    }
    let settled = completions.len();
    let finished = completions.into_iter().map(|c| {
        if let Some(trips) = c.trips {
            crate::trace::noted(c.id, trips);
        }
        (c.id, c.outcome)
    });
    settle(env, finished, |args| {
        let mut result = ptr::null_mut();
        let mut undefined = ptr::null_mut();
        // SAFETY: Node calls `drain` on the JavaScript thread, inside a handle scope, with the
        // function's live callback; `args` are two values made in that scope.
        unsafe {
            sys::napi_get_undefined(env, &mut undefined);
            // An exception thrown by the callback (a bug in index.js) surfaces as uncaught.
            sys::napi_call_function(env, undefined, callback, 2, args.as_ptr(), &mut result);
        }
    });
    STATE.with(|s| {
        if let Some(state) = s.borrow_mut().as_mut() {
            state.running = state.running.saturating_sub(settled);
            if state.running == 0 {
                // SAFETY: `drain` runs on the function's JavaScript thread with its env, and
                // the function is live (it is running its callback).
                unsafe { sys::napi_unref_threadsafe_function(env, state.tsfn) };
            }
        }
    });
}

/// Writes finished calls as records and hands them to `deliver([count, values])` (once per
/// `records`' capacity): on the JavaScript thread, inside a handle scope.
fn settle(
    env: sys::napi_env,
    finished: impl Iterator<Item = (f64, Result<Outcome, Box<dyn Any + Send>>)>,
    deliver: impl Fn([sys::napi_value; 2]),
) {
    let Some((records, capacity)) = STATE.with(|s| s.borrow().as_ref().map(|st| (st.records, st.capacity))) else {
        return;
    };
    let mut finished = finished.peekable();
    while finished.peek().is_some() {
        let mut values = ptr::null_mut();
        // SAFETY: callers run on the JavaScript thread inside a handle scope (see above).
        unsafe { sys::napi_create_array(env, &mut values) };
        let mut count = 0usize;
        let mut value_count = 0u32;
        while count < capacity {
            let Some((id, outcome)) = finished.next() else { break };
            // SAFETY: `count < capacity` = records' length / RECORD, so the record's RECORD
            // fields are inside the array (kept alive by `EnvState`).
            let record = unsafe { records.add(count * RECORD) };
            let (kind, value) = match outcome {
                Ok(Ok(Payload::Decision(d, _))) if is_plain(&d) => {
                    // SAFETY: fields 2..RECORD of this record, inside the array (see above).
                    write_decision(unsafe { record.add(2) }, &d);
                    (0.0, None)
                }
                Ok(Ok(Payload::Unit)) => (3.0, None),
                Ok(Ok(payload)) => match payload_value(env, payload) {
                    Ok(v) => (1.0, Some(v)),
                    // SAFETY: on the JavaScript thread, in a handle scope (see above).
                    Err(e) => (2.0, Some(unsafe { ToNapiValue::to_napi_value(env, e) }.unwrap_or(ptr::null_mut()))),
                },
                Ok(Err(e)) => (2.0, Some(js_error_value(env, &e))),
                Err(panic) => (2.0, Some(panic_error_value(env, panic))),
            };
            // SAFETY: fields 0 and 1 of a record inside the array (see above).
            unsafe {
                *record = id;
                *record.add(1) = kind;
            }
            if let Some(v) = value {
                // SAFETY: `values` and `v` were made in this handle scope.
                unsafe { sys::napi_set_element(env, values, value_count, v) };
                value_count += 1;
            }
            count += 1;
        }
        let mut count_value = ptr::null_mut();
        // SAFETY: on the JavaScript thread, in a handle scope; `count_value` is a local.
        unsafe { sys::napi_create_double(env, count as f64, &mut count_value) };
        deliver([count_value, values]);
    }
}

/// Settles `finished` calls from a libuv callback (no JavaScript on the stack): in a handle
/// scope, through `napi_make_callback`, so the Promise continuations (microtasks) run right
/// after, as they do after any I/O callback.
pub fn settle_from_loop(finished: Vec<(f64, Outcome)>) {
    let Some((env, on_settled, async_context)) =
        STATE.with(|s| s.borrow().as_ref().map(|st| (st.env, st.on_settled, st.async_context)))
    else {
        return;
    };
    if finished.is_empty() {
        return;
    }
    // SAFETY: callers are libuv callbacks of this environment's loop, so we are on its
    // JavaScript thread with no JavaScript on the stack: the handle scope opened here holds
    // every value made below, and is closed on the way out. `on_settled` and `async_context`
    // were made by `init_bridge` and live as long as `STATE` holds them.
    unsafe {
        let mut scope = ptr::null_mut();
        if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
            return;
        }
        let (mut callback, mut global) = (ptr::null_mut(), ptr::null_mut());
        sys::napi_get_reference_value(env, on_settled, &mut callback);
        sys::napi_get_global(env, &mut global);
        settle(env, finished.into_iter().map(|(id, outcome)| (id, Ok(outcome))), |args| {
            let mut result = ptr::null_mut();
            let status = sys::napi_make_callback(env, async_context, global, callback, 2, args.as_ptr(), &mut result);
            if status == sys::Status::napi_pending_exception {
                // A bug in index.js: report it as uncaught, as Node does for its own callbacks.
                let mut error = ptr::null_mut();
                sys::napi_get_and_clear_last_exception(env, &mut error);
                sys::napi_fatal_exception(env, error);
            }
        });
        sys::napi_close_handle_scope(env, scope);
    }
}

/// A JavaScript value returned as is.
pub struct ReplyValue(pub sys::napi_value);

impl ToNapiValue for ReplyValue {
    unsafe fn to_napi_value(_env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        Ok(val.0)
    }
}

/// What a native call that may wait returns (see this module's doc): `undefined` (a plain
/// decision in `syncOut`), a number (the id of a call still running), `null` (nothing), an
/// object (the result) or `false` (a critical request's fleet ticket). index.js turns it into
/// the public value. Declared for native.d.ts only (the methods return a [`ReplyValue`]).
#[napi]
#[allow(dead_code)] // a name for the typings; Rust code uses `ReplyValue`
pub type NativeReply = napi::bindgen_prelude::Either5<
    f64,
    napi::bindgen_prelude::Undefined,
    napi::bindgen_prelude::Null,
    bool,
    napi::bindgen_prelude::Object<'static>,
>;
