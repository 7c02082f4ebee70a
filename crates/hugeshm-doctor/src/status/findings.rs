//! The findings of `status`, by topic. [`findings`] lists the topics in
//! the order their findings are reported (before the stable sort by
//! severity): the kernel, unreadable files, the pools, boot and
//! persistence, tuning, THP, the SysV limits, NUMA (pools, then tmpfs
//! mounts), and the segments. `memlock-small` (the servers) is added by
//! the caller ([`super::servers`]).

use super::{PoolRow, StatusReport};
use crate::finding::{pool_fix, Finding, Severity};
use crate::segments::{self, SegmentsReport};
use hugeshm_parse::size::{format_bytes, BASE_PAGE, GIB};
use hugeshm_probe::HostSnapshot;
use std::collections::BTreeMap;

/// Every finding of the report `r` built from `host` (and the segments
/// scan, when there was one), worst first.
pub(super) fn findings(
    host: &HostSnapshot,
    r: &StatusReport,
    segs: Option<&SegmentsReport>,
) -> Vec<Finding> {
    let needs = segment_needs(segs, r.default_page_size_bytes);
    let mut out = no_hugetlb(host, r);
    out.extend(unreadable(host));
    out.extend(pools(r, &needs));
    out.extend(persistence(host, r));
    out.extend(tuning(host, r, &needs));
    out.extend(thp(r));
    out.extend(sysv_limits(r));
    out.extend(numa_pools(host, r));
    out.extend(tmpfs_numa(host, segs));
    out.extend(segments_summary(segs));
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// What the live segments need of each pool: by page size, the pages and
/// the segments' labels ([`crate::cgroup::needed_page_size`]: those on huge
/// pages, and those that fell back from them).
type Needs = BTreeMap<u64, (u64, Vec<String>)>;

fn segment_needs(segs: Option<&SegmentsReport>, default: Option<u64>) -> Needs {
    let mut need_by_size = Needs::new();
    if let Some(s) = segs {
        for seg in &s.segments {
            if let Some(t) = crate::cgroup::needed_page_size(seg, default) {
                let e = need_by_size.entry(t).or_default();
                e.0 = e.0.saturating_add(seg.size_bytes.div_ceil(t));
                e.1.push(seg.label());
            }
        }
    }
    need_by_size
}

/// The kernel: `no-hugetlb` where it has no hugetlb support (and meminfo
/// could be read to say so).
fn no_hugetlb(host: &HostSnapshot, r: &StatusReport) -> Vec<Finding> {
    if r.hugetlb_supported || host.meminfo.is_none() {
        return Vec::new();
    }
    vec![Finding::new(
        Severity::Error,
        "no-hugetlb",
        "this kernel has no hugetlb support: /proc/meminfo has no HugePages lines and /sys/kernel/mm/hugepages is absent; shared memory can only use 4 KiB pages (or THP)",
        Some("boot a kernel built with CONFIG_HUGETLBFS=y and CONFIG_HUGETLB_PAGE=y".to_string()),
    )]
}

/// `unreadable-file`: one per host file that could not be read, with the fix
/// for the user hugeshm runs as.
fn unreadable(host: &HostSnapshot) -> Vec<Finding> {
    host.problems
        .iter()
        .map(|p| {
            Finding::new(
                Severity::Warning,
                "unreadable-file",
                p.reason.clone(),
                Some(p.fix(host.self_uid)),
            )
        })
        .collect()
}

/// The host-wide pools, each in turn: `pool-short` (the segments need more
/// than it holds), `pool-unused` (pages neither used nor reserved),
/// `boot-pool-short` (the kernel command line asked for more than it
/// granted), `pool-surplus`.
fn pools(r: &StatusReport, needs: &Needs) -> Vec<Finding> {
    let mut out = Vec::new();
    let default = r.default_page_size_bytes;
    for p in r.pools.iter().filter(|p| p.node.is_none()) {
        let size = format_bytes(p.page_size_bytes);
        let used = p.total.saturating_sub(p.available);
        let (need, who) = needs.get(&p.page_size_bytes).cloned().unwrap_or_default();
        if need > p.total {
            let want = need + 2;
            out.push(Finding::new(
                Severity::Warning,
                "pool-short",
                format!(
                    "{size} pool holds {} pages but the shared memory segments on this host would need {need} on huge pages ({}): the ones that do not fit run on 4 KiB pages",
                    p.total,
                    who.join(", ")
                ),
                Some(format!(
                    "hugeshm apply --live   # or: {}; for the next start. Those on 4 KiB pages \
                     now move without a restart where their silent-fallback names hugeshm \
                     collapse",
                    pool_fix(p.page_size_bytes, default, want)
                )),
            ));
        }
        if need <= p.total
            && p.total > 0
            && p.available > 2
            && p.available.saturating_mul(20) >= p.total
        {
            let wasted = p.available.saturating_mul(p.page_size_bytes);
            let sev = if used == 0 || wasted >= GIB {
                Severity::Warning
            } else {
                Severity::Info
            };
            let keep = used.max(need) + 2;
            out.push(Finding::new(
                sev,
                "pool-unused",
                format!(
                    "{} of {} {size} pages ({}) are neither in use nor reserved: memory the OS cannot use",
                    p.available,
                    p.total,
                    format_bytes(wasted)
                ),
                Some(format!("{}   # keeps {used} in use + {} for what segments need + 2 spare", pool_fix(p.page_size_bytes, default, keep), need.saturating_sub(used))),
            ));
        }
        if let Some(b) = p.boot_pages {
            if b > p.total {
                out.push(Finding::new(
                    Severity::Warning,
                    "boot-pool-short",
                    format!(
                        "the kernel command line asks for {b} {size} pages but the pool holds {} (memory too fragmented at boot, or lowered since)",
                        p.total
                    ),
                    Some(if p.page_size_bytes >= GIB {
                        format!("reserve 1 GiB pages early: keep hugepagesz=1G hugepages={b} on the kernel command line and check free memory at boot, or use hugetlb_cma=")
                    } else {
                        pool_fix(p.page_size_bytes, default, b)
                    }),
                ));
            }
        }
        if p.surplus > 0 {
            out.push(Finding::new(
                Severity::Info,
                "pool-surplus",
                format!("{} {size} pages are surplus pages from vm.nr_overcommit_hugepages: they are not guaranteed and return to the OS when freed", p.surplus),
                None,
            ));
        }
    }
    out
}

/// The tuning section's findings ([`crate::tuning::findings`]), given what
/// the segments need and the pools the kernel command line could not fill.
fn tuning(host: &HostSnapshot, r: &StatusReport, needs: &Needs) -> Vec<Finding> {
    let boot_short: Vec<(u64, u64)> = r
        .pools
        .iter()
        .filter(|p| p.node.is_none())
        .filter_map(|p| {
            p.boot_pages
                .filter(|b| *b > p.total)
                .map(|b| (p.page_size_bytes, b))
        })
        .collect();
    let need_pages: BTreeMap<u64, u64> = needs.iter().map(|(s, (n, _))| (*s, *n)).collect();
    crate::tuning::findings(host, &r.tuning, &need_pages, &boot_short)
}

/// Bytes of all host-wide pools: the THP, SysV and NUMA findings matter
/// only with a pool.
fn pool_total_bytes(r: &StatusReport) -> u64 {
    r.pools
        .iter()
        .filter(|p| p.node.is_none())
        .map(|p| p.total_bytes)
        .sum()
}

/// THP: `thp-always` on a host with a huge page pool.
fn thp(r: &StatusReport) -> Vec<Finding> {
    let mut out = Vec::new();
    if let (Some(split), Some(huge)) = (r.thp.split_since_boot, r.thp.shmem_huge_bytes) {
        if split > 0 && huge > 0 {
            out.push(Finding::new(
                Severity::Info,
                "thp-split",
                format!(
                    "{split} transparent huge pages were split since boot (thp_split_page) while \
                     {} of shared memory sits on 2 MiB THP (ShmemHugePages): pages that hugeshm \
                     collapse made are split again under memory pressure, when shmem is swapped \
                     out or a hole is punched in a tmpfs file; hugeshm segments shows what each \
                     segment has left on 2 MiB pages",
                    format_bytes(huge)
                ),
                Some(
                    "hugeshm collapse --pid PID   # again, for what was split; hugetlb pages \
                     (hugeshm advise) are never split"
                        .to_owned(),
                ),
            ));
        }
    }
    let pool_total_bytes = pool_total_bytes(r);
    if pool_total_bytes == 0 || r.thp.enabled.as_deref() != Some("always") {
        return out;
    }
    out.push(Finding::new(
        Severity::Warning,
        "thp-always",
        format!(
            "transparent huge pages are 'always' on a host with a {} huge page pool: khugepaged and fault-time compaction cause latency spikes and memory bloat in database processes",
            format_bytes(pool_total_bytes)
        ),
        Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled   # and transparent_hugepage=madvise on the kernel command line".to_string()),
    ));
    out
}

/// The SysV limits against the pools: `shmmax-small`, `shmall-small`.
fn sysv_limits(r: &StatusReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let pool_total_bytes = pool_total_bytes(r);
    if pool_total_bytes == 0 {
        return out;
    }
    if let Some(mx) = r.sysv.shmmax_bytes {
        if mx < pool_total_bytes {
            out.push(Finding::new(
                Severity::Warning,
                "shmmax-small",
                format!(
                    "kernel.shmmax ({}) is smaller than the huge page pool ({}): one SysV segment cannot use the whole pool",
                    format_bytes(mx),
                    format_bytes(pool_total_bytes)
                ),
                Some(format!("sysctl -w kernel.shmmax={pool_total_bytes}")),
            ));
        }
    }
    if let Some(all) = r.sysv.shmall_bytes {
        if all < pool_total_bytes {
            out.push(Finding::new(
                Severity::Warning,
                "shmall-small",
                format!(
                    "kernel.shmall ({} in 4 KiB pages) is smaller than the huge page pool ({}): SysV segments together cannot use the whole pool",
                    format_bytes(all),
                    format_bytes(pool_total_bytes)
                ),
                Some(format!("sysctl -w kernel.shmall={}", pool_total_bytes.div_ceil(BASE_PAGE))),
            ));
        }
    }
    out
}

/// NUMA, the pools: `pool-uneven` ([`crate::numa::uneven_pools`]), and
/// `pool-one-node` for a pool all on one node of several (when not said
/// already as uneven).
fn numa_pools(host: &HostSnapshot, r: &StatusReport) -> Vec<Finding> {
    if pool_total_bytes(r) == 0 {
        return Vec::new();
    }
    let (mut out, uneven_sizes) = crate::numa::uneven_pools(host);
    let node_ids: Vec<u32> = r.nodes.iter().map(|n| n.node).collect();
    if node_ids.len() > 1 {
        for p in r
            .pools
            .iter()
            .filter(|p| p.node.is_none() && p.total > 0)
            .filter(|p| !uneven_sizes.contains(&p.page_size_bytes))
        {
            let per: Vec<&PoolRow> = r
                .pools
                .iter()
                .filter(|q| q.node.is_some() && q.page_size_bytes == p.page_size_bytes)
                .collect();
            let with: Vec<&&PoolRow> = per.iter().filter(|q| q.total > 0).collect();
            if with.len() == 1 && per.len() > 1 {
                out.push(Finding::new(
                    Severity::Info,
                    "pool-one-node",
                    format!(
                        "all {} {} pages sit on node {} of {}: processes on other nodes use remote memory",
                        p.total,
                        format_bytes(p.page_size_bytes),
                        with[0].node.unwrap_or(0),
                        node_ids.len()
                    ),
                    None,
                ));
            }
        }
    }
    out
}

/// NUMA, the tmpfs mounts: `tmpfs-no-mpol` ([`crate::numa::tmpfs_findings`])
/// with the bytes of the tmpfs files on each.
fn tmpfs_numa(host: &HostSnapshot, segs: Option<&SegmentsReport>) -> Vec<Finding> {
    let mut tmpfs_bytes: BTreeMap<String, u64> = BTreeMap::new();
    for seg in segs
        .iter()
        .flat_map(|s| s.segments.iter())
        .filter(|g| g.kind == segments::SegmentKind::Posix)
    {
        if let Some(m) = seg
            .path
            .as_deref()
            .and_then(|p| crate::numa::tmpfs_mount_of(host, p))
        {
            *tmpfs_bytes.entry(m.target.clone()).or_default() += seg.resident_bytes.unwrap_or(0);
        }
    }
    crate::numa::tmpfs_findings(host, &tmpfs_bytes)
}

/// The segments: the scan's own findings, and `segment-findings`, the count
/// of each warning the segments have (`hugeshm segments` shows them).
fn segments_summary(segs: Option<&SegmentsReport>) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(s) = segs {
        out.extend(s.findings.iter().cloned());
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut worst = Severity::Info;
        for f in s
            .segments
            .iter()
            .flat_map(|g| g.findings.iter())
            .filter(|f| f.severity >= Severity::Warning)
        {
            *counts.entry(f.code.as_str()).or_default() += 1;
            worst = worst.max(f.severity);
        }
        if !counts.is_empty() {
            let list: Vec<String> = counts.iter().map(|(c, n)| format!("{c} x{n}")).collect();
            out.push(Finding::new(
                worst,
                "segment-findings",
                format!("shared memory segments need attention: {}", list.join(", ")),
                Some("hugeshm segments".to_string()),
            ));
        }
    }
    out
}

