//! `hugeshm bench pagetables`: page-table memory per attached process, by
//! page size, against the theory; and attach time per process.
//!
//! N child processes start idle; PageTables (/proc/meminfo) is read; then
//! every child attaches the region and touches every page, and PageTables is
//! read again. The difference divided by N is what one attached process costs
//! in page tables for this region alone (the children's own page tables are in
//! both readings). Several counts (`--procs 16,64,256`) attach the children
//! in steps and read PageTables after each: a row per count, and per page
//! size the least-squares slope (bytes per added process) and intercept.

use crate::cmd::bench_common::{bench_region, fit, parse_count_arg, reap, PoolTopUp, Skipped};
use crate::output::{Out, Table};
use anyhow::Context;
use hugeshm_parse::size::{format_bytes, page_size_short, GIB};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize, Region};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// `bench pagetables` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size.
    #[arg(long, default_value = "4G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Processes that attach and touch the whole region; several counts
    /// (comma-separated) attach them in steps and print the slope.
    #[arg(long, value_delimiter = ',', default_value = "64", value_parser = parse_count_arg::<u32>)]
    pub procs: Vec<u32>,
    /// Page sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4k,2m", value_parser = crate::values::page_size())]
    pub page_size: Vec<PageSize>,
    /// Backend of the region (one the children find by name).
    #[arg(long, default_value = "sysv", value_parser = crate::values::named_backend())]
    pub backend: Backend,
    /// Do not raise the huge page pools for the run.
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// One page size at one count: what the processes attached so far added.
#[derive(Debug, serde::Serialize)]
struct Row {
    page_size_bytes: u64,
    size_bytes: u64,
    /// Processes attached at this step (all of them so far).
    procs: u32,
    backend: Backend,
    page_tables_bytes_before: u64,
    page_tables_bytes_after: u64,
    page_tables_bytes_per_proc: u64,
    theory_bytes_per_proc: u64,
    theory: String,
    /// Attach and touch of the processes that attached in this step.
    attach_seconds_mean: f64,
    attach_seconds_max: f64,
}

/// Page tables against the number of processes, per page size (with
/// several counts).
#[derive(Debug, serde::Serialize)]
struct Growth {
    page_size_bytes: u64,
    procs: Vec<u32>,
    /// PageTables added at each count.
    page_tables_bytes: Vec<u64>,
    /// The least-squares slope: page-table bytes per added process.
    bytes_per_proc: f64,
    /// The line's intercept (bytes at 0 processes): what does not grow
    /// with the count, plus the noise of other processes on the host.
    fixed_bytes: f64,
    theory_bytes_per_proc: u64,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    results: Vec<Row>,
    growth: Vec<Growth>,
    /// Page sizes not measured, why, and the fix.
    skipped: Vec<Skipped>,
}

/// What one attached process should cost, and why.
pub(crate) fn theory(size: u64, page: u64) -> (u64, String) {
    let gib = size.div_ceil(GIB);
    if page == 4096 {
        // 8-byte PTEs for every 4 KiB page: 2 MiB per GiB, plus a PMD page per GiB.
        (
            size / 4096 * 8 + gib * 4096,
            "8 B per 4 KiB page: 2 MiB per GiB".into(),
        )
    } else {
        // With PMD sharing (x86-64, shared hugetlb, 1 GiB-aligned): ~0; without,
        // one 4 KiB PMD page per GiB.
        (
            0,
            format!(
                "~0 with PMD sharing; {} without (one PMD page per GiB)",
                format_bytes(gib * 4096)
            ),
        )
    }
}

struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// Idle child processes that attach a named region when told to and hold
/// it until dropped (then they are reaped, or killed after a grace time).
/// `hugeshm lab` uses them too.
pub(crate) struct Kids(Vec<Kid>);

