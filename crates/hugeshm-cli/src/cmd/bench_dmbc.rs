//! `hugeshm bench dmbc`: the command line ([`Args`]), the call into
//! [`hugeshm_lab::dmbc`] (the directly mapped buffer cache of the fifth
//! field report, against the classic one), and the report as a table.

use crate::output::{Out, Table};
use hugeshm_lab::dmbc::{measure, Options, STEPS};
use hugeshm_lab::oltp::Dist;
use hugeshm_parse::size::format_bytes;
use hugeshm_probe::Roots;
use std::path::PathBuf;
use std::process::ExitCode;

/// `bench dmbc` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Directory of the data file (a DAX mount such as /mnt/pmem for the
    /// real thing); the file goes in a private directory made there, all
    /// removed afterwards (refused if it or a directory above it is another
    /// user's, or writable by others and not sticky).
    #[arg(
        long = "data-dir",
        alias = "dir",
        value_name = "DIR",
        default_value = "/var/tmp"
    )]
    pub dir: PathBuf,
    /// Size of the data file.
    #[arg(long, default_value = "256M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub data_size: u64,
    /// Bytes of buffers (the DRAM buffer cache; the field report's was
    /// under 100 MB for a 900 MB tablespace).
    #[arg(long, default_value = "32M", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub cache_size: u64,
    /// Block size: a power of two from 512 bytes to 1 MiB.
    #[arg(long, default_value = "8k", value_parser = crate::values::block_size, allow_hyphen_values = true)]
    pub block_size: u64,
    /// Block accesses per transaction.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub blocks_per_tx: u32,
    /// Percentage of block accesses that update the block.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub write_pct: u32,
    /// Which blocks the transactions read.
    #[arg(long, default_value = "zipf", value_parser = crate::values::dist())]
    pub dist: Dist,
    /// Seconds of the timed run of each mode (after a warm-up run as long).
    #[arg(long, default_value_t = 3.0, value_parser = crate::values::duration)]
    pub duration: f64,
    /// Processes working on the one cache at once (forked: the field
    /// report's sessions); 1 runs in this process.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub workers: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// The options of the command line.
    pub fn options(&self) -> Options {
        Options {
            dir: self.dir.clone(),
            data_size_bytes: self.data_size,
            cache_size_bytes: self.cache_size,
            block_size: self.block_size,
            blocks_per_tx: self.blocks_per_tx,
            write_pct: self.write_pct,
            dist: self.dist,
            duration_seconds: self.duration,
            workers: self.workers,
        }
    }
}

fn num(v: f64) -> String {
    let s = format!("{v:.1}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, "0"));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 && c != '-' {
            out.push(',');
        }
        out.push(c);
    }
    format!("{out}.{frac}")
}

/// Runs the bench and prints it.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options();
    let steps = crate::progress::steps("bench dmbc", STEPS);
    let r = measure(roots, &o, &steps);
    steps.finish();
    let r = r.map_err(crate::cmd::bench_oltp::lab_error)?;
    if a.json {
        out.json_doc(&r)?;
        return Ok(ExitCode::SUCCESS);
    }
    out.line(format!(
        "Directly mapped buffer cache: {} data file in {}, {} of buffers ({} blocks of {}), \
         {} blocks per transaction, {}% updates, {} access, {} process{}; {} s per mode after a warm-up",
        format_bytes(o.data_size_bytes),
        o.dir.display(),
        format_bytes(o.cache_size_bytes),
        r.classic.buffers,
        format_bytes(o.block_size),
        o.blocks_per_tx,
        o.write_pct,
        o.dist,
        o.workers,
        if o.workers == 1 { "" } else { "es" },
        o.duration_seconds
    ))?;
    out.line(r.note.clone())?;
    let mut t = Table::new(&[
        "",
        ">direct/s",
        ">classic/s",
        ">direct/tx",
        ">classic/tx",
        ">field: direct/s",
        ">field: classic/s",
    ]);
    let (d, c, f) = (&r.direct, &r.classic, &r.field);
    t.row(vec![
        "logical reads (blocks)".into(),
        num(d.logical_per_second),
        num(c.logical_per_second),
        num(d.logical_per_tx),
        num(c.logical_per_tx),
        num(f.direct_logical),
        num(f.classic_logical),
    ]);
    t.row(vec![
        "physical reads (blocks)".into(),
        num(d.physical_per_second),
        num(c.physical_per_second),
        num(d.physical_per_tx),
        num(c.physical_per_tx),
        num(f.direct_physical),
        num(f.classic_physical),
    ]);
    t.row(vec![
        "transactions".into(),
        num(d.tps),
        num(c.tps),
        "-".into(),
        "-".into(),
        num(f.direct_tps),
        num(f.classic_tps),
    ]);
    t.render(out, "")?;
    let ratio = |v: Option<f64>| v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into());
    out.line(format!(
        "physical reads classic/direct: {} (field report {:.2}x); tps direct/classic: {} (field report {:.2}x)",
        ratio(r.physical_ratio),
        f.classic_physical / f.direct_physical,
        ratio(r.tps_ratio),
        f.direct_tps / f.classic_tps
    ))?;
    out.line(format!(
        "bytes copied into buffers: direct {} ({} by reads, {} blocks read in place), classic {} ({} by reads)",
        format_bytes(d.bytes_copied),
        format_bytes(d.bytes_copied_by_reads),
        d.in_place_reads,
        format_bytes(c.bytes_copied),
        format_bytes(c.bytes_copied_by_reads)
    ))?;
    out.line(
        "direct = blocks in no buffer read in place through a shared mapping of the data file; \
         updates copy the block into a buffer (a physical read) and write it back; \
         field = the AWR figures of the 2022 report on Oracle PMEM on an emulated NVDIMM (PMEM filestore vs XFS)",
    )?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
