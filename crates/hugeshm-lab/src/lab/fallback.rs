//! Seed 000: a server that asks for huge pages and finds one page short
//! silently starts on 4 KiB pages, and the pool it did not use sits idle
//! (10,000 pages needed, 9,999 free: all 9,999 wasted); `only`
//! (`use_large_pages=ONLY`) refuses instead. And seed 003's counters: a
//! region reserved at its maximum size and touched up to its target leaves
//! `HugePages_Rsvd` promised, so what is really free is Free − Rsvd.
//!
//! Here: one SysV region (the SGA's kind) with the pool exactly as big as
//! it needs, one page short under `try`, one page short under `only`; then
//! a region created without pre-fault in a pool 10% over it, touched to
//! 80%, with the kernel's counters read at each step.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Series};
use super::pools::make_available;
use crate::common::PoolTopUp;
use crate::guard::{self, Taken};
use hugeshm_parse::size::{format_bytes, page_size_short, GIB, MIB};
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};

/// The reproduction.
pub struct Fallback;

const FIELD_NEEDED: f64 = 10_000.0;
const FIELD_FREE: f64 = 9_999.0;
const FIELD_SETTING: &str = "instance needs 10,000 pages of 2 MiB, 9,999 free: starts on 4 KiB";
/// Seed 003's example: an 11 GB pool, SGA_MAX_SIZE 10 GB, SGA_TARGET 8 GB.
const FIELD_POOL: f64 = 11.0;
const FIELD_MAX: f64 = 10.0;
const FIELD_TARGET: f64 = 8.0;
const FIELD_RSVD_SETTING: &str =
    "the 2016 Enmotech article: 11 GB pool, SGA_MAX_SIZE 10 GB, SGA_TARGET 8 GB: Free 3 GB, Rsvd 2 GB";

/// Pool counters of one page size: (free, reserved).
fn counters(ctx: &Ctx<'_>, page: u64) -> anyhow::Result<(u64, u64)> {
    let host = ctx.probe.host();
    let p = host
        .pool(page)
        .ok_or_else(|| anyhow::anyhow!("the {} pool vanished", format_bytes(page)))?;
    Ok((p.free, p.resv.unwrap_or(0)))
}

/// One way a server can start: what backs the region, what sits idle.
struct Case {
    label: &'static str,
    policy: Policy,
    /// Page size the region got (`None`: refused).
    got_page: Option<u64>,
    resident: u64,
    /// Huge pages free and not promised after the start: nobody uses them.
    idle_pages: u64,
    ready_s: f64,
    said: String,
}

