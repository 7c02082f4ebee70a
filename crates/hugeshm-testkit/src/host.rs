//! Snapshots of host shared-memory state, for leak checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::pool::HUGEPAGES_SYSFS;
use hugeshm_parse::hugepages::parse_counter;
use hugeshm_parse::size::hugepages_dir_size;
use hugeshm_parse::{mounts, sysvipc_shm};

/// One line of `/proc/sysvipc/shm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysvSegment {
    /// The segment's key (0 for `IPC_PRIVATE` or after `IPC_RMID`).
    pub key: i32,
    /// Size in bytes.
    pub size: u64,
    /// Current attachments.
    pub nattch: u64,
    /// Creator pid.
    pub cpid: i32,
    /// Owner uid.
    pub uid: u32,
    /// Its creator was alive when the snapshot was taken and is not this
    /// process or one of its descendants: another program's segment (a
    /// bench or test run beside this one), left out of [`HostState::diff`].
    pub foreign: bool,
}

/// Counters of one huge page size (from its sysfs directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolCounts {
    /// `nr_hugepages` (persistent pool size).
    pub total: u64,
    /// `free_hugepages`.
    pub free: u64,
    /// `resv_hugepages` (reserved, not yet faulted).
    pub resv: u64,
    /// `surplus_hugepages` (overcommitted pages in use).
    pub surplus: u64,
}

/// A snapshot of shared-memory state on the host.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostState {
    /// System V segments by shmid, from `/proc/sysvipc/shm`.
    pub sysv: BTreeMap<i32, SysvSegment>,
    /// Huge page counters by page size in kB.
    pub pools: BTreeMap<u64, PoolCounts>,
    /// Mount points of hugetlbfs, from `/proc/mounts`.
    pub hugetlbfs_mounts: BTreeSet<PathBuf>,
    /// Every file and directory below those mounts.
    pub hugetlbfs_files: BTreeSet<PathBuf>,
    /// Every file and directory below `/dev/shm`.
    pub devshm_files: BTreeSet<PathBuf>,
}

impl HostState {
    /// Reads the live host state.
    pub fn capture() -> Result<HostState, String> {
        let mut state = HostState::default();
        let shm = std::fs::read_to_string("/proc/sysvipc/shm")
            .map_err(|e| format!("read /proc/sysvipc/shm: {e}"))?;
        state.sysv = parse_sysvipc_shm(&shm)?;
        for seg in state.sysv.values_mut() {
            seg.foreign = u32::try_from(seg.cpid).is_ok_and(is_foreign);
        }
        let root = Path::new(HUGEPAGES_SYSFS);
        if let Ok(rd) = std::fs::read_dir(root) {
            for entry in rd.filter_map(|e| e.ok()) {
                let Some(kb) = hugepages_dir_size(&entry.file_name().to_string_lossy())
                    .map(|bytes| bytes / 1024)
                else {
                    continue;
                };
                let dir = entry.path();
                let rd = |f: &str| -> Result<u64, String> {
                    let p = dir.join(f);
                    let t = std::fs::read_to_string(&p)
                        .map_err(|e| format!("read {}: {e}", p.display()))?;
                    parse_counter(&p.display().to_string(), &t).map_err(|e| e.to_string())
                };
                state.pools.insert(
                    kb,
                    PoolCounts {
                        total: rd("nr_hugepages")?,
                        free: rd("free_hugepages")?,
                        resv: rd("resv_hugepages")?,
                        surplus: rd("surplus_hugepages")?,
                    },
                );
            }
        }
        let mounts = std::fs::read_to_string("/proc/mounts")
            .map_err(|e| format!("read /proc/mounts: {e}"))?;
        state.hugetlbfs_mounts = parse_hugetlbfs_mounts(&mounts);
        for m in &state.hugetlbfs_mounts {
            walk(m, 0, &mut state.hugetlbfs_files);
        }
        walk(Path::new("/dev/shm"), 0, &mut state.devshm_files);
        Ok(state)
    }

