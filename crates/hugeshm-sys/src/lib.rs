//! # hugeshm-sys
//!
//! Safe wrappers around the Linux system calls behind huge-page shared
//! memory: the one hugeshm crate (besides the C boundary) with `unsafe`.
//! Every block has a `// SAFETY:` line; no function here is `unsafe` to call.
//!
//! Ownership is explicit: a [`Mapping`] owns a range of this process's
//! address space, made by `mmap` or by `shmat`, and releases it on drop
//! (`munmap` or `shmdt`, whichever made it). [`Mapping::release`] returns
//! the error instead; a failure in `Drop` goes to the `log` facade.
//!
//! Memory behind a mapping may be *shared with other processes*, which can
//! write to it at any time. A `Mapping` therefore never hands out `&[u8]`
//! or `&mut [u8]`; it offers range-checked copies ([`Mapping::read_at`],
//! [`Mapping::write_at`]), content-preserving faulting of any page range
//! ([`Mapping::populate_write_range`], [`Mapping::touch_range`]), aligned
//! atomic words ([`Mapping::store_u32_release`]) and disjoint mutable
//! pieces for parallel writers ([`Mapping::pieces_mut`]). The raw pointer
//! is there for callers that take the responsibility ([`Mapping::as_ptr`]).
//!
//! A file mapping ([`mmap_fd`] and its siblings) can lose its memory when
//! another process truncates the file: the next access would get SIGBUS.
//! Every file mapping is registered with a process-wide SIGBUS handler
//! that, for a fault inside a registered mapping, maps zero memory over it
//! and marks it lost; the checked accessors then return
//! [`SysError::MappingLost`] (one load per access), and a SIGBUS anywhere
//! else goes to the action that was there before (`sigbus.rs` has the
//! details and the limits).
//!
//! Paths in directories other users can write are opened through
//! [`OpenCheck`] (no link followed, no FIFO waited on, the kind checked
//! after the open).
//!
//! ```
//! let mut m = hugeshm_sys::mmap_anon(1 << 20, true, None)?;
//! m.populate_write_range(0, m.len())?;
//! m.write_at(4096, b"hello")?;
//! let mut back = [0u8; 5];
//! m.read_at(4096, &mut back)?;
//! assert_eq!(&back, b"hello");
//! m.release()?;
//! # Ok::<(), hugeshm_sys::SysError>(())
//! ```
//!
//! rustix is used wherever it has the call; libc only for the System V calls
//! (`shmget`, `shmat`, `shmdt`, `shmctl`) and `mincore`.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

mod files;
mod open;
mod perf;
mod process;
mod procmap;
mod shm;
mod sigbus;
mod vma;
mod words;

pub use files::{check_trusted_file, euid, remove_private_dir, DirHandle, Owner};
pub use open::{create_new, CheckedFile, FileKind, OpenCheck};
pub use perf::{PerfCounter, PerfEvent};
pub use process::{
    fork_child, in_new_session, process_cpu_seconds, thread_count, thread_cpu_seconds, wait_child,
};
pub use procmap::{is_procfs, procmap_query, procmap_query_supported, Vma, VmaQuery};
pub use shm::{
    shm_attach, shm_attach_placed, shm_get, shm_peek, shm_remove, shm_stat, ShmFlags, ShmStat,
};

use rustix::fs::MemfdFlags;
use rustix::mm::{Advice, MapFlags, ProtFlags};

/// Shift of the huge page size (as log2) in `MAP_HUGETLB`, `SHM_HUGETLB` and
/// `MFD_HUGETLB` flags (`MAP_HUGE_SHIFT` = `SHM_HUGE_SHIFT` = `MFD_HUGE_SHIFT`).
pub const HUGE_SHIFT: u32 = 26;

/// `IPC_PRIVATE`: the key that always creates a new System V segment.
pub const IPC_PRIVATE: i32 = 0;

/// `SHM_DEST`: mode bit of a segment marked for removal (`IPC_RMID`) that
/// is still attached somewhere.
pub const SHM_DEST: u32 = 0o1000;

/// `SHM_LOCKED`: mode bit of a segment locked with `SHM_LOCK`.
pub const SHM_LOCKED: u32 = 0o2000;

/// `HUGETLBFS_MAGIC`: `statfs.f_type` of hugetlbfs (memfd `MFD_HUGETLB`
/// files live there too).
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Error of a wrapped system call: which call, with which arguments, and
/// why it failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SysError {
    /// The system call returned an error.
    #[error("{call}: {}", std::io::Error::from_raw_os_error(*errno))]
    Os {
        /// The call with its arguments, e.g. `munmap(addr=0x7f.., len=4096)`.
        call: String,
        /// The raw `errno` value.
        errno: i32,
    },
    /// The arguments were rejected before any system call was made.
    #[error("{call}: invalid argument: {reason}")]
    InvalidArgument {
        /// The call with its arguments.
        call: String,
        /// Why the arguments were rejected.
        reason: String,
    },
    /// A path holds another kind of file than the one asked for (a FIFO,
    /// a symbolic link where a regular file should be); see
    /// [`OpenCheck`]. Nothing was read from it.
    #[error("{path} is {found} (owned by uid {uid}), not {expected}: not opened, left as it is")]
    WrongFileType {
        /// The path.
        path: String,
        /// What is there (`lstat`, or `fstat` of what was opened).
        found: FileKind,
        /// Its owner.
        uid: u32,
        /// What was asked for, in words (`a regular file`).
        expected: String,
    },
    /// A SIGBUS hit the mapping (its file was truncated by another
    /// process, a hugetlb pool ran dry at fault time, a memory error): the
    /// guard mapped zero memory over it so the access completed, and every
    /// checked access fails from then on. See the crate docs.
    #[error(
        "{call}: the mapping lost its file's memory: a SIGBUS at offset {offset} ({}); zero \
         memory was mapped in its place, so what was read or written there does not count; \
         release the mapping",
        sigbus::cause(*code)
    )]
    MappingLost {
        /// The access that found it, with the mapping's address.
        call: String,
        /// Offset of the first faulting address in the mapping.
        offset: usize,
        /// The fault's `si_code` (`BUS_ADRERR` = 2: past the end of the
        /// file).
        code: i32,
    },
}

impl SysError {
    fn os(call: String, errno: rustix::io::Errno) -> Self {
        SysError::Os {
            call,
            errno: errno.raw_os_error(),
        }
    }

    fn last_os(call: String) -> Self {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        SysError::Os { call, errno }
    }

    fn invalid(call: String, reason: impl Into<String>) -> Self {
        SysError::InvalidArgument {
            call,
            reason: reason.into(),
        }
    }

    /// The failed call with its arguments.
    pub fn call(&self) -> &str {
        match self {
            SysError::Os { call, .. } | SysError::InvalidArgument { call, .. } => call,
            SysError::WrongFileType { path, .. } => path,
            SysError::MappingLost { call, .. } => call,
        }
    }

    /// The `errno` of the failure; `None` when the arguments were rejected
    /// before the call.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysError::Os { errno, .. } => Some(*errno),
            SysError::InvalidArgument { .. }
            | SysError::WrongFileType { .. }
            | SysError::MappingLost { .. } => None,
        }
    }

    /// The `errno` as a [`std::io::Error`] (`EINVAL` for rejected arguments).
    pub fn io_error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno().unwrap_or(libc::EINVAL))
    }
}

impl From<SysError> for std::io::Error {
    fn from(err: SysError) -> Self {
        std::io::Error::new(err.io_error().kind(), err)
    }
}

/// The base (smallest) page size of the system, e.g. 4096.
pub fn base_page_size() -> usize {
    rustix::param::page_size()
}

/// Formats a size in bytes the way the kernel names page sizes: `2MiB`,
/// `1GiB`, `64KiB`, or plain bytes when not a whole number of KiB.
pub fn format_size(bytes: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= GIB && bytes % GIB == 0 {
        format!("{}GiB", bytes / GIB)
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{}MiB", bytes / MIB)
    } else if bytes >= KIB && bytes % KIB == 0 {
        format!("{}KiB", bytes / KIB)
    } else {
        format!("{bytes}B")
    }
}

/// Validates a huge page size and returns its log2 (16..=63).
fn huge_page_log2(call: &str, size: u64) -> Result<u32, SysError> {
    if !size.is_power_of_two() {
        return Err(SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} is not a power of two"),
        ));
    }
    let log2 = size.trailing_zeros();
    if !(16..=63).contains(&log2) {
        return Err(SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} is outside 64KiB..2^63"),
        ));
    }
    Ok(log2)
}

fn round_up(len: usize, page: usize) -> Option<usize> {
    debug_assert!(page > 0);
    len.checked_add(page - 1).map(|v| v / page * page)
}

