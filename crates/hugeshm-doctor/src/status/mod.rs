//! `hugeshm status`: the pools per page size and node, the settings that
//! matter, and the findings.

mod findings;
mod servers;

pub use servers::ServerLimit;

use crate::finding::{Finding, Severity};
use crate::segments::{self, SegmentsReport};
use hugeshm_parse::size::BASE_PAGE;
use hugeshm_probe::{HostSnapshot, HugetlbCgroup, Probe, Problem};
use serde::{Deserialize, Serialize};

/// One pool: one page size on the whole host (`node` = `None`) or on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolRow {
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// NUMA node, `None` for the whole host.
    pub node: Option<u32>,
    /// Pages in the pool (persistent + surplus).
    pub total: u64,
    /// Pages nobody has faulted in.
    pub free: u64,
    /// Pages promised to mappings but not faulted in yet (host-wide only;
    /// the kernel keeps no per-node count, so 0 on node rows).
    pub reserved: u64,
    /// Surplus pages (allocated above `nr_hugepages` through overcommit).
    pub surplus: u64,
    /// What a new mapping can really get: free − reserved.
    pub available: u64,
    /// `total` in bytes.
    pub total_bytes: u64,
    /// `available` in bytes.
    pub available_bytes: u64,
    /// Whether this is the default huge page size (`Hugepagesize`).
    pub default: bool,
    /// Pages asked for on the kernel command line (host rows only).
    pub boot_pages: Option<u64>,
    /// What a new mapping of this size can really get, in pages: the
    /// least of `available` and the room the hugetlb cgroup of the process
    /// looked at leaves (for its faults and for its reservation; see
    /// [`StatusReport::cgroup`]). `available` when no cgroup limits it.
    #[serde(default)]
    pub can_get_pages: u64,
}

/// THP settings and what they mean for a database host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ThpReport {
    /// `enabled` (selected value), `None` without THP.
    pub enabled: Option<String>,
    /// `defrag`.
    pub defrag: Option<String>,
    /// `shmem_enabled`.
    pub shmem_enabled: Option<String>,
    /// `khugepaged/defrag`.
    pub khugepaged_defrag: Option<bool>,
    /// One line for a database host.
    pub verdict: String,
    /// `ShmemHugePages`: shared memory on 2 MiB THP now (collapsed in
    /// place, or THP shmem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shmem_huge_bytes: Option<u64>,
    /// `thp_split_page` of /proc/vmstat: huge pages split since boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_since_boot: Option<u64>,
}

/// SysV limits against the pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SysvLimits {
    /// `kernel.shmmax`: largest segment, bytes.
    pub shmmax_bytes: Option<u64>,
    /// `kernel.shmall` converted to bytes (it counts base pages).
    pub shmall_bytes: Option<u64>,
    /// `kernel.shmmni`: most segments.
    pub shmmni: Option<u64>,
    /// Segments now.
    pub segments: u64,
    /// Their total size, bytes.
    pub segments_bytes: u64,
}

/// Boot-time settings from `/proc/cmdline`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BootSettings {
    /// `default_hugepagesz=`.
    pub default_hugepagesz_bytes: Option<u64>,
    /// `hugepages=` per size (`page_size_bytes`, pages, per-node split).
    pub pools: Vec<BootPoolRow>,
    /// `hugetlb_cma=`.
    pub hugetlb_cma: Option<String>,
    /// `transparent_hugepage=`.
    pub transparent_hugepage: Option<String>,
}

/// One `hugepages=` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BootPoolRow {
    /// Page size.
    pub page_size_bytes: u64,
    /// Pages asked for.
    pub pages: u64,
    /// Per node (node → pages) where the per-node form was used.
    pub per_node: std::collections::BTreeMap<u32, u64>,
}

/// A hugetlbfs or tmpfs mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MountRow {
    /// Mount point.
    pub target: String,
    /// `hugetlbfs` or `tmpfs`.
    pub fstype: String,
    /// hugetlbfs page size (the default size when `pagesize=` is absent).
    pub page_size_bytes: Option<u64>,
    /// `size=` limit, bytes.
    pub size_bytes: Option<u64>,
    /// tmpfs `huge=`.
    pub huge: Option<String>,
    /// tmpfs `mpol=`.
    pub mpol: Option<String>,
}

