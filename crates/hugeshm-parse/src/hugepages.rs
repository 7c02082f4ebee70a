//! `/sys/kernel/mm/hugepages/hugepages-<size>kB/*` and the per-node
//! `/sys/devices/system/node/nodeN/hugepages/hugepages-<size>kB/*` counters.
//!
//! Each file holds one number; the live reader reads the directory and hands
//! each file's text to [`parse_counter`].

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

/// Parses one counter file (`nr_hugepages`, `free_hugepages`, ...).
pub fn parse_counter(path: &str, text: &str) -> Result<u64, ParseError> {
    let line = text.lines().next().unwrap_or("");
    if line.trim().is_empty() {
        return Err(ParseError::file(path, "empty file, expected a page count"));
    }
    parse_u64(path, 1, "page count", line)
}

/// Parses `demote_size` (`2048kB`): the page size a pool's pages are split
/// into by a write to `demote` (Linux 5.16+).
pub fn parse_demote_size(path: &str, text: &str) -> Result<u64, ParseError> {
    let line = text.lines().next().unwrap_or("").trim();
    let kb = line.strip_suffix("kB").ok_or_else(|| {
        ParseError::at(
            path,
            1,
            format!("expected a size such as \"2048kB\", found {line:?}"),
        )
    })?;
    let kb = parse_u64(path, 1, "demote size", kb)?;
    match kb.checked_mul(1024) {
        Some(b) if b > 0 => Ok(b),
        _ => Err(ParseError::at(
            path,
            1,
            format!("demote size {kb} kB is not a page size"),
        )),
    }
}

/// The counters of one pool: one page size, on the whole host or one node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PoolCounters {
    /// Page size in bytes.
    pub page_size_bytes: u64,
    /// `nr_hugepages`: pages in the pool, surplus pages included (the same
    /// number as `HugePages_Total`).
    pub nr: u64,
    /// `free_hugepages`: pages not yet faulted in by anyone.
    pub free: u64,
    /// `resv_hugepages`: promised to a mapping but not yet faulted in.
    /// Global only: `None` for a node's pool.
    pub resv: Option<u64>,
    /// `surplus_hugepages`: how many of `nr` were allocated through overcommit
    /// (they go back to the OS when freed).
    pub surplus: u64,
    /// `nr_overcommit_hugepages`: how many surplus pages may be allocated.
    /// Global only.
    pub nr_overcommit: Option<u64>,
}

impl PoolCounters {
    /// Counters of one pool.
    pub fn new(
        page_size_bytes: u64,
        nr: u64,
        free: u64,
        resv: Option<u64>,
        surplus: u64,
        nr_overcommit: Option<u64>,
    ) -> Self {
        PoolCounters {
            page_size_bytes,
            nr,
            free,
            resv,
            surplus,
            nr_overcommit,
        }
    }

    /// Pages in the pool, persistent and surplus (`nr` already counts surplus pages).
    pub fn total(&self) -> u64 {
        self.nr
    }

    /// Persistent pages: the pool without its surplus.
    pub fn persistent(&self) -> u64 {
        self.nr.saturating_sub(self.surplus)
    }

    /// Pages a new mapping can really get: free minus reserved (a node's pool
    /// has no reserve count of its own, so this is its free count).
    pub fn available(&self) -> u64 {
        self.free.saturating_sub(self.resv.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_demote_size;

    #[test]
    fn demote_size() {
        let p = "/sys/kernel/mm/hugepages/hugepages-1048576kB/demote_size";
        assert_eq!(parse_demote_size(p, "2048kB\n").unwrap(), 2 << 20);
        for bad in [
            "",
            "2048",
            "kB",
            "0kB",
            "-1kB",
            "2 MB",
            "99999999999999999999kB",
        ] {
            let e = parse_demote_size(p, bad).unwrap_err();
            assert!(e.to_string().starts_with(p), "{bad:?}: {e}");
        }
    }

    use super::*;

    #[test]
    fn counters() {
        assert_eq!(parse_counter("nr_hugepages", "16\n").unwrap(), 16);
        assert_eq!(parse_counter("nr_hugepages", "0").unwrap(), 0);
        let e = parse_counter("/sys/x/free_hugepages", "").unwrap_err();
        assert!(e.to_string().contains("/sys/x/free_hugepages"));
        assert!(parse_counter("f", "abc\n").is_err());
        assert!(parse_counter("f", "-1\n").is_err());
    }

    #[test]
    fn available() {
        let p = PoolCounters {
            page_size_bytes: 2 << 20,
            nr: 10,
            free: 8,
            resv: Some(3),
            surplus: 1,
            nr_overcommit: Some(0),
        };
        assert_eq!(p.available(), 5);
        assert_eq!(p.total(), 10);
        assert_eq!(p.persistent(), 9);
        // An inconsistent snapshot (read while counters moved) never underflows.
        let q = PoolCounters {
            free: 1,
            resv: Some(4),
            ..p
        };
        assert_eq!(q.available(), 0);
    }
}
