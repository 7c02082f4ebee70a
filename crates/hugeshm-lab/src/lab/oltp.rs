//! Seed 000: an I/O-heavy OLTP test on a 4-core box gave 905 transactions
//! per second with Oracle's AMM (the SGA in /dev/shm files, 4 KiB pages)
//! against 872 with the SGA in SysV huge pages: the workload waited on its
//! disk, so page size hardly showed. Here: `bench oltp`'s shared buffer
//! cache over a data file twice its size (so blocks are read in, as the
//! field's were), Zipfian access with 10% writes, on /dev/shm files with
//! 4 KiB pages and on a SysV segment with 2 MiB pages; and once more with
//! the whole file cached, where the memory path alone decides.

use super::model::{Comparison, Ctx, DataTable, Lab, Plot, PlotKind, Reproduction, Series};
use crate::oltp::{measure, planned_steps, Dist, Options, Report, Row};
use hugeshm_parse::size::{format_bytes, GIB, MIB};
use hugeshm_region::Backend;

/// The reproduction.
pub struct Oltp;

const FIELD_AMM_TPS: f64 = 905.0;
const FIELD_SYSV_TPS: f64 = 872.0;
const FIELD_SETTING: &str =
    "4 cores at 100%, I/O-heavy OLTP: AMM (/dev/shm, 4 KiB) 905 tps, SysV huge pages 872 tps";

/// One workload: the cache size against the data file's.
struct Case {
    label: &'static str,
    cache: u64,
    data: u64,
}

fn options(ctx: &Ctx<'_>, case: &Case, backend: Backend, pages: &[u64]) -> Options {
    Options {
        cache_size_bytes: case.cache,
        data_size_bytes: case.data,
        workers: ctx.cpus.max(1) as u32,
        duration_seconds: if ctx.quick { 0.2 } else { 2.0 },
        runs: ctx.runs() as u32,
        page_sizes: pages.to_vec(),
        backends: vec![backend],
        dist: Dist::Zipf,
        write_pct: 10,
        block_size: 8192,
        data_dir: std::path::PathBuf::from("/var/tmp"),
        raw: false,
        reserve: ctx.reserve,
    }
}

/// The two workloads: a sixteenth of memory (at most 1 GiB) of buffers
/// over a data file twice that, and over one it holds whole.
fn cases(ctx: &Ctx<'_>) -> [Case; 2] {
    let cache = if ctx.quick {
        16 * MIB
    } else {
        ctx.scaled(16, 128 * MIB, GIB)
    };
    [
        Case {
            label: "data file twice the cache (blocks read in)",
            cache,
            data: 2 * cache,
        },
        Case {
            label: "data file cached whole (memory only)",
            cache,
            data: cache,
        },
    ]
}

/// The layouts the plot shows, as the table has them: its name, backend
/// and page size.
const LAYOUTS: [(&str, Backend, u64); 3] = [
    ("/dev/shm file, 4 KiB (AMM)", Backend::Posix, 4096),
    ("SysV, 4 KiB", Backend::Sysv, 4096),
    ("SysV, 2 MiB", Backend::Sysv, 2 * MIB),
];

/// The layouts of one workload, in the order measured: AMM's (4 KiB:
/// /dev/shm files get no huge pages), then SysV on both page sizes (its
/// 4 KiB row tells the page size from the backend).
fn layouts(ctx: &Ctx<'_>, case: &Case) -> (Options, Options) {
    (
        options(ctx, case, Backend::Posix, &[4096]),
        options(ctx, case, Backend::Sysv, &[4096, 2 * MIB]),
    )
}

/// The row of `backend` on `page` pages, measured.
fn row(report: &Report, backend: Backend, page: u64) -> Option<&Row> {
    report
        .rows
        .iter()
        .find(|r| r.backend == backend && r.page_size_bytes == page && r.cache.is_some())
}

fn tps(r: Option<&Row>) -> Option<f64> {
    r.and_then(|r| r.cache.as_ref()).map(|c| c.best_tps)
}