fn huge_usize(call: &str, size: u64) -> Result<usize, SysError> {
    usize::try_from(size).map_err(|_| {
        SysError::invalid(
            call.to_owned(),
            format!("huge page size {size} does not fit in usize"),
        )
    })
}

/// How a [`Mapping`] is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// `munmap(addr, len)`.
    Munmap,
    /// `shmdt(addr)` of an attachment of this System V segment.
    Shmdt { shmid: i32 },
}

/// A range of this process's address space that this value owns: an
/// `mmap`'d range or a `shmat` attachment, released on drop (`munmap` or
/// `shmdt`; a failure goes to the `log` facade, [`Mapping::release`]
/// returns it instead).
///
/// `len()` is the mapped length: the requested length rounded up to the
/// mapping's page size for `mmap` (`munmap` of a hugetlb mapping needs the
/// full length), the segment size rounded up to the segment's page size for
/// `shmat` (read back from the mapping: see [`shm_attach_placed`]).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    page_size: usize,
    release: Release,
    /// Mapped `MAP_SYNC` (a DAX file): flushing CPU caches makes writes
    /// durable.
    sync: bool,
    /// Its slot in the SIGBUS guard (file mappings), see [`sigbus`].
    guard: sigbus::Guard,
}

// SAFETY: a Mapping is a plain owned address range; munmap/shmdt may be
// called from any thread, and non-atomic writes through it need `&mut self`.
unsafe impl Send for Mapping {}
// SAFETY: the `&self` operations are address queries, volatile reads,
// atomic per-byte or per-word accesses and madvise/mlock, none of which
// race with a non-atomic access (those need `&mut self`).
unsafe impl Sync for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mapping");
        d.field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("page_size", &self.page_size);
        if let Release::Shmdt { shmid } = self.release {
            d.field("shmid", &shmid);
        }
        d.finish()
    }
}

#[inline(always)]
fn check_range(
    call: impl FnOnce() -> String,
    offset: usize,
    n: usize,
    len: usize,
) -> Result<(), SysError> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(range_error(call(), offset, n, len)),
    }
}

/// The error of a range check, out of line: the word accessors are on the
/// hot path of shared data structures, their failure never is.
#[cold]
#[inline(never)]
fn range_error(call: String, offset: usize, n: usize, len: usize) -> SysError {
    SysError::invalid(
        call,
        format!("range {offset}+{n} exceeds the region length {len}"),
    )
}

/// Write-faults every page of `ptr..ptr + len` with one atomic
/// compare-and-swap of a byte with itself per `page` bytes, which
/// preserves contents even while other processes write. Any stride no
/// larger than the real page size is correct, merely slower when smaller.
///
/// Not `fetch_or(0)`: LLVM turns an idempotent read-modify-write into a
/// plain load, and drops a relaxed load whose value is unused, so a
/// release build touched nothing (a region pre-faulted this way had only
/// its header page resident). A compare-and-swap is kept, and on x86-64
/// `lock cmpxchg` writes whether or not it succeeds, so the page is
/// write-faulted; where it fails, another writer has just faulted it.
///
/// # Safety
/// `ptr..ptr + len` must be a live, writable mapping that no other thread
/// of this process accesses non-atomically during the call.
unsafe fn touch_pages(ptr: *mut u8, len: usize, page: usize) {
    let start = ptr as usize;
    let mut off = 0usize;
    while off < len {
        // SAFETY: off < len, so the byte lies in the caller's writable
        // mapping; u8 atomics need no alignment and the caller excludes
        // concurrent non-atomic access.
        let byte = unsafe { AtomicU8::from_ptr(ptr.add(off)) };
        let v = byte.load(Ordering::Relaxed);
        let _ =
            std::hint::black_box(byte.compare_exchange(v, v, Ordering::Relaxed, Ordering::Relaxed));
        // Next page boundary after start + off.
        let addr = start + off;
        off = (addr / page + 1) * page - start;
    }
}

