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
    let files = p.mount_files("/dev/hugepages").unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, "/dev/hugepages/pool");
    assert_eq!(files[0].size_bytes, 3);
    assert!(p.mount_files("/nowhere").unwrap_err().is_not_found());
}
