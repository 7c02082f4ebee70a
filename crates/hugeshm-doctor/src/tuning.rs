//! What `hugeadm --explain` says beyond the pools, with the numbers:
//! `vm.min_free_kbytes` for growing pools at run time, how many 1 GiB pages
//! free memory can still make, HugeTLB Vmemmap Optimization (HVO), and
//! demotion of 1 GiB pages to 2 MiB.

use crate::finding::{Finding, Severity};
use hugeshm_fix::Fix;
use hugeshm_parse::size::{format_bytes, BASE_PAGE, GIB, KIB};
use hugeshm_probe::HostSnapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `sizeof(struct page)` on x86-64 and arm64 (HVO needs a power of two).
pub const STRUCT_PAGE_BYTES: u64 = 64;

/// Migrate types the page allocator keeps per-CPU lists for (Unmovable,
/// Movable, Reclaimable): the kernel's `MIGRATE_PCPTYPES`.
const MIGRATE_PCPTYPES: u64 = 3;

/// The section of `status` (JSON: `tuning`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TuningReport {
    /// `vm.min_free_kbytes` against what growing pools at run time wants.
    pub min_free: Option<MinFree>,
    /// HVO: the `struct page` memory huge pages need, and what it frees.
    pub vmemmap: Option<Vmemmap>,
    /// 1 GiB pages at run time: what free memory can still make.
    pub gigantic: Option<Gigantic>,
    /// Pools whose free pages can be demoted to a smaller size.
    pub demote: Vec<DemoteRow>,
}

/// `vm.min_free_kbytes` and the value the kernel's own formula gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MinFree {
    /// `vm.min_free_kbytes` now.
    pub current_kib: u64,
    /// What khugepaged sets when THP is on, and `hugeadm
    /// --set-recommended-min_free_kbytes` sets: pageblock × zones ×
    /// (2 + 3 × 3), at most 5 % of memory.
    pub recommended_kib: u64,
    /// The kernel's boot-time default, √(16 × memory in KiB), clamped to
    /// 128..=262144 (memory taken as `MemTotal`: an upper bound).
    pub kernel_default_kib: Option<u64>,
    /// The pageblock size (`Pages per block` of `/proc/pagetypeinfo`, or
    /// the smallest huge page size where that file cannot be read).
    pub pageblock_bytes: u64,
    /// The zones counted: populated zones up to `Normal` (`/proc/buddyinfo`).
    pub zones: Vec<String>,
    /// Whether THP is on (`always` or `madvise`), in which case khugepaged
    /// raises `min_free_kbytes` to the recommended value itself.
    pub thp_raises_it: bool,
}

/// HugeTLB Vmemmap Optimization.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Vmemmap {
    /// `vm.hugetlb_optimize_vmemmap` is 1.
    pub enabled: bool,
    /// Per page size.
    pub sizes: Vec<VmemmapSize>,
    /// Bytes of `struct page` the pools now in place free with HVO (pages
    /// allocated while it was on), or would free.
    pub pools_saved_bytes: u64,
}

/// What HVO frees for one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VmemmapSize {
    /// Page size.
    pub page_size_bytes: u64,
    /// `struct page` memory of one huge page (64 B per 4 KiB page).
    pub struct_pages_bytes: u64,
    /// What HVO frees of it: all but one 4 KiB page.
    pub saved_bytes: u64,
    /// Pages in the pool now.
    pub pool_pages: u64,
}

/// What free memory can still make of 1 GiB pages at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Gigantic {
    /// The page size (1 GiB).
    pub page_size_bytes: u64,
    /// The largest free block the buddy allocator keeps (4 MiB on x86-64).
    pub max_block_bytes: u64,
    /// Per zone.
    pub zones: Vec<GiganticZone>,
    /// Most pages the free largest blocks could make without moving
    /// anything: their bytes over 1 GiB, zone by zone. Fewer where they do
    /// not lie side by side in aligned gigabytes (on the 2-core VM: 4 said,
    /// 2 granted); more only where the kernel can move movable pages away.
    pub pages_at_most: u64,
}

/// One zone's free memory for 1 GiB pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GiganticZone {
    /// Node.
    pub node: u32,
    /// Zone.
    pub zone: String,
    /// Free bytes in the zone (`/proc/buddyinfo`).
    pub free_bytes: u64,
    /// Free bytes in blocks of the largest order.
    pub free_max_block_bytes: u64,
    /// Pageblocks that cannot be moved (`Unmovable`, `Reclaimable`,
    /// `HighAtomic`), when `/proc/pagetypeinfo` could be read.
    pub pinned_blocks: Option<u64>,
    /// All pageblocks of the zone, likewise.
    pub blocks: Option<u64>,
}

