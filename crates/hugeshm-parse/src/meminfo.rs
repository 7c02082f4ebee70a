//! `/proc/meminfo`.

use crate::error::{kb_to_bytes, parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/meminfo";

/// The fields of `/proc/meminfo` hugeshm uses. Sizes in bytes; `None` when
/// the kernel does not print the field (a kernel without hugetlb prints no
/// `HugePages_*` lines at all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Meminfo {
    /// `MemTotal`.
    pub mem_total_bytes: Option<u64>,
    /// `MemFree`.
    pub mem_free_bytes: Option<u64>,
    /// `MemAvailable`.
    pub mem_available_bytes: Option<u64>,
    /// `Shmem`: tmpfs, /dev/shm and SysV shared memory on base pages.
    pub shmem_bytes: Option<u64>,
    /// `ShmemHugePages`: shmem backed by transparent huge pages.
    pub shmem_huge_pages_bytes: Option<u64>,
    /// `AnonHugePages`: anonymous memory backed by transparent huge pages.
    pub anon_huge_pages_bytes: Option<u64>,
    /// `PageTables`: memory used by page tables of all processes.
    pub page_tables_bytes: Option<u64>,
    /// `SecPageTables`: secondary (KVM/IOMMU) page tables.
    pub sec_page_tables_bytes: Option<u64>,
    /// `HugePages_Total` (pages of the default size).
    pub hugepages_total: Option<u64>,
    /// `HugePages_Free`.
    pub hugepages_free: Option<u64>,
    /// `HugePages_Rsvd`.
    pub hugepages_rsvd: Option<u64>,
    /// `HugePages_Surp`.
    pub hugepages_surp: Option<u64>,
    /// `Hugepagesize`: the default huge page size.
    pub hugepagesize_bytes: Option<u64>,
    /// `Hugetlb`: memory in huge pages of every size.
    pub hugetlb_bytes: Option<u64>,
}

impl Meminfo {
    /// Whether the kernel was built with hugetlb support (it prints `HugePages_Total`).
    pub fn hugetlb_supported(&self) -> bool {
        self.hugepages_total.is_some()
    }
}

/// Parses `/proc/meminfo`.
pub fn parse(text: &str) -> Result<Meminfo, ParseError> {
    let mut m = Meminfo::default();
    let mut seen = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let (key, rest) = raw.split_once(':').ok_or_else(|| {
            ParseError::at(PATH, n, format!("expected \"Key: value\", found {raw:?}"))
        })?;
        let rest = rest.trim();
        let (num, unit) = match rest.split_once(char::is_whitespace) {
            Some((a, b)) => (a, b.trim()),
            None => (rest, ""),
        };
        let target: &mut Option<u64> = match key.trim() {
            "MemTotal" => &mut m.mem_total_bytes,
            "MemFree" => &mut m.mem_free_bytes,
            "MemAvailable" => &mut m.mem_available_bytes,
            "Shmem" => &mut m.shmem_bytes,
            "ShmemHugePages" => &mut m.shmem_huge_pages_bytes,
            "AnonHugePages" => &mut m.anon_huge_pages_bytes,
            "PageTables" => &mut m.page_tables_bytes,
            "SecPageTables" => &mut m.sec_page_tables_bytes,
            "HugePages_Total" => &mut m.hugepages_total,
            "HugePages_Free" => &mut m.hugepages_free,
            "HugePages_Rsvd" => &mut m.hugepages_rsvd,
            "HugePages_Surp" => &mut m.hugepages_surp,
            "Hugepagesize" => &mut m.hugepagesize_bytes,
            "Hugetlb" => &mut m.hugetlb_bytes,
            _ => continue,
        };
        let key = key.trim();
        let v = parse_u64(PATH, n, key, num)?;
        let v = match unit {
            "kB" => kb_to_bytes(PATH, n, key, v)?,
            "" => v,
            other => {
                return Err(ParseError::at(
                    PATH,
                    n,
                    format!("{key}: unknown unit {other:?}"),
                ));
            }
        };
        *target = Some(v);
        seen += 1;
    }
    if seen == 0 {
        return Err(ParseError::file(
            PATH,
            "no known field found (empty or not a meminfo file)",
        ));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "MemTotal:       24683548 kB
MemFree:        23011236 kB
MemAvailable:   23561240 kB
Shmem:              8808 kB
PageTables:         4188 kB
SecPageTables:         0 kB
AnonHugePages:         0 kB
ShmemHugePages:        0 kB
FileHugePages:         0 kB
HugePages_Total:      16
HugePages_Free:       12
HugePages_Rsvd:        3
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:         1081344 kB
";

    #[test]
    fn real_text() {
        let m = parse(REAL).unwrap();
        assert_eq!(m.mem_total_bytes, Some(24683548 * 1024));
        assert_eq!(m.hugepages_total, Some(16));
        assert_eq!(m.hugepages_free, Some(12));
        assert_eq!(m.hugepages_rsvd, Some(3));
        assert_eq!(m.hugepages_surp, Some(0));
        assert_eq!(m.hugepagesize_bytes, Some(2 << 20));
        assert_eq!(m.hugetlb_bytes, Some(1081344 * 1024));
        assert_eq!(m.page_tables_bytes, Some(4188 * 1024));
        assert!(m.hugetlb_supported());
    }

    #[test]
    fn no_hugetlb_kernel() {
        let m = parse("MemTotal: 1000 kB\nMemFree: 10 kB\n").unwrap();
        assert!(!m.hugetlb_supported());
        assert_eq!(m.hugepagesize_bytes, None);
    }

    #[test]
    fn malformed() {
        let e = parse("MemTotal: 1000 kB\nHugePages_Total: lots\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("HugePages_Total"), "{e}");
        let e = parse("MemTotal 1000 kB\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(parse("").is_err());
        assert!(parse("MemTotal: 99999999999999999999 kB").is_err());
        assert!(parse("MemTotal: 18446744073709551615 kB").is_err());
        assert!(parse("MemTotal: 1 MB").is_err());
        // Truncated mid-line: the number is still readable.
        let m = parse("MemTotal: 1000 kB\nHugePages_Total:   1").unwrap();
        assert_eq!(m.hugepages_total, Some(1));
    }
}
