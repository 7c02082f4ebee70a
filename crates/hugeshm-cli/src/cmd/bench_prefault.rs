//! `hugeshm bench prefault`: how fast a region is ready, per page size and
//! thread count, against the machine's write bandwidth.
//!
//! [`measure`] builds the [`Report`] (what `hugeshm lab` calls); [`print`]
//! writes it as tables, `--json` as it is. Measuring goes by phase: the
//! page sizes to measure ([`page_sizes`]), per region size the memset
//! baselines then each page size ([`measure_size`], the peers'
//! methods in [`measure_peers`]), then the ratios ([`add_ratios`]) and,
//! for a sweep, the growth lines ([`growth`]).

use crate::cmd::bench_common::{parse_count_arg, PoolTopUp, Skipped};
use crate::cmd::bench_prefault_sample::{
    bench_peer, bench_prefault, memset_baseline, PeerMethod, PeerSample, PrefaultSample,
};
use crate::output::{Out, Table};
use hugeshm_lab::Steps;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{HostSnapshot, Probe, Roots};
use hugeshm_region::{Backend, PageSize};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// `bench prefault` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size; several (comma-separated, e.g. 1G,2G,4G) make a sweep
    /// with GB/s per size and the slope (seconds per GB) per page size and
    /// thread count.
    #[arg(long, value_delimiter = ',', default_value = "4G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: Vec<u64>,
    /// Page sizes to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "4k,2m", value_parser = crate::values::page_size())]
    pub page_size: Vec<PageSize>,
    /// Thread counts to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Timed runs per combination after the warm-up (the best is reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<usize>)]
    pub runs: usize,
    /// Backend for huge pages (4 KiB pages always use posix: files in /dev/shm,
    /// the "memory-mapped files" style).
    #[arg(long = "backend", alias = "huge-backend", value_name = "BACKEND", default_value = "anon",
          value_parser = crate::values::backend())]
    pub huge_backend: Backend,
    /// Do not raise the huge page pools for the run (by default, as root, the
    /// bench adds the pages it needs and gives them back afterwards).
    #[arg(long)]
    pub no_reserve: bool,
    /// Leave out the peers' methods (one MAP_POPULATE mmap, first touch by
    /// one thread, a touch loop on N threads).
    #[arg(long)]
    pub no_peers: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What one run measures (the part of [`Args`] a report needs; the lab
/// passes its own).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Region sizes (any order; each measured once).
    pub(crate) sizes: Vec<u64>,
    /// Page sizes to compare.
    pub(crate) page_sizes: Vec<PageSize>,
    /// Thread counts to compare (any order; 0 ignored).
    pub(crate) threads: Vec<usize>,
    /// Timed runs per combination after the warm-up.
    pub(crate) runs: usize,
    /// Backend for huge pages (4 KiB pages use posix).
    pub(crate) huge_backend: Backend,
    /// Raise the huge page pools for the run (root).
    pub(crate) reserve: bool,
    /// Measure the peers' methods.
    pub(crate) peers: bool,
    /// Measure the memset baselines (the lab has its own, once a run).
    pub(crate) memset: bool,
}

impl Args {
    /// The options of the command line.
    pub(crate) fn options(&self) -> anyhow::Result<Options> {
        Ok(Options {
            sizes: self.size.clone(),
            page_sizes: self.page_size.clone(),
            threads: self.threads.clone(),
            runs: self.runs,
            huge_backend: self.huge_backend,
            reserve: !self.no_reserve,
            peers: !self.no_peers,
            memset: true,
        })
    }
}

/// One page size, thread count and region size: the best of the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Row {
    pub(crate) size_bytes: u64,
    pub(crate) page_size_bytes: u64,
    pub(crate) backend: Backend,
    pub(crate) threads: usize,
    /// The warm-up's ready seconds (on the row of the largest thread
    /// count, which the warm-up ran with).
    pub(crate) cold_seconds: Option<f64>,
    pub(crate) seconds: f64,
    pub(crate) gbps: f64,
    pub(crate) ready_seconds: f64,
    pub(crate) ready_gbps: f64,
    pub(crate) method: String,
    pub(crate) vs_4k: Option<f64>,
    pub(crate) vs_one_thread: Option<f64>,
    pub(crate) vs_memset: Option<f64>,
    /// Pre-fault rate over zeroing already-faulted memory 4 KiB at a time
    /// (the kernel's way of clearing a huge page) at this thread count.
    pub(crate) vs_clear_4k: Option<f64>,
    /// Ready rate over each peer method's rate at this page size and
    /// thread count (map-populate and first-touch run on one thread).
    pub(crate) vs_peers: BTreeMap<&'static str, f64>,
    /// Ready rate over the fastest peer's.
    pub(crate) vs_best_peer: Option<f64>,
    /// Every timed run, in order (the lab's median); not in `--json`.
    #[serde(skip)]
    pub(crate) samples: Vec<PrefaultSample>,
}

