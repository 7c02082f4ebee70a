//! The posix (tmpfs) backend: a full tmpfs is an error with numbers, not
//! SIGBUS; transparent huge pages where the mount allows them; mlock.

mod common;

use common::*;
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

#[test]
fn too_small_tmpfs_fails_cleanly() {
    let Some(pool) = pool_guard("too_small_tmpfs_fails_cleanly") else {
        return;
    };
    let tiny = TempMount::new("tmpfs", "size=4m");
    let before = HostState::capture().unwrap();
    for (name, policy) in [(Some(unique("full")), Policy::Only), (None, Policy::Try)] {
        let mut b = RegionBuilder::new(8 << 20)
            .backend(Backend::Posix)
            .page_size(PageSize::Base)
            .policy(policy)
            .directory(tiny.path());
        if let Some(n) = &name {
            b = b.name(n);
        }
        let err = b.create().map(|_| ()).unwrap_err();
        let RegionError::NoSpace {
            needed_bytes,
            free_bytes,
            fstype,
            ..
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!(*needed_bytes, 8 << 20);
        assert!(*free_bytes <= 4 << 20, "{err}");
        assert_eq!(fstype, "tmpfs");
        assert!(
            err.fix().unwrap().to_string().contains("remount,size="),
            "{err}"
        );
        assert!(tiny.entries().is_empty(), "{:?}", tiny.entries());
        println!("{err}");
    }
    // A region that fits is fallocated in full.
    let (region, report) = RegionBuilder::new(3 << 20)
        .backend(Backend::Posix)
        .page_size(PageSize::Base)
        .policy(Policy::Only)
        .name(unique("fits"))
        .directory(tiny.path())
        .create()
        .unwrap();
    assert_eq!(report.resident_bytes, 3 << 20);
    assert_eq!(tiny.entries().len(), 1);
    region.destroy().unwrap();
    assert!(tiny.entries().is_empty());
    assert_no_leak(&before, "tiny tmpfs");
    drop(tiny);
    drop(pool);
}

#[test]
fn thp_on_tmpfs_mounted_with_huge() {
    let Some(pool) = pool_guard("thp_on_tmpfs_mounted_with_huge") else {
        return;
    };
    for opt in ["huge=always", "huge=within_size", "huge=advise"] {
        let mnt = TempMount::new("tmpfs", &format!("size=64m,{opt}"));
        let before = HostState::capture().unwrap();
        let name = unique("thp");
        let _cleanup = RemoveOnDrop::new(&name, Backend::Posix, Some(mnt.path()));
        let (region, report) = RegionBuilder::new((16 << 20) - 5)
            .backend(Backend::Posix)
            .page_size(PageSize::HUGE_2M)
            .policy(Policy::Only)
            .name(&name)
            .directory(mnt.path())
            .create()
            .unwrap_or_else(|e| panic!("{opt}: {e}"));
        println!(
            "{opt}: verified {} thp {} resident {} of {}",
            report.verified_page_size_bytes,
            report.thp_bytes,
            report.resident_bytes,
            report.size_bytes
        );
        assert_eq!(report.size_bytes, 16 << 20, "{opt}");
        assert!(report.rounded_up);
        assert_eq!(report.verified_page_size_bytes, MIB2, "{opt}: {report:#?}");
        assert_eq!(report.thp_bytes, 16 << 20, "{opt}");
        assert_eq!(report.resident_bytes, 16 << 20, "{opt}");
        region.destroy().unwrap();
        assert_no_leak(&before, opt);
        drop(mnt);
    }
    drop(pool);
}

#[test]
fn mlock_locks_the_region() {
    let Some(pool) = pool_guard("mlock_locks_the_region") else {
        return;
    };
    pool.ensure_free(MIB2, 4).unwrap();
    let before = HostState::capture().unwrap();
    for (backend, page) in [
        (Backend::Posix, PageSize::Base),
        (Backend::Sysv, PageSize::HUGE_2M),
    ] {
        let name = unique("lock");
        let _cleanup = RemoveOnDrop::new(&name, backend, None);
        let (region, report) = RegionBuilder::new(8 << 20)
            .backend(backend)
            .page_size(page)
            .policy(Policy::Only)
            .name(&name)
            .mlock(true)
            .create()
            .unwrap();
        assert!(report.mlocked);
        let v = region.verify().unwrap();
        if backend == Backend::Posix {
            // hugetlb mappings are never counted as locked (nor swapped).
            assert_eq!(v.locked_bytes, 8 << 20, "{backend}: {v:?}");
        }
        region.destroy().unwrap();
    }
    assert_no_leak(&before, "mlock");
    pool.restore().unwrap();
}
