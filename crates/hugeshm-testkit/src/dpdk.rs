//! A real DPDK application for the doctor's tests: `dpdk-testpmd` (Debian
//! package `dpdk-dev`) on a null device, no NIC, in interactive mode so that
//! it stays up until its stdin closes.
//!
//! `--in-memory` keeps its huge pages in memfds (no hugetlbfs mount, no
//! files left behind); `--single-file-segments` makes one memfd per memory
//! segment list, mapped page by page at growing offsets. 2048 mbufs keep it
//! within a 64 MiB `-m`. Without `--in-memory` it keeps its pages in files
//! of a hugetlbfs mount ([`crate::HugetlbfsMount`], made and removed by the test).
//!
//! Each start has its own `--file-prefix`; its runtime directory
//! (`/var/run/dpdk/PREFIX`) and its page files are removed on drop.

use crate::logged::LoggedChild;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The testpmd binary, where it is installed.
pub fn testpmd_path() -> Option<PathBuf> {
    ["/usr/bin/dpdk-testpmd", "/usr/local/bin/dpdk-testpmd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Returns true (after [`crate::skip`]) when `dpdk-testpmd` is not
/// installed.
pub fn skip_unless_testpmd(test: &str) -> bool {
    if testpmd_path().is_some() {
        return false;
    }
    crate::skip(
        test,
        "dpdk-testpmd is not installed (Debian package dpdk-dev)",
    );
    true
}

/// How testpmd is started.
#[derive(Debug, Clone)]
pub struct TestpmdOptions {
    /// `-m`: MiB of huge page memory.
    pub memory_mib: u32,
    /// `--socket-mem MIB` (node 0) instead of `-m`.
    pub socket_mem: bool,
    /// `--huge-dir DIR` (a hugetlbfs mount, [`crate::HugetlbfsMount`]) instead of `--in-memory`.
    pub huge_dir: Option<PathBuf>,
    /// `--single-file-segments`.
    pub single_file_segments: bool,
    /// Run as this uid and gid (through `setpriv`, no supplementary groups);
    /// `None`: as the caller (root).
    pub user: Option<u32>,
    /// The soft and hard `RLIMIT_MEMLOCK` it starts with (through
    /// `prlimit`); `None`: inherited. `Some(None)`: unlimited.
    pub memlock: Option<Option<u64>>,
}

impl Default for TestpmdOptions {
    fn default() -> Self {
        TestpmdOptions {
            memory_mib: 64,
            socket_mem: false,
            huge_dir: None,
            single_file_segments: true,
            user: None,
            memlock: None,
        }
    }
}

impl TestpmdOptions {
    /// The memory part of its EAL arguments (as `advise --dpdk` reads them).
    pub fn eal_memory_args(&self) -> Vec<String> {
        let mut a: Vec<String> = match &self.huge_dir {
            Some(d) => vec!["--huge-dir".into(), d.display().to_string()],
            None => vec!["--in-memory".into()],
        };
        let opt = if self.socket_mem {
            "--socket-mem"
        } else {
            "-m"
        };
        a.extend([opt.to_owned(), self.memory_mib.to_string()]);
        if self.single_file_segments {
            a.push("--single-file-segments".into());
        }
        a
    }
}

/// A running testpmd; killed and reaped on drop.
pub struct Testpmd {
    child: LoggedChild,
    pid: u32,
    prefix: String,
    huge_dir: Option<PathBuf>,
    _dir: crate::TempDir,
}

static STARTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Testpmd {
    /// Starts it and waits (up to 60 s) until its huge page memory is
    /// mapped (its mbuf pool is made) and it waits at its prompt.
    pub fn start(o: &TestpmdOptions) -> Result<Testpmd, String> {
        let bin = testpmd_path().ok_or("dpdk-testpmd is not installed")?;
        let dir = crate::TempDir::new("testpmd");
        if let Some(uid) = o.user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid))
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
        }
        let log = dir.path().join("testpmd.log");
        let n = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("hugeshm-test-{}-{n}", std::process::id());
        let mut cmd = Command::new("prlimit");
        match o.memlock {
            Some(Some(b)) => {
                cmd.arg(format!("--memlock={b}:{b}"));
            }
            Some(None) => {
                cmd.arg("--memlock=unlimited:unlimited");
            }
            None => {}
        }
        cmd.arg("--");
        if let Some(uid) = o.user {
            cmd.args([
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
            ]);
        }
        cmd.arg(&bin)
            .args(["-l", "0-1", "--no-pci", "--vdev", "net_null0"])
            .args(["--file-prefix", &prefix])
            .args(o.eal_memory_args());
        cmd.args(["--", "-i", "--total-num-mbufs=2048"])
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .stderr(Stdio::from(
                std::fs::File::options()
                    .append(true)
                    .open(&log)
                    .map_err(|e| e.to_string())?,
            ));
        let child = cmd.spawn().map_err(|e| format!("spawn testpmd: {e}"))?;
        // prlimit and setpriv exec, so the child's pid is testpmd's.
        let pid = child.id();
        let mut t = Testpmd {
            child: LoggedChild::new(child, &log),
            pid,
            prefix,
            huge_dir: o.huge_dir.clone(),
            _dir: dir,
        };
        t.child
            .wait_ready("testpmd", |log| log.contains("testpmd>"))?;
        Ok(t)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What it printed so far.
    pub fn log(&self) -> String {
        self.child.log()
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        // Closing stdin ends interactive mode; killed in case it does not.
        self.child.stop();
        // What it leaves: its runtime directory (as root) and, without
        // --in-memory, its page files, which keep their pages.
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{}", self.prefix));
        if let Some(dir) = &self.huge_dir {
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&self.prefix) {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }
    }
}
