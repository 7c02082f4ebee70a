//! # hugeshm-region
//!
//! Huge-page shared memory regions for Linux, the way a database allocates
//! its shared area: all or nothing on the page size asked for, reserved
//! before use, pre-faulted in parallel without risking SIGBUS, verified
//! against `/proc/self/smaps`, and reported with numbers.
//!
//! This crate has no `unsafe` code (`forbid(unsafe_code)`): the system
//! calls are the safe wrappers of `hugeshm-sys`, where the crate's one
//! `Mapping` type owns each mapping.
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
//! if let Some(fallback) = &report.fallback {
//!     eprintln!("warning: {}", fallback.reason);
//! }
//! assert_eq!(report.resident_bytes, report.size_bytes);
//! assert_eq!(report.verified_page_size_bytes, report.page_size_bytes);
//! region.write_at(0, b"hello")?;
//! region.destroy()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## The public API
//!
//! ```text
//! create    RegionBuilder::new(size)  .backend .page_size .policy .numa .name .mode .owner
//!           .directory .mlock .prefault_threads .progress .reclaim .pmd_sharing .probe
//!           .create() -> (Region, AllocationReport (Fallback, Reclaimed))
//!           .create_per_node() -> [(NodeRegion, AllocationReport)]   (part_name: NAME.nodeN)
//!           Backend, PageSize, Policy, Placement, Reclaim, PrefaultMethod
//!           available_cpus (the default number of pre-fault threads)
//! attach    Region::attach(name, backend), Region::attach_shmid, Region::attach_path
//!           Locator::new(name, backend)  .expect_size .expect_page_size .owner .mode .directory
//!           .pmd_sharing .probe  .attach() .attach_with_report() -> AttachReport
//!           .inspect() .attached_pids() .attach_per_node()
//!           .attach_any(): the name in whichever backend of SEARCH_ORDER has it
//! use       Region: read_at write_at fill; atomic_u32(s) atomic_u64(s) load_words store_words
//!           prefetch; populate_read touch_all mlock; persist (PersistMethod); is_lost;
//!           collapse (Collapsed): a base-page fall-back onto 2 MiB THP in place;
//!           verify (Verification), verify_page_size (PageSizeCheck, PageSizeSource);
//!           header (RegionHeader); len, page_size, data_ptr, ... (accessors); close, destroy
//! remove    remove(name, backend), Locator::remove, Locator::remove_per_node, Locator::remove_any
//! list      list_regions, list_regions_on(&Probe, owner: Option<u32>) -> [RegionInfo]
//!           list_sysv_regions_on(&Probe): SysV only, no directory listed
//!           (RegionState, HeaderState, Liveness, NamedObject)
//! names     validate_name, sysv_key, MAX_NAME_LEN
//! errors    RegionError (Shortfall, NodeNeed): facts and numbers;
//!           RegionError::fix() -> Fix, rendered by Renderer; SysError (a system call's)
//! the host  Probe, Roots (hugeshm-probe): the /proc, /sys and fs roots every reader takes
//! formats   modules header (the 4 KiB header: HEADER_BYTES, MAGIC, LAYOUT_VERSION),
//!           memfd_record (the record file; memfd_record_path), naming (name -> object),
//!           interlock (what create does when the name exists)
//! tests     only with the `test-hooks` feature, which only tests turn on:
//!           testhook::STOP_AT_ENV (HUGESHM_TEST_STOP_AT=STEP:FILE stops create at STEP)
//! ```
//!
//! Everything else is the crate's own. Benches build on this API in the
//! `hugeshm` CLI (`bench prefault`, `numa`, `attach`, `pagetables`); the
//! test hook that stops `create` at a step (`testhook`, its steps listed
//! there) is not in a build without the `test-hooks` feature: not in the
//! `hugeshm` binary, not in libhugeshm.so.
//!
//! ## What `create` does, in order
//!
//! 1. **Look at the name** (named regions): if a region of that name
//!    exists, a live holder makes it [`RegionError::AlreadyExists`]
//!    (naming the pids); one nobody holds is refused
//!    ([`RegionError::Orphaned`], saying how to reclaim) unless
//!    [`RegionBuilder::reclaim`] says [`Reclaim::Reuse`] (attach, keep the
//!    contents) or [`Reclaim::Recreate`]. See [`interlock`].
//! 2. **Plan** from one host snapshot (read through the builder's
//!    [`Probe`], the live host by default): the page size
//!    (`largest` = the largest size whose pool holds the region), the size
//!    rounded up to a page multiple, and the pool check
//!    (available = free − reserved). A short pool is a [`Shortfall`] with
//!    the numbers, `2 MiB pages: required 10432, available 288 (free 800,
//!    reserved 512)`, and the fix as data ([`Fix::SetPool`], which the CLI
//!    prints as `sysctl -w vm.nr_hugepages=10944`). Policy
//!    [`Policy::Only`] fails with it; [`Policy::Try`] plans the whole region
//!    on base pages and says why; [`Policy::Off`] never uses huge pages.
//! 3. **Check `RLIMIT_MEMLOCK`** when `mlock` is asked, before creating
//!    anything.
//! 4. **Claim the name, create and map** the object ([`Backend`]; naming
//!    rules in [`naming`]). The name is claimed atomically before any
//!    memory is reserved (`shmget(IPC_EXCL)`; a locked `O_TMPFILE` linked
//!    in place; the memfd [record](memfd_record)), so of concurrent
//!    creators exactly one wins. Shared hugetlb memory is reserved here
//!    (never `MAP_NORESERVE`); the kernel's own `ENOMEM` (a race) becomes
//!    the same shortfall error, or the `try` fall-back. tmpfs files are
//!    `fallocate`d so a full tmpfs is an error with numbers, not SIGBUS.
//!    Hugetlb regions of 1 GiB or more are mapped at a 1 GiB-aligned
//!    address so that attached processes share page tables (below).
//! 5. **Write the [header]**, state `initializing`.
//! 6. **Pre-fault** with N threads, each a contiguous range, with
//!    `MADV_POPULATE_WRITE` (errors instead of SIGBUS), falling back to
//!    touching each page only where the kernel lacks it.
//! 7. **Verify** in `/proc/self/smaps`: `KernelPageSize` (or THP coverage)
//!    and resident bytes. Smaller pages than asked fail `only` and are
//!    reported under `try`.
//! 8. **mlock**, if asked; then the header's state becomes `ready` (one
//!    aligned atomic store).
//!
//! Any error on the way removes everything created (segment, file, memfd,
//! record, mapping, reservation). A creator killed at any point (SIGKILL
//! mid-pre-fault included) leaves a region whose header says
//! `initializing` (or none yet) and whose creator is gone: attach reports
//! [`RegionError::Incomplete`], create refuses until told to recreate.
//!
//! ## Layout
//!
//! Every region starts with a 4 KiB [header] (magic, layout
//! version, state, creator pid and start time, creation time, size, page
//! size, backend, generation, name); the data follow at
//! [`Region::data_offset`] (4096). [`Region::read_at`],
//! [`Region::write_at`] and [`Region::fill`] work on the data;
//! [`Region::data_ptr`] / [`Region::data_len`] describe them.
//!
//! ## Sharing between processes
//!
//! Any process attaches a named region by name ([`Region::attach`],
//! [`Locator`] with expectations): `sysv` by its key, `hugetlbfs`,
//! `posix` and `dax` files by path, `dax` regions on a device-dax by the
//! name in the device's header, `memfd` through its [record](memfd_record). Attach
//! checks the header and refuses, with both values, what does not match:
//! not a hugeshm object ([`RegionError::NotOurs`], which also covers
//! another name's SysV key), a newer layout ([`RegionError::NewerLayout`]),
//! a size, page size or backend other than expected
//! ([`RegionError::HeaderMismatch`]), a creation that has not finished
//! ([`RegionError::Incomplete`]). Attach ([`Locator::attach`]), detach
//! ([`Region::close`]) and destroy ([`Region::destroy`], [`remove`]) are
//! separate; `remove` refuses while anyone holds the region. `anon`
//! regions are shared with `fork`ed children only. [`list_regions`] lists
//! every hugeshm region on the host with its state, orphans included.
//!
//! **Page tables.** A process that maps 1 GiB on 4 KiB pages needs 2 MiB
//! of page tables; on 2 MiB pages 4 KiB (one PMD page), and none of its own
//! when the mapping is at a 1 GiB-aligned address with address ≡ file
//! offset (mod 1 GiB), because the kernel then shares the PMD page among
//! all such processes (`huge_pmd_share`). Creators and attachers place
//! hugetlb regions that way ([`hugeshm_sys::PMD_SHARE_ALIGN`]); the reports say
//! whether it took ([`AllocationReport::aligned_for_pmd_sharing`]).
//! Measured here with 8 processes attaching and touching 1 GiB: 0 bytes
//! of page tables per process on aligned 2 MiB pages, 2052 KiB on 4 KiB
//! pages (`hugeshm bench pagetables` measures it on any host).
//!
//! ## When another process cuts the file short (SIGBUS)
//!
//! Past the end of a file, a mapping has no memory: an access there gets
//! SIGBUS, which kills a process that does not handle it. Who can cut a
//! region short, and what the safe accessors ([`Region::read_at`],
//! [`Region::write_at`], the atomic words, [`Region::load_words`],
//! [`Region::store_words`]) guarantee:
//!
//! | backend | can it be truncated under its holders? | the accessors |
//! |---|---|---|
//! | `sysv` | no (a segment's size is fixed) | never SIGBUS |
//! | `anon` | no | never SIGBUS |
//! | `memfd` | no: its size is sealed (`F_SEAL_SHRINK`, `F_SEAL_GROW`) | never SIGBUS |
//! | `posix`, `hugetlbfs`, `dax` (a file) | yes, by any process that may write the file (its owner, or anyone its mode lets) | the guard: [`RegionError::Lost`] |
//! | `dax` on a device-dax | no (a device) | the guard, for memory errors |
//!
//! **The guard** (hugeshm-sys): every file mapping is registered with a
//! process-wide SIGBUS handler. A fault inside a registered mapping marks
//! it lost and maps zero memory over it, so the faulting access completes;
//! each accessor checks the mark with one load after its access (before it
//! hands out an atomic word) and returns [`RegionError::Lost`] ("the file
//! behind region … was truncated to N bytes by another process …; the
//! mapping is no longer valid") instead of data. The region can still be
//! closed and destroyed as usual ([`Region::is_lost`] asks). A SIGBUS
//! anywhere else is handed to the handler that was there before (the
//! default action ends the process, as without hugeshm). Limits: a value
//! read through an atomic reference taken *before* the fault is zero, and
//! the error comes with the next accessor call; a region whose raw pointer
//! was handed out ([`Region::as_ptr`], [`Region::data_ptr`], the C API's
//! pointers) leaves the guard, since code reading through the pointer could
//! not be told: a fault then ends the process as before; [`Region::fill`] and
//! [`Region::sum_words`] return no error (ask [`Region::is_lost`]); a
//! program that installs its own SIGBUS handler after hugeshm replaces
//! the guard until hugeshm next maps a file (which installs it again,
//! chaining to that handler). A hugetlb pool that runs dry at fault time
//! or a memory error on a DAX device is caught the same way; the error
//! then says so (`si_code`).
//!
//! ## Errors and fixes
//!
//! A [`RegionError`] states what happened with the numbers (its
//! `Display`); [`RegionError::fix`] is what to do about it, a typed
//! [`Fix`] that each front end renders in its own words (the CLI as
//! `hugeshm` commands, the C ABI with its function names, JSON as an
//! object, `Display` with this crate's calls). The library writes nothing
//! to stdout or stderr: what cleanup could not undo goes to the `log`
//! facade.
//!
//! ## Layers
//!
//! ```text
//! lib.rs      the API: re-exports, these docs
//! create/     RegionBuilder: the numbered steps above, one room per group (existing: 1;
//!             plan: 2-3; make: 4 and the try fall-back; fault: 5-6; verify: 7; publish: 8)
//! attach      Locator, the header checks, remove by name; interlock: list_regions
//! handle      Region: data access, detach, destroy
//! backend/    one module per kind of kernel object behind the trait BackendOps (create / open /
//!             map / inspect / remove / list, and destroy): sysv; file/ (hugetlbfs, posix and dax
//!             files: create, dax, find, open, dir); devdax (dax on a device-dax, /dev/daxX.Y);
//!             memfd; anon; fd: what the fd-based ones share
//! pool/       the plan (pure): hugetlb, thp, dax, shortfall (the pool check), numa
//! prefault, verify, memlock, holders, inspect, memfd_record, header, naming, per_node
//!             the steps' own modules
//! error/      RegionError (fix: its Fix; text: parts of its messages);
//!             model: plain data (imports nothing of the crate)
//! hugeshm-sys (its own crate): the system calls, the only unsafe code
//! ```
//!
//! The system calls' errors ([`SysError`]) name the call, its arguments
//! and the errno.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod attach;
mod backend;
mod checked_open;
mod collapse;
mod create;
mod error;
mod handle;
pub mod header;
mod holders;
mod inspect;
pub mod interlock;
pub mod memfd_record;
mod memlock;
mod model;
pub mod naming;
mod per_node;
mod placement;
mod pool;
mod prefault;
mod report;
pub mod run;
mod search;
#[cfg(feature = "test-hooks")]
pub mod testhook;
#[cfg(not(feature = "test-hooks"))]
mod testhook;
mod verify;

pub use attach::{remove, Locator};
pub use collapse::Collapsed;
pub use create::RegionBuilder;
pub use error::RegionError;
pub use handle::Region;
pub use header::{HeaderState, Liveness, RegionHeader, HEADER_BYTES};
pub use hugeshm_fix::{Fix, Renderer};
pub use hugeshm_probe::{Probe, Roots};
pub use hugeshm_sys::{PersistMethod, SysError};
pub use inspect::RegionInfo;
pub use interlock::{list_regions, list_regions_on, list_sysv_regions_on};
pub use model::{
    Backend, Fallback, NamedObject, NodeNeed, PageSize, Placement, Policy, PrefaultMethod, Reclaim,
    RegionState, Shortfall,
};
pub use naming::{sysv_key, validate_name, MAX_NAME_LEN};
pub use per_node::{part_name, NodeRegion};
pub use prefault::available_cpus;
pub use report::{AllocationReport, AttachReport, Reclaimed};
pub use search::SEARCH_ORDER;
pub use verify::{PageSizeCheck, PageSizeSource, Verification};
