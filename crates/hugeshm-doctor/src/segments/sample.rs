//! Phase 4 of the scan, object by object: from an [`Obj`] to a
//! [`Segment`].
//!
//! 1. [`segment_of`]: what the object and `/proc/sysvipc/shm` say (id,
//!    key, path, size, owner, mode, creator, the attached processes);
//! 2. [`Sampler::sample`]: what a few of its processes see in their
//!    `smaps` and `numa_maps` ([`Seen`]): up to [`SAMPLE_PROCESSES`] read
//!    for it, the creator first, and no more once one of them saw all of
//!    it resident (all PMD-mapped too where shmem THP is on);
//! 3. [`fill`]: page size, residency, THP and nodes from what was seen,
//!    the mount, or the object's own counters;
//! 4. [`DaxHost::pass`] for a `dax` object: its page size, residency and
//!    node from the device and its processes' pagemap (smaps counts no DAX
//!    page).

use super::scan::{Key, Obj};
use super::{AttachedProcess, Segment, SegmentKind, SAMPLE_PROCESSES};
use crate::dax;
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::pid_status::PidStatus;
use hugeshm_parse::size::{BASE_PAGE, MIB};
use hugeshm_parse::sysvipc_shm::ShmSegment;
use hugeshm_probe::{HostSnapshot, PmemSnapshot, Probe, ReadError};
use std::collections::{BTreeMap, HashMap};

/// A SysV key as `ipcs` prints it and [`Segment::key`] holds it: `0x0000abcd`.
pub(super) fn key_text(key: i32) -> String {
    format!("0x{:08x}", key as u32)
}

