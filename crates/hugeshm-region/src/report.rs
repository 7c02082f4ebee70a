//! What a created region got: the one data model behind the CLI's table and
//! `--json`.

use serde::{Deserialize, Serialize};

use crate::header::{Liveness, RegionHeader};
use crate::model::{
    fallback_fields, Backend, Fallback, PageSize, Placement, Policy, PrefaultMethod, Reclaim,
    RegionState,
};

/// The report of [`RegionBuilder::create`](crate::RegionBuilder::create).
///
/// [`fallback`](AllocationReport::fallback) is set when the region is not on
/// the pages asked for (policy `try`): why, with the pool numbers when the
/// pool was short. (JSON keeps the flat `fell_back`, `reason` and
/// `shortfall` fields.)
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
    /// Why the region is not on the pages asked for (`None`: it is).
    #[serde(flatten, with = "fallback_fields")]
    pub fallback: Option<Fallback>,
    /// Things worth knowing that did not change the outcome.
    pub warnings: Vec<String>,
    /// The NUMA placement asked for.
    #[serde(default)]
    pub placement: Placement,
    /// Bytes of the region on each NUMA node after the pre-fault, as
    /// `/proc/self/numa_maps` shows them (node id as a string).
    #[serde(default)]
    pub node_bytes: std::collections::BTreeMap<String, u64>,
    /// Pre-fault threads used (0: not pre-faulted).
    pub prefault_threads: usize,
    /// The CPUs the pre-fault ran on: those of the node a bound (or
    /// preferred) region lives on, so that zeroing is local and
    /// `prefault_gbps` is that node's rate; empty when not pinned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefault_cpus: Vec<u32>,
    /// Pre-fault method.
    pub prefault_method: PrefaultMethod,
    /// Seconds from the start of `create` to the mapped region: host
    /// snapshot, pool check, the object, its reservation, and for `posix`
    /// the `fallocate` where it runs (one pre-fault thread: it allocates the
    /// tmpfs pages, which the kernel zeroes at their first fault, in the
    /// pre-fault).
    pub setup_seconds: f64,
    /// Seconds of the pre-fault.
    pub prefault_seconds: f64,
    /// Pre-fault rate, decimal GB/s (`size_bytes / prefault_seconds`).
    pub prefault_gbps: f64,
    /// `setup_seconds + prefault_seconds`: until the memory is usable.
    pub ready_seconds: f64,
    /// The page size `/proc/self/smaps` shows for the region.
    pub verified_page_size_bytes: u64,
    /// Whether the region is mapped `MAP_SYNC` (a `dax` region on a file
    /// system that can: [`Region::persist`](crate::Region::persist) then
    /// flushes CPU caches instead of calling `msync`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub map_sync: bool,
    /// Resident bytes `/proc/self/smaps` shows after the pre-fault.
    pub resident_bytes: u64,
    /// Bytes mapped by transparent huge pages (tmpfs/shmem).
    pub thp_bytes: u64,
    /// Whether the region is `mlock`ed.
    pub mlocked: bool,
    /// SysV shmid.
    pub shmid: Option<i32>,
    /// SysV key (0 = `IPC_PRIVATE`). JSON: the hex `ipcs` shows
    /// (`"0xf2ce9693"`) in `sysv_key`, the unsigned number in
    /// `sysv_key_number`.
    #[serde(flatten, with = "sysv_key_fields")]
    pub sysv_key: Option<i32>,
    /// The file (hugetlbfs, posix) or `/proc/PID/fd/N` (memfd) another
    /// process can open; `None` for anonymous regions and SysV.
    pub path: Option<String>,
    /// The creating process.
    pub pid: u32,
    /// Address of the mapping in the creating process.
    pub address: u64,
    /// The region's header (state `ready`): creator, creation time,
    /// generation. For a reused region, the header its creator wrote.
    #[serde(default)]
    pub header: Option<RegionHeader>,
    /// Where the data starts (after the 4 KiB header).
    #[serde(default)]
    pub data_offset: u64,
    /// Data bytes: `size_bytes - data_offset`.
    #[serde(default)]
    pub data_bytes: u64,
    /// Whether the mapping can share page tables with other processes
    /// (hugetlb pages smaller than 1 GiB, at a 1 GiB-aligned address,
    /// covering at least one whole GiB; see [`hugeshm_sys::PMD_SHARE_ALIGN`]).
    /// 1 GiB pages need no PMD page at all and report false.
    #[serde(default)]
    pub aligned_for_pmd_sharing: bool,
    /// Bytes of the mapping whose page tables can be shared (whole GiBs).
    #[serde(default)]
    pub pmd_shareable_bytes: u64,
    /// What happened to a region of the same name that nobody held
    /// (`None`: there was none).
    #[serde(default)]
    pub reclaimed: Option<Reclaimed>,
    /// The memfd record other processes find the region by (named memfd
    /// regions).
    #[serde(default)]
    pub memfd_record: Option<String>,
}

