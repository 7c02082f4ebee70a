//! Every backend x {4 KiB, 2 MiB, 1 GiB} x {off, try, only} on real huge
//! pages (as root; SKIP otherwise), each case checked against
//! /proc/self/smaps and for leaks.

mod common;

use common::*;
use hugeshm_region::{Backend, PageSize, PageSizeSource, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

/// What a case must give: `Ok(page size)` or an error.
enum Expect {
    Pages(u64),
    FallBack,
    ThpError,
}

fn expect(backend: Backend, page: PageSize, policy: Policy) -> Expect {
    match (policy, page) {
        (Policy::Off, _) | (_, PageSize::Base) => Expect::Pages(4096),
        // /dev/shm is tmpfs without huge=: no transparent huge pages.
        (Policy::Only, _) if backend == Backend::Posix => Expect::ThpError,
        (Policy::Try, _) if backend == Backend::Posix => Expect::FallBack,
        (_, PageSize::Huge(p)) => Expect::Pages(p),
        (_, PageSize::Largest) => unreachable!(),
    }
}

#[test]
fn every_backend_page_size_and_policy() {
    let Some(pool) = live!() else {
        return;
    };
    let size = 8 << 20;
    pool.ensure_free(MIB2, 8).expect("reserve 2 MiB pages");
    let mut pages = vec![PageSize::Base, PageSize::HUGE_2M];
    let mounts2 = TempMount::new("hugetlbfs", "pagesize=2M");
    let mut mounts1g = None;
    if try_gigantic(&pool, 1) {
        pages.push(PageSize::HUGE_1G);
        mounts1g = Some(TempMount::new("hugetlbfs", "pagesize=1G"));
    }
    // dax needs persistent memory: its cases run in the NVDIMM guest
    // (hugeshm's tests/guest_dax.rs).
    for backend in Backend::ALL.into_iter().filter(|&b| b != Backend::Dax) {
        for &page in &pages {
            for policy in [Policy::Off, Policy::Try, Policy::Only] {
                let case = format!("{backend} x {page} x {policy}");
                let before = HostState::capture().unwrap();
                let name = unique(backend.as_str());
                let _cleanup = RemoveOnDrop::new(&name, backend, None);
                let mut b = RegionBuilder::new(size)
                    .backend(backend)
                    .page_size(page)
                    .policy(policy)
                    .prefault_threads(2);
                if backend.is_named() {
                    b = b.name(&name);
                }
                let result = b.create();
                match (expect(backend, page, policy), result) {
                    (Expect::Pages(p), Ok((mut region, report))) => {
                        assert_eq!(report.page_size_bytes, p, "{case}: {report:#?}");
                        assert_eq!(report.verified_page_size_bytes, p, "{case}: {report:#?}");
                        assert!(!report.fell_back(), "{case}: {report:#?}");
                        assert_eq!(report.fallback, None, "{case}");
                        let want = size.div_ceil(p) * p;
                        assert_eq!(report.size_bytes, want, "{case}");
                        assert_eq!(report.rounded_up, want > size, "{case}");
                        assert_eq!(report.resident_bytes, want, "{case}: {report:#?}");
                        assert_eq!(region.len() as u64, want, "{case}");
                        assert_eq!(report.prefault_threads as u64, 2.min(want / p), "{case}");
                        assert!(report.prefault_gbps > 0.0, "{case}");
                        if backend.is_named() {
                            assert!(
                                report.shmid.is_some() || report.path.is_some(),
                                "{case}: {report:#?}"
                            );
                        }
                        // The cheap check agrees with smaps; hugetlb pages
                        // are read by PROCMAP_QUERY where the kernel has it.
                        let v = region.verify().unwrap();
                        let check = region.verify_page_size().unwrap();
                        assert_eq!(check.page_size_bytes, p, "{case}: {check:?}");
                        assert_eq!(check.hugetlb, v.hugetlb, "{case}: {check:?}");
                        assert_eq!(
                            check.source == PageSizeSource::ProcmapQuery,
                            v.hugetlb && hugeshm_sys::procmap_query_supported(),
                            "{case}: {check:?}"
                        );
                        assert_eq!(region.data_len() as u64, want - 4096, "{case}");
                        region.write_at(region.data_len() - 3, b"end").unwrap();
                        let mut buf = [0u8; 3];
                        region.read_at(region.data_len() - 3, &mut buf).unwrap();
                        assert!(region.write_at(region.data_len() - 2, b"end").is_err());
                        assert_eq!(&buf, b"end");
                        // JSON round trip of the report.
                        let json = serde_json::to_string(&report).unwrap();
                        let back: hugeshm_region::AllocationReport =
                            serde_json::from_str(&json).unwrap();
                        assert_eq!(
                            (
                                back.backend,
                                back.size_bytes,
                                back.policy,
                                back.page_size_bytes
                            ),
                            (
                                report.backend,
                                report.size_bytes,
                                report.policy,
                                report.page_size_bytes
                            )
                        );
                        region.destroy().unwrap();
                    }
                    (Expect::FallBack, Ok((region, report))) => {
                        assert!(report.fell_back(), "{case}: {report:#?}");
                        assert_eq!(report.page_size_bytes, 4096, "{case}");
                        assert_eq!(report.verified_page_size_bytes, 4096, "{case}");
                        assert_eq!(report.resident_bytes, size, "{case}");
                        let check = region.verify_page_size().unwrap();
                        assert_eq!(check.page_size_bytes, 4096, "{case}: {check:?}");
                        assert_eq!(check.source, PageSizeSource::Smaps, "{case}");
                        let reason = report.reason().unwrap().to_owned();
                        assert!(
                            reason.contains("transparent huge pages unavailable"),
                            "{case}: {reason}"
                        );
                        region.destroy().unwrap();
                    }
                    (Expect::ThpError, Err(e)) => {
                        assert!(
                            matches!(e, RegionError::ThpUnavailable { .. }),
                            "{case}: {e}"
                        );
                        assert!(e.fix().is_some(), "{case}");
                    }
                    (_, Ok((_, report))) => panic!("{case}: unexpected success: {report:#?}"),
                    (_, Err(e)) => panic!("{case}: unexpected error: {e}"),
                }
                assert_no_leaks(&before, &case);
            }
        }
    }
    drop(mounts1g);
    drop(mounts2);
    pool.finish();
}
