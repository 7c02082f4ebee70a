//! The hugetlb cgroup controller's files, one set per huge page size,
//! named after the size as the kernel prints it (`2MB`, `1GB`, `64KB`):
//!
//! | cgroup v2 (unified)            | cgroup v1                                  | what |
//! |--------------------------------|--------------------------------------------|------|
//! | `hugetlb.2MB.max`              | `hugetlb.2MB.limit_in_bytes`               | limit on faulted pages, bytes ([`parse_limit`]) |
//! | `hugetlb.2MB.current`          | `hugetlb.2MB.usage_in_bytes`               | faulted pages charged, bytes ([`parse_counter`]) |
//! | `hugetlb.2MB.rsvd.max`         | `hugetlb.2MB.rsvd.limit_in_bytes`          | limit on reservations (mmap, shmget), bytes |
//! | `hugetlb.2MB.rsvd.current`     | `hugetlb.2MB.rsvd.usage_in_bytes`          | reservations charged, bytes |
//! | `hugetlb.2MB.events` (`max N`) | `hugetlb.2MB.failcnt`                      | charges refused ([`parse_events`], [`parse_counter`]) |
//! | `hugetlb.2MB.events.local`     | —                                          | the same, this cgroup only |
//! | —                              | `hugetlb.2MB.max_usage_in_bytes`           | the highest usage seen |
//! | `hugetlb.2MB.numa_stat`        | `hugetlb.2MB.numa_stat`                    | usage per node ([`parse_numa_stat`]) |
//!
//! The kernel charges a page to the non-reserved counter when it is faulted
//! in: a charge refused there is a SIGBUS (or an `MADV_POPULATE_WRITE`
//! error). A reservation charge refused makes `mmap`/`shmget` fail cleanly.
//! `rsvd.*` exist from Linux 5.7 on. v2 files other than `cgroup.*` are
//! absent in the root cgroup.

use crate::error::{parse_u64, ParseError};
use crate::size::{GIB, KIB, MIB};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Limits at or above this are "no limit": the kernel's unlimited value
/// is `PAGE_COUNTER_MAX` pages in bytes, just under 2^63, rounded down to
/// whole huge pages (`9223372036852678656` for 2 MiB pages on x86-64), and
/// v1 prints it as a number.
pub const UNLIMITED_AT: u64 = 1 << 62;

/// The size name the kernel puts in the file names: `2MB`, `1GB`, `64KB`,
/// `16GB` (whole units, the largest that is at least one; as the kernel's
/// `mem_fmt`).
///
/// ```
/// use hugeshm_parse::hugetlb_cgroup::hugetlb_size_name;
/// assert_eq!(hugetlb_size_name(2 << 20), "2MB");
/// assert_eq!(hugetlb_size_name(1 << 30), "1GB");
/// assert_eq!(hugetlb_size_name(64 << 10), "64KB");
/// ```
pub fn hugetlb_size_name(page_size_bytes: u64) -> String {
    if page_size_bytes >= GIB {
        format!("{}GB", page_size_bytes / GIB)
    } else if page_size_bytes >= MIB {
        format!("{}MB", page_size_bytes / MIB)
    } else {
        format!("{}KB", page_size_bytes / KIB)
    }
}

/// The page size a size name stands for (`2MB` → 2 MiB); `None` for
/// anything [`hugetlb_size_name`] does not write.
///
/// ```
/// use hugeshm_parse::hugetlb_cgroup::hugetlb_size_from_name;
/// assert_eq!(hugetlb_size_from_name("2MB"), Some(2 << 20));
/// assert_eq!(hugetlb_size_from_name("1GB"), Some(1 << 30));
/// assert_eq!(hugetlb_size_from_name("2M"), None);
/// ```
pub fn hugetlb_size_from_name(name: &str) -> Option<u64> {
    let (num, unit) = name.split_at(name.find(|c: char| !c.is_ascii_digit())?);
    if num.is_empty() || (num.len() > 1 && num.starts_with('0')) {
        return None;
    }
    let mult = match unit {
        "KB" => KIB,
        "MB" => MIB,
        "GB" => GIB,
        _ => return None,
    };
    let v = num.parse::<u64>().ok()?.checked_mul(mult)?;
    (v > 0).then_some(v)
}

/// Splits a controller file name into its page size and the rest:
/// `hugetlb.2MB.rsvd.max` → `(2 MiB, "rsvd.max")`; `None` for other files.
///
/// ```
/// use hugeshm_parse::hugetlb_cgroup::split_file_name;
/// assert_eq!(split_file_name("hugetlb.1GB.limit_in_bytes"), Some((1 << 30, "limit_in_bytes")));
/// assert_eq!(split_file_name("memory.max"), None);
/// ```
pub fn split_file_name(name: &str) -> Option<(u64, &str)> {
    let rest = name.strip_prefix("hugetlb.")?;
    let (size, file) = rest.split_once('.')?;
    let size = hugetlb_size_from_name(size)?;
    (!file.is_empty()).then_some((size, file))
}

