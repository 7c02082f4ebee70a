//! `/sys/devices/system/node/nodeN/{cpulist,distance,meminfo}`.

use crate::error::{kb_to_bytes, parse_u64, ParseError};
use serde::{Deserialize, Serialize};

/// Parses a node or CPU list such as `0-3,8,10-11` (also `/sys/devices/system/node/online`).
pub fn parse_list(path: &str, text: &str) -> Result<Vec<u32>, ParseError> {
    let line = text.lines().next().unwrap_or("").trim();
    let mut out = Vec::new();
    if line.is_empty() {
        return Ok(out);
    }
    for part in line.split(',') {
        let part = part.trim();
        let bad = || {
            ParseError::at(
                path,
                1,
                format!("expected a list like 0-3,8, found {part:?}"),
            )
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.parse().map_err(|_| bad())?;
                let b: u32 = b.parse().map_err(|_| bad())?;
                if b < a || b - a > 65_536 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Parses a node's `distance` file: one number per node.
pub fn parse_distance(path: &str, text: &str) -> Result<Vec<u32>, ParseError> {
    let line = text.lines().next().unwrap_or("");
    line.split_whitespace()
        .map(|t| {
            t.parse::<u32>()
                .map_err(|_| ParseError::at(path, 1, format!("expected a distance, found {t:?}")))
        })
        .collect()
}

/// The fields of a node's `meminfo` hugeshm uses, in bytes.
///
/// The `HugePages_*` counts here are of the default huge page size only; the
/// per-size counters live in the node's `hugepages/` directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NodeMeminfo {
    /// `MemTotal`.
    pub mem_total_bytes: Option<u64>,
    /// `MemFree`.
    pub mem_free_bytes: Option<u64>,
    /// `MemUsed`.
    pub mem_used_bytes: Option<u64>,
    /// `Shmem`.
    pub shmem_bytes: Option<u64>,
    /// `PageTables`.
    pub page_tables_bytes: Option<u64>,
    /// `HugePages_Total` (default size).
    pub hugepages_total: Option<u64>,
    /// `HugePages_Free` (default size).
    pub hugepages_free: Option<u64>,
}

/// Parses a node's `meminfo`, whose lines look like `Node 0 MemTotal:  4417748 kB`.
pub fn parse_meminfo(path: &str, text: &str) -> Result<NodeMeminfo, ParseError> {
    let mut m = NodeMeminfo::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut toks = raw.split_whitespace();
        let (Some("Node"), Some(_id), Some(key), Some(val)) =
            (toks.next(), toks.next(), toks.next(), toks.next())
        else {
            return Err(ParseError::at(
                path,
                n,
                format!("expected \"Node N Key: value\", found {raw:?}"),
            ));
        };
        let unit = toks.next();
        let key = key.trim_end_matches(':');
        let target = match key {
            "MemTotal" => &mut m.mem_total_bytes,
            "MemFree" => &mut m.mem_free_bytes,
            "MemUsed" => &mut m.mem_used_bytes,
            "Shmem" => &mut m.shmem_bytes,
            "PageTables" => &mut m.page_tables_bytes,
            "HugePages_Total" => &mut m.hugepages_total,
            "HugePages_Free" => &mut m.hugepages_free,
            _ => continue,
        };
        let v = parse_u64(path, n, key, val)?;
        *target = Some(match unit {
            Some("kB") => kb_to_bytes(path, n, key, v)?,
            None => v,
            Some(u) => {
                return Err(ParseError::at(
                    path,
                    n,
                    format!("{key}: unknown unit {u:?}"),
                ))
            }
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(
            parse_list("cpulist", "0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_list("cpulist", "\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_list("cpulist", "1").unwrap(), vec![1]);
        assert!(parse_list("cpulist", "3-1").is_err());
        assert!(parse_list("cpulist", "0-4294967295").is_err());
        assert!(parse_list("cpulist", "a-b").is_err());
        assert!(parse_list("cpulist", "1,,2").is_err());
        assert_eq!(parse_distance("distance", "10 21\n").unwrap(), vec![10, 21]);
        assert!(parse_distance("distance", "10 x").is_err());
    }

    #[test]
    fn meminfo() {
        let t = "Node 1 MemTotal:        4417748 kB\nNode 1 MemFree:         3292700 kB\n\
                 Node 1 PageTables:         1000 kB\nNode 1 HugePages_Total:     8\n\
                 Node 1 HugePages_Free:      6\nNode 1 HugePages_Surp:      0\n";
        let m = parse_meminfo("n", t).unwrap();
        assert_eq!(m.mem_total_bytes, Some(4417748 * 1024));
        assert_eq!(m.hugepages_total, Some(8));
        assert_eq!(m.hugepages_free, Some(6));
        assert_eq!(m.page_tables_bytes, Some(1000 * 1024));
        let e = parse_meminfo("/sys/n/meminfo", "Node 1 MemTotal: 1 kB\nNode 1 MemFree:\n")
            .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(parse_meminfo("n", "Node 0 MemFree: x kB").is_err());
    }
}
