//! The live reader on small trees built in a temporary directory.

use hugeshm_probe::{Probe, Roots};
use std::fs;
use std::path::{Path, PathBuf};

struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Tree {
        let dir = std::env::temp_dir().join(format!("hugeshm-probe-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Tree(dir)
    }
    fn file(&self, rel: &str, text: &str) -> &Self {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }
    fn dir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.0.join(rel)).unwrap();
        self
    }
    fn probe(&self) -> Probe {
        Probe::new(Roots::fixture(Path::new(&self.0)))
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const MEMINFO: &str = "MemTotal: 1000000 kB\nHugePages_Total: 4\nHugePages_Free: 3\nHugePages_Rsvd: 1\nHugePages_Surp: 0\nHugepagesize: 2048 kB\nHugetlb: 8192 kB\n";

fn pool(t: &Tree, base: &str, nr: u64, free: u64) {
    t.file(&format!("{base}/nr_hugepages"), &format!("{nr}\n"))
        .file(&format!("{base}/free_hugepages"), &format!("{free}\n"))
        .file(&format!("{base}/surplus_hugepages"), "0\n");
}

#[test]
fn reads_pools_nodes_and_mounts() {
    let t = Tree::new("pools");
    t.file("proc/meminfo", MEMINFO).file(
        "proc/mounts",
        "tmpfs /dev/shm tmpfs rw,size=100k 0 0\ntmpfs /dev/shm tmpfs rw,size=200k 0 0\nnone /mnt/h hugetlbfs rw,pagesize=1G 0 0\n",
    );
    let g = "sys/kernel/mm/hugepages/hugepages-2048kB";
    pool(&t, g, 4, 3);
    t.file(&format!("{g}/resv_hugepages"), "1\n")
        .file(&format!("{g}/nr_overcommit_hugepages"), "0\n");
    let g1 = "sys/kernel/mm/hugepages/hugepages-1048576kB";
    pool(&t, g1, 0, 0);
    t.file(&format!("{g1}/resv_hugepages"), "0\n");
    for n in 0..2 {
        t.file(
            &format!("sys/devices/system/node/node{n}/cpulist"),
            &format!("{n}\n"),
        )
        .file(
            &format!("sys/devices/system/node/node{n}/distance"),
            "10 20\n",
        );
        pool(
            &t,
            &format!("sys/devices/system/node/node{n}/hugepages/hugepages-2048kB"),
            2,
            1 + n as u64,
        );
    }
    let h = t.probe().host();
    assert!(h.problems.is_empty(), "{:?}", h.problems);
    assert_eq!(h.pools.len(), 2);
    assert_eq!(h.pools[0].page_size_bytes, 2 << 20);
    assert_eq!(h.pools[0].available(), 2);
    assert_eq!(h.pools[1].page_size_bytes, 1 << 30);
    assert_eq!(h.pools[1].nr_overcommit, None);
    assert_eq!(h.nodes.len(), 2);
    assert_eq!(h.node_pools.len(), 2);
    assert_eq!(h.node_pools[1].counters.free, 2);
    // /dev/shm was mounted over: only the top mount counts.
    let shm: Vec<_> = h.mounts.iter().filter(|m| m.target == "/dev/shm").collect();
    assert_eq!(shm.len(), 1);
    assert_eq!(shm[0].size_bytes(), Some(200 * 1024));
    assert_eq!(h.default_page_size(), Some(2 << 20));
}

#[test]
fn absent_files_are_not_problems_but_broken_ones_are() {
    let t = Tree::new("broken");
    t.file("proc/meminfo", "MemTotal: 1000 kB\nHugePages_Total: many\n")
        .file("proc/mounts", "");
    // Root can read any mode: a directory where a file should be is unreadable for everyone.
    t.dir("sys/kernel/mm/transparent_hugepage/enabled");
    let h = t.probe().host();
    let paths: Vec<&str> = h.problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.iter().any(|p| p.ends_with("proc/meminfo")),
        "{paths:?}"
    );
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("transparent_hugepage/enabled")),
        "{paths:?}"
    );
    let meminfo = h
        .problems
        .iter()
        .find(|p| p.path.ends_with("proc/meminfo"))
        .unwrap();
    assert!(meminfo.reason.contains(":2:"), "{}", meminfo.reason);
    // No THP defrag file, no sysvipc, no cmdline: absent, so not problems.
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("defrag") || p.contains("sysvipc") || p.contains("cmdline")),
        "{paths:?}"
    );
    assert!(!h.hugetlb_supported());
}

