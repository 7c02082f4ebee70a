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

use crate::dax::{self, DaxInfo};
use crate::finding::{plural, pool_fix, Finding, Severity};
use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::size::{format_bytes, BASE_PAGE, MIB};
use hugeshm_probe::{HostSnapshot, MapsRead, MountFile, Probe, Problem, ProblemKind, ReadError};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

pub mod run_record;

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
    /// Placed by `hugeshm run`: its record, checked against the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<run_record::RunPlacement>,
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
    /// `hugeshm run` records not shown, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_records_ignored: Vec<run_record::IgnoredRunRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Sysv(u64),
    File(u32, u32, u64),
    Private(u32, u64),
}

struct Obj {
    kind: SegmentKind,
    path: Option<String>,
    size: u64,
    /// pid → start addresses of its mappings of the object.
    maps: BTreeMap<u32, Vec<u64>>,
    file: Option<MountFile>,
    page_from_mount: Option<(u64, String)>,
    /// pid → (start, end, file offset) of its mappings (`dax` only).
    ranges: BTreeMap<u32, Vec<(u64, u64, u64)>>,
}

struct Mounts {
    hugetlbfs: Vec<(String, u64)>,
    tmpfs: Vec<(String, bool)>,
    /// Mount points with `dax` (not `dax=never`).
    dax: Vec<String>,
}

fn under(path: &str, target: &str) -> bool {
    target == "/"
        || path
            .strip_prefix(target)
            .is_some_and(|r| r.starts_with('/'))
}

impl Mounts {
    fn hugetlbfs_of(&self, path: &str) -> Option<u64> {
        self.hugetlbfs
            .iter()
            .filter(|(t, _)| under(path, t))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, s)| *s)
    }
    fn on_dax(&self, path: &str) -> bool {
        self.dax.iter().any(|t| under(path, t))
    }
    fn tmpfs_of(&self, path: &str) -> Option<bool> {
        self.tmpfs
            .iter()
            .filter(|(t, _)| under(path, t))
            .max_by_key(|(t, _)| t.len())
            .map(|(_, h)| *h)
    }
}

