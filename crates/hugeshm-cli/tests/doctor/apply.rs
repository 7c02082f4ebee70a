//! `hugeshm advise` and `hugeshm apply` on the live host, as root: a plan is
//! reserved and read back from sysfs; a plan the machine cannot hold, or one
//! that would shrink a pool in use, changes nothing; persisting twice into a
//! staging root changes nothing the second time.

use crate::common::{hugeshm, json, nr_2m};
use hugeshm_probe::FS_ROOT_ENV;

use hugeshm_testkit::{live, skip_unless_root, test_name, Lack, TestProc};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const M2: u64 = 2 << 20;

/// Every `nr_hugepages` file: host-wide per size, and per node.
fn all_pools() -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    let mut dirs = vec![PathBuf::from("/sys/kernel/mm/hugepages")];
    if let Ok(rd) = std::fs::read_dir("/sys/devices/system/node") {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("node") {
                dirs.push(e.path().join("hugepages"));
            }
        }
    }
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path().join("nr_hugepages");
            let v = std::fs::read_to_string(&p).unwrap().trim().parse().unwrap();
            files.push((p, v));
        }
    }
    files.sort();
    files
}

#[test]
fn apply_reserves_and_reads_back() {
    let Some(pool) = live!() else { return };
    let files = all_pools();
    // A dry run changes nothing.
    let dry = json(hugeshm(&[
        "apply",
        "--size",
        "16M",
        "--spare",
        "0",
        "--dry-run",
        "--json",
    ]));
    assert_eq!(dry["result"]["dry_run"], true);
    assert_eq!(dry["result"]["changes"][0]["requested"], 8);
    assert_eq!(all_pools(), files);

    let out = json(hugeshm(&[
        "apply", "--size", "16M", "--spare", "0", "--json",
    ]));
    let c = &out["result"]["changes"][0];
    assert_eq!(c["page_size_bytes"].as_u64(), Some(M2));
    assert_eq!(c["requested"], 8);
    assert_eq!(c["granted"], 8);
    assert_eq!(out["result"]["complete"], true);
    // The kernel's own count agrees.
    assert_eq!(nr_2m(), 8);
    // advise sees the pool now holds what the plan asks: no change.
    let adv = json(hugeshm(&[
        "advise", "--size", "16M", "--spare", "0", "--json",
    ]));
    assert_eq!(adv["pools"][0]["current_pages"], 8);
    assert_eq!(adv["pools"][0]["pages"], 8);
    pool.finish();
}

