//! The error object handed to C, its codes and accessors.

use std::any::Any;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;

use hugeshm_region::{RegionError, Renderer, Shortfall};

use crate::ffi::{self, arg_ref, no_panic, take_box};

// Result codes: every function that can fail returns `HUGESHM_OK` (0) or
// one of the `HUGESHM_ERROR_*` values as an `int`, and (when its `err`
// argument is not NULL) also stores an error object with the details.

/// Success.
pub const HUGESHM_OK: c_int = 0;
/// A NULL pointer where a value is needed, an unknown enum value, text that
/// is not UTF-8, an invalid region name or size, or a value out of range.
pub const HUGESHM_ERROR_INVALID_ARGUMENT: c_int = 1;
/// The huge page pool cannot hold the region (policy `only`). The message
/// has the numbers ("required N, available M") and the fix;
/// `hugeshm_error_shortfall` returns the numbers.
pub const HUGESHM_ERROR_POOL_SHORTFALL: c_int = 2;
/// The kernel offers no huge pages of the size asked for.
pub const HUGESHM_ERROR_UNSUPPORTED_PAGE_SIZE: c_int = 3;
/// `hugetlbfs` backend: no hugetlbfs mount of the page size.
pub const HUGESHM_ERROR_NO_HUGETLBFS_MOUNT: c_int = 4;
/// The directory given with `hugeshm_options_set_directory` cannot hold
/// the region's file.
pub const HUGESHM_ERROR_UNSUITABLE_DIRECTORY: c_int = 5;
/// `posix` backend: transparent huge pages are not available on the tmpfs.
pub const HUGESHM_ERROR_THP_UNAVAILABLE: c_int = 6;
/// The file system holding the region is too small.
pub const HUGESHM_ERROR_NO_SPACE: c_int = 7;
/// Permission denied (huge page SysV segments without privilege, a region
/// of another user, a hugetlbfs mount's permissions).
pub const HUGESHM_ERROR_PERMISSION: c_int = 8;
/// `mlock` would exceed `RLIMIT_MEMLOCK`.
pub const HUGESHM_ERROR_MEMLOCK_LIMIT: c_int = 9;
/// Pre-faulting failed: the kernel could not supply a page.
pub const HUGESHM_ERROR_PREFAULT: c_int = 10;
/// `/proc/self/smaps` shows smaller pages than asked for (policy `only`).
pub const HUGESHM_ERROR_VERIFICATION: c_int = 11;
/// A region of that name exists and a live process holds it (the message
/// names the pids), or is creating it.
pub const HUGESHM_ERROR_EXISTS: c_int = 12;
/// No region of that name (or no such file or segment).
pub const HUGESHM_ERROR_NOT_FOUND: c_int = 13;
/// The region is attached by processes (the message names them), so it is
/// not removed.
pub const HUGESHM_ERROR_IN_USE: c_int = 14;
/// The operation does not exist for this backend (e.g. attaching a `memfd`
/// or `anon` region by name).
pub const HUGESHM_ERROR_UNSUPPORTED: c_int = 15;
/// A system call or file operation failed; `hugeshm_error_errno` has the
/// errno.
pub const HUGESHM_ERROR_SYSTEM: c_int = 16;
/// A region of that name exists, no process holds it (its creator crashed
/// or exited without removing it), and the options did not ask to reclaim
/// it; the fix says how (`hugeshm_options_set_reclaim`).
pub const HUGESHM_ERROR_ORPHANED: c_int = 17;
/// The region's creation has not finished: its creator is still at it
/// (retry), or died mid-creation (recreate or remove it).
pub const HUGESHM_ERROR_INCOMPLETE: c_int = 18;
/// A memfd region whose holders are all gone: its memory went with them.
pub const HUGESHM_ERROR_STALE: c_int = 19;
/// The object under the region's key or path is not this hugeshm region
/// (a foreign segment or file, or a SysV key collision); hugeshm never
/// uses or removes it.
pub const HUGESHM_ERROR_NOT_OURS: c_int = 20;
/// The region was made by a newer hugeshm with a newer header layout.
pub const HUGESHM_ERROR_NEWER_LAYOUT: c_int = 21;
/// The region's header does not match what was expected (size, page size,
/// backend) or the kernel object.
pub const HUGESHM_ERROR_HEADER_MISMATCH: c_int = 22;
/// An error this version of the C API has no code for yet (the message
/// says what it is).
pub const HUGESHM_ERROR_OTHER: c_int = 98;
/// A bug: the library panicked. The message says where; nothing unwound
/// into the caller.
pub const HUGESHM_ERROR_INTERNAL: c_int = 99;

