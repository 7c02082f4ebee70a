//! A region written by this process is read by a child process: spawned
//! children attach by name (sysv, hugetlbfs, posix) or by /proc/PID/fd/N
//! (memfd); a forked child inherits an anon region. While a child holds a
//! region, `remove` refuses and names the pids.
//!
//! Children are this test binary re-executed with `HUGESHM_REGION_CHILD`
//! set, running only the `child_helper` test.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::*;
use hugeshm_region::{
    remove, Backend, Locator, PageSize, Policy, Region, RegionBuilder, RegionError,
};
use hugeshm_testkit::HostState;

const CHILD_ENV: &str = "HUGESHM_REGION_CHILD";
const CHILD_OK: &str = "HUGESHM-CHILD-OK";

/// Offsets of the 16-byte probes in every region (start, across page
/// boundaries, end; never overlapping).
fn offsets(len: usize) -> Vec<usize> {
    let m = MIB2 as usize;
    let mut all = vec![0, 4088, 4104, m - 8, m + 8, len / 2 + 40, len - 16];
    all.sort_unstable();
    let mut out: Vec<usize> = Vec::new();
    for o in all {
        if o + 16 <= len && out.last().is_none_or(|&p| p + 16 <= o) {
            out.push(o);
        }
    }
    out
}

fn pattern(off: usize, salt: u8) -> [u8; 16] {
    let mut p = [0u8; 16];
    for (i, b) in p.iter_mut().enumerate() {
        *b = (off as u64)
            .wrapping_mul(31)
            .wrapping_add(i as u64 * 7 + salt as u64) as u8;
    }
    p
}

/// The child: attach as told, check the parent's bytes, write its own,
/// report "ok PID", hold the region until stdin closes.
#[test]
#[ignore = "helper: its parent test runs it"]
fn child_helper() {
    let Some(spec) = helper_spec(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, ':');
    let how = parts.next().unwrap();
    let a = parts.next().unwrap().to_owned();
    let b = parts.next().unwrap_or("").to_owned();
    let mut region = match how {
        "name" => {
            let backend: Backend = a.parse().unwrap();
            let mut l = Locator::new(&b, backend);
            if let Some((name, dir)) = b.split_once('@') {
                l = Locator::new(name, backend).directory(dir);
            }
            l.attach().unwrap()
        }
        "path" => Region::attach_path(&a).unwrap(),
        other => panic!("unknown child mode {other}"),
    };
    for off in offsets(region.data_len()) {
        let mut buf = [0u8; 16];
        region.read_at(off, &mut buf).unwrap();
        assert_eq!(buf, pattern(off, 1), "child: bytes at {off}");
        region.write_at(off, &pattern(off, 2)).unwrap();
    }
    // libtest may print "test child_helper ... " on the same line: the
    // parent looks for the marker anywhere in a line.
    println!(
        "{CHILD_OK} {} {} {}",
        std::process::id(),
        region.len(),
        region.page_size()
    );
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(region);
}

struct Child {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    pid: u32,
    len: usize,
    page: u64,
}

fn spawn_child(spec: &str) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(helper_args("child_helper"))
        .env(CHILD_ENV, spec)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let line = loop {
        match lines.next() {
            Some(Ok(l)) if l.contains(CHILD_OK) => break l,
            Some(Ok(_)) => continue,
            _ => {
                let st = child.wait().unwrap();
                panic!("child {spec} failed: {st}");
            }
        }
    };
    let at = line.find(CHILD_OK).unwrap();
    let f: Vec<&str> = line[at..].split_whitespace().collect();
    Child {
        pid: f[1].parse().unwrap(),
        len: f[2].parse().unwrap(),
        page: f[3].parse().unwrap(),
        child,
        lines,
    }
}

impl Child {
    fn finish(mut self) {
        drop(self.child.stdin.take());
        // Drain the rest of its output so it never blocks on a full pipe.
        for _ in self.lines.by_ref() {}
        let st = self.child.wait().unwrap();
        assert!(st.success(), "child exited with {st}");
    }
}