impl Mapping {
    /// Start address. Accessing memory through it is the caller's
    /// responsibility (`unsafe`); it stays valid until `self` is released.
    ///
    /// A file mapping whose raw pointer was handed out leaves the SIGBUS
    /// guard (see the crate docs): code that reads through the pointer
    /// cannot be told that the memory went, so a fault then ends the
    /// process as it did without the guard, rather than feed it zeros.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.guard.hand_out_raw();
        self.base()
    }

    /// The start address, for this type's own checked accesses.
    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start address as an integer (for reports and `/proc/PID/smaps`).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Mapped length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings cannot be made.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Page size backing the mapping: the huge page size for hugetlb
    /// mappings (a `SHM_HUGETLB` segment's included), else the base page
    /// size. Transparent huge pages are not counted (see
    /// `/proc/self/smaps`).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The System V segment of a `shmat` attachment.
    pub fn shmid(&self) -> Option<i32> {
        match self.release {
            Release::Shmdt { shmid } => Some(shmid),
            Release::Munmap => None,
        }
    }

    #[cold]
    fn call(&self, what: &str) -> String {
        match self.release {
            Release::Munmap => format!("{what}(addr={:#x})", self.addr()),
            Release::Shmdt { shmid } => format!("{what}(shmid={shmid}, addr={:#x})", self.addr()),
        }
    }

    /// Whether it was mapped `MAP_SYNC` ([`mmap_fd_sync_placed`]).
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Makes `offset..offset + n` durable: on a `MAP_SYNC` mapping by
    /// writing the CPU cache lines back to memory (the persistence domain
    /// of a DAX device) with the best instruction the CPU has, then a
    /// store fence; elsewhere with `msync(MS_SYNC)` over the pages. Returns
    /// how it was done.
    pub fn persist_range(&self, offset: usize, n: usize) -> Result<PersistMethod, SysError> {
        let start = self.range_ptr("persist", offset, n)?;
        if n == 0 {
            return Ok(PersistMethod::None);
        }
        if self.sync {
            if let Some(m) = cache::flush(start as usize, n) {
                self.intact("persist")?;
                return Ok(m);
            }
        }
        let page = base_page_size();
        let first = (start as usize) / page * page;
        let end = start as usize + n;
        // SAFETY: [first, end) lies in pages of this mapping (start is
        // inside it, rounded down to its page; end is checked above);
        // msync only writes dirty pages back.
        unsafe {
            rustix::mm::msync(
                first as *mut c_void,
                end - first,
                rustix::mm::MsyncFlags::SYNC,
            )
        }
        .map_err(|e| SysError::os(self.call("msync"), e))?;
        self.intact("msync")?;
        Ok(PersistMethod::Msync)
    }

    /// The address of `offset..offset + n`, checked against the mapping.
    #[inline(always)]
    fn range_ptr(&self, what: &str, offset: usize, n: usize) -> Result<*mut u8, SysError> {
        check_range(|| self.call(what), offset, n, self.len)?;
        // SAFETY: offset + n <= len: inside (or one past) the mapping.
        Ok(unsafe { self.base().add(offset) })
    }

    /// Copies `buf.len()` bytes at `offset` out of the mapping (volatile
    /// byte reads: other processes may write concurrently).
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<(), SysError> {
        let src = self.range_ptr("read_at", offset, buf.len())?;
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: i < buf.len(), inside the range checked above, in a
            // live mapping owned by self.
            *b = unsafe { std::ptr::read_volatile(src.add(i)) };
        }
        self.intact("read_at")
    }

    /// Copies `data` into the mapping at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), SysError> {
        let dst = self.range_ptr("write_at", offset, data.len())?;
        for (i, b) in data.iter().enumerate() {
            // SAFETY: i < data.len(), inside the checked range of a live
            // read-write mapping; `&mut self` excludes other accesses from
            // this process.
            unsafe { std::ptr::write_volatile(dst.add(i), *b) };
        }
        self.intact("write_at")
    }

    /// Sets `offset..offset + n` to `byte` (faults those pages in).
    pub fn fill_range(&mut self, offset: usize, n: usize, byte: u8) -> Result<(), SysError> {
        let dst = self.range_ptr("fill", offset, n)?;
        // SAFETY: the checked range of a live read-write mapping; `&mut
        // self` excludes other accesses from this process and no Rust
        // references into it exist.
        unsafe { std::ptr::write_bytes(dst, byte, n) };
        self.intact("fill")
    }

    /// Sets every byte of the mapping to `byte` (unchecked for a lost
    /// mapping: see [`is_lost`](Mapping::is_lost)).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole live read-write mapping owned by self; `&mut
        // self` excludes other accesses from this process.
        unsafe { std::ptr::write_bytes(self.base(), byte, self.len) };
    }

    /// Write-faults every page of `offset..offset + n` without changing
    /// contents: one atomic `fetch_or(0)` per `page` bytes (0 = the
    /// mapping's page size). The fallback where the kernel lacks
    /// `MADV_POPULATE_WRITE`; several threads may touch disjoint (or even
    /// the same) ranges at once.
    pub fn touch_range(&self, offset: usize, n: usize, page: usize) -> Result<(), SysError> {
        let p = self.range_ptr("touch", offset, n)?;
        let page = if page == 0 { self.page_size } else { page };
        // SAFETY: the checked range of a live read-write mapping; every
        // access is atomic, and non-atomic ones need `&mut self`.
        unsafe { touch_pages(p, n, page) };
        self.intact("touch")
    }

    /// [`touch_range`](Mapping::touch_range) over the whole mapping
    /// (unchecked for a lost mapping: see [`is_lost`](Mapping::is_lost)).
    pub fn touch(&self) {
        // SAFETY: the whole live read-write mapping; every access is
        // atomic, and non-atomic ones need `&mut self`.
        unsafe { touch_pages(self.base(), self.len, self.page_size) };
    }

    fn madvise(&self, what: &str, offset: usize, n: usize, advice: Advice) -> Result<(), SysError> {
        let call = || format!("madvise(addr={:#x}, len={n}, {what})", self.addr() + offset);
        check_range(call, offset, n, self.len)?;
        let p = self.addr() + offset;
        if p % base_page_size() != 0 {
            return Err(SysError::invalid(call(), "address is not page-aligned"));
        }
        loop {
            // SAFETY: a checked, page-aligned range of a live mapping owned
            // by self; the advice used here never changes memory contents.
            match unsafe { rustix::mm::madvise(p as *mut c_void, n, advice) } {
                Err(rustix::io::Errno::INTR) => continue,
                r => {
                    r.map_err(|e| SysError::os(call(), e))?;
                    return self.intact(what);
                }
            }
        }
    }

    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+) of `offset..offset + n`:
    /// write-faults those pages, allocating them, without changing
    /// contents. A page the kernel cannot supply is an error
    /// (`ENOMEM`/`EFAULT`, `EHWPOISON`), never SIGBUS; `EINVAL` on kernels
    /// without the advice (see [`populate_write_supported`]). Threads may
    /// populate disjoint ranges at once.
    pub fn populate_write_range(&self, offset: usize, n: usize) -> Result<(), SysError> {
        self.madvise("MADV_POPULATE_WRITE", offset, n, Advice::LinuxPopulateWrite)
    }

    /// [`populate_write_range`](Mapping::populate_write_range) over the
    /// whole mapping.
    pub fn populate_write(&self) -> Result<(), SysError> {
        self.populate_write_range(0, self.len)
    }

    /// `madvise(MADV_POPULATE_READ)` (Linux 5.14+) of `offset..offset + n`:
    /// maps those pages into this process's page tables as a read fault
    /// would, without changing contents; an error (not SIGBUS) when one
    /// cannot be had. On shared memory whose pages exist already (an
    /// attached region) this allocates nothing but page tables.
    pub fn populate_read_range(&self, offset: usize, n: usize) -> Result<(), SysError> {
        self.madvise("MADV_POPULATE_READ", offset, n, Advice::LinuxPopulateRead)
    }

    /// [`populate_read_range`](Mapping::populate_read_range) over the
    /// whole mapping.
    pub fn populate_read(&self) -> Result<(), SysError> {
        self.populate_read_range(0, self.len)
    }

    /// `madvise(MADV_HUGEPAGE)` over the mapping: asks for transparent huge
    /// pages (tmpfs mounted with `huge=advise`, anonymous memory with THP
    /// `enabled=madvise`).
    pub fn advise_hugepage(&self) -> Result<(), SysError> {
        self.madvise("MADV_HUGEPAGE", 0, self.len, Advice::LinuxHugepage)
    }

    /// Reads one byte per `page` bytes (volatile; 0 = the mapping's page
    /// size), faulting every page in for reading: the fallback for kernels
    /// without `MADV_POPULATE_READ`. Returns a value derived from the bytes
    /// so the reads are not optimized away.
    pub fn read_touch(&self, page: usize) -> u8 {
        let page = if page == 0 { self.page_size } else { page };
        let mut acc = 0u8;
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len inside the live mapping owned by self.
            acc ^= unsafe { std::ptr::read_volatile(self.base().add(off)) };
            off += page;
        }
        acc
    }

    /// The wrapping sum of the 8-byte words of `offset..offset + n`
    /// (volatile reads, front to back: other processes may write
    /// concurrently): reads every byte of the range, for a read-bandwidth
    /// measurement. `offset` and `n` must be multiples of 8.
    pub fn sum_u64_range(&self, offset: usize, n: usize) -> Result<u64, SysError> {
        if offset % 8 != 0 || n % 8 != 0 {
            return Err(SysError::invalid(
                self.call("sum_u64"),
                format!("offset {offset} and length {n} must be multiples of 8"),
            ));
        }
        let p = self.range_ptr("sum_u64", offset, n)?.cast::<u64>();
        let words = n / 8;
        // Four independent sums keep several loads in flight.
        let mut acc = [0u64; 4];
        let mut i = 0;
        while i + 4 <= words {
            for (k, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + k < words: an 8-byte aligned word (the mapping
                // is page-aligned, offset a multiple of 8) inside the range
                // checked above, in a live mapping owned by self.
                *a = a.wrapping_add(unsafe { std::ptr::read_volatile(p.add(i + k)) });
            }
            i += 4;
        }
        while i < words {
            // SAFETY: i < words, as above.
            acc[0] = acc[0].wrapping_add(unsafe { std::ptr::read_volatile(p.add(i)) });
            i += 1;
        }
        self.intact("sum_u64")?;
        Ok(acc.iter().fold(0u64, |s, a| s.wrapping_add(*a)))
    }

    fn word(&self, what: &str, offset: usize) -> Result<&AtomicU32, SysError> {
        let p = self.range_ptr(what, offset, 4)?;
        if p as usize % 4 != 0 {
            return Err(SysError::invalid(self.call(what), "not 4-byte aligned"));
        }
        // SAFETY: p is 4-byte aligned inside a live read-write mapping that
        // outlives the returned reference (bound to `&self`); every access
        // to such a word (here, in any process) is atomic.
        Ok(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }

    /// Stores a 32-bit word at `offset` with one aligned atomic store
    /// (release ordering: a reader that loads the word with acquire
    /// ordering sees every write this process made before). `offset` must
    /// be a multiple of 4.
    pub fn store_u32_release(&self, offset: usize, value: u32) -> Result<(), SysError> {
        self.word("store_u32", offset)?
            .store(value, Ordering::Release);
        self.intact("store_u32")
    }

    /// Loads a 32-bit word at `offset` with acquire ordering (see
    /// [`store_u32_release`](Mapping::store_u32_release)).
    pub fn load_u32_acquire(&self, offset: usize) -> Result<u32, SysError> {
        let v = self.word("load_u32", offset)?.load(Ordering::Acquire);
        self.intact("load_u32")?;
        Ok(v)
    }

    /// `mbind` of the whole mapping: where its pages are allocated from now
    /// on (call it before anything touches them). `strict`
    /// (`MPOL_MF_STRICT`) makes pages already faulted elsewhere an error.
    pub fn mbind(&self, policy: &MemPolicy, strict: bool) -> Result<(), SysError> {
        let (mode, nodes) = policy.mode_and_nodes();
        let mask = NodeMask::of(nodes);
        let call = || {
            format!(
                "mbind(addr={:#x}, len={}, {policy}{})",
                self.addr(),
                self.len,
                if strict { ", MPOL_MF_STRICT" } else { "" }
            )
        };
        if nodes.iter().any(|&n| n as usize >= NodeMask::BITS) {
            return Err(SysError::invalid(call(), "node number out of range"));
        }
        let flags: libc::c_ulong = if strict { MPOL_MF_STRICT } else { 0 };
        // SAFETY: a live mapping owned by self; the mask outlives the call
        // and `maxnode` matches its size; mbind changes placement, never
        // contents.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                self.base().cast::<c_void>(),
                self.len,
                mode,
                mask.0.as_ptr(),
                NodeMask::MAXNODE,
                flags,
            )
        };
        if rc < 0 {
            return Err(SysError::last_os(call()));
        }
        Ok(())
    }

    /// `mlock` over the mapping: faults in and locks every page (undone by
    /// releasing it). The kernel checks the length against
    /// `RLIMIT_MEMLOCK`.
    pub fn mlock(&self) -> Result<(), SysError> {
        // SAFETY: a live mapping owned by self; locking does not change
        // memory contents.
        unsafe { rustix::mm::mlock(self.base().cast::<c_void>(), self.len) }.map_err(|e| {
            SysError::os(
                format!("mlock(addr={:#x}, len={})", self.addr(), self.len),
                e,
            )
        })?;
        self.intact("mlock")
    }

    /// Disjoint mutable pieces `offset..offset + len` of the mapping, for
    /// threads that write their own piece each (e.g. a parallel memset).
    /// The ranges must be in bounds and must not overlap.
    pub fn pieces_mut(&mut self, ranges: &[(usize, usize)]) -> Result<Vec<Piece<'_>>, SysError> {
        self.intact("pieces_mut")?;
        let mut sorted: Vec<(usize, usize)> = ranges.to_vec();
        sorted.sort_unstable();
        for w in sorted.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(SysError::invalid(
                    self.call("pieces_mut"),
                    format!("ranges {:?} and {:?} overlap", w[0], w[1]),
                ));
            }
        }
        ranges
            .iter()
            .map(|&(off, n)| {
                let ptr = self.range_ptr("pieces_mut", off, n)?;
                Ok(Piece {
                    ptr,
                    len: n,
                    _owner: PhantomData,
                })
            })
            .collect()
    }

    /// Gives the mapping up without releasing it: the range stays mapped
    /// and is no longer this value's to unmap. Returns `(address, length)`.
    /// For code that hands the mapping to a program that unmaps it itself
    /// (the `hugeshm run` interposer returns it from the server's `mmap` or
    /// `shmat`).
    pub fn into_raw(self) -> (usize, usize) {
        let this = std::mem::ManuallyDrop::new(self);
        (this.addr(), this.len)
    }

    /// Releases the mapping now (`munmap` or `shmdt`), returning the error
    /// instead of logging it.
    pub fn release(self) -> Result<(), SysError> {
        let mut this = std::mem::ManuallyDrop::new(self);
        this.do_release()
    }

    fn do_release(&mut self) -> Result<(), SysError> {
        // Out of the SIGBUS guard before the range can be someone else's.
        self.guard.unregister();
        match self.release {
            Release::Munmap => {
                // SAFETY: ptr/len are exactly what mmap returned and no
                // references into the mapping can outlive self (none are
                // handed out beyond `&self`/`&mut self` borrows).
                unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) }.map_err(
                    |e| {
                        SysError::os(
                            format!("munmap(addr={:#x}, len={})", self.addr(), self.len),
                            e,
                        )
                    },
                )
            }
            Release::Shmdt { shmid } => {
                // SAFETY: ptr is the address shmat returned; nothing
                // references the attachment beyond self.
                let rc = unsafe { libc::shmdt(self.ptr.as_ptr().cast::<c_void>().cast_const()) };
                if rc < 0 {
                    return Err(SysError::last_os(format!(
                        "shmdt(shmid={shmid}, addr={:#x})",
                        self.addr()
                    )));
                }
                Ok(())
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Err(err) = self.do_release() {
            log::warn!("{err}");
        }
    }
}