/// A pool whose free pages can be demoted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DemoteRow {
    /// The pool's page size.
    pub page_size_bytes: u64,
    /// `demote_size`.
    pub demote_size_bytes: u64,
    /// Pages that can be demoted now (free, not reserved).
    pub available: u64,
}

/// The kernel's boot-time `min_free_kbytes` for `lowmem_kib` of memory
/// (`calculate_min_free_kbytes`: √(16 × KiB), clamped to 128..=262144).
pub fn kernel_default_min_free_kib(lowmem_kib: u64) -> u64 {
    lowmem_kib.saturating_mul(16).isqrt().clamp(128, 262_144)
}

/// khugepaged's (and hugeadm's) recommended `min_free_kbytes`: per zone,
/// two free pageblocks, plus one pageblock for each migrate type to fall
/// back into from each other (3 × 3), capped at 5 % of `mem_kib`.
pub fn recommended_min_free_kib(pageblock_bytes: u64, zones: u64, mem_kib: Option<u64>) -> u64 {
    let block_kib = pageblock_bytes / KIB;
    let rec = block_kib
        .saturating_mul(zones)
        .saturating_mul(2 + MIGRATE_PCPTYPES * MIGRATE_PCPTYPES);
    match mem_kib {
        Some(m) => rec.min(m / 20),
        None => rec,
    }
}

/// Bytes of `struct page` HVO frees for one huge page of `page_size`.
pub fn hvo_saved_bytes(page_size: u64) -> u64 {
    (page_size / BASE_PAGE)
        .saturating_mul(STRUCT_PAGE_BYTES)
        .saturating_sub(BASE_PAGE)
}

/// Zones khugepaged counts: populated ones up to `Normal`.
fn counted_zone(name: &str) -> bool {
    matches!(name, "DMA" | "DMA32" | "Normal")
}

/// Builds the section from one host read.
pub fn build(host: &HostSnapshot) -> TuningReport {
    let mem_kib = host
        .meminfo
        .as_ref()
        .and_then(|m| m.mem_total_bytes)
        .map(|b| b / KIB);
    // Without pagetypeinfo (not root): the smallest huge page size, the
    // PMD size that pageblocks follow (hugeadm takes the default size,
    // which is wrong with default_hugepagesz=1G).
    let pageblock_bytes = host
        .pagetypeinfo
        .as_ref()
        .map(|p| p.pages_per_block.saturating_mul(BASE_PAGE))
        .or_else(|| host.pools.iter().map(|p| p.page_size_bytes).min());
    let zones: Vec<String> = host
        .buddyinfo
        .iter()
        .filter(|z| counted_zone(&z.zone))
        .map(|z| format!("node {} {}", z.node, z.zone))
        .collect();
    let thp_on = host
        .thp
        .enabled
        .as_ref()
        .is_some_and(|s| s.selected == "always" || s.selected == "madvise");
    let min_free = match (host.sysctl.min_free_kbytes, pageblock_bytes) {
        (Some(cur), Some(pb)) if !zones.is_empty() => Some(MinFree {
            current_kib: u64::try_from(cur).unwrap_or(0),
            recommended_kib: recommended_min_free_kib(pb, zones.len() as u64, mem_kib),
            kernel_default_kib: mem_kib.map(kernel_default_min_free_kib),
            pageblock_bytes: pb,
            zones,
            thp_raises_it: thp_on,
        }),
        _ => None,
    };

    let vmemmap = host.sysctl.hugetlb_optimize_vmemmap.map(|v| {
        let sizes: Vec<VmemmapSize> = host
            .pools
            .iter()
            .map(|p| VmemmapSize {
                page_size_bytes: p.page_size_bytes,
                struct_pages_bytes: (p.page_size_bytes / BASE_PAGE)
                    .saturating_mul(STRUCT_PAGE_BYTES),
                saved_bytes: hvo_saved_bytes(p.page_size_bytes),
                pool_pages: p.nr,
            })
            .collect();
        Vmemmap {
            enabled: v != 0,
            pools_saved_bytes: sizes
                .iter()
                .map(|s| s.saved_bytes.saturating_mul(s.pool_pages))
                .fold(0, u64::saturating_add),
            sizes,
        }
    });

    let gigantic = host.pool(GIB).and_then(|_| {
        let max_block = host
            .buddyinfo
            .first()
            .map(|z| BASE_PAGE << z.max_order().min(40))?;
        let blocks: BTreeMap<(u32, &str), (u64, u64)> = host
            .pagetypeinfo
            .iter()
            .flat_map(|p| p.zones.iter())
            .map(|z| ((z.node, z.zone.as_str()), (z.pinned(), z.total())))
            .collect();
        let zones: Vec<GiganticZone> = host
            .buddyinfo
            .iter()
            .map(|z| {
                let b = blocks.get(&(z.node, z.zone.as_str()));
                GiganticZone {
                    node: z.node,
                    zone: z.zone.clone(),
                    free_bytes: z.free_bytes(BASE_PAGE),
                    free_max_block_bytes: z.free_bytes_max_order(BASE_PAGE),
                    pinned_blocks: b.map(|b| b.0),
                    blocks: b.map(|b| b.1),
                }
            })
            .collect();
        Some(Gigantic {
            page_size_bytes: GIB,
            max_block_bytes: max_block,
            pages_at_most: zones.iter().map(|z| z.free_max_block_bytes / GIB).sum(),
            zones,
        })
    });

    let demote = host
        .demote
        .iter()
        .filter_map(|d| {
            let p = host.pool(d.page_size_bytes)?;
            Some(DemoteRow {
                page_size_bytes: d.page_size_bytes,
                demote_size_bytes: d.demote_size_bytes,
                available: p.available(),
            })
        })
        .collect();

    TuningReport {
        min_free,
        vmemmap,
        gigantic,
        demote,
    }
}

