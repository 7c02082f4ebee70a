//! `hugeshm bench oltp`: worker processes over the shared buffer cache
//! (hugeshm-cache), by page size and backend: transactions per second,
//! latency, hit ratio, page tables per worker, start-up time, dTLB misses
//! per transaction; and the same loop straight on the region ("raw"), so
//! the cache's own cost shows.
//!
//! [`measure`] builds the [`Report`] (what `hugeshm lab` calls); [`run`]
//! prints it. Workers are this binary re-executed (`bench oltp-worker`,
//! attaching the region by name) or, for `anon` regions, forked children;
//! both answer one JSON line per run on a pipe. The loop they run, and
//! `bench dmbc` too, is [`workload`].

pub(crate) mod workload;

use crate::cmd::bench_common::{parse_count_arg, parse_size_arg, DataFile, PoolTopUp, Skipped};
use crate::output::{Out, Table};
use crate::progress::Steps;
use anyhow::{bail, Context};
use hugeshm_cache::{Cache, Layout, Stats};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, Locator, PageSize, Policy, RegionBuilder};
use hugeshm_sys::{PerfCounter, PerfEvent};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use workload::{Dist, Histogram, Picker, Rng, RunResult, Spec};

/// `bench oltp` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Bytes of cached blocks (the buffer pool; the region adds its
    /// descriptors and hash table).
    #[arg(long, default_value = "1G", value_parser = parse_size_arg)]
    pub cache_size: u64,
    /// Size of the data file (blocks beyond the cache are read with pread).
    #[arg(long, default_value = "1G", value_parser = parse_size_arg)]
    pub data_size: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Seconds of each timed run (and of the warm-up run).
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Timed runs per row after the warm-up (best and median reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Page sizes (comma-separated): 4k, 2m, 1g.
    #[arg(long, value_delimiter = ',', default_value = "4k,2m")]
    pub page_sizes: Vec<String>,
    /// Backends (comma-separated): sysv, posix (files in /dev/shm, as
    /// Oracle's AMM), anon (forked workers), memfd, hugetlbfs.
    #[arg(long, value_delimiter = ',', default_value = "sysv,posix")]
    pub backends: Vec<Backend>,
    /// Block choice: uniform or zipf.
    #[arg(long, default_value = "uniform")]
    pub dist: Dist,
    /// Percentage of transactions that write their block.
    #[arg(long, default_value_t = 10)]
    pub write_pct: u32,
    /// Block size.
    #[arg(long, default_value = "8k", value_parser = parse_size_arg)]
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
        let mut page_sizes = Vec::new();
        for p in &self.page_sizes {
            let ps: PageSize = p.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            match ps.bytes() {
                Some(b) if ps != PageSize::Largest => page_sizes.push(b),
                _ => bail!("--page-sizes takes explicit sizes (4k, 2m, 1g)"),
            }
        }
        Ok(Options {
            cache_size_bytes: self.cache_size,
            data_size_bytes: self.data_size,
            workers: self.workers,
            duration_seconds: self.duration,
            runs: self.runs,
            page_sizes,
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

/// One run of all workers together.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// Transactions (one block each) per second, all workers.
    pub tps: f64,
    /// Transactions.
    pub transactions: u64,
    /// Mean wall time of the workers' runs.
    pub seconds: f64,
    /// Transactions per CPU-second of the workers: the figure that holds
    /// when other processes share the CPUs (tps falls with them).
    pub tx_per_cpu_second: f64,
    /// Hits / (hits + misses); `None` for the raw loop.
    pub hit_ratio: Option<f64>,
    /// Median sampled latency, nanoseconds.
    pub p50_ns: Option<u64>,
    /// 99th percentile sampled latency, nanoseconds.
    pub p99_ns: Option<u64>,
    /// Cache counters, all workers.
    pub stats: Stats,
    /// dTLB load + store misses per transaction (user space), where the
    /// kernel can count them.
    pub dtlb_misses_per_tx: Option<f64>,
}

/// The cache runs or the raw runs of one row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeResult {
    /// The warm-up run (first touch, cache filling), reported apart.
    pub warmup: RunSummary,
    /// The timed runs.
    pub runs: Vec<RunSummary>,
    /// Highest tps of the timed runs.
    pub best_tps: f64,
    /// Median tps of the timed runs.
    pub median_tps: f64,
    /// Highest transactions per CPU-second of the timed runs.
    pub best_tx_per_cpu_second: f64,
    /// p50 over all timed runs, nanoseconds.
    pub p50_ns: Option<u64>,
    /// p99 over all timed runs, nanoseconds.
    pub p99_ns: Option<u64>,
    /// Hit ratio over all timed runs (`None` for raw).
    pub hit_ratio: Option<f64>,
    /// dTLB misses per transaction over the timed runs.
    pub dtlb_misses_per_tx: Option<f64>,
}

/// One page size and backend.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// Page size asked for.
    pub page_size_bytes: u64,
    /// Backend.
    pub backend: Backend,
    /// Why the row was not measured (pages not to be had, a backend that
    /// cannot use the page size); the other fields are then empty.
    pub not_measured: Option<String>,
    /// How to make it measurable.
    pub fix: Option<String>,
    /// Region size (header, control block, descriptors, hash table, blocks).
    pub region_bytes: u64,
    /// Page size the region got.
    pub region_page_size_bytes: u64,
    /// Buffers in the cache.
    pub buffers: u64,
    /// Create + pre-fault of the region, seconds.
    pub startup_seconds: f64,
    /// Reading the first blocks of the data file into the cache before the
    /// workers start (like pg_prewarm), seconds.
    pub prewarm_seconds: f64,
    /// Through the cache.
    pub cache: Option<ModeResult>,
    /// The same loop straight on the region.
    pub raw: Option<ModeResult>,
    /// raw best tps / cache best tps: what the cache costs.
    pub cache_overhead: Option<f64>,
    /// The median over the timed runs of raw tps / cache tps, each raw
    /// run right after its cache run on the same blocks.
    pub cache_overhead_paired: Option<f64>,
    /// The same per CPU-second.
    pub cache_overhead_cpu: Option<f64>,
    /// This row's cache best tps / the 4 KiB row's of the same backend.
    pub vs_4k: Option<f64>,
    /// The same per CPU-second.
    pub vs_4k_cpu: Option<f64>,
    /// Page tables of one worker (`VmPTE`, mean), bytes.
    pub page_tables_bytes_per_worker: Option<u64>,
    /// Why dTLB misses are not reported.
    pub dtlb_unavailable: Option<String>,
}

