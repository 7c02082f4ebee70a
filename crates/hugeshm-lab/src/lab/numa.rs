//! Seed 002: /dev/shm memory landed on one NUMA node ("Cyclops"), and
//! writing 1 GiB there from the other socket's CPUs took 1.116 s against
//! 0.931 s locally: 20% slower. Here: `bench numa`'s measurement (a region
//! bound local, bound remote, interleaved; write and read bandwidth per
//! page size) where the host has two memory nodes; on one node, the local
//! bandwidth per page size and the reason there is nothing to compare.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Runs, Series};
use super::pools::make_available;
use crate::common::PoolTopUp;
use crate::numa::{self as bench_numa, Options};
use hugeshm_parse::size::{format_bytes, page_size_short, MIB};
use hugeshm_region::{PageSize, Placement};

/// The reproduction.
pub struct Numa;

/// `dd` of 1 GiB into /dev/shm: remote 1.116 s, local 0.931 s.
const FIELD_REMOTE_S: f64 = 1.116;
const FIELD_LOCAL_S: f64 = 0.931;
const FIELD_BYTES: f64 = 1024.0 * 1024.0 * 1024.0;
const FIELD_SETTING: &str =
    "dd of 1 GiB into /dev/shm on a 2-socket Opteron, remote 1.116 s, local 0.931 s";

/// One bar group: a placement of one page size.
struct Bar {
    page: u64,
    placement: String,
    nodes: String,
    write: Runs,
    read: Runs,
}

/// Far over any cache: 512 MiB on a host of 16 GiB or more, a 32nd of
/// memory below.
fn region_bytes(ctx: &Ctx<'_>) -> u64 {
    if ctx.quick {
        32 * MIB
    } else {
        ctx.scaled(32, 128 * MIB, 512 * MIB)
    }
}

fn page_sizes(ctx: &Ctx<'_>) -> Vec<u64> {
    let mut v = vec![4096];
    if ctx.host.pool(2 * MIB).is_some() {
        v.push(2 * MIB);
    }
    v
}

/// `bench numa`'s options.
fn args(ctx: &Ctx<'_>) -> Options {
    Options {
        size: region_bytes(ctx),
        page_size: page_sizes(ctx)
            .into_iter()
            .map(|b| match b {
                4096 => hugeshm_region::PageSize::Base,
                b => hugeshm_region::PageSize::Huge(b),
            })
            .collect(),
        runs: ctx.runs(),
        cpu_node: None,
        no_reserve: !ctx.reserve,
    }
}