/// Boot and persistence: `persisted-differs` for a pool that a file (or
/// the kernel command line) sets to another size, or to a split over the
/// nodes other than the one it has, and `pool-not-persisted` for a pool
/// set at run time that nothing restores at boot.
fn persistence(host: &HostSnapshot, r: &StatusReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let default = r.default_page_size_bytes;
    let sysctl_nr = host.persisted.sysctl.get("vm.nr_hugepages");
    for p in r.pools.iter() {
        let size = format_bytes(p.page_size_bytes);
        let sysfs = crate::advise::nr_hugepages_path(p.page_size_bytes, p.node);
        let mut boot: Vec<(u64, String)> = Vec::new();
        if p.node.is_none() && Some(p.page_size_bytes) == default {
            if let Some(v) = sysctl_nr {
                if let Ok(n) = v.value.parse::<u64>() {
                    boot.push((n, v.file.clone()));
                }
            }
        }
        if let Some(v) = host.persisted.sysfs_writes.get(&sysfs) {
            if let Ok(n) = v.value.parse::<u64>() {
                boot.push((n, v.file.clone()));
            }
        }
        for (n, file) in &boot {
            // Node pools hold the surplus too; compare persistent pages.
            let now = p.total.saturating_sub(p.surplus);
            if *n != now {
                out.push(Finding::new(
                    Severity::Warning,
                    "persisted-differs",
                    format!(
                        "{file} sets the {size} pool{} to {n} pages but it holds {now} now: it will change at the next boot",
                        p.node.map(|n| format!(" of node {n}")).unwrap_or_default()
                    ),
                    Some(format!("edit {} to {now} to keep the running pool, or apply the file now", file.split(':').next().unwrap_or(file))),
                ));
            }
        }
        if p.node.is_none() && p.total > p.surplus {
            let node_writes = host.persisted.sysfs_writes.keys().any(|k| {
                k.ends_with(&format!(
                    "/hugepages-{}kB/nr_hugepages",
                    p.page_size_bytes / 1024
                ))
            });
            let persistent = p.total - p.surplus;
            // A host-wide count (sysctl.d, a host-wide tmpfiles.d write,
            // hugepages=N) is split evenly over the nodes at boot: it keeps
            // the size of an uneven split but not the split.
            let boot_even: Vec<String> = boot
                .iter()
                .filter(|(n, _)| *n == persistent)
                .map(|(_, f)| f.clone())
                .chain(
                    cmdline_even(host, p.page_size_bytes, default)
                        .filter(|n| *n == persistent)
                        .map(|_| "the kernel command line".to_string()),
                )
                .collect();
            if !node_writes && !boot_even.is_empty() {
                if let Some(fix) = crate::numa::per_node_persist_fix(host, p.page_size_bytes) {
                    let (now, even) = crate::numa::split_text(host, p.page_size_bytes);
                    out.push(Finding::new(
                        Severity::Warning,
                        "persisted-differs",
                        format!(
                            "{} sets the {size} pool to {persistent} pages, which the kernel splits evenly over the nodes at boot ({even}), but it holds {now} now: the split changes at the next boot",
                            boot_even.join(" and ")
                        ),
                        Some(format!("replace it with the per-node split: {fix}")),
                    ));
                }
            }
            if boot.is_empty() && p.boot_pages.is_none() && !node_writes {
                let per_node = crate::numa::per_node_persist_fix(host, p.page_size_bytes);
                let line = if let Some(fix) = per_node {
                    fix
                } else if Some(p.page_size_bytes) == default {
                    format!(
                        "echo 'vm.nr_hugepages = {}' > /etc/sysctl.d/60-hugeshm.conf",
                        p.total - p.surplus
                    )
                } else {
                    format!(
                        "echo 'w {sysfs} - - - - {}' > /etc/tmpfiles.d/60-hugeshm.conf   # or hugepagesz={} hugepages={} on the kernel command line",
                        p.total - p.surplus,
                        hugeshm_parse::size::page_size_short(p.page_size_bytes),
                        p.total - p.surplus
                    )
                };
                out.push(Finding::new(
                    Severity::Warning,
                    "pool-not-persisted",
                    format!(
                        "the {size} pool of {} pages was set at runtime and nothing sets it at boot (sysctl.d, tmpfiles.d, kernel command line): it is lost at the next reboot",
                        p.total - p.surplus
                    ),
                    Some(line),
                ));
            }
        }
    }
    out
}

