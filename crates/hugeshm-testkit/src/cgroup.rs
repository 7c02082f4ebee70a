//! A throwaway hugetlb cgroup for live tests: a child of the cgroup v2
//! hierarchy that has the hugetlb controller (found in
//! `/proc/self/mountinfo`, never a fixed path), with `hugetlb.<size>.max`
//! set, and a way to run a command inside it. Removed on drop (its
//! processes killed first), also when a test fails; the controller is
//! disabled again in the parent if this enabled it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hugeshm_parse::hugetlb_cgroup::hugetlb_size_name;

/// A test cgroup with hugetlb limits.
#[derive(Debug)]
pub struct TestCgroup {
    dir: PathBuf,
    parent: PathBuf,
    enabled_controller: bool,
}

/// The mount point of the cgroup v2 hierarchy, from `/proc/self/mountinfo`.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        (fstype == "cgroup2").then(|| PathBuf::from(left.split_whitespace().nth(4).unwrap_or("")))
    })
}

impl TestCgroup {
    /// A new cgroup with `limits` (page size, bytes) for `hugetlb.<size>.max`;
    /// `None`, after [`crate::skip`] for `test`, where the kernel offers no
    /// hugetlb controller in a cgroup v2 hierarchy.
    pub fn new(test: &str, limits: &[(u64, u64)]) -> Option<TestCgroup> {
        Self::named(test, "", limits)
    }

    /// The same, named like a systemd service (`….service`), as the
    /// cgroup systemd makes for a unit: what a server's processes show in
    /// `/proc/PID/cgroup` when systemd runs it.
    pub fn service(test: &str, limits: &[(u64, u64)]) -> Option<TestCgroup> {
        Self::named(test, ".service", limits)
    }

    /// The cgroup the kubelet puts every pod under, made as the kubelet
    /// makes it: `name` (`kubepods.slice` for the systemd driver,
    /// `kubepods` for cgroupfs) at the root of the hierarchy, with
    /// `hugetlb.<size>.max` = `limits`. Panics where it exists already (a
    /// kubelet runs here: its limits are not the test's to change).
    pub fn kubepods(test: &str, name: &str, limits: &[(u64, u64)]) -> Option<TestCgroup> {
        Self::at(test, |_| name.to_string(), limits)
    }

    fn named(test: &str, suffix: &str, limits: &[(u64, u64)]) -> Option<TestCgroup> {
        Self::at(
            test,
            |test| {
                // A test's name as libtest gives it (`module::test`), as one word.
                let word: String = test
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '_' {
                            c
                        } else {
                            '-'
                        }
                    })
                    .collect();
                format!("hugeshm-test-{word}-{}{suffix}", std::process::id())
            },
            limits,
        )
    }

    fn at(test: &str, name: impl Fn(&str) -> String, limits: &[(u64, u64)]) -> Option<TestCgroup> {
        let Some(mount) = cgroup2_mount() else {
            crate::skip(test, "no cgroup v2 hierarchy mounted");
            return None;
        };
        let controllers =
            std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "hugetlb") {
            crate::skip(test, "the cgroup v2 hierarchy has no hugetlb controller");
            return None;
        }
        let parent = mount;
        let subtree = parent.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
        let enabled_controller = !enabled.split_whitespace().any(|c| c == "hugetlb");
        if enabled_controller {
            std::fs::write(&subtree, "+hugetlb").expect("enable the hugetlb controller");
        }
        let dir = parent.join(name(test));
        if let Err(e) = std::fs::create_dir(&dir) {
            if enabled_controller {
                let _ = std::fs::write(&subtree, "-hugetlb");
            }
            panic!("create the test cgroup {}: {e}", dir.display());
        }
        let cg = TestCgroup {
            dir,
            parent,
            enabled_controller,
        };
        for &(page, bytes) in limits {
            std::fs::write(
                cg.dir
                    .join(format!("hugetlb.{}.max", hugetlb_size_name(page))),
                bytes.to_string(),
            )
            .expect("set the hugetlb limit");
        }
        Some(cg)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `program args...` run inside the cgroup (through `sh`, which moves
    /// itself in, then execs).
    pub fn command(&self, program: impl AsRef<Path>, args: &[&str]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo $$ > \"$0\" && shift && exec \"$@\"")
            .arg(self.dir.join("cgroup.procs"))
            .arg("--")
            .arg(program.as_ref())
            .args(args);
        c
    }

    /// Sets `hugetlb.<size>.max` to `bytes`.
    pub fn set_limit(&self, page_size_bytes: u64, bytes: u64) {
        std::fs::write(
            self.dir.join(format!(
                "hugetlb.{}.max",
                hugetlb_size_name(page_size_bytes)
            )),
            bytes.to_string(),
        )
        .expect("set the hugetlb limit");
    }

    /// Sets `hugetlb.<size>.rsvd.max` (the reservation limit) to `bytes`;
    /// false where the kernel has no such file.
    pub fn set_rsvd_limit(&self, page_size_bytes: u64, bytes: u64) -> bool {
        std::fs::write(
            self.dir.join(format!(
                "hugetlb.{}.rsvd.max",
                hugetlb_size_name(page_size_bytes)
            )),
            bytes.to_string(),
        )
        .is_ok()
    }

    /// `hugetlb.<size>.events`' `max` count: faults refused by the limit.
    pub fn max_events(&self, page_size_bytes: u64) -> u64 {
        std::fs::read_to_string(self.dir.join(format!(
            "hugetlb.{}.events",
            hugetlb_size_name(page_size_bytes)
        )))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("max ").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = self.dir.join("cgroup.procs");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = std::fs::read_to_string(&procs).unwrap_or_default();
            if pids.trim().is_empty() {
                break;
            }
            for p in pids
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if let Some(pid) = rustix::process::Pid::from_raw(p) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            if Instant::now() > deadline {
                eprintln!(
                    "WARNING hugeshm-testkit: processes left in {}",
                    self.dir.display()
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "WARNING hugeshm-testkit: remove {}: {e}",
                self.dir.display()
            );
        }
        if self.enabled_controller {
            let _ = std::fs::write(self.parent.join("cgroup.subtree_control"), "-hugetlb");
        }
    }
}
