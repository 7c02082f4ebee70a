//! `hugeshm segments`: every shared memory object and huge page mapping on the
//! host, and the page size really backing it.
//!
//! The scan reads `/proc/PID/maps` of every process first (cheap), and opens
//! `smaps`, `numa_maps` and `status` only for processes that map shared memory
//! or huge pages. For an object mapped by many processes (a database's shared
//! area with hundreds of backends), `smaps` and `numa_maps` are read from a few
//! of them only (the creator first), and from no more once one has seen the
//! whole object resident: the page size is a property of the object, and
//! resident bytes and node placement are taken as the largest any sampled
//! process sees, which cannot exceed all of it. (Where shmem THP is enabled,
//! one process's PMD mappings say nothing of another's: sampling goes on
//! unless the object is all PMD-mapped.)

mod cgroups;
mod findings;
mod sample;
mod scan;

pub use cgroups::LimitedCgroup;

use crate::dax::{self, DaxInfo};
use crate::finding::Finding;
use findings::{segment_findings, unreadable_finding, unreadable_that_matter};
use hugeshm_parse::size::BASE_PAGE;
use hugeshm_probe::{HostSnapshot, MapsRead, Probe, Problem, ReadError};
use sample::{dax_pass, Sample};
use scan::{classify, Key, Mounts, Obj};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// How many attached processes' smaps/numa_maps are read per object.
pub const SAMPLE_PROCESSES: usize = 4;

/// A process attached to a segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttachedProcess {
    /// Pid.
    pub pid: u32,
    /// Process name (`status` Name).
    pub name: Option<String>,
    /// Real uid.
    pub uid: Option<u32>,
    /// Its page-table bytes (`VmPTE`), for all of its mappings.
    pub vm_pte_bytes: Option<u64>,
    /// Its hugetlb cgroup (path in the hierarchy), for processes mapping
    /// hugetlb memory, where it can be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
}

/// What kind of object a [`Segment`] is. Serialized (and printed) as the
/// strings in the variant docs, which scripts match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum SegmentKind {
    /// `sysv`: a SysV segment (`shmget`; `ipcs -m`).
    #[serde(rename = "sysv")]
    Sysv,
    /// `memfd`: a `memfd_create` file.
    #[serde(rename = "memfd")]
    Memfd,
    /// `hugetlbfs`: a file on a hugetlbfs mount.
    #[serde(rename = "hugetlbfs")]
    Hugetlbfs,
    /// `anon`: shared anonymous memory (MAP_SHARED|MAP_ANONYMOUS, inherited
    /// over fork).
    #[serde(rename = "anon")]
    Anon,
    /// `posix`: a file on /dev/shm or another tmpfs.
    #[serde(rename = "posix")]
    Posix,
    /// `private-hugetlb`: a process's own MAP_HUGETLB memory (e.g. a JVM heap).
    #[serde(rename = "private-hugetlb")]
    PrivateHugetlb,
    /// `dax`: a file on a `-o dax` mount (persistent memory) or a
    /// device-dax (`/dev/daxX.Y`), mapped shared.
    #[serde(rename = "dax")]
    Dax,
}

impl SegmentKind {
    /// Every kind.
    pub const ALL: [SegmentKind; 7] = [
        SegmentKind::Sysv,
        SegmentKind::Memfd,
        SegmentKind::Hugetlbfs,
        SegmentKind::Anon,
        SegmentKind::Posix,
        SegmentKind::PrivateHugetlb,
        SegmentKind::Dax,
    ];

