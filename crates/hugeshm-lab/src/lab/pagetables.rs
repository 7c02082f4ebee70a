//! Seed 003: page tables explode with many processes. A 12 GB SGA with
//! ~300 sessions on 4 KiB pages had 4.6 GB of `PageTables`; on huge pages
//! they stayed under 120 MB. Here: one SysV region, real processes that
//! attach it and touch every page, added step by step up to 300 (scaled
//! down with `--quick`), and host-wide `PageTables` read after each step,
//! on 4 KiB and on 2 MiB pages.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Series};
use super::pools::make_available;
use crate::common::PoolTopUp;
use crate::pagetables::{page_tables, theory, Kids};
use hugeshm_parse::size::{format_bytes, page_size_short, GIB, KIB, MIB};
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
use std::time::Duration;

/// The reproduction.
pub struct PageTables;

/// The field report: `PageTables: 4749076 kB` with ~300 sessions on a
/// 12 GB SGA (4 KiB pages).
const FIELD_TOTAL_BYTES: f64 = 4_749_076.0 * 1024.0;
const FIELD_SESSIONS: f64 = 300.0;
const FIELD_SGA_GIB: f64 = 12.0;
const FIELD_SETTING: &str = "12 GB SGA, ~300 sessions, 4 KiB pages: PageTables 4,749,076 kB";
/// On huge pages: the report's own arithmetic, 48 KB of page tables for
/// 12 GB per process.
const FIELD_HUGE_PER_PROC: f64 = 48.0 * 1024.0;

/// One step: sessions attached so far, host-wide `PageTables` added, and
/// the sessions' own `VmPTE` added.
#[derive(Clone, Copy)]
struct Step {
    sessions: u32,
    page_tables: u64,
    vm_pte: u64,
}

/// What one page size measured, step by step.
struct Curve {
    page: u64,
    steps: Vec<Step>,
    attach_mean_s: f64,
}

/// The sum of `VmPTE` of these processes (their own page tables; a shared
/// PMD page is charged to each that uses it).
fn vm_pte(pids: &[u32]) -> anyhow::Result<u64> {
    let mut sum = 0;
    for pid in pids {
        let path = format!("/proc/{pid}/status");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {path} (a session ended early?): {e}"))?;
        sum += hugeshm_parse::pid_status::parse(&text)?
            .vm_pte_bytes
            .unwrap_or(0);
    }
    Ok(sum)
}

fn steps(ctx: &Ctx<'_>) -> Vec<u32> {
    if ctx.quick {
        vec![1, 2, 4]
    } else {
        vec![1, 10, 25, 50, 100, 150, 200, 250, 300]
    }
}

/// The region: 1 GiB (the least a 2 MiB mapping shares its page tables
/// at; 300 sessions on 4 KiB pages then hold 600 MiB of page tables),
/// 256 MiB on a host under 8 GiB, 64 MiB with `--quick`.
fn region_bytes(ctx: &Ctx<'_>) -> u64 {
    if ctx.quick {
        64 * MIB
    } else if ctx.mem_bytes < 8 * GIB {
        256 * MIB
    } else {
        GIB
    }
}

fn measure(ctx: &Ctx<'_>, page: u64, size: u64, steps: &[u32]) -> anyhow::Result<Curve> {
    let ps = if page == 4096 {
        PageSize::Base
    } else {
        PageSize::Huge(page)
    };
    let name = format!(
        "lab-pagetables-{}-{}",
        std::process::id(),
        page_size_short(page)
    );
    let _on_interrupt = crate::guard::undo(crate::guard::Taken::Region {
        name: name.clone(),
        backend: Backend::Sysv,
    });
    let (region, _) = RegionBuilder::new(size)
        .backend(Backend::Sysv)
        .page_size(ps)
        .policy(Policy::Only)
        .name(name.clone())
        .probe(ctx.probe.clone())
        .create()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let outcome = (|| -> anyhow::Result<Curve> {
        let most = *steps.last().unwrap_or(&1);
        ctx.steps.begin(&format!(
            "starting {most} processes ({} pages)",
            page_size_short(page)
        ));
        let mut kids = Kids::spawn(&name, Backend::Sysv, most)?;
        std::thread::sleep(Duration::from_millis(300));
        let pids = kids.pids();
        let before = page_tables()?;
        let before_pte = vm_pte(&pids)?;
        let mut done = 0usize;
        let mut curve = Vec::new();
        let mut times = Vec::new();
        for &n in steps {
            ctx.steps.begin(&format!(
                "{n} processes attached to {} on {} pages",
                format_bytes(size),
                page_size_short(page)
            ));
            times.extend(kids.attach(done..n as usize)?);
            done = n as usize;
            curve.push(Step {
                sessions: n,
                page_tables: page_tables()?.saturating_sub(before),
                vm_pte: vm_pte(&pids)?.saturating_sub(before_pte),
            });
        }
        Ok(Curve {
            page,
            steps: curve,
            attach_mean_s: times.iter().sum::<f64>() / times.len().max(1) as f64,
        })
    })();
    let destroyed = region.destroy().map_err(|e| anyhow::anyhow!("{e}"));
    let c = outcome?;
    destroyed?;
    Ok(c)
}

