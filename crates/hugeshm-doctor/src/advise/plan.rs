//! Demands → pools: the demands of the live host's segments, the plan's
//! arithmetic (pages per size and node, spares, splits), demotion, and
//! the room a plan of new regions leaves for live segments.

use super::config::{config_for, memlock_users, thp_shmem_for, valid_systemd_unit};
use super::model::{pool_name, Counted, Demand, Placement, Plan, PlanDemote, PlanPool, Skipped};
use crate::checked::{self, TooLarge};
use crate::segments::{SegmentKind, SegmentsReport};
use hugeshm_parse::size::{format_bytes, page_size_short, BASE_PAGE, GIB, MIB};
use hugeshm_probe::HostSnapshot;
use std::collections::BTreeMap;

/// Spare pages added to each pool of pages smaller than 1 GiB, unless
/// `--spare` says otherwise (1 GiB pools get none: rounding up to whole GiB
/// already leaves slack).
/// Oracle's own rule adds one page per segment; ansible-oracle moved from 2 to
/// 4 per instance after servers failed to start on an exact pool.
pub const DEFAULT_SPARE_PAGES: u64 = 2;

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
        thp_shmem_for(host.thp.shmem_enabled.as_ref().map(|s| s.selected.as_str())),
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

/// What the host's pools of the sizes a plan leaves alone hold now.
pub(super) fn kept_bytes(host: &HostSnapshot, planned: impl Fn(u64) -> bool) -> u64 {
    host.pools
        .iter()
        .filter(|p| !planned(p.page_size_bytes))
        .map(|p| p.nr.saturating_mul(p.page_size_bytes))
        .fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::testing::{host, host_that_can_demote, pool, M2};
    use crate::advise::DEFAULT_MEMLOCK_KIB;
    use hugeshm_parse::hugepages::PoolCounters;

    #[test]
    fn demotion_is_said_or_planned() {
        let h = host_that_can_demote();
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
}
