//! `hugeshm create`, `rm` and `bench prefault` on the live host, as root.

mod common;

use common::{cmd, hugeshm as run, json};

use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

const M2: u64 = 2 << 20;

fn name(tag: &str) -> String {
    format!("clitest-{tag}-{}", std::process::id())
}

#[test]
fn create_reports_and_rm_removes() {
    const T: &str = "create_reports_and_rm_removes";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
    let before = HostState::capture().unwrap();
    let n = name("sysv");
    let r = json(run(&[
        "create",
        &n,
        "--size",
        "15M",
        "--page-size",
        "2m",
        "--policy",
        "only",
        "--prefault-threads",
        "2",
        "--json",
    ]));
    for key in [
        "name",
        "backend",
        "size_bytes",
        "page_size_bytes",
        "policy",
        "fell_back",
        "reason",
        "prefault_threads",
        "prefault_seconds",
        "prefault_gbps",
        "verified_page_size_bytes",
        "resident_bytes",
    ] {
        assert!(r.get(key).is_some(), "create --json lacks {key}: {r:#}");
    }
    assert_eq!(r["name"], n.as_str());
    assert_eq!(r["backend"], "sysv");
    assert_eq!(
        r["size_bytes"].as_u64(),
        Some(16 << 20),
        "rounded up to whole pages"
    );
    assert_eq!(r["page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(r["verified_page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(r["resident_bytes"].as_u64(), Some(16 << 20));
    assert_eq!(r["fell_back"], false);
    assert_eq!(r["reason"], Value::Null);
    assert_eq!(r["prefault_threads"], 2);

    // `only` with the pool short: the numbers and the fix, nothing created.
    let out = run(&[
        "create",
        &name("short"),
        "--size",
        "1G",
        "--page-size",
        "2m",
        "--policy",
        "only",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("required 512, available"), "{err}");
    assert!(err.contains("to fix:"), "{err}");

    // `try`: the whole region on 4 KiB pages, with the reason.
    let t = json(run(&[
        "create",
        &name("try"),
        "--size",
        "1G",
        "--page-size",
        "2m",
        "--policy",
        "try",
        "--json",
    ]));
    assert_eq!(t["fell_back"], true);
    assert_eq!(t["page_size_bytes"].as_u64(), Some(4096));
    assert!(
        t["reason"].as_str().unwrap().contains("required 512"),
        "{t:#}"
    );
    assert!(run(&["rm", &name("try")]).status.success());

    let out = run(&["rm", &n]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("removed sysv"));
    let out = run(&["rm", &n]);
    assert_eq!(out.status.code(), Some(3), "a second rm finds nothing");
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}");
    pool.restore().expect("restore");
}

#[test]
fn rm_refuses_while_held_and_hold_keeps_memfd() {
    const T: &str = "rm_refuses_while_held_and_hold_keeps_memfd";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
    let before = HostState::capture().unwrap();
    let n = name("held");
    // A holder: prints the JSON report, then keeps the region mapped.
    let mut holder = cmd(&[
        "create",
        &n,
        "--size",
        "8M",
        "--page-size",
        "2m",
        "--hold",
        "--json",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut text = String::new();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    while let Some(Ok(l)) = lines.next() {
        text.push_str(&l);
        text.push('\n');
        if l == "}" {
            break;
        }
    }
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["schema"], 1, "{report:#}");
    assert_eq!(report["verified_page_size_bytes"].as_u64(), Some(M2));
    let pid = holder.id();
    let out = run(&["rm", &n]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in use") && err.contains(&pid.to_string()),
        "{err}"
    );
    // A memfd region without --hold would vanish at once: refused.
    let out = run(&[
        "create",
        &name("memfd"),
        "--size",
        "4M",
        "--backend",
        "memfd",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hold"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        run(&["rm", &n]).status.success(),
        "removable once the holder is gone"
    );
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}");
    pool.restore().expect("restore");
}

#[test]
fn bench_prefault_reports_every_combination() {
    const T: &str = "bench_prefault_reports_every_combination";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    let before = HostState::capture().unwrap();
    let r = json(run(&[
        "bench",
        "prefault",
        "--size",
        "64M",
        "--page-size",
        "4k,2m",
        "--threads",
        "1,2",
        "--runs",
        "1",
        "--json",
    ]));
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{r:#}");
    assert_eq!(r["memset"].as_array().unwrap().len(), 2);
    for row in rows {
        assert!(row["gbps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["vs_memset"].as_f64().is_some(), "{row}");
    }
    let huge2 = rows
        .iter()
        .find(|x| x["page_size_bytes"].as_u64() == Some(M2) && x["threads"] == 2)
        .unwrap();
    assert!(huge2["vs_4k"].as_f64().is_some() && huge2["vs_one_thread"].as_f64().is_some());
    // The bench gave back the pages it reserved.
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}");
    pool.restore().expect("restore");
}

#[test]
fn bench_pagetables_measures_per_process_cost() {
    const T: &str = "bench_pagetables_measures_per_process_cost";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    let before = HostState::capture().unwrap();
    let r = json(run(&[
        "bench",
        "pagetables",
        "--size",
        "256M",
        "--procs",
        "4",
        "--page-size",
        "4k,2m",
        "--json",
    ]));
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{r:#}");
    for row in rows {
        for key in [
            "page_size_bytes",
            "size_bytes",
            "procs",
            "page_tables_bytes_per_proc",
        ] {
            assert!(row.get(key).is_some(), "{key} missing: {row}");
        }
    }
    let per = |ps: u64| {
        rows.iter()
            .find(|x| x["page_size_bytes"].as_u64() == Some(ps))
            .unwrap()["page_tables_bytes_per_proc"]
            .as_u64()
            .unwrap()
    };
    // 256 MiB on 4 KiB pages: 512 KiB of PTEs per process; on 2 MiB pages at
    // most one PMD page (4 KiB) per process, far under the 64 KiB target.
    assert!(per(4096) >= 256 << 10, "4 KiB: {}", per(4096));
    assert!(per(M2) <= 64 << 10, "2 MiB: {}", per(M2));
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}");
    pool.restore().expect("restore");
}

#[test]
fn attach_and_ls_show_orphans() {
    const T: &str = "attach_and_ls_show_orphans";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    pool.ensure_free(M2, 4).expect("4 free 2 MiB pages");
    let before = HostState::capture().unwrap();
    let n = name("ls");
    let created = json(run(&[
        "create",
        &n,
        "--size",
        "8M",
        "--page-size",
        "2m",
        "--json",
    ]));
    let creator = created["pid"].as_u64().unwrap();
    // attach: the header written by the (now exited) creator.
    let a = json(run(&["attach", &n, "--json"]));
    assert_eq!(a["header"]["creator_pid"].as_u64(), Some(creator), "{a:#}");
    assert_eq!(a["header"]["state"], "ready");
    assert_eq!(a["verified_page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(a["creator"], "dead");
    // ls: listed, held by nobody: an orphan, and --check says so.
    let l = json(run(&["ls", "--json"]));
    let me = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == n.as_str())
        .unwrap_or_else(|| panic!("{n} not listed: {l:#}"));
    assert_eq!(me["backend"], "sysv");
    assert_eq!(me["held"], false);
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(1));
    // Creating over it is refused; reuse keeps it.
    let out = run(&["create", &n, "--size", "8M", "--page-size", "2m"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reclaim reuse"));
    assert!(run(&[
        "create",
        &n,
        "--size",
        "8M",
        "--page-size",
        "2m",
        "--reclaim",
        "reuse"
    ])
    .status
    .success());
    assert!(run(&["rm", &n]).status.success());
    let l = json(run(&["ls", "--json"]));
    assert!(!l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == n.as_str()));
    let diff = before.diff(&HostState::capture().unwrap());
    assert!(diff.is_empty(), "left behind: {diff:#?}");
    pool.restore().expect("restore");
}
