//! `hugeshm bench pagetables`: page-table memory per attached process, by
//! page size, against the theory; and attach time per process.
//!
//! N child processes start idle; PageTables (/proc/meminfo) is read; then
//! every child attaches the region and touches every page, and PageTables is
//! read again. The difference divided by N is what one attached process costs
//! in page tables for this region alone (the children's own page tables are in
//! both readings).

use crate::cmd::bench_common::{bench_region, parse_count_arg, parse_size_arg, reap, PoolTopUp};
use crate::output::{Keyed, Out, Table};
use anyhow::{bail, Context};
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
    #[arg(long, default_value = "4G", value_parser = parse_size_arg)]
    pub size: u64,
    /// Processes that attach and touch the whole region.
    #[arg(long, default_value_t = 64, value_parser = parse_count_arg::<u32>)]
    pub procs: u32,
    /// Page sizes (comma-separated): 4k, 2m, 1g.
    #[arg(long, value_delimiter = ',', default_value = "4k,2m")]
    pub page_size: Vec<String>,
    /// Backend of the region (named: sysv, hugetlbfs or posix).
    #[arg(long, default_value = "sysv")]
    pub backend: Backend,
    /// Do not raise the huge page pools for the run.
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Row {
    page_size_bytes: u64,
    size_bytes: u64,
    procs: u32,
    backend: Backend,
    page_tables_bytes_before: u64,
    page_tables_bytes_after: u64,
    page_tables_bytes_per_proc: u64,
    theory_bytes_per_proc: u64,
    theory: String,
    attach_seconds_mean: f64,
    attach_seconds_max: f64,
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
pub fn child(name: &str, backend: Backend) -> anyhow::Result<ExitCode> {
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
    println!("ready {secs}");
    std::io::stdout().flush()?;
    let mut rest = String::new();
    while stdin.lock().read_line(&mut rest)? > 0 {}
    drop(region);
    Ok(ExitCode::SUCCESS)
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    if !a.backend.is_named() {
        bail!(
            "--backend must be a named backend (sysv, hugetlbfs or posix): children attach by name"
        );
    }
    let probe = Probe::new(roots.clone());
    let host = probe.host();
    let mut rows = Vec::new();
    for ps_text in &a.page_size {
        let page: PageSize = ps_text.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        let ps = page
            .bytes()
            .context("--page-size takes explicit sizes (4k, 2m, 1g)")?;
        let mut reservation = PoolTopUp::new(&probe);
        if ps > 4096 && !a.no_reserve {
            reservation.ensure(&host, ps, a.size.div_ceil(ps))?;
        }
        let name = format!(
            "bench-pagetables-{}-{}",
            std::process::id(),
            page_size_short(ps)
        );
        let result = (|| -> anyhow::Result<Row> {
            let (region, _on_interrupt) = bench_region(&name, a.size, a.backend, page)?;
            let outcome = (|| -> anyhow::Result<Row> {
                let mut kids = Kids::spawn(&name, a.backend, a.procs)?;
                std::thread::sleep(Duration::from_millis(200));
                let before = page_tables()?;
                let times = kids.attach(0..a.procs as usize)?;
                let after = page_tables()?;
                let (t, why) = theory(a.size, ps);
                Ok(Row {
                    page_size_bytes: ps,
                    size_bytes: a.size,
                    procs: a.procs,
                    backend: a.backend,
                    page_tables_bytes_before: before,
                    page_tables_bytes_after: after,
                    page_tables_bytes_per_proc: after.saturating_sub(before)
                        / u64::from(a.procs.max(1)),
                    theory_bytes_per_proc: t,
                    theory: why,
                    attach_seconds_mean: times.iter().sum::<f64>() / times.len().max(1) as f64,
                    attach_seconds_max: times.iter().copied().fold(0.0, f64::max),
                })
            })();
            let destroyed = region.destroy().map_err(|e| anyhow::anyhow!("{e}"));
            let row = outcome?;
            destroyed?;
            Ok(row)
        })();
        drop(reservation);
        rows.push(result?);
    }
    if a.json {
        out.json_doc(&Keyed("results", &rows))?;
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
    for r in &rows {
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
    out.line("page tables/proc = (PageTables after all attached and touched - before) / procs")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
