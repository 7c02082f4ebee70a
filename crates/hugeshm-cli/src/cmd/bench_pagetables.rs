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

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};
use hugeshm_lab::pagetables::{child_attach, measure, planned_steps, Options, Report};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize};
use std::io::BufRead;
use std::process::ExitCode;

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

impl Args {
    /// What the lab measures.
    pub fn options(&self) -> Options {
        Options {
            size: self.size,
            procs: self.procs.clone(),
            page_size: self.page_size.clone(),
            backend: self.backend,
            no_reserve: self.no_reserve,
        }
    }
}

/// The hidden child: waits for "attach", attaches and touches, reports its
/// time, and holds the region until stdin closes.
pub fn child(name: &str, backend: Backend, out: &mut Out) -> anyhow::Result<ExitCode> {
    let stdin = std::io::stdin();
    let Some((region, secs)) = child_attach(name, backend, &mut stdin.lock())? else {
        return Ok(ExitCode::SUCCESS);
    };
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
    let o = a.options();
    let probe = Probe::new(roots.clone());
    let steps = crate::progress::steps("bench pagetables", planned_steps(&o));
    let report = measure(&probe, &o, &steps);
    steps.finish();
    print(a, &report?, out)
}

fn print(a: &Args, report: &Report, out: &mut Out) -> anyhow::Result<ExitCode> {
    if a.json {
        out.json_doc(report)?;
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
