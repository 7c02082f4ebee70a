//! `hugeshm bench prefault`: how fast a region is ready, per page size and
//! thread count, against the machine's write bandwidth.

use crate::cmd::bench_common::{parse_count_arg, parse_size_arg, PoolTopUp, Skipped};
use crate::cmd::bench_prefault_sample::{
    bench_peer, bench_prefault, memset_baseline, PeerMethod, PeerSample, PrefaultSample,
};
use crate::output::{Out, Table};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, PageSize};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// `bench prefault` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size; several (comma-separated, e.g. 1G,2G,4G) make a sweep
    /// with GB/s per size and the slope (seconds per GB) per page size and
    /// thread count.
    #[arg(long, value_delimiter = ',', default_value = "4G", value_parser = parse_size_arg)]
    pub size: Vec<u64>,
    /// Page sizes to compare (comma-separated): 4k, 2m, 1g.
    #[arg(long, value_delimiter = ',', default_value = "4k,2m")]
    pub page_size: Vec<String>,
    /// Thread counts to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// Timed runs per combination after the warm-up (the best is reported).
    #[arg(long, default_value_t = 3, value_parser = parse_count_arg::<usize>)]
    pub runs: usize,
    /// Backend for huge pages (4 KiB pages always use posix: files in /dev/shm,
    /// the "memory-mapped files" style).
    #[arg(long, default_value = "anon")]
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

#[derive(Debug, serde::Serialize)]
struct Row {
    size_bytes: u64,
    page_size_bytes: u64,
    backend: Backend,
    threads: usize,
    cold_seconds: Option<f64>,
    seconds: f64,
    gbps: f64,
    ready_seconds: f64,
    ready_gbps: f64,
    method: String,
    vs_4k: Option<f64>,
    vs_one_thread: Option<f64>,
    vs_memset: Option<f64>,
    /// Pre-fault rate over zeroing already-faulted memory 4 KiB at a time
    /// (the kernel's way of clearing a huge page) at this thread count.
    vs_clear_4k: Option<f64>,
    /// Ready rate over each peer method's rate at this page size and
    /// thread count (map-populate and first-touch run on one thread).
    vs_peers: BTreeMap<&'static str, f64>,
    /// Ready rate over the fastest peer's.
    vs_best_peer: Option<f64>,
}

/// A peer's method, best of the runs, on the same size and page size.
#[derive(Debug, serde::Serialize)]
struct PeerRow {
    size_bytes: u64,
    page_size_bytes: u64,
    method: PeerMethod,
    used_by: &'static str,
    threads: usize,
    seconds: f64,
    gbps: f64,
}

#[derive(Debug, serde::Serialize)]
struct Baseline {
    size_bytes: u64,
    threads: usize,
    gbps: f64,
    /// Zeroing the same memory 4 KiB at a time.
    clear_4k_gbps: f64,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    /// The largest size measured (every row has its own `size_bytes`).
    size_bytes: u64,
    /// Every size measured, ascending.
    sizes: Vec<u64>,
    runs: usize,
    memset: Vec<Baseline>,
    results: Vec<Row>,
    /// The peers' methods, per page size (and thread count for the touch loop).
    peers: Vec<PeerRow>,
    /// Page sizes that could not be had (the others still ran).
    skipped: Vec<Skipped>,
    /// With several sizes: ready seconds against size, per page size and
    /// thread count.
    growth: Vec<Growth>,
}

/// How ready time grows with size for one page size and thread count: a
/// least-squares line through (GB, ready seconds).
#[derive(Debug, serde::Serialize)]
struct Growth {
    page_size_bytes: u64,
    threads: usize,
    /// Ready GB/s at each size, ascending size.
    gbps: Vec<f64>,
    /// Seconds per decimal GB (the slope).
    seconds_per_gb: f64,
    /// `1 / seconds_per_gb`: the rate the cost grows at.
    marginal_gbps: f64,
    /// Seconds at size 0 (the line's intercept): fixed cost.
    fixed_seconds: f64,
}

/// A ratio with two decimals (`1.04x`), or `-`.
fn ratio2(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "-".into())
}

/// The rows of one page size: a cold warm-up, then the best of `a.runs`
/// per thread count.
fn measure_size(
    a: &Args,
    size: u64,
    ps: u64,
    threads: &[usize],
    note: &dyn Fn(&str),
) -> anyhow::Result<(Vec<Row>, Vec<PeerRow>)> {
    let mut rows = Vec::new();
    let (backend, page) = if ps == 4096 {
        (Backend::Posix, PageSize::Base)
    } else {
        (a.huge_backend, PageSize::Huge(ps))
    };
    // Warm-up: the first touch of guest memory in a VM is slow; reported as cold.
    note(&format!("{} warm-up", page_size_short(ps)));
    let cold = bench_prefault(size, backend, page, *threads.last().unwrap_or(&1))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for &t in threads {
        let mut best: Option<PrefaultSample> = None;
        for r in 0..a.runs.max(1) {
            note(&format!(
                "{} pages, {t} threads, run {}",
                page_size_short(ps),
                r + 1
            ));
            let s = bench_prefault(size, backend, page, t).map_err(|e| anyhow::anyhow!("{e}"))?;
            if best
                .as_ref()
                .is_none_or(|b| s.ready_seconds < b.ready_seconds)
            {
                best = Some(s);
            }
        }
        let s = best.expect("at least one run");
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
        });
    }
    let peers = if a.no_peers {
        Vec::new()
    } else {
        measure_peers(a, size, ps, threads, note)?
    };
    Ok((rows, peers))
}

