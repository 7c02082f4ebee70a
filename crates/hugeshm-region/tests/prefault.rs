//! Parallel pre-fault: 1 and 2 threads give the same verified page size
//! and full residency; progress reaches the total. (The bench building
//! blocks over this API are hugeshm-lab's: `prefault/sample.rs`.)

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use hugeshm_region::{Backend, PageSize, Policy, PrefaultMethod, RegionBuilder};
use hugeshm_testkit::HostState;

#[test]
fn one_and_two_threads_give_the_same_region() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 16).unwrap();
    let before = HostState::capture().unwrap();
    for (backend, page) in [
        (Backend::Sysv, PageSize::HUGE_2M),
        (Backend::Memfd, PageSize::HUGE_2M),
        (Backend::Posix, PageSize::Base),
    ] {
        let mut seen = Vec::new();
        for threads in [1, 2] {
            let case = format!("{backend} x {page} x {threads} thread(s)");
            let last = Arc::new(AtomicU64::new(0));
            let calls = Arc::new(AtomicU64::new(0));
            let (l, c) = (last.clone(), calls.clone());
            let (region, report) = RegionBuilder::new(32 << 20)
                .backend(backend)
                .page_size(page)
                .policy(Policy::Only)
                .prefault_threads(threads)
                .progress(move |done, total| {
                    assert!(done <= total);
                    // The first call is the start (often 0 bytes done).
                    let first = c.fetch_add(1, Ordering::SeqCst) == 0;
                    assert!(done > l.swap(done, Ordering::SeqCst) || first);
                })
                .create()
                .unwrap();
            assert_eq!(report.prefault_threads, threads, "{case}");
            assert_eq!(
                report.prefault_method,
                PrefaultMethod::PopulateWrite,
                "{case}"
            );
            assert_eq!(report.resident_bytes, 32 << 20, "{case}: {report:#?}");
            assert_eq!(last.load(Ordering::SeqCst), 32 << 20, "{case}");
            assert!(calls.load(Ordering::SeqCst) >= threads as u64, "{case}");
            println!(
                "{case}: {:.3} s, {:.2} GB/s, verified {}",
                report.prefault_seconds, report.prefault_gbps, report.verified_page_size_bytes
            );
            seen.push(report.verified_page_size_bytes);
            region.destroy().unwrap();
        }
        assert_eq!(seen[0], seen[1], "{backend}: {seen:?}");
        assert_eq!(seen[0], page.bytes().unwrap());
    }
    // No pre-fault at all: method none; only the page holding the header
    // is resident.
    let (region, report) = RegionBuilder::new(8 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::HUGE_2M)
        .policy(Policy::Only)
        .prefault_threads(0)
        .create()
        .unwrap();
    assert_eq!(report.prefault_method, PrefaultMethod::None);
    assert_eq!(report.resident_bytes, MIB2);
    region.destroy().unwrap();
    assert_no_leaks(&before, "prefault threads");
    pool.finish();
}

/// Far more threads than a region has 2 MiB pieces: each thread gets at
/// least 2 MiB (8 MiB: 4 threads), and every page is still faulted.
#[test]
fn threads_are_capped_at_one_per_two_mib() {
    // Other tests here change the pools: compare host snapshots under the lock.
    let pool = observe!();
    let (region, report) = RegionBuilder::new(8 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::Base)
        .policy(Policy::Off)
        .prefault_threads(100_000)
        .create()
        .unwrap();
    assert_eq!(report.prefault_threads, 4, "{report:?}");
    assert_eq!(report.resident_bytes, 8 << 20);
    region.destroy().unwrap();
    pool.finish();
}
