//! Seed 001: start-up of a large shared area is dominated by page faults;
//! faulting huge pages from several threads at once (the kernel hashes its
//! hugetlb fault mutex per page) took a 10 GB instance from 37.5 s to
//! 25.7 s. Here: create + pre-fault (ready) time of regions of growing
//! size, on 4 KiB pages (a tmpfs file, as /dev/shm) and 2 MiB pages, with
//! one thread and with every CPU.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Runs, Series};
use super::pools::make_available;
use crate::common::PoolTopUp;
use crate::prefault;
use hugeshm_parse::size::{format_bytes, page_size_short, GIB, MIB};
use hugeshm_region::{Backend, PageSize};

/// The reproduction.
pub struct Startup;

/// The field report's start-up, one fault at a time and concurrent.
const FIELD_SERIAL_S: f64 = 37.5;
const FIELD_CONCURRENT_S: f64 = 25.7;
const FIELD_BYTES: f64 = 10e9;
const FIELD_SETTING: &str =
    "10 GB instance, ~5,000 faults, kernel before and after concurrent hugetlb faults";

/// Region sizes: doubling from 512 MiB to a quarter of memory (at most
/// 8 GiB), or two small ones with `--quick`.
fn sizes(ctx: &Ctx<'_>) -> Vec<u64> {
    if ctx.quick {
        return vec![32 * MIB, 64 * MIB];
    }
    let top = (ctx.mem_bytes / 4).clamp(GIB, 8 * GIB);
    let mut v = Vec::new();
    let mut s = 512 * MIB;
    while s <= top {
        v.push(s);
        s *= 2;
    }
    v
}

/// One (page size, size, threads) point.
#[derive(Debug)]
struct Point {
    page: u64,
    size: u64,
    threads: usize,
    ready: Runs,
    prefault_gbps: f64,
}

/// The page sizes measured: 4 KiB, and 2 MiB where the kernel has them
/// (and their pages can be had).
fn page_sizes(ctx: &Ctx<'_>) -> Vec<u64> {
    let mut pages = vec![4096];
    if ctx.host.pool(2 * MIB).is_some() {
        pages.push(2 * MIB);
    }
    pages
}

/// The points of `pages`, in the order they are measured: (page size,
/// region size, threads).
fn points(ctx: &Ctx<'_>, pages: &[u64]) -> Vec<(u64, u64, usize)> {
    let sizes = sizes(ctx);
    let largest = *sizes.last().expect("at least one size");
    // 4 KiB pages fault about ten times slower: up to 1 GiB (larger
    // sizes would add minutes, and say nothing new).
    let small_top = if ctx.quick { largest } else { GIB.min(largest) };
    let mut points = Vec::new();
    for &page in pages {
        for &size in sizes.iter().filter(|&&s| page > 4096 || s <= small_top) {
            for t in ctx.thread_counts() {
                points.push((page, size, t));
            }
        }
    }
    points
}

/// `bench prefault`'s options for one point: a warm-up on `threads`
/// threads, then `ctx.runs()` runs; no memset baseline (the lab has its
/// ceiling), no peers, the pools the lab's.
fn options(ctx: &Ctx<'_>, page: u64, size: u64, threads: usize) -> prefault::Options {
    prefault::Options {
        sizes: vec![size],
        page_sizes: vec![if page == 4096 {
            PageSize::Base
        } else {
            PageSize::Huge(page)
        }],
        threads: vec![threads],
        runs: ctx.runs(),
        huge_backend: Backend::Anon,
        reserve: false,
        peers: false,
        memset: false,
    }
}

/// One point, measured by `bench prefault`.
fn measure(ctx: &Ctx<'_>, page: u64, size: u64, threads: usize) -> anyhow::Result<Point> {
    let o = options(ctx, page, size, threads);
    let steps = ctx
        .steps
        .prefixed(&format!("{} region", format_bytes(size)));
    let report = prefault::measure(ctx.probe, &o, &steps)?;
    if let Some(sk) = report.skipped.first() {
        anyhow::bail!("{}", sk.reason);
    }
    let row = report
        .results
        .first()
        .ok_or_else(|| anyhow::anyhow!("start-up: no row measured"))?;
    Ok(Point {
        page,
        size,
        threads,
        ready: Runs::seconds(
            row.cold_seconds.unwrap_or(row.ready_seconds),
            row.samples.iter().map(|s| s.ready_seconds).collect(),
        ),
        prefault_gbps: row
            .samples
            .iter()
            .map(|s| s.prefault_gbps)
            .fold(0.0, f64::max),
    })
}