fn write_parent(region: &mut Region) {
    for off in offsets(region.data_len()) {
        region.write_at(off, &pattern(off, 1)).unwrap();
    }
}

fn check_child_wrote(region: &Region) {
    for off in offsets(region.data_len()) {
        let mut buf = [0u8; 16];
        region.read_at(off, &mut buf).unwrap();
        assert_eq!(buf, pattern(off, 2), "parent: child's bytes at {off}");
    }
}

#[test]
fn child_attaches_by_name_and_remove_refuses_while_attached() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 8).unwrap();
    let mount = TempMount::new("hugetlbfs", "pagesize=2M");
    for (backend, page) in [
        (Backend::Sysv, PageSize::HUGE_2M),
        (Backend::Hugetlbfs, PageSize::HUGE_2M),
        (Backend::Posix, PageSize::Base),
        (Backend::Sysv, PageSize::Base),
    ] {
        let case = format!("{backend} x {page}");
        let before = HostState::capture().unwrap();
        let name = unique("share");
        let _cleanup = RemoveOnDrop::new(&name, backend, None);
        let (mut region, report) = RegionBuilder::new(6 << 20)
            .name(&name)
            .backend(backend)
            .page_size(page)
            .policy(Policy::Only)
            .create()
            .unwrap();
        write_parent(&mut region);
        let child = spawn_child(&format!("name:{backend}:{name}"));
        assert_eq!(child.len, region.len(), "{case}");
        assert_eq!(child.page, report.verified_page_size_bytes, "{case}");
        check_child_wrote(&region);

        // Both of us have it mapped: remove refuses, naming both pids.
        let err = remove(&name, backend).unwrap_err();
        let RegionError::InUse { pids, nattch, .. } = &err else {
            panic!("{case}: {err}");
        };
        assert!(pids.contains(&child.pid), "{case}: {err}");
        assert!(pids.contains(&std::process::id()), "{case}: {err}");
        if backend == Backend::Sysv {
            assert_eq!(*nattch, Some(2), "{case}");
        }
        println!("{case}: {err}");
        child.finish();

        // Dropping keeps the named object; attach again by name sees the
        // bytes; remove succeeds once nobody has it mapped.
        drop(region);
        let again = Region::attach(&name, backend).unwrap();
        check_child_wrote(&again);
        assert_eq!(again.page_size(), report.verified_page_size_bytes, "{case}");
        assert!(
            remove(&name, backend).is_err(),
            "{case}: still attached by us"
        );
        drop(again);
        let removed = remove(&name, backend).unwrap();
        assert_eq!(removed.len(), 1, "{case}: {removed:?}");
        assert!(matches!(
            remove(&name, backend),
            Err(RegionError::NotFound { .. })
        ));
        assert_no_leaks(&before, &case);
    }
    drop(mount);
    pool.finish();
}

#[test]
fn child_attaches_memfd_through_proc_fd() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 4).unwrap();
    let before = HostState::capture().unwrap();
    for page in [PageSize::HUGE_2M, PageSize::Base] {
        let (mut region, report) = RegionBuilder::new(4 << 20)
            .name("memfd-share")
            .backend(Backend::Memfd)
            .page_size(page)
            .policy(Policy::Only)
            .create()
            .unwrap();
        let path: PathBuf = region.path().unwrap();
        assert_eq!(report.path.as_deref(), Some(path.to_str().unwrap()));
        write_parent(&mut region);
        let child = spawn_child(&format!("path:{}:", path.display()));
        assert_eq!(child.page, report.verified_page_size_bytes);
        check_child_wrote(&region);
        child.finish();
        // Held by us: remove refuses (the record stays).
        assert!(matches!(
            remove("memfd-share", Backend::Memfd),
            Err(RegionError::InUse { .. })
        ));
        region.destroy().unwrap();
    }
    assert_no_leaks(&before, "memfd");
    pool.finish();
}

