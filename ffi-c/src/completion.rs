//! Calls that return at once and complete through a callback: the call is submitted to the
//! core's runtime, which runs the async form of the call (on Redis: pipelined with every other
//! call over one multiplexed connection) and calls back from one of its threads. No thread of
//! the caller is held while the call waits for Redis, so a language with its own scheduler (Go's
//! goroutines) can wait in that scheduler instead of in a blocked OS thread.

use std::ffi::{c_void, CString};
use std::future::Future;
use std::os::raw::c_char;

use ratekeeper::{CatchPanic, Decision};

use crate::args::{arg_opt_str, arg_ref};
use crate::calls::rk_decision;
use crate::error::{rk_status, Failure};
use crate::limiter::rk_limiter;
use crate::panic::{ffi_status, panic_message};

/// \brief The callback of a call that completes later (`rk_limiter_check_start`).
///
/// Called exactly once per submitted call, from one of ratekeeper's runtime threads, never the
/// thread that submitted it (it may run before the submitting function has returned):
/// - `user_data`: what was given with the call;
/// - `status`: #RK_OK, or why the call failed (as the blocking form would have returned it);
/// - `decision`: on #RK_OK the decision, else NULL; valid only until the callback returns
///   (copy it);
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
    /// Calls back with the result: the decision, or the failure's status and message.
    fn complete(self, result: Result<Decision, Failure>) {
        match result {
            Ok(decision) => {
                let raw = rk_decision::from(&decision);
                // SAFETY: the caller's contract: a valid callback; the pointers live through it.
                unsafe { (self.callback)(self.user_data, rk_status::RK_OK, &raw, c"".as_ptr()) }
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
                // SAFETY: as above.
                unsafe { (self.callback)(self.user_data, failure.status, std::ptr::null(), message.as_ptr()) }
            }
        }
    }
}

/// Runs `call` on the core's runtime and completes with its result; a panic inside it
/// completes with #RK_PANIC instead of vanishing with the task (the callback is always called).
fn submit<F>(completion: Completion, call: F)
where
    F: Future<Output = Result<Decision, ratekeeper::Error>> + Send + 'static,
{
    ratekeeper::runtime().spawn(async move {
        let result = match (CatchPanic(Box::pin(call))).await {
            Ok(result) => result.map_err(Failure::from),
            Err(payload) => Err(Failure::new(rk_status::RK_PANIC, panic_message(payload))),
        };
        completion.complete(result);
    });
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
        let limiter = arg_ref("limiter", limiter)?.inner.clone();
        let callback = callback.ok_or_else(|| Failure::null("callback"))?;
        let key = arg_opt_str("key", key)?.map(str::to_owned);
        let completion = Completion { callback, user_data };
        submit(completion, async move {
            crate::test_hooks::maybe_panic_in_task();
            limiter.check(key.as_deref(), cost).await
        });
        Ok(())
    }
}
