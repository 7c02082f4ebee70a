//! Kill at every step: `hugeshm create` stopped by the test hook
//! (`HUGESHM_TEST_STOP_AT`, see `hugeshm_region::testhook`, there with the
//! `test-hooks` feature that this crate's dev-dependency turns on) at each named
//! step of creation, then SIGKILLed, for the sysv, posix, hugetlbfs (on a
//! mount of its own) and memfd backends. Each time, what is left must
//! read right in `ls`, `attach` must refuse what is not complete, `create`
//! must refuse it by default and recreate it when told (reuse only a
//! *ready* one), and `rm` must leave no segment, file, record or reserved
//! page behind.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{cmd, hugeshm as run, json};
use hugeshm_region::testhook::STOP_AT_ENV;
use hugeshm_testkit::{assert_no_leaks, live, HostState};
use serde_json::Value;

const M2: u64 = 2 << 20;
const STEPS: [&str; 6] = [
    "name-claimed",
    "mapped",
    "header-written",
    "prefaulting",
    "verified",
    "ready",
];

fn args<'a>(name: &'a str, backend: &'a str, dir: Option<&'a str>) -> Vec<&'a str> {
    // 130 MiB: three pre-fault chunks, so "prefaulting" is part-way.
    let page = if backend == "posix" { "4k" } else { "2m" };
    let mut a = vec![
        "create",
        name,
        "--size",
        "130M",
        "--backend",
        backend,
        "--page-size",
        page,
        "--policy",
        "only",
        "--prefault-threads",
        "1",
    ];
    if backend == "memfd" {
        a.push("--hold");
    }
    if let Some(d) = dir {
        a.extend(["--dir", d]);
    }
    a
}

/// Starts a create that stops at `step`, waits until it is there, kills it.
fn kill_at(name: &str, backend: &str, dir: Option<&str>, step: &str) {
    let flag = std::env::temp_dir().join(format!("hugeshm-stop-{}-{step}", std::process::id()));
    let _ = std::fs::remove_file(&flag);
    let mut child: Child = cmd(&args(name, backend, dir))
        .env(STOP_AT_ENV, format!("{step}:{}", flag.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !flag.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            panic!("{backend} {step}: create ended ({st}) before the step");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{backend} {step}: never reached"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_file(&flag);
}

/// The `ls` entry of region `name`: by name, or, for a SysV segment whose
/// header (and so its name) was never written, by its key.
fn ls_entry(name: &str) -> Option<Value> {
    let ls = json(run(&["ls", "--json"]));
    let regions = ls.get("regions").cloned().unwrap_or(ls);
    let key = hugeshm_region::sysv_key(name);
    regions
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["name"] == name
                || (r["backend"] == "sysv" && r["object"]["key"].as_i64() == Some(key as i64))
        })
        .cloned()
}

fn fails(out: std::process::Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{what} should fail: {err}");
    err
}

fn succeeds(out: std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A memfd create --hold, released with SIGTERM once it holds the region.
fn create_and_release_memfd(a: &[&str], what: &str) {
    let mut child = cmd(a)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(l)) if l.contains("holding region") => break,
            Some(Ok(l)) => said.push(l),
            _ => panic!(
                "{what}: create --hold failed ({:?}): {}",
                child.wait(),
                said.join("\n")
            ),
        }
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    for _ in lines {}
    assert!(child.wait().unwrap().success(), "{what}");
}

/// Removes the region on drop, so a failed case leaves nothing behind.
struct Cleanup(String, &'static str);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = run(&["rm", &self.0, "--backend", self.1]);
    }
}