/// NUMA node summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeRow {
    /// Node id.
    pub node: u32,
    /// Its CPUs.
    pub cpus: Vec<u32>,
    /// Memory on it.
    pub mem_total_bytes: Option<u64>,
    /// Free memory on it.
    pub mem_free_bytes: Option<u64>,
    /// Memory and no CPU: a memory-only tier (CXL memory, persistent
    /// memory online as RAM, a far node), reached only remotely.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_only: bool,
}

/// The whole `status` report (`status --json` prints exactly this).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatusReport {
    /// Whether the kernel has hugetlb support.
    pub hugetlb_supported: bool,
    /// The default huge page size.
    pub default_page_size_bytes: Option<u64>,
    /// Pools: host rows (`node` null) for every size, then per node.
    pub pools: Vec<PoolRow>,
    /// NUMA nodes.
    pub nodes: Vec<NodeRow>,
    /// THP.
    pub thp: ThpReport,
    /// The caller's memlock limit (soft), `None` = unlimited (or unreadable:
    /// see `problems`).
    pub memlock_bytes: Option<u64>,
    /// The processes that map huge page shared memory, with their memlock
    /// limits (the `memlock-small` finding compares these).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerLimit>,
    /// `PageTables` of `/proc/meminfo`.
    pub page_tables_bytes: Option<u64>,
    /// `Hugetlb` of `/proc/meminfo`: memory in huge page pools of every size.
    pub hugetlb_bytes: Option<u64>,
    /// Memory in the machine.
    pub mem_total_bytes: Option<u64>,
    /// SysV limits.
    pub sysv: SysvLimits,
    /// `vm.hugetlb_shm_group`.
    pub hugetlb_shm_group: Option<u64>,
    /// `vm.nr_overcommit_hugepages`.
    pub nr_overcommit_hugepages: Option<u64>,
    /// Boot-time settings.
    pub boot: BootSettings,
    /// hugetlbfs and tmpfs mounts.
    pub mounts: Vec<MountRow>,
    /// Findings, most severe first.
    pub findings: Vec<Finding>,
    /// Files that could not be read.
    pub problems: Vec<Problem>,
    /// The hugetlb cgroup of the process looked at (hugeshm itself, or
    /// `cgroup_pid`): per page size its limits, usage, reservations,
    /// refusals, and the effective limit and room over its ancestors.
    /// `None` when no hugetlb controller is mounted (or it could not be
    /// read: see `problems`).
    #[serde(default)]
    pub cgroup: Option<HugetlbCgroup>,
    /// The process whose cgroup `cgroup` is (`status --pid`); absent for
    /// hugeshm itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_pid: Option<u32>,
    /// Persistent memory and memory tiers: NVDIMM namespaces, DAX mounts,
    /// device-dax, memory-only nodes; absent on a host with none of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmem: Option<crate::pmem::PmemReport>,
    /// `vm.min_free_kbytes`, 1 GiB pages at run time, HVO and demotion:
    /// what `hugeadm --explain` says, with the numbers.
    #[serde(default)]
    pub tuning: crate::tuning::TuningReport,
    /// The hugetlb cgroups with a limit that hold processes mapping shared
    /// memory that needs huge pages (or fell back from them): shown beside
    /// the cgroup of `cgroup_pid` or hugeshm's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_cgroups: Vec<segments::LimitedCgroup>,
    /// The kubelet's `kubepods` cgroup (its hugetlb limits: the node's
    /// allocatable huge pages when the kubelet started) against the pools;
    /// absent on a host without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<crate::kubelet::KubeletReport>,
    /// Processes the scan could not read; those that matter are also a
    /// `processes-unreadable` finding, the rest a footnote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<segments::ProcessProblem>,
}