#[test]
fn processes_and_mount_files() {
    let t = Tree::new("procs");
    t.file(
        "proc/42/status",
        "Name:\tpostgres\nUid:\t26\t26\t26\t26\nVmPTE:\t  100 kB\n",
    )
    .file(
        "proc/42/maps",
        "7f0000000000-7f0000200000 rw-s 00000000 00:01 7  /SYSV00000001 (deleted)\n",
    )
    .file("proc/self/status", "Name:\tx\n")
    .file("fs/dev/hugepages/pool", "abc")
    .dir("proc/notapid");
    let p = t.probe();
    assert_eq!(p.processes().unwrap().pids, vec![42]);
    let st = p.pid(42).status().unwrap();
    assert_eq!(st.name, "postgres");
    assert_eq!(st.vm_pte_bytes, Some(100 * 1024));
    assert_eq!(p.pid(42).maps().unwrap()[0].inode, 7);
    assert!(p.pid(43).maps().unwrap_err().is_not_found());
    let files = p
        .mount_files("/dev/hugepages", &mut |_| true, &mut |_| true)
        .unwrap();
    assert_eq!((files.entries, files.cut_short), (1, false));
    let files = files.files;
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, "/dev/hugepages/pool");
    assert_eq!(files[0].size_bytes, 3);
    // What the caller does not want is not kept, before or after its stat.
    let mut seen = Vec::new();
    let none = p
        .mount_files(
            "/dev/hugepages",
            &mut |f| {
                seen.push(f.name.to_owned());
                true
            },
            &mut |f| f.size_bytes > 3,
        )
        .unwrap()
        .files;
    assert_eq!(
        (none.len(), seen),
        (0, vec![std::ffi::OsString::from("pool")])
    );
    let none = p
        .mount_files("/dev/hugepages", &mut |_| false, &mut |_| true)
        .unwrap()
        .files;
    assert!(none.is_empty());
    assert!(p
        .mount_files("/nowhere", &mut |_| true, &mut |_| true)
        .unwrap_err()
        .is_not_found());
}

// ------------------------------------------------------------ hugetlb cgroups

const M2: u64 = 2 << 20;
const G1: u64 = 1 << 30;

#[test]
fn a_listing_stops_after_the_entries_it_passes_over() {
    use hugeshm_probe::MAX_PASSED_OVER;
    let t = Tree::new("passed-over");
    t.dir("fs/dev/shm");
    // Two files worth keeping, then more empty ones than the bound.
    t.file("fs/dev/shm/a-kept", "x")
        .file("fs/dev/shm/b-kept", "y");
    for i in 0..MAX_PASSED_OVER + 10 {
        fs::write(t.0.join(format!("fs/dev/shm/empty.{i}")), b"").unwrap();
    }
    let p = t.probe();
    let l = p
        .mount_files("/dev/shm", &mut |_| true, &mut |f| f.size_bytes > 0)
        .unwrap();
    assert!(l.cut_short);
    assert_eq!(l.passed_over, MAX_PASSED_OVER);
    assert!(l.entries <= MAX_PASSED_OVER + 2, "{}", l.entries);
    assert!(l.usage.is_some(), "statvfs of the mount where cut short");
    // Kept files do not count: with every file kept, nothing is cut.
    let all = p
        .mount_files("/dev/shm", &mut |_| true, &mut |_| true)
        .unwrap();
    assert!(!all.cut_short && all.usage.is_none());
    assert_eq!(
        (all.files.len() as u64, all.passed_over),
        (MAX_PASSED_OVER + 12, 0)
    );
}

/// The 2 MiB and 1 GiB pools of the kernel (only their directories matter
/// to the cgroup reader).
fn kernel_sizes(t: &Tree) {
    t.dir("sys/kernel/mm/hugepages/hugepages-2048kB")
        .dir("sys/kernel/mm/hugepages/hugepages-1048576kB");
}

/// One v2 cgroup's files for one size.
fn v2_files(t: &Tree, dir: &str, size: &str, max: &str, current: u64, rsvd_max: &str, events: u64) {
    t.file(&format!("{dir}/hugetlb.{size}.max"), &format!("{max}\n"))
        .file(
            &format!("{dir}/hugetlb.{size}.current"),
            &format!("{current}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.{size}.rsvd.max"),
            &format!("{rsvd_max}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.{size}.rsvd.current"),
            &format!("{current}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.{size}.events"),
            &format!("max {events}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.{size}.events.local"),
            &format!("max {events}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.{size}.numa_stat"),
            &format!("total={current} N0={current}\n"),
        );
}

const V2_MOUNTINFO: &str = "22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

