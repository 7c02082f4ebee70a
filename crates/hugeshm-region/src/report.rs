//! What a created region got: the one data model behind the CLI's table and
//! `--json`.

use serde::{Deserialize, Serialize};

use crate::pool::Shortfall;
use crate::types::{Backend, PageSize, Policy, PrefaultMethod};

/// The report of [`RegionBuilder::create`](crate::RegionBuilder::create).
///
/// `fell_back` is true when the region is not on the pages asked for
/// (policy `try`); `reason` then says why, with the pool numbers in
/// `shortfall` when the pool was short.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AllocationReport {
    /// The region's name (`None` for an anonymous region).
    pub name: Option<String>,
    /// The backend.
    pub backend: Backend,
    /// Bytes asked for.
    pub requested_bytes: u64,
    /// Bytes mapped: `requested_bytes` rounded up to a page multiple.
    pub size_bytes: u64,
    /// Whether `size_bytes > requested_bytes`.
    pub rounded_up: bool,
    /// The page size asked for.
    pub requested_page_size: PageSize,
    /// The page size the region was created with.
    pub page_size_bytes: u64,
    /// The policy.
    pub policy: Policy,
    /// Whether the region ended up on base pages (or smaller pages than
    /// asked) instead of the huge pages asked for.
    pub fell_back: bool,
    /// Why it fell back (`None` when it did not).
    pub reason: Option<String>,
    /// The pool numbers when a short pool caused the fall-back.
    pub shortfall: Option<Shortfall>,
    /// Things worth knowing that did not change the outcome.
    pub warnings: Vec<String>,
    /// Pre-fault threads used (0: not pre-faulted).
    pub prefault_threads: usize,
    /// Pre-fault method.
    pub prefault_method: PrefaultMethod,
    /// Seconds from the start of `create` to the mapped region: host
    /// snapshot, pool check, the object, its reservation, and for `posix`
    /// the `fallocate` (which zeroes tmpfs pages, so that is where a tmpfs
    /// region's allocation cost shows).
    pub setup_seconds: f64,
    /// Seconds of the pre-fault.
    pub prefault_seconds: f64,
    /// Pre-fault rate, decimal GB/s (`size_bytes / prefault_seconds`).
    pub prefault_gbps: f64,
    /// `setup_seconds + prefault_seconds`: until the memory is usable.
    pub ready_seconds: f64,
    /// The page size `/proc/self/smaps` shows for the region.
    pub verified_page_size_bytes: u64,
    /// Resident bytes `/proc/self/smaps` shows after the pre-fault.
    pub resident_bytes: u64,
    /// Bytes mapped by transparent huge pages (tmpfs/shmem).
    pub thp_bytes: u64,
    /// Whether the region is `mlock`ed.
    pub mlocked: bool,
    /// SysV shmid.
    pub shmid: Option<i32>,
    /// SysV key (0 = `IPC_PRIVATE`).
    pub sysv_key: Option<i32>,
    /// The file (hugetlbfs, posix) or `/proc/PID/fd/N` (memfd) another
    /// process can open; `None` for anonymous regions and SysV.
    pub path: Option<String>,
    /// The creating process.
    pub pid: u32,
    /// Address of the mapping in the creating process.
    pub address: u64,
}