/// The demotion that gives `short` more pages of `page_size` from a larger
/// pool's free pages, if the host has one: (the larger size, pages to
/// demote, whether `demote_size` must be set first).
pub fn demotion_for(host: &HostSnapshot, page_size: u64, short: u64) -> Option<Fix> {
    if short == 0 {
        return None;
    }
    host.demote
        .iter()
        .filter(|d| d.page_size_bytes > page_size && d.page_size_bytes % page_size == 0)
        .find_map(|d| {
            let avail = host.pool(d.page_size_bytes)?.available();
            let per = d.page_size_bytes / page_size;
            let pages = short.div_ceil(per).min(avail);
            (pages > 0).then_some(Fix::Demote {
                page_size_bytes: d.page_size_bytes,
                to_page_size_bytes: page_size,
                pages,
                set_demote_size: d.demote_size_bytes != page_size,
            })
        })
}

/// The findings of the section. `need` is what live segments need per
/// page size (pages); `boot_short` the page sizes whose `hugepages=` the
/// kernel could not grant.
pub fn findings(
    host: &HostSnapshot,
    t: &TuningReport,
    need: &BTreeMap<u64, u64>,
    boot_short: &[(u64, u64)],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let any_pool = host.pools.iter().any(|p| p.nr > 0) || !boot_short.is_empty();
    if let Some(m) = &t.min_free {
        if m.current_kib < m.recommended_kib {
            out.push(Finding::new(
                Severity::Info,
                "min-free-kbytes-low",
                format!(
                    "vm.min_free_kbytes is {} kB; growing huge page pools at run time wants {} kB: {} pageblocks × {} zones ({}) × 11 (2 kept free, and 3 × 3 so that each of the 3 migrate types has a spare pageblock to fall back into), the formula of the kernel's khugepaged and of hugeadm --set-recommended-min_free_kbytes. With less, unmovable kernel memory scatters over more pageblocks, and pools grown later (1 GiB pages first) fall short{}",
                    m.current_kib,
                    m.recommended_kib,
                    format_bytes(m.pageblock_bytes),
                    m.zones.len(),
                    m.zones.join(", "),
                    if m.thp_raises_it {
                        "; THP is on, so khugepaged raises it when it starts: something lowered it since"
                    } else {
                        "; THP is off, so the kernel does not raise it itself"
                    }
                ),
                Some(Fix::MinFreeKbytes { kib: m.recommended_kib }.to_string()),
            ));
        }
    }
    if let Some(v) = &t.vmemmap {
        if !v.enabled && v.pools_saved_bytes > 0 {
            let per: Vec<String> = v
                .sizes
                .iter()
                .map(|s| {
                    format!(
                        "{} of the {} KiB per {} page",
                        s.saved_bytes / KIB,
                        s.struct_pages_bytes / KIB,
                        format_bytes(s.page_size_bytes)
                    )
                })
                .collect();
            out.push(Finding::new(
                Severity::Info,
                "hvo-off",
                format!(
                    "HugeTLB Vmemmap Optimization is off (vm.hugetlb_optimize_vmemmap = 0): the pools' pages keep {} of struct page memory that HVO would free ({}); with it, growing and shrinking pools costs a remap of each page",
                    format_bytes(v.pools_saved_bytes),
                    per.join(", ")
                ),
                Some(Fix::EnableHvo.to_string()),
            ));
        }
    }
    if let Some(g) = &t.gigantic {
        let want = need.get(&GIB).copied().unwrap_or(0).max(
            boot_short
                .iter()
                .find(|(s, _)| *s == GIB)
                .map(|(_, p)| *p)
                .unwrap_or(0),
        );
        let pool = host.pool(GIB).map(|p| p.nr).unwrap_or(0);
        let more = want.saturating_sub(pool);
        if (more > 0 && g.pages_at_most < more) || (any_pool && g.pages_at_most == 0 && pool == 0) {
            let zones: Vec<String> = g
                .zones
                .iter()
                .filter(|z| z.free_bytes > 0)
                .map(|z| {
                    let pinned = match (z.pinned_blocks, z.blocks) {
                        (Some(p), Some(b)) if p > 0 => {
                            format!(", {p} of its {b} pageblocks unmovable")
                        }
                        _ => String::new(),
                    };
                    format!(
                        "{}: {} free, {} in {} blocks{pinned}",
                        z.zone,
                        format_bytes(z.free_bytes),
                        format_bytes(z.free_max_block_bytes),
                        format_bytes(g.max_block_bytes)
                    )
                })
                .collect();
            let pages = if more > 0 { want } else { 1 };
            let on_cmdline = boot_short.iter().any(|(s, _)| *s == GIB);
            out.push(Finding::new(
                if more > 0 { Severity::Warning } else { Severity::Info },
                "gigantic-runtime",
                format!(
                    "1 GiB pages{} can hardly be had at run time on this host now: free memory in {} blocks (the largest the page allocator keeps) makes at most {}, fewer where those blocks are not side by side ({}); beyond that the kernel must find a whole aligned gigabyte of movable pages and move them, which fails where unmovable pageblocks sit",
                    if more > 0 {
                        format!(" ({more} more wanted)")
                    } else {
                        String::new()
                    },
                    format_bytes(g.max_block_bytes),
                    g.pages_at_most,
                    zones.join("; "),
                ),
                Some(
                    Fix::ReserveAtBoot {
                        page_size_bytes: GIB,
                        pages,
                        on_cmdline,
                    }
                    .to_string(),
                ),
            ));
        }
    }
    // A pool short of pages that a larger pool's free pages could fill.
    for (&size, &pages) in need {
        let have = host.pool(size).map(|p| p.nr).unwrap_or(0);
        if let Some(fix) = demotion_for(host, size, pages.saturating_sub(have)) {
            let Fix::Demote {
                page_size_bytes: from,
                pages: n,
                ..
            } = &fix
            else {
                continue;
            };
            out.push(Finding::new(
                Severity::Info,
                "pool-demote",
                format!(
                    "the {} pool is {} pages short of what the segments need, and the {} pool has {} free: demoting {n} of them gives {} {} pages at once, with no new contiguous memory to find (the {} pool shrinks by {n})",
                    format_bytes(size),
                    pages - have,
                    format_bytes(*from),
                    host.pool(*from).map(|p| p.available()).unwrap_or(0),
                    n * (from / size),
                    format_bytes(size),
                    format_bytes(*from),
                ),
                Some(fix.to_string()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::meminfo::Meminfo;
    use hugeshm_parse::size::MIB;

    #[test]
    fn formulas() {
        // This VM: 2 MiB pageblocks, DMA, DMA32, Normal: what khugepaged set.
        assert_eq!(
            recommended_min_free_kib(2 * MIB, 3, Some(24_684_084)),
            67_584
        );
        // hugeadm counts all 5 zones of /proc/zoneinfo, empty ones too.
        assert_eq!(recommended_min_free_kib(2 * MIB, 5, None), 112_640);
        // Capped at 5 % of a small machine's memory.
        assert_eq!(
            recommended_min_free_kib(2 * MIB, 3, Some(1_000_000)),
            50_000
        );
        assert_eq!(kernel_default_min_free_kib(24_684_084), 19_873);
        assert_eq!(kernel_default_min_free_kib(16), 128);
        assert_eq!(kernel_default_min_free_kib(u64::MAX), 262_144);
        // Kernel docs: 7 pages per 2 MiB page, 4095 per 1 GiB page.
        assert_eq!(hvo_saved_bytes(2 * MIB), 7 * 4096);
        assert_eq!(hvo_saved_bytes(GIB), 4095 * 4096);
        assert_eq!(hvo_saved_bytes(4096), 0);
    }

    fn host() -> HostSnapshot {
        let mut h = HostSnapshot::default();
        let mut m = Meminfo::default();
        m.mem_total_bytes = Some(24 * GIB);
        m.hugepagesize_bytes = Some(2 * MIB);
        h.meminfo = Some(m);
        h.pools = vec![
            PoolCounters::new(2 * MIB, 10, 0, Some(0), 0, Some(0)),
            PoolCounters::new(GIB, 2, 2, Some(0), 0, Some(0)),
        ];
        h.buddyinfo = hugeshm_parse::buddyinfo::parse(
            "Node 0, zone DMA32 0 0 0 0 0 0 0 0 0 0 300\nNode 0, zone Normal 5 0 0 0 0 0 0 0 0 0 10\n",
        )
        .unwrap();
        h.sysctl.min_free_kbytes = Some(11_000);
        h.sysctl.hugetlb_optimize_vmemmap = Some(0);
        h.demote = hugeshm_probe::HostSnapshot::default().demote;
        h
    }

    #[test]
    fn section_and_findings() {
        let mut h = host();
        let t = build(&h);
        let m = t.min_free.as_ref().unwrap();
        assert_eq!((m.current_kib, m.recommended_kib), (11_000, 45_056));
        assert_eq!(m.zones, vec!["node 0 DMA32", "node 0 Normal"]);
        let v = t.vmemmap.as_ref().unwrap();
        assert_eq!(v.pools_saved_bytes, 10 * 7 * 4096 + 2 * 4095 * 4096);
        let g = t.gigantic.as_ref().unwrap();
        assert_eq!(g.max_block_bytes, 4 * MIB);
        assert_eq!(g.pages_at_most, 1); // 300 × 4 MiB in DMA32, 40 MiB in Normal
        let need: BTreeMap<u64, u64> = [(2 * MIB, 600), (GIB, 4)].into();
        let f = findings(&h, &t, &need, &[]);
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(
            codes,
            ["min-free-kbytes-low", "hvo-off", "gigantic-runtime"]
        );
        let gf = &f[2];
        assert_eq!(gf.severity, Severity::Warning);
        assert!(
            gf.message.contains("(2 more wanted)") && gf.message.contains("makes at most 1,"),
            "{}",
            gf.message
        );
        assert!(gf
            .fix
            .as_deref()
            .unwrap()
            .starts_with("hugepagesz=1G hugepages=4 "));
        // With demote_size, the short 2 MiB pool gets the demotion.
        h.demote =
            serde_json::from_str(r#"[{"page_size_bytes":1073741824,"demote_size_bytes":2097152}]"#)
                .unwrap();
        let t = build(&h);
        assert_eq!(t.demote[0].available, 2);
        let f = findings(&h, &t, &need, &[]);
        let d = f.iter().find(|f| f.code == "pool-demote").unwrap();
        assert!(d.message.contains("590 pages short"), "{}", d.message);
        assert!(
            d.fix
                .as_deref()
                .unwrap()
                .starts_with("echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote "),
            "{:?}",
            d.fix
        );
        // Enough: no findings.
        h.sysctl.min_free_kbytes = Some(67_584);
        h.sysctl.hugetlb_optimize_vmemmap = Some(1);
        let t = build(&h);
        assert!(findings(&h, &t, &BTreeMap::new(), &[]).is_empty());
    }

    #[test]
    fn missing_files_leave_parts_out() {
        let mut h = host();
        h.buddyinfo.clear();
        h.sysctl.hugetlb_optimize_vmemmap = None;
        let t = build(&h);
        assert!(t.min_free.is_none() && t.vmemmap.is_none() && t.gigantic.is_none());
        assert!(findings(&h, &t, &BTreeMap::new(), &[]).is_empty());
    }
}
