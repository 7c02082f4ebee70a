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
//!
//! The phases, in the order `build_with` (under [`build`]) runs them:
//!
//! 1. the maps of every process, and the status of those that map an
//!    object, one visit per process (`scan.rs`: `read_processes`,
//!    `classify`);
//! 2. the files on hugetlbfs mounts and `/dev/shm` (`Scan::add_mount_files`);
//! 3. the SysV segments nobody maps (`Scan::add_unmapped_sysv`);
//! 4. each object as a [`Segment`] (`sample.rs`): what the object and SysV
//!    say, a sample of its processes' `smaps`/`numa_maps`, the DAX pass,
//!    then its findings (`findings.rs`: `segment_findings`; a SysV segment
//!    nobody attaches that holds a region made to be kept, as the caller
//!    found them, `kept.rs`, is no orphan);
//! 5. the hugetlb cgroups of the processes mapping them (`cgroups.rs`),
//!    and the `hugeshm run` records of their mappings (`run_record.rs`);
//! 6. the scan-wide findings (`findings::scan_findings`);
//! 7. the order: SysV first, then by size (`sort`).

mod cgroups;
mod findings;
mod in_place;
mod jvm;
mod kept;
mod mariadb;
pub(crate) mod oracle;
pub mod run_record;
mod sample;
mod scan;
pub(crate) mod servers;

pub use cgroups::LimitedCgroup;
pub use kept::KeptRegions;