/// What `bench oltp` reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// The options.
    pub options: Options,
    /// CPUs this process may use.
    pub cpus: usize,
    /// Rows, page size by backend.
    pub rows: Vec<Row>,
}

/// A command to a worker.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
enum Cmd {
    Run {
        raw: bool,
        seconds: f64,
        seed: u64,
        spec: Spec,
    },
    Quit,
}

/// A worker's answer to a run.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    result: Option<RunResult>,
    dtlb_misses: Option<u64>,
    dtlb_unavailable: Option<String>,
    error: Option<String>,
}

/// dTLB load and store counters of a worker, or why there are none.
struct Dtlb(Result<[PerfCounter; 2], String>);

impl Dtlb {
    fn open() -> Dtlb {
        let open = |e| PerfCounter::open(e).map_err(|err| PerfEvent::unavailable_reason(&err));
        Dtlb(
            open(PerfEvent::DtlbLoadMisses)
                .and_then(|l| open(PerfEvent::DtlbStoreMisses).map(|s| [l, s])),
        )
    }

    fn read(&self) -> Option<u64> {
        let c = self.0.as_ref().ok()?;
        Some(c[0].read().ok()? + c[1].read().ok()?)
    }
}

/// Serves runs over `cache` until `quit` or the end of `input`.
fn serve(cache: &Cache, input: impl BufRead, mut output: impl Write) -> anyhow::Result<()> {
    // Map the whole region into this worker's page tables first (what a
    // server's pre_page_sga does per process): the page-table cost is paid
    // and counted in VmPTE, not spread over the timed runs as faults.
    cache
        .region()
        .populate_read()
        .map_err(crate::cmd::region::region_error)?;
    let dtlb = Dtlb::open();
    let blocks = cache.data_blocks();
    let mut picker: Option<(Dist, Picker)> = None;
    for line in input.lines() {
        let cmd: Cmd = serde_json::from_str(&line?)?;
        let Cmd::Run {
            raw,
            seconds,
            seed,
            spec,
        } = cmd
        else {
            break;
        };
        if picker.as_ref().is_none_or(|p| p.0 != spec.dist) {
            picker = Some((spec.dist, Picker::new(spec.dist, blocks)));
        }
        let p = &picker.as_ref().expect("set above").1;
        let mut rng = Rng::new(seed);
        let d = Duration::from_secs_f64(seconds);
        let before = dtlb.read();
        let r = if raw {
            workload::run_raw(
                cache.region(),
                cache.layout().blocks_at,
                cache.layout().block_size,
                cache.layout().buffers as u64,
                &spec,
                &mut rng,
                d,
            )
        } else {
            workload::run_cache(cache, &spec, p, &mut rng, d)
        };
        let after = dtlb.read();
        let answer = match r {
            Ok(r) => Answer {
                result: Some(r),
                dtlb_misses: before.zip(after).map(|(b, a)| a.saturating_sub(b)),
                dtlb_unavailable: dtlb.0.as_ref().err().cloned(),
                error: None,
            },
            Err(e) => Answer {
                result: None,
                dtlb_misses: None,
                dtlb_unavailable: None,
                error: Some(e.to_string()),
            },
        };
        writeln!(output, "{}", serde_json::to_string(&answer)?)?;
        output.flush()?;
    }
    Ok(())
}

