//! What is wrong with each segment ([`segment_findings`], phase 4 of the
//! scan), and with the scan as a whole ([`scan_findings`], phase 6).

use super::in_place;
use super::kept::{self, KeptRegions};
use super::{ProcessProblem, Segment, SegmentKind};
use crate::dax;
use crate::finding::{plural, pool_fix, Finding, Severity};
use hugeshm_parse::size::{format_bytes, BASE_PAGE, MIB};
use hugeshm_probe::{HostSnapshot, ProblemKind};

/// The scan-wide findings: one `processes-unreadable` for the unreadable
/// processes that matter ([`unreadable_that_matter`]), if any.
pub(super) fn scan_findings(unreadable: &[ProcessProblem], host: &HostSnapshot) -> Vec<Finding> {
    let matters = unreadable_that_matter(unreadable, host);
    if matters.is_empty() {
        return Vec::new();
    }
    vec![unreadable_finding(&matters, host.self_uid)]
}

/// The unreadable processes worth a finding: every one the caller could
/// read with more rights (not root), every malformed file, and, as root,
/// those whose maps are closed to root too (another pid namespace, an LSM)
/// only where they are seen mapping shared memory anyway (the creator or
/// last user of a SysV segment still attached). The others are only
/// counted in the scan's footnote.
fn unreadable_that_matter(all: &[ProcessProblem], host: &HostSnapshot) -> Vec<ProcessProblem> {
    let maps_shm = |pid: u32| {
        host.shm
            .iter()
            .any(|s| s.nattch > 0 && (s.cpid == pid || s.lpid == pid))
    };
    all.iter()
        .filter(|p| {
            p.problem.kind != ProblemKind::Permission || host.self_uid != Some(0) || maps_shm(p.pid)
        })
        .cloned()
        .collect()
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

/// What is wrong with `seg` (and, for a SysV segment nobody is attached to
/// that holds one of the `kept` regions, that it waits for its server).
pub(super) fn segment_findings(
    seg: &Segment,
    host: &HostSnapshot,
    default_huge: Option<u64>,
    numa_nodes: u32,
    kept: &KeptRegions,
) -> Vec<Finding> {
    let label = seg.label();
    if let Some(info) = &seg.dax {
        // Persistent memory: no pool, no fallback, placed by its device.
        return dax::findings(&label, seg.path.as_deref(), info);
    }
    let mut out = Vec::new();
    let huge = default_huge.unwrap_or(2 * MIB);
    let size = format_bytes(seg.size_bytes);

    // Collapsed in place: on 2 MiB THP, not hugetlb.
    let on_thp = in_place::on_thp(seg);
    if on_thp {
        out.push(in_place::thp_shmem(seg, &label));
    }
    let how = in_place::in_place(seg, host);

    // Silent fallback.
    if seg.page_size_bytes == Some(BASE_PAGE) && seg.size_bytes >= huge && !on_thp {
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
            let now = in_place::collapse_fix(how)
                .map(|c| format!("; or {c}"))
                .unwrap_or_default();
            out.push(Finding::new(
                Severity::Warning,
                "silent-fallback",
                format!(
                    "{label} ({size}) sits on 4 KiB pages: on {} pages it would take {pages} pages{short}{}",
                    format_bytes(huge),
                    in_place::note(seg, how)
                ),
                Some(format!(
                    "{fix}restart its owner with huge pages required (PostgreSQL huge_pages=on, Oracle use_large_pages=ONLY){now}"
                )),
            ));
        } else if seg.kind == SegmentKind::Posix && seg.thp_bytes.unwrap_or(0) == 0 {
            out.push(Finding::new(
                Severity::Info,
                "shm-file-4k",
                format!("{label} ({size}) is a tmpfs file on 4 KiB pages{}", in_place::note(seg, how)),
                Some(format!(
                    "put it on hugetlbfs (mount -t hugetlbfs) or use memfd_create(MFD_HUGETLB) to get huge pages{}",
                    in_place::collapse_fix(how).map(|c| format!("; or {c}")).unwrap_or_default()
                )),
            ));
        }
    }

    // Page tables of processes mapping a big 4 KiB segment.
    if seg.page_size_bytes == Some(BASE_PAGE)
        && seg.size_bytes >= huge
        && !seg.attached.is_empty()
        && !on_thp
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
            in_place::collapse_fix(how),
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

    // Orphans, but for a region made to be kept that waits for its server.
    if seg.kind == SegmentKind::Sysv && seg.nattch == Some(0) {
        let id = seg.id.unwrap_or(0);
        if let Some(name) = kept.region_of(seg) {
            out.push(kept::kept_unattached(seg, name, &label, &size));
        } else if kept.is_unreadable(seg) {
            out.push(kept::unattached_unreadable(seg, &label, &size));
        } else {
            out.push(Finding::new(
            Severity::Warning,
            "orphan",
            format!(
                "{label} ({size}, key {}, created by pid {}) has no process attached: its memory stays allocated until it is removed",
                seg.key.as_deref().unwrap_or("?"),
                seg.creator_text()
            ),
            Some(format!("ipcrm -m {id}   # only if no server will attach it again")),
        ));
        }
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
    use hugeshm_probe::Problem;

    #[test]
    fn as_root_only_unreadable_processes_seen_mapping_shm_matter() {
        let problem = |pid: u32, kind: ProblemKind| ProcessProblem {
            pid,
            problem: Problem::new(format!("/proc/{pid}/maps"), kind, "denied"),
        };
        let all = [
            problem(1, ProblemKind::Permission),
            problem(7, ProblemKind::Permission),
            problem(8, ProblemKind::Malformed),
        ];
        let mut h = HostSnapshot::default();
        h.self_uid = Some(0);
        h.shm = hugeshm_parse::sysvipc_shm::parse(
            "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                      0      32768   600               8388608     7     7      1     0     0     0     0          0          0          0               8388608                     0\n",
        )
        .unwrap();
        let pids = |v: Vec<ProcessProblem>| v.iter().map(|p| p.pid).collect::<Vec<_>>();
        // Pid 7 created an attached segment; 8's smaps is malformed.
        assert_eq!(pids(unreadable_that_matter(&all, &h)), [7, 8]);
        // Not root: every one of them.
        h.self_uid = Some(1000);
        assert_eq!(pids(unreadable_that_matter(&all, &h)), [1, 7, 8]);
    }

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
            collapse_aligned: None,
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
        segment_findings(seg, h, Some(2 * MIB), 2, &KeptRegions::default())
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
            segment_findings(seg, &h, Some(2 * MIB), 2, &KeptRegions::default())
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
    fn the_scan_has_one_finding_for_the_unreadable_processes_that_matter() {
        let problem = |pid: u32, kind: ProblemKind| ProcessProblem {
            pid,
            problem: Problem::new(format!("/proc/{pid}/smaps"), kind, "bad line 3"),
        };
        let mut h = HostSnapshot::default();
        h.self_uid = Some(0);
        // As root, a process closed to root that maps nothing seen: no finding.
        let denied = [problem(1, ProblemKind::Permission)];
        assert!(scan_findings(&denied, &h).is_empty());
        assert!(scan_findings(&[], &h).is_empty());
        let both = [
            problem(1, ProblemKind::Permission),
            problem(8, ProblemKind::Malformed),
        ];
        let f = scan_findings(&both, &h);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].code.as_str(), f[0].severity),
            ("processes-unreadable", Severity::Warning)
        );
        assert_eq!(
            f[0].message,
            "1 process could not be read (pids 8): the shared memory they map is not counted; first: bad line 3"
        );
        assert!(
            !f[0].fix.as_deref().unwrap().contains("/proc/8/smaps"),
            "{:?}",
            f[0].fix
        );
    }

    #[test]
    fn a_segment_that_can_be_collapsed_says_so_and_one_collapsed_is_thp() {
        let mut h = HostSnapshot::default();
        h.hugetlb_sysfs = true;
        h.pools = vec![hugeshm_parse::hugepages::PoolCounters::new(
            2 * MIB,
            0,
            0,
            Some(0),
            0,
            Some(0),
        )];
        h.sysctl.osrelease = Some("6.18.0-1-amd64".into());
        let mut seg = file("sysv 12", SegmentKind::Sysv, &[("0", 64 * MIB)]);
        seg.path = None;
        seg.creator_pid = Some(2);
        seg.attached = serde_json::from_value(serde_json::json!([
            {"pid": 1, "name": "db", "uid": 0, "vm_pte_bytes": 200 << 10},
            {"pid": 2, "name": "db", "uid": 0, "vm_pte_bytes": 40 << 10}
        ]))
        .unwrap();
        let find = |seg: &Segment, h: &HostSnapshot| {
            segment_findings(seg, h, Some(2 * MIB), 1, &KeptRegions::default())
        };
        let collapse = "hugeshm collapse --pid 2   # now, no restart";
        // Aligned: both findings name the collapse of the creator.
        seg.collapse_aligned = Some(true);
        let f = find(&seg, &h);
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["silent-fallback", "page-tables"]);
        assert!(
            f[0].fix.as_deref().unwrap().contains(collapse),
            "{:?}",
            f[0]
        );
        assert!(
            f[1].fix.as_deref().unwrap().starts_with(collapse),
            "{:?}",
            f[1]
        );
        // Not on a kernel before 6.1, nor under shmem_enabled = deny.
        let mut old = h.clone();
        old.sysctl.osrelease = Some("5.15.0-91-generic".into());
        let mut deny = h.clone();
        deny.thp.shmem_enabled =
            Some(hugeshm_parse::thp::parse_selector("shmem_enabled", "never [deny]").unwrap());
        for host in [&old, &deny] {
            let f = find(&seg, host);
            assert!(f
                .iter()
                .all(|f| !f.fix.as_deref().unwrap_or("").contains("collapse")));
        }
        // Unaligned: said, and no collapse offered.
        seg.collapse_aligned = Some(false);
        let f = find(&seg, &h);
        assert!(
            f[0].message.contains("not 2 MiB-aligned"),
            "{}",
            f[0].message
        );
        assert!(f
            .iter()
            .all(|f| !f.fix.as_deref().unwrap_or("").contains("collapse")));
        // Half of it collapsed (or split again since): said.
        seg.collapse_aligned = Some(true);
        seg.thp_bytes = Some(32 * MIB);
        let f = find(&seg, &h);
        assert!(f[0]
            .message
            .contains("32 MiB of it is on 2 MiB transparent huge pages"));
        // All of it: THP, not a fall-back any more.
        seg.thp_bytes = Some(64 * MIB);
        let f = find(&seg, &h);
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["thp-shmem"]);
        assert!(f[0].message.contains("not reserved"), "{}", f[0].message);
    }

    #[test]
    fn a_big_sysv_segment_on_4k_pages_fell_back_and_costs_page_tables() {
        let mut h = HostSnapshot::default();
        h.hugetlb_sysfs = true;
        h.pools = vec![hugeshm_parse::hugepages::PoolCounters::new(
            2 * MIB,
            20,
            10,
            Some(0),
            0,
            Some(0),
        )];
        let mut seg = file("sysv 12", SegmentKind::Sysv, &[("0", 64 * MIB)]);
        seg.path = None;
        seg.nattch = Some(2);
        seg.attached = serde_json::from_value(serde_json::json!([
            {"pid": 1, "name": "db", "uid": 0, "vm_pte_bytes": 200 << 10},
            {"pid": 2, "name": "db", "uid": 0, "vm_pte_bytes": 40 << 10}
        ]))
        .unwrap();
        let f = segment_findings(&seg, &h, Some(2 * MIB), 1, &KeptRegions::default());
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["silent-fallback", "page-tables"]);
        assert_eq!(
            f[0].message,
            "sysv 12 (64 MiB) sits on 4 KiB pages: on 2 MiB pages it would take 32 pages; the 2 MiB pool has 10 available"
        );
        assert!(
            f[0].fix
                .as_deref()
                .unwrap()
                .contains("=44, then restart its owner"),
            "{:?}",
            f[0].fix
        );
        // 64 MiB / 512 = 128 KiB of page tables each at most.
        assert!(
            f[1].message.ends_with("would save up to 168 KiB"),
            "{}",
            f[1].message
        );
        // The same on huge pages, half touched, and nobody attached.
        seg.page_size_bytes = Some(2 * MIB);
        seg.resident_bytes = Some(32 * MIB);
        seg.nattch = Some(0);
        seg.attached.clear();
        let f = segment_findings(&seg, &h, Some(2 * MIB), 1, &KeptRegions::default());
        let codes: Vec<&str> = f.iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["reserved-untouched", "orphan"]);
        assert!(
            f[0].message.starts_with("16 of 32 2 MiB pages of sysv 12"),
            "{}",
            f[0].message
        );
        assert_eq!(
            f[1].fix.as_deref(),
            Some("ipcrm -m 12   # only if no server will attach it again")
        );
    }

    #[test]
    fn an_unattached_sysv_segment_is_kept_only_where_the_caller_found_its_region() {
        let h = HostSnapshot::default();
        let mut seg = file("", SegmentKind::Sysv, &[]);
        seg.path = None;
        seg.key = Some("0x0000abcd".into());
        seg.page_size_bytes = Some(2 * MIB);
        seg.creator_pid = Some(77);
        seg.attached_pids.clear();
        seg.nattch = Some(0);
        let found = |seg: &Segment, kept: &KeptRegions| {
            segment_findings(seg, &h, Some(2 * MIB), 1, kept)
                .into_iter()
                .map(|f| (f.code.clone(), f.severity, f))
                .collect::<Vec<_>>()
        };
        // None known: an orphan, as before.
        let f = found(&seg, &KeptRegions::default());
        assert_eq!((f[0].0.as_str(), f[0].1), ("orphan", Severity::Warning));
        assert_eq!(f.len(), 1);
        // Its shmid and key, found kept by the caller: the info.
        let mut kept = KeptRegions::default();
        kept.add_sysv(12, 0xabcd, "sga", Some(2 << 20));
        let f = found(&seg, &kept);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].0.as_str(), f[0].1),
            ("kept-unattached", Severity::Info)
        );
        assert_eq!(
            f[0].2.message,
            "region sga (backend sysv; sysv 12, 64 MiB, key 0x0000abcd) was made to be kept by \
             pid 77 and has no process attached now: normal until a server attaches it; its \
             memory stays allocated until it is removed"
        );
        assert_eq!(
            f[0].2.fix.as_deref(),
            Some("hugeshm rm sga --backend sysv   # only when no server will attach it again")
        );
        // The shmid given to another segment since (another key), or
        // another shmid of that key: orphans.
        let mut reused = seg.clone();
        reused.key = Some("0x0000abce".into());
        assert_eq!(found(&reused, &kept)[0].0, "orphan");
        let mut other = seg.clone();
        other.id = Some(13);
        assert_eq!(found(&other, &kept)[0].0, "orphan");
        // Attached: neither.
        let mut attached = seg.clone();
        attached.nattch = Some(1);
        assert!(found(&attached, &kept).is_empty());
        // A name a shell would split is one quoted word in the fix.
        let mut odd = KeptRegions::default();
        odd.add_sysv(12, 0xabcd, "a b;c", None);
        assert_eq!(
            found(&seg, &odd)[0].2.fix.as_deref(),
            Some("hugeshm rm 'a b;c' --backend sysv   # only when no server will attach it again")
        );
        // A negative shmid is none the kernel gives: ignored.
        let mut neg = KeptRegions::default();
        neg.add_sysv(-1, 0xabcd, "x", None);
        assert_eq!(neg, KeptRegions::default());
    }

    #[test]
    fn roots_segment_the_caller_may_not_read_is_no_orphan() {
        let h = HostSnapshot::default();
        let mut seg = file("", SegmentKind::Sysv, &[]);
        seg.path = None;
        seg.key = Some("0x0000abcd".into());
        seg.creator_pid = Some(77);
        seg.mode = Some(0o600);
        seg.attached_pids.clear();
        seg.nattch = Some(0);
        let found = |seg: &Segment, kept: &KeptRegions| {
            segment_findings(seg, &h, Some(2 * MIB), 1, kept)
                .into_iter()
                .map(|f| (f.code.clone(), f.severity, f.message, f.fix))
                .collect::<Vec<_>>()
        };
        let mut unread = KeptRegions::default();
        unread.add_unreadable_sysv(12, 0xabcd);
        let f = found(&seg, &unread);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].0.as_str(), f[0].1),
            ("unattached-unreadable", Severity::Info)
        );
        assert_eq!(
            f[0].2,
            "sysv 12 (64 MiB, key 0x0000abcd, created by pid 77) is root's and has no process \
             attached; its header is root's to read (mode 0600), so whether it is a hugeshm \
             region made to be kept or one left behind only root can tell"
        );
        assert_eq!(
            f[0].3.as_deref(),
            Some("hugeshm ls   # as root: kept is normal, orphaned was left behind")
        );
        // Another key under that shmid (the id given again since), or
        // another shmid: orphans; attached: neither.
        let mut other = seg.clone();
        other.key = Some("0x0000abce".into());
        assert_eq!(found(&other, &unread)[0].0, "orphan");
        other = seg.clone();
        other.id = Some(13);
        assert_eq!(found(&other, &unread)[0].0, "orphan");
        other = seg.clone();
        other.nattch = Some(1);
        assert!(found(&other, &unread).is_empty());
        let mut neg = KeptRegions::default();
        neg.add_unreadable_sysv(-1, 0xabcd);
        assert_eq!(neg, KeptRegions::default());
    }
}
