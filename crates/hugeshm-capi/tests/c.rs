//! The C side, compiled with `cc` against the checked-in header and the
//! `libhugeshm.so` that `cargo test` built for this package, and run:
//!
//! * `tests/c/share.c nulls`: NULL and invalid arguments are errors;
//! * two unrelated C processes share a SysV region on 2 MiB pages by name
//!   (A creates and writes, B attaches, checks the header and the data and
//!   replies, `hugeshm_remove` refuses while A holds it, A checks and
//!   destroys) — root only;
//! * `policy only` on a pool one page short: `POOL_SHORTFALL` with the
//!   numbers and the fix, nothing created;
//! * a region nobody holds is refused as orphaned, then reused with its
//!   contents when the options ask (`hugeshm_options_set_reclaim`);
//! * `examples/c/region.c` builds and runs;
//! * the library exports exactly the functions the header declares.
//!
//! Live parts hold the pool lock (hugeshm-testkit) and compare the host's
//! shared-memory state before and after.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use hugeshm_testkit::{is_root, live, observe};

const MIB2: u64 = 2 << 20;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of the `libhugeshm.so` that `cargo test` built for this
/// run: `target/<profile>/deps`, beside this test binary. (Cargo copies
/// the library up to `target/<profile>/` only when the library itself is
/// what was asked for, as in `cargo build`; for `cargo test` it stays in
/// `deps/`, so `target/<profile>/libhugeshm.so` may be stale or missing.)
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary in a directory").to_owned();
    let so = deps.join("libhugeshm.so");
    assert!(
        so.is_file(),
        "{} not found: `cargo test -p hugeshm-capi` builds it (crate-type cdylib)",
        so.display()
    );
    deps
}

/// Compiles C sources into an executable under the test's temporary
/// directory, linked to libhugeshm.so with an rpath.
fn compile(src: &Path, name: &str) -> PathBuf {
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hugeshm-capi-c");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let lib = lib_dir();
    let out = Command::new("cc")
        .args(["-std=c99", "-D_DEFAULT_SOURCE", "-O1", "-g"])
        .args(["-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg("-lhugeshm")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .expect("run cc (gcc is needed for the C tests)");
    assert!(
        out.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `tests/c/share.c`, compiled once per test process.
fn share_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile(&crate_dir().join("tests/c/share.c"), "share"))
        .clone()
}

/// A command running a C program of these tests. `cargo test` puts
/// `target/<profile>` on `LD_LIBRARY_PATH`, which the dynamic loader
/// searches before the rpath, so pin the library of this run.
fn c_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", lib_dir());
    cmd
}

/// Runs to completion; panics with its output unless it exits 0.
#[track_caller]
fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    println!("{text}");
    out
}

fn unique(tag: &str) -> String {
    format!("capi-{tag}-{}", std::process::id())
}

/// `(nr, free, resv)` of the 2 MiB pool, `None` when the kernel has none.
fn pool_2m() -> Option<(u64, u64, u64)> {
    let dir = Path::new("/sys/kernel/mm/hugepages/hugepages-2048kB");
    let rd = |f: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((
        rd("nr_hugepages")?,
        rd("free_hugepages")?,
        rd("resv_hugepages")?,
    ))
}

/// Kills a still-running creator and removes the SysV region, so a failing
/// assertion leaves nothing behind.
struct Cleanup {
    name: String,
    child: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = hugeshm_region::remove(&self.name, hugeshm_region::Backend::Sysv);
    }
}

#[test]
fn c_null_and_invalid_arguments_are_errors() {
    let exe = share_exe();
    let pool = observe!();
    let out = run_ok(c_command(&exe).arg("nulls"), "share nulls");
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK nulls"));
    pool.finish();
}

#[test]
fn c_orphaned_region_is_refused_then_reused_on_request() {
    let exe = share_exe();
    let pool = observe!();
    let name = unique("reclaim");
    let out = run_ok(c_command(&exe).args(["reclaim", &name]), "share reclaim");
    let _ = hugeshm_region::remove(&name, hugeshm_region::Backend::Posix);
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK reclaim"));
    pool.finish();
}