/// What an error is: a code, a message, the fix an administrator can apply
/// (when there is one), the errno (when a system call failed) and the pool
/// numbers of a shortfall. Create/attach/destroy/remove functions allocate
/// one; free it with `hugeshm_error_free`.
#[derive(Debug)]
pub struct hugeshm_error {
    code: c_int,
    message: CString,
    fix: Option<CString>,
    errno: c_int,
    shortfall: Option<hugeshm_shortfall>,
}

/// The numbers of a huge page pool too small for a region
/// (`HUGESHM_ERROR_POOL_SHORTFALL`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct hugeshm_shortfall {
    /// The page size in bytes.
    pub page_size_bytes: u64,
    /// Pages the region needs.
    pub required: u64,
    /// Pages available: free - reserved.
    pub available: u64,
    /// `free_hugepages` of the pool.
    pub free: u64,
    /// `resv_hugepages` of the pool (promised to mappings, not yet used).
    pub reserved: u64,
    /// `nr_hugepages` of the pool.
    pub nr_hugepages: u64,
    /// The NUMA node of a per-node pool, -1 for the host-wide pool.
    pub node: i32,
}

/// Text as a C string; interior NUL bytes (which C cannot see) become `?`.
pub(crate) fn c_string(text: impl Into<String>) -> CString {
    let text = text.into().replace('\0', "?");
    CString::new(text).unwrap_or_default()
}

impl hugeshm_error {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Self {
        hugeshm_error {
            code,
            message: c_string(message),
            fix: None,
            errno: 0,
            shortfall: None,
        }
    }

    pub(crate) fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(HUGESHM_ERROR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn null_argument(arg: &str) -> Self {
        Self::invalid_argument(format!("argument `{arg}` is NULL"))
    }

    pub(crate) fn panic(function: &str, payload: &(dyn Any + Send)) -> Self {
        Self::new(
            HUGESHM_ERROR_INTERNAL,
            format!(
                "internal error (panic) in {function}: {}; this is a bug in hugeshm",
                ffi::panic_text(payload)
            ),
        )
    }

    /// Prefixes argument errors with the function, so that "argument
    /// `name` is NULL" says where.
    pub(crate) fn in_function(mut self, function: &str) -> Self {
        if self.code == HUGESHM_ERROR_INVALID_ARGUMENT {
            let text = self.message.to_string_lossy();
            if text.starts_with("argument `") {
                self.message = c_string(format!("{function}: {text}"));
            }
        }
        self
    }

    /// The code.
    pub fn code(&self) -> c_int {
        self.code
    }

    /// The message.
    pub fn message(&self) -> String {
        self.message.to_string_lossy().into_owned()
    }
}

impl From<RegionError> for hugeshm_error {
    fn from(e: RegionError) -> Self {
        let errno = e.errno().unwrap_or(0);
        let mut message = e.to_string();
        // Causes the message does not show already (e.g. the refused call
        // behind a permission error).
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            let text = s.to_string();
            if !message.contains(&text) {
                message.push_str(&format!(" (caused by: {text})"));
            }
            source = s.source();
        }
        // The fix in the C API's own words (hugeshm_options_set_reclaim,
        // hugeshm_remove, ...).
        let fix = e.fix().map(|f| f.render(Renderer::C));
        if let Some(f) = &fix {
            message.push_str(&format!("; to fix: {f}"));
        }
        hugeshm_error {
            code: code_of(&e, errno),
            message: c_string(message),
            fix: fix.map(c_string),
            errno,
            shortfall: e.shortfall().map(c_shortfall),
        }
    }
}