/// Pages of `page_size` the kernel command line asks for host-wide
/// (`hugepages=N`, not the per-node form).
fn cmdline_even(host: &HostSnapshot, page_size: u64, default: Option<u64>) -> Option<u64> {
    host.cmdline
        .as_ref()?
        .boot_pages(page_size, default.unwrap_or(0))
        .filter(|b| b.per_node.is_empty())
        .map(|b| b.pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::build_from;
    use crate::status::tests::{codes, finding, host, numa_host, M2};
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::meminfo::Meminfo;
    use hugeshm_parse::pid_limits::PidLimits;
    use hugeshm_parse::size::MIB;
    use hugeshm_probe::Problem;

    #[test]
    fn unused_pool_is_reported_with_a_fix() {
        let r = build_from(&host(100, 100, 0), None);
        let f = r.findings.iter().find(|f| f.code == "pool-unused").unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.message.contains("100 of 100"), "{}", f.message);
        assert!(
            f.fix
                .as_deref()
                .unwrap()
                .starts_with("sysctl -w vm.nr_hugepages=2"),
            "{:?}",
            f.fix
        );
        // A pool used but for its two spare pages says nothing.
        let r = build_from(&host(100, 2, 0), None);
        assert!(!codes(&r).contains(&"pool-unused"));
    }

    #[test]
    fn no_hugetlb_kernel() {
        let mut h = HostSnapshot::default();
        let mut m = Meminfo::default();
        m.mem_total_bytes = Some(GIB);
        h.meminfo = Some(m);
        let r = build_from(&h, None);
        assert!(!r.hugetlb_supported);
        assert!(r.pools.is_empty());
        assert_eq!(codes(&r), vec!["no-hugetlb"]);
        assert_eq!(r.findings[0].severity, Severity::Error);
    }

    #[test]
    fn limits_and_thp() {
        let mut h = host(512, 0, 0);
        let mut l = PidLimits::default();
        l.memlock_soft_bytes = Some(64 * 1024);
        h.self_limits = Some(l);
        h.sysctl.shmmax = Some(32 * MIB);
        h.sysctl.shmall = Some(1024);
        h.thp.enabled =
            Some(hugeshm_parse::thp::parse_selector("e", "[always] madvise never").unwrap());
        let r = build_from(&h, None);
        let c = codes(&r);
        for code in ["shmmax-small", "shmall-small", "thp-always"] {
            assert!(c.contains(&code), "{code} missing from {c:?}");
        }
        // hugeshm's own memlock limit is not the servers': no finding.
        assert!(!c.contains(&"memlock-small"), "{c:?}");
        assert_eq!(r.memlock_bytes, Some(64 * 1024));
        // Without a pool none of these matter.
        let mut h0 = h.clone();
        h0.pools = vec![PoolCounters::new(M2, 0, 0, Some(0), 0, Some(0))];
        assert!(build_from(&h0, None).findings.is_empty());
    }

    #[test]
    fn boot_pages_not_granted() {
        let mut h = host(0, 0, 0);
        h.pools[1] = PoolCounters::new(GIB, 6, 6, Some(0), 0, Some(0));
        h.cmdline = Some(hugeshm_parse::cmdline::parse("hugepagesz=1G hugepages=8").unwrap());
        let r = build_from(&h, None);
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "boot-pool-short")
            .unwrap();
        assert!(
            f.message
                .contains("asks for 8 1 GiB pages but the pool holds 6"),
            "{}",
            f.message
        );
        assert_eq!(
            r.pools
                .iter()
                .find(|p| p.page_size_bytes == GIB)
                .unwrap()
                .boot_pages,
            Some(8)
        );
    }

    #[test]
    fn uneven_pools_get_the_per_node_writes() {
        let r = build_from(&numa_host(&[100, 20], &[1, 1]), None);
        let f = finding(&r, "pool-uneven");
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.message,
            "2 MiB pool uneven over the NUMA nodes: node 0 holds 100 pages and node 1 holds 20, \
             while the nodes have 1 CPU and 1 GiB each: an even split is 60 and 60. \
             Processes on node 1 get remote huge pages once its 20 are used, and a region bound \
             to node 1 can have no more than 20"
        );
        // Shrink node 0 first, then grow node 1; the boot form of the same split.
        assert_eq!(
            f.fix.as_deref(),
            Some(
                "echo 60 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages \
                 && echo 60 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages   \
                 # unless a server bound to a node needs them where they are; at boot: \
                 hugepagesz=2M hugepages=0:60,1:60 on the kernel command line, or these writes in tmpfiles.d"
            )
        );
        // Not also "on one node" for the same pool.
        let r = build_from(&numa_host(&[40, 0], &[1, 1]), None);
        assert!(codes(&r).contains(&"pool-uneven"), "{:?}", codes(&r));
        assert!(!codes(&r).contains(&"pool-one-node"), "{:?}", codes(&r));
        // Near even, or too small to matter: nothing.
        for pools in [[70, 50], [61, 59], [1, 0], [3, 1]] {
            let r = build_from(&numa_host(&pools, &[1, 1]), None);
            assert!(
                !codes(&r).contains(&"pool-uneven"),
                "{pools:?}: {:?}",
                codes(&r)
            );
        }
        // By CPUs: 80/40 is right for 2 and 1 CPUs, 60/60 is not.
        let r = build_from(&numa_host(&[80, 40], &[2, 1]), None);
        assert!(!codes(&r).contains(&"pool-uneven"), "{:?}", codes(&r));
        let r = build_from(&numa_host(&[60, 60], &[2, 1]), None);
        let f = finding(&r, "pool-uneven");
        assert!(
            f.message.contains("while node 0 has 2 CPUs and 1 GiB, node 1 has 1 CPU and 1 GiB: split by CPUs it is 80 and 40"),
            "{}",
            f.message
        );
        assert!(f.fix.as_deref().unwrap().starts_with(
            "echo 40 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages && echo 80 > /sys/devices/system/node/node0/"
        ), "{:?}", f.fix);
        // One node: nothing NUMA at all.
        let r = build_from(&numa_host(&[100], &[1]), None);
        assert!(!codes(&r)
            .iter()
            .any(|c| c.starts_with("pool-uneven") || *c == "tmpfs-no-mpol"));
    }

    #[test]
    fn uneven_fix_never_shrinks_a_node_below_its_pages_in_use() {
        let mut h = numa_host(&[100, 20], &[1, 1]);
        // 80 pages of node 0 are in use.
        h.node_pools[0].counters.free = 20;
        h.pools[0].free = 40;
        let f = finding(&build_from(&h, None), "pool-uneven").clone();
        assert!(
            f.fix.as_deref().unwrap().starts_with(
                "echo 80 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages && echo 60 > "
            ),
            "{:?}",
            f.fix
        );
    }

    #[test]
    fn an_uneven_split_is_persisted_per_node_not_as_a_sysctl() {
        let r = build_from(&numa_host(&[100, 20], &[1, 1]), None);
        let f = finding(&r, "pool-not-persisted");
        assert_eq!(
            f.fix.as_deref(),
            Some(
                "printf 'w /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages - - - - 100\\n\
                 w /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages - - - - 20\\n' \
                 > /etc/tmpfiles.d/60-hugeshm.conf   # or hugepagesz=2M hugepages=0:100,1:20 on the kernel \
                 command line; not vm.nr_hugepages, which the kernel splits evenly over the nodes"
            )
        );
        // An even split keeps the sysctl line.
        let r = build_from(&numa_host(&[61, 60], &[1, 1]), None);
        assert_eq!(
            finding(&r, "pool-not-persisted").fix.as_deref(),
            Some("echo 'vm.nr_hugepages = 121' > /etc/sysctl.d/60-hugeshm.conf")
        );
        // A sysctl.d line keeps the total but not the split.
        let mut h = numa_host(&[100, 20], &[1, 1]);
        h.persisted.sysctl.insert(
            "vm.nr_hugepages".into(),
            serde_json::from_value(
                serde_json::json!({"value": "120", "file": "/etc/sysctl.d/hp.conf:1"}),
            )
            .unwrap(),
        );
        let r = build_from(&h, None);
        assert!(
            !codes(&r).contains(&"pool-not-persisted"),
            "{:?}",
            codes(&r)
        );
        let f = finding(&r, "persisted-differs");
        assert_eq!(
            f.message,
            "/etc/sysctl.d/hp.conf:1 sets the 2 MiB pool to 120 pages, which the kernel splits \
             evenly over the nodes at boot (60 and 60), but it holds 100 on node 0 and 20 on node 1 \
             now: the split changes at the next boot"
        );
        assert!(
            f.fix.as_deref().unwrap().starts_with(
                "replace it with the per-node split: printf 'w /sys/devices/system/node/node0/"
            ),
            "{:?}",
            f.fix
        );
        // hugepages=120 on the kernel command line: the same.
        let mut h = numa_host(&[100, 20], &[1, 1]);
        h.cmdline = Some(hugeshm_parse::cmdline::parse("hugepages=120").unwrap());
        let f = finding(&build_from(&h, None), "persisted-differs").clone();
        assert!(
            f.message
                .starts_with("the kernel command line sets the 2 MiB pool to 120 pages"),
            "{}",
            f.message
        );
        // The per-node form on the command line, or per-node tmpfiles.d
        // lines, restore the split: nothing said.
        let mut h = numa_host(&[100, 20], &[1, 1]);
        h.cmdline = Some(hugeshm_parse::cmdline::parse("hugepages=0:100,1:20").unwrap());
        let c = codes(&build_from(&h, None)).join(" ");
        assert!(!c.contains("persisted"), "{c}");
    }

    #[test]
    fn tmpfs_without_mpol_on_a_multi_node_host() {
        let r = build_from(&numa_host(&[0, 0], &[1, 1]), None);
        let f = finding(&r, "tmpfs-no-mpol");
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.message,
            "tmpfs /dev/shm has no mpol= on a host with 2 NUMA nodes: each page of its files goes \
             to the node of the process that first touches it, so a file one process writes sits \
             all on that process's node (\"Cyclops\")"
        );
        assert_eq!(
            f.fix.as_deref(),
            Some(
                "mount -o remount,mpol=interleave /dev/shm   # files created from now on \
                 interleave their pages over the nodes; existing files keep theirs; at boot: \
                 tmpfs /dev/shm tmpfs defaults,mpol=interleave 0 0 in /etc/fstab"
            )
        );
        // With mpol= nothing is said.
        let mut h = numa_host(&[0, 0], &[1, 1]);
        h.mounts = hugeshm_parse::mounts::parse(
            "tmpfs /dev/shm tmpfs rw,nosuid,nodev,mpol=interleave:0-1 0 0\n",
        )
        .unwrap();
        assert!(!codes(&build_from(&h, None)).contains(&"tmpfs-no-mpol"));
        // 64 MiB of files on it make it a warning.
        let mut big = std::collections::BTreeMap::new();
        big.insert("/dev/shm".to_string(), 64 * MIB);
        let f = crate::numa::tmpfs_findings(&numa_host(&[0, 0], &[1, 1]), &big);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].message.ends_with("; its files hold 64 MiB now"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn unreadable_files_become_findings() {
        let mut h = host(0, 0, 0);
        h.problems.push(Problem::new(
            "/sys/x",
            hugeshm_probe::ProblemKind::Permission,
            "/sys/x: permission denied (run as root to read it)",
        ));
        h.self_uid = Some(1000);
        let r = build_from(&h, None);
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "unreadable-file")
            .unwrap();
        assert!(f.message.contains("/sys/x"));
        assert_eq!(
            f.fix.as_deref(),
            Some("run hugeshm as root (sudo hugeshm ...)")
        );
        assert_eq!(r.problems.len(), 1);
    }

    /// A segment of `kind` and `size` bytes on `page` pages, with findings
    /// of these codes and severities.
    fn segment(
        kind: &str,
        id: u64,
        size: u64,
        page: Option<u64>,
        findings: &[(&str, Severity)],
    ) -> segments::Segment {
        let findings: Vec<Finding> = findings
            .iter()
            .map(|(code, sev)| Finding::new(*sev, code, "m".to_string(), None))
            .collect();
        serde_json::from_value(serde_json::json!({
            "kind": kind, "id": id, "path": format!("/dev/shm/{id}"), "size_bytes": size,
            "page_size_bytes": page, "page_size_source": "", "resident_bytes": size,
            "attached_pids": [], "attached": [], "nodes": {}, "findings": findings
        }))
        .unwrap()
    }

    /// A segments report of `segs`, with the scan-wide findings `scan`.
    fn scanned(segs: Vec<segments::Segment>, scan: &[&str]) -> SegmentsReport {
        SegmentsReport {
            segments: segs,
            findings: scan
                .iter()
                .map(|c| Finding::new(Severity::Info, c, "m".to_string(), None))
                .collect(),
            ..Default::default()
        }
    }

    fn codes_of(f: &[Finding]) -> Vec<&str> {
        f.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn no_hugetlb_is_said_only_where_meminfo_was_read() {
        let mut h = HostSnapshot::default();
        let r = build_from(&h, None);
        assert!(no_hugetlb(&h, &r).is_empty());
        h.meminfo = Some(Meminfo::default());
        let r = build_from(&h, None);
        let f = no_hugetlb(&h, &r);
        assert_eq!(codes_of(&f), ["no-hugetlb"]);
        assert_eq!(f[0].severity, Severity::Error);
        let h = host(0, 0, 0);
        assert!(no_hugetlb(&h, &build_from(&h, None)).is_empty());
    }

    #[test]
    fn each_unreadable_host_file_is_a_finding_in_order() {
        let mut h = HostSnapshot::default();
        for path in [
            "/proc/meminfo",
            "/sys/kernel/mm/transparent_hugepage/enabled",
        ] {
            h.problems.push(Problem::new(
                path,
                hugeshm_probe::ProblemKind::Permission,
                format!("{path}: permission denied"),
            ));
        }
        h.self_uid = Some(1000);
        let f = unreadable(&h);
        assert_eq!(codes_of(&f), ["unreadable-file", "unreadable-file"]);
        assert_eq!(
            f[1].message,
            "/sys/kernel/mm/transparent_hugepage/enabled: permission denied"
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some("run hugeshm as root (sudo hugeshm ...)")
        );
        assert!(unreadable(&HostSnapshot::default()).is_empty());
    }

    #[test]
    fn segments_need_pages_of_their_size_or_of_the_default_where_they_fell_back() {
        let segs = scanned(
            vec![
                segment("sysv", 1, 64 * MIB, Some(BASE_PAGE), &[]),
                segment("hugetlbfs", 2, GIB, Some(GIB), &[]),
                segment("memfd", 3, 8 * MIB, Some(M2), &[]),
                // tmpfs and DAX take nothing from a pool; too small to fall back.
                segment("posix", 4, 64 * MIB, Some(BASE_PAGE), &[]),
                segment("dax", 5, 64 * MIB, Some(M2), &[]),
                segment("sysv", 6, MIB, Some(BASE_PAGE), &[]),
            ],
            &[],
        );
        let needs = segment_needs(Some(&segs), Some(M2));
        assert_eq!(needs.len(), 2, "{needs:?}");
        assert_eq!(
            needs[&M2],
            (36, vec!["sysv 1".to_string(), "/dev/shm/3".to_string()])
        );
        assert_eq!(needs[&GIB], (1, vec!["/dev/shm/2".to_string()]));
        assert!(segment_needs(None, Some(M2)).is_empty());
    }

    #[test]
    fn each_pool_says_short_unused_boot_short_and_surplus_in_that_order() {
        let mut r = build_from(&host(10, 10, 0), None);
        let two = r
            .pools
            .iter_mut()
            .find(|p| p.page_size_bytes == M2 && p.node.is_none())
            .unwrap();
        two.boot_pages = Some(20);
        two.surplus = 3;
        let mut needs = Needs::new();
        needs.insert(M2, (30, vec!["sysv 1".to_string()]));
        let f = pools(&r, &needs);
        assert_eq!(
            codes_of(&f),
            ["pool-short", "boot-pool-short", "pool-surplus"]
        );
        assert_eq!(
            f[0].message,
            "2 MiB pool holds 10 pages but the shared memory segments on this host would need 30 \
             on huge pages (sysv 1): the ones that do not fit run on 4 KiB pages"
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some(
                "hugeshm apply --live   # or: sysctl -w vm.nr_hugepages=32; for the next start. \
                 Those on 4 KiB pages now move without a restart where their silent-fallback \
                 names hugeshm collapse"
            )
        );
        assert_eq!(f[1].fix.as_deref(), Some("sysctl -w vm.nr_hugepages=20"));
        // Nothing needed: the free pool is unused instead of short.
        let f = pools(&r, &Needs::new());
        assert_eq!(
            codes_of(&f),
            ["pool-unused", "boot-pool-short", "pool-surplus"]
        );
        // Node rows are not pools of their own here.
        r.pools.retain(|p| p.node.is_some());
        assert!(pools(&r, &needs).is_empty());
    }

    #[test]
    fn a_pool_is_persisted_or_said_to_change_at_boot() {
        let h = host(120, 120, 0);
        let r = build_from(&h, None);
        let f = persistence(&h, &r);
        assert_eq!(codes_of(&f), ["pool-not-persisted"]);
        assert_eq!(
            f[0].fix.as_deref(),
            Some("echo 'vm.nr_hugepages = 120' > /etc/sysctl.d/60-hugeshm.conf")
        );
        let mut h = h;
        h.persisted.sysctl.insert(
            "vm.nr_hugepages".into(),
            serde_json::from_value(
                serde_json::json!({"value": "100", "file": "/etc/sysctl.d/hp.conf:3"}),
            )
            .unwrap(),
        );
        let f = persistence(&h, &r);
        assert_eq!(codes_of(&f), ["persisted-differs"]);
        assert_eq!(
            f[0].message,
            "/etc/sysctl.d/hp.conf:3 sets the 2 MiB pool to 100 pages but it holds 120 now: \
             it will change at the next boot"
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some(
                "edit /etc/sysctl.d/hp.conf to 120 to keep the running pool, or apply the file now"
            )
        );
        // The same count on the kernel command line: nothing to say.
        let mut h = host(120, 120, 0);
        h.cmdline = Some(hugeshm_parse::cmdline::parse("hugepages=120").unwrap());
        assert!(persistence(&h, &build_from(&h, None)).is_empty());
    }

    #[test]
    fn tuning_is_told_of_the_pages_the_boot_pool_could_not_have() {
        // one-gig-pool: hugepages=8 of 1 GiB on the command line, 6 granted,
        // no free gigabyte in the buddy lists.
        let (probe, _) = crate::fixture::tree("one-gig-pool");
        let h = probe.host();
        let r = build_from(&h, None);
        let gigantic = |f: Vec<Finding>| f.into_iter().find(|f| f.code == "gigantic-runtime");
        let f = gigantic(tuning(&h, &r, &Needs::new())).expect("gigantic-runtime");
        assert!(
            f.message.starts_with("1 GiB pages (2 more wanted)"),
            "{}",
            f.message
        );
        // Segments that need 9 of them: 3 more.
        let mut needs = Needs::new();
        needs.insert(GIB, (9, vec![]));
        let f = gigantic(tuning(&h, &r, &needs)).expect("gigantic-runtime");
        assert!(
            f.message.starts_with("1 GiB pages (3 more wanted)"),
            "{}",
            f.message
        );
        // Without the boot request nothing more is wanted of the 6 there.
        let mut r = r;
        r.pools.iter_mut().for_each(|p| p.boot_pages = None);
        assert!(gigantic(tuning(&h, &r, &Needs::new())).is_none());
    }

    #[test]
    fn thp_always_matters_only_with_a_pool() {
        let mut h = host(512, 0, 0);
        h.thp.enabled =
            Some(hugeshm_parse::thp::parse_selector("e", "[always] madvise never").unwrap());
        let f = thp(&build_from(&h, None));
        assert_eq!(codes_of(&f), ["thp-always"]);
        assert!(
            f[0].message.contains("with a 1 GiB huge page pool"),
            "{}",
            f[0].message
        );
        let mut no_pool = h.clone();
        no_pool.pools = vec![PoolCounters::new(M2, 0, 0, Some(0), 0, Some(0))];
        assert!(thp(&build_from(&no_pool, None)).is_empty());
        h.thp.enabled =
            Some(hugeshm_parse::thp::parse_selector("e", "always [madvise] never").unwrap());
        assert!(thp(&build_from(&h, None)).is_empty());
    }

    #[test]
    fn sysv_limits_below_the_pool_are_said_with_the_sysctl_to_raise_them() {
        let mut h = host(512, 0, 0);
        h.sysctl.shmmax = Some(32 * MIB);
        h.sysctl.shmall = Some(1024);
        let f = sysv_limits(&build_from(&h, None));
        assert_eq!(codes_of(&f), ["shmmax-small", "shmall-small"]);
        assert_eq!(
            f[0].fix.as_deref(),
            Some("sysctl -w kernel.shmmax=1073741824")
        );
        assert_eq!(f[1].fix.as_deref(), Some("sysctl -w kernel.shmall=262144"));
        h.sysctl.shmmax = Some(GIB);
        h.sysctl.shmall = Some(GIB / BASE_PAGE);
        assert!(sysv_limits(&build_from(&h, None)).is_empty());
    }

    #[test]
    fn a_pool_on_one_node_of_several_is_said_once() {
        // 3 pages on node 0, none on node 1: too few to be uneven.
        let r = build_from(&numa_host(&[3, 0], &[1, 1]), None);
        let f = numa_pools(&numa_host(&[3, 0], &[1, 1]), &r);
        assert_eq!(codes_of(&f), ["pool-one-node"]);
        assert_eq!(
            f[0].message,
            "all 3 2 MiB pages sit on node 0 of 2: processes on other nodes use remote memory"
        );
        // Uneven instead: only that.
        let h = numa_host(&[40, 0], &[1, 1]);
        assert_eq!(
            codes_of(&numa_pools(&h, &build_from(&h, None))),
            ["pool-uneven"]
        );
        // Even, or one node: nothing.
        for (pools, cpus) in [(&[2, 2][..], &[1, 1][..]), (&[4], &[1])] {
            let h = numa_host(pools, cpus);
            assert!(numa_pools(&h, &build_from(&h, None)).is_empty());
        }
    }

    #[test]
    fn tmpfs_files_add_up_per_mount() {
        let h = numa_host(&[0, 0], &[1, 1]);
        let segs = scanned(
            vec![
                segment("posix", 1, 32 * MIB, Some(BASE_PAGE), &[]),
                segment("posix", 2, 32 * MIB, Some(BASE_PAGE), &[]),
                segment("memfd", 3, 512 * MIB, Some(BASE_PAGE), &[]),
            ],
            &[],
        );
        let f = tmpfs_numa(&h, Some(&segs));
        assert_eq!(codes_of(&f), ["tmpfs-no-mpol"]);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].message.ends_with("; its files hold 64 MiB now"),
            "{}",
            f[0].message
        );
        let f = tmpfs_numa(&h, None);
        assert_eq!(f[0].severity, Severity::Info);
    }

    #[test]
    fn the_segments_summary_counts_each_warning_code() {
        let segs = scanned(
            vec![
                segment(
                    "sysv",
                    1,
                    GIB,
                    Some(BASE_PAGE),
                    &[
                        ("silent-fallback", Severity::Warning),
                        ("page-tables", Severity::Info),
                    ],
                ),
                segment("sysv", 2, GIB, Some(M2), &[("orphan", Severity::Warning)]),
                segment("sysv", 3, GIB, Some(M2), &[("orphan", Severity::Warning)]),
            ],
            &["processes-unreadable"],
        );
        let f = segments_summary(Some(&segs));
        assert_eq!(codes_of(&f), ["processes-unreadable", "segment-findings"]);
        assert_eq!(f[1].severity, Severity::Warning);
        assert_eq!(
            f[1].message,
            "shared memory segments need attention: orphan x2, silent-fallback x1"
        );
        assert_eq!(f[1].fix.as_deref(), Some("hugeshm segments"));
        // Info alone is not worth the summary.
        let quiet = scanned(
            vec![segment(
                "sysv",
                1,
                GIB,
                Some(BASE_PAGE),
                &[("page-tables", Severity::Info)],
            )],
            &[],
        );
        assert!(segments_summary(Some(&quiet)).is_empty());
        assert!(segments_summary(None).is_empty());
    }

    #[test]
    fn findings_come_in_topic_order_within_each_severity() {
        let mut h = host(512, 0, 0);
        h.pools[0] = PoolCounters::new(M2, 512, 0, Some(0), 2, Some(0));
        h.problems.push(Problem::new(
            "/proc/sys/kernel/shmmni",
            hugeshm_probe::ProblemKind::Permission,
            "denied",
        ));
        h.sysctl.shmmax = Some(32 * MIB);
        h.sysctl.shmall = Some(1024);
        h.thp.enabled =
            Some(hugeshm_parse::thp::parse_selector("e", "[always] madvise never").unwrap());
        let segs = scanned(
            vec![segment(
                "sysv",
                1,
                2 * GIB,
                Some(M2),
                &[("orphan", Severity::Warning)],
            )],
            &[],
        );
        let r = build_from(&h, Some(&segs));
        assert_eq!(
            codes(&r),
            [
                "unreadable-file",
                "pool-short",
                "pool-not-persisted",
                "thp-always",
                "shmmax-small",
                "shmall-small",
                "segment-findings",
                "pool-surplus",
            ]
        );
    }
}
