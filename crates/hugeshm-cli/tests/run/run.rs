//! `hugeshm run` against a real program: `tests/run/probe.c`, compiled here,
//! makes the mappings a server makes (shared anonymous, SysV, private,
//! small and big), reports what its own smaps says of each, execs a child
//! that reports whether the library reached it, and releases everything
//! the way a server does (munmap with the length it asked for).
//!
//! * Each pass-through and each change, under each option: big shared and
//!   SysV mappings pre-faulted by `--prefault`, small ones and private ones
//!   (without `--private`) untouched, the target's children clean.
//! * `--page-size 2m`: moved and rounded, and the server's own munmap of
//!   its unrounded length still works (the interposer's table).
//! * `--policy only` on a short pool: ENOMEM and the shortfall line;
//!   `try`: 4 KiB and one line.
//! * Refusals before the exec, with exit code 2: static, setuid, script,
//!   foreign ELF, a page size the kernel lacks, NUMA on one node (a
//!   fixture tree's, whatever this host has), a library others can write.
//! * The records: the next writer sweeps its user's records of dead
//!   processes (`segments` and what user 65534 plants: `records.rs`).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use hugeshm_testkit::{live, observe, run_library_built};
use serde_json::Value;

const M2: u64 = 2 << 20;

/// A directory every user can read (the server's user and 65534 run the
/// probe), holding what these tests build: in the cargo target directory,
/// so that nothing is left in /tmp (a static is never dropped).
pub(crate) fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("run-probe");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    })
}

/// `tests/run/probe.c` compiled with `cc` (`extra`: more flags), once per
/// test process (into a name of its own, then renamed in place: another
/// test process may be compiling the same).
fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let out = bin_dir().join(name);
    let tmp = bin_dir().join(format!(".{name}.{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run/probe.c");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&src)
        .args(extra)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {} failed", src.display());
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// Removes a file or directory when dropped (a setuid copy, a 0777
/// directory: nothing of the kind may outlive the test, failed or not).
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn probe() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| compile("probe", &[])).clone()
}

/// `hugeshm run OPTIONS -- PROGRAM ARGS` as a command; `--page-size keep`
/// unless OPTIONS name a page size (these tests are of what the probe asks
/// for; `run_defaults.rs` tests the default, the host's huge page size).
pub(crate) fn run_cmd(options: &[&str], program: &Path, args: &[&str]) -> Command {
    let mut all: Vec<&str> = vec!["run"];
    if !options.contains(&"--page-size") {
        all.extend(["--page-size", "keep"]);
    }
    all.extend_from_slice(options);
    run_default(&all[1..], program, args)
}