    /// The name it is serialized and printed as: `sysv`, `memfd`, `hugetlbfs`,
    /// `anon`, `posix`, `private-hugetlb`, `dax`.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentKind::Sysv => "sysv",
            SegmentKind::Memfd => "memfd",
            SegmentKind::Hugetlbfs => "hugetlbfs",
            SegmentKind::Anon => "anon",
            SegmentKind::Posix => "posix",
            SegmentKind::PrivateHugetlb => "private-hugetlb",
            SegmentKind::Dax => "dax",
        }
    }

    /// Whether a shared object of this kind gets huge pages only when its
    /// creator asks (SHM_HUGETLB, MAP_HUGETLB, MFD_HUGETLB), so that one on
    /// 4 KiB pages may have fallen back silently: `sysv`, `anon`, `memfd`.
    pub fn huge_on_request(self) -> bool {
        matches!(
            self,
            SegmentKind::Sysv | SegmentKind::Anon | SegmentKind::Memfd
        )
    }
}

impl std::fmt::Display for SegmentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One shared memory object or huge page mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Segment {
    /// What it is (serialized as `sysv`, `memfd`, `hugetlbfs`, `anon`,
    /// `posix` or `private-hugetlb`).
    pub kind: SegmentKind,
    /// shmid for `sysv`; inode for the others.
    pub id: Option<u64>,
    /// SysV key as `ipcs` prints it (`0x0000abcd`).
    pub key: Option<String>,
    /// Path or name (`/dev/hugepages/x`, `/dev/shm/x`, `memfd:name`, `/anon_hugepage`).
    pub path: Option<String>,
    /// Size in bytes.
    pub size_bytes: u64,
    /// The page size really backing it, from an attached process's smaps
    /// (`KernelPageSize`) or the mount; `None` when it cannot be known.
    pub page_size_bytes: Option<u64>,
    /// Where `page_size_bytes` comes from, or why it is unknown.
    pub page_size_source: String,
    /// Bytes resident (faulted in), when known.
    pub resident_bytes: Option<u64>,
    /// Bytes mapped with transparent huge pages (shmem PMD mappings).
    pub thp_bytes: Option<u64>,
    /// Owner uid.
    pub owner_uid: Option<u32>,
    /// Permission bits (SysV perms, or file mode).
    pub mode: Option<u32>,
    /// Creator pid (SysV `cpid`; the owning process of a private mapping).
    pub creator_pid: Option<u32>,
    /// Creator's process name, if it still runs.
    pub creator_name: Option<String>,
    /// Pids of the processes mapping it.
    pub attached_pids: Vec<u32>,
    /// Those processes, with names and page-table bytes.
    pub attached: Vec<AttachedProcess>,
    /// The kernel's attach count (SysV only).
    pub nattch: Option<u64>,
    /// Resident bytes per NUMA node (node id as a string → bytes).
    pub nodes: BTreeMap<String, u64>,
    /// NUMA policy of the mapping (`default`, `bind:0-1`, `interleave:0-1`, ...).
    pub numa_policy: Option<String>,
    /// What is wrong with it.
    pub findings: Vec<Finding>,
    /// For `dax`: the mount, device, namespace and node it is on, and how
    /// each sampled process maps it (PMD or 4 KiB faults, from pagemap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dax: Option<DaxInfo>,
}

impl Segment {
    /// A short human label: `sysv 32769`, `memfd:pool`, `/dev/shm/x`.
    pub fn label(&self) -> String {
        match (self.kind, &self.id, &self.path) {
            (SegmentKind::Sysv, Some(id), _) => format!("sysv {id}"),
            (SegmentKind::PrivateHugetlb, _, _) => {
                format!("private-hugetlb of pid {}", self.creator_pid.unwrap_or(0))
            }
            (_, _, Some(p)) => p.clone(),
            (k, Some(id), None) => format!("{k} {id}"),
            (k, None, None) => k.to_string(),
        }
    }
}

/// A process the scan could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProcessProblem {
    /// Pid.
    pub pid: u32,
    /// The file, what went wrong and why.
    #[serde(flatten)]
    pub problem: Problem,
}