    /// What changed from `self` to `later`, one line per change: new or
    /// vanished System V segments, changed huge page counters, new or
    /// vanished files in hugetlbfs mounts and `/dev/shm`. Empty means no
    /// leak. (Attachment counts of segments that exist in both are ignored,
    /// and so are segments of live processes outside this process's tree:
    /// see [`SysvSegment::foreign`].)
    pub fn diff(&self, later: &HostState) -> Vec<String> {
        let mut out = Vec::new();
        for (id, seg) in &later.sysv {
            match self.sysv.get(id) {
                None if seg.foreign => {}
                None => out.push(format!(
                    "new SysV segment shmid={id} key={:#010x} size={} nattch={} cpid={} uid={}",
                    seg.key as u32, seg.size, seg.nattch, seg.cpid, seg.uid
                )),
                Some(old) if old.key != seg.key || old.size != seg.size => out.push(format!(
                    "SysV segment shmid={id} changed: key {:#010x} -> {:#010x}, size {} -> {}",
                    old.key as u32, seg.key as u32, old.size, seg.size
                )),
                Some(_) => {}
            }
        }
        for (id, seg) in &self.sysv {
            if !seg.foreign && !later.sysv.contains_key(id) {
                out.push(format!(
                    "SysV segment shmid={id} key={:#010x} size={} disappeared",
                    seg.key as u32, seg.size
                ));
            }
        }
        let kbs: BTreeSet<u64> = self
            .pools
            .keys()
            .chain(later.pools.keys())
            .copied()
            .collect();
        for kb in kbs {
            let a = self.pools.get(&kb).copied().unwrap_or_default();
            let b = later.pools.get(&kb).copied().unwrap_or_default();
            if a != b {
                let mut parts = Vec::new();
                for (name, x, y) in [
                    ("total", a.total, b.total),
                    ("free", a.free, b.free),
                    ("resv", a.resv, b.resv),
                    ("surplus", a.surplus, b.surplus),
                ] {
                    if x != y {
                        parts.push(format!("{name} {x} -> {y}"));
                    }
                }
                out.push(format!("hugepages-{kb}kB: {}", parts.join(", ")));
            }
        }
        for (what, a, b) in [
            ("hugetlbfs", &self.hugetlbfs_files, &later.hugetlbfs_files),
            ("/dev/shm", &self.devshm_files, &later.devshm_files),
        ] {
            for p in b.difference(a) {
                out.push(format!("new {what} file {}", p.display()));
            }
            for p in a.difference(b) {
                out.push(format!("{what} file {} disappeared", p.display()));
            }
        }
        out
    }
}

/// The segments of `/proc/sysvipc/shm` text, by shmid (hugeshm-parse reads it).
fn parse_sysvipc_shm(text: &str) -> Result<BTreeMap<i32, SysvSegment>, String> {
    let segs = sysvipc_shm::parse(text).map_err(|e| e.to_string())?;
    Ok(segs
        .into_iter()
        .map(|s| {
            let seg = SysvSegment {
                key: s.key,
                size: s.size_bytes,
                nattch: s.nattch,
                cpid: s.cpid as i32,
                uid: s.uid,
                foreign: false,
            };
            (s.shmid, seg)
        })
        .collect())
}

/// Whether `pid` is alive and neither this process nor a descendant of it
/// (its parent chain in `/proc/PID/stat` does not reach this process). A
/// dead creator is not foreign: its segment may be this test's leak.
fn is_foreign(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..64 {
        if p == me {
            return false;
        }
        if p <= 1 {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            // Dead (or exited while walking): not provably foreign.
            return p != pid;
        };
        // The parent pid is the second field after the ")" that ends comm.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|f| f.parse::<u32>().ok())
        else {
            return false;
        };
        p = ppid;
    }
    false
}

/// Mount points of hugetlbfs in `/proc/mounts` text (unreadable lines skipped).
fn parse_hugetlbfs_mounts(text: &str) -> BTreeSet<PathBuf> {
    text.lines()
        .filter_map(|l| mounts::parse(l).ok()?.pop())
        .filter(|m| m.is_hugetlbfs())
        .map(|m| PathBuf::from(m.target))
        .collect()
}

