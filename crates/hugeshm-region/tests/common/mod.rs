//! Shared helpers of the live tests (the harness is the testkit's:
//! `live!()`, `assert_no_leaks`): 1 GiB parts, temporary mounts (always
//! unmounted), unique names, children of the test binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

#[allow(unused_imports)]
pub use hugeshm_testkit::{
    assert_no_leaks, helper_args, helper_spec, live, observe, test_name, Lack, Live,
};

pub const MIB2: u64 = 2 << 20;
pub const GIB: u64 = 1 << 30;

/// Reserves `pages` 1 GiB pages for the test's 1 GiB part if the kernel
/// can; skips that part where the host has no such pages (on the
/// allow-list: [`Lack::GiganticPage`]). Any other failure (the pool's
/// files unreadable or unwritable) fails the test.
pub fn try_gigantic(pool: &Live, pages: u64) -> bool {
    if !pool.page_sizes().contains(&GIB) {
        pool.skip_part(
            "1 GiB",
            Lack::GiganticPage,
            "the kernel offers no 1 GiB pages",
        );
        return false;
    }
    match pool.ensure_free(GIB, pages) {
        Ok(()) => true,
        Err(e) if !e.host_has_none() => panic!("reserving {pages} x 1 GiB: {e}"),
        Err(e) => {
            pool.skip_part(
                "1 GiB",
                Lack::GiganticPage,
                format_args!("cannot reserve {pages} x 1 GiB: {e}"),
            );
            false
        }
    }
}

/// Whether `setpriv` (util-linux) is missing, which [`Kid::spawn_as_nobody`]
/// needs (after a skip of `test`).
pub fn skip_without_setpriv(test: &str) -> bool {
    let missing = Command::new("setpriv").arg("--version").output().is_err();
    if missing {
        hugeshm_testkit::skip(test, "no setpriv (util-linux)");
    }
    missing
}

/// A unique region name for this test process.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A file system mounted on a fresh directory for the life of the value;
/// unmounted (lazily if busy) and the directory removed on drop, also when
/// the test panics.
pub struct TempMount {
    pub dir: PathBuf,
}

