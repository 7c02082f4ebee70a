//! `hugeshm_region`: create, attach, accessors, detach, destroy, remove.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use ::hugeshm_region::{remove, AllocationReport, Locator, Region, RegionError};

use crate::error::{c_string, hugeshm_error, HUGESHM_ERROR_INVALID_ARGUMENT};
use crate::ffi::{arg_ref, arg_str, guard, into_handle, no_panic, take_box, write_out};
use crate::options::hugeshm_options;
use crate::report::{hugeshm_page_size_check, hugeshm_report, hugeshm_verification};
use crate::types::{backend_from_c, backend_to_c, hugeshm_backend};

/// A mapped region: made by `hugeshm_create` or `hugeshm_attach*`, ended
/// by `hugeshm_detach` (unmap; a named region stays for other processes)
/// or `hugeshm_destroy` (remove the named object too).
///
/// The accessors may be called from several threads at once; detach and
/// destroy must not race with other calls on the same handle. The memory
/// itself may be written by other processes at any time.
#[derive(Debug)]
pub struct hugeshm_region {
    region: Region,
    report: hugeshm_report,
    reason: Option<CString>,
    warnings: Vec<CString>,
    name: Option<CString>,
    path: Option<CString>,
    /// The placement of a created region ("bind=1", "default", ...).
    placement: Option<CString>,
    /// Bytes per NUMA node after the pre-fault (created regions).
    node_bytes: Vec<(u32, u64)>,
}

impl hugeshm_region {
    fn new(region: Region, report: hugeshm_report) -> Self {
        hugeshm_region {
            report,
            reason: None,
            warnings: Vec::new(),
            name: region.name().map(c_string),
            path: region.path().map(|p| c_string(p.display().to_string())),
            placement: None,
            node_bytes: Vec::new(),
            region,
        }
    }

    fn created(region: Region, r: &AllocationReport) -> Self {
        let report = hugeshm_report::created(&region, r);
        hugeshm_region {
            reason: r.reason().map(|t| c_string(t.to_owned())),
            warnings: r.warnings.iter().cloned().map(c_string).collect(),
            placement: Some(c_string(r.placement.to_string())),
            node_bytes: r
                .node_bytes
                .iter()
                .filter_map(|(n, b)| Some((n.parse().ok()?, *b)))
                .collect(),
            ..hugeshm_region::new(region, report)
        }
    }

    fn attached(region: Region) -> Result<Self, hugeshm_error> {
        let v = region.verify()?;
        let report = hugeshm_report::attached_region(&region, &v);
        Ok(hugeshm_region::new(region, report))
    }
}

/// Sets `*out` to NULL (when `out` is not NULL), runs `make`, and stores the
/// new handle in `*out`.
///
/// # Safety
///
/// `out` is NULL or writable for one pointer; `err` as for [`guard`].
unsafe fn make_region(
    function: &'static str,
    out: *mut *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
    make: impl FnOnce() -> Result<hugeshm_region, hugeshm_error>,
) -> c_int {
    let body = || {
        // SAFETY: `out` is NULL or writable for one pointer (contract).
        unsafe { write_out(out, ptr::null_mut(), "out") }?;
        let handle = into_handle(make()?);
        // SAFETY: as above; `out` is not NULL (checked by the first write).
        unsafe { write_out(out, handle, "out") }
    };
    // SAFETY: `err` is NULL or writable (contract).
    unsafe { guard(function, err, body) }
}

/// Creates, pre-faults, verifies (and, if asked, mlocks) a region as the
/// options say, and stores its handle in `*out`.
///
/// Returns `HUGESHM_OK`, or an error code with `*out` set to NULL and,
/// when `err` is not NULL, `*err` set to an error object to free with
/// `hugeshm_error_free` (on success `*err` is set to NULL). On error
/// nothing is left behind: no segment, file, mapping or reservation.
///
/// A named region (sysv, hugetlbfs, posix) outlives this process until
/// `hugeshm_destroy` or `hugeshm_remove`. If the name is taken: by a region
/// a live process holds, `HUGESHM_ERROR_EXISTS` (the message names the
/// pids); by one nobody holds (its creator crashed or exited without
/// removing it), `HUGESHM_ERROR_ORPHANED` unless the options ask to reuse
/// or recreate it (`hugeshm_options_set_reclaim`).
///
/// # Safety
///
/// `options` is NULL or live options; `out` is NULL or writable for one
/// pointer; `err` is NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_create(
    options: *const hugeshm_options,
    out: *mut *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `options` is NULL or live (contract).
        let options = unsafe { arg_ref(options, "options") }?;
        let (region, report) = options.builder().create()?;
        Ok(hugeshm_region::created(region, &report))
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { make_region("hugeshm_create", out, err, body) }
}

