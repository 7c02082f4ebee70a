//! Benchmark building blocks for `hugeshm bench prefault`: one
//! create + pre-fault + destroy cycle, and the memset baseline
//! ([`memset_baseline`](crate::memset_baseline)); for `hugeshm bench
//! pagetables`: attach and touch a region in one process
//! ([`attach_and_touch`]); for `hugeshm bench numa`: write and read
//! bandwidth of a region placed on chosen nodes ([`bench_numa`]).
//!
//! Timing is the caller's business beyond one cycle: run a warm-up cycle
//! first (first touch of guest memory in a VM is far slower), and report
//! ratios measured in the same run.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::create::RegionBuilder;
use crate::error::RegionError;
use crate::model::{Backend, PageSize, Placement, Policy, PrefaultMethod};

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
    /// Creation up to the mapped region (for `posix` on one thread:
    /// includes `fallocate`, where tmpfs allocates its pages; it zeroes
    /// them at their first fault).
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

/// How the peers of hugeshm pre-fault a shared region, the methods
/// `hugeshm bench prefault` compares with (each on a `MAP_SHARED |
/// MAP_ANONYMOUS` mapping of the same size and page size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PeerMethod {
    /// One `mmap` with `MAP_POPULATE`: the kernel faults every page on the
    /// calling thread (DPDK, Seastar).
    MapPopulate,
    /// One thread writes one byte per page (PostgreSQL faults its shared
    /// memory in on demand, in effect one backend at a time).
    FirstTouch,
    /// N threads, each writing one byte per page of its own contiguous
    /// range (the JVM's `-XX:+AlwaysPreTouch`).
    TouchLoop,
}

impl PeerMethod {
    /// Every method, in the order the bench prints them.
    pub const ALL: [PeerMethod; 3] = [
        PeerMethod::MapPopulate,
        PeerMethod::FirstTouch,
        PeerMethod::TouchLoop,
    ];

    /// The name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerMethod::MapPopulate => "map-populate",
            PeerMethod::FirstTouch => "first-touch",
            PeerMethod::TouchLoop => "touch-loop",
        }
    }

    /// Who does it this way.
    pub fn used_by(self) -> &'static str {
        match self {
            PeerMethod::MapPopulate => "DPDK, Seastar",
            PeerMethod::FirstTouch => "PostgreSQL (on demand)",
            PeerMethod::TouchLoop => "JVM AlwaysPreTouch",
        }
    }

    /// Threads the method uses when asked for `threads`.
    pub fn threads(self, threads: usize) -> usize {
        match self {
            PeerMethod::MapPopulate | PeerMethod::FirstTouch => 1,
            PeerMethod::TouchLoop => threads.max(1),
        }
    }
}

/// One peer method run over a fresh shared anonymous mapping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeerSample {
    /// The method.
    pub method: PeerMethod,
    /// Page size.
    pub page_size_bytes: u64,
    /// Bytes mapped and faulted.
    pub size_bytes: u64,
    /// Threads that faulted.
    pub threads: usize,
    /// From the `mmap` call to the last page faulted (unmapping not
    /// included): comparable with a region's ready time.
    pub seconds: f64,
    /// `size / seconds`, decimal GB/s.
    pub gbps: f64,
}

/// Maps `size_bytes` of shared anonymous memory on `page_size_bytes`
/// pages (4096: base pages, else `MAP_HUGETLB` of that size: the pool
/// must hold them) and faults every page in as `method` does, with
/// `threads` threads for [`PeerMethod::TouchLoop`]; unmaps it after.
pub fn bench_peer(
    size_bytes: u64,
    page_size_bytes: u64,
    method: PeerMethod,
    threads: usize,
) -> Result<PeerSample, RegionError> {
    let len = usize::try_from(size_bytes).map_err(|_| RegionError::InvalidSize {
        requested_bytes: size_bytes,
        reason: "does not fit in usize".to_owned(),
        fix: None,
    })?;
    let huge = (page_size_bytes > hugeshm_sys::base_page_size() as u64).then_some(page_size_bytes);
    let threads = method.threads(threads);
    let t0 = Instant::now();
    let mut map = match method {
        PeerMethod::MapPopulate => hugeshm_sys::MapOptions::new(len)
            .shared()
            .populate()
            .huge(huge)
            .map_anon()?,
        PeerMethod::FirstTouch | PeerMethod::TouchLoop => hugeshm_sys::MapOptions::new(len)
            .shared()
            .huge(huge)
            .map_anon()?,
    };
    let page = map.page_size();
    if method != PeerMethod::MapPopulate {
        let pages = map.len() / page;
        let ranges: Vec<(usize, usize)> = (0..threads)
            .map(|t| (pages * t / threads * page, pages * (t + 1) / threads * page))
            .filter(|(a, b)| b > a)
            .map(|(a, b)| (a, b - a))
            .collect();
        let pieces = map.pieces_mut(&ranges)?;
        std::thread::scope(|scope| {
            for mut piece in pieces {
                scope.spawn(move || piece.touch_pages(page, 1));
            }
        });
    }
    let seconds = t0.elapsed().as_secs_f64();
    let size = map.len() as u64;
    map.release()?;
    Ok(PeerSample {
        method,
        page_size_bytes: page as u64,
        size_bytes: size,
        threads,
        seconds,
        gbps: crate::prefault::gbps(size, seconds),
    })
}