impl TempMount {
    pub fn new(fstype: &str, options: &str) -> TempMount {
        let dir = std::env::temp_dir().join(unique(&format!("mnt-{fstype}")));
        std::fs::create_dir_all(&dir).expect("mkdir mount point");
        let st = Command::new("mount")
            .args(["-t", fstype, "-o", options, "none"])
            .arg(&dir)
            .status()
            .expect("run mount");
        if !st.success() {
            let _ = std::fs::remove_dir(&dir);
            panic!(
                "mount -t {fstype} -o {options} {} failed: {st}",
                dir.display()
            );
        }
        TempMount { dir }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Entries in the mounted directory.
    pub fn entries(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TempMount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("umount {} failed; detaching lazily", self.dir.display());
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `(nr, free, resv)` of a page size from sysfs.
pub fn pool_counts(page: u64) -> (u64, u64, u64) {
    let dir = format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page / 1024);
    let rd = |f: &str| -> u64 {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    (
        rd("nr_hugepages"),
        rd("free_hugepages"),
        rd("resv_hugepages"),
    )
}

/// Asserts that `r` is [`RegionError::Untrusted`] naming uid 65534 as the
/// owner, with a fix that accepts that owner; returns the fix as the CLI
/// renders it.
#[track_caller]
pub fn assert_untrusted_65534(what: &str, r: Result<(), hugeshm_region::RegionError>) -> String {
    let err = r.expect_err(what);
    let hugeshm_region::RegionError::Untrusted { owner, reason, .. } = &err else {
        panic!("{what}: {err}");
    };
    assert_eq!(owner.uid, 65534, "{what}: {err}");
    assert!(reason.contains("uid 65534"), "{what}: {reason}");
    let fix = err.fix().unwrap().render(hugeshm_region::Renderer::Cli);
    assert!(fix.contains("--owner 65534"), "{what}: {fix}");
    fix
}

/// Removes a raw SysV segment on drop.
pub struct ShmGuard(pub i32);

impl Drop for ShmGuard {
    fn drop(&mut self) {
        let _ = hugeshm_sys::shm_remove(self.0);
    }
}

/// Removes a named region on drop (ignoring "not found"), so a failing
/// assertion never leaves a segment or file behind. Declare it before the
/// region: locals drop in reverse order, so the region is unmapped first.
pub struct RemoveOnDrop(pub Option<hugeshm_region::Locator>);

impl RemoveOnDrop {
    pub fn new(name: &str, backend: hugeshm_region::Backend, dir: Option<&Path>) -> Self {
        if !backend.is_named() {
            return RemoveOnDrop(None);
        }
        let mut l = hugeshm_region::Locator::new(name, backend);
        if let Some(d) = dir {
            l = l.directory(d);
        }
        RemoveOnDrop(Some(l))
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(l) = self.0.take() {
            match l.remove() {
                Ok(objs) if std::thread::panicking() => {
                    eprintln!("cleanup after panic: removed {objs:?}")
                }
                _ => {}
            }
        }
    }
}

/// The directory a test region of `backend` lives in: the hugetlbfs mount
/// for the hugetlbfs backend, "" (the backend's default) otherwise.
pub fn dir_for(backend: hugeshm_region::Backend, mount: &TempMount) -> String {
    if backend == hugeshm_region::Backend::Hugetlbfs {
        mount.path().display().to_string()
    } else {
        String::new()
    }
}

/// A unique name tagged `tag`, its directory ([`dir_for`]) and a guard
/// that removes the region when the test ends, passed or not.
pub fn named(
    tag: &str,
    backend: hugeshm_region::Backend,
    mount: &TempMount,
) -> (String, String, RemoveOnDrop) {
    let name = unique(tag);
    let dir = dir_for(backend, mount);
    let cleanup = RemoveOnDrop::new(
        &name,
        backend,
        Some(Path::new(&dir)).filter(|_| !dir.is_empty()),
    );
    (name, dir, cleanup)
}

/// A re-executed copy of this test binary running one child test function,
/// talking over stdin/stdout lines (children print `MARKER rest`; libtest
/// may put its own text before it on the line).
pub struct Kid {
    pub child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    stdin: Option<std::process::ChildStdin>,
    pub pid: u32,
    what: String,
}

impl Kid {
    /// Runs the `#[ignore]`d helper test `test_fn` of this binary with
    /// `env=spec`.
    pub fn spawn(test_fn: &str, env: &str, spec: &str) -> Kid {
        Self::spawn_with(
            Command::new(std::env::current_exe().unwrap()),
            test_fn,
            env,
            spec,
        )
    }

    /// Like [`Kid::spawn`], as uid/gid 65534 without groups or capabilities.
    pub fn spawn_as_nobody(test_fn: &str, env: &str, spec: &str) -> Kid {
        Self::spawn_with(Self::nobody("--clear-groups"), test_fn, env, spec)
    }

    /// [`Kid::spawn_as_nobody`] in the group `vm.hugetlb_shm_group` names
    /// (as a supplementary group): what `shmget(SHM_HUGETLB)` needs of a
    /// user without `CAP_IPC_LOCK` (`RLIMIT_MEMLOCK` is not enough: Linux
    /// 6.18 refused 4 MiB with 8 MiB of it, `EPERM`).
    pub fn spawn_as_nobody_in_hugetlb_shm_group(test_fn: &str, env: &str, spec: &str) -> Kid {
        let gid = std::fs::read_to_string("/proc/sys/vm/hugetlb_shm_group").unwrap();
        let groups = format!("--groups={}", gid.trim());
        Self::spawn_with(Self::nobody(&groups), test_fn, env, spec)
    }

    /// `setpriv` running this test binary as uid/gid 65534 without
    /// capabilities, with `groups` (`--clear-groups` or `--groups=...`).
    fn nobody(groups: &str) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            groups,
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(std::env::current_exe().unwrap());
        cmd
    }

    fn spawn_with(mut cmd: Command, test_fn: &str, env: &str, spec: &str) -> Kid {
        use std::io::BufRead;
        let mut child = cmd
            .args(helper_args(test_fn))
            .env(env, spec)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child");
        let out = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        Kid {
            pid: child.id(),
            child,
            lines: std::io::BufReader::new(out).lines(),
            stdin,
            what: format!("{env}={spec}"),
        }
    }

    /// The rest of the first line (from now on) that contains `marker`.
    pub fn expect(&mut self, marker: &str) -> String {
        for line in self.lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(marker) {
                return line[at + marker.len()..].trim().to_owned();
            }
        }
        let st = self.child.wait().unwrap();
        panic!(
            "child {} ended ({st}) without printing {marker:?}",
            self.what
        );
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        let _ = self.child.wait();
    }

    /// Closes stdin, drains the output, waits; panics unless it succeeded.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        for _ in self.lines.by_ref() {}
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child {} exited with {st}", self.what);
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// In a child: prints `marker rest` on its own line, flushed.
pub fn say(marker: &str, rest: &str) {
    use std::io::Write;
    println!("\n{marker} {rest}");
    std::io::stdout().flush().unwrap();
}

/// In a child: the next line from the parent (`None` at end of input).
pub fn hear() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim().to_owned()),
    }
}

/// `PageTables` from /proc/meminfo, bytes.
pub fn page_tables_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("PageTables:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("PageTables in /proc/meminfo")
}
