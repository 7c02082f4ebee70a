//! # hugeshm-region
//!
//! Huge-page shared memory regions for Linux. This is the only hugeshm crate
//! that contains `unsafe` code; every other crate builds on the safe API
//! exported here.
//!
//! For now the crate provides the foundation in [`sys`]: thin, safe wrappers
//! around the system calls that create and map shared memory:
//!
//! * anonymous mappings, private or shared, optionally backed by huge pages
//!   (`MAP_HUGETLB` with an explicit page size): [`sys::mmap_anon`];
//! * file-backed shared mappings (memfd, hugetlbfs, `/dev/shm`):
//!   [`sys::mmap_fd`], [`sys::memfd_create`], [`sys::set_len`],
//!   [`sys::posix_shm_create`], [`sys::posix_shm_unlink`];
//! * System V shared memory (`SHM_HUGETLB`): [`sys::shm_get`],
//!   [`sys::shm_attach`], [`sys::shm_remove`], [`sys::shm_stat`];
//! * pre-faulting: [`sys::populate_write`] (`MADV_POPULATE_WRITE`) and the
//!   portable fallback [`sys::Mapping::touch`] / [`sys::touch_pages`].
//!
//! Every failure is a [`SysError`] that names the call, its arguments and the
//! errno, e.g.
//! `shmget(key=0x1234, size=4194304, IPC_CREAT|SHM_HUGETLB|2MiB|0600): Cannot allocate memory (os error 12)`.
//! Nothing in this crate panics on a system call failure; destructors that
//! cannot return an error (`munmap`, `shmdt` in `Drop`) report it on stderr.
//!
//! ```
//! use hugeshm_region::sys;
//!
//! # fn main() -> Result<(), hugeshm_region::SysError> {
//! // A shared anonymous mapping of base pages (no root, no huge pages needed).
//! let mut map = sys::mmap_anon(10_000, true, None)?;
//! assert_eq!(map.len() % sys::base_page_size(), 0);
//! map.write_at(0, b"hello")?;
//! let mut buf = [0u8; 5];
//! map.read_at(0, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! map.unmap()?;
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod sys;

pub use sys::SysError;
