//! Everything host-wide: pools, nodes, THP, sysctls, command line, mounts, SysV segments.

use crate::read::{read_parse, read_parse_at, Problem, ReadError};
use crate::Probe;
use hugeshm_parse::buddyinfo::BuddyZone;
use hugeshm_parse::cmdline::KernelCmdline;
use hugeshm_parse::hugepages::{parse_counter, PoolCounters};
use hugeshm_parse::meminfo::Meminfo;
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::node::NodeMeminfo;
use hugeshm_parse::pagetypeinfo::PageTypeInfo;
use hugeshm_parse::pid_limits::PidLimits;
use hugeshm_parse::sysvipc_shm::ShmSegment;
use hugeshm_parse::thp::Selector;
use hugeshm_parse::{
    buddyinfo, cmdline, hugepages, meminfo, mounts, node, pagetypeinfo, pid_limits, pid_status,
    size, sysctl, sysvipc_shm, thp,
};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A NUMA node's pool of one page size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodePool {
    /// Node id.
    pub node: u32,
    /// Its counters (`resv` and `nr_overcommit` are global only: `None`).
    pub counters: PoolCounters,
}

/// A NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeInfo {
    /// Node id.
    pub node: u32,
    /// Its CPUs.
    pub cpus: Vec<u32>,
    /// Distances to every node, by node order.
    pub distance: Vec<u32>,
    /// Its meminfo.
    pub meminfo: Option<NodeMeminfo>,
    /// Its weight for weighted interleave
    /// (`/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`, Linux 6.9+).
    #[serde(default)]
    pub interleave_weight: Option<u64>,
}

/// Transparent huge page settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ThpState {
    /// `enabled`.
    pub enabled: Option<Selector>,
    /// `defrag`.
    pub defrag: Option<Selector>,
    /// `shmem_enabled`.
    pub shmem_enabled: Option<Selector>,
    /// `hugepages-2048kB/shmem_enabled` (Linux 6.11+): the 2 MiB size's own
    /// switch for shared anonymous memory (`inherit` by default).
    #[serde(default)]
    pub shmem_enabled_2m: Option<Selector>,
    /// `khugepaged/defrag`.
    pub khugepaged_defrag: Option<bool>,
}

/// The `/proc/sys` values hugeshm reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Sysctls {
    /// `vm.nr_hugepages` (default size).
    pub nr_hugepages: Option<u64>,
    /// `vm.nr_overcommit_hugepages`.
    pub nr_overcommit_hugepages: Option<u64>,
    /// `vm.hugetlb_shm_group`: the gid allowed SysV `SHM_HUGETLB` (0 = root only).
    pub hugetlb_shm_group: Option<u64>,
    /// `vm.min_free_kbytes`.
    pub min_free_kbytes: Option<i64>,
    /// `vm.overcommit_memory`.
    pub overcommit_memory: Option<i64>,
    /// `kernel.shmmax` in bytes.
    pub shmmax: Option<u64>,
    /// `kernel.shmall` in pages of the base size.
    pub shmall: Option<u64>,
    /// `kernel.shmmni`.
    pub shmmni: Option<u64>,
    /// `vm.hugetlb_optimize_vmemmap` (HVO: 1 frees most of the `struct
    /// page` memory of each huge page); `None` where the kernel was built
    /// without `CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP`.
    #[serde(default)]
    pub hugetlb_optimize_vmemmap: Option<u64>,
    /// `kernel.osrelease`: the running kernel (`6.18.0-1-amd64`).
    #[serde(default)]
    pub osrelease: Option<String>,
}

/// A pool that can be demoted: a write of N to its `demote` file turns N
/// free pages of `page_size_bytes` into pages of `demote_size_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DemoteSize {
    /// The pool's page size.
    pub page_size_bytes: u64,
    /// `demote_size`.
    pub demote_size_bytes: u64,
}

