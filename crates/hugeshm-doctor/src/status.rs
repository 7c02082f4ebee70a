//! `hugeshm status`: the pools per page size and node, the settings that
//! matter, and the findings.

use crate::finding::{pool_fix, Finding, Severity};
use crate::segments::{self, SegmentsReport};
use hugeshm_parse::size::{format_bytes, BASE_PAGE, GIB};
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
    /// Processes the scan could not read; those that matter are also a
    /// `processes-unreadable` finding, the rest a footnote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<segments::ProcessProblem>,
}

/// A process that maps huge page shared memory, and its memlock limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ServerLimit {
    /// Pid.
    pub pid: u32,
    /// Process name.
    pub name: Option<String>,
    /// The systemd unit that runs it (from `/proc/PID/cgroup`).
    pub unit: Option<String>,
    /// The user it runs as, as limits.conf names it: the login name from
    /// the host's `/etc/passwd`, else `:UID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Bytes of huge page shared memory it maps.
    pub huge_bytes: u64,
    /// Bytes of SysV huge page segments it created: the kernel charges
    /// those to its memlock limit unless it has `CAP_IPC_LOCK` or is in
    /// `vm.hugetlb_shm_group`.
    pub sysv_created_bytes: u64,
    /// Bytes it has locked (`VmLck`). After `mlockall(MCL_FUTURE)` this
    /// also counts address space reserved with `PROT_NONE`, which holds
    /// no memory (DPDK reserves 128 GiB so).
    pub locked_bytes: u64,
    /// Of [`locked_bytes`](Self::locked_bytes), the locked mappings that
    /// can be accessed (not `PROT_NONE`), from its smaps: read only where
    /// `VmLck` exceeds a limit that binds it (`None` otherwise, or where
    /// smaps could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_accessible_bytes: Option<u64>,
    /// Its soft `RLIMIT_MEMLOCK` (`None`: unlimited).
    pub memlock_bytes: Option<u64>,
    /// Whether it has `CAP_IPC_LOCK` (`CapEff`): then `RLIMIT_MEMLOCK`
    /// binds none of its locking and none of its SysV segments.
    #[serde(default)]
    pub cap_ipc_lock: bool,
    /// Whether it has `CAP_IPC_LOCK`, or is in `vm.hugetlb_shm_group`: the
    /// memlock limit does not apply to its SysV huge page segments.
    pub exempt: bool,
}

