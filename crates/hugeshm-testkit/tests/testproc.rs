//! End-to-end tests of `hugeshm-testproc` against the real kernel: what
//! backs each kind of object (per `/proc/PID/smaps`), and that nothing is
//! left behind (System V segments, `/dev/shm` files, huge pages).
//!
//! Tests that need the huge page pool run as root only (they skip
//! otherwise); every test that compares host snapshots holds the pool lock
//! (`live!`, `observe!`) so they never see each other's objects.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use hugeshm_sys as sys;
use hugeshm_testkit::{
    assert_no_leaks, live, observe, skip_part, testproc_path, HostState, TestObject, TestProc,
};

const MIB2: u64 = 2 << 20;

/// The smaps fields of the VMA starting at `addr` in process `pid`.
fn smaps_vma(pid: u32, addr: u64) -> Option<HashMap<String, u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut found: Option<HashMap<String, u64>> = None;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((start, _end)) = first.split_once('-') {
            if let Ok(start) = u64::from_str_radix(start, 16) {
                if found.is_some() {
                    break;
                }
                if start == addr {
                    found = Some(HashMap::new());
                }
                continue;
            }
        }
        if let Some(map) = found.as_mut() {
            // "KernelPageSize:     2048 kB"
            if let Some((key, rest)) = line.split_once(':') {
                if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                    map.insert(key.trim().to_owned(), v);
                }
            }
        }
    }
    found
}

fn check_backing(pid: u32, obj: &TestObject, touched: bool) {
    let vma =
        smaps_vma(pid, obj.addr).unwrap_or_else(|| panic!("no VMA at {:#x} for {obj:?}", obj.addr));
    let page_kb = if obj.is_huge() {
        obj.page_size / 1024
    } else {
        sys::base_page_size() as u64 / 1024
    };
    assert_eq!(
        vma.get("KernelPageSize"),
        Some(&page_kb),
        "{obj:?}: {vma:?}"
    );
    let size_kb = obj.size.div_ceil(obj.page_size) * obj.page_size / 1024;
    assert_eq!(vma.get("Size"), Some(&size_kb), "{obj:?}: {vma:?}");
    if obj.is_huge() {
        let hugetlb =
            vma.get("Shared_Hugetlb").unwrap_or(&0) + vma.get("Private_Hugetlb").unwrap_or(&0);
        assert_eq!(
            hugetlb,
            if touched { size_kb } else { 0 },
            "{obj:?}: {vma:?}"
        );
    } else if touched {
        assert_eq!(vma.get("Rss"), Some(&size_kb), "{obj:?}: {vma:?}");
    }
}

/// Removes System V segments on drop (so a failed assertion leaks nothing).
struct RemoveSegments(Vec<i32>);

impl Drop for RemoveSegments {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = sys::shm_remove(*id);
        }
    }
}

#[test]
fn testproc_path_is_the_cargo_built_binary() {
    let expected = PathBuf::from(env!("CARGO_BIN_EXE_hugeshm-testproc"));
    if std::env::var_os(hugeshm_testkit::TESTPROC_ENV).is_none() {
        assert_eq!(
            testproc_path().canonicalize().unwrap(),
            expected.canonicalize().unwrap()
        );
    }
}