/// The whole scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SegmentsReport {
    /// Every object found, SysV first, then by size.
    pub segments: Vec<Segment>,
    /// Processes whose maps were read.
    pub processes_scanned: u64,
    /// Processes that exited during the scan.
    pub processes_vanished: u64,
    /// Processes that could not be read (permissions, malformed files).
    pub unreadable: Vec<ProcessProblem>,
    /// Host files that could not be read.
    pub problems: Vec<Problem>,
    /// Scan-wide findings.
    pub findings: Vec<Finding>,
    /// NUMA nodes on the host.
    pub numa_nodes: u32,
    /// How long the scan took.
    pub scan_seconds: f64,
    /// How the mappings were read: `query` (the `PROCMAP_QUERY` ioctl)
    /// or `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps_read: Option<MapsRead>,
    /// The hugetlb cgroups with a limit that hold processes mapping the
    /// segments that need huge pages (or fell back from them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limited_cgroups: Vec<LimitedCgroup>,
}

/// Scans the host (reads the host files it needs first).
pub fn build(probe: &Probe) -> SegmentsReport {
    let host = probe.host_without_free_lists();
    build_with(probe, &host)
}

/// Scans the processes, given a host snapshot already read.
pub fn build_with(probe: &Probe, host: &HostSnapshot) -> SegmentsReport {
    let t0 = Instant::now();
    let mut report = SegmentsReport {
        problems: host.problems.clone(),
        numa_nodes: host.nodes.len() as u32,
        ..Default::default()
    };
    let default_huge = host.default_page_size();
    let mounts = Mounts {
        hugetlbfs: host
            .mounts
            .iter()
            .filter(|m| m.is_hugetlbfs())
            .filter_map(|m| Some((m.target.clone(), m.hugetlbfs_page_size().or(default_huge)?)))
            .collect(),
        tmpfs: host
            .mounts
            .iter()
            .filter(|m| m.is_tmpfs())
            .map(|m| {
                (
                    m.target.clone(),
                    matches!(m.option("huge"), Some(h) if h != "never"),
                )
            })
            .collect(),
        dax: host
            .mounts
            .iter()
            .filter(|m| dax::is_dax_mount(m))
            .map(|m| m.target.clone())
            .collect(),
    };

    let mut objs: BTreeMap<Key, Obj> = BTreeMap::new();
    let mut unreadable = Vec::new();
    let record =
        |unreadable: &mut Vec<ProcessProblem>, vanished: &mut u64, pid: u32, e: ReadError| {
            if e.is_not_found() {
                *vanished += 1;
            } else {
                unreadable.push(ProcessProblem {
                    pid,
                    problem: e.to_problem(),
                });
            }
        };

    // 1. maps of every process.
    let pids = match probe.processes() {
        Ok(l) => l.pids,
        Err(e) => {
            report.problems.push(e.to_problem());
            Vec::new()
        }
    };
    let mut vanished = 0u64;
    // Only the mappings that can be shared memory or huge pages (by ioctl
    // where the kernel has it, else the lines of the text), and the status
    // of each process that maps something reported, in one visit per
    // process, on every CPU (the kernel's work of formatting /proc files
    // is most of the cost).
    let how = probe.maps_read();
    report.maps_read = Some(how);
    let visits = probe.read_each(&pids, 0, |p| {
        let maps = p.maps_candidates(how).map(|maps| {
            maps.into_iter()
                .filter_map(|m| classify(p.pid, &m, &mounts).map(|(k, kind)| (k, kind, m)))
                .collect::<Vec<_>>()
        });
        let status = match &maps {
            Ok(found) if !found.is_empty() => Some(p.status()),
            _ => None,
        };
        (maps, status)
    });
    let mut status = HashMap::new();
    let mut status_problems = Vec::new();
    for (pid, (maps, st)) in visits {
        let maps = match maps {
            Ok(m) => m,
            Err(e) => {
                record(&mut unreadable, &mut vanished, pid, e);
                continue;
            }
        };
        report.processes_scanned += 1;
        match st {
            Some(Ok(s)) => {
                status.insert(pid, s);
            }
            Some(Err(e)) => status_problems.push((pid, e)),
            None => {}
        }
        for (key, kind, m) in maps {
            objs.entry(key)
                .or_insert_with(|| Obj::new(kind, m.pathname.clone()))
                .add_mapping(&key, pid, &m);
        }
    }
    // Problems with status after those with maps, as when they were read
    // in two passes.
    for (pid, e) in status_problems {
        record(&mut unreadable, &mut vanished, pid, e);
    }

    // 2. Files on hugetlbfs and tmpfs mounts (found even when nobody maps them).
    for mnt in host
        .mounts
        .iter()
        .filter(|m| m.is_hugetlbfs() || (m.is_tmpfs() && m.target == "/dev/shm"))
    {
        let files = match probe.mount_files(&mnt.target) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => continue,
            Err(e) => {
                report.problems.push(e.to_problem());
                continue;
            }
        };
        let page = if mnt.is_hugetlbfs() {
            mnt.hugetlbfs_page_size()
                .or(default_huge)
                .map(|p| (p, format!("mount {} (pagesize)", mnt.target)))
        } else if matches!(mnt.option("huge"), None | Some("never")) {
            Some((
                BASE_PAGE,
                format!("mount {} (tmpfs without huge=)", mnt.target),
            ))
        } else {
            None
        };
        for f in files {
            let key = Key::File(f.dev.0, f.dev.1, f.inode);
            let kind = if mnt.is_hugetlbfs() {
                SegmentKind::Hugetlbfs
            } else {
                SegmentKind::Posix
            };
            let o = objs
                .entry(key)
                .or_insert_with(|| Obj::new(kind, Some(f.path.clone())));
            o.size = o.size.max(f.size_bytes);
            o.path = Some(f.path.clone());
            o.page_from_mount = page.clone();
            o.file = Some(f);
        }
    }

    // 3. SysV segments nobody maps (or whose users we cannot see).
    for s in &host.shm {
        objs.entry(Key::Sysv(s.shmid as u64))
            .or_insert_with(|| Obj::new(SegmentKind::Sysv, None));
    }

    // 4. smaps/numa_maps of a sample of each object's processes, read in
    // step 5 as each object needs them (and kept for the next object).
    let shm_by_id: HashMap<u64, &hugeshm_parse::sysvipc_shm::ShmSegment> =
        host.shm.iter().map(|s| (s.shmid as u64, s)).collect();
    let mut samples: HashMap<u32, Sample> = HashMap::new();
    // Whether a process could map a shmem object by PMD (THP for shmem):
    // then one process seeing it all resident does not say how the others
    // map it.
    let shmem_thp = host
        .thp
        .shmem_enabled
        .as_ref()
        .is_some_and(|s| !matches!(s.selected.as_str(), "never" | "deny"));
    // A creator that has exited but is named by SysV.
    let name_of = |pid: u32| -> Option<String> {
        status
            .get(&pid)
            .map(|s| s.name.clone())
            .or_else(|| probe.pid(pid).status().ok().map(|s| s.name))
    };

    // DAX mappings: where their memory is (sysfs), read only when there are any.
    let pmem = if objs.values().any(|o| o.kind == SegmentKind::Dax) {
        probe.pmem()
    } else {
        Default::default()
    };
    let dax_mounts: Vec<&hugeshm_parse::mounts::Mount> = host
        .mounts
        .iter()
        .filter(|m| dax::is_dax_mount(m))
        .collect();

    // 5. Build the segments.
    for (key, o) in objs {
        let sysv = match &key {
            Key::Sysv(id) => shm_by_id.get(id).copied(),
            _ => None,
        };
        // A SysV mapping missing from /proc/sysvipc/shm (removed after the list
        // was read) is kept, with what its mappings tell.
        let mut seg = Segment {
            kind: o.kind,
            id: match &key {
                Key::Sysv(id) => Some(*id),
                Key::File(_, _, ino) => Some(*ino),
                Key::Private(_, _) => None,
            },
            key: sysv.map(|s| format!("0x{:08x}", s.key as u32)),
            // The /SYSVxxxxxxxx name of a SysV mapping says nothing the key does not.
            path: match o.kind {
                SegmentKind::Sysv => None,
                SegmentKind::Memfd => o
                    .path
                    .as_deref()
                    .map(|p| p.trim_start_matches('/').to_string()),
                _ => o.path.clone(),
            },
            size_bytes: sysv.map_or_else(|| o.size_bytes(probe), |s| s.size_bytes),
            page_size_bytes: None,
            page_size_source: String::new(),
            resident_bytes: None,
            thp_bytes: None,
            owner_uid: sysv.map(|s| s.uid).or(o.file.as_ref().map(|f| f.uid)),
            mode: sysv
                .map(|s| s.perms & 0o777)
                .or(o.file.as_ref().map(|f| f.mode & 0o7777)),
            creator_pid: match &key {
                Key::Private(pid, _) => Some(*pid),
                _ => sysv.map(|s| s.cpid),
            },
            creator_name: None,
            attached_pids: o.maps.keys().copied().collect(),
            attached: o
                .maps
                .keys()
                .map(|&pid| {
                    let st = status.get(&pid);
                    AttachedProcess {
                        pid,
                        name: st.map(|s| s.name.clone()),
                        uid: st.and_then(|s| s.uid),
                        vm_pte_bytes: st.and_then(|s| s.vm_pte_bytes),
                        cgroup: None,
                    }
                })
                .collect(),
            nattch: sysv.map(|s| s.nattch),
            nodes: BTreeMap::new(),
            numa_policy: None,
            findings: Vec::new(),
            dax: None,
        };
        seg.creator_name = seg.creator_pid.and_then(name_of);
        if seg.owner_uid.is_none() {
            seg.owner_uid = seg.attached.first().and_then(|a| a.uid);
        }

        // Page size, resident, THP, nodes from up to SAMPLE_PROCESSES of its
        // processes, the creator first; the rest are not read once one has
        // seen the whole object resident (a process's smaps and numa_maps
        // walk its page tables: 70 ms and 45 ms for 4 GiB on 4 KiB pages).
        let mut best_resident: Option<u64> = None;
        let mut best_nodes: (u64, BTreeMap<u32, u64>, Option<String>) = (0, BTreeMap::new(), None);
        let mut cands: Vec<u32> = o.maps.keys().copied().collect();
        if let Some(i) = seg
            .creator_pid
            .and_then(|c| cands.iter().position(|p| *p == c))
        {
            let c = cands.remove(i);
            cands.insert(0, c);
        }
        let mut read_here = 0;
        for pid in cands {
            if let std::collections::hash_map::Entry::Vacant(slot) = samples.entry(pid) {
                if read_here == SAMPLE_PROCESSES {
                    continue;
                }
                read_here += 1;
                slot.insert(Sample::read(probe, pid, &mut |pid, e| {
                    record(&mut unreadable, &mut vanished, pid, e)
                }));
            }
            let Some(starts) = o.maps.get(&pid) else {
                continue;
            };
            let Some(sample) = samples.get(&pid) else {
                continue;
            };
            let Some(sm) = &sample.smaps else { continue };
            let mut res = 0u64;
            let mut thp = 0u64;
            let mut matched = false;
            let mut hugetlb = false;
            for e in sm.iter().filter(|e| starts.contains(&e.map.start)) {
                matched = true;
                hugetlb |= e.is_hugetlb();
                if seg.page_size_bytes.is_none() {
                    seg.page_size_bytes = e.kernel_page_size_bytes.or(Some(BASE_PAGE));
                    seg.page_size_source = format!("smaps of pid {pid}");
                }
                res = res
                    .saturating_add(e.rss_bytes)
                    .saturating_add(e.hugetlb_bytes());
                thp = thp
                    .saturating_add(e.shmem_pmd_mapped_bytes.unwrap_or(0))
                    .saturating_add(e.anon_huge_pages_bytes.unwrap_or(0));
            }
            if matched {
                best_resident = Some(best_resident.unwrap_or(0).max(res));
                seg.thp_bytes = Some(seg.thp_bytes.unwrap_or(0).max(thp));
            }
            let seen_all = matched
                && seg.size_bytes > 0
                && res >= seg.size_bytes
                && (hugetlb || !shmem_thp || thp >= seg.size_bytes);
            if let Some(nm) = &sample.numa {
                let mut nodes: BTreeMap<u32, u64> = BTreeMap::new();
                let mut policy = None;
                for e in nm.iter().filter(|e| starts.contains(&e.start)) {
                    for (n, b) in e.node_bytes() {
                        *nodes.entry(n).or_default() += b;
                    }
                    policy.get_or_insert_with(|| e.policy.clone());
                }
                let sum: u64 = nodes.values().sum();
                if policy.is_some() && (best_nodes.2.is_none() || sum > best_nodes.0) {
                    best_nodes = (sum, nodes, policy);
                }
            }
            if seen_all {
                break;
            }
        }
        if seg.page_size_bytes.is_none() {
            if let Some((p, src)) = &o.page_from_mount {
                seg.page_size_bytes = Some(*p);
                seg.page_size_source = src.clone();
            } else if !o.maps.is_empty() {
                seg.page_size_source = "unknown: attached processes could not be read".to_string();
            } else if sysv.is_some_and(|s| s.nattch > 0) {
                seg.page_size_source =
                    "unknown: attached processes not visible (other pid namespace?)".to_string();
            } else {
                seg.page_size_source = "unknown: no process attached".to_string();
            }
        }
        // Object-wide residency where the kernel keeps it. /proc/sysvipc/shm's
        // rss of a hugetlb segment is inflated by the huge page's base-page
        // count on folio-based kernels (6.x: 8 MiB shows as 4 GiB), so it is
        // used only when it cannot exceed the segment.
        let sysv_rss = sysv.and_then(|s| s.rss_bytes).filter(|&rss| {
            let rounded = seg.size_bytes.div_ceil(BASE_PAGE) * BASE_PAGE;
            seg.page_size_bytes.is_none_or(|p| p <= BASE_PAGE) && rss <= rounded
        });
        if seg.page_size_bytes.is_none()
            && sysv
                .and_then(|s| s.rss_bytes)
                .is_some_and(|r| r > seg.size_bytes.div_ceil(BASE_PAGE) * BASE_PAGE)
        {
            seg.page_size_source.push_str(
                " (its kernel rss exceeds its size, which only happens for hugetlb segments)",
            );
        }
        let object_resident = sysv_rss.or(o.file.as_ref().map(|f| f.allocated_bytes));
        seg.resident_bytes = match (best_resident, object_resident) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        seg.nodes = best_nodes
            .1
            .into_iter()
            .map(|(n, b)| (n.to_string(), b))
            .collect();
        seg.numa_policy = best_nodes.2;
        if o.kind == SegmentKind::Dax {
            dax_pass(probe, &o, &mut seg, &dax_mounts, &pmem);
        }
        seg.findings = segment_findings(&seg, host, default_huge, report.numa_nodes);
        report.segments.push(seg);
    }

    report.limited_cgroups = cgroups::pass(probe, &mut report.segments, default_huge);
    report.processes_vanished = vanished;
    report.unreadable = unreadable;
    let matters = unreadable_that_matter(&report.unreadable, host);
    if !matters.is_empty() {
        report
            .findings
            .push(unreadable_finding(&matters, host.self_uid));
    }
    report.segments.sort_by_key(|s| {
        (
            s.kind != SegmentKind::Sysv,
            std::cmp::Reverse(s.size_bytes),
            s.id,
        )
    });
    report.scan_seconds = t0.elapsed().as_secs_f64();
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_names() {
        let names: Vec<&str> = SegmentKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "sysv",
                "memfd",
                "hugetlbfs",
                "anon",
                "posix",
                "private-hugetlb",
                "dax"
            ]
        );
        for k in SegmentKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{k}\""));
            assert_eq!(serde_json::from_str::<SegmentKind>(&json).unwrap(), k);
        }
        assert!(serde_json::from_str::<SegmentKind>("\"devdax\"").is_err());
    }
}