/// Builds the report: reads the host and scans the processes (for what the
/// live segments need, and the memlock limits of the servers that map
/// them); the cgroup section is hugeshm's own. `kept`: the regions made to
/// be kept that the caller found ([`segments::KeptRegions`]), no orphans.
pub fn build(probe: &Probe, kept: &segments::KeptRegions) -> StatusReport {
    build_for(probe, None, kept)
}

/// Adds the persistent memory section, its findings and unreadable files.
fn add_pmem(report: &mut StatusReport, probe: &Probe, host: &HostSnapshot) {
    let (pmem, findings, snap) = crate::pmem::build(probe, host);
    report.pmem = pmem;
    report.findings.extend(findings);
    report.problems.extend(snap.problems);
}

/// [`build`], with the cgroup section for process `pid` (`None`: hugeshm
/// itself).
pub fn build_for(probe: &Probe, pid: Option<u32>, kept: &segments::KeptRegions) -> StatusReport {
    build_with_segments(probe, pid, kept).0
}

/// [`build_for`], returning the segments report it scanned as well: one
/// read of the host for both (what the exporter serves on each scrape).
pub fn build_with_segments(
    probe: &Probe,
    pid: Option<u32>,
    kept: &segments::KeptRegions,
) -> (StatusReport, SegmentsReport) {
    let host = probe.host();
    let segs = segments::build_with(probe, &host, kept);
    let mut report = build_from(&host, Some(&segs));
    report.servers = servers::servers(probe, &segs, host.sysctl.hugetlb_shm_group);
    report.findings.extend(servers::server_findings(&report));
    report.cgroup_pid = pid;
    add_pmem(&mut report, probe, &host);
    if let Some(p) = report.pmem.as_mut() {
        p.mapped = segs
            .segments
            .iter()
            .filter(|s| s.kind == segments::SegmentKind::Dax)
            .map(|s| crate::pmem::PmemMapped {
                path: s.label(),
                size_bytes: s.size_bytes,
                page_size_bytes: s.page_size_bytes,
                pids: s.attached_pids.clone(),
            })
            .collect();
    }
    match probe.hugetlb_cgroup(pid) {
        Ok(cg) => add_cgroup(&mut report, cg, &segs, |p| probe.cgroups(Some(p)).ok()),
        // A tree without mountinfo (a fixture from before cgroups were
        // read) has no cgroup section; anything else is a problem.
        Err(e) if e.is_not_found() && e.path().ends_with("/mountinfo") => {}
        Err(e) => unreadable(&mut report, &e, host.self_uid),
    }
    add_kubelet(&mut report, probe, &host);
    report
        .findings
        .sort_by_key(|f| std::cmp::Reverse(f.severity));
    (report, segs)
}

/// A file that could not be read: an `unreadable-file` finding and a problem.
fn unreadable(report: &mut StatusReport, e: &hugeshm_probe::ReadError, self_uid: Option<u32>) {
    let p = e.to_problem();
    report.findings.push(Finding::new(
        Severity::Warning,
        "unreadable-file",
        p.reason.clone(),
        Some(p.fix(self_uid)),
    ));
    report.problems.push(p);
}

/// The kubelet's `kubepods` cgroup against the pools, and its findings.
fn add_kubelet(report: &mut StatusReport, probe: &Probe, host: &HostSnapshot) {
    match probe.kubepods() {
        Ok(Some(kp)) => {
            let pools: Vec<crate::kubelet::PoolNow> = report
                .pools
                .iter()
                .filter(|p| p.node.is_none())
                .map(|p| crate::kubelet::PoolNow {
                    page_size_bytes: p.page_size_bytes,
                    total: p.total,
                    free: p.free,
                    reserved: p.reserved,
                })
                .collect();
            let (k, findings) = crate::kubelet::build(&kp, &pools);
            report.kubelet = Some(k);
            report.findings.extend(findings);
        }
        Ok(None) => {}
        // Read where the cgroup section was (a tree without mountinfo has
        // neither); anything else is a problem.
        Err(e) if e.is_not_found() && e.path().ends_with("/mountinfo") => {}
        Err(e) => unreadable(report, &e, host.self_uid),
    }
}