/// The peers' methods at one page size: map-populate and first-touch once
/// (one thread each), the touch loop per thread count; best of `a.runs`.
fn measure_peers(
    a: &Args,
    size: u64,
    ps: u64,
    threads: &[usize],
    note: &dyn Fn(&str),
) -> anyhow::Result<Vec<PeerRow>> {
    let mut out = Vec::new();
    for m in PeerMethod::ALL {
        let counts: Vec<usize> = if m.threads(2) == 1 {
            vec![1]
        } else {
            threads.to_vec()
        };
        for t in counts {
            let mut best: Option<PeerSample> = None;
            for r in 0..a.runs.max(1) {
                note(&format!(
                    "{} pages, {} on {t} threads, run {}",
                    page_size_short(ps),
                    m.as_str(),
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

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let probe = Probe::new(roots.clone());
    let host = probe.host();
    let mut region_sizes = a.size.clone();
    region_sizes.sort_unstable();
    region_sizes.dedup();
    let largest = *region_sizes
        .last()
        .ok_or_else(|| anyhow::anyhow!("--size needs at least one size"))?;
    let mut sizes = Vec::new();
    let mut skipped = Vec::new();
    for p in &a.page_size {
        let ps: PageSize = p.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        let bytes = match ps {
            PageSize::Largest => anyhow::bail!("--page-size takes explicit sizes (4k, 2m, 1g)"),
            other => other.bytes().unwrap_or(4096),
        };
        if bytes > 4096 && host.pool(bytes).is_none() {
            skipped.push(Skipped::no_such_pages(
                &host,
                bytes,
                largest.div_ceil(bytes),
            ));
            continue;
        }
        sizes.push(bytes);
    }
    let mut threads = a.threads.clone();
    threads.retain(|t| *t > 0);
    threads.sort_unstable();
    threads.dedup();
    anyhow::ensure!(
        !threads.is_empty(),
        "--threads needs at least one count above 0"
    );

    // Memory: the memset baseline maps `size` bytes of ordinary memory, and
    // a 4 KiB region takes as much again after it; a size the host cannot
    // hold is refused here, not found by the OOM killer.
    let available = host.meminfo.as_ref().and_then(|m| m.mem_available_bytes);
    if let Some(avail) = available {
        let most = avail / 10 * 9;
        anyhow::ensure!(
            largest <= most,
            "--size {} is more than the bench can measure here: the memset baseline maps \
             that much ordinary memory (as does a 4 KiB region), and MemAvailable is {} \
             (huge pages already in the pools are not part of it); pass a --size of at \
             most {}",
            format_bytes(largest),
            format_bytes(avail),
            format_bytes(most)
        );
    }

    let tty = out.tty && !a.json;
    let note = |s: &str| {
        if tty {
            crate::terminal::eprogress(s, 70);
        }
    };
    let mut memset = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut peers: Vec<PeerRow> = Vec::new();
    for &size in &region_sizes {
        for &t in &threads {
            note(&format!(
                "{} memset baseline, {t} threads",
                format_bytes(size)
            ));
            let b = memset_baseline(size, t).map_err(|e| anyhow::anyhow!("{e}"))?;
            memset.push(Baseline {
                size_bytes: size,
                threads: t,
                gbps: b.gbps,
                clear_4k_gbps: b.clear_4k_gbps,
            });
        }
        let mut failed = Vec::new();
        for &ps in &sizes {
            // The pool (root only) holds this page size's pages for this
            // size only while it is measured, and is given back before the
            // next: held all at once beside the memset baseline, 14 GiB of
            // 2 MiB pages and a 14 GiB baseline woke the OOM killer on
            // this 24 GiB VM. One page size failing (its pages cannot be
            // had, or were taken meanwhile) does not end the bench: it
            // says why, and the others run.
            let pages = size.div_ceil(ps);
            let mut reservation = PoolTopUp::new(&probe);
            let result = (|| {
                if ps > 4096 && !a.no_reserve {
                    reservation.ensure(&host, ps, pages)?;
                }
                measure_size(a, size, ps, &threads, &note)
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
        sizes.retain(|ps| !failed.contains(ps));
    }
    if tty {
        crate::terminal::eprogress_clear(70);
    }
    // Ratios, all from this run.
    // x 4k and x 1 thread compare ready rates (for posix on one thread the
    // pages are allocated in fallocate, before the pre-fault); "of memset"
    // and "of 4k clear" compare the pre-fault itself with writing
    // already-faulted memory.
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
            .find(|(s, p, t, _)| *s == r.size_bytes && *p == r.page_size_bytes && *t == threads[0])
            .map(|x| x.3);
        let ms = memset
            .iter()
            .find(|b| b.size_bytes == r.size_bytes && b.threads == r.threads);
        r.vs_4k = base4k
            .filter(|b| *b > 0.0 && r.page_size_bytes != 4096)
            .map(|b| r.ready_gbps / b);
        r.vs_one_thread = one
            .filter(|o| *o > 0.0 && r.threads != threads[0])
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
    let mut growth = Vec::new();
    if region_sizes.len() > 1 {
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
    }
    let report = Report {
        size_bytes: largest,
        sizes: region_sizes,
        runs: a.runs,
        memset,
        results: rows,
        peers,
        skipped,
        growth,
    };
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sweep = report.sizes.len() > 1;
    let sizes_text: Vec<String> = report.sizes.iter().map(|b| format_bytes(*b)).collect();
    out.line(format!(
        "pre-fault of a {} region (best of {} runs after a warm-up; GB/s = decimal)",
        sizes_text.join(", "),
        a.runs
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
    Skipped::print(&report.skipped, out)?;
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
    Ok(ExitCode::SUCCESS)
}
