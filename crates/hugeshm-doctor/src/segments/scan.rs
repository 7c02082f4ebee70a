//! The scan's first three phases, which find the objects:
//!
//! 1. [`read_processes`]: the maps of every process, one visit each; the
//!    mappings hugeshm reports ([`classify`]) add up to objects ([`Obj`],
//!    by [`Key`]), and the status of each process that maps one is read in
//!    the same visit;
//! 2. [`Scan::add_mount_files`]: the files on hugetlbfs mounts and
//!    `/dev/shm`, found even when nobody maps them (but for empty files and
//!    `hugeshm run` records, which hold no memory);
//! 3. [`Scan::add_unmapped_sysv`]: the SysV segments nobody maps (or whose
//!    users the scan cannot see).

use super::{ProcessProblem, SegmentKind};
use crate::dax;
use crate::finding::{Finding, Severity};
use hugeshm_parse::maps::MapsEntry;
use hugeshm_parse::pid_status::PidStatus;
use hugeshm_parse::run_record::parse_file_name;
use hugeshm_parse::size::BASE_PAGE;
use hugeshm_probe::{
    HostSnapshot, MapsRead, MountFile, MountListing, Probe, Problem, ReadError, SysvAttachments,
    SysvMapping,
};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
/// What identifies an object: a SysV shmid (of the reader's IPC namespace,
/// or of another one: its inode and the shmid there), a file (device and
/// inode), or a private mapping (pid and start address).
pub(super) enum Key {
    Sysv(u64),
    SysvElsewhere(u64, u64),
    File(u32, u32, u64),
    Private(u32, u64),
}

/// One object as the scan found it, before it becomes a
/// [`Segment`](super::Segment).
pub(super) struct Obj {
    pub(super) kind: SegmentKind,
    pub(super) path: Option<String>,
    pub(super) size: u64,
    /// pid → start addresses of its mappings of the object.
    pub(super) maps: BTreeMap<u32, Vec<u64>>,
    pub(super) file: Option<MountFile>,
    pub(super) page_from_mount: Option<(u64, String)>,
    /// pid → (start, end, file offset) of its mappings (`dax` only).
    pub(super) ranges: BTreeMap<u32, Vec<(u64, u64, u64)>>,
    /// One mapping (pid, start, end) of a file-backed object, through
    /// which its own size can be read.
    pub(super) first_map: Option<(u32, u64, u64)>,
}

impl Obj {
    pub(super) fn new(kind: SegmentKind, path: Option<String>) -> Obj {
        Obj {
            kind,
            path,
            size: 0,
            maps: BTreeMap::new(),
            file: None,
            page_from_mount: None,
            ranges: BTreeMap::new(),
            first_map: None,
        }
    }

    /// Adds one mapping of the object by `pid`. A file-backed object
    /// (memfd, hugetlbfs or tmpfs file, DAX, shared anonymous memory) is as
    /// long as the furthest `offset + length` of any mapping of it: a
    /// process may map it in pieces (DPDK's `--single-file-segments` maps a
    /// 64 MiB memfd as 32 mappings of 2 MiB). A private mapping is its own
    /// object.
    pub(super) fn add_mapping(&mut self, key: &Key, pid: u32, m: &MapsEntry) {
        let extent = match key {
            Key::File(..) => m.offset.saturating_add(m.size_bytes()),
            Key::Sysv(_) | Key::SysvElsewhere(..) | Key::Private(..) => m.size_bytes(),
        };
        self.size = self.size.max(extent);
        self.maps.entry(pid).or_default().push(m.start);
        if self.kind == SegmentKind::Dax {
            self.ranges
                .entry(pid)
                .or_default()
                .push((m.start, m.end, m.offset));
        }
        if matches!(key, Key::File(..)) && self.first_map.is_none() {
            self.first_map = Some((pid, m.start, m.end));
        }
    }

    /// The object's size: its file's own length where the file can be
    /// read through a mapping (live host, as root) and is not on a mount
    /// hugeshm lists (those have it already), else the extent of its
    /// mappings.
    pub(super) fn size_bytes(&self, probe: &Probe) -> u64 {
        if self.file.is_some()
            || !matches!(
                self.kind,
                SegmentKind::Memfd | SegmentKind::Hugetlbfs | SegmentKind::Posix | SegmentKind::Dax
            )
        {
            return self.size;
        }
        self.first_map
            .and_then(|(pid, start, end)| probe.pid(pid).mapped_file_size(start, end))
            .filter(|&n| n > 0)
            .unwrap_or(self.size)
    }
}

