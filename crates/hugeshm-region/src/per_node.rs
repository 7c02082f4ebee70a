//! Per-node regions, the way Oracle builds its NUMA buffer pools: one
//! sub-region per NUMA node with memory, `NAME.node0`, `NAME.node1`, ...,
//! each bound to its node (strict `mbind`) and pre-faulted from that node's
//! CPUs, created from the highest node down. The pools of every node are
//! checked before anything is created, so that a short pool lists every
//! short node with its numbers (Oracle's alert log prints `allocated`,
//! `free` and `required` per node; here it is an error under `only`, a
//! whole fall-back to base pages under `try`). A part that fails takes the
//! parts created before it with it: a set is made whole or not at all.

use hugeshm_sys::MemPolicy;

use crate::create::RegionBuilder;
use crate::error::RegionError;
use crate::handle::Region;
use crate::model::{PageSize, Placement};
use crate::pool::HostExtra;
use crate::report::AllocationReport;
use crate::{verify, Locator};

/// One part of a per-node set: the node and its region.
#[derive(Debug)]
pub struct NodeRegion {
    /// The node the region is bound to.
    pub node: u32,
    /// The region.
    pub region: Region,
}

/// The name of `name`'s part on `node`: `NAME.nodeN`.
pub fn part_name(name: &str, node: u32) -> String {
    format!("{name}.node{node}")
}

/// The nodes a per-node set spans: those with memory (CPU-less memory
/// nodes, such as CXL expanders, included), in ascending order; node 0
/// alone where the kernel shows no node.
pub(crate) fn memory_nodes(host: &hugeshm_probe::HostSnapshot) -> Vec<u32> {
    let mut nodes: Vec<u32> = host
        .nodes
        .iter()
        .filter(|n| {
            n.meminfo
                .as_ref()
                .and_then(|m| m.mem_total_bytes)
                .is_none_or(|b| b > 0)
        })
        .map(|n| n.node)
        .collect();
    nodes.sort_unstable();
    if nodes.is_empty() {
        nodes.push(0);
    }
    nodes
}

impl RegionBuilder {
    /// Creates one region per NUMA node with memory, each of
    /// `size / nodes` bytes (rounded up to the page size), bound to its
    /// node (strict `mbind`), pre-faulted from that node's CPUs and named
    /// `NAME.nodeN` when the builder has a name, from the highest node
    /// down, like Oracle's NUMA buffer pools. The placement set with
    /// [`numa`](RegionBuilder::numa) is ignored. Returns the parts in node
    /// order with their reports.
    ///
    /// Before anything is created, the page size is chosen for one part
    /// and every node's pool is checked for its part
    /// ([`RegionError::NodeShortfall`] lists the nodes with their numbers,
    /// and the per-node fix); `try` then puts every part on base pages,
    /// each report saying why. A part that fails takes the parts created
    /// before it with it: on error nothing is left behind.
    pub fn create_per_node(self) -> Result<Vec<(NodeRegion, AllocationReport)>, RegionError> {
        let host = self.probe_ref().host_for_regions();
        let nodes = memory_nodes(&host);
        let count = nodes.len() as u64;
        let extra = HostExtra {
            base: hugeshm_sys::base_page_size() as u64,
            pmd_size: verify::pmd_size(self.probe_ref()),
        };
        let part_size = self.size_bytes().div_ceil(count);
        // The page size, from one part's plan; then the whole set against
        // the pools (and the hugetlb cgroup) node by node: an even split
        // over the nodes is exactly one part per node.
        let part = self.clone().sized(part_size);
        let (_, part_plan) = part.checked_plan(&host, &extra, None)?;
        let mut fallback = part_plan.fallback.clone();
        if fallback.is_none() && part_plan.is_huge() {
            let whole = self
                .clone()
                .sized(part_plan.size_bytes.saturating_mul(count))
                .page_size(PageSize::Huge(part_plan.page_size));
            let policy = MemPolicy::Interleave(nodes.clone());
            let (_, plan) =
                whole.checked_plan(&host, &extra, Some((policy, "--numa per-node".to_owned())))?;
            fallback = plan.fallback;
        }
        let page_size = if fallback.is_some() || !part_plan.is_huge() {
            PageSize::Base
        } else {
            PageSize::Huge(part_plan.page_size)
        };

        let mut made: Vec<(NodeRegion, AllocationReport)> = Vec::new();
        for &node in nodes.iter().rev() {
            let mut b = part
                .clone()
                .page_size(page_size)
                .numa(Placement::Bind(vec![node]));
            if let Some(name) = self.name_ref() {
                b = b.name(part_name(name, node));
            }
            match b.create() {
                Ok((region, mut report)) => {
                    report.requested_page_size = self.page_size_ref();
                    if let Some(f) = &fallback {
                        report.fallback = Some(f.clone());
                    }
                    made.push((NodeRegion { node, region }, report));
                }
                Err(e) => {
                    for (part, _) in made {
                        if let Err(d) = part.region.destroy() {
                            log::warn!("removing node {}'s part after a failure: {d}", part.node);
                        }
                    }
                    return Err(e);
                }
            }
        }
        made.reverse();
        Ok(made)
    }
}