/// Attaches an existing named region read-write, from any process:
/// `HUGESHM_BACKEND_SYSV` by the key of the name, `_HUGETLBFS` and
/// `_POSIX` by the file "hugeshm.NAME" (hugetlbfs mounts, /dev/shm),
/// `_MEMFD` through its record while some process holds it (`_ANON`
/// regions are shared with fork()ed children only:
/// `HUGESHM_ERROR_UNSUPPORTED`).
///
/// The region's header is checked (magic, layout version, finished
/// creation, name, backend, size, page size): a foreign object is
/// `HUGESHM_ERROR_NOT_OURS`, a newer layout `HUGESHM_ERROR_NEWER_LAYOUT`, a
/// creation still running or crashed `HUGESHM_ERROR_INCOMPLETE`. A missing
/// region is `HUGESHM_ERROR_NOT_FOUND`. The report (`hugeshm_region_report`)
/// has the header's creator and creation time and the processes holding
/// the region. Errors as for `hugeshm_create`.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `out` and `err` are NULL or
/// writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_attach(
    name: *const c_char,
    backend: hugeshm_backend,
    out: *mut *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `name` is NULL or a NUL-terminated string (contract).
        let name = unsafe { arg_str(name, "name") }?;
        let backend = backend_from_c(backend)?;
        let (region, report) = Locator::new(name, backend).attach_with_report()?;
        let report = hugeshm_report::attached(&report);
        Ok(hugeshm_region::new(region, report))
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { make_region("hugeshm_attach", out, err, body) }
}

/// Attaches a region file by path: a hugetlbfs or tmpfs file, or a memfd
/// through /proc/PID/fd/N of a process that holds it (what
/// `hugeshm_region_path` returns in that process). Errors as for
/// `hugeshm_create`.
///
/// # Safety
///
/// `path` is NULL or a NUL-terminated string; `out` and `err` are NULL or
/// writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_attach_path(
    path: *const c_char,
    out: *mut *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `path` is NULL or a NUL-terminated string (contract).
        let path = unsafe { arg_str(path, "path") }?;
        hugeshm_region::attached(Region::attach_path(path)?)
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { make_region("hugeshm_attach_path", out, err, body) }
}

/// Attaches a SysV segment by shmid. Errors as for `hugeshm_create`.
///
/// # Safety
///
/// `out` and `err` are NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_attach_shmid(
    shmid: c_int,
    out: *mut *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        if shmid < 0 {
            return Err(hugeshm_error::invalid_argument(format!(
                "negative shmid {shmid}"
            )));
        }
        hugeshm_region::attached(Region::attach_shmid(shmid)?)
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { make_region("hugeshm_attach_shmid", out, err, body) }
}

/// Runs an accessor on a region handle, `fallback` for NULL (or a panic).
///
/// # Safety
///
/// `region` is NULL or a live handle.
unsafe fn with_region<T: Copy>(
    region: *const hugeshm_region,
    fallback: T,
    f: impl FnOnce(&hugeshm_region) -> T,
) -> T {
    no_panic(fallback, || {
        // SAFETY: `region` is NULL or a live handle (contract).
        match unsafe { arg_ref(region, "region") } {
            Ok(r) => f(r),
            Err(_) => fallback,
        }
    })
}

/// Start address of the whole mapping, which begins with the region's
/// header (`hugeshm_region_data_offset` bytes that hugeshm owns: do not
/// write them; use `hugeshm_region_data_ptr`). Valid until the region is
/// detached or destroyed; NULL when `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_ptr(region: *const hugeshm_region) -> *mut c_void {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, ptr::null_mut(), |r| r.region.as_ptr().cast()) }
}

