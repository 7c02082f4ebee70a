//! The error of every region operation: typed, with the numbers. Its text
//! states the facts; the remedy is a typed [`Fix`] ([`RegionError::fix`])
//! that each front end renders in its own words.
//!
//! - `mod.rs`: [`RegionError`], its messages and the accessors
//!   (`shortfall`, `errno`) and constructors the crate uses;
//! - `fix.rs`: [`RegionError::fix`], the remedy of each error;
//! - `text.rs`: the parts of the messages that are more than one field.

use hugeshm_fix::Fix;
use hugeshm_parse::size::format_bytes;
use hugeshm_sys::SysError;

use crate::model::{Backend, NodeNeed, Owner, PrefaultMethod, RegionState, Shortfall, Trust};

mod fix;
mod text;

use text::{
    exists_text, in_use_text, incomplete_text, limit_text, lost_text, offered_list, orphan_text,
};

/// Why a region could not be created, attached or removed.
///
/// The message states what happened, with the numbers; what to do about it
/// is [`RegionError::fix`], a typed [`Fix`] that the CLI renders as
/// commands, the C ABI with its own names and JSON as an object. Nothing
/// that was created before the error is left behind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// The name cannot be used for a kernel object.
    #[error("invalid region name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The size is zero or too large.
    #[error("invalid region size {requested_bytes}: {reason}")]
    InvalidSize {
        /// The size asked for.
        requested_bytes: u64,
        /// What is wrong with it.
        reason: String,
        /// A kernel limit to raise, when that is what is wrong.
        fix: Option<Box<Fix>>,
    },
    /// The kernel has no pool of this page size.
    #[error(
        "{} pages are not offered by this kernel (offered: {})",
        format_bytes(*page_size_bytes),
        offered_list(offered)
    )]
    UnsupportedPageSize {
        /// The page size asked for.
        page_size_bytes: u64,
        /// The huge page sizes in `/sys/kernel/mm/hugepages`.
        offered: Vec<u64>,
    },
    /// The pool cannot hold the region (found before the system call, or
    /// the system call's own `ENOMEM` when the pool changed in between).
    #[error("{shortfall}{}", refused_by.as_ref().map(|c| format!(" (the kernel refused: {c})")).unwrap_or_default())]
    PoolShortfall {
        /// The numbers and the fix.
        shortfall: Box<Shortfall>,
        /// The refused call when the kernel, not the pre-check, said no.
        refused_by: Option<String>,
    },
    /// `hugetlbfs` backend without a mount of the page size.
    #[error(
        "no hugetlbfs mount with {} pages in /proc/mounts",
        format_bytes(*page_size_bytes)
    )]
    NoHugetlbfsMount {
        /// The page size.
        page_size_bytes: u64,
        /// The mount that would do.
        fix: Box<Fix>,
    },
    /// The directory given to the builder cannot hold this backend's file.
    #[error("{path}: {reason}")]
    UnsuitableDirectory {
        /// The directory.
        path: String,
        /// Why (wrong file system, wrong page size).
        reason: String,
    },
    /// `posix` backend asked for huge pages where tmpfs cannot give them.
    #[error(
        "{} transparent huge pages unavailable for {dir}: {reason}",
        format_bytes(*page_size_bytes)
    )]
    ThpUnavailable {
        /// The tmpfs directory.
        dir: String,
        /// The page size asked for.
        page_size_bytes: u64,
        /// Why.
        reason: String,
        /// What to change.
        fix: Box<Fix>,
    },
    /// The file system holding the region is too small (checked with
    /// `statvfs` before creating the file, and `fallocate`'s `ENOSPC`).
    #[error(
        "{path}: not enough space on {fstype}: needed {needed_bytes} bytes ({}), free {free_bytes} bytes ({})",
        format_bytes(*needed_bytes),
        format_bytes(*free_bytes)
    )]
    NoSpace {
        /// The file (or directory) being sized.
        path: String,
        /// `tmpfs` or `hugetlbfs`.
        fstype: String,
        /// Bytes the region needs.
        needed_bytes: u64,
        /// Bytes free on the file system.
        free_bytes: u64,
        /// What to change.
        fix: Box<Fix>,
    },
    /// A region on base pages (or transparent huge pages) to pre-fault is
    /// larger than the memory the kernel says is available: faulting it
    /// would push the host into reclaim and the OOM killer, which may kill
    /// another process than this one. Found before anything is created.
    #[error(
        "{} of {} pages to allocate now, but only {} of memory is available (MemAvailable): \
         allocating it would drive the host into reclaim and the OOM killer",
        format_bytes(*needed_bytes),
        format_bytes(*page_size_bytes),
        format_bytes(*available_bytes)
    )]
    NotEnoughMemory {
        /// Bytes the region needs.
        needed_bytes: u64,
        /// Its page size.
        page_size_bytes: u64,
        /// `MemAvailable` of `/proc/meminfo`.
        available_bytes: u64,
        /// Whether the region could be made without allocating it (no
        /// pre-fault; not a tmpfs file, which is allocated at create).
        on_demand_possible: bool,
    },
    /// A system-wide kernel limit is reached (SysV `kernel.shmmni`
    /// segments, `kernel.shmall` pages).
    #[error("{what}: the kernel's limit {limit} is reached ({in_use} in use)")]
    KernelLimit {
        /// What could not be had.
        what: String,
        /// The limit, e.g. `kernel.shmmni = 4096`.
        limit: String,
        /// How much of it is in use.
        in_use: u64,
        /// The setting that would do.
        fix: Box<Fix>,
    },
    /// The kernel refused for lack of privilege (SysV `SHM_HUGETLB` without
    /// `vm.hugetlb_shm_group` / `CAP_IPC_LOCK`, hugetlbfs mount permissions).
    #[error("{what}: permission denied")]
    Permission {
        /// What was refused.
        what: String,
        /// What to change.
        fix: Box<Fix>,
        /// The refused call.
        #[source]
        source: Option<SysError>,
    },
    /// `mlock` would exceed `RLIMIT_MEMLOCK`.
    #[error(
        "mlock of {needed_bytes} bytes ({}) would exceed RLIMIT_MEMLOCK \
         (soft {}, hard {}, already locked {locked_bytes} bytes)",
        format_bytes(*needed_bytes),
        limit_text(*soft_limit_bytes),
        limit_text(*hard_limit_bytes)
    )]
    MemlockLimit {
        /// Bytes to lock.
        needed_bytes: u64,
        /// Bytes this process has locked already (`VmLck`).
        locked_bytes: u64,
        /// Soft limit in bytes (`None` = unlimited).
        soft_limit_bytes: Option<u64>,
        /// Hard limit in bytes (`None` = unlimited).
        hard_limit_bytes: Option<u64>,
        /// The login name of this process's user (`*` when unknown), for
        /// the limits.conf line.
        user: String,
    },
    /// Pre-faulting failed (the kernel could not supply a page).
    #[error("pre-fault ({method}) failed at offset {offset}: {source}")]
    Prefault {
        /// The method in use.
        method: PrefaultMethod,
        /// Offset into the region of the failed chunk.
        offset: u64,
        /// The failed call.
        #[source]
        source: SysError,
    },
    /// The nodes a region is placed on cannot hold it: per node the pages
    /// required and free (the pool check for NUMA placement, made before
    /// the system call, as Oracle's alert log lists it per node).
    #[error(
        "{} pages on {policy}: {}",
        format_bytes(*page_size_bytes),
        nodes.iter().map(|n| format!("node {} required {}, available {}", n.node, n.required, n.available)).collect::<Vec<_>>().join("; ")
    )]
    NodeShortfall {
        /// The page size.
        page_size_bytes: u64,
        /// The placement, and where it came from (`bind=1`, `the caller's
        /// memory policy MPOL_BIND 1 (numactl --membind)`).
        policy: String,
        /// The nodes, each with what it needs and has.
        nodes: Vec<NodeNeed>,
        /// The per-node pool sizes that would do.
        fix: Box<Fix>,
    },
    /// After the pre-fault, pages of a region bound to some nodes sit on
    /// others (policy `only`).
    #[error("{object}: bound to {placement}, but {} bytes sit on other nodes ({})",
        misplaced_bytes,
        nodes.iter().map(|(n, b)| format!("node {n}: {}", format_bytes(*b))).collect::<Vec<_>>().join(", "))]
    Misplaced {
        /// The object.
        object: String,
        /// The placement asked for.
        placement: String,
        /// Bytes outside it.
        misplaced_bytes: u64,
        /// Bytes per node, as `/proc/self/numa_maps` shows them.
        nodes: Vec<(u32, u64)>,
    },
    /// The hugetlb cgroup of this process allows fewer pages than the
    /// region needs (found before the system call, from the cgroup files:
    /// the kernel would refuse the faults, or the reservation).
    #[error(
        "{file} allows {allowed_pages} more {} pages, required {required_pages}",
        format_bytes(*page_size_bytes)
    )]
    CgroupLimit {
        /// The page size.
        page_size_bytes: u64,
        /// Pages the region needs.
        required_pages: u64,
        /// Pages the cgroup (and its ancestors) still allow.
        allowed_pages: u64,
        /// The limit file that binds.
        file: String,
        /// What to change.
        fix: Box<Fix>,
    },
    /// The pool had the pages, but the kernel refused to fault them in: a
    /// hugetlb cgroup limit (charged at fault time unless a reservation
    /// limit is set), or the pool taken by others between the reservation
    /// and the fault. Found by `MADV_POPULATE_WRITE`, never SIGBUS.
    #[error(
        "{} pages: the kernel refused to fault them in after {faulted_pages} of {required_pages} ({source}){}",
        format_bytes(*page_size_bytes),
        limit.as_ref().map(|l| format!("; {l}")).unwrap_or_default()
    )]
    FaultRefused {
        /// The page size.
        page_size_bytes: u64,
        /// Pages the region needs.
        required_pages: u64,
        /// Pages faulted before the refusal.
        faulted_pages: u64,
        /// The limit that refused them, when known (e.g. the cgroup file
        /// and what it allows).
        limit: Option<String>,
        /// The refused call.
        #[source]
        source: SysError,
        /// What to change.
        fix: Box<Fix>,
    },
    /// The kernel used other pages than asked (policy `only`).
    #[error(
        "verification failed: asked for {} pages, /proc/self/smaps shows {} pages \
         (resident {resident_bytes} of {size_bytes} bytes){}",
        format_bytes(*asked_page_size_bytes),
        format_bytes(*verified_page_size_bytes),
        if detail.is_empty() { String::new() } else { format!("; {detail}") }
    )]
    Verification {
        /// The page size asked for.
        asked_page_size_bytes: u64,
        /// The page size the kernel used.
        verified_page_size_bytes: u64,
        /// Resident bytes found.
        resident_bytes: u64,
        /// Region size.
        size_bytes: u64,
        /// More context (e.g. transparent huge page coverage).
        detail: String,
    },
    /// A `dax` region the kernel maps with 4 KiB page-table entries after
    /// the pre-fault (`/proc/self/pagemap`), not 2 MiB ones (policy `only`).
    #[error(
        "{object} is mapped with 4 KiB page-table entries in {pte_windows} of {windows} \
         windows of 2 MiB after the pre-fault (/proc/self/pagemap), not with 2 MiB (PMD) \
         ones: {} of page tables in each process that maps it all, instead of none",
        format_bytes(*pte_windows * 4096)
    )]
    DaxSmallFaults {
        /// The region's file.
        object: String,
        /// Windows on 4 KiB entries.
        pte_windows: u64,
        /// Windows judged.
        windows: u64,
        /// What to change.
        fix: Box<Fix>,
    },
    /// A named region exists already and a live process holds it (or is
    /// creating it), or it cannot be told apart from one that does.
    #[error(
        "{backend} region {name:?} already exists ({object}){}",
        exists_text(holders, *state)
    )]
    AlreadyExists {
        /// The name.
        name: String,
        /// The backend.
        backend: Backend,
        /// The object (key, path).
        object: String,
        /// Pids that hold it (empty when not known).
        holders: Vec<u32>,
        /// Its state, when it was inspected.
        state: Option<RegionState>,
    },
    /// A region of that name exists, nobody holds it, and the caller did not
    /// ask to reclaim it: the previous owner crashed or exited without
    /// removing it.
    #[error(
        "{backend} region {name:?} ({object}) exists but no process holds it: {}; \
         refusing to create over it",
        orphan_text(*state, *creator_pid, *kept)
    )]
    Orphaned {
        /// The name.
        name: String,
        /// The backend.
        backend: Backend,
        /// The object.
        object: String,
        /// What is left: `ready` (contents complete), `crashed` (creation
        /// never finished) or `stale` (memfd: the memory is gone).
        state: RegionState,
        /// Its creator.
        creator_pid: Option<u32>,
        /// Made to outlive its creator (`create` without `--hold`,
        /// [`crate::RegionBuilder::keep`]): nobody holding it is normal,
        /// not a crash.
        kept: bool,
    },
    /// The region's creation has not finished: the creator is still at it,
    /// or died before it was done.
    #[error(
        "{backend} region {name:?} ({object}) {}",
        incomplete_text(*creator_pid, *creator_alive, *header_written)
    )]
    Incomplete {
        /// The name.
        name: String,
        /// The backend.
        backend: Backend,
        /// The object.
        object: String,
        /// The creator, when known.
        creator_pid: Option<u32>,
        /// Whether the creator still runs (`false` = it crashed mid-creation).
        creator_alive: bool,
        /// Whether the header was written (state `initializing`) or the
        /// creator died before even that.
        header_written: bool,
    },
    /// A memfd region's record names processes that are gone: the memfd
    /// and its memory went with them.
    #[error(
        "memfd region {name:?}: the record {record} names pid {creator_pid}, which has exited, \
         and no process holds the memfd any more: the region is gone"
    )]
    Stale {
        /// The name.
        name: String,
        /// The record file.
        record: String,
        /// The pid it names.
        creator_pid: u32,
    },
    /// The object under the region's key or path is not a hugeshm region
    /// (or holds another hugeshm region whose name has the same SysV key).
    /// hugeshm never attaches to, reclaims or removes such an object.
    #[error("{object} is not this hugeshm region: {reason}; hugeshm will not use or remove it")]
    NotOurs {
        /// The object.
        object: String,
        /// What was found.
        reason: String,
    },
    /// The object is not the caller's: another user owns it, or group or
    /// others may write it where the caller did not ask for that. Its
    /// header is no proof (anyone can write a header): hugeshm never
    /// attaches to, reuses or removes such an object.
    #[error("{object}: {reason}; hugeshm will not use or remove another user's shared memory")]
    Untrusted {
        /// The object.
        object: String,
        /// The region's name.
        name: String,
        /// Its backend.
        backend: Backend,
        /// Its owner and mode.
        owner: Owner,
        /// Why it is not trusted.
        reason: String,
    },
    /// The region was made by a newer hugeshm with a newer header layout.
    #[error(
        "{object}: region header layout version {found} is newer than this hugeshm \
         understands (version {supported})"
    )]
    NewerLayout {
        /// The object.
        object: String,
        /// The version in the header.
        found: u32,
        /// The newest version this library reads.
        supported: u32,
    },
    /// The region is not what the caller expects (size, page size, backend),
    /// or its header disagrees with the kernel object.
    #[error("{object}: {field} mismatch: expected {expected}, the region has {found}")]
    HeaderMismatch {
        /// The object.
        object: String,
        /// What differs: `size`, `page size`, `backend`, `name`, ...
        field: String,
        /// What was expected.
        expected: String,
        /// What the region has.
        found: String,
    },
    /// No backend searched has an object of that name
    /// ([`Locator::attach_any`](crate::Locator::attach_any),
    /// [`Locator::remove_any`](crate::Locator::remove_any)).
    #[error("no region named {name:?} (looked for {looked})")]
    NotFoundAnywhere {
        /// The name.
        name: String,
        /// Every place looked for, each once.
        looked: String,
    },
    /// No object of that name.
    #[error("{backend} region {name:?} not found (looked for {looked})")]
    NotFound {
        /// The name.
        name: String,
        /// The backend.
        backend: Backend,
        /// Where it was looked for.
        looked: String,
    },
    /// A named region is still attached by processes.
    #[error(
        "{backend} region {name:?} ({object}) is in use: {}",
        in_use_text(pids, *nattch)
    )]
    InUse {
        /// The name.
        name: String,
        /// The backend.
        backend: Backend,
        /// The object.
        object: String,
        /// Pids that have it mapped.
        pids: Vec<u32>,
        /// SysV attachment count.
        nattch: Option<u64>,
    },
    /// The memory behind this process's mapping of the region went away
    /// (its file was cut short by another process, or a page could not be
    /// had at fault time): the SIGBUS guard of hugeshm-sys caught the
    /// fault and mapped zeros in its place (see the crate docs).
    #[error("{}", lost_text(object, *file_bytes, *region_bytes, source))]
    Lost {
        /// The object (its path).
        object: String,
        /// The file's size now, where it could be read.
        file_bytes: Option<u64>,
        /// The region's size.
        region_bytes: u64,
        /// The region's name and backend, for the fix.
        name: Option<Box<(String, Backend)>>,
        /// The guard's error: the access and the fault's offset and cause.
        #[source]
        source: Box<SysError>,
    },
    /// The operation does not exist for this backend.
    #[error("{0}")]
    Unsupported(String),
    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] SysError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A /proc or /sys file could not be read.
    #[error(transparent)]
    Read(#[from] hugeshm_probe::ReadError),
}

