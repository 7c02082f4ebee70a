//! `/proc/buddyinfo`: free blocks of each order in each populated zone.
//!
//! ```text
//! Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3
//! Node 0, zone    DMA32      1      1      4      2      5      4      3      3      4      2    752
//! Node 0, zone   Normal    733    201      0      0    465    307    522    288    193     75    160
//! ```
//!
//! Column `k` counts free blocks of 2^k base pages. The last column is the
//! largest order the buddy allocator keeps (`MAX_PAGE_ORDER`, 10 on x86-64:
//! 4 MiB): a 1 GiB page is never one free block; the kernel has to find a
//! whole aligned gigabyte free or movable (`alloc_contig_pages`).

use crate::error::{parse_u64, ParseError};
use serde::{Deserialize, Serialize};

const PATH: &str = "/proc/buddyinfo";

/// One zone's free lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BuddyZone {
    /// NUMA node.
    pub node: u32,
    /// Zone name (`DMA`, `DMA32`, `Normal`, `Movable`, ...).
    pub zone: String,
    /// Free blocks per order, from order 0.
    pub free_blocks: Vec<u64>,
}

impl BuddyZone {
    /// The largest order listed.
    pub fn max_order(&self) -> usize {
        self.free_blocks.len().saturating_sub(1)
    }

    /// Free bytes in blocks of `order` or larger, for `base_page` bytes per page.
    pub fn free_bytes_from(&self, order: usize, base_page: u64) -> u64 {
        self.free_blocks
            .iter()
            .enumerate()
            .skip(order)
            .map(|(k, n)| n.saturating_mul(base_page << k.min(63)))
            .fold(0u64, u64::saturating_add)
    }

    /// All free bytes of the zone.
    pub fn free_bytes(&self, base_page: u64) -> u64 {
        self.free_bytes_from(0, base_page)
    }

    /// Free bytes in blocks of the largest order (4 MiB on x86-64).
    pub fn free_bytes_max_order(&self, base_page: u64) -> u64 {
        self.free_bytes_from(self.max_order(), base_page)
    }
}

/// The rest of a `Node N, zone NAME c0 c1 ...` line after `Node` (the
/// shape of `/proc/buddyinfo` and of `/proc/pagetypeinfo`'s block
/// counts): node, zone and the counts (`what` names them in errors).
/// `at` is (file, line number, the whole line) for errors.
pub(crate) fn node_zone_counts(
    (path, n, line): (&'static str, usize, &str),
    rest: &str,
    no_comma: &str,
    what: &str,
) -> Result<(u32, String, Vec<u64>), ParseError> {
    let bad = |why: &str| ParseError::at(path, n, format!("{why}: {line:?}"));
    let (node, rest) = rest.split_once(',').ok_or_else(|| bad(no_comma))?;
    let node = u32::try_from(parse_u64(path, n, "node", node)?)
        .map_err(|_| bad("node number too large"))?;
    let rest = rest
        .trim_start()
        .strip_prefix("zone")
        .ok_or_else(|| bad("expected \"zone NAME\" after the node"))?;
    let mut words = rest.split_whitespace();
    let zone = words.next().ok_or_else(|| bad("no zone name"))?.to_string();
    let counts = words
        .map(|w| parse_u64(path, n, what, w))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((node, zone, counts))
}

/// Parses `/proc/buddyinfo`. Every line must be `Node N, zone NAME c0 c1 ...`
/// with the same number of orders.
pub fn parse(text: &str) -> Result<Vec<BuddyZone>, ParseError> {
    let mut out: Vec<BuddyZone> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| ParseError::at(PATH, n, format!("{why}: {:?}", line.trim()));
        let rest = line
            .trim()
            .strip_prefix("Node")
            .ok_or_else(|| bad("expected \"Node N, zone NAME counts...\""))?;
        let (node, zone, free_blocks) = node_zone_counts(
            (PATH, n, line.trim()),
            rest,
            "expected a comma after the node number",
            "free blocks",
        )?;
        if free_blocks.is_empty() {
            return Err(bad("no free block counts"));
        }
        if let Some(first) = out.first() {
            if first.free_blocks.len() != free_blocks.len() {
                return Err(bad(&format!(
                    "{} orders where the first line has {}",
                    free_blocks.len(),
                    first.free_blocks.len()
                )));
            }
        }
        out.push(BuddyZone {
            node,
            zone,
            free_blocks,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n\
Node 0, zone    DMA32      1      1      4      2      5      4      3      3      4      2    752 \n\
Node 0, zone   Normal    733    201      0      0    465    307    522    288    193     75    160 \n";

    #[test]
    fn real_text() {
        let z = parse(REAL).unwrap();
        assert_eq!(z.len(), 3);
        assert_eq!((z[1].node, z[1].zone.as_str()), (0, "DMA32"));
        assert_eq!(z[1].max_order(), 10);
        assert_eq!(z[1].free_bytes_max_order(4096), 752 * 4 * 1024 * 1024);
        assert_eq!(z[0].free_bytes(4096), (256 + 512 + 3 * 1024) * 4096);
        assert_eq!(z[2].free_blocks[0], 733);
    }

    #[test]
    fn two_nodes_and_blank_lines() {
        let z = parse("\nNode 0, zone Normal 1 2\nNode 1, zone Normal 3 4\n\n").unwrap();
        assert_eq!(z.len(), 2);
        assert_eq!(z[1].node, 1);
        assert_eq!(z[1].free_bytes_from(1, 4096), 4 * 8192);
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_name_the_line() {
        for (text, line, what) in [
            ("Zone 0, zone DMA 1\n", 1, "expected \"Node"),
            ("Node 0 zone DMA 1\n", 1, "comma"),
            ("Node x, zone DMA 1\n", 1, "node"),
            ("Node 0, area DMA 1\n", 1, "zone NAME"),
            ("Node 0, zone\n", 1, "no zone name"),
            ("Node 0, zone DMA\n", 1, "no free block counts"),
            ("Node 0, zone DMA 1 x\n", 1, "free blocks"),
            ("Node 0, zone DMA 1 -2\n", 1, "free blocks"),
            (
                "Node 0, zone DMA 1 2\nNode 0, zone Normal 1\n",
                2,
                "1 orders",
            ),
            ("Node 99999999999, zone DMA 1\n", 1, "too large"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with("/proc/buddyinfo:"), "{e}");
        }
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        let z = parse(&format!("Node 0, zone N {} {}\n", u64::MAX, u64::MAX)).unwrap();
        assert_eq!(z[0].free_bytes(4096), u64::MAX);
    }
}
