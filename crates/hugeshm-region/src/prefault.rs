//! Parallel pre-faulting ("pre-page").
//!
//! The region is cut into one contiguous range per thread (whole pages);
//! each thread faults its range front to back in sub-chunks of at most
//! [`SUB_CHUNK_BYTES`], reporting progress after each. The cost of a fault
//! is zeroing the page, so sequential order per thread keeps the zeroing
//! streaming; different threads fault different pages, which the kernel
//! serves in parallel (its hugetlb fault mutex is hashed per page).
//!
//! Method: `MADV_POPULATE_WRITE` (a fault the kernel cannot serve is an
//! error, never SIGBUS); where the kernel lacks it, one atomic
//! read-modify-write per page (`Mapping::touch_range`). Both go through
//! the safe range methods of `hugeshm_sys::Mapping`: no `unsafe` here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use hugeshm_sys::{self as sys, Mapping, SysError};

use crate::error::RegionError;
use crate::model::PrefaultMethod;

/// Progress callback: `(done_bytes, total_bytes)`, called once when the
/// pre-fault starts (with what is done by then, often 0) and from the
/// pre-fault threads after every sub-chunk (so it must be cheap and
/// thread-safe). Calls are serialized: `done_bytes` grows from call to
/// call after the first, and the last call of a successful pre-fault has
/// `done_bytes == total_bytes`.
pub(crate) type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Largest piece one `madvise` call faults before progress is reported.
pub(crate) const SUB_CHUNK_BYTES: usize = 64 << 20;

/// The least a pre-fault thread is given to fault: a 2 MiB huge page, or
/// 512 base pages.
const MIN_THREAD_BYTES: usize = 2 << 20;

/// The CPUs this process may run on (`sched_getaffinity`), at least 1:
/// the default number of pre-fault threads.
pub fn available_cpus() -> usize {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (set.count() as usize).max(1),
        Err(_) => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    }
}

/// What a pre-fault did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Outcome {
    pub method: PrefaultMethod,
    pub threads: usize,
    pub seconds: f64,
}

/// Decimal gigabytes per second (the unit `dd` and the field reports use).
pub(crate) fn gbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / 1e9 / seconds
    } else {
        0.0
    }
}

/// Runs the calling thread on `cpus` until dropped, then where it ran
/// before. Empty `cpus`, or a kernel that refuses, leaves it as it is.
struct Pinned(Option<Vec<u32>>);

