//! The accessors of the error object that C calls.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use crate::error::*;
use crate::ffi::{self, arg_ref, no_panic, take_box};

/// The error's code (`HUGESHM_ERROR_*`); `HUGESHM_ERROR_INVALID_ARGUMENT`
/// when `error` is NULL.
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_code(error: *const hugeshm_error) -> c_int {
    no_panic(HUGESHM_ERROR_INVALID_ARGUMENT, || {
        // SAFETY: the caller passes NULL or a live error object.
        unsafe { arg_ref(error, "error") }.map_or(HUGESHM_ERROR_INVALID_ARGUMENT, |e| e.code)
    })
}

/// The error message: one line, with the numbers and, for errors an
/// administrator can fix, "; to fix: ..." (e.g. `2 MiB pages: required 5,
/// available 4 (free 4, reserved 0); to fix: sysctl -w vm.nr_hugepages=5`).
/// Valid until the error is freed; NULL when `error` is NULL.
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_message(error: *const hugeshm_error) -> *const c_char {
    no_panic(ptr::null(), || {
        // SAFETY: the caller passes NULL or a live error object.
        unsafe { arg_ref(error, "error") }.map_or(ptr::null(), |e| e.message.as_ptr())
    })
}

/// The fix alone (a command or setting, e.g. `sysctl -w
/// vm.nr_hugepages=5`), or NULL when the error has none. Valid until the
/// error is freed.
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_fix(error: *const hugeshm_error) -> *const c_char {
    no_panic(ptr::null(), || {
        // SAFETY: the caller passes NULL or a live error object.
        unsafe { arg_ref(error, "error") }
            .ok()
            .and_then(|e| e.fix.as_ref())
            .map_or(ptr::null(), |f| f.as_ptr())
    })
}

/// The errno of the failed system call behind the error, 0 when there is
/// none.
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_errno(error: *const hugeshm_error) -> c_int {
    no_panic(0, || {
        // SAFETY: the caller passes NULL or a live error object.
        unsafe { arg_ref(error, "error") }.map_or(0, |e| e.errno)
    })
}

/// Copies the pool numbers of a `HUGESHM_ERROR_POOL_SHORTFALL` into
/// `*out` and returns true; returns false (leaving `*out` alone) for other
/// errors and NULL arguments.
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed; `out` is NULL or
/// points to writable memory for one `hugeshm_shortfall`.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_shortfall(
    error: *const hugeshm_error,
    out: *mut hugeshm_shortfall,
) -> bool {
    no_panic(false, || {
        // SAFETY: the caller passes NULL or a live error object.
        let Some(s) = unsafe { arg_ref(error, "error") }
            .ok()
            .and_then(|e| e.shortfall)
        else {
            return false;
        };
        // SAFETY: the caller passes NULL or memory writable for one
        // `hugeshm_shortfall`.
        unsafe { ffi::write_out(out, s, "out") }.is_ok()
    })
}

/// Frees an error object. NULL is allowed (and does nothing).
///
/// # Safety
///
/// `error` is NULL or an error object not yet freed; it must not be used
/// afterwards (nor the strings its accessors returned).
#[no_mangle]
pub unsafe extern "C" fn hugeshm_error_free(error: *mut hugeshm_error) {
    no_panic((), || {
        // SAFETY: the caller passes NULL or an error object this library
        // allocated and that is freed only here, once.
        drop(unsafe { take_box(error) });
    })
}

/// The name of a code, e.g. "pool_shortfall" for
/// `HUGESHM_ERROR_POOL_SHORTFALL`, "ok" for `HUGESHM_OK`, "unknown" for
/// values that are not codes. A static string.
#[no_mangle]
pub extern "C" fn hugeshm_error_code_name(code: c_int) -> *const c_char {
    no_panic(c"unknown".as_ptr(), || code_name(code).as_ptr())
}