/// `MPOL_MF_STRICT`: mbind fails if pages already sit elsewhere.
const MPOL_MF_STRICT: libc::c_ulong = 1;

/// A memory policy for [`Mapping::mbind`] (see `set_mempolicy(2)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemPolicy {
    /// The process's policy (`MPOL_DEFAULT`).
    Default,
    /// Only these nodes (`MPOL_BIND`).
    Bind(Vec<u32>),
    /// Round-robin over these nodes, page by page (`MPOL_INTERLEAVE`).
    Interleave(Vec<u32>),
    /// This node first, others when it is full (`MPOL_PREFERRED`).
    Preferred(u32),
    /// Interleave weighted by `/sys/kernel/mm/mempolicy/weighted_interleave`
    /// (`MPOL_WEIGHTED_INTERLEAVE`, Linux 6.9+).
    WeightedInterleave(Vec<u32>),
}

impl MemPolicy {
    fn mode_and_nodes(&self) -> (libc::c_int, &[u32]) {
        match self {
            MemPolicy::Default => (0, &[]),
            MemPolicy::Preferred(n) => (1, std::slice::from_ref(n)),
            MemPolicy::Bind(n) => (2, n),
            MemPolicy::Interleave(n) => (3, n),
            MemPolicy::WeightedInterleave(n) => (6, n),
        }
    }
}

impl fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |n: &[u32]| n.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        match self {
            MemPolicy::Default => f.write_str("MPOL_DEFAULT"),
            MemPolicy::Bind(n) => write!(f, "MPOL_BIND {}", list(n)),
            MemPolicy::Interleave(n) => write!(f, "MPOL_INTERLEAVE {}", list(n)),
            MemPolicy::Preferred(n) => write!(f, "MPOL_PREFERRED {n}"),
            MemPolicy::WeightedInterleave(n) => write!(f, "MPOL_WEIGHTED_INTERLEAVE {}", list(n)),
        }
    }
}

/// A node mask of 1024 nodes, as the kernel's mempolicy calls take it.
struct NodeMask([libc::c_ulong; 16]);

impl NodeMask {
    const BITS: usize = 1024;
    /// The kernel reads `maxnode - 1` bits.
    const MAXNODE: libc::c_ulong = Self::BITS as libc::c_ulong + 1;

    fn of(nodes: &[u32]) -> NodeMask {
        let mut m = [0 as libc::c_ulong; 16];
        for &n in nodes {
            let n = n as usize;
            if n < Self::BITS {
                m[n / 64] |= 1 << (n % 64);
            }
        }
        NodeMask(m)
    }

    fn nodes(&self) -> Vec<u32> {
        (0..Self::BITS)
            .filter(|&n| self.0[n / 64] & (1 << (n % 64)) != 0)
            .map(|n| n as u32)
            .collect()
    }
}

/// The calling thread's memory policy (`get_mempolicy(2)`): what `numactl
/// --membind`, `--interleave` or `--preferred` set for the process.
pub fn thread_mempolicy() -> Result<MemPolicy, SysError> {
    let mut mode: libc::c_int = 0;
    let mut mask = NodeMask([0; 16]);
    // SAFETY: mode and mask are valid out pointers; maxnode matches the
    // mask's size; no address is given (flags 0: the thread's policy).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.0.as_mut_ptr(),
            NodeMask::MAXNODE,
            std::ptr::null_mut::<c_void>(),
            0 as libc::c_ulong,
        )
    };
    if rc < 0 {
        return Err(SysError::last_os("get_mempolicy()".to_owned()));
    }
    // Mode flags (MPOL_F_STATIC_NODES, ...) live in the high bits.
    Ok(match mode & 0xff {
        1 => match mask.nodes().first() {
            Some(&n) => MemPolicy::Preferred(n),
            None => MemPolicy::Default,
        },
        2 => MemPolicy::Bind(mask.nodes()),
        3 => MemPolicy::Interleave(mask.nodes()),
        6 => MemPolicy::WeightedInterleave(mask.nodes()),
        _ => MemPolicy::Default,
    })
}

/// The CPUs the calling thread may run on (`sched_getaffinity(2)`),
/// ascending.
pub fn affinity() -> Result<Vec<u32>, SysError> {
    let set = rustix::thread::sched_getaffinity(None)
        .map_err(|e| SysError::os("sched_getaffinity(0)".to_owned(), e))?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .map(|c| c as u32)
        .collect())
}

/// Pins the calling thread to `cpus` (`sched_setaffinity(2)`); threads it
/// starts afterwards inherit the set. An empty list, or a CPU beyond
/// `CPU_SETSIZE`, is rejected before the call.
pub fn set_affinity(cpus: &[u32]) -> Result<(), SysError> {
    let list = cpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let call = || format!("sched_setaffinity(0, cpus={list})");
    if cpus.is_empty() {
        return Err(SysError::invalid(call(), "no CPU given"));
    }
    let mut set = rustix::thread::CpuSet::new();
    for &c in cpus {
        if c as usize >= rustix::thread::CpuSet::MAX_CPU {
            return Err(SysError::invalid(
                call(),
                format!("CPU {c} is beyond CPU_SETSIZE"),
            ));
        }
        set.set(c as usize);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| SysError::os(call(), e))
}

/// A disjoint mutable piece of a [`Mapping`] (see [`Mapping::pieces_mut`]),
/// which can be sent to another thread.
pub struct Piece<'a> {
    ptr: *mut u8,
    len: usize,
    _owner: PhantomData<&'a mut Mapping>,
}

// SAFETY: a Piece is exclusive access to a disjoint range of a mapping
// that outlives it; moving that access to another thread is fine.
unsafe impl Send for Piece<'_> {}

