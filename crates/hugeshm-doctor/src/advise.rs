//! `hugeshm advise`: how many pages of each size each NUMA node needs, and
//! the configuration that realises it.
//!
//! The arithmetic is the classic one made exact: every region needs
//! `ceil(bytes / page_size)` pages of its page size; a plan adds a spare per
//! pool (default [`DEFAULT_SPARE_PAGES`]; per node where it splits a size
//! over the nodes) for the odd page a server maps on top of its main area;
//! node-bound regions land on their node, spread ones are split evenly (the
//! remainder on the lowest nodes), and the rest goes to the host-wide pool,
//! which the kernel spreads itself. Where a size is split per node, a live
//! segment is counted on the nodes its pages sit on now.
//!
//! A plan made only of new regions (`--size`, `--spec`) does not count the
//! huge pages live segments use; [`keep_room_for_live`] marks it so that
//! `apply` refuses a pool that would not hold both.

use crate::checked;
pub use crate::checked::TooLarge;
use crate::finding::plural;
use crate::segments::{SegmentKind, SegmentsReport};
use hugeshm_fix::pool_command;
use hugeshm_parse::size::{format_bytes, page_size_short, BASE_PAGE, GIB, MIB};
use hugeshm_probe::HostSnapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Spare pages added to each pool of pages smaller than 1 GiB, unless
/// `--spare` says otherwise (1 GiB pools get none: rounding up to whole GiB
/// already leaves slack).
/// Oracle's own rule adds one page per segment; ansible-oracle moved from 2 to
/// 4 per instance after servers failed to start on an exact pool.
pub const DEFAULT_SPARE_PAGES: u64 = 2;

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
        }
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
    /// [`keep_room_for_live`]).
    #[serde(default)]
    pub keep_live: bool,
    /// Demotions `apply` makes before it grows the pools: free pages of a
    /// larger pool split into pages of a smaller one that grows
    /// (`advise --demote`; see [`add_demotion`]).
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