/// Puts the cgroup into the report: what each pool row can get under it,
/// and its findings (`cgroup_of` reads a pid's `/proc/PID/cgroup`).
pub fn add_cgroup(
    report: &mut StatusReport,
    cg: Option<HugetlbCgroup>,
    segs: &SegmentsReport,
    cgroup_of: impl Fn(u32) -> Option<Vec<hugeshm_parse::cgroup::CgroupEntry>>,
) {
    let Some(cg) = cg else {
        report.cgroup = None;
        return;
    };
    for row in &mut report.pools {
        if let Some(room) = cg
            .size(row.page_size_bytes)
            .and_then(|s| s.new_mapping_pages())
        {
            row.can_get_pages = row.available.min(room);
        }
    }
    let mut pid_paths = std::collections::BTreeMap::new();
    for seg in &segs.segments {
        for &pid in &seg.attached_pids {
            if pid_paths.contains_key(&pid) {
                continue;
            }
            if let Some(entries) = cgroup_of(pid) {
                if let Some(path) = cg.path_of(&entries) {
                    pid_paths.insert(pid, path.to_string());
                }
            }
        }
    }
    let default = report.default_page_size_bytes;
    let empty_pools: Vec<u64> = report
        .pools
        .iter()
        .filter(|p| {
            p.node.is_none()
                && p.total == 0
                && !(Some(p.page_size_bytes) == default
                    && report.nr_overcommit_hugepages.is_some_and(|n| n > 0))
        })
        .map(|p| p.page_size_bytes)
        .collect();
    report.findings.extend(crate::cgroup::findings(
        &cg,
        &segs.segments,
        &pid_paths,
        default,
        &empty_pools,
    ));
    report.cgroup = Some(cg);
}

fn thp_verdict(enabled: Option<&str>, shmem: Option<&str>) -> String {
    match enabled {
        None => "THP not available on this kernel: nothing to tune".to_string(),
        Some("always") => "always: every anonymous mapping may be backed by THP; database hosts usually want madvise (compaction stalls, memory bloat)".to_string(),
        Some("madvise") => match shmem {
            Some("always") | Some("force") => "madvise, but shmem THP is forced: /dev/shm and SysV 4 KiB segments may be collapsed; fine, but hugetlb is the dependable way".to_string(),
            _ => "madvise: only regions that ask get THP; a good setting for a database host".to_string(),
        },
        Some("never") => "never: no THP; fine when shared memory is on hugetlb pages".to_string(),
        Some(other) => format!("{other}: unusual THP mode"),
    }
}

