//! [`measure`]: the bench's rows (a page size and backend each: create,
//! prewarm, workers, the cache's runs and the raw loop's), and the ratios
//! between them, all from one run.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};
use hugeshm_cache::{Cache, Layout, Stats};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{HostSnapshot, Probe, Roots};
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};

use super::worker::{run_all, start_workers, vm_pte, Workers};
use super::workload::Histogram;
use super::{ModeResult, Options, Report, Row, RunSummary};
use crate::common::{DataFile, PoolTopUp, Skipped};
use crate::region_failed::region_failed;
use crate::Steps;

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
        Some(crate::guard::undo(crate::guard::Taken::Region {
            name: name.clone(),
            backend,
        }))
    } else {
        None
    };
    let t0 = Instant::now();
    let (region, report) = b.create().map_err(region_failed)?;
    let startup_seconds = t0.elapsed().as_secs_f64();
    let cache = match Cache::create_sized(region, data, bs, Some(layout.buffers)) {
        Ok(c) => c,
        Err(e) => {
            // The region went with the error: remove it by name (an anon
            // region is gone already), or it stays behind.
            if backend.is_named() {
                hugeshm_region::remove(&name, backend)
                    .map_err(region_failed)
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
    destroyed.map_err(region_failed)?;
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
/// regions and the data file removed, whatever happens): the options
/// checked, the data file made, the rows of each page size, the ratios;
/// each run is a step of `steps` ([`planned_steps`] of them).
pub fn measure(roots: &Roots, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    check_options(o)?;
    let probe = Probe::new(roots.clone());
    crate::common::check_process_room(&probe, o.workers.into(), "--workers")?;
    let host = probe.host();
    let data = data_file(o)?;
    let layout = Layout::new(
        o.block_size as usize,
        (o.cache_size_bytes / o.block_size) as usize,
    );
    let mut rows = Vec::new();
    for &ps in &o.page_sizes {
        let region_bytes = (layout.total as u64 + 4096).div_ceil(ps) * ps;
        rows.extend(measure_page_size(
            o,
            &probe,
            &host,
            ps,
            region_bytes / ps,
            &data.path,
            steps,
        ));
    }
    // Ratios, all from this run.
    compare_to_4k(&mut rows);
    Ok(Report {
        options: o.clone(),
        cpus: hugeshm_sys::affinity().map(|c| c.len()).unwrap_or(0),
        rows,
    })
}

/// What the options must be before anything is made.
fn check_options(o: &Options) -> anyhow::Result<()> {
    anyhow::ensure!(
        o.workers > 0,
        crate::Usage("--workers must be at least 1".into())
    );
    crate::common::check_cache_run(
        o.duration_seconds,
        o.block_size,
        o.cache_size_bytes,
        o.data_size_bytes,
    )
}

/// The data file, sparse, in a private directory made in `o.data_dir`
/// (removed with it when dropped).
fn data_file(o: &Options) -> anyhow::Result<DataFile> {
    std::fs::create_dir_all(&o.data_dir)
        .with_context(|| format!("creating {}", o.data_dir.display()))?;
    let data = DataFile::new(&o.data_dir, "hugeshm-oltp-")?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&data.path)
        .with_context(|| format!("creating {}", data.path.display()))?;
    let blocks = o.data_size_bytes / o.block_size;
    f.set_len(blocks * o.block_size)
        .with_context(|| format!("sizing {}", data.path.display()))?;
    Ok(data)
}

/// The rows of one page size `ps`, a backend each, with the `pages` a
/// region needs raised in the pool for them (given back after) unless
/// `o.reserve` is off; rows the pages cannot be had for say why.
fn measure_page_size(
    o: &Options,
    probe: &Probe,
    host: &HostSnapshot,
    ps: u64,
    pages: u64,
    data: &Path,
    steps: &Steps,
) -> Vec<Row> {
    let note = &mut |s: &str| steps.begin(s);
    let mut rows = Vec::new();
    let mut reservation = PoolTopUp::new(probe);
    let unavailable = if ps > 4096 && host.pool(ps).is_none() {
        Some(Skipped::no_such_pages(host, ps, pages))
    } else if ps > 4096 && o.reserve {
        reservation
            .ensure(host, ps, pages)
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
        match measure_row(o, ps, backend, data, note) {
            Ok(r) => rows.push(r),
            Err(e) => rows.push(empty_row(ps, backend, crate::error_text(&e), None)),
        }
    }
    drop(reservation);
    rows
}

/// Each huge page row's cache tps (and per CPU-second) against the 4 KiB
/// row of the same backend, where both were measured.
fn compare_to_4k(rows: &mut [Row]) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oltp::sample;

    #[test]
    fn the_options_are_checked_before_anything_is_made() {
        let err = |f: &dyn Fn(&mut Options)| {
            let mut o = sample::options();
            f(&mut o);
            check_options(&o).unwrap_err().to_string()
        };
        check_options(&sample::options()).unwrap();
        assert_eq!(err(&|o| o.workers = 0), "--workers must be at least 1");
        assert_eq!(
            err(&|o| o.block_size = 3000),
            "--block-size 3000 must be a power of two from 512 bytes to 1 MiB"
        );
        assert_eq!(
            err(&|o| o.block_size = 2 << 20),
            "--block-size 2097152 must be a power of two from 512 bytes to 1 MiB"
        );
        assert_eq!(
            err(&|o| o.cache_size_bytes = 4096),
            "--cache-size (4096) and --data-size (268435456) must hold at least one 8192-byte block"
        );
        assert!(err(&|o| o.duration_seconds = 0.0).starts_with("--duration 0 must be"));
    }

    #[test]
    fn huge_page_rows_are_compared_with_the_4k_row_of_their_backend() {
        let mut rows = vec![
            sample::row(4096, Backend::Sysv, 100.0),
            sample::row(2 << 20, Backend::Sysv, 150.0),
            sample::row(2 << 20, Backend::Posix, 120.0),
            empty_row(4096, Backend::Memfd, "no".into(), None),
            sample::row(2 << 20, Backend::Memfd, 130.0),
        ];
        compare_to_4k(&mut rows);
        assert_eq!(rows[0].vs_4k, None);
        assert_eq!(rows[1].vs_4k, Some(1.5));
        assert_eq!(rows[1].vs_4k_cpu, Some(1.5));
        // No 4 KiB row measured for posix or memfd.
        assert_eq!((rows[2].vs_4k, rows[4].vs_4k), (None, None));
    }

    #[test]
    fn a_mode_keeps_the_best_the_median_and_the_paired_overhead() {
        let cache = sample::mode(&[100.0, 90.0, 80.0]);
        let mut runs = ModeRuns::new(sample::summary(50.0, 25.0));
        for (tps, per_cpu) in [(90.0, 40.0), (110.0, 60.0), (100.0, 50.0)] {
            runs.add(sample::summary(tps, per_cpu), &Histogram::default());
        }
        let m = runs.result(false);
        assert_eq!((m.best_tps, m.median_tps), (110.0, 100.0));
        assert_eq!(m.best_tx_per_cpu_second, 60.0);
        assert_eq!(m.dtlb_misses_per_tx, Some(1.5));
        assert_eq!(m.hit_ratio, Some(0.0));
        assert_eq!(runs_tps(&m), [90.0, 110.0, 100.0]);
        assert_eq!(
            ModeRuns::new(sample::summary(1.0, 1.0))
                .result(true)
                .hit_ratio,
            None
        );
        // raw / cache per pair: 0.9, 1.222, 1.25: the median.
        assert_eq!(
            paired_overhead(&cache, &m).map(|r| (r * 1000.0).round()),
            Some(1222.0)
        );
    }

    fn runs_tps(m: &ModeResult) -> Vec<f64> {
        m.runs.iter().map(|r| r.tps).collect()
    }
}
