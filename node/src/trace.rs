//! The Redis round trips of traced calls made on the core's runtime or on the JavaScript thread
//! (every call but a driven check or peek, whose round trips `driven` notes), for
//! `ratekeeper/otel`, which makes a client span of each, the child of its call's span.
//!
//! otel.js makes a traced call between `traceRoundTrips(true)` and `traceRoundTrips(false)`
//! (index.js's `untraced`). Meanwhile a blocking call's round trips are noted on this thread
//! ([`ratekeeper::trace::begin`]), and a call spawned on the runtime ([`crate::bridge::spawn`])
//! notes its task's ([`ratekeeper::trace::collect_into`]); the drain keeps them by call id until
//! the call's continuation takes them (`runtimeRoundTrips(id)`), a blocking call's until the next
//! traced call (`runtimeRoundTrips()`). A traced call sent on a driven connection and re-run on
//! the runtime (its script was flushed, or it was never written) is traced there too. Untraced,
//! a spawn or a driven send pays one thread-local read and nothing else: no collector, no
//! allocation.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

use ratekeeper::trace::{Collecting, Collector, RoundTrip};

use crate::driven::DrivenRoundTrip;

thread_local! {
    /// A traced call is being made (see the module documentation).
    static ON: Cell<bool> = const { Cell::new(false) };
    /// Its blocking round trips being noted on this thread.
    static SCOPE: RefCell<Option<Collecting>> = const { RefCell::new(None) };
    /// The last traced call's blocking round trips.
    static BLOCKING: RefCell<Vec<RoundTrip>> = const { RefCell::new(Vec::new()) };
    /// The round trips of traced runtime calls drained and not yet taken, by call id.
    static BY_CALL: RefCell<HashMap<u64, Vec<RoundTrip>>> = RefCell::new(HashMap::new());
    /// Traced calls sent on a driven connection and not yet ended, by call id: one re-run on the
    /// runtime is traced too.
    static DRIVEN: RefCell<HashSet<u64>> = RefCell::new(HashSet::new());
}

/// Notes that call `id`, being sent on a driven connection, is traced (if it is).
#[inline]
pub(crate) fn driven(id: f64) {
    if ON.get() {
        DRIVEN.with(|d| d.borrow_mut().insert(id.to_bits()));
    }
}

/// Whether driven call `id`, which ended, was traced (forgetting it).
pub(crate) fn take_driven(id: f64) -> bool {
    DRIVEN.with(|d| d.borrow_mut().remove(&id.to_bits()))
}

/// A collector for a call being spawned on the runtime, if it is traced.
#[inline]
pub(crate) fn collector() -> Option<Collector> {
    ON.get().then(Collector::default)
}

/// Runs `spawn` (which spawns a call on the runtime) as a traced call's: a traced driven call
/// re-run on the runtime.
pub(crate) fn spawning_traced<R>(spawn: impl FnOnce() -> R) -> R {
    let outer = ON.replace(true);
    let result = spawn();
    ON.set(outer);
    result
}

/// Keeps the round trips of runtime call `id` (on the JavaScript thread, as it is drained).
pub(crate) fn noted(id: f64, trips: Vec<RoundTrip>) {
    if !trips.is_empty() {
        BY_CALL.with(|t| t.borrow_mut().insert(id.to_bits(), trips));
    }
}

/// Drops every round trip not taken yet (tracing stopped).
pub(crate) fn clear() {
    BY_CALL.with(|t| t.borrow_mut().clear());
    BLOCKING.with(|t| t.borrow_mut().clear());
    DRIVEN.with(|d| d.borrow_mut().clear());
}

/// Internal (index.js, for `ratekeeper/otel`): a traced call starts (`on`) or has returned.
#[napi_derive::napi(skip_typescript)]
pub fn trace_round_trips(on: bool) {
    ON.set(on);
    if on {
        if let Some(previous) = SCOPE.replace(Some(ratekeeper::trace::begin())) {
            // Not finished (cannot happen: index.js finishes each in a `finally`).
            drop(ratekeeper::trace::finish(previous));
        }
    } else if let Some(scope) = SCOPE.take() {
        BLOCKING.set(ratekeeper::trace::finish(scope));
    }
}

/// Internal (`ratekeeper/otel`): the round trips of runtime call `id`, once its result settles,
/// or, without an id, of the traced blocking call just made; taken once.
#[napi_derive::napi(skip_typescript)]
pub fn runtime_round_trips(id: Option<f64>) -> Vec<DrivenRoundTrip> {
    let trips = match id {
        Some(id) => BY_CALL.with(|t| t.borrow_mut().remove(&id.to_bits())).unwrap_or_default(),
        None => BLOCKING.take(),
    };
    trips.iter().map(|trip| DrivenRoundTrip::of(trip, 0.0, 1)).collect()
}
