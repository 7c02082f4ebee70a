//! # hugeshm-region
//!
//! Huge-page shared memory regions for Linux, the way a database allocates
//! its shared area: all or nothing on the page size asked for, reserved
//! before use, pre-faulted in parallel without risking SIGBUS, verified
//! against `/proc/self/smaps`, and reported with numbers.
//!
//! This is the only hugeshm crate that contains `unsafe` code; every other
//! crate builds on the safe API exported here.
//!
//! ```
//! use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
//!
//! # fn main() -> Result<(), hugeshm_region::RegionError> {
//! // Huge pages if the pool has them, else the whole region on 4 KiB pages.
//! let (mut region, report) = RegionBuilder::new(8 << 20)
//!     .backend(Backend::Anon)
//!     .page_size(PageSize::HUGE_2M)
//!     .policy(Policy::Try)
//!     .prefault_threads(2)
//!     .create()?;
//! if report.fell_back {
//!     eprintln!("warning: {}", report.reason.as_deref().unwrap_or(""));
//! }
//! assert_eq!(report.resident_bytes, report.size_bytes);
//! assert_eq!(report.verified_page_size_bytes, report.page_size_bytes);
//! region.write_at(0, b"hello")?;
//! region.destroy()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## What `create` does, in order
//!
//! 1. **Plan** from one host snapshot (`hugeshm-probe`): the page size
//!    (`largest` = the largest size whose pool holds the region), the size
//!    rounded up to a page multiple, and the pool check
//!    (available = free − reserved). A short pool is a [`Shortfall`] with the
//!    fix, e.g. `2 MiB pages: required 10432, available 288 (free 800,
//!    reserved 512); to fix: sysctl -w vm.nr_hugepages=10944`. Policy
//!    [`Policy::Only`] fails with it; [`Policy::Try`] plans the whole region
//!    on base pages and says why; [`Policy::Off`] never uses huge pages.
//! 2. **Check `RLIMIT_MEMLOCK`** when `mlock` is asked, before creating
//!    anything.
//! 3. **Create and map** the object ([`Backend`]; naming rules in
//!    [`naming`]). Shared hugetlb memory is reserved here (never
//!    `MAP_NORESERVE`); the kernel's own `ENOMEM` (a race) becomes the same
//!    shortfall error, or the `try` fall-back. tmpfs files are
//!    `fallocate`d so a full tmpfs is an error with numbers, not SIGBUS.
//! 4. **Pre-fault** with N threads, each a contiguous range, with
//!    `MADV_POPULATE_WRITE` (errors instead of SIGBUS), falling back to
//!    touching each page only where the kernel lacks it.
//! 5. **Verify** in `/proc/self/smaps`: `KernelPageSize` (or THP coverage)
//!    and resident bytes. Smaller pages than asked fail `only` and are
//!    reported under `try`.
//! 6. **mlock**, if asked.
//!
//! Any error on the way removes everything created (segment, file, memfd,
//! mapping, reservation).
//!
//! The foundation is [`sys`]: thin safe wrappers around the system calls,
//! whose errors ([`SysError`]) name the call, its arguments and the errno.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod bench;
mod error;
mod locate;
pub mod memlock;
pub mod naming;
pub mod pool;
mod prefault;
mod region;
mod report;
pub mod sys;
mod types;
mod verify;

pub use bench::{bench_prefault, PrefaultSample};
pub use error::RegionError;
pub use locate::{remove, Locator, NamedObject};
pub use naming::sysv_key;
pub use pool::Shortfall;
pub use prefault::{available_cpus, memset_baseline, MemsetBaseline, Progress, SUB_CHUNK_BYTES};
pub use region::{Region, RegionBuilder};
pub use report::AllocationReport;
pub use sys::SysError;
pub use types::{Backend, PageSize, Policy, PrefaultMethod};
pub use verify::Verification;
