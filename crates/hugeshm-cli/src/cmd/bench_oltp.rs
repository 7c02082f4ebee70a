//! `hugeshm bench oltp`: the command line ([`Args`]), the call into
//! [`hugeshm_lab::oltp`], and [`print()`]: a [`Report`] as text (the options
//! in a line, the table, the rows not measured and why, what the columns
//! mean); and the hidden `bench oltp-worker` the bench re-executes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hugeshm_lab::oltp::{measure, planned_steps, Dist, Options, Report, SAMPLE_EVERY};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;
use hugeshm_region::Backend;

use crate::cmd::bench_common::parse_count_arg;
use crate::output::{Out, Table};

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
    #[arg(long, default_value = "uniform", value_parser = crate::values::dist())]
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

impl Args {
    /// The options of the command line.
    pub fn options(&self) -> Options {
        Options {
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
        }
    }
}

/// Runs the bench and prints it, with a progress line on stderr while it
/// runs (when stderr is a terminal).
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options();
    let steps = crate::progress::steps("bench oltp", planned_steps(&o));
    let report = measure(roots, &o, &steps);
    steps.finish();
    let report = report?;
    if a.json {
        out.json_doc(&report)?;
    } else {
        print(&report, out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The hidden `bench oltp-worker`: attaches the region by name, opens the
/// cache, serves runs on stdin/stdout.
pub fn worker(name: &str, backend: Backend, data: &Path) -> anyhow::Result<ExitCode> {
    hugeshm_lab::oltp::serve_attached(
        name,
        backend,
        data,
        std::io::stdin().lock(),
        crate::output::protocol_stdout(),
    )
    .map_err(lab_error)?;
    Ok(ExitCode::SUCCESS)
}

/// A bench's error as the CLI prints it: a region's error (as the bench
/// passed it up, [`hugeshm_lab::region_failed::RegionFailed`]) with its fix.
pub(crate) fn lab_error(e: anyhow::Error) -> anyhow::Error {
    use hugeshm_lab::region_failed::RegionFailed;
    if !e.chain().next().is_some_and(|c| c.is::<RegionFailed>()) {
        return e;
    }
    match e.downcast::<RegionFailed>() {
        Ok(f) => crate::cmd::region::region_error(f.0),
        Err(e) => e,
    }
}

fn fmt_ns(v: Option<u64>) -> String {
    match v {
        Some(ns) if ns >= 10_000 => format!("{:.0} us", ns as f64 / 1000.0),
        Some(ns) => format!("{ns} ns"),
        None => "-".into(),
    }
}

fn fmt_tps(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Prints a report: the options in a line, the table of measured rows, why
/// the others were not measured, what the columns mean.
pub(crate) fn print(report: &Report, out: &mut Out) -> anyhow::Result<()> {
    let o = &report.options;
    out.line(format!(
        "OLTP over a {} buffer cache ({} blocks of {}), {} data file, {} workers, {} access, {}% writes; \
         best of {} runs of {} s after a warm-up",
        format_bytes(o.cache_size_bytes),
        o.cache_size_bytes / o.block_size,
        format_bytes(o.block_size),
        format_bytes(o.data_size_bytes),
        o.workers,
        o.dist,
        o.write_pct,
        o.runs,
        o.duration_seconds
    ))?;
    let mut t = Table::new(&[
        "page",
        "backend",
        ">tps",
        ">median",
        ">x 4k",
        ">tx/CPU-s",
        ">x 4k",
        ">warm-up",
        ">p50",
        ">p99",
        ">hit",
        ">raw tps",
        ">overhead",
        ">paired",
        ">per CPU",
        ">PTE/worker",
        ">start-up s",
        ">dTLB/tx",
    ]);
    let ratio = |v: Option<f64>| v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into());
    for r in &report.rows {
        let Some(c) = &r.cache else {
            continue;
        };
        t.row(vec![
            page_size_short(r.page_size_bytes),
            r.backend.to_string(),
            fmt_tps(c.best_tps),
            fmt_tps(c.median_tps),
            ratio(r.vs_4k),
            fmt_tps(c.best_tx_per_cpu_second),
            ratio(r.vs_4k_cpu),
            fmt_tps(c.warmup.tps),
            fmt_ns(c.p50_ns),
            fmt_ns(c.p99_ns),
            c.hit_ratio
                .map(|h| format!("{:.1}%", h * 100.0))
                .unwrap_or_else(|| "-".into()),
            r.raw
                .as_ref()
                .map(|x| fmt_tps(x.best_tps))
                .unwrap_or_else(|| "-".into()),
            ratio(r.cache_overhead),
            ratio(r.cache_overhead_paired),
            ratio(r.cache_overhead_cpu),
            r.page_tables_bytes_per_worker
                .map(format_bytes)
                .unwrap_or_else(|| "-".into()),
            format!("{:.2}", r.startup_seconds),
            c.dtlb_misses_per_tx
                .map(|d| format!("{d:.2}"))
                .unwrap_or_else(|| "n/a".into()),
        ]);
    }
    t.render(out, "")?;
    for r in report.rows.iter().filter(|r| r.not_measured.is_some()) {
        out.line(format!(
            "{} {}: not measured: {}",
            page_size_short(r.page_size_bytes),
            r.backend,
            r.not_measured.as_deref().unwrap_or("")
        ))?;
        if let Some(f) = &r.fix {
            out.line(format!("  to fix: {f}"))?;
        }
    }
    if let Some(why) = report.rows.iter().find_map(|r| r.dtlb_unavailable.as_ref()) {
        out.line(format!("dTLB/tx n/a: {why}"))?;
    }
    out.line(format!(
        "tps = transactions (one 64-byte row of one block, read or updated) per second, all workers; \
         overhead = raw tps / cache tps, best runs (the same loop straight on the cache's blocks, \
         each raw run right after a cache run); paired = the median of the run pairs' own ratios; \
         x 4k = tps / the 4 KiB row's of the same backend; tx/CPU-s and per CPU: the same per CPU-second \
         of the workers (steady when other processes share the CPUs); p50/p99 sample one transaction in {SAMPLE_EVERY}; \
         the cache loop prefetches each block's bucket, descriptor and row a few transactions ahead"
    ))?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_lab::oltp::{sample, Row};

    fn report() -> Report {
        let mut huge = sample::row(2 << 20, Backend::Sysv, 1_500_000.0);
        (huge.vs_4k, huge.vs_4k_cpu) = (Some(1.5), Some(1.5));
        huge.dtlb_unavailable = Some("perf_event_paranoid is 3".to_owned());
        let mut raw_less = sample::row(4096, Backend::Sysv, 1_000_000.0);
        raw_less.raw = None;
        (
            raw_less.cache_overhead,
            raw_less.cache_overhead_paired,
            raw_less.cache_overhead_cpu,
        ) = (None, None, None);
        Report {
            options: sample::options(),
            cpus: 4,
            rows: vec![
                raw_less,
                huge,
                Row {
                    not_measured: Some("the pool has 0 free 1 GiB pages".to_owned()),
                    fix: Some("hugeshm pool set 1G 1".to_owned()),
                    cache: None,
                    raw: None,
                    ..sample::row(1 << 30, Backend::Sysv, 0.0)
                },
            ],
        }
    }

    #[test]
    fn print_writes_the_options_the_table_and_what_was_not_measured() {
        let (mut out, text) = Out::captured();
        print(&report(), &mut out).unwrap();
        let expected = "\
OLTP over a 64 MiB buffer cache (8192 blocks of 8 KiB), 256 MiB data file, 2 workers, uniform access, 10% writes; best of 3 runs of 2 s after a warm-up
page  backend     tps   median   x 4k  tx/CPU-s   x 4k  warm-up     p50    p99    hit  raw tps  overhead  paired  per CPU  PTE/worker  start-up s  dTLB/tx
4k    sysv     1.00 M  900.0 k      -   500.0 k      -  500.0 k  800 ns  12 us  25.0%        -         -       -        -       8 KiB        0.25     1.50
2M    sysv     1.50 M   1.35 M  1.50x   750.0 k  1.50x  750.0 k  800 ns  12 us  25.0%   3.00 M     2.00x   2.00x    2.00x       8 KiB        0.25     1.50
1G sysv: not measured: the pool has 0 free 1 GiB pages
  to fix: hugeshm pool set 1G 1
dTLB/tx n/a: perf_event_paranoid is 3
tps = transactions (one 64-byte row of one block, read or updated) per second, all workers; overhead = raw tps / cache tps, best runs (the same loop straight on the cache's blocks, each raw run right after a cache run); paired = the median of the run pairs' own ratios; x 4k = tps / the 4 KiB row's of the same backend; tx/CPU-s and per CPU: the same per CPU-second of the workers (steady when other processes share the CPUs); p50/p99 sample one transaction in 1024; the cache loop prefetches each block's bucket, descriptor and row a few transactions ahead
";
        assert_eq!(text.text(), expected);
    }

    #[test]
    fn page_sizes_must_be_explicit() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |sizes: &str| Cli::try_parse_from(["oltp", "--page-size", sizes]);
        let options = parse("4k,2m").unwrap().args.options();
        assert_eq!(options.page_sizes, [4096, 2 << 20]);
        let err = parse("4k,largest").err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
    }
}
