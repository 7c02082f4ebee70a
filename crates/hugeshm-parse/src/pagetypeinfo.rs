//! `/proc/pagetypeinfo` (root only): the pageblock size and how many
//! pageblocks of each migrate type every zone holds.
//!
//! ```text
//! Page block order: 9
//! Pages per block:  512
//! ...
//! Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate
//! Node 0, zone   Normal           75         2502          111            0            0
//! ```
//!
//! A pageblock (2 MiB on x86-64) holds pages of one migrate type. A 1 GiB
//! huge page made at run time needs a whole aligned gigabyte of pageblocks
//! whose pages are free or can be moved: one `Unmovable` or `Reclaimable`
//! pageblock inside it spoils it. The per-order free lists in the middle of
//! the file are skipped (`/proc/buddyinfo` has their sums).

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const PATH: &str = "/proc/pagetypeinfo";

/// One zone's pageblocks by migrate type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ZoneBlocks {
    /// NUMA node.
    pub node: u32,
    /// Zone name.
    pub zone: String,
    /// Pageblocks per migrate type (`Unmovable`, `Movable`, `Reclaimable`,
    /// `HighAtomic`, `CMA`, `Isolate`: the kernel's column names).
    pub blocks: BTreeMap<String, u64>,
}

impl ZoneBlocks {
    /// All pageblocks of the zone.
    pub fn total(&self) -> u64 {
        self.blocks.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Pageblocks whose pages the kernel cannot move (`Unmovable`,
    /// `Reclaimable`, `HighAtomic`).
    pub fn pinned(&self) -> u64 {
        ["Unmovable", "Reclaimable", "HighAtomic"]
            .iter()
            .filter_map(|t| self.blocks.get(*t))
            .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// What the file says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PageTypeInfo {
    /// `Pages per block` (base pages in one pageblock).
    pub pages_per_block: u64,
    /// Pageblocks per zone and type.
    pub zones: Vec<ZoneBlocks>,
}

/// Parses `/proc/pagetypeinfo`.
pub fn parse(text: &str) -> Result<PageTypeInfo, ParseError> {
    let mut info = PageTypeInfo::default();
    let mut per_block = None;
    let mut types: Option<Vec<String>> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Pages per block:") {
            per_block = Some(parse_u64(PATH, n, "pages per block", v)?);
        } else if let Some(v) = t.strip_prefix("Number of blocks type") {
            let names: Vec<String> = v.split_whitespace().map(str::to_string).collect();
            if names.is_empty() {
                return Err(ParseError::at(
                    PATH,
                    n,
                    "no migrate types after \"Number of blocks type\"",
                ));
            }
            types = Some(names);
        } else if let (Some(names), Some(rest)) = (&types, t.strip_prefix("Node")) {
            let bad = |why: &str| ParseError::at(PATH, n, format!("{why}: {t:?}"));
            let (node, zone, counts) = crate::buddyinfo::node_zone_counts(
                (PATH, n, t),
                rest,
                "expected \"Node N, zone NAME counts...\"",
                "pageblocks",
            )?;
            if counts.len() != names.len() {
                return Err(bad(&format!(
                    "{} counts for {} migrate types",
                    counts.len(),
                    names.len()
                )));
            }
            info.zones.push(ZoneBlocks {
                node,
                zone,
                blocks: names.iter().cloned().zip(counts).collect(),
            });
        }
    }
    info.pages_per_block = match per_block {
        Some(0) => return Err(ParseError::file(PATH, "\"Pages per block\" is 0")),
        Some(p) => p,
        None => return Err(ParseError::file(PATH, "no \"Pages per block:\" line")),
    };
    if types.is_none() {
        return Err(ParseError::file(PATH, "no \"Number of blocks type\" table"));
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "Page block order: 9
Pages per block:  512

Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 
Node    0, zone      DMA, type    Unmovable      0      0      0      0      0      0      0      0      1      0      0 
Node    0, zone   Normal, type      Movable      0      0      1      1    338    243    492    266    175     75    160 

Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate 
Node 0, zone      DMA            1            7            0            0            0 
Node 0, zone    DMA32            0         1528            0            0            0 
Node 0, zone   Normal           75         2502          111            0            0 
";

    #[test]
    fn real_text() {
        let p = parse(REAL).unwrap();
        assert_eq!(p.pages_per_block, 512);
        assert_eq!(p.zones.len(), 3);
        let normal = &p.zones[2];
        assert_eq!(normal.zone, "Normal");
        assert_eq!(normal.blocks["Movable"], 2502);
        assert_eq!(normal.pinned(), 186);
        assert_eq!(normal.total(), 2688);
    }

    #[test]
    fn cma_column() {
        let p = parse("Pages per block: 512\nNumber of blocks type Unmovable Movable Reclaimable HighAtomic CMA Isolate\nNode 1, zone Normal 3 10 1 0 4 0\n").unwrap();
        assert_eq!(p.zones[0].node, 1);
        assert_eq!(p.zones[0].blocks["CMA"], 4);
        assert_eq!(p.zones[0].pinned(), 4);
    }

    #[test]
    fn malformed() {
        for (text, what, line) in [
            ("", "no \"Pages per block:\" line", None),
            (
                "Pages per block: 512\n",
                "no \"Number of blocks type\" table",
                None,
            ),
            (
                "Pages per block: 0\nNumber of blocks type A\n",
                "is 0",
                None,
            ),
            ("Pages per block: x\n", "pages per block", Some(1)),
            (
                "Pages per block: 512\nNumber of blocks type\n",
                "no migrate types",
                Some(2),
            ),
            (
                "Pages per block: 512\nNumber of blocks type A B\nNode 0, zone N 1\n",
                "1 counts for 2",
                Some(3),
            ),
            (
                "Pages per block: 512\nNumber of blocks type A\nNode 0, zone N y\n",
                "pageblocks",
                Some(3),
            ),
            (
                "Pages per block: 512\nNumber of blocks type A\nNode 0 zone N 1\n",
                "Node N, zone",
                Some(3),
            ),
            (
                "Pages per block: 512\nNumber of blocks type A\nNode 0, N 1\n",
                "zone NAME",
                Some(3),
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.to_string().contains(what), "{text:?}: {e}");
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
    }
}
