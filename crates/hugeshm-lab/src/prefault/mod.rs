//! `hugeshm bench prefault`: how fast a region is ready, per page size and
//! thread count, against the machine's write bandwidth.
//!
//! [`measure`] builds the [`Report`] (what `hugeshm bench prefault` prints
//! and `hugeshm lab`'s start-up reproduction reads). Measuring goes by
//! phase: the page sizes to measure (`page_sizes`), per region size the
//! memset baselines then each page size (`measure_size`, the peers'
//! methods in `measure_peers`), then the ratios and, for a sweep, the
//! growth lines ([`Report::derive`]). One sample of each thing measured is
//! [`sample`]'s.

pub mod sample;

use crate::common::{fit, PoolTopUp, Skipped};
use crate::Steps;
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{HostSnapshot, Probe};
use hugeshm_region::{Backend, PageSize};
use sample::{bench_peer, bench_prefault, memset_baseline, PeerMethod, PeerSample, PrefaultSample};
use std::collections::BTreeMap;

/// What one run measures (the CLI's `bench prefault` options; the lab
/// passes its own).
#[derive(Debug, Clone)]
pub struct Options {
    /// Region sizes (any order; each measured once).
    pub sizes: Vec<u64>,
    /// Page sizes to compare.
    pub page_sizes: Vec<PageSize>,
    /// Thread counts to compare (any order; 0 ignored).
    pub threads: Vec<usize>,
    /// Timed runs per combination after the warm-up.
    pub runs: usize,
    /// Backend for huge pages (4 KiB pages use posix).
    pub huge_backend: Backend,
    /// Raise the huge page pools for the run (root).
    pub reserve: bool,
    /// Measure the peers' methods.
    pub peers: bool,
    /// Measure the memset baselines (the lab has its own, once a run).
    pub memset: bool,
}

/// One page size, thread count and region size: the best of the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Region size.
    pub size_bytes: u64,
    /// Page size.
    pub page_size_bytes: u64,
    /// Backend (posix for 4 KiB pages).
    pub backend: Backend,
    /// Threads that pre-faulted.
    pub threads: usize,
    /// The warm-up's ready seconds (on the row of the largest thread
    /// count, which the warm-up ran with).
    pub cold_seconds: Option<f64>,
    /// The pre-fault alone.
    pub seconds: f64,
    /// Its decimal GB/s.
    pub gbps: f64,
    /// Create + pre-fault.
    pub ready_seconds: f64,
    /// Its decimal GB/s.
    pub ready_gbps: f64,
    /// How the region pre-faulted (`populate_write`, ...).
    pub method: String,
    /// Ready rate over 4 KiB pages' at this size and thread count.
    pub vs_4k: Option<f64>,
    /// Ready rate over the smallest thread count's.
    pub vs_one_thread: Option<f64>,
    /// Pre-fault rate over memset's at this thread count.
    pub vs_memset: Option<f64>,
    /// Pre-fault rate over zeroing already-faulted memory 4 KiB at a time
    /// (the kernel's way of clearing a huge page) at this thread count.
    pub vs_clear_4k: Option<f64>,
    /// Ready rate over each peer method's rate at this page size and
    /// thread count (map-populate and first-touch run on one thread).
    pub vs_peers: BTreeMap<&'static str, f64>,
    /// Ready rate over the fastest peer's.
    pub vs_best_peer: Option<f64>,
    /// Every timed run, in order (the lab's median); not in `--json`.
    #[serde(skip)]
    pub samples: Vec<PrefaultSample>,
}

/// A peer's method, best of the runs, on the same size and page size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerRow {
    /// Bytes mapped.
    pub size_bytes: u64,
    /// Page size.
    pub page_size_bytes: u64,
    /// The method.
    pub method: PeerMethod,
    /// Who faults memory in this way.
    pub used_by: &'static str,
    /// Threads that faulted.
    pub threads: usize,
    /// From the mmap to the last page faulted.
    pub seconds: f64,
    /// Its decimal GB/s.
    pub gbps: f64,
}

