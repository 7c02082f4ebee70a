//! `/proc/PID/smaps`.
//!
//! Each mapping is a header line in [maps] format followed by
//! `Key:   N kB` lines, `THPeligible:    0`, `ProtectionKey:  0` (on CPUs with
//! protection keys) and a last `VmFlags: rd wr sh mr mw me ms de ht` line.
//!
//! hugetlb mappings report `Rss: 0 kB` and their memory in `Shared_Hugetlb` /
//! `Private_Hugetlb` instead; the split follows the page's map count, not
//! `MAP_SHARED`: a `MAP_SHARED` hugetlb page mapped by one process only is
//! counted in `Private_Hugetlb`, a `MAP_PRIVATE` page still shared with a
//! forked child in `Shared_Hugetlb`. The values are kept as the kernel prints
//! them.

use crate::error::ParseError;
use crate::maps::{self, MapsEntry};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/PID/smaps";

/// One mapping of `/proc/PID/smaps`. Sizes in bytes; `None` when the kernel
/// did not print the field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SmapsEntry {
    /// The header line.
    pub map: MapsEntry,
    /// `Size`: length of the mapping.
    pub size_bytes: u64,
    /// `KernelPageSize`: the page size the kernel uses for the mapping
    /// (the huge page size for hugetlb mappings).
    pub kernel_page_size_bytes: Option<u64>,
    /// `MMUPageSize`: the page size the MMU uses.
    pub mmu_page_size_bytes: Option<u64>,
    /// `Rss`: resident memory (0 for hugetlb mappings; see
    /// [`hugetlb_bytes`](Self::hugetlb_bytes)).
    pub rss_bytes: u64,
    /// `Pss`: proportional share of the resident memory.
    pub pss_bytes: Option<u64>,
    /// `Shared_Clean`.
    pub shared_clean_bytes: Option<u64>,
    /// `Shared_Dirty`.
    pub shared_dirty_bytes: Option<u64>,
    /// `Private_Clean`.
    pub private_clean_bytes: Option<u64>,
    /// `Private_Dirty`.
    pub private_dirty_bytes: Option<u64>,
    /// `Anonymous`.
    pub anonymous_bytes: Option<u64>,
    /// `AnonHugePages`: anonymous memory on transparent huge pages.
    pub anon_huge_pages_bytes: Option<u64>,
    /// `ShmemPmdMapped`: shmem mapped with PMD-sized (transparent huge) pages.
    pub shmem_pmd_mapped_bytes: Option<u64>,
    /// `FilePmdMapped`: file pages mapped with PMDs.
    pub file_pmd_mapped_bytes: Option<u64>,
    /// `Shared_Hugetlb`: hugetlb pages mapped by more than one process.
    pub shared_hugetlb_bytes: Option<u64>,
    /// `Private_Hugetlb`: hugetlb pages mapped by this process only.
    pub private_hugetlb_bytes: Option<u64>,
    /// `Swap`.
    pub swap_bytes: Option<u64>,
    /// `Locked`: memory locked with `mlock`.
    pub locked_bytes: Option<u64>,
    /// `THPeligible`: whether the mapping may use transparent huge pages.
    pub thp_eligible: Option<bool>,
    /// `VmFlags`: the two-letter flags (`ht` = hugetlb, `sh` = shared,
    /// `lo` = locked, `dd` = not dumped, ...).
    pub vm_flags: Vec<String>,
}

impl SmapsEntry {
    /// Whether this is a hugetlb mapping (`VmFlags` contains `ht`).
    pub fn is_hugetlb(&self) -> bool {
        self.vm_flags.iter().any(|f| f == "ht")
    }

    /// hugetlb memory of the mapping: `Shared_Hugetlb` + `Private_Hugetlb`.
    pub fn hugetlb_bytes(&self) -> u64 {
        self.shared_hugetlb_bytes
            .unwrap_or(0)
            .saturating_add(self.private_hugetlb_bytes.unwrap_or(0))
    }
}

fn parse_kb(line: usize, what: &str, text: &str) -> Result<u64, ParseError> {
    crate::error::parse_kb(PATH, line, what, text)
}

/// A mapping being read: its header line and the fields seen so far.
struct Pending {
    header_line: usize,
    size: Option<u64>,
    rss: Option<u64>,
    entry: SmapsEntry,
}

