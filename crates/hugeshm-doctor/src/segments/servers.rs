//! Servers known by name: the processes whose executable the kernel names
//! (`/proc/PID/exe`: `mariadbd`, `mysqld`, `java`, `oracle`), and the big
//! private memory they map. A MariaDB buffer pool chunk and a JVM heap are
//! private anonymous mappings, not shared segments: the segments scan does
//! not see them, so the per-server findings read them here, from the
//! server's own `/proc/PID/smaps`. A name another user gives a process (its
//! `comm`, its `argv[0]`) proves nothing; only the exe link counts.

use hugeshm_parse::smaps::SmapsEntry;
use hugeshm_probe::Probe;

/// A process whose executable has one of the names asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerProcess {
    /// Pid.
    pub pid: u32,
    /// The executable's file name, as the kernel's exe link gives it.
    pub exe_name: String,
    /// Its command line, one string per argument (empty where unreadable).
    pub args: Vec<String>,
}

/// Every process under the probe's `/proc` whose executable's file name is
/// one of `names`, by pid.
pub(crate) fn processes_named(probe: &Probe, names: &[&str]) -> Vec<ServerProcess> {
    let Ok(list) = probe.processes() else {
        return Vec::new();
    };
    list.pids
        .into_iter()
        .filter_map(|pid| {
            let exe = std::fs::read_link(probe.proc_path(&format!("{pid}/exe"))).ok()?;
            let exe_name = exe.file_name()?.to_str()?.to_owned();
            if !names.contains(&exe_name.as_str()) {
                return None;
            }
            let args = command_line(probe, pid);
            Some(ServerProcess {
                pid,
                exe_name,
                args,
            })
        })
        .collect()
}

/// `pid`'s command line, one string per argument (empty where unreadable).
pub(super) fn command_line(probe: &Probe, pid: u32) -> Vec<String> {
    std::fs::read(probe.proc_path(&format!("{pid}/cmdline")))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A private, writable mapping of anonymous memory (on base pages, THP, or
/// a private `MAP_HUGETLB` mapping, which maps names `/anon_hugepage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PrivateMapping {
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub size_bytes: u64,
    /// The page size the kernel maps it with (`KernelPageSize`).
    pub page_size_bytes: Option<u64>,
    /// Bytes resident (`Rss`, or the private hugetlb bytes).
    pub resident_bytes: u64,
    /// Bytes on transparent huge pages (`AnonHugePages`).
    pub thp_bytes: u64,
}

impl PrivateMapping {
    /// On hugetlb pages (a page size above the base page).
    pub fn on_huge_pages(&self) -> bool {
        self.page_size_bytes
            .is_some_and(|p| p > hugeshm_parse::size::BASE_PAGE)
    }
}

/// `pid`'s private anonymous read-write mappings of at least `min_bytes`,
/// in address order; none where its smaps cannot be read.
pub(super) fn private_mappings(probe: &Probe, pid: u32, min_bytes: u64) -> Vec<PrivateMapping> {
    let Ok(smaps) = probe.pid(pid).smaps() else {
        return Vec::new();
    };
    smaps
        .iter()
        .filter(|e| is_private_anonymous(e) && e.size_bytes >= min_bytes)
        .map(|e| PrivateMapping {
            start: e.map.start,
            size_bytes: e.size_bytes,
            page_size_bytes: e.kernel_page_size_bytes,
            resident_bytes: e.rss_bytes.max(e.private_hugetlb_bytes.unwrap_or(0)),
            thp_bytes: e.anon_huge_pages_bytes.unwrap_or(0),
        })
        .collect()
}

/// Private, readable and writable, and anonymous: no path, or the
/// `/anon_hugepage` of a private `MAP_HUGETLB` mapping.
fn is_private_anonymous(e: &SmapsEntry) -> bool {
    let p = &e.map.perms;
    !p.shared
        && p.read
        && p.write
        && match e.map.pathname.as_deref() {
            None => true,
            Some(path) => path == "/anon_hugepage",
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_private_anonymous_read_write_mappings_count() {
        let text = "\
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n\
Size:            1048576 kB\nKernelPageSize:        4 kB\nMMUPageSize:           4 kB\nRss:                 512 kB\nAnonHugePages:         0 kB\n\
7f0040000000-7f0080000000 rw-p 00000000 00:10 12345                      /anon_hugepage (deleted)\n\
Size:            1048576 kB\nKernelPageSize:     2048 kB\nMMUPageSize:        2048 kB\nRss:                   0 kB\nPrivate_Hugetlb:  1048576 kB\nAnonHugePages:         0 kB\n\
7f0080000000-7f00c0000000 rw-s 00000000 00:01 7                          /SYSV00000000 (deleted)\n\
Size:            1048576 kB\nKernelPageSize:        4 kB\nMMUPageSize:           4 kB\nRss:                   0 kB\n\
7f00c0000000-7f0100000000 ---p 00000000 00:00 0 \n\
Size:            1048576 kB\nKernelPageSize:        4 kB\nMMUPageSize:           4 kB\nRss:                   0 kB\n";
        let smaps = hugeshm_parse::smaps::parse(text).unwrap();
        let kept: Vec<&SmapsEntry> = smaps.iter().filter(|e| is_private_anonymous(e)).collect();
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].kernel_page_size_bytes, Some(4096));
        assert_eq!(kept[1].private_hugetlb_bytes, Some(1 << 30));
    }
}
