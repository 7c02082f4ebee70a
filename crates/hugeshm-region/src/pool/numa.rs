//! The per-node check: a hugetlb plan placed on some NUMA nodes (bound or
//! interleaved) against those nodes' pools, before the system call.

use hugeshm_fix::Fix;
use hugeshm_probe::HostSnapshot;

use super::{Backing, Plan};
use crate::error::RegionError;
use crate::model::NodeNeed;

/// Each node's share of `pages` pages interleaved over `nodes`: even for
/// interleave, by the node's weight (default 1) for weighted interleave;
/// the pages that do not divide evenly go one each to the first nodes, as
/// the rounds do.
pub(crate) fn interleave_shares(
    host: &HostSnapshot,
    nodes: &[u32],
    weighted: bool,
    pages: u64,
) -> Vec<(u32, u64)> {
    let weight = |n: u32| -> u64 {
        host.nodes
            .iter()
            .find(|i| i.node == n)
            .and_then(|i| i.interleave_weight)
            .filter(|_| weighted)
            .unwrap_or(1)
            .max(1)
    };
    let total: u64 = nodes.iter().map(|&n| weight(n)).sum::<u64>().max(1);
    let mut left = pages
        - nodes
            .iter()
            .map(|&n| pages * weight(n) / total)
            .sum::<u64>();
    nodes
        .iter()
        .map(|&n| {
            let extra = u64::from(left > 0);
            left -= extra;
            (n, pages * weight(n) / total + extra)
        })
        .collect()
}

/// The NUMA side of the pool check, before the system call: for a hugetlb
/// plan placed on some nodes (by `--numa`, or the caller's own policy),
/// whether those nodes' pools hold it. `bind`: their free pages together;
/// `interleave`: each node its share. `None` when it fits or no node
/// constraint applies (preferred falls back to other nodes by itself).
pub(crate) fn numa_check(
    host: &HostSnapshot,
    plan: &Plan,
    policy: &hugeshm_sys::MemPolicy,
    described: &str,
) -> Option<RegionError> {
    use hugeshm_sys::MemPolicy;
    if plan.backing != Backing::Hugetlb || host.node_pools.is_empty() {
        return None;
    }
    let page = plan.page_size.max(1);
    let required = plan.size_bytes / page;
    let pool = |n: u32| {
        host.node_pools
            .iter()
            .find(|p| p.node == n && p.counters.page_size_bytes == plan.page_size)
            .map(|p| (p.counters.free, p.counters.nr))
            .unwrap_or((0, 0))
    };
    let needs: Vec<NodeNeed> = match policy {
        MemPolicy::Bind(nodes) => {
            let free: u64 = nodes.iter().map(|&n| pool(n).0).sum();
            if free >= required {
                return None;
            }
            // What is missing goes to the first node that can take it: the
            // one with the most free pages.
            let mut left = required;
            let mut sorted = nodes.clone();
            sorted.sort_by_key(|&n| std::cmp::Reverse(pool(n).0));
            sorted
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let (free, nr) = pool(n);
                    let share = if i + 1 == sorted.len() {
                        left
                    } else {
                        left.min(free)
                    };
                    left -= share;
                    NodeNeed {
                        node: n,
                        required: share,
                        available: free,
                        nr_hugepages: nr,
                    }
                })
                .collect()
        }
        MemPolicy::Interleave(nodes) | MemPolicy::WeightedInterleave(nodes) => {
            let weighted = matches!(policy, MemPolicy::WeightedInterleave(_));
            let needs: Vec<NodeNeed> = interleave_shares(host, nodes, weighted, required)
                .into_iter()
                .map(|(n, share)| {
                    let (free, nr) = pool(n);
                    NodeNeed {
                        node: n,
                        required: share,
                        available: free,
                        nr_hugepages: nr,
                    }
                })
                .collect();
            if needs.iter().all(|n| n.available >= n.required) {
                return None;
            }
            needs
        }
        MemPolicy::Default | MemPolicy::Preferred(_) => return None,
    };
    let short: Vec<(u32, u64)> = needs
        .iter()
        .filter(|n| n.available < n.required)
        .map(|n| (n.node, n.nr_hugepages + (n.required - n.available)))
        .collect();
    Some(RegionError::NodeShortfall {
        page_size_bytes: plan.page_size,
        policy: described.to_owned(),
        nodes: needs,
        fix: Box::new(Fix::SetNodePools {
            page_size_bytes: plan.page_size,
            pools: short,
        }),
    })
}