/// Two or more memory nodes: `bench numa` as it is.
fn multi_node(ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<Option<Vec<Bar>>> {
    let report = bench_numa::measure(ctx.probe, &args(ctx), ctx.steps)?;
    if report.single_node {
        if let Some(m) = report.message {
            out.notes.push(m);
        }
        return Ok(None);
    }
    for s in &report.skipped {
        out.notes.push(format!(
            "{} pages not measured: {}",
            page_size_short(s.page_size_bytes),
            s.reason
        ));
    }
    Ok(Some(
        report
            .results
            .iter()
            .map(|r| Bar {
                page: r.page_size_bytes,
                placement: r.placement.to_owned(),
                nodes: r
                    .node_bytes
                    .iter()
                    .map(|(n, b)| format!("{n}: {}", format_bytes(*b)))
                    .collect::<Vec<_>>()
                    .join(", "),
                // bench numa's runs each start with an untimed pass.
                write: Runs::rates(0.0, r.write_gbps_runs.clone()),
                read: Runs::rates(0.0, r.read_gbps_runs.clone()),
            })
            .collect(),
    ))
}

/// One memory node: the local bandwidth per page size, a warm-up run first.
fn one_node(ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<Vec<Bar>> {
    let size = region_bytes(ctx);
    let node = ctx
        .host
        .nodes
        .iter()
        .find(|n| !n.cpus.is_empty())
        .map(|n| n.node)
        .unwrap_or(0);
    let mut bars = Vec::new();
    for page in page_sizes(ctx) {
        let mut top = PoolTopUp::new(ctx.probe);
        let ps = if page == 4096 {
            PageSize::Base
        } else {
            if let Err(e) = make_available(ctx, &mut top, page, size.div_ceil(page)) {
                out.notes
                    .push(format!("{} pages not measured: {e}", page_size_short(page)));
                continue;
            }
            PageSize::Huge(page)
        };
        let once = |run: &str| {
            ctx.steps
                .begin(&format!("local {} pages, {run}", page_size_short(page)));
            bench_numa::bench_numa(size, ps, Placement::Bind(vec![node]))
                .map_err(|e| anyhow::anyhow!("{e}"))
        };
        let warm = once("warm-up")?;
        let mut w = Vec::new();
        let mut r = Vec::new();
        let mut nodes = String::new();
        for i in 0..ctx.runs() {
            let s = once(&format!("run {}", i + 1))?;
            w.push(s.write_gbps);
            r.push(s.read_gbps);
            nodes = s
                .node_bytes
                .iter()
                .map(|(n, b)| format!("{n}: {}", format_bytes(*b)))
                .collect::<Vec<_>>()
                .join(", ");
        }
        bars.push(Bar {
            page,
            placement: "local".to_owned(),
            nodes,
            write: Runs::rates(warm.write_gbps, w),
            read: Runs::rates(warm.read_gbps, r),
        });
    }
    Ok(bars)
}

impl Lab for Numa {
    fn name(&self) -> &'static str {
        "numa"
    }
    fn seed(&self) -> &'static str {
        "002"
    }
    fn title(&self) -> &'static str {
        "local, remote and interleaved memory bandwidth"
    }

    fn steps(&self, ctx: &Ctx<'_>) -> u64 {
        match bench_numa::planned_steps(ctx.host, &args(ctx)) {
            // One memory node: a warm-up and the runs per page size.
            0 => page_sizes(ctx).len() as u64 * (1 + ctx.runs() as u64),
            n => n,
        }
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        let bars = match multi_node(ctx, out)? {
            Some(b) => b,
            None => one_node(ctx, out)?,
        };
        let size = region_bytes(ctx);
        let mut table = DataTable::new(&[
            "page",
            "placement",
            "pages on nodes",
            ">write GB/s",
            ">median",
            ">warm-up",
            ">read GB/s",
            ">median",
            ">write of memset",
        ]);
        let ceiling = ctx.ceiling_gbps(1);
        for b in &bars {
            table.row(vec![
                page_size_short(b.page),
                b.placement.clone(),
                b.nodes.clone(),
                format!("{:.2}", b.write.best),
                format!("{:.2}", b.write.median),
                if b.write.warmup > 0.0 {
                    format!("{:.2}", b.write.warmup)
                } else {
                    "-".to_owned()
                },
                format!("{:.2}", b.read.best),
                format!("{:.2}", b.read.median),
                ceiling
                    .filter(|c| *c > 0.0)
                    .map(|c| format!("{:.0}%", b.write.best / c * 100.0))
                    .unwrap_or_else(|| "-".to_owned()),
            ]);
        }
        out.table = table;
        let categories: Vec<String> = bars
            .iter()
            .map(|b| format!("{} {}", page_size_short(b.page), b.placement))
            .collect();
        out.plots.push(Plot {
            id: "numa-bandwidth".to_owned(),
            title: format!(
                "Bandwidth of a {} region by page size and placement (one thread)",
                format_bytes(size)
            ),
            kind: PlotKind::Bars,
            x_label: "page size and placement".to_owned(),
            x_counts: false,
            y_label: "GB/s (best run)".to_owned(),
            categories,
            series: vec![
                Series {
                    name: "write".to_owned(),
                    points: bars
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (i as f64, b.write.best))
                        .collect(),
                },
                Series {
                    name: "read".to_owned(),
                    points: bars
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (i as f64, b.read.best))
                        .collect(),
                },
            ],
        });

        let find = |page: u64, placement: &str| {
            bars.iter()
                .find(|b| b.page == page && b.placement == placement)
        };
        let page = if find(2 * MIB, "local").is_some() {
            2 * MIB
        } else {
            4096
        };
        let setting = format!(
            "{} region on {} pages, one thread",
            format_bytes(size),
            page_size_short(page)
        );
        let slowdown = find(page, "local")
            .zip(find(page, "remote"))
            .map(|(l, r)| l.write.best / r.write.best.max(1e-9));
        let mut c = Comparison::new(
            "remote write time against local",
            "x",
            (FIELD_REMOTE_S / FIELD_LOCAL_S, FIELD_SETTING),
            (slowdown, setting.clone()),
        );
        if slowdown.is_none() {
            c = c.note("one memory node: no remote memory here (the QEMU guest has two)");
        }
        out.comparisons.push(c);
        out.comparisons.push(
            Comparison::new(
                "local write bandwidth",
                "GB/s",
                (FIELD_BYTES / 1e9 / FIELD_LOCAL_S, FIELD_SETTING),
                (find(page, "local").map(|b| b.write.best), setting),
            )
            .note("dd writes through tmpfs with a system call per MiB; ours is memset into a mapped region"),
        );
        if let (Some(small), Some(big)) = (find(4096, "local"), find(2 * MIB, "local")) {
            out.notes.push(format!(
                "local write: 2 MiB pages {:.2} GB/s, 4 KiB pages {:.2} GB/s ({:.2}x)",
                big.write.best,
                small.write.best,
                big.write.best / small.write.best.max(1e-9)
            ));
        }
        Ok(())
    }
}