#[test]
fn creator_killed_at_every_step_leaves_a_clear_and_removable_state() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 70).expect("70 free 2 MiB pages");
    let hugetlbfs = TempMount::new("hugetlbfs", "pagesize=2M");
    let hugetlbfs_dir = hugetlbfs.0.display().to_string();
    let before = HostState::capture().unwrap();
    for backend in ["sysv", "posix", "hugetlbfs", "memfd"] {
        let dir = (backend == "hugetlbfs").then_some(hugetlbfs_dir.as_str());
        for step in STEPS {
            let name = format!("fault-{backend}-{step}-{}", std::process::id());
            let what = format!("{backend} killed at {step}");
            let _cleanup = Cleanup(name.clone(), backend);
            kill_at(&name, backend, dir, step);

            // What ls says.
            let entry = ls_entry(&name).unwrap_or_else(|| panic!("{what}: ls lost it"));
            let want = match (backend, step) {
                ("memfd", _) => "stale",
                (_, "ready") => "ready",
                _ => "crashed",
            };
            assert_eq!(entry["state"], want, "{what}: {entry:#}");
            assert_eq!(entry["held"], false, "{what}: {entry:#}");
            println!("{what}: ls says {want}");
            // The fix ls prints: reuse only what is complete. A creator
            // killed once its region was ready (made without --hold: to be
            // kept) left what it meant to leave: kept, an info line; one
            // killed before that left a crashed region, a warning.
            let text = String::from_utf8_lossy(&run(&["ls"]).stdout).into_owned();
            let severity = if want == "ready" { "info" } else { "WARN" };
            let line = text
                .lines()
                .find(|l| l.contains(severity) && l.contains(entry["name"].as_str().unwrap()))
                .unwrap_or_else(|| panic!("{what}: no ls {severity} line: {text}"));
            match want {
                "ready" => assert!(line.contains("--reclaim reuse"), "{what}: {line}"),
                _ if entry["header"].is_null() && backend == "sysv" => {
                    assert!(line.contains("ipcrm -m "), "{what}: {line}")
                }
                _ => {
                    assert!(!line.contains("reuse"), "{what}: {line}");
                    assert!(
                        line.contains("--reclaim recreate") && line.contains("hugeshm rm "),
                        "{what}: {line}"
                    );
                }
            }

            // attach: only a complete region.
            let out = run(&["attach", &name, "--backend", backend]);
            if want == "ready" {
                succeeds(out, &format!("{what}: attach"));
            } else {
                let err = fails(out, &format!("{what}: attach"));
                assert!(
                    err.contains("incomplete") || err.contains("is gone"),
                    "{what}: attach: {err}"
                );
            }

            let mut a = args(&name, backend, dir);
            if backend == "memfd" {
                // Nothing is left to reclaim: create replaces the record.
                create_and_release_memfd(&a, &format!("{what}: create"));
            } else {
                // Default: refused, with how to reclaim.
                let err = fails(run(&a), &format!("{what}: create"));
                assert!(err.contains("--reclaim recreate"), "{what}: {err}");
                // Reuse: only a ready region.
                a.extend(["--reclaim", "reuse"]);
                let out = run(&a);
                if want == "ready" {
                    succeeds(out, &format!("{what}: reuse"));
                } else {
                    fails(out, &format!("{what}: reuse"));
                }
                // Recreate: always.
                *a.last_mut().unwrap() = "recreate";
                succeeds(run(&a), &format!("{what}: recreate"));
                // (rm finds hugetlbfs files on every hugetlbfs mount.)
                succeeds(
                    run(&["rm", &name, "--backend", backend]),
                    &format!("{what}: rm"),
                );
            }
            assert!(ls_entry(&name).is_none(), "{what}: still listed");
            assert_no_leaks(&before, &what);
        }
    }
    // Unmounted while the pool lock is held: the next test compares the
    // host's state.
    drop(hugetlbfs);
    pool.finish();
}

/// Puts a `/proc/sys` value back on drop.
struct Sysctl(&'static str, String);

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let old = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, value).unwrap();
        Sysctl(path, old)
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        std::fs::write(self.0, self.1.trim()).unwrap();
    }
}