#[test]
fn plain_objects_use_base_pages_and_leave_nothing() {
    let _pool = observe!();
    let before = HostState::capture().unwrap();
    let name = format!("hugeshm-testkit-plain-{}", std::process::id());
    let devshm = format!("devshm:{name}:64K");
    let p = TestProc::spawn([
        "sysv-plain:1M",
        "memfd-plain:64K",
        "private-plain:8K",
        "anon-shared-plain:10000",
        &devshm,
        "--touch",
    ])
    .unwrap();
    let objs = p.objects().to_vec();
    assert_eq!(
        objs.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>(),
        [
            "sysv-plain",
            "memfd-plain",
            "private-plain",
            "anon-shared-plain",
            "devshm"
        ]
    );
    for o in &objs {
        assert_eq!(o.page_size, sys::base_page_size() as u64);
        check_backing(p.pid(), o, true);
    }
    let base = sys::base_page_size() as u64;
    assert_eq!(
        objs[3].size,
        10000u64.div_ceil(base) * base,
        "rounded to pages"
    );
    assert_eq!(
        objs[4].path.as_deref(),
        Some(format!("/dev/shm/{name}").as_str())
    );

    let shmid = objs[0].shmid.unwrap();
    assert_eq!(objs[0].key, Some(0));
    let st = sys::shm_stat(shmid).unwrap();
    assert_eq!((st.size, st.nattch, st.cpid), (1 << 20, 1, p.pid() as i32));

    // While it runs, the snapshot diff must see its objects.
    let during = before.diff(&HostState::capture().unwrap());
    assert!(
        during
            .iter()
            .any(|l| l.starts_with(&format!("new SysV segment shmid={shmid} "))),
        "{during:?}"
    );
    assert!(
        during
            .iter()
            .any(|l| l.ends_with(&format!("/dev/shm/{name}"))),
        "{during:?}"
    );

    assert!(p.finish().unwrap().success());
    assert!(sys::shm_stat(shmid).is_err(), "segment removed");
    assert_no_leaks(&before, "testproc");
}

#[test]
fn huge_objects_use_huge_pages_and_leave_nothing() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(MIB2, 8).unwrap();
    let before = HostState::capture().unwrap();
    let pool_before = before.pools[&2048];
    let kinds = [
        "sysv-huge:2M",
        "sysv-plain:64K",
        "memfd-huge:2M",
        "private-huge:1M",
        "anon-shared-huge:3M",
    ];
    // 1 + 1 + 1 + 2 huge pages.
    let huge_pages = 5;

    // Reserved but not faulted.
    {
        let p = TestProc::spawn(kinds).unwrap();
        for o in p.objects() {
            check_backing(p.pid(), o, false);
        }
        let now = HostState::capture().unwrap().pools[&2048];
        assert_eq!(now.free, pool_before.free, "{now:?}");
        assert_eq!(now.resv, pool_before.resv + huge_pages, "{now:?}");
        assert!(p.finish().unwrap().success());
        assert_no_leaks(&before, "testproc");
    }

    // Touched: every huge page is faulted in.
    let mut args = kinds.to_vec();
    args.push("--touch");
    let p = TestProc::spawn(&args).unwrap();
    let objs = p.objects().to_vec();
    assert_eq!(objs.len(), kinds.len());
    for o in &objs {
        let base = sys::base_page_size() as u64;
        assert_eq!(o.page_size, if o.is_huge() { MIB2 } else { base });
        check_backing(p.pid(), o, true);
    }
    assert_eq!(objs[3].size, MIB2, "private-huge rounded up");
    assert_eq!(objs[4].size, 2 * MIB2, "anon-shared-huge rounded up");
    let st = sys::shm_stat(objs[0].shmid.unwrap()).unwrap();
    assert_eq!((st.size, st.nattch), (MIB2, 1));
    let now = HostState::capture().unwrap().pools[&2048];
    assert_eq!(now.free, pool_before.free - huge_pages, "{now:?}");
    assert_eq!(now.resv, pool_before.resv, "{now:?}");
    assert!(p.finish().unwrap().success());

    assert_no_leaks(&before, "testproc");
    pool.finish();
}

