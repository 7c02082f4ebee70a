//! From a [`Placement`] to the kernel's terms: the memory policy to `mbind`
//! a mapping with, the one to check the pools against (and how to name
//! it), and the CPUs to pre-fault from. Used by `create` and by the
//! `hugeshm run` interposer ([`crate::run`]).

use hugeshm_probe::HostSnapshot;
use hugeshm_sys::MemPolicy;

use crate::model::Placement;

/// The policy to `mbind` the mapping with: the placement asked for (the
/// caller's own policy applies by itself).
pub(crate) fn mbind_policy(numa: &Placement, host: &HostSnapshot) -> Option<MemPolicy> {
    match numa {
        Placement::Default => None,
        _ => effective_policy(numa, host).map(|(p, _)| p),
    }
}

/// The memory policy to check the plan against, and how to name it: the
/// placement asked for, else the caller's own bind or interleave.
pub(crate) fn effective_policy(
    numa: &Placement,
    host: &HostSnapshot,
) -> Option<(MemPolicy, String)> {
    let all = || host.nodes.iter().map(|n| n.node).collect::<Vec<u32>>();
    let or_all = |n: &Vec<u32>| if n.is_empty() { all() } else { n.clone() };
    let asked = match numa {
        // create() refuses it; each part is bound to its node.
        Placement::Default | Placement::PerNode => None,
        Placement::Bind(n) => Some(MemPolicy::Bind(n.clone())),
        Placement::Interleave(n) => Some(MemPolicy::Interleave(or_all(n))),
        Placement::Preferred(n) => Some(MemPolicy::Preferred(*n)),
        Placement::WeightedInterleave(n) => Some(MemPolicy::WeightedInterleave(or_all(n))),
    };
    match asked {
        Some(p) => Some((p, format!("--numa {numa}"))),
        None => match hugeshm_sys::thread_mempolicy() {
            Ok(p @ (MemPolicy::Bind(_) | MemPolicy::Interleave(_))) => {
                let d = format!("the caller's memory policy {p} (numactl)");
                Some((p, d))
            }
            _ => None,
        },
    }
}

/// The CPUs to pre-fault from: those of the nodes a bound or preferred
/// region lives on that this process may use (zeroing a page is then
/// local); empty (no pinning) otherwise, or when those nodes have no CPU
/// this process may use (a CPU-less CXL node).
pub(crate) fn fault_cpus(numa: &Placement, host: &HostSnapshot) -> Vec<u32> {
    let nodes = match effective_policy(numa, host) {
        Some((MemPolicy::Bind(n), _)) => n,
        Some((MemPolicy::Preferred(n), _)) => vec![n],
        _ => return Vec::new(),
    };
    let allowed = hugeshm_sys::affinity().unwrap_or_default();
    let mut cpus: Vec<u32> = host
        .nodes
        .iter()
        .filter(|n| nodes.contains(&n.node))
        .flat_map(|n| n.cpus.iter().copied())
        .filter(|c| allowed.contains(c))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}
