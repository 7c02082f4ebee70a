//! `hugeshm bench numa`: write and read bandwidth of a region placed on the
//! node whose CPUs run the bench (local), on another node (remote: the
//! other socket, or a CPU-less CXL node) and interleaved over every memory
//! node, per page size. Each row carries the bytes per node that
//! `/proc/self/numa_maps` showed, so the table proves where the pages were.

use crate::common::{gbps, PoolTopUp, Skipped};
use crate::{Steps, Usage};
use anyhow::Context;
use hugeshm_probe::{HostSnapshot, Probe};
use hugeshm_region::{Backend, PageSize, Placement, Policy, RegionBuilder, RegionError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

/// What `bench numa` measures.
#[derive(Debug, Clone)]
pub struct Options {
    /// Region size.
    pub size: u64,
    /// Page sizes to compare.
    pub page_size: Vec<PageSize>,
    /// Runs per placement and page size, each on a fresh region (best and
    /// median are reported).
    pub runs: usize,
    /// The node whose CPUs run the bench (default: the first node with CPUs).
    pub cpu_node: Option<u32>,
    /// Do not raise the nodes' huge page pools for the run.
    pub no_reserve: bool,
}

/// One placement of one page size: where the pages were and how fast.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub page_size_bytes: u64,
    /// `local`, `remote` or `interleave`.
    pub placement: &'static str,
    /// The policy it stands for (`bind=0`, `interleave=0,1`).
    pub policy: String,
    /// Bytes per node, from numa_maps (first run; every run is checked to
    /// match).
    pub node_bytes: BTreeMap<String, u64>,
    pub write_gbps_best: f64,
    pub write_gbps_median: f64,
    pub read_gbps_best: f64,
    pub read_gbps_median: f64,
    pub write_gbps_runs: Vec<f64>,
    pub read_gbps_runs: Vec<f64>,
}

/// Ratios of best figures within one page size, all from this run.
#[derive(Debug, serde::Serialize)]
pub struct Ratio {
    pub page_size_bytes: u64,
    pub remote_vs_local_write: Option<f64>,
    pub remote_vs_local_read: Option<f64>,
    pub interleave_vs_local_write: Option<f64>,
    pub interleave_vs_local_read: Option<f64>,
}

#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// True where there is no memory node besides the CPU node: nothing to
    /// compare, no rows.
    pub single_node: bool,
    /// Why nothing was measured, where nothing was.
    pub message: Option<String>,
    pub size_bytes: u64,
    pub runs: usize,
    pub cpu_node: Option<u32>,
    pub cpus: Vec<u32>,
    pub remote_node: Option<u32>,
    pub memory_nodes: Vec<u32>,
    pub results: Vec<Row>,
    pub ratios: Vec<Ratio>,
    pub skipped: Vec<Skipped>,
}

/// The nodes of a run: who computes, where local and remote memory are.
struct Nodes {
    cpu: u32,
    cpus: Vec<u32>,
    remote: Option<u32>,
    memory: Vec<u32>,
}