use crate::dax::DaxInfo;
use crate::finding::Finding;
use hugeshm_probe::{HostSnapshot, MapsRead, Probe, Problem};
use sample::{DaxHost, Sample, Sampler};
use scan::{Judge, Key};
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

    /// Whether an object of this kind on base pages is kept in shmem, where
    /// `MADV_COLLAPSE` can move it onto 2 MiB pages in place: `sysv`,
    /// `anon`, `memfd` and `posix` (a tmpfs file).
    pub fn in_shmem(self) -> bool {
        self.huge_on_request() || self == SegmentKind::Posix
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
    /// For shmem (SysV, shared anonymous, memfd, tmpfs files): whether the
    /// sampled process maps it at an address 2 MiB-aligned to its offset
    /// in the object. Only such a mapping can be moved onto 2 MiB pages in
    /// place (`hugeshm collapse`); an unaligned one needs its owner's
    /// restart (with `shmem_enabled = advise` the kernel aligns it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapse_aligned: Option<bool>,
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
    /// Its creator's pid as findings print it, `?` where unknown.
    pub(crate) fn creator_text(&self) -> String {
        self.creator_pid
            .map_or_else(|| "?".to_owned(), |p| p.to_string())
    }

    /// Whether it sits on 2 MiB transparent huge pages: shmem on base
    /// pages that the process sampled maps by PMD over every whole 2 MiB
    /// block (collapsed in place, or THP shmem).
    pub fn on_thp(&self) -> bool {
        in_place::on_thp(self)
    }

    /// A short human label: `sysv 32769`, `memfd:pool`, `/dev/shm/x`.
    pub fn label(&self) -> String {
        match (self.kind, &self.id, &self.path) {
            (SegmentKind::Sysv, Some(id), Some(ns)) if ns.starts_with("ipc:[") => {
                format!("sysv {id} of {ns}")
            }
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
    /// The hugetlb cgroups with a limit that hold processes mapping the
    /// segments that need huge pages (or fell back from them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limited_cgroups: Vec<LimitedCgroup>,
}

/// Scans the host (reads the host files it needs first); `kept`: the
/// regions made to be kept that the caller found (see [`KeptRegions`]).
pub fn build(probe: &Probe, kept: &KeptRegions) -> SegmentsReport {
    let host = probe.host_without_free_lists();
    build_with(probe, &host, kept)
}

/// Scans the processes, given a host snapshot already read; `kept` as in
/// [`build`].
pub(crate) fn build_with(probe: &Probe, host: &HostSnapshot, kept: &KeptRegions) -> SegmentsReport {
    let t0 = Instant::now();
    let mut report = SegmentsReport {
        problems: host.problems.clone(),
        numa_nodes: host.nodes.len() as u32,
        ..Default::default()
    };
    let default_huge = host.default_page_size();
    let how = probe.maps_read();
    report.maps_read = Some(how);

    // 1-3. The objects: mapped, on a mount, or SysV.
    let mut scan = scan::read_processes(&Judge::of(probe, host), how, &mut report.problems);
    report.processes_scanned = scan.processes_scanned;
    scan.add_mount_files(probe, host, &mut report.problems, &mut report.findings);
    scan.add_unmapped_sysv(host);

    // 4. Each object as a segment, its processes sampled, with its findings.
    let shm_by_id: HashMap<u64, _> = host.shm.iter().map(|s| (s.shmid as u64, s)).collect();
    let mut sampler = Sampler::new(host);
    let dax_host = DaxHost::read(probe, host, scan.objs.values());
    let mut run_candidates = Vec::new();
    for (key, o) in &scan.objs {
        if run_record::may_have_record(o.kind) {
            for (&pid, starts) in &o.maps {
                run_candidates.extend(starts.iter().map(|&start| run_record::Candidate {
                    segment: report.segments.len(),
                    pid,
                    start,
                }));
            }
        }
        let sysv = match key {
            Key::Sysv(id) => shm_by_id.get(id).copied(),
            _ => None,
        };
        let mut seg = sample::segment_of(probe, key, o, sysv, &scan.status);
        let seen = sampler.sample(o, seg.creator_pid, seg.size_bytes, &mut |pid| {
            Sample::read(probe, pid, &mut |pid, e| scan.unread.record(pid, e))
        });
        sample::fill(&mut seg, o, sysv, seen);
        if seg.page_size_bytes.is_none() {
            if let Some(page) = kept.page_size_of(&seg) {
                seg.page_size_bytes = Some(page);
                seg.page_size_source = "the hugeshm region's header (verified when it was made; \
                                        no process attached now)"
                    .to_string();
            }
        }
        if o.kind == SegmentKind::Dax {
            dax_host.pass(probe, o, &mut seg);
        }
        seg.findings =
            findings::segment_findings(&seg, host, default_huge, report.numa_nodes, kept);
        report.segments.push(seg);
    }

    // 5. The hugetlb cgroups of their processes.
    report.limited_cgroups = cgroups::pass(probe, host, &mut report.segments, default_huge);
    // Their `hugeshm run` records, looked up from the live mappings.
    run_record::attach(probe, host, &mut report, &run_candidates);
    // 6. What the scan could not read.
    report.processes_vanished = scan.unread.vanished;
    report.unreadable = scan.unread.problems;
    // Those first, then what the phases found of the scan itself (mounts
    // whose listing was cut short, records not shown).
    let mut scan_wide = findings::scan_findings(&report.unreadable, host);
    scan_wide.extend(oracle::amm_findings(probe, &report.segments));
    let huge = default_huge.unwrap_or(2 << 20);
    scan_wide.extend(oracle::sga_findings(probe, &report.segments, huge));
    // One walk of the exe links for the servers known by name.
    let servers = servers::processes_named(probe, &["java", "mariadbd"]);
    scan_wide.extend(jvm::jvm_findings(probe, host, &servers));
    scan_wide.extend(mariadb::base_page_findings(probe, huge, &servers));
    scan_wide.append(&mut report.findings);
    report.findings = scan_wide;
    // 7. SysV first, then by size.
    sort(&mut report.segments);
    report.scan_seconds = t0.elapsed().as_secs_f64();
    report
}

/// The order of the report: SysV segments first, then by size (largest
/// first), then by id.
fn sort(segments: &mut [Segment]) {
    segments.sort_by_key(|s| {
        (
            s.kind != SegmentKind::Sysv,
            std::cmp::Reverse(s.size_bytes),
            s.id,
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A segment of `kind`, `size` bytes, with `id`, and nothing else known.
    pub(super) fn bare(kind: SegmentKind, id: u64, size: u64) -> Segment {
        Segment {
            kind,
            id: Some(id),
            key: None,
            path: None,
            size_bytes: size,
            page_size_bytes: None,
            page_size_source: String::new(),
            resident_bytes: None,
            thp_bytes: None,
            collapse_aligned: None,
            owner_uid: None,
            mode: None,
            creator_pid: None,
            creator_name: None,
            attached_pids: vec![],
            attached: vec![],
            nattch: None,
            nodes: BTreeMap::new(),
            numa_policy: None,
            findings: vec![],
            dax: None,
            run: None,
        }
    }

    #[test]
    fn sysv_segments_come_first_then_the_largest_then_by_id() {
        let mut segs = vec![
            bare(SegmentKind::Posix, 7, 64 << 20),
            bare(SegmentKind::Sysv, 3, 1 << 20),
            bare(SegmentKind::Memfd, 2, 1 << 30),
            bare(SegmentKind::Sysv, 9, 1 << 30),
            bare(SegmentKind::Anon, 1, 64 << 20),
            bare(SegmentKind::Sysv, 4, 1 << 20),
        ];
        sort(&mut segs);
        let order: Vec<(SegmentKind, u64)> = segs.iter().map(|s| (s.kind, s.id.unwrap())).collect();
        assert_eq!(
            order,
            [
                (SegmentKind::Sysv, 9),
                (SegmentKind::Sysv, 3),
                (SegmentKind::Sysv, 4),
                (SegmentKind::Memfd, 2),
                (SegmentKind::Anon, 1),
                (SegmentKind::Posix, 7),
            ]
        );
    }

    #[test]
    fn a_fixture_host_scans_to_its_phases_results() {
        // The whole of build_with on two-nodes-uneven: the PostgreSQL and
        // Oracle segments from the maps, the orphan from sysvipc/shm only.
        let (probe, host) = crate::fixture::tree("two-nodes-uneven");
        let r = build_with(&probe, &host, &KeptRegions::default());
        let ids: Vec<Option<u64>> = r.segments.iter().map(|s| s.id).collect();
        assert_eq!(ids, [Some(3), Some(4), Some(5)]);
        assert_eq!(r.processes_scanned, 7);
        assert_eq!(r.maps_read, Some(MapsRead::Text));
        assert!(r.unreadable.is_empty() && r.findings.is_empty());
        let pg = &r.segments[0];
        assert_eq!(pg.page_size_source, "smaps of pid 2001");
        assert_eq!(pg.resident_bytes, Some(400 * (2 << 20)));
        assert_eq!(r.segments[2].page_size_source, "unknown: no process attached (its kernel rss exceeds its size, which only happens for hugetlb segments)");
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