/// The hidden `bench oltp-worker`: attaches the region by name, opens the
/// cache, serves runs on stdin/stdout.
pub fn worker(name: &str, backend: Backend, data: &Path) -> anyhow::Result<ExitCode> {
    let region = Locator::new(name, backend)
        .attach()
        .map_err(crate::cmd::region::region_error)?;
    let cache = Cache::open(region, data)?;
    serve(
        &cache,
        std::io::stdin().lock(),
        crate::output::protocol_stdout(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A worker process and its pipes.
struct Worker {
    pid: u32,
    child: Option<Child>,
    to: Box<dyn Write>,
    from: Box<dyn BufRead>,
}

/// The workers of one row; told to quit and reaped on drop.
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            let _ = writeln!(w.to, "{}", serde_json::json!({"cmd": "quit"}));
            let _ = w.to.flush();
        }
        for w in &mut self.0 {
            match w.child.as_mut() {
                Some(c) => {
                    crate::cmd::bench_common::reap([c], Duration::from_secs(30));
                }
                None => {
                    let _ = hugeshm_sys::wait_child(w.pid);
                }
            }
        }
    }
}

fn pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Starts `n` workers: re-executed and attached by name for named
/// backends, forked for anon.
fn start_workers(
    cache: &Cache,
    name: &str,
    backend: Backend,
    data: &Path,
    n: u32,
) -> anyhow::Result<Workers> {
    let mut ws = Workers(Vec::new());
    let exe = std::env::current_exe()?;
    for i in 0..n {
        if backend.is_named() {
            let mut child = Command::new(&exe)
                .args(["bench", "oltp-worker", name, backend.as_str()])
                .arg(data)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .with_context(|| format!("spawning worker {i}"))?;
            let to = child.stdin.take().context("worker stdin")?;
            let from = BufReader::new(child.stdout.take().context("worker stdout")?);
            ws.0.push(Worker {
                pid: child.id(),
                child: Some(child),
                to: Box::new(to),
                from: Box::new(from),
            });
        } else {
            let (cmd_r, cmd_w) = pipe()?;
            let (res_r, res_w) = pipe()?;
            let pid = {
                let (cmd_r, res_w) = (&cmd_r, &res_w);
                // fork needs one thread: the interrupt handler's waits.
                crate::interrupt::paused(|| {
                    hugeshm_sys::fork_child(move || {
                        crate::cmd::bench_common::die_with_parent();
                        let input = BufReader::new(File::from(cmd_r.try_clone().expect("dup")));
                        let output = File::from(res_w.try_clone().expect("dup"));
                        match serve(cache, input, output) {
                            Ok(()) => 0,
                            Err(_) => 1,
                        }
                    })
                })
                .map_err(|e| {
                    anyhow::anyhow!("{e} (anon regions are shared with forked workers only)")
                })?
            };
            drop((cmd_r, res_w));
            ws.0.push(Worker {
                pid,
                child: None,
                to: Box::new(File::from(cmd_w)),
                from: Box::new(BufReader::new(File::from(res_r))),
            });
        }
    }
    Ok(ws)
}