/// A region of the same name that nobody held, and what `create` did with
/// it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reclaimed {
    /// `reuse` (attached, contents kept) or `recreate` (destroyed, created
    /// anew).
    pub action: Reclaim,
    /// What it was: `ready`, `crashed` or `stale`.
    pub previous_state: RegionState,
    /// The object it was.
    pub previous_object: String,
    /// Its header, when it had a valid one.
    pub previous_header: Option<RegionHeader>,
}

/// What [`Locator::attach_with_report`](crate::Locator::attach_with_report)
/// found: the data model of `hugeshm attach`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttachReport {
    /// The name.
    pub name: Option<String>,
    /// The backend.
    pub backend: Backend,
    /// The object attached (key and shmid, path, or memfd record and the
    /// descriptor opened).
    pub object: String,
    /// The header, as checked.
    pub header: RegionHeader,
    /// Whether the creator still runs.
    pub creator: Liveness,
    /// Mapped bytes (header included).
    pub size_bytes: u64,
    /// Where the data starts.
    pub data_offset: u64,
    /// Data bytes.
    pub data_bytes: u64,
    /// Page size from the header.
    pub page_size_bytes: u64,
    /// Page size `/proc/self/smaps` shows for this process's mapping.
    pub verified_page_size_bytes: u64,
    /// Whether the mapping is hugetlb (`VmFlags` `ht`).
    pub hugetlb: bool,
    /// Bytes of the region resident in *this process*, as its smaps counts
    /// them right after attaching: only pages this process has mapped
    /// (0 for a fresh attach that touched nothing).
    pub resident_bytes: u64,
    /// Bytes the kernel has allocated to the region, whichever process
    /// faulted them (`None` where that cannot be read).
    pub region_allocated_bytes: Option<u64>,
    /// Pids that have the region mapped now (this one included), ascending.
    pub holders: Vec<u32>,
    /// SysV attachment count (this process included).
    pub nattch: Option<u64>,
    /// This process.
    pub pid: u32,
    /// Address of the mapping here.
    pub address: u64,
    /// See [`AllocationReport::aligned_for_pmd_sharing`].
    pub aligned_for_pmd_sharing: bool,
    /// See [`AllocationReport::pmd_shareable_bytes`].
    pub pmd_shareable_bytes: u64,
    /// Seconds the attach took (find, check the header, map).
    pub attach_seconds: f64,
    /// SysV shmid.
    pub shmid: Option<i32>,
    /// SysV key (JSON as in [`AllocationReport::sysv_key`]).
    #[serde(flatten, with = "sysv_key_fields")]
    pub sysv_key: Option<i32>,
    /// The file (hugetlbfs, posix) or `/proc/PID/fd/N` (memfd) opened.
    pub path: Option<String>,
    /// State of the region as found.
    pub state: RegionState,
}

impl AllocationReport {
    /// Whether the region is not on the pages asked for.
    pub fn fell_back(&self) -> bool {
        self.fallback.is_some()
    }

    /// Why, when it fell back.
    pub fn reason(&self) -> Option<&str> {
        self.fallback.as_ref().map(|f| f.reason.as_str())
    }
}

/// A SysV key as JSON: `sysv_key` in the hex `ipcs` prints, and
/// `sysv_key_number` (unsigned), both null without a key.
mod sysv_key_fields {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Fields {
        sysv_key: Option<String>,
        sysv_key_number: Option<u32>,
    }

    pub fn serialize<S: Serializer>(v: &Option<i32>, s: S) -> Result<S::Ok, S::Error> {
        Fields {
            sysv_key: v.map(|k| format!("{:#010x}", k as u32)),
            sysv_key_number: v.map(|k| k as u32),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
        let f = Fields::deserialize(d)?;
        Ok(f.sysv_key_number.map(|n| n as i32).or_else(|| {
            f.sysv_key
                .and_then(|h| u32::from_str_radix(h.trim_start_matches("0x"), 16).ok())
                .map(|n| n as i32)
        }))
    }
}