impl Pending {
    fn finish(self) -> Result<SmapsEntry, ParseError> {
        let range = format!("{:x}-{:x}", self.entry.map.start, self.entry.map.end);
        let missing = |key: &str| {
            ParseError::at(
                PATH,
                self.header_line,
                format!("mapping {range}: no {key} line (truncated file?)"),
            )
        };
        let size_bytes = self.size.ok_or_else(|| missing("Size"))?;
        let rss_bytes = self.rss.ok_or_else(|| missing("Rss"))?;
        Ok(SmapsEntry {
            size_bytes,
            rss_bytes,
            ..self.entry
        })
    }
}

/// Parses `/proc/PID/smaps`. Every mapping needs its `Size` and `Rss` lines;
/// a field line before the first header is an error. Blank lines are skipped.
pub fn parse(text: &str) -> Result<Vec<SmapsEntry>, ParseError> {
    let mut out = Vec::new();
    let mut cur: Option<Pending> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let first = match raw.split_whitespace().next() {
            Some(f) => f,
            None => continue,
        };
        let Some(key) = first.strip_suffix(':') else {
            // Not "Key:": a mapping header.
            let map = maps::parse_line(PATH, n, raw)?;
            if let Some(prev) = cur.take() {
                out.push(prev.finish()?);
            }
            cur = Some(Pending {
                header_line: n,
                size: None,
                rss: None,
                entry: SmapsEntry {
                    map,
                    ..SmapsEntry::default()
                },
            });
            continue;
        };
        let Some(p) = cur.as_mut() else {
            return Err(ParseError::at(
                PATH,
                n,
                format!("{key}: field line before any mapping header"),
            ));
        };
        // The value: everything after the first ':'.
        let value = raw.split_once(':').map_or("", |(_, v)| v);
        let e = &mut p.entry;
        let target: &mut Option<u64> = match key {
            "Size" => &mut p.size,
            "Rss" => &mut p.rss,
            "KernelPageSize" => &mut e.kernel_page_size_bytes,
            "MMUPageSize" => &mut e.mmu_page_size_bytes,
            "Pss" => &mut e.pss_bytes,
            "Shared_Clean" => &mut e.shared_clean_bytes,
            "Shared_Dirty" => &mut e.shared_dirty_bytes,
            "Private_Clean" => &mut e.private_clean_bytes,
            "Private_Dirty" => &mut e.private_dirty_bytes,
            "Anonymous" => &mut e.anonymous_bytes,
            "AnonHugePages" => &mut e.anon_huge_pages_bytes,
            "ShmemPmdMapped" => &mut e.shmem_pmd_mapped_bytes,
            "FilePmdMapped" => &mut e.file_pmd_mapped_bytes,
            "Shared_Hugetlb" => &mut e.shared_hugetlb_bytes,
            "Private_Hugetlb" => &mut e.private_hugetlb_bytes,
            "Swap" => &mut e.swap_bytes,
            "Locked" => &mut e.locked_bytes,
            "THPeligible" => {
                e.thp_eligible = Some(match value.trim() {
                    "0" => false,
                    "1" => true,
                    other => {
                        return Err(ParseError::at(
                            PATH,
                            n,
                            format!("THPeligible: expected 0 or 1, found {other:?}"),
                        ))
                    }
                });
                continue;
            }
            "VmFlags" => {
                e.vm_flags = value.split_whitespace().map(str::to_string).collect();
                continue;
            }
            _ => continue,
        };
        *target = Some(parse_kb(n, key, value)?);
    }
    if let Some(last) = cur {
        out.push(last.finish()?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.18: an executable's mapping, a private anonymous mapping, a
    /// SysV `SHM_HUGETLB` segment and a private anonymous `MAP_HUGETLB` mapping
    /// (both faulted in by this process only), and a deleted /dev/shm file.
    const REAL: &str =
        "55dcb6b60000-55dcb6b62000 r--p 00000000 fe:00 247278                     /usr/bin/head
Size:                  8 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                   8 kB
Pss:                   8 kB
Pss_Dirty:             0 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         8 kB
Private_Dirty:         0 kB
Referenced:            8 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd mr mw me 
7fc6ae2f8000-7fc6ae305000 rw-p 00000000 00:00 0 
Size:                 52 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                  20 kB
Pss:                  20 kB
Pss_Dirty:            20 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:        20 kB
Referenced:           20 kB
Anonymous:            20 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac 
7fc6ada00000-7fc6adc00000 rw-s 00000000 00:11 0                          /SYSV0000abcd (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Pss:                   0 kB
Pss_Dirty:             0 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Referenced:            0 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    2048 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd wr sh mr mw me ms de ht 
7fc6ade00000-7fc6ae000000 rw-p 00000000 00:11 6427                       /anon_hugepage (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Pss:                   0 kB
Pss_Dirty:             0 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Referenced:            0 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    2048 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd wr mr mw me de ht 
7fc6ae30c000-7fc6ae30d000 rw-s 00000000 00:1b 2                          /dev/shm/x y (deleted)
Size:                  4 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                   4 kB
Pss:                   4 kB
Pss_Dirty:             4 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         4 kB
Referenced:            4 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                4 kB
THPeligible:           0
VmFlags: rd wr sh mr mw me ms lo 
";

    /// A child's view of a `MAP_SHARED|MAP_HUGETLB` mapping it shares with its
    /// parent, on an older kernel layout with `ProtectionKey` and without the
    /// fields added since (`Pss_Dirty`, `KSM`, `FilePmdMapped`, ...).
    const SHARED_HUGETLB: &str = "7fc941800000-7fc941a00000 rw-s 00000000 00:11 6510                       /anon_hugepage (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Pss:                   0 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Referenced:            0 kB
Anonymous:             0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
Shared_Hugetlb:     2048 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
ProtectionKey:         0
VmFlags: rd wr sh mr mw me ms de ht 
";

    #[test]
    fn real_text() {
        let s = parse(REAL).unwrap();
        assert_eq!(s.len(), 5);

        let exe = &s[0];
        assert_eq!(exe.map.pathname.as_deref(), Some("/usr/bin/head"));
        assert_eq!(exe.size_bytes, 8 * 1024);
        assert_eq!(exe.kernel_page_size_bytes, Some(4096));
        assert_eq!(exe.mmu_page_size_bytes, Some(4096));
        assert_eq!(exe.rss_bytes, 8 * 1024);
        assert_eq!(exe.pss_bytes, Some(8 * 1024));
        assert_eq!(exe.private_clean_bytes, Some(8 * 1024));
        assert_eq!(exe.private_dirty_bytes, Some(0));
        assert_eq!(exe.shared_clean_bytes, Some(0));
        assert_eq!(exe.shared_dirty_bytes, Some(0));
        assert_eq!(exe.thp_eligible, Some(false));
        assert_eq!(exe.vm_flags, ["rd", "mr", "mw", "me"]);
        assert!(!exe.is_hugetlb());
        assert_eq!(exe.hugetlb_bytes(), 0);

        let anon = &s[1];
        assert_eq!(anon.map.pathname, None);
        assert_eq!(anon.size_bytes, 52 * 1024);
        assert_eq!(anon.anonymous_bytes, Some(20 * 1024));
        assert_eq!(anon.thp_eligible, Some(true));

        let sysv = &s[2];
        assert_eq!(sysv.map.pathname.as_deref(), Some("/SYSV0000abcd"));
        assert!(sysv.map.deleted);
        assert!(sysv.map.perms.shared);
        assert!(sysv.is_hugetlb());
        assert_eq!(sysv.rss_bytes, 0);
        assert_eq!(sysv.kernel_page_size_bytes, Some(2 << 20));
        assert_eq!(sysv.shared_hugetlb_bytes, Some(0));
        assert_eq!(sysv.private_hugetlb_bytes, Some(2 << 20));
        assert_eq!(sysv.hugetlb_bytes(), 2 << 20);

        let private = &s[3];
        assert_eq!(private.map.pathname.as_deref(), Some("/anon_hugepage"));
        assert!(!private.map.perms.shared);
        assert!(private.is_hugetlb());
        assert_eq!(private.hugetlb_bytes(), 2 << 20);

        let shm = &s[4];
        assert_eq!(shm.map.pathname.as_deref(), Some("/dev/shm/x y"));
        assert_eq!(shm.locked_bytes, Some(4096));
        assert_eq!(shm.swap_bytes, Some(0));
        assert_eq!(shm.anon_huge_pages_bytes, Some(0));
        assert_eq!(shm.shmem_pmd_mapped_bytes, Some(0));
        assert_eq!(shm.file_pmd_mapped_bytes, Some(0));
        assert!(shm.vm_flags.iter().any(|f| f == "lo"));
    }

    #[test]
    fn older_layout_and_shared_hugetlb() {
        let s = parse(SHARED_HUGETLB).unwrap();
        assert_eq!(s.len(), 1);
        let e = &s[0];
        assert!(e.is_hugetlb());
        assert_eq!(e.shared_hugetlb_bytes, Some(2 << 20));
        assert_eq!(e.hugetlb_bytes(), 2 << 20);
        assert_eq!(e.file_pmd_mapped_bytes, None);
        assert_eq!(e.thp_eligible, None);
    }

    #[test]
    fn minimal_and_empty() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("\n\n").unwrap(), vec![]);
        let s = parse("1000-3000 rw-p 00000000 00:00 0\nSize: 8 kB\nRss: 4 kB\n").unwrap();
        assert_eq!((s[0].size_bytes, s[0].rss_bytes), (8192, 4096));
        assert_eq!(s[0].pss_bytes, None);
        assert!(s[0].vm_flags.is_empty());
        assert!(!s[0].is_hugetlb());
        // Empty VmFlags, unknown keys in any shape.
        let s = parse(
            "1000-3000 rw-p 00000000 00:00 0\nSize: 8 kB\nRss: 4 kB\nNewThing: ???\nVmFlags:\n",
        )
        .unwrap();
        assert!(s[0].vm_flags.is_empty());
    }

    #[test]
    fn field_before_header() {
        let e = parse("Size:  8 kB\n1000-3000 rw-p 00000000 00:00 0\n").unwrap_err();
        assert_eq!(e.path, "/proc/PID/smaps");
        assert_eq!(e.line, Some(1));
    }

    #[test]
    fn missing_size_or_rss() {
        let e = parse("1000-3000 rw-p 00000000 00:00 0\nRss: 4 kB\n2000-3000 rw-p 00000000 00:00 0\nSize: 4 kB\nRss: 4 kB\n")
            .unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(e.message.contains("Size"), "{e}");
        let e = parse("1000-3000 rw-p 00000000 00:00 0\nSize: 8 kB\nRss: 4 kB\n3000-4000 rw-p 00000000 00:00 0\nSize: 4 kB\n")
            .unwrap_err();
        assert_eq!(e.line, Some(4));
        assert!(e.message.contains("Rss"), "{e}");
        assert!(e.message.contains("3000-4000"), "{e}");
    }

    #[test]
    fn malformed() {
        let base = "1000-3000 rw-p 00000000 00:00 0\nSize: 8 kB\nRss: 4 kB\n";
        for (bad, line) in [
            ("Pss: lots kB\n", 4),
            ("Pss: 4\n", 4),
            ("Pss: 4 MB\n", 4),
            ("Pss:\n", 4),
            ("Swap: 18446744073709551615 kB\n", 4),
            ("THPeligible: 2\n", 4),
            ("THPeligible:\n", 4),
            ("Size:8 kB\n", 4),
            ("not a line\n", 4),
            ("3000-2000 rw-p 00000000 00:00 0\n", 4),
        ] {
            let e = parse(&format!("{base}{bad}")).unwrap_err();
            assert_eq!(e.path, "/proc/PID/smaps", "{bad:?}");
            assert_eq!(e.line, Some(line), "{bad:?}: {e}");
        }
    }

    #[test]
    fn truncated() {
        // Cut right after a header: Size missing, error naming the header.
        let cut = &REAL[..REAL.find("Size:               2048").unwrap()];
        let e = parse(cut).unwrap_err();
        assert_eq!(e.line, Some(51));
        // Cut inside a value: the unit is gone.
        let cut = &REAL[..REAL.find("Rss:                   0").unwrap() + 20];
        assert!(parse(cut).is_err());
        // Cut after Rss: the entry is read as far as it goes.
        let cut = &REAL[..REAL.find("Pss:                   0").unwrap()];
        let s = parse(cut).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[2].size_bytes, 2 << 20);
        assert_eq!(s[2].pss_bytes, None);
        assert!(s[2].vm_flags.is_empty());
        // Every prefix parses or fails, never panics.
        for end in 0..=REAL.len() {
            if REAL.is_char_boundary(end) {
                let _ = parse(&REAL[..end]);
            }
        }
    }
}
