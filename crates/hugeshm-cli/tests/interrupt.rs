//! Ctrl-C in the middle of a bench gives back what it took: `bench oltp`
//! on 2 MiB pages is interrupted (SIGINT to its process group, as a
//! terminal sends it) while its workers run; the pool it raised is back,
//! its region and data file are gone, and it exits 130.

mod common;

use common::{cmd, nr_2m};
use hugeshm_testkit::{is_root, HostState, PoolGuard};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

#[test]
fn ctrl_c_during_bench_oltp_gives_back_the_pool_region_and_file() {
    if !is_root() {
        eprintln!("ctrl_c_during_bench_oltp: skipped: raising the pool needs root");
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    let before = HostState::capture().unwrap();
    let nr_before = nr_2m();
    let dir = std::env::temp_dir().join(format!("hugeshm-interrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = cmd(&[
        "bench",
        "oltp",
        "--cache-size",
        "32M",
        "--data-size",
        "32M",
        "--duration",
        "30",
        "--runs",
        "1",
        "--page-sizes",
        "2m",
        "--backends",
        "sysv",
        "--data-dir",
        dir.to_str().unwrap(),
        "--json",
    ])
    .process_group(0)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id() as i32;

    // Wait until the pool is raised, the region exists and the workers run.
    let deadline = Instant::now() + Duration::from_secs(60);
    let region_up = || {
        std::fs::read_to_string("/proc/sysvipc/shm")
            .unwrap()
            .lines()
            .skip(1)
            .any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.get(4) == Some(&pid.to_string().as_str()) && f.get(6).is_some_and(|n| *n != "0")
            })
    };
    while !(nr_2m() > nr_before && region_up()) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the bench ended before it could be interrupted"
        );
        assert!(
            Instant::now() < deadline,
            "the bench never raised the pool and attached its region"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let data_files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(data_files, 1, "the data file exists while it runs");

    // Ctrl-C: SIGINT to the whole process group.
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    // The region is removed by the handler, or by the bench itself when its
    // workers (killed by the same Ctrl-C) ended the run first; either way it
    // is gone (checked below).
    assert!(err.contains("nr_hugepages set back to"), "{err}");
    assert!(err.contains("deleted"), "{err}");

    // Pages of the exiting workers go back to the pool a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    while nr_2m() != nr_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(nr_2m(), nr_before, "the pool is back: {err}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "data file gone"
    );
    std::fs::remove_dir(&dir).unwrap();
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}\n{err}");
    pool.restore().expect("restore");
}