#[test]
fn hugetlb_cgroup_v2_with_the_limit_on_an_ancestor() {
    let t = Tree::new("cg2");
    kernel_sizes(&t);
    let cg = "fs/sys/fs/cgroup";
    t.file("proc/self/mountinfo", V2_MOUNTINFO)
        .file("proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
        .file("proc/77/cgroup", "0::/kubepods/pod2\n")
        .file(
            &format!("{cg}/cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids\n",
        );
    // The pod allows 8 pages, 6 used by its containers; the container
    // itself is unlimited, used 2 and had 3 faults refused.
    v2_files(
        &t,
        &format!("{cg}/kubepods/pod1"),
        "2MB",
        &(8 * M2).to_string(),
        6 * M2,
        "max",
        3,
    );
    v2_files(
        &t,
        &format!("{cg}/kubepods/pod1/ctr"),
        "2MB",
        "max",
        2 * M2,
        "max",
        3,
    );
    v2_files(
        &t,
        &format!("{cg}/kubepods/pod1"),
        "1GB",
        "max",
        0,
        "max",
        0,
    );
    v2_files(
        &t,
        &format!("{cg}/kubepods/pod1/ctr"),
        "1GB",
        "max",
        0,
        "max",
        0,
    );
    v2_files(
        &t,
        &format!("{cg}/kubepods"),
        "2MB",
        "max",
        6 * M2,
        "max",
        3,
    );
    v2_files(&t, &format!("{cg}/kubepods"), "1GB", "max", 0, "max", 0);
    v2_files(&t, &format!("{cg}/kubepods/pod2"), "2MB", "0", 0, "0", 0);
    let p = t.probe();
    let c = p.hugetlb_cgroup(None).unwrap().expect("a hugetlb cgroup");
    assert_eq!(c.version, 2);
    assert_eq!(c.mount_point, "/sys/fs/cgroup");
    assert_eq!(c.path, "/kubepods/pod1/ctr");
    assert_eq!(c.dir, "/sys/fs/cgroup/kubepods/pod1/ctr");
    assert_eq!(
        c.sizes
            .iter()
            .map(|s| s.page_size_bytes)
            .collect::<Vec<_>>(),
        [M2, G1]
    );
    let s = c.size(M2).unwrap();
    assert_eq!(s.limit_bytes, None);
    assert_eq!(s.usage_bytes, 2 * M2);
    assert_eq!(s.rsvd_limit_bytes, None);
    assert_eq!(s.rsvd_usage_bytes, Some(2 * M2));
    assert_eq!(s.max_events, Some(3));
    assert_eq!(s.effective_limit_bytes, Some(8 * M2));
    assert_eq!(s.effective_rsvd_limit_bytes, None);
    assert_eq!(s.room_pages(), Some(2));
    assert_eq!(s.new_mapping_pages(), Some(2));
    assert_eq!(
        s.binding_file.as_deref(),
        Some("/sys/fs/cgroup/kubepods/pod1/hugetlb.2MB.max")
    );
    // The root has no hugetlb files in v2: three levels.
    let paths: Vec<&str> = s.levels.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["/kubepods/pod1/ctr", "/kubepods/pod1", "/kubepods"]);
    let g = c.size(G1).unwrap();
    assert_eq!(
        (
            g.effective_limit_bytes,
            g.room_pages(),
            g.binding_file.clone()
        ),
        (None, None, None)
    );
    assert_eq!(c.limit_file_name(G1, true), "hugetlb.1GB.rsvd.max");
    // Another process, whose cgroup allows nothing.
    let o = p.hugetlb_cgroup(Some(77)).unwrap().unwrap();
    assert_eq!(o.path, "/kubepods/pod2");
    let s = o.size(M2).unwrap();
    assert_eq!(
        (s.limit_bytes, s.room_pages(), s.rsvd_room_bytes),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(
        o.path_of(&p.cgroups(Some(77)).unwrap()),
        Some("/kubepods/pod2")
    );
    // A process that is gone.
    assert!(p.hugetlb_cgroup(Some(78)).unwrap_err().is_not_found());
}

#[test]
fn hugetlb_cgroup_v1_on_an_old_kernel_and_in_a_container() {
    let t = Tree::new("cg1");
    t.dir("sys/kernel/mm/hugepages/hugepages-2048kB");
    // Hybrid: the unified hierarchy has no controllers; hugetlb is v1.
    t.file(
        "proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
40 31 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate
41 31 0:38 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
42 31 0:39 / /sys/fs/cgroup/hugetlb rw shared:20 - cgroup cgroup rw,hugetlb
",
    )
    .file("proc/self/cgroup", "7:hugetlb:/db\n4:memory:/db\n0::/db\n")
    .file("fs/sys/fs/cgroup/unified/cgroup.controllers", "\n");
    let h = "fs/sys/fs/cgroup/hugetlb";
    // A 5.4 kernel: no rsvd.* files. The root is unlimited (v1 prints a
    // number near 2^63).
    for (dir, limit, usage, failcnt) in [
        (h.to_string(), "9223372036852678656", 10 * M2, 0),
        (format!("{h}/db"), "16777216", 8 * M2, 5),
    ] {
        t.file(
            &format!("{dir}/hugetlb.2MB.limit_in_bytes"),
            &format!("{limit}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.2MB.usage_in_bytes"),
            &format!("{usage}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.2MB.max_usage_in_bytes"),
            &format!("{usage}\n"),
        )
        .file(
            &format!("{dir}/hugetlb.2MB.failcnt"),
            &format!("{failcnt}\n"),
        );
    }
    let p = t.probe();
    let c = p.hugetlb_cgroup(None).unwrap().unwrap();
    assert_eq!(
        (c.version, c.mount_point.as_str(), c.path.as_str()),
        (1, "/sys/fs/cgroup/hugetlb", "/db")
    );
    let s = c.size(M2).unwrap();
    assert_eq!(s.limit_bytes, Some(8 * M2));
    assert_eq!(s.usage_bytes, 8 * M2);
    assert_eq!(s.max_events, Some(5));
    assert_eq!(
        (s.rsvd_limit_bytes, s.rsvd_usage_bytes, s.rsvd_room_bytes),
        (None, None, None)
    );
    assert_eq!(s.room_pages(), Some(0));
    assert_eq!(
        s.binding_file.as_deref(),
        Some("/sys/fs/cgroup/hugetlb/db/hugetlb.2MB.limit_in_bytes")
    );
    assert_eq!(s.levels.len(), 2);
    assert_eq!(s.levels[1].path, "/");
    assert_eq!(s.levels[1].limit_bytes, None);

    // Inside a container without a cgroup namespace: the mount's root is
    // the container's cgroup, which /proc/self/cgroup names in full.
    let t = Tree::new("cg-ctr");
    t.file(
        "proc/self/mountinfo",
        "900 800 0:38 /kubepods/pod1/ctr /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n",
    )
    .file("proc/self/cgroup", "0::/kubepods/pod1/ctr\n")
    .file("proc/5/cgroup", "0::/kubepods/pod9\n")
    .file("fs/sys/fs/cgroup/cgroup.controllers", "memory hugetlb\n");
    v2_files(&t, "fs/sys/fs/cgroup", "2MB", "4194304", M2, "4194304", 0);
    let p = t.probe();
    let c = p.hugetlb_cgroup(None).unwrap().unwrap();
    assert_eq!(
        (c.path.as_str(), c.dir.as_str()),
        ("/kubepods/pod1/ctr", "/sys/fs/cgroup")
    );
    let s = c.size(M2).unwrap();
    assert_eq!(s.levels.len(), 1);
    assert_eq!(s.levels[0].path, "/kubepods/pod1/ctr");
    assert_eq!((s.room_pages(), s.new_mapping_pages()), (Some(1), Some(1)));
    assert_eq!(
        s.binding_file.as_deref(),
        Some("/sys/fs/cgroup/hugetlb.2MB.max")
    );
    // A process in a cgroup this mount does not show.
    let e = p.hugetlb_cgroup(Some(5)).unwrap_err();
    assert!(
        e.to_string().contains("outside the hugetlb hierarchy"),
        "{e}"
    );
}

#[test]
fn hugetlb_cgroup_absent_or_broken() {
    // No hugetlb anywhere: None.
    let t = Tree::new("cg-none");
    t.file(
        "proc/self/mountinfo",
        "40 31 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n41 31 0:38 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
    )
    .file("proc/self/cgroup", "0::/\n")
    .file("fs/sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n");
    assert_eq!(t.probe().hugetlb_cgroup(None).unwrap(), None);
    // No mountinfo at all (an old fixture tree): not found.
    let t = Tree::new("cg-nomi");
    t.dir("proc");
    assert!(t.probe().hugetlb_cgroup(None).unwrap_err().is_not_found());
    // A malformed limit names its file; malformed optional files are skipped.
    let t = Tree::new("cg-bad");
    kernel_sizes(&t);
    t.file("proc/self/mountinfo", V2_MOUNTINFO)
        .file("proc/self/cgroup", "0::/a\n")
        .file("fs/sys/fs/cgroup/cgroup.controllers", "hugetlb\n");
    v2_files(&t, "fs/sys/fs/cgroup/a", "2MB", "lots", 0, "max", 0);
    let e = t.probe().hugetlb_cgroup(None).unwrap_err();
    assert!(e.to_string().contains("hugetlb.2MB.max:1:"), "{e}");
    v2_files(&t, "fs/sys/fs/cgroup/a", "2MB", "max", 0, "oops", 0);
    t.file("fs/sys/fs/cgroup/a/hugetlb.2MB.events", "garbage\n");
    let c = t.probe().hugetlb_cgroup(None).unwrap().unwrap();
    let s = c.size(M2).unwrap();
    assert_eq!((s.rsvd_limit_bytes, s.max_events), (None, None));
    // The cgroup's directory is gone (the process moved): not found.
    t.file("proc/self/cgroup", "0::/gone\n");
    assert!(t.probe().hugetlb_cgroup(None).unwrap_err().is_not_found());
}
