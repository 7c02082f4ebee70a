//! The report and the smaps verification as plain C structs.

use hugeshm_region::{
    AllocationReport, AttachReport, PageSizeCheck, PageSizeSource, Region, Verification,
};

use crate::types::{
    backend_to_c, hugeshm_backend, hugeshm_policy, hugeshm_prefault_method, hugeshm_reclaim,
    method_to_c, page_size_to_c, policy_to_c, reclaim_to_c,
};

/// What a region got, filled by `hugeshm_region_report`.
///
/// For a region this process created (`created` true) it is the report of
/// the creation. For an attached region (`created` false) it is what the
/// attach found: the region's header (creator, creation time, sizes),
/// /proc/self/smaps right after attaching and the processes holding it;
/// the fields about the creation itself (`policy`, `fell_back`, pre-fault,
/// timings, `reclaimed`) are 0 / false.
///
/// The mapping starts with the region's header (`data_offset` bytes, 4096);
/// the data follow (`hugeshm_region_data_ptr`, `data_bytes`).
///
/// Strings (reason, warnings, name, path) have their own accessors
/// (`hugeshm_region_reason`, ...).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct hugeshm_report {
    /// Bytes the creator asked for (from the header when attached).
    pub requested_bytes: u64,
    /// Bytes mapped, header included: a page multiple.
    pub size_bytes: u64,
    /// Where the data start (after the header).
    pub data_offset: u64,
    /// Data bytes: `size_bytes - data_offset`.
    pub data_bytes: u64,
    /// The page size asked for in bytes (0 = largest that fits; 0 when
    /// attached).
    pub requested_page_size_bytes: u64,
    /// The page size the region was created with (attached: from its
    /// header).
    pub page_size_bytes: u64,
    /// The page size /proc/self/smaps shows for this process's mapping.
    pub verified_page_size_bytes: u64,
    /// Resident bytes /proc/self/smaps shows (after the pre-fault; when
    /// attached, right after attaching).
    pub resident_bytes: u64,
    /// Bytes on transparent huge pages (tmpfs).
    pub thp_bytes: u64,
    /// When a short pool caused the fall-back: the pages it lacked
    /// (required - available; the full numbers are in the reason), else 0.
    pub shortfall_pages: u64,
    /// Bytes of the mapping whose page tables are shared with the other
    /// processes attached (whole GiBs of a 1 GiB-aligned hugetlb mapping).
    pub pmd_shareable_bytes: u64,
    /// Address of the mapping in this process.
    pub address: u64,
    /// Creation time from the header, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// The region's generation: a random number new for every region, which
    /// tells two regions of the same name apart.
    pub generation: u64,
    /// Seconds from the start of the creation to the mapped region.
    pub setup_seconds: f64,
    /// Seconds of the pre-fault.
    pub prefault_seconds: f64,
    /// Pre-fault rate in decimal GB/s.
    pub prefault_gbps: f64,
    /// `setup_seconds + prefault_seconds`: until the memory was usable.
    pub ready_seconds: f64,
    /// Seconds the attach took (find, check the header, map); 0 when
    /// created.
    pub attach_seconds: f64,
    /// The backend (`HUGESHM_BACKEND_*`).
    pub backend: hugeshm_backend,
    /// The policy of the creation (`HUGESHM_POLICY_*`; 0 when attached).
    pub policy: hugeshm_policy,
    /// What the creation did with an orphaned region of the same name:
    /// `HUGESHM_RECLAIM_REUSE` (attached to it, contents kept),
    /// `HUGESHM_RECLAIM_RECREATE`, or 0 when there was none.
    pub reclaimed: hugeshm_reclaim,
    /// Pre-fault method (`HUGESHM_PREFAULT_*`).
    pub prefault_method: hugeshm_prefault_method,
    /// Pre-fault threads used (0: not pre-faulted).
    pub prefault_threads: u32,
    /// This process (the one that created or attached the region).
    pub pid: u32,
    /// The process that created the region (from its header).
    pub creator_pid: u32,
    /// Processes that had the region mapped right after the attach (this
    /// one included); 0 when created or unknown.
    pub holders: u32,
    /// SysV shmid, -1 for other backends.
    pub shmid: i32,
    /// SysV key (0 for IPC_PRIVATE and other backends).
    pub sysv_key: i32,
    /// True when this process created the region, false when attached.
    pub created: bool,
    /// Whether `size_bytes` is more than the header plus `requested_bytes`
    /// (rounded up to a page multiple).
    pub rounded_up: bool,
    /// True when the region is not on the pages asked for (policy try);
    /// `hugeshm_region_reason` says why.
    pub fell_back: bool,
    /// Whether the region is mlocked.
    pub mlocked: bool,
    /// Whether the mapping shares page tables with the other processes
    /// attached (`pmd_shareable_bytes > 0`).
    pub aligned_for_pmd_sharing: bool,
}