impl Locator {
    /// The node this locator's name is for, and the locator of each part
    /// of the per-node set of that name (`NAME.nodeN`, every node with
    /// memory). Size expectations do not carry over: each part is checked
    /// by its own header.
    fn parts(&self) -> Vec<(u32, Locator)> {
        let host = self.probe_ref().host_for_regions();
        memory_nodes(&host)
            .into_iter()
            .map(|n| (n, self.renamed(&part_name(self.name(), n))))
            .collect()
    }

    /// Attaches every part of the per-node set this locator names (made by
    /// [`RegionBuilder::create_per_node`]), in node order. A missing part
    /// is [`RegionError::NotFound`] for that part's name; the parts
    /// attached before it are detached.
    pub fn attach_per_node(&self) -> Result<Vec<NodeRegion>, RegionError> {
        let mut out = Vec::new();
        for (node, l) in self.parts() {
            out.push(NodeRegion {
                node,
                region: l.attach()?,
            });
        }
        Ok(out)
    }

    /// Removes every part of the per-node set this locator names, refusing
    /// (before removing anything) while any part is held or is not a
    /// hugeshm region; parts that do not exist are skipped, and none at
    /// all is [`RegionError::NotFound`]. Returns what was removed.
    pub fn remove_per_node(&self) -> Result<Vec<crate::NamedObject>, RegionError> {
        let parts = self.parts();
        // Every part checked first, so that a held part keeps the set whole.
        let mut found = Vec::new();
        for (_, l) in &parts {
            if l.remove_check()? {
                found.push(l);
            }
        }
        if found.is_empty() {
            return Err(self.not_found());
        }
        let mut removed = Vec::new();
        for l in found {
            removed.extend(l.remove()?);
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_probe::{HostSnapshot, NodeInfo};

    fn node(n: u32, mem: Option<u64>) -> NodeInfo {
        let mut i = NodeInfo::default();
        i.node = n;
        i.meminfo = mem.map(|b| {
            let mut m = hugeshm_parse::node::NodeMeminfo::default();
            m.mem_total_bytes = Some(b);
            m
        });
        i
    }

    #[test]
    fn memory_nodes_skip_empty_nodes_and_keep_cpu_less_ones() {
        let mut h = HostSnapshot::default();
        assert_eq!(memory_nodes(&h), vec![0]);
        h.nodes = vec![
            node(2, Some(1 << 30)),
            node(0, Some(1 << 30)),
            node(1, Some(0)),
        ];
        assert_eq!(memory_nodes(&h), vec![0, 2]);
        h.nodes.push(node(3, None));
        assert_eq!(memory_nodes(&h), vec![0, 2, 3]);
    }

    #[test]
    fn part_names() {
        assert_eq!(part_name("sga", 1), "sga.node1");
    }
}
