//! Backends, policies and pre-fault methods as C integers, and parsers of
//! the words the `hugeshm` command line uses.
//!
//! They are integer typedefs with `#define`d values, not C enums, so that a
//! value C passes in is checked (an unknown one is
//! `HUGESHM_ERROR_INVALID_ARGUMENT`) instead of being undefined behaviour
//! on the Rust side. 0 is never a valid backend or policy, so zeroed memory
//! is caught too.

use std::ffi::{c_char, c_int};
use std::ptr;

use hugeshm_region::{Backend, PageSize, Policy, PrefaultMethod, Reclaim};

use crate::error::{hugeshm_error, HUGESHM_OK};
use crate::ffi::{arg_str, no_panic, write_out};

/// Where a region's memory comes from and how other processes find it
/// (one of `HUGESHM_BACKEND_*`).
pub type hugeshm_backend = u32;

/// System V shared memory (`shmget`, `SHM_HUGETLB`); found by the key
/// derived from the name (FNV-1a of "hugeshm.NAME").
pub const HUGESHM_BACKEND_SYSV: hugeshm_backend = 1;
/// A memfd (`memfd_create`, `MFD_HUGETLB`): attached by name through its
/// record /dev/shm/hugeshm-memfd.NAME while some process holds it (or by
/// /proc/PID/fd/N with `hugeshm_attach_path`); its memory goes with the
/// last holder.
pub const HUGESHM_BACKEND_MEMFD: hugeshm_backend = 2;
/// A file "hugeshm.NAME" on a hugetlbfs mount of the page size.
pub const HUGESHM_BACKEND_HUGETLBFS: hugeshm_backend = 3;
/// A file /dev/shm/hugeshm.NAME (tmpfs; transparent huge pages at most).
pub const HUGESHM_BACKEND_POSIX: hugeshm_backend = 4;
/// Shared anonymous memory, shared with children created by fork() only.
pub const HUGESHM_BACKEND_ANON: hugeshm_backend = 5;
/// A file "hugeshm.NAME" on a DAX file system (persistent memory mounted
/// -o dax; `hugeshm_options_set_directory` picks the mount), allocated
/// whole and mapped MAP_SYNC at a 2 MiB-aligned address: its contents
/// survive the machine once `hugeshm_region_persist` returns.
pub const HUGESHM_BACKEND_DAX: hugeshm_backend = 6;

/// What to do when huge pages cannot be had (one of `HUGESHM_POLICY_*`;
/// PostgreSQL's huge_pages off/try/on).
pub type hugeshm_policy = u32;

/// Never use huge pages.
pub const HUGESHM_POLICY_OFF: hugeshm_policy = 1;
/// The whole region on the huge pages asked for if the pool has them, else
/// the whole region on base pages (never a mix), with the reason in the
/// report (`hugeshm_region_reason`).
pub const HUGESHM_POLICY_TRY: hugeshm_policy = 2;
/// The whole region on the pages asked for, or an error
/// (`HUGESHM_ERROR_POOL_SHORTFALL` with the numbers and the fix).
pub const HUGESHM_POLICY_ONLY: hugeshm_policy = 3;

/// What `hugeshm_create` does when a region of the same name exists and no
/// live process holds it (its creator crashed or exited without removing
/// it); one of `HUGESHM_RECLAIM_*`. A region a live process holds is never
/// touched (`HUGESHM_ERROR_EXISTS`, naming the pids).
pub type hugeshm_reclaim = u32;

/// Refuse with `HUGESHM_ERROR_ORPHANED`, whose fix says how to reclaim
/// (the default: contents are never lost silently).
pub const HUGESHM_RECLAIM_REFUSE: hugeshm_reclaim = 1;
/// Attach to it and keep its contents (only a region whose creation
/// finished, with the size and page size asked for).
pub const HUGESHM_RECLAIM_REUSE: hugeshm_reclaim = 2;
/// Destroy it and create a new one.
pub const HUGESHM_RECLAIM_RECREATE: hugeshm_reclaim = 3;