impl hugeshm_report {
    /// The report of a creation.
    pub(crate) fn created(region: &Region, r: &AllocationReport) -> Self {
        let h = region.header();
        hugeshm_report {
            requested_bytes: r.requested_bytes,
            size_bytes: r.size_bytes,
            data_offset: r.data_offset,
            data_bytes: r.data_bytes,
            requested_page_size_bytes: page_size_to_c(r.requested_page_size),
            page_size_bytes: r.page_size_bytes,
            verified_page_size_bytes: r.verified_page_size_bytes,
            resident_bytes: r.resident_bytes,
            thp_bytes: r.thp_bytes,
            shortfall_pages: r
                .fallback
                .as_ref()
                .and_then(|f| f.shortfall.as_ref())
                .map_or(0, |s| s.missing()),
            pmd_shareable_bytes: r.pmd_shareable_bytes,
            address: r.address,
            created_unix_ns: h.created_unix_ns,
            generation: h.generation,
            setup_seconds: r.setup_seconds,
            prefault_seconds: r.prefault_seconds,
            prefault_gbps: r.prefault_gbps,
            ready_seconds: r.ready_seconds,
            attach_seconds: 0.0,
            backend: backend_to_c(r.backend),
            policy: policy_to_c(r.policy),
            reclaimed: r.reclaimed.as_ref().map_or(0, |c| reclaim_to_c(c.action)),
            prefault_method: method_to_c(r.prefault_method),
            prefault_threads: u32::try_from(r.prefault_threads).unwrap_or(u32::MAX),
            pid: r.pid,
            creator_pid: h.creator_pid,
            holders: 0,
            shmid: r.shmid.unwrap_or(-1),
            sysv_key: r.sysv_key.unwrap_or(0),
            created: true,
            rounded_up: r.rounded_up,
            fell_back: r.fell_back(),
            mlocked: r.mlocked,
            aligned_for_pmd_sharing: r.aligned_for_pmd_sharing,
        }
    }

    /// What an attach by name found.
    pub(crate) fn attached(a: &AttachReport) -> Self {
        hugeshm_report {
            requested_bytes: a.header.requested_bytes,
            size_bytes: a.size_bytes,
            data_offset: a.data_offset,
            data_bytes: a.data_bytes,
            page_size_bytes: a.page_size_bytes,
            verified_page_size_bytes: a.verified_page_size_bytes,
            resident_bytes: a.resident_bytes,
            pmd_shareable_bytes: a.pmd_shareable_bytes,
            address: a.address,
            created_unix_ns: a.header.created_unix_ns,
            generation: a.header.generation,
            attach_seconds: a.attach_seconds,
            backend: backend_to_c(a.backend),
            pid: a.pid,
            creator_pid: a.header.creator_pid,
            holders: u32::try_from(a.holders.len()).unwrap_or(u32::MAX),
            shmid: a.shmid.unwrap_or(-1),
            sysv_key: a.sysv_key.unwrap_or(0),
            aligned_for_pmd_sharing: a.aligned_for_pmd_sharing,
            ..hugeshm_report::default()
        }
    }

    /// What an attach by path or shmid found (no holders scan).
    pub(crate) fn attached_region(region: &Region, v: &Verification) -> Self {
        let h = region.header();
        hugeshm_report {
            requested_bytes: h.requested_bytes,
            size_bytes: region.len() as u64,
            data_offset: region.data_offset() as u64,
            data_bytes: region.data_len() as u64,
            page_size_bytes: region.page_size(),
            verified_page_size_bytes: v.page_size_bytes,
            resident_bytes: v.resident_bytes,
            thp_bytes: v.thp_bytes,
            pmd_shareable_bytes: region.pmd_shareable_bytes(),
            address: region.addr() as u64,
            created_unix_ns: h.created_unix_ns,
            generation: h.generation,
            backend: backend_to_c(region.backend()),
            pid: std::process::id(),
            creator_pid: h.creator_pid,
            shmid: region.shmid().unwrap_or(-1),
            sysv_key: region.sysv_key().unwrap_or(0),
            aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
            ..hugeshm_report::default()
        }
    }
}

/// A region as /proc/self/smaps shows it now, filled by
/// `hugeshm_region_verify`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct hugeshm_verification {
    /// The page size backing the region (KernelPageSize, or the transparent
    /// huge page size when every byte is on them).
    pub page_size_bytes: u64,
    /// KernelPageSize as smaps prints it.
    pub kernel_page_size_bytes: u64,
    /// Resident bytes in this process (Rss + Shared_Hugetlb +
    /// Private_Hugetlb).
    pub resident_bytes: u64,
    /// Bytes on transparent huge pages.
    pub thp_bytes: u64,
    /// Locked bytes.
    pub locked_bytes: u64,
    /// Length covered by the smaps entries found.
    pub mapped_bytes: u64,
    /// Whether the mapping is hugetlb.
    pub hugetlb: bool,
}

impl From<&Verification> for hugeshm_verification {
    fn from(v: &Verification) -> Self {
        hugeshm_verification {
            page_size_bytes: v.page_size_bytes,
            kernel_page_size_bytes: v.kernel_page_size_bytes,
            resident_bytes: v.resident_bytes,
            hugetlb: v.hugetlb,
            thp_bytes: v.thp_bytes,
            locked_bytes: v.locked_bytes,
            mapped_bytes: v.mapped_bytes,
        }
    }
}

/// The page size backing a region, read the cheap way, filled by
/// `hugeshm_region_verify_page_size`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct hugeshm_page_size_check {
    /// The page size backing the whole region.
    pub page_size_bytes: u64,
    /// Whether the mappings are hugetlb.
    pub hugetlb: bool,
    /// Whether it was read with PROCMAP_QUERY (Linux 6.11+, constant
    /// time); false: from /proc/self/smaps, as `hugeshm_region_verify`.
    pub procmap_query: bool,
}

impl From<&PageSizeCheck> for hugeshm_page_size_check {
    fn from(c: &PageSizeCheck) -> Self {
        hugeshm_page_size_check {
            page_size_bytes: c.page_size_bytes,
            hugetlb: c.hugetlb,
            procmap_query: c.source == PageSizeSource::ProcmapQuery,
        }
    }
}
