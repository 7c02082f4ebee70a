//! Making mappings: [`MapOptions`] says what to map (anonymous memory or a
//! file), how (shared, huge pages, faulted in at once, `MAP_SYNC`) and
//! where (an aligned address); [`MapOptions::map_anon`] and
//! [`MapOptions::map`] make the [`Mapping`].

use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use hugeshm_parse::size::format_exact;
use rustix::mm::{MapFlags, ProtFlags};

use super::mapping::{Mapping, Release};
use super::place::placed;
use super::sigbus;
use crate::fs::hugetlbfs_page_size;
use crate::page::{base_page_size, huge_page_log2, huge_usize, round_up};
use crate::SysError;

/// The options of one read-write `mmap`, set by name, in the manner of
/// memmap2's `MmapOptions`: a length, then what applies, then
/// [`map_anon`](MapOptions::map_anon) for anonymous memory or
/// [`map`](MapOptions::map) for a file.
///
/// | option                            | flag or effect                          | for         |
/// |-----------------------------------|-----------------------------------------|-------------|
/// | [`shared`](MapOptions::shared)    | `MAP_SHARED` (else `MAP_PRIVATE`)       | anonymous   |
/// | [`huge`](MapOptions::huge)        | `MAP_HUGETLB` with the page size's bits | anonymous   |
/// | [`populate`](MapOptions::populate)| `MAP_POPULATE`                          | both        |
/// | [`align`](MapOptions::align)      | an address that is a multiple of it     | both        |
/// | [`offset`](MapOptions::offset)    | the file offset                         | file        |
/// | [`sync`](MapOptions::sync)        | `MAP_SHARED_VALIDATE \| MAP_SYNC`       | file        |
///
/// An option that does not apply to the kind of mapping asked for is an
/// [`SysError::InvalidArgument`], before any system call. The length is
/// rounded up to the mapping's page size ([`Mapping::len`] says the
/// result).
///
/// ```
/// use hugeshm_sys::{MapOptions, PMD_SHARE_ALIGN};
/// use std::os::fd::AsFd;
///
/// // 1 MiB of anonymous shared memory, faulted in before the call returns.
/// let m = MapOptions::new(1 << 20).shared().populate().map_anon()?;
/// assert_eq!(m.len(), 1 << 20);
///
/// // A file (here a memfd) at an address that is a multiple of 1 GiB.
/// let fd = hugeshm_sys::memfd_create("doc", None)?;
/// hugeshm_sys::set_len(fd.as_fd(), 8192)?;
/// let f = MapOptions::new(8192).align(PMD_SHARE_ALIGN).map(&fd)?;
/// assert_eq!(f.addr() % PMD_SHARE_ALIGN, 0);
///
/// // An option for the other kind of mapping is refused.
/// assert!(MapOptions::new(4096).huge(2 << 20).map(&fd).is_err());
/// # Ok::<(), hugeshm_sys::SysError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapOptions {
    len: usize,
    offset: u64,
    shared: bool,
    populate: bool,
    huge: Option<u64>,
    align: Option<usize>,
    sync: bool,
}

impl MapOptions {
    /// Options for a mapping of `len` bytes: private, base pages, at an
    /// address the kernel chooses, file offset 0.
    pub fn new(len: usize) -> MapOptions {
        MapOptions {
            len,
            offset: 0,
            shared: false,
            populate: false,
            huge: None,
            align: None,
            sync: false,
        }
    }

    /// Anonymous memory `MAP_SHARED`: visible to children after `fork`,
    /// counted as shmem (without it, `MAP_PRIVATE`). A file is always
    /// mapped `MAP_SHARED`.
    pub fn shared(&mut self) -> &mut Self {
        self.shared = true;
        self
    }

    /// Anonymous memory on huge pages of `page_size` bytes (a power of
    /// two, 64 KiB or more; `None`: base pages): `MAP_HUGETLB` with the
    /// size in the `MAP_HUGE_SHIFT` bits, the length rounded up to a
    /// multiple of it. The pages are reserved from the pool by the call,
    /// so an exhausted pool fails there with `ENOMEM`. Not for a file,
    /// whose page size is its file system's (hugetlbfs:
    /// [`hugetlbfs_page_size`](crate::hugetlbfs_page_size)).
    pub fn huge(&mut self, page_size: impl Into<Option<u64>>) -> &mut Self {
        self.huge = page_size.into();
        self
    }

