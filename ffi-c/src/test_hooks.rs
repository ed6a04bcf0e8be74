//! Test-only hooks (cargo feature `test-hooks`): they prove that a panic inside any entry point
//! comes back as `RK_PANIC` instead of crossing into C. Without the feature, `maybe_panic` is
//! empty and nothing is exported.

#[cfg(feature = "test-hooks")]
use crate::error::rk_status;
#[cfg(feature = "test-hooks")]
use crate::panic::{ffi_boundary, ffi_status};

#[cfg(feature = "test-hooks")]
thread_local! {
    static PANIC_NEXT_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Called first inside every panic boundary: panics if `rk_test_panic_next_call` armed it.
#[inline(always)]
pub(crate) fn maybe_panic() {
    #[cfg(feature = "test-hooks")]
    if PANIC_NEXT_CALL.with(|armed| armed.replace(false)) {
        panic!("forced by rk_test_panic_next_call");
    }
}

/// \brief TEST ONLY: panics inside the panic boundary, returning #RK_PANIC.
///
/// Exported only by builds with the cargo feature `test-hooks`; declared only when
/// `RK_TEST_HOOKS` is defined. Never call it in production code.
///
/// \return #RK_PANIC.
#[cfg(feature = "test-hooks")]
#[no_mangle]
pub extern "C" fn rk_test_panic() -> rk_status {
    ffi_status! {
        panic!("forced by rk_test_panic")
    }
}

/// \brief TEST ONLY: makes the next ratekeeper call on this thread panic inside its boundary
/// (it then returns #RK_PANIC, or its default value if it returns no status).
///
/// Exported only by builds with the cargo feature `test-hooks`; declared only when
/// `RK_TEST_HOOKS` is defined. Never call it in production code.
#[cfg(feature = "test-hooks")]
#[no_mangle]
pub extern "C" fn rk_test_panic_next_call() {
    ffi_boundary! {
        PANIC_NEXT_CALL.with(|armed| armed.set(true));
    }
}

#[cfg(feature = "test-hooks")]
static PANIC_NEXT_TASK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Called first inside every call submitted to the runtime (`rk_limiter_check_start`): panics
/// there, on a runtime thread, if `rk_test_panic_next_task` armed it.
#[inline(always)]
pub(crate) fn maybe_panic_in_task() {
    #[cfg(feature = "test-hooks")]
    if PANIC_NEXT_TASK.swap(false, std::sync::atomic::Ordering::SeqCst) {
        panic!("forced by rk_test_panic_next_task");
    }
}

/// \brief TEST ONLY: makes the next call submitted by a `*_start` function (from any thread)
/// panic inside its task on ratekeeper's runtime; its callback then receives #RK_PANIC.
///
/// Exported only by builds with the cargo feature `test-hooks`; declared only when
/// `RK_TEST_HOOKS` is defined. Never call it in production code.
#[cfg(feature = "test-hooks")]
#[no_mangle]
pub extern "C" fn rk_test_panic_next_task() {
    ffi_boundary! {
        PANIC_NEXT_TASK.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
