//! `hugeshm create`, `rm`, `bench prefault` and `bench numa` on the live
//! host, as root.

use crate::common::{self, cmd, hugeshm as run, json};

use hugeshm_testkit::{live, observe, Lack};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

const M2: u64 = 2 << 20;

fn name(tag: &str) -> String {
    format!("clitest-{tag}-{}", std::process::id())
}

#[test]
fn create_reports_and_rm_removes() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
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
    // The key as ipcs shows it, and as a number.
    let key_hex = r["sysv_key"].as_str().expect("sysv_key as hex text");
    let key = r["sysv_key_number"].as_u64().unwrap();
    assert_eq!(key_hex, format!("{key:#010x}"));
    assert_eq!(key as u32, hugeshm_region::sysv_key(&n) as u32);

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
    pool.finish();
}

#[test]
fn rm_refuses_while_held_and_hold_keeps_memfd() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 8).expect("8 free 2 MiB pages");
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
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hold"));
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        run(&["rm", &n]).status.success(),
        "removable once the holder is gone"
    );
    pool.finish();
}

#[test]
fn bench_numa_on_one_node_says_so_and_exits_0() {
    // Nothing is reserved on one node; the lock keeps another test's pool
    // change out of the before/after comparison.
    let Some(pool) = live!() else { return };
    let memory_nodes = std::fs::read_to_string("/sys/devices/system/node/has_memory")
        .unwrap_or_else(|_| "0".to_owned());
    if memory_nodes.trim().contains([',', '-']) {
        return pool.skip_lacking(
            Lack::OneMemoryNode,
            "this host has several memory nodes (tests/guest/guest_bench_numa.rs measures them)",
        );
    }
    let r = json(run(&["bench", "numa", "--size", "8M", "--json"]));
    assert_eq!(r["single_node"], true, "{r:#}");
    assert!(
        r["message"].as_str().unwrap().contains("one NUMA node"),
        "{r:#}"
    );
    assert_eq!(r["results"].as_array().unwrap().len(), 0, "{r:#}");
    assert!(r["remote_node"].is_null(), "{r:#}");
    let text = run(&["bench", "numa", "--size", "8M"]);
    assert!(text.status.success(), "{text:?}");
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("QEMU guest"), "{stdout}");
    pool.finish();
}

