//! # hugeshm-sys
//!
//! Safe wrappers around the Linux system calls behind huge-page shared
//! memory: the one hugeshm crate (besides the C boundary) with `unsafe`.
//! Every block has a `// SAFETY:` line; no function here is `unsafe` to call.
//!
//! Ownership is explicit: a [`Mapping`] owns a range of this process's
//! address space, made by `mmap` ([`MapOptions`]: anonymous memory or a
//! file, shared, on huge pages, at an aligned address) or by `shmat`
//! ([`shm_attach`]), and releases it on drop
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
//! A file mapping ([`MapOptions::map`]) can lose its memory when
//! another process truncates the file: the next access would get SIGBUS.
//! Every file mapping is registered with a process-wide SIGBUS handler
//! that, for a fault inside a registered mapping, maps zero memory over it
//! and marks it lost; the checked accessors then return
//! [`SysError::MappingLost`] (one load per access), and a SIGBUS anywhere
//! else goes to the action that was there before (`mm/sigbus.rs` has the
//! details and the limits).
//!
//! Paths in directories other users can write are opened through
//! [`OpenCheck`] (no link followed, no FIFO waited on, the kind checked
//! after the open).
//!
//! ```
//! let mut m = hugeshm_sys::MapOptions::new(1 << 20).shared().map_anon()?;
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
//!
//! The modules, by area as rustix has them:
//!
//! * `mm`: memory mappings. The [`Mapping`] type and its release, making
//!   mappings ([`MapOptions`]), address placement, faulting pages in
//!   (`madvise`, touches, `mlock`), NUMA policy (`mbind`) and CPU
//!   affinity, shared words and copies, write-back for persistence, the
//!   SIGBUS guard of file mappings.
//! * `shm`: shared memory objects: POSIX (`/dev/shm`) and System V.
//! * `fs`: files: memfd and its seals, `O_TMPFILE`, `flock`, `fallocate`,
//!   DAX, the hugetlbfs page size, the checked open of a path in a
//!   directory others can write and the writes relative to an open
//!   directory.
//! * `page`: page sizes; `perf`, `process`, `procmap`: hardware event
//!   counters, processes, `PROCMAP_QUERY`; `users`: the user database
//!   (NSS: `getpwnam_r`, `getpwuid_r`).

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod fs;
mod mm;
mod page;
mod perf;
mod process;
mod procmap;
mod shm;
mod users;

pub use fs::{
    check_trusted_file, create_new, dax_flag, euid, fallocate, flock, hugetlbfs_page_size,
    is_dax_file, is_dax_path, link_tmpfile, memfd_create, open_tmpfile, remove_private_dir,
    seal_size, set_dax_flag, set_len, size_sealed, sudo_uid, CheckedFile, DirHandle, FileKind,
    OpenCheck, Owner,
};
pub use mm::{
    affinity, collapse_block, even_runs, pmd_shareable_bytes, populate_write_supported,
    set_affinity, thread_mempolicy, BlocksCollapsed, MapOptions, Mapping, MemPolicy, PersistMethod,
    PidFd, Piece, COLLAPSE_BLOCK, PMD_SHARE_ALIGN,
};
pub use page::{base_page_size, HUGE_SHIFT};
pub use perf::{PerfCounter, PerfEvent};
pub use process::{
    exec_self, fork_child, in_new_session, process_cpu_seconds, thread_count, thread_cpu_seconds,
    wait_child,
};
pub use procmap::{is_procfs, procmap_query, procmap_query_supported, Vma, VmaQuery};
pub use shm::{
    posix_shm_create, posix_shm_open, posix_shm_unlink, shm_attach, shm_attach_placed, shm_get,
    shm_peek, shm_remove, shm_stat, sysv_devices, ShmFlags, ShmStat, IPC_PRIVATE, SHM_DEST,
    SHM_LOCKED,
};
pub use users::{user_by_name, user_by_uid, User};

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
        mm::sigbus::cause(*code)
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