impl Lab for Oltp {
    fn name(&self) -> &'static str {
        "oltp"
    }
    fn seed(&self) -> &'static str {
        "000"
    }
    fn title(&self) -> &'static str {
        "OLTP over a shared buffer cache: AMM-style /dev/shm files on 4 KiB pages against SysV on 2 MiB pages"
    }

    fn steps(&self, ctx: &Ctx<'_>) -> u64 {
        cases(ctx)
            .iter()
            .map(|case| {
                let (amm, sysv) = layouts(ctx, case);
                planned_steps(&amm) + planned_steps(&sysv)
            })
            .sum()
    }

    fn run(&self, ctx: &Ctx<'_>, out: &mut Reproduction) -> anyhow::Result<()> {
        let cases = cases(ctx);
        let mut table = DataTable::new(&[
            "workload",
            "layout",
            ">tps (best)",
            ">p99",
            ">hit ratio",
            ">page tables/worker",
            ">start-up",
        ]);
        let mut bars = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let (amm_o, sysv_o) = layouts(ctx, case);
            let mut report = measure(&ctx.probe.roots, &amm_o, ctx.steps)?;
            report
                .rows
                .extend(measure(&ctx.probe.roots, &sysv_o, ctx.steps)?.rows);
            for r in &report.rows {
                let layout = format!(
                    "{} on {}",
                    if r.backend == Backend::Posix {
                        "/dev/shm file (AMM)"
                    } else {
                        "SysV segment"
                    },
                    format_bytes(r.page_size_bytes)
                );
                match (&r.cache, &r.not_measured) {
                    (Some(c), _) => table.row(vec![
                        case.label.to_owned(),
                        layout,
                        format!("{:.0}", c.best_tps),
                        c.p99_ns
                            .map(|n| format!("{:.1} us", n as f64 / 1000.0))
                            .unwrap_or_else(|| "-".into()),
                        c.hit_ratio
                            .map(|h| format!("{:.1}%", h * 100.0))
                            .unwrap_or_else(|| "-".into()),
                        r.page_tables_bytes_per_worker
                            .map(format_bytes)
                            .unwrap_or_else(|| "-".into()),
                        format!("{:.2} s", r.startup_seconds),
                    ]),
                    (None, why) => out.notes.push(format!(
                        "{}, {layout}: not measured: {}",
                        case.label,
                        why.as_deref().unwrap_or("no result")
                    )),
                }
            }
            let amm = tps(row(&report, Backend::Posix, 4096));
            let sysv = tps(row(&report, Backend::Sysv, 2 * MIB));
            // Every layout of the table, in its order.
            bars.push(Series {
                name: case.label.to_owned(),
                points: LAYOUTS
                    .iter()
                    .enumerate()
                    .map(|(i, &(_, backend, page))| {
                        (i as f64, tps(row(&report, backend, page)).unwrap_or(0.0))
                    })
                    .collect(),
            });
            let setting = format!(
                "{} of buffers over a {} data file, {} workers, Zipf, 10% writes",
                format_bytes(case.cache),
                format_bytes(case.data),
                sysv_o.workers
            );
            let ours = amm.zip(sysv).map(|(a, s)| s / a);
            let mut c = Comparison::new(
                &format!("SysV 2 MiB tps / AMM 4 KiB tps, {}", case.label),
                "x",
                (FIELD_SYSV_TPS / FIELD_AMM_TPS, FIELD_SETTING),
                (ours, setting),
            );
            if i == 0 {
                c = c.note(
                    "the field's box was bound by its disk; here misses are reads from the \
                     page cache, so the memory path weighs more",
                );
            }
            out.comparisons.push(c);
        }
        out.table = table;
        out.plots.push(Plot {
            id: "oltp-tps".to_owned(),
            title: "OLTP transactions per second by shared memory layout".to_owned(),
            kind: PlotKind::Bars,
            x_label: "layout".to_owned(),
            x_counts: false,
            y_label: "transactions per second".to_owned(),
            categories: LAYOUTS.iter().map(|l| l.0.to_owned()).collect(),
            series: bars,
        });
        out.notes.push(
            "tps counts one 64-byte row of one 8 KiB block read or updated; `hugeshm bench \
             oltp` runs the same workload with every backend and page size"
                .to_owned(),
        );
        Ok(())
    }
}
