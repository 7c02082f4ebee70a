//! The error object handed to C and its codes (the accessors C calls are
//! in `error_api`).

use std::any::Any;
use std::ffi::{c_int, CString};

use hugeshm_region::{RegionError, Renderer, Shortfall};

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
/// The region belongs to another user, or group/others may write it
/// beyond the mode asked for: hugeshm never uses or removes it.
pub const HUGESHM_ERROR_UNTRUSTED: c_int = 23;
/// A system-wide kernel limit is reached (`kernel.shmmni`,
/// `kernel.shmall`); the fix names the setting.
pub const HUGESHM_ERROR_KERNEL_LIMIT: c_int = 24;
/// The pool had the pages but the kernel refused to fault them in (a
/// hugetlb cgroup limit): the message has the numbers, the fix the limit.
pub const HUGESHM_ERROR_FAULT_REFUSED: c_int = 25;
/// The hugetlb cgroup of this process allows fewer pages than the region
/// needs (found before anything was created): the fix names the file.
pub const HUGESHM_ERROR_CGROUP_LIMIT: c_int = 26;
/// A region on base pages to pre-fault is larger than the available
/// memory (`MemAvailable`), found before anything was created: the
/// message has the numbers.
pub const HUGESHM_ERROR_NOT_ENOUGH_MEMORY: c_int = 27;
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
    pub(crate) code: c_int,
    pub(crate) message: CString,
    pub(crate) fix: Option<CString>,
    pub(crate) errno: c_int,
    pub(crate) shortfall: Option<hugeshm_shortfall>,
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
                panic_text(payload)
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
        RegionError::PoolShortfall { .. } | RegionError::NodeShortfall { .. } => {
            HUGESHM_ERROR_POOL_SHORTFALL
        }
        RegionError::NoHugetlbfsMount { .. } => HUGESHM_ERROR_NO_HUGETLBFS_MOUNT,
        RegionError::UnsuitableDirectory { .. } => HUGESHM_ERROR_UNSUITABLE_DIRECTORY,
        RegionError::ThpUnavailable { .. } => HUGESHM_ERROR_THP_UNAVAILABLE,
        RegionError::NoSpace { .. } => HUGESHM_ERROR_NO_SPACE,
        RegionError::Permission { .. } => HUGESHM_ERROR_PERMISSION,
        RegionError::MemlockLimit { .. } => HUGESHM_ERROR_MEMLOCK_LIMIT,
        RegionError::Prefault { .. } => HUGESHM_ERROR_PREFAULT,
        RegionError::Verification { .. }
        | RegionError::Misplaced { .. }
        | RegionError::DaxSmallFaults { .. } => HUGESHM_ERROR_VERIFICATION,
        RegionError::AlreadyExists { .. } => HUGESHM_ERROR_EXISTS,
        RegionError::NotFound { .. } | RegionError::NotFoundAnywhere { .. } => {
            HUGESHM_ERROR_NOT_FOUND
        }
        RegionError::InUse { .. } => HUGESHM_ERROR_IN_USE,
        RegionError::Unsupported(_) => HUGESHM_ERROR_UNSUPPORTED,
        RegionError::Orphaned { .. } => HUGESHM_ERROR_ORPHANED,
        RegionError::Incomplete { .. } => HUGESHM_ERROR_INCOMPLETE,
        RegionError::Stale { .. } => HUGESHM_ERROR_STALE,
        RegionError::NotOurs { .. } => HUGESHM_ERROR_NOT_OURS,
        RegionError::NewerLayout { .. } => HUGESHM_ERROR_NEWER_LAYOUT,
        RegionError::HeaderMismatch { .. } => HUGESHM_ERROR_HEADER_MISMATCH,
        RegionError::Untrusted { .. } => HUGESHM_ERROR_UNTRUSTED,
        RegionError::KernelLimit { .. } => HUGESHM_ERROR_KERNEL_LIMIT,
        RegionError::FaultRefused { .. } => HUGESHM_ERROR_FAULT_REFUSED,
        RegionError::CgroupLimit { .. } => HUGESHM_ERROR_CGROUP_LIMIT,
        RegionError::NotEnoughMemory { .. } => HUGESHM_ERROR_NOT_ENOUGH_MEMORY,
        RegionError::Sys(_) | RegionError::Io { .. } | RegionError::Read(_) => match errno {
            libc::EACCES | libc::EPERM => HUGESHM_ERROR_PERMISSION,
            libc::ENOENT => HUGESHM_ERROR_NOT_FOUND,
            _ => HUGESHM_ERROR_SYSTEM,
        },
        _ => HUGESHM_ERROR_OTHER,
    }
}

/// The text of a panic payload.
pub(crate) fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}
