//! `hugeshm lab`: the field reports' measurements reproduced on this host,
//! scaled to its memory and CPUs, each figure beside the report's with the
//! ratio.
//!
//! The reproductions and the run are `hugeshm_lab::lab`'s; here are the
//! options and the printers (table, `--json`, `--out`: JSON, SVG plots
//! and one HTML report), the same for all of them.

use hugeshm_lab::lab::{all, html, model, reports, Options};

use crate::output::{Out, Table};
use hugeshm_probe::{Probe, Roots};
use model::{figure_text, ratio_text, Ceiling, Lab, LabReport};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `hugeshm lab` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run only this reproduction (repeatable, or comma-separated).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Only>,
    /// A first look: small regions, few sessions and one timed run per
    /// point, seconds instead of minutes (the whole lab took 138 s on a
    /// 2-CPU, 24 GiB VM; --quick 7 s). The shapes show (which page size
    /// wins, how page tables grow with sessions); the figures are noisy, not
    /// ones to compare hosts on.
    #[arg(long)]
    pub quick: bool,
    /// Write lab.json, one SVG per plot and report.html into this directory
    /// (created 0755 if missing; refused if it, or a directory or symlink
    /// on its path, belongs to another user, or others can write it).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Do not raise the huge page pools (by default, as root, the lab adds
    /// the pages each reproduction needs and gives them back after it).
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A reproduction by name (`--only`): one for each of [`all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// Create and pre-fault time against region size: one thread against all CPUs, 4 KiB against 2 MiB pages
    Startup,
    /// Page-table memory per session and in total as sessions attach one region, 4 KiB against 2 MiB pages
    Pagetables,
    /// Silent fall-back to 4 KiB pages: one huge page short under --policy try and only
    Fallback,
    /// Local, remote and interleaved memory bandwidth per page size (needs two NUMA nodes)
    Numa,
    /// OLTP sessions over the shared buffer cache: /dev/shm files on 4 KiB pages against SysV on 2 MiB
    Oltp,
    /// The directly mapped buffer cache: blocks read in place from a mapped (DAX) file against copied
    Dmbc,
}

impl Only {
    /// Whether this names `lab`.
    fn names(self, lab: &dyn Lab) -> bool {
        use clap::ValueEnum;
        Only::from_str(lab.name(), false) == Ok(self)
    }
}

/// Runs the lab.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let out_dir = a
        .out
        .as_deref()
        .map(|dir| crate::cmd::out_dir(dir, "--out"))
        .transpose()?;
    let labs = all();
    let chosen: Vec<&dyn Lab> = labs
        .iter()
        .map(|l| l.as_ref())
        .filter(|l| a.only.is_empty() || a.only.iter().any(|o| o.names(*l)))
        .collect();
    let steps = crate::progress::steps("lab", 0);
    let _finish = steps.finish_on_drop();
    let options = Options {
        quick: a.quick,
        reserve: !a.no_reserve,
    };
    let report = hugeshm_lab::lab::run(&Probe::new(roots.clone()), &chosen, &options, &steps)?;
    steps.finish();
    if let Some(dir) = &out_dir {
        let json = serde_json::to_string_pretty(&crate::output::Envelope::new(&report))?;
        html::write_out(dir, &report, &json)?;
    }
    if a.json {
        out.json_doc(&report)?;
    } else {
        print(&report, a.out.as_deref(), out)?;
    }
    Ok(if report.reproductions.iter().any(|r| r.error.is_some()) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn print(report: &LabReport, dir: Option<&Path>, out: &mut Out) -> anyhow::Result<()> {
    out.line(format!("hugeshm lab: {}", report.host))?;
    if let [Some(a), Some(b)] = report.load_average {
        out.line(format!(
            "load average {a:.2} at the start, {b:.2} at the end (other work on the host moves \
             every timing; the lab's own processes count in the end figure)"
        ))?;
    }
    let ceiling: Vec<String> = report.ceiling.iter().map(Ceiling::describe).collect();
    out.line(format!(
        "memset over faulted memory (the ceiling, this run): {}",
        ceiling.join(", ")
    ))?;
    let mut summary = Table::new(&["report", "what", ">field", ">ours", ">ours/field"]);
    for r in &report.reproductions {
        for c in &r.comparisons {
            summary.row(vec![
                reports::short(&r.seed),
                c.what.clone(),
                figure_text(Some(c.field), &c.unit),
                figure_text(c.ours, &c.unit),
                ratio_text(c.ratio),
            ]);
        }
    }
    for r in &report.reproductions {
        out.line("")?;
        out.line(out.bold(&format!("{}: {} ({:.1} s)", r.name, r.title, r.seconds)))?;
        out.line(format!("  field: {}", out.dim(&reports::describe(&r.seed))))?;
        if !r.table.rows.is_empty() {
            let cols: Vec<&str> = r.table.columns.iter().map(String::as_str).collect();
            let mut t = Table::new(&cols);
            for row in &r.table.rows {
                t.row(row.clone());
            }
            t.render(out, "  ")?;
        }
        for c in &r.comparisons {
            out.line(format!(
                "  {}: field {} ({}), ours {} ({}): {}",
                c.what,
                figure_text(Some(c.field), &c.unit),
                c.field_setting,
                figure_text(c.ours, &c.unit),
                c.our_setting,
                ratio_text(c.ratio)
            ))?;
            if let Some(n) = &c.note {
                out.line(format!("    {}", out.dim(n)))?;
            }
        }
        for n in &r.notes {
            out.line(format!("  {n}"))?;
        }
        if let Some(e) = &r.error {
            out.line(format!("  {}: {e}", out.good("stopped", false)))?;
        }
    }
    out.line("")?;
    out.line(out.bold(
        "the field reports beside this host (field: the report's figure; ours: this host's)",
    ))?;
    summary.render(out, "  ")?;
    out.line(format!("lab took {:.0} s", report.seconds))?;
    if let Some(d) = dir {
        out.line(format!(
            "wrote {}/report.html, lab.json and the plots",
            d.display()
        ))?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn every_reproduction_has_one_name_for_only_and_every_name_one_reproduction() {
        let labs = all();
        for l in &labs {
            let n = Only::value_variants()
                .iter()
                .filter(|o| o.names(l.as_ref()))
                .count();
            assert_eq!(n, 1, "{}", l.name());
        }
        for o in Only::value_variants() {
            assert_eq!(
                labs.iter().filter(|l| o.names(l.as_ref())).count(),
                1,
                "{o:?}"
            );
        }
    }
}