/// Which object a mapping belongs to, if it is one hugeshm reports.
fn classify(pid: u32, m: &MapsEntry, mounts: &Mounts) -> Option<(Key, SegmentKind)> {
    let path = m.pathname.as_deref()?;
    let file_key = Key::File(m.dev_major, m.dev_minor, m.inode);
    if let Some(hex) = path.strip_prefix("/SYSV") {
        if hex.len() == 8 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some((Key::Sysv(m.inode), SegmentKind::Sysv));
        }
    }
    if path == "/anon_hugepage" {
        return Some(if m.perms.shared {
            (file_key, SegmentKind::Anon)
        } else {
            (Key::Private(pid, m.start), SegmentKind::PrivateHugetlb)
        });
    }
    if !m.perms.shared {
        if mounts.hugetlbfs_of(path).is_some() {
            return Some((Key::Private(pid, m.start), SegmentKind::PrivateHugetlb));
        }
        return None;
    }
    if path.starts_with("/memfd:") {
        return Some((file_key, SegmentKind::Memfd));
    }
    if path == "/dev/zero" && m.deleted {
        return Some((file_key, SegmentKind::Anon));
    }
    if mounts.hugetlbfs_of(path).is_some() {
        return Some((file_key, SegmentKind::Hugetlbfs));
    }
    if dax::device_dax_name(path).is_some() || mounts.on_dax(path) {
        return Some((file_key, SegmentKind::Dax));
    }
    if mounts.tmpfs_of(path).is_some() {
        return Some((file_key, SegmentKind::Posix));
    }
    None
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
            let o = objs.entry(key).or_insert_with(|| Obj {
                kind,
                path: m.pathname.clone(),
                size: 0,
                maps: BTreeMap::new(),
                file: None,
                page_from_mount: None,
                ranges: BTreeMap::new(),
            });
            o.size = o.size.max(m.size_bytes());
            o.maps.entry(pid).or_default().push(m.start);
            if kind == SegmentKind::Dax {
                o.ranges
                    .entry(pid)
                    .or_default()
                    .push((m.start, m.end, m.offset));
            }
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
            let o = objs.entry(key).or_insert_with(|| Obj {
                kind: if mnt.is_hugetlbfs() {
                    SegmentKind::Hugetlbfs
                } else {
                    SegmentKind::Posix
                },
                path: Some(f.path.clone()),
                size: 0,
                maps: BTreeMap::new(),
                file: None,
                page_from_mount: None,
                ranges: BTreeMap::new(),
            });
            o.size = o.size.max(f.size_bytes);
            o.path = Some(f.path.clone());
            o.page_from_mount = page.clone();
            o.file = Some(f);
        }
    }

    // 3. SysV segments nobody maps (or whose users we cannot see).
    for s in &host.shm {
        objs.entry(Key::Sysv(s.shmid as u64))
            .or_insert_with(|| Obj {
                kind: SegmentKind::Sysv,
                path: None,
                size: 0,
                maps: BTreeMap::new(),
                file: None,
                page_from_mount: None,
                ranges: BTreeMap::new(),
            });
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
            size_bytes: sysv.map(|s| s.size_bytes).unwrap_or(o.size),
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
            run: None,
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

    cgroup_pass(probe, &mut report.segments);
    run_record::attach(probe, host, &mut report);
    report.processes_vanished = vanished;
    report.unreadable = unreadable;
    if !report.unreadable.is_empty() {
        report
            .findings
            .push(unreadable_finding(&report.unreadable, host.self_uid));
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

/// One sampled process's `smaps` and `numa_maps` (`None` where unreadable).
struct Sample {
    smaps: Option<Vec<hugeshm_parse::smaps::SmapsEntry>>,
    numa: Option<Vec<hugeshm_parse::numa_maps::NumaMapsEntry>>,
}

impl Sample {
    /// Reads both; a failure goes to `problem` (numa_maps missing on a
    /// kernel without NUMA is not one).
    fn read(probe: &Probe, pid: u32, problem: &mut dyn FnMut(u32, ReadError)) -> Sample {
        let files = probe.pid(pid);
        let smaps = match files.smaps() {
            Ok(s) => s,
            Err(e) => {
                problem(pid, e);
                return Sample {
                    smaps: None,
                    numa: None,
                };
            }
        };
        let numa = match files.numa_maps() {
            Ok(n) => Some(n),
            Err(e) if e.is_not_found() => None,
            Err(e) => {
                problem(pid, e);
                None
            }
        };
        Sample {
            smaps: Some(smaps),
            numa,
        }
    }
}

/// A `dax` segment: where its memory is, and the fault size of the
/// mappings of a few of its processes from their pagemap (smaps counts no
/// DAX page: its page size, residency and nodes come from here).
fn dax_pass(
    probe: &Probe,
    o: &Obj,
    seg: &mut Segment,
    mounts: &[&hugeshm_parse::mounts::Mount],
    pmem: &hugeshm_probe::PmemSnapshot,
) {
    let path = o.path.as_deref().unwrap_or("");
    let mut info = dax::info_for(path, mounts, pmem);
    for (pid, ranges) in o.ranges.iter().take(SAMPLE_PROCESSES) {
        let files = probe.pid(*pid);
        for &(start, end, offset) in ranges {
            info.mappings
                .push(dax::judge(&files, start, end, offset, info.align_bytes));
        }
    }
    // dax=inode: the file's own state, through the first mapping.
    if info.file.is_some() {
        let first = o
            .ranges
            .iter()
            .find_map(|(pid, r)| r.first().map(|&(s, e, _)| (*pid, s, e)));
        if let Some((pid, start, end)) = first {
            info.file = Some(dax::file_dax(probe, pid, start, end, path));
        }
        dax::mark_page_cache(&mut info);
        if info.file.and_then(|f| f.dax) == Some(false) {
            // Page cache: smaps counts its pages, as for any file.
            seg.dax = Some(info);
            return;
        }
    }
    let (page, source) = dax::page_size(&info);
    seg.page_size_bytes = page;
    seg.page_size_source = source;
    seg.resident_bytes = info.mappings.iter().filter_map(|m| m.resident_bytes).max();
    seg.thp_bytes = None;
    seg.nodes = match (info.numa_node, seg.resident_bytes) {
        (Some(n), Some(r)) if r > 0 => [(n.to_string(), r)].into_iter().collect(),
        _ => BTreeMap::new(),
    };
    seg.numa_policy = None;
    seg.dax = Some(info);
}

/// For the processes that map hugetlb memory: their hugetlb cgroup, and a
/// `segment-cgroup-short` finding on a segment larger than what the cgroup
/// of a process mapping it allows (its faults past the limit are refused).
/// One cgroup read per distinct cgroup.
fn cgroup_pass(probe: &Probe, segments: &mut [Segment]) {
    let mut by_path: BTreeMap<String, Option<hugeshm_probe::HugetlbCgroup>> = BTreeMap::new();
    for seg in segments.iter_mut() {
        let Some(page) = seg.page_size_bytes.filter(|p| *p > BASE_PAGE) else {
            continue;
        };
        if matches!(seg.kind, SegmentKind::Posix | SegmentKind::Dax) {
            continue; // tmpfs THP, DAX: not charged to the hugetlb controller
        }
        let mut short: Option<(u32, String, u64, String)> = None;
        for a in seg.attached.iter_mut() {
            let Ok(entries) = probe.cgroups(Some(a.pid)) else {
                continue;
            };
            let Some(path) = hugeshm_parse::cgroup::find(&entries, "hugetlb", false)
                .or_else(|| hugeshm_parse::cgroup::find(&entries, "hugetlb", true))
                .map(|e| e.path.clone())
            else {
                continue;
            };
            a.cgroup = Some(path.clone());
            let cg = by_path
                .entry(path.clone())
                .or_insert_with(|| probe.hugetlb_cgroup(Some(a.pid)).ok().flatten());
            let Some(size) = cg.as_ref().and_then(|c| c.size(page)) else {
                continue;
            };
            if let (Some(limit), None) = (size.effective_limit_bytes, &short) {
                if limit < seg.size_bytes {
                    let file = size
                        .binding_file
                        .clone()
                        .unwrap_or_else(|| format!("hugetlb limit of {path}"));
                    short = Some((a.pid, path.clone(), limit, file));
                }
            }
        }
        if let Some((pid, path, limit, file)) = short {
            seg.findings.push(Finding::new(
                Severity::Warning,
                "segment-cgroup-short",
                format!(
                    "{} ({} on {} pages) is mapped by pid {pid} in cgroup {path}, whose hugetlb \
                     limit allows {} ({file}): its faults past the limit are refused (SIGBUS, or \
                     an error where they are pre-faulted)",
                    seg.label(),
                    format_bytes(seg.size_bytes),
                    format_bytes(page),
                    format_bytes(limit)
                ),
                Some(
                    hugeshm_fix::Fix::RaiseCgroupLimit {
                        page_size_bytes: page,
                        file: Some(file),
                        bytes: seg.size_bytes,
                    }
                    .to_string(),
                ),
            ));
        }
    }
}

/// One finding for the processes the scan could not read, with a fix per cause.
fn unreadable_finding(unreadable: &[ProcessProblem], self_uid: Option<u32>) -> Finding {
    let pids: Vec<String> = unreadable
        .iter()
        .take(10)
        .map(|p| p.pid.to_string())
        .collect();
    let mut fixes: Vec<String> = Vec::new();
    let mut sev = Severity::Info;
    for p in unreadable {
        // Permission denied as root: nothing the admin can change here (another
        // namespace, an LSM), so it is worth knowing, not a warning.
        let this = match p.problem.kind {
            ProblemKind::Permission if self_uid == Some(0) => Severity::Info,
            _ => Severity::Warning,
        };
        sev = sev.max(this);
        let fix = match p.problem.kind {
            ProblemKind::Malformed => p
                .problem
                .fix(self_uid)
                .replace(&p.problem.path, "/proc/PID files"),
            _ => p.problem.fix(self_uid),
        };
        if !fixes.contains(&fix) {
            fixes.push(fix);
        }
    }
    Finding::new(
        sev,
        "processes-unreadable",
        format!(
            "{} could not be read (pids {}{}): the shared memory they map is not counted; first: {}",
            plural(unreadable.len(), "process", "processes"),
            pids.join(", "),
            if unreadable.len() > 10 { ", ..." } else { "" },
            unreadable[0].problem.reason
        ),
        Some(fixes.join("; ")),
    )
}

fn segment_findings(
    seg: &Segment,
    host: &HostSnapshot,
    default_huge: Option<u64>,
    numa_nodes: u32,
) -> Vec<Finding> {
    let label = seg.label();
    if let Some(info) = &seg.dax {
        // Persistent memory: no pool, no fallback, placed by its device.
        return dax::findings(&label, seg.path.as_deref(), info);
    }
    let mut out = Vec::new();
    let huge = default_huge.unwrap_or(2 * MIB);
    let size = format_bytes(seg.size_bytes);

    // Silent fallback.
    if seg.page_size_bytes == Some(BASE_PAGE) && seg.size_bytes >= huge {
        let pages = seg.size_bytes.div_ceil(huge);
        let avail = host.pool(huge).map(|p| p.available()).unwrap_or(0);
        if !host.hugetlb_supported() {
            // Nothing to fall back from: the kernel finding (no-hugetlb) says what to do.
        } else if seg.kind.huge_on_request() {
            let total = host.pool(huge).map(|p| p.total()).unwrap_or(0);
            let (short, fix) = if avail < pages {
                (
                    format!("; the {} pool has {avail} available", format_bytes(huge)),
                    format!(
                        "{}, then ",
                        pool_fix(huge, default_huge, total + (pages - avail) + 2)
                    ),
                )
            } else {
                (
                    format!("; the pool has room now ({avail} available)"),
                    String::new(),
                )
            };
            out.push(Finding::new(
                Severity::Warning,
                "silent-fallback",
                format!(
                    "{label} ({size}) sits on 4 KiB pages: on {} pages it would take {pages} pages{short}",
                    format_bytes(huge)
                ),
                Some(format!(
                    "{fix}restart its owner with huge pages required (PostgreSQL huge_pages=on, Oracle use_large_pages=ONLY)"
                )),
            ));
        } else if seg.kind == SegmentKind::Posix && seg.thp_bytes.unwrap_or(0) == 0 {
            out.push(Finding::new(
                Severity::Info,
                "shm-file-4k",
                format!("{label} ({size}) is a tmpfs file on 4 KiB pages"),
                Some("put it on hugetlbfs (mount -t hugetlbfs) or use memfd_create(MFD_HUGETLB) to get huge pages".to_string()),
            ));
        }
    }

    // Page tables of processes mapping a big 4 KiB segment.
    if seg.page_size_bytes == Some(BASE_PAGE) && seg.size_bytes >= huge && !seg.attached.is_empty()
    {
        let pte: u64 = seg.attached.iter().filter_map(|a| a.vm_pte_bytes).sum();
        let per_proc = seg.resident_bytes.unwrap_or(seg.size_bytes) / 512;
        let save = seg
            .attached
            .iter()
            .map(|a| a.vm_pte_bytes.unwrap_or(0).min(per_proc))
            .sum::<u64>();
        out.push(Finding::new(
            Severity::Info,
            "page-tables",
            format!(
                "{} mapping {label} hold {} of page tables (VmPTE, all their mappings); on {} pages this segment would save up to {}",
                plural(seg.attached.len(), "process", "processes"),
                format_bytes(pte),
                format_bytes(huge),
                format_bytes(save)
            ),
            None,
        ));
    }

    // Reserved but not yet touched.
    if let (Some(ps), Some(res)) = (seg.page_size_bytes, seg.resident_bytes) {
        if ps > BASE_PAGE {
            let pages = seg.size_bytes.div_ceil(ps);
            let touched = res / ps;
            if touched < pages {
                out.push(Finding::new(
                    Severity::Info,
                    "reserved-untouched",
                    format!(
                        "{} of {pages} {} pages of {label} are reserved but not touched yet: the first touch will pay for zeroing them",
                        pages - touched,
                        format_bytes(ps)
                    ),
                    Some("pre-fault at start-up (e.g. hugeshm create --prefault-threads, Oracle pre_page_sga, MADV_POPULATE_WRITE)".to_string()),
                ));
            }
        }
    }

    // Orphans.
    if seg.kind == SegmentKind::Sysv && seg.nattch == Some(0) {
        let id = seg.id.unwrap_or(0);
        out.push(Finding::new(
            Severity::Warning,
            "orphan",
            format!(
                "{label} ({size}, key {}, created by pid {}) has no process attached: its memory stays allocated until it is removed",
                seg.key.as_deref().unwrap_or("?"),
                seg.creator_pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
            ),
            Some(format!("ipcrm -m {id}   # only if no server will attach it again")),
        ));
    }
    if seg.kind == SegmentKind::Hugetlbfs
        && seg.attached.is_empty()
        && seg.resident_bytes.unwrap_or(0) > 0
    {
        out.push(Finding::new(
            Severity::Warning,
            "orphan-file",
            format!(
                "{label} holds {} of huge pages and no process maps it (left behind by a crash?)",
                format_bytes(seg.resident_bytes.unwrap_or(0))
            ),
            Some(format!(
                "rm '{}'   # only if no server will map it again",
                seg.path.as_deref().unwrap_or("")
            )),
        ));
    }

    // Bound to some nodes, with pages on others.
    let bound = bind_nodes(seg.numa_policy.as_deref());
    if let Some(bound) = &bound {
        let elsewhere: Vec<(&String, u64)> = seg
            .nodes
            .iter()
            .filter(|(n, b)| **b > 0 && n.parse().is_ok_and(|n: u32| !bound.contains(&n)))
            .map(|(n, b)| (n, *b))
            .collect();
        if !elsewhere.is_empty() {
            let bytes: u64 = elsewhere.iter().map(|(_, b)| b).sum();
            let list =
                |nodes: &mut dyn Iterator<Item = String>| nodes.collect::<Vec<_>>().join(",");
            let bound_list = list(&mut bound.iter().map(u32::to_string));
            out.push(Finding::new(
                Severity::Warning,
                "misplaced",
                format!(
                    "{label} is bound to node {bound_list} (numa_maps: {}), but {} of it sit{} on node {} (faulted before the policy was set, or migrated): processes there pay remote latency and the bound node's pool is not what holds it",
                    seg.numa_policy.as_deref().unwrap_or(""),
                    format_bytes(bytes),
                    if elsewhere.len() == 1 { "s" } else { "" },
                    list(&mut elsewhere.iter().map(|(n, _)| n.to_string())),
                ),
                Some(format!(
                    "recreate it with the policy in force before the first touch (hugeshm create --numa bind={bound_list} binds before the pre-fault and fails on a misplaced page), or move the pages of each process: migratepages PID {} {bound_list}",
                    list(&mut elsewhere.iter().map(|(n, _)| n.to_string())),
                )),
            ));
        }
    }

    // All on one node of several (not where a bind policy put it there).
    if numa_nodes > 1 {
        let total: u64 = seg.nodes.values().sum();
        let nonzero: Vec<&String> = seg
            .nodes
            .iter()
            .filter(|(_, b)| **b > 0)
            .map(|(n, _)| n)
            .collect();
        // A tmpfs file's numa_maps policy is the mapping process's own
        // (numactl --membind): the file still sits on one node for every
        // other process (the Cyclops case), so it is judged all the same.
        let intended = seg.kind != SegmentKind::Posix
            && bound.as_ref().is_some_and(|b| {
                nonzero.len() == 1 && nonzero[0].parse().is_ok_and(|n: u32| b.contains(&n))
            });
        if total >= crate::numa::PLACEMENT_MIN_BYTES && nonzero.len() == 1 && !intended {
            let mount = match seg.kind {
                SegmentKind::Posix => seg
                    .path
                    .as_deref()
                    .and_then(|p| crate::numa::tmpfs_mount_of(host, p)),
                _ => None,
            };
            let (why, fix) = match mount {
                // A tmpfs file: the mount's policy decides where its pages go.
                Some(m) => match m.option("mpol") {
                    None => (
                        format!(
                            " (a \"Cyclops\" file: {} has no mpol=, so each page went to the node of the process that first touched it)",
                            m.target
                        ),
                        format!(
                            "{}, then have its owner recreate it (restart it): pages already allocated keep their node",
                            crate::numa::mpol_remount(&m.target)
                        ),
                    ),
                    Some(pol) => (
                        format!(
                            " (a \"Cyclops\" file: written before {} got mpol={pol}, or placed by its owner's own policy)",
                            m.target
                        ),
                        "have its owner recreate it (restart it) so that its pages follow the mount's policy; pages already allocated keep their node".to_string(),
                    ),
                },
                None => (
                    String::new(),
                    "interleave it (numactl --interleave=all, tmpfs mpol=interleave) or split it per node".to_string(),
                ),
            };
            out.push(Finding::new(
                Severity::Warning,
                "single-node",
                format!(
                    "all {} resident of {label} sit on node {} of {numa_nodes}{why}: processes on the other nodes work on remote memory",
                    format_bytes(total),
                    nonzero[0]
                ),
                Some(fix),
            ));
        }
    }
    out
}

/// The nodes of a `bind` policy as `numa_maps` prints it (`bind:1`,
/// `bind=static:0-1`); `None` for other policies.
fn bind_nodes(policy: Option<&str>) -> Option<Vec<u32>> {
    let (mode, nodes) = policy?.split_once(':')?;
    if mode.split('=').next() != Some("bind") {
        return None;
    }
    hugeshm_parse::node::parse_list("numa_maps", nodes)
        .ok()
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-node host with /dev/shm mounted with `shm_options`.
    fn host(shm_options: &str) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        h.mounts =
            hugeshm_parse::mounts::parse(&format!("tmpfs /dev/shm tmpfs {shm_options} 0 0\n"))
                .unwrap();
        h
    }

    fn file(path: &str, kind: SegmentKind, nodes: &[(&str, u64)]) -> Segment {
        Segment {
            kind,
            id: Some(12),
            key: None,
            path: Some(path.into()),
            size_bytes: 64 * MIB,
            page_size_bytes: Some(BASE_PAGE),
            page_size_source: "smaps of pid 9".into(),
            resident_bytes: Some(64 * MIB),
            thp_bytes: Some(0),
            owner_uid: Some(0),
            mode: Some(0o600),
            creator_pid: None,
            creator_name: None,
            attached_pids: vec![9],
            attached: vec![],
            nattch: None,
            nodes: nodes.iter().map(|(n, b)| (n.to_string(), *b)).collect(),
            numa_policy: Some("default".into()),
            findings: vec![],
            dax: None,
            run: None,
        }
    }

    fn single_node(seg: &Segment, h: &HostSnapshot) -> Option<Finding> {
        segment_findings(seg, h, Some(2 * MIB), 2)
            .into_iter()
            .find(|f| f.code == "single-node")
    }

    #[test]
    fn a_dev_shm_file_on_one_node_is_a_cyclops() {
        let h = host("rw,nosuid,nodev");
        let seg = file("/dev/shm/cyclops", SegmentKind::Posix, &[("1", 64 * MIB)]);
        let f = single_node(&seg, &h).expect("single-node");
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.message,
            "all 64 MiB resident of /dev/shm/cyclops sit on node 1 of 2 (a \"Cyclops\" file: \
             /dev/shm has no mpol=, so each page went to the node of the process that first \
             touched it): processes on the other nodes work on remote memory"
        );
        assert_eq!(
            f.fix.as_deref(),
            Some(
                "mount -o remount,mpol=interleave /dev/shm, then have its owner recreate it \
                 (restart it): pages already allocated keep their node"
            )
        );
        // Written before the remount: the mount has its policy now.
        let h2 = host("rw,nosuid,nodev,mpol=interleave:0-1");
        let f = single_node(&seg, &h2).expect("single-node");
        assert!(
            f.message
                .contains("written before /dev/shm got mpol=interleave:0-1"),
            "{}",
            f.message
        );
        // Spread over both nodes, or too small: nothing.
        let spread = file(
            "/dev/shm/x",
            SegmentKind::Posix,
            &[("0", 32 * MIB), ("1", 32 * MIB)],
        );
        assert!(single_node(&spread, &h).is_none());
        let small = file("/dev/shm/x", SegmentKind::Posix, &[("1", 63 * MIB)]);
        assert!(single_node(&small, &h).is_none());
        // Not a tmpfs file: the general fix.
        let memfd = file("memfd:x", SegmentKind::Memfd, &[("0", 64 * MIB)]);
        let f = single_node(&memfd, &h).expect("single-node");
        assert!(!f.message.contains("Cyclops"), "{}", f.message);
        assert!(f.fix.unwrap().starts_with("interleave it (numactl"));
    }

    #[test]
    fn bound_segment_with_pages_elsewhere_is_misplaced() {
        let h = host("rw");
        let find = |seg: &Segment, code: &str| {
            segment_findings(seg, &h, Some(2 * MIB), 2)
                .into_iter()
                .find(|f| f.code == code)
        };
        let mut seg = file(
            "/dev/shm/db",
            SegmentKind::Posix,
            &[("0", 16 * MIB), ("1", 48 * MIB)],
        );
        seg.numa_policy = Some("bind:1".into());
        let f = find(&seg, "misplaced").expect("misplaced");
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.message.starts_with(
                "/dev/shm/db is bound to node 1 (numa_maps: bind:1), but 16 MiB of it sits on node 0"
            ),
            "{}",
            f.message
        );
        assert!(f.fix.unwrap().ends_with("migratepages PID 0 1"));
        // All on the bound node: placed on purpose, neither misplaced nor
        // a single-node warning; but a tmpfs file bound only through its
        // writer's policy is still a Cyclops for everyone else.
        seg.nodes = [("1".to_string(), 64 * MIB)].into_iter().collect();
        assert!(find(&seg, "misplaced").is_none());
        assert!(find(&seg, "single-node").is_some());
        seg.kind = SegmentKind::Sysv;
        assert!(find(&seg, "single-node").is_none());
        // The same without the policy is the single-node warning.
        seg.numa_policy = Some("default".into());
        assert!(find(&seg, "single-node").is_some());
        assert_eq!(bind_nodes(Some("bind=static:0-1")), Some(vec![0, 1]));
        assert_eq!(bind_nodes(Some("interleave:0-1")), None);
        assert_eq!(bind_nodes(Some("bind:")), None);
        assert_eq!(bind_nodes(None), None);
    }

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