/// Mapped length in bytes, header included (a multiple of the page size);
/// 0 when `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_len(region: *const hugeshm_region) -> usize {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| r.region.len()) }
}

/// Start of the data: `hugeshm_region_ptr + hugeshm_region_data_offset`,
/// `hugeshm_region_data_len` bytes. Valid until the region is detached or
/// destroyed; NULL when `region` is NULL. Other processes may write the
/// memory at any time: synchronize with them as with threads.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_data_ptr(region: *const hugeshm_region) -> *mut c_void {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, ptr::null_mut(), |r| r.region.data_ptr().cast()) }
}

/// Data bytes: `hugeshm_region_len - hugeshm_region_data_offset`; 0 when
/// `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_data_len(region: *const hugeshm_region) -> usize {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| r.region.data_len()) }
}

/// Where the data start in the mapping: the size of the header (4096);
/// 0 when `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_data_offset(region: *const hugeshm_region) -> usize {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| r.region.data_offset()) }
}

/// The page size in bytes the region was created with (attached: the one
/// /proc/self/smaps showed); 0 when `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_page_size(region: *const hugeshm_region) -> u64 {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| r.region.page_size()) }
}

/// The backend (`HUGESHM_BACKEND_*`); 0 when `region` is NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_backend(region: *const hugeshm_region) -> hugeshm_backend {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| backend_to_c(r.region.backend())) }
}

/// The region's name, NULL for anonymous regions (and NULL `region`).
/// Valid while the region lives.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_name(region: *const hugeshm_region) -> *const c_char {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, ptr::null(), |r| {
            r.name.as_ref().map_or(ptr::null(), |s| s.as_ptr())
        })
    }
}

/// The path another process can open with `hugeshm_attach_path`: the file
/// of a hugetlbfs or posix region, /proc/PID/fd/N of a memfd; NULL for
/// SysV and anon regions. Valid while the region lives.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_path(region: *const hugeshm_region) -> *const c_char {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, ptr::null(), |r| {
            r.path.as_ref().map_or(ptr::null(), |s| s.as_ptr())
        })
    }
}

/// The SysV shmid, -1 for other backends (and NULL `region`).
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_shmid(region: *const hugeshm_region) -> c_int {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, -1, |r| r.region.shmid().unwrap_or(-1)) }
}

/// Fills `*out` with the region's report (see `hugeshm_report`). Returns
/// `HUGESHM_OK`, or `HUGESHM_ERROR_INVALID_ARGUMENT` when an argument is
/// NULL.
///
/// # Safety
///
/// `region` is NULL or a live handle; `out` is NULL or writable for one
/// `hugeshm_report`.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_report(
    region: *const hugeshm_region,
    out: *mut hugeshm_report,
) -> c_int {
    let fill = |r: &hugeshm_region| {
        // SAFETY: `out` is NULL or writable (contract).
        match unsafe { write_out(out, r.report, "out") } {
            Ok(()) => crate::error::HUGESHM_OK,
            Err(e) => e.code(),
        }
    };
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, HUGESHM_ERROR_INVALID_ARGUMENT, fill) }
}

/// Why the region is not on the pages asked for (policy try), e.g. "2 MiB
/// pages: required 5, available 4 (...); to fix: ..."; NULL when it is (and
/// for attached regions). Valid while the region lives.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_reason(region: *const hugeshm_region) -> *const c_char {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, ptr::null(), |r| {
            r.reason.as_ref().map_or(ptr::null(), |s| s.as_ptr())
        })
    }
}

/// The NUMA placement the region was created with ("bind=1",
/// "interleave", "default" for the caller's own policy, ...); NULL for
/// attached regions. Valid while the region lives.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_placement(region: *const hugeshm_region) -> *const c_char {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, ptr::null(), |r| {
            r.placement.as_ref().map_or(ptr::null(), |s| s.as_ptr())
        })
    }
}

/// Bytes of the region on NUMA node `node` after the pre-fault of
/// `hugeshm_create` (from /proc/self/numa_maps); 0 for other nodes and for
/// attached regions.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_node_bytes(
    region: *const hugeshm_region,
    node: u32,
) -> u64 {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, 0, |r| {
            r.node_bytes
                .iter()
                .find(|(n, _)| *n == node)
                .map_or(0, |(_, b)| *b)
        })
    }
}