#[test]
fn forked_child_shares_anon_region() {
    let Some(pool) = live!() else {
        return;
    };
    pool.ensure_free(MIB2, 4).unwrap();
    let before = HostState::capture().unwrap();
    for page in [PageSize::HUGE_2M, PageSize::Base] {
        let (mut region, report) = RegionBuilder::new(4 << 20)
            .backend(Backend::Anon)
            .page_size(page)
            .policy(Policy::Only)
            .create()
            .unwrap();
        assert_eq!(report.verified_page_size_bytes, page.bytes().unwrap());
        write_parent(&mut region);
        let offs = offsets(region.data_len());
        // SAFETY: the child only reads and writes the region (volatile
        // byte copies, no allocation: the patterns live on the stack) and
        // leaves with _exit, so it never touches state another thread of
        // this process might have held locked at fork time.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut code = 0;
            for &off in &offs {
                let mut buf = [0u8; 16];
                if region.read_at(off, &mut buf).is_err() || buf != pattern(off, 1) {
                    code = 1;
                }
                let p = pattern(off, 2);
                // SAFETY: off + 16 <= data_len (offsets() filters), inside
                // the live shared mapping inherited from the parent.
                unsafe {
                    std::ptr::copy_nonoverlapping(p.as_ptr(), region.data_ptr().add(off), 16)
                };
            }
            // SAFETY: leaving the forked child without running destructors
            // or atexit handlers of the parent's state.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child; status is a valid out pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(rc, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status}"
        );
        check_child_wrote(&region);
        region.destroy().unwrap();
    }
    assert_no_leaks(&before, "anon fork");
    pool.finish();
}

/// A forked child that drops its inherited copy of a named memfd region
/// leaves the parent's shared lock and the record alone: a third process
/// still attaches by name at once (before, the child's exclusive probe on
/// the shared open file description turned the parent's lock exclusive,
/// and attachers timed out).
#[test]
fn forked_child_drops_named_memfd_and_others_still_attach() {
    let Some(pool) = live!() else {
        return;
    };
    let before = HostState::capture().unwrap();
    let name = unique("fork-drop");
    let (mut region, _) = RegionBuilder::new(4 << 20)
        .name(&name)
        .backend(Backend::Memfd)
        .page_size(PageSize::Base)
        .policy(Policy::Only)
        .create()
        .unwrap();
    write_parent(&mut region);
    // SAFETY: glibc makes malloc usable after fork; the child drops the
    // region (unmap, close, the last-holder check) and leaves with _exit,
    // printing nothing.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        drop(region);
        // SAFETY: leaving the forked child without running the parent's
        // destructors or atexit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child; status is a valid out pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    let info = Locator::new(&name, Backend::Memfd).inspect().unwrap();
    assert!(info.held, "the parent still holds it: {info:?}");
    // The parent's lock is still shared: a new open file description of
    // the memfd (as an attacher opens it, through /proc) takes a shared
    // lock at once, where an exclusive one would refuse it (and attachers
    // would wait it out, then fail).
    let memfd = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            std::fs::read_link(p).is_ok_and(|t| {
                let t = t.to_string_lossy();
                t.starts_with("/memfd:") && t.contains(&name)
            })
        })
        .unwrap_or_else(|| panic!("no memfd of {name} in /proc/self/fd"));
    let other = std::fs::File::open(&memfd).unwrap();
    // SAFETY: flock on a descriptor this test owns; no memory is passed.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&other),
            libc::LOCK_SH | libc::LOCK_NB,
        )
    };
    assert_eq!(
        rc,
        0,
        "a shared lock is refused: {}",
        std::io::Error::last_os_error()
    );
    drop(other);
    let child = spawn_child(&format!("name:memfd:{name}"));
    check_child_wrote(&region);
    child.finish();
    region.destroy().unwrap();
    assert!(matches!(
        Locator::new(&name, Backend::Memfd).inspect(),
        Err(RegionError::NotFound { .. })
    ));
    assert_no_leaks(&before, "memfd fork drop");
    pool.finish();
}
