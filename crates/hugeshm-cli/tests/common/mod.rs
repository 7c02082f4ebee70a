//! Running the built `hugeshm` binary on the live host from integration tests.
#![allow(dead_code)]

use hugeshm_probe::{FS_ROOT_ENV, PROC_ROOT_ENV, SYS_ROOT_ENV};
use serde_json::Value;
use std::process::{Command, Output};

/// `hugeshm ARGS` on the live host: fixture-root variables removed, no colour.
pub fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hugeshm"));
    c.args(args)
        .env_remove(PROC_ROOT_ENV)
        .env_remove(SYS_ROOT_ENV)
        .env_remove(FS_ROOT_ENV)
        .env_remove("HUGESHM_MAPS")
        .env("NO_COLOR", "1");
    c
}

/// Runs `hugeshm ARGS` and returns its output.
pub fn hugeshm(args: &[&str]) -> Output {
    cmd(args).output().expect("run hugeshm")
}

/// The `--json` document on stdout of a successful run: one object with
/// `"schema": 1` (panics with stderr and the end of stdout otherwise: a
/// command that says what failed in its JSON, as the lab does).
pub fn json(out: Output) -> Value {
    assert!(
        out.status.success(),
        "hugeshm failed ({}): {}\nstdout ends: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        {
            let s = String::from_utf8_lossy(&out.stdout);
            let from = s.len().saturating_sub(4000);
            s.get(from..).unwrap_or(&s).to_owned()
        }
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert!(v.is_object(), "not one JSON object: {v:#}");
    assert_eq!(v["schema"].as_u64(), Some(1), "schema of {v:#}");
    v
}

/// The host-wide 2 MiB pool's `nr_hugepages`.
pub fn nr_2m() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `hugeshm --proc-root F/proc --sys-root F/sys --fs-root F/fs`, for the
/// fixture tree `tests/fixtures/NAME`, no colour.
pub fn on_fixture(name: &str) -> Command {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut c = cmd(&[]);
    c.arg("--proc-root")
        .arg(dir.join("proc"))
        .arg("--sys-root")
        .arg(dir.join("sys"))
        .arg("--fs-root")
        .arg(dir.join("fs"));
    c
}

/// Reads `child`'s piped stderr until a line contains `needle` (panics
/// when it ends first), then drains the rest in a thread so the child
/// never blocks on a full pipe.
pub fn wait_for_stderr(child: &mut std::process::Child, needle: &str) {
    use std::io::{BufRead, BufReader};
    let mut err = BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    while !line.contains(needle) {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "stderr ended before {needle:?}"
        );
    }
    std::thread::spawn(move || for _ in err.lines() {});
}

/// `ls --json`'s entry of region `name` (panics where it is not listed).
pub fn listed(name: &str) -> Value {
    region_entry(&json(hugeshm(&["ls", "--json"])), name)
}

/// The entry of region `name` in `ls --json`'s document `l` (panics where
/// it is not listed).
pub fn region_entry(l: &Value, name: &str) -> Value {
    l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {l:#}"))
        .clone()
}

/// The uid the attacker of the planted-file tests acts as.
pub const NOBODY: u32 = 65534;

/// Whether `test` cannot act as uid 65534 (after a skip): it needs root,
/// and `setpriv` to drop to 65534.
pub fn cannot_act_as_nobody(test: &str) -> bool {
    if hugeshm_testkit::skip_unless_root(test) {
        return true;
    }
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !setpriv {
        hugeshm_testkit::skip(test, format_args!("no setpriv to act as uid {NOBODY}"));
    }
    !setpriv
}

/// Runs `script` in `sh` as uid 65534 (no groups); panics if it fails.
pub fn as_nobody(script: &str) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh directory owned by uid 65534 (mode 0755), removed on drop.
pub fn nobodys_dir(what: &str) -> hugeshm_testkit::TempDir {
    let d = hugeshm_testkit::TempDir::new(what);
    std::os::unix::fs::chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// `cmd`'s output (stdin empty), or a panic when it runs longer than
/// 20 s (waiting on a FIFO, say): the test fails rather than hangs.
pub fn output_within_20s(mut cmd: Command) -> Output {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The test program `tests/NAME.c` (`region/lookalike`) compiled with `cc`
/// into `dir`, which is made 0755 so that uid 65534 may run it.
pub fn compile_c(name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/{name}.c"));
    let out = dir.join(src.file_stem().unwrap());
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(st.success(), "cc {} failed", src.display());
    out
}

/// The sizes of `pid`'s private mappings on 2 MiB hugetlb pages (a
/// server's buffer pool or heap), from its smaps, in address order.
pub fn private_2m_mappings(pid: u32) -> Vec<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).expect("smaps");
    hugeshm_parse::smaps::parse(&text)
        .expect("smaps parses")
        .iter()
        .filter(|e| e.kernel_page_size_bytes == Some(2 << 20) && !e.map.perms.shared)
        .map(|e| e.size_bytes)
        .collect()
}