/// How the pages were faulted in at creation (one of
/// `HUGESHM_PREFAULT_*`).
pub type hugeshm_prefault_method = u32;

/// Not pre-faulted (0 pre-fault threads, or an attached region).
pub const HUGESHM_PREFAULT_NONE: hugeshm_prefault_method = 0;
/// `madvise(MADV_POPULATE_WRITE)`: a page the kernel cannot supply is an
/// error, never SIGBUS.
pub const HUGESHM_PREFAULT_POPULATE_WRITE: hugeshm_prefault_method = 1;
/// One write per page, on kernels without `MADV_POPULATE_WRITE`.
pub const HUGESHM_PREFAULT_TOUCH: hugeshm_prefault_method = 2;

pub(crate) fn backend_from_c(b: hugeshm_backend) -> Result<Backend, hugeshm_error> {
    Ok(match b {
        HUGESHM_BACKEND_SYSV => Backend::Sysv,
        HUGESHM_BACKEND_MEMFD => Backend::Memfd,
        HUGESHM_BACKEND_HUGETLBFS => Backend::Hugetlbfs,
        HUGESHM_BACKEND_POSIX => Backend::Posix,
        HUGESHM_BACKEND_ANON => Backend::Anon,
        HUGESHM_BACKEND_DAX => Backend::Dax,
        other => {
            return Err(hugeshm_error::invalid_argument(format!(
                "unknown backend {other} (expected HUGESHM_BACKEND_SYSV .. HUGESHM_BACKEND_DAX)"
            )))
        }
    })
}

pub(crate) fn backend_to_c(b: Backend) -> hugeshm_backend {
    match b {
        Backend::Sysv => HUGESHM_BACKEND_SYSV,
        Backend::Memfd => HUGESHM_BACKEND_MEMFD,
        Backend::Hugetlbfs => HUGESHM_BACKEND_HUGETLBFS,
        Backend::Posix => HUGESHM_BACKEND_POSIX,
        Backend::Anon => HUGESHM_BACKEND_ANON,
        Backend::Dax => HUGESHM_BACKEND_DAX,
        _ => 0,
    }
}

pub(crate) fn policy_from_c(p: hugeshm_policy) -> Result<Policy, hugeshm_error> {
    Ok(match p {
        HUGESHM_POLICY_OFF => Policy::Off,
        HUGESHM_POLICY_TRY => Policy::Try,
        HUGESHM_POLICY_ONLY => Policy::Only,
        other => {
            return Err(hugeshm_error::invalid_argument(format!(
                "unknown policy {other} (expected HUGESHM_POLICY_OFF, _TRY or _ONLY)"
            )))
        }
    })
}

pub(crate) fn policy_to_c(p: Policy) -> hugeshm_policy {
    match p {
        Policy::Off => HUGESHM_POLICY_OFF,
        Policy::Try => HUGESHM_POLICY_TRY,
        Policy::Only => HUGESHM_POLICY_ONLY,
    }
}

pub(crate) fn reclaim_from_c(r: hugeshm_reclaim) -> Result<Reclaim, hugeshm_error> {
    Ok(match r {
        HUGESHM_RECLAIM_REFUSE => Reclaim::Refuse,
        HUGESHM_RECLAIM_REUSE => Reclaim::Reuse,
        HUGESHM_RECLAIM_RECREATE => Reclaim::Recreate,
        other => {
            return Err(hugeshm_error::invalid_argument(format!(
                "unknown reclaim {other} (expected HUGESHM_RECLAIM_REFUSE, _REUSE or _RECREATE)"
            )))
        }
    })
}

pub(crate) fn reclaim_to_c(r: Reclaim) -> hugeshm_reclaim {
    match r {
        Reclaim::Refuse => HUGESHM_RECLAIM_REFUSE,
        Reclaim::Reuse => HUGESHM_RECLAIM_REUSE,
        Reclaim::Recreate => HUGESHM_RECLAIM_RECREATE,
    }
}

