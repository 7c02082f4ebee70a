//! The plan's types: what is asked for ([`Demand`]), what a plan is made
//! of ([`Plan`]: pools, what was counted and skipped, the configuration
//! that realises it, demotions) and the words that name its pools.
//! Plain data; imports nothing of `advise`.

use crate::finding::plural;
use hugeshm_parse::size::format_bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a region should live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "placement", content = "node")]
pub enum Placement {
    /// Anywhere: the host-wide pool (the kernel spreads it over the nodes).
    Any,
    /// On one node.
    Node(u32),
    /// Split evenly over every node.
    Spread,
}

impl Placement {
    /// A region's place as an option or a spec gives it: on `node`, else
    /// split over every node with `spread`, else anywhere.
    pub fn of(node: Option<u32>, spread: bool) -> Placement {
        match (node, spread) {
            (Some(n), _) => Placement::Node(n),
            (None, true) => Placement::Spread,
            _ => Placement::Any,
        }
    }
}

/// One region to plan for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Demand {
    /// What it is (`sysv 32769`, `--size 18G`, `postgres /var/lib/postgresql/15/main`).
    pub label: String,
    /// Bytes.
    pub bytes: u64,
    /// The huge page size it should use.
    pub page_size_bytes: u64,
    /// Where.
    pub placement: Placement,
    /// Pages it needs, when a server computed them itself (PostgreSQL's
    /// `shared_memory_size_in_huge_pages`); otherwise `ceil(bytes / page)`.
    pub pages: Option<u64>,
    /// A SysV segment owned by this non-root group (for `vm.hugetlb_shm_group`).
    pub sysv_gid: Option<u32>,
    /// A note to print with it.
    pub note: Option<String>,
    /// Pages per node where a live segment sits now (empty when unknown):
    /// where the plan splits its size per node, it is counted there.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<u32, u64>,
    /// The uid that owns it (a live segment's owner, a PostgreSQL data
    /// directory's), when known: the memlock setting names that user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_uid: Option<u32>,
    /// The systemd services of the processes that map it: limits.d does not
    /// apply to them, so the plan gives each a drop-in with its memlock limit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// Its server maps its huge pages with `mmap(MAP_HUGETLB)` and locks
    /// nothing (MariaDB 10.5+, a JVM without `-XX:+UseSHM`): no memlock
    /// limit binds it. A plan of such demands only writes no memlock lines.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memlock_free: bool,
}

impl Demand {
    /// A region of `bytes` on `page_size_bytes` pages, anywhere.
    pub fn new(label: impl Into<String>, bytes: u64, page_size_bytes: u64) -> Self {
        Demand {
            label: label.into(),
            bytes,
            page_size_bytes,
            placement: Placement::Any,
            pages: None,
            sysv_gid: None,
            note: None,
            nodes: BTreeMap::new(),
            owner_uid: None,
            units: Vec::new(),
            memlock_free: false,
        }
    }

    /// The same, for a server no memlock limit binds.
    pub fn memlock_free(mut self) -> Self {
        self.memlock_free = true;
        self
    }

    /// The same, owned by this uid.
    pub fn owned_by(mut self, uid: u32) -> Self {
        self.owner_uid = Some(uid);
        self
    }

    /// The same, mapped by processes of these systemd units.
    pub fn in_units(mut self, units: Vec<String>) -> Self {
        self.units = units;
        self
    }

    /// The same, with the pages it has on each node now.
    pub fn on_nodes(mut self, nodes: BTreeMap<u32, u64>) -> Self {
        self.nodes = nodes;
        self
    }

    /// The same, placed.
    pub fn placed(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// The same, with the server's own page count.
    pub fn with_pages(mut self, pages: u64) -> Self {
        self.pages = Some(pages);
        self
    }

    /// The same, with a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// The same, for a SysV segment of a non-root group.
    pub fn with_sysv_gid(mut self, gid: u32) -> Self {
        self.sysv_gid = Some(gid);
        self
    }

    /// Pages needed.
    pub fn pages_needed(&self) -> u64 {
        self.pages
            .unwrap_or_else(|| self.bytes.div_ceil(self.page_size_bytes.max(1)))
    }
}

/// Something the live-host source saw and did not count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skipped {
    /// What.
    pub label: String,
    /// Why.
    pub reason: String,
}

/// A counted region in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Counted {
    /// What.
    pub label: String,
    /// Bytes.
    pub bytes: u64,
    /// Page size.
    pub page_size_bytes: u64,
    /// Pages it needs (per the server, or rounded up).
    pub pages: u64,
    /// Where.
    pub placement: Placement,
    /// A note.
    pub note: Option<String>,
}

