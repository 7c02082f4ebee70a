//! The posix (tmpfs) backend: a full tmpfs is an error with numbers, not
//! SIGBUS; transparent huge pages where the mount allows them; mlock.

mod common;

use common::*;
use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder, RegionError};
use hugeshm_testkit::HostState;

#[test]
fn too_small_tmpfs_fails_cleanly() {
    let Some(pool) = live!() else {
        return;
    };
    let tiny = TempMount::new("tmpfs", "size=4m");
    let before = HostState::capture().unwrap();
    // 1 thread: fallocate first; 2: the pre-fault's faults allocate.
    let cases = [
        (Some(unique("full")), Policy::Only, 1),
        (None, Policy::Try, 1),
        (Some(unique("full2")), Policy::Only, 2),
    ];
    for (name, policy, threads) in cases {
        let mut b = RegionBuilder::new(8 << 20)
            .backend(Backend::Posix)
            .page_size(PageSize::Base)
            .policy(policy)
            .prefault_threads(threads)
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
    // A region that fits is allocated in full, either way.
    for threads in [1, 2] {
        let (region, report) = RegionBuilder::new(3 << 20)
            .backend(Backend::Posix)
            .page_size(PageSize::Base)
            .policy(Policy::Only)
            .prefault_threads(threads)
            .name(unique("fits"))
            .directory(tiny.path())
            .create()
            .unwrap();
        assert_eq!(report.resident_bytes, 3 << 20);
        assert_eq!(tiny.entries().len(), 1);
        region.destroy().unwrap();
        assert!(tiny.entries().is_empty());
    }
    assert_no_leaks(&before, "tiny tmpfs");
    drop(tiny);
    drop(pool);
}

#[test]
fn thp_on_tmpfs_mounted_with_huge() {
    let Some(pool) = live!() else {
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
        assert_no_leaks(&before, opt);
        drop(mnt);
    }
    drop(pool);
}

#[test]
fn mlock_locks_the_region() {
    let Some(pool) = live!() else {
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
    assert_no_leaks(&before, "mlock");
    pool.finish();
}

/// `dax` on a host without a DAX mount, or with a directory that is not
/// one: a clear error before anything is created. (Real DAX regions run in
/// the NVDIMM guest: hugeshm's tests/guest_dax.rs.)
#[test]
fn dax_without_a_dax_file_system_is_a_clear_error() {
    use hugeshm_region::{Backend, RegionBuilder};
    let dax_mounted = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            l.split_whitespace()
                .nth(3)
                .is_some_and(|o| o.split(',').any(|x| x == "dax" || x == "dax=always"))
        });
    // The other tests here create and remove /dev/shm files meanwhile:
    // hold the lock they serialize through for the before/after check.
    let pool = observe!();
    if !dax_mounted {
        let e = RegionBuilder::new(8 << 20)
            .name("daxless")
            .backend(Backend::Dax)
            .create()
            .unwrap_err();
        assert!(
            e.to_string().contains("no DAX file system is mounted"),
            "{e}"
        );
        assert!(e.to_string().contains("mount -o dax"), "{e}");
    }
    let e = RegionBuilder::new(8 << 20)
        .name("daxless")
        .backend(Backend::Dax)
        .directory("/dev/shm")
        .create()
        .unwrap_err();
    assert!(
        e.to_string().contains("/dev/shm: not on a DAX file system"),
        "{e}"
    );
    // A character device that is no device-dax.
    let e = RegionBuilder::new(8 << 20)
        .name("daxless")
        .backend(Backend::Dax)
        .directory("/dev/null")
        .create()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("/dev/null: a character device (1:3), but not device-dax"),
        "{e}"
    );
    assert!(e.to_string().contains("--mode=devdax"), "{e}");
    pool.finish();
}

/// `Region::persist` on a region that is not MAP_SYNC: msync; a range
/// beyond the data is an error.
#[test]
fn persist_outside_dax_is_msync_and_checked() {
    use hugeshm_region::{Backend, PageSize, Policy, RegionBuilder};
    let (mut r, report) = RegionBuilder::new(1 << 20)
        .backend(Backend::Anon)
        .page_size(PageSize::Base)
        .policy(Policy::Off)
        .create()
        .unwrap();
    assert!(!report.map_sync);
    r.write_at(0, b"x").unwrap();
    assert_eq!(
        r.persist(0, 1).unwrap(),
        hugeshm_region::PersistMethod::Msync
    );
    assert!(r.persist(r.data_len(), 1).is_err());
    r.close().unwrap();
}