/// The mounts that decide what a mapped file is.
pub(super) struct Mounts {
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
    /// The host's hugetlbfs mounts with their page size (the default where
    /// the mount names none), tmpfs mounts with whether they allow THP
    /// (`huge=` other than `never`), and DAX mounts.
    pub(super) fn of(host: &HostSnapshot) -> Mounts {
        let default_huge = host.default_page_size();
        Mounts {
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
        }
    }

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

/// What the scan needs to judge a mapping: the mounts, and what tells a
/// SysV attachment from a look-alike.
pub(super) struct Judge<'a> {
    pub(super) probe: &'a Probe,
    pub(super) mounts: Mounts,
    pub(super) sysv: SysvAttachments,
}

impl<'a> Judge<'a> {
    /// The judge of `probe`'s host, as `host` was read.
    pub(super) fn of(probe: &'a Probe, host: &HostSnapshot) -> Judge<'a> {
        Judge {
            probe,
            mounts: Mounts::of(host),
            sysv: probe.sysv_attachments(Some(&host.shm)),
        }
    }
}

/// Which object a mapping belongs to, if it is one hugeshm reports. A
/// mapping named like a SysV attachment that the kernel does not vouch for
/// (another device, a shmid or key `/proc/sysvipc/shm` does not have, no
/// attachment counted: a user's look-alike file) is none: it is judged as
/// the file it is, which is on no mount the scan lists.
fn classify(pid: u32, m: &MapsEntry, judge: &Judge) -> Option<(Key, SegmentKind)> {
    let mounts = &judge.mounts;
    let path = m.pathname.as_deref()?;
    let file_key = Key::File(m.dev_major, m.dev_minor, m.inode);
    match judge.sysv.of(judge.probe, pid, m) {
        Some(SysvMapping::Here(shmid)) => return Some((Key::Sysv(shmid), SegmentKind::Sysv)),
        Some(SysvMapping::Elsewhere { ipc_ns, shmid }) => {
            return Some((Key::SysvElsewhere(ipc_ns, shmid), SegmentKind::Sysv))
        }
        Some(SysvMapping::LookAlike) => return None,
        None => {}
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

/// The finding of a mount whose listing stopped at its bound: the files
/// past it were not examined (an unmapped one among them is not reported),
/// with what the file system holds in all, so that memory there is not
/// hidden by how many entries someone made.
fn cut_short(target: &str, listing: &MountListing) -> Finding {
    let usage = listing.usage.map_or_else(String::new, |u| {
        format!(
            " (the file system holds {} in {} inodes, by statvfs)",
            hugeshm_parse::size::format_bytes(u.used_bytes),
            u.used_inodes
        )
    });
    Finding::new(
        Severity::Warning,
        "mount-listing-cut",
        format!(
            "{target}: the listing stopped after {} entries, {} of them empty files or hugeshm \
             run records nobody maps{usage}: files nobody maps past them were not examined",
            listing.entries, listing.passed_over
        ),
        Some(format!(
            "see who made them: find {} -xdev -printf '%u\\n' | sort | uniq -c | sort -rn | head",
            hugeshm_fix::shell_quote(target)
        )),
    )
}

/// The processes the scan could not read: those that exited meanwhile are
/// only counted.
#[derive(Default)]
pub(super) struct Unread {
    /// The others, in the order they were met.
    pub(super) problems: Vec<ProcessProblem>,
    /// Processes that exited during the scan.
    pub(super) vanished: u64,
}

impl Unread {
    /// Counts `pid` as vanished where its file is gone, else keeps the problem.
    pub(super) fn record(&mut self, pid: u32, e: ReadError) {
        if e.is_not_found() {
            self.vanished += 1;
        } else {
            self.problems.push(ProcessProblem {
                pid,
                problem: e.to_problem(),
            });
        }
    }
}

/// What the first three phases found.
#[derive(Default)]
pub(super) struct Scan {
    /// The objects, by key.
    pub(super) objs: BTreeMap<Key, Obj>,
    /// The status of each process that maps an object.
    pub(super) status: HashMap<u32, PidStatus>,
    /// The processes that could not be read.
    pub(super) unread: Unread,
    /// Processes whose maps were read.
    pub(super) processes_scanned: u64,
}

/// Phase 1: the mappings of every process that can be shared memory or huge
/// pages (by ioctl where the kernel has it, else the lines of the text),
/// and the status of each process that maps something reported, in one
/// visit per process, on every CPU (the kernel's work of formatting /proc
/// files is most of the cost). A process list that cannot be read goes to
/// `problems`; `how` is how the maps are read ([`Probe::maps_read`]).
pub(super) fn read_processes(judge: &Judge, how: MapsRead, problems: &mut Vec<Problem>) -> Scan {
    let probe = judge.probe;
    let mut scan = Scan::default();
    let visits = probe.read_each(&pids(probe, problems), 0, |p| {
        let maps = p.maps_candidates(how).map(|maps| {
            maps.into_iter()
                .filter_map(|m| classify(p.pid, &m, judge).map(|(k, kind)| (k, kind, m)))
                .collect::<Vec<_>>()
        });
        let status = match &maps {
            Ok(found) if !found.is_empty() => Some(p.status()),
            _ => None,
        };
        (maps, status)
    });
    let mut status_problems = Vec::new();
    for (pid, (maps, st)) in visits {
        let maps = match maps {
            Ok(m) => m,
            Err(e) => {
                scan.unread.record(pid, e);
                continue;
            }
        };
        scan.processes_scanned += 1;
        match st {
            Some(Ok(s)) => {
                scan.status.insert(pid, s);
            }
            Some(Err(e)) => status_problems.push((pid, e)),
            None => {}
        }
        for (key, kind, m) in maps {
            scan.objs
                .entry(key)
                .or_insert_with(|| Obj::new(kind, m.pathname.clone()))
                .add_mapping(&key, pid, &m);
        }
    }
    // Problems with status after those with maps, as when they were read
    // in two passes.
    for (pid, e) in status_problems {
        scan.unread.record(pid, e);
    }
    scan
}

/// The pids under the `/proc` root (none where it cannot be listed: a
/// problem).
fn pids(probe: &Probe, problems: &mut Vec<Problem>) -> Vec<u32> {
    match probe.processes() {
        Ok(l) => l.pids,
        Err(e) => {
            problems.push(e.to_problem());
            Vec::new()
        }
    }
}

impl Scan {
    /// Phase 2: the files on hugetlbfs mounts and on `/dev/shm`, with their
    /// owner, mode, size and allocated bytes, and the page size their mount
    /// gives them; empty files and `hugeshm run` records that no process
    /// maps are not objects. A mount absent under the fs root is skipped,
    /// one that cannot be read is a problem.
    pub(super) fn add_mount_files(
        &mut self,
        probe: &Probe,
        host: &HostSnapshot,
        problems: &mut Vec<Problem>,
        findings: &mut Vec<Finding>,
    ) {
        let default_huge = host.default_page_size();
        for mnt in host
            .mounts
            .iter()
            .filter(|m| m.is_hugetlbfs() || (m.is_tmpfs() && m.target == "/dev/shm"))
        {
            // What anyone can create there must not grow the scan: a
            // `hugeshm run` record (found from its process instead) and an
            // empty file hold no memory, so neither is an object unless a
            // process maps it; they are skipped as they are listed.
            let objs = &self.objs;
            let mapped =
                |dev: (u32, u32), inode: u64| objs.contains_key(&Key::File(dev.0, dev.1, inode));
            let listing = match probe.mount_files(
                &mnt.target,
                &mut |f| {
                    let record = f
                        .name
                        .to_str()
                        .is_some_and(|n| parse_file_name(n).is_some());
                    !record || mapped(f.dev, f.inode)
                },
                &mut |f| f.size_bytes > 0 || mapped(f.dev, f.inode),
            ) {
                Ok(f) => f,
                Err(e) if e.is_not_found() => continue,
                Err(e) => {
                    problems.push(e.to_problem());
                    continue;
                }
            };
            if listing.cut_short {
                findings.push(cut_short(&mnt.target, &listing));
            }
            let files = listing.files;
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
                let o = self
                    .objs
                    .entry(key)
                    .or_insert_with(|| Obj::new(kind, Some(f.path.clone())));
                o.size = o.size.max(f.size_bytes);
                o.path = Some(f.path.clone());
                o.page_from_mount = page.clone();
                o.file = Some(f);
            }
        }
    }

    /// Phase 3: every SysV segment of `/proc/sysvipc/shm` that no mapping
    /// named.
    pub(super) fn add_unmapped_sysv(&mut self, host: &HostSnapshot) {
        for s in &host.shm {
            self.objs
                .entry(Key::Sysv(s.shmid as u64))
                .or_insert_with(|| Obj::new(SegmentKind::Sysv, None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::tree as fixture;
    use hugeshm_parse::size::MIB;
    use hugeshm_probe::ProblemKind;

    fn host_with_mounts(mounts: &str) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        h.mounts = hugeshm_parse::mounts::parse(mounts).unwrap();
        h
    }

    #[test]
    fn classify_names_the_object_of_each_mapping() {
        let h = host_with_mounts(
            "hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n\
             tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n\
             /dev/pmem0 /mnt/pmem ext4 rw,dax=always 0 0\n\
             /dev/pmem1 /mnt/cache ext4 rw,dax=never 0 0\n",
        );
        let mut h = h;
        h.shm = hugeshm_parse::sysvipc_shm::parse(
            "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                   5432001      32769   600               2097152  2001  2003      1    26    26    26    26          0          0          0                     0                     0\n",
        )
        .unwrap();
        let probe = Probe::new(hugeshm_probe::Roots::fixture(std::path::Path::new(
            "/nonexistent-hugeshm-root",
        )));
        let judge = Judge::of(&probe, &h);
        let kind = |line: &str| {
            let m = hugeshm_parse::maps::parse(line).unwrap().remove(0);
            classify(42, &m, &judge)
        };
        let at = "7f0000000000-7f0000200000";
        let sysv = kind(&format!(
            "{at} rw-s 00000000 00:01 32769 /SYSV0052e2c1 (deleted)"
        ));
        assert_eq!(sysv, Some((Key::Sysv(32769), SegmentKind::Sysv)));
        // Look-alikes: another key, a shmid /proc/sysvipc/shm lacks, a file
        // not deleted. None is a segment, nor a file on a listed mount.
        for line in [
            "rw-s 00000000 00:01 32769 /SYSV0052e2c2 (deleted)",
            "rw-s 00000000 00:01 32770 /SYSV0052e2c1 (deleted)",
            "rw-s 00000000 00:01 32769 /SYSV0052e2c1",
        ] {
            assert_eq!(kind(&format!("{at} {line}")), None, "{line}");
        }
        let file = |dev_minor: u32, ino: u64| Key::File(0, dev_minor, ino);
        for (line, want) in [
            (
                "rw-s 00000000 00:0f 7 /anon_hugepage (deleted)",
                Some((file(15, 7), SegmentKind::Anon)),
            ),
            (
                "rw-s 00000000 00:01 8 /dev/zero (deleted)",
                Some((file(1, 8), SegmentKind::Anon)),
            ),
            (
                "rw-s 00000000 00:01 9 /memfd:pool (deleted)",
                Some((file(1, 9), SegmentKind::Memfd)),
            ),
            (
                "rw-s 00000000 00:0f 10 /dev/hugepages/a",
                Some((file(15, 10), SegmentKind::Hugetlbfs)),
            ),
            (
                "rw-s 00000000 00:06 11 /dev/dax0.0",
                Some((file(6, 11), SegmentKind::Dax)),
            ),
            (
                "rw-s 00000000 00:2a 12 /mnt/pmem/log",
                Some((file(42, 12), SegmentKind::Dax)),
            ),
            (
                "rw-s 00000000 00:19 13 /dev/shm/PostgreSQL.1",
                Some((file(25, 13), SegmentKind::Posix)),
            ),
            // dax=never, a name that only starts like a mount, an ordinary file.
            ("rw-s 00000000 00:2b 14 /mnt/cache/x", None),
            ("rw-s 00000000 00:19 15 /dev/shmx/y", None),
            ("rw-s 00000000 fd:01 16 /var/lib/db/file", None),
            // A SysV name that is not one.
            ("rw-s 00000000 00:01 17 /SYSVnothex0", None),
        ] {
            assert_eq!(kind(&format!("{at} {line}")), want, "{line}");
        }
        // Private: huge pages are the process's own; a private tmpfs file is nothing.
        let private = Some((
            Key::Private(42, 0x7f0000000000),
            SegmentKind::PrivateHugetlb,
        ));
        assert_eq!(
            kind(&format!(
                "{at} rw-p 00000000 00:0f 7 /anon_hugepage (deleted)"
            )),
            private
        );
        assert_eq!(
            kind(&format!("{at} rw-p 00000000 00:0f 18 /dev/hugepages/b")),
            private
        );
        assert_eq!(
            kind(&format!("{at} rw-p 00000000 00:19 19 /dev/shm/c")),
            None
        );
        assert_eq!(kind(&format!("{at} rw-p 00000000 00:00 0")), None);
    }

    #[test]
    fn every_process_is_read_and_status_only_where_it_maps_an_object() {
        let (probe, host) = fixture("two-nodes-uneven");
        let mut problems = Vec::new();
        let scan = read_processes(&Judge::of(&probe, &host), MapsRead::Text, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        // Pids 1, 2, 2001-2003, 3001-3002; 1 and 2 map nothing reported.
        assert_eq!(scan.processes_scanned, 7);
        let mut with_status: Vec<u32> = scan.status.keys().copied().collect();
        with_status.sort_unstable();
        assert_eq!(with_status, [2001, 2002, 2003, 3001, 3002]);
        assert_eq!(scan.status[&2001].name, "postgres");
        let keys: Vec<&Key> = scan.objs.keys().collect();
        assert_eq!(keys, [&Key::Sysv(3), &Key::Sysv(4)]);
        let pg = &scan.objs[&Key::Sysv(3)];
        assert_eq!(
            pg.maps.keys().copied().collect::<Vec<_>>(),
            [2001, 2002, 2003]
        );
        assert_eq!(pg.size, 1 << 30);
        assert!(scan.unread.problems.is_empty());
        assert_eq!(scan.unread.vanished, 0);
        // No /proc to list: a problem, and nothing scanned.
        let none = Probe::new(hugeshm_probe::Roots::fixture(std::path::Path::new(
            "/nonexistent-hugeshm-root",
        )));
        let scan = read_processes(&Judge::of(&none, &host), MapsRead::Text, &mut problems);
        assert_eq!((scan.processes_scanned, scan.objs.len()), (0, 0));
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn a_vanished_process_is_counted_and_an_unreadable_one_kept() {
        let (probe, _) = fixture("unreadable-malformed");
        let mut unread = Unread::default();
        unread.record(424242, probe.pid(424242).status().unwrap_err());
        let malformed = probe.pid(4242).smaps().unwrap_err();
        unread.record(4242, malformed);
        assert_eq!(unread.vanished, 1);
        assert_eq!(unread.problems.len(), 1);
        assert_eq!(unread.problems[0].pid, 4242);
        assert_eq!(unread.problems[0].problem.kind, ProblemKind::Malformed);
    }

    /// A scratch directory standing for the fs root, removed on drop.
    struct Root(std::path::PathBuf);

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn files_on_hugetlbfs_and_dev_shm_are_found_even_unmapped() {
        let root =
            Root(std::env::temp_dir().join(format!("hugeshm-doctor-scan-{}", std::process::id())));
        let fs = root.0.join("fs");
        for dir in ["dev/shm", "dev/hugepages/sub", "run"] {
            std::fs::create_dir_all(fs.join(dir)).unwrap();
        }
        std::fs::write(fs.join("dev/shm/a"), vec![1u8; 5000]).unwrap();
        std::fs::write(fs.join("dev/hugepages/sub/b"), b"b").unwrap();
        // Neither an empty file nor a run record is an object unmapped.
        std::fs::write(fs.join("dev/shm/empty"), b"").unwrap();
        std::fs::write(fs.join("dev/shm/hugeshm-run.1.1000"), b"x").unwrap();
        std::fs::write(fs.join("run/c"), b"not /dev/shm").unwrap();
        let probe = Probe::new(hugeshm_probe::Roots::fixture(&root.0));
        let mut h = host_with_mounts(
            "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n\
             hugetlbfs /dev/hugepages hugetlbfs rw,pagesize=2M 0 0\n\
             tmpfs /run tmpfs rw 0 0\n\
             hugetlbfs /mnt/absent hugetlbfs rw,pagesize=1G 0 0\n",
        );
        // /dev/shm/a is mapped already: it keeps its mappings.
        let a = std::fs::metadata(fs.join("dev/shm/a")).unwrap();
        let key = {
            use std::os::unix::fs::MetadataExt;
            let dev = a.dev();
            Key::File(
                hugeshm_probe::dev_major(dev),
                hugeshm_probe::dev_minor(dev),
                a.ino(),
            )
        };
        let mut scan = Scan::default();
        let mut mapped = Obj::new(SegmentKind::Posix, Some("/dev/shm/a".into()));
        mapped.maps.insert(9, vec![0x1000]);
        scan.objs.insert(key, mapped);
        let mut problems = Vec::new();
        scan.add_mount_files(&probe, &h, &mut problems, &mut Vec::new());
        assert!(problems.is_empty(), "{problems:?}");
        let mut found: Vec<String> = scan
            .objs
            .values()
            .map(|o| format!("{:?} {:?} {:?}", o.path, o.kind, o.page_from_mount))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                "Some(\"/dev/hugepages/sub/b\") Hugetlbfs Some((2097152, \"mount /dev/hugepages (pagesize)\"))",
                "Some(\"/dev/shm/a\") Posix Some((4096, \"mount /dev/shm (tmpfs without huge=)\"))",
            ]
        );
        let a = &scan.objs[&key];
        assert_eq!((a.size, a.maps.len()), (5000, 1));
        assert_eq!(a.file.as_ref().map(|f| f.size_bytes), Some(5000));
        // A tmpfs with huge= gives no page size: smaps must say.
        h.mounts =
            hugeshm_parse::mounts::parse("tmpfs /dev/shm tmpfs rw,huge=always 0 0\n").unwrap();
        let mut scan = Scan::default();
        scan.add_mount_files(&probe, &h, &mut problems, &mut Vec::new());
        assert_eq!(
            scan.objs
                .values()
                .map(|o| o.page_from_mount.clone())
                .collect::<Vec<_>>(),
            [None]
        );
    }

    #[test]
    fn sysv_segments_nobody_maps_are_added_and_mapped_ones_kept() {
        let mut h = HostSnapshot::default();
        h.shm = hugeshm_parse::sysvipc_shm::parse(
            "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                   5432001          3   600            1073741824  2001  2003      3    26    26    26    26          0          0          0                     0                     0\n\
                         0          5   600              67108864  1777  1777      0     0     0     0     0          0          0          0                     0                     0\n",
        )
        .unwrap();
        let mut scan = Scan::default();
        let mut pg = Obj::new(SegmentKind::Sysv, Some("/SYSV0052e2c1".into()));
        pg.maps.insert(2001, vec![0x7f3a40000000]);
        scan.objs.insert(Key::Sysv(3), pg);
        scan.add_unmapped_sysv(&h);
        assert_eq!(
            scan.objs.keys().collect::<Vec<_>>(),
            [&Key::Sysv(3), &Key::Sysv(5)]
        );
        assert_eq!(scan.objs[&Key::Sysv(3)].maps.len(), 1);
        let orphan = &scan.objs[&Key::Sysv(5)];
        assert!(orphan.maps.is_empty() && orphan.path.is_none());
    }

    #[test]
    fn a_file_object_is_as_long_as_its_furthest_mapping() {
        // DPDK --single-file-segments: one memfd, 32 mappings of 2 MiB.
        let key = Key::File(0, 1, 25924);
        let mut o = Obj::new(SegmentKind::Memfd, Some("/memfd:seg_2".into()));
        for i in 0..32u64 {
            let line = format!(
                "{:x}-{:x} rw-s {:08x} 00:01 25924 /memfd:seg_2 (deleted)",
                0x1180200000 + i * 2 * MIB,
                0x1180400000 + i * 2 * MIB,
                i * 2 * MIB
            );
            let m = hugeshm_parse::maps::parse(&line).unwrap().remove(0);
            o.add_mapping(&key, 42, &m);
        }
        assert_eq!(o.size, 64 * MIB);
        assert_eq!(o.maps[&42].len(), 32);
        // A private mapping at an offset is only its own length.
        let m = hugeshm_parse::maps::parse(
            "7f0000000000-7f0000200000 rw-p 00400000 00:0f 77 /dev/hugepages/x",
        )
        .unwrap()
        .remove(0);
        let mut p = Obj::new(SegmentKind::PrivateHugetlb, None);
        p.add_mapping(&Key::Private(42, m.start), 42, &m);
        assert_eq!(p.size, 2 * MIB);
    }
}
