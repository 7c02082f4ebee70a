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

use crate::common::{bench_region, PoolTopUp};
use crate::Steps;
use anyhow::{bail, Context};
use hugeshm_probe::Probe;
use hugeshm_region::{Backend, Locator, PageSize};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What one run measures (the CLI's `bench attach` options).
#[derive(Debug, Clone)]
pub struct Options {
    /// Region size.
    pub size: u64,
    /// Page size (an explicit one: 4k, 2m, 1g).
    pub page_size: PageSize,
    /// Backend of the region (one the attaching processes find by name).
    pub backend: Backend,
    /// New processes that attach, one after another (at least one runs).
    pub runs: u32,
    /// Raise the huge page pools for the run (root).
    pub reserve: bool,
}

/// What one attaching process measured (its stdout, one JSON line).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ChildSample {
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

/// What `bench attach` measured (`--json` prints exactly this).
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// Region size.
    pub size_bytes: u64,
    /// Page size.
    pub page_size_bytes: u64,
    /// Backend.
    pub backend: Backend,
    /// Each attaching process's times, in order.
    pub runs: Vec<ChildSample>,
    /// Medians over the runs, in milliseconds.
    pub attach_ms: f64,
    /// Mapping every page.
    pub touch_ms: f64,
    /// Reading `/proc/self/smaps` for the region.
    pub verify_ms: f64,
    /// The cheap page-size check (`Region::verify_page_size`).
    pub page_check_ms: f64,
    /// Where it read the page size: `procmap_query` or `smaps`.
    pub page_check_source: hugeshm_region::PageSizeSource,
    /// attach + touch: a process ready to use the region, unverified.
    pub ready_ms: f64,
    /// attach + touch + verification (what `hugeshm attach` does).
    pub ready_verified_ms: f64,
    /// attach + touch + the cheap page-size check.
    pub ready_page_checked_ms: f64,
    /// Bytes whose page tables the attacher shares.
    pub pmd_shareable_bytes: u64,
    /// Whether the region is aligned for page-table sharing.
    pub aligned_for_pmd_sharing: bool,
    /// The attacher's own page-table bytes (VmPTE; the kernel charges a
    /// shared PMD page to every process using it), median.
    pub vm_pte_bytes: Option<u64>,
}

/// The hidden child (`hugeshm bench attach-time-child NAME BACKEND`, which
/// [`measure`] starts): attach, touch, verify, close; the times as the one
/// JSON line the child writes on its stdout.
pub fn child_line(name: &str, backend: Backend) -> anyhow::Result<String> {
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
    region.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(serde_json::to_string(&report)?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Creates and pre-faults the region (the pool raised for it while it
/// runs), starts `o.runs` attaching processes one after another (each a
/// step of `steps`), removes the region and gives the pool back, whatever
/// happens, and returns the medians.
pub fn measure(probe: &Probe, o: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let page = o.page_size;
    let ps = page
        .bytes()
        .context("--page-size takes an explicit size (4k, 2m, 1g)")?;
    let host = probe.host();
    let mut reservation = PoolTopUp::new(probe);
    if ps > 4096 && o.reserve {
        reservation.ensure(&host, ps, o.size.div_ceil(ps))?;
    }
    let name = format!("bench-attach-{}", std::process::id());
    let (region, _on_interrupt) = bench_region(&name, o.size, o.backend, page)?;
    let exe = std::env::current_exe()?;
    let runs = (|| -> anyhow::Result<Vec<ChildSample>> {
        let mut runs = Vec::new();
        for i in 0..o.runs.max(1) {
            steps.begin(&format!("attacher {}", i + 1));
            let out = Command::new(&exe)
                .args(["bench", "attach-time-child", &name, o.backend.as_str()])
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("spawning attacher {i}"))?;
            if !out.status.success() {
                bail!(
                    "attacher {i} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            let line = String::from_utf8_lossy(&out.stdout);
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
    Ok(Report {
        size_bytes: o.size,
        page_size_bytes: ps,
        backend: o.backend,
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
    })
}