/// Resources that run out: every SysV id taken (`kernel.shmmni`), and the
/// pool shrunk by the admin between the name claim and the reservation.
/// Each is a clear error with the numbers and the fix, and leaves nothing.
#[test]
fn exhausted_resources_are_clear_errors_and_leave_nothing() {
    let Some(pool) = live!() else { return };

    // shmmni: no segment id left.
    let in_use = pool.before().sysv.len();
    {
        let _mni = Sysctl::set("/proc/sys/kernel/shmmni", &in_use.max(1).to_string());
        let n = format!("fault-mni-{}", std::process::id());
        let _cleanup = Cleanup(n.clone(), "sysv");
        // Fill up to the limit with throwaway segments when there are none.
        let filler = (in_use == 0).then(|| {
            hugeshm_sys::shm_get(0, 4096, hugeshm_sys::ShmFlags::create_new(None)).unwrap()
        });
        let err = fails(
            run(&[
                "create",
                &n,
                "--size",
                "4M",
                "--page-size",
                "4k",
                "--policy",
                "off",
            ]),
            "create past shmmni",
        );
        if let Some(id) = filler {
            hugeshm_sys::shm_remove(id).unwrap();
        }
        println!("shmmni: {err}");
        assert!(err.contains("kernel.shmmni = "), "{err}");
        assert!(err.contains("to fix: sysctl -w kernel.shmmni="), "{err}");
    }
    assert_no_leaks(pool.before(), "shmmni");

    // The pool shrunk under a create: stopped after the memfd record is
    // published (name claimed, nothing reserved yet), the free pages taken
    // away, then let go on.
    pool.ensure_free(M2, 40).unwrap();
    let n = format!("fault-shrink-{}", std::process::id());
    let _cleanup = Cleanup(n.clone(), "memfd");
    let flag = std::env::temp_dir().join(format!("hugeshm-stop-{}-shrink", std::process::id()));
    let child = cmd(&[
        "create",
        &n,
        "--size",
        "64M",
        "--backend",
        "memfd",
        "--page-size",
        "2m",
        "--policy",
        "only",
        "--hold",
    ])
    .env(STOP_AT_ENV, format!("name-claimed:{}", flag.display()))
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    while !flag.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never reached");
        std::thread::sleep(Duration::from_millis(5));
    }
    let nr = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";
    let total: u64 = std::fs::read_to_string(nr).unwrap().trim().parse().unwrap();
    std::fs::write(nr, "0").unwrap();
    std::fs::remove_file(&flag).unwrap();
    let out = child.wait_with_output().unwrap();
    std::fs::write(nr, total.to_string()).unwrap();
    let err = fails(out, "create with the pool taken away");
    println!("pool shrunk: {err}");
    assert!(
        err.contains("2 MiB pages: required 32, available 0"),
        "{err}"
    );
    assert!(err.contains("the kernel refused"), "{err}");
    assert!(err.contains("to fix: sysctl -w vm.nr_hugepages="), "{err}");
    assert!(
        !std::path::Path::new(&format!("/dev/shm/hugeshm-memfd.{n}")).exists(),
        "the record is taken back"
    );
    pool.finish();
}

/// A file system mounted on a fresh directory, unmounted and removed on
/// drop.
pub(crate) struct TempMount(pub(crate) PathBuf);

impl TempMount {
    pub(crate) fn new(fstype: &str, options: &str) -> TempMount {
        let dir = std::env::temp_dir().join(format!(
            "hugeshm-{fstype}-{}-{}",
            std::process::id(),
            options.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", fstype, "-o", options, fstype])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "mount {fstype}");
        TempMount(dir)
    }
}

impl Drop for TempMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A tmpfs that fills up after the space check and before the pre-fault
/// (someone else wrote a file meanwhile): the pre-fault's refusal is
/// NoSpace with the numbers, never SIGBUS, and the region's file is gone.
#[test]
fn tmpfs_filled_during_create_is_no_space_not_sigbus() {
    let Some(_pool) = live!() else { return };
    let tiny = TempMount::new("tmpfs", "size=4m");
    let flag = std::env::temp_dir().join(format!("hugeshm-stop-{}-fill", std::process::id()));
    let name = format!("fault-fill-{}", std::process::id());
    let dir = tiny.0.display().to_string();
    let child = cmd(&[
        "create",
        &name,
        "--backend",
        "posix",
        "--dir",
        &dir,
        "--size",
        "3M",
        "--page-size",
        "4k",
        "--policy",
        "only",
        // From 2 threads the pre-fault allocates the pages (no fallocate).
        "--prefault-threads",
        "4",
    ])
    .env(STOP_AT_ENV, format!("name-claimed:{}", flag.display()))
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    while !flag.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "never reached");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(tiny.0.join("filler"), vec![7u8; 2 << 20]).unwrap();
    std::fs::remove_file(&flag).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = fails(out, "create on a tmpfs filled meanwhile");
    println!("{err}");
    assert!(err.contains("not enough space on tmpfs"), "{err}");
    assert!(err.contains("remount,size="), "{err}");
    let left: Vec<_> = std::fs::read_dir(&tiny.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("filler")], "{left:?}");
}