/// A peer's method, best of the runs, on the same size and page size.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PeerRow {
    pub(crate) size_bytes: u64,
    pub(crate) page_size_bytes: u64,
    pub(crate) method: PeerMethod,
    pub(crate) used_by: &'static str,
    pub(crate) threads: usize,
    pub(crate) seconds: f64,
    pub(crate) gbps: f64,
}

/// The machine's write bandwidth at one size and thread count.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Baseline {
    pub(crate) size_bytes: u64,
    pub(crate) threads: usize,
    pub(crate) gbps: f64,
    /// Zeroing the same memory 4 KiB at a time.
    pub(crate) clear_4k_gbps: f64,
}

/// What `bench prefault` measured (`--json` prints exactly this).
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    /// The largest size measured (every row has its own `size_bytes`).
    pub(crate) size_bytes: u64,
    /// Every size measured, ascending.
    pub(crate) sizes: Vec<u64>,
    pub(crate) runs: usize,
    pub(crate) memset: Vec<Baseline>,
    pub(crate) results: Vec<Row>,
    /// The peers' methods, per page size (and thread count for the touch loop).
    pub(crate) peers: Vec<PeerRow>,
    /// Page sizes that could not be had (the others still ran).
    pub(crate) skipped: Vec<Skipped>,
    /// With several sizes: ready seconds against size, per page size and
    /// thread count.
    pub(crate) growth: Vec<Growth>,
}

/// How ready time grows with size for one page size and thread count: a
/// least-squares line through (GB, ready seconds).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Growth {
    pub(crate) page_size_bytes: u64,
    pub(crate) threads: usize,
    /// Ready GB/s at each size, ascending size.
    pub(crate) gbps: Vec<f64>,
    /// Seconds per decimal GB (the slope).
    pub(crate) seconds_per_gb: f64,
    /// `1 / seconds_per_gb`: the rate the cost grows at.
    pub(crate) marginal_gbps: f64,
    /// Seconds at size 0 (the line's intercept): fixed cost.
    pub(crate) fixed_seconds: f64,
}

/// A ratio with two decimals (`1.04x`), or `-`.
fn ratio2(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
}