#[test]
fn bench_prefault_reports_every_combination() {
    let Some(pool) = live!() else { return };
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
    let memset = r["memset"].as_array().unwrap();
    assert_eq!(memset.len(), 2);
    for b in memset {
        assert!(b["clear_4k_gbps"].as_f64().unwrap() > 0.0, "{b}");
    }
    for row in rows {
        assert!(row["gbps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["vs_memset"].as_f64().is_some(), "{row}");
        assert!(row["vs_clear_4k"].as_f64().is_some(), "{row}");
    }
    let huge2 = rows
        .iter()
        .find(|x| x["page_size_bytes"].as_u64() == Some(M2) && x["threads"] == 2)
        .unwrap();
    assert!(huge2["vs_4k"].as_f64().is_some() && huge2["vs_one_thread"].as_f64().is_some());
    // The peers' methods ran on the same size and page size: map-populate
    // and first-touch once per page size (one thread), the touch loop per
    // thread count; every hugeshm row has its ratio to each and to the best.
    let peers = r["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 2 * (1 + 1 + 2), "{r:#}");
    for p in peers {
        assert!(p["gbps"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["size_bytes"].as_u64().unwrap() >= 64 << 20, "{p}");
    }
    for row in rows {
        let vs = row["vs_peers"].as_object().unwrap();
        assert_eq!(vs.len(), 3, "{row}");
        let best = vs
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MAX, f64::min);
        assert_eq!(row["vs_best_peer"].as_f64(), Some(best), "{row}");
    }
    let touch2 = peers.iter().find(|p| {
        p["method"] == "touch-loop"
            && p["page_size_bytes"].as_u64() == Some(M2)
            && p["threads"] == 2
    });
    assert!(touch2.is_some(), "{r:#}");
    // The bench gave back the pages it reserved.
    pool.finish();
}

#[test]
fn bench_pagetables_measures_per_process_cost() {
    let Some(pool) = live!() else { return };
    // Two counts: the children attach in two steps, a row per step and a
    // slope per page size.
    let r = json(run(&[
        "bench",
        "pagetables",
        "--size",
        "256M",
        "--procs",
        "6,2",
        "--page-size",
        "4k,2m",
        "--json",
    ]));
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{r:#}");
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
    let per = |ps: u64, n: u64| {
        rows.iter()
            .find(|x| x["page_size_bytes"].as_u64() == Some(ps) && x["procs"].as_u64() == Some(n))
            .unwrap_or_else(|| panic!("no row for {ps} at {n}: {r:#}"))
            ["page_tables_bytes_per_proc"]
            .as_u64()
            .unwrap()
    };
    // 256 MiB on 4 KiB pages: 512 KiB of PTEs per process; on 2 MiB pages at
    // most one PMD page (4 KiB) per process, far under the 64 KiB target.
    for n in [2, 6] {
        assert!(per(4096, n) >= 256 << 10, "4 KiB at {n}: {}", per(4096, n));
        assert!(per(M2, n) <= 64 << 10, "2 MiB at {n}: {}", per(M2, n));
    }
    // The slope through 2 and 6 processes is what one more process costs:
    // the PTEs of 256 MiB on 4 KiB pages (theory 516 KiB), next to nothing
    // on 2 MiB pages.
    let growth = r["growth"].as_array().expect("growth");
    assert_eq!(growth.len(), 2, "{r:#}");
    let slope = |ps: u64| {
        let g = growth
            .iter()
            .find(|g| g["page_size_bytes"].as_u64() == Some(ps))
            .unwrap();
        assert_eq!(g["procs"], serde_json::json!([2, 6]), "{g}");
        g["bytes_per_proc"].as_f64().unwrap()
    };
    let theory = 256.0 * 1024.0 * 2.0 + 4096.0;
    assert!(
        (0.75 * theory..=1.25 * theory).contains(&slope(4096)),
        "4 KiB slope {} against theory {theory}",
        slope(4096)
    );
    assert!(slope(M2) <= 16.0 * 1024.0, "2 MiB slope {}", slope(M2));
    pool.finish();
}

/// A page size the kernel has no pool of is a line saying why, with the
/// boot-time fix, and the other page sizes run.
#[test]
fn bench_pagetables_skips_a_page_size_the_host_lacks() {
    let _pool = observe!();
    let r = json(run(&[
        "bench",
        "pagetables",
        "--size",
        "8M",
        "--procs",
        "2",
        "--page-size",
        "4k,16m",
        "--no-reserve",
        "--json",
    ]));
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r:#}");
    assert_eq!(rows[0]["page_size_bytes"], 4096, "{r:#}");
    let skipped = r["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{r:#}");
    assert_eq!(skipped[0]["page_size_bytes"], 16 << 20, "{r:#}");
    let reason = skipped[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("this kernel offers no 16M pages (it has: ") && reason.contains("2M"),
        "{reason}"
    );
    assert!(
        skipped[0]["fix"]
            .as_str()
            .is_some_and(|f| f.contains("hugepagesz=16M")),
        "{r:#}"
    );
    // One count: no slope to print.
    assert_eq!(r["growth"].as_array().map(Vec::len), Some(0), "{r:#}");
}

#[test]
fn attach_and_ls_show_orphans() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 4).expect("4 free 2 MiB pages");
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
    // ls: listed, held by nobody: kept (made without --hold), which --check
    // does not count (tests/region/ls_kept.rs has the orphan a holder leaves).
    let l = json(run(&["ls", "--json"]));
    let me = l["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == n.as_str())
        .unwrap_or_else(|| panic!("{n} not listed: {l:#}"));
    assert_eq!(me["backend"], "sysv");
    assert_eq!(me["held"], false);
    assert_eq!(me["header"]["kept"], true);
    assert_eq!(run(&["ls", "--check"]).status.code(), Some(0));
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
    pool.finish();
}

/// `create` decides from the host that `HUGESHM_PROC_ROOT` / `HUGESHM_SYS_ROOT`
/// name: the region crate's fixture tree has a 2 MiB pool with 10 pages
/// available, whatever this host's pool holds. Nothing is created (`only`
/// fails before the system call), so no root is needed.
#[test]
fn create_plans_from_the_fixture_roots() {
    let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hugeshm-region/tests/fixtures/short-2m-pool");
    let n = name("fixture");
    let out = cmd(&[
        "create",
        &n,
        "--size",
        "64M",
        "--backend",
        "sysv",
        "--page-size",
        "2m",
        "--policy",
        "only",
    ])
    .env(hugeshm_probe::PROC_ROOT_ENV, tree.join("proc"))
    .env(hugeshm_probe::SYS_ROOT_ENV, tree.join("sys"))
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("2 MiB pages: required 32, available 10 (free 12, reserved 2)"),
        "{err}"
    );
    assert!(
        err.contains("to fix: sysctl -w vm.nr_hugepages=122"),
        "{err}"
    );
    let key = hugeshm_region::sysv_key(&n);
    assert!(
        hugeshm_testkit::HostState::capture()
            .unwrap()
            .sysv
            .values()
            .all(|s| s.key != key),
        "no segment made"
    );
}

/// Starts `hugeshm create NAME --backend memfd --hold` (through `sh` with
/// SIGINT ignored when `ignore_int`, as a script's background job has it)
/// and waits until it holds the region.
fn hold_memfd(n: &str, ignore_int: bool) -> std::process::Child {
    let exe = env!("CARGO_BIN_EXE_hugeshm");
    let script = format!(
        "{}exec {exe} create {n} --size 4M --backend memfd --page-size 4k --policy off --hold",
        if ignore_int { "trap '' INT; " } else { "" }
    );
    let mut child = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_stderr(&mut child, "holding region");
    child
}

fn signal(child: &std::process::Child, sig: rustix::process::Signal) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        sig,
    )
    .unwrap();
}

/// `create --hold` of a memfd region releases it, record and all, on
/// SIGINT, SIGTERM and SIGHUP, also with SIGINT ignored by the shell that
/// started it. A SIGKILLed holder leaves a stale record, which the next
/// `create` replaces without `--reclaim` (nothing is left to reclaim).
#[test]
fn hold_releases_on_signals_and_a_stale_record_is_replaced() {
    use rustix::process::Signal;
    let Some(pool) = live!() else { return };
    // The pool lock serializes tests that compare the whole host's state.
    let record = |n: &str| std::path::PathBuf::from(format!("/dev/shm/hugeshm-memfd.{n}"));
    for (sig, ignore_int) in [
        (Signal::INT, false),
        (Signal::TERM, false),
        (Signal::HUP, false),
        (Signal::INT, true),
    ] {
        let n = name(&format!("sig{}", sig.as_raw()));
        let mut child = hold_memfd(&n, ignore_int);
        assert!(record(&n).exists(), "{sig:?}: record while held");
        signal(&child, sig);
        let st = child.wait().unwrap();
        assert!(st.success(), "{sig:?} (SIGINT ignored: {ignore_int}): {st}");
        assert!(
            !record(&n).exists(),
            "{sig:?}: the record goes with the region"
        );
    }
    // SIGKILL: the record stays, stale; ls says so; create replaces it.
    let n = name("killed");
    let mut child = hold_memfd(&n, false);
    signal(&child, Signal::KILL);
    child.wait().unwrap();
    assert!(record(&n).exists(), "a SIGKILLed holder leaves its record");
    let ls = json(run(&["ls", "--json"]));
    let regions = ls.get("regions").unwrap_or(&ls);
    let mine = regions
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == n.as_str())
        .expect("ls lists the stale record");
    assert_eq!(mine["state"], "stale");
    // Replaced without --reclaim (hold_memfd fails if create does).
    let mut child = hold_memfd(&n, false);
    signal(&child, Signal::TERM);
    assert!(child.wait().unwrap().success());
    assert!(!record(&n).exists(), "replaced, then released on exit");
    pool.finish();
}