#[test]
fn orphaned_sysv_segments_outlive_the_process() {
    let root = hugeshm_testkit::is_root();
    let pool = observe!();
    if root {
        pool.ensure_free(MIB2, 2).unwrap();
    } else {
        skip_part(
            pool.name(),
            "huge segment",
            "needs root to reserve huge pages: plain segments only",
        );
    }
    let before = HostState::capture().unwrap();
    // A key unlikely to collide with anything else on the host.
    let key = 0x4853_0000_i32 | (std::process::id() as i32 & 0xfff0);
    let key_arg = format!("{key:#x}");
    let mut args = vec![
        "sysv-plain:64K",
        "--orphan-sysv",
        "--touch",
        "--key",
        &key_arg,
    ];
    if root {
        args.insert(0, "sysv-huge:2M");
    }
    let p = TestProc::spawn(&args).unwrap();
    let pid = p.pid();
    let objs = p.objects().to_vec();
    let mut cleanup = RemoveSegments(objs.iter().filter_map(|o| o.shmid).collect());
    assert_eq!(
        cleanup.0.len(),
        args.iter().filter(|a| a.starts_with("sysv-")).count()
    );
    assert!(p.finish().unwrap().success(), "exits by itself");

    for (i, o) in objs.iter().enumerate() {
        let st = sys::shm_stat(o.shmid.unwrap()).unwrap();
        assert_eq!(o.key, Some(key + i as i32));
        assert_eq!(st.key, key + i as i32);
        assert_eq!(st.nattch, 0, "{o:?}: {st:?}");
        assert_eq!(st.cpid, pid as i32);
        assert!(!st.marked_for_removal());
    }
    let during = before.diff(&HostState::capture().unwrap());
    assert_eq!(
        during
            .iter()
            .filter(|l| l.starts_with("new SysV segment"))
            .count(),
        objs.len()
    );
    if root {
        // The touched huge page stays allocated to the orphan.
        assert!(
            during
                .iter()
                .any(|l| l.starts_with("hugepages-2048kB: free")),
            "{during:?}"
        );
    }

    for id in std::mem::take(&mut cleanup.0) {
        sys::shm_remove(id).unwrap();
    }
    assert_no_leaks(&before, "testproc");
    pool.finish();
}

#[test]
fn failure_midway_cleans_up_what_was_made() {
    let _pool = observe!();
    let before = HostState::capture().unwrap();
    let name = format!("hugeshm-testkit-fail-{}", std::process::id());
    let dev = format!("devshm:{name}:64K");
    // The second devshm with the same name fails EEXIST after the first
    // three objects exist.
    let err =
        TestProc::spawn(["sysv-plain:64K", "memfd-plain:64K", &dev, &dev, "--touch"]).unwrap_err();
    assert!(
        err.contains(&format!(
            "devshm:65536: shm_open(name=\"{name}\", O_RDWR|O_CREAT|O_EXCL, mode=0o600): "
        )),
        "{err}"
    );
    assert!(err.contains("exit status: 1"), "{err}");
    assert_no_leaks(&before, "testproc");

    // 64 GiB of huge pages cannot be reserved on any test machine.
    let err = TestProc::spawn(["sysv-plain:64K", "private-huge:64G"]).unwrap_err();
    assert!(
        err.contains("mmap(len=68719476736, MAP_PRIVATE|MAP_ANONYMOUS|MAP_HUGETLB|2MiB): "),
        "{err}"
    );
    let err2 = TestProc::spawn(["sysv-huge:64G"]).unwrap_err();
    assert!(
        err2.contains(
            "shmget(key=IPC_PRIVATE, size=68719476736, IPC_CREAT|IPC_EXCL|SHM_HUGETLB|2MiB|0600): "
        ),
        "{err2}"
    );
    assert_no_leaks(&before, "testproc");
}

#[test]
fn bad_arguments_are_rejected_with_usage() {
    let err = TestProc::spawn(["bogus:1M"]).unwrap_err();
    assert!(err.contains("unknown kind in \"bogus:1M\""), "{err}");
    assert!(err.contains("usage: hugeshm-testproc"), "{err}");
    assert!(err.contains("exit status: 2"), "{err}");
    let err = TestProc::spawn(["sysv-plain:lots"]).unwrap_err();
    assert!(err.contains("bad size \"lots\""), "{err}");
}
