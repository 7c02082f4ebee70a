//! What the kernel really gave: this process's own `/proc/self/smaps` entry
//! for a region.

use hugeshm_parse::smaps::SmapsEntry;
use hugeshm_probe::Probe;
use serde::{Deserialize, Serialize};

use crate::error::RegionError;

/// A region as `/proc/self/smaps` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Verification {
    /// The page size backing the region: `KernelPageSize`, or the
    /// transparent huge page size when every byte is mapped by PMDs
    /// (`ShmemPmdMapped`/`FilePmdMapped`/`AnonHugePages`; THP mappings
    /// report a 4 kB `KernelPageSize`).
    pub page_size_bytes: u64,
    /// `KernelPageSize` as printed.
    pub kernel_page_size_bytes: u64,
    /// Resident bytes: `Rss` + `Shared_Hugetlb` + `Private_Hugetlb`.
    pub resident_bytes: u64,
    /// Whether the mapping is hugetlb (`VmFlags` has `ht`).
    pub hugetlb: bool,
    /// Bytes mapped by transparent huge pages.
    pub thp_bytes: u64,
    /// `Locked` bytes.
    pub locked_bytes: u64,
    /// Length covered by the smaps entries found.
    pub mapped_bytes: u64,
    /// Whether the mapping is `MAP_SYNC` (`VmFlags` has `sf`: synchronous
    /// page faults, a DAX file's metadata durable at fault time).
    #[serde(default)]
    pub map_sync: bool,
}

/// Sums the smaps entries that overlap `addr..addr + len`.
pub(crate) fn from_entries(
    entries: &[SmapsEntry],
    addr: u64,
    len: u64,
    pmd_size: Option<u64>,
) -> Option<Verification> {
    let end = addr.saturating_add(len);
    let hits: Vec<&SmapsEntry> = entries
        .iter()
        .filter(|e| e.map.start < end && e.map.end > addr)
        .collect();
    let first = hits.first()?;
    let kernel_page = hits
        .iter()
        .filter_map(|e| e.kernel_page_size_bytes)
        .min()
        .unwrap_or(4096);
    let sum = |f: &dyn Fn(&SmapsEntry) -> u64| hits.iter().map(|e| f(e)).sum::<u64>();
    let resident = sum(&|e| e.rss_bytes + e.hugetlb_bytes());
    let thp = sum(&|e| {
        e.shmem_pmd_mapped_bytes.unwrap_or(0)
            + e.file_pmd_mapped_bytes.unwrap_or(0)
            + e.anon_huge_pages_bytes.unwrap_or(0)
    });
    let mapped = sum(&|e| e.size_bytes);
    let page = match pmd_size {
        Some(pmd) if !first.is_hugetlb() && thp >= len && len > 0 => pmd,
        _ => kernel_page,
    };
    Some(Verification {
        page_size_bytes: page,
        kernel_page_size_bytes: kernel_page,
        resident_bytes: resident,
        hugetlb: hits.iter().all(|e| e.is_hugetlb()),
        thp_bytes: thp,
        locked_bytes: sum(&|e| e.locked_bytes.unwrap_or(0)),
        mapped_bytes: mapped,
        map_sync: hits.iter().all(|e| e.vm_flags.iter().any(|f| f == "sf")),
    })
}

