//! NUMA placement on a multi-node host: pools uneven against the nodes'
//! CPUs and memory (`pool-uneven`), per-node pools that a plain
//! `vm.nr_hugepages` cannot restore at boot (the kernel splits it evenly),
//! and tmpfs mounts without `mpol=` (`tmpfs-no-mpol`), whose files sit on the
//! node of whoever touched them first ("Cyclops").
//!
//! Everything here reads a [`HostSnapshot`] only, so it runs the same on a
//! fixture tree; `status` and `segments` call it.

use crate::finding::{Finding, Severity};
use hugeshm_fix::{nr_hugepages_path, pool_command};
use hugeshm_parse::mounts::Mount;
use hugeshm_parse::size::{format_bytes, page_size_short, MIB};
use hugeshm_probe::HostSnapshot;
use std::collections::BTreeMap;

/// A segment (or the tmpfs files on a mount) with less than this resident
/// is too small for a placement finding.
pub const PLACEMENT_MIN_BYTES: u64 = 64 * MIB;

/// One node's pool of one page size, with what the node has.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeShare {
    node: u32,
    /// Persistent pages (`nr_hugepages` less surplus).
    pages: u64,
    /// Pages in use (faulted in) on the node.
    in_use: u64,
    cpus: usize,
    mem: Option<u64>,
    /// The node's fair share of the pool's pages.
    share: u64,
}

/// The nodes with memory (a memoryless node has no pool the kernel fills).
fn memory_nodes(host: &HostSnapshot) -> Vec<u32> {
    host.nodes
        .iter()
        .filter(|n| {
            n.meminfo
                .as_ref()
                .and_then(|m| m.mem_total_bytes)
                .is_none_or(|t| t > 0)
        })
        .map(|n| n.node)
        .collect()
}

/// Whether the host has more than one NUMA node with memory.
pub fn multi_node(host: &HostSnapshot) -> bool {
    memory_nodes(host).len() > 1
}

/// Per node, the persistent pages of the `page_size` pool (nodes with
/// memory only, ascending).
pub fn node_pages(host: &HostSnapshot, page_size: u64) -> Vec<(u32, u64)> {
    let nodes = memory_nodes(host);
    let mut out: Vec<(u32, u64)> = host
        .node_pools
        .iter()
        .filter(|p| p.counters.page_size_bytes == page_size && nodes.contains(&p.node))
        .map(|p| (p.node, p.counters.persistent()))
        .collect();
    out.sort_unstable();
    out
}

/// Whether the per-node pools of `page_size` are what the kernel makes of a
/// host-wide count (`vm.nr_hugepages`, `hugepages=N`): an even split, no
/// two nodes more than one page apart. True on a one-node host.
pub fn split_is_even(host: &HostSnapshot, page_size: u64) -> bool {
    let pages = node_pages(host, page_size);
    let max = pages.iter().map(|p| p.1).max().unwrap_or(0);
    let min = pages.iter().map(|p| p.1).min().unwrap_or(0);
    pages.len() < 2 || max - min <= 1
}

/// `node 0 holds 100, node 1 holds 20` style list: `100 on node 0 and 20 on node 1`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The configuration that restores the per-node split of `page_size` at
/// boot, as a fix: per-node tmpfiles.d lines, or the per-node kernel command
/// line. `None` when the split is even (a host-wide count restores it).
pub fn per_node_persist_fix(host: &HostSnapshot, page_size: u64) -> Option<String> {
    if split_is_even(host, page_size) {
        return None;
    }
    let pages = node_pages(host, page_size);
    let lines: Vec<String> = pages
        .iter()
        .map(|(n, p)| format!("w {} - - - - {p}", nr_hugepages_path(page_size, Some(*n))))
        .collect();
    let split: Vec<String> = pages.iter().map(|(n, p)| format!("{n}:{p}")).collect();
    Some(format!(
        "printf '{}\\n' > /etc/tmpfiles.d/60-hugeshm.conf   # or hugepagesz={} hugepages={} on the kernel command line; not vm.nr_hugepages, which the kernel splits evenly over the nodes",
        lines.join("\\n"),
        page_size_short(page_size),
        split.join(",")
    ))
}

/// The split of a host-wide count over the nodes as the kernel makes it:
/// `100 on node 0 and 20 on node 1` now against `60 and 60` at boot.
pub fn split_text(host: &HostSnapshot, page_size: u64) -> (String, String) {
    let pages = node_pages(host, page_size);
    let total: u64 = pages.iter().map(|p| p.1).sum();
    let k = pages.len().max(1) as u64;
    let now: Vec<String> = pages
        .iter()
        .map(|(n, p)| format!("{p} on node {n}"))
        .collect();
    let even: Vec<String> = (0..k)
        .map(|i| (total / k + u64::from(i < total % k)).to_string())
        .collect();
    (and_list(&now), and_list(&even))
}