/// Picks the CPU node (asked, else the first with CPUs), the memory nodes
/// (those with memory: CPU-less ones count, the CXL case) and the remote
/// node: the nearest other memory node by the CPU node's distances.
fn pick_nodes(host: &HostSnapshot, asked: Option<u32>) -> anyhow::Result<Option<Nodes>> {
    if host.nodes.is_empty() {
        return Ok(None);
    }
    let has_memory = |n: &hugeshm_probe::NodeInfo| {
        n.meminfo
            .as_ref()
            .and_then(|m| m.mem_total_bytes)
            .is_some_and(|b| b > 0)
    };
    let cpu = match asked {
        Some(id) => {
            let n = host
                .nodes
                .iter()
                .find(|n| n.node == id)
                .ok_or_else(|| Usage(format!("--cpu-node {id}: there is no node {id}")))?;
            anyhow::ensure!(
                !n.cpus.is_empty(),
                Usage(format!("--cpu-node {id}: node {id} has no CPUs"))
            );
            n
        }
        None => host
            .nodes
            .iter()
            .find(|n| !n.cpus.is_empty())
            .context("no NUMA node lists any CPU")?,
    };
    anyhow::ensure!(
        has_memory(cpu),
        Usage(format!(
            "node {} has no memory, so nothing is local to its CPUs: pick another --cpu-node",
            cpu.node
        ))
    );
    let memory: Vec<u32> = host
        .nodes
        .iter()
        .filter(|n| has_memory(n))
        .map(|n| n.node)
        .collect();
    let distance = |to: u32| {
        host.nodes
            .iter()
            .position(|n| n.node == to)
            .and_then(|i| cpu.distance.get(i).copied())
            .unwrap_or(u32::MAX)
    };
    let remote = memory
        .iter()
        .copied()
        .filter(|&n| n != cpu.node)
        .min_by_key(|&n| (distance(n), n));
    Ok(Some(Nodes {
        cpu: cpu.node,
        cpus: cpu.cpus.clone(),
        remote,
        memory,
    }))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// The rows of one page size: every placement, `runs` fresh regions each.
fn measure_size(
    a: &Options,
    page: PageSize,
    placements: &[(&'static str, Placement)],
    steps: &Steps,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, placement) in placements {
        let mut samples: Vec<NumaSample> = Vec::new();
        for r in 0..a.runs.max(1) {
            steps.begin(&format!("{page} {label}, run {}", r + 1));
            let s = bench_numa(a.size, page, placement.clone())
                .map_err(|e| anyhow::anyhow!("{label} ({placement}): {e}"))?;
            if let Some(first) = samples.first() {
                anyhow::ensure!(
                    first.node_bytes == s.node_bytes,
                    "{label}: the pages landed differently from run to run: {:?} then {:?}",
                    first.node_bytes,
                    s.node_bytes
                );
            }
            samples.push(s);
        }
        let w: Vec<f64> = samples.iter().map(|s| s.write_gbps).collect();
        let r: Vec<f64> = samples.iter().map(|s| s.read_gbps).collect();
        rows.push(Row {
            page_size_bytes: samples[0].page_size_bytes,
            placement: label,
            policy: placement.to_string(),
            node_bytes: samples[0].node_bytes.clone(),
            write_gbps_best: best(&w),
            write_gbps_median: median(&w),
            read_gbps_best: best(&r),
            read_gbps_median: median(&r),
            write_gbps_runs: w,
            read_gbps_runs: r,
        });
    }
    Ok(rows)
}

fn ratios(rows: &[Row], sizes: &[u64]) -> Vec<Ratio> {
    let find = |ps: u64, label: &str| {
        rows.iter()
            .find(|r| r.page_size_bytes == ps && r.placement == label)
    };
    let over = |x: Option<&Row>, base: Option<&Row>, f: fn(&Row) -> f64| {
        x.zip(base)
            .filter(|(_, b)| f(b) > 0.0)
            .map(|(x, b)| f(x) / f(b))
    };
    sizes
        .iter()
        .filter(|&&ps| find(ps, "local").is_some())
        .map(|&ps| {
            let (l, r, i) = (
                find(ps, "local"),
                find(ps, "remote"),
                find(ps, "interleave"),
            );
            Ratio {
                page_size_bytes: ps,
                remote_vs_local_write: over(r, l, |x| x.write_gbps_best),
                remote_vs_local_read: over(r, l, |x| x.read_gbps_best),
                interleave_vs_local_write: over(i, l, |x| x.write_gbps_best),
                interleave_vs_local_read: over(i, l, |x| x.read_gbps_best),
            }
        })
        .collect()
}

/// The page sizes of `a` this host has pools of, and those it has not.
fn page_sizes(host: &HostSnapshot, a: &Options) -> anyhow::Result<(Vec<PageSize>, Vec<Skipped>)> {
    let mut pages = Vec::new();
    let mut skipped = Vec::new();
    for &page in &a.page_size {
        let bytes = page
            .bytes()
            .context("--page-size takes explicit sizes (4k, 2m, 1g)")?;
        if bytes > 4096 && host.pool(bytes).is_none() {
            skipped.push(Skipped::no_such_pages(host, bytes, a.size.div_ceil(bytes)));
            continue;
        }
        pages.push(if bytes == 4096 { PageSize::Base } else { page });
    }
    Ok((pages, skipped))
}

/// The placements compared: local, remote, interleave.
const PLACEMENTS: u64 = 3;

/// How many steps [`measure`] takes on this host: a run per page size,
/// placement and run (none on one memory node).
pub fn planned_steps(host: &HostSnapshot, a: &Options) -> u64 {
    let two_nodes = matches!(pick_nodes(host, a.cpu_node), Ok(Some(n)) if n.remote.is_some());
    let pages = page_sizes(host, a)
        .map(|(p, _)| p.len() as u64)
        .unwrap_or(0);
    if two_nodes {
        pages * PLACEMENTS * a.runs.max(1) as u64
    } else {
        0
    }
}

/// Measures every placement and page size (or says why it cannot: one
/// node), each run a step of `steps` ([`planned_steps`] of them).
pub fn measure(probe: &Probe, a: &Options, steps: &Steps) -> anyhow::Result<Report> {
    let host = probe.host();
    let mut report = Report {
        single_node: false,
        message: None,
        size_bytes: a.size,
        runs: a.runs,
        cpu_node: None,
        cpus: Vec::new(),
        remote_node: None,
        memory_nodes: Vec::new(),
        results: Vec::new(),
        ratios: Vec::new(),
        skipped: Vec::new(),
    };
    let nodes = pick_nodes(&host, a.cpu_node)?;
    let remote = nodes.as_ref().and_then(|n| n.remote);
    if let Some(n) = &nodes {
        report.cpu_node = Some(n.cpu);
        report.cpus = n.cpus.clone();
        report.memory_nodes = n.memory.clone();
        report.remote_node = n.remote;
    }
    let (Some(nodes), Some(remote)) = (nodes, remote) else {
        report.single_node = true;
        report.message = Some(
            "this host has one NUMA node with memory, so local and remote memory cannot be \
             compared; run the bench in the 2-node QEMU guest (scripts/guest/, cargo test -p \
             hugeshm --test guest guest_bench_numa:: -- --nocapture) or on a multi-socket or \
             CXL host"
                .to_owned(),
        );
        return Ok(report);
    };

    let (pages, skipped) = page_sizes(&host, a)?;
    report.skipped = skipped;
    let placements = [
        ("local", Placement::Bind(vec![nodes.cpu])),
        ("remote", Placement::Bind(vec![remote])),
        ("interleave", Placement::Interleave(nodes.memory.clone())),
    ];

    // The CPUs of the CPU node run everything from here (pre-fault threads
    // inherit the set); the caller's set is put back afterwards.
    let saved = hugeshm_sys::affinity()?;
    hugeshm_sys::set_affinity(&nodes.cpus)
        .with_context(|| format!("pinning the bench to the CPUs of node {}", nodes.cpu))?;
    for &page in &pages {
        // Pools (root only), node by node, for this page size only while it
        // is measured: the CPU node and the remote node hold the whole
        // region in turn, the other memory nodes their share of the
        // interleave. One page size whose pages cannot be had, or that
        // fails, does not end the bench: it says why.
        let ps = page.bytes().unwrap_or(4096);
        let whole = a.size.div_ceil(ps);
        let share = whole.div_ceil(nodes.memory.len() as u64);
        let _part = steps.part(PLACEMENTS * a.runs.max(1) as u64);
        let mut reservation = PoolTopUp::new(probe);
        let result = (|| {
            if ps > 4096 && !a.no_reserve {
                for &n in &nodes.memory {
                    let need = if n == nodes.cpu || n == remote {
                        whole
                    } else {
                        share
                    };
                    reservation.ensure_on_node(&host, ps, n, need)?;
                }
            }
            measure_size(a, page, &placements, steps)
        })();
        drop(reservation);
        match result {
            Ok(mut r) => report.results.append(&mut r),
            Err(e) => report.skipped.push(Skipped::failed(ps, whole, &e)),
        }
    }
    hugeshm_sys::set_affinity(&saved)?;
    let sizes: Vec<u64> = pages.iter().map(|p| p.bytes().unwrap_or(4096)).collect();
    report.ratios = ratios(&report.results, &sizes);
    Ok(report)
}

/// One create + measure + destroy cycle of [`bench_numa`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NumaSample {
    /// Page size of the region.
    pub page_size_bytes: u64,
    /// The placement it was created with.
    pub placement: Placement,
    /// Bytes on each node after the pre-fault (`/proc/self/numa_maps`,
    /// node id as a string): where the pages really are.
    pub node_bytes: std::collections::BTreeMap<String, u64>,
    /// Bytes written and read per pass (the region's data).
    pub bytes: u64,
    /// One timed pass writing every byte (memset).
    pub write_seconds: f64,
    /// `bytes / write_seconds`, decimal GB/s.
    pub write_gbps: f64,
    /// One timed pass reading every byte (summing 8-byte words).
    pub read_seconds: f64,
    /// `bytes / read_seconds`, decimal GB/s.
    pub read_gbps: f64,
}

/// Creates a shared anonymous region of `size_bytes` on `page_size` pages
/// with policy `only` and `placement` (a page off a bound node is an
/// error), pre-faulted; writes and reads it once untimed (steady state,
/// not first touch), then times one write pass and one read pass on the
/// calling thread, destroys it, and returns the figures. The calling
/// thread's CPU affinity decides which node's CPUs do the work; huge pages
/// must be free on the nodes the placement names.
pub fn bench_numa(
    size_bytes: u64,
    page_size: PageSize,
    placement: Placement,
) -> Result<NumaSample, RegionError> {
    let (mut region, report) = RegionBuilder::new(size_bytes)
        .backend(Backend::Anon)
        .page_size(page_size)
        .policy(Policy::Only)
        .numa(placement.clone())
        .create()?;
    // Untimed pass: TLB and caches as in steady use.
    region.fill(0x11);
    std::hint::black_box(region.sum_words());
    let t = Instant::now();
    region.fill(0x5a);
    let write_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    std::hint::black_box(region.sum_words());
    let read_seconds = t.elapsed().as_secs_f64();
    let bytes = region.data_len() as u64;
    region.destroy()?;
    Ok(NumaSample {
        page_size_bytes: report.page_size_bytes,
        placement,
        node_bytes: report.node_bytes,
        bytes,
        write_seconds,
        write_gbps: gbps(bytes, write_seconds),
        read_seconds,
        read_gbps: gbps(bytes, read_seconds),
    })
}
