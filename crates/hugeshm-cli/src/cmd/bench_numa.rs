//! `hugeshm bench numa`: the options, the call into `hugeshm_lab::numa`
//! and the table.

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};
use hugeshm_lab::numa::{measure, planned_steps, Options, Report};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::PageSize;
use std::process::ExitCode;

/// `bench numa` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size.
    #[arg(long, default_value = "256M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page sizes to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4k,2m", value_parser = crate::values::page_size())]
    pub page_size: Vec<PageSize>,
    /// Runs per placement and page size, each on a fresh region (best and
    /// median are reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<usize>)]
    pub runs: usize,
    /// The node whose CPUs run the bench (default: the first node with CPUs).
    #[arg(long)]
    pub cpu_node: Option<u32>,
    /// Do not raise the nodes' huge page pools for the run (by default, as
    /// root, the bench adds the pages it needs on each node and gives them
    /// back afterwards).
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
            page_size: self.page_size.clone(),
            runs: self.runs,
            cpu_node: self.cpu_node,
            no_reserve: self.no_reserve,
        }
    }
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = Probe::new(roots.clone());
    let o = a.options();
    let steps = crate::progress::steps("bench numa", planned_steps(&probe.host(), &o));
    let report = measure(&probe, &o, &steps);
    steps.finish();
    print(a, &report?, out)
}

fn print(a: &Args, report: &Report, out: &mut Out) -> anyhow::Result<ExitCode> {
    if a.json {
        out.json_doc(report)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(m) = &report.message {
        out.line(m)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let cpus = report
        .cpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    out.line(format!(
        "bandwidth of a {} region from the CPUs of node {} (cpus {cpus}), one thread, \
         best and median of {} runs (GB/s = decimal)",
        format_bytes(report.size_bytes),
        report.cpu_node.unwrap_or(0),
        report.runs
    ))?;
    let mut t = Table::new(&[
        "page",
        "placement",
        "policy",
        "pages on nodes",
        ">write GB/s",
        ">median",
        ">read GB/s",
        ">median",
    ]);
    for r in &report.results {
        let on = r
            .node_bytes
            .iter()
            .map(|(n, b)| format!("{n}: {}", format_bytes(*b)))
            .collect::<Vec<_>>()
            .join(", ");
        t.row(vec![
            page_size_short(r.page_size_bytes),
            r.placement.to_owned(),
            r.policy.clone(),
            on,
            format!("{:.2}", r.write_gbps_best),
            format!("{:.2}", r.write_gbps_median),
            format!("{:.2}", r.read_gbps_best),
            format!("{:.2}", r.read_gbps_median),
        ]);
    }
    t.render(out, "")?;
    let pct = |v: Option<f64>| {
        v.map(|x| format!("{:.0}%", x * 100.0))
            .unwrap_or_else(|| "-".into())
    };
    for r in &report.ratios {
        out.line(format!(
            "{}: remote is {} of local for writes, {} for reads; interleave {} and {}",
            page_size_short(r.page_size_bytes),
            pct(r.remote_vs_local_write),
            pct(r.remote_vs_local_read),
            pct(r.interleave_vs_local_write),
            pct(r.interleave_vs_local_read),
        ))?;
    }
    crate::cmd::bench_common::print_skipped(&report.skipped, out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
