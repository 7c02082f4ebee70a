//! `/proc/PID/smaps` as the PostgreSQL tests read it: the main shared
//! memory area of a server.

use std::collections::BTreeMap;

use super::{ANON_HUGEPAGE, DEV_ZERO};

/// One mapping of `/proc/PID/smaps`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SmapsVma {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// Permissions, e.g. `rw-s` (`s` = shared).
    pub perms: String,
    /// Path or name (`/anon_hugepage (deleted)`, `[heap]`, empty).
    pub path: String,
    /// Numeric fields (`Size`, `KernelPageSize`, `Rss`, `Shared_Hugetlb`,
    /// ...) in kB as printed.
    pub fields: BTreeMap<String, u64>,
}

impl SmapsVma {
    /// `KernelPageSize` in kB.
    pub fn kernel_page_kb(&self) -> Option<u64> {
        self.fields.get("KernelPageSize").copied()
    }

    /// `Size` in kB.
    pub fn size_kb(&self) -> Option<u64> {
        self.fields.get("Size").copied()
    }

    /// True for a `MAP_SHARED` mapping.
    pub fn is_shared(&self) -> bool {
        self.perms.as_bytes().get(3) == Some(&b's')
    }
}

/// Parses smaps text with `hugeshm_parse::smaps` (an unreadable file gives
/// no mappings).
pub fn parse_smaps(text: &str) -> Vec<SmapsVma> {
    let Ok(entries) = hugeshm_parse::smaps::parse(text) else {
        return Vec::new();
    };
    entries
        .into_iter()
        .map(|e| {
            let p = e.map.perms;
            let perms: String = [
                if p.read { 'r' } else { '-' },
                if p.write { 'w' } else { '-' },
                if p.exec { 'x' } else { '-' },
                if p.shared { 's' } else { 'p' },
            ]
            .iter()
            .collect();
            let mut path = e.map.pathname.clone().unwrap_or_default();
            if e.map.deleted {
                path.push_str(" (deleted)");
            }
            let mut fields = BTreeMap::new();
            for (k, v) in [
                ("Size", Some(e.size_bytes)),
                ("KernelPageSize", e.kernel_page_size_bytes),
                ("MMUPageSize", e.mmu_page_size_bytes),
                ("Rss", Some(e.rss_bytes)),
                ("Shared_Hugetlb", e.shared_hugetlb_bytes),
                ("Private_Hugetlb", e.private_hugetlb_bytes),
            ] {
                if let Some(v) = v {
                    fields.insert(k.to_owned(), v / 1024);
                }
            }
            SmapsVma {
                start: e.map.start,
                end: e.map.end,
                perms,
                path,
                fields,
            }
        })
        .collect()
}

/// Reads and parses `/proc/PID/smaps`.
pub fn read_smaps(pid: u32) -> Result<Vec<SmapsVma>, String> {
    let path = format!("/proc/{pid}/smaps");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    Ok(parse_smaps(&text))
}

/// The main shared memory area of a PostgreSQL process: the largest shared
/// mapping named [`ANON_HUGEPAGE`] or [`DEV_ZERO`]; `Ok(None)` if there is
/// none.
pub fn main_shm_vma(pid: u32) -> Result<Option<SmapsVma>, String> {
    Ok(read_smaps(pid)?
        .into_iter()
        .filter(|v| v.is_shared() && (v.path == ANON_HUGEPAGE || v.path == DEV_ZERO))
        .max_by_key(|v| v.end - v.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
7fe2cf200000-7fe2d7e00000 rw-s 00000000 00:11 63203                      /anon_hugepage (deleted)
Size:             143360 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Shared_Hugetlb:    10240 kB
Private_Hugetlb:    2048 kB
VmFlags: rd wr sh mr mw me ms de ht sd
7fe2db9e3000-7fe2db9e6000 rw-s 00000000 00:1b 64                         /dev/shm/PostgreSQL.1049989292
Size:                 12 kB
KernelPageSize:        4 kB
Rss:                  12 kB
7fe2db9e6000-7fe2db9e7000 rw-s 00000000 00:01 98310                      /SYSV0098e072 (deleted)
Size:                  4 kB
Rss:                   4 kB
7fe2db9e7000-7fe2db9e8000 rw-p 00000000 00:00 0 
Size:                  4 kB
Rss:                   4 kB
";

    #[test]
    fn parses_smaps_text() {
        let v = parse_smaps(SMAPS);
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].start, 0x7fe2cf200000);
        assert_eq!(v[0].end, 0x7fe2d7e00000);
        assert_eq!(v[0].path, ANON_HUGEPAGE);
        assert!(v[0].is_shared());
        assert_eq!(v[0].kernel_page_kb(), Some(2048));
        assert_eq!(v[0].size_kb(), Some(143360));
        assert_eq!(v[0].fields.get("Shared_Hugetlb"), Some(&10240));
        assert!(!v[0].fields.contains_key("VmFlags"));
        assert_eq!(v[1].path, "/dev/shm/PostgreSQL.1049989292");
        assert_eq!(v[2].path, "/SYSV0098e072 (deleted)");
        assert_eq!(v[3].path, "");
        assert!(!v[3].is_shared());
    }
}
