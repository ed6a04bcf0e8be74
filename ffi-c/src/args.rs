//! Checked conversions of C arguments: NULL pointers, invalid UTF-8 and impossible lengths
//! become a [`Failure`] naming the parameter, before any state is touched.

use std::ffi::CStr;
use std::os::raw::c_char;

use crate::error::{rk_status, Failure};

/// A shared reference from a pointer the caller promises is NULL or valid.
pub(crate) fn arg_ref<'a, T>(parameter: &str, ptr: *const T) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract: `ptr` is NULL or points to a live, aligned `T`.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::null(parameter))
}

/// An out-param: checked for NULL now, written only on success.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    pub(crate) fn new(parameter: &str, ptr: *mut T) -> Result<Self, Failure> {
        if ptr.is_null() {
            return Err(Failure::null(parameter));
        }
        Ok(Out(ptr))
    }

    pub(crate) fn write(self, value: T) {
        // SAFETY: non-NULL (checked in `new`); the caller's contract: aligned and writable.
        // `write`, not assignment: the target may be uninitialised and must not be dropped.
        unsafe { self.0.write(value) }
    }
}

/// A required string.
pub(crate) fn arg_str<'a>(parameter: &str, ptr: *const c_char) -> Result<&'a str, Failure> {
    arg_opt_str(parameter, ptr)?.ok_or_else(|| Failure::null(parameter))
}

/// An optional string: NULL is `None`.
pub(crate) fn arg_opt_str<'a>(parameter: &str, ptr: *const c_char) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract: a non-NULL string pointer is NUL-terminated and stays
    // valid and unmodified for the duration of the call.
    let bytes = unsafe { CStr::from_ptr(ptr) };
    match bytes.to_str() {
        Ok(s) => Ok(Some(s)),
        Err(e) => Err(Failure::new(
            rk_status::RK_INVALID_UTF8,
            format!("`{parameter}` is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()),
        )),
    }
}

/// Refuses a length no array of `T` can have (its size would pass `isize::MAX`, which Rust's
/// slices, hence `from_raw_parts`, require), naming `{parameter}_len`.
pub(crate) fn fits_in_memory<T>(parameter: &str, len: usize) -> Result<(), Failure> {
    if len > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(Failure::new(
            rk_status::RK_INVALID_ARGUMENT,
            format!("invalid argument `{parameter}_len`: {len} elements cannot exist in memory"),
        ));
    }
    Ok(())
}

/// A C array of `len` elements; NULL is allowed only when `len` is 0.
pub(crate) fn arg_slice<'a, T>(parameter: &str, ptr: *const T, len: usize) -> Result<&'a [T], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(parameter));
    }
    fits_in_memory::<T>(parameter, len)?;
    // SAFETY: the caller's contract: `ptr` points to `len` initialised elements that stay valid
    // for the duration of the call; the total size fits in isize (checked above).
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Writes `text` as `snprintf` does: at most `len - 1` bytes (cut at a character boundary)
/// followed by a NUL, and its full length (excluding the NUL) in `*out_n`, so a call with
/// `buf = NULL` and `len = 0` measures it.
pub(crate) fn write_text(buf: *mut c_char, len: usize, out_n: *mut usize, text: &str) -> Result<(), Failure> {
    let out_n = Out::new("out_n", out_n)?;
    if buf.is_null() && len > 0 {
        return Err(Failure::null("buf"));
    }
    if len > 0 {
        let mut n = text.len().min(len - 1);
        while !text.is_char_boundary(n) {
            n -= 1;
        }
        // SAFETY: the caller guarantees `buf` points to `len` writable bytes, and n < len.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    out_n.write(text.len());
    Ok(())
}