impl Pinned {
    fn to(cpus: &[u32]) -> Pinned {
        if cpus.is_empty() {
            return Pinned(None);
        }
        let before = hugeshm_sys::affinity().ok();
        match hugeshm_sys::set_affinity(cpus) {
            Ok(()) => Pinned(before),
            Err(e) => {
                log::warn!("pre-fault not pinned to CPUs {cpus:?}: {e}");
                Pinned(None)
            }
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(before) = self.0.take() {
            if let Err(e) = hugeshm_sys::set_affinity(&before) {
                log::warn!("could not restore this thread's CPUs {before:?}: {e}");
            }
        }
    }
}

/// Faults in all of `map` (whose length is a multiple of `page`) with up
/// to `threads` threads, each on `cpus` when not empty (the CPUs of the
/// node the memory is bound to: zeroing is then local). Contents are kept.
pub(crate) fn prefault(
    map: &Mapping,
    page: usize,
    threads: usize,
    cpus: &[u32],
    method: PrefaultMethod,
    progress: Option<&Progress>,
) -> Result<Outcome, RegionError> {
    prefault_after(map, page, threads, cpus, method, progress, || Ok(()))
}

/// [`prefault`], with `first` run by the calling thread before it faults
/// the first run of pages (the one holding offset 0), while the other
/// threads already fault theirs. Progress and the `prefaulting` test
/// checkpoint wait until `first` has returned; its error stops the
/// others and is returned. `first` runs even when nothing is faulted.
pub(crate) fn prefault_after(
    map: &Mapping,
    page: usize,
    threads: usize,
    cpus: &[u32],
    method: PrefaultMethod,
    progress: Option<&Progress>,
    first: impl FnOnce() -> Result<(), RegionError>,
) -> Result<Outcome, RegionError> {
    let start = Instant::now();
    let len = map.len();
    if method == PrefaultMethod::None || len == 0 {
        first()?;
        return Ok(Outcome {
            method: PrefaultMethod::None,
            threads: 0,
            seconds: 0.0,
        });
    }
    let page = page.max(1);
    let pages = len / page;
    // At least a page and MIN_THREAD_BYTES per thread: more threads than
    // that start and stop for nothing (2,048 threads for an 8 MiB region
    // took 0.35 s where one took 5 ms).
    let most = pages.min(len / MIN_THREAD_BYTES).max(1);
    let runs = hugeshm_sys::even_runs(pages, threads.clamp(1, most));
    let sub = (SUB_CHUNK_BYTES / page).max(1) * page;
    let total = len as u64;
    // Serializes progress so that calls see a growing count.
    let done = Mutex::new(0u64);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<RegionError>> = Mutex::new(None);
    let fail = |e: RegionError| {
        stop.store(true, Ordering::Relaxed);
        let mut slot = failure.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
    };
    // Set once `first` has returned: progress is reported from then on.
    let reporting = AtomicBool::new(false);

    let worker = |first: usize, count: usize| {
        let mut off = first * page;
        let end = (first + count) * page;
        while off < end && !stop.load(Ordering::Relaxed) {
            let n = sub.min(end - off);
            let result: Result<(), SysError> = match method {
                PrefaultMethod::PopulateWrite => map.populate_write_range(off, n),
                _ => map.touch_range(off, n, page),
            };
            if let Err(source) = result {
                fail(RegionError::Prefault {
                    method,
                    offset: off as u64,
                    source,
                });
                return;
            }
            off += n;
            let mut d = done.lock().unwrap_or_else(|p| p.into_inner());
            *d += n as u64;
            if reporting.load(Ordering::Acquire) {
                crate::testhook::checkpoint("prefaulting");
                if let Some(cb) = progress {
                    cb(*d, total);
                }
            }
        }
    };

    // All threads start, and finish their own start-up, before any of them
    // faults: thread start-up maps memory (stack guard, signal stack),
    // which needs the mmap lock exclusively, while a populating thread holds
    // it shared for a whole chunk; a late starter would wait for that chunk
    // and the faults would run one after another instead of in parallel.
    let gate = Gate::default();
    let mut used = 1;
    std::thread::scope(|scope| {
        let worker = &worker;
        let gate = &gate;
        let (head, rest) = runs.split_first().expect("at least one run");
        let mut unspawned = Vec::new();
        for &(first, count) in rest {
            let spawned = std::thread::Builder::new()
                .name("hugeshm-prefault".to_owned())
                .spawn_scoped(scope, move || {
                    // Dropped with the thread; nothing to restore.
                    std::mem::forget(Pinned::to(cpus));
                    gate.arrive_and_wait();
                    worker(first, count)
                });
            match spawned {
                Ok(_) => used += 1,
                // Fault this run here instead; no range is lost.
                Err(_) => unspawned.push((first, count)),
            }
        }
        gate.open_when_arrived(used - 1);
        // The calling thread runs `first`, then takes the first run and
        // the unspawned ones (on `cpus` meanwhile).
        let _pinned = Pinned::to(cpus);
        match first() {
            Ok(()) => {
                let d = done.lock().unwrap_or_else(|p| p.into_inner());
                reporting.store(true, Ordering::Release);
                if *d > 0 {
                    crate::testhook::checkpoint("prefaulting");
                }
                // Reported even at 0 bytes: the caller's clock (a rate, the
                // time left) starts with the pre-fault, not with its first
                // sub-chunk.
                if let Some(cb) = progress {
                    cb(*d, total);
                }
            }
            Err(e) => fail(e),
        }
        worker(head.0, head.1);
        for (first, count) in unspawned {
            worker(first, count);
        }
    });

    if let Some(err) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(err);
    }
    Ok(Outcome {
        method,
        threads: used,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// A start gate: threads arrive and wait until the opener has seen them
/// all arrive.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn arrive_and_wait(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        self.cv.notify_all();
        while !st.1 {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn open_when_arrived(&self, n: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.0 < n {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.1 = true;
        self.cv.notify_all();
    }
}

/// The method a pre-fault will use on this kernel.
pub(crate) fn method_for_kernel() -> PrefaultMethod {
    if sys::populate_write_supported() {
        PrefaultMethod::PopulateWrite
    } else {
        PrefaultMethod::Touch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize};

    #[test]
    fn pinned_prefault_gives_the_caller_its_cpus_back() {
        let before = hugeshm_sys::affinity().unwrap();
        let first = before[0];
        // 4 MiB: two threads' worth (each gets at least MIN_THREAD_BYTES).
        let map = sys::MapOptions::new(2 * MIN_THREAD_BYTES)
            .shared()
            .map_anon()
            .unwrap();
        let out = prefault(&map, 4096, 2, &[first], PrefaultMethod::Touch, None).unwrap();
        assert_eq!(out.threads, 2);
        assert_eq!(hugeshm_sys::affinity().unwrap(), before);
        // A CPU set the kernel refuses (none it has) pins nothing and
        // fails nothing.
        let out = prefault(&map, 4096, 1, &[4000], PrefaultMethod::Touch, None).unwrap();
        assert_eq!(out.threads, 1);
        assert_eq!(hugeshm_sys::affinity().unwrap(), before);
    }

    #[test]
    fn progress_starts_at_zero_when_the_prefault_starts() {
        let map = sys::MapOptions::new(3 * (SUB_CHUNK_BYTES / 16))
            .shared()
            .map_anon()
            .unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let c = calls.clone();
        let cb: Progress = Arc::new(move |done, total| c.lock().unwrap().push((done, total)));
        let total = map.len() as u64;
        prefault(
            &map,
            map.page_size(),
            1,
            &[],
            PrefaultMethod::Touch,
            Some(&cb),
        )
        .unwrap();
        let calls = calls.lock().unwrap();
        assert_eq!(calls.first(), Some(&(0, total)), "{calls:?}");
        assert_eq!(calls.last(), Some(&(total, total)), "{calls:?}");
    }

    #[test]
    fn prefault_base_pages_reports_progress() {
        let mut map = sys::MapOptions::new(10 * 4096 * 300)
            .shared()
            .map_anon()
            .unwrap();
        map.write_at(5, b"keep").unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let (c, l) = (calls.clone(), last.clone());
        let cb: Progress = Arc::new(move |done, total| {
            assert!(done <= total);
            c.fetch_add(1, Ordering::Relaxed);
            let prev = l.swap(done, Ordering::Relaxed);
            // The start (done 0, or what the other thread faulted by then)
            // is reported too.
            assert!(
                done > prev || done == total || prev == 0,
                "{prev} -> {done}"
            );
        });
        for method in [PrefaultMethod::PopulateWrite, PrefaultMethod::Touch] {
            last.store(0, Ordering::Relaxed);
            let out = prefault(&map, map.page_size(), 2, &[], method, Some(&cb)).unwrap();
            assert_eq!(out.method, method);
            assert_eq!(out.threads, 2);
            assert_eq!(last.load(Ordering::Relaxed), map.len() as u64);
        }
        assert!(calls.load(Ordering::Relaxed) >= 4);
        assert_eq!(last.load(Ordering::Relaxed), map.len() as u64);
        let mut buf = [0u8; 4];
        map.read_at(5, &mut buf).unwrap();
        assert_eq!(&buf, b"keep");
        assert!(sys::populate_write_supported());
    }
}