/// One read of every host-wide file. Files that could not be read are `None`
/// (or empty) and listed in `problems`; files that are simply absent on this
/// kernel are not problems.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HostSnapshot {
    /// `/proc/meminfo`.
    pub meminfo: Option<Meminfo>,
    /// Per page size, host-wide, smallest first. Empty without hugetlb support.
    pub pools: Vec<PoolCounters>,
    /// Whether `/sys/kernel/mm/hugepages` exists.
    pub hugetlb_sysfs: bool,
    /// Per node and page size.
    pub node_pools: Vec<NodePool>,
    /// NUMA nodes (empty on a kernel without NUMA sysfs).
    pub nodes: Vec<NodeInfo>,
    /// Whether the kernel has weighted interleave
    /// (`/sys/kernel/mm/mempolicy/weighted_interleave`, Linux 6.9+).
    #[serde(default)]
    pub weighted_interleave: bool,
    /// THP settings.
    pub thp: ThpState,
    /// sysctls.
    pub sysctl: Sysctls,
    /// `/proc/cmdline`.
    pub cmdline: Option<KernelCmdline>,
    /// `/proc/mounts`.
    pub mounts: Vec<Mount>,
    /// `/proc/sysvipc/shm`.
    pub shm: Vec<ShmSegment>,
    /// `/proc/self/limits` of the caller (the memlock limit).
    pub self_limits: Option<PidLimits>,
    /// The caller's real uid (`/proc/self/status`).
    pub self_uid: Option<u32>,
    /// What sysctl.d and tmpfiles.d will set at the next boot.
    pub persisted: crate::Persisted,
    /// `/proc/buddyinfo`: free blocks per order in each populated zone.
    #[serde(default)]
    pub buddyinfo: Vec<BuddyZone>,
    /// `/proc/pagetypeinfo`: pageblocks per zone and migrate type (`None`
    /// when not root: the file is mode 0400).
    #[serde(default)]
    pub pagetypeinfo: Option<PageTypeInfo>,
    /// Per page size, the size its pages are demoted to by a write to its
    /// `demote` file (`demote_size`, Linux 5.16+); absent where a size
    /// cannot be demoted.
    #[serde(default)]
    pub demote: Vec<DemoteSize>,
    /// `/proc/vmstat`'s THP counters.
    #[serde(default)]
    pub vmstat: Option<hugeshm_parse::vmstat::Vmstat>,
    /// Files that could not be read or parsed.
    pub problems: Vec<Problem>,
}

impl HostSnapshot {
    /// The default huge page size (`Hugepagesize`), if the kernel has one.
    pub fn default_page_size(&self) -> Option<u64> {
        self.meminfo.as_ref().and_then(|m| m.hugepagesize_bytes)
    }

    /// Whether the kernel supports hugetlb at all.
    pub fn hugetlb_supported(&self) -> bool {
        self.hugetlb_sysfs || self.meminfo.as_ref().is_some_and(|m| m.hugetlb_supported())
    }

    /// The host-wide pool of one size.
    pub fn pool(&self, page_size: u64) -> Option<&PoolCounters> {
        self.pools.iter().find(|p| p.page_size_bytes == page_size)
    }
}

struct Collector<'a> {
    problems: &'a mut Vec<Problem>,
}

impl Collector<'_> {
    /// Keeps a value; records a problem unless the file is simply absent.
    fn keep<T>(&mut self, r: Result<T, ReadError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                self.problems.push(e.to_problem());
                None
            }
        }
    }

    /// Like `keep`, but an absent file is a problem too.
    fn need<T>(&mut self, r: Result<T, ReadError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.problems.push(e.to_problem());
                None
            }
        }
    }
}