fn start(ctx: &Ctx<'_>, label: &'static str, size: u64, policy: Policy) -> anyhow::Result<Case> {
    let huge = 2 * MIB;
    ctx.steps.begin(&format!(
        "{} region, policy {}",
        format_bytes(size),
        policy.as_str()
    ));
    let name = format!("lab-fallback-{}-{}", std::process::id(), policy.as_str());
    let _on_interrupt = guard::undo(Taken::Region {
        name: name.clone(),
        backend: Backend::Sysv,
    });
    let created = RegionBuilder::new(size)
        .backend(Backend::Sysv)
        .name(name)
        .page_size(PageSize::Huge(huge))
        .policy(policy)
        .probe(ctx.probe.clone())
        .create();
    match created {
        Ok((region, report)) => {
            let (free, resv) = counters(ctx, huge)?;
            let case = Case {
                label,
                policy,
                got_page: Some(report.verified_page_size_bytes),
                resident: report.resident_bytes,
                idle_pages: free.saturating_sub(resv),
                ready_s: report.ready_seconds,
                said: report
                    .reason()
                    .map(str::to_owned)
                    .unwrap_or_else(|| "on the pages asked for".to_owned()),
            };
            region.destroy().map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(case)
        }
        Err(e) if policy == Policy::Only => {
            let (free, resv) = counters(ctx, huge)?;
            Ok(Case {
                label,
                policy,
                got_page: None,
                resident: 0,
                idle_pages: free.saturating_sub(resv),
                ready_s: 0.0,
                said: e.to_string(),
            })
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

/// Seed 003's counters, scaled: (pool, touched, reserved left) in pages.
struct Rsvd {
    pool: u64,
    region: u64,
    touched: u64,
    reserved_left: u64,
}

fn rsvd(ctx: &Ctx<'_>, size: u64) -> anyhow::Result<Rsvd> {
    let huge = 2 * MIB;
    let region_pages = size / huge;
    let pool = (region_pages as f64 * FIELD_POOL / FIELD_MAX).ceil() as u64;
    let target = (region_pages as f64 * FIELD_TARGET / FIELD_MAX).round() as u64;
    let mut top = PoolTopUp::new(ctx.probe);
    make_available(ctx, &mut top, huge, pool)
        .map_err(|e| anyhow::anyhow!("the counters part: {e}"))?;
    let (f0, r0) = counters(ctx, huge)?;
    ctx.steps.begin(&format!(
        "{} reserved, touched to {target} pages",
        format_bytes(size)
    ));
    let name = format!("lab-rsvd-{}", std::process::id());
    let _on_interrupt = guard::undo(Taken::Region {
        name: name.clone(),
        backend: Backend::Sysv,
    });
    let (mut region, _) = RegionBuilder::new(size)
        .backend(Backend::Sysv)
        .name(name)
        .page_size(PageSize::Huge(huge))
        .policy(Policy::Only)
        .prefault_threads(0)
        .probe(ctx.probe.clone())
        .create()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let result = (|| -> anyhow::Result<(u64, u64)> {
        // The header sits in the first page (create wrote it); one byte in
        // each further page up to the target faults it in.
        let data_offset = region.data_offset();
        for page in 1..target as usize {
            region
                .write_at(page * huge as usize - data_offset, &[1])
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let (f2, r2) = counters(ctx, huge)?;
        Ok((f0.saturating_sub(f2), r2.saturating_sub(r0)))
    })();
    let destroyed = region.destroy().map_err(|e| anyhow::anyhow!("{e}"));
    let (touched, reserved_left) = result?;
    destroyed?;
    Ok(Rsvd {
        pool: f0.saturating_sub(r0),
        region: region_pages,
        touched,
        reserved_left,
    })
}

/// The region: 1 GiB on a host of 16 GiB or more, a sixteenth of memory
/// below, 64 MiB with `--quick`.
fn region_bytes(ctx: &Ctx<'_>) -> u64 {
    if ctx.quick {
        64 * MIB
    } else {
        ctx.scaled(16, 256 * MIB, GIB)
    }
}

impl Lab for Fallback {
    fn name(&self) -> &'static str {
        "fallback"
    }
    fn seed(&self) -> &'static str {
        "000"
    }
    fn title(&self) -> &'static str {
        "silent fall-back to 4 KiB pages: the region's memory plus the idle reserved pool"
    }

    fn steps(&self, ctx: &Ctx<'_>) -> u64 {
        let Some(pool) = ctx.host.pool(2 * MIB) else {
            return 0;
        };
        let needed = region_bytes(ctx) / (2 * MIB);
        let short = pool.free.saturating_sub(pool.resv.unwrap_or(0)) < needed;
        // Three starts where the shortfall can be set up, and the counters.
        let starts = if short && ctx.reserve { 3 } else { 0 };
        starts + 1
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        let huge = 2 * MIB;
        let Some(pool) = ctx.host.pool(huge) else {
            out.notes.push(
                "this kernel offers no 2 MiB pages: nothing can fall back from them".to_owned(),
            );
            return Ok(());
        };
        let size = region_bytes(ctx);
        let needed = size / huge;
        let available = pool.free.saturating_sub(pool.resv.unwrap_or(0));
        if available >= needed {
            out.notes.push(format!(
                "the 2 MiB pool already has {available} pages available, more than the {needed} \
                 of the region: the shortfall cannot be shown without shrinking it, so only \
                 the counters part ran"
            ));
        } else if !ctx.reserve {
            out.notes
                .push("--no-reserve: the pools cannot be set up for the shortfall".to_owned());
        }
        let mut cases = Vec::new();
        if available < needed && ctx.reserve {
            {
                let mut short = PoolTopUp::new(ctx.probe);
                short.ensure(ctx.host, huge, needed - 1)?;
                cases.push(start(ctx, "one page short, try", size, Policy::Try)?);
                cases.push(start(ctx, "one page short, only", size, Policy::Only)?);
            }
            let mut enough = PoolTopUp::new(ctx.probe);
            enough.ensure(ctx.host, huge, needed)?;
            cases.insert(0, start(ctx, "pool holds it, try", size, Policy::Try)?);
        }

        let mut table = DataTable::new(&[
            "start",
            "policy",
            "pages got",
            ">region resident",
            ">idle huge pages",
            ">idle bytes",
            ">held in all",
            ">ready s",
        ]);
        for c in &cases {
            table.row(vec![
                c.label.to_owned(),
                c.policy.as_str().to_owned(),
                c.got_page
                    .map(page_size_short)
                    .unwrap_or_else(|| "refused".to_owned()),
                format_bytes(c.resident),
                c.idle_pages.to_string(),
                format_bytes(c.idle_pages * huge),
                format_bytes(c.resident + c.idle_pages * huge),
                format!("{:.3}", c.ready_s),
            ]);
        }
        if !cases.is_empty() {
            out.plots.push(Plot {
                id: "fallback-memory".to_owned(),
                title: format!(
                    "Memory held for a {} region, by how it started",
                    format_bytes(size)
                ),
                kind: PlotKind::Bars,
                x_label: "start".to_owned(),
                x_counts: false,
                y_label: "MiB".to_owned(),
                categories: cases.iter().map(|c| c.label.to_owned()).collect(),
                series: vec![
                    Series {
                        name: "the region's pages".to_owned(),
                        points: cases
                            .iter()
                            .enumerate()
                            .map(|(i, c)| (i as f64, c.resident as f64 / MIB as f64))
                            .collect(),
                    },
                    Series {
                        name: "idle reserved huge pages".to_owned(),
                        points: cases
                            .iter()
                            .enumerate()
                            .map(|(i, c)| (i as f64, (c.idle_pages * huge) as f64 / MIB as f64))
                            .collect(),
                    },
                ],
            });
        }
        if let Some(c) = cases
            .iter()
            .find(|c| c.policy == Policy::Try && c.got_page == Some(4096))
        {
            let setting = format!(
                "{} SysV region, {} pages needed, {} free",
                format_bytes(size),
                needed,
                needed - 1
            );
            out.comparisons.push(Comparison::new(
                "fall-back: idle reserved pool, share of what was asked",
                "%",
                (FIELD_FREE / FIELD_NEEDED * 100.0, FIELD_SETTING),
                (
                    Some(c.idle_pages as f64 / needed as f64 * 100.0),
                    setting.clone(),
                ),
            ));
            out.comparisons.push(
                Comparison::new(
                    "fall-back: memory held against the region's size",
                    "x",
                    ((FIELD_NEEDED + FIELD_FREE) / FIELD_NEEDED, FIELD_SETTING),
                    (
                        Some((c.resident + c.idle_pages * huge) as f64 / size as f64),
                        setting,
                    ),
                )
                .note("the region on 4 KiB pages plus the pool nobody uses"),
            );
            out.notes.push(format!("try, one page short: {}", c.said));
        }
        if let Some(c) = cases.iter().find(|c| c.policy == Policy::Only) {
            out.notes.push(format!(
                "only (use_large_pages=ONLY), one page short: refused: {}",
                c.said
            ));
        }

        if !ctx.reserve
            && ctx
                .host
                .pool(huge)
                .is_some_and(|p| p.available() < needed * 11 / 10 + 1)
        {
            out.table = table;
            out.notes.push(format!(
                "counters part not run: --no-reserve and the pool has {} pages available, {} needed",
                available,
                (needed as f64 * FIELD_POOL / FIELD_MAX).ceil()
            ));
            return Ok(());
        }
        let r = rsvd(ctx, size)?;
        let pct = |pages: u64| Some(pages as f64 / r.pool.max(1) as f64 * 100.0);
        let setting = format!(
            "{} pages of 2 MiB in the pool, a {}-page region, {} touched",
            r.pool, r.region, r.touched
        );
        let free = r.pool.saturating_sub(r.touched);
        let really = free.saturating_sub(r.reserved_left);
        for (what, field, ours) in [
            (
                "counters: HugePages_Free, share of the pool",
                (FIELD_POOL - FIELD_TARGET) / FIELD_POOL,
                free,
            ),
            (
                "counters: HugePages_Rsvd, share of the pool",
                (FIELD_MAX - FIELD_TARGET) / FIELD_POOL,
                r.reserved_left,
            ),
            (
                "counters: really available (Free - Rsvd), share of the pool",
                (FIELD_POOL - FIELD_MAX) / FIELD_POOL,
                really,
            ),
        ] {
            out.comparisons.push(Comparison::new(
                what,
                "%",
                (field * 100.0, FIELD_RSVD_SETTING),
                (pct(ours), setting.clone()),
            ));
        }
        table.row(vec![
            "reserved, touched to 80%".to_owned(),
            "only".to_owned(),
            "2M".to_owned(),
            format_bytes(r.touched * huge),
            really.to_string(),
            format_bytes(really * huge),
            format!("Free {free}, Rsvd {}", r.reserved_left),
            "-".to_owned(),
        ]);
        out.table = table;
        Ok(())
    }
}
