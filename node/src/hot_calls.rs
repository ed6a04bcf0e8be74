//! The by-handle calls of `Limiter` that an in-process check takes (`limiterCheck`,
//! `limiterCheckSync`, `limiterPeek`, `limiterPeekSync`), exported as plain N-API callbacks.
//!
//! napi-rs's generated glue for a function with arguments opens a native-borrow scope per call:
//! a heap-allocated, mutex-guarded record pushed on a thread-local stack and popped after the
//! return value's conversion, so that a returned async task can keep borrowed arguments alive.
//! These calls borrow nothing and return no task, and on the memory backend that scope cost as
//! much as the limiter's own work (`docs/src/benchmarks.md`), so they skip the glue: each reads
//! its arguments with `napi_get_cb_info` and calls the same Rust function the glue would.
//!
//! The four share one body, [`hot_call`], given the operation and the answer's shape.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use napi::bindgen_prelude::{FromNapiValue, Object};
use napi::{sys, Env, JsError, JsValue, Unknown};
use napi_derive::napi;

use crate::bridge::ReplyValue;
use crate::limiter;

/// What a hot call does to the limiter its handle names.
#[derive(Clone, Copy)]
enum Operation {
    /// `(handle, key, cost)`: counts the call.
    Check,
    /// `(handle, key)`: reads the state without counting.
    Peek,
}

/// How a hot call answers.
#[derive(Clone, Copy)]
enum Shape {
    /// For the awaited `check` and `peek`: the decision when it is known during the call (an
    /// in-process limiter), else the id of a reply to come (index.js's `promised` makes either
    /// a Promise).
    Awaited,
    /// For `checkSync` and `peekSync`: the decision itself (blocking on Redis).
    Sync,
}

/// The one body of the four calls: reads the operation's arguments, runs it on the limiter the
/// handle names in the shape asked for, and returns its value or throws its error (a panic
/// becomes a thrown error too: no panic crosses into JavaScript). Inlined into each callback
/// with constant arguments, so each keeps only its own branch: no per-call dispatch.
#[inline(always)]
unsafe fn hot_call(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    operation: Operation,
    shape: Shape,
) -> sys::napi_value {
    // SAFETY: the callers are N-API callbacks passing their own `env` and `info`, so we are
    // inside the call, on its JavaScript thread; the argument values wrapped as `Unknown` are
    // the call's own and are used only during it.
    unsafe {
        match operation {
            Operation::Check => {
                let [h, key, cost] = arguments::<3>(env, info);
                respond(env, |e| {
                    let handle = handle(env, h)?;
                    let (key, cost) = (Unknown::from_raw_unchecked(env, key), Unknown::from_raw_unchecked(env, cost));
                    match shape {
                        Shape::Awaited => limiter::limiter_check(e, handle, key, cost),
                        Shape::Sync => limiter::limiter_check_sync(e, handle, key, cost),
                    }
                })
            }
            Operation::Peek => {
                let [h, key] = arguments::<2>(env, info);
                respond(env, |e| {
                    let handle = handle(env, h)?;
                    let key = Option::<Unknown>::from_napi_value(env, key)?;
                    match shape {
                        Shape::Awaited => limiter::limiter_peek(e, handle, key),
                        Shape::Sync => limiter::limiter_peek_sync(e, handle, key),
                    }
                })
            }
        }
    }
}

/// The arguments of the current call: up to `N`, `undefined` for those left out.
unsafe fn arguments<const N: usize>(env: sys::napi_env, info: sys::napi_callback_info) -> [sys::napi_value; N] {
    let mut argv = [ptr::null_mut(); N];
    let mut argc = N;
    // SAFETY: `env`/`info` are the current call's; `argv` has room for `argc` = N values (N-API
    // writes at most that many, and `undefined` for the missing ones).
    unsafe { sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), ptr::null_mut()) };
    argv
}

/// Runs a call's body: its value, or its error thrown (a panic becomes a thrown error too: no
/// panic crosses into JavaScript).
unsafe fn respond(env: sys::napi_env, body: impl FnOnce(Env) -> napi::Result<ReplyValue>) -> sys::napi_value {
    let result = catch_unwind(AssertUnwindSafe(|| body(Env::from_raw(env))))
        .unwrap_or_else(|_| Err(napi::Error::from_reason("ratekeeper: a by-handle call panicked")));
    match result {
        Ok(value) => value.0,
        Err(error) => {
            // SAFETY: `env` is the current call's environment, on its thread; the callback
            // returns right after, with the exception pending.
            unsafe { JsError::from(error).throw_into(env) };
            ptr::null_mut()
        }
    }
}

/// The limiter handle: index.js passes the number it was given.
unsafe fn handle(env: sys::napi_env, value: sys::napi_value) -> napi::Result<u32> {
    // SAFETY: the caller passes the current call's env and one of its argument values.
    unsafe { u32::from_napi_value(env, value) }
}

unsafe extern "C" fn check(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node calls this as the N-API callback it was registered as, with its env and info.
    unsafe { hot_call(env, info, Operation::Check, Shape::Awaited) }
}

unsafe extern "C" fn check_sync(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node calls this as the N-API callback it was registered as, with its env and info.
    unsafe { hot_call(env, info, Operation::Check, Shape::Sync) }
}

unsafe extern "C" fn peek(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node calls this as the N-API callback it was registered as, with its env and info.
    unsafe { hot_call(env, info, Operation::Peek, Shape::Awaited) }
}

unsafe extern "C" fn peek_sync(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node calls this as the N-API callback it was registered as, with its env and info.
    unsafe { hot_call(env, info, Operation::Peek, Shape::Sync) }
}

type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// Adds the calls to the addon's exports (run once per environment, when it loads the addon).
#[napi(module_exports)]
pub fn export_hot_calls(exports: Object<'_>, env: Env) -> napi::Result<()> {
    let calls: [(&std::ffi::CStr, Callback); 4] = [
        (c"limiterCheck", check),
        (c"limiterCheckSync", check_sync),
        (c"limiterPeek", peek),
        (c"limiterPeekSync", peek_sync),
    ];
    let (raw_env, raw_exports) = (env.raw(), exports.value().value);
    for (name, callback) in calls {
        let mut function = ptr::null_mut();
        // SAFETY: on the loading environment's thread, during `module_exports`; `name` is a
        // NUL-terminated literal whose length is passed, and `callback` has N-API's signature.
        napi::check_status!(unsafe {
            sys::napi_create_function(
                raw_env,
                name.as_ptr(),
                name.to_bytes().len() as isize,
                Some(callback),
                ptr::null_mut(),
                &mut function,
            )
        })?;
        // SAFETY: as above; `raw_exports` is the exports object of this call, `function` just made.
        napi::check_status!(unsafe { sys::napi_set_named_property(raw_env, raw_exports, name.as_ptr(), function) })?;
    }
    Ok(())
}