/// `hugeshm run OPTIONS -- PROGRAM ARGS` with OPTIONS as they are.
pub(crate) fn run_default(options: &[&str], program: &Path, args: &[&str]) -> Command {
    run_library_built().expect("libhugeshm_run.so");
    let mut all: Vec<&str> = vec!["run"];
    all.extend_from_slice(options);
    all.push("--");
    let mut c = common::cmd(&all);
    c.arg(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .env_remove("HUGESHM_RUN");
    c
}

/// What the probe said (its JSON lines), what was said on stderr, and how
/// it ended.
pub(crate) struct Ran {
    lines: Vec<Value>,
    pub(crate) stderr: String,
    pub(crate) code: Option<i32>,
}

impl Ran {
    fn op(&self, op: &str) -> Vec<&Value> {
        self.lines.iter().filter(|l| l["op"] == op).collect()
    }

    pub(crate) fn one(&self, op: &str) -> &Value {
        let v = self.op(op);
        assert_eq!(
            v.len(),
            1,
            "{op}: {:#?}\nstderr: {}",
            self.lines,
            self.stderr
        );
        v[0]
    }
}

pub(crate) fn ran(mut c: Command) -> Ran {
    let out = c.output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ran {
        lines: stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

pub(crate) fn kb(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Every mapping released the way the server released it.
fn all_freed(r: &Ran) {
    for f in r.op("free") {
        assert_eq!(f["rc"], 0, "{f}\nstderr: {}", r.stderr);
    }
}

#[test]
fn big_shared_memory_is_prefaulted_and_everything_else_passes_through() {
    // The probe's SysV segments and hugeshm run's records in /dev/shm are
    // host state other tests compare under the pool lock.
    let _pool = observe!();
    let args = [
        "shared:16m",
        "shared:4m",
        "private:16m",
        "shm:16m",
        "shm:4m",
        "child",
        "lib",
    ];
    // Without --prefault: nothing is faulted but what the probe touched.
    let plain = ran(run_cmd(&["--min-size", "8M"], &probe(), &args));
    assert_eq!(plain.code, Some(0), "{}", plain.stderr);
    for v in plain.op("shared").into_iter().chain(plain.op("shm")) {
        assert_eq!(kb(v, "resident_kb"), 4, "{v}");
    }
    // --prefault: the big shared mapping and the big segment, whole.
    let r = ran(run_cmd(
        &["--min-size", "8M", "--prefault"],
        &probe(),
        &args,
    ));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stderr, "", "nothing to say when all went as asked");
    let shared = r.op("shared");
    assert_eq!(kb(shared[0], "resident_kb"), 16 << 10, "{}", shared[0]);
    assert_eq!(
        kb(shared[1], "resident_kb"),
        4,
        "below --min-size: {}",
        shared[1]
    );
    let shm = r.op("shm");
    assert_eq!(kb(shm[0], "resident_kb"), 16 << 10, "{}", shm[0]);
    assert_eq!(kb(shm[1], "resident_kb"), 4, "{}", shm[1]);
    assert_eq!(
        kb(r.one("private"), "resident_kb"),
        4,
        "private without --private"
    );
    // The target has the library; the child it execs has neither the
    // library nor the variables.
    let libs = r.op("lib");
    let (child, me): (Vec<&&Value>, Vec<&&Value>) = libs
        .iter()
        .partition(|l| l["pid"] != libs.last().unwrap()["pid"]);
    assert_eq!(me[0]["loaded"], true, "{libs:?}");
    assert_eq!(
        me[0]["ld_preload"],
        Value::Null,
        "cleaned in the target too"
    );
    assert_eq!(child[0]["loaded"], false, "{libs:?}");
    assert_eq!(child[0]["ld_preload"], Value::Null);
    assert_eq!(child[0]["hugeshm_run"], false);
    all_freed(&r);
    // --private: the private mapping too.
    let r = ran(run_cmd(
        &["--min-size", "8M", "--prefault=2", "--private"],
        &probe(),
        &["private:16m", "private:4m"],
    ));
    let p = r.op("private");
    assert_eq!(kb(p[0], "resident_kb"), 16 << 10, "{}", r.stderr);
    assert_eq!(kb(p[1], "resident_kb"), 4);
    all_freed(&r);
    // --prefault=populate: one MAP_POPULATE mmap.
    let r = ran(run_cmd(
        &["--min-size", "8M", "--prefault=populate"],
        &probe(),
        &["shared:16m"],
    ));
    assert_eq!(kb(r.one("shared"), "resident_kb"), 16 << 10, "{}", r.stderr);
}

#[test]
fn a_wrapper_keeps_the_environment_and_only_the_target_changes() {
    // Records in /dev/shm: host state other tests compare under the lock.
    let _pool = observe!();
    // sh is not the target: it keeps the variables (its child needs them)
    // and its own mappings are not changed; the probe it execs is.
    let script = format!(
        "echo \"wrapper sees ${{HUGESHM_RUN:+HUGESHM_RUN}}\" >&2; exec {} shared:16m child",
        probe().display()
    );
    let r = ran(run_cmd(
        &["--target", "probe", "--min-size", "8M", "--prefault"],
        Path::new("/bin/sh"),
        &["-c", &script],
    ));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("wrapper sees HUGESHM_RUN"),
        "{}",
        r.stderr
    );
    assert_eq!(kb(r.one("shared"), "resident_kb"), 16 << 10);
    assert_eq!(r.one("lib")["loaded"], false);
    // A target named by path that the chain never execs: nothing changes.
    let r = ran(run_cmd(
        &["--target", "/bin/true", "--min-size", "8M", "--prefault"],
        &probe(),
        &["shared:16m"],
    ));
    assert_eq!(kb(r.one("shared"), "resident_kb"), 4);
}

#[test]
fn a_malformed_setting_leaves_the_process_as_it_is() {
    let lib = run_library_built().unwrap();
    let r = ran({
        let mut c = Command::new(probe());
        c.arg("shared:16m")
            .env("LD_PRELOAD", &lib)
            .env("HUGESHM_RUN", "v1;target=name:probe;min=1;prefault=all");
        c
    });
    assert!(
        r.stderr
            .contains("HUGESHM_RUN is not valid (min: out of range)"),
        "{}",
        r.stderr
    );
    assert_eq!(kb(r.one("shared"), "resident_kb"), 4);
}

#[test]
fn refusals_come_before_the_command_runs() {
    let dir = bin_dir();
    let marker = dir.join("ran");
    let refused = |options: &[&str], program: &Path, want: &str| {
        let _ = std::fs::remove_file(&marker);
        let out = run_cmd(options, program, &["shared:4m"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{program:?} {options:?}: {err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(out.stdout.is_empty(), "the command ran");
    };
    // Statically linked: no loader to preload anything.
    let static_probe = compile("probe-static", &["-static"]);
    refused(&[], &static_probe, "statically linked");
    // Setuid: the loader ignores LD_PRELOAD.
    let suid = dir.join("probe-suid");
    let _gone = RemoveOnDrop(suid.clone());
    std::fs::copy(probe(), &suid).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    refused(&[], &suid, "is setuid");
    // A script: the target must be named.
    let script = dir.join("start.sh");
    std::fs::write(&script, "#!/bin/sh\nexec true\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(&[], &script, "is a script (#!/bin/sh): name the server");
    // Another machine's executable.
    let mut arm = std::fs::read(probe()).unwrap();
    arm[18..20].copy_from_slice(&183u16.to_le_bytes());
    let arm_path = dir.join("probe-arm64");
    std::fs::write(&arm_path, &arm).unwrap();
    std::fs::set_permissions(&arm_path, std::fs::Permissions::from_mode(0o755)).unwrap();
    refused(&[], &arm_path, "64-bit AArch64 ELF executable");
    // A page size this kernel does not have.
    refused(
        &["--page-size", "16m"],
        &probe(),
        "--page-size 16 MiB: this kernel offers",
    );
    // Usage: too small a --min-size, MAP_POPULATE with a placement.
    refused(&["--min-size", "1M"], &probe(), "at least 2 MiB");
    refused(
        &["--prefault=populate", "--numa", "interleave"],
        &probe(),
        "MAP_POPULATE faults",
    );
    // A library that others could replace.
    let lib = dir.join("libhugeshm-run.so");
    let _lib_gone = RemoveOnDrop(lib.clone());
    std::fs::copy(run_library_built().unwrap(), &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o666)).unwrap();
    refused(
        &["--library", lib.to_str().unwrap()],
        &probe(),
        "writable by group or others (mode 0666)",
    );
    // ... or a directory above it that others can write to.
    let open_dir = dir.join("open");
    let _open_gone = RemoveOnDrop(open_dir.clone());
    std::fs::create_dir_all(open_dir.join("lib")).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lib = open_dir.join("lib/libhugeshm-run.so");
    std::fs::copy(run_library_built().unwrap(), &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused(
        &["--library", lib.to_str().unwrap()],
        &probe(),
        "(a directory above it) is writable by group or others (mode 0777)",
    );
    // NUMA on a one-node host (the fixture tree `clean`, whatever this
    // host has): refused under only, a warning under try.
    let one_node = |options: &[&str], action: &str| {
        let mut c = common::on_fixture("clean");
        c.arg("run")
            .args(options)
            .arg("--")
            .arg(probe())
            .arg(action)
            .env_remove("LD_PRELOAD")
            .env_remove("HUGESHM_RUN");
        c
    };
    let out = one_node(&["--numa", "interleave", "--policy", "only"], "shared:4m")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--numa interleave: this host has 1 NUMA node: there is nothing to place"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "the command ran");
    let r = ran(one_node(&["--numa", "interleave"], "lib"));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("warning: --numa interleave: this host has 1 NUMA node"),
        "{}",
        r.stderr
    );
    let lib = r.op("lib");
    assert_eq!(lib.len(), 1, "the command ran: {}", r.stderr);
    assert_eq!(lib[0]["loaded"], true, "{lib:?}");
}

#[test]
fn page_size_2m_rounds_and_the_servers_own_unmap_still_works() {
    let Some(pool) = live!() else { return };
    // 18 MiB + 6 MiB, rounded from 16 MiB + 100 and 5 MiB + 1.
    pool.ensure_free(M2, 12).expect("12 free 2 MiB pages");
    let size_a = (16 << 20) + 100;
    let size_b = (5 << 20) + 1;
    let r = ran(run_cmd(
        &[
            "--min-size",
            "4M",
            "--page-size",
            "2m",
            "--policy",
            "only",
            "--prefault",
        ],
        &probe(),
        &[
            &format!("shared:{size_a}"),
            &format!("shm:{size_b}"),
            "private:8m",
        ],
    ));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stderr, "");
    let s = r.one("shared");
    assert_eq!(
        (
            kb(s, "kernel_page_kb"),
            kb(s, "size_kb"),
            kb(s, "resident_kb")
        ),
        (2048, 18 << 10, 18 << 10),
        "{s}"
    );
    let s = r.one("shm");
    assert_eq!(
        (
            kb(s, "kernel_page_kb"),
            kb(s, "size_kb"),
            kb(s, "resident_kb")
        ),
        (2048, 6 << 10, 6 << 10),
        "{s}"
    );
    assert_eq!(kb(r.one("private"), "kernel_page_kb"), 4, "no --private");
    // munmap(addr, 16 MiB + 100) of an 18 MiB hugetlb mapping fails with
    // EINVAL unless the interposer passes the whole length.
    all_freed(&r);
    assert_eq!(r.op("free").len(), 3);
    // Nothing left: no record of either mapping.
    let addrs: Vec<String> = ["shared", "shm"]
        .iter()
        .map(|op| {
            format!(
                ".{}",
                r.one(op)["addr"].as_str().unwrap().trim_start_matches("0x")
            )
        })
        .collect();
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("hugeshm-run.") && addrs.iter().any(|a| n.ends_with(a.as_str())))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    pool.finish();
}

/// Free 2 MiB pages of the host-wide pool.
fn free_2m() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn only_fails_with_the_shortfall_and_try_falls_back_whole() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 2).expect("2 free 2 MiB pages");
    let free = free_2m();
    // More than the pool holds: refused before any page is taken.
    let want = (free + 8) * M2;
    let only = ran(run_cmd(
        &["--min-size", "4M", "--page-size", "2m", "--policy", "only"],
        &probe(),
        &[&format!("shared:{want}"), &format!("shm:{want}")],
    ));
    assert_eq!(only.code, Some(0));
    assert_eq!(only.one("shared")["errno"], 12, "ENOMEM");
    assert_eq!(only.one("shm")["errno"], 12);
    let lines: Vec<&str> = only.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "one line per refused call: {lines:?}");
    for l in &lines {
        assert!(l.contains("failed with ENOMEM (--policy only)"), "{l}");
        assert!(
            l.contains(&format!("2 MiB pages: required {}, available", free + 8)),
            "{l}"
        );
        assert!(l.contains("to fix: sysctl -w vm.nr_hugepages="), "{l}");
    }
    // try: the whole mapping on 4 KiB pages, one line each (not pre-faulted:
    // the pool may be big, and nothing needs touching to show the pages).
    let try_ = ran(run_cmd(
        &["--min-size", "4M", "--page-size", "2m", "--policy", "try"],
        &probe(),
        &[&format!("shared:{want}"), &format!("shm:{want}")],
    ));
    assert_eq!(kb(try_.one("shared"), "kernel_page_kb"), 4);
    assert_eq!(kb(try_.one("shm"), "kernel_page_kb"), 4);
    let lines: Vec<&str> = try_.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for l in &lines {
        assert!(
            l.ends_with("the whole region uses 4 KiB pages instead"),
            "{l}"
        );
    }
    all_freed(&try_);
    pool.finish();
}

/// `--fallback thp`: the pool too small, `try` puts a shared mapping and a
/// SysV segment on 4 KiB pages, 2 MiB-aligned, pre-faults them and collapses
/// them onto 2 MiB transparent huge pages: the server maps every block as
/// one 2 MiB page. Without `--prefault`, or with `--policy only`, it is
/// refused before the command runs.
#[test]
fn fallback_thp_collapses_what_fell_back() {
    let Some(pool) = live!() else { return };
    let free = free_2m();
    let want = (free + 8) * M2;
    let options = [
        "--min-size",
        "4M",
        "--page-size",
        "2m",
        "--policy",
        "try",
        "--prefault",
        "--fallback",
        "thp",
    ];
    let held = Held::start(
        &options,
        &[&format!("shared:{want}"), &format!("shm:{want}"), "hold"],
    );
    for op in ["shared", "shm"] {
        let addr = held.addr(op);
        assert_eq!(addr % M2, 0, "{op} at {addr:#x}");
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", held.pid())).unwrap();
        let pmd = hugeshm_parse::smaps::parse(&smaps)
            .unwrap()
            .into_iter()
            .find(|e| e.map.start == addr)
            .and_then(|e| e.shmem_pmd_mapped_bytes);
        assert_eq!(pmd, Some(want), "{op}: every block on a 2 MiB page");
    }
    drop(held);
    for bad in [
        &["--fallback", "thp"][..],
        &["--fallback", "thp", "--prefault", "--policy", "only"],
    ] {
        let r = ran(run_cmd(bad, &probe(), &["shared:8M"]));
        assert_eq!(r.code, Some(2), "{bad:?}: {}", r.stderr);
        assert!(r.stderr.contains("--fallback thp"), "{}", r.stderr);
    }
    pool.finish();
}

/// A probe holding its mappings until dropped.
pub(crate) struct Held {
    child: std::process::Child,
    lines: Vec<Value>,
}

impl Held {
    /// Under `hugeshm run OPTIONS`.
    pub(crate) fn start(options: &[&str], args: &[&str]) -> Held {
        Held::spawn(run_cmd(options, &probe(), args))
    }

    /// As user 65534, without `hugeshm run`.
    pub(crate) fn as_nobody(args: &[&str]) -> Held {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(probe())
            .args(args);
        Held::spawn(c)
    }

    fn spawn(mut c: Command) -> Held {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = Vec::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        loop {
            let mut l = String::new();
            assert!(
                out.read_line(&mut l).unwrap() > 0,
                "the probe ended early: {lines:?}"
            );
            let v: Value = serde_json::from_str(&l).unwrap();
            let hold = v["op"] == "hold";
            lines.push(v);
            if hold {
                break;
            }
        }
        Held { child, lines }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.lines.last().unwrap()["pid"].as_u64().unwrap() as u32
    }

    /// The address of the first mapping of `op`.
    pub(crate) fn addr(&self, op: &str) -> u64 {
        self.addrs(op)[0]
    }

    /// The addresses of the mappings of `op`, in the order made.
    pub(crate) fn addrs(&self, op: &str) -> Vec<u64> {
        self.lines
            .iter()
            .filter(|l| l["op"] == op)
            .map(|l| {
                let a = l["addr"].as_str().unwrap();
                u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap()
            })
            .collect()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(mut i) = self.child.stdin.take() {
            let _ = i.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

pub(crate) fn as_nobody(args: &[&str]) {
    let st = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "{args:?}");
}

#[test]
fn advise_prints_the_systemd_drop_in_that_starts_a_service_under_run() {
    run_library_built().expect("libhugeshm_run.so");
    let out = common::hugeshm(&[
        "advise",
        "--size",
        "64M",
        "--run=postgres",
        "--systemd-unit",
        "postgresql@15-main.service",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let at = text
        .find("/etc/systemd/system/postgresql@15-main.service.d/hugeshm-run.conf:")
        .unwrap_or_else(|| panic!("{text}"));
    let dropin: Vec<&str> = text[at..].lines().skip(1).take(3).map(str::trim).collect();
    assert_eq!(dropin[0], "[Service]");
    let lib = run_library_built().unwrap().canonicalize().unwrap();
    assert_eq!(
        dropin[1],
        format!("Environment=\"LD_PRELOAD={}\"", lib.display())
    );
    let value = dropin[2]
        .strip_prefix("Environment=\"HUGESHM_RUN=")
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{}", dropin[2]));
    let s = hugeshm_region::run::Settings::parse(value).expect("what the library reads");
    assert_eq!(
        s.target,
        hugeshm_region::run::Target::Name("postgres".into())
    );
    assert_eq!(s.policy, hugeshm_region::Policy::Only);
    assert_eq!(s.prefault, hugeshm_region::run::RunPrefault::Threads(None));
    // Without --postgres the executable must be named.
    let out = common::hugeshm(&["advise", "--size", "64M", "--run"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--run=NAME"));
}

#[test]
fn the_next_record_sweeps_the_records_of_dead_processes_of_its_user_only() {
    // Its records in /dev/shm are host state other tests compare under
    // the pool lock.
    let Some(_pool) = live!() else { return };
    let dead: Vec<u32> = (3_000_000..3_100_000)
        .filter(|p| !Path::new(&format!("/proc/{p}")).exists())
        .take(2)
        .collect();
    let ours = PathBuf::from(format!("/dev/shm/hugeshm-run.{}.1000", dead[0]));
    let theirs = PathBuf::from(format!("/dev/shm/hugeshm-run.{}.1000", dead[1]));
    let _g1 = RemoveOnDrop(ours.clone());
    let _g2 = RemoveOnDrop(theirs.clone());
    std::fs::write(&ours, "hugeshm-run-record 1\n").unwrap();
    as_nobody(&["sh", "-c", &format!("echo x > {}", theirs.display())]);
    let r = ran(run_cmd(&["--min-size", "8M"], &probe(), &["shared:16m"]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        !ours.exists(),
        "root's record of a dead pid is swept by root's next writer"
    );
    assert!(
        theirs.exists(),
        "another user's file is not root's to remove"
    );
}