/// One pool of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanPool {
    /// Page size.
    pub page_size_bytes: u64,
    /// Node, or `None` for the host-wide pool.
    pub node: Option<u32>,
    /// Pages to reserve (needs plus spare).
    pub pages: u64,
    /// Of which spare.
    pub spare_pages: u64,
    /// Pages the pool holds now (`nr_hugepages`).
    pub current_pages: u64,
    /// `pages` in bytes.
    pub bytes: u64,
}

/// A file to write to persist the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConfigFile {
    /// Absolute path (under `/`).
    pub path: String,
    /// Contents.
    pub content: String,
}

/// The configuration that realises a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanConfig {
    /// Runtime commands (sysctl, or per-node sysfs writes).
    pub runtime: Vec<String>,
    /// Files to install (sysctl.d, tmpfiles.d for per-node pools, limits.d,
    /// the kernel command line snippet).
    pub files: Vec<ConfigFile>,
    /// Kernel command line words needed at boot (1 GiB pages, node splits).
    pub kernel_cmdline: Option<String>,
    /// The memlock limit for the server's user, KiB (limits.conf units).
    pub memlock_kib: u64,
    /// Who the limits.d memlock lines name (limits.conf domains): the
    /// owners of what the plan counts where every one is known and not
    /// root (`:UID`, or the login name once [`PlanConfig::name_memlock_users`]
    /// found it), a user `--memlock-user` gave, else `*` (every user but
    /// root).
    #[serde(default)]
    pub memlock_users: Vec<String>,
    /// The systemd services that get a drop-in with `LimitMEMLOCK=`
    /// (pam_limits, hence limits.d, does not apply to services): those of
    /// the processes that map what the plan counts, or `--systemd-unit`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub systemd_units: Vec<String>,
    /// The systemd unit line.
    pub systemd: String,
    /// `vm.hugetlb_shm_group`, when SysV segments of a non-root group need it.
    pub hugetlb_shm_group: Option<u32>,
    /// Recommended THP mode.
    pub thp: String,
    /// Why.
    pub thp_reason: String,
    /// `transparent_hugepage/shmem_enabled` to set at boot (tmpfiles.d,
    /// `apply --persist`) and now (a runtime command; `apply` itself leaves
    /// it): `advise` where the host has `never`, so that the
    /// kernel places big shared mappings 2 MiB-aligned (a server that
    /// falls back to 4 KiB pages can then be moved onto 2 MiB pages in
    /// place by `hugeshm collapse`) while no memory gets THP that does not
    /// ask for it. Absent where the host's setting aligns them already or
    /// was chosen otherwise (`deny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp_shmem: Option<String>,
    /// Why the plan writes no memlock lines (limits.d, drop-ins): every
    /// server it counts maps with `mmap(MAP_HUGETLB)`, which no memlock
    /// limit binds. Absent where the lines are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock_not_needed: Option<String>,
}

/// The plan (`advise --json` prints exactly this; `apply --plan` reads it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    /// Pools to set, per page size (host-wide rows first, then per node).
    pub pools: Vec<PlanPool>,
    /// What was counted.
    pub counted: Vec<Counted>,
    /// What was seen and not counted, and why.
    pub skipped: Vec<Skipped>,
    /// Spare pages added to each pool.
    pub spare_pages: u64,
    /// Memory in the machine.
    pub mem_total_bytes: Option<u64>,
    /// Memory the plan puts in huge page pools (every size).
    pub huge_bytes: u64,
    /// Memory left to the OS and everything else.
    pub left_bytes: Option<u64>,
    /// Warnings (too little memory left, page sizes the kernel lacks, ...).
    pub warnings: Vec<String>,
    /// The configuration that realises it.
    pub config: PlanConfig,
    /// What a container (a Kubernetes pod) running it needs, when asked
    /// for (`advise --container`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerAdvice>,
    /// The plan counts new regions only (`--size`, `--spec`), not the huge
    /// pages live segments use now: `apply` keeps room for those too,
    /// refusing a pool that would not hold both (see
    /// [`Sources::plan`](super::Sources::plan)).
    #[serde(default)]
    pub keep_live: bool,
    /// Demotions `apply` makes before it grows the pools: free pages of a
    /// larger pool split into pages of a smaller one that grows
    /// (`advise --demote`; see `add_demotion`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demote: Vec<PlanDemote>,
}

/// One demotion of a plan: `pages` free pages of `page_size_bytes` become
/// pages of `to_page_size_bytes` (a write to the larger pool's `demote`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanDemote {
    /// The pool demoted (1 GiB).
    pub page_size_bytes: u64,
    /// The size its pages become (2 MiB).
    pub to_page_size_bytes: u64,
    /// Pages of `page_size_bytes` to demote.
    pub pages: u64,
}