/// Largest-remainder shares of `total` by `weights` (ties to the lowest index).
fn shares(total: u64, weights: &[u64]) -> Vec<u64> {
    let w: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if w == 0 {
        return vec![0; weights.len()];
    }
    let mut out: Vec<u64> = weights
        .iter()
        .map(|x| (u128::from(total) * u128::from(*x) / w) as u64)
        .collect();
    let mut left = total - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(u128::from(total) * u128::from(weights[i]) % w));
    for i in order {
        if left == 0 {
            break;
        }
        out[i] += 1;
        left -= 1;
    }
    out
}

/// The nodes of one pool with their fair shares: by CPUs (where processes
/// run is where their memory should be), by memory where no node lists
/// CPUs. Nodes without CPUs on a host where others have some are left out
/// (CXL or persistent memory nodes: remote to everyone by design).
fn node_shares(host: &HostSnapshot, page_size: u64) -> Vec<NodeShare> {
    let mut rows: Vec<NodeShare> = Vec::new();
    for (node, pages) in node_pages(host, page_size) {
        let info = host.nodes.iter().find(|n| n.node == node);
        let in_use = host
            .node_pools
            .iter()
            .find(|p| p.node == node && p.counters.page_size_bytes == page_size)
            .map(|p| p.counters.nr.saturating_sub(p.counters.free))
            .unwrap_or(0);
        rows.push(NodeShare {
            node,
            pages,
            in_use,
            cpus: info.map(|n| n.cpus.len()).unwrap_or(0),
            mem: info
                .and_then(|n| n.meminfo.as_ref())
                .and_then(|m| m.mem_total_bytes),
            share: 0,
        });
    }
    if rows.iter().any(|r| r.cpus > 0) {
        rows.retain(|r| r.cpus > 0);
    }
    let weights: Vec<u64> = if rows.iter().any(|r| r.cpus > 0) {
        rows.iter().map(|r| r.cpus as u64).collect()
    } else if rows.iter().all(|r| r.mem.is_some()) {
        rows.iter().map(|r| r.mem.unwrap_or(0) / MIB).collect()
    } else {
        vec![1; rows.len()]
    };
    let total: u64 = rows.iter().map(|r| r.pages).sum();
    for (r, s) in rows.iter_mut().zip(shares(total, &weights)) {
        r.share = s;
    }
    rows
}

/// Whether two memory sizes are alike (within 10 %).
fn alike(a: Option<u64>, b: Option<u64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b).saturating_mul(10) <= a.max(b),
        _ => a.is_none() && b.is_none(),
    }
}

fn cpus_text(n: usize) -> String {
    format!("{n} CPU{}", if n == 1 { "" } else { "s" })
}

fn mem_text(m: Option<u64>) -> String {
    m.map(format_bytes).unwrap_or_else(|| "? memory".into())
}

/// `pool-uneven`: on a multi-node host, a pool whose per-node pages are far
/// from each node's share by CPUs (by memory where no node lists CPUs): a
/// node with too few pages gives its processes remote huge pages, and a
/// region bound to it fails early. Returns the findings and the page sizes
/// they cover (`pool-one-node` is not said of those).
pub fn uneven_pools(host: &HostSnapshot) -> (Vec<Finding>, Vec<u64>) {
    let mut out = Vec::new();
    let mut sizes = Vec::new();
    if !multi_node(host) {
        return (out, sizes);
    }
    let default = host.default_page_size();
    for pool in &host.pools {
        let size = pool.page_size_bytes;
        let rows = node_shares(host, size);
        if rows.len() < 2 {
            continue;
        }
        let off = |r: &NodeShare| r.pages.abs_diff(r.share);
        if !rows
            .iter()
            .any(|r| off(r) >= 2 && off(r).saturating_mul(4) > r.share)
        {
            continue;
        }
        // The node that lacks most, against its share.
        let Some(short) = rows
            .iter()
            .filter(|r| r.pages < r.share)
            .max_by_key(|r| (r.share - r.pages, std::cmp::Reverse(r.node)))
        else {
            continue;
        };
        let held: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                if i == 0 {
                    format!("node {} holds {} pages", r.node, r.pages)
                } else {
                    format!("node {} holds {}", r.node, r.pages)
                }
            })
            .collect();
        let share: Vec<String> = rows.iter().map(|r| r.share.to_string()).collect();
        let share = and_list(&share);
        let mems: Vec<String> = rows.iter().map(|r| mem_text(r.mem)).collect();
        let by_cpus = rows.iter().any(|r| r.cpus > 0);
        let same_mem = rows.iter().all(|r| alike(r.mem, rows[0].mem));
        let (have, split_by) = if by_cpus && rows.iter().all(|r| r.cpus == rows[0].cpus) {
            let have = if same_mem {
                format!(
                    "the nodes have {} and {} each",
                    cpus_text(rows[0].cpus),
                    mems[0]
                )
            } else {
                format!(
                    "the nodes have {} each (and {} of memory)",
                    cpus_text(rows[0].cpus),
                    and_list(&mems)
                )
            };
            (have, format!("an even split is {share}"))
        } else if by_cpus {
            let each: Vec<String> = rows
                .iter()
                .map(|r| {
                    format!(
                        "node {} has {} and {}",
                        r.node,
                        cpus_text(r.cpus),
                        mem_text(r.mem)
                    )
                })
                .collect();
            (each.join(", "), format!("split by CPUs it is {share}"))
        } else if rows.iter().all(|r| r.mem.is_some()) && !same_mem {
            (
                format!(
                    "the nodes list no CPUs and have {} of memory",
                    and_list(&mems)
                ),
                format!("split by memory it is {share}"),
            )
        } else {
            (
                "the nodes list no CPUs".to_string(),
                format!("an even split is {share}"),
            )
        };
        let message = format!(
            "{} pool uneven over the NUMA nodes: {}, while {}: {}. Processes on node {} get remote huge pages once its {} are used, and a region bound to node {} can have no more than {}",
            format_bytes(size),
            and_list(&held),
            have,
            split_by,
            short.node,
            short.pages,
            short.node,
            short.pages
        );
        // The fix: every node to its share, never below what is in use
        // there; shrinks first (they free memory for the growths).
        let mut targets: Vec<(u32, u64, u64)> = rows
            .iter()
            .map(|r| (r.node, r.pages, r.share.max(r.in_use)))
            .collect();
        targets.sort_by_key(|(n, now, want)| (want >= now, *n));
        let cmds: Vec<String> = targets
            .iter()
            .filter(|(_, now, want)| now != want)
            .map(|(n, _, want)| pool_command(size, *want, default == Some(size), Some(*n)))
            .collect();
        let mut split: Vec<(u32, u64)> = targets.iter().map(|(n, _, w)| (*n, *w)).collect();
        split.sort_unstable();
        let split: Vec<String> = split.iter().map(|(n, w)| format!("{n}:{w}")).collect();
        let fix = format!(
            "{}   # unless a server bound to a node needs them where they are; at boot: hugepagesz={} hugepages={} on the kernel command line, or these writes in tmpfiles.d",
            cmds.join(" && "),
            page_size_short(size),
            split.join(",")
        );
        out.push(Finding::new(
            Severity::Warning,
            "pool-uneven",
            message,
            Some(fix),
        ));
        sizes.push(size);
    }
    (out, sizes)
}