/// Collects every entry below `dir` (not following symlinks), depth-limited.
fn walk(dir: &Path, depth: usize, out: &mut BTreeSet<PathBuf>) {
    if depth > 8 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in rd.filter_map(|e| e.ok()) {
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        out.insert(path.clone());
        if is_dir {
            walk(&path, depth + 1, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHM: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n\
                 0          5   600               2097152  1234  1234      1     0     0     0     0 1700000000          0 1700000000                     0                     0\n\
        1234567890         32768  1600                  4096  4321     0      0  1000  1000  1000  1000          0          0 1700000001                  4096                     0\n";

    #[test]
    fn parses_sysvipc() {
        let m = parse_sysvipc_shm(SHM).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[&5],
            SysvSegment {
                key: 0,
                size: 2097152,
                nattch: 1,
                cpid: 1234,
                foreign: false,
                uid: 0
            }
        );
        assert_eq!(m[&32768].key, 1234567890);
        assert_eq!(m[&32768].uid, 1000);
        assert!(parse_sysvipc_shm("").is_err());
    }

    #[test]
    fn parses_mounts() {
        let text = "hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0\n\
                    none /mnt/huge\\0401G hugetlbfs rw,pagesize=1024M 0 0\n\
                    tmpfs /dev/shm tmpfs rw 0 0\n";
        let m = parse_hugetlbfs_mounts(text);
        assert_eq!(
            m.into_iter().collect::<Vec<_>>(),
            vec![
                PathBuf::from("/dev/hugepages"),
                PathBuf::from("/mnt/huge 1G")
            ]
        );
        assert_eq!(mounts::unescape("a\\134b\\0"), "a\\b\\0");
    }

    #[test]
    fn diff_reports_changes() {
        let mut a = HostState::default();
        a.pools.insert(
            2048,
            PoolCounts {
                total: 8,
                free: 8,
                resv: 0,
                surplus: 0,
            },
        );
        a.devshm_files.insert("/dev/shm/old".into());
        let mut b = a.clone();
        assert!(a.diff(&b).is_empty());
        b.sysv.insert(
            7,
            SysvSegment {
                key: 0x1234,
                size: 4096,
                nattch: 0,
                cpid: 9,
                uid: 0,
                foreign: false,
            },
        );
        b.pools.get_mut(&2048).unwrap().free = 7;
        b.devshm_files.clear();
        b.hugetlbfs_files.insert("/dev/hugepages/x".into());
        let d = a.diff(&b);
        assert_eq!(
            d,
            vec![
                "new SysV segment shmid=7 key=0x00001234 size=4096 nattch=0 cpid=9 uid=0"
                    .to_string(),
                "hugepages-2048kB: free 8 -> 7".to_string(),
                "new hugetlbfs file /dev/hugepages/x".to_string(),
                "/dev/shm file /dev/shm/old disappeared".to_string(),
            ]
        );
        let back = b.diff(&a);
        assert!(back[0].starts_with("SysV segment shmid=7"), "{back:?}");
    }

    #[test]
    fn segments_of_other_live_processes_are_foreign() {
        assert!(!is_foreign(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(!is_foreign(child.id()), "a child is ours");
        let _ = child.kill();
        let _ = child.wait();
        // pid 1 is alive and an ancestor, not a descendant.
        assert!(is_foreign(1));
        // Another process's segment appearing or vanishing is not a leak.
        let a = HostState::default();
        let mut b = a.clone();
        b.sysv.insert(
            3,
            SysvSegment {
                key: 0,
                size: 4096,
                nattch: 1,
                cpid: 1,
                uid: 0,
                foreign: true,
            },
        );
        assert!(a.diff(&b).is_empty());
        assert!(b.diff(&a).is_empty());
    }

    /// Two captures with nothing changed between them (under the pool
    /// lock) compare equal, and read what the kernel says.
    #[test]
    fn capture_reads_live_host() {
        let _lock = crate::PoolLock::acquire().unwrap();
        let a = HostState::capture().unwrap();
        let b = HostState::capture().unwrap();
        assert_eq!(a.diff(&b), Vec::<String>::new());
        let sizes = std::fs::read_dir(HUGEPAGES_SYSFS).map_or(0, |rd| rd.count());
        assert_eq!(a.pools.len(), sizes, "{:?}", a.pools);
        assert!(a.devshm_files.iter().all(|p| p.starts_with("/dev/shm")));
    }
}