impl Lab for Startup {
    fn name(&self) -> &'static str {
        "startup"
    }
    fn seed(&self) -> &'static str {
        "001"
    }
    fn title(&self) -> &'static str {
        "start-up of a large region: pre-fault time, concurrent huge-page faults against one thread"
    }

    fn steps(&self, ctx: &Ctx<'_>) -> u64 {
        points(ctx, &page_sizes(ctx))
            .into_iter()
            .map(|(page, size, t)| prefault::planned_steps(ctx.host, &options(ctx, page, size, t)))
            .sum()
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        let sizes = sizes(ctx);
        let largest = *sizes.last().expect("at least one size");
        let threads = ctx.thread_counts();
        let huge = 2 * MIB;
        let mut pages = vec![4096];
        let mut reservation = PoolTopUp::new(ctx.probe);
        match make_available(ctx, &mut reservation, huge, largest.div_ceil(huge)) {
            Ok(()) => pages.push(huge),
            Err(e) => out.notes.push(format!("2 MiB pages not measured: {e}")),
        }
        let small_top = if ctx.quick { largest } else { GIB.min(largest) };
        if !ctx.quick && largest > small_top {
            out.notes.push(format!(
                "4 KiB pages measured up to {} (they fault about ten times slower)",
                format_bytes(small_top)
            ));
        }
        let mut measured = Vec::new();
        for (page, size, t) in points(ctx, &pages) {
            measured.push(measure(ctx, page, size, t)?);
        }
        let points = measured;
        drop(reservation);

        let mut table = DataTable::new(&[
            "page",
            ">region",
            ">threads",
            ">warm-up s",
            ">best s",
            ">median s",
            ">ready GB/s",
            ">pre-fault GB/s",
            ">of memset",
            ">of 4k clear",
        ]);
        for p in &points {
            let of = |c: Option<f64>| {
                c.filter(|c| *c > 0.0)
                    .map(|c| format!("{:.0}%", p.prefault_gbps / c * 100.0))
                    .unwrap_or_else(|| "-".into())
            };
            table.row(vec![
                page_size_short(p.page),
                format_bytes(p.size),
                p.threads.to_string(),
                format!("{:.3}", p.ready.warmup),
                format!("{:.3}", p.ready.best),
                format!("{:.3}", p.ready.median),
                format!("{:.2}", p.size as f64 / 1e9 / p.ready.best.max(1e-9)),
                format!("{:.2}", p.prefault_gbps),
                of(ctx.ceiling_gbps(p.threads)),
                of(ctx.clear_4k_gbps(p.threads)),
            ]);
        }
        out.table = table;

        let series = pages
            .iter()
            .flat_map(|&page| threads.iter().map(move |&t| (page, t)))
            .map(|(page, t)| Series {
                name: format!(
                    "{} pages, {t} thread{}",
                    page_size_short(page),
                    if t == 1 { "" } else { "s" }
                ),
                points: points
                    .iter()
                    .filter(|p| p.page == page && p.threads == t)
                    .map(|p| (p.size as f64 / GIB as f64, p.ready.best))
                    .collect(),
            })
            .collect();
        out.plots.push(Plot {
            id: "startup-time".to_owned(),
            title: "Start-up (create + pre-fault) time against region size".to_owned(),
            kind: PlotKind::Lines,
            x_label: "region size (GiB)".to_owned(),
            x_counts: false,
            y_label: "seconds (best run)".to_owned(),
            categories: Vec::new(),
            series,
        });

        // The comparisons: at the largest size, on huge pages.
        let at = |page: u64, t: usize| {
            points
                .iter()
                .find(|p| p.page == page && p.size == largest && p.threads == t)
        };
        let top = *threads.last().expect("at least one thread count");
        let setting = format!(
            "{} on 2 MiB pages, 1 thread against {top}",
            format_bytes(largest)
        );
        let one = at(huge, 1);
        let many = at(huge, top);
        let speedup = one.zip(many).map(|(a, b)| a.ready.best / b.ready.best);
        let mut c = Comparison::new(
            "speed-up of concurrent huge-page faults",
            "x",
            (FIELD_SERIAL_S / FIELD_CONCURRENT_S, FIELD_SETTING),
            (speedup.filter(|_| top > 1), setting),
        );
        if top == 1 {
            c = c.note("one CPU: nothing runs concurrently here");
        }
        out.comparisons.push(c);
        let rate = many.map(|p| p.size as f64 / 1e9 / p.ready.best.max(1e-9));
        out.comparisons.push(
            Comparison::new(
                "huge-page start-up rate",
                "GB/s",
                (FIELD_BYTES / 1e9 / FIELD_CONCURRENT_S, FIELD_SETTING),
                (
                    rate,
                    format!("{} on 2 MiB pages, {top} threads", format_bytes(largest)),
                ),
            )
            .note("the field figure is a whole instance start-up, of which faults are the bulk"),
        );
        if let Some(r) = rate {
            out.notes.push(format!(
                "at this rate the field report's 10 GB would be ready in {:.1} s",
                FIELD_BYTES / 1e9 / r
            ));
        }
        let same = |page: u64| {
            points
                .iter()
                .find(|p| p.page == page && p.size == small_top && p.threads == top)
        };
        if let (Some(a), Some(b)) = (same(4096), same(huge)) {
            out.notes.push(format!(
                "4 KiB pages (a tmpfs file, as /dev/shm) take {:.1}x the time of 2 MiB pages at {}",
                a.ready.best / b.ready.best,
                format_bytes(small_top)
            ));
        }
        Ok(())
    }
}