impl Piece<'_> {
    /// Length of the piece.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false for pieces of non-empty ranges.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets every byte of the piece to `byte` (a plain `memset`).
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the piece is an in-bounds range of a live read-write
        // mapping, disjoint from every other piece, borrowed mutably.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    /// Zeroes the piece `chunk` bytes at a time, each chunk a separate
    /// `memset` that the compiler may not merge with the next: with 4 KiB
    /// chunks, how the kernel clears a huge page it faults in (one
    /// `clear_page` per 4 KiB subpage; with glibc on a CPU with fast
    /// string stores both are a `rep stosb` of 4 KiB).
    pub fn zero_by(&mut self, chunk: usize) {
        let chunk = chunk.max(1);
        let mut off = 0;
        while off < self.len {
            let n = chunk.min(self.len - off);
            // SAFETY: off + n <= len, in bounds of the live read-write
            // mapping, disjoint from every other piece, borrowed mutably.
            // black_box hides the pointer so that the calls stay one per
            // chunk.
            unsafe { std::ptr::write_bytes(std::hint::black_box(self.ptr.add(off)), 0, n) };
            off += n;
        }
    }

    /// Writes `byte` to the first byte of every `page` bytes of the piece
    /// (a plain store, not atomic): the touch loop of a JVM's
    /// AlwaysPreTouch or a database touching its buffers in, which
    /// write-faults each page once.
    pub fn touch_pages(&mut self, page: usize, byte: u8) {
        let page = page.max(1);
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, in bounds of the live read-write mapping,
            // disjoint from every other piece, borrowed mutably; volatile so
            // that the store is not elided.
            unsafe { std::ptr::write_volatile(self.ptr.add(off), byte) };
            off += page;
        }
    }
}

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
/// [`PMD_SHARE_ALIGN`]); `None` lets the kernel choose.
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

/// Alignment that lets shared hugetlb mappings share page tables: on
/// x86-64 the kernel shares one PMD page (the page-table page of 512 2 MiB
/// entries) among every process that maps the same file range at a
/// 1 GiB-aligned address with address ≡ file offset (mod 1 GiB)
/// (`huge_pmd_share`). Regions map file offset 0, so a 1 GiB-aligned
/// address is enough.
pub const PMD_SHARE_ALIGN: usize = 1 << 30;

/// Bytes of a mapping of file offset 0 at `addr` that can share page
/// tables with other processes: the whole 1 GiB ranges it covers, when the
/// address is 1 GiB-aligned and the pages are hugetlb pages smaller than
/// 1 GiB (1 GiB pages sit directly in the PUD and need no PMD page).
pub fn pmd_shareable_bytes(addr: usize, len: usize, hugetlb_page: Option<u64>) -> u64 {
    match hugetlb_page {
        Some(p) if (p as usize) < PMD_SHARE_ALIGN && addr % PMD_SHARE_ALIGN == 0 => {
            (len / PMD_SHARE_ALIGN * PMD_SHARE_ALIGN) as u64
        }
        _ => 0,
    }
}

/// Address space reserved with an inaccessible, unbacked mapping
/// (`PROT_NONE`, `MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE`): nothing can
/// touch it and it commits no memory. Unmapped on drop.
struct AddressReservation {
    start: usize,
    len: usize,
}

impl AddressReservation {
    fn new(len: usize) -> Result<Self, SysError> {
        // SAFETY: a null hint lets the kernel choose a fresh range; the
        // mapping is inaccessible and owned by the returned value.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| {
            SysError::os(
                format!("mmap(len={len}, PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE)"),
                e,
            )
        })?;
        Ok(AddressReservation {
            start: p as usize,
            len,
        })
    }

    fn unmap(start: usize, len: usize) -> Result<(), SysError> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: only ever called on parts of this reservation, which
        // nothing in the program references.
        unsafe { rustix::mm::munmap(start as *mut c_void, len) }
            .map_err(|e| SysError::os(format!("munmap(addr={start:#x}, len={len})"), e))
    }

    /// Unmaps the reservation around `keep..keep + keep_len`, which the
    /// caller has mapped over.
    fn release_around(self, keep: usize, keep_len: usize) -> Result<(), SysError> {
        let this = std::mem::ManuallyDrop::new(self);
        let end = this.start + this.len;
        let head = Self::unmap(this.start, keep - this.start);
        let tail = Self::unmap(keep + keep_len, end - (keep + keep_len));
        head.and(tail)
    }
}

impl Drop for AddressReservation {
    fn drop(&mut self) {
        if let Err(e) = Self::unmap(self.start, self.len) {
            log::warn!("{e}");
        }
    }
}

/// Maps `len` bytes with `map_at`: at a kernel-chosen address
/// (`map_at(None)`), or, with `align`, at the first `align`-aligned
/// address inside a fresh [`AddressReservation`] of `len + align` bytes
/// (`map_at(Some(addr))` must map exactly `len` bytes there with
/// `MAP_FIXED` semantics), releasing the rest of the reservation
/// afterwards.
///
/// `len` must be all the mapping will cover (a multiple of `page`, the
/// mapping's page size) and an `align` above `page` a multiple of it:
/// what `map_at` maps then lies inside the reservation, which is checked
/// before it is called.
fn placed(
    call: &dyn Fn() -> String,
    len: usize,
    page: usize,
    align: Option<usize>,
    map_at: impl FnOnce(Option<usize>) -> Result<*mut c_void, SysError>,
) -> Result<NonNull<u8>, SysError> {
    let nonnull = |p: *mut c_void| {
        NonNull::new(p.cast::<u8>())
            .ok_or_else(|| SysError::invalid(call(), "kernel returned address 0"))
    };
    let align = match align {
        // The kernel aligns to the page size by itself.
        Some(a) if a > page => a,
        _ => return nonnull(map_at(None)?),
    };
    if !align.is_power_of_two() || align % page != 0 || len % page != 0 {
        return Err(SysError::invalid(
            call(),
            format!(
                "alignment {align} and length {len} are not both multiples of the page size \
                 {page}, or the alignment is not a power of two"
            ),
        ));
    }
    let total = len
        .checked_add(align)
        .ok_or_else(|| SysError::invalid(call(), "length overflows"))?;
    let res = AddressReservation::new(total)?;
    let at = res.start.div_ceil(align) * align;
    // The reservation starts page-aligned, so `at` is less than `align`
    // past it and `len` more bytes end inside it.
    if at + len > res.start + res.len {
        return Err(SysError::invalid(
            call(),
            format!(
                "{len} bytes at {at:#x} would pass the end of the reservation {:#x}+{}",
                res.start, res.len
            ),
        ));
    }
    // On failure `res` drops and unmaps the whole range, including whatever
    // a failed MAP_FIXED left there.
    let p = map_at(Some(at))?;
    if p as usize != at {
        return Err(SysError::invalid(
            call(),
            format!("kernel mapped at {:#x} instead of {at:#x}", p as usize),
        ));
    }
    if let Err(e) = res.release_around(at, len) {
        // The mapping is in place; only address space of the reservation
        // may be left. Report, keep going.
        log::warn!("releasing the reservation around {at:#x}: {e}");
    }
    nonnull(p)
}

/// Returns the page size of the filesystem behind `fd` when it is hugetlbfs
/// (memfds created with a huge page size included), `None` otherwise.
pub fn hugetlbfs_page_size(fd: BorrowedFd<'_>) -> Option<usize> {
    let st = rustix::fs::fstatfs(fd).ok()?;
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as u64 & 0xffff_ffff;
    if f_type == HUGETLBFS_MAGIC {
        #[allow(clippy::unnecessary_cast)]
        usize::try_from(st.f_bsize as i64).ok().filter(|b| *b > 0)
    } else {
        None
    }
}

/// Maps `len` bytes of the file `fd` at `offset`, `MAP_SHARED`, read-write.
///
/// `fd` must be open read-write. When the file lives on hugetlbfs (including
/// memfds created with a huge page size) `len` is rounded up to the huge
/// page size, otherwise to the base page size; `offset` must be a multiple
/// of that page size. Touching memory beyond the end of the file raises
/// SIGBUS, so size the file first (see [`set_len`]).
pub fn mmap_fd(fd: BorrowedFd<'_>, len: usize, offset: u64) -> Result<Mapping, SysError> {
    mmap_fd_placed(fd, len, offset, None)
}

/// [`mmap_fd`] at an address that is a multiple of `align` (e.g.
/// [`PMD_SHARE_ALIGN`]); `None`, or an alignment not above the page size,
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

/// `memfd_create(name, MFD_CLOEXEC [| MFD_HUGETLB | size bits])`.
///
/// With a huge page size the file lives on the internal hugetlbfs mount and
/// its length (see [`set_len`]) must be a multiple of that size.
pub fn memfd_create(name: &str, huge_page_size: Option<u64>) -> Result<OwnedFd, SysError> {
    let call = || {
        let mut s = format!("memfd_create(name={name:?}, MFD_CLOEXEC");
        if let Some(h) = huge_page_size {
            s.push_str("|MFD_HUGETLB|");
            s.push_str(&format_size(h));
        }
        s.push(')');
        s
    };
    // Sealing allowed, so that its size can be sealed (see [`seal_size`]).
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    if let Some(size) = huge_page_size {
        let log2 = huge_page_log2(&call(), size)?;
        flags |= MemfdFlags::HUGETLB | MemfdFlags::from_bits_retain(log2 << HUGE_SHIFT);
    }
    rustix::fs::memfd_create(name, flags).map_err(|e| SysError::os(call(), e))
}