/// Builds the report: reads the host and scans the processes (for what the
/// live segments need, and the memlock limits of the servers that map
/// them); the cgroup section is hugeshm's own.
pub fn build(probe: &Probe) -> StatusReport {
    build_for(probe, None)
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
pub fn build_for(probe: &Probe, pid: Option<u32>) -> StatusReport {
    build_with_segments(probe, pid).0
}

/// [`build_for`], returning the segments report it scanned as well: one
/// read of the host for both (what the exporter serves on each scrape).
pub fn build_with_segments(probe: &Probe, pid: Option<u32>) -> (StatusReport, SegmentsReport) {
    let host = probe.host();
    let segs = segments::build_with(probe, &host);
    let mut report = build_from(&host, Some(&segs));
    report.servers = servers(probe, &segs, host.sysctl.hugetlb_shm_group);
    report.findings.extend(server_findings(&report));
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
        Err(e) => {
            let p = e.to_problem();
            report.findings.push(Finding::new(
                Severity::Warning,
                "unreadable-file",
                p.reason.clone(),
                Some(p.fix(host.self_uid)),
            ));
            report.problems.push(p);
        }
    }
    report
        .findings
        .sort_by_key(|f| std::cmp::Reverse(f.severity));
    (report, segs)
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

/// The processes attached to huge page segments, with the huge page bytes
/// each maps and its memlock limit (processes whose limits cannot be read
/// are left out).
fn servers(probe: &Probe, segs: &SegmentsReport, shm_group: Option<u64>) -> Vec<ServerLimit> {
    let mut by_pid: std::collections::BTreeMap<u32, ServerLimit> = Default::default();
    for s in &segs.segments {
        if s.page_size_bytes.is_none_or(|p| p <= BASE_PAGE) {
            continue;
        }
        for &pid in &s.attached_pids {
            let name = s
                .attached
                .iter()
                .find(|a| a.pid == pid)
                .and_then(|a| a.name.clone());
            let e = by_pid.entry(pid).or_insert_with(|| ServerLimit {
                pid,
                name,
                unit: None,
                user: None,
                huge_bytes: 0,
                sysv_created_bytes: 0,
                locked_bytes: 0,
                locked_accessible_bytes: None,
                memlock_bytes: None,
                cap_ipc_lock: false,
                exempt: false,
            });
            e.huge_bytes = e.huge_bytes.saturating_add(s.size_bytes);
            if s.kind == segments::SegmentKind::Sysv && s.creator_pid == Some(pid) {
                e.sysv_created_bytes = e.sysv_created_bytes.saturating_add(s.size_bytes);
            }
        }
    }
    let passwd = std::fs::read_to_string(probe.roots.fs.join("etc/passwd")).unwrap_or_default();
    by_pid
        .into_values()
        .filter_map(|mut e| {
            let limits = probe.pid(e.pid).limits().ok()?;
            e.memlock_bytes = limits.memlock_soft_bytes;
            if let Ok(st) = probe.pid(e.pid).status() {
                e.user = st.uid.map(|u| {
                    hugeshm_parse::passwd::name_of(&passwd, u)
                        .map_or_else(|| format!(":{u}"), str::to_owned)
                });
                e.locked_bytes = st.vm_lck_bytes.unwrap_or(0);
                e.cap_ipc_lock = st.has_cap_ipc_lock();
                e.exempt = e.cap_ipc_lock
                    || shm_group.is_some_and(|g| u32::try_from(g).is_ok_and(|g| st.in_group(g)));
            }
            // VmLck over a limit that binds: what of it the limit would
            // refuse on the next start (its PROT_NONE reservations hold
            // nothing and mlock of them is not what fails).
            if !e.cap_ipc_lock && e.memlock_bytes.is_some_and(|ml| e.locked_bytes > ml) {
                e.locked_accessible_bytes = probe
                    .pid(e.pid)
                    .smaps()
                    .ok()
                    .map(|sm| locked_accessible(&sm));
            }
            e.unit = std::fs::read_to_string(probe.proc_path(&format!("{}/cgroup", e.pid)))
                .ok()
                .and_then(|t| hugeshm_parse::cgroup::systemd_unit(&t));
            Some(e)
        })
        .collect()
}

/// Bytes of the locked mappings of a process that can be accessed: those
/// with the `lo` flag that are not `PROT_NONE`. hugetlb mappings are never
/// marked locked (mlock skips them).
fn locked_accessible(smaps: &[hugeshm_parse::smaps::SmapsEntry]) -> u64 {
    smaps
        .iter()
        .filter(|e| e.vm_flags.iter().any(|f| f == "lo"))
        .filter(|e| e.map.perms.read || e.map.perms.write || e.map.perms.exec)
        .map(|e| e.size_bytes)
        .fold(0, u64::saturating_add)
}

/// What a server needs its memlock limit to cover, where the limit binds
/// it at all (not with `CAP_IPC_LOCK`): the SysV huge page segments it
/// creates (unless in `vm.hugetlb_shm_group`), and what it locks that is
/// accessible (its `VmLck` where smaps was not read).
fn memlock_needed(s: &ServerLimit) -> u64 {
    if s.cap_ipc_lock {
        return 0;
    }
    let sysv = if s.exempt { 0 } else { s.sysv_created_bytes };
    sysv.max(s.locked_accessible_bytes.unwrap_or(s.locked_bytes))
}

/// What [`memlock_needed`] counted, in words.
fn memlock_reason(s: &ServerLimit, need: u64) -> String {
    let locked = s.locked_accessible_bytes.unwrap_or(s.locked_bytes);
    if locked < need {
        return "its SysV huge page segments, without CAP_IPC_LOCK or vm.hugetlb_shm_group"
            .to_owned();
    }
    match s.locked_accessible_bytes {
        Some(a) if a < s.locked_bytes => format!(
            "its locked mappings that can be accessed; VmLck {} also counts {} of PROT_NONE \
             reservations",
            format_bytes(s.locked_bytes),
            format_bytes(s.locked_bytes - a)
        ),
        Some(_) => "its locked mappings".to_owned(),
        None => "it locks its memory (VmLck)".to_owned(),
    }
}

/// `memlock-small`: a server whose memlock limit is below what it needs:
/// the SysV huge page segments it creates (without CAP_IPC_LOCK or
/// vm.hugetlb_shm_group), or what it locks. A server that maps huge pages
/// through mmap and locks nothing needs none.
fn server_findings(r: &StatusReport) -> Vec<Finding> {
    r.servers
        .iter()
        .filter(|s| {
            let need = memlock_needed(s);
            need > 0 && s.memlock_bytes.is_some_and(|ml| ml < need)
        })
        .map(|s| {
            let ml = s.memlock_bytes.unwrap_or(0);
            let need = memlock_needed(s);
            let kib = need.div_ceil(1024);
            let who = format!(
                "pid {} ({}){}",
                s.pid,
                s.name.as_deref().unwrap_or("?"),
                s.unit
                    .as_deref()
                    .map(|u| format!(" of {u}"))
                    .unwrap_or_default()
            );
            Finding::new(
                Severity::Warning,
                "memlock-small",
                format!(
                    "{who} needs {} of locked memory ({}) with a memlock limit of {}, which binds \
                     it (no CAP_IPC_LOCK): its next start fails to {}",
                    format_bytes(need),
                    memlock_reason(s, need),
                    format_bytes(ml),
                    if s.locked_accessible_bytes.unwrap_or(s.locked_bytes) >= need {
                        "lock it"
                    } else {
                        "create them"
                    }
                ),
                Some(match &s.unit {
                    Some(u) if u.ends_with(".service") => format!(
                        "systemctl edit {}: add LimitMEMLOCK={} under [Service], then restart it",
                        hugeshm_fix::shell_quote(u),
                        kib * 1024
                    ),
                    _ => {
                        let (user, whom) = match &s.user {
                            Some(u) => (u.as_str(), "its user"),
                            None => ("<user>", "the user that starts it"),
                        };
                        // Not 60-hugeshm.conf: apply --persist owns that one.
                        format!(
                            "/etc/security/limits.d/99-hugeshm-local.conf: '{user} soft memlock \
                             {kib}' and '{user} hard memlock {kib}' for {whom}, then restart it"
                        )
                    }
                }),
            )
        })
        .collect()
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
        unreadable: segs.map(|s| s.unreadable.clone()).unwrap_or_default(),
    };
    report.findings = findings(host, &report, segs);
    report
}

