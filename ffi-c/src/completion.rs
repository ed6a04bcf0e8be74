//! Calls that return at once and complete through a callback (`rk_limiter_check_start`,
//! `_peek_start`, `_acquire_start`, `_settle_start`, `_release_start`): the call is submitted to
//! the core's runtime, which runs the async form of the call (on Redis: pipelined with every
//! other call over one multiplexed connection) and calls back from one of its threads. No thread
//! of the caller is held while the call waits for Redis or for a concurrent limiter's slot, so a
//! language with its own scheduler (Go's goroutines) can wait in that scheduler instead of in a
//! blocked OS thread.

use std::ffi::{c_void, CString};
use std::future::Future;
use std::os::raw::c_char;

use ratekeeper::{CatchPanic, Decision, Lease};

use crate::args::{arg_opt_str, arg_ref};
use crate::calls::{over_limit_decision, rk_decision, rk_lease, wait_arg};
use crate::error::{rk_status, Failure};
use crate::limiter::rk_limiter;
use crate::panic::{ffi_status, panic_message};

/// \brief The callback of a call that completes later (`rk_limiter_check_start` and the other
/// `*_start` functions).
///
/// Called exactly once per submitted call, from one of ratekeeper's runtime threads, never the
/// thread that submitted it (it may run before the submitting function has returned):
/// - `user_data`: what was given with the call;
/// - `status`: #RK_OK, or why the call failed (as the blocking form would have returned it);
/// - `decision`: on #RK_OK the decision (NULL for `rk_limiter_release_start`, which has none);
///   on #RK_OVER_LIMIT from `rk_limiter_acquire_start` the refusal (`allowed` false,
///   `retry_after_us` set, as `rk_limiter_acquire` writes it); else NULL. Valid only until the
///   callback returns (copy it);
/// - `error_message`: on failure what `rk_last_error_message` would have said (the thread-local
///   message belongs to another thread); `""` on #RK_OK. Never NULL; valid only until the
///   callback returns.
///
/// The callback must return quickly and must not block: the runtime's few threads (2 to 4)
/// drive every call of the process. It must not call ratekeeper's blocking functions. Hand the
/// result to your own thread or scheduler instead.
#[allow(non_camel_case_types)]
pub type rk_completion_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        status: rk_status,
        decision: *const rk_decision,
        error_message: *const c_char,
    ),
>;

/// Where a submitted call's result goes: the caller's callback and its `user_data`.
struct Completion {
    callback: unsafe extern "C" fn(*mut c_void, rk_status, *const rk_decision, *const c_char),
    user_data: *mut c_void,
}

// SAFETY: the contract of `rk_limiter_check_start`: `user_data` may be used from another thread
// (it is only ever handed back to the callback, once).
unsafe impl Send for Completion {}

impl Completion {
    /// Calls back with the result: the decision (if the call has one), or the failure's status
    /// and message, with an acquire's refusal.
    fn complete(self, result: Result<Option<Decision>, Failure>, refusal: Option<rk_decision>) {
        match result {
            Ok(decision) => {
                let raw = decision.as_ref().map(rk_decision::from);
                let ptr = raw.as_ref().map_or(std::ptr::null(), |r| r as *const rk_decision);
                // SAFETY: the caller's contract: a valid callback; the pointers live through it.
                unsafe { (self.callback)(self.user_data, rk_status::RK_OK, ptr, c"".as_ptr()) }
            }
            Err(failure) => {
                // Messages never hold a NUL (they come from UTF-8 C strings and our own text);
                // should one ever, it is cut there rather than lost.
                let message = CString::new(failure.message).unwrap_or_else(|e| {
                    let cut = e.nul_position();
                    let mut bytes = e.into_vec();
                    bytes.truncate(cut);
                    CString::new(bytes).unwrap_or_default()
                });
                let ptr = refusal.as_ref().map_or(std::ptr::null(), |r| r as *const rk_decision);
                // SAFETY: as above.
                unsafe { (self.callback)(self.user_data, failure.status, ptr, message.as_ptr()) }
            }
        }
    }
}