/// `fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)`:
/// fixes a memfd's size for good, so that no process that opens it (as
/// `/proc/PID/fd/N`) can truncate it under the others, who would get
/// SIGBUS past the new end.
pub fn seal_size(fd: BorrowedFd<'_>) -> Result<(), SysError> {
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL).map_err(
        |e| {
            SysError::os(
                format!(
                    "fcntl(fd={}, F_ADD_SEALS, F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL)",
                    fd.as_raw_fd()
                ),
                e,
            )
        },
    )
}

/// The seals of a memfd (`F_GET_SEALS`): whether its size is sealed
/// (`F_SEAL_SHRINK` and `F_SEAL_GROW`).
pub fn size_sealed(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    use rustix::fs::SealFlags;
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|e| SysError::os(format!("fcntl(fd={}, F_GET_SEALS)", fd.as_raw_fd()), e))?;
    Ok(seals.contains(SealFlags::SHRINK | SealFlags::GROW))
}

/// `ftruncate(fd, len)`: sets the size of a memfd, hugetlbfs or `/dev/shm`
/// file.
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> Result<(), SysError> {
    rustix::fs::ftruncate(fd, len)
        .map_err(|e| SysError::os(format!("ftruncate(fd={}, len={len})", fd.as_raw_fd()), e))
}

/// Whether the kernel serves the open file `fd` by DAX (its pages are the
/// device's memory, no page cache): `statx`'s `STATX_ATTR_DAX`. `None`
/// where the kernel does not report the attribute (before 5.8).
pub fn is_dax_file(fd: BorrowedFd<'_>) -> Result<Option<bool>, SysError> {
    let st = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .map_err(|e| SysError::os(format!("statx(fd={}, AT_EMPTY_PATH)", fd.as_raw_fd()), e))?;
    let dax = rustix::fs::StatxAttributes::DAX;
    Ok(st
        .stx_attributes_mask
        .contains(dax)
        .then_some(st.stx_attributes.contains(dax)))
}

/// `statx(path)` (symbolic links followed, so `/proc/PID/map_files/…`
/// reaches the mapped file): whether the kernel serves the file by DAX,
/// as [`is_dax_file`] does for an open file.
pub fn is_dax_path(path: &std::path::Path) -> Result<Option<bool>, SysError> {
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::empty(),
        rustix::fs::StatxFlags::BASIC_STATS,
    )
    .map_err(|e| SysError::os(format!("statx({})", path.display()), e))?;
    let dax = rustix::fs::StatxAttributes::DAX;
    Ok(st
        .stx_attributes_mask
        .contains(dax)
        .then_some(st.stx_attributes.contains(dax)))
}

/// `struct fsxattr` of `<linux/fs.h>`, what `FS_IOC_FSGETXATTR` reads and
/// `FS_IOC_FSSETXATTR` writes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct FsXattr {
    xflags: u32,
    extsize: u32,
    nextents: u32,
    projid: u32,
    cowextsize: u32,
    pad: [u8; 8],
}

/// `FS_XFLAG_DAX`: the file's own DAX flag (`chattr +x`, `xfs_io -c
/// 'chattr +x'`), what a `dax=inode` mount (ext4, xfs) reads.
const FS_XFLAG_DAX: u32 = 0x0000_8000;
const FS_IOC_FSGETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<FsXattr>(b'X', 31);
const FS_IOC_FSSETXATTR: rustix::ioctl::Opcode = rustix::ioctl::opcode::write::<FsXattr>(b'X', 32);

fn fs_xattr(fd: BorrowedFd<'_>) -> Result<FsXattr, SysError> {
    // SAFETY: FS_IOC_FSGETXATTR writes one `struct fsxattr`, which FsXattr
    // is (repr(C), 28 bytes, every bit pattern valid).
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Getter::<FS_IOC_FSGETXATTR, FsXattr>::new(),
        )
    }
    .map_err(|e| {
        SysError::os(
            format!("ioctl(fd={}, FS_IOC_FSGETXATTR)", fd.as_raw_fd()),
            e,
        )
    })
}

/// Whether the file or directory `fd` has its own DAX flag
/// (`FS_XFLAG_DAX`, `FS_IOC_FSGETXATTR`). On a `dax=inode` mount a file is
/// DAX when it has the flag *as the kernel loads its inode*: a change
/// applies when the inode is next read from disk, and a new file takes
/// its directory's flag.
pub fn dax_flag(fd: BorrowedFd<'_>) -> Result<bool, SysError> {
    Ok(fs_xattr(fd)?.xflags & FS_XFLAG_DAX != 0)
}

/// Sets or clears the DAX flag of `fd` (`FS_IOC_FSSETXATTR`, the other
/// flags kept).
pub fn set_dax_flag(fd: BorrowedFd<'_>, on: bool) -> Result<(), SysError> {
    let mut x = fs_xattr(fd)?;
    if on {
        x.xflags |= FS_XFLAG_DAX;
    } else {
        x.xflags &= !FS_XFLAG_DAX;
    }
    // SAFETY: FS_IOC_FSSETXATTR reads one `struct fsxattr`, which FsXattr is.
    unsafe {
        rustix::ioctl::ioctl(
            fd,
            rustix::ioctl::Setter::<FS_IOC_FSSETXATTR, FsXattr>::new(x),
        )
    }
    .map_err(|e| {
        SysError::os(
            format!(
                "ioctl(fd={}, FS_IOC_FSSETXATTR, FS_XFLAG_DAX={on})",
                fd.as_raw_fd()
            ),
            e,
        )
    })
}

/// `open(dir, O_TMPFILE|O_RDWR|O_CLOEXEC, mode)`: an unnamed file in `dir`
/// (tmpfs and hugetlbfs support it) that vanishes with its last reference
/// unless [`link_tmpfile`] gives it a name.
pub fn open_tmpfile(dir: &std::path::Path, mode: u32) -> Result<OwnedFd, SysError> {
    rustix::fs::open(
        dir,
        rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| {
        SysError::os(
            format!("open({}, O_TMPFILE|O_RDWR, mode={mode:#o})", dir.display()),
            e,
        )
    })
}

/// Gives a file opened with [`open_tmpfile`] the name `path`:
/// `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, path, AT_SYMLINK_FOLLOW)`.
/// Atomic and exclusive: `Ok(false)` when `path` exists already.
pub fn link_tmpfile(fd: BorrowedFd<'_>, path: &std::path::Path) -> Result<bool, SysError> {
    let from = format!("/proc/self/fd/{}", fd.as_raw_fd());
    match rustix::fs::linkat(
        rustix::fs::CWD,
        from.as_str(),
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(SysError::os(
            format!("linkat({from}, {}, AT_SYMLINK_FOLLOW)", path.display()),
            e,
        )),
    }
}

/// `flock(fd, op)`, retried on `EINTR`; `Ok(false)` when a non-blocking
/// request would block.
pub fn flock(fd: BorrowedFd<'_>, op: rustix::fs::FlockOperation) -> Result<bool, SysError> {
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            Err(e) => {
                return Err(SysError::os(
                    format!("flock(fd={}, {op:?})", fd.as_raw_fd()),
                    e,
                ))
            }
        }
    }
}

/// `shm_open(name, O_RDWR|O_CREAT|O_EXCL, mode)`: creates a new POSIX shared
/// memory object (a file in `/dev/shm`). Fails with `EEXIST` if it exists.
pub fn posix_shm_create(name: &str, mode: u32) -> Result<OwnedFd, SysError> {
    use rustix::shm;
    shm::open(
        name,
        shm::OFlags::RDWR | shm::OFlags::CREATE | shm::OFlags::EXCL,
        shm::Mode::from_bits_truncate(mode),
    )
    .map_err(|e| {
        SysError::os(
            format!("shm_open(name={name:?}, O_RDWR|O_CREAT|O_EXCL, mode={mode:#o})"),
            e,
        )
    })
}

/// Opens an existing POSIX shared memory object read-write: what
/// `shm_open(name, O_RDWR)` opens, `/dev/shm/NAME`, through
/// [`OpenCheck`] (no link followed, no FIFO waited on, a regular file).
pub fn posix_shm_open(name: &str) -> Result<OwnedFd, SysError> {
    let name = name.strip_prefix('/').unwrap_or(name);
    if name.is_empty() || name.contains('/') {
        return Err(SysError::invalid(
            format!("shm_open(name={name:?})"),
            "a POSIX shared memory name is one path component",
        ));
    }
    let path = std::path::Path::new("/dev/shm").join(name);
    Ok(OpenCheck::read_write().open(&path)?.into_fd())
}