/// The same in a directory of its own on /dev/shm: the orphan's fix names
/// the directory (`hugeshm_remove_in`), which alone finds it.
#[test]
fn c_orphaned_region_in_a_directory_is_named_with_it() {
    let exe = share_exe();
    let pool = observe!();
    let dir = hugeshm_testkit::TempDir::under(Path::new("/dev/shm"), "capi-dir");
    let d = dir.path().display().to_string();
    let name = unique("reclaim-dir");
    let out = run_ok(
        c_command(&exe).args(["reclaim", &name, &d]),
        "share reclaim DIR",
    );
    let _ = hugeshm_region::Locator::new(&name, hugeshm_region::Backend::Posix)
        .directory(dir.path())
        .remove();
    assert!(String::from_utf8_lossy(&out.stdout).contains("OK reclaim"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    drop(dir);
    pool.finish();
}

#[test]
fn c_two_processes_share_a_region_by_name() {
    let exe = share_exe();
    let Some(pool) = live!() else { return };
    let pages = 4;
    if let Err(e) = pool.ensure_free(MIB2, pages) {
        panic!("cannot reserve {pages} x 2 MiB pages: {e}");
    }
    let name = unique("share");
    let size = pages * MIB2;
    let mut cleanup = Cleanup {
        name: name.clone(),
        child: None,
    };

    // Process A: creates, writes, waits for a line on stdin.
    let mut a = c_command(&exe)
        .args(["create", &name, &size.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn creator");
    let mut a_out = BufReader::new(a.stdout.take().unwrap());
    let mut a_in = a.stdin.take().unwrap();
    cleanup.child = Some(a);
    let mut line = String::new();
    a_out.read_line(&mut line).unwrap();
    println!("creator: {line}");
    assert!(
        line.starts_with("READY "),
        "creator did not get ready: {line:?}"
    );
    let a_pid: u32 = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .expect("pid in READY line");
    let seg_key = hugeshm_region::sysv_key(&name);
    let segment = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    assert!(
        segment.lines().skip(1).any(|l| l
            .split_whitespace()
            .next()
            .and_then(|k| k.parse::<i32>().ok())
            == Some(seg_key)),
        "no SysV segment with key {seg_key:#x}:\n{segment}"
    );

    // Process B: not A's child; attaches by name, checks, replies.
    let out = run_ok(
        c_command(&exe).args(["attach", &name, &a_pid.to_string()]),
        "share attach",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK attacher"), "{text}");
    let via = if hugeshm_sys::procmap_query_supported() {
        "PROCMAP_QUERY"
    } else {
        "smaps"
    };
    assert!(
        text.contains(&format!("page size check: {MIB2} via {via}")),
        "{text}"
    );

    // While A holds it, removing it by name is refused and names A.
    let out = run_ok(
        c_command(&exe).args(["remove", &name, "in_use"]),
        "share remove (in use)",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&a_pid.to_string()),
        "in-use message names the creator {a_pid}: {text}"
    );

    // A checks the reply and destroys.
    writeln!(a_in, "GO").unwrap();
    drop(a_in);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut a_out, &mut rest).unwrap();
    let status = cleanup.child.take().unwrap().wait().unwrap();
    println!("creator: {rest}");
    assert!(status.success(), "creator failed: {status}\n{rest}");
    assert!(rest.contains("OK creator"), "{rest}");

    // Gone: removing again finds nothing.
    run_ok(
        c_command(&exe).args(["remove", &name, "not_found"]),
        "share remove (gone)",
    );
    drop(cleanup);
    pool.finish();
}

/// `hugeshm_options_set_numa("bind=0")` on this host's node 0: every page
/// there, as `hugeshm_region_node_bytes` says; bad strings are refused.
/// (The 2-node cases run in the guest: hugeshm's guest_numa_region test.)
#[test]
fn c_numa_bind_places_and_reports() {
    // Root for the 2 MiB pool.
    let Some(pool) = live!() else { return };
    pool.ensure_free(MIB2, 4).expect("4 free 2 MiB pages");
    let out = run_ok(
        c_command(&share_exe()).args(["numa", "0", "4"]),
        "share numa",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK numa"), "{text}");
    pool.finish();
}

#[test]
fn c_pool_shortfall_is_an_error_with_numbers_and_fix() {
    let exe = share_exe();
    // Root gives the pool a few pages, so that the numbers are not all 0
    // (restored at the end); others only hold the lock, so that no other
    // test changes the pool meanwhile.
    let pool = observe!();
    if is_root() {
        pool.ensure_free(MIB2, 2).expect("2 free 2 MiB pages");
    }
    let Some((_, free, resv)) = pool_2m() else {
        return pool.skip("no 2 MiB pool");
    };
    let name = unique("short");
    let _cleanup = Cleanup {
        name: name.clone(),
        child: None,
    };
    let required = free.saturating_sub(resv) + 1;
    let out = run_ok(
        c_command(&exe).args(["shortfall", &name, &required.to_string()]),
        "share shortfall",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK shortfall"), "{text}");
    assert!(
        text.contains(&format!("required {required}")),
        "message has the numbers: {text}"
    );
    pool.finish();
}

#[test]
fn c_example_builds_and_runs() {
    let exe = compile(&crate_dir().join("examples/c/region.c"), "region");
    let pool = observe!();
    let name = unique("example");
    // posix on base pages: needs neither root nor huge pages.
    let out = run_ok(
        c_command(&exe).args([&name, "4", "posix", "4k", "off"]),
        "example region",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("size            4194304 bytes"), "{text}");
    assert!(text.contains("reads \"hello from pid"), "{text}");
    assert!(text.contains("destroyed"), "{text}");
    pool.finish();
}

/// `nm -D`: the `hugeshm_*` functions the library exports are exactly the
/// ones the header declares.
#[test]
fn library_exports_what_the_header_declares() {
    let so = lib_dir().join("libhugeshm.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed");
    let mut exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_addr, kind, sym) = (f.next()?, f.next()?, f.next()?);
            (kind == "T" && sym.starts_with("hugeshm_")).then(|| sym.to_owned())
        })
        .collect();
    exported.sort();
    let header = std::fs::read_to_string(crate_dir().join("include/hugeshm.h")).unwrap();
    let mut declared: Vec<String> = header
        .lines()
        .filter(|l| !l.starts_with("//") && !l.starts_with(' ') && l.contains('('))
        .filter_map(|l| l.split('(').next()?.rsplit([' ', '*']).next())
        .filter(|n| n.starts_with("hugeshm_"))
        .map(str::to_owned)
        .collect();
    declared.sort();
    assert_eq!(exported, declared);
}
