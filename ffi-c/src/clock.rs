//! `rk_manual_clock`: a clock that only moves when told to, for tests and the conformance
//! vectors (the same manual clock Python's `ManualClock` and Node's `ManualClock` wrap).

use std::sync::Arc;

use ratekeeper::{Backend, Clock, ManualClock, MemoryConfig};

use crate::args::{arg_ref, Out};
use crate::backend::{publish, rk_backend};
use crate::error::rk_status;
use crate::panic::{ffi_boundary, ffi_status};

/// \brief A clock that only moves when `rk_manual_clock_advance` is called.
///
/// Opaque. Made by `rk_manual_clock_new`, freed with `rk_manual_clock_free`; a memory backend
/// built on it with `rk_backend_new_memory_with_clock` keeps what it needs alive, so the clock
/// may be freed first. Thread-safe. Waiting calls (`rk_limiter_acquire`) wake when the clock is
/// advanced past their deadline.
#[allow(non_camel_case_types)]
pub struct rk_manual_clock {
    pub(crate) inner: ManualClock,
}

/// \brief Creates a manual clock reading `start_us` microseconds since the Unix epoch.
///
/// \param start_us The clock's first reading.
/// \param clock_out Receives the new clock; free it with `rk_manual_clock_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_manual_clock_new(start_us: u64, clock_out: *mut *mut rk_manual_clock) -> rk_status {
    ffi_status! {
        let out = Out::new("clock_out", clock_out)?;
        out.write(Box::into_raw(Box::new(rk_manual_clock { inner: ManualClock::new(start_us) })));
        Ok(())
    }
}

/// \brief Moves a manual clock forward by `us` microseconds.
///
/// \param clock The clock.
/// \param us How far to move it.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_manual_clock_advance(clock: *const rk_manual_clock, us: u64) -> rk_status {
    ffi_status! {
        arg_ref("clock", clock)?.inner.advance(std::time::Duration::from_micros(us));
        Ok(())
    }
}

/// \brief Reads a manual clock.
///
/// \param clock The clock.
/// \param now_us_out Receives its reading, in microseconds since the Unix epoch.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_manual_clock_now_us(clock: *const rk_manual_clock, now_us_out: *mut u64) -> rk_status {
    ffi_status! {
        let out = Out::new("now_us_out", now_us_out)?;
        out.write(arg_ref("clock", clock)?.inner.now_micros());
        Ok(())
    }
}

/// \brief Frees a manual clock. NULL is ignored.
///
/// Backends built on it keep working (they hold what they need).
///
/// \param clock A clock from `rk_manual_clock_new`, or NULL.
#[no_mangle]
pub extern "C" fn rk_manual_clock_free(clock: *mut rk_manual_clock) {
    ffi_boundary! {
        if !clock.is_null() {
            // SAFETY: the caller's contract: made by `rk_manual_clock_new`, not freed before.
            drop(unsafe { Box::from_raw(clock) });
        }
    }
}

/// \brief Creates an in-process memory backend whose limiters read time from a manual clock.
///
/// \param clock The clock.
/// \param backend_out Receives the new backend; free it with `rk_backend_free`.
/// \return #RK_OK or #RK_NULL_PARAMETER.
#[no_mangle]
pub extern "C" fn rk_backend_new_memory_with_clock(
    clock: *const rk_manual_clock,
    backend_out: *mut *mut rk_backend,
) -> rk_status {
    ffi_status! {
        let out = Out::new("backend_out", backend_out)?;
        let clock = Arc::new(arg_ref("clock", clock)?.inner.clone());
        publish(out, Backend::memory_with(MemoryConfig::default().clock(clock))?);
        Ok(())
    }
}
