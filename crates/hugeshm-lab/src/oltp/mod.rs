//! `bench oltp`: worker processes over the shared buffer cache
//! (hugeshm-cache), by page size and backend: transactions per second,
//! latency, hit ratio, page tables per worker, start-up time, dTLB misses
//! per transaction; and the same loop straight on the region ("raw"), so
//! the cache's own cost shows.
//!
//! [`measure()`] builds the [`Report`] (what `hugeshm bench oltp` prints
//! and `hugeshm lab` compares). Workers are the program re-executed
//! (`bench oltp-worker`, attaching the region by name and calling
//! [`serve_attached`]) or, for `anon` regions, forked children; both
//! answer one JSON line per run on a pipe. The loop they run, and
//! `bench dmbc` too, is `workload.rs`.
//!
//! - `mod.rs`: the [`Options`] a report keeps;
//! - `measure.rs`: [`measure()`], row by row, and the ratios between rows;
//! - `worker.rs`: the workers, their protocol, one run of all of them at once;
//! - `report.rs`: the [`Report`] and its rows;
//! - `workload.rs`: the loop the workers run.

pub(crate) mod workload;

mod measure;
mod report;
mod worker;

pub use measure::{measure, planned_steps};
#[cfg(any(test, feature = "samples"))]
pub use report::sample;
pub use report::{ModeResult, Report, Row, RunSummary};
pub use worker::{serve_attached, SAMPLE_EVERY};
pub use workload::Dist;

use hugeshm_region::Backend;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a run measures: the options of `bench oltp`, kept in its report.
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
