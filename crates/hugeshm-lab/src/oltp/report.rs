//! What `bench oltp` reports: a [`Report`] of [`Row`]s (a page size and
//! backend each), each with the cache's and the raw loop's [`ModeResult`]
//! over their [`RunSummary`]s.

use hugeshm_cache::Stats;
use hugeshm_region::Backend;
use serde::{Deserialize, Serialize};

use super::Options;

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

/// Reports made by hand, for the printers' and the ratios' unit tests
/// (the CLI's tests have them through the `samples` feature).
#[cfg(any(test, feature = "samples"))]
pub mod sample {
    use super::*;
    use crate::oltp::workload::Dist;

    /// Two workers, 2 s runs, three of them, 4k and 2m, sysv and posix.
    pub fn options() -> Options {
        Options {
            cache_size_bytes: 64 << 20,
            data_size_bytes: 256 << 20,
            workers: 2,
            duration_seconds: 2.0,
            runs: 3,
            page_sizes: vec![4096, 2 << 20],
            backends: vec![Backend::Sysv, Backend::Posix],
            dist: Dist::Uniform,
            write_pct: 10,
            block_size: 8192,
            data_dir: "/var/tmp".into(),
            raw: true,
            reserve: true,
        }
    }

    /// A run of `tps` transactions a second, `per_cpu` a CPU-second.
    pub fn summary(tps: f64, per_cpu: f64) -> RunSummary {
        RunSummary {
            tps,
            transactions: (tps * 2.0) as u64,
            seconds: 2.0,
            tx_per_cpu_second: per_cpu,
            hit_ratio: Some(0.25),
            p50_ns: Some(800),
            p99_ns: Some(12_500),
            stats: Stats::default(),
            dtlb_misses_per_tx: Some(1.5),
        }
    }

    /// Timed runs of these tps (per CPU-second: half of it), best first.
    pub fn mode(tps: &[f64]) -> ModeResult {
        ModeResult {
            warmup: summary(tps[0] / 2.0, tps[0] / 4.0),
            runs: tps.iter().map(|&t| summary(t, t / 2.0)).collect(),
            best_tps: tps[0],
            median_tps: tps[tps.len() / 2],
            best_tx_per_cpu_second: tps[0] / 2.0,
            p50_ns: Some(800),
            p99_ns: Some(12_500),
            hit_ratio: Some(0.25),
            dtlb_misses_per_tx: Some(1.5),
        }
    }

    /// A measured row: the cache at `tps`, the raw loop at twice that.
    pub fn row(page_size_bytes: u64, backend: Backend, tps: f64) -> Row {
        let raw: Vec<f64> = [tps, tps * 0.9, tps * 0.8]
            .iter()
            .map(|t| t * 2.0)
            .collect();
        Row {
            page_size_bytes,
            backend,
            not_measured: None,
            fix: None,
            region_bytes: 66 << 20,
            region_page_size_bytes: page_size_bytes,
            buffers: 8192,
            startup_seconds: 0.25,
            prewarm_seconds: 0.5,
            cache: Some(mode(&[tps, tps * 0.9, tps * 0.8])),
            raw: Some(mode(&raw)),
            cache_overhead: Some(2.0),
            cache_overhead_paired: Some(2.0),
            cache_overhead_cpu: Some(2.0),
            vs_4k: None,
            vs_4k_cpu: None,
            page_tables_bytes_per_worker: Some(8192),
            dtlb_unavailable: None,
        }
    }
}