/// `VmPTE` of a process, bytes.
fn vm_pte(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmPTE:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Transactions per timed one (the clock's ordered read waits for the
/// loads in flight, so timing often would slow the loop it measures).
const SAMPLE_EVERY: u32 = 1024;

/// One run of every worker at once.
fn run_all(
    ws: &mut Workers,
    raw: bool,
    o: &Options,
    seed: u64,
) -> anyhow::Result<(RunSummary, Histogram, Option<String>)> {
    let spec = Spec {
        dist: o.dist,
        write_pct: o.write_pct.min(100),
        sample_every: SAMPLE_EVERY,
    };
    for (i, w) in ws.0.iter_mut().enumerate() {
        let c = Cmd::Run {
            raw,
            seconds: o.duration_seconds,
            seed: seed.wrapping_mul(1000).wrapping_add(i as u64 + 1),
            spec,
        };
        writeln!(w.to, "{}", serde_json::to_string(&c)?)?;
        w.to.flush()?;
    }
    let mut hist = Histogram::default();
    let mut stats = Stats::default();
    let (mut ops, mut secs, mut dtlb, mut dtlb_ok) = (0u64, 0f64, 0u64, true);
    let mut cpu = 0f64;
    let mut why = None;
    for (i, w) in ws.0.iter_mut().enumerate() {
        let mut line = String::new();
        w.from.read_line(&mut line)?;
        if line.is_empty() {
            bail!("worker {i} (pid {}) ended without an answer", w.pid);
        }
        let a: Answer =
            serde_json::from_str(&line).with_context(|| format!("worker {i} answered {line:?}"))?;
        if let Some(e) = a.error {
            bail!("worker {i}: {e}");
        }
        let r = a.result.context("an answer without a result")?;
        ops += r.ops;
        secs += r.seconds;
        cpu += r.cpu_seconds;
        hist.merge(&r.latency);
        stats.add(&r.stats);
        match a.dtlb_misses {
            Some(d) => dtlb += d,
            None => dtlb_ok = false,
        }
        if why.is_none() {
            why = a.dtlb_unavailable;
        }
    }
    let mean = secs / ws.0.len().max(1) as f64;
    let summary = RunSummary {
        tps: if mean > 0.0 { ops as f64 / mean } else { 0.0 },
        transactions: ops,
        seconds: mean,
        tx_per_cpu_second: if cpu > 0.0 { ops as f64 / cpu } else { 0.0 },
        hit_ratio: (!raw).then(|| stats.hit_ratio()),
        p50_ns: hist.quantile(0.5),
        p99_ns: hist.quantile(0.99),
        stats,
        dtlb_misses_per_tx: (dtlb_ok && ops > 0).then(|| dtlb as f64 / ops as f64),
    };
    Ok((summary, hist, why))
}

/// One mode's timed runs, summed up as they come.
struct ModeRuns {
    warmup: RunSummary,
    runs: Vec<RunSummary>,
    hist: Histogram,
    all: Stats,
    dtlb: f64,
    ops: u64,
    dtlb_ok: bool,
}

impl ModeRuns {
    fn new(warmup: RunSummary) -> ModeRuns {
        ModeRuns {
            warmup,
            runs: Vec::new(),
            hist: Histogram::default(),
            all: Stats::default(),
            dtlb: 0.0,
            ops: 0,
            dtlb_ok: true,
        }
    }

    fn add(&mut self, s: RunSummary, h: &Histogram) {
        self.hist.merge(h);
        self.all.add(&s.stats);
        match s.dtlb_misses_per_tx {
            Some(d) => self.dtlb += d * s.transactions as f64,
            None => self.dtlb_ok = false,
        }
        self.ops += s.transactions;
        self.runs.push(s);
    }

    fn result(self, raw: bool) -> ModeResult {
        let mut tps: Vec<f64> = self.runs.iter().map(|r| r.tps).collect();
        tps.sort_by(|a, b| a.total_cmp(b));
        let per_cpu = self
            .runs
            .iter()
            .map(|r| r.tx_per_cpu_second)
            .fold(0.0, f64::max);
        ModeResult {
            warmup: self.warmup,
            best_tps: tps.last().copied().unwrap_or(0.0),
            median_tps: tps.get(tps.len() / 2).copied().unwrap_or(0.0),
            best_tx_per_cpu_second: per_cpu,
            p50_ns: self.hist.quantile(0.5),
            p99_ns: self.hist.quantile(0.99),
            hit_ratio: (!raw).then(|| self.all.hit_ratio()),
            dtlb_misses_per_tx: (self.dtlb_ok && self.ops > 0).then(|| self.dtlb / self.ops as f64),
            runs: self.runs,
        }
    }
}

/// The cache's runs and (with `o.raw`) the raw loop's, interleaved: both
/// warm-ups, then each timed cache run followed by a timed raw run on the
/// same blocks, so that a change in the host's memory speed during the
/// row (this VM's can halve from one minute to the next) weighs on both
/// alike.
fn measure_modes(
    ws: &mut Workers,
    o: &Options,
    note: &mut dyn FnMut(&str),
    label: &str,
) -> anyhow::Result<(ModeResult, Option<ModeResult>, Option<String>)> {
    note(&format!("{label} cache warm-up"));
    let (warmup, _, why) = run_all(ws, false, o, 0)?;
    let mut cache = ModeRuns::new(warmup);
    let mut raw = None;
    if o.raw {
        note(&format!("{label} raw warm-up"));
        raw = Some(ModeRuns::new(run_all(ws, true, o, 0)?.0));
    }
    let n = o.runs.max(1);
    for r in 0..n {
        note(&format!("{label} cache run {}/{n}", r + 1));
        let (s, h, _) = run_all(ws, false, o, u64::from(r) + 1)?;
        cache.add(s, &h);
        if let Some(m) = raw.as_mut() {
            note(&format!("{label} raw run {}/{n}", r + 1));
            let (s, h, _) = run_all(ws, true, o, u64::from(r) + 1)?;
            m.add(s, &h);
        }
    }
    Ok((cache.result(false), raw.map(|m| m.result(true)), why))
}

/// The median of raw tps / cache tps over run pairs (each raw run right
/// after its cache run).
fn paired_overhead(cache: &ModeResult, raw: &ModeResult) -> Option<f64> {
    let mut r: Vec<f64> = cache
        .runs
        .iter()
        .zip(&raw.runs)
        .filter(|(c, _)| c.tps > 0.0)
        .map(|(c, w)| w.tps / c.tps)
        .collect();
    r.sort_by(|a, b| a.total_cmp(b));
    r.get(r.len() / 2).copied()
}

fn empty_row(ps: u64, backend: Backend, why: String, fix: Option<String>) -> Row {
    Row {
        page_size_bytes: ps,
        backend,
        not_measured: Some(why),
        fix,
        region_bytes: 0,
        region_page_size_bytes: 0,
        buffers: 0,
        startup_seconds: 0.0,
        prewarm_seconds: 0.0,
        cache: None,
        raw: None,
        cache_overhead: None,
        cache_overhead_paired: None,
        cache_overhead_cpu: None,
        vs_4k: None,
        vs_4k_cpu: None,
        page_tables_bytes_per_worker: None,
        dtlb_unavailable: None,
    }
}

/// One page size and backend: create (timed), prewarm, workers, cache
/// runs, raw runs, page tables.
fn measure_row(
    o: &Options,
    ps: u64,
    backend: Backend,
    data: &Path,
    note: &mut dyn FnMut(&str),
) -> anyhow::Result<Row> {
    let bs = o.block_size as usize;
    let layout = Layout::new(bs, (o.cache_size_bytes / o.block_size) as usize);
    let region_bytes = (layout.total as u64 + 4096).div_ceil(ps) * ps;
    let name = format!(
        "bench-oltp-{}-{}-{}",
        std::process::id(),
        page_size_short(ps),
        backend.as_str()
    );
    let label = format!("{} {}", page_size_short(ps), backend.as_str());
    note(&format!(
        "{label}: create + pre-fault {}",
        format_bytes(region_bytes)
    ));
    let page = if ps == 4096 {
        PageSize::Base
    } else {
        PageSize::Huge(ps)
    };
    let mut b = RegionBuilder::new(region_bytes)
        .backend(backend)
        .page_size(page)
        .policy(Policy::Only);
    let _on_interrupt = if backend.is_named() {
        b = b.name(name.clone());
        Some(crate::interrupt::undo(crate::interrupt::Taken::Region {
            name: name.clone(),
            backend,
        }))
    } else {
        None
    };
    let t0 = Instant::now();
    let (region, report) = b.create().map_err(crate::cmd::region::region_error)?;
    let startup_seconds = t0.elapsed().as_secs_f64();
    let cache = match Cache::create_sized(region, data, bs, Some(layout.buffers)) {
        Ok(c) => c,
        Err(e) => {
            // The region went with the error: remove it by name (an anon
            // region is gone already), or it stays behind.
            if backend.is_named() {
                hugeshm_region::remove(&name, backend)
                    .map_err(crate::cmd::region::region_error)
                    .with_context(|| format!("removing {name} after: {e}"))?;
            }
            bail!("{e}")
        }
    };
    let result = (|| -> anyhow::Result<Row> {
        // Prewarm: the first blocks of the file, as many as there are buffers.
        note(&format!("{label}: prewarm"));
        let t = Instant::now();
        let n = cache.data_blocks().min(cache.layout().buffers as u64);
        for blk in 0..n {
            drop(cache.read(blk)?);
        }
        let prewarm_seconds = t.elapsed().as_secs_f64();
        let mut ws = start_workers(&cache, &name, backend, data, o.workers)?;
        let (c, raw, why) = measure_modes(&mut ws, o, note, &label)?;
        let ptes: Vec<u64> = ws.0.iter().filter_map(|w| vm_pte(w.pid)).collect();
        drop(ws);
        Ok(Row {
            page_size_bytes: ps,
            backend,
            not_measured: None,
            fix: None,
            region_bytes: report.size_bytes,
            region_page_size_bytes: report.page_size_bytes,
            buffers: cache.layout().buffers as u64,
            startup_seconds,
            prewarm_seconds,
            cache_overhead: raw
                .as_ref()
                .filter(|_| c.best_tps > 0.0)
                .map(|r| r.best_tps / c.best_tps),
            cache_overhead_paired: raw.as_ref().and_then(|r| paired_overhead(&c, r)),
            cache_overhead_cpu: raw
                .as_ref()
                .filter(|_| c.best_tx_per_cpu_second > 0.0)
                .map(|r| r.best_tx_per_cpu_second / c.best_tx_per_cpu_second),
            cache: Some(c),
            raw,
            vs_4k: None,
            vs_4k_cpu: None,
            page_tables_bytes_per_worker: (!ptes.is_empty())
                .then(|| ptes.iter().sum::<u64>() / ptes.len() as u64),
            dtlb_unavailable: why,
        })
    })();
    let destroyed = cache.into_region().destroy();
    let row = result?;
    destroyed.map_err(crate::cmd::region::region_error)?;
    Ok(row)
}

/// The steps of one row ([`measure_row`]): create, prewarm, the
/// warm-ups and the timed runs of the cache (and of the raw loop).
fn row_steps(o: &Options) -> u64 {
    let modes = if o.raw { 2 } else { 1 };
    2 + modes * (1 + u64::from(o.runs.max(1)))
}

/// How many steps [`measure`] takes: a row per page size and backend.
pub fn planned_steps(o: &Options) -> u64 {
    (o.page_sizes.len() * o.backends.len()) as u64 * row_steps(o)
}

/// Runs the bench and returns its report (pools raised and given back,
/// regions and the data file removed, whatever happens); each run is a
/// step of `steps` ([`planned_steps`] of them).
pub fn measure(roots: &Roots, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let note = &mut |s: &str| steps.begin(s);
    anyhow::ensure!(o.workers > 0, "--workers must be at least 1");
    crate::cmd::bench_common::check_duration(o.duration_seconds)?;
    anyhow::ensure!(
        o.block_size.is_power_of_two() && (512..=1 << 20).contains(&o.block_size),
        "--block-size {} must be a power of two from 512 bytes to 1 MiB",
        o.block_size
    );
    anyhow::ensure!(
        o.cache_size_bytes >= o.block_size && o.data_size_bytes >= o.block_size,
        "--cache-size and --data-size must hold at least one {}-byte block",
        o.block_size
    );
    let probe = Probe::new(roots.clone());
    crate::cmd::bench_common::check_process_room(&probe, o.workers.into(), "--workers")?;
    let host = probe.host();
    std::fs::create_dir_all(&o.data_dir)
        .with_context(|| format!("creating {}", o.data_dir.display()))?;
    let data = DataFile::new(&o.data_dir, "hugeshm-oltp-")?;
    {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&data.path)
            .with_context(|| format!("creating {}", data.path.display()))?;
        let blocks = o.data_size_bytes / o.block_size;
        f.set_len(blocks * o.block_size)
            .with_context(|| format!("sizing {}", data.path.display()))?;
    }
    let layout = Layout::new(
        o.block_size as usize,
        (o.cache_size_bytes / o.block_size) as usize,
    );
    let mut rows = Vec::new();
    for &ps in &o.page_sizes {
        let region_bytes = (layout.total as u64 + 4096).div_ceil(ps) * ps;
        let pages = region_bytes / ps;
        let mut reservation = PoolTopUp::new(&probe);
        let unavailable = if ps > 4096 && host.pool(ps).is_none() {
            Some(Skipped::no_such_pages(&host, ps, pages))
        } else if ps > 4096 && o.reserve {
            reservation
                .ensure(&host, ps, pages)
                .err()
                .map(|e| Skipped::failed(ps, pages, &e))
        } else {
            None
        };
        for &backend in &o.backends {
            let _part = steps.part(row_steps(o));
            if let Some(sk) = &unavailable {
                rows.push(empty_row(ps, backend, sk.reason.clone(), sk.fix.clone()));
                continue;
            }
            match measure_row(o, ps, backend, &data.path, note) {
                Ok(r) => rows.push(r),
                Err(e) => rows.push(empty_row(ps, backend, crate::output::error_text(&e), None)),
            }
        }
        drop(reservation);
    }
    // Ratios, all from this run.
    let base: Vec<(Backend, f64, f64)> = rows
        .iter()
        .filter(|r| r.page_size_bytes == 4096)
        .filter_map(|r| {
            r.cache
                .as_ref()
                .map(|c| (r.backend, c.best_tps, c.best_tx_per_cpu_second))
        })
        .collect();
    for r in rows.iter_mut().filter(|r| r.page_size_bytes != 4096) {
        let Some(&(_, tps, cpu)) = base.iter().find(|x| x.0 == r.backend) else {
            continue;
        };
        if let Some(c) = &r.cache {
            r.vs_4k = (tps > 0.0).then(|| c.best_tps / tps);
            r.vs_4k_cpu = (cpu > 0.0).then(|| c.best_tx_per_cpu_second / cpu);
        }
    }
    Ok(Report {
        options: o.clone(),
        cpus: hugeshm_sys::affinity().map(|c| c.len()).unwrap_or(0),
        rows,
    })
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

/// Runs the bench and prints it.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options()?;
    let steps = Steps::new("bench oltp", planned_steps(&o));
    let report = measure(roots, &o, &steps);
    steps.finish();
    let report = report?;
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
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
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
