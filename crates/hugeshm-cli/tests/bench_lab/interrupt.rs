//! A bench gives back what it took when it is stopped in the middle:
//! `bench oltp` on 2 MiB pages is interrupted (SIGINT to its process group,
//! as a terminal sends it) while its workers run; the pool it raised is
//! back, its region and data file are gone, and it exits 130. Killed with
//! SIGKILL (as the OOM killer does), its watchdog process gives the same back.
//! Whichever way it ends, it takes off only the pages it added: pages an
//! admin added meanwhile stay.

use crate::common::{cmd, nr_2m};
use hugeshm_testkit::{live, HostState};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// A `bench oltp` in its own process group, its 2 MiB pool raised, its
/// SysV region attached by its workers and its data file written in
/// `dir`, its timed run `seconds` long; returns it and its pid.
fn oltp_at_work(dir: &Path, seconds: &str) -> (Child, i32) {
    std::fs::create_dir_all(dir).unwrap();
    let nr_before = nr_2m();
    let mut child = cmd(&[
        "bench",
        "oltp",
        "--cache-size",
        "32M",
        "--data-size",
        "32M",
        "--duration",
        seconds,
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
            "the bench ended before it could be stopped"
        );
        assert!(
            Instant::now() < deadline,
            "the bench never raised the pool and attached its region"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let data_files = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(data_files, 1, "the data file exists while it runs");
    (child, pid)
}

/// The pool back at `nr_before` (pages of exiting workers return a moment
/// later), `dir` empty (and removed), nothing else left.
fn all_given_back(before: &HostState, nr_before: u64, dir: &Path, err: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while nr_2m() != nr_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(nr_2m(), nr_before, "the pool is back: {err}");
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        0,
        "data file gone: {err}"
    );
    std::fs::remove_dir(dir).unwrap();
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}\n{err}");
}

fn test_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hugeshm-{tag}-{}", std::process::id()))
}

#[test]
fn ctrl_c_during_bench_oltp_gives_back_the_pool_region_and_file() {
    // Raising the pool needs root.
    let Some(pool) = live!() else { return };
    let nr_before = nr_2m();
    let dir = test_dir("interrupt");
    let (child, pid) = oltp_at_work(&dir, "30");

    // Ctrl-C: SIGINT to the whole process group.
    rustix::process::kill_process_group(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(130),
        "signal {:?}: {err}",
        std::os::unix::process::ExitStatusExt::signal(&out.status)
    );
    // The handler gives back what the run still holds, a line each; when
    // the workers, killed by the same Ctrl-C, ended the run first, the
    // run's own path gave back some or all of it, and the handler says so.
    // Either way once: the pool and the directory are checked below (a
    // pool taken off twice would read below `nr_before`). (A worker the
    // run was starting as the signal came may add its own error.)
    assert!(
        err.contains("nr_hugepages set back to")
            || err.contains("the run had given back what it took"),
        "{err}"
    );
    // The handler told the watchdog it gives back itself: no second say.
    assert!(!err.contains("watchdog"), "{err}");
    all_given_back(pool.before(), nr_before, &dir, &err);
    pool.finish();
}

/// SIGKILL to the bench alone, as the OOM killer sends it: no handler
/// runs, its workers live on; the watchdog process gives back the region
/// (once the orphaned workers let go), the pool and the data file.
#[test]
fn sigkill_during_bench_oltp_is_given_back_by_its_watchdog() {
    // Raising the pool needs root.
    let Some(pool) = live!() else { return };
    let nr_before = nr_2m();
    let dir = test_dir("sigkill");
    let (child, pid) = oltp_at_work(&dir, "30");
    // The admin adds 3 pages meanwhile: they stay.
    let nr_raised = nr_2m();
    set_nr_2m(nr_raised + 3);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    // Its stderr ends when the watchdog and the workers, who share it, have.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "the run (pid {pid}) ended without giving back what it took"
        )),
        "{err}"
    );
    assert!(
        err.contains("watchdog: removed the sysv region bench-oltp-"),
        "{err}"
    );
    assert!(
        err.contains(
            "watchdog: /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages set back to"
        ),
        "{err}"
    );
    assert!(err.contains("watchdog: deleted "), "{err}");
    assert!(
        err.contains(&format!(
            "set back to {} (it held {}, {} of them added by this run)",
            nr_before + 3,
            nr_raised + 3,
            nr_raised - nr_before
        )),
        "{err}"
    );
    // The workers, orphaned, may still be letting go of their pages.
    let deadline = Instant::now() + Duration::from_secs(10);
    while nr_2m() != nr_before + 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(nr_2m(), nr_before + 3, "the admin's pages stay: {err}");
    set_nr_2m(nr_before);
    all_given_back(pool.before(), nr_before, &dir, &err);
    pool.finish();
}

fn set_nr_2m(n: u64) {
    std::fs::write(
        "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
        n.to_string(),
    )
    .unwrap();
}

/// A bench that ends by itself takes off the pages it added, not the
/// count from before: the 3 pages an admin added while it ran (as
/// `hugeshm apply` or another bench would) stay.
#[test]
fn a_bench_takes_off_only_the_pages_it_added() {
    // Raising the pool needs root.
    let Some(pool) = live!() else { return };
    let nr_before = nr_2m();
    let dir = test_dir("others");
    let (child, _) = oltp_at_work(&dir, "2");
    set_nr_2m(nr_2m() + 3);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The workers, orphaned, may still be letting go of their pages.
    let deadline = Instant::now() + Duration::from_secs(10);
    while nr_2m() != nr_before + 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(nr_2m(), nr_before + 3, "the admin's pages stay: {err}");
    set_nr_2m(nr_before);
    all_given_back(pool.before(), nr_before, &dir, &err);
    pool.finish();
}
