//! `hugeshm bench oltp`: worker processes over the shared buffer cache
//! (hugeshm-cache), by page size and backend: transactions per second,
//! latency, hit ratio, page tables per worker, start-up time, dTLB misses
//! per transaction; and the same loop straight on the region ("raw"), so
//! the cache's own cost shows.
//!
//! [`measure()`] builds the [`Report`] (what `hugeshm lab` calls); [`run`]
//! prints it. Workers are this binary re-executed (`bench oltp-worker`,
//! attaching the region by name) or, for `anon` regions, forked children;
//! both answer one JSON line per run on a pipe. The loop they run, and
//! `bench dmbc` too, is [`workload`].
//!
//! - `mod.rs`: the command line ([`Args`]) and the [`Options`] a report keeps;
//! - `measure.rs`: [`measure()`], row by row, and the ratios between rows;
//! - `worker.rs`: the workers, their protocol, one run of all of them at once;
//! - `report.rs`: the [`Report`] and its rows;
//! - `print.rs`: the report as a table ([`run`] prints it so, or as JSON);
//! - `workload.rs`: the loop the workers run.

pub(crate) mod workload;

mod measure;
mod print;
mod report;
mod worker;

pub use measure::{measure, planned_steps};
pub use report::{ModeResult, Report, Row, RunSummary};
pub use worker::worker;

use crate::cmd::bench_common::parse_count_arg;
use crate::output::Out;
use hugeshm_probe::Roots;
use hugeshm_region::Backend;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use workload::Dist;

/// `bench oltp` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Bytes of cached blocks (the buffer pool; the region adds its
    /// descriptors and hash table).
    #[arg(long, default_value = "1G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub cache_size: u64,
    /// Size of the data file (blocks beyond the cache are read with pread).
    #[arg(long, default_value = "1G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub data_size: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Seconds of each timed run (and of the warm-up run).
    #[arg(long, default_value_t = 2.0, value_parser = crate::values::duration)]
    pub duration: f64,
    /// Timed runs per row after the warm-up (best and median reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Page sizes (comma-separated).
    #[arg(long = "page-size", alias = "page-sizes", value_name = "PAGE_SIZE", value_delimiter = ',',
          default_value = "4k,2m", value_parser = crate::values::page_size_bytes())]
    pub page_sizes: Vec<u64>,
    /// Backends (comma-separated; posix: files in /dev/shm, as Oracle's AMM;
    /// anon: forked workers).
    #[arg(long = "backend", alias = "backends", value_name = "BACKEND", value_delimiter = ',',
          default_value = "sysv,posix", value_parser = crate::values::backend())]
    pub backends: Vec<Backend>,
    /// Which blocks the transactions read.
    #[arg(long, default_value = "uniform", value_enum)]
    pub dist: Dist,
    /// Percentage of transactions that write their block.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub write_pct: u32,
    /// Block size: a power of two from 512 bytes to 1 MiB.
    #[arg(long, default_value = "8k", value_parser = crate::values::block_size, allow_hyphen_values = true)]
    pub block_size: u64,
    /// Directory of the data file (a sparse file in a private directory
    /// made there, all removed afterwards; refused if it or a directory
    /// above it is another user's, or writable by others and not sticky).
    #[arg(long, default_value = "/var/tmp")]
    pub data_dir: PathBuf,
    /// Skip the raw loop (no cache overhead ratio).
    #[arg(long)]
    pub no_raw: bool,
    /// Do not raise the huge page pools for the run (by default, as root, the
    /// bench adds the pages it needs and gives them back afterwards).
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What a run measured, as options (the part of [`Args`] a report needs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Options {
    /// Bytes of cached blocks.
    pub cache_size_bytes: u64,
    /// Bytes of the data file.
    pub data_size_bytes: u64,
    /// Worker processes.
    pub workers: u32,
    /// Seconds per run.
    pub duration_seconds: f64,
    /// Timed runs.
    pub runs: u32,
    /// Page sizes in bytes.
    pub page_sizes: Vec<u64>,
    /// Backends.
    pub backends: Vec<Backend>,
    /// Block choice.
    pub dist: Dist,
    /// Write percentage.
    pub write_pct: u32,
    /// Block size.
    pub block_size: u64,
    /// Directory of the data file.
    pub data_dir: PathBuf,
    /// Measure the raw loop too.
    pub raw: bool,
    /// Raise the pools.
    pub reserve: bool,
}

impl Args {
    /// The options of the command line.
    pub fn options(&self) -> anyhow::Result<Options> {
        Ok(Options {
            cache_size_bytes: self.cache_size,
            data_size_bytes: self.data_size,
            workers: self.workers,
            duration_seconds: self.duration,
            runs: self.runs,
            page_sizes: self.page_sizes.clone(),
            backends: self.backends.clone(),
            dist: self.dist,
            write_pct: self.write_pct,
            block_size: self.block_size,
            data_dir: self.data_dir.clone(),
            raw: !self.no_raw,
            reserve: !self.no_reserve,
        })
    }
}

/// Runs the bench and prints it, with a progress line on stderr while it
/// runs (when stderr is a terminal).
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options()?;
    let steps = crate::progress::steps("bench oltp", planned_steps(&o));
    let report = measure(roots, &o, &steps);
    steps.finish();
    let report = report?;
    if a.json {
        out.json_doc(&report)?;
    } else {
        print::print(&report, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_must_be_explicit() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |sizes: &str| Cli::try_parse_from(["oltp", "--page-size", sizes]);
        let options = parse("4k,2m").unwrap().args.options().unwrap();
        assert_eq!(options.page_sizes, [4096, 2 << 20]);
        let err = parse("4k,largest").err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
    }
}