/// How many warnings the creation had (things worth knowing that did not
/// change the outcome).
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_warning_count(region: *const hugeshm_region) -> usize {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe { with_region(region, 0, |r| r.warnings.len()) }
}

/// Warning `index` (from 0), NULL when out of range. Valid while the
/// region lives.
///
/// # Safety
///
/// `region` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_warning(
    region: *const hugeshm_region,
    index: usize,
) -> *const c_char {
    // SAFETY: `region` is NULL or a live handle (contract).
    unsafe {
        with_region(region, ptr::null(), |r| {
            r.warnings.get(index).map_or(ptr::null(), |s| s.as_ptr())
        })
    }
}

/// Makes data bytes `offset..offset + len` durable (offsets as for
/// `hugeshm_region_data_ptr`): for a `HUGESHM_BACKEND_DAX` region mapped
/// MAP_SYNC by writing the CPU cache lines back (CLWB, CLFLUSHOPT or
/// CLFLUSH, whichever the CPU has) and a store fence; otherwise with
/// msync(MS_SYNC). A range beyond the data is
/// `HUGESHM_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `region` is NULL or a live handle; `err` is NULL or writable for one
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_persist(
    region: *const hugeshm_region,
    offset: usize,
    len: usize,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `region` is NULL or a live handle (contract).
        let r = unsafe { arg_ref(region, "region") }?;
        r.region.persist(offset, len)?;
        Ok(())
    };
    // SAFETY: `err` is NULL or writable (contract).
    unsafe { guard("hugeshm_region_persist", err, body) }
}

/// Reads /proc/self/smaps for the region now (page size, resident bytes in
/// this process) into `*out`. Errors as for `hugeshm_create`.
///
/// # Safety
///
/// `region` is NULL or a live handle; `out` is NULL or writable for one
/// `hugeshm_verification`; `err` is NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_verify(
    region: *const hugeshm_region,
    out: *mut hugeshm_verification,
    err: *mut *mut hugeshm_error,
) -> c_int {
    // SAFETY: the contract above is `read_into`'s.
    unsafe {
        read_into("hugeshm_region_verify", region, out, err, |r| {
            Ok(hugeshm_verification::from(&r.verify()?))
        })
    }
}

/// The body of a call that reads something about the region into `*out`:
/// the handle checked, `out` refused when NULL before anything is read,
/// `read`'s value written, errors and panics turned into codes.
///
/// # Safety
///
/// `region` is NULL or a live handle; `out` is NULL or writable for one
/// `T`; `err` is NULL or writable for one pointer.
unsafe fn read_into<T>(
    function: &'static str,
    region: *const hugeshm_region,
    out: *mut T,
    err: *mut *mut hugeshm_error,
    read: impl FnOnce(&Region) -> Result<T, RegionError>,
) -> c_int {
    let body = || {
        // SAFETY: `region` is NULL or a live handle (contract).
        let r = unsafe { arg_ref(region, "region") }?;
        if out.is_null() {
            return Err(hugeshm_error::null_argument("out"));
        }
        let value = read(&r.region)?;
        // SAFETY: `out` is writable (contract) and not NULL.
        unsafe { write_out(out, value, "out") }
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { guard(function, err, body) }
}

/// The page size the kernel backs the region with, the cheap way, into
/// `*out`: for a hugetlb region from PROCMAP_QUERY (Linux 6.11+), which does
/// not walk the page tables and so costs the same at any size; otherwise
/// (base pages, transparent huge pages, DAX, older kernels) from
/// /proc/self/smaps, as `hugeshm_region_verify`. Residency is not checked.
/// Errors as for `hugeshm_create`.
///
/// # Safety
///
/// `region` is NULL or a live handle; `out` is NULL or writable for one
/// `hugeshm_page_size_check`; `err` is NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_region_verify_page_size(
    region: *const hugeshm_region,
    out: *mut hugeshm_page_size_check,
    err: *mut *mut hugeshm_error,
) -> c_int {
    // SAFETY: the contract above is `read_into`'s.
    unsafe {
        read_into("hugeshm_region_verify_page_size", region, out, err, |r| {
            Ok(hugeshm_page_size_check::from(&r.verify_page_size()?))
        })
    }
}