/// Finding a name without `--backend`: `attach` finds a posix region (not
/// "backend mismatch: expected hugetlbfs"), `rm` of a missing name lists
/// each place once, `rm` finds a memfd region's stale record, and `ls`
/// tells a crashed region's owner to recreate or remove it, not reuse it.
#[test]
fn names_are_found_in_every_backend() {
    let Some(pool) = live!() else { return };
    let n = name("find");
    let mk = |backend: &str| {
        let out = run(&[
            "create",
            &n,
            "--size",
            "4M",
            "--backend",
            backend,
            "--page-size",
            "4k",
            "--policy",
            "off",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    mk("posix");
    let a = json(run(&["attach", &n, "--json"]));
    let a = a.get("report").cloned().unwrap_or(a);
    assert_eq!(a["backend"], "posix", "{a:#}");
    let out = run(&["rm", &n]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("removed posix"));

    // Missing: every place once.
    let out = run(&["rm", &n]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let shm = format!("/dev/shm/hugeshm.{n}");
    assert_eq!(err.matches(&shm).count(), 1, "{err}");
    assert!(
        err.contains(&format!("/dev/shm/hugeshm-memfd.{n}")),
        "{err}"
    );

    // A stale memfd record: rm without --backend finds it.
    let mut child = cmd(&[
        "create",
        &n,
        "--size",
        "4M",
        "--backend",
        "memfd",
        "--page-size",
        "4k",
        "--policy",
        "off",
        "--hold",
    ])
    .stderr(Stdio::piped())
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("holding region")));
    child.kill().unwrap();
    child.wait().unwrap();
    // ls: its holder crashed; recreate or remove it, never reuse it
    // (checked once rm took it away: a failed check leaves nothing).
    let listing = json(run(&["ls", "--json"]));
    let table = String::from_utf8_lossy(&run(&["ls"]).stdout).into_owned();
    let out = run(&["rm", &n]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("removed memfd"));
    let entry = common::region_entry(&listing, &n);
    assert_eq!(entry["state"], "stale", "{entry:#}");
    assert_eq!(entry["fix"]["kind"], "reclaim", "{entry:#}");
    assert_eq!(entry["fix"]["keep_contents"], false, "{entry:#}");
    let line = table
        .lines()
        .find(|l| l.contains("nobody holds it") && l.contains(&n))
        .unwrap_or_else(|| panic!("no line on {n}: {table}"));
    assert!(
        line.contains(&format!(
            "recreate it: hugeshm create {n} --backend memfd --reclaim recreate"
        )) && line.contains(&format!("remove it: hugeshm rm {n} --backend memfd")),
        "{line}"
    );
    assert!(!line.contains("reuse"), "{line}");
    pool.finish();
}

/// `bench prefault` with a page size it cannot have (no pages reserved
/// for it, and `--no-reserve`) reports that size as skipped with the
/// reason and goes on with the others.
#[test]
fn bench_prefault_goes_on_without_a_page_size() {
    let Some(pool) = live!() else { return };
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let read = |f: &str| -> u64 {
        let text = std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
        text.trim().parse().unwrap()
    };
    // The pages free to take leave the pool (the guard puts them back), so
    // the bench cannot have 2 MiB pages without reserving them.
    let (nr, free, resv) = (
        read("nr_hugepages"),
        read("free_hugepages"),
        read("resv_hugepages"),
    );
    let spare = free.saturating_sub(resv);
    if spare > 0 {
        std::fs::write(format!("{dir}/nr_hugepages"), (nr - spare).to_string())
            .expect("lower the 2 MiB pool");
    }
    if read("free_hugepages") >= 4 {
        return pool.skip("the 2 MiB pool keeps 4 free pages after giving back the spare ones");
    }
    let r = json(run(&[
        "bench",
        "prefault",
        "--size",
        "8M",
        "--page-size",
        "4k,2m",
        "--threads",
        "1",
        "--runs",
        "1",
        "--no-reserve",
        "--json",
    ]));
    let results = r["results"].as_array().unwrap();
    assert!(
        results.iter().any(|x| x["page_size_bytes"] == 4096),
        "{r:#}"
    );
    assert!(!results.iter().any(|x| x["page_size_bytes"] == M2), "{r:#}");
    let skipped = &r["skipped"][0];
    assert_eq!(skipped["page_size_bytes"].as_u64(), Some(M2), "{r:#}");
    assert!(
        skipped["reason"].as_str().unwrap().contains("2 MiB pages"),
        "{r:#}"
    );
    assert!(
        skipped["fix"].as_str().unwrap().contains("nr_hugepages"),
        "{r:#}"
    );
    pool.finish();
}

/// `bench prefault` where 1 GiB pages cannot be had (the pool emptied,
/// `--no-reserve`): the 1 GiB rows are skipped with the reason and the
/// boot-time fix, the 2 MiB rows (and their peers) run, exit 0.
#[test]
fn bench_prefault_goes_on_without_1g_pages_and_says_the_boot_fix() {
    let Some(pool) = live!() else { return };
    let g1 = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages";
    if !std::path::Path::new(g1).exists() {
        return pool.skip_lacking(Lack::GiganticPage, "this kernel has no 1 GiB pages");
    }
    pool.ensure_free(M2, 40).expect("40 free 2 MiB pages");
    std::fs::write(g1, "0").expect("empty the 1 GiB pool (the guard restores it)");
    let out = run(&[
        "bench",
        "prefault",
        "--size",
        "32M",
        "--page-size",
        "2m,1g",
        "--threads",
        "1",
        "--runs",
        "1",
        "--no-reserve",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(out);
    let rows = r["results"].as_array().unwrap();
    assert!(
        !rows.is_empty()
            && rows
                .iter()
                .all(|x| x["page_size_bytes"].as_u64() == Some(M2)),
        "{r:#}"
    );
    let skipped = &r["skipped"].as_array().unwrap()[0];
    assert_eq!(skipped["page_size_bytes"].as_u64(), Some(1 << 30), "{r:#}");
    assert!(!skipped["reason"].as_str().unwrap().is_empty(), "{r:#}");
    assert!(
        skipped["fix"].as_str().unwrap().contains("hugepagesz=1G"),
        "{r:#}"
    );
    // The human table says it too.
    let text = String::from_utf8_lossy(
        &run(&[
            "bench",
            "prefault",
            "--size",
            "32M",
            "--page-size",
            "1g",
            "--threads",
            "1",
            "--runs",
            "1",
            "--no-reserve",
            "--no-peers",
        ])
        .stdout,
    )
    .into_owned();
    assert!(text.contains("1G pages not measured"), "{text}");
    assert!(text.contains("hugepagesz=1G"), "{text}");
    pool.finish();
}

/// `bench prefault --size A,B`: rows per size and the growth line per
/// page size and thread count (4 KiB pages: no pool involved).
#[test]
fn bench_prefault_sweeps_size_with_the_slope() {
    let Some(pool) = live!() else { return };
    let r = json(run(&[
        "bench",
        "prefault",
        "--size",
        "16M,32M,64M",
        "--page-size",
        "4k",
        "--threads",
        "1",
        "--runs",
        "1",
        "--no-peers",
        "--json",
    ]));
    assert_eq!(
        r["sizes"],
        serde_json::json!([16 << 20, 32 << 20, 64 << 20]),
        "{r:#}"
    );
    assert_eq!(r["results"].as_array().unwrap().len(), 3, "{r:#}");
    assert_eq!(r["memset"].as_array().unwrap().len(), 3, "{r:#}");
    let g = &r["growth"].as_array().unwrap()[0];
    assert_eq!(g["page_size_bytes"], 4096, "{r:#}");
    assert_eq!(g["gbps"].as_array().unwrap().len(), 3, "{r:#}");
    assert!(g["seconds_per_gb"].as_f64().unwrap().is_finite(), "{r:#}");
    pool.finish();
}

/// `bench scan --procs 3,6`: both counts scanned, every child found
/// attached, the maps baseline timed beside it, the slope, nothing left.
#[test]
fn bench_scan_sweeps_process_counts_against_the_maps_read() {
    let Some(pool) = live!() else { return };
    let r = json(run(&[
        "bench", "scan", "--procs", "6,3", "--size", "1M", "--runs", "2", "--json",
    ]));
    let sweep = r["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 2, "{r:#}");
    for (row, n) in sweep.iter().zip([3u64, 6]) {
        assert_eq!(row["procs"], n, "{r:#}");
        // The children and the bench itself.
        assert_eq!(row["attached_found"].as_u64(), Some(n + 1), "{r:#}");
        assert!(row["maps_median_ms"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(row["maps_bytes"].as_u64().unwrap() > 0, "{r:#}");
        assert_eq!(row["runs_ms"].as_array().unwrap().len(), 2, "{r:#}");
        assert!(row["vs_maps"].as_f64().unwrap() > 0.0, "{r:#}");
        // The same scan by the maps text, found the same.
        assert_eq!(
            row["text_scan_runs_ms"].as_array().unwrap().len(),
            2,
            "{r:#}"
        );
        assert!(row["text_scan_median_ms"].as_f64().unwrap() > 0.0, "{r:#}");
        assert_eq!(row["text_scan_same"], true, "{r:#}");
        assert!(row["cpu_ms"]["scan"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(row["cpu_ms"]["maps_read"].as_f64().unwrap() > 0.0, "{r:#}");
        if hugeshm_sys::procmap_query_supported() {
            // By PROCMAP_QUERY, with the ioctl walk beside it.
            assert_eq!(row["maps_read"], "query", "{r:#}");
            assert!(row["walk_median_ms"].as_f64().unwrap() > 0.0, "{r:#}");
            assert!(row["walk_vmas"].as_u64().unwrap() > 0, "{r:#}");
        } else {
            assert_eq!(row["maps_read"], "text", "{r:#}");
            assert!(row["walk_median_ms"].is_null(), "{r:#}");
        }
    }
    assert_eq!(r["procs"], 6, "{r:#}");
    assert!(r["slope_ms_per_1000"].as_f64().is_some(), "{r:#}");
    assert!(r["maps_slope_ms_per_1000"].as_f64().is_some(), "{r:#}");
    pool.finish();
}

/// `bench attach`: new processes attach a 2 MiB-page SysV region, map
/// every page and verify it; the pages it reserved are given back.
#[test]
fn bench_attach_times_attach_touch_and_verify() {
    let Some(pool) = live!() else { return };
    let r = json(run(&[
        "bench",
        "attach",
        "--size",
        "64M",
        "--page-size",
        "2m",
        "--runs",
        "2",
        "--json",
    ]));
    let runs = r["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{r:#}");
    for run in runs {
        assert_eq!(run["verified_page_size_bytes"].as_u64(), Some(M2), "{r:#}");
        assert!(run["attach_seconds"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(run["touch_seconds"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(run["verify_seconds"].as_f64().unwrap() > 0.0, "{r:#}");
        // The cheap check: hugetlb pages by PROCMAP_QUERY where the kernel
        // has it (6.11+), else smaps; the child fails if the two disagree.
        assert!(run["page_check_seconds"].as_f64().unwrap() > 0.0, "{r:#}");
        let via = if hugeshm_sys::procmap_query_supported() {
            "procmap_query"
        } else {
            "smaps"
        };
        assert_eq!(run["page_check_source"], via, "{r:#}");
    }
    let ready = r["ready_ms"].as_f64().unwrap();
    assert!(r["ready_verified_ms"].as_f64().unwrap() >= ready, "{r:#}");
    assert!(
        r["ready_page_checked_ms"].as_f64().unwrap() >= ready,
        "{r:#}"
    );
    pool.finish();
}

/// A `--duration` that is not a number of seconds above 0 and at most a
/// day is refused before anything is made: `inf` and `1e308` ran no timed
/// run and reported zeros with exit 0.
#[test]
fn bench_durations_that_are_no_time_are_refused() {
    for bench in ["oltp", "dmbc"] {
        for d in ["inf", "nan", "1e308", "-1", "0", "86401"] {
            let arg = format!("--duration={d}");
            let out = run(&["bench", bench, &arg]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{bench} {d}: {err}");
            assert!(
                err.contains("must be a number of seconds above 0 and at most 86400 (a day)"),
                "{bench} {d}: {err}"
            );
            assert!(out.stdout.is_empty(), "{bench} {d} ran");
        }
    }
}

/// A bench whose pool would have to grow past 90% of the memory available
/// is refused before it writes the pool (the kernel would reclaim the
/// host's caches for it and still fall short): the numbers, the most pages
/// that can be added, and the pool unchanged.
#[test]
fn bench_pool_growth_beyond_available_memory_is_refused() {
    let Some(pool) = live!() else { return };
    // Twice the memory available, in 2 MiB pages.
    let size = (meminfo_kib("MemAvailable") * 2 * 1024 / M2 * M2).to_string();
    let out = run(&["bench", "attach", "--size", &size, "--page-size", "2m"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("more than 90% of the memory available (MemAvailable"),
        "{err}"
    );
    assert!(err.contains("of these pages can be added"), "{err}");
    // Before the guard puts the pool back: the bench changed nothing.
    hugeshm_testkit::assert_no_leaks(pool.before(), "the refused bench");
    pool.finish();
}

/// A region made with --dir in a subdirectory of /dev/shm: a search by
/// name does not enter it (rm fails, exit 3, with the --dir hint, and the
/// file stays); `ls` lists it, and its fix and the orphan refusal's name
/// the directory; attach and rm with the same --dir (or --device) find it.
/// Base pages: no pool, no root needed.
#[test]
fn rm_and_attach_take_the_directory_a_region_was_made_in() {
    // Under the test kit's lock: tests comparing host snapshots must not
    // see this directory and region come and go.
    let _pool = observe!();
    let dir = hugeshm_testkit::TempDir::under(std::path::Path::new("/dev/shm"), "t-dir");
    let d = dir.path().to_str().unwrap();
    let n = name("indir");
    let create = [
        "create",
        &n,
        "--backend",
        "posix",
        "--dir",
        d,
        "--page-size",
        "4k",
        "--size",
        "1M",
    ];
    let created = json(run(&[&create[..], &["--json"]].concat()));
    let file = created["path"].as_str().unwrap().to_owned();
    assert!(file.starts_with(d), "{created:#}");

    let out = run(&["rm", &n, "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no region named") && err.contains("--dir"),
        "{err}"
    );
    assert!(
        std::path::Path::new(&file).exists(),
        "rm without --dir removed {file}"
    );

    // Nobody holds it: creating it again is refused, and the fix names the
    // directory in each command it gives; the reuse it gives works.
    let out = run(&create);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let reuse = format!("hugeshm create {n} --backend posix --dir {d} --reclaim reuse");
    let rm = format!("hugeshm rm {n} --backend posix --dir {d}");
    assert!(err.contains(&reuse) && err.contains(&rm), "{err}");
    // `ls` looks below the mount roots: it lists the region, with that fix.
    let ls = String::from_utf8_lossy(&run(&["ls"]).stdout).into_owned();
    assert!(ls.contains(&reuse), "{ls}");
    let listed = json(run(&["ls", "--json"]));
    let ours = listed["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == n.as_str());
    assert_eq!(
        ours.map(|r| &r["object"]["path"]),
        Some(&file.as_str().into()),
        "{listed:#}"
    );
    let fix = &ours.unwrap()["fix"];
    assert_eq!(fix["kind"], "reclaim", "{listed:#}");
    assert_eq!(fix["dir"], d, "{listed:#}");
    assert_eq!(fix["keep_contents"], true, "{listed:#}");
    let reused = json(run(
        &[&create[..], &["--reclaim", "reuse", "--json"]].concat()
    ));
    assert_eq!(reused["path"], file.as_str(), "{reused:#}");

    let attached = json(run(&["attach", &n, "--dir", d, "--json"]));
    assert_eq!(attached["object"], file.as_str(), "{attached:#}");
    let removed = json(run(&["rm", &n, "--device", d, "--json"]));
    assert_eq!(removed["removed"][0]["backend"], "posix", "{removed:#}");
    assert!(!std::path::Path::new(&file).exists());
    std::fs::remove_dir(dir.path()).expect("the directory is empty again");
}

/// A count of 0 (runs, processes) is refused before anything runs, with
/// what is allowed; it used to run a bench of one run, or print a row of
/// zeros for 0 processes.
#[test]
fn bench_counts_of_zero_are_refused() {
    for args in [
        ["bench", "prefault", "--runs", "0"],
        ["bench", "numa", "--runs", "0"],
        ["bench", "attach", "--runs", "0"],
        ["bench", "oltp", "--runs", "0"],
        ["bench", "scan", "--runs", "0"],
        ["bench", "scan", "--procs", "10,0"],
        ["bench", "pagetables", "--procs", "0"],
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("must be at least 1"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} ran");
    }
    let out = run(&["bench", "prefault", "--runs", "two"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a count"), "{err}");
}

/// More processes (`bench scan` and `pagetables` `--procs`, `bench oltp`
/// `--workers`) than the kernel can start, or than fit in the memory
/// available (about 2 MiB each), are refused before the segment or any
/// child is made, with the numbers and the fix; a broken check would start
/// spawning and fail part way.
#[test]
fn bench_process_counts_beyond_the_host_are_refused() {
    let sysctl = |f: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let kernel_most = sysctl("pid_max").min(sysctl("threads-max"));
    let memory_most = meminfo_kib("MemAvailable") / 10 * 9 / 2048;
    let too_many_pids = (kernel_most + 1).min(u64::from(u32::MAX)).to_string();
    for (bench, option) in [
        ("scan", "--procs"),
        ("pagetables", "--procs"),
        ("oltp", "--workers"),
    ] {
        let mut args = vec!["bench", bench, option, &too_many_pids];
        if bench != "oltp" {
            args.extend(["--size", "1M"]);
        }
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{option} {too_many_pids}: ")),
            "{args:?}: {err}"
        );
        // The kernel limit is checked first; on a host with little memory
        // the memory check could be the one that says no instead.
        assert!(
            err.contains("or raise the limit: sysctl -w kernel.") || err.contains("MemAvailable"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?} ran");
    }
    // Twice the count that fits: MemAvailable moves between this reading
    // and the bench's.
    let n = (2 * memory_most).min(kernel_most.saturating_sub(200));
    if n > memory_most / 2 * 3 {
        let n = n.to_string();
        let out = run(&["bench", "scan", "--procs", &n, "--size", "1M"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert!(
            err.contains("more than 90% of the memory available"),
            "{err}"
        );
        assert!(err.contains("pass --procs "), "{err}");
    } else {
        hugeshm_testkit::skip(
            &format!("{} [memory]", hugeshm_testkit::test_name!()),
            format_args!("the kernel's limit ({kernel_most}) comes first"),
        );
    }
}

/// A `/proc/meminfo` field of this host (`MemTotal`, `MemAvailable`), KiB.
fn meminfo_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// `bench prefault --size` beyond what the host can hold beside the memset
/// baseline (which maps that much ordinary memory) is refused with the
/// numbers before anything is mapped or reserved: twice the host's memory,
/// under an address-space limit of the host's memory so that a broken check
/// fails to map instead of waking the OOM killer (which it did once, with
/// 14 GiB of 2 MiB pages reserved beside a 14 GiB baseline; SIGKILLed, the
/// bench could not give the pages back).
#[test]
fn bench_prefault_refuses_a_size_the_host_cannot_hold() {
    let total_kib = meminfo_kib("MemTotal");
    let pool = observe!();
    let out = std::process::Command::new("prlimit")
        .args([
            &format!("--as={}", total_kib * 1024),
            "--",
            env!("CARGO_BIN_EXE_hugeshm"),
            "bench",
            "prefault",
            "--size",
            &format!("{}k", total_kib * 2),
            "--page-size",
            "4k,2m",
            "--threads",
            "1",
            "--runs",
            "1",
        ])
        .output()
        .expect("run prlimit hugeshm");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(out.stdout.is_empty(), "it ran: {err}");
    assert!(err.contains("MemAvailable is "), "{err}");
    assert!(err.contains("pass a --size of at most "), "{err}");
    pool.finish();
}

/// A region on base pages that would be allocated at create (pre-faulted,
/// or a tmpfs file) and is larger than MemAvailable is refused before
/// anything is made, with the numbers: twice the host's memory, so that
/// it is refused on any host and nothing is ever allocated. A posix file
/// is refused without the pre-fault too (tmpfs allocates it at create);
/// the fix offers on-demand faulting only where it applies. Each create
/// runs under an address-space limit of the host's memory (`prlimit
/// --as`), so that a broken check fails to map instead of faulting the
/// host into the OOM killer.
#[test]
fn base_page_regions_larger_than_available_memory_are_refused() {
    let total_kib = meminfo_kib("MemTotal");
    let size = format!("{}k", total_kib * 2);
    let pool = observe!();
    let limit = format!("--as={}", total_kib * 1024);
    for (backend, threads, on_demand) in [
        ("sysv", "2", true),
        ("anon", "2", true),
        ("memfd", "1", true),
        ("posix", "2", false),
        ("posix", "0", false),
    ] {
        let n = name("oom");
        let out = std::process::Command::new("prlimit")
            .args([
                &limit,
                "--",
                env!("CARGO_BIN_EXE_hugeshm"),
                "create",
                &n,
                "--backend",
                backend,
                "--size",
                &size,
                "--page-size",
                "4k",
                "--policy",
                "off",
                "--prefault-threads",
                threads,
                "--hold",
                "--json",
            ])
            .output()
            .expect("run prlimit hugeshm");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{backend}: {err}");
        assert!(
            err.contains("of memory is available (MemAvailable)"),
            "{backend}: {err}"
        );
        assert!(err.contains("to fix: free "), "{backend}: {err}");
        assert_eq!(
            err.contains("--prefault-threads 0"),
            on_demand,
            "{backend}: {err}"
        );
    }
    pool.finish();
}

/// A SysV segment of 2 MiB pages, 2 MiB + 4 KiB long, that uid 65534 made
/// under the key of a region name, and a touched one of base pages under
/// the next key (with `hugeshm-testproc`, which attaches them, touches
/// them and leaves them): root's `attach NAME --backend sysv` refuses the
/// first with its owner and the fix, and neither `attach` nor `ls`
/// attaches either (their `shm_nattch`, `shm_lpid`, `shm_atime` and
/// `shm_dtime` stay as uid 65534 left them; `attach` used to map it
/// read-write first, `ls` read-only to read a resident header); `ls`
/// lists both from `/proc/sysvipc/shm` as `untrusted`.
#[test]
fn attach_and_ls_never_attach_another_users_segment() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 2).expect("2 free 2 MiB pages");
    let n = name("squat");
    let key = hugeshm_region::sysv_key(&n);
    // As uid 65534 in vm.hugetlb_shm_group's group (what SHM_HUGETLB
    // needs without CAP_IPC_LOCK).
    let group = std::fs::read_to_string("/proc/sys/vm/hugetlb_shm_group").unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={}", group.trim()))
        .args(["--inh-caps=-all", "--bounding-set=-all"])
        .arg(hugeshm_testkit::testproc_built().unwrap())
        .args(["--orphan-sysv", "--touch", "--page-size", &M2.to_string()])
        .args(["--key", &format!("{:#x}", key as u32)])
        .arg(format!("sysv-huge:{}", M2 + 4096))
        .arg("sysv-plain:65536")
        .stdin(Stdio::null())
        .output()
        .expect("run hugeshm-testproc as uid 65534");
    let report: hugeshm_testkit::TestProcReport = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    struct Remove(Vec<i32>);
    impl Drop for Remove {
        fn drop(&mut self) {
            for id in &self.0 {
                let _ = hugeshm_sys::shm_remove(*id);
            }
        }
    }
    let guard = Remove(report.objects.iter().map(|o| o.shmid.unwrap()).collect());
    let left: Vec<_> = guard
        .0
        .iter()
        .map(|id| hugeshm_sys::shm_stat(*id).unwrap())
        .collect();
    for st in &left {
        assert_eq!((st.uid, st.nattch), (65534, 0), "{st:?}");
    }
    let untouched = |what: &str| {
        for (id, st) in guard.0.iter().zip(&left) {
            let now = hugeshm_sys::shm_stat(*id).unwrap();
            assert_eq!(&now, st, "{what} attached uid 65534's segment {id}");
        }
    };

    let out = run(&["attach", &n, "--backend", "sysv"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("owned by uid 65534"), "{err}");
    assert!(err.contains("--owner 65534"), "{err}");
    untouched("attach");

    let l = json(run(&["ls", "--json"]));
    untouched("ls");
    for (i, id) in guard.0.iter().enumerate() {
        let entry = l["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["object"]["shmid"] == *id)
            .unwrap_or_else(|| panic!("segment {id} not listed: {l:#}"));
        assert_eq!(entry["state"], "untrusted", "{entry:#}");
        let k = key.wrapping_add(i as i32) as u32;
        assert_eq!(entry["name"], format!("key-{k:08x}"), "{entry:#}");
        assert_eq!(entry["owner"]["uid"], 65534, "{entry:#}");
        assert_eq!(entry["header"], Value::Null, "{entry:#}");
    }
    let text = String::from_utf8_lossy(&run(&["ls"]).stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("key-{:08x}", key as u32)) && l.contains("uid 65534")),
        "{text}"
    );
    untouched("ls");
    drop(guard);
    pool.finish();
}

/// A region name that cannot be one (a path, a space, a leading dot,
/// empty, too long) is a usage error in every command that takes one:
/// exit 2 with clap's "invalid value" and the reason, before anything is
/// looked up (it was exit 3, a failure, from the library's check).
#[test]
fn invalid_region_names_are_usage_errors() {
    let long = "x".repeat(hugeshm_region::MAX_NAME_LEN + 1);
    let names: [(&str, &str); 5] = [
        ("a/../b", "character '/' not allowed"),
        ("a b", "character ' ' not allowed"),
        (".hidden", "starts with '.'"),
        ("", "empty"),
        (&long, "longer than 200 bytes"),
    ];
    let commands: [&[&str]; 8] = [
        &["create", "NAME", "--size", "2M"],
        &["rm", "NAME"],
        &["rm", "NAME", "--backend", "dax", "--dir", "/nonexistent"],
        &["attach", "NAME"],
        &["bench", "oltp-worker", "NAME", "posix", "/nonexistent"],
        &["bench", "attach-time-child", "NAME", "sysv"],
        &["bench", "pagetables-child", "NAME", "sysv"],
        &["bench", "dax-child", "read", "NAME", "0", "1"],
    ];
    for c in commands {
        for (bad, why) in &names {
            let args: Vec<&str> = c
                .iter()
                .map(|&a| if a == "NAME" { *bad } else { a })
                .collect();
            let out = run(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("invalid region name {bad:?}")) && err.contains(why),
                "{args:?}: {err}"
            );
            assert!(err.contains("invalid value"), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
        }
    }
}

/// Root's `ls`, `rm`, `create` and `attach` against a FIFO and a symbolic
/// link (to a root-only file) that uid 65534 put at a region's path, in
/// /dev/shm and in a directory given with --dir (posix and dax): each
/// command ends (run under timeout(1): a hang fails), `ls` lists them as
/// foreign without opening them, the others exit 3 naming the path and
/// what is there, no byte of the link's target is printed (`ls` printed
/// its first 8 as a header), and the planted entries are left alone.
#[test]
fn planted_fifos_and_links_never_hang_or_leak() {
    // What it plants in /dev/shm is host state the other tests compare
    // under this lock; dropped last, after the plants are gone.
    let Some(_pool) = live!() else { return };
    use std::os::unix::fs::PermissionsExt;
    const SECRET: &str = "TOPSECRET-cli-planted";
    let tag = name("planted");
    let secret = std::env::temp_dir().join(format!("{tag}-secret"));
    let dir = std::path::PathBuf::from("/dev/shm").join(format!("{tag}-dir"));
    // Removed however the test ends.
    // A FIFO is opened read-write (never waits) and kept open across its
    // unlink: a process still waiting to open it for reading (another
    // program's old `hugeshm ls` running meanwhile) gets its partner.
    struct Cleanup(Vec<std::path::PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for p in self.0.iter().rev() {
                use rustix::fs::{Mode, OFlags};
                let flags = OFlags::RDWR | OFlags::NONBLOCK | OFlags::NOFOLLOW;
                let partner = rustix::fs::open(p, flags, Mode::empty());
                let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
                drop(partner);
            }
        }
    }
    let mut cleanup = Cleanup(vec![secret.clone(), dir.clone()]);
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let as_nobody = |args: &[&std::ffi::OsStr]| {
        let st = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "setpriv {args:?}");
    };
    // Under timeout(1): 124 when it hung.
    let timed = |args: &[&str]| {
        let c = cmd(args);
        let prog = c.get_program().to_owned();
        let mut t = std::process::Command::new("timeout");
        t.arg("30")
            .arg(prog)
            .args(c.get_args())
            .env("NO_COLOR", "1");
        let out = t.output().unwrap();
        assert_ne!(out.status.code(), Some(124), "{args:?} hung");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let all = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            !all.contains("TOPSECRE") && !all.contains("544f50534543"),
            "{args:?} printed the secret: {all}"
        );
        (out.status.code(), stdout, all)
    };
    let shm = std::path::PathBuf::from("/dev/shm");
    let places: [(&str, &std::path::Path, Option<&str>); 3] = [
        ("posix", &shm, None),
        ("posix", &dir, Some(dir.to_str().unwrap())),
        ("dax", &dir, Some(dir.to_str().unwrap())),
    ];
    for (i, (backend, d, dir_arg)) in places.into_iter().enumerate() {
        for (kind, words) in [
            ("fifo", "a FIFO (named pipe) owned by uid 65534"),
            ("link", "a symbolic link owned by uid 65534"),
        ] {
            let n = format!("{tag}-{kind}{i}");
            let path = d.join(format!("hugeshm.{n}"));
            cleanup.0.push(path.clone());
            if kind == "fifo" {
                as_nobody(&["mkfifo".as_ref(), path.as_os_str()]);
            } else {
                as_nobody(&[
                    "ln".as_ref(),
                    "-s".as_ref(),
                    secret.as_os_str(),
                    path.as_os_str(),
                ]);
            }
            let (code, _, out) = timed(&["ls"]);
            assert!(code == Some(0) && out.contains(words), "ls: {out}");
            let (code, stdout, out) = timed(&["ls", "--json"]);
            assert_eq!(code, Some(0), "ls: {out}");
            let v: Value = serde_json::from_str(&stdout).unwrap();
            let entry = v["regions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == n.as_str())
                .unwrap_or_else(|| panic!("{n} not in ls: {out}"));
            assert_eq!(entry["state"], "foreign", "{entry:#}");
            assert!(
                entry["detail"].as_str().unwrap().contains(words),
                "{entry:#}"
            );
            assert_eq!(entry["owner"]["uid"], 65534, "{entry:#}");
            let mut place = vec!["--backend", backend];
            if let Some(d) = dir_arg {
                place.extend(["--dir", d]);
            }
            for c in [
                vec!["rm", &n],
                vec!["attach", &n],
                vec!["create", &n, "--size", "2M", "--page-size", "4k"],
            ] {
                let args: Vec<&str> = c.iter().copied().chain(place.iter().copied()).collect();
                let (code, _, out) = timed(&args);
                assert_eq!(code, Some(3), "{args:?}: {out}");
                assert!(
                    out.contains(&path.display().to_string()) && out.contains(words),
                    "{args:?}: {out}"
                );
            }
            assert!(
                std::fs::symlink_metadata(&path).is_ok(),
                "{} was removed",
                path.display()
            );
        }
    }
    drop(cleanup);
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&tag))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(!secret.exists());
}
