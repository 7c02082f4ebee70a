//! One sample of each thing `hugeshm bench prefault` (and the lab's
//! start-up reproduction, `lab/startup.rs`) measures: a region's create +
//! pre-fault + destroy cycle (`bench_prefault`), a peer's way of
//! faulting a shared mapping in (`bench_peer`), and the memset ceiling
//! ([`memset_baseline`]). Built on hugeshm-region's public API and
//! hugeshm-sys's mappings; hugeshm-region itself carries no bench code.
//!
//! Timing is the caller's business beyond one cycle: run a warm-up cycle
//! first (first touch of guest memory in a VM is far slower), and report
//! ratios measured in the same run.

use std::time::Instant;

use crate::common::gbps;
use hugeshm_probe::Probe;
use hugeshm_region::{
    available_cpus, Backend, PageSize, Policy, PrefaultMethod, RegionBuilder, RegionError,
};
use hugeshm_sys::{self as sys, Mapping, SysError};
use serde::{Deserialize, Serialize};

/// The page size backing `addr..addr + len` of this process's memory as
/// `/proc/self/smaps` shows it: the transparent huge page size when THP
/// maps every byte (`AnonHugePages`; THP mappings show a 4 kB
/// `KernelPageSize`), else the smallest `KernelPageSize`.
fn backing_page_size(addr: u64, len: u64) -> Option<u64> {
    let own = Probe::default();
    let entries = own.pid(std::process::id()).smaps().ok()?;
    let end = addr.saturating_add(len);
    let hits: Vec<_> = entries
        .iter()
        .filter(|e| e.map.start < end && e.map.end > addr)
        .collect();
    if hits.is_empty() {
        return None;
    }
    let kernel_page = hits
        .iter()
        .filter_map(|e| e.kernel_page_size_bytes)
        .min()
        .unwrap_or(4096);
    let thp: u64 = hits
        .iter()
        .map(|e| e.anon_huge_pages_bytes.unwrap_or(0))
        .sum();
    let pmd =
        std::fs::read_to_string(own.sys_path("kernel/mm/transparent_hugepage/hpage_pmd_size"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
    Some(match pmd {
        Some(pmd) if thp >= len && len > 0 => pmd,
        _ => kernel_page,
    })
}

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
pub(crate) fn bench_prefault(
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
        ready_gbps: gbps(report.size_bytes, report.ready_seconds),
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
pub(crate) struct PeerSample {
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
pub(crate) fn bench_peer(
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
        let ranges: Vec<(usize, usize)> = hugeshm_sys::even_runs(map.len() / page, threads)
            .into_iter()
            .map(|(first, count)| (first * page, count * page))
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
        gbps: gbps(size, seconds),
    })
}

/// Plain memset over already-faulted memory: the machine's write bandwidth,
/// the yardstick for pre-fault rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemsetBaseline {
    /// Bytes written per pass.
    pub size_bytes: u64,
    /// Page size backing the memory (transparent huge pages when THP
    /// allows `MADV_HUGEPAGE`, else the base size).
    pub page_size_bytes: u64,
    /// Threads writing (each its own contiguous range).
    pub threads: usize,
    /// Passes timed (the first pass after faulting is included).
    pub passes: usize,
    /// Seconds of the fastest pass.
    pub seconds: f64,
    /// Decimal GB/s of the fastest pass.
    pub gbps: f64,
    /// Seconds of the fastest pass zeroing the same memory 4 KiB at a
    /// time ([`CLEAR_CHUNK_BYTES`]), as the kernel clears a huge page when
    /// it faults it in: the ceiling of any pre-fault on a kernel that
    /// does so.
    pub clear_4k_seconds: f64,
    /// Decimal GB/s of that pass.
    pub clear_4k_gbps: f64,
}

/// The piece the kernel zeroes at a time when it faults in a huge page
/// (`folio_zero_user` calls `clear_page` for each 4 KiB subpage).
pub const CLEAR_CHUNK_BYTES: usize = 4096;

/// Times `memset` over `size_bytes` of private anonymous memory that is
/// already faulted in (faulting is not timed), with `threads` threads
/// (0 = [`available_cpus`]); the fastest of 3 passes. Each pass is
/// followed by one zeroing the same memory 4 KiB at a time, the way the
/// kernel clears a huge page ([`MemsetBaseline::clear_4k_gbps`]). The memory is
/// advised `MADV_HUGEPAGE`, so with THP `enabled=madvise` or `always` it
/// sits on transparent huge pages and the figure is write bandwidth rather
/// than TLB misses; [`MemsetBaseline::page_size_bytes`] says which.
pub fn memset_baseline(size_bytes: u64, threads: usize) -> Result<MemsetBaseline, RegionError> {
    let len = usize::try_from(size_bytes).map_err(|_| RegionError::InvalidSize {
        requested_bytes: size_bytes,
        reason: "does not fit in usize".to_owned(),
        fix: None,
    })?;
    let mut map = sys::MapOptions::new(len).map_anon()?;
    // Transparent huge pages where THP allows it (enabled=madvise or
    // always), so that the baseline measures write bandwidth, not TLB
    // misses; the page size used is reported.
    let _ = map.advise_hugepage();
    match map.populate_write() {
        Ok(()) => {}
        Err(e) if e.errno() == Some(rustix::io::Errno::INVAL.raw_os_error()) => map.touch(),
        Err(e) => return Err(e.into()),
    }
    let page = map.page_size();
    let pages = map.len() / page;
    let threads = if threads == 0 {
        available_cpus()
    } else {
        threads
    };
    let runs = hugeshm_sys::even_runs(pages, threads.clamp(1, pages.max(1)));
    let ranges: Vec<(usize, usize)> = runs
        .iter()
        .map(|&(first, count)| (first * page, count * page))
        .collect();
    // One timed pass: each thread runs `each` over its own piece.
    let timed = |map: &mut Mapping, each: &(dyn Fn(&mut sys::Piece<'_>) + Sync)| {
        let pieces = map.pieces_mut(&ranges)?;
        let t0 = Instant::now();
        std::thread::scope(|scope| {
            for mut piece in pieces {
                scope.spawn(move || each(&mut piece));
            }
        });
        Ok::<f64, SysError>(t0.elapsed().as_secs_f64())
    };
    let passes = 3;
    let mut best = f64::INFINITY;
    let mut best_clear = f64::INFINITY;
    for pass in 0..passes {
        // Zeroing stores are faster than others on some CPUs (an AMD EPYC
        // here memsets 80 GB/s of zeros, 40 of anything else), so memset
        // writes a non-zero byte; the 4 KiB clear writes zeros, as the
        // kernel does.
        let byte = 0x5a_u8.wrapping_add(pass as u8);
        best = best.min(timed(&mut map, &|p| p.fill(byte))?);
        best_clear = best_clear.min(timed(&mut map, &|p| p.zero_by(CLEAR_CHUNK_BYTES))?);
    }
    let size = map.len() as u64;
    let page_size_bytes = backing_page_size(map.addr() as u64, size).unwrap_or(page as u64);
    map.release()?;
    Ok(MemsetBaseline {
        size_bytes: size,
        page_size_bytes,
        threads: runs.len(),
        passes,
        seconds: best,
        gbps: gbps(size, best),
        clear_4k_seconds: best_clear,
        clear_4k_gbps: gbps(size, best_clear),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard};

    const MIB2: u64 = 2 << 20;

    #[test]
    fn memset_baseline_measures() {
        let b = memset_baseline(8 << 20, 2).unwrap();
        assert_eq!(b.size_bytes, 8 << 20);
        assert_eq!(b.threads, 2);
        assert!(b.gbps > 0.0 && b.seconds > 0.0);
        assert!(b.clear_4k_gbps > 0.0 && b.clear_4k_seconds > 0.0);
        // 4 KiB pages, or THP's size where it took: never anything else.
        let thp = backing_page_size(0, 0);
        assert!(thp.is_none(), "nothing is mapped at address 0: {thp:?}");
        assert!(
            b.page_size_bytes == 4096 || b.page_size_bytes == MIB2,
            "{b:?}"
        );
    }

    /// The cycle on real huge pages and on tmpfs, the peers' methods, and
    /// the memset ceiling; nothing left behind.
    #[test]
    fn bench_api_runs() {
        if skip_unless_root("bench_api_runs") {
            return;
        }
        let pool = PoolGuard::new().expect("pool guard");
        pool.ensure_free(MIB2, 8).unwrap();
        let before = HostState::capture().unwrap();
        let s = bench_prefault(16 << 20, Backend::Anon, PageSize::HUGE_2M, 2).unwrap();
        assert_eq!(s.verified_page_size_bytes, MIB2);
        assert_eq!(s.threads, 2);
        assert!(s.prefault_gbps > 0.0 && s.ready_gbps > 0.0);
        let s = bench_prefault(16 << 20, Backend::Posix, PageSize::Base, 1).unwrap();
        assert_eq!(s.verified_page_size_bytes, 4096);
        for method in PeerMethod::ALL {
            let p = bench_peer(16 << 20, MIB2, method, 2).unwrap();
            assert_eq!(p.size_bytes, 16 << 20, "{method:?}");
            assert_eq!(p.page_size_bytes, MIB2, "{method:?}");
            assert_eq!(p.threads, method.threads(2), "{method:?}");
        }
        let m = memset_baseline(16 << 20, 2).unwrap();
        assert!(m.gbps > 0.0);
        let diff = before.diff(&HostState::capture().unwrap());
        assert!(diff.is_empty(), "bench: left behind: {diff:#?}");
        pool.restore().unwrap();
    }
}