/// Takes a handle back and ends its region with `end` (close or destroy);
/// the handle is freed also on error.
///
/// # Safety
///
/// `region` is NULL or a live handle given back once; `err` is NULL or
/// writable for one pointer.
unsafe fn end_region(
    what: &'static str,
    region: *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
    end: fn(Region) -> Result<(), RegionError>,
) -> c_int {
    let body = || {
        // SAFETY: `region` is NULL or a live handle given back once
        // (contract).
        let r =
            unsafe { take_box(region) }.ok_or_else(|| hugeshm_error::null_argument("region"))?;
        Ok(end(r.region)?)
    };
    // SAFETY: `err` is NULL or writable (contract).
    unsafe { guard(what, err, body) }
}

/// Unmaps the region and frees the handle (also on error). A named region
/// stays for other processes; a memfd or anon region vanishes when its last
/// mapping goes. Returns `HUGESHM_OK`, or an error code (a failed munmap;
/// `HUGESHM_ERROR_INVALID_ARGUMENT` for NULL).
///
/// # Safety
///
/// `region` is NULL or a live handle, not used afterwards (nor the pointer
/// and strings its accessors returned); `err` is NULL or writable for one
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_detach(
    region: *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    // SAFETY: forwarded contract of `hugeshm_detach`.
    unsafe { end_region("hugeshm_detach", region, err, Region::close) }
}

/// Removes the named object (SysV IPC_RMID, unlinks the file), unmaps and
/// frees the handle (also on error). Processes that have it attached keep
/// their mapping; the memory is freed when the last one detaches. An
/// object someone else removed already is not an error.
///
/// # Safety
///
/// As for `hugeshm_detach`.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_destroy(
    region: *mut hugeshm_region,
    err: *mut *mut hugeshm_error,
) -> c_int {
    // SAFETY: forwarded contract of `hugeshm_destroy`.
    unsafe { end_region("hugeshm_destroy", region, err, Region::destroy) }
}

/// Removes the named region NAME of `backend` without attaching it,
/// refusing while any process has it attached (`HUGESHM_ERROR_IN_USE`,
/// the message names the pids). A missing region is
/// `HUGESHM_ERROR_NOT_FOUND`.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `err` is NULL or writable for
/// one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_remove(
    name: *const c_char,
    backend: hugeshm_backend,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `name` is NULL or a NUL-terminated string (contract).
        let name = unsafe { arg_str(name, "name") }?;
        remove(name, backend_from_c(backend)?)?;
        Ok(())
    };
    // SAFETY: `out` (if any) and `err` are NULL or writable (contract).
    unsafe { guard("hugeshm_remove", err, body) }
}

/// As `hugeshm_remove`, looking only in `directory`: the directory a file
/// region was created in with `hugeshm_options_set_directory` (a
/// subdirectory of a tmpfs, hugetlbfs or DAX mount), or a device-dax.
/// NULL `directory` is `hugeshm_remove`.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `directory` is NULL or a
/// NUL-terminated string; `err` is NULL or writable for one pointer.
#[no_mangle]
pub unsafe extern "C" fn hugeshm_remove_in(
    name: *const c_char,
    backend: hugeshm_backend,
    directory: *const c_char,
    err: *mut *mut hugeshm_error,
) -> c_int {
    let body = || {
        // SAFETY: `name` is NULL or a NUL-terminated string (contract).
        let name = unsafe { arg_str(name, "name") }?;
        let mut locator = Locator::new(name, backend_from_c(backend)?);
        if !directory.is_null() {
            // SAFETY: `directory` is a NUL-terminated string (contract).
            locator = locator.directory(unsafe { arg_str(directory, "directory") }?);
        }
        locator.remove()?;
        Ok(())
    };
    // SAFETY: `err` is NULL or writable (contract).
    unsafe { guard("hugeshm_remove_in", err, body) }
}

/// The library version, e.g. "0.1.0". A static string.
#[no_mangle]
pub extern "C" fn hugeshm_version() -> *const c_char {
    no_panic(ptr::null(), || VERSION.as_ptr())
}

/// The version as a C string.
const VERSION: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
) {
    Ok(v) => v,
    Err(_) => c"unknown",
};