/// Pools that will change at the next boot, and pools nothing restores.
fn persisted_findings(host: &HostSnapshot, r: &StatusReport) -> Vec<Finding> {
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

fn findings(host: &HostSnapshot, r: &StatusReport, segs: Option<&SegmentsReport>) -> Vec<Finding> {
    let mut out = Vec::new();
    let default = r.default_page_size_bytes;

    if !r.hugetlb_supported {
        let meminfo_read = host.meminfo.is_some();
        if meminfo_read {
            out.push(Finding::new(
                Severity::Error,
                "no-hugetlb",
                "this kernel has no hugetlb support: /proc/meminfo has no HugePages lines and /sys/kernel/mm/hugepages is absent; shared memory can only use 4 KiB pages (or THP)",
                Some("boot a kernel built with CONFIG_HUGETLBFS=y and CONFIG_HUGETLB_PAGE=y".to_string()),
            ));
        }
    }

    for p in &host.problems {
        out.push(Finding::new(
            Severity::Warning,
            "unreadable-file",
            p.reason.clone(),
            Some(p.fix(host.self_uid)),
        ));
    }

    // What the live segments need, per page size.
    let mut need_by_size: std::collections::BTreeMap<u64, (u64, Vec<String>)> = Default::default();
    if let Some(s) = segs {
        for seg in &s.segments {
            if let Some(t) = crate::cgroup::needed_page_size(seg, default) {
                let e = need_by_size.entry(t).or_default();
                e.0 = e.0.saturating_add(seg.size_bytes.div_ceil(t));
                e.1.push(seg.label());
            }
        }
    }

    let pool_total_bytes: u64 = r
        .pools
        .iter()
        .filter(|p| p.node.is_none())
        .map(|p| p.total_bytes)
        .sum();

    for p in r.pools.iter().filter(|p| p.node.is_none()) {
        let size = format_bytes(p.page_size_bytes);
        let used = p.total.saturating_sub(p.available);
        let (need, who) = need_by_size
            .get(&p.page_size_bytes)
            .cloned()
            .unwrap_or_default();
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
                    "hugeshm apply --live   # or: {}",
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

    out.extend(persisted_findings(host, r));
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
    let need_pages: std::collections::BTreeMap<u64, u64> =
        need_by_size.iter().map(|(s, (n, _))| (*s, *n)).collect();
    out.extend(crate::tuning::findings(
        host,
        &r.tuning,
        &need_pages,
        &boot_short,
    ));

    if pool_total_bytes > 0 {
        if r.thp.enabled.as_deref() == Some("always") {
            out.push(Finding::new(
                Severity::Warning,
                "thp-always",
                format!(
                    "transparent huge pages are 'always' on a host with a {} huge page pool: khugepaged and fault-time compaction cause latency spikes and memory bloat in database processes",
                    format_bytes(pool_total_bytes)
                ),
                Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled   # and transparent_hugepage=madvise on the kernel command line".to_string()),
            ));
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
        // Pools uneven over the nodes; on one node of several (when not
        // said already as uneven).
        let (uneven, uneven_sizes) = crate::numa::uneven_pools(host);
        out.extend(uneven);
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
    }

    // tmpfs mounts without mpol= on a multi-node host, with the bytes of
    // the tmpfs files on each.
    let mut tmpfs_bytes: std::collections::BTreeMap<String, u64> = Default::default();
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
    out.extend(crate::numa::tmpfs_findings(host, &tmpfs_bytes));

    if let Some(s) = segs {
        out.extend(s.findings.iter().cloned());
        let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
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

    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::meminfo::Meminfo;
    use hugeshm_parse::pid_limits::PidLimits;
    use hugeshm_parse::size::MIB;

    const M2: u64 = 2 * MIB;

    fn host(nr: u64, free: u64, resv: u64) -> HostSnapshot {
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

    fn codes(r: &StatusReport) -> Vec<&str> {
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
    fn servers_below_their_huge_memory_get_memlock_small() {
        let mut r = build_from(&host(0, 0, 0), None);
        let server = |pid: u32,
                      name: &str,
                      unit: Option<&str>,
                      sysv: u64,
                      locked: u64,
                      limit: u64,
                      exempt: bool| ServerLimit {
            pid,
            name: Some(name.into()),
            unit: unit.map(str::to_owned),
            user: (pid == 12).then(|| "jboss".into()),
            huge_bytes: GIB.max(locked),
            sysv_created_bytes: sysv,
            locked_bytes: locked,
            locked_accessible_bytes: None,
            memlock_bytes: Some(limit),
            cap_ipc_lock: false,
            exempt,
        };
        r.servers = vec![
            // Creates a 1 GiB SysV huge page segment under a 64 KiB limit.
            server(
                10,
                "oracle",
                Some("oracle-db.service"),
                GIB,
                0,
                64 << 10,
                false,
            ),
            // The same in vm.hugetlb_shm_group (or with CAP_IPC_LOCK): fine.
            server(11, "oracle", None, GIB, 0, 64 << 10, true),
            // mmap'd huge pages, nothing locked (PostgreSQL): fine.
            server(13, "postgres", None, 0, 0, 64 << 10, false),
            // Locks 2 GiB under a 1 GiB limit.
            server(12, "java", None, 0, 2 * GIB, GIB, false),
            // Root's DPDK: mlockall with CAP_IPC_LOCK, VmLck 128 GiB of
            // reservations: the limit does not bind it.
            ServerLimit {
                cap_ipc_lock: true,
                ..server(14, "dpdk-testpmd", None, 0, 128 * GIB, 8 << 20, true)
            },
            // The same as a user: 96 MiB of its VmLck can be accessed.
            ServerLimit {
                locked_accessible_bytes: Some(96 << 20),
                ..server(15, "dpdk-testpmd", None, 0, 128 * GIB, 8 << 20, false)
            },
        ];
        let f = server_findings(&r);
        assert_eq!(f.len(), 3, "{f:#?}");
        assert!(
            f[2].message.starts_with(
                "pid 15 (dpdk-testpmd) needs 96 MiB of locked memory (its locked mappings that \
                 can be accessed; VmLck 128 GiB also counts 128 GiB of PROT_NONE reservations) \
                 with a memlock limit of 8 MiB, which binds it (no CAP_IPC_LOCK): its next start \
                 fails to lock it"
            ),
            "{}",
            f[2].message
        );
        assert!(
            f[0].message.starts_with(
                "pid 10 (oracle) of oracle-db.service needs 1 GiB of locked memory (its SysV"
            ),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[0].fix.as_deref(),
            Some("systemctl edit oracle-db.service: add LimitMEMLOCK=1073741824 under [Service], then restart it")
        );
        assert!(
            f[1].message
                .starts_with("pid 12 (java) needs 2 GiB of locked memory (it locks"),
            "{}",
            f[1].message
        );
        assert_eq!(
            f[1].fix.as_deref(),
            Some(
                "/etc/security/limits.d/99-hugeshm-local.conf: 'jboss soft memlock 2097152' and \
                 'jboss hard memlock 2097152' for its user, then restart it"
            )
        );
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

    /// A host with `pools[i]` 2 MiB pages (all free) on node i, one CPU and
    /// 1 GiB per node (or `cpus[i]` CPUs), and /dev/shm mounted without mpol=.
    fn numa_host(pools: &[u64], cpus: &[usize]) -> HostSnapshot {
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

    fn finding<'a>(r: &'a StatusReport, code: &str) -> &'a Finding {
        r.findings
            .iter()
            .find(|f| f.code == code)
            .unwrap_or_else(|| panic!("no {code} in {:#?}", r.findings))
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
}