/// The rows of one page size: a cold warm-up, then the best of `o.runs`
/// per thread count.
fn measure_size(
    o: &Options,
    size: u64,
    ps: u64,
    threads: &[usize],
    steps: &Steps,
) -> anyhow::Result<(Vec<Row>, Vec<PeerRow>)> {
    let mut rows = Vec::new();
    let (backend, page) = if ps == 4096 {
        (Backend::Posix, PageSize::Base)
    } else {
        (o.huge_backend, PageSize::Huge(ps))
    };
    // Warm-up: the first touch of guest memory in a VM is slow; reported as cold.
    steps.begin(&format!("{} warm-up", page_size_short(ps)));
    let cold = bench_prefault(size, backend, page, *threads.last().unwrap_or(&1))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for &t in threads {
        let mut samples: Vec<PrefaultSample> = Vec::new();
        for r in 0..o.runs.max(1) {
            steps.begin(&format!(
                "{} pages, {}, run {}",
                page_size_short(ps),
                threads_text(t),
                r + 1
            ));
            samples
                .push(bench_prefault(size, backend, page, t).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
        // The fastest (the first of equals).
        let best = samples.iter().reduce(|b, s| {
            if s.ready_seconds < b.ready_seconds {
                s
            } else {
                b
            }
        });
        let s = best.expect("at least one run").clone();
        rows.push(Row {
            size_bytes: size,
            page_size_bytes: ps,
            backend,
            threads: t,
            cold_seconds: (t == *threads.last().unwrap_or(&1)).then_some(cold.ready_seconds),
            seconds: s.prefault_seconds,
            gbps: s.prefault_gbps,
            ready_seconds: s.ready_seconds,
            ready_gbps: s.ready_gbps,
            method: s.method.as_str().to_string(),
            vs_4k: None,
            vs_one_thread: None,
            vs_memset: None,
            vs_clear_4k: None,
            vs_peers: BTreeMap::new(),
            vs_best_peer: None,
            samples,
        });
    }
    let peers = if o.peers {
        measure_peers(o, size, ps, threads, steps)?
    } else {
        Vec::new()
    };
    Ok((rows, peers))
}

/// The peers' methods at one page size: map-populate and first-touch once
/// (one thread each), the touch loop per thread count; best of `o.runs`.
fn measure_peers(
    o: &Options,
    size: u64,
    ps: u64,
    threads: &[usize],
    steps: &Steps,
) -> anyhow::Result<Vec<PeerRow>> {
    let mut out = Vec::new();
    for m in PeerMethod::ALL {
        for t in peer_threads(m, threads) {
            let mut best: Option<PeerSample> = None;
            for r in 0..o.runs.max(1) {
                steps.begin(&format!(
                    "{} pages, {} on {}, run {}",
                    page_size_short(ps),
                    m.as_str(),
                    threads_text(t),
                    r + 1
                ));
                let s = bench_peer(size, ps, m, t).map_err(|e| anyhow::anyhow!("{e}"))?;
                if best.as_ref().is_none_or(|b| s.seconds < b.seconds) {
                    best = Some(s);
                }
            }
            let s = best.expect("at least one run");
            out.push(PeerRow {
                size_bytes: size,
                page_size_bytes: ps,
                method: m,
                used_by: m.used_by(),
                threads: s.threads,
                seconds: s.seconds,
                gbps: s.gbps,
            });
        }
    }
    Ok(out)
}

/// The page sizes to measure, in bytes, in the order asked; those the
/// kernel has no pool of are skipped (pages for `largest`).
fn page_sizes(
    host: &HostSnapshot,
    asked: &[PageSize],
    largest: u64,
) -> anyhow::Result<(Vec<u64>, Vec<Skipped>)> {
    let mut sizes = Vec::new();
    let mut skipped = Vec::new();
    for ps in asked {
        let bytes = match ps {
            PageSize::Largest => anyhow::bail!("--page-size takes explicit sizes (4k, 2m, 1g)"),
            other => other.bytes().unwrap_or(4096),
        };
        if bytes > 4096 && host.pool(bytes).is_none() {
            skipped.push(Skipped::no_such_pages(host, bytes, largest.div_ceil(bytes)));
            continue;
        }
        sizes.push(bytes);
    }
    Ok((sizes, skipped))
}

/// The thread counts a peer method runs with: one, or each of `threads`.
fn peer_threads(m: PeerMethod, threads: &[usize]) -> Vec<usize> {
    if m.threads(2) == 1 {
        vec![1]
    } else {
        threads.to_vec()
    }
}

/// The thread counts of `o`: above 0, ascending, each once.
fn thread_counts(o: &Options) -> Vec<usize> {
    let mut threads = o.threads.clone();
    threads.retain(|t| *t > 0);
    threads.sort_unstable();
    threads.dedup();
    threads
}

/// The region sizes of `o`: ascending, each once.
fn region_sizes(o: &Options) -> Vec<u64> {
    let mut sizes = o.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The steps of one region size at one page size ([`measure_size`]): the
/// warm-up, each thread count's runs, the peers' runs.
fn page_size_steps(o: &Options, threads: &[usize]) -> u64 {
    let runs = o.runs.max(1) as u64;
    let peers: u64 = if o.peers {
        PeerMethod::ALL
            .iter()
            .map(|&m| peer_threads(m, threads).len() as u64 * runs)
            .sum()
    } else {
        0
    };
    1 + threads.len() as u64 * runs + peers
}

/// How many steps [`measure`] takes on this host: per region size, the
/// memset baselines and each page size the kernel has a pool of.
pub(crate) fn planned_steps(host: &HostSnapshot, o: &Options) -> u64 {
    let sizes = region_sizes(o);
    let Some(&largest) = sizes.last() else {
        return 0;
    };
    let pages = page_sizes(host, &o.page_sizes, largest)
        .map(|(p, _)| p.len() as u64)
        .unwrap_or(0);
    let threads = thread_counts(o);
    let memset = if o.memset { threads.len() as u64 } else { 0 };
    sizes.len() as u64 * (memset + pages * page_size_steps(o, &threads))
}

/// Measures every size, page size and thread count (pools raised for each
/// page size while it is measured and given back, regions removed,
/// whatever happens) and returns the report; each run is a step of
/// `steps` ([`planned_steps`] of them).
pub(crate) fn measure(probe: &Probe, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let host = probe.host();
    let region_sizes = region_sizes(o);
    let largest = *region_sizes
        .last()
        .ok_or_else(|| anyhow::anyhow!("--size needs at least one size"))?;
    let (sizes, mut skipped) = page_sizes(&host, &o.page_sizes, largest)?;
    let threads = thread_counts(o);
    anyhow::ensure!(
        !threads.is_empty(),
        crate::output::Usage("--threads needs at least one count above 0".into())
    );

    // Memory: the memset baseline maps `size` bytes of ordinary memory, and
    // a 4 KiB region takes as much again after it; a size the host cannot
    // hold is refused here, not found by the OOM killer.
    let available = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes);
    if let Some(avail) = available {
        let most = avail / 10 * 9;
        anyhow::ensure!(
            largest <= most,
            crate::output::Usage(format!(
                "--size {} is more than the bench can measure here: the memset baseline maps \
                 that much ordinary memory (as does a 4 KiB region), and MemAvailable is {} \
                 (huge pages already in the pools are not part of it); pass a --size of at \
                 most {}",
                format_bytes(largest),
                format_bytes(avail),
                format_bytes(most)
            ))
        );
    }

    let mut memset = Vec::new();
    let mut failed = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut peers: Vec<PeerRow> = Vec::new();
    for &size in &region_sizes {
        if o.memset {
            for &t in &threads {
                steps.begin(&format!(
                    "{} memset baseline, {}",
                    format_bytes(size),
                    threads_text(t)
                ));
                let b = memset_baseline(size, t).map_err(|e| anyhow::anyhow!("{e}"))?;
                memset.push(Baseline {
                    size_bytes: size,
                    threads: t,
                    gbps: b.gbps,
                    clear_4k_gbps: b.clear_4k_gbps,
                });
            }
        }
        for &ps in &sizes {
            // A page size that failed at a smaller region size is not
            // tried again; its steps are passed over.
            let _part = steps.part(page_size_steps(o, &threads));
            if failed.contains(&ps) {
                continue;
            }
            // The pool (root only) holds this page size's pages for this
            // size only while it is measured, and is given back before the
            // next: held all at once beside the memset baseline, 14 GiB of
            // 2 MiB pages and a 14 GiB baseline woke the OOM killer on
            // this 24 GiB VM. One page size failing (its pages cannot be
            // had, or were taken meanwhile) does not end the bench: it
            // says why, and the others run.
            let pages = size.div_ceil(ps);
            let mut reservation = PoolTopUp::new(probe);
            let result = (|| {
                if ps > 4096 && o.reserve {
                    reservation.ensure(&host, ps, pages)?;
                }
                measure_size(o, size, ps, &threads, steps)
            })();
            drop(reservation);
            match result {
                Ok((mut r, mut p)) => {
                    rows.append(&mut r);
                    peers.append(&mut p);
                }
                Err(e) => {
                    failed.push(ps);
                    let e = e.context(format!("{} region", format_bytes(size)));
                    skipped.push(Skipped::failed(ps, pages, &e));
                }
            }
        }
    }
    add_ratios(&mut rows, &memset, &peers, threads[0]);
    let growth = if region_sizes.len() > 1 {
        growth(&rows)
    } else {
        Vec::new()
    };
    Ok(Report {
        size_bytes: largest,
        sizes: region_sizes,
        runs: o.runs,
        memset,
        results: rows,
        peers,
        skipped,
        growth,
    })
}

/// The ratios, all from this run. x 4k and x 1 thread compare ready rates
/// (for posix on one thread the pages are allocated in fallocate, before
/// the pre-fault); "of memset" and "of 4k clear" compare the pre-fault
/// itself with writing already-faulted memory; against each peer, ready
/// rates. `first_threads`: the smallest thread count measured.
fn add_ratios(rows: &mut [Row], memset: &[Baseline], peers: &[PeerRow], first_threads: usize) {
    let snapshot: Vec<(u64, u64, usize, f64)> = rows
        .iter()
        .map(|r| (r.size_bytes, r.page_size_bytes, r.threads, r.ready_gbps))
        .collect();
    for r in rows.iter_mut() {
        let base4k = snapshot
            .iter()
            .find(|(s, p, t, _)| *s == r.size_bytes && *p == 4096 && *t == r.threads)
            .map(|x| x.3);
        let one = snapshot
            .iter()
            .find(|(s, p, t, _)| {
                *s == r.size_bytes && *p == r.page_size_bytes && *t == first_threads
            })
            .map(|x| x.3);
        let ms = memset
            .iter()
            .find(|b| b.size_bytes == r.size_bytes && b.threads == r.threads);
        r.vs_4k = base4k
            .filter(|b| *b > 0.0 && r.page_size_bytes != 4096)
            .map(|b| r.ready_gbps / b);
        r.vs_one_thread = one
            .filter(|o| *o > 0.0 && r.threads != first_threads)
            .map(|o| r.ready_gbps / o);
        let over = |base: f64| (base > 0.0).then(|| r.gbps / base);
        r.vs_memset = ms.and_then(|m| over(m.gbps));
        r.vs_clear_4k = ms.and_then(|m| over(m.clear_4k_gbps));
        for p in peers.iter().filter(|p| {
            p.size_bytes == r.size_bytes
                && p.page_size_bytes == r.page_size_bytes
                && p.threads == p.method.threads(r.threads)
                && p.gbps > 0.0
        }) {
            r.vs_peers.insert(p.method.as_str(), r.ready_gbps / p.gbps);
        }
        r.vs_best_peer = r.vs_peers.values().copied().reduce(f64::min);
    }
}

/// Per page size and thread count, the line of ready seconds against
/// size (rows in ascending size).
fn growth(rows: &[Row]) -> Vec<Growth> {
    let mut growth = Vec::new();
    let mut keys: Vec<(u64, usize)> = rows
        .iter()
        .map(|r| (r.page_size_bytes, r.threads))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    for (ps, t) in keys {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.page_size_bytes == ps && r.threads == t)
            .collect();
        let pts: Vec<(f64, f64)> = mine
            .iter()
            .map(|r| (r.size_bytes as f64 / 1e9, r.ready_seconds))
            .collect();
        let Some((k, fixed)) = crate::cmd::bench_common::fit(&pts) else {
            continue;
        };
        growth.push(Growth {
            page_size_bytes: ps,
            threads: t,
            gbps: mine.iter().map(|r| r.ready_gbps).collect(),
            seconds_per_gb: k,
            marginal_gbps: if k > 0.0 { 1.0 / k } else { 0.0 },
            fixed_seconds: fixed,
        });
    }
    growth
}

/// Runs the bench and prints it.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let o = a.options()?;
    let probe = Probe::new(roots.clone());
    let steps = crate::progress::steps("bench prefault", planned_steps(&probe.host(), &o));
    let report = measure(&probe, &o, &steps);
    steps.finish();
    let report = report?;
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    print(&report, out)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the report as tables: the rows, the peers' methods, what was
/// skipped, the memset baselines, the growth lines.
pub(crate) fn print(report: &Report, out: &mut Out) -> anyhow::Result<()> {
    let sweep = report.sizes.len() > 1;
    let sizes_text: Vec<String> = report.sizes.iter().map(|b| format_bytes(*b)).collect();
    out.line(format!(
        "pre-fault of a {} region (best of {} runs after a warm-up; GB/s = decimal)",
        sizes_text.join(", "),
        report.runs
    ))?;
    let lead = |heads: &[&'static str]| -> Vec<&'static str> {
        let mut h = Vec::new();
        if sweep {
            h.push(">size");
        }
        h.extend_from_slice(heads);
        h
    };
    let mut t = Table::new(&lead(&[
        "page",
        "backend",
        ">threads",
        ">cold s",
        ">ready s",
        ">ready GB/s",
        ">x 4k",
        ">x 1 thread",
        ">pre-fault GB/s",
        ">of memset",
        ">of 4k clear",
        "method",
    ]));
    let ratio = |v: Option<f64>| v.map(|x| format!("{x:.1}x")).unwrap_or_else(|| "-".into());
    let pct = |v: Option<f64>| {
        v.map(|x| format!("{:.0}%", x * 100.0))
            .unwrap_or_else(|| "-".into())
    };
    let first = |r: &Row| -> Vec<String> {
        let mut v = Vec::new();
        if sweep {
            v.push(format_bytes(r.size_bytes));
        }
        v.push(page_size_short(r.page_size_bytes));
        v
    };
    for r in &report.results {
        let mut row = first(r);
        row.extend([
            r.backend.to_string(),
            r.threads.to_string(),
            r.cold_seconds
                .map(|c| format!("{c:.3}"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.3}", r.ready_seconds),
            format!("{:.1}", r.ready_gbps),
            ratio(r.vs_4k),
            ratio(r.vs_one_thread),
            format!("{:.1}", r.gbps),
            pct(r.vs_memset),
            pct(r.vs_clear_4k),
            r.method.clone(),
        ]);
        t.row(row);
    }
    t.render(out, "")?;
    if !report.peers.is_empty() {
        out.line("")?;
        out.line("against the peers' methods on the same size and page size (shared anonymous memory; GB/s from mmap to the last page faulted):")?;
        let mut heads: Vec<String> = lead(&["page", ">threads"])
            .into_iter()
            .map(str::to_owned)
            .collect();
        for m in PeerMethod::ALL {
            heads.push(format!(">{} GB/s", m.as_str()));
        }
        heads.push(">hugeshm GB/s".to_owned());
        for m in PeerMethod::ALL {
            heads.push(format!(">x {}", m.as_str()));
        }
        heads.push(">x best".to_owned());
        let heads: Vec<&str> = heads.iter().map(String::as_str).collect();
        let mut pt = Table::new(&heads);
        for r in &report.results {
            let mut row = first(r);
            row.push(r.threads.to_string());
            for m in PeerMethod::ALL {
                row.push(
                    report
                        .peers
                        .iter()
                        .find(|p| {
                            p.size_bytes == r.size_bytes
                                && p.page_size_bytes == r.page_size_bytes
                                && p.method == m
                                && p.threads == m.threads(r.threads)
                        })
                        .map(|p| format!("{:.1}", p.gbps))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            row.push(format!("{:.1}", r.ready_gbps));
            for m in PeerMethod::ALL {
                row.push(ratio2(r.vs_peers.get(m.as_str()).copied()));
            }
            row.push(ratio2(r.vs_best_peer));
            pt.row(row);
        }
        pt.render(out, "")?;
        out.line(format!(
            "peers: {}",
            PeerMethod::ALL
                .iter()
                .map(|m| format!("{} ({})", m.as_str(), m.used_by()))
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
    }
    crate::cmd::bench_common::print_skipped(&report.skipped, out)?;
    for &size in &report.sizes {
        let per = |f: fn(&Baseline) -> f64| -> String {
            report
                .memset
                .iter()
                .filter(|b| b.size_bytes == size)
                .map(|b| {
                    format!(
                        "{} thread{}: {:.1} GB/s",
                        b.threads,
                        if b.threads == 1 { "" } else { "s" },
                        f(b)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let at = if sweep {
            format!(", {}", format_bytes(size))
        } else {
            String::new()
        };
        out.line(format!(
            "memset over already-faulted memory (the machine's write bandwidth){at}: {}",
            per(|b| b.gbps)
        ))?;
        out.line(format!(
            "zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in){at}: {}",
            per(|b| b.clear_4k_gbps)
        ))?;
    }
    for g in &report.growth {
        let per: Vec<String> = g.gbps.iter().map(|x| format!("{x:.1}")).collect();
        out.line(format!(
            "growth {} on {} thread{}: ready GB/s {} by size; {:.4} s per GB (marginal {:.1} GB/s), fixed {:.1} ms",
            page_size_short(g.page_size_bytes),
            g.threads,
            if g.threads == 1 { "" } else { "s" },
            per.join(" / "),
            g.seconds_per_gb,
            g.marginal_gbps,
            g.fixed_seconds * 1000.0
        ))?;
    }
    out.line("ready = create + pre-fault (for posix on one thread this includes fallocate, where tmpfs allocates its pages; it zeroes them at the first fault); x 4k and x 1 thread compare ready rates, of memset and of 4k clear the pre-fault rate")?;
    out.flush()?;
    Ok(())
}

/// `1 thread`, `4 threads`.
fn threads_text(t: usize) -> String {
    if t == 1 {
        "1 thread".to_owned()
    } else {
        format!("{t} threads")
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    const M2: u64 = 2 << 20;
    const MIB256: u64 = 256 << 20;

    /// A row as measure_size makes it, before the ratios.
    fn row(size: u64, ps: u64, threads: usize, ready_gbps: f64, gbps: f64) -> Row {
        let bytes = size as f64 / 1e9;
        Row {
            size_bytes: size,
            page_size_bytes: ps,
            backend: if ps == 4096 {
                Backend::Posix
            } else {
                Backend::Anon
            },
            threads,
            cold_seconds: (threads == 2).then_some(0.25),
            seconds: bytes / gbps,
            gbps,
            ready_seconds: bytes / ready_gbps,
            ready_gbps,
            method: "populate_write".into(),
            vs_4k: None,
            vs_one_thread: None,
            vs_memset: None,
            vs_clear_4k: None,
            vs_peers: BTreeMap::new(),
            vs_best_peer: None,
            samples: Vec::new(),
        }
    }

    fn peer(ps: u64, method: PeerMethod, threads: usize, gbps: f64) -> PeerRow {
        PeerRow {
            size_bytes: MIB256,
            page_size_bytes: ps,
            method,
            used_by: method.used_by(),
            threads,
            seconds: MIB256 as f64 / 1e9 / gbps,
            gbps,
        }
    }

    fn baseline(threads: usize, gbps: f64, clear_4k_gbps: f64) -> Baseline {
        Baseline {
            size_bytes: MIB256,
            threads,
            gbps,
            clear_4k_gbps,
        }
    }

    /// 256 MiB on 4 KiB and 2 MiB pages, 1 and 2 threads, with the peers'
    /// methods and the baselines, ratios added; 1 GiB pages skipped.
    fn report() -> Report {
        let mut rows = vec![
            row(MIB256, 4096, 1, 1.0, 2.0),
            row(MIB256, 4096, 2, 1.5, 3.0),
            row(MIB256, M2, 1, 4.0, 8.0),
            row(MIB256, M2, 2, 6.0, 12.0),
        ];
        let memset = vec![baseline(1, 10.0, 16.0), baseline(2, 20.0, 0.0)];
        let mut peers = Vec::new();
        for ps in [4096, M2] {
            peers.push(peer(ps, PeerMethod::MapPopulate, 1, 8.0));
            peers.push(peer(ps, PeerMethod::FirstTouch, 1, 5.0));
            peers.push(peer(ps, PeerMethod::TouchLoop, 1, 2.0));
            peers.push(peer(ps, PeerMethod::TouchLoop, 2, 3.0));
        }
        add_ratios(&mut rows, &memset, &peers, 1);
        Report {
            size_bytes: MIB256,
            sizes: vec![MIB256],
            runs: 1,
            memset,
            results: rows,
            peers,
            skipped: vec![Skipped {
                page_size_bytes: 1 << 30,
                reason: "256 MiB region: the kernel granted 0 of 1 1 GiB pages".into(),
                fix: Some("reserve them at boot".into()),
            }],
            growth: Vec::new(),
        }
    }

    #[test]
    fn ratios_compare_within_the_run() {
        let r = report();
        let by = |ps: u64, t: usize| {
            r.results
                .iter()
                .find(|x| x.page_size_bytes == ps && x.threads == t)
                .unwrap()
        };
        // 2 MiB on 1 thread: against 4 KiB on 1 thread, memset, the peers.
        let h1 = by(M2, 1);
        assert_eq!(h1.vs_4k, Some(4.0));
        assert_eq!(h1.vs_one_thread, None);
        assert_eq!((h1.vs_memset, h1.vs_clear_4k), (Some(0.8), Some(0.5)));
        assert_eq!(h1.vs_peers["map-populate"], 0.5);
        assert_eq!(h1.vs_peers["touch-loop"], 2.0);
        assert_eq!(h1.vs_best_peer, Some(0.5));
        // On 2 threads: the touch loop of 2 threads, map-populate of 1; a
        // baseline of 0 gives no ratio.
        let h2 = by(M2, 2);
        assert_eq!((h2.vs_4k, h2.vs_one_thread), (Some(4.0), Some(1.5)));
        assert_eq!((h2.vs_memset, h2.vs_clear_4k), (Some(0.6), None));
        assert_eq!(h2.vs_peers["touch-loop"], 2.0);
        assert_eq!(h2.vs_peers["map-populate"], 0.75);
        // 4 KiB rows are not compared with themselves.
        assert_eq!(by(4096, 2).vs_4k, None);
        assert_eq!(by(4096, 2).vs_one_thread, Some(1.5));
    }

    #[test]
    fn growth_is_a_line_through_the_sizes() {
        let (g1, g2) = (1_000_000_000, 2_000_000_000);
        let mut a = row(g1, M2, 1, 2.0, 4.0);
        a.ready_seconds = 0.5;
        let mut b = row(g2, M2, 1, 2.2, 4.0);
        b.ready_seconds = 0.9;
        // One size only for 4 KiB pages: no line.
        let g = growth(&[a, row(g1, 4096, 1, 1.0, 2.0), b]);
        assert_eq!(g.len(), 1);
        let g = &g[0];
        assert_eq!((g.page_size_bytes, g.threads), (M2, 1));
        assert_eq!(g.gbps, [2.0, 2.2]);
        assert!((g.seconds_per_gb - 0.4).abs() < 1e-9, "{g:?}");
        assert!((g.marginal_gbps - 2.5).abs() < 1e-9, "{g:?}");
        assert!((g.fixed_seconds - 0.1).abs() < 1e-9, "{g:?}");
    }

    #[test]
    fn page_sizes_skip_what_the_kernel_lacks() {
        let mut host = HostSnapshot::default();
        host.pools = vec![hugeshm_parse::hugepages::PoolCounters::new(
            M2,
            0,
            0,
            Some(0),
            0,
            Some(0),
        )];
        let asked = [PageSize::Base, PageSize::Huge(1 << 30), PageSize::Huge(M2)];
        let (sizes, skipped) = page_sizes(&host, &asked, MIB256).unwrap();
        assert_eq!(sizes, [4096, M2]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].page_size_bytes, 1 << 30);
        let e = page_sizes(&host, &[PageSize::Largest], MIB256).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--page-size takes explicit sizes (4k, 2m, 1g)"
        );
    }

    #[test]
    fn print_writes_the_rows_the_peers_and_the_baselines() {
        let (mut out, text) = Out::captured();
        print(&report(), &mut out).unwrap();
        let expected = "\
pre-fault of a 256 MiB region (best of 1 runs after a warm-up; GB/s = decimal)
page  backend  threads  cold s  ready s  ready GB/s  x 4k  x 1 thread  pre-fault GB/s  of memset  of 4k clear  method
4k    posix          1       -    0.268         1.0     -           -             2.0        20%          12%  populate_write
4k    posix          2   0.250    0.179         1.5     -        1.5x             3.0        15%            -  populate_write
2M    anon           1       -    0.067         4.0  4.0x           -             8.0        80%          50%  populate_write
2M    anon           2   0.250    0.045         6.0  4.0x        1.5x            12.0        60%            -  populate_write

against the peers' methods on the same size and page size (shared anonymous memory; GB/s from mmap to the last page faulted):
page  threads  map-populate GB/s  first-touch GB/s  touch-loop GB/s  hugeshm GB/s  x map-populate  x first-touch  x touch-loop  x best
4k          1                8.0               5.0              2.0           1.0           0.12x          0.20x         0.50x   0.12x
4k          2                8.0               5.0              3.0           1.5           0.19x          0.30x         0.50x   0.19x
2M          1                8.0               5.0              2.0           4.0           0.50x          0.80x         2.00x   0.50x
2M          2                8.0               5.0              3.0           6.0           0.75x          1.20x         2.00x   0.75x
peers: map-populate (DPDK, Seastar), first-touch (PostgreSQL (on demand)), touch-loop (JVM AlwaysPreTouch)
1G pages not measured: 256 MiB region: the kernel granted 0 of 1 1 GiB pages
  to fix: reserve them at boot
memset over already-faulted memory (the machine's write bandwidth): 1 thread: 10.0 GB/s, 2 threads: 20.0 GB/s
zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in): 1 thread: 16.0 GB/s, 2 threads: 0.0 GB/s
ready = create + pre-fault (for posix on one thread this includes fallocate, where tmpfs allocates its pages; it zeroes them at the first fault); x 4k and x 1 thread compare ready rates, of memset and of 4k clear the pre-fault rate
";
        assert_eq!(text.text(), expected);
    }

    #[test]
    fn a_sweep_prints_the_size_column_and_the_growth() {
        let mut r = report();
        r.peers.clear();
        r.skipped.clear();
        r.results
            .retain(|x| x.page_size_bytes == M2 && x.threads == 1);
        let mut big = row(2 * MIB256, M2, 1, 5.0, 9.0);
        big.vs_4k = None;
        r.results.push(big);
        r.sizes = vec![MIB256, 2 * MIB256];
        r.size_bytes = 2 * MIB256;
        r.memset = vec![
            baseline(1, 10.0, 16.0),
            Baseline {
                size_bytes: 2 * MIB256,
                threads: 1,
                gbps: 9.0,
                clear_4k_gbps: 12.0,
            },
        ];
        r.growth = growth(&r.results);
        let (mut out, text) = Out::captured();
        print(&r, &mut out).unwrap();
        let text = text.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "pre-fault of a 256 MiB, 512 MiB region (best of 1 runs after a warm-up; GB/s = decimal)"
        );
        assert!(lines[1].starts_with("   size  page  backend"), "{text}");
        assert!(lines[2].starts_with("256 MiB  2M    anon"), "{text}");
        assert!(lines[3].starts_with("512 MiB  2M    anon"), "{text}");
        assert!(
            text.contains("memset over already-faulted memory (the machine's write bandwidth), 256 MiB: 1 thread: 10.0 GB/s\n"),
            "{text}"
        );
        assert!(
            text.contains("zeroing it 4 KiB at a time (how the kernel clears a huge page it faults in), 512 MiB: 1 thread: 12.0 GB/s\n"),
            "{text}"
        );
        assert!(
            text.contains("\ngrowth 2M on 1 thread: ready GB/s 4.0 / 5.0 by size; "),
            "{text}"
        );
        assert!(!text.contains("against the peers"), "{text}");
    }
}