    /// `MAP_POPULATE`: the kernel faults every page in before the call
    /// returns, on the calling thread (how DPDK and Seastar pre-fault
    /// their memory). For hugetlb a page it cannot supply fails the call
    /// (the pool is reserved first); base pages may be left unfaulted
    /// without an error. The benches use it as the peers' method to
    /// compare with.
    pub fn populate(&mut self) -> &mut Self {
        self.populate = true;
        self
    }

    /// An address that is a multiple of `align` (a power of two and a
    /// multiple of the page size, e.g.
    /// [`PMD_SHARE_ALIGN`](crate::PMD_SHARE_ALIGN)); `None`, or an
    /// alignment not above the page size, lets the kernel choose.
    ///
    /// The address is found by reserving `len + align` bytes of
    /// inaccessible address space, mapping over the aligned part with
    /// `MAP_FIXED` and releasing the rest.
    pub fn align(&mut self, align: impl Into<Option<usize>>) -> &mut Self {
        self.align = align.into();
        self
    }

    /// The file offset to map from (a multiple of the file's page size,
    /// else the kernel refuses with `EINVAL`). Not for anonymous memory.
    pub fn offset(&mut self, offset: u64) -> &mut Self {
        self.offset = offset;
        self
    }

    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: for a file on a DAX file system,
    /// the file system's metadata for a written page is durable before the
    /// write fault returns, so flushing the CPU caches
    /// ([`Mapping::persist_range`]) makes the data durable. File systems
    /// that cannot do that refuse with `EOPNOTSUPP` (kernels before 4.15:
    /// `EINVAL`). Not for anonymous memory.
    pub fn sync(&mut self) -> &mut Self {
        self.sync = true;
        self
    }

    /// Maps anonymous memory, read-write.
    pub fn map_anon(&self) -> Result<Mapping, SysError> {
        self.make(None)
    }

    /// Maps the file `fd` (open read-write) from the offset, `MAP_SHARED`,
    /// read-write. On hugetlbfs (memfds made with a huge page size
    /// included) the length is rounded up to the huge page size, else to
    /// the base page size. Touching memory beyond the end of the file
    /// raises SIGBUS, so size the file first (see
    /// [`set_len`](crate::set_len)); the mapping is guarded against it
    /// (see the crate docs).
    pub fn map<F: AsFd>(&self, fd: F) -> Result<Mapping, SysError> {
        self.make(Some(fd.as_fd()))
    }

    /// The call as an error names it: `mmap(len=4096,
    /// MAP_PRIVATE|MAP_ANONYMOUS)`, `mmap(fd=3, len=4096, offset=0,
    /// MAP_SHARED, at a multiple of 1GiB)`.
    fn describe(&self, fd: Option<BorrowedFd<'_>>) -> String {
        let mut s = match fd {
            None => format!(
                "mmap(len={}, {}|MAP_ANONYMOUS",
                self.len,
                if self.shared {
                    "MAP_SHARED"
                } else {
                    "MAP_PRIVATE"
                }
            ),
            Some(fd) => format!(
                "mmap(fd={}, len={}, offset={}, {}",
                fd.as_raw_fd(),
                self.len,
                self.offset,
                if self.sync {
                    "MAP_SHARED_VALIDATE|MAP_SYNC"
                } else {
                    "MAP_SHARED"
                }
            ),
        };
        if let (None, Some(h)) = (fd, self.huge) {
            s.push_str("|MAP_HUGETLB|");
            s.push_str(&format_exact(h));
        }
        if self.populate {
            s.push_str("|MAP_POPULATE");
        }
        if let Some(a) = self.align {
            s.push_str(", at a multiple of ");
            s.push_str(&format_exact(a as u64));
        }
        s.push(')');
        s
    }

