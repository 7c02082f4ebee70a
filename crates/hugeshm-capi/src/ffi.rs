//! The boundary itself: every raw pointer that comes from C becomes a Rust
//! reference, a string, a written out-parameter or a freed handle here (or
//! an invalid-argument error when it is NULL), and every entry point runs
//! its body under [`guard`] or [`no_panic`], so that no panic unwinds into
//! C.
//!
//! The entry points in the other modules only call these helpers, each call
//! in an `unsafe` block whose `// SAFETY:` line points at the entry point's
//! `# Safety` contract, which is what the C caller promised.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use crate::error::{hugeshm_error, HUGESHM_OK};

/// `p` as a shared reference, or an invalid-argument error naming the
/// argument when it is NULL.
///
/// # Safety
///
/// `p` is NULL or points to a live, properly aligned `T` that nothing
/// mutates for `'a` (what the C API's documentation asks of its callers).
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T, arg: &str) -> Result<&'a T, hugeshm_error> {
    // SAFETY: the caller guarantees that a non-NULL `p` points to a live
    // `T` not mutated for `'a`; `as_ref` maps NULL to `None`.
    unsafe { p.as_ref() }.ok_or_else(|| hugeshm_error::null_argument(arg))
}

/// `p` as an exclusive reference, or an invalid-argument error when NULL.
///
/// # Safety
///
/// `p` is NULL or points to a live, properly aligned `T` that nothing else
/// accesses for `'a`.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T, arg: &str) -> Result<&'a mut T, hugeshm_error> {
    // SAFETY: the caller guarantees that a non-NULL `p` points to a live
    // `T` used by nobody else for `'a`; `as_mut` maps NULL to `None`.
    unsafe { p.as_mut() }.ok_or_else(|| hugeshm_error::null_argument(arg))
}

/// A C string argument as UTF-8 text; NULL and invalid UTF-8 are
/// invalid-argument errors.
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that stays unchanged
/// for `'a`.
pub(crate) unsafe fn arg_str<'a>(p: *const c_char, arg: &str) -> Result<&'a str, hugeshm_error> {
    if p.is_null() {
        return Err(hugeshm_error::null_argument(arg));
    }
    // SAFETY: `p` is not NULL, and the caller guarantees that it points to
    // a NUL-terminated string that lives and stays unchanged for `'a`.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        hugeshm_error::invalid_argument(format!(
            "argument `{arg}` is not valid UTF-8: {}",
            s.to_string_lossy()
        ))
    })
}

/// Stores `value` through the out-pointer `p`, or fails when `p` is NULL.
///
/// # Safety
///
/// `p` is NULL or valid for writing one `T` (its old value is overwritten,
/// not dropped).
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T, arg: &str) -> Result<(), hugeshm_error> {
    if p.is_null() {
        return Err(hugeshm_error::null_argument(arg));
    }
    // SAFETY: `p` is not NULL and the caller guarantees it is valid and
    // aligned for a write of one `T`; `write` does not read the old value.
    unsafe { p.write(value) };
    Ok(())
}

/// Takes back ownership of a handle that [`into_handle`] gave to C.
///
/// # Safety
///
/// `p` is NULL or a pointer returned by [`into_handle`] for the same `T`
/// that has not been taken back yet; C must not use it afterwards.
pub(crate) unsafe fn take_box<T>(p: *mut T) -> Option<Box<T>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees that `p` came from `Box::into_raw` (in
    // `into_handle`) and is given back exactly once.
    Some(unsafe { Box::from_raw(p) })
}

/// Hands a value to C as an opaque handle (freed with [`take_box`]).
pub(crate) fn into_handle<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// Runs the body of an entry point that reports errors: catches a panic
/// (as a `HUGESHM_ERROR_INTERNAL` error), stores the error object in
/// `*err` (NULL on success) when `err` is not NULL, and returns the code.
///
/// # Safety
///
/// `err` is NULL or valid for writing one pointer.
pub(crate) unsafe fn guard(
    function: &'static str,
    err: *mut *mut hugeshm_error,
    body: impl FnOnce() -> Result<(), hugeshm_error>,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err(hugeshm_error::panic(function, payload.as_ref())));
    let result = result.map_err(|e| e.in_function(function));
    let code = match &result {
        Ok(()) => HUGESHM_OK,
        Err(e) => e.code(),
    };
    if !err.is_null() {
        let value = match result {
            Ok(()) => ptr::null_mut(),
            Err(e) => into_handle(e),
        };
        // SAFETY: `err` is not NULL and the caller guarantees it is valid
        // for writing one pointer.
        unsafe { err.write(value) };
    }
    code
}

/// Runs the body of an entry point that cannot report errors (accessors),
/// returning `fallback` if it panics.
pub(crate) fn no_panic<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HUGESHM_ERROR_INTERNAL;
    use crate::error_api::{hugeshm_error_code, hugeshm_error_free};

    #[test]
    fn a_panic_becomes_an_internal_error() {
        let mut err: *mut hugeshm_error = ptr::null_mut();
        // SAFETY: `err` is a valid out-pointer.
        let code = unsafe { guard("test_fn", &mut err, || panic!("boom {}", 42)) };
        assert_eq!(code, HUGESHM_ERROR_INTERNAL);
        assert!(!err.is_null());
        // SAFETY: `err` was just set to a live error object.
        let e = unsafe { &*err };
        assert_eq!(e.code(), HUGESHM_ERROR_INTERNAL);
        assert!(e.message().contains("test_fn"), "{}", e.message());
        assert!(e.message().contains("boom 42"), "{}", e.message());
        // SAFETY: `err` is a live error object, freed once.
        unsafe {
            assert_eq!(hugeshm_error_code(err), HUGESHM_ERROR_INTERNAL);
            hugeshm_error_free(err);
        }
        assert_eq!(no_panic(7, || panic!("quiet")), 7);
    }

    #[test]
    fn success_clears_the_error_pointer() {
        let mut err: *mut hugeshm_error = ptr::dangling_mut();
        // SAFETY: `err` is a valid out-pointer (its old value is not read).
        let code = unsafe { guard("ok_fn", &mut err, || Ok(())) };
        assert_eq!(code, HUGESHM_OK);
        assert!(err.is_null());
        // A NULL err is allowed: only the code comes back.
        // SAFETY: NULL err is documented as allowed.
        let code = unsafe {
            guard("bad_fn", ptr::null_mut(), || {
                Err(hugeshm_error::null_argument("x"))
            })
        };
        assert_eq!(code, crate::error::HUGESHM_ERROR_INVALID_ARGUMENT);
    }
}