fn code_name(code: c_int) -> &'static CStr {
    match code {
        HUGESHM_OK => c"ok",
        HUGESHM_ERROR_INVALID_ARGUMENT => c"invalid_argument",
        HUGESHM_ERROR_POOL_SHORTFALL => c"pool_shortfall",
        HUGESHM_ERROR_UNSUPPORTED_PAGE_SIZE => c"unsupported_page_size",
        HUGESHM_ERROR_NO_HUGETLBFS_MOUNT => c"no_hugetlbfs_mount",
        HUGESHM_ERROR_UNSUITABLE_DIRECTORY => c"unsuitable_directory",
        HUGESHM_ERROR_THP_UNAVAILABLE => c"thp_unavailable",
        HUGESHM_ERROR_NO_SPACE => c"no_space",
        HUGESHM_ERROR_PERMISSION => c"permission",
        HUGESHM_ERROR_MEMLOCK_LIMIT => c"memlock_limit",
        HUGESHM_ERROR_PREFAULT => c"prefault",
        HUGESHM_ERROR_VERIFICATION => c"verification",
        HUGESHM_ERROR_EXISTS => c"exists",
        HUGESHM_ERROR_NOT_FOUND => c"not_found",
        HUGESHM_ERROR_IN_USE => c"in_use",
        HUGESHM_ERROR_UNSUPPORTED => c"unsupported",
        HUGESHM_ERROR_SYSTEM => c"system",
        HUGESHM_ERROR_ORPHANED => c"orphaned",
        HUGESHM_ERROR_INCOMPLETE => c"incomplete",
        HUGESHM_ERROR_STALE => c"stale",
        HUGESHM_ERROR_NOT_OURS => c"not_ours",
        HUGESHM_ERROR_NEWER_LAYOUT => c"newer_layout",
        HUGESHM_ERROR_HEADER_MISMATCH => c"header_mismatch",
        HUGESHM_ERROR_UNTRUSTED => c"untrusted",
        HUGESHM_ERROR_KERNEL_LIMIT => c"kernel_limit",
        HUGESHM_ERROR_FAULT_REFUSED => c"fault_refused",
        HUGESHM_ERROR_CGROUP_LIMIT => c"cgroup_limit",
        HUGESHM_ERROR_NOT_ENOUGH_MEMORY => c"not_enough_memory",
        HUGESHM_ERROR_OTHER => c"other",
        HUGESHM_ERROR_INTERNAL => c"internal",
        _ => c"unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_region::RegionError;

    #[test]
    fn region_errors_keep_code_message_and_errno() {
        let e: hugeshm_error = hugeshm_region::Region::attach(
            "hugeshm-capi-unit-no-such-region",
            hugeshm_region::Backend::Sysv,
        )
        .unwrap_err()
        .into();
        assert_eq!(e.code(), HUGESHM_ERROR_NOT_FOUND, "{}", e.message());
        assert!(e.message().contains("not found"), "{}", e.message());
        assert!(e.fix.is_none());

        let e: hugeshm_error = RegionError::Io {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        }
        .into();
        assert_eq!(
            (e.code(), e.errno),
            (HUGESHM_ERROR_PERMISSION, libc::EACCES)
        );
        assert!(e.message().starts_with("/x: "), "{}", e.message());

        let e: hugeshm_error = RegionError::Unsupported("no".into()).into();
        assert_eq!((e.code(), e.errno), (HUGESHM_ERROR_UNSUPPORTED, 0));

        let e: hugeshm_error = RegionError::NotEnoughMemory {
            needed_bytes: 8 << 30,
            page_size_bytes: 4096,
            available_bytes: 6 << 30,
            on_demand_possible: true,
        }
        .into();
        assert_eq!(e.code(), HUGESHM_ERROR_NOT_ENOUGH_MEMORY);
        let fix = e
            .fix
            .as_deref()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        assert!(
            fix.contains("free 2 GiB of memory")
                && fix.contains("hugeshm_options_set_prefault_threads(opts, 0)"),
            "{fix}"
        );
    }

    #[test]
    fn nul_bytes_do_not_truncate_or_fail() {
        let e = hugeshm_error::new(HUGESHM_ERROR_OTHER, "a\0b");
        assert_eq!(e.message(), "a?b");
    }

    #[test]
    fn every_code_has_a_name() {
        for code in 0..=HUGESHM_ERROR_NOT_ENOUGH_MEMORY {
            assert_ne!(code_name(code), c"unknown", "{code}");
        }
        assert_eq!(code_name(HUGESHM_ERROR_INTERNAL), c"internal");
        assert_eq!(code_name(1234), c"unknown");
    }
}
