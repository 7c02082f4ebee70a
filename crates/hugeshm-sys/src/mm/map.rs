//! Making mappings: anonymous memory and files, at an address the kernel
//! chooses or an aligned one.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::mm::{MapFlags, ProtFlags};

use super::mapping::{Mapping, Release};
use super::place::placed;
use super::sigbus;
use crate::fs::hugetlbfs_page_size;
use crate::page::{base_page_size, format_size, huge_page_log2, huge_usize, round_up};
use crate::SysError;

fn describe_map_flags(shared: bool, anon: bool, huge: Option<u64>) -> String {
    let mut s = String::from(if shared { "MAP_SHARED" } else { "MAP_PRIVATE" });
    if anon {
        s.push_str("|MAP_ANONYMOUS");
    }
    if let Some(h) = huge {
        s.push_str("|MAP_HUGETLB|");
        s.push_str(&format_size(h));
    }
    s
}

/// Maps `len` bytes of anonymous memory, read-write.
///
/// `shared` selects `MAP_SHARED` (visible to children after fork, counted as
/// shmem) versus `MAP_PRIVATE`. With `huge_page_size = Some(size)` the mapping
/// is `MAP_HUGETLB` with the size encoded in the `MAP_HUGE_SHIFT` bits and
/// `len` is rounded up to a multiple of `size`; otherwise it is rounded up to
/// the base page size. Huge pages are reserved from the pool at this call, so
/// an exhausted pool fails here with `ENOMEM`.
pub fn mmap_anon(
    len: usize,
    shared: bool,
    huge_page_size: Option<u64>,
) -> Result<Mapping, SysError> {
    mmap_anon_placed(len, shared, huge_page_size, None)
}

/// [`mmap_anon`] at an address that is a multiple of `align` (e.g.
/// [`PMD_SHARE_ALIGN`](crate::PMD_SHARE_ALIGN)); `None` lets the kernel choose.
pub fn mmap_anon_placed(
    len: usize,
    shared: bool,
    huge_page_size: Option<u64>,
    align: Option<usize>,
) -> Result<Mapping, SysError> {
    mmap_anon_inner(len, shared, huge_page_size, align, false)
}

/// [`mmap_anon`] with `MAP_POPULATE`: the kernel faults every page in
/// before the call returns, on the calling thread (how DPDK and Seastar
/// pre-fault their memory). A page it cannot supply makes the call fail
/// for hugetlb (the pool is reserved first) and may be left unfaulted for
/// base pages; the benches use it as the peers' method to compare with.
pub fn mmap_anon_populate(
    len: usize,
    shared: bool,
    huge_page_size: Option<u64>,
) -> Result<Mapping, SysError> {
    mmap_anon_inner(len, shared, huge_page_size, None, true)
}

fn mmap_anon_inner(
    len: usize,
    shared: bool,
    huge_page_size: Option<u64>,
    align: Option<usize>,
    populate: bool,
) -> Result<Mapping, SysError> {
    let call = || {
        format!(
            "mmap(len={len}, {}{}{})",
            describe_map_flags(shared, true, huge_page_size),
            if populate { "|MAP_POPULATE" } else { "" },
            describe_align(align)
        )
    };
    if len == 0 {
        return Err(SysError::invalid(call(), "length is zero"));
    }
    let mut flags = if shared {
        MapFlags::SHARED
    } else {
        MapFlags::PRIVATE
    };
    let page = match huge_page_size {
        Some(size) => {
            let log2 = huge_page_log2(&call(), size)?;
            let huge = MapFlags::hugetlb_with_size_log2(log2)
                .ok_or_else(|| SysError::invalid(call(), "unsupported huge page size"))?;
            flags |= huge;
            huge_usize(&call(), size)?
        }
        None => base_page_size(),
    };
    if populate {
        flags |= MapFlags::POPULATE;
    }
    let rounded =
        round_up(len, page).ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
    let ptr = placed(&call, rounded, page, align, |at| {
        let (hint, flags) = match at {
            Some(a) => (a as *mut c_void, flags | MapFlags::FIXED),
            None => (std::ptr::null_mut(), flags),
        };
        // SAFETY: either a null hint (the kernel picks a fresh range) or
        // MAP_FIXED inside this call's own PROT_NONE reservation (see
        // `placed`), so no memory anything else uses is replaced; the
        // result is owned by the returned Mapping.
        unsafe {
            rustix::mm::mmap_anonymous(hint, rounded, ProtFlags::READ | ProtFlags::WRITE, flags)
        }
        .map_err(|e| SysError::os(call(), e))
    })?;
    Ok(Mapping {
        ptr,
        len: rounded,
        page_size: page,
        release: Release::Munmap,
        sync: false,
        guard: sigbus::Guard::none(),
    })
}

fn describe_align(align: Option<usize>) -> String {
    match align {
        Some(a) => format!(", at a multiple of {}", format_size(a as u64)),
        None => String::new(),
    }
}