pub(crate) fn method_to_c(m: PrefaultMethod) -> hugeshm_prefault_method {
    match m {
        PrefaultMethod::None => HUGESHM_PREFAULT_NONE,
        PrefaultMethod::PopulateWrite => HUGESHM_PREFAULT_POPULATE_WRITE,
        PrefaultMethod::Touch => HUGESHM_PREFAULT_TOUCH,
    }
}

/// A page size in bytes as the C API takes it: 0 = largest that fits, the
/// base page size = base pages, else a power of two above it.
pub(crate) fn page_size_from_c(bytes: u64) -> Result<PageSize, hugeshm_error> {
    let base = hugeshm_sys::base_page_size() as u64;
    match bytes {
        0 => Ok(PageSize::Largest),
        b if b == base => Ok(PageSize::Base),
        b if b.is_power_of_two() && b > base => Ok(PageSize::Huge(b)),
        b => Err(hugeshm_error::invalid_argument(format!(
            "page size {b}: expected 0 (largest), {base} (base pages) or a power of two above it"
        ))),
    }
}

pub(crate) fn page_size_to_c(p: PageSize) -> u64 {
    match p {
        PageSize::Largest => 0,
        other => other.bytes().unwrap_or(0),
    }
}

/// Parses a backend word ("sysv", "memfd", "hugetlbfs", "posix", "anon";
/// any case) into `*out`. Returns `HUGESHM_OK`, or
/// `HUGESHM_ERROR_INVALID_ARGUMENT` (unknown word, NULL argument).
///
/// # Safety
///
/// `word` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_backend_parse(
    word: *const c_char,
    out: *mut hugeshm_backend,
) -> c_int {
    // SAFETY: this function's contract is `parse_word`'s.
    unsafe { parse_word(word, out, |w| w.parse::<Backend>().map(backend_to_c)) }
}

/// Parses a policy word ("off", "try", "only"; also "on" for only) into
/// `*out`. Returns `HUGESHM_OK` or `HUGESHM_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `word` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_policy_parse(
    word: *const c_char,
    out: *mut hugeshm_policy,
) -> c_int {
    // SAFETY: this function's contract is `parse_word`'s.
    unsafe { parse_word(word, out, |w| w.parse::<Policy>().map(policy_to_c)) }
}

/// Parses a reclaim word ("refuse", "reuse", "recreate") into `*out`.
/// Returns `HUGESHM_OK` or `HUGESHM_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `word` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_reclaim_parse(
    word: *const c_char,
    out: *mut hugeshm_reclaim,
) -> c_int {
    // SAFETY: this function's contract is `parse_word`'s.
    unsafe { parse_word(word, out, |w| w.parse::<Reclaim>().map(reclaim_to_c)) }
}

/// Parses a page size ("4k", "base", "2m", "1g", "2MiB", "2097152",
/// "largest") into bytes as `hugeshm_options_set_page_size` takes them
/// ("largest" is 0). Returns `HUGESHM_OK` or
/// `HUGESHM_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `word` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_page_size_parse(word: *const c_char, out: *mut u64) -> c_int {
    // SAFETY: this function's contract is `parse_word`'s.
    unsafe { parse_word(word, out, |w| w.parse::<PageSize>().map(page_size_to_c)) }
}

/// The word of a backend ("sysv", ...), NULL for values that are not
/// backends. A static string.
#[no_mangle]
pub extern "C" fn hugeshm_backend_name(backend: hugeshm_backend) -> *const c_char {
    no_panic(ptr::null(), || match backend_from_c(backend) {
        Ok(Backend::Sysv) => c"sysv".as_ptr(),
        Ok(Backend::Memfd) => c"memfd".as_ptr(),
        Ok(Backend::Hugetlbfs) => c"hugetlbfs".as_ptr(),
        Ok(Backend::Posix) => c"posix".as_ptr(),
        Ok(Backend::Anon) => c"anon".as_ptr(),
        _ => ptr::null(),
    })
}