/// One extended resource of a pod: `hugepages-2Mi: 64Mi`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PodResource {
    /// The resource name, `hugepages-2Mi`, `hugepages-1Gi`.
    pub name: String,
    /// Its quantity, `64Mi`.
    pub quantity: String,
    /// The same in bytes.
    pub bytes: u64,
}

/// What the pod spec of a container running the counted regions needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ContainerAdvice {
    /// Huge page resources (requests must equal limits).
    pub resources: Vec<PodResource>,
    /// The `resources:` block to paste.
    pub yaml: String,
    /// What else to know.
    pub notes: Vec<String>,
}

/// `the 2 MiB pool of node 0`, `the 2 MiB pool (host-wide)`.
pub fn pool_name(page_size: u64, node: Option<u32>) -> String {
    match node {
        Some(n) => format!("the {} pool of node {n}", format_bytes(page_size)),
        None => format!("the {} pool (host-wide)", format_bytes(page_size)),
    }
}

/// A one-line summary: `512 x 2 MiB on node 0, 2 x 1 GiB host-wide`.
pub fn summary(plan: &Plan) -> String {
    plan.pools
        .iter()
        .map(|p| {
            format!(
                "{} x {} {}",
                p.pages,
                format_bytes(p.page_size_bytes),
                match p.node {
                    None => "host-wide".to_string(),
                    Some(n) => format!("on node {n}"),
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
        + &format!(" ({})", plural(plan.counted.len(), "region", "regions"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_parse::size::{GIB, MIB};

    #[test]
    fn pages_needed_round_up_unless_the_server_counted_them() {
        assert_eq!(Demand::new("a", 4097, 4096).pages_needed(), 2);
        assert_eq!(Demand::new("a", 18 * GIB, 2 * MIB).pages_needed(), 9216);
        assert_eq!(Demand::new("a", 0, 2 * MIB).pages_needed(), 0);
        // A page size of 0 (a plan file may say anything) divides by 1.
        assert_eq!(Demand::new("a", 3, 0).pages_needed(), 3);
        let pg = Demand::new("pg", 140 * MIB, 2 * MIB).with_pages(71);
        assert_eq!(pg.pages_needed(), 71);
    }

    #[test]
    fn pools_in_words() {
        assert_eq!(pool_name(2 * MIB, Some(0)), "the 2 MiB pool of node 0");
        assert_eq!(pool_name(GIB, None), "the 1 GiB pool (host-wide)");
        let row = |page_size_bytes, node, pages| PlanPool {
            page_size_bytes,
            node,
            pages,
            spare_pages: 0,
            current_pages: 0,
            bytes: pages * page_size_bytes,
        };
        let counted = |label: &str| Counted {
            label: label.into(),
            bytes: GIB,
            page_size_bytes: 2 * MIB,
            pages: 512,
            placement: Placement::Node(0),
            note: None,
        };
        let mut p = Plan {
            pools: vec![row(2 * MIB, Some(0), 512), row(GIB, None, 2)],
            counted: vec![counted("a")],
            skipped: Vec::new(),
            spare_pages: 0,
            mem_total_bytes: None,
            huge_bytes: 3 * GIB,
            left_bytes: None,
            warnings: Vec::new(),
            config: PlanConfig::default(),
            container: None,
            keep_live: false,
            demote: Vec::new(),
        };
        assert_eq!(
            summary(&p),
            "512 x 2 MiB on node 0, 2 x 1 GiB host-wide (1 region)"
        );
        p.counted.push(counted("b"));
        assert!(summary(&p).ends_with(" (2 regions)"), "{}", summary(&p));
    }

    #[test]
    fn placements_and_demands_in_json() {
        let v = |p: Placement| serde_json::to_value(p).unwrap();
        assert_eq!(v(Placement::Any), serde_json::json!({"placement": "any"}));
        assert_eq!(
            v(Placement::Node(1)),
            serde_json::json!({"placement": "node", "node": 1})
        );
        // A demand from before owners, units and nodes were known still reads.
        let old = serde_json::json!({
            "label": "sysv 7", "bytes": 4096, "page_size_bytes": 2097152,
            "placement": {"placement": "spread"}, "pages": null, "sysv_gid": null, "note": null
        });
        let d: Demand = serde_json::from_value(old).unwrap();
        assert_eq!(
            d,
            Demand::new("sysv 7", 4096, 2 * MIB).placed(Placement::Spread)
        );
        // And the keys it lacks are left out when empty.
        let back = serde_json::to_value(&d).unwrap();
        assert!(back.get("units").is_none() && back.get("owner_uid").is_none());
    }
}