    /// The mapping: of anonymous memory (`fd` `None`) or of the file.
    fn make(&self, fd: Option<BorrowedFd<'_>>) -> Result<Mapping, SysError> {
        let call = || self.describe(fd);
        if self.len == 0 {
            return Err(SysError::invalid(call(), "length is zero"));
        }
        let mut flags = match (fd, self.shared) {
            (Some(_), _) if self.sync => MapFlags::SHARED_VALIDATE | MapFlags::SYNC,
            (Some(_), _) | (None, true) => MapFlags::SHARED,
            (None, false) => MapFlags::PRIVATE,
        };
        let page = match (fd, self.huge) {
            (None, _) if self.offset != 0 => {
                return Err(SysError::invalid(
                    call(),
                    format!("offset {} is for a file, not anonymous memory", self.offset),
                ))
            }
            (None, _) if self.sync => {
                return Err(SysError::invalid(
                    call(),
                    "MAP_SYNC is for a file on a DAX file system, not anonymous memory",
                ))
            }
            (None, Some(size)) => {
                let log2 = huge_page_log2(&call(), size)?;
                flags |= MapFlags::hugetlb_with_size_log2(log2)
                    .ok_or_else(|| SysError::invalid(call(), "unsupported huge page size"))?;
                huge_usize(&call(), size)?
            }
            (None, None) => base_page_size(),
            (Some(_), Some(size)) => {
                return Err(SysError::invalid(
                    call(),
                    format!(
                        "huge page size {size}: a file's page size is its file system's \
                         (hugetlbfs), not an option"
                    ),
                ))
            }
            (Some(fd), None) => hugetlbfs_page_size(fd).unwrap_or_else(base_page_size),
        };
        if self.populate {
            flags |= MapFlags::POPULATE;
        }
        let len = round_up(self.len, page)
            .ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
        let ptr = placed(&call, len, page, self.align, |at| {
            // SAFETY: `placed` passes no address, or the aligned start of
            // `len` bytes inside the PROT_NONE reservation it made for
            // this call.
            unsafe { mmap_at(at, len, flags, fd, self.offset) }.map_err(|e| SysError::os(call(), e))
        })?;
        let mut mapping = Mapping {
            ptr,
            len,
            page_size: page,
            release: Release::Munmap,
            sync: self.sync,
            guard: sigbus::Guard::none(),
        };
        if fd.is_some() {
            // A file can be truncated under the mapping (sigbus.rs):
            // guarded from now on (a failure unmaps it again).
            mapping.guard = sigbus::register(mapping.addr(), mapping.len)?;
        }
        Ok(mapping)
    }
}