/// Builds the report from a snapshot (and the segments, when scanned).
pub fn build_from(host: &HostSnapshot, segs: Option<&SegmentsReport>) -> StatusReport {
    let default = host.default_page_size();
    let cmdline = host.cmdline.clone().unwrap_or_default();
    let mut pools = Vec::new();
    for p in &host.pools {
        // A request without hugepagesz= is for the default size; with the default
        // unknown (meminfo unreadable) only requests naming their size match.
        let boot = cmdline
            .boot_pages(p.page_size_bytes, default.unwrap_or(0))
            .map(|b| b.pages);
        pools.push(PoolRow {
            page_size_bytes: p.page_size_bytes,
            node: None,
            total: p.total(),
            free: p.free,
            reserved: p.resv.unwrap_or(0),
            surplus: p.surplus,
            available: p.available(),
            total_bytes: p.total().saturating_mul(p.page_size_bytes),
            available_bytes: p.available().saturating_mul(p.page_size_bytes),
            default: Some(p.page_size_bytes) == default,
            boot_pages: boot,
            can_get_pages: p.available(),
        });
    }
    for np in &host.node_pools {
        let c = &np.counters;
        pools.push(PoolRow {
            page_size_bytes: c.page_size_bytes,
            node: Some(np.node),
            total: c.total(),
            free: c.free,
            reserved: 0,
            surplus: c.surplus,
            available: c.available(),
            total_bytes: c.total().saturating_mul(c.page_size_bytes),
            available_bytes: c.available().saturating_mul(c.page_size_bytes),
            default: Some(c.page_size_bytes) == default,
            boot_pages: None,
            can_get_pages: c.available(),
        });
    }

    let thp = ThpReport {
        enabled: host.thp.enabled.as_ref().map(|s| s.selected.clone()),
        defrag: host.thp.defrag.as_ref().map(|s| s.selected.clone()),
        shmem_enabled: host.thp.shmem_enabled.as_ref().map(|s| s.selected.clone()),
        khugepaged_defrag: host.thp.khugepaged_defrag,
        shmem_huge_bytes: host.meminfo.as_ref().and_then(|m| m.shmem_huge_pages_bytes),
        split_since_boot: host.vmstat.as_ref().and_then(|v| v.thp_split_page),
        verdict: if host.thp.enabled.is_none()
            && host
                .problems
                .iter()
                .any(|p| p.path.ends_with("transparent_hugepage/enabled"))
        {
            "THP mode could not be read (see the findings)".to_string()
        } else {
            thp_verdict(
                host.thp.enabled.as_ref().map(|s| s.selected.as_str()),
                host.thp.shmem_enabled.as_ref().map(|s| s.selected.as_str()),
            )
        },
    };

    let sysv = SysvLimits {
        shmmax_bytes: host.sysctl.shmmax,
        shmall_bytes: host.sysctl.shmall.map(|p| p.saturating_mul(BASE_PAGE)),
        shmmni: host.sysctl.shmmni,
        segments: host.shm.len() as u64,
        segments_bytes: host
            .shm
            .iter()
            .map(|s| s.size_bytes)
            .fold(0u64, u64::saturating_add),
    };

    let boot = BootSettings {
        default_hugepagesz_bytes: cmdline.default_hugepagesz,
        pools: cmdline
            .pools
            .iter()
            .map(|b| BootPoolRow {
                page_size_bytes: b.page_size_bytes.or(default).unwrap_or(2 << 20),
                pages: b.pages,
                per_node: b.per_node.clone(),
            })
            .collect(),
        hugetlb_cma: cmdline.hugetlb_cma.clone(),
        transparent_hugepage: cmdline.transparent_hugepage.clone(),
    };

    let mounts = host
        .mounts
        .iter()
        .filter(|m| {
            m.is_hugetlbfs()
                || (m.is_tmpfs()
                    && (m.target == "/dev/shm"
                        || m.option("huge").is_some()
                        || m.option("mpol").is_some()))
        })
        .map(|m| MountRow {
            target: m.target.clone(),
            fstype: m.fstype.clone(),
            page_size_bytes: if m.is_hugetlbfs() {
                m.hugetlbfs_page_size().or(default)
            } else {
                None
            },
            size_bytes: m.size_bytes(),
            huge: m.option("huge").map(str::to_string),
            mpol: m.option("mpol").map(str::to_string),
        })
        .collect();

    let nodes = host
        .nodes
        .iter()
        .map(|n| NodeRow {
            node: n.node,
            cpus: n.cpus.clone(),
            mem_total_bytes: n.meminfo.as_ref().and_then(|m| m.mem_total_bytes),
            mem_free_bytes: n.meminfo.as_ref().and_then(|m| m.mem_free_bytes),
            memory_only: n.cpus.is_empty()
                && n.meminfo
                    .as_ref()
                    .and_then(|m| m.mem_total_bytes)
                    .is_some_and(|b| b > 0),
        })
        .collect();

    let mut report = StatusReport {
        hugetlb_supported: host.hugetlb_supported(),
        default_page_size_bytes: default,
        pools,
        nodes,
        thp,
        memlock_bytes: host.self_limits.as_ref().and_then(|l| l.memlock_soft_bytes),
        servers: Vec::new(),
        page_tables_bytes: host.meminfo.as_ref().and_then(|m| m.page_tables_bytes),
        hugetlb_bytes: host.meminfo.as_ref().and_then(|m| m.hugetlb_bytes),
        mem_total_bytes: host.meminfo.as_ref().and_then(|m| m.mem_total_bytes),
        sysv,
        hugetlb_shm_group: host.sysctl.hugetlb_shm_group,
        nr_overcommit_hugepages: host.sysctl.nr_overcommit_hugepages,
        boot,
        mounts,
        findings: Vec::new(),
        problems: host.problems.clone(),
        cgroup: None,
        cgroup_pid: None,
        pmem: None,
        tuning: crate::tuning::build(host),
        server_cgroups: segs.map(|s| s.limited_cgroups.clone()).unwrap_or_default(),
        kubelet: None,
        unreadable: segs.map(|s| s.unreadable.clone()).unwrap_or_default(),
    };
    report.findings = findings::findings(host, &report, segs);
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::meminfo::Meminfo;
    use hugeshm_parse::size::{GIB, MIB};

    pub(super) const M2: u64 = 2 * MIB;

    pub(super) fn host(nr: u64, free: u64, resv: u64) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        let mut m = Meminfo::default();
        m.hugepages_total = Some(nr);
        m.hugepages_free = Some(free);
        m.hugepages_rsvd = Some(resv);
        m.hugepages_surp = Some(0);
        m.hugepagesize_bytes = Some(M2);
        m.page_tables_bytes = Some(4 * MIB);
        h.meminfo = Some(m);
        h.hugetlb_sysfs = true;
        h.pools = vec![
            PoolCounters::new(M2, nr, free, Some(resv), 0, Some(0)),
            PoolCounters::new(GIB, 0, 0, Some(0), 0, Some(0)),
        ];
        h
    }

    pub(super) fn codes(r: &StatusReport) -> Vec<&str> {
        r.findings.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn pools_and_available() {
        let r = build_from(&host(100, 60, 10), None);
        let row = r
            .pools
            .iter()
            .find(|p| p.page_size_bytes == M2 && p.node.is_none())
            .unwrap();
        assert_eq!(
            (row.total, row.free, row.reserved, row.available),
            (100, 60, 10, 50)
        );
        assert_eq!(row.available_bytes, 50 * M2);
        assert!(row.default);
        assert!(
            !r.pools
                .iter()
                .find(|p| p.page_size_bytes == GIB)
                .unwrap()
                .default
        );
    }

    /// A host with `pools[i]` 2 MiB pages (all free) on node i, one CPU and
    /// 1 GiB per node (or `cpus[i]` CPUs), and /dev/shm mounted without mpol=.
    pub(super) fn numa_host(pools: &[u64], cpus: &[usize]) -> HostSnapshot {
        let total: u64 = pools.iter().sum();
        let mut h = host(total, total, 0);
        for (i, pages) in pools.iter().enumerate() {
            let first = cpus.iter().take(i).sum::<usize>() as u32;
            let list: Vec<u32> =
                (first..first + cpus.get(i).copied().unwrap_or(1) as u32).collect();
            h.nodes.push(
                serde_json::from_value(serde_json::json!({
                    "node": i, "cpus": list, "distance": [],
                    "meminfo": {"mem_total_bytes": GIB, "mem_free_bytes": GIB / 2,
                        "mem_used_bytes": null, "shmem_bytes": null, "page_tables_bytes": null,
                        "hugepages_total": null, "hugepages_free": null}
                }))
                .unwrap(),
            );
            h.node_pools.push(
                serde_json::from_value(serde_json::json!({
                    "node": i,
                    "counters": {"page_size_bytes": M2, "nr": pages, "free": pages,
                        "resv": null, "surplus": 0, "nr_overcommit": null}
                }))
                .unwrap(),
            );
        }
        h.mounts = hugeshm_parse::mounts::parse(
            "tmpfs /dev/shm tmpfs rw,nosuid,nodev,inode64 0 0\n\
             hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n",
        )
        .unwrap();
        h
    }

    pub(super) fn finding<'a>(r: &'a StatusReport, code: &str) -> &'a Finding {
        r.findings
            .iter()
            .find(|f| f.code == code)
            .unwrap_or_else(|| panic!("no {code} in {:#?}", r.findings))
    }
}