/// The THP size (`hpage_pmd_size` under the probe's `/sys`), `None`
/// without THP.
pub(crate) fn pmd_size(probe: &Probe) -> Option<u64> {
    std::fs::read_to_string(probe.sys_path("kernel/mm/transparent_hugepage/hpage_pmd_size"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Reads this process's smaps and verifies `addr..addr + len`.
///
/// Always the running kernel's `/proc/self/smaps`, whatever roots the
/// caller's probe has: what is verified is this process's own mapping.
/// `pmd_size` is the host's THP size ([`pmd_size`]).
pub(crate) fn verify_range(
    addr: u64,
    len: u64,
    pmd_size: Option<u64>,
) -> Result<Verification, RegionError> {
    let own = Probe::default();
    let entries = own.pid(std::process::id()).smaps()?;
    from_entries(&entries, addr, len, pmd_size).ok_or_else(|| {
        RegionError::Unsupported(format!(
            "no mapping at {addr:#x} in /proc/{}/smaps",
            std::process::id()
        ))
    })
}

/// The page size backing a region, read the cheap way
/// ([`Region::verify_page_size`](crate::Region::verify_page_size)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PageSizeCheck {
    /// The page size backing the whole region (the smallest of its
    /// mappings').
    pub page_size_bytes: u64,
    /// Whether the mappings are hugetlb.
    pub hugetlb: bool,
    /// How it was read.
    pub source: PageSizeSource,
}

/// Where a [`PageSizeCheck`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PageSizeSource {
    /// `PROCMAP_QUERY` on `/proc/self/maps` (Linux 6.11+): the page size
    /// of each mapping, without walking its page tables.
    ProcmapQuery,
    /// `/proc/self/smaps`, as [`Verification`] (base pages, transparent
    /// huge pages, DAX, kernels without `PROCMAP_QUERY`).
    Smaps,
}

/// The page size of this process's mappings over `addr..addr + len` from
/// `PROCMAP_QUERY`, the smallest if several: `Ok(None)` where the kernel
/// lacks the call. Errors when a byte of the range is not mapped.
pub(crate) fn query_page_size(addr: u64, len: u64) -> Result<Option<u64>, RegionError> {
    let maps = match std::fs::File::open("/proc/self/maps") {
        Ok(f) => f,
        Err(e) => {
            return Err(RegionError::Unsupported(format!(
                "open /proc/self/maps: {e}"
            )))
        }
    };
    let end = addr.saturating_add(len);
    let mut at = addr;
    let mut smallest: Option<u64> = None;
    while at < end {
        let q = hugeshm_sys::VmaQuery {
            addr: at,
            ..Default::default()
        };
        let vma = match hugeshm_sys::procmap_query(std::os::fd::AsFd::as_fd(&maps), q) {
            Err(e) if matches!(e.errno(), Some(libc::ENOTTY) | Some(libc::EINVAL)) => {
                return Ok(None)
            }
            r => r?,
        };
        let Some(vma) = vma.filter(|v| v.start <= at && at < v.end) else {
            return Err(RegionError::Unsupported(format!(
                "no mapping at {at:#x} in /proc/{}/maps",
                std::process::id()
            )));
        };
        smallest = Some(smallest.map_or(vma.page_size, |s| s.min(vma.page_size)));
        at = vma.end;
    }
    Ok(smallest)
}

/// How the kernel maps this process's `dax` region at `addr..addr + len`
/// (file offset 0): its 2 MiB windows judged from the running kernel's
/// `/proc/self/pagemap` (smaps shows DAX pages as 4 kB whatever the
/// entries; see `hugeshm_parse::pagemap`).
pub(crate) fn dax_windows(
    addr: u64,
    len: u64,
) -> Result<hugeshm_parse::pagemap::Tally, RegionError> {
    let own = Probe::default();
    let (t, _) = own
        .pid(std::process::id())
        .pagemap_tally(addr, addr.saturating_add(len), 0)?;
    Ok(t)
}

/// Bytes per NUMA node of this process's mapping at `addr`, from the
/// running kernel's `/proc/self/numa_maps`; empty where it cannot be read.
pub(crate) fn node_bytes(addr: u64) -> std::collections::BTreeMap<u32, u64> {
    std::fs::read_to_string("/proc/self/numa_maps")
        .ok()
        .and_then(|t| hugeshm_parse::numa_maps::parse(&t).ok())
        .and_then(|entries| entries.into_iter().find(|e| e.start == addr))
        .map(|e| e.node_bytes())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "7f0000000000-7f0000400000 rw-s 00000000 00:11 1 /SYSV00001234 (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
Rss:                   0 kB
Shared_Hugetlb:     2048 kB
Private_Hugetlb:    2048 kB
Locked:                0 kB
VmFlags: rd wr sh mr mw me ms de ht
7f1000000000-7f1000400000 rw-s 00000000 00:1b 5 /dev/shm/hugeshm.x
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                4096 kB
ShmemPmdMapped:     4096 kB
FilePmdMapped:         0 kB
Locked:             4096 kB
VmFlags: rd wr sh mr mw me ms lo
";

    #[test]
    fn hugetlb_and_thp_entries() {
        let e = hugeshm_parse::smaps::parse(SMAPS).unwrap();
        let v = from_entries(&e, 0x7f00_0000_0000, 4 << 20, Some(2 << 20)).unwrap();
        assert_eq!(v.page_size_bytes, 2 << 20);
        assert!(v.hugetlb);
        assert_eq!(v.resident_bytes, 4 << 20);
        let v = from_entries(&e, 0x7f10_0000_0000, 4 << 20, Some(2 << 20)).unwrap();
        assert_eq!(
            (v.page_size_bytes, v.kernel_page_size_bytes),
            (2 << 20, 4096)
        );
        assert_eq!(v.thp_bytes, 4 << 20);
        assert_eq!(v.locked_bytes, 4 << 20);
        assert!(!v.hugetlb);
        let v = from_entries(&e, 0x7f10_0000_0000, 4 << 20, None).unwrap();
        assert_eq!(v.page_size_bytes, 4096);
        assert!(from_entries(&e, 0x1000, 4096, None).is_none());
    }
}