/// One read-write `mmap` of `len` bytes, of anonymous memory (`fd` `None`)
/// or of `fd` at `offset`: where the kernel chooses (`at` `None`), or
/// `MAP_FIXED` at `at`. The one place a mapping is made over an address.
///
/// # Safety
/// `at`, when given, must start `len` bytes of address space that belong
/// to the caller and that nothing references (a reservation of its own,
/// see [`placed`]): `MAP_FIXED` replaces whatever is mapped there.
unsafe fn mmap_at(
    at: Option<usize>,
    len: usize,
    flags: MapFlags,
    fd: Option<BorrowedFd<'_>>,
    offset: u64,
) -> rustix::io::Result<*mut c_void> {
    let (hint, flags) = match at {
        Some(a) => (a as *mut c_void, flags | MapFlags::FIXED),
        None => (std::ptr::null_mut(), flags),
    };
    let prot = ProtFlags::READ | ProtFlags::WRITE;
    // SAFETY: either a null hint (the kernel picks a fresh range) or
    // MAP_FIXED over address space the caller owns and nothing references
    // (this function's contract), so no memory anything else uses is
    // replaced; the caller owns the result.
    unsafe {
        match fd {
            None => rustix::mm::mmap_anonymous(hint, len, prot, flags),
            Some(fd) => rustix::mm::mmap(hint, len, prot, flags, fd, offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base_page_size as page;
    use crate::mm::tests::rss_kb;
    use crate::{memfd_create, set_len};
    use std::os::fd::OwnedFd;

    /// The permissions of this process's mapping at `addr` in
    /// /proc/self/maps (`rw-s`, `rw-p`).
    fn perms(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let head = format!("{addr:x}-");
        let line = maps.lines().find(|l| l.starts_with(&head));
        let line = line.unwrap_or_else(|| panic!("no mapping at {head}"));
        line.split_whitespace().nth(1).unwrap().to_owned()
    }

    /// A memfd of `pages` base pages, every byte of page `i` set to `i`.
    fn memfd_of_pages(pages: usize) -> OwnedFd {
        let fd = memfd_create("hugeshm-map-test", None).unwrap();
        set_len(fd.as_fd(), (pages * page()) as u64).unwrap();
        let mut m = MapOptions::new(pages * page()).map(&fd).unwrap();
        for i in 0..pages {
            m.fill_range(i * page(), page(), i as u8).unwrap();
        }
        fd
    }

    #[test]
    fn zero_length_and_bad_huge_size_are_rejected() {
        let err = MapOptions::new(0).map_anon().unwrap_err();
        assert!(err.errno().is_none());
        assert!(err.to_string().contains("length is zero"), "{err}");
        let err = MapOptions::new(4096).shared().huge(3000).map_anon();
        let err = err.unwrap_err();
        assert!(err.to_string().contains("not a power of two"), "{err}");
        let err = MapOptions::new(4096).shared().huge(4096).map_anon();
        assert!(err.unwrap_err().to_string().contains("outside"));
        // A log2 (memmap2's convention) is not a size.
        let err = MapOptions::new(4096).huge(21).map_anon().unwrap_err();
        assert!(err.to_string().contains("not a power of two"), "{err}");
        let err = memfd_create("x", Some(12345)).unwrap_err();
        assert!(
            err.to_string().starts_with("memfd_create(name=\"x\""),
            "{err}"
        );
        let fd = memfd_create("hugeshm-map-test", None).unwrap();
        let err = MapOptions::new(0).map(&fd).unwrap_err();
        assert!(err.to_string().contains("length is zero"), "{err}");
        let err = MapOptions::new(usize::MAX).map_anon().unwrap_err();
        assert!(err.to_string().contains("length overflows"), "{err}");
    }

    #[test]
    fn huge_anon_either_maps_or_fails_with_context() {
        // Works without root: succeeds only if free 2 MiB pages exist.
        match MapOptions::new(1).huge(2 << 20).map_anon() {
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

    /// `new` alone is private anonymous memory of base pages, rounded up
    /// to a page, where the kernel chooses; `shared` makes it `MAP_SHARED`.
    #[test]
    fn anon_is_private_unless_shared() {
        let m = MapOptions::new(page() + 1).map_anon().unwrap();
        assert_eq!((m.len(), m.page_size()), (2 * page(), page()));
        assert_eq!(perms(m.addr()), "rw-p");
        assert!(!m.is_sync());
        let s = MapOptions::new(page()).shared().map_anon().unwrap();
        assert_eq!(perms(s.addr()), "rw-s");
        // The same options, copied, make another mapping of their own.
        let mut o = MapOptions::new(page());
        o.shared();
        let (a, b) = (o.map_anon().unwrap(), o.map_anon().unwrap());
        assert_ne!(a.addr(), b.addr());
    }

    /// `populate` faults every page in before the call returns, for
    /// anonymous memory and for a file; without it nothing is resident.
    #[test]
    fn populate_faults_in_anon_and_file() {
        let n = 16;
        let lazy = MapOptions::new(n * page()).shared().map_anon().unwrap();
        assert_eq!(rss_kb(lazy.addr()), 0);
        let m = MapOptions::new(n * page()).shared().populate().map_anon();
        let m = m.unwrap();
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
        let fd = memfd_create("hugeshm-map-test", None).unwrap();
        set_len(fd.as_fd(), (n * page()) as u64).unwrap();
        let f = MapOptions::new(n * page()).populate().map(&fd).unwrap();
        assert_eq!(rss_kb(f.addr()), (n * page() / 1024) as u64);
        assert_eq!(perms(f.addr()), "rw-s");
    }

    /// `align` places anonymous memory and files at a multiple of it; an
    /// alignment the kernel gives anyway (a page) needs no reservation,
    /// and one that is not a power of two is refused before any call.
    #[test]
    fn align_places_anon_and_file() {
        for align in [2 << 20, crate::PMD_SHARE_ALIGN] {
            let m = MapOptions::new(3 * page()).align(align).map_anon().unwrap();
            assert_eq!(m.addr() % align, 0, "{align}");
            assert_eq!(m.len(), 3 * page());
            let fd = memfd_of_pages(2);
            let f = MapOptions::new(2 * page()).align(align).map(&fd).unwrap();
            assert_eq!(f.addr() % align, 0, "{align}");
            let mut b = [0u8];
            f.read_at(page(), &mut b).unwrap();
            assert_eq!(b[0], 1);
        }
        let m = MapOptions::new(page()).align(page()).map_anon().unwrap();
        assert_eq!(m.addr() % page(), 0);
        let m = MapOptions::new(page()).align(None).map_anon().unwrap();
        assert_eq!(m.len(), page());
        let err = MapOptions::new(page()).align(3 * page()).map_anon();
        let err = err.unwrap_err();
        assert!(err.errno().is_none());
        assert!(err.to_string().contains("not a power of two"), "{err}");
        let want = format!(
            "mmap(len={}, MAP_PRIVATE|MAP_ANONYMOUS, at a multiple of {}): ",
            page(),
            format_exact(3 * page() as u64)
        );
        assert!(err.to_string().starts_with(&want), "{err}");
    }

    /// `offset` maps the file from there; a file mapping is shared with
    /// every other mapping of the file.
    #[test]
    fn offset_maps_from_there_and_files_are_shared() {
        let fd = memfd_of_pages(3);
        assert!(hugetlbfs_page_size(fd.as_fd()).is_none());
        let mut a = MapOptions::new(3 * page()).map(&fd).unwrap();
        let b = MapOptions::new(page())
            .offset(2 * page() as u64)
            .map(fd.as_fd())
            .unwrap();
        let mut buf = [0u8; 1];
        b.read_at(0, &mut buf).unwrap();
        assert_eq!(buf[0], 2, "page 2 of the file");
        a.write_at(2 * page() + 3, b"shared").unwrap();
        let mut buf = [0u8; 6];
        b.read_at(3, &mut buf).unwrap();
        assert_eq!(&buf, b"shared");
        b.release().unwrap();
        drop(a);
    }

    #[test]
    fn file_errors_name_the_call() {
        let fd = memfd_create("hugeshm-map-test", None).unwrap();
        let err = MapOptions::new(page()).offset(1).map(&fd).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EINVAL));
        let want = format!(
            "mmap(fd={}, len={}, offset=1, MAP_SHARED): ",
            fd.as_raw_fd(),
            page()
        );
        assert!(err.to_string().starts_with(&want), "{err}");
        // tmpfs cannot MAP_SYNC: refused by the kernel, named in the error.
        set_len(fd.as_fd(), page() as u64).unwrap();
        let err = MapOptions::new(page()).sync().align(2 << 20).map(&fd);
        let err = err.unwrap_err();
        assert!(
            matches!(err.errno(), Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)),
            "{err}"
        );
        let want = format!(
            "mmap(fd={}, len={}, offset=0, MAP_SHARED_VALIDATE|MAP_SYNC, at a multiple of 2MiB): ",
            fd.as_raw_fd(),
            page()
        );
        assert!(err.to_string().starts_with(&want), "{err}");
    }

    /// Options of the other kind of mapping are refused before any call:
    /// an offset or `MAP_SYNC` for anonymous memory, a huge page size for
    /// a file.
    #[test]
    fn options_of_the_other_kind_are_refused() {
        let err = MapOptions::new(page()).offset(4096).map_anon().unwrap_err();
        assert!(err.errno().is_none());
        assert!(
            err.to_string().contains("offset 4096 is for a file"),
            "{err}"
        );
        let err = MapOptions::new(page()).sync().map_anon().unwrap_err();
        assert!(err.errno().is_none());
        assert!(err.to_string().contains("MAP_SYNC is for a file"), "{err}");
        let fd = memfd_of_pages(1);
        let err = MapOptions::new(page()).huge(2 << 20).map(&fd).unwrap_err();
        assert!(err.errno().is_none());
        assert!(err.to_string().contains("its file system's"), "{err}");
        // Set to nothing again, it applies.
        let m = MapOptions::new(page()).huge(2 << 20).huge(None).map(&fd);
        assert_eq!(m.unwrap().len(), page());
    }
}