/// The text of a one-value file: its first line, which must not be empty.
fn first_line<'a>(path: &str, text: &'a str, what: &str) -> Result<&'a str, ParseError> {
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(ParseError::file(
            path,
            format!("empty file, expected {what}"),
        ));
    }
    Ok(line)
}

/// Parses a limit (`hugetlb.<size>.max`, `.rsvd.max`, v1 `.limit_in_bytes`,
/// `.rsvd.limit_in_bytes`): `max`, or a number of bytes at or above
/// [`UNLIMITED_AT`], is `None` (no limit); any other number is `Some(bytes)`.
///
/// ```
/// use hugeshm_parse::hugetlb_cgroup::parse_limit;
/// assert_eq!(parse_limit("hugetlb.2MB.max", "max\n").unwrap(), None);
/// assert_eq!(parse_limit("hugetlb.2MB.max", "8388608\n").unwrap(), Some(8 << 20));
/// assert_eq!(parse_limit("hugetlb.2MB.limit_in_bytes", "9223372036852678656\n").unwrap(), None);
/// ```
pub fn parse_limit(path: &str, text: &str) -> Result<Option<u64>, ParseError> {
    let line = first_line(path, text, "a limit in bytes or \"max\"")?;
    if line == "max" {
        return Ok(None);
    }
    let v = parse_u64(path, 1, "limit in bytes (or \"max\")", line)?;
    Ok((v < UNLIMITED_AT).then_some(v))
}

/// Parses a counter: bytes (`hugetlb.<size>.current`, `.rsvd.current`, v1
/// `.usage_in_bytes`, `.max_usage_in_bytes`) or a count (v1 `.failcnt`).
pub fn parse_counter(path: &str, text: &str) -> Result<u64, ParseError> {
    let line = first_line(path, text, "a number")?;
    parse_u64(path, 1, "value", line)
}

/// `hugetlb.<size>.events` and `.events.local` (cgroup v2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HugetlbEvents {
    /// `max`: how many times a charge was refused because a limit was
    /// reached (in `events`, in this cgroup and below it).
    pub max: u64,
}

/// Parses `hugetlb.<size>.events` (`max N`; unknown keys are skipped).
///
/// ```
/// let e = hugeshm_parse::hugetlb_cgroup::parse_events("hugetlb.2MB.events", "max 3\n").unwrap();
/// assert_eq!(e.max, 3);
/// ```
pub fn parse_events(path: &str, text: &str) -> Result<HugetlbEvents, ParseError> {
    let mut max = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = raw.trim().split_once(char::is_whitespace) else {
            return Err(ParseError::at(
                path,
                n,
                format!("expected \"key N\", found {raw:?}"),
            ));
        };
        if key == "max" {
            max = Some(parse_u64(path, n, "max", value)?);
        }
    }
    let max = max.ok_or_else(|| ParseError::file(path, "no \"max N\" line"))?;
    Ok(HugetlbEvents { max })
}

/// `hugetlb.<size>.numa_stat`: usage per NUMA node, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HugetlbNumaStat {
    /// `total=`: this cgroup's usage (v2: with its descendants; v1: of this
    /// cgroup alone).
    pub total_bytes: u64,
    /// `N0=`, `N1=`, ...: per node, as `total_bytes`.
    pub nodes: BTreeMap<u32, u64>,
    /// v1 only, `hierarchical_total=`: with its descendants.
    pub hierarchical_total_bytes: Option<u64>,
    /// v1 only: per node, with its descendants.
    pub hierarchical_nodes: BTreeMap<u32, u64>,
}