impl Kids {
    /// Starts `n` idle children (`bench pagetables-child NAME BACKEND`).
    pub(crate) fn spawn(name: &str, backend: Backend, n: u32) -> anyhow::Result<Kids> {
        let exe = std::env::current_exe()?;
        let mut kids = Kids(Vec::new());
        for i in 0..n {
            let mut child = Command::new(&exe)
                .args(["bench", "pagetables-child", name, backend.as_str()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("spawning child {i} of {n}"))?;
            let stdin = child.stdin.take();
            let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
            kids.0.push(Kid {
                child,
                stdin,
                stdout,
            });
        }
        Ok(kids)
    }

    /// The children's process ids.
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|k| k.child.id()).collect()
    }

    /// Tells children `range` to attach and touch every page; returns the
    /// seconds each took, once all are done.
    pub(crate) fn attach(&mut self, range: std::ops::Range<usize>) -> anyhow::Result<Vec<f64>> {
        let started = self.0.len();
        let kids = self
            .0
            .get_mut(range.clone())
            .with_context(|| format!("children {range:?} asked of {started} started"))?;
        for k in kids.iter_mut() {
            if let Some(s) = k.stdin.as_mut() {
                writeln!(s, "attach")?;
                s.flush()?;
            }
        }
        let mut times = Vec::new();
        for k in kids.iter_mut() {
            let mut line = String::new();
            k.stdout.read_line(&mut line)?;
            let secs: f64 = line
                .strip_prefix("ready ")
                .and_then(|t| t.trim().parse().ok())
                .with_context(|| format!("a child failed to attach (said {line:?})"))?;
            times.push(secs);
        }
        Ok(times)
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        for k in &mut self.0 {
            k.stdin.take();
        }
        reap(
            self.0.iter_mut().map(|k| &mut k.child),
            Duration::from_secs(30),
        );
    }
}

/// Host-wide `PageTables` of /proc/meminfo, bytes.
pub(crate) fn page_tables() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    let m = hugeshm_parse::meminfo::parse(&text)?;
    m.page_tables_bytes
        .context("/proc/meminfo has no PageTables line")
}

/// The hidden child: waits for "attach", attaches and touches, reports its
/// time, and holds the region until stdin closes.
pub fn child(name: &str, backend: Backend, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mut line = String::new();
    let stdin = std::io::stdin();
    stdin.lock().read_line(&mut line)?;
    if line.trim() != "attach" {
        return Ok(ExitCode::SUCCESS);
    }
    let t = Instant::now();
    let region = Region::attach(name, backend).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Map every page (MADV_POPULATE_READ; reads map the existing pages).
    region.populate_read().map_err(|e| anyhow::anyhow!("{e}"))?;
    let secs = t.elapsed().as_secs_f64();
    out.exact(&format!("ready {secs}"))?;
    out.flush()?;
    let mut rest = String::new();
    while stdin.lock().read_line(&mut rest)? > 0 {}
    drop(region);
    Ok(ExitCode::SUCCESS)
}

