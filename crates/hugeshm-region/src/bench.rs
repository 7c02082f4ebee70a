//! Benchmark building blocks for `hugeshm bench prefault`: one
//! create + pre-fault + destroy cycle, and the memset baseline
//! ([`memset_baseline`](crate::memset_baseline)).
//!
//! Timing is the caller's business beyond one cycle: run a warm-up cycle
//! first (first touch of guest memory in a VM is far slower), and report
//! ratios measured in the same run.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::error::RegionError;
use crate::region::RegionBuilder;
use crate::types::{Backend, PageSize, Policy, PrefaultMethod};

/// One create + pre-fault + destroy cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PrefaultSample {
    /// Backend.
    pub backend: Backend,
    /// Page size used.
    pub page_size_bytes: u64,
    /// Page size `/proc/self/smaps` showed.
    pub verified_page_size_bytes: u64,
    /// Region size.
    pub size_bytes: u64,
    /// Threads used.
    pub threads: usize,
    /// Method used.
    pub method: PrefaultMethod,
    /// Creation up to the mapped region (for `posix`: includes `fallocate`,
    /// where tmpfs zeroes its pages).
    pub setup_seconds: f64,
    /// The pre-fault.
    pub prefault_seconds: f64,
    /// `size / prefault_seconds`, decimal GB/s.
    pub prefault_gbps: f64,
    /// `setup_seconds + prefault_seconds`.
    pub ready_seconds: f64,
    /// `size / ready_seconds`, decimal GB/s: the figure to compare across
    /// backends.
    pub ready_gbps: f64,
    /// Unmapping and removing (freeing the pages).
    pub destroy_seconds: f64,
}

/// Creates an anonymous region of `size_bytes` on `page_size` pages with
/// policy `only`, pre-faults it with `threads` threads, destroys it, and
/// returns the timings. The pool must hold the region (reserve it first).
pub fn bench_prefault(
    size_bytes: u64,
    backend: Backend,
    page_size: PageSize,
    threads: usize,
) -> Result<PrefaultSample, RegionError> {
    let (region, report) = RegionBuilder::new(size_bytes)
        .backend(backend)
        .page_size(page_size)
        .policy(Policy::Only)
        .prefault_threads(threads)
        .create()?;
    let t = Instant::now();
    region.destroy()?;
    let destroy_seconds = t.elapsed().as_secs_f64();
    Ok(PrefaultSample {
        backend,
        page_size_bytes: report.page_size_bytes,
        verified_page_size_bytes: report.verified_page_size_bytes,
        size_bytes: report.size_bytes,
        threads: report.prefault_threads,
        method: report.prefault_method,
        setup_seconds: report.setup_seconds,
        prefault_seconds: report.prefault_seconds,
        prefault_gbps: report.prefault_gbps,
        ready_seconds: report.ready_seconds,
        ready_gbps: crate::prefault::gbps(report.size_bytes, report.ready_seconds),
        destroy_seconds,
    })
}