/// Parses `hugetlb.<size>.numa_stat`: v2 prints one line
/// `total=N N0=N N1=N`, v1 prints that line (of the cgroup alone) and
/// `hierarchical_total=N N0=N ...`.
pub fn parse_numa_stat(path: &str, text: &str) -> Result<HugetlbNumaStat, ParseError> {
    let mut out = HugetlbNumaStat::default();
    let mut seen_total = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let mut words = raw.split_whitespace();
        let Some(first) = words.next() else {
            continue;
        };
        let (key, value) = first.split_once('=').ok_or_else(|| {
            ParseError::at(
                path,
                n,
                format!("expected \"total=N N0=N ...\", found {raw:?}"),
            )
        })?;
        let hierarchical = match key {
            "total" => false,
            "hierarchical_total" => true,
            _ => {
                return Err(ParseError::at(
                    path,
                    n,
                    format!("expected total= or hierarchical_total=, found {first:?}"),
                ))
            }
        };
        let total = parse_u64(path, n, key, value)?;
        let mut nodes = BTreeMap::new();
        for w in words {
            let node = w
                .strip_prefix('N')
                .and_then(|r| r.split_once('='))
                .and_then(|(id, v)| Some((id.parse::<u32>().ok()?, v)));
            let Some((id, v)) = node else {
                return Err(ParseError::at(
                    path,
                    n,
                    format!("expected \"N<node>=<bytes>\", found {w:?}"),
                ));
            };
            nodes.insert(id, parse_u64(path, n, w, v)?);
        }
        if hierarchical {
            out.hierarchical_total_bytes = Some(total);
            out.hierarchical_nodes = nodes;
        } else {
            out.total_bytes = total;
            out.nodes = nodes;
            seen_total = true;
        }
    }
    if !seen_total {
        return Err(ParseError::file(path, "no \"total=\" line"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_names() {
        for (bytes, name) in [
            (2 * MIB, "2MB"),
            (GIB, "1GB"),
            (16 * GIB, "16GB"),
            (32 * MIB, "32MB"),
            (512 * MIB, "512MB"),
            (64 * KIB, "64KB"),
            (16 * MIB, "16MB"),
        ] {
            assert_eq!(hugetlb_size_name(bytes), name);
            assert_eq!(hugetlb_size_from_name(name), Some(bytes), "{name}");
        }
        for bad in [
            "",
            "MB",
            "2",
            "2mb",
            "2 MB",
            "02MB",
            "0MB",
            "2MiB",
            "-2MB",
            "99999999999999999999GB",
        ] {
            assert_eq!(hugetlb_size_from_name(bad), None, "{bad:?}");
        }
        assert_eq!(split_file_name("hugetlb.2MB.max"), Some((2 * MIB, "max")));
        assert_eq!(
            split_file_name("hugetlb.2MB.rsvd.max_usage_in_bytes"),
            Some((2 * MIB, "rsvd.max_usage_in_bytes"))
        );
        assert_eq!(split_file_name("hugetlb.2MB."), None);
        assert_eq!(split_file_name("hugetlb.2MB"), None);
        assert_eq!(split_file_name("hugetlb.xMB.max"), None);
        assert_eq!(split_file_name("cgroup.procs"), None);
    }

    #[test]
    fn limits() {
        let p = "hugetlb.2MB.max";
        assert_eq!(parse_limit(p, "max\n").unwrap(), None);
        assert_eq!(parse_limit(p, "0\n").unwrap(), Some(0));
        assert_eq!(parse_limit(p, "268435456\n").unwrap(), Some(256 * MIB));
        // v1's unlimited values for 2 MiB and 1 GiB pages, and the plain
        // PAGE_COUNTER_MAX in bytes.
        for v in [
            "9223372036852678656",
            "9223372035781033984",
            "9223372036854771712",
        ] {
            assert_eq!(parse_limit(p, v).unwrap(), None, "{v}");
        }
        assert_eq!(
            parse_limit(p, "4611686018427387903").unwrap(),
            Some(UNLIMITED_AT - 1)
        );
        for bad in [
            "",
            "\n",
            "lots\n",
            "-1\n",
            "18446744073709551616\n",
            "8 MB\n",
            "MAX\n",
        ] {
            let e = parse_limit("/sys/fs/cgroup/x/hugetlb.2MB.max", bad).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("/sys/fs/cgroup/x/hugetlb.2MB.max"),
                "{e}"
            );
        }
    }

    #[test]
    fn counters() {
        assert_eq!(parse_counter("c", "8388608\n").unwrap(), 8 * MIB);
        assert_eq!(parse_counter("failcnt", "0\n").unwrap(), 0);
        assert!(parse_counter("c", "").is_err());
        assert!(parse_counter("c", "max\n").is_err());
        assert!(parse_counter("c", "18446744073709551616").is_err());
    }

    #[test]
    fn events() {
        assert_eq!(parse_events("e", "max 0\n").unwrap().max, 0);
        assert_eq!(parse_events("e", "max 12\nfuture 3\n").unwrap().max, 12);
        let e = parse_events("/x/hugetlb.2MB.events", "max lots\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(parse_events("e", "").is_err());
        assert!(parse_events("e", "other 1\n").is_err());
        assert_eq!(parse_events("e", "max\n").unwrap_err().line, Some(1));
    }

    #[test]
    fn numa_stat() {
        // v2.
        let s = parse_numa_stat("n", "total=8388608 N0=6291456 N1=2097152\n").unwrap();
        assert_eq!(s.total_bytes, 8 * MIB);
        assert_eq!(s.nodes, BTreeMap::from([(0, 6 * MIB), (1, 2 * MIB)]));
        assert_eq!(s.hierarchical_total_bytes, None);
        // v1: this cgroup alone, then with its descendants.
        let s =
            parse_numa_stat("n", "total=0 N0=0\nhierarchical_total=4194304 N0=4194304\n").unwrap();
        assert_eq!(s.total_bytes, 0);
        assert_eq!(s.hierarchical_total_bytes, Some(4 * MIB));
        assert_eq!(s.hierarchical_nodes, BTreeMap::from([(0, 4 * MIB)]));
        for (bad, line) in [
            ("total=x N0=0\n", Some(1)),
            ("total=0 N0=x\n", Some(1)),
            ("total=0 0=0\n", Some(1)),
            ("total=0 Nx=0\n", Some(1)),
            ("total 0\n", Some(1)),
            ("other=0\n", Some(1)),
            ("hierarchical_total=0\n", None),
            ("", None),
        ] {
            let e = parse_numa_stat("/x/numa_stat", bad).unwrap_err();
            assert_eq!(e.line, line, "{bad:?}: {e}");
        }
    }
}
