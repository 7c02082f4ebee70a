//! `hugeshm advise` and `hugeshm apply` on the live host, as root: a plan is
//! reserved and read back from sysfs; a plan the machine cannot hold, or one
//! that would shrink a pool in use, changes nothing; persisting twice into a
//! staging root changes nothing the second time.

mod common;

use common::{hugeshm, json};
use hugeshm_probe::FS_ROOT_ENV;

use hugeshm_testkit::{skip_unless_root, HostState, PoolGuard, TestProc};
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

fn nr_2m() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn apply_reserves_and_reads_back() {
    const T: &str = "apply_reserves_and_reads_back";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
    let before = HostState::capture().unwrap();
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
    pool.restore().expect("restore");
    assert!(before.diff(&HostState::capture().unwrap()).is_empty());
}

#[test]
fn more_than_the_machine_has_changes_nothing() {
    const T: &str = "more_than_the_machine_has_changes_nothing";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
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
    pool.restore().expect("restore");
}

#[test]
fn shrinking_a_pool_in_use_is_refused() {
    const T: &str = "shrinking_a_pool_in_use_is_refused";
    if skip_unless_root(T) {
        return;
    }
    let pool = PoolGuard::new().expect("pool lock");
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
    pool.restore().expect("restore");
}

#[test]
fn persist_twice_into_a_staging_root() {
    const T: &str = "persist_twice_into_a_staging_root";
    if skip_unless_root(T) {
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