/// Sorted `(page size, dir)` of `hugepages-*kB` entries in a directory.
pub(crate) fn size_dirs(dir: &Path) -> Result<Vec<(u64, std::path::PathBuf)>, ReadError> {
    let rd =
        std::fs::read_dir(dir).map_err(|e| crate::read::io_error(dir.display().to_string(), e))?;
    let mut out: Vec<_> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            size::hugepages_dir_size(&name.to_string_lossy()).map(|s| (s, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

fn counter(dir: &Path, file: &str) -> Result<u64, ReadError> {
    read_parse_at(&dir.join(file), parse_counter)
}

impl Probe {
    /// The NUMA node ids (`/sys/devices/system/node/nodeN`), ascending; empty
    /// on a kernel without NUMA sysfs. Only lists the directory.
    pub fn node_ids(&self) -> Vec<u32> {
        let Ok(rd) = std::fs::read_dir(self.sys_path("devices/system/node")) else {
            return Vec::new();
        };
        let mut ids: Vec<u32> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
            .collect();
        ids.sort_unstable();
        ids
    }

    /// `/proc/mounts`, each mount point once (one mounted over is listed
    /// twice: only the last one is visible).
    pub fn mounts(&self) -> Result<Vec<mounts::Mount>, ReadError> {
        let mut all = read_parse(&self.proc_path("mounts"), mounts::parse)?;
        let mut seen = std::collections::HashSet::new();
        all.reverse();
        all.retain(|m| seen.insert(m.target.clone()));
        all.reverse();
        Ok(all)
    }

    /// `/proc/sysvipc/shm`: every System V segment.
    pub fn sysv_segments(&self) -> Result<Vec<sysvipc_shm::ShmSegment>, ReadError> {
        read_parse(&self.proc_path("sysvipc/shm"), sysvipc_shm::parse)
    }

    /// Reads every host-wide file once.
    pub fn host(&self) -> HostSnapshot {
        self.read_host(true, true)
    }

    /// [`Probe::host`] without the free lists (`buddyinfo` and
    /// `pagetypeinfo` are left empty): what a segment scan needs. The
    /// kernel counts `/proc/pagetypeinfo` by walking every free list of
    /// every zone, which takes tens of milliseconds on a large host.
    pub fn host_without_free_lists(&self) -> HostSnapshot {
        self.read_host(false, true)
    }

    /// [`Probe::host`] without the free lists and without the settings of
    /// the next boot (`persisted` left empty): what creating or attaching
    /// a region needs (pools, meminfo, mounts, limits, cgroups). On this
    /// 2-core VM reading `/proc/pagetypeinfo` alone took 12 ms of a 2 GiB
    /// region's 16 ms set-up.
    pub fn host_for_regions(&self) -> HostSnapshot {
        self.read_host(false, false)
    }

    fn read_host(&self, free_lists: bool, next_boot: bool) -> HostSnapshot {
        let mut snap = HostSnapshot::default();
        let mut problems = Vec::new();
        let mut c = Collector {
            problems: &mut problems,
        };

        snap.meminfo = c.need(read_parse(&self.proc_path("meminfo"), meminfo::parse));
        snap.vmstat = c.keep(read_parse(
            &self.proc_path("vmstat"),
            hugeshm_parse::vmstat::parse,
        ));

        // Host-wide pools per size.
        let hp = self.sys_path("kernel/mm/hugepages");
        match size_dirs(&hp) {
            Ok(dirs) => {
                snap.hugetlb_sysfs = true;
                for (page, dir) in dirs {
                    let (Some(nr), Some(free), Some(surplus)) = (
                        c.need(counter(&dir, "nr_hugepages")),
                        c.need(counter(&dir, "free_hugepages")),
                        c.need(counter(&dir, "surplus_hugepages")),
                    ) else {
                        continue;
                    };
                    let resv = c.need(counter(&dir, "resv_hugepages"));
                    if let Some(d) = c.keep(read_parse_at(
                        &dir.join("demote_size"),
                        hugepages::parse_demote_size,
                    )) {
                        snap.demote.push(DemoteSize {
                            page_size_bytes: page,
                            demote_size_bytes: d,
                        });
                    }
                    let over = c.keep(counter(&dir, "nr_overcommit_hugepages"));
                    snap.pools
                        .push(PoolCounters::new(page, nr, free, resv, surplus, over));
                }
            }
            Err(e) => {
                c.keep(Err::<(), _>(e));
            }
        }

        // NUMA nodes.
        let node_root = self.sys_path("devices/system/node");
        let weights = self.sys_path("kernel/mm/mempolicy/weighted_interleave");
        snap.weighted_interleave = weights.is_dir();
        if node_root.is_dir() {
            for id in self.node_ids() {
                let nd = node_root.join(format!("node{id}"));
                let info = NodeInfo {
                    node: id,
                    cpus: c
                        .keep(read_parse_at(&nd.join("cpulist"), node::parse_list))
                        .unwrap_or_default(),
                    distance: c
                        .keep(read_parse_at(&nd.join("distance"), node::parse_distance))
                        .unwrap_or_default(),
                    meminfo: c.keep(read_parse_at(&nd.join("meminfo"), node::parse_meminfo)),
                    interleave_weight: if snap.weighted_interleave {
                        c.keep(read_parse_at(
                            &weights.join(format!("node{id}")),
                            sysctl::parse_u64_value,
                        ))
                    } else {
                        None
                    },
                };
                snap.nodes.push(info);
                if let Some(dirs) = c.keep(size_dirs(&nd.join("hugepages"))) {
                    for (page, dir) in dirs {
                        let (Some(nr), Some(free), Some(surplus)) = (
                            c.need(counter(&dir, "nr_hugepages")),
                            c.need(counter(&dir, "free_hugepages")),
                            c.need(counter(&dir, "surplus_hugepages")),
                        ) else {
                            continue;
                        };
                        snap.node_pools.push(NodePool {
                            node: id,
                            counters: PoolCounters::new(page, nr, free, None, surplus, None),
                        });
                    }
                }
            }
        }

        // THP.
        let thp_dir = self.sys_path("kernel/mm/transparent_hugepage");
        snap.thp = ThpState {
            enabled: c.keep(read_parse_at(&thp_dir.join("enabled"), thp::parse_selector)),
            defrag: c.keep(read_parse_at(&thp_dir.join("defrag"), thp::parse_selector)),
            shmem_enabled: c.keep(read_parse_at(
                &thp_dir.join("shmem_enabled"),
                thp::parse_selector,
            )),
            khugepaged_defrag: c.keep(read_parse_at(
                &thp_dir.join("khugepaged/defrag"),
                thp::parse_flag,
            )),
            shmem_enabled_2m: c.keep(read_parse_at(
                &thp_dir.join("hugepages-2048kB/shmem_enabled"),
                thp::parse_selector,
            )),
        };

        // sysctls.
        let u = |c: &mut Collector, rel: &str| {
            c.keep(read_parse_at(&self.proc_path(rel), sysctl::parse_u64_value))
        };
        let i = |c: &mut Collector, rel: &str| {
            c.keep(read_parse_at(&self.proc_path(rel), sysctl::parse_i64_value))
        };
        snap.sysctl = Sysctls {
            nr_hugepages: u(&mut c, "sys/vm/nr_hugepages"),
            nr_overcommit_hugepages: u(&mut c, "sys/vm/nr_overcommit_hugepages"),
            hugetlb_shm_group: u(&mut c, "sys/vm/hugetlb_shm_group"),
            min_free_kbytes: i(&mut c, "sys/vm/min_free_kbytes"),
            overcommit_memory: i(&mut c, "sys/vm/overcommit_memory"),
            shmmax: u(&mut c, "sys/kernel/shmmax"),
            shmall: u(&mut c, "sys/kernel/shmall"),
            shmmni: u(&mut c, "sys/kernel/shmmni"),
            hugetlb_optimize_vmemmap: u(&mut c, "sys/vm/hugetlb_optimize_vmemmap"),
            osrelease: c
                .keep(crate::read::read_text(
                    &self.proc_path("sys/kernel/osrelease"),
                ))
                .map(|t| t.trim().to_owned()),
        };
        if free_lists {
            snap.buddyinfo = c
                .keep(read_parse(&self.proc_path("buddyinfo"), buddyinfo::parse))
                .unwrap_or_default();
            // Root only (mode 0400): not being allowed to read it is no problem.
            snap.pagetypeinfo =
                match read_parse(&self.proc_path("pagetypeinfo"), pagetypeinfo::parse) {
                    Ok(p) => Some(p),
                    Err(ReadError::PermissionDenied { .. }) => None,
                    Err(e) => c.keep(Err(e)),
                };
        }

        snap.cmdline = c.keep(read_parse(&self.proc_path("cmdline"), cmdline::parse));
        snap.mounts = c.need(self.mounts()).unwrap_or_default();
        snap.shm = c.keep(self.sysv_segments()).unwrap_or_default();
        snap.self_limits = c.keep(read_parse(
            &self.proc_path("self/limits"),
            pid_limits::parse,
        ));
        snap.self_uid = c
            .keep(read_parse(
                &self.proc_path("self/status"),
                pid_status::parse,
            ))
            .and_then(|s| s.uid);

        if next_boot {
            snap.persisted = self.persisted(&mut problems);
        }
        snap.problems = problems;
        snap
    }
}