/// Runs `call` on the core's runtime and completes with its result; a panic inside it
/// completes with #RK_PANIC instead of vanishing with the task (the callback is always called).
fn submit<F>(completion: Completion, call: F)
where
    F: Future<Output = Result<Option<Decision>, ratekeeper::Error>> + Send + 'static,
{
    ratekeeper::runtime().spawn(async move {
        let call = async move {
            crate::test_hooks::maybe_panic_in_task();
            call.await
        };
        let (result, refusal) = match (CatchPanic(Box::pin(call))).await {
            Ok(Ok(decision)) => (Ok(decision), None),
            Ok(Err(error)) => {
                let refusal = over_limit_decision(&error);
                (Err(Failure::from(error)), refusal)
            }
            Err(payload) => (Err(Failure::new(rk_status::RK_PANIC, panic_message(payload))), None),
        };
        completion.complete(result, refusal);
    });
}

/// The arguments every started call takes: the limiter (shared with the task), the completion
/// and the key, copied (NULL is the limiter's single shared key).
fn started_args(
    limiter: *const rk_limiter,
    key: *const c_char,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> Result<(ratekeeper::Limiter, Completion, Option<String>), Failure> {
    let limiter = arg_ref("limiter", limiter)?.inner.clone();
    let callback = callback.ok_or_else(|| Failure::null("callback"))?;
    let key = arg_opt_str("key", key)?.map(str::to_owned);
    Ok((limiter, Completion { callback, user_data }, key))
}

/// \brief Starts `rk_limiter_check` without waiting for it: returns at once, and `callback`
/// receives the decision later, from one of ratekeeper's runtime threads.
///
/// On a Redis backend the check is sent over the backend's multiplexed connection, pipelined
/// with every other call in flight, and no thread of the caller waits for the reply. On the
/// memory backend the blocking `rk_limiter_check` is faster (it answers in about 100 ns; this
/// form adds a hand-over to another thread).
///
/// The key is copied before this function returns. The limiter may be freed while checks are
/// in flight: they complete. Bad values of `key` (too long) or `cost` are reported through the
/// callback (#RK_INVALID_ARGUMENT), before any state is touched.
///
/// \param limiter The limiter.
/// \param key The identity limited (up to 1 KiB of UTF-8), or NULL for the limiter's single
///        shared key.
/// \param cost What the call consumes (0..=2^53).
/// \param callback Called exactly once with the result when this function returns #RK_OK; never
///        called when it returns anything else. See #rk_completion_fn.
/// \param user_data Handed to `callback` unchanged; may be NULL; must be usable from another
///        thread.
/// \return #RK_OK (submitted: `callback` will be called), or, with nothing submitted,
///         #RK_NULL_PARAMETER (`limiter` or `callback`) or #RK_INVALID_UTF8 (`key`).
#[no_mangle]
pub extern "C" fn rk_limiter_check_start(
    limiter: *const rk_limiter,
    key: *const c_char,
    cost: u64,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> rk_status {
    ffi_status! {
        let (limiter, completion, key) = started_args(limiter, key, callback, user_data)?;
        submit(completion, async move { limiter.check(key.as_deref(), cost).await.map(Some) });
        Ok(())
    }
}

/// \brief Starts `rk_limiter_peek` without waiting for it: returns at once, and `callback`
/// receives the decision later (see `rk_limiter_check_start`, whose rules apply).
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param callback Called exactly once with the result when this function returns #RK_OK.
/// \param user_data Handed to `callback` unchanged.
/// \return #RK_OK (submitted), or, with nothing submitted, #RK_NULL_PARAMETER or
///         #RK_INVALID_UTF8.
#[no_mangle]
pub extern "C" fn rk_limiter_peek_start(
    limiter: *const rk_limiter,
    key: *const c_char,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> rk_status {
    ffi_status! {
        let (limiter, completion, key) = started_args(limiter, key, callback, user_data)?;
        submit(completion, async move { limiter.peek(key.as_deref()).await.map(Some) });
        Ok(())
    }
}

/// \brief Starts `rk_limiter_acquire` without waiting for it: returns at once, and `callback`
/// receives the decision when the limit allows the call, or #RK_OVER_LIMIT (with the refusal's
/// `retry_after_us`) when `wait_timeout_secs` passes first (see `rk_limiter_check_start`, whose
/// rules apply).
///
/// The wait is the library's (it wakes when a concurrent limiter's slot is released), on its
/// runtime: no thread of the caller waits. A started acquire cannot be withdrawn; a caller that
/// stops waiting for it must release the lease it may still be granted.
///
/// \param limiter The limiter.
/// \param key The identity, or NULL for the limiter's single shared key.
/// \param cost What the call consumes (0..=2^53).
/// \param wait_timeout_secs The longest wait in seconds; 0 never waits; #RK_WAIT_DEFAULT uses
///        the limiter's default.
/// \param callback Called exactly once with the result when this function returns #RK_OK.
/// \param user_data Handed to `callback` unchanged.
/// \return #RK_OK (submitted), or, with nothing submitted, #RK_NULL_PARAMETER,
///         #RK_INVALID_UTF8 or #RK_INVALID_ARGUMENT (`wait_timeout`).
#[no_mangle]
pub extern "C" fn rk_limiter_acquire_start(
    limiter: *const rk_limiter,
    key: *const c_char,
    cost: u64,
    wait_timeout_secs: f64,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> rk_status {
    ffi_status! {
        let wait = wait_arg(wait_timeout_secs)?;
        let (limiter, completion, key) = started_args(limiter, key, callback, user_data)?;
        submit(completion, async move { limiter.acquire(key.as_deref(), cost, wait).await.map(Some) });
        Ok(())
    }
}

/// \brief Starts `rk_limiter_settle` without waiting for it: returns at once, and `callback`
/// receives the state after the settle (see `rk_limiter_check_start`, whose rules apply). A
/// settle applies once however often it is sent, so a caller that stops waiting may send it
/// again.
///
/// \param limiter The limiter that made the decision.
/// \param key The key the call was checked with, or NULL for the limiter's single shared key.
/// \param decision The decision to settle; copied before this function returns.
/// \param actual What the call really cost (0..=2^53).
/// \param callback Called exactly once with the result when this function returns #RK_OK.
/// \param user_data Handed to `callback` unchanged.
/// \return #RK_OK (submitted), or, with nothing submitted, #RK_NULL_PARAMETER or
///         #RK_INVALID_UTF8.
#[no_mangle]
pub extern "C" fn rk_limiter_settle_start(
    limiter: *const rk_limiter,
    key: *const c_char,
    decision: *const rk_decision,
    actual: u64,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> rk_status {
    ffi_status! {
        let decision = *arg_ref("decision", decision)?;
        let (limiter, completion, key) = started_args(limiter, key, callback, user_data)?;
        let decision = crate::settle::core_decision(&decision, key.as_deref());
        submit(completion, async move { limiter.settle(&decision, actual).await.map(Some) });
        Ok(())
    }
}

/// \brief Starts `rk_limiter_release` without waiting for it: returns at once, and `callback`
/// receives #RK_OK (with no decision) or why the release failed, e.g. #RK_LEASE_LOST (see
/// `rk_limiter_check_start`, whose rules apply).
///
/// \param limiter The limiter that granted the lease.
/// \param key The key it was granted for (NULL for the shared key).
/// \param lease The lease; copied before this function returns.
/// \param callback Called exactly once with the result when this function returns #RK_OK.
/// \param user_data Handed to `callback` unchanged.
/// \return #RK_OK (submitted), or, with nothing submitted, #RK_NULL_PARAMETER or
///         #RK_INVALID_UTF8.
#[no_mangle]
pub extern "C" fn rk_limiter_release_start(
    limiter: *const rk_limiter,
    key: *const c_char,
    lease: *const rk_lease,
    callback: rk_completion_fn,
    user_data: *mut c_void,
) -> rk_status {
    ffi_status! {
        let lease = Lease::from(arg_ref("lease", lease)?);
        let (limiter, completion, key) = started_args(limiter, key, callback, user_data)?;
        submit(completion, async move { limiter.release(key.as_deref(), &lease).await.map(|()| None) });
        Ok(())
    }
}
