//! `hugeshm run` on a real 2-node kernel (a QEMU guest, see
//! `hugeshm_testkit::guest`), with the C probe of `tests/run/probe.c`
//! standing in for the server (PostgreSQL does not fit in the test
//! initramfs): `--numa interleave` splits the shared mapping and the SysV
//! segment evenly over both nodes while the program's private memory stays
//! where its own first touch put it; `segments` in the guest shows the
//! records; `--numa bind=1` puts every page on node 1; with node 1 short,
//! `--policy only` fails with node 1's numbers and `try` falls back whole.
//! Skips only where QEMU or a guest kernel is missing.

use hugeshm_testkit::guest::{Boot, GuestRun, Scenario};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const M2: u64 = 2 << 20;

/// The probe, compiled for the guest.
fn probe() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hugeshm-guest-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("probe");
    let st = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run/probe.c"))
        .status()
        .expect("cc");
    assert!(st.success());
    out
}

/// The guest run of run.sh, booted once for every test of this file.
fn guest_run(test: &str) -> Option<&'static GuestRun> {
    static RUN: OnceLock<Scenario> = OnceLock::new();
    RUN.get_or_init(|| {
        let lib = hugeshm_testkit::run_library_built().expect("libhugeshm_run.so");
        let probe = probe();
        let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest-scenarios/run.sh");
        // All in /usr/local/bin: hugeshm finds the library beside itself.
        let r = Scenario::run(
            &scenario,
            &[Path::new(env!("CARGO_BIN_EXE_hugeshm")), &lib, &probe],
            &[Boot::default()],
        );
        let _ = std::fs::remove_dir_all(probe.parent().unwrap());
        r
    })
    .runs(test)
    .map(|r| &r[0])
}

/// The probe's JSON lines in block `name`.
fn lines(run: &GuestRun, name: &str) -> Vec<Value> {
    run.console
        .ok(name)
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn op<'a>(lines: &'a [Value], op: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["op"] == op)
        .unwrap_or_else(|| panic!("no {op}: {lines:#?}"))
}

/// `N0=4 N1=4` as node → pages.
fn nodes(v: &Value) -> Vec<(u32, u64)> {
    v["nodes"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .filter_map(|t| {
            let (n, p) = t.strip_prefix('N')?.split_once('=')?;
            Some((n.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

fn stderr(run: &GuestRun, name: &str) -> String {
    run.console
        .block(&format!("{name}.stderr"))
        .map(|b| b.text.clone())
        .unwrap_or_default()
}

#[test]
fn guest_interleave_splits_the_shared_memory_only() {
    let Some(run) = guest_run("guest_interleave_splits_the_shared_memory_only") else {
        return;
    };
    let l = lines(run, "interleave.probe");
    for o in ["shared", "shm"] {
        let v = op(&l, o);
        assert_eq!(v["kernel_page_kb"], 2048, "{v}");
        assert_eq!(v["resident_kb"], 16 << 10, "{v}");
        assert_eq!(nodes(v), vec![(0, 4), (1, 4)], "{o} split evenly: {v}");
    }
    // The program's own memory: not interleaved, all where its touch was.
    let private = op(&l, "private-full");
    let n = nodes(private);
    assert_eq!(n.len(), 1, "private memory on one node: {private}");
    assert_eq!(n[0].1, 4096, "{private}");
    for f in l.iter().filter(|v| v["op"] == "free") {
        assert_eq!(f["rc"], 0, "{f}");
    }
    assert_eq!(stderr(run, "interleave.probe"), "", "nothing to say");
}

#[test]
fn guest_segments_shows_the_run_record() {
    let Some(run) = guest_run("guest_segments_shows_the_run_record") else {
        return;
    };
    let held = lines(run, "interleave.held");
    let pid = op(&held, "hold")["pid"].as_u64().unwrap();
    let doc = run
        .console
        .json("interleave.segments")
        .unwrap_or_else(|e| panic!("{e}"));
    let seg = doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["run"]["record"]["pid"] == pid)
        .unwrap_or_else(|| panic!("no segment placed by run for {pid}: {doc:#}"));
    let rec = &seg["run"]["record"];
    assert_eq!(seg["kind"], "anon", "{seg:#}");
    assert_eq!(rec["numa"], "interleave", "{rec:#}");
    assert_eq!(rec["page_size_bytes"], M2);
    assert_eq!(
        rec["nodes"],
        serde_json::json!({"0": 8 << 20, "1": 8 << 20}),
        "{rec:#}"
    );
    assert_eq!(
        seg["nodes"],
        serde_json::json!({"0": 8 << 20, "1": 8 << 20}),
        "{seg:#}"
    );
    assert_eq!(rec["prefault"]["threads"], 2, "{rec:#}");
}

#[test]
fn guest_bind_puts_every_page_on_the_node() {
    let Some(run) = guest_run("guest_bind_puts_every_page_on_the_node") else {
        return;
    };
    let v = op(&lines(run, "bind.probe"), "shared").clone();
    assert_eq!(nodes(&v), vec![(1, 8)], "{v}");
    assert_eq!(v["resident_kb"], 16 << 10);
}

#[test]
fn guest_a_short_node_fails_only_with_its_numbers_and_try_falls_back() {
    let Some(run) = guest_run("guest_a_short_node_fails_only_with_its_numbers_and_try_falls_back")
    else {
        return;
    };
    let v = op(&lines(run, "short.only"), "shared").clone();
    assert_eq!(v["errno"], 12, "ENOMEM: {v}");
    let err = stderr(run, "short.only");
    println!("only: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("failed with ENOMEM (--policy only)"), "{err}");
    assert!(
        err.contains("2 MiB pages on --numa bind=1: node 1 required 8, available 2"),
        "{err}"
    );
    assert!(err.contains("to fix:"), "{err}");
    let v = op(&lines(run, "short.try"), "shared").clone();
    assert_eq!(v["kernel_page_kb"], 4, "{v}");
    assert_eq!(v["resident_kb"], 16 << 10, "{v}");
    let err = stderr(run, "short.try");
    assert!(err.contains("node 1 required 8, available 2"), "{err}");
    assert!(
        err.trim_end()
            .ends_with("the whole region uses 4 KiB pages instead"),
        "{err}"
    );
}