/// Maps `len` bytes of the file `fd` at `offset`, `MAP_SHARED`, read-write.
///
/// `fd` must be open read-write. When the file lives on hugetlbfs (including
/// memfds created with a huge page size) `len` is rounded up to the huge
/// page size, otherwise to the base page size; `offset` must be a multiple
/// of that page size. Touching memory beyond the end of the file raises
/// SIGBUS, so size the file first (see [`set_len`](crate::set_len)).
pub fn mmap_fd(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mapping, SysError> {
    mmap_fd_placed(fd, len, offset, None)
}

/// [`mmap_fd`] at an address that is a multiple of `align` (e.g.
/// [`PMD_SHARE_ALIGN`](crate::PMD_SHARE_ALIGN)); `None`, or an alignment not above the page size,
/// lets the kernel choose.
///
/// The address is found by reserving `len + align` bytes of inaccessible
/// address space, mapping the file over the aligned part with `MAP_FIXED`
/// and releasing the rest.
pub fn mmap_fd_placed(
    fd: BorrowedFd<'_>,
    len: usize,
    offset: u64,
    align: Option<usize>,
) -> Result<Mapping, SysError> {
    map_fd(fd, len, offset, align, false)
}

/// [`mmap_fd_placed`] with `MAP_SHARED_VALIDATE | MAP_SYNC`: for a file on
/// a DAX file system, the file system's metadata for a written page is
/// durable before the write fault returns, so flushing the CPU caches
/// ([`Mapping::persist_range`]) makes the data durable. File systems that
/// cannot do that refuse with `EOPNOTSUPP` (kernels before 4.15: `EINVAL`).
pub fn mmap_fd_sync_placed(
    fd: BorrowedFd<'_>,
    len: usize,
    offset: u64,
    align: Option<usize>,
) -> Result<Mapping, SysError> {
    map_fd(fd, len, offset, align, true)
}

fn map_fd(
    fd: BorrowedFd<'_>,
    len: usize,
    offset: u64,
    align: Option<usize>,
    sync: bool,
) -> Result<Mapping, SysError> {
    let raw = fd.as_raw_fd();
    let call = || {
        format!(
            "mmap(fd={raw}, len={len}, offset={offset}, {}{})",
            if sync {
                "MAP_SHARED_VALIDATE|MAP_SYNC"
            } else {
                "MAP_SHARED"
            },
            describe_align(align)
        )
    };
    let shared = if sync {
        MapFlags::SHARED_VALIDATE | MapFlags::SYNC
    } else {
        MapFlags::SHARED
    };
    if len == 0 {
        return Err(SysError::invalid(call(), "length is zero"));
    }
    let page = hugetlbfs_page_size(fd).unwrap_or_else(base_page_size);
    let rounded =
        round_up(len, page).ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
    let ptr = placed(&call, rounded, page, align, |at| {
        let (hint, flags) = match at {
            Some(a) => (a as *mut c_void, shared | MapFlags::FIXED),
            None => (std::ptr::null_mut(), shared),
        };
        // SAFETY: either a null hint (the kernel picks a fresh range) or
        // MAP_FIXED inside this call's own PROT_NONE reservation (see
        // `placed`); the result is owned by the returned Mapping.
        unsafe {
            rustix::mm::mmap(
                hint,
                rounded,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                fd,
                offset,
            )
        }
        .map_err(|e| SysError::os(call(), e))
    })?;
    let mut mapping = Mapping {
        ptr,
        len: rounded,
        page_size: page,
        release: Release::Munmap,
        sync,
        guard: sigbus::Guard::none(),
    };
    // A file can be truncated under the mapping (sigbus.rs): guarded from
    // now on (a failure unmaps it again).
    mapping.guard = sigbus::register(mapping.addr(), mapping.len)?;
    Ok(mapping)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page_size as page;
    use crate::{memfd_create, set_len};
    use std::os::fd::AsFd;

    #[test]
    fn zero_length_and_bad_huge_size_are_rejected() {
        let err = mmap_anon(0, false, None).unwrap_err();
        assert!(err.errno().is_none());
        assert!(err.to_string().contains("length is zero"), "{err}");
        let err = mmap_anon(4096, true, Some(3000)).unwrap_err();
        assert!(err.to_string().contains("not a power of two"), "{err}");
        let err = mmap_anon(4096, true, Some(4096)).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
        let err = memfd_create("x", Some(12345)).unwrap_err();
        assert!(
            err.to_string().starts_with("memfd_create(name=\"x\""),
            "{err}"
        );
    }

    #[test]
    fn huge_anon_either_maps_or_fails_with_context() {
        // Works without root: succeeds only if free 2 MiB pages exist.
        match mmap_anon(1, false, Some(2 << 20)) {
            Ok(m) => {
                assert_eq!(m.len(), 2 << 20);
                assert_eq!(m.page_size(), 2 << 20);
            }
            Err(err) => {
                let msg = err.to_string();
                assert!(
                    msg.starts_with("mmap(len=1, MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB|2MiB): "),
                    "{msg}"
                );
                assert!(err.errno().is_some());
            }
        }
    }

    #[test]
    fn memfd_plain_shared_between_mappings() {
        let fd = memfd_create("hugeshm-region-test", None).expect("memfd");
        set_len(fd.as_fd(), 2 * page() as u64).unwrap();
        assert!(hugetlbfs_page_size(fd.as_fd()).is_none());
        let mut a = mmap_fd(fd.as_fd(), 2 * page(), 0).unwrap();
        let b = mmap_fd(fd.as_fd(), page(), page() as u64).unwrap();
        a.write_at(page() + 3, b"shared").unwrap();
        let mut buf = [0u8; 6];
        b.read_at(3, &mut buf).unwrap();
        assert_eq!(&buf, b"shared");
        b.release().unwrap();
        drop(a);
    }

    #[test]
    fn mmap_fd_errors_name_the_call() {
        let fd = memfd_create("hugeshm-region-test", None).unwrap();
        let err = mmap_fd(fd.as_fd(), page(), 1).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EINVAL));
        assert!(err.to_string().starts_with("mmap(fd="), "{err}");
    }
}
