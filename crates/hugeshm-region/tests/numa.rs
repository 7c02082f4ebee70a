//! NUMA placement on this host's real pools (the 2-node cases run in a
//! QEMU guest: hugeshm's tests/guest_numa_region.rs): a per-node set is
//! created with one part per node with memory, each bound to its node and
//! named NAME.nodeN, attached as a set, refused removal while a part is
//! held, then removed whole; `create` itself refuses per-node.

mod common;

use common::*;
use hugeshm_region::{Backend, Locator, PageSize, Placement, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

fn nodes_with_memory() -> Vec<u32> {
    let mut nodes: Vec<u32> = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    nodes.retain(|n| {
        std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/meminfo"))
            .map(|t| !t.contains("MemTotal:              0 kB"))
            .unwrap_or(true)
    });
    nodes.sort_unstable();
    if nodes.is_empty() {
        nodes.push(0);
    }
    nodes
}

#[test]
fn per_node_set_is_created_attached_and_removed_whole() {
    let Some(pool) = live!() else {
        return;
    };
    let nodes = nodes_with_memory();
    pool.ensure_free(MIB2, 2 * nodes.len() as u64).unwrap();
    let before = HostState::capture().unwrap();
    let name = unique("pernode");
    let mut parts = RegionBuilder::new(2 * MIB2 * nodes.len() as u64)
        .name(&name)
        .backend(Backend::Sysv)
        .page_size(PageSize::Huge(MIB2))
        .policy(Policy::Only)
        .create_per_node()
        .unwrap();
    assert_eq!(parts.iter().map(|(p, _)| p.node).collect::<Vec<_>>(), nodes);
    for (p, r) in &mut parts {
        assert_eq!(
            r.name.as_deref(),
            Some(format!("{name}.node{}", p.node).as_str())
        );
        assert_eq!(r.placement, Placement::Bind(vec![p.node]));
        assert_eq!(r.verified_page_size_bytes, MIB2);
        assert_eq!(
            r.node_bytes.get(&p.node.to_string()).copied(),
            Some(2 * MIB2),
            "{r:#?}"
        );
        p.region
            .write_at(p.region.data_offset(), &[p.node as u8 + 1])
            .unwrap();
    }

    // Attached as a set, in node order, with what each part holds.
    let l = Locator::new(&name, Backend::Sysv);
    let attached = l.attach_per_node().unwrap();
    assert_eq!(attached.len(), nodes.len());
    for a in &attached {
        let mut b = [0u8];
        a.region.read_at(a.region.data_offset(), &mut b).unwrap();
        assert_eq!(b[0], a.node as u8 + 1);
    }
    // Held: the whole set stays.
    let err = l.remove_per_node().unwrap_err();
    assert!(matches!(err, RegionError::InUse { .. }), "{err}");
    for a in attached {
        a.region.close().unwrap();
    }
    for (p, _) in parts {
        p.region.close().unwrap();
    }
    let removed = l.remove_per_node().unwrap();
    assert_eq!(removed.len(), nodes.len());
    assert!(matches!(
        l.remove_per_node().unwrap_err(),
        RegionError::NotFound { .. }
    ));
    assert!(before.diff(&HostState::capture().unwrap()).is_empty());
    pool.finish();
}

#[test]
fn create_refuses_per_node() {
    let err = RegionBuilder::new(MIB2)
        .numa(Placement::PerNode)
        .create()
        .unwrap_err();
    assert!(err.to_string().contains("create_per_node"), "{err}");
}

/// Weighted interleave where the kernel has it (6.9+): the pages split
/// over the nodes as their weights in
/// `/sys/kernel/mm/mempolicy/weighted_interleave` ask: the region is whole
/// rounds of their sum, and each node takes its weight's pages of every
/// round. On one node that is every page; the split over two (weights 1
/// and 3) and the refusal on older kernels are checked in the guest
/// (hugeshm's tests/guest/guest_numa_region.rs).
#[test]
fn weighted_interleave_where_the_kernel_has_it() {
    let Some(pool) = live!() else {
        return;
    };
    let dir = std::path::Path::new("/sys/kernel/mm/mempolicy/weighted_interleave");
    if !dir.is_dir() {
        return pool.skip_lacking(Lack::WeightedInterleave, "kernel before 6.9");
    }
    let nodes = nodes_with_memory();
    // A node without its file weighs 1, as the kernel takes it.
    let weights: Vec<u64> = nodes
        .iter()
        .map(
            |n| match std::fs::read_to_string(dir.join(format!("node{n}"))) {
                Ok(w) => w
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("node{n}: {w:?}: {e}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => 1,
                Err(e) => panic!("node{n}'s weight: {e}"),
            },
        )
        .collect();
    let round: u64 = weights.iter().sum();
    // At least two pages a node, in whole rounds.
    let rounds = (2 * nodes.len() as u64).div_ceil(round);
    let pages = rounds * round;
    pool.ensure_free(MIB2, pages).unwrap();
    let before = HostState::capture().unwrap();
    let (region, report) = RegionBuilder::new(pages * MIB2)
        .backend(Backend::Anon)
        .page_size(PageSize::Huge(MIB2))
        .policy(Policy::Only)
        .numa(Placement::WeightedInterleave(Vec::new()))
        .create()
        .unwrap();
    assert_eq!(report.verified_page_size_bytes, MIB2);
    let want: std::collections::BTreeMap<String, u64> = nodes
        .iter()
        .zip(&weights)
        .map(|(n, w)| (n.to_string(), rounds * w * MIB2))
        .collect();
    assert_eq!(
        report.node_bytes, want,
        "weights {weights:?} of nodes {nodes:?}: {report:#?}"
    );
    region.close().unwrap();
    assert!(before.diff(&HostState::capture().unwrap()).is_empty());
    pool.finish();
}
