//! `hugeshm bench attach`: how long a new process takes to attach a large
//! region and map every page of it (page tables shared with the creator
//! where the region is hugetlb and 1 GiB-aligned), with and without the
//! smaps verification that `hugeshm attach` does.
//!
//! The region is created and pre-faulted once; then `--runs` fresh
//! processes, one after another, each attach it (find, check the header,
//! map), map every page (`Region::populate_read`: one read fault per GiB
//! where the page tables are shared, `MADV_POPULATE_READ` elsewhere), read their own
//! `/proc/self/smaps` for the region (the verification), ask the page size
//! the cheap way (`Region::verify_page_size`: `PROCMAP_QUERY` for hugetlb
//! on 6.11+, which walks no page tables), and report the four times.

use crate::cmd::bench_common::{bench_region, parse_count_arg, PoolTopUp};
use crate::output::{Out, Table};
use anyhow::{bail, Context};
use hugeshm_parse::size::{format_bytes, page_size_short};
use hugeshm_probe::{Probe, Roots};
use hugeshm_region::{Backend, Locator, PageSize};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// `bench attach` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size.
    #[arg(long, default_value = "4G", value_parser = crate::values::size, allow_hyphen_values = true)]
    pub size: u64,
    /// Page size.
    #[arg(long, default_value = "2m", value_parser = crate::values::page_size())]
    pub page_size: PageSize,
    /// Backend of the region (one the attaching processes find by name).
    #[arg(long, default_value = "sysv", value_parser = crate::values::named_backend())]
    pub backend: Backend,
    /// New processes that attach, one after another (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = parse_count_arg::<u32>)]
    pub runs: u32,
    /// Do not raise the huge page pools for the run.
    #[arg(long)]
    pub no_reserve: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What one attaching process measured (its stdout, one JSON line).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ChildSample {
    attach_seconds: f64,
    touch_seconds: f64,
    verify_seconds: f64,
    verified_page_size_bytes: u64,
    /// `Region::verify_page_size`.
    page_check_seconds: f64,
    /// Its source: `procmap_query` or `smaps`.
    page_check_source: hugeshm_region::PageSizeSource,
    aligned_for_pmd_sharing: bool,
    pmd_shareable_bytes: u64,
    vm_pte_bytes: Option<u64>,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    size_bytes: u64,
    page_size_bytes: u64,
    backend: Backend,
    runs: Vec<ChildSample>,
    /// Medians over the runs, in milliseconds.
    attach_ms: f64,
    touch_ms: f64,
    verify_ms: f64,
    /// The cheap page-size check (`Region::verify_page_size`).
    page_check_ms: f64,
    /// Where it read the page size: `procmap_query` or `smaps`.
    page_check_source: hugeshm_region::PageSizeSource,
    /// attach + touch: a process ready to use the region, unverified.
    ready_ms: f64,
    /// attach + touch + verification (what `hugeshm attach` does).
    ready_verified_ms: f64,
    /// attach + touch + the cheap page-size check.
    ready_page_checked_ms: f64,
    /// Bytes whose page tables the attacher shares.
    pmd_shareable_bytes: u64,
    aligned_for_pmd_sharing: bool,
    /// The attacher's own page-table bytes (VmPTE; the kernel charges a
    /// shared PMD page to every process using it), median.
    vm_pte_bytes: Option<u64>,
}