/// Where a host-wide pool of the plan grows and free pages of a larger
/// pool the plan leaves alone could give the growth by demotion (no new
/// contiguous memory to find): with `use_it`, puts the demotion into the
/// plan (and its command first in `config.runtime`); without, says so in a
/// warning. What a demoted page gives beyond the growth goes back to the
/// kernel when `apply` sets the pool.
pub fn add_demotion(plan: &mut Plan, host: &HostSnapshot, use_it: bool) {
    let planned: Vec<u64> = plan.pools.iter().map(|p| p.page_size_bytes).collect();
    let mut found = Vec::new();
    for p in plan.pools.iter().filter(|p| p.node.is_none()) {
        let growth = p.pages.saturating_sub(p.current_pages);
        let Some(fix) = crate::tuning::demotion_for(host, p.page_size_bytes, growth) else {
            continue;
        };
        let hugeshm_fix::Fix::Demote {
            page_size_bytes: from,
            pages,
            ..
        } = fix
        else {
            continue;
        };
        if planned.contains(&from) {
            continue;
        }
        found.push((p.page_size_bytes, growth, from, pages, fix));
    }
    for (to, growth, from, pages, fix) in found {
        if use_it {
            plan.demote.push(PlanDemote {
                page_size_bytes: from,
                to_page_size_bytes: to,
                pages,
            });
            plan.config.runtime.insert(0, fix.to_string());
            // The demoted pages come out of the larger pool.
            let moved = pages.saturating_mul(from);
            plan.huge_bytes = plan.huge_bytes.saturating_sub(moved);
            plan.left_bytes = plan
                .mem_total_bytes
                .map(|t| t.saturating_sub(plan.huge_bytes));
            plan.config.set_memlock_for(plan.huge_bytes);
        } else {
            plan.warnings.push(format!(
                "the {} pool grows by {growth} pages, and {} free {} page{} could give {} of them by demotion, with no new contiguous memory to find (the {} pool shrinks by {pages}): add --demote, or: {fix}",
                format_bytes(to),
                pages,
                format_bytes(from),
                if pages == 1 { "" } else { "s" },
                growth.min(pages.saturating_mul(from / to)),
                format_bytes(from),
            ));
        }
    }
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

/// What a pod needs for the counted regions: per page size the pages they
/// need (no pool spare: a pod's hugetlb limit covers its own memory), as
/// `resources.limits` and equal `requests`.
pub fn container_advice(plan: &Plan) -> ContainerAdvice {
    let mut by_size: std::collections::BTreeMap<u64, u64> = Default::default();
    for c in &plan.counted {
        // plan() checked that these fit.
        let bytes = c.pages.saturating_mul(c.page_size_bytes);
        let e = by_size.entry(c.page_size_bytes).or_default();
        *e = e.saturating_add(bytes);
    }
    let resources: Vec<PodResource> = by_size
        .into_iter()
        .map(|(page, bytes)| PodResource {
            name: format!("hugepages-{}i", page_size_short(page)),
            quantity: hugeshm_fix::k8s_quantity(bytes),
            bytes,
        })
        .collect();
    let lines: Vec<String> = resources
        .iter()
        .map(|r| format!("      {}: {}", r.name, r.quantity))
        .collect();
    let yaml = format!(
        "resources:\n  limits:\n{}\n      memory: <what the server needs besides huge pages>\n  requests:\n{}\n",
        lines.join("\n"),
        lines.join("\n")
    )
    .replace("\n      ", "\n    ");
    let notes = vec![
        "huge pages are not part of the memory limit: the memory request and limit cover \
         everything else the server uses"
            .to_owned(),
        "Kubernetes needs hugepages requests equal to limits, and the kubelet reads the \
         node's pools when it starts: reserve the host plan above, then restart the kubelet \
         so the node advertises the pages"
            .to_owned(),
        "container runtimes set hugetlb.<size>.max (charged when a page is first touched), \
         often without hugetlb.<size>.rsvd.max: a server that touches past the limit gets \
         SIGBUS; pre-fault at start (hugeshm create does, and turns a refusal into an error \
         with these numbers)"
            .to_owned(),
    ];
    ContainerAdvice {
        resources,
        yaml,
        notes,
    }
}

/// The least memory a plan should leave to the OS: 10 % of the machine, at
/// least 1 GiB.
pub fn min_left_bytes(mem_total: u64) -> u64 {
    (mem_total / 10).max(GIB)
}

/// Demands from the live host: every huge page segment and mapping at its
/// page size; SysV, anonymous and memfd segments of at least one huge page
/// that sit on 4 KiB pages at the default size (they would use the pool if it
/// had room); the rest skipped with the reason.
///
/// `units_of` gives the systemd units of a segment's processes (read from
/// their cgroups); the plan keeps the services among them.
pub fn demands_from_segments(
    host: &HostSnapshot,
    segs: &SegmentsReport,
    units_of: impl Fn(&crate::segments::Segment) -> Vec<String>,
) -> (Vec<Demand>, Vec<Skipped>) {
    let default = host.default_page_size().unwrap_or(2 * MIB);
    let mut demands = Vec::new();
    let mut skipped = Vec::new();
    for s in &segs.segments {
        let label = s.label();
        let gid = if s.kind == SegmentKind::Sysv {
            host.shm
                .iter()
                .find(|x| Some(x.shmid as u64) == s.id)
                .map(|x| x.gid)
                .filter(|g| *g != 0)
        } else {
            None
        };
        if s.kind == SegmentKind::Dax {
            skipped.push(Skipped {
                label,
                reason: "persistent memory (dax): it takes no huge pages from a pool".into(),
            });
            continue;
        }
        let demand = match s.page_size_bytes {
            Some(ps) if ps > BASE_PAGE => {
                let nodes: BTreeMap<u32, u64> = s
                    .nodes
                    .iter()
                    .filter_map(|(n, b)| Some((n.parse().ok()?, b / ps)))
                    .filter(|(_, p)| *p > 0)
                    .collect();
                Demand::new(label, s.size_bytes, ps).on_nodes(nodes)
            }
            _ if s.kind == SegmentKind::Posix => {
                skipped.push(Skipped {
                    label,
                    reason: "a tmpfs file: it cannot use the hugetlb pool".into(),
                });
                continue;
            }
            _ if s.size_bytes < default => {
                skipped.push(Skipped {
                    label,
                    reason: format!("smaller than one {} page", format_bytes(default)),
                });
                continue;
            }
            Some(_) => Demand::new(label, s.size_bytes, default)
                .with_note("on 4 KiB pages now: counted so it fits on huge pages next start"),
            None => Demand::new(label, s.size_bytes, default)
                .with_note("page size unknown (no process attached): counted at the default size"),
        };
        let demand = match s.owner_uid {
            Some(uid) => demand.owned_by(uid),
            None => demand,
        }
        .in_units(units_of(s));
        demands.push(match gid {
            Some(g) => demand.with_sysv_gid(g),
            None => demand,
        });
    }
    (demands, skipped)
}

/// Builds the plan; refused when a sum of its pages or bytes does not fit
/// in 64 bits.
pub fn plan(
    host: &HostSnapshot,
    demands: &[Demand],
    skipped: Vec<Skipped>,
    spare_pages: u64,
) -> Result<Plan, TooLarge> {
    let nodes: Vec<u32> = if host.nodes.is_empty() {
        vec![0]
    } else {
        host.nodes.iter().map(|n| n.node).collect()
    };
    let default = host.default_page_size();
    let mut warnings = Vec::new();

    // Pages per (page size, node).
    let mut need: BTreeMap<(u64, Option<u32>), u64> = BTreeMap::new();
    // Pages of live segments (placement Any) on the nodes they sit on: used
    // where their size is split per node, host-wide otherwise.
    let mut sitting: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    let mut sitting_label: Vec<(usize, u64)> = Vec::new();
    let mut counted = Vec::new();
    let mut counted_bytes: BTreeMap<u64, u64> = BTreeMap::new();
    for d in demands {
        let pages = d.pages_needed();
        let pool = || pool_name(d.page_size_bytes, None);
        // Its bytes, and with the others of its page size (a pod's limit).
        let what = || format!("{}: bytes of its pages", d.label);
        let bytes = checked::mul(pages, d.page_size_bytes, what)?;
        checked::bump(&mut counted_bytes, d.page_size_bytes, bytes, what)?;
        if !host.pools.is_empty() && host.pool(d.page_size_bytes).is_none() {
            warnings.push(format!(
                "{}: this kernel offers no {} pages (sizes: {})",
                d.label,
                format_bytes(d.page_size_bytes),
                host.pools
                    .iter()
                    .map(|p| page_size_short(p.page_size_bytes))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        match d.placement {
            Placement::Any => {
                let mut known = 0u64;
                for (n, p) in &d.nodes {
                    let p = (*p).min(pages - known);
                    if nodes.contains(n) && p > 0 {
                        checked::bump(&mut sitting, (d.page_size_bytes, *n), p, || {
                            pool_name(d.page_size_bytes, Some(*n))
                        })?;
                        known += p;
                    }
                }
                if known > 0 {
                    sitting_label.push((counted.len(), d.page_size_bytes));
                }
                checked::bump(&mut need, (d.page_size_bytes, None), pages - known, pool)?;
            }
            Placement::Node(n) => {
                if !nodes.contains(&n) {
                    warnings.push(format!(
                        "{}: node {n} does not exist (nodes: {nodes:?})",
                        d.label
                    ));
                }
                checked::bump(&mut need, (d.page_size_bytes, Some(n)), pages, || {
                    pool_name(d.page_size_bytes, Some(n))
                })?;
            }
            Placement::Spread => {
                let k = nodes.len() as u64;
                for (i, n) in nodes.iter().enumerate() {
                    let share = pages / k + u64::from((i as u64) < pages % k);
                    checked::bump(&mut need, (d.page_size_bytes, Some(*n)), share, || {
                        pool_name(d.page_size_bytes, Some(*n))
                    })?;
                }
            }
        }
        counted.push(Counted {
            label: d.label.clone(),
            bytes: d.bytes,
            page_size_bytes: d.page_size_bytes,
            pages,
            placement: d.placement,
            note: d.note.clone(),
        });
    }
    // A size with both host-wide and per-node needs: put it all per node
    // (the host-wide part spread), so one exact split is written.
    // Live segments go on the nodes they sit on; the rest of the host-wide
    // part is spread.
    let sizes: Vec<u64> = need
        .keys()
        .map(|(s, _)| *s)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for s in &sizes {
        let has_node = need.keys().any(|(ps, n)| ps == s && n.is_some());
        let on_nodes: Vec<(u32, u64)> = sitting
            .iter()
            .filter(|((ps, _), _)| ps == s)
            .map(|((_, n), p)| (*n, *p))
            .collect();
        if has_node {
            for (n, p) in &on_nodes {
                checked::bump(&mut need, (*s, Some(*n)), *p, || pool_name(*s, Some(*n)))?;
            }
            for (i, size) in &sitting_label {
                if size == s {
                    // Counted has one entry per demand, in order.
                    let where_: Vec<String> = demands[*i]
                        .nodes
                        .iter()
                        .map(|(n, p)| format!("node {n}: {p}"))
                        .collect();
                    let c: &mut Counted = &mut counted[*i];
                    let note = format!(
                        "counted on the nodes it sits on now ({} pages)",
                        where_.join(", ")
                    );
                    c.note = Some(match c.note.take() {
                        Some(n) => format!("{n}; {note}"),
                        None => note,
                    });
                }
            }
            if let Some(any) = need.remove(&(*s, None)) {
                let k = nodes.len() as u64;
                for (i, n) in nodes.iter().enumerate() {
                    let share = any / k + u64::from((i as u64) < any % k);
                    checked::bump(&mut need, (*s, Some(*n)), share, || pool_name(*s, Some(*n)))?;
                }
            }
        } else if !on_nodes.is_empty() {
            let on = checked::sum(on_nodes.iter().map(|(_, p)| *p), || pool_name(*s, None))?;
            checked::bump(&mut need, (*s, None), on, || pool_name(*s, None))?;
        }
    }
    // A split that left a node's pool of a size at zero pages needs no row.
    need.retain(|(_, n), p| n.is_none() || *p > 0);

    let mut pools = Vec::new();
    for ((size, node), pages) in &need {
        // A spare set per pool: the host-wide one, or each node's where the
        // size is split per node (a process on that node may need the odd
        // page there). Spare pages are for pools of small pages; rounding
        // to whole 1 GiB pages already leaves slack.
        let spare = if *size < GIB { spare_pages } else { 0 };
        let current = match node {
            None => host.pool(*size).map(|p| p.nr).unwrap_or(0),
            Some(n) => host
                .node_pools
                .iter()
                .find(|p| p.node == *n && p.counters.page_size_bytes == *size)
                .map(|p| p.counters.nr)
                .unwrap_or(0),
        };
        let what = || format!("{}: pages and spare", pool_name(*size, *node));
        let total = checked::add(*pages, spare, what)?;
        let bytes = checked::mul(total, *size, || {
            format!("{}: bytes", pool_name(*size, *node))
        })?;
        pools.push(PlanPool {
            page_size_bytes: *size,
            node: *node,
            pages: total,
            spare_pages: spare,
            current_pages: current,
            bytes,
        });
    }
    pools.sort_by_key(|p| (p.node.is_some(), p.page_size_bytes, p.node));

    let huge_bytes: u64 = {
        // Sizes the plan does not touch keep what they hold now.
        let what = || "the bytes of every pool".to_string();
        let planned = checked::sum(pools.iter().map(|p| p.bytes), what)?;
        checked::add(planned, kept_bytes(host, |s| sizes.contains(&s)), what)?
    };
    let mem_total = host.meminfo.as_ref().and_then(|m| m.mem_total_bytes);
    let left = mem_total.map(|t| t.saturating_sub(huge_bytes));
    if let (Some(t), Some(l)) = (mem_total, left) {
        if huge_bytes > t {
            warnings.push(format!(
                "the plan needs {} of huge pages but the machine has {} of memory",
                format_bytes(huge_bytes),
                format_bytes(t)
            ));
        } else if l < min_left_bytes(t) {
            warnings.push(format!(
                "the plan leaves {} to the OS and every other process, under the sane minimum of {} (10 % of memory, at least 1 GiB)",
                format_bytes(l),
                format_bytes(min_left_bytes(t))
            ));
        }
    }
    // Per node.
    for n in &host.nodes {
        let Some(nt) = n.meminfo.as_ref().and_then(|m| m.mem_total_bytes) else {
            continue;
        };
        let on_node = checked::sum(
            pools
                .iter()
                .filter(|p| p.node == Some(n.node))
                .map(|p| p.bytes),
            || format!("the bytes of node {}'s pools", n.node),
        )?;
        if on_node > nt {
            warnings.push(format!(
                "node {} has {} of memory but the plan puts {} of huge pages on it",
                n.node,
                format_bytes(nt),
                format_bytes(on_node)
            ));
        }
    }

    let gid = demands.iter().find_map(|d| d.sysv_gid);
    let units: std::collections::BTreeSet<String> = demands
        .iter()
        .flat_map(|d| d.units.iter())
        .filter(|u| valid_systemd_unit(u))
        .cloned()
        .collect();
    let config = config_for(
        &pools,
        default,
        huge_bytes,
        gid,
        memlock_users(demands),
        units.into_iter().collect(),
    );
    Ok(Plan {
        pools,
        counted,
        skipped,
        spare_pages,
        mem_total_bytes: mem_total,
        huge_bytes,
        left_bytes: left,
        warnings,
        config,
        container: None,
        keep_live: false,
        demote: Vec::new(),
    })
}

/// Checks that a plan counts bytes that fit in 64 bits (a plan file may
/// say anything): each pool's and demotion's pages times its page size, and
/// all of them together.
pub fn check_sums(plan: &Plan) -> Result<(), TooLarge> {
    let mut all = 0u64;
    for p in &plan.pools {
        let what = || format!("{}: bytes", pool_name(p.page_size_bytes, p.node));
        let bytes = checked::mul(p.pages, p.page_size_bytes, what)?;
        all = checked::add(all, bytes, || "the bytes of every pool".to_string())?;
    }
    for d in &plan.demote {
        let what = || {
            format!(
                "the demotion of {} pages: bytes",
                format_bytes(d.page_size_bytes)
            )
        };
        checked::mul(d.pages, d.page_size_bytes, what)?;
    }
    Ok(())
}

/// Pages of a pool in use or reserved now: a node's faulted pages (the
/// kernel keeps no per-node reserve count), or the host's faulted and
/// reserved ones.
pub fn live_pages(host: &HostSnapshot, page_size: u64, node: Option<u32>) -> u64 {
    match node {
        None => host
            .pool(page_size)
            .map(|p| {
                p.nr.saturating_sub(p.free)
                    .saturating_add(p.resv.unwrap_or(0))
            })
            .unwrap_or(0),
        Some(n) => host
            .node_pools
            .iter()
            .find(|p| p.node == n && p.counters.page_size_bytes == page_size)
            .map(|p| p.counters.nr.saturating_sub(p.counters.free))
            .unwrap_or(0),
    }
}

/// The pages a pool of the plan leaves for what it counts, against what it
/// counts there: `(pool pages, live pages now, counted pages)` for each
/// pool that would not hold both the live pages and the counted ones.
pub fn crowded_pools(
    plan: &Plan,
    live: impl Fn(u64, Option<u32>) -> u64,
) -> Vec<(PlanPool, u64, u64)> {
    let mut out = Vec::new();
    for p in &plan.pools {
        let counted = p.pages.saturating_sub(p.spare_pages);
        let used = live(p.page_size_bytes, p.node);
        if used > 0 && p.pages < used.saturating_add(counted) {
            out.push((p.clone(), used, counted));
        }
    }
    // A size split per node: reserved pages are not on any node yet, so
    // the nodes together must hold them as well.
    let sizes: std::collections::BTreeSet<u64> = plan
        .pools
        .iter()
        .filter(|p| p.node.is_some())
        .map(|p| p.page_size_bytes)
        .collect();
    for s in sizes {
        if plan
            .pools
            .iter()
            .any(|p| p.page_size_bytes == s && p.node.is_none())
        {
            continue;
        }
        let rows: Vec<&PlanPool> = plan
            .pools
            .iter()
            .filter(|p| p.page_size_bytes == s)
            .collect();
        let pages: u64 = rows.iter().map(|p| p.pages).sum();
        let spare: u64 = rows.iter().map(|p| p.spare_pages).sum();
        let counted = pages.saturating_sub(spare);
        let used = live(s, None);
        if used > 0
            && pages < used.saturating_add(counted)
            && !out.iter().any(|(p, _, _)| p.page_size_bytes == s)
        {
            out.push((
                PlanPool {
                    page_size_bytes: s,
                    node: None,
                    pages,
                    spare_pages: spare,
                    current_pages: rows.iter().map(|p| p.current_pages).sum(),
                    bytes: pages.saturating_mul(s),
                },
                used,
                counted,
            ));
        }
    }
    out
}

/// `the 2 MiB pool of node 0`, `the 2 MiB pool (host-wide)`.
pub fn pool_name(page_size: u64, node: Option<u32>) -> String {
    match node {
        Some(n) => format!("the {} pool of node {n}", format_bytes(page_size)),
        None => format!("the {} pool (host-wide)", format_bytes(page_size)),
    }
}

/// Marks a plan made of new regions only (`--size`, `--spec`) as one that
/// must leave room for the huge pages live segments use now
/// ([`Plan::keep_live`], which `apply` checks again on the host as it is
/// then), and warns about each pool that would not hold both, naming the
/// live segments (`segs`, when scanned) on that size and node.
pub fn keep_room_for_live(plan: &mut Plan, host: &HostSnapshot, segs: Option<&SegmentsReport>) {
    plan.keep_live = true;
    for (p, used, counted) in crowded_pools(plan, |s, n| live_pages(host, s, n)) {
        let names: Vec<String> = segs
            .map(|r| {
                r.segments
                    .iter()
                    .filter(|g| g.page_size_bytes == Some(p.page_size_bytes))
                    .filter(|g| match p.node {
                        None => true,
                        Some(n) => g.nodes.get(&n.to_string()).is_some_and(|b| *b > 0),
                    })
                    .map(|g| format!("{} of {}", g.label(), format_bytes(g.size_bytes)))
                    .collect()
            })
            .unwrap_or_default();
        let left = if p.pages >= used {
            format!(
                "at {} pages the pool leaves {} free for the {counted} the plan counts there; count them too with --live (apply refuses this plan; --force applies it anyway)",
                p.pages,
                p.pages - used
            )
        } else {
            format!(
                "at {} pages the pool would be smaller than what they use (apply refuses that, even with --force); count them too with --live",
                p.pages
            )
        };
        plan.warnings.push(format!(
            "live huge page segments use {used} pages of {} now{}, which this plan does not count: {left}",
            pool_name(p.page_size_bytes, p.node),
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({})", names.join(", "))
            },
        ));
    }
}

/// The sysfs file that holds the pool of one size, host-wide or on a node.
pub use hugeshm_fix::nr_hugepages_path;

fn config_for(
    pools: &[PlanPool],
    default: Option<u64>,
    huge_bytes: u64,
    gid: Option<u32>,
    memlock_users: Vec<String>,
    systemd_units: Vec<String>,
) -> PlanConfig {
    let mut runtime = Vec::new();
    let mut sysctl = Vec::new();
    let mut tmpfiles = Vec::new();
    let mut cmdline: Vec<String> = Vec::new();
    let sizes: std::collections::BTreeSet<u64> = pools.iter().map(|p| p.page_size_bytes).collect();
    for size in sizes {
        let rows: Vec<&PlanPool> = pools.iter().filter(|p| p.page_size_bytes == size).collect();
        let host_row = rows.iter().find(|p| p.node.is_none());
        let is_default = Some(size) == default;
        match host_row {
            Some(r) => {
                runtime.push(pool_command(size, r.pages, is_default, None));
                if is_default {
                    sysctl.push(format!("vm.nr_hugepages = {}", r.pages));
                } else {
                    tmpfiles.push(format!(
                        "w {} - - - - {}",
                        nr_hugepages_path(size, None),
                        r.pages
                    ));
                }
                if size >= GIB {
                    cmdline.push(format!(
                        "hugepagesz={} hugepages={}",
                        page_size_short(size),
                        r.pages
                    ));
                }
            }
            None => {
                let mut split = Vec::new();
                for r in &rows {
                    let n = r.node.unwrap_or(0);
                    runtime.push(pool_command(size, r.pages, is_default, r.node));
                    tmpfiles.push(format!(
                        "w {} - - - - {}",
                        nr_hugepages_path(size, r.node),
                        r.pages
                    ));
                    split.push(format!("{n}:{}", r.pages));
                }
                if size >= GIB {
                    cmdline.push(format!(
                        "hugepagesz={} hugepages={}",
                        page_size_short(size),
                        split.join(",")
                    ));
                }
            }
        }
    }
    // Never below the kernel's default (8 MiB since Linux 5.16): the
    // limits.d file applies to every user, and a small plan would take
    // away what other programs lock today.
    let memlock_kib = memlock_kib_for(huge_bytes);
    let mut files = Vec::new();
    let mut sysctl_text =
        String::from("# Written by hugeshm apply --persist: huge page pools and SysV access.\n");
    for l in &sysctl {
        sysctl_text.push_str(l);
        sysctl_text.push('\n');
    }
    if let Some(g) = gid {
        sysctl_text.push_str(&format!("vm.hugetlb_shm_group = {g}\n"));
    }
    if !sysctl.is_empty() || gid.is_some() {
        files.push(ConfigFile {
            path: "/etc/sysctl.d/60-hugeshm.conf".into(),
            content: sysctl_text,
        });
    }
    if !tmpfiles.is_empty() {
        let mut t = String::from("# Written by hugeshm apply --persist: per-size and per-node huge page pools at boot.\n");
        for l in &tmpfiles {
            t.push_str(l);
            t.push('\n');
        }
        files.push(ConfigFile {
            path: "/etc/tmpfiles.d/60-hugeshm.conf".into(),
            content: t,
        });
    }
    files.push(limits_file(&memlock_users, memlock_kib));
    files.extend(systemd_units.iter().map(|u| dropin_file(u, memlock_kib)));
    let kernel_cmdline = (!cmdline.is_empty()).then(|| cmdline.join(" "));
    if let Some(k) = &kernel_cmdline {
        files.push(ConfigFile {
            path: "/etc/default/grub.d/60-hugeshm.cfg".into(),
            content: format!(
                "# Written by hugeshm apply --persist: huge pages reserved at boot (run update-grub).\nGRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX {k}\"\n"
            ),
        });
    }
    PlanConfig {
        runtime,
        files,
        kernel_cmdline,
        memlock_kib,
        memlock_users,
        systemd_units,
        systemd: limit_memlock(memlock_kib),
        hugetlb_shm_group: gid,
        thp: "madvise".into(),
        thp_reason: "shared memory on hugetlb pages does not need THP; 'always' makes khugepaged and fault-time compaction stall database processes and bloats their private memory, while 'madvise' keeps THP for programs that ask".into(),
    }
}

/// Checks that a plan's configuration files (read from a plan file that
/// `apply --plan` is to write as root) are exactly what hugeshm writes for
/// the plan's own pools and settings on this host: no other path, no other
/// line (blanks aside), and a memlock limit from what the pools hold, not a
/// number of the file's. A plan edited by hand, made on a host with another
/// default huge page size, or before the host's other pools changed, is
/// refused with the first thing that differs.
pub fn check_plan_files(plan: &Plan, host: &HostSnapshot) -> Result<(), String> {
    // What advise counts: the plan's pools, the host's pools of the sizes
    // it leaves alone, less what its demotions take from them.
    let sizes: Vec<u64> = plan.pools.iter().map(|p| p.page_size_bytes).collect();
    let planned = plan.pools.iter().try_fold(0u64, |a, p| {
        a.checked_add(p.pages.checked_mul(p.page_size_bytes)?)
    });
    let kept = kept_bytes(host, |s| sizes.contains(&s));
    let demoted: u64 = plan
        .demote
        .iter()
        .map(|d| d.pages.saturating_mul(d.page_size_bytes))
        .sum();
    let huge = planned.map(|p| p.saturating_add(kept).saturating_sub(demoted));
    if huge != Some(plan.huge_bytes) {
        return Err(format!(
            "its huge_bytes ({}) is not what its pools and this host's other pools hold ({}): \
             the plan was edited, or the host's pools changed since it was made",
            plan.huge_bytes,
            huge.map_or("more than 2^64 bytes".into(), |h| h.to_string())
        ));
    }
    if let Some(u) = plan
        .config
        .memlock_users
        .iter()
        .find(|u| !valid_memlock_user(u))
    {
        return Err(format!("its memlock user {u:?} is not a limits.conf user"));
    }
    if let Some(u) = plan
        .config
        .systemd_units
        .iter()
        .find(|u| !valid_systemd_unit(u))
    {
        return Err(format!("its systemd unit {u:?} is not a service name"));
    }
    // Plans from before memlock_users had the lines for every user.
    let users = if plan.config.memlock_users.is_empty() {
        vec!["*".to_string()]
    } else {
        plan.config.memlock_users.clone()
    };
    let expected = config_for(
        &plan.pools,
        host.default_page_size(),
        plan.huge_bytes,
        plan.config.hugetlb_shm_group,
        users,
        plan.config.systemd_units.clone(),
    )
    .files;
    for f in &plan.config.files {
        match expected.iter().find(|e| e.path == f.path) {
            None => return Err(format!("{} is not a file hugeshm writes", f.path)),
            Some(e) if !same_but_blanks(&e.content, &f.content) => {
                return Err(format!(
                    "{} is not what hugeshm writes for its pools and settings",
                    f.path
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(e) = expected
        .iter()
        .find(|e| !plan.config.files.iter().any(|f| f.path == e.path))
    {
        return Err(format!("it lacks {}, which its pools need", e.path));
    }
    Ok(())
}

/// What the host's pools of the sizes a plan leaves alone hold now.
fn kept_bytes(host: &HostSnapshot, planned: impl Fn(u64) -> bool) -> u64 {
    host.pools
        .iter()
        .filter(|p| !planned(p.page_size_bytes))
        .map(|p| p.nr.saturating_mul(p.page_size_bytes))
        .fold(0, u64::saturating_add)
}

/// Whether two files say the same, line by line, runs of blanks aside (the
/// limits.d columns were padded differently before).
fn same_but_blanks(a: &str, b: &str) -> bool {
    let words = |t: &str| -> Vec<Vec<String>> {
        t.lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    };
    words(a) == words(b)
}

/// The memlock limit for pools of `huge_bytes` in all, KiB: never below
/// the kernel's default (8 MiB since Linux 5.16), as the limits.d file may
/// apply to every user, and a small plan would take away what other
/// programs lock today.
fn memlock_kib_for(huge_bytes: u64) -> u64 {
    huge_bytes.div_ceil(1024).max(DEFAULT_MEMLOCK_KIB)
}

/// systemd's setting for a memlock limit of `memlock_kib` KiB.
fn limit_memlock(memlock_kib: u64) -> String {
    format!("LimitMEMLOCK={}", memlock_kib.saturating_mul(1024))
}

/// Where the limits.d memlock lines go.
pub const LIMITS_FILE: &str = "/etc/security/limits.d/60-hugeshm.conf";

/// The limits.d file: a soft and a hard memlock line per domain.
fn limits_file(users: &[String], memlock_kib: u64) -> ConfigFile {
    let mut content = String::from(
        "# Written by hugeshm apply --persist: let servers lock their shared memory.\n",
    );
    for u in users {
        content.push_str(&format!(
            "{u:<8} soft    memlock    {memlock_kib}\n{u:<8} hard    memlock    {memlock_kib}\n"
        ));
    }
    ConfigFile {
        path: LIMITS_FILE.into(),
        content,
    }
}

/// Where the drop-ins of systemd services go.
const SYSTEMD_DIR: &str = "/etc/systemd/system/";

/// A service's drop-in: its memlock limit (`LimitMEMLOCK=`, bytes).
fn dropin_file(unit: &str, memlock_kib: u64) -> ConfigFile {
    ConfigFile {
        path: format!("{SYSTEMD_DIR}{unit}.d/60-hugeshm.conf"),
        content: format!(
            "# Written by hugeshm apply --persist: let {unit} lock its shared memory\n\
             # (limits.d does not apply to services). Then: systemctl daemon-reload,\n\
             # and restart {unit} when it suits.\n[Service]\n{}\n",
            limit_memlock(memlock_kib)
        ),
    }
}

/// Whether `s` names a systemd service hugeshm may write a drop-in for:
/// `NAME.service` or `NAME@INSTANCE.service` of unit-name characters (no
/// `/`, so the drop-in stays under /etc/systemd/system).
pub fn valid_systemd_unit(s: &str) -> bool {
    // "UNIT.d" must fit a file name (255 bytes); systemd allows one '@'.
    s.len() <= 253
        && s.matches('@').count() <= 1
        && s.strip_suffix(".service").is_some_and(|n| {
            !n.is_empty()
                && !n.starts_with(['.', '-', '@'])
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ":_.@-\\".contains(c))
        })
}

/// Who the memlock lines name: the non-root owners of the demands, as
/// exact-uid domains (`:UID`), where every demand's owner is known and
/// one is not root; otherwise every user (`*`, which pam_limits does not
/// apply to root: root locks with `CAP_IPC_LOCK`).
fn memlock_users(demands: &[Demand]) -> Vec<String> {
    let owners: Option<std::collections::BTreeSet<u32>> =
        demands.iter().map(|d| d.owner_uid).collect();
    match owners.map(|o| o.into_iter().filter(|u| *u != 0).collect::<Vec<_>>()) {
        Some(uids) if !uids.is_empty() => uids.iter().map(|u| format!(":{u}")).collect(),
        _ => vec!["*".into()],
    }
}

/// Whether `s` can stand as a limits.conf domain for memlock: a login name,
/// `@group`, `:UID`, `@:GID` or `*` (no blanks, no `#`, no `%`, which is
/// for maxlogins only).
pub fn valid_memlock_user(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && (s == "*"
            || s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-@:$".contains(c))
                && !s.starts_with('-'))
}

impl PlanConfig {
    /// Names the memlock lines' domains; rewrites the limits.d file.
    pub fn set_memlock_users(&mut self, users: Vec<String>) {
        self.memlock_users = users;
        self.rewrite_limits_file();
    }

    /// Names the services that get a drop-in; rewrites the drop-ins.
    pub fn set_systemd_units(&mut self, units: Vec<String>) {
        self.files.retain(|f| !f.path.starts_with(SYSTEMD_DIR));
        self.files
            .extend(units.iter().map(|u| dropin_file(u, self.memlock_kib)));
        self.systemd_units = units;
    }

    /// Replaces each `:UID` domain with the login name `name` gives it
    /// (from the host's /etc/passwd), where it gives one.
    pub fn name_memlock_users(&mut self, name: impl Fn(u32) -> Option<String>) {
        let users = self
            .memlock_users
            .iter()
            .map(|u| {
                u.strip_prefix(':')
                    .and_then(|n| n.parse().ok())
                    .and_then(&name)
                    .filter(|n| valid_memlock_user(n) && n != "*" && !n.starts_with(['@', ':']))
                    .unwrap_or_else(|| u.clone())
            })
            .collect();
        self.set_memlock_users(users);
    }

    /// Sets the memlock limit for pools of `huge_bytes` in all, and
    /// rewrites the files that say it.
    pub fn set_memlock_for(&mut self, huge_bytes: u64) {
        self.memlock_kib = memlock_kib_for(huge_bytes);
        self.systemd = limit_memlock(self.memlock_kib);
        self.rewrite_limits_file();
        self.set_systemd_units(self.systemd_units.clone());
    }

    fn rewrite_limits_file(&mut self) {
        let file = limits_file(&self.memlock_users, self.memlock_kib);
        match self.files.iter_mut().find(|f| f.path == LIMITS_FILE) {
            Some(f) => *f = file,
            None => self.files.push(file),
        }
    }
}

/// `RLIMIT_MEMLOCK`'s default since Linux 5.16, KiB: the least a plan's
/// memlock setting says.
pub const DEFAULT_MEMLOCK_KIB: u64 = 8 * 1024;

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
    use hugeshm_parse::hugepages::PoolCounters;
    use hugeshm_parse::meminfo::Meminfo;

    const M2: u64 = 2 * MIB;

    fn host(nodes: u32) -> HostSnapshot {
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

    fn pool(p: &Plan, size: u64, node: Option<u32>) -> &PlanPool {
        p.pools
            .iter()
            .find(|x| x.page_size_bytes == size && x.node == node)
            .unwrap_or_else(|| panic!("no pool {size} {node:?} in {:?}", p.pools))
    }

    #[test]
    fn demotion_is_said_or_planned() {
        let mut h = host(1);
        h.pools[1] = PoolCounters::new(GIB, 3, 2, Some(0), 0, Some(0));
        h.demote = serde_json::from_value(serde_json::json!([
            {"page_size_bytes": GIB, "demote_size_bytes": M2}
        ]))
        .unwrap();
        let grow = |use_it: bool| {
            let mut p = plan(&h, &[Demand::new("sga", 1200 * MIB, M2)], vec![], 2).unwrap();
            add_demotion(&mut p, &h, use_it);
            p
        };
        // 602 pages from 10: 592 more, 2 free 1 GiB pages give 1024.
        let p = grow(false);
        assert!(p.demote.is_empty());
        let w = p.warnings.join("\n");
        assert!(
            w.contains("grows by 592 pages, and 2 free 1 GiB pages could give 592 of them")
                && w.contains("add --demote, or: echo 2 > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote"),
            "{w}"
        );
        let before = p.huge_bytes;
        let p = grow(true);
        assert_eq!(
            p.demote,
            vec![PlanDemote {
                page_size_bytes: GIB,
                to_page_size_bytes: M2,
                pages: 2
            }]
        );
        assert!(
            p.config.runtime[0].starts_with("echo 2 > "),
            "{:?}",
            p.config.runtime
        );
        assert_eq!(p.huge_bytes, before - 2 * GIB);
        // A plan that sets the 1 GiB pool itself demotes nothing.
        let mut p = plan(
            &h,
            &[
                Demand::new("sga", 1200 * MIB, M2),
                Demand::new("big", GIB, GIB),
            ],
            vec![],
            2,
        )
        .unwrap();
        add_demotion(&mut p, &h, true);
        assert!(p.demote.is_empty() && p.warnings.iter().all(|w| !w.contains("demot")));
        // Old plans without the key still read.
        let mut v = serde_json::to_value(grow(false)).unwrap();
        v.as_object_mut().unwrap().remove("demote");
        let back: Plan = serde_json::from_value(v).unwrap();
        assert!(back.demote.is_empty());
    }

    /// `--spare 18446744073709551615` with 512 pages wrapped to a pool of
    /// 511; sums that do not fit are refused with their numbers.
    #[test]
    fn sums_past_64_bits_are_refused() {
        let h = host(1);
        let e = plan(&h, &[Demand::new("sga", GIB, M2)], vec![], u64::MAX).unwrap_err();
        assert_eq!((e.a, e.op, e.b), (512, '+', u64::MAX), "{e}");
        assert!(
            e.to_string().starts_with(
                "the 2 MiB pool (host-wide): pages and spare: 512 + 18446744073709551615 "
            ),
            "{e}"
        );
        // Two demands whose pages add past 64 bits, and pages whose bytes do.
        let big = Demand::new("a", u64::MAX / 2 + 4096, 4096);
        let e = plan(&h, &[big.clone(), big], vec![], 0).unwrap_err();
        assert_eq!(e.op, '+', "{e}");
        let e = plan(
            &h,
            &[Demand::new("b", 1, M2).with_pages(u64::MAX / 2)],
            vec![],
            0,
        )
        .unwrap_err();
        assert_eq!(
            (e.op, e.what.as_str()),
            ('*', "b: bytes of its pages"),
            "{e}"
        );
        // The largest that fits is planned exactly.
        let p = plan(&h, &[Demand::new("sga", GIB, M2)], vec![], 1000).unwrap();
        assert_eq!(pool(&p, M2, None).pages, 1512);
    }

    #[test]
    fn container_needs_the_regions_not_the_spares() {
        let h = host(1);
        let p = plan(
            &h,
            &[
                Demand::new("sga", 1536 * MIB, M2),
                Demand::new("pg", 140 * MIB, M2).with_pages(71),
                Demand::new("big", 3 * GIB, GIB),
            ],
            vec![],
            2,
        )
        .unwrap();
        let c = container_advice(&p);
        let r: Vec<(&str, &str)> = c
            .resources
            .iter()
            .map(|r| (r.name.as_str(), r.quantity.as_str()))
            .collect();
        // 768 + 71 pages of 2 MiB, no spare; 3 pages of 1 GiB.
        assert_eq!(
            r,
            vec![("hugepages-2Mi", "1678Mi"), ("hugepages-1Gi", "3Gi")]
        );
        assert!(
            c.yaml
                .contains("  limits:\n    hugepages-2Mi: 1678Mi\n    hugepages-1Gi: 3Gi\n"),
            "{}",
            c.yaml
        );
        assert!(
            c.yaml.contains("  requests:\n    hugepages-2Mi: 1678Mi"),
            "{}",
            c.yaml
        );
        assert!(c.notes.iter().any(|n| n.contains("restart the kubelet")));
    }

    #[test]
    fn exact_multiples_and_rounding() {
        let h = host(1);
        // 18 GiB on 2 MiB pages: exactly 9216 pages, + 2 spare.
        let p = plan(&h, &[Demand::new("sga", 18 * GIB, M2)], vec![], 2).unwrap();
        assert_eq!(pool(&p, M2, None).pages, 9218);
        assert_eq!(pool(&p, M2, None).spare_pages, 2);
        assert_eq!(pool(&p, M2, None).current_pages, 10);
        assert_eq!(p.counted[0].pages, 9216);
        // One byte more needs one page more.
        let p = plan(&h, &[Demand::new("sga", 18 * GIB + 1, M2)], vec![], 0).unwrap();
        assert_eq!(pool(&p, M2, None).pages, 9217);
        // A segment smaller than a page still needs a whole page.
        let p = plan(&h, &[Demand::new("tiny", 4096, M2)], vec![], 0).unwrap();
        assert_eq!(pool(&p, M2, None).pages, 1);
        // The server's own count wins over the arithmetic.
        let p = plan(
            &h,
            &[Demand::new("pg", 140 * MIB, M2).with_pages(71)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(pool(&p, M2, None).pages, 71);
    }

    #[test]
    fn memlock_never_below_the_kernel_default() {
        let h = host(1);
        // 2 MiB of pools: the limits.d file for every user says 8 MiB,
        // not 2 MiB, which would take away what others lock today.
        let p = plan(&h, &[Demand::new("tiny", 4096, M2)], vec![], 0).unwrap();
        assert_eq!(p.huge_bytes, M2);
        assert_eq!(p.config.memlock_kib, DEFAULT_MEMLOCK_KIB);
        assert_eq!(p.config.systemd, "LimitMEMLOCK=8388608");
        let limits = p
            .config
            .files
            .iter()
            .find(|f| f.path.ends_with("limits.d/60-hugeshm.conf"))
            .unwrap();
        assert!(
            limits.content.contains("soft    memlock    8192\n"),
            "{}",
            limits.content
        );
        // Above it, the pools' size.
        let p = plan(&h, &[Demand::new("sga", 64 * MIB, M2)], vec![], 0).unwrap();
        assert_eq!(p.config.memlock_kib, p.huge_bytes / 1024);
    }

    fn limits(p: &Plan) -> &str {
        &p.config
            .files
            .iter()
            .find(|f| f.path == LIMITS_FILE)
            .unwrap()
            .content
    }

    #[test]
    fn memlock_lines_name_the_owners_where_all_are_known() {
        let h = host(1);
        // Two servers' segments, owned by uids 105 and 26 (and one root's):
        // a line pair for each non-root owner, nobody else's limit raised.
        let d = [
            Demand::new("a", 64 * MIB, M2).owned_by(105),
            Demand::new("b", 64 * MIB, M2).owned_by(26),
            Demand::new("c", 64 * MIB, M2).owned_by(0),
        ];
        let p = plan(&h, &d, vec![], 0).unwrap();
        assert_eq!(p.config.memlock_users, [":26", ":105"]);
        let kib = p.config.memlock_kib;
        assert!(
            limits(&p).contains(&format!(":26      soft    memlock    {kib}\n")),
            "{}",
            limits(&p)
        );
        assert!(limits(&p).contains(&format!(":105     hard    memlock    {kib}\n")));
        assert!(!limits(&p).contains('*'));
        // One owner unknown (a --size region): every user.
        let p = plan(
            &h,
            &[d[0].clone(), Demand::new("new", 64 * MIB, M2)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(p.config.memlock_users, ["*"]);
        let kib = p.config.memlock_kib;
        assert!(limits(&p).contains(&format!("*        soft    memlock    {kib}\n")));
        // Only root's: root locks by CAP_IPC_LOCK; the lines stay for everyone.
        let p = plan(&h, &[d[2].clone()], vec![], 0).unwrap();
        assert_eq!(p.config.memlock_users, ["*"]);
    }

    #[test]
    fn memlock_users_named_and_set() {
        let h = host(1);
        let d = [
            Demand::new("a", 64 * MIB, M2).owned_by(105),
            Demand::new("b", 64 * MIB, M2).owned_by(7),
        ];
        let mut p = plan(&h, &d, vec![], 0).unwrap();
        p.config
            .name_memlock_users(|uid| (uid == 105).then(|| "postgres".to_string()));
        // A uid the host has no name for stays `:UID`.
        assert_eq!(p.config.memlock_users, [":7", "postgres"]);
        // So does one whose name limits.conf would misread.
        let mut q = plan(&h, &d, vec![], 0).unwrap();
        q.config.name_memlock_users(|_| Some("db admin".into()));
        assert_eq!(q.config.memlock_users, [":7", ":105"]);
        q.config.name_memlock_users(|_| Some("@wheel".into()));
        assert_eq!(q.config.memlock_users, [":7", ":105"]);
        assert!(
            limits(&p).contains("postgres soft    memlock"),
            "{}",
            limits(&p)
        );
        p.config.set_memlock_users(vec!["@dba".into()]);
        assert!(limits(&p).contains("@dba     hard    memlock"));
        assert!(!limits(&p).contains("postgres"));
        // Exactly one limits.d file still.
        let n = p
            .config
            .files
            .iter()
            .filter(|f| f.path == LIMITS_FILE)
            .count();
        assert_eq!(n, 1);
    }

    #[test]
    fn services_get_a_memlock_drop_in() {
        let h = host(1);
        let pg = "postgresql@16-main.service".to_string();
        let d = [
            Demand::new("a", 64 * MIB, M2).in_units(vec![pg.clone()]),
            Demand::new("b", 64 * MIB, M2).in_units(vec![pg.clone(), "ora.service".into()]),
            // Not a service name hugeshm writes under: left out.
            Demand::new("c", 64 * MIB, M2).in_units(vec!["../../x.service".into()]),
        ];
        let p = plan(&h, &d, vec![], 0).unwrap();
        assert_eq!(p.config.systemd_units, ["ora.service", pg.as_str()]);
        let bytes = p.config.memlock_kib * 1024;
        let dropin = |p: &Plan, u: &str| {
            p.config
                .files
                .iter()
                .find(|f| f.path == format!("/etc/systemd/system/{u}.d/60-hugeshm.conf"))
                .map(|f| f.content.clone())
        };
        let text = dropin(&p, &pg).expect("drop-in");
        assert!(
            text.ends_with(&format!("[Service]\nLimitMEMLOCK={bytes}\n")),
            "{text}"
        );
        assert!(dropin(&p, "ora.service").is_some());
        assert_eq!(check_plan_files(&p, &h), Ok(()));
        // --systemd-unit replaces them.
        let mut p2 = p.clone();
        p2.config.set_systemd_units(vec!["mysql.service".into()]);
        assert!(dropin(&p2, &pg).is_none() && dropin(&p2, "mysql.service").is_some());
        assert_eq!(check_plan_files(&p2, &h), Ok(()));
        // A plan file's unit that would write elsewhere is refused.
        let mut p3 = p.clone();
        p3.config.systemd_units = vec!["../../cron.d/x.service".into()];
        assert!(check_plan_files(&p3, &h)
            .unwrap_err()
            .contains("is not a service name"));
        // No services: no drop-in.
        let p4 = plan(&h, &[Demand::new("a", 64 * MIB, M2)], vec![], 0).unwrap();
        assert!(p4.config.systemd_units.is_empty());
        assert!(!p4.config.files.iter().any(|f| f.path.contains("systemd")));
    }

    #[test]
    fn systemd_unit_syntax() {
        // "UNIT.d" must fit a file name.
        let long = format!("{}.service", "a".repeat(245));
        assert_eq!(long.len(), 253);
        assert!(valid_systemd_unit(&long));
        assert!(!valid_systemd_unit(&format!("a{long}")));
        for ok in [
            "postgresql.service",
            "postgresql@16-main.service",
            "oracle-ohasd.service",
            "a:b_c.d\\x2d.service",
        ] {
            assert!(valid_systemd_unit(ok), "{ok}");
        }
        for bad in [
            "",
            ".service",
            "x.scope",
            "x",
            "../x.service",
            "a/b.service",
            ".hidden.service",
            "a b.service",
            "x.service\n",
            "a@b@c.service",
        ] {
            assert!(!valid_systemd_unit(bad), "{bad:?}");
        }
    }

    #[test]
    fn memlock_user_syntax() {
        for ok in [
            "postgres", "oracle", "@dba", ":26", "@:54321", "*", "svc-db", "a.b_c$",
        ] {
            assert!(valid_memlock_user(ok), "{ok}");
        }
        for bad in ["", "a b", "x#y", "%grp", "-x", "a\nb", "ü", &"a".repeat(65)] {
            assert!(!valid_memlock_user(bad), "{bad:?}");
        }
    }

    #[test]
    fn default_and_non_default_sizes() {
        let h = host(1);
        let p = plan(
            &h,
            &[
                Demand::new("a", 4 * GIB, M2),
                Demand::new("b", 4 * GIB + 1, GIB),
            ],
            vec![],
            1,
        )
        .unwrap();
        assert_eq!(pool(&p, M2, None).pages, 2049);
        assert_eq!(
            pool(&p, GIB, None).pages,
            5,
            "rounded up, no spare for 1 GiB pages"
        );
        assert_eq!(p.huge_bytes, 2049 * M2 + 5 * GIB);
        assert!(
            p.config
                .runtime
                .contains(&"sysctl -w vm.nr_hugepages=2049".to_string()),
            "{:?}",
            p.config.runtime
        );
        assert!(p
            .config
            .runtime
            .iter()
            .any(|c| c == "echo 5 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"));
        assert_eq!(
            p.config.kernel_cmdline.as_deref(),
            Some("hugepagesz=1G hugepages=5")
        );
        let sysctl = p
            .config
            .files
            .iter()
            .find(|f| f.path.ends_with("sysctl.d/60-hugeshm.conf"))
            .unwrap();
        assert!(sysctl.content.contains("vm.nr_hugepages = 2049\n"));
        assert_eq!(
            p.config.memlock_kib,
            (p.huge_bytes / 1024).max(DEFAULT_MEMLOCK_KIB)
        );
        assert_eq!(p.config.systemd, format!("LimitMEMLOCK={}", p.huge_bytes));
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn node_splits() {
        let h = host(2);
        // 1001 pages spread: 501 on node 0, 500 on node 1, each with its spare.
        let p = plan(
            &h,
            &[Demand::new("x", 1001 * M2, M2).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        assert_eq!(pool(&p, M2, Some(0)).pages, 503);
        assert_eq!(pool(&p, M2, Some(1)).pages, 502);
        assert_eq!(pool(&p, M2, Some(1)).spare_pages, 2);
        // The field report: 200 MiB spread gave both spares to node 0.
        let p = plan(
            &h,
            &[Demand::new("--size 200 MiB", 200 * MIB, M2).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        let split: Vec<(Option<u32>, u64, u64)> = p
            .pools
            .iter()
            .map(|x| (x.node, x.pages, x.spare_pages))
            .collect();
        assert_eq!(split, vec![(Some(0), 52, 2), (Some(1), 52, 2)]);
        assert_eq!(
            p.config.runtime,
            vec![
                "echo 52 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages",
                "echo 52 > /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
            ]
        );
        // 1 GiB pools get no spare, per node either.
        let p = plan(
            &h,
            &[Demand::new("g", 3 * GIB, GIB).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        assert_eq!(pool(&p, GIB, Some(0)).pages, 2);
        assert_eq!(pool(&p, GIB, Some(1)).pages, 1);
        assert!(p.pools.iter().all(|x| x.node.is_some()));
        // A node-bound region plus a host-wide one: one exact split.
        let p = plan(
            &h,
            &[
                Demand::new("bound", 100 * M2, M2).placed(Placement::Node(1)),
                Demand::new("any", 10 * M2, M2),
            ],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(pool(&p, M2, Some(0)).pages, 5);
        assert_eq!(pool(&p, M2, Some(1)).pages, 105);
        assert!(p
            .config
            .runtime
            .iter()
            .any(|c| c.contains("node1/hugepages/hugepages-2048kB/nr_hugepages")));
        assert!(p
            .config
            .files
            .iter()
            .any(|f| f.path.ends_with("tmpfiles.d/60-hugeshm.conf")));
        // 1 GiB pages split over nodes: the per-node boot syntax.
        let p = plan(
            &h,
            &[Demand::new("g", 4 * GIB, GIB).placed(Placement::Spread)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(
            p.config.kernel_cmdline.as_deref(),
            Some("hugepagesz=1G hugepages=0:2,1:2")
        );
        // A node that does not exist is a warning.
        let p = plan(
            &h,
            &[Demand::new("n9", M2, M2).placed(Placement::Node(9))],
            vec![],
            0,
        )
        .unwrap();
        assert!(
            p.warnings
                .iter()
                .any(|w| w.contains("node 9 does not exist")),
            "{:?}",
            p.warnings
        );
    }

    /// Sets the 2 MiB pools of the nodes: (nr, free) each; the host's are the sums.
    fn with_node_pools(mut h: HostSnapshot, nodes: &[(u64, u64)], resv: u64) -> HostSnapshot {
        h.node_pools = nodes
            .iter()
            .enumerate()
            .map(|(i, (nr, free))| {
                serde_json::from_value(serde_json::json!({"node": i, "counters": {
                    "page_size_bytes": M2, "nr": nr, "free": free, "resv": null,
                    "surplus": 0, "nr_overcommit": null}}))
                .unwrap()
            })
            .collect();
        let nr: u64 = nodes.iter().map(|n| n.0).sum();
        let free: u64 = nodes.iter().map(|n| n.1).sum();
        h.pools[0] = PoolCounters::new(M2, nr, free, Some(resv), 0, Some(0));
        h
    }

    #[test]
    fn live_segments_count_where_they_sit_when_a_size_is_split() {
        let h = host(2);
        let live = |pages_on: &[(u32, u64)]| {
            Demand::new("sysv 7", 64 * M2, M2).on_nodes(pages_on.iter().copied().collect())
        };
        // 40 of its 64 pages on node 0, 4 on node 1, 20 not faulted yet
        // (spread), next to a spread region of 100 pages.
        let p = plan(
            &h,
            &[
                Demand::new("new", 100 * M2, M2).placed(Placement::Spread),
                live(&[(0, 40), (1, 4)]),
            ],
            vec![],
            2,
        )
        .unwrap();
        assert_eq!(pool(&p, M2, Some(0)).pages, 50 + 40 + 10 + 2);
        assert_eq!(pool(&p, M2, Some(1)).pages, 50 + 4 + 10 + 2);
        assert_eq!(
            p.counted[1].note.as_deref(),
            Some("counted on the nodes it sits on now (node 0: 40, node 1: 4 pages)")
        );
        // Alone, it stays host-wide: the kernel spreads the pool itself.
        let p = plan(&h, &[live(&[(0, 40), (1, 4)])], vec![], 2).unwrap();
        assert_eq!(pool(&p, M2, None).pages, 66);
        assert_eq!(p.pools.len(), 1);
        assert_eq!(p.counted[0].note, None);
    }

    #[test]
    fn a_plan_of_new_regions_keeps_room_for_live_segments() {
        // The field report: pools 100/20, a live region with 32 pages on
        // node 0, then --size 200M --spread (52/52).
        let h = with_node_pools(host(2), &[(100, 68), (20, 20)], 0);
        assert_eq!(live_pages(&h, M2, Some(0)), 32);
        assert_eq!(live_pages(&h, M2, Some(1)), 0);
        assert_eq!(live_pages(&h, M2, None), 32);
        let mut p = plan(
            &h,
            &[Demand::new("--size 200 MiB", 200 * MIB, M2).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        assert!(!p.keep_live && p.warnings.is_empty(), "{:?}", p.warnings);
        keep_room_for_live(&mut p, &h, None);
        assert!(p.keep_live);
        assert_eq!(
            p.warnings,
            vec![
                "live huge page segments use 32 pages of the 2 MiB pool of node 0 now, which \
                  this plan does not count: at 52 pages the pool leaves 20 free for the 50 the \
                  plan counts there; count them too with --live (apply refuses this plan; \
                  --force applies it anyway)"
                    .to_string()
            ]
        );
        // Room for both: nothing to say.
        let h2 = with_node_pools(host(2), &[(100, 98), (20, 20)], 0);
        let mut p = plan(
            &h2,
            &[Demand::new("--size 200 MiB", 200 * MIB, M2).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        keep_room_for_live(&mut p, &h2, None);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        // Reserved pages sit on no node: the nodes together must hold them.
        let h3 = with_node_pools(host(2), &[(100, 100), (20, 20)], 10);
        let p = plan(
            &h3,
            &[Demand::new("--size 200 MiB", 200 * MIB, M2).placed(Placement::Spread)],
            vec![],
            2,
        )
        .unwrap();
        let crowded = crowded_pools(&p, |s, n| live_pages(&h3, s, n));
        assert_eq!(crowded.len(), 1, "{crowded:?}");
        assert_eq!(
            (
                crowded[0].0.node,
                crowded[0].0.pages,
                crowded[0].1,
                crowded[0].2
            ),
            (None, 104, 10, 100)
        );
    }

    #[test]
    fn memory_left_warnings() {
        let h = host(1);
        let p = plan(&h, &[Demand::new("big", 60 * GIB, M2)], vec![], 0).unwrap();
        assert_eq!(p.left_bytes, Some(4 * GIB));
        assert!(
            p.warnings.iter().any(|w| w.contains("leaves 4 GiB")),
            "{:?}",
            p.warnings
        );
        let p = plan(&h, &[Demand::new("huge", 65 * GIB, M2)], vec![], 0).unwrap();
        assert!(
            p.warnings.iter().any(|w| w.contains("machine has 64 GiB")),
            "{:?}",
            p.warnings
        );
        let p = plan(&h, &[Demand::new("odd", GIB, 16 * GIB)], vec![], 0).unwrap();
        assert!(
            p.warnings.iter().any(|w| w.contains("no 16 GiB pages")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn hugetlb_shm_group() {
        let h = host(1);
        let p = plan(
            &h,
            &[Demand::new("s", 8 * M2, M2).with_sysv_gid(54321)],
            vec![],
            0,
        )
        .unwrap();
        assert_eq!(p.config.hugetlb_shm_group, Some(54321));
        let sysctl = p
            .config
            .files
            .iter()
            .find(|f| f.path.ends_with("sysctl.d/60-hugeshm.conf"))
            .unwrap();
        assert!(sysctl.content.contains("vm.hugetlb_shm_group = 54321"));
    }
}