/// A segment with what its object, its SysV entry (`sysv`, where the
/// object is a SysV segment still listed) and the status of its processes
/// say; page size, residency, THP and nodes are left for [`fill`].
pub(super) fn segment_of(
    probe: &Probe,
    key: &Key,
    o: &Obj,
    sysv: Option<&ShmSegment>,
    status: &HashMap<u32, PidStatus>,
) -> Segment {
    // A SysV mapping missing from /proc/sysvipc/shm (removed after the list
    // was read) is kept, with what its mappings tell.
    let mut seg = Segment {
        kind: o.kind,
        id: match key {
            Key::Sysv(id) | Key::SysvElsewhere(_, id) => Some(*id),
            Key::File(_, _, ino) => Some(*ino),
            Key::Private(_, _) => None,
        },
        key: sysv.map(|s| key_text(s.key)),
        // The /SYSVxxxxxxxx name of a SysV mapping says nothing the key does
        // not; one of another IPC namespace is named by that namespace.
        path: match (o.kind, key) {
            (_, Key::SysvElsewhere(ns, _)) => Some(format!("ipc:[{ns}]")),
            (SegmentKind::Sysv, _) => None,
            (SegmentKind::Memfd, _) => o
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
        collapse_aligned: None,
        owner_uid: sysv.map(|s| s.uid).or(o.file.as_ref().map(|f| f.uid)),
        mode: sysv
            .map(|s| s.perms & 0o777)
            .or(o.file.as_ref().map(|f| f.mode & 0o7777)),
        creator_pid: match key {
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
    // A creator that maps nothing (or has exited) but is named by SysV.
    seg.creator_name = seg.creator_pid.and_then(|pid| {
        status
            .get(&pid)
            .map(|s| s.name.clone())
            .or_else(|| probe.pid(pid).status().ok().map(|s| s.name))
    });
    if seg.owner_uid.is_none() {
        seg.owner_uid = seg.attached.first().and_then(|a| a.uid);
    }
    seg
}

/// One sampled process's `smaps` and `numa_maps` (`None` where unreadable).
pub(super) struct Sample {
    pub(super) smaps: Option<Vec<hugeshm_parse::smaps::SmapsEntry>>,
    pub(super) numa: Option<Vec<hugeshm_parse::numa_maps::NumaMapsEntry>>,
}

impl Sample {
    /// Reads both; a failure goes to `problem` (numa_maps missing on a
    /// kernel without NUMA is not one).
    pub(super) fn read(probe: &Probe, pid: u32, problem: &mut dyn FnMut(u32, ReadError)) -> Sample {
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

/// What the sampled processes saw of one object.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// The page size of the first mapping of it found, and whose smaps.
    pub(super) page: Option<(u64, String)>,
    /// The most bytes resident any process saw (`None`: none had it in
    /// its smaps).
    pub(super) resident: Option<u64>,
    /// The most bytes mapped by THP any process saw.
    pub(super) thp: Option<u64>,
    /// Whether the first mapping of it found on base pages starts 2 MiB
    /// from its offset in the object (`(start - offset) % 2 MiB == 0`):
    /// only then can its blocks be mapped as 2 MiB pages.
    pub(super) aligned: Option<bool>,
    /// Resident bytes per node of the process that saw the most on nodes
    /// (the first one with a policy, then any that saw more).
    pub(super) nodes: BTreeMap<u32, u64>,
    /// That process's policy for it.
    pub(super) policy: Option<String>,
}

/// The samples read so far (one read per process for the whole scan), and
/// whether shmem THP is on.
pub(super) struct Sampler {
    samples: HashMap<u32, Sample>,
    /// Whether a process could map a shmem object by PMD (THP for shmem):
    /// then one process seeing it all resident does not say how the others
    /// map it.
    shmem_thp: bool,
}

impl Sampler {
    /// A sampler for `host` (its shmem THP mode).
    pub(super) fn new(host: &HostSnapshot) -> Sampler {
        Sampler {
            samples: HashMap::new(),
            shmem_thp: host
                .thp
                .shmem_enabled
                .as_ref()
                .is_some_and(|s| !matches!(s.selected.as_str(), "never" | "deny")),
        }
    }

    /// Page size, resident, THP, nodes of object `o` (of `size` bytes)
    /// from up to [`SAMPLE_PROCESSES`] of its processes read for it,
    /// `creator` first; samples read for an earlier object are used again
    /// without counting. The rest are not read once one has seen the whole
    /// object resident (a process's smaps and numa_maps walk its page
    /// tables: 70 ms and 45 ms for 4 GiB on 4 KiB pages). `read` reads a
    /// process's sample.
    pub(super) fn sample(
        &mut self,
        o: &Obj,
        creator: Option<u32>,
        size: u64,
        read: &mut dyn FnMut(u32) -> Sample,
    ) -> Seen {
        let mut seen = Seen::default();
        let mut nodes_sum = 0u64;
        let mut read_here = 0;
        for pid in creator_first(o.maps.keys().copied().collect(), creator) {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.samples.entry(pid) {
                if read_here == SAMPLE_PROCESSES {
                    continue;
                }
                read_here += 1;
                slot.insert(read(pid));
            }
            let Some(starts) = o.maps.get(&pid) else {
                continue;
            };
            let Some(sample) = self.samples.get(&pid) else {
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
                if seen.aligned.is_none() && !e.is_hugetlb() {
                    let misalign = e.map.start.wrapping_sub(e.map.offset) % (2 * MIB);
                    seen.aligned = Some(misalign == 0);
                }
                if seen.page.is_none() {
                    seen.page = Some((
                        e.kernel_page_size_bytes.unwrap_or(BASE_PAGE),
                        format!("smaps of pid {pid}"),
                    ));
                }
                res = res
                    .saturating_add(e.rss_bytes)
                    .saturating_add(e.hugetlb_bytes());
                thp = thp
                    .saturating_add(e.shmem_pmd_mapped_bytes.unwrap_or(0))
                    .saturating_add(e.anon_huge_pages_bytes.unwrap_or(0));
            }
            if matched {
                seen.resident = Some(seen.resident.unwrap_or(0).max(res));
                seen.thp = Some(seen.thp.unwrap_or(0).max(thp));
            }
            let seen_all =
                matched && size > 0 && res >= size && (hugetlb || !self.shmem_thp || thp >= size);
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
                if policy.is_some() && (seen.policy.is_none() || sum > nodes_sum) {
                    (nodes_sum, seen.nodes, seen.policy) = (sum, nodes, policy);
                }
            }
            if seen_all {
                break;
            }
        }
        seen
    }
}

/// `pids` with `creator` moved to the front where it is one of them.
fn creator_first(mut pids: Vec<u32>, creator: Option<u32>) -> Vec<u32> {
    if let Some(i) = creator.and_then(|c| pids.iter().position(|p| *p == c)) {
        let c = pids.remove(i);
        pids.insert(0, c);
    }
    pids
}

/// Puts what was `seen` of object `o` into `seg`: the page size (else the
/// mount's, else why it is unknown), residency (the most any process saw,
/// or the object's own count where larger: a file's allocated bytes, a
/// SysV segment's `rss` where it can be trusted), THP and nodes.
pub(super) fn fill(seg: &mut Segment, o: &Obj, sysv: Option<&ShmSegment>, seen: Seen) {
    if let Some((p, src)) = seen.page {
        seg.page_size_bytes = Some(p);
        seg.page_size_source = src;
    } else if let Some((p, src)) = &o.page_from_mount {
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
    seg.thp_bytes = seen.thp;
    seg.collapse_aligned = seen.aligned.filter(|_| seg.kind.in_shmem());
    // Object-wide residency where the kernel keeps it. /proc/sysvipc/shm's
    // rss of a hugetlb segment is inflated by the huge page's base-page
    // count on folio-based kernels (6.x: 8 MiB shows as 4 GiB), so it is
    // used only when it cannot exceed the segment.
    let rounded = seg.size_bytes.div_ceil(BASE_PAGE) * BASE_PAGE;
    let sysv_rss = sysv
        .and_then(|s| s.rss_bytes)
        .filter(|&rss| seg.page_size_bytes.is_none_or(|p| p <= BASE_PAGE) && rss <= rounded);
    if seg.page_size_bytes.is_none() && sysv.and_then(|s| s.rss_bytes).is_some_and(|r| r > rounded)
    {
        seg.page_size_source.push_str(
            " (its kernel rss exceeds its size, which only happens for hugetlb segments)",
        );
    }
    let object_resident = sysv_rss.or(o.file.as_ref().map(|f| f.allocated_bytes));
    seg.resident_bytes = match (seen.resident, object_resident) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    seg.nodes = seen
        .nodes
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect();
    seg.numa_policy = seen.policy;
}

/// What the DAX pass needs of the host: its DAX mounts and where its
/// persistent memory is (sysfs, read only when some object is `dax`).
pub(super) struct DaxHost<'a> {
    mounts: Vec<&'a Mount>,
    pmem: PmemSnapshot,
}

impl<'a> DaxHost<'a> {
    /// Reads what `objs` need.
    pub(super) fn read<'o>(
        probe: &Probe,
        host: &'a HostSnapshot,
        mut objs: impl Iterator<Item = &'o Obj>,
    ) -> DaxHost<'a> {
        DaxHost {
            pmem: if objs.any(|o| o.kind == SegmentKind::Dax) {
                probe.pmem()
            } else {
                Default::default()
            },
            mounts: host
                .mounts
                .iter()
                .filter(|m| dax::is_dax_mount(m))
                .collect(),
        }
    }

    /// A `dax` segment: where its memory is, and the fault size of the
    /// mappings of a few of its processes from their pagemap (smaps counts no
    /// DAX page: its page size, residency and nodes come from here).
    pub(super) fn pass(&self, probe: &Probe, o: &Obj, seg: &mut Segment) {
        let path = o.path.as_deref().unwrap_or("");
        let mut info = dax::info_for(path, &self.mounts, &self.pmem);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::tree as fixture;
    use crate::segments::scan::{read_processes, Judge};
    use crate::segments::tests::bare;
    use hugeshm_parse::size::MIB;
    use hugeshm_probe::MapsRead;

    const START: u64 = 0x1000_0000;

    /// A SysV object of `size` bytes mapped at [`START`] by `pids`.
    fn obj(size: u64, pids: impl IntoIterator<Item = u32>) -> Obj {
        let mut o = Obj::new(SegmentKind::Sysv, None);
        o.size = size;
        for pid in pids {
            o.maps.insert(pid, vec![START]);
        }
        o
    }

    /// A process's sample of the mapping at [`START`]: `huge` (2 MiB
    /// hugetlb) or not (4 KiB shmem), `res` bytes resident, `pmd` of them
    /// PMD-mapped, and its nodes (`None`: numa_maps unreadable).
    fn sample(huge: bool, res: u64, pmd: u64, nodes: Option<&str>) -> Sample {
        let (page_kb, rss, hugetlb, flags) = if huge {
            (2048, 0, res / 1024, "rd wr sh ht")
        } else {
            (4, res / 1024, 0, "rd wr sh")
        };
        let smaps = format!(
            "{START:x}-{:x} rw-s 00000000 00:01 3 /SYSV00000001 (deleted)\n\
             Size: 8192 kB\nKernelPageSize: {page_kb} kB\nRss: {rss} kB\n\
             ShmemPmdMapped: {} kB\nShared_Hugetlb: {hugetlb} kB\nVmFlags: {flags}\n",
            START + 8 * MIB,
            pmd / 1024
        );
        Sample {
            smaps: Some(hugeshm_parse::smaps::parse(&smaps).unwrap()),
            numa: nodes.map(|n| {
                hugeshm_parse::numa_maps::parse(&format!(
                    "{START:x} {n} file=/SYSV00000001\\040(deleted) kernelpagesize_kB={page_kb}\n"
                ))
                .unwrap()
            }),
        }
    }

    /// Runs `sampler` over `o`, reading each pid's sample from `of`;
    /// returns what was seen and the pids read.
    fn run(
        sampler: &mut Sampler,
        o: &Obj,
        creator: Option<u32>,
        of: impl Fn(u32) -> Sample,
    ) -> (Seen, Vec<u32>) {
        let mut read = Vec::new();
        let seen = sampler.sample(o, creator, o.size, &mut |pid| {
            read.push(pid);
            of(pid)
        });
        (seen, read)
    }

    #[test]
    fn the_creator_is_read_first_and_one_process_that_saw_it_all_is_enough() {
        let mut sampler = Sampler::new(&HostSnapshot::default());
        let o = obj(8 * MIB, 1..=6);
        let (seen, read) = run(&mut sampler, &o, Some(5), |_| {
            sample(true, 8 * MIB, 0, Some("default N0=4"))
        });
        assert_eq!(read, [5]);
        assert_eq!(seen.page, Some((2 * MIB, "smaps of pid 5".to_string())));
        assert_eq!((seen.resident, seen.thp), (Some(8 * MIB), Some(0)));
        assert_eq!(seen.nodes, [(0, 8 * MIB)].into_iter().collect());
        assert_eq!(seen.policy.as_deref(), Some("default"));
    }

    #[test]
    fn at_most_sample_processes_are_read_per_object_and_kept_for_the_next() {
        let mut sampler = Sampler::new(&HostSnapshot::default());
        // Pid p has p MiB of it resident: nobody saw it all.
        let partly = |pid: u32| sample(true, u64::from(pid) * 2 * MIB / 2, 0, None);
        let (seen, read) = run(&mut sampler, &obj(64 * MIB, 1..=6), None, partly);
        assert_eq!(read, [1, 2, 3, 4]);
        assert_eq!(read.len(), SAMPLE_PROCESSES);
        assert_eq!(seen.resident, Some(4 * MIB));
        assert_eq!(seen.page, Some((2 * MIB, "smaps of pid 1".to_string())));
        // Another object of pids 3..=8: 3 and 4 come from the first, four
        // more are read, and the most resident of all six counts.
        let (seen, read) = run(&mut sampler, &obj(64 * MIB, 3..=8), None, partly);
        assert_eq!(read, [5, 6, 7, 8]);
        assert_eq!(seen.resident, Some(8 * MIB));
        // A process whose smaps could not be read adds nothing.
        let mut sampler = Sampler::new(&HostSnapshot::default());
        let (seen, read) = run(&mut sampler, &obj(8 * MIB, [7]), None, |_| Sample {
            smaps: None,
            numa: None,
        });
        assert_eq!((read, seen), (vec![7], Seen::default()));
    }

    #[test]
    fn with_shmem_thp_on_sampling_goes_on_until_one_maps_it_all_by_pmd() {
        let mut host = HostSnapshot::default();
        host.thp.shmem_enabled = Some(
            hugeshm_parse::thp::parse_selector(
                "shmem_enabled",
                "[always] within_size advise never deny force",
            )
            .unwrap(),
        );
        let o = obj(8 * MIB, 1..=4);
        // Pids 1 and 2 have it all resident on 4 KiB pages; 3 by PMD.
        let of = |pid: u32| sample(false, 8 * MIB, if pid == 3 { 8 * MIB } else { 0 }, None);
        let (seen, read) = run(&mut Sampler::new(&host), &o, None, of);
        assert_eq!(read, [1, 2, 3]);
        assert_eq!(seen.thp, Some(8 * MIB));
        assert_eq!(seen.page, Some((BASE_PAGE, "smaps of pid 1".to_string())));
        // shmem THP never: the first one says it all.
        host.thp.shmem_enabled =
            Some(hugeshm_parse::thp::parse_selector("shmem_enabled", "always [never]").unwrap());
        let (seen, read) = run(&mut Sampler::new(&host), &o, None, of);
        assert_eq!(read, [1]);
        assert_eq!(seen.thp, Some(0));
    }

    #[test]
    fn nodes_are_those_of_the_process_that_saw_most_on_them() {
        let mut sampler = Sampler::new(&HostSnapshot::default());
        let o = obj(64 * MIB, 1..=4);
        let (seen, read) = run(&mut sampler, &o, None, |pid| match pid {
            1 => sample(true, 2 * MIB, 0, Some("default N0=1")),
            2 => sample(true, 6 * MIB, 0, Some("bind:1 N0=1 N1=2")),
            3 => sample(true, 6 * MIB, 0, Some("interleave:0-1 N0=1 N1=1")),
            _ => sample(true, 6 * MIB, 0, None),
        });
        assert_eq!(read, [1, 2, 3, 4]);
        assert_eq!(
            seen.nodes,
            [(0, 2 * MIB), (1, 4 * MIB)].into_iter().collect()
        );
        assert_eq!(seen.policy.as_deref(), Some("bind:1"));
    }

    #[test]
    fn fill_takes_the_sample_else_the_mount_else_says_why_it_is_unknown() {
        let seg = |o: &Obj, sysv: Option<&ShmSegment>, seen: Seen| {
            let mut s = bare(SegmentKind::Sysv, 1, 8 * MIB);
            fill(&mut s, o, sysv, seen);
            s
        };
        let seen = Seen {
            page: Some((2 * MIB, "smaps of pid 9".into())),
            resident: Some(6 * MIB),
            thp: Some(0),
            aligned: None,
            nodes: [(1, 6 * MIB)].into_iter().collect(),
            policy: Some("bind:1".into()),
        };
        let mut mounted = obj(8 * MIB, [9]);
        mounted.page_from_mount = Some((2 * MIB, "mount /dev/hugepages (pagesize)".into()));
        let s = seg(&mounted, None, seen);
        assert_eq!(
            (s.page_size_bytes, s.page_size_source.as_str()),
            (Some(2 * MIB), "smaps of pid 9")
        );
        assert_eq!((s.resident_bytes, s.thp_bytes), (Some(6 * MIB), Some(0)));
        assert_eq!(s.nodes, [("1".to_string(), 6 * MIB)].into_iter().collect());
        assert_eq!(s.numa_policy.as_deref(), Some("bind:1"));
        let s = seg(&mounted, None, Seen::default());
        assert_eq!(s.page_size_source, "mount /dev/hugepages (pagesize)");
        let s = seg(&obj(8 * MIB, [9]), None, Seen::default());
        assert_eq!(s.page_size_bytes, None);
        assert_eq!(
            s.page_size_source,
            "unknown: attached processes could not be read"
        );
        assert_eq!((s.resident_bytes, s.thp_bytes), (None, None));
        let shm = |nattch: u64, rss: u64| {
            hugeshm_parse::sysvipc_shm::parse(&format!(
                "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                 1 1 600 8388608 7 7 {nattch} 0 0 0 0 0 0 0 {rss} 0\n"
            ))
            .unwrap()
            .remove(0)
        };
        let s = seg(&obj(8 * MIB, []), Some(&shm(2, 0)), Seen::default());
        assert_eq!(
            s.page_size_source,
            "unknown: attached processes not visible (other pid namespace?)"
        );
        // The kernel's rss of a segment on 4 KiB pages counts where larger
        // than what a process saw; one larger than the segment is a hugetlb
        // segment's, inflated, and is not residency.
        let s = seg(&obj(8 * MIB, []), Some(&shm(0, 2 * MIB)), Seen::default());
        assert_eq!(s.page_size_source, "unknown: no process attached");
        assert_eq!(s.resident_bytes, Some(2 * MIB));
        let s = seg(
            &obj(8 * MIB, []),
            Some(&shm(0, 4096 * MIB)),
            Seen::default(),
        );
        assert_eq!(
            s.page_size_source,
            "unknown: no process attached (its kernel rss exceeds its size, which only happens for hugetlb segments)"
        );
        assert_eq!(s.resident_bytes, None);
        let on_4k = Seen {
            page: Some((BASE_PAGE, "smaps of pid 9".into())),
            resident: Some(MIB),
            ..Seen::default()
        };
        let s = seg(&obj(8 * MIB, [9]), Some(&shm(1, 3 * MIB)), on_4k);
        assert_eq!(s.resident_bytes, Some(3 * MIB));
        // On huge pages the kernel's rss is not used at all.
        let on_huge = Seen {
            page: Some((2 * MIB, "smaps of pid 9".into())),
            resident: Some(2 * MIB),
            ..Seen::default()
        };
        let s = seg(&obj(8 * MIB, [9]), Some(&shm(1, 4 * MIB)), on_huge);
        assert_eq!(s.resident_bytes, Some(2 * MIB));
    }

    #[test]
    fn a_segment_takes_its_identity_from_sysv_and_its_processes_status() {
        let (probe, host) = fixture("two-nodes-uneven");
        let scan = read_processes(&Judge::of(&probe, &host), MapsRead::Text, &mut Vec::new());
        let sysv = |id: u64| host.shm.iter().find(|s| s.shmid as u64 == id);
        let pg = segment_of(
            &probe,
            &Key::Sysv(3),
            &scan.objs[&Key::Sysv(3)],
            sysv(3),
            &scan.status,
        );
        assert_eq!(pg.label(), "sysv 3");
        assert_eq!(
            (pg.key.as_deref(), pg.path.as_deref()),
            (Some("0x0052e2c1"), None)
        );
        assert_eq!(
            (pg.size_bytes, pg.owner_uid, pg.mode),
            (1 << 30, Some(26), Some(0o600))
        );
        assert_eq!(
            (pg.creator_pid, pg.creator_name.as_deref()),
            (Some(2001), Some("postgres"))
        );
        assert_eq!(
            (pg.attached_pids.clone(), pg.nattch),
            (vec![2001, 2002, 2003], Some(3))
        );
        assert_eq!(pg.attached[1].name.as_deref(), Some("postgres"));
        assert!(pg.attached[1].vm_pte_bytes.is_some());
        assert_eq!((pg.page_size_bytes, pg.resident_bytes), (None, None));
        // The orphan: its creator is gone, nobody maps it.
        let orphan = segment_of(&probe, &Key::Sysv(5), &obj(0, []), sysv(5), &scan.status);
        assert_eq!(
            (orphan.creator_pid, orphan.creator_name),
            (Some(1777), None)
        );
        assert_eq!((orphan.size_bytes, orphan.owner_uid), (64 << 20, Some(0)));
        // A memfd is named without the leading slash; with no owner known,
        // its first process's uid.
        let key = Key::File(0, 1, 77);
        let mut memfd = Obj::new(SegmentKind::Memfd, Some("/memfd:pool".into()));
        let m = hugeshm_parse::maps::parse(
            "7f0000000000-7f0000200000 rw-s 00000000 00:01 77 /memfd:pool (deleted)",
        )
        .unwrap()
        .remove(0);
        memfd.add_mapping(&key, 3001, &m);
        let s = segment_of(&probe, &key, &memfd, None, &scan.status);
        assert_eq!((s.id, s.path.as_deref()), (Some(77), Some("memfd:pool")));
        assert_eq!(
            (s.size_bytes, s.owner_uid, s.creator_pid),
            (2 * MIB, Some(54321), None)
        );
    }

    #[test]
    fn the_dax_pass_reads_page_size_residency_and_node_from_pagemap_and_device() {
        let (probe, host) = fixture("pmem-dax");
        let scan = read_processes(&Judge::of(&probe, &host), MapsRead::Text, &mut Vec::new());
        let dax_host = DaxHost::read(&probe, &host, scan.objs.values());
        assert!(!dax_host.pmem.namespaces.is_empty());
        let (key, o) = scan
            .objs
            .iter()
            .find(|(_, o)| o.path.as_deref() == Some("/mnt/pmem/aligned"))
            .unwrap();
        assert_eq!(o.kind, SegmentKind::Dax);
        let mut seg = segment_of(&probe, key, o, None, &scan.status);
        seg.thp_bytes = Some(0);
        seg.numa_policy = Some("default".into());
        dax_host.pass(&probe, o, &mut seg);
        assert_eq!(seg.page_size_bytes, Some(2 * MIB));
        assert!(
            seg.page_size_source.starts_with("pagemap of pid 5001"),
            "{}",
            seg.page_size_source
        );
        assert_eq!(seg.resident_bytes, Some(4 * MIB));
        assert_eq!(
            seg.nodes,
            [("1".to_string(), 4 * MIB)].into_iter().collect()
        );
        assert_eq!((seg.thp_bytes, seg.numa_policy), (None, None));
        assert_eq!(seg.dax.map(|d| d.mappings.len()), Some(1));
        // No DAX object: sysfs is not read.
        let sysv_only = obj(MIB, [1]);
        let none = DaxHost::read(&probe, &host, [&sysv_only].into_iter());
        assert_eq!(none.pmem, PmemSnapshot::default());
    }
}