/// The hidden child: attach, touch, verify, print the times.
pub fn child(name: &str, backend: Backend, out: &mut Out) -> anyhow::Result<ExitCode> {
    // Find, check and map; then fault every page into this process's page
    // tables (read faults: the contents stay).
    let t = Instant::now();
    let region = Locator::new(name, backend)
        .attach()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let attach_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    region.populate_read().map_err(|e| anyhow::anyhow!("{e}"))?;
    let touch_seconds = t.elapsed().as_secs_f64();
    // This process's own page-table bytes; the kernel charges a shared PMD
    // page to every process that uses it, so sharing shows host-wide only.
    let vm_pte_bytes = Probe::default()
        .pid(std::process::id())
        .status()
        .ok()
        .and_then(|s| s.vm_pte_bytes);
    let t = Instant::now();
    let v = region.verify().map_err(|e| anyhow::anyhow!("{e}"))?;
    let verify_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let check = region
        .verify_page_size()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let page_check_seconds = t.elapsed().as_secs_f64();
    anyhow::ensure!(
        check.page_size_bytes == v.page_size_bytes,
        "the page size check says {}, smaps {}",
        check.page_size_bytes,
        v.page_size_bytes
    );
    let report = ChildSample {
        attach_seconds,
        touch_seconds,
        verify_seconds,
        verified_page_size_bytes: v.page_size_bytes,
        page_check_seconds,
        page_check_source: check.source,
        aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
        pmd_shareable_bytes: region.pmd_shareable_bytes(),
        vm_pte_bytes,
    };
    let line = serde_json::to_string(&report)?;
    out.exact(&line)?;
    out.flush()?;
    region.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(ExitCode::SUCCESS)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the bench.
pub fn run(roots: &Roots, a: &Args, out: &mut Out) -> anyhow::Result<ExitCode> {
    let page = a.page_size;
    let ps = page
        .bytes()
        .context("--page-size takes an explicit size (4k, 2m, 1g)")?;
    let probe = Probe::new(roots.clone());
    let host = probe.host();
    let mut reservation = PoolTopUp::new(&probe);
    if ps > 4096 && !a.no_reserve {
        reservation.ensure(&host, ps, a.size.div_ceil(ps))?;
    }
    let name = format!("bench-attach-{}", std::process::id());
    let (region, _on_interrupt) = bench_region(&name, a.size, a.backend, page)?;
    let exe = std::env::current_exe()?;
    let steps = crate::progress::steps("bench attach", a.runs.max(1) as u64);
    let _finish = steps.finish_on_drop();
    let runs = (|| -> anyhow::Result<Vec<ChildSample>> {
        let mut runs = Vec::new();
        for i in 0..a.runs.max(1) {
            steps.begin(&format!("attacher {}", i + 1));
            let o = Command::new(&exe)
                .args(["bench", "attach-time-child", &name, a.backend.as_str()])
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("spawning attacher {i}"))?;
            if !o.status.success() {
                bail!(
                    "attacher {i} failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                );
            }
            let line = String::from_utf8_lossy(&o.stdout);
            runs.push(
                serde_json::from_str(line.trim())
                    .with_context(|| format!("attacher {i} said {line:?}"))?,
            );
        }
        Ok(runs)
    })();
    let destroyed = region.destroy().map_err(|e| anyhow::anyhow!("{e}"));
    drop(reservation);
    let runs = runs?;
    destroyed?;
    let ms = |f: fn(&ChildSample) -> f64| median(runs.iter().map(|r| f(r) * 1000.0).collect());
    let last = runs.last().expect("at least one run").clone();
    let mut pte: Vec<u64> = runs.iter().filter_map(|r| r.vm_pte_bytes).collect();
    pte.sort_unstable();
    let report = Report {
        size_bytes: a.size,
        page_size_bytes: ps,
        backend: a.backend,
        attach_ms: ms(|r| r.attach_seconds),
        touch_ms: ms(|r| r.touch_seconds),
        verify_ms: ms(|r| r.verify_seconds),
        page_check_ms: ms(|r| r.page_check_seconds),
        page_check_source: last.page_check_source,
        ready_ms: ms(|r| r.attach_seconds + r.touch_seconds),
        ready_verified_ms: ms(|r| r.attach_seconds + r.touch_seconds + r.verify_seconds),
        ready_page_checked_ms: ms(|r| r.attach_seconds + r.touch_seconds + r.page_check_seconds),
        pmd_shareable_bytes: last.pmd_shareable_bytes,
        aligned_for_pmd_sharing: last.aligned_for_pmd_sharing,
        vm_pte_bytes: pte.get(pte.len() / 2).copied(),
        runs,
    };
    if a.json {
        out.json_doc(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    out.line(format!(
        "a new process attaching a {} {} region on {} pages and mapping every page (median of {} processes)",
        format_bytes(report.size_bytes),
        report.backend,
        page_size_short(report.page_size_bytes),
        report.runs.len()
    ))?;
    let mut t = Table::new(&[
        ">attach ms",
        ">touch ms",
        ">ready ms",
        ">verify ms",
        ">ready+verify ms",
        ">page check ms",
        ">ready+check ms",
        ">shared page tables",
        ">VmPTE",
    ]);
    t.row(vec![
        format!("{:.3}", report.attach_ms),
        format!("{:.3}", report.touch_ms),
        format!("{:.3}", report.ready_ms),
        format!("{:.3}", report.verify_ms),
        format!("{:.3}", report.ready_verified_ms),
        format!("{:.3}", report.page_check_ms),
        format!("{:.3}", report.ready_page_checked_ms),
        format_bytes(report.pmd_shareable_bytes),
        report
            .vm_pte_bytes
            .map(format_bytes)
            .unwrap_or_else(|| "-".into()),
    ]);
    t.render(out, "")?;
    out.line("attach = find, check the header, map; touch = map every page (one read fault per GiB where page tables are shared, MADV_POPULATE_READ elsewhere); verify = read /proc/self/smaps for the region")?;
    out.line(format!(
        "page check = the page size alone ({}), residency not read",
        match report.page_check_source {
            hugeshm_region::PageSizeSource::ProcmapQuery => "PROCMAP_QUERY: no page-table walk",
            _ => "from smaps: not hugetlb, or no PROCMAP_QUERY before Linux 6.11",
        }
    ))?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