/// `shm_unlink(name)`: removes a POSIX shared memory object from `/dev/shm`.
pub fn posix_shm_unlink(name: &str) -> Result<(), SysError> {
    rustix::shm::unlink(name).map_err(|e| SysError::os(format!("shm_unlink(name={name:?})"), e))
}

/// Whether the kernel knows `MADV_POPULATE_WRITE` (Linux 5.14+).
///
/// Asks with an empty range: the kernel validates the advice before it
/// looks at the range, so this is `EINVAL` exactly when the advice is
/// unknown, and touches no memory either way.
pub fn populate_write_supported() -> bool {
    // SAFETY: a zero-length range covers no memory; address 0 is page-aligned.
    let r = unsafe { rustix::mm::madvise(std::ptr::null_mut(), 0, Advice::LinuxPopulateWrite) };
    r.is_ok()
}

/// `fallocate(fd, 0, 0, len)`: allocates every block of a file now, so that
/// a full tmpfs is `ENOSPC` here instead of SIGBUS at first touch.
pub fn fallocate(fd: BorrowedFd<'_>, len: u64) -> Result<(), SysError> {
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len).map_err(|e| {
        SysError::os(
            format!(
                "fallocate(fd={}, mode=0, offset=0, len={len})",
                fd.as_raw_fd()
            ),
            e,
        )
    })
}

/// How [`Mapping::persist_range`] made a range durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMethod {
    /// Nothing to do (an empty range).
    None,
    /// `CLWB` per cache line (writes back, keeps the line), `SFENCE`.
    Clwb,
    /// `CLFLUSHOPT` per cache line, `SFENCE`.
    Clflushopt,
    /// `CLFLUSH` per cache line (serialized), `SFENCE`.
    Clflush,
    /// `msync(MS_SYNC)`: the page cache or file system writes it back.
    Msync,
}

impl PersistMethod {
    /// Its name, lower case.
    pub fn as_str(self) -> &'static str {
        match self {
            PersistMethod::None => "none",
            PersistMethod::Clwb => "clwb",
            PersistMethod::Clflushopt => "clflushopt",
            PersistMethod::Clflush => "clflush",
            PersistMethod::Msync => "msync",
        }
    }
}

/// CPU cache write-back for persistent memory.
mod cache {
    use super::PersistMethod;

    /// The cache line size the flush steps by (x86-64).
    const LINE: usize = 64;