/// The word of a policy ("off", "try", "only"), NULL for values that are
/// not policies. A static string.
#[no_mangle]
pub extern "C" fn hugeshm_policy_name(policy: hugeshm_policy) -> *const c_char {
    no_panic(ptr::null(), || match policy_from_c(policy) {
        Ok(Policy::Off) => c"off".as_ptr(),
        Ok(Policy::Try) => c"try".as_ptr(),
        Ok(Policy::Only) => c"only".as_ptr(),
        Err(_) => ptr::null(),
    })
}

/// Parses `word` into `*out`, returning the code.
///
/// # Safety
///
/// `word` is NULL or a NUL-terminated string; `out` is NULL or writable.
unsafe fn parse_word<T>(
    word: *const c_char,
    out: *mut T,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> c_int {
    no_panic(crate::error::HUGESHM_ERROR_INTERNAL, || {
        let run = || -> Result<(), hugeshm_error> {
            // SAFETY: `word` is NULL or a NUL-terminated string (contract).
            let w = unsafe { arg_str(word, "word") }?;
            let v = parse(w).map_err(hugeshm_error::invalid_argument)?;
            // SAFETY: `out` is NULL or writable (contract).
            unsafe { write_out(out, v, "out") }
        };
        match run() {
            Ok(()) => HUGESHM_OK,
            Err(e) => e.code(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HUGESHM_ERROR_INVALID_ARGUMENT;

    #[test]
    fn words_and_values() {
        let mut b: hugeshm_backend = 0;
        // SAFETY: valid string and out-pointer.
        unsafe {
            assert_eq!(hugeshm_backend_parse(c"SysV".as_ptr(), &mut b), HUGESHM_OK);
            assert_eq!(b, HUGESHM_BACKEND_SYSV);
            assert_eq!(
                hugeshm_backend_parse(c"shm".as_ptr(), &mut b),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_backend_parse(ptr::null(), &mut b),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
            assert_eq!(
                hugeshm_backend_parse(c"anon".as_ptr(), ptr::null_mut()),
                HUGESHM_ERROR_INVALID_ARGUMENT
            );
        }
        for v in 1..=6 {
            assert_eq!(backend_to_c(backend_from_c(v).unwrap()), v);
        }
        assert!(backend_from_c(0).is_err() && backend_from_c(7).is_err());
        for v in 1..=3 {
            assert_eq!(policy_to_c(policy_from_c(v).unwrap()), v);
        }
        assert!(policy_from_c(0).is_err());
        for v in 1..=3 {
            assert_eq!(reclaim_to_c(reclaim_from_c(v).unwrap()), v);
        }
        assert!(reclaim_from_c(0).is_err());
        let mut p: u64 = 1;
        // SAFETY: valid strings and out-pointers.
        unsafe {
            assert_eq!(hugeshm_page_size_parse(c"2m".as_ptr(), &mut p), HUGESHM_OK);
            assert_eq!(p, 2 << 20);
            assert_eq!(
                hugeshm_page_size_parse(c"largest".as_ptr(), &mut p),
                HUGESHM_OK
            );
            assert_eq!(p, 0);
            let mut pol = 0;
            assert_eq!(hugeshm_policy_parse(c"on".as_ptr(), &mut pol), HUGESHM_OK);
            assert_eq!(pol, HUGESHM_POLICY_ONLY);
        }
        assert_eq!(page_size_from_c(0).unwrap(), PageSize::Largest);
        assert_eq!(page_size_from_c(4096).unwrap(), PageSize::Base);
        assert_eq!(page_size_from_c(1 << 30).unwrap(), PageSize::HUGE_1G);
        assert!(page_size_from_c(3 << 20).is_err());
        assert!(page_size_from_c(1024).is_err());
        assert!(hugeshm_backend_name(7).is_null());
    }
}