/// Bytes of a fitted line, which may be below 0 (`-12 KiB`).
fn signed_bytes(b: f64) -> String {
    let sign = if b < -0.5 { "-" } else { "" };
    format!("{sign}{}", format_bytes(b.abs().round() as u64))
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let mut counts = a.procs.clone();
    counts.sort_unstable();
    counts.dedup();
    let most = *counts.last().context("--procs needs at least one count")?;
    let probe = Probe::new(roots.clone());
    crate::cmd::bench_common::check_process_room(&probe, most.into(), "--procs")?;
    let host = probe.host();
    let mut rows = Vec::new();
    let mut growth = Vec::new();
    let mut skipped = Vec::new();
    // Per page size: starting the processes, then each count attached.
    let page_steps = 1 + counts.len() as u64;
    let steps = crate::progress::steps("bench pagetables", a.page_size.len() as u64 * page_steps);
    let _finish = steps.finish_on_drop();
    for &page in &a.page_size {
        let _part = steps.part(page_steps);
        let ps = page
            .bytes()
            .context("--page-size takes explicit sizes (4k, 2m, 1g)")?;
        let pages = a.size.div_ceil(ps);
        if ps > 4096 && host.pool(ps).is_none() {
            skipped.push(Skipped::no_such_pages(&host, ps, pages));
            continue;
        }
        // A page size whose pages cannot be had (1 GiB pages on a used
        // host) is a line saying why; the others run.
        let mut reservation = PoolTopUp::new(&probe);
        if ps > 4096 && !a.no_reserve {
            if let Err(e) = reservation.ensure(&host, ps, pages) {
                skipped.push(Skipped::failed(ps, pages, &e));
                continue;
            }
        }
        let name = format!(
            "bench-pagetables-{}-{}",
            std::process::id(),
            page_size_short(ps)
        );
        let (t, why) = theory(a.size, ps);
        let result = (|| -> anyhow::Result<Vec<Row>> {
            let (region, _on_interrupt) = bench_region(&name, a.size, a.backend, page)?;
            let outcome = (|| -> anyhow::Result<Vec<Row>> {
                steps.begin(&format!(
                    "starting {most} processes ({} pages)",
                    page_size_short(ps)
                ));
                let mut kids = Kids::spawn(&name, a.backend, most)?;
                std::thread::sleep(Duration::from_millis(200));
                let before = page_tables()?;
                let mut done = 0;
                let mut rows = Vec::new();
                for &n in &counts {
                    steps.begin(&format!(
                        "{n} processes attached ({} pages)",
                        page_size_short(ps)
                    ));
                    let times = kids.attach(done..n as usize)?;
                    done = n as usize;
                    let after = page_tables()?;
                    rows.push(Row {
                        page_size_bytes: ps,
                        size_bytes: a.size,
                        procs: n,
                        backend: a.backend,
                        page_tables_bytes_before: before,
                        page_tables_bytes_after: after,
                        page_tables_bytes_per_proc: after.saturating_sub(before) / u64::from(n),
                        theory_bytes_per_proc: t,
                        theory: why.clone(),
                        attach_seconds_mean: times.iter().sum::<f64>() / times.len().max(1) as f64,
                        attach_seconds_max: times.iter().copied().fold(0.0, f64::max),
                    });
                }
                Ok(rows)
            })();
            let destroyed = region.destroy().map_err(|e| anyhow::anyhow!("{e}"));
            let steps = outcome?;
            destroyed?;
            Ok(steps)
        })();
        drop(reservation);
        let steps = match result {
            Ok(steps) => steps,
            Err(e) => {
                skipped.push(Skipped::failed(ps, pages, &e));
                continue;
            }
        };
        let added = |r: &Row| {
            r.page_tables_bytes_after
                .saturating_sub(r.page_tables_bytes_before)
        };
        let pts: Vec<(f64, f64)> = steps
            .iter()
            .map(|r| (f64::from(r.procs), added(r) as f64))
            .collect();
        if let Some((k, fixed)) = fit(&pts) {
            growth.push(Growth {
                page_size_bytes: ps,
                procs: steps.iter().map(|r| r.procs).collect(),
                page_tables_bytes: steps.iter().map(added).collect(),
                bytes_per_proc: k,
                fixed_bytes: fixed,
                theory_bytes_per_proc: t,
            });
        }
        rows.extend(steps);
    }
    let report = Report {
        results: rows,
        growth,
        skipped,
    };
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "page",
        ">region",
        ">procs",
        ">page tables/proc",
        ">theory/proc",
        ">attach+touch s",
        "theory",
    ]);
    for r in &report.results {
        t.row(vec![
            page_size_short(r.page_size_bytes),
            format_bytes(r.size_bytes),
            r.procs.to_string(),
            format_bytes(r.page_tables_bytes_per_proc),
            format_bytes(r.theory_bytes_per_proc),
            format!("{:.3}", r.attach_seconds_mean),
            r.theory.clone(),
        ]);
    }
    t.render(out, "")?;
    for g in &report.growth {
        out.line(format!(
            "growth {}: {} of page tables per added process (theory {}), {} fixed; PageTables added {} at {} processes",
            page_size_short(g.page_size_bytes),
            signed_bytes(g.bytes_per_proc),
            format_bytes(g.theory_bytes_per_proc),
            signed_bytes(g.fixed_bytes),
            g.page_tables_bytes
                .iter()
                .map(|&b| format_bytes(b))
                .collect::<Vec<_>>()
                .join(" / "),
            g.procs
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
        ))?;
    }
    crate::cmd::bench_common::print_skipped(&report.skipped, out)?;
    out.line("page tables/proc = (PageTables after the processes so far attached and touched - before any did) / procs")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
