//! The pool check on real pools: one page too few fails `only` with the
//! exact numbers and leaves nothing behind; `try` gets a whole base-page
//! region with the reason; `largest` picks the biggest fitting size.

mod common;

use common::*;
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

const HUGETLB_BACKENDS: [Backend; 4] = [
    Backend::Sysv,
    Backend::Memfd,
    Backend::Hugetlbfs,
    Backend::Anon,
];

fn fix_for(page: u64, target: u64) -> String {
    if page == MIB2 {
        format!("sysctl -w vm.nr_hugepages={target}")
    } else {
        format!(
            "echo {target} > /sys/kernel/mm/hugepages/hugepages-{}kB/nr_hugepages",
            page / 1024
        )
    }
}

#[test]
fn only_with_one_page_too_few_fails_with_numbers() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 3).unwrap();
    let mut sizes = vec![(MIB2, TempMount::new("hugetlbfs", "pagesize=2M"))];
    if try_gigantic(&pool, 1) {
        sizes.push((GIB, TempMount::new("hugetlbfs", "pagesize=1G")));
    }
    for (page, _mount) in &sizes {
        let page = *page;
        for backend in HUGETLB_BACKENDS {
            let case = format!("{backend} x {page}");
            let before = HostState::capture().unwrap();
            let (nr, free, resv) = pool_counts(page);
            let available = free - resv;
            let name = unique("short");
            let _cleanup = RemoveOnDrop::new(&name, backend, None);
            let err = RegionBuilder::new((available + 1) * page)
                .name(&name)
                .backend(backend)
                .page_size(PageSize::Huge(page))
                .policy(Policy::Only)
                .create()
                .map(|(_, r)| r)
                .expect_err(&case);
            let RegionError::PoolShortfall {
                shortfall,
                refused_by,
            } = &err
            else {
                panic!("{case}: {err}");
            };
            assert_eq!(refused_by, &None, "{case}: the pre-check must catch it");
            assert_eq!(
                (
                    shortfall.required,
                    shortfall.available,
                    shortfall.free,
                    shortfall.reserved,
                    shortfall.nr_hugepages
                ),
                (available + 1, available, free, resv, nr),
                "{case}"
            );
            assert_eq!(shortfall.fix.to_string(), fix_for(page, nr + 1), "{case}");
            let label = if page == MIB2 { "2 MiB" } else { "1 GiB" };
            assert_eq!(
                format!("{err}; to fix: {}", err.fix().unwrap()),
                format!(
                    "{label} pages: required {}, available {available} (free {free}, reserved {resv}); to fix: {}",
                    available + 1,
                    fix_for(page, nr + 1)
                ),
                "{case}"
            );
            println!("{case}: {err}");
            assert_no_leaks(&before, &case);
        }
    }
    drop(sizes);
    pool.finish();
}

#[test]
fn try_with_one_page_too_few_is_all_base_pages() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 3).unwrap();
    let _mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for backend in HUGETLB_BACKENDS {
        let case = format!("{backend}");
        let before = HostState::capture().unwrap();
        let (_, free, resv) = pool_counts(MIB2);
        let available = free - resv;
        let name = unique("try");
        let _cleanup = RemoveOnDrop::new(&name, backend, None);
        let size = (available + 1) * MIB2;
        let (region, report) = RegionBuilder::new(size)
            .name(&name)
            .backend(backend)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Try)
            .create()
            .expect(&case);
        // Not a single huge page taken: never a mix.
        assert_eq!(pool_counts(MIB2).1, free, "{case}: free huge pages changed");
        assert_eq!(
            pool_counts(MIB2).2,
            resv,
            "{case}: reserved huge pages changed"
        );
        assert!(report.fell_back(), "{case}");
        assert_eq!(report.page_size_bytes, 4096, "{case}");
        assert_eq!(report.verified_page_size_bytes, 4096, "{case}");
        assert_eq!(report.resident_bytes, size, "{case}");
        let fallback = report.fallback.as_ref().expect("a fall-back");
        let s = fallback.shortfall.as_ref().expect("shortfall numbers");
        assert_eq!((s.required, s.available), (available + 1, available));
        let reason = fallback.reason.as_str();
        assert!(
            reason.starts_with(&format!(
                "2 MiB pages: required {}, available {available}",
                available + 1
            )),
            "{case}: {reason}"
        );
        assert!(
            reason.ends_with("the whole region uses 4 KiB pages instead"),
            "{reason}"
        );
        if backend == Backend::Hugetlbfs {
            assert!(report
                .path
                .as_deref()
                .unwrap()
                .starts_with("/dev/shm/hugeshm."));
            assert!(!report.warnings.is_empty());
        }
        println!("{case}: reason: {reason}");
        region.destroy().unwrap();
        assert_no_leaks(&before, &case);
    }
    pool.finish();
}

