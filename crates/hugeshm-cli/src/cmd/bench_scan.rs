//! `hugeshm bench scan`: the `segments` scan timed with many processes
//! attached to one segment. The options, the call of
//! [`hugeshm_lab::scan::measure`], the printer, and the hidden child that
//! holds the segment.

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};
use hugeshm_lab::scan::{measure, planned_steps, Options, Report};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;
use std::process::ExitCode;

/// `bench scan` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Processes attached to the segment; several (comma-separated, e.g.
    /// 1000,2000,5000) make a sweep with the slope per 1,000 processes.
    #[arg(long, value_delimiter = ',', default_value = "1000",
          value_parser = parse_count_arg::<u32>)]
    pub procs: Vec<u32>,
    /// Segment size.
    #[arg(long, default_value = "64M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page size of the segment: 4k, or a huge page size the pool can serve.
    #[arg(long, default_value = "4k", value_parser = crate::values::page_size_bytes())]
    pub page_size: u64,
    /// Timed scans (after one warm-up scan).
    #[arg(long, default_value_t = 5, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The options of the command line.
    fn options(&self) -> Options {
        Options {
            procs: self.procs.clone(),
            size: self.size,
            page_size: self.page_size,
            runs: self.runs,
        }
    }
}

/// The hidden child (`bench attach-child SHMID`): holds the segment
/// attached until its stdin closes.
pub fn attach_child(shmid: i32) -> anyhow::Result<ExitCode> {
    hugeshm_lab::scan::attach_child(shmid, std::io::stdin())?;
    Ok(ExitCode::SUCCESS)
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options();
    let steps = crate::progress::steps("bench scan", planned_steps(&o));
    let _finish = steps.finish_on_drop();
    let res = measure(&crate::cmd::doctor_probe(roots), &o, &steps)?;
    if a.json {
        out.json_doc(&res)?;
    } else {
        print(&res, a.runs.max(1), out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The sweep as a table, the CPU times, the slopes; `runs`: timed scans
/// per count.
fn print(res: &Report, runs: u32, out: &mut Out) -> anyhow::Result<()> {
    out.line(format!(
        "segments scan with N processes attached to one {} segment on {} pages (maps read by {}), against the same scan reading the maps text, reading every process's maps text once and stepping over every process's mappings by ioctl once (median of {} runs each, in turn)",
        format_bytes(res.size_bytes),
        page_size_short(res.page_size_bytes),
        res.maps_read.as_str(),
        runs
    ))?;
    let mut t = Table::new(&[
        ">procs",
        ">scanned",
        ">attached found",
        ">scan ms",
        ">text scan ms",
        ">maps read ms",
        ">ioctl walk ms",
        ">maps KiB",
        ">scan / maps",
        ">scan / text scan",
    ]);
    for r in &res.sweep {
        t.row(vec![
            r.procs.to_string(),
            r.processes_scanned.to_string(),
            r.attached_found.to_string(),
            format!("{:.1}", r.median_ms),
            format!(
                "{:.1}{}",
                r.text_scan_median_ms,
                if r.text_scan_same { "" } else { " (differs!)" }
            ),
            format!("{:.1}", r.maps_median_ms),
            r.walk_median_ms
                .map(|w| format!("{w:.1}"))
                .unwrap_or_else(|| "-".to_string()),
            (r.maps_bytes / 1024).to_string(),
            format!("{:.2}x", r.vs_maps),
            format!("{:.2}x", r.vs_text_scan),
        ]);
    }
    t.render(out, "")?;
    out.line(format!(
        "{} processes started and attached in {:.1} s",
        res.procs, res.spawn_seconds
    ))?;
    out.line(
        "CPU time of all the bench's threads, median ms (what the steps cost whatever share of the CPUs other processes left):",
    )?;
    for r in &res.sweep {
        let c = &r.cpu_ms;
        out.line(format!(
            "  {} procs: scan {:.1}, text scan {:.1}, maps read {:.1}, ioctl walk {}; scan / maps {:.2}x",
            r.procs,
            c.scan,
            c.text_scan,
            c.maps_read,
            c.walk.map(|w| format!("{w:.1}")).unwrap_or_else(|| "-".to_string()),
            if c.maps_read > 0.0 { c.scan / c.maps_read } else { 0.0 },
        ))?;
    }
    if let (Some(s), Some(m)) = (res.slope_ms_per_1000, res.maps_slope_ms_per_1000) {
        out.line(format!(
            "slope: scan {s:.1} ms per 1,000 processes, maps read {m:.1} ms per 1,000"
        ))?;
    }
    out.flush()
}