    /// The best cache write-back instruction this CPU has (CPUID leaf 7:
    /// EBX bit 24 CLWB, bit 23 CLFLUSHOPT; leaf 1: EDX bit 19 CLFLUSH).
    #[cfg(target_arch = "x86_64")]
    // CPUID is an unsafe intrinsic before Rust 1.87 (the pinned 1.85).
    #[allow(unused_unsafe)]
    pub(super) fn best() -> Option<PersistMethod> {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        use std::sync::OnceLock;
        static BEST: OnceLock<Option<PersistMethod>> = OnceLock::new();
        *BEST.get_or_init(|| {
            // SAFETY: CPUID exists on every x86-64 CPU; leaf 0 says how
            // many leaves there are.
            let max = unsafe { __cpuid(0) }.eax;
            if max >= 7 {
                // SAFETY: leaf 7 exists (checked above).
                let ebx = unsafe { __cpuid_count(7, 0) }.ebx;
                if ebx & (1 << 24) != 0 {
                    return Some(PersistMethod::Clwb);
                }
                if ebx & (1 << 23) != 0 {
                    return Some(PersistMethod::Clflushopt);
                }
            }
            // SAFETY: leaf 1 exists on every x86-64 CPU.
            let edx = unsafe { __cpuid(1) }.edx;
            (edx & (1 << 19) != 0).then_some(PersistMethod::Clflush)
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn best() -> Option<PersistMethod> {
        None
    }

    /// Writes back every cache line of `[addr, addr + n)` and fences;
    /// `None` where the CPU has no such instruction (msync then).
    pub(super) fn flush(addr: usize, n: usize) -> Option<PersistMethod> {
        let m = best()?;
        #[cfg(target_arch = "x86_64")]
        {
            let mut line = addr / LINE * LINE;
            while line < addr + n {
                let p = line as *const u8;
                // SAFETY: `p` is in a cache line that overlaps a range the
                // caller checked lies in its mapping; these instructions
                // only write the line back (or evict it), never change
                // memory, and are supported (CPUID above).
                unsafe {
                    match m {
                        PersistMethod::Clwb => {
                            std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                        PersistMethod::Clflushopt => {
                            std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                        _ => {
                            std::arch::asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
                        }
                    }
                }
                line += LINE;
            }
            // SAFETY: SFENCE is an x86-64 baseline instruction; it orders
            // the write-backs before later stores.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (addr, n, LINE);
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn page() -> usize {
        base_page_size()
    }

    #[test]
    fn fsxattr_opcodes_are_the_kernels() {
        // <linux/fs.h>: _IOR('X', 31, struct fsxattr), _IOW('X', 32, ...).
        assert_eq!(std::mem::size_of::<FsXattr>(), 28);
        assert_eq!(FS_IOC_FSGETXATTR as u64, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR as u64, 0x401c_5820);
    }

    #[test]
    fn dax_flag_and_statx_of_a_page_cache_file() {
        // The target directory: ext4 (or another file system with
        // FS_IOC_FSGETXATTR), not DAX.
        let dir = std::env::temp_dir();
        let path = dir.join(format!("hugeshm-sys-daxflag-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let flag = dax_flag(f.as_fd());
        let by_path = is_dax_path(&path);
        let by_fd = is_dax_file(f.as_fd());
        std::fs::remove_file(&path).unwrap();
        match flag {
            Ok(on) => assert!(!on),
            // tmpfs before 6.x has no FS_IOC_FSGETXATTR.
            Err(e) => assert_eq!(e.errno(), Some(libc::ENOTTY), "{e}"),
        }
        assert_eq!(by_path.unwrap(), by_fd.unwrap());
        assert!(is_dax_path(&dir.join("no-such-file-hugeshm")).is_err());
    }

    #[test]
    fn anon_private_rounds_and_roundtrips() {
        let mut m = mmap_anon(1, false, None).expect("mmap");
        assert_eq!(m.len(), page());
        assert_eq!(m.page_size(), page());
        assert_eq!(m.addr() % page(), 0);
        m.write_at(10, b"abc").unwrap();
        let mut buf = [0u8; 3];
        m.read_at(10, &mut buf).unwrap();
        assert_eq!(&buf, b"abc");
        assert!(m.read_at(page() - 1, &mut buf).is_err());
        assert!(m.write_at(usize::MAX, b"x").is_err());
        m.release().expect("munmap");
    }

    #[test]
    fn sum_u64_reads_every_word() {
        let mut m = mmap_anon(2 * page(), false, None).expect("mmap");
        m.fill(1);
        let words = (2 * page() / 8) as u64;
        assert_eq!(
            m.sum_u64_range(0, m.len()).unwrap(),
            words.wrapping_mul(0x0101_0101_0101_0101)
        );
        assert_eq!(m.sum_u64_range(8, 24).unwrap(), 3 * 0x0101_0101_0101_0101);
        assert!(m.sum_u64_range(4, 8).is_err(), "unaligned offset");
        assert!(
            m.sum_u64_range(0, 12).is_err(),
            "length not a multiple of 8"
        );
        assert!(m.sum_u64_range(page(), 2 * page()).is_err(), "out of range");
        m.release().expect("munmap");
    }

    #[test]
    fn affinity_round_trips() {
        let cpus = affinity().expect("sched_getaffinity");
        assert!(!cpus.is_empty());
        set_affinity(&cpus[..1]).expect("pin to one CPU");
        assert_eq!(affinity().unwrap(), cpus[..1].to_vec());
        set_affinity(&cpus).expect("restore");
        assert_eq!(affinity().unwrap(), cpus);
        assert!(set_affinity(&[]).is_err());
        assert!(set_affinity(&[u32::MAX]).is_err());
    }

    #[test]
    fn anon_shared_fill_touch_populate() {
        let mut m = mmap_anon(3 * page() + 5, true, None).expect("mmap");
        assert_eq!(m.len(), 4 * page());
        m.fill(0x5a);
        m.touch();
        m.populate_write()
            .expect("MADV_POPULATE_WRITE on kernel >= 5.14");
        let mut buf = [0u8; 1];
        for off in [0, page(), m.len() - 1] {
            m.read_at(off, &mut buf).unwrap();
            assert_eq!(buf[0], 0x5a, "touch/populate must preserve contents");
        }
        drop(m);
    }

    /// Rss of the mapping at `addr` in /proc/self/smaps, in kB.
    fn rss_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        assert!(lines.next().is_some(), "no smaps entry at {head}");
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Touching faults every page in (a release build once compiled the
    /// idempotent atomic away and touched nothing: run these tests with
    /// `--release` too), and so does the peers' plain touch loop.
    #[test]
    fn touch_faults_every_page_in() {
        let n = 64;
        let m = mmap_anon(n * page(), true, None).unwrap();
        assert_eq!(rss_kb(m.addr()), 0);
        m.touch();
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
        let mut m = mmap_anon(n * page(), true, None).unwrap();
        let pieces = m.pieces_mut(&[(0, n * page())]).unwrap();
        for mut p in pieces {
            p.touch_pages(page(), 1);
        }
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
        let mut b = [0u8];
        m.read_at(5 * page(), &mut b).unwrap();
        assert_eq!(b[0], 1);
        // MAP_POPULATE faults everything before mmap returns.
        let m = mmap_anon_populate(n * page(), true, None).unwrap();
        assert_eq!(rss_kb(m.addr()), (n * page() / 1024) as u64);
    }

    #[test]
    fn touch_pages_unaligned_covers_every_page() {
        let mut m = mmap_anon(4 * page(), false, None).unwrap();
        m.fill(7);
        m.touch_range(100, 2 * page(), page()).unwrap();
        m.touch_range(0, m.len(), 0).unwrap();
        assert!(m.touch_range(100, m.len(), 0).is_err());
        let mut b = [0u8];
        m.read_at(2 * page() + 99, &mut b).unwrap();
        assert_eq!(b[0], 7);
    }

    #[test]
    fn pieces_are_disjoint_and_fill() {
        let mut m = mmap_anon(4 * page(), false, None).unwrap();
        assert!(m.pieces_mut(&[(0, 2 * page()), (page(), page())]).is_err());
        assert!(m.pieces_mut(&[(3 * page(), 2 * page())]).is_err());
        let pieces = m
            .pieces_mut(&[(0, 2 * page()), (2 * page(), 2 * page())])
            .unwrap();
        std::thread::scope(|s| {
            for (i, mut p) in pieces.into_iter().enumerate() {
                s.spawn(move || p.fill(i as u8 + 1));
            }
        });
        let mut b = [0u8; 1];
        m.read_at(page(), &mut b).unwrap();
        assert_eq!(b[0], 1);
        m.read_at(4 * page() - 1, &mut b).unwrap();
        assert_eq!(b[0], 2);
        m.store_u32_release(8, 7).unwrap();
        assert_eq!(m.load_u32_acquire(8).unwrap(), 7);
        assert!(m.load_u32_acquire(6).is_err());
        assert!(m.populate_read_range(1, page()).is_err());
    }

    /// `zero_by` zeroes every byte of its piece, whatever the chunk (one
    /// that does not divide the piece, one larger than it), and nothing
    /// outside it.
    #[test]
    fn zero_by_zeroes_the_piece_and_only_it() {
        let len = 4 * page();
        let mut m = mmap_anon(len, false, None).unwrap();
        for chunk in [4096, 3000, 1, 10 * len] {
            let all = m.pieces_mut(&[(0, len)]).unwrap();
            all.into_iter().for_each(|mut p| p.fill(0xff));
            let (at, n) = (100, len - 300);
            let mut piece = m.pieces_mut(&[(at, n)]).unwrap().pop().unwrap();
            piece.zero_by(chunk);
            let mut b = vec![0u8; len];
            m.read_at(0, &mut b).unwrap();
            assert!(b[..at].iter().all(|&x| x == 0xff), "chunk {chunk}: before");
            assert!(
                b[at..at + n].iter().all(|&x| x == 0),
                "chunk {chunk}: piece"
            );
            assert!(
                b[at + n..].iter().all(|&x| x == 0xff),
                "chunk {chunk}: after"
            );
        }
    }

    #[test]
    fn mbind_to_the_node_we_have() {
        let m = mmap_anon(4 * page(), true, None).unwrap();
        // Node 0 exists on every NUMA-capable kernel; without NUMA the
        // call is ENOSYS.
        match m.mbind(&MemPolicy::Bind(vec![0]), true) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.errno(), Some(libc::ENOSYS), "{e}"),
        }
        assert!(m.mbind(&MemPolicy::Bind(vec![5000]), false).is_err());
        assert_eq!(
            MemPolicy::Interleave(vec![0, 1]).to_string(),
            "MPOL_INTERLEAVE 0,1"
        );
        let p = thread_mempolicy().unwrap_or(MemPolicy::Default);
        assert!(!matches!(p, MemPolicy::Bind(ref n) if n.is_empty()));
        assert_eq!(NodeMask::of(&[0, 65, 1023]).nodes(), vec![0, 65, 1023]);
    }

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

    #[test]
    fn sysv_plain_lifecycle() {
        let size = 3 * page() as u64 + 1;
        let id = shm_get(IPC_PRIVATE, size, ShmFlags::create_new(None)).expect("shmget");
        let result = std::panic::catch_unwind(|| {
            let st = shm_stat(id).unwrap();
            assert_eq!(st.size, size);
            assert_eq!(st.nattch, 0);
            assert_eq!(st.cpid, std::process::id() as i32);
            assert_eq!(st.mode & 0o777, 0o600);
            assert!(!st.marked_for_removal());

            assert_eq!((st.lpid, st.atime), (0, 0), "never attached");

            let mut a = shm_attach(id).unwrap();
            // What the kernel maps: the size rounded up to the page size.
            assert_eq!(a.len(), 4 * page());
            assert_eq!(a.page_size(), page());
            let st = shm_stat(id).unwrap();
            assert_eq!(st.lpid, std::process::id() as i32);
            assert!(st.atime > 0);
            // Placed: aligned, the same length, and the kernel's first
            // attachment gone again.
            let b = shm_attach_placed(id, Some(2 << 20)).unwrap();
            assert_eq!(b.addr() % (2 << 20), 0);
            assert_eq!((b.len(), b.page_size()), (4 * page(), page()));
            assert_eq!(shm_stat(id).unwrap().nattch, 2);
            a.write_at(size as usize - 4, b"sysv").unwrap();
            a.touch();
            a.populate_write().unwrap();
            let mut buf = [0u8; 4];
            b.read_at(size as usize - 4, &mut buf).unwrap();
            assert_eq!(&buf, b"sysv");
            b.release().unwrap();
            assert_eq!(shm_stat(id).unwrap().nattch, 1);

            shm_remove(id).unwrap();
            let st = shm_stat(id).unwrap();
            assert!(st.marked_for_removal());
            assert_eq!(st.key, 0);
            drop(a);
            let err = shm_stat(id).unwrap_err();
            assert!(matches!(
                err.errno(),
                Some(libc::EINVAL) | Some(libc::EIDRM)
            ));
            assert_eq!(err.call(), format!("shmctl(shmid={id}, IPC_STAT)"));
        });
        let _ = shm_remove(id);
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
    }

    #[test]
    fn sysv_error_message_has_key_size_and_flags() {
        // Non-existent key without IPC_CREAT fails ENOENT.
        let flags = ShmFlags {
            huge_page_size: Some(2 << 20),
            ..ShmFlags::default()
        };
        let err = shm_get(0x7a5e_0001, 4194304, flags).unwrap_err();
        assert_eq!(err.errno(), Some(libc::ENOENT));
        assert_eq!(
            err.to_string(),
            format!(
                "shmget(key=0x7a5e0001, size=4194304, SHM_HUGETLB|2MiB|0600): {}",
                std::io::Error::from_raw_os_error(libc::ENOENT)
            )
        );
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(shm_attach(-1).is_err());
        assert!(shm_remove(-1).is_err());
    }

    #[test]
    fn posix_shm_create_open_unlink() {
        let name = format!("hugeshm-region-test-{}", std::process::id());
        let fd = posix_shm_create(&name, 0o600).expect("shm_open");
        let res = (|| -> Result<(), SysError> {
            assert_eq!(
                posix_shm_create(&name, 0o600).unwrap_err().errno(),
                Some(libc::EEXIST)
            );
            set_len(fd.as_fd(), page() as u64)?;
            let mut m = mmap_fd(fd.as_fd(), page(), 0)?;
            m.write_at(0, b"q")?;
            let fd2 = posix_shm_open(&name)?;
            let m2 = mmap_fd(fd2.as_fd(), page(), 0)?;
            let mut b = [0u8];
            m2.read_at(0, &mut b)?;
            assert_eq!(&b, b"q");
            Ok(())
        })();
        posix_shm_unlink(&name).expect("shm_unlink");
        res.unwrap();
        assert!(posix_shm_unlink(&name).is_err());
    }

    #[test]
    fn format_size_names() {
        assert_eq!(format_size(2 << 20), "2MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(64 << 10), "64KiB");
        assert_eq!(format_size(100), "100B");
        assert_eq!(
            ShmFlags::create_new(Some(1 << 30)).to_string(),
            "IPC_CREAT|IPC_EXCL|SHM_HUGETLB|1GiB|0600"
        );
    }
}