#[test]
fn largest_takes_the_biggest_size_that_fits() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 4).unwrap();
    let before = HostState::capture().unwrap();
    // 8 MiB: 1 GiB pages are larger than the region, so 2 MiB.
    let (region, report) = RegionBuilder::new(8 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::Largest)
        .policy(Policy::Only)
        .create()
        .unwrap();
    assert_eq!(report.page_size_bytes, MIB2);
    assert_eq!(report.verified_page_size_bytes, MIB2);
    region.destroy().unwrap();
    assert_no_leaks(&before, "largest 8 MiB");
    if try_gigantic(&pool, 1) {
        let before = HostState::capture().unwrap();
        let (region, report) = RegionBuilder::new(GIB)
            .backend(Backend::Memfd)
            .page_size(PageSize::Largest)
            .policy(Policy::Only)
            .create()
            .unwrap();
        assert_eq!(report.verified_page_size_bytes, GIB);
        region.destroy().unwrap();
        assert_no_leaks(&before, "largest 1 GiB");
    }
    pool.finish();
}

#[test]
fn hugetlbfs_mount_problems_are_clear() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 4).unwrap();
    let before = HostState::capture().unwrap();
    // A directory that is not hugetlbfs.
    let err = RegionBuilder::new(MIB2)
        .name(unique("dir"))
        .backend(Backend::Hugetlbfs)
        .page_size(PageSize::HUGE_2M)
        .policy(Policy::Only)
        .directory("/dev/shm")
        .create()
        .map(|_| ())
        .unwrap_err();
    assert!(
        err.to_string().contains("not on a hugetlbfs mount"),
        "{err}"
    );
    // No mount of the size at all (unless the host has one).
    let has_mount = std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"));
    if has_mount {
        pool.skip_part(
            "no mount",
            Lack::NoHugetlbfsMount,
            "the host has a hugetlbfs mount",
        );
    } else {
        let err = RegionBuilder::new(MIB2)
            .name(unique("nomount"))
            .backend(Backend::Hugetlbfs)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Only)
            .create()
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, RegionError::NoHugetlbfsMount { .. }), "{err}");
        assert!(
            err.fix()
                .unwrap()
                .to_string()
                .contains("mount -t hugetlbfs -o pagesize=2M"),
            "{err}"
        );
        println!("{err}");
    }
    // A mount with a size limit smaller than the region.
    let small = TempMount::new("hugetlbfs", "pagesize=2M,size=4M");
    let err = RegionBuilder::new(8 << 20)
        .name(unique("quota"))
        .backend(Backend::Hugetlbfs)
        .page_size(PageSize::HUGE_2M)
        .policy(Policy::Only)
        .directory(small.path())
        .create()
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, RegionError::NoSpace { .. }), "{err}");
    assert!(small.entries().is_empty(), "{:?}", small.entries());
    println!("{err}");
    drop(small);
    assert_no_leaks(&before, "hugetlbfs mount problems");
    pool.finish();
}
