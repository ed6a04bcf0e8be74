//! The one panic boundary every `extern "C"` function runs inside.
//!
//! A panic unwinding into C is undefined behaviour, and aborting would take the caller's whole
//! process down, so every entry point catches it: functions returning [`rk_status`] return
//! [`rk_status::RK_PANIC`] (with the panic message as the thread's last error), the others a
//! harmless default (a NULL pointer, `void`). Handles stay usable after a panic: they hold no
//! lock that poisons (the core uses `parking_lot`), and the panicking call wrote no out-param.

use std::any::Any;
use std::os::raw::c_char;

use crate::error::{rk_status, set_last_error};

/// What an entry point returns when its body panicked.
pub(crate) trait PanicValue {
    fn panic_value() -> Self;
}

impl PanicValue for rk_status {
    fn panic_value() -> Self {
        rk_status::RK_PANIC
    }
}

impl PanicValue for () {
    fn panic_value() -> Self {}
}

/// Functions returning a static string promise never to return NULL: an empty one it is.
impl PanicValue for *const c_char {
    fn panic_value() -> Self {
        c"".as_ptr()
    }
}

/// Records the panic as the thread's last error and returns the entry point's panic value.
#[cold]
pub(crate) fn caught<T: PanicValue>(payload: Box<dyn Any + Send>) -> T {
    set_last_error(&panic_message(payload));
    T::panic_value()
}

/// The message a caught panic is reported with (here, and by the calls that complete through a
/// callback, whose panics happen on a runtime thread). Consumes the payload.
#[cold]
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let message = format!("internal panic (a bug in ratekeeper; please report it): {message}");
    // Dropping a panic payload can itself panic; never let that escape either.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload)));
    message
}

/// Runs the body of an `extern "C"` function, turning a panic into the function's panic value.
/// Used by every entry point, directly or through `ffi_status!`.
macro_rules! ffi_boundary {
    ($($body:tt)*) => {
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| {
            $crate::test_hooks::maybe_panic();
            $($body)*
        })) {
            Ok(value) => value,
            Err(payload) => $crate::panic::caught(payload),
        }
    };
}

/// The body of an entry point returning [`rk_status`]: a block evaluating to
/// `Result<(), Failure>` in which `?` works. The thread's last error is cleared first and set
/// from the failure, if any.
macro_rules! ffi_status {
    ($($body:tt)*) => {
        $crate::panic::ffi_boundary! {
            $crate::error::clear_last_error();
            #[allow(clippy::redundant_closure_call)]
            let result: ::std::result::Result<(), $crate::error::Failure> = (|| { $($body)* })();
            $crate::error::finish(result)
        }
    };
}

pub(crate) use {ffi_boundary, ffi_status};