/// The machine's write bandwidth at one size and thread count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Baseline {
    /// Bytes written.
    pub size_bytes: u64,
    /// Threads writing.
    pub threads: usize,
    /// memset's decimal GB/s.
    pub gbps: f64,
    /// Zeroing the same memory 4 KiB at a time.
    pub clear_4k_gbps: f64,
}

/// What `bench prefault` measured (`--json` prints exactly this).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The largest size measured (every row has its own `size_bytes`).
    pub size_bytes: u64,
    /// Every size measured, ascending.
    pub sizes: Vec<u64>,
    /// Timed runs per combination.
    pub runs: usize,
    /// The memset baselines, per size and thread count.
    pub memset: Vec<Baseline>,
    /// The rows, per size, page size and thread count.
    pub results: Vec<Row>,
    /// The peers' methods, per page size (and thread count for the touch loop).
    pub peers: Vec<PeerRow>,
    /// Page sizes that could not be had (the others still ran).
    pub skipped: Vec<Skipped>,
    /// With several sizes: ready seconds against size, per page size and
    /// thread count.
    pub growth: Vec<Growth>,
}

/// How ready time grows with size for one page size and thread count: a
/// least-squares line through (GB, ready seconds).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Growth {
    /// Page size.
    pub page_size_bytes: u64,
    /// Threads.
    pub threads: usize,
    /// Ready GB/s at each size, ascending size.
    pub gbps: Vec<f64>,
    /// Seconds per decimal GB (the slope).
    pub seconds_per_gb: f64,
    /// `1 / seconds_per_gb`: the rate the cost grows at.
    pub marginal_gbps: f64,
    /// Seconds at size 0 (the line's intercept): fixed cost.
    pub fixed_seconds: f64,
}

impl Report {
    /// Fills in what the measured rows imply, all from this run: each
    /// row's ratios (x 4k and x 1 thread compare ready rates, of memset
    /// and of 4k clear the pre-fault itself, each peer ready rates) and,
    /// with several sizes, the growth lines. `first_threads`: the smallest
    /// thread count measured.
    pub fn derive(&mut self, first_threads: usize) {
        add_ratios(&mut self.results, &self.memset, &self.peers, first_threads);
        self.growth = if self.sizes.len() > 1 {
            growth(&self.results)
        } else {
            Vec::new()
        };
    }
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
pub fn planned_steps(host: &HostSnapshot, o: &Options) -> u64 {
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
pub fn measure(probe: &Probe, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let host = probe.host();
    let region_sizes = region_sizes(o);
    let largest = *region_sizes
        .last()
        .ok_or_else(|| anyhow::anyhow!("--size needs at least one size"))?;
    let (sizes, mut skipped) = page_sizes(&host, &o.page_sizes, largest)?;
    let threads = thread_counts(o);
    anyhow::ensure!(
        !threads.is_empty(),
        crate::Usage("--threads needs at least one count above 0".into())
    );

    // Memory: the memset baseline maps `size` bytes of ordinary memory, and
    // a 4 KiB region takes as much again after it; a size the host cannot
    // hold is refused here, not found by the OOM killer.
    let available = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes);
    if let Some(avail) = available {
        let most = avail / 10 * 9;
        anyhow::ensure!(
            largest <= most,
            crate::Usage(format!(
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
    let mut report = Report {
        size_bytes: largest,
        sizes: region_sizes,
        runs: o.runs,
        memset,
        results: rows,
        peers,
        skipped,
        growth: Vec::new(),
    };
    report.derive(threads[0]);
    Ok(report)
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
        let Some((k, fixed)) = fit(&pts) else {
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

/// `1 thread`, `4 threads`.
fn threads_text(t: usize) -> String {
    if t == 1 {
        "1 thread".to_owned()
    } else {
        format!("{t} threads")
    }
}

#[cfg(any(test, feature = "samples"))]
pub mod by_hand;

#[cfg(test)]
mod tests {
    use super::*;

    use by_hand::{report, row, M2, MIB256};

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
}