impl Lab for PageTables {
    fn name(&self) -> &'static str {
        "pagetables"
    }
    fn seed(&self) -> &'static str {
        "003"
    }
    fn title(&self) -> &'static str {
        "page tables per session and in total against the number of sessions, 4 KiB against 2 MiB pages"
    }

    fn steps(&self, ctx: &Ctx<'_>) -> u64 {
        // Per page size: starting the processes, then each count.
        let curves = if ctx.host.pool(2 * MIB).is_some() {
            2
        } else {
            1
        };
        curves * (1 + steps(ctx).len() as u64)
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        let size = region_bytes(ctx);
        let steps = steps(ctx);
        let huge = 2 * MIB;
        let mut curves = vec![measure(ctx, 4096, size, &steps)?];
        let mut reservation = PoolTopUp::new(ctx.probe);
        match make_available(ctx, &mut reservation, huge, size.div_ceil(huge)) {
            Ok(()) => curves.push(measure(ctx, huge, size, &steps)?),
            Err(e) => out.notes.push(format!("2 MiB pages not measured: {e}")),
        }
        drop(reservation);

        let gib = size as f64 / GIB as f64;
        let mut table = DataTable::new(&[
            "page",
            ">region",
            ">sessions",
            ">PageTables",
            ">per session",
            ">sessions' VmPTE",
            ">per session",
            ">theory/session",
        ]);
        for c in &curves {
            let (t, _) = theory(size, c.page);
            for st in &c.steps {
                let n = u64::from(st.sessions.max(1));
                table.row(vec![
                    page_size_short(c.page),
                    format_bytes(size),
                    st.sessions.to_string(),
                    format_bytes(st.page_tables),
                    format_bytes(st.page_tables / n),
                    format_bytes(st.vm_pte),
                    format_bytes(st.vm_pte / n),
                    format_bytes(t),
                ]);
            }
        }
        out.table = table;
        let series = |per: bool| {
            let mut v = Vec::new();
            for c in &curves {
                for (what, pick) in [
                    ("PageTables", (|s: &Step| s.page_tables) as fn(&Step) -> u64),
                    ("sessions' VmPTE", |s: &Step| s.vm_pte),
                ] {
                    v.push(Series {
                        name: format!("{} pages, {what}", page_size_short(c.page)),
                        points: c
                            .steps
                            .iter()
                            .map(|st| {
                                let b = pick(st) as f64;
                                let n = f64::from(st.sessions.max(1));
                                (
                                    f64::from(st.sessions),
                                    if per { b / n } else { b } / MIB as f64,
                                )
                            })
                            .collect(),
                    });
                }
            }
            v
        };
        out.plots.push(Plot {
            id: "pagetables-total".to_owned(),
            title: format!(
                "PageTables added by sessions attached to a {} region",
                format_bytes(size)
            ),
            kind: PlotKind::Lines,
            x_label: "sessions (processes that touched the whole region)".to_owned(),
            x_counts: true,
            y_label: "page tables in total (MiB)".to_owned(),
            categories: Vec::new(),
            series: series(false),
        });
        out.plots.push(Plot {
            id: "pagetables-per-session".to_owned(),
            title: "Page tables per session".to_owned(),
            kind: PlotKind::Lines,
            x_label: "sessions".to_owned(),
            x_counts: true,
            y_label: "page tables per session (MiB)".to_owned(),
            categories: Vec::new(),
            series: series(true),
        });

        // 4 KiB pages share nothing, so the sessions' own VmPTE is the
        // figure (steady where other processes move the host-wide one).
        // 2 MiB pages share their PMD pages, which only the host-wide
        // PageTables shows (as the field report read it), but other
        // processes move that: the smaller of the two (VmPTE overcounts
        // a shared page, never undercounts).
        let last = |page: u64| {
            curves
                .iter()
                .find(|c| c.page == page)
                .and_then(|c| c.steps.last())
                .map(|s| {
                    (
                        s.sessions,
                        if page == 4096 {
                            s.vm_pte
                        } else {
                            s.page_tables
                        },
                    )
                })
        };
        let most = *steps.last().unwrap_or(&1);
        let setting = format!(
            "{} SysV region, {most} sessions, their VmPTE",
            format_bytes(size)
        );
        let setting_huge = format!(
            "{} SysV region, {most} sessions, the smaller of PageTables and their VmPTE",
            format_bytes(size)
        );
        let per_gib = |(n, b): (u32, u64)| b as f64 / f64::from(n.max(1)) / gib;
        out.comparisons.push(
            Comparison::new(
                "4 KiB: page tables per session per GiB of shared memory",
                "MiB",
                (
                    FIELD_TOTAL_BYTES / FIELD_SESSIONS / FIELD_SGA_GIB / MIB as f64,
                    FIELD_SETTING,
                ),
                (last(4096).map(|x| per_gib(x) / MIB as f64), setting.clone()),
            )
            .note("theory: 8 B per 4 KiB page = 2 MiB per GiB; the field's sessions had not all touched every page"),
        );
        // The field's 300 sessions; fewer here (--quick) are scaled up, as
        // the curve is a straight line.
        let scale = FIELD_SESSIONS / f64::from(most);
        out.comparisons.push(Comparison::new(
            "4 KiB: page tables of 300 sessions against the size of the area",
            "%",
            (
                FIELD_TOTAL_BYTES / (FIELD_SGA_GIB * GIB as f64) * 100.0,
                FIELD_SETTING,
            ),
            (
                last(4096).map(|(_, b)| b as f64 * scale / size as f64 * 100.0),
                if most == 300 {
                    setting.clone()
                } else {
                    format!("{setting}, times {scale:.0}")
                },
            ),
        ));
        let huge_per = last(huge).map(|x| per_gib(x) / KIB as f64);
        let mut c = Comparison::new(
            "2 MiB: page tables per session per GiB",
            "KiB",
            (
                FIELD_HUGE_PER_PROC / FIELD_SGA_GIB / KIB as f64,
                "the report's arithmetic: 48 KB per process for 12 GB",
            ),
            (huge_per, setting_huge),
        );
        if huge_per.is_some_and(|v| v < 1.0) {
            c = c.note(if size >= GIB {
                "~0: the sessions share the PMD pages of a 1 GiB-aligned hugetlb mapping"
            } else {
                "~0: a 2 MiB page needs no PTE page; under 1 GiB no PMD page is shared"
            });
        }
        out.comparisons.push(c);
        if let (Some((_, small)), Some((_, big))) = (last(4096), last(huge)) {
            out.notes.push(if big == 0 {
                format!(
                    "{most} sessions on 2 MiB pages added no page tables at all; on 4 KiB pages {}",
                    format_bytes(small)
                )
            } else {
                format!(
                    "{most} sessions: 4 KiB pages cost {:.0}x the page tables of 2 MiB pages (field: 4.6 GB against under 120 MB, over 38x)",
                    small as f64 / big as f64
                )
            });
        }
        out.notes.push(
            "PageTables is host-wide (other processes on the host move it too; it counts a \
             shared PMD page once); VmPTE is each session's own (steady, but it charges a shared \
             PMD page to every session that uses it)"
                .to_owned(),
        );
        for c in &curves {
            out.notes.push(format!(
                "{} pages: a session attached and touched the region in {:.3} s on average",
                page_size_short(c.page),
                c.attach_mean_s
            ));
        }
        Ok(())
    }
}
