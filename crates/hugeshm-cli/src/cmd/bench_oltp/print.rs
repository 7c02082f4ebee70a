//! [`run`]: the bench measured, then printed (a table, or JSON).

use std::process::ExitCode;

use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::Roots;

use super::measure::measure;
use super::worker::SAMPLE_EVERY;
use super::Args;
use crate::output::{Out, Table};

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
    let tty = out.tty && !a.json;
    let steps = (o.page_sizes.len() * o.backends.len()) as u64;
    let mut row_no = 0u64;
    let mut last = String::new();
    let mut note = |s: &str| {
        if !tty {
            return;
        }
        let prefix = s.split(':').next().unwrap_or("").to_owned();
        if prefix != last && s.contains(':') {
            row_no += 1;
            last = prefix;
        }
        let done = row_no.saturating_sub(1).min(steps);
        let width = 20;
        let fill = (done * width / steps.max(1)) as usize;
        crate::terminal::eprogress(
            &format!(
                "[{}{}] {row_no}/{steps} {s:<60}",
                "#".repeat(fill),
                ".".repeat(width as usize - fill)
            ),
            0,
        );
    };
    let report = measure(roots, &o, &mut note)?;
    if tty {
        crate::terminal::eprogress_clear(100);
    }
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