#[test]
fn more_than_the_machine_has_changes_nothing() {
    let Some(pool) = live!() else { return };
    let files = all_pools();
    let mem_total: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap();
    let ask = format!("{}G", mem_total / (1 << 20) + 8);
    let out = hugeshm(&["apply", "--size", &ask]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refused") && err.contains("MemAvailable"),
        "{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(all_pools(), files, "every pool is exactly as before");
    pool.finish();
}

/// A pool on a node the host does not have is refused up front with the
/// host's nodes (it was a sysfs path error, its cause printed twice).
#[test]
fn a_node_the_host_does_not_have_is_refused() {
    let Some(pool) = live!() else { return };
    let files = all_pools();
    let out = hugeshm(&["apply", "--size", "64M", "--node", "999"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node 999, which this host does not have (nodes: 0")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(all_pools(), files, "every pool is exactly as before");
    pool.finish();
}

#[test]
fn shrinking_a_pool_in_use_is_refused() {
    let Some(pool) = live!() else { return };
    pool.ensure_free(M2, 4).expect("4 free 2 MiB pages");
    let tp = TestProc::spawn(["sysv-huge:8M", "--touch"]).expect("testproc");
    let files = all_pools();
    let in_use = nr_2m();
    let out = hugeshm(&["apply", "--size", "2M", "--spare", "0"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would shrink to 1 pages"), "{err}");
    assert!(err.contains("in use or reserved"), "{err}");
    assert_eq!(all_pools(), files);
    assert_eq!(nr_2m(), in_use);
    drop(tp);
    pool.finish();
}

#[test]
fn persist_twice_into_a_staging_root() {
    if skip_unless_root(test_name!()) {
        return;
    }
    let root = std::env::temp_dir().join(format!("hugeshm-apply-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let r = root.display().to_string();
    let args = [
        "apply",
        "--size",
        "1G",
        "--persist-only",
        "--root",
        r.as_str(),
        "--json",
    ];
    let first = json(hugeshm(&args));
    let actions: Vec<&str> = first["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert!(actions.iter().all(|a| *a == "created"), "{actions:?}");
    assert_eq!(
        first["result"],
        Value::Null,
        "the running pools are left alone"
    );
    let sysctl = root.join("etc/sysctl.d/60-hugeshm.conf");
    let text = std::fs::read_to_string(&sysctl).unwrap();
    assert!(text.contains("vm.nr_hugepages = 514"), "{text}");
    let limits =
        std::fs::read_to_string(root.join("etc/security/limits.d/60-hugeshm.conf")).unwrap();
    let second = json(hugeshm(&args));
    let actions: Vec<&str> = second["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert!(actions.iter().all(|a| *a == "unchanged"), "{actions:?}");
    assert_eq!(std::fs::read_to_string(&sysctl).unwrap(), text);
    assert_eq!(
        std::fs::read_to_string(root.join("etc/security/limits.d/60-hugeshm.conf")).unwrap(),
        limits
    );
    // A --size region has no owner yet: every user's memlock is set...
    assert!(limits.contains("*        soft    memlock"), "{limits}");
    // ...until --memlock-user names the server's: only that file changes.
    let named: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--memlock-user", "postgres"])
        .collect();
    let third = json(hugeshm(&named));
    let changed: Vec<&str> = third["persisted"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["action"] != "unchanged")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed.len(), 1, "{third:#}");
    assert!(
        changed[0].ends_with("limits.d/60-hugeshm.conf"),
        "{changed:?}"
    );
    let limits =
        std::fs::read_to_string(root.join("etc/security/limits.d/60-hugeshm.conf")).unwrap();
    assert!(limits.contains("postgres soft    memlock"), "{limits}");
    assert!(limits.contains("postgres hard    memlock"), "{limits}");
    assert!(!limits.contains('*'), "{limits}");
    // status on that root sees the persisted value (it differs from the running pool).
    let st = Command::new(env!("CARGO_BIN_EXE_hugeshm"))
        .args(["status", "--json"])
        .env(FS_ROOT_ENV, &root)
        .output()
        .unwrap();
    let st: Value = serde_json::from_slice(&st.stdout).unwrap();
    let codes: Vec<&str> = st["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"persisted-differs"), "{codes:?}");
    std::fs::remove_dir_all(Path::new(&root)).unwrap();
}

fn read_u64(p: &str) -> u64 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn apply_demotes_a_free_gigabyte_page() {
    const G1: &str = "/sys/kernel/mm/hugepages/hugepages-1048576kB";
    const M2DIR: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    const GIB: u64 = 1 << 30;
    let Some(pool) = live!() else { return };
    if !Path::new(&format!("{G1}/demote")).exists() {
        return pool.skip_lacking(
            Lack::Demote,
            format_args!("no {G1}/demote (Linux 5.16+ with 1 GiB pages)"),
        );
    }
    // An empty 2 MiB pool: the plan grows it by exactly one gigabyte.
    std::fs::write(format!("{M2DIR}/nr_hugepages"), "0\n").unwrap();
    if nr_2m() != 0 {
        let left = nr_2m();
        return pool.skip(format_args!(
            "2 MiB pages in use on this host ({left} left)"
        ));
    }
    if let Err(e) = pool.ensure_free(GIB, 1) {
        assert!(e.host_has_none(), "reserving a 1 GiB page: {e}");
        return pool.skip_lacking(
            Lack::GiganticPage,
            format_args!("no 1 GiB page to be had at run time: {e}"),
        );
    }
    let g_before = read_u64(&format!("{G1}/nr_hugepages"));

    // advise says it, and puts it in the plan with --demote.
    let adv = json(hugeshm(&[
        "advise",
        "--size",
        "1G",
        "--page-size",
        "2m",
        "--spare",
        "0",
        "--json",
    ]));
    let w = adv["warnings"].to_string();
    assert!(w.contains("add --demote") && w.contains("/demote"), "{w}");
    assert!(adv.get("demote").is_none(), "{adv:#}");
    let adv = json(hugeshm(&[
        "advise",
        "--size",
        "1G",
        "--page-size",
        "2m",
        "--spare",
        "0",
        "--demote",
        "--json",
    ]));
    assert_eq!(adv["demote"][0]["pages"], 1);
    assert_eq!(
        adv["config"]["runtime"][0],
        "echo 1 > /sys/kernel/mm/hugepages/hugepages-1048576kB/demote   # 1 free 1G page becomes 512 2M pages"
    );

    // apply demotes, then sets the pool: no new contiguous memory needed.
    let out = json(hugeshm(&[
        "apply",
        "--size",
        "1G",
        "--page-size",
        "2m",
        "--spare",
        "0",
        "--demote",
        "--json",
    ]));
    let d = &out["result"]["demoted"][0];
    assert_eq!(d["pages"], 1, "{out:#}");
    assert_eq!(d["before"].as_u64(), Some(g_before));
    assert_eq!(d["after"].as_u64(), Some(g_before - 1));
    assert_eq!(
        (d["to_before"].as_u64(), d["to_after"].as_u64()),
        (Some(0), Some(512))
    );
    assert_eq!(out["result"]["changes"][0]["granted"], 512);
    assert_eq!(out["result"]["complete"], true);
    // The kernel's own counts agree.
    assert_eq!(nr_2m(), 512);
    assert_eq!(read_u64(&format!("{G1}/nr_hugepages")), g_before - 1);
    // The restore reserves a fresh 1 GiB page for the demoted one.
    pool.finish();
}
