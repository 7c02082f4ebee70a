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

use crate::common::{bench_region, fit, reap, PoolTopUp, Skipped};
use crate::Steps;
use anyhow::Context;
use hugeshm_parse::size::{format_bytes, page_size_short, GIB};
use hugeshm_probe::Probe;
use hugeshm_region::{Backend, PageSize, Region};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// What `bench pagetables` measures.
#[derive(Debug, Clone)]
pub struct Options {
    /// Region size.
    pub size: u64,
    /// Processes that attach and touch the whole region; several counts
    /// attach them in steps (the slope is fitted).
    pub procs: Vec<u32>,
    /// Page sizes.
    pub page_size: Vec<PageSize>,
    /// Backend of the region (one the children find by name).
    pub backend: Backend,
    /// Do not raise the huge page pools for the run.
    pub no_reserve: bool,
}

/// One page size at one count: what the processes attached so far added
/// (fields as `--json` names them).
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub page_size_bytes: u64,
    pub size_bytes: u64,
    /// Processes attached at this step (all of them so far).
    pub procs: u32,
    pub backend: Backend,
    pub page_tables_bytes_before: u64,
    pub page_tables_bytes_after: u64,
    pub page_tables_bytes_per_proc: u64,
    pub theory_bytes_per_proc: u64,
    pub theory: String,
    /// Attach and touch of the processes that attached in this step.
    pub attach_seconds_mean: f64,
    pub attach_seconds_max: f64,
}

/// Page tables against the number of processes, per page size (with
/// several counts).
#[derive(Debug, serde::Serialize)]
pub struct Growth {
    pub page_size_bytes: u64,
    pub procs: Vec<u32>,
    /// PageTables added at each count.
    pub page_tables_bytes: Vec<u64>,
    /// The least-squares slope: page-table bytes per added process.
    pub bytes_per_proc: f64,
    /// The line's intercept (bytes at 0 processes): what does not grow
    /// with the count, plus the noise of other processes on the host.
    pub fixed_bytes: f64,
    pub theory_bytes_per_proc: u64,
}

/// What `bench pagetables` found (its `--json`).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub results: Vec<Row>,
    pub growth: Vec<Growth>,
    /// Page sizes not measured, why, and the fix.
    pub skipped: Vec<Skipped>,
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

/// The hidden child's work (`bench pagetables-child`): waits for the
/// line `attach` on `input`, attaches the region and maps every page;
/// returns it and the seconds that took (`None`: told something else, or
/// nothing). The caller says `ready SECONDS` and holds the region until
/// its stdin closes.
pub fn child_attach(
    name: &str,
    backend: Backend,
    input: &mut impl BufRead,
) -> anyhow::Result<Option<(Region, f64)>> {
    let mut line = String::new();
    input.read_line(&mut line)?;
    if line.trim() != "attach" {
        return Ok(None);
    }
    let t = Instant::now();
    let region = Region::attach(name, backend).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Map every page (MADV_POPULATE_READ; reads map the existing pages).
    region.populate_read().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Some((region, t.elapsed().as_secs_f64())))
}

/// The counts of `o.procs`, in order, once each.
fn counts(o: &Options) -> Vec<u32> {
    let mut counts = o.procs.clone();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// How many steps [`measure`] takes: per page size, starting the
/// processes, then each count attached.
pub fn planned_steps(o: &Options) -> u64 {
    o.page_size.len() as u64 * (1 + counts(o).len() as u64)
}

/// Measures the page tables of each page size at each count, each step of
/// `steps` ([`planned_steps`] of them); a page size whose pages cannot be
/// had is [`Report::skipped`].
pub fn measure(probe: &Probe, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let a = o;
    let counts = counts(o);
    let most = *counts.last().context("--procs needs at least one count")?;
    crate::common::check_process_room(probe, most.into(), "--procs")?;
    let host = probe.host();
    let mut rows = Vec::new();
    let mut growth = Vec::new();
    let mut skipped = Vec::new();
    // Per page size: starting the processes, then each count attached.
    let page_steps = 1 + counts.len() as u64;
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
        let mut reservation = PoolTopUp::new(probe);
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
    Ok(report)
}