impl RegionError {
    /// The pool numbers of a [`RegionError::PoolShortfall`].
    pub fn shortfall(&self) -> Option<&Shortfall> {
        match self {
            RegionError::PoolShortfall { shortfall, .. } => Some(&**shortfall),
            _ => None,
        }
    }

    /// The `errno` behind the error, when a system call failed.
    pub fn errno(&self) -> Option<i32> {
        match self {
            RegionError::Sys(e)
            | RegionError::Prefault { source: e, .. }
            | RegionError::FaultRefused { source: e, .. } => e.errno(),
            RegionError::Permission {
                source: Some(e), ..
            } => e.errno(),
            RegionError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Refuses an object `trust` does not cover ([`RegionError::Untrusted`]).
    pub(crate) fn check_trust(
        trust: &Trust,
        owner: Owner,
        object: &str,
        name: &str,
        backend: Backend,
    ) -> Result<(), RegionError> {
        match trust.refuses(owner) {
            None => Ok(()),
            Some(reason) => Err(RegionError::Untrusted {
                object: object.to_owned(),
                name: name.to_owned(),
                backend,
                owner,
                reason,
            }),
        }
    }

    /// Access to another user's region refused by the kernel.
    pub(crate) fn permission(what: String, source: Option<SysError>) -> Self {
        RegionError::Permission {
            what,
            fix: Box::new(Fix::RunAsOwner),
            source,
        }
    }

    /// `EACCES`/`EPERM` as [`RegionError::permission`], anything else as
    /// [`RegionError::Sys`].
    pub(crate) fn sys_or_permission(what: impl FnOnce() -> String, e: SysError) -> Self {
        if matches!(e.errno(), Some(libc::EACCES) | Some(libc::EPERM)) {
            RegionError::permission(what(), Some(e))
        } else {
            RegionError::Sys(e)
        }
    }

    pub(crate) fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        RegionError::Io {
            path: path.into(),
            source,
        }
    }
}