/// How a process pays for a region's page tables in
/// [`attach_and_touch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Touch {
    /// Attach only: no page is mapped yet.
    None,
    /// Read-fault every page ([`Region::populate_read`](crate::Region::populate_read)).
    Read,
    /// Write-fault every page, contents kept ([`Region::touch_all`](crate::Region::touch_all)).
    Write,
}

/// What one attached process measured in [`attach_and_touch`]: the
/// building block of `hugeshm bench pagetables`, run in each of N
/// processes while the caller reads `PageTables` from `/proc/meminfo`
/// before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttachSample {
    /// This process.
    pub pid: u32,
    /// Region size (header included).
    pub size_bytes: u64,
    /// Page size.
    pub page_size_bytes: u64,
    /// Address of the mapping.
    pub address: u64,
    /// Whether the mapping can share page tables with other processes.
    pub aligned_for_pmd_sharing: bool,
    /// Bytes whose page tables can be shared.
    pub pmd_shareable_bytes: u64,
    /// Seconds to find, check and map the region.
    pub attach_seconds: f64,
    /// Seconds to fault every page into this process's page tables.
    pub touch_seconds: f64,
    /// This process's own page-table bytes after the touch (`VmPTE` in
    /// `/proc/self/status`). The kernel charges a shared PMD page to every
    /// process that uses it, so this does not show sharing: the host-wide
    /// `PageTables` does.
    pub vm_pte_bytes: Option<u64>,
}

/// Attaches a region (as `locator` says) and faults every page in as
/// `touch` says, timing both. Keep the returned region alive while
/// measuring; close it after.
///
/// ```no_run
/// use hugeshm_region::bench::{attach_and_touch, Touch};
/// use hugeshm_region::{Backend, Locator};
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// let (region, sample) = attach_and_touch(&Locator::new("sga", Backend::Sysv), Touch::Read)?;
/// println!("attach {:.6} s, touch {:.3} s, shared: {}", sample.attach_seconds,
///          sample.touch_seconds, sample.aligned_for_pmd_sharing);
/// region.close()?;
/// # Ok(())
/// # }
/// ```
pub fn attach_and_touch(
    locator: &crate::Locator,
    touch: Touch,
) -> Result<(crate::Region, AttachSample), RegionError> {
    let t0 = Instant::now();
    let mut region = locator.attach()?;
    let attach_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    match touch {
        Touch::None => {}
        Touch::Read => region.populate_read()?,
        Touch::Write => region.touch_all()?,
    }
    let touch_seconds = t1.elapsed().as_secs_f64();
    let vm_pte_bytes = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmPTE:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024);
    let sample = AttachSample {
        pid: std::process::id(),
        size_bytes: region.len() as u64,
        page_size_bytes: region.page_size(),
        address: region.addr() as u64,
        aligned_for_pmd_sharing: region.aligned_for_pmd_sharing(),
        pmd_shareable_bytes: region.pmd_shareable_bytes(),
        attach_seconds,
        touch_seconds,
        vm_pte_bytes,
    };
    Ok((region, sample))
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
///
/// ```no_run
/// use hugeshm_region::bench::bench_numa;
/// use hugeshm_region::{PageSize, Placement};
/// # fn main() -> Result<(), hugeshm_region::RegionError> {
/// hugeshm_sys::set_affinity(&[0]).expect("pin");
/// let s = bench_numa(64 << 20, PageSize::HUGE_2M, Placement::Bind(vec![1]))?;
/// println!("write {:.1} GB/s, read {:.1} GB/s, on {:?}", s.write_gbps, s.read_gbps, s.node_bytes);
/// # Ok(())
/// # }
/// ```
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
        write_gbps: crate::prefault::gbps(bytes, write_seconds),
        read_seconds,
        read_gbps: crate::prefault::gbps(bytes, read_seconds),
    })
}
