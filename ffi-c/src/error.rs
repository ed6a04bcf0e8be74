//! Status codes, the mapping of every core error onto them, and the per-thread last error.

use std::cell::RefCell;
use std::os::raw::c_char;

use ratekeeper::{Error, ErrorKind};

use crate::panic::ffi_boundary;

/// \brief What a ratekeeper call did: #RK_OK, or why it failed.
///
/// Every function that can fail returns an `rk_status`; results travel through out-params,
/// which are written only when the call returns #RK_OK (and, for `rk_limiter_acquire`, on
/// #RK_OVER_LIMIT). On any other status, `rk_last_error_message` tells what went wrong.
/// New codes may be added: treat an unknown one like #RK_UNKNOWN_ERROR.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum rk_status {
    /// Success.
    RK_OK = 0,
    /// The limit is reached and waiting did not help (`rk_limiter_acquire`); the decision's
    /// `retry_after_us` says when the same call could succeed.
    RK_OVER_LIMIT = 1,
    /// A load shedder dropped the call (HTTP 503, not 429).
    RK_SHED = 2,
    /// A lease was released or extended after it had been reclaimed (it outlived `lock_timeout`)
    /// or the limiter was reset.
    RK_LEASE_LOST = 3,
    /// A parameter is out of range or malformed; the message names it. Nothing was written.
    RK_INVALID_ARGUMENT = 4,
    /// A required pointer was NULL; the message names it. Nothing was written.
    RK_NULL_PARAMETER = 5,
    /// A string was not valid UTF-8; the message names it. Nothing was written.
    RK_INVALID_UTF8 = 6,
    /// The backend could not answer (Redis down, memory backend full, ...).
    RK_BACKEND_UNAVAILABLE = 7,
    /// A backend call did not finish within its deadline.
    RK_TIMEOUT = 8,
    /// A bug inside ratekeeper panicked; the panic was caught and did not cross into C. The
    /// handles remain usable.
    RK_PANIC = 9,
    /// An error of a kind this version of the C API does not know yet.
    RK_UNKNOWN_ERROR = 10,
    /// Redis answered, refusing the call for a reason an operator must fix: an ACL without the
    /// permission (NOPERM), a wrong password (WRONGPASS), memory full under `noeviction` (OOM),
    /// a script error. Never turned into an admission by #RK_FAIL_OPEN or #RK_FALLBACK; the
    /// message names the Redis error code.
    RK_BACKEND_REJECTED = 11,
}

/// Why an entry point failed: its status and the message for `rk_last_error_message`.
pub(crate) struct Failure {
    pub status: rk_status,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(status: rk_status, message: impl Into<String>) -> Self {
        Failure { status, message: message.into() }
    }

    pub(crate) fn null(parameter: &str) -> Self {
        Failure::new(rk_status::RK_NULL_PARAMETER, format!("`{parameter}` must not be NULL"))
    }
}

/// Maps every core error kind, in this one place.
pub(crate) fn status_of(error: &Error) -> rk_status {
    match error.kind() {
        ErrorKind::OverLimit => rk_status::RK_OVER_LIMIT,
        ErrorKind::Shed => rk_status::RK_SHED,
        ErrorKind::LeaseLost => rk_status::RK_LEASE_LOST,
        ErrorKind::InvalidArgument => rk_status::RK_INVALID_ARGUMENT,
        ErrorKind::BackendUnavailable => rk_status::RK_BACKEND_UNAVAILABLE,
        ErrorKind::Timeout => rk_status::RK_TIMEOUT,
        ErrorKind::BackendRejected => rk_status::RK_BACKEND_REJECTED,
        _ => rk_status::RK_UNKNOWN_ERROR,
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure { status: status_of(&error), message: error.to_string() }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Forgets the thread's last error (at the start of every status-returning call).
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|last| last.borrow_mut().clear());
}

/// Sets the thread's last error.
pub(crate) fn set_last_error(message: &str) {
    let _ = LAST_ERROR.try_with(|last| {
        let mut last = last.borrow_mut();
        last.clear();
        last.push_str(message);
    });
}

/// Turns a body's result into its status, recording the failure's message.
pub(crate) fn finish(result: Result<(), Failure>) -> rk_status {
    match result {
        Ok(()) => rk_status::RK_OK,
        Err(failure) => {
            set_last_error(&failure.message);
            failure.status
        }
    }
}

/// \brief Copies the message of the last failed call made on this thread into `buf`.
///
/// Every function returning an ::rk_status clears the calling thread's message when it starts
/// and sets it when it fails, so call this right after the failure, on the same thread. The
/// message is empty after a success. It is UTF-8 and never contains a NUL byte.
///
/// Like `snprintf`: writes at most `len - 1` bytes followed by a NUL (cut at a UTF-8 character
/// boundary, so the text stays valid), and stores the message's full length (excluding the NUL)
/// in `*out_n`, so a call with `buf = NULL` and `len = 0` measures it.
///
/// \param buf Where to write the message; may be NULL only when `len` is 0.
/// \param len The size of `buf` in bytes.
/// \param out_n Receives the full length of the message in bytes, excluding the NUL; must not
///        be NULL.
/// \return #RK_OK, or #RK_NULL_PARAMETER (`out_n` NULL, or `buf` NULL with `len` > 0), in which
///         case nothing is written and the message is kept.
#[no_mangle]
pub extern "C" fn rk_last_error_message(buf: *mut c_char, len: usize, out_n: *mut usize) -> rk_status {
    // Not `ffi_status!`: that would clear the very message asked for.
    ffi_boundary! {
        if out_n.is_null() || (buf.is_null() && len > 0) {
            return rk_status::RK_NULL_PARAMETER;
        }
        // The pointers were checked above, so the copy cannot fail.
        let _ = LAST_ERROR.try_with(|last| crate::args::write_text(buf, len, out_n, &last.borrow()));
        rk_status::RK_OK
    }
}

/// \brief The name of a status code, e.g. `"RK_OVER_LIMIT"`, as a static NUL-terminated string.
///
/// \param status A value returned by a ratekeeper function (any integer is accepted).
/// \return The code's name, or `"RK_UNKNOWN_ERROR"` for a value that is not a known code. Never
///         NULL; never free it.
#[no_mangle]
pub extern "C" fn rk_status_name(status: u32) -> *const c_char {
    ffi_boundary! {
        let name: &'static [u8] = match status {
            0 => b"RK_OK\0",
            1 => b"RK_OVER_LIMIT\0",
            2 => b"RK_SHED\0",
            3 => b"RK_LEASE_LOST\0",
            4 => b"RK_INVALID_ARGUMENT\0",
            5 => b"RK_NULL_PARAMETER\0",
            6 => b"RK_INVALID_UTF8\0",
            7 => b"RK_BACKEND_UNAVAILABLE\0",
            8 => b"RK_TIMEOUT\0",
            9 => b"RK_PANIC\0",
            10 => b"RK_UNKNOWN_ERROR\0",
            11 => b"RK_BACKEND_REJECTED\0",
            _ => b"RK_UNKNOWN_ERROR\0",
        };
        name.as_ptr().cast()
    }
}
