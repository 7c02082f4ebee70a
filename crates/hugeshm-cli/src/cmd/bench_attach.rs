//! `hugeshm bench attach`: how long a new process takes to attach a large
//! region and map every page of it, with and without the smaps
//! verification that `hugeshm attach` does. The options, the call of
//! [`hugeshm_lab::attach::measure`], the printer, and the hidden attaching
//! child's line.

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};
use hugeshm_lab::attach::{measure, Options, Report};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize};
use std::process::ExitCode;

/// `bench attach` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size.
    #[arg(long, default_value = "4G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page size.
    #[arg(long, default_value = "2m", value_parser = crate::values::page_size())]
    pub page_size: PageSize,
    /// Backend of the region (one the attaching processes find by name).
    #[arg(long, default_value = "sysv", value_parser = crate::values::named_backend())]
    pub backend: Backend,
    /// New processes that attach, one after another (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Do not raise the huge page pools for the run.
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The options of the command line.
    fn options(&self) -> Options {
        Options {
            size: self.size,
            page_size: self.page_size,
            backend: self.backend,
            runs: self.runs,
            reserve: !self.no_reserve,
        }
    }
}

/// The hidden child: attach, touch, verify, print the times.
pub fn child(name: &str, backend: Backend, out: &mut Out) -> anyhow::Result<ExitCode> {
    out.exact(&hugeshm_lab::attach::child_line(name, backend)?)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let steps = crate::progress::steps("bench attach", a.runs.max(1) as u64);
    let _finish = steps.finish_on_drop();
    let report = measure(&Probe::new(roots.clone()), &a.options(), &steps)?;
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&report, out)?;
    Ok(ExitCode::SUCCESS)
}

/// The medians as one table row, and what each column measures.
fn print(report: &Report, out: &mut Out) -> anyhow::Result<()> {
    out.line(format!(
        "a new process attaching a {} {} region on {} pages and mapping every page (median of {} processes)",
        format_bytes(report.size_bytes),
        report.backend,
        page_size_short(report.page_size_bytes),
        report.runs.len()
    ))?;
    let mut t = Table::new(&[
        ">attach ms",
        ">touch ms",
        ">ready ms",
        ">verify ms",
        ">ready+verify ms",
        ">page check ms",
        ">ready+check ms",
        ">shared page tables",
        ">VmPTE",
    ]);
    t.row(vec![
        format!("{:.3}", report.attach_ms),
        format!("{:.3}", report.touch_ms),
        format!("{:.3}", report.ready_ms),
        format!("{:.3}", report.verify_ms),
        format!("{:.3}", report.ready_verified_ms),
        format!("{:.3}", report.page_check_ms),
        format!("{:.3}", report.ready_page_checked_ms),
        format_bytes(report.pmd_shareable_bytes),
        report
            .vm_pte_bytes
            .map(format_bytes)
            .unwrap_or_else(|| "-".into()),
    ]);
    t.render(out, "")?;
    out.line("attach = find, check the header, map; touch = map every page (one read fault per GiB where page tables are shared, MADV_POPULATE_READ elsewhere); verify = read /proc/self/smaps for the region")?;
    out.line(format!(
        "page check = the page size alone ({}), residency not read",
        match report.page_check_source {
            hugeshm_region::PageSizeSource::ProcmapQuery => "PROCMAP_QUERY: no page-table walk",
            _ => "from smaps: not hugetlb, or no PROCMAP_QUERY before Linux 6.11",
        }
    ))?;
    out.flush()
}