fn c_shortfall(s: &Shortfall) -> hugeshm_shortfall {
    hugeshm_shortfall {
        page_size_bytes: s.page_size_bytes,
        required: s.required,
        available: s.available,
        free: s.free,
        reserved: s.reserved,
        nr_hugepages: s.nr_hugepages,
        node: s.node.map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX)),
    }
}

/// The code of a region error.
fn code_of(e: &RegionError, errno: c_int) -> c_int {
    match e {
        RegionError::InvalidName { .. } | RegionError::InvalidSize { .. } => {
            HUGESHM_ERROR_INVALID_ARGUMENT
        }
        RegionError::UnsupportedPageSize { .. } => HUGESHM_ERROR_UNSUPPORTED_PAGE_SIZE,
        RegionError::PoolShortfall { .. } => HUGESHM_ERROR_POOL_SHORTFALL,
        RegionError::NoHugetlbfsMount { .. } => HUGESHM_ERROR_NO_HUGETLBFS_MOUNT,
        RegionError::UnsuitableDirectory { .. } => HUGESHM_ERROR_UNSUITABLE_DIRECTORY,
        RegionError::ThpUnavailable { .. } => HUGESHM_ERROR_THP_UNAVAILABLE,
        RegionError::NoSpace { .. } => HUGESHM_ERROR_NO_SPACE,
        RegionError::Permission { .. } => HUGESHM_ERROR_PERMISSION,
        RegionError::MemlockLimit { .. } => HUGESHM_ERROR_MEMLOCK_LIMIT,
        RegionError::Prefault { .. } => HUGESHM_ERROR_PREFAULT,
        RegionError::Verification { .. } => HUGESHM_ERROR_VERIFICATION,
        RegionError::AlreadyExists { .. } => HUGESHM_ERROR_EXISTS,
        RegionError::NotFound { .. } => HUGESHM_ERROR_NOT_FOUND,
        RegionError::InUse { .. } => HUGESHM_ERROR_IN_USE,
        RegionError::Unsupported(_) => HUGESHM_ERROR_UNSUPPORTED,
        RegionError::Orphaned { .. } => HUGESHM_ERROR_ORPHANED,
        RegionError::Incomplete { .. } => HUGESHM_ERROR_INCOMPLETE,
        RegionError::Stale { .. } => HUGESHM_ERROR_STALE,
        RegionError::NotOurs { .. } => HUGESHM_ERROR_NOT_OURS,
        RegionError::NewerLayout { .. } => HUGESHM_ERROR_NEWER_LAYOUT,
        RegionError::HeaderMismatch { .. } => HUGESHM_ERROR_HEADER_MISMATCH,
        RegionError::Sys(_) | RegionError::Io { .. } | RegionError::Read(_) => match errno {
            libc::EACCES | libc::EPERM => HUGESHM_ERROR_PERMISSION,
            libc::ENOENT => HUGESHM_ERROR_NOT_FOUND,
            _ => HUGESHM_ERROR_SYSTEM,
        },
        _ => HUGESHM_ERROR_OTHER,
    }
}

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
        HUGESHM_ERROR_OTHER => c"other",
        HUGESHM_ERROR_INTERNAL => c"internal",
        _ => c"unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn nul_bytes_do_not_truncate_or_fail() {
        let e = hugeshm_error::new(HUGESHM_ERROR_OTHER, "a\0b");
        assert_eq!(e.message(), "a?b");
    }

    #[test]
    fn every_code_has_a_name() {
        for code in 0..=22 {
            assert_ne!(code_name(code), c"unknown", "{code}");
        }
        assert_eq!(code_name(HUGESHM_ERROR_INTERNAL), c"internal");
        assert_eq!(code_name(1234), c"unknown");
    }
}