/// The tmpfs mount a path lives on (the longest mount point above it).
pub fn tmpfs_mount_of<'a>(host: &'a HostSnapshot, path: &str) -> Option<&'a Mount> {
    host.mounts
        .iter()
        .filter(|m| m.is_tmpfs())
        .filter(|m| {
            m.target == "/"
                || path
                    .strip_prefix(m.target.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
        .max_by_key(|m| m.target.len())
}

/// The command that interleaves the new pages of a tmpfs mount.
pub fn mpol_remount(target: &str) -> String {
    format!(
        "mount -o remount,mpol=interleave {}",
        hugeshm_fix::shell_quote(target)
    )
}

/// `tmpfs-no-mpol`: on a multi-node host, tmpfs mounts that `status` lists
/// (`/dev/shm`, and those with `huge=`) without `mpol=`: each page of their
/// files goes to the node of the process that first touches it. A warning
/// where `resident` (bytes of tmpfs files on the mount, by mount point)
/// reaches [`PLACEMENT_MIN_BYTES`], information otherwise.
pub fn tmpfs_findings(host: &HostSnapshot, resident: &BTreeMap<String, u64>) -> Vec<Finding> {
    let mut out = Vec::new();
    let nodes = memory_nodes(host).len();
    if nodes < 2 {
        return out;
    }
    for m in host.mounts.iter().filter(|m| {
        m.is_tmpfs()
            && m.option("mpol").is_none()
            && (m.target == "/dev/shm" || m.option("huge").is_some())
    }) {
        let bytes = resident.get(&m.target).copied().unwrap_or(0);
        let (sev, now) = if bytes >= PLACEMENT_MIN_BYTES {
            (
                Severity::Warning,
                format!("; its files hold {} now", format_bytes(bytes)),
            )
        } else if bytes > 0 {
            (
                Severity::Info,
                format!("; its files hold {} now", format_bytes(bytes)),
            )
        } else {
            (Severity::Info, String::new())
        };
        let boot = if m.target == "/dev/shm" {
            "tmpfs /dev/shm tmpfs defaults,mpol=interleave 0 0 in /etc/fstab".to_string()
        } else {
            format!(
                "add mpol=interleave to the options of {} in /etc/fstab",
                m.target
            )
        };
        out.push(Finding::new(
            sev,
            "tmpfs-no-mpol",
            format!(
                "tmpfs {} has no mpol= on a host with {nodes} NUMA nodes: each page of its files goes to the node of the process that first touches it, so a file one process writes sits all on that process's node (\"Cyclops\"){now}",
                m.target
            ),
            Some(format!(
                "{}   # files created from now on interleave their pages over the nodes; existing files keep theirs; at boot: {boot}",
                mpol_remount(&m.target)
            )),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_by_weight_with_the_remainder_to_the_largest_fractions() {
        assert_eq!(shares(120, &[1, 1]), vec![60, 60]);
        assert_eq!(shares(121, &[1, 1]), vec![61, 60]);
        assert_eq!(shares(120, &[2, 1]), vec![80, 40]);
        assert_eq!(shares(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(shares(5, &[0, 0]), vec![0, 0]);
    }
}
