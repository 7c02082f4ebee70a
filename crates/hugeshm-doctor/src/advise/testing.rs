//! A host and look-ups for the unit tests of `advise`.

use super::model::{Plan, PlanPool};
use hugeshm_parse::hugepages::PoolCounters;
use hugeshm_parse::meminfo::Meminfo;
use hugeshm_parse::size::{GIB, MIB};
use hugeshm_probe::HostSnapshot;

pub(super) const M2: u64 = 2 * MIB;

pub(super) fn host(nodes: u32) -> HostSnapshot {
    let mut h = HostSnapshot::default();
    let mut m = Meminfo::default();
    m.mem_total_bytes = Some(64 * GIB);
    m.hugepagesize_bytes = Some(M2);
    m.hugepages_total = Some(10);
    h.meminfo = Some(m);
    h.hugetlb_sysfs = true;
    h.pools = vec![
        PoolCounters::new(M2, 10, 10, Some(0), 0, Some(0)),
        PoolCounters::new(GIB, 0, 0, Some(0), 0, Some(0)),
    ];
    for n in 0..nodes {
        let mut info: hugeshm_probe::NodeInfo = serde_json::from_value(serde_json::json!({
            "node": n, "cpus": [n], "distance": [], "meminfo": {"mem_total_bytes": 32u64 * GIB,
            "mem_free_bytes": null, "mem_used_bytes": null, "shmem_bytes": null, "page_tables_bytes": null,
            "hugepages_total": null, "hugepages_free": null}
        }))
        .unwrap();
        info.node = n;
        h.nodes.push(info);
    }
    h
}

pub(super) fn pool(p: &Plan, size: u64, node: Option<u32>) -> &PlanPool {
    p.pools
        .iter()
        .find(|x| x.page_size_bytes == size && x.node == node)
        .unwrap_or_else(|| panic!("no pool {size} {node:?} in {:?}", p.pools))
}

/// A host of one node whose 1 GiB pool has 2 free pages that can be
/// demoted to 2 MiB pages.
pub(super) fn host_that_can_demote() -> HostSnapshot {
    let mut h = host(1);
    h.pools[1] = PoolCounters::new(GIB, 3, 2, Some(0), 0, Some(0));
    h.demote = serde_json::from_value(serde_json::json!([
        {"page_size_bytes": GIB, "demote_size_bytes": M2}
    ]))
    .unwrap();
    h
}
