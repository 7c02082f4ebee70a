//! What `hugeshm run` checks of the host before it starts a server: the
//! page size asked for is one the kernel offers, and a NUMA placement has
//! nodes to place on (the nodes it names exist; on a host of one node it
//! is refused under `only`, dropped under `try`).

use crate::model::{Placement, Policy};
use hugeshm_probe::HostSnapshot;

use super::RunPageSize;

/// What the host cannot give of the settings asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRefusal {
    /// The kernel offers no pool of this page size.
    PageSize {
        /// The page size asked for, in bytes.
        page_size: u64,
        /// The sizes it offers (none: no huge pages at all).
        offered: Vec<u64>,
    },
    /// A placement on a host of fewer than two NUMA nodes, under `only`.
    TooFewNodes {
        /// How many nodes the host has.
        nodes: usize,
    },
    /// A placement names a node the host does not have.
    NoSuchNode {
        /// The node named.
        node: u32,
        /// The host's nodes.
        nodes: Vec<u32>,
    },
}

/// The placement `hugeshm run` keeps on `host`: `numa` where the host can
/// place it; `None` where a host of fewer than two nodes has nothing to
/// place and `policy` is `try` (the placement is dropped: say so, with
/// the number of the host's nodes); else what the host refuses.
pub fn check_host(
    host: &HostSnapshot,
    page_size: RunPageSize,
    numa: Option<&Placement>,
    policy: Policy,
) -> Result<Option<Placement>, HostRefusal> {
    if let RunPageSize::Huge(p) = page_size {
        let offered: Vec<u64> = host.pools.iter().map(|p| p.page_size_bytes).collect();
        if !offered.contains(&p) {
            return Err(HostRefusal::PageSize {
                page_size: p,
                offered,
            });
        }
    }
    let Some(numa) = numa else {
        return Ok(Some(Placement::Default));
    };
    let nodes: Vec<u32> = host.nodes.iter().map(|n| n.node).collect();
    if nodes.len() < 2 {
        return match policy {
            Policy::Only => Err(HostRefusal::TooFewNodes { nodes: nodes.len() }),
            _ => Ok(None),
        };
    }
    let named = match numa {
        Placement::Bind(n) | Placement::Interleave(n) | Placement::WeightedInterleave(n) => {
            n.clone()
        }
        Placement::Preferred(n) => vec![*n],
        _ => Vec::new(),
    };
    match named.into_iter().find(|n| !nodes.contains(n)) {
        Some(node) => Err(HostRefusal::NoSuchNode { node, nodes }),
        None => Ok(Some(numa.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_probe::NodeInfo;

    fn host(nodes: &[u32]) -> HostSnapshot {
        let mut h = HostSnapshot::default();
        h.pools = vec![PoolCounters::new(2 << 20, 0, 0, Some(0), 0, Some(0))];
        h.nodes = nodes
            .iter()
            .map(|&n| {
                let mut i = NodeInfo::default();
                i.node = n;
                i
            })
            .collect();
        h
    }

    #[test]
    fn the_host_refuses_what_it_cannot_give() {
        let two = host(&[0, 1]);
        let huge = RunPageSize::Huge(1 << 30);
        assert_eq!(
            check_host(&two, huge, None, Policy::Try),
            Err(HostRefusal::PageSize {
                page_size: 1 << 30,
                offered: vec![2 << 20]
            })
        );
        let keep = RunPageSize::Keep;
        assert_eq!(
            check_host(&two, keep, None, Policy::Only),
            Ok(Some(Placement::Default))
        );
        let bind = Placement::Bind(vec![1, 2]);
        assert_eq!(
            check_host(&two, keep, Some(&bind), Policy::Try),
            Err(HostRefusal::NoSuchNode {
                node: 2,
                nodes: vec![0, 1]
            })
        );
        let pref = Placement::Preferred(1);
        assert_eq!(
            check_host(&two, keep, Some(&pref), Policy::Only),
            Ok(Some(pref.clone()))
        );
        // One node: nothing to place; refused under only, dropped under try.
        let one = host(&[0]);
        assert_eq!(
            check_host(&one, keep, Some(&pref), Policy::Only),
            Err(HostRefusal::TooFewNodes { nodes: 1 })
        );
        assert_eq!(check_host(&one, keep, Some(&pref), Policy::Try), Ok(None));
    }
}
